//! The agent stream's messages ([`gsched_types::agent`]) and their JSON encoding inside
//! `AgentEnvelope`/`ControllerEnvelope`.

pub use gsched_types::agent::*;
use serde::{Deserialize, Serialize};

pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).expect("protocol messages serialise")
}

pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(bytes)
}
