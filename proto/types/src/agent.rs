//! Messages on the agent stream (carried as JSON inside the gRPC `AgentEnvelope` and
//! `ControllerEnvelope`).
//!
//! The agent opens the stream, registers, heartbeats every second with the steps it runs,
//! and reports step events and health events, each with a sequence number it keeps on
//! disk until the controller acknowledges that the event is committed. The controller
//! sends launches and kills (several kills for one node in one `Kills` message, to agents
//! that announced `batched_kills`); both are idempotent, so resending after a failover is
//! safe.

use crate::failure::{Failure, FailureKind};
use crate::job::JobId;
pub use crate::launch::LaunchSpec;
use crate::node::HealthEvent;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// A step the agent knows about (running, or ended with its report not yet acknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRef {
    pub job: JobId,
    pub attempt: u32,
}

/// Something that happened to a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StepEvent {
    Started {
        job: JobId,
        attempt: u32,
        pid: Option<u32>,
    },
    /// A failure seen while the step still runs (log line, Xid on its GPU).
    Failed {
        job: JobId,
        attempt: u32,
        failure: Failure,
    },
    Exited {
        job: JobId,
        attempt: u32,
        code: Option<i32>,
        signal: Option<i32>,
        failure: Option<Failure>,
        /// What the step did with its GPUs, CPUs and memory on this node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Box<crate::usage::NodeUsage>>,
    },
    /// Something the job should know that does not stop it (NCCL fell back to sockets
    /// where the node has RDMA): recorded on the job, shown by `gctl show job`.
    Warning {
        job: JobId,
        attempt: u32,
        finding: crate::findings::Finding,
    },
}

impl StepEvent {
    /// The job and attempt the event is about.
    pub fn step(&self) -> (JobId, u32) {
        match self {
            StepEvent::Started { job, attempt, .. }
            | StepEvent::Failed { job, attempt, .. }
            | StepEvent::Exited { job, attempt, .. }
            | StepEvent::Warning { job, attempt, .. } => (*job, *attempt),
        }
    }
}

/// What an agent understands beyond the first protocol; the controller sends nothing an
/// agent has not announced. Fields a newer agent adds are ignored by older controllers.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct AgentCapabilities {
    /// `ControllerToAgent::Kills`: several steps stopped by one message.
    #[serde(default)]
    pub batched_kills: bool,
    /// `ControllerToAgent::Notice`: a line appended to a job's output file.
    #[serde(default)]
    pub output_notices: bool,
}

/// One step to stop, as in `ControllerToAgent::Kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KillStep {
    pub job: JobId,
    pub attempt: u32,
    pub cause: FailureKind,
    pub reason: String,
    pub grace_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentToController {
    Register {
        name: String,
        address: String,
        training_addr: String,
        topology: Box<Topology>,
        features: Vec<String>,
        agent_version: String,
        known_steps: Vec<StepRef>,
        /// What it understands beyond the first protocol (absent from older agents).
        #[serde(default)]
        capabilities: AgentCapabilities,
    },
    Heartbeat {
        running: Vec<StepRef>,
    },
    Step {
        seq: u64,
        event: StepEvent,
    },
    Health {
        seq: u64,
        events: Vec<HealthEvent>,
    },
    /// A `grun` step's output or exit, as it happens (not kept on disk: a step lives as
    /// long as the `grun` that started it).
    TaskIo {
        io: crate::steps::TaskIo,
    },
    /// Running steps' usage summaries so far (every `--gpu-sample-interval`; not kept on
    /// disk: the next one replaces it, and the final one goes with the step's exit).
    Usage {
        steps: Vec<StepUsage>,
    },
}

/// One running step's usage on the sending node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepUsage {
    pub job: JobId,
    pub attempt: u32,
    pub usage: crate::usage::NodeUsage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControllerToAgent {
    Registered {
        node: String,
        /// Steps this agent still runs that the controller no longer wants: stop them
        /// before anything else.
        #[serde(default)]
        kill: Vec<StepRef>,
        /// How long the agent may go without hearing from a controller before it stops
        /// its steps itself (the controller declares the node lost a little later, and
        /// only then lets the jobs run elsewhere).
        #[serde(default)]
        lease_ms: u64,
    },
    /// The leader's answer to a heartbeat: it still hears this agent.
    Alive {
        lease_ms: u64,
    },
    Launch(Box<LaunchSpec>),
    /// Stop a step: SIGTERM, then SIGKILL after `grace_s`. `cause` is what the step's
    /// exit is reported as (cancelled, timed out, stopped with its gang...).
    Kill {
        job: JobId,
        attempt: u32,
        cause: FailureKind,
        reason: String,
        grace_s: u64,
    },
    /// Stop several steps (a bulk cancel, a node's jobs requeued): each as `Kill`. Sent
    /// only to agents that announced `batched_kills`.
    Kills {
        kills: Vec<KillStep>,
    },
    /// Send `signal` to a running step (`gcancel --signal`): to its process group, or
    /// with `batch_only` to the batch shell alone.
    Signal {
        job: JobId,
        attempt: u32,
        signal: i32,
        #[serde(default)]
        batch_only: bool,
    },
    /// A line for the job's output file (the idle-GPU policy's warning), appended with
    /// the job user's rights, as Slurm's own lines are. Sent only to agents that
    /// announced `output_notices`, and only to the node that runs the batch script.
    Notice {
        job: JobId,
        attempt: u32,
        text: String,
    },
    /// Start this node's tasks of a `grun` step inside the running job.
    RunStep(Box<crate::steps::StepLaunch>),
    /// Input for task 0 of a `grun` step: stdin bytes, its end, a terminal resize.
    StepInput {
        job: JobId,
        step: u32,
        input: crate::steps::InputEvent,
    },
    /// Stop a `grun` step's tasks (SIGTERM, SIGKILL a few seconds later).
    KillStep {
        job: JobId,
        attempt: u32,
        step: u32,
    },
    Ack {
        seq: u64,
    },
    /// This controller is not the leader; connect to `leader` (client address) instead.
    NotLeader {
        leader: Option<String>,
    },
}
