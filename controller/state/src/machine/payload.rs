//! What a submission carries that its jobs share: the batch script and the environment.
//! Stored once per submission (an array of a thousand tasks holds one script, not a
//! thousand), kept out of the job records the scheduler and the readers walk, and dropped
//! when the last of its jobs has ended.

use gsched_types::job::{JobId, JobRecord, JobSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    pub script: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Jobs of the submission that have not ended.
    pub live: u32,
}

/// The payload a job's script and environment are kept under: its array's, or its own.
pub fn key_of(job: &JobRecord) -> JobId {
    job.array_task.map(|t| t.array_job_id).unwrap_or(job.id)
}

/// Moves the script and environment out of `spec` into a payload for `live` jobs.
pub fn take(spec: &mut JobSpec, live: u32) -> Payload {
    Payload {
        script: std::mem::take(&mut spec.script),
        env: std::mem::take(&mut spec.env),
        live,
    }
}

/// `spec` with its payload put back (what an agent needs to run the job).
pub fn restore(spec: &JobSpec, payload: Option<&Payload>) -> JobSpec {
    let mut full = spec.clone();
    if let Some(p) = payload {
        full.script = p.script.clone();
        full.env = p.env.clone();
    }
    full
}

/// One job of payload `key` ended: drops the payload with its last job.
pub fn release(payloads: &mut BTreeMap<JobId, Payload>, key: JobId) {
    if let Some(p) = payloads.get_mut(&key) {
        p.live = p.live.saturating_sub(1);
        if p.live == 0 {
            payloads.remove(&key);
        }
    }
}
