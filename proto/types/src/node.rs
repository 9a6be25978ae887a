//! Nodes as the controller records them: registration facts, admin state (drain/down),
//! liveness and health events.

use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Admin-visible node state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthSeverity {
    Info,
    Warning,
    /// Drains the node.
    Critical,
}

/// Something the agent's health monitor saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthEvent {
    pub severity: HealthSeverity,
    /// Machine-readable kind: `gpu_lost`, `xid`, `temperature`, `pcie_degraded`, `nic_down`,
    /// `mtu_mismatch`, `ecc`, `remap_pending`, `gpu_count`.
    pub kind: String,
    /// GPU index concerned, if any.
    #[serde(default)]
    pub gpu: Option<u32>,
    #[serde(default)]
    pub xid: Option<u32>,
    pub message: String,
    pub at_ms: u64,
}

/// The controller's record of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The agent is connected and heartbeating (as last committed by the leader).
    pub online: bool,
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

impl NodeRecord {
    pub fn is_drained(&self) -> bool {
        matches!(self.admin, NodeAdminState::Drain { .. })
    }

    /// Can accept new jobs.
    pub fn is_schedulable(&self) -> bool {
        self.online && !self.is_drained()
    }

    pub fn drain_reason(&self) -> Option<&str> {
        match &self.admin {
            NodeAdminState::Drain { reason, .. } => Some(reason),
            NodeAdminState::Up => None,
        }
    }
}
