//! `gctld --http` and `gagentd --metrics` through real HTTP requests to running daemons:
//! Prometheus metrics (jobs by state, pending reasons, GPUs, nodes, the Raft role; per
//! GPU on the agent) and the read API (`/api/v1/jobs`, `jobs/ID`, `nodes`) with the
//! CLI's rows and the same caller rules.

use gsched_tests::{Cluster, free_port, success_stdout, wait_for};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::time::Duration;

fn get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn t10_metrics_count_jobs_gpus_nodes_and_the_raft_role() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let running = c.submit(&["--gpus-per-node", "2", &script]);
    c.wait_state(running, &["RUNNING"], Duration::from_secs(30));
    c.submit(&["--hold", "--gpus-per-node", "1", &script]);
    let text = wait_for(
        "the metrics to show both jobs",
        Duration::from_secs(10),
        || {
            let t = get(&addr, "/metrics");
            t.contains("gsched_jobs{state=\"PENDING\"} 1").then_some(t)
        },
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("application/openmetrics-text"), "{text}");
    for line in [
        "gsched_jobs{state=\"RUNNING\"} 1",
        "gsched_jobs{state=\"COMPLETED\"} 0",
        "gsched_jobs_pending{reason=\"JobHeldUser\"} 1",
        "gsched_jobs_submitted_total 2",
        "gsched_gpus 8",
        "gsched_gpus_allocated 2",
        "gsched_gpus_unhealthy 0",
        "gsched_nodes{state=\"up\"} 1",
        "gsched_raft_role{role=\"leader\"} 1",
        "gsched_raft_role{role=\"follower\"} 0",
        "gsched_raft_voters 1",
        "gsched_storage_fault 0",
        "gsched_agents_connected 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // What the leader measured while it worked: passes, the running job's wait, commits.
    let count = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_count ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name}_count:\n{text}"))
    };
    assert!(count("gsched_scheduler_pass_seconds") > 0);
    assert!(count("gsched_job_queue_wait_seconds") >= 1);
    assert!(count("gsched_proposal_seconds") >= 2);
    assert!(
        text.contains("gsched_scheduler_pending_considered "),
        "{text}"
    );
    // Nothing about who runs what.
    assert!(
        !text.contains("sleep.sh") && !text.contains("root"),
        "{text}"
    );
    let other = get(&addr, "/api/v2/jobs");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
}

#[test]
fn t20_agent_metrics_say_which_job_holds_each_gpu_and_its_link() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &["--metrics", &addr]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let id = c.submit(&["--gpus-per-node", "2", &script]);
    let job = c.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    let gpus: Vec<u64> = job["allocation"]["nodes"][0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    let text = wait_for(
        "the agent to count the step",
        Duration::from_secs(10),
        || {
            let t = get(&addr, "/metrics");
            t.contains("gsched_agent_steps_running 1").then_some(t)
        },
    );
    for g in 0..8u64 {
        let holder = if gpus.contains(&g) { id } else { 0 };
        let line = format!("gsched_gpu_job{{gpu=\"{g}\"}} {holder}");
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
    for line in [
        "gsched_gpu_pcie_link_gen{gpu=\"0\",which=\"current\"} 4",
        "gsched_gpu_pcie_link_width{gpu=\"0\",which=\"max\"} 16",
        "gsched_gpu_memory_total_bytes{gpu=\"0\"} 25757220864",
        "gsched_gpu_lost{gpu=\"0\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"));
}

/// The body of an HTTP response.
fn body(resp: &str) -> serde_json::Value {
    let (_, b) = resp.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(b).unwrap_or_else(|e| panic!("{e}: {resp}"))
}

#[test]
fn t30_the_read_api_serves_the_cli_rows_to_verified_callers() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let id = c.submit(&["--hold", "--export", "ALL,SECRET=hunter2", &script]);
    // As the owner (root, by this socket): the rows gqueue --json prints, with details.
    let list = body(&get(&addr, "/api/v1/jobs?detail=1"));
    let row = &list["jobs"][0];
    assert_eq!(row["job_id"], id);
    assert_eq!(row["state"], "PENDING");
    assert!(row["spec"].is_object(), "{row}");
    let one = get(&addr, &format!("/api/v1/jobs/{id}"));
    assert!(one.starts_with("HTTP/1.1 200"), "{one}");
    assert_eq!(body(&one)["job_id"], id);
    let missing = get(&addr, "/api/v1/jobs/999999");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    assert!(body(&missing)["error"].as_str().unwrap().contains("999999"));
    let nodes = body(&get(&addr, "/api/v1/nodes"));
    assert_eq!(nodes["nodes"][0]["name"], "n1");
    // Another user, through their own socket: the summary, not the request.
    if let Some((alice, _)) = gsched_tests::test_users() {
        let script = format!(
            "import urllib.request; print(urllib.request.urlopen('http://{addr}/api/v1/jobs?detail=1').read().decode())"
        );
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", &script])
            .uid(alice.uid)
            .gid(alice.gid)
            .output()
            .unwrap();
        let text = success_stdout(&out, "the read API as alice");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["jobs"][0]["job_id"], id);
        assert!(v["jobs"][0]["spec"].is_null(), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
