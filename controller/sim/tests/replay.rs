//! The simulator on small workloads: every job that fits an empty cluster eventually runs,
//! fair share evens out two groups' GPU time, and a slice of the real Philly trace replays
//! with sane metrics for every policy.

use gsched_scheduler::Policy;
use gsched_sim::cluster;
use gsched_sim::engine::{SimOptions, run};
use gsched_sim::trace::{TraceJob, load};

fn jobs(n: usize, seed: u64) -> Vec<TraceJob> {
    let mut rng = gsched_sim::bench::Rng::new(seed);
    (0..n)
        .map(|i| TraceJob {
            id: format!("j{i}"),
            submit_s: rng.below(3600),
            gpus: [1, 1, 2, 4, 8, 16][rng.below(6) as usize],
            duration_s: 60 + rng.below(3600),
            group: format!("g{}", rng.below(3)),
        })
        .collect()
}

#[test]
fn every_job_that_fits_eventually_runs() {
    let spec = cluster::uniform(4, 8, None);
    for seed in 1..=5 {
        let mut trace = jobs(200, seed);
        trace.sort_by_key(|j| j.submit_s);
        for policy in [Policy::Gsched, Policy::FifoBackfill, Policy::Fifo] {
            let r = run(&spec, &trace, &SimOptions::new(policy, true));
            assert_eq!(
                r.jobs,
                trace.len(),
                "{policy:?} seed {seed}: only {} of {} jobs ran",
                r.jobs,
                trace.len()
            );
            assert!(r.gpu_utilization > 0.0 && r.gpu_utilization <= 1.0);
        }
    }
}

#[test]
fn fair_share_evens_out_two_groups() {
    // Group "heavy" floods the queue first; "light" arrives a little later with the same
    // number of equal jobs. With fair share, light's jobs overtake heavy's backlog.
    let spec = cluster::uniform(2, 8, None);
    let mut trace = Vec::new();
    for i in 0..400 {
        trace.push(TraceJob {
            id: format!("h{i}"),
            submit_s: 0,
            gpus: 1,
            duration_s: 600,
            group: "heavy".into(),
        });
    }
    for i in 0..400 {
        trace.push(TraceJob {
            id: format!("l{i}"),
            submit_s: 600,
            gpus: 1,
            duration_s: 600,
            group: "light".into(),
        });
    }
    let fair = run(&spec, &trace, &SimOptions::new(Policy::Gsched, false));
    let fifo = run(&spec, &trace, &SimOptions::new(Policy::FifoBackfill, false));
    // Both finish everything in the same time (work-conserving) ...
    assert_eq!(fair.jobs, 800);
    assert_eq!(fair.makespan_s, fifo.makespan_s);
    // ... but under FIFO the light group waits for the whole heavy backlog, while fair share
    // lets it in as soon as heavy has used its share.
    let (fl, fh) = (
        fair.avg_queue_s_by_group["light"],
        fair.avg_queue_s_by_group["heavy"],
    );
    let (ol, oh) = (
        fifo.avg_queue_s_by_group["light"],
        fifo.avg_queue_s_by_group["heavy"],
    );
    assert!(
        fl < ol * 0.8,
        "light waits {fl:.0}s with fair share, {ol:.0}s with FIFO"
    );
    // Fair share converges: once their usage is equal the groups alternate, so their
    // average waits end up close, where FIFO keeps them a whole backlog apart.
    assert!(
        (fl - fh).abs() < 0.25 * (ol - oh).abs(),
        "fair {fl:.0}/{fh:.0} vs fifo {ol:.0}/{oh:.0}"
    );
}

#[test]
fn philly_slice_replays_for_every_policy() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/traces/philly_2017_first2000.csv");
    let trace = load(&path, None).unwrap();
    assert_eq!(trace.len(), 2000);
    let spec = cluster::preset("philly-760").unwrap();
    assert_eq!(spec.total_gpus(), 760);
    let mut results = Vec::new();
    for policy in [Policy::Gsched, Policy::FifoBackfill, Policy::Fifo] {
        let r = run(&spec, &trace, &SimOptions::new(policy, true));
        assert_eq!(r.jobs, 2000);
        assert!(r.p95_queue_s >= r.median_queue_s);
        assert!(r.best_placement_share > 0.5);
        results.push(r);
    }
    // Strict FIFO can only be worse than FIFO with backfill.
    assert!(results[2].avg_queue_s >= results[1].avg_queue_s);
}

#[test]
fn the_same_trace_replays_to_the_same_result_bit_for_bit() {
    let spec = cluster::uniform(6, 8, None);
    let mut trace = jobs(400, 11);
    trace.sort_by_key(|j| j.submit_s);
    for policy in [Policy::Gsched, Policy::FifoBackfill] {
        let runs: Vec<String> = (0..3)
            .map(|_| {
                let mut r = run(&spec, &trace, &SimOptions::new(policy, true));
                // The only figure that depends on the machine running it.
                r.wall_s = 0.0;
                serde_json::to_string(&r).unwrap()
            })
            .collect();
        assert_eq!(runs[0], runs[1], "{policy:?}");
        assert_eq!(runs[0], runs[2], "{policy:?}");
    }
}

#[test]
fn a_pass_on_a_big_cluster_is_not_capped_by_one_port_range() {
    // Every simulated node has its own training address, as real nodes do: with one
    // address for all, MASTER_PORTs (one range of 500 per address) capped a pass at 499
    // starts and the rest of the queue was placed and thrown away (the bench-pass
    // "regression" of issue 28).
    let spec = cluster::uniform(300, 8, None);
    let views = spec.node_views();
    let addrs: std::collections::BTreeSet<&str> =
        views.iter().map(|v| v.training_addr.as_str()).collect();
    assert_eq!(addrs.len(), views.len());
    let snap = gsched_sim::bench::snapshot(300, 8, 4_000, 42);
    let plan = gsched_scheduler::plan(&snap, 90_000_000);
    assert!(plan.starts.len() > 500, "{} starts", plan.starts.len());
}

#[test]
fn replays_plan_around_reservations() {
    use gsched_types::reservation::{Reservation, ResvFlags, ResvNode, ResvResources};
    let spec = cluster::uniform(4, 8, None);
    let window = |name: &str, nodes: &[&str], maint: bool| Reservation {
        name: name.into(),
        start_ms: 1_800_000,
        end_ms: 7_200_000,
        users: Vec::new(),
        accounts: Vec::new(),
        request: ResvResources::Nodes(nodes.iter().map(|n| n.to_string()).collect()),
        nodes: nodes
            .iter()
            .map(|n| ResvNode {
                node: n.to_string(),
                whole: true,
                gpus: Vec::new(),
            })
            .collect(),
        flags: ResvFlags {
            maint,
            ..ResvFlags::default()
        },
        by: "test".into(),
    };
    for seed in 1..=3 {
        let mut trace = jobs(200, seed);
        trace.sort_by_key(|j| j.submit_s);
        let free = run(&spec, &trace, &SimOptions::new(Policy::Gsched, true));
        for policy in [Policy::Gsched, Policy::FifoBackfill] {
            let mut opts = SimOptions::new(policy, true);
            opts.reservations = vec![
                window("maint", &["n-0000"], true),
                window("course", &["n-0001", "n-0002"], false),
            ];
            let r = run(&spec, &trace, &opts);
            assert_eq!(
                r.jobs,
                trace.len(),
                "{policy:?} seed {seed}: every job still runs"
            );
            assert_eq!(
                r.reservation_overlaps, 0,
                "{policy:?} seed {seed}: no trace job may use a reserved node in its window"
            );
            if policy == Policy::Gsched {
                assert!(
                    r.avg_queue_s > free.avg_queue_s,
                    "seed {seed}: three of four nodes set aside for 1.5 h must cost waiting ({} vs {})",
                    r.avg_queue_s,
                    free.avg_queue_s
                );
            }
        }
    }
}
