//! `gctl`: cluster administration and inspection (scontrol's role): controller status,
//! job and node details, drain/resume, requeue/hold/release, controller membership.

use clap::{Parser, Subcommand};
use gsched_cli::client::{Client, controller_list, current_user, describe, die, request_id};
use gsched_proto::pb::{Empty, HoldRequest, JobRequest, MembershipRequest, NodeAdminRequest};
use gsched_types::job::JobRecord;

#[derive(Parser, Debug)]
#[command(name = "gctl", version, about = "gsched administration")]
struct Args {
    #[arg(long, global = true)]
    controllers: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Role, term, commit/applied index, lag and state digest of every reachable controller.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Details of a job or node.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Drain or resume a node.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Add or remove a controller (one change at a time).
    Controllers {
        #[command(subcommand)]
        action: Members,
    },
    /// Requeue a running job.
    Requeue { job: u64 },
    /// Hold a pending job.
    Hold { job: u64 },
    /// Release a held job.
    Release { job: u64 },
}

#[derive(Subcommand, Debug)]
enum Show {
    Job {
        job: String,
        #[arg(long)]
        json: bool,
    },
    Node {
        node: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum NodeAction {
    Drain {
        node: String,
        #[arg(long)]
        reason: String,
    },
    Resume {
        node: String,
    },
}

#[derive(Subcommand, Debug)]
enum Members {
    /// ID=HOST:PORT
    Add {
        member: String,
    },
    Remove {
        id: u64,
    },
}

fn main() {
    gsched_cli::init();
    let args = Args::parse();
    let rt = gsched_cli::runtime();
    let addrs = controller_list(args.controllers.as_deref());
    let mut client = Client::new(addrs.clone());
    let me = current_user();
    match args.cmd {
        Cmd::Status { json } => rt.block_on(status(addrs, json)),
        Cmd::Show {
            what: Show::Job { job, json },
        } => {
            let (id, task) = gsched_cli::parse_job_id(&job).unwrap_or_else(|e| die("gctl", e));
            let jobs = gsched_cli::fetch_jobs(&rt, &mut client, true, "gctl").jobs;
            let Some(j) = jobs.iter().find(|j| match task {
                Some(t) => j
                    .array_task
                    .is_some_and(|a| a.array_job_id.0 == id && a.task_id == t),
                None => j.id.0 == id,
            }) else {
                die(
                    "gctl",
                    format!(
                        "job {job} not found (finished jobs are kept up to the retention limit)"
                    ),
                )
            };
            if json {
                println!("{}", serde_json::to_string_pretty(j).expect("json"));
            } else {
                print_job(j);
            }
        }
        Cmd::Show {
            what: Show::Node { node, json },
        } => {
            let reply = rt
                .block_on(client.call(|mut c| async move { c.list_nodes(Empty {}).await }))
                .unwrap_or_else(|s| die("gctl", describe(&s)));
            let doc: serde_json::Value = serde_json::from_slice(&reply.json).unwrap_or_default();
            let Some(n) = doc["nodes"]
                .as_array()
                .and_then(|a| a.iter().find(|n| n["record"]["name"] == *node))
            else {
                die("gctl", format!("no node named {node}"))
            };
            if json {
                println!("{}", serde_json::to_string_pretty(n).expect("json"));
            } else {
                let rec: gsched_types::NodeRecord =
                    serde_json::from_value(n["record"].clone()).unwrap_or_else(|e| die("gctl", e));
                println!(
                    "NodeName={} State={} Online={} Address={} TrainingAddr={}",
                    rec.name,
                    rec.drain_reason()
                        .map(|r| format!("DRAIN Reason=\"{r}\""))
                        .unwrap_or_else(|| "UP".into()),
                    rec.online,
                    rec.address,
                    rec.training_addr
                );
                println!(
                    "   GPUs={} Model={} GPUsInUse={} BadGPUs={:?} Jobs={}",
                    rec.topology.gpus.len(),
                    rec.topology.gpu_model().unwrap_or("-"),
                    n["gpus_used"],
                    rec.bad_gpus,
                    n["jobs"]
                );
                println!(
                    "   CPUsInUse={} MemoryUsedMB={} Features={:?} AgentVersion={}",
                    n["cpus_used"], n["mem_used_mb"], rec.features, rec.agent_version
                );
                for h in &rec.health {
                    println!("   Health: {:?} {} {}", h.severity, h.kind, h.message);
                }
            }
        }
        Cmd::Node { action } => {
            let (node, act, reason) = match action {
                NodeAction::Drain { node, reason } => (node, "drain", reason),
                NodeAction::Resume { node } => (node, "resume", String::new()),
            };
            let req = NodeAdminRequest {
                request_id: request_id(),
                node: node.clone(),
                action: act.into(),
                reason,
                user: me,
            };
            let r = rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.node_admin(req).await }
            }));
            match r {
                Ok(r) => println!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Controllers { action } => {
            let req = match action {
                Members::Add { member } => {
                    let (id, addr) = member
                        .split_once('=')
                        .unwrap_or_else(|| die("gctl", "use gctl controllers add ID=HOST:PORT"));
                    let id: u64 = id
                        .parse()
                        .unwrap_or_else(|_| die("gctl", format!("invalid controller id '{id}'")));
                    MembershipRequest {
                        action: "add".into(),
                        id,
                        address: addr.into(),
                    }
                }
                Members::Remove { id } => MembershipRequest {
                    action: "remove".into(),
                    id,
                    address: String::new(),
                },
            };
            let r = rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.membership(req).await }
            }));
            match r {
                Ok(r) => println!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Requeue { job } => {
            let req = JobRequest {
                request_id: request_id(),
                job_id: job,
                user: me,
            };
            match rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.requeue(req).await }
            })) {
                Ok(r) => println!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Hold { job } => hold(&rt, &mut client, job, me, true),
        Cmd::Release { job } => hold(&rt, &mut client, job, me, false),
    }
}

fn hold(rt: &tokio::runtime::Runtime, client: &mut Client, job: u64, me: String, hold: bool) {
    {
        {
            let req = HoldRequest {
                request_id: request_id(),
                job_id: job,
                user: me,
                hold,
            };
            match rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.hold(req).await }
            })) {
                Ok(r) => println!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
    }
}

fn print_job(j: &JobRecord) {
    let s = &j.spec;
    println!(
        "JobId={} JobName={} UserId={} Account={} Partition={}",
        j.display_id(),
        s.name,
        s.user,
        s.account.as_deref().unwrap_or("default"),
        s.partition.as_deref().unwrap_or("gpu")
    );
    println!(
        "   JobState={} Reason={} Restarts={} ExitCode={}",
        j.state.name(),
        if j.state == gsched_types::JobState::Pending {
            j.reason.to_string()
        } else {
            j.failure
                .as_ref()
                .map(|f| f.kind.reason_name())
                .unwrap_or_else(|| "None".into())
        },
        j.restarts,
        j.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    println!(
        "   NumNodes={} GPUsPerNode={} GpuType={} NTasks={} CPUsPerTask={} Mem={} TimeLimit={}",
        s.nodes,
        s.gpus_per_node,
        s.gpu_type.as_deref().unwrap_or("-"),
        s.ntasks,
        s.cpus_per_task,
        s.mem_mb
            .map(|m| format!("{m}M"))
            .unwrap_or_else(|| "default".into()),
        s.time_limit_s
            .map(gsched_types::parse::format_duration)
            .unwrap_or_else(|| "UNLIMITED".into())
    );
    println!(
        "   WorkDir={} StdOut={}",
        s.workdir,
        s.output.as_deref().unwrap_or("gsched-%j.out")
    );
    if let Some(a) = &j.allocation {
        println!(
            "   MasterAddr={} MasterPort={}",
            a.master_addr, a.master_port
        );
        for (rank, n) in a.nodes.iter().enumerate() {
            println!(
                "   Node[{rank}]={} GPUs={:?} CPUs={} Mem={}M NIC={}",
                n.node,
                n.gpus,
                gsched_types::cpulist::format(&n.cpus),
                n.mem_mb,
                n.nic.as_deref().unwrap_or("-")
            );
        }
    }
    for st in &j.steps {
        println!(
            "   Step[{}]: {:?}{}",
            st.node,
            st.state,
            st.failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = &j.failure {
        println!("   Failure={}", f.kind.reason_name());
        println!("   Evidence={}", f.evidence);
    }
    for a in &j.attempts {
        println!(
            "   Attempt[{}]: {} on {} {}",
            a.restart,
            a.state.name(),
            gsched_types::hostlist::compress(&a.nodes),
            a.failure
                .as_ref()
                .map(|f| f.to_string())
                .unwrap_or_default()
        );
    }
}

async fn status(addrs: Vec<String>, json: bool) {
    let mut seen: Vec<String> = addrs.clone();
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let mut i = 0;
    while i < seen.len() {
        let addr = seen[i].clone();
        i += 1;
        match Client::call_on(&addr, |mut c| async move { c.status(Empty {}).await }).await {
            Ok(r) => {
                let v: serde_json::Value = serde_json::from_slice(&r.json).unwrap_or_default();
                for (_, a) in v["peers"].as_object().into_iter().flatten() {
                    if let Some(a) = a.as_str()
                        && !seen.iter().any(|s| s == a)
                    {
                        seen.push(a.to_string());
                    }
                }
                if !rows.iter().any(|r| r["id"] == v["id"]) {
                    rows.push(v);
                }
            }
            Err(e) => {
                if !json {
                    eprintln!("gctl: {addr}: {}", e.message());
                }
            }
        }
    }
    rows.sort_by_key(|r| r["id"].as_u64().unwrap_or(0));
    let leader_commit = rows
        .iter()
        .filter(|r| r["role"] == "leader")
        .filter_map(|r| r["commit_index"].as_u64())
        .max()
        .unwrap_or(0);
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r["id"], "address": r["address"], "role": r["role"], "term": r["term"], "leader_id": r["leader_id"],
                    "commit_index": r["commit_index"], "applied_index": r["applied_index"], "state_digest": r["state_digest"],
                    "lag": leader_commit.saturating_sub(r["applied_index"].as_u64().unwrap_or(0)),
                    "snapshot_index": r["snapshot_index"], "first_index": r["first_index"], "last_index": r["last_index"],
                    "voters": r["voters"], "disk_bytes": r["disk_bytes"], "jobs": r["jobs"], "nodes": r["nodes"], "agents_connected": r["agents_connected"],
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "controllers": out })).expect("json")
        );
        return;
    }
    if rows.is_empty() {
        die("gctl", "no controller answered");
    }
    let mut t = gsched_cli::format::Table::new(&[
        ("ID", true),
        ("ADDRESS", false),
        ("ROLE", false),
        ("TERM", true),
        ("COMMIT", true),
        ("APPLIED", true),
        ("LAG", true),
        ("DIGEST", false),
        ("JOBS", true),
        ("NODES", true),
        ("DISK_MB", true),
    ]);
    for r in &rows {
        t.row(vec![
            r["id"].to_string(),
            r["address"].as_str().unwrap_or("").into(),
            r["role"].as_str().unwrap_or("").into(),
            r["term"].to_string(),
            r["commit_index"].to_string(),
            r["applied_index"].to_string(),
            leader_commit
                .saturating_sub(r["applied_index"].as_u64().unwrap_or(0))
                .to_string(),
            r["state_digest"].as_str().unwrap_or("").into(),
            r["jobs"].to_string(),
            r["nodes"].to_string(),
            format!("{:.1}", r["disk_bytes"].as_f64().unwrap_or(0.0) / 1e6),
        ]);
    }
    print!("{}", t.render());
}
