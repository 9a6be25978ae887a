//! The trace-replay engine: a virtual clock, job arrivals and completions as events, and
//! a scheduling pass (the real `gsched_scheduler::plan`) after every batch of events.
//!
//! Communication model (documented in the README): a trace duration is taken as the run
//! time at the job's best achievable placement. A job's communication share is `c` (0 for
//! 1 GPU, 0.3 within one node, 0.4 across nodes) and its run time at a placement with
//! bottleneck bandwidth `B` is `T * ((1 - c) + c * B_best / B)`. `B` is the nominal
//! bandwidth of the worst GPU-GPU link class inside a node (`LinkClass::nominal_gbps`:
//! NVLink 16.4 GB/s per link, PIX 24, PXB 20, PHB 16, NODE 12, SYS 8) and, across nodes,
//! at most the node's network bandwidth, halved when the nodes hang off different leaf
//! switches. With the model off, placement never changes run time.

use crate::cluster::ClusterSpec;
use crate::trace::{TraceJob, estimate_limit, shape};
use gsched_scheduler::config::SwitchConfig;
use gsched_scheduler::{NodeView, Policy, SchedConfig, plan};
use gsched_state::decide::commands_for;
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::{
    ClusterState, Command, CreateReservation, Envelope, Outcome, RegisterNode, RunExited,
    RunStarted, SetConfig, SubmitJob,
};
use gsched_types::JobSpec;
use gsched_types::job::{JobId, PendingReason};
use gsched_types::reservation::{ReservationSpec, ResvFlags};
use gsched_types::topology::LinkClass;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub policy: Policy,
    pub comm_model: bool,
    pub comm_single_node: f64,
    pub comm_multi_node: f64,
    pub cross_switch_penalty: f64,
    /// Seconds of virtual time between scheduling passes (0: after every event).
    pub pass_interval_s: u64,
    /// The scheduler's `topology_wait_s` (default: the scheduler's default).
    pub topology_wait_s: Option<u64>,
    /// The scheduler's `topology_wait_share` (default: the scheduler's default).
    pub topology_wait_share: Option<f64>,
    /// Priority weights for the gsched policy (default: the scheduler's defaults).
    pub weights: Option<gsched_scheduler::config::PriorityWeights>,
    /// Admin reservations over the replay (times in trace milliseconds). No trace job
    /// runs inside one: they only take GPUs away over their windows.
    pub reservations: Vec<gsched_types::reservation::Reservation>,
}

impl SimOptions {
    pub fn new(policy: Policy, comm_model: bool) -> SimOptions {
        SimOptions {
            policy,
            comm_model,
            comm_single_node: 0.3,
            comm_multi_node: 0.4,
            cross_switch_penalty: 0.5,
            pass_interval_s: 0,
            topology_wait_s: None,
            topology_wait_share: None,
            weights: None,
            reservations: Vec::new(),
        }
    }
}

/// Results for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub policy: String,
    pub jobs: usize,
    pub avg_queue_s: f64,
    pub median_queue_s: f64,
    pub p95_queue_s: f64,
    pub avg_jct_s: f64,
    pub makespan_s: u64,
    /// Allocated GPU-time over (GPUs x makespan).
    pub gpu_utilization: f64,
    /// Multi-GPU jobs placed at their best achievable link class on the fewest nodes.
    pub best_placement_share: f64,
    /// Average queueing delay of multi-GPU jobs (those `best_placement_share` counts).
    pub avg_queue_s_multi_gpu: f64,
    /// Multi-GPU jobs off their best placement, by GPUs asked for and reason.
    pub placement_misses: BTreeMap<u32, PlacementMisses>,
    /// Time-averaged GPUs free while the head of the queue waited for resources.
    pub avg_fragmented_gpus: f64,
    pub avg_slowdown: f64,
    /// Average queueing delay per trace group (Philly virtual cluster).
    pub avg_queue_s_by_group: BTreeMap<String, f64>,
    /// Allocated share of GPUs per simulated day.
    pub allocation_by_day: Vec<f64>,
    pub passes: u64,
    /// Jobs started whose time limit reached into a reservation on their nodes (the
    /// scheduler must keep this at 0).
    pub reservation_overlaps: u64,
    pub wall_s: f64,
}

/// Why multi-GPU jobs of one size were not on their best placement (a job may count under
/// several reasons).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PlacementMisses {
    pub jobs: u64,
    /// The GPU set's worst link was slower than the best set an empty node offers.
    pub slower_link: u64,
    /// Spread over more nodes than the job needs.
    pub extra_nodes: u64,
    /// Its nodes hang off more than one leaf switch.
    pub cross_switch: u64,
}

/// The representative link class of a tier (for bandwidths).
fn tier_class(tier: u8) -> LinkClass {
    match tier {
        0 => LinkClass::NvLink(4),
        1 => LinkClass::Pix,
        2 => LinkClass::Pxb,
        3 => LinkClass::Phb,
        4 => LinkClass::Node,
        _ => LinkClass::Sys,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn run(spec: &ClusterSpec, trace: &[TraceJob], opts: &SimOptions) -> SimResult {
    let wall = std::time::Instant::now();
    let mut sim = Engine::new(spec, trace, opts);
    while let Some((t, tick)) = sim.next_event() {
        sim.account_until(t);
        sim.complete_until(t);
        sim.arrive_until(t);
        if sim.pass_is_due(t, tick) {
            sim.pass(t);
        }
    }
    sim.result(wall.elapsed().as_secs_f64())
}

/// One replay: the virtual clock, the cluster's books kept by the production state
/// machine (`ClusterState`, fed the commands the controller would commit), the hardware
/// the communication model reads, and what the replay measured so far.
struct Engine<'a> {
    spec: &'a ClusterSpec,
    trace: &'a [TraceJob],
    opts: &'a SimOptions,
    state: ClusterState,
    views: ViewCache,
    /// The simulated nodes' wiring and leaf switches (for placement quality), by name.
    hardware: BTreeMap<String, NodeView>,
    max_per_node: u32,
    total_gpus: u32,
    /// Best achievable worst-link tier for a single-node job of g GPUs.
    best_tier: Vec<Option<u8>>,
    start_s: u64,
    next_arrival: usize,
    /// Trace index of each submitted job.
    trace_of: BTreeMap<JobId, usize>,
    pending: usize,
    /// GPUs each running job holds.
    running: BTreeMap<JobId, u32>,
    completions: BinaryHeap<Reverse<(u64, JobId)>>,
    queue_delays: Vec<f64>,
    group_delays: BTreeMap<String, (f64, u64)>,
    jcts: Vec<f64>,
    slowdowns: Vec<f64>,
    multi_jobs: u64,
    best_placed: u64,
    misses: BTreeMap<u32, PlacementMisses>,
    multi_gpu_delay_s: f64,
    reservation_overlaps: u64,
    allocated_gpus: u32,
    busy_gpu_s: f64,
    frag_gpu_s: f64,
    head_blocked: bool,
    day_busy: Vec<f64>,
    last_t: u64,
    last_pass: u64,
    passes: u64,
    last_end: u64,
    pass_due: bool,
}

/// The scheduler configuration of a replay: the policy and weights asked for, fair share
/// and age on a day's scale, no pass cap, no queue limits, and the nodes' leaf switches.
fn sim_config(nodes: &[NodeView], opts: &SimOptions) -> SchedConfig {
    let mut config = SchedConfig {
        policy: opts.policy,
        ..SchedConfig::default()
    };
    if let Some(w) = &opts.weights {
        config.weights = w.clone();
    }
    if let Some(w) = opts.topology_wait_s {
        config.topology_wait_s = w;
    }
    if opts.topology_wait_share.is_some() {
        config.topology_wait_share = opts.topology_wait_share;
    }
    config.fairshare_half_life_s = 86_400;
    config.max_age_s = 86_400;
    config.max_jobs_per_pass = 100_000;
    config.limits.max_job_count = u64::MAX / 2;
    config.limits.finished_jobs_kept = 1_000;
    let mut by_switch: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in nodes {
        if let Some(sw) = &n.switch {
            by_switch
                .entry(sw.clone())
                .or_default()
                .push(n.name.clone());
        }
    }
    config.switches = by_switch
        .into_iter()
        .map(|(name, members)| SwitchConfig {
            name,
            nodes: Some(members.join(",")),
            switches: Vec::new(),
            link_gbps: None,
        })
        .collect();
    config
}

impl<'a> Engine<'a> {
    fn new(spec: &'a ClusterSpec, trace: &'a [TraceJob], opts: &'a SimOptions) -> Engine<'a> {
        let nodes = spec.node_views();
        let max_per_node = spec.max_gpus_per_node();
        let best_tier: Vec<Option<u8>> = (0..=max_per_node)
            .map(|g| {
                nodes
                    .iter()
                    .filter(|n| n.capacity.gpu_count >= g && g > 0)
                    .filter_map(|n| {
                        n.topo
                            .best_set(n.free_gpu_mask(), g)
                            .map(|c| c.quality.worst_tier)
                    })
                    .min()
            })
            .collect();
        let start_s = trace.first().map(|j| j.submit_s).unwrap_or(0);
        let mut state = ClusterState::default();
        let at = start_s * 1000;
        let mut commit = |cmd| state.apply(&Envelope::new(cmd, at, None));
        commit(Command::SetConfig(SetConfig {
            config: Box::new(sim_config(&nodes, opts)),
        }));
        for n in &nodes {
            let topology = spec
                .topology_of(&n.name)
                .expect("every simulated node has a class")
                .clone();
            let outcome = commit(Command::RegisterNode(RegisterNode {
                name: n.name.clone(),
                address: String::new(),
                training_addr: n.training_addr.clone(),
                topology,
                features: Vec::new(),
                agent_version: "gsim".into(),
                known_runs: Vec::new(),
            }));
            assert_eq!(outcome, Outcome::Ok, "simulated node {} registers", n.name);
        }
        for r in &opts.reservations {
            let outcome = commit(Command::CreateReservation(CreateReservation {
                spec: ReservationSpec {
                    name: r.name.clone(),
                    start_ms: Some(r.start_ms),
                    end_ms: Some(r.end_ms),
                    duration_s: None,
                    users: Some(vec!["gsim-admin".into()]),
                    accounts: None,
                    resources: Some(r.request.clone()),
                    flags: Some(ResvFlags {
                        ignore_jobs: true,
                        ..r.flags
                    }),
                },
                by: "gsim".into(),
                admin: true,
            }));
            assert!(
                matches!(outcome, Outcome::Ok | Outcome::Acted(_)),
                "reservation {}: {outcome:?}",
                r.name
            );
        }
        Engine {
            spec,
            trace,
            opts,
            state,
            views: ViewCache::default(),
            hardware: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
            max_per_node,
            total_gpus: spec.total_gpus(),
            best_tier,
            start_s,
            next_arrival: 0,
            trace_of: BTreeMap::new(),
            pending: 0,
            running: BTreeMap::new(),
            completions: BinaryHeap::new(),
            queue_delays: Vec::with_capacity(trace.len()),
            group_delays: BTreeMap::new(),
            jcts: Vec::with_capacity(trace.len()),
            slowdowns: Vec::new(),
            multi_jobs: 0,
            misses: BTreeMap::new(),
            multi_gpu_delay_s: 0.0,
            best_placed: 0,
            reservation_overlaps: 0,
            allocated_gpus: 0,
            busy_gpu_s: 0.0,
            frag_gpu_s: 0.0,
            head_blocked: false,
            day_busy: Vec::new(),
            last_t: start_s,
            last_pass: 0,
            passes: 0,
            last_end: start_s,
            pass_due: false,
        }
    }

    /// Applies a command at virtual time `t` (seconds) as a committed log entry.
    fn commit(&mut self, t: u64, cmd: Command) -> Outcome {
        self.state.apply(&Envelope::new(cmd, t * 1000, None))
    }

    /// The next moment something happens (an arrival, a completion, a pass tick), and the
    /// tick's time if passes are spaced.
    fn next_event(&self) -> Option<(u64, Option<u64>)> {
        let t_arr = self.trace.get(self.next_arrival).map(|j| j.submit_s);
        let t_done = self.completions.peek().map(|Reverse((t, _))| *t);
        let t_tick = (self.opts.pass_interval_s > 0 && self.pass_due)
            .then_some(self.last_pass + self.opts.pass_interval_s);
        // A window's end frees its GPUs: pass then, as the controller would within a second.
        let t_window = (self.pending > 0)
            .then(|| {
                self.opts
                    .reservations
                    .iter()
                    .map(|r| r.end_ms.div_ceil(1000))
                    .filter(|e| *e > self.last_t)
                    .min()
            })
            .flatten();
        let t = [t_arr, t_done, t_tick, t_window]
            .into_iter()
            .flatten()
            .min()?;
        let tick = if t_window == Some(t) { Some(t) } else { t_tick };
        Some((t, tick))
    }

    /// Busy and fragmented GPU time, and the allocation per day, over [last_t, t).
    fn account_until(&mut self, t: u64) {
        let dt = t.saturating_sub(self.last_t) as f64;
        self.busy_gpu_s += dt * f64::from(self.allocated_gpus);
        if self.head_blocked {
            self.frag_gpu_s += dt * f64::from(self.total_gpus - self.allocated_gpus);
        }
        let mut cursor = self.last_t;
        while cursor < t {
            let day = ((cursor - self.start_s) / 86_400) as usize;
            let day_end = self.start_s + (day as u64 + 1) * 86_400;
            let until = day_end.min(t);
            if self.day_busy.len() <= day {
                self.day_busy.resize(day + 1, 0.0);
            }
            self.day_busy[day] += (until - cursor) as f64 * f64::from(self.allocated_gpus);
            cursor = until;
        }
        self.last_t = t;
    }

    /// Jobs that end by `t`: each of their nodes reports its run's exit, as an agent
    /// would, and the state machine frees the GPUs and charges the usage.
    fn complete_until(&mut self, t: u64) {
        while self
            .completions
            .peek()
            .is_some_and(|Reverse((tc, _))| *tc <= t)
        {
            let Reverse((tc, id)) = self.completions.pop().expect("peeked");
            if let Some(gpus) = self.running.remove(&id) {
                let (attempt, nodes) = self.placement_of(id);
                for node in nodes {
                    self.commit(
                        tc,
                        Command::RunExited(RunExited {
                            job: id,
                            attempt,
                            node,
                            code: Some(0),
                            signal: None,
                            failure: None,
                            usage: None,
                        }),
                    );
                }
                self.allocated_gpus -= gpus;
                self.last_end = self.last_end.max(tc);
            }
            self.pass_due = true;
        }
    }

    /// The attempt a running job is on and the nodes it runs on.
    fn placement_of(&self, id: JobId) -> (u32, Vec<String>) {
        let job = &self.state.jobs[&id];
        let nodes = job
            .allocation
            .as_ref()
            .map(|a| a.nodes.iter().map(|n| n.node.clone()).collect())
            .unwrap_or_default();
        (job.attempt, nodes)
    }

    /// Jobs submitted by `t` are submitted as `gsub` would.
    fn arrive_until(&mut self, t: u64) {
        while self
            .trace
            .get(self.next_arrival)
            .is_some_and(|j| j.submit_s <= t)
        {
            let j = &self.trace[self.next_arrival];
            let (nodes, gpus) = shape(j.gpus, self.max_per_node);
            let mut spec = JobSpec::simple(&j.id, &j.group, "#!/bin/sh\ntrue\n");
            spec.account = Some(j.group.clone());
            spec.nodes = nodes;
            spec.ntasks = nodes;
            spec.gpus_per_node = gpus;
            spec.time_limit_s = Some(estimate_limit(j.duration_s));
            spec.mem_mb = Some(1);
            spec.workdir = "/".into();
            spec.submit_dir = "/".into();
            match self.commit(j.submit_s, Command::SubmitJob(SubmitJob { spec })) {
                Outcome::Submitted { jobs } => {
                    for id in jobs {
                        self.trace_of.insert(id, self.next_arrival);
                        self.pending += 1;
                    }
                }
                other => panic!("trace job {} was refused: {other:?}", j.id),
            }
            self.next_arrival += 1;
            self.pass_due = true;
        }
    }

    fn pass_is_due(&self, t: u64, tick: Option<u64>) -> bool {
        let interval = self.opts.pass_interval_s;
        self.pass_due && !(interval > 0 && t < self.last_pass + interval && tick != Some(t))
    }

    /// One scheduling pass at `t`, as the leader runs it: the production snapshot of the
    /// committed state, `plan()`, and the commands the plan becomes, committed; the jobs
    /// that start begin running.
    fn pass(&mut self, t: u64) {
        self.pass_due = false;
        self.last_pass = t;
        self.passes += 1;
        if self.pending == 0 {
            self.head_blocked = false;
            return;
        }
        let snap = snapshot(&self.state, &mut self.views);
        let p = plan(&snap, t * 1000);
        // The head of the queue (highest priority) waiting for resources means the free
        // GPUs are fragmented for it.
        let started: std::collections::BTreeSet<JobId> = p.starts.iter().map(|s| s.job).collect();
        let head = p
            .priorities
            .iter()
            .find(|(id, _)| !started.contains(id))
            .map(|(id, _)| *id);
        self.head_blocked = head.is_some_and(|h| {
            p.reasons
                .iter()
                .any(|(id, r)| *id == h && *r == PendingReason::Resources)
        });
        for cmd in commands_for(p, &self.state) {
            if let Outcome::Started { started, .. } = self.commit(t, cmd) {
                for id in started {
                    self.start(t, id);
                }
            }
        }
    }

    /// A committed start at `t`: each node reports its run started, the job runs for its
    /// trace duration (slowed by the communication model), and its placement quality is
    /// recorded.
    fn start(&mut self, t: u64, id: JobId) {
        let Some(&index) = self.trace_of.get(&id) else {
            return;
        };
        self.pending -= 1;
        let trace_job = &self.trace[index];
        let job = &self.state.jobs[&id];
        let alloc = job
            .allocation
            .clone()
            .expect("a started job has an allocation");
        let (job_nodes, gpus_per_node) = (job.spec.nodes, job.spec.gpus_per_node);
        let limit_end_ms = job.spec.time_limit_s.map(|l| (t + l) * 1000);
        let overlaps = self.opts.reservations.iter().any(|r| {
            r.end_ms > t * 1000
                && r.start_ms < limit_end_ms.unwrap_or(u64::MAX)
                && alloc.nodes.iter().any(|a| {
                    r.nodes.iter().any(|n| {
                        n.node == a.node && (n.whole || a.gpus.iter().any(|g| n.gpus.contains(g)))
                    })
                })
        });
        if overlaps {
            self.reservation_overlaps += 1;
        }
        let (attempt, nodes) = self.placement_of(id);
        for node in nodes {
            self.commit(
                t,
                Command::RunStarted(RunStarted {
                    job: id,
                    attempt,
                    node,
                    pid: None,
                }),
            );
        }
        let mut worst_tier = 0u8;
        let mut switches: Vec<Option<String>> = Vec::new();
        for a in &alloc.nodes {
            let n = &self.hardware[&a.node];
            let mask = a.gpus.iter().fold(0u64, |m, g| m | (1u64 << g));
            worst_tier = worst_tier.max(n.topo.quality(mask).worst_tier);
            switches.push(n.switch.clone());
        }
        switches.sort();
        switches.dedup();
        let gpus = job_nodes * gpus_per_node;
        let min_nodes = gpus.div_ceil(self.max_per_node);
        let best_single = self
            .best_tier
            .get(gpus_per_node as usize)
            .copied()
            .flatten()
            .unwrap_or(worst_tier);
        let best = if job_nodes == 1 {
            best_single
        } else {
            worst_tier.min(best_single)
        };
        if gpus > 1 {
            self.multi_jobs += 1;
            let slower_link = worst_tier > best;
            let extra_nodes = job_nodes != min_nodes;
            let cross_switch = switches.len() > 1;
            if slower_link || extra_nodes || cross_switch {
                let m = self.misses.entry(gpus).or_default();
                m.jobs += 1;
                m.slower_link += u64::from(slower_link);
                m.extra_nodes += u64::from(extra_nodes);
                m.cross_switch += u64::from(cross_switch);
            } else {
                self.best_placed += 1;
            }
        }
        let slowdown = if self.opts.comm_model && gpus > 1 {
            let c = if job_nodes > 1 {
                self.opts.comm_multi_node
            } else {
                self.opts.comm_single_node
            };
            let mut bw = tier_class(worst_tier).nominal_gbps();
            let mut best_bw = tier_class(best).nominal_gbps();
            if job_nodes > 1 {
                let net = self.spec.network_gbps
                    * if switches.len() > 1 {
                        self.opts.cross_switch_penalty
                    } else {
                        1.0
                    };
                bw = bw.min(net);
                best_bw = best_bw.min(self.spec.network_gbps);
            }
            (1.0 - c) + c * (best_bw / bw).max(1.0)
        } else {
            1.0
        };
        self.slowdowns.push(slowdown);
        let run_s = ((trace_job.duration_s as f64) * slowdown).ceil() as u64;
        let end = t + run_s.max(1);
        self.completions.push(Reverse((end, id)));
        self.queue_delays.push((t - trace_job.submit_s) as f64);
        if gpus > 1 {
            self.multi_gpu_delay_s += (t - trace_job.submit_s) as f64;
        }
        let g = self
            .group_delays
            .entry(trace_job.group.clone())
            .or_default();
        g.0 += (t - trace_job.submit_s) as f64;
        g.1 += 1;
        self.jcts.push((end - trace_job.submit_s) as f64);
        self.allocated_gpus += gpus;
        self.running.insert(id, gpus);
    }

    fn result(self, wall_s: f64) -> SimResult {
        let makespan = self.last_end.saturating_sub(self.start_s);
        let mut sorted = self.queue_delays.clone();
        sorted.sort_by(f64::total_cmp);
        let n = self.queue_delays.len().max(1) as f64;
        SimResult {
            policy: self.opts.policy.name().into(),
            jobs: self.queue_delays.len(),
            avg_queue_s: self.queue_delays.iter().sum::<f64>() / n,
            median_queue_s: percentile(&sorted, 0.5),
            p95_queue_s: percentile(&sorted, 0.95),
            avg_jct_s: self.jcts.iter().sum::<f64>() / n,
            makespan_s: makespan,
            gpu_utilization: if makespan > 0 {
                self.busy_gpu_s / (f64::from(self.total_gpus) * makespan as f64)
            } else {
                0.0
            },
            best_placement_share: if self.multi_jobs > 0 {
                self.best_placed as f64 / self.multi_jobs as f64
            } else {
                1.0
            },
            avg_queue_s_multi_gpu: self.multi_gpu_delay_s / self.multi_jobs.max(1) as f64,
            placement_misses: self.misses,
            avg_fragmented_gpus: if makespan > 0 {
                self.frag_gpu_s / makespan as f64
            } else {
                0.0
            },
            avg_slowdown: self.slowdowns.iter().sum::<f64>() / self.slowdowns.len().max(1) as f64,
            avg_queue_s_by_group: self
                .group_delays
                .into_iter()
                .map(|(g, (sum, n))| (g, sum / n.max(1) as f64))
                .collect(),
            allocation_by_day: self
                .day_busy
                .iter()
                .map(|b| b / (f64::from(self.total_gpus) * 86_400.0))
                .collect(),
            passes: self.passes,
            reservation_overlaps: self.reservation_overlaps,
            wall_s,
        }
    }
}
