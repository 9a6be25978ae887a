//! Agents at scale (prints figures; asserts nothing about time):
//!
//!   cargo bench -p gsched-tests --bench agents        # builds and uses release binaries
//!
//! For each N in GSCHED_BENCH_AGENTS (default 100,300,1000): three controllers on sled
//! (127.0.0.1) and N node agents in one `gsched-swarm` process (the production agent
//! session, 8 fake GPUs each, one heartbeat a second as `gagentd`'s default). Measures
//!   1. the time until every node is online after the swarm starts;
//!   2. CPU (ms per 10 s) and RSS of the leader, each follower and the swarm with N idle
//!      agents, and the bytes the leader read and wrote per second (agent traffic);
//!   3. after a SIGKILL of the leader: the time until the new leader has logged the
//!      registration of every agent, and any node it put down as lost or not responding;
//!   4. one scheduling pass at that size (`gsim bench-pass --nodes N`, 20 pending jobs a
//!      node: the same planner on a synthetic snapshot).
//!
//! Options (environment): GSCHED_BENCH_AGENTS, GSCHED_BENCH_SECS (CPU window, default 10).

use gsched_tests::{Cluster, cpu_ms_per_10s, rss_mib, wait_for};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Swarm(Child);

impl Drop for Swarm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn online(c: &Cluster) -> Option<(usize, usize)> {
    let v = c.json("ginfo", &[]);
    let nodes = v["nodes"].as_array()?;
    let on = nodes
        .iter()
        .filter(|n| n["online"] == true && n["responding"] == true)
        .count();
    Some((on, nodes.len()))
}

/// Bytes read and written by a process so far (sockets included), from `/proc/PID/io`.
fn io_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("rchar:") || l.starts_with("wchar:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// Names of the agents a controller's log shows registered after byte `from`, and the
/// nodes it put down (lost or not responding) there.
fn registrations(log: &std::path::Path, from: usize) -> (BTreeSet<String>, Vec<String>) {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(from..).unwrap_or_default());
    let mut names = BTreeSet::new();
    let mut down = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("agent ").nth(1)
            && let Some(name) = rest.strip_suffix(" registered")
        {
            names.insert(name.to_string());
        }
        if line.contains("NodeLost") || line.contains("responding: false") {
            down.push(line.to_string());
        }
    }
    (names, down)
}

fn run(n: usize, secs: u64) {
    println!("== {n} agents");
    let mut c = Cluster::controllers(3, &[]);
    c.leader(Duration::from_secs(30));
    let swarm_dir = c.path("swarm");
    let started = Instant::now();
    let swarm = Swarm(
        Command::new(env!("CARGO_BIN_EXE_gsched-swarm"))
            .args(["--controllers", &c.controllers_arg()])
            .args(["--agents", &n.to_string()])
            .arg("--topology")
            .arg(gsched_tests::topology("dgx-a100-8gpu.json"))
            .arg("--dir")
            .arg(&swarm_dir)
            .env("GSCHED_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(c.path("swarm.log")).expect("swarm log"))
            .spawn()
            .expect("spawn gsched-swarm"),
    );
    wait_for("every agent online", Duration::from_secs(300), || {
        online(&c).filter(|(on, _)| *on == n).map(|_| ())
    });
    println!(
        "  all {n} nodes online {:.2} s after the swarm started",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    let leader = c.leader(Duration::from_secs(10));
    let (ctl_pids, _) = c.daemon_pids();
    let li = c
        .controllers
        .iter()
        .position(|(id, _)| *id == leader)
        .expect("the leader is one of the controllers");
    let mut pids = ctl_pids.clone();
    pids.push(swarm.0.id());
    let io_before = io_bytes(ctl_pids[li]);
    let t = Instant::now();
    let cpu = cpu_ms_per_10s(&pids, Duration::from_secs(secs));
    let io_rate = (io_bytes(ctl_pids[li]) - io_before) as f64 / t.elapsed().as_secs_f64();
    let mut followers: Vec<String> = Vec::new();
    for (i, pid) in ctl_pids.iter().enumerate() {
        if i != li {
            followers.push(format!(
                "{:.0} ms ({} MiB)",
                cpu[i],
                rss_mib(*pid).unwrap_or(0)
            ));
        }
    }
    println!(
        "  idle, CPU per 10 s (RSS): leader {:.0} ms ({} MiB), followers {}, swarm of {n} agents {:.0} ms ({} MiB)",
        cpu[li],
        rss_mib(ctl_pids[li]).unwrap_or(0),
        followers.join(", "),
        cpu[3],
        rss_mib(swarm.0.id()).unwrap_or(0)
    );
    println!(
        "  agent traffic: {n} heartbeats/s sent and answered; the leader read+wrote {:.0} KB/s",
        io_rate / 1000.0
    );
    let logs: Vec<(u64, std::path::PathBuf, usize)> = c
        .controllers
        .iter()
        .filter(|(id, _)| *id != leader)
        .map(|(id, _)| {
            let log = c.path(&format!("ctl{id}.log"));
            let len = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
            (*id, log, len)
        })
        .collect();
    c.kill_leader();
    let killed = Instant::now();
    let mut first_seen: Option<Duration> = None;
    let (new_leader, took, down) = wait_for(
        "every agent registered with the new leader",
        Duration::from_secs(300),
        || {
            logs.iter().find_map(|(id, log, from)| {
                let (names, down) = registrations(log, *from);
                if !names.is_empty() && first_seen.is_none() {
                    first_seen = Some(killed.elapsed());
                }
                (names.len() >= n).then(|| (*id, killed.elapsed(), down))
            })
        },
    );
    println!(
        "  leader {leader} SIGKILLed: controller {new_leader} had the first agent back after {:.2} s and all {n} after {:.2} s",
        first_seen.unwrap_or(took).as_secs_f64(),
        took.as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(8));
    let (_, _, later_down) = logs
        .iter()
        .find(|(id, _, _)| *id == new_leader)
        .map(|(id, log, from)| {
            let (names, down) = registrations(log, *from);
            (id, names, down)
        })
        .expect("the new leader's log");
    let (on, total) = online(&c).unwrap_or((0, 0));
    println!(
        "  8 s later: {on} of {total} nodes online and responding; nodes the new leader put down: {}",
        later_down.len().max(down.len())
    );
    for line in later_down.iter().take(3) {
        println!("    {line}");
    }
    drop(swarm);
    let gsim = gsched_tests::bin("gsim");
    if !gsim.exists() {
        println!(
            "  scheduling pass: no gsim in the binaries (cargo build --release -p gsched-sim)"
        );
        return;
    }
    let out = Command::new(gsim)
        .args(["bench-pass", "--nodes", &n.to_string()])
        .args(["--pending", &(n * 20).to_string(), "--runs", "5"])
        .env("GSIM_SKIP_BASELINE", "1")
        .output()
        .expect("run gsim bench-pass");
    let text = String::from_utf8_lossy(&out.stdout);
    println!(
        "  scheduling pass, {n} nodes x 8 GPUs, {} pending: {}",
        n * 20,
        text.lines().last().unwrap_or("(no output)")
    );
}

fn main() {
    gsched_tests::use_release_binaries();
    let secs = std::env::var("GSCHED_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for n in env_list("GSCHED_BENCH_AGENTS", &[100, 300, 1000]) {
        run(n, secs);
    }
}
