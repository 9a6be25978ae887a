//! A node's wiring drawn for people (`ginfo --topo NODE`, `gagentd discover`): the
//! GPU/NIC link matrix grouped by NUMA node, with CPU affinity and a legend.

use gsched_types::topology::{NicKind, Topology};
use std::fmt::Write;

/// The node's wiring drawn: a title line, the GPU/NIC link matrix grouped by NUMA node,
/// the NICs, and what the link names mean.
pub fn render(t: &Topology, name: &str) -> String {
    let mut out = String::new();
    title(&mut out, t, name);
    matrix(&mut out, t);
    nic_list(&mut out, t);
    legend(&mut out);
    out
}

/// What the node is: GPUs, CPUs, memory, driver, and where the topology came from.
fn title(out: &mut String, t: &Topology, name: &str) {
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
}

/// Each GPU's link to every GPU and NIC, GPUs ordered by NUMA node, with their CPUs.
fn matrix(out: &mut String, t: &Topology) {
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
}

/// Each NIC: kind, speed, RDMA port, GID, MTU, NUMA node, state, and whether training
/// may use it.
fn nic_list(out: &mut String, t: &Topology) {
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
}

/// What the link names mean.
fn legend(out: &mut String) {
    let _ = writeln!(
        out,
        "\nNV# = # bonded NVLinks (direct or via NVSwitch); PIX = one PCIe switch; PXB = several PCIe bridges; PHB = via the CPU's host bridge; NODE = across host bridges in one NUMA node; SYS = across sockets"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Topology {
        let path = format!(
            "{}/../../tests/fixtures/topo/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        crate::parse_topo_matrix(crate::strip_fixture_header(&text)).unwrap()
    }

    /// An 8-GPU A100 node of two sockets: its title, a row per GPU with its socket's GPUs
    /// together (a blank line between sockets), its NICs, and the legend last.
    #[test]
    fn a_node_is_drawn_by_socket_with_its_nics_and_the_legend() {
        let text = render(&fixture("a100-sxm4-80gb-8gpu-nv12-4nic.txt"), "n1");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("n1: 8x "), "{text}");
        let gpu_rows: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("GPU"))
            .collect();
        assert_eq!(gpu_rows.len(), 8, "{text}");
        assert_eq!(
            lines[gpu_rows[3] + 1],
            "",
            "a blank line between the sockets"
        );
        assert!(lines[gpu_rows[0]].contains("NV12"), "{text}");
        assert!(text.contains("\nNICs:\n"), "{text}");
        assert!(lines.last().unwrap().starts_with("NV# = # bonded NVLinks"));
    }
}
