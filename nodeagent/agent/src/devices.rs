//! GPU device nodes kept private: every managed GPU's device node is root's, mode 0600,
//! while idle, and its job owner's (0600) while allocated; when the step ends it goes back
//! to root and every process still holding it open is killed, so nothing opened during one
//! allocation reaches into the next. On cgroup v2 the step's BPF device filter
//! (`devfilter`) adds a kernel-enforced allow list on top.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The managed GPUs' device nodes (those discovery knows a path for).
#[derive(Debug, Clone, Default)]
pub struct GpuDevices {
    pub paths: Vec<String>,
}

fn set_owner(path: &str, uid: u32, gid: u32) -> Result<(), String> {
    nix::unistd::chown(
        Path::new(path),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(|e| format!("{path}: chown: {e}"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{path}: chmod: {e}"))
}

impl GpuDevices {
    pub fn from_topology(t: &gsched_types::Topology) -> GpuDevices {
        GpuDevices {
            paths: t
                .gpus
                .iter()
                .filter_map(|g| g.device_path.clone())
                .collect(),
        }
    }

    /// Makes every managed device node that no running step holds root's, 0600 (at
    /// start-up, after re-adopting steps). Returns what could not be done.
    pub fn lock_idle(&self, in_use: &BTreeSet<String>) -> Vec<String> {
        self.paths
            .iter()
            .filter(|p| !in_use.contains(*p))
            .filter_map(|p| set_owner(p, 0, 0).err())
            .collect()
    }
}

/// Whether the NVIDIA driver re-creates its device nodes with its own mode whenever CUDA
/// starts (`NVreg_ModifyDeviceFiles=1`, the default), which undoes device-node ownership;
/// `None` without the driver.
pub fn driver_resets_device_modes(params: &str) -> Option<bool> {
    params.lines().find_map(|l| {
        let v = l.strip_prefix("ModifyDeviceFiles:")?.trim();
        Some(v != "0")
    })
}

/// Hands a step's device nodes to its owner. Returns what could not be done.
pub fn claim(paths: &[String], uid: u32, gid: u32) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| set_owner(p, uid, gid).err())
        .collect()
}

/// Gives a step's device nodes back to root (0600) and kills every non-root process that
/// still has one open. Returns the processes killed.
pub fn release(paths: &[String]) -> Vec<(i32, String)> {
    for p in paths {
        if let Err(e) = set_owner(p, 0, 0) {
            tracing::warn!("cannot give {e} back to root");
        }
    }
    let mut killed = Vec::new();
    for p in paths {
        for (pid, uid) in holders(Path::new(p)) {
            if uid != 0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed.push((pid, p.clone()));
            }
        }
    }
    killed
}

/// Processes (pid, uid) with `path` open, found through `/proc/*/fd`.
pub fn holders(path: &Path) -> Vec<(i32, u32)> {
    let Ok(target) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
        });
        if holds && let Ok(m) = std::fs::metadata(p.path()) {
            out.push((pid, m.uid()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_device_file_setting_is_read() {
        let params = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileMode: 438\n";
        assert_eq!(driver_resets_device_modes(params), Some(true));
        assert_eq!(
            driver_resets_device_modes("ModifyDeviceFiles: 0\n"),
            Some(false)
        );
        assert_eq!(driver_resets_device_modes(""), None);
    }

    #[test]
    fn a_process_holding_a_device_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("nvidia0");
        std::fs::write(&dev, b"").unwrap();
        let _held = std::fs::File::open(&dev).unwrap();
        let me = std::process::id() as i32;
        assert!(holders(&dev).iter().any(|(pid, _)| *pid == me));
        assert!(holders(&dir.path().join("missing")).is_empty());
    }
}
