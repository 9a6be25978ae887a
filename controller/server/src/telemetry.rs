//! What this controller measures as it works, for `/metrics`: scheduler passes, how long
//! jobs waited before the plan started them, how long proposals take to commit, the
//! notifications its outbox delivered. Each
//! metric lives here for the process's life; the scrape registers clones (they share
//! their values).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

pub struct Telemetry {
    /// One scheduling pass: snapshot and plan (seconds).
    pub pass_seconds: Histogram,
    /// Pending jobs the last pass considered.
    pub pass_pending: Gauge,
    /// From submission (or requeue) to the pass that started the job (seconds).
    pub queue_wait_seconds: Histogram,
    /// From proposing a command to its commit and apply here (seconds).
    pub proposal_seconds: Histogram,
    /// Commands the leader's own loops proposed that were not committed (lost leadership,
    /// a full log, a storage fault); each is logged with its command.
    pub leader_proposals_failed: Counter,
    /// Scheduling passes that panicked (a bug: the pass is logged and skipped).
    pub pass_panics: Counter,
    /// Notifications this controller's outbox delivered or failed to, by channel.
    pub notifications: Family<NotifyLabel, Counter>,
    /// Claims of a leader gone that this one put down as not known to be delivered.
    pub notify_in_doubt: Counter,
}

/// A notification's channel (`mail`, `slack`, `webhook`) and outcome (`sent`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotifyLabel {
    pub channel: String,
    pub outcome: String,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            pass_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            pass_pending: Gauge::default(),
            queue_wait_seconds: Histogram::new(exponential_buckets(0.1, 4.0, 10)),
            proposal_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            leader_proposals_failed: Counter::default(),
            pass_panics: Counter::default(),
            notifications: Family::default(),
            notify_in_doubt: Counter::default(),
        }
    }
}
