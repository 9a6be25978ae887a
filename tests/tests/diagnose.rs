//! `gagentd diagnose FILE... --json` on saved outputs (the fixtures, each from a public
//! report): every family is read and turned into findings with the pinned JSON keys, each
//! file named with its family and the error lines no rule read; a
//! file that is none of them, or cannot be read, is reported as such.

use gsched_tests::{bin, success_stdout, workspace};
use serde_json::Value;
use std::process::Command;

fn diagnose(files: &[&str]) -> Vec<Value> {
    let paths: Vec<String> = files
        .iter()
        .map(|f| {
            if f.starts_with('/') {
                f.to_string()
            } else {
                workspace()
                    .join("tests/fixtures")
                    .join(f)
                    .to_string_lossy()
                    .into_owned()
            }
        })
        .collect();
    let out = Command::new(bin("gagentd"))
        .arg("diagnose")
        .arg("--json")
        .args(&paths)
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&success_stdout(&out, "gagentd diagnose")).unwrap();
    v["findings"].as_array().unwrap().clone()
}

fn find<'a>(all: &'a [Value], kind: &str) -> &'a Value {
    all.iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {all:#?}"))
}

#[test]
fn t10_every_family_of_saved_output() {
    let f = diagnose(&["xid/fallen-off-bus-open-driver-multiline-no-xid.txt"]);
    let lost = find(&f, "gpu-lost");
    assert_eq!(
        (
            lost["severity"].as_str(),
            lost["component"].as_str(),
            lost["pci_bus_id"].as_str()
        ),
        (Some("fail-job"), Some("gpu"), Some("0000:b3:00"))
    );
    for key in ["severity", "component", "kind", "evidence", "action"] {
        assert!(lost.get(key).is_some(), "{key} missing: {lost}");
    }
    // rsyslog's RFC 3339 lines (a remote syslog server's file) and journalctl's.
    let f = diagnose(&["xid/xid79-xid154-rsyslog-rfc3339-and-journal-rtx4080.txt"]);
    let count = |kind: &str, severity: &str| {
        f.iter()
            .filter(|x| x["kind"] == kind && x["severity"] == severity)
            .count()
    };
    assert_eq!(
        (
            count("xid-79", "fail-job"),
            count("xid-154", "fail-job"),
            count("gpu-lost", "fail-job")
        ),
        (4, 4, 3),
        "{f:#?}"
    );
    // Each also withholds its GPU: the fault's second outcome, as a drain.
    assert_eq!(
        (
            count("xid-79", "drain"),
            count("xid-154", "drain"),
            count("gpu-lost", "drain")
        ),
        (4, 4, 3),
        "{f:#?}"
    );
    assert!(
        f.iter().all(|x| x["pci_bus_id"] == "0000:01:00"
            && (x["severity"] == "fail-job" || x["severity"] == "drain")),
        "{f:#?}"
    );
    let f = diagnose(&["xid/aer-surprise-down-then-xid79-tesla.txt"]);
    assert_eq!(find(&f, "pcie-fatal")["pci_bus_id"], "0000:00:02");
    assert_eq!(find(&f, "xid-79")["severity"], "fail-job");
    let f = diagnose(&["xid/nvlink5-xid144-145-nonfatal-149-fatal-redacted-pci-gpud.txt"]);
    assert_eq!(
        (
            find(&f, "xid-145")["severity"].as_str(),
            find(&f, "xid-145")["component"].as_str()
        ),
        (Some("warn"), Some("nvlink"))
    );
    assert_eq!(find(&f, "xid-149")["severity"], "fail-job");
    let f = diagnose(&["xid/xid63-row-remapper-a100-plus-nvidia-smi-q-remap-pending.txt"]);
    assert_eq!(find(&f, "ecc-remap-pending")["pci_bus_id"], "0000:10:1c");
    let f = diagnose(&["smi/unable-to-determine-device-handle-nospace-variant-tesla-p4.txt"]);
    assert_eq!(find(&f, "gpu-lost")["severity"], "drain");
    let f = diagnose(&["ib/ibstatus-2port-roce-edr-one-down.txt"]);
    let down = find(&f, "ib-port-down");
    assert!(
        down["evidence"].as_str().unwrap().contains("mlx5_0 port 1"),
        "{down}"
    );
    assert_eq!(f.len(), 1, "mlx5_1 is active: {f:#?}");
    // A host with SR-IOV on: the VF beside its PF is told apart, not counted as a rail.
    let f = diagnose(&["ib/ibstat-cx6-pf-and-its-sriov-vf-openstack-host.txt"]);
    let vf = find(&f, "sriov-vf");
    assert!(
        vf["evidence"]
            .as_str()
            .unwrap()
            .contains("mlx5_1 (CA type MT4124) is an SR-IOV virtual function of mlx5_0"),
        "{vf}"
    );
    assert_eq!(f.len(), 1, "both ports are active: {f:#?}");
    let f = diagnose(&["ib/ibstat-cx7-roce-200g-plus-cx6dx-down-lexical-order.txt"]);
    assert!(
        f.iter().all(|x| x["kind"] != "sriov-vf"),
        "physical ports only: {f:#?}"
    );
    let f = diagnose(&["nccl/ib-async-port-error-job-keeps-running-litllama.txt"]);
    let nccl = &f[0];
    assert_eq!(
        (nccl["severity"].as_str(), nccl["component"].as_str()),
        (Some("fail-job"), Some("nccl"))
    );
    assert!(
        nccl["evidence"].as_str().unwrap().contains("port error"),
        "{nccl}"
    );
    let f = diagnose(&["nccl/socket-connect-failed-then-closed-by-remote-peer-nccl-tests.txt"]);
    assert!(
        f[0]["evidence"]
            .as_str()
            .unwrap()
            .contains("socketStartConnect"),
        "the first cause: {f:#?}"
    );
}

#[test]
fn t15_nccl_transport_and_missing_libraries() {
    // The only WARN is the missing NVML library: it is the cause, by name.
    let f = diagnose(&["nccl/missing-libnvidia-ml-unhandled-system-error-nccl-tests-320.txt"]);
    let lib = find(&f, "missing-libnvidia-ml");
    assert_eq!(
        (lib["severity"].as_str(), lib["component"].as_str()),
        (Some("fail-job"), Some("driver"))
    );
    let evidence = lib["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("libnvidia-ml could not be loaded")
            && evidence.contains("nvmlwrap.cc:74 NCCL WARN Failed to open libnvidia-ml.so.1"),
        "{evidence}"
    );
    let unread = find(&f, "unrecognised-lines");
    assert!(
        unread["evidence"]
            .as_str()
            .unwrap()
            .ends_with("read by no rule: .. gpu0301 pid 842624: Test failure common.cu:937"),
        "nccl-tests' own failure line is said to be unread: {unread}"
    );
    assert_eq!(f.len(), 2, "it ran over IB: no transport finding: {f:#?}");

    // Devices that exist but cannot be opened in a container: sockets over IPoIB.
    let f = diagnose(&["nccl/ib-devices-unopenable-in-container-socket-over-ib0-EXCERPT.txt"]);
    let ipoib = find(&f, "nccl-socket-over-ipoib");
    assert_eq!(
        (ipoib["severity"].as_str(), ipoib["component"].as_str()),
        (Some("warn"), Some("ib"))
    );
    let action = ipoib["action"].as_str().unwrap();
    assert!(
        action.contains("ib0") && action.contains("could not open the RDMA devices"),
        "{action}"
    );
    assert!(
        ipoib["evidence"]
            .as_str()
            .unwrap()
            .starts_with("NCCL WARN Call to ibv_open_device failed"),
        "{ipoib}"
    );

    // NCCL 2.27's wording, four IPoIB interfaces, the IB plugin failed to initialise.
    let f = diagnose(&["nccl/nccl227-ib-plugin-failed-socket-over-ipoib-jeanzay-EXCERPT.txt"]);
    let action = find(&f, "nccl-socket-over-ipoib")["action"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        action.contains("ibp24s0,ibp41s0,ibp154s0,ibp170s0"),
        "{action}"
    );

    // A desktop without RDMA: sockets because libibverbs is missing, said as information
    // only (a saved log cannot tell whether the machine has RDMA), and only since the
    // communicator spanned... one node: nothing at all.
    let f = diagnose(&["nccl/socket-fallback-libibverbs-missing-wsl-nccl-1653.txt"]);
    assert!(f.is_empty(), "one node never uses the network: {f:#?}");
    let f = diagnose(&["gpu/nccl-info-2node-socket.log"]);
    assert!(
        f.iter().all(|x| x["severity"] == "info"),
        "two nodes over eth0 with no RDMA found: at most information: {f:#?}"
    );
    // One node over NVLink: NCCL says "Using network Socket" and never uses it.
    let f = diagnose(&["nccl/nccl228-debug-info-2gpu-nvlink-h200.txt"]);
    assert!(
        f.iter()
            .all(|x| !x["kind"].as_str().unwrap().starts_with("nccl-socket")
                && x["kind"] != "nccl-rdma-unavailable"),
        "{f:#?}"
    );
}

#[test]
fn t25_smi_list_csv_ibdev2netdev_and_interfaces() {
    let f = diagnose(&["smi/nvidia-smi-L-4x-a100-80gb-mig-on-gpu0-only.txt"]);
    assert_eq!(f.len(), 1, "only GPU 0 has MIG devices: {f:#?}");
    let mig = find(&f, "mig-enabled");
    assert_eq!(mig["gpu"], 0);
    assert!(
        mig["evidence"]
            .as_str()
            .unwrap()
            .contains("split into 4 MIG devices"),
        "{mig}"
    );
    // Columns named by the quoted command; 44 C, fan unsupported: read, nothing wrong
    // (an unread file would say "unrecognised-file").
    let f = diagnose(&["smi/query-gpu-csv-noheader-nounits-NA-vs-not-supported.txt"]);
    assert!(f.is_empty(), "{f:#?}");
    let dir = tempfile::tempdir().unwrap();
    // DERIVED: the same query with its header row and one hot GPU on a narrowed link.
    let with_header = dir.path().join("query.csv");
    std::fs::write(
        &with_header,
        "index, pci.bus_id, temperature.gpu, pcie.link.width.current, pcie.link.width.max, ecc.errors.uncorrected.volatile.total\n\
         0, 00000000:18:00.0, 44, 16, 16, 0\n\
         1, 00000000:2A:00.0, 91, 8, 16, [N/A]\n",
    )
    .unwrap();
    let f = diagnose(&[with_header.to_str().unwrap()]);
    let hot = find(&f, "hot");
    assert_eq!(
        (hot["gpu"].as_u64(), hot["pci_bus_id"].as_str()),
        (Some(1), Some("0000:2a:00"))
    );
    assert_eq!(find(&f, "pcie-degraded")["gpu"], 1);
    assert_eq!(f.len(), 2, "GPU 0 is fine, [N/A] is no error count: {f:#?}");
    // Without the header or the query, the columns are unknown: said so, not guessed.
    let cut = dir.path().join("cut.csv");
    std::fs::write(
        &cut,
        "$ nvidia-smi --format=csv,noheader,nounits\n2004, 2004, 0, 91, [N/A], 0, 0\n",
    )
    .unwrap();
    let f = diagnose(&[cut.to_str().unwrap()]);
    assert_eq!(
        f.iter()
            .map(|x| x["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["unreadable-csv"],
        "{f:#?}"
    );
    let bare = dir.path().join("bare.csv");
    std::fs::write(&bare, "2004, 2004, 0, 44, [N/A], 0, 0\n").unwrap();
    let f = diagnose(&[bare.to_str().unwrap()]);
    assert_eq!(
        f.iter()
            .map(|x| x["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["unrecognised-file"],
        "a bare row of numbers is no recognisable output: {f:#?}"
    );

    // This repository's H200 (deploy/gpu/h200-evidence.sh): -L, the CSV with its header
    // and units, the NCCL debug file of a one-node job under gsched's defaults: all read,
    // nothing wrong (one node never uses the network it names).
    let f = diagnose(&[
        "gpu/nvidia-smi-L-h200.txt",
        "gpu/query-gpu-csv-header-h200.csv",
        "gpu/nccl-debug-default-init-env-1gpu-h200.log",
    ]);
    assert!(f.is_empty(), "{f:#?}");
    // The same CSV with the GPU at 90 C: its row, units and all, is read.
    let csv = std::fs::read_to_string(
        workspace().join("tests/fixtures/gpu/query-gpu-csv-header-h200.csv"),
    )
    .unwrap()
    .lines()
    .map(|l| {
        let mut cells: Vec<&str> = l.split(", ").collect();
        if cells[0] == "0" {
            cells[3] = "90";
        }
        cells.join(", ")
    })
    .collect::<Vec<_>>()
    .join("\n");
    let hot_h200 = dir.path().join("hot-h200.csv");
    std::fs::write(&hot_h200, csv).unwrap();
    let f = diagnose(&[hot_h200.to_str().unwrap()]);
    let hot = find(&f, "hot");
    assert_eq!(
        (hot["gpu"].as_u64(), hot["pci_bus_id"].as_str()),
        (Some(0), Some("0000:00:06"))
    );

    // RoCE ports whose netdev has no link; IPoIB netdevs "(Down)" say nothing.
    let f = diagnose(&["ib/ibdev2netdev-column-t-h100-cx7-ib-cx6-eth-annotated.txt"]);
    let down: Vec<&str> = f.iter().map(|x| x["evidence"].as_str().unwrap()).collect();
    assert_eq!(down.len(), 2, "{f:#?}");
    assert!(down[0].contains("mlx5_2 port 1 ==> enp27s0f1np1") && down[1].contains("mlx5_8"));

    // ifconfig and `ip a`: up without a carrier.
    let f = diagnose(&["ib/ifconfig-gpu-node-ib-roce-int0-mtu9000.txt"]);
    assert_eq!(f.len(), 3, "int0 and lo are fine: {f:#?}");
    let f = diagnose(&["ib/ip-a-x710-two-ports-no-carrier-mtu9000.txt"]);
    let names: Vec<&str> = f
        .iter()
        .map(|x| x["evidence"].as_str().unwrap().split(' ').next().unwrap())
        .collect();
    assert_eq!(names, vec!["enp101s0f0", "enp179s0f1"], "{f:#?}");
}

#[test]
fn t20_unknown_and_unreadable_files_are_said_to_be_so() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "lunch at noon\n").unwrap();
    let missing = dir.path().join("missing.txt");
    let f = diagnose(&[notes.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert_eq!(f[0]["kind"], "unrecognised-file");
    assert_eq!(f[1]["kind"], "unreadable-file");
    // A topo -m that lost its rows is refused with why, not read as something.
    let topo = dir.path().join("topo.txt");
    std::fs::write(&topo, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n").unwrap();
    let f = diagnose(&[topo.to_str().unwrap()]);
    assert_eq!(f[0]["kind"], "unreadable-topo", "{f:#?}");
}

#[test]
fn t30_every_file_is_named_with_its_family_and_what_no_rule_read() {
    let dir = tempfile::tempdir().unwrap();
    let dmesg = dir.path().join("dmesg.txt");
    std::fs::write(
        &dmesg,
        "[  100.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
         [  101.0] ACPI Error: AE_NOT_FOUND, While resolving a named reference package element\n",
    )
    .unwrap();
    let job = dir.path().join("job.out");
    std::fs::write(
        &job,
        "Traceback (most recent call last):\n  File \"/w/train.py\", line 12, in step\n    raise ValueError(\"bad shard\")\nValueError: bad shard\n",
    )
    .unwrap();
    let out = Command::new(bin("gagentd"))
        .args(["diagnose", "--json"])
        .arg(&dmesg)
        .arg(&job)
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&success_stdout(&out, "gagentd diagnose")).unwrap();
    let files: Vec<(&str, u64)> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["family"].as_str().unwrap(),
                f["unread_lines"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(files, vec![("kernel-log", 1), ("job-log", 0)], "{v:#}");
    let findings = v["findings"].as_array().unwrap();
    let unread = find(findings, "unrecognised-lines");
    assert!(
        unread["evidence"].as_str().unwrap().contains("ACPI Error"),
        "{unread}"
    );
    let exc = find(findings, "python-exception");
    assert_eq!(
        exc["evidence"],
        "ValueError: bad shard (at /w/train.py:12 in step)"
    );
    // In words: each file's name with its family, then what came of it.
    let out = Command::new(bin("gagentd"))
        .arg("diagnose")
        .arg(&dmesg)
        .output()
        .unwrap();
    let text = success_stdout(&out, "gagentd diagnose");
    assert!(
        text.starts_with(&format!(
            "{}: kernel log (dmesg, journalctl -k)\n",
            dmesg.display()
        )),
        "{text}"
    );
    assert!(text.contains("unrecognised-lines"), "{text}");
}
