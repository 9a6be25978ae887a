//! `gsub`'s options: sbatch's names (with its unambiguous abbreviations), `#SBATCH` and
//! `#GSUB` directives read from the script (the command line wins), and the resolution of
//! all of it into a [`JobSpec`] the way sbatch resolves it. Options sbatch has that gsched
//! does not act on yet are accepted with a warning that names them; options sbatch does
//! not know are refused.

use clap::{ArgAction, Parser};
use gsched_types::hostlist;
use gsched_types::job::{JobSpec, TorchrunSpec};
use gsched_types::parse;
use std::collections::BTreeMap;

/// Submit a batch job (sbatch-compatible).
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "gsub",
    version,
    about,
    infer_long_args = true,
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct SubArgs {
    /// Number of nodes (all-or-nothing gang).
    #[arg(short = 'N', long = "nodes")]
    pub nodes: Option<String>,
    /// GPUs on every node: N or TYPE:N.
    #[arg(long = "gpus-per-node")]
    pub gpus_per_node: Option<String>,
    /// Generic resources: gpu[:TYPE]:N.
    #[arg(long = "gres")]
    pub gres: Option<String>,
    /// Total GPUs for the job: N or TYPE:N (spread evenly over the nodes).
    #[arg(short = 'G', long = "gpus")]
    pub gpus: Option<String>,
    /// GPUs per task: N or TYPE:N.
    #[arg(long = "gpus-per-task")]
    pub gpus_per_task: Option<String>,
    /// Number of tasks.
    #[arg(short = 'n', long = "ntasks")]
    pub ntasks: Option<String>,
    #[arg(long = "ntasks-per-node")]
    pub ntasks_per_node: Option<String>,
    #[arg(short = 'c', long = "cpus-per-task")]
    pub cpus_per_task: Option<String>,
    #[arg(long = "cpus-per-gpu")]
    pub cpus_per_gpu: Option<String>,
    /// Memory per node (MB, or with K/M/G/T); 0 = the whole node.
    #[arg(long = "mem")]
    pub mem: Option<String>,
    #[arg(long = "mem-per-gpu")]
    pub mem_per_gpu: Option<String>,
    #[arg(long = "mem-per-cpu")]
    pub mem_per_cpu: Option<String>,
    /// Time limit: MIN, MIN:SEC, H:M:S, D-H, D-H:M or D-H:M:S.
    #[arg(short = 't', long = "time")]
    pub time: Option<String>,
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    #[arg(short = 'J', long = "job-name")]
    pub job_name: Option<String>,
    /// stdout file pattern (%j %x %N %u %n %A %a).
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    /// stderr file pattern (default: with stdout).
    #[arg(short = 'e', long = "error")]
    pub error: Option<String>,
    /// Working directory of the job.
    #[arg(short = 'D', long = "chdir")]
    pub chdir: Option<String>,
    /// Environment to pass: ALL (default), NONE, or a list NAME[=VALUE],...
    #[arg(long = "export")]
    pub export: Option<String>,
    /// Requeue on infrastructure failures (lost GPU or node, NCCL errors).
    #[arg(long = "requeue", action = ArgAction::SetTrue, overrides_with = "no_requeue")]
    pub requeue: bool,
    #[arg(long = "no-requeue", action = ArgAction::SetTrue, overrides_with = "requeue")]
    pub no_requeue: bool,
    /// Whole nodes only.
    #[arg(long = "exclusive", num_args = 0..=1, default_missing_value = "node")]
    pub exclusive: Option<String>,
    /// Job array: 0-15, 1,3,5, 0-20:5, with %N to limit running tasks.
    #[arg(short = 'a', long = "array")]
    pub array: Option<String>,
    #[arg(short = 'A', long = "account")]
    pub account: Option<String>,
    #[arg(short = 'q', long = "qos")]
    pub qos: Option<String>,
    /// Required node features or GPU model (a100, rtx4090...), '&' or ',' separated.
    #[arg(short = 'C', long = "constraint")]
    pub constraint: Option<String>,
    /// Nodes the job must use (hostlist).
    #[arg(short = 'w', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Nodes the job must not use (hostlist).
    #[arg(short = 'x', long = "exclude")]
    pub exclude: Option<String>,
    /// afterok:ID[:ID], afterany:ID, afternotok:ID, after:ID, singleton.
    #[arg(short = 'd', long = "dependency")]
    pub dependency: Option<String>,
    /// Submit held (release with `gctl release`).
    #[arg(short = 'H', long = "hold", action = ArgAction::SetTrue)]
    pub hold: bool,
    /// Print only the job id.
    #[arg(long = "parsable", action = ArgAction::SetTrue)]
    pub parsable: bool,
    /// Run this command line instead of a script.
    #[arg(long = "wrap")]
    pub wrap: Option<String>,
    /// Submit as this user (root only), like sbatch --uid.
    #[arg(long = "uid")]
    pub uid: Option<String>,
    /// Run `torchrun` on every node with the job's rendezvous (the positional arguments are
    /// the training program and its arguments).
    #[arg(long = "torchrun", action = ArgAction::SetTrue)]
    pub torchrun: bool,
    /// Extra torchrun flags for --torchrun (one string, split on spaces).
    #[arg(long = "torchrun-args", allow_hyphen_values = true)]
    pub torchrun_args: Option<String>,
    /// Automatic requeues allowed for this job.
    #[arg(long = "max-restarts")]
    pub max_restarts: Option<String>,
    /// Print the resolved request and submit nothing.
    #[arg(long = "dry-run", action = ArgAction::SetTrue)]
    pub dry_run: bool,
    /// With --dry-run: print JSON.
    #[arg(long = "json", action = ArgAction::SetTrue)]
    pub json: bool,
    /// Controllers to contact (HOST:PORT,...).
    #[arg(long = "controllers")]
    pub controllers: Option<String>,

    // sbatch options accepted and ignored (with a warning).
    #[arg(long, hide = true)]
    pub hint: Option<String>,
    #[arg(long, hide = true)]
    pub reservation: Option<String>,
    #[arg(long = "mail-type", hide = true)]
    pub mail_type: Option<String>,
    #[arg(long = "mail-user", hide = true)]
    pub mail_user: Option<String>,
    #[arg(long, hide = true)]
    pub signal: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "100")]
    pub nice: Option<String>,
    #[arg(long, hide = true)]
    pub comment: Option<String>,
    #[arg(long, hide = true)]
    pub wckey: Option<String>,
    #[arg(short = 'L', long, hide = true)]
    pub licenses: Option<String>,
    #[arg(long, hide = true)]
    pub begin: Option<String>,
    #[arg(long, hide = true)]
    pub deadline: Option<String>,
    #[arg(long = "open-mode", hide = true)]
    pub open_mode: Option<String>,
    #[arg(long = "get-user-env", hide = true, num_args = 0..=1, default_missing_value = "")]
    pub get_user_env: Option<String>,
    #[arg(short = 'k', long = "no-kill", hide = true, num_args = 0..=1, default_missing_value = "")]
    pub no_kill: Option<String>,
    #[arg(long = "kill-on-invalid-dep", hide = true)]
    pub kill_on_invalid_dep: Option<String>,
    #[arg(long, hide = true)]
    pub switches: Option<String>,
    #[arg(short = 'm', long, hide = true)]
    pub distribution: Option<String>,
    #[arg(long = "mem-bind", hide = true)]
    pub mem_bind: Option<String>,
    #[arg(long = "cpu-bind", hide = true)]
    pub cpu_bind: Option<String>,
    #[arg(long = "gpu-bind", hide = true)]
    pub gpu_bind: Option<String>,
    #[arg(long = "gpu-freq", hide = true)]
    pub gpu_freq: Option<String>,
    #[arg(long = "threads-per-core", hide = true)]
    pub threads_per_core: Option<String>,
    #[arg(long = "sockets-per-node", hide = true)]
    pub sockets_per_node: Option<String>,
    #[arg(long = "cores-per-socket", hide = true)]
    pub cores_per_socket: Option<String>,
    #[arg(long = "ntasks-per-core", hide = true)]
    pub ntasks_per_core: Option<String>,
    #[arg(long = "ntasks-per-socket", hide = true)]
    pub ntasks_per_socket: Option<String>,
    #[arg(long = "ntasks-per-gpu", hide = true)]
    pub ntasks_per_gpu: Option<String>,
    #[arg(long = "gpus-per-socket", hide = true)]
    pub gpus_per_socket: Option<String>,
    #[arg(long, hide = true)]
    pub tmp: Option<String>,
    #[arg(long, hide = true)]
    pub priority: Option<String>,
    #[arg(long, hide = true)]
    pub profile: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "ALL")]
    pub propagate: Option<String>,
    #[arg(short = 'W', long, hide = true, action = ArgAction::SetTrue)]
    pub wait: bool,
    #[arg(long = "wait-all-nodes", hide = true)]
    pub wait_all_nodes: Option<String>,
    #[arg(long, hide = true)]
    pub container: Option<String>,
    #[arg(long, hide = true)]
    pub network: Option<String>,
    #[arg(long = "acctg-freq", hide = true)]
    pub acctg_freq: Option<String>,
    #[arg(short = 'M', long, hide = true)]
    pub clusters: Option<String>,
    #[arg(long = "spread-job", hide = true, action = ArgAction::SetTrue)]
    pub spread_job: bool,
    #[arg(long = "use-min-nodes", hide = true, action = ArgAction::SetTrue)]
    pub use_min_nodes: bool,
    #[arg(short = 'S', long = "core-spec", hide = true)]
    pub core_spec: Option<String>,
    #[arg(long = "thread-spec", hide = true)]
    pub thread_spec: Option<String>,
    #[arg(short = 'O', long, hide = true, action = ArgAction::SetTrue)]
    pub overcommit: bool,
    #[arg(short = 's', long, hide = true, action = ArgAction::SetTrue)]
    pub oversubscribe: bool,
    #[arg(short = 'Q', long, hide = true, action = ArgAction::SetTrue)]
    pub quiet: bool,
    #[arg(short = 'v', long, hide = true, action = ArgAction::Count)]
    pub verbose: u8,
    #[arg(long = "test-only", hide = true, action = ArgAction::SetTrue)]
    pub test_only: bool,
    #[arg(long = "time-min", hide = true)]
    pub time_min: Option<String>,
    #[arg(long, hide = true)]
    pub mincpus: Option<String>,
    #[arg(long, hide = true)]
    pub gid: Option<String>,
    #[arg(short = 'I', long, hide = true, num_args = 0..=1, default_missing_value = "")]
    pub immediate: Option<String>,
    #[arg(short = 'F', long, hide = true)]
    pub nodefile: Option<String>,
    #[arg(long = "export-file", hide = true)]
    pub export_file: Option<String>,

    /// The batch script (or, with --torchrun, the training program) and its arguments.
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub script: Vec<String>,
}

impl SubArgs {
    /// Options given that gsched accepts but does not act on yet.
    pub fn ignored(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        macro_rules! ign {
            ($($field:ident => $name:literal),* $(,)?) => { $( if self.$field.is_some() { v.push($name); } )* };
        }
        ign!(hint => "--hint", reservation => "--reservation", mail_type => "--mail-type", mail_user => "--mail-user", signal => "--signal", nice => "--nice",
            comment => "--comment", wckey => "--wckey", licenses => "--licenses", begin => "--begin", deadline => "--deadline", open_mode => "--open-mode",
            get_user_env => "--get-user-env", no_kill => "--no-kill", kill_on_invalid_dep => "--kill-on-invalid-dep", switches => "--switches",
            distribution => "--distribution", mem_bind => "--mem-bind", cpu_bind => "--cpu-bind", gpu_bind => "--gpu-bind", gpu_freq => "--gpu-freq",
            threads_per_core => "--threads-per-core", sockets_per_node => "--sockets-per-node", cores_per_socket => "--cores-per-socket",
            ntasks_per_core => "--ntasks-per-core", ntasks_per_socket => "--ntasks-per-socket", ntasks_per_gpu => "--ntasks-per-gpu",
            gpus_per_socket => "--gpus-per-socket", tmp => "--tmp", priority => "--priority", profile => "--profile", propagate => "--propagate",
            wait_all_nodes => "--wait-all-nodes", container => "--container", network => "--network", acctg_freq => "--acctg-freq", clusters => "--clusters",
            core_spec => "--core-spec", thread_spec => "--thread-spec", time_min => "--time-min", mincpus => "--mincpus", gid => "--gid",
            immediate => "--immediate", nodefile => "--nodefile", export_file => "--export-file");
        if self.wait {
            v.push("--wait");
        }
        if self.spread_job {
            v.push("--spread-job");
        }
        if self.use_min_nodes {
            v.push("--use-min-nodes");
        }
        if self.overcommit {
            v.push("--overcommit");
        }
        if self.oversubscribe {
            v.push("--oversubscribe");
        }
        if self.test_only {
            v.push("--test-only");
        }
        v
    }
}

/// Splits a directive line into words with shell-like quoting; a word starting with `#`
/// ends the directive (a trailing comment).
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '#') if !in_word => break,
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("unbalanced quote in directive: {line}"));
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// `#SBATCH`/`#GSUB` directive words, read from the top of the script up to the first
/// command, as sbatch does.
pub fn directives(script: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (n, line) in script.lines().enumerate() {
        let t = line.trim();
        if n == 0 && t.starts_with("#!") {
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        for prefix in ["#SBATCH", "#GSUB"] {
            if let Some(rest) = t.strip_prefix(prefix)
                && (rest.starts_with(char::is_whitespace) || rest.is_empty())
            {
                out.extend(split_words(rest).map_err(|e| format!("line {}: {e}", n + 1))?);
            }
        }
    }
    Ok(out)
}

/// The submitting side's facts gsub resolves against.
pub struct SubmitContext {
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub user: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub is_root: bool,
}

fn count(v: &Option<String>, flag: &str) -> Result<Option<u32>, String> {
    v.as_deref().map(|s| parse::count(s, flag)).transpose()
}

/// Resolves options and script into a job spec, as sbatch would.
pub fn resolve(
    args: &SubArgs,
    script_text: Option<String>,
    script_name: Option<&str>,
    ctx: &SubmitContext,
) -> Result<JobSpec, String> {
    let nodes = match args.nodes.as_deref() {
        None => 1,
        Some(s) => {
            // sbatch accepts MIN-MAX; gsched takes the minimum.
            let first = if s.starts_with('-') {
                s
            } else {
                s.split_once('-').map(|(a, _)| a).unwrap_or(s)
            };
            let n = parse::count(first, "--nodes")?;
            if n == 0 {
                return Err("--nodes must be at least 1".into());
            }
            n
        }
    };
    let mut ntasks = count(&args.ntasks, "--ntasks")?;
    let mut per_node = count(&args.ntasks_per_node, "--ntasks-per-node")?;
    if ntasks == Some(0) || per_node == Some(0) {
        return Err("task counts must be at least 1".into());
    }
    match (ntasks, per_node) {
        (Some(n), Some(m)) if n != nodes * m && n > nodes * m => {
            return Err(format!(
                "--ntasks={n} does not fit --nodes={nodes} x --ntasks-per-node={m}"
            ));
        }
        (Some(n), None) => {
            if n % nodes != 0 {
                return Err(format!(
                    "--ntasks={n} must be a multiple of --nodes={nodes} (gsched places the same number of tasks on every node)"
                ));
            }
            per_node = Some(n / nodes);
        }
        (None, Some(m)) => ntasks = Some(nodes * m),
        _ => {}
    }
    let per_node = per_node.unwrap_or(1);
    let ntasks = ntasks.unwrap_or(nodes * per_node);
    let cpus_per_task = count(&args.cpus_per_task, "--cpus-per-task")?.unwrap_or(1);
    if cpus_per_task == 0 {
        return Err("--cpus-per-task must be at least 1".into());
    }

    // GPUs: every spelling must agree.
    let mut gpu: Option<(u32, Option<String>, &str)> = None;
    let mut agree = |count: u32, ty: Option<String>, flag: &'static str| -> Result<(), String> {
        match &gpu {
            Some((c, t, other)) if *c != count || (ty.is_some() && t.is_some() && *t != ty) => Err(
                format!("{flag} asks for {count} GPUs per node but {other} asks for {c}"),
            ),
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
            return Err(format!(
                "--gpus={} cannot be spread evenly over {nodes} nodes",
                r.count
            ));
        }
        agree(r.count / nodes, r.gpu_type, "--gpus")?;
    }
    let (gpus_per_node, gpu_type) = gpu.map(|(c, t, _)| (c, t)).unwrap_or((0, None));

    // torchrun starts one worker per GPU from a single task: give each worker a CPU of its
    // own unless the user said otherwise (one CPU for eight workers is a silent slowdown once
    // the cpuset is enforced).
    let cpus_per_gpu = match count(&args.cpus_per_gpu, "--cpus-per-gpu")? {
        None if args.torchrun && args.cpus_per_task.is_none() && gpus_per_node > 0 => Some(1),
        explicit => explicit,
    };
    let mem_flags = [
        args.mem.is_some(),
        args.mem_per_gpu.is_some(),
        args.mem_per_cpu.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if mem_flags > 1 {
        return Err("--mem, --mem-per-gpu and --mem-per-cpu are mutually exclusive".into());
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
    let time_limit_s = match &args.time {
        Some(t) => parse::time_limit(t).map_err(|e| format!("--time: {e}"))?,
        None => None,
    };
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
    let nodelist = args
        .nodelist
        .as_deref()
        .map(hostlist::expand)
        .transpose()?
        .unwrap_or_default();
    let exclude = args
        .exclude
        .as_deref()
        .map(hostlist::expand)
        .transpose()?
        .unwrap_or_default();
    if nodelist.len() as u32 > nodes {
        return Err(format!(
            "--nodelist names {} nodes but --nodes is {nodes}",
            nodelist.len()
        ));
    }
    if let Some(n) = nodelist.iter().find(|n| exclude.contains(n)) {
        return Err(format!(
            "node {n} is both required (--nodelist) and excluded (--exclude)"
        ));
    }
    let workdir = match &args.chdir {
        Some(d) if d.starts_with('/') => d.clone(),
        Some(d) => format!("{}/{d}", ctx.cwd.trim_end_matches('/')),
        None => ctx.cwd.clone(),
    };
    let (env, env_overrides) = export(args.export.as_deref(), &ctx.env)?;
    let (user, uid) = match &args.uid {
        Some(u) if !ctx.is_root => return Err(format!("--uid={u} needs root")),
        Some(u) => match u.parse::<u32>() {
            Ok(n) => (
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(n))
                    .ok()
                    .flatten()
                    .map(|x| x.name)
                    .ok_or(format!("no user with uid {n}"))?,
                Some(n),
            ),
            Err(_) => (
                u.clone(),
                nix::unistd::User::from_name(u)
                    .ok()
                    .flatten()
                    .map(|x| x.uid.as_raw()),
            ),
        },
        None => (ctx.user.clone(), ctx.uid),
    };
    let max_restarts = count(&args.max_restarts, "--max-restarts")?;
    let (script, script_args, torchrun, default_name) = if args.torchrun {
        let Some((program, rest)) = args.script.split_first() else {
            return Err(
                "--torchrun needs the training program: gsub --torchrun train.py [args]".into(),
            );
        };
        let extra = args
            .torchrun_args
            .as_deref()
            .map(split_words)
            .transpose()?
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
        let text = script_text.ok_or("no batch script given")?;
        if text.trim().is_empty() {
            return Err("the batch script is empty".into());
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
    let exclusive = match args.exclusive.as_deref() {
        None => false,
        Some("node" | "" | "user" | "mcs" | "topo") => true,
        Some(other) => {
            return Err(format!(
                "--exclusive={other}: use --exclusive or --exclusive=user"
            ));
        }
    };
    Ok(JobSpec {
        name: args.job_name.clone().unwrap_or(default_name),
        user,
        uid,
        gid: ctx.gid,
        account: args.account.clone(),
        partition: args.partition.clone(),
        qos: args.qos.clone(),
        nodes,
        gpus_per_node,
        gpu_type,
        ntasks,
        ntasks_per_node: per_node,
        cpus_per_task,
        cpus_per_gpu,
        gpus_per_task,
        mem_mb,
        mem_per_gpu_mb,
        time_limit_s,
        output: args.output.clone(),
        error: args.error.clone(),
        requeue: args.requeue && !args.no_requeue,
        exclusive,
        array,
        array_limit,
        constraint: args.constraint.clone(),
        nodelist,
        exclude,
        dependency,
        workdir,
        submit_dir: ctx.cwd.clone(),
        script,
        script_args,
        env,
        env_overrides,
        torchrun,
        hold: args.hold,
        max_restarts,
        umask: None,
    })
}

/// `--export`: ALL (default), NONE, or NAME[=VALUE] items (with or without ALL).
fn export(
    spec: Option<&str>,
    current: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>), String> {
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
                        return Err(format!("--export item '{item}' has no name"));
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
    Ok((env, overrides))
}

/// The dry-run document: the request resolved, as `gsub --dry-run --json` prints it.
pub fn dry_run_json(spec: &JobSpec) -> serde_json::Value {
    serde_json::json!({
        "job_name": spec.name,
        "user": spec.user,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> SubmitContext {
        let mut env = BTreeMap::new();
        env.insert("PATH".into(), "/usr/bin".into());
        env.insert("NCCL_DEBUG".into(), "INFO".into());
        SubmitContext {
            cwd: "/home/a".into(),
            env,
            user: "alice".into(),
            uid: Some(1000),
            gid: Some(1000),
            is_root: false,
        }
    }

    fn parse_args(v: &[&str]) -> SubArgs {
        SubArgs::try_parse_from(std::iter::once("gsub").chain(v.iter().copied())).unwrap()
    }

    #[test]
    fn directives_stop_at_first_command_and_cli_wins() {
        let script = "#!/bin/bash\n#SBATCH -N 2 --gpus-per-node=4 # two nodes\n#SBATCH --job-name 'my job'\n# plain comment\n#GSUB --time=1:00:00\necho hi\n#SBATCH --nodes=9\n";
        let d = directives(script).unwrap();
        assert_eq!(
            d,
            vec![
                "-N",
                "2",
                "--gpus-per-node=4",
                "--job-name",
                "my job",
                "--time=1:00:00"
            ]
        );
        let mut argv = vec!["gsub".to_string()];
        argv.extend(d);
        argv.extend(["-N".to_string(), "3".to_string(), "train.sh".to_string()]);
        let args = SubArgs::try_parse_from(argv).unwrap();
        let spec = resolve(&args, Some(script.into()), Some("train.sh"), &ctx()).unwrap();
        assert_eq!(spec.nodes, 3, "the command line wins");
        assert_eq!(spec.gpus_per_node, 4);
        assert_eq!(spec.name, "my job");
        assert_eq!(spec.time_limit_s, Some(3600));
    }

    #[test]
    fn gpus_per_task_resolves_per_node() {
        let a = parse_args(&[
            "--ntasks-per-node=2",
            "--gpus-per-task=2",
            "-N",
            "2",
            "x.sh",
        ]);
        let s = resolve(&a, Some("#!/bin/sh\ntrue".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.gpus_per_node, s.ntasks, s.ntasks_per_node), (4, 4, 2));
        let a = parse_args(&["--gres=gpu:a100:8", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.gpus_per_node, s.gpu_type.as_deref()), (8, Some("a100")));
        let a = parse_args(&["--gres=gpu:8", "--gpus-per-node=4", "x.sh"]);
        assert!(
            resolve(&a, Some("true".into()), Some("x.sh"), &ctx())
                .unwrap_err()
                .contains("asks for")
        );
    }

    #[test]
    fn torchrun_jobs_get_a_cpu_per_worker_unless_told_otherwise() {
        let a = parse_args(&["--gpus-per-node=4", "--torchrun", "train.py"]);
        let s = resolve(&a, None, None, &ctx()).unwrap();
        assert_eq!((s.cpus_per_gpu, s.cpus_per_task), (Some(1), 1));
        let a = parse_args(&[
            "--gpus-per-node=4",
            "--cpus-per-task=16",
            "--torchrun",
            "train.py",
        ]);
        let s = resolve(&a, None, None, &ctx()).unwrap();
        assert_eq!((s.cpus_per_gpu, s.cpus_per_task), (None, 16));
        let a = parse_args(&["--gpus-per-node=4", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            s.cpus_per_gpu, None,
            "batch scripts keep Slurm's one CPU per task"
        );
    }

    #[test]
    fn abbreviations_and_unknown_options() {
        let a = parse_args(&["--err=e.log", "--job=j", "x.sh"]);
        assert_eq!(a.error.as_deref(), Some("e.log"));
        assert_eq!(a.job_name.as_deref(), Some("j"));
        assert!(SubArgs::try_parse_from(["gsub", "--frobnicate", "x.sh"]).is_err());
        let a = parse_args(&["--hint=nomultithread", "--reservation=r", "x.sh"]);
        assert_eq!(a.ignored(), vec!["--hint", "--reservation"]);
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (argv, needle) in [
            (vec!["-N", "-2", "x.sh"], "negative"),
            (vec!["-N", "two", "x.sh"], "--nodes"),
            (vec!["--time=1:2:3:4", "x.sh"], "--time"),
            (vec!["--mem=lots", "x.sh"], "memory"),
            (vec!["-n", "3", "-N", "2", "x.sh"], "multiple"),
            (
                vec!["--mem=1G", "--mem-per-gpu=1G", "x.sh"],
                "mutually exclusive",
            ),
        ] {
            let a = SubArgs::try_parse_from(std::iter::once("gsub").chain(argv.iter().copied()));
            let err = match a {
                Ok(a) => resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap_err(),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(needle), "{argv:?}: {err}");
        }
    }

    #[test]
    fn export_keeps_explicit_values_apart() {
        let a = parse_args(&["--export=ALL,NCCL_SOCKET_IFNAME=ib0,NCCL_DEBUG", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            s.env_overrides
                .get("NCCL_SOCKET_IFNAME")
                .map(String::as_str),
            Some("ib0")
        );
        assert_eq!(
            s.env_overrides.get("NCCL_DEBUG").map(String::as_str),
            Some("INFO")
        );
        assert!(s.env.contains_key("PATH"));
        let a = parse_args(&["--export=NONE", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(!s.env.contains_key("NCCL_DEBUG"));
    }
}
