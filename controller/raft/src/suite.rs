//! Conformance suite every [`LogStore`] must pass. `fresh` makes an empty store; `reopen`
//! (for durable stores) closes and reopens one to check what survives.

use crate::store::{LogStore, StoreError};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: format!("entry-{index}-{term}").into_bytes().into(),
        ..Default::default()
    }
}

fn entries(range: std::ops::RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range.map(|i| entry(i, term)).collect()
}

fn snapshot(index: u64, term: u64, voters: Vec<u64>, data: &[u8]) -> Snapshot {
    let mut s = Snapshot::default();
    s.mut_metadata().index = index;
    s.mut_metadata().term = term;
    s.mut_metadata().mut_conf_state().voters = voters;
    s.data = data.to_vec().into();
    s
}

/// Runs every check. Panics with a description on the first failure.
pub fn run_all<S: LogStore>(mut fresh: impl FnMut() -> S, reopen: &dyn Fn(S) -> S) {
    empty_store(fresh());
    append_and_read(fresh());
    conflicting_append_truncates(fresh());
    gaps_are_refused(fresh());
    max_size_returns_at_least_one(fresh());
    snapshot_compacts_and_keeps_term(fresh());
    install_snapshot_replaces_log(fresh());
    survives_reopen(fresh(), reopen);
    long_log_truncated_compacted_and_reopened(fresh(), reopen);
}

fn empty_store<S: LogStore>(s: S) {
    assert_eq!(s.first_index(), 1, "empty store: first index");
    assert_eq!(s.last_index(), 0, "empty store: last index");
    assert_eq!(s.term(0).unwrap(), 0, "empty store: term of index 0");
    assert_eq!(s.hard_state(), HardState::default());
    assert_eq!(s.snapshot().unwrap().get_metadata().index, 0);
}

fn append_and_read<S: LogStore>(mut s: S) {
    s.append(&entries(1..=10, 1)).unwrap();
    assert_eq!((s.first_index(), s.last_index()), (1, 10));
    let got = s.entries(3, 7, None).unwrap();
    assert_eq!(
        got.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![3, 4, 5, 6]
    );
    assert_eq!(got[0].data, entry(3, 1).data);
    assert_eq!(s.term(10).unwrap(), 1);
    assert!(matches!(s.term(11), Err(StoreError::Unavailable)));
    assert!(matches!(
        s.entries(5, 12, None),
        Err(StoreError::Unavailable)
    ));
}

fn conflicting_append_truncates<S: LogStore>(mut s: S) {
    s.append(&entries(1..=10, 1)).unwrap();
    s.append(&entries(6..=7, 2)).unwrap();
    assert_eq!(
        s.last_index(),
        7,
        "entries after a conflicting append must be removed"
    );
    assert_eq!(s.term(6).unwrap(), 2);
    assert_eq!(s.term(5).unwrap(), 1);
    s.append(&entries(8..=8, 2)).unwrap();
    assert_eq!(s.entries(1, 9, None).unwrap().len(), 8);
}

fn gaps_are_refused<S: LogStore>(mut s: S) {
    s.append(&entries(1..=3, 1)).unwrap();
    assert!(
        s.append(&entries(5..=6, 1)).is_err(),
        "a gap must be refused"
    );
    assert_eq!(s.last_index(), 3);
}

fn max_size_returns_at_least_one<S: LogStore>(mut s: S) {
    s.append(&entries(1..=5, 1)).unwrap();
    assert_eq!(s.entries(1, 6, Some(1)).unwrap().len(), 1);
    assert!(s.entries(1, 6, Some(40)).unwrap().len() < 5);
}

fn snapshot_compacts_and_keeps_term<S: LogStore>(mut s: S) {
    s.append(&entries(1..=10, 3)).unwrap();
    s.save_snapshot(&snapshot(8, 3, vec![1, 2, 3], b"state@8"), 6)
        .unwrap();
    assert_eq!(
        s.first_index(),
        6,
        "compaction keeps the tail from compact_to"
    );
    assert_eq!(s.last_index(), 10);
    assert!(matches!(s.entries(2, 5, None), Err(StoreError::Compacted)));
    assert_eq!(s.term(8).unwrap(), 3);
    let snap = s.snapshot().unwrap();
    assert_eq!(snap.get_metadata().index, 8);
    assert_eq!(snap.data.as_ref(), b"state@8");
    s.save_snapshot(&snapshot(10, 3, vec![1, 2, 3], b"state@10"), 11)
        .unwrap();
    assert_eq!(
        (s.first_index(), s.last_index()),
        (11, 10),
        "fully compacted log"
    );
    assert_eq!(
        s.term(10).unwrap(),
        3,
        "term of the snapshot index survives compaction"
    );
    s.append(&entries(11..=11, 4)).unwrap();
    assert_eq!(s.last_index(), 11);
}

fn install_snapshot_replaces_log<S: LogStore>(mut s: S) {
    s.append(&entries(1..=5, 1)).unwrap();
    s.install_snapshot(&snapshot(20, 4, vec![1, 2], b"leader-state"))
        .unwrap();
    assert_eq!((s.first_index(), s.last_index()), (21, 20));
    assert_eq!(s.term(20).unwrap(), 4);
    assert_eq!(s.conf_state().voters, vec![1, 2]);
    assert!(s.hard_state().commit >= 20);
    s.append(&entries(21..=22, 4)).unwrap();
    assert_eq!(s.last_index(), 22);
}

/// Thousands of entries (more than one of the sled store's segments), a conflicting append
/// that cuts across several of them, compaction, and a reopen.
fn long_log_truncated_compacted_and_reopened<S: LogStore>(mut s: S, reopen: &dyn Fn(S) -> S) {
    for lo in (1..=5_000).step_by(300) {
        s.append(&entries(lo..=(lo + 299).min(5_000), 1)).unwrap();
    }
    assert_eq!((s.first_index(), s.last_index()), (1, 5_000));
    s.append(&entries(2_000..=2_100, 2)).unwrap();
    assert_eq!(
        s.last_index(),
        2_100,
        "a conflicting append drops the old suffix"
    );
    assert!(matches!(s.term(2_101), Err(StoreError::Unavailable)));
    for lo in (2_101..=6_000).step_by(700) {
        s.append(&entries(lo..=(lo + 699).min(6_000), 2)).unwrap();
    }
    let all = s.entries(1, 6_001, None).unwrap();
    assert_eq!(all.len(), 6_000);
    assert!(all.iter().enumerate().all(|(i, e)| e.index == i as u64 + 1));
    assert_eq!((all[1_998].term, all[1_999].term), (1, 2));
    s.save_snapshot(&snapshot(5_500, 2, vec![1, 2, 3], b"at-5500"), 4_100)
        .unwrap();
    assert_eq!((s.first_index(), s.last_index()), (4_100, 6_000));
    assert!(matches!(
        s.entries(4_099, 4_200, None),
        Err(StoreError::Compacted)
    ));
    assert!(matches!(s.term(3_000), Err(StoreError::Compacted)));
    let some = s.entries(4_100, 6_001, Some(1)).unwrap();
    assert_eq!(some.len(), 1, "max_size still returns one entry");
    s.set_hard_state(&HardState {
        term: 2,
        commit: 5_500,
        ..Default::default()
    })
    .unwrap();
    s.sync().unwrap();
    let mut s = reopen(s);
    assert_eq!(
        (s.first_index(), s.last_index()),
        (4_100, 6_000),
        "bounds of a compacted long log after reopen"
    );
    let tail = s.entries(4_100, 6_001, None).unwrap();
    assert_eq!(tail.len(), 1_901);
    assert_eq!(tail[0], entry(4_100, 2));
    assert_eq!(s.term(5_500).unwrap(), 2);
    s.install_snapshot(&snapshot(9_000, 3, vec![1, 2, 3], b"leader"))
        .unwrap();
    s.sync().unwrap();
    let s = reopen(s);
    assert_eq!(
        (s.first_index(), s.last_index()),
        (9_001, 9_000),
        "an installed snapshot leaves no old entries behind after reopen"
    );
    assert!(matches!(s.term(6_000), Err(StoreError::Compacted)));
}

fn survives_reopen<S: LogStore>(mut s: S, reopen: &dyn Fn(S) -> S) {
    s.append(&entries(1..=6, 2)).unwrap();
    let hs = HardState {
        term: 2,
        vote: 3,
        commit: 5,
        ..Default::default()
    };
    s.set_hard_state(&hs).unwrap();
    let cs = ConfState {
        voters: vec![1, 2, 3],
        ..Default::default()
    };
    s.set_conf_state(&cs).unwrap();
    s.save_snapshot(&snapshot(4, 2, vec![1, 2, 3], b"four"), 3)
        .unwrap();
    s.sync().unwrap();
    let s = reopen(s);
    assert_eq!(s.hard_state(), hs, "hard state after reopen");
    assert_eq!(
        s.conf_state().voters,
        vec![1, 2, 3],
        "conf state after reopen"
    );
    assert_eq!(
        (s.first_index(), s.last_index()),
        (3, 6),
        "log bounds after reopen"
    );
    assert_eq!(s.term(6).unwrap(), 2);
    assert_eq!(s.snapshot().unwrap().data.as_ref(), b"four");
}

#[cfg(test)]
mod tests {
    #[test]
    fn mem_store_conforms() {
        super::run_all(crate::MemStore::new, &|s| s);
    }
}
