//! One scheduling pass: `plan(snapshot, now) -> Plan`.
//!
//! Jobs are taken in priority order. Each either starts now (placed on free resources that
//! no backfill hold needs), or gets the reason that binds it. The first blocked jobs (up to
//! `backfill_holds`, EASY backfill uses one) get a backfill hold: the earliest time their
//! placement frees up if running jobs end at their time limits. A lower job may start in
//! a hole only if it cannot delay a hold: it ends before the hold starts, or it uses none
//! of the held GPUs.
//!
//! Admin reservations ([`Windows`]) hold their GPUs over their own window: a job outside
//! one may use them only if it ends before the window starts; a job inside one uses its
//! GPUs only, once it has started.

use crate::config::Policy;
use crate::deps::{self, DepStatus};
use crate::input::{PendingJob, RunningJob, Snapshot};
use crate::place::{Blocked, CLOSED, Ideal, NodePick, Placer, ShapeKey, ShapeMap, ShapeOf};
use crate::priority::{FairShare, priority};
use crate::windows::Windows;
use gsched_types::assoc::{ancestors, lineage};
use gsched_types::job::{DependencyKind, JobId, PendingReason};
use gsched_types::resources::{Allocation, NodeAlloc, NodeUsage};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;

/// A job to start, with everything the controller commits for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStart {
    pub job: JobId,
    pub allocation: Allocation,
    /// Started in a hole left by a backfill hold rather than in priority order.
    pub backfilled: bool,
    /// The time limit it starts with when backfill shortened it towards its
    /// `--time-min` to fit a hole (s); `None`: its own.
    pub time_limit_s: Option<u64>,
}

/// A running job to requeue so that a higher-QOS job can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    pub victim: JobId,
    pub for_job: JobId,
}

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub starts: Vec<PlannedStart>,
    /// The binding reason of every pending job that does not start.
    pub reasons: Vec<(JobId, PendingReason)>,
    /// Expected start times (ms) from the backfill holds.
    pub estimates: Vec<(JobId, u64)>,
    pub preemptions: Vec<Preemption>,
    pub priorities: Vec<(JobId, f64)>,
}

/// GPUs set aside for a blocked higher-priority job from `start_ms` on.
#[derive(Debug, Clone)]
struct BackfillHold {
    /// Held for a job waiting for its best placement (`topology_wait_s`) rather than
    /// for the head of the queue.
    topology: bool,
    start_ms: u64,
    gpus: HashMap<usize, u64>,
    whole_nodes: HashSet<usize>,
}

/// A shape kept out only by backfill holds. Every job of the shape whose time limit is at
/// least `limit_s` is kept out by them too: holds and usage only grow during a pass, and a
/// longer job overlaps more of each hold. While `started` is still the pass's count of
/// starts, the shape still fits once holds are ignored.
#[derive(Debug, Clone, Copy)]
struct HoldBlock {
    limit_s: u64,
    started: u64,
}

/// How many jobs waiting for their best placement get a backfill hold on it per pass.
const TOPOLOGY_HOLDS: usize = 8;

/// How many blocked jobs beyond the holds get a start estimate per pass.
const EXTRA_ESTIMATES: usize = 16;

/// Runs one scheduling pass. Pure: everything it reads is in `snap` and `now_ms`.
pub fn plan(snap: &Snapshot, now_ms: u64) -> Plan {
    let config = &snap.config;
    let mut plan = Plan::default();
    let total_gpus: u32 = snap.nodes.iter().map(|n| n.healthy_gpus()).sum();
    let fairshare = FairShare::compute(config, &snap.usage, &snap.running, &snap.pending, now_ms);

    let mut order: Vec<(f64, &PendingJob)> = snap
        .pending
        .iter()
        .map(|j| (priority(j, config, &fairshare, total_gpus, now_ms), j))
        .collect();
    order.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.eligible_ms.cmp(&b.1.eligible_ms))
            .then(a.1.id.cmp(&b.1.id))
    });
    plan.priorities = order.iter().map(|(p, j)| (j.id, *p)).collect();

    let mut pass = Pass::new(snap, now_ms);
    for (rank, (_, job)) in order.iter().enumerate() {
        if rank as u32 >= config.max_jobs_per_pass {
            plan.reasons.push((job.id, PendingReason::Priority));
            continue;
        }
        match pass.consider(job) {
            Ok(start) => plan.starts.push(start),
            Err(reason) => plan.reasons.push((job.id, reason)),
        }
    }
    plan.estimates = pass.estimates;
    plan.preemptions = pass.preemptions;
    plan
}

/// The mutable state of one pass.
struct Pass<'a> {
    snap: &'a Snapshot,
    now_ms: u64,
    placer: Placer<'a>,
    usage: Vec<NodeUsage>,
    /// Release events: (end bound, node index, allocation); starts append, and
    /// [`Pass::shadow`] sorts them by time (a stable sort keeps equal times in order).
    releases: Vec<(u64, usize, NodeAlloc)>,
    holds: Vec<BackfillHold>,
    windows: Windows,
    /// Each shape seen this pass, by a small id: the memos below are keyed by it, so a
    /// queue of 20,000 jobs hashes and copies a shape once, not per lookup and rehash.
    shape_ids: ShapeMap<u32>,
    /// Shapes that cannot be placed this pass even ignoring backfill holds
    /// (resources only shrink during a pass), with the reason; with admin windows the
    /// time limit is part of the key, as it decides which windows a job overlaps.
    busy_shapes: HashMap<(u32, Option<u64>), PendingReason>,
    /// Shapes kept out only by backfill holds, keyed like `busy_shapes`.
    hold_blocked: HashMap<(u32, Option<u64>), HoldBlock>,
    /// Shapes whose placement fell short of their best while `started` had the first
    /// value, keyed like `busy_shapes` (the same placement would be found again until a
    /// start), with when the best placement was expected (`u64::MAX`: not foreseen).
    topology_short: HashMap<(u32, Option<u64>), (u64, u64)>,
    /// Jobs started so far this pass: free resources change only when it grows.
    started: u64,
    fifo_blocked: bool,
    user_gpus: HashMap<&'a str, u32>,
    user_jobs: HashMap<&'a str, u32>,
    /// GPUs running per account, its sub-accounts' included.
    account_gpus: HashMap<&'a str, u32>,
    /// Running jobs per (user, account).
    assoc_jobs: HashMap<(&'a str, &'a str), u32>,
    array_running: HashMap<JobId, u32>,
    singletons: HashSet<(&'a str, &'a str)>,
    /// MASTER_PORTs in use per training address: agents that split one machine, or a
    /// local test cluster, share the address and so its ports.
    ports: HashMap<&'a str, BTreeSet<u16>>,
    /// Nodes whose training address has no MASTER_PORT left: passed over by placement
    /// (a job placed there could not start, and the rest of the queue would wait).
    no_port: Vec<bool>,
    node_index: HashMap<&'a str, usize>,
    estimates: Vec<(JobId, u64)>,
    preemptions: Vec<Preemption>,
    victims: HashSet<JobId>,
}

impl<'a> Pass<'a> {
    fn new(snap: &'a Snapshot, now_ms: u64) -> Pass<'a> {
        let node_index: HashMap<&str, usize> = snap
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut pass = Pass {
            snap,
            now_ms,
            placer: Placer::new(snap),
            usage: snap.nodes.iter().map(|n| n.usage.clone()).collect(),
            releases: Vec::new(),
            holds: Vec::new(),
            windows: Windows::new(snap, &node_index, now_ms),
            shape_ids: ShapeMap::default(),
            busy_shapes: HashMap::default(),
            hold_blocked: HashMap::default(),
            topology_short: HashMap::default(),
            started: 0,
            fifo_blocked: false,
            user_gpus: HashMap::default(),
            user_jobs: HashMap::default(),
            account_gpus: HashMap::default(),
            assoc_jobs: HashMap::default(),
            array_running: HashMap::default(),
            singletons: HashSet::default(),
            ports: HashMap::default(),
            no_port: vec![false; snap.nodes.len()],
            node_index,
            estimates: Vec::new(),
            preemptions: Vec::new(),
            victims: HashSet::default(),
        };
        for r in &snap.running {
            pass.account_running(r.user.as_str(), r.account.as_str(), r.gpus(), r.array_job);
            pass.singletons.insert((r.user.as_str(), r.name.as_str()));
            if let Some(first) = r
                .allocation
                .first()
                .and_then(|a| pass.node_index.get(a.node.as_str()))
            {
                let addr = pass.snap.nodes[*first].training_addr.as_str();
                pass.ports.entry(addr).or_default().insert(r.master_port);
            }
            if let Some(end) = r.end_bound_ms() {
                for a in &r.allocation {
                    if let Some(&ni) = pass.node_index.get(a.node.as_str()) {
                        pass.releases.push((end, ni, a.clone()));
                    }
                }
            }
        }
        pass.releases.sort_by_key(|(t, ni, _)| (*t, *ni));
        let full: Vec<&str> = pass
            .ports
            .iter()
            .filter(|(_, used)| used.len() >= pass.port_range())
            .map(|(addr, _)| *addr)
            .collect();
        for addr in full {
            pass.mark_no_port(addr);
        }
        pass.placer.index_classes(&pass.usage);
        pass
    }

    fn account_running(
        &mut self,
        user: &'a str,
        account: &'a str,
        gpus: u32,
        array: Option<JobId>,
    ) {
        *self.user_gpus.entry(user).or_default() += gpus;
        *self.user_jobs.entry(user).or_default() += 1;
        *self.account_gpus.entry(account).or_default() += gpus;
        for above in ancestors(&self.snap.config.accounts, account) {
            *self.account_gpus.entry(above).or_default() += gpus;
        }
        *self.assoc_jobs.entry((user, account)).or_default() += 1;
        if let Some(a) = array {
            *self.array_running.entry(a).or_default() += 1;
        }
    }

    /// Reasons that do not depend on free resources.
    fn static_blocker(&self, job: &PendingJob) -> Option<PendingReason> {
        let config = &self.snap.config;
        if job.held {
            return Some(PendingReason::JobHeldUser);
        }
        if job.begin_ms.is_some_and(|b| b > self.now_ms) {
            return Some(PendingReason::BeginTime);
        }
        if let Some(name) = &job.reservation {
            match self.windows.get(name) {
                None => return Some(PendingReason::ReservationDeleted),
                Some(w) if w.start_ms > self.now_ms => return Some(PendingReason::Reservation),
                Some(_) => {}
            }
        }
        for dep in &job.dependency {
            if dep.kind == DependencyKind::Singleton {
                let other_pending = self
                    .snap
                    .pending
                    .iter()
                    .any(|p| p.id < job.id && p.user == job.user && p.name == job.name);
                if self
                    .singletons
                    .contains(&(job.user.as_str(), job.name.as_str()))
                    || other_pending
                {
                    return Some(PendingReason::Dependency);
                }
                continue;
            }
            let Some(id) = dep.job else { continue };
            match deps::status(dep.kind, self.snap.dependencies.get(&id).copied()) {
                DepStatus::Satisfied => {}
                DepStatus::Waiting => return Some(PendingReason::Dependency),
                DepStatus::Never => return Some(PendingReason::DependencyNeverSatisfied),
            }
        }
        if let Some((array, Some(limit))) = job.array
            && self.array_running.get(&array).copied().unwrap_or(0) >= limit
        {
            return Some(PendingReason::JobArrayTaskLimit);
        }
        if let (Some(max), Some(t)) = (
            config.partition(&job.partition).and_then(|p| p.max_time_s),
            job.time_limit_s,
        ) && t > max
        {
            return Some(PendingReason::PartitionTimeLimit);
        }
        let qos = config.qos(job.qos.as_deref());
        let user_gpus = || self.user_gpus.get(job.user.as_str()).copied().unwrap_or(0);
        let max_gpus = qos
            .and_then(|q| q.max_gpus_per_user)
            .into_iter()
            .chain(config.user_limits.max_gpus)
            .min();
        if max_gpus.is_some_and(|m| user_gpus() + job.total_gpus() > m) && job.total_gpus() > 0 {
            return Some(PendingReason::QosMaxGpusPerUser);
        }
        let max_jobs = qos
            .and_then(|q| q.max_jobs_per_user)
            .into_iter()
            .chain(config.user_limits.max_running_jobs)
            .min();
        if max_jobs
            .is_some_and(|m| self.user_jobs.get(job.user.as_str()).copied().unwrap_or(0) >= m)
        {
            return Some(PendingReason::QosMaxJobsPerUser);
        }
        if let (Some(max), Some(t)) = (qos.and_then(|q| q.max_time_s), job.time_limit_s)
            && t > max
        {
            return Some(PendingReason::QosMaxWall);
        }
        self.association_blocker(job)
    }

    /// The limits of the job's account and the accounts above it (nearest first), and of
    /// the user's own association.
    fn association_blocker(&self, job: &PendingJob) -> Option<PendingReason> {
        let config = &self.snap.config;
        let over_grp = lineage(&config.accounts, &job.account).any(|a| {
            a.max_gpus.is_some_and(|max| {
                self.account_gpus.get(a.name.as_str()).copied().unwrap_or(0) + job.total_gpus()
                    > max
            })
        });
        if over_grp && job.total_gpus() > 0 {
            return Some(PendingReason::AssocGrpGpuLimit);
        }
        let user = config.users.iter().find(|u| u.name == job.user);
        let max_jobs = user
            .and_then(|u| u.max_jobs)
            .or_else(|| lineage(&config.accounts, &job.account).find_map(|a| a.max_jobs));
        let running = || {
            self.assoc_jobs
                .get(&(job.user.as_str(), job.account.as_str()))
                .copied()
                .unwrap_or(0)
        };
        if max_jobs.is_some_and(|m| running() >= m) {
            return Some(PendingReason::AssocMaxJobs);
        }
        let max_wall = lineage(&config.accounts, &job.account).find_map(|a| a.max_wall_s);
        if let (Some(max), Some(t)) = (max_wall, job.time_limit_s)
            && t > max
        {
            return Some(PendingReason::AssocMaxWall);
        }
        None
    }

    /// How many MASTER_PORTs one training address has.
    fn port_range(&self) -> usize {
        let c = &self.snap.config;
        usize::from(c.master_port_max.saturating_sub(c.master_port_min)) + 1
    }

    /// Every node of `addr` has no MASTER_PORT left this pass.
    fn mark_no_port(&mut self, addr: &str) {
        for (ni, n) in self.snap.nodes.iter().enumerate() {
            if n.training_addr == addr {
                self.no_port[ni] = true;
            }
        }
    }

    fn held_mask(&self, ni: usize, end_ms: Option<u64>) -> u64 {
        held_mask(&self.holds, ni, end_ms)
    }

    fn consider(&mut self, job: &'a PendingJob) -> Result<PlannedStart, PendingReason> {
        if let Some(reason) = self.static_blocker(job) {
            if reason == PendingReason::Reservation
                && let Some(w) = job.reservation.as_deref().and_then(|r| self.windows.get(r))
            {
                self.estimates.push((job.id, w.start_ms));
            }
            return Err(reason);
        }
        let policy = self.snap.config.policy;
        if self.fifo_blocked {
            return Err(PendingReason::Priority);
        }
        let shape = match self.shape_ids.get(&ShapeOf(job)) {
            Some(id) => *id,
            None => {
                let id = self.shape_ids.len() as u32;
                self.shape_ids.insert(ShapeKey::of(job), id);
                id
            }
        };
        let busy_key = if self.windows.is_empty() {
            (shape, None)
        } else {
            (shape, job.time_limit_s)
        };
        if let Some(reason) = self.busy_shapes.get(&busy_key) {
            if policy == Policy::Fifo {
                self.fifo_blocked = true;
            }
            return Err(reason.clone());
        }
        let limit_s = job.time_limit_s.unwrap_or(u64::MAX);
        let known_held = self
            .hold_blocked
            .get(&busy_key)
            .filter(|b| limit_s >= b.limit_s)
            .map(|b| b.started);
        let mut waits_for_topology = self.may_wait_for_topology(job);
        // A shape found short since the last start is short for its jobs too (unless one
        // accepts more switches): whether this one waits is its own deadline's question.
        if waits_for_topology
            && job.switches.is_none()
            && self
                .topology_short
                .get(&busy_key)
                .is_some_and(|(started, _)| *started == self.started)
        {
            if self.wait_for_best_placement(job, busy_key) {
                return Err(PendingReason::TopologyWait);
            }
            waits_for_topology = false;
        }
        let end_ms = job.time_limit_s.map(|t| self.now_ms + t * 1000);
        let holds_exist = !self.holds.is_empty();
        let holds = &self.holds;
        let no_port = &self.no_port;
        let windows = &self.windows;
        let own = job.reservation.as_deref();
        let now_ms = self.now_ms;
        let unusable = |ni: usize| {
            let closed = if no_port[ni] { CLOSED } else { 0 };
            closed | windows.mask(own, ni, now_ms, end_ms)
        };
        let result = if known_held.is_some() {
            Err(Blocked::Busy)
        } else {
            self.placer.place(job, &self.usage, &|ni| {
                held_mask(holds, ni, end_ms) | unusable(ni)
            })
        };
        match result {
            Ok(picks) => {
                if waits_for_topology
                    && self.ideal(job).beats(self.placer.nodes(), &picks)
                    && self.wait_for_best_placement(job, busy_key)
                {
                    return Err(PendingReason::TopologyWait);
                }
                let backfilled = holds_exist;
                match self.start(job, picks, backfilled) {
                    Some(start) => Ok(start),
                    None => Err(PendingReason::Resources),
                }
            }
            Err(Blocked::Never(why)) => {
                let r = PendingReason::BadConstraints(why.to_string());
                self.busy_shapes.insert(busy_key, r.clone());
                Err(r)
            }
            Err(Blocked::Unavailable(nodes)) => {
                let r = PendingReason::ReqNodeNotAvail(nodes);
                self.busy_shapes.insert(busy_key, r.clone());
                if policy == Policy::Fifo {
                    self.fifo_blocked = true;
                }
                Err(r)
            }
            Err(Blocked::Busy) => {
                let blocked_by_hold = holds_exist
                    && (known_held == Some(self.started)
                        || self.placer.place(job, &self.usage, &unusable).is_ok());
                let blocked_by_window = !blocked_by_hold
                    && own.is_none()
                    && !windows.is_empty()
                    && self.placer.place(job, &self.usage, &|_| 0).is_ok();
                let outside = if blocked_by_hold {
                    Vec::new()
                } else {
                    self.placer.outside_in_the_way(job)
                };
                let reason = if blocked_by_hold {
                    PendingReason::Priority
                } else if !outside.is_empty() {
                    PendingReason::GpusUsedOutsideJobs(outside)
                } else if blocked_by_window && windows.maint_in_the_way(own, now_ms, end_ms) {
                    PendingReason::ReservedForMaintenance
                } else if blocked_by_window {
                    PendingReason::ReservedForOther
                } else {
                    PendingReason::Resources
                };
                if blocked_by_hold
                    && let Some((limit, picks)) = self.shortened_start(job)
                    && let Some(start) = self.start_limited(job, picks, true, Some(limit))
                {
                    return Ok(start);
                }
                if !blocked_by_hold && !blocked_by_window {
                    self.try_preempt(job);
                }
                let backfill_holds = self.holds.iter().filter(|r| !r.topology).count();
                let wants_hold = policy != Policy::Fifo
                    && self.snap.config.backfill
                    && (backfill_holds as u32) < self.snap.config.backfill_holds.max(1);
                if wants_hold && !blocked_by_hold {
                    if let Some((start_ms, picks)) = self.shadow(job, true, None) {
                        self.estimates.push((job.id, start_ms));
                        self.hold(start_ms, picks, false);
                    }
                } else if self.estimates.len()
                    < self.snap.config.backfill_holds as usize + EXTRA_ESTIMATES
                    && policy != Policy::Fifo
                    && let Some((start_ms, _)) = self.shadow(job, false, None)
                {
                    self.estimates.push((job.id, start_ms));
                }
                if policy == Policy::Fifo {
                    self.fifo_blocked = true;
                }
                if blocked_by_hold {
                    let limit_s = self
                        .hold_blocked
                        .get(&busy_key)
                        .map_or(limit_s, |b| b.limit_s.min(limit_s));
                    let started = self.started;
                    self.hold_blocked
                        .insert(busy_key, HoldBlock { limit_s, started });
                } else {
                    self.busy_shapes.insert(busy_key, reason.clone());
                }
                Err(reason)
            }
        }
    }

    /// Sets GPUs aside from `start_ms` on; later jobs may use them only if they end first.
    fn hold(&mut self, start_ms: u64, picks: Vec<NodePick>, topology: bool) {
        let mut hold = BackfillHold {
            topology,
            start_ms,
            gpus: HashMap::default(),
            whole_nodes: HashSet::default(),
        };
        for p in picks {
            *hold.gpus.entry(p.node).or_default() |=
                p.alloc.gpus.iter().fold(0u64, |m, g| m | (1u64 << g));
            if p.alloc.exclusive {
                hold.whole_nodes.insert(p.node);
            }
        }
        self.holds.push(hold);
    }

    /// For a job whose placement now falls short of its best: does it wait? Only if
    /// running jobs (ending at their time limits) free a best placement before its wait
    /// runs out; it then holds that placement, so that the jobs behind it do not take
    /// it piecemeal. Past the holds one pass makes, the shape's last estimate
    /// decides.
    fn wait_for_best_placement(&mut self, job: &PendingJob, shape: (u32, Option<u64>)) -> bool {
        let deadline = self.placement_deadline_ms(job);
        // Usage and holds only grow during a pass, so a later job of the shape
        // cannot expect its best placement sooner than the last estimate: past it, no
        // new forecast is needed to say no.
        let last = self
            .topology_short
            .get(&shape)
            .filter(|(started, _)| *started == self.started)
            .map(|(_, at)| *at);
        if last.is_some_and(|at| at >= deadline) {
            return false;
        }
        let held = self.holds.iter().filter(|r| r.topology).count();
        if held >= TOPOLOGY_HOLDS {
            return last.is_some_and(|at| at < deadline);
        }
        let ideal = self.ideal(job);
        let found = self.shadow(job, true, Some(ideal));
        let at = found.as_ref().map_or(u64::MAX, |(at, _)| *at);
        self.topology_short.insert(shape, (self.started, at));
        match found {
            Some((start_ms, picks)) if start_ms < deadline => {
                self.estimates.push((job.id, start_ms));
                self.hold(start_ms, picks, true);
                true
            }
            _ => false,
        }
    }

    /// What the job waits for: its shape's best placement, on as many switches as it
    /// accepts (`--switches`) when that is more.
    fn ideal(&mut self, job: &PendingJob) -> Ideal {
        let mut ideal = self.placer.ideal(job);
        if let Some(s) = job.switches {
            ideal.switches = ideal.switches.max(s.count as usize);
        }
        ideal
    }

    /// Would the job rather wait than start on a placement short of its best? Only
    /// multi-GPU jobs of the topology-aware policy that name no nodes, and only within
    /// `topology_wait_s` of the first pass that found it short (time spent waiting for
    /// resources at all does not count).
    fn may_wait_for_topology(&self, job: &PendingJob) -> bool {
        self.snap.config.policy == Policy::Gsched
            && job.total_gpus() > 1
            && job.nodelist.is_empty()
            && self.now_ms < self.placement_deadline_ms(job)
    }

    /// Until when the job may wait for its best placement.
    fn placement_deadline_ms(&self, job: &PendingJob) -> u64 {
        job.placement_wait_since_ms
            .unwrap_or(self.now_ms)
            .saturating_add(topology_wait_ms(&self.snap.config, job))
    }

    /// Commits a placement to the pass's free state and builds the start.
    fn start(
        &mut self,
        job: &'a PendingJob,
        picks: Vec<NodePick>,
        backfilled: bool,
    ) -> Option<PlannedStart> {
        self.start_limited(job, picks, backfilled, None)
    }

    /// [`Plan::start`] with the time limit `shortened` to (backfill and `--time-min`).
    fn start_limited(
        &mut self,
        job: &'a PendingJob,
        picks: Vec<NodePick>,
        backfilled: bool,
        shortened: Option<u64>,
    ) -> Option<PlannedStart> {
        let first = picks.first()?.node;
        let master_addr = self.snap.nodes[first].training_addr.as_str();
        let used = self.ports.entry(master_addr).or_default();
        let config = &self.snap.config;
        let port = (config.master_port_min..=config.master_port_max).find(|p| !used.contains(p))?;
        used.insert(port);
        if used.len() >= self.port_range() {
            self.mark_no_port(master_addr);
        }
        let end = shortened
            .or(job.time_limit_s)
            .map(|t| self.now_ms + t * 1000);
        let mut nodes = Vec::with_capacity(picks.len());
        for p in picks {
            self.usage[p.node].add(&p.alloc);
            self.placer.note_usage(p.node, &self.usage[p.node]);
            if let Some(end) = end {
                self.releases.push((end, p.node, p.alloc.clone()));
            }
            nodes.push(p.alloc);
        }
        self.account_running(
            &job.user,
            &job.account,
            job.total_gpus(),
            job.array.map(|a| a.0),
        );
        self.singletons
            .insert((job.user.as_str(), job.name.as_str()));
        self.started += 1;
        Some(PlannedStart {
            job: job.id,
            allocation: Allocation {
                nodes,
                master_addr: master_addr.to_string(),
                master_port: port,
            },
            backfilled,
            time_limit_s: shortened,
        })
    }

    /// A job blocked only by backfill holds that accepts a shorter time limit
    /// (`--time-min`): the longest limit from its time-min up that ends before the holds
    /// in the way start, and the placement it gets with it.
    fn shortened_start(&mut self, job: &PendingJob) -> Option<(u64, Vec<NodePick>)> {
        let min = job.time_min_s?;
        let limit = job.time_limit_s.unwrap_or(u64::MAX);
        let mut starts: Vec<u64> = self
            .holds
            .iter()
            .map(|h| h.start_ms)
            .filter(|s| *s > self.now_ms)
            .collect();
        starts.sort_unstable_by(|a, b| b.cmp(a));
        starts.dedup();
        for start in starts {
            let fits_s = (start - self.now_ms) / 1000;
            if fits_s < min || fits_s >= limit {
                continue;
            }
            let end_ms = Some(self.now_ms + fits_s * 1000);
            let (holds, no_port, windows) = (&self.holds, &self.no_port, &self.windows);
            let own = job.reservation.as_deref();
            let now_ms = self.now_ms;
            let placed = self.placer.place(job, &self.usage, &|ni| {
                let closed = if no_port[ni] { CLOSED } else { 0 };
                held_mask(holds, ni, end_ms) | closed | windows.mask(own, ni, now_ms, end_ms)
            });
            if let Ok(picks) = placed {
                return Some((fits_s, picks));
            }
        }
        None
    }

    /// Earliest time the job fits if running jobs end at their time limits and admin
    /// windows end when they say. With `respect_holds`, earlier backfill
    /// holds keep their GPUs. With `ideal`, only a placement that meets it counts.
    fn shadow(
        &mut self,
        job: &PendingJob,
        respect_holds: bool,
        ideal: Option<Ideal>,
    ) -> Option<(u64, Vec<NodePick>)> {
        let mut future = self.usage.clone();
        let held: HashMap<usize, u64> = if respect_holds {
            (0..self.snap.nodes.len())
                .map(|ni| (ni, self.held_mask(ni, None)))
                .filter(|(_, m)| *m != 0)
                .collect()
        } else {
            HashMap::default()
        };
        let windows = &self.windows;
        let own = job.reservation.as_deref();
        let run_ms = job.time_limit_s.map(|t| t * 1000);
        let now_ms = self.now_ms;
        let mask = |ni: usize, t: u64| {
            let t = t.max(now_ms);
            held.get(&ni).copied().unwrap_or(0) | windows.mask(own, ni, t, run_ms.map(|d| t + d))
        };
        let window_ends = windows.ends_after(now_ms);
        // Nodes that fit the job on their own; only nodes a release or a window touches
        // can change.
        let mut fitting: BTreeSet<usize> = BTreeSet::new();
        if job.nodes > 1 {
            // A gang may combine nodes free now with nodes a release frees later.
            for (ni, usage) in future.iter().enumerate() {
                if self.snap.nodes[ni].available
                    && self
                        .placer
                        .pick_on_node(job, ni, usage, mask(ni, now_ms))
                        .is_some()
                {
                    fitting.insert(ni);
                }
            }
        }
        let (mut i, mut e) = (0, 0);
        self.releases.sort_by_key(|(t, ni, _)| (*t, *ni));
        let releases = &self.releases;
        loop {
            let t = match (releases.get(i), window_ends.get(e)) {
                (None, None) => return None,
                (Some(r), None) => r.0,
                (None, Some(w)) => w.0,
                (Some(r), Some(w)) => r.0.min(w.0),
            };
            let mut touched: Vec<usize> = windows.nodes().iter().copied().collect();
            while i < releases.len() && releases[i].0 == t {
                let (_, ni, alloc) = &releases[i];
                future[*ni].remove(alloc);
                touched.push(*ni);
                i += 1;
            }
            while e < window_ends.len() && window_ends[e].0 == t {
                touched.extend(&window_ends[e].1);
                e += 1;
            }
            touched.sort_unstable();
            touched.dedup();
            for ni in touched {
                if self.snap.nodes[ni].available
                    && self
                        .placer
                        .pick_on_node(job, ni, &future[ni], mask(ni, t))
                        .is_some()
                {
                    fitting.insert(ni);
                } else {
                    fitting.remove(&ni);
                }
            }
            if fitting.len() as u32 >= job.nodes
                && let Ok(picks) = self
                    .placer
                    .place_on(job, &future, &|ni| mask(ni, t), &fitting)
                && ideal.is_none_or(|i| !i.beats(self.placer.nodes(), &picks))
            {
                return Some((t.max(now_ms), picks));
            }
        }
    }

    /// With preemption on, requeue enough lower-QOS running jobs for `job` to fit.
    fn try_preempt(&mut self, job: &PendingJob) {
        let config = &self.snap.config;
        if !config.preemption {
            return;
        }
        let Some(qos) = config.qos(job.qos.as_deref()) else {
            return;
        };
        if qos.preempt.is_empty() {
            return;
        }
        let prio_of = |r: &RunningJob| {
            config
                .qos(r.qos.as_deref())
                .map(|q| q.priority)
                .unwrap_or(0)
        };
        // Jobs already being stopped release their resources soon: count them first, and
        // preempt nothing more if that is enough.
        let mut future = self.usage.clone();
        for r in self.snap.running.iter().filter(|r| r.ending) {
            for a in &r.allocation {
                if let Some(&ni) = self.node_index.get(a.node.as_str()) {
                    future[ni].remove(a);
                }
            }
        }
        if self.placer.place_hypothetical(job, &future, &|_| 0).is_ok() {
            return;
        }
        let mut candidates: Vec<&RunningJob> = self
            .snap
            .running
            .iter()
            .filter(|r| {
                !r.ending
                    && !self.victims.contains(&r.id)
                    && r.qos.as_ref().is_some_and(|q| qos.preempt.contains(q))
            })
            .collect();
        candidates.sort_by(|a, b| {
            prio_of(a)
                .cmp(&prio_of(b))
                .then(b.start_ms.cmp(&a.start_ms))
                .then(a.id.cmp(&b.id))
        });
        let mut chosen = Vec::new();
        for victim in candidates {
            for a in &victim.allocation {
                if let Some(&ni) = self.node_index.get(a.node.as_str()) {
                    future[ni].remove(a);
                }
            }
            chosen.push(victim.id);
            if self.placer.place_hypothetical(job, &future, &|_| 0).is_ok() {
                for v in chosen {
                    self.victims.insert(v);
                    self.preemptions.push(Preemption {
                        victim: v,
                        for_job: job.id,
                    });
                }
                return;
            }
        }
    }
}

/// How long a job may wait for its best placement: `topology_wait_s`, no more than its
/// own `--switches` MAX-TIME, and no more than `topology_wait_share` of its time limit.
fn topology_wait_ms(config: &crate::config::SchedConfig, job: &PendingJob) -> u64 {
    let mut cap = config.topology_wait_s.saturating_mul(1000);
    if let Some(wait_s) = job.switches.and_then(|s| s.wait_s) {
        cap = cap.min(wait_s.saturating_mul(1000));
    }
    match (job.time_limit_s, config.topology_wait_share) {
        (Some(t), Some(share)) => cap.min((t as f64 * 1000.0 * share.max(0.0)) as u64),
        _ => cap,
    }
}

/// GPUs on node `ni` that a job ending at `end_ms` must not touch because a backfill
/// hold needs them.
fn held_mask(holds: &[BackfillHold], ni: usize, end_ms: Option<u64>) -> u64 {
    if holds.is_empty() {
        return 0;
    }
    let mut mask = 0u64;
    for r in holds {
        if end_ms.is_some_and(|e| e <= r.start_ms) {
            continue;
        }
        if r.whole_nodes.contains(&ni) {
            return u64::MAX;
        }
        mask |= r.gpus.get(&ni).copied().unwrap_or(0);
    }
    mask
}
