//! Accounts, users and QOS edited through `apply`: who may edit what, that a committed
//! configuration file no longer overrides the edits, and the limits a submission and a
//! scheduling pass then enforce, with Slurm's reasons.

mod common;

use gsched_scheduler::{SchedConfig, plan};
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::assoc::{AssocEdit, AssocEntity, AssocFields, Limit};
use gsched_types::job::{JobId, JobSpec, PendingReason};
use gsched_types::topology::Topology;

const T0: u64 = 1_000 * 3_600_000;

fn topo(gpus: u32) -> Topology {
    common::nvlinked(gpus, "0-31")
}

fn env(cmd: Command) -> Envelope {
    Envelope::new(cmd, T0, None)
}

fn cluster() -> ClusterState {
    let mut s = ClusterState::default();
    let out = s.apply(&env(Command::RegisterNode(RegisterNode {
        name: "n1".into(),
        address: "127.0.0.1:1".into(),
        training_addr: "127.0.0.1".into(),
        topology: topo(8),
        features: vec![],
        agent_version: "test".into(),
        known_runs: vec![],
    })));
    assert_eq!(out, Outcome::Ok);
    s
}

fn edit_as(s: &mut ClusterState, by: &str, admin: bool, edit: AssocEdit) -> Outcome {
    s.apply(&env(Command::EditAssociations(EditAssociations {
        edit,
        by: by.into(),
        admin,
    })))
}

fn add(s: &mut ClusterState, entity: AssocEntity, name: &str, fields: AssocFields) -> Outcome {
    let edit = AssocEdit::Add {
        entity,
        name: name.into(),
        fields,
    };
    edit_as(s, "root", true, edit)
}

fn modify(s: &mut ClusterState, entity: AssocEntity, name: &str, fields: AssocFields) -> Outcome {
    let edit = AssocEdit::Modify {
        entity,
        name: name.into(),
        fields,
    };
    edit_as(s, "root", true, edit)
}

fn user_in(accounts: &[&str]) -> AssocFields {
    AssocFields {
        accounts: Some(accounts.iter().map(|a| a.to_string()).collect()),
        ..AssocFields::default()
    }
}

/// lab → {nlp, vision}; alice in nlp, bob in vision and nlp.
fn lab() -> ClusterState {
    let mut s = cluster();
    assert_eq!(
        add(&mut s, AssocEntity::Account, "lab", AssocFields::default()),
        Outcome::Ok
    );
    for group in ["nlp", "vision"] {
        let fields = AssocFields {
            parent: Some("lab".into()),
            ..AssocFields::default()
        };
        assert_eq!(
            add(&mut s, AssocEntity::Account, group, fields),
            Outcome::Ok
        );
    }
    assert_eq!(
        add(&mut s, AssocEntity::User, "alice", user_in(&["nlp"])),
        Outcome::Ok
    );
    assert_eq!(
        add(
            &mut s,
            AssocEntity::User,
            "bob",
            user_in(&["vision", "nlp"])
        ),
        Outcome::Ok
    );
    s
}

fn submit(s: &mut ClusterState, user: &str, account: Option<&str>, gpus: u32) -> Outcome {
    let mut spec = JobSpec::simple("j", user, "#!/bin/sh\ntrue\n");
    spec.gpus_per_node = gpus;
    spec.time_limit_s = Some(3600);
    spec.account = account.map(str::to_string);
    s.apply(&env(Command::SubmitJob(SubmitJob { spec })))
}

fn submitted(o: Outcome) -> JobId {
    match o {
        Outcome::Submitted { jobs } => jobs[0],
        other => panic!("expected a submission, got {other:?}"),
    }
}

fn rejected(o: Outcome) -> String {
    match o {
        Outcome::Rejected { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// One pass: starts what it can and returns the reasons of the rest.
fn schedule(s: &mut ClusterState) -> Vec<(JobId, PendingReason)> {
    let p = plan(&snapshot(s, &mut ViewCache::default()), T0);
    let reasons = p.reasons.clone();
    for cmd in decide::commands_for(p, s) {
        s.apply(&env(cmd));
    }
    reasons
}

fn reason_of(reasons: &[(JobId, PendingReason)], id: JobId) -> String {
    reasons
        .iter()
        .find(|(j, _)| *j == id)
        .map(|(_, r)| r.to_string())
        .unwrap_or_else(|| "started".into())
}

#[test]
fn only_admins_edit_and_coordinators_manage_their_own_accounts_users() {
    let mut s = lab();
    let denied = edit_as(
        &mut s,
        "alice",
        false,
        AssocEdit::Add {
            entity: AssocEntity::Account,
            name: "mine".into(),
            fields: AssocFields::default(),
        },
    );
    assert!(
        matches!(denied, Outcome::PermissionDenied { .. }),
        "{denied:?}"
    );
    let coordinate = AssocFields {
        coordinators: Some(vec!["carol".into()]),
        ..AssocFields::default()
    };
    assert_eq!(
        modify(&mut s, AssocEntity::Account, "lab", coordinate),
        Outcome::Ok
    );
    // carol coordinates lab, so nlp below it: she may add and remove its users...
    let join = AssocEdit::Add {
        entity: AssocEntity::User,
        name: "dave".into(),
        fields: user_in(&["nlp"]),
    };
    assert_eq!(edit_as(&mut s, "carol", false, join.clone()), Outcome::Ok);
    let leave = AssocEdit::Delete {
        entity: AssocEntity::User,
        name: "dave".into(),
        account: Some("nlp".into()),
    };
    assert_eq!(edit_as(&mut s, "carol", false, leave), Outcome::Ok);
    // ...but not change limits, nor anything for someone who coordinates nothing.
    let limits = AssocEdit::Modify {
        entity: AssocEntity::User,
        name: "alice".into(),
        fields: AssocFields {
            max_jobs: Some(Limit::Set(1)),
            ..AssocFields::default()
        },
    };
    let o = edit_as(&mut s, "carol", false, limits);
    assert!(matches!(o, Outcome::PermissionDenied { .. }), "{o:?}");
    let o = edit_as(&mut s, "bob", false, join);
    assert!(matches!(o, Outcome::PermissionDenied { .. }), "{o:?}");
    assert!(!s.config.users.iter().any(|u| u.name == "dave"));
}

#[test]
fn bad_edits_change_nothing_and_say_why() {
    let mut s = lab();
    let before = s.config.clone();
    let orphan = AssocFields {
        parent: Some("nosuch".into()),
        ..AssocFields::default()
    };
    let o = add(&mut s, AssocEntity::Account, "x", orphan);
    assert!(
        matches!(&o, Outcome::NotFound { message } if message.contains("nosuch")),
        "{o:?}"
    );
    let cycle = AssocFields {
        parent: Some("nlp".into()),
        ..AssocFields::default()
    };
    assert!(rejected(modify(&mut s, AssocEntity::Account, "lab", cycle)).contains("descendant"));
    let foreign = AssocFields {
        fairshare: Some(5),
        ..AssocFields::default()
    };
    assert!(rejected(modify(&mut s, AssocEntity::Qos, "x", foreign.clone())).contains("Fairshare"));
    assert!(
        rejected(add(
            &mut s,
            AssocEntity::Account,
            "nlp",
            AssocFields::default()
        ))
        .contains("exists")
    );
    let del = AssocEdit::Delete {
        entity: AssocEntity::Account,
        name: "lab".into(),
        account: None,
    };
    assert!(rejected(edit_as(&mut s, "root", true, del)).contains("sub-account"));
    let del = AssocEdit::Delete {
        entity: AssocEntity::Account,
        name: "nlp".into(),
        account: None,
    };
    assert!(rejected(edit_as(&mut s, "root", true, del)).contains("still has user"));
    assert_eq!(s.config, before);
}

#[test]
fn a_committed_configuration_file_no_longer_overrides_run_time_edits() {
    let mut s = lab();
    let file = SchedConfig {
        backfill: false,
        ..SchedConfig::default()
    };
    assert!(s.config_differs_from(&file));
    s.apply(&env(Command::SetConfig(SetConfig {
        config: Box::new(file.clone()),
    })));
    assert!(!s.config.backfill, "the file's other settings are taken");
    assert_eq!(s.config.accounts.len(), 3, "the edited accounts are kept");
    assert_eq!(s.config.users.len(), 2);
    assert!(!s.config_differs_from(&file));
}

#[test]
fn jobs_charge_only_their_users_accounts_and_the_default_when_none_is_named() {
    let mut s = lab();
    let id = submitted(submit(&mut s, "alice", None, 1));
    assert_eq!(s.jobs[&id].spec.account.as_deref(), Some("nlp"));
    let refused = rejected(submit(&mut s, "alice", Some("vision"), 1));
    assert!(
        refused.starts_with("Invalid account or account/partition combination specified"),
        "{refused}"
    );
    let refused = rejected(submit(&mut s, "eve", None, 1));
    assert!(refused.contains("gctl user add eve"), "{refused}");
    submitted(submit(&mut s, "root", Some("anything"), 0));
    submitted(submit(&mut s, "bob", Some("nlp"), 1));
}

#[test]
fn max_submit_jobs_of_an_account_counts_the_users_jobs_in_it() {
    let mut s = lab();
    let fields = AssocFields {
        max_submit_jobs: Some(Limit::Set(2)),
        ..AssocFields::default()
    };
    assert_eq!(
        modify(&mut s, AssocEntity::Account, "lab", fields),
        Outcome::Ok
    );
    submitted(submit(&mut s, "bob", Some("nlp"), 1));
    submitted(submit(&mut s, "bob", Some("nlp"), 1));
    let refused = rejected(submit(&mut s, "bob", Some("nlp"), 1));
    assert!(refused.contains("(MaxSubmitJobs)"), "{refused}");
    submitted(submit(&mut s, "bob", Some("vision"), 1));
}

#[test]
fn group_gpu_caps_add_up_through_the_tree() {
    let mut s = lab();
    let cap = AssocFields {
        grp_gpus: Some(Limit::Set(4)),
        ..AssocFields::default()
    };
    assert_eq!(
        modify(&mut s, AssocEntity::Account, "lab", cap),
        Outcome::Ok
    );
    let a = submitted(submit(&mut s, "alice", Some("nlp"), 3));
    let b = submitted(submit(&mut s, "bob", Some("vision"), 2));
    let reasons = schedule(&mut s);
    assert_eq!(reason_of(&reasons, a), "started");
    assert_eq!(
        reason_of(&reasons, b),
        "AssocGrpGRES",
        "3 + 2 is over lab's 4"
    );
    let lift = AssocFields {
        grp_gpus: Some(Limit::Clear),
        ..AssocFields::default()
    };
    assert_eq!(
        modify(&mut s, AssocEntity::Account, "lab", lift),
        Outcome::Ok
    );
    assert_eq!(reason_of(&schedule(&mut s), b), "started");
}

#[test]
fn max_jobs_and_max_wall_pend_with_slurms_reasons() {
    let mut s = lab();
    let one = AssocFields {
        max_jobs: Some(Limit::Set(1)),
        ..AssocFields::default()
    };
    assert_eq!(modify(&mut s, AssocEntity::User, "alice", one), Outcome::Ok);
    let short = AssocFields {
        max_wall_s: Some(Limit::Set(1800)),
        ..AssocFields::default()
    };
    assert_eq!(
        modify(&mut s, AssocEntity::Account, "vision", short.clone()),
        Outcome::Ok
    );
    let qos = AssocFields {
        max_wall_s: Some(Limit::Set(600)),
        max_gpus_per_user: Some(Limit::Set(1)),
        ..AssocFields::default()
    };
    assert_eq!(add(&mut s, AssocEntity::Qos, "debug", qos), Outcome::Ok);
    let a1 = submitted(submit(&mut s, "alice", None, 1));
    let a2 = submitted(submit(&mut s, "alice", None, 1));
    let long = submitted(submit(&mut s, "bob", Some("vision"), 1));
    let mut spec = JobSpec::simple("j", "bob", "#!/bin/sh\ntrue\n");
    spec.qos = Some("debug".into());
    spec.time_limit_s = Some(3600);
    spec.account = Some("nlp".into());
    let q = submitted(s.apply(&env(Command::SubmitJob(SubmitJob { spec }))));
    let reasons = schedule(&mut s);
    assert_eq!(reason_of(&reasons, a1), "started");
    assert_eq!(reason_of(&reasons, a2), "AssocMaxJobsLimit");
    assert_eq!(reason_of(&reasons, long), "AssocMaxWallDurationPerJobLimit");
    assert_eq!(reason_of(&reasons, q), "QOSMaxWallDurationPerJobLimit");
}

#[test]
fn a_qos_name_is_refused_only_where_the_cluster_defines_qos() {
    let mut s = cluster();
    let with_qos = |s: &mut ClusterState, q: &str| {
        let mut spec = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
        spec.qos = Some(q.into());
        s.apply(&env(Command::SubmitJob(SubmitJob { spec })))
    };
    // None defined: another site's --qos is taken and limits nothing, as Slurm without
    // QOS enforcement does.
    submitted(with_qos(&mut s, "boost_qos_dbg"));
    assert_eq!(
        add(&mut s, AssocEntity::Qos, "debug", AssocFields::default()),
        Outcome::Ok
    );
    submitted(with_qos(&mut s, "debug"));
    match with_qos(&mut s, "boost_qos_dbg") {
        Outcome::Rejected { message } => {
            assert!(message.contains("known QOS are debug"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
