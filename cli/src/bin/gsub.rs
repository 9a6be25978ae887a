//! `gsub`: submit a batch job, sbatch-style.

use clap::CommandFactory;
use clap::Parser;
use gsched_cli::client::{Client, controller_list, describe, die, die_status, request_id};
use gsched_cli::outln;
use gsched_cli::sbatch::sources::{self, SourceError};
use gsched_cli::sbatch::{SubArgs, SubmitContext, dry_run_json, resolve};
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb::{CheckRequest, SubmitRequest};
use gsched_types::api::CheckReply;
use gsched_types::job::JobSpec;
use std::io::Read;

fn main() {
    let raw: Vec<String> = gsched_cli::text_args("gsub");
    let first = match SubArgs::try_parse_from(&raw) {
        Ok(a) => a,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            e.exit()
        }
        Err(e) => match gsched_cli::getopt::words(&SubArgs::command(), &e, &raw) {
            Some(words) => gsched_cli::getopt::fail(&tool(), &words),
            None => die(
                "gsub",
                e.to_string().trim_start_matches("error: ").trim_end(),
            ),
        },
    };
    if first.usage {
        outln!("{}", SubArgs::command().render_usage());
        return;
    }
    let (text, name) = script(&first);
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let (args, action) = sources::read(&raw, text.as_deref(), &env).unwrap_or_else(|e| match e {
        SourceError::Grammar(words) => gsched_cli::getopt::fail(&tool(), &words),
        e => die_status("gsub", &e, e.exit_status()),
    });
    let quiet = args.quiet || gsched_cli::invoked_as() == "sbatch";
    let ctx = SubmitContext::here();
    let build = |args: &SubArgs| build_spec(args, text.clone(), name.as_deref(), &ctx);
    let mut spec = build(&args).unwrap_or_else(|e| die_status("gsub", &e, e.exit_status()));
    for (flag, pattern) in [("--output", &spec.output), ("--error", &spec.error)] {
        if let Some(p) = pattern {
            check_output(flag, p, &spec.workdir, quiet).unwrap_or_else(|e| die("gsub", e));
        }
    }
    let rt = gsched_cli::runtime();
    if action == sources::Action::DryRun {
        return rt.block_on(dry_run(&args, &spec, &ctx));
    }
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    if action == sources::Action::TestOnly {
        if let Some(wider) = spread(&rt, &mut client, &args, &spec, &build) {
            spec = wider;
        }
        return test_only(&rt, &mut client, &spec);
    }
    let submit = |client: &mut Client, spec: &JobSpec| {
        let req = SubmitRequest::carrying(spec).with_request_id(request_id());
        rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.submit(req).await }
        }))
    };
    let mut reply = submit(&mut client, &spec);
    if let Err(s) = &reply
        && never_fits(s)
        && let Some(wider) = spread(&rt, &mut client, &args, &spec, &build)
    {
        reply = submit(&mut client, &wider);
    }
    match reply {
        Ok(r) => {
            let id = r.job_ids.first().copied().unwrap_or(0);
            if args.parsable {
                outln!("{id}");
            } else if gsched_cli::invoked_as() == "sbatch" {
                outln!("Submitted batch job {id}");
            } else {
                outln!("Submitted job {id}");
            }
            if args.wait {
                std::process::exit(wait_for(&rt, &mut client, id));
            }
        }
        Err(s) => die("gsub", describe(&s)),
    }
}

/// The job `args` ask for, with sbatch's own defaults when run as `sbatch`: its output
/// file name (scripts and tools look for slurm-*.out) and opening it afresh.
fn build_spec(
    args: &SubArgs,
    text: Option<String>,
    name: Option<&str>,
    ctx: &SubmitContext,
) -> Result<JobSpec, gsched_cli::sbatch::ResolveError> {
    let mut spec = resolve(args, text, name, ctx)?;
    if gsched_cli::invoked_as() == "sbatch" && spec.open_mode.is_none() {
        spec.open_mode = Some(gsched_types::job::OpenMode::Truncate);
    }
    if spec.output.is_none() && gsched_cli::invoked_as() == "sbatch" {
        spec.output = Some(if spec.array.is_some() {
            "slurm-%A_%a.out".into()
        } else {
            "slurm-%j.out".into()
        });
    }
    Ok(spec)
}

/// The name the user ran this as (`sbatch` through its link), for getopt's words.
fn tool() -> String {
    match gsched_cli::invoked_as().as_str() {
        "sbatch" => "sbatch".into(),
        _ => "gsub".into(),
    }
}

/// Whether the controller refused a job as one no node set could ever run.
fn never_fits(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::InvalidArgument && s.message().contains("can never run here")
}

/// sbatch's node count where none is fixed (`sbatch::wider_node_counts`): when the job
/// could never run on the fewest nodes, the job as if `-N k` had been given for the least
/// k that the controller says could run; `None` when there is no such k.
fn spread(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    args: &SubArgs,
    spec: &JobSpec,
    build: &dyn Fn(&SubArgs) -> Result<JobSpec, gsched_cli::sbatch::ResolveError>,
) -> Option<JobSpec> {
    for k in gsched_cli::sbatch::wider_node_counts(args, spec) {
        let mut wider = args.clone();
        wider.nodes = Some(k.to_string());
        let Ok(candidate) = build(&wider) else {
            continue;
        };
        let req = CheckRequest::carrying(&candidate);
        let fits = rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.check(req).await }
        }));
        match fits {
            Ok(_) => return Some(candidate),
            Err(s) if never_fits(&s) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// The batch script's text and path (`None` for `--wrap` and `--torchrun`); from stdin
/// when no path is given, as sbatch reads it.
fn script(args: &SubArgs) -> (Option<String>, Option<String>) {
    if args.torchrun || args.wrap.is_some() {
        return (None, None);
    }
    match args.script.first() {
        Some(path) => {
            // sbatch's words (opt.c's _get_script_buffer).
            let bytes = std::fs::read(path)
                .unwrap_or_else(|_| die(&tool(), format!("Unable to open file {path}")));
            let text = String::from_utf8(bytes)
                .unwrap_or_else(|_| die("gsub", format!("batch script {path} is not UTF-8 text")));
            (Some(text), Some(path.clone()))
        }
        None => {
            let mut buf = Vec::new();
            if std::io::stdin().read_to_end(&mut buf).is_err() || buf.is_empty() {
                die(
                    "gsub",
                    "no batch script given: gsub [options] script.sh [args], or --wrap 'command'",
                );
            }
            let text = String::from_utf8(buf)
                .unwrap_or_else(|_| die("gsub", "the batch script on stdin is not UTF-8 text"));
            (Some(text), None)
        }
    }
}

/// `--test-only`: where and when the job would start if it were submitted now, from the
/// scheduler's plan over the queue as it is (sbatch's wording); submits nothing.
fn test_only(rt: &tokio::runtime::Runtime, client: &mut Client, spec: &JobSpec) {
    let req = CheckRequest::carrying(spec);
    let reply = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.check(req).await }
        }))
        .unwrap_or_else(|s| die("gsub", describe(&s)));
    let check = gsched_cli::doc_of(&reply, "gsub");
    let gpus = spec.nodes * spec.gpus_per_node;
    let part = spec.partition.as_deref().unwrap_or("the default partition");
    match (check.expected_start_ms, &check.allocation_now) {
        (Some(t), alloc) => {
            let nodes: Vec<String> = alloc
                .iter()
                .flat_map(|a| a.nodes.iter().map(|n| n.node.clone()))
                .collect();
            let on = if nodes.is_empty() {
                String::new()
            } else {
                format!(" on nodes {}", gsched_types::hostlist::compress(&nodes))
            };
            eprintln!(
                "gsub: Job to start at {} using {gpus} GPUs{on} in {part}",
                gsched_types::parse::format_timestamp(t)
            );
        }
        (None, _) => eprintln!(
            "gsub: Job would wait ({}); the plan gives no start time yet",
            check.reason_now.as_deref().unwrap_or("Priority")
        ),
    }
}

/// `--wait`: polls until the job (every task of an array) has ended; returns the exit
/// status to leave with, sbatch's way: the highest task exit code, 1 for a job that ended
/// any other way than COMPLETED without one.
fn wait_for(rt: &tokio::runtime::Runtime, client: &mut Client, id: u64) -> i32 {
    let query = gsched_cli::JobQuery {
        include_finished: true,
        jobs: vec![gsched_types::api::JobSelector { id, task: None }],
        ..Default::default()
    };
    let mut pause = std::time::Duration::from_millis(250);
    loop {
        let jobs = gsched_cli::fetch_jobs(rt, client, &query, "gsub").jobs;
        if !jobs.is_empty() && jobs.iter().all(|j| j.state.is_terminal()) {
            // A job its node refused to start wrote no output that could say why.
            for j in &jobs {
                if let Some(f) = j
                    .failure
                    .as_ref()
                    .filter(|f| matches!(f.kind, gsched_types::failure::FailureKind::LaunchFailed))
                {
                    eprintln!(
                        "gsub: job {} ended {} before it ran: {f}",
                        j.display_id,
                        j.state.name()
                    );
                }
            }
            return jobs
                .iter()
                .map(|j| match (j.state, j.exit_code) {
                    (_, Some(c)) if c != 0 => c,
                    (gsched_types::job::JobState::Completed, _) => 0,
                    _ => 1,
                })
                .max()
                .unwrap_or(1);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_secs(2));
    }
}

/// Checks an output file pattern here, as the submitting user, for what can be checked
/// before the job runs: a directory that exists but cannot be written, or an existing
/// file that cannot. (Nodes may mount other file systems: a directory missing here is
/// only a warning.) Parts with `%` patterns are left to the node.
fn check_output(flag: &str, pattern: &str, workdir: &str, quiet: bool) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    let path = if pattern.starts_with('/') {
        std::path::PathBuf::from(pattern)
    } else {
        std::path::Path::new(workdir).join(pattern)
    };
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    if dir.to_string_lossy().contains('%') {
        return Ok(());
    }
    if !dir.is_dir() {
        if quiet {
            return Ok(());
        }
        eprintln!(
            "gsub: warning: {flag} {pattern}: directory {} does not exist here; it must exist on the job's nodes",
            dir.display()
        );
        return Ok(());
    }
    let denied = |what: &std::path::Path| {
        format!(
            "{flag} {pattern}: you cannot write {} (checked as you on this host); choose a file in a directory you own",
            what.display()
        )
    };
    let file_pattern = path
        .file_name()
        .is_some_and(|f| f.to_string_lossy().contains('%'));
    if !file_pattern && path.exists() {
        return access(&path, AccessFlags::W_OK).map_err(|_| denied(&path));
    }
    access(dir, AccessFlags::W_OK | AccessFlags::X_OK).map_err(|_| denied(dir))
}

/// Prints the resolved request; with a reachable controller, also where the job would
/// run on an idle cluster and the environment each node's first task would get.
async fn dry_run(args: &SubArgs, spec: &JobSpec, ctx: &SubmitContext) {
    let mut doc = dry_run_json(spec, ctx);
    let mut client = Client::new(controller_list(args.controllers.as_deref()))
        .with_budget(std::time::Duration::from_secs(3));
    let req = CheckRequest::carrying(spec);
    match client
        .call(|mut c| {
            let req = req.clone();
            async move { c.check(req).await }
        })
        .await
    {
        Ok(reply) => match reply.document() {
            Ok(check) => {
                doc["check"] = serde_json::json!(check.message);
                if let Some(env) = environments(spec, &check) {
                    doc["environment"] = env;
                }
            }
            Err(e) => doc["check"] = serde_json::json!(format!("malformed reply: {e}")),
        },
        Err(s) => {
            doc["check"] =
                serde_json::json!(format!("not checked against the cluster: {}", describe(&s)))
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        for (k, v) in doc.as_object().into_iter().flatten() {
            if k != "environment" {
                outln!("{k:<18} {v}");
            }
        }
        if let Some(env) = doc.get("environment").and_then(|e| e.as_object()) {
            for (node, vars) in env {
                outln!("\nenvironment on {node}:");
                for (k, v) in vars.as_object().into_iter().flatten() {
                    if k.starts_with("SLURM_")
                        || k.starts_with("GSCHED_")
                        || k.starts_with("NCCL_")
                        || k.starts_with("CUDA_")
                        || k.starts_with("MASTER_")
                        || k.starts_with("TORCH")
                        || ["RANK", "WORLD_SIZE", "LOCAL_RANK"].contains(&k.as_str())
                    {
                        outln!("  {k}={}", v.as_str().unwrap_or(""));
                    }
                }
            }
        }
    }
}

fn environments(spec: &JobSpec, check: &CheckReply) -> Option<serde_json::Value> {
    let alloc = check.allocation_if_idle.as_ref()?;
    let topologies = &check.topologies;
    let nodes: Vec<String> = alloc.nodes.iter().map(|n| n.node.clone()).collect();
    let mut out = serde_json::Map::new();
    for (rank, na) in alloc.nodes.iter().enumerate() {
        let topo = topologies.get(&na.node)?;
        let launch = gsched_types::launch::LaunchSpec {
            job: gsched_types::JobId(0),
            array: None,
            array_span: None,
            attempt: 0,
            node_rank: rank as u32,
            nodes: nodes.clone(),
            spec: spec.clone(),
            allocation: alloc.clone(),
            node_alloc: na.clone(),
            start_ms: 0,
            time_limit_s: spec.time_limit_s,
            kill_grace_s: None,
            idle_threshold_pct: None,
        };
        let net = gsched_launch::net_plan(topo, &na.gpus, None);
        let env = gsched_launch::task_env(&gsched_launch::TaskEnv {
            launch: &launch,
            node: &na.node,
            local_task: 0,
            net: &net,
            log_dir: "<step log dir>",
            agent_env: &Default::default(),
            home: None,
            gpu_map: &[],
            devices_filtered: false,
        });
        let shown: serde_json::Map<String, serde_json::Value> = env
            .into_iter()
            .filter(|(k, _)| !spec.env.contains_key(k) || k.starts_with("NCCL_"))
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        out.insert(na.node.clone(), serde_json::Value::Object(shown));
    }
    Some(serde_json::Value::Object(out))
}
