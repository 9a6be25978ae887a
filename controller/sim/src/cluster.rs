//! Simulated clusters: node classes, each with a topology, and a leaf-switch layout.
//!
//! `philly-760` is the benchmark preset: 100 two-GPU nodes (one PIX pair) and 70 eight-GPU
//! nodes (two sockets, a PCIe switch under each GPU pair: PIX in a pair, PXB within a
//! socket, SYS across), 760 GPUs, 20 nodes per leaf switch.

use gsched_scheduler::NodeView;
use gsched_types::topology::{Gpu, LinkClass, NumaNode, Topology};

pub struct NodeClass {
    pub count: u32,
    pub topology: Topology,
    pub name: String,
}

pub struct ClusterSpec {
    pub classes: Vec<NodeClass>,
    pub nodes_per_switch: u32,
    /// Bandwidth per node into the network (GB/s) for the communication model.
    pub network_gbps: f64,
}

fn topo(
    gpus: u32,
    link: impl Fn(u32, u32) -> LinkClass,
    numa_of: impl Fn(u32) -> u32,
    sockets: u32,
    cpus_per_socket: u32,
    mem_mib: u64,
) -> Topology {
    let mut t = Topology::empty("gsim");
    for i in 0..gpus {
        let mut g = Gpu::new(i);
        g.numa_node = Some(numa_of(i));
        let s = numa_of(i);
        g.cpus = Some(format!(
            "{}-{}",
            s * cpus_per_socket,
            (s + 1) * cpus_per_socket - 1
        ));
        g.model = Some("sim-gpu".into());
        t.gpus.push(g);
    }
    t.gpu_links = (0..gpus)
        .map(|i| {
            (0..gpus)
                .map(|j| {
                    if i == j {
                        LinkClass::SameDevice
                    } else {
                        link(i, j)
                    }
                })
                .collect()
        })
        .collect();
    t.numa_nodes = (0..sockets)
        .map(|s| NumaNode {
            id: s,
            cpus: format!("{}-{}", s * cpus_per_socket, (s + 1) * cpus_per_socket - 1),
            memory_mib: Some(mem_mib / u64::from(sockets)),
        })
        .collect();
    t.memory_mib = Some(mem_mib);
    t
}

/// Two GPUs behind one PCIe switch.
pub fn two_gpu_pix() -> Topology {
    topo(2, |_, _| LinkClass::Pix, |_| 0, 1, 16, 128 * 1024)
}

/// Eight GPUs, two sockets, one PCIe switch per GPU pair.
pub fn eight_gpu_pcie() -> Topology {
    topo(
        8,
        |i, j| {
            if i / 2 == j / 2 {
                LinkClass::Pix
            } else if i / 4 == j / 4 {
                LinkClass::Pxb
            } else {
                LinkClass::Sys
            }
        },
        |i| i / 4,
        2,
        32,
        512 * 1024,
    )
}

pub fn preset(name: &str) -> Option<ClusterSpec> {
    match name {
        "philly-760" => Some(ClusterSpec {
            classes: vec![
                NodeClass {
                    count: 100,
                    topology: two_gpu_pix(),
                    name: "p2".into(),
                },
                NodeClass {
                    count: 70,
                    topology: eight_gpu_pcie(),
                    name: "p8".into(),
                },
            ],
            nodes_per_switch: 20,
            network_gbps: 12.5,
        }),
        "philly-full" => Some(ClusterSpec {
            classes: vec![
                NodeClass {
                    count: 321,
                    topology: two_gpu_pix(),
                    name: "p2".into(),
                },
                NodeClass {
                    count: 231,
                    topology: eight_gpu_pcie(),
                    name: "p8".into(),
                },
            ],
            nodes_per_switch: 20,
            network_gbps: 12.5,
        }),
        _ => None,
    }
}

/// `nodes` identical nodes of `gpus` GPUs (the 8-GPU PCIe layout for 8, else uniform PIX),
/// or of the given topology.
pub fn uniform(nodes: u32, gpus: u32, topology: Option<Topology>) -> ClusterSpec {
    let t = topology.unwrap_or_else(|| {
        if gpus == 8 {
            eight_gpu_pcie()
        } else if gpus == 2 {
            two_gpu_pix()
        } else {
            topo(gpus, |_, _| LinkClass::Pxb, |_| 0, 1, 32, 512 * 1024)
        }
    });
    ClusterSpec {
        classes: vec![NodeClass {
            count: nodes,
            topology: t,
            name: "n".into(),
        }],
        nodes_per_switch: 20,
        network_gbps: 12.5,
    }
}

impl ClusterSpec {
    pub fn node_views(&self) -> Vec<NodeView> {
        let mut out = Vec::new();
        let mut k = 0u32;
        for class in &self.classes {
            let base = NodeView::from_topology("x", &class.topology, "10.0.0.1");
            for i in 0..class.count {
                let mut v = base.clone();
                v.name = format!("{}-{i:04}", class.name);
                // Each node its own training address, as on a real cluster: MASTER_PORTs
                // are unique per address, and one address for every node would cap the
                // whole simulated cluster at one port range's worth of running jobs.
                v.training_addr =
                    format!("10.{}.{}.{}", 1 + k / 62_500, (k / 250) % 250, 1 + k % 250);
                v.switch = Some(format!("leaf{}", k / self.nodes_per_switch.max(1)));
                out.push(v);
                k += 1;
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The wiring of the node `node_views` names `name`.
    pub fn topology_of(&self, name: &str) -> Option<&Topology> {
        self.classes.iter().find_map(|c| {
            let index: u32 = name
                .strip_prefix(&c.name)?
                .strip_prefix('-')?
                .parse()
                .ok()?;
            (index < c.count).then_some(&c.topology)
        })
    }

    pub fn total_gpus(&self) -> u32 {
        self.classes
            .iter()
            .map(|c| c.count * c.topology.gpus.len() as u32)
            .sum()
    }

    pub fn max_gpus_per_node(&self) -> u32 {
        self.classes
            .iter()
            .map(|c| c.topology.gpus.len() as u32)
            .max()
            .unwrap_or(0)
    }
}
