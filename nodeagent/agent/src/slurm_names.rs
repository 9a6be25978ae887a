//! Slurm's command names inside jobs: a login shell (`#!/bin/bash -l`) reads
//! `/etc/profile`, which resets PATH, so the directory of Slurm-named links the agent
//! puts first (`--slurm-names`) would be lost and, where Slurm's own clients are
//! installed, their `srun` would run. A profile snippet puts it back first inside gsched
//! jobs; where it cannot be installed and Slurm's clients would be found, that is said.

use std::path::{Path, PathBuf};

/// The snippet's name in the profile directory.
pub const SNIPPET: &str = "gsched-slurm-names.sh";

/// The PATH a login shell starts from on Debian-like systems (what `/etc/profile` sets).
pub const LOGIN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The Slurm names a job's script calls.
const NAMES: [&str; 8] = [
    "srun", "sbatch", "salloc", "scontrol", "squeue", "scancel", "sinfo", "sacct",
];

/// The snippet: the same for every agent of a host (each job names its own agent's links
/// in `GSCHED_SLURM_NAMES`), so agents of several clusters on one host never rewrite one
/// another's.
pub fn snippet() -> &'static str {
    "# Installed by gagentd --slurm-names: inside a gsched job, Slurm's command names\n\
     # are gsched's, in login shells too (which /etc/profile gives a fresh PATH).\n\
     if [ -n \"${GSCHED_JOB_ID:-}\" ] && [ -n \"${GSCHED_SLURM_NAMES:-}\" ]; then\n\
     \x20   PATH=\"$GSCHED_SLURM_NAMES:$PATH\"\n\
     \x20   export PATH\n\
     fi\n"
}

/// Writes the snippet into `profile_d` unless it is there already; returns its path.
pub fn install(profile_d: &Path) -> std::io::Result<PathBuf> {
    let path = profile_d.join(SNIPPET);
    let text = snippet();
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
        // A name of this process's own: agents installing at once never share a file.
        let tmp = profile_d.join(format!(".{SNIPPET}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

/// Slurm's own clients a login shell would find on `search_path` (programs of those
/// names that are not links into `links`).
pub fn shadowing(links: &Path, search_path: &str) -> Vec<PathBuf> {
    let ours = |p: &Path| {
        std::fs::canonicalize(p)
            .ok()
            .zip(std::fs::canonicalize(links).ok())
            .is_some_and(|(target, dir)| target.starts_with(dir))
            || std::fs::read_link(p).is_ok_and(|t| t.starts_with(links))
    };
    NAMES
        .iter()
        .filter_map(|name| {
            search_path
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
        .filter(|p| !ours(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_shell_in_a_job_finds_the_links_first() {
        let dir = tempfile::tempdir().unwrap();
        let links = dir.path().join("slurm links");
        let profile_d = dir.path().join("profile.d");
        std::fs::create_dir_all(&links).unwrap();
        std::fs::create_dir_all(&profile_d).unwrap();
        let path = install(&profile_d).unwrap();
        // As /etc/profile does: a fresh PATH, then every snippet.
        let run = |job: Option<&str>| {
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.arg("-c")
                .arg(format!(
                    "PATH={LOGIN_PATH}; . '{}'; echo \"$PATH\"",
                    path.display()
                ))
                .env_clear();
            if let Some(j) = job {
                cmd.env("GSCHED_JOB_ID", j)
                    .env("GSCHED_SLURM_NAMES", &links);
            }
            String::from_utf8(cmd.output().unwrap().stdout).unwrap()
        };
        assert!(run(Some("42")).starts_with(links.to_str().unwrap()));
        assert_eq!(run(None).trim(), LOGIN_PATH, "outside jobs nothing changes");
        // Installing again leaves it as it is.
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        install(&profile_d).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
    }

    #[test]
    fn slurms_own_clients_are_named_and_the_links_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let links = dir.path().join("links");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&links).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(links.join("grun"), "").unwrap();
        std::os::unix::fs::symlink(links.join("grun"), bin.join("srun")).unwrap();
        std::fs::write(bin.join("sbatch"), "slurm's").unwrap();
        let found = shadowing(&links, bin.to_str().unwrap());
        assert_eq!(found, [bin.join("sbatch")]);
    }
}
