//! The gsched command-line tools (`gsub`, `gqueue`, `ginfo`, `gcancel`, `gacct`, `gctl`):
//! a shared controller client with failover, sbatch-compatible option parsing and
//! Slurm-shaped output.

pub mod client;
pub mod format;
pub mod sbatch;

/// Parses a job id as users write it: `123`, or `120_3` for a task of array 120 (returns
/// the array id and task).
pub fn parse_job_id(text: &str) -> Result<(u64, Option<u32>), String> {
    let bad = || format!("invalid job id '{text}': use a number like 123 or 120_3");
    match text.split_once('_') {
        Some((a, t)) => Ok((
            a.parse().map_err(|_| bad())?,
            Some(t.parse().map_err(|_| bad())?),
        )),
        None => Ok((text.parse().map_err(|_| bad())?, None)),
    }
}

/// Process setup every tool does first: die quietly on a closed pipe (`gqueue | head`)
/// instead of panicking, as Unix tools do.
pub fn init() {
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The single-threaded runtime each tool drives its gRPC calls with.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The job table as `Jobs.ListJobs` returns it.
pub struct JobList {
    pub jobs: Vec<gsched_types::job::JobRecord>,
    /// Expected start times of pending jobs (job id as text -> ms since the epoch).
    pub estimates: std::collections::BTreeMap<String, u64>,
    /// The controller's clock when it answered.
    pub now_ms: u64,
}

/// Fetches the job table (finished jobs too when asked); `tool: error: ...` and exit 1
/// when no controller answers or the reply is malformed.
pub fn fetch_jobs(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    include_finished: bool,
    tool: &str,
) -> JobList {
    let reply = rt
        .block_on(client.call(|mut c| async move {
            c.list_jobs(gsched_proto::pb::ListJobsRequest { include_finished })
                .await
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    let doc: serde_json::Value = serde_json::from_slice(&reply.json)
        .unwrap_or_else(|e| client::die(tool, format!("bad reply: {e}")));
    JobList {
        jobs: serde_json::from_value(doc["jobs"].clone())
            .unwrap_or_else(|e| client::die(tool, format!("bad reply: {e}"))),
        estimates: serde_json::from_value(doc["estimates"].clone()).unwrap_or_default(),
        now_ms: doc["now_ms"].as_u64().unwrap_or(0),
    }
}

/// Does `job` match one of the ids a user gave (`parse_job_id` results)? `120` names job
/// 120 and every task of array 120; `120_3` names task 3 of array 120 only. No ids match
/// everything.
pub fn job_matches(job: &gsched_types::job::JobRecord, ids: &[(u64, Option<u32>)]) -> bool {
    ids.is_empty()
        || ids.iter().any(|(id, task)| match (job.array_task, task) {
            (_, None) => job.id.0 == *id || job.array_task.is_some_and(|t| t.array_job_id.0 == *id),
            (Some(t), Some(task)) => t.array_job_id.0 == *id && t.task_id == *task,
            (None, Some(_)) => false,
        })
}

#[cfg(test)]
mod tests {
    use super::job_matches;
    use gsched_types::job::{ArrayTask, JobId, JobRecord, JobSpec};

    fn record(id: u64, array: Option<(u64, u32)>) -> JobRecord {
        let mut j = JobRecord::new(JobId(id), JobSpec::simple("j", "u", "true"), 0);
        j.array_task = array.map(|(a, t)| ArrayTask {
            array_job_id: JobId(a),
            task_id: t,
        });
        j
    }

    #[test]
    fn ids_name_jobs_arrays_and_single_tasks() {
        let task0 = record(120, Some((120, 0)));
        let task3 = record(123, Some((120, 3)));
        let plain = record(7, None);
        assert!(job_matches(&plain, &[]));
        assert!(job_matches(&plain, &[(7, None)]));
        assert!(job_matches(&task0, &[(120, None)]) && job_matches(&task3, &[(120, None)]));
        assert!(job_matches(&task3, &[(120, Some(3))]));
        assert!(
            !job_matches(&task0, &[(120, Some(3))]),
            "120_3 is task 3 only, not the array's first job"
        );
        assert!(!job_matches(&plain, &[(7, Some(0))]));
    }
}
