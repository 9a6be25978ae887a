//! One Raft replica: a dedicated thread running raft-rs's Ready loop over a [`LogStore`],
//! applying committed commands to the [`ClusterState`] and answering proposers.
//!
//! The loop follows the crate's documented order: send messages, install a snapshot,
//! apply committed entries, append new entries, save the hard state, `sync`, send the
//! messages that needed persistence, `advance`. Many proposals are drained from the mailbox
//! before each Ready, so a burst of client writes costs one append and one sync.
//!
//! Proposals are matched to their entries by a (node id, sequence) tag in the entry's
//! context, never by position. A follower may propose (raft-rs forwards to the leader);
//! when the term changes or a proposal times out its caller gets an error and retries with
//! the same request id, which the state machine applies at most once.

use crate::storage::RaftStorage;
use crate::store::LogStore;
use gsched_state::{ClusterState, Command, DecodeError, Envelope, Outcome, SetControllerAddress};
use gsched_types::api::Role;
use parking_lot::RwLock;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, ConfState, EntryType, Message, MessageType, Snapshot,
};
use raft::{RawNode, StateRole};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Replica settings.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: u64,
    pub tick: Duration,
    /// A follower that heard from its leader within this many ticks refuses votes (the
    /// leader's lease); it campaigns itself after a random `election_ticks + 1` to
    /// `election_ticks + 2` ticks of silence, so when it does, the other followers (silent as
    /// long, within a tick) are already out of the lease and grant the vote at once.
    pub election_ticks: usize,
    /// The leader's heartbeat period in ticks. Idle, each heartbeat and its answer are
    /// most of what the controllers do (thread wake-ups and h2 frames on both ends), so
    /// it is as long as it can be while a follower still hears two within the shortest
    /// election timeout (`election_ticks + 1`).
    pub heartbeat_ticks: usize,
    /// Take a state snapshot (and compact the log) after this many applied entries, and
    /// no sooner than [`SNAPSHOT_DUTY`] times what the last one took to write after it: a
    /// snapshot costs time in proportion to the state, so a large one is taken less often.
    pub snapshot_every: u64,
    /// Entries kept behind a snapshot so slightly lagging followers need no snapshot.
    pub keep_tail: u64,
    pub proposal_timeout: Duration,
    /// Voters to start with when the store is empty; empty to join an existing cluster.
    pub bootstrap_voters: Vec<u64>,
}

impl NodeConfig {
    pub fn new(id: u64) -> NodeConfig {
        NodeConfig {
            id,
            tick: Duration::from_millis(50),
            election_ticks: 5,
            heartbeat_ticks: 3,
            snapshot_every: 5_000,
            keep_tail: 1_000,
            proposal_timeout: Duration::from_secs(4),
            bootstrap_voters: vec![id],
        }
    }
}

/// Where Raft messages go. The controller's gRPC transport implements it; tests use
/// channels.
pub trait Transport: Send + 'static {
    fn send(&self, msgs: Vec<Message>);
}

/// Why a proposal did not produce an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("no leader is known right now (election in progress)")]
    NoLeader,
    #[error("the proposal was dropped; retry")]
    Dropped,
    #[error("the proposal was not committed in time; retry")]
    Timeout,
    #[error("leadership changed before the proposal committed; retry")]
    LeadershipChanged,
    #[error("the replica has stopped")]
    Stopped,
    /// This replica cannot write its log; it keeps retrying and rejoins once it can.
    #[error(
        "this controller cannot write its data directory ({0}); it retries and rejoins once it can, and the other controllers keep serving"
    )]
    Storage(String),
    #[error("invalid membership change: {0}")]
    BadConfChange(String),
}

impl ProposeError {
    /// Whether the entry was certainly not appended to any log, so proposing it again
    /// cannot apply it twice.
    pub fn never_appended(&self) -> bool {
        matches!(self, ProposeError::NoLeader | ProposeError::Dropped)
    }
}

/// A membership change request.
#[derive(Debug, Clone)]
pub enum Membership {
    Add { id: u64, address: String },
    Remove { id: u64 },
}

/// Messages into the node thread.
pub enum Msg {
    Propose {
        data: Vec<u8>,
        reply: oneshot::Sender<Result<Outcome, ProposeError>>,
    },
    ChangeMembership {
        change: Membership,
        reply: oneshot::Sender<Result<Outcome, ProposeError>>,
    },
    Raft(Box<Message>),
    Unreachable(u64),
    SnapshotDone {
        to: u64,
        ok: bool,
    },
    TransferLeader(u64),
    /// The thread writing the state snapshot at `index` has finished (see
    /// [`Node::maybe_snapshot`]).
    SnapshotSerialised {
        index: u64,
    },
    /// Linearizable read barrier: replies with the read index once it is applied here.
    ReadIndex {
        reply: oneshot::Sender<Result<u64, ProposeError>>,
    },
    Shutdown,
}

/// What `gctl status` shows about a replica.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NodeStatus {
    pub id: u64,
    pub role: Role,
    pub term: u64,
    pub leader_id: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub first_index: u64,
    pub last_index: u64,
    pub snapshot_index: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Leader only: each peer's matched index.
    pub matched: Vec<(u64, u64)>,
    pub disk_bytes: u64,
    /// Why this replica is stopped and retrying (a full or failing data directory).
    pub storage_fault: Option<String>,
}

/// Applied state with the index it reflects, read together.
#[derive(Debug, Default)]
pub struct Replica {
    pub applied: u64,
    pub state: ClusterState,
}

/// The handle the rest of the controller uses.
#[derive(Clone)]
pub struct RaftHandle {
    tx: Sender<Msg>,
    pub replica: Arc<RwLock<Replica>>,
    pub status: watch::Receiver<NodeStatus>,
}

impl RaftHandle {
    /// Proposes a command and waits until it is applied on this replica.
    pub async fn propose(&self, env: &Envelope) -> Result<Outcome, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Propose {
                data: env.encode(),
                reply,
            })
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }

    /// Waits until this replica knows a leader, at most `timeout`; whether it does.
    pub async fn wait_for_leader(&self, timeout: Duration) -> bool {
        let mut status = self.status.clone();
        tokio::time::timeout(
            timeout,
            status.wait_for(|s| s.leader_id != raft::INVALID_ID),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    }

    pub async fn change_membership(&self, change: Membership) -> Result<Outcome, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::ChangeMembership { change, reply })
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }

    /// Waits until this replica has applied everything committed before the call (Raft
    /// ReadIndex, confirmed by a quorum), so a read after it sees every acknowledged write.
    pub async fn read_barrier(&self) -> Result<u64, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::ReadIndex { reply })
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }

    pub fn step(&self, msg: Message) {
        let _ = self.tx.send(Msg::Raft(Box::new(msg)));
    }

    pub fn sender(&self) -> Sender<Msg> {
        self.tx.clone()
    }

    pub fn shutdown(&self) {
        let _ = self.tx.send(Msg::Shutdown);
    }

    pub fn is_leader(&self) -> bool {
        self.status.borrow().role == Role::Leader
    }
}

fn role_of(r: StateRole) -> Role {
    match r {
        StateRole::Leader => Role::Leader,
        StateRole::Follower => Role::Follower,
        StateRole::Candidate => Role::Candidate,
        StateRole::PreCandidate => Role::PreCandidate,
    }
}

/// Proposal tag carried in an entry's context.
#[derive(Serialize, serde::Deserialize)]
struct Tag {
    node: u64,
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    address: Option<String>,
}

struct Pending {
    since: Instant,
    term: u64,
    reply: oneshot::Sender<Result<Outcome, ProposeError>>,
}

/// Errors that stop a replica.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("storage: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("snapshot state is unreadable: {0}")]
    Snapshot(String),
    #[error(
        "committed membership change at log index {index} cannot be read ({why}): this replica stops rather than guess the membership; restore its data directory from a healthy replica's snapshot"
    )]
    ConfChange { index: u64, why: String },
    #[error("{0}")]
    NewerLog(String),
}

/// Starts a replica on its own thread.
pub fn start<S: LogStore, T: Transport>(
    cfg: NodeConfig,
    store: S,
    transport: T,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
) -> Result<(RaftHandle, std::thread::JoinHandle<()>), NodeError> {
    start_supervised(cfg, store, None, transport, tx, rx)
}

/// How often a replica whose store failed asks whether it can write again.
pub const STORAGE_FAULT_PAUSE: Duration = Duration::from_secs(3);

/// What a replica does after a storage fault: `writable` says whether the data
/// directory takes writes again (a full disk has room); `restart` then starts the process
/// again (gctld re-executes itself: the store's files and locks can only be let go that
/// way, as sled cannot be closed after a failed write).
pub struct StorageRecovery {
    pub writable: Box<dyn Fn() -> bool + Send>,
    pub restart: Box<dyn FnOnce(&str) + Send>,
}

/// Starts a replica that outlives a storage fault (a full disk, an I/O error): it stops
/// taking part in Raft and answers every request with [`ProposeError::Storage`] (its
/// status names the fault) until its data directory can be written again, checked every
/// [`STORAGE_FAULT_PAUSE`]; then it restarts through `recovery` and starts again from
/// what is on disk. Without `recovery`, a storage fault stops the replica for good.
pub fn start_supervised<S: LogStore, T: Transport>(
    cfg: NodeConfig,
    store: S,
    recovery: Option<StorageRecovery>,
    transport: T,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
) -> Result<(RaftHandle, std::thread::JoinHandle<()>), NodeError> {
    let replica = Arc::new(RwLock::new(Replica::default()));
    let (status_tx, status_rx) = watch::channel(NodeStatus::default());
    let node = Node::build(
        cfg.clone(),
        store,
        transport,
        replica.clone(),
        status_tx,
        tx.clone(),
    )
    .map_err(|(e, _)| e)?;
    let handle = RaftHandle {
        tx,
        replica,
        status: status_rx,
    };
    let thread = std::thread::Builder::new()
        .name(format!("raft-{}", cfg.id))
        .spawn(move || supervise(node, recovery, &rx))
        .expect("spawn raft thread");
    Ok((handle, thread))
}

/// Runs `node` until it stops; on a storage fault, refuses requests until the data
/// directory can be written again, then hands over to `recovery`.
fn supervise<S: LogStore, T: Transport>(
    mut node: Node<S, T>,
    recovery: Option<StorageRecovery>,
    rx: &Receiver<Msg>,
) {
    let err = match node.run(rx) {
        Ok(()) => {
            node.fail_all(ProposeError::Stopped);
            return;
        }
        Err(e) => e,
    };
    let (Some(recovery), NodeError::Store(_)) = (recovery, &err) else {
        tracing::error!("raft replica {} stopped: {err}", node.cfg.id);
        node.fail_all(ProposeError::Stopped);
        return;
    };
    let fault = err.to_string();
    tracing::error!(
        "raft replica {} cannot write its data directory: {fault}; it answers no requests and restarts once it can write there again (checked every {} s)",
        node.cfg.id,
        STORAGE_FAULT_PAUSE.as_secs()
    );
    node.fail_all(ProposeError::Storage(fault.clone()));
    let mut status = node.status_tx.borrow().clone();
    status.role = Role::Follower;
    status.leader_id = 0;
    status.storage_fault = Some(fault.clone());
    let _ = node.status_tx.send(status);
    loop {
        if !refuse_until(rx, &fault, Instant::now() + STORAGE_FAULT_PAUSE) {
            break;
        }
        if (recovery.writable)() {
            (recovery.restart)(&fault);
            break;
        }
    }
    // A store whose write failed may never finish closing: leave it open.
    std::mem::forget(node);
}

/// Answers every request with a storage error until `until`; false on shutdown.
fn refuse_until(rx: &Receiver<Msg>, fault: &str, until: Instant) -> bool {
    let err = || ProposeError::Storage(fault.to_string());
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        match rx.recv_timeout(left) {
            Ok(Msg::Propose { reply, .. }) | Ok(Msg::ChangeMembership { reply, .. }) => {
                let _ = reply.send(Err(err()));
            }
            Ok(Msg::ReadIndex { reply }) => {
                let _ = reply.send(Err(err()));
            }
            Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => return false,
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// A snapshot thread is busy at most about one part in this many of the time.
pub const SNAPSHOT_DUTY: u32 = 20;

/// The state as of `index` being serialised, with what its snapshot records beside it.
struct Serialising {
    index: u64,
    conf: ConfState,
    began: Instant,
    thread: std::thread::JoinHandle<Vec<u8>>,
}

struct Node<S: LogStore, T: Transport> {
    cfg: NodeConfig,
    raw: RawNode<RaftStorage<S>>,
    transport: T,
    replica: Arc<RwLock<Replica>>,
    status_tx: watch::Sender<NodeStatus>,
    pending: HashMap<u64, Pending>,
    /// Read-index requests sent to raft-rs, by context.
    reads: HashMap<u64, (Instant, oneshot::Sender<Result<u64, ProposeError>>)>,
    /// Reads whose index is known, waiting for it to be applied.
    reads_ready: Vec<(u64, oneshot::Sender<Result<u64, ProposeError>>)>,
    seq: u64,
    last_snapshot: u64,
    /// When the last snapshot was saved and how long writing it took.
    snapshot_done: (Instant, Duration),
    /// A snapshot being serialised on a thread of its own.
    serialising: Option<Serialising>,
    /// A controller was added while the log still starts at its first entry: snapshot
    /// now (see [`Node::snapshot_for_joiner`]).
    joiner_needs_snapshot: bool,
    /// For the snapshot thread to say it has finished.
    mailbox: Sender<Msg>,
    term: u64,
    /// The store's size on disk and when it was measured (a file-system query, so not on
    /// every Ready).
    disk_bytes: (Instant, u64),
}

impl<S: LogStore, T: Transport> Node<S, T> {
    /// A replica over `store` (bootstrapped when empty), publishing into `replica` and
    /// `status_tx`; on failure the transport comes back for the next attempt.
    #[allow(clippy::result_large_err)]
    fn build(
        cfg: NodeConfig,
        mut store: S,
        transport: T,
        replica: Arc<RwLock<Replica>>,
        status_tx: watch::Sender<NodeStatus>,
        mailbox: Sender<Msg>,
    ) -> Result<Node<S, T>, (NodeError, T)> {
        let prepared = (|| -> Result<(S, u64, ClusterState, raft::Config), NodeError> {
            let fresh = store.hard_state() == Default::default()
                && store.conf_state().voters.is_empty()
                && store.snapshot()?.get_metadata().index == 0;
            if fresh && !cfg.bootstrap_voters.is_empty() {
                let cs = ConfState {
                    voters: cfg.bootstrap_voters.clone(),
                    ..Default::default()
                };
                store.set_conf_state(&cs)?;
                store.sync()?;
            }
            let snap = store.snapshot()?;
            let snap_index = snap.get_metadata().index;
            let state = if snap_index > 0 {
                ClusterState::from_snapshot(&snap.data)
                    .map_err(|e| NodeError::Snapshot(e.to_string()))?
            } else {
                ClusterState::default()
            };
            let mut hs = store.hard_state();
            if hs.commit < snap_index {
                hs.commit = snap_index;
                store.set_hard_state(&hs)?;
                store.sync()?;
            }
            let raft_cfg = raft::Config {
                id: cfg.id,
                election_tick: cfg.election_ticks,
                min_election_tick: cfg.election_ticks + 1,
                max_election_tick: cfg.election_ticks + 3,
                heartbeat_tick: cfg.heartbeat_ticks,
                applied: snap_index,
                max_size_per_msg: 1024 * 1024,
                max_inflight_msgs: 256,
                check_quorum: true,
                pre_vote: true,
                ..Default::default()
            };
            raft_cfg.validate()?;
            Ok((store, snap_index, state, raft_cfg))
        })();
        let (store, snap_index, state, raft_cfg) = match prepared {
            Ok(p) => p,
            Err(e) => return Err((e, transport)),
        };
        let raw = match RawNode::new(
            &raft_cfg,
            RaftStorage { store },
            &crate::logger::raft_logger(),
        ) {
            Ok(raw) => raw,
            Err(e) => return Err((e.into(), transport)),
        };
        *replica.write() = Replica {
            applied: snap_index,
            state,
        };
        Ok(Node {
            cfg,
            raw,
            transport,
            replica,
            status_tx,
            pending: HashMap::new(),
            reads: HashMap::new(),
            reads_ready: Vec::new(),
            seq: 0,
            last_snapshot: snap_index,
            joiner_needs_snapshot: false,
            snapshot_done: (Instant::now(), Duration::ZERO),
            serialising: None,
            mailbox,
            term: 0,
            disk_bytes: (Instant::now(), 0),
        })
    }

    fn run(&mut self, rx: &Receiver<Msg>) -> Result<(), NodeError> {
        let tick = self.cfg.tick;
        let mut last_tick = Instant::now();
        self.publish_status();
        loop {
            // Sleep through the ticks that can change nothing (an idle follower until its
            // election timeout, a leader until its next heartbeat), then count them.
            let budget = self.ticks_until_due();
            let wait = (tick * budget).saturating_sub(last_tick.elapsed());
            let received = rx.recv_timeout(wait);
            let elapsed = (last_tick.elapsed().as_nanos() / tick.as_nanos().max(1)) as u32;
            if elapsed > 0 {
                // Time spent busy rather than waiting is not caught up: as with one tick
                // per wake, a long stall does not fire an election over queued heartbeats.
                for _ in 0..elapsed.min(budget) {
                    self.raw.tick();
                }
                last_tick = if elapsed > budget {
                    Instant::now()
                } else {
                    last_tick + tick * elapsed
                };
                self.expire_pending();
            }
            match received {
                Ok(msg) => {
                    if !self.handle(msg)? {
                        return Ok(());
                    }
                    // Batch: take whatever else is already queued before the next Ready.
                    for _ in 0..8192 {
                        match rx.try_recv() {
                            Ok(msg) => {
                                if !self.handle(msg)? {
                                    return Ok(());
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            self.on_ready()?;
        }
    }

    /// Ticks from the last one until a tick can act: a leader's next heartbeat or quorum
    /// check, a follower's or candidate's election timeout; 1 while proposals or reads
    /// wait (they expire by the tick).
    fn ticks_until_due(&self) -> u32 {
        if !self.pending.is_empty() || !self.reads.is_empty() {
            return 1;
        }
        let r = &self.raw.raft;
        let left = match r.state {
            StateRole::Leader => (r.heartbeat_timeout().saturating_sub(r.heartbeat_elapsed()))
                .min(r.election_timeout().saturating_sub(r.election_elapsed)),
            _ => r
                .randomized_election_timeout()
                .saturating_sub(r.election_elapsed),
        };
        left.clamp(1, 64) as u32
    }

    fn next_tag(&mut self, address: Option<String>) -> (u64, Vec<u8>) {
        self.seq += 1;
        let tag = Tag {
            node: self.cfg.id,
            seq: self.seq,
            address,
        };
        (self.seq, serde_json::to_vec(&tag).expect("tag encodes"))
    }

    /// One message from the node's inbox; `false` when it asks the node to stop.
    fn handle(&mut self, msg: Msg) -> Result<bool, NodeError> {
        match msg {
            Msg::Propose { data, reply } => self.propose(data, reply),
            Msg::ChangeMembership { change, reply } => self.change_membership(change, reply),
            Msg::Raft(m) => {
                if let Err(e) = self.raw.step(*m) {
                    tracing::debug!("raft step: {e}");
                }
            }
            Msg::Unreachable(id) => self.raw.report_unreachable(id),
            Msg::SnapshotDone { to, ok } => {
                let status = if ok {
                    raft::SnapshotStatus::Finish
                } else {
                    raft::SnapshotStatus::Failure
                };
                self.raw.report_snapshot(to, status);
            }
            Msg::TransferLeader(to) => self.raw.transfer_leader(to),
            Msg::SnapshotSerialised { index } => self.finish_snapshot(index)?,
            Msg::ReadIndex { reply } => self.read_index(reply),
            Msg::Shutdown => return Ok(false),
        }
        Ok(true)
    }

    /// Appends an entry, answered once it is applied (or refused at once without a leader).
    fn propose(&mut self, data: Vec<u8>, reply: oneshot::Sender<Result<Outcome, ProposeError>>) {
        if self.raw.raft.leader_id == raft::INVALID_ID {
            let _ = reply.send(Err(ProposeError::NoLeader));
            return;
        }
        let (seq, ctx) = self.next_tag(None);
        match self.raw.propose(ctx, data) {
            Ok(()) => self.await_entry(seq, reply),
            Err(_) => {
                let _ = reply.send(Err(ProposeError::Dropped));
            }
        }
    }

    /// Proposes a membership change on the leader, one at a time, refusing one that
    /// names a member to add or a stranger (or the last member) to remove.
    fn change_membership(
        &mut self,
        change: Membership,
        reply: oneshot::Sender<Result<Outcome, ProposeError>>,
    ) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NoLeader));
            return;
        }
        let voters: Vec<u64> = self.raw.raft.prs().conf().voters().ids().iter().collect();
        if let Some(why) = membership_refusal(&voters, &change) {
            let _ = reply.send(Err(ProposeError::BadConfChange(why)));
            return;
        }
        let mut cc = ConfChange::default();
        let address = match &change {
            Membership::Add { id, address } => {
                cc.node_id = *id;
                cc.set_change_type(ConfChangeType::AddNode);
                Some(address.clone())
            }
            Membership::Remove { id } => {
                cc.node_id = *id;
                cc.set_change_type(ConfChangeType::RemoveNode);
                None
            }
        };
        let (seq, ctx) = self.next_tag(address);
        match self.raw.propose_conf_change(ctx, cc) {
            Ok(()) => self.await_entry(seq, reply),
            Err(e) => {
                let _ = reply.send(Err(ProposeError::BadConfChange(format!(
                    "{e} (one change at a time: wait for the previous one to commit)"
                ))));
            }
        }
    }

    /// Keeps `reply` until the entry tagged `seq` is applied (or its term ends).
    fn await_entry(&mut self, seq: u64, reply: oneshot::Sender<Result<Outcome, ProposeError>>) {
        self.pending.insert(
            seq,
            Pending {
                since: Instant::now(),
                term: self.raw.raft.term,
                reply,
            },
        );
    }

    /// Asks the leader to confirm it still leads; answered with the index to read at.
    fn read_index(&mut self, reply: oneshot::Sender<Result<u64, ProposeError>>) {
        if self.raw.raft.leader_id == raft::INVALID_ID {
            let _ = reply.send(Err(ProposeError::NoLeader));
            return;
        }
        self.seq += 1;
        self.raw.read_index(self.seq.to_be_bytes().to_vec());
        self.reads.insert(self.seq, (Instant::now(), reply));
    }

    fn expire_pending(&mut self) {
        // raft-rs drops read-index requests a new leader cannot serve yet; callers retry.
        let stale: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, (t, _))| t.elapsed() > Duration::from_millis(300))
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            if let Some((_, reply)) = self.reads.remove(&k) {
                let _ = reply.send(Err(ProposeError::Timeout));
            }
        }
        let timeout = self.cfg.proposal_timeout;
        let term = self.raw.raft.term;
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.since.elapsed() > timeout || p.term != term)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            if let Some(p) = self.pending.remove(&k) {
                let err = if p.term != term {
                    ProposeError::LeadershipChanged
                } else {
                    ProposeError::Timeout
                };
                let _ = p.reply.send(Err(err));
            }
        }
    }

    fn fail_all(&mut self, err: ProposeError) {
        for (_, p) in self.pending.drain() {
            let _ = p.reply.send(Err(err.clone()));
        }
    }

    fn on_ready(&mut self) -> Result<(), NodeError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        if !ready.messages().is_empty() {
            self.transport.send(ready.take_messages());
        }
        if *ready.snapshot() != Snapshot::default() {
            let snap = ready.snapshot().clone();
            self.install_snapshot(&snap)?;
        }
        for rs in ready.take_read_states() {
            let key = rs
                .request_ctx
                .as_slice()
                .try_into()
                .map(u64::from_be_bytes)
                .unwrap_or(0);
            if let Some((_, reply)) = self.reads.remove(&key) {
                self.reads_ready.push((rs.index, reply));
            }
        }
        let committed = ready.take_committed_entries();
        self.apply(committed)?;
        let store = &mut self.raw.mut_store().store;
        if !ready.entries().is_empty() {
            store.append(ready.entries())?;
        }
        if let Some(hs) = ready.hs() {
            store.set_hard_state(hs)?;
        }
        if ready.must_sync() || !ready.entries().is_empty() || ready.hs().is_some() {
            store.sync()?;
        }
        if !ready.persisted_messages().is_empty() {
            self.transport.send(ready.take_persisted_messages());
        }
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            let store = &mut self.raw.mut_store().store;
            let mut hs = store.hard_state();
            hs.commit = commit;
            store.set_hard_state(&hs)?;
        }
        if !light.messages().is_empty() {
            self.transport.send(light.take_messages());
        }
        self.apply(light.take_committed_entries())?;
        self.raw.advance_apply();
        let applied = self.raw.raft.raft_log.applied;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reads_ready)
            .into_iter()
            .partition(|(idx, _)| *idx <= applied);
        self.reads_ready = waiting;
        for (idx, reply) in done {
            let _ = reply.send(Ok(idx));
        }
        self.snapshot_for_joiner()?;
        self.maybe_snapshot()?;
        if self.raw.raft.term != self.term {
            self.term = self.raw.raft.term;
            self.expire_pending();
        }
        self.publish_status();
        Ok(())
    }

    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), NodeError> {
        // One of our own being written is older than the leader's: it is not saved.
        self.serialising = None;
        let index = snap.get_metadata().index;
        let state = ClusterState::from_snapshot(&snap.data)
            .map_err(|e| NodeError::Snapshot(e.to_string()))?;
        self.raw.mut_store().store.install_snapshot(snap)?;
        self.raw.mut_store().store.sync()?;
        let mut r = self.replica.write();
        r.state = state;
        r.applied = index;
        self.last_snapshot = index;
        tracing::info!(
            "replica {} installed snapshot at index {index}",
            self.cfg.id
        );
        Ok(())
    }

    fn apply(&mut self, entries: Vec<raft::eraftpb::Entry>) -> Result<(), NodeError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut replies = Vec::new();
        {
            let mut r = self.replica.write();
            for entry in entries {
                let tag: Option<Tag> = serde_json::from_slice(&entry.context).ok();
                let mine = tag.as_ref().is_some_and(|t| t.node == self.cfg.id);
                match entry.get_entry_type() {
                    // A leader's empty entry: nothing to apply.
                    EntryType::EntryNormal if entry.data.is_empty() => {}
                    EntryType::EntryNormal => {
                        let outcome = match Envelope::decode(&entry.data) {
                            Ok(env) => r.state.apply(&env),
                            // Applying it wrong would diverge from upgraded replicas.
                            Err(e @ DecodeError::TooNew(_)) => {
                                return Err(NodeError::NewerLog(format!(
                                    "committed log entry {}: {e}",
                                    entry.index
                                )));
                            }
                            // Every replica decodes the same bytes the same way, so all
                            // of them skip it alike.
                            Err(e) => {
                                tracing::error!(
                                    "committed log entry {} is not a gsched command and is skipped: {e}",
                                    entry.index
                                );
                                Outcome::Rejected {
                                    message: format!("log entry {} does not decode", entry.index),
                                }
                            }
                        };
                        if mine {
                            replies.push((tag.expect("mine").seq, outcome));
                        }
                    }
                    kind @ (EntryType::EntryConfChange | EntryType::EntryConfChangeV2) => {
                        let unreadable = |e: protobuf::ProtobufError| NodeError::ConfChange {
                            index: entry.index,
                            why: e.to_string(),
                        };
                        // gsched proposes single changes (V1); a V2 entry (joint changes,
                        // from another raft-rs user of the log) is applied all the same.
                        let (cs, changes) = if kind == EntryType::EntryConfChange {
                            let cc =
                                ConfChange::parse_from_bytes(&entry.data).map_err(unreadable)?;
                            let cs = self.raw.apply_conf_change(&cc)?;
                            (cs, vec![(cc.get_change_type(), cc.node_id)])
                        } else {
                            let cc =
                                ConfChangeV2::parse_from_bytes(&entry.data).map_err(unreadable)?;
                            let cs = self.raw.apply_conf_change(&cc)?;
                            let changes = cc
                                .get_changes()
                                .iter()
                                .map(|c| (c.get_change_type(), c.node_id))
                                .collect();
                            (cs, changes)
                        };
                        self.raw.mut_store().store.set_conf_state(&cs)?;
                        let added = changes
                            .iter()
                            .any(|(t, _)| *t != ConfChangeType::RemoveNode);
                        if added && self.raw.store().store.first_index() <= 1 {
                            self.joiner_needs_snapshot = true;
                        }
                        let at = r.state.clock_ms;
                        for (change_type, id) in changes {
                            let address = match change_type {
                                ConfChangeType::RemoveNode => None,
                                _ => tag.as_ref().and_then(|t| t.address.clone()),
                            };
                            r.state.apply(&Envelope::new(
                                Command::SetControllerAddress(SetControllerAddress { id, address }),
                                at,
                                None,
                            ));
                        }
                        tracing::info!(
                            "replica {}: membership now voters={:?}",
                            self.cfg.id,
                            cs.voters
                        );
                        if mine {
                            replies.push((tag.expect("mine").seq, Outcome::Ok));
                        }
                    }
                }
                // Only now: an entry this build cannot apply (a newer format, a
                // membership change it cannot read) stops the replica above without
                // being counted, so no read waiting for its index is answered from a
                // state that lacks it.
                r.applied = entry.index;
            }
        }
        for (seq, outcome) in replies {
            if let Some(p) = self.pending.remove(&seq) {
                let _ = p.reply.send(Ok(outcome));
            }
        }
        Ok(())
    }

    /// A controller that joins starts with no membership and learns it from what the
    /// leader sends: a snapshot carries it whole, but entries from the log's first one
    /// carry only the changes since bootstrap (the founding members were set then and are
    /// in no entry), from which the joiner would count itself the only member and could
    /// elect itself. So once a controller is added while the log still starts at its
    /// first entry, the state is snapshotted at once (with the membership that names the
    /// joiner, as raft-rs requires of a snapshot it installs) and the log compacted past
    /// that entry, before the joiner can ask for entries: it is sent the snapshot.
    fn snapshot_for_joiner(&mut self) -> Result<(), NodeError> {
        if !std::mem::take(&mut self.joiner_needs_snapshot) {
            return Ok(());
        }
        let applied = self.raw.raft.raft_log.applied;
        // One being written on its thread is older than this one: it is not saved.
        self.serialising = None;
        let began = Instant::now();
        let conf = self.raw.store().store.conf_state();
        let data = self.replica.read().state.to_snapshot();
        let first = applied
            .saturating_sub(self.cfg.keep_tail)
            .saturating_add(1)
            .clamp(2, applied + 1);
        self.save_snapshot_from(applied, &conf, data, began.elapsed(), first)
    }

    /// Starts a snapshot once enough entries were applied since the last one: a copy of
    /// the state (jobs, payloads and outcomes shared with the live one, copied on write)
    /// is serialised on a thread of its own, so this one goes on applying and exchanging
    /// messages, heartbeats included, however large the queue.
    fn maybe_snapshot(&mut self) -> Result<(), NodeError> {
        let applied = self.raw.raft.raft_log.applied;
        let (done, took) = self.snapshot_done;
        if self.serialising.is_some()
            || applied < self.last_snapshot + self.cfg.snapshot_every
            || done.elapsed() < took * SNAPSHOT_DUTY
        {
            return Ok(());
        }
        let began = Instant::now();
        let frozen = {
            let r = self.replica.read();
            debug_assert_eq!(r.applied, applied);
            r.state.clone()
        };
        let conf = self.raw.store().store.conf_state();
        let mailbox = self.mailbox.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("snapshot-{}", self.cfg.id))
            .spawn(move || {
                let data = frozen.to_snapshot();
                let _ = mailbox.send(Msg::SnapshotSerialised { index: applied });
                data
            });
        match spawned {
            Ok(thread) => {
                self.serialising = Some(Serialising {
                    index: applied,
                    conf,
                    began,
                    thread,
                });
            }
            Err(e) => {
                tracing::warn!("no thread for the snapshot ({e}); writing it on this one");
                let data = self.replica.read().state.to_snapshot();
                self.save_snapshot(applied, &conf, data, began.elapsed())?;
            }
        }
        Ok(())
    }

    /// Saves the snapshot at `index` its thread has written (the message comes just before
    /// the thread returns, so joining it waits no longer than that).
    fn finish_snapshot(&mut self, index: u64) -> Result<(), NodeError> {
        let Some(s) = self.serialising.take_if(|s| s.index == index) else {
            return Ok(());
        };
        let data = s
            .thread
            .join()
            .map_err(|_| NodeError::Snapshot("the thread serialising the state panicked".into()))?;
        self.save_snapshot(s.index, &s.conf, data, s.began.elapsed())
    }

    /// Stores the state as of `index` (serialised into `data`, which took `took`, with
    /// membership `conf`) and compacts the log behind it, keeping `keep_tail` entries.
    fn save_snapshot(
        &mut self,
        index: u64,
        conf: &ConfState,
        data: Vec<u8>,
        took: Duration,
    ) -> Result<(), NodeError> {
        let first = index.saturating_sub(self.cfg.keep_tail) + 1;
        self.save_snapshot_from(index, conf, data, took, first)
    }

    /// As [`Node::save_snapshot`], keeping the log from index `first` on.
    fn save_snapshot_from(
        &mut self,
        index: u64,
        conf: &ConfState,
        data: Vec<u8>,
        took: Duration,
        first: u64,
    ) -> Result<(), NodeError> {
        let store = &mut self.raw.mut_store().store;
        let term = store.term(index)?;
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = index;
        snap.mut_metadata().term = term;
        snap.mut_metadata().set_conf_state(conf.clone());
        snap.data = data.into();
        let mut hs = store.hard_state();
        hs.commit = hs.commit.max(index);
        store.set_hard_state(&hs)?;
        store.save_snapshot(&snap, first)?;
        store.sync()?;
        self.last_snapshot = index;
        self.snapshot_done = (Instant::now(), took);
        tracing::debug!("replica {} snapshot at {index} in {took:?}", self.cfg.id);
        Ok(())
    }

    fn publish_status(&mut self) {
        if self.disk_bytes.1 == 0 || self.disk_bytes.0.elapsed() > Duration::from_secs(1) {
            self.disk_bytes = (Instant::now(), self.raw.store().store.disk_bytes());
        }
        let raft = &self.raw.raft;
        let store = &self.raw.store().store;
        let conf = raft.prs().conf();
        let matched = if raft.state == StateRole::Leader {
            raft.prs().iter().map(|(id, p)| (*id, p.matched)).collect()
        } else {
            Vec::new()
        };
        let mut voters: Vec<u64> = conf.voters().ids().iter().collect();
        voters.sort_unstable();
        let mut learners: Vec<u64> = conf.learners().iter().copied().collect();
        learners.sort_unstable();
        let status = NodeStatus {
            id: self.cfg.id,
            role: role_of(raft.state),
            term: raft.term,
            leader_id: raft.leader_id,
            commit_index: raft.raft_log.committed,
            applied_index: raft.raft_log.applied,
            first_index: store.first_index(),
            last_index: store.last_index(),
            snapshot_index: self.last_snapshot,
            voters,
            learners,
            matched,
            disk_bytes: self.disk_bytes.1,
            storage_fault: None,
        };
        self.status_tx.send_if_modified(|old| {
            if *old == status {
                false
            } else {
                *old = status;
                true
            }
        });
    }
}

/// Is this message a snapshot (the transport streams those in chunks)?
pub fn is_snapshot(m: &Message) -> bool {
    m.get_msg_type() == MessageType::MsgSnapshot
}

/// Why `change` cannot be made to a group of `voters`: adding a member, removing a
/// stranger or the last member.
fn membership_refusal(voters: &[u64], change: &Membership) -> Option<String> {
    match change {
        Membership::Remove { id } if !voters.contains(id) => {
            Some(format!("controller {id} is not a member"))
        }
        Membership::Remove { .. } if voters.len() == 1 => {
            Some("cannot remove the last controller".into())
        }
        Membership::Add { id, .. } if voters.contains(id) => {
            Some(format!("controller {id} is already a member"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_membership_change_is_refused_for_what_it_names() {
        let add = |id| Membership::Add {
            id,
            address: "127.0.0.1:1".into(),
        };
        let remove = |id| Membership::Remove { id };
        assert_eq!(membership_refusal(&[1, 2, 3], &add(4)), None);
        assert_eq!(membership_refusal(&[1, 2, 3], &remove(3)), None);
        assert_eq!(
            membership_refusal(&[1, 2, 3], &add(2)).as_deref(),
            Some("controller 2 is already a member")
        );
        assert_eq!(
            membership_refusal(&[1, 2, 3], &remove(9)).as_deref(),
            Some("controller 9 is not a member")
        );
        assert_eq!(
            membership_refusal(&[1], &remove(1)).as_deref(),
            Some("cannot remove the last controller")
        );
    }
}
