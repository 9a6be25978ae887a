//! `grun`: run a command as a step of the job it is called from, srun-style: tasks over
//! the job's nodes (`-N`, `-n`, `--ntasks-per-node`, `-w`), each with its `SLURM_PROCID`,
//! `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_ID`...; their output comes back here
//! (`-l` labels it with the task), and grun exits with the highest task exit status.

use base64::Engine;
use clap::Parser;
use gsched_cli::client::{Client, controller_list, describe, die};
use gsched_proto::pb::ActOnJobsRequest;
use gsched_types::job::JobId;
use gsched_types::steps::{StepRequest, StepUpdate, TaskIo};
use std::collections::BTreeMap;
use std::io::Write;

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
    #[arg(long = "ntasks-per-node")]
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
    // Accepted for srun compatibility; the job's allocation already decides these.
    #[arg(long = "gpus-per-task", hide = true)]
    gpus_per_task: Option<String>,
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
    // Outside a job, grun first gets an allocation with these (as srun does).
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
    // As srun in a batch job: tasks per node from the job unless told otherwise.
    let ntasks_per_node = args.ntasks_per_node.unwrap_or_else(|| {
        if args.ntasks.is_none() && args.nodes.is_none() {
            std::env::var("SLURM_NTASKS_PER_NODE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        } else {
            0
        }
    });
    let request = StepRequest {
        job: JobId(job),
        nodelist,
        nodes,
        ntasks: args.ntasks.unwrap_or(0),
        ntasks_per_node,
        argv: args.command.clone(),
        env: exported(args.export.as_deref()).unwrap_or_else(|e| die("grun", e)),
        cwd: std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "/".into()),
    };
    let req = ActOnJobsRequest {
        request_id: gsched_cli::client::request_id(),
        json: serde_json::to_vec(&request).expect("a step request serialises"),
    };
    let mut stream = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.run_step(req).await }
        }))
        .unwrap_or_else(|s| die("grun", describe(&s)));
    let mut out = sink(args.output.as_deref(), false);
    let mut err = sink(args.error.as_deref(), true);
    // Partial lines per (rank, stream), so labels go at line starts.
    let mut partial: BTreeMap<(u32, bool), Vec<u8>> = BTreeMap::new();
    let kill_on_bad_exit = args.kill_on_bad_exit.is_some_and(|k| k != 0);
    let mut status = 0;
    let mut ended = 0;
    let mut ntasks = u32::MAX;
    loop {
        let msg = match rt.block_on(stream.message()) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(s) => die("grun", format!("the step's stream broke: {}", describe(&s))),
        };
        let update: StepUpdate = serde_json::from_slice(&msg.json)
            .unwrap_or_else(|e| die("grun", format!("malformed step update: {e}")));
        match update {
            StepUpdate::Started { layout, .. } => ntasks = layout.ntasks,
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
                let s = match (code, signal) {
                    (_, Some(sig)) => {
                        eprintln!("grun: error: task {rank}: killed by signal {sig}");
                        128 + sig
                    }
                    (Some(c), None) => c,
                    (None, None) => 1,
                };
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
