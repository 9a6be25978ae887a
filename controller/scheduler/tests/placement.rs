//! Data-driven placement cases on real `nvidia-smi topo -m` fixtures and the shipped fake
//! topologies: the GPU set, node choice and reasons a correct scheduler must produce.

use gsched_scheduler::{NodeView, PendingJob, RunningJob, SchedConfig, Snapshot, plan};
use gsched_types::job::{JobId, PendingReason, SwitchWait};
use gsched_types::resources::NodeAlloc;
use gsched_types::topology::{LinkClass, Topology};
use std::sync::Arc;

fn fixture(name: &str) -> Topology {
    let path = format!(
        "{}/../../tests/fixtures/topo/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut t =
        gsched_topology::parse_topo_matrix(gsched_topology::strip_fixture_header(&text)).unwrap();
    if t.memory_mib.is_none() {
        t.memory_mib = Some(512 * 1024);
    }
    if t.numa_nodes.is_empty() {
        t.cpus = Some(t.cpus.unwrap_or(64));
    }
    t
}

fn shipped(name: &str) -> Topology {
    let path = format!(
        "{}/../../deploy/local/topologies/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    gsched_topology::parse_topology_file(&std::fs::read_to_string(&path).unwrap(), &path).unwrap()
}

fn snapshot(nodes: Vec<NodeView>, pending: Vec<PendingJob>, running: Vec<RunningJob>) -> Snapshot {
    Snapshot {
        config: Arc::new(SchedConfig::default()),
        nodes,
        pending,
        running,
        dependencies: Default::default(),
        usage: Vec::new(),
        reservations: Vec::new(),
    }
}

fn job(id: u64, nodes: u32, gpus: u32) -> PendingJob {
    let mut j = PendingJob::simple(id, gpus, Some(3600), 0);
    j.nodes = nodes;
    j
}

/// The job as it is after waiting for its best placement since `since_ms`.
fn short_since(mut j: PendingJob, since_ms: u64) -> PendingJob {
    j.placement_wait_since_ms = Some(since_ms);
    j
}

/// The nodes of the pass's first start, in the order the allocation lists them.
fn first_start_nodes(p: &gsched_scheduler::Plan) -> Vec<&str> {
    p.starts[0]
        .allocation
        .nodes
        .iter()
        .map(|a| a.node.as_str())
        .collect()
}

fn worst_link(topo: &Topology, gpus: &[u32]) -> LinkClass {
    let mut worst = LinkClass::SameDevice;
    for &a in gpus {
        for &b in gpus {
            if a != b && topo.link(a as usize, b as usize).rank() > worst.rank() {
                worst = topo.link(a as usize, b as usize);
            }
        }
    }
    worst
}

fn running(id: u64, node: &str, gpus: &[u32]) -> RunningJob {
    RunningJob {
        id: JobId(id),
        name: format!("r{id}"),
        user: "other".into(),
        account: "default".into(),
        qos: None,
        start_ms: 0,
        time_limit_s: Some(3600),
        allocation: vec![NodeAlloc {
            node: node.into(),
            gpus: gpus.to_vec(),
            cpus: vec![],
            mem_mb: 0,
            nic: None,
            exclusive: false,
        }],
        master_port: 29_500,
        array_job: None,
        ending: false,
    }
}

fn with_usage(mut node: NodeView, running: &[RunningJob]) -> NodeView {
    for r in running {
        for a in &r.allocation {
            if a.node == node.name {
                node.usage.add(a);
            }
        }
    }
    node
}

#[test]
fn dgx1_four_gpu_job_gets_a_fully_nvlinked_quad() {
    let topo = fixture("dgx1-v100-sxm2-8gpu-hybrid-cube-mesh-1nic.txt");
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("dgx1", &topo, "10.0.0.1")],
            vec![job(1, 1, 4)],
            vec![],
        ),
        0,
    );
    let gpus = &p.starts[0].allocation.nodes[0].gpus;
    assert_eq!(gpus.len(), 4);
    assert!(
        worst_link(&topo, gpus).is_nvlink(),
        "{gpus:?} is not a fully NVLinked quad"
    );
}

#[test]
fn dgx1_two_pairs_leave_a_quad() {
    // Two 2-GPU jobs, then a 4-GPU job: all three get NVLink-only sets.
    let topo = fixture("dgx1-v100-sxm2-8gpu-hybrid-cube-mesh-1nic.txt");
    let mut node = NodeView::from_topology("dgx1", &topo, "10.0.0.1");
    let mut taken = Vec::new();
    for id in 1..=2 {
        let p = plan(
            &snapshot(vec![node.clone()], vec![job(id, 1, 2)], vec![]),
            0,
        );
        let a = p.starts[0].allocation.nodes[0].clone();
        assert!(worst_link(&topo, &a.gpus).is_nvlink());
        node.usage.add(&a);
        taken.extend(a.gpus);
    }
    let p = plan(&snapshot(vec![node], vec![job(3, 1, 4)], vec![]), 0);
    let quad = &p.starts[0].allocation.nodes[0].gpus;
    assert!(quad.iter().all(|g| !taken.contains(g)));
    assert!(
        worst_link(&topo, quad).is_nvlink(),
        "remaining quad {quad:?} must be NVLinked"
    );
}

#[test]
fn rtx4090_two_gpu_job_stays_on_one_socket() {
    let topo = fixture("rtx4090-8gpu-pcie-2nic-tabs.txt");
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("box", &topo, "10.0.0.1")],
            vec![job(1, 1, 2)],
            vec![],
        ),
        0,
    );
    let gpus = &p.starts[0].allocation.nodes[0].gpus;
    assert_eq!(
        topo.gpus[gpus[0] as usize].numa_node, topo.gpus[gpus[1] as usize].numa_node,
        "{gpus:?} spans sockets"
    );
}

#[test]
fn rtx4090_fragmentation_keeps_the_four_block() {
    // Socket 0 fully free (GPUs 0-3), socket 1 has GPUs 6,7 free: a 2-GPU job takes 6,7.
    let topo = fixture("rtx4090-8gpu-pcie-2nic-tabs.txt");
    let busy = running(9, "box", &[4, 5]);
    let node = with_usage(
        NodeView::from_topology("box", &topo, "10.0.0.1"),
        std::slice::from_ref(&busy),
    );
    let p = plan(&snapshot(vec![node], vec![job(1, 1, 2)], vec![busy]), 0);
    assert_eq!(p.starts[0].allocation.nodes[0].gpus, vec![6, 7]);
}

#[test]
fn a100_nvswitch_any_set_is_equal_so_packing_decides() {
    let topo = fixture("a100-sxm4-80gb-8gpu-nv12-4nic.txt");
    let busy = running(9, "a", &[0, 1, 2, 3, 4]);
    let a = with_usage(
        NodeView::from_topology("a", &topo, "10.0.0.1"),
        std::slice::from_ref(&busy),
    );
    let b = NodeView::from_topology("b", &topo, "10.0.0.2");
    let p = plan(&snapshot(vec![a, b], vec![job(1, 1, 2)], vec![busy]), 0);
    let alloc = &p.starts[0].allocation.nodes[0];
    assert_eq!(alloc.node, "a", "best fit: the fuller node");
    assert_eq!(worst_link(&topo, &alloc.gpus), LinkClass::NvLink(12));
}

#[test]
fn a6000_two_gpu_job_gets_the_nv4_pair() {
    let topo = fixture("rtx-a6000-3gpu-nv4-pair-2nic.txt");
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("ws", &topo, "10.0.0.1")],
            vec![job(1, 1, 2)],
            vec![],
        ),
        0,
    );
    assert_eq!(p.starts[0].allocation.nodes[0].gpus, vec![0, 1]);
    // A 1-GPU job on the same empty box takes the odd GPU out, keeping the pair.
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("ws", &topo, "10.0.0.1")],
            vec![job(2, 1, 1)],
            vec![],
        ),
        0,
    );
    assert_eq!(p.starts[0].allocation.nodes[0].gpus, vec![2]);
}

/// An 8-GPU node of the shipped topology `file` with GPUs 0-3 taken by running job 9 for
/// an hour.
fn half_busy(file: &str, name: &str) -> (NodeView, RunningJob) {
    let topo = shipped(file);
    let busy = running(9, name, &[0, 1, 2, 3]);
    let node = with_usage(
        NodeView::from_topology(name, &topo, "10.0.0.1"),
        std::slice::from_ref(&busy),
    );
    (node, busy)
}

/// Plans `snap` with jobs ordered by age alone (no short-job boost), at t=10 ms.
fn plan_by_age(mut snap: Snapshot) -> gsched_scheduler::Plan {
    let mut config = SchedConfig::default();
    config.weights.short_job = 0.0;
    snap.config = Arc::new(config);
    plan(&snap, 10)
}

#[test]
fn cpus_and_nic_follow_the_gpus() {
    let (node, busy) = half_busy("rtx4090-8gpu.json", "box");
    let mut j = job(1, 1, 2);
    j.cpus_per_node = 8;
    let p = plan(&snapshot(vec![node], vec![j], vec![busy]), 0);
    let a = &p.starts[0].allocation.nodes[0];
    assert!(a.gpus.iter().all(|g| *g >= 4));
    let numa1 = gsched_types::cpulist::parse("32-63,96-127").unwrap();
    assert!(
        a.cpus.iter().all(|c| numa1.contains(c)),
        "CPUs {:?} not on the GPUs' NUMA node",
        a.cpus
    );
    assert_eq!(
        a.nic.as_deref(),
        Some("enp65s0f0np0"),
        "RDMA NIC preferred over the 1G port, docker0 never"
    );
}

#[test]
fn gang_is_all_or_nothing_and_uses_identical_counts() {
    let topo = shipped("dgx-a100-8gpu.json");
    let busy = running(9, "n2", &[0]);
    let nodes = vec![
        NodeView::from_topology("n1", &topo, "10.0.0.1"),
        with_usage(
            NodeView::from_topology("n2", &topo, "10.0.0.2"),
            std::slice::from_ref(&busy),
        ),
        NodeView::from_topology("n3", &topo, "10.0.0.3"),
    ];
    let p = plan(
        &snapshot(nodes.clone(), vec![job(1, 2, 8)], vec![busy.clone()]),
        0,
    );
    let names = first_start_nodes(&p);
    assert_eq!(names, ["n1", "n3"]);
    assert!(
        p.starts[0]
            .allocation
            .nodes
            .iter()
            .all(|a| a.gpus.len() == 8)
    );
    assert_eq!(p.starts[0].allocation.master_addr, "10.0.0.1");
    // Three full nodes are not available: nothing starts, the reason is Resources.
    let p = plan(&snapshot(nodes, vec![job(2, 3, 8)], vec![busy]), 0);
    assert!(p.starts.is_empty());
    assert_eq!(p.reasons, vec![(JobId(2), PendingReason::Resources)]);
}

#[test]
fn gang_prefers_one_switch() {
    let nodes = dgx_on_leaves(&["leaf1", "leaf2", "leaf1", "leaf2"], &[]);
    let p = plan(&snapshot(nodes, vec![job(1, 2, 8)], vec![]), 0);
    let names = first_start_nodes(&p);
    assert_eq!(names, ["n1", "n3"], "both nodes on leaf1");
}

#[test]
fn requeued_job_avoids_the_node_it_failed_on_unless_it_is_all_there_is() {
    let topo = shipped("ws-2gpu-nvlink.json");
    let a = NodeView::from_topology("a", &topo, "10.0.0.1");
    let b = NodeView::from_topology("b", &topo, "10.0.0.2");
    let mut j = job(1, 1, 2);
    j.avoid = vec!["a".into()];
    let p = plan(&snapshot(vec![a.clone(), b], vec![j.clone()], vec![]), 0);
    assert_eq!(p.starts[0].allocation.nodes[0].node, "b");
    // Avoided, not excluded: while b is busy the job waits for b ...
    let busy = running(9, "b", &[0, 1]);
    let b_busy = with_usage(
        NodeView::from_topology("b", &topo, "10.0.0.2"),
        std::slice::from_ref(&busy),
    );
    let p = plan(
        &snapshot(vec![a.clone(), b_busy], vec![j.clone()], vec![busy]),
        0,
    );
    assert!(p.starts.is_empty());
    // ... and on a one-node cluster it runs where it failed rather than never.
    let p = plan(&snapshot(vec![a], vec![j], vec![]), 0);
    assert_eq!(p.starts[0].allocation.nodes[0].node, "a");
}

#[test]
fn a_gpu_job_without_a_cpu_count_gets_its_gpus_share_of_the_cpus() {
    let topo = shipped("rtx4090-8gpu.json");
    let node = NodeView::from_topology("n1", &topo, "10.0.0.1");
    // The share is of the CPUs left after those kept for CPU-only jobs (128 / 16 = 8).
    let per_gpu = (node.capacity.cpus.len() - 8) / 8;
    assert_eq!(per_gpu, 15);
    let mut j = job(1, 1, 2);
    j.gpu_share_cpus = true;
    let p = plan(&snapshot(vec![node.clone()], vec![j], vec![]), 0);
    let a = &p.starts[0].allocation.nodes[0];
    assert_eq!(a.cpus.len(), 2 * per_gpu);
    // From the GPUs' NUMA node.
    let numa = topo.gpu_numa(a.gpus[0] as usize).unwrap();
    let local = gsched_types::cpulist::parse(&topo.numa_nodes[numa as usize].cpus).unwrap();
    assert!(a.cpus.iter().all(|c| local.contains(c)), "{:?}", a.cpus);
    // An explicit count wins.
    let p = plan(&snapshot(vec![node], vec![job(2, 1, 2)], vec![]), 0);
    assert_eq!(p.starts[0].allocation.nodes[0].cpus.len(), 1);
}

#[test]
fn a_cpu_only_job_starts_while_every_gpu_runs_a_default_share_job() {
    let topo = shipped("rtx4090-8gpu.json");
    let node = NodeView::from_topology("n1", &topo, "10.0.0.1");
    let share = |id: u64| {
        let mut j = job(id, 1, 1);
        j.gpu_share_cpus = true;
        j
    };
    let mut cpu_only = job(9, 1, 0);
    cpu_only.cpus_per_node = 4;
    // All eight GPUs taken by default-share jobs, and the CPU-only job still starts.
    let mut pending: Vec<_> = (1..=8).map(share).collect();
    pending.push(cpu_only.clone());
    let p = plan(&snapshot(vec![node.clone()], pending.clone(), vec![]), 0);
    assert_eq!(p.starts.len(), 9);
    let gpu_cpus: usize = p
        .starts
        .iter()
        .filter(|s| !s.allocation.nodes[0].gpus.is_empty())
        .map(|s| s.allocation.nodes[0].cpus.len())
        .sum();
    assert_eq!(gpu_cpus, 120);
    // With no CPUs kept (`cpus_reserved_for_cpu_jobs = 0`), the old share: it waits.
    let mut snap = snapshot(vec![node.clone()], pending, vec![]);
    snap.config = Arc::new(SchedConfig {
        cpus_reserved_for_cpu_jobs: Some(0),
        ..SchedConfig::default()
    });
    let p = plan(&snap, 0);
    assert_eq!(p.starts.len(), 8);
    // A GPU job that names its CPUs still gets them, the reserve included.
    let mut wide = job(10, 1, 1);
    wide.cpus_per_node = 128;
    let p = plan(&snapshot(vec![node], vec![wide], vec![]), 0);
    assert_eq!(p.starts[0].allocation.nodes[0].cpus.len(), 128);
}

#[test]
fn the_reserve_never_leaves_a_gpu_without_a_cpu() {
    let c = SchedConfig::default();
    assert_eq!(c.cpu_reserve(16, 1), 2);
    assert_eq!(c.cpu_reserve(128, 8), 8);
    assert_eq!(c.cpu_reserve(256, 8), 16);
    assert_eq!(c.cpu_reserve(8, 8), 0);
    assert_eq!(c.cpu_reserve(9, 8), 1);
    assert_eq!(c.cpu_reserve(64, 0), 0, "CPU-only nodes keep nothing back");
    let set = SchedConfig {
        cpus_reserved_for_cpu_jobs: Some(40),
        ..SchedConfig::default()
    };
    assert_eq!(set.cpu_reserve(32, 4), 28);
}

#[test]
fn a_job_whose_gpus_span_two_numa_nodes_gets_cpus_on_both() {
    // GPUs 0-3 on NUMA 0, 4-7 on NUMA 1: with 3 GPUs busy on NUMA 0 and 3 on NUMA 1, a
    // 2-GPU job gets one GPU on each, and its CPUs split between their NUMA nodes.
    let topo = shipped("rtx4090-8gpu.json");
    let busy = [running(8, "n1", &[0, 1, 2]), running(9, "n1", &[4, 5, 6])];
    let node = with_usage(NodeView::from_topology("n1", &topo, "10.0.0.1"), &busy);
    let mut j = job(1, 1, 2);
    j.cpus_per_node = 8;
    let mut snap = snapshot(vec![node], vec![j], busy.to_vec());
    snap.config = Arc::new(SchedConfig {
        topology_wait_s: 0,
        ..SchedConfig::default()
    });
    let p = plan(&snap, 0);
    let a = &p.starts[0].allocation.nodes[0];
    let mut gpus = a.gpus.clone();
    gpus.sort_unstable();
    assert_eq!(gpus, vec![3, 7]);
    let on = |numa: usize| {
        let local = gsched_types::cpulist::parse(&topo.numa_nodes[numa].cpus).unwrap();
        a.cpus.iter().filter(|c| local.contains(c)).count()
    };
    assert_eq!((on(0), on(1)), (4, 4), "CPUs {:?}", a.cpus);
}

#[test]
fn begin_time_waits_and_nice_yields() {
    let topo = shipped("rtx4090-8gpu.json");
    let node = NodeView::from_topology("n1", &topo, "10.0.0.1");
    // --begin in the future: not started, and says why; once the time comes, it starts.
    let mut later = job(1, 1, 8);
    later.begin_ms = Some(60_000);
    let p = plan(
        &snapshot(vec![node.clone()], vec![later.clone()], vec![]),
        1_000,
    );
    assert!(p.starts.is_empty());
    assert_eq!(p.reasons, vec![(JobId(1), PendingReason::BeginTime)]);
    let p = plan(&snapshot(vec![node.clone()], vec![later], vec![]), 60_000);
    assert_eq!(p.starts.len(), 1);
    // Two 8-GPU jobs for one 8-GPU node: the nice one yields although it is older.
    let mut nice = job(2, 1, 8);
    nice.nice = 5_000;
    let mut other = job(3, 1, 8);
    other.eligible_ms = 10;
    let p = plan(&snapshot(vec![node], vec![nice, other], vec![]), 20);
    assert_eq!(p.starts.len(), 1);
    assert_eq!(p.starts[0].job, JobId(3), "{:?}", p.priorities);
}

#[test]
fn impossible_requests_say_why() {
    let topo = shipped("ws-2gpu-nvlink.json");
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("ws", &topo, "10.0.0.1")],
            vec![job(1, 1, 4)],
            vec![],
        ),
        0,
    );
    match &p.reasons[0].1 {
        PendingReason::BadConstraints(why) => {
            assert!(why.contains("2 usable GPUs, 4 wanted"), "{why}")
        }
        other => panic!("expected BadConstraints, got {other:?}"),
    }
}

#[test]
fn drained_required_node_is_req_node_not_avail() {
    let topo = shipped("ws-2gpu-nvlink.json");
    let mut a = NodeView::from_topology("a", &topo, "10.0.0.1");
    a.available = false;
    let b = NodeView::from_topology("b", &topo, "10.0.0.2");
    let mut j = job(1, 1, 1);
    j.nodelist = vec!["a".into()];
    let p = plan(&snapshot(vec![a, b], vec![j], vec![]), 0);
    assert_eq!(
        p.reasons,
        vec![(JobId(1), PendingReason::ReqNodeNotAvail(vec!["a".into()]))]
    );
}

#[test]
fn easy_backfill_short_job_fills_the_hole_long_job_waits() {
    // One 8-GPU node with 4 GPUs busy for an hour. Top job wants 8 GPUs (held for it
    // from t=1h). A 4-GPU 30-minute job backfills; a 4-GPU 2-hour job would delay the top job.
    let (node, busy) = half_busy("dgx-a100-8gpu.json", "n1");
    let top = job(1, 1, 8);
    let mut short = job(2, 1, 4);
    short.time_limit_s = Some(1800);
    short.eligible_ms = 2;
    let mut long = job(3, 1, 4);
    long.time_limit_s = Some(7200);
    long.eligible_ms = 1;
    // Order by age alone so the 8-GPU job is the top of the queue.
    let p = plan_by_age(snapshot(vec![node], vec![top, long, short], vec![busy]));
    let started: Vec<JobId> = p.starts.iter().map(|s| s.job).collect();
    assert_eq!(started, vec![JobId(2)]);
    assert!(p.starts[0].backfilled);
    let reason = |id| {
        p.reasons
            .iter()
            .find(|(j, _)| *j == JobId(id))
            .map(|(_, r)| r.clone())
    };
    assert_eq!(reason(1), Some(PendingReason::Resources));
    assert_eq!(reason(3), Some(PendingReason::Priority));
    assert_eq!(
        p.estimates
            .iter()
            .find(|(j, _)| *j == JobId(1))
            .map(|(_, t)| *t),
        Some(3_600_000)
    );
}

#[test]
fn jobs_kept_out_by_a_backfill_hold_are_each_judged_by_their_own_limit_and_the_free_gpus_now() {
    // As above, with more 4-GPU jobs of one shape: a longer one than the first kept out is
    // kept out too, a shorter one still backfills, and once it has taken the last four
    // GPUs the next one waits for resources, not for the hold.
    let (node, busy) = half_busy("dgx-a100-8gpu.json", "n1");
    let four = |id: u64, limit_s: u64, eligible_ms: u64| {
        let mut j = job(id, 1, 4);
        j.time_limit_s = Some(limit_s);
        j.eligible_ms = eligible_ms;
        j
    };
    let queue = vec![
        job(1, 1, 8),
        four(3, 7200, 1),
        four(5, 9000, 2),
        four(2, 1800, 3),
        four(4, 10_800, 4),
    ];
    let p = plan_by_age(snapshot(vec![node], queue, vec![busy]));
    let started: Vec<JobId> = p.starts.iter().map(|s| s.job).collect();
    assert_eq!(started, vec![JobId(2)]);
    let mut reasons = p.reasons.clone();
    reasons.sort_by_key(|(j, _)| *j);
    assert_eq!(
        reasons,
        vec![
            (JobId(1), PendingReason::Resources),
            (JobId(3), PendingReason::Priority),
            (JobId(4), PendingReason::Resources),
            (JobId(5), PendingReason::Priority),
        ]
    );
}

#[test]
fn a_node_whose_address_has_no_master_port_left_is_passed_over_not_chosen_and_dropped() {
    // Two ports per training address: n1 (preferred: fewer free GPUs, packing) can host
    // two more jobs, then the queue must go on to n2 rather than stop there.
    let n1 = NodeView::uniform("n1", 8, LinkClass::Pix, 64, 1 << 20);
    let mut n2 = NodeView::uniform("n2", 8, LinkClass::Pix, 64, 1 << 20);
    n2.training_addr = "10.0.0.2".into();
    let mut snap = snapshot(
        vec![n1, n2],
        (1..=6).map(|i| job(i, 1, 1)).collect(),
        vec![],
    );
    snap.config = Arc::new(SchedConfig {
        master_port_min: 29_500,
        master_port_max: 29_501,
        ..SchedConfig::default()
    });
    let p = plan(&snap, 1_000);
    let on = |node: &str| {
        p.starts
            .iter()
            .filter(|s| s.allocation.nodes[0].node == node)
            .count()
    };
    assert_eq!((on("n1"), on("n2")), (2, 2), "{:?}", p.starts);
}

/// An RTX 4090 box (PIX pairs 0-1, 2-3, 4-5, 6-7; sockets 0-3 and 4-7) with GPUs 3 and 7
/// free (a SYS pair) and GPU 2 free in an hour: a PIX pair then.
fn box_with_a_sys_pair_free() -> (Vec<NodeView>, Vec<RunningJob>) {
    let topo = shipped("rtx4090-8gpu.json");
    let mut soon = running(9, "n1", &[2]);
    soon.time_limit_s = Some(3600);
    let mut late = [running(8, "n1", &[0, 1]), running(10, "n1", &[4, 5, 6])];
    for r in &mut late {
        r.time_limit_s = Some(10 * 3600);
    }
    let busy = vec![late[0].clone(), soon, late[1].clone()];
    let node = with_usage(NodeView::from_topology("n1", &topo, "10.0.0.1"), &busy);
    (vec![node], busy)
}

/// DGX A100 nodes n1, n2... (at 10.0.0.1, 10.0.0.2...) under the given leaf switches, with
/// `busy` on them.
fn dgx_on_leaves(leaves: &[&str], busy: &[RunningJob]) -> Vec<NodeView> {
    let topo = shipped("dgx-a100-8gpu.json");
    leaves
        .iter()
        .enumerate()
        .map(|(i, leaf)| {
            let i = i + 1;
            let mut n = NodeView::from_topology(&format!("n{i}"), &topo, &format!("10.0.0.{i}"));
            n.switch = Some(leaf.to_string());
            with_usage(n, busy)
        })
        .collect()
}

fn with_config(mut snap: Snapshot, f: impl FnOnce(&mut SchedConfig)) -> Snapshot {
    let mut config = SchedConfig::default();
    f(&mut config);
    snap.config = Arc::new(config);
    snap
}

fn gpus_of(p: &gsched_scheduler::Plan, id: u64) -> Option<Vec<u32>> {
    let s = p.starts.iter().find(|s| s.job == JobId(id))?;
    let mut g = s.allocation.nodes[0].gpus.clone();
    g.sort_unstable();
    Some(g)
}

#[test]
fn a_multi_gpu_job_waits_for_its_best_set_which_later_jobs_leave_alone() {
    let (nodes, busy) = box_with_a_sys_pair_free();
    let mut long_single = job(2, 1, 1);
    long_single.time_limit_s = Some(10 * 3600);
    let p = plan(
        &snapshot(nodes, vec![job(1, 1, 2), long_single], busy),
        60_000,
    );
    let reason = p.reasons.iter().find(|(j, _)| *j == JobId(1));
    assert_eq!(reason, Some(&(JobId(1), PendingReason::TopologyWait)));
    let estimate = p.estimates.iter().find(|(j, _)| *j == JobId(1));
    assert_eq!(
        estimate,
        Some(&(JobId(1), 3_600_000)),
        "expected to start when GPU 2 frees"
    );
    assert_eq!(
        gpus_of(&p, 2),
        Some(vec![7]),
        "the 10-hour job leaves GPU 3 (held with 2 from the hour on) alone"
    );
}

#[test]
fn a_job_past_its_topology_wait_takes_what_is_free() {
    let (nodes, busy) = box_with_a_sys_pair_free();
    let snap = snapshot(
        nodes.clone(),
        vec![short_since(job(1, 1, 2), 0)],
        busy.clone(),
    );
    let twelve_hours = 12 * 3600 * 1000;
    let p = plan(&snap, twelve_hours);
    assert_eq!(gpus_of(&p, 1), Some(vec![3, 7]), "waited 12 h: starts");
    assert!(gpus_of(&plan(&snap, twelve_hours - 1), 1).is_none());

    let off = with_config(
        snapshot(nodes.clone(), vec![job(1, 1, 2)], busy.clone()),
        |c| c.topology_wait_s = 0,
    );
    assert_eq!(gpus_of(&plan(&off, 0), 1), Some(vec![3, 7]), "waiting off");

    // A share of the time limit caps the wait too: half of this job's hour is over before
    // the pair frees, so it does not wait at all; twice its hour covers it.
    let share = |s: f64| {
        with_config(
            snapshot(
                nodes.clone(),
                vec![short_since(job(1, 1, 2), 0)],
                busy.clone(),
            ),
            |c| c.topology_wait_share = Some(s),
        )
    };
    assert_eq!(gpus_of(&plan(&share(0.5), 0), 1), Some(vec![3, 7]));
    assert!(gpus_of(&plan(&share(2.0), 0), 1).is_none());
    assert_eq!(
        gpus_of(&plan(&share(2.0), 2 * 3_600_000), 1),
        Some(vec![3, 7])
    );
}

#[test]
fn the_wait_for_the_best_placement_counts_from_the_first_pass_that_found_the_job_short() {
    // Eligible since hour 0 but short of its best only from hour 20 (it waited for GPUs at
    // all until then): it still waits.
    let (nodes, mut busy) = box_with_a_sys_pair_free();
    let hour = 3_600_000;
    for r in &mut busy {
        r.start_ms = 20 * hour;
    }
    let snap = snapshot(nodes.clone(), vec![job(1, 1, 2)], busy.clone());
    let p = plan(&snap, 20 * hour);
    assert!(gpus_of(&p, 1).is_none(), "20 h in the queue, short for 0 s");
    assert_eq!(p.reasons, vec![(JobId(1), PendingReason::TopologyWait)]);
    let waited = |since_h: u64| {
        snapshot(
            nodes.clone(),
            vec![short_since(job(1, 1, 2), since_h * hour)],
            busy.clone(),
        )
    };
    assert!(gpus_of(&plan(&waited(20), 20 * hour + 1), 1).is_none());
    assert_eq!(
        gpus_of(&plan(&waited(8), 20 * hour), 1),
        Some(vec![3, 7]),
        "short since hour 8: its 12 h are over"
    );
}

#[test]
fn a_job_does_not_wait_for_a_placement_no_running_job_is_expected_to_free() {
    // The job holding the other socket's pair has no time limit: nothing says when a PIX
    // pair frees, so waiting could only delay the job.
    let (nodes, mut busy) = box_with_a_sys_pair_free();
    for r in &mut busy {
        r.time_limit_s = None;
    }
    let p = plan(&snapshot(nodes, vec![job(1, 1, 2)], busy), 0);
    assert_eq!(gpus_of(&p, 1), Some(vec![3, 7]));
}

#[test]
fn a_job_that_names_its_nodes_or_wants_no_gpus_never_waits_for_topology() {
    let (nodes, busy) = box_with_a_sys_pair_free();
    let mut named = job(1, 1, 2);
    named.nodelist = vec!["n1".into()];
    let p = plan(&snapshot(nodes, vec![named], busy), 0);
    assert_eq!(gpus_of(&p, 1), Some(vec![3, 7]));

    // A CPU-only gang across two switches, while n2 (beside n1) is held whole for 10 h.
    let mut whole = running(8, "n2", &[]);
    whole.time_limit_s = Some(10 * 3600);
    whole.allocation[0].exclusive = true;
    let busy = vec![whole];
    let nodes = dgx_on_leaves(&["leaf1", "leaf1", "leaf2"], &busy);
    let p = plan(&snapshot(nodes, vec![job(2, 2, 0)], busy), 0);
    assert_eq!(first_start_nodes(&p), ["n1", "n3"]);
}

#[test]
fn a_gang_waits_for_one_switch_while_another_frees() {
    let all: Vec<u32> = (0..8).collect();
    let mut soon = running(8, "n2", &all);
    soon.time_limit_s = Some(1800);
    let mut late = running(9, "n4", &all);
    late.time_limit_s = Some(10 * 3600);
    let busy = vec![soon, late];
    let nodes = dgx_on_leaves(&["leaf1", "leaf1", "leaf2", "leaf2"], &busy);
    let p = plan(
        &snapshot(nodes.clone(), vec![job(1, 2, 8)], busy.clone()),
        0,
    );
    assert!(
        p.starts.is_empty(),
        "n1 and n3 are free but on two switches"
    );
    assert_eq!(p.reasons, vec![(JobId(1), PendingReason::TopologyWait)]);
    assert_eq!(p.estimates, vec![(JobId(1), 1_800_000)]);
    let p = plan(
        &snapshot(nodes, vec![short_since(job(1, 2, 8), 0)], busy),
        12 * 3600 * 1000,
    );
    let names = first_start_nodes(&p);
    assert_eq!(names, ["n1", "n3"], "after the wait, across switches");
}

#[test]
fn switches_max_time_bounds_the_wait_and_a_count_above_one_accepts_that_many() {
    let (nodes, busy) = box_with_a_sys_pair_free();
    let mut now = job(1, 1, 2);
    now.switches = Some(SwitchWait {
        count: 1,
        wait_s: Some(0),
    });
    let p = plan(&snapshot(nodes.clone(), vec![now], busy.clone()), 0);
    assert_eq!(gpus_of(&p, 1), Some(vec![3, 7]), "--switches=1@0");
    let mut hour = job(1, 1, 2);
    hour.switches = Some(SwitchWait {
        count: 1,
        wait_s: Some(7200),
    });
    let snap = snapshot(nodes.clone(), vec![short_since(hour, 0)], busy.clone());
    assert!(gpus_of(&plan(&snap, 3_599_999), 1).is_none());
    assert_eq!(gpus_of(&plan(&snap, 7_200_000), 1), Some(vec![3, 7]));
    let mut too_short = job(1, 1, 2);
    too_short.switches = Some(SwitchWait {
        count: 1,
        wait_s: Some(1800),
    });
    let p = plan(&snapshot(nodes, vec![too_short], busy), 0);
    assert_eq!(
        gpus_of(&p, 1),
        Some(vec![3, 7]),
        "the pair frees after 30 minutes: no point waiting"
    );

    let mut late = running(8, "n2", &(0..8).collect::<Vec<_>>());
    late.time_limit_s = Some(10 * 3600);
    let busy = vec![late];
    let nodes = dgx_on_leaves(&["leaf1", "leaf1", "leaf2"], &busy);
    let p = plan(
        &snapshot(nodes.clone(), vec![job(1, 2, 8)], busy.clone()),
        0,
    );
    assert_eq!(p.reasons, vec![(JobId(1), PendingReason::TopologyWait)]);
    let mut two = job(1, 2, 8);
    two.switches = Some(SwitchWait {
        count: 2,
        wait_s: None,
    });
    let p = plan(&snapshot(nodes, vec![two], busy), 0);
    let names = first_start_nodes(&p);
    assert_eq!(
        names,
        ["n1", "n3"],
        "--switches=2 takes two switches at once"
    );
}

#[test]
fn an_exclusive_job_holds_every_gpu_of_its_node_as_on_slurm() {
    let topo = fixture("dgx1-v100-sxm2-8gpu-hybrid-cube-mesh-1nic.txt");
    let mut exclusive = job(1, 1, 0);
    exclusive.exclusive = true;
    let p = plan(
        &snapshot(
            vec![NodeView::from_topology("dgx1", &topo, "10.0.0.1")],
            vec![exclusive],
            vec![],
        ),
        0,
    );
    assert_eq!(p.starts.len(), 1, "{:?}", p.reasons);
    let a = &p.starts[0].allocation.nodes[0];
    assert_eq!(a.gpus, (0..8).collect::<Vec<u32>>());
    assert!(a.exclusive);
}

/// Three nodes from a shipped topology, each with its own features.
fn featured(features: &[&[&str]]) -> Vec<NodeView> {
    let topo = shipped("rtx4090-8gpu.json");
    features
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut n = NodeView::from_topology(&format!("n{}", i + 1), &topo, "10.0.0.1");
            n.features = f.iter().map(|s| s.to_string()).collect();
            n
        })
        .collect()
}

fn constrained(id: u64, nodes: u32, text: &str) -> PendingJob {
    let mut j = job(id, nodes, 1);
    j.constraint = Some(gsched_types::constraint::Constraint::parse(text).unwrap());
    j
}

#[test]
fn constraints_place_as_slurms_grammar_says() {
    let nodes = featured(&[&["rack1", "ib"], &["rack2"], &["rack2", "ib"]]);
    let p = plan(
        &snapshot(
            nodes.clone(),
            vec![constrained(1, 2, "[rack1|rack2]")],
            vec![],
        ),
        0,
    );
    assert_eq!(
        first_start_nodes(&p),
        ["n2", "n3"],
        "a matching OR: both nodes share rack2 (rack1 has one node only)"
    );
    let p = plan(
        &snapshot(
            nodes.clone(),
            vec![constrained(1, 2, "rack1|rack2")],
            vec![],
        ),
        0,
    );
    assert_eq!(p.starts.len(), 1, "a plain OR lets the nodes differ");
    let p = plan(
        &snapshot(nodes.clone(), vec![constrained(1, 2, "rack2&ib*1")], vec![]),
        0,
    );
    assert_eq!(first_start_nodes(&p), ["n2", "n3"]);
    let p = plan(
        &snapshot(nodes.clone(), vec![constrained(1, 2, "ib*2")], vec![]),
        0,
    );
    let got = first_start_nodes(&p);
    assert!(
        got.contains(&"n1") && got.contains(&"n3"),
        "two of the nodes must have ib: {got:?}"
    );
    let p = plan(
        &snapshot(nodes, vec![constrained(1, 1, "rack3|(rack1&nope)")], vec![]),
        0,
    );
    assert!(p.starts.is_empty());
    assert!(
        matches!(&p.reasons[0].1, PendingReason::BadConstraints(why) if why.contains("rack3|(rack1&nope)")),
        "{:?}",
        p.reasons
    );
}

#[test]
fn time_min_lets_backfill_shorten_a_job() {
    let topo = shipped("rtx4090-8gpu.json");
    let node = with_usage(
        NodeView::from_topology("n1", &topo, "10.0.0.1"),
        &[running(1, "n1", &[0, 1, 2, 3])],
    );
    // The head of the queue wants all 8 GPUs: held for when job 1 ends (1 h).
    let head = job(2, 1, 8);
    let mut long = job(3, 1, 4);
    long.time_limit_s = Some(2 * 3600);
    let mut flexible = job(4, 1, 4);
    flexible.time_limit_s = Some(2 * 3600);
    flexible.time_min_s = Some(30 * 60);
    let p = plan(
        &snapshot(
            vec![node],
            vec![head, long, flexible],
            vec![running(1, "n1", &[0, 1, 2, 3])],
        ),
        0,
    );
    let started: Vec<u64> = p.starts.iter().map(|s| s.job.0).collect();
    assert_eq!(
        started,
        [4],
        "only the job that accepts a shorter limit fits the hole"
    );
    assert_eq!(
        p.starts[0].time_limit_s,
        Some(3600),
        "its limit ends with the hole"
    );
    assert!(p.starts[0].backfilled);
}
