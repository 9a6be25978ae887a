//! `gsub` as a user runs it, without a cluster: `--dry-run`, `--usage` and the refusals
//! happen before any controller is asked, so the real binary is tested here alone.

use std::path::Path;
use std::process::{Command, Output};

fn gsub(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gsub"))
        .args(args)
        .current_dir(dir)
        .env("GSCHED_CONTROLLERS", "127.0.0.1:1")
        .envs(env.iter().copied())
        .output()
        .expect("gsub runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn quiet_keeps_gsub_to_errors() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--dry-run", "-o", "logs/%j.out", "--wrap", "true"];
    let loud = gsub(dir.path(), &args, &[]);
    assert!(loud.status.success(), "{}", text(&loud.stderr));
    assert!(
        text(&loud.stderr).contains("does not exist here"),
        "{}",
        text(&loud.stderr)
    );
    let quiet = gsub(dir.path(), &[&["-Q"][..], &args].concat(), &[]);
    assert!(quiet.status.success());
    assert_eq!(text(&quiet.stderr), "", "--quiet prints no warning");
    let refused = gsub(
        dir.path(),
        &["-Q", "--dry-run", "--bb=x", "--wrap", "true"],
        &[],
    );
    assert!(!refused.status.success(), "errors are still errors");
    assert!(text(&refused.stderr).contains("burst buffers"));
}

#[test]
fn a_dry_run_with_a_directive_that_is_not_an_option_submits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.sh"),
        "#!/bin/bash\n#SBATCH \u{2013}gres=gpu:8\n#SBATCH -N 1\nhostname\n",
    )
    .unwrap();
    let out = gsub(dir.path(), &["--dry-run", "job.sh"], &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("invalid directive found in batch script") && err.contains('\u{2013}'),
        "{err}"
    );
    assert_eq!(text(&out.stdout), "", "nothing resolved, nothing submitted");
}

#[test]
fn the_last_directive_with_an_optional_value_leaves_the_script_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.sh"),
        "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --exclusive\nhostname\n",
    )
    .unwrap();
    let out = gsub(dir.path(), &["--dry-run", "--json", "job.sh", "arg1"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["exclusive"], true);
    assert_eq!(doc["job_name"], "job.sh");
}

#[test]
fn sbatch_variables_sit_between_the_script_and_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.sh"),
        "#!/bin/bash\n#SBATCH -p fromscript\n#SBATCH -J fromscript\nhostname\n",
    )
    .unwrap();
    let env = [
        ("SBATCH_PARTITION", "fromenv"),
        ("SBATCH_JOB_NAME", "fromenv"),
    ];
    let out = gsub(
        dir.path(),
        &["--dry-run", "--json", "-J", "cli", "job.sh"],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["partition"], "fromenv");
    assert_eq!(doc["job_name"], "cli");
}

#[test]
fn usage_prints_and_submits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = gsub(dir.path(), &["--usage"], &[]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("Usage: gsub"),
        "{}",
        text(&out.stdout)
    );
}
