//! Messages on the agent stream (carried as JSON inside the gRPC `AgentEnvelope` and
//! `ControllerEnvelope`).
//!
//! The agent opens the stream, registers, heartbeats every second with the node runs it
//! keeps (its part of each job's attempt), and reports run events and health events,
//! each with a sequence number it keeps on disk until the controller acknowledges that
//! the event is committed. The controller sends launches and kills (several kills for
//! one node in one `Kills` message); both are idempotent, so resending after a failover is
//! safe.

use crate::failure::{Failure, FailureKind};
use crate::job::JobId;
pub use crate::launch::LaunchSpec;
use crate::node::HealthEvent;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// A node run the agent knows about (running, or ended with its report not yet
/// acknowledged): this node's part of one attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunRef {
    pub job: JobId,
    pub attempt: u32,
}

/// Something that happened to a node run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    Started {
        job: JobId,
        attempt: u32,
        pid: Option<u32>,
    },
    /// A failure seen while the run goes on (log line, Xid on its GPU).
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
        /// What the run did with its GPUs, CPUs and memory on this node.
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

impl RunEvent {
    /// The job and attempt the event is about.
    pub fn run(&self) -> (JobId, u32) {
        match self {
            RunEvent::Started { job, attempt, .. }
            | RunEvent::Failed { job, attempt, .. }
            | RunEvent::Exited { job, attempt, .. }
            | RunEvent::Warning { job, attempt, .. } => (*job, *attempt),
        }
    }
}

/// What an agent understands beyond the first protocol; the controller sends nothing an
/// agent has not announced. Fields a newer agent adds are ignored by older controllers.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct AgentCapabilities {
    /// `ControllerToAgent::Notice`: a line appended to a job's output file.
    #[serde(default)]
    pub output_notices: bool,
}

/// One node run to stop, as in `ControllerToAgent::Kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KillRun {
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
        /// Written `known_steps`, as the first agents did.
        #[serde(rename = "known_steps")]
        known_runs: Vec<RunRef>,
        /// What it understands beyond the first protocol (absent from older agents).
        #[serde(default)]
        capabilities: AgentCapabilities,
    },
    Heartbeat {
        running: Vec<RunRef>,
    },
    /// A node run's event, kept in the outbox until acknowledged (written `step`).
    #[serde(rename = "step")]
    Run {
        seq: u64,
        event: RunEvent,
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
    /// Running node runs' usage summaries so far (every `--gpu-sample-interval`; not kept
    /// on disk: the next one replaces it, and the final one goes with the run's exit).
    Usage {
        #[serde(rename = "steps")]
        runs: Vec<RunUsage>,
    },
    /// Every process now using one of the node's GPUs outside the jobs holding it (each
    /// `--gpu-sample-interval` while there are any, and once empty when they are gone;
    /// not kept on disk and not in the controllers' log: the leader keeps the latest).
    /// Sent only to controllers that announced `outside_jobs` when registering it.
    OutsideJobs {
        uses: Vec<crate::outside::OutsideUse>,
    },
}

/// One node run's usage on the sending node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunUsage {
    pub job: JobId,
    pub attempt: u32,
    pub usage: crate::usage::NodeUsage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControllerToAgent {
    Registered {
        node: String,
        /// Node runs this agent still keeps that the controller no longer wants: stop
        /// them before anything else.
        #[serde(default)]
        kill: Vec<RunRef>,
        /// How long the agent may go without hearing from a controller before it stops
        /// its runs itself (the controller declares the node lost a little later, and
        /// only then lets the jobs run elsewhere).
        #[serde(default)]
        lease_ms: u64,
        /// `[outside_jobs]`: what to do about processes using GPUs outside jobs. Its
        /// presence also says the controller takes [`AgentToController::OutsideJobs`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outside_jobs: Option<crate::outside::OutsidePolicy>,
    },
    /// The leader's answer to a heartbeat: it still hears this agent.
    Alive {
        lease_ms: u64,
    },
    Launch(Box<LaunchSpec>),
    /// Stop a node run: SIGTERM, then SIGKILL after `grace_s`. `cause` is what the run's
    /// exit is reported as (cancelled, timed out, stopped with its gang...).
    Kill {
        job: JobId,
        attempt: u32,
        cause: FailureKind,
        reason: String,
        grace_s: u64,
    },
    /// Stop several node runs (a bulk cancel, a node's jobs requeued): each as `Kill`.
    Kills {
        kills: Vec<KillRun>,
    },
    /// Send `signal` to a node run (`gcancel --signal`): to its process group, or
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

#[cfg(test)]
mod tests {
    use super::{AgentToController, RunEvent, RunRef, RunUsage};
    use crate::job::JobId;

    /// Messages renamed in Rust keep the names agents and controllers of every version
    /// exchange: `step` events, `known_steps`, usage `steps`.
    #[test]
    fn renamed_messages_keep_their_wire_names() {
        let run = AgentToController::Run {
            seq: 3,
            event: RunEvent::Started {
                job: JobId(5),
                attempt: 1,
                pid: None,
            },
        };
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(
            json,
            r#"{"type":"step","seq":3,"event":{"event":"started","job":5,"attempt":1,"pid":null}}"#
        );
        assert_eq!(
            serde_json::from_str::<AgentToController>(&json).unwrap(),
            run
        );
        let usage = AgentToController::Usage {
            runs: vec![RunUsage {
                job: JobId(5),
                attempt: 1,
                usage: Default::default(),
            }],
        };
        let value = serde_json::to_value(&usage).unwrap();
        assert_eq!(value["type"], "usage");
        assert_eq!(value["steps"][0]["job"], 5, "{value}");
        let register = serde_json::json!({
            "type": "register", "name": "n1", "address": "", "training_addr": "",
            "topology": serde_json::to_value(crate::topology::Topology::empty("test")).unwrap(),
            "features": [], "agent_version": "0", "known_steps": [{"job": 5, "attempt": 1}],
        });
        match serde_json::from_value::<AgentToController>(register).unwrap() {
            AgentToController::Register { known_runs, .. } => assert_eq!(
                known_runs,
                vec![RunRef {
                    job: JobId(5),
                    attempt: 1
                }]
            ),
            other => panic!("{other:?}"),
        }
    }
}
