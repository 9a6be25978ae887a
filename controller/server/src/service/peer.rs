//! The `Peer` service: Raft messages from other controllers, and snapshots in chunks.

use crate::ctx::Ctx;
use gsched_proto::pb::peer_server::Peer;
use gsched_proto::pb::{Empty, RaftBatch, SnapshotChunk};
use gsched_raft::decode_message;
use std::sync::Arc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

pub struct PeerService {
    pub ctx: Arc<Ctx>,
}

impl PeerService {
    fn learn(&self, from: u64, address: &str) {
        if address.is_empty() || from == 0 {
            return;
        }
        let mut book = self.ctx.book.write();
        if book.get(&from).map(String::as_str) != Some(address) {
            book.insert(from, address.to_string());
        }
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn send(&self, req: Request<RaftBatch>) -> Result<Response<Empty>, Status> {
        let batch = req.into_inner();
        if self.ctx.faults.is_blocked(batch.from) {
            return Err(Status::unavailable(
                "traffic from this peer is blocked (fault injection)",
            ));
        }
        self.learn(batch.from, &batch.from_address);
        for bytes in batch.messages {
            let msg = decode_message(&bytes)
                .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
            self.ctx.raft.step(msg);
        }
        Ok(Response::new(Empty {}))
    }

    async fn send_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<Empty>, Status> {
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        if self.ctx.faults.is_blocked(first.from) {
            return Err(Status::unavailable(
                "traffic from this peer is blocked (fault injection)",
            ));
        }
        self.learn(first.from, &first.from_address);
        let mut msg = decode_message(&first.message)
            .map_err(|e| Status::invalid_argument(format!("bad snapshot header: {e}")))?;
        let mut data = first.data;
        while let Some(chunk) = stream.next().await {
            data.extend_from_slice(&chunk?.data);
        }
        tracing::info!(
            "received a {}-byte snapshot from controller {}",
            data.len(),
            first.from
        );
        msg.mut_snapshot().data = data.into();
        self.ctx.raft.step(msg);
        Ok(Response::new(Empty {}))
    }
}
