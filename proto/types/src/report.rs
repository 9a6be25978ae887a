//! Usage and fair-share reports (`greport`/`sreport`, `gctl share`/`sshare`): what is
//! asked and the rows that come back.

use serde::{Deserialize, Serialize};

/// What a usage report's rows are per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Per user and account (sreport's AccountUtilizationByUser).
    User,
    Account,
    Partition,
    Node,
    GpuModel,
}

impl Group {
    pub fn parse(text: &str) -> Result<Group, crate::error::InputError> {
        Ok(match text.to_ascii_lowercase().as_str() {
            "user" | "users" => Group::User,
            "account" | "accounts" => Group::Account,
            "partition" | "partitions" => Group::Partition,
            "node" | "nodes" => Group::Node,
            "gpu" | "gpu-model" | "gpu_model" | "model" => Group::GpuModel,
            other => {
                return Err(crate::error::InputError::ReportGroup(other.to_string()));
            }
        })
    }
}

/// A request for a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum ReportRequest {
    /// GPU-hours inside `[since_ms, until_ms]` (ms since the epoch; `until_ms` 0: now).
    Usage {
        group: Group,
        since_ms: u64,
        until_ms: u64,
    },
    /// Each account's and user's shares, decayed usage and fair-share factor.
    Share,
}

/// One row of a usage report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageRow {
    /// Set when grouped by user (with its account).
    pub user: Option<String>,
    /// Set when grouped by user or account.
    pub account: Option<String>,
    pub partition: Option<String>,
    pub node: Option<String>,
    pub gpu_model: Option<String>,
    /// Jobs that ran inside the window.
    pub jobs: u64,
    /// GPU-hours inside the window.
    pub gpu_hours: f64,
    /// This row's share of all GPU-hours in the report, in percent.
    pub share_pct: f64,
}

/// A usage report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageReport {
    pub group: Group,
    pub since_ms: u64,
    pub until_ms: u64,
    /// GPU-hours used inside the window, by every job.
    pub gpu_hours: f64,
    /// GPUs the cluster has now, times the window's hours.
    pub capacity_gpu_hours: f64,
    /// `gpu_hours` of `capacity_gpu_hours`, in percent.
    pub utilisation_pct: f64,
    pub rows: Vec<UsageRow>,
}

/// One account's or user's line of the fair-share table (`sshare`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShareRow {
    pub account: String,
    /// Empty on the account's own line.
    pub user: String,
    /// The account's configured shares (a user's line: its account's split evenly among
    /// its users).
    pub raw_shares: f64,
    /// Of all shares, 0..1.
    pub norm_shares: f64,
    /// GPU-hours, decayed by the configured half-life.
    pub usage_gpu_hours: f64,
    /// Of all decayed usage (a user's line: of its account's), 0..1.
    pub norm_usage: f64,
    /// The fair-share factor the scheduler gives its jobs, 0..1 (1: nothing used).
    pub fairshare: f64,
}

/// A report's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum ReportReply {
    Usage(UsageReport),
    Share { rows: Vec<ShareRow> },
}
