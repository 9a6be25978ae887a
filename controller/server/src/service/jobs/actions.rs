//! Acting on jobs that exist: cancel, requeue, hold and release one job or a selection,
//! change a job's time limit, signal running jobs.

use super::JobsService;
use crate::auth::Caller;
use gsched_state::validate;
use gsched_state::{ActOnJobs, CancelJob, Command, HoldJob, Outcome, RequeueJob, UpdateJob};
use gsched_types::agent::ControllerToAgent;
use gsched_types::api::{ActionSummary, JobActionRequest, SignalRequest, UpdateJobRequest};
use gsched_types::job::{JobId, JobState};
use tonic::Status;

impl JobsService {
    pub async fn cancel_as(
        &self,
        caller: &Caller,
        request_id: &str,
        job: JobId,
    ) -> Result<String, Status> {
        let cmd = |by, admin| Command::CancelJob(CancelJob { job, by, admin });
        self.on_job(caller, request_id, cmd, format!("job {job} cancelled"))
            .await
    }

    pub async fn requeue_as(
        &self,
        caller: &Caller,
        request_id: &str,
        job: JobId,
    ) -> Result<String, Status> {
        let cmd = |by, admin| Command::RequeueJob(RequeueJob { job, by, admin });
        self.on_job(caller, request_id, cmd, format!("job {job} requeued"))
            .await
    }

    pub async fn hold_as(
        &self,
        caller: &Caller,
        request_id: &str,
        job: JobId,
        hold: bool,
    ) -> Result<String, Status> {
        let cmd = |by, admin| {
            Command::HoldJob(HoldJob {
                job,
                by,
                admin,
                hold,
            })
        };
        let done = if hold { "held" } else { "released" };
        self.on_job(caller, request_id, cmd, format!("job {job} {done}"))
            .await
    }

    /// Proposes `command(caller's name, whether they act for others)` about one job; the
    /// state machine refuses it unless they own the job or act for others.
    async fn on_job(
        &self,
        caller: &Caller,
        request_id: &str,
        command: impl FnOnce(String, bool) -> Command,
        done: String,
    ) -> Result<String, Status> {
        let cmd = command(caller.user.clone(), caller.acts_for_others());
        self.propose_for(caller, request_id, cmd).await?;
        Ok(done)
    }

    /// Cancels, holds, releases or requeues the jobs a selection names, as one command.
    pub async fn act_on_jobs_as(
        &self,
        caller: &Caller,
        request_id: &str,
        body: JobActionRequest,
    ) -> Result<ActionSummary, Status> {
        let limits = self.ctx.raft.replica.read().state.config.limits.clone();
        validate::job_selection(&body.select, &limits)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let cmd = Command::ActOnJobs(ActOnJobs {
            action: body.action,
            select: body.select,
            by: caller.user.clone(),
            admin: caller.acts_for_others(),
        });
        match self.propose_for(caller, request_id, cmd).await? {
            Outcome::Acted(summary) => Ok(summary),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    /// Sets a job's time limit (`gctl update`, `scontrol update JobId=.. TimeLimit=..`).
    pub async fn update_job_as(
        &self,
        caller: &Caller,
        request_id: &str,
        body: UpdateJobRequest,
    ) -> Result<String, Status> {
        let cmd = Command::UpdateJob(UpdateJob {
            job: JobId(body.job),
            time_limit_s: body.time_limit_s,
            by: caller.user.clone(),
            admin: caller.acts_for_others(),
        });
        self.propose_for(caller, request_id, cmd).await?;
        let limit = match body.time_limit_s {
            Some(0) => "UNLIMITED".to_string(),
            Some(t) => gsched_types::parse::format_duration(t),
            None => "-".into(),
        };
        Ok(format!("job {} time limit set to {limit}", body.job))
    }

    /// Sends a signal to the running jobs a selection names, through their agents (the
    /// leader holds the sessions; nothing is replicated).
    pub async fn signal_jobs_as(
        &self,
        caller: &Caller,
        body: SignalRequest,
    ) -> Result<ActionSummary, Status> {
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
        self.ctx.read_barrier().await?;
        let (targets, mut errors) = {
            let r = self.ctx.raft.replica.read();
            validate::job_selection(&body.select, &r.state.config.limits)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let (selected, refused) = r.state.select_jobs(
                &body.select,
                &caller.user,
                caller.acts_for_others(),
                "signal",
            );
            let targets: Vec<(JobId, u32, Vec<String>)> = selected
                .iter()
                .filter_map(|id| r.state.jobs.get(id))
                .filter(|j| j.state == JobState::Running)
                .map(|j| (j.id, j.attempt, j.node_names()))
                .collect();
            (targets, refused)
        };
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
        Ok(ActionSummary {
            count: count as u64,
            errors,
        })
    }
}
