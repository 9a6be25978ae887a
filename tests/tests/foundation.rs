//! The foundation, through real processes: multi-node jobs with the right environment,
//! GPU sharing without overlap, cancellation on every node, controller restart that keeps
//! everything, and bad input refused without creating a job.

use gsched_tests::{Cluster, env_file, pid_alive, wait_for};
use std::time::Duration;

const ENV_DUMP: &str = r#"#!/bin/bash
#GSUB --time=10
env | sort > "$OUTDIR/env.$SLURM_JOB_ID.$SLURM_NODEID.$SLURM_PROCID"
sleep "${HOLD:-0}"
"#;

fn cluster_with_two_nodes() -> Cluster {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    c
}

#[test]
fn t10_two_node_job_gets_ranks_rendezvous_and_gpus() {
    let c = cluster_with_two_nodes();
    let out = c.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let script = c.script("envdump.sh", ENV_DUMP);
    let outdir = format!("OUTDIR={}", out.display());
    let id = c.submit(&[
        "-N",
        "2",
        "--gpus-per-node",
        "8",
        "--export",
        &format!("ALL,{outdir}"),
        &script,
    ]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(60));
    assert_eq!(job["state"], "COMPLETED", "{}", c.logs());
    let e0 = env_file(&out.join(format!("env.{id}.0.0")));
    let e1 = env_file(&out.join(format!("env.{id}.1.1")));
    assert_eq!(e0["SLURM_JOB_ID"], id.to_string());
    assert_eq!(
        (e0["SLURM_NODEID"].as_str(), e1["SLURM_NODEID"].as_str()),
        ("0", "1")
    );
    assert_eq!(
        (e0["GSCHED_NODEID"].as_str(), e1["GSCHED_NODEID"].as_str()),
        ("0", "1")
    );
    assert_ne!(e0["SLURMD_NODENAME"], e1["SLURMD_NODENAME"]);
    assert_eq!(e0["MASTER_ADDR"], e1["MASTER_ADDR"]);
    assert_eq!(e0["MASTER_PORT"], e1["MASTER_PORT"]);
    assert_eq!(e0["GSCHED_NNODES"], "2");
    assert_eq!(e0["SLURM_JOB_NODELIST"], "n[1-2]");
    assert_eq!(e0["CUDA_VISIBLE_DEVICES"], "0,1,2,3,4,5,6,7");
    assert_eq!(e0["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(e0["SLURM_GPUS_ON_NODE"], "8");
    assert_eq!(e0["SLURM_NTASKS"], "2");
    assert_eq!(e0["SLURM_SUBMIT_DIR"], c.dir.path().to_string_lossy());
    assert_eq!(e1["GSCHED_GPUS_PER_NODE"], "8");
    // Output went to gsched-<id>.out in the submit directory.
    assert!(c.path(&format!("gsched-{id}.out")).exists());
}

#[test]
fn t20_jobs_sharing_a_node_get_disjoint_gpus_and_ports() {
    let c = cluster_with_two_nodes();
    let out = c.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let script = c.script("envdump.sh", ENV_DUMP);
    let outdir = format!("ALL,OUTDIR={},HOLD=30", out.display());
    let a = c.submit(&[
        "--gpus-per-node",
        "4",
        "-w",
        "n1",
        "--export",
        &outdir,
        &script,
    ]);
    let b = c.submit(&[
        "--gpus-per-node",
        "4",
        "-w",
        "n1",
        "--export",
        &outdir,
        &script,
    ]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    c.wait_state(b, &["RUNNING"], Duration::from_secs(30));
    let ja = c.job(a).unwrap();
    let jb = c.job(b).unwrap();
    let ga: Vec<u64> = ja["allocation"]["nodes"][0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let gb: Vec<u64> = jb["allocation"]["nodes"][0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(
        ga.iter().all(|g| !gb.contains(g)),
        "{ga:?} and {gb:?} overlap"
    );
    assert_ne!(
        ja["allocation"]["master_port"],
        jb["allocation"]["master_port"]
    );
    // What the processes saw matches the allocation.
    let files = wait_for("both env dumps", Duration::from_secs(20), || {
        let mut fs: Vec<_> = std::fs::read_dir(&out)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .collect();
        // Both written to the end (a dump is there before its job has finished it).
        let whole = |f: &std::path::PathBuf| env_file(f).contains_key("CUDA_VISIBLE_DEVICES");
        (fs.len() == 2 && fs.iter().all(whole)).then(|| {
            fs.sort();
            fs
        })
    });
    let cvd: Vec<String> = files
        .iter()
        .map(|f| env_file(f)["CUDA_VISIBLE_DEVICES"].clone())
        .collect();
    assert_ne!(cvd[0], cvd[1]);
    // Socket 0's GPUs for one job and socket 1's for the other (a 4-GPU block each).
    let blocks: Vec<bool> = [&ga, &gb]
        .iter()
        .map(|g| g.iter().all(|x| *x < 4) || g.iter().all(|x| *x >= 4))
        .collect();
    assert_eq!(blocks, vec![true, true], "{ga:?} {gb:?}");
    c.ok("gcancel", &[&a.to_string(), &b.to_string()]);
}

#[test]
fn t30_cancel_stops_the_job_on_every_node() {
    let c = cluster_with_two_nodes();
    let script = c.script(
        "sleeper.sh",
        "#!/bin/bash\necho $$ > \"$PIDDIR/pid.$SLURM_NODEID\"\nsleep 600\n",
    );
    let pids = c.path("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let id = c.submit(&[
        "-N",
        "2",
        "--gpus-per-node",
        "2",
        "--export",
        &format!("ALL,PIDDIR={}", pids.display()),
        &script,
    ]);
    c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    let read = |n: u32| {
        wait_for("pid files", Duration::from_secs(20), || {
            std::fs::read_to_string(pids.join(format!("pid.{n}")))
                .ok()?
                .trim()
                .parse::<i32>()
                .ok()
        })
    };
    let (p0, p1) = (read(0), read(1));
    assert!(pid_alive(p0) && pid_alive(p1));
    c.ok("gcancel", &[&id.to_string()]);
    let job = c.wait_state(id, &["CANCELLED"], Duration::from_secs(30));
    assert_eq!(job["reason"], "Cancelled");
    wait_for("both ranks to be gone", Duration::from_secs(15), || {
        (!pid_alive(p0) && !pid_alive(p1)).then_some(())
    });
}

#[test]
fn t40_controller_restart_keeps_jobs_nodes_and_ids() {
    let mut c = cluster_with_two_nodes();
    let script = c.script("quick.sh", "#!/bin/bash\ntrue\n");
    let done = c.submit(&[&script]);
    c.wait_state(done, &["COMPLETED"], Duration::from_secs(30));
    let held = c.submit(&["--hold", "-J", "keepme", &script]);
    let before = c.job(held).unwrap();
    c.restart_controller(0);
    c.wait_node_online("n1");
    c.wait_node_online("n2");
    let after = c.job(held).expect("held job survives the restart");
    assert_eq!(after["name"], before["name"]);
    assert_eq!(after["state"], "PENDING");
    assert_eq!(c.job(done).unwrap()["state"], "COMPLETED");
    let next = c.submit(&[&script]);
    assert!(
        next > held,
        "job ids keep increasing across restarts ({next} after {held})"
    );
    c.wait_state(next, &["COMPLETED"], Duration::from_secs(30));
}

#[test]
fn t50_bad_input_is_refused_and_creates_no_job() {
    let c = cluster_with_two_nodes();
    let good = c.script("good.sh", "#!/bin/bash\ntrue\n");
    let bad_time = c.script("badtime.sh", "#!/bin/bash\n#SBATCH --time=1:2:3:4\ntrue\n");
    let bad_flag = c.script("badflag.sh", "#!/bin/bash\n#SBATCH --frobnicate=1\ntrue\n");
    let bad_utf8 = c.path("binary.sh");
    std::fs::write(&bad_utf8, b"#!/bin/bash\n\xff\xfe echo\n").unwrap();
    let bad_utf8 = bad_utf8.to_string_lossy().into_owned();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--frobnicate", &good], "frobnicate"),
        (vec!["-N", "-2", &good], "negative"),
        (vec!["--gpus-per-node", "many", &good], "--gpus-per-node"),
        (vec!["--gpus-per-node", "16", &good], "can never run"),
        (vec![&bad_time], "time"),
        // sbatch's words for an option in a directive it cannot read (getopt_long's).
        (
            vec!["-N", "1", &bad_flag],
            "unrecognized option '--frobnicate=1'",
        ),
        (vec![&bad_utf8], "UTF-8"),
        (vec!["-p", "nosuchpartition", &good], "partition"),
    ];
    for (args, needle) in cases {
        let out = c.cli("gsub", &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        if needle.starts_with("unrecognized") {
            assert_eq!(out.status.code(), Some(255), "sbatch's status: {args:?}");
        }
        assert!(
            err.contains(needle),
            "{args:?}: message {err:?} does not mention {needle}"
        );
    }
    let jobs = c.json("gqueue", &["-t", "all"]);
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        0,
        "no job may have been created"
    );
}

fn gpus(job: &serde_json::Value) -> Vec<u64> {
    let mut g: Vec<u64> = job["allocation"]["nodes"][0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    g.sort_unstable();
    g
}

#[test]
fn t60_a_two_gpu_job_waits_for_a_pair_on_one_socket_unless_it_says_switches_at_zero() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("n1");
    // Three GPUs of each socket taken for up to an hour: the two left free are joined
    // only across sockets until then.
    let three = [
        "-w",
        "n1",
        "--gpus-per-node",
        "3",
        "-t",
        "60",
        "--wrap",
        "sleep 300",
    ];
    let a = c.submit(&three);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    let b = c.submit(&three);
    let jb = c.wait_state(b, &["RUNNING"], Duration::from_secs(30));
    let ja = c.job(a).unwrap();
    let busy: Vec<u64> = gpus(&ja).into_iter().chain(gpus(&jb)).collect();
    let free: Vec<u64> = (0..8).filter(|g| !busy.contains(g)).collect();
    assert!(
        free.len() == 2 && free[0] < 4 && free[1] >= 4,
        "one free GPU per socket: {free:?}"
    );

    let waits = c.submit(&["--gpus-per-node", "2", "--wrap", "sleep 1"]);
    wait_for(
        "the 2-GPU job to wait for its topology",
        Duration::from_secs(20),
        || (c.job(waits)?["reason"] == "TopologyWait").then_some(()),
    );
    let queue = c.ok("gqueue", &["-j", &waits.to_string()]);
    assert!(queue.contains("(TopologyWait)"), "{queue}");
    let start = c.ok(
        "gqueue",
        &["--start", "-h", "-o", "%S", "-j", &waits.to_string()],
    );
    assert!(
        start.trim() != "N/A" && !start.trim().is_empty(),
        "an expected start is shown: {start}"
    );

    let now = c.submit(&[
        "--gpus-per-node",
        "2",
        "--switches=1@0",
        "-t",
        "10",
        "--wrap",
        "sleep 30",
    ]);
    let started = c.wait_state(now, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(gpus(&started), free, "--switches=1@0 takes what is free");
    let shown = c.ok("gctl", &["show", "job", &now.to_string()]);
    assert!(
        shown.contains("\n   Switches=1@00:00:00\n"),
        "as scontrol shows it: {shown}"
    );
    assert_eq!(c.job(waits).unwrap()["state"], "PENDING");
    c.ok(
        "gcancel",
        &[
            &a.to_string(),
            &b.to_string(),
            &waits.to_string(),
            &now.to_string(),
        ],
    );
}
