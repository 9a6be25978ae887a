//! Running a shared lab, through real daemons and the CLI: per-job usage sampled by
//! agents with scripted GPU utilisation (`gagentd --fake-gpu-util`), the efficiency
//! report (`gacct --eff`, `seff`, `GET /api/v1/jobs/ID/efficiency`) and the `[idle_gpu]`
//! policy warning about and cancelling an idle job while a busy one runs on.

use gsched_tests::{Cluster, free_port, http, wait_for};
use std::time::Duration;

/// A cluster with one controller under `config` (gctld.toml text) and HTTP on `addr`,
/// and two 8-GPU agents sampling every second: `idle` with every GPU at 0%, `busy` with
/// every GPU at 95% and 20 GiB used.
fn lab(config: &str, addr: &str) -> (Cluster, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(&conf, config).unwrap();
    let conf_arg = conf.to_string_lossy().into_owned();
    let mut c = Cluster::controllers(1, &["--config", &conf_arg, "--http", addr]);
    let idle_util = c.path("idle-util.json");
    let busy_util = c.path("busy-util.json");
    let all = |v: &str| {
        let cells: Vec<String> = (0..8).map(|g| format!("\"{g}\": {v}")).collect();
        format!("{{{}}}", cells.join(", "))
    };
    std::fs::write(&idle_util, all("0")).unwrap();
    std::fs::write(&busy_util, all("{\"util\": 95, \"mem_mib\": 20480}")).unwrap();
    for (name, file) in [("idle", &idle_util), ("busy", &busy_util)] {
        c.add_agent(
            name,
            "rtx4090-8gpu.json",
            &[
                "--gpu-sample-interval",
                "1",
                "--fake-gpu-util",
                &file.to_string_lossy(),
            ],
        );
    }
    c.wait_node_online("idle");
    c.wait_node_online("busy");
    (c, idle_util, dir)
}

fn show_job(c: &Cluster, id: u64) -> String {
    c.ok("gctl", &["show", "job", &id.to_string()])
}

#[test]
fn t10_an_idle_job_is_warned_then_cancelled_with_evidence_while_a_busy_one_runs_on() {
    let addr = format!("127.0.0.1:{}", free_port());
    let notified = tempfile::NamedTempFile::new().unwrap();
    let config = format!(
        "[idle_gpu]\nthreshold_pct = 5\nafter_s = 3\naction = \"cancel\"\ngrace_s = 3\nnotify = \"echo \\\"$GSCHED_IDLE_ACTION $GSCHED_IDLE_JOB $GSCHED_IDLE_USER\\\" >> {}\"\n",
        notified.path().display()
    );
    let (c, _, _conf) = lab(&config, &addr);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let idle = c.submit(&["-w", "idle", "--gpus-per-node", "2", &script]);
    let busy = c.submit(&["-w", "busy", "--gpus-per-node", "2", &script]);
    c.wait_state(idle, &["RUNNING"], Duration::from_secs(30));
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));

    // The warning first: gctl show job, gqueue -l and the JSON row carry it.
    let shown = wait_for("the idle job's warning", Duration::from_secs(30), || {
        let s = show_job(&c, idle);
        s.contains("IdleWarning=").then_some(s)
    });
    assert!(
        shown.contains("every GPU under 5% for 0:03")
            && shown.contains("will be cancelled (IdleGPUs)")
            && shown.contains("idle:gpu0 mean 0%"),
        "{shown}"
    );
    let long = c.ok("gqueue", &["-l"]);
    let line = long
        .lines()
        .find(|l| l.trim_start().starts_with(&idle.to_string()))
        .unwrap_or_else(|| panic!("no row for {idle}:\n{long}"));
    assert!(line.contains("IdleGPUs warning"), "{long}");

    // Then the cancel, with reason IdleGPUs and the evidence per GPU.
    let ended = c.wait_state(idle, &["CANCELLED"], Duration::from_secs(30));
    assert_eq!(ended["reason"], "IdleGPUs", "{ended}");
    let evidence = ended["failure"]["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence.contains("idle:gpu0 mean 0% max 0%") && evidence.contains("idle:gpu1"),
        "{ended}"
    );
    let acct = c.ok(
        "gacct",
        &[
            "-j",
            &idle.to_string(),
            "-X",
            "-P",
            "-o",
            "JobID,State,Reason",
        ],
    );
    assert!(
        acct.contains(&format!("{idle}|CANCELLED|IdleGPUs")),
        "{acct}"
    );

    // Both were written into the job's output file, as Slurm writes its own lines.
    let out = wait_for(
        "the notices in the job's output",
        Duration::from_secs(10),
        || {
            let t = std::fs::read_to_string(c.path(&format!("gsched-{idle}.out"))).ok()?;
            t.contains("CANCELLED (IdleGPUs)").then_some(t)
        },
    );
    assert!(out.contains("gsched: warning: job"), "{out}");
    assert!(out.contains("every GPU under 5% for 0:03"), "{out}");

    // The busy job was never warned and still runs.
    let b = c.job(busy).unwrap();
    assert_eq!(b["state"], "RUNNING", "{b}");
    assert!(b.get("idle").is_none_or(|v| v.is_null()), "{b}");
    assert!(!show_job(&c, busy).contains("IdleWarning="));

    // The notify command ran for the warning and for the cancel.
    let user = c.job(idle).unwrap()["user"].as_str().unwrap().to_string();
    let lines = wait_for("two notifications", Duration::from_secs(10), || {
        let t = std::fs::read_to_string(notified.path()).unwrap_or_default();
        (t.lines().count() >= 2).then_some(t)
    });
    assert!(lines.contains(&format!("warn {idle} {user}")), "{lines}");
    assert!(lines.contains(&format!("cancel {idle} {user}")), "{lines}");
    assert!(!lines.contains(&format!(" {busy} ")), "{lines}");

    // Efficiency reports of both, as JSON from gacct, from seff and from the REST API.
    let eff_idle = c.json("gacct", &["--eff", &idle.to_string()]);
    assert_eq!(eff_idle["job_id"], idle);
    let gpus = eff_idle["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{eff_idle}");
    for g in gpus {
        assert_eq!(g["node"], "idle");
        assert_eq!(g["util_mean_pct"], 0.0, "{g}");
        assert_eq!(g["util_max_pct"], 0, "{g}");
        assert_eq!(g["idle_fraction"], 1.0, "{g}");
        assert!(g["samples"].as_u64().unwrap() >= 3, "{g}");
    }
    assert!(
        eff_idle["advice"][0]
            .as_str()
            .unwrap_or_default()
            .contains("No GPU was used at all"),
        "{eff_idle}"
    );
    let eff_busy = wait_for("the busy job's samples", Duration::from_secs(20), || {
        let v = c.json("gacct", &["--eff", &busy.to_string()]);
        let gpus = v["gpus"].as_array()?.clone();
        (gpus.len() == 2 && gpus.iter().all(|g| g["samples"].as_u64() >= Some(3))).then_some(v)
    });
    for g in eff_busy["gpus"].as_array().unwrap() {
        assert_eq!(g["node"], "busy");
        assert_eq!(g["util_mean_pct"], 95.0, "{g}");
        assert_eq!(g["util_max_pct"], 95, "{g}");
        assert_eq!(g["idle_fraction"], 0.0, "{g}");
        assert_eq!(g["mem_max_mib"], 20480, "{g}");
    }
    // Busy, and no memory asked for (a default share is not the user's to tune): no advice.
    assert_eq!(eff_busy["advice"], serde_json::json!([]), "{eff_busy}");
    let text = c.ok("gacct", &["--eff", &idle.to_string()]);
    assert!(text.contains(&format!("Job ID: {idle}")), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(" GPU ") && l.contains("[...."))
            .count(),
        2,
        "{text}"
    );
    assert!(text.contains("Advice:"), "{text}");
    let links = c.slurm_links();
    let seff = std::process::Command::new(format!("{links}/seff"))
        .arg(busy.to_string())
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    let seff_text = String::from_utf8_lossy(&seff.stdout);
    assert!(seff.status.success(), "{seff:?}");
    assert!(
        seff_text.contains(&format!("Job ID: {busy}")) && seff_text.contains(" 95.0%"),
        "{seff_text}"
    );
    let rest = http::request(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{busy}/efficiency"),
        "",
        b"",
    );
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
    let body: serde_json::Value =
        serde_json::from_str(rest.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap();
    assert_eq!(body["job_id"], busy);
    assert_eq!(body["gpus"][0]["util_max_pct"], 95, "{body}");
    let missing = http::request(&addr, "GET", "/api/v1/jobs/999999/efficiency", "", b"");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}

#[test]
fn t11_a_warning_alone_never_cancels_and_is_withdrawn_when_a_gpu_gets_busy() {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = "[idle_gpu]\nthreshold_pct = 10\nafter_s = 2\naction = \"warn\"\n";
    let (c, idle_util, _conf) = lab(config, &addr);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let job = c.submit(&["-w", "idle", "--gpus-per-node", "1", &script]);
    c.wait_state(job, &["RUNNING"], Duration::from_secs(30));
    let shown = wait_for("the warning", Duration::from_secs(30), || {
        let s = show_job(&c, job);
        s.contains("IdleWarning=").then_some(s)
    });
    assert!(shown.contains("is reported to the admins"), "{shown}");
    // A warning alone never cancels.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(c.job(job).unwrap()["state"], "RUNNING");
    // The GPU gets to work: the next summary withdraws the warning.
    let cells: Vec<String> = (0..8).map(|g| format!("\"{g}\": 60")).collect();
    std::fs::write(&idle_util, format!("{{{}}}", cells.join(", "))).unwrap();
    wait_for(
        "the warning to be withdrawn",
        Duration::from_secs(30),
        || (!show_job(&c, job).contains("IdleWarning=")).then_some(()),
    );
    assert_eq!(c.job(job).unwrap()["state"], "RUNNING");
}

/// The `gacct -X -P -o JobID,State` rows one controller (`addr`) answers with.
fn acct_rows(c: &Cluster, addr: &str) -> Vec<String> {
    let out = c.ok(
        "gacct",
        &[
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,State,User",
            "--controllers",
            addr,
        ],
    );
    out.lines().map(String::from).collect()
}

#[test]
fn t20_the_archive_keeps_jobs_past_the_memory_window_across_a_leader_change_and_restarts() {
    // Each controller keeps only 4 ended jobs in memory: the rest must come from its
    // archive.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(&conf, "[scheduler.limits]\nfinished_jobs_kept = 4\n").unwrap();
    let mut c = Cluster::controllers(3, &["--config", &conf.to_string_lossy()]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("quick.sh", "#!/bin/sh\necho done\n");
    let submit_all = |c: &Cluster, n: usize| -> Vec<u64> {
        (0..n)
            .map(|_| c.submit(&["--gpus-per-node", "1", &script]))
            .collect()
    };
    let first = submit_all(&c, 10);
    let expected = |ids: &[u64]| -> Vec<String> {
        ids.iter()
            .map(|id| format!("{id}|COMPLETED|root"))
            .collect()
    };
    let all = c.controllers_arg();
    wait_for(
        "ten completed jobs in gacct",
        Duration::from_secs(60),
        || {
            let got = acct_rows(&c, &all);
            (got == expected(&first)).then_some(())
        },
    );
    // Memory holds 4 of them: gqueue -t all sees only those.
    let in_memory = c.json("gqueue", &["-t", "all"])["jobs"]
        .as_array()
        .unwrap()
        .len();
    assert!(in_memory <= 4, "{in_memory} ended jobs in memory");
    // Every replica wrote the same archive: each answers alone with all ten.
    let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
    for a in &addrs {
        wait_for(
            &format!("controller {a}'s archive"),
            Duration::from_secs(20),
            || (acct_rows(&c, a) == expected(&first)).then_some(()),
        );
    }
    // One job in detail (its failure-free row, allocation and steps) from the archive.
    let old = c.json("gacct", &["-j", &first[0].to_string()]);
    let row = &old["jobs"][0];
    assert_eq!(row["job_id"], first[0], "{old}");
    assert_eq!(row["state"], "COMPLETED", "{old}");
    assert_eq!(row["node_list"], "n1", "{old}");
    assert!(row["allocation"]["nodes"][0]["gpus"].is_array(), "{old}");
    // CSV export of the same rows.
    let csv = c.ok("gacct", &["-X", "--csv", "-o", "JobID,State,NodeList"]);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("JobID,State,NodeList"), "{csv}");
    assert_eq!(lines.count(), 10, "{csv}");

    // The leader goes: the new one answers from its own archive, and archives more.
    let leader = c.leader(Duration::from_secs(10));
    c.kill_controller(leader as usize - 1);
    c.leader(Duration::from_secs(20));
    let second = submit_all(&c, 3);
    let both: Vec<u64> = first.iter().chain(&second).copied().collect();
    wait_for(
        "thirteen jobs after the failover",
        Duration::from_secs(60),
        || (acct_rows(&c, &all) == expected(&both)).then_some(()),
    );
    // Every controller restarts (the one that was down catches up from the log or a
    // snapshot): nothing acknowledged is lost.
    c.start_controller(leader as usize - 1);
    for i in 0..3 {
        c.restart_controller(i);
    }
    c.leader(Duration::from_secs(30));
    for a in &addrs {
        wait_for(
            &format!("controller {a} after restarts"),
            Duration::from_secs(30),
            || (acct_rows(&c, a) == expected(&both)).then_some(()),
        );
    }
}

#[test]
fn t30_greport_and_gctl_share_count_known_workloads() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    // Two jobs of known size: 2 GPUs for ~3 s and 4 GPUs for ~3 s, both ended.
    let script = c.script("three.sh", "#!/bin/sh\nsleep 3\n");
    let a = c.submit(&["--gpus-per-node", "2", &script]);
    let b = c.submit(&["--gpus-per-node", "4", &script]);
    for id in [a, b] {
        c.wait_state(id, &["COMPLETED"], Duration::from_secs(30));
    }
    // And one still running, counted up to now.
    let long = c.script("long.sh", "#!/bin/sh\nexec sleep 600\n");
    let running = c.submit(&["--gpus-per-node", "1", &long]);
    c.wait_state(running, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    let elapsed = |id: u64| -> f64 {
        let j = c.json("gacct", &["-j", &id.to_string()]);
        let row = &j["jobs"][0];
        (row["end_ms"].as_u64().unwrap() - row["start_ms"].as_u64().unwrap()) as f64 / 1000.0
    };
    let ended_gpu_h = (2.0 * elapsed(a) + 4.0 * elapsed(b)) / 3600.0;

    let report = c.json("greport", &["-S", "now-1hour"]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    let row = &rows[0];
    assert_eq!(row["user"], "root", "{report}");
    assert_eq!(row["account"], "default", "{report}");
    assert_eq!(row["jobs"], 3, "{report}");
    let gpu_h = row["gpu_hours"].as_f64().unwrap();
    // The ended jobs' time, plus a few seconds of the running one's GPU.
    assert!(
        gpu_h >= (ended_gpu_h * 100.0).floor() / 100.0 && gpu_h <= ended_gpu_h + 0.02,
        "{gpu_h} vs {ended_gpu_h}: {report}"
    );
    assert_eq!(report["capacity_gpu_hours"], 8.0, "{report}");
    let by_node = c.json("greport", &["-S", "now-1hour", "--by", "node"]);
    assert_eq!(by_node["rows"][0]["node"], "n1", "{by_node}");
    let text = c.ok("greport", &["-S", "now-1hour"]);
    assert!(
        text.contains("GPU-hours used:") && text.contains("of 8.00"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("root") && l.contains("default")),
        "{text}"
    );
    let bad = c.cli("greport", &["--by", "planet"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown grouping 'planet'"));

    // sreport's words through the Slurm name.
    let links = c.slurm_links();
    let sreport = std::process::Command::new(format!("{links}/sreport"))
        .args([
            "-P",
            "-n",
            "cluster",
            "AccountUtilizationByUser",
            "start=now-1hour",
        ])
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&sreport.stdout);
    assert!(sreport.status.success(), "{sreport:?}");
    assert!(text.starts_with("root|default|3|"), "{text}");

    // The fair-share table: the account's line, then its user's, with usage.
    let share = c.json("gctl", &["share"]);
    let rows = share["rows"].as_array().unwrap();
    assert_eq!(rows[0]["account"], "default", "{share}");
    assert_eq!(rows[0]["user"], "", "{share}");
    assert_eq!(rows[1]["user"], "root", "{share}");
    assert!(
        rows[1]["usage_gpu_hours"].as_f64().unwrap() > 0.0,
        "{share}"
    );
    let f = rows[1]["fairshare"].as_f64().unwrap();
    assert!(f > 0.0 && f < 1.0, "{share}");
    let sshare = std::process::Command::new(format!("{links}/sshare"))
        .args(["-P"])
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&sshare.stdout);
    assert!(
        text.starts_with("Account|User|RawShares|NormShares|GPU-hours|NormUsage|FairShare\n"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.contains("|root|")), "{text}");
}
