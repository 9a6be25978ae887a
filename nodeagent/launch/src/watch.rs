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
        ("unhandled cuda error", FailureKind::NcclError, true),
        ("ncclUnhandledCudaError", FailureKind::NcclError, true),
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
        // A CUDA call failed (an illegal address, a launch failure): the process's CUDA
        // context is gone, so its rank is.
        ("CUDA error: ", FailureKind::CudaError, true),
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
    if is_nccl_warn(line) {
        // A WARN that names a failure NCCL never recovers from is fatal by itself; any
        // other becomes fatal when NCCL returns an error after it (`unwinds`).
        let fatal = nccl_cause(line).is_some_and(NcclCause::fatal_alone);
        return Some(LogFinding {
            kind: FailureKind::NcclError,
            line: evidence(line),
            fatal,
        });
    }
    if unwinds(line) {
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
    // torchrun's failure summary: "exitcode  : -9 (pid: 14750)", "traceback : Signal 9
    // (SIGKILL) received by PID 14750". A rank killed (SIGKILL, SIGSEGV, SIGBUS...) died
    // of the signal: that is the cause, not the launcher's ChildFailedError traceback
    // around it. SIGABRT and SIGTERM summaries only echo an error the log shows earlier
    // (NCCL aborting, the launcher stopping the others): they explain the exit instead.
    if let Some(signal) = summary_signal(line).filter(|s| !matches!(s, 1 | 2 | 6 | 15)) {
        let named = if line.contains("SIG") {
            line.to_string()
        } else {
            format!("{} (signal {signal}: {})", line.trim(), signal_name(signal))
        };
        return Some(LogFinding {
            kind: FailureKind::Signal { signal },
            line: evidence(&named),
            fatal: true,
        });
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

/// Reads a job's output line by line: each "Last error:" that PyTorch prints alone is
/// read together with the line after it (NCCL's own account of what failed), so that
/// NCCL's explanation counts as the WARN it is.
#[derive(Debug, Default)]
pub struct LineReader {
    last_error: Option<String>,
}

impl LineReader {
    pub fn line(&mut self, line: &str) -> Option<LogFinding> {
        if let Some(head) = self.last_error.take() {
            return classify_line(&format!("{} {}", head.trim_end(), line.trim()));
        }
        if line.trim_end().ends_with("Last error:") {
            self.last_error = Some(line.to_string());
            return None;
        }
        classify_line(line)
    }
}

/// The signal of a torchrun failure summary's "exitcode : -N" or "Signal N (...) received
/// by PID" line.
fn summary_signal(line: &str) -> Option<i32> {
    let lower = line.to_ascii_lowercase();
    if let Some(pos) = lower.find("signal ")
        && lower.contains("received by pid")
    {
        return lower[pos + 7..].split_whitespace().next()?.parse().ok();
    }
    let pos = lower.find("exitcode")?;
    let rest = lower[pos + 8..].trim_start().strip_prefix(':')?;
    let code: i32 = rest.split_whitespace().next()?.parse().ok()?;
    (code < 0 && rest.contains("pid")).then_some(-code)
}

/// An NCCL WARN line, of any version (NCCL 2.0-2.2's have no "NCCL" token:
/// "include/socket.h:185 WARN ...").
pub fn is_nccl_warn(line: &str) -> bool {
    line.contains("NCCL WARN") || old_nccl_warn(line) || line.contains("Last error:")
}

/// NCCL returning an error up its stack: "NCCL INFO transport/net.cc:1302 -> 6" (a
/// non-zero `ncclResult_t`). After a WARN it means the WARN was not recovered from.
pub fn unwinds(line: &str) -> bool {
    let Some(pos) = line.find(" -> ") else {
        return false;
    };
    line[..pos].contains("NCCL INFO")
        && line[pos + 4..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n > 0)
}

/// Whether `f` means the job cannot go on, given the findings before it: a fatal line,
/// or NCCL unwinding an error after a WARN.
pub fn is_fatal(earlier: &[LogFinding], f: &LogFinding) -> bool {
    f.fatal || (unwinds(&f.line) && earlier.iter().any(|e| is_nccl_warn(&e.line)))
}

/// What an NCCL WARN line says went wrong, when it says so specifically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclCause {
    /// A CUDA call failed inside NCCL.
    Cuda,
    /// An RDMA work completion with an error status: the link to a peer failed.
    RdmaCompletion,
    /// Setting up a queue pair failed (timed out, unreachable): the peer's HCA cannot be
    /// reached over this path.
    QpSetup,
    /// Bootstrap or socket connection set-up failed (refused, aborted, no interface).
    Bootstrap,
    /// A shared-memory segment could not be created or attached (/dev/shm).
    Shm,
    /// The peer went away (reset, closed, broken pipe): an effect of its failure.
    PeerGone,
}

/// The cause a WARN line names, if it names one.
pub fn nccl_cause(line: &str) -> Option<NcclCause> {
    if !is_nccl_warn(line) {
        return None;
    }
    let has = |w: &str| line.contains(w);
    Some(
        if has("Cuda failure") || has("CUDA failure") || has("Cuda error") {
            NcclCause::Cuda
        } else if has("shared memory segment")
            || has("/dev/shm")
            || has("posix_fallocate")
            || has("shmutils")
            || has("include/shm.h")
        {
            NcclCause::Shm
        } else if has("Got completion from peer")
            || (has("NET/IB") && has("completion") && has("error"))
        {
            NcclCause::RdmaCompletion
        } else if has("ibv_modify_qp failed") || has("ibv_create_qp failed") {
            NcclCause::QpSetup
        } else if has("Connection reset by peer")
            || has("Connection closed by remote peer")
            || has("Broken pipe")
            || (has("Call to recv") && has("failed"))
        {
            NcclCause::PeerGone
        } else if has("Bootstrap")
            || has("bootstrap")
            || has("socketStartConnect")
            || has("Call to connect")
            || (has("Connect to") && has("failed"))
            || has("no socket interface found")
            || has("Connection refused")
            || has("Socket creation failed")
            || has("Address family not supported")
            || has("ncclSocketInit")
            || has("neither AF_INET")
        {
            NcclCause::Bootstrap
        } else {
            return None;
        },
    )
}

impl NcclCause {
    /// The finding's kind in `gagentd diagnose`.
    pub fn kind(self, line: &str) -> &'static str {
        match self {
            NcclCause::Cuda => "nccl-cuda",
            NcclCause::RdmaCompletion => "nccl-rdma-completion",
            NcclCause::QpSetup if line.contains("timed out") => "nccl-qp-timeout",
            NcclCause::QpSetup => "nccl-qp-setup",
            NcclCause::Bootstrap => "nccl-bootstrap",
            NcclCause::Shm => "nccl-shm",
            NcclCause::PeerGone => "nccl-peer-gone",
        }
    }

    pub fn advice(self) -> &'static str {
        match self {
            NcclCause::Cuda => {
                "a CUDA call failed inside NCCL: look for an Xid on that GPU in the node's kernel log; an illegal address with no Xid is usually the application's (or a kernel's) bug"
            }
            NcclCause::RdmaCompletion => {
                "an RDMA transfer to the peer named failed (retries exhausted or the QP broke): check both ends' ports (ibstat), cables and switch ports; raising NCCL_IB_TIMEOUT or NCCL_IB_RETRY_CNT only hides a bad link"
            }
            NcclCause::QpSetup => {
                "a queue pair to the peer could not be connected: on a rail-optimised fabric set NCCL_CROSS_NIC=0; on RoCE check NCCL_IB_GID_INDEX (a RoCE v2 GID with an IPv4 address, show_gids) and that the peer's HCA is reachable"
            }
            NcclCause::Bootstrap => {
                "the ranks could not connect to each other: set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (not lo, docker or a link-local address), and check MASTER_ADDR and firewalls"
            }
            NcclCause::Shm => {
                "NCCL could not create its shared-memory segments: /dev/shm is too small or not shared (a container's default is 64 MB): run it with --ipc=host or --shm-size, mount an in-memory emptyDir on /dev/shm in Kubernetes, or set NCCL_SHM_DISABLE=1 (slower)"
            }
            NcclCause::PeerGone => {
                "the peer went away: its own log (or node) has the first failure"
            }
        }
    }

    /// How much a cause explains: a specific fault beats the peers' reactions to it.
    pub fn rank(self) -> u8 {
        match self {
            NcclCause::Cuda => 5,
            NcclCause::RdmaCompletion | NcclCause::QpSetup | NcclCause::Shm => 4,
            NcclCause::Bootstrap => 3,
            NcclCause::PeerGone => 1,
        }
    }

    /// NCCL never recovers from these: the WARN alone means the communicator is broken.
    pub fn fatal_alone(self) -> bool {
        !matches!(self, NcclCause::PeerGone)
    }
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
pub fn is_echo(line: &str) -> bool {
    unwinds(line)
        || nccl_cause(line) == Some(NcclCause::PeerGone)
        || [
            "unhandled system error",
            "Connection closed by remote peer",
            "remote process exited or there was a network error",
            "ncclSystemError",
            "ncclInternalError",
            "ncclRemoteError",
            "unhandled cuda error",
            "ncclUnhandledCudaError",
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
            (!f.fatal || is_nccl_warn(&f.line))
                && !is_echo(&f.line)
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
    match best_cause(candidates()) {
        Some(cause) => evidence(&format!("{} (then: {})", cause.line, fatal.line)),
        None => fatal.line.clone(),
    }
}

/// The WARN that explains most among `findings` (the first of the most specific).
pub fn best_cause<'a>(findings: impl Iterator<Item = &'a LogFinding>) -> Option<&'a LogFinding> {
    let mut best: Option<(&LogFinding, u8)> = None;
    for f in findings.filter(|f| is_nccl_warn(&f.line)) {
        let rank = nccl_cause(&f.line).map_or(2, NcclCause::rank);
        if best.is_none_or(|(_, r)| rank > r) {
            best = Some((f, rank));
        }
    }
    best.map(|(f, _)| f)
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
