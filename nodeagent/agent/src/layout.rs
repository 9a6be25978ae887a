//! Where the agent keeps things, and who may read them.
//!
//! - `<state-dir>` (0700, the agent's): `steps/<job>.<attempt>/`, one per node run (the
//!   directory keeps the name it always had), with the launch, the supervisor plan, the
//!   exit record and this node's private copy of the run's output (all 0600: they hold
//!   the job's environment, secrets included), and the event outbox.
//! - `<job-root>/<node>-<job>.<attempt>-<random>/` (0700, the job owner's): the run's
//!   script and its log directory (NCCL debug files, torchrun's error file), which the
//!   job's own processes must be able to write. The job root itself is 0711 and root's,
//!   so nobody else can list it or plant entries in it.

use nix::unistd::{Gid, Uid};
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates `path` (and its parents) and makes it 0700.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `path` atomically (a synced temporary file renamed over it), 0600.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Path helpers for a node run's directory under the state directory (and, with the same
/// layout, a `grun` task's: `crate::tasks`).
pub struct RunFiles(pub PathBuf);

impl RunFiles {
    pub fn plan(&self) -> PathBuf {
        self.0.join("plan.json")
    }
    pub fn exit(&self) -> PathBuf {
        self.0.join("exit.json")
    }
    pub fn pgid(&self) -> PathBuf {
        self.0.join("pgid")
    }
    pub fn launch(&self) -> PathBuf {
        self.0.join("launch.json")
    }
    /// The run's usage summary so far (kept across agent restarts).
    pub fn usage(&self) -> PathBuf {
        self.0.join("usage.json")
    }
    pub fn reported(&self) -> PathBuf {
        self.0.join("reported")
    }
    pub fn supervisor_pid(&self) -> PathBuf {
        self.0.join("supervisor.pid")
    }
    /// When this node started the run (ms on its own clock): the base of its time limit.
    pub fn local_start(&self) -> PathBuf {
        self.0.join("started_ms")
    }
    /// A `grun --pty` task's terminal size, "ROWS COLS", rewritten on each resize.
    pub fn winsize(&self) -> PathBuf {
        self.0.join("winsize")
    }
    /// This node's own copy of the run's stdout and stderr.
    pub fn capture(&self) -> PathBuf {
        self.0.join("output.log")
    }
    /// True when the run's supervisor was never started: the agent writes `launch.json`
    /// and then `plan.json` before it spawns the supervisor.
    pub fn never_started(&self) -> bool {
        if !self.launch().exists() || !self.plan().exists() {
            return true;
        }
        // Killed between writing the plan and recording the supervisor's pid: only a
        // running `gagentd supervise DIR` process tells whether the spawn happened.
        let recorded = [self.supervisor_pid(), self.pgid(), self.exit()]
            .iter()
            .any(|f| f.exists());
        !recorded && !supervisor_running(&self.0)
    }
}

/// Is some process running `... supervise DIR` for this run directory?
fn supervisor_running(dir: &Path) -> bool {
    let want = dir.as_os_str().as_encoded_bytes();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"supervise" && w[1] == want)
        })
    })
}

/// A node run's private directory, owned by the job's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn script(&self) -> PathBuf {
        self.0.join("slurm_script")
    }
    pub fn logs(&self) -> PathBuf {
        self.0.join("logs")
    }
}

/// Where node runs' private directories are made.
#[derive(Debug, Clone)]
pub struct JobRoot(pub PathBuf);

/// Why the agent's job root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JobRootError {
    #[error(
        "the job root {path} exists but is not a directory of uid {uid} (someone else made it?); remove it or pass --job-root"
    )]
    Taken { path: String, uid: u32 },
    #[error("cannot create the job root {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot set the job root's mode: {0}")]
    Mode(std::io::Error),
    #[error("cannot hand {path} to uid {uid}: {source}")]
    HandOver {
        path: String,
        uid: u32,
        source: nix::Error,
    },
}

impl JobRoot {
    /// The default: `/tmp/gsched-jobs` for a root agent, `/tmp/gsched-jobs-UID` otherwise.
    pub fn default_path() -> PathBuf {
        let uid = nix::unistd::getuid();
        if uid.is_root() {
            PathBuf::from("/tmp/gsched-jobs")
        } else {
            PathBuf::from(format!("/tmp/gsched-jobs-{uid}"))
        }
    }

    /// Makes (or checks) the job root: owned by this agent's user, 0711 (root) or 0700,
    /// writable by nobody else. One someone else made first is refused, not used.
    pub fn prepare(path: PathBuf) -> Result<JobRoot, JobRootError> {
        let uid = nix::unistd::getuid();
        let mode = if uid.is_root() { 0o711 } else { 0o700 };
        match std::fs::symlink_metadata(&path) {
            Ok(m) => {
                if !m.is_dir() || m.uid() != uid.as_raw() {
                    return Err(JobRootError::Taken {
                        path: path.display().to_string(),
                        uid: uid.as_raw(),
                    });
                }
            }
            Err(_) => DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(&path)
                .map_err(|source| JobRootError::Create {
                    path: path.display().to_string(),
                    source,
                })?,
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(JobRootError::Mode)?;
        Ok(JobRoot(path))
    }

    /// A new private directory for one node run (with `logs/` inside), owned by `owner`
    /// (uid, gid) when given, 0700.
    pub fn scratch(
        &self,
        node: &str,
        job: u64,
        attempt: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Scratch, JobRootError> {
        let name = format!(
            "{node}-{job}.{attempt}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let dir = Scratch(self.0.join(name));
        let made = DirBuilder::new()
            .mode(0o700)
            .create(&dir.0)
            .and_then(|_| DirBuilder::new().mode(0o700).create(dir.logs()));
        made.map_err(|source| JobRootError::Create {
            path: dir.0.display().to_string(),
            source,
        })?;
        if let Some((uid, gid)) = owner {
            for p in [&dir.0, &dir.logs()] {
                nix::unistd::chown(p, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(
                    |source| JobRootError::HandOver {
                        path: p.display().to_string(),
                        uid,
                        source,
                    },
                )?;
            }
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_launch_is_recognised_and_a_started_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles(dir.path().join("7.0"));
        private_dir(&files.0).unwrap();
        std::fs::write(files.0.join("launch.tmp"), b"{").unwrap();
        assert!(files.never_started(), "killed while writing launch.json");
        write_private(&files.launch(), b"{}").unwrap();
        assert!(files.never_started(), "killed before plan.json");
        write_private(&files.plan(), b"{}").unwrap();
        assert!(
            files.never_started(),
            "killed before spawning: no supervisor runs for this directory"
        );
        write_private(&files.supervisor_pid(), b"123").unwrap();
        assert!(
            !files.never_started(),
            "a recorded supervisor is re-adopted, never launched twice"
        );
    }

    #[test]
    fn private_files_and_directories_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        private_dir(&d).unwrap();
        write_private(&d.join("f"), b"secret").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&d), 0o700);
        assert_eq!(mode(&d.join("f")), 0o600);
        let root = JobRoot::prepare(dir.path().join("jobs")).unwrap();
        let s = root.scratch("n1", 7, 0, None).unwrap();
        assert_eq!(mode(&s.0), 0o700);
        assert!(s.logs().is_dir());
        let again = root.scratch("n1", 7, 0, None).unwrap();
        assert_ne!(s, again, "each step gets its own directory");
    }
}
