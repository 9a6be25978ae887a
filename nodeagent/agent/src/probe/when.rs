//! When the probe runs, as pure decisions: after a node run whose failure may be its
//! GPU's (the cause unknown, a CUDA error, a signal, words about the GPU or ECC), and on
//! a kernel line from a GPU, PCIe or NIC driver that names a device and that no rule
//! recognises, at most once per device per [`KERNEL_QUIET`].

use gsched_topology::xid::{KernelEvent, first_pci, normalize_pci, parse_line, split_prefix};
use gsched_types::failure::{Failure, FailureKind};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Why a failed run's GPUs are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// It exited non-zero and nothing in its output said why.
    UnknownCause,
    CudaError,
    /// A signal it did not expect (SIGSEGV, SIGBUS, a SIGKILL not from gsched).
    Signal(i32),
    /// Its failure speaks of the GPU, ECC, an Xid or NVML.
    GpuWords,
}

impl AfterRun {
    pub fn name(self) -> String {
        match self {
            AfterRun::UnknownCause => "a failure of unknown cause".into(),
            AfterRun::CudaError => "a CUDA error".into(),
            AfterRun::Signal(s) => format!("signal {s}"),
            AfterRun::GpuWords => "a failure naming the GPU".into(),
        }
    }
}

const GPU_WORDS: [&str; 7] = [
    "ecc",
    "gpu",
    "xid",
    "nvml",
    "uncorrectable",
    "fallen off",
    "reset required",
];

/// Whether a run that ended with `failure` has its GPUs probed before they are given
/// again. Failures that are the job's own (out of memory, its time limit), the user's
/// (cancelled) or another node's (stopped with its gang, a peer that went away) do not.
pub fn after_run(failure: &Failure) -> Option<AfterRun> {
    let lower = failure.evidence.to_ascii_lowercase();
    let words = GPU_WORDS.iter().any(|w| lower.contains(w));
    match &failure.kind {
        FailureKind::CudaError => Some(AfterRun::CudaError),
        FailureKind::Signal { signal } => Some(AfterRun::Signal(*signal)),
        FailureKind::ExitCode { .. } if failure.points_elsewhere() => None,
        FailureKind::ExitCode { .. } if words => Some(AfterRun::GpuWords),
        FailureKind::ExitCode { .. } => Some(AfterRun::UnknownCause),
        FailureKind::GpuLost { .. }
        | FailureKind::GpuXid { .. }
        | FailureKind::NcclError
        | FailureKind::NcclTimeout
            if words && !failure.points_elsewhere() =>
        {
            Some(AfterRun::GpuWords)
        }
        _ => None,
    }
}

/// A kernel line that calls for a probe: which device it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLine {
    /// `0000:3b:00` for a PCI address, else the driver's `GPUn` name.
    pub device: String,
    /// A PCI address, which can be matched to a GPU or the port above one.
    pub pci: Option<String>,
}

/// The drivers whose unknown lines may be about a GPU: the NVIDIA driver and NVSwitch,
/// PCIe ports and AER, the ConnectX NICs GPUs share switches with.
fn from_a_device_driver(msg: &str) -> bool {
    msg.contains("NVRM")
        || msg.starts_with("nvidia ")
        || msg.starts_with("nvidia-nvswitch")
        || msg.starts_with("pcieport ")
        || msg.contains(" AER: ")
        || msg.starts_with("mlx5_core ")
        || msg.starts_with("mlx5_ib")
}

/// The lines of an AER report after its first (status bits, TLP header) and corrected
/// errors, which are normal one at a time and counted into floods elsewhere.
pub(crate) fn aer_detail_or_corrected(msg: &str) -> bool {
    let lower = msg.to_ascii_lowercase();
    lower.contains("error status/mask")
        || lower.contains("tlp header")
        || lower.contains(" corrected error")
        || lower.contains("severity=correct")
        || lower.contains(" correctable")
        || msg
            .split(": ")
            .skip(1)
            .any(|part| part.trim_start().starts_with('[') && part.contains("] "))
}

/// `/dev/kmsg`'s level of a record ("4,1234,567,-;..."): notices and below are routine.
fn kmsg_level(line: &str) -> Option<u8> {
    let (head, _) = line.split_once(';')?;
    let first = head.split(',').next()?;
    first.parse::<u32>().ok().map(|p| (p & 7) as u8)
}

/// A line from a device driver that names a device and that no rule recognises (or only
/// as an unrecognised NVRM message).
pub fn device_line(line: &str) -> Option<DeviceLine> {
    if kmsg_level(line).is_some_and(|level| level > 4) {
        return None;
    }
    let (_, msg) = split_prefix(line);
    // Journal and syslog copies: "host kernel: NVRM: ...".
    let msg = msg
        .split_once("kernel: ")
        .map(|(_, m)| m)
        .unwrap_or(msg)
        .trim();
    if !from_a_device_driver(msg) || aer_detail_or_corrected(msg) {
        return None;
    }
    // A driver status code that says the GPU's state (`gsched_topology::nv_status`) is
    // acted on by itself, and the probe reads the GPU too: the state decides, the line is
    // evidence. Every GPU is probed when the line names none. So is a memory error the
    // catalogue does not call fatal (Xid 94's contained ECC error, 63's retirement, 92's
    // SBE flood): whether a row remap waits for a reset is the GPU's state, not the line's.
    let parsed = parse_line(line);
    let status = matches!(parsed, Some(KernelEvent::DeviceStatus { .. }))
        || matches!(&parsed, Some(KernelEvent::Xid(x)) if nonfatal_memory_xid(x.code));
    if !status
        && !matches!(
            parse_line(line),
            None | Some(KernelEvent::Unrecognised { .. })
        )
    {
        return None;
    }
    if let Some(pci) = first_pci(msg) {
        let pci = normalize_pci(pci);
        return Some(DeviceLine {
            device: pci.clone(),
            pci: Some(pci),
        });
    }
    msg.split(|c: char| c.is_whitespace() || matches!(c, ':' | ',' | '(' | ')'))
        .find(|w| w.len() > 3 && w.starts_with("GPU") && w[3..].chars().all(|c| c.is_ascii_digit()))
        .map(|w| DeviceLine {
            device: w.to_string(),
            pci: None,
        })
        .or_else(|| {
            status.then(|| DeviceLine {
                device: String::new(),
                pci: None,
            })
        })
}

/// An Xid NVIDIA's catalogue calls non-fatal whose mnemonic names the GPU's memory (ECC,
/// contained errors, DRAM retirement, single-bit error floods).
fn nonfatal_memory_xid(code: u32) -> bool {
    gsched_topology::xid_catalog::catalogue()
        .get(&code)
        .is_some_and(|e| {
            !e.fatal
                && ["ECC", "CONTAINED", "DRAM_RETIREMENT", "SBE"]
                    .iter()
                    .any(|w| e.mnemonic.contains(w))
        })
}

/// How long a device's unknown lines wait before they set the probe off again.
pub const KERNEL_QUIET: Duration = Duration::from_secs(60);

/// Which devices probed lately, so a flood of lines is one probe.
#[derive(Debug, Default)]
pub struct Quiet {
    last: HashMap<String, Instant>,
}

impl Quiet {
    /// Whether `device` may set a probe off `now` (and, if so, that it just did).
    pub fn due(&mut self, device: &str, now: Instant) -> bool {
        if self
            .last
            .get(device)
            .is_some_and(|at| now.saturating_duration_since(*at) < KERNEL_QUIET)
        {
            return false;
        }
        self.last
            .retain(|_, at| now.saturating_duration_since(*at) < KERNEL_QUIET);
        self.last.insert(device.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: FailureKind, evidence: &str) -> Failure {
        Failure::new(kind, evidence, 1)
    }

    #[test]
    fn failures_that_may_be_the_gpus_are_probed() {
        let probed = |kind, evidence| after_run(&failure(kind, evidence));
        assert_eq!(
            probed(FailureKind::ExitCode { code: 1 }, "exited with code 1"),
            Some(AfterRun::UnknownCause)
        );
        assert_eq!(
            probed(
                FailureKind::CudaError,
                "CUDA error: an illegal memory access was encountered"
            ),
            Some(AfterRun::CudaError)
        );
        assert_eq!(
            probed(FailureKind::Signal { signal: 7 }, "killed by signal 7"),
            Some(AfterRun::Signal(7))
        );
        assert_eq!(
            probed(
                FailureKind::ExitCode { code: 1 },
                "RuntimeError: CUDA error: uncorrectable ECC error encountered"
            ),
            Some(AfterRun::GpuWords)
        );
        assert_eq!(
            probed(
                FailureKind::NcclError,
                "NCCL WARN Cuda failure 'uncorrectable ECC error encountered'"
            ),
            Some(AfterRun::GpuWords)
        );
    }

    #[test]
    fn the_jobs_own_the_users_and_other_nodes_failures_are_not() {
        let probed = |kind, evidence| after_run(&failure(kind, evidence));
        for (kind, evidence) in [
            (
                FailureKind::Oom,
                "torch.OutOfMemoryError: CUDA out of memory (GPU 0; 79 GiB)",
            ),
            (FailureKind::Timeout, "time limit of 1:00 reached"),
            (FailureKind::Cancelled, "cancelled by alice"),
            (FailureKind::GangStopped, "GPU 3 lost on n2"),
            (FailureKind::Preempted, "preempted"),
            (FailureKind::LaunchFailed, "no such user"),
            (FailureKind::NodeLost, "lease expired"),
            (
                FailureKind::NcclError,
                "NCCL WARN socket: connection closed by remote peer",
            ),
            (
                FailureKind::ExitCode { code: 1 },
                "ncclRemoteError: remote process exited",
            ),
        ] {
            assert_eq!(probed(kind.clone(), evidence), None, "{kind:?}: {evidence}");
        }
    }

    #[test]
    fn unknown_lines_from_device_drivers_that_name_a_device_set_the_probe_off() {
        let gpu = |line: &str| device_line(line).map(|d| d.device);
        // The NVIDIA driver in words no rule knows, with and without an address.
        assert_eq!(
            gpu("[ 9.1] NVRM: GPU 0000:21:00.0: GPU requires a full chip reset"),
            Some("0000:21:00".into())
        );
        assert_eq!(
            gpu("Jun 3 10:00:01 node7 kernel: NVRM: GPU1 nvAssertOkFailedNoLog: Assertion failed"),
            Some("GPU1".into())
        );
        assert_eq!(
            gpu("nvidia 0000:21:00.0: something new went wrong"),
            Some("0000:21:00".into())
        );
        assert_eq!(
            gpu(
                "pcieport 0000:20:01.1: AER: Multiple Uncorrected (Fatal) error message received from 0000:21:00.0"
            ),
            Some("0000:20:01".into())
        );
        assert_eq!(
            gpu("mlx5_core 0000:5e:00.0: mlx5_health_try_recover: health recovery flow aborted"),
            Some("0000:5e:00".into())
        );
        // A status code that says the GPU's state: its GPU, or every GPU when the line
        // names none.
        assert_eq!(
            gpu(
                "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062)"
            ),
            Some(String::new())
        );
        assert_eq!(
            gpu("NVRM: GPU 0000:21:00.0: rpc failed status=0x00000062"),
            Some("0000:21:00".into())
        );
        // A memory error NVIDIA does not call fatal: the GPU's remap state decides.
        assert_eq!(
            gpu(
                "NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
            ),
            Some("0000:00:08".into())
        );
        assert_eq!(
            gpu(
                "NVRM: Xid (PCI:0000:21:00): 63, pid=12, Row Remapper: New row marked for remapping, reset gpu to activate."
            ),
            Some("0000:21:00".into())
        );
        // An application's fault is not.
        assert_eq!(
            gpu(
                "NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, name=python3.10, Ch 00000008, intr 00000000. MMU Fault"
            ),
            None
        );
        // A level-3 /dev/kmsg record counts; an informational one does not.
        assert!(gpu("3,881,91222,-;nvidia 0000:21:00.0: failed to recover").is_some());
        assert!(gpu("6,881,91222,-;nvidia 0000:21:00.0: enabling device (0000 -> 0003)").is_none());
    }

    #[test]
    fn recognised_lines_details_and_other_drivers_do_not() {
        for line in [
            "NVRM: Xid (PCI:0000:21:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "nvidia 0000:21:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
            "pcieport 0000:20:01.1: AER: Corrected error received: 0000:21:00.0",
            "nvidia 0000:21:00.0:   device [10de:2684] error status/mask=00000001/0000e000",
            "nvidia 0000:21:00.0:    [ 0] RxErr",
            "NVRM: GPU at PCI:0000:21:00: GPU-979426f2-0000-0000-0000-000000000000",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
            "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex",
            "NVRM: something about the driver with no device",
        ] {
            assert_eq!(device_line(line), None, "{line}");
        }
    }

    #[test]
    fn a_flood_of_lines_is_one_probe_per_device_a_minute() {
        let mut q = Quiet::default();
        let t0 = Instant::now();
        assert!(q.due("0000:21:00", t0));
        assert!(!q.due("0000:21:00", t0 + Duration::from_secs(5)));
        assert!(
            q.due("0000:41:00", t0 + Duration::from_secs(5)),
            "another device"
        );
        assert!(q.due("0000:21:00", t0 + KERNEL_QUIET));
    }
}
