//! The node health monitor: Xid, "fallen off the bus" and PCIe AER messages from the
//! kernel log (`/dev/kmsg` or a file; fatal AER on a GPU or the port above it is a lost
//! GPU, a flood of corrected ones a warning), GPUs that disappear from the (fake)
//! topology, NVML's view (GPUs it cannot open or has lost, temperatures, PCIe link) where
//! a driver is present, and the NICs (training interface down, MTU other than the
//! training network's). Each problem is a `Finding` (`crate::findings`, the same reading
//! `gagentd diagnose` gives) carried in a `HealthEvent`; critical ones drain the node. A
//! device driver's line that no rule recognises sets the GPU health probe off
//! (`crate::probe`), whose findings carry that line.

use crate::findings::{Attribution, corrected_flood, kernel_finding, observed};
use crate::outbox::Outbox;
use gsched_proto::clock::now_ms;
use gsched_topology::xid::{AerSeverity, KernelEvent, KernelLog, normalize_pci};
use gsched_types::agent::AgentToController;
use gsched_types::findings::{Component, Severity};
use gsched_types::node::{HealthEvent, HealthKind, HealthSeverity};
use gsched_types::topology::Topology;
use parking_lot::RwLock;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Turns a kernel event into a health event, attributing it to a GPU of `topo`;
/// `behind(pci)` names the GPU below a PCIe port (for AER errors reported by the port).
/// The meaning is `findings::kernel_finding`'s, the same `gagentd diagnose` gives.
pub fn kernel_event_to_health(
    ev: &KernelEvent,
    topo: &Topology,
    behind: &dyn Fn(&str) -> Option<u32>,
) -> Option<HealthEvent> {
    // Only AER errors are reported by the port above a device; Xids name the GPU itself.
    let port = matches!(ev, KernelEvent::PcieAer { .. });
    let gpu_of =
        |pci: &str| kernel_event_gpu(topo, pci).or_else(|| if port { behind(pci) } else { None });
    // A node that knows none of its GPUs (discovery found none, or all are gone) cannot
    // say that no GPU sits below a device: it reads the line as a saved log is read.
    let at = if topo.gpus.is_empty() {
        Attribution::Unknown
    } else {
        Attribution::Known(&gpu_of)
    };
    kernel_finding(ev, at).map(|n| n.event(now_ms()))
}

/// Memory-error Xids that one fault raises together on a GPU: an uncorrectable ECC error
/// (48), the row remap it schedules (63, 64) and the contained or uncontained error the
/// running process saw (94, 95).
const ECC_FAMILY: [u32; 5] = [48, 63, 64, 94, 95];

/// Folds the Xids of one memory fault into one incident: after the first, the others on
/// the same GPU within `INCIDENT_WINDOW` are reported as part of it (informational),
/// unless they are worse than what opened it.
#[derive(Default)]
pub struct XidIncidents {
    open: std::collections::HashMap<String, (u32, HealthSeverity, std::time::Instant)>,
    bursts: std::collections::HashMap<String, std::time::Instant>,
}

const INCIDENT_WINDOW: Duration = Duration::from_secs(60);

impl XidIncidents {
    pub fn fold(&mut self, pci: &str, mut ev: HealthEvent, now: std::time::Instant) -> HealthEvent {
        let Some(code) = ev.xid else {
            return ev;
        };
        // The same Xid again on the same GPU within a burst: the lines of one fault.
        let key = format!("{pci}/{code}");
        if let Some(at) = self.bursts.get(&key)
            && now.duration_since(*at).as_secs_f64() <= gsched_topology::xid::BURST_S
        {
            return part_of(ev, &format!("the same fault as the Xid {code} just before"));
        }
        self.bursts.insert(key, now);
        if !ECC_FAMILY.contains(&code) {
            return ev;
        }
        match self.open.get(pci) {
            Some(&(first, severity, at))
                if now.duration_since(at) <= INCIDENT_WINDOW
                    && first != code
                    && ev.severity <= severity =>
            {
                ev = part_of(
                    ev,
                    &format!(
                        "part of the Xid {first} incident on this GPU: one memory fault; reset the GPU"
                    ),
                );
            }
            _ => {
                self.open.insert(pci.to_string(), (code, ev.severity, now));
            }
        }
        ev
    }
}

/// What the live monitor makes of the kernel log, line by line: multi-line records joined
/// ([`KernelLog`]), corrected AER errors counted into floods, the Xids of one fault folded
/// into one incident, and an unrecognised message from a GPU, NVSwitch, PCIe or NIC
/// driver (an NVRM line no rule reads, or another driver's error line about a device)
/// reported as a warning once per device per [`UNRECOGNISED_QUIET`].
#[derive(Default)]
pub struct KernelWatch {
    log: KernelLog,
    corrected: CorrectedErrors,
    incidents: XidIncidents,
    unrecognised: std::collections::HashMap<String, std::time::Instant>,
}

const UNRECOGNISED_QUIET: Duration = Duration::from_secs(600);

impl KernelWatch {
    /// The health events one kernel log line completes on a node with `topo`;
    /// `behind(pci)` names the GPU below a PCIe port.
    pub fn line(
        &mut self,
        line: &str,
        topo: &Topology,
        behind: &dyn Fn(&str) -> Option<u32>,
        now: std::time::Instant,
    ) -> Vec<HealthEvent> {
        let mut out: Vec<HealthEvent> = self
            .log
            .push(line)
            .into_iter()
            .filter_map(|ev| self.event(&ev, topo, behind, now))
            .collect();
        out.extend(self.other_driver(line, topo, behind, now));
        out
    }

    /// A line from a device driver other than NVRM (nvidia, nvidia-nvswitch, pcieport,
    /// mlx5) that names a device, reads like an error and that no rule reads. AER's own
    /// lines ("AER: device recovery failed", "AER: Multiple Uncorrected (Fatal) error
    /// received") come with the `PCIe Bus Error` report the AER rules read: they set the
    /// probe off (`probe::when`) but are not warned about again.
    fn other_driver(
        &mut self,
        line: &str,
        topo: &Topology,
        behind: &dyn Fn(&str) -> Option<u32>,
        now: std::time::Instant,
    ) -> Option<HealthEvent> {
        if line.contains("NVRM") || line.contains(" AER: ") || !crate::findings::error_words(line) {
            return None;
        }
        let dl = crate::probe::when::device_line(line)?;
        let quiet = self
            .unrecognised
            .get(&dl.device)
            .is_some_and(|at| now.duration_since(*at) < UNRECOGNISED_QUIET);
        if quiet {
            return None;
        }
        self.unrecognised.insert(dl.device.clone(), now);
        let gpu = dl
            .pci
            .as_deref()
            .and_then(|pci| kernel_event_gpu(topo, pci).or_else(|| behind(pci)));
        Some(crate::findings::driver_unrecognised(&dl.device, gpu, line).event(now_ms()))
    }

    fn event(
        &mut self,
        ev: &KernelEvent,
        topo: &Topology,
        behind: &dyn Fn(&str) -> Option<u32>,
        now: std::time::Instant,
    ) -> Option<HealthEvent> {
        match ev {
            KernelEvent::PcieAer {
                pci,
                severity: AerSeverity::Corrected,
                ..
            } => {
                let gpu = kernel_event_gpu(topo, pci).or_else(|| behind(pci));
                self.corrected.count(pci, gpu, now)
            }
            KernelEvent::Xid(x) => kernel_event_to_health(ev, topo, behind)
                .map(|h| self.incidents.fold(&x.pci, h, now)),
            KernelEvent::Unrecognised { device, .. } => {
                let quiet = self
                    .unrecognised
                    .get(device)
                    .is_some_and(|at| now.duration_since(*at) < UNRECOGNISED_QUIET);
                if quiet {
                    return None;
                }
                self.unrecognised.insert(device.clone(), now);
                kernel_event_to_health(ev, topo, behind)
            }
            _ => kernel_event_to_health(ev, topo, behind),
        }
    }
}

/// An event folded into an incident already reported: informational, saying which.
fn part_of(mut ev: HealthEvent, which: &str) -> HealthEvent {
    ev.severity = HealthSeverity::Info;
    if let Some(f) = ev.finding.as_mut() {
        f.severity = gsched_types::findings::Severity::Info;
    }
    ev.stops_node_jobs = false;
    ev.message = format!("{} ({which})", ev.message);
    ev
}

/// The GPU of `topo` at `pci`.
fn kernel_event_gpu(topo: &Topology, pci: &str) -> Option<u32> {
    topo.gpus
        .iter()
        .find(|g| g.pci_bus_id.as_deref().map(normalize_pci).as_deref() == Some(pci))
        .map(|g| g.index)
}

/// Corrected AER errors are normal one at a time; a flood of them on one link means a
/// marginal riser, cable or slot. Warns once per link per quiet period when more than
/// `FLOOD` arrive within `WINDOW`.
#[derive(Default)]
pub struct CorrectedErrors {
    seen: std::collections::HashMap<String, (std::time::Instant, u32, bool)>,
}

const FLOOD: u32 = 20;
const WINDOW: Duration = Duration::from_secs(60);

impl CorrectedErrors {
    /// Counts one corrected error on `pci` at `now`; returns the warning when this one
    /// makes a flood.
    pub fn count(
        &mut self,
        pci: &str,
        gpu: Option<u32>,
        now: std::time::Instant,
    ) -> Option<HealthEvent> {
        let entry = self.seen.entry(pci.to_string()).or_insert((now, 0, false));
        if now.duration_since(entry.0) > WINDOW {
            *entry = (now, 0, false);
        }
        entry.1 += 1;
        if entry.1 <= FLOOD || entry.2 {
            return None;
        }
        entry.2 = true;
        Some(corrected_flood(pci, gpu, FLOOD, Some(WINDOW.as_secs()), "").event(now_ms()))
    }
}

/// The GPU whose PCIe path (in sysfs under `root`, normally `/`) passes through the port
/// `pci`: `/sys/bus/pci/devices/<gpu>` links to `…/0000:00:01.1/0000:01:00.0`.
pub fn gpu_behind_port(root: &std::path::Path, topo: &Topology, pci: &str) -> Option<u32> {
    topo.gpus.iter().find_map(|g| {
        let id = g.pci_bus_id.as_deref()?;
        let full = full_pci(id);
        let link = std::fs::read_link(root.join("sys/bus/pci/devices").join(&full)).ok()?;
        let on_path = link
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .filter(|c| *c != full)
            .any(|c| c.contains(':') && normalize_pci(c) == pci);
        on_path.then_some(g.index)
    })
}

/// `00000000:01:00.0` or `0000:01:00` as sysfs names it: `0000:01:00.0`.
fn full_pci(id: &str) -> String {
    let n = normalize_pci(id);
    let function = id.rsplit_once('.').map(|(_, f)| f).unwrap_or("0");
    format!("{n}.{function}")
}

/// Compares two topologies and reports GPUs that vanished (matched by UUID or PCI id when
/// known, else by index).
pub fn lost_gpus(before: &Topology, after: &Topology) -> Vec<HealthEvent> {
    let present = |g: &gsched_types::Gpu| {
        after
            .gpus
            .iter()
            .any(|h| match (&g.uuid, &h.uuid, &g.pci_bus_id, &h.pci_bus_id) {
                (Some(a), Some(b), _, _) => a == b,
                (_, _, Some(a), Some(b)) => normalize_pci(a) == normalize_pci(b),
                _ => g.index == h.index,
            })
    };
    before
        .gpus
        .iter()
        .filter(|g| !present(g))
        .map(|g| {
            observed(
                HealthKind::GpuLost,
                Severity::FailJob,
                Component::Gpu,
                "gpu-lost",
                Some(g.index),
                format!(
                    "GPU {} ({}) is no longer visible: {} GPUs registered, {} found",
                    g.index,
                    g.pci_bus_id
                        .as_deref()
                        .or(g.uuid.as_deref())
                        .unwrap_or("unknown id"),
                    before.gpus.len(),
                    after.gpus.len()
                ),
                "the GPU is gone until the node reboots: check its riser, slot and PCIe power",
            )
            .event(now_ms())
        })
        .collect()
}

/// NIC problems: the training interface down (critical: multi-node jobs would hang on
/// it), another physical NIC down (warning), the training interface's MTU different from
/// the training network's (`--training-mtu`; warning: NCCL over mismatched MTUs stalls
/// or fragments).
pub fn nic_events(
    t: &Topology,
    training_iface: Option<&str>,
    expected_mtu: Option<u32>,
) -> Vec<HealthEvent> {
    let mut out = Vec::new();
    for nic in t
        .nics
        .iter()
        .filter(|n| n.kind != gsched_types::topology::NicKind::Virtual)
    {
        let training =
            training_iface.is_some_and(|i| nic.netdev.as_deref() == Some(i) || nic.name == i);
        let component = if nic.kind == gsched_types::topology::NicKind::Ib {
            Component::Ib
        } else {
            Component::Nic
        };
        let event = |severity, kind: HealthKind, name: &str, headline: String, action: &str| {
            let mut e =
                observed(kind, severity, component, name, None, headline, action).event(now_ms());
            // The message is the key a problem is reported once by, and what `ginfo` shows.
            e.message = e
                .finding
                .as_ref()
                .map(|f| f.evidence.clone())
                .unwrap_or_default();
            e
        };
        if nic.up == Some(false) {
            out.push(if training {
                event(
                    Severity::Drain,
                    HealthKind::NicDown,
                    "nic-down",
                    format!("training interface {} is down", nic.name),
                    "multi-node jobs would hang on it: check the cable, the switch port and the interface (ip link)",
                )
            } else {
                event(
                    Severity::Warn,
                    HealthKind::NicDown,
                    "nic-down",
                    format!("NIC {} is down", nic.name),
                    "check the cable and the switch port; jobs do not use this NIC",
                )
            });
        }
        if let (true, Some(want), Some(have)) = (training, expected_mtu, nic.mtu)
            && want != have
        {
            out.push(event(
                Severity::Warn,
                HealthKind::MtuMismatch,
                "mtu-mismatch",
                format!(
                    "training interface {} has MTU {have}, the training network uses {want}",
                    nic.name
                ),
                "set the same MTU on every node's training interface and the switch ports",
            ));
        }
    }
    out
}

/// What the NIC checks compare against.
#[derive(Clone, Debug, Default)]
pub struct NicPolicy {
    pub training_iface: Option<String>,
    pub expected_mtu: Option<u32>,
}

/// Reports each NIC problem once while it lasts; a problem that clears may be reported
/// again if it comes back.
#[derive(Default)]
pub struct NicWatch {
    active: std::collections::HashSet<String>,
}

impl NicWatch {
    pub fn check(&mut self, t: &Topology, policy: &NicPolicy) -> Vec<HealthEvent> {
        let now = nic_events(t, policy.training_iface.as_deref(), policy.expected_mtu);
        let keys: std::collections::HashSet<String> =
            now.iter().map(|e| e.message.clone()).collect();
        let fresh = now
            .into_iter()
            .filter(|e| !self.active.contains(&e.message))
            .collect();
        self.active = keys;
        fresh
    }
}

/// Re-reads the NICs from sysfs every `every` (nodes with a real driver; the fake
/// topology's NICs are checked by `watch_topology`).
pub async fn watch_nics(
    topo: Arc<RwLock<Topology>>,
    policy: NicPolicy,
    outbox: Arc<Outbox>,
    every: Duration,
) {
    let mut watch = NicWatch::default();
    loop {
        let Ok(nics) =
            tokio::task::spawn_blocking(|| crate::sysfs::nics(&crate::sysfs::default_root())).await
        else {
            continue;
        };
        let mut t = topo.read().clone();
        t.nics = nics.into_iter().map(|n| n.nic).collect();
        report(&outbox, watch.check(&t, &policy));
        tokio::time::sleep(every).await;
    }
}

/// Stores the events; the outbox tells the session, which sends them at once.
fn report(outbox: &Outbox, events: Vec<HealthEvent>) {
    if events.is_empty() {
        return;
    }
    for e in &events {
        tracing::warn!("health: {:?} {}", e.severity, e.message);
    }
    outbox.push(|seq| AgentToController::Health { seq, events });
}

/// Follows a kernel log on a thread of its own (reads of `/dev/kmsg` block): `/dev/kmsg`
/// records, or a plain file, from its current end. A file that does not exist yet is
/// waited for and then read from its start; an unreadable `/dev/kmsg` (not root) is
/// reported once and left alone.
pub fn watch_kernel_log(
    path: PathBuf,
    topo: Arc<RwLock<Topology>>,
    outbox: Arc<Outbox>,
    probe: Option<Arc<crate::probe::ProbeService>>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("kernel-log".into())
        .spawn(move || follow_kernel_log(&path, &topo, &outbox, probe.as_deref()))
        .expect("spawning the kernel-log thread")
}

/// Asks for a probe of the GPUs an unknown driver line names (the GPU at its address or
/// below that port; every GPU when it names none of them), at most once per device per
/// `when::KERNEL_QUIET`.
fn probe_on_line(
    probe: &crate::probe::ProbeService,
    quiet: &mut crate::probe::when::Quiet,
    line: &str,
    topo: &Topology,
    behind: &dyn Fn(&str) -> Option<u32>,
) {
    let Some(dl) = crate::probe::when::device_line(line) else {
        return;
    };
    if !quiet.due(&dl.device, std::time::Instant::now()) {
        return;
    }
    let gpu = dl
        .pci
        .as_deref()
        .and_then(|pci| kernel_event_gpu(topo, pci).or_else(|| behind(pci)));
    tracing::info!(
        "probing {} after a kernel line about {}",
        gpu.map_or("every GPU".to_string(), |g| format!("GPU {g}")),
        if dl.device.is_empty() {
            "a GPU it does not name"
        } else {
            dl.device.as_str()
        }
    );
    probe.request(crate::probe::Request {
        gpus: gpu.map(|g| vec![g]),
        trigger: crate::probe::Trigger::KernelLine,
        evidence: line.trim().to_string(),
    });
}

fn follow_kernel_log(
    path: &std::path::Path,
    topo: &RwLock<Topology>,
    outbox: &Outbox,
    probe: Option<&crate::probe::ProbeService>,
) {
    let is_kmsg = path.starts_with("/dev");
    let mut from_start = false;
    let mut told = false;
    let file = loop {
        match std::fs::File::open(path) {
            Ok(f) => break f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !is_kmsg => {
                if !told {
                    tracing::warn!(
                        "kernel log {} does not exist yet; Xid lines will be read once it appears",
                        path.display()
                    );
                    told = true;
                }
                from_start = true;
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                tracing::warn!(
                    "kernel log {} not readable ({e}); Xid lines will not be seen (run the agent as root or pass --kmsg)",
                    path.display()
                );
                return;
            }
        }
    };
    tracing::info!("watching {} for Xid and bus errors", path.display());
    let mut reader = std::io::BufReader::new(file);
    if !from_start {
        let _ = reader.seek(SeekFrom::End(0));
    }
    let mut line = String::new();
    let mut watch = KernelWatch::default();
    let mut probe_quiet = crate::probe::when::Quiet::default();
    let sysfs = std::path::Path::new("/");
    // A file (not /dev/kmsg, whose reads wait for the next record) is polled: every 100 ms
    // after a line, backing off to once a second while nothing is written.
    let mut quiet = Duration::from_millis(100);
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => {
                std::thread::sleep(quiet);
                quiet = (quiet * 2).min(Duration::from_secs(1));
            }
            Ok(_) => {
                quiet = Duration::from_millis(100);
                let t = topo.read();
                let behind = |pci: &str| gpu_behind_port(sysfs, &t, pci);
                let events = watch.line(&line, &t, &behind, std::time::Instant::now());
                if !events.is_empty() {
                    report(outbox, events);
                }
                if let Some(p) = probe {
                    probe_on_line(p, &mut probe_quiet, &line, &t, &behind);
                }
            }
            // /dev/kmsg: a record overwritten before it was read (EPIPE) or a partial one.
            Err(e)
                if e.kind() == std::io::ErrorKind::InvalidInput
                    || e.raw_os_error() == Some(libc::EPIPE) =>
            {
                continue;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Reads the topology source again: `None` when it has not changed since the last read.
pub type Reload =
    dyn Fn() -> Result<Option<Topology>, crate::discover::DiscoverError> + Send + Sync;

/// What tells a file's new contents from its old without reading it: size, inode and
/// modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    inode: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    pub fn of(path: &std::path::Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            len: m.len(),
            inode: m.ino(),
            modified: m.modified().ok(),
        })
    }
}

/// Re-reads the topology source every `every` and reports GPUs that disappeared and NIC
/// problems (a source that has not changed has nothing new to report).
pub async fn watch_topology(
    reload: Arc<Reload>,
    topo: Arc<RwLock<Topology>>,
    policy: NicPolicy,
    outbox: Arc<Outbox>,
    every: Duration,
) {
    let mut reported: Vec<u32> = Vec::new();
    let mut nics = NicWatch::default();
    loop {
        tokio::time::sleep(every).await;
        let reload = reload.clone();
        let Ok(Ok(Some(now))) = tokio::task::spawn_blocking(move || reload()).await else {
            continue;
        };
        let registered = topo.read().clone();
        let mut events = lost_gpus(&registered, &now);
        events.retain(|e| e.gpu.is_some_and(|g| !reported.contains(&g)));
        reported.extend(events.iter().filter_map(|e| e.gpu));
        if now.gpus.len() >= registered.gpus.len() {
            reported.clear();
        }
        events.extend(nics.check(&now, &policy));
        report(&outbox, events);
    }
}

/// Polls NVML (where a driver is present) for lost GPUs, temperature and PCIe problems,
/// and listens for Xid events; each new problem is reported once.
pub async fn watch_nvml(
    topo: Arc<RwLock<Topology>>,
    gpu_map: Vec<u32>,
    outbox: Arc<Outbox>,
    every: Duration,
) {
    let Ok(probe) = crate::nvml::NvmlProbe::init() else {
        return;
    };
    let probe = Arc::new(parking_lot::Mutex::new(probe));
    let mut seen: std::collections::HashSet<(HealthKind, Option<u32>)> = Default::default();
    loop {
        tokio::time::sleep(every).await;
        let registered = topo.read().gpus.len();
        let devices: Vec<u32> = if gpu_map.is_empty() {
            (0..registered as u32).collect()
        } else {
            gpu_map.clone()
        };
        let buses: Vec<Option<String>> = topo
            .read()
            .gpus
            .iter()
            .map(|g| g.pci_bus_id.as_deref().map(normalize_pci))
            .collect();
        let p = probe.clone();
        let Ok(events) =
            tokio::task::spawn_blocking(move || p.lock().health(&devices, &buses)).await
        else {
            continue;
        };
        let fresh: Vec<HealthEvent> = events
            .into_iter()
            .filter(|e| seen.insert((e.kind, e.gpu)))
            .collect();
        report(&outbox, fresh);
    }
}

#[cfg(test)]
mod nic_tests {
    use super::*;
    use gsched_types::topology::{Nic, NicKind};

    fn nic(name: &str, kind: NicKind, up: bool, mtu: u32) -> Nic {
        let mut n = Nic::new(name, kind);
        n.netdev = Some(name.into());
        n.up = Some(up);
        n.mtu = Some(mtu);
        n
    }

    #[test]
    fn virtual_nics_are_ignored_and_each_problem_is_reported_once() {
        let mut t = Topology::empty("n1");
        t.nics = vec![
            nic("docker0", NicKind::Virtual, false, 1500),
            nic("ib0", NicKind::Ib, true, 4092),
        ];
        let policy = NicPolicy {
            training_iface: Some("ib0".into()),
            expected_mtu: Some(4092),
        };
        let mut w = NicWatch::default();
        assert!(
            w.check(&t, &policy).is_empty(),
            "docker0 down is not a problem; MTU matches"
        );
        t.nics[1].up = Some(false);
        let ev = w.check(&t, &policy);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].severity, ev[0].kind.name()),
            (HealthSeverity::Critical, "nic_down")
        );
        assert!(
            w.check(&t, &policy).is_empty(),
            "reported once while it lasts"
        );
        t.nics[1].up = Some(true);
        assert!(w.check(&t, &policy).is_empty());
        t.nics[1].up = Some(false);
        assert_eq!(
            w.check(&t, &policy).len(),
            1,
            "reported again when it comes back"
        );
    }
}

#[cfg(test)]
mod aer_tests {
    use super::*;
    use gsched_topology::xid::parse_log;

    fn two_gpus() -> Topology {
        let mut t = Topology::empty("t");
        for (i, bus) in ["00000000:02:00.0", "00000000:41:00.0"].iter().enumerate() {
            let mut g = gsched_types::Gpu::new(i as u32);
            g.pci_bus_id = Some(bus.to_string());
            t.gpus.push(g);
        }
        t
    }

    #[test]
    fn a_fatal_error_on_the_port_above_a_gpu_loses_that_gpu() {
        // sysfs as the kernel lays it out: the GPU's device link runs through its port.
        let root = tempfile::tempdir().unwrap();
        let devices = root.path().join("sys/bus/pci/devices");
        std::fs::create_dir_all(&devices).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:02.0/0000:02:00.0",
            devices.join("0000:02:00.0"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0",
            devices.join("0000:41:00.0"),
        )
        .unwrap();
        let topo = two_gpus();
        let behind = |pci: &str| gpu_behind_port(root.path(), &topo, pci);
        assert_eq!(behind("0000:00:02"), Some(0));
        assert_eq!(behind("0000:40:01"), Some(1));
        assert_eq!(behind("0000:00:1d"), None);
        // The real log (tests/fixtures/xid): a Surprise Down reported by the port.
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/xid/aer-surprise-down-then-xid79-tesla.txt"
        ))
        .unwrap();
        let events = parse_log(gsched_topology::strip_fixture_header(&text));
        let health: Vec<HealthEvent> = events
            .iter()
            .filter_map(|e| kernel_event_to_health(e, &topo, &behind))
            .collect();
        let fatal: Vec<&HealthEvent> = health
            .iter()
            .filter(|h| h.severity == HealthSeverity::Critical)
            .collect();
        assert_eq!(fatal.len(), 2, "{health:?}");
        assert!(
            fatal
                .iter()
                .all(|h| h.gpu == Some(0) && h.kind == HealthKind::GpuLost)
        );
        assert!(
            fatal[0].message.contains("Transaction Layer"),
            "{}",
            fatal[0].message
        );
        // A fatal error on a device with no GPU below it only warns.
        let other = KernelEvent::PcieAer {
            pci: "0000:00:1d".into(),
            severity: AerSeverity::Fatal,
            detail: "Transaction Layer".into(),
        };
        let h = kernel_event_to_health(&other, &topo, &behind).unwrap();
        assert_eq!((h.severity, h.gpu), (HealthSeverity::Warning, None));
    }

    #[test]
    fn one_memory_fault_is_one_incident() {
        let topo = two_gpus();
        let none = |_: &str| None;
        let lines = [
            "NVRM: Xid (PCI:0000:02:00): 48, pid=77, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
            "NVRM: Xid (PCI:0000:02:00): 63, pid=77, name=python3, Row Remapper: New row marked for remapping, reset gpu to activate.",
            "NVRM: Xid (PCI:0000:02:00): 94, pid=77, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
        ];
        let mut incidents = XidIncidents::default();
        let t0 = std::time::Instant::now();
        let got: Vec<HealthEvent> = lines
            .iter()
            .map(|l| {
                let ev = gsched_topology::xid::parse_line(l).unwrap();
                let h = kernel_event_to_health(&ev, &topo, &none).unwrap();
                incidents.fold("0000:02:00", h, t0)
            })
            .collect();
        assert_eq!(got[0].severity, HealthSeverity::Critical);
        assert!(got[1..].iter().all(|h| h.severity == HealthSeverity::Info
            && h.message.contains("part of the Xid 48 incident")));
        // Another GPU, or much later: its own incident.
        let ev =
            gsched_topology::xid::parse_line(lines[1].replace("02:00", "41:00").as_str()).unwrap();
        let h = kernel_event_to_health(&ev, &topo, &none).unwrap();
        assert_eq!(
            incidents.fold("0000:41:00", h, t0).severity,
            HealthSeverity::Warning
        );
        let ev = gsched_topology::xid::parse_line(lines[2]).unwrap();
        let h = kernel_event_to_health(&ev, &topo, &none).unwrap();
        let later = incidents.fold("0000:02:00", h, t0 + Duration::from_secs(600));
        assert_eq!(later.severity, HealthSeverity::Warning);
    }

    #[test]
    fn corrected_errors_warn_only_as_a_flood_and_once() {
        let mut c = CorrectedErrors::default();
        let t0 = std::time::Instant::now();
        let ms = Duration::from_millis;
        for i in 0..FLOOD {
            assert!(c.count("0000:00:03", Some(1), t0 + ms(i as u64)).is_none());
        }
        let warn = c.count("0000:00:03", Some(1), t0 + ms(30)).unwrap();
        assert_eq!(
            (warn.severity, warn.kind, warn.gpu),
            (HealthSeverity::Warning, HealthKind::PcieDegraded, Some(1))
        );
        assert!(warn.message.contains("riser"));
        assert!(
            c.count("0000:00:03", Some(1), t0 + ms(40)).is_none(),
            "once"
        );
        // A few a minute apart are normal.
        let mut c = CorrectedErrors::default();
        for i in 0..100u64 {
            assert!(
                c.count("0000:00:03", None, t0 + Duration::from_secs(61 * i))
                    .is_none()
            );
        }
    }
}

#[cfg(test)]
mod unknown_line_tests {
    use super::*;

    fn one_gpu() -> Topology {
        let mut t = Topology::empty("t");
        let mut g = gsched_types::Gpu::new(0);
        g.pci_bus_id = Some("00000000:3b:00.0".into());
        t.gpus.push(g);
        t
    }

    #[test]
    fn an_unknown_line_from_a_device_driver_is_a_warning_naming_the_device() {
        let topo = one_gpu();
        let mut w = KernelWatch::default();
        let t0 = std::time::Instant::now();
        // An NVRM message is reported once its record ends (the next line starts).
        assert!(
            w.line(
                "[ 812.5] NVRM: GPU 0000:3b:00.0: a message no rule knows",
                &topo,
                &|_| None,
                t0,
            )
            .is_empty()
        );
        // Another driver's error line about a device: a warning too, once per device.
        let line = "[ 813.0] mlx5_core 0000:5e:00.0: mlx5_cmd_out_err:838: QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad parameter(0x3)";
        let ev = w.line(line, &topo, &|_| None, t0);
        assert_eq!(ev.len(), 2, "{ev:?}");
        let f = ev[0].finding.as_ref().unwrap();
        assert_eq!(
            (ev[0].severity, f.kind.as_str(), ev[0].gpu),
            (HealthSeverity::Warning, "nvrm-unrecognised", Some(0))
        );
        let f = ev[1].finding.as_ref().unwrap();
        assert_eq!(
            (
                ev[1].severity,
                f.kind.as_str(),
                f.component,
                f.pci_bus_id.as_deref()
            ),
            (
                HealthSeverity::Warning,
                "driver-unrecognised",
                gsched_types::findings::Component::Nic,
                Some("0000:5e:00")
            )
        );
        assert!(
            w.line(line, &topo, &|_| None, t0).is_empty(),
            "once per device"
        );
        // Not an error (a driver saying hello), or a known event: nothing of this kind.
        assert!(
            w.line(
                "[ 1.0] mlx5_core 0000:5f:00.0: firmware version: 28.39.1002",
                &topo,
                &|_| None,
                t0
            )
            .is_empty()
        );
        let ev = w.line(
            "[ 9.0] pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0",
            &topo,
            &|_| None,
            t0,
        );
        assert!(
            ev.iter().all(|e| e
                .finding
                .as_ref()
                .is_none_or(|f| f.kind != "driver-unrecognised")),
            "{ev:?}"
        );
    }
}
