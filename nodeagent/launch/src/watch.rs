//! Failure classification from what a step leaves behind: log lines (PyTorch NCCL watchdog
//! and heartbeat monitor, NCCL warnings and remote errors, CUDA out of memory, torchrun's
//! ChildFailedError summary), Python tracebacks of any exception (`crate::traceback`: its
//! class and deepest frame), torchrun's error file, and the exit status. A launcher's
//! summary of a failed process ("failed (exitcode: 1)", `ChildFailedError`) only echoes
//! that process's own error: the earliest exception that is a root cause explains it.
//!
//! Lines marked `fatal` mean the job cannot make progress any more: the agent reports them
//! at once so the whole gang is stopped in seconds, instead of waiting for every rank to
//! time out or for PyTorch to finish dumping debug information.

use crate::traceback::{Exception, Role, Tracebacks};
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
    /// The Python exception whose traceback the line ends, when it ends one (`line` is
    /// then the exception with its deepest frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised: Option<Raised>,
}

/// A Python exception read from a traceback: its class and what it says of the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raised {
    pub class: String,
    pub role: Role,
}

impl LogFinding {
    /// A Python exception that is the job's own error (not a launcher's summary or an
    /// interrupt), and not one that only echoes a failure elsewhere (a peer gone).
    pub fn is_root_exception(&self) -> bool {
        self.raised.as_ref().is_some_and(|r| r.role == Role::Cause) && !is_echo(&self.line)
    }
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
                raised: None,
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
            raised: None,
        });
    }
    if unwinds(line) {
        return Some(LogFinding {
            kind: FailureKind::NcclError,
            line: evidence(line),
            fatal: false,
            raised: None,
        });
    }
    // Read by the tables of `crate::catalog`, whatever tool printed the line: a CUDA
    // error by its name or message (nccl-tests' "Test CUDA failure ... 'an illegal
    // memory access was encountered'", PyTorch's "No CUDA GPUs are available"); a
    // rendezvous or c10d store failure (the job's ranks never met); an RDMA work
    // completion in error, a queue pair that could not be connected or a verbs resource
    // that could not be made (UCX, perftest, an RDMA engine's own log).
    if crate::catalog::cuda_error_in(line).is_some() {
        return Some(LogFinding {
            kind: FailureKind::CudaError,
            line: evidence(line),
            fatal: true,
            raised: None,
        });
    }
    if let Some(e) = crate::catalog::rendezvous_error_in(line) {
        // A warning naming it (torchrun's agent failing to shut a finished rendezvous
        // down once its peer's store is gone) is evidence, not the failure.
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: !e.retried && !warning_line(line),
            raised: None,
        });
    }
    if crate::catalog::wc_status_in(line).is_some()
        || crate::catalog::qp_transition_failed(line).is_some()
    {
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: true,
            raised: None,
        });
    }
    // A verbs resource the RDMA stack refused: evidence, not the failure (UCX probes
    // every device and goes on over another transport; what fails next says whether the
    // job could not).
    if crate::catalog::verbs_call_failed(line).is_some() {
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: false,
            raised: None,
        });
    }
    // MPI giving up (MPICH's and Intel MPI's "Fatal error in PMPI_Init", Open MPI's
    // "MPI_ABORT was invoked", its PML failing to start UCX): the job cannot go on.
    if mpi_fatal(line) {
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: true,
            raised: None,
        });
    }
    // A crash handler's report (Open MPI, UCX, glog, Python's faulthandler): the process
    // died of the signal. Not fatal on this line: `LineReader` reads the backtrace after
    // it, which says where it died (inside NCCL or not).
    if let Some(sig) = crate::catalog::crash_signal_in(line) {
        return Some(LogFinding {
            kind: FailureKind::Signal { signal: sig.number },
            line: evidence(line),
            fatal: false,
            raised: None,
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
                raised: None,
            });
        }
    }
    // torchrun's failure summary: "exitcode  : -9 (pid: 14750)", "traceback : Signal 9
    // (SIGKILL) received by PID 14750". A rank killed (SIGKILL, SIGSEGV, SIGBUS...) died
    // of the signal: that is the cause, not the launcher's ChildFailedError traceback
    // around it. SIGABRT and SIGTERM summaries only echo an error the log shows earlier
    // (NCCL aborting, the launcher stopping the others): they explain the exit instead.
    // The launcher itself signalled (torch elastic's agent: "Received 1 death signal,
    // shutting down workers", its SignalException "Process 7 got signal: 1"): the job was
    // ended from outside, by that signal (a closed terminal's SIGHUP, a kill).
    if let Some(signal) = launcher_signalled(line) {
        return Some(LogFinding {
            kind: FailureKind::Signal { signal },
            line: evidence(line),
            fatal: true,
            raised: None,
        });
    }
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
            raised: None,
        });
    }
    if line.contains("ChildFailedError")
        || (line.contains("received by PID") && line.contains("Signal"))
    {
        return Some(LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line: evidence(line),
            fatal: false,
            raised: None,
        });
    }
    None
}

/// Reads a job's output line by line: each "Last error:" that PyTorch prints alone is
/// read together with the line after it (NCCL's own account of what failed), so that
/// NCCL's explanation counts as the WARN it is; a Python traceback's exception line is
/// read as the exception, with its class and deepest frame.
#[derive(Debug, Default)]
pub struct LineReader {
    last_error: Option<String>,
    tracebacks: Tracebacks,
    /// A crash handler's report being read: its signal line, until its backtrace ends.
    crash: Option<LogFinding>,
}

/// A line of a crash handler's report after its signal line: its details and backtrace
/// frames (Open MPI's "[host:pid] [ 4] /lib/libnccl.so.2(+0xbd72c)[0x7d1d]", UCX's " 4
/// 0x0000000000059e97 ncclGetUniqueId()  ???:0", "==== backtrace (tid: 3095) ====").
fn crash_report_line(line: &str) -> bool {
    let t = line.trim();
    t.contains("Signal code")
        || t.contains("Failing at address")
        || t.contains("backtrace")
        || t.contains("*** ")
        || (t.contains("0x") && (t.contains("(+0x") || t.contains("()") || t.contains(".so")))
}

/// A backtrace frame inside NCCL: its library or one of its functions (`ncclGroupEnd`).
fn nccl_frame(line: &str) -> bool {
    line.contains("libnccl")
        || line.match_indices("nccl").any(|(at, _)| {
            line[at + 4..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_uppercase())
        })
}

impl LineReader {
    pub fn line(&mut self, line: &str) -> Option<LogFinding> {
        if let Some(crash) = self.crash.as_mut() {
            if crash_report_line(line) {
                if !nccl_frame(line) {
                    return None;
                }
                let mut f = self.crash.take().expect("a crash");
                f.line = evidence(&format!("{} (in {})", f.line, line.trim()));
                f.fatal = true;
                return Some(f);
            }
            // The report ended: the process died of its signal.
            crash.fatal = true;
            return self.crash.take();
        }
        let raised = self.tracebacks.line(line);
        if let Some(head) = self.last_error.take() {
            return classify_line(&format!("{} {}", head.trim_end(), line.trim()));
        }
        if let Some(e) = raised {
            return Some(exception_finding(line, &e));
        }
        if line.trim_end().ends_with("Last error:") {
            self.last_error = Some(line.to_string());
            return None;
        }
        let f = classify_line(line)?;
        if matches!(f.kind, FailureKind::Signal { .. })
            && !f.fatal
            && crate::catalog::crash_signal_in(line).is_some()
        {
            self.crash = Some(f.clone());
        }
        Some(f)
    }

    /// Whether the last line read was part of a Python traceback (its header, frames,
    /// exception line or chain marker).
    pub fn in_traceback(&self) -> bool {
        self.tracebacks.inside()
    }
}

/// The finding of a traceback's exception line `raw`: what the line's words say (CUDA out
/// of memory, an NCCL error...) or else the job's own error, its evidence the exception
/// with its deepest frame (and the prefix a launcher put before it, which names the rank).
pub fn exception_finding(raw: &str, e: &Exception) -> LogFinding {
    let prefix = raw.find(e.class.as_str()).map_or("", |p| &raw[..p]);
    let line = evidence(&format!("{}{}", prefix.trim_start(), e.evidence()));
    let raised = Some(Raised {
        class: e.class.clone(),
        role: e.role(),
    });
    match classify_line(raw) {
        Some(f) => LogFinding {
            kind: f.kind,
            line,
            fatal: f.fatal,
            raised,
        },
        // Raised inside PyTorch's rendezvous or its store: the ranks cannot meet, in
        // whatever words the socket or the store chose.
        None => LogFinding {
            kind: FailureKind::ExitCode { code: 1 },
            line,
            fatal: e
                .frame
                .as_ref()
                .is_some_and(|f| crate::catalog::in_rendezvous_module(&f.file)),
            raised,
        },
    }
}

/// The earliest root cause among `findings` (in the order they were read): the first
/// Python exception that is the job's own error, not a launcher's summary of it, an
/// interrupt, or a rank noticing a peer went away.
pub fn root_exception(findings: &[LogFinding]) -> Option<&LogFinding> {
    findings.iter().find(|f| f.is_root_exception())
}

/// A launcher's account of a process it started failing with an exit status
/// ("failed (exitcode: 1) local_rank: 3", `ChildFailedError`, a `subprocess` or
/// `torch.multiprocessing` failure): the process's own error is the cause. A negative
/// exit code (killed by a signal) is a cause of its own.
pub fn is_launcher_summary(line: &str) -> bool {
    (line.contains("failed (exitcode: ") && !line.contains("failed (exitcode: -"))
        || [
            "ChildFailedError",
            "ProcessRaisedException",
            "ProcessExitedException",
            "CalledProcessError",
        ]
        .iter()
        .any(|n| line.contains(n))
}

/// An error line of a job's output that no rule reads: a log level of error or fatal
/// (`ERROR`, `FATAL`, glog's `E0801 13:23:20`), `error:`, `Error:` or `fatal:` after a
/// word, a crash the shell reports. The hang watch takes the first as its evidence.
/// A line logged at warning level: Python's `WARNING:...`, glog's `W1206 ...` (also as
/// `[W1206 ...]` and after torch's `[rank0]:` prefix).
pub fn warning_line(line: &str) -> bool {
    let t = line.trim_start();
    let t = match t.strip_prefix("[rank") {
        Some(rest) => rest.split_once("]:").map_or(t, |(_, after)| after),
        None => t,
    };
    let t = t.strip_prefix('[').unwrap_or(t);
    t.starts_with("WARNING")
        || (t.starts_with('W') && t.len() > 5 && t.as_bytes()[1..5].iter().all(u8::is_ascii_digit))
}

pub fn error_line(line: &str) -> bool {
    let t = line.trim();
    if t.is_empty() {
        return false;
    }
    let words = |w: &str| {
        t.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|x| x == w)
    };
    words("ERROR")
        || words("FATAL")
        || words("CRITICAL")
        || t.contains("Error:")
        || t.contains("error:")
        || t.contains("Exception:")
        || t.contains("fatal:")
        || t.contains("Fatal error")
        || t.contains("Segmentation fault")
        || t.contains("core dumped")
        || glog_error(t)
}

/// A glog line at error or fatal level (`E0801 13:23:20.000000 32974 api.py:874] ...`,
/// also after a prefix such as `[rank1]:[`).
fn glog_error(line: &str) -> bool {
    line.match_indices(['E', 'F']).any(|(pos, _)| {
        let before = line[..pos].chars().last();
        let rest = &line.as_bytes()[pos + 1..];
        before.is_none_or(|c| matches!(c, '[' | ' ' | ':'))
            && rest.len() > 8
            && rest[..4].iter().all(u8::is_ascii_digit)
            && rest[4] == b' '
            && rest[5..7].iter().all(u8::is_ascii_digit)
            && rest[7] == b':'
    })
}

/// The signal of a torchrun failure summary's "exitcode : -N" or "Signal N (...) received
/// by PID" line.
fn summary_signal(line: &str) -> Option<i32> {
    if let Some(signal) = python_child_signal(line).or_else(|| shell_child_signal(line)) {
        return Some(signal);
    }
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

/// The signal a launcher says it received itself (torch elastic's agent), except SIGINT
/// and SIGTERM, which are how jobs are stopped (the sender explains those).
fn launcher_signalled(line: &str) -> Option<i32> {
    launcher_signal_number(line).filter(|s| !matches!(s, 2 | 15))
}

/// The number in "Received N death signal" or a SignalException's "got signal: N".
fn launcher_signal_number(line: &str) -> Option<i32> {
    let number_or_name = |w: &str| -> Option<i32> {
        let w = w.trim_start_matches("Signals.");
        w.parse().ok().or_else(|| {
            crate::catalog::signals()
                .iter()
                .find(|s| s.name == w)
                .map(|s| s.number)
        })
    };
    if let Some(pos) = line.find("Received ")
        && line[pos..].contains(" death signal")
    {
        return number_or_name(line[pos + "Received ".len()..].split_whitespace().next()?);
    }
    let pos = line.find(" got signal: ")?;
    line.contains("SignalException")
        .then(|| {
            number_or_name(
                line[pos + " got signal: ".len()..]
                    .split_whitespace()
                    .next()?,
            )
        })
        .flatten()
}

/// MPI's own words for a job it ends: MPICH and its derivatives (Intel MPI, MVAPICH)
/// print "Fatal error in PMPI_Init: Other MPI error, error stack:" (src/mpi/errhan,
/// `MPIR_Err_return_comm`); Open MPI "MPI_ABORT was invoked on rank 3", "*** An error
/// occurred in MPI_Init" (ompi/errhandler) and, when its UCX PML cannot start,
/// "pml_ucx.c:309 Error: Failed to create UCP worker".
fn mpi_fatal(line: &str) -> bool {
    line.contains("Fatal error in PMPI_")
        || line.contains("Fatal error in MPI_")
        || (line.contains("Abort(") && line.contains("Fatal error in "))
        || line.contains("MPI_ABORT was invoked")
        || line.contains("An error occurred in MPI_")
        || (line.contains("pml_ucx") && line.contains("Failed to create UCP worker"))
        || ucx_fatal(line)
}

/// UCX's own fatal level (ucs/debug/log.c: `ucs_fatal` prints "Fatal:" after the source
/// location and aborts the process; `UCX  FATAL` in its level-named form).
fn ucx_fatal(line: &str) -> bool {
    line.contains("UCX  FATAL")
        || line.contains("UCX FATAL")
        || line.split_once(" Fatal: ").is_some_and(|(head, _)| {
            head.trim_end().rsplit(' ').next().is_some_and(|loc| {
                loc.contains(".c:")
                    && loc
                        .rsplit(':')
                        .next()
                        .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
            })
        })
}

/// A child's death by a signal as Python's launchers say it: `subprocess`'s
/// CalledProcessError ("died with <Signals.SIGSEGV: 11>", "died with unknown signal 40",
/// as torch.distributed.launch and many wrappers raise it) and torch.multiprocessing's
/// ProcessExitedException ("process 0 terminated with signal SIGSEGV"), and Open MPI's
/// mpirun ("exited on signal 9 (Killed)").
fn python_child_signal(line: &str) -> Option<i32> {
    if let Some(pos) = line.find("<Signals.SIG") {
        let rest = &line[pos + "<Signals.".len()..];
        let number = rest.split_once(':')?.1.trim_start();
        return leading_number(number);
    }
    if let Some(pos) = line.find("died with unknown signal ") {
        let rest = &line[pos + "died with unknown signal ".len()..];
        return leading_number(rest);
    }
    // DeepSpeed's launcher (deepspeed/launcher/launch.py `sigkill_handler`): "... exits
    // with return code = -9".
    if let Some(pos) = line.find("exits with return code = -") {
        let rest = &line[pos + "exits with return code = -".len()..];
        return leading_number(rest);
    }
    // Open MPI's mpirun: "process rank 7 with PID 0 on node n1 exited on signal 9 (Killed)".
    if let Some(pos) = line.find("exited on signal ") {
        let rest = &line[pos + "exited on signal ".len()..];
        return leading_number(rest);
    }
    let pos = line.find("terminated with signal ")?;
    let name = line[pos + "terminated with signal ".len()..]
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()?;
    crate::catalog::signals()
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.number)
}

/// The number `text` starts with.
fn leading_number(text: &str) -> Option<i32> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A foreground command killed by a signal as a non-interactive bash reports it on the
/// job's stderr: "job.sh: line 12: 4242 Segmentation fault      (core dumped) python
/// train.py", "line 5: 77 Killed python x.py" (the pid, then `strsignal`'s text).
fn shell_child_signal(line: &str) -> Option<i32> {
    let pos = line.find(": line ")?;
    let rest = &line[pos + ": line ".len()..];
    let (number, rest) = rest.split_once(':')?;
    number.trim().parse::<u32>().ok()?;
    let rest = rest.trim_start();
    let pid_len = rest.chars().take_while(char::is_ascii_digit).count();
    if pid_len == 0 {
        return None;
    }
    let text = rest[pid_len..].trim_start();
    crate::catalog::signals()
        .iter()
        .filter(|s| text.starts_with(s.text))
        .max_by_key(|s| s.text.len())
        .map(|s| s.number)
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
/// connect failed, a launcher's summary of a worker's failure.
pub fn is_echo(line: &str) -> bool {
    is_launcher_summary(line)
        || unwinds(line)
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
/// load (libnvidia-ml, libcuda) is named as the cause; otherwise, for NCCL's echoes, a
/// WARN that names a specific cause, else the earliest Python exception that is a root
/// cause, else the first WARN (a peer that went away); for a launcher's summary, the
/// earliest root exception first. A missing libibverbs is not a cause: NCCL then uses
/// sockets (the transport warning says so). MPI giving up is explained by a verbs call
/// that failed before it.
pub fn first_cause(earlier: &[LogFinding], fatal: &LogFinding) -> String {
    // MPI giving up is explained by the RDMA resource it could not get before.
    if mpi_fatal(&fatal.line)
        && let Some(cause) = earlier
            .iter()
            .find(|f| crate::catalog::verbs_call_failed(&f.line).is_some())
    {
        return evidence(&format!("{} (then: {})", cause.line, fatal.line));
    }
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
    let warn = best_cause(candidates());
    let specific = warn.filter(|w| nccl_cause(&w.line).is_some_and(|c| c.rank() > 1));
    let exception = root_exception(earlier).filter(|f| f.line != fatal.line);
    let cause = if is_launcher_summary(&fatal.line) {
        exception.or(warn)
    } else {
        specific.or(exception).or(warn)
    };
    match cause {
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
    crate::catalog::signals()
        .iter()
        .find(|s| s.number == sig)
        .map_or("signal", |s| s.name)
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
    if let Some(f) = root_exception(findings) {
        return Some((status.0, format!("{}; first error: {}", status.1, f.line)));
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

#[cfg(test)]
mod traceback_tests {
    use super::*;

    fn read(text: &str) -> Vec<LogFinding> {
        let mut r = LineReader::default();
        text.lines().filter_map(|l| r.line(l)).collect()
    }

    const WORKER: &str = "[default1]:Traceback (most recent call last):
[default1]:  File \"/w/train.py\", line 88, in <module>
[default1]:    main()
[default1]:  File \"/w/data.py\", line 17, in load_shard
[default1]:    raise FileNotFoundError(path)
[default1]:FileNotFoundError: /data/shard-0003.bin
";

    const TORCHRUN: &str = "E0801 13:23:20.000000 32974 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 1 (pid: 33054) of binary: /usr/bin/python3
Traceback (most recent call last):
  File \"/usr/local/bin/torchrun\", line 8, in <module>
    sys.exit(main())
  File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py\", line 263, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
";

    #[test]
    fn a_launchers_summary_never_outranks_the_error_it_summarises() {
        let f = read(&format!("{WORKER}{TORCHRUN}"));
        let worker = &f[0];
        assert_eq!(worker.kind, FailureKind::ExitCode { code: 1 });
        assert!(!worker.fatal && worker.is_root_exception());
        assert_eq!(
            worker.line,
            "[default1]:FileNotFoundError: /data/shard-0003.bin (at /w/data.py:17 in load_shard)"
        );
        let (kind, evidence) = classify_exit(Some(1), None, &f, None, false).unwrap();
        assert_eq!(kind, FailureKind::ExitCode { code: 1 });
        assert!(
            evidence.starts_with("[default1]:FileNotFoundError: /data/shard-0003.bin (at /w/data.py:17 in load_shard) (then: E0801"),
            "{evidence}"
        );
        assert!(evidence.contains("local_rank: 1"), "{evidence}");
        // The summary alone still says what it can.
        let f = read(TORCHRUN);
        let (_, evidence) = classify_exit(Some(1), None, &f, None, false).unwrap();
        assert!(evidence.starts_with("E0801") && evidence.contains("failed (exitcode: 1)"));
        // ChildFailedError's own traceback is a launcher's, never a root cause.
        assert!(f.iter().all(|x| !x.is_root_exception()), "{f:?}");
    }

    #[test]
    fn the_earliest_root_cause_across_ranks_wins_over_the_peers_that_noticed() {
        let log = "[rank1]: Traceback (most recent call last):
[rank1]:   File \"/w/train.py\", line 40, in <module>
[rank1]:     step(batch)
[rank1]:   File \"/w/model.py\", line 12, in forward
[rank1]:     assert x.shape[0] == self.n, x.shape
[rank1]: AssertionError: torch.Size([7, 512])
[rank0]: Traceback (most recent call last):
[rank0]:   File \"/w/train.py\", line 41, in <module>
[rank0]:     dist.all_reduce(loss)
[rank0]:   File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 2501, in all_reduce
[rank0]:     work = group.allreduce([tensor], opts)
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5
";
        let f = read(log);
        assert_eq!(f.len(), 2, "{f:?}");
        let peer = &f[1];
        assert!(peer.fatal && peer.kind == FailureKind::NcclError);
        assert!(
            !peer.is_root_exception(),
            "a peer noticing is not the cause"
        );
        assert!(
            peer.line
                .contains("(at …/torch/distributed/distributed_c10d.py:2501 in all_reduce)")
        );
        let evidence = first_cause(&f[..1], peer);
        assert!(
            evidence.starts_with("[rank1]: AssertionError: torch.Size([7, 512]) (at /w/model.py:12 in forward) (then: [rank0]: torch.distributed.DistBackendError"),
            "{evidence}"
        );
        // A WARN that names a specific NCCL cause still comes first.
        let warn = classify_line("host:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43523> failed : Connection refused").unwrap();
        let mut with_warn = vec![warn];
        with_warn.extend(f[..1].iter().cloned());
        assert!(first_cause(&with_warn, peer).starts_with("host:1:2"));
    }

    #[test]
    fn an_exceptions_own_words_keep_their_rule() {
        let f = read("Traceback (most recent call last):
  File \"/w/train.py\", line 9, in <module>
    y = model(x)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB
");
        assert_eq!((f[0].kind.clone(), f[0].fatal), (FailureKind::Oom, true));
        assert!(
            f[0].line.ends_with("(at /w/train.py:9 in <module>)"),
            "{}",
            f[0].line
        );
        // A KeyboardInterrupt is read, but it is the job being stopped, not its cause.
        let f = read(
            "Traceback (most recent call last):
  File \"/w/train.py\", line 9, in <module>
    time.sleep(1)
KeyboardInterrupt
",
        );
        assert_eq!(f[0].raised.as_ref().map(|r| r.role), Some(Role::Interrupt));
        assert!(root_exception(&f).is_none());
        let (_, evidence) = classify_exit(Some(130), None, &f, None, false).unwrap();
        assert!(
            evidence.contains("last error line: KeyboardInterrupt"),
            "{evidence}"
        );
    }

    #[test]
    fn a_childs_death_by_a_signal_is_read_in_every_launchers_words() {
        let signal = |line: &str| {
            let f = classify_line(line).unwrap_or_else(|| panic!("{line}"));
            assert!(f.fatal, "{line}");
            f.kind
        };
        // Python's subprocess (CalledProcessError.__str__), torch.multiprocessing's
        // ProcessExitedException, a non-interactive bash, for every crash in the table.
        for s in crate::catalog::signals().iter().filter(|s| s.crash) {
            let sig = FailureKind::Signal { signal: s.number };
            for line in [
                format!(
                    "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.{}: {}>.",
                    s.name, s.number
                ),
                format!(
                    "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal {}",
                    s.name
                ),
                format!(
                    "/var/spool/job.sh: line 12: 4242 {}      (core dumped) python train.py",
                    s.text
                ),
            ] {
                assert_eq!(signal(&line), sig, "{line}");
            }
        }
        assert_eq!(
            signal("Command '['a']' died with unknown signal 40."),
            FailureKind::Signal { signal: 40 }
        );
        assert_eq!(
            signal("./run.sh: line 5: 77 Killed                  python x.py"),
            FailureKind::Signal { signal: 9 }
        );
        assert_eq!(
            signal(
                "mpirun noticed that process rank 7 with PID 0 on node n1 exited on signal 9 (Killed)."
            ),
            FailureKind::Signal { signal: 9 }
        );
        // The launcher itself signalled: the signal ended the job, SIGHUP included.
        for line in [
            "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2973575 got signal: 1",
            "Received Signals.SIGHUP death signal, shutting down workers",
        ] {
            assert_eq!(signal(line), FailureKind::Signal { signal: 1 }, "{line}");
        }
        // A summary of a rank that aborted or was stopped explains an exit, it does not
        // predict one (the exit status and the error before it decide).
        for line in [
            "process 0 terminated with signal SIGABRT",
            "Command '['a']' died with <Signals.SIGTERM: 15>.",
            "job.sh: line 3: 12 Terminated   sleep 100",
            "WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
        ] {
            assert!(classify_line(line).is_none_or(|f| !f.fatal), "{line}");
        }
        // DeepSpeed's launcher, UCX's fatal level, MPICH 4's abort.
        assert_eq!(
            signal(
                "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python3', '-u', 'main.py'] exits with return code = -9"
            ),
            FailureKind::Signal { signal: 9 }
        );
        for line in [
            "[h:31658:0:31658]    ud_iface.c:48   Fatal: iface 0xb32050: failed to get peer address",
            "Abort(675407631) on node 0: Fatal error in internal_Init: Other MPI error, error stack:",
        ] {
            assert!(classify_line(line).is_some_and(|f| f.fatal), "{line}");
        }
        assert!(classify_line("Fatal: the user's own message").is_none());
        // Inside a traceback the exception line keeps the signal.
        let f = read("Traceback (most recent call last):
  File \"/opt/torch/distributed/launch.py\", line 259, in main
    cmd=cmd)
subprocess.CalledProcessError: Command '['/bin/python3', '-u', 'train.py', '--local_rank=7']' died with <Signals.SIGSEGV: 11>.
");
        let (kind, _) = classify_exit(Some(1), None, &f, None, false).unwrap();
        assert_eq!(kind, FailureKind::Signal { signal: 11 }, "{f:?}");
    }

    #[test]
    fn a_rendezvous_named_in_a_warning_is_evidence_not_the_failure() {
        let shut = "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'localhost_17920_0' has failed to shutdown the rendezvous '3844' due to an error of type RendezvousConnectionError.";
        let f = classify_line(shut).unwrap();
        assert!(!f.fatal, "{f:?}");
        let raised = "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.";
        assert!(classify_line(raised).unwrap().fatal);
        for l in [
            shut,
            "W1206 08:37:42.2 2067 socket.cpp:426] x",
            "[rank0]:[W1206 x] y",
        ] {
            assert!(warning_line(l), "{l}");
        }
        assert!(!warning_line(
            "Watchdog caught collective operation timeout"
        ));
    }

    #[test]
    fn error_lines_are_told_by_their_level_not_their_topic() {
        for l in [
            "RuntimeError: boom",
            "2026-01-02 10:00:00 ERROR train: shard missing",
            "[rank1]:[E1129 21:35:42.450680241 ProcessGroupNCCL.cpp:689] something",
            "E0801 13:23:20.000000 32974 api.py:874] failed",
            "fatal: not a git repository",
            "/var/spool/job.sh: line 3: 4242 Segmentation fault (core dumped) ./a.out",
        ] {
            assert!(error_line(l), "{l}");
        }
        for l in [
            "epoch 3 train error 0.12 val error 0.15",
            "W0801 13:23:17.366000 32974 api.py:900] Sending process 33051 closing signal SIGTERM",
            "loading 0 errors",
            "",
        ] {
            assert!(!error_line(l), "{l}");
        }
    }
}
