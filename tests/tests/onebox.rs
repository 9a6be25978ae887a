//! The one-server lab as people really use it, through real daemons and the CLI: CPU-only
//! jobs start while every GPU runs a default-share job, a launch the node refuses tells
//! the submitter why, admin tools run as root through the service user, GPU use outside
//! jobs is seen and kept from new jobs, and no `gsub --dry-run` ever submits.

use gsched_tests::{Cluster, test_users, topology, torch_available};
use serde_json::Value;
use std::time::Duration;

/// A 1-GPU, 16-CPU, 64 GiB workstation: the 2-GPU fake cut down to its first GPU.
fn one_gpu_topology(c: &Cluster) -> std::path::PathBuf {
    let mut t: Value =
        serde_json::from_slice(&std::fs::read(topology("ws-2gpu-nvlink.json")).unwrap()).unwrap();
    t["source"] = "fake: 1-GPU 16-CPU workstation".into();
    t["gpus"] = Value::Array(vec![t["gpus"][0].clone()]);
    t["gpus"][0]["cpus"] = "0-15".into();
    t["gpu_links"] = serde_json::json!([["X"]]);
    t["gpu_nic_links"] = serde_json::json!([["PHB", "SYS"]]);
    t["numa_nodes"] = serde_json::json!([{"id": 0, "cpus": "0-15", "memory_mib": 65536}]);
    t["cpus"] = 16.into();
    t["memory_mib"] = 65536.into();
    let p = c.path("ws-1gpu.json");
    std::fs::write(&p, t.to_string()).unwrap();
    p
}

/// The CPU ids job `id` holds on its first node.
fn cpus_of(c: &Cluster, id: u64) -> usize {
    let v = c.json("gctl", &["show", "job", &id.to_string()]);
    v["allocation"]["nodes"][0]["cpus"]
        .as_array()
        .unwrap_or_else(|| panic!("no allocation in {v}"))
        .len()
}

#[test]
fn t10_a_cpu_only_job_starts_while_every_gpu_runs_a_default_share_job() {
    let mut c = Cluster::controllers(1, &[]);
    let one = one_gpu_topology(&c);
    c.add_agent_with("one", one, &[]);
    c.add_agent("eight", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("one");
    c.wait_node_online("eight");
    let sleep = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");

    // The 1-GPU node: its one GPU job takes the default share, 16 less the 2 kept.
    let gpu = c.submit(&["-w", "one", "--gpus", "1", &sleep]);
    c.wait_state(gpu, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(cpus_of(&c, gpu), 14);
    let cpu_only = c.submit(&["-w", "one", &sleep]);
    c.wait_state(cpu_only, &["RUNNING"], Duration::from_secs(30));

    // The 8-GPU node (128 CPUs): all 8 GPUs busy, 15 CPUs each, 8 kept.
    let gpu_jobs: Vec<u64> = (0..8)
        .map(|_| c.submit(&["-w", "eight", "--gpus", "1", &sleep]))
        .collect();
    for j in &gpu_jobs {
        c.wait_state(*j, &["RUNNING"], Duration::from_secs(30));
        assert_eq!(cpus_of(&c, *j), 15);
    }
    let cpu_only8 = c.submit(&["-w", "eight", "-c", "4", &sleep]);
    c.wait_state(cpu_only8, &["RUNNING"], Duration::from_secs(30));

    // A GPU job that names its CPUs still gets them, up to the whole node.
    c.ok("gcancel", &[&gpu.to_string(), &cpu_only.to_string()]);
    c.wait_state(cpu_only, &["CANCELLED"], Duration::from_secs(30));
    c.wait_state(gpu, &["CANCELLED"], Duration::from_secs(30));
    let wide = c.submit(&["-w", "one", "--gpus", "1", "-c", "16", &sleep]);
    c.wait_state(wide, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(cpus_of(&c, wide), 16);
    // ...and then a CPU-only job waits for it, as it asked for everything.
    let waits = c.submit(&["-w", "one", &sleep]);
    let pending = c.wait_state(waits, &["PENDING"], Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.job(waits).unwrap()["state"], "PENDING", "{pending}");
}

#[test]
fn t20_a_refused_launch_tells_the_submitter_why_and_admin_tools_run_as_the_service_user() {
    let Some((alice, _bob)) = test_users() else {
        return;
    };
    let mut c = Cluster::controllers(1, &[]);
    // A real node's agent: no job below uid 1000, root's included.
    c.add_agent("n1", "ws-2gpu-nvlink.json", &["--min-uid", "1000"]);
    c.wait_node_online("n1");

    // gsub --wait: the exit status and the node's words.
    let o = c.cli("gsub", &["--parsable", "--wait", "--wrap", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("before it ran: LaunchFailed on n1: this node runs no job as root (uid 0)")
            && err.contains("--min-uid is 1000"),
        "{err}"
    );
    let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();

    // gqueue's reason (JSON row, %r, NODELIST(REASON)) and gacct's.
    let row = c.job(id).unwrap();
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("LaunchFailed: this node runs no job as root")
            && reason.contains("--min-uid is 1000"),
        "{row}"
    );
    let q = c.ok(
        "gqueue",
        &["-t", "all", "-j", &id.to_string(), "-o", "%i %r"],
    );
    assert!(
        q.contains("LaunchFailed: this node runs no job as root"),
        "{q}"
    );
    let q = c.ok("gqueue", &["-t", "all", "-j", &id.to_string()]);
    assert!(
        q.contains("(LaunchFailed: this node runs no job as root"),
        "{q}"
    );
    let acct = c.ok(
        "gacct",
        &[
            "-j",
            &id.to_string(),
            "-X",
            "-P",
            "-o",
            "JobID,State,Reason",
        ],
    );
    assert!(
        acct.contains(&format!(
            "{id}|FAILED|LaunchFailed on n1: this node runs no job as root"
        )),
        "{acct}"
    );

    // grun (srun): its error names the node's reason.
    let o = c.cli("grun", &["-N", "1", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(
            "ended FAILED before it ran: LaunchFailed on n1: this node runs no job as root"
        ),
        "{err}"
    );

    // gctl doctor --probe as root: its job runs as the service user, and the node takes it.
    let o = c.cli(
        "gctl",
        &["doctor", "--probe", "--json", "--as-user", &alice.name],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("running the jobs as {}", alice.name)),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or_default())
        .collect();
    assert!(
        !kinds.iter().any(|k| k.contains("probe")),
        "the probe ran and reported: {v}"
    );
    let probe = c.json("gqueue", &["-t", "all", "-n", "doctor-probe"]);
    let job = &probe["jobs"][0];
    assert_eq!(job["user"], alice.name.as_str(), "{probe}");
    assert_eq!(job["state"], "COMPLETED", "{probe}");
    // Without a service user, root's probe is refused and gctl says what to do.
    let o = c.cli("gctl", &["doctor", "--probe", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the nodes refuse jobs as root: create a service user"),
        "{err}"
    );
    // A service user that is not there stops gctl before any job.
    let o = c.cli(
        "gctl",
        &["doctor", "--probe", "--as-user", "no-such-user-54"],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("there is no Unix user no-such-user-54"),
        "{o:?}"
    );
    // burn-in as root through the service user (it needs PyTorch on the node).
    if torch_available() {
        let dir = c.path("burnin");
        let o = c.cli(
            "gctl",
            &[
                "burn-in",
                "--quick",
                "--python",
                "/usr/bin/python3",
                "--as-user",
                &alice.name,
                "--out",
                dir.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A 2-GPU fake node whose GPUs' device nodes are files in the cluster's directory
/// (`device_path`, as NVML's minor numbers give `/dev/nvidiaN` on a real node).
fn two_gpus_with_device_files(c: &Cluster) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let mut t: Value =
        serde_json::from_slice(&std::fs::read(topology("ws-2gpu-nvlink.json")).unwrap()).unwrap();
    let mut devs = Vec::new();
    for g in 0..2 {
        let dev = c.path(&format!("dev-nvidia{g}"));
        std::fs::write(&dev, b"").unwrap();
        t["gpus"][g]["device_path"] = dev.to_string_lossy().into_owned().into();
        devs.push(dev);
    }
    let p = c.path("ws-2gpu-devs.json");
    std::fs::write(&p, t.to_string()).unwrap();
    (p, devs)
}

#[test]
fn t30_another_users_process_on_a_gpu_is_reported_and_no_new_job_lands_there() {
    let Some((_alice, bob)) = test_users() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", gsched_tests::free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    let (topo, devs) = two_gpus_with_device_files(&c);
    // The driver as it ships: device nodes re-created 0666 whenever CUDA starts.
    let params = c.path("nvidia-params");
    std::fs::write(
        &params,
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n",
    )
    .unwrap();
    c.add_agent_with(
        "n1",
        topo,
        &[
            "--gpu-sample-interval",
            "1",
            "--nvidia-params",
            params.to_str().unwrap(),
        ],
    );
    c.wait_node_online("n1");
    // gctl doctor says so, with the fix.
    let doctor = gsched_tests::wait_for("the driver finding", Duration::from_secs(10), || {
        let v = c.json("gctl", &["doctor"]);
        v["findings"]
            .as_array()?
            .iter()
            .find(|f| f["kind"] == "nvidia-device-files-reset")
            .cloned()
    });
    assert!(
        doctor["action"]
            .as_str()
            .is_some_and(|a| a.contains("options nvidia NVreg_ModifyDeviceFiles=0")),
        "{doctor}"
    );

    // bob's process holds GPU 0's device node, outside any job (opened for it, as his
    // shell's Python would open /dev/nvidia0).
    let mut holder = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("600")
            .uid(bob.uid)
            .gid(bob.gid)
            .stdin(std::fs::File::open(&devs[0]).unwrap())
            .spawn()
            .unwrap()
    };
    let pid = holder.id();
    // Reported within a sampling interval (1 s) and a heartbeat.
    let seen = std::time::Instant::now();
    let node = gsched_tests::wait_for("bob's process in ginfo", Duration::from_secs(10), || {
        c.node("n1")
            .filter(|n| n["outside_jobs"].as_array().is_some_and(|a| !a.is_empty()))
    });
    assert!(
        seen.elapsed() < Duration::from_secs(5),
        "{:?}",
        seen.elapsed()
    );
    let u = &node["outside_jobs"][0];
    assert_eq!(u["gpu"], 0, "{node}");
    assert_eq!(u["pid"], pid, "{node}");
    assert_eq!(u["user"], bob.name.as_str(), "{node}");
    assert_eq!(u["command"], "sleep 600", "{node}");
    let shown = c.ok("gctl", &["show", "node", "n1"]);
    assert!(
        shown.contains(&format!(
            "OutsideJobs: gpu0: pid {pid} ({}) sleep 600, outside any job",
            bob.name
        )),
        "{shown}"
    );
    let metrics = gsched_tests::http::request(&addr, "GET", "/metrics", "", b"");
    assert!(
        metrics.contains(&format!(
            "gsched_gpu_processes_outside_jobs{{node=\"n1\",gpu=\"0\",user=\"{}\"}} 1",
            bob.name
        )),
        "{metrics}"
    );

    // A new 1-GPU job gets GPU 1, not bob's; the next one waits, naming GPU 0.
    let sleep = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    // The first job's own process opens its GPU's device node: that is no finding.
    let on_its_gpu = c.script(
        "on-its-gpu.sh",
        &format!("#!/bin/sh\nexec sleep 600 < {}\n", devs[1].display()),
    );
    let first = c.submit(&["--gpus", "1", &on_its_gpu]);
    c.wait_state(first, &["RUNNING"], Duration::from_secs(30));
    let v = c.json("gctl", &["show", "job", &first.to_string()]);
    assert_eq!(
        v["allocation"]["nodes"][0]["gpus"],
        serde_json::json!([1]),
        "{v}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let uses = c.node("n1").unwrap()["outside_jobs"].clone();
    assert_eq!(uses.as_array().map(Vec::len), Some(1), "only bob's: {uses}");
    let second = c.submit(&["--gpus", "1", &sleep]);
    let waiting =
        gsched_tests::wait_for("the reason naming GPU 0", Duration::from_secs(15), || {
            c.job(second).filter(|j| {
                j["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("GPUs used outside jobs: n1:gpu0"))
            })
        });
    assert_eq!(waiting["state"], "PENDING", "{waiting}");
    assert!(
        c.logs()
            .contains(&format!("GPU used outside jobs: gpu0: pid {pid}"))
    );

    // bob's process ends: the report clears and the waiting job gets GPU 0.
    holder.kill().unwrap();
    holder.wait().unwrap();
    c.wait_state(second, &["RUNNING"], Duration::from_secs(15));
    let v = c.json("gctl", &["show", "job", &second.to_string()]);
    assert_eq!(
        v["allocation"]["nodes"][0]["gpus"],
        serde_json::json!([0]),
        "{v}"
    );
    gsched_tests::wait_for("the report to clear", Duration::from_secs(10), || {
        c.node("n1")
            .filter(|n| n["outside_jobs"].as_array().is_none_or(|a| a.is_empty()))
    });
}

#[test]
fn t40_no_dry_run_ever_creates_a_job() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "ws-2gpu-nvlink.json", &[]);
    c.wait_node_online("n1");
    let jobs = |c: &Cluster| -> usize {
        c.json("gqueue", &["-t", "all"])["jobs"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let scripts = [
        // A typographic dash, as word processors and chat clients write it.
        (
            "dash.sh",
            "#!/bin/sh\n#SBATCH \u{2013}gres=gpu:8\necho hi\n",
        ),
        // A directive after the first command (sbatch ignores it).
        (
            "trailing.sh",
            "#!/bin/sh\n#SBATCH -N 1\necho hi\n#SBATCH --exclusive\n",
        ),
        (
            "normal.sh",
            "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --gpus=1\n#SBATCH -t 10\nsrun hostname\n",
        ),
        ("bare.sh", "#!/bin/sh\nhostname\n"),
        (
            "array.sh",
            "#!/bin/sh\n#SBATCH --array=0-3\n#SBATCH --mail-type=END\necho $SLURM_ARRAY_TASK_ID\n",
        ),
        (
            "unknown.sh",
            "#!/bin/sh\n#SBATCH --no-such-option\necho hi\n",
        ),
    ];
    let links = c.slurm_links();
    for (name, body) in scripts {
        let path = c.script(name, body);
        for flags in [
            &["--dry-run"][..],
            &["--dry-run", "--json"],
            &["--dry"],
            &["--test-only"],
            &["--dry-run", "--exclusive"],
        ] {
            let mut args = flags.to_vec();
            args.push(&path);
            let o = c.cli("gsub", &args);
            assert_eq!(jobs(&c), 0, "gsub {args:?} created a job: {o:?}");
            let o = c.slurm_name(&links, "sbatch", &args);
            assert_eq!(jobs(&c), 0, "sbatch {args:?} created a job: {o:?}");
        }
    }
    for args in [
        &["--dry-run", "--wrap", "hostname"][..],
        &["--wrap", "hostname", "--dry-run"],
        &["--dry-run", "--array=0-9", "--wrap", "true"],
    ] {
        let o = c.cli("gsub", args);
        assert_eq!(jobs(&c), 0, "gsub {args:?} created a job: {o:?}");
    }
    // The count does see a job that is submitted.
    c.submit(&["--wrap", "true"]);
    assert_eq!(jobs(&c), 1);
}

/// Every path under `root`, with its kind and mode (`d755 etc/gsched`).
fn tree(root: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            let kind = if m.file_type().is_symlink() {
                'l'
            } else if m.is_dir() {
                stack.push(e.path());
                'd'
            } else {
                'f'
            };
            out.push(format!("{kind}{:o} {rel}", m.permissions().mode() & 0o7777));
        }
    }
    out.sort();
    out
}

#[test]
fn t50_the_one_server_install_is_idempotent_and_reversible_in_a_scratch_root() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("root");
    // A real Slurm's srun already in /usr/local/bin: the install must leave it alone.
    std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
    std::fs::write(root.join("usr/local/bin/srun"), "#!/bin/sh\necho slurm\n").unwrap();
    // Stand-ins for the binaries (the script copies whatever --bin-dir holds).
    let bins = scratch.path().join("bin");
    std::fs::create_dir(&bins).unwrap();
    let tools = [
        "gctld", "gagentd", "gsub", "grun", "galloc", "gqueue", "ginfo", "gcancel", "gacct",
        "greport", "gctl",
    ];
    for t in tools {
        let p = bins.join(t);
        std::fs::write(&p, format!("#!/bin/sh\necho {t}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let before = tree(&root);
    let script = gsched_tests::workspace().join("deploy/one-server/install.sh");
    let run = |args: &[&str]| -> String {
        let o = std::process::Command::new("bash")
            .arg(&script)
            .args(["--root", root.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "install.sh {args:?}: {text}");
        text
    };
    let bin_dir = bins.to_str().unwrap();
    let first = run(&["--bin-dir", bin_dir]);
    assert!(
        first.contains("NVreg_ModifyDeviceFiles=0 takes effect at the next driver load"),
        "{first}"
    );
    assert!(first.contains("left /usr/local/bin/srun alone"), "{first}");
    let installed = tree(&root);
    for want in [
        "f755 usr/local/bin/gctld",
        "f755 usr/local/bin/gsub",
        "l777 usr/local/bin/sbatch",
        "f644 etc/systemd/system/gctld.service",
        "f644 etc/systemd/system/gctld.socket",
        "f644 etc/systemd/system/gagentd.service",
        "f644 etc/profile.d/gsched.sh",
        "f644 etc/gsched/gctld.toml",
        "f600 etc/gsched/token.key",
        "f644 etc/modprobe.d/gsched-nvidia.conf",
        "d700 var/lib/gsched",
    ] {
        assert!(
            installed.iter().any(|l| l == want),
            "no {want} in {installed:#?}"
        );
    }
    assert_eq!(
        std::fs::read_link(root.join("usr/local/bin/sbatch")).unwrap(),
        std::path::Path::new("gsub")
    );
    assert_eq!(
        std::fs::read_to_string(root.join("usr/local/bin/srun")).unwrap(),
        "#!/bin/sh\necho slurm\n"
    );
    assert_eq!(
        std::fs::read(root.join("etc/gsched/token.key"))
            .unwrap()
            .len(),
        32
    );
    assert!(
        std::fs::read_to_string(root.join("etc/modprobe.d/gsched-nvidia.conf"))
            .unwrap()
            .contains("options nvidia NVreg_ModifyDeviceFiles=0")
    );
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/gctld.service")).unwrap();
    assert!(
        unit.contains("--listen unix:/run/gsched/gctld.sock") && unit.contains("--http systemd"),
        "{unit}"
    );
    let socket = std::fs::read_to_string(root.join("etc/systemd/system/gctld.socket")).unwrap();
    assert!(
        socket.contains("ListenStream=127.0.0.1:9817")
            && socket.contains("ListenStream=[::1]:9817"),
        "{socket}"
    );
    let key = std::fs::read(root.join("etc/gsched/token.key")).unwrap();

    // Again: nothing changes, not even the key.
    let second = run(&["--bin-dir", bin_dir]);
    assert!(second.contains("0 changed"), "{second}");
    assert_eq!(tree(&root), installed);
    assert_eq!(
        std::fs::read(root.join("etc/gsched/token.key")).unwrap(),
        key
    );
    // A new build: the binary is replaced, nothing else.
    std::fs::write(bins.join("gsub"), "#!/bin/sh\necho gsub 2\n").unwrap();
    let upgrade = run(&["--bin-dir", bin_dir]);
    assert!(
        upgrade.contains("installed /usr/local/bin/gsub") && upgrade.contains("1 changed"),
        "{upgrade}"
    );

    // Uninstalled: the tree is as it was, the Slurm client still there.
    let gone = run(&["--uninstall"]);
    assert!(gone.contains("uninstalled"), "{gone}");
    assert_eq!(tree(&root), before);

    // A config the admin edited survives an uninstall, and is said to.
    run(&["--bin-dir", bin_dir]);
    std::fs::write(
        root.join("etc/gsched/gctld.toml"),
        "[outside_jobs]\naction = \"warn\"\n",
    )
    .unwrap();
    let kept = run(&["--uninstall"]);
    assert!(kept.contains("kept /etc/gsched/gctld.toml"), "{kept}");
    assert!(root.join("etc/gsched/gctld.toml").exists());
}

#[test]
fn t31_nvmls_process_list_is_read_and_the_kill_policy_ends_the_process() {
    let Some((_alice, bob)) = test_users() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(
        &conf,
        "[outside_jobs]\naction = \"kill\"\ngrace_s = 2\nexempt_users = []\n",
    )
    .unwrap();
    let mut c = Cluster::controllers(1, &["--config", conf.to_str().unwrap()]);
    let (topo, _devs) = two_gpus_with_device_files(&c);
    // bob's process, which NVML (scripted) lists on GPU 1 with 3000 MiB.
    let mut holder = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("601")
            .uid(bob.uid)
            .gid(bob.gid)
            .spawn()
            .unwrap()
    };
    let pid = holder.id();
    let util = c.path("util.json");
    std::fs::write(
        &util,
        format!("{{\"1\": {{\"util\": 40, \"mem_mib\": 3000, \"procs\": [{{\"pid\": {pid}, \"mem_mib\": 3000}}]}}}}"),
    )
    .unwrap();
    c.add_agent_with(
        "n1",
        topo,
        &[
            "--gpu-sample-interval",
            "1",
            "--fake-gpu-util",
            util.to_str().unwrap(),
        ],
    );
    c.wait_node_online("n1");
    let node = gsched_tests::wait_for("bob's process in ginfo", Duration::from_secs(10), || {
        c.node("n1")
            .filter(|n| n["outside_jobs"].as_array().is_some_and(|a| !a.is_empty()))
    });
    let u = &node["outside_jobs"][0];
    assert_eq!(
        (u["gpu"].clone(), u["pid"].clone()),
        (1.into(), pid.into()),
        "{node}"
    );
    assert_eq!(u["gpu_mem_mib"], 3000, "{node}");
    assert_eq!(u["command"], "sleep 601", "{node}");
    // Past the grace, the agent ends it (SIGTERM), and says so.
    let ended = gsched_tests::wait_for(
        "bob's process to be killed",
        Duration::from_secs(15),
        || holder.try_wait().unwrap(),
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&ended),
        Some(15),
        "{ended:?}"
    );
    assert!(c.logs().contains(&format!("killed process {pid}")));
}

#[test]
fn t32_the_warn_policy_writes_to_the_users_terminal() {
    let Some((_alice, bob)) = test_users() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gctld.toml");
    std::fs::write(&conf, "[outside_jobs]\naction = \"warn\"\ngrace_s = 1\n").unwrap();
    let mut c = Cluster::controllers(1, &["--config", conf.to_str().unwrap()]);
    let (topo, devs) = two_gpus_with_device_files(&c);
    c.add_agent_with("n1", topo, &["--gpu-sample-interval", "1"]);
    c.wait_node_online("n1");
    // bob's terminal: a pseudo-terminal whose slave side is his, as a login gives him.
    let pty = nix::pty::openpty(None, None).unwrap();
    let tty = nix::unistd::ttyname(&pty.slave).unwrap();
    nix::unistd::chown(
        &tty,
        Some(nix::unistd::Uid::from_raw(bob.uid)),
        Some(nix::unistd::Gid::from_raw(bob.gid)),
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let mut master = std::fs::File::from(pty.master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    let mut holder = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("602")
            .uid(bob.uid)
            .gid(bob.gid)
            .stdin(std::fs::File::open(&devs[0]).unwrap())
            .spawn()
            .unwrap()
    };
    let pid = holder.id();
    let mut said = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !said.contains("outside any job") && std::time::Instant::now() < deadline {
        if let Ok(t) = rx.recv_timeout(Duration::from_millis(500)) {
            said.push_str(&t);
        }
    }
    assert!(
        said.contains(&format!(
            "gsched: your process {pid} (sleep 602) is using GPU 0 of n1 outside any job"
        )),
        "bob's terminal got {said:?}"
    );
    let node = gsched_tests::wait_for("the warning in ginfo", Duration::from_secs(10), || {
        c.node("n1")
            .filter(|n| n["outside_jobs"][0]["acted"] == "warn")
    });
    assert_eq!(node["outside_jobs"][0]["pid"], pid, "{node}");
    // Warned, not killed.
    assert!(holder.try_wait().unwrap().is_none());
    holder.kill().unwrap();
    holder.wait().unwrap();
    drop(pty.slave);
}
