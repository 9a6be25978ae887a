//! Notifications in the replicated state. Where a job changes (a start, an end, a
//! requeue, a cancel, a pending reason) [`ClusterState::note`] asks the pure
//! [`crate::notify::events`] what the change calls for and records it in the job as due;
//! the leader's outbox claims due notices (`notify_claim`, committed before anything is
//! sent: at most once) and records each target's outcome (`notify_done`).

use super::ClusterState;
use crate::command::{NotifyClaim, NotifyDone, Outcome};
use crate::notify::{self, ArrayProgress, Before};
use gsched_types::job::{JobId, JobRecord, JobState};
use gsched_types::notify::{Delivery, Notice, NoticeState, UserNotify};

/// How many notices a job keeps; beyond it the oldest finished ones go first.
pub const MAX_NOTICES: usize = 64;
/// How many outcomes one notice records, and how long each error may be.
const MAX_DELIVERIES: usize = 16;
const MAX_ERROR_CHARS: usize = 512;

impl ClusterState {
    /// A user's notification settings (`gctl user modify NAME --notify ...`).
    pub fn user_notify(&self, user: &str) -> Option<&UserNotify> {
        self.config
            .users
            .iter()
            .find(|u| u.name == user)
            .and_then(|u| u.notify.as_ref())
    }

    /// The tasks of `job`'s array that memory still holds, in id order (none for a job
    /// that is not an array task).
    pub fn array_tasks(&self, job: &JobRecord) -> Vec<&JobRecord> {
        let Some(t) = job.array_task else {
            return Vec::new();
        };
        let base = t.array_job_id;
        // Tasks have consecutive ids from the array's; ended ones may have been purged.
        let count = t
            .span
            .map_or(u64::from(self.config.limits.max_array_size), |s| {
                u64::from(s.count)
            });
        self.jobs
            .range(base..JobId(base.0 + count.max(1)))
            .map(|(_, j)| &**j)
            .filter(|j| j.array_task.is_some_and(|a| a.array_job_id == base))
            .collect()
    }

    /// What the other tasks of `job`'s array are doing. Tasks purged from memory had
    /// ended.
    fn array_progress(&self, job: &JobRecord) -> ArrayProgress {
        let tasks = self.array_tasks(job);
        let purged = job
            .array_task
            .and_then(|t| t.span)
            .is_some_and(|s| (s.count as usize) > tasks.len());
        let others = || tasks.iter().filter(|t| t.id != job.id);
        ArrayProgress {
            others_begun: purged
                || others().any(|t| {
                    matches!(t.state, JobState::Running | JobState::Completing)
                        || t.state.is_terminal()
                }),
            others_ended: others().all(|t| t.state.is_terminal()),
            others_failed: others().any(|t| notify::failed_state(t.state)),
            others_requeued: others().any(|t| t.attempt > 0),
        }
    }

    /// Records in job `id` the notifications its change from `before` calls for.
    pub(super) fn note(&mut self, id: JobId, before: Before, at: u64) {
        let due = {
            let Some(job) = self.jobs.get(&id) else {
                return;
            };
            let wants = notify::wanted(job, self.user_notify(&job.spec.user));
            if wants.is_empty() {
                return;
            }
            let progress = if notify::summarised(job, wants) {
                self.array_progress(job)
            } else {
                ArrayProgress::default()
            };
            notify::events(&before, job, wants, &progress)
        };
        if due.is_empty() {
            return;
        }
        let job = self.jobs.get_mut(&id).expect("present");
        for d in due {
            if !job
                .notices
                .iter()
                .any(|n| n.is(d.attempt, d.event, d.array))
            {
                job.notices.push(Notice {
                    event: d.event,
                    attempt: d.attempt,
                    array: d.array,
                    at_ms: at,
                    state: NoticeState::Due,
                });
            }
        }
        trim(&mut job.notices);
        self.note_notifying(id);
    }

    /// The leader claims notices before sending them; a time-limit notice is created by
    /// its claim when the share is crossed at the claim's time.
    pub(super) fn notify_claim(&mut self, c: &NotifyClaim, at: u64) -> Outcome {
        for r in &c.notices {
            let Some(job) = self.jobs.get(&r.job) else {
                continue;
            };
            let sending = NoticeState::Sending {
                by: c.by,
                term: c.term,
                since_ms: at,
            };
            let found = job
                .notices
                .iter()
                .position(|n| n.is(r.attempt, r.event, r.array));
            let create = found.is_none() && {
                let wants = notify::wanted(job, self.user_notify(&job.spec.user));
                r.event.time_limit_pct().is_some()
                    && wants.contains(&r.event)
                    && r.attempt == job.attempt
                    && r.array == notify::summarised(job, wants)
                    && notify::crossed(job, r.event, self.config.time_limit_for(&job.spec), at)
            };
            let job = self.jobs.get_mut(&r.job).expect("present");
            match found {
                Some(i) if job.notices[i].state == NoticeState::Due => {
                    job.notices[i].state = sending;
                }
                None if create => {
                    job.notices.push(Notice {
                        event: r.event,
                        attempt: r.attempt,
                        array: r.array,
                        at_ms: at,
                        state: sending,
                    });
                    trim(&mut job.notices);
                }
                _ => {}
            }
            self.note_notifying(r.job);
        }
        Outcome::Ok
    }

    /// Records what became of claimed notices; a notice not being sent is left alone.
    pub(super) fn notify_done(&mut self, c: &NotifyDone, at: u64) -> Outcome {
        for r in &c.results {
            let n = &r.notice;
            let Some(job) = self.jobs.get_mut(&n.job) else {
                continue;
            };
            if let Some(notice) = job
                .notices
                .iter_mut()
                .find(|x| x.is(n.attempt, n.event, n.array))
                .filter(|x| matches!(x.state, NoticeState::Sending { .. }))
            {
                notice.state = NoticeState::Done {
                    at_ms: at,
                    deliveries: r
                        .deliveries
                        .iter()
                        .take(MAX_DELIVERIES)
                        .map(bounded)
                        .collect(),
                };
            }
            self.note_notifying(n.job);
        }
        Outcome::Ok
    }

    /// Keeps job `id` in the index of jobs with notices under way, or takes it out.
    pub(super) fn note_notifying(&mut self, id: JobId) {
        let open = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.notices.iter().any(|n| !n.is_done()));
        if open {
            self.notifying.insert(id);
        } else {
            self.notifying.remove(&id);
        }
    }

    /// Jobs with a notice due or being sent, in id order: what the leader's outbox walks.
    pub fn notifying_jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs_in(&self.notifying)
    }

    /// How many jobs the notification index holds (for the invariants).
    pub fn notifying_count(&self) -> usize {
        self.notifying.len()
    }
}

/// A delivery as the log keeps it: its error bounded.
fn bounded(d: &Delivery) -> Delivery {
    Delivery {
        to: d.to.clone(),
        error: d
            .error
            .as_ref()
            .map(|e| e.chars().take(MAX_ERROR_CHARS).collect()),
    }
}

/// Drops the oldest finished notices (else the oldest) beyond [`MAX_NOTICES`].
fn trim(notices: &mut Vec<Notice>) {
    while notices.len() > MAX_NOTICES {
        let i = notices.iter().position(Notice::is_done).unwrap_or(0);
        notices.remove(i);
    }
}
