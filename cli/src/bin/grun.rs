//! `grun`: run a command as a step of the job it is called from, srun-style: tasks over
//! the job's nodes (`-N`, `-n`, `--ntasks-per-node`, `-w`), each with its `SLURM_PROCID`,
//! `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_ID`...; their output comes back here
//! (`-l` labels it with the task), and grun exits with the highest task exit status.
//! grun's stdin goes to task 0; `--pty` runs that one task in a terminal on its node,
//! with this terminal in raw mode (so Ctrl-C and the like reach the task) and its size
//! following this one's.

use base64::Engine;
use clap::Parser;
use gsched_cli::client::{Client, controller_list, describe, die};
use gsched_proto::contract::Carries;
use gsched_proto::pb::{RunStepRequest, StepInputRequest};
use gsched_types::gpubind::GpuBind;
use gsched_types::job::JobId;
use gsched_types::steps::{
    INPUT_CHUNK, INPUT_WINDOW, InputEvent, StepGpus, StepInput, StepRequest, StepUpdate, TaskIo,
    TermSize,
};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};

/// Run a command on the nodes of the job this is called from (srun's twin).
#[derive(Parser, Debug)]
#[command(name = "grun", version, about)]
struct Args {
    /// Nodes of the job to use (default: all, or as many as there are tasks).
    #[arg(short = 'N', long = "nodes")]
    nodes: Option<String>,
    /// Tasks in all (default: one per node).
    #[arg(short = 'n', long = "ntasks")]
    ntasks: Option<u32>,
    #[arg(long = "ntasks-per-node", alias = "tasks-per-node")]
    ntasks_per_node: Option<u32>,
    /// Only these nodes of the job (a host list).
    #[arg(short = 'w', long = "nodelist")]
    nodelist: Option<String>,
    /// Prefix each output line with its task's rank.
    #[arg(short = 'l', long = "label")]
    label: bool,
    /// Stop every task as soon as one exits with a non-zero status.
    #[arg(short = 'K', long = "kill-on-bad-exit", num_args = 0..=1, default_missing_value = "1")]
    kill_on_bad_exit: Option<u8>,
    /// ALL (default: this environment), NONE, or ALL,VAR=value,... / VAR=value,...
    #[arg(long = "export")]
    export: Option<String>,
    /// The job to run in (default: $SLURM_JOB_ID).
    #[arg(long = "jobid")]
    jobid: Option<u64>,
    /// Write the tasks' stdout here instead of to grun's.
    #[arg(short = 'o', long = "output")]
    output: Option<String>,
    /// Write the tasks' stderr here instead of to grun's.
    #[arg(short = 'e', long = "error")]
    error: Option<String>,
    /// Run one task in a pseudo-terminal (an interactive shell: `grun --pty bash`).
    #[arg(long)]
    pty: bool,
    /// GPUs for each task: each task sees its own (default: $SLURM_GPUS_PER_TASK).
    #[arg(long = "gpus-per-task")]
    gpus_per_task: Option<String>,
    /// Which GPUs each task sees: closest, none, per_task:N, single:N, map_gpu:LIST
    /// (default: $SLURM_GPU_BIND).
    #[arg(long = "gpu-bind")]
    gpu_bind: Option<String>,
    /// Tasks sharing each GPU (default: $SLURM_NTASKS_PER_GPU).
    #[arg(long = "ntasks-per-gpu")]
    ntasks_per_gpu: Option<String>,
    // Accepted for srun compatibility; the job's allocation already decides these.
    #[arg(short = 'c', long = "cpus-per-task", hide = true)]
    cpus_per_task: Option<String>,
    #[arg(long = "mpi", hide = true)]
    mpi: Option<String>,
    #[arg(short = 'u', long = "unbuffered", hide = true)]
    unbuffered: bool,
    #[arg(long = "cpu-bind", hide = true)]
    cpu_bind: Option<String>,
    #[arg(long = "overlap", hide = true)]
    overlap: bool,
    #[arg(long = "exact", hide = true)]
    exact: bool,
    #[arg(long = "exclusive", hide = true)]
    exclusive: bool,
    #[arg(short = 'm', long = "distribution", hide = true)]
    distribution: Option<String>,
    #[arg(long = "hint", hide = true)]
    hint: Option<String>,
    // Outside a job, grun first gets an allocation with these (as srun does); inside one,
    // the step uses that many of the job's GPUs on each node.
    #[arg(long = "gpus-per-node")]
    gpus_per_node: Option<String>,
    #[arg(long = "gres")]
    gres: Option<String>,
    #[arg(short = 'G', long = "gpus")]
    gpus: Option<String>,
    #[arg(short = 'p', long = "partition")]
    partition: Option<String>,
    #[arg(short = 't', long = "time")]
    time: Option<String>,
    #[arg(short = 'J', long = "job-name")]
    job_name: Option<String>,
    #[arg(long = "mem")]
    mem: Option<String>,
    #[arg(long)]
    controllers: Option<String>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// The environment the tasks get on top of the job's (`--export`).
fn exported(spec: Option<&str>) -> Result<BTreeMap<String, String>, String> {
    let spec = spec.unwrap_or("ALL");
    let mut env = BTreeMap::new();
    for (i, part) in spec.split(',').enumerate() {
        match part {
            "ALL" if i == 0 => env.extend(std::env::vars()),
            "NONE" | "NIL" if i == 0 => {}
            kv => {
                let (k, v) = match kv.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => match std::env::var(kv) {
                        Ok(v) => (kv.to_string(), v),
                        Err(_) => continue,
                    },
                };
                if k.is_empty() || k.contains('\0') {
                    return Err(format!("--export: '{kv}' is not NAME=VALUE"));
                }
                env.insert(k, v);
            }
        }
    }
    Ok(env)
}

/// An output file, or grun's own stream.
fn sink(path: Option<&str>, stderr: bool) -> Box<dyn Write> {
    match path {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| die("grun", format!("cannot open {p}: {e}"))),
        ),
        None if stderr => Box::new(std::io::stderr()),
        None => Box::new(std::io::stdout()),
    }
}

/// This terminal's settings before raw mode, to put back on the way out.
static SAVED_TERMINAL: parking_lot::Mutex<Option<nix::sys::termios::Termios>> =
    parking_lot::Mutex::new(None);

fn restore_terminal() {
    if let Some(t) = SAVED_TERMINAL.lock().take() {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSADRAIN,
            &t,
        );
    }
}

fn fail(message: impl std::fmt::Display) -> ! {
    restore_terminal();
    die("grun", message)
}

nix::ioctl_read_bad!(get_window_size, libc::TIOCGWINSZ, nix::pty::Winsize);

/// This terminal's size (stdin's, else stdout's), or 24x80.
fn terminal_size() -> TermSize {
    use std::os::fd::AsRawFd;
    for fd in [std::io::stdin().as_raw_fd(), std::io::stdout().as_raw_fd()] {
        let mut ws = nix::pty::Winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `ws`, which outlives the call.
        if unsafe { get_window_size(fd, &mut ws) }.is_ok() && ws.ws_row > 0 && ws.ws_col > 0 {
            return TermSize {
                rows: ws.ws_row,
                cols: ws.ws_col,
            };
        }
    }
    TermSize { rows: 24, cols: 80 }
}

/// Puts this terminal in raw mode (keys go to the task as typed), remembering how it was.
fn raw_mode() {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return;
    }
    if let Ok(saved) = tcgetattr(&stdin) {
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        if tcsetattr(&stdin, SetArg::TCSADRAIN, &raw).is_ok() {
            *SAVED_TERMINAL.lock() = Some(saved);
        }
    }
}

/// Sends grun's stdin to task 0 of the step (and, with a terminal, its size on each
/// SIGWINCH), each piece as one `StepInput` call to the leader.
fn forward_input(
    controllers: Option<String>,
    job: u64,
    step: u32,
    pty: bool,
    taken: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let send = move |client: &mut Client, rt: &tokio::runtime::Runtime, input: InputEvent| {
        let body = StepInput {
            job: JobId(job),
            step,
            input,
        };
        let req = StepInputRequest::carrying(&body);
        rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.step_input(req).await }
        }))
        .is_ok()
    };
    if pty && std::io::stdin().is_terminal() {
        let controllers = controllers.clone();
        std::thread::spawn(move || {
            let rt = gsched_cli::runtime();
            let mut client = Client::new(controller_list(controllers.as_deref()));
            let Ok(mut winch) = rt.block_on(async {
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            }) else {
                return;
            };
            while rt.block_on(winch.recv()).is_some() {
                if !send(&mut client, &rt, InputEvent::Resize(terminal_size())) {
                    return;
                }
            }
        });
    }
    std::thread::spawn(move || {
        let rt = gsched_cli::runtime();
        let mut client = Client::new(controller_list(controllers.as_deref()));
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; INPUT_CHUNK];
        let mut sent: u64 = 0;
        loop {
            // At most INPUT_WINDOW bytes ahead of what task 0 has read: a slow reader
            // slows this down instead of filling its node's memory.
            while sent.saturating_sub(taken.load(std::sync::atomic::Ordering::Relaxed))
                > INPUT_WINDOW
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let n = match stdin.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            sent += n as u64;
            let input = if n == 0 {
                InputEvent::Eof
            } else {
                InputEvent::Data {
                    data: base64::engine::general_purpose::STANDARD.encode(&buf[..n]),
                }
            };
            if !send(&mut client, &rt, input) || n == 0 {
                return;
            }
        }
    });
}

fn main() {
    let args = Args::parse();
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let inside = args.jobid.or_else(|| {
        ["SLURM_JOB_ID", "GSCHED_JOB_ID"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.parse().ok())
    });
    // Outside a job: an allocation just for this step, given back when it ends.
    let (job, own) = match inside {
        Some(id) => (id, false),
        None => {
            let (alloc_args, _) = gsched_cli::alloc::parse("grun", &allocation_options(&args))
                .unwrap_or_else(|e| die("grun", e));
            let job = gsched_cli::alloc::allocate(&rt, &mut client, &alloc_args, "grun")
                .unwrap_or_else(|e| die("grun", e));
            (job.job_id.0, true)
        }
    };
    let status = run(&rt, &mut client, &args, job);
    restore_terminal();
    if own {
        gsched_cli::alloc::release(&rt, &mut client, job);
    }
    std::process::exit(status);
}

/// sbatch options for the allocation grun makes outside a job.
fn allocation_options(args: &Args) -> Vec<String> {
    let mut o = Vec::new();
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            o.push(format!("{flag}={v}"));
        }
    };
    opt("--nodes", args.nodes.clone());
    opt("--nodelist", args.nodelist.clone());
    opt("--gpus-per-node", args.gpus_per_node.clone());
    opt("--gres", args.gres.clone());
    opt("--gpus", args.gpus.clone());
    opt("--partition", args.partition.clone());
    opt("--time", args.time.clone());
    opt("--job-name", args.job_name.clone());
    opt("--mem", args.mem.clone());
    opt("--cpus-per-task", args.cpus_per_task.clone());
    opt("--ntasks", args.ntasks.map(|n| n.to_string()));
    opt(
        "--ntasks-per-node",
        args.ntasks_per_node.map(|n| n.to_string()),
    );
    o
}

/// How srun names a task's death by signal.
fn signal_words(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(nix::sys::signal::Signal::SIGKILL) => "Killed".into(),
        Ok(nix::sys::signal::Signal::SIGTERM) => "Terminated".into(),
        Ok(nix::sys::signal::Signal::SIGSEGV) => "Segmentation fault".into(),
        Ok(nix::sys::signal::Signal::SIGABRT) => "Aborted".into(),
        Ok(nix::sys::signal::Signal::SIGBUS) => "Bus error".into(),
        _ => format!("Killed by signal {sig}"),
    }
}

/// The step's GPUs, from its options or, as srun reads them, the job's `SLURM_*` variables.
fn step_gpus(args: &Args, nodes: u32) -> Result<StepGpus, String> {
    use gsched_types::parse;
    let from_env = |flag: &Option<String>, var: &str| {
        flag.clone()
            .or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()))
    };
    let count = |v: Option<String>, flag: &str| {
        v.map(|v| parse::gpus(&v, flag).map(|r| r.count))
            .transpose()
    };
    let explicit = from_env(&args.gpu_bind, "SLURM_GPU_BIND")
        .map(|b| GpuBind::parse(&b))
        .transpose()
        .map_err(|e| e.to_string())?;
    let per_task = count(
        from_env(&args.gpus_per_task, "SLURM_GPUS_PER_TASK"),
        "--gpus-per-task",
    )?;
    let per_gpu = count(
        from_env(&args.ntasks_per_gpu, "SLURM_NTASKS_PER_GPU"),
        "--ntasks-per-gpu",
    )?;
    let per_node = match (&args.gres, &args.gpus_per_node, &args.gpus) {
        (Some(g), _, _) if g == "none" => Some(0),
        (Some(g), _, _) => Some(parse::gres(g)?.count),
        (None, Some(g), _) => Some(parse::gpus(g, "--gpus-per-node")?.count),
        (None, None, Some(g)) => {
            let total = parse::gpus(g, "--gpus")?.count;
            Some(total / nodes.max(1))
        }
        _ => None,
    };
    Ok(StepGpus {
        per_node,
        bind: GpuBind::implied(explicit, per_task, per_gpu),
    })
}

/// Starts the step, waiting as srun does while the job's other steps hold the GPUs it
/// wants (the leader answers `ResourceExhausted` then).
fn start_step(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    req: &RunStepRequest,
    job: u64,
) -> tonic::Streaming<gsched_proto::pb::RunStepReply> {
    let tool = gsched_cli::invoked_as();
    let mut waited = 0u32;
    let mut pause = std::time::Duration::from_millis(200);
    loop {
        let tried = rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.run_step(req).await }
        }));
        match tried {
            Ok(stream) => {
                if waited > 0 {
                    eprintln!("{tool}: Step created for job {job}");
                }
                return stream;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                let how = if waited == 0 { "temporarily" } else { "still" };
                if waited == 0 || waited.is_power_of_two() {
                    eprintln!(
                        "{tool}: Job {job} step creation {how} disabled, retrying (Requested nodes are busy)"
                    );
                }
                waited += 1;
                std::thread::sleep(pause);
                pause = (pause * 3 / 2).min(std::time::Duration::from_secs(5));
            }
            Err(s) => die("grun", describe(&s)),
        }
    }
}

/// Runs the step in `job`; returns the exit status for grun.
fn run(rt: &tokio::runtime::Runtime, client: &mut Client, args: &Args, job: u64) -> i32 {
    let nodelist = match &args.nodelist {
        Some(l) => gsched_types::hostlist::expand(l)
            .unwrap_or_else(|e| die("grun", format!("-w {l}: {e}"))),
        None => Vec::new(),
    };
    let nodes = match args.nodes.as_deref() {
        None => 0,
        // "-N 2" or srun's "-N 1-2": the lower bound.
        Some(n) => n
            .split('-')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| die("grun", format!("-N {n}: give a number of nodes"))),
    };
    // As srun in a batch job: the job's task count (per node, or in all) unless told
    // otherwise; srun --pty: one task, in a terminal.
    let from_job = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u32>().ok());
    let told = args.ntasks.is_some() || args.nodes.is_some() || args.pty;
    let ntasks_per_node = args.ntasks_per_node.unwrap_or_else(|| {
        if told {
            0
        } else {
            from_job("SLURM_NTASKS_PER_NODE").unwrap_or(0)
        }
    });
    let ntasks = match (args.pty, args.ntasks) {
        (true, None) => 1,
        (_, Some(n)) => n,
        (false, None) if !told && args.ntasks_per_node.is_none() && ntasks_per_node == 0 => {
            from_job("SLURM_NTASKS").unwrap_or(0)
        }
        _ => 0,
    };
    let request = StepRequest {
        job: JobId(job),
        nodelist,
        nodes,
        ntasks,
        ntasks_per_node,
        argv: args.command.clone(),
        env: exported(args.export.as_deref()).unwrap_or_else(|e| die("grun", e)),
        cwd: std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "/".into()),
        pty: args.pty.then(terminal_size),
        gpus: step_gpus(args, nodes).unwrap_or_else(|e| die("grun", e)),
        overlap: args.overlap,
    };
    let req = RunStepRequest::carrying(&request);
    let mut stream = start_step(rt, client, &req, job);
    let mut out = sink(args.output.as_deref(), false);
    let mut err = sink(args.error.as_deref(), true);
    // Partial lines per (rank, stream), so labels go at line starts.
    let mut partial: BTreeMap<(u32, bool), Vec<u8>> = BTreeMap::new();
    let kill_on_bad_exit = args.kill_on_bad_exit.is_some_and(|k| k != 0);
    let mut status = 0;
    let mut ended = 0;
    let mut ntasks = u32::MAX;
    let mut node_of: BTreeMap<u32, String> = BTreeMap::new();
    let tool = gsched_cli::invoked_as();
    let input_taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        let msg = match rt.block_on(stream.message()) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(s) => fail(format!("the step's stream broke: {}", describe(&s))),
        };
        let update: StepUpdate = msg
            .document()
            .unwrap_or_else(|e| fail(format!("the controller's reply is unreadable: {e}")));
        match update {
            StepUpdate::Started { layout, step } => {
                ntasks = layout.ntasks;
                for (node, ranks) in layout.nodes.iter().zip(&layout.ranks) {
                    for r in ranks {
                        node_of.insert(*r, node.clone());
                    }
                }
                if args.pty {
                    raw_mode();
                }
                forward_input(
                    args.controllers.clone(),
                    job,
                    step,
                    args.pty,
                    input_taken.clone(),
                );
            }
            StepUpdate::Io(TaskIo::InputTaken { bytes, .. }) => {
                input_taken.fetch_max(bytes, std::sync::atomic::Ordering::Relaxed);
            }
            StepUpdate::Io(TaskIo::Output {
                rank, stderr, data, ..
            }) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap_or_default();
                let w: &mut dyn Write = if stderr { &mut err } else { &mut out };
                if args.label {
                    let buf = partial.entry((rank, stderr)).or_default();
                    buf.extend_from_slice(&bytes);
                    while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=i).collect();
                        let _ = write!(w, "{rank}: ");
                        let _ = w.write_all(&line);
                    }
                } else {
                    let _ = w.write_all(&bytes);
                }
                let _ = w.flush();
            }
            StepUpdate::Io(TaskIo::Exited {
                rank, code, signal, ..
            }) => {
                ended += 1;
                // srun's own words, which wrappers and people grep for.
                let node = node_of.get(&rank).map_or("?", String::as_str);
                match (code, signal) {
                    (_, Some(sig)) => {
                        eprintln!("{tool}: error: {node}: task {rank}: {}", signal_words(sig))
                    }
                    (Some(0), None) => {}
                    (Some(c), None) => {
                        eprintln!("{tool}: error: {node}: task {rank}: Exited with exit code {c}")
                    }
                    (None, None) => eprintln!(
                        "{tool}: error: {node}: task {rank}: Exited, its status unknown to its node"
                    ),
                }
                // As the controller records the step: an unknown status is a failure.
                let s = gsched_types::steps::task_status(code, signal);
                if s != 0 && kill_on_bad_exit && ended < ntasks {
                    eprintln!(
                        "grun: error: task {rank} exited with status {s}; stopping the others (--kill-on-bad-exit)"
                    );
                    status = status.max(s);
                    break;
                }
                status = status.max(s);
            }
            StepUpdate::Io(TaskIo::Failed { node, message, .. }) => {
                let on = if node.is_empty() {
                    String::new()
                } else {
                    format!(" on {node}")
                };
                eprintln!("grun: error: the step could not start{on}: {message}");
                status = status.max(1);
            }
        }
    }
    for ((rank, stderr), rest) in partial {
        if !rest.is_empty() {
            let w: &mut dyn Write = if stderr { &mut err } else { &mut out };
            let _ = write!(w, "{rank}: ");
            let _ = w.write_all(&rest);
            let _ = w.flush();
        }
    }
    if ended < ntasks && status == 0 && ntasks != u32::MAX {
        eprintln!(
            "grun: error: the step ended before all its tasks reported (controller failover?)"
        );
        status = 1;
    }
    status
}
