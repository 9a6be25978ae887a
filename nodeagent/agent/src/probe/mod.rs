//! The GPU health probe: reads each GPU's state (NVML on a real node, a file on a fake
//! one: [`DeviceStateReader`]), runs the active check in child processes with a time
//! limit ([`active`]), and judges both ([`judge`], pure) into findings. The agent runs it
//! on unknown kernel lines from a device driver, and after a node run whose failure may
//! be its GPU's, before that run's end is reported, so the GPU is not given to another
//! job until the verdict is in ([`when`] decides when; `runs.rs` holds the report).
//! [`ProbeService`] is the shell: one thread runs the probes in turn, reports what a
//! kernel line's probe found, and keeps a failed run's verdict for the run manager.

pub mod active;
pub mod fake_state;
pub mod judge;
pub mod nvml_state;
pub mod state;
pub mod when;

use crate::outbox::Outbox;
use active::{ActiveRunner, Target};
use gsched_proto::clock::now_ms;
use gsched_types::agent::AgentToController;
use gsched_types::findings::{Finding, Severity};
use gsched_types::node::HealthEvent;
use gsched_types::topology::Topology;
use judge::{Verdict, judge};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use state::{ActiveResult, GpuState, RegisteredGpu};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Reads the state of the node's GPUs.
pub trait DeviceStateReader: Send {
    /// One state per GPU asked for, in the same order.
    fn read(&mut self, gpus: &[RegisteredGpu]) -> Vec<GpuState>;
}

/// The probe's settings (`gagentd --probe-after-failure`, `--active-check`,
/// `--active-check-timeout`).
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Probe a failed run's GPUs before its end is reported (between jobs).
    pub after_failure: bool,
    pub active_check: bool,
    pub active_limit: Duration,
}

impl ProbeSettings {
    /// How long a failed run's report waits for its probe: the active check's limit and
    /// time for NVML; past it, the probe itself is taken to hang.
    pub fn hold_limit(&self) -> Duration {
        self.active_limit + Duration::from_secs(20)
    }
}

/// One GPU's part of a probe.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    pub gpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// `healthy`, `degraded` or `unusable`.
    pub verdict: &'static str,
    pub findings: Vec<Finding>,
    pub state: GpuState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveResult>,
    #[serde(skip)]
    pub judged: Verdict,
}

/// One probe of some GPUs (`gagentd probe --json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub elapsed_ms: u64,
    pub gpus: Vec<GpuReport>,
}

/// Reads, checks and judges GPUs, remembering each GPU's last reading (counters are
/// judged by how much they grew since).
pub struct Prober {
    reader: Box<dyn DeviceStateReader>,
    active: Option<ActiveRunner>,
    /// NVML's index of each of the agent's GPUs (empty: the same).
    gpu_map: Vec<u32>,
    last: HashMap<u32, GpuState>,
}

impl Prober {
    pub fn new(
        reader: Box<dyn DeviceStateReader>,
        active: Option<ActiveRunner>,
        gpu_map: Vec<u32>,
    ) -> Prober {
        Prober {
            reader,
            active,
            gpu_map,
            last: HashMap::new(),
        }
    }

    /// Probes `gpus`; those in `busy` (running a job) are only read, not actively checked.
    pub fn probe(&mut self, gpus: &[RegisteredGpu], busy: &BTreeSet<u32>) -> Report {
        let started = Instant::now();
        let states = self.reader.read(gpus);
        let mut active: Vec<Option<ActiveResult>> = vec![None; gpus.len()];
        if let Some(runner) = &self.active {
            let picked: Vec<(usize, Target)> = gpus
                .iter()
                .zip(&states)
                .enumerate()
                .filter(|(_, (g, s))| s.is_reachable() && !busy.contains(&g.gpu))
                .map(|(k, (g, _))| {
                    let target = Target {
                        gpu: g.gpu,
                        device: self.gpu_map.get(g.gpu as usize).copied().unwrap_or(g.gpu),
                        pci_bus_id: g.pci_bus_id.clone(),
                        uuid: g.uuid.clone(),
                    };
                    (k, target)
                })
                .collect();
            let targets: Vec<Target> = picked.iter().map(|(_, t)| t.clone()).collect();
            for ((k, _), result) in picked.iter().zip(runner.run(&targets)) {
                active[*k] = Some(result);
            }
        }
        let gpus = gpus
            .iter()
            .zip(states)
            .zip(active)
            .map(|((g, state), active)| {
                let verdict = judge(g, self.last.get(&g.gpu), &state, active.as_ref());
                self.last.insert(g.gpu, state.clone());
                GpuReport {
                    gpu: g.gpu,
                    pci_bus_id: g.pci_bus_id.clone(),
                    verdict: verdict.name(),
                    findings: verdict.found().iter().map(|f| f.finding.clone()).collect(),
                    state,
                    active,
                    judged: verdict,
                }
            })
            .collect();
        Report {
            elapsed_ms: started.elapsed().as_millis() as u64,
            gpus,
        }
    }
}

/// What set a probe off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// An unknown line from a device driver in the kernel log.
    KernelLine,
    /// A node run ended with a failure that may be its GPU's.
    FailedRun,
}

impl Trigger {
    pub fn label(self) -> &'static str {
        match self {
            Trigger::KernelLine => "kernel_line",
            Trigger::FailedRun => "failed_run",
        }
    }
}

/// A probe asked for.
#[derive(Debug, Clone)]
pub struct Request {
    /// The GPUs (the agent's indices); `None`: all of them.
    pub gpus: Option<Vec<u32>>,
    pub trigger: Trigger,
    /// What set it off (the kernel line, the run's failure): kept in the findings.
    pub evidence: String,
}

/// A probe's result as the agent acts on it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: Report,
    /// Health events for what is wrong (warnings and worse), evidence included.
    pub events: Vec<HealthEvent>,
    /// Each unusable GPU with the state that makes it so.
    pub unusable: Vec<(u32, String)>,
}

impl Outcome {
    fn of(report: Report, evidence: &str) -> Outcome {
        let at = now_ms();
        let mut events = Vec::new();
        let mut unusable = Vec::new();
        for g in &report.gpus {
            if let Some(worst) = g.judged.found().first()
                && g.judged.is_unusable()
            {
                unusable.push((g.gpu, worst.headline.clone()));
            }
            events.extend(
                g.judged
                    .found()
                    .iter()
                    .filter(|f| f.finding.severity >= Severity::Warn)
                    .map(|f| f.clone().triggered_by(Some(evidence)).noted().event(at)),
            );
        }
        Outcome {
            report,
            events,
            unusable,
        }
    }

    /// The outcome for `gpus` when their probe did not finish within `limit`.
    pub fn hung(gpus: &[RegisteredGpu], limit: Duration, evidence: &str) -> Outcome {
        let report = Report {
            elapsed_ms: limit.as_millis() as u64,
            gpus: gpus
                .iter()
                .map(|g| {
                    let verdict = judge::probe_hung(g, limit.as_millis() as u64);
                    GpuReport {
                        gpu: g.gpu,
                        pci_bus_id: g.pci_bus_id.clone(),
                        verdict: verdict.name(),
                        findings: verdict.found().iter().map(|f| f.finding.clone()).collect(),
                        state: GpuState::reachable(g.gpu),
                        active: None,
                        judged: verdict,
                    }
                })
                .collect(),
        };
        Outcome::of(report, evidence)
    }

    /// One line for the agent's log.
    pub fn summary(&self) -> String {
        self.report
            .gpus
            .iter()
            .map(|g| match g.judged.found().first() {
                Some(f) if !matches!(g.judged, Verdict::Healthy { .. }) => {
                    format!("GPU {} {} ({})", g.gpu, g.verdict, f.finding.kind)
                }
                _ => format!("GPU {} {}", g.gpu, g.verdict),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The event saying the GPUs an unknown kernel line set the probe off for passed it
/// (informational: the line stays unexplained, the GPUs are fine).
pub fn passed(report: &Report, evidence: &str) -> HealthEvent {
    let gpus: Vec<String> = report.gpus.iter().map(|g| g.gpu.to_string()).collect();
    let checked = report.gpus.iter().filter(|g| g.active.is_some()).count();
    let what = if checked > 0 {
        "state and active check"
    } else {
        "state"
    };
    let one = (report.gpus.len() == 1).then(|| &report.gpus[0]);
    let finding = Finding {
        gpu: one.map(|g| g.gpu),
        pci_bus_id: one.and_then(|g| g.pci_bus_id.clone()),
        ..Finding::new(
            Severity::Info,
            gsched_types::findings::Component::Gpu,
            "gpu-probe-healthy",
            &format!(
                "GPU {} healthy ({what}) in {} ms; probed after: {}",
                gpus.join(", "),
                report.elapsed_ms,
                evidence.trim()
            ),
            "nothing to do for the GPU: its state is good; the line itself stays unexplained",
        )
    };
    HealthEvent {
        severity: gsched_types::node::HealthSeverity::Info,
        kind: gsched_types::node::HealthKind::Driver,
        gpu: finding.gpu,
        xid: None,
        message: format!(
            "health probe: GPU {} healthy after an unknown kernel line",
            gpus.join(", ")
        ),
        at_ms: now_ms(),
        stops_node_jobs: false,
        finding: Some(finding),
    }
}

/// Counts for the agent's metrics.
#[derive(Debug, Default)]
pub struct ProbeStats {
    pub kernel_line: AtomicU64,
    pub failed_run: AtomicU64,
    pub unusable_gpus: AtomicU64,
    pub last_ms: AtomicU64,
    pub total_ms: AtomicU64,
}

/// Which GPUs run a job now (not actively checked: a CUDA context of our own on a busy
/// GPU would disturb the job, or fail on an exclusive one).
pub type Busy = dyn Fn() -> BTreeSet<u32> + Send + Sync;

/// Runs probes one at a time on a thread of its own.
pub struct ProbeService {
    queue: std::sync::mpsc::SyncSender<(u64, Request)>,
    results: Mutex<HashMap<u64, Outcome>>,
    next: AtomicU64,
    pub stats: ProbeStats,
    busy: OnceLock<Box<Busy>>,
    topology: Arc<RwLock<Topology>>,
    outbox: Arc<Outbox>,
    pub settings: ProbeSettings,
}

/// Probes waiting their turn; more are dropped (a kernel-line flood).
const QUEUE: usize = 32;

impl ProbeService {
    pub fn start(
        prober: Prober,
        topology: Arc<RwLock<Topology>>,
        outbox: Arc<Outbox>,
        settings: ProbeSettings,
    ) -> Arc<ProbeService> {
        let (queue, requests) = std::sync::mpsc::sync_channel(QUEUE);
        let service = Arc::new(ProbeService {
            queue,
            results: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            stats: ProbeStats::default(),
            busy: OnceLock::new(),
            topology,
            outbox,
            settings,
        });
        let worker = service.clone();
        std::thread::Builder::new()
            .name("gpu-probe".into())
            .spawn(move || worker.serve(prober, requests))
            .expect("spawning the probe thread");
        service
    }

    /// Tells the service which GPUs run a job (set once, after the run manager exists).
    pub fn set_busy(&self, busy: Box<Busy>) {
        let _ = self.busy.set(busy);
    }

    /// Queues a probe; its ticket, or `None` when the queue is full.
    pub fn request(&self, request: Request) -> Option<u64> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        match self.queue.try_send((ticket, request)) {
            Ok(()) => Some(ticket),
            Err(e) => {
                tracing::warn!("GPU probe not queued ({e:?}): {QUEUE} already wait");
                None
            }
        }
    }

    /// A failed run's probe result, once it is in.
    pub fn take(&self, ticket: u64) -> Option<Outcome> {
        self.results.lock().remove(&ticket)
    }

    /// The registered GPUs among `gpus` (all when `None`).
    pub fn registered(&self, gpus: Option<&[u32]>) -> Vec<RegisteredGpu> {
        self.topology
            .read()
            .gpus
            .iter()
            .filter(|g| gpus.is_none_or(|l| l.contains(&g.index)))
            .map(RegisteredGpu::of)
            .collect()
    }

    fn serve(&self, mut prober: Prober, requests: std::sync::mpsc::Receiver<(u64, Request)>) {
        for (ticket, request) in requests {
            let registered = self.registered(request.gpus.as_deref());
            let busy = self.busy.get().map(|f| f()).unwrap_or_default();
            let report = prober.probe(&registered, &busy);
            let outcome = Outcome::of(report, &request.evidence);
            let counter = match request.trigger {
                Trigger::KernelLine => &self.stats.kernel_line,
                Trigger::FailedRun => &self.stats.failed_run,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let ms = outcome.report.elapsed_ms;
            self.stats.last_ms.store(ms, Ordering::Relaxed);
            self.stats.total_ms.fetch_add(ms, Ordering::Relaxed);
            self.stats
                .unusable_gpus
                .fetch_add(outcome.unusable.len() as u64, Ordering::Relaxed);
            tracing::info!(
                "GPU probe after {} took {ms} ms: {}",
                request.trigger.label().replace('_', " "),
                outcome.summary()
            );
            match request.trigger {
                Trigger::KernelLine => {
                    for e in &outcome.events {
                        tracing::warn!("health: {:?} {}", e.severity, e.message);
                    }
                    // The verdict is always told: the line's warning says a probe follows.
                    let events = if outcome.events.is_empty() {
                        vec![passed(&outcome.report, &request.evidence)]
                    } else {
                        outcome.events
                    };
                    self.outbox
                        .push(|seq| AgentToController::Health { seq, events });
                }
                Trigger::FailedRun => {
                    self.results.lock().insert(ticket, outcome);
                }
            }
        }
    }
}
