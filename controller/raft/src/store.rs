//! The narrow durable-storage trait behind a Raft replica: log entries, hard state, conf
//! state and the latest state-machine snapshot. Two implementations pass the same
//! conformance suite ([`crate::suite`]): [`crate::MemStore`] for tests and
//! [`crate::SledStore`] for real controllers.
//!
//! Durability contract: nothing written is guaranteed to survive a crash until `sync`
//! returns. The node calls `sync` after appending entries and saving the hard state and
//! before it sends any message that acknowledges them, so an acknowledged write is on disk
//! on a majority (see the README for what sled's sync does and does not promise).

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

/// Storage failures. Any of them stops the replica (raft-rs cannot continue after a
/// storage error); the operator restarts it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("requested entries were compacted")]
    Compacted,
    #[error("requested entries are not available yet")]
    Unavailable,
    #[error("storage I/O failed: {0}")]
    Io(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "another process holds the store at {} (waited {waited:?}): stop it, or give this one its own data directory",
        path.display()
    )]
    Locked {
        path: std::path::PathBuf,
        waited: std::time::Duration,
    },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Durable Raft state of one replica.
pub trait LogStore: Send + 'static {
    fn hard_state(&self) -> HardState;
    fn conf_state(&self) -> ConfState;
    /// The latest snapshot (metadata and data); index 0 when there is none.
    fn snapshot(&self) -> Result<Snapshot>;
    /// Index of the first entry still in the log (snapshot index + 1 when empty).
    fn first_index(&self) -> u64;
    /// Index of the last entry (the snapshot index when the log is empty).
    fn last_index(&self) -> u64;
    /// Entries `[low, high)`, at least one if any exist, at most about `max_size` bytes.
    fn entries(&self, low: u64, high: u64, max_size: Option<u64>) -> Result<Vec<Entry>>;
    /// Term of entry `idx`; the snapshot index's term is kept after compaction.
    fn term(&self, idx: u64) -> Result<u64>;
    /// Appends entries, first removing any existing entries at or after `entries[0].index`.
    fn append(&mut self, entries: &[Entry]) -> Result<()>;
    fn set_hard_state(&mut self, hs: &HardState) -> Result<()>;
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<()>;
    /// Stores a snapshot of this replica's own applied state and drops log entries before
    /// `compact_to` (exclusive), which must not exceed the snapshot index + 1.
    fn save_snapshot(&mut self, snap: &Snapshot, compact_to: u64) -> Result<()>;
    /// Replaces log and state with a snapshot received from the leader.
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<()>;
    /// Makes everything written so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Bytes used on disk (0 for memory).
    fn disk_bytes(&self) -> u64;
}
