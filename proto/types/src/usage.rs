//! What a job did with what it was given: per-GPU utilisation, memory and power sampled on
//! its node, summarised compactly (mean, max, idle fraction, a downsampled series), and the
//! efficiency report built from those summaries (`gacct --eff`, the idle-GPU policy).

use serde::{Deserialize, Serialize};

/// The most points a GPU's utilisation series keeps; when full, neighbours are merged
/// and each point then stands for twice as long.
pub const SERIES_POINTS: usize = 64;

/// One sample of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuReading {
    pub util_pct: u8,
    pub mem_used_mib: u64,
    pub power_w: Option<u32>,
}

/// One GPU's use over a step, as its node saw it. Integers only: it is part of the
/// replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuUsage {
    /// The job's GPU index on its node (as in the allocation).
    pub gpu: u32,
    pub samples: u32,
    pub util_sum: u64,
    pub util_max: u8,
    pub mem_max_mib: u64,
    /// Samples at 0% utilisation.
    pub idle_samples: u32,
    #[serde(default)]
    pub power_sum_w: u64,
    #[serde(default)]
    pub power_samples: u32,
    /// How long, up to the newest sample, the GPU has stayed under the idle threshold
    /// the step was launched with (seconds, on the node's monotonic clock).
    #[serde(default)]
    pub below_s: u64,
    /// Utilisation, oldest first, each point the mean over `series_step_s`.
    #[serde(default)]
    pub series: Vec<u8>,
    #[serde(default)]
    pub series_step_s: u32,
    /// Samples folded into the newest, unfinished point.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending: u32,
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub pending_sum: u64,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}
fn is_zero64(v: &u64) -> bool {
    *v == 0
}

impl GpuUsage {
    pub fn new(gpu: u32) -> GpuUsage {
        GpuUsage {
            gpu,
            ..GpuUsage::default()
        }
    }

    /// Folds in one sample taken `interval_s` after the previous one; `threshold_pct`
    /// is the idle threshold `below_s` counts against.
    pub fn add(&mut self, r: GpuReading, interval_s: u32, threshold_pct: u8) {
        let util = r.util_pct.min(100);
        self.samples += 1;
        self.util_sum += u64::from(util);
        self.util_max = self.util_max.max(util);
        self.mem_max_mib = self.mem_max_mib.max(r.mem_used_mib);
        if util == 0 {
            self.idle_samples += 1;
        }
        if let Some(p) = r.power_w {
            self.power_sum_w += u64::from(p);
            self.power_samples += 1;
        }
        if util < threshold_pct.max(1) {
            // The first sample stands for the interval before it.
            self.below_s += u64::from(interval_s);
        } else {
            self.below_s = 0;
        }
        self.push_series(util, interval_s.max(1));
    }

    fn push_series(&mut self, util: u8, interval_s: u32) {
        if self.series_step_s == 0 {
            self.series_step_s = interval_s;
        }
        self.pending += 1;
        self.pending_sum += u64::from(util);
        let per_point = (self.series_step_s / interval_s).max(1);
        if self.pending < per_point {
            return;
        }
        self.series
            .push((self.pending_sum / u64::from(self.pending)) as u8);
        self.pending = 0;
        self.pending_sum = 0;
        if self.series.len() >= SERIES_POINTS {
            self.series = self
                .series
                .chunks(2)
                .map(|c| ((c.iter().map(|v| u32::from(*v)).sum::<u32>()) / c.len() as u32) as u8)
                .collect();
            self.series_step_s *= 2;
        }
    }

    /// Mean utilisation in percent (0 with no sample).
    pub fn util_mean_pct(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.util_sum as f64 / f64::from(self.samples)
        }
    }

    /// The share of samples at 0% utilisation.
    pub fn idle_fraction(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            f64::from(self.idle_samples) / f64::from(self.samples)
        }
    }

    pub fn power_mean_w(&self) -> Option<f64> {
        (self.power_samples > 0).then(|| self.power_sum_w as f64 / f64::from(self.power_samples))
    }
}

/// One node's part of a step: its GPUs and the step's cgroup figures.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeUsage {
    pub node: String,
    /// Seconds between samples.
    pub interval_s: u32,
    /// Seconds the node sampled the step for.
    pub sampled_s: u64,
    pub gpus: Vec<GpuUsage>,
    /// CPU time the step's processes used (cgroup `cpu.stat`), in ms.
    #[serde(default)]
    pub cpu_ms: u64,
    /// CPUs the node gave the step.
    #[serde(default)]
    pub cpus: u32,
    /// The most memory the step's cgroup held (`memory.peak`, else the largest sample).
    #[serde(default)]
    pub mem_max_mib: u64,
    #[serde(default)]
    pub mem_limit_mib: u64,
}

impl NodeUsage {
    /// The shortest time any of its GPUs has been under the threshold (`None`: no GPU
    /// sampled yet).
    pub fn min_below_s(&self) -> Option<u64> {
        if self.gpus.iter().all(|g| g.samples == 0) {
            return None;
        }
        self.gpus.iter().map(|g| g.below_s).min()
    }

    /// The mean CPU use against the CPUs given, in percent.
    pub fn cpu_eff_pct(&self) -> Option<f64> {
        (self.cpus > 0 && self.sampled_s > 0)
            .then(|| self.cpu_ms as f64 / 10.0 / (self.sampled_s as f64 * f64::from(self.cpus)))
    }
}

/// One GPU's line of an efficiency report (`gacct --eff --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuEfficiency {
    pub node: String,
    pub gpu: u32,
    pub util_mean_pct: f64,
    pub util_max_pct: u8,
    pub mem_max_mib: u64,
    pub idle_fraction: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_mean_w: Option<f64>,
    pub samples: u32,
    /// Utilisation over time, oldest first, one point per `series_step_s`.
    pub series: Vec<u8>,
    pub series_step_s: u32,
}

/// One node's CPU and memory line of an efficiency report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeEfficiency {
    pub node: String,
    pub cpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_eff_pct: Option<f64>,
    pub mem_max_mib: u64,
    pub mem_limit_mib: u64,
}

/// A job's efficiency report (`gacct --eff`, `seff`, `GET /api/v1/jobs/ID/efficiency`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Efficiency {
    pub job_id: crate::job::JobId,
    pub user: String,
    pub state: crate::job::JobState,
    /// Seconds the job has run (to now if it still runs).
    pub elapsed_s: u64,
    pub gpus: Vec<GpuEfficiency>,
    pub nodes: Vec<NodeEfficiency>,
    /// What to do about it, in words (empty when nothing stands out).
    pub advice: Vec<String>,
}

impl Efficiency {
    /// The report of a job from its nodes' summaries; `mem_asked`: the job named its
    /// memory (`--mem`, `--mem-per-gpu`), so memory it left unused is worth advice (a
    /// default share is not the user's choice).
    pub fn from_usage(
        job_id: crate::job::JobId,
        user: &str,
        state: crate::job::JobState,
        elapsed_s: u64,
        usage: &[NodeUsage],
        mem_asked: bool,
    ) -> Efficiency {
        let gpus: Vec<GpuEfficiency> = usage
            .iter()
            .flat_map(|n| {
                n.gpus.iter().map(|g| GpuEfficiency {
                    node: n.node.clone(),
                    gpu: g.gpu,
                    util_mean_pct: round1(g.util_mean_pct()),
                    util_max_pct: g.util_max,
                    mem_max_mib: g.mem_max_mib,
                    idle_fraction: (g.idle_fraction() * 1000.0).round() / 1000.0,
                    power_mean_w: g.power_mean_w().map(round1),
                    samples: g.samples,
                    series: g.series.clone(),
                    series_step_s: g.series_step_s,
                })
            })
            .collect();
        let nodes: Vec<NodeEfficiency> = usage
            .iter()
            .map(|n| NodeEfficiency {
                node: n.node.clone(),
                cpus: n.cpus,
                cpu_eff_pct: n.cpu_eff_pct().map(round1),
                mem_max_mib: n.mem_max_mib,
                mem_limit_mib: n.mem_limit_mib,
            })
            .collect();
        let advice = advise(&gpus, &nodes, elapsed_s, mem_asked);
        Efficiency {
            job_id,
            user: user.to_string(),
            state,
            elapsed_s,
            gpus,
            nodes,
            advice,
        }
    }
}

/// Width of a report's bars.
const BAR: usize = 40;

/// `[#####.....]` for `pct` of 100.
fn bar(pct: f64) -> String {
    let filled = ((pct.clamp(0.0, 100.0) / 100.0) * BAR as f64).round() as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR - filled))
}

fn mib(v: u64) -> String {
    if v >= 1024 {
        format!("{:.1} GiB", v as f64 / 1024.0)
    } else {
        format!("{v} MiB")
    }
}

impl Efficiency {
    /// Whether anything was sampled.
    pub fn sampled(&self) -> bool {
        self.gpus.iter().any(|g| g.samples > 0) || !self.nodes.is_empty()
    }

    /// The report as `gacct --eff` and `seff` print it (and a notification's mail
    /// carries): a bar per GPU and per node, then the advice, as Princeton's jobstats.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        let e = self;
        line(&mut out, format!("Job ID: {}", e.job_id));
        line(&mut out, format!("User: {}", e.user));
        line(&mut out, format!("State: {}", e.state.name()));
        line(
            &mut out,
            format!("Elapsed: {}", crate::parse::format_duration(e.elapsed_s)),
        );
        if !e.sampled() {
            line(
                &mut out,
                "\nNo usage was sampled for this job: it has not started, ended before its first sample (gagentd --gpu-sample-interval), or ran on agents that do not sample."
                    .into(),
            );
            return out;
        }
        if !e.nodes.is_empty() {
            line(&mut out, "\nCPU and memory per node:".into());
            for n in &e.nodes {
                let cpu = match n.cpu_eff_pct {
                    Some(p) => format!("{} {p:5.1}% of {} CPU(s)", bar(p), n.cpus),
                    None => format!("{} not measured", bar(0.0)),
                };
                line(&mut out, format!("  {:<12} CPU    {cpu}", n.node));
                let mem = if n.mem_limit_mib > 0 {
                    let p = n.mem_max_mib as f64 * 100.0 / n.mem_limit_mib as f64;
                    format!(
                        "{} {p:5.1}% ({} of {})",
                        bar(p),
                        mib(n.mem_max_mib),
                        mib(n.mem_limit_mib)
                    )
                } else {
                    format!("{} {} (no limit)", bar(0.0), mib(n.mem_max_mib))
                };
                line(&mut out, format!("  {:<12} memory {mem}", n.node));
            }
        }
        if !e.gpus.is_empty() {
            line(
                &mut out,
                "\nGPU utilisation (mean over the job; max; idle share of samples):".into(),
            );
            for g in &e.gpus {
                let power = g
                    .power_mean_w
                    .map(|w| format!(", {w:.0} W"))
                    .unwrap_or_default();
                line(
                    &mut out,
                    format!(
                        "  {:<12} GPU {:<2} {} {:5.1}%  max {:>3}%  idle {:>3.0}%  memory {}{power}  ({} samples)",
                        g.node,
                        g.gpu,
                        bar(g.util_mean_pct),
                        g.util_mean_pct,
                        g.util_max_pct,
                        g.idle_fraction * 100.0,
                        mib(g.mem_max_mib),
                        g.samples
                    ),
                );
            }
        }
        if !e.advice.is_empty() {
            line(&mut out, "\nAdvice:".into());
            for a in &e.advice {
                line(&mut out, format!("  * {a}"));
            }
        }
        out
    }

    /// The report in one line: `GPU efficiency: 2 GPU(s), mean 92.9% (max 100%), 644 W;
    /// CPU 50.0%; memory 1.0 GiB of 64.0 GiB` (the GPUs' mean power added up), or that
    /// nothing was sampled.
    pub fn summary(&self) -> String {
        let sampled: Vec<&GpuEfficiency> = self.gpus.iter().filter(|g| g.samples > 0).collect();
        let mut parts = Vec::new();
        if !sampled.is_empty() {
            let n = sampled.len() as f64;
            let mean = sampled.iter().map(|g| g.util_mean_pct).sum::<f64>() / n;
            let max = sampled.iter().map(|g| g.util_max_pct).max().unwrap_or(0);
            let idle = sampled.iter().filter(|g| g.util_max_pct == 0).count();
            let mut gpu = format!("{} GPU(s), mean {mean:.1}% (max {max}%)", sampled.len());
            let watts: Vec<f64> = sampled.iter().filter_map(|g| g.power_mean_w).collect();
            if !watts.is_empty() {
                gpu.push_str(&format!(", {:.0} W", watts.iter().sum::<f64>()));
            }
            if idle > 0 {
                gpu.push_str(&format!(", {idle} never used"));
            }
            parts.push(gpu);
        }
        let cpus: Vec<f64> = self.nodes.iter().filter_map(|n| n.cpu_eff_pct).collect();
        if !cpus.is_empty() {
            parts.push(format!(
                "CPU {:.1}%",
                cpus.iter().sum::<f64>() / cpus.len() as f64
            ));
        }
        let mem_max: u64 = self.nodes.iter().map(|n| n.mem_max_mib).max().unwrap_or(0);
        if !self.nodes.is_empty() {
            let limit: u64 = self
                .nodes
                .iter()
                .map(|n| n.mem_limit_mib)
                .max()
                .unwrap_or(0);
            parts.push(if limit > 0 {
                format!("memory {} of {}", mib(mem_max), mib(limit))
            } else {
                format!("memory {}", mib(mem_max))
            });
        }
        if parts.is_empty() {
            return "GPU efficiency: no usage was sampled".into();
        }
        format!("GPU efficiency: {}", parts.join("; "))
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Advice as jobstats gives it: idle GPUs, low utilisation, memory asked for and not used.
fn advise(
    gpus: &[GpuEfficiency],
    nodes: &[NodeEfficiency],
    elapsed_s: u64,
    mem_asked: bool,
) -> Vec<String> {
    let mut advice = Vec::new();
    let sampled: Vec<&GpuEfficiency> = gpus.iter().filter(|g| g.samples > 0).collect();
    if sampled.is_empty() {
        return advice;
    }
    let over = crate::parse::format_duration(elapsed_s);
    let idle: Vec<String> = sampled
        .iter()
        .filter(|g| g.util_max_pct == 0)
        .map(|g| format!("{}:{}", g.node, g.gpu))
        .collect();
    if !idle.is_empty() && idle.len() == sampled.len() {
        advice.push(format!(
            "No GPU was used at all over {over}: the job held {} GPU(s) at 0%. Check that the code runs on the GPU (torch.cuda.is_available(), .to(\"cuda\")) or submit without --gpus.",
            idle.len()
        ));
    } else if !idle.is_empty() {
        advice.push(format!(
            "GPU(s) {} stayed at 0% over {over} while the others worked: ask for {} GPU(s), or make the code use all of them (torchrun --nproc-per-node, DistributedDataParallel).",
            idle.join(", "),
            sampled.len() - idle.len()
        ));
    }
    let mean = sampled.iter().map(|g| g.util_mean_pct).sum::<f64>() / sampled.len() as f64;
    if idle.len() < sampled.len() && mean < 25.0 {
        advice.push(format!(
            "GPU utilisation {mean:.0}% over {over}: the GPUs mostly wait. Common causes: data loading on too few CPU workers (DataLoader num_workers), small batches, or time spent on the CPU between steps."
        ));
    }
    for n in nodes.iter().filter(|_| mem_asked) {
        if n.mem_limit_mib >= 8192 && n.mem_max_mib * 5 < n.mem_limit_mib {
            advice.push(format!(
                "{} used at most {} MiB of the {} MiB of memory it was given: ask for less (--mem) so others can run.",
                n.node, n.mem_max_mib, n.mem_limit_mib
            ));
        }
    }
    advice
}

/// The idle-GPU policy's word on a running job (`[idle_gpu]` in `gctld.toml`): every GPU
/// has stayed under the threshold for `after_s`; with `cancel` the job is cancelled once
/// it stays so for `grace_s` more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdleNotice {
    /// Controller time of the warning.
    pub at_ms: u64,
    pub threshold_pct: u8,
    pub after_s: u64,
    pub grace_s: u64,
    pub cancel: bool,
    /// Utilisation per GPU over the window, in words.
    pub evidence: String,
}

impl IdleNotice {
    /// The line `gqueue -l`, `gctl show job` and the job's output show.
    pub fn message(&self) -> String {
        let what = if self.cancel {
            format!(
                "will be cancelled (IdleGPUs) unless a GPU rises to {}% within {}",
                self.threshold_pct,
                crate::parse::format_duration(self.grace_s)
            )
        } else {
            "is reported to the admins".to_string()
        };
        format!(
            "every GPU under {}% for {}: {}; {what}",
            self.threshold_pct,
            crate::parse::format_duration(self.after_s),
            self.evidence
        )
    }
}

/// Utilisation per GPU in words, for the idle policy's evidence.
pub fn evidence(usage: &[NodeUsage]) -> String {
    usage
        .iter()
        .flat_map(|n| {
            n.gpus.iter().map(move |g| {
                format!(
                    "{}:gpu{} mean {:.0}% max {}%, under the threshold for {}",
                    n.node,
                    g.gpu,
                    g.util_mean_pct(),
                    g.util_max,
                    crate::parse::format_duration(g.below_s)
                )
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(util: u8) -> GpuReading {
        GpuReading {
            util_pct: util,
            mem_used_mib: 100,
            power_w: Some(70),
        }
    }

    #[test]
    fn summary_keeps_mean_max_idle_and_below() {
        let mut g = GpuUsage::new(0);
        for u in [0, 0, 50, 100, 0, 0] {
            g.add(reading(u), 30, 5);
        }
        assert_eq!(g.samples, 6);
        assert_eq!(g.util_max, 100);
        assert!((g.util_mean_pct() - 25.0).abs() < 1e-9);
        assert!((g.idle_fraction() - 4.0 / 6.0).abs() < 1e-9);
        assert_eq!(
            g.below_s, 60,
            "two samples under 5% since the last busy one"
        );
        assert_eq!(g.power_mean_w(), Some(70.0));
    }

    #[test]
    fn series_stays_bounded_and_keeps_the_mean() {
        let mut g = GpuUsage::new(1);
        for k in 0..1000u32 {
            g.add(reading(if k < 500 { 100 } else { 0 }), 30, 1);
        }
        assert!(g.series.len() < SERIES_POINTS, "{}", g.series.len());
        assert!(g.series_step_s >= 30 * 1000 / SERIES_POINTS as u32);
        let points = g.series.len();
        assert_eq!(g.series[0], 100);
        assert_eq!(g.series[points - 1], 0);
    }

    #[test]
    fn threshold_zero_counts_only_idle() {
        let mut g = GpuUsage::new(0);
        g.add(reading(0), 10, 0);
        g.add(reading(1), 10, 0);
        assert_eq!(g.below_s, 0);
    }

    #[test]
    fn advice_names_an_idle_job_and_an_idle_gpu() {
        let busy = |node: &str, gpu, util: u8| {
            let mut g = GpuUsage::new(gpu);
            for _ in 0..10 {
                g.add(reading(util), 30, 5);
            }
            (node.to_string(), g)
        };
        let usage = |gs: Vec<(String, GpuUsage)>| {
            vec![NodeUsage {
                node: gs[0].0.clone(),
                interval_s: 30,
                sampled_s: 300,
                gpus: gs.into_iter().map(|(_, g)| g).collect(),
                ..NodeUsage::default()
            }]
        };
        let report = |id, elapsed_s, gpus| {
            Efficiency::from_usage(
                crate::job::JobId(id),
                "alice",
                crate::job::JobState::Running,
                elapsed_s,
                &usage(gpus),
                true,
            )
        };
        let idle = report(1, 9 * 3600, vec![busy("n1", 0, 0), busy("n1", 1, 0)]);
        assert!(
            idle.advice[0].contains("No GPU was used"),
            "{:?}",
            idle.advice
        );
        let half = report(2, 600, vec![busy("n1", 0, 95), busy("n1", 1, 0)]);
        assert!(
            half.advice[0].contains("n1:1 stayed at 0%"),
            "{:?}",
            half.advice
        );
        let good = report(3, 600, vec![busy("n1", 0, 95)]);
        assert!(good.advice.is_empty(), "{:?}", good.advice);
        assert_eq!(good.gpus[0].util_mean_pct, 95.0);
    }

    fn node(utils: &[u8]) -> NodeUsage {
        let gpus = utils
            .iter()
            .enumerate()
            .map(|(i, &u)| {
                let mut g = GpuUsage::new(i as u32);
                for _ in 0..10 {
                    g.add(
                        GpuReading {
                            util_pct: u,
                            mem_used_mib: 2048,
                            power_w: Some(300),
                        },
                        30,
                        5,
                    );
                }
                g
            })
            .collect();
        NodeUsage {
            node: "n1".into(),
            interval_s: 30,
            sampled_s: 300,
            gpus,
            cpu_ms: 600_000,
            cpus: 4,
            mem_max_mib: 1024,
            mem_limit_mib: 65536,
        }
    }

    #[test]
    fn the_report_has_a_bar_per_gpu_and_node_and_names_the_idle_gpu() {
        let e = Efficiency::from_usage(
            crate::job::JobId(7),
            "alice",
            crate::job::JobState::Completed,
            300,
            &[node(&[90, 0])],
            true,
        );
        let text = e.render();
        assert!(text.contains("Job ID: 7"), "{text}");
        let gpu_lines: Vec<&str> = text.lines().filter(|l| l.contains(" GPU ")).collect();
        assert_eq!(gpu_lines.len(), 2, "{text}");
        assert!(
            gpu_lines[0].contains(&format!("[{}{}]", "#".repeat(36), ".".repeat(4))),
            "{text}"
        );
        assert!(gpu_lines[0].contains(" 90.0%"), "{text}");
        assert!(gpu_lines[1].contains("idle 100%"), "{text}");
        assert!(text.contains("CPU    ["), "{text}");
        assert!(text.contains(" 50.0% of 4 CPU(s)"), "{text}");
        assert!(text.contains("GPU(s) n1:1 stayed at 0%"), "{text}");
        assert!(text.contains("ask for less (--mem)"), "{text}");
        assert_eq!(
            e.summary(),
            "GPU efficiency: 2 GPU(s), mean 45.0% (max 90%), 600 W, 1 never used; CPU 50.0%; memory 1.0 GiB of 64.0 GiB"
        );
    }

    #[test]
    fn a_job_without_samples_says_why_there_is_nothing() {
        let e = Efficiency::from_usage(
            crate::job::JobId(8),
            "bob",
            crate::job::JobState::Pending,
            0,
            &[],
            false,
        );
        assert!(e.render().contains("No usage was sampled"));
        assert_eq!(e.summary(), "GPU efficiency: no usage was sampled");
    }
}
