//! Jobs: submission and its limits, placement, preemption, the time-limit backstop, and
//! the end of an attempt (release, requeue, fair-share charge, retention). What users do
//! to jobs that exist (cancel, hold, requeue, update) is [`super::actions`].

use super::{ClusterState, Shared, payload};
use crate::command::{
    CancelUnsatisfiable, EndPastDeadline, Outcome, Preempt, SetPendingReasons, StartJob, SubmitJob,
    TimeoutJob,
};
use crate::notify::Before;
use gsched_scheduler::DepView;
use gsched_scheduler::decay::decay;
use gsched_scheduler::deps::{self, DepStatus};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{ArrayTask, Attempt, JobId, JobRecord, JobState, PendingReason};
use gsched_types::job::{NodeRun, RunState};
use gsched_types::parse::format_duration;
use gsched_types::resources::{FitError, fits};

/// Why the committed state refuses a planned start (the plan was made on an older view).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartRefused {
    #[error("job no longer exists")]
    JobGone,
    #[error("job is {0}, not pending")]
    NotPending(JobState),
    #[error("allocation has the wrong node count")]
    NodeCount,
    #[error("node {0} appears twice")]
    NodeTwice(String),
    #[error("node {0} is unknown")]
    UnknownNode(String),
    #[error("node {0} is not schedulable")]
    NotSchedulable(String),
    #[error("node {node} gets {given} GPUs, job wants {wanted}")]
    GpuCount {
        node: String,
        given: usize,
        wanted: u32,
    },
    #[error("node {node}: {why}")]
    DoesNotFit { node: String, why: FitError },
    #[error("port {port} on {node} is in use")]
    PortInUse { port: u16, node: String },
}

/// The refusal of an action on someone else's job, naming the rule.
pub(super) fn not_yours(job: &str, owner: &str, by: &str, action: &str) -> String {
    format!(
        "permission denied: job {job} belongs to {owner}; only its owner, an operator or an admin may {action} it (you are {by})"
    )
}

impl ClusterState {
    pub(super) fn submit(&mut self, c: &SubmitJob, at: u64) -> Outcome {
        // Every job of the submission shares one copy of the script, environment and
        // task list: the records hold only what differs.
        let mut spec = c.spec.clone();
        if spec.account.is_none() {
            spec.account = self.default_account(&spec.user);
        }
        if let Err(message) = self.validate_submit(&spec) {
            return Outcome::Rejected { message };
        }
        // The partition is decided at submission: a later change of the default
        // partition must not move jobs already queued (as in Slurm). Without configured
        // partitions there is only the implicit one, which stays implicit.
        if spec.partition.is_none() && !self.config.partitions.is_empty() {
            spec.partition = Some(self.config.default_partition());
        }
        let mut span = None;
        let tasks: Vec<Option<u32>> = match spec.array.take() {
            Some(ids) => {
                span = gsched_types::job::ArraySpan::of(&ids);
                ids.into_iter().map(Some).collect()
            }
            None => vec![None],
        };
        self.next_job_id = self.next_job_id.max(self.config.first_job_id);
        let base = JobId(self.next_job_id);
        let payload = payload::take(&mut spec, tasks.len() as u32, &mut self.blobs);
        self.payloads.insert(base, Shared::new(payload));
        self.queued.add(&spec.user, tasks.len() as u64);
        let mut ids = Vec::with_capacity(tasks.len());
        for task in tasks {
            let id = JobId(self.next_job_id);
            self.next_job_id += 1;
            let mut record = JobRecord::new(id, spec.clone(), at);
            record.array_task = task.map(|t| ArrayTask {
                array_job_id: base,
                task_id: t,
                span,
            });
            self.jobs.insert(id, Shared::new(record));
            self.note_schedulable(id);
            ids.push(id);
        }
        Outcome::Submitted { jobs: ids }
    }

    /// The spec's own checks (`crate::validate`) and those that depend on replicated
    /// state (partition names, queue limits, dependencies).
    fn validate_submit(&self, spec: &gsched_types::JobSpec) -> Result<(), String> {
        crate::validate::job_spec(spec, &self.config.limits).map_err(|e| e.to_string())?;
        if let Some(message) = self.reservation_refuses(spec) {
            return Err(message);
        }
        if let Some(message) = self.association_refuses(spec) {
            return Err(message);
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
        // As partitions: a cluster that defines no QOS takes any name and applies no QOS
        // limit (Slurm without QOS enforcement does the same), so scripts from another
        // site's `--qos` run; one that defines some refuses the others.
        if let Some(q) = &spec.qos
            && !self.config.qos.is_empty()
            && self.config.qos(Some(q)).is_none()
        {
            let names: Vec<&str> = self.config.qos.iter().map(|q| q.name.as_str()).collect();
            return Err(format!(
                "invalid QOS '{q}': known QOS are {}",
                names.join(", ")
            ));
        }
        let partition = self.config.partition_of(spec);
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
                format_duration(t),
                format_duration(max)
            ));
        }
        let adding = spec.array.as_ref().map(|a| a.len()).unwrap_or(1) as u64;
        let (total, mine) = self.queued(&spec.user);
        if let Some(max) = self.config.user_limits.max_queued_jobs
            && mine + adding > u64::from(max)
        {
            return Err(format!(
                "user {} would have {} jobs queued or running; the limit is {max} (MaxSubmitJobs)",
                spec.user,
                mine + adding
            ));
        }
        let max = self.config.limits.max_job_count;
        if total + adding > max {
            return Err(format!(
                "the queue holds {total} jobs and this submission adds {adding}; the cluster's limit is {max} (MaxJobCount); try again when jobs have ended"
            ));
        }
        for dep in &spec.dependency {
            if let Some(id) = dep.job
                && !self.jobs.contains_key(&id)
            {
                return Err(format!(
                    "invalid dependency: job {id} does not exist (or ended too long ago to be remembered)"
                ));
            }
        }
        Ok(())
    }

    /// Why `job`'s dependencies can never be satisfied, if they cannot.
    fn unsatisfiable(&self, job: &JobRecord) -> Option<String> {
        job.spec.dependency.iter().find_map(|dep| {
            let id = dep.job?;
            let on = self.jobs.get(&id);
            let view = on.map(|d| DepView {
                state: d.state,
                exit_code: d.exit_code,
            });
            (deps::status(dep.kind, view) == DepStatus::Never).then(|| match on {
                Some(d) => format!(
                    "its dependency {:?} on job {id} can never be satisfied: job {id} ended {}",
                    dep.kind, d.state
                ),
                None => format!(
                    "its dependency {:?} on job {id} can never be satisfied: job {id} is gone",
                    dep.kind
                ),
            })
        })
    }

    pub(super) fn cancel_unsatisfiable(&mut self, c: &CancelUnsatisfiable, at: u64) -> Outcome {
        for id in &c.jobs {
            let Some(job) = self.jobs.get(id).filter(|j| j.state == JobState::Pending) else {
                continue;
            };
            let Some(why) = self.unsatisfiable(job) else {
                continue;
            };
            let before = Before::of(job);
            let job = self.jobs.get_mut(id).expect("present");
            job.state = JobState::Cancelled;
            job.end_ms = Some(at);
            job.failure = Some(Failure::new(FailureKind::DependencyNeverSatisfied, why, at));
            self.note(*id, before, at);
            self.retire(*id);
        }
        Outcome::Ok
    }

    /// Ends the jobs of `c` that are still pending and can no longer end by their
    /// deadline: their shortest run (`--time-min`, else their time limit) from `at`
    /// passes it.
    pub(super) fn end_past_deadline(&mut self, c: &EndPastDeadline, at: u64) -> Outcome {
        for id in &c.jobs {
            let Some(job) = self.jobs.get(id).filter(|j| j.state == JobState::Pending) else {
                continue;
            };
            let Some(deadline) = job.spec.deadline_ms else {
                continue;
            };
            let shortest = job
                .spec
                .time_min_s
                .or_else(|| self.config.time_limit_for(&job.spec))
                .unwrap_or(0);
            if at.saturating_add(shortest.saturating_mul(1000)) <= deadline {
                continue;
            }
            let why = format!(
                "it could no longer end by its deadline {}: {} s to run from now",
                gsched_types::parse::format_timestamp(deadline),
                shortest
            );
            let job = self.jobs.get_mut(id).expect("present");
            let before = Before::of(job);
            job.state = JobState::Deadline;
            job.end_ms = Some(at);
            job.failure = Some(Failure::new(FailureKind::Deadline, why, at));
            self.note(*id, before, at);
            self.retire(*id);
        }
        Outcome::Ok
    }

    pub(super) fn set_pending_reasons(&mut self, c: &SetPendingReasons, at: u64) -> Outcome {
        // A dependency found never to be met is told (INVALID_DEPEND).
        let mut noted = Vec::new();
        for (id, reason) in &c.reasons {
            if let Some(j) = self.jobs.get_mut(id)
                && j.state == JobState::Pending
            {
                if *reason == PendingReason::TopologyWait {
                    j.placement_wait_since_ms.get_or_insert(at);
                }
                if *reason == PendingReason::DependencyNeverSatisfied && j.reason != *reason {
                    noted.push((*id, Before::of(j)));
                }
                j.reason = reason.clone();
            }
        }
        for (id, before) in noted {
            self.note(id, before, at);
        }
        Outcome::Ok
    }

    pub(super) fn start_jobs(&mut self, starts: &[StartJob], at: u64) -> Outcome {
        let mut started = Vec::new();
        let mut stale = Vec::new();
        for s in starts {
            match self.check_start(s) {
                Ok(()) => {
                    let job: &mut JobRecord = self.jobs.get_mut(&s.job).expect("checked");
                    let before = Before::of(job);
                    job.state = JobState::Running;
                    job.reason = PendingReason::None;
                    job.start_ms = Some(at);
                    job.allocation = Some(s.allocation.clone());
                    // Backfill shortened it towards its --time-min to fit a hole.
                    if let Some(limit) = s.time_limit_s {
                        job.spec.time_limit_s = Some(limit);
                    }
                    job.runs = s
                        .allocation
                        .nodes
                        .iter()
                        .map(|n| NodeRun {
                            node: n.node.clone(),
                            state: RunState::Launching,
                            started_ms: None,
                            ended_ms: None,
                            failure: None,
                        })
                        .collect();
                    job.failure = None;
                    job.ending_as = None;
                    // A requeued job's usage goes with the attempt it measured.
                    match job.attempts.last_mut() {
                        Some(last) if last.usage.is_empty() => {
                            last.usage = std::mem::take(&mut job.usage);
                        }
                        _ => job.usage.clear(),
                    }
                    job.idle = None;
                    job.exit_code = None;
                    for na in &s.allocation.nodes {
                        self.node_usage.entry(na.node.clone()).or_default().add(na);
                    }
                    self.allocated.insert(s.job);
                    self.schedulable.remove(&s.job);
                    if let Some(first) = s.allocation.nodes.first() {
                        self.ports_in_use
                            .insert((first.node.clone(), s.allocation.master_port));
                    }
                    started.push(s.job);
                    self.note(s.job, before, at);
                }
                Err(why) => stale.push((s.job, why.to_string())),
            }
        }
        Outcome::Started { started, stale }
    }

    /// The leader-side re-check of a planned start against committed state: the same
    /// `fits` the scheduler used, so a stale plan can never double-book.
    pub fn check_start(&self, s: &StartJob) -> Result<(), StartRefused> {
        let job = self.jobs.get(&s.job).ok_or(StartRefused::JobGone)?;
        if job.state != JobState::Pending || job.held {
            return Err(StartRefused::NotPending(job.state));
        }
        if s.allocation.nodes.len() != job.spec.nodes as usize {
            return Err(StartRefused::NodeCount);
        }
        let mut seen = std::collections::BTreeSet::new();
        for na in &s.allocation.nodes {
            if !seen.insert(&na.node) {
                return Err(StartRefused::NodeTwice(na.node.clone()));
            }
            let node = self
                .nodes
                .get(&na.node)
                .ok_or_else(|| StartRefused::UnknownNode(na.node.clone()))?;
            if !node.is_schedulable() {
                return Err(StartRefused::NotSchedulable(na.node.clone()));
            }
            // An exclusive job holds every GPU of its node (at least what it asked for).
            let gpus_ok = if job.spec.exclusive {
                na.exclusive && na.gpus.len() as u32 >= job.spec.gpus_per_node
            } else {
                na.gpus.len() as u32 == job.spec.gpus_per_node
            };
            if !gpus_ok {
                return Err(StartRefused::GpuCount {
                    node: na.node.clone(),
                    given: na.gpus.len(),
                    wanted: job.spec.gpus_per_node,
                });
            }
            fits(&Self::capacity_of(node), &self.usage_of(&na.node), na).map_err(|e| {
                StartRefused::DoesNotFit {
                    node: na.node.clone(),
                    why: e,
                }
            })?;
        }
        let first = &s.allocation.nodes[0].node;
        if self.port_in_use(first, s.allocation.master_port) {
            return Err(StartRefused::PortInUse {
                port: s.allocation.master_port,
                node: first.clone(),
            });
        }
        Ok(())
    }

    /// Moves a running job to `Completing` (the dispatcher then stops every node run) and keeps
    /// the most specific failure seen.
    pub(super) fn begin_ending(&mut self, id: JobId, failure: Failure, at: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if !matches!(job.state, JobState::Running | JobState::Completing) {
            return;
        }
        // A cancel is what the owner asked for: whatever breaks while the job is being torn
        // down (a node lost, a GPU gone) is kept in the node run's record, not promoted to a
        // requeue the owner did not want.
        let better = job.failure.as_ref().is_none_or(|old| {
            !matches!(old.kind, FailureKind::Cancelled | FailureKind::IdleGpus)
                && failure.kind.precedence() > old.kind.precedence()
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

    /// Once every node run of a job is done, releases its resources and ends (or requeues) it.
    pub(super) fn maybe_finish(&mut self, id: JobId, at: u64) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if !matches!(job.state, JobState::Running | JobState::Completing)
            || !job.runs.iter().all(|s| s.state.is_done())
        {
            return;
        }
        let max_restarts = self.config.max_restarts;
        let before = Before::of(job);
        let job: &mut JobRecord = self.jobs.get_mut(&id).expect("present");
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
            number: job.attempt,
            nodes: job.node_names(),
            start_ms: job.start_ms,
            end_ms: Some(at),
            state: final_state,
            failure: job.failure.clone(),
            usage: Vec::new(),
        });
        let requeue = job.failure.as_ref().is_some_and(|f| {
            let max = job.spec.max_restarts.unwrap_or(max_restarts);
            (f.kind == FailureKind::Preempted)
                || (job.spec.requeue && f.kind.is_requeueable() && job.attempt < max)
        });
        let (account, user) = (job.spec.account_name().to_string(), job.spec.user.clone());
        // Steps still running end with their job.
        for s in job
            .steps
            .iter_mut()
            .filter(|s| s.state == gsched_types::steps::StepState::Running)
        {
            s.state = gsched_types::steps::StepState::Cancelled;
            s.end_ms = Some(at);
        }
        if requeue {
            if let Some(f) = &job.failure
                && f.kind.blames_node()
                && let Some(n) = &f.node
                && !job.avoid_nodes.contains(n)
            {
                job.avoid_nodes.push(n.clone());
            }
            job.state = JobState::Pending;
            // A job held while it ran stays held (as Slurm's hold of a running job).
            job.reason = if job.held {
                PendingReason::JobHeldUser
            } else {
                PendingReason::Requeued
            };
            job.attempt += 1;
            job.eligible_ms = at;
            job.placement_wait_since_ms = None;
            job.allocation = None;
            job.runs.clear();
            job.steps.clear();
            job.idle = None;
            job.ending_as = None;
            job.start_ms = None;
        } else {
            job.state = final_state;
            job.end_ms = Some(at);
            job.ending_as = None;
        }
        self.note_schedulable(id);
        if let Some(a) = allocation {
            self.allocated.remove(&id);
            for na in &a.nodes {
                if let Some(u) = self.node_usage.get_mut(&na.node) {
                    u.remove(na);
                }
            }
            if let Some(first) = a.nodes.first() {
                self.ports_in_use
                    .remove(&(first.node.clone(), a.master_port));
            }
        }
        self.charge(
            &account,
            &user,
            f64::from(gpus) * at.saturating_sub(start) as f64 / 1000.0,
            at,
        );
        self.note(id, before, at);
        if !requeue {
            self.retire(id);
        }
    }

    /// Adds GPU-seconds to a user's decayed usage (the fair-share input).
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
        u.gpu_seconds = decay(u.gpu_seconds, u.at_ms, at, half_life) + gpu_seconds;
        u.at_ms = at;
    }

    /// Records a terminal job (releasing its share of the payload and its place in the
    /// queue counts) and purges the oldest beyond the retention bound.
    pub(super) fn retire(&mut self, id: JobId) {
        self.schedulable.remove(&id);
        if let Some(job) = self.jobs.get(&id) {
            let (key, user) = (payload::key_of(job), job.spec.user.clone());
            payload::release(&mut self.payloads, &mut self.blobs, key);
            self.queued.remove(&user);
        }
        self.finished.push_back(id);
        self.purge_finished();
    }

    pub(super) fn preempt(&mut self, c: &Preempt, at: u64) -> Outcome {
        for v in &c.victims {
            let failure = Failure::new(
                FailureKind::Preempted,
                format!("preempted for job {}", c.for_job),
                at,
            );
            self.begin_ending(*v, failure, at);
        }
        Outcome::Ok
    }

    pub(super) fn timeout_job(&mut self, c: &TimeoutJob, at: u64) -> Outcome {
        if self
            .jobs
            .get(&c.job)
            .is_some_and(|j| j.attempt == c.attempt && j.state == JobState::Running)
        {
            let failure = Failure::new(
                FailureKind::Timeout,
                "time limit reached (controller backstop)",
                at,
            );
            self.begin_ending(c.job, failure, at);
        }
        Outcome::Ok
    }
}
