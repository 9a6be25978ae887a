//! The `Peer` service: Raft messages from other controllers, snapshots in chunks, and
//! `Hello` (who answers here). Only verified controllers may call it, each only as itself;
//! a message that claims another sender or another receiver, or carries a log entry that
//! is not a gsched command, is refused before raft-rs sees it.

use crate::ctx::Ctx;
use gsched_proto::pb::peer_server::Peer;
use gsched_proto::pb::{Empty, HelloReply, HelloRequest, RaftBatch, SnapshotChunk};
use gsched_raft::{RaftMessage, decode_message};
use gsched_state::Envelope;
use raft::eraftpb::{EntryType, MessageType};
use std::sync::Arc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

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

    fn refuse_blocked(&self, from: u64) -> Result<(), Status> {
        if self.ctx.faults.is_blocked(from) {
            return Err(Status::unavailable(
                "traffic from this peer is blocked (fault injection)",
            ));
        }
        Ok(())
    }

    /// Checks a batch from controller `from` (whose identity the caller has verified) and
    /// steps its messages, all or none.
    fn deliver(&self, from: u64, batch: RaftBatch) -> Result<(), Status> {
        self.refuse_blocked(from)?;
        let msgs = batch
            .messages
            .iter()
            .map(|bytes| {
                decode_message(bytes)
                    .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for m in &msgs {
            self.check(from, m)?;
        }
        self.learn(from, &batch.from_address);
        for m in msgs {
            self.ctx.raft.step(m);
        }
        Ok(())
    }

    /// Refuses a message that does not come from `from` to this controller, or whose
    /// entries are not what a gsched log holds.
    fn check(&self, from: u64, msg: &RaftMessage) -> Result<(), Status> {
        if msg.from != from || msg.to != self.ctx.cfg.id {
            return Err(Status::permission_denied(format!(
                "a message from controller {} to {} arrived from controller {from} at controller {}",
                msg.from, msg.to, self.ctx.cfg.id
            )));
        }
        if matches!(
            msg.get_msg_type(),
            MessageType::MsgAppend | MessageType::MsgPropose
        ) {
            for e in msg.get_entries() {
                let ok = match e.get_entry_type() {
                    EntryType::EntryNormal => {
                        e.data.is_empty() || Envelope::decode(&e.data).is_ok()
                    }
                    EntryType::EntryConfChange => {
                        <raft::eraftpb::ConfChange as protobuf::Message>::parse_from_bytes(&e.data)
                            .is_ok()
                    }
                    EntryType::EntryConfChangeV2 => false,
                };
                if !ok {
                    return Err(Status::invalid_argument(format!(
                        "log entry {} from controller {from} is not a gsched command; refused",
                        e.index
                    )));
                }
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn send(&self, req: Request<RaftBatch>) -> Result<Response<Empty>, Status> {
        let from = req.get_ref().from;
        self.ctx.auth.require_controller(&req, from)?;
        self.deliver(from, req.into_inner())?;
        Ok(Response::new(Empty {}))
    }

    async fn stream(
        &self,
        req: Request<tonic::Streaming<RaftBatch>>,
    ) -> Result<Response<Empty>, Status> {
        let daemon = self.ctx.auth.daemon(&req)?;
        let mut batches = req.into_inner();
        let mut sender = None;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            let from = match sender {
                None => {
                    crate::auth::Auth::check_controller(&daemon, batch.from)?;
                    *sender.insert(batch.from)
                }
                Some(from) if from == batch.from => from,
                Some(from) => {
                    return Err(Status::permission_denied(format!(
                        "a stream opened by controller {from} carried a batch from controller {}",
                        batch.from
                    )));
                }
            };
            self.deliver(from, batch)?;
        }
        Ok(Response::new(Empty {}))
    }

    async fn send_snapshot(
        &self,
        req: Request<tonic::Streaming<SnapshotChunk>>,
    ) -> Result<Response<Empty>, Status> {
        let daemon = self.ctx.auth.daemon(&req)?;
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        crate::auth::Auth::check_controller(&daemon, first.from)?;
        self.refuse_blocked(first.from)?;
        let mut msg = decode_message(&first.message)
            .map_err(|e| Status::invalid_argument(format!("bad snapshot header: {e}")))?;
        if msg.get_msg_type() != MessageType::MsgSnapshot {
            return Err(Status::invalid_argument(
                "the first snapshot chunk is not a snapshot message",
            ));
        }
        self.check(first.from, &msg)?;
        let mut data = first.data;
        while let Some(chunk) = stream.next().await {
            data.extend_from_slice(&chunk?.data);
        }
        gsched_state::ClusterState::from_snapshot(&data)
            .map_err(|e| Status::invalid_argument(format!("the snapshot does not decode: {e}")))?;
        self.learn(first.from, &first.from_address);
        tracing::info!(
            "received a {}-byte snapshot from controller {}",
            data.len(),
            first.from
        );
        msg.mut_snapshot().data = data.into();
        self.ctx.raft.step(msg);
        Ok(Response::new(Empty {}))
    }

    async fn hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let from = req.get_ref().from;
        self.ctx.auth.require_controller(&req, from)?;
        Ok(Response::new(HelloReply {
            id: self.ctx.cfg.id,
            address: self.ctx.cfg.advertise.clone(),
        }))
    }
}
