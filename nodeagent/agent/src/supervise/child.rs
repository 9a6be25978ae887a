//! What a task's process does between fork and exec (cgroup, signals, identity,
//! directory, terminal, streams), prepared before the fork.

use nix::fcntl::OFlag;
use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::os::fd::{BorrowedFd, RawFd};

/// Everything the child needs between fork and exec, prepared before forking.
#[derive(Clone)]
pub(super) struct ChildSetup {
    pub(super) cgroup_procs: Option<CString>,
    pub(super) uid: Option<Uid>,
    pub(super) gid: Option<Gid>,
    pub(super) groups: Vec<Gid>,
    pub(super) workdir: CString,
    pub(super) umask: Option<Mode>,
    pub(super) stdout: RawFd,
    pub(super) stderr: RawFd,
    pub(super) stdin: ChildStdin,
    /// The CPUs the task is bound to (`srun --cpu-bind`); absent: not bound.
    pub(super) affinity: Option<nix::sched::CpuSet>,
    /// The soft limits it takes from where it was submitted.
    pub(super) limits: Vec<super::rlimits::Setting>,
}

/// Where a task's stdin comes from.
#[derive(Clone, Copy)]
pub(super) enum ChildStdin {
    Null,
    /// The supervisor's own (the input its `grun` sends).
    Inherit,
    /// This pseudo-terminal's slave, which is also its stdout, stderr and controlling
    /// terminal, in a session of its own.
    Pty(RawFd),
    /// This open file (`sbatch --input`).
    File(RawFd),
}

nix::ioctl_write_int_bad!(set_controlling_tty, libc::TIOCSCTTY);
nix::ioctl_write_ptr_bad!(
    /// Sets a terminal's window size.
    set_window_size,
    libc::TIOCSWINSZ,
    nix::pty::Winsize
);

/// The run's process group recorded by its leader, the first task, between fork and exec:
/// a stop that comes as soon as any task can print finds the group to signal (the
/// supervisor learns the pid only once the program has started, which may be later).
pub(super) struct PgidRecord {
    tmp: CString,
    file: CString,
}

impl PgidRecord {
    pub(super) fn new(file: &std::path::Path) -> Result<PgidRecord, String> {
        let text = file.to_string_lossy();
        Ok(PgidRecord {
            tmp: cstr(&format!("{text}.new"))?,
            file: cstr(&text)?,
        })
    }

    /// Writes the caller's process group to a new file and renames it over the record, so
    /// a reader sees the whole number or none. Async-signal-safe: the number is formatted
    /// on the stack, and the rest are system calls.
    pub(super) fn write(&self) -> std::io::Result<()> {
        let mut digits = [0u8; 20];
        let mut n = nix::unistd::getpgrp().as_raw().unsigned_abs();
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let fd = nix::fcntl::open(
            self.tmp.as_c_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        nix::unistd::write(&fd, &digits[at..])?;
        drop(fd);
        // SAFETY: both paths are NUL-terminated strings owned by `self` for the call.
        if unsafe { libc::rename(self.tmp.as_ptr(), self.file.as_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

pub(super) fn winsize(rows: u16, cols: u16) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

pub(super) fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("'{s}' contains a NUL byte"))
}

/// Signals the supervisor ignores (so a Ctrl-C or a closed terminal does not stop it);
/// tasks get them back at their default disposition.
pub(super) const IGNORED_BY_SUPERVISOR: [Signal; 3] =
    [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

impl ChildSetup {
    /// Runs in the child between fork and exec, so it makes only async-signal-safe
    /// system calls (nix's wrappers of them, on data prepared before the fork) and
    /// allocates nothing.
    pub(super) fn apply(&self) -> std::io::Result<()> {
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
        super::rlimits::apply(&self.limits);
        if let Some(set) = &self.affinity {
            // CPUs this machine does not have (a fake node's) leave the task unbound.
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set);
        }
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
            ChildStdin::File(fd) => {
                nix::unistd::dup2_stdin(borrow(fd))?;
            }
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
