//! The Python tools people drive Slurm with, unchanged, through Slurm's command names:
//! submitit (submit, `map_array`, multi-node multi-task, cancel, requeue on timeout),
//! dask-jobqueue's `SLURMCluster`, Snakemake's Slurm executor plugin, and PyTorch
//! Lightning's SLURM environment with auto-requeue on `--signal=SIGUSR1@90`. Each client
//! is a script under tests/clients run from a virtual environment `.ci/run` installs
//! (`GSCHED_CLIENTS_VENV`, `GSCHED_LIGHTNING_VENV`); without one the test says so and
//! skips, unless `GSCHED_REQUIRE_CLIENTS` is set.

use gsched_tests::{Cluster, workspace};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The virtual environment named by `var` (default `.ci/venv/NAME` in the workspace), or
/// `None` with the reason printed.
fn venv(var: &str, name: &str, import: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".ci/venv").join(name));
    let python = dir.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", &format!("import {import}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(dir);
    }
    assert!(
        std::env::var_os("GSCHED_REQUIRE_CLIENTS").is_none(),
        "GSCHED_REQUIRE_CLIENTS is set but {} cannot import {import} (.ci/run installs it)",
        python.display()
    );
    eprintln!(
        "skipping: {} cannot import {import}; run .ci/run or set {var}",
        python.display()
    );
    None
}

/// One controller and two fake 8-GPU nodes whose jobs find Slurm's names first on PATH.
fn cluster() -> (Cluster, String) {
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    for n in ["n1", "n2"] {
        c.add_agent(n, "rtx4090-8gpu.json", &["--slurm-names", &links]);
    }
    (c, links)
}

/// Runs `program args` in the cluster's directory with the Slurm names and the venv's
/// tools on PATH, killed after `limit`.
fn run_client(
    c: &Cluster,
    links: &str,
    venv: &std::path::Path,
    program: &str,
    args: &[&str],
    limit: Duration,
) -> Output {
    let path = format!(
        "{links}:{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new(program)
        .args(args)
        .current_dir(c.path(""))
        .env("PATH", path)
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .env("PYTHONUNBUFFERED", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the client");
    let pid = child.id();
    let started = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(200));
            if !gsched_tests::pid_alive(pid as i32) {
                return;
            }
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let out = child.wait_with_output().expect("wait for the client");
    let _ = watchdog.join();
    out
}

/// Asserts the client exited 0 and printed `marker`, showing its output and the cluster's
/// logs otherwise.
fn assert_passed(c: &Cluster, what: &str, out: &Output, marker: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(marker),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}\n--- logs\n{}",
        out.status,
        tail(&stderr, 6000),
        tail(&c.logs(), 6000)
    );
    println!("{stdout}");
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

fn client_script(name: &str) -> String {
    workspace()
        .join("tests/clients")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn t10_submitit_submits_maps_cancels_and_requeues() {
    let Some(venv) = venv("GSCHED_CLIENTS_VENV", "clients", "submitit") else {
        return;
    };
    let (c, links) = cluster();
    let folder = c.path("submitit").to_string_lossy().into_owned();
    let python = venv.join("bin/python").to_string_lossy().into_owned();
    let out = run_client(
        &c,
        &links,
        &venv,
        &python,
        &[&client_script("submitit_check.py"), &folder],
        Duration::from_secs(400),
    );
    assert_passed(&c, "submitit", &out, "submitit: all checks passed");
    // submitit's own log names use %j_%t: every task's file exists under its job's id.
    let logs: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_log.out"))
        .collect();
    assert!(logs.iter().any(|n| n.ends_with("_3_log.out")), "{logs:?}");
    assert!(!logs.iter().any(|n| n.contains('%')), "{logs:?}");
}

#[test]
fn t20_dask_jobqueue_starts_workers_as_jobs_and_cancels_them() {
    let Some(venv) = venv("GSCHED_CLIENTS_VENV", "clients", "dask_jobqueue") else {
        return;
    };
    let (c, links) = cluster();
    let folder = c.path("dask");
    std::fs::create_dir_all(&folder).unwrap();
    let python = venv.join("bin/python").to_string_lossy().into_owned();
    let out = run_client(
        &c,
        &links,
        &venv,
        &python,
        &[&client_script("dask_check.py"), &folder.to_string_lossy()],
        Duration::from_secs(300),
    );
    assert_passed(&c, "dask-jobqueue", &out, "dask: all checks passed");
}

#[test]
fn t30_snakemake_slurm_executor_runs_a_workflow() {
    let Some(venv) = venv(
        "GSCHED_CLIENTS_VENV",
        "clients",
        "snakemake_executor_plugin_slurm",
    ) else {
        return;
    };
    let (c, links) = cluster();
    let work = c.path("workflow");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::copy(
        workspace().join("tests/clients/snakemake/Snakefile"),
        work.join("Snakefile"),
    )
    .unwrap();
    let snakemake = venv.join("bin/snakemake").to_string_lossy().into_owned();
    let out = run_client(
        &c,
        &links,
        &venv,
        &snakemake,
        &[
            "--directory",
            &work.to_string_lossy(),
            "--executor",
            "slurm",
            "--jobs",
            "4",
            "--slurm-init-seconds-before-status-checks",
            "2",
            "--latency-wait",
            "5",
        ],
        Duration::from_secs(400),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("5 of 5 steps (100%) done"),
        "snakemake failed ({}):\n{}\n--- logs\n{}",
        out.status,
        tail(&stderr, 8000),
        tail(&c.logs(), 6000)
    );
    // Each square ran as its own batch job with the rule's two threads as its CPUs.
    let gathered = std::fs::read_to_string(work.join("gathered.txt")).unwrap();
    let lines: Vec<Vec<&str>> = gathered.lines().map(|l| l.split(' ').collect()).collect();
    let mut squares: Vec<&str> = lines.iter().map(|l| l[0]).collect();
    squares.sort();
    assert_eq!(squares, ["1", "4", "9"], "{gathered}");
    assert!(lines.iter().all(|l| l[2] == "2"), "{gathered}");
    let mut ids: Vec<&str> = lines.iter().map(|l| l[1]).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "{gathered}");
}

#[test]
fn t40_lightning_requeues_itself_on_sigusr1_and_resumes() {
    let Some(venv) = venv("GSCHED_LIGHTNING_VENV", "lightning", "pytorch_lightning") else {
        return;
    };
    let (c, links) = cluster();
    let work = c.path("lightning");
    std::fs::create_dir_all(work.join("ckpt")).unwrap();
    for f in ["train.py", "job.sbatch"] {
        std::fs::copy(
            workspace().join("tests/clients/lightning").join(f),
            work.join(f),
        )
        .unwrap();
    }
    let sbatch = format!("{links}/sbatch");
    let out = Command::new(&sbatch)
        .arg("job.sbatch")
        .current_dir(&work)
        .env(
            "PATH",
            format!(
                "{links}:{}:{}",
                venv.join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    let printed = gsched_tests::success_stdout(&out, "sbatch");
    let id: u64 = printed
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("sbatch printed {printed:?}"));
    // Time limit 2 min, SIGUSR1 90 s before: the signal comes 30 s in, Lightning saves
    // its checkpoint and runs `scontrol requeue`; the second run resumes and finishes.
    let job = c.wait_state(
        id,
        &["COMPLETED", "FAILED", "TIMEOUT"],
        Duration::from_secs(240),
    );
    let output = std::fs::read_to_string(work.join(format!("lightning-{id}.out"))).unwrap();
    assert_eq!(job["state"], "COMPLETED", "{job}\n{}", tail(&output, 6000));
    assert_eq!(job["restarts"], 1, "{job}");
    assert!(
        work.join("ckpt/hpc_ckpt_1.ckpt").exists(),
        "{}",
        tail(&output, 4000)
    );
    assert!(
        output.contains("Restored all states from the checkpoint"),
        "{}",
        tail(&output, 4000)
    );
    for rank in [0, 1] {
        assert!(
            output.contains(&format!("restart=1 rank={rank} world=2")),
            "{}",
            tail(&output, 4000)
        );
        assert!(output.contains(&format!("finished epoch=20 rank={rank}")));
    }
}
