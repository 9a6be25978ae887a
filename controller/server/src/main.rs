//! `gctld`: the gsched controller daemon.

use clap::Parser;
use gsched_controller::config::{ConfigFile, ControllerConfig, Security, parse_peers};
use gsched_proto::tls::{CertDir, is_loopback};
use std::path::PathBuf;
use std::time::Duration;

/// gsched controller: a Raft replica that schedules GPU jobs.
#[derive(Parser, Debug)]
#[command(name = "gctld", version, about)]
struct Args {
    /// This controller's id (1, 2, 3...), unique in the cluster.
    #[arg(long)]
    id: u64,
    /// Address to listen on (HOST:PORT) for clients, agents and peer controllers.
    #[arg(long)]
    listen: String,
    /// Address others use to reach this controller (default: its entry in --peers, else --listen).
    #[arg(long)]
    advertise: Option<String>,
    /// All controllers of a new cluster: ID=HOST:PORT,... (ignored once the data directory has state).
    #[arg(long, default_value = "")]
    peers: String,
    /// Where the Raft log, hard state and snapshots live (sled).
    #[arg(long)]
    data_dir: PathBuf,
    /// TOML file with [scheduler] partitions, QOS, limits, switches and weights.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Start empty and wait to be added with `gctl controllers add`.
    #[arg(long)]
    join: bool,
    /// Seconds without a heartbeat before a node is "not responding" (no new jobs; its
    /// jobs keep running).
    #[arg(long)]
    node_timeout: Option<f64>,
    /// Seconds without a heartbeat before a node is lost: its jobs end (NODE_FAIL, and are
    /// requeued if asked). Its agent stops them itself a little earlier, so they never run
    /// twice. At least --node-timeout.
    #[arg(long)]
    dead_node_timeout: Option<f64>,
    /// Range of MASTER_PORTs handed to jobs (MIN-MAX), overriding the config file.
    #[arg(long)]
    master_ports: Option<String>,
    /// A single-host development cluster: every address must be loopback, there are no
    /// certificates and no munged, and callers are identified by the kernel's owner of
    /// their loopback socket (agents and peer controllers must run as this user).
    #[arg(long, conflicts_with = "tls_dir")]
    dev_local: bool,
    /// The cluster's certificates (`gctl certs init` and `gctl certs issue --controller
    /// ID`): ca.pem, controller-ID.pem, controller-ID.key. Required unless --dev-local.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// munged's socket, when it is not the default /run/munge/munge.socket.2.
    #[arg(long)]
    munge_socket: Option<PathBuf>,
    /// Serve the dashboard, the REST API and Prometheus metrics at ADDR (e.g.
    /// 10.0.0.1:9817; keep it on the management network). A loopback address means both
    /// 127.0.0.1 and ::1; `systemd` takes the sockets systemd holds for gctld
    /// (gctld.socket), which no user can bind while gctld restarts.
    #[arg(long)]
    http: Option<String>,
    /// The key the tokens of `gctl token` (for the HTTP API and the dashboard) are signed
    /// with: 32 or more bytes, the same file on every controller (`head -c 32
    /// /dev/urandom`). Without it each controller signs with a key of its own that its
    /// restart forgets.
    #[arg(long)]
    token_key: Option<PathBuf>,
    /// sled's page cache for the Raft log, in MiB (the log is read back rarely).
    #[arg(long, default_value_t = 16)]
    store_cache_mb: u64,
    /// Raft tick in milliseconds: the leader sends a heartbeat every 3 ticks; a follower
    /// that hears none for 6-7 ticks starts an election.
    #[arg(long, default_value_t = 50)]
    tick_ms: u64,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(
        long,
        env = "GSCHED_LOG",
        default_value = "info,raft=warn,sled=warn,h2=warn,tower=warn,hyper=warn"
    )]
    log: String,
    /// Log lines as text, or as JSON objects (one per line) for a log shipper.
    #[arg(long, value_enum, default_value = "text")]
    log_format: gsched_proto::logs::LogFormat,
}

fn main() {
    // Everything gctld writes (the Raft log holds every job's script and environment) is
    // its user's alone, whatever umask it was started with.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    limit_malloc_arenas();
    let args = Args::parse();
    // Logs go to stderr (stdout stays free for output a caller may parse).
    gsched_proto::logs::init(&args.log, args.log_format);
    if let Err(e) = real_main(args) {
        eprintln!("gctld: {e}");
        std::process::exit(1);
    }
}

/// At most two glibc malloc arenas (unless `MALLOC_ARENA_MAX` says otherwise): with one
/// per thread, memory freed after a burst of submissions stays spread over the tokio
/// workers' arenas; two keep a replica at 10,000 queued jobs about 2 MiB smaller
/// (`scale` bench) at the same throughput (`ha` bench).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt(3) only sets an allocator parameter; it is called before any
        // other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

fn real_main(args: Args) -> anyhow::Result<()> {
    if args.id == 0 {
        anyhow::bail!("--id must be at least 1");
    }
    let mut peers = parse_peers(&args.peers).map_err(|e| anyhow::anyhow!("--peers: {e}"))?;
    let advertise = args
        .advertise
        .clone()
        .or_else(|| peers.get(&args.id).cloned())
        .unwrap_or_else(|| args.listen.clone());
    if !args.join {
        match peers.get(&args.id) {
            None if peers.is_empty() => {
                peers.insert(args.id, advertise.clone());
            }
            None => anyhow::bail!(
                "--peers does not list this controller's id {}; add {}={advertise}",
                args.id,
                args.id
            ),
            Some(_) => {}
        }
    }
    let security = match (&args.tls_dir, args.dev_local) {
        (Some(dir), _) => Security::Cluster {
            certs: CertDir(dir.clone()),
            munge_socket: args.munge_socket.clone(),
        },
        (None, true) => {
            let mut addrs = vec![args.listen.clone(), advertise.clone()];
            addrs.extend(peers.values().cloned());
            if let Some(a) = addrs.iter().find(|a| !is_loopback(a)) {
                anyhow::bail!(
                    "--dev-local serves loopback only, but {a} is not a loopback address; a cluster on several hosts needs certificates (--tls-dir, see `gctl certs`)"
                );
            }
            if let Some(h) = args
                .http
                .as_deref()
                .filter(|h| *h != gsched_controller::http_edge::SYSTEMD && !is_loopback(h))
            {
                anyhow::bail!(
                    "--http {h}: a --dev-local controller knows HTTP callers by their loopback socket, so its HTTP API stays on loopback (127.0.0.1:PORT); reach it from elsewhere through an SSH tunnel, or run a cluster with certificates"
                );
            }
            Security::DevLocal
        }
        (None, false) => anyhow::bail!(
            "no security settings: give --tls-dir with the cluster's certificates (`gctl certs init` then `gctl certs issue --controller {}`), or --dev-local for a single-host development cluster",
            args.id
        ),
    };
    let mut cfg = ControllerConfig::new(args.id, &advertise, args.data_dir.clone());
    cfg.security = security;
    cfg.aliases = vec![args.listen.clone()];
    cfg.peers = peers;
    cfg.join = args.join;
    cfg.raft_tick = Duration::from_millis(args.tick_ms.max(5));
    cfg.store_cache_bytes = args.store_cache_mb.max(1) << 20;
    cfg.http = args.http.clone();
    cfg.token_key = args.token_key.clone();
    if let Some(path) = &args.config {
        ConfigFile::load(path)
            .map_err(|e| anyhow::anyhow!(e))?
            .apply_to(&mut cfg);
    }
    cfg.scheduler.default_user_queue_limit();
    if let Some(range) = &args.master_ports {
        let (lo, hi) = range
            .split_once('-')
            .ok_or_else(|| anyhow::anyhow!("--master-ports {range}: use MIN-MAX"))?;
        cfg.scheduler.master_port_min = lo
            .parse()
            .map_err(|_| anyhow::anyhow!("--master-ports: bad port '{lo}'"))?;
        cfg.scheduler.master_port_max = hi
            .parse()
            .map_err(|_| anyhow::anyhow!("--master-ports: bad port '{hi}'"))?;
        cfg.scheduler
            .validate()
            .map_err(|e| anyhow::anyhow!("--master-ports: {e}"))?;
    }
    if let Some(t) = args.node_timeout {
        cfg.liveness.not_responding = Duration::from_secs_f64(t.max(0.5));
    }
    if let Some(t) = args.dead_node_timeout {
        cfg.liveness.lost = Duration::from_secs_f64(t.max(1.0));
    }
    cfg.liveness.lost = cfg.liveness.lost.max(cfg.liveness.not_responding);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = gsched_controller::Listener::bind(&args.listen).await?;
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("signal handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        gsched_controller::run(cfg, listener, shutdown).await
    })
}
