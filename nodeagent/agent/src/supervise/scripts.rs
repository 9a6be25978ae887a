//! A step task's `--task-prolog` and `--task-epilog` (`gsched_types::steps::TaskScripts`),
//! run as slurmstepd runs them: as the task's user, in its cgroup and directory, with its
//! environment and `SLURM_SCRIPT_CONTEXT=prolog_task`, the prolog just before the task
//! (its `export`, `unset` and `print` lines act on the task; a failing one keeps the task
//! from starting), the epilog just after it (its output is dropped).

use super::child::{ChildSetup, ChildStdin};
use gsched_launch::plan::Plan;
use gsched_types::steps::{PrologLine, prolog_lines};
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;

/// Runs `path` like the task `setup` starts, with `env` and its stderr on `stderr`;
/// returns its exit status (1 when it could not run or was killed) and what it printed.
fn run(path: &str, env: &[(String, String)], setup: &ChildSetup, stderr: RawFd) -> (i32, String) {
    let Ok((read, write)) = super::files::pipe() else {
        return (1, String::new());
    };
    let mut script_setup = setup.clone();
    script_setup.stdout = write.as_raw_fd();
    script_setup.stderr = stderr;
    script_setup.stdin = ChildStdin::Null;
    let mut cmd = std::process::Command::new(path);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("SLURM_SCRIPT_CONTEXT", "prolog_task");
    // SAFETY: `ChildSetup::apply` makes only async-signal-safe system calls on data
    // prepared before the fork and allocates nothing.
    unsafe {
        cmd.pre_exec(move || script_setup.apply());
    }
    let child = cmd.spawn();
    drop(write);
    let Ok(mut child) = child else {
        return (1, String::new());
    };
    let mut out = String::new();
    let _ = std::fs::File::from(read).read_to_string(&mut out);
    let status = child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
    (status, out)
}

/// Runs the plan's task prolog for each task, acting on its environment and writing its
/// `print` lines to the task's stdout; `Err` with slurmstepd's message when one fails.
pub(super) fn prolog(plan: &mut Plan, setup: &ChildSetup) -> Result<(), (String, i32)> {
    let Some(path) = plan.task_scripts.prolog.clone() else {
        return Ok(());
    };
    for env in &mut plan.tasks {
        let (status, out) = run(&path, env, setup, setup.stderr);
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
        let _ = run(path, env, setup, null.as_raw_fd());
    }
}
