//! The live fuzzer against a running 3-controller cluster with one agent: thousands of
//! random and malformed requests through every gRPC method (as an ordinary user and, with
//! `--admin`, as root), then every controller must be alive, the replicas must agree on
//! the state digest, resident memory must have stayed under a bound, and a real job must
//! still run to completion.
//!
//! CI runs it for `GSCHED_FUZZ_SECS` (20 s by default); the long form is
//! `GSCHED_FUZZ_SECS=600 cargo test --release -p gsched-tests --test integration livefuzz:: -- --nocapture`,
//! which prints the figures the README quotes.

use gsched_tests::{Cluster, test_users, topology};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Resident memory no controller may exceed while fuzzed (debug builds included).
const RSS_BOUND_MIB: u64 = 768;

#[test]
fn t10_random_and_malformed_requests_leave_the_cluster_whole() {
    let secs: u64 = std::env::var("GSCHED_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("GSCHED_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        });
    eprintln!("fuzz seed {seed} (GSCHED_FUZZ_SEED={seed} repeats it), {secs} s");
    let mut c = Cluster::controllers(3, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.leader(Duration::from_secs(30));
    c.wait_node_online("n1");
    let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
    let fuzz = |admin: bool, seed: u64| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gsched-livefuzz"));
        cmd.args(["--addrs", &addrs.join(","), "--secs", &secs.to_string()])
            .args(["--seed", &seed.to_string(), "--tasks", "6"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if admin {
            cmd.arg("--admin")
                .arg("--topology")
                .arg(topology("rtx4090-8gpu.json"));
        }
        cmd
    };
    let mut runs = Vec::new();
    let users = test_users();
    if let Some((alice, _)) = &users {
        let mut cmd = fuzz(false, seed);
        std::os::unix::process::CommandExt::uid(&mut cmd, alice.uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, alice.gid);
        runs.push(("user", cmd.spawn().expect("spawn the fuzzer as gsalice")));
        runs.push((
            "root",
            fuzz(true, seed + 1).spawn().expect("spawn the fuzzer"),
        ));
    } else {
        runs.push(("self", fuzz(false, seed).spawn().expect("spawn the fuzzer")));
    }
    let mut peak = vec![0u64; c.controllers.len()];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs + 30)
        && runs
            .iter_mut()
            .any(|(_, p)| p.try_wait().ok().flatten().is_none())
    {
        for (i, p) in peak.iter_mut().enumerate() {
            *p = (*p).max(c.controller_rss_mib(i).unwrap_or(0));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut total = 0;
    for (who, p) in runs {
        let out = p.wait_with_output().expect("fuzzer output");
        let line = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("fuzzer ({who}) printed no summary ({e}): {line}"));
        eprintln!("fuzzer as {who}: {v}");
        total += v["requests"].as_u64().unwrap_or(0);
    }
    assert!(total >= 50 * secs, "only {total} requests in {secs} s");
    for i in 0..c.ctl_procs.len() {
        assert!(
            c.ctl_procs[i].as_mut().is_some_and(|p| p.alive()),
            "controller {} died under the fuzzer:\n{}",
            i + 1,
            c.logs()
        );
    }
    eprintln!("peak controller RSS (MiB): {peak:?}; {total} requests in {secs} s");
    assert!(
        peak.iter().all(|p| *p < RSS_BOUND_MIB),
        "a controller went over {RSS_BOUND_MIB} MiB: {peak:?}"
    );
    c.check_replicas_agree(3);
    // Real work still succeeds (the root fuzzer may have drained n1).
    c.ok("gctl", &["node", "resume", "n1"]);
    let script = c.script("ok.sh", "#!/bin/sh\necho fine\n");
    let id = c.submit(&["-w", "n1", "-t", "5", &script]);
    let ended = |j: &serde_json::Value| {
        ["COMPLETED", "FAILED", "CANCELLED"]
            .iter()
            .any(|s| j["state"] == *s)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let job = loop {
        match c.job(id) {
            Some(j) if ended(&j) => break j,
            j if std::time::Instant::now() > deadline => panic!(
                "the job after the fuzz did not end in 60 s: {j:?}\nnodes: {}\n{}",
                c.ok("ginfo", &["--json"]),
                c.logs()
            ),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert_eq!(job["state"], "COMPLETED", "{job}");
    c.check_replicas_agree(3);
}
