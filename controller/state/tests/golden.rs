//! Log compatibility: every command variant as the format version that introduced it
//! wrote it (`golden/v1.jsonl` to `golden/v12.jsonl`) still decodes and encodes back to
//! the same bytes, so a replica running this build replays an old log. The commands no
//! build proposes any more (`cancel_job`, `requeue_job`, `hold_job`, `update_job`) stay
//! here: old logs hold them.

use gsched_state::{Command, Envelope};
use std::collections::BTreeSet;

const V1: &str = include_str!("golden/v1.jsonl");
const V2: &str = include_str!("golden/v2.jsonl");
const V3: &str = include_str!("golden/v3.jsonl");
const V4: &str = include_str!("golden/v4.jsonl");
const V5: &str = include_str!("golden/v5.jsonl");
const V6: &str = include_str!("golden/v6.jsonl");
const V7: &str = include_str!("golden/v7.jsonl");
const V8: &str = include_str!("golden/v8.jsonl");
const V9: &str = include_str!("golden/v9.jsonl");
const V10: &str = include_str!("golden/v10.jsonl");
const V11: &str = include_str!("golden/v11.jsonl");
const V12: &str = include_str!("golden/v12.jsonl");

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
        .chain(V7.lines())
        .chain(V8.lines())
        .chain(V9.lines())
        .chain(V10.lines())
        .chain(V11.lines())
        .chain(V12.lines())
        .enumerate()
    {
        let env =
            Envelope::decode(line.as_bytes()).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
        assert_eq!(listed(&env.cmd), env.cmd.name(), "line {}", n + 1);
        seen.insert(env.cmd.name());
        assert_eq!(
            String::from_utf8(env.encode()).unwrap(),
            line,
            "line {} changed encoding",
            n + 1
        );
    }
    for name in ALL {
        assert!(seen.contains(name), "no golden entry for {name}");
    }
    assert_eq!(seen.len(), ALL.len());
}

/// Every command variant with its log name: the match has no wildcard, so a variant added
/// to `Command` does not compile until it is listed here, and the test above then asks
/// for its golden line.
macro_rules! variants {
    ($($pat:pat => $name:literal,)*) => {
        const ALL: &[&str] = &[$($name),*];

        fn listed(c: &Command) -> &'static str {
            match c {
                $($pat => $name,)*
            }
        }
    };
}

variants! {
    Command::SubmitJob(_) => "submit_job",
    Command::CancelJob(_) => "cancel_job",
    Command::StartJobs(_) => "start_jobs",
    Command::SetPendingReasons(_) => "set_pending_reasons",
    Command::RunStarted(_) => "step_started",
    Command::RunExited(_) => "step_exited",
    Command::RunFailed(_) => "step_failed",
    Command::RegisterNode(_) => "register_node",
    Command::NodeLost(_) => "node_lost",
    Command::DrainNode(_) => "drain_node",
    Command::ResumeNode(_) => "resume_node",
    Command::HealthEvents(_) => "health_events",
    Command::RequeueJob(_) => "requeue_job",
    Command::HoldJob(_) => "hold_job",
    Command::Preempt(_) => "preempt",
    Command::SetConfig(_) => "set_config",
    Command::TimeoutJob(_) => "timeout_job",
    Command::SetControllerAddress(_) => "set_controller_address",
    Command::Noop => "noop",
    Command::CancelUnsatisfiable(_) => "cancel_unsatisfiable",
    Command::NodeResponding(_) => "node_responding",
    Command::ActOnJobs(_) => "act_on_jobs",
    Command::UpdateJob(_) => "update_job",
    Command::StepStarted(_) => "grun_step_started",
    Command::StepEnded(_) => "grun_step_ended",
    Command::RevokeTokens(_) => "revoke_tokens",
    Command::JobWarning(_) => "job_warning",
    Command::RecordUsage(_) => "record_usage",
    Command::IdleGpus(_) => "idle_gpus",
    Command::CreateReservation(_) => "create_reservation",
    Command::UpdateReservation(_) => "update_reservation",
    Command::DeleteReservation(_) => "delete_reservation",
    Command::EditAssociations(_) => "edit_associations",
    Command::EndPastDeadline(_) => "end_past_deadline",
    Command::NotifyClaim(_) => "notify_claim",
    Command::NotifyDone(_) => "notify_done",
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
