//! What a node's reports mean, as one `Finding` for the live health monitor and for
//! `gagentd diagnose`: kernel events (Xid, fallen off the bus, NVSwitch SXid, PCIe AER), a
//! GPU the driver cannot reach, a flood of corrected link errors. A live finding travels
//! inside its `HealthEvent`, which adds what the controller acts on (its kind, and whether
//! every job on the node must stop).

use gsched_topology::xid::{AerSeverity, KernelEvent, XidAction, classify_event};
use gsched_types::findings::{Component, Finding, Severity};
use gsched_types::node::{HealthEvent, HealthKind, HealthSeverity};

/// A finding with what the controller needs to act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Noted {
    pub health: HealthKind,
    pub xid: Option<u32>,
    /// One line for a drain reason or a job's failure evidence.
    pub headline: String,
    pub finding: Finding,
}

impl Noted {
    /// The health event reporting this finding at `at_ms`. A job-failing finding that
    /// names no GPU stops every job on the node: none of its GPUs can be trusted.
    pub fn event(self, at_ms: u64) -> HealthEvent {
        let severity = match self.finding.severity {
            Severity::FailJob | Severity::Drain => HealthSeverity::Critical,
            Severity::Warn => HealthSeverity::Warning,
            Severity::Info => HealthSeverity::Info,
        };
        let stops_node_jobs = self.finding.severity == Severity::FailJob
            && self.finding.gpu.is_none()
            && matches!(self.health, HealthKind::GpuLost | HealthKind::Xid);
        HealthEvent {
            severity,
            kind: self.health,
            gpu: self.finding.gpu,
            xid: self.xid,
            message: format!("{}; {}", self.headline, self.finding.action),
            at_ms,
            stops_node_jobs,
            finding: Some(self.finding),
        }
    }
}

/// A finding on both of the axes the controller acts on. A critical health event fails
/// the job on its GPU *and* withholds the GPU and drains the node
/// (`gsched_state`'s `health_events`); its finding carries the job's outcome
/// (`FailJob`), and this gives the GPU's: the same fault as a `Drain` finding. An event
/// that drains only (a GPU that never came up) is one finding already.
pub fn event_findings(ev: &HealthEvent) -> Vec<Finding> {
    let Some(f) = ev.finding.clone() else {
        return Vec::new();
    };
    let twin = (ev.severity == HealthSeverity::Critical && f.severity == Severity::FailJob)
        .then(|| withheld(&f));
    std::iter::once(f).chain(twin).collect()
}

/// The GPU's outcome of a fault that also fails the job on it: no new job on the GPU
/// (its node drained) until it is reset or the host rebooted.
pub fn withheld(f: &Finding) -> Finding {
    Finding {
        severity: Severity::Drain,
        action: format!(
            "no new job on it until it is dealt with (the GPU is withheld and the node drained): {}",
            f.action
        ),
        ..f.clone()
    }
}

/// The GPU of the node at (or below) a PCI address.
pub type GpuOf<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// Which GPU of the node a PCI address is (or sits below), when the node's GPUs are
/// known: the live agent knows them, a saved log read on its own does not.
pub enum Attribution<'a> {
    Known(GpuOf<'a>),
    Unknown,
}

const STOPS_NODE: &str =
    "every job on the node is stopped, as it cannot be known which GPU is safe";

fn xid_action(action: XidAction) -> &'static str {
    match action {
        XidAction::RestartApp => "the application hit it: restart the job; the GPU is fine",
        XidAction::Ignore => "informational: nothing to do unless it repeats",
        XidAction::ResetWhenIdle => {
            "a row remap is pending: reset the GPU (nvidia-smi -r) when it is idle"
        }
        XidAction::ResetGpu => {
            "reset the GPU (nvidia-smi -r) before it runs another job; replace it if this recurs"
        }
        XidAction::RebootNode => {
            "the GPU is gone until the node reboots: check its riser, slot, PCIe power and Above 4G Decoding"
        }
    }
}

fn finding(
    severity: Severity,
    component: Component,
    kind: String,
    gpu: Option<u32>,
    pci: &str,
    evidence: &str,
    action: String,
) -> Finding {
    Finding {
        gpu,
        pci_bus_id: (!pci.is_empty()).then(|| pci.to_string()),
        ..Finding::new(severity, component, kind, evidence, action)
    }
}

/// What one kernel event means. Corrected AER errors and GPU identities give nothing
/// here: one corrected error is normal (see [`corrected_flood`]).
pub fn kernel_finding(ev: &KernelEvent, at: Attribution<'_>) -> Option<Noted> {
    let (known, gpu_of): (bool, GpuOf<'_>) = match at {
        Attribution::Known(f) => (true, f),
        Attribution::Unknown => (false, &|_| None),
    };
    match ev {
        KernelEvent::Xid(x) => xid_finding(x, known, gpu_of),
        KernelEvent::FallenOffBus { pci } => fallen_off_bus(pci, known, gpu_of),
        KernelEvent::SXid {
            pci,
            code,
            fatal,
            message,
        } => sxid_finding(pci, code, fatal, message),
        KernelEvent::PcieAer {
            pci,
            severity,
            detail,
        } => pcie_aer(pci, severity, detail, known, gpu_of),
        KernelEvent::GpuInitFailed { pci, line } => gpu_init_failed(pci, line, gpu_of),
        KernelEvent::NoGpus { line } => no_gpus(line),
        KernelEvent::GpuAerUnrecoverable { pci, line } => gpu_aer_unrecoverable(pci, line, gpu_of),
        KernelEvent::NvlinkFailure { device, line } => nvlink_failure(device, line, gpu_of),
        KernelEvent::Unrecognised { device, line } => unrecognised(device, line, gpu_of),
        KernelEvent::DeviceStatus {
            pci,
            status,
            state,
            line,
        } => device_status(pci, status, state, line, gpu_of),
        KernelEvent::DriverMismatch { line } => driver_mismatch(line),
        KernelEvent::NicFirmwareStuck { pci, line } => nic_firmware_stuck(pci, line),
        KernelEvent::GpuIdentity { .. } => None,
    }
}

/// An Xid, as NVIDIA's catalogue reads it.
fn xid_finding(
    x: &gsched_topology::xid::XidEvent,
    known: bool,
    gpu_of: GpuOf<'_>,
) -> Option<Noted> {
    let code = x.effective_code();
    let (action, severity) = classify_event(x);
    let gpu = gpu_of(&x.pci);
    let severity = match severity {
        HealthSeverity::Critical => Severity::FailJob,
        HealthSeverity::Warning => Severity::Warn,
        HealthSeverity::Info => Severity::Info,
    };
    let cause = if x.code == 45 && x.caused_by.is_some() {
        format!(" (Xid 45 caused by Xid {code})")
    } else {
        String::new()
    };
    let on = match gpu {
        Some(g) => format!("GPU {g} ({})", x.pci),
        None if known => format!("a GPU this node cannot name (PCI {})", x.pci),
        None => format!("GPU {}", x.pci),
    };
    let mut action = xid_action(action).to_string();
    if known && gpu.is_none() && severity == Severity::FailJob {
        action = format!("{action}; {STOPS_NODE}");
    }
    let component = if (144..=150).contains(&code) || code == 74 {
        Component::Nvlink
    } else {
        Component::Gpu
    };
    Some(Noted {
        health: if code == 79 {
            HealthKind::GpuLost
        } else {
            HealthKind::Xid
        },
        xid: Some(code),
        headline: format!("Xid {}{cause} on {on}: {}", x.code, x.message),
        finding: finding(
            severity,
            component,
            format!("xid-{code}"),
            gpu,
            &x.pci,
            &x.line,
            action,
        ),
    })
}

/// A GPU that fell off the bus (Xid 79 in other words).
fn fallen_off_bus(pci: &str, known: bool, gpu_of: GpuOf<'_>) -> Option<Noted> {
    let gpu = gpu_of(pci);
    let headline = match gpu {
        Some(_) => format!("GPU at {pci} has fallen off the bus"),
        None if known => format!(
            "a GPU this node cannot name (PCI {}) has fallen off the bus",
            if pci.is_empty() { "unknown" } else { pci }
        ),
        None => format!("GPU {pci} has fallen off the bus"),
    };
    let mut action = xid_action(XidAction::RebootNode).to_string();
    if known && gpu.is_none() {
        action = format!("{action}; {STOPS_NODE}");
    }
    Some(Noted {
        health: HealthKind::GpuLost,
        xid: Some(79),
        finding: finding(
            Severity::FailJob,
            Component::Gpu,
            "gpu-lost".into(),
            gpu,
            pci,
            &headline,
            action,
        ),
        headline,
    })
}

/// An NVSwitch SXid.
fn sxid_finding(pci: &str, code: &u32, fatal: &Option<bool>, message: &str) -> Option<Noted> {
    // The line says Fatal or Non-fatal on most drivers; NVIDIA's catalogue says
    // for the lines that do not.
    let entry = gsched_topology::xid_catalog::sxid_catalogue().get(code);
    let fatal = fatal.or(entry.map(|e| e.fatal)).unwrap_or(false);
    let headline = format!("NVSwitch {pci} SXid {code}: {message}");
    let action = entry
        .map(|e| gsched_topology::xid_catalog::sxid_advice(&e.action))
        .unwrap_or("NVSwitch fabric error: see the fabric manager log");
    Some(Noted {
        health: HealthKind::NvswitchSxid,
        xid: None,
        finding: finding(
            if fatal {
                Severity::Drain
            } else {
                Severity::Info
            },
            Component::Nvswitch,
            format!("sxid-{code}"),
            None,
            pci,
            &headline,
            action.into(),
        ),
        headline,
    })
}

/// An uncorrected PCIe AER error; a fatal one below a GPU loses the GPU.
fn pcie_aer(
    pci: &str,
    severity: &AerSeverity,
    detail: &str,
    known: bool,
    gpu_of: GpuOf<'_>,
) -> Option<Noted> {
    if *severity == AerSeverity::Corrected {
        return None;
    }
    let gpu = gpu_of(pci);
    let on = match gpu {
        Some(g) => format!("GPU {g}'s PCIe link ({pci})"),
        None if known => format!("PCIe device {pci} (no GPU below it)"),
        None => format!("PCIe device {pci}"),
    };
    let fatal = *severity == AerSeverity::Fatal;
    // A fatal error takes the device below off the bus: a GPU there is lost. On a
    // saved log the GPUs below are unknown, so any fatal one may be a GPU's.
    let loses_gpu = fatal && (gpu.is_some() || !known);
    let headline = if loses_gpu && gpu.is_some() {
        format!("fatal PCIe error ({detail}) on {on}: the GPU is off the bus")
    } else {
        format!("{severity:?} PCIe error ({detail}) on {on}")
    };
    Some(Noted {
        health: if loses_gpu {
            HealthKind::GpuLost
        } else {
            HealthKind::PcieDegraded
        },
        xid: None,
        finding: finding(
            if loses_gpu {
                Severity::FailJob
            } else {
                Severity::Warn
            },
            Component::Pcie,
            if fatal { "pcie-fatal" } else { "pcie-nonfatal" }.into(),
            gpu,
            pci,
            &headline,
            "a GPU on this port (or the port itself) dropped off the link: check its riser, cable, slot and power".into(),
        ),
        headline,
    })
}

/// A GPU the driver could not initialise.
fn gpu_init_failed(pci: &str, line: &str, gpu_of: GpuOf<'_>) -> Option<Noted> {
    let gpu = gpu_of(pci);
    let which = if pci.is_empty() {
        "a GPU".to_string()
    } else {
        format!("GPU {pci}")
    };
    Some(Noted {
        health: HealthKind::GpuLost,
        xid: None,
        headline: format!("the driver could not initialise {which}"),
        finding: finding(
            Severity::Drain,
            Component::Gpu,
            "gpu-init-failed".into(),
            gpu,
            pci,
            line,
            "the GPU is unusable until fixed: check Above 4G Decoding and Resizable BAR in the BIOS, its seating and PCIe power, and that the driver supports it (the RmInitAdapter code goes in an nvidia-bug-report); reboot after the fix".into(),
        ),
    })
}

/// A driver that found no GPU it can use.
fn no_gpus(line: &str) -> Option<Noted> {
    Some(Noted {
    health: HealthKind::GpuCount,
    xid: None,
    headline: "the NVIDIA driver found no GPU it can use".into(),
    finding: finding(
        Severity::Drain,
        Component::Driver,
        "no-gpus".into(),
        None,
        "",
        line,
        "check that lspci lists the GPUs, that nouveau is blacklisted (it takes the GPUs first), and that this driver supports them".into(),
    ),
})
}

/// A GPU that cannot recover from a fatal PCIe error.
fn gpu_aer_unrecoverable(pci: &str, line: &str, gpu_of: GpuOf<'_>) -> Option<Noted> {
    let gpu = gpu_of(pci);
    Some(Noted {
        health: HealthKind::GpuLost,
        xid: None,
        headline: format!("the GPU at {pci} cannot recover from a fatal PCIe error"),
        finding: finding(
            Severity::FailJob,
            Component::Pcie,
            "pcie-fatal".into(),
            gpu,
            pci,
            line,
            "the GPU is off the bus until the node reboots: check its riser, cable, slot and PCIe power".into(),
        ),
    })
}

/// An NVLink that did not come up.
fn nvlink_failure(device: &str, line: &str, gpu_of: GpuOf<'_>) -> Option<Noted> {
    Some(Noted {
    health: HealthKind::Driver,
    xid: None,
    headline: format!("an NVLink of {} failed to come up", if device.is_empty() { "a GPU" } else { device }),
    finding: finding(
        Severity::Warn,
        Component::Nvlink,
        "nvlink-failed".into(),
        gpu_of(device),
        if device.contains(':') { device } else { "" },
        line,
        "jobs on this GPU fall back to PCIe (slower) or hang in NVLink collectives: check the NVLink bridge or baseboard, nvidia-smi nvlink -s, and the fabric manager on NVSwitch systems".into(),
    ),
})
}

/// An NVRM line no rule knows: a warning naming the device.
fn unrecognised(device: &str, line: &str, gpu_of: GpuOf<'_>) -> Option<Noted> {
    let on = if device.is_empty() {
        "the driver".to_string()
    } else {
        device.to_string()
    };
    // Unknown is visible, never silent: a warning naming the device; the live
    // agent's GPU health probe checks that GPU and reports its verdict after it.
    Some(Noted {
        health: HealthKind::Driver,
        xid: None,
        headline: format!("unrecognised NVRM message on {on}"),
        finding: finding(
            Severity::Warn,
            Component::Driver,
            "nvrm-unrecognised".into(),
            gpu_of(device),
            if device.contains(':') { device } else { "" },
            &format!("unrecognised NVRM message on {on}: {line}"),
            UNKNOWN_DRIVER_LINE.into(),
        ),
    })
}

/// A driver status code that says the GPU's state.
fn device_status(
    pci: &str,
    status: &str,
    state: &gsched_topology::nv_status::GpuState,
    line: &str,
    gpu_of: GpuOf<'_>,
) -> Option<Noted> {
    use gsched_topology::nv_status::GpuState;
    let gpu = gpu_of(pci);
    let which = if pci.is_empty() {
        "a GPU".to_string()
    } else {
        format!("GPU {pci}")
    };
    let (severity, component, kind, health, action) = match state {
        GpuState::ResetRequired => (
            Severity::Drain,
            Component::Gpu,
            "gpu-reset-required",
            HealthKind::GpuLost,
            "the GPU refuses work until it is reset: reset it (nvidia-smi -r) or reboot the node when idle; replace it if it recurs",
        ),
        GpuState::Lost => (
            Severity::Drain,
            Component::Gpu,
            "gpu-lost",
            HealthKind::GpuLost,
            "the GPU is gone until the node reboots: check its riser, slot and PCIe power",
        ),
        GpuState::Memory => (
            Severity::Drain,
            Component::Gpu,
            "ecc-driver-status",
            HealthKind::Ecc,
            "the GPU's memory failed: reset it when idle and check its remapped rows (nvidia-smi -q -d ROW_REMAPPER); replace it if it recurs",
        ),
        GpuState::DriverMismatch => (
            Severity::Drain,
            Component::Driver,
            "driver-mismatch",
            HealthKind::Driver,
            DRIVER_MISMATCH,
        ),
        GpuState::InitFailed => (
            Severity::Drain,
            Component::Gpu,
            "gpu-init-failed",
            HealthKind::GpuLost,
            "the GPU is unusable until fixed: check its firmware (VBIOS), the driver's support for it, and reboot after the fix",
        ),
        GpuState::Firmware => (
            Severity::Warn,
            Component::Gpu,
            "gpu-firmware-error",
            HealthKind::Driver,
            "a microcontroller on the GPU asserted or halted: the node's GPU health probe checks the GPU and reports its verdict",
        ),
        GpuState::Nvlink => (
            Severity::Warn,
            Component::Nvlink,
            "nvlink-driver-status",
            HealthKind::Driver,
            "an NVLink or the fabric failed: check nvidia-smi nvlink -s and, on NVSwitch systems, the fabric manager",
        ),
        GpuState::Call => return None,
    };
    Some(Noted {
        health,
        xid: None,
        headline: format!("the driver reports {status} on {which}"),
        finding: finding(
            severity,
            component,
            kind.into(),
            gpu,
            pci,
            line,
            action.into(),
        ),
    })
}

/// Kernel module and user-space libraries of different versions.
fn driver_mismatch(line: &str) -> Option<Noted> {
    Some(Noted {
        health: HealthKind::Driver,
        xid: None,
        headline: "the NVIDIA kernel module and its clients are of different versions".into(),
        finding: finding(
            Severity::Drain,
            Component::Driver,
            "driver-mismatch".into(),
            None,
            "",
            line,
            DRIVER_MISMATCH.into(),
        ),
    })
}

/// A ConnectX adapter whose firmware stopped answering.
fn nic_firmware_stuck(pci: &str, line: &str) -> Option<Noted> {
    Some(Noted {
    health: HealthKind::NicDown,
    xid: None,
    headline: format!("the ConnectX adapter {pci} does not complete its firmware commands"),
    finding: finding(
        Severity::Drain,
        Component::Ib,
        "ib-firmware-cmd-timeout".into(),
        None,
        pci,
        line,
        "the adapter's firmware stopped answering (RDMA set-up on it fails): reset the adapter (mlxfwreset) or reboot, and update its firmware before the node takes multi-node jobs".into(),
    ),
})
}

const DRIVER_MISMATCH: &str = "the NVIDIA user-space libraries and the loaded kernel module are of different versions (an upgrade under a loaded module, a DKMS build for another version, a container's libraries): no CUDA or NVML client works; reboot into (or load) the matching module, or install matching libraries, then resume the node";

const UNKNOWN_DRIVER_LINE: &str = "gsched has no rule for this message: the node's GPU health probe checks the device it names and reports its verdict (gagentd probe does the same by hand); if a job fails with it or it repeats, keep the kernel log and an nvidia-bug-report";

/// A line from a GPU, NVSwitch, PCIe or NIC driver that names `device` (a PCI address or
/// `GPUn`) and that no rule reads: a warning naming the device (NVRM's own lines are
/// `KernelEvent::Unrecognised`).
pub fn driver_unrecognised(device: &str, gpu: Option<u32>, line: &str) -> Noted {
    let msg = line.trim();
    let (component, driver) = if msg.contains("mlx5") {
        (Component::Nic, "mlx5")
    } else if msg.contains("nvswitch") {
        (Component::Nvswitch, "nvidia-nvswitch")
    } else if msg.contains("pcieport") || msg.contains("AER") {
        (Component::Pcie, "PCIe")
    } else {
        (Component::Driver, "nvidia")
    };
    Noted {
        health: HealthKind::Driver,
        xid: None,
        headline: format!("unrecognised {driver} message on {device}"),
        finding: finding(
            Severity::Warn,
            component,
            "driver-unrecognised".into(),
            gpu,
            if device.contains(':') { device } else { "" },
            &format!("unrecognised {driver} message on {device}: {msg}"),
            UNKNOWN_DRIVER_LINE.into(),
        ),
    }
}

/// Whether a line reads like a report of something wrong: it speaks of an error, a
/// failure, a fatal condition, an Xid, the NVIDIA driver (NVRM), a warning (`WARN`), a
/// panic, an abort, an exception, or shows an `ERR!` cell; not a field that counts
/// nothing (`Retired Pages : 0`, `ECC Errors : N/A`) or a bare heading.
pub fn error_words(line: &str) -> bool {
    let t = line.trim();
    let lower = t.to_ascii_lowercase();
    let words = [
        "error",
        "fail",
        "fatal",
        "xid",
        "nvrm",
        "panic",
        "abort",
        "segfault",
        "exception",
        "traceback",
        "err!",
    ];
    let found: Vec<usize> = words
        .iter()
        .flat_map(|w| lower.match_indices(w).map(move |(p, _)| p + w.len()))
        .collect();
    if found.is_empty() && !t.contains("WARN") {
        return false;
    }
    // Counters of nothing: `errors:0`, `RX errors 0`, `Fail count = 0`.
    let zero = |end: usize| {
        let rest = lower[end..]
            .trim_start_matches(|c: char| c.is_ascii_alphabetic())
            .trim_start_matches([':', '=', ' ', '\t']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        !digits.is_empty() && digits.chars().all(|c| c == '0')
    };
    if !t.contains("WARN") && found.iter().all(|end| zero(*end)) {
        return false;
    }
    let value = t
        .split_once(" : ")
        .or_else(|| t.split_once(": "))
        .or_else(|| t.split_once(" = "))
        .map(|(_, v)| v.trim().to_ascii_lowercase());
    if let Some(v) = value {
        let nothing = [
            "0",
            "n/a",
            "[n/a]",
            "<n/a>",
            "none",
            "no",
            "disabled",
            "not active",
            "not supported",
            "[not supported]",
            "false",
            "0 %",
            "0x0",
        ];
        if nothing.contains(&v.as_str()) || v.parse::<f64>().is_ok_and(|n| n == 0.0) {
            return false;
        }
    }
    // A heading (`ECC Errors`, `Retired Pages`, `Failures:`).
    let words: Vec<&str> = t.trim_end_matches(':').split_whitespace().collect();
    let heading = words.len() <= 3
        && words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_alphabetic() || c == '-'));
    !heading
}

/// Many corrected PCIe errors on one link (`count` within `window_s`, or in a whole saved
/// log): a marginal riser, cable or slot.
pub fn corrected_flood(
    pci: &str,
    gpu: Option<u32>,
    count: u32,
    window_s: Option<u64>,
    detail: &str,
) -> Noted {
    let on = gpu
        .map(|g| format!("GPU {g}'s PCIe link ({pci})"))
        .unwrap_or_else(|| format!("PCIe device {pci}"));
    let within = window_s
        .map(|s| format!(" within {s} s"))
        .unwrap_or_default();
    let headline = if detail.is_empty() {
        format!("more than {count} corrected PCIe errors{within} on {on}")
    } else {
        format!("{count} corrected PCIe errors ({detail}){within} on {on}")
    };
    Noted {
        health: HealthKind::PcieDegraded,
        xid: None,
        finding: finding(
            Severity::Warn,
            Component::Pcie,
            "pcie-corrected".into(),
            gpu,
            pci,
            &headline,
            "many corrected errors mean a marginal riser, cable or slot: reseat it, or lower the slot to Gen3".into(),
        ),
        headline,
    }
}

/// The driver cannot reach a GPU (nvidia-smi's "Unable to determine the device handle",
/// NVML failing to open its handle): it is lost to jobs until someone looks.
/// Where the GPU is known (the live agent), the job on it cannot go on; a saved
/// `nvidia-smi` output names only the bus.
pub fn device_handle_lost(gpu: Option<u32>, pci: &str, error: &str) -> Noted {
    let which = match (pci.is_empty(), gpu) {
        (false, _) => pci.to_string(),
        (true, Some(g)) => g.to_string(),
        (true, None) => "?".to_string(),
    };
    let headline = format!("Unable to determine the device handle for GPU {which}: {error}");
    Noted {
        health: HealthKind::GpuLost,
        xid: None,
        finding: finding(
            if gpu.is_some() {
                Severity::FailJob
            } else {
                Severity::Drain
            },
            Component::Gpu,
            "gpu-lost".into(),
            gpu,
            pci,
            &headline,
            "the driver cannot reach this GPU: check it is seated and powered (riser, PCIe power), reboot; reseat or replace it if it recurs".into(),
        ),
        headline,
    }
}

/// A finding seen directly (a NIC, a GPU's link or temperature, a GPU gone from the
/// topology): the headline is its evidence.
pub fn observed(
    health: HealthKind,
    severity: Severity,
    component: Component,
    kind: &str,
    gpu: Option<u32>,
    headline: String,
    action: &str,
) -> Noted {
    Noted {
        health,
        xid: None,
        finding: finding(
            severity,
            component,
            kind.to_string(),
            gpu,
            "",
            &headline,
            action.to_string(),
        ),
        headline,
    }
}

#[cfg(test)]
mod tests {
    use super::error_words;

    #[test]
    fn lines_that_read_like_errors_and_fields_that_count_nothing() {
        for l in [
            "[ 1234.5] NVRM: GPU at PCI:0000:3b:00: GPU-1234 something odd",
            "        Uncorrectable Error          : 3",
            "| N/A   ERR!  P0    ERR! / 300W |",
            "0, NVIDIA H100, [Unknown Error]",
            "mlx5_core 0000:5e:00.0: mlx5_cmd_out_err:838: QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed",
            "host:1:2 [0] NCCL WARN something",
        ] {
            assert!(error_words(l), "{l}");
        }
        for l in [
            "        Retired Pages : 0",
            "    ECC Errors",
            "        Volatile Uncorr. ECC : N/A",
            "Failures:",
            "Pending Page Blacklist : No",
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)",
            "RX packets:0 errors:0 dropped:0 overruns:0 frame:0",
            "    RX errors 0  dropped 0  overruns 0  frame 0",
        ] {
            assert!(!error_words(l), "{l}");
        }
    }
}
