//! Advance reservations (Slurm's `scontrol create reservation`): GPUs or whole nodes set
//! aside for some users or accounts over a time window, or taken out of scheduling for
//! maintenance. The request an admin sends, the record the controllers replicate, and
//! the reply of `gctl reservation` / `scontrol ... reservation`.

use serde::{Deserialize, Serialize};

/// Slurm's reservation flags that gsched acts on.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ResvFlags {
    /// A maintenance window: its nodes show `maint` and leave scheduling at its start;
    /// it may overlap other reservations.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maint: bool,
    /// Create it even where running jobs may still hold its resources at its start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_jobs: bool,
}

impl ResvFlags {
    /// Parses Slurm's `Flags=` list (`MAINT,IGNORE_JOBS`, any case).
    pub fn parse(text: &str) -> Result<ResvFlags, crate::error::InputError> {
        let mut flags = ResvFlags::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word.to_ascii_uppercase().as_str() {
                "MAINT" => flags.maint = true,
                "IGNORE_JOBS" => flags.ignore_jobs = true,
                "SPEC_NODES" => {}
                other => {
                    return Err(crate::error::InputError::ReservationFlag(other.to_string()));
                }
            }
        }
        Ok(flags)
    }

    /// Slurm's spelling, for `scontrol show reservation`.
    pub fn words(&self) -> String {
        let mut w = Vec::new();
        if self.maint {
            w.push("MAINT");
        }
        if self.ignore_jobs {
            w.push("IGNORE_JOBS");
        }
        w.join(",")
    }
}

/// What to reserve: named nodes (whole), a count of whole nodes, or a count of GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResvResources {
    /// `Nodes=hostlist`: these nodes, whole.
    Nodes(Vec<String>),
    /// `NodeCnt=N`: any N whole nodes, chosen when the reservation is created.
    NodeCount(u32),
    /// `TRES=gres/gpu=N`: N GPUs, on as few nodes as possible, chosen at creation.
    Gpus(u32),
}

/// `gctl reservation create` / `scontrol create reservation`: every field but the name
/// is optional on update (absent: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReservationSpec {
    pub name: String,
    /// Start (ms since the epoch); absent on create: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// End (ms since the epoch); or give `duration_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// Who may run jobs in it (by user name); with `accounts`, either suffices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResvResources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<ResvFlags>,
}

/// GPUs (or a whole node) of one node that a reservation holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResvNode {
    pub node: String,
    /// The whole node: every GPU, CPU and byte of memory.
    pub whole: bool,
    /// GPU indices held when not whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
}

/// A reservation as the controllers replicate it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reservation {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub accounts: Vec<String>,
    /// What was asked for (kept for `show` and to re-choose on update).
    pub request: ResvResources,
    /// What it holds.
    pub nodes: Vec<ResvNode>,
    #[serde(default)]
    pub flags: ResvFlags,
    /// Who created it.
    pub by: String,
}

impl Reservation {
    /// Whether the window is open at `now_ms`.
    pub fn active(&self, now_ms: u64) -> bool {
        self.start_ms <= now_ms && now_ms < self.end_ms
    }

    /// Whether a job of `user` charged to `account` may run in it (account names in any
    /// case: Slurm stores them lower case, see [`crate::assoc::slurm_case`]).
    pub fn admits(&self, user: &str, account: &str) -> bool {
        self.users.iter().any(|u| u == user)
            || self
                .accounts
                .iter()
                .any(|a| a.eq_ignore_ascii_case(account))
    }

    /// Whether it holds `node` whole.
    pub fn holds_whole(&self, node: &str) -> bool {
        self.nodes.iter().any(|n| n.node == node && n.whole)
    }

    pub fn gpu_count(&self, gpus_of: impl Fn(&str) -> u32) -> u32 {
        self.nodes
            .iter()
            .map(|n| {
                if n.whole {
                    gpus_of(&n.node)
                } else {
                    n.gpus.len() as u32
                }
            })
            .sum()
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.node.clone()).collect()
    }
}

/// The `Reservations` RPC: one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ReservationRequest {
    Create {
        spec: ReservationSpec,
    },
    Update {
        spec: ReservationSpec,
    },
    Delete {
        name: String,
    },
    /// One reservation, or every one when `name` is absent.
    Show {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

/// What the `Reservations` RPC answers: a message for the changes, the reservations
/// (with the state at the controller's clock) for `show`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReservationReply {
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reservations: Vec<ReservationRow>,
}

/// One reservation as `show` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReservationRow {
    #[serde(flatten)]
    pub reservation: Reservation,
    /// `ACTIVE` or `INACTIVE`, as Slurm prints it.
    pub state: String,
    pub gpus: u32,
    pub cpus: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_slurm_words_and_refuse_unknown_ones() {
        let f = ResvFlags::parse("maint,IGNORE_JOBS").unwrap();
        assert!(f.maint && f.ignore_jobs);
        assert_eq!(f.words(), "MAINT,IGNORE_JOBS");
        assert_eq!(ResvFlags::parse("").unwrap(), ResvFlags::default());
        let err = ResvFlags::parse("MAINT,FLEX").unwrap_err();
        assert_eq!(
            err,
            crate::error::InputError::ReservationFlag("FLEX".into())
        );
    }

    #[test]
    fn a_reservation_admits_its_users_and_accounts_only() {
        let r = Reservation {
            name: "r".into(),
            start_ms: 10,
            end_ms: 20,
            users: vec!["alice".into()],
            accounts: vec!["nlp".into()],
            request: ResvResources::NodeCount(1),
            nodes: vec![],
            flags: ResvFlags::default(),
            by: "root".into(),
        };
        assert!(r.admits("alice", "cv"));
        assert!(r.admits("bob", "nlp"));
        assert!(!r.admits("bob", "cv"));
        assert!(!r.active(9) && r.active(10) && r.active(19) && !r.active(20));
    }
}
