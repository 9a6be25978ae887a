//! Checks before a controller joins the Raft group: an unreachable or mistaken member
//! would cost the group its quorum (a single controller plus a dead one never elects a
//! leader again), so the leader first asks the address who it is, over the same
//! authenticated channel Raft traffic will use.

use crate::ctx::Ctx;
use gsched_proto::pb::HelloRequest;
use gsched_proto::pb::peer_client::PeerClient;
use gsched_proto::tls::is_loopback;
use std::time::Duration;
use tonic::Status;

/// Refuses to add controller `id` at `address` unless a controller answers there with
/// that id (and, on a real cluster, a server certificate of this cluster for the host).
pub async fn verify_new_member(ctx: &Ctx, id: u64, address: &str) -> Result<(), Status> {
    if ctx.auth.is_dev_local() && !is_loopback(address) {
        return Err(Status::invalid_argument(format!(
            "{address} is not a loopback address: a --dev-local cluster stays on one host"
        )));
    }
    if ctx.raft.status.borrow().voters.contains(&id) {
        return Err(Status::already_exists(format!(
            "controller {id} is already a member"
        )));
    }
    let unreachable = |e: String| {
        Status::failed_precondition(format!(
            "controller {id} does not answer at {address} ({e}); start it first with `gctld --id {id} --join ...`"
        ))
    };
    let channel = ctx
        .dialer
        .connect(
            address,
            gsched_proto::dial::Timeouts {
                connect: Duration::from_secs(2),
                request: Some(Duration::from_secs(5)),
                keepalive: None,
            },
        )
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let reply = PeerClient::new(channel)
        .hello(HelloRequest { from: ctx.cfg.id })
        .await
        .map_err(|s| unreachable(s.message().to_string()))?
        .into_inner();
    if reply.id != id {
        return Err(Status::failed_precondition(format!(
            "the controller at {address} is controller {}, not {id}",
            reply.id
        )));
    }
    Ok(())
}
