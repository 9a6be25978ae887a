//! Slurm users' scripts and habits through Slurm's command names: `gctl slurm-names`
//! links, `sbatch`/`squeue`/`scontrol` under those names (inside jobs too, through
//! `gagentd --slurm-names`), `scontrol show hostnames`, `--signal` before the time limit
//! with a script that checkpoints and requeues itself, `sbatch --wait`.

use gsched_tests::{Cluster, success_stdout, wait_for};
use std::time::Duration;

/// A cluster of two fake 8-GPU nodes whose jobs find the Slurm names on their PATH.
fn slurm_cluster() -> (Cluster, String) {
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    let made: Vec<String> = std::fs::read_dir(&links)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in [
        "sbatch", "srun", "salloc", "squeue", "sinfo", "scancel", "sacct", "scontrol",
    ] {
        assert!(made.iter().any(|m| m == name), "{made:?}");
    }
    // Again: the links are replaced, not refused.
    assert_eq!(c.slurm_links(), links);
    for n in ["n1", "n2"] {
        c.add_agent(n, "rtx4090-8gpu.json", &["--slurm-names", &links]);
    }
    (c, links)
}

/// Runs `name` (a Slurm name) from the links directory against the cluster, with the
/// links first on PATH (as the README tells admins to set up).
fn slurm(c: &Cluster, links: &str, name: &str, args: &[&str]) -> std::process::Output {
    c.slurm_name(links, name, args)
}

fn stdout(o: &std::process::Output) -> String {
    success_stdout(o, "the Slurm name")
}

#[test]
fn t10_a_slurm_script_runs_through_slurm_names() {
    let (c, links) = slurm_cluster();
    // Slurm's way: the script runs once, on the first node; srun runs the per-node part.
    c.script(
        "seen.sh",
        "#!/bin/bash\n\
         state=$(scontrol show job $SLURM_JOB_ID | grep -o 'JobState=[A-Z]*')\n\
         q=$(squeue -h -j $SLURM_JOB_ID -o '%i:%T')\n\
         echo \"head=$1 count=$2 $state $q\" > seen-$SLURMD_NODENAME.txt\n",
    );
    let script = c.script(
        "slurmish.sh",
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:2\n\
         echo once >> ran-on-$SLURMD_NODENAME.txt\n\
         nodes=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )\n\
         srun bash ./seen.sh ${nodes[0]} ${#nodes[@]}\n",
    );
    let out = stdout(&slurm(&c, &links, "sbatch", &[&script]));
    let id: u64 = out
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("sbatch printed {out:?}"))
        .parse()
        .unwrap();
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(60));
    assert_eq!(job["state"], "COMPLETED", "{job}");
    assert_eq!(
        std::fs::read_to_string(c.path("ran-on-n1.txt")).unwrap(),
        "once\n",
        "the batch script runs once, on the first node"
    );
    assert!(!c.path("ran-on-n2.txt").exists());
    for n in ["n1", "n2"] {
        let seen = std::fs::read_to_string(c.path(&format!("seen-{n}.txt"))).unwrap();
        assert_eq!(
            seen,
            format!("head=n1 count=2 JobState=RUNNING {id}:RUNNING\n"),
            "{n}"
        );
    }
    // squeue and sacct under their names; scontrol answers locally and refuses clearly.
    let acct = stdout(&slurm(
        &c,
        &links,
        "sacct",
        &["-j", &id.to_string(), "--json"],
    ));
    assert!(acct.contains("\"COMPLETED\""), "{acct}");
    let q = stdout(&slurm(&c, &links, "squeue", &[]));
    assert!(q.contains("JOBID"), "{q}");
    assert_eq!(
        stdout(&slurm(
            &c,
            &links,
            "scontrol",
            &["show", "hostnames", "gpu[01-03]"]
        )),
        "gpu01\ngpu02\ngpu03\n"
    );
    let bad = slurm(
        &c,
        &links,
        "scontrol",
        &["update", "JobId=1", "Partition=big"],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not supported"));
    // Draining through scontrol update.
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["update", "NodeName=n2", "State=DRAIN", "Reason=fan"],
    ));
    assert_eq!(c.node("n2").unwrap()["drain_reason"], "fan");
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["update", "NodeName=n2", "State=RESUME"],
    ));
    assert!(c.node("n2").unwrap()["drain_reason"].is_null());
}

#[test]
fn t20_signal_before_the_time_limit_lets_a_script_checkpoint_and_requeue_itself() {
    let (c, links) = slurm_cluster();
    // The common checkpoint pattern: trap the warning, save, `scontrol requeue` yourself;
    // the next attempt resumes from the checkpoint.
    let script = c.script(
        "ckpt.sh",
        "#!/bin/bash\n#SBATCH --time=0:40\n#SBATCH --signal=B:USR1@35\n#SBATCH --gres=gpu:1\n\
         if [ -f ckpt ]; then echo \"resumed $(cat ckpt) restart=$SLURM_RESTART_COUNT\" > done.txt; exit 0; fi\n\
         trap 'echo step41 > ckpt; scontrol requeue $SLURM_JOB_ID; exit 0' USR1\n\
         date +%s > started\n\
         sleep 100 &\nwait\n",
    );
    let out = stdout(&slurm(&c, &links, "sbatch", &["--parsable", &script]));
    let id: u64 = out.trim().parse().unwrap();
    let job = c.wait_state(
        id,
        &["COMPLETED", "FAILED", "TIMEOUT"],
        Duration::from_secs(90),
    );
    assert_eq!(job["state"], "COMPLETED", "{job}");
    let done = std::fs::read_to_string(c.path("done.txt")).unwrap();
    assert_eq!(done, "resumed step41 restart=1\n");
    // The warning came about 5 s into the 40 s limit, not at the limit.
    let ckpt = std::fs::metadata(c.path("ckpt"))
        .unwrap()
        .modified()
        .unwrap();
    let started: u64 = std::fs::read_to_string(c.path("started"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let at = ckpt
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .saturating_sub(started);
    assert!((3..=15).contains(&at), "warned {at} s after the start");
    // A malformed --signal is refused before anything is submitted.
    let bad = c.cli("gsub", &["--signal=USR9@5", "--wrap", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown signal"));
}

#[test]
fn t30_sbatch_wait_exits_with_the_jobs_exit_code() {
    let (c, links) = slurm_cluster();
    let out = slurm(&c, &links, "sbatch", &["--wait", "--wrap", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = slurm(&c, &links, "sbatch", &["-W", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Still answering after the waits: both ended, none left in the queue.
    wait_for("an empty queue", Duration::from_secs(10), || {
        let q = c.json("gqueue", &[]);
        q["jobs"].as_array().unwrap().is_empty().then_some(())
    });
}

#[test]
fn t40_scancel_signal_reaches_the_job_without_cancelling_it() {
    let (c, links) = slurm_cluster();
    let script = c.script(
        "trap.sh",
        "#!/bin/bash\n#SBATCH --gres=gpu:1\n\
         trap 'echo got-usr1 >> signals.txt' USR1\n\
         trap 'echo got-term >> signals.txt; exit 0' TERM\n\
         while true; do sleep 0.2; done\n",
    );
    let id = stdout(&slurm(&c, &links, "sbatch", &["--parsable", &script]))
        .trim()
        .to_string();
    let job_id: u64 = id.parse().unwrap();
    c.wait_state(job_id, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    // scancel -s is silent on success, as scancel is.
    let out = stdout(&slurm(
        &c,
        &links,
        "scancel",
        &["--signal=USR1", "--batch", &id],
    ));
    assert!(out.is_empty(), "{out}");
    let seen = wait_for("the trap to run", Duration::from_secs(10), || {
        std::fs::read_to_string(c.path("signals.txt"))
            .ok()
            .filter(|s| s.contains("got-usr1"))
    });
    assert_eq!(seen, "got-usr1\n");
    assert_eq!(
        c.job(job_id).unwrap()["state"],
        "RUNNING",
        "a signal is not a cancel"
    );
    // A signal that does not exist, and a job that is not running, are refused.
    let bad = slurm(&c, &links, "scancel", &["-s", "USR9", &id]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown signal"));
    let held = c.submit(&["--hold", "--wrap", "true"]);
    let bad = slurm(&c, &links, "scancel", &["-s", "USR1", &held.to_string()]);
    assert!(!bad.status.success());
    // Named, it is reported as Slurm's scancel reports it (there: "Job can not be
    // altered now"; here in scontrol's words, "pending execution").
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains(&format!(
            "job {held}: pending execution; only running jobs can be signalled"
        )),
        "{bad:?}"
    );
    // Then a real cancel: the script's TERM trap runs and the job ends CANCELLED.
    stdout(&slurm(&c, &links, "scancel", &[&id]));
    c.wait_state(job_id, &["CANCELLED"], Duration::from_secs(30));
    let seen = std::fs::read_to_string(c.path("signals.txt")).unwrap();
    assert_eq!(seen, "got-usr1\ngot-term\n");
}

#[test]
fn t50_begin_waits_and_only_operators_may_raise_priority() {
    let (c, links) = slurm_cluster();
    let id: u64 = stdout(&slurm(
        &c,
        &links,
        "sbatch",
        &[
            "--parsable",
            "--begin=now+4",
            "--gres=gpu:1",
            "--wrap",
            "true",
        ],
    ))
    .trim()
    .parse()
    .unwrap();
    let q = stdout(&slurm(
        &c,
        &links,
        "squeue",
        &["-h", "-j", &id.to_string(), "-o", "%T %r"],
    ));
    assert_eq!(q, "PENDING BeginTime\n");
    let job = c.wait_state(id, &["COMPLETED"], Duration::from_secs(30));
    let waited = job["start_ms"].as_u64().unwrap() - job["submit_ms"].as_u64().unwrap();
    assert!(waited >= 3_000, "started {waited} ms after submission");
    // A user may lower their own priority, not raise it above others.
    if let Some((alice, _)) = gsched_tests::test_users() {
        let out = c.cli_as(&alice, "gsub", &["--nice=-100", "--wrap", "true"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("only an operator"));
        let out = c.cli_as(&alice, "gsub", &["--nice=100", "--hold", "--wrap", "true"]);
        assert!(out.status.success(), "{out:?}");
    }
}

#[test]
fn t60_srun_inside_a_job_fans_out_and_brings_the_output_back() {
    let (c, links) = slurm_cluster();
    // A Slurm script: it runs once, on the first node, and srun fans out; the job ends
    // when the script does (the other node only holds the allocation).
    let script = c.script(
        "steps.sh",
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:1\n\
         nodes=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )\n\
         second=$(srun --nodes=1 --ntasks=1 -w \"${nodes[1]}\" printenv SLURMD_NODENAME)\n\
         echo \"second=$second\" > steps.txt\n\
         srun -l printenv SLURMD_NODENAME | sort >> steps.txt\n\
         srun --ntasks-per-node=2 -l bash -c 'echo $SLURM_PROCID/$SLURM_LOCALID/$SLURM_NODEID/$SLURM_STEP_ID' | sort >> steps.txt\n\
         export FROM_SCRIPT=yes\n\
         srun -n 1 bash -c 'echo exported=$FROM_SCRIPT; echo to-stderr >&2' 2>/dev/null >> steps.txt\n\
         srun -n 2 bash -c 'exit $((SLURM_PROCID * 3))'; echo \"status=$?\" >> steps.txt\n",
    );
    let id: u64 = stdout(&slurm(&c, &links, "sbatch", &["--parsable", &script]))
        .trim()
        .parse()
        .unwrap();
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(90));
    let steps = std::fs::read_to_string(c.path("steps.txt")).unwrap_or_default();
    assert_eq!(job["state"], "COMPLETED", "{job}\n{steps}");
    assert_eq!(
        steps,
        "second=n2\n0: n1\n1: n2\n0: 0/0/0/2\n1: 1/1/0/2\n2: 2/0/1/2\n3: 3/1/1/2\nexported=yes\nstatus=3\n"
    );
    // A batch script that fails fails the job, and the node that only held the
    // allocation is let go.
    let failing = c.script(
        "fails.sh",
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:1\nexit 4\n",
    );
    let bad: u64 = stdout(&slurm(&c, &links, "sbatch", &["--parsable", &failing]))
        .trim()
        .parse()
        .unwrap();
    let job = c.wait_state(bad, &["FAILED", "COMPLETED"], Duration::from_secs(60));
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("FAILED"), Some(4)),
        "{job}"
    );
    // A step in a job that has ended is refused with the reason.
    let out = c.cli("grun", &["--jobid", &id.to_string(), "hostname"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("steps run only in a running job"));
}

#[test]
fn t70_srun_outside_a_job_and_salloc_get_their_own_allocation() {
    let (c, links) = slurm_cluster();
    // srun outside a job: an allocation for the one step, given back at the end.
    let out = slurm(
        &c,
        &links,
        "srun",
        &[
            "-N",
            "2",
            "--gpus-per-node",
            "1",
            "-l",
            "printenv",
            "SLURMD_NODENAME",
        ],
    );
    let text = stdout(&out);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["0: n1", "1: n2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has been allocated resources"), "{err}");
    // salloc: a command (here instead of a shell) with the allocation's variables; its
    // steps run on the allocated nodes; its status is salloc's; then the nodes are free.
    let out = slurm(
        &c,
        &links,
        "salloc",
        &[
            "-N",
            "2",
            "--gres=gpu:1",
            "bash",
            "-c",
            "echo nodes=$SLURM_JOB_NODELIST; srun -l hostname >/dev/null; srun -N1 printenv SLURMD_NODENAME; exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "nodes=n[1-2]\nn1\n", "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Relinquishing job allocation"));
    gsched_tests::wait_for(
        "the allocations to be given back",
        Duration::from_secs(20),
        || {
            let q = c.json("gqueue", &[]);
            q["jobs"].as_array().unwrap().is_empty().then_some(())
        },
    );
    let acct = c.json("gacct", &[]);
    let states: Vec<&str> = acct["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    // Given back as Slurm gives back salloc's and srun's own allocations: COMPLETED.
    assert_eq!(states, vec!["COMPLETED", "COMPLETED"], "{acct}");
}

#[test]
fn t80_scontrol_update_time_limit_lower_for_owners_higher_for_operators() {
    let (c, links) = slurm_cluster();
    let limit = |id: u64| c.job(id).unwrap()["time_limit_s"].as_u64();
    // Root is an operator: any change of a pending job.
    let id = c.submit(&["--hold", "--time=1:00:00", "--wrap", "true"]);
    let out = stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["update", &format!("JobId={id}"), "TimeLimit=2:00:00"],
    ));
    assert!(out.contains("time limit set to 2:00:00"), "{out}");
    assert_eq!(limit(id), Some(7200));
    // A running job: lower only.
    let script = c.script("long.sh", "#!/bin/sh\nexec sleep 600\n");
    let run = c.submit(&["--time=1:00:00", "--gpus-per-node", "1", &script]);
    c.wait_state(run, &["RUNNING"], Duration::from_secs(30));
    let up = slurm(
        &c,
        &links,
        "scontrol",
        &["update", &format!("JobId={run}"), "TimeLimit=3:00:00"],
    );
    assert!(!up.status.success());
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("can only be lowered"),
        "{up:?}"
    );
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["update", &format!("JobId={run}"), "TimeLimit=10:00"],
    ));
    assert_eq!(limit(run), Some(600));
    // An ordinary user may lower their own pending job's limit, not raise it, and not
    // touch someone else's.
    if let Some((alice, _)) = gsched_tests::test_users() {
        let out = c.cli_as(
            &alice,
            "gsub",
            &["--parsable", "--hold", "--time=1:00:00", "--wrap", "true"],
        );
        assert!(out.status.success(), "{out:?}");
        let mine: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let lower = c.cli_as(
            &alice,
            "gctl",
            &["update", &mine.to_string(), "--time", "30"],
        );
        assert!(lower.status.success(), "{lower:?}");
        assert_eq!(limit(mine), Some(1800));
        let raise = c.cli_as(
            &alice,
            "gctl",
            &["update", &mine.to_string(), "--time", "2:00:00"],
        );
        assert!(!raise.status.success());
        assert!(String::from_utf8_lossy(&raise.stderr).contains("only an operator"));
        let theirs = c.cli_as(&alice, "gctl", &["update", &id.to_string(), "--time", "10"]);
        assert!(!theirs.status.success());
        assert_eq!(limit(id), Some(7200));
        // Nor run a step in someone else's running job.
        let step = c.cli_as(&alice, "grun", &["--jobid", &run.to_string(), "id"]);
        assert!(!step.status.success());
        assert!(
            String::from_utf8_lossy(&step.stderr).contains("only in your own jobs"),
            "{step:?}"
        );
    }
}

#[test]
fn t90_sbatch_test_only_says_when_and_where_and_submits_nothing() {
    let (c, links) = slurm_cluster();
    let args = ["--test-only", "-N", "2", "--gres=gpu:8", "--wrap", "true"];
    let out = slurm(&c, &links, "sbatch", &args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("to start at") && err.contains("using 16 GPUs on nodes n[1-2]"),
        "{err}"
    );
    // The cluster busy until a running job's limit: the start is that estimate, later.
    let script = c.script("busy.sh", "#!/bin/sh\nexec sleep 600\n");
    let busy = c.submit(&["-N", "2", "--gpus-per-node", "8", "--time=10:00", &script]);
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));
    let out = slurm(&c, &links, "sbatch", &args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("to start at") && !err.contains("on nodes"),
        "{err}"
    );
    // Nothing was submitted either time.
    let q = c.json("gqueue", &["-t", "all"]);
    assert_eq!(q["jobs"].as_array().unwrap().len(), 1, "{q}");
}

#[test]
fn comment_and_wckey_are_kept_and_shown() {
    let (c, links) = slurm_cluster();
    let id: u64 = stdout(&slurm(
        &c,
        &links,
        "sbatch",
        &[
            "--parsable",
            "--hold",
            "--comment=sweep 7 of 12",
            "--wckey=projA",
            "--wrap",
            "true",
        ],
    ))
    .trim()
    .parse()
    .unwrap();
    let job = c.job(id).unwrap();
    assert_eq!(
        (job["comment"].as_str(), job["wckey"].as_str()),
        (Some("sweep 7 of 12"), Some("projA")),
        "{job}"
    );
    let show = stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["show", "job", &id.to_string()],
    ));
    assert!(show.contains("Comment=sweep 7 of 12"), "{show}");
    let acct = c.ok(
        "gacct",
        &["-j", &id.to_string(), "--format=JobID,Comment%20,WCKey"],
    );
    assert!(
        acct.contains("sweep 7 of 12") && acct.contains("projA"),
        "{acct}"
    );
}

#[test]
fn immediate_gives_up_when_the_allocation_cannot_start() {
    let (c, links) = slurm_cluster();
    let script = c.script("busy.sh", "#!/bin/sh\nexec sleep 600\n");
    let busy = c.submit(&["-N", "2", "--exclusive", &script]);
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));
    // -I alone: refused once the first pass finds no room, as salloc words it.
    let started = std::time::Instant::now();
    let out = slurm(&c, &links, "salloc", &["-I", "-N", "1", "true"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("Immediate execution impossible"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // --immediate=N: waits that long first.
    let started = std::time::Instant::now();
    let out = slurm(&c, &links, "srun", &["--immediate=2", "-N", "1", "true"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("Requested nodes are busy"), "{err}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    // Nothing is left queued by either.
    wait_for(
        "the refused allocations to go",
        Duration::from_secs(20),
        || {
            let q = c.json("gqueue", &[]);
            (q["jobs"].as_array().unwrap().len() == 1).then_some(())
        },
    );
    c.ok("gcancel", &[&busy.to_string()]);
    c.wait_state(busy, &["CANCELLED"], Duration::from_secs(30));
    // --no-shell: the allocation is made and left for later steps.
    let out = slurm(&c, &links, "salloc", &["--no-shell", "-N", "1"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let q = c.json("gqueue", &[]);
    let left: Vec<&str> = q["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["RUNNING"], "{q}");
}

#[test]
fn t100_srun_options_act_inside_a_job() {
    let (c, links) = slurm_cluster();
    std::fs::write(c.path("in.txt"), "from a file\n").unwrap();
    std::fs::create_dir_all(c.path("sub")).unwrap();
    let script = c.script(
        "opts.sh",
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks=2\n\
         srun -n 1 --input=in.txt cat > input.txt\n\
         srun -n 1 --input=none cat > none.txt; echo \"none=$?\" >> none.txt\n\
         start=$(date +%s)\n\
         srun -n 2 --wait=2 bash -c '[ $SLURM_PROCID = 0 ] && exit 0; sleep 60'; wait_status=$?\n\
         echo \"wait=$wait_status took=$(( $(date +%s) - start ))\" > wait.txt\n\
         start=$(date +%s)\n\
         srun -n 1 --time=0:03 sleep 60 2> time.err; time_status=$?\n\
         echo \"time=$time_status took=$(( $(date +%s) - start ))\" > time.txt\n\
         srun -n 1 -D sub -J named pwd > chdir.txt\n\
         srun -n 2 -c 2 --cpu-bind=cores bash -c 'echo $SLURM_CPUS_PER_TASK $SLURM_CPU_BIND_TYPE' | sort > bind.txt\n",
    );
    let id: u64 = stdout(&slurm(&c, &links, "sbatch", &["--parsable", &script]))
        .trim()
        .parse()
        .unwrap();
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(120));
    let read = |f: &str| std::fs::read_to_string(c.path(f)).unwrap_or_default();
    assert_eq!(job["state"], "COMPLETED", "{job}");
    assert_eq!(
        read("input.txt"),
        "from a file\n",
        "--input=FILE is task 0's stdin"
    );
    assert_eq!(
        read("none.txt"),
        "none=0\n",
        "--input=none: end of file at once"
    );
    let wait = read("wait.txt");
    let took = |text: &str| -> u64 {
        text.split("took=")
            .nth(1)
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(999)
    };
    assert!(wait.starts_with("wait=1 ") && took(&wait) < 30, "{wait}");
    let time = read("time.txt");
    assert!(time.starts_with("time=1 ") && took(&time) < 30, "{time}");
    assert!(
        read("time.err").contains("CANCELLED DUE TO TIME LIMIT"),
        "{}",
        read("time.err")
    );
    assert_eq!(read("chdir.txt").trim(), c.path("sub").to_string_lossy());
    assert_eq!(
        read("bind.txt"),
        "2 cores\n2 cores\n",
        "the step's own CPUs and binding"
    );
    // The step's name is its -J.
    let acct = c.ok("gacct", &["-j", &id.to_string(), "--format=JobID,JobName"]);
    assert!(acct.contains("named"), "{acct}");
}
