//! `gctl doctor`: the home-built cluster's usual faults, found in what the nodes
//! registered (their topology and health) and compared across nodes: PCIe links trained
//! below their maximum, hot GPUs, withheld GPUs, nodes not answering, the training NIC
//! on the far NUMA node from the GPUs, training traffic on the management address, MTU
//! disagreement on the training network, RDMA ports down. Pure: rows in, findings out.

use gsched_types::api::NodeRow;
use gsched_types::findings::{Component, Finding, Severity};
use gsched_types::topology::{LinkClass, Nic, NicKind, Topology};
use std::collections::BTreeMap;

/// A finding as `gctl doctor` and `gctl burn-in` print it: severity, node, kind (GPU),
/// evidence, then what to do.
pub fn line(f: &Finding) -> String {
    format!(
        "{:<7} {:<8} {}{}: {}\n        action: {}",
        format!("{:?}", f.severity).to_uppercase(),
        f.node.as_deref().unwrap_or("-"),
        f.kind,
        f.gpu.map(|g| format!(" (GPU {g})")).unwrap_or_default(),
        f.evidence,
        f.action
    )
}

/// The NIC carrying the training address, else the fastest physical NIC that is up.
pub fn training_nic<'a>(topo: &'a Topology, training_addr: &str) -> Option<(usize, &'a Nic)> {
    let physical = |n: &&Nic| n.kind != NicKind::Virtual && n.up != Some(false);
    topo.nics
        .iter()
        .enumerate()
        .find(|(_, n)| {
            n.ipv4
                .iter()
                .any(|a| a.split('/').next() == Some(training_addr))
        })
        .or_else(|| {
            topo.nics
                .iter()
                .enumerate()
                .filter(|(_, n)| physical(n))
                .max_by_key(|(_, n)| n.speed_mbps.unwrap_or(0))
        })
}

/// Every finding about `nodes`: each node's own, in order, then the training network's
/// MTU compared across them.
pub fn check(nodes: &[NodeRow]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut mtus: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for n in nodes {
        let name = n.name.as_str();
        reach(n, &mut out);
        host_setup(n, &mut out);
        withheld(n, &mut out);
        training_on_management(n, &mut out);
        let Some(topo) = &n.topology else { continue };
        gpus(name, topo, &mut out);
        let Some((i, nic)) = training_nic(topo, &n.training_addr) else {
            continue;
        };
        if let Some(mtu) = nic.mtu {
            mtus.entry(mtu).or_default().push(name);
        }
        nic_far_from_gpus(name, topo, i, nic, &mut out);
        rdma_ports_down(name, topo, &mut out);
    }
    mtu_mismatches(&mtus, &mut out);
    out
}

/// A finding about `node` with its evidence and what to do.
fn finding(
    node: &str,
    severity: Severity,
    component: Component,
    kind: &str,
    evidence: String,
    action: &str,
) -> Finding {
    let mut f = Finding::on_node(node, severity, component, kind);
    f.evidence = evidence;
    f.action = action.into();
    f
}

/// A node that is offline or does not answer.
fn reach(n: &NodeRow, out: &mut Vec<Finding>) {
    if n.online && n.responding {
        return;
    }
    let why = if n.online {
        "not responding"
    } else {
        "offline"
    };
    out.push(finding(
        &n.name,
        Severity::Drain,
        Component::Driver,
        "node-not-answering",
        format!("{}: {why}", n.name),
        "check gagentd on the node (systemctl status gagentd) and the management network",
    ));
}

/// What the agent found wrong with the host's setup (Slurm's clients first in a job's
/// login shell...): its own finding, as it reported it.
fn host_setup(n: &NodeRow, out: &mut Vec<Finding>) {
    for e in n
        .health
        .iter()
        .filter(|e| e.kind == gsched_types::node::HealthKind::HostSetup)
    {
        if let Some(f) = &e.finding {
            let mut f = f.clone();
            f.node = Some(n.name.clone());
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
}

/// GPUs the node withholds after a health event.
fn withheld(n: &NodeRow, out: &mut Vec<Finding>) {
    for g in &n.bad_gpus {
        let mut f = finding(
            &n.name,
            Severity::Drain,
            Component::Gpu,
            "gpu-withheld",
            n.drain_reason
                .clone()
                .unwrap_or_else(|| format!("GPU {g} withheld after a health event")),
            "fix the GPU (see the node's health events), then `gctl node resume`",
        );
        f.gpu = Some(*g);
        out.push(f);
    }
}

/// Training traffic on the management address.
fn training_on_management(n: &NodeRow, out: &mut Vec<Finding>) {
    let management = n
        .address
        .rsplit_once(':')
        .map_or(n.address.as_str(), |(h, _)| h);
    if n.training_addr == management && n.training_addr != "127.0.0.1" {
        out.push(finding(
            &n.name,
            Severity::Info,
            Component::Nic,
            "training-on-management",
            format!(
                "training address {} is the management address",
                n.training_addr
            ),
            "give the agent --training-addr on the fast network, so NCCL traffic stays off the management network",
        ));
    }
}

/// GPUs whose PCIe link trained below its maximum, and hot GPUs.
fn gpus(name: &str, topo: &Topology, out: &mut Vec<Finding>) {
    for g in &topo.gpus {
        if let Some(p) = &g.pcie
            && p.is_degraded()
        {
            let mut f = finding(
                name,
                Severity::Warn,
                Component::Pcie,
                "pcie-link-degraded",
                format!(
                    "GPU {}: PCIe Gen{} x{} of Gen{} x{}",
                    g.index,
                    p.gen_current.unwrap_or(0),
                    p.width_current.unwrap_or(0),
                    p.gen_max.unwrap_or(0),
                    p.width_max.unwrap_or(0)
                ),
                "the link trained down: reseat the riser or cable, try another slot, check the BIOS PCIe generation (some GPUs downtrain at idle: confirm under load)",
            );
            f.gpu = Some(g.index);
            f.pci_bus_id = g.pci_bus_id.clone();
            out.push(f);
        }
        if let Some(t) = g.temperature_c.filter(|t| *t >= 85) {
            let mut f = finding(
                name,
                Severity::Warn,
                Component::Gpu,
                "gpu-hot",
                format!("GPU {} at {t} C", g.index),
                "improve airflow: open frames need fans and spacing; it throttles near its slowdown temperature",
            );
            f.gpu = Some(g.index);
            out.push(f);
        }
    }
}

/// The training NIC (`nic`, index `i`) across the CPU interconnect from every GPU.
fn nic_far_from_gpus(name: &str, topo: &Topology, i: usize, nic: &Nic, out: &mut Vec<Finding>) {
    let classes: Vec<LinkClass> = topo
        .gpu_nic_links
        .iter()
        .filter_map(|row| row.get(i).copied())
        .collect();
    if !classes.is_empty() && classes.iter().all(|c| *c == LinkClass::Sys) {
        out.push(finding(
            name,
            Severity::Warn,
            Component::Nic,
            "nic-far-from-gpus",
            format!(
                "training NIC {} crosses the CPU interconnect (SYS) to every GPU",
                nic.name
            ),
            "move the NIC to a slot on the GPUs' CPU socket, or the GPUs to the NIC's",
        ));
    }
}

/// RDMA ports that are down.
fn rdma_ports_down(name: &str, topo: &Topology, out: &mut Vec<Finding>) {
    for rdma in topo.nics.iter().filter(|x| x.rdma_device.is_some()) {
        if rdma.up == Some(false) {
            out.push(finding(
                name,
                Severity::Warn,
                Component::Ib,
                "rdma-port-down",
                format!(
                    "{} ({}) is down",
                    rdma.name,
                    rdma.rdma_device.as_deref().unwrap_or("?")
                ),
                "check the cable and the switch port; NCCL will not use this rail",
            ));
        }
    }
}

/// The training network's MTU must agree end to end: the odd ones out are named.
fn mtu_mismatches(mtus: &BTreeMap<u32, Vec<&str>>, out: &mut Vec<Finding>) {
    if mtus.len() <= 1 {
        return;
    }
    let common = mtus
        .iter()
        .max_by_key(|(_, v)| v.len())
        .map(|(m, _)| *m)
        .unwrap_or(0);
    for (mtu, names) in mtus.iter().filter(|(m, _)| **m != common) {
        for name in names {
            out.push(finding(
                name,
                Severity::Warn,
                Component::Nic,
                "mtu-mismatch",
                format!("training NIC MTU {mtu}, most nodes use {common}"),
                "set the same MTU on every node's training interface and the switch ports (jumbo frames need all of them)",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn topology(name: &str) -> serde_json::Value {
        let path = format!(
            "{}/../deploy/local/topologies/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn node(name: &str, addr: &str, training: &str, topo: serde_json::Value) -> serde_json::Value {
        json!({
            "name": name, "state": "idle", "online": true, "responding": true,
            "admin": {"state": "up"}, "address": format!("{addr}:7001"),
            "training_addr": training, "gpus_total": 8, "gpus_used": [], "gpus_free": 8,
            "bad_gpus": [], "cpus_total": 64, "cpus_used": 0, "memory_mb": 1024,
            "memory_used_mb": 0, "jobs": [], "topology": topo,
        })
    }

    /// Four nodes with every kind of finding among them: a riser, a hot GPU and a
    /// withheld one, training on the management address, a node that does not answer
    /// whose training NIC is across the sockets and whose RDMA port is down, and the
    /// training network's MTU disagreeing; each finding in the order `gctl doctor` prints.
    #[test]
    fn every_kind_of_finding_in_order() {
        let healthy = topology("rtx4090-8gpu.json");
        let mut n2 = node(
            "n2",
            "10.1.0.2",
            "10.1.0.2",
            topology("rtx4090-8gpu-riser-problems.json"),
        );
        n2["bad_gpus"] = json!([3]);
        n2["drain_reason"] = json!("Xid 79 on GPU 3");
        let mut far = healthy.clone();
        far["nics"][0]["up"] = json!(false);
        for row in far["gpu_nic_links"].as_array_mut().unwrap() {
            row[1] = json!("SYS");
        }
        let mut n3 = node("n3", "10.1.0.3", "10.2.0.3", far);
        n3["online"] = json!(false);
        let rows: Vec<NodeRow> = [
            node("n1", "10.1.0.1", "10.2.0.1", healthy.clone()),
            n2,
            n3,
            node("n4", "10.1.0.4", "10.2.0.4", healthy),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
        let found: Vec<String> = check(&rows)
            .iter()
            .map(|f| {
                format!(
                    "{} {} {:?} {}",
                    f.node.as_deref().unwrap_or("-"),
                    f.kind,
                    f.gpu,
                    f.evidence
                )
            })
            .collect();
        let expected = [
            "n2 gpu-withheld Some(3) Xid 79 on GPU 3",
            "n2 training-on-management None training address 10.1.0.2 is the management address",
            "n2 pcie-link-degraded Some(2) GPU 2: PCIe Gen3 x4 of Gen4 x16",
            "n2 gpu-hot Some(5) GPU 5 at 88 C",
            "n3 node-not-answering None n3: offline",
            "n3 nic-far-from-gpus None training NIC eno1 crosses the CPU interconnect (SYS) to every GPU",
            "n3 rdma-port-down None enp65s0f0np0 (mlx5_0) is down",
            "n2 mtu-mismatch None training NIC MTU 1500, most nodes use 9000",
            "n3 mtu-mismatch None training NIC MTU 1500, most nodes use 9000",
        ];
        assert_eq!(found, expected);
    }
}
