//! [`LogStore`] on sled: entries in segment trees `log.<n>` (indices `n * 1024` to
//! `n * 1024 + 1023`) keyed by big-endian index; hard state, conf state, the first live
//! index and the latest snapshot's metadata in the `meta` tree. `sync` is
//! `sled::Db::flush`.
//!
//! Compaction drops whole segment trees (sled frees their pages at once) instead of removing
//! thousands of keys: per-key removals leave page deltas that sled keeps in memory well past
//! its cache limit. Entries below the first live index in the oldest kept segment stay until
//! that segment is dropped; they are never read.
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
    /// Segment number -> its tree; every entry from `first` to `last` is in one of them.
    segments: std::collections::BTreeMap<u64, sled::Tree>,
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

/// Entries per segment tree, as a shift: 1,024.
const SEGMENT_SHIFT: u32 = 10;
const SEGMENT_PREFIX: &str = "log.";
/// The single tree that held the whole log in development builds before segments.
const SINGLE_TREE_LOG: &str = "log";

fn segment_of(index: u64) -> u64 {
    index >> SEGMENT_SHIFT
}

/// The first index a segment can hold.
fn segment_start(segment: u64) -> u64 {
    segment << SEGMENT_SHIFT
}

fn index_of(key: &[u8]) -> Result<u64> {
    key.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt(format!("log key of {} bytes", key.len())))
}

/// sled's page cache: its default (1 GiB) would let it grow with the log.
pub const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

/// How long `open` waits for sled's file lock before saying another process holds it.
/// A database dropped in this process lets go of its lock only when sled's last
/// background task is done with it (a moment after the drop, longer after removals), and
/// a controller restarted at once can find its predecessor not quite gone.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether sled refused to open because another handle holds its file lock
/// (`Config::open` reports that as an `Io` error of kind `Other` with this wording).
fn is_lock_held(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock"))
}

/// Opens sled at `path`, waiting up to `wait` for a lock held by a handle being dropped.
fn open_db(path: &Path, cache_bytes: u64, wait: std::time::Duration) -> Result<sled::Db> {
    let give_up = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()
        {
            Ok(db) => return Ok(db),
            Err(e) if is_lock_held(&e) && std::time::Instant::now() < give_up => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(100));
            }
            Err(e) if is_lock_held(&e) => {
                return Err(StoreError::Locked {
                    path: path.to_path_buf(),
                    waited: wait,
                });
            }
            Err(e) => return Err(io(e)),
        }
    }
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SledStore> {
        SledStore::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store in `dir`, with sled's page cache capped at
    /// `cache_bytes` (the log is read back rarely: by followers catching up and at start).
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledStore> {
        SledStore::open_waiting(dir, cache_bytes, LOCK_WAIT)
    }

    /// As `open_with_cache`, waiting at most `lock_wait` for sled's file lock.
    pub fn open_waiting(
        dir: &Path,
        cache_bytes: u64,
        lock_wait: std::time::Duration,
    ) -> Result<SledStore> {
        let db = open_db(&dir.join("raft.sled"), cache_bytes, lock_wait)?;
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
        let mut segments = std::collections::BTreeMap::new();
        for name in db.tree_names() {
            let Some(n) = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.strip_prefix(SEGMENT_PREFIX))
            else {
                continue;
            };
            let n: u64 = n
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("log segment tree named {n:?}")))?;
            segments.insert(n, db.open_tree(&name).map_err(io)?);
        }
        let mut store = SledStore {
            dir: dir.to_path_buf(),
            db,
            segments,
            meta,
            hs,
            cs,
            snap_meta,
            first: 0,
            last: 0,
            obsolete: Vec::new(),
        };
        store.refuse_single_tree_log()?;
        let recorded_first = match store.meta.get("log_first").map_err(io)? {
            Some(b) => index_of(&b)?,
            None => 0,
        };
        let mut lowest_key = None;
        for tree in store.segments.values() {
            if let Some((k, _)) = tree.first().map_err(io)? {
                lowest_key = Some(index_of(&k)?);
                break;
            }
        }
        store.first = lowest_key
            .unwrap_or(store.snap_meta.index + 1)
            .max(recorded_first)
            .max(1);
        // A segment emptied by a truncation that a crash interrupted before the tree was
        // dropped holds nothing: the log ends in the highest segment that has an entry.
        let mut highest_key = None;
        for tree in store.segments.values().rev() {
            if let Some((k, _)) = tree.last().map_err(io)? {
                highest_key = Some(index_of(&k)?);
                break;
            }
        }
        store.last = highest_key
            .filter(|&k| k >= store.first)
            .unwrap_or(store.first - 1)
            .max(store.snap_meta.index);
        store.first = store.first.min(store.last + 1);
        Ok(store)
    }

    /// Refuses a store with the single `log` tree of development builds before segments
    /// (no release wrote one): reading past it would lose its entries without a word.
    fn refuse_single_tree_log(&self) -> Result<()> {
        if self
            .db
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == SINGLE_TREE_LOG.as_bytes())
        {
            return Err(StoreError::Corrupt(format!(
                "{} holds a Raft log in the single-tree layout of development builds before segmented logs; start this controller with an empty --data-dir and it catches up from its peers",
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// The tree of segment `n`, created when first needed.
    fn segment(&mut self, n: u64) -> Result<&sled::Tree> {
        if !self.segments.contains_key(&n) {
            let tree = self
                .db
                .open_tree(format!("{SEGMENT_PREFIX}{n}"))
                .map_err(io)?;
            self.segments.insert(n, tree);
        }
        Ok(&self.segments[&n])
    }

    /// Records `first` as the first live index, then drops the segments wholly before it.
    fn set_first(&mut self, first: u64) -> Result<()> {
        self.meta
            .insert("log_first", &first.to_be_bytes())
            .map_err(io)?;
        self.first = first;
        let dead: Vec<u64> = self
            .segments
            .range(..segment_of(first))
            .map(|(&n, _)| n)
            .collect();
        for n in dead {
            self.segments.remove(&n);
            self.db
                .drop_tree(format!("{SEGMENT_PREFIX}{n}"))
                .map_err(io)?;
        }
        Ok(())
    }

    /// Removes entries `from..=self.last`, the highest segment first, so that a crash part
    /// way leaves a prefix of the log. Segments left with no entry are dropped: `open`
    /// finds the end of the log in the highest segment that has one.
    fn truncate_from(&mut self, from: u64) -> Result<()> {
        if from > self.last {
            return Ok(());
        }
        for n in (segment_of(from)..=segment_of(self.last)).rev() {
            if from <= segment_start(n) {
                if self.segments.remove(&n).is_some() {
                    self.db
                        .drop_tree(format!("{SEGMENT_PREFIX}{n}"))
                        .map_err(io)?;
                }
                continue;
            }
            let Some(tree) = self.segments.get(&n) else {
                continue;
            };
            let lo = from.max(segment_start(n));
            let hi = self.last.min(segment_start(n + 1) - 1);
            let mut batch = sled::Batch::default();
            for idx in lo..=hi {
                batch.remove(&idx.to_be_bytes());
            }
            tree.apply_batch(batch).map_err(io)?;
        }
        Ok(())
    }

    fn get(&self, idx: u64) -> Result<Option<sled::IVec>> {
        match self.segments.get(&segment_of(idx)) {
            Some(tree) => tree.get(idx.to_be_bytes()).map_err(io),
            None => Ok(None),
        }
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
        'segments: for (_, tree) in self.segments.range(segment_of(low)..=segment_of(high)) {
            for item in tree.range(low.to_be_bytes()..high.to_be_bytes()) {
                let (k, v) = item.map_err(io)?;
                let expected = low + out.len() as u64;
                if index_of(&k)? != expected {
                    return Err(StoreError::Corrupt(format!(
                        "entry {expected} missing from the log"
                    )));
                }
                size += v.len() as u64;
                if !out.is_empty() && max_size.is_some_and(|m| size > m) {
                    break 'segments;
                }
                out.push(decode(&v, "log entry")?);
            }
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
        match self.get(idx)? {
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
        self.truncate_from(first.index)?;
        let mut at = 0;
        while at < entries.len() {
            let n = segment_of(entries[at].index);
            let mut batch = sled::Batch::default();
            while at < entries.len() && segment_of(entries[at].index) == n {
                batch.insert(&entries[at].index.to_be_bytes(), encode(&entries[at]));
                at += 1;
            }
            self.segment(n)?.apply_batch(batch).map_err(io)?;
        }
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
            self.set_first(compact_to)?;
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
        // The old log goes first: a crash after the new first index is recorded must not
        // leave old entries beyond the snapshot looking live.
        for n in std::mem::take(&mut self.segments).into_keys() {
            self.db
                .drop_tree(format!("{SEGMENT_PREFIX}{n}"))
                .map_err(io)?;
        }
        self.put_snapshot(snap)?;
        self.set_first(meta.index + 1)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: format!("e{index}").into_bytes().into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_log_in_the_single_tree_layout_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path().join("raft.sled")).unwrap();
            let log = db.open_tree(SINGLE_TREE_LOG).unwrap();
            log.insert(1u64.to_be_bytes(), encode(&entry(1, 1)))
                .unwrap();
            db.flush().unwrap();
        }
        let Err(e) = SledStore::open(dir.path()) else {
            panic!("a single-tree log was opened");
        };
        assert!(e.to_string().contains("empty --data-dir"), "{e}");
    }

    /// A store in a fresh directory holding entries `1..=last` of term 1.
    fn store_up_to(last: u64) -> (tempfile::TempDir, SledStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SledStore::open(dir.path()).unwrap();
        s.append(&(1..=last).map(|i| entry(i, 1)).collect::<Vec<_>>())
            .unwrap();
        (dir, s)
    }

    #[test]
    fn a_truncation_that_empties_the_highest_segment_keeps_the_log_after_a_reopen() {
        let (dir, mut s) = store_up_to(2_050);
        // A new leader's entries replace the uncommitted suffix 2,040..=2,050: segment 2
        // (2,048 up) is left with nothing.
        s.append(&(2_040..=2_044).map(|i| entry(i, 2)).collect::<Vec<_>>())
            .unwrap();
        s.sync().unwrap();
        assert!(!s.segments.contains_key(&2));
        drop(s);
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!((s.first_index(), s.last_index()), (1, 2_044));
        assert_eq!(s.term(2_044).unwrap(), 2);
        assert_eq!(s.term(2_039).unwrap(), 1);
    }

    #[test]
    fn an_empty_segment_left_by_an_interrupted_truncation_is_not_the_end_of_the_log() {
        let (dir, mut s) = store_up_to(1_100);
        // What a crash between emptying segment 1 and dropping it would leave (and what
        // stores written before segments were dropped on truncation hold).
        let mut batch = sled::Batch::default();
        for idx in 1_024..=1_100u64 {
            batch.remove(&idx.to_be_bytes());
        }
        s.segments[&1].apply_batch(batch).unwrap();
        s.sync().unwrap();
        drop(s);
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!((s.first_index(), s.last_index()), (1, 1_023));
    }

    #[test]
    fn open_waits_for_a_lock_being_let_go_and_names_one_that_is_not() {
        let (dir, s) = store_up_to(10);
        let held = SledStore::open_waiting(dir.path(), DEFAULT_CACHE_BYTES, Duration::ZERO);
        match held {
            Err(StoreError::Locked { path, .. }) => assert!(path.ends_with("raft.sled")),
            other => panic!("a second open while the first is live: {:?}", other.err()),
        }
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(s);
        });
        let s = SledStore::open(dir.path()).expect("the lock is let go within the wait");
        releaser.join().unwrap();
        assert_eq!(s.last_index(), 10);
    }

    #[test]
    fn a_store_reopens_at_once_after_a_drop_every_time() {
        let (dir, mut s) = store_up_to(3_000);
        for round in 0..20u64 {
            // Removals (a truncation) leave sled work behind the drop, which is when its
            // lock was seen held a moment after the handle was gone.
            s.append(&[entry(2_990, 2 + round)]).unwrap();
            s.sync().unwrap();
            drop(s);
            s = SledStore::open(dir.path()).unwrap();
            assert_eq!(s.last_index(), 2_990);
        }
    }

    #[test]
    fn compaction_drops_whole_segments() {
        let (_dir, mut s) = store_up_to(4_000);
        assert_eq!(s.segments.len(), 4);
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 3_900;
        snap.mut_metadata().term = 1;
        s.save_snapshot(&snap, 3_000).unwrap();
        assert_eq!(
            s.segments.keys().copied().collect::<Vec<_>>(),
            vec![2, 3],
            "segments 0 and 1 (entries below 2,048) are gone; 2 holds 3,000"
        );
        assert!(matches!(s.term(2_999), Err(StoreError::Compacted)));
    }
}
