//! The agent's connection to the controllers: dial in, register, heartbeat, relay launches
//! and kills to the run manager, send outbox events and drop them once acknowledged.
//! Follows `NotLeader` redirects and reconnects with backoff, so it finds a new leader
//! within about a second of a failover.

use crate::contact::Contact;
use crate::outbox::Outbox;
use crate::runs::RunManager;
use gsched_proto::contract::Carries;
use gsched_proto::pb::AgentEnvelope;
use gsched_proto::pb::agent_client::AgentClient;
use gsched_proto::tls::Dialer;
use gsched_types::agent::{AgentCapabilities, AgentToController, ControllerToAgent};
use gsched_types::topology::Topology;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// What the agent says about itself when it registers.
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub address: String,
    pub training_addr: String,
    pub features: Vec<String>,
}

pub struct Agent {
    pub registration: Registration,
    pub controllers: Vec<String>,
    /// How controllers are dialed (TLS with the node's certificate on a real cluster).
    pub dialer: Dialer,
    pub topology: Arc<RwLock<Topology>>,
    pub runs: Arc<Mutex<RunManager>>,
    pub outbox: Arc<Outbox>,
    /// Signalled when the outbox has something new to send.
    pub flush: Arc<Notify>,
    /// Wakes the run monitor, which waits without polling while the node runs nothing.
    pub launched: Arc<Notify>,
    /// The lease on the node runs, renewed by the leader's answers.
    pub contact: Arc<Contact>,
    pub heartbeat: Duration,
}

enum End {
    Redirect(Option<String>),
    Closed,
}

fn seq_of(ev: &AgentToController) -> Option<u64> {
    match ev {
        AgentToController::Run { seq, .. } | AgentToController::Health { seq, .. } => Some(*seq),
        _ => None,
    }
}

/// Runs the run monitor and the controller session forever.
pub async fn run(agent: Arc<Agent>) {
    let monitor = agent.clone();
    tokio::spawn(async move {
        // A supervisor ending (a run's exit to report) wakes the monitor at once; the
        // 100 ms rounds catch the rest (logs, starts, runs re-adopted after a restart,
        // whose supervisors are not this process's children). With no run, it sleeps
        // until a launch.
        let mut children = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
            .map_err(|e| {
                tracing::warn!("no SIGCHLD wake-ups ({e}); step exits are seen within 100 ms")
            })
            .ok();
        loop {
            // Never wait for the lock here: whoever holds it is busy with a run.
            let idle = monitor.runs.try_lock().is_some_and(|s| s.is_idle());
            if !idle {
                let runs = monitor.runs.clone();
                let _ = tokio::task::spawn_blocking(move || runs.lock().tick()).await;
                monitor.flush.notify_one();
            }
            let round = if idle {
                Duration::from_secs(10)
            } else {
                Duration::from_millis(100)
            };
            tokio::select! {
                _ = tokio::time::sleep(round) => {}
                _ = monitor.launched.notified() => {}
                _ = async {
                    match children.as_mut() {
                        Some(s) => {
                            s.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                } => {
                    // Let a burst of exits arrive together.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    });
    let mut next = 0usize;
    let mut redirect: Option<String> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        if agent.contact.cut_off() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let addr = redirect.take().unwrap_or_else(|| {
            let a = agent.controllers[next % agent.controllers.len()].clone();
            next += 1;
            a
        });
        match session(&agent, &addr).await {
            Ok(End::Redirect(Some(leader))) if leader != addr => {
                tracing::info!("{addr} is not the leader; following it to {leader}");
                redirect = Some(leader);
                backoff = Duration::from_millis(100);
                continue;
            }
            Ok(End::Redirect(_)) => tracing::debug!("{addr} knows no leader yet"),
            Ok(End::Closed) => {
                tracing::info!("controller {addr} closed the session");
                backoff = Duration::from_millis(100);
            }
            Err(e)
                if e.downcast_ref::<gsched_proto::dial::DialError>()
                    .is_some_and(|d| {
                        !matches!(d, gsched_proto::dial::DialError::Unreachable { .. })
                    }) =>
            {
                tracing::warn!("controller {addr}: {e}")
            }
            Err(e) => tracing::debug!("controller {addr}: {e}"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

async fn session(agent: &Agent, addr: &str) -> anyhow::Result<End> {
    let channel = agent
        .dialer
        .connect(
            addr,
            gsched_proto::dial::Timeouts {
                connect: Duration::from_millis(500),
                request: None,
                keepalive: None,
            },
        )
        .await?;
    let mut client = AgentClient::new(channel)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024);
    let (tx, rx) = mpsc::channel::<AgentEnvelope>(OUTBOUND_BACKLOG);
    // Queues a message: `false` when the queue is full (the controller is not keeping up;
    // the outbox and the next heartbeat carry what waits), an error once the session is
    // gone.
    let send = |msg: &AgentToController| match tx.try_send(AgentEnvelope::carrying(msg)) {
        Ok(()) => Ok(true),
        Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(anyhow::anyhow!("the session closed")),
    };
    let known = agent.runs.lock().known();
    let reg = &agent.registration;
    let topology = agent.topology.read().clone();
    send(&AgentToController::Register {
        name: reg.name.clone(),
        address: reg.address.clone(),
        training_addr: reg.training_addr.clone(),
        topology: Box::new(topology),
        features: reg.features.clone(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        known_runs: known,
        capabilities: AgentCapabilities {
            output_notices: true,
        },
    })?;
    // A controller that accepts the connection but says nothing (frozen, or cut off after
    // the handshake) is given up on, so the next one is tried.
    let silence_limit = (agent.heartbeat * 10).max(Duration::from_secs(10));
    let registered = async {
        let mut inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| anyhow::anyhow!("session closed before registration"))?;
        anyhow::Ok((inbound, first))
    };
    let (mut inbound, first) = tokio::time::timeout(silence_limit, registered)
        .await
        .map_err(|_| {
            anyhow::anyhow!("no answer to the registration within {silence_limit:.0?}")
        })??;
    match first.document()? {
        ControllerToAgent::Registered {
            kill,
            lease_ms,
            outside_jobs,
            ..
        } => {
            tracing::info!("registered with controller {addr}");
            agent.runs.lock().set_outside_policy(outside_jobs);
            agent.contact.renew(lease_ms);
            // Runs of jobs that ended while this node was away: stop them before
            // anything else (the node takes no new job until they have).
            let stops: Vec<_> = {
                let mut runs = agent.runs.lock();
                kill.iter()
                    .map(|s| {
                        runs.kill(
                            s.job,
                            s.attempt,
                            gsched_types::FailureKind::GangStopped,
                            "the controller ended this job while the node was away",
                            Duration::from_secs(1),
                        )
                    })
                    .collect()
            };
            stops.into_iter().for_each(crate::runs::Stop::carry_out);
        }
        ControllerToAgent::NotLeader { leader } => return Ok(End::Redirect(leader)),
        other => anyhow::bail!("unexpected first message {other:?}"),
    }
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut ticker = tokio::time::interval(agent.heartbeat);
    // The controller answers every heartbeat; one silent this long is cut off from us (a
    // partition leaves the TCP connection open for minutes), and the new leader is
    // found by connecting again.
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            msg = inbound.message() => {
                let Some(msg) = msg? else { return Ok(End::Closed) };
                heard = Instant::now();
                match msg.document()? {
                    ControllerToAgent::Launch(spec) => {
                        let runs = agent.runs.clone();
                        tokio::task::spawn_blocking(move || runs.lock().launch(*spec)).await?;
                        agent.launched.notify_one();
                        agent.flush.notify_one();
                    }
                    ControllerToAgent::Kill { job, attempt, cause, reason, grace_s } => {
                        RunManager::stop(&agent.runs, job, attempt, cause, &reason, Duration::from_secs(grace_s));
                        agent.flush.notify_one();
                    }
                    ControllerToAgent::Kills { kills } => {
                        tracing::info!("stopping {} steps (one message)", kills.len());
                        let stops: Vec<_> = {
                            let mut runs = agent.runs.lock();
                            kills
                                .into_iter()
                                .map(|k| runs.kill(k.job, k.attempt, k.cause, &k.reason, Duration::from_secs(k.grace_s)))
                                .collect()
                        };
                        stops.into_iter().for_each(crate::runs::Stop::carry_out);
                        agent.flush.notify_one();
                    }
                    ControllerToAgent::RunStep(launch) => {
                        let runs = agent.runs.clone();
                        tokio::task::spawn_blocking(move || runs.lock().run_step(&launch)).await?;
                        agent.launched.notify_one();
                        agent.flush.notify_one();
                    }
                    ControllerToAgent::StepInput { job, step, input } => {
                        agent.runs.lock().step_input(job, step, input);
                    }
                    ControllerToAgent::KillStep { job, attempt, step } => {
                        agent.runs.lock().kill_step(job, attempt, step);
                    }
                    ControllerToAgent::Signal { job, attempt, signal, batch_only } => {
                        agent.runs.lock().signal(job, attempt, signal, batch_only);
                    }
                    ControllerToAgent::Notice { job, attempt, text } => {
                        agent.runs.lock().notice(job, attempt, &text);
                    }
                    ControllerToAgent::Ack { seq } => {
                        agent.outbox.ack(seq);
                        sent.remove(&seq);
                    }
                    ControllerToAgent::NotLeader { leader } => return Ok(End::Redirect(leader)),
                    ControllerToAgent::Registered { .. } => {}
                    ControllerToAgent::Alive { lease_ms } => agent.contact.renew(lease_ms),
                }
            }
            _ = ticker.tick() => {
                if agent.contact.cut_off() {
                    return Ok(End::Closed);
                }
                if heard.elapsed() > silence_limit {
                    tracing::warn!(
                        "controller {addr} has not answered for {:.0?}: connecting again",
                        heard.elapsed()
                    );
                    return Ok(End::Closed);
                }
                let (running, usage, outside) = {
                    let mut runs = agent.runs.lock();
                    (runs.running(), runs.take_usage(), runs.take_outside())
                };
                send(&AgentToController::Heartbeat { running })?;
                if !usage.is_empty() {
                    send(&AgentToController::Usage { runs: usage })?;
                }
                if let Some(uses) = outside {
                    send(&AgentToController::OutsideJobs { uses })?;
                }
                relay_task_io(agent, &tx, &send)?;
                flush(agent, &send, &mut sent, true)?;
            }
            _ = agent.outbox.pushed.notified() => flush(agent, &send, &mut sent, false)?,
            _ = agent.flush.notified() => {
                relay_task_io(agent, &tx, &send)?;
                flush(agent, &send, &mut sent, false)?
            }
        }
    }
}

/// Messages waiting for the controller on one session at most.
const OUTBOUND_BACKLOG: usize = 1024;

/// Sends the `grun` steps' output gathered so far, as much as the session's queue has
/// room for; the rest waits in the run manager for the next turn.
fn relay_task_io(
    agent: &Agent,
    tx: &mpsc::Sender<AgentEnvelope>,
    send: &impl Fn(&AgentToController) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    for io in agent.runs.lock().take_task_io(tx.capacity()) {
        send(&AgentToController::TaskIo { io })?;
    }
    Ok(())
}

/// Sends outbox events not sent on this session yet (and, on `retry`, those sent over two
/// seconds ago without an acknowledgement).
fn flush<E>(
    agent: &Agent,
    send: &impl Fn(&AgentToController) -> Result<bool, E>,
    sent: &mut HashMap<u64, Instant>,
    retry: bool,
) -> Result<(), E> {
    for ev in agent.outbox.pending() {
        let Some(seq) = seq_of(&ev) else { continue };
        let due = match sent.get(&seq) {
            None => true,
            Some(t) => retry && t.elapsed() > Duration::from_secs(2),
        };
        if due {
            if !send(&ev)? {
                break;
            }
            sent.insert(seq, Instant::now());
        }
    }
    Ok(())
}
