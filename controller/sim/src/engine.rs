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
use gsched_scheduler::decay::decay;
use gsched_scheduler::{
    NodeView, PendingJob, Policy, RunningJob, SchedConfig, Snapshot, UsageRecord, plan,
};
use gsched_types::job::{JobId, PendingReason};
use gsched_types::resources::NodeAlloc;
use gsched_types::topology::LinkClass;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub policy: Policy,
    pub comm_model: bool,
    pub comm_single_node: f64,
    pub comm_multi_node: f64,
    pub cross_switch_penalty: f64,
    /// Seconds of virtual time between scheduling passes (0: after every event).
    pub pass_interval_s: u64,
    /// Priority weights for the gsched policy (default: the scheduler's defaults).
    pub weights: Option<gsched_scheduler::config::PriorityWeights>,
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
            weights: None,
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
    /// Time-averaged GPUs free while the head of the queue waited for resources.
    pub avg_fragmented_gpus: f64,
    pub avg_slowdown: f64,
    /// Average queueing delay per trace group (Philly virtual cluster).
    pub avg_queue_s_by_group: BTreeMap<String, f64>,
    /// Allocated share of GPUs per simulated day.
    pub allocation_by_day: Vec<f64>,
    pub passes: u64,
    pub wall_s: f64,
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

struct Running {
    job: RunningJob,
    gpus: u32,
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
    let mut config = SchedConfig {
        policy: opts.policy,
        ..SchedConfig::default()
    };
    if let Some(w) = &opts.weights {
        config.weights = w.clone();
    }
    config.fairshare_half_life_s = 86_400;
    config.max_age_s = 86_400;
    config.max_jobs_per_pass = 100_000;
    let config = Arc::new(config);
    let mut nodes = spec.node_views();
    let node_index: BTreeMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let max_per_node = spec.max_gpus_per_node();
    let total_gpus = spec.total_gpus();
    // Best achievable worst-link tier for a single-node job of g GPUs.
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
    let mut next_arrival = 0usize;
    let mut pending: BTreeMap<JobId, PendingJob> = BTreeMap::new();
    let mut running: BTreeMap<JobId, Running> = BTreeMap::new();
    let mut completions: BinaryHeap<Reverse<(u64, JobId)>> = BinaryHeap::new();
    // Decayed usage per (account, user), as the controller keeps it (`ClusterState::usage`).
    let mut usage: BTreeMap<(String, String), UsageRecord> = BTreeMap::new();
    let mut queue_delays: Vec<f64> = Vec::with_capacity(trace.len());
    let mut group_delays: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    let mut jcts: Vec<f64> = Vec::with_capacity(trace.len());
    let mut slowdowns: Vec<f64> = Vec::new();
    let (mut multi_jobs, mut best_placed) = (0u64, 0u64);
    let mut allocated_gpus = 0u32;
    let mut busy_gpu_s = 0.0f64;
    let mut frag_gpu_s = 0.0f64;
    let mut head_blocked = false;
    let mut day_busy: Vec<f64> = Vec::new();
    let mut last_t = start_s;
    let mut last_pass = 0u64;
    let mut passes = 0u64;
    let mut last_end = start_s;
    let mut pass_due = false;
    loop {
        let t_arr = trace.get(next_arrival).map(|j| j.submit_s);
        let t_done = completions.peek().map(|Reverse((t, _))| *t);
        let t_tick =
            (opts.pass_interval_s > 0 && pass_due).then_some(last_pass + opts.pass_interval_s);
        let Some(t) = [t_arr, t_done, t_tick].into_iter().flatten().min() else {
            break;
        };
        // Integrate busy GPUs and fragmentation over [last_t, t).
        let dt = t.saturating_sub(last_t) as f64;
        busy_gpu_s += dt * f64::from(allocated_gpus);
        if head_blocked {
            frag_gpu_s += dt * f64::from(total_gpus - allocated_gpus);
        }
        let mut cursor = last_t;
        while cursor < t {
            let day = ((cursor - start_s) / 86_400) as usize;
            let day_end = start_s + (day as u64 + 1) * 86_400;
            let until = day_end.min(t);
            if day_busy.len() <= day {
                day_busy.resize(day + 1, 0.0);
            }
            day_busy[day] += (until - cursor) as f64 * f64::from(allocated_gpus);
            cursor = until;
        }
        last_t = t;
        while completions.peek().is_some_and(|Reverse((tc, _))| *tc <= t) {
            let Reverse((tc, id)) = completions.pop().expect("peeked");
            if let Some(r) = running.remove(&id) {
                for a in &r.job.allocation {
                    nodes[node_index[&a.node]].usage.remove(a);
                }
                allocated_gpus -= r.gpus;
                let key = (r.job.account.clone(), r.job.user.clone());
                let u = usage.entry(key).or_insert(UsageRecord {
                    account: r.job.account.clone(),
                    user: r.job.user.clone(),
                    gpu_seconds: 0.0,
                    at_ms: tc * 1000,
                });
                u.gpu_seconds = decay(
                    u.gpu_seconds,
                    u.at_ms,
                    tc * 1000,
                    config.fairshare_half_life_s,
                ) + f64::from(r.gpus) * (tc - r.job.start_ms / 1000) as f64;
                u.at_ms = tc * 1000;
                last_end = last_end.max(tc);
            }
            pass_due = true;
        }
        while trace.get(next_arrival).is_some_and(|j| j.submit_s <= t) {
            let j = &trace[next_arrival];
            let (n, g) = shape(j.gpus, max_per_node);
            let mut p = PendingJob::simple(
                next_arrival as u64 + 1,
                g,
                Some(estimate_limit(j.duration_s)),
                j.submit_s * 1000,
            );
            p.nodes = n;
            p.account = j.group.clone();
            p.user = j.group.clone();
            p.name = j.id.clone();
            p.cpus_per_node = 1;
            p.mem_mb = Some(1);
            pending.insert(p.id, p);
            next_arrival += 1;
            pass_due = true;
        }
        if !pass_due
            || (opts.pass_interval_s > 0
                && t < last_pass + opts.pass_interval_s
                && t_tick != Some(t))
        {
            continue;
        }
        pass_due = false;
        last_pass = t;
        passes += 1;
        if pending.is_empty() {
            head_blocked = false;
            continue;
        }
        let snap = Snapshot {
            config: config.clone(),
            nodes: nodes.clone(),
            pending: pending.values().cloned().collect(),
            running: running.values().map(|r| r.job.clone()).collect(),
            dependencies: Default::default(),
            usage: usage.values().cloned().collect(),
        };
        let p = plan(&snap, t * 1000);
        // The head of the queue (highest priority) waiting for resources means the free
        // GPUs are fragmented for it.
        let started: std::collections::BTreeSet<JobId> = p.starts.iter().map(|s| s.job).collect();
        let head = p
            .priorities
            .iter()
            .find(|(id, _)| !started.contains(id))
            .map(|(id, _)| *id);
        head_blocked = head.is_some_and(|h| {
            p.reasons
                .iter()
                .any(|(id, r)| *id == h && *r == PendingReason::Resources)
        });
        for s in p.starts {
            let Some(job) = pending.remove(&s.job) else {
                continue;
            };
            let trace_job = &trace[(job.id.0 - 1) as usize];
            let mut worst_tier = 0u8;
            let mut switches: Vec<Option<String>> = Vec::new();
            for a in &s.allocation.nodes {
                let n = &mut nodes[node_index[&a.node]];
                n.usage.add(a);
                let mask = a.gpus.iter().fold(0u64, |m, g| m | (1u64 << g));
                worst_tier = worst_tier.max(n.topo.quality(mask).worst_tier);
                switches.push(n.switch.clone());
            }
            switches.sort();
            switches.dedup();
            let gpus = job.total_gpus();
            let min_nodes = gpus.div_ceil(max_per_node);
            let best = if job.nodes == 1 {
                best_tier
                    .get(job.gpus_per_node as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(worst_tier)
            } else {
                worst_tier.min(
                    best_tier
                        .get(job.gpus_per_node as usize)
                        .copied()
                        .flatten()
                        .unwrap_or(worst_tier),
                )
            };
            if gpus > 1 {
                multi_jobs += 1;
                if worst_tier <= best && job.nodes == min_nodes && switches.len() <= 1 {
                    best_placed += 1;
                }
            }
            let slowdown = if opts.comm_model && gpus > 1 {
                let c = if job.nodes > 1 {
                    opts.comm_multi_node
                } else {
                    opts.comm_single_node
                };
                let mut bw = tier_class(worst_tier).nominal_gbps();
                let mut best_bw = tier_class(best).nominal_gbps();
                if job.nodes > 1 {
                    let net = spec.network_gbps
                        * if switches.len() > 1 {
                            opts.cross_switch_penalty
                        } else {
                            1.0
                        };
                    bw = bw.min(net);
                    best_bw = best_bw.min(spec.network_gbps);
                }
                (1.0 - c) + c * (best_bw / bw).max(1.0)
            } else {
                1.0
            };
            slowdowns.push(slowdown);
            let run_s = ((trace_job.duration_s as f64) * slowdown).ceil() as u64;
            let end = t + run_s.max(1);
            completions.push(Reverse((end, job.id)));
            queue_delays.push((t - trace_job.submit_s) as f64);
            let g = group_delays.entry(trace_job.group.clone()).or_default();
            g.0 += (t - trace_job.submit_s) as f64;
            g.1 += 1;
            jcts.push((end - trace_job.submit_s) as f64);
            allocated_gpus += gpus;
            let nodes_alloc: Vec<NodeAlloc> = s.allocation.nodes;
            running.insert(
                job.id,
                Running {
                    job: RunningJob {
                        id: job.id,
                        name: job.name.clone(),
                        user: job.user.clone(),
                        account: job.account.clone(),
                        qos: None,
                        start_ms: t * 1000,
                        time_limit_s: job.time_limit_s,
                        allocation: nodes_alloc,
                        master_port: s.allocation.master_port,
                        array_job: None,
                        ending: false,
                    },
                    gpus,
                },
            );
        }
    }
    let makespan = last_end.saturating_sub(start_s);
    let mut sorted = queue_delays.clone();
    sorted.sort_by(f64::total_cmp);
    let n = queue_delays.len().max(1) as f64;
    SimResult {
        policy: opts.policy.name().into(),
        jobs: queue_delays.len(),
        avg_queue_s: queue_delays.iter().sum::<f64>() / n,
        median_queue_s: percentile(&sorted, 0.5),
        p95_queue_s: percentile(&sorted, 0.95),
        avg_jct_s: jcts.iter().sum::<f64>() / n,
        makespan_s: makespan,
        gpu_utilization: if makespan > 0 {
            busy_gpu_s / (f64::from(total_gpus) * makespan as f64)
        } else {
            0.0
        },
        best_placement_share: if multi_jobs > 0 {
            best_placed as f64 / multi_jobs as f64
        } else {
            1.0
        },
        avg_fragmented_gpus: if makespan > 0 {
            frag_gpu_s / makespan as f64
        } else {
            0.0
        },
        avg_slowdown: slowdowns.iter().sum::<f64>() / slowdowns.len().max(1) as f64,
        avg_queue_s_by_group: group_delays
            .into_iter()
            .map(|(g, (sum, n))| (g, sum / n.max(1) as f64))
            .collect(),
        allocation_by_day: day_busy
            .iter()
            .map(|b| b / (f64::from(total_gpus) * 86_400.0))
            .collect(),
        passes,
        wall_s: wall.elapsed().as_secs_f64(),
    }
}

/// A node view helper for tests: total free GPUs.
pub fn free_gpus(nodes: &[NodeView]) -> u32 {
    nodes.iter().map(|n| n.free_gpu_mask().count_ones()).sum()
}
