//! The controller's gRPC services: [`jobs`] for users and admins, [`agent`] for node
//! agents, [`peer`] for Raft traffic between controllers.

pub mod agent;
pub mod jobs;
pub mod peer;
