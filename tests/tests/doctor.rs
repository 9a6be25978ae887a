//! `gctl doctor` on a running cluster: a node whose fake topology carries planted faults
//! (a riser that trained GPU 2 down to Gen3 x4, a hot GPU 5, the training NIC at MTU 1500
//! where the others use 9000) is found out, each finding naming its node and GPU; the
//! healthy nodes have none. `gctl burn-in` runs the staged tests as jobs on a fake
//! cluster (gloo on CPUs) and writes its report with a plot per all-reduce stage.

use gsched_tests::{Cluster, topology, torch_available};
use serde_json::Value;

#[test]
fn t10_planted_faults_are_found_and_healthy_nodes_are_clean() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent_with("n2", topology("rtx4090-8gpu-riser-problems.json"), &[]);
    c.add_agent("n3", "rtx4090-8gpu.json", &[]);
    let v = c.json("gctl", &["doctor"]);
    let findings = v["findings"].as_array().unwrap();
    let kinds: Vec<(&str, &str, Option<u64>)> = findings
        .iter()
        .map(|f| {
            (
                f["node"].as_str().unwrap(),
                f["kind"].as_str().unwrap(),
                f["gpu"].as_u64(),
            )
        })
        .collect();
    assert!(
        kinds.contains(&("n2", "pcie-link-degraded", Some(2))),
        "{kinds:?}"
    );
    assert!(kinds.contains(&("n2", "gpu-hot", Some(5))), "{kinds:?}");
    assert!(kinds.contains(&("n2", "mtu-mismatch", None)), "{kinds:?}");
    assert!(
        kinds.iter().all(|(node, _, _)| *node == "n2"),
        "only n2 has faults: {kinds:?}"
    );
    let riser = findings
        .iter()
        .find(|f| f["kind"] == "pcie-link-degraded")
        .unwrap();
    assert_eq!(riser["evidence"], "GPU 2: PCIe Gen3 x4 of Gen4 x16");
    assert_eq!(riser["severity"], "warn");
    for key in [
        "node",
        "severity",
        "component",
        "kind",
        "evidence",
        "action",
    ] {
        assert!(riser.get(key).is_some(), "{key}: {riser}");
    }
    // One node asked for, and a healthy one: nothing.
    let v: Value = c.json("gctl", &["doctor", "n1"]);
    assert_eq!(v["findings"], serde_json::json!([]));
    let out = c.ok("gctl", &["doctor", "n3"]);
    assert!(out.contains("no findings on 1 node(s)"), "{out}");
    let out = c.cli("gctl", &["doctor", "n9"]);
    assert!(!out.status.success());
}

#[test]
fn t20_burn_in_runs_the_stages_as_jobs_and_writes_a_report_with_plots() {
    if !torch_available() {
        return;
    }
    let mut c = Cluster::controllers(1, &[]);
    for n in ["n1", "n2"] {
        c.add_agent(n, "ws-2gpu-nvlink.json", &[]);
    }
    let dir = c.path("burnin");
    let o = c.cli(
        "gctl",
        &[
            "burn-in",
            "--quick",
            "--python",
            "/usr/bin/python3",
            "--out",
            dir.to_str().unwrap(),
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "burn-in failed: {stderr}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    let results = v["results"].as_array().unwrap();
    let stage =
        |s: &str| -> Vec<&Value> { results.iter().filter(|r| r["run"]["stage"] == s).collect() };
    // Each GPU alone: both GPUs of both nodes, their memory pattern read back right.
    let gpus: Vec<&Value> = stage("gpu")
        .iter()
        .flat_map(|r| r["gpus"].as_array().unwrap())
        .collect();
    assert_eq!(gpus.len(), 4, "{stderr}");
    assert!(
        gpus.iter()
            .all(|g| g["memory_ok"] == true && g["backend"] == "cpu")
    );
    let mut placed: Vec<(String, String)> = gpus
        .iter()
        .map(|g| {
            (
                g["node"].as_str().unwrap().into(),
                g["gpu"].as_str().unwrap().into(),
            )
        })
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        [("n1", "0"), ("n1", "1"), ("n2", "0"), ("n2", "1")]
            .map(|(n, g)| (n.to_string(), g.to_string()))
    );
    // Each node's all-reduce over its two GPUs, then the pair over four.
    for (s, runs, world) in [("node", 2, 2), ("pair", 1, 4)] {
        let r = stage(s);
        assert_eq!(r.len(), runs, "{s}: {r:?}");
        for run in r {
            let samples = run["samples"].as_array().unwrap();
            assert!(samples.len() >= 3, "{s}: {run}");
            assert!(samples.iter().all(|x| x["world"] == world
                && x["backend"] == "gloo"
                && x["busbw_gbps"].as_f64().unwrap() > 0.0));
        }
    }
    assert!(stage("all").is_empty(), "two nodes are one pair");
    assert_eq!(
        v["findings"],
        serde_json::json!([]),
        "CPU rates are not judged"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("No run reached a GPU"), "{md}");
    assert!(md.contains("![3. Node pairs](pair-busbw.svg)"), "{md}");
    for plot in ["node-busbw.svg", "pair-busbw.svg"] {
        let svg = std::fs::read_to_string(dir.join(plot)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("polyline"),
            "{plot}"
        );
    }
    assert!(
        std::fs::read_to_string(dir.join("pair-busbw.svg"))
            .unwrap()
            .contains("n[1-2]")
    );
    // They were ordinary jobs, in the accounting under their names.
    let acct = c.json("gacct", &["--name", "burnin-pair-n1-n2"]);
    let jobs = acct["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{acct}");
    assert_eq!(jobs[0]["node_list"], "n[1-2]");
    assert_eq!(jobs[0]["gpus"], 4);

    // A node without the Python asked for: the run fails, and the finding says so.
    let o = c.cli(
        "gctl",
        &[
            "burn-in",
            "-w",
            "n1",
            "--quick",
            "--python",
            "/nonexistent/python3",
            "--json",
            "--out",
            c.path("bad").to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "burn-in-run-failed", "{v}");
    assert_eq!(f["node"], "n1");
    let out = c.cli("gctl", &["burn-in", "-w", "n9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no node n9"));
}

#[test]
fn t30_the_probe_checks_paths_and_the_training_network_between_nodes() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "ws-2gpu-nvlink.json", &[]);
    c.add_agent("n2", "ws-2gpu-nvlink.json", &[]);
    let kinds = |v: &Value| -> Vec<(String, String)> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["node"].as_str().unwrap().to_string(),
                    f["kind"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // Healthy nodes that talk to each other: only the path that is not there.
    let v = c.json(
        "gctl",
        &["doctor", "--probe", "--paths", "/,/nonexistent-datasets"],
    );
    let mut k = kinds(&v);
    k.retain(|(_, kind)| kind != "disk-nearly-full");
    k.sort();
    assert_eq!(
        k,
        [("n1", "path-missing"), ("n2", "path-missing")]
            .map(|(n, kind)| (n.to_string(), kind.to_string())),
        "{v}"
    );
    let missing = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "path-missing")
        .unwrap();
    assert!(
        missing["evidence"]
            .as_str()
            .unwrap()
            .contains("/nonexistent-datasets"),
        "{missing}"
    );
    // A node whose agent names a training address the host does not have.
    c.add_agent(
        "n3",
        "ws-2gpu-nvlink.json",
        &["--training-addr", "192.0.2.1"],
    );
    let v = c.json("gctl", &["doctor", "--probe"]);
    let k = kinds(&v);
    assert!(
        k.contains(&("n3".into(), "training-address-not-on-node".into())),
        "{v}"
    );
    assert!(
        !k.iter()
            .any(|(_, kind)| kind == "training-network-unreachable"
                || kind == "mtu-mismatch-on-path"
                || kind == "clock-skew"),
        "n1 and n2 still reach each other: {v}"
    );
}

#[test]
fn t40_a_node_whose_login_shells_would_find_slurms_own_clients_is_named() {
    if !std::path::Path::new("/usr/bin/srun").exists() {
        return;
    }
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    let profile_d = c.path("profile.d");
    std::fs::create_dir_all(&profile_d).unwrap();
    // n1 can install its snippet; n2's profile directory is not a directory.
    c.add_agent(
        "n1",
        "rtx4090-8gpu.json",
        &[
            "--slurm-names",
            &links,
            "--profile-d",
            profile_d.to_str().unwrap(),
        ],
    );
    c.add_agent(
        "n2",
        "rtx4090-8gpu.json",
        &[
            "--slurm-names",
            &links,
            "--profile-d",
            "/dev/null/profile.d",
        ],
    );
    let snippet = std::fs::read_to_string(profile_d.join("gsched-slurm-names.sh")).unwrap();
    assert!(
        snippet.contains("$GSCHED_SLURM_NAMES") && snippet.contains("GSCHED_JOB_ID"),
        "{snippet}"
    );
    let found = gsched_tests::wait_for(
        "n2's host finding",
        std::time::Duration::from_secs(30),
        || {
            let v = c.json("gctl", &["doctor"]);
            let f: Vec<Value> = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["kind"] == "slurm-names-shadowed")
                .cloned()
                .collect();
            (!f.is_empty()).then_some(f)
        },
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["node"], "n2");
    assert!(
        found[0]["evidence"]
            .as_str()
            .unwrap()
            .contains("/usr/bin/srun"),
        "{}",
        found[0]
    );
}
