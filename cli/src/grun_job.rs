//! Jobs the admin tools run through `grun` (`gctl burn-in`'s stages, `gctl doctor
//! --probe`): one allocation each on named nodes, through the scheduler like any job,
//! labelled output captured; the caller's own job identity and rendezvous variables are
//! not passed on (grun would take them for an allocation to run in).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One `grun` invocation outside any job.
pub struct GrunJob<'a> {
    pub grun: &'a Path,
    pub nodes: &'a [String],
    pub gpus_per_node: u32,
    pub tasks_per_node: u32,
    pub name: String,
    pub time_limit: &'a str,
    pub partition: Option<&'a str>,
    pub controllers: Option<&'a str>,
}

/// Variables of the caller's environment the job's tasks get.
fn inherited(name: &str) -> bool {
    !(name.starts_with("SLURM_")
        || name.starts_with("GSCHED_JOB")
        || matches!(
            name,
            "MASTER_ADDR"
                | "MASTER_PORT"
                | "RANK"
                | "WORLD_SIZE"
                | "LOCAL_RANK"
                | "CUDA_VISIBLE_DEVICES"
        ))
}

/// The `grun` next to this binary, else the one on PATH.
pub fn grun_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("grun")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "grun".into())
}

impl GrunJob<'_> {
    /// The command that runs `argv` as this job's tasks (`-l`: lines labelled by rank;
    /// `-K`: one failed task stops the rest), stdin closed, output piped.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut c = Command::new(self.grun);
        c.env_clear()
            .envs(std::env::vars().filter(|(k, _)| inherited(k)))
            .env("PYTHONUNBUFFERED", "1");
        c.args([
            "-N",
            &self.nodes.len().to_string(),
            "-w",
            &self.nodes.join(","),
        ])
        .args(["--gpus-per-node", &self.gpus_per_node.to_string()])
        .args(["--ntasks-per-node", &self.tasks_per_node.to_string()])
        .args(["-J", &self.name, "-t", self.time_limit])
        .args(["--kill-on-bad-exit", "-l"]);
        if let Some(p) = self.partition {
            c.args(["-p", p]);
        }
        if let Some(ctl) = self.controllers {
            c.args(["--controllers", ctl]);
        }
        c.arg("--")
            .args(argv)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// Strips grun's `-l` label ("3: ") from a line.
pub fn unlabel(line: &str) -> &str {
    match line.split_once(": ") {
        Some((rank, rest)) if rank.trim().parse::<u32>().is_ok() => rest,
        _ => line,
    }
}
