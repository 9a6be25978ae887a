//! Controller HA benchmark (prints figures; asserts nothing about time):
//!
//!   cargo bench -p gsched-tests --bench ha            # builds and uses release binaries
//!
//! On a local 3-replica cluster on sled (127.0.0.1), measures
//!   1. committed submissions/s with 1 and with 64 concurrent gRPC clients;
//!   2. `gsub` submissions/s and `gqueue` reads/s from the CLI, run one after another;
//!   3. failover: time from SIGKILL of the leader to the first write accepted by the new
//!      leader, over 20 trials (p50/p99), with the default election settings;
//!   4. disk use (sled, per replica) over a long stream of submit+cancel pairs, with the
//!      log compacted by snapshots.
//!
//! Options (environment): GSCHED_BENCH_TRIALS (failover trials, default 20),
//! GSCHED_BENCH_SECS (seconds per throughput run, default 5), GSCHED_BENCH_DISK_JOBS
//! (submit+cancel pairs, default 40000).

use gsched_cli::client::Client;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb::{ActOnJobsRequest, SubmitRequest};
use gsched_tests::Cluster;
use gsched_types::job::JobSpec;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spec_json(c: &Cluster, name: &str) -> Vec<u8> {
    let mut s = JobSpec::simple(
        name,
        &gsched_cli::client::current_user(),
        "#!/bin/sh\ntrue\n",
    );
    s.gpus_per_node = 1;
    s.hold = true;
    s.workdir = c.path("").to_string_lossy().into_owned();
    serde_json::to_vec(&s).unwrap()
}

fn addrs(c: &Cluster) -> Vec<String> {
    c.controllers.iter().map(|(_, a)| a.clone()).collect()
}

/// Submits as fast as `clients` concurrent clients can for `secs`; returns commits/s.
fn throughput(rt: &tokio::runtime::Runtime, c: &Cluster, clients: usize, secs: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let json = spec_json(c, "bench");
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (done, stop, json, addrs) = (done.clone(), stop.clone(), json.clone(), addrs(c));
            rt.spawn(async move {
                let mut client = Client::new(addrs).with_budget(Duration::from_secs(30));
                while !stop.load(Ordering::Relaxed) {
                    let req = SubmitRequest {
                        request_id: uuid::Uuid::new_v4().to_string(),
                        json: json.clone(),
                    };
                    if client
                        .call(|mut j| {
                            let r = req.clone();
                            async move { j.submit(r).await }
                        })
                        .await
                        .is_ok()
                    {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    done.load(Ordering::SeqCst) as f64 / start.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    gsched_tests::use_release_binaries();
    let secs = env_num("GSCHED_BENCH_SECS", 5);
    let trials = env_num("GSCHED_BENCH_TRIALS", 20) as usize;
    let disk_jobs = env_num("GSCHED_BENCH_DISK_JOBS", 40_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "gsched controller HA benchmark: 3 gctld replicas on sled, 127.0.0.1, {} CPUs",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );

    // Room for every submission of the run: the queue limits (MaxJobCount, and the
    // per-user default of half of it) would otherwise refuse them part way and cut the
    // count of committed submissions short.
    let conf = std::env::temp_dir().join(format!("gsched-ha-bench-{}.toml", std::process::id()));
    std::fs::write(
        &conf,
        "[scheduler.limits]\nmax_job_count = 1000000\n[scheduler.user_limits]\nmax_queued_jobs = 1000000\n",
    )
    .unwrap();
    let conf_arg = conf.to_string_lossy().into_owned();
    let mut c = Cluster::controllers(3, &["--node-timeout", "60", "--config", &conf_arg]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.leader(Duration::from_secs(30));

    // 1. Commit throughput.
    let one = throughput(&rt, &c, 1, secs);
    let many = throughput(&rt, &c, 64, secs);
    println!("submissions committed/s, 1 gRPC client:   {one:>8.0}");
    println!(
        "submissions committed/s, 64 gRPC clients: {many:>8.0}  ({:.1}x the single client)",
        many / one
    );

    // 2. The CLI, one gsub after another (process start, connect, submit).
    let script = c.script("bench.sh", "#!/bin/sh\ntrue\n");
    let n = 100;
    let start = Instant::now();
    for _ in 0..n {
        c.ok("gsub", &["--hold", "-G", "1", &script]);
    }
    let cli = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "gsub CLI submissions/s, sequential:       {cli:>8.1}  ({:.1} ms each)",
        1000.0 / cli
    );
    // The same from 8 shells at once (sbatch's figure in the history is from 8 shells too).
    let shells = 8;
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..shells {
            s.spawn(|| {
                for _ in 0..n / 2 {
                    c.ok("gsub", &["--hold", "-G", "1", &script]);
                }
            });
        }
    });
    let parallel = f64::from(shells * n / 2) / start.elapsed().as_secs_f64();
    println!("gsub CLI submissions/s, 8 shells:         {parallel:>8.1}");
    let start = Instant::now();
    for _ in 0..n {
        c.ok("gqueue", &[]);
    }
    let reads = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "gqueue CLI reads/s, sequential:           {reads:>8.1}  ({:.1} ms each, with the read barrier)",
        1000.0 / reads
    );

    // 3. Failover.
    let mut times = Vec::new();
    let json = spec_json(&c, "failover");
    for trial in 0..trials {
        let took = c.failover_trial(&rt, &json);
        times.push(took.as_secs_f64());
        eprintln!("failover trial {trial}: {:.3} s", took.as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "failover, leader SIGKILL -> first accepted write, {} trials: p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        times.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.last().copied().unwrap_or(0.0)
    );

    // 4. Disk use under a long stream of submit+cancel pairs.
    println!(
        "disk use under {disk_jobs} submit+cancel pairs (finished jobs are kept up to 20000, then the oldest are purged):"
    );
    println!(
        "  {:>8} {:>12} {:>12} {:>12} {:>12}",
        "pairs", "replica1 MB", "replica2 MB", "replica3 MB", "log entries"
    );
    let done = Arc::new(AtomicU64::new(0));
    let step = (disk_jobs / 8).max(1);
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (done, json, addrs) = (done.clone(), spec_json(&c, "disk"), addrs(&c));
            let per = disk_jobs / 32;
            rt.spawn(async move {
                let mut client = Client::new(addrs).with_budget(Duration::from_secs(60));
                for _ in 0..per {
                    let req = SubmitRequest {
                        request_id: uuid::Uuid::new_v4().to_string(),
                        json: json.clone(),
                    };
                    let Ok(r) = client
                        .call(|mut j| {
                            let r = req.clone();
                            async move { j.submit(r).await }
                        })
                        .await
                    else {
                        continue;
                    };
                    let body = gsched_types::api::JobActionRequest {
                        action: gsched_types::api::JobAction::Cancel,
                        select: gsched_types::api::JobSelection {
                            jobs: vec![gsched_types::api::JobSelector {
                                id: r.job_ids[0],
                                task: None,
                            }],
                            ..Default::default()
                        },
                    };
                    let cancel = ActOnJobsRequest::carrying(&body)
                        .with_request_id(uuid::Uuid::new_v4().to_string());
                    let _ = client
                        .call(|mut j| {
                            let r = cancel.clone();
                            async move { j.act_on_jobs(r).await }
                        })
                        .await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut next = step;
    let report = |c: &Cluster, pairs: u64| {
        let rows = c.status();
        let mut mb: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.1}", r["disk_bytes"].as_u64().unwrap_or(0) as f64 / 1e6))
            .collect();
        mb.resize(3, "-".into());
        let log = rows
            .iter()
            .find(|r| r["role"] == "leader")
            .map(|r| {
                r["last_index"].as_u64().unwrap_or(0) + 1 - r["first_index"].as_u64().unwrap_or(1)
            })
            .unwrap_or(0);
        println!(
            "  {pairs:>8} {:>12} {:>12} {:>12} {:>12}",
            mb[0], mb[1], mb[2], log
        );
    };
    while next <= disk_jobs / 32 * 32 {
        let d = done.load(Ordering::Relaxed);
        if d >= next {
            report(&c, d);
            next += step;
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
}
