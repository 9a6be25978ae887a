//! The `Jobs` service: submit, cancel, requeue, hold, list jobs and nodes, drain and
//! resume nodes, membership, status. Every call is made by a caller the controller
//! verified (`crate::auth`); what a request says about its user is ignored. Writes are
//! accepted on any controller (raft-rs forwards proposals to the leader); reads answer
//! from this replica's applied state and say which index they reflect.

use crate::auth::Caller;
use crate::ctx::{Ctx, outcome_to_status};
use gsched_proto::agent::ControllerToAgent;
use gsched_proto::clock::now_ms;
use gsched_proto::pb::jobs_server::Jobs;
use gsched_proto::pb::{
    ActOnJobsRequest, ActionReply, DocReply, Empty, HoldRequest, JobRequest, JobView,
    ListJobsRequest, ListNodesRequest, MembershipRequest, NodeAdminRequest, SubmitReply,
    SubmitRequest,
};
use gsched_raft::Membership;
use gsched_scheduler::place::Placer;
use gsched_state::rows::{Audience, JobDetail, job_row, node_rows, queue_row};
use gsched_state::validate;
use gsched_state::view::{ViewCache, nodes_only, pending_view, snapshot};
use gsched_state::{
    ActOnJobs, CancelJob, ClusterState, Command, DrainNode, GrunStepEnded, GrunStepStarted,
    HoldJob, Outcome, RequeueJob, ResumeNode, SubmitJob, UpdateJob,
};
use gsched_types::api::{
    ActionSummary, CheckReply, JobActionRequest, JobList, JobSelector, NodeList, QueueRow,
    SignalRequest, StatusRow, UpdateJobRequest,
};
use gsched_types::job::{JobId, JobRecord, JobSpec, JobState};
use gsched_types::steps::{
    INPUT_CHUNK, InputEvent, StepInput, StepLaunch, StepRequest, StepState, StepUpdate, TaskIo,
};
use parking_lot::Mutex;
use serde::Serialize;
use std::ops::Bound;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct JobsService {
    pub ctx: Arc<Ctx>,
    /// Node views for admission checks, rebuilt only when a node re-registers.
    views: Mutex<ViewCache>,
    /// The state digest and the applied index it was computed at.
    digest: Mutex<Option<(u64, String)>>,
}

impl JobsService {
    pub fn new(ctx: Arc<Ctx>) -> JobsService {
        JobsService {
            ctx,
            views: Default::default(),
            digest: Default::default(),
        }
    }

    /// `ListJobs` for a verified caller (the gRPC method and `GET /api/v1/jobs`).
    /// Submits `req` for the verified `caller` (gRPC `Submit`, HTTP `POST /api/v1/jobs`).
    pub async fn submit_as(
        &self,
        caller: &Caller,
        req: SubmitRequest,
    ) -> Result<Response<SubmitReply>, Status> {
        let mut spec: JobSpec = json_body(&req.spec_json, "job spec")?;
        // Who the job runs as is decided here, from the verified caller.
        let (user, uid, gid) = self.ctx.auth.run_as(caller, spec.uid, &spec.user)?;
        (spec.user, spec.uid, spec.gid) = (user, Some(uid), Some(gid));
        if spec.nice < 0 && !caller.acts_for_others() {
            return Err(Status::permission_denied(
                "a negative --nice raises a job above others: only an operator may set it",
            ));
        }
        {
            let r = self.ctx.raft.replica.read();
            validate::job_spec(&spec, &r.state.config.limits).map_err(Status::invalid_argument)?;
            if let Some(done) = request_id(caller, "submit_job", &req.request_id)
                .and_then(|id| r.state.dedup_lookup(&id).cloned())
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
                .propose(
                    Command::SubmitJob(SubmitJob { spec }),
                    request_id(caller, "submit_job", &req.request_id),
                )
                .await?,
        ) {
            Ok(Outcome::Submitted { jobs }) => Ok(Response::new(SubmitReply {
                job_ids: jobs.iter().map(|j| j.0).collect(),
            })),
            Ok(other) => Err(Status::internal(format!("unexpected outcome {other:?}"))),
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                Err(Status::invalid_argument(s.message().to_string()))
            }
            Err(s) => Err(s),
        }
    }

    /// Drains or resumes a node for the verified `caller` (an admin).
    pub async fn node_admin_as(
        &self,
        caller: &Caller,
        req: NodeAdminRequest,
    ) -> Result<Response<ActionReply>, Status> {
        self.require_admin(
            caller,
            &format!("changing node {} ({})", req.node, req.action),
        )?;
        let user = caller.user.clone();
        let cmd = match req.action.as_str() {
            "drain" => {
                if req.reason.trim().is_empty() {
                    return Err(Status::invalid_argument(
                        "draining a node needs a reason (--reason)",
                    ));
                }
                Command::DrainNode(DrainNode {
                    node: req.node.clone(),
                    reason: req.reason,
                    by: user,
                })
            }
            "resume" => Command::ResumeNode(ResumeNode {
                node: req.node.clone(),
                by: user,
            }),
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown node action '{other}': use drain or resume"
                )));
            }
        };
        let id = request_id(caller, cmd.name(), &req.request_id);
        outcome_to_status(self.ctx.propose(cmd, id).await?)?;
        Ok(Response::new(ActionReply {
            message: format!("node {} {}", req.node, req.action),
        }))
    }

    /// Cancels, holds, releases or requeues the jobs a selection names, for `caller`.
    pub async fn act_on_jobs_as(
        &self,
        caller: &Caller,
        req: ActOnJobsRequest,
    ) -> Result<Response<DocReply>, Status> {
        let body: JobActionRequest = json_body(&req.json, "job action")?;
        let limits = self.ctx.raft.replica.read().state.config.limits.clone();
        validate::job_selection(&body.select, &limits).map_err(Status::invalid_argument)?;
        let cmd = Command::ActOnJobs(ActOnJobs {
            action: body.action,
            select: body.select,
            by: caller.user.clone(),
            admin: caller.acts_for_others(),
        });
        let id = request_id(caller, cmd.name(), &req.request_id);
        match outcome_to_status(self.ctx.propose(cmd, id).await?)? {
            Outcome::Acted(summary) => doc(&summary),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    pub async fn jobs_for(
        &self,
        caller: &Caller,
        req: ListJobsRequest,
    ) -> Result<Response<DocReply>, Status> {
        let filter = JobFilter::from_request(&req)?;
        let consistent = !req.stale_ok && self.ctx.read_barrier().await;
        let estimates = self.ctx.estimates.read();
        let r = self.ctx.raft.replica.read();
        let detail = if req.detail {
            JobDetail::Full
        } else {
            JobDetail::Summary
        };
        // Everybody sees every job's summary (as squeue shows it); only the owner,
        // operators and admins see its request and the evidence of its failure.
        let audience = |owner: &str| {
            if caller.may_see_details_of(owner) {
                Audience::Owner
            } else {
                Audience::Public
            }
        };
        let limit = match req.limit as usize {
            0 => PAGE_ROWS,
            n => n.min(PAGE_ROWS),
        };
        let mut matching = r
            .state
            .jobs
            .range((Bound::Excluded(JobId(req.after)), Bound::Unbounded))
            .map(|(_, j)| j)
            .filter(|j| filter.keeps(j, &r.state.config));
        let header = |next_after: Option<JobId>| JobList::<()> {
            jobs: Vec::new(),
            applied_index: r.applied,
            controller: self.ctx.cfg.id,
            role: self.ctx.raft.status.borrow().role,
            consistent,
            now_ms: now_ms(),
            next_after,
        };
        if req.view == JobView::Queue as i32 {
            let (ids, jobs): (Vec<JobId>, Vec<QueueRow>) = matching
                .by_ref()
                .take(limit)
                .map(|j| (j.id, queue_row(&r.state, j, estimates.get(&j.id).copied())))
                .unzip();
            let next_after = match (ids.last(), matching.next()) {
                (Some(last), Some(_)) => Some(*last),
                _ => None,
            };
            return page_reply(header(next_after), jobs);
        }
        let jobs: Vec<_> = matching
            .by_ref()
            .take(limit)
            .map(|j| {
                let audience = audience(&j.spec.user);
                job_row(&r.state, j, estimates.get(&j.id).copied(), detail, audience)
            })
            .collect();
        let next_after = match (jobs.last(), matching.next()) {
            (Some(last), Some(_)) => Some(last.job_id),
            _ => None,
        };
        page_reply(header(next_after), jobs)
    }

    /// `ListNodes` (the gRPC method and `GET /api/v1/nodes`): every caller may list nodes.
    pub async fn nodes(&self, detail: bool) -> Result<Response<DocReply>, Status> {
        let consistent = self.ctx.read_barrier().await;
        let r = self.ctx.raft.replica.read();
        doc(&NodeList {
            nodes: node_rows(&r.state, detail),
            applied_index: r.applied,
            consistent,
            now_ms: now_ms(),
        })
    }

    /// Proposes a command acting on a job for `caller` (the state machine refuses it
    /// unless they own the job or act for others), applied exactly once under
    /// `request_id`; refusals become gRPC errors.
    async fn act_on_job(
        &self,
        caller: &Caller,
        request_id_text: &str,
        command: impl FnOnce(String, bool) -> Command,
    ) -> Result<(), Status> {
        let cmd = command(caller.user.clone(), caller.acts_for_others());
        let id = request_id(caller, cmd.name(), request_id_text);
        outcome_to_status(self.ctx.propose(cmd, id).await?)?;
        Ok(())
    }

    /// Refuses a caller who is not an admin, naming the rule.
    fn require_admin(&self, caller: &Caller, what: &str) -> Result<(), Status> {
        if caller.is_admin() {
            return Ok(());
        }
        let mut admins = vec!["root".to_string(), "the controllers' own user".into()];
        admins.extend(
            self.ctx
                .auth
                .policy()
                .admins
                .iter()
                .filter(|a| *a != "root")
                .cloned(),
        );
        Err(Status::permission_denied(format!(
            "permission denied: {what} is for admins ({}); you are {}",
            admins.join(", "),
            caller.user
        )))
    }

    fn check_fits(&self, state: &ClusterState, spec: &JobSpec) -> Result<(), Status> {
        check_fits(state, spec, &mut self.views.lock()).map_err(Status::invalid_argument)
    }
}

/// One page of a job listing: `header`'s fields with `jobs` as the rows.
fn page_reply<R: Serialize>(
    header: JobList<()>,
    jobs: Vec<R>,
) -> Result<Response<DocReply>, Status> {
    doc(&JobList {
        jobs,
        applied_index: header.applied_index,
        controller: header.controller,
        role: header.role,
        consistent: header.consistent,
        now_ms: header.now_ms,
        next_after: header.next_after,
    })
}

fn doc<T: Serialize>(v: &T) -> Result<Response<DocReply>, Status> {
    let json = serde_json::to_vec(v)
        .map_err(|e| Status::internal(format!("cannot encode the reply: {e}")))?;
    Ok(Response::new(DocReply { json }))
}

/// The most rows one `ListJobs` reply carries (the client asks for the next page).
const PAGE_ROWS: usize = 5_000;

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

    fn keeps(&self, j: &JobRecord, config: &gsched_scheduler::SchedConfig) -> bool {
        let state_ok = if self.states.is_empty() {
            self.include_finished || !j.state.is_terminal()
        } else {
            self.states.contains(&j.state)
        };
        state_ok
            && (self.users.is_empty() || self.users.contains(&j.spec.user))
            && (self.jobs.is_empty() || self.jobs.iter().any(|s| s.matches(j.id, j.array_task)))
            && self
                .partition
                .as_ref()
                .is_none_or(|p| *p == config.partition_of(&j.spec))
            && (self.window.0 == 0 || j.end_ms.is_none_or(|e| e >= self.window.0))
            && (self.window.1 == 0 || j.submit_ms <= self.window.1)
    }
}

/// A not-yet-submitted job's record, released, for placement questions about its spec.
fn probe_record(spec: &JobSpec) -> JobRecord {
    let mut probe = spec.clone();
    probe.hold = false;
    JobRecord::new(JobId(0), probe, 0)
}

/// Would the job ever fit on the registered nodes (were they all idle)? Checked at
/// submit so impossible requests are refused with a reason instead of waiting forever.
/// With no node registered yet, everything is accepted.
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

fn reply(message: String) -> Response<ActionReply> {
    Response::new(ActionReply { message })
}

/// The key a client's request id is deduplicated under: scoped to the verified caller and
/// the command, so one user's id never answers another user's request, nor a request of
/// another kind.
fn request_id(caller: &Caller, command: &str, id: &str) -> Option<String> {
    (!id.is_empty()).then(|| format!("{}/{command}/{id}", caller.uid))
}

/// Decodes a request's JSON body; `malformed <what>: ...` as invalid-argument otherwise.
fn json_body<T: serde::de::DeserializeOwned>(json: &[u8], what: &str) -> Result<T, Status> {
    serde_json::from_slice(json)
        .map_err(|e| Status::invalid_argument(format!("malformed {what}: {e}")))
}

#[tonic::async_trait]
impl Jobs for JobsService {
    type RunStepStream = tokio_stream::wrappers::UnboundedReceiverStream<Result<DocReply, Status>>;

    async fn run_step(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<Self::RunStepStream>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let body: StepRequest = json_body(&req.into_inner().json, "step request")?;
        if body.argv.is_empty() || body.argv.iter().any(|a| a.contains('\0')) {
            return Err(Status::invalid_argument("grun: give a command to run"));
        }
        let env_bytes: usize = body.env.iter().map(|(k, v)| k.len() + v.len()).sum();
        let arg_bytes: usize = body.argv.iter().map(String::len).sum();
        if env_bytes + arg_bytes > 1 << 20 {
            return Err(Status::invalid_argument(
                "the step's command and environment are over 1 MiB",
            ));
        }
        if !self.ctx.raft.is_leader() {
            return Err(self.ctx.unavailable("steps go through the leader".into()));
        }
        self.ctx.read_barrier().await;
        let (attempt, layout, owner) = {
            let r = self.ctx.raft.replica.read();
            let job = r
                .state
                .jobs
                .get(&body.job)
                .ok_or_else(|| Status::not_found(format!("job {} does not exist", body.job)))?;
            if job.spec.user != caller.user && !caller.acts_for_others() {
                return Err(Status::permission_denied(format!(
                    "job {} belongs to {}: you may run steps only in your own jobs",
                    body.job, job.spec.user
                )));
            }
            if job.state != JobState::Running {
                return Err(Status::failed_precondition(format!(
                    "job {} is {}: steps run only in a running job",
                    body.job,
                    job.state.name()
                )));
            }
            let layout = body
                .layout(&job.node_names())
                .map_err(Status::invalid_argument)?;
            if body.pty.is_some() && layout.ntasks != 1 {
                return Err(Status::invalid_argument(format!(
                    "grun --pty runs one task in a terminal, not {} (drop -n/--ntasks-per-node or -N)",
                    layout.ntasks
                )));
            }
            (job.restarts, layout, job.spec.user.clone())
        };
        let (updates_tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
        let step = self
            .ctx
            .hub
            .open_step(body.job, updates_tx, &owner, &layout.nodes[0]);
        let name = body.argv[0]
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let recorded = self
            .ctx
            .propose(
                Command::GrunStepStarted(GrunStepStarted {
                    job: body.job,
                    attempt,
                    step,
                    name,
                    nodes: layout.nodes.clone(),
                    ntasks: layout.ntasks,
                }),
                None,
            )
            .await;
        match recorded.map(outcome_to_status) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) | Err(e) => {
                self.ctx.hub.close_step(body.job, step);
                return Err(e);
            }
        }
        let (client_tx, client_rx) = tokio::sync::mpsc::unbounded_channel();
        let send = |tx: &tokio::sync::mpsc::UnboundedSender<Result<DocReply, Status>>,
                    u: &StepUpdate| {
            let json = serde_json::to_vec(u).expect("a step update serialises");
            tx.send(Ok(DocReply { json })).is_ok()
        };
        for (i, node) in layout.nodes.iter().enumerate() {
            let launch = StepLaunch {
                job: body.job,
                attempt,
                step,
                node_index: i as u32,
                layout: layout.clone(),
                argv: body.argv.clone(),
                env: body.env.clone(),
                cwd: body.cwd.clone(),
                pty: body.pty,
            };
            if !self
                .ctx
                .hub
                .send(node, &ControllerToAgent::RunStep(Box::new(launch)))
            {
                self.ctx.hub.step_io(TaskIo::Failed {
                    job: body.job,
                    step,
                    node: node.clone(),
                    message: format!("the agent of {node} is not connected"),
                });
            }
        }
        // Told after the agents, so that input the caller sends on hearing it reaches
        // an agent that already has the step.
        send(
            &client_tx,
            &StepUpdate::Started {
                step,
                layout: layout.clone(),
            },
        );
        let ctx = self.ctx.clone();
        let (job, nodes, ntasks) = (body.job, layout.nodes.clone(), layout.ntasks);
        tokio::spawn(async move {
            // Ends when every task has exited; a node that cannot start its tasks, or a
            // caller that goes away, stops the rest (as srun aborts a step).
            let mut exited = 0;
            let (mut code, mut signal) = (0, None);
            let end = loop {
                tokio::select! {
                    u = updates.recv() => {
                        let Some(u) = u else { break StepState::Cancelled };
                        let failed = matches!(u, StepUpdate::Io(TaskIo::Failed { .. }));
                        if let StepUpdate::Io(TaskIo::Exited { code: c, signal: s, .. }) = &u {
                            exited += 1;
                            code = code.max(c.unwrap_or(0));
                            signal = signal.or(*s);
                        }
                        if !send(&client_tx, &u) {
                            break StepState::Cancelled;
                        }
                        if failed {
                            break StepState::Failed;
                        }
                        if exited >= ntasks {
                            break if code == 0 && signal.is_none() {
                                StepState::Completed
                            } else {
                                StepState::Failed
                            };
                        }
                    }
                    _ = client_tx.closed() => break StepState::Cancelled,
                }
            };
            ctx.hub.close_step(job, step);
            let stop = exited < ntasks;
            let _ = ctx
                .propose(
                    Command::GrunStepEnded(GrunStepEnded {
                        job,
                        step,
                        state: end,
                        exit_code: (exited > 0).then_some(code),
                        signal,
                    }),
                    None,
                )
                .await;
            if stop {
                for n in &nodes {
                    ctx.hub
                        .send(n, &ControllerToAgent::KillStep { job, attempt, step });
                }
            }
        });
        Ok(Response::new(
            tokio_stream::wrappers::UnboundedReceiverStream::new(client_rx),
        ))
    }

    async fn issue_token(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<DocReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let body: gsched_types::api::TokenRequest =
            json_body(&req.into_inner().json, "token request")?;
        if body.lifetime_s == 0 || body.lifetime_s > gsched_types::api::MAX_TOKEN_LIFETIME_S {
            return Err(Status::invalid_argument(format!(
                "a token lives from 1 s to {} s (a week)",
                gsched_types::api::MAX_TOKEN_LIFETIME_S
            )));
        }
        let now = gsched_proto::clock::now_ms();
        let expires_ms = now + body.lifetime_s * 1000;
        let reply = gsched_types::api::TokenReply {
            token: self.ctx.auth.issue_token(&caller, now, expires_ms),
            user: caller.user.clone(),
            expires_ms,
        };
        Ok(Response::new(DocReply {
            json: serde_json::to_vec(&reply).expect("a token reply serialises"),
        }))
    }

    async fn revoke_tokens(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<DocReply>, Status> {
        use gsched_types::api::{RevokeTokensReply, RevokeTokensRequest};
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let body: RevokeTokensRequest = json_body(&req.json, "token revocation")?;
        let user = match (&body.user, body.all) {
            (Some(_), true) => {
                return Err(Status::invalid_argument(
                    "name a user or ask for everyone's tokens (--all), not both",
                ));
            }
            (_, true) => None,
            (Some(u), false) => Some(u.clone()),
            (None, false) => Some(caller.user.clone()),
        };
        if user.as_deref() != Some(caller.user.as_str()) && !caller.is_admin() {
            return Err(Status::permission_denied(format!(
                "revoking {} tokens is for admins (you are {}); gctl token revoke alone revokes your own",
                user.as_deref()
                    .map_or("everyone's".to_string(), |u| format!("{u}'s")),
                caller.user
            )));
        }
        let uid = match &user {
            None => None,
            Some(u) if *u == caller.user => Some(caller.uid),
            Some(u) => Some(gsched_proto::peer::uid_of(u).ok_or_else(|| {
                Status::not_found(format!("no user {u} on this controller's host"))
            })?),
        };
        let cmd = Command::RevokeTokens(gsched_state::RevokeTokens { uid });
        let id = request_id(&caller, cmd.name(), &req.request_id);
        outcome_to_status(self.ctx.propose(cmd, id).await?)?;
        let revoked_before_ms = {
            let replica = self.ctx.raft.replica.read();
            match uid {
                Some(u) => replica.state.token_revocations.revoked_before(u),
                None => replica.state.token_revocations.all_before_ms,
            }
        };
        let reply = RevokeTokensReply {
            user,
            revoked_before_ms,
        };
        Ok(Response::new(DocReply {
            json: serde_json::to_vec(&reply).expect("a revocation reply serialises"),
        }))
    }

    async fn step_input(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let body: StepInput = json_body(&req.into_inner().json, "step input")?;
        if let InputEvent::Data { data } = &body.input
            && data.len() > INPUT_CHUNK * 4 / 3 + 4
        {
            return Err(Status::invalid_argument(format!(
                "step input comes in pieces of at most {INPUT_CHUNK} bytes"
            )));
        }
        let Some((owner, node)) = self.ctx.hub.step_target(body.job, body.step) else {
            return Err(if self.ctx.raft.is_leader() {
                Status::not_found(format!(
                    "step {}.{} is not running (it ended, or another controller started it)",
                    body.job, body.step
                ))
            } else {
                self.ctx.unavailable("steps go through the leader".into())
            });
        };
        if owner != caller.user && !caller.acts_for_others() {
            return Err(Status::permission_denied(format!(
                "step {}.{} belongs to {owner}: only its owner may send it input",
                body.job, body.step
            )));
        }
        let msg = ControllerToAgent::StepInput {
            job: body.job,
            step: body.step,
            input: body.input,
        };
        if !self.ctx.hub.send(&node, &msg) {
            return Err(Status::unavailable(format!(
                "the agent of {node} is not connected"
            )));
        }
        Ok(Response::new(ActionReply {
            message: String::new(),
        }))
    }

    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        self.submit_as(&caller, req.into_inner()).await
    }

    async fn cancel(&self, req: Request<JobRequest>) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let job = JobId(req.job_id);
        self.act_on_job(&caller, &req.request_id, |by, admin| {
            Command::CancelJob(CancelJob { job, by, admin })
        })
        .await?;
        Ok(reply(format!("job {job} cancelled")))
    }

    async fn requeue(&self, req: Request<JobRequest>) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let job = JobId(req.job_id);
        self.act_on_job(&caller, &req.request_id, |by, admin| {
            Command::RequeueJob(RequeueJob { job, by, admin })
        })
        .await?;
        Ok(reply(format!("job {job} requeued")))
    }

    async fn hold(&self, req: Request<HoldRequest>) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let (job, hold) = (JobId(req.job_id), req.hold);
        self.act_on_job(&caller, &req.request_id, |by, admin| {
            Command::HoldJob(HoldJob {
                job,
                by,
                admin,
                hold,
            })
        })
        .await?;
        Ok(reply(format!(
            "job {job} {}",
            if hold { "held" } else { "released" }
        )))
    }

    async fn list_jobs(&self, req: Request<ListJobsRequest>) -> Result<Response<DocReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        self.jobs_for(&caller, req.into_inner()).await
    }

    async fn list_nodes(
        &self,
        req: Request<ListNodesRequest>,
    ) -> Result<Response<DocReply>, Status> {
        self.ctx.auth.caller(&req)?;
        self.nodes(req.into_inner().detail).await
    }

    async fn node_admin(
        &self,
        req: Request<NodeAdminRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        self.node_admin_as(&caller, req.into_inner()).await
    }

    async fn status(&self, req: Request<Empty>) -> Result<Response<DocReply>, Status> {
        self.ctx.auth.caller(&req)?;
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
        doc(&StatusRow {
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
        })
    }

    async fn membership(
        &self,
        req: Request<MembershipRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        self.require_admin(&caller, "changing the controller membership")?;
        let change = match req.action.as_str() {
            "add" => {
                if !req.address.contains(':') {
                    return Err(Status::invalid_argument(
                        "a controller address is HOST:PORT",
                    ));
                }
                if !self.ctx.raft.is_leader() {
                    return Err(self
                        .ctx
                        .unavailable("membership changes go to the leader".into()));
                }
                crate::membership::verify_new_member(&self.ctx, req.id, &req.address).await?;
                self.ctx.book.write().insert(req.id, req.address.clone());
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

    async fn act_on_jobs(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<DocReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        self.act_on_jobs_as(&caller, req.into_inner()).await
    }

    async fn update_job(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<ActionReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let body: UpdateJobRequest = json_body(&req.json, "update")?;
        let cmd = Command::UpdateJob(UpdateJob {
            job: JobId(body.job),
            time_limit_s: body.time_limit_s,
            by: caller.user.clone(),
            admin: caller.acts_for_others(),
        });
        let id = request_id(&caller, cmd.name(), &req.request_id);
        outcome_to_status(self.ctx.propose(cmd, id).await?)?;
        let limit = match body.time_limit_s {
            Some(0) => "UNLIMITED".to_string(),
            Some(t) => gsched_types::parse::format_duration(t),
            None => "-".into(),
        };
        Ok(Response::new(ActionReply {
            message: format!("job {} time limit set to {limit}", body.job),
        }))
    }

    async fn signal_jobs(
        &self,
        req: Request<ActOnJobsRequest>,
    ) -> Result<Response<DocReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let body: SignalRequest = json_body(&req.into_inner().json, "signal request")?;
        if !(1..=64).contains(&body.signal) {
            return Err(Status::invalid_argument(format!(
                "{} is not a signal number (1-64)",
                body.signal
            )));
        }
        if body.select.is_empty() {
            return Err(Status::invalid_argument(
                "nothing to signal: name jobs, a user, states, a partition, a job name or nodes",
            ));
        }
        if !self.ctx.raft.is_leader() {
            return Err(self.ctx.unavailable("signals go through the leader".into()));
        }
        // Up to date with every write acknowledged before this call.
        self.ctx.read_barrier().await;
        let targets: Vec<(JobId, u32, Vec<String>)>;
        let mut errors;
        {
            let r = self.ctx.raft.replica.read();
            validate::job_selection(&body.select, &r.state.config.limits)
                .map_err(Status::invalid_argument)?;
            let (selected, refused) = r.state.select_jobs(
                &body.select,
                &caller.user,
                caller.acts_for_others(),
                "signal",
            );
            errors = refused;
            targets = selected
                .iter()
                .filter_map(|id| r.state.jobs.get(id))
                .filter(|j| j.state == JobState::Running)
                .map(|j| (j.id, j.restarts, j.node_names()))
                .collect();
        }
        let mut count = 0;
        for (job, attempt, nodes) in &targets {
            let msg = ControllerToAgent::Signal {
                job: *job,
                attempt: *attempt,
                signal: body.signal,
                batch_only: body.batch_only,
            };
            let reached = nodes.iter().filter(|n| self.ctx.hub.send(n, &msg)).count();
            if reached == nodes.len() {
                count += 1;
            } else {
                errors.push(format!(
                    "job {job}: {} of its {} node(s) are not connected; the signal did not reach them",
                    nodes.len() - reached,
                    nodes.len()
                ));
            }
        }
        if count == 0 && errors.is_empty() {
            return Err(Status::failed_precondition(
                "nothing to signal: no running job matched",
            ));
        }
        errors.truncate(20);
        doc(&ActionSummary {
            count: count as u64,
            errors,
        })
    }

    async fn check(&self, req: Request<SubmitRequest>) -> Result<Response<DocReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let mut spec: JobSpec = json_body(&req.into_inner().spec_json, "job spec")?;
        let (user, uid, gid) = self.ctx.auth.run_as(&caller, spec.uid, &spec.user)?;
        (spec.user, spec.uid, spec.gid) = (user, Some(uid), Some(gid));
        let r = self.ctx.raft.replica.read();
        validate::job_spec(&spec, &r.state.config.limits).map_err(Status::invalid_argument)?;
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
        // And into the queue as it is now, behind (or before) the jobs already there.
        let mut live = snapshot(&r.state, &mut ViewCache::default());
        live.pending.push(pending_view(&record, &r.state));
        let now = now_ms();
        let lp = gsched_scheduler::plan(&live, now);
        let start_now = lp.starts.iter().find(|s| s.job == record.id);
        let expected_start_ms = match start_now {
            Some(_) => Some(now),
            None => lp
                .estimates
                .iter()
                .find(|(j, _)| *j == record.id)
                .map(|(_, t)| *t),
        };
        let reason_now = lp
            .reasons
            .iter()
            .find(|(j, _)| *j == record.id)
            .map(|(_, r)| r.to_string());
        let topologies = allocation
            .iter()
            .flat_map(|a| a.nodes.iter())
            .filter_map(|na| {
                r.state
                    .nodes
                    .get(&na.node)
                    .map(|n| (na.node.clone(), n.topology.clone()))
            })
            .collect();
        doc(&CheckReply {
            fits: true,
            message: format!("fits the {} registered node(s)", r.state.nodes.len()),
            allocation_if_idle: allocation,
            reason_if_not_idle: p.reasons.first().map(|(_, r)| r.to_string()),
            topologies,
            expected_start_ms,
            allocation_now: start_now.map(|s| s.allocation.clone()),
            reason_now,
        })
    }
}
