//! `gagentd supervise DIR`: the small root process that owns one node's step of a job.
//!
//! The agent starts it in its own session, so it outlives agent restarts. It opens the
//! job's output files with the owner's file-system identity (so they are owned by the user
//! and created with the user's rights) and starts every task of the step in one process
//! group; each task, between fork and exec, joins the step's cgroup, takes the owner's
//! groups and uid and enters the working directory. The tasks write into pipes that the
//! supervisor copies both to the user's files and to `DIR/output.log`, this node's private
//! copy, which the agent scans for failure evidence: on a shared file system every node of
//! a job appends to the same output file, and another node's lines must not be blamed on
//! this one. It records the process group in `DIR/pgid` and, when all tasks have ended, the
//! outcome in `DIR/exit.json`, which the agent (current or restarted) reports.
//!
//! A `grun` task 0 reads the input its caller sends: the supervisor's own stdin, a pipe
//! from the agent, becomes the task's stdin, or with `grun --pty` is copied into a
//! pseudo-terminal that is the task's stdin, stdout, stderr and controlling terminal
//! (the task leads its own session there, so Ctrl-C reaches it; `DIR/winsize` resizes it).

use crate::layout::{StepFiles, write_private};
use gsched_launch::plan::{Plan, TaskInput};
use nix::fcntl::OFlag;
use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Pid, Uid};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The private copy of the step's output is cut back to empty when it grows past this.
const CAPTURE_LIMIT: u64 = 32 << 20;

/// How the step ended, written to `DIR/exit.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when no task could be started (bad directory, unknown user...).
    #[serde(default)]
    pub launch_error: Option<String>,
    #[serde(default)]
    pub tasks: Vec<(Option<i32>, Option<i32>)>,
    /// Set when the supervisor stopped the step because the controllers had been silent
    /// past the node's lease (see `contact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expired: Option<String>,
    /// Set when the step was stopped because its output could not be written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
}

fn record(dir: &Path, rec: &ExitRecord) {
    let _ = write_private(
        &dir.join("exit.json"),
        &serde_json::to_vec(rec).unwrap_or_default(),
    );
}

/// Everything the child needs between fork and exec, prepared before forking.
struct ChildSetup {
    cgroup_procs: Option<CString>,
    uid: Option<Uid>,
    gid: Option<Gid>,
    groups: Vec<Gid>,
    workdir: CString,
    umask: Option<Mode>,
    stdout: RawFd,
    stderr: RawFd,
    stdin: ChildStdin,
}

/// Where a task's stdin comes from.
#[derive(Clone, Copy)]
enum ChildStdin {
    Null,
    /// The supervisor's own (the input its `grun` sends).
    Inherit,
    /// This pseudo-terminal's slave, which is also its stdout, stderr and controlling
    /// terminal, in a session of its own.
    Pty(RawFd),
}

nix::ioctl_write_int_bad!(set_controlling_tty, libc::TIOCSCTTY);
nix::ioctl_write_ptr_bad!(set_window_size, libc::TIOCSWINSZ, nix::pty::Winsize);

fn winsize(rows: u16, cols: u16) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("'{s}' contains a NUL byte"))
}

/// Signals the supervisor ignores (so a Ctrl-C or a closed terminal does not stop it);
/// tasks get them back at their default disposition.
const IGNORED_BY_SUPERVISOR: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

impl ChildSetup {
    /// Runs in the child between fork and exec, so it makes only async-signal-safe
    /// system calls (nix's wrappers of them, on data prepared before the fork) and
    /// allocates nothing.
    fn apply(&self) -> std::io::Result<()> {
        if let Some(procs) = &self.cgroup_procs
            && let Ok(fd) = nix::fcntl::open(procs.as_c_str(), OFlag::O_WRONLY, Mode::empty())
        {
            let _ = nix::unistd::write(&fd, b"0");
        }
        // Dispositions the supervisor set and the signal mask are inherited across exec:
        // give the job what a login shell would have, so it can trap SIGTERM (the warning
        // before SIGKILL) and be stopped by Ctrl-C.
        for sig in IGNORED_BY_SUPERVISOR {
            // SAFETY: SIG_DFL installs no handler; this runs single-threaded after fork.
            unsafe { signal::signal(sig, SigHandler::SigDfl) }?;
        }
        signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
        if let Some(gid) = self.gid {
            nix::unistd::setgroups(&self.groups)?;
            nix::unistd::setgid(gid)?;
        }
        if let Some(uid) = self.uid {
            nix::unistd::setuid(uid)?;
            // Dropping root must be final: a process that can get root back is refused.
            if nix::unistd::setuid(Uid::from_raw(0)).is_ok() && !uid.is_root() {
                return Err(std::io::Error::other("setuid did not drop root"));
            }
        }
        if let Some(mask) = self.umask {
            nix::sys::stat::umask(mask);
        }
        nix::unistd::chdir(self.workdir.as_c_str())?;
        match self.stdin {
            ChildStdin::Pty(tty) => {
                nix::unistd::setsid()?;
                // SAFETY: `tty` is the open slave of the step's pseudo-terminal (kept
                // open by `run` through the spawn); TIOCSCTTY takes an int argument.
                unsafe { set_controlling_tty(tty, 0) }?;
                nix::unistd::dup2_stdin(borrow(tty))?;
                nix::unistd::dup2_stdout(borrow(tty))?;
                nix::unistd::dup2_stderr(borrow(tty))?;
                return Ok(());
            }
            ChildStdin::Inherit => {}
            ChildStdin::Null => {
                if let Ok(devnull) = nix::fcntl::open(c"/dev/null", OFlag::O_RDONLY, Mode::empty())
                {
                    nix::unistd::dup2_stdin(&devnull)?;
                }
            }
        }
        nix::unistd::dup2_stdout(borrow(self.stdout))?;
        nix::unistd::dup2_stderr(borrow(self.stderr))?;
        Ok(())
    }
}

/// A descriptor the supervisor keeps open for as long as the child setup runs.
fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: `fd` is a pipe end owned by `run`, which keeps it open until every task
    // has been spawned (the setup that borrows it runs inside those spawns).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Runs the step described in `dir/plan.json`; never returns an error to the caller, the
/// outcome goes to `dir/exit.json`.
pub fn supervise(dir: &Path) -> i32 {
    for sig in IGNORED_BY_SUPERVISOR {
        // SAFETY: SIG_IGN installs no handler; this runs before any thread is started.
        let _ = unsafe { signal::signal(sig, SigHandler::SigIgn) };
    }
    let plan: Plan = match std::fs::read(dir.join("plan.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            record(
                dir,
                &ExitRecord {
                    code: None,
                    signal: None,
                    launch_error: Some(format!("cannot read the step plan: {e}")),
                    tasks: vec![],
                    lease_expired: None,
                    output_error: None,
                },
            );
            return 1;
        }
    };
    match run(dir, &plan) {
        Ok(rec) => {
            record(dir, &rec);
            0
        }
        Err(e) => {
            record(
                dir,
                &ExitRecord {
                    code: None,
                    signal: None,
                    launch_error: Some(e),
                    tasks: vec![],
                    lease_expired: None,
                    output_error: None,
                },
            );
            1
        }
    }
}

/// `gagentd notice DIR TEXT`: appends a line to the output file of the step in `DIR` (its
/// error file when it has one), opened with the job user's identity as the supervisor
/// opens it, so a link the user planted cannot make root write elsewhere.
pub fn append_notice(dir: &Path, text: &str) -> Result<(), String> {
    let plan: Plan = std::fs::read(dir.join("plan.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot read the step plan in {}: {e}", dir.display()))?;
    let owner = if crate::identity::is_root() {
        plan.uid.zip(plan.gid)
    } else {
        None
    };
    let umask = plan.umask.map(|m| Mode::from_bits_truncate(m & 0o777));
    let path = plan.stderr.as_deref().unwrap_or(&plan.stdout);
    let mut f = open_as(path, owner, &plan.groups, umask)?;
    let line = format!("{}\n", text.trim_end());
    f.write_all(line.as_bytes())
        .map_err(|e| format!("cannot write to {path}: {e}"))
}

/// The private copy of stderr when a plan keeps the streams apart (`Plan::split_capture`).
pub const STDERR_CAPTURE: &str = "stderr.log";

fn run(dir: &Path, plan: &Plan) -> Result<ExitRecord, String> {
    let root = crate::identity::is_root();
    let owner = if root { plan.uid.zip(plan.gid) } else { None };
    let umask = plan.umask.map(|m| Mode::from_bits_truncate(m & 0o777));
    let user_out = open_as(&plan.stdout, owner, &plan.groups, umask)?;
    let user_err = plan
        .stderr
        .as_deref()
        .map(|e| open_as(e, owner, &plan.groups, umask))
        .transpose()?;
    if plan.truncate_output {
        // Kept open for appending, as the tasks' copies write concurrently.
        let files = std::iter::once(&user_out).chain(user_err.as_ref());
        for f in files.filter(|f| f.metadata().is_ok_and(|m| m.is_file())) {
            f.set_len(0)
                .map_err(|e| format!("cannot empty the output file: {e}"))?;
        }
    }
    let capture = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(StepFiles(dir.to_path_buf()).capture())
        .map_err(|e| {
            format!(
                "cannot create the step's output copy in {}: {e}",
                dir.display()
            )
        })?;
    let (out_r, out_w) = pipe()?;
    let err_pipe = if user_err.is_some() {
        Some(pipe()?)
    } else {
        None
    };
    let pty = match plan.input {
        TaskInput::Pty(size) => {
            let p = nix::pty::openpty(&winsize(size.rows, size.cols), None)
                .map_err(|e| format!("cannot open a pseudo-terminal for the task: {e}"))?;
            if let Some((uid, _)) = owner {
                let _ = nix::unistd::fchown(&p.slave, Some(Uid::from_raw(uid)), None);
            }
            Some(p)
        }
        _ => None,
    };
    let setup = ChildSetup {
        cgroup_procs: plan
            .cgroup
            .as_ref()
            .map(|c| cstr(&format!("{c}/cgroup.procs")))
            .transpose()?,
        uid: owner.map(|o| Uid::from_raw(o.0)),
        gid: owner.map(|o| Gid::from_raw(o.1)),
        groups: plan.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
        workdir: cstr(&plan.workdir)?,
        umask,
        stdout: out_w.as_raw_fd(),
        stderr: err_pipe
            .as_ref()
            .map_or(out_w.as_raw_fd(), |(_, w)| w.as_raw_fd()),
        stdin: match (&pty, plan.input) {
            (Some(p), _) => ChildStdin::Pty(p.slave.as_raw_fd()),
            (None, TaskInput::Pipe) => ChildStdin::Inherit,
            (None, _) => ChildStdin::Null,
        },
    };
    let setup = std::sync::Arc::new(setup);
    let mut children = Vec::new();
    let mut pgid: Option<i32> = None;
    let mut spawn_error = None;
    for env in &plan.tasks {
        let mut cmd = Command::new(&plan.argv[0]);
        cmd.args(&plan.argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        if pty.is_none() {
            cmd.process_group(pgid.unwrap_or(0));
        }
        let s = setup.clone();
        // SAFETY: the hook only calls `ChildSetup::apply`, which makes async-signal-safe
        // system calls on data prepared before the fork and allocates nothing.
        unsafe {
            cmd.pre_exec(move || s.apply());
        }
        match cmd.spawn() {
            Ok(child) => {
                pgid.get_or_insert(child.id() as i32);
                children.push(child);
            }
            Err(e) => {
                spawn_error = Some(describe_spawn_error(&e, plan));
                break;
            }
        }
    }
    // Only the tasks hold the write ends now: the copiers see end-of-file once they exit.
    drop(setup);
    drop(out_w);
    let terminal = pty.map(|p| {
        drop(p.slave);
        p.master
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut copiers = 0;
    let capture = std::sync::Arc::new(parking_lot::Mutex::new(capture));
    let err_capture = if plan.split_capture {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(STDERR_CAPTURE))
            .map_err(|e| format!("cannot create {STDERR_CAPTURE} in {}: {e}", dir.display()))?;
        std::sync::Arc::new(parking_lot::Mutex::new(f))
    } else {
        capture.clone()
    };
    let output_error = std::sync::Arc::new(parking_lot::Mutex::new(None));
    let err_path = plan.stderr.clone().unwrap_or_else(|| plan.stdout.clone());
    // A task on a terminal writes its output there, not into the pipe.
    let stdout_source = match &terminal {
        Some(master) => master
            .try_clone()
            .map_err(|e| format!("cannot read the task's terminal: {e}"))?,
        None => out_r,
    };
    for (read, user, path, capture) in std::iter::once((
        stdout_source,
        user_out,
        plan.stdout.clone(),
        capture.clone(),
    ))
    .chain(
        err_pipe
            .map(|(r, w)| {
                drop(w);
                r
            })
            .zip(user_err)
            .map(|(r, u)| (r, u, err_path.clone(), err_capture.clone())),
    ) {
        let done = done_tx.clone();
        let sink = OutputSink {
            file: user,
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
    if let Some(e) = spawn_error {
        if let Some(g) = pgid {
            let _ = signal::killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
        for mut c in children {
            let _ = c.wait();
        }
        return Err(e);
    }
    if let Some(g) = pgid {
        let _ = write_private(&dir.join("pgid"), g.to_string().as_bytes());
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lease = match (&plan.contact_file, pgid) {
        (Some(f), Some(g)) => Some(watch_lease(
            std::path::PathBuf::from(f),
            g,
            plan.cgroup.clone(),
            done.clone(),
        )),
        _ => None,
    };
    let mut tasks = Vec::new();
    for mut c in children {
        let status = c
            .wait()
            .map_err(|e| format!("waiting for a task failed: {e}"))?;
        tasks.push((status.code(), status.signal()));
    }
    // A background process the job left behind may keep a pipe open: give the copiers a
    // moment to drain what the tasks wrote, then report without waiting for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    for _ in 0..copiers {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .is_err()
        {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    terminal_done.store(true, std::sync::atomic::Ordering::SeqCst);
    // Wake the lease watcher from its wait, or the step's exit is reported up to one
    // check interval late.
    let lease_expired = lease
        .and_then(|w| {
            w.thread().unpark();
            w.join().ok()
        })
        .flatten();
    let failing = tasks
        .iter()
        .find(|(c, s)| s.is_some() || c.is_some_and(|c| c != 0))
        .copied()
        .or(tasks.first().copied())
        .unwrap_or((Some(0), None));
    let output_error = output_error.lock().take();
    Ok(ExitRecord {
        code: failing.0,
        signal: failing.1,
        launch_error: None,
        tasks,
        lease_expired,
        output_error,
    })
}

/// Stops the step (SIGTERM, SIGKILL two seconds later) if the controllers stay silent
/// past the node's lease while it runs; returns why it did, if it did.
fn watch_lease(
    contact: std::path::PathBuf,
    pgid: i32,
    cgroup: Option<String>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Option<String>> {
    std::thread::spawn(move || {
        // Held open: the file is read through this descriptor even once its name is gone.
        let mut file = std::fs::File::open(&contact).ok();
        let mut view = crate::contact::LeaseView::default();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            if file.is_none() {
                file = std::fs::File::open(&contact).ok();
            }
            view.observe(file.as_ref().and_then(crate::contact::read_open));
            if let Some(silent) = view.expired(crate::contact::boot_ms()) {
                let why = format!(
                    "no word from the controllers for {:.0} s, past this node's lease: the step was stopped so that the job cannot run twice",
                    silent.as_secs_f64()
                );
                let group = Pid::from_raw(pgid);
                let _ = signal::killpg(group, Signal::SIGTERM);
                let grace = std::time::Instant::now();
                while grace.elapsed() < Duration::from_secs(2)
                    && signal::killpg(group, None).is_ok()
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = signal::killpg(group, Signal::SIGKILL);
                if let Some(cg) = &cgroup {
                    let _ = std::fs::write(format!("{cg}/cgroup.kill"), "1");
                }
                return Some(why);
            }
            std::thread::park_timeout(Duration::from_millis(500));
        }
        None
    })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| format!("cannot create a pipe for the step's output: {e}"))
}

/// Opens (creating, appending) an output file with the job owner's file-system identity
/// and umask, so permissions are checked, and the file is created, as that user.
fn open_as(
    path: &str,
    owner: Option<(u32, u32)>,
    groups: &[u32],
    umask: Option<Mode>,
) -> Result<File, String> {
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    };
    let saved_umask = umask.map(nix::sys::stat::umask);
    let result = match owner {
        None => open(),
        Some((uid, gid)) => as_owner(uid, gid, groups, open),
    };
    if let Some(old) = saved_umask {
        nix::sys::stat::umask(old);
    }
    result.map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) => format!("permission denied opening the output file {path} as the job's user (check the directory's permissions)"),
        Some(libc::ENOENT) => format!("cannot open the output file {path}: its directory does not exist on this node"),
        _ => format!("cannot open the output file {path}: {e}"),
    })
}

/// Runs `f` with the file-system identity (fsuid, fsgid, groups) of `uid`/`gid`, and
/// restores root's afterwards. The supervisor is single-threaded while it does this.
fn as_owner(
    uid: u32,
    gid: u32,
    groups: &[u32],
    f: impl FnOnce() -> std::io::Result<File>,
) -> std::io::Result<File> {
    let saved = nix::unistd::getgroups()?;
    let wanted: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&wanted)?;
    // setfsuid/setfsgid report the previous value, not errors: asking again tells
    // whether the change took.
    nix::unistd::setfsgid(Gid::from_raw(gid));
    nix::unistd::setfsuid(Uid::from_raw(uid));
    let took = nix::unistd::setfsuid(Uid::from_raw(uid)) == Uid::from_raw(uid)
        && nix::unistd::setfsgid(Gid::from_raw(gid)) == Gid::from_raw(gid);
    let result = if took {
        f()
    } else {
        Err(std::io::Error::other(format!(
            "could not take the file-system identity of uid {uid}"
        )))
    };
    nix::unistd::setfsuid(Uid::from_raw(0));
    nix::unistd::setfsgid(Gid::from_raw(0));
    nix::unistd::setgroups(&saved)?;
    result
}

/// Where a task stream goes: the user's output file, and whom to stop when it cannot be
/// written.
struct OutputSink {
    file: File,
    path: String,
    pgid: Option<i32>,
    /// The first write error of any stream of the step.
    error: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
}

impl OutputSink {
    /// Writes a chunk; on the first failure stops the step (SIGTERM, SIGKILL 2 s later):
    /// a job whose output (and likely its checkpoints) cannot be written should end with
    /// that reason, not run on blind.
    fn write(&mut self, chunk: &[u8]) {
        let Err(e) = self.file.write_all(chunk) else {
            return;
        };
        let mut first = self.error.lock();
        if first.is_some() {
            return;
        }
        *first = Some(format!(
            "cannot write the job's output to {}: {e}; the step was stopped (free space or fix the file system, then resubmit)",
            self.path
        ));
        if let Some(g) = self.pgid {
            let group = Pid::from_raw(g);
            let _ = signal::killpg(group, Signal::SIGTERM);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                let _ = signal::killpg(group, Signal::SIGKILL);
            });
        }
    }
}

/// Copies a task stream to the user's file and to the private copy, until end-of-file.
/// Copies the supervisor's stdin (what `grun` sends) into the task's terminal.
fn copy_input(mut to: File) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Applies the sizes `grun` sends (`DIR/winsize`, "ROWS COLS") to the task's terminal;
/// the kernel tells the task with SIGWINCH.
fn follow_resizes(master: OwnedFd, path: &Path, done: &std::sync::atomic::AtomicBool) {
    let mut last = String::new();
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        if let Ok(text) = std::fs::read_to_string(path)
            && text != last
        {
            let mut it = text.split_whitespace().map(|v| v.parse::<u16>());
            if let (Some(Ok(rows)), Some(Ok(cols))) = (it.next(), it.next()) {
                let ws = winsize(rows, cols);
                // SAFETY: `master` is the open master of the task's terminal; TIOCSWINSZ
                // reads one winsize from the pointer, which outlives the call.
                let _ = unsafe { set_window_size(master.as_raw_fd(), &ws) };
            }
            last = text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn copy_output(mut from: File, mut user: OutputSink, capture: &parking_lot::Mutex<File>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        user.write(&buf[..n]);
        {
            let mut c = capture.lock();
            if c.stream_position().unwrap_or(0) > CAPTURE_LIMIT {
                let _ = c.set_len(0);
            }
            let _ = c.write_all(&buf[..n]);
        }
    }
}

fn describe_spawn_error(e: &std::io::Error, plan: &Plan) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) if !Path::new(&plan.workdir).is_dir() => format!(
            "working directory {} does not exist on this node",
            plan.workdir
        ),
        Some(libc::EACCES) => format!(
            "permission denied starting {} in {} (check the working directory and output file permissions for the job's user)",
            plan.argv[0], plan.workdir
        ),
        Some(libc::ENOENT) => format!(
            "cannot start {}: no such file (or the output directory does not exist)",
            plan.argv[0]
        ),
        _ => format!("cannot start {}: {e}", plan.argv[0]),
    }
}
