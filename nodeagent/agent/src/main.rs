//! `gagentd`: the gsched node agent.

use clap::{Parser, Subcommand};
use gsched_agent::devices::GpuDevices;
use gsched_agent::discover::{self, Source};
use gsched_agent::runs::{RunManager, Settings};
use gsched_agent::session::{Agent, Registration};
use gsched_agent::{devfilter, devices, health, isolation, layout, outbox};
use gsched_proto::tls::{CertDir, Dialer, PeerIdentity, is_loopback};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// gsched node agent: registers this node's GPUs and runs job steps.
#[derive(Parser, Debug)]
#[command(
    name = "gagentd",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Controllers to dial (HOST:PORT,...); the agent follows leader redirects.
    #[arg(long, env = "GSCHED_CONTROLLERS", value_delimiter = ',')]
    controllers: Vec<String>,
    /// This node's name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Where steps, the event outbox and logs are kept.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    source: SourceArgs,
    /// This node's address on the training network (MASTER_ADDR when it is rank 0).
    #[arg(long)]
    training_addr: Option<String>,
    /// Interface for NCCL sockets (default: the one holding --training-addr).
    #[arg(long)]
    training_iface: Option<String>,
    /// The training network's MTU: the health monitor warns when the training interface
    /// differs (e.g. 9000 on a jumbo-frame RoCE fabric).
    #[arg(long)]
    training_mtu: Option<u32>,
    /// Manage only these GPUs of the machine (device indices, comma separated), e.g. to
    /// split one machine between two agents or keep a GPU out of gsched.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<u32>,
    /// Node features for --constraint (comma separated).
    #[arg(long, value_delimiter = ',')]
    features: Vec<String>,
    /// Kernel log to watch for Xid lines.
    #[arg(long, default_value = "/dev/kmsg")]
    kmsg: PathBuf,
    /// The NVIDIA driver's parameters (`NVreg_ModifyDeviceFiles` is read from it).
    #[arg(long, default_value = "/proc/driver/nvidia/params", hide = true)]
    nvidia_params: PathBuf,
    /// cgroup v2 root for per-step cgroups ("off" to disable).
    #[arg(long)]
    cgroup_root: Option<String>,
    /// Leave GPU device nodes as they are. By default a root agent keeps every managed
    /// GPU's device node root's (0600) while idle and its job owner's while allocated, and
    /// kills what still holds one open when the step ends.
    #[arg(long)]
    share_gpu_devices: bool,
    /// Where steps' private directories (script, NCCL logs) are made
    /// (default /tmp/gsched-jobs, or /tmp/gsched-jobs-UID for a non-root agent).
    #[arg(long)]
    job_root: Option<PathBuf>,
    /// Serve this node's Prometheus metrics (steps, per-GPU figures from NVML) at
    /// http://ADDR/metrics.
    #[arg(long)]
    metrics: Option<String>,
    /// Extra environment for every job: NAME=VALUE (repeatable).
    #[arg(long = "job-env")]
    job_env: Vec<String>,
    /// A directory of Slurm-named links (`gctl slurm-names DIR`) to put first on every
    /// job's PATH, so unmodified scripts find `scontrol`, `sbatch`, `squeue`...
    #[arg(long)]
    slurm_names: Option<String>,
    /// Where login shells read profile snippets: with --slurm-names, the agent (as
    /// root) installs one there that puts the links first inside jobs again.
    #[arg(long, default_value = "/etc/profile.d")]
    profile_d: PathBuf,
    /// A single-host development cluster: the controllers are on loopback, reached in
    /// plaintext, and know this agent by its uid (it must run as the controllers' user).
    #[arg(long, conflicts_with = "tls_dir")]
    dev_local: bool,
    /// The cluster's certificates: ca.pem and this node's node-NAME.pem/node-NAME.key
    /// (`gctl certs issue --node NAME`). Required unless --dev-local.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// The lowest uid a job may run as on this node (a root agent refuses launches for
    /// root and system users below it, whatever a controller sends); 0 allows every user.
    #[arg(long, default_value_t = 1000)]
    min_uid: u32,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 1.0)]
    heartbeat: f64,
    /// Seconds between samples of each running job's GPUs (NVML), CPU time and memory
    /// (its cgroup), summarised per job for `gacct --eff` and the idle-GPU policy.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
    gpu_sample_interval: u32,
    /// Scripted GPU utilisation for fake nodes: a JSON file `{"0": 95, "1": 0}` (GPU
    /// index to percent, or `{"util": 95, "mem_mib": 2048}`), re-read at every sample.
    #[arg(long)]
    fake_gpu_util: Option<PathBuf>,
    #[command(flatten)]
    probe: ProbeArgs,
    #[command(flatten)]
    hang: HangArgs,
    #[arg(
        long,
        env = "GSCHED_LOG",
        default_value = "info,h2=warn,tower=warn,hyper=warn"
    )]
    log: String,
    /// Log lines as text, or as JSON objects (one per line) for a log shipper.
    #[arg(long, value_enum, default_value = "text")]
    log_format: gsched_proto::logs::LogFormat,
}

/// The GPU health probe's settings (the agent's `[health]` section, as flags).
#[derive(clap::Args, Debug, Clone)]
struct ProbeArgs {
    /// Probe a GPU whose job failed (cause unknown, CUDA error, signal, words about the
    /// GPU or ECC) before it is given to another job: the run's end is reported after
    /// the verdict, and an unusable GPU is drained.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    probe_after_failure: bool,
    /// Include the active check in every probe: a CUDA context, allocation, memset, copy
    /// and kernel on each idle GPU, in a child process with a time limit.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    active_check: bool,
    /// Seconds the active check may take before it counts as hung.
    #[arg(long, default_value_t = 10.0)]
    active_check_timeout: f64,
    /// Scripted device state for fake nodes: a JSON file of GPU index to what is wrong
    /// (`{"1": {"reset_required": true}, "2": {"active": "hang"}}`; see
    /// nodeagent/agent/src/probe/fake_state.rs), re-read at every probe.
    #[arg(long)]
    fake_gpu_state: Option<PathBuf>,
}

impl ProbeArgs {
    fn settings(&self) -> gsched_agent::probe::ProbeSettings {
        gsched_agent::probe::ProbeSettings {
            after_failure: self.probe_after_failure,
            active_check: self.active_check,
            active_limit: Duration::from_secs_f64(self.active_check_timeout.clamp(0.1, 600.0)),
        }
    }

    /// The probe for this node: NVML on a real node, the fake state file on a fake one
    /// (a fake node without one has nothing wrong); `None` when neither can be read.
    fn prober(
        &self,
        source: &Source,
        gpu_map: &[u32],
    ) -> anyhow::Result<gsched_agent::probe::Prober> {
        use gsched_agent::probe::{DeviceStateReader, Prober, active::ActiveRunner};
        let fake = match (source, &self.fake_gpu_state) {
            (_, Some(f)) => Some(f.clone()),
            (Source::Fake(_), None) => Some(PathBuf::new()),
            _ => None,
        };
        let reader: Box<dyn DeviceStateReader> = match &fake {
            Some(path) => {
                Box::new(gsched_agent::probe::fake_state::FakeStateReader { path: path.clone() })
            }
            None => Box::new(gsched_agent::probe::nvml_state::NvmlStateReader::open(
                gpu_map.to_vec(),
            )?),
        };
        let settings = self.settings();
        let active = settings.active_check.then(|| ActiveRunner {
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gagentd")),
            limit: settings.active_limit,
            fake_state: fake,
        });
        Ok(Prober::new(reader, active, gpu_map.to_vec()))
    }
}

/// When a multi-rank job is taken to hang (`gsched_agent::hang`).
#[derive(clap::Args, Debug, Clone)]
struct HangArgs {
    /// Seconds a multi-rank job may stay silent, its GPUs under 5% and its CPUs idle,
    /// after one of its ranks printed a traceback or an error line, before it is stopped
    /// with reason Hang; 0 turns the hang watch off.
    #[arg(long, default_value_t = 60.0)]
    hang_after: f64,
    /// The same once one of its ranks has exited with a failure (that rank will never
    /// answer its peers).
    #[arg(long, default_value_t = 15.0)]
    hang_after_exit: f64,
    /// Seconds a job may go on after printing a fatal error (NCCL, CUDA, a failed
    /// rendezvous) before it is stopped for it; one that ends by itself meanwhile keeps
    /// its own exit status.
    #[arg(long, default_value_t = 10.0)]
    fatal_grace: f64,
}

impl HangArgs {
    fn settings(&self) -> gsched_agent::hang::HangSettings {
        let secs = |s: f64| Duration::from_secs_f64(s.clamp(0.0, 86_400.0));
        let after = secs(self.hang_after);
        gsched_agent::hang::HangSettings {
            after,
            after_exit: secs(self.hang_after_exit).min(after),
            after_fatal: secs(self.fatal_grace),
            ..Default::default()
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
struct SourceArgs {
    /// Pretend to have the hardware described in FILE (discovery JSON, TOML or topo -m text).
    #[arg(long)]
    fake_topology: Option<PathBuf>,
    /// Read GPU wiring from a saved `nvidia-smi topo -m` output.
    #[arg(long)]
    nvidia_smi_topo: Option<PathBuf>,
    /// Root of the sysfs/procfs tree to read (testing).
    #[arg(long, default_value = "/", hide = true)]
    sysfs_root: PathBuf,
}

impl SourceArgs {
    fn source(&self) -> Source {
        match (&self.fake_topology, &self.nvidia_smi_topo) {
            (Some(f), _) => Source::Fake(f.clone()),
            (None, Some(t)) => Source::SmiTopo(t.clone()),
            _ => Source::Local {
                sysfs_root: self.sysfs_root.clone(),
            },
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print what this agent would register (like `slurmd -C`).
    Discover {
        #[command(flatten)]
        source: SourceArgs,
        /// Print the discovery JSON (the schema --fake-topology accepts).
        #[arg(long)]
        json: bool,
    },
    /// Findings from saved outputs of a node (nvidia-smi, -q, topo -m, dmesg, ibstat,
    /// ibstatus, ibv_devinfo, NCCL/PyTorch logs): each file's kind is told from its text.
    Diagnose {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print {"findings":[...]}.
        #[arg(long)]
        json: bool,
    },
    /// Probe this node's GPUs once (state through NVML, the active check, the verdict)
    /// and print the result; exits 1 when a GPU is degraded or unusable.
    Probe {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        probe: ProbeArgs,
        /// Only these GPUs (device indices, comma separated).
        #[arg(long, value_delimiter = ',')]
        gpus: Vec<u32>,
        /// Print the report as JSON (states, active checks, findings, time taken).
        #[arg(long)]
        json: bool,
    },
    /// Internal: the active check on one GPU, as JSON (started by the probe).
    #[command(hide = true)]
    ActiveCheck {
        /// The agent's index of the GPU (what a fake state file names).
        #[arg(long)]
        gpu: u32,
        /// CUDA's ordinal of the GPU, when its PCI address is not given.
        #[arg(long, default_value_t = 0)]
        ordinal: u32,
        #[arg(long)]
        pci: Option<String>,
        /// Take the outcome from a fake state file instead of CUDA.
        #[arg(long)]
        fake_state: Option<PathBuf>,
    },
    /// Internal: supervise one step (started by the agent).
    #[command(hide = true)]
    Supervise { dir: PathBuf },
    /// Internal: append a line to a step's output file (started by the agent).
    #[command(hide = true)]
    Notice { dir: PathBuf, text: String },
}

/// `gagentd diagnose`: every file's findings, as a table or `{"findings":[...]}`.
fn diagnose(files: &[PathBuf], json: bool) {
    use gsched_types::findings::{Component, FileRead, Finding, Findings, Severity};
    let mut all = Findings::default();
    let mut per_file: Vec<(FileRead, String, Vec<Finding>)> = Vec::new();
    for path in files {
        let name = path.display().to_string();
        let (read, describe, found) = match std::fs::read(path) {
            Ok(bytes) => {
                let r = gsched_agent::diagnose::report(&name, &String::from_utf8_lossy(&bytes));
                let read = FileRead {
                    file: name.clone(),
                    family: r.family.family().to_string(),
                    findings: r.findings.len(),
                    unread_lines: r.unread,
                };
                (read, r.family.describe().to_string(), r.findings)
            }
            Err(e) => {
                let f = Finding {
                    node: None,
                    severity: Severity::Info,
                    component: Component::Input,
                    gpu: None,
                    pci_bus_id: None,
                    kind: "unreadable-file".into(),
                    evidence: format!("{name}: {e}"),
                    action: "give a file this user can read".into(),
                };
                let read = FileRead {
                    file: name.clone(),
                    family: "unreadable".into(),
                    findings: 1,
                    unread_lines: 0,
                };
                (read, "not readable".to_string(), vec![f])
            }
        };
        all.findings.extend(found.iter().cloned());
        all.files.push(read.clone());
        per_file.push((read, describe, found));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&all).expect("findings serialise")
        );
        return;
    }
    for (k, (read, describe, found)) in per_file.iter().enumerate() {
        if k > 0 {
            println!();
        }
        println!("{}: {describe}", read.file);
        if found.is_empty() {
            println!("  no findings: every line that reads like an error was read by a rule");
        }
        for f in found {
            let at = match (f.gpu, &f.pci_bus_id) {
                (Some(g), Some(p)) => format!(" GPU {g} ({p})"),
                (Some(g), None) => format!(" GPU {g}"),
                (None, Some(p)) => format!(" {p}"),
                (None, None) => String::new(),
            };
            println!(
                "  {:<8} {:?}{at} {}: {}\n           action: {}",
                format!("{:?}", f.severity).to_uppercase(),
                f.component,
                f.kind,
                f.evidence,
                f.action
            );
        }
    }
}

fn main() {
    let args = Args::parse();
    match args.command {
        Some(Cmd::Supervise { dir }) => {
            std::process::exit(gsched_agent::supervise::supervise(&dir))
        }
        Some(Cmd::Notice { dir, text }) => {
            if let Err(e) = gsched_agent::supervise::append_notice(&dir, &text) {
                eprintln!("gagentd notice: {e}");
                std::process::exit(1);
            }
        }
        Some(Cmd::Diagnose { files, json }) => diagnose(&files, json),
        Some(Cmd::ActiveCheck {
            gpu,
            ordinal,
            pci,
            fake_state,
        }) => {
            let result = gsched_agent::probe::active::run_here(
                pci.as_deref(),
                ordinal,
                gpu,
                fake_state.as_deref(),
            );
            println!(
                "{}",
                serde_json::to_string(&result).expect("a result serialises")
            );
        }
        Some(Cmd::Probe {
            source,
            probe,
            gpus,
            json,
        }) => {
            tracing_subscriber::fmt()
                .with_env_filter("warn")
                .with_writer(std::io::stderr)
                .init();
            match probe_once(&source, &probe, &gpus) {
                Ok(report) => {
                    print_probe(&report, json);
                    let healthy = report.gpus.iter().all(|g| g.verdict == "healthy");
                    std::process::exit(if healthy { 0 } else { 1 });
                }
                Err(e) => {
                    eprintln!("gagentd probe: {e}");
                    std::process::exit(2);
                }
            }
        }
        Some(Cmd::Discover { source, json }) => {
            tracing_subscriber::fmt()
                .with_env_filter("warn")
                .with_writer(std::io::stderr)
                .init();
            match discover::discover(&source.source()) {
                Ok(t) if json => println!(
                    "{}",
                    serde_json::to_string_pretty(&t).expect("topology serialises")
                ),
                Ok(t) => print!("{}", gsched_agent_render(&t)),
                Err(e) => {
                    eprintln!("gagentd discover: {e}");
                    std::process::exit(1);
                }
            }
        }
        None => {
            let run = args.run;
            gsched_proto::logs::init(&run.log, run.log_format);
            if let Err(e) = run_agent(run) {
                eprintln!("gagentd: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// `gagentd probe`: one probe of this node's GPUs, none of them busy.
fn probe_once(
    source: &SourceArgs,
    probe: &ProbeArgs,
    gpus: &[u32],
) -> anyhow::Result<gsched_agent::probe::Report> {
    let source = source.source();
    let topo = discover::discover(&source)?;
    if let Some(g) = gpus
        .iter()
        .find(|g| !topo.gpus.iter().any(|t| t.index == **g))
    {
        anyhow::bail!(
            "--gpus: this node has no GPU {g} ({} found)",
            topo.gpus.len()
        );
    }
    let mut prober = probe.prober(&source, &[])?;
    let registered: Vec<_> = topo
        .gpus
        .iter()
        .filter(|g| gpus.is_empty() || gpus.contains(&g.index))
        .map(gsched_agent::probe::state::RegisteredGpu::of)
        .collect();
    Ok(prober.probe(&registered, &Default::default()))
}

fn print_probe(report: &gsched_agent::probe::Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).expect("a report serialises")
        );
        return;
    }
    for g in &report.gpus {
        let active = match &g.active {
            Some(gsched_agent::probe::state::ActiveResult::Passed { ms, .. }) => {
                format!("active check passed in {ms} ms")
            }
            Some(other) => format!("active check: {other:?}"),
            None => "no active check".into(),
        };
        println!("GPU {:<3} {:<9} {active}", g.gpu, g.verdict);
        for f in &g.findings {
            println!(
                "         {:<5} {}: {}\n               action: {}",
                format!("{:?}", f.severity).to_uppercase(),
                f.kind,
                f.evidence,
                f.action
            );
        }
    }
    println!(
        "probed {} GPUs in {} ms",
        report.gpus.len(),
        report.elapsed_ms
    );
}

fn gsched_agent_render(t: &gsched_types::Topology) -> String {
    gsched_topology::render::render(t, "this node")
}

fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    if args.controllers.is_empty() {
        anyhow::bail!(
            "no controllers given: use --controllers HOST:PORT,... or GSCHED_CONTROLLERS"
        );
    }
    let name = node_name(&args);
    let dialer = dialer(&args, &name)?;
    let (state_dir, job_root) = prepare_dirs(&args)?;
    let source = args.source.source();
    let (topo, gpu_map) = discover_node(&args, &source)?;
    let training_addr = args
        .training_addr
        .clone()
        .or_else(|| discover::local_addr_towards(&args.controllers[0]))
        .unwrap_or_else(|| "127.0.0.1".into());
    let training_iface = args
        .training_iface
        .clone()
        .or_else(|| discover::interface_of(&training_addr));
    let isolation = Isolation::set_up(&args, &name);
    let gpu_devices = GpuDevices::from_topology(&topo);
    if isolation.private_gpus && gpu_devices.paths.is_empty() && !topo.gpus.is_empty() {
        tracing::warn!(
            "the GPUs' device nodes are unknown (no NVML, or a fake topology without device_path): jobs are kept apart by CUDA_VISIBLE_DEVICES only"
        );
    }
    let topology = Arc::new(RwLock::new(topo));
    let outbox = Arc::new(outbox::Outbox::open(state_dir.join("outbox"))?);
    // A fake node probes only when its tests script a state.
    let fake_without_state =
        matches!(source, Source::Fake(_)) && args.probe.fake_gpu_state.is_none();
    let probe = match args.probe.prober(&source, &gpu_map) {
        _ if fake_without_state => None,
        Ok(prober) => Some(gsched_agent::probe::ProbeService::start(
            prober,
            topology.clone(),
            outbox.clone(),
            args.probe.settings(),
        )),
        Err(e) => {
            tracing::warn!("no GPU health probe: {e}");
            None
        }
    };
    let settings = Settings {
        node: name.clone(),
        state_dir: state_dir.clone(),
        topology: topology.clone(),
        training_iface: training_iface.clone(),
        agent_env: job_env(&args)?,
        cgroups: isolation.cgroups,
        private_gpus: isolation.private_gpus,
        device_filter: isolation.device_filter,
        job_root,
        exe: std::env::current_exe()?,
        gpu_map: gpu_map.clone(),
        slurm_names: args.slurm_names.clone(),
        controllers: args.controllers.join(","),
        min_uid: args.min_uid,
        probe: probe.clone(),
        hang: args.hang.settings(),
    };
    let runs = RunManager::new(settings, outbox.clone());
    if let Some(p) = &probe {
        tracing::info!(
            "GPU health probe: after failures {}, active check {} (limit {:?})",
            if p.settings.after_failure {
                "on"
            } else {
                "off"
            },
            if p.settings.active_check { "on" } else { "off" },
            p.settings.active_limit
        );
    }
    if isolation.private_gpus {
        // Every GPU no re-adopted run holds is root's while idle.
        for note in gpu_devices.lock_idle(&runs.devices_in_use()) {
            tracing::warn!("cannot make a GPU device node private: {note}");
        }
    }
    let runs = Arc::new(Mutex::new(runs));
    if let Some(p) = &probe {
        let runs = runs.clone();
        p.set_busy(Box::new(move || runs.lock().gpus_running_jobs()));
    }
    let metrics = args.metrics.clone().map(|addr| {
        let sources = Arc::new(gsched_agent::metrics::Sources {
            runs: runs.clone(),
            topology: topology.clone(),
            gpu_map: gpu_map.clone(),
            probe: probe.clone(),
            nvml: match source {
                Source::Local { .. } => gsched_agent::nvml::NvmlProbe::init()
                    .ok()
                    .map(parking_lot::Mutex::new),
                _ => None,
            },
        });
        (addr, sources)
    });
    let agent = Arc::new(Agent {
        registration: Registration {
            name,
            address: String::new(),
            training_addr,
            features: args.features.clone(),
        },
        controllers: args.controllers.clone(),
        dialer,
        topology: topology.clone(),
        runs,
        outbox: outbox.clone(),
        flush: Arc::new(tokio::sync::Notify::new()),
        launched: Arc::new(tokio::sync::Notify::new()),
        contact: Arc::new(gsched_agent::contact::Contact::open(&state_dir)),
        heartbeat: Duration::from_secs_f64(args.heartbeat.max(0.1)),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        if let Some((addr, sources)) = metrics {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
            tracing::info!("metrics on http://{addr}/metrics");
            tokio::spawn(gsched_agent::metrics::serve(sources, listener));
        }
        health::watch_kernel_log(
            args.kmsg.clone(),
            topology.clone(),
            outbox.clone(),
            probe.clone(),
        );
        let hang = args.hang.settings();
        if hang.enabled() {
            tracing::info!(
                "hang watch: a multi-rank job whose rank failed is stopped after {:?} of silence with idle GPUs and CPUs ({:?} once a rank has exited)",
                hang.after,
                hang.after_exit
            );
        }
        tokio::spawn(sample_usage(
            agent.runs.clone(),
            usage_source(&args, &source),
            args.gpu_sample_interval,
            hang.enabled().then(|| hang.sample_every()),
        ));
        let nic_policy = health::NicPolicy {
            training_iface,
            expected_mtu: args.training_mtu,
        };
        check_slurm_names(&args, &outbox);
        check_device_files(&args, &outbox);
        check_memlock(&topology.read(), &outbox);
        spawn_health_watches(&args, &source, topology, nic_policy, gpu_map, outbox);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = gsched_agent::session::run(agent) => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("agent stopping; running steps keep running and will be re-adopted");
        anyhow::Ok(())
    })
}

fn node_name(args: &RunArgs) -> String {
    args.name.clone().unwrap_or_else(|| {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "node".into())
    })
}

/// How the agent reaches its controllers: TLS with this node's certificate, or
/// plaintext to loopback controllers only (`--dev-local`).
fn dialer(args: &RunArgs, name: &str) -> anyhow::Result<Dialer> {
    match (&args.tls_dir, args.dev_local) {
        (Some(dir), _) => Ok(Dialer {
            tls: Some(CertDir(dir.clone()).client(&PeerIdentity::Node(name.to_string()))?),
        }),
        (None, true) => {
            if let Some(c) = args.controllers.iter().find(|c| !is_loopback(c)) {
                anyhow::bail!(
                    "--dev-local reaches loopback controllers only, but {c} is not one; a cluster on several hosts needs certificates (--tls-dir, see `gctl certs`)"
                );
            }
            Ok(Dialer::default())
        }
        (None, false) => anyhow::bail!(
            "no security settings: give --tls-dir with this node's certificate (`gctl certs issue --node {name}`), or --dev-local for a single-host development cluster"
        ),
    }
}

/// The agent's private state directory and the job root, made or checked.
fn prepare_dirs(args: &RunArgs) -> anyhow::Result<(PathBuf, layout::JobRoot)> {
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/gsched/agent"));
    layout::private_dir(&state_dir)
        .and_then(|_| layout::private_dir(&state_dir.join("steps")))
        .map_err(|e| {
            anyhow::anyhow!("cannot create state directory {}: {e}", state_dir.display())
        })?;
    let job_root = layout::JobRoot::prepare(
        args.job_root
            .clone()
            .unwrap_or_else(layout::JobRoot::default_path),
    )?;
    Ok((state_dir, job_root))
}

/// This node's topology, restricted to `--gpus` when given (with each kept GPU's device
/// index).
fn discover_node(
    args: &RunArgs,
    source: &Source,
) -> anyhow::Result<(gsched_types::Topology, Vec<u32>)> {
    let mut topo = discover::discover(source)?;
    let gpu_map = if args.gpus.is_empty() {
        Vec::new()
    } else {
        discover::keep_gpus(&mut topo, &args.gpus).map_err(|e| anyhow::anyhow!("--gpus: {e}"))?
    };
    tracing::info!(
        "{} GPUs, {} NICs, {} NUMA nodes ({})",
        topo.gpus.len(),
        topo.nics.len(),
        topo.numa_nodes.len(),
        topo.source
    );
    Ok((topo, gpu_map))
}

/// How node runs are kept apart on this node: cgroups, private GPU device nodes, the BPF
/// device filter; each missing piece is logged with what it costs.
struct Isolation {
    cgroups: Option<isolation::Cgroups>,
    private_gpus: bool,
    device_filter: bool,
}

impl Isolation {
    fn set_up(args: &RunArgs, name: &str) -> Isolation {
        let private_gpus = gsched_agent::identity::is_root() && !args.share_gpu_devices;
        let cgroups = match args.cgroup_root.as_deref() {
            Some("off") => None,
            root => match isolation::Cgroups::detect(root.map(std::path::Path::new), name) {
                Ok(c) => {
                    tracing::info!("per-step cgroups under {}", c.base.display());
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!("per-step cgroups disabled: {e}");
                    None
                }
            },
        };
        let device_filter = match (&cgroups, private_gpus) {
            (Some(_), true) => match devfilter::probe() {
                Ok(()) => {
                    tracing::info!(
                        "GPU device filter: on (a BPF device program on every step's cgroup)"
                    );
                    true
                }
                Err(e) => {
                    tracing::warn!(
                        "GPU device filter unavailable ({e}); GPU privacy rests on device-node ownership alone"
                    );
                    false
                }
            },
            (None, true) => {
                tracing::warn!(
                    "GPU device filter off: no usable cgroup v2 hierarchy; GPU privacy rests on device-node ownership alone"
                );
                false
            }
            (_, false) => false,
        };
        let params = std::fs::read_to_string(&args.nvidia_params).unwrap_or_default();
        if private_gpus && devices::driver_resets_device_modes(&params) == Some(true) {
            tracing::warn!(
                "the NVIDIA driver re-creates /dev/nvidia* with its own mode whenever CUDA starts (NVreg_ModifyDeviceFiles=1), undoing device-node ownership; {} set `options nvidia NVreg_ModifyDeviceFiles=0` in /etc/modprobe.d to make ownership hold",
                if device_filter {
                    "the BPF device filter still keeps jobs to their GPUs;"
                } else {
                    "with no BPF device filter either, jobs are kept apart by CUDA_VISIBLE_DEVICES only:"
                }
            );
        }
        Isolation {
            cgroups,
            private_gpus,
            device_filter,
        }
    }
}

/// `--job-env NAME=VALUE`: variables every job on this node gets.
fn job_env(args: &RunArgs) -> anyhow::Result<BTreeMap<String, String>> {
    args.job_env
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow::anyhow!("--job-env {kv}: use NAME=VALUE"))
        })
        .collect()
}

/// Where job GPU usage is read: NVML on a real node, a file with `--fake-gpu-util`.
fn usage_source(args: &RunArgs, source: &Source) -> gsched_agent::usage::Source {
    match (&args.fake_gpu_util, source) {
        (Some(f), _) => {
            gsched_agent::usage::Source::Fake(gsched_agent::usage::FakeReader::new(f.clone()))
        }
        (None, Source::Local { .. }) => match gsched_agent::nvml::NvmlProbe::init() {
            Ok(p) => {
                gsched_agent::usage::Source::Nvml(Box::new(gsched_agent::usage::NvmlReader(p)))
            }
            Err(e) => {
                tracing::warn!("job GPU usage is not sampled: {e}");
                gsched_agent::usage::Source::None
            }
        },
        _ => gsched_agent::usage::Source::None,
    }
}

/// The node's health watches: a fake topology file is re-read (tests and `gsim` change
/// it); a real node watches its NICs and NVML.
fn spawn_health_watches(
    args: &RunArgs,
    source: &Source,
    topology: Arc<RwLock<gsched_types::Topology>>,
    nic_policy: health::NicPolicy,
    gpu_map: Vec<u32>,
    outbox: Arc<outbox::Outbox>,
) {
    match source {
        Source::Fake(path) => {
            let (src, keep) = (source.clone(), args.gpus.clone());
            let (path, seen) = (path.clone(), Mutex::new(None));
            let reload: Arc<health::Reload> = Arc::new(move || {
                // Parsed again only when the file changed since the last read.
                let stamp = health::FileStamp::of(&path);
                if stamp.is_some() && *seen.lock() == stamp {
                    return Ok(None);
                }
                let mut t = discover::discover(&src)?;
                if !keep.is_empty() {
                    discover::keep_gpus(&mut t, &keep)?;
                }
                *seen.lock() = stamp;
                Ok(Some(t))
            });
            tokio::spawn(health::watch_topology(
                reload,
                topology,
                nic_policy,
                outbox,
                Duration::from_millis(500),
            ));
        }
        Source::Local { .. } => {
            tokio::spawn(health::watch_nics(
                topology.clone(),
                nic_policy,
                outbox.clone(),
                Duration::from_secs(5),
            ));
            tokio::spawn(health::watch_nvml(
                topology,
                gpu_map,
                outbox,
                Duration::from_secs(5),
            ));
        }
        Source::SmiTopo(_) => {}
    }
}

/// Samples every node run's usage each `interval_s` (on a blocking thread: NVML and
/// cgroup reads are system calls), and, every `suspects` between those, the runs the
/// hang watch suspects.
async fn sample_usage(
    runs: Arc<Mutex<RunManager>>,
    source: gsched_agent::usage::Source,
    interval_s: u32,
    suspects: Option<Duration>,
) {
    let source = Arc::new(Mutex::new(source));
    let full = Duration::from_secs(u64::from(interval_s));
    let period = suspects.map_or(full, |s| s.min(full));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut last_full = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let due = last_full.elapsed() + period / 2 >= full;
        if due {
            last_full = tokio::time::Instant::now();
        }
        let (runs, source) = (runs.clone(), source.clone());
        let _ = tokio::task::spawn_blocking(move || {
            if due {
                let look = {
                    let mut runs = runs.lock();
                    let mut source = source.lock();
                    runs.sample_usage(&mut source, interval_s);
                    runs.outside_look(&mut source)
                };
                // /proc is read without holding the runs.
                if let Some(look) = look {
                    let verdict = look.take(std::process::id(), gsched_proto::clock::now_ms());
                    runs.lock().outside_seen(verdict);
                }
            } else {
                runs.lock().sample_suspects(&mut source.lock())
            }
        })
        .await;
    }
}

/// Reports (for `gctl doctor`) a driver that re-creates `/dev/nvidia*` with its own mode
/// whenever CUDA starts (`NVreg_ModifyDeviceFiles=1`, the default): device-node ownership
/// cannot keep users off GPUs outside their jobs then.
fn check_device_files(args: &RunArgs, outbox: &Arc<outbox::Outbox>) {
    let params = std::fs::read_to_string(&args.nvidia_params).unwrap_or_default();
    if gsched_agent::devices::driver_resets_device_modes(&params) != Some(true) {
        return;
    }
    let event = gsched_agent::findings::observed(
        gsched_types::node::HealthKind::HostSetup,
        gsched_types::findings::Severity::Warn,
        gsched_types::findings::Component::Host,
        "nvidia-device-files-reset",
        None,
        "the NVIDIA driver re-creates /dev/nvidia* with mode 0666 whenever CUDA starts (NVreg_ModifyDeviceFiles=1): anyone with a shell can open a GPU outside their jobs, whatever gsched sets".into(),
        "add `options nvidia NVreg_ModifyDeviceFiles=0` to /etc/modprobe.d/gsched.conf, then reload the driver (rmmod/modprobe nvidia with no GPU in use) or reboot; GPU use outside jobs is reported meanwhile (ginfo, gctl show node)",
    )
    .event(gsched_proto::clock::now_ms());
    outbox.push(|seq| gsched_types::agent::AgentToController::Health {
        seq,
        events: vec![event],
    });
}

/// Raises the locked-memory limit jobs inherit to unlimited on a node with RDMA devices
/// and reports (for `gctl doctor`) a node where it stays finite. Fake topologies have no
/// devices to pin memory for.
fn check_memlock(topo: &gsched_types::topology::Topology, outbox: &Arc<outbox::Outbox>) {
    use gsched_agent::limits;
    if topo.source.starts_with("fake:") || !topo.nics.iter().any(|n| n.kind.is_rdma()) {
        return;
    }
    let Some(headline) = limits::memlock_shortfall(topo, limits::raise_memlock()) else {
        return;
    };
    tracing::warn!("{headline}");
    let event = gsched_agent::findings::observed(
        gsched_types::node::HealthKind::HostSetup,
        gsched_types::findings::Severity::Warn,
        gsched_types::findings::Component::Host,
        "memlock-limited",
        None,
        headline,
        "run gagentd as root, or set LimitMEMLOCK=infinity in its unit (deploy/systemd/gagentd.service does, as slurmd's unit does) or `* - memlock unlimited` in /etc/security/limits.conf for an agent started from a shell",
    )
    .event(gsched_proto::clock::now_ms());
    outbox.push(|seq| gsched_types::agent::AgentToController::Health {
        seq,
        events: vec![event],
    });
}

/// With `--slurm-names`: installs the profile snippet that keeps the links first in jobs'
/// login shells (as root), and reports Slurm's own clients a login shell would find
/// first when the snippet is not in place.
fn check_slurm_names(args: &RunArgs, outbox: &Arc<outbox::Outbox>) {
    use gsched_agent::slurm_names;
    let Some(links) = &args.slurm_names else {
        return;
    };
    let installed = if gsched_agent::identity::is_root() {
        match slurm_names::install(&args.profile_d) {
            Ok(path) => {
                tracing::info!(
                    "login shells in jobs find {links} first ({})",
                    path.display()
                );
                true
            }
            Err(e) => {
                tracing::warn!(
                    "cannot install {} in {}: {e}",
                    slurm_names::SNIPPET,
                    args.profile_d.display()
                );
                false
            }
        }
    } else {
        args.profile_d.join(slurm_names::SNIPPET).is_file()
    };
    let found = slurm_names::shadowing(std::path::Path::new(links), slurm_names::LOGIN_PATH);
    if installed || found.is_empty() {
        return;
    }
    let list: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
    let event = gsched_agent::findings::observed(
        gsched_types::node::HealthKind::HostSetup,
        gsched_types::findings::Severity::Warn,
        gsched_types::findings::Component::Host,
        "slurm-names-shadowed",
        None,
        format!(
            "Slurm's own clients ({}) come first in a job's login shell (#!/bin/bash -l resets PATH), and {} is not in {}",
            list.join(", "),
            slurm_names::SNIPPET,
            args.profile_d.display()
        ),
        "run gagentd as root (it installs the snippet), or install gsched-slurm-names.sh in /etc/profile.d by hand (or put the links in /usr/local/bin, ahead of Slurm's in a login PATH, as deploy/one-server/install.sh does)",
    )
    .event(gsched_proto::clock::now_ms());
    outbox.push(|seq| gsched_types::agent::AgentToController::Health {
        seq,
        events: vec![event],
    });
}
