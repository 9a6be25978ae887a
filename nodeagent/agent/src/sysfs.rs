//! Discovery from sysfs (under a configurable root, so tests can use a fake tree): NUMA
//! nodes with their CPUs and memory, network interfaces and RDMA devices (InfiniBand vs
//! RoCE link layer, RoCE v2 GID index, port state, speed, MTU, NUMA node, PCI path), and
//! the PCI facts of GPUs (NUMA node, local CPUs, PCIe link generation and width).

use gsched_topology::pci::PciPath;
use gsched_types::topology::{Nic, NicKind, NumaNode, PcieLink};
use std::path::{Path, PathBuf};

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// `numa_node` file: -1 means unknown (never guessed as 0).
fn numa(path: impl AsRef<Path>) -> Option<u32> {
    read(path)
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(|n| n as u32)
}

/// NUMA nodes from `/sys/devices/system/node`.
pub fn numa_nodes(root: &Path) -> Vec<NumaNode> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("sys/devices/system/node")) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cpus = read(e.path().join("cpulist")).unwrap_or_default();
        let memory_mib = read(e.path().join("meminfo")).and_then(|m| {
            m.lines()
                .find(|l| l.contains("MemTotal:"))
                .and_then(|l| l.split_whitespace().rev().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
                .map(|kb| kb / 1024)
        });
        out.push(NumaNode {
            id,
            cpus,
            memory_mib,
        });
    }
    out.sort_by_key(|n| n.id);
    out
}

/// Online CPUs and total memory when NUMA information is missing.
pub fn cpus_and_memory(root: &Path) -> (Option<u32>, Option<u64>) {
    let cpus = read(root.join("sys/devices/system/cpu/online"))
        .and_then(|l| gsched_types::cpulist::parse(&l).ok())
        .map(|c| c.len() as u32);
    let mem = read(root.join("proc/meminfo"))
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024);
    (cpus, mem)
}

/// PCI facts of a GPU from `/sys/bus/pci/devices/<bdf>`.
pub struct PciFacts {
    pub numa: Option<u32>,
    pub local_cpus: Option<String>,
    pub pcie: PcieLink,
    pub path: Option<PciPath>,
}

fn gen_of(speed: &str) -> Option<u8> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    Some(match gts {
        x if x < 3.0 => 1,
        x if x < 6.0 => 2,
        x if x < 10.0 => 3,
        x if x < 20.0 => 4,
        x if x < 40.0 => 5,
        x if x < 80.0 => 6,
        _ => 7,
    })
}

/// `bdf` like `0000:00:06.0` (NVML's `00000000:00:06.0` is accepted).
pub fn pci_facts(root: &Path, bdf: &str) -> PciFacts {
    let bdf = normalize_bdf(bdf);
    let dev = root.join("sys/bus/pci/devices").join(&bdf);
    let path = std::fs::canonicalize(&dev)
        .ok()
        .and_then(|p| PciPath::parse(&p.to_string_lossy()));
    PciFacts {
        numa: numa(dev.join("numa_node")),
        local_cpus: read(dev.join("local_cpulist")),
        pcie: PcieLink {
            gen_current: read(dev.join("current_link_speed")).and_then(|s| gen_of(&s)),
            gen_max: read(dev.join("max_link_speed")).and_then(|s| gen_of(&s)),
            width_current: read(dev.join("current_link_width")).and_then(|s| s.parse().ok()),
            width_max: read(dev.join("max_link_width")).and_then(|s| s.parse().ok()),
        },
        path,
    }
}

/// `00000000:00:06.0` -> `0000:00:06.0`.
pub fn normalize_bdf(bdf: &str) -> String {
    let lower = bdf.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => lower,
    }
}

const VIRTUAL_PREFIXES: &[&str] = &[
    "lo",
    "docker",
    "veth",
    "br-",
    "virbr",
    "tun",
    "tap",
    "cni",
    "flannel",
    "cali",
    "vxlan",
    "kube",
    "dummy",
    "bond_slave",
    "wg",
    "zt",
    "tailscale",
];

fn is_virtual_name(name: &str) -> bool {
    VIRTUAL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A network interface or RDMA port as found in sysfs, with its PCI path for link classes.
pub struct FoundNic {
    pub nic: Nic,
    pub path: Option<PciPath>,
}

/// All interfaces from `/sys/class/net`, plus RDMA devices without a netdev.
pub fn nics(root: &Path) -> Vec<FoundNic> {
    let ib_root = root.join("sys/class/infiniband");
    let net = root.join("sys/class/net");
    let mut names = entry_names(&net);
    names.sort();
    let mut claimed = Vec::new();
    let mut out: Vec<FoundNic> = names
        .iter()
        .map(|name| {
            let (found, rdma) = interface(&net.join(name), name, &ib_root);
            claimed.extend(rdma);
            found
        })
        .collect();
    out.extend(verbs_only_ports(&ib_root, &claimed));
    out
}

/// The names in a directory (none when it cannot be read).
fn entry_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One network interface (`dir` is its `/sys/class/net` entry), and the RDMA device and
/// port behind it, if any.
fn interface(dir: &Path, name: &str, ib_root: &Path) -> (FoundNic, Option<(String, u32)>) {
    let device = dir.join("device");
    let has_device = device.exists();
    let kind_code = read(dir.join("type"))
        .and_then(|t| t.parse::<u32>().ok())
        .unwrap_or(1);
    let mut nic = Nic::new(name, NicKind::Ethernet);
    nic.netdev = Some(name.to_string());
    nic.mtu = read(dir.join("mtu")).and_then(|m| m.parse().ok());
    nic.speed_mbps = read(dir.join("speed"))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|s| *s > 0)
        .map(|s| s as u64);
    // "unknown" is what drivers without carrier reporting (lo, some virtual and
    // IPoIB devices) show; the administrative IFF_UP flag decides for them.
    let admin_up = read(dir.join("flags"))
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & 1 != 0);
    nic.up = read(dir.join("operstate"))
        .map(|s| s == "up" || s == "unknown" && (kind_code == 32 || admin_up));
    let path = std::fs::canonicalize(&device)
        .ok()
        .and_then(|p| PciPath::parse(&p.to_string_lossy()));
    if !has_device || is_virtual_name(name) || kind_code == 772 {
        nic.kind = NicKind::Virtual;
        return (FoundNic { nic, path: None }, None);
    }
    nic.numa_node = numa(device.join("numa_node"));
    nic.pci_bus_id = path.as_ref().map(|p| p.device().to_string());
    nic.sriov_pf = physical_function(&device);
    let rdma = rdma_behind(&mut nic, dir, &device, ib_root, kind_code);
    if rdma.is_none() && kind_code == 32 {
        nic.kind = NicKind::Ib;
    }
    (FoundNic { nic, path }, rdma)
}

/// The RDMA device behind a netdev, if any: its port's link layer decides InfiniBand or
/// RoCE, and its state and rate stand for the netdev's.
fn rdma_behind(
    nic: &mut Nic,
    dir: &Path,
    device: &Path,
    ib_root: &Path,
    kind_code: u32,
) -> Option<(String, u32)> {
    let hca = std::fs::read_dir(device.join("infiniband"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())?;
    let port = read(dir.join("dev_port"))
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    let pdir = ib_root.join(&hca).join("ports").join(port.to_string());
    let layer = read(pdir.join("link_layer")).unwrap_or_default();
    nic.kind = if layer.eq_ignore_ascii_case("InfiniBand") || kind_code == 32 {
        NicKind::Ib
    } else {
        NicKind::Roce
    };
    nic.rdma_device = Some(hca.clone());
    nic.rdma_port = Some(port);
    nic.roce_v2_gid_index = if nic.kind == NicKind::Roce {
        roce_v2_gid(&pdir, &nic.name)
    } else {
        None
    };
    if let Some(state) = read(pdir.join("state")) {
        nic.up = Some(state.contains("ACTIVE"));
    }
    if nic.speed_mbps.is_none() {
        nic.speed_mbps = port_rate_mbps(&pdir);
    }
    Some((hca, port))
}

/// A port's rate (`100 Gb/sec (4X EDR)`) in Mb/s.
fn port_rate_mbps(port_dir: &Path) -> Option<u64> {
    read(port_dir.join("rate"))
        .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
        .map(|g| (g * 1000.0) as u64)
}

/// RDMA ports with no netdev (IB HCAs used only through verbs), those in `claimed`
/// (behind a netdev) left out, HCAs in their numbered order (`mlx5_2` before `mlx5_10`).
fn verbs_only_ports(ib_root: &Path, claimed: &[(String, u32)]) -> Vec<FoundNic> {
    let mut names = entry_names(ib_root);
    names.sort_by_key(|n| {
        (
            n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string(),
            n.rsplit('_')
                .next()
                .and_then(|d| d.parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    let mut out = Vec::new();
    for hca in names {
        let Ok(ports) = std::fs::read_dir(ib_root.join(&hca).join("ports")) else {
            continue;
        };
        for p in ports.flatten() {
            let Some(port) = p.file_name().to_string_lossy().parse::<u32>().ok() else {
                continue;
            };
            if claimed.contains(&(hca.clone(), port)) {
                continue;
            }
            let pdir = p.path();
            let layer = read(pdir.join("link_layer")).unwrap_or_default();
            let mut nic = Nic::new(
                &format!("{hca}:{port}"),
                if layer.eq_ignore_ascii_case("Ethernet") {
                    NicKind::Roce
                } else {
                    NicKind::Ib
                },
            );
            nic.rdma_device = Some(hca.clone());
            nic.rdma_port = Some(port);
            nic.up = read(pdir.join("state")).map(|s| s.contains("ACTIVE"));
            nic.speed_mbps = port_rate_mbps(&pdir);
            let device = ib_root.join(&hca).join("device");
            nic.numa_node = numa(device.join("numa_node"));
            let path = std::fs::canonicalize(&device)
                .ok()
                .and_then(|p| PciPath::parse(&p.to_string_lossy()));
            nic.pci_bus_id = path.as_ref().map(|p| p.device().to_string());
            nic.sriov_pf = physical_function(&device);
            out.push(FoundNic { nic, path });
        }
    }
    out
}

/// The physical function a PCI device is an SR-IOV virtual function of: its `physfn`
/// link names the PF's device directory.
fn physical_function(device: &Path) -> Option<String> {
    let pf = std::fs::read_link(device.join("physfn")).ok()?;
    pf.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The GID index whose type is "RoCE v2", which belongs to `netdev` and holds an IPv4-mapped
/// address (what `NCCL_IB_GID_INDEX` should be).
fn roce_v2_gid(port_dir: &Path, netdev: &str) -> Option<u32> {
    let types = std::fs::read_dir(port_dir.join("gid_attrs/types")).ok()?;
    let mut candidates: Vec<u32> = types
        .flatten()
        .filter_map(|e| {
            let idx: u32 = e.file_name().to_string_lossy().parse().ok()?;
            let t = read(e.path())?;
            (t.eq_ignore_ascii_case("RoCE v2")).then_some(idx)
        })
        .collect();
    candidates.sort_unstable();
    candidates.into_iter().find(|i| {
        let dev_ok =
            read(port_dir.join(format!("gid_attrs/ndevs/{i}"))).is_none_or(|d| d == netdev);
        let gid = read(port_dir.join(format!("gids/{i}"))).unwrap_or_default();
        dev_ok && gid.starts_with("0000:0000:0000:0000:0000:ffff:")
    })
}

/// Root used when none is configured.
pub fn default_root() -> PathBuf {
    PathBuf::from("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// An IPoIB interface and its HCA at `bdf`, laid out as sysfs does.
    fn hca(root: &Path, netdev: &str, hca: &str, bdf: &str) -> PathBuf {
        let dev = root.join("sys/devices/pci0000:00/0000:00:01.0").join(bdf);
        write(&dev.join("numa_node"), "0");
        std::fs::create_dir_all(dev.join("infiniband").join(hca)).unwrap();
        let net = root.join("sys/class/net").join(netdev);
        for (f, v) in [
            ("type", "32"),
            ("mtu", "4092"),
            ("operstate", "up"),
            ("flags", "0x1003"),
        ] {
            write(&net.join(f), v);
        }
        symlink(&dev, net.join("device")).unwrap();
        let port = root.join("sys/class/infiniband").join(hca).join("ports/1");
        write(&port.join("state"), "4: ACTIVE");
        write(&port.join("link_layer"), "InfiniBand");
        write(&port.join("rate"), "100 Gb/sec (2X HDR)");
        dev
    }

    #[test]
    fn an_sriov_virtual_function_names_its_physical_function() {
        let root = tempfile::tempdir().unwrap();
        hca(root.path(), "ibs1", "mlx5_0", "0000:af:00.0");
        let vf = hca(root.path(), "ibs1v0", "mlx5_1", "0000:af:00.1");
        symlink("../0000:af:00.0", vf.join("physfn")).unwrap();
        let found = nics(root.path());
        let by = |name: &str| {
            found
                .iter()
                .find(|f| f.nic.name == name)
                .map(|f| f.nic.clone())
                .unwrap()
        };
        let (pf, vf) = (by("ibs1"), by("ibs1v0"));
        assert_eq!(
            (pf.kind, pf.rdma_device.as_deref(), pf.sriov_pf.as_deref()),
            (NicKind::Ib, Some("mlx5_0"), None)
        );
        assert_eq!(pf.pci_bus_id.as_deref(), Some("0000:af:00.0"));
        assert_eq!(
            (vf.rdma_device.as_deref(), vf.sriov_pf.as_deref()),
            (Some("mlx5_1"), Some("0000:af:00.0"))
        );
    }
    /// A RoCE port behind an Ethernet netdev (its RoCE v2 GID found), a second HCA used
    /// through verbs only, and a bridge: each as `nics` tells them.
    #[test]
    fn roce_verbs_only_and_virtual_interfaces_are_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        hca(r, "ens1", "mlx5_0", "0000:3b:00.0");
        let net = r.join("sys/class/net/ens1");
        write(&net.join("type"), "1");
        write(&net.join("speed"), "100000");
        let port = r.join("sys/class/infiniband/mlx5_0/ports/1");
        write(&port.join("link_layer"), "Ethernet");
        write(&port.join("gid_attrs/types/3"), "RoCE v2");
        write(&port.join("gid_attrs/ndevs/3"), "ens1");
        write(
            &port.join("gids/3"),
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
        );
        let verbs = r.join("sys/class/infiniband/mlx5_2/ports/1");
        write(&verbs.join("state"), "1: DOWN");
        write(&verbs.join("link_layer"), "InfiniBand");
        write(&verbs.join("rate"), "200 Gb/sec (4X HDR)");
        write(&r.join("sys/class/net/br-1/type"), "1");
        let found = nics(r);
        let names: Vec<&str> = found.iter().map(|f| f.nic.name.as_str()).collect();
        assert_eq!(names, ["br-1", "ens1", "mlx5_2:1"]);
        let (bridge, roce, ib) = (&found[0].nic, &found[1].nic, &found[2].nic);
        assert_eq!(bridge.kind, NicKind::Virtual);
        assert_eq!(
            (
                roce.kind,
                roce.rdma_port,
                roce.roce_v2_gid_index,
                roce.speed_mbps
            ),
            (NicKind::Roce, Some(1), Some(3), Some(100_000))
        );
        assert_eq!(roce.up, Some(true));
        assert_eq!(
            (ib.kind, ib.up, ib.speed_mbps, ib.netdev.as_deref()),
            (NicKind::Ib, Some(false), Some(200_000), None)
        );
    }
}
