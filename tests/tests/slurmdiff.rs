//! The differential harness as a test: every script of tests/slurmdiff/corpus on real
//! Slurm and on gsched side by side (tests/slurmdiff/diff.py); fails on any row that is
//! neither identical nor a documented design difference. Needs Slurm (slurm-wlm, munge)
//! and root; `GSCHED_REQUIRE_SLURM=1` (CI) makes their absence a failure.

use gsched_tests::{bin, free_port, workspace};
use std::path::Path;
use std::process::Command;

fn slurm_available() -> bool {
    let ok = Path::new("/usr/sbin/slurmctld").exists()
        && Path::new("/usr/sbin/slurmd").exists()
        && Path::new("/usr/sbin/munged").exists()
        && nix::unistd::geteuid().is_root();
    if !ok {
        assert!(
            std::env::var_os("GSCHED_REQUIRE_SLURM").is_none(),
            "GSCHED_REQUIRE_SLURM is set but Slurm (slurm-wlm, munge) is not installed or this is not root"
        );
        eprintln!(
            "skipping: real Slurm is not installed here (apt-get install slurm-wlm munge) or not root"
        );
    }
    ok
}

/// A base port with the three the Slurm side takes (base, base+4, base+5) free.
fn slurm_ports() -> u16 {
    loop {
        let base = free_port();
        if base < 60_000
            && [4, 5]
                .iter()
                .all(|d| std::net::TcpListener::bind(("127.0.0.1", base + d)).is_ok())
        {
            return base;
        }
    }
}

#[test]
fn t10_every_corpus_script_runs_on_gsched_as_on_slurm() {
    if !slurm_available() {
        return;
    }
    let bins = bin("gctld").parent().expect("bin dir").to_path_buf();
    let dir = tempfile::tempdir().expect("tempdir");
    // munged runs as its own user and must reach its socket below this directory.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let table = dir.path().join("table.md");
    let out = Command::new(workspace().join("tests/slurmdiff/run.sh"))
        .arg("--table")
        .arg(&table)
        .env("GSCHED_BIN", &bins)
        .env("SLURMDIFF_DIR", dir.path().join("runs"))
        .env("SLURMDIFF_PORT", slurm_ports().to_string())
        .env("SLURMDIFF_GSCHED_PORT", free_port().to_string())
        .output()
        .expect("run the harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(' '))
        .count();
    let corpus = std::fs::read_dir(workspace().join("tests/slurmdiff/corpus"))
        .expect("corpus")
        .count();
    assert_eq!(rows, corpus, "one row per corpus script");
    assert!(corpus >= 40, "the corpus has {corpus} scripts");
    assert!(
        out.status.success(),
        "scripts behave differently on gsched and on Slurm (rows marked bug above)"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("bug")),
        "{stdout}"
    );
}
