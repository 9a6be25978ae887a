//! The resolution of options, directives and the script into a job spec, as sbatch
//! resolves them: node and task counts, the GPU spellings (which must agree), memory,
//! time, arrays, dependencies, node lists, the environment to export and the identity.

use super::directives::split_words;
use super::flags::SubArgs;
use gsched_types::error::InputError;
use gsched_types::gpubind::GpuBind;
use gsched_types::hostlist;
use gsched_types::job::{JobSpec, LaunchMode, TorchrunSpec};
use gsched_types::parse;
use std::collections::BTreeMap;

/// The submitting side's facts gsub resolves against.
pub struct SubmitContext {
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    /// The submitting user's name, as this host knows it (shown by `--dry-run`; the
    /// controller decides who the job runs as from the verified caller).
    pub user: String,
    /// The submitting process's umask (the job's output files and files get it).
    pub umask: u32,
    /// When it is submitted (for `--begin` times such as `now+1hour` or `16:00`).
    pub now: chrono::DateTime<chrono::Local>,
    /// This host's name (`SLURM_SUBMIT_HOST`).
    pub host: Option<String>,
    /// Reads a file the options name (`--nodefile`, `--export-file`), relative to `cwd`.
    pub read_file: fn(&std::path::Path) -> std::io::Result<Vec<u8>>,
    /// Run as `sbatch`: every batch script, `--wrap` too, runs once, as Slurm runs it.
    pub as_sbatch: bool,
    /// Reads a user's login environment (`--get-user-env`).
    pub login_env: crate::login_env::Reader,
    /// The submitting process's soft resource limit of a name (`--propagate`).
    pub soft_limit: fn(&str) -> Option<u64>,
}

impl ResolveError {
    /// The status `gsub` exits with: sbatch's 255 where its own parser of that option
    /// refuses the value ("Invalid --time specification": slurm_opt.c's handlers exit -1),
    /// 1 where a later check does (a count of 0, options that contradict each other).
    pub fn exit_status(&self) -> i32 {
        use gsched_types::binding::BindingError;
        match self {
            ResolveError::Time(_)
            | ResolveError::Begin(_)
            | ResolveError::Deadline(_)
            | ResolveError::TimeMin(_)
            | ResolveError::Mail(_)
            | ResolveError::KillOnInvalidDep(_)
            | ResolveError::NoKill(_)
            | ResolveError::GpuBind(_)
            | ResolveError::Exclusive(_)
            | ResolveError::UserEnv(_)
            | ResolveError::Tuning(_)
            | ResolveError::Propagate(_)
            | ResolveError::Binding(BindingError::Distribution(_) | BindingError::CpuBind(_))
            | ResolveError::Value(
                InputError::TimeLimit(_)
                | InputError::TimeLimitTooLong(_)
                | InputError::MemorySize(_),
            ) => crate::getopt::OPTION_ERROR_STATUS,
            _ => 1,
        }
    }
}

impl SubmitContext {
    /// This process's: its directory, environment, user, umask and clock.
    pub fn here() -> SubmitContext {
        use nix::sys::stat::{Mode, umask};
        let old = umask(Mode::from_bits_truncate(0o077));
        umask(old);
        SubmitContext {
            cwd: std::env::current_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "/".into()),
            env: std::env::vars().collect(),
            user: crate::client::current_user(),
            umask: old.bits(),
            now: chrono::Local::now(),
            host: nix::unistd::gethostname()
                .ok()
                .map(|h| h.to_string_lossy().into_owned()),
            read_file: |p| std::fs::read(p),
            as_sbatch: crate::invoked_as() == "sbatch",
            login_env: crate::login_env::capture,
            soft_limit: crate::propagate::soft_limit,
        }
    }
}

/// Why `gsub`'s (or `#SBATCH`'s) options do not describe a job; each message names the
/// flag to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Value(#[from] InputError),
    #[error("--time: {0}")]
    Time(InputError),
    #[error("--begin: {0}")]
    Begin(crate::when::WhenError),
    #[error("{0}")]
    GpuBind(String),
    #[error("--nodes must be at least 1")]
    NoNodes,
    #[error("task counts must be at least 1")]
    NoTasks,
    #[error("--ntasks={ntasks} does not fit --nodes={nodes} x --ntasks-per-node={per_node}")]
    TasksDoNotFit {
        ntasks: u32,
        nodes: u32,
        per_node: u32,
    },
    #[error(
        "--ntasks={ntasks} must be a multiple of --nodes={nodes} for a job that runs on every node (gsched starts the same number of tasks on each); a script with #SBATCH lines (or --launch=batch) may spread them unevenly through srun"
    )]
    UnevenEachNode { ntasks: u32, nodes: u32 },
    #[error("--cpus-per-task must be at least 1")]
    NoCpus,
    #[error("{flag} asks for {count} GPUs per node but {other} asks for {earlier}")]
    GpuFlagsDisagree {
        flag: &'static str,
        count: u32,
        other: &'static str,
        earlier: u32,
    },
    #[error("--gpus={gpus} cannot be spread evenly over {nodes} nodes")]
    GpusUneven { gpus: u32, nodes: u32 },
    #[error("--ntasks-per-gpu must be at least 1")]
    NoTasksPerGpu,
    #[error("--ntasks-per-gpu and --ntasks-per-node are mutually exclusive (as on Slurm)")]
    TasksPerGpuAndPerNode,
    #[error("--ntasks-per-gpu needs GPUs: add --gpus, --gpus-per-node or --gres=gpu:N")]
    TasksPerGpuWithoutGpus,
    #[error("--mem, --mem-per-gpu and --mem-per-cpu are mutually exclusive")]
    MemoryFlags,
    #[error("--nice={0}: give a number from -10000 to 10000")]
    Nice(String),
    #[error("--torchrun starts torchrun on every node; --launch=batch does not apply")]
    TorchrunBatch,
    #[error(transparent)]
    Constraint(#[from] gsched_types::constraint::ConstraintError),
    #[error(transparent)]
    Binding(#[from] gsched_types::binding::BindingError),
    #[error(transparent)]
    Tuning(#[from] gsched_types::tuning::TuningError),
    #[error(transparent)]
    Propagate(#[from] gsched_types::rlimits::PropagateError),
    #[error(transparent)]
    Mail(#[from] gsched_types::notify::MailTypeError),
    #[error("--time-min: {0}")]
    TimeMin(String),
    #[error("--deadline: {0}")]
    Deadline(crate::when::WhenError),
    #[error("--kill-on-invalid-dep={0}: use yes or no")]
    KillOnInvalidDep(String),
    #[error("--no-kill={0}: use on or off")]
    NoKill(String),
    #[error("{flag} {path}: {error}")]
    File {
        flag: &'static str,
        path: String,
        error: String,
    },
    #[error("--nodelist names {named} nodes but --nodes is {nodes}")]
    NodelistTooLong { named: usize, nodes: u32 },
    #[error("node {0} is both required (--nodelist) and excluded (--exclude)")]
    RequiredAndExcluded(String),
    #[error("--exclusive={0}: use --exclusive or --exclusive=user")]
    Exclusive(String),
    #[error("--torchrun needs the training program: gsub --torchrun train.py [args]")]
    TorchrunProgram,
    #[error("no batch script given")]
    NoScript,
    #[error("the batch script is empty")]
    EmptyScript,
    #[error("--export item '{0}' has no name")]
    ExportName(String),
    #[error("--torchrun-args: {0}")]
    TorchrunArgs(super::directives::DirectiveError),
    /// `--get-user-env`'s value.
    #[error("{0}")]
    UserEnv(String),
    /// The login shell that would not say its environment.
    #[error("{0}")]
    LoginEnv(String),
}

fn count(v: &Option<String>, flag: &str) -> Result<Option<u32>, ResolveError> {
    Ok(v.as_deref().map(|s| parse::count(s, flag)).transpose()?)
}

/// Resolves options and script into a job spec, as sbatch would: tasks, GPUs, memory,
/// time, where it may run, what it runs, then the environment and identity.
pub fn resolve(
    args: &SubArgs,
    script_text: Option<String>,
    script_name: Option<&str>,
    ctx: &SubmitContext,
) -> Result<JobSpec, ResolveError> {
    let required = required_nodes(args, ctx)?;
    let mut tasks = tasks(args, required.len())?;
    let gpus = gpus(args, &tasks)?;
    let ntasks_per_gpu = tasks_per_gpu(args, &mut tasks, &gpus)?;
    let gpu_bind = args
        .gpu_bind
        .as_deref()
        .map(GpuBind::parse)
        .transpose()
        .map_err(|e| ResolveError::GpuBind(e.to_string()))?;
    let memory = memory(args, &tasks, &gpus)?;
    let when = timing(args, ctx)?;
    let place = placement(args, required, tasks.nodes)?;
    let launch = launch_mode(args, script_text.as_deref(), ctx.as_sbatch)?;
    if launch == LaunchMode::EachNode && tasks.ntasks != tasks.nodes * tasks.per_node {
        return Err(ResolveError::UnevenEachNode {
            ntasks: tasks.ntasks,
            nodes: tasks.nodes,
        });
    }
    if let Some(c) = &args.constraint {
        gsched_types::constraint::Constraint::parse(c)?;
    }
    if let Some(d) = &args.distribution {
        gsched_types::binding::parse_distribution(d)?;
    }
    if let Some(h) = &args.hint {
        gsched_types::binding::parse_hint(h)?;
    }
    let program = program(args, script_text, script_name)?;
    let (array, array_limit) = match &args.array {
        Some(a) => {
            let (ids, limit) = parse::array(a)?;
            (Some(ids), limit)
        }
        None => (None, None),
    };
    let dependency = args
        .dependency
        .as_deref()
        .map(parse::dependency)
        .transpose()?
        .unwrap_or_default();
    let workdir = match &args.chdir {
        Some(d) if d.starts_with('/') => d.clone(),
        Some(d) => format!("{}/{d}", ctx.cwd.trim_end_matches('/')),
        None => ctx.cwd.clone(),
    };
    let submitting = with_login_env(args, ctx)?;
    let Exported {
        env,
        overrides: mut env_overrides,
    } = export(args.export.as_deref(), &submitting, export_file(args, ctx)?)?;
    if args.get_user_env.is_some() {
        env_overrides.insert("SLURM_GET_USER_ENV".into(), "1".into());
    }
    env_overrides.extend(crate::propagate::variables(
        args.propagate.as_deref(),
        ctx.soft_limit,
    )?);
    // Who the job runs as is the controller's decision, made from the verified caller;
    // the request only says whether --uid asks for someone else (root and admins only).
    let (user, uid) = match &args.uid {
        Some(u) => match u.parse::<u32>() {
            Ok(n) => (String::new(), Some(n)),
            Err(_) => (u.clone(), None),
        },
        None => (String::new(), None),
    };
    let max_restarts = count(&args.max_restarts, "--max-restarts")?;
    Ok(JobSpec {
        name: args.job_name.clone().unwrap_or(program.default_name),
        user,
        uid,
        gid: None,
        account: args.account.clone(),
        partition: args.partition.clone(),
        qos: args.qos.clone(),
        reservation: args.reservation.clone(),
        nodes: tasks.nodes,
        gpus_per_node: gpus.per_node,
        gpu_type: gpus.gpu_type,
        ntasks: tasks.ntasks,
        ntasks_per_node: tasks.per_node,
        cpus_per_task: tasks.cpus_per_task,
        gpu_share_cpus: memory.gpu_share_cpus,
        cpus_per_gpu: memory.cpus_per_gpu,
        gpus_per_task: gpus.per_task,
        gpu_bind,
        ntasks_per_gpu,
        submit_host: ctx.host.clone(),
        open_mode: args
            .open_mode
            .as_deref()
            .map(gsched_types::job::OpenMode::parse)
            .transpose()?,
        given: gsched_types::job::Given {
            ntasks: args.ntasks.is_some()
                || args.ntasks_per_node.is_some()
                || ntasks_per_gpu.is_some(),
            ntasks_per_node: args.ntasks_per_node.is_some(),
            export: args.export.clone(),
            open_mode: args.open_mode.is_some(),
            cpus_per_task: args.cpus_per_task.is_some(),
            mem_per_cpu_mb: args
                .mem_per_cpu
                .as_deref()
                .map(gsched_types::parse::mem_mb)
                .transpose()?,
            gpus: args.gpus.clone(),
            distribution: args.distribution.clone(),
            hint: args.hint.clone(),
            ntasks_per_socket: count(&args.ntasks_per_socket, "--ntasks-per-socket")?,
            ntasks_per_core: count(&args.ntasks_per_core, "--ntasks-per-core")?,
            cpu_freq: args
                .cpu_freq
                .as_deref()
                .map(gsched_types::tuning::cpu_freq)
                .transpose()?,
            gpu_freq: args
                .gpu_freq
                .as_deref()
                .map(gsched_types::tuning::gpu_freq)
                .transpose()?,
            mem_bind: match args.mem_bind.as_deref() {
                Some(m) => gsched_types::tuning::mem_bind(m).map(|_| Some(m.to_string()))?,
                None => None,
            },
            overcommit: args.overcommit,
            mincpus: count(&args.mincpus, "--mincpus")?,
        },
        mem_mb: memory.mem_mb,
        mem_per_gpu_mb: memory.mem_per_gpu_mb,
        time_limit_s: when.time_limit_s,
        signal: when.signal,
        begin_ms: when.begin_ms,
        nice: when.nice,
        switches: args
            .switches
            .as_deref()
            .map(gsched_types::parse::switches)
            .transpose()?,
        launch,
        output: args.output.as_deref().map(stream_path),
        error: args.error.as_deref().map(stream_path),
        requeue: args.requeue && !args.no_requeue,
        exclusive: place.exclusive,
        array,
        array_limit,
        constraint: args.constraint.clone(),
        nodelist: place.nodelist,
        exclude: place.exclude,
        dependency,
        workdir,
        submit_dir: ctx.cwd.clone(),
        script: program.script,
        script_args: program.script_args,
        env,
        env_overrides,
        torchrun: program.torchrun,
        hold: args.hold,
        max_restarts,
        umask: Some(ctx.umask),
        comment: args.comment.clone(),
        wckey: args.wckey.clone(),
        time_min_s: when.time_min_s,
        deadline_ms: when.deadline_ms,
        kill_on_invalid_dep: args
            .kill_on_invalid_dep
            .as_deref()
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "yes" | "y" => Ok(true),
                "no" | "n" => Ok(false),
                _ => Err(ResolveError::KillOnInvalidDep(v.to_string())),
            })
            .transpose()?,
        no_kill: match args.no_kill.as_deref() {
            None | Some("off") => false,
            Some("" | "on") => true,
            Some(v) => return Err(ResolveError::NoKill(v.to_string())),
        },
        input: args.input.as_deref().map(stream_path),
        mail: mail(args)?,
    })
}

/// An `--output`/`--error`/`--input` file: `none` (any case) is `/dev/null`, as Slurm's
/// option parser reads it.
fn stream_path(value: &str) -> String {
    if value.eq_ignore_ascii_case("none") {
        "/dev/null".into()
    } else {
        value.to_string()
    }
}

/// `--mail-type` and `--mail-user`: a request when `--mail-type` is given; `NONE` is a
/// request for nothing, which also keeps the user's own `--notify-on` events from
/// applying. Without `--mail-type` the user's settings decide (as Slurm, `--mail-user`
/// alone asks for nothing).
fn mail(args: &SubArgs) -> Result<Option<gsched_types::notify::MailRequest>, ResolveError> {
    let Some(text) = &args.mail_type else {
        return Ok(None);
    };
    let types = gsched_types::notify::parse_mail_types(text)?;
    Ok(Some(gsched_types::notify::MailRequest {
        types,
        user: args.mail_user.clone(),
    }))
}

/// Nodes, tasks and CPUs per task.
struct Tasks {
    nodes: u32,
    ntasks: u32,
    per_node: u32,
    cpus_per_task: u32,
}

/// `required`: how many nodes `--nodelist`/`--nodefile` name (sbatch takes that many
/// when `--nodes` is not given).
/// The most nodes a job without `-N` is spread over.
const MAX_SPREAD: u32 = 64;

/// The node counts to try, fewest first, for a job no `-N` fixes: with tasks and no `-N`
/// Slurm allocates "enough nodes to satisfy" the tasks, CPUs and GPUs asked for, and with
/// `-N MIN-MAX` any count in the range (sbatch(1), --nodes); `spec` was resolved with the
/// fewest. Empty when `-N` fixes one count or no tasks were asked for.
pub fn wider_node_counts(args: &SubArgs, spec: &JobSpec) -> impl Iterator<Item = u32> {
    let bounds = match args.nodes.as_deref() {
        None if args.ntasks.is_some() => Some((1, spec.ntasks)),
        None => None,
        Some(range) => match range.split_once('-').map(|(a, b)| (a.parse(), b.parse())) {
            Some((Ok(a), Ok(b))) => Some((a, b)),
            _ => None,
        },
    };
    bounds
        .into_iter()
        .flat_map(move |(low, high): (u32, u32)| (low.max(spec.nodes) + 1)..=high.min(MAX_SPREAD))
}

fn tasks(args: &SubArgs, required: usize) -> Result<Tasks, ResolveError> {
    let nodes = match args.nodes.as_deref() {
        // -n with --ntasks-per-node and no -N: as many nodes as the count per node needs
        // (sbatch(1): -n takes precedence, --ntasks-per-node is then a maximum per node).
        None => match (
            count(&args.ntasks, "--ntasks")?,
            count(&args.ntasks_per_node, "--ntasks-per-node")?,
        ) {
            (Some(n), Some(m)) if m > 0 => n.div_ceil(m).max(required as u32).max(1),
            _ => (required as u32).max(1),
        },
        Some(s) => {
            // sbatch accepts MIN-MAX; gsched takes the minimum.
            let first = if s.starts_with('-') {
                s
            } else {
                s.split_once('-').map(|(a, _)| a).unwrap_or(s)
            };
            let n = parse::count(first, "--nodes")?;
            if n == 0 {
                return Err(ResolveError::NoNodes);
            }
            n
        }
    };
    let mut ntasks = count(&args.ntasks, "--ntasks")?;
    let mut per_node = count(&args.ntasks_per_node, "--ntasks-per-node")?;
    if ntasks == Some(0) || per_node == Some(0) {
        return Err(ResolveError::NoTasks);
    }
    match (ntasks, per_node) {
        (Some(n), Some(m)) if n != nodes * m && n > nodes * m => {
            return Err(ResolveError::TasksDoNotFit {
                ntasks: n,
                nodes,
                per_node: m,
            });
        }
        // Uneven counts (-n 3 -N 2) are a batch job's alone: its steps lay tasks out in
        // blocks (2+1) as srun does; `resolve` refuses them for each-node jobs.
        (Some(n), None) => per_node = Some(n.div_ceil(nodes)),
        (None, Some(m)) => ntasks = Some(nodes * m),
        _ => {}
    }
    let per_node = per_node.unwrap_or(1);
    let ntasks = ntasks.unwrap_or(nodes * per_node);
    let cpus_per_task = count(&args.cpus_per_task, "--cpus-per-task")?.unwrap_or(1);
    if cpus_per_task == 0 {
        return Err(ResolveError::NoCpus);
    }

    Ok(Tasks {
        nodes,
        ntasks,
        per_node,
        cpus_per_task,
    })
}

/// GPUs per node (and their type), from whichever spellings were given: they must agree.
struct Gpus {
    per_node: u32,
    gpu_type: Option<String>,
    per_task: Option<u32>,
}

fn gpus(args: &SubArgs, tasks: &Tasks) -> Result<Gpus, ResolveError> {
    let (nodes, per_node) = (tasks.nodes, tasks.per_node);
    let mut gpu: Option<(u32, Option<String>, &'static str)> = None;
    let mut agree =
        |count: u32, ty: Option<String>, flag: &'static str| -> Result<(), ResolveError> {
            match &gpu {
                Some((c, t, other)) if *c != count || (ty.is_some() && t.is_some() && *t != ty) => {
                    Err(ResolveError::GpuFlagsDisagree {
                        flag,
                        count,
                        other,
                        earlier: *c,
                    })
                }
                Some((_, t, other)) => {
                    gpu = Some((count, ty.or(t.clone()), other));
                    Ok(())
                }
                None => {
                    gpu = Some((count, ty, flag));
                    Ok(())
                }
            }
        };
    if let Some(g) = &args.gpus_per_node {
        let r = parse::gpus(g, "--gpus-per-node")?;
        agree(r.count, r.gpu_type, "--gpus-per-node")?;
    }
    if let Some(g) = &args.gres {
        let r = parse::gres(g)?;
        agree(r.count, r.gpu_type, "--gres")?;
    }
    let gpus_per_task = match &args.gpus_per_task {
        Some(g) => {
            let r = parse::gpus(g, "--gpus-per-task")?;
            agree(r.count * per_node, r.gpu_type, "--gpus-per-task")?;
            Some(r.count)
        }
        None => None,
    };
    if let Some(g) = &args.gpus {
        let r = parse::gpus(g, "--gpus")?;
        if r.count % nodes != 0 {
            return Err(ResolveError::GpusUneven {
                gpus: r.count,
                nodes,
            });
        }
        agree(r.count / nodes, r.gpu_type, "--gpus")?;
    }
    let (gpus_per_node, gpu_type) = gpu.map(|(c, t, _)| (c, t)).unwrap_or((0, None));

    Ok(Gpus {
        per_node: gpus_per_node,
        gpu_type,
        per_task: gpus_per_task,
    })
}

/// `--ntasks-per-gpu=N`: N tasks for each GPU of a node, as Slurm counts them (it may
/// not be given with a task count per node).
fn tasks_per_gpu(
    args: &SubArgs,
    tasks: &mut Tasks,
    gpus: &Gpus,
) -> Result<Option<u32>, ResolveError> {
    let Some(n) = count(&args.ntasks_per_gpu, "--ntasks-per-gpu")? else {
        return Ok(None);
    };
    if n == 0 {
        return Err(ResolveError::NoTasksPerGpu);
    }
    if args.ntasks_per_node.is_some() {
        return Err(ResolveError::TasksPerGpuAndPerNode);
    }
    if gpus.per_node == 0 {
        return Err(ResolveError::TasksPerGpuWithoutGpus);
    }
    if args.ntasks.is_none() {
        tasks.per_node = n * gpus.per_node;
        tasks.ntasks = tasks.per_node * tasks.nodes;
    }
    Ok(Some(n))
}

/// Memory, and CPUs given per GPU or taken as the GPUs' share.
struct Memory {
    mem_mb: Option<u64>,
    mem_per_gpu_mb: Option<u64>,
    cpus_per_gpu: Option<u32>,
    gpu_share_cpus: bool,
}

fn memory(args: &SubArgs, tasks: &Tasks, gpus: &Gpus) -> Result<Memory, ResolveError> {
    let (gpus_per_node, per_node, cpus_per_task) =
        (gpus.per_node, tasks.per_node, tasks.cpus_per_task);
    // With no CPU count given, a GPU job gets its GPUs' share of each node's CPUs (decided
    // per node by the scheduler): one CPU per GPU starves NCCL's proxy and socket threads
    // and torchrun's workers.
    let cpus_per_gpu = count(&args.cpus_per_gpu, "--cpus-per-gpu")?;
    let gpu_share_cpus = cpus_per_gpu.is_none()
        && args.cpus_per_task.is_none()
        && args.mincpus.is_none()
        && gpus_per_node > 0;
    let mem_flags = [
        args.mem.is_some(),
        args.mem_per_gpu.is_some(),
        args.mem_per_cpu.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if mem_flags > 1 {
        return Err(ResolveError::MemoryFlags);
    }
    let mut mem_mb = args.mem.as_deref().map(parse::mem_mb).transpose()?;
    let mem_per_gpu_mb = args.mem_per_gpu.as_deref().map(parse::mem_mb).transpose()?;
    if let Some(per_cpu) = args.mem_per_cpu.as_deref().map(parse::mem_mb).transpose()? {
        let cpus = match cpus_per_gpu {
            Some(c) if gpus_per_node > 0 => (c * gpus_per_node).max(per_node * cpus_per_task),
            _ => per_node * cpus_per_task,
        };
        mem_mb = Some(per_cpu * u64::from(cpus));
    }
    Ok(Memory {
        mem_mb,
        mem_per_gpu_mb,
        cpus_per_gpu,
        gpu_share_cpus,
    })
}

/// When: the time limit, the earliest start, the nice value and the warning signal.
struct Timing {
    time_limit_s: Option<u64>,
    begin_ms: Option<u64>,
    nice: i32,
    signal: Option<gsched_types::job::WarnSignal>,
    time_min_s: Option<u64>,
    deadline_ms: Option<u64>,
}

fn timing(args: &SubArgs, ctx: &SubmitContext) -> Result<Timing, ResolveError> {
    let time_limit_s = match &args.time {
        Some(t) => parse::time_limit(t).map_err(ResolveError::Time)?,
        None => None,
    };
    let begin_ms = args
        .begin
        .as_deref()
        .map(|b| crate::when::parse_at(b, ctx.now).map_err(ResolveError::Begin))
        .transpose()?
        .filter(|b| *b > ctx.now.timestamp_millis().max(0) as u64);
    let nice = match args.nice.as_deref() {
        None => 0,
        Some(n) => n
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| (-10_000..=10_000).contains(n))
            .ok_or_else(|| ResolveError::Nice(n.to_string()))?,
    };
    let signal = args.signal.as_deref().map(parse::warn_signal).transpose()?;
    let time_min_s = match &args.time_min {
        Some(t) => parse::time_limit(t)
            .map_err(|e| ResolveError::TimeMin(e.to_string()))?
            .filter(|m| *m > 0),
        None => None,
    };
    if let (Some(min), Some(limit)) = (time_min_s, time_limit_s.filter(|l| *l > 0))
        && min > limit
    {
        return Err(ResolveError::TimeMin(format!(
            "{min} s is more than --time's {limit} s"
        )));
    }
    let deadline_ms = args
        .deadline
        .as_deref()
        .map(|d| crate::when::parse_at(d, ctx.now).map_err(ResolveError::Deadline))
        .transpose()?;
    Ok(Timing {
        time_limit_s,
        begin_ms,
        nice,
        signal,
        time_min_s,
        deadline_ms,
    })
}

fn launch_mode(
    args: &SubArgs,
    script_text: Option<&str>,
    as_sbatch: bool,
) -> Result<LaunchMode, ResolveError> {
    Ok(match args.launch.as_deref() {
        Some("batch") if args.torchrun => {
            return Err(ResolveError::TorchrunBatch);
        }
        Some("batch") => LaunchMode::Batch,
        Some(_) => LaunchMode::EachNode,
        None if !args.torchrun
            && (as_sbatch || script_text.is_some_and(super::directives::has_sbatch_lines)) =>
        {
            LaunchMode::Batch
        }
        None => LaunchMode::EachNode,
    })
}

/// Where it may run: required and excluded nodes, whole nodes or not.
struct Placement {
    nodelist: Vec<String>,
    exclude: Vec<String>,
    exclusive: bool,
}

/// The nodes `--nodelist` and `--nodefile` name (hostlists separated by commas or
/// whitespace; the file's relative to the submit directory), each once, in order.
fn required_nodes(args: &SubArgs, ctx: &SubmitContext) -> Result<Vec<String>, ResolveError> {
    let mut text = args.nodelist.clone().unwrap_or_default();
    if let Some(file) = &args.nodefile {
        let bytes = read_named(ctx, "--nodefile", file)?;
        text.push(',');
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    let mut nodes: Vec<String> = Vec::new();
    for list in text
        .split(|c: char| c.is_whitespace())
        .filter(|l| !l.is_empty())
    {
        for n in hostlist::expand(list).map_err(InputError::from)? {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    Ok(nodes)
}

/// A file an option names, relative to the submit directory.
fn read_named(
    ctx: &SubmitContext,
    flag: &'static str,
    file: &str,
) -> Result<Vec<u8>, ResolveError> {
    let path = std::path::Path::new(&ctx.cwd).join(file);
    (ctx.read_file)(&path).map_err(|e| ResolveError::File {
        flag,
        path: path.display().to_string(),
        error: e.to_string(),
    })
}

/// `--export-file`'s `NAME=value` entries, separated by NUL characters as sbatch reads
/// them (a file descriptor number from 3 up reads that descriptor).
fn export_file(
    args: &SubArgs,
    ctx: &SubmitContext,
) -> Result<Option<Vec<(String, String)>>, ResolveError> {
    let Some(file) = &args.export_file else {
        return Ok(None);
    };
    let name = match file.parse::<u32>() {
        Ok(fd) if fd >= 3 => format!("/proc/self/fd/{fd}"),
        _ => file.clone(),
    };
    let bytes = read_named(ctx, "--export-file", &name)?;
    let mut out = Vec::new();
    for entry in bytes.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        match entry.split_once('=') {
            Some((k, v)) if !k.is_empty() => out.push((k.to_string(), v.to_string())),
            _ => return Err(ResolveError::ExportName(entry.into_owned())),
        }
    }
    Ok(Some(out))
}

fn placement(args: &SubArgs, nodelist: Vec<String>, nodes: u32) -> Result<Placement, ResolveError> {
    let exclude = args
        .exclude
        .as_deref()
        .map(hostlist::expand)
        .transpose()
        .map_err(InputError::from)?
        .unwrap_or_default();
    if nodelist.len() as u32 > nodes {
        return Err(ResolveError::NodelistTooLong {
            named: nodelist.len(),
            nodes,
        });
    }
    if let Some(n) = nodelist.iter().find(|n| exclude.contains(n)) {
        return Err(ResolveError::RequiredAndExcluded(n.clone()));
    }
    let exclusive = match args.exclusive.as_deref() {
        None => false,
        Some("node" | "" | "user" | "mcs" | "topo") => true,
        Some(other) => {
            return Err(ResolveError::Exclusive(other.to_string()));
        }
    };
    Ok(Placement {
        nodelist,
        exclude,
        exclusive,
    })
}

/// What the job runs: the script (or --wrap's, or torchrun's program) and its name.
struct Program {
    script: String,
    script_args: Vec<String>,
    torchrun: Option<TorchrunSpec>,
    default_name: String,
}

fn program(
    args: &SubArgs,
    script_text: Option<String>,
    script_name: Option<&str>,
) -> Result<Program, ResolveError> {
    let (script, script_args, torchrun, default_name) = if args.torchrun {
        let Some((program, rest)) = args.script.split_first() else {
            return Err(ResolveError::TorchrunProgram);
        };
        let extra = args
            .torchrun_args
            .as_deref()
            .map(split_words)
            .transpose()
            .map_err(ResolveError::TorchrunArgs)?
            .unwrap_or_default();
        (
            String::new(),
            Vec::new(),
            Some(TorchrunSpec {
                program: program.clone(),
                args: rest.to_vec(),
                extra_args: extra,
            }),
            program.rsplit('/').next().unwrap_or(program).to_string(),
        )
    } else if let Some(w) = &args.wrap {
        (
            format!("#!/bin/sh\n# This script was created by gsub --wrap\n{w}\n"),
            Vec::new(),
            None,
            "wrap".to_string(),
        )
    } else {
        let text = script_text.ok_or(ResolveError::NoScript)?;
        if text.trim().is_empty() {
            return Err(ResolveError::EmptyScript);
        }
        let args_rest = args.script.iter().skip(1).cloned().collect();
        (
            text,
            args_rest,
            None,
            script_name
                .map(|n| n.rsplit('/').next().unwrap_or(n).to_string())
                .unwrap_or_else(|| "gsub".into()),
        )
    };
    Ok(Program {
        script,
        script_args,
        torchrun,
        default_name,
    })
}

/// The submitting shell's environment, over the user's login environment when
/// `--get-user-env` asks for it (sbatch's own variables win, as slurmd merges them;
/// `--export=NONE` ignores the option, as Slurm 22.05 does).
fn with_login_env<'a>(
    args: &SubArgs,
    ctx: &'a SubmitContext,
) -> Result<std::borrow::Cow<'a, BTreeMap<String, String>>, ResolveError> {
    use std::borrow::Cow;
    let Some(value) = &args.get_user_env else {
        return Ok(Cow::Borrowed(&ctx.env));
    };
    let how = crate::login_env::UserEnv::parse(value).map_err(ResolveError::UserEnv)?;
    let none = args
        .export
        .as_deref()
        .is_some_and(|s| s.split(',').any(|i| i.trim() == "NONE"));
    if none {
        return Ok(Cow::Borrowed(&ctx.env));
    }
    let user = args
        .uid
        .as_deref()
        .filter(|u| u.parse::<u32>().is_err())
        .unwrap_or(&ctx.user);
    let mut env = (ctx.login_env)(user, how).map_err(ResolveError::LoginEnv)?;
    env.extend(ctx.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(Cow::Owned(env))
}

/// What `--export` passes to the job.
struct Exported {
    /// Inherited from the submitting shell (gsched's NCCL/CUDA settings win over these).
    env: BTreeMap<String, String>,
    /// Given explicitly (these win over gsched's settings).
    overrides: BTreeMap<String, String>,
}

/// `--export`: ALL (default), NONE, or NAME[=VALUE] items (with or without ALL). With
/// `--export-file` (`file`), the file's variables stand for the submitting shell's, as
/// in sbatch (`--export=NONE` still passes none of them).
fn export(
    spec: Option<&str>,
    current: &BTreeMap<String, String>,
    file: Option<Vec<(String, String)>>,
) -> Result<Exported, ResolveError> {
    let none = spec.is_some_and(|s| s.split(',').any(|i| i.trim() == "NONE"));
    let from_file: BTreeMap<String, String>;
    let current = match file {
        Some(entries) if !none => {
            let path = current.get("PATH").map(|p| ("PATH".to_string(), p.clone()));
            from_file = path.into_iter().chain(entries).collect();
            &from_file
        }
        _ => current,
    };
    let spec = spec.unwrap_or("ALL");
    let mut env = BTreeMap::new();
    let mut overrides = BTreeMap::new();
    let mut all = false;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "ALL" => all = true,
            "NONE" | "NIL" => {}
            _ => match item.split_once('=') {
                Some((k, v)) => {
                    if k.is_empty() {
                        return Err(ResolveError::ExportName(item.to_string()));
                    }
                    overrides.insert(k.to_string(), v.to_string());
                }
                None => {
                    if let Some(v) = current.get(item) {
                        overrides.insert(item.to_string(), v.clone());
                    }
                }
            },
        }
    }
    if all {
        env = current
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("SLURM_")
                    && !k.starts_with("GSCHED_JOB")
                    && *k != "CUDA_VISIBLE_DEVICES"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    } else if let Some(p) = current.get("PATH") {
        env.insert("PATH".into(), p.clone());
    }
    Ok(Exported { env, overrides })
}

/// The dry-run document: the request resolved, as `gsub --dry-run --json` prints it.
pub fn dry_run_json(spec: &JobSpec, ctx: &SubmitContext) -> serde_json::Value {
    let user = if spec.user.is_empty() && spec.uid.is_none() {
        ctx.user.clone()
    } else {
        spec.user.clone()
    };
    serde_json::json!({
        "job_name": spec.name,
        "user": user,
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "gpu_type": spec.gpu_type,
        "ntasks": spec.ntasks,
        "ntasks_per_node": spec.ntasks_per_node,
        "cpus_per_task": spec.cpus_per_task,
        "cpus_per_gpu": spec.cpus_per_gpu,
        "gpus_per_task": spec.gpus_per_task,
        "mem_mb": spec.mem_mb,
        "mem_per_gpu_mb": spec.mem_per_gpu_mb,
        "time_limit_s": spec.time_limit_s,
        "signal": spec.signal,
        "begin_ms": spec.begin_ms,
        "nice": spec.nice,
        "launch": spec.launch,
        "partition": spec.partition,
        "account": spec.account,
        "qos": spec.qos,
        "output": spec.output.clone().unwrap_or_else(|| if spec.array.is_some() { "gsched-%A_%a.out".into() } else { "gsched-%j.out".into() }),
        "error": spec.error,
        "workdir": spec.workdir,
        "requeue": spec.requeue,
        "exclusive": spec.exclusive,
        "array": spec.array,
        "array_limit": spec.array_limit,
        "constraint": spec.constraint,
        "nodelist": spec.nodelist,
        "exclude": spec.exclude,
        "dependency": spec.dependency,
        "hold": spec.hold,
        "script_args": spec.script_args,
        "torchrun": spec.torchrun,
        "export_overrides": spec.env_overrides,
    })
}
