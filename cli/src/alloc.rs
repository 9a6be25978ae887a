//! Allocations for `galloc` (salloc's twin) and `grun` outside a job: a batch job whose
//! script only holds its nodes, submitted with sbatch's resource options, waited for
//! until it runs, and given back when the caller is done: it ends COMPLETED, as salloc's
//! and srun's own allocations do (cancelled if interrupted while it waits).

use crate::client::{Client, describe, request_id};
use crate::sbatch::{SubArgs, SubmitContext, resolve};
use clap::Parser;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb::SubmitRequest;
use gsched_types::api::{JobAction, JobRow, JobSelection, JobSelector};
use gsched_types::job::{JobState, LaunchMode};
use std::time::Duration;

/// Why an allocation was not given.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("{0}")]
    Options(String),
    #[error("{0} takes a command, not --wrap or --torchrun")]
    NotACommand(String),
    #[error(transparent)]
    Resolve(#[from] crate::sbatch::ResolveError),
    #[error("{0}")]
    Controller(String),
    #[error("the controller returned no job id")]
    NoJobId,
    #[error("interrupted; job allocation {0} cancelled")]
    Interrupted(u64),
    /// `why`: the failure as `gacct` shows it (the node's reason for refusing the
    /// launch, say), led by ": ", or empty.
    #[error("job allocation {id} ended {state} before it ran{why}")]
    Ended {
        id: u64,
        state: &'static str,
        why: String,
    },
    /// `--immediate`: it could not start in time (Slurm's words).
    #[error("Unable to allocate resources: {0}")]
    NotImmediate(&'static str),
}

/// What an allocation's script does: nothing, until the allocation is given back
/// (SIGUSR1 ends it with status 0).
const HOLD: &str =
    "trap 'kill $! 2>/dev/null; exit 0' USR1; while :; do sleep 3600 & wait $!; done";

/// Reads `TOOL [sbatch options] [command [args]]`: the options describe the allocation,
/// the rest is what to run in it.
pub fn parse(tool: &str, raw: &[String]) -> Result<(SubArgs, Vec<String>), AllocError> {
    let mut args =
        SubArgs::try_parse_from(std::iter::once(tool.to_string()).chain(raw.iter().cloned()))
            .map_err(|e| {
                AllocError::Options(
                    e.to_string()
                        .trim_start_matches("error: ")
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string(),
                )
            })?;
    if args.wrap.is_some() || args.torchrun {
        return Err(AllocError::NotACommand(tool.to_string()));
    }
    let command = std::mem::take(&mut args.script);
    args.wrap = Some(HOLD.to_string());
    Ok((args, command))
}

/// Submits the holder job and waits until it runs; prints progress to stderr as salloc
/// does. Returns the running job's row.
/// `immediate`: give up (and cancel it) if it has not started within that long
/// (`--immediate`; zero: at its first scheduling pass).
pub fn allocate(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    args: &SubArgs,
    tool: &str,
    immediate: Option<Duration>,
) -> Result<JobRow, AllocError> {
    let ctx = SubmitContext::here();
    let mut spec = resolve(args, None, None, &ctx)?;
    spec.launch = LaunchMode::Batch;
    if args.job_name.is_none() {
        spec.name = tool.to_string();
    }
    // The holder writes nothing; its output file would only clutter the directory.
    spec.output = Some("/dev/null".into());
    let req = SubmitRequest::carrying(&spec).with_request_id(request_id());
    let id = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.submit(req).await }
        }))
        .map_err(|s| AllocError::Controller(describe(&s)))?
        .job_ids
        .first()
        .copied()
        .ok_or(AllocError::NoJobId)?;
    eprintln!("{tool}: Pending job allocation {id}");
    let query = crate::JobQuery {
        include_finished: true,
        jobs: vec![JobSelector { id, task: None }],
        ..Default::default()
    };
    let mut told_waiting = false;
    let give_up = immediate.map(|d| std::time::Instant::now() + d);
    loop {
        let interrupted = rt.block_on(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => true,
                _ = tokio::time::sleep(Duration::from_millis(200)) => false,
            }
        });
        if interrupted {
            release(rt, client, id);
            return Err(AllocError::Interrupted(id));
        }
        let jobs = crate::fetch_jobs(rt, client, &query, tool).jobs;
        let Some(job) = jobs.into_iter().find(|j| j.job_id.0 == id) else {
            continue;
        };
        match job.state {
            JobState::Running => {
                eprintln!(
                    "{tool}: job {id} has been allocated resources ({})",
                    job.node_list
                );
                return Ok(job);
            }
            JobState::Pending => {
                if let Some(wait) = immediate {
                    // With no time given, the first pass that leaves a reason decides.
                    let out_of_time = if wait.is_zero() {
                        job.reason != "None"
                    } else {
                        give_up.is_some_and(|t| std::time::Instant::now() >= t)
                    };
                    if out_of_time {
                        release(rt, client, id);
                        return Err(AllocError::NotImmediate(if wait.is_zero() {
                            "Immediate execution impossible, insufficient priority"
                        } else {
                            "Requested nodes are busy"
                        }));
                    }
                }
                if !told_waiting {
                    eprintln!(
                        "{tool}: job {id} queued and waiting for resources ({})",
                        job.reason
                    );
                    told_waiting = true;
                }
            }
            other => {
                let why = job
                    .failure
                    .as_ref()
                    .map(|f| format!(": {f}"))
                    .unwrap_or_default();
                return Err(AllocError::Ended {
                    id,
                    state: other.name(),
                    why,
                });
            }
        }
    }
}

/// Gives the allocation back: SIGUSR1 to its holder, which ends it as COMPLETED; a job
/// still pending, or one that has not ended within a few seconds, is cancelled.
pub fn release(rt: &tokio::runtime::Runtime, client: &mut Client, id: u64) {
    let select = JobSelection {
        jobs: vec![JobSelector { id, task: None }],
        ..Default::default()
    };
    let signal = gsched_types::api::JobActionRequest {
        action: JobAction::Signal {
            signal: nix::sys::signal::Signal::SIGUSR1 as i32,
            batch_only: true,
        },
        select: select.clone(),
    };
    let req = gsched_proto::pb::ActOnJobsRequest::carrying(&signal);
    let signalled = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.act_on_jobs(req).await }
        }))
        .is_ok();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while signalled && std::time::Instant::now() < deadline {
        match job_state(rt, client, id) {
            Some(JobState::Running) => std::thread::sleep(Duration::from_millis(100)),
            Some(JobState::Pending) | None => break,
            Some(_) => return,
        }
    }
    let body = gsched_types::api::JobActionRequest {
        action: JobAction::Cancel,
        select,
    };
    let req = gsched_proto::pb::ActOnJobsRequest::carrying(&body).with_request_id(request_id());
    let _ = rt.block_on(client.call(|mut c| {
        let req = req.clone();
        async move { c.act_on_jobs(req).await }
    }));
}

/// A job's state, or `None` when no controller tells it.
fn job_state(rt: &tokio::runtime::Runtime, client: &mut Client, id: u64) -> Option<JobState> {
    let req = gsched_proto::pb::ListJobsRequest {
        include_finished: true,
        jobs: vec![id.to_string()],
        ..Default::default()
    };
    let reply = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.list_jobs(req).await }
        }))
        .ok()?;
    let list = reply.job_rows().ok()?;
    list.jobs.iter().find(|j| j.job_id.0 == id).map(|j| j.state)
}

/// The variables a shell or step started on the submit host gets for an allocation.
pub fn job_env(job: &JobRow) -> Vec<(String, String)> {
    let id = job.job_id.0.to_string();
    vec![
        ("SLURM_JOB_ID".into(), id.clone()),
        ("SLURM_JOBID".into(), id.clone()),
        ("GSCHED_JOB_ID".into(), id),
        ("SLURM_JOB_NODELIST".into(), job.node_list.clone()),
        ("SLURM_NODELIST".into(), job.node_list.clone()),
        ("SLURM_JOB_NUM_NODES".into(), job.nodes.to_string()),
        ("SLURM_NNODES".into(), job.nodes.to_string()),
        ("SLURM_JOB_NAME".into(), job.name.clone()),
        ("SLURM_JOB_PARTITION".into(), job.partition.clone()),
    ]
}
