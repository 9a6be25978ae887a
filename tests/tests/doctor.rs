//! `gctl doctor` on a running cluster: a node whose fake topology carries planted faults
//! (a riser that trained GPU 2 down to Gen3 x4, a hot GPU 5, the training NIC at MTU 1500
//! where the others use 9000) is found out, each finding naming its node and GPU; the
//! healthy nodes have none.

use gsched_tests::{Cluster, topology};
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
