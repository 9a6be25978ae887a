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
