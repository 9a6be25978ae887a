//! Jobs: what the user asked for (`JobSpec`), where a job is in its life (`JobState`,
//! `PendingReason`) and the record the controller keeps (`JobRecord`).

use crate::failure::Failure;
use crate::resources::Allocation;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A job id: small increasing integers, as in Slurm.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `--dependency` kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// Start after the job started.
    After,
    /// Start after the job ended, whatever its state.
    AfterAny,
    /// Start after the job completed with exit code 0.
    AfterOk,
    /// Start after the job failed.
    AfterNotOk,
    /// At most one running job with this name and user.
    Singleton,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dependency {
    pub kind: DependencyKind,
    #[serde(default)]
    pub job: Option<JobId>,
}

/// How a job's script is started on its nodes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum LaunchMode {
    /// On every node, each its own rank (gsched's model; `--torchrun`, `#GSUB` scripts).
    #[default]
    EachNode,
    /// Once, on the first node, as Slurm runs a batch script; `grun`/`srun` fans out and
    /// the other nodes hold the allocation. The job ends when the script does.
    Batch,
}

impl LaunchMode {
    pub fn is_each_node(&self) -> bool {
        *self == LaunchMode::EachNode
    }
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `--signal=[B:][R:]SIG[@SECONDS]`: `signal` goes to the job `before_s` seconds before
/// its time limit, to the batch shell alone with `B:` (which must forward it), else to
/// every process of the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WarnSignal {
    pub signal: i32,
    pub before_s: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch_only: bool,
}

/// `--switches=COUNT[@MAX-TIME]`: at most COUNT leaf switches, waited for at most MAX-TIME
/// (never longer than the cluster's `topology_wait_s`, which also applies without
/// MAX-TIME). `@0` starts the job on whatever is free at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SwitchWait {
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<u64>,
}

/// `gsub --torchrun PROGRAM ARGS`: the agent runs torchrun itself on every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TorchrunSpec {
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra torchrun flags (`--torchrun-args`), placed before the program.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

/// How the job's output files are opened (`--open-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpenMode {
    Append,
    /// Emptied when the job first starts; a requeued job's later attempts append.
    Truncate,
}

impl OpenMode {
    pub fn parse(text: &str) -> Result<OpenMode, crate::error::InputError> {
        match text {
            "append" | "a" => Ok(OpenMode::Append),
            "truncate" | "t" => Ok(OpenMode::Truncate),
            _ => Err(crate::error::InputError::OpenMode(text.to_string())),
        }
    }
}

/// Options a job was submitted with that Slurm echoes into the job's environment only
/// when they were given (`SLURM_NTASKS`, `SLURM_NTASKS_PER_NODE`, `SLURM_EXPORT_ENV`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Given {
    /// `-n`/`--ntasks` (or `--ntasks-per-node`, from which Slurm counts them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ntasks: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ntasks_per_node: bool,
    /// `--export` as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<String>,
    /// `-c`/`--cpus-per-task`, even of 1 (Slurm then sets `SLURM_CPUS_PER_TASK=1`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cpus_per_task: bool,
    /// `--mem-per-cpu`, in MB (the job's memory is counted from it; Slurm then sets
    /// `SLURM_MEM_PER_CPU` instead of `SLURM_MEM_PER_NODE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_per_cpu_mb: Option<u64>,
    /// `-G`/`--gpus` as given (Slurm sets `SLURM_GPUS` to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    /// `--distribution` as given (`SLURM_DISTRIBUTION`, which the job's steps read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// `--hint` as given (`SLURM_HINT`, which the job's steps read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// `--ntasks-per-socket` (`SLURM_NTASKS_PER_SOCKET`, which the job's steps read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks_per_socket: Option<u32>,
    /// `--ntasks-per-core` (`SLURM_NTASKS_PER_CORE`, which the job's steps read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks_per_core: Option<u32>,
    /// `--open-mode` was given (sbatch then passes `SLURM_OPEN_MODE` on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open_mode: bool,
    /// `--cpu-freq` as Slurm hands it to the job (`SLURM_CPU_FREQ_REQ`, from
    /// [`crate::tuning::cpu_freq`]); gsched sets no CPU clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_freq: Option<String>,
    /// `--gpu-freq` (`SLURM_GPU_FREQ`); gsched sets no GPU clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_freq: Option<String>,
    /// `--mem-bind` (`SLURM_MEM_BIND`, `SLURM_MEM_BIND_VERBOSE`); gsched sets no memory
    /// policy (the job's memory follows its CPUs by first touch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bind: Option<String>,
    /// `-O`/`--overcommit`: the job holds CPUs as for one task per node, and its steps may
    /// run more tasks than it holds CPUs (`SLURM_OVERCOMMIT=1`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overcommit: bool,
    /// `--mincpus`: at least this many CPUs on each node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mincpus: Option<u32>,
}

impl Given {
    pub fn is_empty(&self) -> bool {
        *self == Given::default()
    }
}

/// A job request as gsub resolved it (the same resolution sbatch makes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobSpec {
    pub name: String,
    pub user: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub qos: Option<String>,
    /// `--reservation`: run only inside this reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    #[serde(default)]
    pub gpu_type: Option<String>,
    pub ntasks: u32,
    pub ntasks_per_node: u32,
    pub cpus_per_task: u32,
    #[serde(default)]
    pub cpus_per_gpu: Option<u32>,
    #[serde(default)]
    pub gpus_per_task: Option<u32>,
    /// `--gpu-bind` as given; absent, `--gpus-per-task` and `--ntasks-per-gpu` imply one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_bind: Option<crate::gpubind::GpuBind>,
    /// `--ntasks-per-gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks_per_gpu: Option<u32>,
    /// `--open-mode`: absent, output is appended to (gsub's way); sbatch truncates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_mode: Option<OpenMode>,
    /// Which options were given, for the variables Slurm sets only then.
    #[serde(default, skip_serializing_if = "Given::is_empty")]
    pub given: Given,
    /// The host `gsub`/`sbatch` ran on (`SLURM_SUBMIT_HOST`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_host: Option<String>,
    /// Memory per node in MB; `Some(0)` is the whole node; `None` lets the partition default
    /// apply (a share proportional to the GPUs or CPUs taken).
    #[serde(default)]
    pub mem_mb: Option<u64>,
    #[serde(default)]
    pub mem_per_gpu_mb: Option<u64>,
    /// `--time` in seconds; `Some(0)` is no limit (`--time=0`/`UNLIMITED`, capped by the
    /// partition's maximum); `None` takes the partition's default.
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// Whether the script runs on every node or, as on Slurm, once on the first.
    #[serde(default, skip_serializing_if = "LaunchMode::is_each_node")]
    pub launch: LaunchMode,
    /// `--begin`: not started before this (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_ms: Option<u64>,
    /// `--nice`: subtracted from the job's priority (negative only for operators).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nice: i32,
    /// `--signal`: a warning signal sent this long before the time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<WarnSignal>,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub requeue: bool,
    #[serde(default)]
    pub exclusive: bool,
    #[serde(default)]
    pub array: Option<Vec<u32>>,
    #[serde(default)]
    pub array_limit: Option<u32>,
    #[serde(default)]
    pub constraint: Option<String>,
    #[serde(default)]
    pub nodelist: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub dependency: Vec<Dependency>,
    /// Working directory of the job (`-D`), absolute.
    pub workdir: String,
    /// Where gsub was run (`SLURM_SUBMIT_DIR`), absolute.
    pub submit_dir: String,
    /// The batch script's text, captured at submit time as sbatch does.
    pub script: String,
    #[serde(default)]
    pub script_args: Vec<String>,
    /// Environment inherited from the submitting shell (`--export=ALL`, the default).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables given explicitly (`--export=NAME=value`): they override gsched's own
    /// NCCL/CUDA settings, while inherited ones do not.
    #[serde(default)]
    pub env_overrides: BTreeMap<String, String>,
    #[serde(default)]
    pub torchrun: Option<TorchrunSpec>,
    #[serde(default)]
    pub hold: bool,
    /// Upper bound on automatic requeues for this job (default: the cluster's).
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// No `-c`/`--cpus-per-task`/`--cpus-per-gpu` was given: on each node the job gets its
    /// GPUs' share of the node's CPUs (node CPUs / node GPUs per GPU, from the GPUs' NUMA
    /// nodes first), at least what its tasks need (a well-set `DefCpuPerGPU`; one CPU
    /// per GPU starves NCCL's proxy and socket threads).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_share_cpus: bool,
    /// The submitter's umask: output files and whatever the job creates get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// `--switches`: how many leaf switches the job accepts and how long it waits for
    /// them (and for its best GPU set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switches: Option<SwitchWait>,
    /// `--comment`: kept with the job and shown by gacct and `gctl show job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// `--wckey`: kept with the job and shown by gacct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wckey: Option<String>,
    /// `--time-min` (s): backfill may start the job with a time limit this low (up to
    /// `time_limit_s`) where that lets it start sooner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_min_s: Option<u64>,
    /// `--deadline` (ms since the epoch): a pending job that can no longer end by then
    /// ends DEADLINE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// `--kill-on-invalid-dep`: end the job when a dependency can never be met (yes) or
    /// leave it pending (no); absent: the cluster's `keep_invalid_depend` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_on_invalid_dep: Option<bool>,
    /// `--no-kill`: keep running on the other nodes when one of the job's is lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_kill: bool,
    /// `-i`/`--input`: the batch script's stdin, a filename pattern (absent: /dev/null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// `--mail-type` and `--mail-user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mail: Option<crate::notify::MailRequest>,
}

impl JobSpec {
    /// A minimal valid spec, for tests and tools: one node, no GPUs, one task.
    pub fn simple(name: &str, user: &str, script: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            user: user.into(),
            uid: None,
            gid: None,
            account: None,
            partition: None,
            qos: None,
            reservation: None,
            nodes: 1,
            gpus_per_node: 0,
            gpu_type: None,
            ntasks: 1,
            ntasks_per_node: 1,
            cpus_per_task: 1,
            cpus_per_gpu: None,
            gpus_per_task: None,
            gpu_bind: None,
            ntasks_per_gpu: None,
            submit_host: None,
            given: Given::default(),
            open_mode: None,
            mem_mb: None,
            mem_per_gpu_mb: None,
            time_limit_s: None,
            output: None,
            error: None,
            requeue: false,
            exclusive: false,
            array: None,
            array_limit: None,
            constraint: None,
            nodelist: Vec::new(),
            exclude: Vec::new(),
            dependency: Vec::new(),
            workdir: "/tmp".into(),
            submit_dir: "/tmp".into(),
            script: script.into(),
            script_args: Vec::new(),
            env: BTreeMap::new(),
            env_overrides: BTreeMap::new(),
            torchrun: None,
            hold: false,
            max_restarts: None,
            gpu_share_cpus: false,
            signal: None,
            begin_ms: None,
            nice: 0,
            launch: LaunchMode::EachNode,
            umask: None,
            switches: None,
            comment: None,
            wckey: None,
            time_min_s: None,
            deadline_ms: None,
            kill_on_invalid_dep: None,
            no_kill: false,
            input: None,
            mail: None,
        }
    }

    /// CPUs needed on each node: `--cpus-per-gpu` x GPUs when given, else tasks x
    /// `--cpus-per-task`, at least `--mincpus`; with `--overcommit`, as for one task and
    /// no `--mincpus` (Slurm 22.05 allocates so: `-n 4 -O --mincpus=3` holds one CPU).
    pub fn cpus_per_node(&self) -> u32 {
        let (tasks, least) = if self.given.overcommit {
            (1, 0)
        } else {
            (self.ntasks_per_node, self.given.mincpus.unwrap_or(0))
        };
        let asked = match self.cpus_per_gpu {
            Some(c) if self.gpus_per_node > 0 => {
                (c * self.gpus_per_node).max(tasks * self.cpus_per_task)
            }
            _ => tasks * self.cpus_per_task,
        };
        asked.max(least)
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// The account charged: the one named, else [`DEFAULT_ACCOUNT`].
    pub fn account_name(&self) -> &str {
        self.account.as_deref().unwrap_or(DEFAULT_ACCOUNT)
    }
}

/// The account of jobs that name none.
pub const DEFAULT_ACCOUNT: &str = "default";

/// One task of a job array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArrayTask {
    pub array_job_id: JobId,
    pub task_id: u32,
    /// The whole array's shape (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<ArraySpan>,
}

/// The shape of a job array: `SLURM_ARRAY_TASK_COUNT`, `_MIN`, `_MAX`, `_STEP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArraySpan {
    pub count: u32,
    pub min: u32,
    pub max: u32,
    /// The stride of an evenly spaced array (`0-10:5` is 5), else 1.
    pub step: u32,
}

impl ArraySpan {
    pub fn of(ids: &[u32]) -> Option<ArraySpan> {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let strides: Vec<u32> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
        let step = match strides.first() {
            Some(&s) if s > 0 && strides.iter().all(|x| *x == s) => s,
            _ => 1,
        };
        Some(ArraySpan {
            count: ids.len() as u32,
            min,
            max,
            step,
        })
    }
}

/// Where a job is in its life. Terminal states never change again except through an
/// explicit requeue, which starts a new attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    /// Ending: some node's run is still being stopped.
    Completing,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    OutOfMemory,
    /// Ended while pending: it could no longer end by its `--deadline`.
    Deadline,
}

impl JobState {
    /// Every state, in the order jobs go through them.
    pub const ALL: [JobState; 10] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completing,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::OutOfMemory,
        JobState::Deadline,
    ];

    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            JobState::Pending | JobState::Running | JobState::Completing
        )
    }

    /// squeue's compact state code.
    pub fn code(self) -> &'static str {
        match self {
            JobState::Pending => "PD",
            JobState::Running => "R",
            JobState::Completing => "CG",
            JobState::Completed => "CD",
            JobState::Failed => "F",
            JobState::Cancelled => "CA",
            JobState::Timeout => "TO",
            JobState::NodeFail => "NF",
            JobState::OutOfMemory => "OOM",
            JobState::Deadline => "DL",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completing => "COMPLETING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Deadline => "DEADLINE",
        }
    }

    /// Position in the life cycle; within one attempt a job only moves to higher ranks.
    pub fn rank(self) -> u8 {
        match self {
            JobState::Pending => 0,
            JobState::Running => 1,
            JobState::Completing => 2,
            _ => 3,
        }
    }

    /// Parses squeue's `-t` names and codes (case-insensitive).
    pub fn parse(text: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|s| s.code().eq_ignore_ascii_case(text) || s.name().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a pending job is not running, computed against the capacity that is available now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "reason", content = "detail")]
pub enum PendingReason {
    /// Not yet looked at by the scheduler.
    None,
    /// Higher-priority jobs hold the resources (or a backfill hold) it would use.
    Priority,
    /// Not enough free GPUs/CPUs/memory on suitable nodes right now.
    Resources,
    /// Waiting for the jobs it depends on.
    Dependency,
    /// A dependency can never be met (the job it waits on failed or was cancelled).
    DependencyNeverSatisfied,
    /// The user already has the most GPUs their QOS allows.
    QosMaxGpusPerUser,
    /// The account already uses the most GPUs it is allowed.
    AssocGrpGpuLimit,
    /// The user already runs the most jobs allowed.
    QosMaxJobsPerUser,
    /// The time limit is above the QOS's `MaxWall`.
    QosMaxWall,
    /// The user already runs the most jobs their association allows (`MaxJobs`).
    AssocMaxJobs,
    /// The time limit is above the account's `MaxWall`.
    AssocMaxWall,
    /// The time limit is above the partition's maximum.
    PartitionTimeLimit,
    /// Nodes the job requires are drained, down or offline.
    ReqNodeNotAvail(Vec<String>),
    /// The GPUs are free but not with the topology the job requires.
    TopologyWait,
    /// Array throttle (`%N`) reached.
    JobArrayTaskLimit,
    /// Held by the user or an admin.
    JobHeldUser,
    /// `--begin` is still in the future.
    BeginTime,
    /// The partition is down or has no nodes.
    PartitionDown,
    /// No registered node can ever satisfy the request.
    BadConstraints(String),
    /// Requeued after a failure; waiting for a new placement.
    Requeued,
    /// Its reservation has not started yet.
    Reservation,
    /// Its reservation is gone (deleted or ended).
    ReservationDeleted,
    /// Every node it could use is in a maintenance reservation it would overlap.
    ReservedForMaintenance,
    /// The GPUs it could use are set aside by a reservation it would overlap.
    ReservedForOther,
    /// The GPUs it could use are taken, some by processes outside any job that holds
    /// them (`node:gpuN`, see `ginfo`'s `outside_jobs`). Log format 12.
    GpusUsedOutsideJobs(Vec<String>),
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::None => f.write_str("None"),
            PendingReason::Priority => f.write_str("Priority"),
            PendingReason::Resources => f.write_str("Resources"),
            PendingReason::Dependency => f.write_str("Dependency"),
            PendingReason::BeginTime => f.write_str("BeginTime"),
            PendingReason::DependencyNeverSatisfied => f.write_str("DependencyNeverSatisfied"),
            PendingReason::QosMaxGpusPerUser => f.write_str("QOSMaxGRESPerUser"),
            PendingReason::QosMaxWall => f.write_str("QOSMaxWallDurationPerJobLimit"),
            PendingReason::AssocMaxJobs => f.write_str("AssocMaxJobsLimit"),
            PendingReason::AssocMaxWall => f.write_str("AssocMaxWallDurationPerJobLimit"),
            PendingReason::AssocGrpGpuLimit => f.write_str("AssocGrpGRES"),
            PendingReason::QosMaxJobsPerUser => f.write_str("QOSMaxJobsPerUserLimit"),
            PendingReason::PartitionTimeLimit => f.write_str("PartitionTimeLimit"),
            PendingReason::ReqNodeNotAvail(nodes) => {
                if nodes.is_empty() {
                    f.write_str("ReqNodeNotAvail")
                } else {
                    write!(
                        f,
                        "ReqNodeNotAvail, UnavailableNodes:{}",
                        crate::hostlist::compress(nodes)
                    )
                }
            }
            PendingReason::TopologyWait => f.write_str("TopologyWait"),
            PendingReason::JobArrayTaskLimit => f.write_str("JobArrayTaskLimit"),
            PendingReason::JobHeldUser => f.write_str("JobHeldUser"),
            PendingReason::PartitionDown => f.write_str("PartitionDown"),
            PendingReason::BadConstraints(why) => write!(f, "BadConstraints ({why})"),
            PendingReason::Requeued => f.write_str("Requeued"),
            PendingReason::Reservation => f.write_str("Reservation"),
            PendingReason::ReservationDeleted => f.write_str("ReservationDeleted"),
            PendingReason::ReservedForMaintenance => {
                f.write_str("ReqNodeNotAvail, Reserved for maintenance")
            }
            PendingReason::ReservedForOther => {
                f.write_str("ReqNodeNotAvail, May be reserved for other job")
            }
            PendingReason::GpusUsedOutsideJobs(gpus) => {
                write!(f, "Resources, GPUs used outside jobs: {}", gpus.join(","))
            }
        }
    }
}

/// The state of one node's run of a job's attempt (a `NodeRun`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    /// Allocated; the agent has not confirmed the start yet.
    Launching,
    Running {
        pid: Option<u32>,
    },
    /// Ended; `code` is the exit status, `signal` the terminating signal.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// The node was lost while the run went on.
    Lost,
}

impl RunState {
    pub fn is_done(&self) -> bool {
        matches!(self, RunState::Exited { .. } | RunState::Lost)
    }
}

/// One node's run of a job's attempt: what its agent launches and watches there (not a
/// `grun`/`srun` step, which is a `steps::StepRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeRun {
    pub node: String,
    pub state: RunState,
    #[serde(default)]
    pub started_ms: Option<u64>,
    #[serde(default)]
    pub ended_ms: Option<u64>,
    #[serde(default)]
    pub failure: Option<Failure>,
}

/// What happened in one attempt of a job (a requeued job has several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attempt {
    /// Which attempt this was, from 0.
    #[serde(rename = "restart")]
    pub number: u32,
    pub nodes: Vec<String>,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub state: JobState,
    #[serde(default)]
    pub failure: Option<Failure>,
    /// Each node's usage summary of this attempt, kept when the job was requeued (the
    /// last attempt's stays in the job's own `usage`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<crate::usage::NodeUsage>,
}

/// The controller's record of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobRecord {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    pub reason: PendingReason,
    pub submit_ms: u64,
    /// When the job last became eligible (submit or requeue): the base of its age.
    pub eligible_ms: u64,
    #[serde(default)]
    pub start_ms: Option<u64>,
    #[serde(default)]
    pub end_ms: Option<u64>,
    #[serde(default)]
    pub allocation: Option<Allocation>,
    /// Each node's run of the current attempt.
    #[serde(default, rename = "steps")]
    pub runs: Vec<NodeRun>,
    /// The current attempt, from 0: how many times the job was requeued (Slurm's
    /// restart count; `restarts` in logs and snapshots).
    #[serde(default, rename = "restarts")]
    pub attempt: u32,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub failure: Option<Failure>,
    /// The state the job ends in once every node run has stopped (set while `Completing`).
    #[serde(default)]
    pub ending_as: Option<JobState>,
    #[serde(default)]
    pub array_task: Option<ArrayTask>,
    /// Nodes to avoid, learned from hardware faults of earlier attempts.
    #[serde(default)]
    pub avoid_nodes: Vec<String>,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    #[serde(default)]
    pub held: bool,
    /// `grun` steps of the current attempt, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "grun_steps")]
    pub steps: Vec<crate::steps::StepRecord>,
    /// What the nodes noticed that did not stop the job (a degraded NCCL transport), at
    /// most `MAX_JOB_WARNINGS`, one per kind and node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<crate::findings::Finding>,
    /// What each node of the current attempt saw the job do with its GPUs, CPUs and
    /// memory (the newest summary each node sent; the final one with its run's end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<crate::usage::NodeUsage>,
    /// The idle-GPU policy's warning, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<crate::usage::IdleNotice>,
    /// When this attempt first waited for its best placement (`TopologyWait`): the start
    /// of its `topology_wait_s` and `--switches` MAX-TIME, so that time queued for free
    /// GPUs at all does not use them up (Slurm starts that clock at the job's first
    /// evaluation, in practice its submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_wait_since_ms: Option<u64>,
    /// The notifications its changes called for (`--mail-type`, the user's `--notify`
    /// settings) and how far each got, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<crate::notify::Notice>,
}

/// How many warnings a job keeps.
pub const MAX_JOB_WARNINGS: usize = 16;

impl JobRecord {
    /// A newly submitted job: pending since `at_ms` (held if its spec says so), no attempt
    /// made yet.
    pub fn new(id: JobId, spec: JobSpec, at_ms: u64) -> JobRecord {
        JobRecord {
            id,
            state: JobState::Pending,
            // What squeue shows before the first scheduling pass: held, waiting for its
            // --begin time (known at submission, as Slurm knows it), or nothing yet.
            reason: if spec.hold {
                PendingReason::JobHeldUser
            } else if spec.begin_ms.is_some_and(|b| b > at_ms) {
                PendingReason::BeginTime
            } else {
                PendingReason::None
            },
            held: spec.hold,
            spec,
            submit_ms: at_ms,
            eligible_ms: at_ms,
            start_ms: None,
            end_ms: None,
            allocation: None,
            runs: Vec::new(),
            attempt: 0,
            exit_code: None,
            failure: None,
            ending_as: None,
            array_task: None,
            avoid_nodes: Vec::new(),
            attempts: Vec::new(),
            steps: Vec::new(),
            warnings: Vec::new(),
            usage: Vec::new(),
            idle: None,
            placement_wait_since_ms: None,
            notices: Vec::new(),
        }
    }

    /// `123` or `120_3` for array tasks, as squeue prints them.
    pub fn display_id(&self) -> String {
        match self.array_task {
            Some(t) => format!("{}_{}", t.array_job_id, t.task_id),
            None => self.id.to_string(),
        }
    }

    pub fn node_names(&self) -> Vec<String> {
        self.allocation
            .as_ref()
            .map(|a| a.nodes.iter().map(|n| n.node.clone()).collect())
            .unwrap_or_default()
    }

    /// GPUs held now (allocated and not yet released).
    pub fn gpus_held(&self) -> u32 {
        match (&self.allocation, self.state) {
            (Some(a), JobState::Running | JobState::Completing) => {
                a.nodes.iter().map(|n| n.gpus.len() as u32).sum()
            }
            _ => 0,
        }
    }
}
