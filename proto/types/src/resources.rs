//! Allocations and per-node accounting, with the one `fits` check that both the scheduler
//! (when planning) and the state machine (when applying a plan) use, so they can never
//! disagree about what fits.

use serde::{Deserialize, Serialize};

/// What one job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeAlloc {
    pub node: String,
    /// GPU indices in PCI order (the order `CUDA_VISIBLE_DEVICES` lists them).
    pub gpus: Vec<u32>,
    pub cpus: Vec<u32>,
    pub mem_mb: u64,
    /// The NIC chosen for this job's traffic (nearest to its GPUs).
    #[serde(default)]
    pub nic: Option<String>,
    /// Whole node held (`--exclusive` or `--mem=0`).
    #[serde(default)]
    pub exclusive: bool,
}

/// A job's placement: one entry per node, in node-rank order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Allocation {
    pub nodes: Vec<NodeAlloc>,
    /// Address of node rank 0 on the training network.
    pub master_addr: String,
    pub master_port: u16,
}

/// A set of small integers (CPU ids, GPU indices) as a bitmap.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct IdSet(Vec<u64>);

impl IdSet {
    pub fn from_ids(ids: &[u32]) -> IdSet {
        let mut s = IdSet::default();
        for &i in ids {
            s.insert(i);
        }
        s
    }
    pub fn insert(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (i % 64);
    }
    pub fn remove(&mut self, i: u32) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }
    pub fn contains(&self, i: u32) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, w)| {
            (0..64)
                .filter(move |b| w & (1u64 << b) != 0)
                .map(move |b| wi as u32 * 64 + b)
        })
    }
}

/// What is in use on one node, derived from the running allocations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeUsage {
    pub gpus: IdSet,
    pub cpus: IdSet,
    pub mem_mb: u64,
    pub jobs: u32,
    /// A job holds the whole node.
    pub exclusive: bool,
}

impl NodeUsage {
    pub fn add(&mut self, a: &NodeAlloc) {
        for &g in &a.gpus {
            self.gpus.insert(g);
        }
        for &c in &a.cpus {
            self.cpus.insert(c);
        }
        self.mem_mb += a.mem_mb;
        self.jobs += 1;
        self.exclusive |= a.exclusive;
    }

    pub fn remove(&mut self, a: &NodeAlloc) {
        for &g in &a.gpus {
            self.gpus.remove(g);
        }
        for &c in &a.cpus {
            self.cpus.remove(c);
        }
        self.mem_mb = self.mem_mb.saturating_sub(a.mem_mb);
        self.jobs = self.jobs.saturating_sub(1);
        if a.exclusive {
            self.exclusive = false;
        }
    }
}

/// What a node offers to the scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeCapacity {
    /// Number of GPUs (indices 0..gpu_count).
    pub gpu_count: u32,
    /// GPUs that must not be handed out (lost, Xid, drained individually).
    pub bad_gpus: IdSet,
    pub cpus: Vec<u32>,
    pub mem_mb: u64,
}

/// Why an allocation does not fit on a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("GPU {0} does not exist on this node")]
    NoSuchGpu(u32),
    #[error("GPU {0} is unhealthy")]
    BadGpu(u32),
    #[error("GPU {0} is already allocated")]
    GpuBusy(u32),
    #[error("CPU {0} does not exist on this node")]
    NoSuchCpu(u32),
    #[error("CPU {0} is already allocated")]
    CpuBusy(u32),
    #[error("not enough memory: {want} MB wanted, {free} MB free")]
    Memory { want: u64, free: u64 },
    #[error("the node is held exclusively by another job")]
    Exclusive,
    #[error("an exclusive job needs an empty node")]
    NotEmpty,
}

/// The single capacity check. The scheduler plans with it and the state machine re-checks
/// every committed allocation with it, so a stale plan can never double-book.
pub fn fits(cap: &NodeCapacity, usage: &NodeUsage, alloc: &NodeAlloc) -> Result<(), FitError> {
    if usage.exclusive {
        return Err(FitError::Exclusive);
    }
    if alloc.exclusive && usage.jobs > 0 {
        return Err(FitError::NotEmpty);
    }
    for &g in &alloc.gpus {
        if g >= cap.gpu_count {
            return Err(FitError::NoSuchGpu(g));
        }
        if cap.bad_gpus.contains(g) {
            return Err(FitError::BadGpu(g));
        }
        if usage.gpus.contains(g) {
            return Err(FitError::GpuBusy(g));
        }
    }
    for &c in &alloc.cpus {
        if !cap.cpus.contains(&c) {
            return Err(FitError::NoSuchCpu(c));
        }
        if usage.cpus.contains(c) {
            return Err(FitError::CpuBusy(c));
        }
    }
    let free = cap.mem_mb.saturating_sub(usage.mem_mb);
    if alloc.mem_mb > free {
        return Err(FitError::Memory {
            want: alloc.mem_mb,
            free,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> NodeCapacity {
        NodeCapacity {
            gpu_count: 4,
            bad_gpus: IdSet::from_ids(&[3]),
            cpus: (0..8).collect(),
            mem_mb: 1000,
        }
    }

    fn alloc(gpus: &[u32], cpus: &[u32], mem: u64) -> NodeAlloc {
        NodeAlloc {
            node: "n".into(),
            gpus: gpus.to_vec(),
            cpus: cpus.to_vec(),
            mem_mb: mem,
            nic: None,
            exclusive: false,
        }
    }

    #[test]
    fn refuses_double_booking() {
        let mut usage = NodeUsage::default();
        let a = alloc(&[0, 1], &[0, 1], 400);
        fits(&cap(), &usage, &a).unwrap();
        usage.add(&a);
        assert_eq!(
            fits(&cap(), &usage, &alloc(&[1], &[2], 10)),
            Err(FitError::GpuBusy(1))
        );
        assert_eq!(
            fits(&cap(), &usage, &alloc(&[2], &[1], 10)),
            Err(FitError::CpuBusy(1))
        );
        assert_eq!(
            fits(&cap(), &usage, &alloc(&[2], &[2], 700)),
            Err(FitError::Memory {
                want: 700,
                free: 600
            })
        );
        assert_eq!(
            fits(&cap(), &usage, &alloc(&[3], &[2], 1)),
            Err(FitError::BadGpu(3))
        );
        fits(&cap(), &usage, &alloc(&[2], &[2], 600)).unwrap();
        usage.remove(&a);
        assert!(usage.gpus.is_empty() && usage.mem_mb == 0);
    }

    #[test]
    fn exclusive_needs_empty_node() {
        let mut usage = NodeUsage::default();
        usage.add(&alloc(&[0], &[0], 1));
        let mut ex = alloc(&[1], &[1], 1);
        ex.exclusive = true;
        assert_eq!(fits(&cap(), &usage, &ex), Err(FitError::NotEmpty));
    }

    #[test]
    fn idset_iterates_in_order() {
        let s = IdSet::from_ids(&[70, 3, 1]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 3, 70]);
        assert_eq!(s.len(), 3);
    }
}
