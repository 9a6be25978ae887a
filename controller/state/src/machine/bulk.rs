//! Bulk actions: cancel, hold, release or requeue every job a selection names, as one
//! log entry (`gcancel -u alice` of 10,000 jobs is one Raft round, not 10,000).

use super::ClusterState;
use super::jobs::not_yours;
use crate::command::{ActOnJobs, Outcome};
use gsched_types::api::{ActionSummary, JobAction, JobSelection};
use gsched_types::job::{JobId, JobState, PendingReason};
use gsched_types::{Failure, FailureKind};
use std::collections::BTreeSet;

/// Refusals listed in a reply; the rest are counted.
const MAX_ERRORS: usize = 20;

impl ClusterState {
    pub(super) fn act_on_jobs(&mut self, c: &ActOnJobs, at: u64) -> Outcome {
        let select = &c.select;
        if let Err(message) = crate::validate::job_selection(select, &self.config.limits) {
            return Outcome::Rejected {
                message: message.to_string(),
            };
        }
        if select.is_empty() {
            return Outcome::Rejected {
                message: format!(
                    "nothing to {}: name jobs, a user, states, a partition, a job name or nodes",
                    c.action.verb()
                ),
            };
        }
        let (selected, mut errors) = self.select_jobs(select, &c.by, c.admin, c.action.verb());
        let mut count = 0;
        let mut untouched = 0;
        for id in selected {
            if self.act_on(id, c, at) {
                count += 1;
            } else {
                untouched += 1;
            }
        }
        if count == 0 && errors.is_empty() {
            let why = if untouched > 0 {
                match c.action {
                    JobAction::Cancel => "they have already ended",
                    JobAction::Hold | JobAction::Release => {
                        "only pending jobs can be held or released"
                    }
                    JobAction::Requeue => "only running jobs can be requeued",
                }
            } else {
                "no job matched"
            };
            return Outcome::Rejected {
                message: format!("nothing to {}: {why}", c.action.verb()),
            };
        }
        let more = errors.len().saturating_sub(MAX_ERRORS);
        errors.truncate(MAX_ERRORS);
        if more > 0 {
            errors.push(format!("... and {more} more"));
        }
        Outcome::Acted(ActionSummary { count, errors })
    }

    /// The jobs `select` names that `by` may act on (all of them for an admin), and the
    /// refusals to report: named jobs that do not exist or match, and named jobs of
    /// others. Jobs of others found by a filter are simply not selected.
    pub fn select_jobs(
        &self,
        select: &JobSelection,
        by: &str,
        admin: bool,
        verb: &str,
    ) -> (Vec<JobId>, Vec<String>) {
        // Named jobs by id, and tasks by (array, task): set lookups, so naming 10,000
        // jobs stays linear.
        let ids: BTreeSet<u64> = select
            .jobs
            .iter()
            .filter(|s| s.task.is_none())
            .map(|s| s.id)
            .collect();
        let tasks: BTreeSet<(u64, u32)> = select
            .jobs
            .iter()
            .filter_map(|s| Some((s.id, s.task?)))
            .collect();
        let mut found: BTreeSet<(u64, Option<u32>)> = BTreeSet::new();
        let mut matched = Vec::new();
        for j in self.jobs.values() {
            if !select.jobs.is_empty() {
                let array = j.array_task.map(|t| (t.array_job_id.0, t.task_id));
                let hit = if ids.contains(&j.id.0) {
                    Some((j.id.0, None))
                } else if let Some((a, t)) = array {
                    if ids.contains(&a) {
                        Some((a, None))
                    } else {
                        tasks.contains(&(a, t)).then_some((a, Some(t)))
                    }
                } else {
                    None
                };
                let Some(hit) = hit else {
                    continue;
                };
                if !select.matches_filters(j, &self.config.partition_of(&j.spec)) {
                    continue;
                }
                found.insert(hit);
            } else if !select.matches_filters(j, &self.config.partition_of(&j.spec)) {
                continue;
            }
            matched.push(j.id);
        }
        let mut errors = Vec::new();
        for s in &select.jobs {
            if !found.contains(&(s.id, s.task)) {
                let name = match s.task {
                    Some(t) => format!("{}_{t}", s.id),
                    None => s.id.to_string(),
                };
                errors.push(format!("job {name} does not exist or does not match"));
            }
        }
        let named = !select.jobs.is_empty();
        let mut selected = Vec::with_capacity(matched.len());
        for id in matched {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if !admin && job.spec.user != by {
                // Found by a filter: someone else's jobs are simply not selected.
                if named {
                    errors.push(not_yours(&job.display_id(), &job.spec.user, by, verb));
                }
                continue;
            }
            selected.push(id);
        }
        (selected, errors)
    }

    /// Applies the action to one job the caller may act on; false when its state rules
    /// the action out.
    fn act_on(&mut self, id: JobId, c: &ActOnJobs, at: u64) -> bool {
        let Some(state) = self.jobs.get(&id).map(|j| j.state) else {
            return false;
        };
        match (c.action, state) {
            (JobAction::Cancel, JobState::Pending) => {
                let job = self.jobs.get_mut(&id).expect("present");
                job.state = JobState::Cancelled;
                job.end_ms = Some(at);
                job.failure = Some(Failure::new(
                    FailureKind::Cancelled,
                    format!("cancelled by {}", c.by),
                    at,
                ));
                self.retire(id);
                true
            }
            (JobAction::Cancel, JobState::Running) => {
                let failure =
                    Failure::new(FailureKind::Cancelled, format!("cancelled by {}", c.by), at);
                self.begin_ending(id, failure, at);
                true
            }
            (JobAction::Hold | JobAction::Release, JobState::Pending) => {
                let hold = c.action == JobAction::Hold;
                let job = self.jobs.get_mut(&id).expect("present");
                job.held = hold;
                job.reason = if hold {
                    PendingReason::JobHeldUser
                } else {
                    PendingReason::None
                };
                self.note_schedulable(id);
                true
            }
            (JobAction::Requeue, JobState::Running) => {
                let failure =
                    Failure::new(FailureKind::Preempted, format!("requeued by {}", c.by), at);
                self.begin_ending(id, failure, at);
                true
            }
            _ => false,
        }
    }
}
