//! What an agent receives to start its share of a job.

use crate::job::{JobId, JobSpec};
use crate::resources::{Allocation, NodeAlloc};
use serde::{Deserialize, Serialize};

/// Everything an agent needs to start its share of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LaunchSpec {
    pub job: JobId,
    /// Array tasks: (array job id, task id).
    pub array: Option<(JobId, u32)>,
    /// The array's shape, for its `SLURM_ARRAY_TASK_*` variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_span: Option<crate::job::ArraySpan>,
    pub attempt: u32,
    pub node_rank: u32,
    pub nodes: Vec<String>,
    pub spec: JobSpec,
    pub allocation: Allocation,
    pub node_alloc: NodeAlloc,
    /// Controller time of the start (ms), the base of the time limit.
    pub start_ms: u64,
    /// Effective time limit (job's, or the partition default).
    pub time_limit_s: Option<u64>,
    /// SIGTERM to SIGKILL when the node stops the step itself (its time limit): the
    /// controllers' `kill_grace_s` (absent from older controllers: 10 s).
    #[serde(default)]
    pub kill_grace_s: Option<u64>,
    /// The idle-GPU policy's threshold for this job's partition: the node counts how long
    /// each GPU stays under it (`GpuUsage::below_s`). Absent: 1% (idle means 0%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_threshold_pct: Option<u8>,
}
