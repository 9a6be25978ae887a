//! Admin reservations through `apply`: what a create chooses and refuses, who may use
//! one, and that a reservation in use cannot be deleted and an ended one goes away.

mod common;

use gsched_scheduler::plan;
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::job::{JobId, JobSpec};
use gsched_types::reservation::{ReservationSpec, ResvFlags, ResvResources};
use gsched_types::topology::Topology;

const HOUR: u64 = 3_600_000;
const T0: u64 = 1_000 * HOUR;

fn topo(gpus: u32) -> Topology {
    common::nvlinked(gpus, "0-15")
}

fn env(cmd: Command, at: u64) -> Envelope {
    Envelope::new(cmd, at, None)
}

fn cluster(nodes: &[&str]) -> ClusterState {
    let mut s = ClusterState::default();
    for n in nodes {
        let out = s.apply(&env(
            Command::RegisterNode(RegisterNode {
                name: (*n).into(),
                address: "127.0.0.1:1".into(),
                training_addr: "127.0.0.1".into(),
                topology: topo(8),
                features: vec![],
                agent_version: "test".into(),
                known_runs: vec![],
            }),
            T0,
        ));
        assert_eq!(out, Outcome::Ok);
    }
    s
}

fn spec(name: &str, start: u64, hours: u64, what: ResvResources) -> ReservationSpec {
    ReservationSpec {
        name: name.into(),
        start_ms: Some(start),
        duration_s: Some(hours * 3600),
        users: Some(vec!["alice".into()]),
        resources: Some(what),
        ..ReservationSpec::default()
    }
}

fn create(s: &mut ClusterState, spec: ReservationSpec, at: u64) -> Outcome {
    s.apply(&env(
        Command::CreateReservation(CreateReservation {
            spec,
            by: "root".into(),
            admin: true,
        }),
        at,
    ))
}

fn rejected(o: Outcome) -> String {
    match o {
        Outcome::Rejected { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn submit(
    s: &mut ClusterState,
    user: &str,
    gpus: u32,
    hours: u64,
    resv: Option<&str>,
    at: u64,
) -> Outcome {
    let mut spec = JobSpec::simple("j", user, "#!/bin/sh\ntrue\n");
    spec.gpus_per_node = gpus;
    spec.time_limit_s = Some(hours * 3600);
    spec.reservation = resv.map(str::to_string);
    s.apply(&env(Command::SubmitJob(SubmitJob { spec }), at))
}

fn schedule(s: &mut ClusterState, at: u64) -> Vec<JobId> {
    let p = plan(&snapshot(s, &mut ViewCache::default()), at);
    let mut started = Vec::new();
    for cmd in decide::commands_for(p, s) {
        if let Outcome::Started { started: st, .. } = s.apply(&env(cmd, at)) {
            started.extend(st);
        }
    }
    started
}

#[test]
fn counts_are_turned_into_nodes_and_gpus_at_creation() {
    let mut s = cluster(&["n1", "n2", "n3"]);
    assert_eq!(
        create(&mut s, spec("two", T0, 2, ResvResources::NodeCount(2)), T0),
        Outcome::Ok
    );
    let r = &s.reservations["two"];
    assert_eq!(r.node_names(), vec!["n1", "n2"]);
    assert!(r.nodes.iter().all(|n| n.whole));
    assert_eq!(
        create(&mut s, spec("g", T0, 2, ResvResources::Gpus(4)), T0),
        Outcome::Ok
    );
    let g = &s.reservations["g"];
    assert_eq!(
        g.node_names(),
        vec!["n3"],
        "the free node, not the reserved ones"
    );
    assert_eq!(g.nodes[0].gpus, vec![0, 1, 2, 3]);
    assert_eq!(
        create(&mut s, spec("g2", T0, 2, ResvResources::Gpus(4)), T0),
        Outcome::Ok
    );
    assert_eq!(s.reservations["g2"].nodes[0].gpus, vec![4, 5, 6, 7]);
    let m = rejected(create(
        &mut s,
        spec("g3", T0, 2, ResvResources::Gpus(1)),
        T0,
    ));
    assert!(m.contains("busy"), "{m}");
}

#[test]
fn bad_requests_are_refused_with_what_to_fix_and_change_nothing() {
    let mut s = cluster(&["n1"]);
    let before = s.digest();
    let mut no_users = spec("a", T0, 1, ResvResources::NodeCount(1));
    no_users.users = None;
    assert!(rejected(create(&mut s, no_users, T0)).contains("Users"));
    let mut no_end = spec("a", T0, 1, ResvResources::NodeCount(1));
    no_end.duration_s = None;
    assert!(rejected(create(&mut s, no_end, T0)).contains("Duration"));
    let unknown = spec("a", T0, 1, ResvResources::Nodes(vec!["n9".into()]));
    assert!(rejected(create(&mut s, unknown, T0)).contains("n9"));
    assert!(
        rejected(create(
            &mut s,
            spec("a b", T0, 1, ResvResources::NodeCount(1)),
            T0
        ))
        .contains("name")
    );
    let denied = s.apply(&env(
        Command::CreateReservation(CreateReservation {
            spec: spec("a", T0, 1, ResvResources::NodeCount(1)),
            by: "mallory".into(),
            admin: false,
        }),
        T0,
    ));
    assert!(
        matches!(denied, Outcome::PermissionDenied { .. }),
        "{denied:?}"
    );
    assert_eq!(s.digest(), before);
    assert_eq!(
        create(&mut s, spec("a", T0, 1, ResvResources::NodeCount(1)), T0),
        Outcome::Ok
    );
    assert!(
        rejected(create(
            &mut s,
            spec("a", T0 + 5 * HOUR, 1, ResvResources::NodeCount(1)),
            T0
        ))
        .contains("Duplicate")
    );
}

#[test]
fn overlaps_are_refused_unless_one_is_maintenance() {
    let mut s = cluster(&["n1"]);
    let n1 = || ResvResources::Nodes(vec!["n1".into()]);
    assert_eq!(
        create(&mut s, spec("a", T0 + HOUR, 2, n1()), T0),
        Outcome::Ok
    );
    assert!(rejected(create(&mut s, spec("b", T0 + 2 * HOUR, 2, n1()), T0)).contains("overlaps"));
    assert_eq!(
        create(&mut s, spec("after", T0 + 3 * HOUR, 2, n1()), T0),
        Outcome::Ok,
        "back to back"
    );
    let mut m = spec("m", T0 + 2 * HOUR, 1, n1());
    m.flags = Some(ResvFlags {
        maint: true,
        ignore_jobs: false,
    });
    assert_eq!(create(&mut s, m, T0), Outcome::Ok);
}

#[test]
fn running_jobs_block_a_reservation_unless_it_ignores_jobs() {
    let mut s = cluster(&["n1"]);
    assert!(matches!(
        submit(&mut s, "bob", 8, 4, None, T0),
        Outcome::Submitted { .. }
    ));
    assert_eq!(schedule(&mut s, T0).len(), 1);
    let n1 = || ResvResources::Nodes(vec!["n1".into()]);
    let m = rejected(create(&mut s, spec("soon", T0 + HOUR, 1, n1()), T0));
    assert!(m.contains("busy") && m.contains("IGNORE_JOBS"), "{m}");
    assert_eq!(
        create(&mut s, spec("later", T0 + 5 * HOUR, 1, n1()), T0),
        Outcome::Ok,
        "after the job's limit"
    );
    let mut ignore = spec("soon", T0 + HOUR, 1, n1());
    ignore.flags = Some(ResvFlags {
        maint: true,
        ignore_jobs: true,
    });
    assert_eq!(create(&mut s, ignore, T0), Outcome::Ok);
}

#[test]
fn only_admitted_users_submit_into_a_reservation_and_it_cannot_be_deleted_while_used() {
    let mut s = cluster(&["n1", "n2"]);
    assert_eq!(
        create(
            &mut s,
            spec("r", T0, 2, ResvResources::Nodes(vec!["n1".into()])),
            T0
        ),
        Outcome::Ok
    );
    let m = rejected(submit(&mut s, "bob", 1, 1, Some("r"), T0));
    assert!(m.contains("Access denied to requested reservation"), "{m}");
    let m = rejected(submit(&mut s, "alice", 1, 1, Some("nope"), T0));
    assert!(m.contains("Requested reservation is invalid"), "{m}");
    let Outcome::Submitted { jobs } = submit(&mut s, "alice", 8, 1, Some("r"), T0) else {
        panic!()
    };
    assert!(matches!(
        submit(&mut s, "bob", 8, 1, None, T0),
        Outcome::Submitted { .. }
    ));
    let started = schedule(&mut s, T0);
    assert_eq!(started.len(), 2);
    let alloc = s.jobs[&jobs[0]].allocation.clone().unwrap();
    assert_eq!(alloc.nodes[0].node, "n1", "inside its reservation");
    let del = |s: &mut ClusterState| {
        s.apply(&env(
            Command::DeleteReservation(DeleteReservation {
                name: "r".into(),
                by: "root".into(),
                admin: true,
            }),
            T0,
        ))
    };
    assert!(rejected(del(&mut s)).contains("in use"));
    s.apply(&env(
        Command::ActOnJobs(ActOnJobs {
            action: gsched_types::api::JobAction::Cancel,
            select: gsched_types::api::JobSelection {
                jobs: vec![gsched_types::api::JobSelector {
                    id: jobs[0].0,
                    task: None,
                }],
                ..Default::default()
            },
            by: "root".into(),
            admin: true,
        }),
        T0,
    ));
    // The cancelled job still has to confirm its stop; once it ended the delete goes through.
    for (id, j) in s.jobs.clone() {
        if id == jobs[0] && !j.state.is_terminal() {
            s.apply(&env(
                Command::RunExited(RunExited {
                    job: id,
                    attempt: 0,
                    node: "n1".into(),
                    code: None,
                    signal: Some(15),
                    failure: None,
                    usage: None,
                }),
                T0,
            ));
        }
    }
    assert_eq!(del(&mut s), Outcome::Ok);
    assert!(s.reservations.is_empty());
}

#[test]
fn an_ended_reservation_is_dropped_by_the_next_entry() {
    let mut s = cluster(&["n1"]);
    assert_eq!(
        create(
            &mut s,
            spec("short", T0, 1, ResvResources::NodeCount(1)),
            T0
        ),
        Outcome::Ok
    );
    s.apply(&env(Command::Noop, T0 + HOUR - 1));
    assert!(s.reservations.contains_key("short"));
    s.apply(&env(Command::Noop, T0 + HOUR));
    assert!(s.reservations.is_empty());
}

#[test]
fn an_update_keeps_the_window_length_when_only_the_start_moves() {
    let mut s = cluster(&["n1", "n2"]);
    assert_eq!(
        create(
            &mut s,
            spec("r", T0 + HOUR, 2, ResvResources::NodeCount(1)),
            T0
        ),
        Outcome::Ok
    );
    let up = |s: &mut ClusterState, spec: ReservationSpec| {
        s.apply(&env(
            Command::UpdateReservation(UpdateReservation {
                spec,
                by: "root".into(),
                admin: true,
            }),
            T0,
        ))
    };
    let moved = ReservationSpec {
        name: "r".into(),
        start_ms: Some(T0 + 3 * HOUR),
        ..ReservationSpec::default()
    };
    assert_eq!(up(&mut s, moved), Outcome::Ok);
    let r = &s.reservations["r"];
    assert_eq!((r.start_ms, r.end_ms), (T0 + 3 * HOUR, T0 + 5 * HOUR));
    let more = ReservationSpec {
        name: "r".into(),
        resources: Some(ResvResources::NodeCount(2)),
        users: Some(vec!["bob".into()]),
        ..ReservationSpec::default()
    };
    assert_eq!(up(&mut s, more), Outcome::Ok);
    assert_eq!(s.reservations["r"].node_names(), vec!["n1", "n2"]);
    assert_eq!(s.reservations["r"].users, vec!["bob"]);
    let missing = ReservationSpec {
        name: "x".into(),
        ..ReservationSpec::default()
    };
    assert!(matches!(up(&mut s, missing), Outcome::NotFound { .. }));
}
