//! Raft messages between controllers over gRPC. One sender task per peer batches whatever
//! is queued into a single `Peer.Send`; snapshots are streamed in 1 MiB chunks on their
//! own task. Unreachable peers are reported to raft-rs, which retries.
//!
//! For fault-injection tests, `GSCHED_FAULTS_FILE` may name a file listing peer ids
//! (comma or space separated) whose traffic this controller drops in both directions.

use gsched_proto::pb::peer_client::PeerClient;
use gsched_proto::pb::{RaftBatch, SnapshotChunk};
use gsched_proto::tls::Dialer;
use gsched_raft::{Msg, RaftMessage, Transport, encode_message};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// Raft messages waiting for one peer at most (a batch's worth); beyond that they are
/// reported lost and raft-rs resends.
const PEER_BACKLOG: usize = 4096;

/// Peer id -> client address, learned from flags, replicated state and incoming traffic.
pub type AddressBook = Arc<RwLock<HashMap<u64, String>>>;

const CHUNK: usize = 1024 * 1024;

/// Peers whose traffic is dropped (fault injection for tests).
#[derive(Clone, Default)]
pub struct Faults {
    blocked: Arc<RwLock<HashSet<u64>>>,
}

impl Faults {
    /// Peers whose traffic is being dropped now, sorted (shown by `Status`).
    pub fn blocked(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.blocked.read().iter().copied().collect();
        v.sort_unstable();
        v
    }

    pub fn is_blocked(&self, peer: u64) -> bool {
        self.blocked.read().contains(&peer)
    }

    /// Re-reads `GSCHED_FAULTS_FILE` every 200 ms.
    pub fn watch_file(&self, handle: &tokio::runtime::Handle) {
        let Ok(path) = std::env::var("GSCHED_FAULTS_FILE") else {
            return;
        };
        let blocked = self.blocked.clone();
        handle.spawn(async move {
            loop {
                let ids: HashSet<u64> = std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .split([',', ' ', '\n'])
                    .filter_map(|s| s.trim().parse().ok())
                    .collect();
                *blocked.write() = ids;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

pub struct GrpcTransport {
    id: u64,
    advertise: String,
    book: AddressBook,
    mailbox: Sender<Msg>,
    runtime: tokio::runtime::Handle,
    queues: Mutex<HashMap<u64, mpsc::Sender<RaftMessage>>>,
    faults: Faults,
    /// How peers are dialed (TLS with this controller's certificate on a real cluster).
    dialer: Dialer,
}

/// Where a transport sends from and how it reaches its peers.
pub struct TransportSetup {
    pub id: u64,
    pub advertise: String,
    pub book: AddressBook,
    pub dialer: Dialer,
    pub faults: Faults,
}

impl GrpcTransport {
    pub fn new(
        setup: TransportSetup,
        mailbox: Sender<Msg>,
        runtime: tokio::runtime::Handle,
    ) -> GrpcTransport {
        GrpcTransport {
            id: setup.id,
            advertise: setup.advertise,
            book: setup.book,
            mailbox,
            runtime,
            queues: Mutex::new(HashMap::new()),
            faults: setup.faults,
            dialer: setup.dialer,
        }
    }

    fn queue(&self, to: u64) -> mpsc::Sender<RaftMessage> {
        let mut queues = self.queues.lock();
        if let Some(q) = queues.get(&to).filter(|q| !q.is_closed()) {
            return q.clone();
        }
        let (tx, rx) = mpsc::channel(PEER_BACKLOG);
        queues.insert(to, tx.clone());
        let worker = PeerWorker {
            from: self.id,
            advertise: self.advertise.clone(),
            to,
            book: self.book.clone(),
            mailbox: self.mailbox.clone(),
            faults: self.faults.clone(),
            dialer: self.dialer.clone(),
        };
        self.runtime.spawn(worker.run(rx));
        tx
    }
}

impl Transport for GrpcTransport {
    fn send(&self, msgs: Vec<RaftMessage>) {
        for m in msgs {
            if self.faults.is_blocked(m.to) {
                continue;
            }
            let to = m.to;
            if let Err(mpsc::error::TrySendError::Full(m)) = self.queue(to).try_send(m) {
                // The peer's link is that far behind: report the message lost, as a
                // failed send is, and raft-rs sends what the peer lacks again later.
                let _ = self.mailbox.send(Msg::Unreachable(to));
                if gsched_raft::node::is_snapshot(&m) {
                    let _ = self.mailbox.send(Msg::SnapshotDone { to, ok: false });
                }
            }
        }
    }
}

struct PeerWorker {
    from: u64,
    advertise: String,
    to: u64,
    book: AddressBook,
    mailbox: Sender<Msg>,
    faults: Faults,
    dialer: Dialer,
}

async fn connect(dialer: &Dialer, addr: &str) -> Option<PeerClient<Channel>> {
    let timeouts = gsched_proto::dial::Timeouts {
        connect: Duration::from_millis(300),
        request: Some(Duration::from_secs(5)),
    };
    let channel = match dialer.connect(addr, timeouts).await {
        Ok(c) => Some(c),
        Err(e @ gsched_proto::dial::DialError::Unreachable { .. }) => {
            tracing::debug!("peer {addr}: {e}");
            None
        }
        Err(e) => {
            tracing::warn!("peer {addr}: {e}");
            None
        }
    };
    channel.map(|c| {
        PeerClient::new(c)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    })
}

impl PeerWorker {
    async fn run(self, mut rx: mpsc::Receiver<RaftMessage>) {
        let mut client: Option<PeerClient<Channel>> = None;
        let mut backoff_until = Instant::now();
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while let Ok(m) = rx.try_recv() {
                batch.push(m);
                if batch.len() >= 4096 {
                    break;
                }
            }
            let (snaps, normal): (Vec<RaftMessage>, Vec<RaftMessage>) =
                batch.into_iter().partition(gsched_raft::node::is_snapshot);
            if Instant::now() < backoff_until {
                let _ = self.mailbox.send(Msg::Unreachable(self.to));
                for s in snaps {
                    let _ = self.mailbox.send(Msg::SnapshotDone {
                        to: s.to,
                        ok: false,
                    });
                }
                continue;
            }
            if client.is_none() {
                let addr = self.book.read().get(&self.to).cloned();
                client = match addr {
                    Some(a) => connect(&self.dialer, &a).await,
                    None => None,
                };
            }
            let Some(c) = client.as_mut() else {
                backoff_until = Instant::now() + Duration::from_millis(200);
                let _ = self.mailbox.send(Msg::Unreachable(self.to));
                for s in snaps {
                    let _ = self.mailbox.send(Msg::SnapshotDone {
                        to: s.to,
                        ok: false,
                    });
                }
                continue;
            };
            if !normal.is_empty() {
                let req = RaftBatch {
                    from: self.from,
                    from_address: self.advertise.clone(),
                    messages: normal.iter().map(encode_message).collect(),
                };
                if c.send(req).await.is_err() {
                    client = None;
                    let _ = self.mailbox.send(Msg::Unreachable(self.to));
                }
            }
            for snap in snaps {
                let ok = match client.as_mut() {
                    Some(c) => {
                        send_snapshot(c, self.from, &self.advertise, snap, &self.faults).await
                    }
                    None => false,
                };
                let _ = self.mailbox.send(Msg::SnapshotDone { to: self.to, ok });
            }
        }
    }
}

async fn send_snapshot(
    client: &mut PeerClient<Channel>,
    from: u64,
    advertise: &str,
    mut msg: RaftMessage,
    faults: &Faults,
) -> bool {
    if faults.is_blocked(msg.to) {
        return false;
    }
    let data = std::mem::take(&mut msg.mut_snapshot().data).to_vec();
    let header = encode_message(&msg);
    let mut chunks = vec![SnapshotChunk {
        from,
        from_address: advertise.to_string(),
        message: header,
        data: Vec::new(),
    }];
    for piece in data.chunks(CHUNK) {
        chunks.push(SnapshotChunk {
            from,
            from_address: String::new(),
            message: Vec::new(),
            data: piece.to_vec(),
        });
    }
    let size = data.len();
    match client.send_snapshot(tokio_stream::iter(chunks)).await {
        Ok(_) => {
            tracing::info!(
                "sent a {size}-byte snapshot to controller {} in chunks of {CHUNK}",
                msg.to
            );
            true
        }
        Err(e) => {
            tracing::warn!("snapshot to controller {} failed: {e}", msg.to);
            false
        }
    }
}
