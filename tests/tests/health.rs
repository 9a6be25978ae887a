//! Node health through real processes: a GPU falling off the bus (Xid 79 in the kernel
//! log) drains the node and fails the job on that GPU with GpuLost, which requeues on
//! another node; a GPU vanishing from the (fake) topology drains the node; an
//! application-level Xid does not; `gctl node resume` clears a drain; the training
//! interface going down drains while a mismatched MTU only warns; the open driver's
//! three-line "fallen off the bus" (no Xid) fails only the job on that GPU, and a flood of
//! corrected PCIe AER errors warns without draining; NCCL running over sockets on nodes
//! with RDMA is a warning on the job (not on a one-node job), and a library NCCL could
//! not load is named as the failure's cause. The GPU health probe, on a fake device
//! state changed while the agent runs: each outcome (lost, reset required, remap
//! pending, ECC errors, the active check failing or hanging) found after an unknown
//! kernel line and after a failed job, and between jobs: a failed job's GPUs go to the
//! next job only once the probe says they are healthy, and are drained when not. Also checks
//! `gagentd discover --json` on every topology fixture and its round trip as a fake
//! topology.

use gsched_tests::{Cluster, bin, topology, wait_for, workspace};
use std::io::Write;
use std::time::Duration;

fn append(path: &std::path::Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

fn drained(c: &Cluster, node: &str) -> Option<serde_json::Value> {
    c.node(node)
        .filter(|n| n["state"].as_str().is_some_and(|s| s.starts_with("dr")))
}

#[test]
fn t10_xid79_drains_fails_the_job_and_requeue_avoids_the_node() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    let script = c.script("train.sh", "#!/bin/bash\nexec sleep 600\n");
    // Both nodes are idle and alike: the job lands on n1 (names break ties).
    let id = c.submit(&["--gpus-per-node", "8", "--requeue", &script]);
    let job = c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(job["node_list"], "n1");
    // GPU 2 of the fake 4090 box is at PCI 0000:21:00.
    append(
        &c.kmsg("n1"),
        "[Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:21:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    );
    let node = wait_for("n1 to be drained", Duration::from_secs(20), || {
        drained(&c, "n1")
    });
    assert!(
        node["drain_reason"].as_str().unwrap().contains("Xid 79"),
        "{node}"
    );
    assert_eq!(node["bad_gpus"], serde_json::json!([2]));
    let job = wait_for("the job to be requeued", Duration::from_secs(30), || {
        c.job(id).filter(|j| j["restarts"] == 1)
    });
    let acct = c.json("gacct", &["-j", &id.to_string()]);
    let first = &acct["jobs"][0]["attempts"][0];
    assert_eq!(first["state"], "NODE_FAIL");
    assert_eq!(first["failure"]["kind"], "gpu_lost");
    assert_eq!(first["failure"]["node"], "n1");
    // The requeued job runs elsewhere (n1 is drained and to be avoided anyway).
    let _ = job;
    let running = c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(running["node_list"], "n2");
    // An admin resumes the node after fixing it.
    c.ok("gctl", &["node", "resume", "n1"]);
    let n1 = wait_for("n1 resumed", Duration::from_secs(10), || {
        c.node("n1").filter(|n| n["state"] == "idle")
    });
    assert_eq!(n1["bad_gpus"], serde_json::json!([]));
    c.ok("gcancel", &[&id.to_string()]);
}

#[test]
fn t20_a_gpu_vanishing_from_the_topology_drains_the_node() {
    let mut c = Cluster::controllers(1, &[]);
    let topo_path = c.path("box.json");
    std::fs::copy(topology("rtx4090-8gpu.json"), &topo_path).unwrap();
    c.add_agent_with("n1", topo_path.clone(), &[]);
    // Rewrite the topology without GPU 5 (matched by UUID, indices shift).
    let mut t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&topo_path).unwrap()).unwrap();
    let gpus = t["gpus"].as_array_mut().unwrap();
    gpus.remove(5);
    for (i, g) in gpus.iter_mut().enumerate() {
        g["index"] = serde_json::json!(i);
    }
    let links = t["gpu_links"].as_array_mut().unwrap();
    links.remove(5);
    for row in links.iter_mut() {
        row.as_array_mut().unwrap().remove(5);
    }
    t["gpu_nic_links"].as_array_mut().unwrap().remove(5);
    std::fs::write(&topo_path, serde_json::to_vec_pretty(&t).unwrap()).unwrap();
    let node = wait_for("n1 to be drained", Duration::from_secs(20), || {
        drained(&c, "n1")
    });
    assert_eq!(node["bad_gpus"], serde_json::json!([5]), "{node}");
    assert!(
        node["drain_reason"]
            .as_str()
            .unwrap()
            .contains("no longer visible")
    );
    let health = node["health"].as_array().unwrap();
    assert!(
        health
            .iter()
            .any(|h| h["kind"] == "gpu_lost" && h["severity"] == "critical" && h["gpu"] == 5)
    );
}

#[test]
fn t30_an_application_xid_is_a_warning_not_a_drain() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    append(
        &c.kmsg("n1"),
        "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:01:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    );
    let node = wait_for(
        "the warning to be recorded",
        Duration::from_secs(20),
        || {
            c.node("n1")
                .filter(|n| n["health"].as_array().is_some_and(|h| !h.is_empty()))
        },
    );
    assert_eq!(node["health"][0]["severity"], "warning");
    assert_eq!(node["health"][0]["xid"], 13);
    assert_eq!(
        node["state"], "idle",
        "an application error does not drain the node"
    );
}

#[test]
fn t40_discover_json_on_every_fixture_round_trips() {
    let dir = workspace().join("tests/fixtures/topo");
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.contains(".xml") {
            continue;
        }
        let out = std::process::Command::new(bin("gagentd"))
            .args(["discover", "--json", "--nvidia-smi-topo"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let gpus = doc["gpus"].as_array().unwrap();
        let n = gpus.len();
        assert!(n > 0, "{name}");
        for g in gpus {
            for key in ["index", "uuid", "pci_bus_id", "model", "numa_node", "cpus"] {
                assert!(g.get(key).is_some(), "{name}: gpu lacks {key}");
            }
        }
        let links = doc["gpu_links"].as_array().unwrap();
        assert_eq!(links.len(), n);
        assert!(
            links
                .iter()
                .all(|r| r.as_array().unwrap().iter().all(|c| c.as_str().is_some()))
        );
        for nic in doc["nics"].as_array().unwrap() {
            assert!(["ib", "roce", "ethernet", "virtual"].contains(&nic["kind"].as_str().unwrap()));
            assert!(nic.get("numa_node").is_some());
        }
        // What discovery printed is accepted back as a fake topology, unchanged.
        let saved = tmp.path().join(format!("{name}.json"));
        std::fs::write(&saved, &out.stdout).unwrap();
        let again = std::process::Command::new(bin("gagentd"))
            .args(["discover", "--json", "--fake-topology"])
            .arg(&saved)
            .output()
            .unwrap();
        let mut a: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        let mut b = doc.clone();
        a["source"] = serde_json::Value::Null;
        b["source"] = serde_json::Value::Null;
        assert_eq!(a, b, "{name}: round trip changed the topology");
    }
}

#[test]
fn t50_the_training_interface_going_down_drains_and_an_mtu_mismatch_warns() {
    let mut c = Cluster::controllers(1, &[]);
    let topo_path = c.path("box.json");
    std::fs::copy(topology("rtx4090-8gpu.json"), &topo_path).unwrap();
    // The RoCE port runs MTU 9000; tell the agent the training network uses 4200.
    c.add_agent_with(
        "n1",
        topo_path.clone(),
        &["--training-iface", "enp65s0f0np0", "--training-mtu", "4200"],
    );
    let node = wait_for("the MTU warning", Duration::from_secs(20), || {
        c.node("n1").filter(|n| {
            n["health"]
                .as_array()
                .is_some_and(|h| h.iter().any(|e| e["kind"] == "mtu_mismatch"))
        })
    });
    let warning = node["health"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "mtu_mismatch")
        .unwrap()
        .clone();
    assert_eq!(warning["severity"], "warning");
    assert!(
        warning["message"].as_str().unwrap().contains("MTU 9000"),
        "{warning}"
    );
    assert_eq!(
        node["state"], "idle",
        "a mismatched MTU warns, it does not drain"
    );

    // The management NIC going down only warns; the training interface going down drains.
    let mut t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&topo_path).unwrap()).unwrap();
    for nic in t["nics"].as_array_mut().unwrap() {
        if nic["name"] == "eno1" || nic["name"] == "enp65s0f0np0" {
            nic["up"] = serde_json::json!(false);
        }
    }
    std::fs::write(&topo_path, serde_json::to_vec_pretty(&t).unwrap()).unwrap();
    let node = wait_for("n1 to be drained", Duration::from_secs(20), || {
        drained(&c, "n1")
    });
    assert!(
        node["drain_reason"]
            .as_str()
            .unwrap()
            .contains("training interface enp65s0f0np0 is down"),
        "{node}"
    );
    let health = node["health"].as_array().unwrap();
    assert!(
        health.iter().any(|e| e["kind"] == "nic_down"
            && e["severity"] == "warning"
            && e["message"] == "NIC eno1 is down"),
        "{health:?}"
    );
}

#[test]
fn t60_the_open_drivers_three_line_bus_loss_and_an_aer_flood() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("train.sh", "#!/bin/bash\nexec sleep 600\n");
    // Two jobs: GPUs 0-1 and 2-3 (GPU 2 is at 0000:21:00).
    let first = c.submit(&["--gpus-per-node", "2", &script]);
    c.wait_state(first, &["RUNNING"], Duration::from_secs(30));
    let second = c.submit(&["--gpus-per-node", "2", &script]);
    let job = c.wait_state(second, &["RUNNING"], Duration::from_secs(30));
    let gpus = &job["allocation"]["nodes"][0]["gpus"];
    let (lost, spared) = if gpus.as_array().unwrap().contains(&serde_json::json!(2)) {
        (second, first)
    } else {
        (first, second)
    };
    // A flood of corrected AER errors from a PCIe port only warns.
    for i in 0..25 {
        append(
            &c.kmsg("n1"),
            &format!(
                "[68183.{i:06}] pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Receiver ID)"
            ),
        );
    }
    let node = wait_for("the AER warning", Duration::from_secs(20), || {
        c.node("n1").filter(|n| {
            n["health"]
                .as_array()
                .is_some_and(|h| h.iter().any(|e| e["kind"] == "pcie_degraded"))
        })
    });
    assert_eq!(node["state"], "mix", "a warning does not drain: {node}");
    // The open driver's message (no Xid), line by line as the kernel writes it.
    for line in [
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:21:00.0",
        "               NVRM: (PCI ID: 10de:2684) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
    ] {
        append(&c.kmsg("n1"), line);
        std::thread::sleep(Duration::from_millis(300));
    }
    let node = wait_for("n1 to be drained", Duration::from_secs(20), || {
        drained(&c, "n1")
    });
    assert!(
        node["drain_reason"]
            .as_str()
            .unwrap()
            .contains("0000:21:00 has fallen off the bus"),
        "{node}"
    );
    assert_eq!(node["bad_gpus"], serde_json::json!([2]));
    // The live monitor's events carry the same finding `gagentd diagnose` makes of the
    // same lines, with the GPU the node could name.
    let health = node["health"].as_array().unwrap();
    let live = health
        .iter()
        .find(|e| e["kind"] == "gpu_lost")
        .map(|e| e["finding"].clone())
        .unwrap_or_else(|| panic!("{node}"));
    assert_eq!(
        (
            live["kind"].as_str(),
            live["severity"].as_str(),
            live["component"].as_str(),
            live["gpu"].as_u64(),
            live["pci_bus_id"].as_str()
        ),
        (
            Some("gpu-lost"),
            Some("fail-job"),
            Some("gpu"),
            Some(2),
            Some("0000:21:00")
        ),
        "{live}"
    );
    let flood = health
        .iter()
        .find(|e| e["kind"] == "pcie_degraded")
        .map(|e| e["finding"].clone())
        .unwrap();
    assert_eq!(
        (flood["kind"].as_str(), flood["severity"].as_str()),
        (Some("pcie-corrected"), Some("warn")),
        "{flood}"
    );
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("kern.log");
    std::fs::copy(c.kmsg("n1"), &saved).unwrap();
    let out = std::process::Command::new(bin("gagentd"))
        .args(["diagnose", "--json"])
        .arg(&saved)
        .output()
        .unwrap();
    let read: serde_json::Value =
        serde_json::from_str(&gsched_tests::success_stdout(&out, "gagentd diagnose")).unwrap();
    let offline = read["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "gpu-lost")
        .cloned()
        .unwrap_or_else(|| panic!("{read}"));
    for key in ["severity", "component", "pci_bus_id", "action"] {
        assert_eq!(offline[key], live[key], "{key}: {offline} vs {live}");
    }
    let ended = c.wait_state(lost, &["NODE_FAIL"], Duration::from_secs(30));
    assert_eq!(ended["failure"]["kind"], "gpu_lost", "{ended}");
    assert_eq!(
        c.job(spared).unwrap()["state"],
        "RUNNING",
        "the job on GPUs 0-1 runs on"
    );
    c.ok("gcancel", &[&spared.to_string()]);
}

#[test]
fn t70_an_ib_port_error_stops_a_job_that_would_hang_and_evidence_names_the_first_cause() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    // NCCL only warns about the port error and the ranks hang: the job must be stopped.
    let hang = c.script(
        "hang.sh",
        "#!/bin/bash\necho 'n1:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error'\nexec sleep 600\n",
    );
    let id = c.submit(&["--gpus-per-node", "1", &hang]);
    let job = c.wait_state(id, &["FAILED"], Duration::from_secs(30));
    assert_eq!(job["failure"]["kind"], "nccl_error", "{job}");
    assert!(
        job["failure"]["evidence"]
            .as_str()
            .unwrap()
            .contains("Got async event : port error"),
        "{job}"
    );
    // A refused connect, then NCCL's 'unhandled system error': NCCL never recovers from
    // the refused connect, so the job stops on it, with it as the evidence.
    let echo = c.script(
        "echo.sh",
        "#!/bin/bash\necho '*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused'\necho \"NCCL failure train.cu:110 'unhandled system error'\"\nexit 1\n",
    );
    let id = c.submit(&["--gpus-per-node", "1", &echo]);
    let job = c.wait_state(id, &["FAILED"], Duration::from_secs(30));
    let evidence = job["failure"]["evidence"].as_str().unwrap().to_string();
    assert!(
        evidence.starts_with(
            "*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused"
        ),
        "{evidence}"
    );
}

#[test]
fn t80_a_critical_xid_on_an_unknown_gpu_stops_every_job_and_a_nonfatal_nvlink_one_only_warns() {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("train.sh", "#!/bin/bash\nexec sleep 600\n");
    let a = c.submit(&["--gpus-per-node", "2", &script]);
    let b = c.submit(&["--gpus-per-node", "2", &script]);
    c.wait_state(a, &["RUNNING"], Duration::from_secs(30));
    c.wait_state(b, &["RUNNING"], Duration::from_secs(30));
    // A nonfatal NVLink error on GPU 0 (0000:01:00): a warning, the jobs run on.
    append(
        &c.kmsg("n1"),
        "NVRM: Xid (PCI:0000:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
    );
    let node = wait_for("the NVLink warning", Duration::from_secs(20), || {
        c.node("n1").filter(|n| {
            n["health"]
                .as_array()
                .is_some_and(|h| h.iter().any(|e| e["xid"] == 145))
        })
    });
    assert_eq!(node["health"][0]["severity"], "warning", "{node}");
    assert!(
        drained(&c, "n1").is_none(),
        "a nonfatal NVLink error does not drain"
    );
    // A fatal one on an address that is none of the node's GPUs: no GPU can be trusted.
    append(
        &c.kmsg("n1"),
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    );
    let node = wait_for("n1 to be drained", Duration::from_secs(20), || {
        drained(&c, "n1")
    });
    let reason = node["drain_reason"].as_str().unwrap();
    assert!(
        reason.contains("a GPU this node cannot name (PCI 0000:00:00)"),
        "{reason}"
    );
    assert!(!reason.contains("GPU ?"), "{reason}");
    for id in [a, b] {
        let job = c.wait_state(id, &["NODE_FAIL", "FAILED"], Duration::from_secs(30));
        assert_eq!(
            (job["state"].as_str(), job["failure"]["kind"].as_str()),
            (Some("FAILED"), Some("gpu_xid")),
            "{job}"
        );
        assert!(
            job["failure"]["evidence"]
                .as_str()
                .unwrap()
                .contains("every job on the node is stopped"),
            "{job}"
        );
    }
}

#[test]
fn t90_nccl_on_sockets_where_the_node_has_rdma_warns_on_the_job_and_a_missing_library_is_the_cause()
{
    let mut c = Cluster::controllers(1, &[]);
    // Both nodes have a RoCE port (enp65s0f0np0, mlx5_0).
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    // What NCCL writes when libibverbs cannot be loaded: it runs over TCP, and the job
    // goes on (slowly).
    let fallback = c.script(
        "fallback.sh",
        "#!/bin/bash\n\
         echo \"$(hostname):100:200 [0] NCCL INFO Failed to open libibverbs.so[.1]\"\n\
         echo \"$(hostname):100:200 [0] NCCL INFO NET/Socket : Using [0]eno1:192.0.2.7<0>\"\n\
         echo \"$(hostname):100:200 [0] NCCL INFO Using network Socket\"\n\
         exec sleep 600\n",
    );
    let id = c.submit(&["-N", "2", "--gpus-per-node", "1", &fallback]);
    let job = wait_for("the transport warning", Duration::from_secs(30), || {
        c.job(id)
            .filter(|j| j["warnings"].as_array().is_some_and(|w| w.len() == 2))
    });
    assert_eq!(
        job["state"], "RUNNING",
        "a warning does not stop the job: {job}"
    );
    for w in job["warnings"].as_array().unwrap() {
        assert_eq!(
            (w["kind"].as_str(), w["severity"].as_str()),
            (Some("nccl-socket-despite-rdma"), Some("warn")),
            "{w}"
        );
        let action = w["action"].as_str().unwrap();
        assert!(
            action.contains("mlx5_0") && action.contains("could not load libibverbs"),
            "{action}"
        );
        assert!(["n1", "n2"].contains(&w["node"].as_str().unwrap()), "{w}");
    }
    let shown = c.ok("gctl", &["show", "job", &id.to_string()]);
    assert!(
        shown.contains("Warning[n1]=nccl-socket-despite-rdma")
            && shown.contains("Warning[n2]=nccl-socket-despite-rdma"),
        "{shown}"
    );
    c.ok("gcancel", &[&id.to_string()]);
    c.wait_state(id, &["CANCELLED"], Duration::from_secs(30));

    // A one-node job: NCCL names a network but never uses it, so no warning.
    let one = c.submit(&["--gpus-per-node", "1", &fallback]);
    c.wait_state(one, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    let job = c.job(one).unwrap();
    assert!(job.get("warnings").is_none(), "{job}");
    c.ok("gcancel", &[&one.to_string()]);

    // NVML's library missing: NCCL's only WARN names it, then "unhandled system error".
    // The failure's evidence says which library, first.
    let nvml = c.script(
        "nvml.sh",
        "#!/bin/bash\n\
         echo \"[2025-06-12 16:57:52] $(hostname):842624:842643 [0] misc/nvmlwrap.cc:74 NCCL WARN Failed to open libnvidia-ml.so.1\"\n\
         echo \"$(hostname):842624:842643 [0] NCCL INFO init.cc:355 -> 2\"\n\
         echo \"$(hostname): Test NCCL failure common.cu:1119 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\"\n\
         exit 1\n",
    );
    let id = c.submit(&["--gpus-per-node", "1", &nvml]);
    let job = c.wait_state(id, &["FAILED"], Duration::from_secs(30));
    assert_eq!(job["failure"]["kind"], "nccl_error", "{job}");
    let evidence = job["failure"]["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("libnvidia-ml could not be loaded")
            && evidence.contains("NCCL WARN Failed to open libnvidia-ml.so.1"),
        "{evidence}"
    );
}

/// An agent's fake device state file and the flags that give it to the agent, with the
/// active check's limit (short, so a hang costs the test little).
fn probe_flags(c: &Cluster, node: &str, limit_s: u32) -> (std::path::PathBuf, Vec<String>) {
    let path = c.path(&format!("gpu-state-{node}.json"));
    set_gpu_state(&path, "{}");
    let flags = vec![
        "--fake-gpu-state".to_string(),
        path.to_string_lossy().into_owned(),
        "--active-check-timeout".into(),
        limit_s.to_string(),
    ];
    (path, flags)
}

/// Replaces the fake device state whole (written aside and renamed, so the agent never
/// reads half a file).
fn set_gpu_state(path: &std::path::Path, json: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The node's health event about `gpu` whose finding is `kind`.
fn probe_event(c: &Cluster, node: &str, gpu: u32, kind: &str) -> Option<serde_json::Value> {
    c.node(node)?["health"]
        .as_array()?
        .iter()
        .find(|e| e["gpu"] == gpu && e["finding"]["kind"] == kind)
        .cloned()
}

/// Each outcome class of the probe: its fake state and the finding it gives.
const OUTCOMES: [(&str, &str, &str); 6] = [
    ("lost", r#"{"lost": true}"#, "gpu-lost"),
    (
        "reset required",
        r#"{"reset_required": true}"#,
        "gpu-reset-required",
    ),
    (
        "remap pending",
        r#"{"remap_pending": true}"#,
        "gpu-remap-pending",
    ),
    ("ECC", r#"{"ecc_uncorrected": 4}"#, "gpu-ecc-uncorrected"),
    (
        "active check fails",
        r#"{"active": {"fail": "CUDA_ERROR_ECC_UNCORRECTABLE"}}"#,
        "gpu-active-check-failed",
    ),
    (
        "active check hangs",
        r#"{"active": "hang"}"#,
        "gpu-active-check-hang",
    ),
];

/// The fake 4090 box's GPU addresses, as the driver prints them.
const BUSES: [&str; 8] = [
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:21:00.0",
    "0000:22:00.0",
    "0000:81:00.0",
    "0000:82:00.0",
    "0000:a1:00.0",
    "0000:a2:00.0",
];

#[test]
fn p10_an_unknown_kernel_line_about_a_gpu_probes_it_and_each_bad_state_drains_it() {
    let mut c = Cluster::controllers(1, &[]);
    let (state, flags) = probe_flags(&c, "n1", 2);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    c.add_agent("n1", "rtx4090-8gpu.json", &flags);
    // A healthy GPU's unknown line: a warning, probed, found healthy (checked once a later
    // probe, queued after it, has reported).
    append(
        &c.kmsg("n1"),
        &format!(
            "NVRM: GPU {}: an event gsched has never seen (test 7)",
            BUSES[7]
        ),
    );
    let mut bad = String::from("{");
    for (k, (outcome, fake, kind)) in OUTCOMES.iter().enumerate() {
        if k > 0 {
            bad.push(',');
        }
        bad.push_str(&format!("\"{k}\": {fake}"));
        set_gpu_state(&state, &format!("{bad}}}"));
        let line = format!(
            "NVRM: GPU {}: GPU requires attention, status 0x{k:x} (an unknown message)",
            BUSES[k]
        );
        append(&c.kmsg("n1"), &line);
        let ev = wait_for(
            &format!("the probe to find GPU {k} {outcome}"),
            Duration::from_secs(30),
            || probe_event(&c, "n1", k as u32, kind),
        );
        assert_eq!(ev["severity"], "critical", "{outcome}: {ev}");
        let evidence = ev["finding"]["evidence"].as_str().unwrap();
        assert!(
            evidence.contains(&format!("probed after: {line}")),
            "{outcome}: the line is the evidence: {evidence}"
        );
        assert!(
            ev["message"]
                .as_str()
                .unwrap()
                .starts_with("health probe: "),
            "{ev}"
        );
    }
    let node = drained(&c, "n1").expect("drained");
    assert_eq!(node["bad_gpus"], serde_json::json!([0, 1, 2, 3, 4, 5]));
    assert!(
        node["drain_reason"]
            .as_str()
            .unwrap()
            .contains("NVML reports GPU 0 lost"),
        "{node}"
    );
    assert!(
        !node["health"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["gpu"] == 7 && e["severity"] == "critical"),
        "a healthy GPU's probe finds nothing wrong: {node}"
    );
    // Unknown is visible, never silent: the line is a warning naming the GPU, and the
    // probe's verdict follows as its own event.
    let warned = probe_event(&c, "n1", 7, "nvrm-unrecognised").expect("a warning");
    assert_eq!(warned["severity"], "warning", "{warned}");
    let verdict = probe_event(&c, "n1", 7, "gpu-probe-healthy").expect("the verdict");
    assert_eq!(verdict["severity"], "info", "{verdict}");
    assert!(
        verdict["finding"]["evidence"]
            .as_str()
            .unwrap()
            .contains("GPU 7 healthy"),
        "{verdict}"
    );
}

/// Ends a job that fails as `script` says on the whole node and returns its first
/// attempt (`gacct`).
fn failed_attempt(c: &Cluster, name: &str, script: &str) -> serde_json::Value {
    let script = c.script(name, &format!("#!/bin/bash\n{script}\n"));
    let id = c.submit(&["--gpus-per-node", "8", &script]);
    c.wait_state(
        id,
        &["FAILED", "NODE_FAIL", "COMPLETED", "CANCELLED"],
        Duration::from_secs(60),
    );
    let acct = c.json("gacct", &["-j", &id.to_string()]);
    acct["jobs"][0]["attempts"][0].clone()
}

#[test]
fn p20_a_failed_jobs_gpus_are_probed_and_the_failure_names_the_gpu_found_bad() {
    let mut c = Cluster::controllers(1, &[]);
    let (state, flags) = probe_flags(&c, "n1", 2);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    c.add_agent("n1", "rtx4090-8gpu.json", &flags);
    // Healthy GPUs: the job's failure stands as its own, nothing is drained.
    let first = failed_attempt(&c, "ok.sh", "echo 'something broke'; exit 3");
    assert_eq!(first["failure"]["kind"], "exit_code", "{first}");
    assert_eq!(c.node("n1").unwrap()["state"], "idle");
    // Failures of unknown cause, CUDA errors, signals: each probes, and GPU 2's state
    // becomes the job's failure.
    let causes = [
        "exit 1",
        "echo 'RuntimeError: CUDA error: uncorrectable ECC error encountered' >&2; exit 1",
        "kill -SEGV $$",
    ];
    for (k, (outcome, fake, kind)) in OUTCOMES.iter().enumerate() {
        set_gpu_state(&state, &format!("{{\"2\": {fake}}}"));
        let attempt = failed_attempt(&c, &format!("fail{k}.sh"), causes[k % causes.len()]);
        let failure = &attempt["failure"];
        assert_eq!(attempt["state"], "NODE_FAIL", "{outcome}: {attempt}");
        assert_eq!(failure["kind"], "gpu_lost", "{outcome}: {failure}");
        assert_eq!(failure["gpu"], 2, "{outcome}: {failure}");
        assert!(
            failure["evidence"].as_str().unwrap().contains("GPU 2"),
            "{outcome}: {failure}"
        );
        let ev = probe_event(&c, "n1", 2, kind).unwrap_or_else(|| panic!("{outcome}: no {kind}"));
        assert!(
            ev["finding"]["evidence"]
                .as_str()
                .unwrap()
                .contains("probed after: job "),
            "{ev}"
        );
        let node = drained(&c, "n1").unwrap_or_else(|| panic!("{outcome}: not drained"));
        assert_eq!(node["bad_gpus"], serde_json::json!([2]), "{outcome}");
        // Fixed and resumed for the next outcome.
        set_gpu_state(&state, "{}");
        c.ok("gctl", &["node", "resume", "n1"]);
        wait_for("n1 resumed", Duration::from_secs(10), || {
            c.node("n1").filter(|n| n["state"] == "idle")
        });
    }
}

#[test]
fn p30_between_jobs_a_failed_jobs_gpus_wait_for_the_probe_and_a_bad_one_is_never_given_again() {
    let mut c = Cluster::controllers(1, &[]);
    let (state, mut flags) = probe_flags(&c, "n1", 10);
    let metrics = format!("127.0.0.1:{}", gsched_tests::free_port());
    flags.extend(["--metrics".to_string(), metrics.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    c.add_agent("n1", "rtx4090-8gpu.json", &flags);
    // GPU 0's check takes 3 s and passes: the job's GPUs are held that long.
    set_gpu_state(&state, r#"{"0": {"active": {"slow": 3000}}}"#);
    let exited = c.path("a.exited");
    let a = c.script(
        "a.sh",
        &format!("#!/bin/bash\ndate +%s%3N > {}\nexit 3\n", exited.display()),
    );
    let b = c.script("b.sh", "#!/bin/bash\nexec sleep 600\n");
    let a = c.submit(&["--gpus-per-node", "8", &a]);
    let b = c.submit(&["--gpus-per-node", "8", &b]);
    let b_row = c.wait_state(b, &["RUNNING"], Duration::from_secs(60));
    let a_row = c.job(a).unwrap();
    assert_eq!(a_row["state"], "FAILED", "{a_row}");
    assert_eq!(
        a_row["failure"]["kind"], "exit_code",
        "a healthy probe leaves the job's own failure: {a_row}"
    );
    let exited_ms: u64 = std::fs::read_to_string(&exited)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let a_end = a_row["end_ms"].as_u64().unwrap();
    let b_start = b_row["start_ms"].as_u64().unwrap();
    assert!(
        a_end >= exited_ms + 2_500,
        "the run's end waits for the probe: exited at {exited_ms}, ended at {a_end}"
    );
    assert!(
        b_start >= a_end,
        "B started at {b_start}, before A ended at {a_end}"
    );
    assert_eq!(c.node("n1").unwrap()["state"], "alloc");
    // The probe's time is counted.
    let text = wait_for("the probe's metrics", Duration::from_secs(10), || {
        let t = gsched_tests::http::request(&metrics, "GET", "/metrics", "", b"");
        t.contains("gsched_agent_gpu_probes{trigger=\"failed_run\"} 1")
            .then_some(t)
    });
    let last: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("gsched_agent_gpu_probe_last_seconds "))
        .expect("last probe's time")
        .trim()
        .parse()
        .unwrap();
    assert!((2.5..30.0).contains(&last), "{last}\n{text}");
    // A cancelled job is not a failed one: no probe.
    c.ok("gcancel", &[&b.to_string()]);
    c.wait_state(b, &["CANCELLED"], Duration::from_secs(30));
    // GPU 5 now needs a reset: the next failed job's probe drains it, and a job
    // submitted meanwhile does not get it.
    set_gpu_state(&state, r#"{"5": {"reset_required": true}}"#);
    let fail = c.script("c.sh", "#!/bin/bash\nsleep 1\nexit 1\n");
    let next = c.script("d.sh", "#!/bin/bash\nexec sleep 600\n");
    let failing = c.submit(&["--gpus-per-node", "8", &fail]);
    c.wait_state(failing, &["RUNNING"], Duration::from_secs(30));
    let waiting = c.submit(&["--gpus-per-node", "1", &next]);
    let row = c.wait_state(failing, &["NODE_FAIL"], Duration::from_secs(60));
    assert_eq!(row["failure"]["gpu"], 5, "{row}");
    let node = drained(&c, "n1").expect("drained");
    assert_eq!(node["bad_gpus"], serde_json::json!([5]));
    assert!(
        node["drain_reason"]
            .as_str()
            .unwrap()
            .contains("NVML reports GPU 5 needs a reset"),
        "{node}"
    );
    let d = c.job(waiting).unwrap();
    assert_eq!(
        d["state"], "PENDING",
        "nothing is given on a drained node: {d}"
    );
    let text = gsched_tests::http::request(&metrics, "GET", "/metrics", "", b"");
    assert!(
        text.contains("gsched_agent_gpu_probes{trigger=\"failed_run\"} 2"),
        "the cancel was not probed: {text}"
    );
    c.ok("gcancel", &[&waiting.to_string()]);
}
