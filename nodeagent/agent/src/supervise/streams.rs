//! The threads that move a step's bytes: task output to the user's file and the
//! private copy, the caller's input into the task's terminal, terminal resizes.

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// The private copy of the step's output is cut back to empty when it grows past this.
const CAPTURE_LIMIT: u64 = 32 << 20;

/// Where a task stream goes: the user's output file, and whom to stop when it cannot be
/// written.
pub(super) struct OutputSink {
    pub(super) file: File,
    pub(super) path: String,
    pub(super) pgid: Option<i32>,
    /// The first write error of any stream of the step.
    pub(super) error: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
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
        *first = Some(super::policy::output_error(&self.path, &e.to_string()));
        if let Some(g) = self.pgid {
            let group = Pid::from_raw(g);
            let _ = signal::killpg(group, Signal::SIGTERM);
            std::thread::spawn(move || {
                std::thread::sleep(super::policy::STOP_GRACE);
                let _ = signal::killpg(group, Signal::SIGKILL);
            });
        }
    }
}

/// Copies the supervisor's stdin (what `grun` sends) into the task's terminal.
pub(super) fn copy_input(mut to: File) {
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
pub(super) fn follow_resizes(master: OwnedFd, path: &Path, done: &std::sync::atomic::AtomicBool) {
    let mut last = String::new();
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        if let Ok(text) = std::fs::read_to_string(path)
            && text != last
        {
            let mut it = text.split_whitespace().map(|v| v.parse::<u16>());
            if let (Some(Ok(rows)), Some(Ok(cols))) = (it.next(), it.next()) {
                let ws = super::child::winsize(rows, cols);
                // SAFETY: `master` is the open master of the task's terminal; TIOCSWINSZ
                // reads one winsize from the pointer, which outlives the call.
                let _ = unsafe { super::child::set_window_size(master.as_raw_fd(), &ws) };
            }
            last = text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies a task stream to the user's file and to the private copy, until end-of-file.
pub(super) fn copy_output(
    mut from: File,
    mut user: OutputSink,
    capture: &parking_lot::Mutex<File>,
) {
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
