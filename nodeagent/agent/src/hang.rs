//! Hangs without words, as a pure decision: a multi-rank job in which a rank failed
//! (exited non-zero, or printed a traceback or an error line) while the ranks still
//! running went silent, with their GPUs under a few percent and their CPUs idle, is
//! stopped as `Hang` (`FailureKind::Hang`), the first error line its evidence. The same
//! silence without an error is a job loading data or compiling, or one that is merely
//! quiet, and is kept; so is one whose CPUs are busy, and a single-rank job (no rank
//! waits for another).
//!
//! It is decided per node: the ranks of this node run, their exits (the supervisor
//! records each task's end as it happens), this node's output and the usage samples the
//! agent already takes for the idle-GPU policy (`RunManager::sample_usage`, taken more
//! often while a run is suspect). A rank on another node that exits ends that node's run
//! with a failure, and the controller stops the gang; a rank there that errs and hangs is
//! seen by its own node, whose `Hang` stops the gang the same way.

use std::time::Duration;

/// `gagentd --hang-after`, `--hang-after-exit`.
#[derive(Debug, Clone, PartialEq)]
pub struct HangSettings {
    /// Silence after an error line before the job is stopped; zero turns the watch off.
    pub after: Duration,
    /// Silence after a rank exited non-zero (shorter: that rank will never answer).
    pub after_exit: Duration,
    /// How long a run goes on after a fatal line (an NCCL or CUDA error, a rendezvous
    /// that failed) before it is stopped for it (`--fatal-grace`): a program that ends by
    /// itself meanwhile ends as it would anywhere, its script's status kept and the line
    /// the failure's evidence; one still running is stopped (NCCL's hangs keep the GPUs
    /// busy, so the silence watch alone would not end them).
    pub after_fatal: Duration,
    /// A GPU under this utilisation (percent) is idle.
    pub gpu_idle_pct: u8,
    /// CPU time growing by at least this share of one core (percent) is a busy job.
    pub cpu_busy_pct: u64,
}

impl Default for HangSettings {
    fn default() -> HangSettings {
        HangSettings {
            after: Duration::from_secs(60),
            after_exit: Duration::from_secs(15),
            after_fatal: Duration::from_secs(10),
            gpu_idle_pct: 5,
            cpu_busy_pct: 10,
        }
    }
}

impl HangSettings {
    pub fn enabled(&self) -> bool {
        !self.after.is_zero()
    }

    /// How often a suspect run's GPUs and CPU time are sampled: a few samples within the
    /// shorter window, at most every 5 s.
    pub fn sample_every(&self) -> Duration {
        let shortest = self.after_exit.min(self.after).max(Duration::from_secs(1));
        (shortest / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
    }
}

/// How one task of this node's run ended, when it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankExit {
    /// When the agent saw it end (ms on this node's clock).
    pub at_ms: u64,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl RankExit {
    pub fn failed(&self) -> bool {
        self.signal.is_some() || self.code.is_some_and(|c| c != 0)
    }

    fn describe(&self) -> String {
        match (self.code, self.signal) {
            (_, Some(s)) => format!("was killed by signal {s}"),
            (Some(c), _) => format!("exited with code {c}"),
            (None, None) => "ended".into(),
        }
    }
}

/// One task of this node's run: its global rank and its end, if it has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub exited: Option<RankExit>,
}

/// An error line seen in this node's output, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorSeen {
    pub line: String,
    pub at_ms: u64,
}

/// One usage sample of the run: the busiest of its GPUs (`None`: none could be read) and
/// the CPU time its processes have used (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: u64,
    pub gpu_max_pct: Option<u8>,
    pub cpu_ms: Option<u64>,
}

/// What the decision looks at.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// Ranks of the job on every node (1: a single-rank job).
    pub world: u32,
    /// This node's tasks.
    pub ranks: &'a [Rank],
    /// When this node's output last grew (the run's start when it never did).
    pub last_output_ms: u64,
    /// The first error line this node's output showed.
    pub error: Option<&'a ErrorSeen>,
    /// GPUs the run holds on this node.
    pub gpus: usize,
    /// Usage samples, oldest first.
    pub samples: &'a [Sample],
    pub now_ms: u64,
}

/// Why a run is kept (for tests and the agent's debug log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Disabled,
    SingleRank,
    /// Every task here has ended: the run's own end is reported.
    NothingRunning,
    /// No rank failed and no error line was printed: loading, compiling, quiet.
    NoError,
    /// Silent for less than the window.
    NotYet,
    /// No GPU sample taken since the silence began.
    NoGpuSample,
    GpuBusy,
    /// Fewer than two CPU readings a second apart since the silence began.
    NoCpuSample,
    CpuBusy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Keep(Keep),
    /// Stop the run as hung, with this evidence.
    Stop(String),
}

/// Whether the run looks hung. Pure: the agent gathers the inputs.
pub fn decide(s: &HangSettings, i: &Inputs) -> Verdict {
    use Keep::*;
    if !s.enabled() {
        return Verdict::Keep(Disabled);
    }
    if i.world <= 1 {
        return Verdict::Keep(SingleRank);
    }
    let running: Vec<u32> = i
        .ranks
        .iter()
        .filter(|r| r.exited.is_none())
        .map(|r| r.rank)
        .collect();
    if running.is_empty() {
        return Verdict::Keep(NothingRunning);
    }
    let failed = i
        .ranks
        .iter()
        .filter_map(|r| Some((r.rank, r.exited.filter(RankExit::failed)?)))
        .min_by_key(|(_, x)| x.at_ms);
    let (window, trigger_ms) = match (failed, i.error) {
        (Some((_, x)), _) => (s.after_exit, x.at_ms),
        (None, Some(e)) => (s.after, e.at_ms),
        (None, None) => return Verdict::Keep(NoError),
    };
    let window_ms = window.as_millis() as u64;
    let since = i.last_output_ms.max(trigger_ms);
    let quiet_ms = i.now_ms.saturating_sub(since);
    if quiet_ms < window_ms {
        return Verdict::Keep(NotYet);
    }
    let recent_from = i.now_ms.saturating_sub(window_ms);
    let during: Vec<&Sample> = i
        .samples
        .iter()
        .filter(|x| x.at_ms >= since && x.at_ms <= i.now_ms)
        .collect();
    let mut gpu_max = None;
    if i.gpus > 0 {
        let read: Vec<(u64, u8)> = during
            .iter()
            .filter_map(|x| Some((x.at_ms, x.gpu_max_pct?)))
            .collect();
        // The samples of the last window; when none was taken in it, the newest since
        // the silence began.
        let mut recent: Vec<u8> = read
            .iter()
            .filter(|(at, _)| *at >= recent_from)
            .map(|(_, p)| *p)
            .collect();
        if recent.is_empty() {
            recent.extend(read.last().map(|(_, p)| *p));
        }
        let Some(max) = recent.iter().copied().max() else {
            return Verdict::Keep(NoGpuSample);
        };
        if max >= s.gpu_idle_pct {
            return Verdict::Keep(GpuBusy);
        }
        gpu_max = Some(max);
    }
    let cpu: Vec<(u64, u64)> = during
        .iter()
        .filter_map(|x| Some((x.at_ms, x.cpu_ms?)))
        .collect();
    // From the last reading at or before the window's start (else the first since the
    // silence began) to the newest.
    let base = cpu
        .iter()
        .rev()
        .find(|(at, _)| *at <= recent_from)
        .or(cpu.first());
    let (Some(&(t0, c0)), Some(&(t1, c1))) = (base, cpu.last()) else {
        return Verdict::Keep(NoCpuSample);
    };
    if t1 < t0 + 1000 {
        return Verdict::Keep(NoCpuSample);
    }
    let cpu_pct = c1.saturating_sub(c0) * 100 / (t1 - t0);
    if cpu_pct >= s.cpu_busy_pct {
        return Verdict::Keep(CpuBusy);
    }
    let mut parts = Vec::new();
    if let Some(e) = i.error {
        parts.push(format!("first error: {}", e.line));
    }
    if let Some((rank, x)) = failed {
        parts.push(format!("rank {rank} {}", x.describe()));
    }
    let names: Vec<String> = running.iter().map(u32::to_string).collect();
    let gpus = match gpu_max {
        Some(max) => format!(" with GPUs at most {max}%"),
        None => String::new(),
    };
    parts.push(format!(
        "the ranks still running here ({}) stayed silent for {} s{gpus} and CPU at {cpu_pct}% of a core",
        names.join(", "),
        quiet_ms / 1000
    ));
    Verdict::Stop(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000_000;

    fn settings() -> HangSettings {
        HangSettings::default()
    }

    fn rank(rank: u32, exit: Option<(u64, i32)>) -> Rank {
        Rank {
            rank,
            exited: exit.map(|(at_ms, code)| RankExit {
                at_ms,
                code: Some(code),
                signal: None,
            }),
        }
    }

    /// Samples every 5 s from `from` to `to` with this GPU figure, and CPU time growing
    /// by `cpu_ms_per_s`.
    fn samples(from: u64, to: u64, gpu: Option<u8>, cpu_ms_per_s: u64) -> Vec<Sample> {
        (from..=to)
            .step_by(5_000)
            .map(|at| Sample {
                at_ms: at,
                gpu_max_pct: gpu,
                cpu_ms: Some(50_000 + (at - from) * cpu_ms_per_s / 1000),
            })
            .collect()
    }

    struct Case {
        world: u32,
        ranks: Vec<Rank>,
        last_output_ms: u64,
        error: Option<ErrorSeen>,
        gpus: usize,
        samples: Vec<Sample>,
    }

    impl Case {
        fn at(&self, now_ms: u64) -> Verdict {
            decide(
                &settings(),
                &Inputs {
                    world: self.world,
                    ranks: &self.ranks,
                    last_output_ms: self.last_output_ms,
                    error: self.error.as_ref(),
                    gpus: self.gpus,
                    samples: &self.samples,
                    now_ms,
                },
            )
        }
    }

    fn boom(at_ms: u64) -> Option<ErrorSeen> {
        Some(ErrorSeen {
            line: "RuntimeError: boom (at /w/train.py:12 in step)".into(),
            at_ms,
        })
    }

    /// Two ranks here; rank 1 printed the error and exited 1 at T; rank 0 sleeps.
    fn exited_peer() -> Case {
        Case {
            world: 2,
            ranks: vec![rank(0, None), rank(1, Some((T, 1)))],
            last_output_ms: T,
            error: boom(T),
            gpus: 2,
            samples: samples(T - 60_000, T + 120_000, Some(0), 2),
        }
    }

    #[test]
    fn a_rank_that_exited_leaves_the_silent_idle_others_hung_after_the_shorter_window() {
        let c = exited_peer();
        assert_eq!(c.at(T + 14_000), Verdict::Keep(Keep::NotYet));
        let Verdict::Stop(evidence) = c.at(T + 15_000) else {
            panic!("{:?}", c.at(T + 15_000));
        };
        assert_eq!(
            evidence,
            "first error: RuntimeError: boom (at /w/train.py:12 in step); rank 1 exited with code 1; the ranks still running here (0) stayed silent for 15 s with GPUs at most 0% and CPU at 0% of a core"
        );
        // Without any error line printed, the exit alone is enough.
        let mut c = exited_peer();
        c.error = None;
        assert!(
            matches!(c.at(T + 15_000), Verdict::Stop(e) if e.starts_with("rank 1 exited with code 1;"))
        );
        // A rank that ended well is no trigger.
        let mut c = exited_peer();
        c.error = None;
        c.ranks[1] = rank(1, Some((T, 0)));
        assert_eq!(c.at(T + 600_000), Verdict::Keep(Keep::NoError));
    }

    #[test]
    fn a_traceback_with_every_rank_still_running_waits_for_the_longer_window() {
        let mut c = exited_peer();
        c.ranks = vec![rank(0, None), rank(1, None)];
        assert_eq!(c.at(T + 59_000), Verdict::Keep(Keep::NotYet));
        assert!(
            matches!(c.at(T + 60_000), Verdict::Stop(e) if e.contains("(0, 1) stayed silent for 60 s"))
        );
    }

    #[test]
    fn output_after_the_error_restarts_the_silence() {
        let mut c = exited_peer();
        c.last_output_ms = T + 10_000;
        assert_eq!(c.at(T + 20_000), Verdict::Keep(Keep::NotYet));
        assert!(matches!(c.at(T + 25_000), Verdict::Stop(_)));
    }

    #[test]
    fn a_loading_or_compiling_job_is_kept() {
        // No error printed: silent, GPUs idle, whatever the CPU does.
        let mut c = exited_peer();
        c.ranks = vec![rank(0, None), rank(1, None)];
        c.error = None;
        assert_eq!(c.at(T + 3_600_000), Verdict::Keep(Keep::NoError));
        // An error printed, but the CPUs are busy (a compile, a data pass after a retry).
        let mut c = exited_peer();
        c.samples = samples(T - 60_000, T + 120_000, Some(0), 900);
        assert_eq!(c.at(T + 60_000), Verdict::Keep(Keep::CpuBusy));
        // Or a GPU is working.
        let mut c = exited_peer();
        c.samples = samples(T - 60_000, T + 120_000, Some(37), 0);
        assert_eq!(c.at(T + 60_000), Verdict::Keep(Keep::GpuBusy));
    }

    #[test]
    fn a_single_rank_job_is_never_hung_by_silence() {
        let mut c = exited_peer();
        c.world = 1;
        c.ranks = vec![rank(0, None)];
        assert_eq!(c.at(T + 3_600_000), Verdict::Keep(Keep::SingleRank));
    }

    #[test]
    fn without_samples_of_the_silence_nothing_is_decided() {
        let mut c = exited_peer();
        c.samples = samples(T - 60_000, T - 1_000, Some(0), 0);
        assert_eq!(c.at(T + 60_000), Verdict::Keep(Keep::NoGpuSample));
        // GPUs read, CPU time unknown (no cgroup, no process group).
        let mut c = exited_peer();
        for s in &mut c.samples {
            s.cpu_ms = None;
        }
        assert_eq!(c.at(T + 60_000), Verdict::Keep(Keep::NoCpuSample));
        // A run without GPUs is judged by its silence and CPU.
        let mut c = exited_peer();
        c.gpus = 0;
        for s in &mut c.samples {
            s.gpu_max_pct = None;
        }
        assert!(matches!(c.at(T + 15_000), Verdict::Stop(e) if !e.contains("GPUs")));
    }

    #[test]
    fn a_gpu_busy_long_ago_does_not_keep_a_run_that_is_idle_now() {
        let mut c = exited_peer();
        c.error = boom(T);
        c.ranks = vec![rank(0, None), rank(1, None)];
        c.samples = samples(T, T + 300_000, Some(0), 0);
        c.samples[2].gpu_max_pct = Some(90);
        assert!(matches!(c.at(T + 300_000), Verdict::Stop(_)));
        assert_eq!(c.at(T + 65_000), Verdict::Keep(Keep::GpuBusy));
    }

    #[test]
    fn everything_ended_and_disabled_are_kept() {
        let mut c = exited_peer();
        c.ranks = vec![rank(0, Some((T, 0))), rank(1, Some((T, 1)))];
        assert_eq!(c.at(T + 60_000), Verdict::Keep(Keep::NothingRunning));
        let off = HangSettings {
            after: Duration::ZERO,
            ..settings()
        };
        let c = exited_peer();
        let i = Inputs {
            world: 2,
            ranks: &c.ranks,
            last_output_ms: T,
            error: None,
            gpus: 2,
            samples: &c.samples,
            now_ms: T + 600_000,
        };
        assert_eq!(decide(&off, &i), Verdict::Keep(Keep::Disabled));
    }

    #[test]
    fn suspect_runs_are_sampled_a_few_times_per_window() {
        assert_eq!(settings().sample_every(), Duration::from_millis(3750));
        let short = HangSettings {
            after: Duration::from_secs(6),
            after_exit: Duration::from_secs(3),
            ..settings()
        };
        assert_eq!(short.sample_every(), Duration::from_millis(750));
    }
}
