//! Safety properties of the cluster state, checked by unit, property and chaos tests.

use crate::machine::ClusterState;
use gsched_types::job::JobState;
use std::collections::BTreeMap;

/// Checks that no GPU (or CPU) is held by two live jobs and that the derived usage matches
/// the allocations. Returns the first violation found.
pub fn check(state: &ClusterState) -> Result<(), String> {
    let mut gpu_owner: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for job in state.jobs.values() {
        let live = matches!(job.state, JobState::Running | JobState::Completing);
        if live != job.allocation.is_some()
            && job.state != JobState::Pending
            && !job.state.is_terminal()
        {
            return Err(format!(
                "job {} is {} but allocation presence is {}",
                job.id,
                job.state,
                job.allocation.is_some()
            ));
        }
        if job.state == JobState::Pending && job.allocation.is_some() {
            return Err(format!("pending job {} holds an allocation", job.id));
        }
        if !live {
            continue;
        }
        for na in &job.allocation.as_ref().expect("live").nodes {
            for g in &na.gpus {
                if let Some(other) = gpu_owner.insert((na.node.clone(), *g), job.id.0) {
                    return Err(format!(
                        "GPU {g} on {} is held by jobs {other} and {}",
                        na.node, job.id
                    ));
                }
            }
        }
    }
    for (node, _) in state.nodes.iter() {
        let usage = state.usage_of(node);
        for g in usage.gpus.iter() {
            if !gpu_owner.contains_key(&(node.clone(), g)) {
                return Err(format!(
                    "usage says GPU {g} on {node} is busy but no live job holds it"
                ));
            }
        }
        let held = gpu_owner.keys().filter(|(n, _)| n == node).count() as u32;
        if held != usage.gpus.len() {
            return Err(format!(
                "usage on {node} counts {} GPUs, jobs hold {held}",
                usage.gpus.len()
            ));
        }
    }
    Ok(())
}
