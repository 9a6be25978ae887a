//! The gsched command-line tools (`gsub`, `gqueue`, `ginfo`, `gcancel`, `gacct`, `gctl`):
//! a shared controller client with failover, sbatch-compatible option parsing and
//! Slurm-shaped output.

pub mod certs;
pub mod client;
pub mod format;
pub mod sbatch;

use gsched_types::api::{JobList, JobRow, NodeList};

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

/// Writes to stdout; a reader that went away (`gqueue | head`) ends the tool quietly, as
/// Unix tools do. (SIGPIPE itself stays ignored: a controller that hangs up mid-call must
/// be an error message, not a silent death.)
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// `print!` that ends the tool quietly when stdout's reader is gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_out(format_args!($($arg)*)) };
}

/// `println!` that ends the tool quietly when stdout's reader is gone.
#[macro_export]
macro_rules! outln {
    () => { $crate::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// The single-threaded runtime each tool drives its gRPC calls with.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn decode_doc<T: serde::de::DeserializeOwned>(json: &[u8], tool: &str) -> T {
    serde_json::from_slice(json)
        .unwrap_or_else(|e| client::die(tool, format!("malformed reply from the controller: {e}")))
}

/// Fetches the job table (finished jobs too when asked; allocation, steps and attempts
/// when `detail`); `tool: error: ...` and exit 1 when no controller answers.
pub fn fetch_jobs(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    include_finished: bool,
    detail: bool,
    tool: &str,
) -> JobList {
    let reply = rt
        .block_on(client.call(|mut c| async move {
            c.list_jobs(gsched_proto::pb::ListJobsRequest {
                include_finished,
                detail,
            })
            .await
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    decode_doc(&reply.json, tool)
}

/// Fetches every node's row (with its wiring when `detail`).
pub fn fetch_nodes(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    detail: bool,
    tool: &str,
) -> NodeList {
    let reply = rt
        .block_on(client.call(|mut c| async move {
            c.list_nodes(gsched_proto::pb::ListNodesRequest { detail })
                .await
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    decode_doc(&reply.json, tool)
}

/// Prints a document as pretty JSON (every tool's `--json`).
pub fn print_json<T: serde::Serialize>(doc: &T) {
    let text = serde_json::to_string_pretty(doc).expect("documents serialise");
    write_out(format_args!("{text}\n"));
}

/// Does `job` match one of the ids a user gave (`parse_job_id` results)? `120` names job
/// 120 and every task of array 120; `120_3` names task 3 of array 120 only. No ids match
/// everything.
pub fn job_matches(job: &JobRow, ids: &[(u64, Option<u32>)]) -> bool {
    ids.is_empty()
        || ids.iter().any(
            |(id, task)| match (job.array_job_id, job.array_task_id, task) {
                (array, _, None) => job.job_id.0 == *id || array.is_some_and(|a| a.0 == *id),
                (Some(a), Some(t), Some(task)) => a.0 == *id && t == *task,
                _ => false,
            },
        )
}

#[cfg(test)]
mod tests {
    use super::job_matches;
    use gsched_types::api::{JobContext, JobRow};
    use gsched_types::job::{ArrayTask, JobId, JobRecord, JobSpec};

    fn record(id: u64, array: Option<(u64, u32)>) -> JobRow {
        let mut j = JobRecord::new(JobId(id), JobSpec::simple("j", "u", "true"), 0);
        j.array_task = array.map(|(a, t)| ArrayTask {
            array_job_id: JobId(a),
            task_id: t,
        });
        let ctx = JobContext {
            account: "default".into(),
            partition: "gpu".into(),
            time_limit_s: None,
            expected_start_ms: None,
        };
        JobRow::summary(&j, ctx)
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
