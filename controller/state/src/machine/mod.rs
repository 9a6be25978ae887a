//! `ClusterState` and its deterministic `apply`: every replica that applies the same log
//! reaches the same state (and the same digest). No clock, randomness or IO in here; time
//! comes from the leader's stamp in each envelope.
//!
//! The handlers live beside this file by what they change: [`jobs`] (submission,
//! placement, preemption, the end of a job and its accounting), [`actions`] (the one
//! action path: cancel, hold, release, requeue and update of every job a selection
//! names, under one set of rules), [`runs`] (what agents report about their node's run
//! of a job), [`steps`] (`grun`/`srun` steps recorded in their job) and [`nodes`]
//! (registration, loss, health, drain); [`reservations`] (admin reservations and their
//! windows); [`legacy`] replays the single-job commands old logs hold; [`dedup`]
//! remembers applied request ids.

mod actions;
pub mod associations;
mod dedup;
mod jobs;
mod legacy;
mod nodes;
mod notices;
pub mod payload;
mod reservations;
mod runs;
mod shared;
mod steps;

pub use actions::{Decision, Verdict};
pub use dedup::DEDUP_CAPACITY;
pub use notices::MAX_NOTICES;
pub use shared::Shared;

use crate::command::{Command, Envelope, Outcome};
use dedup::Dedup;
use gsched_scheduler::SchedConfig;
use gsched_types::job::{JobId, JobRecord, JobState};
use gsched_types::node::NodeRecord;
use gsched_types::reservation::Reservation;
use gsched_types::resources::{NodeCapacity, NodeUsage};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};

/// The first bytes of an LZ4 frame (a compressed snapshot); JSON starts with `{`.
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// Decayed GPU usage of one user in one account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Usage {
    pub gpu_seconds: f64,
    pub at_ms: u64,
}

/// Tokens issued before these times (leader time, ms) are refused: everyone's, and per
/// uid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRevocations {
    #[serde(default)]
    pub all_before_ms: u64,
    #[serde(default)]
    pub users: BTreeMap<u32, u64>,
}

impl TokenRevocations {
    pub fn is_empty(&self) -> bool {
        self.all_before_ms == 0 && self.users.is_empty()
    }

    fn revoke(&mut self, uid: Option<u32>, at_ms: u64) {
        let slot = match uid {
            Some(u) => self.users.entry(u).or_insert(0),
            None => &mut self.all_before_ms,
        };
        *slot = (*slot).max(at_ms);
    }

    /// Tokens of `uid` issued before this are revoked.
    pub fn revoked_before(&self, uid: u32) -> u64 {
        self.all_before_ms
            .max(self.users.get(&uid).copied().unwrap_or(0))
    }
}

/// Whether a pass may start `job`: it is pending and not held.
fn schedulable(job: &JobRecord) -> bool {
    job.state == JobState::Pending && !job.held
}

/// The replicated state of the whole cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    pub next_job_id: u64,
    /// Shared (an `Arc`): a record is ~1 KB, and B-tree nodes hold their values inline;
    /// a snapshot being written holds a clone of the map, not of the records.
    pub jobs: BTreeMap<JobId, Shared<JobRecord>>,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// account -> user -> usage.
    pub usage: BTreeMap<String, BTreeMap<String, Usage>>,
    pub config: SchedConfig,
    /// Raft peer id -> address.
    pub controllers: BTreeMap<u64, String>,
    /// Terminal jobs in the order they ended, for bounded retention.
    pub finished: VecDeque<JobId>,
    /// Recently applied request ids and their outcomes, oldest first.
    dedup: Dedup,
    /// Terminal jobs kept for `gacct`; older ones are dropped.
    pub retain_finished: usize,
    /// Latest leader timestamp applied.
    pub clock_ms: u64,
    /// Scripts and environments, one per submission (see [`payload`]).
    #[serde(default)]
    pub payloads: BTreeMap<JobId, Shared<payload::Payload>>,
    /// The texts payloads name, compressed, one copy per distinct text.
    #[serde(default)]
    pub blobs: payload::Blobs,
    /// Which `gctl token` tokens no longer count.
    #[serde(default, skip_serializing_if = "TokenRevocations::is_empty")]
    pub token_revocations: TokenRevocations,
    /// Admin reservations by name; each is dropped once its window has ended.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reservations: BTreeMap<String, Reservation>,
    /// Accounts, users and QOS have been edited at run time: the configuration file no
    /// longer sets them ([`ClusterState::seeds_associations`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub associations_edited: bool,
    #[serde(skip)]
    node_usage: BTreeMap<String, NodeUsage>,
    /// (first node, MASTER_PORT) of every running job, kept with `node_usage`: a start
    /// re-check looks its port up here instead of walking every job.
    #[serde(skip)]
    ports_in_use: std::collections::BTreeSet<(String, u16)>,
    /// Jobs holding an allocation (running or completing), kept with `node_usage`: the
    /// leader's rounds walk these instead of every job the state remembers.
    #[serde(skip)]
    allocated: std::collections::BTreeSet<JobId>,
    /// Jobs the scheduler may start: pending and not held, kept where either changes:
    /// a pass walks these instead of every job (held and ended ones cost it nothing).
    #[serde(skip)]
    schedulable: std::collections::BTreeSet<JobId>,
    /// Jobs with a notification due or being sent: the leader's outbox walks these.
    #[serde(skip)]
    notifying: std::collections::BTreeSet<JobId>,
    /// Jobs not ended, in all and per user (for the queue limits).
    #[serde(skip)]
    queued: Queued,
    /// Ended jobs dropped from memory, until the accounting archive takes them.
    #[serde(skip)]
    evicted: Evicted,
}

/// Records purged past the retention bound, oldest first, for the archive to take
/// (`ClusterState::take_evicted`); at most `EVICTED_KEPT`, the oldest dropped beyond.
/// Not replicated state: every replica fills its own as it applies the log.
#[derive(Debug, Clone, Default)]
pub struct Evicted {
    jobs: VecDeque<Shared<JobRecord>>,
    /// Records dropped because the buffer was full, since the last take.
    dropped: u64,
}

/// Bound of the eviction buffer when nothing takes from it.
pub const EVICTED_KEPT: usize = 10_000;

impl PartialEq for Evicted {
    fn eq(&self, _: &Evicted) -> bool {
        true
    }
}

/// Counts of jobs that have not ended (derived; rebuilt from the jobs).
#[derive(Debug, Clone, Default, PartialEq)]
struct Queued {
    total: u64,
    by_user: BTreeMap<String, u64>,
}

impl Queued {
    fn add(&mut self, user: &str, n: u64) {
        self.total += n;
        *self.by_user.entry(user.to_string()).or_default() += n;
    }

    fn remove(&mut self, user: &str) {
        self.total = self.total.saturating_sub(1);
        if let Some(c) = self.by_user.get_mut(user) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                self.by_user.remove(user);
            }
        }
    }

    fn of(&self, user: &str) -> u64 {
        self.by_user.get(user).copied().unwrap_or(0)
    }
}

impl Default for ClusterState {
    fn default() -> Self {
        ClusterState {
            next_job_id: 1,
            jobs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            usage: BTreeMap::new(),
            config: SchedConfig::default(),
            controllers: BTreeMap::new(),
            finished: VecDeque::new(),
            dedup: Dedup::default(),
            retain_finished: 20_000,
            clock_ms: 0,
            payloads: BTreeMap::new(),
            blobs: payload::Blobs::default(),
            token_revocations: TokenRevocations::default(),
            reservations: BTreeMap::new(),
            associations_edited: false,
            node_usage: BTreeMap::new(),
            ports_in_use: Default::default(),
            allocated: Default::default(),
            schedulable: Default::default(),
            notifying: Default::default(),
            queued: Queued::default(),
            evicted: Evicted::default(),
        }
    }
}

impl ClusterState {
    /// Serialises the state for a Raft snapshot: JSON in an LZ4 frame, compressed as it
    /// is written (a snapshot of 100,000 jobs is a fifth of its JSON).
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        serde_json::to_writer(&mut enc, self).expect("state always serialises");
        enc.finish().expect("compressing into memory cannot fail")
    }

    /// Restores a snapshot (compressed, or plain JSON as older builds wrote) and rebuilds
    /// the derived indexes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<ClusterState, serde_json::Error> {
        if bytes.is_empty() {
            return Ok(ClusterState::default());
        }
        let mut s: ClusterState = if bytes.starts_with(&LZ4_FRAME_MAGIC) {
            let reader = std::io::BufReader::new(lz4_flex::frame::FrameDecoder::new(bytes));
            serde_json::from_reader(reader)?
        } else {
            serde_json::from_slice(bytes)?
        };
        s.rebuild();
        Ok(s)
    }

    /// Drops the oldest ended jobs beyond the retention bound into the eviction buffer.
    pub(super) fn purge_finished(&mut self) {
        while self.finished.len() > self.retain_finished {
            let Some(old) = self.finished.pop_front() else {
                break;
            };
            if let Some(job) = self.jobs.remove(&old) {
                self.notifying.remove(&old);
                if self.evicted.jobs.len() == EVICTED_KEPT {
                    self.evicted.jobs.pop_front();
                    self.evicted.dropped += 1;
                }
                self.evicted.jobs.push_back(job);
            }
        }
    }

    /// The ended jobs purged from memory since the last call, oldest first, and how many
    /// more were dropped because nothing took them in time.
    pub fn take_evicted(&mut self) -> (Vec<Shared<JobRecord>>, u64) {
        let e = std::mem::take(&mut self.evicted);
        (e.jobs.into(), e.dropped)
    }

    fn rebuild(&mut self) {
        self.node_usage.clear();
        self.ports_in_use.clear();
        self.allocated.clear();
        self.schedulable.clear();
        self.notifying.clear();
        self.queued = Queued::default();
        // Snapshots from before payloads kept scripts in the records: move them out.
        for job in self.jobs.values_mut() {
            if !job.state.is_terminal() {
                self.queued.add(&job.spec.user, 1);
            }
            let key = payload::key_of(job);
            if job.spec.script.is_empty() && job.spec.env.is_empty() {
                continue;
            }
            if job.state.is_terminal() {
                job.spec.script.clear();
                job.spec.env.clear();
                continue;
            }
            match self.payloads.get_mut(&key) {
                Some(p) => {
                    job.spec.script.clear();
                    job.spec.env.clear();
                    p.live += 1;
                }
                None => {
                    let taken = payload::take(&mut job.spec, 1, &mut self.blobs);
                    self.payloads.insert(key, Shared::new(taken));
                }
            }
        }
        for job in self.jobs.values() {
            if schedulable(job) {
                self.schedulable.insert(job.id);
            }
            if job.notices.iter().any(|n| !n.is_done()) {
                self.notifying.insert(job.id);
            }
            if matches!(job.state, JobState::Running | JobState::Completing)
                && let Some(a) = &job.allocation
            {
                for na in &a.nodes {
                    self.node_usage.entry(na.node.clone()).or_default().add(na);
                }
                self.allocated.insert(job.id);
                if let Some(first) = a.nodes.first() {
                    self.ports_in_use
                        .insert((first.node.clone(), a.master_port));
                }
            }
        }
    }

    /// Jobs that hold an allocation (running or completing), in id order.
    pub fn allocated_jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs_in(&self.allocated)
    }

    /// The records of the jobs an index names, in id order.
    fn jobs_in<'a>(
        &'a self,
        index: &'a std::collections::BTreeSet<JobId>,
    ) -> impl Iterator<Item = &'a JobRecord> {
        index
            .iter()
            .filter_map(|id| self.jobs.get(id).map(|j| &**j))
    }

    /// How many jobs the allocation index holds (for the invariants).
    pub fn allocated_count(&self) -> usize {
        self.allocated.len()
    }

    /// Pending jobs that are not held, in id order: what a scheduling pass considers.
    pub fn schedulable_jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs_in(&self.schedulable)
    }

    /// How many jobs the schedulable index holds (for the invariants).
    pub fn schedulable_count(&self) -> usize {
        self.schedulable.len()
    }

    /// Puts job `id` in the schedulable index or takes it out, as its state and hold
    /// now say; called wherever either changes.
    pub(super) fn note_schedulable(&mut self, id: JobId) {
        if self.jobs.get(&id).is_some_and(|j| schedulable(j)) {
            self.schedulable.insert(id);
        } else {
            self.schedulable.remove(&id);
        }
    }

    /// How many (first node, port) pairs the port index holds (for the invariants).
    pub fn ports_held(&self) -> usize {
        self.ports_in_use.len()
    }

    /// Whether a running job whose first node is `node` holds MASTER_PORT `port`.
    pub fn port_in_use(&self, node: &str, port: u16) -> bool {
        self.ports_in_use.contains(&(node.to_string(), port))
    }

    /// A SHA-256 of the canonical serialisation: equal on replicas with equal state.
    pub fn digest(&self) -> String {
        /// Hashes what is written, so the state is never held serialised in memory.
        struct Hasher(Sha256);
        impl std::io::Write for Hasher {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.update(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut h = Hasher(Sha256::new());
        serde_json::to_writer(&mut h, self).expect("state always serialises");
        h.0.finalize()
            .iter()
            .take(12)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The job's spec with its script and environment, as an agent needs it.
    pub fn full_spec(&self, job: &JobRecord) -> gsched_types::JobSpec {
        payload::restore(
            &job.spec,
            self.payloads.get(&payload::key_of(job)).map(|p| &**p),
            &self.blobs,
        )
    }

    /// Jobs that have not ended, in all and `user`'s.
    pub fn queued(&self, user: &str) -> (u64, u64) {
        (self.queued.total, self.queued.of(user))
    }

    /// What is in use on a node.
    /// Does `job`'s current allocation include `node`?
    pub fn job_placed_on(&self, job: JobId, node: &str) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.allocation
                .as_ref()
                .is_some_and(|a| a.nodes.iter().any(|n| n.node == node))
        })
    }

    /// Was attempt `attempt` of `job` placed on `node`? An agent may report about the
    /// runs of its own node only.
    pub fn attempt_placed_on(&self, job: JobId, attempt: u32, node: &str) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let current = j.attempt == attempt && self.job_placed_on(job, node);
        current
            || j.attempts
                .iter()
                .any(|a| a.number == attempt && a.nodes.iter().any(|n| n == node))
    }

    pub fn usage_of(&self, node: &str) -> NodeUsage {
        self.node_usage.get(node).cloned().unwrap_or_default()
    }

    pub fn capacity_of(node: &NodeRecord) -> NodeCapacity {
        NodeCapacity {
            gpu_count: node.topology.gpus.len() as u32,
            bad_gpus: gsched_types::resources::IdSet::from_ids(&node.bad_gpus),
            cpus: node.topology.all_cpus(),
            mem_mb: node
                .topology
                .memory_mib
                .or_else(|| {
                    node.topology
                        .numa_nodes
                        .iter()
                        .map(|n| n.memory_mib)
                        .sum::<Option<u64>>()
                })
                .unwrap_or(0),
        }
    }

    /// The outcome recorded for a request id, if it was already applied.
    pub fn dedup_lookup(&self, request_id: &str) -> Option<&Outcome> {
        self.dedup.lookup(request_id)
    }

    /// Applies one log entry. Deterministic: same state + same envelope = same result.
    pub fn apply(&mut self, env: &Envelope) -> Outcome {
        if let Some(id) = &env.request_id
            && let Some(done) = self.dedup.lookup(id)
        {
            return done.clone();
        }
        self.clock_ms = self.clock_ms.max(env.at_ms);
        self.expire_reservations(self.clock_ms);
        let at = env.at_ms;
        let outcome = match &env.cmd {
            Command::SubmitJob(c) => self.submit(c, at),
            Command::CancelJob(c) => self.legacy_cancel(c, at),
            Command::ActOnJobs(c) => self.act_on_jobs(c, at),
            Command::UpdateJob(c) => self.legacy_update(c),
            Command::StepStarted(c) => self.step_started(c, at),
            Command::StepEnded(c) => self.step_ended(c, at),
            Command::JobWarning(c) => self.job_warning(c),
            Command::RecordUsage(c) => self.record_usage(c),
            Command::IdleGpus(c) => self.idle_gpus(c, at),
            Command::CreateReservation(c) => self.create_reservation(c, at),
            Command::UpdateReservation(c) => self.update_reservation(c, at),
            Command::DeleteReservation(c) => self.delete_reservation(c),
            Command::RevokeTokens(c) => {
                self.token_revocations.revoke(c.uid, at);
                Outcome::Ok
            }
            Command::StartJobs(c) => self.start_jobs(&c.starts, at),
            Command::SetPendingReasons(c) => self.set_pending_reasons(c, at),
            Command::RunStarted(c) => self.run_started(c, at),
            Command::RunExited(c) => self.run_exited(c, at),
            Command::RunFailed(c) => self.run_failed(c, at),
            Command::RegisterNode(c) => self.register_node(c, at),
            Command::NodeLost(c) => self.node_lost(&c.node, &c.reason, at),
            Command::DrainNode(c) => self.drain_node(c, at),
            Command::ResumeNode(c) => self.resume_node(c, at),
            Command::HealthEvents(c) => self.health_events(c, at),
            Command::RequeueJob(c) => self.legacy_requeue(c, at),
            Command::HoldJob(c) => self.legacy_hold(c),
            Command::Preempt(c) => self.preempt(c, at),
            Command::EditAssociations(c) => self.edit_associations(c),
            Command::NotifyClaim(c) => self.notify_claim(c, at),
            Command::NotifyDone(c) => self.notify_done(c, at),
            Command::SetConfig(c) => {
                let kept = self.associations_edited.then(|| self.take_associations());
                self.config = (*c.config).clone();
                if let Some(kept) = kept {
                    self.put_associations(kept);
                }
                self.retain_finished = self.config.limits.finished_jobs_kept.max(1) as usize;
                self.purge_finished();
                Outcome::Ok
            }
            Command::TimeoutJob(c) => self.timeout_job(c, at),
            Command::SetControllerAddress(c) => {
                match &c.address {
                    Some(a) => self.controllers.insert(c.id, a.clone()),
                    None => self.controllers.remove(&c.id),
                };
                Outcome::Ok
            }
            Command::Noop => Outcome::Ok,
            Command::CancelUnsatisfiable(c) => self.cancel_unsatisfiable(c, at),
            Command::EndPastDeadline(c) => self.end_past_deadline(c, at),
            Command::NodeResponding(c) => self.node_responding(c, at),
        };
        if let Some(id) = &env.request_id {
            self.dedup.remember(id.clone(), outcome.clone());
        }
        outcome
    }
}
