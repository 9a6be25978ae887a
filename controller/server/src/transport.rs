//! Raft messages between controllers over gRPC. One sender task per peer batches whatever
//! is queued and puts each batch on one long-lived `Peer.Stream` (unary `Peer.Send` for a
//! peer that does not serve it); snapshots are streamed in 1 MiB chunks as their own call.
//! Unreachable peers are reported to raft-rs, which retries.
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
use tokio::task::JoinHandle;
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

/// How long a unary call or a snapshot may take (the channel has no request timeout,
/// which would cut the long-lived stream).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Pings on the peer's connection; one unanswered this long closes it, which ends the
/// stream on a peer that stopped answering.
const KEEPALIVE: Duration = Duration::from_secs(2);

/// Batches waiting on a peer's stream; beyond that they are reported lost.
const STREAM_BUFFER: usize = 64;

async fn connect(dialer: &Dialer, addr: &str) -> Option<PeerClient<Channel>> {
    let timeouts = gsched_proto::dial::Timeouts {
        connect: Duration::from_millis(300),
        request: None,
        keepalive: Some(KEEPALIVE),
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

/// An open `Peer.Stream` call: batches go in through `tx`; `call` ends with the peer's
/// answer when the stream breaks or the peer refuses a batch.
struct Link {
    tx: mpsc::Sender<RaftBatch>,
    call: JoinHandle<Result<(), tonic::Status>>,
}

/// How batches reach one peer: on a stream (opened when first needed, again after it
/// broke), or one unary `Peer.Send` each for a peer that does not serve `Stream`.
enum Route {
    Stream(Option<Link>),
    Unary,
}

/// Why a batch did not go out.
enum Undelivered {
    /// The connection broke or the peer refused the batch.
    LinkDown,
    /// The stream's buffer is full: the peer reads slower than batches come.
    Behind,
    /// The peer does not serve `Peer.Stream` (an older controller); the batch comes back.
    NoStream(RaftBatch),
}

impl Route {
    async fn push(
        &mut self,
        client: &mut PeerClient<Channel>,
        batch: RaftBatch,
    ) -> Result<(), Undelivered> {
        let link = match self {
            Route::Unary => {
                return match tokio::time::timeout(REQUEST_TIMEOUT, client.send(batch)).await {
                    Ok(Ok(_)) => Ok(()),
                    _ => Err(Undelivered::LinkDown),
                };
            }
            Route::Stream(link) => link,
        };
        let open = link.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(STREAM_BUFFER);
            let mut c = client.clone();
            let call = tokio::spawn(async move {
                c.stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await
                    .map(|_| ())
            });
            Link { tx, call }
        });
        let batch = match open.tx.try_send(batch) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => return Err(Undelivered::Behind),
            Err(mpsc::error::TrySendError::Closed(batch)) => batch,
        };
        let ended = link.take().expect("the link was just used");
        match ended.call.await {
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                Err(Undelivered::NoStream(batch))
            }
            Ok(Err(status)) => {
                tracing::debug!("raft stream to a peer ended: {status}");
                Err(Undelivered::LinkDown)
            }
            _ => Err(Undelivered::LinkDown),
        }
    }
}

impl PeerWorker {
    /// Tells raft-rs the peer was not reached, and that the snapshots in `snaps` failed.
    fn lost(&self, snaps: &[RaftMessage]) {
        let _ = self.mailbox.send(Msg::Unreachable(self.to));
        for _ in snaps {
            let _ = self.mailbox.send(Msg::SnapshotDone {
                to: self.to,
                ok: false,
            });
        }
    }

    async fn run(self, mut rx: mpsc::Receiver<RaftMessage>) {
        let mut client: Option<PeerClient<Channel>> = None;
        let mut route = Route::Stream(None);
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
                self.lost(&snaps);
                continue;
            }
            if client.is_none() {
                let addr = self.book.read().get(&self.to).cloned();
                client = match addr {
                    Some(a) => connect(&self.dialer, &a).await,
                    None => None,
                };
                route = Route::Stream(None);
            }
            let Some(c) = client.as_mut() else {
                backoff_until = Instant::now() + Duration::from_millis(200);
                self.lost(&snaps);
                continue;
            };
            if !normal.is_empty() {
                let req = RaftBatch {
                    from: self.from,
                    from_address: self.advertise.clone(),
                    messages: normal.iter().map(encode_message).collect(),
                };
                let sent = match route.push(c, req).await {
                    Err(Undelivered::NoStream(req)) => {
                        tracing::info!(
                            "controller {} does not serve Peer.Stream; sending it one call per batch",
                            self.to
                        );
                        route = Route::Unary;
                        route.push(c, req).await
                    }
                    other => other,
                };
                if let Err(why) = sent {
                    // A batch left behind keeps the connection; raft-rs resends either way.
                    if !matches!(why, Undelivered::Behind) {
                        client = None;
                    }
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
    let sent = tokio::time::timeout(
        REQUEST_TIMEOUT,
        client.send_snapshot(tokio_stream::iter(chunks)),
    )
    .await
    .unwrap_or_else(|_| {
        Err(tonic::Status::deadline_exceeded(
            "the snapshot took too long",
        ))
    });
    match sent {
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

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_proto::pb::peer_server::{Peer, PeerServer};
    use gsched_proto::pb::{Empty, HelloReply, HelloRequest};
    use raft::eraftpb::MessageType;
    use tokio_stream::StreamExt;
    use tonic::{Request, Response, Status};

    /// A peer that counts what arrives on each call; `streams: false` answers `Stream`
    /// as a controller built before it existed does.
    #[derive(Clone, Default)]
    struct Recorder {
        streams: bool,
        stream_calls: Arc<Mutex<usize>>,
        unary_calls: Arc<Mutex<usize>>,
        messages: Arc<Mutex<Vec<u64>>>,
    }

    impl Recorder {
        fn record(&self, batch: &RaftBatch) {
            for m in &batch.messages {
                let msg = gsched_raft::decode_message(m).unwrap();
                self.messages.lock().push(msg.index);
            }
        }
    }

    #[tonic::async_trait]
    impl Peer for Recorder {
        async fn send(&self, req: Request<RaftBatch>) -> Result<Response<Empty>, Status> {
            *self.unary_calls.lock() += 1;
            self.record(req.get_ref());
            Ok(Response::new(Empty {}))
        }

        async fn stream(
            &self,
            req: Request<tonic::Streaming<RaftBatch>>,
        ) -> Result<Response<Empty>, Status> {
            if !self.streams {
                return Err(Status::unimplemented("Peer.Stream"));
            }
            *self.stream_calls.lock() += 1;
            let mut batches = req.into_inner();
            while let Some(b) = batches.next().await {
                self.record(&b?);
            }
            Ok(Response::new(Empty {}))
        }

        async fn send_snapshot(
            &self,
            _req: Request<tonic::Streaming<SnapshotChunk>>,
        ) -> Result<Response<Empty>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn hello(&self, _req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
    }

    /// Sends heartbeats to a `Recorder` one at a time, as raft-rs hands them over: until
    /// the first arrives (a peer without the stream refuses it first, and what went before
    /// its refusal came back is lost, however long that takes), then ten more, and at
    /// least 30 in all. Returns the recorder once the last arrived, and the last index.
    async fn deliver_to(peer: Recorder) -> (Recorder, u64) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = PeerServer::new(peer.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let book: AddressBook = Arc::new(RwLock::new(HashMap::from([(2, addr)])));
        let (mailbox, _events) = std::sync::mpsc::channel();
        let transport = GrpcTransport::new(
            TransportSetup {
                id: 1,
                advertise: "127.0.0.1:1".into(),
                book,
                dialer: Dialer::default(),
                faults: Faults::default(),
            },
            mailbox,
            tokio::runtime::Handle::current(),
        );
        let send = |index| {
            let mut m = RaftMessage {
                from: 1,
                to: 2,
                index,
                ..Default::default()
            };
            m.set_msg_type(MessageType::MsgHeartbeat);
            transport.send(vec![m]);
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut index = 0;
        while peer.messages.lock().is_empty() && Instant::now() < deadline {
            index += 1;
            send(index);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let last = (index + 10).max(30);
        for i in index + 1..=last {
            send(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while peer.messages.lock().last() != Some(&last) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (peer, last)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_to_a_peer_share_one_stream_in_order() {
        let (peer, last) = deliver_to(Recorder {
            streams: true,
            ..Default::default()
        })
        .await;
        assert_eq!(*peer.messages.lock(), (1..=last).collect::<Vec<u64>>());
        assert_eq!(*peer.stream_calls.lock(), 1, "one stream for every batch");
        assert_eq!(*peer.unary_calls.lock(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_without_the_stream_gets_every_batch_by_unary_calls() {
        let (peer, last) = deliver_to(Recorder::default()).await;
        // What went on the stream before the peer's refusal came back is lost, as on a
        // broken link (raft-rs resends); everything after arrives, in order.
        let got = peer.messages.lock().clone();
        assert!(got.len() >= 11, "{got:?}");
        assert_eq!(
            got[..],
            (last + 1 - got.len() as u64..=last).collect::<Vec<u64>>()[..]
        );
        assert_eq!(*peer.stream_calls.lock(), 0);
        assert!(*peer.unary_calls.lock() >= 2, "batches went one call each");
    }
}
