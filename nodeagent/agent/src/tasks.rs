//! `grun` tasks on this node: each task of a step runs under its own supervisor (as the
//! job's owner, in the job's cgroup, under the node's lease), its stdout and stderr are
//! read from the supervisor's private copies as they grow and sent on, with its exit, as
//! `TaskIo` (not kept on disk: a step lives as long as the `grun` that started it).
//! Task 0's input from its `grun` goes into a pipe that is its supervisor's stdin (bytes
//! queued here while the pipe is full), and terminal resizes into its `winsize` file.

use crate::layout::{self, RunFiles};
use crate::supervise::{ExitRecord, STDERR_CAPTURE};
use base64::Engine;
use gsched_launch::plan::{Plan, TaskInput, step_task};
use gsched_types::job::JobId;
use gsched_types::steps::{INPUT_BUFFER_LIMIT, InputEvent, StepLaunch, TaskIo};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most output one task sends per tick (the rest follows on the next ones).
const CHUNK: u64 = 64 * 1024;

struct TaskRun {
    attempt: u32,
    files: RunFiles,
    supervisor: std::process::Child,
    sent: [u64; 2],
    /// When a stop was asked for: SIGTERM then, SIGKILL a few seconds later.
    stopping: Option<(Instant, bool)>,
    input: Option<InputPipe>,
}

/// The agent's end of a task's stdin: the write end of a pipe whose read end is its
/// supervisor's stdin (non-blocking: bytes wait here while the pipe is full; dropping it
/// is the task's end of input).
struct InputPipe {
    pipe: Option<std::fs::File>,
    pending: VecDeque<u8>,
    eof: bool,
    /// Bytes written into the pipe so far, and the count last reported to grun.
    taken: u64,
    reported: u64,
    /// Bytes dropped over `INPUT_BUFFER_LIMIT` (a client ignoring the window).
    dropped: u64,
}

impl InputPipe {
    /// The agent's end, and the end to give the supervisor.
    fn open() -> Result<(InputPipe, std::os::fd::OwnedFd), String> {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| format!("cannot make the task's stdin pipe: {e}"))?;
        nix::fcntl::fcntl(
            &w,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| format!("cannot make the task's stdin pipe: {e}"))?;
        Ok((
            InputPipe {
                pipe: Some(std::fs::File::from(w)),
                pending: VecDeque::new(),
                eof: false,
                taken: 0,
                reported: 0,
                dropped: 0,
            },
            r,
        ))
    }

    /// Writes what the pipe takes now; closes it once input has ended and all is written.
    fn flush(&mut self) {
        let Some(f) = self.pipe.as_mut() else { return };
        while !self.pending.is_empty() {
            let (a, _) = self.pending.as_slices();
            match f.write(a) {
                Ok(0) => break,
                Ok(n) => {
                    self.pending.drain(..n);
                    self.taken += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.pending.clear();
                    break;
                }
            }
        }
        if self.eof && self.pending.is_empty() {
            self.pipe = None;
        }
    }
}

/// The `grun` tasks this agent runs, by (job, step, rank).
#[derive(Default)]
pub struct GrunTasks {
    runs: HashMap<(JobId, u32, u32), TaskRun>,
    io: Vec<TaskIo>,
}

impl GrunTasks {
    /// Starts this node's tasks of `launch` inside the job whose plan is `job_plan`;
    /// `root` is where task directories go, `exe` the agent binary (`supervise`).
    /// `cpus`: the job's CPUs here, for a step that binds its tasks to them.
    pub fn start(
        &mut self,
        launch: &StepLaunch,
        job_plan: &Plan,
        root: &Path,
        exe: &Path,
        cpus: Option<&crate::runs::JobCpus>,
    ) {
        let ranks = launch
            .layout
            .ranks
            .get(launch.node_index as usize)
            .cloned()
            .unwrap_or_default();
        for (local, rank) in ranks.into_iter().enumerate() {
            let key = (launch.job, launch.step, rank);
            if self.runs.contains_key(&key) {
                continue;
            }
            let files = RunFiles(root.join(format!(
                "{}.{}.{}.{rank}",
                launch.job, launch.attempt, launch.step
            )));
            let plan = match cpus {
                Some(c) => {
                    c.with(|node| step_task(job_plan, launch, rank, local as u32, Some(node)))
                }
                None => step_task(job_plan, launch, rank, local as u32, None),
            };
            match spawn(&files, &plan, exe) {
                Ok((child, input)) => {
                    self.runs.insert(
                        key,
                        TaskRun {
                            attempt: launch.attempt,
                            files,
                            supervisor: child,
                            sent: [0, 0],
                            stopping: None,
                            input,
                        },
                    );
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&files.0);
                    self.io.push(TaskIo::Failed {
                        job: launch.job,
                        step: launch.step,
                        node: String::new(),
                        message: format!("task {rank}: {e}"),
                    });
                }
            }
        }
    }

    /// Stops a step's tasks here (all steps of `job` when `step` is `None`).
    pub fn stop(&mut self, job: JobId, attempt: u32, step: Option<u32>) {
        for ((j, s, _), run) in self.runs.iter_mut() {
            if *j == job
                && run.attempt == attempt
                && step.is_none_or(|x| x == *s)
                && run.stopping.is_none()
            {
                run.stopping = Some((Instant::now(), false));
                signal_task(&run.files, Signal::SIGTERM);
            }
        }
    }

    /// Sends `sig` to every task of `job`'s steps here; returns how many it reached.
    pub fn signal(&mut self, job: JobId, attempt: u32, sig: Signal) -> usize {
        let mut n = 0;
        for ((j, _, _), run) in &self.runs {
            if *j == job && run.attempt == attempt && run.stopping.is_none() {
                signal_task(&run.files, sig);
                n += 1;
            }
        }
        n
    }

    /// Input for task 0 of a step, if it runs here.
    pub fn input(&mut self, job: JobId, step: u32, input: InputEvent) {
        let Some(run) = self.runs.get_mut(&(job, step, 0)) else {
            return;
        };
        match input {
            InputEvent::Data { data } => {
                if let (Some(pipe), Ok(bytes)) = (
                    run.input.as_mut(),
                    base64::engine::general_purpose::STANDARD.decode(data),
                ) && !pipe.eof
                {
                    let room = INPUT_BUFFER_LIMIT.saturating_sub(pipe.pending.len());
                    if bytes.len() > room {
                        if pipe.dropped == 0 {
                            self.io.push(TaskIo::Output {
                                job,
                                step,
                                rank: 0,
                                stderr: true,
                                data: base64::engine::general_purpose::STANDARD.encode(
                                    "grun: task 0 is not reading its input and more than 4 MiB wait for it: further input is dropped\n",
                                ),
                            });
                        }
                        pipe.dropped += (bytes.len() - room) as u64;
                    }
                    pipe.pending.extend(&bytes[..bytes.len().min(room)]);
                    pipe.flush();
                }
            }
            InputEvent::Eof => {
                if let Some(pipe) = run.input.as_mut() {
                    pipe.eof = true;
                    pipe.flush();
                }
            }
            InputEvent::Resize(size) => {
                let _ = layout::write_private(
                    &run.files.winsize(),
                    format!("{} {}", size.rows, size.cols).as_bytes(),
                );
            }
        }
    }

    /// No task runs and no output or exit waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.io.is_empty()
    }

    /// Sends on new output, escalates stops, reaps ended tasks.
    pub fn tick(&mut self) {
        let mut ended = Vec::new();
        for (&(job, step, rank), run) in self.runs.iter_mut() {
            let _ = run.supervisor.try_wait();
            if let Some(pipe) = run.input.as_mut() {
                pipe.flush();
                if pipe.taken != pipe.reported {
                    pipe.reported = pipe.taken;
                    self.io.push(TaskIo::InputTaken {
                        job,
                        step,
                        bytes: pipe.taken,
                    });
                }
            }
            send_output(run, (job, step, rank), false, &mut self.io);
            if let Some((since, false)) = run.stopping
                && since.elapsed() > Duration::from_secs(3)
            {
                run.stopping = Some((since, true));
                signal_task(&run.files, Signal::SIGKILL);
            }
            let Some(rec) = std::fs::read(run.files.exit())
                .ok()
                .and_then(|b| serde_json::from_slice::<ExitRecord>(&b).ok())
            else {
                continue;
            };
            // Whatever the task wrote last, then its exit.
            send_output(run, (job, step, rank), true, &mut self.io);
            if let Some(e) = &rec.launch_error {
                self.io.push(TaskIo::Output {
                    job,
                    step,
                    rank,
                    stderr: true,
                    data: base64::engine::general_purpose::STANDARD
                        .encode(format!("grun: task {rank} could not start: {e}\n")),
                });
            }
            self.io.push(TaskIo::Exited {
                job,
                step,
                rank,
                code: rec.code.or(rec.launch_error.as_ref().map(|_| 1)),
                signal: rec.signal,
            });
            ended.push((job, step, rank));
        }
        for key in ended {
            if let Some(mut run) = self.runs.remove(&key) {
                let _ = run.supervisor.wait();
                let _ = std::fs::remove_dir_all(&run.files.0);
            }
        }
    }

    /// Up to `max` of the reports gathered, oldest first, to send now.
    pub fn take_io(&mut self, max: usize) -> Vec<TaskIo> {
        let n = max.min(self.io.len());
        self.io.drain(..n).collect()
    }

    /// A report that a step cannot start here at all.
    pub fn refuse(&mut self, job: JobId, step: u32, node: &str, message: String) {
        self.io.push(TaskIo::Failed {
            job,
            step,
            node: node.to_string(),
            message,
        });
    }
}

fn spawn(
    files: &RunFiles,
    plan: &Plan,
    exe: &Path,
) -> Result<(std::process::Child, Option<InputPipe>), String> {
    layout::private_dir(&files.0).map_err(|e| format!("cannot make {}: {e}", files.0.display()))?;
    let (input, stdin) = match &plan.input {
        TaskInput::None | TaskInput::File { .. } => (None, std::process::Stdio::null()),
        TaskInput::Pipe | TaskInput::Pty(_) => {
            let (pipe, read_end) = InputPipe::open()?;
            (Some(pipe), std::process::Stdio::from(read_end))
        }
    };
    layout::write_private(
        &files.plan(),
        &serde_json::to_vec(plan).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write the task plan: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("supervise")
        .arg(&files.0)
        .stdin(stdin)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook makes one async-signal-safe system call (setsid) and allocates
    // nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the task supervisor: {e}"))?;
    Ok((child, input))
}

/// A task's new stdout and stderr (a chunk of each, or with `all` everything there is).
fn send_output(
    run: &mut TaskRun,
    (job, step, rank): (JobId, u32, u32),
    all: bool,
    io: &mut Vec<TaskIo>,
) {
    for (i, (name, stderr)) in [("output.log", false), (STDERR_CAPTURE, true)]
        .into_iter()
        .enumerate()
    {
        while let Some(data) = read_from(&run.files.0.join(name), &mut run.sent[i]) {
            io.push(TaskIo::Output {
                job,
                step,
                rank,
                stderr,
                data: base64::engine::general_purpose::STANDARD.encode(data),
            });
            if !all {
                break;
            }
        }
    }
}

fn signal_task(files: &RunFiles, sig: Signal) {
    if let Some(g) = std::fs::read_to_string(files.pgid())
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|g| *g > 1)
    {
        let _ = signal::killpg(Pid::from_raw(g), sig);
    }
}

/// Up to `CHUNK` bytes of `path` after `offset`, advancing it.
fn read_from(path: &PathBuf, offset: &mut u64) -> Option<Vec<u8>> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    if len <= *offset {
        return None;
    }
    f.seek(SeekFrom::Start(*offset)).ok()?;
    let mut buf = vec![0; (len - *offset).min(CHUNK) as usize];
    f.read_exact(&mut buf).ok()?;
    *offset += buf.len() as u64;
    Some(buf)
}
