//! The `Agent` service: one long-lived stream per node agent, opened by the agent.
//!
//! Only the leader keeps agent sessions; other controllers answer `NotLeader` with the
//! leader's address and close. Node run and health events become Raft commands; the agent
//! gets an `Ack` for each event once it is committed, and resends anything unacknowledged
//! after a reconnect, so no event is lost across failovers.

use crate::auth::{Auth, Daemon};
use crate::ctx::Ctx;
use gsched_proto::contract::Carries;
use gsched_proto::pb::agent_server::Agent;
use gsched_proto::pb::{AgentEnvelope, ControllerEnvelope};
use gsched_state::{
    Command, HealthEvents, JobWarning, KnownRun, RecordUsage, RegisterNode, RunExited, RunFailed,
    RunStarted,
};
use gsched_types::agent::{AgentToController, ControllerToAgent, RunEvent};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

pub struct AgentService {
    pub ctx: Arc<Ctx>,
}

type Out = Pin<Box<dyn Stream<Item = Result<ControllerEnvelope, Status>> + Send>>;

fn envelope(msg: &ControllerToAgent) -> Result<ControllerEnvelope, Status> {
    Ok(ControllerEnvelope::carrying(msg))
}

#[tonic::async_trait]
impl Agent for AgentService {
    type SessionStream = Out;

    async fn session(
        &self,
        req: Request<Streaming<AgentEnvelope>>,
    ) -> Result<Response<Out>, Status> {
        let daemon = self.ctx.auth.daemon(&req)?;
        let peer = crate::auth::Auth::remote_of(&req)
            .map(|a| a.to_string())
            .unwrap_or_default();
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(crate::hub::AGENT_BACKLOG);
        if !self.ctx.raft.is_leader() {
            let _ = tx.try_send(envelope(&ControllerToAgent::NotLeader {
                leader: self.ctx.leader_address(),
            }));
            drop(tx);
            return Ok(Response::new(Box::pin(ReceiverStream::new(rx))));
        }
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(ctx, &mut inbound, tx, peer, daemon).await {
                tracing::debug!("agent session ended: {e}");
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn serve(
    ctx: Arc<Ctx>,
    inbound: &mut Streaming<AgentEnvelope>,
    tx: crate::hub::AgentTx,
    peer: String,
    daemon: Daemon,
) -> Result<(), Status> {
    let first = inbound
        .next()
        .await
        .ok_or_else(|| Status::cancelled("agent closed before registering"))??;
    let msg: AgentToController = first.document()?;
    let AgentToController::Register {
        name,
        address,
        training_addr,
        topology,
        features,
        agent_version,
        known_runs,
        capabilities,
    } = msg
    else {
        return Err(Status::invalid_argument(
            "the first agent message must be register",
        ));
    };
    if let Err(refused) = Auth::check_node(&daemon, &name) {
        tracing::warn!("agent registration refused: {}", refused.message());
        let _ = tx.try_send(Err(refused.clone()));
        return Err(refused);
    }
    let address = if address.is_empty() { peer } else { address };
    let known = known_runs
        .iter()
        .map(|s| KnownRun {
            job: s.job,
            attempt: s.attempt,
        })
        .collect();
    let outcome = ctx
        .propose(
            Command::RegisterNode(RegisterNode {
                name: name.clone(),
                address,
                training_addr,
                topology: *topology,
                features,
                agent_version,
                known_runs: known,
            }),
            None,
        )
        .await;
    match outcome {
        Ok(gsched_state::Outcome::Ok) => {}
        Ok(other) => {
            let _ = tx.try_send(Err(Status::invalid_argument(format!(
                "registration refused: {other:?}"
            ))));
            return Ok(());
        }
        Err(status) => {
            let _ = tx.try_send(envelope(&ControllerToAgent::NotLeader {
                leader: ctx.leader_address(),
            }));
            return Err(status);
        }
    }
    let conn = ctx.hub.attach(&name, tx.clone(), capabilities);
    // Steps of ended jobs this agent still runs: it stops them before anything else, and
    // the node takes no new job until it has.
    let kill = ctx
        .raft
        .replica
        .read()
        .state
        .nodes
        .get(&name)
        .map(|n| n.fencing.clone())
        .unwrap_or_default();
    if !kill.is_empty() {
        tracing::warn!("agent {name} returned with steps of ended jobs; fencing: {kill:?}");
    }
    let _ = tx.try_send(envelope(&ControllerToAgent::Registered {
        node: name.clone(),
        kill,
        lease_ms: ctx.cfg.liveness.lease().as_millis() as u64,
    }));
    tracing::info!("agent {name} registered");
    ctx.hub.changed.notify_one();
    let result = pump(&ctx, &name, conn, inbound, &tx).await;
    ctx.hub.detach(&name, conn);
    tracing::info!("agent {name} disconnected");
    result
}

/// A node run's event with the failure's node set to the reporting session's: an agent speaks
/// for its own node only, whatever its message says.
fn confine(mut event: RunEvent, node: &str) -> RunEvent {
    let failure = match &mut event {
        RunEvent::Failed { failure, .. } => Some(failure),
        RunEvent::Exited { failure, .. } => failure.as_mut(),
        RunEvent::Started { .. } | RunEvent::Warning { .. } => None,
    };
    if let Some(f) = failure {
        f.node = Some(node.to_string());
    }
    if let RunEvent::Warning { finding, .. } = &mut event {
        finding.node = Some(node.to_string());
    }
    event
}

/// Answers the agent; a session whose agent has stopped reading is ended here.
fn reply(tx: &crate::hub::AgentTx, msg: &ControllerToAgent) -> Result<(), Status> {
    tx.try_send(envelope(msg)).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => Status::resource_exhausted(format!(
            "the agent is {} messages behind: session closed",
            crate::hub::AGENT_BACKLOG
        )),
        mpsc::error::TrySendError::Closed(_) => Status::cancelled("the agent's session closed"),
    })
}

async fn pump(
    ctx: &Arc<Ctx>,
    node: &str,
    conn: u64,
    inbound: &mut Streaming<AgentEnvelope>,
    tx: &crate::hub::AgentTx,
) -> Result<(), Status> {
    while let Some(item) = inbound.next().await {
        if !ctx.hub.holds(node, conn) {
            // Dropped here (leadership lost, if only for a moment, or a full backlog):
            // ending the stream makes the agent register again; what it had not had
            // acknowledged it sends again then.
            tracing::info!("agent {node}'s session was dropped here: it is to register again");
            return Ok(());
        }
        let msg: AgentToController = item?.document()?;
        match msg {
            AgentToController::Heartbeat { running } => {
                ctx.hub.heartbeat(node, running);
                let lease_ms = ctx.cfg.liveness.lease().as_millis() as u64;
                reply(tx, &ControllerToAgent::Alive { lease_ms })?;
            }
            AgentToController::Run { seq, event } => {
                let (job, attempt) = event.run();
                if !ctx
                    .raft
                    .replica
                    .read()
                    .state
                    .attempt_placed_on(job, attempt, node)
                {
                    // Acknowledged so the agent stops resending it; never proposed.
                    tracing::warn!(
                        "agent {node} reported on job {job} attempt {attempt}, which has no step on {node}: ignored"
                    );
                    reply(tx, &ControllerToAgent::Ack { seq })?;
                    continue;
                }
                let cmd = match confine(event, node) {
                    RunEvent::Started { job, attempt, pid } => Command::RunStarted(RunStarted {
                        job,
                        attempt,
                        node: node.into(),
                        pid,
                    }),
                    RunEvent::Failed {
                        job,
                        attempt,
                        failure,
                    } => Command::RunFailed(RunFailed {
                        job,
                        attempt,
                        node: node.into(),
                        failure,
                    }),
                    RunEvent::Exited {
                        job,
                        attempt,
                        code,
                        signal,
                        failure,
                        usage,
                    } => Command::RunExited(RunExited {
                        job,
                        attempt,
                        node: node.into(),
                        code,
                        signal,
                        failure,
                        usage,
                    }),
                    RunEvent::Warning {
                        job,
                        attempt,
                        finding,
                    } => Command::JobWarning(JobWarning {
                        job,
                        attempt,
                        node: node.into(),
                        finding,
                    }),
                };
                // Transient errors leave the event unacknowledged; the agent resends it.
                if ctx.propose(cmd, None).await.is_ok() {
                    reply(tx, &ControllerToAgent::Ack { seq })?;
                    ctx.hub.changed.notify_one();
                }
            }
            AgentToController::Health { seq, events } => {
                if ctx
                    .propose(
                        Command::HealthEvents(HealthEvents {
                            node: node.into(),
                            events,
                        }),
                        None,
                    )
                    .await
                    .is_ok()
                {
                    reply(tx, &ControllerToAgent::Ack { seq })?;
                }
            }
            AgentToController::TaskIo { mut io } => {
                let job = io.job();
                if let gsched_types::steps::TaskIo::Failed { node: n, .. } = &mut io {
                    *n = node.to_string();
                }
                let placed = ctx.raft.replica.read().state.job_placed_on(job, node);
                if placed {
                    ctx.hub.step_io(io);
                } else {
                    tracing::warn!(
                        "agent {node} sent task output of job {job}, which has no task on {node}: ignored"
                    );
                }
            }
            AgentToController::Usage { runs } => {
                for s in runs {
                    if !ctx
                        .raft
                        .replica
                        .read()
                        .state
                        .attempt_placed_on(s.job, s.attempt, node)
                    {
                        tracing::warn!(
                            "agent {node} sent usage of job {} attempt {}, which has no step on {node}: ignored",
                            s.job,
                            s.attempt
                        );
                        continue;
                    }
                    let cmd = Command::RecordUsage(RecordUsage {
                        job: s.job,
                        attempt: s.attempt,
                        node: node.into(),
                        usage: s.usage,
                    });
                    // The next summary replaces a lost one: nothing waits for this.
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let _ = ctx.propose(cmd, None).await;
                    });
                }
            }
            AgentToController::Register { .. } => {
                return Err(Status::invalid_argument("already registered"));
            }
        }
        if !ctx.raft.is_leader() {
            let _ = tx.try_send(envelope(&ControllerToAgent::NotLeader {
                leader: ctx.leader_address(),
            }));
            return Ok(());
        }
    }
    Ok(())
}
