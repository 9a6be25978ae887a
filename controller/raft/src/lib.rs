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

/// Decodes a raft message received from a peer: only ever bytes from a controller the
/// transport has authenticated (`Peer` checks the caller's certificate, or on a dev
/// cluster its uid, before it decodes). raft-rs 0.7 decodes with protobuf 2.28, which
/// RUSTSEC-2024-0437 lists (uncontrolled recursion on unknown groups, fixed in 3.7.2, for
/// which raft-rs 0.7 has no codec); see ARCHITECTURE.md, "Who is calling".
pub fn decode_message(bytes: &[u8]) -> Result<raft::eraftpb::Message, protobuf::ProtobufError> {
    <raft::eraftpb::Message as protobuf::Message>::parse_from_bytes(bytes)
}

pub use raft::eraftpb::Message as RaftMessage;

#[cfg(test)]
mod tests {
    use super::*;

    /// RUSTSEC-2024-0437's input, a field of nested groups, against the protobuf 2.28
    /// that decodes peers' messages: refused at the first inner group, without recursing
    /// (on a thread whose stack a recursion a few thousand deep would overflow).
    #[test]
    fn nested_groups_from_a_peer_are_refused_without_recursion() {
        // Field 100 of wire type 3 (start group), a million times.
        let tag = [0xa3u8, 0x06];
        let bytes: Vec<u8> = tag.iter().copied().cycle().take(2_000_000).collect();
        let decoded = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || decode_message(&bytes).is_err())
            .unwrap()
            .join()
            .unwrap();
        assert!(decoded, "nested groups must not decode");
    }
}
