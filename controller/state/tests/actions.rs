//! The one action path (`machine/actions.rs`): every cancel, hold, release, requeue,
//! signal and update under one set of rules. An array named by its id changes in all its
//! live tasks or in none; a job in the wrong state is reported per job (and per run of
//! an array's tasks), in the words Slurm's `scontrol` uses, as measured on Slurm 22.05
//! (see `tests/tests/bulk.rs`); the single-job commands of old logs apply as they did.

mod common;

use gsched_scheduler::plan;
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::*;
use gsched_types::api::{ActionSummary, JobAction, JobSelection, JobSelector};
use gsched_types::job::{JobId, JobSpec, JobState, PendingReason};

fn env(cmd: Command, at: u64) -> Envelope {
    Envelope::new(cmd, at, None)
}

/// One node of `gpus` GPUs.
fn cluster(gpus: u32) -> ClusterState {
    let mut s = ClusterState::default();
    let out = s.apply(&env(
        Command::RegisterNode(RegisterNode {
            name: "n1".into(),
            address: "127.0.0.1:1".into(),
            training_addr: "127.0.0.1".into(),
            topology: common::nvlinked(gpus, "0-15"),
            features: vec![],
            agent_version: "test".into(),
            known_runs: vec![],
        }),
        1,
    ));
    assert_eq!(out, Outcome::Ok);
    s
}

/// Submits alice's job (or array, with `tasks`) of one GPU each.
fn submit(s: &mut ClusterState, tasks: Option<Vec<u32>>, at: u64) -> Vec<JobId> {
    let mut spec = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
    spec.gpus_per_node = 1;
    spec.array = tasks;
    match s.apply(&env(Command::SubmitJob(SubmitJob { spec }), at)) {
        Outcome::Submitted { jobs } => jobs,
        other => panic!("{other:?}"),
    }
}

/// One scheduling pass, committed as the leader commits it.
fn schedule(s: &mut ClusterState, at: u64) {
    let p = plan(&snapshot(s, &mut ViewCache::default()), at);
    for cmd in decide::commands_for(p, s) {
        s.apply(&env(cmd, at));
    }
}

/// The job's run on n1 ended with `code`.
fn exit(s: &mut ClusterState, job: JobId, code: i32, at: u64) {
    let attempt = s.jobs[&job].attempt;
    s.apply(&env(
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
    ));
}

fn names(ids: &[&str]) -> JobSelection {
    JobSelection {
        jobs: ids.iter().map(|i| JobSelector::parse(i).unwrap()).collect(),
        ..Default::default()
    }
}

fn act(s: &mut ClusterState, action: JobAction, select: JobSelection, by: &str) -> Outcome {
    let admin = by == "root";
    s.apply(&env(
        Command::ActOnJobs(ActOnJobs {
            action,
            select,
            by: by.into(),
            admin,
        }),
        50,
    ))
}

fn acted(out: Outcome) -> ActionSummary {
    match out {
        Outcome::Acted(s) => s,
        other => panic!("not acted: {other:?}"),
    }
}

fn states(s: &ClusterState, jobs: &[JobId]) -> Vec<JobState> {
    jobs.iter().map(|j| s.jobs[j].state).collect()
}

#[test]
fn an_arrays_tasks_change_all_or_none() {
    use JobState::*;
    // Four tasks of one GPU on a node of two: tasks 0 and 1 run, 2 and 3 wait.
    let mut s = cluster(2);
    let tasks = submit(&mut s, Some(vec![0, 1, 2, 3]), 2);
    let array = tasks[0].to_string();
    schedule(&mut s, 3);
    assert_eq!(states(&s, &tasks), [Running, Running, Pending, Pending]);

    // Requeue of the array: its pending tasks refuse it, so the running ones are not
    // requeued either; the refusal names the tasks as one run (Slurm: "1004_2-3: Job is
    // pending execution").
    let before = s.jobs.clone();
    let out = acted(act(&mut s, JobAction::Requeue, names(&[&array]), "alice"));
    assert_eq!(out.count, 0);
    assert_eq!(
        out.errors[0],
        format!("job {array}_[2-3]: pending execution; only running jobs can be requeued")
    );
    assert!(
        out.errors[1].contains("an array's tasks change all or none"),
        "{out:?}"
    );
    assert_eq!(s.jobs, before, "nothing changed");
    // A signal is decided by the same rules (the leader sends it; nothing is written).
    let signal = JobAction::Signal {
        signal: 10,
        batch_only: false,
    };
    let d = s
        .decide_action(&ActOnJobs {
            action: signal,
            select: names(&[&array]),
            by: "alice".into(),
            admin: false,
        })
        .unwrap();
    assert!(d.change.is_empty(), "{d:?}");
    assert!(d.errors[0].contains("_[2-3]: pending execution"), "{d:?}");
    // Naming tasks one by one: each stands alone.
    let out = acted(act(
        &mut s,
        JobAction::Requeue,
        names(&[&format!("{array}_0"), &format!("{array}_2")]),
        "alice",
    ));
    assert_eq!(out.count, 1);
    assert_eq!(
        out.errors,
        [format!(
            "job {array}_2: pending execution; only running jobs can be requeued"
        )]
    );
    assert_eq!(s.jobs[&tasks[0]].state, Completing);
    exit(&mut s, tasks[0], 143, 4);
    assert_eq!(s.jobs[&tasks[0]].state, Pending, "requeued");

    // Hold of the array: every task, running or not (a running task keeps its hold for
    // its next attempt, as Slurm's does), and none refuses.
    schedule(&mut s, 5);
    let out = acted(act(&mut s, JobAction::Hold, names(&[&array]), "alice"));
    assert_eq!(
        out,
        ActionSummary {
            count: 4,
            errors: vec![]
        }
    );
    assert!(tasks.iter().all(|t| s.jobs[t].held));
    assert_eq!(s.schedulable_count(), 0);
    let out = acted(act(&mut s, JobAction::Release, names(&[&array]), "alice"));
    assert_eq!(
        out,
        ActionSummary {
            count: 4,
            errors: vec![]
        }
    );
    assert!(tasks.iter().all(|t| !s.jobs[t].held));

    // A task ends: the array's ended task is reported, the live ones still change
    // (Slurm: "1011_0: Job has already finished", and the others held).
    let running: Vec<JobId> = tasks
        .iter()
        .copied()
        .filter(|t| s.jobs[t].state == Running)
        .collect();
    exit(&mut s, running[0], 0, 6);
    let done = s.jobs[&running[0]].display_id();
    let out = acted(act(&mut s, JobAction::Hold, names(&[&array]), "alice"));
    assert_eq!(out.count, 3);
    assert_eq!(out.errors, [format!("job {done}: already finished")]);
    // Someone else's array: refused once, whole.
    let out = acted(act(&mut s, JobAction::Release, names(&[&array]), "bob"));
    assert_eq!(out.count, 0);
    assert_eq!(out.errors.len(), 1, "{out:?}");
    assert!(out.errors[0].contains(&format!("job {array} belongs to alice")));
    assert!(
        tasks
            .iter()
            .filter(|t| **t != running[0])
            .all(|t| s.jobs[t].held)
    );
    // A cancel takes every live task and says nothing of the ended one, as scancel.
    let out = acted(act(&mut s, JobAction::Cancel, names(&[&array]), "alice"));
    assert_eq!(
        out,
        ActionSummary {
            count: 4,
            errors: vec![]
        }
    );
    schedule(&mut s, 7);
    for t in &tasks {
        if s.jobs[t].state == Completing {
            exit(&mut s, *t, 143, 8);
        }
    }
    assert!(tasks.iter().all(|t| s.jobs[t].state.is_terminal()));
    invariants::check(&s).unwrap();
}

#[test]
fn an_arrays_time_limit_changes_in_every_task_or_none() {
    let mut s = cluster(2);
    let tasks = submit(&mut s, Some(vec![0, 1, 2]), 2);
    let array = tasks[0].to_string();
    schedule(&mut s, 3);
    let limit = |s: &ClusterState| -> Vec<Option<u64>> {
        tasks.iter().map(|t| s.jobs[t].spec.time_limit_s).collect()
    };
    // An operator raising it: the running tasks cannot take it, so no task does.
    let up = JobAction::Update {
        time_limit_s: Some(7200),
    };
    acted(act(
        &mut s,
        JobAction::Update {
            time_limit_s: Some(3600),
        },
        names(&[&array]),
        "root",
    ));
    assert_eq!(limit(&s), [Some(3600); 3]);
    let out = acted(act(&mut s, up, names(&[&array]), "root"));
    assert_eq!(out.count, 0);
    assert!(
        out.errors[0].starts_with(&format!(
            "job {array}_[0-1]: running; a running job's time limit can only be lowered"
        )),
        "{out:?}"
    );
    assert_eq!(limit(&s), [Some(3600); 3]);
    // Lowering it: every task.
    let down = JobAction::Update {
        time_limit_s: Some(600),
    };
    assert_eq!(
        acted(act(&mut s, down, names(&[&array]), "alice")),
        ActionSummary {
            count: 3,
            errors: vec![]
        }
    );
    assert_eq!(limit(&s), [Some(600); 3]);
    // The owner may not raise a pending task's; an operator may.
    let pending = format!("{array}_2");
    let out = acted(act(
        &mut s,
        JobAction::Update {
            time_limit_s: Some(1200),
        },
        names(&[&pending]),
        "alice",
    ));
    assert_eq!(
        out.errors,
        [format!(
            "job {pending}: only an operator may raise a time limit; you may lower it"
        )]
    );
    let out = acted(act(
        &mut s,
        JobAction::Update {
            time_limit_s: Some(1200),
        },
        names(&[&pending]),
        "root",
    ));
    assert_eq!(
        out,
        ActionSummary {
            count: 1,
            errors: vec![]
        }
    );
    // The request's own value is checked before anything: refused whole.
    let out = act(
        &mut s,
        JobAction::Update { time_limit_s: None },
        names(&[&array]),
        "root",
    );
    assert!(matches!(out, Outcome::Rejected { message } if message.contains("give TimeLimit=")));
}

#[test]
fn a_job_in_the_wrong_state_is_reported_per_job() {
    use JobState::*;
    let mut s = cluster(1);
    let r = submit(&mut s, None, 2)[0];
    schedule(&mut s, 3);
    let p = submit(&mut s, None, 4)[0];
    let d = submit(&mut s, None, 5)[0];
    let (pn, rn, dn) = (p.to_string(), r.to_string(), d.to_string());
    acted(act(&mut s, JobAction::Cancel, names(&[&dn]), "alice"));
    assert_eq!(states(&s, &[r, p, d]), [Running, Pending, Cancelled]);

    // Requeue of all three: the running one is requeued; the others are reported, each
    // in Slurm's words ("Job is pending execution", "Job has already finished").
    let out = acted(act(
        &mut s,
        JobAction::Requeue,
        names(&[&rn, &pn, &dn]),
        "alice",
    ));
    assert_eq!(out.count, 1);
    assert_eq!(
        out.errors,
        [
            format!("job {pn}: pending execution; only running jobs can be requeued"),
            format!("job {dn}: already finished"),
        ]
    );
    assert_eq!(s.jobs[&r].state, Completing);
    exit(&mut s, r, 143, 6);
    schedule(&mut s, 7);
    let running = if s.jobs[&r].state == Running { r } else { p };
    let waiting = if running == r { p } else { r };

    // Hold of a running job: kept for its next attempt (Slurm answers 0 and sets its
    // priority to 0); the job runs on, and a requeue leaves it held.
    let out = acted(act(
        &mut s,
        JobAction::Hold,
        names(&[&running.to_string()]),
        "alice",
    ));
    assert_eq!(
        out,
        ActionSummary {
            count: 1,
            errors: vec![]
        }
    );
    assert_eq!(
        (s.jobs[&running].state, s.jobs[&running].held),
        (Running, true)
    );
    acted(act(
        &mut s,
        JobAction::Requeue,
        names(&[&running.to_string()]),
        "alice",
    ));
    exit(&mut s, running, 143, 8);
    assert_eq!(s.jobs[&running].state, Pending);
    assert_eq!(s.jobs[&running].reason, PendingReason::JobHeldUser);
    schedule(&mut s, 9);
    assert_eq!(s.jobs[&running].state, Pending, "held: not started again");
    assert_eq!(s.jobs[&waiting].state, Running);
    invariants::check(&s).unwrap();

    // Release of a job that is not held: nothing to do, no error (Slurm: exit 0).
    let out = acted(act(
        &mut s,
        JobAction::Release,
        names(&[&waiting.to_string()]),
        "alice",
    ));
    assert_eq!(
        out,
        ActionSummary {
            count: 1,
            errors: vec![]
        }
    );
    // Hold or release of a finished job: reported (Slurm: "Job has already finished").
    let out = acted(act(&mut s, JobAction::Hold, names(&[&dn]), "alice"));
    assert_eq!(
        (out.count, out.errors),
        (0, vec![format!("job {dn}: already finished")])
    );
    // A cancel of a finished job says nothing, as scancel says nothing.
    let out = acted(act(&mut s, JobAction::Cancel, names(&[&dn]), "alice"));
    assert_eq!(
        out,
        ActionSummary {
            count: 1,
            errors: vec![]
        }
    );
    // Filters pass over what the action does not apply to, without a word.
    let mine = JobSelection {
        users: vec!["alice".into()],
        ..Default::default()
    };
    let out = acted(act(&mut s, JobAction::Requeue, mine.clone(), "alice"));
    assert_eq!(
        out,
        ActionSummary {
            count: 1,
            errors: vec![]
        }
    );
    let out = act(&mut s, JobAction::Requeue, mine, "alice");
    assert!(
        matches!(&out, Outcome::Rejected { message } if message == "nothing to requeue: only running jobs can be requeued"),
        "{out:?}"
    );
}

/// Entries of the single-job commands, which old builds wrote, apply as they did:
/// same outcome, same change.
#[test]
fn the_single_job_commands_of_old_logs_apply_as_before() {
    use JobState::*;
    let mut s = cluster(1);
    let r = submit(&mut s, None, 2)[0];
    schedule(&mut s, 3);
    let tasks = submit(&mut s, Some(vec![0, 1]), 4);
    let hold = |job, hold| {
        Command::HoldJob(HoldJob {
            job,
            by: "alice".into(),
            admin: false,
            hold,
        })
    };
    // hold_job of a running job: Ok, and nothing changes (the action path holds it).
    let before = s.jobs.clone();
    assert_eq!(s.apply(&env(hold(r, true), 10)), Outcome::Ok);
    assert!(!s.jobs[&r].held);
    assert_eq!(s.jobs, before);
    // hold_job of an array: every pending task.
    assert_eq!(s.apply(&env(hold(tasks[0], true), 11)), Outcome::Ok);
    assert!(tasks.iter().all(|t| s.jobs[t].held));
    let theirs = Command::HoldJob(HoldJob {
        job: tasks[0],
        by: "bob".into(),
        admin: false,
        hold: false,
    });
    assert!(matches!(
        s.apply(&env(theirs, 12)),
        Outcome::PermissionDenied { .. }
    ));
    assert!(tasks.iter().all(|t| s.jobs[t].held), "none released");
    // requeue_job of a pending task, then of the running job.
    let requeue = |job| {
        Command::RequeueJob(RequeueJob {
            job,
            by: "alice".into(),
            admin: false,
        })
    };
    assert_eq!(
        s.apply(&env(requeue(tasks[1]), 13)),
        Outcome::Rejected {
            message: format!(
                "job {} is PENDING; only running jobs can be requeued",
                tasks[1]
            )
        }
    );
    assert_eq!(s.apply(&env(requeue(r), 14)), Outcome::Ok);
    assert_eq!(s.jobs[&r].state, Completing);
    exit(&mut s, r, 143, 15);
    // update_job and cancel_job, with the outcomes they always had.
    let update = Command::UpdateJob(UpdateJob {
        job: r,
        time_limit_s: Some(60),
        by: "alice".into(),
        admin: false,
    });
    assert_eq!(s.apply(&env(update, 16)), Outcome::Ok);
    assert_eq!(s.jobs[&r].spec.time_limit_s, Some(60));
    let cancel = |job| {
        Command::CancelJob(CancelJob {
            job,
            by: "alice".into(),
            admin: false,
        })
    };
    assert_eq!(s.apply(&env(cancel(tasks[0]), 17)), Outcome::Ok);
    assert!(tasks.iter().all(|t| s.jobs[t].state == Cancelled));
    assert_eq!(
        s.apply(&env(cancel(tasks[0]), 18)),
        Outcome::Rejected {
            message: format!("job {} has already ended", tasks[0])
        }
    );
    invariants::check(&s).unwrap();
}
