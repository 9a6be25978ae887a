//! `/metrics`: one scrape's OpenMetrics text, from this replica's committed state and
//! its Raft status; counts, states and indexes only, every label from a bounded set.

use crate::ctx::Ctx;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use gsched_types::job::JobState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

pub(super) fn metrics(ctx: &Ctx) -> axum::response::Response {
    match render(ctx) {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

/// The name of a pending reason without its details (`ReqNodeNotAvail`, not the nodes).
fn reason_kind(reason: &gsched_types::job::PendingReason) -> String {
    let debug = format!("{reason:?}");
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("None")
        .to_string()
}

/// One scrape's text: a fresh registry filled from the committed state.
pub fn render(ctx: &Ctx) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("gsched");
    register_cluster(&mut reg, ctx);
    register_telemetry(&mut reg, ctx);
    register_outside(&mut reg, ctx);
    register_raft(&mut reg, ctx);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}

/// The replicated state's counts: jobs by state and pending reason, nodes by state, GPUs,
/// notifications.
fn register_cluster(reg: &mut Registry, ctx: &Ctx) {
    let jobs = Family::<StateLabel, Gauge>::default();
    let pending = Family::<ReasonLabel, Gauge>::default();
    let nodes = Family::<StateLabel, Gauge>::default();
    let (gpus_total, gpus_bad, gpus_allocated) = (
        Gauge::<i64>::default(),
        Gauge::<i64>::default(),
        Gauge::<i64>::default(),
    );
    let submitted = Counter::<u64>::default();
    let notices = Family::<StateLabel, Gauge>::default();
    {
        let r = ctx.raft.replica.read();
        let mut by_state: BTreeMap<&str, i64> = BTreeMap::new();
        let mut by_reason: BTreeMap<String, i64> = BTreeMap::new();
        let mut allocated = 0i64;
        for j in r.state.jobs.values() {
            *by_state.entry(j.state.name()).or_default() += 1;
            match j.state {
                JobState::Pending => *by_reason.entry(reason_kind(&j.reason)).or_default() += 1,
                JobState::Running | JobState::Completing => {
                    allocated += j
                        .allocation
                        .as_ref()
                        .map(|a| a.nodes.iter().map(|n| n.gpus.len() as i64).sum::<i64>())
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        // Every state appears, at zero too, so dashboards see the series from the start.
        for s in JobState::ALL {
            jobs.get_or_create(&StateLabel {
                state: s.name().to_string(),
            })
            .set(by_state.get(s.name()).copied().unwrap_or(0));
        }
        for (reason, n) in by_reason {
            pending.get_or_create(&ReasonLabel { reason }).set(n);
        }
        let mut node_states: BTreeMap<&str, i64> = ["up", "drain", "not_responding", "down"]
            .iter()
            .map(|s| (*s, 0))
            .collect();
        let (mut total, mut bad) = (0i64, 0i64);
        for n in r.state.nodes.values() {
            let state = if !n.online {
                "down"
            } else if !n.responding {
                "not_responding"
            } else if n.is_drained() {
                "drain"
            } else {
                "up"
            };
            *node_states.entry(state).or_default() += 1;
            total += n.topology.gpus.len() as i64;
            bad += n.bad_gpus.len() as i64;
        }
        for (state, n) in node_states {
            nodes
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
        let mut by_notice: BTreeMap<&str, i64> = ["due", "sending", "sent", "failed"]
            .iter()
            .map(|s| (*s, 0))
            .collect();
        for n in r.state.jobs.values().flat_map(|j| &j.notices) {
            let state = match n.state {
                gsched_types::notify::NoticeState::Due => "due",
                gsched_types::notify::NoticeState::Sending { .. } => "sending",
                _ if n.failed() => "failed",
                _ => "sent",
            };
            *by_notice.entry(state).or_default() += 1;
        }
        for (state, n) in by_notice {
            notices
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
        gpus_total.set(total);
        gpus_bad.set(bad);
        gpus_allocated.set(allocated);
        submitted.inc_by(r.state.next_job_id.saturating_sub(1));
    }
    reg.register(
        "jobs",
        "Jobs this controller knows, by state (finished jobs while retained)",
        jobs,
    );
    reg.register(
        "jobs_pending",
        "Pending jobs by the kind of their reason",
        pending,
    );
    reg.register(
        "jobs_submitted",
        "Job ids handed out (every job and array task ever submitted)",
        submitted,
    );
    reg.register("nodes", "Registered nodes by state", nodes);
    reg.register(
        "job_notifications",
        "Notifications of the jobs this controller holds, by state (failed: a target did not get it)",
        notices,
    );
    reg.register("gpus", "GPUs on registered nodes", gpus_total);
    reg.register(
        "gpus_unhealthy",
        "GPUs withheld from scheduling as unhealthy",
        gpus_bad,
    );
    reg.register(
        "gpus_allocated",
        "GPUs allocated to running jobs",
        gpus_allocated,
    );
}

/// The leader's loops: scheduling passes, queue waits, proposals, notifications.
fn register_telemetry(reg: &mut Registry, ctx: &Ctx) {
    let t = &ctx.telemetry;
    reg.register(
        "scheduler_pass_seconds",
        "One scheduling pass on the leader: snapshot and plan",
        t.pass_seconds.clone(),
    );
    reg.register(
        "scheduler_pending_considered",
        "Pending jobs the last scheduling pass considered",
        t.pass_pending.clone(),
    );
    reg.register(
        "job_queue_wait_seconds",
        "From submission (or requeue) to the pass that started the job",
        t.queue_wait_seconds.clone(),
    );
    reg.register(
        "proposal_seconds",
        "From proposing a command to its commit and apply on this controller",
        t.proposal_seconds.clone(),
    );
    reg.register(
        "leader_proposals_failed",
        "Commands the leader's own loops proposed that were not committed (each is logged)",
        t.leader_proposals_failed.clone(),
    );
    reg.register(
        "scheduler_pass_panics",
        "Scheduling passes that panicked (a bug; each is logged and the pass skipped)",
        t.pass_panics.clone(),
    );
    reg.register(
        "notifications_delivered",
        "Notification deliveries this controller made as leader, by channel and outcome",
        t.notifications.clone(),
    );
    reg.register(
        "notifications_in_doubt",
        "Notifications a leader gone had claimed, put down as not known to be delivered (never resent)",
        t.notify_in_doubt.clone(),
    );
}

/// Processes on GPUs outside the jobs holding them.
fn register_outside(reg: &mut Registry, ctx: &Ctx) {
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct NodeGpuLabel {
        node: String,
        gpu: String,
        user: String,
    }
    let outside = Family::<NodeGpuLabel, Gauge>::default();
    for (node, uses) in ctx.hub.outside_all() {
        for u in uses {
            outside
                .get_or_create(&NodeGpuLabel {
                    node: node.clone(),
                    gpu: u.gpu.to_string(),
                    user: u.user.clone(),
                })
                .inc();
        }
    }
    reg.register(
        "gpu_processes_outside_jobs",
        "Processes using a GPU outside the jobs holding it, by node, GPU and user (the leader's latest reports)",
        outside,
    );
}

/// This controller's Raft role, indexes and storage, and its agents.
fn register_raft(reg: &mut Registry, ctx: &Ctx) {
    let s = ctx.raft.status.borrow().clone();
    let role = Family::<RoleLabel, Gauge>::default();
    for r in ["leader", "follower", "candidate", "pre-candidate"] {
        role.get_or_create(&RoleLabel { role: r.into() })
            .set(i64::from(s.role.name() == r));
    }
    let gauge = |v: u64| {
        let g = Gauge::<i64>::default();
        g.set(v as i64);
        g
    };
    reg.register("raft_role", "1 for this controller's Raft role", role);
    reg.register("raft_term", "Raft term", gauge(s.term));
    reg.register(
        "raft_leader_id",
        "The leader this controller knows (0: none)",
        gauge(s.leader_id),
    );
    reg.register(
        "raft_commit_index",
        "Highest log index known committed",
        gauge(s.commit_index),
    );
    reg.register(
        "raft_applied_index",
        "Highest log index applied here",
        gauge(s.applied_index),
    );
    reg.register(
        "raft_snapshot_index",
        "Index of the latest snapshot",
        gauge(s.snapshot_index),
    );
    reg.register(
        "raft_voters",
        "Voting members of the Raft group",
        gauge(s.voters.len() as u64),
    );
    reg.register(
        "storage_bytes",
        "Bytes in this controller's data directory",
        gauge(s.disk_bytes),
    );
    reg.register(
        "storage_fault",
        "1 while this controller cannot write its data directory",
        gauge(u64::from(s.storage_fault.is_some())),
    );
    reg.register(
        "agents_connected",
        "Agents with a session to this controller (the leader holds them all)",
        gauge(ctx.hub.connected().len() as u64),
    );
}
