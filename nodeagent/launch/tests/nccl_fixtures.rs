//! Every NCCL/PyTorch/torchrun fixture is classified as `tests/fixtures/INDEX.md` says.

use gsched_launch::watch::{LogFinding, classify_exit, classify_line};
use gsched_types::failure::FailureKind;

fn findings(name: &str) -> Vec<LogFinding> {
    let path = format!(
        "{}/../../tests/fixtures/nccl/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let body = text.split("===== END HEADER").nth(1).unwrap_or(&text);
    body.lines().filter_map(classify_line).collect()
}

fn first_fatal(name: &str) -> LogFinding {
    findings(name)
        .into_iter()
        .find(|f| f.fatal)
        .unwrap_or_else(|| panic!("{name}: no fatal line found"))
}

#[test]
fn watchdog_timeouts_in_every_format() {
    for f in [
        "pytorch-watchdog-timeout-old-format-1800000ms-ofa.txt",
        "pytorch-watchdog-timeout-pg-guid-format-basicsr.txt",
        "torch211-watchdog-timeout-15s-hang-h200.txt",
    ] {
        let hit = first_fatal(f);
        assert_eq!(hit.kind, FailureKind::NcclTimeout, "{f}");
        assert!(
            hit.line
                .contains("Watchdog caught collective operation timeout"),
            "{f}: {}",
            hit.line
        );
    }
    let hang = first_fatal("torch211-watchdog-timeout-15s-hang-h200.txt");
    assert!(
        hang.line.contains("21:35:42"),
        "acting on the first line (21:35:42), not the abort at 21:36:49: {}",
        hang.line
    );
}

#[test]
fn heartbeat_monitor_is_a_hang() {
    let hit = first_fatal("pytorch-heartbeat-monitor-watchdog-stuck-fatal.txt");
    assert_eq!(hit.kind, FailureKind::NcclTimeout);
    assert!(
        findings("pytorch-heartbeat-monitor-watchdog-stuck-fatal.txt")
            .iter()
            .any(|f| f.line.contains("Heartbeat monitor timed out"))
    );
}

#[test]
fn remote_peer_gone_is_an_nccl_error() {
    let hit = first_fatal("nccl-remote-error-broken-pipe-proxy-aws-p4d.txt");
    assert_eq!(hit.kind, FailureKind::NcclError);
    assert!(
        hit.line.contains("Connection closed by remote peer") || hit.line.contains("Broken pipe"),
        "{}",
        hit.line
    );
}

#[test]
fn torchrun_summaries_are_evidence_not_fatal() {
    let f = findings("torchrun-childfailederror-sigabrt-summary-mmseg.txt");
    assert!(f.iter().any(|x| x.line.contains("ChildFailedError")));
    assert!(
        f.iter().all(|x| !x.fatal),
        "a summary explains an exit, it does not predict one"
    );
    let (kind, why) = classify_exit(Some(1), None, &f, None, false).unwrap();
    assert_eq!(kind, FailureKind::ExitCode { code: 1 });
    assert!(why.contains("last error line"), "{why}");
    let killed = findings("torch211-torchrun-local-rank-sigkill-h200.txt");
    let dead = killed
        .iter()
        .find(|x| x.fatal)
        .expect("torchrun's 'failed (exitcode: -9)' line stops the gang");
    assert_eq!(dead.kind, FailureKind::Signal { signal: 9 });
    assert!(dead.line.contains("local_rank: 1"), "{}", dead.line);
}

#[test]
fn healthy_logs_have_no_fatal_lines() {
    assert!(
        findings("nccl228-debug-info-2gpu-nvlink-h200.txt")
            .iter()
            .all(|f| !f.fatal)
    );
    assert!(
        findings("nccl-2.4-docker-2node-socket-ib0-and-net-ib-mlx5-0.txt")
            .iter()
            .all(|f| !f.fatal)
    );
}

/// Outputs of gsched's own jobs on 2x H200 (deploy/gpu/h200-run.sh, torch 2.11, NCCL
/// 2.28.9): what the agent must find in them.
fn gpu_run(name: &str) -> Vec<LogFinding> {
    let path = format!(
        "{}/../../tests/fixtures/gpu/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(classify_line)
        .collect()
}

#[test]
fn h200_runs_killed_rank_hung_rank_and_peer_symptom() {
    let killed = gpu_run("torchrun-1node-killed-rank.out");
    let hit = killed
        .iter()
        .find(|f| f.fatal)
        .expect("torchrun's failure line");
    assert_eq!(hit.kind, FailureKind::Signal { signal: 9 }, "{}", hit.line);
    assert!(hit.line.contains("failed (exitcode: -9)"));

    let hung = gpu_run("torchrun-1node-hung-rank-nccl-timeout.out");
    let hit = hung.iter().find(|f| f.fatal).expect("watchdog line");
    assert_eq!(hit.kind, FailureKind::NcclTimeout);
    assert!(hit.line.contains("Timeout(ms)=10000"), "{}", hit.line);

    // Two nodes over sockets, rank 1 killed: what the surviving rank 0 prints names the
    // peer, not itself.
    let peer = gpu_run("torchrun-2node-killed-rank-sockets.out");
    let hit = peer
        .iter()
        .find(|f| f.kind == FailureKind::NcclError)
        .expect("NCCL remote error");
    let failure = gsched_types::failure::Failure {
        kind: hit.kind.clone(),
        node: None,
        evidence: hit.line.clone(),
        at_ms: 0,
    };
    assert!(failure.points_elsewhere(), "{}", hit.line);
}

#[test]
fn an_ib_port_error_stops_the_job_at_once() {
    let hit = first_fatal("ib-async-port-error-job-keeps-running-litllama.txt");
    assert_eq!(hit.kind, FailureKind::NcclError);
    assert!(
        hit.line.contains("Got async event : port error"),
        "{}",
        hit.line
    );
}

#[test]
fn the_first_cause_is_the_evidence_not_its_echo() {
    use gsched_launch::watch::first_cause;
    // NCCL 2.0: a WARN without the NCCL token, then 'unhandled system error'. A refused
    // connect is one NCCL never recovers from: the WARN itself is the first fatal line,
    // and its own evidence.
    let all = findings("nccl20-socket-warn-without-nccl-token-unhandled-system-error.txt");
    let (i, fatal) = all.iter().enumerate().find(|(_, f)| f.fatal).unwrap();
    assert_eq!(fatal.kind, FailureKind::NcclError);
    assert_eq!(
        first_cause(&all[..i], fatal),
        "*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused"
    );
    // The echo that follows it names it as its cause.
    let (j, echo) = all
        .iter()
        .enumerate()
        .find(|(_, f)| f.line.contains("unhandled system error"))
        .unwrap();
    let why = first_cause(&all[..j], echo);
    assert!(
        why.starts_with("*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused (then: NCCL failure"),
        "{why}"
    );
    // A failed connect first; "closed by remote peer" later is its echo.
    let all = findings("socket-connect-failed-then-closed-by-remote-peer-nccl-tests.txt");
    let (i, fatal) = all.iter().enumerate().find(|(_, f)| f.fatal).unwrap();
    assert!(
        fatal.line.contains("socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort"),
        "{}",
        fatal.line
    );
    let (j, echo) = all
        .iter()
        .enumerate()
        .find(|(_, f)| f.line.contains("Connection closed by remote peer"))
        .unwrap();
    assert!(j > i);
    let why = first_cause(&all[..j], echo);
    assert!(
        why.contains("socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort (then:"),
        "{why}"
    );
    // And when the job's exit is classified, the same evidence.
    let (kind, evidence) = classify_exit(Some(1), None, &all, None, false).unwrap();
    assert_eq!(kind, FailureKind::NcclError);
    assert!(
        evidence.starts_with("ubuntu:39964:40075 [0] misc/socket.cc:483"),
        "{evidence}"
    );
    // A line that is its own cause stays as it is.
    let hang = first_fatal("torch211-watchdog-timeout-15s-hang-h200.txt");
    assert_eq!(first_cause(&[], &hang), hang.line);
}
