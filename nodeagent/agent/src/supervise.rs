//! `gagentd supervise DIR`: the small root process that owns one node's step of a job.
//!
//! The agent starts it in its own session, so it outlives agent restarts. It opens the
//! job's output files with the owner's file-system identity (so they are owned by the user
//! and created with the user's rights) and starts every task of the step in one process
//! group; each task, between fork and exec, joins the step's cgroup, takes the owner's
//! groups and uid and enters the working directory. The tasks write into pipes that the
//! supervisor copies both to the user's files and to `DIR/output.log`, this node's private
//! copy, which the agent scans for failure evidence: on a shared file system every node of
//! a job appends to the same output file, and another node's lines must not be blamed on
//! this one. It records the process group in `DIR/pgid` and, when all tasks have ended, the
//! outcome in `DIR/exit.json`, which the agent (current or restarted) reports.

use gsched_launch::plan::Plan;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The private copy of the step's output is cut back to empty when it grows past this.
const CAPTURE_LIMIT: u64 = 32 << 20;

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
    let _ = write_atomic(
        &dir.join("exit.json"),
        &serde_json::to_vec(rec).unwrap_or_default(),
    );
}

/// Everything the child needs between fork and exec, prepared before forking.
struct ChildSetup {
    cgroup_procs: Option<CString>,
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Vec<libc::gid_t>,
    workdir: CString,
    stdout: RawFd,
    stderr: RawFd,
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
            if let Some(uid) = self.uid
                && libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::chdir(self.workdir.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::dup2(self.stdout, 1);
            libc::dup2(self.stderr, 2);
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
    let plan: Plan = match std::fs::read(dir.join("plan.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            record(
                dir,
                &ExitRecord {
                    code: None,
                    signal: None,
                    launch_error: Some(format!("cannot read the step plan: {e}")),
                    tasks: vec![],
                },
            );
            return 1;
        }
    };
    match run(dir, &plan) {
        Ok(rec) => {
            record(dir, &rec);
            0
        }
        Err(e) => {
            record(
                dir,
                &ExitRecord {
                    code: None,
                    signal: None,
                    launch_error: Some(e),
                    tasks: vec![],
                },
            );
            1
        }
    }
}

fn run(dir: &Path, plan: &Plan) -> Result<ExitRecord, String> {
    let root = crate::identity::is_root();
    let owner = if root { plan.uid.zip(plan.gid) } else { None };
    let user_out = open_as(&plan.stdout, owner, &plan.groups)?;
    let user_err = plan
        .stderr
        .as_deref()
        .map(|e| open_as(e, owner, &plan.groups))
        .transpose()?;
    let capture = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(StepFiles(dir.to_path_buf()).capture())
        .map_err(|e| {
            format!(
                "cannot create the step's output copy in {}: {e}",
                dir.display()
            )
        })?;
    let (out_r, out_w) = pipe()?;
    let err_pipe = if user_err.is_some() {
        Some(pipe()?)
    } else {
        None
    };
    let setup = ChildSetup {
        cgroup_procs: plan
            .cgroup
            .as_ref()
            .map(|c| cstr(&format!("{c}/cgroup.procs")))
            .transpose()?,
        uid: owner.map(|o| o.0),
        gid: owner.map(|o| o.1),
        groups: plan.groups.clone(),
        workdir: cstr(&plan.workdir)?,
        stdout: out_w.as_raw_fd(),
        stderr: err_pipe
            .as_ref()
            .map_or(out_w.as_raw_fd(), |(_, w)| w.as_raw_fd()),
    };
    let setup = std::sync::Arc::new(setup);
    let mut children = Vec::new();
    let mut pgid: Option<i32> = None;
    let mut spawn_error = None;
    for env in &plan.tasks {
        let mut cmd = Command::new(&plan.argv[0]);
        cmd.args(&plan.argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
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
                spawn_error = Some(describe_spawn_error(&e, plan));
                break;
            }
        }
    }
    // Only the tasks hold the write ends now: the copiers see end-of-file once they exit.
    drop(setup);
    drop(out_w);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut copiers = 0;
    let capture = std::sync::Arc::new(std::sync::Mutex::new(capture));
    for (read, user) in std::iter::once((out_r, user_out)).chain(
        err_pipe
            .map(|(r, w)| {
                drop(w);
                r
            })
            .zip(user_err),
    ) {
        let (capture, done) = (capture.clone(), done_tx.clone());
        std::thread::spawn(move || {
            copy_output(File::from(read), user, &capture);
            let _ = done.send(());
        });
        copiers += 1;
    }
    if let Some(e) = spawn_error {
        if let Some(g) = pgid {
            unsafe {
                libc::kill(-g, libc::SIGKILL);
            }
        }
        for mut c in children {
            let _ = c.wait();
        }
        return Err(e);
    }
    if let Some(g) = pgid {
        let _ = write_atomic(&dir.join("pgid"), g.to_string().as_bytes());
    }
    let mut tasks = Vec::new();
    for mut c in children {
        let status = c
            .wait()
            .map_err(|e| format!("waiting for a task failed: {e}"))?;
        tasks.push((status.code(), status.signal()));
    }
    // A background process the job left behind may keep a pipe open: give the copiers a
    // moment to drain what the tasks wrote, then report without waiting for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    for _ in 0..copiers {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .is_err()
        {
            break;
        }
    }
    let failing = tasks
        .iter()
        .find(|(c, s)| s.is_some() || c.is_some_and(|c| c != 0))
        .copied()
        .or(tasks.first().copied())
        .unwrap_or((Some(0), None));
    Ok(ExitRecord {
        code: failing.0,
        signal: failing.1,
        launch_error: None,
        tasks,
    })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot create a pipe for the step's output: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Opens (creating, appending) an output file with the job owner's file-system identity,
/// so permissions are checked, and the file is created, as that user.
fn open_as(path: &str, owner: Option<(u32, u32)>, groups: &[u32]) -> Result<File, String> {
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    };
    let result = match owner {
        None => open(),
        Some((uid, gid)) => unsafe {
            // The supervisor is single-threaded here; fsuid/fsgid and the group list are
            // put back before anything else runs.
            let mut saved = vec![0 as libc::gid_t; 256];
            let n = libc::getgroups(saved.len() as i32, saved.as_mut_ptr());
            saved.truncate(n.max(0) as usize);
            libc::setgroups(groups.len(), groups.as_ptr());
            libc::setfsgid(gid);
            libc::setfsuid(uid);
            let r = open();
            libc::setfsuid(0);
            libc::setfsgid(0);
            libc::setgroups(saved.len(), saved.as_ptr());
            r
        },
    };
    result.map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) => format!("permission denied opening the output file {path} as the job's user (check the directory's permissions)"),
        Some(libc::ENOENT) => format!("cannot open the output file {path}: its directory does not exist on this node"),
        _ => format!("cannot open the output file {path}: {e}"),
    })
}

/// Copies a task stream to the user's file and to the private copy, until end-of-file.
fn copy_output(mut from: File, mut user: File, capture: &std::sync::Mutex<File>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let _ = user.write_all(&buf[..n]);
        if let Ok(mut c) = capture.lock() {
            if c.stream_position().unwrap_or(0) > CAPTURE_LIMIT {
                let _ = c.set_len(0);
            }
            let _ = c.write_all(&buf[..n]);
        }
    }
}

fn describe_spawn_error(e: &std::io::Error, plan: &Plan) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) if !Path::new(&plan.workdir).is_dir() => format!(
            "working directory {} does not exist on this node",
            plan.workdir
        ),
        Some(libc::EACCES) => format!(
            "permission denied starting {} in {} (check the working directory and output file permissions for the job's user)",
            plan.argv[0], plan.workdir
        ),
        Some(libc::ENOENT) => format!(
            "cannot start {}: no such file (or the output directory does not exist)",
            plan.argv[0]
        ),
        _ => format!("cannot start {}: {e}", plan.argv[0]),
    }
}

/// Is some process running `... supervise DIR` for this step directory?
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
    /// True when the step's supervisor was never started: the agent writes `launch.json`
    /// and then `plan.json` before it spawns the supervisor.
    pub fn never_started(&self) -> bool {
        if !self.launch().exists() || !self.plan().exists() {
            return true;
        }
        // Killed between writing the plan and recording the supervisor's pid: only a
        // running `gagentd supervise DIR` process tells whether the spawn happened.
        let recorded = ["supervisor.pid", "pgid", "exit.json"]
            .iter()
            .any(|f| self.0.join(f).exists());
        !recorded && !supervisor_running(&self.0)
    }
    /// This node's own copy of the step's stdout and stderr.
    pub fn capture(&self) -> PathBuf {
        self.0.join("output.log")
    }
}

#[cfg(test)]
mod tests {
    use super::StepFiles;

    #[test]
    fn an_interrupted_launch_is_recognised_and_a_started_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = StepFiles(dir.path().join("7.0"));
        std::fs::create_dir_all(files.logs()).unwrap();
        std::fs::write(files.0.join("launch.tmp"), b"{").unwrap();
        assert!(files.never_started(), "killed while writing launch.json");
        std::fs::write(files.launch(), b"{}").unwrap();
        assert!(files.never_started(), "killed before plan.json");
        std::fs::write(files.plan(), b"{}").unwrap();
        assert!(
            files.never_started(),
            "killed before spawning: no supervisor runs for this directory"
        );
        std::fs::write(files.0.join("supervisor.pid"), b"123").unwrap();
        assert!(
            !files.never_started(),
            "a recorded supervisor is re-adopted, never launched twice"
        );
    }
}
