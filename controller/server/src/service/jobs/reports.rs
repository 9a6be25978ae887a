//! Reports: GPU-hours inside a window, from the accounting archive and the jobs still
//! running (`greport`), and the fair-share table the scheduler weighs (`gctl share`).

use super::JobsService;
use gsched_archive::{Item, Totals};
use gsched_proto::clock::now_ms;
use gsched_state::ClusterState;
use gsched_state::rows::{Audience, JobDetail, job_row};
use gsched_types::job::{JobRecord, JobState};
use gsched_types::report::{Group, ReportReply, ReportRequest, ShareRow, UsageReport};
use tonic::Status;

impl JobsService {
    /// The report `req` asks for, after the read barrier.
    pub async fn report_for(&self, req: ReportRequest) -> Result<ReportReply, Status> {
        self.ctx.read_barrier().await?;
        match req {
            ReportRequest::Usage {
                group,
                since_ms,
                until_ms,
            } => Ok(ReportReply::Usage(
                self.usage(group, since_ms, until_ms).await?,
            )),
            ReportRequest::Share => Ok(ReportReply::Share {
                rows: share_rows(&self.ctx.raft.replica.read().state, now_ms()),
            }),
        }
    }

    async fn usage(
        &self,
        group: Group,
        since_ms: u64,
        until_ms: u64,
    ) -> Result<UsageReport, Status> {
        let now = now_ms();
        let until = if until_ms == 0 {
            now
        } else {
            until_ms.min(now)
        };
        if since_ms >= until {
            return Err(Status::invalid_argument(
                "the report's start must be before its end (and before now)",
            ));
        }
        let mut totals = Totals::new(group, since_ms, until);
        let archived = match self.ctx.archive.clone() {
            Some(archiver) => {
                let replica = self.ctx.raft.replica.clone();
                totals = tokio::task::spawn_blocking(move || {
                    // Jobs that ended a moment ago are written first, so none is missed.
                    archiver.catch_up(&replica)?;
                    archiver.archive.add_usage(&mut totals)?;
                    Ok::<_, gsched_archive::ArchiveError>(totals)
                })
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| Status::unavailable(e.to_string()))?;
                true
            }
            None => false,
        };
        let r = self.ctx.raft.replica.read();
        let counted = |j: &JobRecord| match j.state {
            JobState::Running | JobState::Completing => true,
            JobState::Pending => false,
            // Without an archive, the ended jobs memory still holds.
            _ => !archived,
        };
        for j in r.state.jobs.values().filter(|j| counted(j)) {
            add_job(&mut totals, &r.state, j, now);
        }
        let gpus: usize = r.state.nodes.values().map(|n| n.topology.gpus.len()).sum();
        let capacity = gpus as f64 * (until - since_ms) as f64 / 3_600_000.0;
        let used = totals.gpu_hours();
        Ok(UsageReport {
            group,
            since_ms,
            until_ms: until,
            gpu_hours: used,
            capacity_gpu_hours: (capacity * 100.0).round() / 100.0,
            utilisation_pct: if capacity > 0.0 {
                (used * 1000.0 / capacity).round() / 10.0
            } else {
                0.0
            },
            rows: totals.rows(),
        })
    }
}

/// Counts a job of the replica (running: up to `now`).
fn add_job(totals: &mut Totals, state: &ClusterState, j: &JobRecord, now: u64) {
    let Some(start_ms) = j.start_ms else {
        return;
    };
    let row = job_row(state, j, None, JobDetail::Summary, Audience::Owner);
    let model = crate::archiver::gpu_model(state, j);
    totals.add(&Item {
        user: &row.user,
        account: &row.account,
        partition: &row.partition,
        node_list: &row.node_list,
        gpus_per_node: row.gpus_per_node,
        gpus: row.gpus,
        gpu_model: model.as_deref(),
        start_ms,
        end_ms: j.end_ms.unwrap_or(now),
    });
}

fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

/// The fair-share table: a line per account, then one per user of it.
pub fn share_rows(state: &ClusterState, now: u64) -> Vec<ShareRow> {
    let snap = gsched_state::view::snapshot(state, &mut Default::default());
    let lines = gsched_scheduler::priority::share_lines(
        &snap.config,
        &snap.usage,
        &snap.running,
        &snap.pending,
        now,
    );
    let mut rows = Vec::new();
    let mut last_account: Option<&str> = None;
    for l in &lines {
        if last_account != Some(l.account) {
            last_account = Some(l.account);
            rows.push(ShareRow {
                account: l.account.to_string(),
                user: String::new(),
                raw_shares: l.account_shares,
                norm_shares: round(l.account_norm_shares, 6),
                usage_gpu_hours: round(l.account_used / 3600.0, 2),
                norm_usage: round(l.account_norm_usage, 6),
                fairshare: round(l.account_factor, 6),
            });
        }
        rows.push(ShareRow {
            account: l.account.to_string(),
            user: l.user.to_string(),
            raw_shares: round(l.account_shares / f64::from(l.account_users.max(1)), 6),
            norm_shares: round(l.account_norm_shares / f64::from(l.account_users.max(1)), 6),
            usage_gpu_hours: round(l.used / 3600.0, 2),
            norm_usage: round(
                if l.account_used > 0.0 {
                    l.used / l.account_used
                } else {
                    0.0
                },
                6,
            ),
            fairshare: round(l.account_factor * l.user_factor, 6),
        });
    }
    rows
}
