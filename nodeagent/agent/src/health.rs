//! The node health monitor: Xid and "fallen off the bus" lines from the kernel log
//! (`/dev/kmsg` or a file), GPUs that disappear from the (fake) topology, and NVML's view
//! (lost GPUs, temperatures, PCIe link, remapped rows) where a driver is present. Each
//! finding becomes a `HealthEvent` with a severity; critical ones drain the node.

use crate::outbox::Outbox;
use gsched_proto::agent::AgentToController;
use gsched_topology::xid::{KernelEvent, classify, normalize_pci, parse_line};
use gsched_types::node::{HealthEvent, HealthSeverity};
use gsched_types::topology::Topology;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Turns a kernel event into a health event, attributing it to a GPU of `topo`.
pub fn kernel_event_to_health(ev: &KernelEvent, topo: &Topology) -> Option<HealthEvent> {
    let gpu_of = |pci: &str| {
        topo.gpus
            .iter()
            .find(|g| g.pci_bus_id.as_deref().map(normalize_pci).as_deref() == Some(pci))
            .map(|g| g.index)
    };
    match ev {
        KernelEvent::Xid(x) => {
            let code = x.effective_code();
            let (action, severity) = classify(code);
            let gpu = gpu_of(&x.pci);
            let kind = if code == 79 { "gpu_lost" } else { "xid" };
            let cause = if x.code == 45 && x.caused_by.is_some() {
                format!(" (Xid 45 caused by Xid {code})")
            } else {
                String::new()
            };
            Some(HealthEvent {
                severity,
                kind: kind.into(),
                gpu,
                xid: Some(code),
                message: format!(
                    "Xid {}{cause} on GPU {} ({}): {}; action: {action:?}",
                    x.code,
                    gpu.map(|g| g.to_string()).unwrap_or_else(|| "?".into()),
                    x.pci,
                    x.message
                ),
                at_ms: now_ms(),
            })
        }
        KernelEvent::FallenOffBus { pci } => Some(HealthEvent {
            severity: HealthSeverity::Critical,
            kind: "gpu_lost".into(),
            gpu: gpu_of(pci),
            xid: Some(79),
            message: format!("GPU at {pci} has fallen off the bus"),
            at_ms: now_ms(),
        }),
        KernelEvent::SXid {
            pci,
            code,
            fatal,
            message,
        } => Some(HealthEvent {
            severity: if *fatal == Some(true) {
                HealthSeverity::Critical
            } else {
                HealthSeverity::Info
            },
            kind: "nvswitch_sxid".into(),
            gpu: None,
            xid: None,
            message: format!("NVSwitch {pci} SXid {code}: {message}"),
            at_ms: now_ms(),
        }),
        KernelEvent::GpuIdentity { .. } => None,
    }
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
        .map(|g| HealthEvent {
            severity: HealthSeverity::Critical,
            kind: "gpu_lost".into(),
            gpu: Some(g.index),
            xid: None,
            message: format!(
                "GPU {} ({}) is no longer visible: {} GPUs registered, {} found",
                g.index,
                g.pci_bus_id
                    .as_deref()
                    .or(g.uuid.as_deref())
                    .unwrap_or("unknown id"),
                before.gpus.len(),
                after.gpus.len()
            ),
            at_ms: now_ms(),
        })
        .collect()
}

fn report(outbox: &Outbox, flush: &tokio::sync::Notify, events: Vec<HealthEvent>) {
    if events.is_empty() {
        return;
    }
    for e in &events {
        tracing::warn!("health: {:?} {}", e.severity, e.message);
    }
    outbox.push(|seq| AgentToController::Health { seq, events });
    flush.notify_one();
}

/// Follows a kernel log on a thread of its own (reads of `/dev/kmsg` block): `/dev/kmsg`
/// records, or a plain file, from its current end. A file that does not exist yet is
/// waited for and then read from its start; an unreadable `/dev/kmsg` (not root) is
/// reported once and left alone.
pub fn watch_kernel_log(
    path: PathBuf,
    topo: Arc<RwLock<Topology>>,
    outbox: Arc<Outbox>,
    flush: Arc<tokio::sync::Notify>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("kernel-log".into())
        .spawn(move || follow_kernel_log(&path, &topo, &outbox, &flush))
        .expect("spawning the kernel-log thread")
}

fn follow_kernel_log(
    path: &std::path::Path,
    topo: &RwLock<Topology>,
    outbox: &Outbox,
    flush: &tokio::sync::Notify,
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
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => std::thread::sleep(Duration::from_millis(100)),
            Ok(_) => {
                let Some(ev) = parse_line(&line) else {
                    continue;
                };
                let t = topo
                    .read()
                    .map(|t| t.clone())
                    .unwrap_or_else(|_| Topology::empty(""));
                if let Some(h) = kernel_event_to_health(&ev, &t) {
                    report(outbox, flush, vec![h]);
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

/// Re-reads the topology source every `every` and reports GPUs that disappeared.
pub async fn watch_topology(
    reload: Arc<dyn Fn() -> Result<Topology, String> + Send + Sync>,
    topo: Arc<RwLock<Topology>>,
    outbox: Arc<Outbox>,
    flush: Arc<tokio::sync::Notify>,
    every: Duration,
) {
    let mut reported: Vec<u32> = Vec::new();
    loop {
        tokio::time::sleep(every).await;
        let reload = reload.clone();
        let Ok(Ok(now)) = tokio::task::spawn_blocking(move || reload()).await else {
            continue;
        };
        let registered = topo
            .read()
            .map(|t| t.clone())
            .unwrap_or_else(|_| Topology::empty(""));
        let mut events = lost_gpus(&registered, &now);
        events.retain(|e| e.gpu.is_some_and(|g| !reported.contains(&g)));
        reported.extend(events.iter().filter_map(|e| e.gpu));
        if now.gpus.len() >= registered.gpus.len() {
            reported.clear();
        }
        report(&outbox, &flush, events);
    }
}

/// Polls NVML (where a driver is present) for lost GPUs, temperature and PCIe problems,
/// and listens for Xid events; each new problem is reported once.
pub async fn watch_nvml(
    topo: Arc<RwLock<Topology>>,
    gpu_map: Vec<u32>,
    outbox: Arc<Outbox>,
    flush: Arc<tokio::sync::Notify>,
    every: Duration,
) {
    let Ok(probe) = crate::nvml::NvmlProbe::init() else {
        return;
    };
    let probe = Arc::new(std::sync::Mutex::new(probe));
    let mut seen: std::collections::HashSet<(String, Option<u32>)> = Default::default();
    loop {
        tokio::time::sleep(every).await;
        let registered = topo.read().map(|t| t.gpus.len()).unwrap_or(0);
        let devices: Vec<u32> = if gpu_map.is_empty() {
            (0..registered as u32).collect()
        } else {
            gpu_map.clone()
        };
        let p = probe.clone();
        let Ok(events) = tokio::task::spawn_blocking(move || {
            p.lock().map(|p| p.health(&devices)).unwrap_or_default()
        })
        .await
        else {
            continue;
        };
        let fresh: Vec<HealthEvent> = events
            .into_iter()
            .filter(|e| seen.insert((e.kind.clone(), e.gpu)))
            .collect();
        report(&outbox, &flush, fresh);
    }
}
