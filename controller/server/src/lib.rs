//! `gctld`, the gsched controller: a Raft replica (raft-rs on sled) that serves users,
//! agents and peer controllers over one gRPC port, and, while it is the leader, schedules
//! jobs and drives the agents.
//!
//! - [`config`]: flags and the TOML file.
//! - [`accept`]: which connections are kept (caps, first-bytes deadline, back-off).
//! - [`auth`]: who callers are and what they may do.
//! - [`membership`]: checks before a controller joins.
//! - [`transport`]: Raft messages between controllers.
//! - [`service`]: the gRPC services.
//! - [`storage`]: the data directory, private to the controller's user.
//! - [`leader`]: scheduling, dispatch and liveness loops of the leader.

pub mod accept;
pub mod archiver;
pub mod auth;
pub mod config;
pub mod ctx;
pub mod http;
pub mod http_edge;
pub mod hub;
pub mod leader;
pub mod membership;
pub mod notify;
pub mod openapi;
pub mod service;
pub mod storage;
pub mod telemetry;
pub mod transport;

use auth::{Auth, Mode};
use config::{ControllerConfig, Security};
use ctx::Ctx;
use gsched_proto::munge::Munge;
use gsched_proto::pb::agent_server::AgentServer;
use gsched_proto::pb::jobs_server::JobsServer;
use gsched_proto::pb::peer_server::PeerServer;
use gsched_proto::tls::{Dialer, PeerIdentity};
use gsched_raft::{NodeConfig, SledStore};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use transport::{Faults, GrpcTransport, TransportSetup};

const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Replaces this process with a fresh start of the same binary and arguments (the Raft
/// store could not be written; only a new process can reopen it). Returns if exec fails.
fn restart_process(fault: &str) {
    use std::os::unix::ffi::OsStrExt;
    let args: Vec<std::ffi::CString> = std::env::args_os()
        .filter_map(|a| std::ffi::CString::new(a.as_bytes()).ok())
        .collect();
    tracing::warn!("restarting gctld to reopen its data directory after: {fault}");
    let Err(e) = nix::unistd::execv(c"/proc/self/exe", &args);
    tracing::error!(
        "cannot restart gctld ({e}); restart it by hand once the data directory is writable"
    );
}

/// How much room a data directory must have again before a controller whose disk
/// filled up restarts (its store writes on open).
const ROOM_TO_RESTART: usize = 4 << 20;

/// After a storage fault: restart once `data_dir` takes [`ROOM_TO_RESTART`] bytes again
/// (written, synced and removed), so the new process can open its store.
fn recovery(data_dir: &std::path::Path) -> gsched_raft::StorageRecovery {
    let probe = data_dir.join(".room-to-restart");
    gsched_raft::StorageRecovery {
        writable: Box::new(move || {
            use std::io::Write;
            let ok = std::fs::File::create(&probe)
                .and_then(|mut f| {
                    f.write_all(&vec![0u8; ROOM_TO_RESTART])?;
                    f.sync_all()
                })
                .is_ok();
            let _ = std::fs::remove_file(&probe);
            ok
        }),
        restart: Box::new(restart_process),
    }
}

/// Where a controller serves gRPC: a TCP port, or a Unix socket (one host: its clients
/// are known by `SO_PEERCRED`).
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    /// Binds `addr`: `HOST:PORT`, or `unix:PATH`. A socket file left by a stopped
    /// controller is replaced; the socket is open to every local user (who they are is
    /// the kernel's word, checked per request), its directory decides who may create it.
    pub async fn bind(addr: &str) -> anyhow::Result<Listener> {
        match gsched_proto::dial::Address::parse(addr) {
            gsched_proto::dial::Address::Tcp(a) => tokio::net::TcpListener::bind(&a)
                .await
                .map(Listener::Tcp)
                .map_err(|e| anyhow::anyhow!("cannot listen on {a}: {e}")),
            gsched_proto::dial::Address::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    if !meta.file_type().is_socket() {
                        anyhow::bail!(
                            "cannot listen on {}: a file that is not a socket is in the way",
                            path.display()
                        );
                    }
                    std::fs::remove_file(&path).map_err(|e| {
                        anyhow::anyhow!("cannot replace the old socket {}: {e}", path.display())
                    })?;
                }
                let l = tokio::net::UnixListener::bind(&path)
                    .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                    .map_err(|e| anyhow::anyhow!("cannot open {} to users: {e}", path.display()))?;
                Ok(Listener::Unix(l))
            }
        }
    }
}

/// How long a stopping controller waits for open calls to end.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs a controller on an already-bound listener until `shutdown` completes (and at most
/// [`SHUTDOWN_GRACE`] more).
pub async fn run(
    cfg: ControllerConfig,
    listener: Listener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    storage::private_data_dir(&cfg.data_dir)?;
    let store = SledStore::open_with_cache(&cfg.data_dir, cfg.store_cache_bytes).map_err(|e| {
        anyhow::anyhow!(
            "cannot open Raft storage in {}: {e}",
            cfg.data_dir.display()
        )
    })?;
    let (tx, rx) = std::sync::mpsc::channel();
    let book: transport::AddressBook = Arc::new(RwLock::new(
        cfg.peers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect::<HashMap<_, _>>(),
    ));
    let faults = Faults::default();
    faults.watch_file(&tokio::runtime::Handle::current());
    let (mode, dialer, server_tls) = match &cfg.security {
        Security::DevLocal => (Mode::DevLocal, Dialer::default(), None),
        Security::Cluster {
            certs,
            munge_socket,
        } => {
            let munge = Munge::load(munge_socket.as_deref())
                .map_err(|e| anyhow::anyhow!("users are authenticated with MUNGE: {e}"))?;
            let me = PeerIdentity::Controller(cfg.id);
            let cluster = certs.cluster_id().map_err(|e| anyhow::anyhow!(e))?;
            let mut addresses = vec![cfg.advertise.clone()];
            addresses.extend(cfg.aliases.iter().cloned());
            addresses.extend(cfg.peers.get(&cfg.id).cloned());
            addresses.sort();
            addresses.dedup();
            let dialer = Dialer {
                tls: Some(certs.client(&me).map_err(|e| anyhow::anyhow!(e))?),
            };
            let server = accept::grpc_tls(certs, cfg.id).map_err(|e| anyhow::anyhow!(e))?;
            (
                Mode::Cluster {
                    munge,
                    cluster,
                    addresses,
                },
                dialer,
                Some(server),
            )
        }
    };
    let dev_local = matches!(mode, Mode::DevLocal);
    let transport = GrpcTransport::new(
        TransportSetup {
            id: cfg.id,
            advertise: cfg.advertise.clone(),
            book: book.clone(),
            dialer: dialer.clone(),
            faults: faults.clone(),
        },
        tx.clone(),
        tokio::runtime::Handle::current(),
    );
    let mut node_cfg = NodeConfig::new(cfg.id);
    node_cfg.tick = cfg.raft_tick;
    node_cfg.election_ticks = cfg.election_ticks;
    node_cfg.snapshot_every = cfg.snapshot_every;
    node_cfg.keep_tail = (cfg.snapshot_every / 5).max(10);
    node_cfg.bootstrap_voters = if cfg.join {
        Vec::new()
    } else {
        cfg.peers.keys().copied().collect()
    };
    let (raft, thread) = gsched_raft::start_supervised(
        node_cfg,
        store,
        Some(recovery(&cfg.data_dir)),
        transport,
        tx,
        rx,
    )
    .map_err(|e| anyhow::anyhow!("cannot start the Raft replica: {e}"))?;
    let tokens = match &cfg.token_key {
        Some(path) => auth::token::TokenKey::from_file(path).map_err(|e| anyhow::anyhow!(e))?,
        None => auth::token::TokenKey::random(),
    };
    let auth = Auth::new(mode, cfg.policy.clone(), tokens);
    let archive = archiver::start(&cfg.data_dir, raft.replica.clone());
    let ctx = Arc::new(Ctx {
        cfg,
        auth,
        dialer,
        raft: raft.clone(),
        book,
        hub: Default::default(),
        estimates: Default::default(),
        follower_estimates: Default::default(),
        faults,
        telemetry: Default::default(),
        admission: accept::Admission::new(accept::Limits::default_for_process()),
        archive,
    });
    tokio::spawn(leader::watch_leadership(ctx.clone()));
    tokio::spawn(sync_address_book(ctx.clone()));
    if let Some(value) = &ctx.cfg.http {
        let (found, listeners) = tokio::sync::mpsc::channel(4);
        let scheme = if dev_local { "http" } else { "https" };
        let loopback = if value == http_edge::SYSTEMD {
            let sockets = http_edge::systemd_sockets().map_err(anyhow::Error::msg)?;
            let mut loopback = true;
            for s in sockets {
                let addr = s.local_addr()?;
                loopback &= addr.ip().is_loopback();
                tracing::info!("metrics and the HTTP API on {scheme}://{addr}/ (systemd's socket)");
                let _ = found.try_send(tokio::net::TcpListener::from_std(s)?);
            }
            if dev_local && !loopback {
                anyhow::bail!(
                    "--http systemd: a --dev-local controller serves HTTP on loopback only, but systemd passed a socket on another address (see gctld.socket's ListenStream=)"
                );
            }
            loopback
        } else {
            let addrs = http_edge::addresses(value).map_err(anyhow::Error::msg)?;
            for addr in &addrs {
                tracing::info!("metrics and the HTTP API on {scheme}://{addr}/");
                tokio::spawn(http_edge::bind_when_free(*addr, found.clone()));
            }
            addrs.iter().all(|a| a.ip().is_loopback())
        };
        tokio::spawn(http::serve(ctx.clone(), listeners, loopback));
    }
    tracing::info!("gctld {} serving on {}", ctx.cfg.id, ctx.cfg.advertise);
    // Idle connections are pinged; one that does not answer is closed (gRPC clients
    // answer by themselves, a socket held open and silent does not).
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)));
    // Streams that never end by themselves (peers' `Peer.Stream`, agents' sessions) would
    // keep a graceful shutdown waiting for ever: they get SHUTDOWN_GRACE to finish.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let serve = server
        .layer(auth::digest::DigestLayer {
            enabled: !dev_local,
        })
        .add_service(
            JobsServer::new(service::jobs::JobsService::new(ctx.clone()))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            AgentServer::new(service::agent::AgentService { ctx: ctx.clone() })
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            PeerServer::new(service::peer::PeerService { ctx: ctx.clone() })
                .max_decoding_message_size(MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(
            accept::grpc_incoming(listener, dev_local, ctx.admission.clone(), server_tls),
            stopped(stop_rx.clone()),
        );
    tokio::select! {
        served = serve => served?,
        _ = async {
            stopped(stop_rx).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::info!(
            "stopping with streams still open {SHUTDOWN_GRACE:?} after the stop signal"
        ),
    }
    raft.shutdown();
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    Ok(())
}

/// Keeps the transport's address book in step with the replicated controller list.
async fn sync_address_book(ctx: Arc<Ctx>) {
    loop {
        let known: Vec<(u64, String)> = ctx
            .raft
            .replica
            .read()
            .state
            .controllers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        {
            let mut book = ctx.book.write();
            for (id, addr) in known {
                if id != ctx.cfg.id {
                    book.insert(id, addr);
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
