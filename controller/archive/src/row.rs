//! A job's row in and out of the `jobs` table: columns for what is filtered and
//! reported on, the rest in the compressed `detail` document.

use crate::Extra;
use gsched_types::api::JobRow;
use gsched_types::failure::Failure;
use gsched_types::findings::Finding;
use gsched_types::job::{Attempt, NodeRun};
use gsched_types::job::{JobId, JobState};
use gsched_types::notify::Notice;
use gsched_types::resources::Allocation;
use gsched_types::steps::StepRecord;
use gsched_types::usage::{IdleNotice, NodeUsage};
use serde::{Deserialize, Serialize};

/// The columns `read` takes, in order (`detail` comes after them).
pub const COLUMNS: &str = "id, array_job_id, array_task_id, name, user, account, partition, qos, state, reason, exit_code, nodes, node_list, gpus_per_node, gpus, restarts, submit_ms, start_ms, end_ms, time_limit_s";

pub const UPSERT: &str = "INSERT OR REPLACE INTO jobs (id, array_job_id, array_task_id, name, user, account, partition, qos, state, reason, exit_code, nodes, node_list, gpus_per_node, gpus, restarts, submit_ms, start_ms, end_ms, time_limit_s, gpu_model, gpu_s, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)";

/// The parts of a detailed row that have no column.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Detail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allocation: Option<Allocation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "steps")]
    runs: Vec<NodeRun>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    attempts: Vec<Attempt>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "grun_steps")]
    steps: Vec<StepRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<Finding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle: Option<IdleNotice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    usage: Vec<NodeUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wckey: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notices: Vec<Notice>,
}

/// The LZ4 dictionary `detail` documents are compressed against: the keys and shapes a
/// typical document repeats, so a small document does not pay for them. Rows are written
/// with version byte [`DETAIL_V1`]; this text must never change (add a new version).
const DETAIL_DICT: &[u8] = br#"{"failure":{"kind":"nccl_timeout","evidence":"","node":"n1","exit_code":1},"allocation":{"nodes":[{"node":"n1","gpus":[0,1,2,3,4,5,6,7],"cpus":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31],"mem_mb":65536,"nic":"","exclusive":false}],"master_addr":"","master_port":29500},"steps":[{"node":"n1","state":{"state":"exited","code":0,"signal":null},"started_ms":17,"ended_ms":17,"failure":null}],"attempts":[{"restart":0,"nodes":["n1"],"start_ms":17,"end_ms":17,"state":"COMPLETED","failure":null}],"grun_steps":[],"warnings":[],"usage":[{"node":"n1","interval_s":30,"sampled_s":3600,"gpus":[{"gpu":0,"samples":120,"util_sum":0,"util_max":0,"mem_max_mib":0,"idle_samples":0,"power_sum_w":0,"power_samples":120,"below_s":0,"series":[0,0,0,0,0,0,0,0,100,100,100,100,99,99,99,99,98,98,98,98,97,97,97,97],"series_step_s":30},{"gpu":1,"samples":120,"util_sum":0,"util_max":0,"mem_max_mib":0,"idle_samples":0,"power_sum_w":0,"power_samples":120,"below_s":0,"series":[],"series_step_s":30}],"cpu_ms":0,"cpus":4,"mem_max_mib":0,"mem_limit_mib":131072}]}"#;

/// The first byte of a `detail` blob: LZ4 against [`DETAIL_DICT`], size prepended.
const DETAIL_V1: u8 = 1;

fn compress(json: &[u8]) -> Vec<u8> {
    let mut blob = vec![DETAIL_V1];
    blob.extend(lz4_flex::block::compress_prepend_size_with_dict(
        json,
        DETAIL_DICT,
    ));
    blob
}

fn decompress(blob: &[u8]) -> Result<Vec<u8>, String> {
    match blob.split_first() {
        Some((&DETAIL_V1, rest)) => {
            lz4_flex::block::decompress_size_prepended_with_dict(rest, DETAIL_DICT)
                .map_err(|e| e.to_string())
        }
        Some((v, _)) => Err(format!("detail version {v} is newer than this build")),
        None => Err("empty detail".into()),
    }
}

fn opt(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}

/// GPU-seconds the row's attempt held.
pub fn gpu_seconds(job: &JobRow) -> u64 {
    u64::from(job.gpus) * job.elapsed_s(job.end_ms.unwrap_or(0))
}

pub fn upsert(
    stmt: &mut rusqlite::CachedStatement<'_>,
    job: &JobRow,
    extra: &Extra,
) -> rusqlite::Result<()> {
    let detail = Detail {
        failure: job.failure.clone(),
        allocation: job.allocation.clone(),
        runs: job.runs.clone(),
        attempts: job.attempts.clone(),
        steps: job.steps.clone(),
        warnings: job.warnings.clone(),
        idle: job.idle.clone(),
        usage: job.usage.clone(),
        comment: job.comment.clone(),
        wckey: job.wckey.clone(),
        notices: job.notices.clone(),
    };
    let json = serde_json::to_vec(&detail).expect("rows always serialise");
    let blob = (json.len() > 2).then(|| compress(&json));
    stmt.execute(rusqlite::params![
        job.job_id.0 as i64,
        job.array_job_id.map(|a| a.0 as i64),
        job.array_task_id,
        job.name,
        job.user,
        job.account,
        job.partition,
        job.qos,
        job.state.name(),
        job.reason,
        job.exit_code,
        job.nodes,
        job.node_list,
        job.gpus_per_node,
        job.gpus,
        job.attempt,
        job.submit_ms as i64,
        opt(job.start_ms),
        job.end_ms.unwrap_or(job.submit_ms) as i64,
        opt(job.time_limit_s),
        extra.gpu_model,
        gpu_seconds(job) as i64,
        blob,
    ])?;
    Ok(())
}

fn bad(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, rusqlite::types::Type::Blob, what.into())
}

/// The row a `SELECT COLUMNS, detail` row holds.
/// What a summary row keeps of the detail document: the allocation, runs, attempts and
/// usage are skipped while it is parsed, never built.
#[derive(Default, Deserialize)]
struct Summary {
    #[serde(default)]
    failure: Option<Failure>,
    #[serde(default, rename = "grun_steps")]
    steps: Vec<StepRecord>,
    #[serde(default)]
    warnings: Vec<Finding>,
    #[serde(default)]
    idle: Option<IdleNotice>,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    wckey: Option<String>,
    #[serde(default)]
    notices: Vec<Notice>,
}

impl From<Summary> for Detail {
    fn from(s: Summary) -> Detail {
        Detail {
            failure: s.failure,
            steps: s.steps,
            warnings: s.warnings,
            idle: s.idle,
            comment: s.comment,
            wckey: s.wckey,
            notices: s.notices,
            ..Detail::default()
        }
    }
}

/// A row as stored: detailed (allocation, runs, attempts and usage too) or a summary.
pub fn read(r: &rusqlite::Row<'_>, detailed: bool) -> rusqlite::Result<JobRow> {
    let u = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)? as u64) };
    let uo = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(r.get::<_, Option<i64>>(i)?.map(|v| v as u64))
    };
    let state_name: String = r.get(8)?;
    let state = JobState::parse(&state_name)
        .ok_or_else(|| bad(8, format!("unknown state {state_name}")))?;
    let detail: Detail = match r.get::<_, Option<Vec<u8>>>(20)? {
        None => Detail::default(),
        Some(blob) => {
            let json = decompress(&blob).map_err(|e| bad(20, e))?;
            let parsed = if detailed {
                serde_json::from_slice(&json)
            } else {
                serde_json::from_slice::<Summary>(&json).map(Detail::from)
            };
            parsed.map_err(|e| bad(20, e.to_string()))?
        }
    };
    let id = JobId(u(0)?);
    let array_job_id = uo(1)?.map(JobId);
    let array_task_id: Option<u32> = r.get(2)?;
    let display_id = match (array_job_id, array_task_id) {
        (Some(a), Some(t)) => format!("{a}_{t}"),
        _ => id.to_string(),
    };
    Ok(JobRow {
        job_id: id,
        array_job_id,
        array_task_id,
        display_id,
        name: r.get(3)?,
        user: r.get(4)?,
        account: r.get(5)?,
        partition: r.get(6)?,
        qos: r.get(7)?,
        state,
        reason: r.get(9)?,
        failure: detail.failure,
        exit_code: r.get(10)?,
        nodes: r.get(11)?,
        node_list: r.get(12)?,
        gpus_per_node: r.get(13)?,
        gpus: r.get(14)?,
        attempt: r.get(15)?,
        held: false,
        submit_ms: u(16)?,
        start_ms: uo(17)?,
        end_ms: Some(u(18)?),
        expected_start_ms: None,
        time_limit_s: uo(19)?,
        allocation: detail.allocation,
        runs: detail.runs,
        attempts: detail.attempts,
        spec: None,
        steps: detail.steps,
        warnings: detail.warnings,
        idle: detail.idle,
        usage: detail.usage,
        comment: detail.comment,
        wckey: detail.wckey,
        notices: detail.notices,
    })
}
