//! `gsim`: trace replay and scheduler benchmarks.

use clap::{Parser, Subcommand};
use gsched_scheduler::Policy;
use gsched_sim::{bench, cluster, engine, trace};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "gsim",
    version,
    about = "Replay GPU job traces through the gsched scheduler and its baselines",
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    replay: Replay,
}

#[derive(clap::Args, Debug)]
struct Replay {
    /// Trace CSV (../shared/traces/philly_2017_pollux.csv or alibaba_openb_2023.csv).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Cluster preset: philly-760 (benchmark) or philly-full.
    #[arg(long)]
    cluster: Option<String>,
    /// Or: this many identical nodes...
    #[arg(long)]
    nodes: Option<u32>,
    /// ...with this many GPUs each...
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// ...and this topology (discovery JSON or topo -m text).
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Policies to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gsched,fifo-backfill,fifo"
    )]
    policies: Vec<String>,
    /// Replay only the first N jobs.
    #[arg(long)]
    limit_jobs: Option<usize>,
    /// Communication slowdown model: on, off or both.
    #[arg(long, default_value = "on")]
    comm_model: String,
    /// Priority weights for gsched: age,fairshare,job_size,short_job,partition,qos.
    #[arg(long)]
    weights: Option<String>,
    /// Virtual seconds between scheduling passes (0: after every event).
    #[arg(long, default_value_t = 0)]
    pass_interval: u64,
    /// Seconds a multi-GPU job may wait for its best placement (the scheduler's
    /// `topology_wait_s`; default: the scheduler's default).
    #[arg(long)]
    topology_wait: Option<u64>,
    /// ...and at most this share of its time limit (`topology_wait_share`).
    #[arg(long)]
    topology_wait_share: Option<f64>,
    /// Reservations over the replay: a JSON list of {"name", "start_s", "duration_s",
    /// "nodes": "HOSTLIST", "maint": bool} (seconds from the trace's start; no trace job
    /// may use them, so every other job must plan around them).
    #[arg(long)]
    reservations: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Time one full scheduling pass on a synthetic cluster.
    BenchPass {
        #[arg(long, default_value_t = 1000)]
        nodes: u32,
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        #[arg(long, default_value_t = 20_000)]
        pending: u32,
        #[arg(long, default_value_t = 9)]
        runs: u32,
        #[arg(long)]
        json: bool,
    },
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("gsim: error: {msg}");
    std::process::exit(1)
}

/// One window of `--reservations`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SimReservation {
    name: String,
    start_s: u64,
    duration_s: u64,
    nodes: String,
    #[serde(default)]
    maint: bool,
}

fn load_reservations(
    path: &std::path::Path,
) -> Result<Vec<gsched_types::reservation::Reservation>, String> {
    use gsched_types::reservation::{Reservation, ResvFlags, ResvNode, ResvResources};
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let list: Vec<SimReservation> = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: {e} (a list of {{name, start_s, duration_s, nodes, maint}})",
            path.display()
        )
    })?;
    list.into_iter()
        .map(|r| {
            let nodes = gsched_types::hostlist::expand(&r.nodes)
                .map_err(|e| format!("{}: reservation {}: {e}", path.display(), r.name))?;
            Ok(Reservation {
                start_ms: r.start_s * 1000,
                end_ms: (r.start_s + r.duration_s) * 1000,
                users: Vec::new(),
                accounts: Vec::new(),
                request: ResvResources::Nodes(nodes.clone()),
                nodes: nodes
                    .into_iter()
                    .map(|node| ResvNode {
                        node,
                        whole: true,
                        gpus: Vec::new(),
                    })
                    .collect(),
                flags: ResvFlags {
                    maint: r.maint,
                    ..ResvFlags::default()
                },
                by: "gsim".into(),
                name: r.name,
            })
        })
        .collect()
}

fn main() {
    let args = Args::parse();
    if let Some(Cmd::BenchPass {
        nodes,
        gpus_per_node,
        pending,
        runs,
        json,
    }) = args.cmd
    {
        let r = bench::bench_pass(nodes, gpus_per_node, pending, runs.max(1));
        if json {
            println!("{}", serde_json::to_string_pretty(&r).expect("json"));
        } else {
            let baseline = match (r.baseline_fifo_backfill_ms_p50, r.ratio_to_baseline) {
                (Some(b), Some(ratio)) => {
                    format!("fifo-backfill baseline p50 {b:.1} ms (ratio {ratio:.2})")
                }
                _ => "fifo-backfill baseline skipped (GSIM_SKIP_BASELINE)".to_string(),
            };
            println!(
                "one pass, {nodes} nodes x {gpus_per_node} GPUs ({:.0}% busy, {} running), {pending} pending: p50 {:.1} ms (min {:.1}, max {:.1}), {} starts; {baseline}",
                r.busy_gpu_share * 100.0,
                r.running,
                r.pass_ms_p50,
                r.pass_ms_min,
                r.pass_ms_max,
                r.started_per_pass,
            );
        }
        return;
    }
    let a = args.replay;
    let Some(trace_path) = a.trace else {
        die("--trace FILE is required (or use `gsim bench-pass`)")
    };
    let spec = match (&a.cluster, a.nodes) {
        (Some(name), _) => cluster::preset(name).unwrap_or_else(|| {
            die(format!(
                "unknown cluster preset '{name}': use philly-760 or philly-full"
            ))
        }),
        (None, Some(n)) => {
            let topo = a.topology.as_ref().map(|p| {
                std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read topology file {}: {e}", p.display()))
                    .and_then(|t| {
                        gsched_topology::parse_topology_file(&t, &p.display().to_string())
                            .map_err(|e| e.to_string())
                    })
                    .unwrap_or_else(|e| die(e))
            });
            cluster::uniform(n, a.gpus_per_node, topo)
        }
        (None, None) => die("give --cluster PRESET or --nodes N [--gpus-per-node G]"),
    };
    let jobs = trace::load(&trace_path, a.limit_jobs).unwrap_or_else(|e| die(e));
    let policies: Vec<Policy> = a
        .policies
        .iter()
        .map(|p| {
            Policy::parse(p).unwrap_or_else(|| {
                die(format!(
                    "unknown policy '{p}': use gsched, fifo-backfill, fifo"
                ))
            })
        })
        .collect();
    let models: Vec<bool> = match a.comm_model.as_str() {
        "on" => vec![true],
        "off" => vec![false],
        "both" => vec![true, false],
        other => die(format!("--comm-model {other}: use on, off or both")),
    };
    let reservations = a
        .reservations
        .as_ref()
        .map(|p| load_reservations(p).unwrap_or_else(|e| die(e)))
        .unwrap_or_default();
    let mut doc = serde_json::Map::new();
    for model in models {
        let mut results = Vec::new();
        for p in &policies {
            let mut opts = engine::SimOptions::new(*p, model);
            opts.pass_interval_s = a.pass_interval;
            opts.topology_wait_s = a.topology_wait;
            opts.topology_wait_share = a.topology_wait_share;
            opts.reservations = reservations.clone();
            if let Some(w) = &a.weights {
                let v: Vec<f64> = w
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse()
                            .unwrap_or_else(|_| die(format!("--weights: bad number '{x}'")))
                    })
                    .collect();
                if v.len() != 6 {
                    die(
                        "--weights takes six numbers: age,fairshare,job_size,short_job,partition,qos",
                    );
                }
                opts.weights = Some(gsched_scheduler::config::PriorityWeights {
                    age: v[0],
                    fairshare: v[1],
                    job_size: v[2],
                    short_job: v[3],
                    partition: v[4],
                    qos: v[5],
                });
            }
            let r = engine::run(&spec, &jobs, &opts);
            if !a.json {
                eprintln!(
                    "{} (comm model {}): {} jobs replayed in {:.1} s ({} passes)",
                    r.policy,
                    if model { "on" } else { "off" },
                    r.jobs,
                    r.wall_s,
                    r.passes
                );
            }
            results.push(r);
        }
        let key = if model {
            "policies"
        } else {
            "policies_comm_model_off"
        };
        let map: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|r| (r.policy.clone(), serde_json::to_value(r).expect("json")))
            .collect();
        doc.insert(key.into(), serde_json::Value::Object(map));
        if !a.json {
            println!(
                "\n{} jobs on {} GPUs, communication model {}",
                jobs.len(),
                spec.total_gpus(),
                if model { "on" } else { "off" }
            );
            println!(
                "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:>8} {:>8}",
                "policy",
                "avg_queue",
                "med_queue",
                "p95_queue",
                "avg_jct",
                "makespan",
                "gpu_util",
                "best_plc",
                "frag_gpu",
                "slowdown"
            );
            for r in &results {
                println!(
                    "{:<14} {:>9.2}h {:>9.2}h {:>9.2}h {:>9.2}h {:>9.1}d {:>7.1}% {:>8.1}% {:>8.1} {:>8.3}",
                    r.policy,
                    r.avg_queue_s / 3600.0,
                    r.median_queue_s / 3600.0,
                    r.p95_queue_s / 3600.0,
                    r.avg_jct_s / 3600.0,
                    r.makespan_s as f64 / 86_400.0,
                    r.gpu_utilization * 100.0,
                    r.best_placement_share * 100.0,
                    r.avg_fragmented_gpus,
                    r.avg_slowdown
                );
            }
            for r in &results {
                let misses: Vec<String> = r
                    .placement_misses
                    .iter()
                    .map(|(gpus, m)| {
                        format!(
                            "{gpus} GPUs: {} (slower link {}, extra nodes {}, cross-switch {})",
                            m.jobs, m.slower_link, m.extra_nodes, m.cross_switch
                        )
                    })
                    .collect();
                println!(
                    "{}: multi-GPU jobs queued {:.2}h on average; off best placement: {}",
                    r.policy,
                    r.avg_queue_s_multi_gpu / 3600.0,
                    if misses.is_empty() {
                        "none".to_string()
                    } else {
                        misses.join("; ")
                    }
                );
            }
            if !reservations.is_empty() {
                for r in &results {
                    println!(
                        "{}: {} job starts overlapped a reservation",
                        r.policy, r.reservation_overlaps
                    );
                }
            }
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Object(doc)).expect("json")
        );
    }
}
