//! Placement: which nodes, which GPUs, CPUs, memory and NIC a job gets, given what is free.
//!
//! Within a node the GPU set comes from [`TopoModel::best_set`] (best worst-link, then
//! fewest NUMA nodes, then anti-fragmentation). Across nodes a gang takes exactly the node
//! count asked, all with the same GPU model, from as few leaf switches as possible,
//! preferring nodes whose pick is best connected, RDMA-capable and fullest (best fit).
//! The baselines (`fifo`, `fifo-backfill`) take nodes in name order and GPUs by index.

use crate::config::Policy;
use crate::input::{NodeView, PendingJob, Snapshot};
use crate::topo::{Choice, SetQuality, mask_to_ids};
use gsched_types::resources::{NodeAlloc, NodeUsage};
use gsched_types::topology::{NicKind, model_matches};
use std::collections::HashMap;

/// One node's share of a placement.
#[derive(Debug, Clone)]
pub struct NodePick {
    pub node: usize,
    pub alloc: NodeAlloc,
    pub quality: SetQuality,
    pub leftover: Vec<SetQuality>,
    pub free_after: u32,
    nic_key: (bool, u64),
}

/// Why a job cannot be placed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// No set of registered nodes could ever satisfy the request.
    Never(String),
    /// Enough nodes exist but some it needs are drained, down or offline.
    Unavailable(Vec<String>),
    /// Suitable nodes exist but their resources are in use.
    Busy,
}

/// The static part of a job that decides which nodes could ever host it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShapeKey {
    partition: String,
    nodes: u32,
    gpus_per_node: u32,
    gpu_type: Option<String>,
    cpus_per_node: u32,
    mem_mb: Option<u64>,
    mem_per_gpu_mb: Option<u64>,
    exclusive: bool,
    constraint: Vec<String>,
    nodelist: Vec<String>,
    exclude: Vec<String>,
}

impl ShapeKey {
    pub fn of(job: &PendingJob) -> ShapeKey {
        ShapeKey {
            partition: job.partition.clone(),
            nodes: job.nodes,
            gpus_per_node: job.gpus_per_node,
            gpu_type: job.gpu_type.clone(),
            cpus_per_node: job.cpus_per_node,
            mem_mb: job.mem_mb,
            mem_per_gpu_mb: job.mem_per_gpu_mb,
            exclusive: job.exclusive,
            constraint: job.constraint.clone(),
            nodelist: job.nodelist.clone(),
            exclude: job.exclude.clone(),
        }
    }
}

/// Nodes that could ever host a shape, and why the others cannot.
#[derive(Debug, Clone)]
struct Eligibility {
    nodes: Vec<usize>,
    never: Option<String>,
}

/// Places jobs on one snapshot's nodes; caches per-shape eligibility for the pass.
pub struct Placer<'a> {
    snap: &'a Snapshot,
    policy: Policy,
    partitions: Vec<Vec<String>>,
    eligibility: HashMap<ShapeKey, Eligibility>,
}

impl<'a> Placer<'a> {
    pub fn new(snap: &'a Snapshot) -> Placer<'a> {
        let config = &snap.config;
        let partitions = snap
            .nodes
            .iter()
            .map(|n| {
                if config.partitions.is_empty() {
                    vec![config.default_partition()]
                } else {
                    config.partitions.iter().filter(|p| config.partition_has_node(&p.name, &n.name)).map(|p| p.name.clone()).collect()
                }
            })
            .collect();
        Placer { snap, policy: config.policy, partitions, eligibility: HashMap::new() }
    }

    pub fn nodes(&self) -> &[NodeView] {
        &self.snap.nodes
    }

    /// Why `node` can never host `job` (static facts only), or `None` if it could.
    fn ineligible(&self, job: &PendingJob, ni: usize) -> Option<String> {
        let node = &self.snap.nodes[ni];
        if !self.partitions[ni].iter().any(|p| p == &job.partition) {
            return Some(format!("not in partition {}", job.partition));
        }
        if job.exclude.iter().any(|x| x == &node.name) {
            return Some("excluded".into());
        }
        if !job.nodelist.is_empty() && job.nodelist.len() as u32 >= job.nodes && !job.nodelist.iter().any(|x| x == &node.name) {
            return Some("not in --nodelist".into());
        }
        if let Some(t) = &job.gpu_type {
            if !node.gpu_model.as_deref().is_some_and(|m| model_matches(m, t)) {
                return Some(format!("GPU model is not {t}"));
            }
        }
        if let Some(f) = job.constraint.iter().find(|f| !node.features.iter().any(|nf| nf == *f) && !node.gpu_model.as_deref().is_some_and(|m| model_matches(m, f))) {
            return Some(format!("lacks feature {f}"));
        }
        if job.gpus_per_node > node.healthy_gpus() {
            return Some(format!("has {} usable GPUs, {} wanted", node.healthy_gpus(), job.gpus_per_node));
        }
        if job.cpus_per_node as usize > node.capacity.cpus.len() {
            return Some(format!("has {} CPUs, {} wanted", node.capacity.cpus.len(), job.cpus_per_node));
        }
        let mem = mem_for(job, node, job.gpus_per_node);
        if mem > node.capacity.mem_mb {
            return Some(format!("has {} MB memory, {mem} MB wanted", node.capacity.mem_mb));
        }
        None
    }

    fn eligibility(&mut self, job: &PendingJob) -> Eligibility {
        let key = ShapeKey::of(job);
        if let Some(e) = self.eligibility.get(&key) {
            return e.clone();
        }
        let mut nodes = Vec::new();
        let mut why: HashMap<String, u32> = HashMap::new();
        for ni in 0..self.snap.nodes.len() {
            match self.ineligible(job, ni) {
                None => nodes.push(ni),
                Some(w) => *why.entry(w).or_default() += 1,
            }
        }
        let never = if (nodes.len() as u32) < job.nodes {
            let mut reasons: Vec<(String, u32)> = why.into_iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let detail = reasons.iter().take(3).map(|(w, n)| format!("{n} node(s) {w}")).collect::<Vec<_>>().join("; ");
            Some(if self.snap.nodes.is_empty() {
                "no nodes are registered".to_string()
            } else {
                format!("{} node(s) wanted, {} could ever fit ({detail})", job.nodes, nodes.len())
            })
        } else {
            None
        };
        let e = Eligibility { nodes, never };
        self.eligibility.insert(key, e.clone());
        e
    }

    /// Would the job ever fit on the registered nodes? `Err` says why not.
    pub fn check_ever_fits(&mut self, job: &PendingJob) -> Result<(), String> {
        match self.eligibility(job).never {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// The best pick on one node, or `None` if the job does not fit there now.
    /// `reserved` masks GPUs that must not be used.
    pub fn pick_on_node(&self, job: &PendingJob, ni: usize, usage: &NodeUsage, reserved: u64) -> Option<NodePick> {
        let node = &self.snap.nodes[ni];
        if usage.exclusive || (job.exclusive && usage.jobs > 0) {
            return None;
        }
        let free = free_mask(node, usage) & !reserved;
        let k = job.gpus_per_node;
        if free.count_ones() < k {
            return None;
        }
        let choice = match self.policy {
            Policy::Gsched => node.topo.best_set(free, k)?,
            Policy::FifoBackfill | Policy::Fifo => first_k(free, k),
        };
        let gpus = mask_to_ids(choice.mask);
        let cpus = choose_cpus(node, usage, &gpus, job.cpus_per_node, job.exclusive)?;
        let mem = mem_for(job, node, k);
        if mem > node.capacity.mem_mb.saturating_sub(usage.mem_mb) {
            return None;
        }
        let nic = choose_nic(node, &gpus);
        let nic_key = nic.as_ref().and_then(|n| node.nics.iter().find(|x| &x.name == n)).map(|n| (n.kind != NicKind::Ib && n.kind != NicKind::Roce, u64::MAX - n.speed_mbps)).unwrap_or((true, u64::MAX));
        let alloc = NodeAlloc { node: node.name.clone(), gpus, cpus, mem_mb: mem, nic, exclusive: job.exclusive };
        debug_assert!(gsched_types::resources::fits(&node.capacity, usage, &alloc).is_ok());
        Some(NodePick { node: ni, free_after: free.count_ones() - k, quality: choice.quality, leftover: choice.leftover, alloc, nic_key })
    }

    /// Places `job` on the free resources described by `usage` (one entry per node),
    /// avoiding the GPUs in `reserved` (per node). Returns picks in node-rank order.
    pub fn place(&mut self, job: &PendingJob, usage: &[NodeUsage], reserved: &dyn Fn(usize) -> u64) -> Result<Vec<NodePick>, Blocked> {
        let elig = self.eligibility(job);
        if let Some(why) = elig.never {
            return Err(Blocked::Never(why));
        }
        let mut unavailable = Vec::new();
        let mut picks = Vec::new();
        let mut available = 0u32;
        for &ni in &elig.nodes {
            let node = &self.snap.nodes[ni];
            if !node.available {
                unavailable.push(node.name.clone());
                continue;
            }
            available += 1;
            if let Some(p) = self.pick_on_node(job, ni, &usage[ni], reserved(ni)) {
                picks.push(p);
                if self.policy != Policy::Gsched && picks.len() as u32 == job.nodes && job.nodelist.is_empty() {
                    break;
                }
            }
        }
        // `-w` nodes are required members of the allocation.
        let required: Vec<&String> = job.nodelist.iter().collect();
        let missing_required: Vec<String> = required.iter().filter(|r| unavailable.contains(r)).map(|r| r.to_string()).collect();
        if !missing_required.is_empty() {
            return Err(Blocked::Unavailable(missing_required));
        }
        if available < job.nodes {
            return Err(Blocked::Unavailable(unavailable));
        }
        if (picks.len() as u32) < job.nodes {
            return Err(Blocked::Busy);
        }
        let chosen = match self.policy {
            Policy::Gsched => select_gang(&self.snap.nodes, picks, job),
            Policy::FifoBackfill | Policy::Fifo => select_first(picks, job),
        };
        chosen.ok_or(Blocked::Busy)
    }
}

/// Free, healthy GPUs of a node under `usage`.
pub fn free_mask(node: &NodeView, usage: &NodeUsage) -> u64 {
    let mut mask = 0u64;
    for g in 0..node.capacity.gpu_count.min(64) {
        if !usage.gpus.contains(g) && !node.capacity.bad_gpus.contains(g) {
            mask |= 1 << g;
        }
    }
    mask
}

fn first_k(free: u64, k: u32) -> Choice {
    let mut mask = 0u64;
    let mut left = k;
    for b in 0..64 {
        if left == 0 {
            break;
        }
        if free & (1 << b) != 0 {
            mask |= 1 << b;
            left -= 1;
        }
    }
    Choice { mask, quality: SetQuality::default(), leftover: Vec::new() }
}

/// Memory per node for a job: explicit `--mem` (0 = all), `--mem-per-gpu` x GPUs, or by
/// default a share of the node proportional to the GPUs (or CPUs) taken.
pub fn mem_for(job: &PendingJob, node: &NodeView, gpus: u32) -> u64 {
    let total = node.capacity.mem_mb;
    if job.exclusive || job.mem_mb == Some(0) {
        return total;
    }
    if let Some(m) = job.mem_mb {
        return m;
    }
    if let Some(per) = job.mem_per_gpu_mb {
        return per * u64::from(gpus);
    }
    if node.capacity.gpu_count > 0 && gpus > 0 {
        total * u64::from(gpus) / u64::from(node.capacity.gpu_count)
    } else {
        let cpus = node.capacity.cpus.len().max(1) as u64;
        (total * u64::from(job.cpus_per_node) / cpus).max(1.min(total))
    }
}

/// CPUs on the GPUs' NUMA nodes first (lowest ids), then the others; CPU-only jobs go to
/// the NUMA node with the most free CPUs.
fn choose_cpus(node: &NodeView, usage: &NodeUsage, gpus: &[u32], count: u32, exclusive: bool) -> Option<Vec<u32>> {
    if exclusive {
        return if node.capacity.cpus.iter().any(|c| usage.cpus.contains(*c)) { None } else { Some(node.capacity.cpus.clone()) };
    }
    if count == 0 {
        return Some(Vec::new());
    }
    let free_in = |cpus: &[u32]| cpus.iter().copied().filter(|c| !usage.cpus.contains(*c)).collect::<Vec<u32>>();
    let mut preferred: Vec<u32> = gpus.iter().filter_map(|g| node.topo.numa_of(*g)).collect();
    preferred.dedup();
    if preferred.is_empty() && gpus.is_empty() {
        if let Some((id, _)) = node.numa_cpus.iter().map(|(id, cpus)| (*id, free_in(cpus).len())).max_by_key(|(id, n)| (*n, u32::MAX - id)) {
            preferred.push(id);
        }
    }
    let mut order: Vec<u32> = Vec::new();
    for id in &preferred {
        if let Some((_, cpus)) = node.numa_cpus.iter().find(|(n, _)| n == id) {
            order.extend(free_in(cpus));
        }
    }
    let mut rest: Vec<&(u32, Vec<u32>)> = node.numa_cpus.iter().filter(|(id, _)| !preferred.contains(id)).collect();
    rest.sort_by_key(|(id, cpus)| (usize::MAX - free_in(cpus).len(), *id));
    for (_, cpus) in rest {
        order.extend(free_in(cpus));
    }
    if node.numa_cpus.is_empty() {
        order = free_in(&node.capacity.cpus);
    }
    if (order.len() as u32) < count {
        return None;
    }
    let mut chosen: Vec<u32> = order.into_iter().take(count as usize).collect();
    chosen.sort_unstable();
    Some(chosen)
}

/// The usable NIC nearest to the GPUs: best worst-link to them, then RDMA, then speed.
fn choose_nic(node: &NodeView, gpus: &[u32]) -> Option<String> {
    node.nics
        .iter()
        .min_by_key(|n| {
            let worst = gpus.iter().map(|g| n.gpu_links.get(*g as usize).map(|l| l.rank()).unwrap_or(u16::MAX)).max().unwrap_or(0);
            (worst, !n.kind.is_rdma(), u64::MAX - n.speed_mbps, n.name.clone())
        })
        .map(|n| n.name.clone())
}

fn node_key(p: &NodePick, nodes: &[NodeView]) -> (SetQuality, u32, Vec<SetQuality>, String) {
    (p.quality, p.free_after, p.leftover.clone(), nodes[p.node].name.clone())
}

/// Chooses the gang: one GPU model, fewest switches, best-connected and fullest nodes.
fn select_gang(nodes: &[NodeView], picks: Vec<NodePick>, job: &PendingJob) -> Option<Vec<NodePick>> {
    let n = job.nodes as usize;
    if n == 1 && job.nodelist.is_empty() {
        return picks.into_iter().min_by(|a, b| node_key(a, nodes).cmp(&node_key(b, nodes))).map(|p| vec![p]);
    }
    // Group by GPU model unless the user named one (then all picks already match).
    let mut by_model: HashMap<String, Vec<NodePick>> = HashMap::new();
    for p in picks {
        let model = if job.gpu_type.is_some() { String::new() } else { nodes[p.node].gpu_model.clone().unwrap_or_default() };
        by_model.entry(model).or_default().push(p);
    }
    let mut best: Option<(usize, SetQuality, (bool, u64), u32, Vec<String>, Vec<NodePick>)> = None;
    let mut models: Vec<_> = by_model.into_iter().collect();
    models.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, mut group) in models {
        if group.len() < n {
            continue;
        }
        group.sort_by(|a, b| (a.quality, a.nic_key, a.free_after, &nodes[a.node].name).cmp(&(b.quality, b.nic_key, b.free_after, &nodes[b.node].name)));
        let Some(chosen) = choose_by_switch(nodes, group, n, &job.nodelist) else { continue };
        let switches = {
            let mut s: Vec<Option<&String>> = chosen.iter().map(|p| nodes[p.node].switch.as_ref()).collect();
            s.sort();
            s.dedup();
            s.len()
        };
        let worst = chosen.iter().map(|p| p.quality).max().unwrap_or_default();
        let nic = chosen.iter().map(|p| p.nic_key).max().unwrap_or((true, u64::MAX));
        let packing: u32 = chosen.iter().map(|p| p.free_after).sum();
        let names: Vec<String> = chosen.iter().map(|p| nodes[p.node].name.clone()).collect();
        let key = (switches, worst, nic, packing, names.clone());
        if best.as_ref().is_none_or(|b| key < (b.0, b.1, b.2, b.3, b.4.clone())) {
            best = Some((key.0, key.1, key.2, key.3, key.4, chosen));
        }
    }
    let mut chosen = best?.5;
    chosen.sort_by(|a, b| nodes[a.node].name.cmp(&nodes[b.node].name));
    Some(chosen)
}

/// From picks sorted best-first, takes `n` nodes from as few leaf switches as possible,
/// always including the `required` (`-w`) nodes.
fn choose_by_switch(nodes: &[NodeView], sorted: Vec<NodePick>, n: usize, required: &[String]) -> Option<Vec<NodePick>> {
    let (mut must, rest): (Vec<NodePick>, Vec<NodePick>) = sorted.into_iter().partition(|p| required.contains(&nodes[p.node].name));
    if must.len() > n {
        return None;
    }
    let need = n - must.len();
    let mut by_switch: Vec<(Option<String>, Vec<NodePick>)> = Vec::new();
    for p in rest {
        let sw = nodes[p.node].switch.clone();
        match by_switch.iter_mut().find(|(s, _)| *s == sw) {
            Some((_, v)) => v.push(p),
            None => by_switch.push((sw, vec![p])),
        }
    }
    // Switches already used by required nodes come first, then the ones that can hold the
    // rest alone (best first node), then the largest.
    let must_switches: Vec<Option<String>> = must.iter().map(|p| nodes[p.node].switch.clone()).collect();
    by_switch.sort_by(|a, b| {
        let a_key = (!must_switches.contains(&a.0), a.1.len() < need, usize::MAX - a.1.len().min(need));
        let b_key = (!must_switches.contains(&b.0), b.1.len() < need, usize::MAX - b.1.len().min(need));
        a_key.cmp(&b_key)
    });
    for (_, group) in by_switch {
        for p in group {
            if must.len() == n {
                break;
            }
            must.push(p);
        }
    }
    if must.len() < n { None } else { Some(must) }
}

fn select_first(picks: Vec<NodePick>, job: &PendingJob) -> Option<Vec<NodePick>> {
    let n = job.nodes as usize;
    if picks.len() < n {
        return None;
    }
    Some(picks.into_iter().take(n).collect())
}
