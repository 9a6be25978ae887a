//! `gctl burn-in`: the bring-up guide's staged tests run through the scheduler as
//! ordinary `grun` jobs (each GPU alone, each node's all-reduce, node pairs, the whole
//! set), judged against what each link class should carry, written up as a report with a
//! bandwidth plot per stage. Planning, expectations, judging and the report are pure; only
//! `exec` starts processes.

pub mod exec;
pub mod expect;
pub mod judge;
pub mod plan;
pub mod report;

use gsched_types::findings::Finding;
use serde::{Deserialize, Serialize};

/// The probe every task runs (`python3 -c`), embedded so nodes need only PyTorch.
pub const PROBE: &str = include_str!("probe.py");

/// A stage of the bring-up order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Each GPU alone: a memory pattern and a matmul.
    Gpu,
    /// Each node's all-reduce over its GPUs.
    Node,
    /// Pairs of nodes, all their GPUs.
    Pair,
    /// Every node at once.
    All,
}

impl Stage {
    pub const ORDER: [Stage; 4] = [Stage::Gpu, Stage::Node, Stage::Pair, Stage::All];

    pub fn title(self) -> &'static str {
        match self {
            Stage::Gpu => "1. Each GPU alone (memory and compute)",
            Stage::Node => "2. Each node's all-reduce over its GPUs",
            Stage::Pair => "3. Node pairs",
            Stage::All => "4. All nodes together",
        }
    }

    /// The probe's mode for this stage.
    pub fn probe(self) -> &'static str {
        match self {
            Stage::Gpu => "gpu",
            _ => "allreduce",
        }
    }

    /// A short name for files and job names.
    pub fn slug(self) -> &'static str {
        match self {
            Stage::Gpu => "gpu",
            Stage::Node => "node",
            Stage::Pair => "pair",
            Stage::All => "all",
        }
    }
}

/// The kind of link that bounds an all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    Nvlink,
    Pcie,
    Network,
}

/// What an all-reduce run should reach, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    pub bound: Bound,
    /// Bus bandwidth (nccl-tests' busbw) the slowest link should allow, GB/s.
    pub busbw_gbps: f64,
    /// The link that bounds it, in words ("NV4: 4 NVLinks x 14 GB/s").
    pub basis: String,
}

/// One job of the burn-in: a stage on some nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub stage: Stage,
    pub nodes: Vec<String>,
    pub gpus_per_node: u32,
    /// Runs of one stage and round go together; rounds never share a node.
    pub round: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expectation>,
}

impl Run {
    pub fn label(&self) -> String {
        gsched_types::hostlist::compress(&self.nodes)
    }

    pub fn job_name(&self) -> String {
        format!("burnin-{}-{}", self.stage.slug(), self.nodes.join("-"))
    }
}

/// One GPU's smoke test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuCheck {
    pub rank: u32,
    pub node: String,
    pub gpu: String,
    pub device: String,
    pub backend: String,
    pub memory_bytes: u64,
    pub memory_ok: bool,
    pub memory_seconds: f64,
    pub tflops: f64,
    pub matmul: String,
}

/// One message size of an all-reduce run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub bytes: u64,
    pub seconds: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub backend: String,
    pub world: u32,
}

/// What one run gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub run: Run,
    /// grun's exit status.
    pub status: i32,
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuCheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// NCCL's transports as its INFO lines name them (P2P/CUMEM, SHM, NET/IB, NET/Socket).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transports: Vec<String>,
    /// Why it failed: the probe's error, else the end of its stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunResult {
    /// The sample at the largest message size: the one judged against link rates.
    pub fn peak(&self) -> Option<&Sample> {
        self.samples.iter().max_by_key(|s| s.bytes)
    }

    /// The backend the run used: "nccl", "gloo", "cuda" or "cpu".
    pub fn backend(&self) -> Option<&str> {
        self.samples
            .first()
            .map(|s| s.backend.as_str())
            .or_else(|| self.gpus.first().map(|g| g.backend.as_str()))
    }

    /// It ran on real GPUs (NCCL or CUDA), so rates mean something about the hardware.
    pub fn on_gpus(&self) -> bool {
        matches!(self.backend(), Some("nccl" | "cuda"))
    }
}

/// `gctl burn-in`'s report (`report.json`, and `--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub started: String,
    pub quick: bool,
    pub nodes: Vec<String>,
    pub results: Vec<RunResult>,
    /// Stages or nodes left out, and why.
    pub skipped: Vec<String>,
    pub findings: Vec<Finding>,
}

impl Report {
    /// True when runs gave results and none touched a GPU (fake agents, or PyTorch
    /// without CUDA).
    pub fn cpu_only(&self) -> bool {
        self.results.iter().any(|r| r.backend().is_some())
            && !self.results.iter().any(RunResult::on_gpus)
    }
}
