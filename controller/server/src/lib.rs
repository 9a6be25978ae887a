//! `gctld`, the gsched controller: a Raft replica (raft-rs on sled) that serves users,
//! agents and peer controllers over one gRPC port, and, while it is the leader, schedules
//! jobs and drives the agents.
//!
//! - [`config`]: flags and the TOML file.
//! - [`transport`]: Raft messages between controllers.
//! - [`service`]: the gRPC services.
//! - [`leader`]: scheduling, dispatch and liveness loops of the leader.

pub mod config;
pub mod ctx;
pub mod hub;
pub mod leader;
pub mod service;
pub mod transport;

use config::ControllerConfig;
use ctx::Ctx;
use gsched_proto::pb::agent_server::AgentServer;
use gsched_proto::pb::jobs_server::JobsServer;
use gsched_proto::pb::peer_server::PeerServer;
use gsched_raft::{NodeConfig, SledStore};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use transport::{Faults, GrpcTransport};

const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Runs a controller on an already-bound listener until `shutdown` completes.
pub async fn run(
    cfg: ControllerConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create data directory {}: {e}",
            cfg.data_dir.display()
        )
    })?;
    let store = SledStore::open(&cfg.data_dir).map_err(|e| {
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
    let transport = GrpcTransport::new(
        cfg.id,
        cfg.advertise.clone(),
        book.clone(),
        tx.clone(),
        tokio::runtime::Handle::current(),
        faults.clone(),
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
    let (raft, thread) = gsched_raft::start(node_cfg, store, transport, tx, rx)
        .map_err(|e| anyhow::anyhow!("cannot start the Raft replica: {e}"))?;
    let ctx = Arc::new(Ctx {
        cfg,
        raft: raft.clone(),
        book,
        hub: Default::default(),
        estimates: Default::default(),
        faults,
    });
    tokio::spawn(leader::watch_leadership(ctx.clone()));
    tokio::spawn(sync_address_book(ctx.clone()));
    tracing::info!("gctld {} serving on {}", ctx.cfg.id, ctx.cfg.advertise);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
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
            // The builder's tcp_nodelay only covers listeners tonic opens itself; without
            // it here every reply waits ~40 ms on Nagle and the client's delayed ACK.
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                |conn| {
                    conn.and_then(|s| {
                        s.set_nodelay(true)?;
                        Ok(s)
                    })
                },
            ),
            shutdown,
        )
        .await?;
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
