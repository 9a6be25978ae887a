//! grun's terminal: its size, raw mode for `--pty`, and putting it back on the way out.

use gsched_types::steps::TermSize;
use std::io::IsTerminal;

/// This terminal's settings before raw mode, to put back on the way out.
static SAVED_TERMINAL: parking_lot::Mutex<Option<nix::sys::termios::Termios>> =
    parking_lot::Mutex::new(None);

pub fn restore_terminal() {
    if let Some(t) = SAVED_TERMINAL.lock().take() {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSADRAIN,
            &t,
        );
    }
}

nix::ioctl_read_bad!(get_window_size, libc::TIOCGWINSZ, nix::pty::Winsize);

/// This terminal's size (stdin's, else stdout's), or 24x80.
pub fn terminal_size() -> TermSize {
    use std::os::fd::AsRawFd;
    for fd in [std::io::stdin().as_raw_fd(), std::io::stdout().as_raw_fd()] {
        let mut ws = nix::pty::Winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `ws`, which outlives the call.
        if unsafe { get_window_size(fd, &mut ws) }.is_ok() && ws.ws_row > 0 && ws.ws_col > 0 {
            return TermSize {
                rows: ws.ws_row,
                cols: ws.ws_col,
            };
        }
    }
    TermSize { rows: 24, cols: 80 }
}

/// Puts this terminal in raw mode (keys go to the task as typed), remembering how it was.
pub fn raw_mode() {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return;
    }
    if let Ok(saved) = tcgetattr(&stdin) {
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        if tcsetattr(&stdin, SetArg::TCSADRAIN, &raw).is_ok() {
            *SAVED_TERMINAL.lock() = Some(saved);
        }
    }
}
