//! The controller's read replies: job rows, node rows, controller status and the submit
//! check. One schema for the gRPC replies, every CLI tool's `--json` output and the REST
//! API, so a field means the same thing wherever it appears.

use crate::failure::Failure;
use crate::job::{Attempt, JobId, JobRecord, JobSpec, JobState, NodeRun};
use crate::node::{HealthEvent, NodeAdminState, NodeRecord};
use crate::resources::Allocation;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A controller's Raft role.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Leader,
    #[default]
    Follower,
    Candidate,
    PreCandidate,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::PreCandidate => "pre-candidate",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A job as users name it: `123`, or `120_3` for task 3 of array 120. `120` names job 120
/// and every task of array 120; `120_3` names that one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobSelector {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
}

impl JobSelector {
    pub fn parse(text: &str) -> Result<JobSelector, crate::error::InputError> {
        let bad = || crate::error::InputError::JobId(text.to_string());
        let text = text.trim();
        match text.split_once('_') {
            Some((a, t)) => Ok(JobSelector {
                id: a.parse().map_err(|_| bad())?,
                task: Some(t.parse().map_err(|_| bad())?),
            }),
            None => Ok(JobSelector {
                id: text.parse().map_err(|_| bad())?,
                task: None,
            }),
        }
    }

    /// Does it name job `id` (a task of `array`, if any)?
    pub fn matches(&self, id: JobId, array: Option<crate::job::ArrayTask>) -> bool {
        self.matches_task(id, array.map(|t| (t.array_job_id, t.task_id)))
    }

    /// `matches` with the array task as (array job id, task id), as rows carry it.
    pub fn matches_task(&self, id: JobId, task: Option<(JobId, u32)>) -> bool {
        match (task, self.task) {
            (_, None) => id.0 == self.id || task.is_some_and(|(a, _)| a.0 == self.id),
            (Some((a, t)), Some(want)) => a.0 == self.id && t == want,
            (None, Some(_)) => false,
        }
    }
}

impl std::fmt::Display for JobSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(t) => write!(f, "{}_{t}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// What to do to a set of jobs (`gcancel`, `gcancel --signal`, `gctl hold/release/
/// requeue/update`, `scontrol`'s twins, `POST /api/v1/jobs/actions`): one request,
/// `ActOnJobs`, for every action, and for those that change state one replicated command
/// however many jobs it touches. Serialised as its name (`"cancel"`), or, for the actions
/// that carry values, as an object named by it (`{"signal": {"signal": 10}}`,
/// `{"update": {"time_limit_s": 1800}}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobAction {
    Cancel,
    Hold,
    Release,
    Requeue,
    /// Send a signal (1-64) to the running jobs, through their agents: nothing is
    /// replicated.
    Signal {
        signal: i32,
        /// To the batch shell alone (`--batch`), else to every process of the job.
        #[serde(default)]
        batch_only: bool,
    },
    /// Change the jobs (`scontrol update JobId=... TimeLimit=...`).
    Update {
        /// The new time limit in seconds (0: none).
        #[serde(default)]
        time_limit_s: Option<u64>,
    },
}

impl JobAction {
    pub fn verb(self) -> &'static str {
        match self {
            JobAction::Cancel => "cancel",
            JobAction::Hold => "hold",
            JobAction::Release => "release",
            JobAction::Requeue => "requeue",
            JobAction::Signal { .. } => "signal",
            JobAction::Update { .. } => "update",
        }
    }

    /// The past participle, for what was done ("3 job(s) held").
    pub fn done(self) -> &'static str {
        match self {
            JobAction::Cancel => "cancelled",
            JobAction::Hold => "held",
            JobAction::Release => "released",
            JobAction::Requeue => "requeued",
            JobAction::Signal { .. } => "signalled",
            JobAction::Update { .. } => "updated",
        }
    }

    /// Whether the action changes replicated state (all but a signal, which the leader
    /// passes to the jobs' agents).
    pub fn is_replicated(self) -> bool {
        !matches!(self, JobAction::Signal { .. })
    }
}

/// Which jobs a bulk action applies to: every condition given must hold. Named jobs
/// (`jobs`) that match nothing, or belong to someone else, are errors; jobs found by the
/// other conditions are only ever the caller's own unless the caller is an operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobSelection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Default: every state the action applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<JobState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Jobs running on any of these nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

impl JobSelection {
    /// Names nothing at all (refused: "every job" is never implied).
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.users.is_empty()
            && self.states.is_empty()
            && self.partition.is_none()
            && self.name.is_none()
            && self.nodes.is_empty()
    }

    /// Does `job` (in partition `partition`) meet every condition?
    pub fn matches(&self, job: &JobRecord, partition: &str) -> bool {
        (self.jobs.is_empty() || self.jobs.iter().any(|s| s.matches(job.id, job.array_task)))
            && self.matches_filters(job, partition)
    }

    /// Every condition but the named jobs.
    pub fn matches_filters(&self, job: &JobRecord, partition: &str) -> bool {
        (self.users.is_empty() || self.users.contains(&job.spec.user))
            && (self.states.is_empty() || self.states.contains(&job.state))
            && self.partition.as_deref().is_none_or(|p| p == partition)
            && self.name.as_deref().is_none_or(|n| n == job.spec.name)
            && (self.nodes.is_empty()
                || job
                    .allocation
                    .as_ref()
                    .is_some_and(|a| a.nodes.iter().any(|n| self.nodes.contains(&n.node))))
    }
}

/// An action as a client asks for it (the `ActOnJobs` request body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobActionRequest {
    pub action: JobAction,
    pub select: JobSelection,
}

/// What an action did: how many jobs it now holds for (those it changed, and those
/// already as asked, such as a released job that was not held), and what it refused, one
/// line per job or per run of an array's tasks (the first few).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActionSummary {
    pub count: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One job as `gqueue`, `gacct` and `gctl show job` show it (and `--json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobRow {
    pub job_id: JobId,
    #[serde(default)]
    pub array_job_id: Option<JobId>,
    #[serde(default)]
    pub array_task_id: Option<u32>,
    /// `123`, or `120_3` for a task of array 120.
    pub display_id: String,
    pub name: String,
    pub user: String,
    /// The account charged (the default account when the job named none).
    pub account: String,
    /// The partition the job runs in (the default partition when it named none).
    pub partition: String,
    #[serde(default)]
    pub qos: Option<String>,
    pub state: JobState,
    /// Why a pending job waits, or what ended a finished one (`None` if nothing did).
    pub reason: String,
    #[serde(default)]
    pub failure: Option<Failure>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Nodes asked for.
    pub nodes: u32,
    /// The nodes it runs (or last ran) on, as a hostlist.
    pub node_list: String,
    pub gpus_per_node: u32,
    /// GPUs it holds or held (an exclusive job every GPU of its nodes), else asked for.
    pub gpus: u32,
    /// The current attempt, from 0 (each requeue starts the next): Slurm's restart
    /// count, `restarts` in JSON.
    #[serde(rename = "restarts")]
    pub attempt: u32,
    pub held: bool,
    pub submit_ms: u64,
    #[serde(default)]
    pub start_ms: Option<u64>,
    #[serde(default)]
    pub end_ms: Option<u64>,
    /// When a pending job is expected to start, from the leader's last backfill plan.
    #[serde(default)]
    pub expected_start_ms: Option<u64>,
    /// The limit that applies (the job's, else its partition's default); `None` is none.
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// Where it runs: GPUs, CPUs, memory and NIC per node (detailed rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// Each node's run of the current attempt (detailed rows only).
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "steps")]
    pub runs: Vec<NodeRun>,
    /// Ended attempts of a requeued job (detailed rows only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// The request as submitted, without the script text: only for the job's owner,
    /// operators and admins, in detailed rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpec>,
    /// `grun` steps of the current attempt (their command's name only, as `squeue -s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "grun_steps")]
    pub steps: Vec<crate::steps::StepRecord>,
    /// What its nodes noticed that did not stop it (a degraded NCCL transport).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<crate::findings::Finding>,
    /// The idle-GPU policy's warning, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<crate::usage::IdleNotice>,
    /// Each node's usage summary of the current attempt (detailed rows only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<crate::usage::NodeUsage>,
    /// `--comment` as submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// `--wckey` as submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wckey: Option<String>,
    /// Its notifications and their delivery (detailed rows, for its owner only: they
    /// name recipients).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<crate::notify::Notice>,
}

/// Values of a job that depend on the cluster's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobContext {
    pub account: String,
    pub partition: String,
    pub time_limit_s: Option<u64>,
    pub expected_start_ms: Option<u64>,
}

impl JobRow {
    /// The summary row of `job` (no allocation, node runs, attempts or spec).
    pub fn summary(job: &JobRecord, ctx: JobContext) -> JobRow {
        let node_names = match job.state {
            JobState::Pending => Vec::new(),
            JobState::Running | JobState::Completing => job.node_names(),
            _ => job
                .attempts
                .last()
                .map(|a| a.nodes.clone())
                .unwrap_or_default(),
        };
        let reason = match (job.state, &job.failure) {
            (JobState::Pending, _) => job.reason.to_string(),
            (_, Some(f)) => f.reason(),
            (_, None) => "None".into(),
        };
        JobRow {
            job_id: job.id,
            array_job_id: job.array_task.map(|t| t.array_job_id),
            array_task_id: job.array_task.map(|t| t.task_id),
            display_id: job.display_id(),
            name: job.spec.name.clone(),
            user: job.spec.user.clone(),
            account: ctx.account,
            partition: ctx.partition,
            qos: job.spec.qos.clone(),
            state: job.state,
            reason,
            failure: job.failure.clone(),
            exit_code: job.exit_code,
            nodes: job.spec.nodes,
            node_list: crate::hostlist::compress(&node_names),
            gpus_per_node: job.spec.gpus_per_node,
            // What it holds (an exclusive job holds every GPU of its nodes), else what
            // it asked for.
            gpus: job.allocation.as_ref().map_or_else(
                || job.spec.total_gpus(),
                |a| a.nodes.iter().map(|n| n.gpus.len() as u32).sum(),
            ),
            attempt: job.attempt,
            held: job.held,
            submit_ms: job.submit_ms,
            start_ms: job.start_ms,
            end_ms: job.end_ms,
            expected_start_ms: ctx.expected_start_ms,
            time_limit_s: ctx.time_limit_s,
            allocation: None,
            runs: Vec::new(),
            attempts: Vec::new(),
            spec: None,
            steps: job.steps.clone(),
            warnings: job.warnings.clone(),
            idle: job.idle.clone(),
            usage: Vec::new(),
            comment: job.spec.comment.clone(),
            wckey: job.spec.wckey.clone(),
            notices: Vec::new(),
        }
    }

    /// The detailed row: allocation, node runs and attempts; the spec (script text and
    /// inherited environment removed) only when `show_spec`.
    pub fn detailed(job: &JobRecord, ctx: JobContext, show_spec: bool) -> JobRow {
        let mut row = JobRow::summary(job, ctx);
        row.allocation = job.allocation.clone();
        row.runs = job.runs.clone();
        row.attempts = job.attempts.clone();
        row.usage = job.usage.clone();
        if show_spec {
            let mut spec = job.spec.clone();
            spec.script.clear();
            spec.env.clear();
            row.spec = Some(spec);
            row.notices = job.notices.clone();
        }
        row
    }

    /// Drops the failure evidence (log lines, which may show the job's data) from the row
    /// and its node runs and attempts, keeping the kinds and nodes, and its
    /// notifications (they name recipients and webhooks).
    pub fn redact_evidence(&mut self) {
        self.notices.clear();
        let failures = self
            .failure
            .iter_mut()
            .chain(self.runs.iter_mut().filter_map(|s| s.failure.as_mut()))
            .chain(self.attempts.iter_mut().filter_map(|a| a.failure.as_mut()));
        for f in failures {
            f.evidence.clear();
        }
        for w in &mut self.warnings {
            w.evidence.clear();
        }
    }

    /// The node names of the current allocation, else of the last attempt.
    pub fn node_names(&self) -> Vec<String> {
        crate::hostlist::expand(&self.node_list).unwrap_or_default()
    }

    /// Seconds the current attempt has run: to its end, else to `now_ms`; 0 before it
    /// starts.
    pub fn elapsed_s(&self, now_ms: u64) -> u64 {
        match self.start_ms {
            Some(start) => self.end_ms.unwrap_or(now_ms).saturating_sub(start) / 1000,
            None => 0,
        }
    }

    /// The efficiency report of a detailed row (`gacct --eff`, `GET
    /// /api/v1/jobs/ID/efficiency`); memory advice only where the row shows the request
    /// named its memory.
    pub fn efficiency(&self, now_ms: u64) -> crate::usage::Efficiency {
        let mem_asked = self
            .spec
            .as_ref()
            .is_some_and(|s| s.mem_mb.is_some() || s.mem_per_gpu_mb.is_some());
        crate::usage::Efficiency::from_usage(
            self.job_id,
            &self.user,
            self.state,
            self.elapsed_s(now_ms),
            &self.usage,
            mem_asked,
        )
    }
}

/// `Jobs.ListJobs`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobList<R = JobRow> {
    pub jobs: Vec<R>,
    /// The Raft index the answer reflects.
    pub applied_index: u64,
    /// The controller that answered.
    pub controller: u64,
    pub role: Role,
    /// False when the read barrier could not be passed (no leader): possibly stale.
    pub consistent: bool,
    /// The controller's clock when it answered.
    pub now_ms: u64,
    /// More rows match: ask again with `after` set to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<JobId>,
}

/// One job as the queue table shows it (squeue's columns and `--start`), written as a
/// JSON array: what `gqueue` needs in a fraction of a full row's bytes.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(from = "QueueTuple")]
#[schemars(into = "QueueTuple", from = "QueueTuple")]
pub struct QueueRow {
    pub display_id: String,
    pub partition: String,
    pub name: String,
    pub user: String,
    pub state: JobState,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub nodes: u32,
    /// The nodes of a running job, `(Reason)` of a pending one, the nodes and
    /// `(FailureKind)` of an ended one.
    pub where_or_why: String,
    pub expected_start_ms: Option<u64>,
    pub time_limit_s: Option<u64>,
}

type QueueTuple = (
    String,
    String,
    String,
    String,
    JobState,
    Option<u64>,
    Option<u64>,
    u32,
    String,
    Option<u64>,
    Option<u64>,
);

/// Written as [`QueueTuple`] is, from borrowed fields: a page of the queue is
/// serialised without copying its strings once more.
impl Serialize for QueueRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(11)?;
        t.serialize_element(&self.display_id)?;
        t.serialize_element(&self.partition)?;
        t.serialize_element(&self.name)?;
        t.serialize_element(&self.user)?;
        t.serialize_element(&self.state)?;
        t.serialize_element(&self.start_ms)?;
        t.serialize_element(&self.end_ms)?;
        t.serialize_element(&self.nodes)?;
        t.serialize_element(&self.where_or_why)?;
        t.serialize_element(&self.expected_start_ms)?;
        t.serialize_element(&self.time_limit_s)?;
        t.end()
    }
}

impl From<QueueTuple> for QueueRow {
    fn from(t: QueueTuple) -> QueueRow {
        QueueRow {
            display_id: t.0,
            partition: t.1,
            name: t.2,
            user: t.3,
            state: t.4,
            start_ms: t.5,
            end_ms: t.6,
            nodes: t.7,
            where_or_why: t.8,
            expected_start_ms: t.9,
            time_limit_s: t.10,
        }
    }
}

impl QueueRow {
    /// The queue line of `job` (`ctx` as for [`JobRow::summary`]).
    pub fn of(job: &JobRecord, ctx: JobContext) -> QueueRow {
        let nodes = || match job.state {
            JobState::Running | JobState::Completing => {
                crate::hostlist::compress(&job.node_names())
            }
            _ => job
                .attempts
                .last()
                .map(|a| crate::hostlist::compress(&a.nodes))
                .unwrap_or_default(),
        };
        let where_or_why = match (job.state, &job.failure) {
            (JobState::Pending, _) => format!("({})", job.reason),
            (JobState::Running | JobState::Completing, _) | (_, None) => nodes(),
            (_, Some(f)) => format!("{} ({})", nodes(), f.reason()),
        };
        QueueRow {
            display_id: job.display_id(),
            partition: ctx.partition,
            name: job.spec.name.clone(),
            user: job.spec.user.clone(),
            state: job.state,
            start_ms: job.start_ms,
            end_ms: job.end_ms,
            nodes: job.spec.nodes,
            where_or_why,
            expected_start_ms: ctx.expected_start_ms,
            time_limit_s: ctx.time_limit_s,
        }
    }
}

/// A node's state as `ginfo` names it (sinfo's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum NodeState {
    #[serde(rename = "idle")]
    Idle,
    #[serde(rename = "mix")]
    Mixed,
    #[serde(rename = "alloc")]
    Allocated,
    /// Drained, nothing running any more.
    #[serde(rename = "drain")]
    Drained,
    /// Drained, jobs still running.
    #[serde(rename = "drng")]
    Draining,
    /// The agent is not connected.
    #[serde(rename = "down")]
    Down,
    #[serde(rename = "down+drain")]
    DownDrained,
    /// Idle, held whole by a maintenance reservation that is open.
    #[serde(rename = "maint")]
    Maint,
    /// Idle, held whole by a reservation that is open.
    #[serde(rename = "resv")]
    Reserved,
}

impl NodeState {
    pub fn of(record: &NodeRecord, gpus_used: usize, jobs: usize) -> NodeState {
        match (record.is_drained(), jobs > 0, record.online) {
            (true, true, _) => NodeState::Draining,
            (true, false, true) => NodeState::Drained,
            (true, false, false) => NodeState::DownDrained,
            (false, _, false) => NodeState::Down,
            (false, false, true) => NodeState::Idle,
            (false, true, true)
                if gpus_used >= record.topology.gpus.len() && !record.topology.gpus.is_empty() =>
            {
                NodeState::Allocated
            }
            (false, true, true) => NodeState::Mixed,
        }
    }

    /// The state with an open reservation holding the whole node: an idle node shows
    /// `maint` or `resv`, as sinfo does.
    pub fn reserved(self, maint: bool) -> NodeState {
        match (self, maint) {
            (NodeState::Idle, true) => NodeState::Maint,
            (NodeState::Idle, false) => NodeState::Reserved,
            (other, _) => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Mixed => "mix",
            NodeState::Allocated => "alloc",
            NodeState::Drained => "drain",
            NodeState::Draining => "drng",
            NodeState::Down => "down",
            NodeState::DownDrained => "down+drain",
            NodeState::Maint => "maint",
            NodeState::Reserved => "resv",
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One node as `ginfo` and `gctl show node` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeRow {
    pub name: String,
    pub state: NodeState,
    pub online: bool,
    /// Its agent answers; a node that does not takes no new job (`ginfo` marks it `*`).
    pub responding: bool,
    /// Steps of ended jobs its returning agent still has to confirm stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fencing: Vec<crate::agent::RunRef>,
    pub admin: NodeAdminState,
    #[serde(default)]
    pub drain_reason: Option<String>,
    /// The open reservation holding this node's GPUs (or the whole node), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Management address.
    pub address: String,
    pub training_addr: String,
    #[serde(default)]
    pub gpu_model: Option<String>,
    pub gpus_total: u32,
    /// GPU indices held by running jobs.
    pub gpus_used: Vec<u32>,
    /// Healthy GPUs nobody holds.
    pub gpus_free: u32,
    /// GPUs withheld from scheduling as unhealthy.
    pub bad_gpus: Vec<u32>,
    pub cpus_total: u32,
    pub cpus_used: u32,
    pub memory_mb: u64,
    pub memory_used_mb: u64,
    /// Jobs running (or ending) here.
    pub jobs: Vec<JobId>,
    /// Which job holds each held GPU (for the dashboard's node grid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_jobs: Vec<GpuJob>,
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub agent_version: String,
    /// Recent health events, oldest first.
    #[serde(default)]
    pub health: Vec<HealthEvent>,
    /// Processes using its GPUs outside the jobs holding them, as its agent last reported
    /// (the leader's view; a GPU listed here is given to no new job).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_jobs: Vec<crate::outside::OutsideUse>,
    /// The node's wiring (detailed rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
}

/// `gctl token`'s request: how long the token should be good for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenRequest {
    pub lifetime_s: u64,
}

/// A bearer token (`Authorization: Bearer TOKEN` on the HTTP API, or pasted into the
/// dashboard) for `user`, good until `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenReply {
    pub token: String,
    pub user: String,
    pub expires_ms: u64,
}

/// `gctl token revoke [--user U | --all]`: whose tokens to revoke (none named: the
/// caller's own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevokeTokensRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Everyone's tokens (admins only).
    #[serde(default)]
    pub all: bool,
}

/// What a revocation did: tokens of `user` (everyone's when absent) issued before
/// `revoked_before_ms` no longer count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevokeTokensReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub revoked_before_ms: u64,
}

/// The longest a token may live: a week.
pub const MAX_TOKEN_LIFETIME_S: u64 = 7 * 24 * 3600;

/// A GPU of a node and the job holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuJob {
    pub gpu: u32,
    pub job: JobId,
}

/// `Jobs.ListNodes`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeList {
    pub nodes: Vec<NodeRow>,
    pub applied_index: u64,
    pub consistent: bool,
    pub now_ms: u64,
    /// The partitions, in the configuration's order (`sinfo` lists nodes by partition).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionRow>,
}

/// A partition as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PartitionRow {
    pub name: String,
    /// Jobs that name no partition run here.
    #[serde(default)]
    pub default: bool,
    /// Its nodes (every node when the configuration names none).
    pub nodes: Vec<String>,
    /// The longest time limit a job may have here; `None`: no limit.
    #[serde(default)]
    pub max_time_s: Option<u64>,
    /// The most nodes a job may have here; `None`: no limit.
    #[serde(default)]
    pub max_nodes: Option<u32>,
}

/// One controller as `gctl status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusRow {
    pub id: u64,
    pub address: String,
    pub role: Role,
    pub term: u64,
    /// 0 when no leader is known.
    pub leader_id: u64,
    #[serde(default)]
    pub leader_address: Option<String>,
    pub commit_index: u64,
    pub applied_index: u64,
    /// A hash of the applied state: equal on replicas at the same applied index.
    pub state_digest: String,
    pub first_index: u64,
    pub last_index: u64,
    pub snapshot_index: u64,
    pub voters: Vec<u64>,
    /// Leader only: each peer's matched log index.
    #[serde(default)]
    pub matched: Vec<(u64, u64)>,
    pub disk_bytes: u64,
    pub jobs: u64,
    pub nodes: u64,
    /// Controller id -> address, as this controller knows them.
    #[serde(default)]
    pub peers: BTreeMap<u64, String>,
    pub agents_connected: u64,
    /// Peers whose traffic a fault file blocks (tests only).
    #[serde(default)]
    pub fault_blocked_peers: Vec<u64>,
    /// How far this replica's applied index is behind the leader's commit index (filled
    /// in by `gctl status`, which asks every controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    /// Why this replica is out of service and retrying (its data directory cannot be
    /// written); absent while it is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_fault: Option<String>,
}

/// `gctl status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusList {
    pub controllers: Vec<StatusRow>,
}

/// `Jobs.Check`'s reply: whether a request fits the cluster, and where it would go on an
/// idle one (for `gsub --dry-run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckReply {
    pub fits: bool,
    pub message: String,
    #[serde(default)]
    pub allocation_if_idle: Option<Allocation>,
    #[serde(default)]
    pub reason_if_not_idle: Option<String>,
    /// Wiring of the nodes in `allocation_if_idle`.
    #[serde(default)]
    pub topologies: BTreeMap<String, Topology>,
    /// Submitted now, into the queue as it is (`gsub --test-only`): when it would start
    /// (now, or the backfill plan's estimate; absent when the plan gives none) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start_ms: Option<u64>,
    /// ... where, if it would start at once ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_now: Option<Allocation>,
    /// ... and else why it would wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_now: Option<String>,
}

/// A `--json` list of jobs (`gqueue`, `gacct`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobsDoc {
    pub jobs: Vec<JobRow>,
}

/// A `--json` list of nodes (`ginfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodesDoc {
    pub nodes: Vec<NodeRow>,
}

#[cfg(test)]
mod tests {
    use super::{JobSelector, QueueRow};
    use crate::job::{ArrayTask, JobId, JobState};

    #[test]
    fn ids_name_jobs_arrays_and_single_tasks() {
        let sel = |t: &str| JobSelector::parse(t).unwrap();
        let task = |a: u64, t: u32| {
            Some(ArrayTask {
                array_job_id: JobId(a),
                task_id: t,
                span: None,
            })
        };
        let (task0, task3, plain) = (
            (JobId(120), task(120, 0)),
            (JobId(123), task(120, 3)),
            (JobId(7), None),
        );
        assert!(sel("7").matches(plain.0, plain.1));
        assert!(sel("120").matches(task0.0, task0.1) && sel("120").matches(task3.0, task3.1));
        assert!(sel("120_3").matches(task3.0, task3.1));
        assert!(
            !sel("120_3").matches(task0.0, task0.1),
            "120_3 is task 3 only, not the array's first job"
        );
        assert!(!sel("7_0").matches(plain.0, plain.1));
        assert!(JobSelector::parse("x").is_err() && JobSelector::parse("1_y").is_err());
        assert_eq!(sel("120_3").to_string(), "120_3");
    }

    #[test]
    fn a_queue_row_travels_as_an_array_and_comes_back_whole() {
        let row = QueueRow {
            display_id: "120_3".into(),
            partition: "gpu".into(),
            name: "sweep \"a\"".into(),
            user: "alice".into(),
            state: JobState::Running,
            start_ms: Some(1_000),
            end_ms: None,
            nodes: 2,
            where_or_why: "n[1-2]".into(),
            expected_start_ms: None,
            time_limit_s: Some(3_600),
        };
        let json = serde_json::to_string(&row).unwrap();
        assert_eq!(
            json,
            r#"["120_3","gpu","sweep \"a\"","alice","RUNNING",1000,null,2,"n[1-2]",null,3600]"#
        );
        assert_eq!(serde_json::from_str::<QueueRow>(&json).unwrap(), row);
    }

    /// Fields renamed in Rust keep the names logs, snapshots, archives and API clients
    /// have always read: `restarts`, `steps` (node runs), `grun_steps` (steps), `restart`.
    #[test]
    fn renamed_fields_keep_their_wire_names() {
        use super::{JobContext, JobRow};
        use crate::job::{Attempt, JobRecord, JobSpec, NodeRun, RunState};
        use crate::steps::{StepRecord, StepState};
        let mut job = JobRecord::new(JobId(5), JobSpec::simple("j", "alice", "true"), 1);
        job.attempt = 2;
        job.runs = vec![NodeRun {
            node: "n1".into(),
            state: RunState::Launching,
            started_ms: None,
            ended_ms: None,
            failure: None,
        }];
        job.steps = vec![StepRecord {
            step: 0,
            name: "hostname".into(),
            nodes: vec!["n1".into()],
            ntasks: 1,
            start_ms: 2,
            end_ms: None,
            state: StepState::Running,
            exit_code: None,
            signal: None,
        }];
        job.attempts = vec![Attempt {
            number: 1,
            nodes: vec!["n1".into()],
            start_ms: None,
            end_ms: None,
            state: JobState::Failed,
            failure: None,
            usage: Vec::new(),
        }];
        let ctx = JobContext {
            account: "default".into(),
            partition: "gpu".into(),
            time_limit_s: None,
            expected_start_ms: None,
        };
        let record = serde_json::to_value(&job).unwrap();
        let row = serde_json::to_value(JobRow::detailed(&job, ctx, false)).unwrap();
        for v in [&record, &row] {
            assert_eq!(v["restarts"], 2, "{v}");
            assert_eq!(v["steps"][0]["node"], "n1", "{v}");
            assert_eq!(v["grun_steps"][0]["name"], "hostname", "{v}");
            assert_eq!(v["attempts"][0]["restart"], 1, "{v}");
            for renamed in ["attempt", "runs"] {
                assert!(v.get(renamed).is_none(), "{renamed} in {v}");
            }
        }
        assert_eq!(serde_json::from_value::<JobRecord>(record).unwrap(), job);
    }
}
