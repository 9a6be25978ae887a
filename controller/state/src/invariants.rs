//! Safety properties of the cluster state, checked by unit, property and chaos tests.

use crate::machine::ClusterState;
use gsched_types::JobId;
use gsched_types::job::JobState;
use std::collections::BTreeMap;

/// A safety property the state breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("job {job} is {state} but allocation presence is {allocated}")]
    Allocation {
        job: JobId,
        state: JobState,
        allocated: bool,
    },
    #[error("pending job {0} holds an allocation")]
    PendingHoldsAllocation(JobId),
    #[error("GPU {gpu} on {node} is held by jobs {first} and {second}")]
    GpuHeldTwice {
        gpu: u32,
        node: String,
        first: u64,
        second: JobId,
    },
    #[error("usage says GPU {gpu} on {node} is busy but no live job holds it")]
    UsageWithoutJob { gpu: u32, node: String },
    #[error("the port index says {0} but the running jobs disagree")]
    PortIndex(String),
    #[error("the allocation index lists {indexed} jobs, {held} running jobs hold an allocation")]
    AllocatedIndex { indexed: usize, held: usize },
    #[error("the schedulable index lists {indexed} jobs, {pending} are pending and not held")]
    SchedulableIndex { indexed: usize, pending: usize },
    #[error("the notification index lists {indexed} jobs, {open} have notices under way")]
    NotifyingIndex { indexed: usize, open: usize },
    #[error("usage on {node} counts {counted} GPUs, jobs hold {held}")]
    UsageCount {
        node: String,
        counted: u32,
        held: u32,
    },
}

/// Checks that no GPU (or CPU) is held by two live jobs and that the derived usage matches
/// the allocations. Returns the first violation found.
pub fn check(state: &ClusterState) -> Result<(), Violation> {
    let mut gpu_owner: BTreeMap<(String, u32), u64> = BTreeMap::new();
    let mut ports = std::collections::BTreeSet::new();
    let mut allocated = 0;
    for job in state.jobs.values() {
        let live = matches!(job.state, JobState::Running | JobState::Completing);
        if live != job.allocation.is_some()
            && job.state != JobState::Pending
            && !job.state.is_terminal()
        {
            return Err(Violation::Allocation {
                job: job.id,
                state: job.state,
                allocated: job.allocation.is_some(),
            });
        }
        if job.state == JobState::Pending && job.allocation.is_some() {
            return Err(Violation::PendingHoldsAllocation(job.id));
        }
        if !live {
            continue;
        }
        let alloc = job.allocation.as_ref().expect("live");
        allocated += 1;
        if let Some(first) = alloc.nodes.first() {
            ports.insert((first.node.clone(), alloc.master_port));
            if !state.port_in_use(&first.node, alloc.master_port) {
                return Err(Violation::PortIndex(format!(
                    "{}:{} is free while job {} holds it",
                    first.node, alloc.master_port, job.id
                )));
            }
        }
        for na in &alloc.nodes {
            for g in &na.gpus {
                if let Some(other) = gpu_owner.insert((na.node.clone(), *g), job.id.0) {
                    return Err(Violation::GpuHeldTwice {
                        gpu: *g,
                        node: na.node.clone(),
                        first: other,
                        second: job.id,
                    });
                }
            }
        }
    }
    if state.allocated_count() != allocated
        || state.allocated_jobs().count() != allocated
        || state
            .allocated_jobs()
            .any(|j| !matches!(j.state, JobState::Running | JobState::Completing))
    {
        return Err(Violation::AllocatedIndex {
            indexed: state.allocated_count(),
            held: allocated,
        });
    }
    let pending = state
        .jobs
        .values()
        .filter(|j| j.state == JobState::Pending && !j.held)
        .count();
    if state.schedulable_count() != pending
        || state.schedulable_jobs().count() != pending
        || state
            .schedulable_jobs()
            .any(|j| j.state != JobState::Pending || j.held)
    {
        return Err(Violation::SchedulableIndex {
            indexed: state.schedulable_count(),
            pending,
        });
    }
    let open = state
        .jobs
        .values()
        .filter(|j| j.notices.iter().any(|n| !n.is_done()))
        .count();
    if state.notifying_count() != open
        || state
            .notifying_jobs()
            .any(|j| j.notices.iter().all(|n| n.is_done()))
    {
        return Err(Violation::NotifyingIndex {
            indexed: state.notifying_count(),
            open,
        });
    }
    if state.ports_held() != ports.len() {
        return Err(Violation::PortIndex(format!(
            "{} ports are marked in use, running jobs hold {}",
            state.ports_held(),
            ports.len()
        )));
    }
    for (node, _) in state.nodes.iter() {
        let usage = state.usage_of(node);
        for g in usage.gpus.iter() {
            if !gpu_owner.contains_key(&(node.clone(), g)) {
                return Err(Violation::UsageWithoutJob {
                    gpu: g,
                    node: node.clone(),
                });
            }
        }
        let held = gpu_owner.keys().filter(|(n, _)| n == node).count() as u32;
        if held != usage.gpus.len() {
            return Err(Violation::UsageCount {
                node: node.clone(),
                counted: usage.gpus.len(),
                held,
            });
        }
    }
    Ok(())
}
