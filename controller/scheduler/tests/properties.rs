//! Property tests of one scheduling pass: nothing is double-booked, gangs are all or
//! nothing with identical GPU counts, and backfill never delays the top job's backfill hold.

use gsched_scheduler::{NodeView, PendingJob, Policy, RunningJob, SchedConfig, Snapshot, plan};
use gsched_types::job::JobId;
use gsched_types::resources::{NodeAlloc, fits};
use gsched_types::topology::{Gpu, LinkClass, Topology};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

fn topology(kind: u8) -> Topology {
    let n = [2u32, 4, 8][kind as usize % 3];
    let mut t = Topology::empty("prop");
    for i in 0..n {
        let mut g = Gpu::new(i);
        g.numa_node = Some(i / 4);
        t.gpus.push(g);
    }
    t.gpu_links = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        LinkClass::SameDevice
                    } else if i / 2 == j / 2 {
                        LinkClass::NvLink(4)
                    } else if i / 4 == j / 4 {
                        LinkClass::Pxb
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    t.numa_nodes = (0..n.div_ceil(4))
        .map(|s| gsched_types::topology::NumaNode {
            id: s,
            cpus: format!("{}-{}", s * 16, s * 16 + 15),
            memory_mib: Some(64 * 1024),
        })
        .collect();
    t.memory_mib = Some(64 * 1024 * u64::from(n.div_ceil(4)));
    t
}

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<(u8, Vec<bool>, Option<u64>)>,
    jobs: Vec<(u32, u32, u64, u64)>,
    policy: Policy,
}

fn case() -> impl Strategy<Value = Case> {
    let node = (
        0u8..3,
        proptest::collection::vec(any::<bool>(), 8),
        proptest::option::of(60u64..3600),
    );
    let job = (1u32..=3, 1u32..=8, 60u64..7200, 0u64..1000);
    (
        proptest::collection::vec(node, 1..6),
        proptest::collection::vec(job, 1..30),
        prop_oneof![
            Just(Policy::Gsched),
            Just(Policy::FifoBackfill),
            Just(Policy::Fifo)
        ],
    )
        .prop_map(|(nodes, jobs, policy)| Case {
            nodes,
            jobs,
            policy,
        })
}

/// Builds the snapshot: each node's busy GPUs belong to one running job with the given
/// time limit (or none: unlimited).
fn build(c: &Case) -> Snapshot {
    let mut nodes = Vec::new();
    let mut running = Vec::new();
    for (i, (kind, busy, limit)) in c.nodes.iter().enumerate() {
        let t = topology(*kind);
        let mut v = NodeView::from_topology(&format!("n{i}"), &t, "10.0.0.1");
        let gpus: Vec<u32> = (0..t.gpus.len() as u32)
            .filter(|g| busy[*g as usize])
            .collect();
        if !gpus.is_empty() {
            let a = NodeAlloc {
                node: v.name.clone(),
                gpus,
                cpus: vec![],
                mem_mb: 1,
                nic: None,
                exclusive: false,
            };
            v.usage.add(&a);
            running.push(RunningJob {
                id: JobId(10_000 + i as u64),
                name: "r".into(),
                user: "other".into(),
                account: "x".into(),
                qos: None,
                start_ms: 0,
                time_limit_s: *limit,
                allocation: vec![a],
                master_port: 29_500,
                array_job: None,
                ending: false,
            });
        }
        nodes.push(v);
    }
    let pending = c
        .jobs
        .iter()
        .enumerate()
        .map(|(i, (n, g, limit, age))| {
            let mut p = PendingJob::simple(i as u64 + 1, *g, Some(*limit), *age);
            p.nodes = *n;
            p.mem_mb = Some(1);
            p
        })
        .collect();
    let config = SchedConfig {
        policy: c.policy,
        ..SchedConfig::default()
    };
    Snapshot {
        config: Arc::new(config),
        nodes,
        pending,
        running,
        dependencies: Default::default(),
        usage: Vec::new(),
        reservations: Vec::new(),
    }
}

/// Spreads the jobs of a case over several users and accounts with decayed usage, so
/// fair share has sums to make.
fn with_users(mut snap: Snapshot) -> Snapshot {
    for (i, j) in snap.pending.iter_mut().enumerate() {
        j.user = format!("u{}", i % 7);
        j.account = format!("a{}", i % 3);
    }
    snap.usage = (0..21)
        .map(|i| gsched_scheduler::UsageRecord {
            account: format!("a{}", i % 3),
            user: format!("u{}", i % 7),
            gpu_seconds: 1000.0 / (i as f64 + 0.37) + 0.1 * i as f64,
            at_ms: 1_000 * i,
        })
        .collect();
    snap
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// One pass is a function of its snapshot alone: equal snapshots (whose maps have
    /// different hash seeds) give equal plans, down to the last bit of every priority.
    #[test]
    fn the_plan_is_a_function_of_the_snapshot(c in case()) {
        let snap = with_users(build(&c));
        let copy = snap.clone();
        prop_assert_eq!(plan(&snap, 50_000), plan(&copy, 50_000));
    }

    #[test]
    fn no_double_booking_and_gangs_are_whole(c in case()) {
        let snap = build(&c);
        let p = plan(&snap, 5_000);
        let mut usage: HashMap<String, gsched_types::resources::NodeUsage> = snap.nodes.iter().map(|n| (n.name.clone(), n.usage.clone())).collect();
        let caps: HashMap<String, gsched_types::resources::NodeCapacity> = snap.nodes.iter().map(|n| (n.name.clone(), n.capacity.clone())).collect();
        // MASTER_PORTs are unique per training address (every node here shares one, as
        // agents splitting a machine do), running jobs' included.
        let mut ports = std::collections::HashSet::new();
        for r in &snap.running {
            ports.insert(("10.0.0.1".to_string(), r.master_port));
        }
        for s in &p.starts {
            let job = snap.pending.iter().find(|j| j.id == s.job).unwrap();
            prop_assert_eq!(s.allocation.nodes.len() as u32, job.nodes, "gang of job {} is not whole", job.id);
            let mut names: Vec<&String> = s.allocation.nodes.iter().map(|a| &a.node).collect();
            names.sort();
            names.dedup();
            prop_assert_eq!(names.len() as u32, job.nodes, "a node appears twice in job {}", job.id);
            for a in &s.allocation.nodes {
                prop_assert_eq!(a.gpus.len() as u32, job.gpus_per_node);
                let u = usage.get_mut(&a.node).unwrap();
                prop_assert!(fits(&caps[&a.node], u, a).is_ok(), "job {} double-books {}", job.id, a.node);
                u.add(a);
            }
            prop_assert!(ports.insert((s.allocation.master_addr.clone(), s.allocation.master_port)), "port {} reused on {}", s.allocation.master_port, s.allocation.master_addr);
        }
        // Every pending job that did not start has a reason.
        for j in &snap.pending {
            let started = p.starts.iter().any(|s| s.job == j.id);
            let reasoned = p.reasons.iter().any(|(id, _)| *id == j.id);
            prop_assert!(started != reasoned, "job {} started={} reasoned={}", j.id, started, reasoned);
        }
    }

    #[test]
    fn backfill_never_delays_the_top_jobs_hold(c in case()) {
        prop_assume!(c.policy != Policy::Fifo);
        let snap = build(&c);
        let now = 5_000;
        let p = plan(&snap, now);
        // The first estimate is the protected backfill hold (EASY: one).
        let Some(&(top, promised)) = p.estimates.first() else { return Ok(()) };
        if std::env::var_os("PROP_DEBUG").is_some() { eprintln!("checked the backfill hold of job {top} at {promised} with {} backfilled starts", p.starts.len()); }
        // Run the pass's starts, then ask again where the top job would start.
        let mut after = snap.clone();
        for s in &p.starts {
            let job = snap.pending.iter().find(|j| j.id == s.job).unwrap();
            for a in &s.allocation.nodes {
                let n = after.nodes.iter_mut().find(|n| n.name == a.node).unwrap();
                n.usage.add(a);
            }
            after.running.push(RunningJob {
                id: s.job,
                name: "b".into(),
                user: "u".into(),
                account: "a".into(),
                qos: None,
                start_ms: now,
                time_limit_s: job.time_limit_s,
                allocation: s.allocation.nodes.clone(),
                master_port: s.allocation.master_port,
                array_job: None,
                ending: false,
            });
        }
        after.pending = snap.pending.iter().filter(|j| j.id == top).cloned().collect();
        let p2 = plan(&after, now);
        let again = p2.estimates.iter().find(|(id, _)| *id == top).map(|(_, t)| *t);
        prop_assert!(again.is_some(), "job {} lost its reservation after backfill", top);
        prop_assert!(again.unwrap() <= promised, "backfill delayed job {} from {} to {:?}", top, promised, again);
    }
}
