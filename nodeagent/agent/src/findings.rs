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
        KernelEvent::Xid(x) => {
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
        KernelEvent::FallenOffBus { pci } => {
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
        KernelEvent::SXid {
            pci,
            code,
            fatal,
            message,
        } => {
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
                    if fatal { Severity::Drain } else { Severity::Info },
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
        KernelEvent::PcieAer {
            pci,
            severity,
            detail,
        } => {
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
        KernelEvent::GpuInitFailed { pci, line } => {
            let gpu = gpu_of(pci);
            let which = if pci.is_empty() { "a GPU".to_string() } else { format!("GPU {pci}") };
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
        KernelEvent::NoGpus { line } => Some(Noted {
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
        }),
        KernelEvent::GpuAerUnrecoverable { pci, line } => {
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
        KernelEvent::NvlinkFailure { device, line } => Some(Noted {
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
        }),
        KernelEvent::Unrecognised { device, line } => {
            let on = if device.is_empty() { "the driver".to_string() } else { device.clone() };
            Some(Noted {
                health: HealthKind::Driver,
                xid: None,
                headline: format!("unrecognised NVRM message on {on}"),
                finding: finding(
                    Severity::Info,
                    Component::Driver,
                    "nvrm-unrecognised".into(),
                    gpu_of(device),
                    if device.contains(':') { device } else { "" },
                    &format!("unrecognised NVRM message on {on}: {line}"),
                    "gsched does not know this message: if a job fails with it or it repeats, keep the kernel log and an nvidia-bug-report".into(),
                ),
            })
        }
        KernelEvent::GpuIdentity { .. } => None,
    }
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
