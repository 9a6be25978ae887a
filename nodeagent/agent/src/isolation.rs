//! Per-step cgroups (v2): cpuset on the job's CPUs and their NUMA memory, memory limit,
//! pids limit; `cgroup.kill` to stop everything. Best effort: what could not be applied
//! is logged, never silently assumed. GPU device privacy is in `devices` and
//! `devfilter`.

use gsched_launch::plan::CgroupLimits;
use std::path::{Path, PathBuf};

/// Where step cgroups are created, if cgroup v2 with the needed controllers is available.
#[derive(Debug, Clone)]
pub struct Cgroups {
    pub base: PathBuf,
}

/// An agent's name as one cgroup directory name: letters, digits, `.`, `_` and `-` kept,
/// anything else (a `/` above all) as `_`.
pub fn cgroup_name(agent: &str) -> String {
    let name: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match name.as_str() {
        "" | "." | ".." => format!("agent{}", name.len()),
        _ => name,
    }
}

/// Why the agent cannot put steps into cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 hierarchy found (cgroup.controllers missing)")]
    NoHierarchy,
    #[error("cgroups need the agent to run as root")]
    NotRoot,
    #[error("cannot create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
}

impl Cgroups {
    /// Finds a usable cgroup v2 hierarchy (`root`, or the usual mount points) and prepares
    /// `gsched/AGENT/` under it (agents splitting one machine get one each, so their
    /// steps' cgroups never share a name). Returns `None` (and says why) where there is
    /// none.
    pub fn detect(root: Option<&Path>, agent: &str) -> Result<Cgroups, CgroupError> {
        let candidates: Vec<PathBuf> = match root {
            Some(r) => vec![r.to_path_buf()],
            None => vec![
                PathBuf::from("/sys/fs/cgroup"),
                PathBuf::from("/sys/fs/cgroup/unified"),
            ],
        };
        let root = candidates
            .into_iter()
            .find(|p| p.join("cgroup.controllers").exists())
            .ok_or(CgroupError::NoHierarchy)?;
        if !crate::identity::is_root() {
            return Err(CgroupError::NotRoot);
        }
        let available =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        let base = root.join("gsched").join(cgroup_name(agent));
        std::fs::create_dir_all(&base).map_err(|source| CgroupError::Create {
            path: base.display().to_string(),
            source,
        })?;
        let wanted: Vec<&str> = ["cpuset", "memory", "pids"]
            .into_iter()
            .filter(|c| available.split_whitespace().any(|a| a == *c))
            .collect();
        for dir in [&root, &root.join("gsched"), &base] {
            for c in &wanted {
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
            }
        }
        Ok(Cgroups { base })
    }

    /// Creates the step's cgroup and applies its limits; returns the directory and the
    /// limits that could not be set.
    pub fn create(&self, limits: &CgroupLimits) -> (PathBuf, Vec<String>) {
        let dir = self.base.join(&limits.name);
        let mut missed = Vec::new();
        if let Err(e) = std::fs::create_dir_all(&dir) {
            missed.push(format!("create {}: {e}", dir.display()));
            return (dir, missed);
        }
        let mut set = |file: &str, value: String| {
            if value.is_empty() {
                return;
            }
            if let Err(e) = std::fs::write(dir.join(file), &value) {
                missed.push(format!("{file}={value}: {e}"));
            }
        };
        set("cpuset.cpus", limits.cpus.clone());
        set("cpuset.mems", limits.mems.clone());
        if let Some(b) = limits.mem_bytes {
            set("memory.max", b.to_string());
            set("memory.swap.max", "0".into());
        }
        set("pids.max", limits.pids.to_string());
        (dir, missed)
    }

    /// Number of OOM kills in the step's cgroup.
    pub fn oom_kills(dir: &Path) -> u64 {
        std::fs::read_to_string(dir.join("memory.events"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    pub fn kill(dir: &Path) {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }

    pub fn remove(dir: &Path) {
        let _ = std::fs::remove_dir(dir);
    }

    /// Removes a killed cgroup once its processes are gone (at most half a second).
    pub fn remove_when_empty(dir: &Path) {
        for _ in 0..50 {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Self::remove(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_of_one_machine_get_cgroup_directories_of_their_own() {
        assert_eq!(cgroup_name("gpu-a"), "gpu-a");
        assert_ne!(cgroup_name("gpu-a"), cgroup_name("gpu-b"));
        assert_eq!(cgroup_name("../x/y"), ".._x_y");
        assert_eq!(cgroup_name(".."), "agent2");
        assert_eq!(cgroup_name(""), "agent0");
    }
}
