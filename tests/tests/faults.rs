//! Faults the HA tests do not cover, through real processes: an agent that dies and comes
//! back (before and after the dead-node timeout), an agent cut off from the controllers
//! (through the agent's fault file: the test clusters live on loopback, where network
//! namespaces would take the controllers off `--dev-local`), and the rule behind all of
//! them: a job never runs twice and no GPU is used by two jobs at any moment.
//!
//! Every job here records each run (`job attempt pid node`) in one log; a watcher polls
//! which of those processes live, every 50 ms, for the whole test.

use gsched_tests::{Cluster, pid_alive, wait_for};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const RUN: &str = "#!/bin/bash\necho \"$SLURM_JOB_ID $GSCHED_RESTART_COUNT $$ $SLURMD_NODENAME\" >> \"$RUNS\"\nexec sleep ${HOLD:-600}\n";

/// The processes the jobs of a test started, and what was seen of them.
struct Watcher {
    log: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

/// (job, attempt, pid, node) of every run so far.
fn runs(log: &PathBuf) -> Vec<(u64, u32, i32, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.to_string(),
            ))
        })
        .collect()
}

impl Watcher {
    fn start(c: &Cluster) -> Watcher {
        let log = c.path("runs.log");
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut violations = Vec::new();
            while !s.load(Ordering::SeqCst) {
                let live: Vec<_> = runs(&l)
                    .into_iter()
                    .filter(|(_, _, pid, _)| pid_alive(*pid))
                    .collect();
                let mut per_job: BTreeMap<u64, usize> = BTreeMap::new();
                let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
                for (job, _, _, node) in &live {
                    *per_job.entry(*job).or_default() += 1;
                    *per_node.entry(node.clone()).or_default() += 1;
                }
                if per_job.values().any(|n| *n > 1) {
                    violations.push(format!("a job runs twice: {live:?}"));
                }
                if per_node.values().any(|n| *n > 1) {
                    violations.push(format!("two jobs hold one node's 8 GPUs: {live:?}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            violations
        });
        Watcher {
            log,
            stop,
            thread: Some(thread),
        }
    }

    fn export(&self) -> String {
        format!("ALL,RUNS={}", self.log.display())
    }

    /// Stops watching and fails the test on any moment a job ran twice or two jobs shared
    /// a node's GPUs.
    fn check(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let v = self.thread.take().unwrap().join().unwrap();
        assert!(v.is_empty(), "{}", v[..v.len().min(5)].join("\n"));
    }
}

fn live_runs(log: &PathBuf, job: u64) -> Vec<(u32, i32, String)> {
    runs(log)
        .into_iter()
        .filter(|(j, _, pid, _)| *j == job && pid_alive(*pid))
        .map(|(_, a, p, n)| (a, p, n))
        .collect()
}

fn node_field(c: &Cluster, name: &str, field: &str) -> serde_json::Value {
    c.node(name).map(|n| n[field].clone()).unwrap_or_default()
}

#[test]
fn t10_an_agent_back_before_the_timeout_keeps_its_job_and_its_gpus() {
    let mut c = Cluster::controllers(1, &["--node-timeout", "2", "--dead-node-timeout", "10"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let w = Watcher::start(&c);
    let script = c.script("run.sh", RUN);
    let a = c.submit(&[
        "--gpus-per-node",
        "8",
        "--requeue",
        "--export",
        &w.export(),
        &script,
    ]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    wait_for("job a to start", Duration::from_secs(20), || {
        (live_runs(&w.log, a).len() == 1).then_some(())
    });
    c.kill_agent(0);
    wait_for("n1 to be not responding", Duration::from_secs(20), || {
        (node_field(&c, "n1", "responding") == false).then_some(())
    });
    // A node that does not answer takes no new job; its job keeps running.
    let b = c.submit(&["--gpus-per-node", "8", "--export", &w.export(), &script]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.job(a).unwrap()["state"], "RUNNING");
    assert_eq!(c.job(b).unwrap()["state"], "PENDING");
    c.start_agent(0);
    wait_for("n1 to answer again", Duration::from_secs(20), || {
        (node_field(&c, "n1", "responding") == true).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let job = c.job(a).unwrap();
    assert_eq!(
        (job["state"].as_str(), job["restarts"].as_u64()),
        (Some("RUNNING"), Some(0))
    );
    assert_eq!(
        live_runs(&w.log, a).len(),
        1,
        "the first run goes on, re-adopted"
    );
    assert_eq!(
        c.job(b).unwrap()["state"],
        "PENDING",
        "its GPUs are still taken"
    );
    c.ok("gcancel", &[&a.to_string()]);
    c.wait_state(b, &["RUNNING"], Duration::from_secs(30));
    c.ok("gcancel", &[&b.to_string()]);
    c.wait_state(b, &["CANCELLED"], Duration::from_secs(30));
    w.check();
}

#[test]
fn t20_an_agent_back_after_the_timeout_finds_its_job_stopped_and_requeued_once() {
    // The sequence that once ran a job twice on the same GPUs: the agent dies while its
    // job runs, the controller gives up on the node, the agent comes back.
    let mut c = Cluster::controllers(1, &["--node-timeout", "2", "--dead-node-timeout", "6"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let w = Watcher::start(&c);
    let script = c.script("run.sh", RUN);
    let a = c.submit(&[
        "--gpus-per-node",
        "8",
        "--requeue",
        "--export",
        &w.export(),
        &script,
    ]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    let (_, first_pid, _) = wait_for("job a to start", Duration::from_secs(20), || {
        live_runs(&w.log, a).into_iter().next()
    });
    c.kill_agent(0);
    let b = c.submit(&["--gpus-per-node", "8", "--export", &w.export(), &script]);
    // The supervisor stops the run when the node's lease lapses, before the controller
    // declares the node lost and requeues the job.
    let job = wait_for("job a to be requeued", Duration::from_secs(30), || {
        c.job(a).filter(|j| j["restarts"] == 1)
    });
    assert!(
        !pid_alive(first_pid),
        "the first run was stopped before the requeue"
    );
    assert_eq!(
        job["state"], "PENDING",
        "n1 is lost and there is no other node"
    );
    let acct = c.json("gacct", &["-j", &a.to_string()]);
    let attempt = &acct["jobs"][0]["attempts"][0];
    assert_eq!(attempt["state"], "NODE_FAIL");
    assert_eq!(node_field(&c, "n1", "online"), false);
    assert_eq!(c.job(b).unwrap()["state"], "PENDING");
    // b was eligible before a's requeue and would go first (Slurm's order too).
    c.ok("gcancel", &[&b.to_string()]);
    c.start_agent(0);
    // Back: a runs again on n1, its only node, once; n1 takes it only after the agent
    // reported the first run stopped.
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    wait_for("job a's second run", Duration::from_secs(20), || {
        live_runs(&w.log, a)
            .iter()
            .any(|(attempt, _, _)| *attempt == 1)
            .then_some(())
    });
    let agent_log = std::fs::read_to_string(c.path("agent-n1.log")).unwrap_or_default();
    assert!(
        agent_log.contains("past this node's lease"),
        "the agent reported the lapsed lease: {agent_log}"
    );
    c.ok("gcancel", &[&a.to_string()]);
    c.wait_state(a, &["CANCELLED"], Duration::from_secs(30));
    w.check();
}

#[test]
fn t30_a_cut_that_heals_before_the_timeout_costs_nothing() {
    let mut c = Cluster::controllers(1, &["--node-timeout", "2", "--dead-node-timeout", "15"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let w = Watcher::start(&c);
    let script = c.script("run.sh", RUN);
    let export = format!("{},HOLD=12", w.export());
    let a = c.submit(&["--gpus-per-node", "8", "--export", &export, &script]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    c.cut_agent("n1", true);
    wait_for("n1 to be not responding", Duration::from_secs(20), || {
        (node_field(&c, "n1", "responding") == false).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        live_runs(&w.log, a).len(),
        1,
        "the job runs on through the cut"
    );
    c.cut_agent("n1", false);
    let job = c.wait_state(
        a,
        &["COMPLETED", "FAILED", "NODE_FAIL"],
        Duration::from_secs(60),
    );
    assert_eq!(
        (job["state"].as_str(), job["restarts"].as_u64()),
        (Some("COMPLETED"), Some(0))
    );
    w.check();
}

#[test]
fn t40_a_cut_that_outlasts_the_timeout_moves_the_job_and_never_runs_it_twice() {
    let mut c = Cluster::controllers(1, &["--node-timeout", "2", "--dead-node-timeout", "6"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    let w = Watcher::start(&c);
    let script = c.script("run.sh", RUN);
    let a = c.submit(&[
        "--gpus-per-node",
        "8",
        "--requeue",
        "--export",
        &w.export(),
        &script,
    ]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    let (_, pid, node) = wait_for("job a to start", Duration::from_secs(20), || {
        live_runs(&w.log, a).into_iter().next()
    });
    let other = if node == "n1" { "n2" } else { "n1" };
    c.cut_agent(&node, true);
    // Stopped on the cut node by its lease, then requeued onto the other node.
    wait_for(
        "job a to run on the other node",
        Duration::from_secs(40),
        || {
            live_runs(&w.log, a)
                .iter()
                .any(|(attempt, _, n)| *attempt == 1 && n == other)
                .then_some(())
        },
    );
    assert!(!pid_alive(pid));
    assert_eq!(node_field(&c, &node, "online"), false);
    // Healing brings the node back with nothing of the job left on it.
    c.cut_agent(&node, false);
    wait_for("the cut node to come back", Duration::from_secs(30), || {
        (node_field(&c, &node, "online") == true && node_field(&c, &node, "responding") == true)
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let live = live_runs(&w.log, a);
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].2, other);
    c.ok("gcancel", &[&a.to_string()]);
    c.wait_state(a, &["CANCELLED"], Duration::from_secs(30));
    w.check();
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `48m`) on `dir`, or `None` when this process
    /// cannot mount (not root); under `GSCHED_REQUIRE_ROOT` that fails the test.
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        let ok = nix::unistd::geteuid().is_root()
            && std::process::Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={size},mode=0700"),
                    "tmpfs",
                ])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("GSCHED_REQUIRE_ROOT").is_none(),
                "cannot mount a tmpfs on {} (root is required)",
                dir.display()
            );
            eprintln!("skipping: mounting a tmpfs needs root");
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }

    /// Fills the file system up; returns the filler file.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("create the filler");
        let block = vec![0u8; 1 << 16];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn t50_a_controller_whose_disk_fills_up_steps_aside_and_comes_back_with_nothing_lost() {
    let mut c = Cluster::controllers(3, &[]);
    c.leader(Duration::from_secs(30));
    // Controller 3's data directory moves onto a small tmpfs.
    c.kill_controller(2);
    let dir = c.path("ctl3");
    let saved = c.path("ctl3.saved");
    std::fs::rename(&dir, &saved).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let Some(fs) = Tmpfs::mount(&dir, "64m") else {
        return;
    };
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(saved.join("."))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copied.success());
    c.start_controller(2);
    let script = c.script("held.sh", "#!/bin/sh\ntrue\n");
    let mut acked = Vec::new();
    for _ in 0..5 {
        acked.push(c.submit(&["--hold", &script]));
    }
    c.check_replicas_agree(3);
    let filler = fs.fill();
    // Writes go on through the other two; controller 3 cannot persist them (each script
    // is different and large, so the log grows past what its store had allocated).
    for i in 0..40 {
        let big = c.script(
            &format!("big{i}.sh"),
            &format!("#!/bin/sh\n# {}\ntrue\n", format!("{i:08}").repeat(25_000)),
        );
        acked.push(c.submit(&["--hold", &big]));
    }
    let row = wait_for(
        "controller 3 to report its full disk",
        Duration::from_secs(30),
        || {
            c.status()
                .into_iter()
                .find(|r| r["id"] == 3 && r["storage_fault"].is_string())
        },
    );
    let fault = row["storage_fault"].as_str().unwrap();
    assert!(fault.contains("space") || fault.contains("I/O"), "{fault}");
    assert!(
        c.ctl_procs[2].as_mut().unwrap().alive(),
        "controller 3 stays up"
    );
    // Asked directly, it says why it cannot take the write.
    let direct = c
        .command("gsub", &["--hold", &script], c.dir.path())
        .env("GSCHED_CONTROLLERS", &c.controllers[2].1)
        .env("GSCHED_RETRY_S", "0")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(c.path("ctl3.log")).unwrap_or_default();
    assert!(log.contains("cannot write its data directory"), "{log}");
    let err = String::from_utf8_lossy(&direct.stderr);
    assert!(
        !direct.status.success() && err.contains("cannot write its data directory"),
        "{err}"
    );
    for _ in 0..5 {
        acked.push(c.submit(&["--hold", &script]));
    }
    // Space returns: it reopens its store, catches up, and agrees with the others.
    std::fs::remove_file(filler).unwrap();
    wait_for("controller 3 to recover", Duration::from_secs(60), || {
        c.status()
            .into_iter()
            .find(|r| r["id"] == 3 && r["storage_fault"].is_null() && r["role"] != "candidate")
    });
    c.check_replicas_agree(3);
    // Every acknowledged job is there, read from controller 3 itself.
    let q = c
        .command("gqueue", &["--json"], c.dir.path())
        .env("GSCHED_CONTROLLERS", &c.controllers[2].1)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&q.stdout).expect("gqueue --json");
    let ids: Vec<u64> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["job_id"].as_u64())
        .collect();
    for id in &acked {
        assert!(
            ids.contains(id),
            "acknowledged job {id} missing on controller 3"
        );
    }
    c.kill_controller(2);
}

#[test]
fn t60_a_full_output_directory_fails_the_job_with_that_reason_and_the_agent_carries_on() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let out = c.path("outfs");
    std::fs::create_dir(&out).unwrap();
    let Some(_fs) = Tmpfs::mount(&out, "1m") else {
        return;
    };
    let chatty = c.script(
        "chatty.sh",
        "#!/bin/sh\nhead -c 4000000 /dev/zero | tr '\\0' x\necho done\nsleep 60\n",
    );
    let target = format!("{}/chatty.out", out.display());
    let id = c.submit(&["-o", &target, &chatty]);
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(40));
    assert_eq!(job["state"], "FAILED", "{job}");
    let detail = c.json("gctl", &["show", "job", &id.to_string()]);
    let text = detail.to_string();
    assert!(
        text.contains("OutputWriteFailed") && text.contains("No space left on device"),
        "{text}"
    );
    // The agent goes on: the next job runs.
    let ok = c.script("ok.sh", "#!/bin/sh\necho fine\n");
    let next = c.submit(&[&ok]);
    let job = c.wait_state(next, &["COMPLETED", "FAILED"], Duration::from_secs(30));
    assert_eq!(job["state"], "COMPLETED", "{job}");
}

#[test]
fn t70_a_full_agent_state_directory_fails_launches_with_that_reason_until_space_returns() {
    let mut c = Cluster::controllers(1, &[]);
    let state = c.path("agent-n1");
    std::fs::create_dir(&state).unwrap();
    let Some(fs) = Tmpfs::mount(&state, "4m") else {
        return;
    };
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("n1");
    let filler = fs.fill();
    let ok = c.script("ok.sh", "#!/bin/sh\necho fine\n");
    let id = c.submit(&[&ok]);
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(30));
    assert_eq!(job["state"], "FAILED", "{job}");
    let text = c
        .json("gctl", &["show", "job", &id.to_string()])
        .to_string();
    assert!(
        text.contains("LaunchFailed")
            && text.contains("state directory")
            && text.contains("No space left"),
        "{text}"
    );
    assert!(
        c.agents[0].as_mut().unwrap().alive(),
        "the agent keeps running"
    );
    std::fs::remove_file(filler).unwrap();
    let next = c.submit(&[&ok]);
    let job = c.wait_state(next, &["COMPLETED", "FAILED"], Duration::from_secs(30));
    assert_eq!(job["state"], "COMPLETED", "{job}");
    c.kill_agent(0);
}

#[test]
fn t80_a_leader_frozen_with_its_connections_open_loses_its_agents_to_the_new_leader() {
    // SIGSTOP keeps the leader's TCP connections open (the kernel still answers for it)
    // while it says nothing: what a hung VM or a one-way partition looks like to an agent.
    // The agent must notice the silence and find the new leader; before, it waited on the
    // frozen one for as long as the freeze lasted.
    let mut c = Cluster::controllers(3, &["--node-timeout", "30", "--dead-node-timeout", "120"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let leader = c.leader(Duration::from_secs(30));
    let script = c.script("quick.sh", "#!/bin/sh\ntrue\n");
    let first = c.submit(&[&script]);
    c.wait_state(first, &["COMPLETED"], Duration::from_secs(30));
    let frozen = c.ctl_procs[(leader - 1) as usize]
        .as_ref()
        .expect("the leader runs")
        .pid() as i32;
    let pid = nix::unistd::Pid::from_raw(frozen);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let after = c.submit(&[&script]);
    let done = std::time::Instant::now();
    let mut row = serde_json::Value::Null;
    while done.elapsed() < Duration::from_secs(60) {
        row = c.job(after).unwrap_or_default();
        if row["state"] == "COMPLETED" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "a job submitted after the leader froze completed in {:.1} s",
        done.elapsed().as_secs_f64()
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(row["state"], "COMPLETED", "{row}\n{}", c.logs());
    assert_ne!(c.leader(Duration::from_secs(30)), 0);
}
