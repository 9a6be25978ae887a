//! Acting on jobs: hold, release, requeue, and changing a job's time limit.

use gsched_cli::client::{Client, describe, die, request_id};
use gsched_cli::outln;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb;
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
    let done = match action {
        JobAction::Cancel => "cancelled",
        JobAction::Hold => "held",
        JobAction::Release => "released",
        JobAction::Requeue => "requeued",
    };
    outln!("{} job(s) {done}", summary.count);
    if refused {
        std::process::exit(1);
    }
}

/// `gctl update JOB --time T` (scontrol update JobId=.. TimeLimit=..).
pub fn update(rt: &tokio::runtime::Runtime, client: &mut Client, job: u64, time: &str) {
    let limit = gsched_types::parse::time_limit(time)
        .unwrap_or_else(|e| die("gctl", format!("--time {time}: {e}")))
        .unwrap_or(0);
    let body = gsched_types::api::UpdateJobRequest {
        job,
        time_limit_s: Some(limit),
    };
    let req = pb::UpdateJobRequest::carrying(&body).with_request_id(request_id());
    match rt.block_on(client.call(|mut c| {
        let req = req.clone();
        async move { c.update_job(req).await }
    })) {
        Ok(r) => outln!("{}", r.message),
        Err(s) => die("gctl", describe(&s)),
    }
}
