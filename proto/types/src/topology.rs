//! What a node is made of, as the agent measured it: GPUs, the link between every pair,
//! NUMA nodes, NICs and how far each NIC is from each GPU.
//!
//! The JSON form of [`Topology`] is the documented discovery schema: `gagentd discover
//! --json` prints it and `gagentd --fake-topology` reads it back.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The connection between two devices, in `nvidia-smi topo -m` terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkClass {
    /// The device itself (`X`).
    SameDevice,
    /// A bonded set of this many NVLinks (`NV#`), directly or through NVSwitch.
    NvLink(u8),
    /// At most one PCIe bridge (`PIX`).
    Pix,
    /// Several PCIe bridges, no host bridge (`PXB`).
    Pxb,
    /// Through a PCIe host bridge (`PHB`).
    Phb,
    /// Between host bridges inside one NUMA node (`NODE`).
    Node,
    /// Across the inter-socket link (`SYS`, old drivers `SOC`).
    Sys,
    /// Not reported.
    Unknown,
}

impl LinkClass {
    /// Lower is better. NVLink ranks by link count (more links first), then PCIe classes in
    /// nvidia-smi's order; unknown links rank worst.
    pub fn rank(self) -> u16 {
        match self {
            LinkClass::SameDevice => 0,
            LinkClass::NvLink(n) => 100 - u16::from(n.min(99)),
            LinkClass::Pix => 200,
            LinkClass::Pxb => 300,
            LinkClass::Phb => 400,
            LinkClass::Node => 500,
            LinkClass::Sys => 600,
            LinkClass::Unknown => 700,
        }
    }

    /// The coarse class used for "best achievable" comparisons: all NVLink counts are one
    /// tier (0), then PIX (1), PXB (2), PHB (3), NODE (4), SYS (5), unknown (6).
    pub fn tier(self) -> u8 {
        match self {
            LinkClass::SameDevice | LinkClass::NvLink(_) => 0,
            LinkClass::Pix => 1,
            LinkClass::Pxb => 2,
            LinkClass::Phb => 3,
            LinkClass::Node => 4,
            LinkClass::Sys => 5,
            LinkClass::Unknown => 6,
        }
    }

    pub fn is_nvlink(self) -> bool {
        matches!(self, LinkClass::NvLink(_))
    }

    /// Nominal one-direction bandwidth in GB/s used by the simulator's communication model.
    /// NVLink: 25 GB/s per link (H100/H200 NVLink4 is 25 GB/s per direction per link; 18
    /// links measured here at ~295 GB/s bus bandwidth). PCIe classes assume Gen4 x16 with the
    /// usual P2P penalties; SYS is what NCCL gets over sockets between NUMA nodes.
    pub fn nominal_gbps(self) -> f64 {
        match self {
            LinkClass::SameDevice => 1000.0,
            LinkClass::NvLink(n) => 16.4 * f64::from(n.max(1)),
            LinkClass::Pix => 24.0,
            LinkClass::Pxb => 20.0,
            LinkClass::Phb => 16.0,
            LinkClass::Node => 12.0,
            LinkClass::Sys => 8.0,
            LinkClass::Unknown => 8.0,
        }
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkClass::SameDevice => f.write_str("X"),
            LinkClass::NvLink(n) => write!(f, "NV{n}"),
            LinkClass::Pix => f.write_str("PIX"),
            LinkClass::Pxb => f.write_str("PXB"),
            LinkClass::Phb => f.write_str("PHB"),
            LinkClass::Node => f.write_str("NODE"),
            LinkClass::Sys => f.write_str("SYS"),
            LinkClass::Unknown => f.write_str("N/A"),
        }
    }
}

impl FromStr for LinkClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        Ok(match t {
            "X" => LinkClass::SameDevice,
            "PIX" => LinkClass::Pix,
            "PXB" => LinkClass::Pxb,
            "PHB" => LinkClass::Phb,
            "NODE" => LinkClass::Node,
            "SYS" | "SOC" => LinkClass::Sys,
            "N/A" | "" => LinkClass::Unknown,
            _ => match t.strip_prefix("NV").map(str::parse::<u8>) {
                Some(Ok(n)) if n > 0 => LinkClass::NvLink(n),
                _ => return Err(format!("unknown link class '{t}'")),
            },
        })
    }
}

impl Serialize for LinkClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LinkClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// As `nvidia-smi topo -m` writes it (the wire form).
impl schemars::JsonSchema for LinkClass {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LinkClass".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "nvidia-smi topo -m's link class: X, NV<n>, PIX, PXB, PHB, NODE, SYS, or N/A",
            "pattern": "^(X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$"
        })
    }
}

/// PCIe link state of a GPU: current and maximum generation and width.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
pub struct PcieLink {
    pub gen_current: Option<u8>,
    pub gen_max: Option<u8>,
    pub width_current: Option<u8>,
    pub width_max: Option<u8>,
}

impl PcieLink {
    /// True when the link trained below what the slot and card support (a riser fault,
    /// usually).
    pub fn is_degraded(&self) -> bool {
        matches!((self.gen_current, self.gen_max), (Some(c), Some(m)) if c < m)
            || matches!((self.width_current, self.width_max), (Some(c), Some(m)) if c < m)
    }
}

/// One GPU. Unknown facts are `None`, never guessed (a NUMA node of `None` is not node 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gpu {
    pub index: u32,
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub memory_mib: Option<u64>,
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// CPUs close to this GPU as a cpulist ("0-31,64-95").
    #[serde(default)]
    pub cpus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieLink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_temperature_c: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows_pending: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// Active NVLink count as NVML reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_active: Option<u32>,
    /// Device node path (`/dev/nvidia3`) where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_path: Option<String>,
}

impl Gpu {
    pub fn new(index: u32) -> Gpu {
        Gpu {
            index,
            uuid: None,
            pci_bus_id: None,
            model: None,
            memory_mib: None,
            numa_node: None,
            cpus: None,
            pcie: None,
            temperature_c: None,
            memory_temperature_c: None,
            power_w: None,
            ecc_uncorrected: None,
            remapped_rows_pending: None,
            mig_enabled: None,
            nvlinks_active: None,
            device_path: None,
        }
    }
}

/// What kind of network interface a NIC is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NicKind {
    /// InfiniBand HCA port.
    Ib,
    /// RDMA over Converged Ethernet.
    Roce,
    /// Plain Ethernet (TCP sockets only).
    Ethernet,
    /// Loopback, bridges, veth, docker, tun/tap: never used for training traffic.
    Virtual,
}

impl NicKind {
    pub fn is_rdma(self) -> bool {
        matches!(self, NicKind::Ib | NicKind::Roce)
    }
}

/// A network interface (or an RDMA device port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Nic {
    pub name: String,
    pub kind: NicKind,
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// The RDMA device and port (`mlx5_0`, 1) for IB/RoCE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_port: Option<u32>,
    /// The Linux network interface carrying IP (for RoCE and Ethernet; IPoIB for IB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// GID index of a RoCE v2 IPv4 GID, when discovery found one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roce_v2_gid_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Link is up (`operstate` up / IB port ACTIVE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipv4: Vec<String>,
    /// The PCI address of the physical function this NIC is an SR-IOV virtual function
    /// of: it shares that adapter's port, so it is no rail of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov_pf: Option<String>,
}

impl Nic {
    pub fn new(name: &str, kind: NicKind) -> Nic {
        Nic {
            name: name.to_string(),
            kind,
            numa_node: None,
            rdma_device: None,
            rdma_port: None,
            netdev: None,
            roce_v2_gid_index: None,
            speed_mbps: None,
            mtu: None,
            up: None,
            pci_bus_id: None,
            ipv4: Vec::new(),
            sriov_pf: None,
        }
    }

    /// Usable for training traffic: not virtual and not known to be down.
    pub fn is_usable(&self) -> bool {
        self.kind != NicKind::Virtual && self.up != Some(false)
    }
}

/// A NUMA node: its CPUs and memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: String,
    #[serde(default)]
    pub memory_mib: Option<u64>,
}

/// Everything the agent registers about its node's hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Topology {
    /// Where the facts came from: "nvml+sysfs", "nvidia-smi topo -m", "fake:FILE".
    #[serde(default)]
    pub source: String,
    pub gpus: Vec<Gpu>,
    /// N x N matrix of link classes between GPUs, `X` on the diagonal.
    pub gpu_links: Vec<Vec<LinkClass>>,
    #[serde(default)]
    pub nics: Vec<Nic>,
    /// GPU rows by NIC columns.
    #[serde(default)]
    pub gpu_nic_links: Vec<Vec<LinkClass>>,
    #[serde(default)]
    pub numa_nodes: Vec<NumaNode>,
    /// Logical CPUs on the node (all NUMA nodes).
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub memory_mib: Option<u64>,
    /// Driver version, when a driver answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// Why no GPUs were found, when none were ("NVML not available: ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A topology document that does not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid topology: {0}")]
pub struct TopologyError(pub String);

impl Topology {
    pub fn empty(source: &str) -> Topology {
        Topology {
            source: source.to_string(),
            gpus: Vec::new(),
            gpu_links: Vec::new(),
            nics: Vec::new(),
            gpu_nic_links: Vec::new(),
            numa_nodes: Vec::new(),
            cpus: None,
            memory_mib: None,
            driver_version: None,
            note: None,
        }
    }

    /// Checks shapes: square GPU matrix with `X` on the diagonal, GPU/NIC matrix of the
    /// right size, GPU indices 0..N, cpulists that parse.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let n = self.gpus.len();
        if self.gpu_links.len() != n || self.gpu_links.iter().any(|r| r.len() != n) {
            return Err(TopologyError(format!("gpu_links must be a {n}x{n} matrix")));
        }
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.index as usize != i {
                return Err(TopologyError(format!(
                    "gpus[{i}] has index {}; indices must be 0..{n} in order",
                    gpu.index
                )));
            }
            if let Some(c) = &gpu.cpus {
                crate::cpulist::parse(c).map_err(|e| TopologyError(format!("gpu {i}: {e}")))?;
            }
        }
        for i in 0..n {
            for j in 0..n {
                let l = self.gpu_links[i][j];
                if (i == j) != (l == LinkClass::SameDevice) {
                    return Err(TopologyError(format!(
                        "gpu_links[{i}][{j}] is {l}; only the diagonal may be X"
                    )));
                }
            }
        }
        if !self.nics.is_empty() || !self.gpu_nic_links.is_empty() {
            let m = self.nics.len();
            if self.gpu_nic_links.len() != n || self.gpu_nic_links.iter().any(|r| r.len() != m) {
                return Err(TopologyError(format!(
                    "gpu_nic_links must be a {n}x{m} matrix (GPU rows, NIC columns)"
                )));
            }
        }
        for numa in &self.numa_nodes {
            crate::cpulist::parse(&numa.cpus)
                .map_err(|e| TopologyError(format!("numa node {}: {e}", numa.id)))?;
        }
        Ok(())
    }

    pub fn link(&self, a: usize, b: usize) -> LinkClass {
        self.gpu_links
            .get(a)
            .and_then(|r| r.get(b))
            .copied()
            .unwrap_or(LinkClass::Unknown)
    }

    /// All logical CPU ids of the node: from NUMA nodes when known, else from `cpus`.
    pub fn all_cpus(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .numa_nodes
            .iter()
            .flat_map(|n| crate::cpulist::parse(&n.cpus).unwrap_or_default())
            .collect();
        if all.is_empty() {
            all = (0..self.cpus.unwrap_or(0)).collect();
        }
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The GPU model most GPUs report, for display and `--gres=gpu:type` matching.
    pub fn gpu_model(&self) -> Option<&str> {
        self.gpus.iter().find_map(|g| g.model.as_deref())
    }

    /// NUMA node of a GPU: reported value, else the NUMA node whose CPUs contain the GPU's
    /// affinity CPUs.
    pub fn gpu_numa(&self, gpu: usize) -> Option<u32> {
        let g = self.gpus.get(gpu)?;
        if g.numa_node.is_some() {
            return g.numa_node;
        }
        let cpus = crate::cpulist::parse(g.cpus.as_deref()?).ok()?;
        let first = *cpus.first()?;
        self.numa_nodes
            .iter()
            .find(|n| {
                crate::cpulist::parse(&n.cpus)
                    .map(|c| c.contains(&first))
                    .unwrap_or(false)
            })
            .map(|n| n.id)
    }
}

/// Does a GPU model name match a user's `--gres=gpu:TYPE` (case-insensitive substring,
/// ignoring spaces, dashes and underscores, as Slurm matches types against NVML names)?
pub fn model_matches(model: &str, wanted: &str) -> bool {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let w = norm(wanted);
    !w.is_empty() && norm(model).contains(&w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_classes_parse_and_order() {
        let nv18: LinkClass = "NV18".parse().unwrap();
        assert_eq!(nv18, LinkClass::NvLink(18));
        assert!(nv18.rank() < LinkClass::NvLink(4).rank());
        assert!(LinkClass::NvLink(1).rank() < LinkClass::Pix.rank());
        assert!(LinkClass::Pix.rank() < LinkClass::Pxb.rank());
        assert!(LinkClass::Phb.rank() < LinkClass::Node.rank());
        assert!(LinkClass::Node.rank() < LinkClass::Sys.rank());
        assert_eq!("SOC".parse::<LinkClass>().unwrap(), LinkClass::Sys);
        assert!("NVX".parse::<LinkClass>().is_err());
        assert_eq!(serde_json::to_string(&nv18).unwrap(), "\"NV18\"");
    }

    #[test]
    fn model_matching_is_loose_like_slurm() {
        assert!(model_matches("NVIDIA A100-SXM4-80GB", "a100"));
        assert!(model_matches("NVIDIA GeForce RTX 4090", "rtx_4090"));
        assert!(!model_matches("NVIDIA H100 80GB HBM3", "a100"));
    }
}
