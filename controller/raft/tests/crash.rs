//! Crash consistency of the sled store: a writer process appends, overwrites unacknowledged
//! suffixes, saves snapshots and compacts, printing `ACK index term` only after `sync`
//! returns; it is SIGKILLed at random moments, 30 times. After every kill the store must
//! reopen with a log that is a prefix-consistent continuation of what was acknowledged:
//! nothing acknowledged lost or changed, entries contiguous, terms non-decreasing, hard
//! state and snapshot within the log.
//!
//! The writer is this same test binary re-run with `--ignored --exact crash_writer`.

use gsched_raft::{LogStore, SledStore};
use raft::eraftpb::{Entry, HardState, Snapshot};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const DIR_ENV: &str = "GSCHED_CRASH_WRITER_DIR";

fn data(index: u64, term: u64) -> Vec<u8> {
    format!("{index}:{term}").into_bytes()
}

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: data(index, term).into(),
        ..Default::default()
    }
}

/// Not a test on its own: the writer process `crash_consistency_under_sigkill` kills.
#[test]
#[ignore = "helper process for crash_consistency_under_sigkill"]
fn crash_writer() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let mut s = SledStore::open(std::path::Path::new(&dir)).unwrap();
    let mut acked = s.hard_state().commit;
    let mut term = s
        .hard_state()
        .term
        .max(s.term(s.last_index()).unwrap_or(0))
        .max(1);
    let seed: u64 = std::env::var("GSCHED_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let out = std::io::stdout();
    for op in 0u64.. {
        let last = s.last_index();
        let r = next() % 20;
        if r == 0 && acked > s.first_index() + 10 {
            // Snapshot at the acknowledged index and compact most of the log before it.
            let mut snap = Snapshot::default();
            snap.mut_metadata().index = acked;
            snap.mut_metadata().term = s.term(acked).unwrap();
            snap.mut_metadata().mut_conf_state().voters = vec![1];
            snap.data = format!("snapshot-at-{acked}").into_bytes().into();
            s.save_snapshot(&snap, acked - 5).unwrap();
        } else if r < 4 && last > acked {
            // A new term overwrites part of the unacknowledged suffix (never acked entries).
            term += 1;
            let from = acked + 1 + next() % (last - acked);
            let n = 1 + next() % 20;
            s.append(&(from..from + n).map(|i| entry(i, term)).collect::<Vec<_>>())
                .unwrap();
        } else {
            let n = 1 + next() % 64;
            s.append(
                &(last + 1..=last + n)
                    .map(|i| entry(i, term))
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        }
        s.sync().unwrap();
        // Acknowledge part of what is now on disk (as a leader acknowledges committed entries).
        let last = s.last_index();
        if op % 3 != 2 {
            acked = last;
            let hs = HardState {
                term,
                commit: acked,
                ..Default::default()
            };
            s.set_hard_state(&hs).unwrap();
            s.sync().unwrap();
            let mut o = out.lock();
            writeln!(o, "ACK {acked} {term}").unwrap();
            o.flush().unwrap();
        }
    }
}

#[test]
fn crash_consistency_under_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked: (u64, u64) = (0, 0);
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut total_entries = 0;
    for round in 0..30u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(DIR_ENV, dir.path())
            .env("GSCHED_CRASH_SEED", (rng | 1).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut last = None;
            let mut lines = 0;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let mut it = rest.split(' ').map(|x| x.parse::<u64>().unwrap());
                    last = Some((it.next().unwrap(), it.next().unwrap()));
                    lines += 1;
                }
            }
            (last, lines)
        });
        // Kill at a random moment (usually after the writer acknowledged something).
        std::thread::sleep(Duration::from_millis(150 + rng % 400));
        let _ = child.kill();
        let _ = child.wait();
        let (last, lines) = reader.join().unwrap();
        if let Some(a) = last {
            acked = a;
        }
        total_entries += lines;

        let s = SledStore::open(dir.path()).unwrap_or_else(|e| {
            panic!("round {round}: the store does not reopen after SIGKILL: {e}")
        });
        let (ack_index, ack_term) = acked;
        if ack_index == 0 {
            // Killed before its first acknowledgement (a slow start on a loaded machine):
            // nothing was promised yet.
            continue;
        }
        assert!(
            s.last_index() >= ack_index,
            "round {round}: acknowledged index {ack_index} lost (last index {})",
            s.last_index()
        );
        assert_eq!(
            s.term(ack_index).unwrap(),
            ack_term,
            "round {round}: acknowledged entry {ack_index} changed term"
        );
        let hs = s.hard_state();
        assert!(
            hs.commit >= ack_index && hs.commit <= s.last_index(),
            "round {round}: hard state {hs:?} vs acknowledged {ack_index}, last {}",
            s.last_index()
        );
        let snap = s.snapshot().unwrap();
        let si = snap.get_metadata().index;
        assert!(
            si <= hs.commit && s.first_index() <= si + 1,
            "round {round}: snapshot {si}, first {} commit {}",
            s.first_index(),
            hs.commit
        );
        if si > 0 {
            assert_eq!(snap.data.as_ref(), format!("snapshot-at-{si}").as_bytes());
        }
        let entries = s
            .entries(s.first_index(), s.last_index() + 1, None)
            .unwrap();
        let mut expect = s.first_index();
        let mut prev_term = 0;
        for e in &entries {
            assert_eq!(e.index, expect, "round {round}: log not contiguous");
            assert!(
                e.term >= prev_term,
                "round {round}: term went back at {}",
                e.index
            );
            assert_eq!(
                e.data.as_ref(),
                data(e.index, e.term).as_slice(),
                "round {round}: entry {} corrupt",
                e.index
            );
            prev_term = e.term;
            expect += 1;
        }
        assert_eq!(expect, s.last_index() + 1);
    }
    assert!(
        total_entries > 30,
        "the writer acknowledged too little to mean anything: {total_entries}"
    );
    eprintln!(
        "30 SIGKILLs; the writer acknowledged {total_entries} times; after each kill the last acknowledgement was checked (final acknowledged index {})",
        acked.0
    );
}
