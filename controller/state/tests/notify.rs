//! Notifications through the state machine and the leader's outbox decisions: a job's
//! changes record notices as due, the outbox claims them in the log before sending (a
//! notice is claimed once: at most once), records each target's outcome, creates the
//! time-limit notices by claiming them once a share is crossed, and puts a claim whose
//! leader went away down as in doubt without sending it again. An array without
//! `ARRAY_TASKS` tells its first start and its last end; a user's own settings give the
//! events and targets a job does not name.

mod common;

use gsched_scheduler::{SchedConfig, plan};
use gsched_state::decide::{self, NotifyRound};
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::assoc::{AccountConfig, AssocEdit, AssocEntity, AssocFields, UserConfig};
use gsched_types::job::{JobId, JobSpec, JobState};
use gsched_types::notify::{
    Delivery, MailRequest, MailType, NoticeState, NotifyTarget, parse_mail_types,
};

fn apply(s: &mut ClusterState, cmd: Command, at: u64) -> Outcome {
    let out = s.apply(&Envelope::new(cmd, at, None));
    gsched_state::invariants::check(s).expect("invariants hold");
    out
}

fn cluster() -> ClusterState {
    let mut s = ClusterState::default();
    let config = SchedConfig {
        accounts: vec![AccountConfig {
            name: "lab".into(),
            shares: 1,
            max_gpus: None,
            parent: None,
            coordinators: vec![],
            max_jobs: None,
            max_submit_jobs: None,
            max_wall_s: None,
        }],
        users: ["alice", "bob"]
            .into_iter()
            .map(|u| UserConfig {
                name: u.into(),
                default_account: "lab".into(),
                accounts: vec!["lab".into()],
                max_jobs: None,
                max_submit_jobs: None,
                notify: None,
            })
            .collect(),
        ..SchedConfig::default()
    };
    apply(
        &mut s,
        Command::SetConfig(SetConfig {
            config: Box::new(config),
        }),
        1,
    );
    let reg = RegisterNode {
        name: "n1".into(),
        address: "127.0.0.1:1".into(),
        training_addr: "127.0.0.1".into(),
        topology: common::nvlinked(4, "0-15"),
        features: vec![],
        agent_version: "test".into(),
        known_runs: vec![],
    };
    assert_eq!(apply(&mut s, Command::RegisterNode(reg), 1), Outcome::Ok);
    s
}

fn spec(types: Option<&str>, user: &str) -> JobSpec {
    let mut spec = JobSpec::simple("train", user, "#!/bin/sh\ntrue\n");
    spec.mail = types.map(|t| MailRequest {
        types: parse_mail_types(t).unwrap(),
        user: None,
    });
    spec.time_limit_s = Some(100);
    spec
}

fn submit(s: &mut ClusterState, spec: JobSpec, at: u64) -> Vec<JobId> {
    let Outcome::Submitted { jobs } = apply(s, Command::SubmitJob(SubmitJob { spec }), at) else {
        panic!("submit refused")
    };
    jobs
}

/// One scheduling pass, as the leader runs it.
fn pass(s: &mut ClusterState, at: u64) {
    let p = plan(&snapshot(s, &mut ViewCache::default()), at);
    for cmd in decide::commands_for(p, s) {
        apply(s, cmd, at);
    }
}

fn exited(s: &mut ClusterState, job: JobId, code: i32, at: u64) {
    let attempt = s.jobs[&job].attempt;
    apply(
        s,
        Command::RunStarted(RunStarted {
            job,
            attempt,
            node: "n1".into(),
            pid: Some(1),
        }),
        at,
    );
    apply(
        s,
        Command::RunExited(RunExited {
            job,
            attempt,
            node: "n1".into(),
            code: Some(code),
            signal: None,
            failure: None,
            usage: None,
        }),
        at,
    );
}

fn notices(s: &ClusterState, job: JobId) -> Vec<(MailType, u32, bool, &'static str)> {
    s.jobs[&job]
        .notices
        .iter()
        .map(|n| {
            let st = match n.state {
                NoticeState::Due => "due",
                NoticeState::Sending { .. } => "sending",
                NoticeState::Done { .. } => "done",
            };
            (n.event, n.attempt, n.array, st)
        })
        .collect()
}

/// Claims what the outbox of controller `me` in `term` would claim at `at`.
fn claim(s: &mut ClusterState, me: u64, term: u64, at: u64) -> NotifyRound {
    let round = decide::notify_round(s, me, term, at, 600_000);
    if !round.claim.is_empty() {
        let notices = round.claim.clone();
        apply(
            s,
            Command::NotifyClaim(NotifyClaim {
                by: me,
                term,
                notices,
            }),
            at,
        );
    }
    round
}

fn sent(s: &mut ClusterState, r: &NoticeRef, error: Option<&str>, at: u64) {
    let out = decide::outgoing(s, r).expect("the notice exists");
    let deliveries = out
        .targets
        .into_iter()
        .map(|to| Delivery {
            to,
            error: error.map(str::to_string),
        })
        .collect();
    apply(
        s,
        Command::NotifyDone(NotifyDone {
            results: vec![NoticeResult {
                notice: r.clone(),
                deliveries,
            }],
        }),
        at,
    );
}

#[test]
fn a_job_is_told_begin_and_end_once_each_and_the_outcomes_are_kept() {
    let mut s = cluster();
    let job = submit(&mut s, spec(Some("BEGIN,END"), "alice"), 1_000)[0];
    assert!(s.jobs[&job].notices.is_empty());
    pass(&mut s, 2_000);
    assert_eq!(notices(&s, job), [(MailType::Begin, 0, false, "due")]);
    assert_eq!(s.notifying_count(), 1);

    // The outbox claims it; a second round claims nothing, and the claim is its own.
    let round = claim(&mut s, 1, 3, 2_100);
    assert_eq!(round.claim.len(), 1);
    assert_eq!(notices(&s, job), [(MailType::Begin, 0, false, "sending")]);
    let again = decide::notify_round(&s, 1, 3, 2_200, 600_000);
    assert!(again.claim.is_empty());
    assert_eq!(again.claimed, round.claim);
    // Another controller (or this one in a later term) does not deliver it.
    let other = decide::notify_round(&s, 2, 4, 2_200, 600_000);
    assert!(other.claim.is_empty() && other.claimed.is_empty() && other.in_doubt.is_empty());
    // A claim of something already claimed changes nothing.
    apply(
        &mut s,
        Command::NotifyClaim(NotifyClaim {
            by: 2,
            term: 4,
            notices: round.claim.clone(),
        }),
        2_300,
    );
    assert!(matches!(
        s.jobs[&job].notices[0].state,
        NoticeState::Sending { by: 1, term: 3, .. }
    ));

    let out = decide::outgoing(&s, &round.claim[0]).unwrap();
    assert_eq!(out.targets, [NotifyTarget::Mail("alice".into())]);
    assert_eq!(
        out.message.subject,
        "Slurm Job_id=1 Name=train Began, Queued time 00:00:01"
    );
    sent(&mut s, &round.claim[0], None, 2_400);
    assert_eq!(notices(&s, job), [(MailType::Begin, 0, false, "done")]);
    assert_eq!(s.notifying_count(), 0);

    exited(&mut s, job, 0, 12_000);
    assert_eq!(s.jobs[&job].state, JobState::Completed);
    let round = claim(&mut s, 1, 3, 12_100);
    let out = decide::outgoing(&s, &round.claim[0]).unwrap();
    assert_eq!(
        out.message.subject,
        "Slurm Job_id=1 Name=train Ended, Run time 00:00:10, COMPLETED, ExitCode 0"
    );
    sent(
        &mut s,
        &round.claim[0],
        Some("the mail program exited 1"),
        12_200,
    );
    assert!(s.jobs[&job].notices[1].failed());
    let lines: Vec<String> = s.jobs[&job]
        .notices
        .iter()
        .flat_map(|n| n.describe())
        .collect();
    assert_eq!(
        lines,
        [
            "BEGIN mail:alice sent",
            "END mail:alice failed: the mail program exited 1"
        ]
    );
    // A result for a notice no longer being sent changes nothing.
    sent(&mut s, &round.claim[0], None, 12_300);
    assert!(s.jobs[&job].notices[1].failed());
}

#[test]
fn a_failed_job_is_told_fail_and_a_requeue_its_attempt() {
    let mut s = cluster();
    let job = submit(&mut s, spec(Some("FAIL"), "alice"), 1_000)[0];
    pass(&mut s, 2_000);
    assert!(s.jobs[&job].notices.is_empty());
    exited(&mut s, job, 3, 5_000);
    assert_eq!(notices(&s, job), [(MailType::Fail, 0, false, "due")]);
    let round = claim(&mut s, 1, 1, 5_100);
    assert_eq!(
        decide::outgoing(&s, &round.claim[0])
            .unwrap()
            .message
            .subject,
        "Slurm Job_id=1 Name=train Failed, Run time 00:00:03, FAILED, ExitCode 3"
    );

    let mut requeued = spec(Some("REQUEUE,END"), "bob");
    requeued.requeue = true;
    let job = submit(&mut s, requeued, 6_000)[0];
    pass(&mut s, 7_000);
    apply(
        &mut s,
        Command::NodeLost(NodeLost {
            node: "n1".into(),
            reason: "gone".into(),
        }),
        9_000,
    );
    assert_eq!(s.jobs[&job].state, JobState::Pending);
    assert_eq!(notices(&s, job), [(MailType::Requeue, 0, false, "due")]);
    let round = claim(&mut s, 1, 1, 9_100);
    let r = round.claim.iter().find(|r| r.job == job).unwrap();
    assert_eq!(
        decide::outgoing(&s, r).unwrap().message.subject,
        "Slurm Job_id=2 Name=train Requeued, Run time 00:00:02"
    );
}

#[test]
fn time_limit_notices_are_created_by_their_claim_once_the_share_is_crossed() {
    let mut s = cluster();
    let job = submit(
        &mut s,
        spec(Some("TIME_LIMIT_50,TIME_LIMIT_80"), "alice"),
        1_000,
    )[0];
    pass(&mut s, 2_000);
    // 100 s limit from 2 s: 50% at 52 s.
    let round = decide::notify_round(&s, 1, 1, 51_000, 600_000);
    assert!(round.claim.is_empty());
    // A claim the state machine does not find crossed at its own time creates nothing.
    apply(
        &mut s,
        Command::NotifyClaim(NotifyClaim {
            by: 1,
            term: 1,
            notices: vec![NoticeRef {
                job,
                attempt: 0,
                event: MailType::TimeLimit50,
                array: false,
            }],
        }),
        51_000,
    );
    assert!(s.jobs[&job].notices.is_empty());
    let round = claim(&mut s, 1, 1, 52_000);
    assert_eq!(round.claim.len(), 1);
    assert_eq!(
        notices(&s, job),
        [(MailType::TimeLimit50, 0, false, "sending")]
    );
    assert_eq!(
        decide::outgoing(&s, &round.claim[0])
            .unwrap()
            .message
            .subject,
        "Slurm Job_id=1 Name=train Reached 50% of time limit, Run time 00:00:50"
    );
    assert!(
        decide::notify_round(&s, 1, 1, 70_000, 600_000)
            .claim
            .is_empty()
    );
    let round = claim(&mut s, 1, 1, 90_000);
    assert_eq!(round.claim[0].event, MailType::TimeLimit80);
}

#[test]
fn a_claim_whose_leader_went_away_is_in_doubt_and_never_sent_again() {
    let mut s = cluster();
    let job = submit(&mut s, spec(Some("END"), "alice"), 1_000)[0];
    pass(&mut s, 2_000);
    exited(&mut s, job, 0, 3_000);
    claim(&mut s, 1, 5, 3_100);
    // The new leader (2) neither claims nor delivers it; after the delivery window it
    // records it as not known to have been delivered.
    let soon = decide::notify_round(&s, 2, 6, 10_000, 60_000);
    assert_eq!(soon, NotifyRound::default());
    let late = decide::notify_round(&s, 2, 6, 63_100, 60_000);
    assert!(late.claim.is_empty() && late.claimed.is_empty());
    assert_eq!(late.in_doubt.len(), 1);
    apply(
        &mut s,
        Command::NotifyDone(NotifyDone {
            results: late.in_doubt,
        }),
        63_200,
    );
    let lines = s.jobs[&job].notices[0].describe();
    assert!(
        lines[0]
            .starts_with("END mail:alice failed: not known to have been delivered: controller 1"),
        "{lines:?}"
    );
    // The same controller back as leader in a later term does not send it either.
    assert_eq!(
        decide::notify_round(&s, 1, 7, 70_000, 60_000),
        NotifyRound::default()
    );
}

#[test]
fn an_array_tells_its_first_start_and_its_last_end_unless_each_task_is_asked() {
    let mut s = cluster();
    let mut array = spec(Some("BEGIN,END,FAIL"), "alice");
    array.array = Some(vec![0, 1, 2]);
    let tasks = submit(&mut s, array, 1_000);
    pass(&mut s, 2_000);
    let started: Vec<_> = tasks
        .iter()
        .filter(|t| s.jobs[*t].state == JobState::Running)
        .collect();
    assert_eq!(started.len(), 3);
    let begins: usize = tasks.iter().map(|t| s.jobs[t].notices.len()).sum();
    assert_eq!(begins, 1, "one BEGIN for the array");
    let first = tasks
        .iter()
        .find(|t| !s.jobs[*t].notices.is_empty())
        .unwrap();
    assert_eq!(notices(&s, *first), [(MailType::Begin, 0, true, "due")]);
    let round = claim(&mut s, 1, 1, 2_100);
    assert_eq!(
        decide::outgoing(&s, &round.claim[0])
            .unwrap()
            .message
            .subject,
        "Slurm Array Summary Job_id=1_* (1) Name=train Began"
    );
    exited(&mut s, tasks[0], 0, 3_000);
    exited(&mut s, tasks[2], 0, 4_000);
    let told: usize = tasks.iter().map(|t| s.jobs[t].notices.len()).sum();
    assert_eq!(told, 1, "nothing until the last task ends");
    exited(&mut s, tasks[1], 2, 5_000);
    assert_eq!(notices(&s, tasks[1]), [(MailType::Fail, 0, true, "due")]);
    let round = claim(&mut s, 1, 1, 5_100);
    let out = decide::outgoing(&s, &round.claim[0]).unwrap();
    assert_eq!(
        out.message.subject,
        "Slurm Array Summary Job_id=1_* (1) Name=train Failed, Mixed, ExitCode [0-2]"
    );
    assert!(
        out.message
            .body
            .contains("Array tasks: 3 (2 COMPLETED, 1 FAILED)"),
        "{}",
        out.message.body
    );

    // ARRAY_TASKS: each task its own.
    let mut each = spec(Some("BEGIN,ARRAY_TASKS"), "bob");
    each.array = Some(vec![0, 1]);
    let tasks = submit(&mut s, each, 6_000);
    pass(&mut s, 7_000);
    for t in &tasks {
        assert_eq!(notices(&s, *t), [(MailType::Begin, 0, false, "due")]);
    }
    let round = claim(&mut s, 1, 1, 7_100);
    let r = round.claim.iter().find(|r| r.job == tasks[1]).unwrap();
    assert_eq!(
        decide::outgoing(&s, r).unwrap().message.subject,
        "Slurm Array Task Job_id=4_1 (5) Name=train Began, Queued time 00:00:01"
    );
}

#[test]
fn a_users_own_settings_give_the_events_and_targets_and_only_they_may_set_them() {
    let mut s = cluster();
    let edit = |by: &str, name: &str| {
        Command::EditAssociations(EditAssociations {
            edit: AssocEdit::Modify {
                entity: AssocEntity::User,
                name: name.into(),
                fields: AssocFields {
                    notify: Some(vec![
                        NotifyTarget::Mail("alice@lab.org".into()),
                        NotifyTarget::Webhook("https://lab.org/hook".into()),
                    ]),
                    notify_on: Some(vec![MailType::End]),
                    ..AssocFields::default()
                },
            },
            by: by.into(),
            admin: false,
        })
    };
    assert!(matches!(
        apply(&mut s, edit("bob", "alice"), 1_000),
        Outcome::PermissionDenied { .. }
    ));
    assert_eq!(apply(&mut s, edit("alice", "alice"), 1_000), Outcome::Ok);
    // Other fields stay the admins'.
    let limits = Command::EditAssociations(EditAssociations {
        edit: AssocEdit::Modify {
            entity: AssocEntity::User,
            name: "alice".into(),
            fields: AssocFields {
                notify: Some(vec![]),
                max_jobs: Some(gsched_types::assoc::Limit::Set(100)),
                ..AssocFields::default()
            },
        },
        by: "alice".into(),
        admin: false,
    });
    assert!(matches!(
        apply(&mut s, limits, 1_000),
        Outcome::PermissionDenied { .. }
    ));

    let job = submit(&mut s, spec(None, "alice"), 1_000)[0];
    pass(&mut s, 2_000);
    exited(&mut s, job, 0, 3_000);
    assert_eq!(notices(&s, job), [(MailType::End, 0, false, "due")]);
    let round = claim(&mut s, 1, 1, 3_100);
    assert_eq!(
        decide::outgoing(&s, &round.claim[0]).unwrap().targets,
        [
            NotifyTarget::Mail("alice@lab.org".into()),
            NotifyTarget::Webhook("https://lab.org/hook".into())
        ]
    );
    // Bob has no settings: his job without --mail-type tells nothing.
    let quiet = submit(&mut s, spec(None, "bob"), 4_000)[0];
    pass(&mut s, 5_000);
    exited(&mut s, quiet, 0, 6_000);
    assert!(s.jobs[&quiet].notices.is_empty());
}

#[test]
fn a_snapshot_keeps_the_notices_and_rebuilds_the_outbox_index() {
    let mut s = cluster();
    let job = submit(&mut s, spec(Some("END"), "alice"), 1_000)[0];
    pass(&mut s, 2_000);
    exited(&mut s, job, 0, 3_000);
    let back = ClusterState::from_snapshot(&s.to_snapshot()).unwrap();
    assert_eq!(back.notifying_count(), 1);
    assert_eq!(back.digest(), s.digest());
    gsched_state::invariants::check(&back).unwrap();
}
