//! `ClusterState` and its deterministic `apply`: every replica that applies the same log
//! reaches the same state (and the same digest). No clock, randomness or IO in here; time
//! comes from the leader's stamp in each envelope.

use crate::command::{Command, Envelope, KnownStep, Outcome, StartJob};
use gsched_scheduler::SchedConfig;
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{
    ArrayTask, Attempt, JobId, JobRecord, JobSpec, JobState, PendingReason, StepState, StepStatus,
};
use gsched_types::node::{HealthEvent, HealthSeverity, NodeAdminState, NodeRecord};
use gsched_types::resources::{NodeCapacity, NodeUsage, fits};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How many applied request ids are remembered for exactly-once retries.
const DEDUP_CAPACITY: usize = 200_000;
/// Health events kept per node.
const HEALTH_HISTORY: usize = 32;

/// Decayed GPU usage of one user in one account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Usage {
    pub gpu_seconds: f64,
    pub at_ms: u64,
}

/// The replicated state of the whole cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    pub next_job_id: u64,
    pub jobs: BTreeMap<JobId, JobRecord>,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// account -> user -> usage.
    pub usage: BTreeMap<String, BTreeMap<String, Usage>>,
    pub config: SchedConfig,
    /// Raft peer id -> address.
    pub controllers: BTreeMap<u64, String>,
    /// Terminal jobs in the order they ended, for bounded retention.
    pub finished: VecDeque<JobId>,
    /// Recently applied request ids and their outcomes, oldest first.
    dedup: VecDeque<(String, Outcome)>,
    /// Terminal jobs kept for `gacct`; older ones are dropped.
    pub retain_finished: usize,
    /// Latest leader timestamp applied.
    pub clock_ms: u64,
    #[serde(skip)]
    dedup_index: HashMap<String, usize>,
    #[serde(skip)]
    dedup_base: usize,
    #[serde(skip)]
    node_usage: BTreeMap<String, NodeUsage>,
}

impl Default for ClusterState {
    fn default() -> Self {
        ClusterState {
            next_job_id: 1,
            jobs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            usage: BTreeMap::new(),
            config: SchedConfig::default(),
            controllers: BTreeMap::new(),
            finished: VecDeque::new(),
            dedup: VecDeque::new(),
            retain_finished: 20_000,
            clock_ms: 0,
            dedup_index: HashMap::new(),
            dedup_base: 0,
            node_usage: BTreeMap::new(),
        }
    }
}

impl ClusterState {
    /// Serialises the state for a Raft snapshot.
    pub fn to_snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("state always serialises")
    }

    /// Restores a snapshot and rebuilds the derived indexes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<ClusterState, serde_json::Error> {
        if bytes.is_empty() {
            return Ok(ClusterState::default());
        }
        let mut s: ClusterState = serde_json::from_slice(bytes)?;
        s.rebuild();
        Ok(s)
    }

    fn rebuild(&mut self) {
        self.dedup_base = 0;
        self.dedup_index = self
            .dedup
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (id.clone(), i))
            .collect();
        self.node_usage.clear();
        for job in self.jobs.values() {
            if matches!(job.state, JobState::Running | JobState::Completing)
                && let Some(a) = &job.allocation
            {
                for na in &a.nodes {
                    self.node_usage.entry(na.node.clone()).or_default().add(na);
                }
            }
        }
    }

    /// A SHA-256 of the canonical serialisation: equal on replicas with equal state.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.to_snapshot());
        h.finalize()
            .iter()
            .take(12)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What is in use on a node.
    pub fn usage_of(&self, node: &str) -> NodeUsage {
        self.node_usage.get(node).cloned().unwrap_or_default()
    }

    pub fn capacity_of(node: &NodeRecord) -> NodeCapacity {
        NodeCapacity {
            gpu_count: node.topology.gpus.len() as u32,
            bad_gpus: gsched_types::resources::IdSet::from_ids(&node.bad_gpus),
            cpus: node.topology.all_cpus(),
            mem_mb: node
                .topology
                .memory_mib
                .or_else(|| {
                    node.topology
                        .numa_nodes
                        .iter()
                        .map(|n| n.memory_mib)
                        .sum::<Option<u64>>()
                })
                .unwrap_or(0),
        }
    }

    /// The outcome recorded for a request id, if it was already applied.
    pub fn dedup_lookup(&self, request_id: &str) -> Option<&Outcome> {
        let i = *self.dedup_index.get(request_id)?;
        self.dedup.get(i - self.dedup_base).map(|(_, o)| o)
    }

    fn remember(&mut self, request_id: String, outcome: Outcome) {
        self.dedup_index
            .insert(request_id.clone(), self.dedup_base + self.dedup.len());
        self.dedup.push_back((request_id, outcome));
        while self.dedup.len() > DEDUP_CAPACITY {
            if let Some((old, _)) = self.dedup.pop_front() {
                self.dedup_index.remove(&old);
            }
            self.dedup_base += 1;
        }
    }

    /// Applies one log entry. Deterministic: same state + same envelope = same result.
    pub fn apply(&mut self, env: &Envelope) -> Outcome {
        if let Some(id) = &env.request_id
            && let Some(done) = self.dedup_lookup(id)
        {
            return done.clone();
        }
        self.clock_ms = self.clock_ms.max(env.at_ms);
        let at = env.at_ms;
        let outcome = match &env.cmd {
            Command::SubmitJob { spec } => self.submit(spec, at),
            Command::CancelJob { job, by, admin } => self.cancel(*job, by, *admin, at),
            Command::StartJobs { starts } => self.start_jobs(starts, at),
            Command::SetPendingReasons { reasons } => {
                for (id, reason) in reasons {
                    if let Some(j) = self.jobs.get_mut(id)
                        && j.state == JobState::Pending
                    {
                        j.reason = reason.clone();
                    }
                }
                Outcome::Ok
            }
            Command::StepStarted {
                job,
                attempt,
                node,
                pid,
            } => self.step_started(*job, *attempt, node, *pid, at),
            Command::StepExited {
                job,
                attempt,
                node,
                code,
                signal,
                failure,
            } => self.step_exited(*job, *attempt, node, *code, *signal, failure.clone(), at),
            Command::StepFailed {
                job,
                attempt,
                node,
                failure,
            } => self.step_failed(*job, *attempt, node, failure.clone(), at),
            Command::RegisterNode {
                name,
                address,
                training_addr,
                topology,
                features,
                agent_version,
                known_steps,
            } => self.register_node(
                name,
                address,
                training_addr,
                topology,
                features,
                agent_version,
                known_steps,
                at,
            ),
            Command::NodeLost { node, reason } => self.node_lost(node, reason, at),
            Command::DrainNode { node, reason, by } => match self.nodes.get_mut(node) {
                Some(n) => {
                    n.admin = NodeAdminState::Drain {
                        reason: reason.clone(),
                        since_ms: at,
                        by: by.clone(),
                    };
                    n.state_changed_ms = at;
                    Outcome::Ok
                }
                None => Outcome::NotFound {
                    message: format!("no node named {node}"),
                },
            },
            Command::ResumeNode { node, .. } => match self.nodes.get_mut(node) {
                Some(n) => {
                    n.admin = NodeAdminState::Up;
                    n.bad_gpus.clear();
                    n.state_changed_ms = at;
                    Outcome::Ok
                }
                None => Outcome::NotFound {
                    message: format!("no node named {node}"),
                },
            },
            Command::HealthEvents { node, events } => self.health_events(node, events, at),
            Command::RequeueJob { job, by, admin } => self.requeue_request(*job, by, *admin, at),
            Command::HoldJob {
                job,
                by,
                admin,
                hold,
            } => self.hold(*job, by, *admin, *hold),
            Command::Preempt { victims, for_job } => {
                for v in victims {
                    let failure = Failure {
                        kind: FailureKind::Preempted,
                        node: None,
                        evidence: format!("preempted for job {for_job}"),
                        at_ms: at,
                    };
                    self.begin_ending(*v, failure, at);
                }
                Outcome::Ok
            }
            Command::SetConfig { config } => {
                self.config = (**config).clone();
                Outcome::Ok
            }
            Command::TimeoutJob { job, attempt } => {
                if self
                    .jobs
                    .get(job)
                    .is_some_and(|j| j.restarts == *attempt && j.state == JobState::Running)
                {
                    let failure = Failure {
                        kind: FailureKind::Timeout,
                        node: None,
                        evidence: "time limit reached (controller backstop)".into(),
                        at_ms: at,
                    };
                    self.begin_ending(*job, failure, at);
                }
                Outcome::Ok
            }
            Command::SetControllerAddress { id, address } => {
                match address {
                    Some(a) => self.controllers.insert(*id, a.clone()),
                    None => self.controllers.remove(id),
                };
                Outcome::Ok
            }
            Command::Noop => Outcome::Ok,
        };
        if let Some(id) = &env.request_id {
            self.remember(id.clone(), outcome.clone());
        }
        outcome
    }

    fn submit(&mut self, spec: &JobSpec, at: u64) -> Outcome {
        if let Err(message) = self.validate_submit(spec) {
            return Outcome::Rejected { message };
        }
        let tasks: Vec<Option<u32>> = match &spec.array {
            Some(ids) => ids.iter().map(|i| Some(*i)).collect(),
            None => vec![None],
        };
        let base = JobId(self.next_job_id);
        let mut ids = Vec::with_capacity(tasks.len());
        for task in tasks {
            let id = JobId(self.next_job_id);
            self.next_job_id += 1;
            let mut record = JobRecord::new(id, spec.clone(), at);
            record.array_task = task.map(|t| ArrayTask {
                array_job_id: base,
                task_id: t,
            });
            self.jobs.insert(id, record);
            ids.push(id);
        }
        Outcome::Submitted { jobs: ids }
    }

    /// Checks that depend on replicated state (partition names, queue limits).
    fn validate_submit(&self, spec: &JobSpec) -> Result<(), String> {
        if spec.nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if let Some(p) = &spec.partition
            && !self.config.partitions.is_empty()
            && self.config.partition(p).is_none()
        {
            let names: Vec<&str> = self
                .config
                .partitions
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            return Err(format!(
                "invalid partition '{p}': known partitions are {}",
                names.join(", ")
            ));
        }
        if let Some(q) = &spec.qos
            && self.config.qos(Some(q)).is_none()
        {
            return Err(format!("invalid QOS '{q}'"));
        }
        let partition = spec
            .partition
            .clone()
            .unwrap_or_else(|| self.config.default_partition());
        let max_time = self
            .config
            .partition(&partition)
            .and_then(|p| p.max_time_s)
            .into_iter()
            .chain(self.config.user_limits.max_time_s)
            .min();
        if let (Some(max), Some(t)) = (max_time, spec.time_limit_s)
            && t > max
        {
            return Err(format!(
                "time limit {} exceeds the maximum {} for partition {partition}",
                gsched_types::parse::format_duration(t),
                gsched_types::parse::format_duration(max)
            ));
        }
        if let Some(max) = self.config.user_limits.max_queued_jobs {
            let queued = self
                .jobs
                .values()
                .filter(|j| j.spec.user == spec.user && !j.state.is_terminal())
                .count();
            let adding = spec.array.as_ref().map(|a| a.len()).unwrap_or(1);
            if queued + adding > max as usize {
                return Err(format!(
                    "user {} would have {} jobs queued or running; the limit is {max}",
                    spec.user,
                    queued + adding
                ));
            }
        }
        Ok(())
    }

    /// Jobs `id` names: itself, or every task of the array whose id it is.
    fn resolve(&self, id: JobId) -> Vec<JobId> {
        let tasks: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.array_task.is_some_and(|t| t.array_job_id == id))
            .map(|j| j.id)
            .collect();
        if tasks.is_empty() && self.jobs.contains_key(&id) {
            vec![id]
        } else {
            tasks
        }
    }

    fn cancel(&mut self, id: JobId, by: &str, admin: bool, at: u64) -> Outcome {
        let targets = self.resolve(id);
        if targets.is_empty() {
            return Outcome::NotFound {
                message: format!("job {id} does not exist (or was purged)"),
            };
        }
        if let Some(j) = targets
            .iter()
            .filter_map(|t| self.jobs.get(t))
            .find(|j| !admin && j.spec.user != by)
        {
            return Outcome::PermissionDenied {
                message: format!(
                    "job {} belongs to {}; only its owner or an admin may cancel it",
                    j.display_id(),
                    j.spec.user
                ),
            };
        }
        let mut any = false;
        for t in targets {
            let Some(state) = self.jobs.get(&t).map(|j| j.state) else {
                continue;
            };
            match state {
                JobState::Pending => {
                    let job = self.jobs.get_mut(&t).expect("present");
                    job.state = JobState::Cancelled;
                    job.end_ms = Some(at);
                    job.failure = Some(Failure {
                        kind: FailureKind::Cancelled,
                        node: None,
                        evidence: format!("cancelled by {by}"),
                        at_ms: at,
                    });
                    self.retire(t);
                    any = true;
                }
                JobState::Running => {
                    let failure = Failure {
                        kind: FailureKind::Cancelled,
                        node: None,
                        evidence: format!("cancelled by {by}"),
                        at_ms: at,
                    };
                    self.begin_ending(t, failure, at);
                    any = true;
                }
                _ => {}
            }
        }
        if any {
            Outcome::Ok
        } else {
            Outcome::Rejected {
                message: format!("job {id} has already ended"),
            }
        }
    }

    fn start_jobs(&mut self, starts: &[StartJob], at: u64) -> Outcome {
        let mut started = Vec::new();
        let mut stale = Vec::new();
        for s in starts {
            match self.check_start(s) {
                Ok(()) => {
                    let job = self.jobs.get_mut(&s.job).expect("checked");
                    job.state = JobState::Running;
                    job.reason = PendingReason::None;
                    job.start_ms = Some(at);
                    job.allocation = Some(s.allocation.clone());
                    job.steps = s
                        .allocation
                        .nodes
                        .iter()
                        .map(|n| StepStatus {
                            node: n.node.clone(),
                            state: StepState::Launching,
                            started_ms: None,
                            ended_ms: None,
                            failure: None,
                        })
                        .collect();
                    job.failure = None;
                    job.ending_as = None;
                    job.exit_code = None;
                    for na in &s.allocation.nodes {
                        self.node_usage.entry(na.node.clone()).or_default().add(na);
                    }
                    started.push(s.job);
                }
                Err(why) => stale.push((s.job, why)),
            }
        }
        Outcome::Started { started, stale }
    }

    /// The leader-side re-check of a planned start against committed state: the same
    /// `fits` the scheduler used, so a stale plan can never double-book.
    pub fn check_start(&self, s: &StartJob) -> Result<(), String> {
        let job = self.jobs.get(&s.job).ok_or("job no longer exists")?;
        if job.state != JobState::Pending || job.held {
            return Err(format!("job is {}, not pending", job.state));
        }
        if s.allocation.nodes.len() != job.spec.nodes as usize {
            return Err("allocation has the wrong node count".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for na in &s.allocation.nodes {
            if !seen.insert(&na.node) {
                return Err(format!("node {} appears twice", na.node));
            }
            let node = self
                .nodes
                .get(&na.node)
                .ok_or_else(|| format!("node {} is unknown", na.node))?;
            if !node.is_schedulable() {
                return Err(format!("node {} is not schedulable", na.node));
            }
            if na.gpus.len() as u32 != job.spec.gpus_per_node {
                return Err(format!(
                    "node {} gets {} GPUs, job wants {}",
                    na.node,
                    na.gpus.len(),
                    job.spec.gpus_per_node
                ));
            }
            fits(&Self::capacity_of(node), &self.usage_of(&na.node), na)
                .map_err(|e| format!("node {}: {e}", na.node))?;
        }
        let first = &s.allocation.nodes[0].node;
        let port_taken = self.jobs.values().any(|j| {
            matches!(j.state, JobState::Running | JobState::Completing)
                && j.allocation.as_ref().is_some_and(|a| {
                    a.master_port == s.allocation.master_port
                        && a.nodes.first().is_some_and(|n| &n.node == first)
                })
        });
        if port_taken {
            return Err(format!(
                "port {} on {first} is in use",
                s.allocation.master_port
            ));
        }
        Ok(())
    }

    fn step_mut<'a>(job: &'a mut JobRecord, node: &str) -> Option<&'a mut StepStatus> {
        job.steps.iter_mut().find(|s| s.node == node)
    }

    /// The job a step report is about, if the report is for its current attempt and the
    /// job is still running or ending; otherwise the outcome that refuses the report.
    fn reported_job(&mut self, id: JobId, attempt: u32) -> Result<&mut JobRecord, Outcome> {
        let job = self.jobs.get_mut(&id).ok_or_else(|| Outcome::NotFound {
            message: format!("job {id}"),
        })?;
        if job.restarts != attempt || !matches!(job.state, JobState::Running | JobState::Completing)
        {
            return Err(Outcome::Rejected {
                message: "stale step report".into(),
            });
        }
        Ok(job)
    }

    fn step_started(
        &mut self,
        id: JobId,
        attempt: u32,
        node: &str,
        pid: Option<u32>,
        at: u64,
    ) -> Outcome {
        let job = match self.reported_job(id, attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if let Some(step) = Self::step_mut(job, node)
            && step.state == StepState::Launching
        {
            step.state = StepState::Running { pid };
            step.started_ms = Some(at);
        }
        Outcome::Ok
    }

    #[allow(clippy::too_many_arguments)]
    fn step_exited(
        &mut self,
        id: JobId,
        attempt: u32,
        node: &str,
        code: Option<i32>,
        signal: Option<i32>,
        failure: Option<Failure>,
        at: u64,
    ) -> Outcome {
        let job = match self.reported_job(id, attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        let Some(step) = Self::step_mut(job, node) else {
            return Outcome::Rejected {
                message: format!("job {id} has no step on {node}"),
            };
        };
        if step.state.is_done() {
            return Outcome::Ok;
        }
        step.state = StepState::Exited { code, signal };
        step.ended_ms = Some(at);
        step.started_ms.get_or_insert(at);
        let failed = failure.is_some()
            || code.is_some_and(|c| c != 0)
            || (signal.is_some() && code.is_none());
        let failure = failure.or_else(|| {
            failed.then(|| match (code, signal) {
                (_, Some(sig)) => Failure {
                    kind: FailureKind::Signal { signal: sig },
                    node: Some(node.into()),
                    evidence: format!("killed by signal {sig}"),
                    at_ms: at,
                },
                (Some(c), _) => Failure {
                    kind: FailureKind::ExitCode { code: c },
                    node: Some(node.into()),
                    evidence: format!("exited with code {c}"),
                    at_ms: at,
                },
                _ => Failure {
                    kind: FailureKind::LaunchFailed,
                    node: Some(node.into()),
                    evidence: "ended without a status".into(),
                    at_ms: at,
                },
            })
        });
        if let Some(f) = &failure {
            step.failure = Some(f.clone());
        }
        if code.is_some() && job.exit_code.is_none_or(|c| c == 0) {
            job.exit_code = code;
        }
        if let Some(f) = failure
            && f.kind != FailureKind::GangStopped
        {
            self.begin_ending(id, f, at);
        }
        self.maybe_finish(id, at);
        Outcome::Ok
    }

    fn step_failed(
        &mut self,
        id: JobId,
        attempt: u32,
        node: &str,
        failure: Failure,
        at: u64,
    ) -> Outcome {
        let job = match self.reported_job(id, attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if let Some(step) = Self::step_mut(job, node)
            && step.failure.is_none()
        {
            step.failure = Some(failure.clone());
        }
        self.begin_ending(id, failure, at);
        Outcome::Ok
    }

    /// Moves a running job to `Completing` (the dispatcher then stops every step) and keeps
    /// the most specific failure seen.
    fn begin_ending(&mut self, id: JobId, failure: Failure, at: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if !matches!(job.state, JobState::Running | JobState::Completing) {
            return;
        }
        // A cancel is what the owner asked for: whatever breaks while the job is being torn
        // down (a node lost, a GPU gone) is kept in the step record, not promoted to a
        // requeue the owner did not want.
        let better = job.failure.as_ref().is_none_or(|old| {
            old.kind != FailureKind::Cancelled && failure.kind.precedence() > old.kind.precedence()
        });
        if better {
            job.ending_as = Some(failure.kind.final_state());
            job.failure = Some(failure);
        }
        if job.state == JobState::Running {
            job.state = JobState::Completing;
        }
        self.maybe_finish(id, at);
    }

    /// Once every step of a job is done, releases its resources and ends (or requeues) it.
    fn maybe_finish(&mut self, id: JobId, at: u64) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if !matches!(job.state, JobState::Running | JobState::Completing)
            || !job.steps.iter().all(|s| s.state.is_done())
        {
            return;
        }
        let job = self.jobs.get_mut(&id).expect("present");
        let final_state = job.ending_as.unwrap_or(if job.failure.is_some() {
            JobState::Failed
        } else {
            JobState::Completed
        });
        let start = job.start_ms.unwrap_or(at);
        let gpus: u32 = job
            .allocation
            .as_ref()
            .map(|a| a.nodes.iter().map(|n| n.gpus.len() as u32).sum())
            .unwrap_or(0);
        let allocation = job.allocation.clone();
        job.attempts.push(Attempt {
            restart: job.restarts,
            nodes: job.node_names(),
            start_ms: job.start_ms,
            end_ms: Some(at),
            state: final_state,
            failure: job.failure.clone(),
        });
        let requeue = job.failure.as_ref().is_some_and(|f| {
            let max = job.spec.max_restarts.unwrap_or(self.config.max_restarts);
            (f.kind == FailureKind::Preempted)
                || (job.spec.requeue && f.kind.is_requeueable() && job.restarts < max)
        });
        let (account, user) = (
            job.spec.account.clone().unwrap_or_else(|| "default".into()),
            job.spec.user.clone(),
        );
        if requeue {
            if let Some(f) = &job.failure
                && f.kind.blames_node()
                && let Some(n) = &f.node
                && !job.avoid_nodes.contains(n)
            {
                job.avoid_nodes.push(n.clone());
            }
            job.state = JobState::Pending;
            job.reason = PendingReason::Requeued;
            job.restarts += 1;
            job.eligible_ms = at;
            job.allocation = None;
            job.steps.clear();
            job.ending_as = None;
            job.start_ms = None;
        } else {
            job.state = final_state;
            job.end_ms = Some(at);
            job.ending_as = None;
            job.spec.env.clear();
        }
        if let Some(a) = allocation {
            for na in &a.nodes {
                if let Some(u) = self.node_usage.get_mut(&na.node) {
                    u.remove(na);
                }
            }
        }
        self.charge(
            &account,
            &user,
            f64::from(gpus) * at.saturating_sub(start) as f64 / 1000.0,
            at,
        );
        if !requeue {
            self.retire(id);
        }
    }

    fn charge(&mut self, account: &str, user: &str, gpu_seconds: f64, at: u64) {
        if gpu_seconds <= 0.0 {
            return;
        }
        let half_life = self.config.fairshare_half_life_s;
        let u = self
            .usage
            .entry(account.to_string())
            .or_default()
            .entry(user.to_string())
            .or_default();
        u.gpu_seconds =
            gsched_scheduler::priority::decay(u.gpu_seconds, u.at_ms, at, half_life) + gpu_seconds;
        u.at_ms = at;
    }

    /// Records a terminal job and purges the oldest beyond the retention bound.
    fn retire(&mut self, id: JobId) {
        self.finished.push_back(id);
        while self.finished.len() > self.retain_finished {
            if let Some(old) = self.finished.pop_front() {
                self.jobs.remove(&old);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn register_node(
        &mut self,
        name: &str,
        address: &str,
        training_addr: &str,
        topology: &gsched_types::Topology,
        features: &[String],
        agent_version: &str,
        known: &[KnownStep],
        at: u64,
    ) -> Outcome {
        if let Err(e) = topology.validate() {
            return Outcome::Rejected {
                message: e.to_string(),
            };
        }
        let record = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| NodeRecord {
                name: name.to_string(),
                address: address.to_string(),
                training_addr: training_addr.to_string(),
                topology: topology.clone(),
                features: features.to_vec(),
                admin: NodeAdminState::Up,
                online: true,
                registered_ms: at,
                state_changed_ms: at,
                bad_gpus: Vec::new(),
                health: Vec::new(),
                agent_version: agent_version.to_string(),
            });
        if record.topology.gpus.len() != topology.gpus.len() {
            record.bad_gpus.clear();
        }
        record.address = address.to_string();
        record.training_addr = training_addr.to_string();
        record.topology = topology.clone();
        record.features = features.to_vec();
        record.agent_version = agent_version.to_string();
        if !record.online {
            record.state_changed_ms = at;
        }
        record.online = true;
        record.registered_ms = at;
        // Steps the controller thinks run here but the agent does not know: lost.
        let lost: Vec<(JobId, u32)> = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
            .filter(|j| {
                j.steps
                    .iter()
                    .any(|s| s.node == name && matches!(s.state, StepState::Running { .. }))
            })
            .filter(|j| {
                !known
                    .iter()
                    .any(|k| k.job == j.id && k.attempt == j.restarts)
            })
            .map(|j| (j.id, j.restarts))
            .collect();
        for (id, _) in lost {
            self.lose_step(
                id,
                name,
                "the agent restarted without this step (its state was lost)",
                at,
            );
        }
        Outcome::Ok
    }

    fn lose_step(&mut self, id: JobId, node: &str, why: &str, at: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some(step) = Self::step_mut(job, node) else {
            return;
        };
        if step.state.is_done() {
            return;
        }
        step.state = StepState::Lost;
        step.ended_ms = Some(at);
        let failure = Failure {
            kind: FailureKind::NodeLost,
            node: Some(node.into()),
            evidence: why.into(),
            at_ms: at,
        };
        step.failure = Some(failure.clone());
        self.begin_ending(id, failure, at);
    }

    fn node_lost(&mut self, node: &str, reason: &str, at: u64) -> Outcome {
        let Some(record) = self.nodes.get_mut(node) else {
            return Outcome::NotFound {
                message: format!("no node named {node}"),
            };
        };
        if record.online {
            record.state_changed_ms = at;
        }
        record.online = false;
        let affected: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| {
                matches!(j.state, JobState::Running | JobState::Completing)
                    && j.steps.iter().any(|s| s.node == node && !s.state.is_done())
            })
            .map(|j| j.id)
            .collect();
        for id in affected {
            self.lose_step(id, node, reason, at);
        }
        Outcome::Ok
    }

    fn health_events(&mut self, node: &str, events: &[HealthEvent], at: u64) -> Outcome {
        let Some(record) = self.nodes.get_mut(node) else {
            return Outcome::NotFound {
                message: format!("no node named {node}"),
            };
        };
        let mut failures: Vec<(u32, Failure)> = Vec::new();
        for ev in events {
            record.health.push(ev.clone());
            if ev.severity == HealthSeverity::Critical {
                if let Some(g) = ev.gpu
                    && !record.bad_gpus.contains(&g)
                {
                    record.bad_gpus.push(g);
                    record.bad_gpus.sort_unstable();
                }
                if !record.is_drained() {
                    record.admin = NodeAdminState::Drain {
                        reason: ev.message.clone(),
                        since_ms: ev.at_ms.min(at).max(1),
                        by: "health".into(),
                    };
                    record.state_changed_ms = at;
                }
                let kind = match (ev.kind.as_str(), ev.xid) {
                    ("gpu_lost" | "gpu_count", _) => FailureKind::GpuLost { gpu: ev.gpu },
                    (_, Some(code)) => FailureKind::GpuXid { code },
                    _ => FailureKind::GpuLost { gpu: ev.gpu },
                };
                if let Some(g) = ev.gpu {
                    failures.push((
                        g,
                        Failure {
                            kind,
                            node: Some(node.into()),
                            evidence: ev.message.clone(),
                            at_ms: ev.at_ms,
                        },
                    ));
                }
            }
        }
        let excess = record.health.len().saturating_sub(HEALTH_HISTORY);
        record.health.drain(..excess);
        for (gpu, failure) in failures {
            let victims: Vec<(JobId, u32)> = self
                .jobs
                .values()
                .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
                .filter(|j| {
                    j.allocation.as_ref().is_some_and(|a| {
                        a.nodes
                            .iter()
                            .any(|n| n.node == node && n.gpus.contains(&gpu))
                    })
                })
                .map(|j| (j.id, j.restarts))
                .collect();
            for (id, attempt) in victims {
                self.step_failed(id, attempt, node, failure.clone(), at);
            }
        }
        Outcome::Ok
    }

    fn requeue_request(&mut self, id: JobId, by: &str, admin: bool, at: u64) -> Outcome {
        let Some(job) = self.jobs.get(&id) else {
            return Outcome::NotFound {
                message: format!("job {id} does not exist"),
            };
        };
        if !admin && job.spec.user != by {
            return Outcome::PermissionDenied {
                message: format!("job {id} belongs to {}", job.spec.user),
            };
        }
        if job.state != JobState::Running {
            return Outcome::Rejected {
                message: format!(
                    "job {id} is {}; only running jobs can be requeued",
                    job.state
                ),
            };
        }
        let failure = Failure {
            kind: FailureKind::Preempted,
            node: None,
            evidence: format!("requeued by {by}"),
            at_ms: at,
        };
        self.begin_ending(id, failure, at);
        Outcome::Ok
    }

    fn hold(&mut self, id: JobId, by: &str, admin: bool, hold: bool) -> Outcome {
        let targets = self.resolve(id);
        if targets.is_empty() {
            return Outcome::NotFound {
                message: format!("job {id} does not exist"),
            };
        }
        for t in targets {
            let job = self.jobs.get_mut(&t).expect("resolved");
            if !admin && job.spec.user != by {
                return Outcome::PermissionDenied {
                    message: format!("job {id} belongs to {}", job.spec.user),
                };
            }
            if job.state == JobState::Pending {
                job.held = hold;
                job.reason = if hold {
                    PendingReason::JobHeldUser
                } else {
                    PendingReason::None
                };
            }
        }
        Outcome::Ok
    }
}
