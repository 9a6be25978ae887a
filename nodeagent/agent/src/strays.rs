//! Processes a run leaves behind (a `setsid` child, a daemon it started) are ended with
//! it: its cgroup is killed where there is one, and every process that still carries the
//! run's own `GSCHED_LOG_DIR` in its environment is killed, which also covers nodes
//! without cgroup v2. A process that cleared its environment and escaped its session is
//! beyond this fallback; only the cgroup holds it.

use std::path::Path;

/// The environment entry that marks a run's processes.
pub fn marker(log_dir: &Path) -> Vec<u8> {
    let mut m = b"GSCHED_LOG_DIR=".to_vec();
    m.extend_from_slice(log_dir.as_os_str().as_encoded_bytes());
    m
}

/// Does a `/proc/PID/environ` (NUL-separated entries) hold exactly `marker`?
pub fn carries(environ: &[u8], marker: &[u8]) -> bool {
    environ.split(|&b| b == 0).any(|entry| entry == marker)
}

/// The live processes carrying `marker`, but never this process.
fn carriers(marker: &[u8]) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| carries(&env, marker))
        })
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim().to_string())
        })
        .collect()
}

/// Kills the run's cgroup (if any) and every process still carrying its marker, a few
/// rounds so that children forked meanwhile go too; returns what was killed.
pub fn end(cgroup: Option<&Path>, log_dir: Option<&Path>) -> Vec<(i32, String)> {
    if let Some(cg) = cgroup {
        crate::isolation::Cgroups::kill(cg);
    }
    let Some(log_dir) = log_dir else {
        return Vec::new();
    };
    let marker = marker(log_dir);
    let mut killed = Vec::new();
    for _ in 0..3 {
        let found = carriers(&marker);
        if found.is_empty() {
            break;
        }
        for (pid, comm) in found {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            if !killed.iter().any(|(p, _)| *p == pid) {
                killed.push((pid, comm));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_entry_marks_a_run() {
        let m = marker(Path::new("/var/lib/gsched/jobs/n1/7.0/logs"));
        let env = b"PATH=/bin\0GSCHED_LOG_DIR=/var/lib/gsched/jobs/n1/7.0/logs\0HOME=/root\0";
        assert!(carries(env, &m));
        let other = b"GSCHED_LOG_DIR=/var/lib/gsched/jobs/n1/7.0/logs2\0";
        assert!(!carries(other, &m));
        let prefix = b"XGSCHED_LOG_DIR=/var/lib/gsched/jobs/n1/7.0/logs\0";
        assert!(!carries(prefix, &m));
        assert!(!carries(b"", &m));
    }

    #[test]
    fn a_process_started_with_the_marker_is_ended() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .env("GSCHED_LOG_DIR", &logs)
            .spawn()
            .unwrap();
        let killed = end(None, Some(&logs));
        assert_eq!(killed.len(), 1, "{killed:?}");
        assert_eq!(killed[0].0, child.id() as i32);
        assert_eq!(killed[0].1, "sleep");
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(end(None, Some(&logs)).is_empty());
    }
}
