//! A `grun` from its command line to its exit status: the job it runs in (or an
//! allocation made for it outside one), the step started, its tasks' output routed as
//! `--output`/`--error` say, `--wait` and `--time` kept, and srun's exit status.

use super::args::RunArgs;
use super::input::{Source, forward_input};
use super::output::{Names, Route, Sinks};
use super::request::{Caller, step_request};
use super::terminal::{raw_mode, restore_terminal, terminal_size};
use crate::client::{Client, controller_list, describe, die};
use crate::getopt::OptionError;
use crate::slurm_options::{self, Tool};
use base64::Engine;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use gsched_proto::contract::Carries;
use gsched_proto::pb::RunStepRequest;
use gsched_types::steps::{StepUpdate, TaskIo};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn fail(message: impl std::fmt::Display) -> ! {
    restore_terminal();
    die("grun", message)
}

/// The options of `raw` (srun's input variables of Slurm's table first, the command
/// line winning), and the options given as canonical words for an allocation.
pub fn parse(
    raw: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(RunArgs, Vec<String>), OptionError> {
    let cmd = RunArgs::command();
    let m = cmd
        .clone()
        .try_get_matches_from(raw)
        .map_err(|e| OptionError::from_clap(&cmd, &e, raw))?;
    let mut argv = vec!["grun".to_string()];
    // srun's input variables for options whose value a batch job's environment holds
    // for its steps to read (the task counts and GPUs are read where they are used).
    for row in slurm_options::table(Tool::Srun) {
        if !STEP_VARIABLES.contains(&row.long) || given(&m, row.long) {
            continue;
        }
        for var in &row.env {
            if let Some(v) = env
                .get(*var)
                .and_then(|v| slurm_options::env_value(row.arity, v))
            {
                argv.push(if v.is_empty() && row.arity == slurm_options::Arity::None {
                    format!("--{}", row.long)
                } else {
                    format!("--{}={v}", row.long)
                });
            }
        }
    }
    argv.extend(raw.iter().skip(1).cloned());
    let m = cmd
        .clone()
        .try_get_matches_from(&argv)
        .map_err(|e| OptionError::from_clap(&cmd, &e, &argv))?;
    let args = RunArgs::from_arg_matches(&m).map_err(|e| OptionError::Refused(e.to_string()))?;
    let given_longs = given_longs(&m);
    if let Some(refused) =
        slurm_options::refusal(Tool::Srun, given_longs.iter().map(String::as_str))
    {
        return Err(OptionError::Refused(refused));
    }
    Ok((args, allocation_words(&m)))
}

/// Options srun takes from its input variables here (`SLURM_LABELIO`, `SLURM_WAIT`...).
const STEP_VARIABLES: [&str; 12] = [
    "label",
    "prolog",
    "epilog",
    "task-prolog",
    "task-epilog",
    "wait",
    "kill-on-bad-exit",
    "unbuffered",
    "open-mode",
    "overlap",
    "exact",
    "disable-status",
];

fn given(m: &ArgMatches, long: &str) -> bool {
    RunArgs::command()
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .is_some_and(|a| m.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
}

/// The long names of the options set.
fn given_longs(m: &ArgMatches) -> Vec<String> {
    RunArgs::command()
        .get_arguments()
        .filter(|a| m.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// The options set that sbatch also has, as `--long=VALUE` words: what an allocation
/// made for this grun takes.
fn allocation_words(m: &ArgMatches) -> Vec<String> {
    let sbatch = crate::sbatch::SubArgs::command();
    let mut out = Vec::new();
    for arg in RunArgs::command().get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if m.value_source(id) != Some(ValueSource::CommandLine)
            || !sbatch.get_arguments().any(|a| a.get_long() == Some(long))
            || matches!(
                long,
                "output" | "error" | "input" | "open-mode" | "chdir" | "label"
            )
        {
            continue;
        }
        match arg.get_action() {
            clap::ArgAction::SetTrue => out.push(format!("--{long}")),
            clap::ArgAction::Count => {}
            _ => {
                for v in m.get_raw(id).into_iter().flatten() {
                    out.push(format!("--{long}={}", v.to_string_lossy()));
                }
            }
        }
    }
    out
}

/// `grun`'s whole run; returns its exit status.
pub fn main(raw: Vec<String>) -> i32 {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let (args, alloc_words) = parse(&raw, &env).unwrap_or_else(|e| {
        restore_terminal();
        e.exit(if crate::invoked_as() == "srun" {
            "srun"
        } else {
            "grun"
        })
    });
    if args.usage {
        crate::outln!("{}", RunArgs::command().render_usage());
        return 0;
    }
    let rt = crate::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let inside = args
        .jobid
        .as_deref()
        .and_then(|j| j.parse().ok())
        .or_else(|| {
            ["SLURM_JOB_ID", "GSCHED_JOB_ID"]
                .iter()
                .find_map(|v| env.get(*v)?.parse().ok())
        });
    // Outside a job: an allocation just for this step, given back when it ends.
    let (job, own) = match inside {
        Some(id) => (id, false),
        None => {
            let (alloc_args, _) =
                crate::alloc::parse("grun", &alloc_words).unwrap_or_else(|e| die("grun", e));
            let immediate = args
                .immediate
                .as_deref()
                .map(|v| immediate_wait("--immediate", v));
            let job = crate::alloc::allocate(&rt, &mut client, &alloc_args, "grun", immediate)
                .unwrap_or_else(|e| die("grun", e));
            (job.job_id.0, true)
        }
    };
    let status = run(&rt, &mut client, &args, job, &env);
    restore_terminal();
    if own {
        crate::alloc::release(&rt, &mut client, job);
    }
    status
}

/// `--immediate[=SECONDS]`: how long an allocation may wait to start (none given: only
/// until its first scheduling pass).
pub fn immediate_wait(flag: &str, value: &str) -> Duration {
    if value.is_empty() {
        return Duration::ZERO;
    }
    value
        .parse::<u64>()
        .map(Duration::from_secs)
        .unwrap_or_else(|_| die("grun", format!("{flag}={value}: give a number of seconds")))
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

/// Starts the step, waiting as srun does while the job's other steps hold the GPUs it
/// wants (the leader answers `ResourceExhausted` then).
fn start_step(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    req: &RunStepRequest,
    job: u64,
    quiet: bool,
) -> tonic::Streaming<gsched_proto::pb::RunStepReply> {
    let tool = crate::invoked_as();
    let mut waited = 0u32;
    let began = std::time::Instant::now();
    loop {
        let tried = rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.run_step(req).await }
        }));
        match tried {
            Ok(stream) => {
                if waited > 0 && !quiet {
                    say(&format!("{tool}: Step created for job {job}"));
                }
                return stream;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                let how = if waited == 0 { "temporarily" } else { "still" };
                if (waited == 0 || waited.is_power_of_two()) && !quiet {
                    say(&format!(
                        "{tool}: Job {job} step creation {how} disabled, retrying (Requested nodes are busy)"
                    ));
                }
                waited += 1;
                std::thread::sleep(retry_pause(began.elapsed()));
            }
            Err(s) => die(&tool, describe(&s)),
        }
    }
}

/// How long a step waiting for its job's GPUs sleeps before asking again, having waited
/// `so_far`: 100 ms for the first 30 s, so that it takes the first GPUs another step lets
/// go (as Slurm's srun, told by slurmctld, does: a growing back-off let a later step end
/// first and the step got other GPUs), then once a second.
pub fn retry_pause(so_far: Duration) -> Duration {
    if so_far < Duration::from_secs(30) {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    }
}

/// `--input`: grun's stdin (default, or task 0's rank), a file, or nothing.
fn input_source(args: &RunArgs, names: &Names, cwd: &str) -> Source {
    match args.input.as_deref() {
        None | Some("0") => Source::Stdin,
        Some(v) if v.eq_ignore_ascii_case("none") => Source::Nothing,
        Some(v) if v == "all" || v.parse::<u32>().is_ok() => fail(format!(
            "--input={v}: grun gives its stdin to task 0 only (the others read /dev/null); use --input=0, none or a file"
        )),
        Some(pattern) => {
            let name = super::output::expand(pattern, names, 0, "", 0);
            let path = if name.starts_with('/') {
                name
            } else {
                format!("{}/{name}", cwd.trim_end_matches('/'))
            };
            std::fs::File::open(&path)
                .map(Source::File)
                .unwrap_or_else(|e| fail(format!("--input: cannot open {path}: {e}")))
        }
    }
}

/// A duration option's value (`--wait` seconds, `--time` as Slurm writes limits).
fn seconds(flag: &str, v: Option<&str>, time: bool) -> Option<Duration> {
    let v = v?;
    let s = if time {
        gsched_types::parse::time_limit(v)
            .unwrap_or_else(|e| fail(format!("{flag}={v}: {e}")))
            .filter(|s| *s > 0)?
    } else {
        v.parse::<u64>()
            .unwrap_or_else(|_| fail(format!("{flag}={v}: give a number of seconds")))
    };
    (s > 0).then(|| Duration::from_secs(s))
}

/// Runs the step in `job`; returns the exit status for grun.
fn run(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    args: &RunArgs,
    job: u64,
    env: &BTreeMap<String, String>,
) -> i32 {
    let caller = Caller {
        env: env.clone(),
        cwd: std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "/".into()),
        read_file: |p| std::fs::read(p),
        soft_limit: crate::propagate::soft_limit,
        is_executable: |p| {
            nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
                && p.metadata().is_ok_and(|m| m.is_file())
        },
        umask: {
            use nix::sys::stat::{Mode, umask};
            let old = umask(Mode::from_bits_truncate(0o077));
            umask(old);
            old.bits()
        },
    };
    let request = step_request(args, job, &caller, terminal_size)
        .unwrap_or_else(|e| crate::client::die_status(&crate::invoked_as(), &e, e.exit_status()));
    if let Some(w) = super::request::mpi_warning(args, &caller)
        && !args.quiet
    {
        say(&format!("{}: warning: {w}", crate::invoked_as()));
    }
    let names = Names {
        job,
        step: 0,
        job_name: env.get("SLURM_JOB_NAME").cloned().unwrap_or_default(),
        user: env.get("USER").cloned().unwrap_or_default(),
        array: env
            .get("SLURM_ARRAY_JOB_ID")
            .and_then(|a| a.parse().ok())
            .zip(env.get("SLURM_ARRAY_TASK_ID").and_then(|t| t.parse().ok())),
    };
    let append = match args
        .open_mode
        .as_deref()
        .map(gsched_types::job::OpenMode::parse)
    {
        None => false,
        Some(Ok(mode)) => mode == gsched_types::job::OpenMode::Append,
        Some(Err(e)) => fail(e.to_string()),
    };
    let mut sinks = Sinks::new(
        names.clone(),
        Route::of(args.output.as_deref()),
        args.error.as_deref().map(|e| Route::of(Some(e))),
        append,
        args.label,
        &request.cwd,
    );
    let wait = seconds("--wait", args.wait.as_deref(), false);
    let limit = seconds("--time", args.time.as_deref(), true);
    let kill_on_bad_exit = args
        .kill_on_bad_exit
        .as_deref()
        .is_some_and(|k| k.is_empty() || k != "0");
    let tool = crate::invoked_as();
    let script = |s: &Option<String>, moment| {
        let script = s.as_deref().unwrap_or("");
        let (line, status) = super::scripts::run(script, moment, &args.command, &request.cwd, env);
        if let Some(l) = line {
            say(&format!("{tool}: {l}"));
        }
        status
    };
    let prolog = script(&args.prolog, super::scripts::Moment::Prolog);
    if prolog != 0 {
        say(&format!(
            "{tool}: error: srun prolog failed rc = {prolog}. Aborting step."
        ));
        return 1;
    }
    let req = RunStepRequest::carrying(&request);
    let mut stream = start_step(rt, client, &req, job, args.quiet);
    let started = Instant::now();
    let mut status = 0;
    let mut ended = 0;
    let mut ntasks = u32::MAX;
    let mut node_of: BTreeMap<u32, (String, u32)> = BTreeMap::new();
    let mut first_end: Option<Instant> = None;
    let mut step_id = 0;
    let input_taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        // The earliest of --wait after the first end and --time from the start.
        let deadline = [
            first_end.zip(wait).map(|(t, w)| t + w),
            limit.map(|l| started + l),
        ]
        .into_iter()
        .flatten()
        .min();
        let next = match deadline {
            Some(d) => rt.block_on(async {
                tokio::time::timeout(
                    d.saturating_duration_since(Instant::now()),
                    stream.message(),
                )
                .await
            }),
            None => Ok(rt.block_on(stream.message())),
        };
        let msg = match next {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => break,
            Ok(Err(s)) => fail(format!("the step's stream broke: {}", describe(&s))),
            Err(_) => {
                // Ending grun ends the step: the leader stops its tasks.
                if limit.is_some_and(|l| started.elapsed() >= l) {
                    say(&format!(
                        "{tool}: error: *** STEP {job}.{step_id} CANCELLED DUE TO TIME LIMIT ***"
                    ));
                } else {
                    say(&format!(
                        "{tool}: error: the first task ended {} s ago (--wait): stopping the others",
                        wait.map_or(0, |w| w.as_secs())
                    ));
                }
                status = status.max(1);
                break;
            }
        };
        let update: StepUpdate = msg
            .document()
            .unwrap_or_else(|e| fail(format!("the controller's reply is unreadable: {e}")));
        match update {
            StepUpdate::Started { layout, step } => {
                step_id = step;
                sinks.set_step(step, layout.ntasks);
                ntasks = layout.ntasks;
                for (i, (node, ranks)) in layout.nodes.iter().zip(&layout.ranks).enumerate() {
                    for r in ranks {
                        node_of.insert(*r, (node.clone(), i as u32));
                    }
                }
                if args.pty {
                    raw_mode();
                }
                let names = Names {
                    step,
                    ..names.clone()
                };
                forward_input(
                    args.controllers.clone(),
                    job,
                    step,
                    args.pty,
                    input_taken.clone(),
                    input_source(args, &names, &request.cwd),
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
                let (node, index) = node_of.get(&rank).cloned().unwrap_or_default();
                if let Err(e) = sinks.write(rank, stderr, &node, index, &bytes) {
                    fail(e);
                }
            }
            StepUpdate::Io(TaskIo::Exited {
                rank, code, signal, ..
            }) => {
                ended += 1;
                first_end.get_or_insert_with(Instant::now);
                // srun's own words, which wrappers and people grep for.
                let node = node_of.get(&rank).map_or("?", |(n, _)| n.as_str());
                match (code, signal) {
                    (_, Some(sig)) => say(&format!(
                        "{tool}: error: {node}: task {rank}: {}",
                        signal_words(sig)
                    )),
                    (Some(0), None) => {}
                    (Some(c), None) => say(&format!(
                        "{tool}: error: {node}: task {rank}: Exited with exit code {c}"
                    )),
                    (None, None) => say(&format!(
                        "{tool}: error: {node}: task {rank}: Exited, its status unknown to its node"
                    )),
                }
                // As the controller records the step: an unknown status is a failure.
                let s = gsched_types::steps::task_status(code, signal);
                status = status.max(s);
                if s != 0 && kill_on_bad_exit && ended < ntasks {
                    say(&format!(
                        "{tool}: error: task {rank} exited with status {s}; stopping the others (--kill-on-bad-exit)"
                    ));
                    break;
                }
            }
            StepUpdate::Io(TaskIo::Failed { node, message, .. }) => {
                let on = if node.is_empty() {
                    String::new()
                } else {
                    format!(" on {node}")
                };
                say(&format!(
                    "{tool}: error: the step could not start{on}: {message}"
                ));
                status = status.max(1);
            }
        }
    }
    if let Err(e) = sinks.finish(&node_of) {
        fail(e);
    }
    if ended < ntasks && status == 0 && ntasks != u32::MAX {
        say(&format!(
            "{tool}: error: the step ended before all its tasks reported (controller failover?)"
        ));
        status = 1;
    }
    let epilog = script(&args.epilog, super::scripts::Moment::Epilog);
    if epilog != 0 {
        say(&format!(
            "{tool}: error: srun epilog failed status={epilog}"
        ));
    }
    status
}

/// One line to stderr in one write: concurrent steps of a job share its output file, and
/// `eprintln!` may write a line in pieces that interleave with theirs.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
