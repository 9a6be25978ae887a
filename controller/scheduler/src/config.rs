//! Scheduler settings: policy, priority weights, partitions, QOS, limits and the
//! admin-written network topology. Deserialised from the `[scheduler]` part of the
//! controller's TOML configuration and replicated through Raft, so every replica plans
//! with the same settings.

use serde::{Deserialize, Serialize};

/// Which placement and ordering policy to run. `Gsched` is ours; the others are baselines
/// for the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Multifactor priority, EASY backfill, topology-aware placement.
    #[default]
    Gsched,
    /// Slurm-like: priority by age, EASY backfill, first-fit nodes, GPUs by index.
    FifoBackfill,
    /// Strict first-in first-out: the head of the queue blocks everyone behind it.
    Fifo,
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "gsched" => Some(Policy::Gsched),
            "fifo-backfill" => Some(Policy::FifoBackfill),
            "fifo" => Some(Policy::Fifo),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Policy::Gsched => "gsched",
            Policy::FifoBackfill => "fifo-backfill",
            Policy::Fifo => "fifo",
        }
    }
}

/// Multifactor priority weights (Slurm's PriorityWeight*).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriorityWeights {
    pub age: f64,
    pub fairshare: f64,
    /// Larger jobs first (Slurm's default direction); negative favours small jobs.
    pub job_size: f64,
    /// Jobs with shorter time limits first (log scale, 1 minute to 7 days).
    pub short_job: f64,
    pub partition: f64,
    pub qos: f64,
}

impl Default for PriorityWeights {
    fn default() -> Self {
        // Short jobs first (with aging so long ones are not starved), fair share between
        // accounts and users next: on the Philly replay this halves the average wait of
        // FIFO with backfill (README, "Scheduler").
        PriorityWeights {
            age: 1000.0,
            fairshare: 5000.0,
            job_size: 0.0,
            short_job: 10_000.0,
            partition: 1000.0,
            qos: 2000.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionConfig {
    pub name: String,
    /// Hostlist of member nodes; all nodes when absent.
    #[serde(default)]
    pub nodes: Option<String>,
    #[serde(default)]
    pub default: bool,
    #[serde(default)]
    pub max_time_s: Option<u64>,
    #[serde(default)]
    pub default_time_s: Option<u64>,
    #[serde(default)]
    pub priority: u32,
    #[serde(default)]
    pub max_nodes: Option<u32>,
}

pub use gsched_types::assoc::{AccountConfig, QosConfig, UserConfig};

/// Limits that apply to every user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct UserLimits {
    pub max_gpus: Option<u32>,
    pub max_running_jobs: Option<u32>,
    /// Jobs a user may have that have not ended (`MaxSubmitJobs`). A controller whose
    /// configuration names none sets half of `max_job_count`
    /// ([`SchedConfig::default_user_queue_limit`]), so no one user fills the queue.
    pub max_queued_jobs: Option<u32>,
    pub max_time_s: Option<u64>,
}

/// What one submission may carry and how many jobs the queue holds (Slurm's names in
/// brackets). Enforced by the controller; the CLI's own checks are only a convenience.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubmitLimits {
    /// Batch script size (`max_script_size`, 4 MiB).
    pub max_script_bytes: u64,
    /// Job name length.
    pub max_name_bytes: u64,
    /// Any other text field: paths, account, partition, constraint, node names, variable
    /// names.
    pub max_field_bytes: u64,
    /// The environment and script arguments together.
    pub max_env_bytes: u64,
    /// Array task ids must be below this (`MaxArraySize`, 1001).
    pub max_array_size: u32,
    /// Jobs that have not ended, in all (`MaxJobCount`, 10,000).
    pub max_job_count: u64,
    /// Ended jobs each controller keeps in memory (20,000); older ones are in the
    /// accounting archive only.
    pub finished_jobs_kept: u64,
}

impl SchedConfig {
    /// Gives `max_queued_jobs` its default when the configuration names none: half of
    /// `max_job_count` (at least 1), so one user's submissions cannot refuse everyone
    /// else's. Set it to `max_job_count` to let one user fill the queue.
    pub fn default_user_queue_limit(&mut self) {
        if self.user_limits.max_queued_jobs.is_none() {
            let half = (self.limits.max_job_count / 2).clamp(1, u64::from(u32::MAX));
            self.user_limits.max_queued_jobs = Some(half as u32);
        }
    }
}

impl SubmitLimits {
    pub fn is_default(&self) -> bool {
        *self == SubmitLimits::default()
    }
}

impl Default for SubmitLimits {
    fn default() -> Self {
        SubmitLimits {
            max_script_bytes: 4 << 20,
            max_name_bytes: 1024,
            max_field_bytes: 4096,
            max_env_bytes: 1 << 20,
            max_array_size: 1001,
            max_job_count: 10_000,
            finished_jobs_kept: 20_000,
        }
    }
}

/// One switch of the admin-written network topology (like Slurm's topology.conf).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    pub name: String,
    /// Hostlist of nodes directly attached (leaf switches).
    #[serde(default)]
    pub nodes: Option<String>,
    /// Child switches (spine/core switches).
    #[serde(default)]
    pub switches: Vec<String>,
    #[serde(default)]
    pub link_gbps: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedConfig {
    pub policy: Policy,
    pub weights: PriorityWeights,
    /// Age beyond which the age factor stops growing.
    pub max_age_s: u64,
    /// Half-life of the GPU-hour usage behind fair share.
    pub fairshare_half_life_s: u64,
    pub backfill: bool,
    /// How many blocked jobs get a backfill hold that backfill must respect (EASY: 1).
    /// Written `reservations` in the log and in configurations of earlier versions.
    #[serde(rename = "reservations", alias = "backfill_holds")]
    pub backfill_holds: u32,
    /// Upper bound on pending jobs examined per pass (Slurm's bf_max_job_test).
    pub max_jobs_per_pass: u32,
    pub partitions: Vec<PartitionConfig>,
    pub qos: Vec<QosConfig>,
    pub accounts: Vec<AccountConfig>,
    /// Users' associations. While there are none, anyone may charge any account; once
    /// there is one, every user but root needs one (Slurm's `AccountingStorageEnforce`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserConfig>,
    pub user_limits: UserLimits,
    /// What a submission may carry and how many jobs the queue holds (left out of the
    /// log and snapshots while at its defaults).
    #[serde(skip_serializing_if = "SubmitLimits::is_default")]
    pub limits: SubmitLimits,
    pub switches: Vec<SwitchConfig>,
    /// Ports handed out as MASTER_PORT, one per running job on its first node.
    pub master_port_min: u16,
    pub master_port_max: u16,
    /// Requeue lower-QOS jobs for blocked higher-QOS ones. Off by default.
    pub preemption: bool,
    /// Automatic requeues allowed per job when it asked for `--requeue`.
    pub max_restarts: u32,
    /// Keep jobs whose dependency can never be satisfied pending (Slurm's default).
    /// Off by default: such jobs are cancelled with the reason, as with Slurm's
    /// `kill_invalid_depend`.
    #[serde(skip_serializing_if = "is_false")]
    pub keep_invalid_depend: bool,
    /// How long a multi-GPU job may wait for its best placement (the best GPU set an
    /// empty node offers, on the fewest leaf switches) before it takes what is free,
    /// counted from the first pass that found it short of that placement (time spent
    /// waiting for free GPUs at all does not count); 0 starts it on whatever is free at
    /// once. Slurm's `max_switch_wait`, applied to GPU sets as well as switches.
    #[serde(skip_serializing_if = "is_default_topology_wait")]
    pub topology_wait_s: u64,
    /// If set, no longer than this share of the job's time limit either (0.5: a 2-hour
    /// job waits at most an hour for its best GPUs). Unset, every job may wait
    /// `topology_wait_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_wait_share: Option<f64>,
    /// CPUs of each GPU node that GPU jobs' default share (`JobSpec::gpu_share_cpus`)
    /// leaves to CPU-only jobs, with the same fraction of the node's memory: the default
    /// per-GPU share is counted over the node's CPUs less these. A GPU job that names a
    /// CPU count or memory still gets it, up to the whole node. Unset:
    /// [`default_cpu_reserve`] (a sixteenth of the node's CPUs, at least 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_reserved_for_cpu_jobs: Option<u32>,
    /// The lowest id a new job gets (Slurm's `FirstJobId`): a lab moving from Slurm keeps
    /// numbering where its old cluster stopped, so ids in old logs and paths stay unique.
    /// Ids only grow: a smaller value than ids already given changes nothing.
    #[serde(skip_serializing_if = "is_first_id_default")]
    pub first_job_id: u64,
}

/// Slurm's largest job id (`MAX_JOB_ID`, 0x03ff0000); `first_job_id` may not exceed it.
pub const MAX_FIRST_JOB_ID: u64 = 0x03ff_0000;

fn is_first_id_default(id: &u64) -> bool {
    *id == 1
}

/// The CPUs a GPU node keeps for CPU-only jobs when `cpus_reserved_for_cpu_jobs` is
/// unset: a sixteenth of them, at least 2 (one CPU-only job of Slurm's default shape, 1
/// CPU, plus room for a second or a two-thread one), so that a CPU-only job can start on
/// a node whose GPUs all run default-share jobs.
pub fn default_cpu_reserve(cpus: u32) -> u32 {
    (cpus / 16).max(2)
}

/// [`SchedConfig::topology_wait_s`] when the configuration names none.
pub const DEFAULT_TOPOLOGY_WAIT_S: u64 = 12 * 3600;

fn is_default_topology_wait(s: &u64) -> bool {
    *s == DEFAULT_TOPOLOGY_WAIT_S
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            policy: Policy::Gsched,
            weights: PriorityWeights::default(),
            max_age_s: 7 * 86_400,
            fairshare_half_life_s: 7 * 86_400,
            backfill: true,
            backfill_holds: 1,
            max_jobs_per_pass: 50_000,
            partitions: Vec::new(),
            qos: Vec::new(),
            accounts: Vec::new(),
            users: Vec::new(),
            user_limits: UserLimits::default(),
            limits: SubmitLimits::default(),
            switches: Vec::new(),
            master_port_min: 29_500,
            master_port_max: 29_999,
            preemption: false,
            max_restarts: 3,
            keep_invalid_depend: false,
            topology_wait_s: DEFAULT_TOPOLOGY_WAIT_S,
            topology_wait_share: None,
            cpus_reserved_for_cpu_jobs: None,
            first_job_id: 1,
        }
    }
}

impl SchedConfig {
    /// The CPUs a node with `cpus` CPUs and `gpus` GPUs keeps out of its GPU jobs'
    /// default share: none on a node without GPUs, and never so many that a GPU would
    /// have no CPU of its own.
    pub fn cpu_reserve(&self, cpus: u32, gpus: u32) -> u32 {
        if gpus == 0 {
            return 0;
        }
        self.cpus_reserved_for_cpu_jobs
            .unwrap_or_else(|| default_cpu_reserve(cpus))
            .min(cpus.saturating_sub(gpus))
    }

    pub fn partition(&self, name: &str) -> Option<&PartitionConfig> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// The partition a job runs in: the one it names, else the default one.
    pub fn partition_of(&self, spec: &gsched_types::JobSpec) -> String {
        spec.partition
            .clone()
            .unwrap_or_else(|| self.default_partition())
    }

    /// The time limit that applies to a job: its own, else its partition's default; a
    /// job that asked for none (`--time=0` or `UNLIMITED`) gets its partition's maximum,
    /// as in Slurm. `None` means no limit.
    pub fn time_limit_for(&self, spec: &gsched_types::JobSpec) -> Option<u64> {
        let partition = self.partition(&self.partition_of(spec));
        match spec.time_limit_s {
            Some(0) => partition.and_then(|p| p.max_time_s),
            Some(t) => Some(t),
            None => partition.and_then(|p| p.default_time_s),
        }
    }

    /// The partition a job lands in when it names none.
    pub fn default_partition(&self) -> String {
        self.partitions
            .iter()
            .find(|p| p.default)
            .or(self.partitions.first())
            .map(|p| p.name.clone())
            .unwrap_or_else(|| "gpu".to_string())
    }

    pub fn qos(&self, name: Option<&str>) -> Option<&QosConfig> {
        self.qos.iter().find(|q| Some(q.name.as_str()) == name)
    }

    /// Is `node` a member of `partition`? An unconfigured partition list means one
    /// partition holding every node.
    pub fn partition_has_node(&self, partition: &str, node: &str) -> bool {
        if self.partitions.is_empty() {
            return true;
        }
        match self.partition(partition) {
            Some(p) => match &p.nodes {
                None => true,
                Some(list) => gsched_types::hostlist::expand(list)
                    .map(|h| h.iter().any(|n| n == node))
                    .unwrap_or(false),
            },
            None => false,
        }
    }

    /// The leaf switch each node hangs off, from the configured switches.
    pub fn leaf_switch_of(&self, node: &str) -> Option<String> {
        self.switches
            .iter()
            .find(|s| {
                s.nodes
                    .as_deref()
                    .and_then(|l| gsched_types::hostlist::expand(l).ok())
                    .is_some_and(|h| h.iter().any(|n| n == node))
            })
            .map(|s| s.name.clone())
    }

    /// Account and QOS names as Slurm stores them, whatever case the file wrote them in
    /// ([`gsched_types::assoc::slurm_case`]).
    pub fn names_in_slurm_case(&mut self) {
        self.qos.iter_mut().for_each(QosConfig::in_slurm_case);
        self.accounts
            .iter_mut()
            .for_each(AccountConfig::in_slurm_case);
        self.users.iter_mut().for_each(UserConfig::in_slurm_case);
    }

    /// Checks names and ranges; the message says what to fix.
    pub fn validate(&self) -> Result<(), SchedConfigError> {
        if self.master_port_min == 0 || self.master_port_min > self.master_port_max {
            return Err(SchedConfigError::PortRange {
                min: self.master_port_min,
                max: self.master_port_max,
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.partitions {
            if !seen.insert(&p.name) {
                return Err(SchedConfigError::PartitionTwice(p.name.clone()));
            }
            if let Some(nodes) = &p.nodes {
                gsched_types::hostlist::expand(nodes).map_err(|e| SchedConfigError::Nodes {
                    what: "partition",
                    name: p.name.clone(),
                    why: e,
                })?;
            }
        }
        if let Some(share) = self.topology_wait_share
            && !(share.is_finite() && share >= 0.0)
        {
            return Err(SchedConfigError::TopologyWaitShare(share));
        }
        if !(1..=MAX_FIRST_JOB_ID).contains(&self.first_job_id) {
            return Err(SchedConfigError::FirstJobId(self.first_job_id));
        }
        if self.partitions.iter().filter(|p| p.default).count() > 1 {
            return Err(SchedConfigError::TwoDefaults);
        }
        for s in &self.switches {
            if let Some(nodes) = &s.nodes {
                gsched_types::hostlist::expand(nodes).map_err(|e| SchedConfigError::Nodes {
                    what: "switch",
                    name: s.name.clone(),
                    why: e,
                })?;
            }
        }
        Ok(())
    }
}

/// A scheduler setting that cannot be used; the message says what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedConfigError {
    #[error("master_port_min..master_port_max ({min}..{max}) is not a valid port range")]
    PortRange { min: u16, max: u16 },
    #[error("partition '{0}' is defined twice")]
    PartitionTwice(String),
    #[error("{what} '{name}': {why}")]
    Nodes {
        what: &'static str,
        name: String,
        why: gsched_types::error::HostlistError,
    },
    #[error("more than one partition has default = true")]
    TwoDefaults,
    #[error("first_job_id = {0}: give a job id from 1 to {MAX_FIRST_JOB_ID} (Slurm's FirstJobId)")]
    FirstJobId(u64),
    #[error(
        "topology_wait_share = {0} is not a share of a time limit: give 0 or more (0.5 waits at most half the job's time limit), or leave it out"
    )]
    TopologyWaitShare(f64),
}
