//! Job and node life cycles through `apply`, and the properties every replica relies on:
//! determinism, exactly-once submission, forward-only states, no double-booked GPU.

mod common;

use gsched_scheduler::plan;
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobSpec, JobState};
use gsched_types::node::{HealthEvent, HealthSeverity};
use gsched_types::topology::Topology;
use proptest::prelude::*;

fn topo(gpus: u32) -> Topology {
    common::nvlinked(gpus, "0-15")
}

fn env(cmd: Command, at: u64) -> Envelope {
    Envelope::new(cmd, at, None)
}

fn register(state: &mut ClusterState, name: &str, at: u64) {
    let out = state.apply(&env(
        Command::RegisterNode(RegisterNode {
            name: name.into(),
            address: "127.0.0.1:1".into(),
            training_addr: "127.0.0.1".into(),
            topology: topo(4),
            features: vec![],
            agent_version: "test".into(),
            known_runs: vec![],
        }),
        at,
    ));
    assert_eq!(out, Outcome::Ok);
}

fn submit(state: &mut ClusterState, nodes: u32, gpus: u32, requeue: bool, at: u64) -> JobId {
    let mut spec = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
    spec.nodes = nodes;
    spec.gpus_per_node = gpus;
    spec.requeue = requeue;
    match state.apply(&env(Command::SubmitJob(SubmitJob { spec }), at)) {
        Outcome::Submitted { jobs } => jobs[0],
        other => panic!("{other:?}"),
    }
}

/// Runs one scheduling pass and commits what it decided, as the leader does; returns the
/// jobs started.
fn schedule(state: &mut ClusterState, at: u64) -> Vec<JobId> {
    let p = plan(&snapshot(state, &mut ViewCache::default()), at);
    let mut started = Vec::new();
    for cmd in decide::commands_for(p, state) {
        if let Outcome::Started { started: s, .. } = state.apply(&env(cmd, at)) {
            started.extend(s);
        }
    }
    started
}

fn exited(state: &mut ClusterState, job: JobId, node: &str, code: i32, at: u64) {
    let attempt = state.jobs[&job].attempt;
    state.apply(&env(
        Command::RunExited(RunExited {
            job,
            attempt,
            node: node.into(),
            code: Some(code),
            signal: None,
            failure: None,
            usage: None,
        }),
        at,
    ));
}

#[test]
fn job_ids_start_at_the_configured_first_id_and_never_go_back() {
    let mut state = ClusterState::default();
    assert_eq!(submit(&mut state, 1, 0, false, 1), JobId(1));
    let set = |state: &mut ClusterState, first: u64| {
        let config = gsched_scheduler::SchedConfig {
            first_job_id: first,
            ..Default::default()
        };
        let out = state.apply(&env(
            Command::SetConfig(SetConfig {
                config: Box::new(config),
            }),
            2,
        ));
        assert_eq!(out, Outcome::Ok);
    };
    set(&mut state, 7_340_000);
    assert_eq!(submit(&mut state, 1, 0, false, 3), JobId(7_340_000));
    assert_eq!(submit(&mut state, 1, 0, false, 4), JobId(7_340_001));
    // A smaller first id (a configuration file of before the move) never reuses ids.
    set(&mut state, 1000);
    assert_eq!(submit(&mut state, 1, 0, false, 5), JobId(7_340_002));
}

#[test]
fn two_node_job_completes_when_both_steps_exit_zero() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    register(&mut s, "n2", 1);
    let j = submit(&mut s, 2, 4, false, 2);
    assert_eq!(schedule(&mut s, 3), vec![j]);
    assert_eq!(s.jobs[&j].state, JobState::Running);
    exited(&mut s, j, "n1", 0, 4);
    assert_eq!(
        s.jobs[&j].state,
        JobState::Running,
        "one rank done, the other still runs"
    );
    exited(&mut s, j, "n2", 0, 5);
    assert_eq!(s.jobs[&j].state, JobState::Completed);
    assert!(s.usage_of("n1").gpus.is_empty());
    invariants::check(&s).unwrap();
}

#[test]
fn a_failing_rank_stops_the_gang_and_keeps_the_evidence() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    register(&mut s, "n2", 1);
    let j = submit(&mut s, 2, 4, false, 2);
    schedule(&mut s, 3);
    let failure = Failure {
        kind: FailureKind::NcclTimeout,
        node: Some("n2".into()),
        evidence: "Watchdog caught collective operation timeout".into(),
        at_ms: 4,
    };
    s.apply(&env(
        Command::RunFailed(RunFailed {
            job: j,
            attempt: 0,
            node: "n2".into(),
            failure,
        }),
        4,
    ));
    assert_eq!(s.jobs[&j].state, JobState::Completing);
    exited(&mut s, j, "n2", 134, 5);
    s.apply(&env(
        Command::RunExited(RunExited {
            job: j,
            attempt: 0,
            node: "n1".into(),
            code: None,
            signal: Some(15),
            failure: Some(Failure {
                kind: FailureKind::GangStopped,
                node: Some("n1".into()),
                evidence: String::new(),
                at_ms: 5,
            }),
            usage: None,
        }),
        5,
    ));
    let job = &s.jobs[&j];
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.failure.as_ref().unwrap().kind,
        FailureKind::NcclTimeout,
        "the specific cause wins over the exit code"
    );
    invariants::check(&s).unwrap();
}

#[test]
fn lost_gpu_drains_node_fails_job_and_requeue_avoids_node() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    register(&mut s, "n2", 1);
    let j = submit(&mut s, 1, 4, true, 2);
    schedule(&mut s, 3);
    let node = s.jobs[&j].node_names()[0].clone();
    let ev = HealthEvent {
        severity: HealthSeverity::Critical,
        kind: gsched_types::node::HealthKind::GpuLost,
        gpu: Some(2),
        xid: Some(79),
        message: "GPU 2 has fallen off the bus".into(),
        at_ms: 4,
        stops_node_jobs: false,
        finding: None,
    };
    s.apply(&env(
        Command::HealthEvents(HealthEvents {
            node: node.clone(),
            events: vec![ev],
        }),
        4,
    ));
    assert!(s.nodes[&node].is_drained());
    assert_eq!(s.jobs[&j].state, JobState::Completing);
    s.apply(&env(
        Command::RunExited(RunExited {
            job: j,
            attempt: 0,
            node: node.clone(),
            code: None,
            signal: Some(9),
            failure: None,
            usage: None,
        }),
        5,
    ));
    let job = &s.jobs[&j];
    assert_eq!(job.state, JobState::Pending, "requeued");
    assert_eq!(job.attempt, 1);
    assert_eq!(job.avoid_nodes, vec![node.clone()]);
    assert_eq!(job.attempts[0].state, JobState::NodeFail);
    let started = schedule(&mut s, 6);
    assert_eq!(started, vec![j]);
    assert_ne!(s.jobs[&j].node_names()[0], node);
    invariants::check(&s).unwrap();
}

#[test]
fn node_lost_fails_running_step_and_agent_reregistration_reconciles() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let j = submit(&mut s, 1, 2, false, 2);
    schedule(&mut s, 3);
    s.apply(&env(
        Command::RunStarted(RunStarted {
            job: j,
            attempt: 0,
            node: "n1".into(),
            pid: Some(42),
        }),
        3,
    ));
    // The agent restarts and still knows the run: nothing changes.
    s.apply(&env(
        Command::RegisterNode(RegisterNode {
            name: "n1".into(),
            address: "a".into(),
            training_addr: "t".into(),
            topology: topo(4),
            features: vec![],
            agent_version: "v".into(),
            known_runs: vec![KnownRun { job: j, attempt: 0 }],
        }),
        4,
    ));
    assert_eq!(s.jobs[&j].state, JobState::Running);
    s.apply(&env(
        Command::NodeLost(NodeLost {
            node: "n1".into(),
            reason: "no heartbeat for 6 s".into(),
        }),
        10,
    ));
    assert_eq!(s.jobs[&j].state, JobState::NodeFail);
    assert!(!s.nodes["n1"].online);
    invariants::check(&s).unwrap();
}

#[test]
fn a_cancelled_job_stays_cancelled_when_its_node_dies_during_teardown() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let j = submit(&mut s, 1, 2, true, 2);
    schedule(&mut s, 3);
    s.apply(&env(
        Command::RunStarted(RunStarted {
            job: j,
            attempt: 0,
            node: "n1".into(),
            pid: Some(42),
        }),
        3,
    ));
    let cancel = Command::ActOnJobs(ActOnJobs {
        action: gsched_types::api::JobAction::Cancel,
        select: gsched_types::api::JobSelection {
            jobs: vec![gsched_types::api::JobSelector {
                id: j.0,
                task: None,
            }],
            ..Default::default()
        },
        by: "alice".into(),
        admin: false,
    });
    assert!(matches!(s.apply(&env(cancel, 4)), Outcome::Acted(a) if a.count == 1));
    assert_eq!(s.jobs[&j].state, JobState::Completing);
    s.apply(&env(
        Command::NodeLost(NodeLost {
            node: "n1".into(),
            reason: "no heartbeat for 3 s".into(),
        }),
        8,
    ));
    let job = &s.jobs[&j];
    assert_eq!(
        job.state,
        JobState::Cancelled,
        "a --requeue job the owner cancelled must not come back"
    );
    assert_eq!(job.attempt, 0);
    assert_eq!(
        job.runs[0].failure.as_ref().unwrap().kind,
        FailureKind::NodeLost,
        "the lost node stays on record"
    );
    assert!(s.usage_of("n1").gpus.is_empty());
    invariants::check(&s).unwrap();
}

#[test]
fn retried_submission_is_applied_once() {
    let mut s = ClusterState::default();
    let spec = JobSpec::simple("j", "alice", "true");
    let e = Envelope::new(
        Command::SubmitJob(SubmitJob { spec }),
        1,
        Some("req-1".into()),
    );
    let first = s.apply(&e);
    let second = s.apply(&e);
    assert_eq!(first, second);
    assert_eq!(s.jobs.len(), 1);
    // Still deduplicated after a snapshot round trip.
    let mut restored = ClusterState::from_snapshot(&s.to_snapshot()).unwrap();
    assert_eq!(restored.apply(&e), first);
    assert_eq!(restored.jobs.len(), 1);
}

#[test]
fn a_master_port_held_on_a_first_node_is_refused_until_its_job_ends() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let a = submit(&mut s, 1, 1, false, 2);
    let b = submit(&mut s, 1, 1, false, 2);
    assert_eq!(schedule(&mut s, 3), vec![a, b]);
    let port_a = s.jobs[&a].allocation.as_ref().unwrap().master_port;
    let c = submit(&mut s, 1, 1, false, 4);
    let mut on_a = plan(&snapshot(&s, &mut ViewCache::default()), 5).starts[0]
        .allocation
        .clone();
    on_a.master_port = port_a;
    let start_c = |s: &mut ClusterState, at| {
        s.apply(&env(
            Command::StartJobs(StartJobs {
                starts: vec![StartJob {
                    job: c,
                    allocation: on_a.clone(),
                    time_limit_s: None,
                }],
            }),
            at,
        ))
    };
    match start_c(&mut s, 5) {
        Outcome::Started { started, stale } => {
            assert!(started.is_empty());
            assert!(stale[0].1.contains("is in use"), "{stale:?}");
        }
        other => panic!("{other:?}"),
    }
    // The index is rebuilt from the records after a snapshot round trip.
    let mut restored = ClusterState::from_snapshot(&s.to_snapshot()).unwrap();
    assert!(restored.port_in_use("n1", port_a));
    invariants::check(&restored).unwrap();
    exited(&mut s, a, "n1", 0, 6);
    assert!(!s.port_in_use("n1", port_a));
    match start_c(&mut s, 7) {
        Outcome::Started { started, .. } => assert_eq!(started, vec![c]),
        other => panic!("{other:?}"),
    }
    invariants::check(&s).unwrap();
    exited(&mut restored, a, "n1", 0, 6);
    assert!(!restored.port_in_use("n1", port_a));
}

#[test]
fn stale_plans_never_double_book() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let a = submit(&mut s, 1, 4, false, 2);
    let b = submit(&mut s, 1, 4, false, 2);
    // Two passes planned on the same (stale) snapshot both want all four GPUs.
    let snap = snapshot(&s, &mut ViewCache::default());
    let mut p1 = plan(&snap, 3);
    p1.starts.retain(|x| x.job == a);
    let mut alloc_b = p1.starts[0].allocation.clone();
    alloc_b.master_port += 1;
    s.apply(&env(
        Command::StartJobs(StartJobs {
            starts: vec![StartJob {
                job: a,
                allocation: p1.starts[0].allocation.clone(),
                time_limit_s: None,
            }],
        }),
        3,
    ));
    let out = s.apply(&env(
        Command::StartJobs(StartJobs {
            starts: vec![StartJob {
                job: b,
                allocation: alloc_b,
                time_limit_s: None,
            }],
        }),
        4,
    ));
    match out {
        Outcome::Started { started, stale } => {
            assert!(started.is_empty());
            assert!(stale[0].1.contains("already allocated"), "{stale:?}");
        }
        other => panic!("{other:?}"),
    }
    invariants::check(&s).unwrap();
}

#[test]
fn cancel_needs_owner_or_admin() {
    let mut s = ClusterState::default();
    let j = submit(&mut s, 1, 0, false, 1);
    let cancel = |by: &str| {
        Command::ActOnJobs(ActOnJobs {
            action: gsched_types::api::JobAction::Cancel,
            select: gsched_types::api::JobSelection {
                jobs: vec![gsched_types::api::JobSelector {
                    id: j.0,
                    task: None,
                }],
                ..Default::default()
            },
            by: by.into(),
            admin: false,
        })
    };
    match s.apply(&env(cancel("mallory"), 2)) {
        Outcome::Acted(a) => assert!(a.errors[0].contains("belongs to alice"), "{a:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.jobs[&j].state, JobState::Pending);
    assert!(matches!(s.apply(&env(cancel("alice"), 3)), Outcome::Acted(a) if a.count == 1));
    assert_eq!(s.jobs[&j].state, JobState::Cancelled);
}

#[test]
fn golden_encoding_still_decodes() {
    // A v1 entry as written by this version; changing the format must keep this decoding.
    let golden = r#"{"v":1,"request_id":"r1","at_ms":5,"cmd":{"type":"cancel_job","job":7,"by":"alice","admin":false}}"#;
    let e = Envelope::decode(golden.as_bytes()).unwrap();
    assert_eq!(
        e.cmd,
        Command::CancelJob(CancelJob {
            job: JobId(7),
            by: "alice".into(),
            admin: false
        })
    );
    assert!(Envelope::decode(br#"{"v":99,"at_ms":1,"cmd":{"type":"noop"}}"#).is_err());
}

#[derive(Debug, Clone)]
enum Op {
    Submit {
        nodes: u32,
        gpus: u32,
        requeue: bool,
        hold: bool,
    },
    Hold {
        job: usize,
        hold: bool,
    },
    Act {
        job: usize,
        action: gsched_types::api::JobAction,
    },
    Requeue {
        job: usize,
    },
    Schedule,
    Exit {
        job: usize,
        code: i32,
    },
    Fail {
        job: usize,
    },
    Cancel {
        job: usize,
    },
    Lose {
        node: usize,
    },
    Register {
        node: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            1u32..=2,
            0u32..=4,
            any::<bool>(),
            proptest::bool::weighted(0.2)
        )
            .prop_map(|(nodes, gpus, requeue, hold)| Op::Submit {
                nodes,
                gpus,
                requeue,
                hold
            }),
        (0usize..20, any::<bool>()).prop_map(|(job, hold)| Op::Hold { job, hold }),
        (
            0usize..20,
            prop_oneof![
                Just(gsched_types::api::JobAction::Cancel),
                Just(gsched_types::api::JobAction::Hold),
                Just(gsched_types::api::JobAction::Release),
                Just(gsched_types::api::JobAction::Requeue),
                Just(gsched_types::api::JobAction::Update {
                    time_limit_s: Some(60)
                }),
                Just(gsched_types::api::JobAction::Update {
                    time_limit_s: Some(0)
                }),
            ]
        )
            .prop_map(|(job, action)| Op::Act { job, action }),
        (0usize..20).prop_map(|job| Op::Requeue { job }),
        Just(Op::Schedule),
        Just(Op::Schedule),
        (0usize..20, 0i32..2).prop_map(|(job, code)| Op::Exit { job, code }),
        (0usize..20).prop_map(|job| Op::Fail { job }),
        (0usize..20).prop_map(|job| Op::Cancel { job }),
        (0usize..3).prop_map(|node| Op::Lose { node }),
        (0usize..3).prop_map(|node| Op::Register { node }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Random operation sequences never double-book a GPU, only move job states forward
    /// within an attempt, and two replicas fed the same log agree byte for byte.
    #[test]
    fn random_histories_keep_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut s = ClusterState::default();
        for n in 0..3 { register(&mut s, &format!("n{n}"), 1); }
        let mut log: Vec<Envelope> = Vec::new();
        let mut ids: Vec<JobId> = Vec::new();
        let mut last_seen: std::collections::HashMap<JobId, (u32, u8)> = Default::default();
        for (t, o) in ops.into_iter().enumerate() {
            let at = 10 + t as u64;
            let pick = |i: usize| ids.get(i % ids.len().max(1)).copied();
            let cmd = match o {
                Op::Submit { nodes, gpus, requeue, hold } => {
                    let mut spec = JobSpec::simple("j", "alice", "true");
                    spec.nodes = nodes; spec.gpus_per_node = gpus; spec.requeue = requeue; spec.hold = hold;
                    Some(Command::SubmitJob(SubmitJob { spec }))
                }
                Op::Hold { job, hold } => pick(job).map(|j| Command::HoldJob(HoldJob { job: j, by: "alice".into(), admin: false, hold })),
                Op::Act { job, action } => pick(job).map(|j| Command::ActOnJobs(ActOnJobs {
                    action,
                    select: gsched_types::api::JobSelection { jobs: vec![gsched_types::api::JobSelector::parse(&j.to_string()).unwrap()], ..Default::default() },
                    by: "alice".into(),
                    admin: false,
                })),
                Op::Requeue { job } => pick(job).map(|j| Command::RequeueJob(RequeueJob { job: j, by: "alice".into(), admin: false })),
                Op::Schedule => {
                    let p = plan(&snapshot(&s, &mut ViewCache::default()), at);
                    Some(Command::StartJobs(StartJobs { starts: p.starts.into_iter().map(|x| StartJob { job: x.job, allocation: x.allocation, time_limit_s: x.time_limit_s }).collect() }))
                }
                Op::Exit { job, code } => pick(job).and_then(|j| {
                    let r = &s.jobs.get(&j)?;
                    let node = r.runs.iter().find(|st| !st.state.is_done())?.node.clone();
                    Some(Command::RunExited(RunExited { job: j, attempt: r.attempt, node, code: Some(code), signal: None, failure: None, usage: None }))
                }),
                Op::Fail { job } => pick(job).and_then(|j| {
                    let r = &s.jobs.get(&j)?;
                    let node = r.runs.first()?.node.clone();
                    Some(Command::RunFailed(RunFailed { job: j, attempt: r.attempt, node: node.clone(), failure: Failure { kind: FailureKind::NcclError, node: Some(node), evidence: "x".into(), at_ms: at } }))
                }),
                Op::Cancel { job } => pick(job).map(|j| Command::CancelJob(CancelJob { job: j, by: "alice".into(), admin: false })),
                Op::Lose { node } => Some(Command::NodeLost(NodeLost { node: format!("n{node}"), reason: "test".into() })),
                Op::Register { node } => Some(Command::RegisterNode(RegisterNode { name: format!("n{node}"), address: "a".into(), training_addr: "t".into(), topology: topo(4), features: vec![], agent_version: "v".into(), known_runs: vec![] })),
            };
            let Some(cmd) = cmd else { continue };
            let e = env(cmd, at);
            if let Outcome::Submitted { jobs } = s.apply(&e) { ids.extend(jobs); }
            log.push(e);
            prop_assert!(invariants::check(&s).is_ok(), "{:?}", invariants::check(&s));
            for (id, j) in &s.jobs {
                let now = (j.attempt, j.state.rank());
                if let Some(prev) = last_seen.insert(*id, now) {
                    prop_assert!(now >= prev, "job {} went back from {:?} to {:?}", id, prev, now);
                }
            }
        }
        let mut replica = ClusterState::default();
        for n in 0..3 { register(&mut replica, &format!("n{n}"), 1); }
        for e in &log { replica.apply(e); }
        prop_assert_eq!(replica.digest(), s.digest());
        let restored = ClusterState::from_snapshot(&s.to_snapshot()).unwrap();
        prop_assert_eq!(restored.digest(), s.digest());
        prop_assert!(invariants::check(&restored).is_ok());
    }
}

fn submit_spec(state: &mut ClusterState, spec: JobSpec, at: u64) -> Vec<JobId> {
    match state.apply(&env(Command::SubmitJob(SubmitJob { spec }), at)) {
        Outcome::Submitted { jobs } => jobs,
        other => panic!("{other:?}"),
    }
}

fn reasons(state: &ClusterState, at: u64) -> Vec<(JobId, gsched_types::job::PendingReason)> {
    plan(&snapshot(state, &mut ViewCache::default()), at).reasons
}

#[test]
fn array_throttle_limits_running_tasks() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let mut spec = JobSpec::simple("sweep", "alice", "true");
    spec.gpus_per_node = 1;
    spec.array = Some(vec![0, 1, 2, 3]);
    spec.array_limit = Some(2);
    let ids = submit_spec(&mut s, spec, 2);
    assert_eq!(ids.len(), 4);
    assert_eq!(s.jobs[&ids[3]].array_task.unwrap().array_job_id, ids[0]);
    assert_eq!(schedule(&mut s, 3).len(), 2, "%2 allows two tasks at once");
    let r = reasons(&s, 4);
    assert!(
        r.iter()
            .all(|(_, r)| *r == gsched_types::job::PendingReason::JobArrayTaskLimit),
        "{r:?}"
    );
}

#[test]
fn afterok_waits_and_never_satisfied_is_reported() {
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let a = submit(&mut s, 1, 1, false, 1);
    let mut spec = JobSpec::simple("after", "alice", "true");
    spec.dependency = gsched_types::parse::dependency(&format!("afterok:{a}")).unwrap();
    let b = submit_spec(&mut s, spec.clone(), 2)[0];
    assert_eq!(schedule(&mut s, 3), vec![a]);
    assert!(reasons(&s, 4).contains(&(b, gsched_types::job::PendingReason::Dependency)));
    exited(&mut s, a, "n1", 0, 5);
    assert_eq!(schedule(&mut s, 6), vec![b]);
    // A dependency on a failed job can never be met.
    let c = submit(&mut s, 1, 1, false, 7);
    let d = submit_spec(
        &mut s,
        JobSpec {
            dependency: gsched_types::parse::dependency(&format!("afterok:{c}")).unwrap(),
            ..spec
        },
        8,
    )[0];
    schedule(&mut s, 9);
    exited(&mut s, c, "n1", 3, 10);
    assert!(reasons(&s, 11).contains(&(
        d,
        gsched_types::job::PendingReason::DependencyNeverSatisfied
    )));
}

#[test]
fn per_user_gpu_limit_binds() {
    let mut s = ClusterState::default();
    let mut config = gsched_scheduler::SchedConfig::default();
    config.user_limits.max_gpus = Some(4);
    s.apply(&env(
        Command::SetConfig(SetConfig {
            config: Box::new(config),
        }),
        1,
    ));
    register(&mut s, "n1", 1);
    register(&mut s, "n2", 1);
    let ids: Vec<JobId> = (0..3).map(|i| submit(&mut s, 1, 2, false, 2 + i)).collect();
    assert_eq!(schedule(&mut s, 10).len(), 2);
    assert!(
        reasons(&s, 11).contains(&(ids[2], gsched_types::job::PendingReason::QosMaxGpusPerUser))
    );
}

#[test]
fn preemption_requeues_lower_qos_work_when_enabled() {
    let mut s = ClusterState::default();
    let mut config = gsched_scheduler::SchedConfig::default();
    config.preemption = true;
    config.qos = vec![
        gsched_scheduler::config::QosConfig {
            name: "normal".into(),
            priority: 0,
            max_gpus_per_user: None,
            max_jobs_per_user: None,
            max_time_s: None,
            preempt: vec![],
            max_submit_jobs_per_user: None,
        },
        gsched_scheduler::config::QosConfig {
            name: "high".into(),
            priority: 100,
            max_gpus_per_user: None,
            max_jobs_per_user: None,
            max_time_s: None,
            preempt: vec!["normal".into()],
            max_submit_jobs_per_user: None,
        },
    ];
    s.apply(&env(
        Command::SetConfig(SetConfig {
            config: Box::new(config),
        }),
        1,
    ));
    register(&mut s, "n1", 1);
    let mut low = JobSpec::simple("low", "bob", "true");
    low.gpus_per_node = 4;
    low.qos = Some("normal".into());
    let victim = submit_spec(&mut s, low, 2)[0];
    assert_eq!(schedule(&mut s, 3), vec![victim]);
    let mut high = JobSpec::simple("high", "alice", "true");
    high.gpus_per_node = 4;
    high.qos = Some("high".into());
    let urgent = submit_spec(&mut s, high, 4)[0];
    let p = plan(&snapshot(&s, &mut ViewCache::default()), 5);
    assert_eq!(p.preemptions.len(), 1);
    assert_eq!(
        (p.preemptions[0].victim, p.preemptions[0].for_job),
        (victim, urgent)
    );
    s.apply(&env(
        Command::Preempt(Preempt {
            victims: vec![victim],
            for_job: urgent,
        }),
        5,
    ));
    assert_eq!(s.jobs[&victim].state, JobState::Completing);
    s.apply(&env(
        Command::RunExited(RunExited {
            job: victim,
            attempt: 0,
            node: "n1".into(),
            code: None,
            signal: Some(15),
            failure: None,
            usage: None,
        }),
        6,
    ));
    assert_eq!(
        s.jobs[&victim].state,
        JobState::Pending,
        "preempted work goes back to the queue"
    );
    assert_eq!(schedule(&mut s, 7), vec![urgent]);
    // And with preemption off nothing is preempted.
    let mut off = s.config.clone();
    off.preemption = false;
    s.apply(&env(
        Command::SetConfig(SetConfig {
            config: Box::new(off),
        }),
        8,
    ));
    assert!(
        plan(&snapshot(&s, &mut ViewCache::default()), 9)
            .preemptions
            .is_empty()
    );
}

fn submit_as(state: &mut ClusterState, user: &str, at: u64) -> JobId {
    let mut spec = JobSpec::simple("j", user, "#!/bin/sh\ntrue\n");
    spec.gpus_per_node = 1;
    spec.hold = true;
    match state.apply(&env(Command::SubmitJob(SubmitJob { spec }), at)) {
        Outcome::Submitted { jobs } => jobs[0],
        other => panic!("{other:?}"),
    }
}

fn act(
    state: &mut ClusterState,
    action: gsched_types::api::JobAction,
    select: gsched_types::api::JobSelection,
    by: &str,
    admin: bool,
) -> Outcome {
    state.apply(&env(
        Command::ActOnJobs(ActOnJobs {
            action,
            select,
            by: by.into(),
            admin,
        }),
        50,
    ))
}

#[test]
fn bulk_actions_touch_only_what_the_caller_may_and_say_what_they_refused() {
    use gsched_types::api::{ActionSummary, JobAction, JobSelection, JobSelector};
    let mut state = ClusterState::default();
    register(&mut state, "n1", 1);
    let alice: Vec<JobId> = (0..5)
        .map(|i| submit_as(&mut state, "alice", 10 + i))
        .collect();
    let bob = submit_as(&mut state, "bob", 20);
    // Nothing named: refused, nothing changes.
    let before = state.jobs.clone();
    assert!(matches!(
        act(
            &mut state,
            JobAction::Cancel,
            JobSelection::default(),
            "root",
            true
        ),
        Outcome::Rejected { .. }
    ));
    assert_eq!(state.jobs, before);
    // A filter finds only the caller's own jobs.
    let pending = JobSelection {
        states: vec![JobState::Pending],
        ..Default::default()
    };
    assert_eq!(
        act(
            &mut state,
            JobAction::Release,
            pending.clone(),
            "alice",
            false
        ),
        Outcome::Acted(ActionSummary {
            count: 5,
            errors: vec![]
        })
    );
    assert!(state.jobs[&bob].held, "bob's job is not alice's to release");
    // Naming someone else's job is an error for that job; the rest happens.
    let named = JobSelection {
        jobs: vec![
            JobSelector {
                id: alice[0].0,
                task: None,
            },
            JobSelector {
                id: bob.0,
                task: None,
            },
            JobSelector {
                id: 999,
                task: None,
            },
        ],
        ..Default::default()
    };
    match act(&mut state, JobAction::Cancel, named, "alice", false) {
        Outcome::Acted(s) => {
            assert_eq!(s.count, 1);
            assert_eq!(s.errors.len(), 2, "{:?}", s.errors);
            assert!(s.errors.iter().any(|e| e.contains("belongs to bob")));
            assert!(s.errors.iter().any(|e| e.contains("999")));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state.jobs[&alice[0]].state, JobState::Cancelled);
    assert_eq!(state.jobs[&bob].state, JobState::Pending);
    // `gcancel -u alice` by alice: the other four, in one entry.
    let mine = JobSelection {
        users: vec!["alice".into()],
        ..Default::default()
    };
    assert_eq!(
        act(&mut state, JobAction::Cancel, mine.clone(), "alice", false),
        Outcome::Acted(ActionSummary {
            count: 4,
            errors: vec![]
        })
    );
    assert!(matches!(
        act(&mut state, JobAction::Cancel, mine, "alice", false),
        Outcome::Rejected { message } if message.contains("already ended")
    ));
    // An operator's filter reaches everyone.
    assert_eq!(
        act(&mut state, JobAction::Cancel, pending, "root", true),
        Outcome::Acted(ActionSummary {
            count: 1,
            errors: vec![]
        })
    );
}

#[test]
fn requeue_of_a_nodes_jobs_is_one_entry() {
    use gsched_types::api::{JobAction, JobSelection};
    let mut state = ClusterState::default();
    register(&mut state, "n1", 1);
    register(&mut state, "n2", 1);
    let jobs: Vec<JobId> = (0..4)
        .map(|i| submit(&mut state, 1, 2, true, 10 + i))
        .collect();
    schedule(&mut state, 20);
    let on_n1: Vec<JobId> = jobs
        .iter()
        .copied()
        .filter(|j| state.jobs[j].node_names() == ["n1"])
        .collect();
    assert_eq!(on_n1.len(), 2);
    let select = JobSelection {
        nodes: vec!["n1".into()],
        ..Default::default()
    };
    match act(&mut state, JobAction::Requeue, select, "root", true) {
        Outcome::Acted(s) => assert_eq!(s.count, 2),
        other => panic!("{other:?}"),
    }
    for j in &jobs {
        let ending = state.jobs[j].state == JobState::Completing;
        assert_eq!(ending, on_n1.contains(j), "job {j}");
    }
}

#[test]
fn a_queued_job_keeps_the_partition_it_was_submitted_to() {
    let partitions = |default: &str| {
        let mut config = gsched_scheduler::SchedConfig::default();
        config.partitions = ["a", "b"]
            .iter()
            .map(|name| gsched_scheduler::config::PartitionConfig {
                name: name.to_string(),
                default: *name == default,
                ..serde_json::from_str(r#"{"name": ""}"#).unwrap()
            })
            .collect();
        Command::SetConfig(SetConfig {
            config: Box::new(config),
        })
    };
    let mut s = ClusterState::default();
    s.apply(&env(partitions("a"), 1));
    let job = submit(&mut s, 1, 1, false, 2);
    assert_eq!(s.config.partition_of(&s.jobs[&job].spec), "a");
    // The admin makes b the default: jobs already queued stay where they were sent.
    s.apply(&env(partitions("b"), 3));
    assert_eq!(s.config.partition_of(&s.jobs[&job].spec), "a");
    let later = submit(&mut s, 1, 1, false, 4);
    assert_eq!(s.config.partition_of(&s.jobs[&later].spec), "b");
}

#[test]
fn a_jobs_wait_for_its_best_placement_starts_at_its_first_topology_wait_and_ends_with_the_attempt()
{
    use gsched_types::job::PendingReason;
    let mut s = ClusterState::default();
    register(&mut s, "n1", 1);
    let j = submit(&mut s, 1, 2, true, 2);
    let set = |s: &mut ClusterState, reason: PendingReason, at: u64| {
        s.apply(&env(
            Command::SetPendingReasons(SetPendingReasons {
                reasons: vec![(j, reason)],
            }),
            at,
        ));
    };
    set(&mut s, PendingReason::Resources, 3);
    assert_eq!(s.jobs[&j].placement_wait_since_ms, None);
    set(&mut s, PendingReason::TopologyWait, 4);
    set(&mut s, PendingReason::Resources, 5);
    set(&mut s, PendingReason::TopologyWait, 6);
    assert_eq!(
        s.jobs[&j].placement_wait_since_ms,
        Some(4),
        "the first time counts"
    );

    assert_eq!(schedule(&mut s, 7), vec![j]);
    let requeue = Command::ActOnJobs(ActOnJobs {
        action: gsched_types::api::JobAction::Requeue,
        select: gsched_types::api::JobSelection {
            jobs: vec![gsched_types::api::JobSelector {
                id: j.0,
                task: None,
            }],
            ..Default::default()
        },
        by: "alice".into(),
        admin: false,
    });
    let out = s.apply(&env(requeue, 8));
    assert!(matches!(out, Outcome::Acted(a) if a.count == 1));
    exited(&mut s, j, "n1", 143, 9);
    assert_eq!(s.jobs[&j].state, JobState::Pending, "requeued");
    assert_eq!(
        s.jobs[&j].placement_wait_since_ms, None,
        "a new attempt waits afresh"
    );
    invariants::check(&s).unwrap();
}
