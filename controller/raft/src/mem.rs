//! In-memory [`LogStore`], for tests and simulations.

use crate::store::{LogStore, Result, StoreError};
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

#[derive(Default, Clone)]
pub struct MemStore {
    hs: HardState,
    cs: ConfState,
    snap: Snapshot,
    entries: Vec<Entry>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }
}

impl LogStore for MemStore {
    fn hard_state(&self) -> HardState {
        self.hs.clone()
    }
    fn conf_state(&self) -> ConfState {
        self.cs.clone()
    }
    fn snapshot(&self) -> Result<Snapshot> {
        Ok(self.snap.clone())
    }
    fn first_index(&self) -> u64 {
        self.entries
            .first()
            .map(|e| e.index)
            .unwrap_or(self.snap.get_metadata().index + 1)
    }
    fn last_index(&self) -> u64 {
        self.entries
            .last()
            .map(|e| e.index)
            .unwrap_or(self.snap.get_metadata().index)
    }
    fn entries(&self, low: u64, high: u64, max_size: Option<u64>) -> Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(StoreError::Compacted);
        }
        if high > self.last_index() + 1 {
            return Err(StoreError::Unavailable);
        }
        let offset = self.first_index();
        let mut out = Vec::new();
        let mut size = 0u64;
        for e in &self.entries[(low - offset) as usize..(high - offset) as usize] {
            size += u64::from(e.compute_size());
            if !out.is_empty() && max_size.is_some_and(|m| size > m) {
                break;
            }
            out.push(e.clone());
        }
        Ok(out)
    }
    fn term(&self, idx: u64) -> Result<u64> {
        let meta = self.snap.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < self.first_index() {
            return Err(StoreError::Compacted);
        }
        if idx > self.last_index() {
            return Err(StoreError::Unavailable);
        }
        Ok(self.entries[(idx - self.first_index()) as usize].term)
    }
    fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if first.index < self.first_index() {
            return Err(StoreError::Corrupt(format!(
                "append at {} before first index {}",
                first.index,
                self.first_index()
            )));
        }
        if first.index > self.last_index() + 1 {
            return Err(StoreError::Corrupt(format!(
                "append at {} leaves a gap after {}",
                first.index,
                self.last_index()
            )));
        }
        let keep = (first.index - self.first_index()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
        Ok(())
    }
    fn set_hard_state(&mut self, hs: &HardState) -> Result<()> {
        self.hs = hs.clone();
        Ok(())
    }
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<()> {
        self.cs = cs.clone();
        Ok(())
    }
    fn save_snapshot(&mut self, snap: &Snapshot, compact_to: u64) -> Result<()> {
        let index = snap.get_metadata().index;
        let compact_to = compact_to.min(index + 1);
        let drop = compact_to
            .saturating_sub(self.first_index())
            .min(self.entries.len() as u64) as usize;
        self.entries.drain(..drop);
        self.snap = snap.clone();
        if self.entries.is_empty() {
            // Keep first/last consistent with the snapshot when every entry is gone.
        }
        Ok(())
    }
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<()> {
        let meta = snap.get_metadata();
        self.entries.clear();
        self.snap = snap.clone();
        self.cs = meta.get_conf_state().clone();
        self.hs.commit = self.hs.commit.max(meta.index);
        self.hs.term = self.hs.term.max(meta.term);
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        0
    }
}
