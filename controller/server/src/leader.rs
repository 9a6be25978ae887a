//! Work only the leader does: scheduling passes, sending launches and kills to agents,
//! declaring silent nodes lost, the time-limit backstop, and the notification outbox
//! (`notify.rs`). Started when this controller
//! becomes leader and stopped when it stops being one; everything is level-triggered from
//! the committed state, so a new leader simply picks up where the old one left off. The
//! decisions themselves are pure functions in `gsched_state::decide`; these loops read,
//! decide, propose and send.

use crate::ctx::Ctx;
use gsched_proto::clock::now_ms;
use gsched_scheduler::plan;
use gsched_state::decide::{self, DispatchMemo};
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::{Command, SetConfig, SetControllerAddress};
use gsched_types::api::Role;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Starts and stops the leader loops as leadership comes and goes.
pub async fn watch_leadership(ctx: Arc<Ctx>) {
    let mut status = ctx.raft.status.clone();
    let mut stop: Option<watch::Sender<bool>> = None;
    loop {
        let leader = status.borrow().role == Role::Leader;
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
    propose_logged(&ctx, Command::Noop).await;
    let (config_differs, missing_addresses) = {
        let r = ctx.raft.replica.read();
        let book = ctx.book.read().clone();
        let missing: Vec<(u64, String)> = book
            .into_iter()
            .filter(|(id, addr)| r.state.controllers.get(id) != Some(addr))
            .collect();
        (r.state.config_differs_from(&ctx.cfg.scheduler), missing)
    };
    if config_differs {
        tracing::info!("committing this controller's scheduler configuration");
        let config = Box::new(ctx.cfg.scheduler.clone());
        propose_logged(&ctx, Command::SetConfig(SetConfig { config })).await;
    }
    for (id, addr) in missing_addresses {
        let voter = ctx.raft.status.borrow().voters.contains(&id);
        if voter {
            let address = Some(addr);
            let cmd = Command::SetControllerAddress(SetControllerAddress { id, address });
            propose_logged(&ctx, cmd).await;
        }
    }
    tokio::join!(
        scheduler_loop(ctx.clone(), stop.clone()),
        dispatcher_loop(ctx.clone(), stop.clone()),
        liveness_loop(ctx.clone(), stop.clone(), since),
        crate::notify::outbox_loop(ctx.clone(), stop.clone())
    );
}

fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// Proposes a command of the leader's own; one that is not committed is logged and
/// counted (the loops are level-triggered: the next round decides again from the state).
async fn propose_logged(ctx: &Ctx, cmd: Command) {
    let name = cmd.name();
    if let Err(e) = ctx.propose(cmd, None).await {
        ctx.telemetry.leader_proposals_failed.inc();
        tracing::warn!(
            command = name,
            "the leader's {name} was not committed: {}",
            e.message()
        );
    }
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
            let r = ctx.raft.replica.read();
            if r.applied == last_applied && last_pass.elapsed() < Duration::from_millis(900) {
                continue;
            }
            last_applied = r.applied;
            let mut snap = snapshot(&r.state, &mut cache);
            // GPUs the agents see used outside jobs are given to no new job.
            let outside = ctx.hub.outside_gpus();
            for n in &mut snap.nodes {
                n.outside_gpus = outside.get(&n.name).cloned().unwrap_or_default();
            }
            snap
        };
        last_pass = Instant::now();
        let now = now_ms();
        let pass = tokio::task::spawn_blocking(move || {
            let p = plan(&snap, now);
            // How long each job the plan starts has waited since it became eligible.
            let waited: Vec<u64> = p
                .starts
                .iter()
                .filter_map(|s| snap.pending.iter().find(|j| j.id == s.job))
                .map(|j| now.saturating_sub(j.eligible_ms))
                .collect();
            (p, waited, snap.pending.len())
        })
        .await;
        let (mut p, waited, pending) = match pass {
            Ok(done) => done,
            Err(e) => {
                ctx.telemetry.pass_panics.inc();
                tracing::error!(
                    "the scheduling pass failed ({e}); this is a bug, please report it with the log above: no job starts until a pass succeeds"
                );
                continue;
            }
        };
        let t = &ctx.telemetry;
        t.pass_seconds.observe(began.elapsed().as_secs_f64());
        t.pass_pending.set(pending as i64);
        for ms in waited {
            t.queue_wait_seconds.observe(ms as f64 / 1000.0);
        }
        min_gap =
            (began.elapsed() * 4).clamp(Duration::from_millis(30), Duration::from_millis(1000));
        *ctx.estimates.write() = std::mem::take(&mut p.estimates).into_iter().collect();
        let commands = decide::commands_for(p, &ctx.raft.replica.read().state);
        for cmd in commands {
            if let Command::Preempt(pre) = &cmd {
                tracing::info!("preempting {:?} for job {}", pre.victims, pre.for_job);
            }
            propose_logged(&ctx, cmd).await;
        }
    }
}

async fn dispatcher_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let mut status = ctx.raft.status.clone();
    let mut memo = DispatchMemo::default();
    let cfg = ctx.cfg.dispatch.clone();
    let mut waiting = false;
    loop {
        // While a gang stop waits for a peer's report, look again soon.
        let tick = Duration::from_millis(if waiting { 100 } else { 500 });
        tokio::select! {
            _ = stop.changed() => {}
            _ = status.changed() => {}
            _ = ctx.hub.changed.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        if stopped(&stop) {
            return;
        }
        let connected: BTreeMap<_, _> = ctx.hub.connected().into_iter().collect();
        let round = {
            let r = ctx.raft.replica.read();
            decide::dispatch(&r.state, &connected, &mut memo, &cfg, Instant::now())
        };
        waiting = round.waiting;
        for (node, msg) in decide::batch_kills(round.sends) {
            ctx.hub.send(&node, &msg);
        }
    }
}

async fn liveness_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>, since: Instant) {
    let limits = ctx.cfg.liveness;
    // The agent stops a job at its limit; the controller steps in only after the kill
    // grace and half a minute more.
    let slack_s = ctx.cfg.dispatch.kill_grace_s + 30;
    let mut last_backstop = Instant::now();
    let mut last_idle = Instant::now();
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if stopped(&stop) {
            return;
        }
        let mut commands: Vec<Command> = {
            let r = ctx.raft.replica.read();
            // Agents never heard by this leader have been silent since it took over.
            let silent_for = |node: &str| {
                ctx.hub
                    .last_seen(node)
                    .map_or(since.elapsed(), |t| t.elapsed())
            };
            decide::liveness(&r.state, silent_for, limits)
        };
        for c in &commands {
            tracing::warn!("{c:?}");
        }
        if let Some(policy) = &ctx.cfg.dispatch.idle
            && last_idle.elapsed() >= Duration::from_secs(1)
        {
            last_idle = Instant::now();
            let idle = {
                let r = ctx.raft.replica.read();
                gsched_state::idle::decide(&r.state, policy, now_ms())
            };
            for c in &idle {
                notify_idle(&ctx, policy, c);
            }
            commands.extend(idle);
        }
        if last_backstop.elapsed() > Duration::from_secs(5) {
            last_backstop = Instant::now();
            let r = ctx.raft.replica.read();
            commands.extend(
                decide::overdue_jobs(&r.state, now_ms(), slack_s)
                    .into_iter()
                    .map(Command::TimeoutJob),
            );
            commands
                .extend(decide::past_deadline(&r.state, now_ms()).map(Command::EndPastDeadline));
        }
        for cmd in commands {
            propose_logged(&ctx, cmd).await;
        }
    }
}

/// Logs an idle-GPU warning or cancel and runs the policy's notify command for it.
fn notify_idle(ctx: &Ctx, policy: &gsched_state::idle::IdlePolicy, cmd: &Command) {
    let Command::IdleGpus(c) = cmd else {
        return;
    };
    let (user, batch_node) = ctx
        .raft
        .replica
        .read()
        .state
        .jobs
        .get(&c.job)
        .map(|j| (j.spec.user.clone(), j.node_names().into_iter().next()))
        .unwrap_or_default();
    let message = if c.cancel {
        format!("job {} cancelled (IdleGPUs): {}", c.job, c.notice.evidence)
    } else {
        format!("job {}: {}", c.job, c.notice.message())
    };
    tracing::warn!("idle-GPU policy: {message}");
    if let Some(node) = batch_node.filter(|n| ctx.hub.takes_notices(n)) {
        let text = if c.cancel {
            format!(
                "gsched: *** JOB {} CANCELLED (IdleGPUs): {} ***",
                c.job, c.notice.evidence
            )
        } else {
            format!("gsched: warning: {message}")
        };
        ctx.hub.send(
            &node,
            &gsched_types::agent::ControllerToAgent::Notice {
                job: c.job,
                attempt: c.attempt,
                text,
            },
        );
    }
    let Some(command) = &policy.notify else {
        return;
    };
    let spawned = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env("GSCHED_IDLE_JOB", c.job.to_string())
        .env("GSCHED_IDLE_USER", user)
        .env(
            "GSCHED_IDLE_ACTION",
            if c.cancel { "cancel" } else { "warn" },
        )
        .env("GSCHED_IDLE_MESSAGE", &message)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn();
    match spawned {
        Ok(mut child) => {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
        Err(e) => tracing::warn!("idle-GPU notify command '{command}' could not start: {e}"),
    }
}
