//! [`LogStore`] on sled: entries in the `log` tree keyed by big-endian index, hard state,
//! conf state and the latest snapshot's metadata in the `meta` tree. `sync` is
//! `sled::Db::flush`.
//!
//! Snapshot data (the whole state machine, tens of MB on a busy cluster) lives beside the
//! database in `snapshot-<index>-<term>.bin`, written to a temporary file, fsynced and
//! renamed before the metadata in sled points at it; a replaced file is deleted only after
//! the next `sync` made the new pointer durable. Kept out of sled, large snapshots do not
//! inflate sled's log-structured files.

use crate::store::{LogStore, Result, StoreError};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use std::path::Path;

pub struct SledStore {
    dir: std::path::PathBuf,
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    hs: HardState,
    cs: ConfState,
    snap_meta: raft::eraftpb::SnapshotMetadata,
    first: u64,
    last: u64,
    /// Snapshot files to delete once the pointer to their successor is durable.
    obsolete: Vec<std::path::PathBuf>,
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

fn file_io(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{what} {}: {e}", path.display()))
}

fn snapshot_file_name(meta: &raft::eraftpb::SnapshotMetadata) -> String {
    format!("snapshot-{}-{}.bin", meta.index, meta.term)
}

/// Writes `bytes` to `path` so that after a crash the file is either absent or complete.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| file_io("creating", &tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| file_io("writing", &tmp, e))?;
    f.sync_all().map_err(|e| file_io("syncing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| file_io("renaming", &tmp, e))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| file_io("syncing", dir, e))?;
    }
    Ok(())
}

/// sled's page cache: its default (1 GiB) would let it grow with the log.
pub const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SledStore> {
        SledStore::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store in `dir`, with sled's page cache capped at
    /// `cache_bytes` (the log is read back rarely: by followers catching up and at start).
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledStore> {
        let db = sled::Config::new()
            .path(dir.join("raft.sled"))
            .cache_capacity(cache_bytes)
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
        let snap_meta = match meta.get("snapshot_meta").map_err(io)? {
            Some(b) => decode::<raft::eraftpb::SnapshotMetadata>(&b, "snapshot metadata")?,
            None => Default::default(),
        };
        // Snapshot files the durable metadata does not point at are leftovers of a crash
        // (written but never referenced, or replaced but not yet deleted).
        let current = (snap_meta.index > 0).then(|| snapshot_file_name(&snap_meta));
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("snapshot-") && Some(&name) != current.as_ref() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        if let Some(name) = &current
            && !dir.join(name).exists()
        {
            return Err(StoreError::Corrupt(format!(
                "snapshot file {} is missing",
                dir.join(name).display()
            )));
        }
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
            dir: dir.to_path_buf(),
            db,
            log,
            meta,
            hs,
            cs,
            snap_meta,
            first,
            last,
            obsolete: Vec::new(),
        })
    }

    /// Stores the snapshot's data in its own file and points the metadata at it.
    fn put_snapshot(&mut self, snap: &Snapshot) -> Result<()> {
        let meta = snap.get_metadata();
        let path = self.dir.join(snapshot_file_name(meta));
        write_durably(&path, &snap.data)?;
        self.meta
            .insert("snapshot_meta", encode(meta))
            .map_err(io)?;
        if self.snap_meta.index > 0
            && snapshot_file_name(&self.snap_meta) != snapshot_file_name(meta)
        {
            self.obsolete
                .push(self.dir.join(snapshot_file_name(&self.snap_meta)));
        }
        self.snap_meta = meta.clone();
        Ok(())
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
        let mut snap = Snapshot::default();
        if self.snap_meta.index == 0 {
            return Ok(snap);
        }
        let path = self.dir.join(snapshot_file_name(&self.snap_meta));
        let data = std::fs::read(&path).map_err(|e| file_io("reading", &path, e))?;
        snap.set_metadata(self.snap_meta.clone());
        snap.data = data.into();
        Ok(snap)
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
        self.put_snapshot(snap)?;
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
        self.put_snapshot(snap)?;
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
        for old in self.obsolete.drain(..) {
            let _ = std::fs::remove_file(old);
        }
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        let snapshot = std::fs::metadata(self.dir.join(snapshot_file_name(&self.snap_meta)))
            .map(|m| m.len())
            .unwrap_or(0);
        self.db.size_on_disk().unwrap_or(0) + snapshot
    }
}
