//! The agent stream's messages ([`gsched_types::agent`]); `crate::contract` ties them to
//! `AgentEnvelope` and `ControllerEnvelope`.

pub use gsched_types::agent::*;
