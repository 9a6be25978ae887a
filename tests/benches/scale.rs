//! Scale benchmark (prints figures; asserts nothing about time):
//!
//!   cargo bench -p gsched-tests --bench scale          # builds and uses release binaries
//!   GSCHED_BENCH_WAVE_ONLY=1 cargo bench -p gsched-tests --bench scale   # issue 15's table
//!   GSCHED_BENCH_MEMORY_ONLY=1 GSCHED_BENCH_SIZES=10000 cargo bench ...  # memory, idle CPU, gqueue
//!
//! On a local 3-replica cluster (sled, 127.0.0.1) with 4 fake 8-GPU agents, for each queue
//! size (GSCHED_BENCH_SIZES, default "10000,100000") of held 1-GPU jobs:
//!   - resident memory (VmRSS) and disk per replica;
//!   - idle CPU: CPU milliseconds per 10 s that the 3 controllers and 4 agents use
//!     with the queue held (GSCHED_BENCH_IDLE_S, default 30 s measured);
//!   - `gqueue` (table) and `gqueue --json`: wall time (median of 5) and client peak RSS;
//!   - `gqueue` served by a follower with `--stale-ok`;
//!   - `gcancel -u USER` of the whole queue, then `gacct` over the cancelled jobs.
//!
//! Then one 10,000-task array (`--array=0-9999`): memory, disk, `gqueue` time; then a
//! soak (GSCHED_BENCH_SOAK_S, default 600; 0 skips it): submissions, listings and cancels
//! through one follower, with every replica's RSS every 30 s (a follower must not grow);
//! then GSCHED_BENCH_NODES (default 1000; 0 skips) more nodes register and `ginfo` is
//! timed over all of them. Then issue 15's start wave (GSCHED_BENCH_WAVE one-second 1-GPU
//! jobs on the 32 GPUs, default 1000; each script notes when it began) and its failure
//! figures: the leader SIGKILLed with 10,000 jobs queued until the next submission is
//! accepted, and an agent SIGKILLed for good until its job leaves RUNNING.
//! GSCHED_BENCH_WAVE_ONLY=1 runs only the wave and the failure figures (both systems).
//!
//! With `../shared/peers/slurm` set up (`bash ../shared/peers/slurm/setup.sh`; the bench
//! finds it through /tmp/slurmpeer/etc/slurm.conf), the same figures for real Slurm in the
//! same run (10,000 jobs; its MaxJobCount is 50,000; the wave, and slurmctld SIGKILLed and
//! restarted at once, as its `bench.sh` phases d and r do), and ratios. GSCHED_BENCH_SLURM=0
//! skips Slurm. A slurmd killed for good is not measured: Slurm waits SlurmdTimeout (300 s).

use gsched_cli::client::Client;
use gsched_proto::pb::SubmitRequest;
use gsched_tests::{Cluster, rss_mib, wait_for};
use gsched_types::job::JobSpec;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SLURM_CONF: &str = "/tmp/slurmpeer/etc/slurm.conf";

/// Wall time (s) and peak RSS (MiB) of a command, through /usr/bin/time.
fn timed(cmd: Command) -> (f64, f64) {
    let prog = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let mut t = Command::new("/usr/bin/time");
    t.arg("-f").arg("%M").arg(prog).args(args).envs(envs);
    if let Some(d) = cmd.get_current_dir() {
        t.current_dir(d);
    }
    let start = Instant::now();
    let out = t.output().expect("run under /usr/bin/time");
    let secs = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let kib: f64 = err
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0.0);
    (secs, kib / 1024.0)
}

/// Median wall time (ms) and median peak RSS (MiB) of `reps` runs.
fn median_of(reps: usize, make: impl Fn() -> Command) -> (f64, f64) {
    let mut times = Vec::new();
    let mut mems = Vec::new();
    for _ in 0..reps {
        let (t, m) = timed(make());
        times.push(t * 1000.0);
        mems.push(m);
    }
    times.sort_by(f64::total_cmp);
    mems.sort_by(f64::total_cmp);
    (times[reps / 2], mems[reps / 2])
}

fn fill(rt: &tokio::runtime::Runtime, c: &Cluster, n: u64) -> f64 {
    fill_with(rt, c, n, "#!/bin/sh\ntrue\n")
}

/// Submits `n` held 1-GPU jobs running `script`; returns submissions per second.
fn fill_with(rt: &tokio::runtime::Runtime, c: &Cluster, n: u64, script: &str) -> f64 {
    let mut spec = JobSpec::simple("bench", &gsched_cli::client::current_user(), script);
    spec.gpus_per_node = 1;
    spec.hold = true;
    spec.workdir = c.path("").to_string_lossy().into_owned();
    let json = serde_json::to_vec(&spec).unwrap();
    let left = Arc::new(AtomicU64::new(n));
    let start = Instant::now();
    let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
    let tasks: Vec<_> = (0..48)
        .map(|_| {
            let (left, json, addrs) = (left.clone(), json.clone(), addrs.clone());
            rt.spawn(async move {
                let mut client = Client::new(addrs).with_budget(Duration::from_secs(60));
                while left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                    .is_ok()
                {
                    let req = SubmitRequest {
                        request_id: uuid::Uuid::new_v4().to_string(),
                        json: json.clone(),
                    };
                    client
                        .call(|mut j| {
                            let r = req.clone();
                            async move { j.submit(r).await }
                        })
                        .await
                        .expect("submit");
                }
            })
        })
        .collect();
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    n as f64 / start.elapsed().as_secs_f64()
}

struct Replicas {
    rss: Vec<u64>,
    disk_mb: Vec<f64>,
}

fn replicas(c: &Cluster) -> Replicas {
    c.check_replicas_agree(3);
    // Let the allocator settle after the burst.
    std::thread::sleep(Duration::from_secs(2));
    let rows = c.status();
    let mut disk_mb = Vec::new();
    for (id, _) in &c.controllers {
        let r = rows.iter().find(|r| r["id"] == *id).unwrap();
        disk_mb.push(r["disk_bytes"].as_f64().unwrap_or(0.0) / 1e6);
    }
    Replicas {
        rss: (0..c.controllers.len())
            .map(|i| c.controller_rss_mib(i).unwrap_or(0))
            .collect(),
        disk_mb,
    }
}

fn follower_addr(c: &Cluster) -> String {
    let leader = c.leader(Duration::from_secs(10));
    c.controllers
        .iter()
        .find(|(id, _)| *id != leader)
        .unwrap()
        .1
        .clone()
}

fn gsched(
    c: &Cluster,
    sizes: &[u64],
    rt: &tokio::runtime::Runtime,
) -> Vec<(String, f64, &'static str)> {
    let mut figures = Vec::new();
    let mut fig = |name: String, v: f64, unit: &'static str| {
        println!("gsched {name} {v:.1} {unit}");
        figures.push((name, v, unit));
    };
    let me = gsched_cli::client::current_user();
    let idle = replicas(c);
    fig(
        "rss_idle_max".into(),
        *idle.rss.iter().max().unwrap() as f64,
        "MiB",
    );
    let mut queued = 0;
    for &n in sizes {
        let rate = fill(rt, c, n - queued);
        queued = n;
        fig(format!("fill_{n}_rate"), rate, "jobs/s");
        let r = replicas(c);
        for (i, (rss, disk)) in r.rss.iter().zip(&r.disk_mb).enumerate() {
            fig(format!("rss_{n}_replica{}", i + 1), *rss as f64, "MiB");
            fig(format!("disk_{n}_replica{}", i + 1), *disk, "MB");
        }
        let (controllers, agents) = c.daemon_pids();
        let all: Vec<u32> = controllers.iter().chain(&agents).copied().collect();
        let used = idle_cpu(&all);
        let (ctl, agt) = used.split_at(controllers.len());
        fig(format!("idle_cpu_{n}_per_10s"), used.iter().sum(), "CPU-ms");
        fig(
            format!("idle_cpu_{n}_controllers"),
            ctl.iter().sum(),
            "CPU-ms",
        );
        fig(format!("idle_cpu_{n}_agents"), agt.iter().sum(), "CPU-ms");
        let (t, m) = median_of(5, || c.command("gqueue", &[], c.dir.path()));
        fig(format!("gqueue_{n}_ms"), t, "ms");
        fig(format!("gqueue_{n}_client_rss"), m, "MiB");
        let (t, m) = median_of(5, || c.command("gqueue", &["--json"], c.dir.path()));
        fig(format!("gqueue_json_{n}_ms"), t, "ms");
        fig(format!("gqueue_json_{n}_client_rss"), m, "MiB");
        if std::env::var_os("GSCHED_BENCH_MEMORY_ONLY").is_some() {
            continue;
        }
        let follower = follower_addr(c);
        let (t, _) = median_of(5, || {
            let mut cmd = c.command("gqueue", &["--stale-ok"], c.dir.path());
            cmd.env("GSCHED_CONTROLLERS", &follower);
            cmd
        });
        fig(format!("gqueue_stale_follower_{n}_ms"), t, "ms");
        let (t, _) = median_of(3, || c.command("gqueue", &["-u", "nobody"], c.dir.path()));
        fig(format!("gqueue_other_user_{n}_ms"), t, "ms");
    }
    if std::env::var_os("GSCHED_BENCH_MEMORY_ONLY").is_some() {
        return figures;
    }
    let (t, _) = timed(c.command("gcancel", &["-u", &me], c.dir.path()));
    fig(format!("gcancel_user_{queued}_ms"), t * 1000.0, "ms");
    wait_for("the queue to empty", Duration::from_secs(300), || {
        let v = c.json("gqueue", &[]);
        v["jobs"]
            .as_array()
            .is_some_and(|a| a.is_empty())
            .then_some(())
    });
    let (t, m) = median_of(3, || {
        c.command("gacct", &["-S", "now-1hour", "-E", "now"], c.dir.path())
    });
    fig("gacct_window_ms".into(), t, "ms");
    fig("gacct_window_client_rss".into(), m, "MiB");
    let (t, _) = median_of(5, || c.command("ginfo", &[], c.dir.path()));
    fig("ginfo_4_nodes_ms".into(), t, "ms");
    // One 10,000-task array.
    let before = replicas(c);
    let script = c.script("array.sh", "#!/bin/sh\ntrue\n");
    let (t, _) = timed(c.command(
        "gsub",
        &["--hold", "--array=0-9999", "--gpus-per-node", "1", &script],
        c.dir.path(),
    ));
    fig("array_10000_submit_ms".into(), t * 1000.0, "ms");
    let r = replicas(c);
    for (i, rss) in r.rss.iter().enumerate() {
        fig(
            format!("array_10000_rss_growth_replica{}", i + 1),
            *rss as f64 - before.rss[i] as f64,
            "MiB",
        );
        fig(
            format!("array_10000_rss_replica{}", i + 1),
            *rss as f64,
            "MiB",
        );
        fig(
            format!("array_10000_disk_replica{}", i + 1),
            r.disk_mb[i],
            "MB",
        );
    }
    let (t, m) = median_of(5, || c.command("gqueue", &[], c.dir.path()));
    fig("array_10000_gqueue_ms".into(), t, "ms");
    fig("array_10000_gqueue_client_rss".into(), m, "MiB");
    let (t, _) = timed(c.command("gcancel", &["-u", &me], c.dir.path()));
    fig("array_10000_gcancel_ms".into(), t * 1000.0, "ms");
    let soak_s: u64 = std::env::var("GSCHED_BENCH_SOAK_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    if soak_s > 0 {
        for (name, v, unit) in soak(c, soak_s, &me) {
            fig(name, v, unit);
        }
    }
    let wave: u64 = std::env::var("GSCHED_BENCH_WAVE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    if wave > 0 {
        for (name, v, unit) in start_wave(rt, c, wave, &me) {
            fig(name, v, unit);
        }
    }
    let nodes: usize = std::env::var("GSCHED_BENCH_NODES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    if nodes > 0 {
        for (name, v, unit) in many_nodes(rt, c, nodes) {
            fig(name, v, unit);
        }
    }
    figures
}

/// Issue 15's start wave: `n` one-second 1-GPU jobs released at once on the 32 GPUs of
/// the 4 agents; how long until the last one started, against the ideal (ceil(n/32) s).
/// Then submit -> running on an idle cluster (server timestamps), median of 20.
fn start_wave(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    n: u64,
    me: &str,
) -> Vec<(String, f64, &'static str)> {
    use gsched_types::api::{JobAction, JobSelection};
    // Each job notes when its script began, as the Slurm side does: the time that counts
    // is when the work starts, not when the start was committed.
    let starts = c.path("wave-starts.txt");
    let _ = std::fs::remove_file(&starts);
    fill_with(
        rt,
        c,
        n,
        &format!("#!/bin/sh\ndate +%s.%N >> {}\nsleep 1\n", starts.display()),
    );
    let mut client = Client::new(c.controllers.iter().map(|(_, a)| a.clone()).collect());
    let select = JobSelection {
        users: vec![me.to_string()],
        states: vec![gsched_types::job::JobState::Pending],
        ..Default::default()
    };
    let released_at = gsched_proto::clock::now_ms();
    gsched_cli::act_on_jobs(rt, &mut client, JobAction::Release, select, "bench");
    let query = gsched_cli::JobQuery {
        include_finished: true,
        users: vec![me.to_string()],
        since_ms: released_at.saturating_sub(1),
        ..Default::default()
    };
    let last_start = wait_for("every wave job to start", Duration::from_secs(600), || {
        let jobs = gsched_cli::fetch_jobs(rt, &mut client, &query, "bench").jobs;
        let started: Vec<u64> = jobs
            .iter()
            .filter_map(|j| j.start_ms)
            .filter(|s| *s >= released_at)
            .collect();
        (started.len() as u64 >= n).then(|| started.into_iter().max().unwrap_or(0))
    });
    let committed = (last_start.saturating_sub(released_at)) as f64 / 1000.0;
    let script_starts = wait_for(
        "every wave script to note its start",
        Duration::from_secs(60),
        || {
            let v = script_start_times(&starts);
            (v.len() as u64 >= n).then_some(v)
        },
    );
    let took = script_starts.last().copied().unwrap_or(0.0) - released_at as f64 / 1000.0;
    // The first 32 start at once, the last round ceil(n/32) - 1 seconds later.
    let ideal = (n.div_ceil(32) - 1) as f64;
    // Let the wave drain, then time single submissions on an idle cluster.
    wait_for("the wave to finish", Duration::from_secs(600), || {
        let v = c.json("gqueue", &[]);
        v["jobs"]
            .as_array()
            .is_some_and(|a| a.is_empty())
            .then_some(())
    });
    let detailed = gsched_cli::JobQuery {
        detail: true,
        ..query
    };
    let jobs = gsched_cli::fetch_jobs(rt, &mut client, &detailed, "bench").jobs;
    let breakdown = wave_breakdown(&jobs);
    let script = c.script("one.sh", "#!/bin/sh\ntrue\n");
    let mut lat = Vec::new();
    for _ in 0..20 {
        let id = c.submit(&["--gpus-per-node", "1", &script]);
        let j = c.wait_state(id, &["RUNNING", "COMPLETED"], Duration::from_secs(30));
        if let (Some(s), Some(sub)) = (j["start_ms"].as_u64(), j["submit_ms"].as_u64()) {
            lat.push((s - sub) as f64);
        }
    }
    lat.sort_by(f64::total_cmp);
    let mut figures = vec![
        (format!("wave_{n}_last_started_s"), took, "s"),
        (format!("wave_{n}_last_start_committed_s"), committed, "s"),
        (format!("wave_{n}_ideal_s"), ideal, "s"),
        (
            format!("wave_{n}_over_ideal_pct"),
            (took / ideal - 1.0) * 100.0,
            "%",
        ),
        (
            "submit_to_running_median_ms".into(),
            lat.get(lat.len() / 2).copied().unwrap_or(0.0),
            "ms",
        ),
    ];
    figures.extend(breakdown);
    figures
}

/// The times (s since the epoch, sorted) the wave's scripts wrote, one per line.
fn script_start_times(path: &Path) -> Vec<f64> {
    let mut v: Vec<f64> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Issue 15's failure figures with `queued` held jobs in the queue: the leader
/// SIGKILLed -> the next submission accepted (median of 3, the killed replica restarted
/// and caught up between trials), and an agent SIGKILLed for good -> its job leaves
/// RUNNING (the dead-node timeout: an agent restarted in time re-adopts its jobs).
fn failure_figures(
    rt: &tokio::runtime::Runtime,
    c: &mut Cluster,
    queued: u64,
    me: &str,
) -> Vec<(String, f64, &'static str)> {
    fill_with(rt, c, queued, "#!/bin/sh\ntrue\n");
    let mut spec = JobSpec::simple("failover", me, "#!/bin/sh\ntrue\n");
    spec.hold = true;
    spec.workdir = c.path("").to_string_lossy().into_owned();
    let json = serde_json::to_vec(&spec).unwrap();
    let mut times: Vec<f64> = (0..3)
        .map(|_| c.failover_trial(rt, &json).as_secs_f64())
        .collect();
    times.sort_by(f64::total_cmp);
    let _ = c.cli("gcancel", &["-u", me]);
    // An agent killed and not restarted: its job runs on under the node's lease until
    // the dead-node timeout, then leaves RUNNING (NODE_FAIL).
    let script = c.script("victim.sh", "#!/bin/sh\nexec sleep 600\n");
    let id = c.submit(&["--gpus-per-node", "1", "-w", "n4", &script]);
    c.wait_state(id, &["RUNNING"], Duration::from_secs(60));
    let n4 = c.agents.len() - 1;
    c.kill_agent(n4);
    let killed = Instant::now();
    wait_for("the job to leave RUNNING", Duration::from_secs(300), || {
        c.job(id).filter(|j| j["state"] != "RUNNING")
    });
    let left = killed.elapsed().as_secs_f64();
    c.start_agent(n4);
    c.wait_node_online("n4");
    vec![
        (
            format!("leader_kill_to_next_submit_{queued}_s"),
            times[times.len() / 2],
            "s",
        ),
        ("agent_kill_to_job_not_running_s".into(), left, "s"),
    ]
}

/// Where a wave round's time beyond the job's own second goes, as medians over the wave's
/// jobs (server timestamps): committed start to the agent's "started" (dispatch, the
/// supervisor, the agent's next look), "started" to the step's exit committed beyond
/// 1 s (the script's own start and end, exit detection, the report's commit), and a
/// GPU's previous job ending to its next one's committed start (the scheduler).
fn wave_breakdown(jobs: &[gsched_types::api::JobRow]) -> Vec<(String, f64, &'static str)> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let mut launch = Vec::new();
    let mut run_over = Vec::new();
    let mut per_gpu: std::collections::BTreeMap<(String, u32), Vec<(u64, u64)>> =
        Default::default();
    for j in jobs {
        let (Some(start), Some(end)) = (j.start_ms, j.end_ms) else {
            continue;
        };
        if let Some(run) = j.runs.first()
            && let (Some(s), Some(e)) = (run.started_ms, run.ended_ms)
        {
            launch.push(s.saturating_sub(start) as f64);
            run_over.push(e.saturating_sub(s) as f64 - 1000.0);
        }
        if let Some(a) = &j.allocation {
            for n in &a.nodes {
                for g in &n.gpus {
                    per_gpu
                        .entry((n.node.clone(), *g))
                        .or_default()
                        .push((start, end));
                }
            }
        }
    }
    let mut refill = Vec::new();
    for runs in per_gpu.values_mut() {
        runs.sort_unstable();
        for w in runs.windows(2) {
            refill.push(w[1].0.saturating_sub(w[0].1) as f64);
        }
    }
    vec![
        (
            "wave_start_to_started_median_ms".into(),
            median(launch),
            "ms",
        ),
        (
            "wave_run_beyond_1s_median_ms".into(),
            median(run_over),
            "ms",
        ),
        (
            "wave_end_to_next_start_median_ms".into(),
            median(refill),
            "ms",
        ),
    ]
}

/// Registers `n` more nodes (agent sessions that register and stay open, as many agents
/// would) and times `ginfo` over them all.
fn many_nodes(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    n: usize,
) -> Vec<(String, f64, &'static str)> {
    use gsched_proto::pb::AgentEnvelope;
    use gsched_proto::pb::agent_client::AgentClient;
    let leader = c.leader(Duration::from_secs(10));
    let addr = c
        .controllers
        .iter()
        .find(|(id, _)| *id == leader)
        .unwrap()
        .1
        .clone();
    let topology: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(gsched_tests::topology("rtx4090-8gpu.json")).unwrap(),
    )
    .unwrap();
    let start = Instant::now();
    let sessions = rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("reach the leader");
        let mut keep = Vec::new();
        for i in 0..n {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let register = serde_json::json!({
                "type": "register",
                "name": format!("big{i:04}"),
                "address": "127.0.0.1:1",
                "training_addr": "127.0.0.1",
                "topology": topology,
                "features": [],
                "agent_version": "bench",
                "known_steps": [],
            });
            tx.send(AgentEnvelope {
                json: serde_json::to_vec(&register).unwrap(),
            })
            .unwrap();
            let mut inbound = AgentClient::new(ch.clone())
                .session(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                .await
                .expect("an agent session")
                .into_inner();
            let _ = inbound.message().await;
            keep.push((tx, inbound));
        }
        keep
    });
    let registered = start.elapsed().as_secs_f64();
    let total = n + 4;
    wait_for("every node listed", Duration::from_secs(60), || {
        let v = c.json("ginfo", &[]);
        (v["nodes"].as_array().map_or(0, |a| a.len()) >= total).then_some(())
    });
    let (t, m) = median_of(5, || c.command("ginfo", &[], c.dir.path()));
    let (tj, mj) = median_of(5, || c.command("ginfo", &["--json"], c.dir.path()));
    drop(sessions);
    vec![
        (format!("register_{n}_nodes_s"), registered, "s"),
        (format!("ginfo_{total}_nodes_ms"), t, "ms"),
        (format!("ginfo_{total}_nodes_client_rss"), m, "MiB"),
        (format!("ginfo_json_{total}_nodes_ms"), tj, "ms"),
        (format!("ginfo_json_{total}_nodes_client_rss"), mj, "MiB"),
    ]
}

/// Drives submissions, listings (with the read barrier) and cancels through one follower
/// for `secs`, printing every replica's RSS every 30 s: a follower must not grow.
fn soak(c: &Cluster, secs: u64, me: &str) -> Vec<(String, f64, &'static str)> {
    let follower = follower_addr(c);
    let leader = c.leader(Duration::from_secs(10));
    let fi = c
        .controllers
        .iter()
        .position(|(_, a)| *a == follower)
        .unwrap();
    let li = c
        .controllers
        .iter()
        .position(|(id, _)| *id == leader)
        .unwrap();
    let via = |tool: &str, args: &[&str]| {
        let mut cmd = c.command(tool, args, c.dir.path());
        cmd.env("GSCHED_CONTROLLERS", &follower)
            .stdout(std::process::Stdio::null());
        let _ = cmd.status();
    };
    let script = c.script("soak.sh", "#!/bin/sh\ntrue\n");
    let start = Instant::now();
    let mut next = Duration::ZERO;
    let (mut rounds, mut first, mut last) = (0u64, None, (0u64, 0u64));
    while start.elapsed() < Duration::from_secs(secs) {
        for _ in 0..5 {
            via("gsub", &["--hold", "--gpus-per-node", "1", &script]);
        }
        via("gqueue", &[]);
        via("gqueue", &["--json"]);
        via("gacct", &[]);
        via("gcancel", &["-u", me]);
        rounds += 1;
        if start.elapsed() >= next {
            let (f, l) = (
                c.controller_rss_mib(fi).unwrap_or(0),
                c.controller_rss_mib(li).unwrap_or(0),
            );
            println!(
                "# soak {:>4} s: follower {f} MiB, leader {l} MiB, {rounds} rounds",
                start.elapsed().as_secs()
            );
            first.get_or_insert((f, l));
            last = (f, l);
            next += Duration::from_secs(30);
        }
    }
    let (f0, l0) = first.unwrap_or_default();
    vec![
        ("soak_rounds".into(), rounds as f64, "rounds"),
        ("soak_follower_rss_start".into(), f0 as f64, "MiB"),
        ("soak_follower_rss_end".into(), last.0 as f64, "MiB"),
        ("soak_leader_rss_start".into(), l0 as f64, "MiB"),
        ("soak_leader_rss_end".into(), last.1 as f64, "MiB"),
    ]
}

fn slurm_cmd(prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args).env("SLURM_CONF", SLURM_CONF);
    c
}

fn slurmctld_pid() -> Option<u32> {
    std::fs::read_to_string("/tmp/slurmpeer/run/slurmctld.pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn slurmd_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/tmp/slurmpeer/run") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurmd-"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect()
}

/// CPU milliseconds per 10 s each of the daemons `pids` uses with the queue just filled
/// and nothing running: GSCHED_BENCH_IDLE_S seconds (default 30) after 10 s to settle.
fn idle_cpu(pids: &[u32]) -> Vec<f64> {
    let secs = std::env::var("GSCHED_BENCH_IDLE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    std::thread::sleep(Duration::from_secs(10));
    gsched_tests::cpu_ms_per_10s(pids, Duration::from_secs(secs))
}

fn slurm(n: u64) -> Vec<(String, f64, &'static str)> {
    let mut figures = Vec::new();
    let mut fig = |name: String, v: f64, unit: &'static str| {
        println!("slurm {name} {v:.1} {unit}");
        figures.push((name, v, unit));
    };
    let me = gsched_cli::client::current_user();
    let _ = slurm_cmd("scancel", &["-u", &me]).status();
    std::thread::sleep(Duration::from_secs(12));
    let pid = slurmctld_pid().expect("slurmctld pid file");
    fig("rss_idle".into(), rss_mib(pid).unwrap_or(0) as f64, "MiB");
    let start = Instant::now();
    let per = n / 8;
    let shells: Vec<_> = (0..8)
        .map(|_| {
            let script = format!(
                "for i in $(seq {per}); do sbatch --hold --gres=gpu:1 --wrap true -o /dev/null >/dev/null || exit 1; done"
            );
            slurm_cmd("bash", &["-c", &script]).spawn().expect("sbatch shell")
        })
        .collect();
    for mut s in shells {
        assert!(s.wait().unwrap().success(), "sbatch failed");
    }
    fig(
        format!("fill_{n}_rate"),
        (per * 8) as f64 / start.elapsed().as_secs_f64(),
        "jobs/s",
    );
    std::thread::sleep(Duration::from_secs(2));
    fig(format!("rss_{n}"), rss_mib(pid).unwrap_or(0) as f64, "MiB");
    let mut daemons = vec![pid];
    daemons.extend(slurmd_pids());
    let used = idle_cpu(&daemons);
    fig(format!("idle_cpu_{n}_per_10s"), used.iter().sum(), "CPU-ms");
    fig(format!("idle_cpu_{n}_controllers"), used[0], "CPU-ms");
    fig(
        format!("idle_cpu_{n}_agents"),
        used[1..].iter().sum(),
        "CPU-ms",
    );
    let (t, m) = median_of(5, || slurm_cmd("squeue", &[]));
    fig(format!("gqueue_{n}_ms"), t, "ms");
    fig(format!("gqueue_{n}_client_rss"), m, "MiB");
    let (t, m) = median_of(5, || slurm_cmd("squeue", &["--json"]));
    fig(format!("gqueue_json_{n}_ms"), t, "ms");
    fig(format!("gqueue_json_{n}_client_rss"), m, "MiB");
    let (t, _) = median_of(3, || slurm_cmd("squeue", &["-u", "nobody"]));
    fig(format!("gqueue_other_user_{n}_ms"), t, "ms");
    let (t, _) = timed(slurm_cmd("scancel", &["-u", &me]));
    // scancel returns once slurmctld accepted the request; wait until the queue is empty.
    let start = Instant::now();
    wait_for("Slurm's queue to empty", Duration::from_secs(300), || {
        let out = slurm_cmd("squeue", &["-h", "-u", &me, "-t", "PD,R"])
            .output()
            .ok()?;
        out.stdout.is_empty().then_some(())
    });
    fig(
        format!("gcancel_user_{n}_s"),
        t + start.elapsed().as_secs_f64(),
        "s",
    );
    let (t, _) = median_of(5, || slurm_cmd("sinfo", &[]));
    fig("ginfo_4_nodes_ms".into(), t, "ms");
    if std::env::var_os("GSCHED_BENCH_MEMORY_ONLY").is_none() {
        figures.extend(slurm_issue15(n));
    }
    figures
}

/// The start wave and the controller's SIGKILL for Slurm, as `bench.sh` phases d and r
/// measure them: 1,000 one-second 1-GPU jobs released at once (each script notes when it
/// began), and slurmctld SIGKILLed with `queued` held jobs, restarted at once (there is
/// no standby controller on one host) until the next `sbatch` is accepted.
fn slurm_issue15(queued: u64) -> Vec<(String, f64, &'static str)> {
    let mut figures = Vec::new();
    let mut fig = |name: String, v: f64, unit: &'static str| {
        println!("slurm {name} {v:.1} {unit}");
        figures.push((name, v, unit));
    };
    let me = gsched_cli::client::current_user();
    let submit = |count: u64, wrap: &str| -> Vec<String> {
        let per = count / 8;
        let shells: Vec<_> = (0..8)
            .map(|_| {
                let script = format!(
                    "for i in $(seq {per}); do sbatch --parsable --hold --gres=gpu:1 -o /dev/null --wrap '{wrap}' || exit 1; done"
                );
                slurm_cmd("bash", &["-c", &script])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("sbatch shell")
            })
            .collect();
        shells
            .into_iter()
            .flat_map(|s| {
                let out = s.wait_with_output().unwrap();
                assert!(out.status.success(), "sbatch failed");
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let queue_empty = || {
        wait_for("Slurm's queue to empty", Duration::from_secs(600), || {
            let out = slurm_cmd("squeue", &["-h", "-u", &me]).output().ok()?;
            out.stdout.is_empty().then_some(())
        })
    };
    let _ = slurm_cmd("scancel", &["-u", &me]).status();
    queue_empty();
    let wave = 1000;
    let starts = std::path::PathBuf::from("/tmp/slurmpeer/wave-starts.txt");
    let _ = std::fs::remove_file(&starts);
    let ids = submit(
        wave,
        &format!("date +%s.%N >> {}; sleep 1", starts.display()),
    );
    let released = gsched_proto::clock::now_ms() as f64 / 1000.0;
    assert!(
        slurm_cmd("scontrol", &["release", &ids.join(",")])
            .status()
            .is_ok_and(|s| s.success()),
        "scontrol release"
    );
    let all = wait_for(
        "every Slurm wave job to start",
        Duration::from_secs(900),
        || {
            let v = script_start_times(&starts);
            (v.len() as u64 >= wave).then_some(v)
        },
    );
    fig(
        format!("wave_{wave}_last_started_s"),
        all.last().copied().unwrap_or(0.0) - released,
        "s",
    );
    queue_empty();
    let _ = submit(queued, "true");
    std::thread::sleep(Duration::from_secs(5));
    if let Some(pid) = slurmctld_pid() {
        let killed = Instant::now();
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        wait_for("slurmctld to die", Duration::from_secs(10), || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
        let _ = slurm_cmd("slurmctld", &["-f", SLURM_CONF]).status();
        wait_for("Slurm to accept a job", Duration::from_secs(120), || {
            slurm_cmd("sbatch", &["--hold", "-o", "/dev/null", "--wrap", "true"])
                .output()
                .ok()
                .filter(|o| o.status.success())
        });
        fig(
            format!("leader_kill_to_next_submit_{queued}_s"),
            killed.elapsed().as_secs_f64(),
            "s",
        );
    }
    let _ = slurm_cmd("scancel", &["-u", &me]).status();
    queue_empty();
    figures
}

fn main() {
    gsched_tests::use_release_binaries();
    let sizes: Vec<u64> = std::env::var("GSCHED_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[scheduler.limits]\nmax_array_size = 10001\nmax_job_count = 1000000\n",
    )
    .unwrap();
    let mut ctl_args = vec![
        "--config".to_string(),
        config.path().to_string_lossy().into(),
    ];
    ctl_args.extend(
        std::env::var("GSCHED_BENCH_CTL_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from),
    );
    let ctl_args: Vec<&str> = ctl_args.iter().map(String::as_str).collect();
    let mut c = Cluster::controllers(3, &ctl_args);
    for i in 1..=4 {
        c.add_agent(&format!("n{i}"), "rtx4090-8gpu.json", &[]);
    }
    c.leader(Duration::from_secs(30));
    let me = gsched_cli::client::current_user();
    let wave_only = std::env::var_os("GSCHED_BENCH_WAVE_ONLY").is_some();
    let mut ours = if wave_only {
        let n = std::env::var("GSCHED_BENCH_WAVE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1000);
        let wave = start_wave(&rt, &c, n, &me);
        for (name, v, unit) in &wave {
            println!("gsched {name} {v:.1} {unit}");
        }
        wave
    } else {
        gsched(&c, &sizes, &rt)
    };
    if std::env::var_os("GSCHED_BENCH_MEMORY_ONLY").is_none() {
        for (name, v, unit) in failure_figures(&rt, &mut c, 10_000, &me) {
            println!("gsched {name} {v:.1} {unit}");
            ours.push((name, v, unit));
        }
    }
    drop(c);
    let slurm_ready = std::env::var("GSCHED_BENCH_SLURM").as_deref() != Ok("0")
        && Path::new(SLURM_CONF).exists()
        && slurm_cmd("squeue", &[])
            .output()
            .is_ok_and(|o| o.status.success());
    if !slurm_ready {
        println!("slurm: not set up (bash ../shared/peers/slurm/setup.sh); no ratios");
        return;
    }
    let theirs = if wave_only {
        slurm_issue15(10_000)
    } else {
        slurm(10_000)
    };
    println!("\nratios at 10,000 jobs (gsched / Slurm; < 1 means gsched is better):");
    for (name, v, unit) in &theirs {
        let ours_name = if name == "rss_10000" {
            "rss_10000_replica1"
        } else {
            name
        };
        match ours.iter().find(|(n, _, _)| n == ours_name) {
            Some((_, o, _)) if *v > 0.0 => {
                println!("  {name}: {o:.1} / {v:.1} {unit} = {:.2}", o / v)
            }
            Some((_, o, _)) => println!("  {name}: {o:.1} / 0 {unit} (no ratio)"),
            None => {}
        }
    }
}
