//! The domain vocabulary shared by every gsched crate: topology, job specs and states,
//! allocations, node records, and the small parsers users meet on the command line
//! (hostlists, Slurm time limits, memory sizes, CPU lists).
//!
//! Pure data and pure functions only: no clock, no IO, no async. Types serialise with
//! serde so the same documents travel in the Raft log, over gRPC and in `--json` output.

pub mod agent;
pub mod api;
pub mod assoc;
pub mod binding;
pub mod constraint;
pub mod cpulist;
pub mod error;
pub mod failure;
pub mod findings;
pub mod gpubind;
pub mod hostlist;
pub mod job;
pub mod launch;
pub mod node;
pub mod notify;
pub mod outside;
pub mod parse;
pub mod report;
pub mod reservation;
pub mod resources;
pub mod rlimits;
pub mod steps;
pub mod topology;
pub mod tuning;
pub mod usage;

pub use failure::{Failure, FailureKind};
pub use job::{
    ArrayTask, Dependency, DependencyKind, JobId, JobRecord, JobSpec, JobState, PendingReason,
    RunState, TorchrunSpec,
};
pub use node::{HealthEvent, HealthKind, HealthSeverity, NodeAdminState, NodeRecord};
pub use resources::{Allocation, NodeAlloc, NodeUsage};
pub use topology::{Gpu, LinkClass, Nic, NicKind, NumaNode, Topology};
