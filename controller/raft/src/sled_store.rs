//! [`LogStore`] on sled: entries in the `log` tree keyed by big-endian index, hard state,
//! conf state and the latest snapshot in the `meta` tree. `sync` is `sled::Db::flush`.

use crate::store::{LogStore, Result, StoreError};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use std::path::Path;

pub struct SledStore {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    hs: HardState,
    cs: ConfState,
    snap_meta: raft::eraftpb::SnapshotMetadata,
    first: u64,
    last: u64,
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn decode<M: protobuf::Message>(bytes: &[u8], what: &str) -> Result<M> {
    M::parse_from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn encode<M: protobuf::Message>(m: &M) -> Vec<u8> {
    m.write_to_bytes().expect("raft messages always encode")
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SledStore> {
        let db = sled::Config::new()
            .path(dir.join("raft.sled"))
            .flush_every_ms(None)
            .open()
            .map_err(io)?;
        let log = db.open_tree("log").map_err(io)?;
        let meta = db.open_tree("meta").map_err(io)?;
        let hs = match meta.get("hard_state").map_err(io)? {
            Some(b) => decode(&b, "hard state")?,
            None => HardState::default(),
        };
        let cs = match meta.get("conf_state").map_err(io)? {
            Some(b) => decode(&b, "conf state")?,
            None => ConfState::default(),
        };
        let snap_meta = match meta.get("snapshot").map_err(io)? {
            Some(b) => decode::<Snapshot>(&b, "snapshot")?.take_metadata(),
            None => Default::default(),
        };
        let key = |k: sled::IVec| u64::from_be_bytes(k.as_ref().try_into().unwrap_or([0; 8]));
        let first = log
            .first()
            .map_err(io)?
            .map(|(k, _)| key(k))
            .unwrap_or(snap_meta.index + 1);
        let last = log
            .last()
            .map_err(io)?
            .map(|(k, _)| key(k))
            .unwrap_or(snap_meta.index);
        Ok(SledStore {
            db,
            log,
            meta,
            hs,
            cs,
            snap_meta,
            first,
            last,
        })
    }
}

impl LogStore for SledStore {
    fn hard_state(&self) -> HardState {
        self.hs.clone()
    }
    fn conf_state(&self) -> ConfState {
        self.cs.clone()
    }
    fn snapshot(&self) -> Result<Snapshot> {
        match self.meta.get("snapshot").map_err(io)? {
            Some(b) => decode(&b, "snapshot"),
            None => Ok(Snapshot::default()),
        }
    }
    fn first_index(&self) -> u64 {
        self.first
    }
    fn last_index(&self) -> u64 {
        self.last
    }
    fn entries(&self, low: u64, high: u64, max_size: Option<u64>) -> Result<Vec<Entry>> {
        if low < self.first {
            return Err(StoreError::Compacted);
        }
        if high > self.last + 1 {
            return Err(StoreError::Unavailable);
        }
        let mut out = Vec::new();
        let mut size = 0u64;
        for item in self.log.range(low.to_be_bytes()..high.to_be_bytes()) {
            let (_, v) = item.map_err(io)?;
            size += v.len() as u64;
            if !out.is_empty() && max_size.is_some_and(|m| size > m) {
                break;
            }
            out.push(decode(&v, "log entry")?);
        }
        if out.is_empty() && low < high {
            return Err(StoreError::Corrupt(format!(
                "entries {low}..{high} missing from the log"
            )));
        }
        Ok(out)
    }
    fn term(&self, idx: u64) -> Result<u64> {
        if idx == self.snap_meta.index {
            return Ok(self.snap_meta.term);
        }
        if idx < self.first {
            return Err(StoreError::Compacted);
        }
        if idx > self.last {
            return Err(StoreError::Unavailable);
        }
        match self.log.get(idx.to_be_bytes()).map_err(io)? {
            Some(v) => Ok(decode::<Entry>(&v, "log entry")?.term),
            None => Err(StoreError::Corrupt(format!(
                "entry {idx} missing from the log"
            ))),
        }
    }
    fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if first.index < self.first {
            return Err(StoreError::Corrupt(format!(
                "append at {} before first index {}",
                first.index, self.first
            )));
        }
        if first.index > self.last + 1 {
            return Err(StoreError::Corrupt(format!(
                "append at {} leaves a gap after {}",
                first.index, self.last
            )));
        }
        let mut batch = sled::Batch::default();
        for idx in first.index..=self.last {
            batch.remove(&idx.to_be_bytes());
        }
        for e in entries {
            batch.insert(&e.index.to_be_bytes(), encode(e));
        }
        self.log.apply_batch(batch).map_err(io)?;
        self.last = entries.last().map(|e| e.index).unwrap_or(self.last);
        Ok(())
    }
    fn set_hard_state(&mut self, hs: &HardState) -> Result<()> {
        self.meta.insert("hard_state", encode(hs)).map_err(io)?;
        self.hs = hs.clone();
        Ok(())
    }
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<()> {
        self.meta.insert("conf_state", encode(cs)).map_err(io)?;
        self.cs = cs.clone();
        Ok(())
    }
    fn save_snapshot(&mut self, snap: &Snapshot, compact_to: u64) -> Result<()> {
        let index = snap.get_metadata().index;
        self.meta.insert("snapshot", encode(snap)).map_err(io)?;
        self.snap_meta = snap.get_metadata().clone();
        let compact_to = compact_to.min(index + 1).min(self.last + 1);
        if compact_to > self.first {
            let mut batch = sled::Batch::default();
            for idx in self.first..compact_to {
                batch.remove(&idx.to_be_bytes());
            }
            self.log.apply_batch(batch).map_err(io)?;
            self.first = compact_to;
        }
        if self.last < self.first {
            self.last = self.first - 1;
        }
        if self.last < index {
            // Own snapshots never run ahead of the log; keep the invariant explicit.
            self.last = index;
            self.first = index + 1;
        }
        Ok(())
    }
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<()> {
        let meta = snap.get_metadata().clone();
        self.log.clear().map_err(io)?;
        self.meta.insert("snapshot", encode(snap)).map_err(io)?;
        self.snap_meta = meta.clone();
        self.first = meta.index + 1;
        self.last = meta.index;
        let cs = meta.get_conf_state().clone();
        self.set_conf_state(&cs)?;
        let mut hs = self.hs.clone();
        hs.commit = hs.commit.max(meta.index);
        hs.term = hs.term.max(meta.term);
        self.set_hard_state(&hs)
    }
    fn sync(&mut self) -> Result<()> {
        self.db.flush().map_err(io)?;
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}
