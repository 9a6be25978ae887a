//! The replicated state machine: versioned commands ([`command`]), the cluster state and
//! its deterministic `apply` ([`machine`]), the scheduler snapshot built from it ([`view`])
//! and the invariants every replica must hold ([`invariants`]).
//!
//! Pure: no clock, IO or threads. The Raft layer feeds committed entries to
//! [`ClusterState::apply`] in log order on every replica.

pub mod command;
pub mod decide;
pub mod idle;
pub mod invariants;
pub mod machine;
pub mod notify;
pub mod rows;
pub mod validate;
pub mod view;

pub use command::*;
pub use machine::{ClusterState, TokenRevocations};
