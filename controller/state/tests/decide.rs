//! The leader's decisions, table by table: what kills say (cause, grace, reason), when
//! launches and kills are sent and re-sent, when a gang stop waits for a peer's report,
//! which time limit applies (a job's own, its partition's default, none) and when a node
//! counts as lost.

mod common;

use gsched_scheduler::config::PartitionConfig;
use gsched_scheduler::{SchedConfig, plan};
use gsched_state::decide::{self, DispatchConfig, DispatchMemo, KillOrder, Liveness};
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::agent::{ControllerToAgent, RunRef};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobSpec, JobState};
use gsched_types::topology::Topology;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn topo(gpus: u32) -> Topology {
    common::nvlinked(gpus, "0-15")
}

fn apply(s: &mut ClusterState, cmd: Command, at: u64) -> Outcome {
    s.apply(&Envelope::new(cmd, at, None))
}

fn cluster(nodes: &[&str], config: SchedConfig) -> ClusterState {
    let mut s = ClusterState::default();
    apply(
        &mut s,
        Command::SetConfig(SetConfig {
            config: Box::new(config),
        }),
        1,
    );
    for n in nodes {
        let reg = RegisterNode {
            name: n.to_string(),
            address: "127.0.0.1:1".into(),
            training_addr: "127.0.0.1".into(),
            topology: topo(4),
            features: vec![],
            agent_version: "test".into(),
            known_runs: vec![],
        };
        assert_eq!(apply(&mut s, Command::RegisterNode(reg), 1), Outcome::Ok);
    }
    s
}

/// Submits `spec` and runs one scheduling pass the way the leader does.
fn run(s: &mut ClusterState, spec: JobSpec, at: u64) -> JobId {
    let Outcome::Submitted { jobs } = apply(s, Command::SubmitJob(SubmitJob { spec }), at) else {
        panic!("submit refused")
    };
    let p = plan(&snapshot(s, &mut ViewCache::default()), at);
    for cmd in decide::commands_for(p, s) {
        apply(s, cmd, at);
    }
    assert_eq!(s.jobs[&jobs[0]].state, JobState::Running);
    jobs[0]
}

fn gpu_job(nodes: u32, limit: Option<u64>) -> JobSpec {
    let mut spec = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
    spec.nodes = nodes;
    spec.gpus_per_node = 2;
    spec.time_limit_s = limit;
    spec
}

fn failure(kind: FailureKind, evidence: &str) -> Failure {
    Failure::new(kind, evidence, 5).on("n1")
}

#[test]
fn kill_orders_name_the_cause_and_the_grace() {
    let cfg = DispatchConfig {
        kill_grace_s: 30,
        gang_stop_grace_s: 3,
        ..Default::default()
    };
    let cases: Vec<(Option<Failure>, FailureKind, u64)> = vec![
        (None, FailureKind::GangStopped, 3),
        (
            Some(failure(FailureKind::Cancelled, "cancelled by alice")),
            FailureKind::Cancelled,
            30,
        ),
        (
            Some(failure(FailureKind::Timeout, "time limit")),
            FailureKind::Timeout,
            30,
        ),
        (
            Some(failure(FailureKind::Preempted, "for job 9")),
            FailureKind::Preempted,
            30,
        ),
        (
            Some(failure(FailureKind::NcclTimeout, "watchdog")),
            FailureKind::GangStopped,
            3,
        ),
        (
            Some(failure(FailureKind::GpuLost { gpu: Some(1) }, "Xid 79")),
            FailureKind::GangStopped,
            3,
        ),
        (
            Some(failure(FailureKind::ExitCode { code: 2 }, "exit 2")),
            FailureKind::GangStopped,
            3,
        ),
    ];
    for (f, cause, grace_s) in cases {
        let KillOrder {
            cause: got,
            grace_s: got_grace,
            reason,
        } = decide::kill_order(f.as_ref(), &cfg);
        assert_eq!((got, got_grace), (cause.clone(), grace_s), "{f:?}");
        match &f {
            Some(f) => assert!(reason.contains(&f.evidence), "{reason}"),
            None => assert_eq!(reason, "job ending"),
        }
    }
}

#[test]
fn launches_go_to_connected_agents_once_and_again_if_unconfirmed() {
    let mut s = cluster(&["n1", "n2"], SchedConfig::default());
    let job = run(&mut s, gpu_job(2, Some(600)), 10);
    let cfg = DispatchConfig::default();
    let mut memo = DispatchMemo::default();
    let t0 = Instant::now();
    let mut connected: BTreeMap<String, Vec<RunRef>> = BTreeMap::new();
    connected.insert("n1".into(), vec![]);
    let round = decide::dispatch(&s, &connected, &mut memo, &cfg, t0);
    assert_eq!(
        round.sends.len(),
        1,
        "only the connected node gets its launch"
    );
    let (node, ControllerToAgent::Launch(l)) = &round.sends[0] else {
        panic!("{:?}", round.sends)
    };
    assert_eq!((node.as_str(), l.job, l.node_rank), ("n1", job, 0));
    assert_eq!(l.time_limit_s, Some(600));
    let again = decide::dispatch(&s, &connected, &mut memo, &cfg, t0 + Duration::from_secs(1));
    assert!(again.sends.is_empty(), "not re-sent within 3 s");
    let late = decide::dispatch(&s, &connected, &mut memo, &cfg, t0 + Duration::from_secs(4));
    assert_eq!(
        late.sends.len(),
        1,
        "re-sent when still unconfirmed after 3 s"
    );
    connected.insert("n1".into(), vec![RunRef { job, attempt: 0 }]);
    let confirmed = decide::dispatch(&s, &connected, &mut memo, &cfg, t0 + Duration::from_secs(9));
    assert!(
        confirmed.sends.is_empty(),
        "the agent runs it: nothing to send"
    );
}

#[test]
fn a_gang_stop_that_blames_a_peer_waits_for_the_peers_report() {
    let mut s = cluster(&["n1", "n2"], SchedConfig::default());
    let job = run(&mut s, gpu_job(2, None), 10);
    let echo = Failure::new(
        FailureKind::NcclError,
        "NCCL WARN socketProgress: Connection closed by remote peer",
        20,
    )
    .on("n2");
    let report = RunFailed {
        job,
        attempt: 0,
        node: "n2".into(),
        failure: echo,
    };
    apply(&mut s, Command::RunFailed(report), 20);
    assert_eq!(s.jobs[&job].state, JobState::Completing);
    let cfg = DispatchConfig::default();
    let mut memo = DispatchMemo::default();
    let mut connected = BTreeMap::new();
    for n in ["n1", "n2"] {
        connected.insert(n.to_string(), vec![RunRef { job, attempt: 0 }]);
    }
    let t0 = Instant::now();
    let held = decide::dispatch(&s, &connected, &mut memo, &cfg, t0);
    assert!(held.waiting && held.sends.is_empty(), "{held:?}");
    let later = decide::dispatch(
        &s,
        &connected,
        &mut memo,
        &cfg,
        t0 + cfg.peer_report_wait * 2,
    );
    assert!(!later.waiting);
    assert_eq!(
        later.sends.len(),
        2,
        "both nodes are stopped once the wait is over"
    );
    for (_, msg) in &later.sends {
        let ControllerToAgent::Kill { cause, grace_s, .. } = msg else {
            panic!("{msg:?}")
        };
        assert_eq!(
            (cause, *grace_s),
            (&FailureKind::GangStopped, cfg.gang_stop_grace_s)
        );
    }
}

#[test]
fn steps_the_state_does_not_want_are_killed() {
    let mut s = cluster(&["n1"], SchedConfig::default());
    let job = run(&mut s, gpu_job(1, None), 10);
    let cancel = Command::ActOnJobs(ActOnJobs {
        action: gsched_types::api::JobAction::Cancel,
        select: gsched_types::api::JobSelection {
            jobs: vec![gsched_types::api::JobSelector {
                id: job.0,
                task: None,
            }],
            ..Default::default()
        },
        by: "alice".into(),
        admin: false,
    });
    apply(&mut s, cancel, 11);
    let stale = RunExited {
        job,
        attempt: 0,
        node: "n1".into(),
        code: Some(0),
        signal: Some(15),
        failure: None,
        usage: None,
    };
    apply(&mut s, Command::RunExited(stale), 12);
    assert_eq!(s.jobs[&job].state, JobState::Cancelled);
    // The agent still reports the run (and one of a job that never existed).
    let mut connected = BTreeMap::new();
    connected.insert(
        "n1".to_string(),
        vec![
            RunRef { job, attempt: 0 },
            RunRef {
                job: JobId(999),
                attempt: 0,
            },
        ],
    );
    let round = decide::dispatch(
        &s,
        &connected,
        &mut DispatchMemo::default(),
        &DispatchConfig::default(),
        Instant::now(),
    );
    let killed: Vec<JobId> = round
        .sends
        .iter()
        .map(|(_, m)| match m {
            ControllerToAgent::Kill { job, reason, .. } => {
                assert!(reason.contains("no longer running"));
                *job
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(killed, vec![job, JobId(999)]);
}

#[test]
fn the_time_limit_is_the_jobs_own_else_its_partitions_default() {
    let config = SchedConfig {
        partitions: vec![
            PartitionConfig {
                name: "short".into(),
                nodes: None,
                default: true,
                max_time_s: None,
                default_time_s: Some(120),
                priority: 0,
                max_nodes: None,
            },
            PartitionConfig {
                name: "long".into(),
                nodes: None,
                default: false,
                max_time_s: None,
                default_time_s: None,
                priority: 0,
                max_nodes: None,
            },
        ],
        ..Default::default()
    };
    let mut s = cluster(&["n1", "n2", "n3", "n4"], config);
    let own = run(&mut s, gpu_job(1, Some(60)), 1_000);
    // Submitted without -p: the default partition's default applies (this was looked up
    // under partition "" and never applied).
    let defaulted = run(&mut s, gpu_job(1, None), 1_000);
    let mut long = gpu_job(1, None);
    long.partition = Some("long".into());
    let unlimited = run(&mut s, long, 1_000);
    let cases = [(own, Some(60)), (defaulted, Some(120)), (unlimited, None)];
    for (job, limit) in cases {
        assert_eq!(s.config.time_limit_for(&s.jobs[&job].spec), limit);
        let l = decide::launch_spec(&s, &s.jobs[&job], 0, &DispatchConfig::default()).unwrap();
        assert_eq!(l.time_limit_s, limit, "launch of job {job}");
    }
    let slack = 40;
    let overdue = |now_ms: u64| -> Vec<JobId> {
        decide::overdue_jobs(&s, now_ms, slack)
            .into_iter()
            .map(|t| t.job)
            .collect()
    };
    assert!(
        overdue(1_000 + (60 + slack) * 1000).is_empty(),
        "not past yet"
    );
    assert_eq!(overdue(1_001 + (60 + slack) * 1000), vec![own]);
    assert_eq!(overdue(1_001 + (120 + slack) * 1000), vec![own, defaulted]);
    assert_eq!(
        overdue(u64::MAX / 2),
        vec![own, defaulted],
        "a job without a limit is never overdue"
    );
}

#[test]
fn silent_agents_stop_answering_first_and_are_lost_later() {
    let mut s = cluster(&["n1", "n2", "n3"], SchedConfig::default());
    let limits = Liveness {
        not_responding: Duration::from_secs(6),
        lost: Duration::from_secs(60),
    };
    assert_eq!(limits.lease(), Duration::from_secs(50));
    let silent = |n: &str| match n {
        "n1" => Duration::from_secs(1),
        "n2" => Duration::from_secs(7),
        _ => Duration::from_secs(61),
    };
    let cmds = decide::liveness(&s, silent, limits);
    assert_eq!(
        cmds,
        vec![
            Command::NodeResponding(NodeResponding {
                node: "n2".into(),
                responding: false
            }),
            Command::NodeLost(NodeLost {
                node: "n3".into(),
                reason: "no word from the agent for 60 s (the dead-node timeout)".into()
            }),
        ]
    );
    for c in cmds {
        apply(&mut s, c, 5);
    }
    assert!(!s.nodes["n2"].responding && s.nodes["n2"].online);
    assert!(
        !s.nodes["n2"].is_schedulable(),
        "a silent node takes no new job"
    );
    assert!(!s.nodes["n3"].online);
    // n2 answers again.
    let cmds = decide::liveness(&s, |_| Duration::from_secs(1), limits);
    assert_eq!(
        cmds,
        vec![Command::NodeResponding(NodeResponding {
            node: "n2".into(),
            responding: true
        })]
    );
}

#[test]
fn a_nodes_kills_in_one_round_go_as_one_message() {
    let kill = |job: u64| ControllerToAgent::Kill {
        job: JobId(job),
        attempt: 0,
        cause: FailureKind::Cancelled,
        reason: format!("cancel {job}"),
        grace_s: 10,
    };
    let signal = ControllerToAgent::Signal {
        job: JobId(9),
        attempt: 0,
        signal: 10,
        batch_only: false,
    };
    let sends = vec![
        ("n1".to_string(), kill(1)),
        ("n2".to_string(), kill(2)),
        ("n1".to_string(), signal.clone()),
        ("n1".to_string(), kill(3)),
        ("n4".to_string(), kill(4)),
        ("n4".to_string(), kill(5)),
        ("n3".to_string(), kill(6)),
    ];
    let out = decide::batch_kills(sends);
    let shape: Vec<(&str, Vec<u64>)> = out
        .iter()
        .map(|(n, m)| {
            let jobs = match m {
                ControllerToAgent::Kills { kills } => kills.iter().map(|k| k.job.0).collect(),
                ControllerToAgent::Kill { job, .. } => vec![job.0],
                _ => vec![],
            };
            (n.as_str(), jobs)
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("n1", vec![1, 3]),
            ("n2", vec![2]),
            ("n1", vec![]),
            ("n4", vec![4, 5]),
            ("n3", vec![6]),
        ],
        "{out:?}"
    );
    assert!(matches!(out[0].1, ControllerToAgent::Kills { .. }));
    assert!(
        matches!(out[1].1, ControllerToAgent::Kill { .. }),
        "a node's only kill stays a Kill"
    );
    assert_eq!(out[2].1, signal);
    assert!(matches!(out[3].1, ControllerToAgent::Kills { .. }));
    let ControllerToAgent::Kills { kills } = &out[0].1 else {
        unreachable!()
    };
    assert_eq!(
        (kills[1].reason.as_str(), kills[1].grace_s, &kills[1].cause),
        ("cancel 3", 10, &FailureKind::Cancelled)
    );
}

/// A node's summary with every GPU at `util`% for `secs` seconds (samples every 10 s,
/// idle under 5%).
fn usage_of(node: &str, gpus: u32, util: u8, secs: u64) -> gsched_types::usage::NodeUsage {
    use gsched_types::usage::{GpuReading, GpuUsage, NodeUsage};
    let gpus = (0..gpus)
        .map(|g| {
            let mut u = GpuUsage::new(g);
            for _ in 0..secs / 10 {
                u.add(
                    GpuReading {
                        util_pct: util,
                        mem_used_mib: 100,
                        power_w: None,
                    },
                    10,
                    5,
                );
            }
            u
        })
        .collect();
    NodeUsage {
        node: node.into(),
        interval_s: 10,
        sampled_s: secs,
        gpus,
        cpu_ms: 0,
        cpus: 1,
        mem_max_mib: 0,
        mem_limit_mib: 0,
    }
}

fn idle_policy(toml_json: serde_json::Value) -> gsched_state::idle::IdlePolicy {
    serde_json::from_value(toml_json).expect("policy")
}

fn report(s: &mut ClusterState, job: JobId, usage: gsched_types::usage::NodeUsage, at: u64) {
    let node = usage.node.clone();
    let c = Command::RecordUsage(RecordUsage {
        job,
        attempt: 0,
        node,
        usage,
    });
    assert_eq!(apply(s, c, at), Outcome::Ok);
}

#[test]
fn an_idle_job_is_warned_after_after_s_and_cancelled_after_the_grace_not_before() {
    use gsched_state::idle::decide as idle;
    let mut s = cluster(&["n1", "n2"], SchedConfig::default());
    let policy = idle_policy(serde_json::json!({
        "threshold_pct": 5, "after_s": 600, "action": "cancel", "grace_s": 300
    }));
    let job = run(&mut s, gpu_job(1, None), 10);
    let node = s.jobs[&job].node_names()[0].clone();
    // No summary yet: nothing is known, nothing is done.
    assert!(idle(&s, &policy, 20_000).is_empty());
    report(&mut s, job, usage_of(&node, 2, 0, 590), 600_000);
    assert!(idle(&s, &policy, 600_000).is_empty(), "under after_s");
    report(&mut s, job, usage_of(&node, 2, 0, 600), 610_000);
    let warn = idle(&s, &policy, 610_000);
    let [Command::IdleGpus(w)] = warn.as_slice() else {
        panic!("one warning expected: {warn:?}")
    };
    assert!(
        !w.cancel && w.notice.cancel && w.notice.grace_s == 300,
        "{w:?}"
    );
    assert!(w.notice.evidence.contains("gpu0 mean 0%"), "{w:?}");
    assert_eq!(apply(&mut s, warn[0].clone(), 610_000), Outcome::Ok);
    assert!(s.jobs[&job].idle.is_some());
    // Warned: the same level gives no second warning, and no cancel before the grace.
    report(&mut s, job, usage_of(&node, 2, 0, 890), 900_000);
    assert!(idle(&s, &policy, 900_000).is_empty());
    report(&mut s, job, usage_of(&node, 2, 0, 900), 910_000);
    let cancel = idle(&s, &policy, 910_000);
    let [Command::IdleGpus(c)] = cancel.as_slice() else {
        panic!("one cancel expected: {cancel:?}")
    };
    assert!(c.cancel, "{c:?}");
    assert_eq!(apply(&mut s, cancel[0].clone(), 910_000), Outcome::Ok);
    let j = &s.jobs[&job];
    // Stopping: it ends CANCELLED when its node runs have exited.
    assert_eq!(j.state, JobState::Completing);
    assert_eq!(
        j.failure.as_ref().map(|f| f.kind.clone()),
        Some(FailureKind::IdleGpus)
    );
    assert!(
        idle(&s, &policy, 920_000).is_empty(),
        "an ended job is left alone"
    );
}

#[test]
fn busy_exempt_and_warn_only_jobs_are_not_cancelled_and_a_busy_gpu_withdraws_the_warning() {
    use gsched_state::idle::decide as idle;
    let mut s = cluster(&["n1", "n2"], SchedConfig::default());
    let policy = idle_policy(serde_json::json!({
        "after_s": 60, "action": "warn", "exempt_users": ["bob"]
    }));
    let busy = run(&mut s, gpu_job(1, None), 10);
    let busy_node = s.jobs[&busy].node_names()[0].clone();
    let mut spec = gpu_job(1, None);
    spec.user = "bob".into();
    let exempt = run(&mut s, spec, 10);
    let exempt_node = s.jobs[&exempt].node_names()[0].clone();
    report(&mut s, busy, usage_of(&busy_node, 2, 80, 3600), 3_600_000);
    report(
        &mut s,
        exempt,
        usage_of(&exempt_node, 2, 0, 3600),
        3_600_000,
    );
    assert!(idle(&s, &policy, 3_600_000).is_empty());

    // One node idle, one GPU of it busy: not idle. All idle: a warning, never a cancel.
    let mut half = usage_of(&busy_node, 2, 0, 3600);
    half.gpus[1] = usage_of(&busy_node, 2, 50, 3600).gpus[1].clone();
    report(&mut s, busy, half, 3_610_000);
    assert!(idle(&s, &policy, 3_610_000).is_empty());
    report(&mut s, busy, usage_of(&busy_node, 2, 0, 3600), 3_620_000);
    let warn = idle(&s, &policy, 3_620_000);
    assert_eq!(warn.len(), 1, "{warn:?}");
    apply(&mut s, warn[0].clone(), 3_620_000);
    assert!(
        idle(&s, &policy, 99_000_000).is_empty(),
        "warn never cancels"
    );
    // A summary with a GPU back above the threshold withdraws it.
    report(&mut s, busy, usage_of(&busy_node, 2, 90, 3600), 3_700_000);
    assert!(s.jobs[&busy].idle.is_none());
    assert_eq!(s.jobs[&busy].state, JobState::Running);
}

#[test]
fn a_requeued_jobs_usage_stays_with_the_attempt_it_measured() {
    let mut s = cluster(&["n1", "n2"], SchedConfig::default());
    let job = run(&mut s, gpu_job(1, None), 10);
    let node = s.jobs[&job].node_names()[0].clone();
    let first = usage_of(&node, 2, 0, 600);
    report(&mut s, job, first.clone(), 600_000);
    let requeue = Command::ActOnJobs(ActOnJobs {
        action: gsched_types::api::JobAction::Requeue,
        select: gsched_types::api::JobSelection {
            jobs: vec![gsched_types::api::JobSelector {
                id: job.0,
                task: None,
            }],
            ..Default::default()
        },
        by: "alice".into(),
        admin: false,
    });
    assert!(matches!(apply(&mut s, requeue, 610_000), Outcome::Acted(a) if a.count == 1));
    let exited = Command::RunExited(RunExited {
        job,
        attempt: 0,
        node: node.clone(),
        code: None,
        signal: Some(15),
        failure: None,
        usage: None,
    });
    apply(&mut s, exited, 611_000);
    assert_eq!(
        s.jobs[&job].state,
        JobState::Pending,
        "{:?}",
        s.jobs[&job].state
    );
    let p = plan(&snapshot(&s, &mut ViewCache::default()), 612_000);
    for cmd in decide::commands_for(p, &s) {
        apply(&mut s, cmd, 612_000);
    }
    let j = &s.jobs[&job];
    assert_eq!(j.state, JobState::Running);
    assert!(j.usage.is_empty(), "the new attempt starts with no usage");
    assert_eq!(j.attempts.len(), 1);
    assert_eq!(j.attempts[0].usage, vec![first]);
}

#[test]
fn jobs_purged_past_the_memory_window_wait_for_the_archive_in_end_order() {
    let mut config = SchedConfig::default();
    config.limits.finished_jobs_kept = 2;
    let mut s = cluster(&["n1", "n2"], config);
    let mut ids = Vec::new();
    for i in 0..5u64 {
        let job = run(&mut s, gpu_job(1, None), 10 + i);
        let node = s.jobs[&job].node_names()[0].clone();
        let exited = Command::RunExited(RunExited {
            job,
            attempt: 0,
            node,
            code: Some(0),
            signal: None,
            failure: None,
            usage: None,
        });
        apply(&mut s, exited, 100 + i);
        assert_eq!(s.jobs[&job].state, JobState::Completed);
        ids.push(job);
    }
    let (purged, dropped) = s.take_evicted();
    let purged: Vec<JobId> = purged.iter().map(|j| j.id).collect();
    assert_eq!(purged, ids[..3].to_vec());
    assert_eq!(dropped, 0);
    assert_eq!(s.jobs.len(), 2, "memory keeps the newest two");
    assert!(s.take_evicted().0.is_empty(), "taken once");
}

/// Submits `spec` (it may stay pending) and runs one scheduling pass as the leader does.
fn submit_and_pass(s: &mut ClusterState, spec: JobSpec, at: u64) -> JobId {
    let Outcome::Submitted { jobs } = apply(s, Command::SubmitJob(SubmitJob { spec }), at) else {
        panic!("submit refused")
    };
    let p = plan(&snapshot(s, &mut ViewCache::default()), at);
    for cmd in decide::commands_for(p, s) {
        apply(s, cmd, at);
    }
    jobs[0]
}

#[test]
fn kill_on_invalid_dep_ends_a_job_whose_dependency_failed() {
    for (cluster_keeps, job_says, ends) in [
        (false, None, true),
        (false, Some(false), false),
        (true, None, false),
        (true, Some(true), true),
    ] {
        let config = SchedConfig {
            keep_invalid_depend: cluster_keeps,
            ..SchedConfig::default()
        };
        let mut s = cluster(&["n1"], config);
        let first = run(&mut s, gpu_job(1, Some(60)), 10);
        let node = s.jobs[&first].runs[0].node.clone();
        let failed = Command::RunExited(RunExited {
            job: first,
            attempt: 0,
            node,
            code: Some(1),
            signal: None,
            failure: None,
            usage: None,
        });
        apply(&mut s, failed, 20);
        assert_eq!(s.jobs[&first].state, JobState::Failed);
        let mut after = gpu_job(1, Some(60));
        after.dependency = vec![gsched_types::job::Dependency {
            kind: gsched_types::job::DependencyKind::AfterOk,
            job: Some(first),
        }];
        after.kill_on_invalid_dep = job_says;
        let second = submit_and_pass(&mut s, after, 30);
        let j = &s.jobs[&second];
        if ends {
            assert_eq!(j.state, JobState::Cancelled, "{cluster_keeps} {job_says:?}");
        } else {
            assert_eq!(
                (j.state, j.reason.to_string()),
                (JobState::Pending, "DependencyNeverSatisfied".to_string()),
                "{cluster_keeps} {job_says:?}"
            );
        }
    }
}

#[test]
fn a_job_that_cannot_end_by_its_deadline_ends_as_deadline() {
    let mut s = cluster(&["n1"], SchedConfig::default());
    // The node's GPUs are busy: both jobs below stay pending.
    let mut busy = gpu_job(1, Some(3600));
    busy.gpus_per_node = 4;
    run(&mut s, busy, 10);
    let deadline_ms = 10 + 20 * 60 * 1000;
    let mut hour = gpu_job(1, Some(3600));
    hour.deadline_ms = Some(deadline_ms);
    let hour = submit_and_pass(&mut s, hour, 20);
    let mut flexible = gpu_job(1, Some(3600));
    flexible.deadline_ms = Some(deadline_ms);
    flexible.time_min_s = Some(5 * 60);
    let flexible = submit_and_pass(&mut s, flexible, 20);
    // An hour's run from now cannot end in 20 minutes; five minutes' can, for 15 more.
    let ended = decide::past_deadline(&s, 30).expect("one is past its deadline");
    assert_eq!(ended.jobs, [hour]);
    apply(&mut s, Command::EndPastDeadline(ended), 30);
    assert_eq!(s.jobs[&hour].state, JobState::Deadline);
    assert_eq!(
        s.jobs[&hour].failure.as_ref().map(|f| f.kind.reason_name()),
        Some("DeadLine".into())
    );
    assert_eq!(s.jobs[&flexible].state, JobState::Pending);
    let later = deadline_ms - 4 * 60 * 1000;
    let ended = decide::past_deadline(&s, later).expect("now it cannot either");
    assert_eq!(ended.jobs, [flexible]);
    // A stale command (the job started meanwhile, or the time is earlier) changes nothing.
    apply(
        &mut s,
        Command::EndPastDeadline(EndPastDeadline {
            jobs: vec![flexible],
        }),
        40,
    );
    assert_eq!(s.jobs[&flexible].state, JobState::Pending);
}

#[test]
fn no_kill_keeps_a_job_running_when_one_of_its_nodes_is_lost() {
    for no_kill in [false, true] {
        let mut s = cluster(&["n1", "n2"], SchedConfig::default());
        let mut spec = gpu_job(2, Some(3600));
        spec.launch = gsched_types::job::LaunchMode::Batch;
        spec.no_kill = no_kill;
        let id = run(&mut s, spec, 10);
        let nodes: Vec<String> = s.jobs[&id].runs.iter().map(|r| r.node.clone()).collect();
        let lost = Command::NodeLost(NodeLost {
            node: nodes[1].clone(),
            reason: "not responding".into(),
        });
        apply(&mut s, lost, 20);
        if !no_kill {
            assert_ne!(
                s.jobs[&id].state,
                JobState::Running,
                "without --no-kill it ends"
            );
            continue;
        }
        assert_eq!(
            s.jobs[&id].state,
            JobState::Running,
            "--no-kill: it goes on"
        );
        assert_eq!(s.jobs[&id].runs[1].state, gsched_types::job::RunState::Lost);
        let batch_done = Command::RunExited(RunExited {
            job: id,
            attempt: 0,
            node: nodes[0].clone(),
            code: Some(0),
            signal: None,
            failure: None,
            usage: None,
        });
        apply(&mut s, batch_done, 30);
        assert_eq!(
            s.jobs[&id].state,
            JobState::Completed,
            "its batch script's end ends it"
        );
    }
}
