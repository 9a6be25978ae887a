//! The step a `grun` asks for, from its options and the job's environment, as srun
//! reads them: the nodes and tasks (the job's counts unless told otherwise), the GPUs,
//! the binding, the environment to export, the program (`--multi-prog`'s per-rank lines).

use super::args::RunArgs;
use gsched_types::binding::{TaskBinding, parse_cpu_bind, parse_distribution, parse_hint};
use gsched_types::gpubind::GpuBind;
use gsched_types::job::JobId;
use gsched_types::steps::{StepGpus, StepRequest, TaskScripts, TermSize};
use std::collections::BTreeMap;

/// What the options ask for that gsched cannot do; each message says what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Value(String),
    /// A value srun's own option parser refuses (srun then exits 255).
    #[error("{0}")]
    Option(String),
    #[error("{flag} {value}: {why}")]
    Flag {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("--multi-prog {file}: {why}")]
    MultiProg { file: String, why: String },
}

impl RequestError {
    /// srun's exit status for it: 255 where its option parser refuses the value, else 1.
    pub fn exit_status(&self) -> i32 {
        match self {
            RequestError::Option(_) => crate::getopt::OPTION_ERROR_STATUS,
            _ => 1,
        }
    }
}

fn flag(flag: &'static str, value: &str, why: impl std::fmt::Display) -> RequestError {
    RequestError::Flag {
        flag,
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// Where a step is asked for from: the caller's environment and directory.
pub struct Caller {
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// Reads `--multi-prog`'s file.
    pub read_file: fn(&std::path::Path) -> std::io::Result<Vec<u8>>,
    /// The caller's umask (`SLURM_UMASK` when its environment has none).
    pub umask: u32,
    /// Whether a path names an executable file (for finding the command on `PATH`).
    pub is_executable: fn(&std::path::Path) -> bool,
    /// The caller's soft resource limit of a name (`--propagate`).
    pub soft_limit: fn(&str) -> Option<u64>,
}

impl Caller {
    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The step `args` ask for in `job`; `pty_size` is the terminal's for `--pty`.
/// The command's full path as srun finds it before launching (on the caller's `PATH`, a
/// relative entry read from the step's directory), so the tasks' `argv[0]` is that path;
/// `None` for a name with a slash or one not found (the node then finds it, or says so).
fn on_path(program: &str, cwd: &str, caller: &Caller) -> Option<String> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    caller.var("PATH")?.split(':').find_map(|dir| {
        let dir = match dir {
            "" | "." => cwd.to_string(),
            d if d.starts_with('/') => d.trim_end_matches('/').to_string(),
            d => format!("{}/{d}", cwd.trim_end_matches('/')),
        };
        let full = format!("{dir}/{program}");
        (caller.is_executable)(std::path::Path::new(&full)).then_some(full)
    })
}

pub fn step_request(
    args: &RunArgs,
    job: u64,
    caller: &Caller,
    pty_size: impl FnOnce() -> TermSize,
) -> Result<StepRequest, RequestError> {
    let (nodelist, nodes) = step_nodes(args, caller)?;
    let (ntasks, ntasks_per_node) = step_tasks(args, caller)?;
    let cwd = match &args.chdir {
        Some(d) if d.starts_with('/') => d.clone(),
        Some(d) => format!("{}/{d}", caller.cwd.trim_end_matches('/')),
        None => caller.cwd.clone(),
    };
    let argv = if args.multi_prog {
        multi_prog(&args.command, caller)?
    } else {
        let mut argv = args.command.clone();
        if let Some(program) = argv.first_mut()
            && let Some(found) = on_path(program, &cwd, caller)
        {
            *program = found;
        }
        argv
    };
    if argv.is_empty() {
        return Err(RequestError::Value(
            "no command given: grun [options] COMMAND [ARGS]".into(),
        ));
    }
    let task_scripts = TaskScripts {
        prolog: task_script(args.task_prolog.as_deref(), "--task-prolog", &cwd, caller)?,
        epilog: task_script(args.task_epilog.as_deref(), "--task-epilog", &cwd, caller)?,
    };
    Ok(StepRequest {
        job: JobId(job),
        nodelist,
        nodes,
        ntasks,
        ntasks_per_node,
        argv,
        env: exported(args.export.as_deref(), caller)?,
        cwd,
        pty: args.pty.then(pty_size),
        gpus: step_gpus(args, caller, nodes)?,
        overlap: args.overlap.is_some(),
        name: args.job_name.clone(),
        overcommit: args.overcommit || caller.var("SLURM_OVERCOMMIT").is_some(),
        task_scripts,
        cpus_per_task: cpus_per_task(args, caller)?,
        binding: binding(args, caller)?,
        srun_env: srun_env(args, caller)?,
    })
}

/// What `--mpi` (or `SLURM_MPI_TYPE`) other than `none` is told: the step runs (many
/// scripts pass `--mpi=pmi2` by habit, for programs that need no PMI at all, and Slurm
/// runs them), but no PMI server is there for an MPI program that needs one.
pub fn mpi_warning(args: &RunArgs, caller: &Caller) -> Option<String> {
    match args.mpi.as_deref().or_else(|| caller.var("SLURM_MPI_TYPE")) {
        None | Some("none") => None,
        Some(other) => Some(format!(
            "--mpi={other}: gsched starts every task itself and runs no PMI server; an MPI program that needs one fails in MPI_Init: start MPI programs with mpirun inside the job"
        )),
    }
}

/// The variables srun sets for a step's tasks from its options and input variables, as
/// Slurm 22.05 does (`src/common/env.c` `setup_env`, `srun_job.c`, slurmstepd's
/// `SLURMD_TRES_BIND`).
fn srun_env(args: &RunArgs, caller: &Caller) -> Result<BTreeMap<String, String>, RequestError> {
    let mut env = BTreeMap::new();
    let given = |opt: &Option<String>, var: &str| {
        opt.clone().or_else(|| caller.var(var).map(str::to_string))
    };
    if let Some(m) = given(&args.mpi, "SLURM_MPI_TYPE") {
        env.insert("SLURM_MPI_TYPE".into(), m);
    }
    if let Some(d) = given(&args.distribution, "SLURM_DISTRIBUTION") {
        // Slurm names a plane distribution without its size.
        let d = if d.starts_with("plane") {
            "plane".into()
        } else {
            d
        };
        env.insert("SLURM_DISTRIBUTION".into(), d);
    }
    let per_gpu = count(
        given(&args.ntasks_per_gpu, "SLURM_NTASKS_PER_GPU").as_deref(),
        "--ntasks-per-gpu",
    )?;
    // srun's launch.c: an explicit --gpu-bind, else single:N from --ntasks-per-gpu, else
    // per_task:N from --gpus-per-task.
    let tres_bind = given(&args.gpu_bind, "SLURM_GPU_BIND")
        .or_else(|| per_gpu.map(|n| format!("single:{n}")))
        .or_else(|| {
            given(&args.gpus_per_task, "SLURM_GPUS_PER_TASK")
                .and_then(|g| gsched_types::parse::gpus(&g, "--gpus-per-task").ok())
                .map(|r| format!("per_task:{}", r.count))
        });
    if let Some(b) = tres_bind {
        env.insert("SLURMD_TRES_BIND".into(), format!("gpu:{b}"));
    }
    if let Some(n) = per_gpu {
        env.insert("SLURM_NTASKS_PER_TRES".into(), n.to_string());
    }
    if let Some(n) = count(
        given(&args.ntasks_per_core, "SLURM_NTASKS_PER_CORE").as_deref(),
        "--ntasks-per-core",
    )? {
        env.insert("SLURM_NTASKS_PER_CORE".into(), n.to_string());
    }
    // An explicit --cpu-bind=none is told to the tasks as srun tells a bound one.
    if let Some(c) = args
        .cpu_bind
        .as_deref()
        .or_else(|| caller.var("SLURM_CPU_BIND"))
    {
        let (bind, verbose) = parse_cpu_bind(c).map_err(|e| RequestError::Option(e.to_string()))?;
        if bind == gsched_types::binding::CpuBind::None {
            let verbose = if verbose { "verbose" } else { "quiet" };
            env.insert("SLURM_CPU_BIND".into(), format!("{verbose},none"));
            env.insert("SLURM_CPU_BIND_TYPE".into(), "none".into());
            env.insert("SLURM_CPU_BIND_LIST".into(), String::new());
            env.insert("SLURM_CPU_BIND_VERBOSE".into(), verbose.into());
        }
    }
    if args.label {
        env.insert("SLURM_LABELIO".into(), "1".into());
    }
    tuning_env(args, caller, &mut env)?;
    if caller.var("SLURM_UMASK").is_none() {
        env.insert(
            "SLURM_UMASK".into(),
            format!("{:04o}", caller.umask & 0o777),
        );
    }
    Ok(env)
}

/// `--cpu-freq`, `--gpu-freq`, `--mem-bind`, `-O` and `--mincpus` checked with Slurm's
/// grammar, and the variables srun sets for them; gsched sets no clocks and no memory
/// policy, and `--mincpus` asks nothing of a step that its job does not hold.
fn tuning_env(
    args: &RunArgs,
    caller: &Caller,
    env: &mut BTreeMap<String, String>,
) -> Result<(), RequestError> {
    use gsched_types::tuning;
    let bad = |e: tuning::TuningError| RequestError::Option(e.to_string());
    if let Some(f) = &args.cpu_freq {
        env.insert(
            "SLURM_CPU_FREQ_REQ".into(),
            tuning::cpu_freq(f).map_err(bad)?,
        );
    }
    // A job's own --gpu-freq and --mem-bind reach its steps as srun's input variables.
    if let Some(f) = args
        .gpu_freq
        .as_deref()
        .or_else(|| caller.var("SLURM_GPU_FREQ"))
    {
        env.insert(
            "SLURMD_TRES_FREQ".into(),
            format!("gpu:{}", tuning::gpu_freq(f).map_err(bad)?),
        );
    }
    let inherited = caller.var("SLURM_MEM_BIND");
    if args.mem_bind.is_some() || inherited.is_some() {
        let mut m = tuning::MemBind::default();
        for text in [inherited, args.mem_bind.as_deref()].into_iter().flatten() {
            m = m.and(text).map_err(bad)?;
        }
        for (k, v) in m.step_vars() {
            env.insert(k.into(), v);
        }
    }
    if args.overcommit {
        env.insert("SLURM_OVERCOMMIT".into(), "1".into());
    }
    env.extend(
        crate::propagate::variables(args.propagate.as_deref(), caller.soft_limit)
            .map_err(|e| RequestError::Option(e.to_string()))?,
    );
    count(args.mincpus.as_deref(), "--mincpus")?;
    Ok(())
}

/// A `--task-prolog`/`--task-epilog` program as srun finds it (the step's directory
/// first, then `PATH`), as an absolute path for the nodes; one not found is refused.
fn task_script(
    given: Option<&str>,
    name: &'static str,
    cwd: &str,
    caller: &Caller,
) -> Result<Option<String>, RequestError> {
    let Some(script) = given.filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none")) else {
        return Ok(None);
    };
    let found = super::scripts::locate(script, cwd, caller.var("PATH"), |p| {
        (caller.is_executable)(std::path::Path::new(p))
    });
    let found = if found.starts_with('/') {
        found
    } else {
        format!("{}/{found}", cwd.trim_end_matches('/'))
    };
    if !(caller.is_executable)(std::path::Path::new(&found)) {
        return Err(flag(
            name,
            script,
            format!("not found in PATH or {cwd}, or not executable"),
        ));
    }
    Ok(Some(found))
}

/// A count option's value.
fn count(v: Option<&str>, name: &'static str) -> Result<Option<u32>, RequestError> {
    v.map(|s| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| flag(name, s, "give a whole number"))
    })
    .transpose()
}

/// `-w`, `-x`, `-r` and `-N` over the job's nodes (`SLURM_JOB_NODELIST`).
fn step_nodes(args: &RunArgs, caller: &Caller) -> Result<(Vec<String>, u32), RequestError> {
    let expand =
        |f: &'static str, l: &str| gsched_types::hostlist::expand(l).map_err(|e| flag(f, l, e));
    let mut nodelist = match &args.nodelist {
        Some(l) => expand("-w", l)?,
        None => Vec::new(),
    };
    let job_nodes = || {
        caller
            .var("SLURM_JOB_NODELIST")
            .or_else(|| caller.var("GSCHED_JOB_NODELIST"))
            .map(|l| gsched_types::hostlist::expand(l).unwrap_or_default())
            .unwrap_or_default()
    };
    if let Some(r) = &args.relative {
        let start = count(Some(r), "--relative")?.unwrap_or(0) as usize;
        let all = job_nodes();
        if start >= all.len() {
            return Err(flag(
                "--relative",
                r,
                format!("the job has {} nodes, numbered from 0", all.len()),
            ));
        }
        nodelist = all[start..].to_vec();
    }
    if let Some(x) = &args.exclude {
        let out = expand("-x", x)?;
        let base = if nodelist.is_empty() {
            job_nodes()
        } else {
            nodelist
        };
        nodelist = base.into_iter().filter(|n| !out.contains(n)).collect();
        if nodelist.is_empty() {
            return Err(flag("-x", x, "no node of the job is left"));
        }
    }
    let nodes = match args.nodes.as_deref() {
        None => 0,
        // "-N 2" or srun's "-N 1-2": the lower bound.
        Some(n) => n
            .split('-')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| flag("-N", n, "give a number of nodes"))?,
    };
    // `-r` starts the step at a node and takes as many as -N asks from there.
    if args.relative.is_some() && nodes > 0 {
        nodelist.truncate(nodes as usize);
    }
    Ok((nodelist, nodes))
}

/// `-n` and `--ntasks-per-node`, or (as srun in a batch job) the job's task counts unless
/// told otherwise; `--pty`: one task.
fn step_tasks(args: &RunArgs, caller: &Caller) -> Result<(u32, u32), RequestError> {
    let from_job = |var: &str| caller.var(var).and_then(|v| v.parse::<u32>().ok());
    let ntasks_arg = count(args.ntasks.as_deref(), "--ntasks")?;
    let per_node_arg = count(args.ntasks_per_node.as_deref(), "--ntasks-per-node")?;
    let told = ntasks_arg.is_some() || args.nodes.is_some() || args.pty;
    let ntasks_per_node = per_node_arg.unwrap_or_else(|| {
        if told {
            0
        } else {
            from_job("SLURM_NTASKS_PER_NODE").unwrap_or(0)
        }
    });
    let ntasks = match (args.pty, ntasks_arg) {
        (true, None) => 1,
        (_, Some(n)) => n,
        (false, None) if !told && per_node_arg.is_none() && ntasks_per_node == 0 => {
            from_job("SLURM_NTASKS").unwrap_or(0)
        }
        _ => 0,
    };
    Ok((ntasks, ntasks_per_node))
}

/// `-c`, or `SRUN_CPUS_PER_TASK` as srun 22.05 reads it.
fn cpus_per_task(args: &RunArgs, caller: &Caller) -> Result<Option<u32>, RequestError> {
    count(
        args.cpus_per_task
            .as_deref()
            .or_else(|| caller.var("SRUN_CPUS_PER_TASK")),
        "--cpus-per-task",
    )
}

/// `--distribution`, `--cpu-bind`, `--hint` and `--ntasks-per-socket`, or the job's
/// (`SLURM_DISTRIBUTION`, `SLURM_CPU_BIND`, `SLURM_HINT`, `SLURM_NTASKS_PER_SOCKET`).
fn binding(args: &RunArgs, caller: &Caller) -> Result<TaskBinding, RequestError> {
    let mut b = TaskBinding::default();
    if let Some(d) = args
        .distribution
        .as_deref()
        .or_else(|| caller.var("SLURM_DISTRIBUTION"))
    {
        (b.nodes, b.cpus) =
            parse_distribution(d).map_err(|e| RequestError::Option(e.to_string()))?;
    }
    // SLURM_CPU_BIND is srun's input as much as its output: a script's own export, or
    // the binding a step's task was given when that task starts a step (as in Slurm).
    if let Some(c) = args
        .cpu_bind
        .as_deref()
        .or_else(|| caller.var("SLURM_CPU_BIND"))
    {
        (b.bind, b.verbose) = parse_cpu_bind(c).map_err(|e| RequestError::Option(e.to_string()))?;
    }
    if let Some(h) = args.hint.as_deref().or_else(|| caller.var("SLURM_HINT")) {
        b.hint = Some(parse_hint(h).map_err(|e| RequestError::Option(e.to_string()))?);
    }
    b.per_socket = count(
        args.ntasks_per_socket
            .as_deref()
            .or_else(|| caller.var("SLURM_NTASKS_PER_SOCKET")),
        "--ntasks-per-socket",
    )?;
    b.per_core = count(
        args.ntasks_per_core
            .as_deref()
            .or_else(|| caller.var("SLURM_NTASKS_PER_CORE")),
        "--ntasks-per-core",
    )?;
    Ok(b)
}

/// The environment the tasks get on top of the job's (`--export`), as srun 22.05's man
/// page says: `ALL` (the default) the caller's whole environment, whose values win over
/// `ALL,VAR=value`'s; `NONE` none of it; `VAR,VAR=value` those and the caller's `SLURM*`
/// variables.
fn exported(spec: Option<&str>, caller: &Caller) -> Result<BTreeMap<String, String>, RequestError> {
    let spec = spec.unwrap_or("ALL");
    let mut parts = spec.split(',').peekable();
    let first = parts.peek().copied();
    let all = first == Some("ALL");
    let mut env = BTreeMap::new();
    match first {
        Some("ALL" | "NONE" | "NIL") => {
            parts.next();
        }
        _ => env.extend(
            caller
                .env
                .iter()
                .filter(|(k, _)| k.starts_with("SLURM"))
                .map(|(k, v)| (k.clone(), v.clone())),
        ),
    }
    for kv in parts {
        let (k, v) = match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => match caller.env.get(kv) {
                Some(v) => (kv.to_string(), v.clone()),
                None => continue,
            },
        };
        if k.is_empty() || k.contains('\0') {
            return Err(flag("--export", kv, "is not NAME=VALUE"));
        }
        env.insert(k, v);
    }
    if all {
        env.extend(caller.env.clone());
    }
    Ok(env)
}

/// The step's GPUs, from its options or, as srun reads them, the job's `SLURM_*` variables.
fn step_gpus(args: &RunArgs, caller: &Caller, nodes: u32) -> Result<StepGpus, RequestError> {
    use gsched_types::parse;
    let from_env = |opt: &Option<String>, var: &str| {
        opt.clone().or_else(|| caller.var(var).map(str::to_string))
    };
    let value = |e: gsched_types::error::InputError| RequestError::Value(e.to_string());
    let count = |v: Option<String>, name: &str| {
        v.map(|v| parse::gpus(&v, name).map(|r| r.count))
            .transpose()
            .map_err(value)
    };
    let explicit = from_env(&args.gpu_bind, "SLURM_GPU_BIND")
        .map(|b| GpuBind::parse(&b))
        .transpose()
        .map_err(|e| RequestError::Value(e.to_string()))?;
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
        (Some(g), _, _) => Some(parse::gres(g).map_err(value)?.count),
        (None, Some(g), _) => Some(parse::gpus(g, "--gpus-per-node").map_err(value)?.count),
        (None, None, Some(g)) => {
            let total = parse::gpus(g, "--gpus").map_err(value)?.count;
            Some(total / nodes.max(1))
        }
        _ => None,
    };
    Ok(StepGpus {
        per_node,
        bind: GpuBind::implied(explicit, per_task, per_gpu),
    })
}

/// `--multi-prog FILE`: each line `RANKS PROGRAM [ARGS]` (RANKS: `*`, `N`, `N-M`, lists
/// of them), `%t` the task's rank and `%o` its offset within the line's ranks; `#` starts a
/// comment. Returns a command that runs the right line for `$SLURM_PROCID`.
pub fn multi_prog(command: &[String], caller: &Caller) -> Result<Vec<String>, RequestError> {
    let file = command.first().ok_or_else(|| {
        RequestError::Value("--multi-prog needs its configuration file as the command".into())
    })?;
    let bad = |why: String| RequestError::MultiProg {
        file: file.clone(),
        why,
    };
    let path = std::path::Path::new(&caller.cwd).join(file);
    let text = (caller.read_file)(&path).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| bad("is not UTF-8 text".into()))?;
    let mut arms = Vec::new();
    let mut fallback = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words =
            crate::sbatch::split_words(line).map_err(|e| bad(format!("line {}: {e}", n + 1)))?;
        let (ranks, program) = words
            .split_first()
            .filter(|(_, p)| !p.is_empty())
            .ok_or_else(|| bad(format!("line {}: give RANKS PROGRAM [ARGS]", n + 1)))?;
        if ranks == "*" {
            fallback = Some(program.to_vec());
            continue;
        }
        let mut listed = Vec::new();
        for part in ranks.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b) = (a.parse::<u32>(), b.parse::<u32>());
            match (a, b) {
                (Ok(a), Ok(b)) if a <= b && b - a < 4096 => listed.extend(a..=b),
                _ => return Err(bad(format!("line {}: '{ranks}' is not a rank list", n + 1))),
            }
        }
        for (offset, rank) in listed.iter().enumerate() {
            let argv: Vec<String> = program
                .iter()
                .map(|w| {
                    w.replace("%t", &rank.to_string())
                        .replace("%o", &offset.to_string())
                })
                .collect();
            arms.push((*rank, argv));
        }
    }
    let quote = |argv: &[String]| -> String {
        argv.iter()
            .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut script = String::from("case \"$SLURM_PROCID\" in\n");
    for (rank, argv) in &arms {
        script.push_str(&format!("{rank}) exec {} ;;\n", quote(argv)));
    }
    match &fallback {
        Some(argv) => {
            let with_rank: Vec<String> = argv
                .iter()
                .map(|w| {
                    w.replace("%t", "$SLURM_PROCID")
                        .replace("%o", "$SLURM_PROCID")
                })
                .collect();
            // %t in the catch-all line is the rank, which the shell knows.
            let words: Vec<String> = with_rank
                .iter()
                .map(|w| {
                    if w.contains("$SLURM_PROCID") {
                        format!("\"{}\"", w.replace('"', "\\\""))
                    } else {
                        format!("'{}'", w.replace('\'', r"'\''"))
                    }
                })
                .collect();
            script.push_str(&format!("*) exec {} ;;\n", words.join(" ")));
        }
        None => script.push_str(&format!(
            "*) echo \"grun: --multi-prog {}: no program for task $SLURM_PROCID\" >&2; exit 1 ;;\n",
            file.replace('"', "")
        )),
    }
    script.push_str("esac\n");
    Ok(vec!["/bin/sh".into(), "-c".into(), script])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn caller(env: &[(&str, &str)]) -> Caller {
        Caller {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: "/work".into(),
            umask: 0o022,
            soft_limit: |n| (n == "NOFILE").then_some(4096),
            is_executable: |p| {
                ["/opt/venv/bin/python", "/work/tools/run.sh"].contains(&p.to_str().unwrap_or(""))
            },
            read_file: |p| match p.file_name().and_then(|n| n.to_str()) {
                Some("multi.conf") => Ok(
                    b"# ranks program\n0 hostname\n1-2 echo task %t offset %o\n* echo rest %t\n"
                        .to_vec(),
                ),
                _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
            },
        }
    }

    fn request(argv: &[&str], env: &[(&str, &str)]) -> Result<StepRequest, RequestError> {
        let args =
            RunArgs::try_parse_from(std::iter::once("grun").chain(argv.iter().copied())).unwrap();
        step_request(&args, 7, &caller(env), || TermSize { rows: 24, cols: 80 })
    }

    #[test]
    fn the_command_is_found_on_the_callers_path_as_srun_finds_it() {
        let path = [("PATH", "/usr/local/bin:/opt/venv/bin:tools")];
        let r = request(&["python", "-c", "1"], &path).unwrap();
        assert_eq!(r.argv, ["/opt/venv/bin/python", "-c", "1"]);
        // A relative entry is read from the step's directory.
        let r = request(&["run.sh"], &path).unwrap();
        assert_eq!(r.argv, ["/work/tools/run.sh"]);
        // Not found, or named with a slash: as given (the node says if it cannot start it).
        let r = request(&["wandb", "agent"], &path).unwrap();
        assert_eq!(r.argv, ["wandb", "agent"]);
        let r = request(&["./python"], &path).unwrap();
        assert_eq!(r.argv, ["./python"]);
    }

    #[test]
    fn export_takes_the_callers_environment_as_sruns_man_page_says() {
        let c = caller(&[
            ("PATH", "/bin"),
            ("EDITOR", "vi"),
            ("SLURM_MEM_PER_NODE", "512"),
        ]);
        let keys = |e: &BTreeMap<String, String>| e.keys().cloned().collect::<Vec<_>>();
        let all = exported(None, &c).unwrap();
        assert_eq!(keys(&all), ["EDITOR", "PATH", "SLURM_MEM_PER_NODE"]);
        // ALL,VAR=value: the caller's value wins where it has one.
        let e = exported(Some("ALL,EDITOR=emacs,LR=0.1"), &c).unwrap();
        assert_eq!((e["EDITOR"].as_str(), e["LR"].as_str()), ("vi", "0.1"));
        assert!(exported(Some("NONE"), &c).unwrap().is_empty());
        // A list: those and the caller's SLURM* variables.
        let e = exported(Some("EDITOR,LR=0.1"), &c).unwrap();
        assert_eq!(keys(&e), ["EDITOR", "LR", "SLURM_MEM_PER_NODE"]);
        assert!(exported(Some("=x"), &c).is_err());
    }

    #[test]
    fn nodes_are_chosen_with_w_x_r_and_n() {
        let job = [("SLURM_JOB_NODELIST", "n[1-4]")];
        let r = request(&["-r", "1", "-N", "2", "hostname"], &job).unwrap();
        assert_eq!(r.nodelist, ["n2", "n3"]);
        let r = request(&["-x", "n[1-2]", "hostname"], &job).unwrap();
        assert_eq!(r.nodelist, ["n3", "n4"]);
        assert!(request(&["-r", "4", "hostname"], &job).is_err());
        assert!(request(&["-x", "n[1-4]", "hostname"], &job).is_err());
    }

    #[test]
    fn the_step_takes_its_name_directory_cpus_and_binding() {
        let r = request(
            &[
                "-J",
                "eval",
                "-D",
                "sub",
                "-c",
                "4",
                "--cpu-bind=cores",
                "-m",
                "cyclic",
                "true",
            ],
            &[("SLURM_HINT", "nomultithread")],
        )
        .unwrap();
        assert_eq!(r.name.as_deref(), Some("eval"));
        assert_eq!(r.cwd, "/work/sub");
        assert_eq!(r.cpus_per_task, Some(4));
        assert_eq!(r.binding.bind, gsched_types::binding::CpuBind::Cores);
        assert_eq!(r.binding.nodes, gsched_types::binding::NodeDist::Cyclic);
        assert_eq!(
            r.binding.hint,
            Some(gsched_types::binding::Hint::Nomultithread)
        );
        let r = request(
            &["true"],
            &[("SRUN_CPUS_PER_TASK", "2"), ("SLURM_CPUS_PER_TASK", "8")],
        )
        .unwrap();
        assert_eq!(
            r.cpus_per_task,
            Some(2),
            "srun 22.05 reads SRUN_CPUS_PER_TASK, not SLURM_"
        );
        // SLURM_CPU_BIND is one of srun's input variables (a script's `export
        // SLURM_CPU_BIND=cores`); --cpu-bind wins over it.
        let r = request(&["true"], &[("SLURM_CPU_BIND", "cores")]).unwrap();
        assert_eq!(r.binding.bind, gsched_types::binding::CpuBind::Cores);
        let r = request(&["--cpu-bind=none", "true"], &[("SLURM_CPU_BIND", "cores")]).unwrap();
        assert_eq!(r.binding.bind, gsched_types::binding::CpuBind::None);
    }

    #[test]
    fn pmi_runs_with_a_warning_and_its_type_in_the_tasks_environment() {
        assert!(request(&["--mpi=none", "true"], &[]).is_ok());
        let r = request(&["--mpi=pmix", "true"], &[]).unwrap();
        assert_eq!(r.srun_env["SLURM_MPI_TYPE"], "pmix");
        let r = request(&["true"], &[("SLURM_MPI_TYPE", "pmi2")]).unwrap();
        assert_eq!(r.srun_env["SLURM_MPI_TYPE"], "pmi2");
        let args = RunArgs::try_parse_from(["grun", "--mpi=pmi2", "true"]).unwrap();
        let warned = mpi_warning(&args, &caller(&[])).unwrap();
        assert!(warned.contains("no PMI server"), "{warned}");
        let args = RunArgs::try_parse_from(["grun", "--mpi=none", "true"]).unwrap();
        assert!(mpi_warning(&args, &caller(&[])).is_none());
    }

    #[test]
    fn multi_prog_runs_each_rank_its_line() {
        let r = request(&["--multi-prog", "multi.conf"], &[]).unwrap();
        assert_eq!(&r.argv[..2], ["/bin/sh", "-c"]);
        let script = &r.argv[2];
        assert!(script.contains("0) exec 'hostname' ;;"), "{script}");
        assert!(
            script.contains("2) exec 'echo' 'task' '2' 'offset' '1' ;;"),
            "{script}"
        );
        assert!(
            script.contains("*) exec 'echo' 'rest' \"$SLURM_PROCID\" ;;"),
            "{script}"
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .env("SLURM_PROCID", "1")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "task 1 offset 0\n");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .env("SLURM_PROCID", "9")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "rest 9\n");
        assert!(request(&["--multi-prog", "missing.conf"], &[]).is_err());
    }
}
