//! The one action path: cancel, hold, release, requeue, signal and update every job a
//! selection names, under one set of rules. The actions that change state are one log
//! entry however many jobs they touch (`gcancel -u alice` of 10,000 jobs is one Raft
//! round, not 10,000); a signal is not state, and the leader decides it with the same
//! rules ([`ClusterState::decide_action`]) before passing it to the jobs' agents.
//!
//! The rules, in the order they are applied; nothing changes until all are decided:
//!
//! 1. **The request** is checked whole: the selection's size and fields, that it names
//!    something, and the action's value (a signal 1-64, a time limit under ten years). A
//!    request refused here changes nothing.
//! 2. **Names.** Every id named is a unit: a job (`123`), one task of an array (`120_3`),
//!    or a whole array (`120`). A name that matches nothing, or a unit that is someone
//!    else's (for a caller who does not act for others), is reported once and changes
//!    nothing. Jobs found by filters alone (users, states, partition, name, nodes) are
//!    each a unit of their own, and only ever the caller's unless they act for others.
//! 3. **States**, per job ([`ClusterState::verdict`]): the action changes the job, finds
//!    it already as asked (counted, not changed: holding a held job, cancelling one that
//!    has ended or is being stopped), or is refused by its state (requeueing or signalling
//!    a job that is not running, holding one that has finished, raising a running job's
//!    limit), in Slurm's words where `scontrol` has them ("pending execution", "already
//!    finished").
//! 4. **A named unit changes all or none**: its jobs that have not ended all change, or,
//!    when the state of one of them refuses the action, none does; an array's ended
//!    tasks are reported and change nothing. So an array never ends up half held or half
//!    requeued by one request, and a refusal never comes after a change.
//! 5. **Reports.** What named units refused is reported per job, and per run of an
//!    array's tasks with the same reason (`job 120_[2-3]: ...`, as `scontrol` prints
//!    `120_2-3: ...`); jobs found by filters alone that the action does not apply to are
//!    passed over without a word, as `scancel -u` passes over ended jobs.

use super::ClusterState;
use super::jobs::not_yours;
use crate::command::{ActOnJobs, Outcome};
use gsched_types::api::{ActionSummary, JobAction, JobSelection};
use gsched_types::job::{JobId, JobRecord, JobState, PendingReason};
use gsched_types::{Failure, FailureKind};
use std::collections::{BTreeMap, BTreeSet};

/// Refusals listed in a reply; the rest are counted.
const MAX_ERRORS: usize = 20;

/// What an action does to one job, decided before anything changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The action changes the job.
    Change,
    /// The job is already as the action would leave it: counted, not changed.
    Already,
    /// The job's state rules the action out; the reason, as reported.
    Refused(String),
}

/// What an action is to do, decided on the state before it changes anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// The jobs to change, in id order.
    pub change: Vec<JobId>,
    /// Jobs already as asked.
    pub already: u64,
    /// Jobs found by filters alone that the action does not apply to.
    pub passed_over: u64,
    /// What is reported: names that match nothing, other people's jobs, refusals.
    pub errors: Vec<String>,
}

impl Decision {
    /// The reply: the jobs the action now holds for, and the first refusals.
    pub fn summary(&self) -> ActionSummary {
        let mut errors = self.errors.clone();
        let more = errors.len().saturating_sub(MAX_ERRORS);
        errors.truncate(MAX_ERRORS);
        if more > 0 {
            errors.push(format!("... and {more} more"));
        }
        ActionSummary {
            count: self.change.len() as u64 + self.already,
            errors,
        }
    }

    /// Nothing was found to act on and nothing to report: why, for the refusal.
    pub fn nothing(&self, action: JobAction) -> Option<String> {
        if !self.change.is_empty() || self.already > 0 || !self.errors.is_empty() {
            return None;
        }
        let why = if self.passed_over == 0 {
            "no job matched"
        } else {
            match action {
                JobAction::Cancel | JobAction::Hold | JobAction::Release => {
                    "they have already ended"
                }
                JobAction::Requeue => "only running jobs can be requeued",
                JobAction::Signal { .. } => "no running job matched",
                JobAction::Update { .. } => "their state or your role rules the new time limit out",
            }
        };
        Some(format!("nothing to {}: {why}", action.verb()))
    }
}

/// A named unit: one job, one array task, or every task of an array.
struct Unit {
    name: String,
    jobs: Vec<JobId>,
}

impl ClusterState {
    /// The request's own checks (rule 1), made by the service before it proposes and by
    /// `apply` again.
    pub fn check_action(
        action: JobAction,
        select: &JobSelection,
        limits: &gsched_scheduler::config::SubmitLimits,
    ) -> Result<(), String> {
        crate::validate::job_selection(select, limits).map_err(|e| e.to_string())?;
        if select.is_empty() {
            return Err(format!(
                "nothing to {}: name jobs, a user, states, a partition, a job name or nodes",
                action.verb()
            ));
        }
        match action {
            JobAction::Signal { signal, .. } if !(1..=64).contains(&signal) => {
                Err(format!("{signal} is not a signal number (1-64)"))
            }
            JobAction::Update { time_limit_s: None } => {
                Err("nothing to update: give TimeLimit=".into())
            }
            JobAction::Update {
                time_limit_s: Some(t),
            } if t > crate::validate::MAX_TIME_S => {
                Err("the time limit is over ten years; use UNLIMITED for none".into())
            }
            _ => Ok(()),
        }
    }

    /// Cancels, holds, releases, requeues or updates what `c` selects (a signal is not
    /// replicated and is refused here).
    pub(super) fn act_on_jobs(&mut self, c: &ActOnJobs, at: u64) -> Outcome {
        if !c.action.is_replicated() {
            return Outcome::Rejected {
                message: "a signal is not replicated: the leader sends it to the jobs' agents"
                    .into(),
            };
        }
        let decision = match self.decide_action(c) {
            Ok(d) => d,
            Err(message) => return Outcome::Rejected { message },
        };
        if let Some(message) = decision.nothing(c.action) {
            return Outcome::Rejected { message };
        }
        for id in &decision.change {
            self.change(*id, c, at);
        }
        Outcome::Acted(decision.summary())
    }

    /// Decides what `c` does to every job it selects, changing nothing: rules 1 to 5 of
    /// this module. `Err` is a request refused whole.
    pub fn decide_action(&self, c: &ActOnJobs) -> Result<Decision, String> {
        Self::check_action(c.action, &c.select, &self.config.limits)?;
        let verb = c.action.verb();
        let (units, loose, mut errors) = self.units(&c.select, &c.by, c.admin, verb);
        let mut d = Decision::default();
        for id in loose {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            match self.verdict(job, c.action, c.admin) {
                Verdict::Change => d.change.push(id),
                // A filter's ended jobs are not what it was about: `gcancel -u alice`
                // cancels what alice has queued and running.
                Verdict::Already if !job.state.is_terminal() => d.already += 1,
                Verdict::Already | Verdict::Refused(_) => d.passed_over += 1,
            }
        }
        let mut refused: Vec<(&JobRecord, String)> = Vec::new();
        let mut blocked = Vec::new();
        for unit in &units {
            let mut change = Vec::new();
            let mut already = 0;
            let mut live_refused = false;
            for id in &unit.jobs {
                let Some(job) = self.jobs.get(id) else {
                    continue;
                };
                match self.verdict(job, c.action, c.admin) {
                    Verdict::Change => change.push(*id),
                    Verdict::Already => already += 1,
                    Verdict::Refused(why) => {
                        live_refused |= !job.state.is_terminal();
                        refused.push((job, why));
                    }
                }
            }
            if live_refused {
                if unit.jobs.len() > 1 && (!change.is_empty() || already > 0) {
                    blocked.push(format!(
                        "job {}: nothing was done to its other tasks: an array's tasks change all or none (name the tasks to act on, as {}_N)",
                        unit.name, unit.name
                    ));
                }
                continue;
            }
            d.change.extend(change);
            d.already += already;
        }
        errors.extend(report(refused));
        errors.extend(blocked);
        d.change.sort_unstable();
        d.change.dedup();
        d.errors = errors;
        Ok(d)
    }

    /// The named units `select` finds (rule 2), the jobs its filters alone find, and the
    /// refusals of names: those that match nothing and units of someone else.
    fn units(
        &self,
        select: &JobSelection,
        by: &str,
        admin: bool,
        verb: &str,
    ) -> (Vec<Unit>, Vec<JobId>, Vec<String>) {
        if select.jobs.is_empty() {
            let loose = self
                .jobs
                .values()
                .filter(|j| admin || j.spec.user == by)
                .filter(|j| select.matches_filters(j, &self.config.partition_of(&j.spec)))
                .map(|j| j.id)
                .collect();
            return (Vec::new(), loose, Vec::new());
        }
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
        let mut members: BTreeMap<(u64, Option<u32>), Vec<JobId>> = BTreeMap::new();
        for j in self.jobs.values() {
            let array = j.array_task.map(|t| (t.array_job_id.0, t.task_id));
            // A job named twice (`120` and `120_3`) belongs to the wider unit.
            let named_task = array.filter(|at| tasks.contains(at));
            let unit = if ids.contains(&j.id.0) {
                Some((j.id.0, None))
            } else if let Some((a, _)) = array.filter(|(a, _)| ids.contains(a)) {
                Some((a, None))
            } else {
                named_task.map(|(a, t)| (a, Some(t)))
            };
            let Some(unit) = unit else {
                continue;
            };
            if !select.matches_filters(j, &self.config.partition_of(&j.spec)) {
                continue;
            }
            found.insert(unit);
            if let Some((a, t)) = named_task {
                found.insert((a, Some(t)));
            }
            members.entry(unit).or_default().push(j.id);
        }
        let mut errors = Vec::new();
        let mut seen = BTreeSet::new();
        for s in &select.jobs {
            if seen.insert((s.id, s.task)) && !found.contains(&(s.id, s.task)) {
                errors.push(format!("job {s}: does not exist or does not match"));
            }
        }
        let mut units = Vec::new();
        for ((id, task), jobs) in members {
            let name = match task {
                Some(t) => format!("{id}_{t}"),
                None => id.to_string(),
            };
            if !admin
                && let Some(other) = jobs
                    .iter()
                    .filter_map(|j| self.jobs.get(j))
                    .find(|j| j.spec.user != by)
            {
                errors.push(not_yours(&name, &other.spec.user, by, verb));
                continue;
            }
            units.push(Unit { name, jobs });
        }
        (units, Vec::new(), errors)
    }

    /// What `action` does to `job`, by its state (rule 3).
    pub fn verdict(&self, job: &JobRecord, action: JobAction, admin: bool) -> Verdict {
        const FINISHED: &str = "already finished";
        let refused = |why: &str| Verdict::Refused(why.to_string());
        let not_running = |rule: &str| match job.state {
            JobState::Pending => refused(&format!(
                "pending execution; only running jobs can be {rule}"
            )),
            JobState::Completing => {
                refused(&format!("completing; only running jobs can be {rule}"))
            }
            _ => refused(FINISHED),
        };
        match action {
            JobAction::Cancel => match job.state {
                JobState::Pending | JobState::Running => Verdict::Change,
                // Being stopped, or ended: nothing to do, as scancel says nothing.
                _ => Verdict::Already,
            },
            JobAction::Hold | JobAction::Release => {
                if job.state.is_terminal() {
                    refused(FINISHED)
                } else if job.held == (action == JobAction::Hold) {
                    Verdict::Already
                } else {
                    // A running job's hold keeps it pending should it be requeued, as
                    // Slurm's does.
                    Verdict::Change
                }
            }
            JobAction::Requeue => match job.state {
                JobState::Running => Verdict::Change,
                _ => not_running("requeued"),
            },
            JobAction::Signal { .. } => match job.state {
                JobState::Running => Verdict::Change,
                _ => not_running("signalled"),
            },
            JobAction::Update { time_limit_s } => {
                let Some(new) = time_limit_s else {
                    return Verdict::Already;
                };
                if job.state.is_terminal() {
                    return refused(FINISHED);
                }
                // Limits compared as seconds, no limit as the largest.
                let as_secs = |t: Option<u64>| t.filter(|t| *t > 0).unwrap_or(u64::MAX);
                let now = as_secs(self.config.time_limit_for(&job.spec));
                let raises = as_secs(Some(new)) > now;
                match job.state {
                    JobState::Pending if raises && !admin => {
                        refused("only an operator may raise a time limit; you may lower it")
                    }
                    JobState::Running | JobState::Completing if raises => refused(
                        "running; a running job's time limit can only be lowered (raise it before it starts, or requeue it)",
                    ),
                    _ if job.spec.time_limit_s == Some(new) => Verdict::Already,
                    _ => Verdict::Change,
                }
            }
        }
    }

    /// Carries out a decided change to one job.
    fn change(&mut self, id: JobId, c: &ActOnJobs, at: u64) {
        let Some(state) = self.jobs.get(&id).map(|j| j.state) else {
            return;
        };
        match c.action {
            JobAction::Cancel => {
                let failure =
                    Failure::new(FailureKind::Cancelled, format!("cancelled by {}", c.by), at);
                if state == JobState::Pending {
                    self.cancel_pending(id, failure, at);
                } else {
                    self.begin_ending(id, failure, at);
                }
            }
            JobAction::Hold => self.set_hold(id, true),
            JobAction::Release => self.set_hold(id, false),
            JobAction::Requeue => {
                let failure =
                    Failure::new(FailureKind::Preempted, format!("requeued by {}", c.by), at);
                self.begin_ending(id, failure, at);
            }
            JobAction::Update { time_limit_s } => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.spec.time_limit_s = time_limit_s;
                }
            }
            JobAction::Signal { .. } => {}
        }
    }

    /// Ends a pending job as cancelled.
    pub(super) fn cancel_pending(&mut self, id: JobId, failure: Failure, at: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let before = crate::notify::Before::of(job);
        job.state = JobState::Cancelled;
        job.end_ms = Some(at);
        job.failure = Some(failure);
        self.note(id, before, at);
        self.retire(id);
    }

    /// Holds or releases a job: a pending one leaves or rejoins the queue at once, a
    /// running one keeps the hold for when it is requeued.
    pub(super) fn set_hold(&mut self, id: JobId, hold: bool) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.held = hold;
        if job.state == JobState::Pending {
            job.reason = if hold {
                PendingReason::JobHeldUser
            } else {
                PendingReason::None
            };
        }
        self.note_schedulable(id);
    }
}

/// The refusals of named units, one line per job, and one per run of an array's tasks
/// with the same reason, in job id order.
fn report(mut refused: Vec<(&JobRecord, String)>) -> Vec<String> {
    /// One line: a job, or an array's tasks, and the reason.
    enum Line {
        Job(JobId, String),
        Tasks(JobId, Vec<u32>, String),
    }
    refused.sort_by_key(|(j, _)| j.id);
    let mut lines: Vec<Line> = Vec::new();
    // (array, reason) -> its line, where the array's first refusal for it was.
    let mut at: BTreeMap<(JobId, String), usize> = BTreeMap::new();
    for (job, why) in refused {
        let Some(t) = job.array_task else {
            lines.push(Line::Job(job.id, why));
            continue;
        };
        match at.get(&(t.array_job_id, why.clone())) {
            Some(&i) => {
                if let Line::Tasks(_, tasks, _) = &mut lines[i] {
                    tasks.push(t.task_id);
                }
            }
            None => {
                at.insert((t.array_job_id, why.clone()), lines.len());
                lines.push(Line::Tasks(t.array_job_id, vec![t.task_id], why));
            }
        }
    }
    lines
        .into_iter()
        .map(|line| match line {
            Line::Job(id, why) => format!("job {id}: {why}"),
            Line::Tasks(array, tasks, why) => {
                format!("job {array}_{}: {why}", task_ranges(tasks))
            }
        })
        .collect()
}

/// `3`, or `[0-3,5]`: task ids as squeue writes an array's tasks.
fn task_ranges(mut tasks: Vec<u32>) -> String {
    tasks.sort_unstable();
    tasks.dedup();
    if let [one] = tasks[..] {
        return one.to_string();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < tasks.len() {
        let start = tasks[i];
        let mut end = start;
        while i + 1 < tasks.len() && tasks[i + 1] == end + 1 {
            i += 1;
            end = tasks[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::task_ranges;

    #[test]
    fn task_ranges_read_as_squeue_writes_them() {
        assert_eq!(task_ranges(vec![3]), "3");
        assert_eq!(task_ranges(vec![3, 0, 1, 2, 5, 7, 8]), "[0-3,5,7-8]");
    }
}
