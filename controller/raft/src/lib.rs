//! Raft replication for gsched on TiKV's raft-rs: a narrow storage trait with in-memory
//! and sled implementations (and the conformance suite both pass), the raft-rs `Storage`
//! adapter, and the replica thread that runs the Ready loop and applies commands to the
//! state machine. Networking is behind the [`Transport`] trait; the controller provides a
//! gRPC one.

mod logger;
pub mod mem;
pub mod node;
pub mod sled_store;
pub mod storage;
pub mod store;
pub mod suite;

pub use mem::MemStore;
pub use node::{
    Membership, Msg, NodeConfig, NodeError, NodeStatus, ProposeError, RaftHandle, Replica,
    STORAGE_FAULT_PAUSE, StorageRecovery, Transport, start, start_supervised,
};
pub use sled_store::SledStore;
pub use store::{LogStore, StoreError};

/// Encodes a raft message for the wire (raft-rs's own protobuf codec, carried as opaque
/// bytes in gsched's gRPC messages).
pub fn encode_message(m: &raft::eraftpb::Message) -> Vec<u8> {
    protobuf::Message::write_to_bytes(m).expect("raft messages always encode")
}

/// Decodes a raft message received from a peer.
pub fn decode_message(bytes: &[u8]) -> Result<raft::eraftpb::Message, protobuf::ProtobufError> {
    <raft::eraftpb::Message as protobuf::Message>::parse_from_bytes(bytes)
}

pub use raft::eraftpb::Message as RaftMessage;
