//! `gagentd supervise DIR`: the small root process that owns one node's step of a job.
//!
//! The agent starts it in its own session, so it outlives agent restarts. It starts every
//! task of the step in one process group; each task, between fork and exec, joins the
//! step's cgroup, takes the owner's groups and uid, enters the working directory and
//! opens its output files as that user (so they are owned by the user and created with
//! the user's rights). It records the process group in `DIR/pgid` and, when all tasks have
//! ended, the outcome in `DIR/exit.json`, which the agent (current or restarted) reports.

use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to run, written by the agent to `DIR/plan.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub argv: Vec<String>,
    /// One environment per task.
    pub tasks: Vec<Vec<(String, String)>>,
    pub workdir: String,
    pub stdout: String,
    pub stderr: Option<String>,
    /// Drop to this identity (only when the supervisor runs as root).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    #[serde(default)]
    pub groups: Vec<u32>,
    /// cgroup v2 directory the tasks join.
    pub cgroup: Option<String>,
}

/// How the step ended, written to `DIR/exit.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when no task could be started (bad directory, unknown user...).
    #[serde(default)]
    pub launch_error: Option<String>,
    #[serde(default)]
    pub tasks: Vec<(Option<i32>, Option<i32>)>,
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    if let Ok(f) = std::fs::File::open(&tmp) {
        let _ = f.sync_all();
    }
    std::fs::rename(&tmp, path)
}

fn record(dir: &Path, rec: &ExitRecord) {
    let _ = write_atomic(&dir.join("exit.json"), &serde_json::to_vec(rec).unwrap_or_default());
}

/// Everything the child needs between fork and exec, prepared before forking.
struct ChildSetup {
    cgroup_procs: Option<CString>,
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Vec<libc::gid_t>,
    workdir: CString,
    stdout: CString,
    stderr: Option<CString>,
}

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("'{s}' contains a NUL byte"))
}

impl ChildSetup {
    /// Runs in the child after fork: only async-signal-safe calls.
    fn apply(&self) -> std::io::Result<()> {
        unsafe {
            if let Some(procs) = &self.cgroup_procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                }
            }
            if let Some(gid) = self.gid {
                if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::setgid(gid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(uid) = self.uid {
                if libc::setuid(uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::chdir(self.workdir.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
            let out = libc::open(self.stdout.as_ptr(), flags, 0o644);
            if out < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let err = match &self.stderr {
                Some(e) => libc::open(e.as_ptr(), flags, 0o644),
                None => out,
            };
            if err < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::dup2(out, 1);
            libc::dup2(err, 2);
            let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if devnull >= 0 {
                libc::dup2(devnull, 0);
            }
        }
        Ok(())
    }
}

/// Runs the step described in `dir/plan.json`; never returns an error to the caller, the
/// outcome goes to `dir/exit.json`.
pub fn supervise(dir: &Path) -> i32 {
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let plan: Plan = match std::fs::read(dir.join("plan.json")).map_err(|e| e.to_string()).and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())) {
        Ok(p) => p,
        Err(e) => {
            record(dir, &ExitRecord { code: None, signal: None, launch_error: Some(format!("cannot read the step plan: {e}")), tasks: vec![] });
            return 1;
        }
    };
    match run(dir, &plan) {
        Ok(rec) => {
            record(dir, &rec);
            0
        }
        Err(e) => {
            record(dir, &ExitRecord { code: None, signal: None, launch_error: Some(e), tasks: vec![] });
            1
        }
    }
}

fn run(dir: &Path, plan: &Plan) -> Result<ExitRecord, String> {
    let root = crate::identity::is_root();
    let setup = ChildSetup {
        cgroup_procs: plan.cgroup.as_ref().map(|c| cstr(&format!("{c}/cgroup.procs"))).transpose()?,
        uid: if root { plan.uid } else { None },
        gid: if root { plan.gid } else { None },
        groups: plan.groups.clone(),
        workdir: cstr(&plan.workdir)?,
        stdout: cstr(&plan.stdout)?,
        stderr: plan.stderr.as_deref().map(cstr).transpose()?,
    };
    let setup = std::sync::Arc::new(setup);
    let mut children = Vec::new();
    let mut pgid: Option<i32> = None;
    for env in &plan.tasks {
        let mut cmd = Command::new(&plan.argv[0]);
        cmd.args(&plan.argv[1..]).env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        cmd.process_group(pgid.unwrap_or(0));
        let s = setup.clone();
        unsafe {
            cmd.pre_exec(move || s.apply());
        }
        match cmd.spawn() {
            Ok(child) => {
                pgid.get_or_insert(child.id() as i32);
                children.push(child);
            }
            Err(e) => {
                if let Some(g) = pgid {
                    unsafe {
                        libc::kill(-g, libc::SIGKILL);
                    }
                }
                for mut c in children {
                    let _ = c.wait();
                }
                return Err(describe_spawn_error(&e, plan));
            }
        }
    }
    if let Some(g) = pgid {
        let _ = write_atomic(&dir.join("pgid"), g.to_string().as_bytes());
    }
    let mut tasks = Vec::new();
    for mut c in children {
        let status = c.wait().map_err(|e| format!("waiting for a task failed: {e}"))?;
        tasks.push((status.code(), status.signal()));
    }
    let failing = tasks.iter().find(|(c, s)| s.is_some() || c.is_some_and(|c| c != 0)).copied().or(tasks.first().copied()).unwrap_or((Some(0), None));
    Ok(ExitRecord { code: failing.0, signal: failing.1, launch_error: None, tasks })
}

fn describe_spawn_error(e: &std::io::Error, plan: &Plan) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) if !Path::new(&plan.workdir).is_dir() => format!("working directory {} does not exist on this node", plan.workdir),
        Some(libc::EACCES) => format!("permission denied starting {} in {} (check the working directory and output file permissions for the job's user)", plan.argv[0], plan.workdir),
        Some(libc::ENOENT) => format!("cannot start {}: no such file (or the output directory does not exist)", plan.argv[0]),
        _ => format!("cannot start {}: {e}", plan.argv[0]),
    }
}

/// Path helpers for a step directory.
pub struct StepFiles(pub PathBuf);

impl StepFiles {
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
    pub fn logs(&self) -> PathBuf {
        self.0.join("logs")
    }
    pub fn script(&self) -> PathBuf {
        self.0.join("script")
    }
    pub fn reported(&self) -> PathBuf {
        self.0.join("reported")
    }
}
