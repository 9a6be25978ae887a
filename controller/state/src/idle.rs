//! The idle-GPU policy (`[idle_gpu]` in `gctld.toml`): which rule applies to a job, and
//! which running jobs the leader warns or cancels, decided from the committed usage
//! summaries and the leader's time alone.

use crate::command::{Command, IdleGpus};
use crate::machine::ClusterState;
use gsched_types::job::{JobRecord, JobState};
use gsched_types::usage::{IdleNotice, evidence};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the policy does to a job whose GPUs stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    /// Show a warning (and run the notify command); the job keeps running.
    Warn,
    /// Warn, then cancel with reason `IdleGPUs` after the grace period.
    Cancel,
}

/// A partition's changes to the policy (`[idle_gpu.partitions.NAME]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleOverride {
    #[serde(default)]
    pub threshold_pct: Option<u8>,
    #[serde(default)]
    pub after_s: Option<u64>,
    #[serde(default)]
    pub action: Option<IdleAction>,
    #[serde(default)]
    pub grace_s: Option<u64>,
    /// No idle policy in this partition.
    #[serde(default)]
    pub off: bool,
}

/// `[idle_gpu]`: off when the table is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdlePolicy {
    /// A GPU under this utilisation (percent) counts as idle.
    #[serde(default = "default_threshold")]
    pub threshold_pct: u8,
    /// How long every GPU of a job must stay idle before the warning.
    #[serde(default = "default_after")]
    pub after_s: u64,
    #[serde(default = "default_action")]
    pub action: IdleAction,
    /// With `cancel`: how long after the warning the job is cancelled if still idle.
    #[serde(default = "default_grace")]
    pub grace_s: u64,
    #[serde(default)]
    pub exempt_users: Vec<String>,
    #[serde(default)]
    pub exempt_accounts: Vec<String>,
    #[serde(default)]
    pub exempt_qos: Vec<String>,
    /// A command run on the leader when a job is warned or cancelled, with the job's id,
    /// user, `warn` or `cancel` and the message in `GSCHED_IDLE_JOB`, `GSCHED_IDLE_USER`,
    /// `GSCHED_IDLE_ACTION`, `GSCHED_IDLE_MESSAGE`.
    #[serde(default)]
    pub notify: Option<String>,
    #[serde(default)]
    pub partitions: BTreeMap<String, IdleOverride>,
}

fn default_threshold() -> u8 {
    5
}
fn default_after() -> u64 {
    3600
}
fn default_action() -> IdleAction {
    IdleAction::Warn
}
fn default_grace() -> u64 {
    900
}

/// The rule one job is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleRule {
    pub threshold_pct: u8,
    pub after_s: u64,
    pub action: IdleAction,
    pub grace_s: u64,
}

/// A setting of `[idle_gpu]` that serde accepts but the policy cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdlePolicyError {
    #[error("{section}threshold_pct must be 1 to 100 (a GPU under it counts as idle)")]
    Threshold { section: String },
    #[error("{section}after_s must be at least 1")]
    After { section: String },
}

impl IdlePolicy {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), IdlePolicyError> {
        let check = |where_: &str, t: Option<u8>, after: Option<u64>| {
            if t.is_some_and(|t| t == 0 || t > 100) {
                return Err(IdlePolicyError::Threshold {
                    section: where_.to_string(),
                });
            }
            if after == Some(0) {
                return Err(IdlePolicyError::After {
                    section: where_.to_string(),
                });
            }
            Ok(())
        };
        check("[idle_gpu] ", Some(self.threshold_pct), Some(self.after_s))?;
        for (name, o) in &self.partitions {
            check(
                &format!("[idle_gpu.partitions.{name}] "),
                o.threshold_pct,
                o.after_s,
            )?;
        }
        Ok(())
    }

    /// The rule for a job in `partition` (`None`: exempt, or the policy is off there).
    pub fn rule_for(&self, job: &JobRecord, partition: &str) -> Option<IdleRule> {
        let spec = &job.spec;
        if self.exempt_users.contains(&spec.user)
            || self
                .exempt_accounts
                .iter()
                .any(|a| a.eq_ignore_ascii_case(spec.account_name()))
            || spec
                .qos
                .as_ref()
                .is_some_and(|q| self.exempt_qos.iter().any(|e| e.eq_ignore_ascii_case(q)))
        {
            return None;
        }
        let o = self.partitions.get(partition).cloned().unwrap_or_default();
        if o.off {
            return None;
        }
        Some(IdleRule {
            threshold_pct: o.threshold_pct.unwrap_or(self.threshold_pct),
            after_s: o.after_s.unwrap_or(self.after_s),
            action: o.action.unwrap_or(self.action),
            grace_s: o.grace_s.unwrap_or(self.grace_s),
        })
    }
}

/// How long every GPU of a running job has stayed idle, by its nodes' newest summaries;
/// `None` until every node of the attempt has sampled its GPUs.
pub fn idle_for_s(job: &JobRecord) -> Option<u64> {
    let alloc = job.allocation.as_ref()?;
    let mut least: Option<u64> = None;
    for n in alloc.nodes.iter().filter(|n| !n.gpus.is_empty()) {
        let usage = job.usage.iter().find(|u| u.node == n.node)?;
        let below = usage.min_below_s()?;
        least = Some(least.map_or(below, |l| l.min(below)));
    }
    least
}

/// The warnings and cancels the policy calls for now (`now_ms`: the leader's clock).
pub fn decide(state: &ClusterState, policy: &IdlePolicy, now_ms: u64) -> Vec<Command> {
    let mut out = Vec::new();
    for job in state.allocated_jobs() {
        if job.state != JobState::Running || job.spec.total_gpus() == 0 {
            continue;
        }
        let partition = state.config.partition_of(&job.spec);
        let Some(rule) = policy.rule_for(job, &partition) else {
            continue;
        };
        let Some(idle_s) = idle_for_s(job) else {
            continue;
        };
        match &job.idle {
            None if idle_s >= rule.after_s => out.push(Command::IdleGpus(IdleGpus {
                job: job.id,
                attempt: job.attempt,
                notice: IdleNotice {
                    at_ms: now_ms,
                    threshold_pct: rule.threshold_pct,
                    after_s: rule.after_s,
                    grace_s: rule.grace_s,
                    cancel: rule.action == IdleAction::Cancel,
                    evidence: evidence(&job.usage),
                },
                cancel: false,
            })),
            Some(n)
                if n.cancel
                    && idle_s >= n.after_s + n.grace_s
                    && now_ms >= n.at_ms + n.grace_s * 1000 =>
            {
                out.push(Command::IdleGpus(IdleGpus {
                    job: job.id,
                    attempt: job.attempt,
                    notice: IdleNotice {
                        evidence: evidence(&job.usage),
                        ..n.clone()
                    },
                    cancel: true,
                }))
            }
            _ => {}
        }
    }
    out
}
