//! What an all-reduce over some nodes' GPUs should reach, from their wiring: the slowest
//! link between a node's GPUs (NVLink count, the PCIe path class and the slot's
//! generation and width), and between nodes their NICs' line rate. The figures are
//! conservative shares of the raw rates, so falling below half of one means a fault, not
//! a tuning gap. Pure.

use super::{Bound, Expectation};
use gsched_types::api::NodeRow;
use gsched_types::topology::{LinkClass, NicKind, Topology};

/// One direction of one NVLink, GB/s: data-centre parts (NVLink 3/4) and the consumer
/// bridges (RTX 3090: 4 links, 56 GB/s each way).
fn nvlink_gbps(model: Option<&str>) -> f64 {
    let m = model.unwrap_or_default().to_ascii_uppercase();
    if [
        "A100", "A800", "H100", "H800", "H200", "H20", "GH200", "B200",
    ]
    .iter()
    .any(|p| m.contains(p))
    {
        25.0
    } else {
        14.0
    }
}

/// One direction of one PCIe lane, GB/s, by generation.
fn pcie_lane_gbps(generation: u8) -> f64 {
    match generation {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        _ => 7.877,
    }
}

/// The slowest GPU slot of `topo`, GB/s each way, from what the slots support (a link
/// that trained down then shows as a shortfall).
fn pcie_gbps(topo: &Topology) -> Option<(f64, String)> {
    topo.gpus
        .iter()
        .filter_map(|g| {
            let p = g.pcie.as_ref()?;
            let generation = p.gen_max.or(p.gen_current)?;
            let width = p.width_max.or(p.width_current)?;
            Some((
                pcie_lane_gbps(generation) * f64::from(width),
                format!("Gen{generation} x{width}"),
            ))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// The bound inside one node: its slowest GPU-to-GPU link.
fn within(node: &NodeRow, topo: &Topology) -> Option<Expectation> {
    let n = topo.gpus.len().min(topo.gpu_links.len());
    let worst = (0..n)
        .flat_map(|i| (0..n).filter(move |j| *j != i).map(move |j| (i, j)))
        .filter(|&(i, j)| {
            !node.bad_gpus.contains(&(i as u32)) && !node.bad_gpus.contains(&(j as u32))
        })
        .filter_map(|(i, j)| topo.gpu_links.get(i)?.get(j).copied())
        .max_by_key(|c| c.rank())?;
    let model = topo.gpus.first().and_then(|g| g.model.as_deref());
    let (share, what) = match worst {
        LinkClass::NvLink(k) => {
            let per = nvlink_gbps(model);
            return Some(Expectation {
                bound: Bound::Nvlink,
                busbw_gbps: f64::from(k) * per * 0.8,
                basis: format!("{}: NV{k}, {k} NVLinks x {per} GB/s, 80% of it", node.name),
            });
        }
        LinkClass::Pix | LinkClass::Pxb => (0.8, "through a PCIe switch"),
        LinkClass::Phb | LinkClass::Node => (0.6, "through the CPU's host bridge"),
        LinkClass::Sys => (0.4, "across the CPU sockets"),
        LinkClass::SameDevice | LinkClass::Unknown => return None,
    };
    let (rate, slot) = pcie_gbps(topo)?;
    Some(Expectation {
        bound: Bound::Pcie,
        busbw_gbps: rate * share,
        basis: format!(
            "{}: GPUs {what} ({slot}, {rate:.1} GB/s), {:.0}% of it",
            node.name,
            share * 100.0
        ),
    })
}

/// The bound between nodes: a node's RDMA ports together, or else its training NIC.
fn network(node: &NodeRow, topo: &Topology) -> Option<Expectation> {
    let rdma: Vec<_> = topo
        .nics
        .iter()
        .filter(|n| n.rdma_device.is_some() && n.up != Some(false) && n.speed_mbps.is_some())
        .collect();
    let (mbps, what) = if rdma.is_empty() {
        let (_, nic) = crate::doctor::training_nic(topo, &node.training_addr)?;
        if nic.kind == NicKind::Virtual {
            return None;
        }
        (nic.speed_mbps?, format!("NIC {}", nic.name))
    } else {
        let names: Vec<&str> = rdma.iter().map(|n| n.name.as_str()).collect();
        (
            rdma.iter().filter_map(|n| n.speed_mbps).sum(),
            format!("RDMA ports {}", names.join("+")),
        )
    };
    let gbps = mbps as f64 / 8000.0;
    Some(Expectation {
        bound: Bound::Network,
        busbw_gbps: gbps * 0.8,
        basis: format!(
            "{}: {what} at {} Gb/s ({gbps:.1} GB/s), 80% of it",
            node.name,
            mbps / 1000
        ),
    })
}

/// What an all-reduce with `gpus_per_node` GPUs on each of `nodes` should reach; `None`
/// where the wiring is unknown.
pub fn expected(nodes: &[&NodeRow], gpus_per_node: u32) -> Option<Expectation> {
    let mut bounds = Vec::new();
    for n in nodes {
        let topo = n.topology.as_ref()?;
        if gpus_per_node > 1 {
            bounds.push(within(n, topo)?);
        }
        if nodes.len() > 1 {
            bounds.push(network(n, topo)?);
        }
    }
    bounds
        .into_iter()
        .min_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::api::NodeRow;

    fn row(name: &str, topo_file: &str) -> NodeRow {
        let path = format!(
            "{}/../deploy/local/topologies/{topo_file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let topo: Topology =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut r: NodeRow = serde_json::from_value(serde_json::json!({
            "name": name, "state": "idle", "online": true, "responding": true,
            "admin": {"state": "up"}, "address": "10.0.0.1:7000", "training_addr": "10.0.1.1",
            "gpus_total": topo.gpus.len(), "gpus_used": [], "gpus_free": topo.gpus.len(),
            "bad_gpus": [], "cpus_total": 32, "cpus_used": 0, "memory_mb": 1,
            "memory_used_mb": 0, "jobs": []
        }))
        .unwrap();
        r.topology = Some(topo);
        r
    }

    #[test]
    fn nvlink_bridge_pcie_paths_and_nics_bound_the_rate() {
        let ws = row("ws", "ws-2gpu-nvlink.json");
        let e = expected(&[&ws], 2).unwrap();
        assert!((e.busbw_gbps - 4.0 * 14.0 * 0.8).abs() < 1e-9, "{e:?}");
        assert!(e.basis.contains("NV4"), "{e:?}");
        // Two of them over their 10 GbE: the NIC bounds it.
        let ws2 = row("ws2", "ws-2gpu-nvlink.json");
        let e = expected(&[&ws, &ws2], 2).unwrap();
        assert!((e.busbw_gbps - 1.0).abs() < 1e-9, "{e:?}");
        assert!(e.basis.contains("10 Gb/s"), "{e:?}");
        // An 8x RTX 4090 box: no NVLink, so PCIe through the host bridge or sockets.
        let rig = row("rig", "rtx4090-8gpu.json");
        let e = expected(&[&rig], 8).unwrap();
        assert!(e.busbw_gbps < 20.0 && e.busbw_gbps > 5.0, "{e:?}");
        assert!(e.basis.contains("Gen4 x16"), "{e:?}");
        // A DGX A100: NVSwitch, 12 links.
        let dgx = row("dgx", "dgx-a100-8gpu.json");
        let e = expected(&[&dgx], 8).unwrap();
        assert!(e.busbw_gbps > 200.0, "{e:?}");
    }

    #[test]
    fn unknown_wiring_gives_no_expectation() {
        let mut ws = row("ws", "ws-2gpu-nvlink.json");
        ws.topology = None;
        assert_eq!(expected(&[&ws], 2), None);
    }
}
