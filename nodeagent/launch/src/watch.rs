//! Failure classification from what a step leaves behind: log lines (PyTorch NCCL watchdog
//! and heartbeat monitor, NCCL warnings and remote errors, CUDA out of memory, torchrun's
//! ChildFailedError summary), torchrun's error file, and the exit status.
//!
//! Lines marked `fatal` mean the job cannot make progress any more: the agent reports them
//! at once so the whole gang is stopped in seconds, instead of waiting for every rank to
//! time out or for PyTorch to finish dumping debug information.

use crate::transport::missing_library;
use gsched_types::failure::FailureKind;
use serde::{Deserialize, Serialize};

/// A log line that explains (or predicts) a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFinding {
    pub kind: FailureKind,
    pub line: String,
    /// Stop the gang now rather than waiting for the process to exit.
    pub fatal: bool,
}

const MAX_EVIDENCE: usize = 400;

fn evidence(line: &str) -> String {
    let t = line.trim();
    if t.len() <= MAX_EVIDENCE {
        return t.to_string();
    }
    let mut end = MAX_EVIDENCE;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &t[..end])
}

/// Classifies one line of a job's output. Most lines return `None`.
pub fn classify_line(line: &str) -> Option<LogFinding> {
    let rules: &[(&str, FailureKind, bool)] = &[
        (
            "Watchdog caught collective operation timeout",
            FailureKind::NcclTimeout,
            true,
        ),
        (
            "Heartbeat monitor timed out",
            FailureKind::NcclTimeout,
            true,
        ),
        ("watchdog got stuck for", FailureKind::NcclTimeout, true),
        (
            "Future for ProcessGroup abort timed out",
            FailureKind::NcclTimeout,
            true,
        ),
        (
            "collective operation timeout",
            FailureKind::NcclTimeout,
            true,
        ),
        ("ncclRemoteError", FailureKind::NcclError, true),
        (
            "remote process exited or there was a network error",
            FailureKind::NcclError,
            true,
        ),
        (
            "Connection closed by remote peer",
            FailureKind::NcclError,
            true,
        ),
        ("unhandled system error", FailureKind::NcclError, true),
        (
            "NCCL communicator was aborted",
            FailureKind::NcclError,
            true,
        ),
        ("ncclSystemError", FailureKind::NcclError, true),
        ("ncclInternalError", FailureKind::NcclError, true),
        // An HCA's async events: the link or the adapter failed; NCCL only warns and the
        // ranks hang, so the job is stopped here (this node's HCA or cable is suspect).
        ("Got async event : port error", FailureKind::NcclError, true),
        (
            "Got async event : local catastrophic error",
            FailureKind::NcclError,
            true,
        ),
        (
            "Got async event : local access violation",
            FailureKind::NcclError,
            true,
        ),
        (
            "Got async event : device fatal",
            FailureKind::NcclError,
            true,
        ),
        ("CUDA out of memory", FailureKind::Oom, true),
        ("OutOfMemoryError", FailureKind::Oom, true),
        ("CUDA error: out of memory", FailureKind::Oom, true),
        ("NCCL WARN", FailureKind::NcclError, false),
    ];
    for (needle, kind, fatal) in rules {
        if line.contains(needle) {
            return Some(LogFinding {
                kind: kind.clone(),
                line: evidence(line),
                fatal: *fatal,
            });
        }
    }
    // NCCL 2.0-2.2 WARN lines have no "NCCL" token: "include/socket.h:185 WARN ...".
    if old_nccl_warn(line) {
        return Some(LogFinding {
            kind: FailureKind::NcclError,
            line: evidence(line),
            fatal: false,
        });
    }
    // torchrun's agent noticing a dead worker: "failed (exitcode: -9) local_rank: 1 ...".
    // The rank is gone, so the step can no longer make progress.
    if let Some(pos) = line.find("failed (exitcode: ") {
        let rest = &line[pos + 18..];
        let code: Option<i32> = rest.split(')').next().and_then(|c| c.trim().parse().ok());
        if let Some(code) = code {
            let kind = if code < 0 {
                FailureKind::Signal { signal: -code }
            } else {
                FailureKind::ExitCode { code }
            };
            return Some(LogFinding {
                kind,
                line: evidence(line),
                fatal: true,
            });
        }
    }
    if line.contains("ChildFailedError")
        || (line.contains("received by PID") && line.contains("Signal"))
    {
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: false,
        });
    }
    None
}

/// A WARN line of an early NCCL: a `path/file.ext:LINE WARN` source position before it.
fn old_nccl_warn(line: &str) -> bool {
    let Some(pos) = line.find(" WARN ") else {
        return false;
    };
    let before = line[..pos].rsplit(' ').next().unwrap_or("");
    let Some((file, num)) = before.rsplit_once(':') else {
        return false;
    };
    !num.is_empty()
        && num.chars().all(|c| c.is_ascii_digit())
        && [".h", ".cc", ".cu", ".cpp", ".c"]
            .iter()
            .any(|ext| file.ends_with(ext))
}

/// Lines that only echo a failure seen first elsewhere in the same log: a rank's own
/// "unhandled system error" after the WARN that says why, a peer hanging up after a
/// connect failed.
fn is_echo(line: &str) -> bool {
    [
        "unhandled system error",
        "Connection closed by remote peer",
        "remote process exited or there was a network error",
        "ncclSystemError",
        "ncclInternalError",
        "ncclRemoteError",
        "NCCL communicator was aborted",
    ]
    .iter()
    .any(|n| line.contains(n))
}

/// The evidence for a fatal finding: the line itself, or, when it only echoes an earlier
/// failure, its cause logged before it, then the line. A library NCCL needs and could not
/// load (libnvidia-ml, libcuda) is named as the cause; otherwise the first NCCL WARN (a
/// refused or aborted connect). A missing libibverbs is not a cause: NCCL then uses
/// sockets (the transport warning says so).
pub fn first_cause(earlier: &[LogFinding], fatal: &LogFinding) -> String {
    if !is_echo(&fatal.line) {
        return fatal.line.clone();
    }
    let candidates = || {
        earlier.iter().filter(|f| {
            !f.fatal
                && f.kind == FailureKind::NcclError
                && f.line != fatal.line
                && missing_library(&f.line) != Some("libibverbs")
        })
    };
    if let Some((lib, cause)) = candidates().find_map(|f| missing_library(&f.line).map(|l| (l, f)))
    {
        return evidence(&format!(
            "{lib} could not be loaded, so NCCL cannot run (the NVIDIA driver's user-space libraries are missing from the job's environment or container): {} (then: {})",
            cause.line, fatal.line
        ));
    }
    match candidates().next() {
        Some(cause) => evidence(&format!("{} (then: {})", cause.line, fatal.line)),
        None => fatal.line.clone(),
    }
}

/// The message torchrun's `@record` wrote to `TORCHELASTIC_ERROR_FILE`, in either of its
/// JSON formats.
pub fn parse_error_file(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let msg = v.get("message")?;
    let text = match msg {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)?,
        _ => return None,
    };
    Some(evidence(text.lines().next().unwrap_or(&text)))
}

/// Signal names for evidence text.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        7 => "SIGBUS",
        8 => "SIGFPE",
        _ => "signal",
    }
}

/// Explains a step's end. `None` for a clean exit. Log findings outrank the error file,
/// which outranks the bare status: "NCCL watchdog timeout" says more than "exit code 1".
pub fn classify_exit(
    code: Option<i32>,
    signal: Option<i32>,
    findings: &[LogFinding],
    error_file: Option<&str>,
    oom_killed: bool,
) -> Option<(FailureKind, String)> {
    let clean = code == Some(0) && signal.is_none();
    if clean && !oom_killed {
        return None;
    }
    if oom_killed {
        return Some((
            FailureKind::Oom,
            "the kernel OOM killer stopped the step (memory limit reached)".into(),
        ));
    }
    if let Some((i, best)) = findings
        .iter()
        .enumerate()
        .filter(|(_, f)| f.fatal)
        .max_by_key(|(_, f)| f.kind.precedence())
    {
        return Some((best.kind.clone(), first_cause(&findings[..i], best)));
    }
    let status = match (code, signal) {
        (_, Some(s)) => (
            FailureKind::Signal { signal: s },
            format!("killed by {} ({s})", signal_name(s)),
        ),
        (Some(c), _) if c > 128 && c < 160 => (
            FailureKind::Signal { signal: c - 128 },
            format!("exited with {c} ({} in a child)", signal_name(c - 128)),
        ),
        (Some(c), _) => (
            FailureKind::ExitCode { code: c },
            format!("exited with code {c}"),
        ),
        (None, None) => (FailureKind::LaunchFailed, "ended without a status".into()),
    };
    if let Some(msg) = error_file {
        return Some((
            status.0,
            format!("{}; torchrun error file: {msg}", status.1),
        ));
    }
    if let Some(f) = findings.iter().rev().find(|f| !f.fatal) {
        return Some((
            status.0,
            format!("{}; last error line: {}", status.1, f.line),
        ));
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_file_formats() {
        let old = r#"{"message": {"message": "RuntimeError: boom\nmore", "extraInfo": {"py_callstack": "...", "timestamp": "1"}}}"#;
        assert_eq!(parse_error_file(old).as_deref(), Some("RuntimeError: boom"));
        let new = r#"{"message": "ValueError: x", "timestamp": 5}"#;
        assert_eq!(parse_error_file(new).as_deref(), Some("ValueError: x"));
        assert_eq!(parse_error_file("not json"), None);
    }

    #[test]
    fn status_classification() {
        assert_eq!(classify_exit(Some(0), None, &[], None, false), None);
        assert_eq!(
            classify_exit(None, Some(9), &[], None, false).unwrap().0,
            FailureKind::Signal { signal: 9 }
        );
        assert_eq!(
            classify_exit(Some(137), None, &[], None, false).unwrap().0,
            FailureKind::Signal { signal: 9 }
        );
        assert_eq!(
            classify_exit(Some(0), None, &[], None, true).unwrap().0,
            FailureKind::Oom
        );
        let finding = classify_line(
            "[rank0]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2)",
        )
        .unwrap();
        assert_eq!(
            classify_exit(Some(1), None, &[finding], None, false)
                .unwrap()
                .0,
            FailureKind::NcclTimeout
        );
    }
}
