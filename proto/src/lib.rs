//! The contract between gsched processes: the generated gRPC code for `schema/gsched.proto`
//! and the JSON documents carried in its `bytes` fields ([`agent`] for the agent stream).

#[allow(clippy::all)]
pub mod pb {
    tonic::include_proto!("gsched.v1");
}

pub mod agent;
pub mod clock;

/// gRPC metadata key carrying the leader's client address when a controller redirects.
pub const LEADER_HINT: &str = "gsched-leader";
