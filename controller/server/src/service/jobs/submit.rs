//! Submitting a job, and checking one without submitting it (`gsub --test-only`,
//! `--dry-run`): who it runs as, whether it is valid and could ever fit, where it would go.

use super::{JobsService, request_id};
use crate::auth::Caller;
use crate::ctx::outcome_to_status;
use gsched_proto::clock::now_ms;
use gsched_scheduler::place::Placer;
use gsched_state::validate;
use gsched_state::view::{ViewCache, nodes_only, pending_view, snapshot};
use gsched_state::{ClusterState, Command, Outcome, SubmitJob};
use gsched_types::api::CheckReply;
use gsched_types::job::{JobId, JobRecord, JobSpec};
use tonic::Status;

impl JobsService {
    /// Submits `spec` for the verified `caller` (gRPC `Submit`, HTTP `POST /api/v1/jobs`);
    /// the ids of the jobs made (an array makes several).
    pub async fn submit_as(
        &self,
        caller: &Caller,
        request_id_text: &str,
        mut spec: JobSpec,
    ) -> Result<Vec<JobId>, Status> {
        self.run_as_caller(caller, &mut spec)?;
        if spec.nice < 0 && !caller.acts_for_others() {
            return Err(Status::permission_denied(
                "a negative --nice raises a job above others: only an operator may set it",
            ));
        }
        let key = request_id(caller, "submit_job", request_id_text);
        {
            let r = self.ctx.raft.replica.read();
            validate::new_job_spec(&spec, &r.state.config.limits)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            if let Some(Outcome::Submitted { jobs }) =
                key.as_ref().and_then(|id| r.state.dedup_lookup(id))
            {
                return Ok(jobs.clone());
            }
            self.check_fits(&r.state, &spec)?;
        }
        let outcome = self
            .ctx
            .propose(Command::SubmitJob(SubmitJob { spec }), key)
            .await?;
        match outcome_to_status(outcome) {
            Ok(Outcome::Submitted { jobs }) => Ok(jobs),
            Ok(other) => Err(Status::internal(format!("unexpected outcome {other:?}"))),
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                Err(Status::invalid_argument(s.message().to_string()))
            }
            Err(s) => Err(s),
        }
    }

    /// Whether `spec` is valid and fits, where it would go on an idle cluster and when it
    /// would start in the queue as it is now.
    pub fn check_as(&self, caller: &Caller, mut spec: JobSpec) -> Result<CheckReply, Status> {
        self.run_as_caller(caller, &mut spec)?;
        let r = self.ctx.raft.replica.read();
        validate::new_job_spec(&spec, &r.state.config.limits)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.check_fits(&r.state, &spec)?;
        let mut record = probe_record(&spec);
        record.id = JobId(u64::MAX);
        let mut idle = snapshot(&r.state, &mut ViewCache::default());
        for n in &mut idle.nodes {
            n.usage = Default::default();
        }
        idle.running.clear();
        idle.pending = vec![pending_view(&record, &r.state)];
        let on_idle = gsched_scheduler::plan(&idle, now_ms());
        let allocation = on_idle.starts.first().map(|s| s.allocation.clone());
        // And into the queue as it is now, behind (or before) the jobs already there.
        let mut live = snapshot(&r.state, &mut ViewCache::default());
        live.pending.push(pending_view(&record, &r.state));
        let now = now_ms();
        let in_queue = gsched_scheduler::plan(&live, now);
        let start_now = in_queue.starts.iter().find(|s| s.job == record.id);
        let expected_start_ms = match start_now {
            Some(_) => Some(now),
            None => in_queue
                .estimates
                .iter()
                .find(|(j, _)| *j == record.id)
                .map(|(_, t)| *t),
        };
        let reason_now = in_queue
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
        Ok(CheckReply {
            fits: true,
            message: format!("fits the {} registered node(s)", r.state.nodes.len()),
            allocation_if_idle: allocation,
            reason_if_not_idle: on_idle.reasons.first().map(|(_, r)| r.to_string()),
            topologies,
            expected_start_ms,
            allocation_now: start_now.map(|s| s.allocation.clone()),
            reason_now,
        })
    }

    /// Who the job runs as is decided here, from the verified caller. A job submitted
    /// for another user (root, an operator's tool) does not take the submitter's HOME: it
    /// gets its owner's (jobs otherwise keep the submitted HOME, as Slurm's do).
    fn run_as_caller(&self, caller: &Caller, spec: &mut JobSpec) -> Result<(), Status> {
        let (user, uid, gid) = self.ctx.auth.run_as(caller, spec.uid, &spec.user)?;
        if uid != caller.uid {
            spec.env.remove("HOME");
        }
        (spec.user, spec.uid, spec.gid) = (user, Some(uid), Some(gid));
        validate::in_slurm_case(spec);
        Ok(())
    }

    fn check_fits(&self, state: &ClusterState, spec: &JobSpec) -> Result<(), Status> {
        check_fits(state, spec, &mut self.views.lock())
            .map_err(|why| Status::invalid_argument(format!("this job can never run here: {why}")))
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
) -> Result<(), gsched_scheduler::place::NeverFits> {
    if state.nodes.is_empty() {
        return Ok(());
    }
    let record = probe_record(spec);
    let view = pending_view(&record, state);
    let snap = nodes_only(state, cache);
    let mut placer = Placer::new(&snap);
    placer.check_ever_fits(&view)
}
