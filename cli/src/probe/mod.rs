//! `gctl doctor --probe`: what can only be seen on the nodes and between them, found by a
//! probe job (one task per node, Python's standard library, no GPU) run through the
//! scheduler: training-network reachability and MTU agreement between every pair of
//! nodes (a small and a full-MTU "don't fragment" datagram each way), clock skew, free
//! space on the paths the admin names, and the interface NCCL is told to use. `run`
//! starts the job and reads its reports; `judge` turns them into findings (pure).

pub mod judge;

use crate::grun_job::{GrunJob, unlabel};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The probe every task runs (`python3 -c`).
pub const PROBE: &str = include_str!("probe.py");

/// One echo: its round trip and the peer's clock against ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Echo {
    pub rtt_ms: f64,
    pub offset_ms: f64,
    pub bytes: u32,
}

/// What one node saw of one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    pub small: Option<Echo>,
    #[serde(default)]
    pub small_error: Option<String>,
    pub large: Option<Echo>,
    #[serde(default)]
    pub large_error: Option<String>,
    pub large_bytes: u32,
}

/// Free space on a path, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    #[serde(default)]
    pub free: Option<u64>,
    #[serde(default)]
    pub total: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
}

/// One node's probe report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub node: String,
    pub addr: String,
    #[serde(default)]
    pub iface: Option<String>,
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Set when the training address is not this host's (nothing could listen on it).
    #[serde(default)]
    pub bind_error: Option<String>,
    #[serde(default)]
    pub peers: BTreeMap<String, PeerReport>,
    #[serde(default)]
    pub paths: BTreeMap<String, PathReport>,
    #[serde(default)]
    pub nccl_socket_ifname: Option<String>,
}

/// How to run the probe job.
pub struct Options {
    pub grun: PathBuf,
    pub python: String,
    pub partition: Option<String>,
    pub controllers: Option<String>,
    /// Paths whose free space each node reports (`--paths /models,/datasets`).
    pub paths: Vec<String>,
    /// The service user the probe job is submitted as (root's), else the caller.
    pub run_as: Option<crate::grun_job::ServiceUser>,
}

/// What the probe job gave: each node's report, and grun's stderr when some are missing.
pub struct Outcome {
    pub reports: Vec<Report>,
    pub stderr_tail: String,
}

/// Runs the probe on `nodes` (name, training address) as one job, a task on each.
pub fn run(nodes: &[(String, String)], opts: &Options) -> Outcome {
    let names: Vec<String> = nodes.iter().map(|(n, _)| n.clone()).collect();
    let table: BTreeMap<&str, &str> = nodes
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_str()))
        .collect();
    // Every task answers until the slowest could have asked every peer five times.
    let seconds = 4.0 + 3.5 * nodes.len().saturating_sub(1) as f64;
    let job = GrunJob {
        grun: &opts.grun,
        nodes: &names,
        gpus_per_node: 0,
        tasks_per_node: 1,
        name: "doctor-probe".into(),
        time_limit: "10",
        partition: opts.partition.as_deref(),
        controllers: opts.controllers.as_deref(),
        run_as: opts.run_as.as_ref(),
    };
    let nodes_json = serde_json::to_string(&table).expect("a node table serialises");
    let paths_json = serde_json::to_string(&opts.paths).expect("paths serialise");
    let argv = [
        opts.python.as_str(),
        "-c",
        PROBE,
        &nodes_json,
        &paths_json,
        &format!("{seconds}"),
    ];
    match job.command(&argv).output() {
        Ok(o) => {
            let stdout = String::from_utf8_lossy(&o.stdout);
            let stderr = String::from_utf8_lossy(&o.stderr);
            let reports = stdout
                .lines()
                .map(unlabel)
                .filter_map(|l| l.strip_prefix("GSCHED_PROBE "))
                .filter_map(|j| serde_json::from_str(j).ok())
                .collect();
            let tail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            Outcome {
                reports,
                stderr_tail: tail[tail.len().saturating_sub(3)..].join(" | "),
            }
        }
        Err(e) => Outcome {
            reports: Vec::new(),
            stderr_tail: format!("cannot start {}: {e}", opts.grun.display()),
        },
    }
}
