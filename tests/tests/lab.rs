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

// Notifications: `--mail-type`/`--mail-user` through the configured mail program, called
// as Slurm calls its MailProg; users' webhooks; failures shown; at most once across a
// leader's death.

/// A mail program that keeps each call (its arguments, one per line, `---`, then its
/// stdin) as a file of its own in `dir/mail`, and then sleeps `dir/slow` seconds if that
/// file exists, or fails with `dir/fail`'s text if that file exists.
fn mail_program(dir: &std::path::Path) -> std::path::PathBuf {
    let inbox = dir.join("mail");
    std::fs::create_dir_all(&inbox).unwrap();
    let prog = dir.join("mail.sh");
    let d = dir.display();
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\n\
             if [ -f {d}/fail ]; then cat {d}/fail >&2; exit 1; fi\n\
             tmp=$(mktemp {d}/mail/.call.XXXXXX)\n\
             for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$tmp\"\n\
             echo --- >> \"$tmp\"\n\
             cat >> \"$tmp\"\n\
             mv \"$tmp\" \"$tmp.msg\"\n\
             if [ -f {d}/slow ]; then sleep $(cat {d}/slow); fi\n\
             exit 0\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    prog
}

/// One call of the mail program: its arguments and what it read.
#[derive(Debug, Clone)]
struct Mail {
    args: Vec<String>,
    body: String,
}

impl Mail {
    fn subject(&self) -> &str {
        self.args.get(1).map(String::as_str).unwrap_or("")
    }
    fn to(&self) -> &str {
        self.args.get(2).map(String::as_str).unwrap_or("")
    }
}

/// Every call kept so far.
fn mails(dir: &std::path::Path) -> Vec<Mail> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir.join("mail")) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "msg") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let (head, body) = text.split_once("---\n").unwrap_or((&text, ""));
        out.push(Mail {
            args: head.lines().map(String::from).collect(),
            body: body.to_string(),
        });
    }
    out
}

/// The mails whose subject starts with `prefix`.
fn mails_for(dir: &std::path::Path, prefix: &str) -> Vec<Mail> {
    mails(dir)
        .into_iter()
        .filter(|m| m.subject().starts_with(prefix))
        .collect()
}

fn notify_config(dir: &std::path::Path, extra: &str) -> String {
    format!(
        "[notify]\nmail_prog = \"{}\"\nretry_delay_s = 0.2\n{extra}",
        mail_program(dir).display()
    )
}

#[test]
fn mail_type_sends_what_slurm_sends() {
    let sink = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let (c, _, _conf) = lab(&notify_config(sink.path(), ""), &addr);
    let work = c.script("work.sh", "#!/bin/sh\nsleep 4\n");
    let broken = c.script("broken.sh", "#!/bin/sh\nexit 3\n");
    let quiet = c.script("quiet.sh", "#!/bin/sh\ntrue\n");
    let ok = c.submit(&[
        "--mail-type=BEGIN,END",
        "-J",
        "train",
        "-w",
        "busy",
        "--gpus-per-node",
        "1",
        &work,
    ]);
    let failed = c.submit(&[
        "--mail-type=FAIL",
        "--mail-user=bob@lab.org",
        "-J",
        "broken",
        &broken,
    ]);
    // Half its time limit: the leader's check, not a state change, tells it.
    let nap = c.script("nap.sh", "#!/bin/sh\nsleep 7\n");
    let half = c.submit(&[
        "--mail-type=TIME_LIMIT_50",
        "--time=0:10",
        "-J",
        "half",
        &nap,
    ]);
    // FAIL alone says nothing of a job that completes; no --mail-type, nothing at all.
    let fine = c.submit(&["--mail-type=FAIL", "-J", "fine", &quiet]);
    let silent = c.submit(&["-J", "silent", &quiet]);
    c.wait_state(ok, &["COMPLETED"], Duration::from_secs(60));
    c.wait_state(failed, &["FAILED"], Duration::from_secs(60));
    c.wait_state(fine, &["COMPLETED"], Duration::from_secs(60));
    c.wait_state(silent, &["COMPLETED"], Duration::from_secs(60));
    c.wait_state(half, &["COMPLETED"], Duration::from_secs(60));
    let user = c.job(ok).unwrap()["user"].as_str().unwrap().to_string();

    let all = wait_for("four mails", Duration::from_secs(30), || {
        let m = mails(sink.path());
        (m.len() >= 4).then_some(m)
    });
    let began = mails_for(sink.path(), &format!("Slurm Job_id={ok} Name=train Began"));
    assert_eq!(began.len(), 1, "{all:?}");
    assert_eq!(
        began[0].args[0], "-s",
        "PROG -s SUBJECT RECIPIENT: {began:?}"
    );
    assert_eq!(began[0].to(), user, "the job's user by default: {began:?}");
    assert!(
        began[0].subject().starts_with(&format!(
            "Slurm Job_id={ok} Name=train Began, Queued time 00:00:0"
        )),
        "{began:?}"
    );
    let ended = mails_for(sink.path(), &format!("Slurm Job_id={ok} Name=train Ended"));
    assert_eq!(ended.len(), 1, "{all:?}");
    let subject = ended[0].subject();
    assert!(
        subject.starts_with(&format!(
            "Slurm Job_id={ok} Name=train Ended, Run time 00:00:0"
        )) && subject.ends_with(", COMPLETED, ExitCode 0"),
        "{subject}"
    );
    assert_eq!(ended[0].to(), user);
    // The body: state, reason, elapsed time and the GPU efficiency summary and report.
    let body = &ended[0].body;
    assert!(body.contains("State: COMPLETED"), "{body}");
    assert!(body.contains("Reason: None"), "{body}");
    assert!(body.contains("Elapsed: 00:00:0"), "{body}");
    assert!(
        body.contains("GPU efficiency: 1 GPU(s), mean 95.0% (max 95%)"),
        "{body}"
    );
    assert!(
        body.contains("GPU utilisation (mean over the job"),
        "{body}"
    );

    let fail = mails_for(sink.path(), &format!("Slurm Job_id={failed} Name=broken"));
    assert_eq!(fail.len(), 1, "{all:?}");
    assert_eq!(fail[0].to(), "bob@lab.org");
    let subject = fail[0].subject();
    assert!(
        subject.starts_with(&format!(
            "Slurm Job_id={failed} Name=broken Failed, Run time 00:00:0"
        )) && subject.ends_with(", FAILED, ExitCode 3"),
        "{subject}"
    );
    assert!(
        fail[0].body.contains("Reason: NonZeroExitCode:3"),
        "{}",
        fail[0].body
    );
    let halfway = mails_for(sink.path(), &format!("Slurm Job_id={half} Name=half"));
    assert_eq!(halfway.len(), 1, "{all:?}");
    assert!(
        halfway[0].subject().starts_with(&format!(
            "Slurm Job_id={half} Name=half Reached 50% of time limit, Run time 00:00:0"
        )),
        "{halfway:?}"
    );
    assert_eq!(halfway[0].to(), user);
    // Nothing else was sent, and the outcomes are on the jobs.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(mails(sink.path()).len(), 4, "{:?}", mails(sink.path()));
    let shown = show_job(&c, ok);
    assert!(
        shown.contains(&format!("Notify=BEGIN mail:{user} sent"))
            && shown.contains(&format!("Notify=END mail:{user} sent")),
        "{shown}"
    );
    assert!(
        show_job(&c, failed).contains("Notify=FAIL mail:bob@lab.org sent"),
        "{}",
        show_job(&c, failed)
    );
    assert!(!show_job(&c, fine).contains("Notify="));
    let metrics = http::request(&addr, "GET", "/metrics", "", b"");
    assert!(
        metrics
            .contains("gsched_notifications_delivered_total{channel=\"mail\",outcome=\"sent\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gsched_job_notifications{state=\"sent\"} 4"),
        "{metrics}"
    );
}

/// A local HTTP server that answers 200 and hands over each request's path and body.
fn http_sink() -> (String, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            s.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            let (path, body) = loop {
                let Ok(n) = s.read(&mut buf) else {
                    break (String::new(), String::new());
                };
                if n == 0 {
                    break (String::new(), String::new());
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                let Some((head, body)) = text.split_once("\r\n\r\n") else {
                    continue;
                };
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    break (path, body.to_string());
                }
            };
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            if tx.send((path, body)).is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

#[test]
fn t40_a_users_webhooks_get_json_and_a_failing_mail_program_is_shown() {
    let sink = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let config = notify_config(sink.path(), "tries = 2\nwebhook_private = true\n");
    let (c, _, _conf) = lab(&config, &addr);
    let (hook, requests) = http_sink();
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    // Users' own settings live in the associations: an account, the user, and where
    // their jobs' notifications go and which events they tell by default.
    c.ok("gctl", &["account", "add", "lab"]);
    c.ok("gctl", &["user", "add", &me, "--account", "lab"]);
    let targets = format!("webhook:http://{hook}/gsched,slack:http://{hook}/slack");
    c.ok(
        "gctl",
        &[
            "user",
            "modify",
            &me,
            "--notify",
            &targets,
            "--notify-on",
            "END",
        ],
    );
    let users = c.ok("gctl", &["user", "show"]);
    assert!(users.contains(&format!("{targets} on END")), "{users}");
    let bad = c.cli("gctl", &["user", "modify", &me, "--notify", "mail:-oX"]);
    assert!(!bad.status.success(), "{bad:?}");

    // A job without --mail-type tells END, by the user's settings, to both hooks and no
    // mail (the settings name no mail target).
    let quiet = c.script("quiet.sh", "#!/bin/sh\nexit 0\n");
    let job = c.submit(&["-J", "hooked", "-w", "busy", "--gpus-per-node", "1", &quiet]);
    c.wait_state(job, &["COMPLETED"], Duration::from_secs(60));
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(
            requests
                .recv_timeout(Duration::from_secs(30))
                .expect("a webhook request"),
        );
    }
    got.sort();
    assert_eq!(got[0].0, "/gsched", "{got:?}");
    let doc: serde_json::Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(doc["job_id"], job, "{doc}");
    assert_eq!(doc["name"], "hooked", "{doc}");
    assert_eq!(doc["user"], me.as_str(), "{doc}");
    assert_eq!(doc["event"], "END", "{doc}");
    assert_eq!(doc["state"], "COMPLETED", "{doc}");
    assert_eq!(doc["reason"], "None", "{doc}");
    assert_eq!(doc["exit_code"], 0, "{doc}");
    assert!(doc["elapsed_s"].is_u64(), "{doc}");
    assert!(
        doc["subject"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Slurm Job_id={job} Name=hooked Ended, Run time ")),
        "{doc}"
    );
    assert!(
        doc["efficiency_summary"]
            .as_str()
            .unwrap()
            .starts_with("GPU efficiency"),
        "{doc}"
    );
    assert_eq!(got[1].0, "/slack", "{got:?}");
    let slack: serde_json::Value = serde_json::from_str(&got[1].1).unwrap();
    assert_eq!(
        slack.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["text"],
        "Slack's form: {slack}"
    );
    assert!(
        slack["text"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Slurm Job_id={job} Name=hooked Ended")),
        "{slack}"
    );
    assert!(mails(sink.path()).is_empty());
    wait_for("the webhooks recorded", Duration::from_secs(10), || {
        let s = show_job(&c, job);
        (s.contains(&format!("Notify=END webhook:http://{hook}/gsched sent"))
            && s.contains(&format!("Notify=END slack:http://{hook}/slack sent")))
        .then_some(())
    });

    // A mail program that fails: tried again, then shown on the job and counted.
    std::fs::write(sink.path().join("fail"), "mail: cannot send to nobody\n").unwrap();
    let failing = c.submit(&[
        "--mail-type=END",
        "--mail-user=nobody",
        "-J",
        "unlucky",
        &quiet,
    ]);
    c.wait_state(failing, &["COMPLETED"], Duration::from_secs(60));
    let shown = wait_for("the failed delivery", Duration::from_secs(30), || {
        let s = show_job(&c, failing);
        s.contains("Notify=END mail:nobody failed").then_some(s)
    });
    assert!(
        shown.contains("exited 1: mail: cannot send to nobody (try 2 of 2)"),
        "{shown}"
    );
    // The user's webhooks still got it (--mail-user replaces only the mail targets).
    let (path, _) = requests.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(path == "/gsched" || path == "/slack", "{path}");
    let metrics = http::request(&addr, "GET", "/metrics", "", b"");
    assert!(
        metrics.contains(
            "gsched_notifications_delivered_total{channel=\"mail\",outcome=\"failed\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "gsched_notifications_delivered_total{channel=\"webhook\",outcome=\"sent\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("gsched_job_notifications{state=\"failed\"} 1"),
        "{metrics}"
    );
}

#[test]
fn t41_a_leader_killed_while_it_sends_does_not_make_the_next_one_send_again() {
    let sink = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(&conf, notify_config(sink.path(), "in_doubt_after_s = 3\n")).unwrap();
    let mut c = Cluster::controllers(3, &["--config", &conf.to_string_lossy()]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let quick = c.script("quick.sh", "#!/bin/sh\ntrue\n");
    // The mail program takes its time: the leader is killed while it runs, after the
    // claim was committed.
    std::fs::write(sink.path().join("slow"), "20").unwrap();
    let job = c.submit(&["--mail-type=END", "-J", "first", &quick]);
    c.wait_state(job, &["COMPLETED"], Duration::from_secs(60));
    let prefix = format!("Slurm Job_id={job} Name=first Ended");
    wait_for("the mail program started", Duration::from_secs(30), || {
        (!mails_for(sink.path(), &prefix).is_empty()).then_some(())
    });
    let old = c.leader(Duration::from_secs(10));
    c.kill_leader();
    std::fs::remove_file(sink.path().join("slow")).unwrap();
    let new = c.leader(Duration::from_secs(20));
    assert_ne!(old, new);
    // The new leader does not send it again: after the delivery window it puts the
    // claim down as not known to be delivered.
    let shown = wait_for(
        "the claim put down as in doubt",
        Duration::from_secs(30),
        || {
            let s = show_job(&c, job);
            s.contains("not known to have been delivered").then_some(s)
        },
    );
    assert!(
        shown.contains(&format!("controller {old} claimed it")),
        "{shown}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(mails_for(sink.path(), &prefix).len(), 1, "sent once");

    // A job that ends under the new leader is told once, by it.
    let next = c.submit(&["--mail-type=END", "-J", "second", &quick]);
    c.wait_state(next, &["COMPLETED"], Duration::from_secs(60));
    let prefix = format!("Slurm Job_id={next} Name=second Ended");
    wait_for("the new leader's mail", Duration::from_secs(30), || {
        (!mails_for(sink.path(), &prefix).is_empty()).then_some(())
    });
    wait_for("its outcome recorded", Duration::from_secs(20), || {
        show_job(&c, next)
            .contains("Notify=END mail:")
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(mails_for(sink.path(), &prefix).len(), 1);
}
