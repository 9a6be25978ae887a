//! Steps inside a running job (`grun`): the leader lays the step out, records it, sends
//! it to the nodes' agents and relays the tasks' output, exits and input.

use super::JobsService;
use crate::auth::Caller;
use crate::ctx::outcome_to_status;
use crate::hub::STEP_BACKLOG;
use gsched_proto::contract::Carries;
use gsched_proto::pb::RunStepReply;
use gsched_state::{Command, StepEnded, StepStarted};
use gsched_types::agent::ControllerToAgent;
use gsched_types::error::StepLayoutError;
use gsched_types::job::JobState;
use gsched_types::steps::{
    INPUT_CHUNK, InputEvent, StepGpuError, StepInput, StepLaunch, StepRequest, StepState,
    StepUpdate, TaskIo, claim_gpus, task_status,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tonic::Status;

/// What `RunStep` streams to its caller.
pub type StepStream = tokio_stream::wrappers::ReceiverStream<Result<RunStepReply, Status>>;

impl JobsService {
    /// Starts a step in one of `caller`'s running jobs; the stream carries its layout,
    /// then its tasks' output and exits, and ends with the step.
    pub async fn run_step_as(
        &self,
        caller: &Caller,
        body: StepRequest,
    ) -> Result<StepStream, Status> {
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
        self.ctx.read_barrier().await?;
        let (attempt, layout, owner, job_gpus) = {
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
            let held = job.allocation.as_ref().map_or(u64::MAX, |a| {
                a.nodes.iter().map(|n| n.cpus.len() as u64).sum()
            });
            let layout = body.layout(&job.node_names(), held).map_err(|e| match e {
                StepLayoutError::TooManyCpus { .. } => Status::invalid_argument(format!(
                    "Unable to create step for job {}: {e}",
                    body.job
                )),
                e => Status::invalid_argument(e),
            })?;
            if body.pty.is_some() && layout.ntasks != 1 {
                return Err(Status::invalid_argument(format!(
                    "grun --pty runs one task in a terminal, not {} (drop -n/--ntasks-per-node or -N)",
                    layout.ntasks
                )));
            }
            let job_gpus: Vec<u32> = layout
                .nodes
                .iter()
                .map(|n| {
                    job.allocation
                        .as_ref()
                        .and_then(|a| a.nodes.iter().find(|x| &x.node == n))
                        .map_or(0, |x| x.gpus.len() as u32)
                })
                .collect();
            (job.attempt, layout, job.spec.user.clone(), job_gpus)
        };
        let (updates_tx, mut updates) = tokio::sync::mpsc::channel(STEP_BACKLOG);
        let lagging = Arc::new(AtomicBool::new(false));
        // The GPUs the step sees per node; it holds them unless it overlaps.
        let overlap = body.overlap || body.pty.is_some();
        let mut given: Vec<Vec<u32>> = Vec::new();
        let opened = self.ctx.hub.open_step(
            body.job,
            updates_tx,
            lagging.clone(),
            &owner,
            &layout.nodes[0],
            |held| {
                given = layout
                    .nodes
                    .iter()
                    .zip(&layout.ranks)
                    .zip(&job_gpus)
                    .map(|((node, ranks), gpus)| {
                        let wanted = body.gpus.wanted(ranks.len() as u32);
                        claim_gpus(node, *gpus, &held(node), wanted, overlap)
                    })
                    .collect::<Result<_, StepGpuError>>()?;
                let holds = layout.nodes.iter().cloned().zip(given.iter().cloned());
                Ok(if overlap { Vec::new() } else { holds.collect() })
            },
        );
        let step = match opened {
            Ok(step) => step,
            Err(e @ StepGpuError::Busy { .. }) => {
                return Err(Status::resource_exhausted(e.to_string()));
            }
            Err(e) => return Err(Status::invalid_argument(e.to_string())),
        };
        let name = body.name.clone().unwrap_or_else(|| {
            body.argv[0]
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        });
        let recorded = self
            .ctx
            .propose(
                Command::StepStarted(StepStarted {
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
        // A few updates in flight to the caller; the backlog waits in `updates`.
        let (client_tx, client_rx) = tokio::sync::mpsc::channel(16);
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
                gpus: body.gpus.clone(),
                gpu_slots: given.get(i).cloned(),
                cpus_per_task: body.cpus_per_task,
                binding: body.binding.clone(),
                srun_env: body.srun_env.clone(),
                task_scripts: body.task_scripts.clone(),
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
        let started = StepUpdate::Started {
            step,
            layout: layout.clone(),
        };
        let _ = client_tx.try_send(Ok(RunStepReply::carrying(&started)));
        let ctx = self.ctx.clone();
        let (job, nodes, ntasks) = (body.job, layout.nodes.clone(), layout.ntasks);
        tokio::spawn(async move {
            // Ends when every task has exited; a node that cannot start its tasks, or a
            // caller that goes away, stops the rest (as srun aborts a step).
            let mut tally = Tally::default();
            let end = loop {
                tokio::select! {
                    u = updates.recv() => {
                        let Some(u) = u else {
                            if !lagging.load(Ordering::Relaxed) {
                                break StepState::Cancelled;
                            }
                            let behind = StepUpdate::Io(TaskIo::Failed {
                                job,
                                step,
                                node: String::new(),
                                message: format!(
                                    "grun fell more than {STEP_BACKLOG} updates behind the step's output (a stopped terminal or a slow pipe?): the step was stopped"
                                ),
                            });
                            let _ = client_tx.send(Ok(RunStepReply::carrying(&behind))).await;
                            break StepState::Failed;
                        };
                        let failed = matches!(u, StepUpdate::Io(TaskIo::Failed { .. }));
                        if let StepUpdate::Io(TaskIo::Exited { code, signal, .. }) = &u {
                            tally.add(*code, *signal);
                        }
                        if client_tx.send(Ok(RunStepReply::carrying(&u))).await.is_err() {
                            break StepState::Cancelled;
                        }
                        if failed {
                            break StepState::Failed;
                        }
                        if tally.exited >= ntasks {
                            break tally.state();
                        }
                    }
                    _ = client_tx.closed() => break StepState::Cancelled,
                }
            };
            ctx.hub.close_step(job, step);
            let stop = tally.exited < ntasks;
            let ended = Command::StepEnded(StepEnded {
                job,
                step,
                state: end,
                exit_code: tally.exit_code(),
                signal: tally.signal,
            });
            if let Err(e) = ctx.propose(ended, None).await {
                tracing::warn!(%job, step, "the end of step {job}.{step} was not recorded: {}", e.message());
            }
            if stop {
                for n in &nodes {
                    ctx.hub
                        .send(n, &ControllerToAgent::KillStep { job, attempt, step });
                }
            }
        });
        Ok(StepStream::new(client_rx))
    }

    /// Passes input to task 0 of a running step, through the agent that runs it.
    pub fn step_input_as(&self, caller: &Caller, body: StepInput) -> Result<(), Status> {
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
        Ok(())
    }
}

/// What a step's task exits add up to: the state it ends in and the exit code and signal
/// recorded for it (the highest code, the first signal), counted as `grun` counts them
/// (`gsched_types::steps::task_status`).
#[derive(Debug, Default)]
struct Tally {
    exited: u32,
    code: i32,
    signal: Option<i32>,
}

impl Tally {
    fn add(&mut self, code: Option<i32>, signal: Option<i32>) {
        self.exited += 1;
        self.signal = self.signal.or(signal);
        // A task that reported neither a code nor a signal counts as grun counts it: 1.
        let code = code.or(signal.is_none().then(|| task_status(None, None)));
        self.code = self.code.max(code.unwrap_or(0));
    }

    /// The state of a step whose every task exited.
    fn state(&self) -> StepState {
        if self.code == 0 && self.signal.is_none() {
            StepState::Completed
        } else {
            StepState::Failed
        }
    }

    fn exit_code(&self) -> Option<i32> {
        (self.exited > 0).then_some(self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_exit_with_neither_code_nor_signal_fails_the_step_as_grun_exits_1() {
        let mut t = Tally::default();
        t.add(Some(0), None);
        assert_eq!(t.state(), StepState::Completed);
        // The agent learned neither how the task ended nor that it ended well.
        t.add(None, None);
        assert_eq!(t.state(), StepState::Failed);
        assert_eq!(t.exit_code(), Some(1));
        let mut t = Tally::default();
        t.add(Some(0), Some(9));
        t.add(Some(3), None);
        assert_eq!(
            (t.state(), t.exit_code(), t.signal),
            (StepState::Failed, Some(3), Some(9))
        );
    }
}
