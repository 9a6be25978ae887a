//! `ginfo`: nodes, their state and free GPUs; `--topo NODE` draws a node's wiring.

use clap::Parser;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_cli::{out, outln};
use gsched_types::api::NodesDoc;
use gsched_types::node::NodeAdminState;

/// Show nodes: state, GPUs free/total with model, CPUs and memory.
#[derive(Parser, Debug)]
#[command(name = "ginfo", version, about)]
struct Args {
    /// Draw this node's GPU/NIC wiring.
    #[arg(long)]
    topo: Option<String>,
    /// Show recent health events.
    #[arg(long)]
    health: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    controllers: Option<String>,
}

fn main() {
    let args = Args::parse();
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let nodes = gsched_cli::fetch_nodes(&rt, &mut client, args.topo.is_some(), "ginfo").nodes;
    if let Some(name) = &args.topo {
        let Some(n) = nodes.iter().find(|n| &n.name == name) else {
            die("ginfo", format!("no node named {name}"))
        };
        let Some(topology) = &n.topology else {
            die("ginfo", format!("the controller sent no wiring for {name}"))
        };
        if args.json {
            gsched_cli::print_json(topology);
            return;
        }
        out!("{}", gsched_topology::render::render(topology, &n.name));
        let used: Vec<String> = n.gpus_used.iter().map(|g| g.to_string()).collect();
        outln!(
            "GPUs in use: {}",
            if used.is_empty() {
                "none".to_string()
            } else {
                used.join(",")
            }
        );
        if !n.bad_gpus.is_empty() {
            outln!("GPUs withheld as unhealthy: {:?}", n.bad_gpus);
        }
        return;
    }
    if args.json {
        gsched_cli::print_json(&NodesDoc { nodes });
        return;
    }
    let mut t = Table::new(&[
        ("NODE", false),
        ("STATE", false),
        ("GPUS(free/total)", false),
        ("GPU_MODEL", false),
        ("CPUS(A/T)", false),
        ("MEMORY_MB(A/T)", false),
        ("REASON", false),
    ]);
    for n in &nodes {
        let reason = match (&n.admin, n.online, n.responding) {
            (NodeAdminState::Drain { reason, by, .. }, _, _) => format!("{reason} [{by}]"),
            (_, false, _) => "lost (no agent)".into(),
            (_, true, false) => "not responding".into(),
            _ if !n.fencing.is_empty() => format!(
                "fencing: waiting for the agent to stop {} step(s) of ended jobs",
                n.fencing.len()
            ),
            _ => String::new(),
        };
        // sinfo's mark for a node whose agent does not answer.
        let star = if n.online && !n.responding { "*" } else { "" };
        t.row(vec![
            n.name.clone(),
            format!("{}{star}", n.state.name()),
            format!("{}/{}", n.gpus_free, n.gpus_total),
            n.gpu_model.clone().unwrap_or_else(|| "-".into()),
            format!("{}/{}", n.cpus_used, n.cpus_total),
            format!("{}/{}", n.memory_used_mb, n.memory_mb),
            reason,
        ]);
    }
    out!("{}", t.render());
    if args.health {
        for n in &nodes {
            for h in &n.health {
                outln!("{} {:?} {}: {}", n.name, h.severity, h.kind, h.message);
            }
        }
    }
}
