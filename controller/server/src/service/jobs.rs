//! The `Jobs` service: submit, cancel, requeue, hold, list jobs and nodes, drain and
//! resume nodes, membership, status. Writes are accepted on any controller (raft-rs
//! forwards proposals to the leader); reads answer from this replica's applied state and
//! say which index they reflect.

use crate::config::now_ms;
use crate::ctx::{Ctx, outcome_to_status};
use gsched_proto::pb::jobs_server::Jobs;
use gsched_proto::pb::{
    ActionReply, DocReply, Empty, HoldRequest, JobRequest, ListJobsRequest, MembershipRequest,
    NodeAdminRequest, SubmitReply, SubmitRequest,
};
use gsched_raft::Membership;
use gsched_scheduler::place::Placer;
use gsched_state::view::{ViewCache, nodes_only, pending_view, snapshot};
use gsched_state::{ClusterState, Command, Outcome};
use gsched_types::job::{JobId, JobRecord, JobSpec, JobState};
use serde_json::json;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct JobsService {
    pub ctx: Arc<Ctx>,
    /// Node views for admission checks, rebuilt only when a node re-registers.
    views: std::sync::Mutex<ViewCache>,
    /// The state digest and the applied index it was computed at.
    digest: std::sync::Mutex<Option<(u64, String)>>,
}

impl JobsService {
    pub fn new(ctx: Arc<Ctx>) -> JobsService {
        JobsService {
            ctx,
            views: Default::default(),
            digest: Default::default(),
        }
    }

    /// Proposes a command acting on a job for `user` (who may be an admin), retried
    /// exactly once under `request_id`; refusals become gRPC errors.
    async fn act_on_job(
        &self,
        user: &str,
        request_id_text: &str,
        command: impl FnOnce(String, bool) -> Command,
    ) -> Result<(), Status> {
        let user = user_of(user)?;
        let admin = self.ctx.is_admin(&user);
        outcome_to_status(
            self.ctx
                .propose(command(user, admin), request_id(request_id_text))
                .await?,
        )?;
        Ok(())
    }

    fn check_fits(&self, state: &ClusterState, spec: &JobSpec) -> Result<(), Status> {
        let mut cache = self
            .views
            .lock()
            .map_err(|_| Status::internal("view cache poisoned"))?;
        check_fits(state, spec, &mut cache).map_err(Status::invalid_argument)
    }
}

fn doc(v: serde_json::Value) -> Response<DocReply> {
    Response::new(DocReply {
        json: serde_json::to_vec(&v).unwrap_or_default(),
    })
}

/// Checks a spec for values no controller state could make valid.
pub fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    if spec.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    if spec.ntasks_per_node == 0 || spec.ntasks == 0 {
        return Err("--ntasks must be at least 1".into());
    }
    if spec.cpus_per_task == 0 {
        return Err("--cpus-per-task must be at least 1".into());
    }
    if spec.gpus_per_node > 64 {
        return Err(format!(
            "{} GPUs per node is more than any node can have",
            spec.gpus_per_node
        ));
    }
    if spec.user.is_empty() {
        return Err("the job has no user".into());
    }
    if !spec.workdir.starts_with('/') {
        return Err(format!(
            "working directory '{}' must be absolute",
            spec.workdir
        ));
    }
    if spec.script.is_empty() && spec.torchrun.is_none() {
        return Err("the batch script is empty".into());
    }
    Ok(())
}

/// Would the job ever fit on the registered nodes? Checked at submit so impossible
/// requests are refused with a reason instead of waiting forever.
fn probe_record(spec: &JobSpec) -> JobRecord {
    let mut probe = spec.clone();
    probe.hold = false;
    JobRecord::new(JobId(0), probe, 0)
}

pub fn check_fits(
    state: &ClusterState,
    spec: &JobSpec,
    cache: &mut ViewCache,
) -> Result<(), String> {
    if state.nodes.is_empty() {
        return Ok(());
    }
    let record = probe_record(spec);
    let view = pending_view(&record, state);
    let snap = nodes_only(state, cache);
    let mut placer = Placer::new(&snap);
    placer
        .check_ever_fits(&view)
        .map_err(|why| format!("this job can never run here: {why}"))
}

/// A job record for clients: without the script text and inherited environment.
fn public(job: &JobRecord) -> JobRecord {
    let mut j = job.clone();
    j.spec.script.clear();
    j.spec.env.clear();
    j
}

fn reply(message: String) -> Response<ActionReply> {
    Response::new(ActionReply { message })
}

fn user_of(user: &str) -> Result<String, Status> {
    if user.is_empty() {
        Err(Status::invalid_argument("the request names no user"))
    } else {
        Ok(user.to_string())
    }
}

fn request_id(id: &str) -> Option<String> {
    (!id.is_empty()).then(|| id.to_string())
}

#[tonic::async_trait]
impl Jobs for JobsService {
    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        let req = req.into_inner();
        let spec: JobSpec = serde_json::from_slice(&req.spec_json)
            .map_err(|e| Status::invalid_argument(format!("malformed job spec: {e}")))?;
        validate_spec(&spec).map_err(Status::invalid_argument)?;
        {
            let r = self
                .ctx
                .raft
                .replica
                .read()
                .map_err(|_| Status::internal("state lock poisoned"))?;
            if let Some(done) =
                request_id(&req.request_id).and_then(|id| r.state.dedup_lookup(&id).cloned())
                && let Outcome::Submitted { jobs } = done
            {
                return Ok(Response::new(SubmitReply {
                    job_ids: jobs.iter().map(|j| j.0).collect(),
                }));
            }
            self.check_fits(&r.state, &spec)?;
        }
        match outcome_to_status(
            self.ctx
                .propose(Command::SubmitJob { spec }, request_id(&req.request_id))
                .await?,
        ) {
            Ok(Outcome::Submitted { jobs }) => Ok(Response::new(SubmitReply {
                job_ids: jobs.iter().map(|j| j.0).collect(),
            })),
            Ok(other) => Err(Status::internal(format!("unexpected outcome {other:?}"))),
            Err(s) => Err(Status::invalid_argument(s.message().to_string())),
        }
    }

    async fn cancel(&self, req: Request<JobRequest>) -> Result<Response<ActionReply>, Status> {
        let req = req.into_inner();
        let job = JobId(req.job_id);
        self.act_on_job(&req.user, &req.request_id, |by, admin| Command::CancelJob {
            job,
            by,
            admin,
        })
        .await?;
        Ok(reply(format!("job {job} cancelled")))
    }

    async fn requeue(&self, req: Request<JobRequest>) -> Result<Response<ActionReply>, Status> {
        let req = req.into_inner();
        let job = JobId(req.job_id);
        self.act_on_job(&req.user, &req.request_id, |by, admin| {
            Command::RequeueJob { job, by, admin }
        })
        .await?;
        Ok(reply(format!("job {job} requeued")))
    }

    async fn hold(&self, req: Request<HoldRequest>) -> Result<Response<ActionReply>, Status> {
        let req = req.into_inner();
        let (job, hold) = (JobId(req.job_id), req.hold);
        self.act_on_job(&req.user, &req.request_id, |by, admin| Command::HoldJob {
            job,
            by,
            admin,
            hold,
        })
        .await?;
        Ok(reply(format!(
            "job {job} {}",
            if hold { "held" } else { "released" }
        )))
    }

    async fn list_jobs(&self, req: Request<ListJobsRequest>) -> Result<Response<DocReply>, Status> {
        let all = req.into_inner().include_finished;
        let consistent = self.ctx.read_barrier().await;
        let r = self
            .ctx
            .raft
            .replica
            .read()
            .map_err(|_| Status::internal("state lock poisoned"))?;
        let jobs: Vec<JobRecord> = r
            .state
            .jobs
            .values()
            .filter(|j| all || !j.state.is_terminal())
            .map(public)
            .collect();
        let estimates = self
            .ctx
            .estimates
            .read()
            .map(|e| {
                e.iter()
                    .map(|(k, v)| (k.0.to_string(), *v))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .unwrap_or_default();
        let status = self.ctx.raft.status.borrow().clone();
        Ok(doc(json!({
            "jobs": jobs,
            "estimates": estimates,
            "applied_index": r.applied,
            "controller": self.ctx.cfg.id,
            "role": status.role,
            "consistent": consistent,
            "now_ms": now_ms(),
        })))
    }

    async fn list_nodes(&self, _req: Request<Empty>) -> Result<Response<DocReply>, Status> {
        let consistent = self.ctx.read_barrier().await;
        let r = self
            .ctx
            .raft
            .replica
            .read()
            .map_err(|_| Status::internal("state lock poisoned"))?;
        let nodes: Vec<serde_json::Value> = r
            .state
            .nodes
            .values()
            .map(|n| {
                let usage = r.state.usage_of(&n.name);
                let jobs: Vec<u64> = r
                    .state
                    .jobs
                    .values()
                    .filter(|j| {
                        matches!(j.state, JobState::Running | JobState::Completing)
                            && j.allocation
                                .as_ref()
                                .is_some_and(|a| a.nodes.iter().any(|x| x.node == n.name))
                    })
                    .map(|j| j.id.0)
                    .collect();
                json!({
                    "record": n,
                    "gpus_used": usage.gpus.iter().collect::<Vec<u32>>(),
                    "cpus_used": usage.cpus.len(),
                    "mem_used_mb": usage.mem_mb,
                    "jobs": jobs,
                    "capacity": ClusterState::capacity_of(n),
                })
            })
            .collect();
        Ok(doc(
            json!({ "nodes": nodes, "applied_index": r.applied, "consistent": consistent, "now_ms": now_ms() }),
        ))
    }

    async fn node_admin(
        &self,
        req: Request<NodeAdminRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let req = req.into_inner();
        let user = user_of(&req.user)?;
        if !self.ctx.is_admin(&user) {
            return Err(Status::permission_denied(format!(
                "{user} is not an admin; node changes need one of: {}",
                self.ctx.cfg.admins.join(", ")
            )));
        }
        let cmd = match req.action.as_str() {
            "drain" => {
                if req.reason.trim().is_empty() {
                    return Err(Status::invalid_argument(
                        "draining a node needs a reason (--reason)",
                    ));
                }
                Command::DrainNode {
                    node: req.node.clone(),
                    reason: req.reason,
                    by: user,
                }
            }
            "resume" => Command::ResumeNode {
                node: req.node.clone(),
                by: user,
            },
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown node action '{other}': use drain or resume"
                )));
            }
        };
        outcome_to_status(self.ctx.propose(cmd, request_id(&req.request_id)).await?)?;
        Ok(Response::new(ActionReply {
            message: format!("node {} {}", req.node, req.action),
        }))
    }

    async fn status(&self, _req: Request<Empty>) -> Result<Response<DocReply>, Status> {
        let (applied, digest, jobs, nodes) = {
            let r = self
                .ctx
                .raft
                .replica
                .read()
                .map_err(|_| Status::internal("state lock poisoned"))?;
            // The digest hashes the whole state: compute it once per applied index.
            let mut cached = self
                .digest
                .lock()
                .map_err(|_| Status::internal("digest cache poisoned"))?;
            if cached.as_ref().is_none_or(|(at, _)| *at != r.applied) {
                *cached = Some((r.applied, r.state.digest()));
            }
            let digest = cached.as_ref().map(|(_, d)| d.clone()).unwrap_or_default();
            (r.applied, digest, r.state.jobs.len(), r.state.nodes.len())
        };
        let s = self.ctx.raft.status.borrow().clone();
        let book: std::collections::BTreeMap<u64, String> = self
            .ctx
            .book
            .read()
            .map(|b| b.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        Ok(doc(json!({
            "id": s.id,
            "address": self.ctx.cfg.advertise,
            "role": s.role,
            "term": s.term,
            "leader_id": s.leader_id,
            "leader_address": self.ctx.leader_address(),
            "commit_index": s.commit_index,
            "applied_index": applied,
            "state_digest": digest,
            "first_index": s.first_index,
            "last_index": s.last_index,
            "snapshot_index": s.snapshot_index,
            "voters": s.voters,
            "matched": s.matched,
            "disk_bytes": s.disk_bytes,
            "jobs": jobs,
            "nodes": nodes,
            "peers": book,
            "agents_connected": self.ctx.hub.connected().len(),
            "fault_blocked_peers": self.ctx.faults.blocked(),
        })))
    }

    async fn membership(
        &self,
        req: Request<MembershipRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let req = req.into_inner();
        let change = match req.action.as_str() {
            "add" => {
                if !req.address.contains(':') {
                    return Err(Status::invalid_argument(
                        "a controller address is HOST:PORT",
                    ));
                }
                if let Ok(mut b) = self.ctx.book.write() {
                    b.insert(req.id, req.address.clone());
                }
                Membership::Add {
                    id: req.id,
                    address: req.address.clone(),
                }
            }
            "remove" => Membership::Remove { id: req.id },
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown membership action '{other}': use add or remove"
                )));
            }
        };
        if !self.ctx.raft.is_leader() {
            return Err(self
                .ctx
                .unavailable("membership changes go to the leader".into()));
        }
        self.ctx
            .raft
            .change_membership(change)
            .await
            .map_err(|e| self.ctx.propose_error(e))?;
        Ok(Response::new(ActionReply {
            message: format!(
                "controller {} {}",
                req.id,
                if req.action == "add" {
                    "added"
                } else {
                    "removed"
                }
            ),
        }))
    }

    async fn check(&self, req: Request<SubmitRequest>) -> Result<Response<DocReply>, Status> {
        let spec: JobSpec = serde_json::from_slice(&req.into_inner().spec_json)
            .map_err(|e| Status::invalid_argument(format!("malformed job spec: {e}")))?;
        validate_spec(&spec).map_err(Status::invalid_argument)?;
        let r = self
            .ctx
            .raft
            .replica
            .read()
            .map_err(|_| Status::internal("state lock poisoned"))?;
        self.check_fits(&r.state, &spec)?;
        // Where the job would go on an idle cluster (for `gsub --dry-run`).
        let mut record = probe_record(&spec);
        record.id = JobId(u64::MAX);
        let mut snap = snapshot(&r.state, &mut ViewCache::default());
        for n in &mut snap.nodes {
            n.usage = Default::default();
        }
        snap.running.clear();
        snap.pending = vec![pending_view(&record, &r.state)];
        let p = gsched_scheduler::plan(&snap, now_ms());
        let allocation = p.starts.first().map(|s| s.allocation.clone());
        let topologies: std::collections::BTreeMap<String, gsched_types::Topology> = allocation
            .iter()
            .flat_map(|a| a.nodes.iter())
            .filter_map(|na| {
                r.state
                    .nodes
                    .get(&na.node)
                    .map(|n| (na.node.clone(), n.topology.clone()))
            })
            .collect();
        let reason = p.reasons.first().map(|(_, r)| r.to_string());
        Ok(doc(json!({
            "fits": true,
            "message": format!("fits the {} registered node(s)", r.state.nodes.len()),
            "allocation_if_idle": allocation,
            "reason_if_not_idle": reason,
            "topologies": topologies,
        })))
    }
}
