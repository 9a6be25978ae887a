//! The leader's decisions as pure functions of the committed state and of what the
//! leader knows about the connected agents: which launches and kills to send
//! ([`dispatch`]), which commands a scheduling plan becomes ([`commands_for`]), what the
//! silence of agents means ([`liveness`]), which jobs ran past their time limit
//! ([`overdue_jobs`]) and what the notification outbox claims and sends
//! ([`notify_round`], [`outgoing`]). The leader's loops only read the state, call these, propose and
//! send. Time comes in as arguments, never from a clock.

use crate::command::{
    CancelUnsatisfiable, Command, EndPastDeadline, NodeLost, NodeResponding, Preempt,
    SetPendingReasons, StartJob, StartJobs,
};
use crate::command::{NoticeRef, NoticeResult, TimeoutJob};
use crate::machine::ClusterState;
use gsched_scheduler::Plan;
use gsched_types::agent::{ControllerToAgent, KillRun, LaunchSpec, RunRef};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobRecord, JobState, PendingReason, RunState};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Timings of the dispatcher.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// SIGTERM to SIGKILL for cancelled, timed-out and preempted jobs.
    pub kill_grace_s: u64,
    /// SIGTERM to SIGKILL when a gang is stopped because another node failed.
    pub gang_stop_grace_s: u64,
    /// How long a failure that only blames a peer waits for the peer's own report.
    pub peer_report_wait: Duration,
    /// A launch the agent has not confirmed is sent again after this long.
    pub relaunch_after: Duration,
    /// A kill whose node run still goes on is sent again after this long.
    pub rekill_after: Duration,
    /// The idle-GPU policy, whose threshold each launch carries to its node.
    pub idle: Option<crate::idle::IdlePolicy>,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            kill_grace_s: 10,
            gang_stop_grace_s: 3,
            peer_report_wait: Duration::from_millis(1500),
            relaunch_after: Duration::from_secs(3),
            rekill_after: Duration::from_secs(2),
            idle: None,
        }
    }
}

type StepKey = (JobId, u32, String);

/// What the dispatcher sent recently, so it neither floods agents nor forgets to retry.
#[derive(Debug, Default)]
pub struct DispatchMemo {
    launched: BTreeMap<StepKey, Instant>,
    killed: BTreeMap<StepKey, Instant>,
    /// When a job was first seen ending (for the peer-report wait).
    ending_since: BTreeMap<(JobId, u32), Instant>,
}

impl DispatchMemo {
    fn due(
        sent: &BTreeMap<StepKey, Instant>,
        key: &StepKey,
        after: Duration,
        now: Instant,
    ) -> bool {
        sent.get(key)
            .is_none_or(|t| now.saturating_duration_since(*t) > after)
    }

    /// Drops what is older than ten minutes.
    fn expire(&mut self, now: Instant) {
        let keep = |t: &Instant| now.saturating_duration_since(*t) < Duration::from_secs(600);
        self.launched.retain(|_, t| keep(t));
        self.killed.retain(|_, t| keep(t));
        self.ending_since.retain(|_, t| keep(t));
    }
}

/// One round of the dispatcher.
#[derive(Debug, Default, PartialEq)]
pub struct Dispatch {
    /// (node, message) in the order to send them.
    pub sends: Vec<(String, ControllerToAgent)>,
    /// A gang stop is held back waiting for a peer's report: run again soon.
    pub waiting: bool,
}

/// How a node run is stopped: the kind its exit is reported as, the grace between SIGTERM and
/// SIGKILL, and the reason the agent logs.
#[derive(Debug, Clone, PartialEq)]
pub struct KillOrder {
    pub cause: FailureKind,
    pub grace_s: u64,
    pub reason: String,
}

/// The kill order for the node runs of a job ending with `failure`: a cancel, a time limit
/// or a preemption is what the run's own exit is reported as, with the full grace;
/// anything else stops the rest of the gang quickly, as `GangStopped`.
pub fn kill_order(failure: Option<&Failure>, cfg: &DispatchConfig) -> KillOrder {
    let cause = match failure.map(|f| &f.kind) {
        Some(
            k @ (FailureKind::Cancelled
            | FailureKind::IdleGpus
            | FailureKind::Timeout
            | FailureKind::Preempted),
        ) => k.clone(),
        _ => FailureKind::GangStopped,
    };
    let grace_s = if cause == FailureKind::GangStopped {
        cfg.gang_stop_grace_s
    } else {
        cfg.kill_grace_s
    };
    let reason = failure
        .map(|f| f.to_string())
        .unwrap_or_else(|| "job ending".into());
    KillOrder {
        cause,
        grace_s,
        reason,
    }
}

/// What node rank `rank` of a running job is told to start.
pub fn launch_spec(
    state: &ClusterState,
    job: &JobRecord,
    rank: usize,
    cfg: &DispatchConfig,
) -> Option<LaunchSpec> {
    let alloc = job.allocation.as_ref()?;
    Some(LaunchSpec {
        job: job.id,
        array: job.array_task.map(|t| (t.array_job_id, t.task_id)),
        array_span: job.array_task.and_then(|t| t.span),
        attempt: job.attempt,
        node_rank: rank as u32,
        nodes: alloc.nodes.iter().map(|n| n.node.clone()).collect(),
        spec: {
            // The tasks name the partition the job runs in, the default one included.
            let mut spec = state.full_spec(job);
            spec.partition = Some(state.config.partition_of(&job.spec));
            spec
        },
        allocation: alloc.clone(),
        node_alloc: alloc.nodes.get(rank)?.clone(),
        start_ms: job.start_ms.unwrap_or(state.clock_ms),
        time_limit_s: state.config.time_limit_for(&job.spec),
        kill_grace_s: Some(cfg.kill_grace_s),
        idle_threshold_pct: cfg
            .idle
            .as_ref()
            .and_then(|p| p.rule_for(job, &state.config.partition_of(&job.spec)))
            .map(|r| r.threshold_pct),
    })
}

fn kill(job: JobId, attempt: u32, order: KillOrder) -> ControllerToAgent {
    ControllerToAgent::Kill {
        job,
        attempt,
        cause: order.cause,
        reason: order.reason,
        grace_s: order.grace_s,
    }
}

/// Folds the kills a round sends to one node into one `Kills` message; every other
/// message, and a node's only kill, goes as it was, in order (a node's batch where its
/// first kill was).
pub fn batch_kills(sends: Vec<(String, ControllerToAgent)>) -> Vec<(String, ControllerToAgent)> {
    let mut kills_per_node: BTreeMap<String, usize> = BTreeMap::new();
    for (node, msg) in &sends {
        if matches!(msg, ControllerToAgent::Kill { .. }) {
            *kills_per_node.entry(node.clone()).or_default() += 1;
        }
    }
    let mut out: Vec<(String, ControllerToAgent)> = Vec::with_capacity(sends.len());
    let mut batch_at: BTreeMap<String, usize> = BTreeMap::new();
    for (node, msg) in sends {
        let batched = kills_per_node.get(&node).is_some_and(|n| *n > 1);
        let one = match msg {
            ControllerToAgent::Kill {
                job,
                attempt,
                cause,
                reason,
                grace_s,
            } if batched => KillRun {
                job,
                attempt,
                cause,
                reason,
                grace_s,
            },
            other => {
                out.push((node, other));
                continue;
            }
        };
        match batch_at.get(&node) {
            Some(&i) => {
                if let ControllerToAgent::Kills { kills } = &mut out[i].1 {
                    kills.push(one);
                }
            }
            None => {
                batch_at.insert(node.clone(), out.len());
                out.push((node, ControllerToAgent::Kills { kills: vec![one] }));
            }
        }
    }
    out
}

/// Launches for committed starts an agent has not confirmed, kills for the node runs of
/// ending jobs, and kills for runs an agent keeps that the committed state does not want
/// running. `connected`: the connected agents and the runs each reports running.
pub fn dispatch(
    state: &ClusterState,
    connected: &BTreeMap<String, Vec<RunRef>>,
    memo: &mut DispatchMemo,
    cfg: &DispatchConfig,
    now: Instant,
) -> Dispatch {
    let mut out = Dispatch::default();
    for job in state.allocated_jobs() {
        let Some(alloc) = &job.allocation else {
            continue;
        };
        for (rank, na) in alloc.nodes.iter().enumerate() {
            let Some(running) = connected.get(&na.node) else {
                continue;
            };
            let run = job.runs.iter().find(|s| s.node == na.node);
            let reported = running
                .iter()
                .any(|s| s.job == job.id && s.attempt == job.attempt);
            let key = (job.id, job.attempt, na.node.clone());
            match job.state {
                JobState::Running
                    if run.is_some_and(|s| s.state == RunState::Launching)
                        && !reported
                        && DispatchMemo::due(&memo.launched, &key, cfg.relaunch_after, now) =>
                {
                    if let Some(launch) = launch_spec(state, job, rank, cfg) {
                        memo.launched.insert(key, now);
                        out.sends
                            .push((na.node.clone(), ControllerToAgent::Launch(Box::new(launch))));
                    }
                }
                JobState::Completing if run.is_some_and(|s| !s.state.is_done()) => {
                    // A peer's "remote process exited" is a symptom: give the node with
                    // the cause a moment to report it before the stop makes its evidence
                    // disappear.
                    let first_seen = *memo
                        .ending_since
                        .entry((job.id, job.attempt))
                        .or_insert(now);
                    if job.failure.as_ref().is_some_and(|f| f.points_elsewhere())
                        && now.saturating_duration_since(first_seen) < cfg.peer_report_wait
                    {
                        out.waiting = true;
                        continue;
                    }
                    if DispatchMemo::due(&memo.killed, &key, cfg.rekill_after, now) {
                        memo.killed.insert(key, now);
                        let order = kill_order(job.failure.as_ref(), cfg);
                        out.sends
                            .push((na.node.clone(), kill(job.id, job.attempt, order)));
                    }
                }
                _ => {}
            }
        }
    }
    for (node, running) in connected {
        for s in running {
            let job = state.jobs.get(&s.job).filter(|j| j.attempt == s.attempt);
            let wanted = job.is_some_and(|j| {
                j.state == JobState::Running
                    && j.runs
                        .iter()
                        .any(|st| &st.node == node && !st.state.is_done())
            });
            let completing = job.is_some_and(|j| j.state == JobState::Completing);
            let key = (s.job, s.attempt, node.clone());
            if !wanted
                && !completing
                && DispatchMemo::due(&memo.killed, &key, cfg.rekill_after, now)
            {
                memo.killed.insert(key, now);
                let order = KillOrder {
                    cause: FailureKind::GangStopped,
                    grace_s: cfg.kill_grace_s,
                    reason: "the job is no longer running".into(),
                };
                out.sends
                    .push((node.clone(), kill(s.job, s.attempt, order)));
            }
        }
    }
    memo.expire(now);
    out
}

/// The commands a scheduling plan becomes against the latest committed state: starts
/// that still fit (re-checked with `check_start`), pending reasons that changed, and one
/// preemption per job that needs room. The plan's estimates are not commands.
pub fn commands_for(plan: Plan, state: &ClusterState) -> Vec<Command> {
    let mut out = Vec::new();
    let starts: Vec<StartJob> = plan
        .starts
        .into_iter()
        .map(|s| StartJob {
            job: s.job,
            allocation: s.allocation,
            time_limit_s: s.time_limit_s,
        })
        .filter(|s| state.check_start(s).is_ok())
        .collect();
    if !starts.is_empty() {
        out.push(Command::StartJobs(StartJobs { starts }));
    }
    let unsatisfiable: Vec<JobId> = plan
        .reasons
        .iter()
        .filter(|(_, r)| *r == PendingReason::DependencyNeverSatisfied)
        .map(|(id, _)| *id)
        // The job's --kill-on-invalid-dep, else the cluster's setting.
        .filter(|id| {
            state
                .jobs
                .get(id)
                .and_then(|j| j.spec.kill_on_invalid_dep)
                .unwrap_or(!state.config.keep_invalid_depend)
        })
        .collect();
    if !unsatisfiable.is_empty() {
        out.push(Command::CancelUnsatisfiable(CancelUnsatisfiable {
            jobs: unsatisfiable,
        }));
    }
    let reasons: Vec<_> = plan
        .reasons
        .into_iter()
        .filter(|(id, reason)| {
            state
                .jobs
                .get(id)
                .is_some_and(|j| j.state == JobState::Pending && &j.reason != reason)
        })
        .collect();
    if !reasons.is_empty() {
        out.push(Command::SetPendingReasons(SetPendingReasons { reasons }));
    }
    let mut by_job: BTreeMap<JobId, Vec<JobId>> = BTreeMap::new();
    for p in plan.preemptions {
        by_job.entry(p.for_job).or_default().push(p.victim);
    }
    for (for_job, victims) in by_job {
        out.push(Command::Preempt(Preempt { victims, for_job }));
    }
    out
}

/// How long a node's agent may be silent: after `not_responding` it takes no new job
/// (its jobs keep running: an agent restart or a short network cut costs nothing); after
/// `lost` it is out of service and its jobs end (`NODE_FAIL`, requeued if asked). The
/// agent stops its own runs a little before `lost` (its lease), so a requeued job never
/// runs twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub not_responding: Duration,
    pub lost: Duration,
}

impl Liveness {
    /// How long an agent that hears nothing keeps its runs: the lost timeout less a
    /// margin (a quarter of it, at most 10 s).
    pub fn lease(&self) -> Duration {
        self.lost - (self.lost / 4).min(Duration::from_secs(10))
    }
}

/// What the silence of agents means now: nodes that stopped or resumed answering and
/// nodes lost. `silent_for(node)`: how long since this leader last heard the agent (for
/// one never heard: since this controller became the leader).
pub fn liveness(
    state: &ClusterState,
    silent_for: impl Fn(&str) -> Duration,
    limits: Liveness,
) -> Vec<Command> {
    let mut out = Vec::new();
    for n in state.nodes.values().filter(|n| n.online) {
        let silent = silent_for(&n.name);
        if silent > limits.lost {
            out.push(Command::NodeLost(NodeLost {
                node: n.name.clone(),
                reason: format!(
                    "no word from the agent for {:.0} s (the dead-node timeout)",
                    limits.lost.as_secs_f64()
                ),
            }));
        } else if (silent > limits.not_responding) == n.responding {
            out.push(Command::NodeResponding(NodeResponding {
                node: n.name.clone(),
                responding: !n.responding,
            }));
        }
    }
    out
}

/// One round of the leader's notification outbox, decided from the committed state.
#[derive(Debug, Default, PartialEq)]
pub struct NotifyRound {
    /// Notices to claim (due ones, and shares of time limits crossed by now): the claim
    /// is committed before anything is sent.
    pub claim: Vec<NoticeRef>,
    /// Notices this controller claimed while leading in this term: its outbox delivers
    /// each once.
    pub claimed: Vec<NoticeRef>,
    /// Claims of another leader, or of an earlier term, unresolved for longer than the
    /// delivery could take: recorded as not known to be delivered, never sent again.
    pub in_doubt: Vec<NoticeResult>,
}

fn notice_ref(job: &JobRecord, n: &gsched_types::notify::Notice) -> NoticeRef {
    NoticeRef {
        job: job.id,
        attempt: n.attempt,
        event: n.event,
        array: n.array,
    }
}

/// What the outbox of controller `me`, leading in `term`, does at `now_ms`; a claim
/// older than `in_doubt_after_ms` that is not its own is put down as in doubt.
pub fn notify_round(
    state: &ClusterState,
    me: u64,
    term: u64,
    now_ms: u64,
    in_doubt_after_ms: u64,
) -> NotifyRound {
    use gsched_types::notify::{Delivery, NoticeState};
    let mut out = NotifyRound::default();
    for job in state.notifying_jobs() {
        for n in &job.notices {
            match n.state {
                NoticeState::Due => out.claim.push(notice_ref(job, n)),
                NoticeState::Sending { by, term: t, .. } if by == me && t == term => {
                    out.claimed.push(notice_ref(job, n));
                }
                NoticeState::Sending {
                    by,
                    term: t,
                    since_ms,
                } if now_ms.saturating_sub(since_ms) >= in_doubt_after_ms => {
                    let error = format!(
                        "not known to have been delivered: controller {by} claimed it while leading in term {t} and stopped leading before it recorded the outcome; not sent again (at most once)"
                    );
                    let targets = crate::notify::targets(job, state.user_notify(&job.spec.user));
                    out.in_doubt.push(NoticeResult {
                        notice: notice_ref(job, n),
                        deliveries: targets
                            .into_iter()
                            .map(|to| Delivery {
                                to,
                                error: Some(error.clone()),
                            })
                            .collect(),
                    });
                }
                _ => {}
            }
        }
    }
    for job in state
        .allocated_jobs()
        .filter(|j| j.state == JobState::Running)
    {
        let wants = crate::notify::wanted(job, state.user_notify(&job.spec.user));
        if !wants.iter().any(|t| t.time_limit_pct().is_some()) {
            continue;
        }
        let limit = state.config.time_limit_for(&job.spec);
        for d in crate::notify::time_limit_due(job, limit, wants, now_ms) {
            out.claim.push(NoticeRef {
                job: job.id,
                attempt: d.attempt,
                event: d.event,
                array: d.array,
            });
        }
    }
    out
}

/// A claimed notice ready to go: where to, and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub notice: NoticeRef,
    pub targets: Vec<gsched_types::notify::NotifyTarget>,
    pub message: gsched_types::notify::NotifyMessage,
}

/// The targets and message of notice `r` as the committed state has it now.
pub fn outgoing(state: &ClusterState, r: &NoticeRef) -> Option<Outgoing> {
    let job = state.jobs.get(&r.job)?;
    let notice = job
        .notices
        .iter()
        .find(|n| n.is(r.attempt, r.event, r.array))?;
    let tasks = if notice.array {
        state.array_tasks(job)
    } else {
        Vec::new()
    };
    Some(Outgoing {
        notice: r.clone(),
        targets: crate::notify::targets(job, state.user_notify(&job.spec.user)),
        message: crate::notify::message(job, notice, &tasks),
    })
}

/// Pending jobs whose shortest run (`--time-min`, else their time limit) from `now_ms`
/// would pass their `--deadline`: to be ended DEADLINE.
pub fn past_deadline(state: &ClusterState, now_ms: u64) -> Option<EndPastDeadline> {
    let jobs: Vec<JobId> = state
        .jobs
        .values()
        .filter(|j| j.state == JobState::Pending)
        .filter(|j| {
            j.spec.deadline_ms.is_some_and(|deadline| {
                let shortest = j
                    .spec
                    .time_min_s
                    .or_else(|| state.config.time_limit_for(&j.spec))
                    .unwrap_or(0);
                now_ms.saturating_add(shortest.saturating_mul(1000)) > deadline
            })
        })
        .map(|j| j.id)
        .collect();
    (!jobs.is_empty()).then_some(EndPastDeadline { jobs })
}

/// Running jobs past their time limit by more than `slack_s` (the agent should have
/// stopped them: the controller's backstop).
pub fn overdue_jobs(state: &ClusterState, now_ms: u64, slack_s: u64) -> Vec<TimeoutJob> {
    state
        .allocated_jobs()
        .filter(|j| j.state == JobState::Running)
        .filter_map(|j| {
            let limit = state.config.time_limit_for(&j.spec)?;
            let start = j.start_ms?;
            (now_ms > start + (limit + slack_s) * 1000).then_some(TimeoutJob {
                job: j.id,
                attempt: j.attempt,
            })
        })
        .collect()
}
