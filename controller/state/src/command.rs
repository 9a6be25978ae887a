//! The commands that change cluster state, as they are written to the Raft log.
//!
//! Each log entry is an [`Envelope`]: a format version, the client's request id (for
//! exactly-once submission across retries and failovers), the leader's timestamp (the state
//! machine never reads a clock), and one [`Command`]. New commands are appended as new
//! variants; existing variants and their fields keep their serialized names (one renamed
//! in Rust keeps the old name through `#[serde(rename)]`) and are never removed, so old
//! logs still decode (`tests/golden.rs` decodes and re-encodes every variant as version 1
//! wrote it).

use gsched_scheduler::SchedConfig;
use gsched_types::Failure;
use gsched_types::api::{ActionSummary, JobAction, JobSelection};
use gsched_types::job::{JobId, JobSpec, PendingReason};
use gsched_types::node::HealthEvent;
use gsched_types::resources::Allocation;
use gsched_types::topology::Topology;
use serde::{Deserialize, Serialize};

/// The log format version this build writes. Decoding accepts every version up to it;
/// an older build stops at an entry of a newer version instead of misreading it.
/// 1: the first format. 2: adds `cancel_unsatisfiable`, `node_responding` and
/// `act_on_jobs`. 3: adds `update_job`. 4: adds `grun_step_started` and `grun_step_ended`.
/// 5: adds `job_warning`, and an optional `finding` in health events. 7: adds
/// `record_usage` and `idle_gpus`, and an optional `usage` in `step_exited`.
/// 8: adds `create_reservation`, `update_reservation`, `delete_reservation`, and
/// `reservation` in job specs. 9: adds `edit_associations`, and users, account
/// parents, coordinators and limits in the configuration. 10: `act_on_jobs` takes the
/// `update` action (a time limit); `cancel_job`, `requeue_job`, `hold_job` and
/// `update_job` are no longer written; adds `end_past_deadline`, a time limit a start may
/// set (`--time-min`), and the job spec's comment, wckey, time-min, deadline,
/// kill-on-invalid-dep, no-kill, input and mail fields; `start_jobs` may give an
/// exclusive job every GPU of its nodes. 11: adds the failure kind `hang` (in
/// `step_failed`, `step_exited` and the job records they reach); adds `notify_claim` and
/// `notify_done`, `notices` in jobs, and `notify` in users and association edits.
/// 12: adds the pending reason `GpusUsedOutsideJobs` (in `set_pending_reasons` and the
/// job records it reaches).
pub const FORMAT_VERSION: u16 = 12;

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
    /// The time limit the job starts with, when backfill shortened it towards its
    /// `--time-min` to fit a hole (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
}

/// A node run an agent still knows about when it (re)registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownRun {
    pub job: JobId,
    pub attempt: u32,
}

/// A new job (or one job per task of an array).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitJob {
    pub spec: JobSpec,
}

/// Cancel, hold, release, requeue or update every job a selection names, in one entry:
/// every user action on jobs that exist (`machine/actions.rs` has its rules). A signal
/// takes the same request and rules but is never written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActOnJobs {
    pub action: JobAction,
    pub select: JobSelection,
    /// Who asked (verified by the controller that proposed the command).
    pub by: String,
    /// Whether `by` may act on other users' jobs.
    pub admin: bool,
}

/// Change a submitted job (`scontrol update JobId=... TimeLimit=...`). No longer proposed
/// (it is `ActOnJobs` with the `update` action); kept so that logs that hold it replay
/// (`machine/legacy.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateJob {
    pub job: JobId,
    /// The new time limit in seconds (0: none, up to the partition's maximum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// Who asked (verified by the controller that proposed the command).
    pub by: String,
    /// Whether `by` may change other users' jobs and raise limits.
    pub admin: bool,
}

/// A `grun`/`srun` step began in a running job (recorded for `gqueue -s` and `gacct`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStarted {
    pub job: JobId,
    /// The attempt it runs in (a step of an earlier attempt is not recorded).
    pub attempt: u32,
    pub step: u32,
    pub name: String,
    pub nodes: Vec<String>,
    pub ntasks: u32,
}

/// A `grun`/`srun` step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnded {
    pub job: JobId,
    pub step: u32,
    pub state: gsched_types::steps::StepState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// Tokens (`gctl token`) issued before this command was committed stop working: one
/// user's (`uid`), or everyone's (`None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevokeTokens {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

/// A node noticed something about a running job that does not stop it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobWarning {
    pub job: JobId,
    pub attempt: u32,
    pub node: String,
    pub finding: gsched_types::findings::Finding,
}

/// Cancel a job (every task of an array named by its id). No longer proposed (it is
/// `ActOnJobs` with the `cancel` action); kept so that logs that hold it replay
/// (`machine/legacy.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelJob {
    pub job: JobId,
    /// Who asked (verified by the controller that proposed the command).
    pub by: String,
    /// Whether `by` may act on other users' jobs.
    pub admin: bool,
}

/// Commit placements; each is re-checked with `fits` and skipped if stale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartJobs {
    pub starts: Vec<StartJob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetPendingReasons {
    pub reasons: Vec<(JobId, PendingReason)>,
}

/// An agent started its run of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub job: JobId,
    pub attempt: u32,
    pub node: String,
    pub pid: Option<u32>,
}

/// A node's run of a job ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunExited {
    pub job: JobId,
    pub attempt: u32,
    pub node: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub failure: Option<Failure>,
    /// The node's final usage summary of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<gsched_types::usage::NodeUsage>>,
}

/// A node's newest usage summary of its run of a job (replaces the one before).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordUsage {
    pub job: JobId,
    pub attempt: u32,
    pub node: String,
    pub usage: gsched_types::usage::NodeUsage,
}

/// The idle-GPU policy warns a running job (`cancel: false`) or cancels it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleGpus {
    pub job: JobId,
    pub attempt: u32,
    pub notice: gsched_types::usage::IdleNotice,
    pub cancel: bool,
}

/// A failure seen while the node run goes on (log line, Xid): stops the gang now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFailed {
    pub job: JobId,
    pub attempt: u32,
    pub node: String,
    pub failure: Failure,
}

/// An agent (re)connected and described its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterNode {
    pub name: String,
    pub address: String,
    pub training_addr: String,
    pub topology: Topology,
    pub features: Vec<String>,
    pub agent_version: String,
    /// Written `known_steps`, as version 1 did.
    #[serde(rename = "known_steps")]
    pub known_runs: Vec<KnownRun>,
}

/// The leader stopped hearing from a node's agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeLost {
    pub node: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainNode {
    pub node: String,
    pub reason: String,
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeNode {
    pub node: String,
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthEvents {
    pub node: String,
    pub events: Vec<HealthEvent>,
}

/// Stop a running job and put it back in the queue. No longer proposed (it is `ActOnJobs`
/// with the `requeue` action); kept so that logs that hold it replay
/// (`machine/legacy.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequeueJob {
    pub job: JobId,
    pub by: String,
    pub admin: bool,
}

/// Hold (or release) a pending job. No longer proposed (it is `ActOnJobs` with the `hold`
/// or `release` action); kept so that logs that hold it replay (`machine/legacy.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HoldJob {
    pub job: JobId,
    pub by: String,
    pub admin: bool,
    pub hold: bool,
}

/// A node's agent stopped (or resumed) answering, short of the node being lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResponding {
    pub node: String,
    pub responding: bool,
}

/// End pending jobs whose dependency can never be satisfied (each is re-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelUnsatisfiable {
    pub jobs: Vec<JobId>,
}

/// Requeue lower-QOS jobs to make room for a blocked higher-QOS one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preempt {
    pub victims: Vec<JobId>,
    pub for_job: JobId,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetConfig {
    pub config: Box<SchedConfig>,
}

/// End pending jobs that can no longer end by their `--deadline` (each is re-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndPastDeadline {
    pub jobs: Vec<JobId>,
}

/// Controller backstop when an agent did not enforce a time limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeoutJob {
    pub job: JobId,
    pub attempt: u32,
}

/// Record a controller's address (membership changes carry addresses here so every
/// replica, and every snapshot, knows how to reach its peers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetControllerAddress {
    pub id: u64,
    pub address: Option<String>,
}

/// `gctl reservation create` / `scontrol create reservation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateReservation {
    pub spec: gsched_types::reservation::ReservationSpec,
    /// Who asked (verified by the controller that proposed the command).
    pub by: String,
    /// Whether `by` is an operator or admin.
    pub admin: bool,
}

/// `gctl reservation update`: the fields the spec carries replace the reservation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateReservation {
    pub spec: gsched_types::reservation::ReservationSpec,
    pub by: String,
    pub admin: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteReservation {
    pub name: String,
    pub by: String,
    pub admin: bool,
}

/// `gctl account|user|qos add|modify|delete`, `sacctmgr`: one change to the
/// associations. Once one is applied, the configuration file no longer sets them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditAssociations {
    pub edit: gsched_types::assoc::AssocEdit,
    /// Who asked (verified by the controller that proposed the command).
    pub by: String,
    /// Whether `by` is an admin.
    pub admin: bool,
}

/// One notice of a job: its attempt, its event, and whether it is about the whole array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeRef {
    pub job: JobId,
    pub attempt: u32,
    pub event: gsched_types::notify::MailType,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub array: bool,
}

/// The leader claims notices before it sends them: committed first, so that a notice
/// is sent at most once (by the controller that claimed it, while it leads in `term`).
/// A time-limit notice is created by its claim, once `apply` finds the share crossed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotifyClaim {
    pub by: u64,
    pub term: u64,
    pub notices: Vec<NoticeRef>,
}

/// What became of one claimed notice: each target's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeResult {
    pub notice: NoticeRef,
    pub deliveries: Vec<gsched_types::notify::Delivery>,
}

/// The outcomes of claimed notices (delivered, failed, or in doubt once their leader
/// went away).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotifyDone {
    pub results: Vec<NoticeResult>,
}

/// Every state change gsched makes. Each variant carries its own payload type, so the
/// handler of a command takes exactly what the command says. A variant renamed in Rust
/// keeps the name the log has always had (`#[serde(rename)]`, and [`Command::name`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "commands are decoded, applied and dropped one at a time; boxing the large ones would only add an allocation"
)]
pub enum Command {
    SubmitJob(SubmitJob),
    /// No longer proposed: old logs only (as are `RequeueJob`, `HoldJob`, `UpdateJob`).
    CancelJob(CancelJob),
    StartJobs(StartJobs),
    SetPendingReasons(SetPendingReasons),
    /// A node run's events, written as version 1 named them (`step_*`).
    #[serde(rename = "step_started")]
    RunStarted(RunStarted),
    #[serde(rename = "step_exited")]
    RunExited(RunExited),
    #[serde(rename = "step_failed")]
    RunFailed(RunFailed),
    RegisterNode(RegisterNode),
    NodeLost(NodeLost),
    DrainNode(DrainNode),
    ResumeNode(ResumeNode),
    HealthEvents(HealthEvents),
    /// No longer proposed: old logs only.
    RequeueJob(RequeueJob),
    /// No longer proposed: old logs only.
    HoldJob(HoldJob),
    Preempt(Preempt),
    SetConfig(SetConfig),
    TimeoutJob(TimeoutJob),
    SetControllerAddress(SetControllerAddress),
    /// Does nothing; a new leader commits one to learn its commit index.
    Noop,
    CancelUnsatisfiable(CancelUnsatisfiable),
    NodeResponding(NodeResponding),
    ActOnJobs(ActOnJobs),
    /// No longer proposed: old logs only.
    UpdateJob(UpdateJob),
    /// A step's events, written as version 4 named them (`grun_step_*`).
    #[serde(rename = "grun_step_started")]
    StepStarted(StepStarted),
    #[serde(rename = "grun_step_ended")]
    StepEnded(StepEnded),
    JobWarning(JobWarning),
    RevokeTokens(RevokeTokens),
    RecordUsage(RecordUsage),
    IdleGpus(IdleGpus),
    CreateReservation(CreateReservation),
    UpdateReservation(UpdateReservation),
    DeleteReservation(DeleteReservation),
    EditAssociations(EditAssociations),
    EndPastDeadline(EndPastDeadline),
    NotifyClaim(NotifyClaim),
    NotifyDone(NotifyDone),
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::SubmitJob(_) => "submit_job",
            Command::CancelJob(_) => "cancel_job",
            Command::StartJobs(_) => "start_jobs",
            Command::SetPendingReasons(_) => "set_pending_reasons",
            Command::RunStarted(_) => "step_started",
            Command::RunExited(_) => "step_exited",
            Command::RunFailed(_) => "step_failed",
            Command::RegisterNode(_) => "register_node",
            Command::NodeLost(_) => "node_lost",
            Command::DrainNode(_) => "drain_node",
            Command::ResumeNode(_) => "resume_node",
            Command::HealthEvents(_) => "health_events",
            Command::RequeueJob(_) => "requeue_job",
            Command::HoldJob(_) => "hold_job",
            Command::Preempt(_) => "preempt",
            Command::SetConfig(_) => "set_config",
            Command::TimeoutJob(_) => "timeout_job",
            Command::SetControllerAddress(_) => "set_controller_address",
            Command::Noop => "noop",
            Command::CancelUnsatisfiable(_) => "cancel_unsatisfiable",
            Command::NodeResponding(_) => "node_responding",
            Command::ActOnJobs(_) => "act_on_jobs",
            Command::UpdateJob(_) => "update_job",
            Command::StepStarted(_) => "grun_step_started",
            Command::StepEnded(_) => "grun_step_ended",
            Command::JobWarning(_) => "job_warning",
            Command::RevokeTokens(_) => "revoke_tokens",
            Command::RecordUsage(_) => "record_usage",
            Command::IdleGpus(_) => "idle_gpus",
            Command::CreateReservation(_) => "create_reservation",
            Command::UpdateReservation(_) => "update_reservation",
            Command::DeleteReservation(_) => "delete_reservation",
            Command::EditAssociations(_) => "edit_associations",
            Command::EndPastDeadline(_) => "end_past_deadline",
            Command::NotifyClaim(_) => "notify_claim",
            Command::NotifyDone(_) => "notify_done",
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
    /// What a bulk action did.
    Acted(ActionSummary),
}
