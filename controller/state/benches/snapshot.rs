//! What a Raft snapshot of the state costs at queue sizes GSCHED_SNAPSHOT_SIZES (default
//! 10,000 and 100,000 held 1-GPU jobs, one submission each with its request id): the
//! copy the Raft thread takes (jobs, payloads and remembered outcomes are copy-on-write),
//! the serialisation a thread of its own then does, its size, and reading it back.
//!
//! `cargo bench -p gsched-state --bench snapshot`

use gsched_state::{ClusterState, Command, Envelope, SubmitJob};
use gsched_types::job::JobSpec;
use std::time::{Duration, Instant};

fn state_with(jobs: u64) -> ClusterState {
    let mut s = ClusterState::default();
    s.config.limits.max_job_count = u64::MAX;
    s.config.user_limits.max_queued_jobs = Some(u32::MAX);
    for i in 0..jobs {
        let mut spec = JobSpec::simple("bench", "alice", "#!/bin/sh\ntrue\n");
        spec.gpus_per_node = 1;
        spec.hold = true;
        spec.workdir = "/home/alice".into();
        let cmd = Command::SubmitJob(SubmitJob { spec });
        s.apply(&Envelope::new(cmd, 1_000 + i, Some(format!("req-{i}"))));
    }
    assert_eq!(s.jobs.len() as u64, jobs, "every submission was accepted");
    s
}

/// The median of three runs of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..3)
        .map(|_| {
            let began = Instant::now();
            f();
            began.elapsed()
        })
        .collect();
    t.sort();
    t[1]
}

fn main() {
    let sizes: Vec<u64> = std::env::var("GSCHED_SNAPSHOT_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for n in sizes {
        let s = state_with(n);
        let copy = median(|| drop(std::hint::black_box(s.clone())));
        let mut bytes = Vec::new();
        let write = median(|| bytes = s.to_snapshot());
        let read = median(|| drop(ClusterState::from_snapshot(&bytes).expect("reads back")));
        println!(
            "{n} jobs: copy {:.1} ms, serialise {:.1} ms ({:.1} MB), read back {:.1} ms",
            copy.as_secs_f64() * 1e3,
            write.as_secs_f64() * 1e3,
            bytes.len() as f64 / 1e6,
            read.as_secs_f64() * 1e3
        );
    }
}
