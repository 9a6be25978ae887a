//! `ginfo`: nodes, their state and free GPUs; `--topo NODE` draws a node's wiring.

use clap::Parser;
use gsched_cli::client::{Client, controller_list, describe, die};
use gsched_cli::format::Table;
use gsched_proto::pb::Empty;
use gsched_types::node::NodeRecord;

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

fn state_of(rec: &NodeRecord, used_gpus: usize, jobs: usize) -> String {
    let base = if !rec.online {
        "down"
    } else if jobs == 0 {
        "idle"
    } else if used_gpus >= rec.topology.gpus.len() && !rec.topology.gpus.is_empty() {
        "alloc"
    } else {
        "mix"
    };
    match (rec.is_drained(), jobs > 0) {
        (true, true) => "drng".into(),
        (true, false) => {
            if rec.online {
                "drain".into()
            } else {
                "down+drain".into()
            }
        }
        _ => base.into(),
    }
}

fn main() {
    gsched_cli::init();
    let args = Args::parse();
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let reply = rt
        .block_on(client.call(|mut c| async move { c.list_nodes(Empty {}).await }))
        .unwrap_or_else(|s| die("ginfo", describe(&s)));
    let doc: serde_json::Value = serde_json::from_slice(&reply.json)
        .unwrap_or_else(|e| die("ginfo", format!("bad reply: {e}")));
    let nodes = doc["nodes"].as_array().cloned().unwrap_or_default();
    if let Some(name) = &args.topo {
        let Some(n) = nodes.iter().find(|n| n["record"]["name"] == *name) else {
            die("ginfo", format!("no node named {name}"))
        };
        let rec: NodeRecord =
            serde_json::from_value(n["record"].clone()).unwrap_or_else(|e| die("ginfo", e));
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&rec.topology).expect("json")
            );
        } else {
            print!(
                "{}",
                gsched_topology::render::render(&rec.topology, &rec.name)
            );
            let used: Vec<u64> = n["gpus_used"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
                .unwrap_or_default();
            println!(
                "GPUs in use: {}",
                if used.is_empty() {
                    "none".to_string()
                } else {
                    used.iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                }
            );
            if !rec.bad_gpus.is_empty() {
                println!("GPUs withheld as unhealthy: {:?}", rec.bad_gpus);
            }
        }
        return;
    }
    if args.json {
        let out: Vec<serde_json::Value> = nodes
            .iter()
            .map(|n| {
                let rec: NodeRecord =
                    serde_json::from_value(n["record"].clone()).unwrap_or_else(|e| die("ginfo", e));
                let used = n["gpus_used"].as_array().map(|a| a.len()).unwrap_or(0);
                let jobs = n["jobs"].as_array().map(|a| a.len()).unwrap_or(0);
                serde_json::json!({
                    "name": rec.name,
                    "state": state_of(&rec, used, jobs),
                    "online": rec.online,
                    "drain_reason": rec.drain_reason(),
                    "gpus_total": rec.topology.gpus.len(),
                    "gpus_used": n["gpus_used"],
                    "gpus_free": rec.topology.gpus.len().saturating_sub(used + rec.bad_gpus.len()),
                    "bad_gpus": rec.bad_gpus,
                    "gpu_model": rec.topology.gpu_model(),
                    "cpus_total": n["capacity"]["cpus"].as_array().map(|a| a.len()),
                    "cpus_used": n["cpus_used"],
                    "memory_mb": n["capacity"]["mem_mb"],
                    "memory_used_mb": n["mem_used_mb"],
                    "jobs": n["jobs"],
                    "training_addr": rec.training_addr,
                    "health": rec.health,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "nodes": out })).expect("json")
        );
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
        let rec: NodeRecord =
            serde_json::from_value(n["record"].clone()).unwrap_or_else(|e| die("ginfo", e));
        let used = n["gpus_used"].as_array().map(|a| a.len()).unwrap_or(0);
        let jobs = n["jobs"].as_array().map(|a| a.len()).unwrap_or(0);
        let total = rec.topology.gpus.len();
        let free = total.saturating_sub(
            used + rec
                .bad_gpus
                .iter()
                .filter(|g| {
                    !n["gpus_used"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(u64::from(**g))))
                })
                .count(),
        );
        let reason = match (&rec.admin, rec.online) {
            (gsched_types::node::NodeAdminState::Drain { reason, by, .. }, _) => {
                format!("{reason} [{by}]")
            }
            (_, false) => "not responding".into(),
            _ => String::new(),
        };
        t.row(vec![
            rec.name.clone(),
            state_of(&rec, used, jobs),
            format!("{free}/{total}"),
            rec.topology.gpu_model().unwrap_or("-").to_string(),
            format!(
                "{}/{}",
                n["cpus_used"],
                n["capacity"]["cpus"]
                    .as_array()
                    .map(|a| a.len())
                    .unwrap_or(0)
            ),
            format!("{}/{}", n["mem_used_mb"], n["capacity"]["mem_mb"]),
            reason,
        ]);
    }
    print!("{}", t.render());
    if args.health {
        for n in &nodes {
            let rec: NodeRecord =
                serde_json::from_value(n["record"].clone()).unwrap_or_else(|e| die("ginfo", e));
            for h in &rec.health {
                println!("{} {:?} {}: {}", rec.name, h.severity, h.kind, h.message);
            }
        }
    }
}
