//! Acting on jobs: hold, release, requeue, and changing a job's time limit, each one
//! `ActOnJobs` request.

use gsched_cli::client::{Client, die};
use gsched_cli::outln;
use gsched_types::api::{JobAction, JobSelection, JobSelector};

/// `gctl hold|release|requeue`: one request for every job named.
pub fn act(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    action: JobAction,
    jobs: &[String],
    nodes: Vec<String>,
) {
    let select = JobSelection {
        jobs: jobs
            .iter()
            .flat_map(|j| j.split(','))
            .filter(|j| !j.is_empty())
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gctl", e)))
            .collect(),
        nodes,
        ..Default::default()
    };
    if select.is_empty() {
        die(
            "gctl",
            format!("no job given: gctl {} ID...", action.verb()),
        );
    }
    let (summary, refused) = gsched_cli::act_on_jobs(rt, client, action, select, "gctl");
    outln!("{} job(s) {}", summary.count, action.done());
    if refused {
        std::process::exit(1);
    }
}

/// `gctl update JOB --time T` (scontrol update JobId=.. TimeLimit=..): every task of an
/// array named by its id, or none.
pub fn update(rt: &tokio::runtime::Runtime, client: &mut Client, job: &str, time: &str) {
    let limit = gsched_types::parse::time_limit(time)
        .unwrap_or_else(|e| die("gctl", format!("--time {time}: {e}")))
        .unwrap_or(0);
    let select = JobSelection {
        jobs: vec![JobSelector::parse(job).unwrap_or_else(|e| die("gctl", e))],
        ..Default::default()
    };
    let action = JobAction::Update {
        time_limit_s: Some(limit),
    };
    let (summary, refused) = gsched_cli::act_on_jobs(rt, client, action, select, "gctl");
    if refused {
        std::process::exit(1);
    }
    let limit = match limit {
        0 => "UNLIMITED".to_string(),
        t => gsched_types::parse::format_duration(t),
    };
    let jobs = match summary.count {
        1 => String::new(),
        n => format!(" ({n} jobs)"),
    };
    outln!("job {job} time limit set to {limit}{jobs}");
}
