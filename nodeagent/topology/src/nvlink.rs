//! NVLink connectivity from per-link facts, as NVML reports them: each active link ends at
//! another GPU (its PCI bus id) or at an NVSwitch (remote PCI id `FFFFFFFF:FF:FF.0`, or
//! remote device type switch). Two GPUs linked directly get `NV<links between them>`; two
//! GPUs that both reach NVSwitches and whose P2P-over-NVLink status is OK get
//! `NV<fewest switch links of the two>` (18 on H100/H200 HGX boards, as nvidia-smi shows).
//! The PCIe common ancestor is never used to decide NVLink.

use crate::xid::normalize_pci;

/// Where one active NVLink ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEnd {
    Gpu(String),
    Switch,
    Unknown,
}

impl LinkEnd {
    /// From NVML's remote PCI bus id (and, where known, whether the remote is a switch).
    pub fn from_remote(bus_id: &str, remote_is_switch: Option<bool>) -> LinkEnd {
        let upper = bus_id.to_ascii_uppercase();
        if remote_is_switch == Some(true)
            || upper.starts_with("FFFFFFFF:FF:FF")
            || upper.starts_with("FFFF:FF:FF")
        {
            LinkEnd::Switch
        } else if bus_id.is_empty() {
            LinkEnd::Unknown
        } else {
            LinkEnd::Gpu(normalize_pci(bus_id))
        }
    }
}

/// NVLink count between every pair of GPUs (`None`: no NVLink). `links[i]` lists GPU i's
/// active links; `p2p_nvlink(i, j)` is NVML's P2P NVLink status for the pair.
pub fn nvlink_matrix(
    bus_ids: &[String],
    links: &[Vec<LinkEnd>],
    p2p_nvlink: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<Option<u8>>> {
    let n = bus_ids.len();
    let ids: Vec<String> = bus_ids.iter().map(|b| normalize_pci(b)).collect();
    let mut m = vec![vec![None; n]; n];
    let switch_links: Vec<usize> = (0..n)
        .map(|i| {
            links
                .get(i)
                .map(|l| l.iter().filter(|e| **e == LinkEnd::Switch).count())
                .unwrap_or(0)
        })
        .collect();
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            let direct = links
                .get(i)
                .map(|l| {
                    l.iter()
                        .filter(|e| matches!(e, LinkEnd::Gpu(b) if *b == ids[j]))
                        .count()
                })
                .unwrap_or(0);
            let count = if direct > 0 {
                direct
            } else if switch_links[i] > 0 && switch_links[j] > 0 && p2p_nvlink(i, j) {
                switch_links[i].min(switch_links[j])
            } else {
                0
            };
            if count > 0 {
                m[i][j] = Some(count.min(255) as u8);
            }
        }
    }
    // Direct links are seen from both ends; keep the matrix symmetric.
    for (i, j) in (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))) {
        let v = m[i][j].max(m[j][i]);
        m[i][j] = v;
        m[j][i] = v;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_pair_through_nvswitch_is_nv18() {
        // As captured on the project's 2x H200 machine: 18 active links each, every remote
        // PCI id FFFFFFFF:FF:FF.0, common ancestor HostBridge.
        let ids = vec![
            "00000000:00:06.0".to_string(),
            "00000000:00:07.0".to_string(),
        ];
        let links = vec![vec![LinkEnd::from_remote("FFFFFFFF:FF:FF.0", None); 18]; 2];
        let m = nvlink_matrix(&ids, &links, |_, _| true);
        assert_eq!(m[0][1], Some(18));
        assert_eq!(m[1][0], Some(18));
        // Without P2P over NVLink the switch links say nothing about the pair.
        assert_eq!(nvlink_matrix(&ids, &links, |_, _| false)[0][1], None);
    }

    #[test]
    fn bridged_pair_counts_direct_links() {
        let ids = vec![
            "0000:01:00.0".to_string(),
            "0000:4c:00.0".to_string(),
            "0000:81:00.0".to_string(),
        ];
        let links = vec![
            vec![LinkEnd::Gpu("0000:4c:00".into()); 4],
            vec![LinkEnd::Gpu("0000:01:00".into()); 4],
            vec![],
        ];
        let m = nvlink_matrix(&ids, &links, |_, _| false);
        assert_eq!(m[0][1], Some(4));
        assert_eq!(m[0][2], None);
        assert_eq!(m[2][1], None);
    }
}
