//! Launching and stopping jobs through real processes: real torchrun (gloo) across two
//! agents, a killed rank stopping the whole gang with the reason recorded, NCCL watchdog
//! lines stopping the gang at once, time limits, re-adoption after an agent restart,
//! running as the job's owner, requeue after a node is lost, and hangs without words
//! (a failed rank, silent idle peers) told from a job loading data or merely quiet.

use gsched_tests::{Cluster, pid_alive, torch_available, wait_for, workspace};
use std::time::Duration;

fn two_nodes(extra_ctl: &[&str]) -> Cluster {
    let mut c = Cluster::controllers(1, extra_ctl);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    c
}

fn allreduce() -> String {
    workspace()
        .join("examples/allreduce.py")
        .to_string_lossy()
        .into_owned()
}

const OLD_TORCHRUN: &str = "--redirects 1 --tee 1 --monitor_interval 0.1";

#[test]
fn t10_gsub_torchrun_runs_a_real_two_node_allreduce() {
    if !torch_available() {
        return;
    }
    let c = two_nodes(&[]);
    let id = c.submit(&[
        "-N",
        "2",
        "--ntasks-per-node",
        "2",
        "--export",
        "ALL,PATH=/usr/bin:/bin",
        "--torchrun-args",
        OLD_TORCHRUN,
        "--torchrun",
        &allreduce(),
    ]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(120));
    let out = std::fs::read_to_string(c.path(&format!("gsched-{id}.out"))).unwrap_or_default();
    assert_eq!(job["state"], "COMPLETED", "{out}\n{}", c.logs());
    let ok_lines = out
        .lines()
        .filter(|l| l.contains("allreduce=6 expected=6 OK"))
        .count();
    assert_eq!(
        ok_lines, 4,
        "four ranks on two nodes must each see the right sum:\n{out}"
    );
    assert!(out.contains("node=n1") && out.contains("node=n2"));
}

#[test]
fn t20_an_unmodified_multinode_torchrun_script_runs() {
    if !torch_available() {
        return;
    }
    let c = two_nodes(&[]);
    let script = c.script(
        "train.sh",
        &format!(
            "#!/bin/bash\n#GSUB -N 2\n#GSUB --ntasks-per-node=1\nexport PATH=/usr/bin:$PATH\nexec torchrun --nnodes $GSCHED_NNODES --nproc_per_node 2 --node_rank $GSCHED_NODEID --master_addr $MASTER_ADDR --master_port $MASTER_PORT {OLD_TORCHRUN} {}\n",
            allreduce()
        ),
    );
    let id = c.submit(&[&script]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(120));
    let out = std::fs::read_to_string(c.path(&format!("gsched-{id}.out"))).unwrap_or_default();
    assert_eq!(job["state"], "COMPLETED", "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains("expected=6 OK")).count(),
        4,
        "{out}"
    );
}

#[test]
fn t30_a_killed_rank_stops_the_gang_and_the_reason_is_recorded() {
    if !torch_available() {
        return;
    }
    let c = two_nodes(&[]);
    let id = c.submit(&[
        "-N",
        "2",
        "--ntasks-per-node",
        "2",
        "--export",
        "ALL,PATH=/usr/bin:/bin,FAIL_RANK=3,FAIL_MODE=kill",
        "--torchrun-args",
        OLD_TORCHRUN,
        "--torchrun",
        &allreduce(),
    ]);
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(120));
    assert_eq!(job["state"], "FAILED");
    let failure = &job["failure"];
    let kind = failure["kind"].as_str().unwrap_or("");
    assert_eq!(
        kind, "signal",
        "SIGKILL outranks the peers' exit codes: {failure}"
    );
    // Both nodes append to the same output file; the blame still goes to the node whose
    // rank was killed (rank 3 = node rank 1), read from that node's private copy.
    assert_eq!(
        failure["node"], job["allocation"]["nodes"][1]["node"],
        "failure {failure}"
    );
    assert!(
        !failure["evidence"].as_str().unwrap_or("").is_empty(),
        "the evidence line is kept"
    );
    // Every rank of every node is gone: no python process of this job remains.
    let out = std::fs::read_to_string(c.path(&format!("gsched-{id}.out"))).unwrap_or_default();
    assert!(out.contains("injecting failure 'kill'"), "{out}");
    let steps = c.json("gctl", &["show", "job", &id.to_string()]);
    for s in steps["steps"].as_array().unwrap() {
        assert_eq!(s["state"]["state"], "exited", "{s}");
    }
    let acct = c.ok("gacct", &["-j", &id.to_string()]);
    assert!(acct.contains("FAILED"), "{acct}");
}

#[test]
fn t40_an_nccl_watchdog_line_stops_the_gang_at_once() {
    let c = two_nodes(&[]);
    let script = c.script(
        "hang.sh",
        "#!/bin/bash\nif [ \"$SLURM_NODEID\" = 1 ]; then\n  echo '[rank1]:[E1129 21:35:42.450680241 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=15000) ran for 15002 milliseconds before timing out.'\nfi\necho $$ > \"$PIDDIR/pid.$SLURM_NODEID\"\nexec sleep 600\n",
    );
    let pids = c.path("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let id = c.submit(&[
        "-N",
        "2",
        "--gpus-per-node",
        "1",
        "--export",
        &format!("ALL,PIDDIR={}", pids.display()),
        &script,
    ]);
    let job = c.wait_state(id, &["FAILED"], Duration::from_secs(60));
    assert_eq!(job["failure"]["kind"], "nccl_timeout", "{}", job["failure"]);
    assert_eq!(job["failure"]["node"], "n2");
    assert!(
        job["failure"]["evidence"]
            .as_str()
            .unwrap()
            .contains("Watchdog caught collective operation timeout")
    );
    for n in 0..2 {
        let pid: i32 = std::fs::read_to_string(pids.join(format!("pid.{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_for("the rank to be stopped", Duration::from_secs(10), || {
            (!pid_alive(pid)).then_some(())
        });
    }
    let q = c.ok("gqueue", &["-t", "all"]);
    assert!(q.contains("NcclTimeout"), "{q}");
}

#[test]
fn t45_a_peers_connection_closed_waits_for_the_killed_ranks_own_report() {
    // As seen on 2x H200 over sockets: the surviving rank's NCCL "Connection closed by
    // remote peer" reaches the controller before the killed rank's own report. The
    // blame must still go to the node whose rank was killed.
    let c = two_nodes(&[]);
    let script = c.script(
        "peer.sh",
        "#!/bin/bash\nif [ \"$SLURM_NODEID\" = 0 ]; then\n  echo '[2026-11-29 23:37:19] vm:2710:2863 [0] misc/socket.cc:72 NCCL WARN socketProgress: Connection closed by remote peer'\n  exec sleep 600\nfi\nsleep 0.4\nkill -9 $$\n",
    );
    let id = c.submit(&["-N", "2", &script]);
    let job = c.wait_state(id, &["FAILED"], Duration::from_secs(60));
    let failure = &job["failure"];
    assert_eq!(failure["kind"], "signal", "{failure}");
    assert_eq!(failure["signal"], 9, "{failure}");
    assert_eq!(
        failure["node"], job["allocation"]["nodes"][1]["node"],
        "{failure}"
    );
    let steps = c.json("gctl", &["show", "job", &id.to_string()]);
    let n0 = &steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == job["allocation"]["nodes"][0]["node"])
        .unwrap()["failure"];
    assert_eq!(
        n0["kind"], "nccl_error",
        "the symptom stays on record for its node: {steps}"
    );
}

#[test]
fn t50_time_limit_ends_the_job_as_timeout() {
    let c = two_nodes(&[]);
    let script = c.script("long.sh", "#!/bin/bash\nexec sleep 600\n");
    let id = c.submit(&["--time", "0:02", &script]);
    let job = c.wait_state(id, &["TIMEOUT"], Duration::from_secs(60));
    assert_eq!(job["failure"]["kind"], "timeout");
}

#[test]
fn t60_agent_restart_readopts_running_steps_and_reports_their_exit() {
    let mut c = two_nodes(&[]);
    let flag = c.path("go");
    let script = c.script(
        "wait.sh",
        &format!(
            "#!/bin/bash\nwhile [ ! -e {} ]; do sleep 0.2; done\nexit 0\n",
            flag.display()
        ),
    );
    let id = c.submit(&["-w", "n1", &script]);
    c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    c.kill_agent(0);
    c.start_agent(0);
    c.wait_node_online("n1");
    std::fs::write(&flag, b"").unwrap();
    let job = c.wait_state(
        id,
        &["COMPLETED", "FAILED", "NODE_FAIL"],
        Duration::from_secs(60),
    );
    assert_eq!(
        job["state"],
        "COMPLETED",
        "the re-adopted step's exit must be reported: {}\n{}",
        job,
        c.logs()
    );
}

#[test]
fn t70_jobs_run_as_their_owner() {
    if !nix_is_root() {
        eprintln!("skipping: running jobs as another user needs root");
        return;
    }
    let c = two_nodes(&[]);
    let dir = c.path("shared");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = c.script(
        "who.sh",
        "#!/bin/bash\nid -u > whoami.txt\necho HOME=$HOME USER=$USER\n",
    );
    let out = dir.join("out.txt");
    let id = c.submit(&[
        "--uid",
        "nobody",
        "-D",
        &dir.to_string_lossy(),
        "-o",
        &out.to_string_lossy(),
        &script,
    ]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(30));
    assert_eq!(job["state"], "COMPLETED", "{job}");
    let uid = std::fs::read_to_string(dir.join("whoami.txt")).unwrap();
    assert_eq!(uid.trim(), "65534");
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        65534,
        "output files are owned by the job's user"
    );
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .contains("USER=nobody")
    );
}

fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn t80_a_lost_node_fails_the_job_fast_and_requeue_moves_it() {
    let mut c = Cluster::controllers(1, &["--node-timeout", "2", "--dead-node-timeout", "4"]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    c.add_agent("n3", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/bash\nexec sleep 600\n");
    let id = c.submit(&[
        "-N",
        "2",
        "--gpus-per-node",
        "8",
        "--requeue",
        "-w",
        "n1",
        &script,
    ]);
    c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    c.kill_agent(0);
    // Within the dead-node timeout (4 s) plus a tick the job leaves n1 and is requeued (its
    // processes on n1 were stopped by their supervisor when n1's lease lapsed).
    let job = wait_for("the job to be requeued", Duration::from_secs(30), || {
        c.job(id).filter(|j| j["restarts"] == 1)
    });
    let acct = c.json("gacct", &["-j", &id.to_string()]);
    let attempt = &acct["jobs"][0]["attempts"][0];
    assert_eq!(attempt["state"], "NODE_FAIL");
    assert_eq!(attempt["failure"]["kind"], "node_lost");
    assert_eq!(attempt["failure"]["node"], "n1");
    assert!(job["state"] == "PENDING" || job["state"] == "RUNNING");
    let ginfo = c.node("n1").unwrap();
    assert_eq!(ginfo["online"], false);
}

/// A node whose GPUs all read idle (`--fake-gpu-util`), sampled every second, with the
/// hang watch at `after`/`after_exit` seconds.
fn idle_node(after: &str, after_exit: &str) -> Cluster {
    idle_nodes(&["n1"], after, after_exit)
}

/// `idle_node`'s nodes, one agent each.
fn idle_nodes(names: &[&str], after: &str, after_exit: &str) -> Cluster {
    let mut c = Cluster::controllers(1, &[]);
    let util = c.path("util.json");
    let cells: Vec<String> = (0..8).map(|g| format!("\"{g}\": 0")).collect();
    std::fs::write(&util, format!("{{{}}}", cells.join(", "))).unwrap();
    for name in names {
        c.add_agent(
            name,
            "rtx4090-8gpu.json",
            &[
                "--gpu-sample-interval",
                "1",
                "--fake-gpu-util",
                &util.to_string_lossy(),
                "--hang-after",
                after,
                "--hang-after-exit",
                after_exit,
            ],
        );
    }
    c
}

/// Two ranks on one node, two GPUs: `rank0` and `rank1` are their bash bodies.
fn two_ranks(c: &Cluster, name: &str, rank0: &str, rank1: &str) -> u64 {
    let script = c.script(
        name,
        &format!("#!/bin/bash\nif [ \"$SLURM_PROCID\" = 0 ]; then\n{rank0}\nelse\n{rank1}\nfi\n"),
    );
    c.submit(&["--ntasks-per-node", "2", "--gpus-per-node", "2", &script])
}

const TRACEBACK: &str = "cat <<'EOF'\nTraceback (most recent call last):\n  File \"/w/train.py\", line 40, in <module>\n    main()\n  File \"/w/train.py\", line 12, in step\n    raise RuntimeError(\"boom\")\nRuntimeError: boom\nEOF";

fn silent_for_s(evidence: &str) -> u64 {
    evidence
        .split("stayed silent for ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no silence in {evidence}"))
}

#[test]
fn t90_a_rank_that_exits_after_an_error_leaves_its_silent_idle_peer_stopped_as_hung() {
    // The long window is two minutes: ending within one proves the shorter one (3 s after
    // a rank exited) applied.
    let c = idle_node("120", "3");
    let pids = c.path("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let id = two_ranks(
        &c,
        "exit.sh",
        &format!("echo $$ > {}/pid.0\nexec sleep 600", pids.display()),
        "echo 'RuntimeError: boom' >&2\nexit 1",
    );
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(60));
    let failure = &job["failure"];
    assert_eq!(failure["kind"], "hang", "{failure}\n{}", c.logs());
    let evidence = failure["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("first error: RuntimeError: boom; rank 1 exited with code 1;"),
        "{evidence}"
    );
    assert!(silent_for_s(evidence) >= 3, "{evidence}");
    let q = c.ok("gqueue", &["-t", "all"]);
    assert!(q.contains("Hang"), "{q}");
    let pid: i32 = std::fs::read_to_string(pids.join("pid.0"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(
        "the silent rank to be stopped",
        Duration::from_secs(15),
        || (!pid_alive(pid)).then_some(()),
    );
}

#[test]
fn t91_a_traceback_then_silence_with_idle_gpus_is_a_hang_after_the_window() {
    let c = idle_node("4", "2");
    let id = two_ranks(
        &c,
        "traceback.sh",
        &format!("{TRACEBACK}\nexec sleep 600"),
        "exec sleep 600",
    );
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(60));
    let failure = &job["failure"];
    assert_eq!(failure["kind"], "hang", "{failure}\n{}", c.logs());
    let evidence = failure["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("first error: RuntimeError: boom (at /w/train.py:12 in step);"),
        "the exception with its deepest frame: {evidence}"
    );
    assert!(
        evidence.contains("the ranks still running here (0, 1)"),
        "{evidence}"
    );
    assert!(
        silent_for_s(evidence) >= 4,
        "not before the window: {evidence}"
    );
}

#[test]
fn t92_a_job_loading_data_or_compiling_is_not_stopped() {
    let c = idle_node("3", "2");
    // An error line printed, then the CPU busy (a cache rebuilt, a compile): kept.
    let busy = two_ranks(
        &c,
        "busy.sh",
        "echo 'ERROR: shard cache missing, rebuilding it'\nend=$((SECONDS+60)); while [ $SECONDS -lt $end ]; do :; done",
        "exec sleep 600",
    );
    // Nothing printed at all, GPUs idle, both ranks quiet (loading): kept.
    let quiet = two_ranks(&c, "quiet.sh", "exec sleep 600", "exec sleep 600");
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));
    c.wait_state(quiet, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(10));
    for id in [busy, quiet] {
        let job = c.job(id).unwrap();
        assert_eq!(job["state"], "RUNNING", "{job}\n{}", c.logs());
    }
    c.ok("gcancel", &[&busy.to_string(), &quiet.to_string()]);
}

#[test]
fn t93_a_single_rank_job_that_erred_and_is_quiet_is_not_stopped() {
    let c = idle_node("3", "2");
    let script = c.script(
        "one.sh",
        &format!("#!/bin/bash\n{TRACEBACK}\nexec sleep 600\n"),
    );
    let id = c.submit(&["--gpus-per-node", "1", &script]);
    c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(8));
    let job = c.job(id).unwrap();
    assert_eq!(job["state"], "RUNNING", "{job}\n{}", c.logs());
    c.ok("gcancel", &[&id.to_string()]);
}

#[test]
fn t94_a_rank_that_errs_and_hangs_on_one_node_stops_the_gang_on_every_node() {
    // One rank per node: the second node's rank prints a traceback and waits; the first
    // node's rank, which printed nothing, waits for it. The second node sees the hang and
    // its report stops the gang.
    let c = idle_nodes(&["n1", "n2"], "4", "2");
    let pids = c.path("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let script = c.script(
        "two-nodes.sh",
        &format!(
            "#!/bin/bash\necho $$ > {}/pid.$SLURM_NODEID\nif [ \"$SLURM_NODEID\" = 1 ]; then\n{TRACEBACK}\nfi\nexec sleep 600\n",
            pids.display()
        ),
    );
    let id = c.submit(&["-N", "2", "--gpus-per-node", "1", &script]);
    let job = c.wait_state(id, &["FAILED", "COMPLETED"], Duration::from_secs(60));
    let failure = &job["failure"];
    assert_eq!(failure["kind"], "hang", "{failure}\n{}", c.logs());
    assert_eq!(
        failure["node"], job["allocation"]["nodes"][1]["node"],
        "{failure}"
    );
    assert!(
        failure["evidence"]
            .as_str()
            .unwrap()
            .starts_with("first error: RuntimeError: boom (at /w/train.py:12 in step);"),
        "{failure}"
    );
    for n in 0..2 {
        let pid: i32 = std::fs::read_to_string(pids.join(format!("pid.{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_for("every rank to be stopped", Duration::from_secs(15), || {
            (!pid_alive(pid)).then_some(())
        });
    }
}
