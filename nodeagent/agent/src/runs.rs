//! This node's runs of jobs (its part of each attempt): launching them through the
//! supervisor, watching their logs and exit, stopping them and re-adopting them after an
//! agent restart. What to do about a run each round (report, warn, stop, escalate, end)
//! is `crate::monitor`'s pure decision; this file observes and carries it out. Every
//! event goes to the on-disk outbox before anything else, so none is lost.

// Every public item says what it is: the doc comment of `signal` once sat on `notice`.
#![warn(missing_docs)]

use crate::hang::{self, HangSettings};
use crate::identity;
use crate::isolation::Cgroups;
use crate::layout::{self, JobRoot, RunFiles, Scratch};
use crate::monitor::{self, Action, ExitRecord, Limits, Watch};
use crate::outbox::Outbox;
use crate::probe::when::{self, AfterRun};
use crate::probe::{Outcome, ProbeService, Request, Trigger};
use crate::tasks::GrunTasks;
use crate::{devfilter, devices};
use gsched_launch::plan::{self as run_plan, Owner, Plan, RunContext};
use gsched_launch::transport::{NodeNet, TransportLog};
use gsched_launch::watch::{LineReader, LogFinding, error_line, parse_error_file};
use gsched_proto::clock::now_ms;
use gsched_types::agent::{AgentToController, LaunchSpec, RunEvent, RunRef, RunUsage};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::JobId;
use gsched_types::steps::{StepLaunch, TaskIo};
use gsched_types::topology::Topology;
use gsched_types::usage::{GpuUsage, NodeUsage};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Agent-wide settings the run manager needs.
pub struct Settings {
    /// This node's name, as it registered.
    pub node: String,
    /// The agent's own directory: runs under `steps/<job>.<attempt>/`.
    pub state_dir: PathBuf,
    /// The node's topology as discovered (kept current by the health monitor).
    pub topology: Arc<RwLock<Topology>>,
    /// Interface carrying the training address (NCCL_SOCKET_IFNAME).
    pub training_iface: Option<String>,
    /// Environment every run gets from the agent (`--env`).
    pub agent_env: BTreeMap<String, String>,
    /// Where runs' cgroups are made, when the agent may make them.
    pub cgroups: Option<Cgroups>,
    /// Hand GPU device nodes to the job owner while the run goes on (root agents).
    pub private_gpus: bool,
    /// The kernel loads cgroup device programs: each run's cgroup gets a GPU filter.
    pub device_filter: bool,
    /// Where runs' private directories (script, logs) are made.
    pub job_root: JobRoot,
    /// The binary that runs `supervise` (normally this agent's own executable).
    pub exe: PathBuf,
    /// Device index of each GPU this agent manages (empty: all, same indices).
    pub gpu_map: Vec<u32>,
    /// Put first on each job's `PATH` (`--slurm-names`: links made by `gctl slurm-names`).
    pub slurm_names: Option<String>,
    /// The controllers, for tools a job runs (`GSCHED_CONTROLLERS` unless it has its own).
    pub controllers: String,
    /// A root agent runs no job as a uid below this (root and system users), whatever
    /// a controller sends (`--min-uid`).
    pub min_uid: u32,
    /// The GPU health probe, where this node has one: a failed run's GPUs are probed
    /// before its end is reported.
    pub probe: Option<Arc<ProbeService>>,
    /// When a multi-rank job that failed is taken to hang (`--hang-after`).
    pub hang: HangSettings,
}

/// A run that ended with a failure its GPUs may explain, its end not reported until they
/// are probed: the controller keeps the job's allocation until then, so no other job is
/// given those GPUs before the verdict.
struct Held {
    /// The run's `Exited` report.
    exited: RunEvent,
    gpus: Vec<u32>,
    cause: AfterRun,
    since: Instant,
    phase: HeldPhase,
}

enum HeldPhase {
    /// The probe's ticket (`None`: its queue was full, asked again next round).
    Probing(Option<u64>),
    /// The probe found a GPU unusable: its health event (this sequence number) is to be
    /// committed before the run's end, so the GPU is drained before it is freed.
    Draining(u64),
}

/// How long `gagentd notice` may take to append its line.
const NOTICE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

struct Run {
    key: RunRef,
    files: RunFiles,
    launch: LaunchSpec,
    pgid: Option<i32>,
    watch: Watch,
    limits: Limits,
    /// NCCL's network lines: which transport it chose, and why.
    transport: TransportLog,
    /// Reads the run's output a line at a time ("Last error:" with the line after it).
    lines: LineReader,
    tails: HashMap<PathBuf, (u64, String)>,
    cgroup: Option<PathBuf>,
    devices: Vec<String>,
    scratch: Option<Scratch>,
    supervisor: Option<std::process::Child>,
    supervisor_pid: Option<i32>,
    /// What the run did with its GPUs, CPUs and memory so far.
    usage: NodeUsage,
    /// Ended, its report waiting for the probe of its GPUs.
    held: Option<Held>,
    /// What the hang watch knows of the run.
    hang: HangWatch,
}

/// What the hang watch (`crate::hang`) keeps of a run between rounds.
struct HangWatch {
    /// Ranks of the job on every node.
    world: u32,
    /// This node's tasks, by their place in the plan.
    ranks: Vec<hang::Rank>,
    /// How much of the supervisor's `task-exits.json` has been read.
    exits_read: usize,
    /// When this node's output last grew.
    last_output_ms: u64,
    /// The first error line of the run's output.
    error: Option<hang::ErrorSeen>,
    samples: VecDeque<hang::Sample>,
    /// The last verdict logged, so each change is logged once.
    logged: Option<hang::Keep>,
}

/// Usage samples a run's hang watch keeps (the oldest go first).
const HANG_SAMPLES: usize = 256;

impl HangWatch {
    fn new(launch: &LaunchSpec, plan: Option<&Plan>, started_ms: u64) -> HangWatch {
        let ranks = plan
            .map(|p| {
                p.tasks
                    .iter()
                    .enumerate()
                    .map(|(k, env)| hang::Rank {
                        rank: env
                            .iter()
                            .find(|(name, _)| name == "SLURM_PROCID")
                            .and_then(|(_, v)| v.parse().ok())
                            .unwrap_or(k as u32),
                        exited: None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        HangWatch {
            world: world_size(launch),
            ranks,
            exits_read: 0,
            last_output_ms: started_ms,
            error: None,
            samples: VecDeque::new(),
            logged: None,
        }
    }

    /// Whether a rank failed or an error was printed: the run's silence is worth
    /// watching (and sampling often).
    fn armed(&self, settings: &HangSettings) -> bool {
        settings.enabled()
            && self.world > 1
            && (self.error.is_some()
                || self
                    .ranks
                    .iter()
                    .any(|r| r.exited.is_some_and(|x| x.failed())))
    }

    fn push(&mut self, sample: hang::Sample) {
        self.samples.push_back(sample);
        while self.samples.len() > HANG_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// A line of the run's output: the first error line, or an error finding, is kept.
    fn line(&mut self, line: &str, finding: Option<&LogFinding>, in_traceback: bool, at_ms: u64) {
        if self.error.is_some() {
            return;
        }
        let seen = match finding {
            // NCCL's own WARN and unwinding lines are warnings it may go on after.
            Some(f) if f.raised.is_none() && f.kind == FailureKind::NcclError && !f.fatal => None,
            Some(f) => Some(f.line.clone()),
            None if !in_traceback && error_line(line) => {
                Some(gsched_types::findings::clip(line.trim(), 300))
            }
            None => None,
        };
        self.error = seen.map(|line| hang::ErrorSeen { line, at_ms });
    }
}

/// How many ranks a job has on all its nodes, as gsched starts them: each node's tasks,
/// or torchrun's workers. A batch script is one process: its steps' tasks are not
/// counted (the ranks a script starts itself are not known).
fn world_size(launch: &LaunchSpec) -> u32 {
    let nodes = launch.nodes.len().max(1) as u32;
    if launch.spec.torchrun.is_some() {
        nodes * gsched_launch::torchrun::nproc_per_node(&launch.spec)
    } else if launch.spec.launch == gsched_types::job::LaunchMode::Batch {
        1
    } else {
        nodes * run_plan::task_count(launch)
    }
}

impl Run {
    fn new(
        launch: LaunchSpec,
        files: RunFiles,
        plan: Option<&Plan>,
        supervisor: Option<std::process::Child>,
        supervisor_pid: Option<i32>,
    ) -> Run {
        let limits = Limits {
            started_ms: local_start(&files, &launch),
            time_limit_s: launch.time_limit_s,
            signal: launch.spec.signal.clone(),
            kill_grace: Duration::from_secs(
                launch.kill_grace_s.unwrap_or(monitor::DEFAULT_KILL_GRACE_S),
            ),
        };
        let watch = Watch {
            // A run re-adopted after an agent restart already had its warning if it was due.
            warned: supervisor.is_none() && monitor::warning_due(&limits, now_ms()),
            ..Watch::default()
        };
        let usage = std::fs::read(files.usage())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let hang = HangWatch::new(&launch, plan, limits.started_ms.max(now_ms()));
        Run {
            usage,
            hang,
            held: None,
            key: RunRef {
                job: launch.job,
                attempt: launch.attempt,
            },
            files,
            cgroup: plan.and_then(|p| p.cgroup.clone()).map(PathBuf::from),
            devices: plan.map(|p| p.devices.clone()).unwrap_or_default(),
            scratch: plan
                .and_then(|p| p.scratch.clone())
                .map(|d| Scratch(PathBuf::from(d))),
            launch,
            pgid: None,
            watch,
            limits,
            transport: TransportLog::default(),
            lines: LineReader::default(),
            tails: HashMap::new(),
            supervisor,
            supervisor_pid,
        }
    }

    /// The run's log directory (NCCL debug files, torchrun error files), if it has one.
    fn logs(&self) -> Option<PathBuf> {
        self.scratch.as_ref().map(Scratch::logs)
    }
}

/// This node's runs and `grun` tasks, behind one lock (`Arc<Mutex<RunManager>>`) that
/// the session, the monitor and the metrics share.
pub struct RunManager {
    settings: Settings,
    outbox: Arc<Outbox>,
    runs: HashMap<(JobId, u32), Run>,
    /// `grun` steps' tasks inside the jobs above.
    grun: GrunTasks,
    /// Usage summaries of the last sample, waiting for the next heartbeat.
    usage_out: Vec<RunUsage>,
    /// GPU use outside jobs: the policy, what the last look saw, the report to send.
    outside: OutsideWatch,
}

/// What the agent keeps of GPU use outside jobs between looks (`crate::outside`).
#[derive(Default)]
struct OutsideWatch {
    /// The controller's `[outside_jobs]`; `None` until a controller that takes the
    /// reports registered this agent.
    policy: Option<gsched_types::outside::OutsidePolicy>,
    seen: std::collections::BTreeMap<(u32, u32), crate::outside::Seen>,
    /// The last report, to send at the next heartbeat (an empty one once, when the
    /// uses are gone).
    out: Option<Vec<gsched_types::outside::OutsideUse>>,
    last_empty: bool,
}

/// What stopping a run leaves to do once the run manager's lock is released: the signal
/// and the files ([`RunManager::stop`]).
#[must_use = "a stop is carried out by `carry_out`"]
pub struct Stop(StopWork);

enum StopWork {
    /// Already being stopped.
    Nothing,
    /// Signal the run's process group (read from its directory if not known yet).
    Signal {
        action: Action,
        pgid: Option<i32>,
        files: RunFiles,
        cgroup: Option<PathBuf>,
    },
    /// A run that never started here: report its end, once.
    Unstarted {
        dir: PathBuf,
        outbox: Arc<Outbox>,
        event: RunEvent,
    },
}

impl Stop {
    /// Signals, reads and writes what the stop needs; takes no lock of the run manager.
    pub fn carry_out(self) {
        match self.0 {
            StopWork::Nothing => {}
            StopWork::Signal {
                action,
                pgid,
                files,
                cgroup,
            } => signal_run(
                pgid.or_else(|| read_pgid(&files)),
                cgroup.as_deref(),
                &action,
            ),
            StopWork::Unstarted { dir, outbox, event } => {
                if dir.join("reported").exists() {
                    return;
                }
                let _ = layout::private_dir(&dir);
                outbox.push(|seq| AgentToController::Run { seq, event });
                let _ = layout::write_private(&dir.join("reported"), b"");
            }
        }
    }
}

fn signal_group(pgid: Option<i32>, sig: Signal) {
    if let Some(g) = pgid.filter(|g| *g > 1) {
        let _ = signal::killpg(Pid::from_raw(g), sig);
    }
}

/// A signal for a run: to the batch shell (the process group's leader) alone, or to
/// every process in the group.
fn send_signal(pgid: Option<i32>, sig: Signal, batch_only: bool) {
    match pgid.filter(|g| *g > 1) {
        Some(g) if batch_only => {
            let _ = signal::kill(Pid::from_raw(g), sig);
        }
        pgid => signal_group(pgid, sig),
    }
}

/// When this node started the run, on its own clock, as `launch` recorded it in the
/// run's directory (so a restarted agent keeps it); a run of an agent that did not
/// record it counts from the controller's start time.
fn local_start(files: &RunFiles, launch: &LaunchSpec) -> u64 {
    std::fs::read_to_string(files.local_start())
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(launch.start_ms)
}

fn alive(pid: i32) -> bool {
    pid > 0 && signal::kill(Pid::from_raw(pid), None).is_ok()
}

impl RunManager {
    /// The run manager of a starting agent, with the runs a previous agent left (their
    /// supervisors outlive it) adopted again.
    pub fn new(settings: Settings, outbox: Arc<Outbox>) -> RunManager {
        let mut m = RunManager {
            settings,
            outbox,
            runs: HashMap::new(),
            grun: GrunTasks::default(),
            usage_out: Vec::new(),
            outside: OutsideWatch::default(),
        };
        m.readopt();
        m
    }

    fn dir(&self, job: JobId, attempt: u32) -> PathBuf {
        self.settings
            .state_dir
            .join("steps")
            .join(format!("{job}.{attempt}"))
    }

    fn emit(&self, event: RunEvent) {
        self.outbox
            .push(|seq| AgentToController::Run { seq, event });
    }

    /// Each GPU held by a node run, with its job (for the metrics endpoint).
    pub fn gpu_jobs(&self) -> Vec<(u32, JobId)> {
        self.runs
            .values()
            .flat_map(|s| s.launch.node_alloc.gpus.iter().map(|g| (*g, s.key.job)))
            .collect()
    }

    /// GPUs of runs still going on (a run whose end waits for its probe holds its GPUs
    /// for the probe, not for a job).
    pub fn gpus_running_jobs(&self) -> std::collections::BTreeSet<u32> {
        self.runs
            .values()
            .filter(|r| r.held.is_none())
            .flat_map(|r| r.launch.node_alloc.gpus.iter().copied())
            .collect()
    }

    /// Takes one usage sample of every node run (GPUs from `source`, CPU and memory
    /// from its cgroup) and queues each run's summary for the controller; the hang watch
    /// keeps each run's figures too.
    pub fn sample_usage(&mut self, source: &mut crate::usage::Source, interval_s: u32) {
        source.begin();
        let now = now_ms();
        let hang = &self.settings.hang;
        let mut reports = Vec::new();
        for run in self.runs.values_mut() {
            let alloc = &run.launch.node_alloc;
            let threshold = run.launch.idle_threshold_pct.unwrap_or(1);
            let u = &mut run.usage;
            let mut gpu_max: Option<u8> = None;
            if let Some(reader) = source.reader() {
                for &gpu in &alloc.gpus {
                    let device = self
                        .settings
                        .gpu_map
                        .get(gpu as usize)
                        .copied()
                        .unwrap_or(gpu);
                    let Some(reading) = reader.read(gpu, device) else {
                        continue;
                    };
                    gpu_max = gpu_max.max(Some(reading.util_pct));
                    let at = match u.gpus.iter().position(|g| g.gpu == gpu) {
                        Some(k) => k,
                        None => {
                            u.gpus.push(GpuUsage::new(gpu));
                            u.gpus.len() - 1
                        }
                    };
                    u.gpus[at].add(reading, interval_s, threshold);
                }
            }
            u.node = self.settings.node.clone();
            u.interval_s = interval_s;
            u.sampled_s += u64::from(interval_s);
            u.cpus = alloc.cpus.len() as u32;
            u.mem_limit_mib = alloc.mem_mb;
            let mut cpu_ms = None;
            if let Some(cg) = &run.cgroup {
                let (cpu, mem_mib) = crate::usage::cgroup_figures(cg);
                u.cpu_ms = cpu.unwrap_or(u.cpu_ms);
                u.mem_max_mib = u.mem_max_mib.max(mem_mib.unwrap_or(0));
                cpu_ms = cpu;
            }
            if let Ok(b) = serde_json::to_vec(&u) {
                let _ = layout::write_private(&run.files.usage(), &b);
            }
            reports.push(RunUsage {
                job: run.key.job,
                attempt: run.key.attempt,
                usage: u.clone(),
            });
            if hang.enabled() && run.hang.world > 1 {
                if cpu_ms.is_none() && run.hang.armed(hang) {
                    cpu_ms = run
                        .pgid
                        .and_then(|g| crate::usage::group_cpu_ms(Path::new("/proc"), g));
                }
                run.hang.push(hang::Sample {
                    at_ms: now,
                    gpu_max_pct: gpu_max,
                    cpu_ms,
                });
            }
        }
        reports.sort_by_key(|r| (r.job, r.attempt));
        self.usage_out = reports;
    }

    /// Samples the GPUs and CPU time of runs the hang watch suspects (a rank failed or an
    /// error was printed), between the regular samples; nothing goes to their summaries.
    pub fn sample_suspects(&mut self, source: &mut crate::usage::Source) {
        let hang = &self.settings.hang;
        if !self.runs.values().any(|r| r.hang.armed(hang)) {
            return;
        }
        source.begin();
        let now = now_ms();
        for run in self.runs.values_mut() {
            if !run.hang.armed(hang) || run.held.is_some() || run.watch.stop.is_some() {
                continue;
            }
            let mut gpu_max: Option<u8> = None;
            if let Some(reader) = source.reader() {
                for &gpu in &run.launch.node_alloc.gpus {
                    let device = self
                        .settings
                        .gpu_map
                        .get(gpu as usize)
                        .copied()
                        .unwrap_or(gpu);
                    if let Some(r) = reader.read(gpu, device) {
                        gpu_max = gpu_max.max(Some(r.util_pct));
                    }
                }
            }
            let cpu_ms = match &run.cgroup {
                Some(cg) => crate::usage::cgroup_figures(cg).0,
                None => run
                    .pgid
                    .and_then(|g| crate::usage::group_cpu_ms(Path::new("/proc"), g)),
            };
            run.hang.push(hang::Sample {
                at_ms: now,
                gpu_max_pct: gpu_max,
                cpu_ms,
            });
        }
    }

    /// The newest usage summaries not yet sent.
    pub fn take_usage(&mut self) -> Vec<RunUsage> {
        std::mem::take(&mut self.usage_out)
    }

    /// The controller's `[outside_jobs]` policy (at registration; `None`: a controller
    /// that takes no reports of GPU use outside jobs).
    pub fn set_outside_policy(&mut self, policy: Option<gsched_types::outside::OutsidePolicy>) {
        self.outside.policy = policy;
        // A new leader knows nothing yet: the next look reports even an empty list.
        self.outside.last_empty = false;
    }

    /// The report of GPU use outside jobs waiting for the next heartbeat.
    pub fn take_outside(&mut self) -> Option<Vec<gsched_types::outside::OutsideUse>> {
        self.outside.out.take()
    }

    /// What a look at the processes on this node's GPUs needs from here (taken under the
    /// lock): NVML's lists from `source` where it has them, the device nodes to look for
    /// in `/proc` otherwise, the runs and what the last look saw. `None` until a
    /// controller that takes the reports gave a policy. The look itself
    /// (`crate::outside::Look::take`) runs without the lock; [`Self::outside_seen`] keeps
    /// its verdict.
    pub fn outside_look(&self, source: &mut crate::usage::Source) -> Option<crate::outside::Look> {
        use crate::outside;
        let policy = self.outside.policy.clone()?;
        let topo = self.settings.topology.read();
        let mut procs: Vec<outside::GpuProc> = Vec::new();
        let mut by_files: Vec<(u32, String)> = Vec::new();
        for (i, g) in topo.gpus.iter().enumerate() {
            let gpu = i as u32;
            let device = self.settings.gpu_map.get(i).copied().unwrap_or(gpu);
            match source.reader().and_then(|r| r.processes(gpu, device)) {
                Some(list) => {
                    procs.extend(list.into_iter().map(|(pid, mem_mib)| outside::GpuProc {
                        gpu,
                        pid,
                        mem_mib,
                    }))
                }
                None => by_files.extend(g.device_path.clone().map(|p| (gpu, p))),
            }
        }
        let runs = self
            .runs
            .values()
            .map(|r| outside::RunFacts {
                job: r.key.job,
                gpus: r.launch.node_alloc.gpus.clone(),
                cgroup: r.cgroup.as_ref().map(|c| {
                    let c = c.to_string_lossy();
                    c.strip_prefix("/sys/fs/cgroup").unwrap_or(&c).to_string()
                }),
                pgid: r.pgid,
                supervisor: r.supervisor_pid.map(|p| p as u32),
            })
            .collect();
        Some(outside::Look {
            policy,
            procs,
            by_files,
            runs,
            seen: self.outside.seen.clone(),
            node: self.settings.node.clone(),
        })
    }

    /// Keeps a look's verdict: what it saw for the next look, and the report for the
    /// next heartbeat (an empty one once, when the uses are gone).
    pub fn outside_seen(&mut self, verdict: crate::outside::Verdict) {
        self.outside.seen = verdict.seen;
        let empty = verdict.uses.is_empty();
        if !empty || !self.outside.last_empty {
            self.outside.out = Some(verdict.uses);
        }
        self.outside.last_empty = empty;
    }

    /// Runs still going on, for heartbeats.
    pub fn running(&self) -> Vec<RunRef> {
        let mut v: Vec<RunRef> = self.runs.values().map(|s| s.key.clone()).collect();
        v.sort_by_key(|s| (s.job, s.attempt));
        v
    }

    /// GPU device nodes that running node runs hold.
    pub fn devices_in_use(&self) -> std::collections::BTreeSet<String> {
        self.runs
            .values()
            .flat_map(|s| s.devices.iter().cloned())
            .collect()
    }

    /// Runs going on or ended with an unacknowledged report, for registration.
    pub fn known(&self) -> Vec<RunRef> {
        let mut v = self.running();
        for ev in self.outbox.pending() {
            if let AgentToController::Run {
                event: RunEvent::Exited { job, attempt, .. },
                ..
            } = ev
                && !v.iter().any(|s| s.job == job && s.attempt == attempt)
            {
                v.push(RunRef { job, attempt });
            }
        }
        v
    }

    /// Picks up runs a previous agent process started.
    fn readopt(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.settings.state_dir.join("steps")) else {
            return;
        };
        for entry in entries.flatten() {
            let files = RunFiles(entry.path());
            if files.reported().exists() {
                continue;
            }
            if files.never_started() {
                // The agent died while preparing this run, before any supervisor existed:
                // forget it; the controller sends the launch again.
                tracing::info!(
                    "discarding {}: the launch was interrupted before the step started",
                    files.0.display()
                );
                let _ = std::fs::remove_dir_all(&files.0);
                continue;
            }
            let Ok(launch) = std::fs::read(files.launch())
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<LaunchSpec>(&b).map_err(|e| e.to_string()))
            else {
                continue;
            };
            let plan: Option<Plan> = std::fs::read(files.plan())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let supervisor_pid = std::fs::read_to_string(files.supervisor_pid())
                .ok()
                .and_then(|s| s.trim().parse().ok());
            let pgid = read_pgid(&files);
            let key = RunRef {
                job: launch.job,
                attempt: launch.attempt,
            };
            tracing::info!(
                "re-adopting step {}.{} (supervisor {:?}, process group {:?})",
                key.job,
                key.attempt,
                supervisor_pid,
                pgid
            );
            let mut run = Run::new(launch, files, plan.as_ref(), None, supervisor_pid);
            run.pgid = pgid;
            self.runs.insert((key.job, key.attempt), run);
        }
    }

    /// Starts this node's run of a job. Launching an already known run does nothing.
    pub fn launch(&mut self, l: LaunchSpec) {
        let key = (l.job, l.attempt);
        let dir = self.dir(l.job, l.attempt);
        if self.runs.contains_key(&key) {
            return;
        }
        let files = RunFiles(dir);
        if files.0.exists() {
            if !files.never_started() {
                return;
            }
            let _ = std::fs::remove_dir_all(&files.0);
        }
        let recorded = layout::private_dir(&files.0)
            .and_then(|_| {
                let started = now_ms().to_string();
                layout::write_private(&files.local_start(), started.as_bytes())
            })
            .and_then(|_| {
                layout::write_private(&files.launch(), &serde_json::to_vec(&l).unwrap_or_default())
            });
        if let Err(e) = recorded {
            self.fail_launch(
                &l,
                &files,
                format!(
                    "cannot record the step in the agent's state directory {}: {e}",
                    files.0.display()
                ),
            );
            return;
        }
        match self.prepare(&l) {
            Ok((plan, owner)) => {
                if let Err(e) = layout::write_private(
                    &files.plan(),
                    &serde_json::to_vec(&plan).unwrap_or_default(),
                ) {
                    self.undo_prepare(&plan);
                    self.fail_launch(&l, &files, format!("cannot write the step plan: {e}"));
                    return;
                }
                let log = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(files.0.join("supervisor.log"))
                    .ok();
                let mut cmd = std::process::Command::new(&self.settings.exe);
                cmd.arg("supervise")
                    .arg(&files.0)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null());
                match log {
                    Some(f) => cmd.stderr(f),
                    None => cmd.stderr(std::process::Stdio::null()),
                };
                // SAFETY: the hook makes one async-signal-safe system call (setsid) and
                // allocates nothing.
                unsafe {
                    cmd.pre_exec(|| {
                        nix::unistd::setsid()?;
                        Ok(())
                    });
                }
                match cmd.spawn() {
                    Ok(child) => {
                        let pid = child.id() as i32;
                        let _ = layout::write_private(
                            &files.supervisor_pid(),
                            pid.to_string().as_bytes(),
                        );
                        tracing::info!(
                            "job {} attempt {} started on {} as {} (supervisor {pid})",
                            l.job,
                            l.attempt,
                            self.settings.node,
                            owner.user
                        );
                        let run = Run::new(l, files, Some(&plan), Some(child), Some(pid));
                        self.runs.insert(key, run);
                    }
                    Err(e) => {
                        self.undo_prepare(&plan);
                        self.fail_launch(
                            &l,
                            &files,
                            format!(
                                "cannot start the step supervisor {}: {e}",
                                self.settings.exe.display()
                            ),
                        );
                    }
                }
            }
            Err(e) => self.fail_launch(&l, &files, e),
        }
    }

    fn fail_launch(&self, l: &LaunchSpec, files: &RunFiles, why: String) {
        tracing::warn!("job {} attempt {}: launch failed: {why}", l.job, l.attempt);
        let failure = Failure {
            kind: FailureKind::LaunchFailed,
            node: Some(self.settings.node.clone()),
            evidence: why,
            at_ms: now_ms(),
        };
        self.emit(RunEvent::Exited {
            job: l.job,
            attempt: l.attempt,
            code: None,
            signal: None,
            failure: Some(failure),
            usage: None,
        });
        let _ = layout::private_dir(&files.0);
        let _ = layout::write_private(&files.reported(), b"");
    }

    /// Gives back what `prepare` took for a run that did not start.
    fn undo_prepare(&self, plan: &Plan) {
        devices::release(&plan.devices);
        if let Some(cg) = &plan.cgroup {
            Cgroups::remove(Path::new(cg));
        }
        if let Some(s) = &plan.scratch {
            let _ = std::fs::remove_dir_all(s);
        }
    }

    /// Builds and prepares the supervisor plan: the owner's identity, the run's private
    /// directory and script, the cgroup (with its GPU filter) and the GPU device nodes (the
    /// decisions are `gsched_launch::plan`'s).
    fn prepare(&self, l: &LaunchSpec) -> Result<(Plan, Owner), String> {
        let mut with_tools = l.clone();
        gsched_launch::add_cluster_tools(
            &mut with_tools.spec.env,
            self.settings.slurm_names.as_deref(),
            &self.settings.controllers,
        );
        let l = &with_tools;
        let spec = &l.spec;
        let root = identity::is_root();
        let owner = if root {
            identity::resolve(&spec.user, spec.uid).map_err(|e| e.to_string())?
        } else {
            identity::current()
        };
        if root && owner.uid < self.settings.min_uid {
            return Err(format!(
                "this node runs no job as {} (uid {}): its agent's --min-uid is {} (root and system users are refused whatever a controller asks; start gagentd with a lower --min-uid to allow it)",
                owner.user, owner.uid, self.settings.min_uid
            ));
        }
        let topo = self.settings.topology.read().clone();
        let scratch = self
            .settings
            .job_root
            .scratch(
                &self.settings.node,
                l.job.0,
                l.attempt,
                root.then_some((owner.uid, owner.gid)),
            )
            .map_err(|e| e.to_string())?;
        let script = run_plan::script(l);
        write_script(
            &scratch.script(),
            &script,
            root.then_some((owner.uid, owner.gid)),
        )
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&scratch.0);
            format!("cannot write the job script: {e}")
        })?;
        let mut notes = Vec::new();
        let devices = if self.settings.private_gpus && root {
            let paths = run_plan::gpu_devices(l, &topo);
            notes.extend(devices::claim(&paths, owner.uid, owner.gid));
            paths
        } else {
            Vec::new()
        };
        let mut devices_filtered = false;
        let cgroup_dir = self.settings.cgroups.as_ref().map(|cg| {
            let limits = run_plan::cgroup_limits(l, &topo);
            let (dir, missed) = cg.create(&limits);
            notes.extend(missed);
            if self.settings.device_filter {
                match devfilter::attach(&dir, &run_plan::gpu_devices(l, &topo)) {
                    Ok(attached) => devices_filtered = attached,
                    Err(e) => notes.push(e.to_string()),
                }
            }
            dir.to_string_lossy().into_owned()
        });
        if !notes.is_empty() {
            tracing::warn!(
                "job {}: isolation not fully applied: {}",
                l.job,
                notes.join("; ")
            );
        }
        let script_path = scratch.script().to_string_lossy().into_owned();
        let log_dir = scratch.logs().to_string_lossy().into_owned();
        let scratch_dir = scratch.0.to_string_lossy().into_owned();
        let show_home = root || owner.uid == nix::unistd::getuid().as_raw();
        let contact = crate::contact::file(&self.settings.state_dir)
            .to_string_lossy()
            .into_owned();
        let ctx = RunContext {
            node: &self.settings.node,
            topology: &topo,
            training_iface: self.settings.training_iface.as_deref(),
            agent_env: &self.settings.agent_env,
            gpu_map: &self.settings.gpu_map,
            script_path: &script_path,
            log_dir: &log_dir,
            owner: root.then_some(&owner),
            home: show_home.then_some(owner.home.as_str()),
            cgroup_dir,
            scratch: Some(&scratch_dir),
            devices,
            devices_filtered,
            contact_file: Some(&contact),
        };
        Ok((run_plan::plan(l, &script, &ctx), owner))
    }

    /// Starts this node's tasks of a `grun` step inside a job running here.
    pub fn run_step(&mut self, launch: &StepLaunch) {
        let job_plan = self
            .runs
            .get(&(launch.job, launch.attempt))
            .ok_or_else(|| format!("job {} is not running on this node", launch.job))
            .and_then(|s| {
                std::fs::read(s.files.plan())
                    .map_err(|e| format!("cannot read the job's plan: {e}"))
                    .and_then(|b| {
                        serde_json::from_slice::<Plan>(&b)
                            .map_err(|e| format!("cannot read the job's plan: {e}"))
                    })
            });
        match job_plan {
            Ok(plan) => {
                let root = self.settings.state_dir.join("tasks");
                let cpus = (!launch.binding.is_default())
                    .then(|| JobCpus::of(&plan, &self.settings.topology.read()))
                    .flatten();
                self.grun
                    .start(launch, &plan, &root, &self.settings.exe, cpus.as_ref());
            }
            Err(message) => {
                let node = self.settings.node.clone();
                self.grun.refuse(launch.job, launch.step, &node, message);
            }
        }
    }

    /// Input for task 0 of a `grun` step, if it runs here.
    pub fn step_input(&mut self, job: JobId, step: u32, input: gsched_types::steps::InputEvent) {
        self.grun.input(job, step, input);
    }

    /// Stops a `grun` step's tasks here.
    pub fn kill_step(&mut self, job: JobId, attempt: u32, step: u32) {
        self.grun.stop(job, attempt, Some(step));
    }

    /// `grun` output and exits to send now.
    pub fn take_task_io(&mut self, max: usize) -> Vec<TaskIo> {
        self.grun.take_io(max)
    }

    /// Appends `text` to a node run's output file, through `gagentd notice` (a
    /// process of its own takes the job user's file-system identity to open it).
    pub fn notice(&self, job: JobId, attempt: u32, text: &str) {
        if !self.runs.contains_key(&(job, attempt)) {
            tracing::warn!("a notice for job {job} attempt {attempt}, which is not running here");
            return;
        }
        let spawned = std::process::Command::new(&self.settings.exe)
            .arg("notice")
            .arg(self.dir(job, attempt))
            .arg(text)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn();
        match spawned {
            Ok(mut child) => {
                std::thread::spawn(move || {
                    // A writer that cannot finish (a full disk, a hung file system) is
                    // stopped rather than left behind.
                    let deadline = std::time::Instant::now() + NOTICE_LIMIT;
                    while matches!(child.try_wait(), Ok(None)) {
                        if std::time::Instant::now() > deadline {
                            let _ = child.kill();
                            tracing::warn!(
                                "job {job}: the notice was not written within {NOTICE_LIMIT:?}; stopped"
                            );
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    match child.wait_with_output() {
                        Ok(out) if !out.status.success() => tracing::warn!(
                            "job {job}: the notice was not written: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        ),
                        _ => {}
                    }
                });
            }
            Err(e) => tracing::warn!("job {job}: cannot start gagentd notice: {e}"),
        }
    }

    /// Sends `signal` to a node run (`gcancel --signal`): its process group, or the
    /// batch shell alone.
    pub fn signal(&mut self, job: JobId, attempt: u32, signal: i32, batch_only: bool) {
        let Some(run) = self.runs.get(&(job, attempt)) else {
            tracing::warn!(
                "signal {signal} for job {job} attempt {attempt}, which is not running here"
            );
            return;
        };
        let Ok(sig) = Signal::try_from(signal) else {
            tracing::warn!("job {job}: {signal} is not a signal");
            return;
        };
        let target = monitor::signal_target(run.launch.spec.launch, batch_only);
        tracing::info!("job {job}: {sig} to {target:?}");
        self.deliver(job, attempt, sig, target);
    }

    fn deliver(&mut self, job: JobId, attempt: u32, sig: Signal, target: monitor::SignalTarget) {
        let Some(run) = self.runs.get(&(job, attempt)) else {
            return;
        };
        match target {
            monitor::SignalTarget::BatchShell => send_signal(run.pgid, sig, true),
            monitor::SignalTarget::ProcessGroup => send_signal(run.pgid, sig, false),
            monitor::SignalTarget::Steps => {
                let n = self.grun.signal(job, attempt, sig);
                tracing::info!("job {job}: {sig} to {n} step task(s) here");
            }
        }
    }

    /// Stops a run of `runs`: SIGTERM now, SIGKILL after `grace`. Decided under the run
    /// manager's lock, which then goes before the signal and the files (reading the
    /// process group, reporting a run that never started), so that a slow disk does not
    /// hold up the session, the monitor or a launch.
    pub fn stop(
        runs: &parking_lot::Mutex<RunManager>,
        job: JobId,
        attempt: u32,
        cause: FailureKind,
        reason: &str,
        grace: Duration,
    ) {
        let stop = runs.lock().kill(job, attempt, cause, reason, grace);
        stop.carry_out();
    }

    /// Decides how to stop a run (SIGTERM now, SIGKILL after `grace`) without touching
    /// the disk or signalling: [`Stop::carry_out`] does that, after the lock is gone.
    pub fn kill(
        &mut self,
        job: JobId,
        attempt: u32,
        cause: FailureKind,
        reason: &str,
        grace: Duration,
    ) -> Stop {
        match self.runs.get_mut(&(job, attempt)) {
            // Over already: its end is reported once its GPUs are probed.
            Some(run) if run.held.is_some() => Stop(StopWork::Nothing),
            Some(run) => {
                match monitor::begin_stop(&mut run.watch, Instant::now(), grace, cause, reason) {
                    Some(action) => {
                        tracing::info!("stopping job {job} attempt {attempt}: {reason}");
                        Stop(StopWork::Signal {
                            action,
                            pgid: run.pgid,
                            files: RunFiles(run.files.0.clone()),
                            cgroup: run.cgroup.clone(),
                        })
                    }
                    None => Stop(StopWork::Nothing),
                }
            }
            // Never started here (or already gone): report it stopped so the job can end,
            // and make a late launch of the same attempt a no-op.
            None => Stop(StopWork::Unstarted {
                dir: self.dir(job, attempt),
                outbox: self.outbox.clone(),
                event: RunEvent::Exited {
                    job,
                    attempt,
                    code: None,
                    signal: None,
                    failure: Some(Failure {
                        kind: cause,
                        node: Some(self.settings.node.clone()),
                        evidence: format!("stopped before it started: {reason}"),
                        at_ms: now_ms(),
                    }),
                    usage: None,
                },
            }),
        }
    }

    /// Whether no run and no `grun` task goes on here: a monitoring round has nothing to
    /// do.
    pub fn is_idle(&self) -> bool {
        self.runs.is_empty() && self.grun.is_empty()
    }

    /// One monitoring round: observe each run, let `monitor::round` decide, carry it out.
    pub fn tick(&mut self) {
        self.grun.tick();
        let node = self.settings.node.clone();
        let keys: Vec<(JobId, u32)> = self.runs.keys().copied().collect();
        let mut warned = Vec::new();
        for key in keys {
            if self.runs.get(&key).is_some_and(|r| r.held.is_some()) {
                if self.advance_held(key) {
                    self.finish(key);
                }
                continue;
            }
            let run = self.runs.get_mut(&key).expect("present");
            let seen = observe(run, &node, &self.settings.topology, &self.settings.hang);
            let cx = monitor::Context {
                job: key.0,
                attempt: key.1,
                node: &node,
                limits: &run.limits,
                fatal_grace: self.settings.hang.after_fatal,
            };
            let actions = monitor::round(&mut run.watch, &cx, seen, Instant::now(), now_ms());
            let mut done = false;
            for action in &actions {
                match action {
                    Action::Report(event) => {
                        log_event(key.0, &node, event);
                        let mut event = event.clone();
                        if let RunEvent::Exited { usage, .. } = &mut event
                            && !run.usage.node.is_empty()
                        {
                            *usage = Some(Box::new(run.usage.clone()));
                        }
                        if let Some(held) =
                            hold_for_probe(self.settings.probe.as_deref(), run, &event)
                        {
                            tracing::info!(
                                "job {} attempt {}: ended with {}; GPUs {:?} are probed before they are given again",
                                key.0,
                                key.1,
                                held.cause.name(),
                                held.gpus
                            );
                            run.held = Some(held);
                            continue;
                        }
                        self.outbox.push(|seq| AgentToController::Run {
                            seq,
                            event: event.clone(),
                        });
                    }
                    Action::Finish => done = true,
                    Action::Warn { signal, batch_only } => {
                        if let Ok(sig) = Signal::try_from(*signal) {
                            tracing::info!("job {}: {sig} before its time limit (--signal)", key.0);
                            let target =
                                monitor::signal_target(run.launch.spec.launch, *batch_only);
                            warned.push((key, sig, target));
                        }
                    }
                    other => carry_out(run, other),
                }
            }
            if done && run.held.is_none() {
                self.finish(key);
            }
        }
        for ((job, attempt), sig, target) in warned {
            self.deliver(job, attempt, sig, target);
        }
    }

    /// Moves a run whose end waits for its probe along; true once its end is reported.
    fn advance_held(&mut self, key: (JobId, u32)) -> bool {
        let node = self.settings.node.clone();
        let Some(probe) = self.settings.probe.clone() else {
            return true;
        };
        let run = self.runs.get_mut(&key).expect("present");
        let held = run.held.as_mut().expect("held");
        let evidence = match &held.exited {
            RunEvent::Exited {
                failure: Some(f), ..
            } => format!(
                "job {} ended with {}: {}",
                key.0,
                held.cause.name(),
                f.evidence
            ),
            _ => format!("job {} ended", key.0),
        };
        let waited = held.since.elapsed();
        match held.phase {
            HeldPhase::Probing(ticket) => {
                let outcome = match ticket.and_then(|t| probe.take(t)) {
                    Some(outcome) => outcome,
                    None if waited < probe.settings.hold_limit() => {
                        if ticket.is_none() {
                            held.phase = HeldPhase::Probing(probe.request(Request {
                                gpus: Some(held.gpus.clone()),
                                trigger: Trigger::FailedRun,
                                evidence,
                            }));
                        }
                        return false;
                    }
                    None if ticket.is_none() => {
                        tracing::warn!(
                            "job {}: its GPUs were not probed (the probe queue stayed full); its end is reported as it is",
                            key.0
                        );
                        return self.release_held(key);
                    }
                    None => Outcome::hung(
                        &probe.registered(Some(&held.gpus)),
                        probe.settings.hold_limit(),
                        &evidence,
                    ),
                };
                if outcome.events.is_empty() {
                    return self.release_held(key);
                }
                for e in &outcome.events {
                    tracing::warn!("health: {:?} {}", e.severity, e.message);
                }
                if let Some((gpu, state)) = outcome.unusable.first() {
                    blame_gpu(&mut held.exited, *gpu, state, &node);
                }
                let events = outcome.events;
                let pushed = self
                    .outbox
                    .push(|seq| AgentToController::Health { seq, events });
                match (pushed, outcome.unusable.is_empty()) {
                    (AgentToController::Health { seq, .. }, false) => {
                        held.phase = HeldPhase::Draining(seq);
                        false
                    }
                    _ => self.release_held(key),
                }
            }
            HeldPhase::Draining(seq) => !self.outbox.is_pending(seq) && self.release_held(key),
        }
    }

    /// Reports a held run's end; true (it is over).
    fn release_held(&mut self, key: (JobId, u32)) -> bool {
        let node = self.settings.node.clone();
        let Some(held) = self.runs.get_mut(&key).and_then(|r| r.held.take()) else {
            return true;
        };
        tracing::info!(
            "job {} attempt {}: GPUs {:?} probed in {} ms after the run ended",
            key.0,
            key.1,
            held.gpus,
            held.since.elapsed().as_millis()
        );
        log_event(key.0, &node, &held.exited);
        let event = held.exited;
        self.outbox
            .push(|seq| AgentToController::Run { seq, event });
        true
    }

    /// Gives back what an ended run held: its `grun` tasks, GPU device nodes, cgroup and
    /// scratch directory, and marks it reported.
    fn finish(&mut self, key: (JobId, u32)) {
        // `grun` tasks do not outlive their job.
        self.grun.stop(key.0, key.1, None);
        let Some(mut run) = self.runs.remove(&key) else {
            return;
        };
        let _ = layout::write_private(&run.files.reported(), b"");
        for (pid, dev) in devices::release(&run.devices) {
            tracing::warn!(
                "job {}: killed process {pid}, which still held {dev} after the step ended",
                key.0
            );
        }
        // Nothing of a job outlives it: its cgroup, and what still carries its marker.
        let logs = run.scratch.as_ref().map(|s| s.logs());
        let left = crate::strays::end(run.cgroup.as_deref(), logs.as_deref());
        for (pid, comm) in left {
            tracing::warn!(
                "job {}: killed process {pid} ({comm}), left behind when the job's run ended",
                key.0
            );
        }
        if let Some(cg) = &run.cgroup {
            Cgroups::remove_when_empty(cg);
        }
        if let Some(s) = &run.scratch {
            let _ = std::fs::remove_dir_all(&s.0);
        }
        if let Some(c) = run.supervisor.as_mut() {
            let _ = c.wait();
        }
    }
}

/// The hold of a run whose `event` is its end with a failure its GPUs may explain, when
/// the node probes after failures: its probe is asked for now.
fn hold_for_probe(probe: Option<&ProbeService>, run: &Run, event: &RunEvent) -> Option<Held> {
    let probe = probe.filter(|p| p.settings.after_failure)?;
    let RunEvent::Exited {
        failure: Some(failure),
        ..
    } = event
    else {
        return None;
    };
    let cause = when::after_run(failure)?;
    let gpus = run.launch.node_alloc.gpus.clone();
    if gpus.is_empty() {
        return None;
    }
    let ticket = probe.request(Request {
        gpus: Some(gpus.clone()),
        trigger: Trigger::FailedRun,
        evidence: format!(
            "job {} ended with {}: {}",
            run.key.job,
            cause.name(),
            failure.evidence
        ),
    });
    Some(Held {
        exited: event.clone(),
        gpus,
        cause,
        since: Instant::now(),
        phase: HeldPhase::Probing(ticket),
    })
}

/// A run's end whose GPU the probe found unusable: the failure names the GPU and what
/// its state is, keeping the job's own error after it.
fn blame_gpu(exited: &mut RunEvent, gpu: u32, state: &str, node: &str) {
    if let RunEvent::Exited { failure, .. } = exited {
        let own = failure
            .as_ref()
            .map(|f| format!("; the job's own error: {}", f.evidence))
            .unwrap_or_default();
        *failure = Some(Failure {
            kind: FailureKind::GpuLost { gpu: Some(gpu) },
            node: Some(node.to_string()),
            evidence: format!("GPU {gpu} failed the health probe after the run: {state}{own}"),
            at_ms: now_ms(),
        });
    }
}

fn read_pgid(files: &RunFiles) -> Option<i32> {
    std::fs::read_to_string(files.pgid())
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// What a round sees of a run: its process group, new log lines, the network NCCL chose
/// (multi-node jobs), and whether and how it ended.
fn observe(
    run: &mut Run,
    node: &str,
    topology: &RwLock<Topology>,
    hang_settings: &HangSettings,
) -> monitor::Observed {
    if let Some(c) = run.supervisor.as_mut() {
        let _ = c.try_wait();
    }
    if run.pgid.is_none() {
        run.pgid = read_pgid(&run.files);
    }
    let findings = scan_logs(run);
    let hang = if hang_settings.enabled() && run.hang.world > 1 {
        read_task_exits(run);
        judge_hang(run, hang_settings)
    } else {
        None
    };
    // A one-node job's NCCL names a network too, but never sends over it.
    let transport = if run.launch.nodes.len() > 1 && run.transport.awaits_judgement() {
        let node_net = NodeNet::of(&topology.read());
        let mut found = run.transport.judge(Some(&node_net));
        for f in &mut found {
            f.node = Some(node.to_string());
        }
        found
    } else {
        Vec::new()
    };
    let exit = std::fs::read(run.files.exit())
        .ok()
        .and_then(|b| serde_json::from_slice::<ExitRecord>(&b).ok())
        .map(|record| monitor::Ended {
            record,
            error_file: torchrun_error_file(run),
            oom: run
                .cgroup
                .as_ref()
                .is_some_and(|c| Cgroups::oom_kills(c) > 0),
        });
    let supervisor_lost =
        exit.is_none() && run.supervisor.is_none() && run.supervisor_pid.is_some_and(|p| !alive(p));
    monitor::Observed {
        pgid: run.pgid,
        findings,
        transport,
        exit,
        supervisor_lost,
        hang,
    }
}

/// Takes in the tasks the supervisor saw end while others still ran.
fn read_task_exits(run: &mut Run) {
    if run.hang.ranks.len() < 2 {
        return;
    }
    let Ok(bytes) = std::fs::read(run.files.0.join(crate::supervise::TASK_EXITS)) else {
        return;
    };
    let Ok(exits) = serde_json::from_slice::<Vec<crate::supervise::TaskExit>>(&bytes) else {
        return;
    };
    let now = now_ms();
    for x in exits.iter().skip(run.hang.exits_read) {
        if let Some(r) = run.hang.ranks.get_mut(x.task) {
            r.exited = Some(hang::RankExit {
                at_ms: now,
                code: x.code,
                signal: x.signal,
            });
            tracing::info!(
                "job {} attempt {}: rank {} ended (code {:?}, signal {:?}) while the others run",
                run.key.job,
                run.key.attempt,
                r.rank,
                x.code,
                x.signal
            );
        }
    }
    run.hang.exits_read = run.hang.exits_read.max(exits.len());
}

/// The hang watch's verdict on a run going on: the evidence when it hangs.
fn judge_hang(run: &mut Run, settings: &HangSettings) -> Option<String> {
    if run.watch.stop.is_some() || !run.hang.armed(settings) {
        return None;
    }
    let samples: Vec<hang::Sample> = run.hang.samples.iter().copied().collect();
    let verdict = hang::decide(
        settings,
        &hang::Inputs {
            world: run.hang.world,
            ranks: &run.hang.ranks,
            last_output_ms: run.hang.last_output_ms,
            error: run.hang.error.as_ref(),
            gpus: run.launch.node_alloc.gpus.len(),
            samples: &samples,
            now_ms: now_ms(),
        },
    );
    match verdict {
        hang::Verdict::Stop(evidence) => Some(evidence),
        hang::Verdict::Keep(why) => {
            if run.hang.logged != Some(why) {
                tracing::debug!(
                    "job {} attempt {}: hang watch keeps it ({why:?})",
                    run.key.job,
                    run.key.attempt
                );
                run.hang.logged = Some(why);
            }
            None
        }
    }
}

/// torchrun's error file in the run's log directory, if it wrote one.
fn torchrun_error_file(run: &Run) -> Option<String> {
    let dir = std::fs::read_dir(run.logs()?).ok()?;
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("torchelastic-error"))
        })
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| parse_error_file(&t))
}

/// Signals what the monitor decided.
fn carry_out(run: &Run, action: &Action) {
    signal_run(run.pgid, run.cgroup.as_deref(), action);
}

/// Signals a run's process group (and, for a forced kill, its cgroup) as `action` says.
fn signal_run(pgid: Option<i32>, cgroup: Option<&Path>, action: &Action) {
    match action {
        Action::Terminate => signal_group(pgid, Signal::SIGTERM),
        Action::ForceKill => {
            signal_group(pgid, Signal::SIGKILL);
            if let Some(cg) = cgroup {
                Cgroups::kill(cg);
            }
        }
        Action::Warn { .. } | Action::Report(_) | Action::Finish => {}
    }
}

fn log_event(job: JobId, node: &str, event: &RunEvent) {
    match event {
        RunEvent::Failed { failure, .. } => tracing::warn!("job {job} on {node}: {failure}"),
        RunEvent::Warning { finding, .. } => {
            tracing::warn!("job {job} on {node}: {}: {}", finding.kind, finding.action)
        }
        RunEvent::Exited {
            attempt,
            code,
            signal,
            failure,
            ..
        } => tracing::info!(
            "job {job} attempt {attempt} on {node} ended: code {code:?} signal {signal:?}{}",
            failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        ),
        _ => {}
    }
}

/// Reads what the run's output and NCCL log files gained since the last round and
/// classifies complete lines.
fn scan_logs(run: &mut Run) -> Vec<LogFinding> {
    // This node's private copy of the run's output (see `supervise`), never the user's
    // file, which other nodes of the job append to as well.
    let mut files = vec![run.files.capture()];
    if let Some(Ok(d)) = run.logs().map(std::fs::read_dir) {
        files.extend(
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("log")),
        );
    }
    files.sort();
    files.dedup();
    let mut out = Vec::new();
    for f in files {
        let (offset, partial) = run.tails.entry(f.clone()).or_default();
        let Ok(mut file) = std::fs::File::open(&f) else {
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < *offset {
            *offset = 0;
        }
        if len == *offset || file.seek(SeekFrom::Start(*offset)).is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let n = file
            .by_ref()
            .take(1 << 20)
            .read_to_end(&mut buf)
            .unwrap_or(0);
        *offset += n as u64;
        if n > 0 {
            run.hang.last_output_ms = now_ms();
        }
        partial.push_str(&String::from_utf8_lossy(&buf));
        while let Some(pos) = partial.find('\n') {
            let line: String = partial.drain(..=pos).collect();
            run.transport.line(&line);
            let finding = run.lines.line(&line);
            run.hang
                .line(&line, finding.as_ref(), run.lines.in_traceback(), now_ms());
            if let Some(finding) = finding {
                out.push(finding);
            }
        }
        if partial.len() > 64 * 1024 {
            partial.clear();
        }
    }
    out
}

/// Writes the job's script, executable by its owner only.
fn write_script(path: &Path, text: &str, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    if let Some((uid, gid)) = owner {
        nix::unistd::chown(
            path,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    Ok(())
}

/// The job's CPUs on this node and where each sits (its NUMA node, its core), for
/// binding a step's tasks: from the job's plan (`GSCHED_CPUS`), the node's NUMA nodes and,
/// on a real node, sysfs' core ids (a fake node: one thread per core).
pub struct JobCpus {
    cpus: Vec<u32>,
    socket: std::collections::HashMap<u32, u32>,
    core: std::collections::HashMap<u32, u32>,
}

impl JobCpus {
    /// The job's CPUs from its plan, placed by `topo`; `None` where the plan names none.
    pub fn of(plan: &Plan, topo: &Topology) -> Option<JobCpus> {
        let list = plan
            .tasks
            .first()?
            .iter()
            .find(|(k, _)| k == "GSCHED_CPUS")
            .map(|(_, v)| v.clone())?;
        let cpus = gsched_types::cpulist::parse(&list).ok()?;
        let mut socket = std::collections::HashMap::new();
        for n in &topo.numa_nodes {
            for c in gsched_types::cpulist::parse(&n.cpus).unwrap_or_default() {
                socket.insert(c, n.id);
            }
        }
        let fake = topo.source.starts_with("fake");
        let core = cpus
            .iter()
            .map(|&c| {
                let read = |what: &str| {
                    std::fs::read_to_string(format!(
                        "/sys/devices/system/cpu/cpu{c}/topology/{what}"
                    ))
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                };
                let id = match (fake, read("physical_package_id"), read("core_id")) {
                    (false, Some(pkg), Some(core)) => (pkg << 16) | core,
                    _ => c,
                };
                (c, id)
            })
            .collect();
        Some(JobCpus { cpus, socket, core })
    }

    /// The view `gsched_launch::binding` takes.
    pub fn with<R>(&self, f: impl FnOnce(&gsched_launch::binding::NodeCpus<'_>) -> R) -> R {
        let socket_of = |c: u32| self.socket.get(&c).copied().unwrap_or(0);
        let core_of = |c: u32| self.core.get(&c).copied().unwrap_or(c);
        f(&gsched_launch::binding::NodeCpus {
            cpus: &self.cpus,
            socket_of: &socket_of,
            core_of: &core_of,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    fn settings(dir: &Path) -> Settings {
        Settings {
            node: "n1".into(),
            state_dir: dir.join("state"),
            topology: Arc::new(RwLock::new(Topology::empty("test"))),
            training_iface: None,
            agent_env: BTreeMap::new(),
            cgroups: None,
            private_gpus: false,
            device_filter: false,
            job_root: JobRoot(dir.join("jobs")),
            exe: PathBuf::from("/bin/false"),
            gpu_map: Vec::new(),
            slurm_names: None,
            controllers: String::new(),
            min_uid: 0,
            probe: None,
            hang: HangSettings::default(),
        }
    }

    #[test]
    fn a_stop_does_its_file_io_without_holding_the_run_managers_lock() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Arc::new(Outbox::open(dir.path().join("outbox")).unwrap());
        // The outbox's next event is written through a FIFO: the write blocks until a
        // reader comes, as a slow or stuck disk would.
        let fifo = dir.path().join("outbox").join(format!("{:012}.tmp", 1));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let runs = Arc::new(Mutex::new(RunManager::new(
            settings(dir.path()),
            outbox.clone(),
        )));
        // A run this node never started: its stop writes the report of its end.
        let stopper = {
            let runs = runs.clone();
            std::thread::spawn(move || {
                RunManager::stop(
                    &runs,
                    JobId(7),
                    0,
                    FailureKind::Cancelled,
                    "cancelled",
                    Duration::from_secs(1),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        // Heartbeats, launches and the monitor need the lock meanwhile.
        let free = runs.try_lock_for(Duration::from_secs(2)).is_some();
        let mut written = Vec::new();
        std::fs::File::open(&fifo)
            .unwrap()
            .read_to_end(&mut written)
            .unwrap();
        stopper.join().unwrap();
        assert!(
            free,
            "the run manager's lock was held while the stop wrote to the disk"
        );
        assert!(String::from_utf8_lossy(&written).contains("stopped before it started"));
        assert_eq!(outbox.pending().len(), 1);
    }
}
