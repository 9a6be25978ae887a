//! The commands that change cluster state, as they are written to the Raft log.
//!
//! Each log entry is an [`Envelope`]: a format version, the client's request id (for
//! exactly-once submission across retries and failovers), the leader's timestamp (the state
//! machine never reads a clock), and one [`Command`]. New commands are appended as new
//! variants; existing variants and their fields are never renamed or removed, so old logs
//! still decode (golden encodings are checked in `tests/golden/`).

use gsched_scheduler::SchedConfig;
use gsched_types::Failure;
use gsched_types::job::{JobId, JobSpec, PendingReason};
use gsched_types::node::HealthEvent;
use gsched_types::resources::Allocation;
use gsched_types::topology::Topology;
use serde::{Deserialize, Serialize};

/// The log format version this build writes. Decoding accepts every version up to it.
pub const FORMAT_VERSION: u16 = 1;

/// One Raft log entry's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub v: u16,
    /// Client-chosen id; a retried request with the same id is applied once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Leader's wall clock when it proposed the command (ms since the epoch).
    pub at_ms: u64,
    pub cmd: Command,
}

/// A job placement to commit (from a scheduler plan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartJob {
    pub job: JobId,
    pub allocation: Allocation,
}

/// What an agent knows about a step when it (re)registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownStep {
    pub job: JobId,
    pub attempt: u32,
}

/// Every state change gsched makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    SubmitJob {
        spec: JobSpec,
    },
    CancelJob {
        job: JobId,
        by: String,
        admin: bool,
    },
    /// Commit placements; each is re-checked with `fits` and skipped if stale.
    StartJobs {
        starts: Vec<StartJob>,
    },
    SetPendingReasons {
        reasons: Vec<(JobId, PendingReason)>,
    },
    StepStarted {
        job: JobId,
        attempt: u32,
        node: String,
        pid: Option<u32>,
    },
    StepExited {
        job: JobId,
        attempt: u32,
        node: String,
        code: Option<i32>,
        signal: Option<i32>,
        failure: Option<Failure>,
    },
    /// A failure seen while the step still runs (log line, Xid): stops the gang now.
    StepFailed {
        job: JobId,
        attempt: u32,
        node: String,
        failure: Failure,
    },
    RegisterNode {
        name: String,
        address: String,
        training_addr: String,
        topology: Topology,
        features: Vec<String>,
        agent_version: String,
        known_steps: Vec<KnownStep>,
    },
    NodeLost {
        node: String,
        reason: String,
    },
    DrainNode {
        node: String,
        reason: String,
        by: String,
    },
    ResumeNode {
        node: String,
        by: String,
    },
    HealthEvents {
        node: String,
        events: Vec<HealthEvent>,
    },
    RequeueJob {
        job: JobId,
        by: String,
        admin: bool,
    },
    HoldJob {
        job: JobId,
        by: String,
        admin: bool,
        hold: bool,
    },
    Preempt {
        victims: Vec<JobId>,
        for_job: JobId,
    },
    SetConfig {
        config: Box<SchedConfig>,
    },
    /// Controller backstop when an agent did not enforce a time limit.
    TimeoutJob {
        job: JobId,
        attempt: u32,
    },
    /// Record a controller's address (membership changes carry addresses here so every
    /// replica, and every snapshot, knows how to reach its peers).
    SetControllerAddress {
        id: u64,
        address: Option<String>,
    },
    /// Does nothing; a new leader commits one to learn its commit index.
    Noop,
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::SubmitJob { .. } => "submit_job",
            Command::CancelJob { .. } => "cancel_job",
            Command::StartJobs { .. } => "start_jobs",
            Command::SetPendingReasons { .. } => "set_pending_reasons",
            Command::StepStarted { .. } => "step_started",
            Command::StepExited { .. } => "step_exited",
            Command::StepFailed { .. } => "step_failed",
            Command::RegisterNode { .. } => "register_node",
            Command::NodeLost { .. } => "node_lost",
            Command::DrainNode { .. } => "drain_node",
            Command::ResumeNode { .. } => "resume_node",
            Command::HealthEvents { .. } => "health_events",
            Command::RequeueJob { .. } => "requeue_job",
            Command::HoldJob { .. } => "hold_job",
            Command::Preempt { .. } => "preempt",
            Command::SetConfig { .. } => "set_config",
            Command::TimeoutJob { .. } => "timeout_job",
            Command::SetControllerAddress { .. } => "set_controller_address",
            Command::Noop => "noop",
        }
    }
}

/// Why a log entry could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("log entry is not a gsched command: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error(
        "log entry has format version {0}, newer than this build understands ({FORMAT_VERSION}); upgrade gctld"
    )]
    TooNew(u16),
}

impl Envelope {
    pub fn new(cmd: Command, at_ms: u64, request_id: Option<String>) -> Envelope {
        Envelope {
            v: FORMAT_VERSION,
            request_id,
            at_ms,
            cmd,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("commands always serialise")
    }

    pub fn decode(bytes: &[u8]) -> Result<Envelope, DecodeError> {
        let env: Envelope = serde_json::from_slice(bytes)?;
        if env.v > FORMAT_VERSION {
            return Err(DecodeError::TooNew(env.v));
        }
        Ok(env)
    }
}

/// The result of applying one command, returned to whoever proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Submitted {
        jobs: Vec<JobId>,
    },
    Started {
        started: Vec<JobId>,
        stale: Vec<(JobId, String)>,
    },
    /// The command was valid but refused by the current state (the message says why).
    Rejected {
        message: String,
    },
    NotFound {
        message: String,
    },
    PermissionDenied {
        message: String,
    },
}
