//! What the state machine's test files share: a node of N NVLinked GPUs on one NUMA node.

use gsched_types::topology::{Gpu, LinkClass, NumaNode, Topology};

/// `gpus` GPUs, all NVLinked, on one NUMA node with CPUs `cpus` and 64 GiB.
pub fn nvlinked(gpus: u32, cpus: &str) -> Topology {
    let mut t = Topology::empty("test");
    for i in 0..gpus {
        t.gpus.push(Gpu::new(i));
    }
    t.gpu_links = (0..gpus)
        .map(|i| {
            (0..gpus)
                .map(|j| {
                    if i == j {
                        LinkClass::SameDevice
                    } else {
                        LinkClass::NvLink(4)
                    }
                })
                .collect()
        })
        .collect();
    t.numa_nodes = vec![NumaNode {
        id: 0,
        cpus: cpus.into(),
        memory_mib: Some(65536),
    }];
    t.memory_mib = Some(65536);
    t
}
