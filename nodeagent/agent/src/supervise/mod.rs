//! `gagentd supervise DIR`: the small root process that owns one node's run of a job.
//!
//! The agent starts it in its own session, so it outlives agent restarts. It opens the
//! job's output files with the owner's file-system identity (so they are owned by the user
//! and created with the user's rights) and starts every task of the run in one process
//! group; each task, between fork and exec, joins the run's cgroup, takes the owner's
//! groups and uid and enters the working directory. The tasks write into pipes that the
//! supervisor copies both to the user's files and to `DIR/output.log`, this node's private
//! copy, which the agent scans for failure evidence: on a shared file system every node of
//! a job appends to the same output file, and another node's lines must not be blamed on
//! this one. It records the process group in `DIR/pgid`, each task that ends while others
//! still run in `DIR/task-exits.json` (the hang watch reads it), and, when all tasks have
//! ended, the outcome in `DIR/exit.json`, which the agent (current or restarted) reports.
//!
//! A `grun` task 0 reads the input its caller sends: the supervisor's own stdin, a pipe
//! from the agent, becomes the task's stdin, or with `grun --pty` is copied into a
//! pseudo-terminal that is the task's stdin, stdout, stderr and controlling terminal
//! (the task leads its own session there, so Ctrl-C reaches it; `DIR/winsize` resizes it).

mod child;
mod files;
pub mod policy;
mod rlimits;
mod scripts;
mod streams;

use crate::layout::{RunFiles, write_private};
use child::{ChildSetup, ChildStdin, IGNORED_BY_SUPERVISOR, cstr, winsize};
use files::{open_as, pipe};
use gsched_launch::plan::Plan;
use nix::sys::signal::{self, SigHandler, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Pid, Uid};
use policy::{LeaseAction, LeaseGuard, Stdin, Wiring};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use streams::{OutputSink, copy_input, copy_output, follow_resizes};

/// How the run ended, written to `DIR/exit.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when no task could be started (bad directory, unknown user...).
    #[serde(default)]
    pub launch_error: Option<String>,
    #[serde(default)]
    pub tasks: Vec<(Option<i32>, Option<i32>)>,
    /// Set when the supervisor stopped the run because the controllers had been silent
    /// past the node's lease (see `contact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expired: Option<String>,
    /// Set when the run was stopped because its output could not be written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
}

impl ExitRecord {
    /// A run none of whose tasks could be started, and why.
    fn not_started(why: String) -> ExitRecord {
        ExitRecord {
            launch_error: Some(why),
            ..ExitRecord::default()
        }
    }
}

fn record(dir: &Path, rec: &ExitRecord) {
    let _ = write_private(
        &dir.join("exit.json"),
        &serde_json::to_vec(rec).unwrap_or_default(),
    );
}

/// Carries out the run described in `dir/plan.json`; never returns an error to the caller, the
/// outcome goes to `dir/exit.json`.
pub fn supervise(dir: &Path) -> i32 {
    for sig in IGNORED_BY_SUPERVISOR {
        // SAFETY: SIG_IGN installs no handler; this runs before any thread is started.
        let _ = unsafe { signal::signal(sig, SigHandler::SigIgn) };
    }
    let outcome = read_plan(dir)
        .map_err(|e| format!("cannot read the step plan: {e}"))
        .and_then(|plan| run(dir, &plan));
    let (rec, status) = match outcome {
        Ok(rec) => (rec, 0),
        Err(e) => (ExitRecord::not_started(e), 1),
    };
    record(dir, &rec);
    status
}

/// `gagentd notice DIR TEXT`: appends a line to the output file of the run in `DIR` (its
/// error file when it has one), opened with the job user's identity as the supervisor
/// opens it, so a link the user planted cannot make root write elsewhere.
pub fn append_notice(dir: &Path, text: &str) -> Result<(), NoticeError> {
    let plan = read_plan(dir).map_err(|why| NoticeError::Plan {
        dir: dir.display().to_string(),
        why,
    })?;
    let wiring = Wiring::of(&plan, crate::identity::is_root());
    let umask = wiring.umask.map(Mode::from_bits_truncate);
    let path = plan.stderr.as_deref().unwrap_or(&plan.stdout);
    let mut f = open_as(path, wiring.owner, &plan.groups, umask).map_err(NoticeError::Open)?;
    let line = format!("{}\n", text.trim_end());
    f.write_all(line.as_bytes())
        .map_err(|source| NoticeError::Write {
            path: path.to_string(),
            source,
        })
}

/// Why a notice could not be added to a run's output.
#[derive(Debug, thiserror::Error)]
pub enum NoticeError {
    #[error("cannot read the step plan in {dir}: {why}")]
    Plan { dir: String, why: String },
    #[error("{0}")]
    Open(String),
    #[error("cannot write to {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

fn read_plan(dir: &Path) -> Result<Plan, String> {
    let bytes = std::fs::read(dir.join("plan.json")).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// The private copy of stderr when a plan keeps the streams apart (`Plan::split_capture`).
pub const STDERR_CAPTURE: &str = "stderr.log";

fn run(dir: &Path, plan: &Plan) -> Result<ExitRecord, String> {
    let mut plan = plan.clone();
    let limits = rlimits::take(&mut plan);
    let wiring = Wiring::of(&plan, crate::identity::is_root());
    let outputs = Outputs::open(dir, &plan, &wiring)?;
    let streams = Streams::open(&wiring)?;
    // `sbatch --input`: opened as the owner, kept open until the tasks have it.
    let input = match &plan.input {
        gsched_launch::plan::TaskInput::File { path } => {
            Some(files::open_read_as(path, wiring.owner, &plan.groups)?)
        }
        _ => None,
    };
    let mut setup = child_setup(&plan, &wiring, &streams, input.as_ref())?;
    setup.limits = limits.set;
    if let Err((message, status)) = scripts::prolog(&mut plan, &setup) {
        return Ok(ExitRecord {
            code: Some(status),
            ..ExitRecord::not_started(message)
        });
    }
    let epilog_setup = setup.clone();
    let plan = &plan;
    let task_stderr = setup.stderr;
    for line in plan
        .notices
        .iter()
        .map(|n| format!("{n}\n"))
        .chain(limits.refused)
    {
        say_to(task_stderr, &line);
    }
    let spawned = spawn_tasks(plan, &wiring, setup, &dir.join("pgid"));
    drop(input);
    if let Some((e, _)) = &spawned.error
        && !plan.split_capture
    {
        // A batch script that cannot start says so in its own output, as slurmstepd's
        // "error: execve(): ..." (a step's grun says it on the caller's side).
        say_to(task_stderr, &format!("gsched: error: {e}\n"));
    }
    // Only the tasks hold the write ends now: the copiers see end-of-file once they exit.
    let sources = streams.into_sources()?;
    let copying = Copying::start(dir, plan, outputs, sources, spawned.pgid);
    if let Some((e, errno)) = spawned.error {
        if let Some(g) = spawned.pgid {
            let _ = signal::killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
        for mut c in spawned.children {
            let _ = c.wait();
        }
        // slurmstepd exits with the failed exec's errno (2 for a program not found).
        return Ok(ExitRecord {
            code: errno,
            ..ExitRecord::not_started(e)
        });
    }
    if let Some(g) = spawned.pgid {
        let _ = write_private(&dir.join("pgid"), g.to_string().as_bytes());
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lease = match (&plan.contact_file, spawned.pgid) {
        (Some(f), Some(g)) => Some(watch_lease(
            std::path::PathBuf::from(f),
            g,
            plan.cgroup.clone(),
            done.clone(),
        )),
        _ => None,
    };
    let tasks = wait_tasks(dir, spawned.children)?;
    scripts::epilog(plan, &epilog_setup);
    let output_error = copying.drain();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    // Wake the lease watcher from its wait, or the run's exit is reported up to one
    // check interval late.
    let lease_expired = lease
        .and_then(|w| {
            w.thread().unpark();
            w.join().ok()
        })
        .flatten();
    let (code, signal) = policy::run_status(&tasks);
    Ok(ExitRecord {
        code,
        signal,
        launch_error: None,
        tasks,
        lease_expired,
        output_error,
    })
}

/// One task that ended while others of its run still ran (`DIR/task-exits.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskExit {
    /// The task's index on this node (its place in the plan).
    pub task: usize,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// The file of tasks that ended early, in the order they ended.
pub const TASK_EXITS: &str = "task-exits.json";

/// A task's exit code and signal, as `ExitRecord::tasks` holds them.
type Status = (Option<i32>, Option<i32>);

/// Waits for every task in the order they end, recording each that ends while others
/// still run; returns each task's (code, signal) in plan order.
fn wait_tasks(dir: &Path, children: Vec<std::process::Child>) -> Result<Vec<Status>, String> {
    use nix::sys::wait::{WaitStatus, waitpid};
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    // Reaped below by pid, not through `Child` (dropping one neither waits nor kills).
    drop(children);
    let mut ended: Vec<Option<Status>> = vec![None; pids.len()];
    let mut early = Vec::new();
    let mut left = pids.len();
    while left > 0 {
        let (pid, status) = match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, (Some(code), None)),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, (None, Some(sig as i32))),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("waiting for a task failed: {e}")),
        };
        let Some(task) = pids.iter().position(|p| *p == pid.as_raw()) else {
            continue;
        };
        if ended[task].is_none() {
            ended[task] = Some(status);
            left -= 1;
            if left > 0 {
                early.push(TaskExit {
                    task,
                    code: status.0,
                    signal: status.1,
                });
                let _ = write_private(
                    &dir.join(TASK_EXITS),
                    &serde_json::to_vec(&early).unwrap_or_default(),
                );
            }
        }
    }
    Ok(ended
        .into_iter()
        .map(|e| e.unwrap_or((None, None)))
        .collect())
}

/// The user's output files (opened as the owner) and this node's private copies.
struct Outputs {
    user_out: File,
    user_err: Option<File>,
    capture: std::sync::Arc<parking_lot::Mutex<File>>,
    err_capture: std::sync::Arc<parking_lot::Mutex<File>>,
}

impl Outputs {
    fn open(dir: &Path, plan: &Plan, wiring: &Wiring) -> Result<Outputs, String> {
        let umask = wiring.umask.map(Mode::from_bits_truncate);
        let user_out = open_as(&plan.stdout, wiring.owner, &plan.groups, umask)?;
        let user_err = plan
            .stderr
            .as_deref()
            .map(|e| open_as(e, wiring.owner, &plan.groups, umask))
            .transpose()?;
        if wiring.truncate {
            // Kept open for appending, as the tasks' copies write concurrently.
            let files = std::iter::once(&user_out).chain(user_err.as_ref());
            for f in files.filter(|f| f.metadata().is_ok_and(|m| m.is_file())) {
                f.set_len(0)
                    .map_err(|e| format!("cannot empty the output file: {e}"))?;
            }
        }
        let private = |path: std::path::PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .map(|f| std::sync::Arc::new(parking_lot::Mutex::new(f)))
                .map_err(|e| {
                    format!(
                        "cannot create the step's output copy {}: {e}",
                        path.display()
                    )
                })
        };
        let capture = private(RunFiles(dir.to_path_buf()).capture())?;
        let err_capture = if wiring.separate_capture {
            private(dir.join(STDERR_CAPTURE))?
        } else {
            capture.clone()
        };
        Ok(Outputs {
            user_out,
            user_err,
            capture,
            err_capture,
        })
    }
}

/// What the copiers read once the tasks hold the write ends: stdout (the terminal for a
/// task on one), stderr's pipe, the terminal's master.
struct Sources {
    stdout: OwnedFd,
    stderr: Option<OwnedFd>,
    terminal: Option<OwnedFd>,
}

/// The tasks' stdout and stderr pipes, or their terminal.
struct Streams {
    out: (OwnedFd, OwnedFd),
    err: Option<(OwnedFd, OwnedFd)>,
    pty: Option<nix::pty::OpenptyResult>,
}

impl Streams {
    fn open(wiring: &Wiring) -> Result<Streams, String> {
        let pty = match wiring.stdin {
            Stdin::Terminal { rows, cols } => {
                let p = nix::pty::openpty(&winsize(rows, cols), None)
                    .map_err(|e| format!("cannot open a pseudo-terminal for the task: {e}"))?;
                if let Some((uid, _)) = wiring.owner {
                    let _ = nix::unistd::fchown(&p.slave, Some(Uid::from_raw(uid)), None);
                }
                Some(p)
            }
            _ => None,
        };
        Ok(Streams {
            out: pipe()?,
            err: if wiring.separate_stderr {
                Some(pipe()?)
            } else {
                None
            },
            pty,
        })
    }

    /// Closes the ends the tasks write to (once they are spawned) and returns what the
    /// copiers read: stdout's source (the terminal for a task on one), stderr's pipe,
    /// and the terminal's master.
    fn into_sources(self) -> Result<Sources, String> {
        let (out_r, out_w) = self.out;
        drop(out_w);
        let err_r = self.err.map(|(r, w)| {
            drop(w);
            r
        });
        let terminal = self.pty.map(|p| {
            drop(p.slave);
            p.master
        });
        let stdout_source = match &terminal {
            Some(master) => master
                .try_clone()
                .map_err(|e| format!("cannot read the task's terminal: {e}"))?,
            None => out_r,
        };
        Ok(Sources {
            stdout: stdout_source,
            stderr: err_r,
            terminal,
        })
    }
}

fn child_setup(
    plan: &Plan,
    wiring: &Wiring,
    streams: &Streams,
    input: Option<&std::fs::File>,
) -> Result<ChildSetup, String> {
    let owner = wiring.owner;
    let stdout = streams.out.1.as_raw_fd();
    Ok(ChildSetup {
        cgroup_procs: plan
            .cgroup
            .as_ref()
            .map(|c| cstr(&format!("{c}/cgroup.procs")))
            .transpose()?,
        uid: owner.map(|o| Uid::from_raw(o.0)),
        gid: owner.map(|o| Gid::from_raw(o.1)),
        groups: plan.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
        workdir: cstr(&plan.workdir)?,
        umask: wiring.umask.map(Mode::from_bits_truncate),
        stdout,
        stderr: streams.err.as_ref().map_or(stdout, |(_, w)| w.as_raw_fd()),
        stdin: match (&streams.pty, wiring.stdin, input) {
            (Some(p), _, _) => ChildStdin::Pty(p.slave.as_raw_fd()),
            (None, Stdin::Caller, _) => ChildStdin::Inherit,
            (None, Stdin::File, Some(f)) => ChildStdin::File(f.as_raw_fd()),
            (None, _, _) => ChildStdin::Null,
        },
        affinity: plan.affinity.as_deref().map(cpu_set),
        limits: Vec::new(),
    })
}

/// The tasks started, their process group, and why the next one could not start.
struct Spawned {
    children: Vec<std::process::Child>,
    pgid: Option<i32>,
    /// Why a task could not start, and the errno of its failed exec.
    error: Option<(String, Option<i32>)>,
}

/// A CPU list as the kernel's affinity set (ids beyond what it can hold are left out).
fn cpu_set(cpus: &[u32]) -> nix::sched::CpuSet {
    let mut set = nix::sched::CpuSet::new();
    for c in cpus {
        let _ = set.set(*c as usize);
    }
    set
}

/// What srun's `--cpu-bind=verbose` prints for a task: its mask, node, ranks and pid.
fn bind_line(plan: &Plan, env: &[(String, String)], pid: u32) -> Option<String> {
    let cpus = plan.affinity.as_ref().filter(|_| plan.affinity_verbose)?;
    let var = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map_or("?", |(_, v)| v.as_str())
    };
    Some(format!(
        "cpu-bind=MASK - {}, task {:>2} {:>2} [{pid}]: mask {} set\n",
        var("SLURMD_NODENAME"),
        var("SLURM_PROCID"),
        var("SLURM_LOCALID"),
        gsched_launch::binding::hex_mask(cpus)
    ))
}

/// Starts every task of the run; with one process group for them all, its leader (the
/// first task) records the group in `pgid_file` before its program runs.
fn spawn_tasks(plan: &Plan, wiring: &Wiring, setup: ChildSetup, pgid_file: &Path) -> Spawned {
    let setup = std::sync::Arc::new(setup);
    let mut out = Spawned {
        children: Vec::new(),
        pgid: None,
        error: None,
    };
    for env in &plan.tasks {
        let path_var = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let (program, argv0) = policy::program_path(&plan.argv[0], path_var, &plan.workdir, |p| {
            std::fs::metadata(p).is_ok_and(|m| !m.is_dir())
        });
        let mut cmd = Command::new(&program);
        if let Some(a) = argv0 {
            cmd.arg0(a);
        }
        cmd.args(&plan.argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        if wiring.tasks_share_a_group() {
            cmd.process_group(out.pgid.unwrap_or(0));
        }
        let s = setup.clone();
        let record = match (out.pgid, wiring.tasks_share_a_group()) {
            (None, true) => match child::PgidRecord::new(pgid_file) {
                Ok(r) => Some(r),
                Err(e) => {
                    out.error = Some((e, None));
                    break;
                }
            },
            _ => None,
        };
        // SAFETY: the hook only calls `PgidRecord::write` and `ChildSetup::apply`, which
        // make async-signal-safe system calls on data prepared before the fork and
        // allocate nothing.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(r) = &record {
                    r.write()?;
                }
                s.apply()
            });
        }
        match cmd.spawn() {
            Ok(child) => {
                if let Some(line) = bind_line(plan, env, child.id()) {
                    say_to(setup.stderr, &line);
                }
                out.pgid.get_or_insert(child.id() as i32);
                out.children.push(child);
            }
            Err(e) => {
                out.error = Some((describe_spawn_error(&e, plan, &program), e.raw_os_error()));
                break;
            }
        }
    }
    out
}

/// The threads copying the run's streams, and the first output error they met.
struct Copying {
    finished: std::sync::mpsc::Receiver<()>,
    copiers: usize,
    terminal_done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    output_error: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
}

impl Copying {
    fn start(
        dir: &Path,
        plan: &Plan,
        outputs: Outputs,
        sources: Sources,
        pgid: Option<i32>,
    ) -> Copying {
        let (done_tx, finished) = std::sync::mpsc::channel();
        let output_error = std::sync::Arc::new(parking_lot::Mutex::new(None));
        let err_path = plan.stderr.clone().unwrap_or_else(|| plan.stdout.clone());
        let Sources {
            stdout: stdout_source,
            stderr: err_source,
            terminal,
        } = sources;
        let stdout = (
            stdout_source,
            outputs.user_out,
            plan.stdout.clone(),
            outputs.capture,
        );
        let stderr = err_source
            .zip(outputs.user_err)
            .map(|(r, u)| (r, u, err_path, outputs.err_capture));
        let mut copiers = 0;
        for (read, file, path, capture) in std::iter::once(stdout).chain(stderr) {
            let done = done_tx.clone();
            let sink = OutputSink {
                file,
                path,
                pgid,
                error: output_error.clone(),
            };
            std::thread::spawn(move || {
                copy_output(File::from(read), sink, &capture);
                let _ = done.send(());
            });
            copiers += 1;
        }
        let terminal_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(master) = &terminal {
            if let Ok(write) = master.try_clone() {
                std::thread::spawn(move || copy_input(File::from(write)));
            }
            if let Ok(fd) = master.try_clone() {
                let done = terminal_done.clone();
                let path = dir.join("winsize");
                std::thread::spawn(move || follow_resizes(fd, &path, &done));
            }
        }
        Copying {
            finished,
            copiers,
            terminal_done,
            output_error,
        }
    }

    /// Waits up to `policy::DRAIN_WAIT` for the copiers to reach end-of-file (a
    /// background process the job left behind may hold a pipe open), then returns the
    /// first output error.
    fn drain(self) -> Option<String> {
        let deadline = std::time::Instant::now() + policy::DRAIN_WAIT;
        for _ in 0..self.copiers {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if self.finished.recv_timeout(left).is_err() {
                break;
            }
        }
        self.terminal_done
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.output_error.lock().take()
    }
}

/// Carries out the lease guard's decisions (`policy::LeaseGuard`) until the run ends
/// or is stopped; returns why it stopped the run, if it did.
fn watch_lease(
    contact: std::path::PathBuf,
    pgid: i32,
    cgroup: Option<String>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Option<String>> {
    std::thread::spawn(move || {
        // Held open: the file is read through this descriptor even once its name is gone.
        let mut file = std::fs::File::open(&contact).ok();
        let mut guard = LeaseGuard::default();
        let group = Pid::from_raw(pgid);
        loop {
            if file.is_none() {
                file = std::fs::File::open(&contact).ok();
            }
            let read = file.as_ref().and_then(crate::contact::read_open);
            let alive = signal::killpg(group, None).is_ok();
            let run_done = done.load(std::sync::atomic::Ordering::SeqCst);
            match guard.next(crate::contact::boot_ms(), read, alive, run_done) {
                LeaseAction::Wait(d) => std::thread::park_timeout(d),
                LeaseAction::Terminate => {
                    let _ = signal::killpg(group, Signal::SIGTERM);
                    std::thread::sleep(policy::STOP_POLL);
                }
                LeaseAction::Kill(why) => {
                    let _ = signal::killpg(group, Signal::SIGKILL);
                    if let Some(cg) = &cgroup {
                        let _ = std::fs::write(format!("{cg}/cgroup.kill"), "1");
                    }
                    return Some(why);
                }
                LeaseAction::Finished => return None,
            }
        }
    })
}

/// Writes `line` to the tasks' stderr, which `streams` holds open until `into_sources`.
fn say_to(stderr: std::os::fd::RawFd, line: &str) {
    // SAFETY: the caller passes the tasks' stderr while `streams` still holds it open.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(stderr) };
    let _ = nix::unistd::write(fd, line.as_bytes());
}

/// Why the task could not start; `program` is the path the exec was given
/// ([`policy::program_path`]).
fn describe_spawn_error(e: &std::io::Error, plan: &Plan, program: &str) -> String {
    // Only a `#!` line's worth, and only on a failed start.
    let mut head = Vec::new();
    if let Ok(f) = std::fs::File::open(program) {
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 256), &mut head);
    }
    let first_line = head
        .split(|c| *c == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .unwrap_or_default();
    let missing = policy::interpreter(&first_line).filter(|i| !Path::new(i).exists());
    policy::spawn_error(
        e.raw_os_error(),
        &e.to_string(),
        &plan.argv[0],
        &plan.workdir,
        Path::new(&plan.workdir).is_dir(),
        missing,
    )
}
