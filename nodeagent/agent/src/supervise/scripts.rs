//! A step task's `--task-prolog` and `--task-epilog` (`gsched_types::steps::TaskScripts`),
//! run as slurmstepd runs them: as the task's user, in its cgroup and directory, with its
//! environment and `SLURM_SCRIPT_CONTEXT`, the prolog just before the task (its `export`,
//! `unset` and `print` lines act on the task; a failing one keeps the task from starting),
//! the epilog just after it (its output dropped, killed after 5 s as slurmstepd's).

use super::child::{ChildSetup, ChildStdin};
use gsched_launch::plan::Plan;
use gsched_types::steps::{PrologLine, prolog_lines};
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;

/// How long a task epilog may run before it is killed (slurmstepd's `max_wait` for it).
const EPILOG_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts `path` like the task `setup` starts, with `env`, its stdout and stderr on the
/// given descriptors and no stdin.
fn start(
    path: &str,
    env: &[(String, String)],
    setup: &ChildSetup,
    stdout: RawFd,
    stderr: RawFd,
    context: &str,
) -> std::io::Result<std::process::Child> {
    let mut script_setup = setup.clone();
    script_setup.stdout = stdout;
    script_setup.stderr = stderr;
    script_setup.stdin = ChildStdin::Null;
    let mut cmd = std::process::Command::new(path);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("SLURM_SCRIPT_CONTEXT", context);
    // SAFETY: `ChildSetup::apply` makes only async-signal-safe system calls on data
    // prepared before the fork and allocates nothing.
    unsafe {
        cmd.pre_exec(move || script_setup.apply());
    }
    cmd.spawn()
}

/// Runs `path` to its end; returns its exit status (1 when it could not run or was
/// killed) and what it printed on stdout.
fn run_captured(path: &str, env: &[(String, String)], setup: &ChildSetup) -> (i32, String) {
    let Ok((read, write)) = super::files::pipe() else {
        return (1, String::new());
    };
    let child = start(
        path,
        env,
        setup,
        write.as_raw_fd(),
        setup.stderr,
        "prolog_task",
    );
    drop(write);
    let Ok(mut child) = child else {
        return (1, String::new());
    };
    let mut out = String::new();
    let _ = std::fs::File::from(read).read_to_string(&mut out);
    (child.wait().ok().and_then(|s| s.code()).unwrap_or(1), out)
}

/// Runs `path` with its output dropped, killed if it runs past `limit`.
fn run_bounded(
    path: &str,
    env: &[(String, String)],
    setup: &ChildSetup,
    null: RawFd,
    limit: std::time::Duration,
) {
    let Ok(mut child) = start(path, env, setup, null, null, "epilog_task") else {
        return;
    };
    let deadline = std::time::Instant::now() + limit;
    while matches!(child.try_wait(), Ok(None)) {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs the plan's task prolog for each task, acting on its environment and writing its
/// `print` lines to the task's stdout; `Err` with slurmstepd's message when one fails.
pub(super) fn prolog(plan: &mut Plan, setup: &ChildSetup) -> Result<(), (String, i32)> {
    let Some(path) = plan.task_scripts.prolog.clone() else {
        return Ok(());
    };
    for env in &mut plan.tasks {
        let (status, out) = run_captured(&path, env, setup);
        if status != 0 {
            return Err((format!("--task-prolog failed status={status}"), status));
        }
        env.push(("SLURM_SCRIPT_CONTEXT".into(), "prolog_task".into()));
        for line in prolog_lines(&out) {
            match line {
                PrologLine::Export(k, v) => {
                    env.retain(|(n, _)| *n != k);
                    env.push((k, v));
                }
                PrologLine::Unset(k) => env.retain(|(n, _)| *n != k),
                PrologLine::Print(text) => {
                    // SAFETY: `setup.stdout` is the task's stdout, open until it is spawned.
                    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(setup.stdout) };
                    let _ = nix::unistd::write(fd, format!("{text}\n").as_bytes());
                }
            }
        }
    }
    Ok(())
}

/// Runs the plan's task epilog once per task, its output dropped (the task's streams are
/// closed by now).
pub(super) fn epilog(plan: &Plan, setup: &ChildSetup) {
    let Some(path) = &plan.task_scripts.epilog else {
        return;
    };
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return;
    };
    for env in &plan.tasks {
        run_bounded(path, env, setup, null.as_raw_fd(), EPILOG_LIMIT);
    }
}
