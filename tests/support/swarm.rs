//! `gsched-swarm`: many node agents in one process, for the agents-at-scale benchmark.
//! Each runs the production agent session (`gsched_agent::session::run`: registration,
//! heartbeats, outbox, redirects, reconnects) with its own state directory and a copy of
//! one fake topology, so the controllers see N real agents; launching jobs is not part of
//! what it stands in for.
//!
//!   gsched-swarm --controllers A,B,C --agents N --topology FILE --dir DIR [--heartbeat S]

use gsched_agent::discover::{Source, discover};
use gsched_agent::hang::HangSettings;
use gsched_agent::layout::JobRoot;
use gsched_agent::runs::{RunManager, Settings};
use gsched_agent::session::{Agent, Registration};
use gsched_proto::dial::Dialer;
use parking_lot::{Mutex, RwLock};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

struct Args {
    controllers: Vec<String>,
    agents: usize,
    topology: PathBuf,
    dir: PathBuf,
    heartbeat: Duration,
    prefix: String,
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("gsched-swarm: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        controllers: Vec::new(),
        agents: 100,
        topology: PathBuf::new(),
        dir: PathBuf::new(),
        heartbeat: Duration::from_secs(1),
        prefix: "sim".into(),
    };
    let mut it = gsched_cli::text_args("gsched-swarm").into_iter().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| die(format!("{flag} needs a value")));
        match flag.as_str() {
            "--controllers" => args.controllers = value.split(',').map(String::from).collect(),
            "--agents" => args.agents = value.parse().unwrap_or_else(|e| die(e)),
            "--topology" => args.topology = value.into(),
            "--dir" => args.dir = value.into(),
            "--heartbeat" => {
                args.heartbeat = Duration::from_secs_f64(value.parse().unwrap_or_else(|e| die(e)))
            }
            "--prefix" => args.prefix = value,
            other => die(format!("unknown option {other}")),
        }
    }
    if args.controllers.is_empty() || args.topology.as_os_str().is_empty() {
        die("usage: gsched-swarm --controllers A,B,C --agents N --topology FILE --dir DIR");
    }
    args
}

/// Agent `i`'s name and its own training address (unique, as real nodes' are).
fn identity(prefix: &str, i: usize) -> (String, String) {
    (
        format!("{prefix}{i:04}"),
        format!("10.{}.{}.{}", 100 + i / 65_536, (i / 256) % 256, i % 256),
    )
}

fn agent(args: &Args, i: usize, topology: &gsched_types::Topology) -> Arc<Agent> {
    let (name, training_addr) = identity(&args.prefix, i);
    let state_dir = args.dir.join(&name);
    gsched_agent::layout::private_dir(&state_dir.join("steps"))
        .unwrap_or_else(|e| die(format!("{}: {e}", state_dir.display())));
    let outbox = Arc::new(
        gsched_agent::outbox::Outbox::open(state_dir.join("outbox"))
            .unwrap_or_else(|e| die(format!("outbox of {name}: {e}"))),
    );
    let topology = Arc::new(RwLock::new(topology.clone()));
    let settings = Settings {
        node: name.clone(),
        state_dir: state_dir.clone(),
        topology: topology.clone(),
        training_iface: None,
        agent_env: Default::default(),
        cgroups: None,
        private_gpus: false,
        device_filter: false,
        job_root: JobRoot(state_dir.join("jobs")),
        exe: std::env::current_exe().unwrap_or_default(),
        gpu_map: Vec::new(),
        slurm_names: None,
        controllers: args.controllers.join(","),
        min_uid: 0,
        probe: None,
        hang: HangSettings::default(),
    };
    Arc::new(Agent {
        registration: Registration {
            name,
            address: String::new(),
            training_addr,
            features: Vec::new(),
        },
        controllers: args.controllers.clone(),
        dialer: Dialer::default(),
        topology,
        runs: Arc::new(Mutex::new(RunManager::new(settings, outbox.clone()))),
        outbox,
        flush: Arc::new(tokio::sync::Notify::new()),
        launched: Arc::new(tokio::sync::Notify::new()),
        contact: Arc::new(gsched_agent::contact::Contact::open(&state_dir)),
        heartbeat: args.heartbeat,
    })
}

fn main() {
    let args = parse_args();
    let topology = discover(&Source::Fake(args.topology.clone()))
        .unwrap_or_else(|e| die(format!("{}: {e}", args.topology.display())));
    let agents: Vec<Arc<Agent>> = (0..args.agents)
        .map(|i| agent(&args, i, &topology))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(e));
    rt.block_on(async move {
        for a in agents {
            tokio::spawn(gsched_agent::session::run(a));
        }
        std::future::pending::<()>().await
    });
}
