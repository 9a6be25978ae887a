//! Actions on jobs and filtered reads through the CLI, as users run them: `gcancel -u`,
//! `gcancel -t/-n/-w`, `gctl hold/release` of many jobs, `gqueue --me/-u/--stale-ok`,
//! `gacct -S/-E`; each action is one request, and other users' jobs are never touched by
//! a filter. Cancelling a node's running jobs at once reaches its agent as one message.
//! Jobs in the wrong state are reported per job as Slurm 22.05 reports them, measured on
//! the peer (t40), and an array changes all or none.

use gsched_tests::{Cluster, test_users};
use std::time::Duration;

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["job_id"].as_u64())
        .collect()
}

#[test]
fn t10_bulk_actions_and_filters() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("held.sh", "#!/bin/sh\nsleep 600\n");
    let held: Vec<u64> = (0..6)
        .map(|i| {
            c.submit(&[
                "--hold",
                "-J",
                if i < 3 { "alpha" } else { "beta" },
                &script,
            ])
        })
        .collect();
    // Release two by id in one call, hold them again.
    let a = held[0].to_string();
    let b = held[1].to_string();
    let out = c.ok("gctl", &["release", &a, &b]);
    assert!(out.contains("2 job(s) released"), "{out}");
    c.wait_state(held[0], &["RUNNING"], Duration::from_secs(30));
    // -w: every job on n1 (the two released ones run there).
    c.wait_state(held[1], &["RUNNING"], Duration::from_secs(30));
    let out = c.ok("gcancel", &["-w", "n1"]);
    assert!(out.is_empty(), "scancel is silent on success: {out}");
    c.wait_state(held[0], &["CANCELLED"], Duration::from_secs(30));
    c.wait_state(held[1], &["CANCELLED"], Duration::from_secs(30));
    // By name, pending only.
    c.ok("gcancel", &["-n", "alpha", "-t", "PD"]);
    assert_eq!(c.job(held[2]).unwrap()["state"], "CANCELLED");
    assert_eq!(c.job(held[3]).unwrap()["state"], "PENDING");
    // Naming a job that does not exist is an error; the others are still cancelled.
    let out = c.cli("gcancel", &[&held[3].to_string(), "999999"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("999999"));
    assert_eq!(c.job(held[3]).unwrap()["state"], "CANCELLED");
    // -u: the rest, in one request.
    let me = gsched_cli::client::current_user();
    c.ok("gcancel", &["-u", &me]);
    for id in &held {
        assert_eq!(c.job(*id).unwrap()["state"], "CANCELLED", "job {id}");
    }
    // Nothing named at all is refused.
    let out = c.cli("gcancel", &[]);
    assert!(!out.status.success());
    // gacct's window: everything today; nothing before an hour ago ended there.
    let today = ids(&c.json("gacct", &[]));
    for id in &held {
        assert!(today.contains(id));
    }
    let old = ids(&c.json("gacct", &["-S", "now-3days", "-E", "now-2days"]));
    assert!(old.is_empty(), "{old:?}");
    let out = c.cli("gacct", &["-S", "last tuesday"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the time"));
    // --stale-ok answers from the controller asked.
    let id = c.submit(&["--hold", &script]);
    assert_eq!(ids(&c.json("gqueue", &["--stale-ok"])), vec![id]);
    assert_eq!(ids(&c.json("gqueue", &["--me"])), vec![id]);
    assert!(ids(&c.json("gqueue", &["-u", "nobody"])).is_empty());
}

#[test]
fn t20_filters_never_reach_other_users_jobs() {
    let Some((alice, bob)) = test_users() else {
        return;
    };
    let c = Cluster::controllers(1, &[]);
    let dir = c.user_dir(&alice);
    let script = dir.join("s.sh");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    nix::unistd::chown(
        &script,
        Some(nix::unistd::Uid::from_raw(alice.uid)),
        Some(nix::unistd::Gid::from_raw(alice.gid)),
    )
    .unwrap();
    let out = c.cli_as(&alice, "gsub", &["--hold", script.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    // Bob's filters find none of alice's jobs; naming one is refused.
    let out = c.cli_as(&bob, "gcancel", &["-u", &alice.name]);
    assert!(!out.status.success());
    let out = c.cli_as(&bob, "gcancel", &["-t", "PD"]);
    assert!(!out.status.success());
    let out = c.cli_as(&bob, "gctl", &["release", &id.to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to gsalice"));
    let job = c.job(id).unwrap();
    assert_eq!(
        (job["state"].as_str(), job["held"].as_bool()),
        (Some("PENDING"), Some(true))
    );
    // Root (an admin) may.
    c.ok("gcancel", &["-u", &alice.name]);
    assert_eq!(c.job(id).unwrap()["state"], "CANCELLED");
}

#[test]
fn t30_a_nodes_running_jobs_cancelled_at_once_are_stopped_by_one_message() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("long.sh", "#!/bin/sh\nexec sleep 600\n");
    let jobs: Vec<u64> = (0..8)
        .map(|_| c.submit(&["--gpus-per-node", "1", &script]))
        .collect();
    for id in &jobs {
        c.wait_state(*id, &["RUNNING"], Duration::from_secs(60));
    }
    c.ok("gcancel", &["--me"]);
    for id in &jobs {
        c.wait_state(*id, &["CANCELLED"], Duration::from_secs(30));
    }
    let log = std::fs::read_to_string(c.path("agent-n1.log")).unwrap_or_default();
    let batched: Vec<u32> = log
        .lines()
        .filter_map(|l| l.split("stopping ").nth(1))
        .filter_map(|r| r.strip_suffix(" steps (one message)"))
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    assert_eq!(
        batched.iter().max(),
        Some(&8),
        "one cancel of eight running jobs reaches the node as one message: {batched:?}\n{log}"
    );
}

/// A command as Slurm 22.05 answered it (tests/slurmdiff's peer, `slurm.sh up`, run as
/// root), its jobs written as the test's: {R} runs, {P} waits (`--begin`, not held), {D}
/// has finished, {A} is an array whose tasks 0-1 run and 2-3 wait, {B} an array whose
/// task 0 has finished and 1-2 run.
struct Measured {
    args: &'static str,
    /// Slurm's exit status, and what it printed.
    status: i32,
    slurm: &'static str,
    /// The jobs Slurm refused, as gsched names them, with the words gsched must use:
    /// scontrol's own where they say the same thing.
    refused: &'static [(&'static str, &'static str)],
}

const SLURM: &[Measured] = &[
    Measured {
        args: "scontrol hold {R}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol release {R}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol release {P}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol requeue {P}",
        status: 1,
        slurm: "Job is pending execution for job {P}",
        refused: &[("{P}", "pending execution")],
    },
    Measured {
        args: "scontrol hold {D}",
        status: 1,
        slurm: "Job has already finished for job {D}\nslurm_suspend error: Job has already finished",
        refused: &[("{D}", "already finished")],
    },
    Measured {
        args: "scontrol release {D}",
        status: 1,
        slurm: "Job has already finished for job {D}\nslurm_suspend error: Job has already finished",
        refused: &[("{D}", "already finished")],
    },
    Measured {
        args: "scancel {D}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol hold 99999,{P}",
        status: 1,
        slurm: "Invalid job id specified for job 99999\nslurm_suspend error: Invalid job id specified",
        refused: &[("99999", "does not exist")],
    },
    Measured {
        args: "scontrol release {P}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scancel -s USR1 {P}",
        status: 228,
        slurm: "scancel: error: Kill job error on job id {P}: Job can not be altered now, try again later",
        refused: &[("{P}", "pending execution")],
    },
    // Slurm requeued A_0 and A_1 here; gsched changes an array all or none.
    Measured {
        args: "scontrol requeue {A}",
        status: 1,
        slurm: "{A}_0-1: No error\n{A}_2-3: Job is pending execution",
        refused: &[("{A}_[2-3]", "pending execution"), ("{A}", "all or none")],
    },
    Measured {
        args: "scontrol hold {A}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol release {A}",
        status: 0,
        slurm: "",
        refused: &[],
    },
    Measured {
        args: "scontrol hold {B}",
        status: 1,
        slurm: "{B}_0: Job has already finished\n{B}_1-2: No error",
        refused: &[("{B}_0", "already finished")],
    },
    Measured {
        args: "scontrol release {B}",
        status: 1,
        slurm: "{B}_0: Job has already finished\n{B}_1-2: No error",
        refused: &[("{B}_0", "already finished")],
    },
];

/// The same commands through gsched's Slurm names, on the same jobs: the same exit status
/// (0 or not), a line for each job Slurm refused (an array's tasks as one range), and
/// scontrol's words for it where they say the same thing.
#[test]
fn t40_per_job_refusals_are_reported_as_slurm_reports_them() {
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    c.add_agent("n1", "rtx4090-8gpu.json", &["--slurm-names", &links]);
    let long = c.script("long.sh", "#!/bin/sh\nexec sleep 600\n");
    let first_ends = c.script(
        "first-ends.sh",
        "#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" = 0 ] && exit 0\nexec sleep 600\n",
    );
    // B: tasks 0-2 of one GPU; task 0 ends at once.
    let b = c.submit(&["--array", "0-2", "--gpus-per-node", "1", &first_ends]);
    c.wait_state(b, &["COMPLETED"], Duration::from_secs(60));
    for t in 1..3 {
        c.wait_state(b + t, &["RUNNING"], Duration::from_secs(60));
    }
    let r = c.submit(&["--gpus-per-node", "1", &long]);
    c.wait_state(r, &["RUNNING"], Duration::from_secs(60));
    // A: tasks of two GPUs on the five left: 0 and 1 run, 2 and 3 wait.
    let a = c.submit(&["--array", "0-3", "--gpus-per-node", "2", &long]);
    for t in 0..2 {
        c.wait_state(a + t, &["RUNNING"], Duration::from_secs(60));
    }
    let p = c.submit(&["--begin", "now+1hour", &long]);
    let d = c.submit(&["--wrap", "true"]);
    c.wait_state(d, &["COMPLETED"], Duration::from_secs(60));
    for t in 2..4 {
        assert_eq!(c.job(a + t).unwrap()["state"], "PENDING");
    }
    let name = |text: &str| -> String {
        text.replace("{R}", &r.to_string())
            .replace("{P}", &p.to_string())
            .replace("{D}", &d.to_string())
            .replace("{A}", &a.to_string())
            .replace("{B}", &b.to_string())
    };
    let held = |id: u64| c.job(id).unwrap()["held"].as_bool().unwrap();
    for m in SLURM {
        let words: Vec<&str> = m.args.split(' ').collect();
        let args: Vec<String> = words[1..]
            .iter()
            .map(|w| {
                if w.starts_with('-') {
                    w.to_string()
                } else {
                    name(w)
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = c.slurm_name(&links, words[0], &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.success(),
            m.status == 0,
            "{}: Slurm answered {} ({:?}); gsched {:?}: {err}",
            m.args,
            m.status,
            m.slurm,
            out.status
        );
        for (job, words) in m.refused {
            let job = format!("job {}:", name(job));
            let line = err.lines().find(|l| l.contains(&job)).unwrap_or_else(|| {
                panic!(
                    "{}: Slurm said {:?}; gsched did not name {job}: {err}",
                    m.args, m.slurm
                )
            });
            assert!(
                line.contains(words),
                "{}: Slurm said {:?}; gsched said {line:?}",
                m.args,
                m.slurm
            );
        }
        assert_eq!(
            err.lines().count(),
            m.refused.len(),
            "{}: one line per refusal: {err}",
            m.args
        );
        // What changed, where Slurm's rules and gsched's agree; and where they differ.
        match m.args {
            "scontrol hold {R}" => {
                assert!(held(r), "a running job's hold is kept for its next attempt");
                assert_eq!(c.job(r).unwrap()["state"], "RUNNING");
            }
            "scontrol release {R}" => assert!(!held(r)),
            "scontrol hold 99999,{P}" => assert!(held(p), "the job that exists is held"),
            "scontrol requeue {A}" => {
                for t in 0..2 {
                    let task = c.job(a + t).unwrap();
                    assert_eq!(
                        (task["state"].as_str(), task["restarts"].as_u64()),
                        (Some("RUNNING"), Some(0)),
                        "all or none: no task of the array was requeued"
                    );
                }
            }
            "scontrol hold {A}" => assert!((0..4).all(|t| held(a + t))),
            "scontrol release {A}" => assert!((0..4).all(|t| !held(a + t))),
            "scontrol hold {B}" => assert!((1..3).all(|t| held(b + t))),
            "scontrol release {B}" => assert!((1..3).all(|t| !held(b + t))),
            _ => {}
        }
    }
    c.ok("gcancel", &["--me"]);
}
