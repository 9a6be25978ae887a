//! The `Jobs` service: what users and admins call. Every call is made by a caller the
//! controller verified (`crate::auth`); no request says who its user is. Writes are
//! accepted on any controller (raft-rs forwards proposals to the leader); reads answer
//! from this replica's applied state after a read barrier. This file only takes each
//! method's document out of its request and puts the answer into its reply; the work is
//! in [`submit`], [`reads`], [`reports`], [`reservations`], [`associations`], [`actions`], [`steps`] and [`admin`], on documents, so the
//! REST API calls the same functions.

mod actions;
mod admin;
mod associations;

pub use admin::NodeAction;
mod reads;
mod reports;
pub mod reservations;
mod steps;
mod submit;

use crate::auth::Caller;
use crate::ctx::{Ctx, outcome_to_status};
use gsched_proto::contract::Carries;
use gsched_proto::pb::jobs_server::Jobs;
use gsched_proto::pb::{self, JobView};
use gsched_state::Command;
use gsched_state::view::ViewCache;
use parking_lot::Mutex;
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

    /// Proposes a command for `caller` (the state machine refuses what they may not do),
    /// applied exactly once under `request_id`; refusals become gRPC errors.
    async fn propose_for(
        &self,
        caller: &Caller,
        request_id_text: &str,
        cmd: Command,
    ) -> Result<gsched_state::Outcome, Status> {
        let id = request_id(caller, cmd.name(), request_id_text);
        outcome_to_status(self.ctx.propose(cmd, id).await?)
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
}

/// The key a client's request id is deduplicated under: scoped to the verified caller and
/// the command, so one user's id never answers another user's request, nor a request of
/// another kind.
fn request_id(caller: &Caller, command: &str, id: &str) -> Option<String> {
    (!id.is_empty()).then(|| format!("{}/{command}/{id}", caller.uid))
}

/// The verified caller and the document a request carries.
fn caller_and<M: Carries>(ctx: &Ctx, req: Request<M>) -> Result<(Caller, M::Document, M), Status> {
    let caller = ctx.auth.caller(&req)?;
    let msg = req.into_inner();
    let doc = msg.document()?;
    Ok((caller, doc, msg))
}

fn carry<M: Carries>(doc: &M::Document) -> Response<M> {
    Response::new(M::carrying(doc))
}

#[tonic::async_trait]
impl Jobs for JobsService {
    type RunStepStream = steps::StepStream;

    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        let (caller, spec, msg) = caller_and(&self.ctx, req)?;
        let jobs = self.submit_as(&caller, &msg.request_id, spec).await?;
        Ok(Response::new(pb::SubmitReply {
            job_ids: jobs.iter().map(|j| j.0).collect(),
        }))
    }

    async fn check(
        &self,
        req: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckReply>, Status> {
        let (caller, spec, _) = caller_and(&self.ctx, req)?;
        Ok(carry(&self.check_as(&caller, spec)?))
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let reply = if req.view == JobView::Queue as i32 {
            pb::ListJobsReply::queue(&self.queue_for(&caller, &req).await?)
        } else {
            pb::ListJobsReply::rows(&self.jobs_for(&caller, &req).await?)
        };
        Ok(Response::new(reply))
    }

    async fn list_nodes(
        &self,
        req: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesReply>, Status> {
        self.ctx.auth.caller(&req)?;
        Ok(carry(&self.nodes(req.into_inner().detail).await?))
    }

    async fn node_admin(
        &self,
        req: Request<pb::NodeAdminRequest>,
    ) -> Result<Response<pb::NodeAdminReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let req = req.into_inner();
        let action = admin::NodeAction::from_wire(req.action)?;
        let message = self
            .node_admin_as(&caller, &req.request_id, &req.node, action, req.reason)
            .await?;
        Ok(Response::new(pb::NodeAdminReply { message }))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        self.ctx.auth.caller(&req)?;
        Ok(carry(&self.status_row()))
    }

    async fn membership(
        &self,
        req: Request<pb::MembershipRequest>,
    ) -> Result<Response<pb::MembershipReply>, Status> {
        let caller = self.ctx.auth.caller(&req)?;
        let message = self.membership_as(&caller, req.into_inner()).await?;
        Ok(Response::new(pb::MembershipReply { message }))
    }

    async fn act_on_jobs(
        &self,
        req: Request<pb::ActOnJobsRequest>,
    ) -> Result<Response<pb::ActOnJobsReply>, Status> {
        let (caller, body, msg) = caller_and(&self.ctx, req)?;
        Ok(carry(
            &self.act_on_jobs_as(&caller, &msg.request_id, body).await?,
        ))
    }

    async fn run_step(
        &self,
        req: Request<pb::RunStepRequest>,
    ) -> Result<Response<Self::RunStepStream>, Status> {
        let (caller, body, _) = caller_and(&self.ctx, req)?;
        Ok(Response::new(self.run_step_as(&caller, body).await?))
    }

    async fn step_input(
        &self,
        req: Request<pb::StepInputRequest>,
    ) -> Result<Response<pb::StepInputReply>, Status> {
        let (caller, body, _) = caller_and(&self.ctx, req)?;
        self.step_input_as(&caller, body)?;
        Ok(Response::new(pb::StepInputReply {}))
    }

    async fn issue_token(
        &self,
        req: Request<pb::IssueTokenRequest>,
    ) -> Result<Response<pb::IssueTokenReply>, Status> {
        let (caller, body, _) = caller_and(&self.ctx, req)?;
        Ok(carry(&self.issue_token_as(&caller, body)?))
    }

    async fn revoke_tokens(
        &self,
        req: Request<pb::RevokeTokensRequest>,
    ) -> Result<Response<pb::RevokeTokensReply>, Status> {
        let (caller, body, msg) = caller_and(&self.ctx, req)?;
        Ok(carry(
            &self
                .revoke_tokens_as(&caller, &msg.request_id, body)
                .await?,
        ))
    }

    async fn report(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportReply>, Status> {
        let (_caller, body, _) = caller_and(&self.ctx, req)?;
        Ok(carry(&self.report_for(body).await?))
    }

    async fn reservations(
        &self,
        req: Request<pb::ReservationsRequest>,
    ) -> Result<Response<pb::ReservationsReply>, Status> {
        let (caller, body, msg) = caller_and(&self.ctx, req)?;
        Ok(carry(
            &self.reservations_as(&caller, &msg.request_id, body).await?,
        ))
    }

    async fn associations(
        &self,
        req: Request<pb::AssociationsRequest>,
    ) -> Result<Response<pb::AssociationsReply>, Status> {
        let (caller, body, msg) = caller_and(&self.ctx, req)?;
        Ok(carry(
            &self.associations_as(&caller, &msg.request_id, body).await?,
        ))
    }
}
