//! Adapts a [`LogStore`] to raft-rs's `Storage` trait.

use crate::store::{LogStore, StoreError};
use raft::eraftpb::{Entry, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};

/// The storage a `RawNode` owns; the node loop writes through `RawNode::mut_store`.
pub struct RaftStorage<S: LogStore> {
    pub store: S,
}

fn to_raft(e: StoreError) -> raft::Error {
    match e {
        StoreError::Compacted => raft::Error::Store(raft::StorageError::Compacted),
        StoreError::Unavailable => raft::Error::Store(raft::StorageError::Unavailable),
        other => raft::Error::Store(raft::StorageError::Other(Box::new(other))),
    }
}

impl<S: LogStore> Storage for RaftStorage<S> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.store.hard_state(),
            conf_state: self.store.conf_state(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.store
            .entries(low, high, max_size.into())
            .map_err(to_raft)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.store.term(idx).map_err(to_raft)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.store.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.store.last_index())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let snap = self.store.snapshot().map_err(to_raft)?;
        if snap.get_metadata().index == 0 {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(snap)
    }
}
