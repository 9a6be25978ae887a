//! Commands no build proposes any more, kept so that logs written before the one action
//! path ([`super::actions`]) replay as they were applied: `cancel_job`, `requeue_job` and
//! `hold_job` (format version 1) and `update_job` (3), which acted on one job (or, for
//! cancel and hold, every task of the array it names). Each finds its job and refuses as
//! it always did, with the same outcome (outcomes are remembered under request ids, and
//! so are part of the state and its digest), and changes jobs through the action path's
//! own changes where they are the same: cancelling a pending or running job, requeueing
//! a running one, holding or releasing a pending one, setting a time limit.
//!
//! What differs from the action path stays here: a `hold_job` answered `Ok` without
//! changing a job that was not pending (the action path holds a running job for its next
//! attempt, and reports a finished one), and nothing here reports per job.

use super::ClusterState;
use super::jobs::not_yours;
use crate::command::{CancelJob, HoldJob, Outcome, RequeueJob, UpdateJob};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobState};

impl ClusterState {
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

    /// `cancel_job`: every task of the job or array, or the first owner refusal.
    pub(super) fn legacy_cancel(&mut self, c: &CancelJob, at: u64) -> Outcome {
        let (id, by) = (c.job, c.by.as_str());
        let targets = self.resolve(id);
        if targets.is_empty() {
            return Outcome::NotFound {
                message: format!("job {id} does not exist (or was purged)"),
            };
        }
        if let Some(j) = targets
            .iter()
            .filter_map(|t| self.jobs.get(t))
            .find(|j| !c.admin && j.spec.user != by)
        {
            return Outcome::PermissionDenied {
                message: not_yours(&j.display_id(), &j.spec.user, by, "cancel"),
            };
        }
        let mut any = false;
        for t in targets {
            let Some(state) = self.jobs.get(&t).map(|j| j.state) else {
                continue;
            };
            let failure = Failure::new(FailureKind::Cancelled, format!("cancelled by {by}"), at);
            match state {
                JobState::Pending => {
                    self.cancel_pending(t, failure, at);
                    any = true;
                }
                JobState::Running => {
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

    /// `requeue_job`: one running job.
    pub(super) fn legacy_requeue(&mut self, c: &RequeueJob, at: u64) -> Outcome {
        let id = c.job;
        let Some(job) = self.jobs.get(&id) else {
            return Outcome::NotFound {
                message: format!("job {id} does not exist"),
            };
        };
        if !c.admin && job.spec.user != c.by {
            return Outcome::PermissionDenied {
                message: not_yours(&job.display_id(), &job.spec.user, &c.by, "requeue"),
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
        let failure = Failure::new(FailureKind::Preempted, format!("requeued by {}", c.by), at);
        self.begin_ending(id, failure, at);
        Outcome::Ok
    }

    /// `hold_job`: holds or releases the pending ones among the job's (or array's) tasks.
    /// Ownership is checked for every task before any changes: the tasks of an array
    /// share their owner, so the entries old builds wrote (which checked task by task)
    /// apply the same.
    pub(super) fn legacy_hold(&mut self, c: &HoldJob) -> Outcome {
        let id = c.job;
        let targets = self.resolve(id);
        if targets.is_empty() {
            return Outcome::NotFound {
                message: format!("job {id} does not exist"),
            };
        }
        if let Some(job) = targets
            .iter()
            .filter_map(|t| self.jobs.get(t))
            .find(|j| !c.admin && j.spec.user != c.by)
        {
            let what = if c.hold { "hold" } else { "release" };
            return Outcome::PermissionDenied {
                message: not_yours(&job.display_id(), &job.spec.user, &c.by, what),
            };
        }
        for t in targets {
            if self
                .jobs
                .get(&t)
                .is_some_and(|j| j.state == JobState::Pending)
            {
                self.set_hold(t, c.hold);
            }
        }
        Outcome::Ok
    }

    /// `update_job`: one job's time limit, by the rule the action path keeps (the owner
    /// may lower it, an operator also raise a pending job's).
    pub(super) fn legacy_update(&mut self, c: &UpdateJob) -> Outcome {
        let Some(job) = self.jobs.get(&c.job) else {
            return Outcome::NotFound {
                message: format!("job {}", c.job),
            };
        };
        if !c.admin && job.spec.user != c.by {
            return Outcome::PermissionDenied {
                message: not_yours(&job.display_id(), &job.spec.user, &c.by, "update"),
            };
        }
        let Some(new) = c.time_limit_s else {
            return Outcome::Rejected {
                message: "nothing to update: give TimeLimit=".into(),
            };
        };
        if new > crate::validate::MAX_TIME_S {
            return Outcome::Rejected {
                message: "the time limit is over ten years; use UNLIMITED for none".into(),
            };
        }
        // Limits compared as seconds, no limit as the largest.
        let as_secs = |t: Option<u64>| t.filter(|t| *t > 0).unwrap_or(u64::MAX);
        let now = as_secs(self.config.time_limit_for(&job.spec));
        let raises = as_secs(Some(new)) > now;
        match job.state {
            JobState::Pending if raises && !c.admin => Outcome::Rejected {
                message: "only an operator may raise a time limit; you may lower it".into(),
            },
            JobState::Running | JobState::Completing if raises => Outcome::Rejected {
                message: "a running job's time limit can only be lowered (raise it before it starts, or requeue it)".into(),
            },
            JobState::Pending | JobState::Running | JobState::Completing => {
                let job = self.jobs.get_mut(&c.job).expect("present");
                job.spec.time_limit_s = Some(new);
                Outcome::Ok
            }
            other => Outcome::Rejected {
                message: format!("job {} has ended ({})", c.job, other.name()),
            },
        }
    }
}
