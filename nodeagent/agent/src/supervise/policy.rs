//! The supervisor's decisions, pure: how a plan's streams are wired, which task's status
//! is the run's, when a lapsed lease stops the run and how (SIGTERM, a grace, SIGKILL),
//! and what a failed spawn or open tells the user. `supervise` carries them out.

use gsched_launch::plan::{Plan, TaskInput};
use std::time::Duration;

/// How long a stopped run's processes get between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the output copiers may drain after the last task exits (a background
/// process the job left behind may hold a pipe open for ever).
pub const DRAIN_WAIT: Duration = Duration::from_secs(3);
/// How often the lease is read while the run goes on.
pub const LEASE_CHECK: Duration = Duration::from_millis(500);
/// How often a stopping run's process group is looked at during the grace.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// Where task 0's stdin comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    Null,
    /// The supervisor's own stdin: the input `grun` sends.
    Caller,
    /// A pseudo-terminal of this size, also the tasks' stdout and stderr.
    Terminal {
        rows: u16,
        cols: u16,
    },
    /// The plan's input file (`sbatch --input`), opened as the job's owner.
    File,
}

/// How the run's files and streams are set up, decided from the plan alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wiring {
    /// The (uid, gid) the output files are opened as and the tasks run as; `None` when
    /// the supervisor is not root (tests, `--dev-local` as a user): it runs as itself.
    pub owner: Option<(u32, u32)>,
    pub umask: Option<u32>,
    pub stdin: Stdin,
    /// stderr goes to its own file (and pipe) rather than into stdout's.
    pub separate_stderr: bool,
    /// The private copy keeps stderr apart too (`Plan::split_capture`).
    pub separate_capture: bool,
    /// The user's files are emptied first (`--open-mode=truncate`).
    pub truncate: bool,
}

impl Wiring {
    pub fn of(plan: &Plan, is_root: bool) -> Wiring {
        Wiring {
            owner: if is_root {
                plan.uid.zip(plan.gid)
            } else {
                None
            },
            umask: plan.umask.map(|m| m & 0o777),
            stdin: match plan.input {
                TaskInput::Pty(size) => Stdin::Terminal {
                    rows: size.rows,
                    cols: size.cols,
                },
                TaskInput::Pipe => Stdin::Caller,
                TaskInput::File { .. } => Stdin::File,
                TaskInput::None => Stdin::Null,
            },
            separate_stderr: plan.stderr.is_some(),
            separate_capture: plan.split_capture,
            truncate: plan.truncate_output,
        }
    }

    /// Tasks on a terminal lead their own session there; the others share one process
    /// group, so the whole run is signalled at once.
    pub fn tasks_share_a_group(&self) -> bool {
        !matches!(self.stdin, Stdin::Terminal { .. })
    }
}

/// A task's end: exit code, or the signal that killed it.
pub type TaskEnd = (Option<i32>, Option<i32>);

/// The run's status: the first task that failed (a signal or a non-zero code), else the
/// first task's; a run with no task counts as a success.
pub fn run_status(tasks: &[TaskEnd]) -> TaskEnd {
    tasks
        .iter()
        .find(|(c, s)| s.is_some() || c.is_some_and(|c| c != 0))
        .or(tasks.first())
        .copied()
        .unwrap_or((Some(0), None))
}

/// What the lease watcher does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// Nothing; look again after this long.
    Wait(Duration),
    /// Send SIGTERM to the run's process group (and look again after `STOP_POLL`).
    Terminate,
    /// Send SIGKILL to the group and kill its cgroup: the run was stopped because of
    /// the lease, for this reason.
    Kill(String),
    /// The run ended on its own before the lease lapsed.
    Finished,
}

/// The lease watcher's state: watching the contact file, or stopping the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseGuard {
    view: crate::contact::LeaseView,
    stopping: Option<Stopping>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stopping {
    since_ms: u64,
    why: String,
}

impl LeaseGuard {
    /// One turn at `now_ms` (boot clock): what the contact file said (`None`: nothing
    /// readable), whether any process of the run's group is alive, and whether the
    /// run's tasks have all been reaped.
    pub fn next(
        &mut self,
        now_ms: u64,
        contact: Option<(u64, u64)>,
        group_alive: bool,
        run_done: bool,
    ) -> LeaseAction {
        if let Some(s) = &self.stopping {
            let grace_over = now_ms.saturating_sub(s.since_ms) >= STOP_GRACE.as_millis() as u64;
            return if grace_over || !group_alive {
                LeaseAction::Kill(s.why.clone())
            } else {
                LeaseAction::Wait(STOP_POLL)
            };
        }
        if run_done {
            return LeaseAction::Finished;
        }
        self.view.observe(contact);
        match self.view.expired(now_ms) {
            Some(silent) => {
                self.stopping = Some(Stopping {
                    since_ms: now_ms,
                    why: format!(
                        "no word from the controllers for {:.0} s, past this node's lease: the step was stopped so that the job cannot run twice",
                        silent.as_secs_f64()
                    ),
                });
                LeaseAction::Terminate
            }
            None => LeaseAction::Wait(LEASE_CHECK),
        }
    }
}

/// The interpreter a script's first line names (`#!/bin/zsh -l`: `/bin/zsh`).
pub fn interpreter(first_line: &str) -> Option<&str> {
    first_line.strip_prefix("#!")?.split_whitespace().next()
}

/// Where a task's program is, as slurmstepd's `_build_path` finds it: a name starting with
/// `.` in the task's directory (`./x` is `DIR/./x`, its `argv[0]` too), another name with
/// a slash as it is (relative to the task's directory), else the first non-directory of that name
/// on the task's `PATH`, else the name in the task's directory (srun runs `srun prog` from
/// the current directory when no `PATH` entry has it). The second value is the `argv[0]`
/// to give when it differs from the path (the bare name, as Slurm execs it).
pub fn program_path(
    argv0: &str,
    path_var: Option<&str>,
    workdir: &str,
    is_file: impl Fn(&str) -> bool,
) -> (String, Option<String>) {
    if argv0.starts_with('.') {
        return (format!("{}/{argv0}", workdir.trim_end_matches('/')), None);
    }
    if argv0.contains('/') || argv0.is_empty() {
        return (argv0.to_string(), None);
    }
    let on_path = path_var
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| format!("{}/{argv0}", d.trim_end_matches('/')))
        .find(|p| is_file(p));
    match on_path {
        Some(p) => (p, None),
        None => (
            format!("{}/{argv0}", workdir.trim_end_matches('/')),
            Some(argv0.to_string()),
        ),
    }
}

/// What the user is told when a task cannot be started (`errno` of the failed exec).
/// `missing_interpreter`: the `#!` interpreter of a program that exists, when that
/// interpreter does not (the exec's ENOENT is then about it, as slurmstepd says: "bad
/// interpreter").
pub fn spawn_error(
    errno: Option<i32>,
    detail: &str,
    program: &str,
    workdir: &str,
    workdir_exists: bool,
    missing_interpreter: Option<&str>,
) -> String {
    match errno {
        Some(libc::ENOENT) if !workdir_exists => {
            format!("working directory {workdir} does not exist on this node")
        }
        Some(libc::ENOENT) if missing_interpreter.is_some() => format!(
            "cannot start {program}: bad interpreter {}: No such file or directory",
            missing_interpreter.unwrap_or_default()
        ),
        Some(libc::EACCES) => format!(
            "permission denied starting {program} in {workdir} (check the working directory and output file permissions for the job's user)"
        ),
        Some(libc::ENOENT) => {
            format!("cannot start {program}: no such file (or the output directory does not exist)")
        }
        _ => format!("cannot start {program}: {detail}"),
    }
}

/// What the user is told when an output file cannot be opened as them.
pub fn open_error(errno: Option<i32>, detail: &str, path: &str) -> String {
    match errno {
        Some(libc::EACCES) => format!(
            "permission denied opening the output file {path} as the job's user (check the directory's permissions)"
        ),
        Some(libc::ENOENT) => {
            format!("cannot open the output file {path}: its directory does not exist on this node")
        }
        _ => format!("cannot open the output file {path}: {detail}"),
    }
}

/// What the run's record says when its output could not be written.
pub fn output_error(path: &str, detail: &str) -> String {
    format!(
        "cannot write the job's output to {path}: {detail}; the step was stopped (free space or fix the file system, then resubmit)"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_program_is_found_on_path_then_in_the_task_directory() {
        let files = ["/usr/bin/python", "/run/probe.py"];
        let is_file = |p: &str| files.contains(&p);
        let find = |a: &str| program_path(a, Some("/opt/bin::/usr/bin/"), "/run", is_file);
        assert_eq!(find("python"), ("/usr/bin/python".into(), None));
        assert_eq!(
            find("probe.py"),
            ("/run/probe.py".into(), Some("probe.py".into()))
        );
        assert_eq!(
            find("missing"),
            ("/run/missing".into(), Some("missing".into())),
            "not found: the exec says so, naming the program"
        );
        assert_eq!(find("./x.sh"), ("/run/./x.sh".into(), None));
        assert_eq!(find("sub/x.sh"), ("sub/x.sh".into(), None));
        assert_eq!(find("/bin/true"), ("/bin/true".into(), None));
    }

    use super::*;

    const LEASE_MS: u64 = 10_000;

    fn renewed(at: u64) -> Option<(u64, u64)> {
        Some((at, LEASE_MS))
    }

    #[test]
    fn the_failing_task_speaks_for_the_run() {
        assert_eq!(run_status(&[]), (Some(0), None));
        assert_eq!(
            run_status(&[(Some(0), None), (Some(0), None)]),
            (Some(0), None)
        );
        assert_eq!(
            run_status(&[(Some(0), None), (Some(3), None), (None, Some(9))]),
            (Some(3), None)
        );
        assert_eq!(
            run_status(&[(Some(0), None), (None, Some(15))]),
            (None, Some(15))
        );
    }

    #[test]
    fn a_renewed_lease_only_waits() {
        let mut g = LeaseGuard::default();
        for t in (0..60_000).step_by(500) {
            assert_eq!(
                g.next(t, renewed(t.saturating_sub(1_000)), true, false),
                LeaseAction::Wait(LEASE_CHECK)
            );
        }
    }

    #[test]
    fn a_lapsed_lease_terminates_then_kills_after_the_grace() {
        let mut g = LeaseGuard::default();
        assert_eq!(
            g.next(1_000, renewed(1_000), true, false),
            LeaseAction::Wait(LEASE_CHECK)
        );
        // The file goes silent: what was last read still counts.
        assert_eq!(
            g.next(9_000, None, true, false),
            LeaseAction::Wait(LEASE_CHECK)
        );
        assert_eq!(g.next(11_001, None, true, false), LeaseAction::Terminate);
        // A late renewal and the tasks' end do not call the stop off.
        assert_eq!(
            g.next(11_500, renewed(11_400), true, true),
            LeaseAction::Wait(STOP_POLL)
        );
        match g.next(13_001, None, true, true) {
            LeaseAction::Kill(why) => {
                assert!(why.contains("past this node's lease"), "{why}");
                assert!(why.contains("10 s"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_group_that_exits_on_sigterm_is_finished_off_at_once() {
        let mut g = LeaseGuard::default();
        g.next(0, renewed(0), true, false);
        assert_eq!(g.next(10_001, None, true, false), LeaseAction::Terminate);
        assert!(matches!(
            g.next(10_100, None, false, false),
            LeaseAction::Kill(_)
        ));
    }

    #[test]
    fn a_run_that_ends_in_time_finishes_the_watch() {
        let mut g = LeaseGuard::default();
        g.next(0, renewed(0), true, false);
        assert_eq!(g.next(5_000, None, false, true), LeaseAction::Finished);
    }

    #[test]
    fn no_lease_read_yet_or_a_zero_lease_never_stops_a_run() {
        let mut g = LeaseGuard::default();
        assert_eq!(
            g.next(1 << 40, None, true, false),
            LeaseAction::Wait(LEASE_CHECK)
        );
        assert_eq!(
            g.next(1 << 41, Some((0, 0)), true, false),
            LeaseAction::Wait(LEASE_CHECK)
        );
    }

    #[test]
    fn an_older_renewal_read_late_does_not_rewind_the_lease() {
        let mut g = LeaseGuard::default();
        g.next(20_000, renewed(20_000), true, false);
        // A torn or stale read of an earlier renewal.
        g.next(25_000, renewed(1_000), true, false);
        assert_eq!(
            g.next(29_000, None, true, false),
            LeaseAction::Wait(LEASE_CHECK)
        );
        assert_eq!(g.next(30_001, None, true, false), LeaseAction::Terminate);
    }

    fn plan(input: TaskInput) -> Plan {
        let mut p: Plan = serde_json::from_value(serde_json::json!({
            "argv": ["/bin/true"], "tasks": [[]], "workdir": "/", "stdout": "/dev/null"
        }))
        .expect("a minimal plan");
        p.input = input;
        p.uid = Some(1000);
        p.gid = Some(1000);
        p.umask = Some(0o22);
        p
    }

    #[test]
    fn wiring_follows_the_plan_and_runs_as_the_owner_only_under_root() {
        let w = Wiring::of(&plan(TaskInput::None), true);
        assert_eq!(w.owner, Some((1000, 1000)));
        assert_eq!((w.stdin, w.separate_stderr), (Stdin::Null, false));
        assert!(w.tasks_share_a_group());
        assert_eq!(Wiring::of(&plan(TaskInput::None), false).owner, None);
        assert_eq!(
            Wiring::of(&plan(TaskInput::Pipe), true).stdin,
            Stdin::Caller
        );
        let mut p = plan(TaskInput::Pipe);
        p.stderr = Some("/tmp/err".into());
        p.umask = Some(0o10022);
        let w = Wiring::of(&p, true);
        assert!(w.separate_stderr);
        assert_eq!(w.umask, Some(0o022));
    }

    #[test]
    fn spawn_and_open_failures_say_what_to_check() {
        let e =
            |errno, exists| spawn_error(Some(errno), "x", "train.sh", "/data/run", exists, None);
        assert_eq!(
            spawn_error(
                Some(libc::ENOENT),
                "x",
                "/r/job.sh",
                "/r",
                true,
                Some("/bin/zsh")
            ),
            "cannot start /r/job.sh: bad interpreter /bin/zsh: No such file or directory"
        );
        assert_eq!(interpreter("#!/bin/zsh -l"), Some("/bin/zsh"));
        assert_eq!(interpreter("#! /usr/bin/env bash"), Some("/usr/bin/env"));
        assert_eq!(interpreter("echo hi"), None);
        assert!(e(libc::ENOENT, false).contains("working directory /data/run does not exist"));
        assert!(e(libc::ENOENT, true).contains("cannot start train.sh: no such file"));
        assert!(e(libc::EACCES, true).contains("permission denied starting train.sh"));
        assert_eq!(
            spawn_error(
                Some(libc::E2BIG),
                "Argument list too long",
                "a",
                "/",
                true,
                None
            ),
            "cannot start a: Argument list too long"
        );
        assert!(open_error(Some(libc::EACCES), "x", "/o").contains("as the job's user"));
        assert!(open_error(Some(libc::ENOENT), "x", "/o").contains("directory does not exist"));
        assert!(output_error("/o", "No space left on device").contains("free space"));
    }
}
