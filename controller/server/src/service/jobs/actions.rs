//! Acting on jobs that exist: one path for every cancel, hold, release, requeue, update
//! and signal (`ActOnJobs`, and the REST API's `jobs/actions` and `jobs/ID/ACTION`), under
//! the state machine's one set of rules (`gsched_state::machine::actions`). What changes
//! state is one replicated command; a signal is decided by the same rules on the leader's
//! replica and sent to the jobs' agents.

use super::JobsService;
use crate::auth::Caller;
use gsched_state::{ActOnJobs, ClusterState, Command, Outcome};
use gsched_types::agent::ControllerToAgent;
use gsched_types::api::{ActionSummary, JobAction, JobActionRequest};
use gsched_types::job::JobId;
use tonic::Status;

impl JobsService {
    /// Applies `body.action` to the jobs `body.select` names, for `caller`.
    pub async fn act_on_jobs_as(
        &self,
        caller: &Caller,
        request_id: &str,
        body: JobActionRequest,
    ) -> Result<ActionSummary, Status> {
        let limits = self.ctx.raft.replica.read().state.config.limits.clone();
        ClusterState::check_action(body.action, &body.select, &limits)
            .map_err(Status::invalid_argument)?;
        let c = ActOnJobs {
            action: body.action,
            select: body.select,
            by: caller.user.clone(),
            admin: caller.acts_for_others(),
        };
        if let JobAction::Signal { signal, batch_only } = c.action {
            return self.signal(&c, signal, batch_only).await;
        }
        match self
            .propose_for(caller, request_id, Command::ActOnJobs(c))
            .await?
        {
            Outcome::Acted(summary) => Ok(summary),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    /// Sends a signal to the running jobs `c` selects, through their agents (the leader
    /// holds the sessions; nothing is replicated).
    async fn signal(
        &self,
        c: &ActOnJobs,
        signal: i32,
        batch_only: bool,
    ) -> Result<ActionSummary, Status> {
        if !self.ctx.raft.is_leader() {
            return Err(self.ctx.unavailable("signals go through the leader".into()));
        }
        // Up to date with every write acknowledged before this call.
        self.ctx.read_barrier().await?;
        let (decision, targets) = {
            let r = self.ctx.raft.replica.read();
            let decision = r.state.decide_action(c).map_err(Status::invalid_argument)?;
            let targets: Vec<(JobId, u32, Vec<String>)> = decision
                .change
                .iter()
                .filter_map(|id| r.state.jobs.get(id))
                .map(|j| (j.id, j.attempt, j.node_names()))
                .collect();
            (decision, targets)
        };
        if let Some(why) = decision.nothing(c.action) {
            return Err(Status::failed_precondition(why));
        }
        let mut summary = decision.summary();
        summary.count = 0;
        for (job, attempt, nodes) in &targets {
            let msg = ControllerToAgent::Signal {
                job: *job,
                attempt: *attempt,
                signal,
                batch_only,
            };
            let reached = nodes.iter().filter(|n| self.ctx.hub.send(n, &msg)).count();
            if reached == nodes.len() {
                summary.count += 1;
            } else {
                summary.errors.push(format!(
                    "job {job}: {} of its {} node(s) are not connected; the signal did not reach them",
                    nodes.len() - reached,
                    nodes.len()
                ));
            }
        }
        Ok(summary)
    }
}
