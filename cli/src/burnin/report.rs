//! The burn-in report: `report.md` (per stage a table of runs against what their links
//! should carry, and the findings), `report.json`, and an SVG plot of bus bandwidth over
//! message size for each all-reduce stage (plotters' SVG backend). Pure but for `write`.

use super::judge::size;
use super::{Report, RunResult, Stage};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The plot file of an all-reduce stage.
pub fn plot_name(stage: Stage) -> String {
    format!("{}-busbw.svg", stage.slug())
}

/// Bus bandwidth over message size, one line per run of `stage`; `None` when the stage
/// has no samples.
pub fn plot(stage: Stage, results: &[&RunResult]) -> Option<String> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = results
        .iter()
        .filter(|r| !r.samples.is_empty())
        .map(|r| {
            (
                r.run.label(),
                r.samples
                    .iter()
                    .map(|s| (s.bytes as f64, s.busbw_gbps))
                    .collect(),
            )
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let all = lines.iter().flat_map(|(_, p)| p);
    let (mut lo, mut hi, mut top) = (f64::MAX, 0f64, 0f64);
    for &(x, y) in all {
        lo = lo.min(x);
        hi = hi.max(x);
        top = top.max(y);
    }
    let expected = results
        .iter()
        .filter_map(|r| r.run.expected.as_ref().map(|e| e.busbw_gbps))
        .fold(0f64, f64::max);
    if results.iter().any(|r| r.on_gpus()) {
        top = top.max(expected);
    }
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let hi = if hi > lo { hi } else { lo * 2.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(stage.title(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..top)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc("bus bandwidth, GB/s")
            .x_label_formatter(&|x| size(*x as u64))
            .draw()
            .ok()?;
        for (i, (label, points)) in lines.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .ok()?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

fn gbps(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The report in Markdown; plots are linked by their file names.
pub fn markdown(report: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# gsched burn-in report\n");
    let _ = writeln!(
        md,
        "Started {} on {} node(s): {}. Mode: {}.\n",
        report.started,
        report.nodes.len(),
        gsched_types::hostlist::compress(&report.nodes),
        if report.quick { "quick" } else { "full" }
    );
    if report.cpu_only() {
        let _ = writeln!(
            md,
            "**No run reached a GPU** (fake agents, or PyTorch without CUDA): the probes ran on CPUs with gloo. The figures show that the scheduler, the launch and the collectives work end to end; they say nothing about the hardware, and are not compared with link rates.\n"
        );
    }
    for line in &report.skipped {
        let _ = writeln!(md, "- skipped: {line}");
    }
    if !report.skipped.is_empty() {
        md.push('\n');
    }
    let _ = writeln!(md, "## Findings\n");
    if report.findings.is_empty() {
        let _ = writeln!(md, "None.\n");
    }
    for f in &report.findings {
        let _ = writeln!(
            md,
            "- **{}** {} `{}`{}: {}  \n  what to do: {}",
            format!("{:?}", f.severity).to_uppercase(),
            f.node.as_deref().unwrap_or("-"),
            f.kind,
            f.gpu.map(|g| format!(" (GPU {g})")).unwrap_or_default(),
            f.evidence,
            f.action
        );
    }
    for stage in Stage::ORDER {
        let runs: Vec<&RunResult> = report
            .results
            .iter()
            .filter(|r| r.run.stage == stage)
            .collect();
        if runs.is_empty() {
            continue;
        }
        let _ = writeln!(md, "\n## {}\n", stage.title());
        if stage == Stage::Gpu {
            let _ = writeln!(
                md,
                "| node | GPU | device | memory checked | pattern | matmul | TFLOPS |\n|---|---|---|---|---|---|---|"
            );
            for r in &runs {
                for g in &r.gpus {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | {} | {} | {:.3} |",
                        g.node,
                        g.gpu,
                        g.device,
                        size(g.memory_bytes),
                        if g.memory_ok { "ok" } else { "**WRONG**" },
                        g.matmul,
                        g.tflops
                    );
                }
                if let Some(e) = &r.error {
                    let _ = writeln!(md, "| {} | - | failed: {e} | | | | |", r.run.label());
                }
            }
            continue;
        }
        let _ = writeln!(
            md,
            "| nodes | GPUs/node | backend | NCCL transports | busbw at largest size, GB/s | expected, GB/s | bound by | seconds |\n|---|---|---|---|---|---|---|---|"
        );
        for r in &runs {
            let peak = r.peak();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} |",
                r.run.label(),
                r.run.gpus_per_node,
                r.backend().unwrap_or("-"),
                if r.transports.is_empty() {
                    "-".to_string()
                } else {
                    r.transports.join(", ")
                },
                match (peak, &r.error) {
                    (_, Some(e)) => format!("failed: {e}"),
                    (Some(p), None) => format!("{:.2} at {}", p.busbw_gbps, size(p.bytes)),
                    (None, None) => "-".into(),
                },
                if r.on_gpus() {
                    gbps(r.run.expected.as_ref().map(|e| e.busbw_gbps))
                } else {
                    "n/a (CPU)".into()
                },
                r.run
                    .expected
                    .as_ref()
                    .map_or("unknown wiring", |e| e.basis.as_str()),
                r.seconds
            );
        }
        if runs.iter().any(|r| !r.samples.is_empty()) {
            let _ = writeln!(md, "\n![{}]({})", stage.title(), plot_name(stage));
        }
    }
    md
}

/// Writes report.md, report.json and the plots into `dir`; returns the files written.
pub fn write(dir: &Path, report: &Report) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let mut put = |name: &str, text: &str| -> std::io::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        files.push(p);
        Ok(())
    };
    put("report.md", &markdown(report))?;
    put(
        "report.json",
        &serde_json::to_string_pretty(report).expect("a report serialises"),
    )?;
    for stage in [Stage::Node, Stage::Pair, Stage::All] {
        let runs: Vec<&RunResult> = report
            .results
            .iter()
            .filter(|r| r.run.stage == stage)
            .collect();
        if let Some(svg) = plot(stage, &runs) {
            put(&plot_name(stage), &svg)?;
        }
    }
    Ok(files)
}
