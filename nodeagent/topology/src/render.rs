//! A node's wiring drawn for people (`ginfo --topo NODE`, `gagentd discover`): the
//! GPU/NIC link matrix grouped by NUMA node, with CPU affinity and a legend.

use gsched_types::topology::{NicKind, Topology};
use std::fmt::Write;

pub fn render(t: &Topology, name: &str) -> String {
    let mut out = String::new();
    let model = t.gpu_model().unwrap_or("no GPUs");
    let mem = t
        .memory_mib
        .map(|m| format!(", {} GiB", m / 1024))
        .unwrap_or_default();
    let cpus = t.cpus.map(|c| format!(", {c} CPUs")).unwrap_or_default();
    let driver = t
        .driver_version
        .as_deref()
        .map(|d| format!(", driver {d}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{name}: {}x {model}{cpus}{mem}{driver}  [{}]",
        t.gpus.len(),
        t.source
    );
    if let Some(note) = &t.note {
        let _ = writeln!(out, "note: {note}");
    }
    let nics: Vec<(usize, String)> = t
        .nics
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind != NicKind::Virtual)
        .map(|(i, n)| (i, n.name.clone()))
        .collect();
    // Order GPUs by NUMA node so each socket's GPUs sit together.
    let mut order: Vec<usize> = (0..t.gpus.len()).collect();
    order.sort_by_key(|&i| (t.gpu_numa(i).unwrap_or(u32::MAX), i));
    let width = nics
        .iter()
        .map(|(_, n)| n.len())
        .max()
        .unwrap_or(0)
        .clamp(5, 14)
        + 1;
    let _ = write!(out, "{:<8}", "");
    for &j in &order {
        let _ = write!(out, "{:<6}", format!("GPU{j}"));
    }
    for (_, n) in &nics {
        let _ = write!(out, "{:<width$}", n);
    }
    let _ = writeln!(out, "{:<6}CPUs", "NUMA");
    let mut last_numa = None;
    for &i in &order {
        let numa = t.gpu_numa(i);
        if last_numa.is_some() && last_numa != Some(numa) {
            let _ = writeln!(out);
        }
        last_numa = Some(numa);
        let _ = write!(out, "{:<8}", format!("GPU{i}"));
        for &j in &order {
            let _ = write!(out, "{:<6}", t.link(i, j).to_string());
        }
        for (k, _) in &nics {
            let l = t
                .gpu_nic_links
                .get(i)
                .and_then(|r| r.get(*k))
                .map(|l| l.to_string())
                .unwrap_or_else(|| "-".into());
            let _ = write!(out, "{:<width$}", l);
        }
        let g = &t.gpus[i];
        let _ = writeln!(
            out,
            "{:<6}{}",
            numa.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
            g.cpus.as_deref().unwrap_or("?")
        );
    }
    if !t.nics.is_empty() {
        let _ = writeln!(out, "\nNICs:");
        for n in &t.nics {
            let speed = n
                .speed_mbps
                .map(|s| format!(" {} Gb/s", s / 1000))
                .unwrap_or_default();
            let rdma = match (&n.rdma_device, n.rdma_port) {
                (Some(d), Some(p)) => format!(" rdma={d}:{p}"),
                _ => String::new(),
            };
            let gid = n
                .roce_v2_gid_index
                .map(|g| format!(" gid={g}"))
                .unwrap_or_default();
            let state = match n.up {
                Some(true) => " up",
                Some(false) => " DOWN",
                None => "",
            };
            let mtu = n.mtu.map(|m| format!(" mtu={m}")).unwrap_or_default();
            let numa = n
                .numa_node
                .map(|m| format!(" numa={m}"))
                .unwrap_or_default();
            let kind = format!("{:?}", n.kind).to_lowercase();
            let training = if n.kind == NicKind::Virtual {
                " (never used for training)".to_string()
            } else if let Some(pf) = &n.sriov_pf {
                format!(" (SR-IOV VF of {pf})")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<16} {kind}{speed}{rdma}{gid}{mtu}{numa}{state}{training}",
                n.name
            );
        }
    }
    let _ = writeln!(
        out,
        "\nNV# = # bonded NVLinks (direct or via NVSwitch); PIX = one PCIe switch; PXB = several PCIe bridges; PHB = via the CPU's host bridge; NODE = across host bridges in one NUMA node; SYS = across sockets"
    );
    out
}
