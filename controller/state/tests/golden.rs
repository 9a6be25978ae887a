//! Log compatibility: every command variant as the format version that introduced it
//! wrote it (`golden/v1.jsonl` to `golden/v6.jsonl`) still decodes and encodes back to the
//! same bytes, so a replica running this build replays an old log.

use gsched_state::{Command, Envelope};
use std::collections::BTreeSet;

const V1: &str = include_str!("golden/v1.jsonl");
const V2: &str = include_str!("golden/v2.jsonl");
const V3: &str = include_str!("golden/v3.jsonl");
const V4: &str = include_str!("golden/v4.jsonl");
const V5: &str = include_str!("golden/v5.jsonl");
const V6: &str = include_str!("golden/v6.jsonl");

#[test]
fn every_version_decodes_and_reencodes_byte_for_byte() {
    let mut seen = BTreeSet::new();
    for (n, line) in V1
        .lines()
        .chain(V2.lines())
        .chain(V3.lines())
        .chain(V4.lines())
        .chain(V5.lines())
        .chain(V6.lines())
        .enumerate()
    {
        let env =
            Envelope::decode(line.as_bytes()).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
        seen.insert(env.cmd.name());
        assert_eq!(
            String::from_utf8(env.encode()).unwrap(),
            line,
            "line {} changed encoding",
            n + 1
        );
    }
    let all = [
        "submit_job",
        "cancel_job",
        "start_jobs",
        "set_pending_reasons",
        "step_started",
        "step_exited",
        "step_failed",
        "register_node",
        "node_lost",
        "drain_node",
        "resume_node",
        "health_events",
        "requeue_job",
        "hold_job",
        "preempt",
        "set_config",
        "timeout_job",
        "set_controller_address",
        "noop",
        "cancel_unsatisfiable",
        "node_responding",
        "act_on_jobs",
        "update_job",
        "grun_step_started",
        "grun_step_ended",
        "revoke_tokens",
        "job_warning",
    ];
    for name in all {
        assert!(seen.contains(name), "no golden entry for {name}");
    }
    assert_eq!(seen.len(), all.len());
    // Every variant this build knows is in the list above (a new one needs a golden line).
    let noop = Command::Noop;
    assert!(all.contains(&noop.name()));
}

#[test]
fn an_entry_from_a_newer_build_is_refused_with_a_clear_error() {
    let line = V1
        .lines()
        .last()
        .unwrap()
        .replacen("\"v\":1", "\"v\":99", 1);
    let err = Envelope::decode(line.as_bytes()).unwrap_err().to_string();
    assert!(err.contains("upgrade gctld"), "{err}");
    assert!(Envelope::decode(b"not json").is_err());
}
