//! The probe's pure decision: what a GPU's state (against what the node registered and
//! the previous reading) and its active check mean, as findings. Lost, reset required,
//! pending or failed memory repairs, new uncorrected ECC errors and a failed or hung
//! active check make a GPU nobody can use (drain); throttling by hardware, a narrower
//! PCIe link, a link down or erring make it degraded (warn); persistence mode off is
//! information. Idle, sync boost, application and power-cap clock reasons are normal.

use super::state::{ActiveResult, ClockReasons, GpuState, Reach, RegisteredGpu};
use crate::findings::Noted;
use gsched_types::findings::{Component, Finding, Severity};
use gsched_types::node::HealthKind;

/// One thing the probe found wrong with a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Lost,
    ResetRequired,
    NoHandle,
    RemapPending,
    RemapFailed,
    RetiredPagesPending,
    EccUncorrected,
    HwSlowdown,
    PowerBrake,
    Thermal,
    NvlinkDown,
    NvlinkErrors,
    PcieDegraded,
    ActiveCheckFailed,
    ActiveCheckHang,
    /// The probe itself did not finish (NVML or the driver stopped answering).
    ProbeHang,
    PersistenceOff,
    /// An Xid NVML delivered through its event set.
    Xid(u32),
}

impl Fault {
    /// The finding's kind.
    pub fn kind(&self) -> String {
        match self {
            Fault::Lost => "gpu-lost".into(),
            Fault::ResetRequired => "gpu-reset-required".into(),
            Fault::NoHandle => "gpu-no-handle".into(),
            Fault::RemapPending => "gpu-remap-pending".into(),
            Fault::RemapFailed => "gpu-remap-failed".into(),
            Fault::RetiredPagesPending => "gpu-retired-pages-pending".into(),
            Fault::EccUncorrected => "gpu-ecc-uncorrected".into(),
            Fault::HwSlowdown => "gpu-hw-slowdown".into(),
            Fault::PowerBrake => "gpu-power-brake".into(),
            Fault::Thermal => "gpu-thermal".into(),
            Fault::NvlinkDown => "nvlink-down".into(),
            Fault::NvlinkErrors => "nvlink-errors".into(),
            Fault::PcieDegraded => "pcie-degraded".into(),
            Fault::ActiveCheckFailed => "gpu-active-check-failed".into(),
            Fault::ActiveCheckHang => "gpu-active-check-hang".into(),
            Fault::ProbeHang => "gpu-probe-hang".into(),
            Fault::PersistenceOff => "gpu-persistence-off".into(),
            Fault::Xid(code) => format!("xid-{code}"),
        }
    }

    pub fn severity(&self) -> Severity {
        match self {
            Fault::Lost
            | Fault::ResetRequired
            | Fault::NoHandle
            | Fault::RemapPending
            | Fault::RemapFailed
            | Fault::RetiredPagesPending
            | Fault::EccUncorrected
            | Fault::ActiveCheckFailed
            | Fault::ActiveCheckHang
            | Fault::ProbeHang => Severity::Drain,
            Fault::HwSlowdown
            | Fault::PowerBrake
            | Fault::Thermal
            | Fault::NvlinkDown
            | Fault::NvlinkErrors
            | Fault::PcieDegraded => Severity::Warn,
            Fault::PersistenceOff => Severity::Info,
            Fault::Xid(code) => match gsched_topology::xid::classify(*code).1 {
                gsched_types::node::HealthSeverity::Critical => Severity::Drain,
                gsched_types::node::HealthSeverity::Warning => Severity::Warn,
                gsched_types::node::HealthSeverity::Info => Severity::Info,
            },
        }
    }

    /// The health kind the controller acts on (the finding's kind says more).
    pub fn health(&self) -> HealthKind {
        match self {
            Fault::Lost
            | Fault::ResetRequired
            | Fault::NoHandle
            | Fault::ActiveCheckFailed
            | Fault::ActiveCheckHang
            | Fault::ProbeHang => HealthKind::GpuLost,
            Fault::RemapPending | Fault::RetiredPagesPending => HealthKind::RemapPending,
            Fault::RemapFailed | Fault::EccUncorrected => HealthKind::Ecc,
            Fault::HwSlowdown | Fault::PowerBrake | Fault::Thermal => HealthKind::Temperature,
            Fault::PcieDegraded => HealthKind::PcieDegraded,
            Fault::NvlinkDown | Fault::NvlinkErrors | Fault::PersistenceOff => HealthKind::Driver,
            Fault::Xid(_) => HealthKind::Xid,
        }
    }

    fn component(&self) -> Component {
        match self {
            Fault::NvlinkDown | Fault::NvlinkErrors => Component::Nvlink,
            Fault::PcieDegraded => Component::Pcie,
            Fault::PersistenceOff => Component::Driver,
            _ => Component::Gpu,
        }
    }

    fn action(&self) -> &'static str {
        match self {
            Fault::Lost | Fault::NoHandle => {
                "the driver cannot reach this GPU: check it is seated and powered (riser, PCIe power), reboot; reseat or replace it if it recurs"
            }
            Fault::ResetRequired => {
                "reset the GPU (nvidia-smi -r, or reboot) before it runs another job; replace it if this recurs"
            }
            Fault::RemapPending | Fault::RetiredPagesPending => {
                "memory repairs wait for a GPU reset: reset it (nvidia-smi -r) while it is idle, then resume the node"
            }
            Fault::RemapFailed => "the GPU has no spare memory rows left: replace it (RMA)",
            Fault::EccUncorrected => {
                "uncorrectable memory errors: reset the GPU; if they come back after the reset, replace it"
            }
            Fault::HwSlowdown | Fault::Thermal => {
                "the GPU runs at reduced clocks: check its cooling (fans, airflow, inlet temperature) and power"
            }
            Fault::PowerBrake => {
                "the power supply asserts the power brake: check the PSUs and the node's power budget"
            }
            Fault::NvlinkDown | Fault::NvlinkErrors => {
                "jobs on this GPU fall back to PCIe or hang in NVLink collectives: check nvidia-smi nvlink -s, the baseboard or bridge, and the fabric manager on NVSwitch systems"
            }
            Fault::PcieDegraded => {
                "check the riser and the slot (seating, a x16 slot wired x8, a riser cable that cannot carry the generation)"
            }
            Fault::ActiveCheckFailed => {
                "CUDA does not work on this GPU: reset it (nvidia-smi -r) or reboot; check the driver and CUDA library versions match (a cuInit failure names a mismatch)"
            }
            Fault::ActiveCheckHang | Fault::ProbeHang => {
                "the driver stopped answering for this GPU: reset it or reboot the node; keep nvidia-bug-report output if it recurs"
            }
            Fault::PersistenceOff => {
                "enable persistence mode (nvidia-smi -pm 1 or nvidia-persistenced) so jobs start faster and the driver keeps the GPU's state"
            }
            Fault::Xid(code) => xid_advice(*code),
        }
    }
}

fn xid_advice(code: u32) -> &'static str {
    match gsched_topology::xid::classify(code).0 {
        gsched_topology::xid::XidAction::RestartApp => {
            "the application hit it: restart the job; the GPU is fine"
        }
        gsched_topology::xid::XidAction::Ignore => "informational: nothing to do unless it repeats",
        gsched_topology::xid::XidAction::ResetWhenIdle => {
            "a row remap is pending: reset the GPU (nvidia-smi -r) when it is idle"
        }
        gsched_topology::xid::XidAction::ResetGpu => {
            "reset the GPU (nvidia-smi -r) before it runs another job; replace it if this recurs"
        }
        gsched_topology::xid::XidAction::RebootNode => {
            "the GPU is gone until the node reboots: check its riser, slot, PCIe power"
        }
    }
}

/// A fault with the finding that reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub fault: Fault,
    pub finding: Finding,
    /// The state seen, without what set the probe off: a drain reason.
    pub headline: String,
}

impl Found {
    fn new(fault: Fault, gpu: u32, pci: Option<&str>, evidence: String) -> Found {
        let finding = Finding {
            gpu: Some(gpu),
            pci_bus_id: pci.map(gsched_topology::xid::normalize_pci),
            ..Finding::new(
                fault.severity(),
                fault.component(),
                fault.kind(),
                &evidence,
                fault.action(),
            )
        };
        Found {
            fault,
            finding,
            headline: evidence,
        }
    }

    /// The finding with what set the probe off appended to its evidence (a kernel line, a
    /// job's failure).
    pub fn triggered_by(mut self, trigger: Option<&str>) -> Found {
        if let Some(t) = trigger.filter(|t| !t.trim().is_empty()) {
            self.finding.evidence = gsched_types::findings::clip(
                &format!("{}; probed after: {}", self.finding.evidence, t.trim()),
                gsched_types::findings::MAX_EVIDENCE_CHARS,
            );
        }
        self
    }

    /// What the agent reports: the finding with the health kind the controller acts on.
    pub fn noted(&self) -> Noted {
        Noted {
            health: self.fault.health(),
            xid: match self.fault {
                Fault::Xid(code) => Some(code),
                _ => None,
            },
            headline: format!("health probe: {}", self.headline),
            finding: self.finding.clone(),
        }
    }
}

/// What the probe concludes about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing keeps it from the next job; `notes` are informational.
    Healthy { notes: Vec<Found> },
    /// It works, below what it should (warnings only).
    Degraded { found: Vec<Found> },
    /// Nobody can use it, or it needs a reset: it is drained.
    Unusable { found: Vec<Found> },
}

impl Verdict {
    fn of(mut found: Vec<Found>) -> Verdict {
        found.sort_by_key(|f| std::cmp::Reverse(f.finding.severity));
        match found.first().map(|f| f.finding.severity) {
            Some(Severity::Drain | Severity::FailJob) => Verdict::Unusable { found },
            Some(Severity::Warn) => Verdict::Degraded { found },
            _ => Verdict::Healthy { notes: found },
        }
    }

    /// Everything found, worst first.
    pub fn found(&self) -> &[Found] {
        match self {
            Verdict::Healthy { notes } => notes,
            Verdict::Degraded { found } | Verdict::Unusable { found } => found,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Healthy { .. } => "healthy",
            Verdict::Degraded { .. } => "degraded",
            Verdict::Unusable { .. } => "unusable",
        }
    }

    pub fn is_unusable(&self) -> bool {
        matches!(self, Verdict::Unusable { .. })
    }
}

/// The verdict on one GPU: `now` read against what the node `registered`, the previous
/// reading `before` (counters that grew since), and the active check, if one ran.
pub fn judge(
    registered: &RegisteredGpu,
    before: Option<&GpuState>,
    now: &GpuState,
    active: Option<&ActiveResult>,
) -> Verdict {
    let gpu = registered.gpu;
    let pci = registered.pci_bus_id.as_deref();
    let mut out = Vec::new();
    let mut found =
        |fault: Fault, evidence: String| out.push(Found::new(fault, gpu, pci, evidence));
    reach(gpu, now, &mut found);
    memory(gpu, before, now, &mut found);
    clocks(gpu, now, &mut found);
    nvlinks(registered, before, now, &mut found);
    pcie(registered, now, &mut found);
    events_and_checks(gpu, now, active, &mut found);
    Verdict::of(out)
}

/// Whether NVML reaches the GPU.
fn reach(gpu: u32, now: &GpuState, mut found: impl FnMut(Fault, String)) {
    match &now.reach {
        Reach::Ok => {}
        Reach::Lost => found(
            Fault::Lost,
            format!("NVML reports GPU {gpu} lost (NVML_ERROR_GPU_IS_LOST)"),
        ),
        Reach::ResetRequired => found(
            Fault::ResetRequired,
            format!("NVML reports GPU {gpu} needs a reset (NVML_ERROR_RESET_REQUIRED)"),
        ),
        Reach::NoHandle { error } => found(
            Fault::NoHandle,
            format!("Unable to determine the device handle for GPU {gpu}: {error}"),
        ),
    }
}

/// Row remaps, pages waiting to be retired and uncorrected ECC errors since the last probe.
fn memory(
    gpu: u32,
    before: Option<&GpuState>,
    now: &GpuState,
    mut found: impl FnMut(Fault, String),
) {
    if let Some(r) = now.remapped_rows {
        if r.failure {
            found(
                Fault::RemapFailed,
                format!(
                    "GPU {gpu}: a row remap failed ({} uncorrectable, {} correctable rows remapped)",
                    r.uncorrectable, r.correctable
                ),
            );
        }
        if r.pending {
            found(
                Fault::RemapPending,
                format!(
                    "GPU {gpu}: a row remap is pending until the next reset ({} uncorrectable, {} correctable rows remapped)",
                    r.uncorrectable, r.correctable
                ),
            );
        }
    }
    if now.retired_pages_pending == Some(true) {
        found(
            Fault::RetiredPagesPending,
            format!("GPU {gpu}: memory pages wait to be retired at the next reset"),
        );
    }
    if let Some(n) = now.ecc_uncorrected_volatile.filter(|n| *n > 0) {
        match before.and_then(|b| b.ecc_uncorrected_volatile) {
            Some(was) if n <= was => {}
            Some(was) => found(
                Fault::EccUncorrected,
                format!(
                    "GPU {gpu}: {} new uncorrected ECC errors ({n} since the last reset, {was} at the previous probe)",
                    n - was
                ),
            ),
            None => found(
                Fault::EccUncorrected,
                format!(
                    "GPU {gpu}: {n} uncorrected ECC errors since the driver loaded or the GPU was last reset"
                ),
            ),
        }
    }
}

/// Clock-event reasons that mean a fault (power brake, thermal, hardware slowdown).
fn clocks(gpu: u32, now: &GpuState, mut found: impl FnMut(Fault, String)) {
    if let Some(c) = now.clock_reasons {
        let named = c.names().join(", ");
        if c.has(ClockReasons::HW_POWER_BRAKE) {
            found(
                Fault::PowerBrake,
                format!(
                    "GPU {gpu}: clocks held down by the hardware power brake (reasons: {named})"
                ),
            );
        }
        if c.has(ClockReasons::HW_THERMAL) || c.has(ClockReasons::SW_THERMAL) {
            found(
                Fault::Thermal,
                format!("GPU {gpu}: clocks held down for temperature (reasons: {named})"),
            );
        }
        let explained = c.has(ClockReasons::HW_POWER_BRAKE) || c.has(ClockReasons::HW_THERMAL);
        if c.has(ClockReasons::HW_SLOWDOWN) && !explained {
            found(
                Fault::HwSlowdown,
                format!("GPU {gpu}: hardware slowdown engaged (reasons: {named})"),
            );
        }
    }
}

/// NVLinks down against registration or the previous probe, and error counters that grew.
fn nvlinks(
    registered: &RegisteredGpu,
    before: Option<&GpuState>,
    now: &GpuState,
    mut found: impl FnMut(Fault, String),
) {
    let gpu = registered.gpu;
    if let Some(links) = &now.nvlinks {
        let down: Vec<u32> = links.iter().filter(|l| !l.active).map(|l| l.link).collect();
        let up = links.len() - down.len();
        let was_up = |link: u32| {
            before
                .and_then(|b| b.nvlinks.as_ref())
                .and_then(|ls| ls.iter().find(|l| l.link == link))
                .is_some_and(|l| l.active)
        };
        let fewer = registered.nvlinks.is_some_and(|n| (up as u32) < n);
        let lost_since: Vec<u32> = down.iter().copied().filter(|l| was_up(*l)).collect();
        if fewer || !lost_since.is_empty() {
            let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let registered_n = registered
                .nvlinks
                .map(|n| format!(", {n} when the node registered"))
                .unwrap_or_default();
            found(
                Fault::NvlinkDown,
                format!(
                    "GPU {gpu}: NVLink {} down ({up} active{registered_n})",
                    list(&down)
                ),
            );
        }
        let grew = |l: &super::state::NvLinkState,
                    f: fn(&super::state::NvLinkState) -> Option<u64>| {
            let old = before
                .and_then(|b| b.nvlinks.as_ref())
                .and_then(|ls| ls.iter().find(|o| o.link == l.link))
                .and_then(f)?;
            f(l).filter(|n| *n > old).map(|n| n - old)
        };
        let erring: Vec<String> = links
            .iter()
            .filter_map(|l| {
                let replay = grew(l, |s| s.replay_errors);
                let recovery = grew(l, |s| s.recovery_errors);
                (replay.is_some() || recovery.is_some()).then(|| {
                    format!(
                        "link {}: +{} replays, +{} recoveries, +{} CRC errors",
                        l.link,
                        replay.unwrap_or(0),
                        recovery.unwrap_or(0),
                        grew(l, |s| s.crc_errors).unwrap_or(0)
                    )
                })
            })
            .collect();
        if !erring.is_empty() {
            found(
                Fault::NvlinkErrors,
                format!(
                    "GPU {gpu}: NVLink errors since the previous probe ({})",
                    erring.join("; ")
                ),
            );
        }
    }
}

/// The PCIe link's width against the maximum.
fn pcie(registered: &RegisteredGpu, now: &GpuState, mut found: impl FnMut(Fault, String)) {
    let gpu = registered.gpu;
    // An idle GPU drops its PCIe generation to save power: only the width is judged.
    if let Some(p) = now.pcie {
        let max = registered.pcie_width_max.or(p.width_max);
        if let (Some(width), Some(max)) = (p.width, max)
            && width < max
        {
            found(
                Fault::PcieDegraded,
                format!("GPU {gpu}: PCIe link trained at x{width}, max x{max}"),
            );
        }
    }
}

/// Xids NVML delivered, the active check's result and persistence mode.
fn events_and_checks(
    gpu: u32,
    now: &GpuState,
    active: Option<&ActiveResult>,
    mut found: impl FnMut(Fault, String),
) {
    for &code in &now.xids {
        found(
            Fault::Xid(code),
            format!("NVML delivered Xid {code} for GPU {gpu}"),
        );
    }
    match active {
        Some(ActiveResult::Failed { step, error, ms }) => found(
            Fault::ActiveCheckFailed,
            format!(
                "GPU {gpu}: the CUDA check failed at {} after {ms} ms: {error}",
                step.name()
            ),
        ),
        Some(ActiveResult::Hung { limit_ms }) => found(
            Fault::ActiveCheckHang,
            format!("GPU {gpu}: the CUDA check did not finish within {limit_ms} ms"),
        ),
        Some(ActiveResult::Passed { .. } | ActiveResult::Unavailable { .. }) | None => {}
    }
    if now.persistence_mode == Some(false) {
        found(
            Fault::PersistenceOff,
            format!("GPU {gpu}: persistence mode is off"),
        );
    }
}

/// The verdict on a GPU whose probe did not finish within `limit_ms`.
pub fn probe_hung(registered: &RegisteredGpu, limit_ms: u64) -> Verdict {
    Verdict::of(vec![Found::new(
        Fault::ProbeHang,
        registered.gpu,
        registered.pci_bus_id.as_deref(),
        format!(
            "GPU {}: the health probe did not finish within {limit_ms} ms (NVML or the driver stopped answering)",
            registered.gpu
        ),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::state::{ActiveStep, NvLinkState, PcieState, RemappedRows};

    fn registered() -> RegisteredGpu {
        RegisteredGpu {
            gpu: 3,
            pci_bus_id: Some("00000000:41:00.0".into()),
            uuid: None,
            pcie_gen_max: Some(5),
            pcie_width_max: Some(16),
            nvlinks: Some(4),
        }
    }

    fn links(down: &[u32]) -> Vec<NvLinkState> {
        (0..4)
            .map(|link| NvLinkState {
                link,
                active: !down.contains(&link),
                crc_errors: Some(0),
                replay_errors: Some(0),
                recovery_errors: Some(0),
            })
            .collect()
    }

    /// A healthy H100 as NVML reads it: every figure present, nothing wrong.
    fn healthy() -> GpuState {
        GpuState {
            gpu: 3,
            reach: Reach::Ok,
            retired_pages_pending: None,
            remapped_rows: Some(RemappedRows::default()),
            ecc_uncorrected_volatile: Some(0),
            clock_reasons: Some(ClockReasons(ClockReasons::GPU_IDLE)),
            nvlinks: Some(links(&[])),
            pcie: Some(PcieState {
                generation: Some(1),
                generation_max: Some(5),
                width: Some(16),
                width_max: Some(16),
            }),
            persistence_mode: Some(true),
            xids: Vec::new(),
        }
    }

    fn kinds(v: &Verdict) -> Vec<String> {
        v.found().iter().map(|f| f.finding.kind.clone()).collect()
    }

    fn unusable(now: &GpuState) -> Vec<String> {
        let v = judge(&registered(), None, now, None);
        assert!(v.is_unusable(), "{v:?}");
        assert!(
            v.found().iter().all(|f| f.finding.gpu == Some(3)
                && f.finding.pci_bus_id.as_deref() == Some("0000:41:00"))
        );
        kinds(&v)
    }

    fn degraded(before: Option<&GpuState>, now: &GpuState) -> Vec<String> {
        let v = judge(&registered(), before, now, None);
        assert!(matches!(v, Verdict::Degraded { .. }), "{v:?}");
        kinds(&v)
    }

    #[test]
    fn a_healthy_gpu_is_healthy_and_an_idle_link_generation_is_not_a_fault() {
        let v = judge(
            &registered(),
            None,
            &healthy(),
            Some(&ActiveResult::Passed {
                ms: 400,
                kernel_skipped: None,
            }),
        );
        assert_eq!(v, Verdict::Healthy { notes: vec![] });
    }

    #[test]
    fn figures_the_device_does_not_have_are_not_faults() {
        let bare = GpuState::reachable(3);
        assert_eq!(
            judge(&registered(), None, &bare, None),
            Verdict::Healthy { notes: vec![] }
        );
        let unavailable = ActiveResult::Unavailable {
            why: "cannot load libcuda.so.1".into(),
        };
        assert_eq!(
            judge(&registered(), None, &bare, Some(&unavailable)),
            Verdict::Healthy { notes: vec![] }
        );
    }

    #[test]
    fn a_gpu_nobody_can_reach_is_unusable() {
        let mut s = healthy();
        s.reach = Reach::Lost;
        assert_eq!(unusable(&s), ["gpu-lost"]);
        s.reach = Reach::ResetRequired;
        assert_eq!(unusable(&s), ["gpu-reset-required"]);
        s.reach = Reach::NoHandle {
            error: "Unknown Error".into(),
        };
        let v = judge(&registered(), None, &s, None);
        assert_eq!(kinds(&v), ["gpu-no-handle"]);
        assert!(v.found()[0].finding.evidence.contains("Unknown Error"));
        assert_eq!(v.found()[0].fault.health(), HealthKind::GpuLost);
    }

    #[test]
    fn memory_repairs_waiting_for_a_reset_or_failed_make_it_unusable() {
        let mut s = healthy();
        s.remapped_rows = Some(RemappedRows {
            correctable: 0,
            uncorrectable: 2,
            pending: true,
            failure: false,
        });
        assert_eq!(unusable(&s), ["gpu-remap-pending"]);
        s.remapped_rows = Some(RemappedRows {
            correctable: 0,
            uncorrectable: 512,
            pending: false,
            failure: true,
        });
        assert_eq!(unusable(&s), ["gpu-remap-failed"]);
        let mut s = healthy();
        s.remapped_rows = None;
        s.retired_pages_pending = Some(true);
        assert_eq!(unusable(&s), ["gpu-retired-pages-pending"]);
    }

    #[test]
    fn uncorrected_ecc_errors_count_when_new() {
        let mut s = healthy();
        s.ecc_uncorrected_volatile = Some(2);
        // First reading: errors since the last reset.
        let v = judge(&registered(), None, &s, None);
        assert_eq!(kinds(&v), ["gpu-ecc-uncorrected"]);
        assert!(v.is_unusable());
        // The same count again: nothing new.
        assert_eq!(
            judge(&registered(), Some(&s), &s, None),
            Verdict::Healthy { notes: vec![] }
        );
        let mut more = s.clone();
        more.ecc_uncorrected_volatile = Some(5);
        let v = judge(&registered(), Some(&s), &more, None);
        assert!(v.found()[0].finding.evidence.contains("3 new"), "{v:?}");
    }

    #[test]
    fn hardware_clock_limits_degrade_but_idle_sync_boost_and_power_cap_do_not() {
        let with = |bits| {
            let mut s = healthy();
            s.clock_reasons = Some(ClockReasons(bits));
            s
        };
        assert_eq!(
            degraded(None, &with(ClockReasons::HW_SLOWDOWN)),
            ["gpu-hw-slowdown"]
        );
        assert_eq!(
            degraded(
                None,
                &with(ClockReasons::HW_SLOWDOWN | ClockReasons::HW_POWER_BRAKE)
            ),
            ["gpu-power-brake"],
            "the brake explains the slowdown"
        );
        assert_eq!(
            degraded(None, &with(ClockReasons::HW_THERMAL)),
            ["gpu-thermal"]
        );
        assert_eq!(
            degraded(None, &with(ClockReasons::SW_THERMAL)),
            ["gpu-thermal"]
        );
        for normal in [
            ClockReasons::GPU_IDLE,
            ClockReasons::SYNC_BOOST,
            ClockReasons::SW_POWER_CAP,
            ClockReasons::APPLICATIONS_CLOCKS,
            ClockReasons::DISPLAY_CLOCKS,
        ] {
            assert_eq!(
                judge(&registered(), None, &with(normal), None),
                Verdict::Healthy { notes: vec![] },
                "{normal:#x}"
            );
        }
    }

    #[test]
    fn links_are_judged_against_registration_and_the_previous_reading() {
        let mut s = healthy();
        s.nvlinks = Some(links(&[2]));
        let kinds = degraded(None, &s);
        assert_eq!(kinds, ["nvlink-down"]);
        let v = judge(&registered(), None, &s, None);
        assert!(
            v.found()[0]
                .finding
                .evidence
                .contains("NVLink 2 down (3 active, 4 when the node registered)")
        );
        // Not registered: only a link that was up at the last reading is news.
        let mut unknown = registered();
        unknown.nvlinks = None;
        assert_eq!(
            judge(&unknown, None, &s, None),
            Verdict::Healthy { notes: vec![] }
        );
        assert!(matches!(
            judge(&unknown, Some(&healthy()), &s, None),
            Verdict::Degraded { .. }
        ));
        // Replays and recoveries since the last reading.
        let mut erring = healthy();
        erring.nvlinks.as_mut().unwrap()[1].replay_errors = Some(40);
        erring.nvlinks.as_mut().unwrap()[1].crc_errors = Some(7);
        let v = judge(&registered(), Some(&healthy()), &erring, None);
        assert_eq!(self::kinds(&v), ["nvlink-errors"]);
        assert!(
            v.found()[0]
                .finding
                .evidence
                .contains("link 1: +40 replays, +0 recoveries, +7 CRC errors")
        );
        assert_eq!(
            judge(&registered(), Some(&erring), &erring, None),
            Verdict::Healthy { notes: vec![] },
            "counters that did not grow"
        );
    }

    #[test]
    fn a_narrower_pcie_link_is_degraded() {
        let mut s = healthy();
        s.pcie = Some(PcieState {
            generation: Some(5),
            generation_max: Some(5),
            width: Some(8),
            width_max: Some(16),
        });
        assert_eq!(degraded(None, &s), ["pcie-degraded"]);
    }

    #[test]
    fn the_active_check_failing_or_hanging_makes_it_unusable() {
        let failed = ActiveResult::Failed {
            step: ActiveStep::Context,
            error: "CUDA_ERROR_ECC_UNCORRECTABLE (214)".into(),
            ms: 90,
        };
        let v = judge(&registered(), None, &healthy(), Some(&failed));
        assert_eq!(kinds(&v), ["gpu-active-check-failed"]);
        assert!(v.is_unusable());
        assert!(
            v.found()[0]
                .finding
                .evidence
                .contains("creating a context after 90 ms: CUDA_ERROR_ECC_UNCORRECTABLE")
        );
        let hung = ActiveResult::Hung { limit_ms: 10_000 };
        let v = judge(&registered(), None, &healthy(), Some(&hung));
        assert_eq!(kinds(&v), ["gpu-active-check-hang"]);
        assert!(v.is_unusable());
        let v = probe_hung(&registered(), 30_000);
        assert_eq!(kinds(&v), ["gpu-probe-hang"]);
        assert!(v.is_unusable());
    }

    #[test]
    fn persistence_mode_off_is_a_note_and_nvml_xids_are_judged_by_the_catalogue() {
        let mut s = healthy();
        s.persistence_mode = Some(false);
        match judge(&registered(), None, &s, None) {
            Verdict::Healthy { notes } => {
                assert_eq!(notes.len(), 1);
                assert_eq!(notes[0].finding.kind, "gpu-persistence-off");
                assert_eq!(notes[0].finding.severity, Severity::Info);
            }
            other => panic!("{other:?}"),
        }
        let mut s = healthy();
        s.xids = vec![79];
        let v = judge(&registered(), None, &s, None);
        assert_eq!(kinds(&v), ["xid-79"]);
        assert!(v.is_unusable());
        assert_eq!(v.found()[0].noted().xid, Some(79));
        s.xids = vec![13];
        assert!(
            !judge(&registered(), None, &s, None).is_unusable(),
            "an application's Xid"
        );
    }

    #[test]
    fn findings_are_worst_first_and_keep_what_set_the_probe_off() {
        let mut s = healthy();
        s.persistence_mode = Some(false);
        s.clock_reasons = Some(ClockReasons(ClockReasons::HW_THERMAL));
        s.reach = Reach::ResetRequired;
        let v = judge(&registered(), None, &s, None);
        assert_eq!(
            kinds(&v),
            ["gpu-reset-required", "gpu-thermal", "gpu-persistence-off"]
        );
        let line = "NVRM: GPU 0000:41:00.0: GPU requires a full chip reset";
        let f = v.found()[0].clone().triggered_by(Some(line));
        assert!(
            f.finding
                .evidence
                .ends_with(&format!("probed after: {line}")),
            "{}",
            f.finding.evidence
        );
        let noted = f.noted();
        assert_eq!(noted.health, HealthKind::GpuLost);
        assert!(
            noted
                .headline
                .starts_with("health probe: NVML reports GPU 3 needs a reset")
        );
        assert!(
            !noted.headline.contains("probed after"),
            "the drain reason is the state"
        );
        let ev = noted.event(5);
        assert_eq!(ev.severity, gsched_types::node::HealthSeverity::Critical);
        assert_eq!(ev.gpu, Some(3));
        assert!(!ev.stops_node_jobs);
    }
}
