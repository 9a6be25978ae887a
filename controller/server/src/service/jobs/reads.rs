//! Reads: job listings (full rows or the queue table's), nodes, and this controller's
//! status. Every read but a `stale_ok` one passes the read barrier first.

use super::JobsService;
use crate::auth::Caller;
use gsched_proto::clock::now_ms;
use gsched_proto::pb::ListJobsRequest;
use gsched_state::rows::{Audience, JobDetail, job_row, node_rows, queue_row};
use gsched_types::api::{JobList, JobRow, JobSelector, NodeList, QueueRow, StatusRow};
use gsched_types::job::{JobId, JobRecord, JobState};
use std::ops::Bound;
use tonic::Status;

/// The most rows one `ListJobs` reply carries (the client asks for the next page).
const PAGE_ROWS: usize = 5_000;

impl JobsService {
    /// A page of full job rows for a verified caller (gRPC `ListJobs`, `GET /api/v1/jobs`).
    /// Everybody sees every job's summary (as squeue shows it); only the owner, operators
    /// and admins see its request and the evidence of its failure.
    pub async fn jobs_for(
        &self,
        caller: &Caller,
        req: &ListJobsRequest,
    ) -> Result<JobList<JobRow>, Status> {
        let detail = if req.detail {
            JobDetail::Full
        } else {
            JobDetail::Summary
        };
        let filter = JobFilter::from_request(req)?;
        // Archived jobs first (no lock held), then the replica's, merged by id.
        let archived = match self.archive_query(req, &filter) {
            Some((archive, q)) => Some(
                tokio::task::spawn_blocking(move || archive.archive.query(&q))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| Status::unavailable(e.to_string()))?,
            ),
            None => None,
        };
        let mut list = self
            .page(req, &filter, |state, estimates, j| {
                let audience = if caller.may_see_details_of(&j.spec.user) {
                    Audience::Owner
                } else {
                    Audience::Public
                };
                let row = job_row(state, j, estimates.get(&j.id).copied(), detail, audience);
                (row.job_id, row)
            })
            .await?;
        if let Some(page) = archived {
            let last = page.rows.last().map(|r| r.job_id);
            let mut rows = page.rows;
            {
                let r = self.ctx.raft.replica.read();
                rows.retain(|row| !r.state.jobs.contains_key(&row.job_id) && filter.keeps_row(row));
            }
            for row in &mut rows {
                if !caller.may_see_details_of(&row.user) {
                    row.redact_evidence();
                }
            }
            let limit = page_limit(req);
            merge_pages(&mut list, rows, page.more.then_some(last).flatten(), limit);
        }
        Ok(list)
    }

    /// The archive and the query for it, when `req` may select ended jobs.
    fn archive_query(
        &self,
        req: &ListJobsRequest,
        filter: &JobFilter,
    ) -> Option<(
        std::sync::Arc<crate::archiver::Archiver>,
        gsched_archive::Query,
    )> {
        let archive = self.ctx.archive.clone().filter(|_| req.archive)?;
        let wants_ended = if filter.states.is_empty() {
            filter.include_finished
        } else {
            filter.states.iter().any(|s| s.is_terminal())
        };
        if !wants_ended {
            return None;
        }
        let q = gsched_archive::Query {
            after: req.after,
            limit: page_limit(req),
            users: filter.users.clone(),
            states: filter.states.clone(),
            ids: filter.jobs.iter().map(|s| s.id).collect(),
            partition: filter.partition.clone(),
            since_ms: filter.window.0,
            until_ms: filter.window.1,
            detail: req.detail,
        };
        Some((archive, q))
    }

    /// A page of the queue table's rows (`gqueue`).
    pub async fn queue_for(
        &self,
        _caller: &Caller,
        req: &ListJobsRequest,
    ) -> Result<JobList<QueueRow>, Status> {
        self.page(
            req,
            &JobFilter::from_request(req)?,
            |state, estimates, j| (j.id, queue_row(state, j, estimates.get(&j.id).copied())),
        )
        .await
    }

    /// The jobs `req` selects, from `after` on, at most a page of them, each made a row by
    /// `row`.
    async fn page<R>(
        &self,
        req: &ListJobsRequest,
        filter: &JobFilter,
        row: impl Fn(
            &gsched_state::ClusterState,
            &std::collections::HashMap<JobId, u64>,
            &JobRecord,
        ) -> (JobId, R),
    ) -> Result<JobList<R>, Status> {
        if !req.stale_ok {
            self.ctx.read_barrier().await?;
        }
        self.ctx.refresh_estimates().await;
        let estimates = self.ctx.estimates.read();
        let r = self.ctx.raft.replica.read();
        let limit = page_limit(req);
        let mut matching = r
            .state
            .jobs
            .range((Bound::Excluded(JobId(req.after)), Bound::Unbounded))
            .map(|(_, j)| j)
            .filter(|j| filter.keeps(j, &r.state.config));
        let (ids, jobs): (Vec<JobId>, Vec<R>) = matching
            .by_ref()
            .take(limit)
            .map(|j| row(&r.state, &estimates, j))
            .unzip();
        let next_after = match (ids.last(), matching.next()) {
            (Some(last), Some(_)) => Some(*last),
            _ => None,
        };
        Ok(JobList {
            jobs,
            applied_index: r.applied,
            controller: self.ctx.cfg.id,
            role: self.ctx.raft.status.borrow().role,
            consistent: !req.stale_ok,
            now_ms: now_ms(),
            next_after,
        })
    }

    /// Every node (gRPC `ListNodes`, `GET /api/v1/nodes`): every caller may list nodes.
    pub async fn nodes(&self, detail: bool) -> Result<NodeList, Status> {
        self.ctx.read_barrier().await?;
        let r = self.ctx.raft.replica.read();
        let mut nodes = node_rows(&r.state, detail, gsched_proto::clock::now_ms());
        for n in &mut nodes {
            n.outside_jobs = self.ctx.hub.outside(&n.name);
        }
        let partitions = partition_rows(&r.state.config, &nodes);
        Ok(NodeList {
            nodes,
            applied_index: r.applied,
            consistent: true,
            now_ms: now_ms(),
            partitions,
        })
    }

    /// This controller's Raft role, indexes, peers and state digest (`gctl status`).
    pub fn status_row(&self) -> StatusRow {
        let (applied, digest, jobs, nodes) = {
            let r = self.ctx.raft.replica.read();
            // The digest hashes the whole state: compute it once per applied index.
            let mut cached = self.digest.lock();
            let digest = match cached.as_ref() {
                Some((at, d)) if *at == r.applied => d.clone(),
                _ => {
                    let d = r.state.digest();
                    *cached = Some((r.applied, d.clone()));
                    d
                }
            };
            (r.applied, digest, r.state.jobs.len(), r.state.nodes.len())
        };
        let s = self.ctx.raft.status.borrow().clone();
        let peers = self
            .ctx
            .book
            .read()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        StatusRow {
            id: s.id,
            address: self.ctx.cfg.advertise.clone(),
            role: s.role,
            term: s.term,
            leader_id: s.leader_id,
            leader_address: self.ctx.leader_address(),
            commit_index: s.commit_index,
            applied_index: applied,
            state_digest: digest,
            first_index: s.first_index,
            last_index: s.last_index,
            snapshot_index: s.snapshot_index,
            voters: s.voters,
            matched: s.matched,
            disk_bytes: s.disk_bytes,
            jobs: jobs as u64,
            nodes: nodes as u64,
            peers,
            agents_connected: self.ctx.hub.connected().len() as u64,
            fault_blocked_peers: self.ctx.faults.blocked(),
            lag: None,
            storage_fault: s.storage_fault,
        }
    }
}

/// The most rows a reply to `req` carries.
fn page_limit(req: &ListJobsRequest) -> usize {
    match req.limit as usize {
        0 => PAGE_ROWS,
        n => n.min(PAGE_ROWS),
    }
}

/// Merges archived rows (ids above the request's cursor, none of them in memory;
/// `archive_last` set when the archive has more after it) into the replica's page: the
/// page ends at the lower of the two sources' ends, so the next page misses none.
fn merge_pages(
    list: &mut JobList<JobRow>,
    archived: Vec<JobRow>,
    archive_last: Option<JobId>,
    limit: usize,
) {
    let bound = match (list.next_after, archive_last) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    list.jobs.extend(archived);
    list.jobs.sort_by_key(|j| j.job_id);
    if let Some(b) = bound {
        list.jobs.retain(|j| j.job_id <= b);
    }
    let mut next = bound;
    if list.jobs.len() > limit {
        list.jobs.truncate(limit);
        next = list.jobs.last().map(|j| j.job_id);
    }
    list.next_after = next;
}

/// Which jobs a `ListJobs` request asks for.
struct JobFilter {
    users: Vec<String>,
    states: Vec<JobState>,
    include_finished: bool,
    jobs: Vec<JobSelector>,
    partition: Option<String>,
    /// (since, until) in ms; 0 is open.
    window: (u64, u64),
}

impl JobFilter {
    fn from_request(req: &ListJobsRequest) -> Result<JobFilter, Status> {
        let states = req
            .states
            .iter()
            .map(|s| {
                JobState::parse(s).ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "invalid state '{s}': use PD, R, CG, CD, F, CA, TO, NF, OOM or their names"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let jobs = req
            .jobs
            .iter()
            .map(|j| JobSelector::parse(j).map_err(Status::invalid_argument))
            .collect::<Result<_, _>>()?;
        Ok(JobFilter {
            users: req.users.clone(),
            states,
            include_finished: req.include_finished,
            jobs,
            partition: (!req.partition.is_empty()).then(|| req.partition.clone()),
            window: (req.since_ms, req.until_ms),
        })
    }

    /// Everything `keeps` checks but the partition (which memory resolves from the
    /// configuration and archived rows carry).
    fn keeps_facts(
        &self,
        id: JobId,
        task: Option<(JobId, u32)>,
        state: JobState,
        user: &str,
        end_ms: Option<u64>,
        submit_ms: u64,
    ) -> bool {
        let state_ok = if self.states.is_empty() {
            self.include_finished || !state.is_terminal()
        } else {
            self.states.contains(&state)
        };
        state_ok
            && (self.users.is_empty() || self.users.iter().any(|u| u == user))
            && (self.jobs.is_empty() || self.jobs.iter().any(|s| s.matches_task(id, task)))
            && (self.window.0 == 0 || end_ms.is_none_or(|e| e >= self.window.0))
            && (self.window.1 == 0 || submit_ms <= self.window.1)
    }

    /// `keeps` for an archived row.
    fn keeps_row(&self, j: &JobRow) -> bool {
        self.keeps_facts(
            j.job_id,
            j.array_job_id.zip(j.array_task_id),
            j.state,
            &j.user,
            j.end_ms,
            j.submit_ms,
        ) && self.partition.as_ref().is_none_or(|p| *p == j.partition)
    }

    fn keeps(&self, j: &JobRecord, config: &gsched_scheduler::SchedConfig) -> bool {
        self.keeps_facts(
            j.id,
            j.array_task.map(|t| (t.array_job_id, t.task_id)),
            j.state,
            &j.spec.user,
            j.end_ms,
            j.submit_ms,
        ) && self
            .partition
            .as_ref()
            .is_none_or(|p| *p == config.partition_of(&j.spec))
    }
}

/// The configuration's partitions with their nodes (every node where a partition names
/// none; without partitions, the default one the scheduler uses, with every node).
fn partition_rows(
    config: &gsched_scheduler::SchedConfig,
    nodes: &[gsched_types::api::NodeRow],
) -> Vec<gsched_types::api::PartitionRow> {
    let all = || nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    let default = config.default_partition();
    if config.partitions.is_empty() {
        return vec![gsched_types::api::PartitionRow {
            name: default,
            default: true,
            nodes: all(),
            max_time_s: None,
            max_nodes: None,
        }];
    }
    config
        .partitions
        .iter()
        .map(|p| gsched_types::api::PartitionRow {
            name: p.name.clone(),
            default: p.name == default,
            nodes: match &p.nodes {
                None => all(),
                Some(list) => {
                    let members = gsched_types::hostlist::expand(list).unwrap_or_default();
                    all().into_iter().filter(|n| members.contains(n)).collect()
                }
            },
            max_time_s: p.max_time_s,
            max_nodes: p.max_nodes,
        })
        .collect()
}
