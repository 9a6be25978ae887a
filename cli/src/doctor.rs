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

/// Every finding about `nodes`.
pub fn check(nodes: &[NodeRow]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut mtus: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for n in nodes {
        let name = n.name.as_str();
        if !n.online || !n.responding {
            let mut f = Finding::on_node(
                name,
                Severity::Drain,
                Component::Driver,
                "node-not-answering",
            );
            f.evidence = format!(
                "{name}: {}",
                if n.online {
                    "not responding"
                } else {
                    "offline"
                }
            );
            f.action =
                "check gagentd on the node (systemctl status gagentd) and the management network"
                    .into();
            out.push(f);
        }
        // What the agent found wrong with the host's setup (Slurm's clients first in a
        // job's login shell...): its own finding, as it reported it.
        for e in n
            .health
            .iter()
            .filter(|e| e.kind == gsched_types::node::HealthKind::HostSetup)
        {
            if let Some(f) = &e.finding {
                let mut f = f.clone();
                f.node = Some(name.to_string());
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
        for g in &n.bad_gpus {
            let mut f = Finding::on_node(name, Severity::Drain, Component::Gpu, "gpu-withheld");
            f.gpu = Some(*g);
            f.evidence = n
                .drain_reason
                .clone()
                .unwrap_or_else(|| format!("GPU {g} withheld after a health event"));
            f.action = "fix the GPU (see the node's health events), then `gctl node resume`".into();
            out.push(f);
        }
        if n.training_addr
            == n.address
                .rsplit_once(':')
                .map_or(n.address.as_str(), |(h, _)| h)
            && n.training_addr != "127.0.0.1"
        {
            let mut f = Finding::on_node(
                name,
                Severity::Info,
                Component::Nic,
                "training-on-management",
            );
            f.evidence = format!(
                "training address {} is the management address",
                n.training_addr
            );
            f.action = "give the agent --training-addr on the fast network, so NCCL traffic stays off the management network".into();
            out.push(f);
        }
        let Some(topo) = &n.topology else { continue };
        for g in &topo.gpus {
            if let Some(p) = &g.pcie
                && p.is_degraded()
            {
                let mut f =
                    Finding::on_node(name, Severity::Warn, Component::Pcie, "pcie-link-degraded");
                f.gpu = Some(g.index);
                f.pci_bus_id = g.pci_bus_id.clone();
                f.evidence = format!(
                    "GPU {}: PCIe Gen{} x{} of Gen{} x{}",
                    g.index,
                    p.gen_current.unwrap_or(0),
                    p.width_current.unwrap_or(0),
                    p.gen_max.unwrap_or(0),
                    p.width_max.unwrap_or(0)
                );
                f.action = "the link trained down: reseat the riser or cable, try another slot, check the BIOS PCIe generation (some GPUs downtrain at idle: confirm under load)".into();
                out.push(f);
            }
            if g.temperature_c.is_some_and(|t| t >= 85) {
                let mut f = Finding::on_node(name, Severity::Warn, Component::Gpu, "gpu-hot");
                f.gpu = Some(g.index);
                f.evidence = format!("GPU {} at {} C", g.index, g.temperature_c.unwrap_or(0));
                f.action = "improve airflow: open frames need fans and spacing; it throttles near its slowdown temperature".into();
                out.push(f);
            }
        }
        let Some((i, nic)) = training_nic(topo, &n.training_addr) else {
            continue;
        };
        if let Some(mtu) = nic.mtu {
            mtus.entry(mtu).or_default().push(name);
        }
        let classes: Vec<LinkClass> = topo
            .gpu_nic_links
            .iter()
            .filter_map(|row| row.get(i).copied())
            .collect();
        if !classes.is_empty() && classes.iter().all(|c| *c == LinkClass::Sys) {
            let mut f = Finding::on_node(name, Severity::Warn, Component::Nic, "nic-far-from-gpus");
            f.evidence = format!(
                "training NIC {} crosses the CPU interconnect (SYS) to every GPU",
                nic.name
            );
            f.action =
                "move the NIC to a slot on the GPUs' CPU socket, or the GPUs to the NIC's".into();
            out.push(f);
        }
        for rdma in topo.nics.iter().filter(|x| x.rdma_device.is_some()) {
            if rdma.up == Some(false) {
                let mut f = Finding::on_node(name, Severity::Warn, Component::Ib, "rdma-port-down");
                f.evidence = format!(
                    "{} ({}) is down",
                    rdma.name,
                    rdma.rdma_device.as_deref().unwrap_or("?")
                );
                f.action =
                    "check the cable and the switch port; NCCL will not use this rail".into();
                out.push(f);
            }
        }
    }
    // The training network's MTU must agree end to end: the odd ones out are named.
    if mtus.len() > 1 {
        let common = mtus
            .iter()
            .max_by_key(|(_, v)| v.len())
            .map(|(m, _)| *m)
            .unwrap_or(0);
        for (mtu, names) in &mtus {
            if *mtu == common {
                continue;
            }
            for name in names {
                let mut f = Finding::on_node(name, Severity::Warn, Component::Nic, "mtu-mismatch");
                f.evidence = format!("training NIC MTU {mtu}, most nodes use {common}");
                f.action = "set the same MTU on every node's training interface and the switch ports (jumbo frames need all of them)".into();
                out.push(f);
            }
        }
    }
    out
}
