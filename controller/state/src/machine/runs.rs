//! What agents report about their node's run of a job: started, failed while running,
//! exited; and a run lost with its node.

use super::ClusterState;
use crate::command::{
    IdleGpus, JobWarning, Outcome, RecordUsage, RunExited, RunFailed, RunStarted,
};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::MAX_JOB_WARNINGS;
use gsched_types::job::{JobId, JobRecord, JobState, LaunchMode, NodeRun, RunState};
use gsched_types::usage::NodeUsage;

/// The most GPUs one node's usage summary keeps.
const MAX_USAGE_GPUS: usize = 64;

impl ClusterState {
    fn run_mut<'a>(job: &'a mut JobRecord, node: &str) -> Option<&'a mut NodeRun> {
        job.runs.iter_mut().find(|s| s.node == node)
    }

    /// The job a run report is about, if the report is for its current attempt and the
    /// job is still running or ending; otherwise the outcome that refuses the report.
    fn reported_job(&mut self, id: JobId, attempt: u32) -> Result<&mut JobRecord, Outcome> {
        let job = self.jobs.get_mut(&id).ok_or_else(|| Outcome::NotFound {
            message: format!("job {id}"),
        })?;
        if job.attempt != attempt || !matches!(job.state, JobState::Running | JobState::Completing)
        {
            return Err(Outcome::Rejected {
                message: "stale step report".into(),
            });
        }
        Ok(job)
    }

    pub(super) fn run_started(&mut self, c: &RunStarted, at: u64) -> Outcome {
        let job = match self.reported_job(c.job, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if let Some(run) = Self::run_mut(job, &c.node)
            && run.state == RunState::Launching
        {
            run.state = RunState::Running { pid: c.pid };
            run.started_ms = Some(at);
        }
        Outcome::Ok
    }

    pub(super) fn run_exited(&mut self, c: &RunExited, at: u64) -> Outcome {
        let (id, node, code, signal) = (c.job, c.node.as_str(), c.code, c.signal);
        self.fenced_run_ended(node, id, c.attempt);
        let job = match self.reported_job(id, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        // The run and the usage list are borrowed apart (fields, not `run_mut`).
        let Some(run) = job.runs.iter_mut().find(|s| s.node == node) else {
            return Outcome::Rejected {
                message: format!("job {id} has no step on {node}"),
            };
        };
        if run.state.is_done() {
            return Outcome::Ok;
        }
        if let Some(u) = &c.usage {
            Self::keep_usage(&mut job.usage, node, u);
        }
        run.state = RunState::Exited { code, signal };
        run.ended_ms = Some(at);
        run.started_ms.get_or_insert(at);
        let failed = c.failure.is_some()
            || code.is_some_and(|c| c != 0)
            || (signal.is_some() && code.is_none());
        let failure = c.failure.clone().or_else(|| {
            failed.then(|| {
                match (code, signal) {
                    (_, Some(sig)) => Failure::new(
                        FailureKind::Signal { signal: sig },
                        format!("killed by signal {sig}"),
                        at,
                    ),
                    (Some(c), _) => Failure::new(
                        FailureKind::ExitCode { code: c },
                        format!("exited with code {c}"),
                        at,
                    ),
                    _ => Failure::new(FailureKind::LaunchFailed, "ended without a status", at),
                }
                .on(node)
            })
        });
        if let Some(f) = &failure {
            run.failure = Some(f.clone());
        }
        if code.is_some() && job.exit_code.is_none_or(|c| c == 0) {
            job.exit_code = code;
        }
        let batch_done = failure.is_none()
            && job.spec.launch == LaunchMode::Batch
            && job.runs.first().is_some_and(|s| s.node == node);
        if let Some(f) = failure
            && f.kind != FailureKind::GangStopped
        {
            self.begin_ending(id, f, at);
        } else if batch_done {
            self.end_with_batch_script(id);
        }
        self.maybe_finish(id, at);
        Outcome::Ok
    }

    /// A batch job's script ended well on its first node: the job is done, and the other
    /// nodes (holding the allocation for steps) are stopped.
    fn end_with_batch_script(&mut self, id: JobId) {
        if let Some(job) = self.jobs.get_mut(&id)
            && job.state == JobState::Running
        {
            job.state = JobState::Completing;
            job.ending_as = Some(JobState::Completed);
        }
    }

    /// Replaces `node`'s usage summary (bounded: its GPU list and series as a node may
    /// send them, never more than the allocation's GPUs).
    fn keep_usage(usage: &mut Vec<NodeUsage>, node: &str, u: &NodeUsage) {
        let mut u = u.clone();
        u.node = node.to_string();
        u.gpus.truncate(MAX_USAGE_GPUS);
        for g in &mut u.gpus {
            g.series.truncate(gsched_types::usage::SERIES_POINTS);
        }
        match usage.iter_mut().find(|x| x.node == node) {
            Some(old) => *old = u,
            None => usage.push(u),
        }
    }

    pub(super) fn record_usage(&mut self, c: &RecordUsage) -> Outcome {
        let job = match self.reported_job(c.job, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        match Self::run_mut(job, &c.node) {
            None => {
                return Outcome::Rejected {
                    message: format!("job {} has no step on {}", c.job, c.node),
                };
            }
            Some(run) if run.state.is_done() => return Outcome::Ok,
            Some(_) => {}
        }
        Self::keep_usage(&mut job.usage, &c.node, &c.usage);
        // A GPU that rose above the threshold withdraws the idle warning.
        if let Some(n) = &job.idle
            && crate::idle::idle_for_s(job).is_some_and(|s| s < n.after_s)
        {
            job.idle = None;
        }
        Outcome::Ok
    }

    pub(super) fn idle_gpus(&mut self, c: &IdleGpus, at: u64) -> Outcome {
        let job = match self.reported_job(c.job, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if job.state != JobState::Running {
            return Outcome::Ok;
        }
        if !c.cancel {
            job.idle = Some(c.notice.clone());
            return Outcome::Ok;
        }
        let failure = Failure::new(
            FailureKind::IdleGpus,
            format!("cancelled by the idle-GPU policy: {}", c.notice.evidence),
            at,
        );
        self.begin_ending(c.job, failure, at);
        Outcome::Ok
    }

    /// Records a node's warning on the job: one per kind and node (a newer one replaces
    /// it), at most `MAX_JOB_WARNINGS` (the oldest goes).
    pub(super) fn job_warning(&mut self, c: &JobWarning) -> Outcome {
        let job = match self.reported_job(c.job, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if Self::run_mut(job, &c.node).is_none() {
            return Outcome::Rejected {
                message: format!("job {} has no step on {}", c.job, c.node),
            };
        }
        let mut finding = c.finding.clone();
        finding.node = Some(c.node.clone());
        finding.kind = finding.kind.chars().take(64).collect();
        finding.evidence = finding.evidence.chars().take(1000).collect();
        finding.action = finding.action.chars().take(1000).collect();
        job.warnings
            .retain(|w| !(w.kind == finding.kind && w.node == finding.node));
        if job.warnings.len() >= MAX_JOB_WARNINGS {
            job.warnings.remove(0);
        }
        job.warnings.push(finding);
        Outcome::Ok
    }

    pub(super) fn run_failed(&mut self, c: &RunFailed, at: u64) -> Outcome {
        let job = match self.reported_job(c.job, c.attempt) {
            Ok(job) => job,
            Err(refused) => return refused,
        };
        if let Some(run) = Self::run_mut(job, &c.node)
            && run.failure.is_none()
        {
            run.failure = Some(c.failure.clone());
        }
        self.begin_ending(c.job, c.failure.clone(), at);
        Outcome::Ok
    }

    /// Marks a node's run of a job lost (the node is gone, or its agent forgot the run).
    pub(super) fn lose_run(&mut self, id: JobId, node: &str, why: &str, at: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        // --no-kill: the job goes on without the node while its batch script (or, for a
        // job that runs on every node, another node's run) does.
        let carries_on = job.spec.no_kill
            && job.state == JobState::Running
            && !(job.spec.launch == LaunchMode::Batch
                && job.runs.first().is_some_and(|r| r.node == node))
            && job
                .runs
                .iter()
                .any(|r| r.node != node && !r.state.is_done());
        let Some(run) = Self::run_mut(job, node) else {
            return;
        };
        if run.state.is_done() {
            return;
        }
        run.state = RunState::Lost;
        run.ended_ms = Some(at);
        let failure = Failure::new(FailureKind::NodeLost, why, at).on(node);
        run.failure = Some(failure.clone());
        if !carries_on {
            self.begin_ending(id, failure, at);
        }
    }
}
