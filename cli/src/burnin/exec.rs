//! Runs the burn-in's jobs: one `grun` per run (an allocation of its own, through the
//! scheduler like any job), the runs of a stage's round side by side, and reads back the
//! probe's result lines and NCCL's transport lines from their output.

use super::{GpuCheck, PROBE, Run, RunResult, Sample, Stage};
use crate::grun_job::{GrunJob, unlabel};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// How to start the runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `grun` binary.
    pub grun: PathBuf,
    /// The interpreter on the nodes that has PyTorch.
    pub python: String,
    pub quick: bool,
    pub controllers: Option<String>,
    pub partition: Option<String>,
    /// Each run's time limit, in sbatch's forms.
    pub time_limit: String,
    /// The service user the runs are submitted as (root's runs), else the caller.
    pub run_as: Option<crate::grun_job::ServiceUser>,
}

fn command(run: &Run, opts: &Options) -> Command {
    let job = GrunJob {
        grun: &opts.grun,
        nodes: &run.nodes,
        gpus_per_node: run.gpus_per_node,
        tasks_per_node: run.gpus_per_node,
        name: run.job_name(),
        time_limit: &opts.time_limit,
        partition: opts.partition.as_deref(),
        controllers: opts.controllers.as_deref(),
        run_as: opts.run_as.as_ref(),
    };
    let mut c = job.command(&[
        &opts.python,
        "-c",
        PROBE,
        run.stage.probe(),
        if opts.quick { "1" } else { "0" },
    ]);
    if std::env::var_os("NCCL_DEBUG").is_none() {
        c.env("NCCL_DEBUG", "INFO");
    }
    c
}

/// NCCL's transport names in its INFO lines ("... via P2P/CUMEM/read", "via NET/IB/0"):
/// P2P and NET keep their kind ("P2P/CUMEM", "NET/Socket"), others their first word.
pub fn transports(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    for line in text.lines().filter(|l| l.contains("NCCL INFO")) {
        let Some((_, rest)) = line.split_once(" via ") else {
            continue;
        };
        let Some(word) = rest.split_whitespace().next() else {
            continue;
        };
        let parts: Vec<&str> = word.split('/').collect();
        let keep = if matches!(parts[0], "NET" | "P2P") {
            2
        } else {
            1
        };
        seen.insert(parts[..keep.min(parts.len())].join("/"));
    }
    seen.into_iter().collect()
}

/// A run's result from grun's exit status and output.
pub fn read(run: &Run, status: i32, seconds: f64, stdout: &str, stderr: &str) -> RunResult {
    let mut result = RunResult {
        run: run.clone(),
        status,
        seconds,
        gpus: Vec::new(),
        samples: Vec::new(),
        transports: transports(stderr),
        error: None,
    };
    for line in stdout.lines().map(unlabel) {
        let Some(doc) = line.strip_prefix("GSCHED_BURNIN ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(doc) else {
            continue;
        };
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            let node = v.get("node").and_then(|n| n.as_str()).unwrap_or("?");
            result.error.get_or_insert_with(|| format!("{node}: {e}"));
        } else if run.stage == Stage::Gpu {
            if let Ok(g) = serde_json::from_value::<GpuCheck>(v) {
                result.gpus.push(g);
            }
        } else if let Ok(s) = serde_json::from_value::<Sample>(v) {
            result.samples.push(s);
        }
    }
    result
        .gpus
        .sort_by(|a, b| (&a.node, a.rank).cmp(&(&b.node, b.rank)));
    if result.error.is_none() && status != 0 {
        let tail: Vec<&str> = stderr
            .lines()
            .map(unlabel)
            .filter(|l| !l.trim().is_empty() && !l.contains("NCCL INFO"))
            .collect();
        let tail = tail[tail.len().saturating_sub(4)..].join(" | ");
        result.error = Some(if tail.is_empty() {
            format!("grun exited with status {status}")
        } else {
            tail
        });
    }
    result
}

/// Runs every run, stage by stage and round by round; `progress` hears of each result.
pub fn execute(
    runs: &[Run],
    opts: &Options,
    mut progress: impl FnMut(&RunResult),
) -> Vec<RunResult> {
    let mut results = Vec::new();
    for stage in Stage::ORDER {
        let rounds: BTreeSet<u32> = runs
            .iter()
            .filter(|r| r.stage == stage)
            .map(|r| r.round)
            .collect();
        for round in rounds {
            let batch: Vec<&Run> = runs
                .iter()
                .filter(|r| r.stage == stage && r.round == round)
                .collect();
            let done: Vec<RunResult> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|run| {
                        s.spawn(move || {
                            let t0 = Instant::now();
                            match command(run, opts).output() {
                                Ok(o) => read(
                                    run,
                                    o.status.code().unwrap_or(128),
                                    t0.elapsed().as_secs_f64(),
                                    &String::from_utf8_lossy(&o.stdout),
                                    &String::from_utf8_lossy(&o.stderr),
                                ),
                                Err(e) => read(
                                    run,
                                    127,
                                    0.0,
                                    "",
                                    &format!("cannot start {}: {e}", opts.grun.display()),
                                ),
                            }
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a burn-in run's thread does not panic"))
                    .collect()
            });
            for r in done {
                progress(&r);
                results.push(r);
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_come_from_nccl_info_lines() {
        let log = "\
n1:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
n1:1234:1240 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
n1:1234:1240 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0
n1:1234:1240 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA
hello via nothing
";
        assert_eq!(
            transports(log),
            vec!["NET/IB", "NET/Socket", "P2P/CUMEM", "SHM"]
        );
    }

    #[test]
    fn results_and_errors_are_read_from_labelled_lines() {
        let run = Run {
            stage: Stage::Node,
            nodes: vec!["n1".into()],
            gpus_per_node: 2,
            round: 0,
            expected: None,
        };
        let out = "0: GSCHED_BURNIN {\"stage\": \"allreduce\", \"bytes\": 1024, \"seconds\": 0.001, \"algbw_gbps\": 0.001, \"busbw_gbps\": 0.001, \"backend\": \"gloo\", \"world\": 2}\n1: other\n";
        let r = read(&run, 0, 1.0, out, "");
        assert_eq!(r.samples.len(), 1);
        assert_eq!(r.error, None);
        let out = "1: GSCHED_BURNIN {\"error\": \"PyTorch is not importable\", \"rank\": 1, \"node\": \"n1\"}\n";
        let r = read(&run, 3, 1.0, out, "");
        assert_eq!(r.error.as_deref(), Some("n1: PyTorch is not importable"));
        let r = read(&run, 1, 1.0, "", "0: Traceback\n0: RuntimeError: boom\n");
        assert_eq!(r.error.as_deref(), Some("Traceback | RuntimeError: boom"));
    }
}
