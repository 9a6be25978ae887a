//! Replicas over an in-process channel transport with fault injection: election,
//! replication to every replica, failover that loses no acknowledged write, a partitioned
//! leader that cannot commit, snapshots that bring a lagging follower back, and the storage
//! conformance suite against sled.

use gsched_raft::{Membership, Msg, NodeConfig, ProposeError, RaftHandle, SledStore, Transport};
use gsched_state::{Command, Envelope, Outcome, SubmitJob};
use gsched_types::api::Role;
use gsched_types::job::JobSpec;
use parking_lot::Mutex;
use raft::eraftpb::Message;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Net {
    peers: HashMap<u64, Sender<Msg>>,
    /// Directed links that drop everything.
    cut: HashSet<(u64, u64)>,
}

#[derive(Clone)]
struct ChannelTransport {
    from: u64,
    net: Arc<Mutex<Net>>,
}

impl Transport for ChannelTransport {
    fn send(&self, msgs: Vec<Message>) {
        let net = self.net.lock();
        for m in msgs {
            if net.cut.contains(&(self.from, m.to)) {
                continue;
            }
            if let Some(tx) = net.peers.get(&m.to) {
                let is_snap = gsched_raft::node::is_snapshot(&m);
                let to = m.to;
                let _ = tx.send(Msg::Raft(Box::new(m)));
                if is_snap && let Some(me) = net.peers.get(&self.from) {
                    let _ = me.send(Msg::SnapshotDone { to, ok: true });
                }
            }
        }
    }
}

struct Cluster {
    net: Arc<Mutex<Net>>,
    dirs: HashMap<u64, tempfile::TempDir>,
    nodes: HashMap<u64, (RaftHandle, std::thread::JoinHandle<()>)>,
    voters: Vec<u64>,
    snapshot_every: u64,
    tick: Duration,
    election_ticks: usize,
}

impl Cluster {
    fn new(n: u64, snapshot_every: u64) -> Cluster {
        let ticks = NodeConfig::new(1).election_ticks;
        Cluster::with_timing(n, snapshot_every, Duration::from_millis(20), ticks)
    }

    /// A cluster whose replicas tick every `tick` and campaign after `election_ticks + 1`
    /// to `election_ticks + 3` ticks of silence.
    fn with_timing(n: u64, snapshot_every: u64, tick: Duration, election_ticks: usize) -> Cluster {
        let mut c = Cluster {
            tick,
            election_ticks,
            net: Default::default(),
            dirs: HashMap::new(),
            nodes: HashMap::new(),
            voters: (1..=n).collect(),
            snapshot_every,
        };
        for id in 1..=n {
            c.dirs.insert(id, tempfile::tempdir().unwrap());
            c.start(id);
        }
        c
    }

    fn start(&mut self, id: u64) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.net.lock().peers.insert(id, tx.clone());
        let mut cfg = NodeConfig::new(id);
        cfg.tick = self.tick;
        cfg.election_ticks = self.election_ticks;
        cfg.bootstrap_voters = self.voters.clone();
        cfg.snapshot_every = self.snapshot_every;
        cfg.keep_tail = 5;
        cfg.proposal_timeout = Duration::from_secs(2);
        let store = SledStore::open(self.dirs[&id].path()).unwrap();
        let (handle, thread) = gsched_raft::start(
            cfg,
            store,
            ChannelTransport {
                from: id,
                net: self.net.clone(),
            },
            tx,
            rx,
        )
        .unwrap();
        self.nodes.insert(id, (handle, thread));
    }

    fn stop(&mut self, id: u64) {
        if let Some((h, t)) = self.nodes.remove(&id) {
            self.net.lock().peers.remove(&id);
            h.shutdown();
            t.join().unwrap();
        }
    }

    fn leader(&self, timeout: Duration) -> u64 {
        let start = Instant::now();
        loop {
            for (id, (h, _)) in &self.nodes {
                let s = h.status.borrow().clone();
                if s.role == Role::Leader
                    && !self
                        .net
                        .lock()
                        .cut
                        .contains(&(*id, *self.voters.iter().find(|v| *v != id).unwrap_or(id)))
                {
                    return *id;
                }
            }
            assert!(start.elapsed() < timeout, "no leader within {timeout:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn handle(&self, id: u64) -> &RaftHandle {
        &self.nodes[&id].0
    }

    fn wait_applied_everywhere(&self, index: u64, timeout: Duration) {
        let start = Instant::now();
        while !self
            .nodes
            .values()
            .all(|(h, _)| h.replica.read().applied >= index)
        {
            assert!(
                start.elapsed() < timeout,
                "replicas did not reach index {index}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn submit_env(i: u64) -> Envelope {
    Envelope::new(
        Command::SubmitJob(SubmitJob {
            spec: JobSpec::simple(&format!("job{i}"), "alice", "true"),
        }),
        1000 + i,
        Some(format!("req-{i}")),
    )
}

/// Proposes through `node`, retrying transient errors with the same request id.
fn propose_retrying(rt: &tokio::runtime::Runtime, c: &Cluster, env: &Envelope) -> Outcome {
    let start = Instant::now();
    loop {
        let id = c.leader(Duration::from_secs(10));
        match rt.block_on(c.handle(id).propose(env)) {
            Ok(o) => return o,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "proposal kept failing: {e}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Changes the membership through whichever replica leads, again while leadership moves
/// (a loaded machine can delay a heartbeat past an election timeout); a change the
/// previous leader committed before it stepped down is the change done.
fn change_membership_retrying(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    change: Membership,
    done: impl Fn(&Cluster) -> bool,
) -> Result<Outcome, ProposeError> {
    let start = Instant::now();
    let mut tried = false;
    loop {
        let id = c.leader(Duration::from_secs(10));
        match rt.block_on(c.handle(id).change_membership(change.clone())) {
            Err(
                ProposeError::NoLeader
                | ProposeError::Dropped
                | ProposeError::Timeout
                | ProposeError::LeadershipChanged,
            ) if start.elapsed() < Duration::from_secs(20) => {
                tried = true;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(ProposeError::BadConfChange(_)) if tried && done(c) => {
                return Ok(Outcome::Ok);
            }
            other => return other,
        }
    }
}

#[test]
fn sled_store_conforms() {
    let dirs: Vec<tempfile::TempDir> = (0..9).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    let next = std::cell::Cell::new(0);
    gsched_raft::suite::run_all(
        || {
            let i = next.get();
            next.set(i + 1);
            SledStore::open(&paths[i]).unwrap()
        },
        &|s: SledStore| {
            drop(s);
            SledStore::open(&paths[next.get() - 1]).unwrap()
        },
    );
}

#[test]
fn three_replicas_elect_replicate_and_survive_leader_loss() {
    let rt = runtime();
    let mut c = Cluster::new(3, 1000);
    let mut acked = Vec::new();
    for i in 0..50 {
        if let Outcome::Submitted { jobs } = propose_retrying(&rt, &c, &submit_env(i)) {
            acked.extend(jobs);
        }
    }
    let leader = c.leader(Duration::from_secs(5));
    c.stop(leader);
    for i in 50..100 {
        if let Outcome::Submitted { jobs } = propose_retrying(&rt, &c, &submit_env(i)) {
            acked.extend(jobs);
        }
    }
    // Retrying an old request id returns the original outcome, not a new job.
    let again = propose_retrying(&rt, &c, &submit_env(3));
    assert_eq!(
        again,
        Outcome::Submitted {
            jobs: vec![acked[3]]
        }
    );
    c.start(leader);
    let new_leader = c.leader(Duration::from_secs(5));
    let target = c.handle(new_leader).replica.read().applied;
    c.wait_applied_everywhere(target, Duration::from_secs(10));
    let digests: HashSet<String> = c
        .nodes
        .values()
        .map(|(h, _)| h.replica.read().state.digest())
        .collect();
    assert_eq!(digests.len(), 1, "replicas disagree");
    let state = &c.handle(new_leader).replica.read().state;
    assert_eq!(
        state.jobs.len(),
        100,
        "every acknowledged job exists exactly once"
    );
    for id in &acked {
        assert!(state.jobs.contains_key(id));
    }
}

#[test]
fn isolated_leader_cannot_commit_and_majority_continues() {
    let rt = runtime();
    let c = Cluster::new(3, 1000);
    propose_retrying(&rt, &c, &submit_env(0));
    let old = c.leader(Duration::from_secs(5));
    {
        let mut net = c.net.lock();
        for other in [1, 2, 3] {
            if other != old {
                net.cut.insert((old, other));
                net.cut.insert((other, old));
            }
        }
    }
    // The minority side accepts no writes.
    let res = rt.block_on(c.handle(old).propose(&submit_env(1)));
    assert!(
        matches!(
            res,
            Err(ProposeError::Timeout
                | ProposeError::LeadershipChanged
                | ProposeError::NoLeader
                | ProposeError::Dropped)
        ),
        "{res:?}"
    );
    // The majority elects a new leader and commits.
    let start = Instant::now();
    let new = loop {
        let found = [1, 2, 3]
            .into_iter()
            .find(|id| *id != old && c.handle(*id).status.borrow().role == Role::Leader);
        if let Some(id) = found {
            break id;
        }
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = rt.block_on(c.handle(new).propose(&submit_env(2))).unwrap();
    assert!(matches!(out, Outcome::Submitted { .. }));
    assert_ne!(
        c.handle(old).status.borrow().role,
        Role::Leader,
        "check-quorum must depose the isolated leader"
    );
    let old_state = c.handle(old).replica.read().state.jobs.len();
    assert_eq!(old_state, 1, "the isolated replica applied nothing new");
}

#[test]
fn lagging_follower_catches_up_from_a_snapshot() {
    let rt = runtime();
    let mut c = Cluster::new(3, 20);
    propose_retrying(&rt, &c, &submit_env(0));
    let leader = c.leader(Duration::from_secs(5));
    let lagger = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    c.stop(lagger);
    for i in 1..120 {
        propose_retrying(&rt, &c, &submit_env(i));
    }
    let first = c.handle(leader).status.borrow().first_index;
    assert!(
        first > 20,
        "the leader compacted its log (first index {first})"
    );
    c.start(lagger);
    let target = c.handle(leader).replica.read().applied;
    c.wait_applied_everywhere(target, Duration::from_secs(10));
    assert_eq!(c.handle(lagger).replica.read().state.jobs.len(), 120);
    assert!(c.handle(lagger).status.borrow().snapshot_index > 0);
}

#[test]
fn membership_add_and_remove() {
    let rt = runtime();
    let mut c = Cluster::new(3, 1000);
    propose_retrying(&rt, &c, &submit_env(0));
    c.leader(Duration::from_secs(5));
    // A fourth replica joins empty and catches up.
    c.dirs.insert(4, tempfile::tempdir().unwrap());
    c.voters = vec![];
    c.start(4);
    let out = change_membership_retrying(
        &rt,
        &c,
        Membership::Add {
            id: 4,
            address: "127.0.0.1:4".into(),
        },
        |c| {
            c.handle(c.leader(Duration::from_secs(10)))
                .status
                .borrow()
                .voters
                .contains(&4)
        },
    )
    .unwrap();
    assert_eq!(out, Outcome::Ok);
    let leader = c.leader(Duration::from_secs(10));
    propose_retrying(&rt, &c, &submit_env(1));
    let target = c.handle(leader).replica.read().applied;
    c.wait_applied_everywhere(target, Duration::from_secs(10));
    assert_eq!(c.handle(4).replica.read().state.jobs.len(), 2);
    assert_eq!(c.handle(leader).status.borrow().voters, vec![1, 2, 3, 4]);
    // The joiner knows the founding members too (it was sent a snapshot, not the log from
    // its first entry, where they are not): counting itself alone, it could elect itself.
    assert_eq!(c.handle(4).status.borrow().voters, vec![1, 2, 3, 4]);
    assert!(c.handle(4).status.borrow().snapshot_index > 0);
    assert_eq!(
        c.handle(4)
            .replica
            .read()
            .state
            .controllers
            .get(&4)
            .map(String::as_str),
        Some("127.0.0.1:4")
    );
    let out = change_membership_retrying(&rt, &c, Membership::Remove { id: 4 }, |c| {
        !c.handle(c.leader(Duration::from_secs(10)))
            .status
            .borrow()
            .voters
            .contains(&4)
    })
    .unwrap();
    assert_eq!(out, Outcome::Ok);
    let leader = c.leader(Duration::from_secs(10));
    let bad = rt.block_on(
        c.handle(leader)
            .change_membership(Membership::Remove { id: 9 }),
    );
    assert!(matches!(bad, Err(ProposeError::BadConfChange(_))));
}

#[test]
fn a_leader_goes_on_committing_while_its_snapshot_is_written() {
    let rt = runtime();
    // Ticks of 100 ms, an election after 2.1-2.3 s without a heartbeat (sent every 300 ms):
    // a follower starved of CPU on a loaded two-core machine must miss seven in a row. With
    // the default 600-800 ms a run of the flake hunt with two builds beside it changed
    // leader. That the Raft thread is not held up by the snapshot is shown by the entries
    // applied while it was written (below), not by the timeout.
    let c = Cluster::with_timing(3, 20, Duration::from_millis(100), 20);
    let mut config = gsched_state::ClusterState::default().config;
    config.limits.max_array_size = 10_000;
    config.limits.max_job_count = 1_000_000;
    config.user_limits.max_queued_jobs = Some(1_000_000);
    propose_retrying(
        &rt,
        &c,
        &Envelope::new(
            Command::SetConfig(gsched_state::SetConfig {
                config: Box::new(config),
            }),
            1000,
            Some("config".into()),
        ),
    );
    // A state of 60,000 jobs in a handful of entries: serialising it takes a while.
    for a in 0..6 {
        let mut spec = JobSpec::simple(&format!("array{a}"), "alice", "true");
        spec.hold = true;
        spec.array = Some((0..10_000).collect());
        let env = Envelope::new(
            Command::SubmitJob(SubmitJob { spec }),
            2000 + a,
            Some(format!("array-{a}")),
        );
        assert!(matches!(
            propose_retrying(&rt, &c, &env),
            Outcome::Submitted { .. }
        ));
    }
    let leader = c.leader(Duration::from_secs(5));
    let status = c.handle(leader).status.clone();
    let term = status.borrow().term;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (status, stop) = (status.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut first_saved, mut terms) = (None, HashSet::new());
            // One last look after `stop`: the writer stops only once it saw the snapshot saved.
            loop {
                let stopping = stop.load(std::sync::atomic::Ordering::SeqCst);
                let s = status.borrow().clone();
                if s.snapshot_index > 0 && first_saved.is_none() {
                    first_saved = Some((s.snapshot_index, s.applied_index));
                }
                terms.insert(s.term);
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (first_saved, terms)
        })
    };
    // Writes from 8 clients at once past the snapshot threshold, until a snapshot is saved.
    let handle = c.handle(leader).clone();
    let mut i = 0;
    let started = Instant::now();
    while c.handle(leader).status.borrow().snapshot_index == 0 {
        let batch: Vec<_> = (0..8)
            .map(|_| {
                i += 1;
                let (h, env) = (handle.clone(), submit_env(i));
                // A slow (debug) build may time a proposal out: the client asks again.
                rt.spawn(async move {
                    loop {
                        match h.propose(&env).await {
                            Err(ProposeError::Timeout) => continue,
                            other => return other,
                        }
                    }
                })
            })
            .collect();
        for b in batch {
            let out = rt.block_on(b).unwrap();
            assert!(matches!(out, Ok(Outcome::Submitted { .. })), "{out:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "no snapshot was saved in 3 minutes ({i} entries)"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (first_saved, terms) = watcher.join().unwrap();
    let (at, applied) = first_saved.expect("the watcher saw the snapshot saved");
    assert!(
        applied > at,
        "entries were applied while the snapshot at {at} was written (applied {applied} when it was saved)"
    );
    assert_eq!(
        terms,
        HashSet::from([term]),
        "the leader kept its lease through the snapshot"
    );
    let target = c.handle(leader).replica.read().applied;
    c.wait_applied_everywhere(target, Duration::from_secs(30));
    for (h, _) in c.nodes.values() {
        assert_eq!(h.replica.read().state.jobs.len(), 60_000 + i as usize);
    }
}

#[test]
fn an_entry_of_a_newer_format_stops_the_replica_before_it_is_marked_applied() {
    let rt = runtime();
    let c = Cluster::new(1, 1000);
    propose_retrying(&rt, &c, &submit_env(0));
    let h = c.handle(c.leader(Duration::from_secs(5)));
    let applied = h.replica.read().applied;
    // An entry a newer build wrote: this build must not apply it, nor say it has.
    let mut newer = submit_env(1);
    newer.v = gsched_state::FORMAT_VERSION + 1;
    let out = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), h.propose(&newer)).await });
    assert!(
        matches!(out, Ok(Err(ProposeError::Stopped))),
        "the replica stops: {out:?}"
    );
    let r = h.replica.read();
    assert_eq!(r.state.jobs.len(), 1, "the newer entry was not applied");
    assert_eq!(
        r.applied, applied,
        "a read at the newer entry's index must not be answered from a state without it"
    );
}
