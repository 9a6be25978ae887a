//! Bulk actions and filtered reads through the CLI, as users run them: `gcancel -u`,
//! `gcancel -t/-n/-w`, `gctl hold/release` of many jobs, `gqueue --me/-u/--stale-ok`,
//! `gacct -S/-E`; each bulk action is one request, and other users' jobs are never
//! touched by a filter. Cancelling a node's running jobs at once reaches its agent as one
//! message.

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
