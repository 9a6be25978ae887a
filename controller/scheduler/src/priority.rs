//! Multifactor priority: age, fair share from exponentially decayed GPU usage per account
//! and user, job size, partition and QOS priority, weighted as configured.

use crate::config::{Policy, SchedConfig};
use crate::decay::{decay, pow2_neg};
use crate::input::{PendingJob, RunningJob, UsageRecord};
use gsched_types::assoc::ancestors;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Per-pass fair-share factors, computed once from usage and running jobs; looked up by
/// borrowed names, so a pass over 20,000 jobs allocates nothing per job here.
#[derive(Debug, Default)]
pub struct FairShare {
    /// account -> user -> factor (hashed: only looked up, never walked in order).
    factor: FxHashMap<String, FxHashMap<String, f64>>,
}

impl FairShare {
    pub fn compute(
        config: &SchedConfig,
        usage: &[UsageRecord],
        running: &[RunningJob],
        pending: &[PendingJob],
        now_ms: u64,
    ) -> FairShare {
        let mut fs = FairShare::default();
        for line in share_lines(config, usage, running, pending, now_ms) {
            fs.factor
                .entry(line.account.to_string())
                .or_default()
                .insert(
                    line.user.to_string(),
                    line.account_factor * line.user_factor,
                );
        }
        fs
    }

    /// In (0, 1]: 1 for users who used nothing, 0.5 for a user at exactly their share.
    pub fn factor(&self, account: &str, user: &str) -> f64 {
        self.factor
            .get(account)
            .and_then(|users| users.get(user))
            .copied()
            .unwrap_or(1.0)
    }
}

/// One user's place in the fair-share tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareLine<'a> {
    pub account: &'a str,
    pub user: &'a str,
    /// The account's configured shares, and of all accounts' (0..1).
    pub account_shares: f64,
    pub account_norm_shares: f64,
    /// Decayed GPU-seconds: the account's, its users', and this user's.
    pub account_used: f64,
    pub account_users: u32,
    pub used: f64,
    /// Of every account's decayed use (0..1).
    pub account_norm_usage: f64,
    pub account_factor: f64,
    pub user_factor: f64,
}

/// Every (account, user) with usage, running or pending jobs: shares, decayed use and
/// factors, as the scheduler weighs them (and `gctl share` shows them).
pub fn share_lines<'a>(
    config: &SchedConfig,
    usage: &'a [UsageRecord],
    running: &'a [RunningJob],
    pending: &'a [PendingJob],
    now_ms: u64,
) -> Vec<ShareLine<'a>> {
    // Summed in a hash map (one lookup per record and per pending job), then walked in
    // key order, so every float is summed in the same order on every replica.
    let mut summed: FxHashMap<(&str, &str), f64> = FxHashMap::default();
    for u in usage {
        *summed
            .entry((u.account.as_str(), u.user.as_str()))
            .or_default() += decay(u.gpu_seconds, u.at_ms, now_ms, config.fairshare_half_life_s);
    }
    for r in running {
        let secs = now_ms.saturating_sub(r.start_ms) as f64 / 1000.0;
        *summed
            .entry((r.account.as_str(), r.user.as_str()))
            .or_default() += secs * f64::from(r.gpus());
    }
    for p in pending {
        summed
            .entry((p.account.as_str(), p.user.as_str()))
            .or_default();
    }
    let per_user: BTreeMap<(&str, &str), f64> = summed.into_iter().collect();
    let total: f64 = per_user.values().sum();
    let mut per_account: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for ((account, _), u) in &per_user {
        let e = per_account.entry(account).or_default();
        e.0 += u;
        e.1 += 1;
    }
    let shares_of = |a: &str| {
        config
            .accounts
            .iter()
            .find(|c| c.name == a)
            .map(|c| c.shares)
            .unwrap_or(1)
            .max(1) as f64
    };
    let norm_shares = normalized_shares(config, per_account.keys().copied(), &shares_of);
    per_user
        .into_iter()
        .map(|((account, user), used)| {
            let (account_used, users) = per_account[account];
            let share = norm_shares[account];
            let account_factor = if total > 0.0 {
                pow2_neg((account_used / total) / share)
            } else {
                1.0
            };
            let user_share = 1.0 / f64::from(users.max(1));
            let user_factor = if account_used > 0.0 {
                pow2_neg((used / account_used) / user_share)
            } else {
                1.0
            };
            ShareLine {
                account,
                user,
                account_shares: shares_of(account),
                account_norm_shares: share,
                account_used,
                account_users: users,
                used,
                account_norm_usage: if total > 0.0 {
                    account_used / total
                } else {
                    0.0
                },
                account_factor,
                user_factor,
            }
        })
        .collect()
}

/// Each active account's share of the cluster through the account tree (Slurm's
/// normalised shares): at every level, its shares over those of its siblings that have
/// activity below them, multiplied from the account up to the root. Without parents this
/// is its shares over all active accounts' shares.
fn normalized_shares<'a>(
    config: &SchedConfig,
    active: impl Iterator<Item = &'a str>,
    shares_of: &impl Fn(&str) -> f64,
) -> BTreeMap<&'a str, f64> {
    let parent_of = |a: &str| {
        config
            .accounts
            .iter()
            .find(|c| c.name == a)
            .and_then(|c| c.parent.clone())
    };
    let active: Vec<&str> = active.collect();
    let mut live: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for a in &active {
        live.insert(a.to_string());
        live.extend(ancestors(&config.accounts, a).map(str::to_string));
    }
    let siblings_total = |parent: &Option<String>| {
        live.iter()
            .filter(|x| parent_of(x) == *parent)
            .map(|x| shares_of(x))
            .sum::<f64>()
            .max(1.0)
    };
    active
        .into_iter()
        .map(|a| {
            let mut share = 1.0;
            for level in std::iter::once(a).chain(ancestors(&config.accounts, a)) {
                share *= shares_of(level) / siblings_total(&parent_of(level));
            }
            (a, share)
        })
        .collect()
}

/// A job's priority under the configured policy.
pub fn priority(
    job: &PendingJob,
    config: &SchedConfig,
    fairshare: &FairShare,
    total_gpus: u32,
    now_ms: u64,
) -> f64 {
    let age_s = now_ms.saturating_sub(job.eligible_ms) as f64 / 1000.0;
    let age = (age_s / config.max_age_s.max(1) as f64).min(1.0);
    if config.policy != Policy::Gsched {
        return age;
    }
    let w = &config.weights;
    let size = if total_gpus > 0 {
        (f64::from(job.total_gpus()) / f64::from(total_gpus)).min(1.0)
    } else {
        0.0
    };
    let max_part = config
        .partitions
        .iter()
        .map(|p| p.priority)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let part = config
        .partition(&job.partition)
        .map(|p| p.priority)
        .unwrap_or(0) as f64
        / max_part;
    let max_qos = config
        .qos
        .iter()
        .map(|q| q.priority)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let qos = config
        .qos(job.qos.as_deref())
        .map(|q| q.priority)
        .unwrap_or(0) as f64
        / max_qos;
    let short = match job.time_limit_s {
        // libm, not the platform's ln: followers estimate start times with this too.
        Some(t) => {
            1.0 - (libm::log((t as f64 / 60.0).max(1.0)) / libm::log(7.0 * 24.0 * 60.0)).min(1.0)
        }
        None => 0.0,
    };
    w.age * age - f64::from(job.nice)
        + w.fairshare * fairshare.factor(&job.account, &job.user)
        + w.job_size * size
        + w.short_job * short
        + w.partition * part
        + w.qos * qos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_user_gets_lower_factor() {
        let cfg = SchedConfig::default();
        let usage = vec![
            UsageRecord {
                account: "a".into(),
                user: "heavy".into(),
                gpu_seconds: 1000.0,
                at_ms: 0,
            },
            UsageRecord {
                account: "a".into(),
                user: "light".into(),
                gpu_seconds: 10.0,
                at_ms: 0,
            },
        ];
        let fs = FairShare::compute(&cfg, &usage, &[], &[], 0);
        assert!(fs.factor("a", "heavy") < fs.factor("a", "light"));
        assert_eq!(fs.factor("b", "nobody"), 1.0);
    }

    #[test]
    fn shares_divide_down_the_account_tree() {
        use gsched_types::assoc::AccountConfig;
        let account = |name: &str, parent: Option<&str>, shares: u32| AccountConfig {
            name: name.into(),
            shares,
            max_gpus: None,
            parent: parent.map(str::to_string),
            coordinators: Vec::new(),
            max_jobs: None,
            max_submit_jobs: None,
            max_wall_s: None,
        };
        let cfg = SchedConfig {
            accounts: vec![
                account("lab", None, 1),
                account("nlp", Some("lab"), 3),
                account("vision", Some("lab"), 1),
                account("other", None, 1),
                account("idle", Some("lab"), 100),
            ],
            ..SchedConfig::default()
        };
        let used = |account: &str| UsageRecord {
            account: account.into(),
            user: format!("{account}-user"),
            gpu_seconds: 100.0,
            at_ms: 0,
        };
        let usage = vec![used("nlp"), used("vision"), used("other")];
        let lines = share_lines(&cfg, &usage, &[], &[], 0);
        let share = |a: &str| {
            lines
                .iter()
                .find(|l| l.account == a)
                .map(|l| l.account_norm_shares)
                .unwrap()
        };
        // lab and other split the cluster; nlp and vision split lab 3:1; idle has no
        // activity and takes nothing from its siblings.
        assert_eq!(share("other"), 0.5);
        assert_eq!(share("nlp"), 0.375);
        assert_eq!(share("vision"), 0.125);
        let fs = FairShare::compute(&cfg, &usage, &[], &[], 0);
        assert!(fs.factor("vision", "vision-user") < fs.factor("nlp", "nlp-user"));
        assert!(fs.factor("nlp", "nlp-user") < fs.factor("other", "other-user"));
    }
}
