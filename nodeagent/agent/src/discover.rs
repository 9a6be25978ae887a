//! What the agent registers: from NVML and sysfs on a real node, or from a file (the
//! discovery JSON, TOML, or saved `nvidia-smi topo -m` text) with `--fake-topology` /
//! `--nvidia-smi-topo`. GPU-to-NIC link classes come from PCI paths in sysfs.

use crate::sysfs;
use gsched_topology::pci;
use gsched_types::topology::{LinkClass, Topology};
use std::path::{Path, PathBuf};

/// Where the topology comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// NVML for GPUs, sysfs (under this root) for NUMA, CPUs, memory and NICs.
    Local { sysfs_root: PathBuf },
    /// A fake topology file (JSON/TOML/topo text) standing in for the hardware.
    Fake(PathBuf),
    /// A saved `nvidia-smi topo -m` output.
    SmiTopo(PathBuf),
}

/// Why a node's topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("cannot read topology file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Fake(#[from] gsched_topology::fake::FakeTopologyError),
    #[error("{path}: {source}")]
    Matrix {
        path: String,
        source: gsched_topology::topo_matrix::TopoParseError,
    },
    #[error("GPU {gpu} does not exist ({found} GPUs found)")]
    NoSuchGpu { gpu: u32, found: usize },
}

pub fn discover(source: &Source) -> Result<Topology, DiscoverError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| DiscoverError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    match source {
        Source::Fake(path) => Ok(gsched_topology::parse_topology_file(
            &read(path)?,
            &path.display().to_string(),
        )?),
        Source::SmiTopo(path) => {
            let text = read(path)?;
            let mut t =
                gsched_topology::parse_topo_matrix(gsched_topology::strip_fixture_header(&text))
                    .map_err(|source| DiscoverError::Matrix {
                        path: path.display().to_string(),
                        source,
                    })?;
            t.source = format!("nvidia-smi topo -m ({})", path.display());
            Ok(t)
        }
        Source::Local { sysfs_root } => Ok(local(sysfs_root)),
    }
}

fn local(root: &Path) -> Topology {
    let mut topo = Topology::empty("nvml+sysfs");
    topo.numa_nodes = sysfs::numa_nodes(root);
    let (cpus, mem) = sysfs::cpus_and_memory(root);
    topo.cpus = cpus;
    topo.memory_mib = mem;
    if topo.numa_nodes.is_empty()
        && let Some(c) = cpus
    {
        topo.numa_nodes.push(gsched_types::topology::NumaNode {
            id: 0,
            cpus: format!("0-{}", c.saturating_sub(1)),
            memory_mib: mem,
        });
    }
    let found = sysfs::nics(root);
    match crate::nvml::NvmlProbe::init().and_then(|p| p.discover(root)) {
        Ok(nv) => {
            topo.gpus = nv.gpus;
            topo.gpu_links = nv.links;
            topo.driver_version = nv.driver;
        }
        Err(e) => {
            tracing::warn!("{e}");
            topo.note = Some(e.to_string());
        }
    }
    let gpu_paths: Vec<(Option<pci::PciPath>, Option<u32>)> = topo
        .gpus
        .iter()
        .map(|g| {
            let facts = g.pci_bus_id.as_deref().map(|b| sysfs::pci_facts(root, b));
            (facts.as_ref().and_then(|f| f.path.clone()), g.numa_node)
        })
        .collect();
    topo.gpu_nic_links = gpu_paths
        .iter()
        .map(|(gp, gn)| {
            found
                .iter()
                .map(|f| match (gp, &f.path) {
                    (Some(a), Some(b)) => pci::classify(a, b, *gn, f.nic.numa_node),
                    _ if f.nic.kind == gsched_types::topology::NicKind::Virtual => {
                        LinkClass::Unknown
                    }
                    _ => LinkClass::Unknown,
                })
                .collect()
        })
        .collect();
    topo.nics = found.into_iter().map(|f| f.nic).collect();
    add_addresses(&mut topo);
    topo
}

/// IPv4 addresses of each interface (from getifaddrs).
fn add_addresses(topo: &mut Topology) {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return;
    };
    for a in addrs {
        let Some(ip) = a
            .address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|s| s.ip().to_string())
        else {
            continue;
        };
        if let Some(nic) = topo
            .nics
            .iter_mut()
            .find(|n| n.netdev.as_deref() == Some(a.interface_name.as_str()))
            && !nic.ipv4.contains(&ip)
        {
            nic.ipv4.push(ip);
        }
    }
}

/// The interface holding `addr` on this machine (`lo` for 127.0.0.1).
pub fn interface_of(addr: &str) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        if a.address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|s| s.ip().to_string())
            .as_deref()
            == Some(addr)
        {
            return Some(a.interface_name);
        }
    }
    None
}

/// The local address used to reach `controller` (no packet is sent).
pub fn local_addr_towards(controller: &str) -> Option<String> {
    let target: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(controller)
        .ok()?
        .next()?;
    let sock = std::net::UdpSocket::bind(if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .ok()?;
    sock.connect(target).ok()?;
    Some(sock.local_addr().ok()?.ip().to_string())
}

/// The CPUs that go with `keep` when agents split a machine: the GPUs that share an
/// affinity (a NUMA node's CPUs, usually) share its CPUs in equal, disjoint slices by
/// device order, so two agents on one machine never hand out the same CPU.
fn cpu_share(topo: &Topology, keep: &[usize]) -> Option<Vec<u32>> {
    let all = topo.all_cpus();
    if all.is_empty() || topo.gpus.is_empty() {
        return None;
    }
    let affinity = |i: usize| -> Vec<u32> {
        let g = &topo.gpus[i];
        let mut cpus = g
            .cpus
            .as_deref()
            .and_then(|c| gsched_types::cpulist::parse(c).ok())
            .filter(|c| !c.is_empty())
            .or_else(|| {
                let numa = topo.gpu_numa(i)?;
                let n = topo.numa_nodes.iter().find(|n| n.id == numa)?;
                gsched_types::cpulist::parse(&n.cpus).ok()
            })
            .unwrap_or_else(|| all.clone());
        cpus.retain(|c| all.contains(c));
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    };
    let sets: Vec<Vec<u32>> = (0..topo.gpus.len()).map(affinity).collect();
    let mut mine = Vec::new();
    for &k in keep {
        let peers: Vec<usize> = (0..sets.len()).filter(|&i| sets[i] == sets[k]).collect();
        let rank = peers.iter().position(|&i| i == k).unwrap_or(0);
        let per = sets[k].len() / peers.len().max(1);
        let end = if rank + 1 == peers.len() {
            sets[k].len()
        } else {
            (rank + 1) * per
        };
        mine.extend_from_slice(&sets[k][rank * per..end]);
    }
    mine.sort_unstable();
    mine.dedup();
    (!mine.is_empty()).then_some(mine)
}

/// Narrows the topology's CPUs (NUMA nodes, GPU affinities) to `keep`'s share.
fn restrict_cpus(topo: &mut Topology, keep: &[usize]) {
    let Some(mine) = cpu_share(topo, keep) else {
        return;
    };
    let narrow = |list: &str| -> String {
        let cpus: Vec<u32> = gsched_types::cpulist::parse(list)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| mine.contains(c))
            .collect();
        gsched_types::cpulist::format(&cpus)
    };
    if topo.numa_nodes.is_empty() {
        topo.cpus = Some(mine.len() as u32);
    } else {
        for n in &mut topo.numa_nodes {
            n.cpus = narrow(&n.cpus);
        }
    }
    for g in &mut topo.gpus {
        if let Some(c) = &g.cpus {
            g.cpus = Some(narrow(c));
        }
    }
}

/// Keeps only the GPUs with these device indices, renumbered 0.. in the given order's PCI
/// order; returns each kept GPU's device index (what `CUDA_VISIBLE_DEVICES` must name).
pub fn keep_gpus(topo: &mut Topology, devices: &[u32]) -> Result<Vec<u32>, DiscoverError> {
    let mut keep: Vec<u32> = devices.to_vec();
    keep.sort_unstable();
    keep.dedup();
    if let Some(bad) = keep.iter().find(|d| **d as usize >= topo.gpus.len()) {
        return Err(DiscoverError::NoSuchGpu {
            gpu: *bad,
            found: topo.gpus.len(),
        });
    }
    let idx: Vec<usize> = keep.iter().map(|d| *d as usize).collect();
    restrict_cpus(topo, &idx);
    topo.gpus = idx
        .iter()
        .enumerate()
        .map(|(new, &old)| {
            let mut g = topo.gpus[old].clone();
            g.index = new as u32;
            g
        })
        .collect();
    topo.gpu_links = idx
        .iter()
        .map(|&i| idx.iter().map(|&j| topo.gpu_links[i][j]).collect())
        .collect();
    if !topo.gpu_nic_links.is_empty() {
        topo.gpu_nic_links = idx.iter().map(|&i| topo.gpu_nic_links[i].clone()).collect();
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(name: &str) -> Topology {
        let path = format!(
            "{}/../../deploy/local/topologies/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        gsched_topology::parse_topology_file(&std::fs::read_to_string(&path).unwrap(), &path)
            .unwrap()
    }

    #[test]
    fn agents_splitting_a_machine_split_its_cpus_by_gpu_affinity() {
        let full = fake("rtx4090-8gpu.json");
        let total = full.all_cpus().len();
        let mut a = full.clone();
        let mut b = full.clone();
        let mut c = full.clone();
        keep_gpus(&mut a, &[0, 1]).unwrap();
        keep_gpus(&mut b, &[2, 3]).unwrap();
        keep_gpus(&mut c, &[4, 5, 6, 7]).unwrap();
        let (ca, cb, cc) = (a.all_cpus(), b.all_cpus(), c.all_cpus());
        assert!(ca.iter().all(|x| !cb.contains(x) && !cc.contains(x)));
        assert!(cb.iter().all(|x| !cc.contains(x)));
        assert_eq!(ca.len() + cb.len() + cc.len(), total);
        // Each agent's CPUs are on its GPUs' NUMA node.
        let numa0 = gsched_types::cpulist::parse(&full.numa_nodes[0].cpus).unwrap();
        assert!(ca.iter().all(|x| numa0.contains(x)));
        assert!(cc.iter().all(|x| !numa0.contains(x)));
        assert_eq!(a.gpu_numa(0), Some(0));
    }
}
