//! Work only the leader does: scheduling passes, sending launches and kills to agents,
//! declaring silent nodes lost, and the time-limit backstop. Started when this controller
//! becomes leader and stopped when it stops being one; everything is level-triggered from
//! the committed state, so a new leader simply picks up where the old one left off.

use crate::config::now_ms;
use crate::ctx::Ctx;
use gsched_proto::agent::{ControllerToAgent, LaunchSpec};
use gsched_scheduler::plan;
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::{Command, StartJob};
use gsched_types::failure::FailureKind;
use gsched_types::job::{JobId, JobState, StepState};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Starts and stops the leader loops as leadership comes and goes.
pub async fn watch_leadership(ctx: Arc<Ctx>) {
    let mut status = ctx.raft.status.clone();
    let mut stop: Option<watch::Sender<bool>> = None;
    loop {
        let leader = status.borrow().role == "leader";
        match (leader, stop.is_some()) {
            (true, false) => {
                let (tx, rx) = watch::channel(false);
                stop = Some(tx);
                tracing::info!(
                    "controller {} is now the leader (term {})",
                    ctx.cfg.id,
                    status.borrow().term
                );
                tokio::spawn(lead(ctx.clone(), rx));
            }
            (false, true) => {
                if let Some(tx) = stop.take() {
                    let _ = tx.send(true);
                }
                ctx.hub.clear();
                tracing::info!("controller {} is no longer the leader", ctx.cfg.id);
            }
            _ => {}
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

async fn lead(ctx: Arc<Ctx>, stop: watch::Receiver<bool>) {
    let since = Instant::now();
    // Commit an entry of our term so the applied state is current before acting on it.
    let _ = ctx.propose(Command::Noop, None).await;
    let (config_differs, missing_addresses) = {
        let r = ctx.raft.replica.read().expect("replica lock");
        let book = ctx.book.read().expect("book lock").clone();
        let missing: Vec<(u64, String)> = book
            .into_iter()
            .filter(|(id, addr)| r.state.controllers.get(id) != Some(addr))
            .collect();
        (r.state.config != ctx.cfg.scheduler, missing)
    };
    if config_differs {
        tracing::info!("committing this controller's scheduler configuration");
        let _ = ctx
            .propose(
                Command::SetConfig {
                    config: Box::new(ctx.cfg.scheduler.clone()),
                },
                None,
            )
            .await;
    }
    for (id, addr) in missing_addresses {
        let voter = ctx.raft.status.borrow().voters.contains(&id);
        if voter {
            let _ = ctx
                .propose(
                    Command::SetControllerAddress {
                        id,
                        address: Some(addr),
                    },
                    None,
                )
                .await;
        }
    }
    tokio::join!(
        scheduler_loop(ctx.clone(), stop.clone()),
        dispatcher_loop(ctx.clone(), stop.clone()),
        liveness_loop(ctx.clone(), stop.clone(), since)
    );
}

fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

async fn scheduler_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let mut cache = ViewCache::default();
    let mut status = ctx.raft.status.clone();
    let mut last_pass = Instant::now() - Duration::from_secs(10);
    let mut last_applied = u64::MAX;
    // Passes are spaced by a multiple of what the last one cost, so a stream of
    // submissions into a long queue cannot keep the replica lock (and with it the Raft
    // apply path) busy: the scheduler gets at most about a fifth of the leader's time.
    let mut min_gap = Duration::from_millis(30);
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            _ = status.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(1000)) => {}
        }
        if stopped(&stop) {
            return;
        }
        let since = last_pass.elapsed();
        if since < min_gap {
            tokio::time::sleep(min_gap - since).await;
        }
        let began = Instant::now();
        let snap = {
            let r = ctx.raft.replica.read().expect("replica lock");
            if r.applied == last_applied && last_pass.elapsed() < Duration::from_millis(900) {
                continue;
            }
            last_applied = r.applied;
            snapshot(&r.state, &mut cache)
        };
        last_pass = Instant::now();
        let now = now_ms();
        let Ok(p) = tokio::task::spawn_blocking(move || plan(&snap, now)).await else {
            continue;
        };
        min_gap =
            (began.elapsed() * 4).clamp(Duration::from_millis(30), Duration::from_millis(1000));
        let (starts, reasons) = {
            let r = ctx.raft.replica.read().expect("replica lock");
            let starts: Vec<StartJob> = p
                .starts
                .into_iter()
                .map(|s| StartJob {
                    job: s.job,
                    allocation: s.allocation,
                })
                .filter(|s| r.state.check_start(s).is_ok())
                .collect();
            let reasons: Vec<_> = p
                .reasons
                .into_iter()
                .filter(|(id, reason)| {
                    r.state
                        .jobs
                        .get(id)
                        .is_some_and(|j| j.state == JobState::Pending && &j.reason != reason)
                })
                .collect();
            (starts, reasons)
        };
        if let Ok(mut e) = ctx.estimates.write() {
            *e = p.estimates.into_iter().collect();
        }
        if !starts.is_empty() {
            let _ = ctx.propose(Command::StartJobs { starts }, None).await;
        }
        if !reasons.is_empty() {
            let _ = ctx
                .propose(Command::SetPendingReasons { reasons }, None)
                .await;
        }
        let mut by_job: HashMap<JobId, Vec<JobId>> = HashMap::new();
        for pre in p.preemptions {
            by_job.entry(pre.for_job).or_default().push(pre.victim);
        }
        for (for_job, victims) in by_job {
            tracing::info!("preempting {victims:?} for job {for_job}");
            let _ = ctx
                .propose(Command::Preempt { victims, for_job }, None)
                .await;
        }
    }
}

async fn dispatcher_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let mut status = ctx.raft.status.clone();
    let mut launched: HashMap<(JobId, u32, String), Instant> = HashMap::new();
    let mut killed: HashMap<(JobId, u32, String), Instant> = HashMap::new();
    let mut holding: HashMap<(JobId, u32), Instant> = HashMap::new();
    let mut held = false;
    loop {
        let tick = if held {
            Duration::from_millis(100)
        } else {
            Duration::from_millis(500)
        };
        tokio::select! {
            _ = stop.changed() => {}
            _ = status.changed() => {}
            _ = ctx.hub.changed.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        held = false;
        if stopped(&stop) {
            return;
        }
        let connected: HashMap<String, Vec<gsched_proto::agent::StepRef>> =
            ctx.hub.connected().into_iter().collect();
        let mut sends: Vec<(String, ControllerToAgent)> = Vec::new();
        {
            let r = ctx.raft.replica.read().expect("replica lock");
            let state = &r.state;
            for job in state
                .jobs
                .values()
                .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
            {
                let Some(alloc) = &job.allocation else {
                    continue;
                };
                for (rank, na) in alloc.nodes.iter().enumerate() {
                    let Some(running) = connected.get(&na.node) else {
                        continue;
                    };
                    let step = job.steps.iter().find(|s| s.node == na.node);
                    let reported = running
                        .iter()
                        .any(|s| s.job == job.id && s.attempt == job.restarts);
                    let key = (job.id, job.restarts, na.node.clone());
                    match job.state {
                        JobState::Running
                            if step.is_some_and(|s| s.state == StepState::Launching)
                                && !reported
                                && launched
                                    .get(&key)
                                    .is_none_or(|t| t.elapsed() > Duration::from_secs(3)) =>
                        {
                            let partition = job
                                .spec
                                .partition
                                .clone()
                                .unwrap_or_else(|| state.config.default_partition());
                            let time_limit_s = job.spec.time_limit_s.or(state
                                .config
                                .partition(&partition)
                                .and_then(|p| p.default_time_s));
                            let launch = LaunchSpec {
                                job: job.id,
                                array: job.array_task.map(|t| (t.array_job_id, t.task_id)),
                                attempt: job.restarts,
                                node_rank: rank as u32,
                                nodes: alloc.nodes.iter().map(|n| n.node.clone()).collect(),
                                spec: job.spec.clone(),
                                allocation: alloc.clone(),
                                node_alloc: na.clone(),
                                start_ms: job.start_ms.unwrap_or_else(now_ms),
                                time_limit_s,
                            };
                            launched.insert(key, Instant::now());
                            sends.push((
                                na.node.clone(),
                                ControllerToAgent::Launch(Box::new(launch)),
                            ));
                        }
                        JobState::Completing if step.is_some_and(|s| !s.state.is_done()) => {
                            // A peer's "remote process exited" is a symptom: give the
                            // node with the cause a moment to report it before the stop
                            // makes its evidence disappear.
                            let first_seen = *holding
                                .entry((job.id, job.restarts))
                                .or_insert_with(Instant::now);
                            if job.failure.as_ref().is_some_and(|f| f.points_elsewhere())
                                && first_seen.elapsed() < ctx.cfg.peer_report_wait
                            {
                                held = true;
                                continue;
                            }
                            if killed
                                .get(&key)
                                .is_none_or(|t| t.elapsed() > Duration::from_secs(2))
                            {
                                let failure = job.failure.as_ref();
                                let cause = match failure.map(|f| &f.kind) {
                                    Some(
                                        k @ (FailureKind::Cancelled
                                        | FailureKind::Timeout
                                        | FailureKind::Preempted),
                                    ) => k.clone(),
                                    _ => FailureKind::GangStopped,
                                };
                                let grace = if cause == FailureKind::GangStopped {
                                    ctx.cfg.gang_stop_grace_s
                                } else {
                                    ctx.cfg.kill_grace_s
                                };
                                let reason = failure
                                    .map(|f| f.to_string())
                                    .unwrap_or_else(|| "job ending".into());
                                killed.insert(key, Instant::now());
                                sends.push((
                                    na.node.clone(),
                                    ControllerToAgent::Kill {
                                        job: job.id,
                                        attempt: job.restarts,
                                        cause,
                                        reason,
                                        grace_s: grace,
                                    },
                                ));
                            }
                        }
                        _ => {}
                    }
                }
            }
            // Steps an agent runs that the committed state does not want running.
            for (node, running) in &connected {
                for s in running {
                    let wanted = state.jobs.get(&s.job).is_some_and(|j| {
                        j.restarts == s.attempt
                            && j.state == JobState::Running
                            && j.steps
                                .iter()
                                .any(|st| &st.node == node && !st.state.is_done())
                    });
                    let completing = state.jobs.get(&s.job).is_some_and(|j| {
                        j.restarts == s.attempt && j.state == JobState::Completing
                    });
                    let key = (s.job, s.attempt, node.clone());
                    if !wanted
                        && !completing
                        && killed
                            .get(&key)
                            .is_none_or(|t| t.elapsed() > Duration::from_secs(2))
                    {
                        killed.insert(key, Instant::now());
                        sends.push((
                            node.clone(),
                            ControllerToAgent::Kill {
                                job: s.job,
                                attempt: s.attempt,
                                cause: FailureKind::GangStopped,
                                reason: "the job is no longer running".into(),
                                grace_s: ctx.cfg.kill_grace_s,
                            },
                        ));
                    }
                }
            }
        }
        launched.retain(|_, t| t.elapsed() < Duration::from_secs(600));
        holding.retain(|_, t| t.elapsed() < Duration::from_secs(600));
        killed.retain(|_, t| t.elapsed() < Duration::from_secs(600));
        for (node, msg) in sends {
            ctx.hub.send(&node, &msg);
        }
    }
}

async fn liveness_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>, since: Instant) {
    let timeout = ctx.cfg.node_timeout;
    let mut last_backstop = Instant::now();
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if stopped(&stop) {
            return;
        }
        if since.elapsed() < timeout {
            continue;
        }
        let (lost, overdue) = {
            let r = ctx.raft.replica.read().expect("replica lock");
            let lost: Vec<String> = r
                .state
                .nodes
                .values()
                .filter(|n| n.online)
                .filter(|n| {
                    ctx.hub
                        .last_seen(&n.name)
                        .is_none_or(|t| t.elapsed() > timeout)
                })
                .map(|n| n.name.clone())
                .collect();
            let mut overdue = Vec::new();
            if last_backstop.elapsed() > Duration::from_secs(5) {
                last_backstop = Instant::now();
                let now = now_ms();
                for j in r
                    .state
                    .jobs
                    .values()
                    .filter(|j| j.state == JobState::Running)
                {
                    let limit = j.spec.time_limit_s.or_else(|| {
                        r.state
                            .config
                            .partition(j.spec.partition.as_deref().unwrap_or(""))
                            .and_then(|p| p.default_time_s)
                    });
                    if let (Some(limit), Some(start)) = (limit, j.start_ms)
                        && now > start + (limit + ctx.cfg.kill_grace_s + 30) * 1000
                    {
                        overdue.push((j.id, j.restarts));
                    }
                }
            }
            (lost, overdue)
        };
        for node in lost {
            tracing::warn!(
                "node {node} lost: no heartbeat for {:.1} s",
                timeout.as_secs_f64()
            );
            let _ = ctx
                .propose(
                    Command::NodeLost {
                        node,
                        reason: format!(
                            "no heartbeat from the agent for {:.1} s",
                            timeout.as_secs_f64()
                        ),
                    },
                    None,
                )
                .await;
        }
        for (job, attempt) in overdue {
            let _ = ctx
                .propose(Command::TimeoutJob { job, attempt }, None)
                .await;
        }
    }
}
