//! Placement: which nodes, which GPUs, CPUs, memory and NIC a job gets, given what is free.
//!
//! Within a node the GPU set comes from [`TopoModel::best_set`] (best worst-link, then
//! fewest NUMA nodes, then anti-fragmentation). Across nodes a gang takes exactly the node
//! count asked, all with the same GPU model, from as few leaf switches as possible,
//! preferring nodes whose pick is best connected, RDMA-capable and fullest (best fit).
//! The baselines (`fifo`, `fifo-backfill`) take nodes in name order and GPUs by index.
//!
//! Evaluating a node is split in two: [`Placer::evaluate`] (GPU set, room for CPUs and
//! memory; cheap, memoised per free-GPU mask) for every candidate, and
//! [`Placer::materialize`] (the CPU ids and the NIC) only for the nodes chosen. Nodes with
//! the same wiring and the same free GPUs form a class that single-node jobs evaluate once.

use crate::config::Policy;
use crate::input::{NodeView, PendingJob, Snapshot};
use crate::topo::{Choice, SetQuality, mask_to_ids};
use gsched_types::constraint::Constraint;
use gsched_types::resources::{NodeAlloc, NodeUsage};
use gsched_types::topology::{NicKind, model_matches};
use hashbrown::Equivalent;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// One node's share of a placement.
#[derive(Debug, Clone)]
pub struct NodePick {
    pub node: usize,
    pub alloc: NodeAlloc,
    pub quality: SetQuality,
}

/// A node judged for a job, before CPUs and NIC are chosen.
#[derive(Debug, Clone)]
pub struct Eval {
    pub node: usize,
    pub choice: Arc<Choice>,
    pub free_after: u32,
}

impl Eval {
    fn key(&self) -> (SetQuality, u32, &[SetQuality], usize) {
        (
            self.choice.quality,
            self.free_after,
            &self.choice.leftover,
            self.node,
        )
    }
}

/// Why a job cannot be placed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// No set of registered nodes could ever satisfy the request.
    Never(NeverFits),
    /// Enough nodes exist but some it needs are drained, down or offline.
    Unavailable(Vec<String>),
    /// Suitable nodes exist but their resources are in use.
    Busy,
}

/// A reserved-GPU mask that closes the node to the job altogether (CPU-only jobs too):
/// a whole node is set aside, or has no MASTER_PORT left.
pub const CLOSED: u64 = u64::MAX;

/// The static part of a job that decides which nodes could ever host it.
#[derive(Debug, Clone)]
pub struct ShapeKey {
    partition: String,
    nodes: u32,
    gpus_per_node: u32,
    gpu_type: Option<String>,
    cpus_per_node: u32,
    gpu_share_cpus: bool,
    mem_mb: Option<u64>,
    mem_per_gpu_mb: Option<u64>,
    exclusive: bool,
    constraint: Option<Constraint>,
    nodelist: Vec<String>,
    exclude: Vec<String>,
    avoid: Vec<String>,
    reservation: Option<String>,
}

impl ShapeKey {
    pub fn of(job: &PendingJob) -> ShapeKey {
        ShapeKey {
            partition: job.partition.clone(),
            nodes: job.nodes,
            gpus_per_node: job.gpus_per_node,
            gpu_type: job.gpu_type.clone(),
            cpus_per_node: job.cpus_per_node,
            gpu_share_cpus: job.gpu_share_cpus,
            mem_mb: job.mem_mb,
            mem_per_gpu_mb: job.mem_per_gpu_mb,
            exclusive: job.exclusive,
            constraint: job.constraint.clone(),
            nodelist: job.nodelist.clone(),
            exclude: job.exclude.clone(),
            avoid: job.avoid.clone(),
            reservation: job.reservation.clone(),
        }
    }

    fn fields(&self) -> ShapeFields<'_> {
        (
            (
                &self.partition,
                self.nodes,
                self.gpus_per_node,
                self.gpu_type.as_deref(),
                self.cpus_per_node,
                self.gpu_share_cpus,
                self.mem_mb,
            ),
            (
                self.mem_per_gpu_mb,
                self.exclusive,
                self.constraint.as_ref(),
                &self.nodelist,
                &self.exclude,
                &self.avoid,
                self.reservation.as_deref(),
            ),
        )
    }
}

/// A [`ShapeKey`] field by field, borrowed: the one definition of its hash and equality.
type ShapeFields<'r> = (
    (&'r str, u32, u32, Option<&'r str>, u32, bool, Option<u64>),
    (
        Option<u64>,
        bool,
        Option<&'r Constraint>,
        &'r [String],
        &'r [String],
        &'r [String],
        Option<&'r str>,
    ),
);

impl PartialEq for ShapeKey {
    fn eq(&self, other: &ShapeKey) -> bool {
        self.fields() == other.fields()
    }
}

impl Eq for ShapeKey {}

impl Hash for ShapeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fields().hash(state);
    }
}

/// A job seen as its [`ShapeKey`] without copying it: looks shapes up in a [`ShapeMap`].
pub struct ShapeOf<'j>(pub &'j PendingJob);

impl ShapeOf<'_> {
    fn fields(&self) -> ShapeFields<'_> {
        let j = self.0;
        (
            (
                &j.partition,
                j.nodes,
                j.gpus_per_node,
                j.gpu_type.as_deref(),
                j.cpus_per_node,
                j.gpu_share_cpus,
                j.mem_mb,
            ),
            (
                j.mem_per_gpu_mb,
                j.exclusive,
                j.constraint.as_ref(),
                &j.nodelist,
                &j.exclude,
                &j.avoid,
                j.reservation.as_deref(),
            ),
        )
    }
}

impl Hash for ShapeOf<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fields().hash(state);
    }
}

impl Equivalent<ShapeKey> for ShapeOf<'_> {
    fn equivalent(&self, key: &ShapeKey) -> bool {
        self.fields() == key.fields()
    }
}

/// A map keyed by job shape, looked up by [`ShapeOf`] (no copy of the job's strings).
pub type ShapeMap<V> = hashbrown::HashMap<ShapeKey, V, FxBuildHasher>;

/// Why one node can never host a job (static facts only).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ineligible {
    NotInPartition(String),
    Excluded,
    NotInNodelist,
    GpuModel(String),
    LacksFeature(String),
    /// `name*N`: fewer than N nodes of the job (or of the cluster) have it.
    FeatureCount {
        feature: String,
        count: u32,
    },
    Gpus {
        usable: u32,
        wanted: u32,
    },
    Cpus {
        has: usize,
        wanted: u32,
    },
    Memory {
        has_mb: u64,
        wanted_mb: u64,
    },
}

impl std::fmt::Display for Ineligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ineligible::NotInPartition(p) => write!(f, "not in partition {p}"),
            Ineligible::Excluded => write!(f, "excluded"),
            Ineligible::NotInNodelist => write!(f, "not in --nodelist"),
            Ineligible::GpuModel(t) => write!(f, "GPU model is not {t}"),
            Ineligible::LacksFeature(x) => write!(f, "lacks feature {x}"),
            Ineligible::FeatureCount { feature, count } => {
                write!(f, "are too few for {feature}*{count}")
            }
            Ineligible::Gpus { usable, wanted } => {
                write!(f, "has {usable} usable GPUs, {wanted} wanted")
            }
            Ineligible::Cpus { has, wanted } => write!(f, "has {has} CPUs, {wanted} wanted"),
            Ineligible::Memory { has_mb, wanted_mb } => {
                write!(f, "has {has_mb} MB memory, {wanted_mb} MB wanted")
            }
        }
    }
}

/// Why a job can never run on the registered nodes: the most common reasons nodes
/// were ruled out, with their counts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeverFits {
    #[error("no nodes are registered")]
    NoNodes,
    #[error("{wanted} node(s) wanted, {could} could ever fit ({})", top_reasons(.reasons))]
    TooFew {
        wanted: u32,
        could: usize,
        /// At most three, the most frequent first.
        reasons: Vec<(Ineligible, u32)>,
    },
}

fn top_reasons(reasons: &[(Ineligible, u32)]) -> String {
    reasons
        .iter()
        .map(|(w, n)| format!("{n} node(s) {w}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Nodes that could ever host a shape, and why the others cannot.
#[derive(Debug, Clone)]
struct Eligibility {
    /// Eligible nodes that are online and not drained.
    available: Arc<Vec<usize>>,
    /// Names of eligible nodes that are not.
    unavailable: Arc<Vec<String>>,
    /// `nodes` as a lookup table by node index.
    member: Arc<Vec<bool>>,
    never: Option<NeverFits>,
    /// Worked out on first use.
    ideal: Option<Ideal>,
}

/// The best placement a shape could get with every eligible node empty: what
/// `topology_wait_s` lets a job wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ideal {
    /// The worst link tier of the best GPU set on any eligible node.
    pub worst_tier: u8,
    /// The fewest leaf switches that hold the job's node count.
    pub switches: usize,
}

impl Ideal {
    fn of(nodes: &[NodeView], available: &[usize], job: &PendingJob) -> Ideal {
        let empty = NodeUsage::default();
        let mut wirings: FxHashMap<(usize, u64), &NodeView> = FxHashMap::default();
        for &ni in available {
            let node = &nodes[ni];
            let healthy = free_mask(node, &empty);
            wirings.insert((Arc::as_ptr(&node.topo) as usize, healthy), node);
        }
        let worst_tier = wirings
            .iter()
            .filter_map(|((_, healthy), node)| {
                node.topo
                    .best_set(*healthy, job.gpus_per_node)
                    .map(|c| c.quality.worst_tier)
            })
            .min()
            .unwrap_or(0);
        let mut per_switch: FxHashMap<Option<&str>, usize> = FxHashMap::default();
        for &ni in available {
            *per_switch.entry(nodes[ni].switch.as_deref()).or_default() += 1;
        }
        let mut sizes: Vec<usize> = per_switch.into_values().collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let (mut held, mut switches) = (0, 0);
        for size in sizes {
            if held >= job.nodes as usize {
                break;
            }
            held += size;
            switches += 1;
        }
        Ideal {
            worst_tier,
            switches: switches.max(1),
        }
    }

    /// Does a placement fall short of this (a slower worst link, or more switches)?
    pub fn beats(&self, nodes: &[NodeView], picks: &[NodePick]) -> bool {
        let worst_tier = picks
            .iter()
            .map(|p| p.quality.worst_tier)
            .max()
            .unwrap_or(0);
        worst_tier > self.worst_tier
            || leaf_switches(nodes, picks.iter().map(|p| p.node)) > self.switches
    }
}

/// How many leaf switches the given nodes hang off (nodes under none count as one).
fn leaf_switches(nodes: &[NodeView], chosen: impl Iterator<Item = usize>) -> usize {
    let mut switches: Vec<Option<&str>> = chosen.map(|ni| nodes[ni].switch.as_deref()).collect();
    switches.sort_unstable();
    switches.dedup();
    switches.len()
}

/// Nodes grouped by (wiring, free GPUs): every node of a class offers the same GPU sets.
#[derive(Default)]
struct ClassIndex {
    classes: FxHashMap<(usize, u64), BTreeSet<usize>>,
    key_of: Vec<(usize, u64)>,
}

/// Places jobs on one snapshot's nodes; caches per-shape eligibility for the pass.
pub struct Placer<'a> {
    snap: &'a Snapshot,
    policy: Policy,
    partitions: Vec<Vec<String>>,
    eligibility: ShapeMap<Eligibility>,
    classes: Option<ClassIndex>,
    /// Each node's best NIC as (not RDMA, -speed): a tie-breaker for gangs.
    nic_rank: Vec<(bool, u64)>,
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
                    config
                        .partitions
                        .iter()
                        .filter(|p| config.partition_has_node(&p.name, &n.name))
                        .map(|p| p.name.clone())
                        .collect()
                }
            })
            .collect();
        let nic_rank = snap
            .nodes
            .iter()
            .map(|n| {
                n.nics
                    .iter()
                    .map(|x| {
                        (
                            !(x.kind == NicKind::Ib || x.kind == NicKind::Roce),
                            u64::MAX - x.speed_mbps,
                        )
                    })
                    .min()
                    .unwrap_or((true, u64::MAX))
            })
            .collect();
        Placer {
            snap,
            policy: config.policy,
            partitions,
            eligibility: ShapeMap::default(),
            classes: None,
            nic_rank,
        }
    }

    pub fn nodes(&self) -> &[NodeView] {
        &self.snap.nodes
    }

    /// `node:gpuN` for each GPU used outside jobs on a node that could host `job`.
    pub fn outside_in_the_way(&self, job: &PendingJob) -> Vec<String> {
        if job.gpus_per_node == 0 {
            return Vec::new();
        }
        self.snap
            .nodes
            .iter()
            .enumerate()
            .filter(|(ni, n)| !n.outside_gpus.is_empty() && self.ineligible(job, *ni).is_none())
            .flat_map(|(_, n)| n.outside_gpus.iter().map(|g| format!("{}:gpu{g}", n.name)))
            .collect()
    }

    /// The CPUs `node` keeps out of GPU jobs' default share.
    fn reserve(&self, node: &NodeView) -> u32 {
        self.snap
            .config
            .cpu_reserve(node.capacity.cpus.len() as u32, node.capacity.gpu_count)
    }

    /// Why `node` can never host `job` (static facts only), or `None` if it could.
    fn ineligible(&self, job: &PendingJob, ni: usize) -> Option<Ineligible> {
        let node = &self.snap.nodes[ni];
        if !self.partitions[ni].iter().any(|p| p == &job.partition) {
            return Some(Ineligible::NotInPartition(job.partition.clone()));
        }
        if job.exclude.iter().any(|x| x == &node.name) {
            return Some(Ineligible::Excluded);
        }
        if !job.nodelist.is_empty()
            && job.nodelist.len() as u32 >= job.nodes
            && !job.nodelist.iter().any(|x| x == &node.name)
        {
            return Some(Ineligible::NotInNodelist);
        }
        if let Some(t) = &job.gpu_type
            && !node
                .gpu_model
                .as_deref()
                .is_some_and(|m| model_matches(m, t))
        {
            return Some(Ineligible::GpuModel(t.clone()));
        }
        if let Some(c) = &job.constraint {
            let has = |f: &str| {
                node.features.iter().any(|nf| nf == f)
                    || node
                        .gpu_model
                        .as_deref()
                        .is_some_and(|m| model_matches(m, f))
            };
            if !c.admits(&has) {
                // Name the feature it lacks when one alone decides, else the expression.
                let missing: Vec<&str> = c.features().into_iter().filter(|f| !has(f)).collect();
                let named = match (c, missing.as_slice()) {
                    (Constraint::Feature { .. } | Constraint::And(_), [one]) => one.to_string(),
                    _ => c.to_string(),
                };
                return Some(Ineligible::LacksFeature(named));
            }
        }
        if job.gpus_per_node > node.healthy_gpus() {
            return Some(Ineligible::Gpus {
                usable: node.healthy_gpus(),
                wanted: job.gpus_per_node,
            });
        }
        if job.cpus_per_node as usize > node.capacity.cpus.len() {
            return Some(Ineligible::Cpus {
                has: node.capacity.cpus.len(),
                wanted: job.cpus_per_node,
            });
        }
        let mem = mem_for(job, node, job.gpus_per_node, self.reserve(node));
        if mem > node.capacity.mem_mb {
            return Some(Ineligible::Memory {
                has_mb: node.capacity.mem_mb,
                wanted_mb: mem,
            });
        }
        None
    }

    fn eligibility(&mut self, job: &PendingJob) -> Eligibility {
        if let Some(e) = self.eligibility.get(&ShapeOf(job)) {
            return e.clone();
        }
        // `[a|b]` on several nodes: eligible as the first alternative that could ever
        // fit (placement tries them in order), never only if none could.
        if job.nodes > 1
            && let Some(alternatives) = job.constraint.as_ref().map(|c| c.alternatives())
            && alternatives.len() > 1
        {
            let mut first = None;
            for alt in alternatives {
                let mut one = job.clone();
                one.constraint = Some(alt);
                let e = self.eligibility(&one);
                if e.never.is_none() {
                    first = Some(e);
                    break;
                }
                first.get_or_insert(e);
            }
            let e = first.expect("at least two alternatives");
            self.eligibility.insert(ShapeKey::of(job), e.clone());
            return e;
        }
        let mut nodes = Vec::new();
        let mut why: FxHashMap<Ineligible, u32> = FxHashMap::default();
        for ni in 0..self.snap.nodes.len() {
            match self.ineligible(job, ni) {
                None => nodes.push(ni),
                Some(w) => *why.entry(w).or_default() += 1,
            }
        }
        if !job.avoid.is_empty() {
            let preferred: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|ni| !job.avoid.contains(&self.snap.nodes[*ni].name))
                .collect();
            if preferred.len() as u32 >= job.nodes {
                nodes = preferred;
            }
        }
        // `name*N`: N of the job's nodes must have it, so it needs N nodes at least and N
        // eligible ones with the feature.
        for (feature, n) in job.constraint.iter().flat_map(|c| c.counts()) {
            let with = nodes
                .iter()
                .filter(|ni| self.snap.nodes[**ni].features.contains(&feature))
                .count() as u32;
            if n > job.nodes || with < n {
                *why.entry(Ineligible::FeatureCount { feature, count: n })
                    .or_default() += self.snap.nodes.len() as u32;
                nodes.clear();
            }
        }
        let never = if (nodes.len() as u32) < job.nodes {
            let mut reasons: Vec<(Ineligible, u32)> = why.into_iter().collect();
            reasons.sort_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| a.0.to_string().cmp(&b.0.to_string()))
            });
            reasons.truncate(3);
            Some(if self.snap.nodes.is_empty() {
                NeverFits::NoNodes
            } else {
                NeverFits::TooFew {
                    wanted: job.nodes,
                    could: nodes.len(),
                    reasons,
                }
            })
        } else {
            None
        };
        let mut member = vec![false; self.snap.nodes.len()];
        for &ni in &nodes {
            member[ni] = true;
        }
        let available: Vec<usize> = nodes
            .iter()
            .copied()
            .filter(|ni| self.snap.nodes[*ni].available)
            .collect();
        let unavailable: Vec<String> = nodes
            .iter()
            .filter(|ni| !self.snap.nodes[**ni].available)
            .map(|ni| self.snap.nodes[*ni].name.clone())
            .collect();
        let e = Eligibility {
            available: Arc::new(available),
            unavailable: Arc::new(unavailable),
            member: Arc::new(member),
            never,
            ideal: None,
        };
        self.eligibility.insert(ShapeKey::of(job), e.clone());
        e
    }

    /// The best placement the job's shape could get on empty nodes.
    pub fn ideal(&mut self, job: &PendingJob) -> Ideal {
        let elig = self.eligibility(job);
        if let Some(ideal) = elig.ideal {
            return ideal;
        }
        let ideal = Ideal::of(&self.snap.nodes, &elig.available, job);
        if let Some(e) = self.eligibility.get_mut(&ShapeOf(job)) {
            e.ideal = Some(ideal);
        }
        ideal
    }

    /// Would the job ever fit on the registered nodes? `Err` says why not.
    pub fn check_ever_fits(&mut self, job: &PendingJob) -> Result<(), NeverFits> {
        match self.eligibility(job).never {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn class_key(&self, ni: usize, usage: &NodeUsage) -> (usize, u64) {
        let node = &self.snap.nodes[ni];
        (
            Arc::as_ptr(&node.topo) as usize,
            if usage.exclusive {
                0
            } else {
                free_mask(node, usage)
            },
        )
    }

    /// Indexes nodes by (wiring, free GPUs) for fast single-node placement; keep it in step
    /// with [`Placer::note_usage`] whenever the caller changes a node's usage.
    pub fn index_classes(&mut self, usage: &[NodeUsage]) {
        let mut idx = ClassIndex::default();
        for (ni, u) in usage.iter().enumerate().take(self.snap.nodes.len()) {
            let key = self.class_key(ni, u);
            idx.classes.entry(key).or_default().insert(ni);
            idx.key_of.push(key);
        }
        self.classes = Some(idx);
    }

    pub fn note_usage(&mut self, ni: usize, usage: &NodeUsage) {
        let key = self.class_key(ni, usage);
        if let Some(idx) = self.classes.as_mut() {
            let old = idx.key_of[ni];
            if old != key {
                if let Some(set) = idx.classes.get_mut(&old) {
                    set.remove(&ni);
                    if set.is_empty() {
                        idx.classes.remove(&old);
                    }
                }
                idx.classes.entry(key).or_default().insert(ni);
                idx.key_of[ni] = key;
            }
        }
    }

    /// Room for the job's CPUs and memory on a node (counts only).
    fn room(&self, job: &PendingJob, ni: usize, usage: &NodeUsage) -> bool {
        let node = &self.snap.nodes[ni];
        if usage.exclusive || (job.exclusive && usage.jobs > 0) {
            return false;
        }
        let cpus = if job.exclusive {
            node.capacity.cpus.len()
        } else {
            cpus_on(job, node, self.reserve(node)) as usize
        };
        node.free_cpus_under(usage) >= cpus
            && mem_for(job, node, job.gpus_per_node, self.reserve(node))
                <= node.capacity.mem_mb.saturating_sub(usage.mem_mb)
    }

    /// The GPU set the job would get on this node now, if it fits there.
    pub fn evaluate(
        &self,
        job: &PendingJob,
        ni: usize,
        usage: &NodeUsage,
        reserved: u64,
    ) -> Option<Eval> {
        if reserved == CLOSED {
            return None;
        }
        let node = &self.snap.nodes[ni];
        let free = free_mask(node, usage) & !reserved;
        // An exclusive job gets the whole node, every usable GPU included, as on Slurm
        // (the node is empty, so every GPU that is not bad must be free here).
        let k = if job.exclusive {
            (node.capacity.gpu_count.min(64)
                - node.capacity.bad_gpus.iter().filter(|g| *g < 64).count() as u32)
                .max(job.gpus_per_node)
        } else {
            job.gpus_per_node
        };
        if free.count_ones() < k || !self.room(job, ni, usage) {
            return None;
        }
        let choice = match self.policy {
            Policy::Gsched => node.topo.best_set(free, k)?,
            Policy::FifoBackfill | Policy::Fifo => Arc::new(first_k(free, k)),
        };
        Some(Eval {
            node: ni,
            choice,
            free_after: free.count_ones() - k,
        })
    }

    /// Chooses the CPU ids, memory and NIC for an evaluated node.
    pub fn materialize(&self, job: &PendingJob, e: &Eval, usage: &NodeUsage) -> Option<NodePick> {
        let node = &self.snap.nodes[e.node];
        let gpus = mask_to_ids(e.choice.mask);
        let reserve = self.reserve(node);
        let cpus = choose_cpus(
            node,
            usage,
            &gpus,
            cpus_on(job, node, reserve),
            job.exclusive,
        )?;
        let mem = mem_for(job, node, job.gpus_per_node, reserve);
        let nic = choose_nic(node, &gpus);
        let alloc = NodeAlloc {
            node: node.name.clone(),
            gpus,
            cpus,
            mem_mb: mem,
            nic,
            exclusive: job.exclusive,
        };
        debug_assert!(gsched_types::resources::fits(&node.capacity, usage, &alloc).is_ok());
        Some(NodePick {
            node: e.node,
            alloc,
            quality: e.choice.quality,
        })
    }

    /// The complete pick on one node (evaluate, then materialize).
    pub fn pick_on_node(
        &self,
        job: &PendingJob,
        ni: usize,
        usage: &NodeUsage,
        reserved: u64,
    ) -> Option<NodePick> {
        let e = self.evaluate(job, ni, usage, reserved)?;
        self.materialize(job, &e, usage)
    }

    /// Single-node placement through the class index: the best class, then its first
    /// eligible node (in name order) with room for the CPUs and memory.
    fn eval_by_class(
        &self,
        job: &PendingJob,
        elig: &Eligibility,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
    ) -> Option<Eval> {
        let idx = self.classes.as_ref()?;
        let k = job.gpus_per_node;
        let mut best: Option<Eval> = None;
        let mut consider = |e: Eval| {
            if best.as_ref().is_none_or(|b| e.key() < b.key()) {
                best = Some(e);
            }
        };
        for ((_, mask), members) in &idx.classes {
            if mask.count_ones() < k {
                continue;
            }
            for &ni in members {
                if !elig.member[ni]
                    || !self.snap.nodes[ni].available
                    || !self.room(job, ni, &usage[ni])
                {
                    continue;
                }
                let r = reserved(ni);
                let Some(e) = self.evaluate(job, ni, &usage[ni], r) else {
                    continue;
                };
                consider(e);
                if r == 0 {
                    // The rest of the class offers the same sets under later names.
                    break;
                }
            }
        }
        best
    }

    /// Places `job` on the free resources described by `usage` (one entry per node),
    /// avoiding the GPUs in `reserved` (per node). Returns picks in node-rank order.
    /// `usage` must be the usage the class index follows (see [`Placer::index_classes`]);
    /// for any other (hypothetical) usage use [`Placer::place_hypothetical`].
    pub fn place(
        &mut self,
        job: &PendingJob,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
    ) -> Result<Vec<NodePick>, Blocked> {
        self.place_inner(job, usage, reserved, true)
    }

    /// [`Placer::place`] on a usage the class index does not describe (future releases,
    /// preemption what-ifs): every eligible node is evaluated.
    pub fn place_hypothetical(
        &mut self,
        job: &PendingJob,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
    ) -> Result<Vec<NodePick>, Blocked> {
        self.place_inner(job, usage, reserved, false)
    }

    fn place_inner(
        &mut self,
        job: &PendingJob,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
        use_classes: bool,
    ) -> Result<Vec<NodePick>, Blocked> {
        // `[a|b]` on a job of several nodes: every node must share one alternative, so
        // each is tried in the written order, as Slurm tries them.
        if job.nodes > 1
            && let Some(alternatives) = job.constraint.as_ref().map(|c| c.alternatives())
            && alternatives.len() > 1
        {
            let mut outcome = Err(Blocked::Busy);
            for (i, alt) in alternatives.into_iter().enumerate() {
                let mut one = job.clone();
                one.constraint = Some(alt);
                match self.place_inner(&one, usage, reserved, use_classes) {
                    Ok(picks) => return Ok(picks),
                    // Never only if every alternative can never be.
                    Err(Blocked::Never(why)) if i == 0 => outcome = Err(Blocked::Never(why)),
                    Err(Blocked::Never(_)) => {}
                    Err(other) => {
                        if matches!(outcome, Err(Blocked::Never(_)) | Err(Blocked::Busy)) {
                            outcome = Err(other);
                        }
                    }
                }
            }
            return outcome;
        }
        let elig = self.eligibility(job);
        if let Some(why) = elig.never {
            return Err(Blocked::Never(why));
        }
        if !elig.unavailable.is_empty() {
            let missing_required: Vec<String> = job
                .nodelist
                .iter()
                .filter(|r| elig.unavailable.contains(r))
                .cloned()
                .collect();
            if !missing_required.is_empty() {
                return Err(Blocked::Unavailable(missing_required));
            }
        }
        if (elig.available.len() as u32) < job.nodes {
            return Err(Blocked::Unavailable(elig.unavailable.to_vec()));
        }
        if use_classes
            && self.policy == Policy::Gsched
            && job.nodes == 1
            && job.nodelist.is_empty()
            && self.classes.is_some()
        {
            let e = self
                .eval_by_class(job, &elig, usage, reserved)
                .ok_or(Blocked::Busy)?;
            return self
                .materialize(job, &e, &usage[e.node])
                .map(|p| vec![p])
                .ok_or(Blocked::Busy);
        }
        self.choose(job, usage, reserved, &elig.available)
    }

    /// Like [`Placer::place`], restricted to `candidates` (nodes known to fit on their own).
    pub fn place_on(
        &mut self,
        job: &PendingJob,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
        candidates: &BTreeSet<usize>,
    ) -> Result<Vec<NodePick>, Blocked> {
        let elig = self.eligibility(job);
        if let Some(why) = elig.never {
            return Err(Blocked::Never(why));
        }
        let list: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|ni| elig.member[*ni] && self.snap.nodes[*ni].available)
            .collect();
        self.choose(job, usage, reserved, &list)
    }

    fn choose(
        &self,
        job: &PendingJob,
        usage: &[NodeUsage],
        reserved: &dyn Fn(usize) -> u64,
        candidates: &[usize],
    ) -> Result<Vec<NodePick>, Blocked> {
        let mut evals = Vec::new();
        for &ni in candidates {
            if let Some(e) = self.evaluate(job, ni, &usage[ni], reserved(ni)) {
                evals.push(e);
                if self.policy != Policy::Gsched
                    && evals.len() as u32 == job.nodes
                    && job.nodelist.is_empty()
                {
                    break;
                }
            }
        }
        if (evals.len() as u32) < job.nodes {
            return Err(Blocked::Busy);
        }
        let counts = job
            .constraint
            .as_ref()
            .map(|c| c.counts())
            .unwrap_or_default();
        let all = (!counts.is_empty()).then(|| evals.clone());
        let chosen = match self.policy {
            Policy::Gsched => self.select_gang(evals, job),
            Policy::FifoBackfill | Policy::Fifo => {
                Some(evals.into_iter().take(job.nodes as usize).collect())
            }
        }
        .ok_or(Blocked::Busy)?;
        let chosen = match all {
            Some(all) if !self.meets_counts(&chosen, &counts) => self
                .counted_first(all, job.nodes as usize, &counts)
                .ok_or(Blocked::Busy)?,
            _ => chosen,
        };
        let mut picks: Vec<NodePick> = chosen
            .iter()
            .map(|e| self.materialize(job, e, &usage[e.node]))
            .collect::<Option<Vec<_>>>()
            .ok_or(Blocked::Busy)?;
        picks.sort_by(|a, b| {
            self.snap.nodes[a.node]
                .name
                .cmp(&self.snap.nodes[b.node].name)
        });
        Ok(picks)
    }

    /// Whether `chosen` has at least so many nodes with each counted feature (`name*N`).
    fn meets_counts(&self, chosen: &[Eval], counts: &[(String, u32)]) -> bool {
        counts.iter().all(|(f, n)| {
            chosen
                .iter()
                .filter(|e| self.snap.nodes[e.node].features.iter().any(|x| x == f))
                .count() as u32
                >= *n
        })
    }

    /// A gang of `n` that meets the counts: nodes with each counted feature first (as
    /// many as it asks for), then the others in their order.
    fn counted_first(
        &self,
        evals: Vec<Eval>,
        n: usize,
        counts: &[(String, u32)],
    ) -> Option<Vec<Eval>> {
        let has = |e: &Eval, f: &str| self.snap.nodes[e.node].features.iter().any(|x| x == f);
        let mut taken = vec![false; evals.len()];
        let mut out = Vec::with_capacity(n);
        for (f, want) in counts {
            for (i, e) in evals.iter().enumerate() {
                let have = out.iter().filter(|e: &&Eval| has(e, f)).count() as u32;
                if out.len() == n || have >= *want {
                    break;
                }
                if !taken[i] && has(e, f) {
                    taken[i] = true;
                    out.push(e.clone());
                }
            }
        }
        for (i, e) in evals.iter().enumerate() {
            if out.len() == n {
                break;
            }
            if !taken[i] {
                taken[i] = true;
                out.push(e.clone());
            }
        }
        (out.len() == n && self.meets_counts(&out, counts)).then_some(out)
    }

    /// Chooses the gang: one GPU model, fewest switches, best-connected and fullest nodes.
    fn select_gang(&self, evals: Vec<Eval>, job: &PendingJob) -> Option<Vec<Eval>> {
        let nodes = &self.snap.nodes;
        let n = job.nodes as usize;
        if n == 1 && job.nodelist.is_empty() {
            return evals
                .into_iter()
                .min_by(|a, b| a.key().cmp(&b.key()))
                .map(|e| vec![e]);
        }
        let mut by_model: FxHashMap<String, Vec<Eval>> = FxHashMap::default();
        for e in evals {
            let model = if job.gpu_type.is_some() {
                String::new()
            } else {
                nodes[e.node].gpu_model.clone().unwrap_or_default()
            };
            by_model.entry(model).or_default().push(e);
        }
        let mut models: Vec<_> = by_model.into_iter().collect();
        models.sort_by(|a, b| a.0.cmp(&b.0));
        let mut best: Option<(GangRank, Vec<Eval>)> = None;
        for (_, mut group) in models {
            if group.len() < n {
                continue;
            }
            group.sort_by(|a, b| {
                (
                    a.choice.quality,
                    self.nic_rank[a.node],
                    a.free_after,
                    a.node,
                )
                    .cmp(&(
                        b.choice.quality,
                        self.nic_rank[b.node],
                        b.free_after,
                        b.node,
                    ))
            });
            let Some(chosen) = choose_by_switch(nodes, group, n, &job.nodelist) else {
                continue;
            };
            let worst = chosen
                .iter()
                .map(|e| e.choice.quality)
                .max()
                .unwrap_or_default();
            let nic = chosen
                .iter()
                .map(|e| self.nic_rank[e.node])
                .max()
                .unwrap_or((true, u64::MAX));
            let packing: u32 = chosen.iter().map(|e| e.free_after).sum();
            let mut ids: Vec<usize> = chosen.iter().map(|e| e.node).collect();
            ids.sort_unstable();
            let switches = leaf_switches(nodes, chosen.iter().map(|e| e.node));
            let key = (switches, worst, nic, packing, ids);
            if best.as_ref().is_none_or(|(b, _)| key < *b) {
                best = Some((key, chosen));
            }
        }
        best.map(|(_, c)| c)
    }
}

/// How a multi-node placement ranks (lower is better): switches spanned, the worst GPU
/// set, the worst NIC, GPUs left free on the chosen nodes, then the node ids.
type GangRank = (usize, SetQuality, (bool, u64), u32, Vec<usize>);

/// Free, healthy GPUs of a node under `usage`.
pub fn free_mask(node: &NodeView, usage: &NodeUsage) -> u64 {
    let mut mask = 0u64;
    for g in 0..node.capacity.gpu_count.min(64) {
        if !usage.gpus.contains(g)
            && !node.capacity.bad_gpus.contains(g)
            && !node.outside_gpus.contains(&g)
        {
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
    Choice {
        mask,
        quality: SetQuality::default(),
        leftover: Vec::new(),
    }
}

/// Memory per node for a job: explicit `--mem` (0 = all), `--mem-per-gpu` x GPUs, all of
/// it for an `--exclusive` job that named none (an exclusive job gets only the memory it
/// asked for, as Slurm's), or by default a share of the node proportional to the GPUs (or
/// CPUs) taken; a GPU job's share is of the memory left after the `reserve` CPUs' part
/// (kept for CPU-only jobs, [`crate::config::SchedConfig::cpu_reserve`]).
pub fn mem_for(job: &PendingJob, node: &NodeView, gpus: u32, reserve: u32) -> u64 {
    let total = node.capacity.mem_mb;
    match job.mem_mb {
        Some(0) => return total,
        Some(m) => return m,
        None => {}
    }
    if let Some(per) = job.mem_per_gpu_mb {
        return per * u64::from(gpus);
    }
    if job.exclusive {
        return total;
    }
    if node.capacity.gpu_count > 0 && gpus > 0 {
        let cpus = node.capacity.cpus.len().max(1) as u64;
        let shared = total - total * u64::from(reserve) / cpus;
        shared * u64::from(gpus) / u64::from(node.capacity.gpu_count)
    } else {
        let cpus = node.capacity.cpus.len().max(1) as u64;
        (total * u64::from(job.cpus_per_node) / cpus).max(1.min(total))
    }
}

/// The CPUs `job` takes on `node`: what its tasks need, or its GPUs' share of the node's
/// CPUs less the `reserve` kept for CPU-only jobs ([`crate::config::SchedConfig::cpu_reserve`]) when it
/// asked for no CPU count and that is more.
pub fn cpus_on(job: &PendingJob, node: &NodeView, reserve: u32) -> u32 {
    let gpus = node.capacity.gpu_count;
    if !job.gpu_share_cpus || job.gpus_per_node == 0 || gpus == 0 {
        return job.cpus_per_node;
    }
    let shared = (node.capacity.cpus.len() as u32).saturating_sub(reserve);
    let per_gpu = (shared / gpus).max(1);
    job.cpus_per_node.max(per_gpu * job.gpus_per_node)
}

/// CPUs on the GPUs' NUMA nodes first, each of those nodes giving its GPUs' share (a job
/// whose GPUs sit on two NUMA nodes gets CPUs on both, as each GPU's feeder threads want
/// them near it), then the others (most free first); CPU-only jobs start on the NUMA node
/// with the most free CPUs. Lowest free ids within a NUMA node.
fn choose_cpus(
    node: &NodeView,
    usage: &NodeUsage,
    gpus: &[u32],
    count: u32,
    exclusive: bool,
) -> Option<Vec<u32>> {
    if exclusive {
        return if node.capacity.cpus.iter().any(|c| usage.cpus.contains(*c)) {
            None
        } else {
            Some(node.capacity.cpus.clone())
        };
    }
    let count = count as usize;
    let mut chosen = Vec::with_capacity(count);
    if count == 0 {
        return Some(chosen);
    }
    let take = |cpus: &[u32], limit: usize, chosen: &mut Vec<u32>| {
        let mut taken = 0;
        for &c in cpus {
            if chosen.len() == count || taken == limit {
                return;
            }
            if !usage.cpus.contains(c) && !chosen.contains(&c) {
                chosen.push(c);
                taken += 1;
            }
        }
    };
    if node.numa_cpus.is_empty() {
        take(&node.capacity.cpus, count, &mut chosen);
    } else {
        let free_count = |cpus: &[u32]| cpus.iter().filter(|c| !usage.cpus.contains(**c)).count();
        let mut order: Vec<(usize, usize, u32)> = node
            .numa_cpus
            .iter()
            .enumerate()
            .map(|(i, (id, cpus))| (i, free_count(cpus), *id))
            .collect();
        let gpu_numa: Vec<u32> = gpus.iter().filter_map(|g| node.topo.numa_of(*g)).collect();
        let mut preferred = gpu_numa.clone();
        preferred.dedup();
        // Preferred NUMA nodes in GPU order, then the rest by free CPUs (most first).
        order.sort_by_key(
            |(_, free, id)| match preferred.iter().position(|p| p == id) {
                Some(pos) => (0, pos, 0, *id),
                None => (1, 0, usize::MAX - free, *id),
            },
        );
        // First each GPU NUMA node's share (count split by GPUs, the remainder to the
        // first), then whatever is still missing in the order above.
        if preferred.len() > 1 {
            let per_gpu = count / gpu_numa.len();
            let mut extra = count % gpu_numa.len();
            for p in &preferred {
                let gpus_here = gpu_numa.iter().filter(|n| *n == p).count();
                let mut share = per_gpu * gpus_here;
                let bonus = extra.min(gpus_here);
                share += bonus;
                extra -= bonus;
                if let Some((_, cpus)) = node.numa_cpus.iter().find(|(id, _)| id == p) {
                    take(cpus, share, &mut chosen);
                }
            }
        }
        for (i, _, _) in order {
            take(&node.numa_cpus[i].1, count, &mut chosen);
            if chosen.len() == count {
                break;
            }
        }
    }
    if chosen.len() < count {
        return None;
    }
    chosen.sort_unstable();
    Some(chosen)
}

/// The usable NIC nearest to the GPUs: best worst-link to them, then RDMA, then speed.
fn choose_nic(node: &NodeView, gpus: &[u32]) -> Option<String> {
    node.nics
        .iter()
        .min_by_key(|n| {
            let worst = gpus
                .iter()
                .map(|g| {
                    n.gpu_links
                        .get(*g as usize)
                        .map(|l| l.rank())
                        .unwrap_or(u16::MAX)
                })
                .max()
                .unwrap_or(0);
            (
                worst,
                !n.kind.is_rdma(),
                u64::MAX - n.speed_mbps,
                n.name.clone(),
            )
        })
        .map(|n| n.name.clone())
}

/// From evaluations sorted best-first, takes `n` nodes from as few leaf switches as
/// possible, always including the `required` (`-w`) nodes.
fn choose_by_switch(
    nodes: &[NodeView],
    sorted: Vec<Eval>,
    n: usize,
    required: &[String],
) -> Option<Vec<Eval>> {
    let (mut must, rest): (Vec<Eval>, Vec<Eval>) = sorted
        .into_iter()
        .partition(|e| required.contains(&nodes[e.node].name));
    if must.len() > n {
        return None;
    }
    let need = n - must.len();
    let mut by_switch: Vec<(Option<String>, Vec<Eval>)> = Vec::new();
    for e in rest {
        let sw = nodes[e.node].switch.clone();
        match by_switch.iter_mut().find(|(s, _)| *s == sw) {
            Some((_, v)) => v.push(e),
            None => by_switch.push((sw, vec![e])),
        }
    }
    // Switches of required nodes first, then switches that hold the rest alone, then the
    // largest.
    let must_switches: Vec<Option<String>> =
        must.iter().map(|e| nodes[e.node].switch.clone()).collect();
    by_switch.sort_by_key(|(sw, v)| {
        (
            !must_switches.contains(sw),
            v.len() < need,
            usize::MAX - v.len().min(need),
        )
    });
    for (_, group) in by_switch {
        for e in group {
            if must.len() == n {
                break;
            }
            must.push(e);
        }
    }
    if must.len() < n { None } else { Some(must) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn job(id: u64) -> PendingJob {
        let mut j = PendingJob::simple(id, 2, Some(3600), 0);
        j.constraint = Some(Constraint::parse("a100").unwrap());
        j.gpu_type = Some("a100".into());
        j
    }

    #[test]
    fn a_job_finds_its_shape_without_a_copy_and_only_its_shape() {
        let mut map: ShapeMap<u32> = ShapeMap::default();
        map.insert(ShapeKey::of(&job(1)), 7);
        let same = job(2);
        assert_eq!(
            FxBuildHasher.hash_one(ShapeOf(&same)),
            FxBuildHasher.hash_one(ShapeKey::of(&same))
        );
        assert_eq!(map.get(&ShapeOf(&same)), Some(&7));
        let mut other = job(3);
        other.exclude = vec!["n1".into()];
        assert_eq!(map.get(&ShapeOf(&other)), None);
        let mut other = job(4);
        other.gpu_type = None;
        assert_eq!(map.get(&ShapeOf(&other)), None);
        let mut other = job(5);
        other.time_limit_s = Some(60);
        assert_eq!(
            map.get(&ShapeOf(&other)),
            Some(&7),
            "time limit is not shape"
        );
    }
}
