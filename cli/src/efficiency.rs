//! `gacct --eff` and `seff`: a job's efficiency report as text, a bar per GPU and per
//! node and the advice, as Princeton's jobstats prints it.

use gsched_types::parse::format_duration;
use gsched_types::usage::Efficiency;

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

/// The report as `gacct --eff` prints it.
pub fn render(e: &Efficiency) -> String {
    let mut out = String::new();
    let line = |out: &mut String, s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(&mut out, format!("Job ID: {}", e.job_id));
    line(&mut out, format!("User: {}", e.user));
    line(&mut out, format!("State: {}", e.state.name()));
    line(
        &mut out,
        format!("Elapsed: {}", format_duration(e.elapsed_s)),
    );
    let sampled = e.gpus.iter().any(|g| g.samples > 0) || !e.nodes.is_empty();
    if !sampled {
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

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::job::{JobId, JobState};
    use gsched_types::usage::{GpuReading, GpuUsage, NodeUsage};

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
            JobId(7),
            "alice",
            JobState::Completed,
            300,
            &[node(&[90, 0])],
            true,
        );
        let text = render(&e);
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
    }

    #[test]
    fn a_job_without_samples_says_why_there_is_nothing() {
        let e = Efficiency::from_usage(JobId(8), "bob", JobState::Pending, 0, &[], false);
        assert!(render(&e).contains("No usage was sampled"));
    }
}
