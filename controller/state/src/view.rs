//! Builds the scheduler's [`Snapshot`] from committed state. Node views (wiring, CPU lists,
//! NICs) are cached per registration so a pass only copies what changes: usage and
//! availability.

use crate::machine::ClusterState;
use gsched_scheduler::{DepView, NodeView, PendingJob, RunningJob, Snapshot, UsageRecord};
use gsched_types::job::{DependencyKind, JobRecord, JobState};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per-node views keyed by (name, registration time), with each node's leaf switch as
/// of the switch configuration they were made under.
#[derive(Default)]
pub struct ViewCache {
    nodes: BTreeMap<String, (u64, NodeView)>,
    switches: Vec<gsched_scheduler::config::SwitchConfig>,
}

impl ViewCache {
    /// Forgets the views when the switch configuration changed (a node's leaf switch is
    /// worked out from hostlists, too dear to do for every node in every pass).
    fn follow_switches(&mut self, state: &ClusterState) {
        if self.switches != state.config.switches {
            self.switches = state.config.switches.clone();
            self.nodes.clear();
        }
    }

    fn node(&mut self, state: &ClusterState, name: &str) -> NodeView {
        let record = &state.nodes[name];
        let fresh = self
            .nodes
            .get(name)
            .is_none_or(|(at, _)| *at != record.registered_ms);
        if fresh {
            let mut view = NodeView::from_topology(name, &record.topology, &record.training_addr);
            view.features = record.features.clone();
            view.switch = state.config.leaf_switch_of(name);
            // The CPU list is parsed from the topology's cpulists: once per registration.
            view.capacity = ClusterState::capacity_of(record);
            self.nodes
                .insert(name.to_string(), (record.registered_ms, view));
        }
        let mut view = self.nodes[name].1.clone();
        view.capacity.bad_gpus = gsched_types::resources::IdSet::from_ids(&record.bad_gpus);
        view.usage = state.usage_of(name);
        view.available = record.is_schedulable();
        view
    }
}

/// The pending-job view of a job record.
pub fn pending_view(job: &JobRecord, state: &ClusterState) -> PendingJob {
    let spec = &job.spec;
    PendingJob {
        id: job.id,
        name: spec.name.clone(),
        user: spec.user.clone(),
        account: spec.account_name().to_string(),
        partition: state.config.partition_of(spec),
        qos: spec.qos.clone(),
        nodes: spec.nodes,
        gpus_per_node: spec.gpus_per_node,
        gpu_type: spec.gpu_type.clone(),
        cpus_per_node: spec.cpus_per_node(),
        gpu_share_cpus: spec.gpu_share_cpus,
        mem_mb: spec.mem_mb,
        mem_per_gpu_mb: spec.mem_per_gpu_mb,
        time_limit_s: state.config.time_limit_for(spec),
        time_min_s: spec.time_min_s,
        exclusive: spec.exclusive,
        constraint: spec.constraint.as_deref().map(constraint_of),
        nodelist: spec.nodelist.clone(),
        exclude: spec.exclude.clone(),
        avoid: job.avoid_nodes.clone(),
        dependency: spec.dependency.clone(),
        held: job.held,
        begin_ms: spec.begin_ms,
        nice: spec.nice,
        eligible_ms: job.eligible_ms,
        placement_wait_since_ms: job.placement_wait_since_ms,
        array: job.array_task.map(|t| (t.array_job_id, spec.array_limit)),
        reservation: spec.reservation.clone(),
        switches: spec.switches,
    }
}

/// The nodes alone (no jobs, no usage history): enough to ask whether a job could ever
/// run here, which every submission asks, without copying the queue.
pub fn nodes_only(state: &ClusterState, cache: &mut ViewCache) -> Snapshot {
    cache.follow_switches(state);
    Snapshot {
        config: Arc::new(state.config.clone()),
        nodes: state.nodes.keys().map(|n| cache.node(state, n)).collect(),
        pending: Vec::new(),
        running: Vec::new(),
        dependencies: BTreeMap::new(),
        usage: Vec::new(),
        reservations: Vec::new(),
    }
}

/// A snapshot of everything the scheduler needs.
pub fn snapshot(state: &ClusterState, cache: &mut ViewCache) -> Snapshot {
    cache.follow_switches(state);
    let nodes = state.nodes.keys().map(|n| cache.node(state, n)).collect();
    let mut pending = Vec::new();
    let mut running = Vec::new();
    let mut dependencies = BTreeMap::new();
    // Held and ended jobs are in neither index: a queue of 100,000 held jobs costs a
    // pass nothing.
    for job in state.schedulable_jobs() {
        for dep in &job.spec.dependency {
            if let (Some(id), true) = (dep.job, dep.kind != DependencyKind::Singleton)
                && let Some(d) = state.jobs.get(&id)
            {
                dependencies.insert(
                    id,
                    DepView {
                        state: d.state,
                        exit_code: d.exit_code,
                    },
                );
            }
        }
        pending.push(pending_view(job, state));
    }
    for job in state.allocated_jobs() {
        let Some(alloc) = &job.allocation else {
            continue;
        };
        running.push(RunningJob {
            id: job.id,
            name: job.spec.name.clone(),
            user: job.spec.user.clone(),
            account: job.spec.account_name().to_string(),
            qos: job.spec.qos.clone(),
            start_ms: job.start_ms.unwrap_or(0),
            time_limit_s: state.config.time_limit_for(&job.spec),
            allocation: alloc.nodes.clone(),
            master_port: alloc.master_port,
            array_job: job.array_task.map(|t| t.array_job_id),
            ending: job.state == JobState::Completing,
        });
    }
    let usage = state
        .usage
        .iter()
        .flat_map(|(account, users)| {
            users.iter().map(move |(user, u)| UsageRecord {
                account: account.clone(),
                user: user.clone(),
                gpu_seconds: u.gpu_seconds,
                at_ms: u.at_ms,
            })
        })
        .collect();
    Snapshot {
        config: Arc::new(state.config.clone()),
        nodes,
        pending,
        running,
        dependencies,
        usage,
        reservations: state.reservations.values().cloned().collect(),
    }
}

/// A job's `--constraint` in Slurm's grammar; text that does not read (submitted before
/// the grammar was checked) is what gsched read it as then: features joined by `&` or `,`.
fn constraint_of(text: &str) -> gsched_types::constraint::Constraint {
    use gsched_types::constraint::Constraint;
    Constraint::parse(text).unwrap_or_else(|_| {
        Constraint::And(
            text.split(['&', ','])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|name| Constraint::Feature {
                    name: name.to_string(),
                    count: None,
                })
                .collect(),
        )
    })
}
