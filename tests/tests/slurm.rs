//! Slurm users' scripts and habits through Slurm's command names: `gctl slurm-names`
//! links, `sbatch`/`squeue`/`scontrol` under those names (inside jobs too, through
//! `gagentd --slurm-names`), `scontrol show hostnames`, `--signal` before the time limit
//! with a script that checkpoints and requeues itself, `sbatch --wait`.

use gsched_tests::{Cluster, success_stdout, wait_for};
use std::time::Duration;

/// A cluster of two fake 8-GPU nodes whose jobs find the Slurm names on their PATH.
fn slurm_cluster() -> (Cluster, String) {
    slurm_cluster_with(&[])
}

/// [`slurm_cluster`] with the controllers' extra arguments.
fn slurm_cluster_with(extra: &[&str]) -> (Cluster, String) {
    let mut c = Cluster::controllers(1, extra);
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
        &["-j", &id.to_string(), "-X", "-n", "-P", "-o", "State"],
    ));
    assert_eq!(acct, "COMPLETED\n");
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
        (Some("sweep 7 of 12"), Some("proja")),
        "the wckey is stored lower case, as slurmctld stores it: {job}"
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
        acct.contains("sweep 7 of 12") && acct.contains("proja"),
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
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=2\n\
         srun -n 1 --input=in.txt cat > input.txt\n\
         srun -n 1 --input=none cat > none.txt; echo \"none=$?\" >> none.txt\n\
         start=$(date +%s)\n\
         srun -n 2 --wait=2 bash -c '[ $SLURM_PROCID = 0 ] && exit 0; sleep 60'; wait_status=$?\n\
         echo \"wait=$wait_status took=$(( $(date +%s) - start ))\" > wait.txt\n\
         start=$(date +%s)\n\
         srun -n 1 --time=0:03 sleep 60 2> time.err; time_status=$?\n\
         echo \"time=$time_status took=$(( $(date +%s) - start ))\" > time.txt\n\
         srun -n 1 -D sub -J named pwd > chdir.txt\n\
         srun -n 2 -c 2 --cpu-bind=cores bash -c 'echo $SLURM_CPUS_PER_TASK $SLURM_CPU_BIND_TYPE' | sort > bind.txt\n\
         srun -n 3 -c 2 true 2> cpus.txt; echo \"status=$?\" >> cpus.txt\n",
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
    assert_eq!(
        read("cpus.txt"),
        format!(
            "srun: error: Unable to create step for job {id}: More processors requested than permitted\nstatus=1\n"
        ),
        "a step may not ask for more CPUs than its job holds (6 of 4), in Slurm's words"
    );
    // The step's name is its -J.
    let acct = c.ok("gacct", &["-j", &id.to_string(), "--format=JobID,JobName"]);
    assert!(acct.contains("named"), "{acct}");
}

/// Partitions `gpu` (the default, both nodes) and `debug` (n1, an hour at most), QOS
/// `normal` and `high`, accounts `lab` and `vision`.
const QUERY_CONFIG: &str = "\
[[scheduler.partitions]]
name = \"gpu\"
default = true
nodes = \"n[1-2]\"

[[scheduler.partitions]]
name = \"debug\"
nodes = \"n1\"
max_time_s = 3600

[[scheduler.qos]]
name = \"normal\"

[[scheduler.qos]]
name = \"high\"
priority = 100

[[scheduler.accounts]]
name = \"lab\"

[[scheduler.accounts]]
name = \"vision\"
parent = \"lab\"
";

/// [`slurm_cluster`] with [`QUERY_CONFIG`], both nodes online.
fn query_cluster() -> (Cluster, String) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(&conf, QUERY_CONFIG).unwrap();
    let (c, links) = slurm_cluster_with(&["--config", &conf.to_string_lossy()]);
    // The controller has read its configuration once it answers.
    c.wait_node_online("n1");
    c.wait_node_online("n2");
    drop(dir);
    (c, links)
}

/// `sbatch --parsable ARGS` through Slurm's name; the job id.
fn sbatch(c: &Cluster, links: &str, args: &[&str]) -> u64 {
    let mut a = vec!["--parsable"];
    a.extend_from_slice(args);
    let out = stdout(&slurm(c, links, "sbatch", &a));
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch printed {out:?}"))
}

/// Runs `name ARGS` through Slurm's name for `secs` seconds, then stops it; its output.
fn for_a_while(c: &Cluster, links: &str, name: &str, args: &[&str], secs: f64) -> String {
    let path = format!("{links}:{}", std::env::var("PATH").unwrap_or_default());
    let mut child = std::process::Command::new(format!("{links}/{name}"))
        .args(args)
        .env("PATH", path)
        .current_dir(c.path(""))
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs_f64(secs));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A line Slurm's tools print above a listing: `Sun Dec 06 05:31:49 2026`.
fn is_slurm_date(line: &str) -> bool {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match line.split(' ').collect::<Vec<_>>().as_slice() {
        [day, month, date, time, year] => {
            DAYS.contains(day)
                && MONTHS.contains(month)
                && digits(date, 2)
                && time.split(':').all(|p| digits(p, 2))
                && digits(year, 4)
        }
        _ => false,
    }
}

fn refused(o: &std::process::Output, option: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{option} was accepted");
    assert!(
        err.contains(&format!("--{option} is not supported")),
        "{option}: {err}"
    );
}

/// squeue's options as Slurm 22.05 answers them (the slurmdiff peer: `squeue -j 1000`,
/// `-j=1000`, `-A`, `-q`, `-p a,b`, `-n`, `-w`, `-t`, `-S -i`, `-l`, `--start`, `-R`,
/// `-r`, `-s`, `-i 1`): the same jobs, in the same order and columns.
#[test]
fn t95_squeue_options_as_slurm() {
    let (c, links) = query_cluster();
    let sq = |args: &[&str]| stdout(&slurm(&c, &links, "squeue", args));
    let ids = |args: &[&str]| {
        let mut a = vec!["-h", "-o", "%i"];
        a.extend_from_slice(args);
        sq(&a)
    };
    let big = sbatch(
        &c,
        &links,
        &[
            "-J",
            "alpha",
            "-A",
            "vision",
            "--qos",
            "high",
            "-N",
            "2",
            "--gres=gpu:8",
            "--wrap",
            "sleep 600",
        ],
    );
    c.wait_state(big, &["RUNNING"], Duration::from_secs(30));
    let small = sbatch(
        &c,
        &links,
        &[
            "-J",
            "beta",
            "-A",
            "lab",
            "-p",
            "debug",
            "--gres=gpu:1",
            "-t",
            "10",
            "--wrap",
            "sleep 600",
        ],
    );
    let arr = sbatch(
        &c,
        &links,
        &[
            "-J",
            "gamma",
            "--array=1-3",
            "--gres=gpu:1",
            "--wrap",
            "sleep 600",
        ],
    );
    let tasks = format!("{arr}_1\n{arr}_2\n{arr}_3\n");
    // -j: the list as the last word, or after '='.
    assert_eq!(ids(&["-j", &big.to_string()]), format!("{big}\n"));
    assert_eq!(ids(&[&format!("-j={small}")]), format!("{small}\n"));
    assert_eq!(
        ids(&[&format!("--jobs={small},{big}"), "-S", "i"]),
        format!("{big}\n{small}\n")
    );
    assert!(
        !slurm(&c, &links, "squeue", &["-h", &big.to_string()])
            .status
            .success()
    );
    // -r: a line per array task.
    assert_eq!(ids(&["-r", "-j", &arr.to_string()]), tasks);
    // Filters: accounts, QOS, partitions, names, nodes, states, users.
    assert_eq!(ids(&["-A", "vision"]), format!("{big}\n"));
    assert_eq!(ids(&["-q", "high"]), format!("{big}\n"));
    assert_eq!(ids(&["-p", "debug,nope"]), format!("{small}\n"));
    assert_eq!(
        ids(&["-n", "beta,gamma", "-S", "i"]),
        format!("{small}\n{tasks}")
    );
    assert_eq!(ids(&["-w", "n2"]), format!("{big}\n"));
    assert_eq!(ids(&["--nodelist=n[1-2]"]), format!("{big}\n"));
    assert_eq!(ids(&["-t", "R"]), format!("{big}\n"));
    assert_eq!(ids(&["-u", "nobody"]), "");
    // -S: by id, descending (array tasks by task).
    assert_eq!(
        ids(&["-S", "-i"]),
        format!("{arr}_3\n{arr}_2\n{arr}_1\n{small}\n{big}\n")
    );
    assert!(!slurm(&c, &links, "squeue", &["-S", "p"]).status.success());
    // -l: the time, then STATE and TIME_LIMIT.
    let long = sq(&["-l", "-j", &small.to_string()]);
    let lines: Vec<&str> = long.lines().collect();
    assert!(is_slurm_date(lines[0]), "{long}");
    assert_eq!(
        lines[1],
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"
    );
    assert!(
        lines[2].starts_with(&format!("{small:>18}     debug     beta ")),
        "{long}"
    );
    assert!(
        lines[2].contains(" PENDING       0:00     10:00      1 ("),
        "{long}"
    );
    assert_eq!(lines.len(), 3, "{long}");
    assert!(!sq(&["-l", "-h"]).lines().any(is_slurm_date));
    // --start: pending jobs only, in Slurm's columns.
    let start = sq(&["--start"]);
    assert_eq!(
        start.lines().next().unwrap(),
        "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)"
    );
    assert!(
        !start
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&big.to_string())),
        "{start}"
    );
    assert_eq!(start.lines().count(), 5, "{start}");
    // -R: a reservation's jobs.
    let me = gsched_cli::client::current_user();
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &[
            "create",
            "reservation",
            "ReservationName=later",
            "StartTime=now+3600",
            "Duration=60",
            &format!("Users={me}"),
            "Nodes=n2",
            "Flags=IGNORE_JOBS",
        ],
    ));
    let waits = sbatch(
        &c,
        &links,
        &[
            "--reservation=later",
            "--gres=gpu:1",
            "-t",
            "10",
            "--wrap",
            "sleep 600",
        ],
    );
    assert_eq!(ids(&["-R", "later"]), format!("{waits}\n"));
    assert_eq!(ids(&["-R", "nosuch"]), "");
    // -s: steps (none run here), and only the steps named.
    let steps = sq(&["-s"]);
    assert!(
        steps.starts_with("STEPID") || steps.trim_start().starts_with("STEPID"),
        "{steps}"
    );
    assert_eq!(steps.lines().count(), 1, "{steps}");
    assert_eq!(sq(&["-h", "-s", &format!("{big}.0")]), "");
    // -i: listed again every second, each time after the time.
    let again = for_a_while(&c, &links, "squeue", &["-i", "1", "-t", "R"], 2.5);
    let dates = again.lines().filter(|l| is_slurm_date(l)).count();
    let headers = again.lines().filter(|l| l.contains("JOBID")).count();
    assert!(dates >= 2 && headers == dates, "{again}");
    assert!(
        again.contains("\n\n"),
        "a blank line between listings: {again}"
    );
    // Options that change nothing here are taken; --json and -L are refused as squeue.
    assert_eq!(
        ids(&[
            "-j",
            "-a",
            "-P",
            "--noconvert",
            "-M",
            "here",
            "--local",
            "--sibling",
            "--hide",
            "--federation",
            "--array-unique",
            "-v",
            &big.to_string(),
        ]),
        format!("{big}\n")
    );
    refused(&slurm(&c, &links, "squeue", &["--json"]), "json");
    refused(&slurm(&c, &links, "squeue", &["--yaml"]), "yaml");
    refused(&slurm(&c, &links, "squeue", &["-L", "lic"]), "licenses");
    assert_eq!(
        c.json("gqueue", &["-j", &big.to_string()])["jobs"][0]["job_id"],
        big
    );
}

/// sacct's options as its man page (Slurm 22.05) describes them: `-X -n -P -o`, `-p` with
/// `--delimiter`, `-b`, `-e`, `-A`, `-r`, `-q`, `-W`, `-N`, `-i`, `--name`, `-s` (now,
/// unless -S), `-R`, `-u`/`-a`; refusals say what to do instead.
#[test]
fn t96_sacct_options_as_slurm() {
    let (c, links) = query_cluster();
    let sa = |args: &[&str]| stdout(&slurm(&c, &links, "sacct", args));
    let one = sbatch(
        &c,
        &links,
        &[
            "-J",
            "one",
            "-A",
            "vision",
            "--qos",
            "high",
            "--wckey=wk1",
            "-N",
            "2",
            "--gres=gpu:1",
            "--wrap",
            "true",
        ],
    );
    let two = sbatch(
        &c,
        &links,
        &[
            "-J",
            "two",
            "-A",
            "lab",
            "-p",
            "debug",
            "--gres=gpu:1",
            "--wrap",
            "exit 3",
        ],
    );
    c.wait_state(one, &["COMPLETED"], Duration::from_secs(30));
    c.wait_state(two, &["FAILED"], Duration::from_secs(30));
    let both = format!("{one},{two}");
    assert_eq!(
        sa(&[
            "-j",
            &both,
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,JobName,State,ExitCode"
        ]),
        format!("{one}|one|COMPLETED|0:0\n{two}|two|FAILED|3:0\n")
    );
    assert_eq!(
        sa(&[
            "-j",
            &one.to_string(),
            "-X",
            "-p",
            "--delimiter=,",
            "-o",
            "JobID,State"
        ]),
        format!("JobID,State,\n{one},COMPLETED,\n")
    );
    assert_eq!(
        sa(&["-j", &two.to_string(), "-X", "-n", "-P", "-b"]),
        format!("{two}|FAILED|3:0\n")
    );
    let fields = sa(&["-e"]);
    assert!(
        fields.starts_with("JobID               JobIDRaw            JobName             Partition"),
        "{fields}"
    );
    assert_eq!(sa(&["--helpformat"]), fields);
    // Selections, each as one job.
    let pick = |args: &[&str]| {
        let mut a = vec!["-X", "-n", "-P", "-o", "JobID"];
        a.extend_from_slice(args);
        sa(&a)
    };
    let (one_line, two_line) = (format!("{one}\n"), format!("{two}\n"));
    assert_eq!(pick(&["-A", "vision"]), one_line);
    assert_eq!(pick(&["--accounts=lab,nope"]), two_line);
    assert_eq!(pick(&["-r", "debug"]), two_line);
    assert_eq!(pick(&["-q", "high"]), one_line);
    assert_eq!(pick(&["-W", "wk1"]), one_line);
    assert_eq!(pick(&["-N", "n2"]), one_line);
    assert_eq!(pick(&["-i", "2"]), one_line);
    assert_eq!(pick(&["--nnodes=1-1"]), two_line);
    assert_eq!(pick(&["--name", "two"]), two_line);
    assert_eq!(pick(&["-s", "F", "-S", "now-1hour"]), two_line);
    assert_eq!(
        pick(&["-s", "F"]),
        "",
        "-s alone: the jobs in that state now"
    );
    let reason = c.job(two).unwrap()["reason"].as_str().unwrap().to_string();
    assert_eq!(pick(&["-R", &reason]), two_line, "reason {reason}");
    let me = gsched_cli::client::current_user();
    assert_eq!(pick(&["-u", &me]), format!("{one}\n{two}\n"));
    assert_eq!(pick(&["-a"]), format!("{one}\n{two}\n"));
    assert_eq!(pick(&["--user=nobody"]), "");
    // Options that change nothing here; refusals.
    assert_eq!(
        pick(&[
            "-L",
            "--noconvert",
            "--units=M",
            "--use-local-uid",
            "--whole-hetjob",
            "-M",
            "here",
            "--local",
            "--federation",
            "-v",
            "-j",
            &one.to_string(),
        ]),
        one_line
    );
    refused(&slurm(&c, &links, "sacct", &["--json"]), "json");
    refused(&slurm(&c, &links, "sacct", &["-D"]), "duplicates");
    let long = slurm(&c, &links, "sacct", &["-l"]);
    refused(&long, "long");
    assert!(String::from_utf8_lossy(&long.stderr).contains("-o"));
    assert_eq!(
        c.json("gacct", &["-j", &one.to_string()])["jobs"][0]["job_id"],
        one
    );
}

/// sinfo's listings as Slurm 22.05 prints them (the slurmdiff peer's `sinfo`, `-N`,
/// `-s`, `-R`, `-t`, `-n`, `-p`, `-o`, `-h`, `-i`), with two partitions.
#[test]
fn t97_sinfo_options_as_slurm() {
    let (c, links) = query_cluster();
    let si = |args: &[&str]| stdout(&slurm(&c, &links, "sinfo", args));
    assert_eq!(
        si(&[]),
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
         gpu*         up   infinite      2   idle n[1-2]\n\
         debug        up    1:00:00      1   idle n1\n"
    );
    let job = sbatch(
        &c,
        &links,
        &["-w", "n1", "--gres=gpu:1", "--wrap", "sleep 600"],
    );
    c.wait_state(job, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(
        si(&["-p", "gpu", "-h"]),
        "gpu*         up   infinite      1    mix n1\n\
         gpu*         up   infinite      1   idle n2\n"
    );
    assert_eq!(
        si(&["-N"]),
        "NODELIST   NODES PARTITION STATE \n\
         n1             1      gpu* mix   \n\
         n1             1     debug mix   \n\
         n2             1      gpu* idle  \n"
    );
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &["update", "NodeName=n2", "State=DRAIN", "Reason=fan"],
    ));
    let me = gsched_cli::client::current_user();
    let reasons = si(&["-R"]);
    let lines: Vec<&str> = reasons.lines().collect();
    assert_eq!(
        lines[0],
        "REASON               USER      TIMESTAMP           NODELIST"
    );
    assert!(
        lines[1].starts_with(&format!("fan                  {me:<9} "))
            && lines[1].ends_with(" n2"),
        "{reasons}"
    );
    assert_eq!(lines.len(), 2, "{reasons}");
    assert_eq!(si(&["-t", "drain", "-h", "-o", "%N"]), "n2\n");
    assert_eq!(si(&["-t", "idle", "-h", "-N", "-o", "%N %t"]), "n2 drain\n");
    assert_eq!(
        si(&["-s", "-p", "gpu"]),
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n\
         gpu*         up   infinite          1/0/1/2 n[1-2]\n"
    );
    assert_eq!(
        si(&["-n", "n1", "-h", "-o", "%P %t"]),
        "gpu* mix\ndebug mix\n"
    );
    assert_eq!(si(&["-r", "-h", "-N", "-o", "%N", "-p", "gpu"]), "n1\nn2\n");
    assert_eq!(si(&["-d", "-h", "-o", "%N"]), "");
    let n1 = c.node("n1").unwrap();
    assert_eq!(
        si(&["-h", "-N", "-o", "%N %c %m %G", "-p", "debug"]),
        format!("n1 {} {} gpu:8\n", n1["cpus_total"], n1["memory_mb"])
    );
    let long = si(&["-l"]);
    assert!(is_slurm_date(long.lines().next().unwrap()), "{long}");
    assert!(long.contains("\ngpu*         up   infinite 1-infinite   no       NO        all "));
    let again = for_a_while(&c, &links, "sinfo", &["-i", "1"], 2.5);
    assert!(
        again.lines().filter(|l| is_slurm_date(l)).count() >= 2,
        "{again}"
    );
    assert_eq!(
        si(&[
            "-a",
            "--hide",
            "-v",
            "-M",
            "here",
            "--local",
            "--federation",
            "--noconvert",
            "-h",
            "-o",
            "%P %D"
        ]),
        "gpu* 2\ndebug 1\n"
    );
    refused(&slurm(&c, &links, "sinfo", &["--json"]), "json");
    refused(&slurm(&c, &links, "sinfo", &["-T"]), "reservation");
    assert!(c.json("ginfo", &[])["nodes"].as_array().unwrap().len() == 2);
}

/// scancel's filters (-A, -q, -R, --wckey, -p), --interactive's question, -Q, and -b
/// alone (SIGKILL to the batch shell: the job ends FAILED, as on Slurm 22.05); -f refused.
#[test]
fn t98_scancel_options_as_slurm() {
    let (c, links) = query_cluster();
    let sc = |args: &[&str]| slurm(&c, &links, "scancel", args);
    let held = |args: &[&str]| {
        let mut a = vec!["--hold", "--gres=gpu:1"];
        a.extend_from_slice(args);
        a.extend(["--wrap", "sleep 600"]);
        sbatch(&c, &links, &a)
    };
    let me = gsched_cli::client::current_user();
    stdout(&slurm(
        &c,
        &links,
        "scontrol",
        &[
            "create",
            "reservation",
            "ReservationName=later",
            "StartTime=now+3600",
            "Duration=60",
            &format!("Users={me}"),
            "Nodes=n2",
        ],
    ));
    let by_account = held(&["-A", "vision"]);
    let by_qos = held(&["--qos", "high"]);
    let by_wckey = held(&["--wckey=w2"]);
    let by_resv = held(&["--reservation=later"]);
    let by_partition = held(&["-p", "debug"]);
    let state = |id: u64| c.job(id).unwrap()["state"].as_str().unwrap().to_string();
    let others = [by_account, by_qos, by_wckey, by_resv, by_partition];
    for (args, gone) in [
        (vec!["-A", "vision"], by_account),
        (vec!["-q", "high"], by_qos),
        (vec!["--wckey=w2"], by_wckey),
        (vec!["-R", "later"], by_resv),
        (vec!["-p", "debug"], by_partition),
    ] {
        let out = sc(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "scancel is silent: {args:?}");
        assert_eq!(state(gone), "CANCELLED", "{args:?}");
        for id in others.iter().filter(|id| state(**id) != "CANCELLED") {
            assert_eq!(state(*id), "PENDING", "{args:?} left {id} alone");
        }
    }
    // -i: asked for each job; y cancels it, n keeps it.
    let (yes, no) = (held(&[]), held(&["-J", "kept"]));
    let path = format!("{links}:{}", std::env::var("PATH").unwrap_or_default());
    let mut child = std::process::Command::new(format!("{links}/scancel"))
        .args(["-i", &yes.to_string(), &no.to_string()])
        .env("PATH", path)
        .current_dir(c.path(""))
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"y\nx\nn\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let asked = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{asked}");
    assert!(
        asked.starts_with(&format!(
            "Cancel job_id={yes} name=wrap partition=gpu [y/n]? "
        )),
        "{asked}"
    );
    assert!(asked.contains(&format!(
        "Cancel job_id={no} name=kept partition=gpu [y/n]? "
    )));
    assert_eq!(state(yes), "CANCELLED");
    assert_eq!(state(no), "PENDING");
    // -Q: no error messages.
    let quiet = sc(&["-Q", "999999"]);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    assert!(!sc(&["999999"]).stderr.is_empty());
    // -b alone: SIGKILL to the batch shell, and the job fails (Slurm: FAILED, exit 0:9);
    // --full is refused with what to do instead.
    let running = sbatch(&c, &links, &["--gres=gpu:1", "--wrap", "sleep 600"]);
    c.wait_state(running, &["RUNNING"], Duration::from_secs(30));
    // (As in t40: a signal sent before the agent has started the script finds no shell.)
    std::thread::sleep(Duration::from_millis(500));
    refused(&sc(&["-f", "-s", "USR1", &running.to_string()]), "full");
    assert!(sc(&["-b", &running.to_string()]).status.success());
    c.wait_state(running, &["FAILED"], Duration::from_secs(30));
    // Options that change nothing here.
    let last = held(&[]);
    assert!(
        sc(&["--ctld", "-H", "-v", "-M", "here", &last.to_string()])
            .status
            .success()
    );
    assert_eq!(state(last), "CANCELLED");
}

/// scontrol's options before its command: -o (one line per record), -Q (actions say
/// nothing), -d (the same details), -u refused.
#[test]
fn t99_scontrol_options_as_slurm() {
    let (c, links) = query_cluster();
    let sc = |args: &[&str]| slurm(&c, &links, "scontrol", args);
    let job = sbatch(
        &c,
        &links,
        &["-J", "shown", "--gres=gpu:1", "--wrap", "sleep 600"],
    );
    c.wait_state(job, &["RUNNING"], Duration::from_secs(30));
    let id = job.to_string();
    // Once its script runs, the record stays the same while we look.
    wait_for("the script to run", Duration::from_secs(30), || {
        stdout(&sc(&["show", "job", &id]))
            .contains("Running {")
            .then_some(())
    });
    let one = stdout(&sc(&["-o", "show", "job", &id]));
    assert_eq!(one.lines().count(), 1, "{one}");
    assert!(
        one.starts_with(&format!("JobId={id} JobName=shown UserId=")),
        "{one}"
    );
    assert!(one.contains(" JobState=RUNNING "), "{one}");
    let full = stdout(&sc(&["show", "job", &id]));
    assert!(full.lines().count() > 3);
    assert_eq!(
        one.trim_end(),
        full.lines().map(str::trim).collect::<Vec<_>>().join(" ")
    );
    assert_eq!(stdout(&sc(&["-d", "show", "job", &id])), full);
    let node = stdout(&sc(&["--oneliner", "show", "node", "n1"]));
    assert_eq!(node.lines().count(), 1, "{node}");
    assert!(node.starts_with("NodeName=n1 "), "{node}");
    // -Q: hold and release say nothing; without it they do.
    let pending = sbatch(
        &c,
        &links,
        &["--gres=gpu:1", "--begin=now+3600", "--wrap", "true"],
    );
    let p = pending.to_string();
    assert_eq!(stdout(&sc(&["-Q", "hold", &p])), "");
    assert_eq!(c.job(pending).unwrap()["held"], true);
    assert_eq!(stdout(&sc(&["--quiet", "release", &p])), "");
    assert_eq!(c.job(pending).unwrap()["held"], false);
    assert!(!stdout(&sc(&["hold", &p])).is_empty());
    assert!(stdout(&sc(&["-Q", "show", "job", &p])).contains("JobId="));
    let refusal = sc(&["-u", "1000", "hold", &p]);
    refused(&refusal, "uid");
    assert!(
        stdout(&sc(&[
            "-a", "-M", "here", "-F", "--local", "-v", "show", "job", &id
        ]))
        .starts_with(&format!("JobId={id} "))
    );
}
