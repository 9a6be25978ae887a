//! The pure gsched scheduler: `plan(snapshot, now) -> Plan`.
//!
//! No IO, no clock, no randomness: the controller's leader and the `gsim` simulator call
//! the same function with a [`Snapshot`] of the cluster and get the same [`Plan`]. The
//! leader re-checks every planned allocation against the latest committed state with the
//! same `fits` function (`gsched_types::resources::fits`) before it takes effect.
//!
//! - [`topo`]: a node's GPU wiring and the best GPU set of a given size.
//! - [`place`]: which nodes, GPUs, CPUs, memory and NIC a job gets.
//! - [`priority`]: multifactor priority and fair share.
//! - [`plan`]: one pass with EASY backfill, limits, dependencies and reasons.

pub mod config;
pub mod decay;
pub mod deps;
pub mod input;
pub mod place;
pub mod plan;
pub mod priority;
pub mod topo;
pub mod windows;

pub use config::{Policy, SchedConfig};
pub use input::{DepView, NicView, NodeView, PendingJob, RunningJob, Snapshot, UsageRecord};
pub use plan::{Plan, PlannedStart, Preemption, plan};
pub use topo::TopoModel;
