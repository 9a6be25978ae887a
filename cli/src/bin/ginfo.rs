//! `ginfo`: nodes, their state and free GPUs; `--topo NODE` draws a node's wiring.

use gsched_cli::args::ginfo::Args;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_cli::sinfo::{self, SinfoFormat};
use gsched_cli::slurm_options::{Tool, parse_or_refuse};
use gsched_cli::{out, outln};
use gsched_types::api::NodesDoc;
use gsched_types::node::NodeAdminState;

fn main() {
    let name = if gsched_cli::invoked_as() == "sinfo" {
        "sinfo"
    } else {
        "ginfo"
    };
    // --json is gsched's own document under gsched's name; sinfo refuses it (Slurm's is
    // another schema).
    let allowed: &[&str] = if name == "ginfo" { &["json"] } else { &[] };
    let args: Args = parse_or_refuse(Tool::Sinfo, name, gsched_cli::text_args(name), allowed);
    if args.usage {
        outln!(
            "Usage: sinfo [-abdelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]\n             [-S fields] [-o format] [-O Format] [--federation] [--local]"
        );
        return;
    }
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    if !args.json && args.topo.is_none() && (name == "sinfo" || args.sinfo_listing()) {
        let (format, query) = listing(&args, name);
        loop {
            if !args.noheader && (args.iterate.is_some() || args.long) {
                outln!("{}", chrono::Local::now().format("%a %b %d %H:%M:%S %Y"));
            }
            let list = gsched_cli::fetch_nodes(&rt, &mut client, format.needs_detail(), name);
            out!(
                "{}",
                sinfo::render(&format, &query, &list.nodes, &list.partitions)
            );
            match args.iterate {
                Some(secs) => {
                    outln!();
                    std::thread::sleep(std::time::Duration::from_secs(secs));
                }
                None => return,
            }
        }
    }
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

/// sinfo's format and filters from the options.
fn listing(args: &Args, name: &str) -> (SinfoFormat, sinfo::Query) {
    let format = match (&args.format, &args.long_format) {
        (Some(f), _) => SinfoFormat::parse(f),
        (_, Some(f)) => SinfoFormat::parse_long(f),
        _ => SinfoFormat::parse(
            match (args.summarize, args.node, args.list_reasons, args.long) {
                (true, _, _, _) => sinfo::SUMMARY,
                (_, true, _, false) => sinfo::NODES,
                (_, true, _, true) => sinfo::NODES_LONG,
                (_, _, true, false) => sinfo::REASONS,
                (_, _, true, true) => sinfo::REASONS_LONG,
                (_, _, _, true) => sinfo::LONG,
                _ => sinfo::DEFAULT,
            },
        ),
    }
    .unwrap_or_else(|e| die(name, e));
    let mut states = sinfo::parse_states(&args.states).unwrap_or_else(|e| die(name, e));
    if args.list_reasons && args.states.is_empty() {
        states = sinfo::reason_states();
    }
    let nodes = match &args.nodes {
        None => Vec::new(),
        Some(list) => gsched_types::hostlist::expand(list)
            .unwrap_or_else(|e| die(name, format!("Invalid node name {list}: {e}"))),
    };
    let sort = match &args.sort {
        None => Vec::new(),
        Some(s) => sinfo::parse_sort(s).unwrap_or_else(|e| die(name, e)),
    };
    let query = sinfo::Query {
        per_node: args.node,
        partitions: args.partition.clone(),
        nodes,
        states,
        responding: if args.responding {
            Some(true)
        } else if args.dead {
            Some(false)
        } else {
            None
        },
        exact: args.exact,
        header: !args.noheader,
        sort,
    };
    (format, query)
}
