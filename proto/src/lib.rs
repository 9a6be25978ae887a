//! The contract between gsched processes: the generated gRPC code for `schema/gsched.proto`,
//! which JSON document each message carries ([`contract`]; the agent stream's are
//! `gsched_types::agent`'s), and what every process needs to speak it safely: [`tls`]
//! (certificates, identities), [`dial`] (reaching a controller, checking who serves it),
//! [`peer`] (the kernel's word on a local peer), [`munge`] (user credentials) and
//! [`clock`].

#[allow(clippy::all)]
pub mod pb {
    tonic::include_proto!("gsched.v1");
}

pub mod clock;
pub mod contract;
pub mod dial;
pub mod logs;
pub mod munge;
pub mod peer;
pub mod tls;

/// gRPC metadata key carrying the leader's client address when a controller redirects.
pub const LEADER_HINT: &str = "gsched-leader";

/// gRPC metadata key carrying the caller's MUNGE credential.
pub const MUNGE_CREDENTIAL: &str = "gsched-munge";
