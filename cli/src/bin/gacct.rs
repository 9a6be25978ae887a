//! `gacct`: accounting for finished (and running) jobs, sacct-style, with the failure
//! reason and the evidence behind it.

use clap::Parser;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_types::job::JobRecord;
use gsched_types::parse::format_duration;

/// Job accounting: state, exit code, elapsed time, GPUs, and why a job failed.
#[derive(Parser, Debug)]
#[command(name = "gacct", version, about)]
struct Args {
    #[arg(short = 'j', long = "jobs", value_delimiter = ',')]
    jobs: Vec<String>,
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// One row per attempt of requeued jobs.
    #[arg(long)]
    attempts: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    controllers: Option<String>,
}

fn main() {
    gsched_cli::init();
    let args = Args::parse();
    let ids: Vec<(u64, Option<u32>)> = args
        .jobs
        .iter()
        .map(|j| gsched_cli::parse_job_id(j).unwrap_or_else(|e| die("gacct", e)))
        .collect();
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, true, "gacct");
    let now = list.now_ms;
    let jobs: Vec<&JobRecord> = list
        .jobs
        .iter()
        .filter(|j| args.user.as_ref().is_none_or(|u| &j.spec.user == u))
        .filter(|j| gsched_cli::job_matches(j, &ids))
        .collect();
    if args.json {
        let out: Vec<serde_json::Value> = jobs
            .iter()
            .map(|j| {
                serde_json::json!({
                    "job_id": j.id.0,
                    "display_id": j.display_id(),
                    "name": j.spec.name,
                    "user": j.spec.user,
                    "account": j.spec.account,
                    "partition": j.spec.partition,
                    "state": j.state.name(),
                    "exit_code": j.exit_code,
                    "reason": j.failure.as_ref().map(|f| f.kind.reason_name()),
                    "failure": j.failure,
                    "restarts": j.restarts,
                    "attempts": j.attempts,
                    "gpus": j.spec.total_gpus(),
                    "nodes": j.node_names(),
                    "submit_ms": j.submit_ms,
                    "start_ms": j.start_ms,
                    "end_ms": j.end_ms,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "jobs": out })).expect("json")
        );
        return;
    }
    let mut t = Table::new(&[
        ("JobID", false),
        ("JobName", false),
        ("Partition", false),
        ("User", false),
        ("AllocGPUS", true),
        ("State", false),
        ("ExitCode", false),
        ("Elapsed", true),
        ("Restarts", true),
        ("NodeList", false),
        ("Reason", false),
    ]);
    for j in jobs {
        let exit = match (j.exit_code, j.failure.as_ref().map(|f| &f.kind)) {
            (_, Some(gsched_types::FailureKind::Signal { signal })) => format!("0:{signal}"),
            (Some(c), _) => format!("{c}:0"),
            (None, _) => "0:0".into(),
        };
        let elapsed = match (j.start_ms, j.end_ms) {
            (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
            (Some(s), None) => format_duration(now.saturating_sub(s) / 1000),
            _ => "00:00".into(),
        };
        let nodes = if j.node_names().is_empty() {
            j.attempts
                .last()
                .map(|a| a.nodes.clone())
                .unwrap_or_default()
        } else {
            j.node_names()
        };
        t.row(vec![
            j.display_id(),
            j.spec.name.clone(),
            j.spec.partition.clone().unwrap_or_else(|| "gpu".into()),
            j.spec.user.clone(),
            j.spec.total_gpus().to_string(),
            j.state.name().into(),
            exit,
            elapsed,
            j.restarts.to_string(),
            gsched_types::hostlist::compress(&nodes),
            gsched_cli::format::failure_line(j),
        ]);
        if args.attempts {
            for a in &j.attempts {
                let el = match (a.start_ms, a.end_ms) {
                    (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
                    _ => "-".into(),
                };
                t.row(vec![
                    format!("{}.attempt{}", j.display_id(), a.restart),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    a.state.name().into(),
                    String::new(),
                    el,
                    String::new(),
                    gsched_types::hostlist::compress(&a.nodes),
                    a.failure
                        .as_ref()
                        .map(|f| f.to_string())
                        .unwrap_or_default(),
                ]);
            }
        }
    }
    print!("{}", t.render());
}
