//! What the run manager decides about one run each round, as pure functions of what it
//! knew, what it observed and the time: the start report, failures from log findings, the
//! `--signal` warning, the time limit, a hang (`crate::hang` decides; the stop is here),
//! SIGTERM then SIGKILL, and how the run ended. The run manager (`runs.rs`) observes
//! (files, processes) and carries out the actions.

use gsched_launch::transport::missing_library;
use gsched_launch::watch::{
    LogFinding, classify_exit, first_cause, is_echo, is_fatal, nccl_cause, unwinds,
};
use gsched_types::agent::RunEvent;
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::findings::Finding;
use gsched_types::job::LaunchMode;
use gsched_types::job::{JobId, WarnSignal};
use std::time::{Duration, Instant};

/// How an exit record describes the run's end (written by the supervisor).
pub use crate::supervise::ExitRecord;

/// The kill grace when the controller did not say (agents older than it, old launches).
pub const DEFAULT_KILL_GRACE_S: u64 = 10;

/// The run's limits as this node keeps them: all times on this node's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// When this node started the run (ms on its own clock): the base of the time limit.
    pub started_ms: u64,
    pub time_limit_s: Option<u64>,
    pub signal: Option<WarnSignal>,
    /// SIGTERM to SIGKILL, for a stop the node decides itself (the time limit).
    pub kill_grace: Duration,
}

/// A stop in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub since: Instant,
    pub grace: Duration,
    pub cause: FailureKind,
    pub reason: String,
    pub forced: bool,
}

/// What the monitor remembers about a run between rounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watch {
    pub started_reported: bool,
    pub fatal_reported: Option<Failure>,
    /// The newest findings of the run's logs (at most [`FINDINGS_KEPT`]).
    pub findings: Vec<LogFinding>,
    pub stop: Option<Stop>,
    /// The `--signal` warning has been sent.
    pub warned: bool,
    /// The run's first fatal line, not yet reported: the program has its grace to end by
    /// itself (the failure is then reported with its end), else it is stopped for it.
    pub held: Option<Held>,
}

/// A fatal line waiting out its grace.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub failure: Failure,
    pub since: Instant,
    /// Whether the line says why; one that only echoes a failure elsewhere ("connection
    /// closed by remote peer", "unhandled cuda error") is replaced by the line that says
    /// why, which often follows within a second.
    pub explained: bool,
}

/// How long an echoing fatal line waits for its cause before it is reported as it is.
pub const ECHO_WAIT: Duration = Duration::from_secs(2);

pub const FINDINGS_KEPT: usize = 64;

/// What one round saw of a run.
#[derive(Debug, Default)]
pub struct Observed {
    /// The run's process group, once the supervisor has recorded it.
    pub pgid: Option<i32>,
    /// Lines of this round classified, in the order they were read.
    pub findings: Vec<LogFinding>,
    /// What the network NCCL settled on says about the node (multi-node jobs).
    pub transport: Vec<Finding>,
    /// The supervisor's exit record, with what the run left behind.
    pub exit: Option<Ended>,
    /// No record, and the supervisor is gone (a re-adopted run after a reboot).
    pub supervisor_lost: bool,
    /// The hang watch's verdict that the run hangs (`crate::hang::decide`): its evidence.
    pub hang: Option<String>,
}

/// A run that has ended: the supervisor's record and what explains it.
#[derive(Debug, Clone, Default)]
pub struct Ended {
    pub record: ExitRecord,
    /// torchrun's error file, when it wrote one.
    pub error_file: Option<String>,
    /// The kernel's OOM killer struck in the run's cgroup.
    pub oom: bool,
}

/// Who a signal for a running job goes to (`gcancel --signal`, `--signal` before the
/// time limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalTarget {
    /// The batch shell alone (`B:`, `scancel -b`).
    BatchShell,
    /// Every process of the job on this node (gsched's own each-node jobs).
    ProcessGroup,
    /// The tasks of the job's `srun`/`grun` steps, not the batch shell (Slurm's default
    /// for a batch job: the script would die of a signal it does not trap).
    Steps,
}

/// Where a signal goes, as Slurm delivers it.
pub fn signal_target(mode: LaunchMode, batch_only: bool) -> SignalTarget {
    match (mode, batch_only) {
        (_, true) => SignalTarget::BatchShell,
        (LaunchMode::Batch, false) => SignalTarget::Steps,
        (LaunchMode::EachNode, false) => SignalTarget::ProcessGroup,
    }
}

/// What the run manager is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Report(RunEvent),
    /// The `--signal` warning: this signal, to the batch shell alone or to the group.
    Warn {
        signal: i32,
        batch_only: bool,
    },
    /// SIGTERM to the run's process group.
    Terminate,
    /// SIGKILL to the group and `cgroup.kill`.
    ForceKill,
    /// The run is over: forget it and give back what it held.
    Finish,
}

/// Where a run is, for one node.
pub struct Context<'a> {
    pub job: JobId,
    pub attempt: u32,
    pub node: &'a str,
    pub limits: &'a Limits,
    /// How long the run may go on after a fatal line ([`crate::hang::HangSettings`]).
    pub fatal_grace: Duration,
}

impl Context<'_> {
    fn failure(&self, kind: FailureKind, evidence: String, now_ms: u64) -> Failure {
        Failure {
            kind,
            node: Some(self.node.to_string()),
            evidence,
            at_ms: now_ms,
        }
    }
}

/// Starts stopping the run (a controller's kill or the node's own decision); a stop
/// already under way is kept as it is.
pub fn begin_stop(
    watch: &mut Watch,
    now: Instant,
    grace: Duration,
    cause: FailureKind,
    reason: &str,
) -> Option<Action> {
    if watch.stop.is_some() {
        return None;
    }
    watch.stop = Some(Stop {
        since: now,
        grace,
        cause,
        reason: reason.to_string(),
        forced: false,
    });
    Some(Action::Terminate)
}

/// Whether the `--signal` warning is due (its time limit is that close).
pub fn warning_due(limits: &Limits, now_ms: u64) -> bool {
    match (&limits.signal, limits.time_limit_s) {
        (Some(w), Some(limit)) if limit > 0 => {
            now_ms + u64::from(w.before_s) * 1000 >= limits.started_ms + limit * 1000
        }
        _ => false,
    }
}

/// One monitoring round.
pub fn round(
    watch: &mut Watch,
    cx: &Context,
    mut seen: Observed,
    now: Instant,
    now_ms: u64,
) -> Vec<Action> {
    let mut out = Vec::new();
    let (job, attempt) = (cx.job, cx.attempt);
    if !watch.started_reported && seen.pgid.is_some() {
        watch.started_reported = true;
        out.push(Action::Report(RunEvent::Started {
            job,
            attempt,
            pid: seen.pgid.map(|p| p as u32),
        }));
    }
    for finding in std::mem::take(&mut seen.transport) {
        out.push(Action::Report(RunEvent::Warning {
            job,
            attempt,
            finding,
        }));
    }
    let ending = seen.exit.is_some() || seen.supervisor_lost;
    read_findings(watch, cx, std::mem::take(&mut seen.findings), now, now_ms);
    release_held(watch, cx, ending, now, &mut out);
    if let Some(evidence) = seen.hang.take() {
        stop_hung(watch, cx, evidence, now, now_ms, &mut out);
    }
    enforce_time(watch, cx, now, now_ms, &mut out);
    report_end(watch, cx, &seen, now_ms, &mut out);
    out
}

/// The round's lines: the first fatal one is held (a line that says why replaces one that
/// only echoes it); all are kept as the window later lines are read against.
fn read_findings(
    watch: &mut Watch,
    cx: &Context,
    mut findings: Vec<LogFinding>,
    now: Instant,
    now_ms: u64,
) {
    // A round's warnings first: they are the causes its fatal lines echo, even when they
    // sit in another file (NCCL's debug file) than the fatal line.
    // Of its fatal lines, one that names a cause goes before one that only echoes it.
    findings.sort_by_key(|f| (f.fatal, is_echo(&f.line)));
    for finding in findings {
        let fatal = is_fatal(&watch.findings, &finding);
        if fatal && watch.fatal_reported.is_none() && watch.stop.is_none() {
            let evidence = first_cause(&watch.findings, &finding);
            let failure = cx.failure(finding.kind.clone(), evidence, now_ms);
            let explained = explains(&watch.findings, &finding, &failure.evidence);
            match &mut watch.held {
                None => {
                    watch.held = Some(Held {
                        failure,
                        since: now,
                        explained,
                    })
                }
                Some(held) if explained && !held.explained => {
                    held.failure = failure;
                    held.explained = true;
                }
                Some(_) => {}
            }
        }
        // NCCL's unwinding lines explain nothing; kept, they would push the WARN that
        // does out of the window.
        if unwinds(&finding.line) {
            continue;
        }
        watch.findings.push(finding);
        if watch.findings.len() > FINDINGS_KEPT {
            watch.findings.remove(0);
        }
    }
}

/// A held fatal line is reported with the run's end if the program ends within its grace
/// (its own status kept), else once the grace is over, which stops the run: the line is
/// the trigger and the evidence, the run still going is what decides.
fn release_held(
    watch: &mut Watch,
    cx: &Context,
    ending: bool,
    now: Instant,
    out: &mut Vec<Action>,
) {
    let (job, attempt) = (cx.job, cx.attempt);
    if let Some(held) = watch.held.take() {
        let wait = if held.explained {
            cx.fatal_grace
        } else {
            cx.fatal_grace.max(ECHO_WAIT)
        };
        if ending {
            // Ended by itself within its grace: its end says whether it failed, with
            // this line as the evidence if it did.
            watch.fatal_reported = Some(held.failure);
        } else if now.saturating_duration_since(held.since) >= wait {
            watch.fatal_reported = Some(held.failure.clone());
            out.push(Action::Report(RunEvent::Failed {
                job,
                attempt,
                failure: held.failure,
            }));
        } else {
            watch.held = Some(held);
        }
    }
}

/// A hang stops the run, unless it is already stopping or has failed.
fn stop_hung(
    watch: &mut Watch,
    cx: &Context,
    evidence: String,
    now: Instant,
    now_ms: u64,
    out: &mut Vec<Action>,
) {
    let (job, attempt) = (cx.job, cx.attempt);
    if watch.stop.is_none() && watch.fatal_reported.is_none() && watch.held.is_none() {
        out.extend(begin_stop(
            watch,
            now,
            cx.limits.kill_grace,
            FailureKind::Hang,
            &evidence,
        ));
        let failure = cx.failure(FailureKind::Hang, evidence, now_ms);
        out.push(Action::Report(RunEvent::Failed {
            job,
            attempt,
            failure,
        }));
    }
}

/// `--signal`'s warning, the time limit, and the kill after the grace of a stop.
fn enforce_time(watch: &mut Watch, cx: &Context, now: Instant, now_ms: u64, out: &mut Vec<Action>) {
    let (job, attempt) = (cx.job, cx.attempt);
    if !watch.warned && watch.stop.is_none() && warning_due(cx.limits, now_ms) {
        watch.warned = true;
        if let Some(w) = &cx.limits.signal {
            out.push(Action::Warn {
                signal: w.signal,
                batch_only: w.batch_only,
            });
        }
    }
    if let Some(limit) = cx.limits.time_limit_s
        && watch.stop.is_none()
        && now_ms > cx.limits.started_ms + limit * 1000
    {
        let why = format!(
            "time limit of {} reached",
            gsched_types::parse::format_duration(limit)
        );
        out.extend(begin_stop(
            watch,
            now,
            cx.limits.kill_grace,
            FailureKind::Timeout,
            &why,
        ));
        let failure = cx.failure(FailureKind::Timeout, why, now_ms);
        out.push(Action::Report(RunEvent::Failed {
            job,
            attempt,
            failure,
        }));
    }
    if let Some(stop) = watch.stop.as_mut()
        && !stop.forced
        && now.saturating_duration_since(stop.since) >= stop.grace
    {
        stop.forced = true;
        out.push(Action::ForceKill);
    }
}

/// The run's end: its exit status, or a supervisor that died without one.
fn report_end(
    watch: &mut Watch,
    cx: &Context,
    seen: &Observed,
    now_ms: u64,
    out: &mut Vec<Action>,
) {
    let (job, attempt) = (cx.job, cx.attempt);
    if let Some(ended) = &seen.exit {
        let failure = end_failure(watch, cx, ended, now_ms);
        out.push(Action::Report(RunEvent::Exited {
            job,
            attempt,
            code: ended.record.code,
            signal: ended.record.signal,
            failure,
            usage: None,
        }));
        out.push(Action::Finish);
    } else if seen.supervisor_lost {
        let failure = cx.failure(
            FailureKind::LaunchFailed,
            "the step supervisor died without recording an exit status".into(),
            now_ms,
        );
        out.push(Action::Report(RunEvent::Exited {
            job,
            attempt,
            code: None,
            signal: None,
            failure: Some(failure),
            usage: None,
        }));
        out.push(Action::Finish);
    }
}

/// Whether a fatal line's evidence says why: not when the line only echoes a failure
/// elsewhere (a peer gone, a launcher's summary) and nothing before it names a cause
/// other than a peer going away: a specific NCCL WARN or a Python exception that is a
/// root cause.
fn explains(earlier: &[LogFinding], finding: &LogFinding, evidence: &str) -> bool {
    if !is_echo(&finding.line) || missing_library(evidence).is_some() {
        return true;
    }
    let head = evidence.split(" (then: ").next().unwrap_or(evidence);
    nccl_cause(head).is_some_and(|c| c.rank() > 1)
        || earlier
            .iter()
            .any(|f| f.line == head && f.is_root_exception())
}

/// Why an ended run failed, if it did: what the supervisor recorded, else the fatal line
/// already reported, else the stop's cause (with the run's own last words), else what its
/// exit status, logs, error file and the OOM killer say.
pub fn end_failure(watch: &Watch, cx: &Context, ended: &Ended, now_ms: u64) -> Option<Failure> {
    let rec = &ended.record;
    let fail = |kind, evidence: String| Some(cx.failure(kind, evidence, now_ms));
    if let Some(why) = &rec.lease_expired {
        return fail(FailureKind::NodeLost, why.clone());
    }
    if let Some(why) = &rec.output_error {
        return fail(FailureKind::OutputFailed, why.clone());
    }
    if let Some(err) = &rec.launch_error {
        return fail(FailureKind::LaunchFailed, err.clone());
    }
    if let Some(f) = &watch.fatal_reported {
        let clean = rec.code == Some(0) && rec.signal.is_none();
        return (!clean).then(|| f.clone());
    }
    if let Some(stop) = &watch.stop {
        if stop.cause == FailureKind::Hang {
            // Its evidence already starts with the run's first error.
            return fail(FailureKind::Hang, stop.reason.clone());
        }
        // Stopped from outside; keep what its own log said, it may be the root cause.
        let own = watch
            .findings
            .iter()
            .rev()
            .find(|f| !matches!(f.kind, FailureKind::NcclError) || f.fatal)
            .map(|f| format!("; its log: {}", f.line))
            .unwrap_or_default();
        return fail(stop.cause.clone(), format!("{}{own}", stop.reason));
    }
    classify_exit(
        rec.code,
        rec.signal,
        &watch.findings,
        ended.error_file.as_deref(),
        ended.oom,
    )
    .map(|(kind, evidence)| cx.failure(kind, evidence, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_jobs_signals_go_to_its_steps_unless_b_names_the_shell() {
        assert_eq!(signal_target(LaunchMode::Batch, false), SignalTarget::Steps);
        assert_eq!(
            signal_target(LaunchMode::Batch, true),
            SignalTarget::BatchShell
        );
        assert_eq!(
            signal_target(LaunchMode::EachNode, false),
            SignalTarget::ProcessGroup
        );
    }

    const T0: u64 = 1_000_000;

    fn limits(time_limit_s: Option<u64>) -> Limits {
        Limits {
            started_ms: T0,
            time_limit_s,
            signal: None,
            kill_grace: Duration::from_secs(30),
        }
    }

    fn cx(l: &Limits) -> Context<'_> {
        Context {
            job: JobId(7),
            attempt: 0,
            node: "n1",
            limits: l,
            fatal_grace: Duration::ZERO,
        }
    }

    fn reports(actions: &[Action]) -> Vec<&RunEvent> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Report(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    fn ended(code: i32) -> Observed {
        Observed {
            exit: Some(Ended {
                record: ExitRecord {
                    code: Some(code),
                    signal: None,
                    launch_error: None,
                    tasks: vec![],
                    lease_expired: None,
                    output_error: None,
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_start_is_reported_once_the_process_group_is_known() {
        let l = limits(None);
        let mut w = Watch::default();
        let now = Instant::now();
        assert!(round(&mut w, &cx(&l), Observed::default(), now, T0).is_empty());
        let seen = || Observed {
            pgid: Some(4242),
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), seen(), now, T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Started {
                pid: Some(4242),
                ..
            }]
        ));
        assert!(round(&mut w, &cx(&l), seen(), now, T0).is_empty());
    }

    #[test]
    fn the_time_limit_is_read_on_this_nodes_clock_and_uses_the_configured_grace() {
        let l = limits(Some(60));
        let mut w = Watch::default();
        let t = Instant::now();
        // One second short of the limit on the node's clock: nothing.
        assert!(round(&mut w, &cx(&l), Observed::default(), t, T0 + 59_000).is_empty());
        let a = round(&mut w, &cx(&l), Observed::default(), t, T0 + 60_001);
        assert_eq!(a[0], Action::Terminate);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Failed { failure, .. }] if failure.kind == FailureKind::Timeout
        ));
        // SIGKILL only after the grace the controller configured (30 s here, not 10 s).
        let later = |s| t + Duration::from_secs(s);
        let a = round(&mut w, &cx(&l), Observed::default(), later(29), T0 + 90_000);
        assert!(a.is_empty(), "{a:?}");
        let a = round(&mut w, &cx(&l), Observed::default(), later(30), T0 + 91_000);
        assert_eq!(a, vec![Action::ForceKill]);
        assert!(round(&mut w, &cx(&l), Observed::default(), later(40), T0 + 99_000).is_empty());
        // Its end says it timed out, whatever its exit code.
        let a = round(&mut w, &cx(&l), ended(143), later(41), T0 + 99_500);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Exited { failure: Some(f), .. }] if f.kind == FailureKind::Timeout
        ));
        assert_eq!(a.last(), Some(&Action::Finish));
    }

    #[test]
    fn the_signal_warning_goes_once_before_the_limit() {
        let mut l = limits(Some(600));
        l.signal = Some(WarnSignal {
            signal: 10,
            before_s: 120,
            batch_only: true,
        });
        let mut w = Watch::default();
        let t = Instant::now();
        assert!(round(&mut w, &cx(&l), Observed::default(), t, T0 + 479_000).is_empty());
        let a = round(&mut w, &cx(&l), Observed::default(), t, T0 + 480_000);
        assert_eq!(
            a,
            vec![Action::Warn {
                signal: 10,
                batch_only: true
            }]
        );
        assert!(round(&mut w, &cx(&l), Observed::default(), t, T0 + 490_000).is_empty());
    }

    #[test]
    fn a_fatal_line_is_reported_once_with_the_warning_before_it_as_its_cause() {
        let l = limits(None);
        let mut w = Watch::default();
        let t = Instant::now();
        let line = |s: &str| gsched_launch::watch::classify_line(s).expect("classified");
        let cause = line(
            "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43523> failed : Connection refused",
        );
        let fatal = line(
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        );
        // A refused bootstrap connection is fatal by itself (NCCL gives the communicator
        // up after it), and it names the cause the other line only echoes.
        assert!(fatal.fatal && cause.fatal);
        // Read in the other order (the fatal line's file first): the cause still wins.
        let seen = Observed {
            findings: vec![fatal.clone(), cause],
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), seen, t, T0);
        assert!(
            matches!(reports(&a)[..], [RunEvent::Failed { failure, .. }] if failure.evidence.contains("Connection refused")),
            "{a:?}"
        );
        let again = Observed {
            findings: vec![fatal],
            ..Default::default()
        };
        assert!(round(&mut w, &cx(&l), again, t, T0).is_empty());
        // A clean exit after it (the job caught the error) is not a failure.
        let a = round(&mut w, &cx(&l), ended(0), t, T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Exited { failure: None, .. }]
        ));
    }

    #[test]
    fn a_fatal_line_stops_only_a_run_that_goes_on_past_its_grace() {
        let l = limits(None);
        let grace = Duration::from_secs(10);
        let cx = Context {
            fatal_grace: grace,
            ..cx(&l)
        };
        let t = Instant::now();
        let fatal = || {
            Observed {
            findings: vec![
                gsched_launch::watch::classify_line(
                    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.",
                )
                .expect("classified"),
            ],
            ..Default::default()
        }
        };
        // The launcher gives up and exits 1 by itself: the run ends with its own status,
        // the line its failure's evidence, and nothing is stopped.
        let mut w = Watch::default();
        assert!(round(&mut w, &cx, fatal(), t, T0).is_empty());
        let a = round(&mut w, &cx, ended(1), t + Duration::from_secs(3), T0);
        assert!(!a.contains(&Action::Terminate), "{a:?}");
        assert!(
            matches!(&reports(&a)[..], [RunEvent::Exited { code: Some(1), failure: Some(f), .. }]
                if f.evidence.contains("RendezvousConnectionError")),
            "{a:?}"
        );
        // It caught the error and finished well: no failure.
        let mut w = Watch::default();
        round(&mut w, &cx, fatal(), t, T0);
        let a = round(&mut w, &cx, ended(0), t + Duration::from_secs(3), T0);
        assert!(matches!(
            &reports(&a)[..],
            [RunEvent::Exited { failure: None, .. }]
        ));
        // Still running when the grace is over (NCCL's hangs keep the GPUs busy): the
        // failure is reported, which stops the job.
        let mut w = Watch::default();
        round(&mut w, &cx, fatal(), t, T0);
        let early = round(&mut w, &cx, Observed::default(), t + grace / 2, T0);
        assert!(reports(&early).is_empty());
        let a = round(&mut w, &cx, Observed::default(), t + grace, T0);
        assert!(
            matches!(&reports(&a)[..], [RunEvent::Failed { failure, .. }]
                if failure.evidence.contains("RendezvousConnectionError")),
            "{a:?}"
        );
    }

    #[test]
    fn a_stop_is_not_restarted_and_a_stopped_run_fails_with_its_cause() {
        let l = limits(None);
        let mut w = Watch::default();
        let t = Instant::now();
        let grace = Duration::from_secs(5);
        assert_eq!(
            begin_stop(
                &mut w,
                t,
                grace,
                FailureKind::Cancelled,
                "cancelled by alice"
            ),
            Some(Action::Terminate)
        );
        assert_eq!(
            begin_stop(&mut w, t, grace, FailureKind::GangStopped, "peer failed"),
            None
        );
        let a = round(&mut w, &cx(&l), ended(143), t + grace, T0);
        assert_eq!(a[0], Action::ForceKill);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Exited { failure: Some(f), .. }]
                if f.kind == FailureKind::Cancelled && f.evidence == "cancelled by alice"
        ));
    }

    #[test]
    fn what_the_supervisor_recorded_wins_over_the_exit_code() {
        let l = limits(None);
        let w = Watch::default();
        let mut e = ended(0).exit.unwrap();
        e.record.lease_expired = Some("the controllers were silent for 30 s".into());
        let f = end_failure(&w, &cx(&l), &e, T0).unwrap();
        assert_eq!(f.kind, FailureKind::NodeLost);
        e.record.lease_expired = None;
        e.oom = true;
        e.record.code = Some(137);
        let f = end_failure(&w, &cx(&l), &e, T0).unwrap();
        assert_eq!(f.kind, FailureKind::Oom);
    }

    #[test]
    fn a_lost_supervisor_ends_the_run_as_a_launch_failure() {
        let l = limits(None);
        let mut w = Watch::default();
        let seen = Observed {
            supervisor_lost: true,
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), seen, Instant::now(), T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Exited { failure: Some(f), .. }] if f.kind == FailureKind::LaunchFailed
        ));
        assert_eq!(a.last(), Some(&Action::Finish));
    }

    #[test]
    fn a_hang_verdict_stops_the_run_once_and_its_end_says_hang() {
        let l = limits(None);
        let mut w = Watch::default();
        let t = Instant::now();
        let evidence = "first error: RuntimeError: boom; rank 1 exited with code 1; the ranks still running here (0) stayed silent for 15 s";
        let hung = || Observed {
            hang: Some(evidence.to_string()),
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), hung(), t, T0);
        assert_eq!(a[0], Action::Terminate);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Failed { failure, .. }] if failure.kind == FailureKind::Hang && failure.evidence == evidence
        ));
        assert!(round(&mut w, &cx(&l), hung(), t, T0).is_empty(), "once");
        let a = round(&mut w, &cx(&l), ended(143), t + Duration::from_secs(1), T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Exited { failure: Some(f), .. }] if f.kind == FailureKind::Hang && f.evidence == evidence
        ));
        // A run already failing for a reason of its own is not also called hung.
        let mut w = Watch::default();
        let oom =
            gsched_launch::watch::classify_line("torch.OutOfMemoryError: CUDA out of memory.")
                .unwrap();
        let seen = Observed {
            findings: vec![oom],
            hang: Some(evidence.to_string()),
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), seen, t, T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Failed { failure, .. }] if failure.kind == FailureKind::Oom
        ));
    }

    #[test]
    fn a_launchers_summary_is_reported_with_the_workers_exception_as_its_cause() {
        let l = limits(None);
        let t = Instant::now();
        let mut reader = gsched_launch::watch::LineReader::default();
        let worker: Vec<LogFinding> = "[default1]:Traceback (most recent call last):
[default1]:  File \"/w/data.py\", line 17, in load_shard
[default1]:    raise FileNotFoundError(path)
[default1]:FileNotFoundError: /data/shard-0003.bin"
            .lines()
            .filter_map(|x| reader.line(x))
            .collect();
        let summary = reader
            .line("E0801 13:23:20.000000 32974 api.py:874] failed (exitcode: 1) local_rank: 1 (pid: 33054) of binary: /usr/bin/python3")
            .unwrap();
        assert!(summary.fatal);
        // With the worker's traceback read first: reported at once, the exception first.
        let mut w = Watch::default();
        let seen = Observed {
            findings: worker.into_iter().chain([summary.clone()]).collect(),
            ..Default::default()
        };
        let a = round(&mut w, &cx(&l), seen, t, T0);
        assert!(
            matches!(reports(&a)[..], [RunEvent::Failed { failure, .. }]
                if failure.evidence.starts_with("[default1]:FileNotFoundError: /data/shard-0003.bin (at /w/data.py:17 in load_shard) (then: ")),
            "{a:?}"
        );
        // The summary alone waits for the worker's words, then goes as it is.
        let mut w = Watch::default();
        let seen = Observed {
            findings: vec![summary],
            ..Default::default()
        };
        assert!(reports(&round(&mut w, &cx(&l), seen, t, T0)).is_empty());
        let a = round(&mut w, &cx(&l), Observed::default(), t + ECHO_WAIT, T0);
        assert!(matches!(
            reports(&a)[..],
            [RunEvent::Failed { failure, .. }] if failure.evidence.contains("failed (exitcode: 1)")
        ));
    }
}
