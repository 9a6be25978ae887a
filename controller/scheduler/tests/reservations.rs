//! Admin reservations in the pass: jobs outside a window keep off its GPUs for as long as
//! they could run into it, jobs inside one use its GPUs only and only once it opened, and
//! the reasons and start estimates say which.

use gsched_scheduler::{NodeView, PendingJob, SchedConfig, Snapshot, plan};
use gsched_types::job::{JobId, PendingReason};
use gsched_types::reservation::{Reservation, ResvFlags, ResvNode, ResvResources};
use gsched_types::topology::LinkClass;
use std::sync::Arc;

const HOUR: u64 = 3_600_000;
const NOW: u64 = 100 * HOUR;

fn nodes(names: &[&str]) -> Vec<NodeView> {
    names
        .iter()
        .map(|n| NodeView::uniform(n, 8, LinkClass::NvLink(4), 32, 256_000))
        .collect()
}

fn window(name: &str, start_ms: u64, end_ms: u64, held: Vec<ResvNode>, maint: bool) -> Reservation {
    Reservation {
        name: name.into(),
        start_ms,
        end_ms,
        users: vec!["alice".into()],
        accounts: vec![],
        request: ResvResources::NodeCount(1),
        nodes: held,
        flags: ResvFlags {
            maint,
            ignore_jobs: false,
        },
        by: "root".into(),
    }
}

fn whole(node: &str) -> ResvNode {
    ResvNode {
        node: node.into(),
        whole: true,
        gpus: vec![],
    }
}

fn gpus(node: &str, g: &[u32]) -> ResvNode {
    ResvNode {
        node: node.into(),
        whole: false,
        gpus: g.to_vec(),
    }
}

fn job(id: u64, gpus: u32, limit_h: Option<u64>) -> PendingJob {
    PendingJob::simple(id, gpus, limit_h.map(|h| h * 3600), 0)
}

fn snap(nodes: Vec<NodeView>, pending: Vec<PendingJob>, resv: Vec<Reservation>) -> Snapshot {
    Snapshot {
        config: Arc::new(SchedConfig::default()),
        nodes,
        pending,
        running: vec![],
        dependencies: Default::default(),
        usage: vec![],
        reservations: resv,
    }
}

fn reason(p: &gsched_scheduler::Plan, id: u64) -> Option<PendingReason> {
    p.reasons
        .iter()
        .find(|(j, _)| *j == JobId(id))
        .map(|(_, r)| r.clone())
}

fn started_on(p: &gsched_scheduler::Plan, id: u64) -> Option<(String, Vec<u32>)> {
    p.starts.iter().find(|s| s.job == JobId(id)).map(|s| {
        (
            s.allocation.nodes[0].node.clone(),
            s.allocation.nodes[0].gpus.clone(),
        )
    })
}

fn estimate(p: &gsched_scheduler::Plan, id: u64) -> Option<u64> {
    p.estimates
        .iter()
        .find(|(j, _)| *j == JobId(id))
        .map(|(_, t)| *t)
}

#[test]
fn an_open_maintenance_window_sends_jobs_elsewhere_and_says_why_when_there_is_nowhere() {
    let m = window("maint", NOW - HOUR, NOW + 2 * HOUR, vec![whole("n1")], true);
    let p = plan(
        &snap(
            nodes(&["n1", "n2"]),
            vec![job(1, 1, Some(1))],
            vec![m.clone()],
        ),
        NOW,
    );
    assert_eq!(started_on(&p, 1).unwrap().0, "n2");

    let p = plan(
        &snap(
            nodes(&["n1"]),
            vec![job(1, 1, Some(1)), job(2, 0, Some(1))],
            vec![m],
        ),
        NOW,
    );
    assert!(p.starts.is_empty(), "{:?}", p.starts);
    assert_eq!(reason(&p, 1), Some(PendingReason::ReservedForMaintenance));
    assert_eq!(
        reason(&p, 2),
        Some(PendingReason::ReservedForMaintenance),
        "a CPU-only job keeps off a whole node too"
    );
    assert_eq!(
        estimate(&p, 1),
        Some(NOW + 2 * HOUR),
        "it can start when the window ends"
    );
}

#[test]
fn a_future_window_admits_only_jobs_whose_time_limit_ends_before_it() {
    let w = window(
        "deadline",
        NOW + 2 * HOUR,
        NOW + 5 * HOUR,
        vec![whole("n1")],
        false,
    );
    let pending = vec![job(1, 4, Some(1)), job(2, 4, Some(3)), job(3, 4, None)];
    let p = plan(&snap(nodes(&["n1"]), pending, vec![w]), NOW);
    assert_eq!(
        started_on(&p, 1).unwrap().0,
        "n1",
        "1 h ends before the window"
    );
    for id in [2, 3] {
        assert_eq!(
            reason(&p, id),
            Some(PendingReason::ReservedForOther),
            "job {id} would run into the window"
        );
    }
}

#[test]
fn jobs_in_a_reservation_use_its_gpus_and_the_others_keep_off_them() {
    let r = window(
        "course",
        NOW - HOUR,
        NOW + HOUR,
        vec![gpus("n1", &[0, 1, 2, 3])],
        false,
    );
    let mut inside = job(1, 2, Some(1));
    inside.reservation = Some("course".into());
    inside.user = "alice".into();
    let outside = job(2, 4, Some(1));
    let p = plan(
        &snap(nodes(&["n1"]), vec![inside, outside], vec![r.clone()]),
        NOW,
    );
    let (_, g1) = started_on(&p, 1).unwrap();
    let (_, g2) = started_on(&p, 2).unwrap();
    assert!(g1.iter().all(|g| *g < 4), "inside: {g1:?}");
    assert!(g2.iter().all(|g| *g >= 4), "outside: {g2:?}");

    let mut too_big = job(3, 5, Some(1));
    too_big.reservation = Some("course".into());
    let p = plan(&snap(nodes(&["n1", "n2"]), vec![too_big], vec![r]), NOW);
    assert!(
        p.starts.is_empty(),
        "the reservation holds 4 GPUs: {:?}",
        p.starts
    );
}

#[test]
fn a_job_waits_for_its_reservation_to_open_and_is_told_when_it_is_gone() {
    let r = window(
        "later",
        NOW + HOUR,
        NOW + 3 * HOUR,
        vec![whole("n1")],
        false,
    );
    let mut early = job(1, 1, Some(1));
    early.reservation = Some("later".into());
    let mut orphan = job(2, 1, Some(1));
    orphan.reservation = Some("deleted".into());
    let p = plan(
        &snap(nodes(&["n1", "n2"]), vec![early, orphan], vec![r.clone()]),
        NOW,
    );
    assert!(p.starts.is_empty());
    assert_eq!(reason(&p, 1), Some(PendingReason::Reservation));
    assert_eq!(estimate(&p, 1), Some(NOW + HOUR));
    assert_eq!(reason(&p, 2), Some(PendingReason::ReservationDeleted));

    let mut early = job(1, 1, Some(1));
    early.reservation = Some("later".into());
    let p = plan(
        &snap(nodes(&["n1", "n2"]), vec![early], vec![r]),
        NOW + HOUR,
    );
    assert_eq!(
        started_on(&p, 1).unwrap().0,
        "n1",
        "inside its window it runs on its node"
    );
}

#[test]
fn an_ended_window_holds_nothing() {
    let old = window("old", NOW - 3 * HOUR, NOW, vec![whole("n1")], true);
    let p = plan(&snap(nodes(&["n1"]), vec![job(1, 8, None)], vec![old]), NOW);
    assert_eq!(started_on(&p, 1).unwrap().0, "n1");
}

#[test]
fn a_gang_is_estimated_to_start_when_the_window_on_one_of_its_nodes_ends() {
    let m = window("maint", NOW, NOW + 4 * HOUR, vec![whole("n2")], true);
    let mut gang = job(1, 8, Some(2));
    gang.nodes = 2;
    let p = plan(&snap(nodes(&["n1", "n2"]), vec![gang], vec![m]), NOW);
    assert_eq!(reason(&p, 1), Some(PendingReason::ReservedForMaintenance));
    assert_eq!(estimate(&p, 1), Some(NOW + 4 * HOUR));
}
