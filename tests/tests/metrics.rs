//! `gctld --http` and `gagentd --metrics` through real HTTP requests to running daemons:
//! Prometheus metrics (jobs by state, pending reasons, GPUs, nodes, the Raft role; per
//! GPU on the agent) and the read API (`/api/v1/jobs`, `jobs/ID`, `nodes`) with the
//! CLI's rows and the same caller rules.

use gsched_tests::{Cluster, free_port, http, success_stdout, wait_for};
use std::os::unix::process::CommandExt;
use std::time::Duration;

fn get(addr: &str, path: &str) -> String {
    get_with(addr, path, "")
}

/// A GET with extra header lines (each ending in \r\n).
fn get_with(addr: &str, path: &str, headers: &str) -> String {
    http::request(addr, "GET", path, headers, b"")
}

/// A JSON request with extra header lines and a body.
fn send(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> String {
    let headers = format!("{headers}Content-Type: application/json\r\n");
    http::request(addr, method, path, &headers, body.as_bytes())
}

/// A `gctl token` for `user`, good for `lifetime`, checked to name them.
fn token(c: &Cluster, user: &gsched_tests::TestUser, lifetime: &str) -> String {
    let out = c.cli_as(user, "gctl", &["token", "--lifetime", lifetime, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&success_stdout(&out, "gctl token")).unwrap();
    assert_eq!(v["user"], user.name.as_str());
    v["token"].as_str().unwrap().to_string()
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

#[test]
fn t30_the_read_api_serves_the_cli_rows_to_verified_callers() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let id = c.submit(&["--hold", "--export", "ALL,SECRET=hunter2", &script]);
    // As the owner (root, by this socket): the rows gqueue --json prints, with details.
    let list = http::json_body(&get(&addr, "/api/v1/jobs?detail=1"));
    let row = &list["jobs"][0];
    assert_eq!(row["job_id"], id);
    assert_eq!(row["state"], "PENDING");
    assert!(row["spec"].is_object(), "{row}");
    let one = get(&addr, &format!("/api/v1/jobs/{id}"));
    assert!(one.starts_with("HTTP/1.1 200"), "{one}");
    assert_eq!(http::json_body(&one)["job_id"], id);
    let missing = get(&addr, "/api/v1/jobs/999999");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    assert!(
        http::json_body(&missing)["error"]
            .as_str()
            .unwrap()
            .contains("999999")
    );
    let nodes = http::json_body(&get(&addr, "/api/v1/nodes"));
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

#[test]
fn t40_gctl_token_names_its_user_to_the_http_api_and_nothing_else_passes() {
    let Some((alice, bob)) = gsched_tests::test_users() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let home = c.user_dir(&alice);
    let script = home.join("sleep.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = c.cli_as(
        &alice,
        "gsub",
        &[
            "--parsable",
            "--hold",
            "--export",
            "ALL,SECRET=hunter2",
            script.to_str().unwrap(),
        ],
    );
    let id: u64 = success_stdout(&out, "gsub as alice")
        .trim()
        .parse()
        .unwrap();
    let token_of = |user: &gsched_tests::TestUser, lifetime: &str| token(&c, user, lifetime);
    let path = format!("/api/v1/jobs/{id}");
    let bearer = |t: &str| format!("Authorization: Bearer {t}\r\n");
    // Alice's token shows her her job in full, whoever's socket carries it (here root's).
    let alice_token = token_of(&alice, "1:00:00");
    let mine = get_with(&addr, &path, &bearer(&alice_token));
    assert!(mine.starts_with("HTTP/1.1 200"), "{mine}");
    assert!(http::json_body(&mine)["spec"].is_object(), "{mine}");
    // Bob's token: the summary only, though root's socket would have shown everything.
    let bobs = get_with(&addr, &path, &bearer(&token_of(&bob, "1:00:00")));
    assert!(bobs.starts_with("HTTP/1.1 200"), "{bobs}");
    assert!(http::json_body(&bobs)["spec"].is_null(), "{bobs}");
    assert!(!bobs.contains("hunter2"));
    // An altered token, a made-up one and an expired one are refused, not downgraded.
    let altered = alice_token.replacen(&format!(".{}.", alice.uid), ".0.", 1);
    for (t, why) in [
        (altered.as_str(), "not issued"),
        ("gst1.0.0.99999999999999.00", "not issued"),
        ("nonsense", "not a gsched token"),
    ] {
        let r = get_with(&addr, &path, &bearer(t));
        assert!(r.starts_with("HTTP/1.1 401"), "{t}: {r}");
        assert!(
            http::json_body(&r)["error"].as_str().unwrap().contains(why),
            "{r}"
        );
    }
    let short = token_of(&alice, "1");
    std::thread::sleep(Duration::from_millis(1_300));
    let r = get_with(&addr, &path, &bearer(&short));
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert!(
        http::json_body(&r)["error"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{r}"
    );
    // Lifetimes are bounded.
    let out = c.cli_as(&alice, "gctl", &["token", "--lifetime", "30-00:00:00"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a week"));
    // The dashboard page itself is served to anyone; its data is not.
    let page = get(&addr, "/");
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("<title>gsched</title>"));
}

#[test]
fn t50_writes_over_http_follow_the_cli_rules() {
    let Some((alice, bob)) = gsched_tests::test_users() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let token = |u: &gsched_tests::TestUser| -> String {
        let out = c.cli_as(u, "gctl", &["token", "--json"]);
        let v: serde_json::Value =
            serde_json::from_str(&success_stdout(&out, "gctl token")).unwrap();
        format!("Authorization: Bearer {}\r\n", v["token"].as_str().unwrap())
    };
    let (as_alice, as_bob) = (token(&alice), token(&bob));
    // A job spec (the type gRPC Submit takes) that claims root, sent with alice's token:
    // refused, as from the CLI.
    let home = c.user_dir(&alice);
    let mut spec =
        gsched_types::job::JobSpec::simple("from-http", "root", "#!/bin/sh\nsleep 600\n");
    spec.hold = true;
    spec.uid = Some(0);
    spec.workdir = home.to_string_lossy().into_owned();
    let r = send(
        &addr,
        "POST",
        "/api/v1/jobs",
        &as_alice,
        &serde_json::to_string(&spec).unwrap(),
    );
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(
        http::json_body(&r)["error"]
            .as_str()
            .unwrap()
            .contains("another user"),
        "{r}"
    );
    // Her own job.
    spec.user = alice.name.clone();
    spec.uid = None;
    let spec = serde_json::to_value(&spec).unwrap();
    let headers = format!("{as_alice}Idempotency-Key: t50-submit\r\n");
    let r = send(&addr, "POST", "/api/v1/jobs", &headers, &spec.to_string());
    assert!(r.starts_with("HTTP/1.1 201"), "{r}");
    let id = http::json_body(&r)["job_ids"][0].as_u64().unwrap();
    // Retried with the same key: the same job, not a second one.
    let again = send(&addr, "POST", "/api/v1/jobs", &headers, &spec.to_string());
    assert_eq!(
        http::json_body(&again)["job_ids"][0].as_u64(),
        Some(id),
        "{again}"
    );
    // The key is tied to its first request: another body or another request with it is
    // refused (409), never answered with the first one's outcome, and changes nothing.
    let mut other = spec.clone();
    other["name"] = "another".into();
    let r = send(&addr, "POST", "/api/v1/jobs", &headers, &other.to_string());
    assert!(r.starts_with("HTTP/1.1 409"), "{r}");
    assert!(r.contains("first used for another request"), "{r}");
    let r = send(
        &addr,
        "POST",
        &format!("/api/v1/jobs/{id}/hold"),
        &headers,
        "",
    );
    assert!(r.starts_with("HTTP/1.1 409"), "{r}");
    // With a key of its own, the hold is done.
    let r = send(
        &addr,
        "POST",
        &format!("/api/v1/jobs/{id}/hold"),
        &format!("{as_alice}Idempotency-Key: t50-hold\r\n"),
        "",
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let row = http::json_body(&get(&addr, &format!("/api/v1/jobs/{id}")));
    assert_eq!(
        row["user"],
        alice.name.as_str(),
        "the verified caller, not the spec: {row}"
    );
    assert_eq!(row["name"], "from-http");
    // Bad input changes nothing.
    let bad = send(
        &addr,
        "POST",
        "/api/v1/jobs",
        &as_alice,
        "{\"nodes\": \"many\"}",
    );
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    let all = http::json_body(&get(&addr, "/api/v1/jobs?all=1"));
    assert_eq!(all["jobs"].as_array().unwrap().len(), 1, "{all}");
    // Bob cannot touch alice's job; alice can release and cancel it.
    let r = send(
        &addr,
        "POST",
        &format!("/api/v1/jobs/{id}/cancel"),
        &as_bob,
        "",
    );
    assert!(
        !r.starts_with("HTTP/1.1 200") || http::json_body(&r)["count"] == 0,
        "{r}"
    );
    assert_eq!(
        http::json_body(&get(&addr, &format!("/api/v1/jobs/{id}")))["state"],
        "PENDING"
    );
    let r = send(
        &addr,
        "POST",
        &format!("/api/v1/jobs/{id}/explode"),
        &as_alice,
        "",
    );
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    let r = send(
        &addr,
        "POST",
        "/api/v1/jobs/actions",
        &as_alice,
        &format!("{{\"action\": \"cancel\", \"select\": {{\"jobs\": [{{\"id\": {id}}}]}}}}"),
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(http::json_body(&r)["count"], 1, "{r}");
    assert_eq!(
        http::json_body(&get(&addr, &format!("/api/v1/jobs/{id}")))["state"],
        "CANCELLED"
    );
    // Nodes: only an admin drains (root, by its own socket here), with a reason.
    let r = send(
        &addr,
        "POST",
        "/api/v1/nodes/n1/drain",
        &as_alice,
        "{\"reason\": \"mine\"}",
    );
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    let r = send(&addr, "POST", "/api/v1/nodes/n1/drain", "", "{}");
    assert!(r.starts_with("HTTP/1.1 400"), "a drain needs a reason: {r}");
    let r = send(
        &addr,
        "POST",
        "/api/v1/nodes/n1/drain",
        "",
        "{\"reason\": \"fan\"}",
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let nodes = http::json_body(&get(&addr, "/api/v1/nodes"));
    assert_eq!(nodes["nodes"][0]["drain_reason"], "fan", "{nodes}");
    let r = send(&addr, "POST", "/api/v1/nodes/n1/resume", "", "");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

#[test]
fn t60_grafana_and_alerts_name_served_metrics_and_logs_can_be_json() {
    let http = format!("127.0.0.1:{}", free_port());
    let agent = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &http, "--log-format", "json"]);
    c.add_agent(
        "n1",
        "rtx4090-8gpu.json",
        &["--metrics", &agent, "--log-format", "json"],
    );
    wait_for("the agent to register", Duration::from_secs(20), || {
        http::json_body(&get(&http, "/api/v1/nodes"))["nodes"]
            .as_array()
            .is_some_and(|n| !n.is_empty())
            .then_some(())
    });
    let mut served = std::collections::BTreeSet::new();
    for addr in [&http, &agent] {
        for line in get(addr, "/metrics").lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                served.insert(rest.split_whitespace().next().unwrap().to_string());
            }
        }
    }
    assert!(served.contains("gsched_gpu_power_watts"), "{served:?}");
    let named = |text: &str| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(i) = rest.find("gsched_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let base = ["_bucket", "_total", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            if !base.ends_with('_') {
                out.insert(base.to_string());
            }
            rest = &tail[end..];
        }
        out
    };
    // --log-format json: every log line is one JSON object with a level and a message.
    for log in ["ctl1.log", "agent-n1.log"] {
        let text = std::fs::read_to_string(c.path(log)).unwrap();
        assert!(text.lines().count() >= 2, "{log}: {text}");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{log}: not JSON ({e}): {line}"));
            assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
        }
    }
    let root = gsched_tests::workspace();
    for file in [
        "deploy/grafana/gsched.json",
        "deploy/prometheus/prometheus.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let names = named(&text);
        assert!(names.len() > 5, "{file}: {names:?}");
        let unknown: Vec<&String> = names.iter().filter(|n| !served.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics nobody serves: {unknown:?}"
        );
    }
}

#[test]
fn t70_the_python_rest_client_submits_lists_and_cancels_through_the_openapi_document() {
    let Some((alice, bob)) = gsched_tests::test_users() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let url = format!("http://{addr}");
    let home = c.user_dir(&alice);
    // The example, copied where the test users can read it.
    let client = c.path("rest_client.py");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rest_client.py"),
        &client,
    )
    .unwrap();
    std::fs::set_permissions(&client, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(home.join("job.sh"), "#!/bin/sh\nexec sleep 600\n").unwrap();
    let (alice_token, bob_token) = (token(&c, &alice, "1:00:00"), token(&c, &bob, "1:00:00"));
    let run = |user: &gsched_tests::TestUser, token: &str, args: &[&str]| {
        std::process::Command::new("/usr/bin/python3")
            .arg(&client)
            .args(["--url", &url, "--token", token])
            .args(args)
            .current_dir(c.user_dir(user))
            .uid(user.uid)
            .gid(user.gid)
            .output()
            .unwrap()
    };
    let out = run(
        &alice,
        &alice_token,
        &["submit", "--name", "rest", "--hold", "job.sh"],
    );
    let id: u64 = success_stdout(&out, "rest_client.py submit")
        .trim()
        .parse()
        .unwrap();
    // The job is alice's, as gqueue sees it.
    let q = success_stdout(&c.cli("gqueue", &["--json"]), "gqueue");
    let rows: serde_json::Value = serde_json::from_str(&q).unwrap();
    let row = rows["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == id)
        .expect("the submitted job is queued");
    assert_eq!(row["user"], alice.name.as_str());
    assert_eq!(row["name"], "rest");
    let listed = success_stdout(
        &run(&alice, &alice_token, &["list", "--user", &alice.name]),
        "rest_client.py list",
    );
    assert!(
        listed
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|j| j["job_id"] == id && j["state"] == "PENDING"),
        "{listed}"
    );
    // Bob's client is refused alice's job, and says so.
    let refused = run(&bob, &bob_token, &["cancel", &id.to_string()]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(&alice.name),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let done = run(&alice, &alice_token, &["cancel", &id.to_string()]);
    assert_eq!(
        success_stdout(&done, "rest_client.py cancel").trim(),
        "cancelled 1 job(s)"
    );
    wait_for("the job cancelled", Duration::from_secs(10), || {
        let a = c.cli("gacct", &["-j", &id.to_string(), "--json"]);
        String::from_utf8_lossy(&a.stdout)
            .contains("CANCELLED")
            .then_some(())
    });
    // An operation the document does not declare is refused before anything is sent.
    let undeclared = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import rest_client\nc = rest_client.Client(sys.argv[2], sys.argv[3])\ntry:\n    c.call('DELETE', '/api/v1/jobs')\nexcept KeyError as e:\n    print('refused', e)",
            c.path("").to_str().unwrap(),
            &url,
            &alice_token,
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&undeclared.stdout).contains("refused"),
        "{}{}",
        String::from_utf8_lossy(&undeclared.stdout),
        String::from_utf8_lossy(&undeclared.stderr)
    );
}
