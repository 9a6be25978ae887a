//! Nodes: registration (and what a returning agent knows of its runs), loss, health
//! events (critical ones drain the node and fail the jobs on the GPU concerned), drain
//! and resume.

use super::ClusterState;
use crate::command::{
    DrainNode, HealthEvents, KnownRun, NodeResponding, Outcome, RegisterNode, ResumeNode, RunFailed,
};
use gsched_types::agent::RunRef;
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobState, RunState};
use gsched_types::node::{HealthSeverity, NodeAdminState, NodeRecord};

/// Health events kept per node.
const HEALTH_HISTORY: usize = 32;

impl ClusterState {
    fn node_mut(&mut self, node: &str) -> Result<&mut NodeRecord, Outcome> {
        self.nodes.get_mut(node).ok_or_else(|| Outcome::NotFound {
            message: format!("no node named {node}"),
        })
    }

    pub(super) fn register_node(&mut self, c: &RegisterNode, at: u64) -> Outcome {
        if let Err(e) = c.topology.validate() {
            return Outcome::Rejected {
                message: e.to_string(),
            };
        }
        let name = c.name.as_str();
        let record = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| NodeRecord {
                name: name.to_string(),
                address: c.address.clone(),
                training_addr: c.training_addr.clone(),
                topology: c.topology.clone(),
                features: c.features.clone(),
                admin: NodeAdminState::Up,
                online: true,
                responding: true,
                fencing: Vec::new(),
                registered_ms: at,
                state_changed_ms: at,
                bad_gpus: Vec::new(),
                health: Vec::new(),
                agent_version: c.agent_version.clone(),
            });
        if record.topology.gpus.len() != c.topology.gpus.len() {
            record.bad_gpus.clear();
        }
        record.address = c.address.clone();
        record.training_addr = c.training_addr.clone();
        record.topology = c.topology.clone();
        record.features = c.features.clone();
        record.agent_version = c.agent_version.clone();
        if !record.online {
            record.state_changed_ms = at;
        }
        record.online = true;
        record.responding = true;
        record.registered_ms = at;
        // Runs the agent still keeps that are not wanted here any more (their job ended,
        // was requeued or moved while the node was away): the node takes no new job until
        // the agent has confirmed each stopped.
        let wanted = |k: &KnownRun| {
            self.jobs.get(&k.job).is_some_and(|j| {
                j.attempt == k.attempt
                    && matches!(j.state, JobState::Running | JobState::Completing)
                    && j.runs.iter().any(|s| s.node == name && !s.state.is_done())
            })
        };
        let fencing: Vec<RunRef> = c
            .known_runs
            .iter()
            .filter(|k| !wanted(k))
            .map(|k| RunRef {
                job: k.job,
                attempt: k.attempt,
            })
            .collect();
        if let Some(record) = self.nodes.get_mut(name) {
            record.fencing = fencing;
        }
        // Runs the controller thinks go on here but the agent does not know: lost.
        let lost: Vec<JobId> = self
            .allocated_jobs()
            .filter(|j| {
                j.runs
                    .iter()
                    .any(|s| s.node == name && matches!(s.state, RunState::Running { .. }))
            })
            .filter(|j| {
                !c.known_runs
                    .iter()
                    .any(|k| k.job == j.id && k.attempt == j.attempt)
            })
            .map(|j| j.id)
            .collect();
        for id in lost {
            self.lose_run(
                id,
                name,
                "the agent restarted without this step (its state was lost)",
                at,
            );
        }
        Outcome::Ok
    }

    pub(super) fn node_responding(&mut self, c: &NodeResponding, at: u64) -> Outcome {
        match self.node_mut(&c.node) {
            Ok(n) => {
                if n.responding != c.responding {
                    n.responding = c.responding;
                    n.state_changed_ms = at;
                }
                Outcome::Ok
            }
            Err(refused) => refused,
        }
    }

    /// A run the node was fenced on has stopped.
    pub(super) fn fenced_run_ended(&mut self, node: &str, job: JobId, attempt: u32) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.fencing
                .retain(|s| !(s.job == job && s.attempt == attempt));
        }
    }

    pub(super) fn node_lost(&mut self, node: &str, reason: &str, at: u64) -> Outcome {
        let record = match self.node_mut(node) {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        if record.online {
            record.state_changed_ms = at;
        }
        record.online = false;
        let affected: Vec<JobId> = self
            .allocated_jobs()
            .filter(|j| j.runs.iter().any(|s| s.node == node && !s.state.is_done()))
            .map(|j| j.id)
            .collect();
        for id in affected {
            self.lose_run(id, node, reason, at);
        }
        Outcome::Ok
    }

    pub(super) fn drain_node(&mut self, c: &DrainNode, at: u64) -> Outcome {
        match self.node_mut(&c.node) {
            Ok(n) => {
                n.admin = NodeAdminState::Drain {
                    reason: c.reason.clone(),
                    since_ms: at,
                    by: c.by.clone(),
                };
                n.state_changed_ms = at;
                Outcome::Ok
            }
            Err(refused) => refused,
        }
    }

    pub(super) fn resume_node(&mut self, c: &ResumeNode, at: u64) -> Outcome {
        match self.node_mut(&c.node) {
            Ok(n) => {
                n.admin = NodeAdminState::Up;
                n.bad_gpus.clear();
                n.state_changed_ms = at;
                Outcome::Ok
            }
            Err(refused) => refused,
        }
    }

    pub(super) fn health_events(&mut self, c: &HealthEvents, at: u64) -> Outcome {
        let node = c.node.as_str();
        let record = match self.node_mut(node) {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        let mut failures: Vec<(Option<u32>, Failure)> = Vec::new();
        for ev in &c.events {
            record.health.push(ev.clone());
            if ev.severity == HealthSeverity::Critical {
                if let Some(g) = ev.gpu
                    && !record.bad_gpus.contains(&g)
                {
                    record.bad_gpus.push(g);
                    record.bad_gpus.sort_unstable();
                }
                if !record.is_drained() {
                    record.admin = NodeAdminState::Drain {
                        reason: ev.message.clone(),
                        since_ms: ev.at_ms.min(at).max(1),
                        by: "health".into(),
                    };
                    record.state_changed_ms = at;
                }
                let kind = match (ev.kind.is_gpu_loss(), ev.xid) {
                    (false, Some(code)) => FailureKind::GpuXid { code },
                    _ => FailureKind::GpuLost { gpu: ev.gpu },
                };
                if ev.gpu.is_some() || ev.stops_node_jobs {
                    failures.push((
                        ev.gpu,
                        Failure::new(kind, ev.message.clone(), ev.at_ms).on(node),
                    ));
                }
            }
        }
        let excess = record.health.len().saturating_sub(HEALTH_HISTORY);
        record.health.drain(..excess);
        for (gpu, failure) in failures {
            let victims: Vec<(JobId, u32)> = self
                .allocated_jobs()
                .filter(|j| {
                    j.allocation.as_ref().is_some_and(|a| {
                        a.nodes
                            .iter()
                            .any(|n| n.node == node && gpu.is_none_or(|g| n.gpus.contains(&g)))
                    })
                })
                .map(|j| (j.id, j.attempt))
                .collect();
            for (job, attempt) in victims {
                let report = RunFailed {
                    job,
                    attempt,
                    node: node.to_string(),
                    failure: failure.clone(),
                };
                self.run_failed(&report, at);
            }
        }
        Outcome::Ok
    }
}
