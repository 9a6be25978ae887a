//! `gsim bench-pass`: one full scheduling pass (priority, EASY backfill, topology-aware
//! placement) on a synthetic large cluster, timed over several runs. The same snapshot is
//! also planned with the topology-blind `fifo-backfill` policy as an in-run baseline.

use crate::cluster;
use gsched_scheduler::{NodeView, PendingJob, Policy, RunningJob, SchedConfig, Snapshot, plan};
use gsched_types::job::JobId;
use gsched_types::resources::NodeAlloc;
use serde::Serialize;
use std::sync::Arc;

/// A small deterministic generator (xorshift64*), so runs are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Debug, Serialize)]
pub struct BenchResult {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub pending: u32,
    pub running: usize,
    pub busy_gpu_share: f64,
    pub runs: u32,
    pub pass_ms_p50: f64,
    pub pass_ms_min: f64,
    pub pass_ms_max: f64,
    pub started_per_pass: usize,
    /// None when `GSIM_SKIP_BASELINE` is set.
    pub baseline_fifo_backfill_ms_p50: Option<f64>,
    pub ratio_to_baseline: Option<f64>,
}

/// Builds the synthetic snapshot: about 70% of GPUs busy with 1-8 GPU jobs, a queue of
/// mixed shapes (1, 2, 4, 8 GPUs; some 2-4 node gangs) and time limits.
pub fn snapshot(nodes: u32, gpus_per_node: u32, pending: u32, seed: u64) -> Snapshot {
    let spec = cluster::uniform(nodes, gpus_per_node, None);
    let mut views: Vec<NodeView> = spec.node_views();
    let mut rng = Rng::new(seed);
    let mut running = Vec::new();
    let mut id = 1_000_000u64;
    for (ni, v) in views.iter_mut().enumerate() {
        let mut free: Vec<u32> = (0..gpus_per_node).collect();
        // About 70% of GPUs busy, in 1-, 2- and 4-GPU jobs.
        let target = (gpus_per_node * (50 + rng.below(41) as u32) / 100).min(gpus_per_node);
        while (gpus_per_node - free.len() as u32) < target {
            let want = [1u32, 2, 4][rng.below(3) as usize]
                .min(target - (gpus_per_node - free.len() as u32))
                .max(1);
            let take: Vec<u32> = free.drain(..want as usize).collect();
            let alloc = NodeAlloc {
                node: v.name.clone(),
                gpus: take,
                cpus: vec![],
                mem_mb: 1,
                nic: None,
                exclusive: false,
            };
            v.usage.add(&alloc);
            id += 1;
            running.push(RunningJob {
                id: JobId(id),
                name: format!("r{id}"),
                user: format!("u{}", rng.below(50)),
                account: format!("a{}", rng.below(8)),
                qos: None,
                start_ms: 0,
                time_limit_s: Some(600 + rng.below(86_400)),
                allocation: vec![alloc],
                master_port: 29_500,
                array_job: None,
                ending: false,
            });
        }
        let _ = ni;
    }
    let mut queue = Vec::with_capacity(pending as usize);
    for i in 0..pending {
        let (n, g) = match rng.below(100) {
            0..=49 => (1, 1),
            50..=69 => (1, 2),
            70..=84 => (1, 4),
            85..=94 => (1, gpus_per_node),
            95..=97 => (2, gpus_per_node),
            _ => (4, gpus_per_node),
        };
        let mut p = PendingJob::simple(
            u64::from(i) + 1,
            g,
            Some(600 + rng.below(7 * 86_400)),
            rng.below(86_400_000),
        );
        p.nodes = n;
        p.user = format!("u{}", rng.below(50));
        p.account = format!("a{}", rng.below(8));
        p.mem_mb = Some(1);
        queue.push(p);
    }
    Snapshot {
        config: Arc::new(SchedConfig::default()),
        nodes: views,
        pending: queue,
        running,
        dependencies: Default::default(),
        usage: Vec::new(),
        reservations: Vec::new(),
    }
}

fn time_pass(snap: &Snapshot, runs: u32) -> (Vec<f64>, usize) {
    let mut times = Vec::new();
    let mut started = 0;
    for _ in 0..runs {
        let t = std::time::Instant::now();
        let p = plan(snap, 90_000_000);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        started = p.starts.len();
    }
    times.sort_by(f64::total_cmp);
    (times, started)
}

pub fn bench_pass(nodes: u32, gpus_per_node: u32, pending: u32, runs: u32) -> BenchResult {
    let snap = snapshot(nodes, gpus_per_node, pending, 42);
    let busy: u32 = snap.nodes.iter().map(|n| n.usage.gpus.len()).sum();
    let (times, started) = time_pass(&snap, runs);
    let mut base = snap.clone();
    base.config = Arc::new(SchedConfig {
        policy: Policy::FifoBackfill,
        ..SchedConfig::default()
    });
    let b50 = if std::env::var_os("GSIM_SKIP_BASELINE").is_some() {
        None
    } else {
        let (base_times, _) = time_pass(&base, runs);
        Some(base_times[base_times.len() / 2])
    };
    let p50 = times[times.len() / 2];
    BenchResult {
        nodes,
        gpus_per_node,
        pending,
        running: snap.running.len(),
        busy_gpu_share: f64::from(busy) / f64::from(nodes * gpus_per_node),
        runs,
        pass_ms_p50: p50,
        pass_ms_min: times[0],
        pass_ms_max: *times.last().unwrap_or(&0.0),
        started_per_pass: started,
        baseline_fifo_backfill_ms_p50: b50,
        ratio_to_baseline: b50.map(|b| p50 / b.max(1e-9)),
    }
}
