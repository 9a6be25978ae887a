//! The `Agent` service: one long-lived stream per node agent, opened by the agent.
//!
//! Only the leader keeps agent sessions; other controllers answer `NotLeader` with the
//! leader's address and close. Node run and health events become Raft commands, proposed
//! by a task of the session's own (`Committer`) so that heartbeats are answered while a
//! commit waits; the agent gets an `Ack` for each event once it is committed, and resends
//! anything unacknowledged, so no event is lost across failovers.

use crate::auth::{Auth, Daemon};
use crate::ctx::Ctx;
use gsched_proto::contract::Carries;
use gsched_proto::pb::agent_server::Agent;
use gsched_proto::pb::{AgentEnvelope, ControllerEnvelope};
use gsched_state::{
    Command, HealthEvents, JobWarning, KnownRun, Outcome, RecordUsage, RegisterNode, RunExited,
    RunFailed, RunStarted,
};
use gsched_types::agent::{AgentToController, ControllerToAgent, RunEvent};
use gsched_types::job::JobId;
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
        outside_jobs: Some(ctx.cfg.outside_jobs.clone()),
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

/// What a session needs of the controller (the leader's context; a fake in tests).
#[tonic::async_trait]
trait Host: Send + Sync + 'static {
    /// Whether `conn` is still the node's session here.
    fn holds(&self, node: &str, conn: u64) -> bool;
    fn heartbeat(&self, node: &str, running: Vec<gsched_types::agent::RunRef>);
    /// The node's latest report of GPU use outside jobs.
    fn outside_jobs(&self, node: &str, uses: Vec<gsched_types::outside::OutsideUse>);
    fn lease_ms(&self) -> u64;
    fn attempt_placed_on(&self, job: JobId, attempt: u32, node: &str) -> bool;
    fn job_placed_on(&self, job: JobId, node: &str) -> bool;
    async fn propose(&self, cmd: Command) -> Result<Outcome, Status>;
    /// Something changed that the dispatcher should look at.
    fn changed(&self);
    fn step_io(&self, io: gsched_types::steps::TaskIo);
    fn is_leader(&self) -> bool;
    fn leader_address(&self) -> Option<String>;
}

#[tonic::async_trait]
impl Host for Ctx {
    fn holds(&self, node: &str, conn: u64) -> bool {
        self.hub.holds(node, conn)
    }
    fn heartbeat(&self, node: &str, running: Vec<gsched_types::agent::RunRef>) {
        self.hub.heartbeat(node, running);
    }
    fn outside_jobs(&self, node: &str, uses: Vec<gsched_types::outside::OutsideUse>) {
        for u in self.hub.set_outside(node, uses) {
            tracing::warn!("node {node}: GPU used outside jobs: {}", u.line());
        }
    }
    fn lease_ms(&self) -> u64 {
        self.cfg.liveness.lease().as_millis() as u64
    }
    fn attempt_placed_on(&self, job: JobId, attempt: u32, node: &str) -> bool {
        self.raft
            .replica
            .read()
            .state
            .attempt_placed_on(job, attempt, node)
    }
    fn job_placed_on(&self, job: JobId, node: &str) -> bool {
        self.raft.replica.read().state.job_placed_on(job, node)
    }
    async fn propose(&self, cmd: Command) -> Result<Outcome, Status> {
        Ctx::propose(self, cmd, None).await
    }
    fn changed(&self) {
        self.hub.changed.notify_one();
    }
    fn step_io(&self, io: gsched_types::steps::TaskIo) {
        self.hub.step_io(io);
    }
    fn is_leader(&self) -> bool {
        self.raft.is_leader()
    }
    fn leader_address(&self) -> Option<String> {
        Ctx::leader_address(self)
    }
}

/// The command a node run's event becomes, with the node set to the session's.
fn run_command(event: RunEvent, node: &str) -> Command {
    match confine(event, node) {
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
    }
}

/// How many events of one session wait for their commit at most; more are left
/// unacknowledged, and the agent sends them again.
const COMMIT_BACKLOG: usize = 1024;

/// A session's node run and health events on their way into the log: proposed in the
/// order they came, one at a time, by a task of their own, so that the session goes on
/// answering heartbeats while a commit waits (an election holds one up for seconds, and
/// an agent unheard of for `--node-timeout`, 6 s, is marked not responding). Each is
/// acknowledged once committed; one whose proposal fails stays unacknowledged, and the
/// agent sends it again.
struct Committer {
    queue: mpsc::Sender<(u64, Command)>,
    /// Events queued or being proposed, by sequence number.
    waiting: Arc<parking_lot::Mutex<std::collections::HashSet<u64>>>,
}

impl Committer {
    fn start<H: Host>(host: Arc<H>, tx: crate::hub::AgentTx) -> Committer {
        let (queue, mut rx) = mpsc::channel::<(u64, Command)>(COMMIT_BACKLOG);
        let waiting: Arc<parking_lot::Mutex<std::collections::HashSet<u64>>> = Arc::default();
        let done = waiting.clone();
        tokio::spawn(async move {
            while let Some((seq, cmd)) = rx.recv().await {
                let run = !matches!(cmd, Command::HealthEvents(_));
                let committed = host.propose(cmd).await.is_ok();
                done.lock().remove(&seq);
                if committed {
                    // An agent too far behind to take it has its session closed by the
                    // next reply, and sends the event again on its next session.
                    let _ = tx.try_send(envelope(&ControllerToAgent::Ack { seq }));
                    if run {
                        host.changed();
                    }
                }
            }
        });
        Committer { queue, waiting }
    }

    /// Queues event `seq` as `cmd`. One already waiting is not queued again (the agent
    /// resends an event unacknowledged for two seconds), and one that finds the queue
    /// full is left to the agent to send again.
    fn submit(&self, seq: u64, cmd: Command) {
        if !self.waiting.lock().insert(seq) {
            return;
        }
        if self.queue.try_send((seq, cmd)).is_err() {
            self.waiting.lock().remove(&seq);
        }
    }
}

async fn pump<H: Host, S>(
    host: &Arc<H>,
    node: &str,
    conn: u64,
    inbound: &mut S,
    tx: &crate::hub::AgentTx,
) -> Result<(), Status>
where
    S: Stream<Item = Result<AgentEnvelope, Status>> + Unpin,
{
    let commits = Committer::start(host.clone(), tx.clone());
    while let Some(item) = inbound.next().await {
        if !host.holds(node, conn) {
            // Dropped here (leadership lost, if only for a moment, or a full backlog):
            // ending the stream makes the agent register again; what it had not had
            // acknowledged it sends again then.
            tracing::info!("agent {node}'s session was dropped here: it is to register again");
            return Ok(());
        }
        let msg: AgentToController = item?.document()?;
        match msg {
            AgentToController::Heartbeat { running } => {
                host.heartbeat(node, running);
                reply(
                    tx,
                    &ControllerToAgent::Alive {
                        lease_ms: host.lease_ms(),
                    },
                )?;
            }
            AgentToController::Run { seq, event } => {
                let (job, attempt) = event.run();
                if !host.attempt_placed_on(job, attempt, node) {
                    // Acknowledged so the agent stops resending it; never proposed.
                    tracing::warn!(
                        "agent {node} reported on job {job} attempt {attempt}, which has no step on {node}: ignored"
                    );
                    reply(tx, &ControllerToAgent::Ack { seq })?;
                    continue;
                }
                commits.submit(seq, run_command(event, node));
            }
            AgentToController::Health { seq, events } => {
                let cmd = Command::HealthEvents(HealthEvents {
                    node: node.into(),
                    events,
                });
                commits.submit(seq, cmd);
            }
            AgentToController::TaskIo { mut io } => {
                let job = io.job();
                if let gsched_types::steps::TaskIo::Failed { node: n, .. } = &mut io {
                    *n = node.to_string();
                }
                if host.job_placed_on(job, node) {
                    host.step_io(io);
                } else {
                    tracing::warn!(
                        "agent {node} sent task output of job {job}, which has no task on {node}: ignored"
                    );
                }
            }
            AgentToController::Usage { runs } => {
                for s in runs {
                    if !host.attempt_placed_on(s.job, s.attempt, node) {
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
                    let host = host.clone();
                    tokio::spawn(async move {
                        let _ = host.propose(cmd).await;
                    });
                }
            }
            AgentToController::OutsideJobs { uses } => host.outside_jobs(node, uses),
            AgentToController::Register { .. } => {
                return Err(Status::invalid_argument("already registered"));
            }
        }
        if !host.is_leader() {
            let _ = tx.try_send(envelope(&ControllerToAgent::NotLeader {
                leader: host.leader_address(),
            }));
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::agent::RunRef;
    use parking_lot::Mutex;
    use std::time::Duration;

    /// A leader whose commits wait until the test lets them through, as they wait for a
    /// quorum during an election.
    struct Stalled {
        commits: tokio::sync::Semaphore,
        proposed: Mutex<Vec<&'static str>>,
        heartbeats: Mutex<u32>,
    }

    #[tonic::async_trait]
    impl Host for Stalled {
        fn holds(&self, _: &str, _: u64) -> bool {
            true
        }
        fn heartbeat(&self, _: &str, _: Vec<RunRef>) {
            *self.heartbeats.lock() += 1;
        }
        fn outside_jobs(&self, _: &str, _: Vec<gsched_types::outside::OutsideUse>) {}
        fn lease_ms(&self) -> u64 {
            1000
        }
        fn attempt_placed_on(&self, _: JobId, _: u32, _: &str) -> bool {
            true
        }
        fn job_placed_on(&self, _: JobId, _: &str) -> bool {
            true
        }
        async fn propose(&self, cmd: Command) -> Result<Outcome, Status> {
            self.proposed.lock().push(cmd.name());
            self.commits
                .acquire()
                .await
                .map_err(|_| Status::cancelled("closed"))?
                .forget();
            Ok(Outcome::Ok)
        }
        fn changed(&self) {}
        fn step_io(&self, _: gsched_types::steps::TaskIo) {}
        fn is_leader(&self) -> bool {
            true
        }
        fn leader_address(&self) -> Option<String> {
            None
        }
    }

    fn from_agent(msg: &AgentToController) -> Result<AgentEnvelope, Status> {
        Ok(AgentEnvelope::carrying(msg))
    }

    /// The next message to the agent, if one comes within a second.
    async fn next(
        rx: &mut mpsc::Receiver<Result<ControllerEnvelope, Status>>,
    ) -> Option<ControllerToAgent> {
        let msg = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .ok()??;
        Some(msg.ok()?.document().unwrap())
    }

    #[tokio::test]
    async fn heartbeats_are_answered_while_a_run_event_waits_for_its_commit() {
        let host = Arc::new(Stalled {
            commits: tokio::sync::Semaphore::new(0),
            proposed: Mutex::default(),
            heartbeats: Mutex::default(),
        });
        let (agent_tx, agent_rx) = mpsc::channel(16);
        let (tx, mut rx) = mpsc::channel(16);
        let session = {
            let host = host.clone();
            tokio::spawn(async move {
                let mut inbound = ReceiverStream::new(agent_rx);
                pump(&host, "n1", 1, &mut inbound, &tx).await
            })
        };
        let started = RunEvent::Started {
            job: JobId(7),
            attempt: 0,
            pid: Some(42),
        };
        agent_tx
            .send(from_agent(&AgentToController::Run {
                seq: 1,
                event: started,
            }))
            .await
            .unwrap();
        for _ in 0..3 {
            agent_tx
                .send(from_agent(&AgentToController::Heartbeat {
                    running: vec![],
                }))
                .await
                .unwrap();
        }
        // The commit of the event has not happened: the heartbeats are answered anyway.
        for i in 0..3 {
            match next(&mut rx).await {
                Some(ControllerToAgent::Alive { .. }) => {}
                other => panic!("heartbeat {i} was not answered while a commit waited: {other:?}"),
            }
        }
        assert_eq!(*host.heartbeats.lock(), 3);
        assert_eq!(*host.proposed.lock(), ["step_started"]);
        // Once it commits, the event is acknowledged.
        host.commits.add_permits(1);
        match next(&mut rx).await {
            Some(ControllerToAgent::Ack { seq: 1 }) => {}
            other => panic!("no ack after the commit: {other:?}"),
        }
        drop(agent_tx);
        session.await.unwrap().unwrap();
    }
}
