//! Notifications (`--mail-type`, `--mail-user`, a user's `--notify` settings), as pure
//! functions: which ones a change of a job calls for ([`events`], over the job before
//! and after the change), which shares of its time limit a running job has crossed
//! ([`time_limit_due`], checked by the leader: no command marks them), where they go
//! ([`targets`]) and what they say ([`message`]: Slurm's subjects, the job's state,
//! reason, elapsed time and efficiency report).
//!
//! The state machine records what is due in the job (`JobRecord.notices`); the leader's
//! outbox claims a notice in the log before it sends it, so a notice is sent at most
//! once, and records each target's outcome (`machine/notices.rs`, `decide::notify_round`).
//!
//! Slurm's rules (22.05 `src/slurmctld/agent.c`, `mail_job_info`, `_mail_type_str`,
//! `_set_job_time`, `_set_job_term_info`; `job_mgr.c`, `job_completion_logger`, as fixed
//! in 23.02 so that END covers every end): FAIL is sent for an end in a failed state
//! (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, DEADLINE), END for every other end, or for a failed
//! one when FAIL was not asked for; one of the two per end. An array without
//! `ARRAY_TASKS` tells BEGIN when its first task starts and END/FAIL (and REQUEUE, when a
//! task was requeued) when its last task ends, as an "Array Summary"; its other events
//! (the time-limit shares, INVALID_DEPEND) are per task with the summary's subject.

use gsched_types::failure::FailureKind;
use gsched_types::job::{JobRecord, JobState, PendingReason};
use gsched_types::notify::{MailType, Notice, NotifyMessage, NotifyTarget, UserNotify};
use gsched_types::parse::format_hms;
use gsched_types::usage::Efficiency;

/// What a job was before a change, as far as its notifications care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Before {
    pub state: JobState,
    pub attempt: u32,
    /// It was pending with a dependency that can never be met.
    pub never_satisfied: bool,
}

impl Before {
    pub fn of(job: &JobRecord) -> Before {
        Before {
            state: job.state,
            attempt: job.attempt,
            never_satisfied: never_satisfied(job),
        }
    }
}

/// Pending for a dependency that can never be met, or ended for it.
fn never_satisfied(job: &JobRecord) -> bool {
    match job.state {
        JobState::Pending => job.reason == PendingReason::DependencyNeverSatisfied,
        s if s.is_terminal() => job
            .failure
            .as_ref()
            .is_some_and(|f| f.kind == FailureKind::DependencyNeverSatisfied),
        _ => false,
    }
}

/// What the other tasks of a job's array are doing (Slurm's array rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayProgress {
    /// Another task runs or has ended: this one is not the first to start.
    pub others_begun: bool,
    /// Every other task has ended: this one is the last.
    pub others_ended: bool,
    /// Another task ended in a failed state.
    pub others_failed: bool,
    /// Another task was requeued.
    pub others_requeued: bool,
}

/// A notification a change calls for: about `event` of `attempt`, for the whole array
/// when `array`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub event: MailType,
    pub attempt: u32,
    pub array: bool,
}

/// The states an end is a failure in (Slurm's `>= JOB_FAILED`; gsched has no
/// PREEMPTED end: a preempted job is requeued).
pub fn failed_state(s: JobState) -> bool {
    matches!(
        s,
        JobState::Failed
            | JobState::Timeout
            | JobState::NodeFail
            | JobState::OutOfMemory
            | JobState::Deadline
    )
}

/// The events `job` notifies: its `--mail-type`, else its user's `--notify-on`.
pub fn wanted<'a>(job: &'a JobRecord, user: Option<&'a UserNotify>) -> &'a [MailType] {
    match &job.spec.mail {
        Some(m) => &m.types,
        None => user.map_or(&[], |u| &u.on),
    }
}

/// Whether the job's array events are summaries (an array task, no `ARRAY_TASKS`).
pub fn summarised(job: &JobRecord, wants: &[MailType]) -> bool {
    job.array_task.is_some() && !wants.contains(&MailType::ArrayTasks)
}

/// The notifications a change of a job calls for: `before` is what it was, `after` what
/// it is now; `array` says what the other tasks of its array are doing (ignored for a
/// job that is not an array task or whose `--mail-type` has `ARRAY_TASKS`).
pub fn events(
    before: &Before,
    after: &JobRecord,
    wants: &[MailType],
    array: &ArrayProgress,
) -> Vec<Due> {
    let has = |t: MailType| wants.contains(&t);
    let summary = summarised(after, wants);
    let mut out = Vec::new();
    let mut push = |event, attempt, array| {
        out.push(Due {
            event,
            attempt,
            array,
        })
    };
    if before.state == JobState::Pending && after.state == JobState::Running && has(MailType::Begin)
    {
        if !summary {
            push(MailType::Begin, after.attempt, false);
        } else if !array.others_begun {
            push(MailType::Begin, after.attempt, true);
        }
    }
    if never_satisfied(after) && !before.never_satisfied && has(MailType::InvalidDepend) {
        push(MailType::InvalidDepend, after.attempt, summary);
    }
    let was_live = matches!(before.state, JobState::Running | JobState::Completing);
    if was_live
        && after.state == JobState::Pending
        && after.attempt > before.attempt
        && has(MailType::Requeue)
        && !summary
    {
        push(MailType::Requeue, before.attempt, false);
    }
    if !before.state.is_terminal() && after.state.is_terminal() {
        let failed = failed_state(after.state);
        if !summary {
            if failed && has(MailType::Fail) {
                push(MailType::Fail, after.attempt, false);
            } else if has(MailType::End) {
                push(MailType::End, after.attempt, false);
            }
        } else if array.others_ended {
            if (array.others_requeued || after.attempt > 0) && has(MailType::Requeue) {
                push(MailType::Requeue, after.attempt, true);
            }
            if (array.others_failed || failed) && has(MailType::Fail) {
                push(MailType::Fail, after.attempt, true);
            } else if has(MailType::End) {
                push(MailType::End, after.attempt, true);
            }
        }
    }
    out
}

/// The time-limit events, with the share of the limit each marks.
const TIME_LIMITS: [MailType; 4] = [
    MailType::TimeLimit50,
    MailType::TimeLimit80,
    MailType::TimeLimit90,
    MailType::TimeLimit,
];

/// Whether `job`'s current attempt has run `event`'s share of its time limit `limit_s`
/// by `now_ms` (integers only: the state machine re-checks this).
pub fn crossed(job: &JobRecord, event: MailType, limit_s: Option<u64>, now_ms: u64) -> bool {
    let (Some(pct), Some(limit), Some(start)) = (
        event.time_limit_pct(),
        limit_s.filter(|l| *l > 0),
        job.start_ms,
    ) else {
        return false;
    };
    job.state == JobState::Running
        && u128::from(now_ms.saturating_sub(start)) * 100
            >= u128::from(limit) * 1000 * u128::from(pct)
}

/// The shares of its time limit (`TIME_LIMIT_50/80/90`, `TIME_LIMIT`) a running job has
/// crossed by `now_ms` and not yet notified; several at once when the limit was lowered.
pub fn time_limit_due(
    job: &JobRecord,
    limit_s: Option<u64>,
    wants: &[MailType],
    now_ms: u64,
) -> Vec<Due> {
    let array = summarised(job, wants);
    TIME_LIMITS
        .into_iter()
        .filter(|t| wants.contains(t) && crossed(job, *t, limit_s, now_ms))
        .filter(|t| !job.notices.iter().any(|n| n.is(job.attempt, *t, array)))
        .map(|event| Due {
            event,
            attempt: job.attempt,
            array,
        })
        .collect()
}

/// Where `job`'s notifications go: its `--mail-user`, else the mail targets of its
/// user's settings, else the user's name (the mail program resolves it, as Slurm's
/// does); and the webhooks of the user's settings.
pub fn targets(job: &JobRecord, user: Option<&UserNotify>) -> Vec<NotifyTarget> {
    let defaults: &[NotifyTarget] = user.map_or(&[], |u| &u.to);
    let mut out = Vec::new();
    match job.spec.mail.as_ref().and_then(|m| m.user.as_ref()) {
        Some(to) => out.push(NotifyTarget::Mail(to.clone())),
        None if defaults.is_empty() => out.push(NotifyTarget::Mail(job.spec.user.clone())),
        None => out.extend(defaults.iter().filter(|t| t.is_mail()).cloned()),
    }
    out.extend(defaults.iter().filter(|t| !t.is_mail()).cloned());
    out
}

/// The run of an attempt: (start, end) in controller milliseconds.
fn run_of(job: &JobRecord, attempt: u32) -> (Option<u64>, Option<u64>) {
    if attempt == job.attempt && job.start_ms.is_some() {
        return (job.start_ms, job.end_ms);
    }
    job.attempts
        .iter()
        .find(|a| a.number == attempt)
        .map_or((None, None), |a| (a.start_ms, a.end_ms))
}

/// `, Queued time 00:00:01` or `, Run time 00:10:02`: Slurm's `_set_job_time`.
fn job_time(job: &JobRecord, notice: &Notice) -> String {
    let (start, end) = run_of(job, notice.attempt);
    match notice.event {
        MailType::Begin => start.map_or(String::new(), |s| {
            format!(
                ", Queued time {}",
                format_hms(s.saturating_sub(job.eligible_ms) / 1000)
            )
        }),
        MailType::End | MailType::Fail | MailType::Requeue => match (start, end) {
            (Some(s), Some(e)) => format!(", Run time {}", format_hms(e.saturating_sub(s) / 1000)),
            _ => String::new(),
        },
        t if t.time_limit_pct().is_some() => start.map_or(String::new(), |s| {
            format!(
                ", Run time {}",
                format_hms(notice.at_ms.saturating_sub(s) / 1000)
            )
        }),
        _ => String::new(),
    }
}

/// `, COMPLETED, ExitCode 0`: Slurm's `_set_job_term_info` for one job. A job that
/// never ran ended with code 0; one killed by a signal has no code to show.
fn term_info(job: &JobRecord) -> String {
    match (job.exit_code, job.start_ms) {
        (Some(code), _) => format!(", {}, ExitCode {code}", job.state.name()),
        (None, None) => format!(", {}, ExitCode 0", job.state.name()),
        (None, Some(_)) => format!(", {}", job.state.name()),
    }
}

/// `, Mixed, ExitCode [0-1], with requeued tasks`: the array's ends in one phrase.
fn array_term_info(tasks: &[&JobRecord]) -> String {
    let codes: Vec<i32> = tasks.iter().map(|t| t.exit_code.unwrap_or(0)).collect();
    let (min, max) = (
        codes.iter().copied().min().unwrap_or(0),
        codes.iter().copied().max().unwrap_or(0),
    );
    let first = tasks.first().map(|t| t.state);
    let state = match first {
        Some(s) if !(min == 0 && max > 0) && tasks.iter().all(|t| t.state == s) => s.name(),
        _ => "Mixed",
    };
    let requeued = if tasks.iter().any(|t| t.attempt > 0) {
        ", with requeued tasks"
    } else {
        ""
    };
    format!(", {state}, ExitCode [{min}-{max}]{requeued}")
}

/// The subject Slurm's MailProg is given (`mail_job_info`), word for word:
/// `Slurm Job_id=42 Name=train Ended, Run time 00:10:02, COMPLETED, ExitCode 0`,
/// `Slurm Array Task Job_id=40_2 (42) Name=train Began, Queued time 00:00:01`,
/// `Slurm Array Summary Job_id=40_* (40) Name=train Ended, COMPLETED, ExitCode [0-0]`.
/// `tasks`: the array's tasks still in memory (for a summary's end).
pub fn subject(job: &JobRecord, notice: &Notice, tasks: &[&JobRecord]) -> String {
    let words = notice.event.slurm_words();
    let ends = matches!(notice.event, MailType::End | MailType::Fail);
    let name = &job.spec.name;
    match job.array_task {
        Some(t) if notice.array => {
            let term = if ends {
                array_term_info(tasks)
            } else {
                String::new()
            };
            format!(
                "Slurm Array Summary Job_id={}_* ({}) Name={name} {words}{term}",
                t.array_job_id, t.array_job_id
            )
        }
        Some(t) => {
            let term = if ends { term_info(job) } else { String::new() };
            format!(
                "Slurm Array Task Job_id={}_{} ({}) Name={name} {words}{}{term}",
                t.array_job_id,
                t.task_id,
                job.id,
                job_time(job, notice)
            )
        }
        None => {
            let term = if ends { term_info(job) } else { String::new() };
            format!(
                "Slurm Job_id={} Name={name} {words}{}{term}",
                job.id,
                job_time(job, notice)
            )
        }
    }
}

/// What a job's row says its reason is: why it waits, what ended it, or `None`.
fn reason(job: &JobRecord) -> String {
    match (job.state, &job.failure) {
        (JobState::Pending, _) => job.reason.to_string(),
        (_, Some(f)) => f.reason(),
        (_, None) => "None".into(),
    }
}

/// The message of `notice` on `job`: Slurm's subject, and a body and webhook document
/// with the job's state, reason, elapsed time, exit code and efficiency report. `tasks`:
/// the job's array's tasks in memory, for a summary.
pub fn message(job: &JobRecord, notice: &Notice, tasks: &[&JobRecord]) -> NotifyMessage {
    let subject = subject(job, notice, tasks);
    let (start, end) = run_of(job, notice.attempt);
    let elapsed_s = match notice.event {
        MailType::Begin | MailType::InvalidDepend => 0,
        _ => start.map_or(0, |s| end.unwrap_or(notice.at_ms).saturating_sub(s) / 1000),
    };
    // A requeued attempt's usage moves to its attempt record when the next one starts.
    let usage = match job.attempts.iter().find(|a| a.number == notice.attempt) {
        Some(a) if !a.usage.is_empty() => &a.usage,
        _ => &job.usage,
    };
    let mem_asked = job.spec.mem_mb.is_some() || job.spec.mem_per_gpu_mb.is_some();
    let efficiency = (start.is_some() && notice.event != MailType::Begin).then(|| {
        Efficiency::from_usage(
            job.id,
            &job.spec.user,
            job.state,
            elapsed_s,
            usage,
            mem_asked,
        )
    });
    let efficiency_summary = efficiency
        .as_ref()
        .map_or_else(|| "GPU efficiency: not started".into(), |e| e.summary());
    let nodes = gsched_types::hostlist::compress(
        &job.attempts
            .iter()
            .find(|a| a.number == notice.attempt)
            .map_or_else(|| job.node_names(), |a| a.nodes.clone()),
    );
    let reason = reason(job);
    let mut body = String::new();
    let mut line = |s: String| {
        body.push_str(&s);
        body.push('\n');
    };
    line(subject.clone());
    line(String::new());
    line(format!("Job: {} ({})", job.display_id(), job.spec.name));
    line(format!("User: {}", job.spec.user));
    line(format!("Event: {}", notice.event));
    line(format!("State: {}", job.state.name()));
    line(format!("Reason: {reason}"));
    line(format!("Elapsed: {}", format_hms(elapsed_s)));
    if let Some(code) = job.exit_code.filter(|_| job.state.is_terminal()) {
        line(format!("ExitCode: {code}"));
    }
    if !nodes.is_empty() {
        line(format!("Nodes: {nodes}"));
    }
    if let Some(f) = job.failure.as_ref().filter(|_| job.state.is_terminal()) {
        line(format!("Failure: {f}"));
    }
    if notice.array {
        let mut counts: Vec<(JobState, usize)> = Vec::new();
        for t in tasks {
            match counts.iter_mut().find(|(s, _)| *s == t.state) {
                Some((_, n)) => *n += 1,
                None => counts.push((t.state, 1)),
            }
        }
        let counted: Vec<String> = counts
            .iter()
            .map(|(s, n)| format!("{n} {}", s.name()))
            .collect();
        line(format!(
            "Array tasks: {} ({})",
            tasks.len(),
            counted.join(", ")
        ));
    }
    line(efficiency_summary.clone());
    if let Some(e) = &efficiency {
        line(String::new());
        body.push_str(&e.render());
    }
    NotifyMessage {
        text: format!("{subject}\n{efficiency_summary}"),
        subject,
        body,
        event: notice.event,
        job_id: job.id,
        display_id: job.display_id(),
        array_job_id: job.array_task.map(|t| t.array_job_id),
        array_task_id: job.array_task.map(|t| t.task_id),
        array_summary: notice.array,
        name: job.spec.name.clone(),
        user: job.spec.user.clone(),
        state: job.state,
        reason,
        elapsed_s,
        exit_code: job.exit_code.filter(|_| job.state.is_terminal()),
        nodes,
        efficiency_summary,
        efficiency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::job::{ArrayTask, Attempt, JobId, JobSpec};
    use gsched_types::notify::{MailRequest, NoticeState, parse_mail_types};
    use gsched_types::{Failure, FailureKind};

    fn job(types: &str) -> JobRecord {
        let mut spec = JobSpec::simple("train", "alice", "#!/bin/sh\n");
        spec.mail = Some(MailRequest {
            types: parse_mail_types(types).unwrap(),
            user: None,
        });
        JobRecord::new(JobId(42), spec, 1_000)
    }

    fn running(mut j: JobRecord, at: u64) -> JobRecord {
        j.state = JobState::Running;
        j.start_ms = Some(at);
        j
    }

    fn ended(mut j: JobRecord, state: JobState, code: Option<i32>, at: u64) -> JobRecord {
        j.state = state;
        j.end_ms = Some(at);
        j.exit_code = code;
        if state != JobState::Completed {
            let kind = match state {
                JobState::Timeout => FailureKind::Timeout,
                JobState::Cancelled => FailureKind::Cancelled,
                JobState::NodeFail => FailureKind::NodeLost,
                JobState::OutOfMemory => FailureKind::Oom,
                JobState::Deadline => FailureKind::Deadline,
                _ => FailureKind::ExitCode {
                    code: code.unwrap_or(1),
                },
            };
            j.failure = Some(Failure::new(kind, "x", at));
        }
        j
    }

    fn kinds(d: &[Due]) -> Vec<(MailType, u32, bool)> {
        d.iter().map(|d| (d.event, d.attempt, d.array)).collect()
    }

    fn events_of(before: &JobRecord, after: &JobRecord) -> Vec<(MailType, u32, bool)> {
        let wants = wanted(after, None).to_vec();
        kinds(&events(
            &Before::of(before),
            after,
            &wants,
            &ArrayProgress::default(),
        ))
    }

    #[test]
    fn begin_is_the_start_and_nothing_else() {
        let j = job("BEGIN");
        let r = running(j.clone(), 2_000);
        assert_eq!(events_of(&j, &r), [(MailType::Begin, 0, false)]);
        let done = ended(r.clone(), JobState::Completed, Some(0), 3_000);
        assert!(events_of(&r, &done).is_empty());
        assert!(events_of(&j, &j).is_empty());
        // Without BEGIN, a start says nothing.
        let quiet = job("END");
        assert!(events_of(&quiet, &running(quiet.clone(), 2_000)).is_empty());
    }

    #[test]
    fn an_end_is_fail_for_a_failed_state_and_end_for_every_other_or_without_fail() {
        let both = running(job("END,FAIL"), 2_000);
        let end_only = running(job("END"), 2_000);
        let fail_only = running(job("FAIL"), 2_000);
        let cases = [
            (JobState::Completed, Some(0), MailType::End),
            (JobState::Cancelled, None, MailType::End),
            (JobState::Failed, Some(1), MailType::Fail),
            (JobState::Timeout, None, MailType::Fail),
            (JobState::NodeFail, None, MailType::Fail),
            (JobState::OutOfMemory, None, MailType::Fail),
            (JobState::Deadline, None, MailType::Fail),
        ];
        for (state, code, with_both) in cases {
            let after = ended(both.clone(), state, code, 9_000);
            assert_eq!(events_of(&both, &after), [(with_both, 0, false)], "{state}");
            // END alone covers every end.
            let after = ended(end_only.clone(), state, code, 9_000);
            assert_eq!(
                events_of(&end_only, &after),
                [(MailType::End, 0, false)],
                "{state}"
            );
            // FAIL alone only failed ones.
            let after = ended(fail_only.clone(), state, code, 9_000);
            let want: Vec<_> = if failed_state(state) {
                vec![(MailType::Fail, 0, false)]
            } else {
                vec![]
            };
            assert_eq!(events_of(&fail_only, &after), want, "{state}");
        }
        // A pending job cancelled ends too (Slurm mails END for it).
        let pending = job("END");
        let cancelled = ended(pending.clone(), JobState::Cancelled, None, 2_000);
        assert_eq!(events_of(&pending, &cancelled), [(MailType::End, 0, false)]);
        // An ended job changing nothing else says nothing again.
        let done = ended(both.clone(), JobState::Completed, Some(0), 9_000);
        assert!(events_of(&done, &done).is_empty());
    }

    #[test]
    fn a_requeue_is_about_the_attempt_that_ended() {
        let r = running(job("REQUEUE,END"), 2_000);
        let mut back = r.clone();
        back.state = JobState::Pending;
        back.attempt = 1;
        back.start_ms = None;
        assert_eq!(events_of(&r, &back), [(MailType::Requeue, 0, false)]);
        let mut completing = r.clone();
        completing.state = JobState::Completing;
        assert!(events_of(&r, &completing).is_empty());
        assert_eq!(
            events_of(&completing, &back),
            [(MailType::Requeue, 0, false)]
        );
        let no = running(job("END"), 2_000);
        let mut back = no.clone();
        back.state = JobState::Pending;
        back.attempt = 1;
        assert!(events_of(&no, &back).is_empty());
    }

    #[test]
    fn invalid_depend_is_told_once_whether_the_job_waits_or_ends_for_it() {
        let j = job("INVALID_DEPEND,END");
        let mut waits = j.clone();
        waits.reason = PendingReason::DependencyNeverSatisfied;
        assert_eq!(events_of(&j, &waits), [(MailType::InvalidDepend, 0, false)]);
        assert!(events_of(&waits, &waits).is_empty());
        let mut cancelled = j.clone();
        cancelled.state = JobState::Cancelled;
        cancelled.end_ms = Some(5_000);
        cancelled.failure = Some(Failure::new(
            FailureKind::DependencyNeverSatisfied,
            "never",
            5_000,
        ));
        assert_eq!(
            events_of(&j, &cancelled),
            [
                (MailType::InvalidDepend, 0, false),
                (MailType::End, 0, false)
            ]
        );
        // Already told while it waited: only its end now.
        assert_eq!(events_of(&waits, &cancelled), [(MailType::End, 0, false)]);
    }

    fn task(types: &str, id: u64, t: u32) -> JobRecord {
        let mut j = job(types);
        j.id = JobId(id);
        j.array_task = Some(ArrayTask {
            array_job_id: JobId(40),
            task_id: t,
            span: None,
        });
        j
    }

    fn array_events(
        before: &JobRecord,
        after: &JobRecord,
        p: ArrayProgress,
    ) -> Vec<(MailType, u32, bool)> {
        let wants = wanted(after, None).to_vec();
        kinds(&events(&Before::of(before), after, &wants, &p))
    }

    #[test]
    fn an_array_begins_with_its_first_task_and_ends_with_its_last() {
        let t = task("BEGIN,END,FAIL,REQUEUE", 41, 1);
        let r = running(t.clone(), 2_000);
        let first = ArrayProgress::default();
        let later = ArrayProgress {
            others_begun: true,
            ..first
        };
        assert_eq!(array_events(&t, &r, first), [(MailType::Begin, 0, true)]);
        assert!(array_events(&t, &r, later).is_empty());
        let done = ended(r.clone(), JobState::Completed, Some(0), 5_000);
        // Others still going: nothing yet.
        assert!(array_events(&r, &done, later).is_empty());
        let last = ArrayProgress {
            others_begun: true,
            others_ended: true,
            ..first
        };
        assert_eq!(array_events(&r, &done, last), [(MailType::End, 0, true)]);
        // A failed task anywhere makes the summary FAIL; a requeued one adds REQUEUE.
        let failed = ArrayProgress {
            others_failed: true,
            others_requeued: true,
            ..last
        };
        assert_eq!(
            array_events(&r, &done, failed),
            [(MailType::Requeue, 0, true), (MailType::Fail, 0, true)]
        );
        let own_fail = ended(r.clone(), JobState::Failed, Some(3), 5_000);
        assert_eq!(
            array_events(&r, &own_fail, last),
            [(MailType::Fail, 0, true)]
        );
        // A task's requeue says nothing by itself.
        let mut back = r.clone();
        back.state = JobState::Pending;
        back.attempt = 1;
        assert!(array_events(&r, &back, later).is_empty());
    }

    #[test]
    fn array_tasks_makes_every_task_tell_its_own() {
        let t = task("BEGIN,END,ARRAY_TASKS", 41, 1);
        let r = running(t.clone(), 2_000);
        let later = ArrayProgress {
            others_begun: true,
            ..ArrayProgress::default()
        };
        assert_eq!(array_events(&t, &r, later), [(MailType::Begin, 0, false)]);
        let done = ended(r.clone(), JobState::Completed, Some(0), 5_000);
        assert_eq!(array_events(&r, &done, later), [(MailType::End, 0, false)]);
    }

    #[test]
    fn time_limit_shares_are_crossed_once_each_and_several_at_once() {
        let mut j = running(
            job("TIME_LIMIT,TIME_LIMIT_50,TIME_LIMIT_80,TIME_LIMIT_90"),
            0,
        );
        let limit = Some(100);
        let wants = wanted(&j, None).to_vec();
        let at = |j: &JobRecord, s: u64| {
            kinds(&time_limit_due(j, limit, &wants, s * 1000))
                .into_iter()
                .map(|k| k.0)
                .collect::<Vec<_>>()
        };
        assert!(at(&j, 49).is_empty());
        assert_eq!(at(&j, 50), [MailType::TimeLimit50]);
        assert_eq!(
            at(&j, 95),
            [
                MailType::TimeLimit50,
                MailType::TimeLimit80,
                MailType::TimeLimit90
            ]
        );
        j.notices.push(Notice {
            event: MailType::TimeLimit50,
            attempt: 0,
            array: false,
            at_ms: 50_000,
            state: NoticeState::Due,
        });
        assert_eq!(at(&j, 80), [MailType::TimeLimit80]);
        assert_eq!(
            at(&j, 100),
            [
                MailType::TimeLimit80,
                MailType::TimeLimit90,
                MailType::TimeLimit
            ]
        );
        // No limit, not running, or not asked: nothing.
        assert!(kinds(&time_limit_due(&j, None, &wants, 1_000_000)).is_empty());
        assert!(kinds(&time_limit_due(&j, Some(0), &wants, 1_000_000)).is_empty());
        let mut done = j.clone();
        done.state = JobState::Completing;
        assert!(at(&done, 100).is_empty());
        let only50 = running(job("TIME_LIMIT_50"), 0);
        let w = wanted(&only50, None).to_vec();
        assert_eq!(
            kinds(&time_limit_due(&only50, limit, &w, 100_000)),
            [(MailType::TimeLimit50, 0, false)]
        );
        // A new attempt counts again.
        let mut again = j.clone();
        again.attempt = 1;
        assert_eq!(at(&again, 50), [MailType::TimeLimit50]);
        // An array task without ARRAY_TASKS tells with the summary's subject.
        let t = running(task("TIME_LIMIT_80", 41, 1), 0);
        let w = wanted(&t, None).to_vec();
        assert_eq!(
            kinds(&time_limit_due(&t, limit, &w, 80_000)),
            [(MailType::TimeLimit80, 0, true)]
        );
    }

    #[test]
    fn the_user_settings_give_the_events_and_the_targets_a_job_does_not_name() {
        let settings = UserNotify {
            to: vec![
                NotifyTarget::Mail("alice@lab.org".into()),
                NotifyTarget::Slack("https://hooks.slack.com/x".into()),
            ],
            on: vec![MailType::End],
        };
        let mut plain = job("BEGIN");
        plain.spec.mail = None;
        assert_eq!(wanted(&plain, Some(&settings)), [MailType::End]);
        assert!(wanted(&plain, None).is_empty());
        assert_eq!(targets(&plain, Some(&settings)), settings.to);
        assert_eq!(targets(&plain, None), [NotifyTarget::Mail("alice".into())]);
        // --mail-type wins over the user's events; NONE is none.
        let mut own = job("BEGIN");
        assert_eq!(wanted(&own, Some(&settings)), [MailType::Begin]);
        own.spec.mail.as_mut().unwrap().types.clear();
        assert!(wanted(&own, Some(&settings)).is_empty());
        // --mail-user replaces the mail targets and keeps the webhooks.
        let mut to_bob = job("END");
        to_bob.spec.mail.as_mut().unwrap().user = Some("bob@lab.org".into());
        assert_eq!(
            targets(&to_bob, Some(&settings)),
            [
                NotifyTarget::Mail("bob@lab.org".into()),
                NotifyTarget::Slack("https://hooks.slack.com/x".into())
            ]
        );
        let hooks_only = UserNotify {
            to: vec![NotifyTarget::Webhook("https://x.org/h".into())],
            on: vec![],
        };
        assert_eq!(targets(&plain, Some(&hooks_only)), hooks_only.to);
    }

    fn notice(event: MailType, at_ms: u64) -> Notice {
        Notice {
            event,
            attempt: 0,
            array: false,
            at_ms,
            state: NoticeState::Due,
        }
    }

    #[test]
    fn subjects_are_slurms_word_for_word() {
        let r = running(job("ALL"), 2_000);
        assert_eq!(
            subject(&r, &notice(MailType::Begin, 2_000), &[]),
            "Slurm Job_id=42 Name=train Began, Queued time 00:00:01"
        );
        let done = ended(r.clone(), JobState::Completed, Some(0), 604_000);
        assert_eq!(
            subject(&done, &notice(MailType::End, 604_000), &[]),
            "Slurm Job_id=42 Name=train Ended, Run time 00:10:02, COMPLETED, ExitCode 0"
        );
        let failed = ended(r.clone(), JobState::Failed, Some(1), 5_000);
        assert_eq!(
            subject(&failed, &notice(MailType::Fail, 5_000), &[]),
            "Slurm Job_id=42 Name=train Failed, Run time 00:00:03, FAILED, ExitCode 1"
        );
        let timeout = ended(r.clone(), JobState::Timeout, None, 2_000 + 90_061_000);
        assert_eq!(
            subject(&timeout, &notice(MailType::Fail, 0), &[]),
            "Slurm Job_id=42 Name=train Failed, Run time 1-01:01:01, TIMEOUT"
        );
        let pending = job("END");
        let cancelled = ended(pending, JobState::Cancelled, None, 3_000);
        assert_eq!(
            subject(&cancelled, &notice(MailType::End, 3_000), &[]),
            "Slurm Job_id=42 Name=train Ended, CANCELLED, ExitCode 0"
        );
        assert_eq!(
            subject(&r, &notice(MailType::TimeLimit50, 32_000), &[]),
            "Slurm Job_id=42 Name=train Reached 50% of time limit, Run time 00:00:30"
        );
        assert_eq!(
            subject(&r, &notice(MailType::TimeLimit, 62_000), &[]),
            "Slurm Job_id=42 Name=train Reached time limit, Run time 00:01:00"
        );
        assert_eq!(
            subject(&job("ALL"), &notice(MailType::InvalidDepend, 3_000), &[]),
            "Slurm Job_id=42 Name=train Invalid dependency"
        );
        // A requeue names the attempt that ended.
        let mut back = r.clone();
        back.state = JobState::Pending;
        back.attempt = 1;
        back.start_ms = None;
        back.attempts.push(Attempt {
            number: 0,
            nodes: vec!["n1".into()],
            start_ms: Some(2_000),
            end_ms: Some(7_000),
            state: JobState::NodeFail,
            failure: None,
            usage: vec![],
        });
        assert_eq!(
            subject(&back, &notice(MailType::Requeue, 7_000), &[]),
            "Slurm Job_id=42 Name=train Requeued, Run time 00:00:05"
        );
    }

    #[test]
    fn array_subjects_are_slurms_task_and_summary_forms() {
        let t = running(task("ALL,ARRAY_TASKS", 43, 2), 2_000);
        assert_eq!(
            subject(&t, &notice(MailType::Begin, 2_000), &[]),
            "Slurm Array Task Job_id=40_2 (43) Name=train Began, Queued time 00:00:01"
        );
        let mut summary = notice(MailType::Begin, 2_000);
        summary.array = true;
        assert_eq!(
            subject(&t, &summary, &[]),
            "Slurm Array Summary Job_id=40_* (40) Name=train Began"
        );
        let a = ended(task("END", 40, 0), JobState::Completed, Some(0), 9_000);
        let b = ended(task("END", 41, 1), JobState::Completed, Some(0), 9_000);
        let c = ended(task("END", 42, 2), JobState::Failed, Some(2), 9_000);
        let mut end = notice(MailType::End, 9_000);
        end.array = true;
        assert_eq!(
            subject(&b, &end, &[&a, &b]),
            "Slurm Array Summary Job_id=40_* (40) Name=train Ended, COMPLETED, ExitCode [0-0]"
        );
        let mut fail = notice(MailType::Fail, 9_000);
        fail.array = true;
        assert_eq!(
            subject(&c, &fail, &[&a, &b, &c]),
            "Slurm Array Summary Job_id=40_* (40) Name=train Failed, Mixed, ExitCode [0-2]"
        );
        let mut again = c.clone();
        again.attempt = 1;
        assert_eq!(
            subject(&c, &fail, &[&a, &again]),
            "Slurm Array Summary Job_id=40_* (40) Name=train Failed, Mixed, ExitCode [0-2], with requeued tasks"
        );
    }

    #[test]
    fn a_message_carries_state_reason_elapsed_and_efficiency() {
        let r = running(job("END"), 2_000);
        let failed = ended(r, JobState::Failed, Some(1), 62_000);
        let m = message(&failed, &notice(MailType::Fail, 62_000), &[]);
        assert_eq!(m.state, JobState::Failed);
        assert_eq!(m.reason, "NonZeroExitCode:1");
        assert_eq!(m.elapsed_s, 60);
        assert_eq!(m.exit_code, Some(1));
        assert!(m.body.contains("State: FAILED"), "{}", m.body);
        assert!(m.body.contains("Elapsed: 00:01:00"), "{}", m.body);
        assert!(m.body.contains("No usage was sampled"), "{}", m.body);
        assert_eq!(m.efficiency_summary, "GPU efficiency: no usage was sampled");
        assert!(m.text.starts_with("Slurm Job_id=42 Name=train Failed"));
        assert!(m.efficiency.is_some());
        let begun = message(&failed, &notice(MailType::Begin, 2_000), &[]);
        assert!(begun.efficiency.is_none());
    }
}
