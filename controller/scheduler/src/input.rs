//! The scheduler's read-only view of the cluster: nodes with their free resources and
//! wiring, pending and running jobs, and decayed usage. Built by the controller from the
//! committed state (or by the simulator from its virtual cluster).

use crate::config::SchedConfig;
use crate::topo::TopoModel;
use gsched_types::job::{Dependency, JobId, JobState};
use gsched_types::reservation::Reservation;
use gsched_types::resources::{NodeAlloc, NodeCapacity, NodeUsage};
use gsched_types::topology::{LinkClass, NicKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A NIC as placement sees it: usable or not, and its link to each GPU.
#[derive(Debug, Clone)]
pub struct NicView {
    pub name: String,
    pub kind: NicKind,
    pub speed_mbps: u64,
    pub gpu_links: Vec<LinkClass>,
}

/// One node.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub topo: Arc<TopoModel>,
    pub capacity: NodeCapacity,
    pub usage: NodeUsage,
    /// Online and not drained.
    pub available: bool,
    pub features: Vec<String>,
    pub gpu_model: Option<String>,
    pub training_addr: String,
    /// Leaf switch from the network topology, if one is configured.
    pub switch: Option<String>,
    /// CPUs of each NUMA node (id, cpus).
    pub numa_cpus: Vec<(u32, Vec<u32>)>,
    pub nics: Vec<NicView>,
    /// GPUs processes outside the jobs holding them are using (the leader's latest
    /// report from the agent, `gsched_types::outside`): given to no new job, and named as
    /// the pending reason of jobs they keep waiting.
    pub outside_gpus: Vec<u32>,
}

impl NodeView {
    /// A node with `gpus` GPUs all connected by `link`, no NUMA information, for tests and
    /// the simulator's pooled nodes.
    pub fn uniform(name: &str, gpus: u32, link: LinkClass, cpus: u32, mem_mb: u64) -> NodeView {
        NodeView {
            name: name.into(),
            topo: Arc::new(TopoModel::uniform(gpus as usize, link)),
            capacity: NodeCapacity {
                gpu_count: gpus,
                bad_gpus: Default::default(),
                cpus: (0..cpus).collect(),
                mem_mb,
            },
            usage: NodeUsage::default(),
            available: true,
            features: Vec::new(),
            gpu_model: None,
            training_addr: "127.0.0.1".into(),
            switch: None,
            numa_cpus: vec![(0, (0..cpus).collect())],
            nics: Vec::new(),
            outside_gpus: Vec::new(),
        }
    }

    /// A node view from a discovered (or fake) topology, with nothing in use.
    pub fn from_topology(
        name: &str,
        topo: &gsched_types::Topology,
        training_addr: &str,
    ) -> NodeView {
        let cpus = topo.all_cpus();
        let numa_cpus: Vec<(u32, Vec<u32>)> = topo
            .numa_nodes
            .iter()
            .map(|n| {
                (
                    n.id,
                    gsched_types::cpulist::parse(&n.cpus).unwrap_or_default(),
                )
            })
            .collect();
        let mem_mb = topo
            .memory_mib
            .or_else(|| {
                topo.numa_nodes
                    .iter()
                    .map(|n| n.memory_mib)
                    .sum::<Option<u64>>()
            })
            .unwrap_or(0);
        let nics = topo
            .nics
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_usable())
            .map(|(k, n)| NicView {
                name: n.name.clone(),
                kind: n.kind,
                speed_mbps: n.speed_mbps.unwrap_or(0),
                gpu_links: (0..topo.gpus.len())
                    .map(|g| {
                        topo.gpu_nic_links
                            .get(g)
                            .and_then(|r| r.get(k))
                            .copied()
                            .unwrap_or(LinkClass::Unknown)
                    })
                    .collect(),
            })
            .collect();
        NodeView {
            name: name.into(),
            topo: Arc::new(TopoModel::from_topology(topo)),
            capacity: NodeCapacity {
                gpu_count: topo.gpus.len() as u32,
                bad_gpus: Default::default(),
                cpus,
                mem_mb,
            },
            usage: NodeUsage::default(),
            available: true,
            features: Vec::new(),
            gpu_model: topo.gpu_model().map(str::to_string),
            training_addr: training_addr.into(),
            switch: None,
            numa_cpus,
            nics,
            outside_gpus: Vec::new(),
        }
    }

    pub fn free_gpu_mask(&self) -> u64 {
        let mut mask = 0u64;
        for g in 0..self.capacity.gpu_count.min(64) {
            if !self.usage.gpus.contains(g)
                && !self.capacity.bad_gpus.contains(g)
                && !self.outside_gpus.contains(&g)
            {
                mask |= 1 << g;
            }
        }
        mask
    }

    pub fn free_cpus_under(&self, usage: &NodeUsage) -> usize {
        self.capacity
            .cpus
            .len()
            .saturating_sub(usage.cpus.len() as usize)
    }

    pub fn free_cpus(&self) -> u32 {
        self.capacity
            .cpus
            .iter()
            .filter(|c| !self.usage.cpus.contains(**c))
            .count() as u32
    }

    pub fn free_mem_mb(&self) -> u64 {
        self.capacity.mem_mb.saturating_sub(self.usage.mem_mb)
    }

    /// Usable GPU count (healthy ones).
    pub fn healthy_gpus(&self) -> u32 {
        self.capacity.gpu_count - self.capacity.bad_gpus.len().min(self.capacity.gpu_count)
    }
}

/// A pending job, reduced to what scheduling needs.
#[derive(Debug, Clone)]
pub struct PendingJob {
    pub id: JobId,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub qos: Option<String>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    /// CPUs the tasks need on each node (at least).
    pub cpus_per_node: u32,
    /// Take the GPUs' share of each node's CPUs when that is more (`JobSpec::gpu_share_cpus`).
    pub gpu_share_cpus: bool,
    /// Memory per node; `Some(0)` = whole node; `None` = proportional default.
    pub mem_mb: Option<u64>,
    pub mem_per_gpu_mb: Option<u64>,
    pub time_limit_s: Option<u64>,
    /// `--time-min`: backfill may start it with a limit this short (s).
    pub time_min_s: Option<u64>,
    pub exclusive: bool,
    /// Required node features (all must be present).
    pub constraint: Option<gsched_types::constraint::Constraint>,
    pub nodelist: Vec<String>,
    /// `--exclude`: never these nodes.
    pub exclude: Vec<String>,
    /// Nodes earlier attempts failed on: avoided while enough other nodes could host
    /// the job, used when they are all it has (a one-node lab must not strand it).
    pub avoid: Vec<String>,
    pub dependency: Vec<Dependency>,
    pub held: bool,
    /// `--begin`: not before this (ms).
    pub begin_ms: Option<u64>,
    /// `--nice`: subtracted from the priority.
    pub nice: i32,
    pub eligible_ms: u64,
    /// When the job first waited for its best placement (`TopologyWait`), if it has.
    pub placement_wait_since_ms: Option<u64>,
    /// (array job id, throttle) for array tasks.
    pub array: Option<(JobId, Option<u32>)>,
    /// `--reservation`: only inside this one.
    pub reservation: Option<String>,
    /// `--switches`: leaf switches accepted and how long to wait for them.
    pub switches: Option<gsched_types::job::SwitchWait>,
}

impl PendingJob {
    /// A plain 1-node job for tests and the simulator.
    pub fn simple(id: u64, gpus: u32, time_limit_s: Option<u64>, eligible_ms: u64) -> PendingJob {
        PendingJob {
            id: JobId(id),
            name: format!("job{id}"),
            user: "user".into(),
            account: "default".into(),
            partition: "gpu".into(),
            qos: None,
            nodes: 1,
            gpus_per_node: gpus,
            gpu_type: None,
            cpus_per_node: 1,
            gpu_share_cpus: false,
            mem_mb: None,
            mem_per_gpu_mb: None,
            time_limit_s,
            time_min_s: None,
            exclusive: false,
            constraint: None,
            nodelist: Vec::new(),
            exclude: Vec::new(),
            avoid: Vec::new(),
            dependency: Vec::new(),
            held: false,
            begin_ms: None,
            nice: 0,
            eligible_ms,
            placement_wait_since_ms: None,
            array: None,
            reservation: None,
            switches: None,
        }
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }
}

/// A running job: what it holds and until when it may hold it.
#[derive(Debug, Clone)]
pub struct RunningJob {
    pub id: JobId,
    pub name: String,
    pub user: String,
    pub account: String,
    pub qos: Option<String>,
    pub start_ms: u64,
    pub time_limit_s: Option<u64>,
    pub allocation: Vec<NodeAlloc>,
    pub master_port: u16,
    pub array_job: Option<JobId>,
    /// Being stopped (completing): its resources free up soon.
    pub ending: bool,
}

impl RunningJob {
    pub fn gpus(&self) -> u32 {
        self.allocation.iter().map(|a| a.gpus.len() as u32).sum()
    }

    /// When the job must have ended at the latest; `None` if unlimited.
    pub fn end_bound_ms(&self) -> Option<u64> {
        self.time_limit_s.map(|t| self.start_ms + t * 1000)
    }
}

/// Facts about a job another job depends on.
#[derive(Debug, Clone, Copy)]
pub struct DepView {
    pub state: JobState,
    pub exit_code: Option<i32>,
}

/// Decayed GPU usage of one (account, user) pair, valid at `at_ms`.
#[derive(Debug, Clone)]
pub struct UsageRecord {
    pub account: String,
    pub user: String,
    pub gpu_seconds: f64,
    pub at_ms: u64,
}

/// Everything one scheduling pass reads.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub config: Arc<SchedConfig>,
    pub nodes: Vec<NodeView>,
    pub pending: Vec<PendingJob>,
    pub running: Vec<RunningJob>,
    /// States of jobs named in dependencies.
    pub dependencies: BTreeMap<JobId, DepView>,
    pub usage: Vec<UsageRecord>,
    /// Admin reservations that have not ended.
    pub reservations: Vec<Reservation>,
}
