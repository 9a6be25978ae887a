//! The read API's rows ([`gsched_types::api`]) built from the committed state: what
//! `Jobs.ListJobs`/`ListNodes` answer and the REST API serves.

use crate::machine::ClusterState;
use gsched_types::api::{GpuJob, JobContext, JobRow, NodeRow, NodeState, QueueRow};
use gsched_types::job::{JobId, JobRecord, JobState};
use std::collections::BTreeMap;

/// How much of a job a row shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobDetail {
    /// Summary fields only (what a `gqueue` table prints).
    Summary,
    /// Allocation, node runs and attempts too (and, for its owner, the request).
    Full,
}

/// Who reads a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The job's owner, an operator or an admin: everything.
    Owner,
    /// Anyone else: no request (environment, arguments, paths) and no failure evidence
    /// (log lines), only what squeue would show.
    Public,
}

/// The configuration-dependent values of a job's row.
pub fn job_context(
    state: &ClusterState,
    job: &JobRecord,
    expected_start_ms: Option<u64>,
) -> JobContext {
    JobContext {
        account: job.spec.account_name().to_string(),
        partition: state.config.partition_of(&job.spec),
        time_limit_s: state.config.time_limit_for(&job.spec),
        expected_start_ms: (job.state == JobState::Pending)
            .then_some(expected_start_ms)
            .flatten(),
    }
}

/// The queue line of `job` (what `gqueue`'s table shows).
pub fn queue_row(
    state: &ClusterState,
    job: &JobRecord,
    expected_start_ms: Option<u64>,
) -> QueueRow {
    QueueRow::of(job, job_context(state, job, expected_start_ms))
}

pub fn job_row(
    state: &ClusterState,
    job: &JobRecord,
    expected_start_ms: Option<u64>,
    detail: JobDetail,
    audience: Audience,
) -> JobRow {
    let ctx = job_context(state, job, expected_start_ms);
    let owner = audience == Audience::Owner;
    let mut row = match detail {
        JobDetail::Summary => JobRow::summary(job, ctx),
        JobDetail::Full => JobRow::detailed(job, ctx, owner),
    };
    if !owner {
        row.redact_evidence();
    }
    row
}

/// Every node's row at `now_ms`; `with_topology` adds the wiring.
pub fn node_rows(state: &ClusterState, with_topology: bool, now_ms: u64) -> Vec<NodeRow> {
    let mut jobs_on: BTreeMap<&str, Vec<JobId>> = BTreeMap::new();
    let mut gpu_jobs_on: BTreeMap<&str, Vec<GpuJob>> = BTreeMap::new();
    for j in state.allocated_jobs() {
        for na in j.allocation.iter().flat_map(|a| &a.nodes) {
            jobs_on.entry(na.node.as_str()).or_default().push(j.id);
            gpu_jobs_on
                .entry(na.node.as_str())
                .or_default()
                .extend(na.gpus.iter().map(|&gpu| GpuJob { gpu, job: j.id }));
        }
    }
    state
        .nodes
        .values()
        .map(|n| {
            let usage = state.usage_of(&n.name);
            let capacity = ClusterState::capacity_of(n);
            let gpus_used: Vec<u32> = usage.gpus.iter().collect();
            let jobs = jobs_on.remove(n.name.as_str()).unwrap_or_default();
            let mut gpu_jobs = gpu_jobs_on.remove(n.name.as_str()).unwrap_or_default();
            gpu_jobs.sort_by_key(|g| g.gpu);
            let total = n.topology.gpus.len() as u32;
            let idle_bad = n.bad_gpus.iter().filter(|g| !gpus_used.contains(g)).count() as u32;
            let open = state
                .reservations
                .values()
                .filter(|r| r.active(now_ms))
                .find(|r| r.nodes.iter().any(|h| h.node == n.name));
            let mut node_state = NodeState::of(n, gpus_used.len(), jobs.len());
            if let Some(r) = open.filter(|r| r.holds_whole(&n.name)) {
                node_state = node_state.reserved(r.flags.maint);
            }
            NodeRow {
                name: n.name.clone(),
                state: node_state,
                reservation: open.map(|r| r.name.clone()),
                online: n.online,
                responding: n.responding,
                fencing: n.fencing.clone(),
                admin: n.admin.clone(),
                drain_reason: n.drain_reason().map(str::to_string),
                address: n.address.clone(),
                training_addr: n.training_addr.clone(),
                gpu_model: n.topology.gpu_model().map(str::to_string),
                gpus_total: total,
                gpus_free: total.saturating_sub(gpus_used.len() as u32 + idle_bad),
                gpus_used,
                bad_gpus: n.bad_gpus.clone(),
                cpus_total: capacity.cpus.len() as u32,
                cpus_used: usage.cpus.len(),
                memory_mb: capacity.mem_mb,
                memory_used_mb: usage.mem_mb,
                jobs,
                gpu_jobs,
                features: n.features.clone(),
                agent_version: n.agent_version.clone(),
                health: n.health.clone(),
                outside_jobs: Vec::new(),
                topology: with_topology.then(|| n.topology.clone()),
            }
        })
        .collect()
}
