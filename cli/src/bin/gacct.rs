//! `gacct`: accounting for finished (and running) jobs, sacct-style, with the failure
//! reason and the evidence behind it.

use clap::Parser;
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_cli::out;
use gsched_types::api::{JobSelector, JobsDoc};
use gsched_types::parse::format_duration;

/// Job accounting: state, exit code, elapsed time, GPUs, and why a job failed.
#[derive(Parser, Debug)]
#[command(name = "gacct", version, about)]
struct Args {
    #[arg(short = 'j', long = "jobs", value_delimiter = ',')]
    jobs: Vec<String>,
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Jobs active at or after this time (default: midnight today, or all time with -j):
    /// now-1hour, 2026-11-30T08:00, 08:00, today...
    #[arg(short = 'S', long = "starttime")]
    starttime: Option<String>,
    /// Jobs active at or before this time (default: now).
    #[arg(short = 'E', long = "endtime")]
    endtime: Option<String>,
    /// Only jobs of these names (sacct's --name).
    #[arg(long = "name", value_delimiter = ',')]
    names: Vec<String>,
    /// One row per attempt of requeued jobs.
    #[arg(long)]
    attempts: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    controllers: Option<String>,
}

fn main() {
    let args = Args::parse();
    let when = |t: &Option<String>| {
        t.as_deref()
            .map(|t| gsched_cli::when::parse(t).unwrap_or_else(|e| die("gacct", e)))
    };
    let since_ms = when(&args.starttime).unwrap_or(if args.jobs.is_empty() {
        gsched_cli::when::today_ms()
    } else {
        0
    });
    let query = JobQuery {
        include_finished: true,
        detail: args.json || args.attempts,
        since_ms,
        until_ms: when(&args.endtime).unwrap_or(0),
        users: args.user.iter().cloned().collect(),
        jobs: args
            .jobs
            .iter()
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gacct", e)))
            .collect(),
        ..Default::default()
    };
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let now = list.now_ms;
    let jobs: Vec<_> = list
        .jobs
        .into_iter()
        .filter(|j| args.names.is_empty() || args.names.contains(&j.name))
        .collect();
    if args.json {
        gsched_cli::print_json(&JobsDoc { jobs });
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
    for j in &jobs {
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
        t.row(vec![
            j.display_id.clone(),
            j.name.clone(),
            j.partition.clone(),
            j.user.clone(),
            j.gpus.to_string(),
            j.state.name().into(),
            exit,
            elapsed,
            j.restarts.to_string(),
            j.node_list.clone(),
            gsched_cli::format::failure_line(j),
        ]);
        for s in &j.grun_steps {
            let el = format_duration(s.end_ms.unwrap_or(now).saturating_sub(s.start_ms) / 1000);
            t.row(vec![
                format!("{}.{}", j.display_id, s.step),
                s.name.clone(),
                String::new(),
                String::new(),
                String::new(),
                s.state.name().into(),
                format!("{}:{}", s.exit_code.unwrap_or(0), s.signal.unwrap_or(0)),
                el,
                String::new(),
                gsched_types::hostlist::compress(&s.nodes),
                String::new(),
            ]);
        }
        if args.attempts {
            for a in &j.attempts {
                let el = match (a.start_ms, a.end_ms) {
                    (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
                    _ => "-".into(),
                };
                t.row(vec![
                    format!("{}.attempt{}", j.display_id, a.restart),
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
    out!("{}", t.render());
}
