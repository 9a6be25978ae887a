//! Admin reservations through real controllers and agents, acting only through the CLI
//! and Slurm's names: a reservation that opens in the future while the queue is full
//! (jobs that would run into it wait, short ones run before it, its users' jobs start in
//! it), who may use it, and that it survives a leader change; a maintenance window that
//! takes its node out of scheduling and ends early when it is updated.

use gsched_tests::{Cluster, success_stdout, test_users, wait_for};
use std::process::Output;
use std::time::Duration;

fn slurm(c: &Cluster, links: &str, name: &str, args: &[&str]) -> Output {
    c.slurm_name(links, name, args)
}

fn reason(c: &Cluster, id: u64) -> String {
    c.job(id).unwrap()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_reason(c: &Cluster, id: u64, want: &str) {
    wait_for(
        &format!("job {id}'s reason to be {want}"),
        Duration::from_secs(20),
        || (reason(c, id) == want).then_some(()),
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn submit_as(c: &Cluster, user: &gsched_tests::TestUser, args: &[&str]) -> Output {
    c.cli_as(user, "gsub", args)
}

#[test]
fn t10_a_future_reservation_while_the_queue_is_full() {
    let Some((alice, bob)) = test_users() else {
        return;
    };
    let mut c = Cluster::controllers(3, &[]);
    let links = c.slurm_links();
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("n1");
    c.wait_node_online("n2");

    // n1 is taken for two hours; the reservation opens on n2 in 20 s for an hour.
    let long = c.submit(&[
        "-w",
        "n1",
        "--gpus-per-node",
        "8",
        "-t",
        "2:00:00",
        "--wrap",
        "sleep 600",
    ]);
    c.wait_state(long, &["RUNNING"], Duration::from_secs(30));
    let made = slurm(
        &c,
        &links,
        "scontrol",
        &[
            "create",
            "reservation",
            "ReservationName=deadline",
            "StartTime=now+20",
            "Duration=60",
            &format!("Users={}", alice.name),
            "Nodes=n2",
        ],
    );
    assert_eq!(
        success_stdout(&made, "scontrol create reservation").trim(),
        "Reservation created: deadline"
    );

    // The queue fills: an hour-long job would run into the window, a 5-second one not.
    let hour = c.submit(&[
        "--gpus-per-node",
        "8",
        "-t",
        "1:00:00",
        "--wrap",
        "sleep 600",
    ]);
    let short = c.submit(&["--gpus-per-node", "8", "-t", "0:05", "--wrap", "sleep 1"]);
    wait_reason(&c, hour, "ReqNodeNotAvail, May be reserved for other job");
    let ran = c.wait_state(short, &["COMPLETED", "TIMEOUT"], Duration::from_secs(30));
    assert_eq!(ran["node_list"], "n2", "{ran}");

    // Alice's job waits for the window and is told so; Bob may not use it.
    let out = submit_as(
        &c,
        &alice,
        &[
            "--reservation",
            "deadline",
            "--gpus-per-node",
            "8",
            "-t",
            "10",
            "--parsable",
            "--wrap",
            "sleep 600",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let inside: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    wait_for(
        "her job to wait for the window",
        Duration::from_secs(20),
        || {
            let j = c.job(inside)?;
            (j["reason"] == "Reservation" || j["state"] == "RUNNING").then_some(())
        },
    );
    let start = c.ok("gqueue", &["--start", "-j", &inside.to_string()]);
    assert!(!start.contains("N/A"), "the start is known: {start}");
    let refused = submit_as(&c, &bob, &["--reservation", "deadline", "--wrap", "true"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("Access denied to requested reservation"),
        "{}",
        stderr(&refused)
    );
    let refused = submit_as(&c, &alice, &["--reservation", "nosuch", "--wrap", "true"]);
    assert!(
        stderr(&refused).contains("Requested reservation is invalid"),
        "{}",
        stderr(&refused)
    );

    // At the window's start her job runs on n2; the hour-long job still waits.
    let running = c.wait_state(inside, &["RUNNING"], Duration::from_secs(60));
    assert_eq!(running["node_list"], "n2", "{running}");
    assert_eq!(c.job(hour).unwrap()["state"], "PENDING");
    let shown = success_stdout(
        &slurm(&c, &links, "scontrol", &["show", "reservation", "deadline"]),
        "scontrol show reservation",
    );
    assert!(
        shown.contains("State=ACTIVE")
            && shown.contains(&format!("Users={}", alice.name))
            && shown.contains("Nodes=n2"),
        "{shown}"
    );
    assert_eq!(c.node("n2").unwrap()["reservation"], "deadline");

    // A new leader knows the reservation and refuses to delete it while it is used.
    c.kill_leader();
    let after = wait_for(
        "the reservation through a new leader",
        Duration::from_secs(30),
        || {
            let o = c.cli("gctl", &["reservation", "show", "--json"]);
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        },
    );
    assert!(after.contains("\"deadline\""), "{after}");
    let del = c.cli("gctl", &["reservation", "delete", "deadline"]);
    assert!(!del.status.success());
    assert!(stderr(&del).contains("in use"), "{}", stderr(&del));
    assert!(
        stderr(&del).contains(&inside.to_string()),
        "{}",
        stderr(&del)
    );

    // Once her job ends the reservation can go, and the waiting job takes n2.
    c.ok("gcancel", &[&inside.to_string()]);
    c.wait_state(inside, &["CANCELLED"], Duration::from_secs(30));
    let del = wait_for("the delete", Duration::from_secs(20), || {
        let o = c.cli("gctl", &["reservation", "delete", "deadline"]);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    });
    assert!(del.contains("deleted"), "{del}");
    let started = c.wait_state(hour, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(started["node_list"], "n2", "{started}");
    assert!(
        c.ok("gctl", &["reservation", "show"])
            .contains("No reservations")
    );
}

#[test]
fn t20_a_maintenance_window_takes_its_node_out_and_an_update_ends_it() {
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("n1");
    c.wait_node_online("n2");
    let busy = c.submit(&[
        "-w",
        "n1",
        "--gpus-per-node",
        "2",
        "-t",
        "1:00:00",
        "--wrap",
        "sleep 600",
    ]);
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));

    // A window over a running job needs IGNORE_JOBS; the refusal creates nothing.
    let args = |flags: &str| {
        vec![
            "create".to_string(),
            "reservation".into(),
            "ReservationName=m".into(),
            "StartTime=now".into(),
            "Duration=30".into(),
            "Users=root".into(),
            "Nodes=n1".into(),
            format!("Flags={flags}"),
        ]
    };
    let a = args("MAINT");
    let refused = slurm(
        &c,
        &links,
        "scontrol",
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("busy") && stderr(&refused).contains("IGNORE_JOBS"),
        "{}",
        stderr(&refused)
    );
    assert!(
        c.ok("gctl", &["reservation", "show"])
            .contains("No reservations")
    );
    let a = args("MAINT,IGNORE_JOBS");
    success_stdout(
        &slurm(
            &c,
            &links,
            "scontrol",
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
        "create maint",
    );

    // The running job goes on; new work keeps off n1 and says why.
    let pinned = c.submit(&[
        "-w",
        "n1",
        "--gpus-per-node",
        "1",
        "-t",
        "10",
        "--wrap",
        "sleep 600",
    ]);
    let free = c.submit(&["--gpus-per-node", "1", "-t", "10", "--wrap", "sleep 600"]);
    wait_reason(&c, pinned, "ReqNodeNotAvail, Reserved for maintenance");
    let f = c.wait_state(free, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(f["node_list"], "n2", "{f}");
    assert_eq!(c.job(busy).unwrap()["state"], "RUNNING");
    c.ok("gcancel", &[&busy.to_string()]);
    c.wait_state(busy, &["CANCELLED"], Duration::from_secs(30));
    wait_for("n1 to show maint", Duration::from_secs(20), || {
        (c.node("n1")?["state"] == "maint").then_some(())
    });
    let sinfo = success_stdout(&slurm(&c, &links, "sinfo", &[]), "sinfo");
    assert!(sinfo.contains("maint"), "{sinfo}");

    // Ending the window early lets the pinned job start.
    success_stdout(
        &slurm(
            &c,
            &links,
            "scontrol",
            &["update", "ReservationName=m", "EndTime=now+2"],
        ),
        "update maint",
    );
    c.wait_state(pinned, &["RUNNING"], Duration::from_secs(30));
    wait_for("the window to be gone", Duration::from_secs(20), || {
        c.ok("gctl", &["reservation", "show"])
            .contains("No reservations")
            .then_some(())
    });
}
