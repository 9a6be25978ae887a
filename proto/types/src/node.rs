//! Nodes as the controller records them: registration facts, admin state (drain/down),
//! liveness and health events.

use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Admin-visible node state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NodeAdminState {
    /// Schedulable.
    Up,
    /// No new jobs; running jobs continue. Set by an admin or by a critical health event.
    Drain {
        reason: String,
        since_ms: u64,
        by: String,
    },
}

/// How serious a health event is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum HealthSeverity {
    Info,
    Warning,
    /// Drains the node.
    Critical,
}

/// What a health event is about.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HealthKind {
    /// The GPU is gone (fell off the bus, NVML lost it, Xid 79, no longer enumerated).
    GpuLost,
    /// Fewer GPUs than registered are visible.
    GpuCount,
    /// An Xid error (the code is in `HealthEvent::xid`).
    Xid,
    /// An NVSwitch SXid error.
    NvswitchSxid,
    /// At or above the slowdown temperature.
    Temperature,
    /// The PCIe link trained below its maximum generation or width.
    PcieDegraded,
    /// A NIC (or the training interface) is down.
    NicDown,
    /// The training interface's MTU differs from the training network's.
    MtuMismatch,
    /// Uncorrected ECC errors.
    Ecc,
    /// Rows are waiting to be remapped (needs a GPU reset).
    RemapPending,
    /// A driver message that names no known fault (an NVRM line gsched does not know).
    Driver,
    /// The host's setup would make jobs misbehave (Slurm's own commands found first in
    /// a login shell).
    HostSetup,
}

impl HealthKind {
    pub fn name(self) -> &'static str {
        match self {
            HealthKind::GpuLost => "gpu_lost",
            HealthKind::GpuCount => "gpu_count",
            HealthKind::Xid => "xid",
            HealthKind::NvswitchSxid => "nvswitch_sxid",
            HealthKind::Temperature => "temperature",
            HealthKind::PcieDegraded => "pcie_degraded",
            HealthKind::NicDown => "nic_down",
            HealthKind::MtuMismatch => "mtu_mismatch",
            HealthKind::Ecc => "ecc",
            HealthKind::RemapPending => "remap_pending",
            HealthKind::Driver => "driver",
            HealthKind::HostSetup => "host_setup",
        }
    }

    /// True when the GPU itself is gone (as opposed to an error on a GPU that is still there).
    pub fn is_gpu_loss(self) -> bool {
        matches!(self, HealthKind::GpuLost | HealthKind::GpuCount)
    }
}

impl std::fmt::Display for HealthKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Something the agent's health monitor saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HealthEvent {
    pub severity: HealthSeverity,
    pub kind: HealthKind,
    /// GPU index concerned, if any.
    #[serde(default)]
    pub gpu: Option<u32>,
    #[serde(default)]
    pub xid: Option<u32>,
    pub message: String,
    pub at_ms: u64,
    /// A critical event the node cannot tie to one GPU (a redacted or unknown PCI
    /// address): every job on the node is stopped, as none of its GPUs can be trusted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stops_node_jobs: bool,
    /// The finding it reports: component, evidence and what to do (the same shape as
    /// `gagentd diagnose`'s). Absent in events of agents before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<crate::findings::Finding>,
}

impl HealthEvent {
    /// An event about the node (no GPU, no Xid).
    pub fn new(severity: HealthSeverity, kind: HealthKind, message: String, at_ms: u64) -> Self {
        HealthEvent {
            severity,
            kind,
            gpu: None,
            xid: None,
            message,
            at_ms,
            stops_node_jobs: false,
            finding: None,
        }
    }

    pub fn on_gpu(mut self, gpu: Option<u32>) -> Self {
        self.gpu = gpu;
        self
    }
}

/// The controller's record of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeRecord {
    pub name: String,
    /// Management address the agent connected from / advertised.
    pub address: String,
    /// Address on the training network (MASTER_ADDR when this node is rank 0).
    pub training_addr: String,
    pub topology: Topology,
    #[serde(default)]
    pub features: Vec<String>,
    pub admin: NodeAdminState,
    /// The node is in service: its agent registered and the node was not declared lost
    /// since (as last committed by the leader).
    pub online: bool,
    /// Its agent answers. A node that stops answering is first not responding (no new
    /// jobs, its jobs keep running), and lost only after the dead-node timeout.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub responding: bool,
    /// Steps a returning agent still runs that the controller no longer wants: the node
    /// takes no new job until its agent has confirmed each of them stopped (fencing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fencing: Vec<crate::agent::RunRef>,
    pub registered_ms: u64,
    #[serde(default)]
    pub state_changed_ms: u64,
    /// GPUs withheld from scheduling because they are lost or faulted.
    #[serde(default)]
    pub bad_gpus: Vec<u32>,
    /// Most recent health events (bounded).
    #[serde(default)]
    pub health: Vec<HealthEvent>,
    #[serde(default)]
    pub agent_version: String,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl NodeRecord {
    pub fn is_drained(&self) -> bool {
        matches!(self.admin, NodeAdminState::Drain { .. })
    }

    /// Can accept new jobs: in service, answering, not drained, nothing left to fence.
    pub fn is_schedulable(&self) -> bool {
        self.online && self.responding && self.fencing.is_empty() && !self.is_drained()
    }

    pub fn drain_reason(&self) -> Option<&str> {
        match &self.admin {
            NodeAdminState::Drain { reason, .. } => Some(reason),
            NodeAdminState::Up => None,
        }
    }
}
