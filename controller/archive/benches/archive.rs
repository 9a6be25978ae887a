//! The accounting archive at lab scale: writes GSCHED_ARCHIVE_JOBS (1,000,000) ended jobs
//! spread over a year (40 users, 8 accounts, 8 nodes of 8 GPUs; most with a usage
//! summary, some failed with evidence), then prints the bytes per job on disk and how
//! long one user's month, the whole month and a month's GPU-hour report take, paging as
//! `gacct` does (5,000 rows a page), and the process's memory before and after.
//!
//! `cargo bench -p gsched-archive --bench archive`

use gsched_archive::{Archive, Cursor, Extra, Group, Query, Totals};
use gsched_types::api::JobRow;
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobState, NodeRun, RunState};
use gsched_types::resources::{Allocation, NodeAlloc};
use gsched_types::usage::{GpuReading, GpuUsage, NodeUsage};
use std::time::Instant;

const YEAR_MS: u64 = 365 * 86_400_000;
const MONTH_MS: u64 = 30 * 86_400_000;
const START_MS: u64 = 1_767_225_600_000; // 2026-01-01

/// A deterministic pseudo-random stream (xorshift), so every run writes the same jobs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn job(id: u64, jobs: u64, rng: &mut Rng) -> JobRow {
    let user = rng.below(40);
    let submit_ms = START_MS + id * YEAR_MS / jobs;
    let gpus = [0, 1, 1, 1, 2, 2, 4, 8][rng.below(8) as usize];
    let run_s = 60 + rng.below(6 * 3600);
    let start_ms = submit_ms + rng.below(600_000);
    let end_ms = start_ms + run_s * 1000;
    let node = format!("n{}", 1 + rng.below(8));
    let failed = rng.below(10) == 0;
    let state = if failed {
        JobState::Failed
    } else if rng.below(20) == 0 {
        JobState::Cancelled
    } else {
        JobState::Completed
    };
    let first_gpu = rng.below(8 - gpus.min(7)) as u32;
    let gpu_ids: Vec<u32> = (first_gpu..first_gpu + gpus as u32).collect();
    let cpus: Vec<u32> = (0..(gpus.max(1) as u32 * 4)).collect();
    let usage = (gpus > 0).then(|| {
        let interval_s = 30;
        let samples = (run_s / u64::from(interval_s)).max(1);
        let level = rng.below(100) as u8;
        let gpus = gpu_ids
            .iter()
            .map(|&g| {
                let mut u = GpuUsage::new(g);
                for s in 0..samples {
                    u.add(
                        GpuReading {
                            util_pct: level.saturating_add((s % 7) as u8).min(100),
                            mem_used_mib: 4096 + (s % 13) * 512,
                            power_w: Some(150 + (s % 11) as u32 * 20),
                        },
                        interval_s,
                        5,
                    );
                }
                u
            })
            .collect();
        NodeUsage {
            node: node.clone(),
            interval_s,
            sampled_s: samples * u64::from(interval_s),
            gpus,
            cpu_ms: run_s * 1000 * 3,
            cpus: cpus.len() as u32,
            mem_max_mib: 20_000 + rng.below(40_000),
            mem_limit_mib: 131_072,
        }
    });
    JobRow {
        job_id: JobId(id),
        array_job_id: None,
        array_task_id: None,
        display_id: id.to_string(),
        name: format!("train-{}", rng.below(500)),
        user: format!("user{user:02}"),
        account: format!("lab{}", user % 8),
        partition: ["gpu", "debug", "long"][rng.below(3) as usize].into(),
        qos: None,
        state,
        reason: if failed { "NcclTimeout".into() } else { "None".into() },
        failure: failed.then(|| {
            Failure::new(
                FailureKind::NcclTimeout,
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1045, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.",
                5,
            )
            .on(&node)
        }),
        exit_code: Some(if failed { 1 } else { 0 }),
        nodes: 1,
        node_list: node.clone(),
        gpus_per_node: gpus as u32,
        gpus: gpus as u32,
        attempt: 0,
        held: false,
        submit_ms,
        start_ms: Some(start_ms),
        end_ms: Some(end_ms),
        expected_start_ms: None,
        time_limit_s: Some(86_400),
        allocation: Some(Allocation {
            nodes: vec![NodeAlloc {
                node: node.clone(),
                gpus: gpu_ids,
                cpus,
                mem_mb: 65_536,
                nic: Some("enp65s0f0np0".into()),
                exclusive: false,
            }],
            master_addr: "10.0.0.1".into(),
            master_port: 29_500,
        }),
        runs: vec![NodeRun {
            node,
            state: RunState::Exited {
                code: Some(if failed { 1 } else { 0 }),
                signal: None,
            },
            started_ms: Some(start_ms),
            ended_ms: Some(end_ms),
            failure: None,
        }],
        attempts: Vec::new(),
        spec: None,
        steps: Vec::new(),
        warnings: Vec::new(),
        idle: None,
        usage: usage.into_iter().collect(),
        comment: None,
        wckey: None,
        notices: Vec::new(),
    }
}

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// Pages through `q` as gacct does; returns the rows and the time taken.
fn page_all(a: &Archive, mut q: Query) -> (usize, f64) {
    let t = Instant::now();
    let mut n = 0;
    loop {
        let page = a.query(&q).expect("query");
        n += page.rows.len();
        match (page.more, page.rows.last()) {
            (true, Some(last)) => q.after = last.job_id.0,
            _ => return (n, t.elapsed().as_secs_f64() * 1000.0),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let jobs: u64 = std::env::var("GSCHED_ARCHIVE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // GSCHED_ARCHIVE_DIR keeps the file there (a controller's data directory, to time
    // gacct against it); else a temporary directory.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::env::var_os("GSCHED_ARCHIVE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().to_path_buf())
        .join("accounting.sqlite");
    let rss_start = rss_mib();
    let archive = Archive::open(&path).expect("open");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let t = Instant::now();
    let mut batch = Vec::with_capacity(5_000);
    for id in 1..=jobs {
        batch.push((
            job(id, jobs, &mut rng),
            Extra {
                gpu_model: Some("NVIDIA GeForce RTX 4090".into()),
            },
        ));
        if batch.len() == 5_000 || id == jobs {
            let last = batch.last().map(|(r, _): &(JobRow, Extra)| Cursor {
                job: r.job_id.0,
                end_ms: r.end_ms.unwrap_or(0),
            });
            archive.record(&batch, last).expect("record");
            batch.clear();
        }
    }
    let write_s = t.elapsed().as_secs_f64();
    archive.checkpoint().expect("checkpoint");
    let bytes = archive.disk_bytes();
    let rss_written = rss_mib();
    println!(
        "archive: {jobs} jobs written in {write_s:.1} s ({:.0} jobs/s); {:.1} MiB on disk, {:.0} bytes per job (target <= 500)",
        jobs as f64 / write_s,
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / jobs as f64
    );
    // A month in the middle of the year.
    let since = START_MS + 6 * MONTH_MS;
    let until = since + MONTH_MS;
    let month = |users: Vec<String>| Query {
        limit: 5_000,
        users,
        since_ms: since,
        until_ms: until,
        ..Default::default()
    };
    let mut user_ms = Vec::new();
    let mut user_rows = 0;
    for u in [3, 11, 17, 29, 38] {
        let (n, ms) = page_all(&archive, month(vec![format!("user{u:02}")]));
        user_rows = n;
        user_ms.push(ms);
    }
    println!(
        "archive: one user's month ({user_rows} jobs, summary rows): median {:.1} ms over 5 users (target <= 100 ms)",
        median(user_ms)
    );
    let mut all_ms = Vec::new();
    let mut all_rows = 0;
    for _ in 0..3 {
        let (n, ms) = page_all(&archive, month(Vec::new()));
        all_rows = n;
        all_ms.push(ms);
    }
    println!(
        "archive: the whole month ({all_rows} jobs, summary rows, 5,000 a page): median {:.0} ms of 3 (target <= 2000 ms)",
        median(all_ms)
    );
    let (n, detailed_ms) = page_all(
        &archive,
        Query {
            detail: true,
            ..month(Vec::new())
        },
    );
    println!("archive: the whole month as detailed rows ({n} jobs): {detailed_ms:.0} ms");
    let t = Instant::now();
    let mut totals = Totals::new(Group::User, since, until);
    archive.add_usage(&mut totals).expect("report");
    let rows = totals.rows();
    println!(
        "archive: a month's GPU-hours by user ({} rows, top {} with {:.0} GPU-h): {:.0} ms",
        rows.len(),
        rows[0].user.as_deref().unwrap_or("?"),
        rows[0].gpu_hours,
        t.elapsed().as_secs_f64() * 1000.0
    );
    println!(
        "archive: process memory {rss_start} MiB at start, {rss_written} MiB after writing, {} MiB after the queries (SQLite's page cache is capped at 8 MiB a connection)",
        rss_mib()
    );
}
