//! Why a job (or one node's step of it) failed: a kind a program can act on, plus the
//! evidence a person can read.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The failure kinds gsched distinguishes. Each maps to a final job state and to whether
/// the node is to blame (drain it, avoid it on requeue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FailureKind {
    /// A GPU fell off the bus, NVML reports it lost, or the GPU count dropped.
    GpuLost { gpu: Option<u32> },
    /// An Xid error on one of the job's GPUs.
    GpuXid { code: u32 },
    /// A collective timed out (PyTorch NCCL watchdog or heartbeat monitor).
    NcclTimeout,
    /// NCCL reported an error (remote peer gone, system error, network).
    NcclError,
    /// The node stopped answering.
    NodeLost,
    /// Out of memory: host (cgroup OOM kill) or device (CUDA out of memory).
    Oom,
    /// A CUDA call failed in the job (an illegal address, a launch failure): the
    /// application's bug, or its GPU's if the node logged an Xid.
    CudaError,
    /// The job ran past its time limit.
    Timeout,
    /// The process exited with a non-zero status.
    ExitCode { code: i32 },
    /// The process was killed by a signal it did not expect.
    Signal { signal: i32 },
    /// The step could not be started (bad working directory, unknown user, ...).
    LaunchFailed,
    /// The job's output could not be written (its file system is full or failing); the
    /// step was stopped rather than run on blind.
    OutputFailed,
    /// Another node of the same job failed first; this step was stopped.
    GangStopped,
    /// The user or an admin cancelled the job.
    Cancelled,
    /// Requeued to make room for a higher-QOS job.
    Preempted,
    /// Cancelled by the idle-GPU policy: every GPU stayed under its threshold.
    IdleGpus,
    /// Ended while pending: a job it depends on ended in a way that rules the dependency
    /// out (Slurm's `kill_invalid_depend`).
    DependencyNeverSatisfied,
    /// Ended while pending: it could no longer end by its `--deadline`.
    Deadline,
    /// Stopped by its node as hung: a rank of a multi-rank job failed (exited non-zero,
    /// or printed a traceback or an error line) and the ranks still running stayed
    /// silent, with their GPUs and CPUs idle, for the node's `--hang-after` (shorter once a
    /// rank has exited). The evidence starts with the first error line. Log format 11.
    Hang,
}

impl FailureKind {
    /// True when the node's hardware is at fault: the node is drained and a requeued job
    /// avoids it.
    pub fn blames_node(&self) -> bool {
        matches!(self, FailureKind::GpuLost { .. } | FailureKind::NodeLost)
            || matches!(self, FailureKind::GpuXid { code } if xid_blames_hardware(*code))
    }

    /// Infrastructure failures a `--requeue` job is put back in the queue for. A job's own
    /// error (exit code, signal, out of memory), its time limit and cancellation are final.
    pub fn is_requeueable(&self) -> bool {
        matches!(
            self,
            FailureKind::GpuLost { .. }
                | FailureKind::GpuXid { .. }
                | FailureKind::NodeLost
                | FailureKind::NcclTimeout
                | FailureKind::NcclError
                | FailureKind::Preempted
        )
    }

    /// The terminal job state this failure leads to.
    pub fn final_state(&self) -> crate::job::JobState {
        use crate::job::JobState;
        match self {
            FailureKind::NodeLost | FailureKind::GpuLost { .. } => JobState::NodeFail,
            FailureKind::Timeout => JobState::Timeout,
            FailureKind::Oom => JobState::OutOfMemory,
            FailureKind::Cancelled
            | FailureKind::IdleGpus
            | FailureKind::Preempted
            | FailureKind::DependencyNeverSatisfied => JobState::Cancelled,
            FailureKind::Deadline => JobState::Deadline,
            _ => JobState::Failed,
        }
    }

    /// Short name used in `gqueue`/`gacct` reason columns.
    pub fn reason_name(&self) -> String {
        match self {
            FailureKind::GpuLost { .. } => "GpuLost".into(),
            FailureKind::GpuXid { code } => format!("GpuXid{code}"),
            FailureKind::NcclTimeout => "NcclTimeout".into(),
            FailureKind::NcclError => "NcclError".into(),
            FailureKind::NodeLost => "NodeLost".into(),
            FailureKind::Oom => "OutOfMemory".into(),
            FailureKind::CudaError => "CudaError".into(),
            FailureKind::Timeout => "TimeLimit".into(),
            FailureKind::ExitCode { code } => format!("NonZeroExitCode:{code}"),
            FailureKind::Signal { signal } => format!("Signal:{signal}"),
            FailureKind::LaunchFailed => "LaunchFailed".into(),
            FailureKind::OutputFailed => "OutputWriteFailed".into(),
            FailureKind::GangStopped => "GangStopped".into(),
            FailureKind::Cancelled => "Cancelled".into(),
            FailureKind::Preempted => "Preempted".into(),
            FailureKind::IdleGpus => "IdleGPUs".into(),
            FailureKind::DependencyNeverSatisfied => "DependencyNeverSatisfied".into(),
            FailureKind::Deadline => "DeadLine".into(),
            FailureKind::Hang => "Hang".into(),
        }
    }

    /// Specific kinds outrank generic ones when several nodes report: a lost GPU explains a
    /// later NCCL timeout on the other node, which explains an exit code.
    pub fn precedence(&self) -> u8 {
        match self {
            FailureKind::GpuLost { .. } => 10,
            FailureKind::NodeLost => 9,
            FailureKind::GpuXid { .. } => 8,
            FailureKind::Oom => 7,
            FailureKind::Timeout => 7,
            FailureKind::Cancelled
            | FailureKind::IdleGpus
            | FailureKind::Preempted
            | FailureKind::DependencyNeverSatisfied
            | FailureKind::Deadline => 6,
            FailureKind::NcclTimeout => 5,
            // A rank's CUDA context failing explains its peers' NCCL errors.
            FailureKind::CudaError => 5,
            // A rank killed or crashed (SIGKILL, SIGSEGV, SIGBUS...) is the cause; its peers'
            // "connection closed by remote peer" is the symptom, and often arrives first.
            // SIGABRT is what NCCL's own error handling raises, so it stays below NCCL errors.
            FailureKind::Signal { signal } if !matches!(signal, 1 | 2 | 6 | 15) => 5,
            FailureKind::NcclError => 4,
            FailureKind::LaunchFailed | FailureKind::OutputFailed => 4,
            // A hang names the error that started it: more than a bare exit status, less
            // than any specific cause another node reports.
            FailureKind::Hang => 3,
            FailureKind::Signal { .. } => 3,
            FailureKind::ExitCode { .. } => 2,
            FailureKind::GangStopped => 0,
        }
    }
}

impl Failure {
    /// True when the evidence is a rank noticing that *another* rank went away (NCCL's
    /// "remote process exited", "Connection closed by remote peer", a reset socket): the
    /// cause is on the other node, whose own report usually follows within a second.
    pub fn points_elsewhere(&self) -> bool {
        if !matches!(
            self.kind,
            FailureKind::NcclError | FailureKind::ExitCode { .. }
        ) {
            return false;
        }
        let e = self.evidence.to_ascii_lowercase();
        [
            "remote peer",
            "remote process exited",
            "connection reset by peer",
            "connection closed by peer",
            "ncclremoteerror",
        ]
        .iter()
        .any(|n| e.contains(n))
    }
}

/// Xids that mean the GPU or node needs a reset/reboot, following NVIDIA's catalogue
/// (RESET_GPU / RESTART_BM / NODE_REBOOT buckets); application-level Xids (13, 31, 43, 45,
/// 68, 69, 94, 109 when contained) do not blame the node.
pub fn xid_blames_hardware(code: u32) -> bool {
    matches!(
        code,
        48 | 61 | 62 | 64 | 74 | 79 | 92 | 95 | 119 | 120 | 136 | 140 | 143 | 144
            ..=150 | 155 | 156 | 158 | 160
    )
}

/// A failure with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Failure {
    #[serde(flatten)]
    pub kind: FailureKind,
    /// The node that reported it, when one did.
    #[serde(default)]
    pub node: Option<String>,
    /// The line or fact that shows it ("Watchdog caught collective operation timeout: ...").
    #[serde(default)]
    pub evidence: String,
    /// When it was observed (ms since the epoch), as stamped by the reporter.
    #[serde(default)]
    pub at_ms: u64,
}

impl Failure {
    /// The job's reason column (`gqueue`'s `%r` and NODELIST(REASON), `gacct`, the JSON
    /// row's `reason`): the kind's name, and for a launch the node refused (the owner's
    /// uid below `--min-uid`, an unknown user, a working directory that is not there)
    /// the node's words too, since the job never ran and wrote no output that could say
    /// why: `LaunchFailed: this node runs no job as root (uid 0): ...`.
    pub fn reason(&self) -> String {
        match self.kind {
            FailureKind::LaunchFailed if !self.evidence.is_empty() => {
                format!("{}: {}", self.kind.reason_name(), self.evidence)
            }
            _ => self.kind.reason_name(),
        }
    }

    /// A failure of `kind` seen at `at_ms`, not tied to a node.
    pub fn new(kind: FailureKind, evidence: impl Into<String>, at_ms: u64) -> Failure {
        Failure {
            kind,
            node: None,
            evidence: evidence.into(),
            at_ms,
        }
    }

    /// The same failure, reported by `node`.
    pub fn on(mut self, node: impl Into<String>) -> Failure {
        self.node = Some(node.into());
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.reason_name())?;
        if let Some(n) = &self.node {
            write!(f, " on {n}")?;
        }
        if !self.evidence.is_empty() {
            write!(f, ": {}", self.evidence)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureKind::*;

    #[test]
    fn a_killed_rank_outranks_its_peers_symptoms() {
        // Seen on 2x H200 over sockets: the peer's "Connection closed by remote peer"
        // reached the controller 0.04 s after the kill, before the killed rank's report.
        assert!(Signal { signal: 9 }.precedence() > NcclError.precedence());
        assert!(Signal { signal: 11 }.precedence() > NcclError.precedence());
        assert!(
            NcclError.precedence() > Signal { signal: 6 }.precedence(),
            "NCCL's abort keeps the NCCL error"
        );
        assert!(NcclError.precedence() > ExitCode { code: 1 }.precedence());
        assert!(GpuLost { gpu: Some(1) }.precedence() > Signal { signal: 9 }.precedence());
        assert!(Signal { signal: 15 }.precedence() > GangStopped.precedence());
    }

    #[test]
    fn a_hang_is_the_jobs_own_failure_and_outranks_a_bare_exit_status() {
        assert_eq!(Hang.final_state(), crate::job::JobState::Failed);
        assert!(!Hang.is_requeueable() && !Hang.blames_node());
        assert_eq!(Hang.reason_name(), "Hang");
        assert!(Hang.precedence() > ExitCode { code: 1 }.precedence());
        assert!(Hang.precedence() > GangStopped.precedence());
        assert!(NcclError.precedence() > Hang.precedence());
        assert_eq!(
            serde_json::to_string(&super::Failure::new(Hang, "x", 1)).unwrap(),
            r#"{"kind":"hang","node":null,"evidence":"x","at_ms":1}"#
        );
    }

    #[test]
    fn peer_symptoms_are_recognised() {
        let f = |kind, evidence: &str| super::Failure {
            kind,
            node: None,
            evidence: evidence.into(),
            at_ms: 0,
        };
        assert!(
            f(
                NcclError,
                "[0] misc/socket.cc:72 NCCL WARN socketProgress: Connection closed by remote peer"
            )
            .points_elsewhere()
        );
        assert!(
            f(
                NcclError,
                "NCCL error: remote process exited or there was a network error"
            )
            .points_elsewhere()
        );
        assert!(
            !f(NcclError, "NCCL WARN NET/IB : Got completion with error 12").points_elsewhere()
        );
        assert!(!f(Signal { signal: 9 }, "Connection closed by remote peer").points_elsewhere());
    }
}
