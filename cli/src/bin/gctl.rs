//! `gctl`: cluster administration and inspection (scontrol's role): controller status,
//! job and node details, drain/resume, requeue/hold/release, controller membership.

use clap::{Parser, Subcommand};
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, controller_list, describe, die, request_id};
use gsched_cli::{out, outln};
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb::{self, MembershipRequest, NodeAdminRequest};
use gsched_proto::tls::PeerIdentity;
use gsched_types::api::{
    JobAction, JobRow, JobSelection, JobSelector, Role, StatusList, StatusRow,
};

#[derive(Parser, Debug)]
#[command(name = "gctl", version, about = "gsched administration")]
struct Args {
    #[arg(long, global = true)]
    controllers: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// What `gctl token` does besides issuing one.
#[derive(Subcommand, Debug)]
enum TokenAction {
    /// Revoke the tokens issued so far: yours, a user's (--user, admins) or everyone's
    /// (--all, admins). Tokens issued afterwards work.
    Revoke {
        #[arg(long, short = 'u')]
        user: Option<String>,
        #[arg(long, conflicts_with = "user")]
        all: bool,
    },
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Role, term, commit/applied index, lag and state digest of every reachable controller.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Details of a job or node.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Drain or resume a node.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Add or remove a controller (one change at a time).
    Controllers {
        #[command(subcommand)]
        action: Members,
    },
    /// The cluster's certificates: `init` a CA, then `issue` one per controller and node.
    Certs {
        #[command(subcommand)]
        action: Certs,
    },
    /// Requeue running jobs (ids, comma or space separated; -w NODES: every job on them).
    Requeue {
        jobs: Vec<String>,
        #[arg(short = 'w', long = "nodelist", value_delimiter = ',')]
        nodes: Vec<String>,
    },
    /// Change a job: its time limit (yours lower; an operator's either way; a running
    /// job's only lower).
    Update {
        job: u64,
        /// The new limit, in sbatch's forms (30, 1:00:00, 2-00:00, UNLIMITED).
        #[arg(long = "time", short = 't')]
        time: String,
    },
    /// Hold pending jobs (120 holds every task of array 120).
    Hold { jobs: Vec<String> },
    /// Release held jobs.
    Release { jobs: Vec<String> },
    /// The cluster's usual faults, from what the nodes registered: PCIe links trained
    /// down, hot or withheld GPUs, nodes not answering, training NICs far from the GPUs or
    /// on the management address, MTU disagreement, RDMA ports down.
    Doctor {
        /// Only these nodes (default: all).
        nodes: Vec<String>,
        /// Print {"findings":[...]}.
        #[arg(long)]
        json: bool,
        /// Also probe on the nodes and between them, as a job (one task per node, no
        /// GPU): training-network reachability and MTU between every pair, clock skew,
        /// free space on --paths, the interface NCCL is told to use.
        #[arg(long)]
        probe: bool,
        /// Paths every node should have, with room (comma separated; with --probe).
        #[arg(long, value_delimiter = ',')]
        paths: Vec<String>,
        /// The Python the probe runs with on the nodes (standard library only).
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(short = 'p', long)]
        partition: Option<String>,
    },
    /// The bring-up guide's staged tests, as ordinary jobs through the scheduler: each GPU
    /// alone, each node's all-reduce, node pairs, all nodes; bus bandwidth judged against
    /// what the wiring should carry; a report (Markdown, JSON, SVG plots).
    BurnIn {
        /// Only these nodes (a host list; default: every usable node).
        #[arg(short = 'w', long = "nodes")]
        nodes: Option<String>,
        /// Small messages and few iterations: a few minutes.
        #[arg(long)]
        quick: bool,
        /// Where to write the report (default: ./burnin-YYYYMMDD-HHMMSS).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The Python with PyTorch on the nodes.
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(short = 'p', long)]
        partition: Option<String>,
        /// Each run's time limit (sbatch's forms).
        #[arg(short = 't', long = "time", default_value = "20")]
        time: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A token for the HTTP API and the dashboard, for you (scontrol token): prints
    /// GSCHED_TOKEN=...; paste it into the dashboard's login, or send it as
    /// `Authorization: Bearer TOKEN`.
    Token {
        #[command(subcommand)]
        action: Option<TokenAction>,
        /// How long it is good for: seconds (as scontrol token lifespan=), or
        /// HH:MM:SS / D-HH:MM:SS; at most a week.
        #[arg(long, default_value = "8:00:00")]
        lifetime: String,
        #[arg(long)]
        json: bool,
    },
    /// Link Slurm's command names (sbatch, squeue, sinfo, scancel, sacct, scontrol) in DIR
    /// to the gsched tools next to this one; put DIR on users' PATH (and give agents
    /// `--slurm-names DIR` so jobs find them too).
    SlurmNames { dir: std::path::PathBuf },
}

#[derive(Subcommand, Debug)]
enum Certs {
    /// Make a new cluster CA: DIR/ca.pem (for every host) and DIR/ca.key (keep it safe).
    Init {
        #[arg(long, default_value = "/etc/gsched/tls")]
        dir: std::path::PathBuf,
        /// A name for the cluster, shown in the CA's subject.
        #[arg(long, default_value = "gsched")]
        cluster: String,
    },
    /// Issue a certificate and key for a controller or a node, signed by DIR's CA.
    Issue {
        #[arg(long, default_value = "/etc/gsched/tls")]
        dir: std::path::PathBuf,
        /// A node agent's certificate, for the node NAME (its `gagentd --name`).
        #[arg(
            long,
            conflicts_with = "controller",
            required_unless_present = "controller"
        )]
        node: Option<String>,
        /// A controller's certificate, for controller ID (its `gctld --id`).
        #[arg(long)]
        controller: Option<u64>,
        /// A host name or address the holder is reached by (repeat; controllers).
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum Show {
    Job {
        job: String,
        #[arg(long)]
        json: bool,
    },
    Node {
        node: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum NodeAction {
    Drain {
        node: String,
        #[arg(long)]
        reason: String,
    },
    Resume {
        node: String,
    },
}

#[derive(Subcommand, Debug)]
enum Members {
    /// ID=HOST:PORT
    Add {
        member: String,
    },
    Remove {
        id: u64,
    },
}

fn main() {
    let args = if gsched_cli::invoked_as() == "scontrol" {
        Args::parse_from(scontrol_args())
    } else {
        Args::parse()
    };
    let rt = gsched_cli::runtime();
    let addrs = controller_list(args.controllers.as_deref());
    let mut client = Client::new(addrs.clone());
    match args.cmd {
        Cmd::Status { json } => rt.block_on(status(&mut client, addrs, json)),
        Cmd::Show {
            what: Show::Job { job, json },
        } => {
            let sel = JobSelector::parse(&job).unwrap_or_else(|e| die("gctl", e));
            let query = JobQuery {
                include_finished: true,
                detail: true,
                jobs: vec![sel],
                ..Default::default()
            };
            let jobs = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gctl").jobs;
            // `120` is job 120 itself here, not every task of array 120.
            let Some(j) = jobs
                .iter()
                .find(|j| sel.task.is_some() || j.job_id.0 == sel.id)
            else {
                die(
                    "gctl",
                    format!(
                        "job {job} not found (finished jobs are kept up to the retention limit)"
                    ),
                )
            };
            if json {
                gsched_cli::print_json(j);
            } else {
                print_job(j);
            }
        }
        Cmd::Show {
            what: Show::Node { node, json },
        } => {
            let nodes = gsched_cli::fetch_nodes(&rt, &mut client, false, "gctl").nodes;
            let Some(n) = nodes.iter().find(|n| n.name == node) else {
                die("gctl", format!("no node named {node}"))
            };
            if json {
                gsched_cli::print_json(n);
            } else {
                outln!(
                    "NodeName={} State={} Online={} Address={} TrainingAddr={}",
                    n.name,
                    n.drain_reason
                        .as_ref()
                        .map(|r| format!("DRAIN Reason=\"{r}\""))
                        .unwrap_or_else(|| "UP".into()),
                    n.online,
                    n.address,
                    n.training_addr
                );
                outln!(
                    "   GPUs={} Model={} GPUsInUse={:?} BadGPUs={:?} Jobs={:?}",
                    n.gpus_total,
                    n.gpu_model.as_deref().unwrap_or("-"),
                    n.gpus_used,
                    n.bad_gpus,
                    n.jobs.iter().map(|j| j.0).collect::<Vec<_>>()
                );
                outln!(
                    "   CPUsInUse={} MemoryUsedMB={} Features={:?} AgentVersion={}",
                    n.cpus_used,
                    n.memory_used_mb,
                    n.features,
                    n.agent_version
                );
                for h in &n.health {
                    outln!("   Health: {:?} {} {}", h.severity, h.kind, h.message);
                    if let Some(f) = h
                        .finding
                        .as_ref()
                        .filter(|f| !h.message.contains(&f.evidence))
                    {
                        outln!("      Evidence={}", f.evidence);
                    }
                }
            }
        }
        Cmd::Node { action } => {
            let (node, act, reason) = match action {
                NodeAction::Drain { node, reason } => (node, pb::NodeAction::Drain, reason),
                NodeAction::Resume { node } => (node, pb::NodeAction::Resume, String::new()),
            };
            let req = NodeAdminRequest {
                request_id: request_id(),
                node: node.clone(),
                action: act as i32,
                reason,
            };
            let r = rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.node_admin(req).await }
            }));
            match r {
                Ok(r) => outln!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Controllers { action } => {
            let req = match action {
                Members::Add { member } => {
                    let (id, addr) = member
                        .split_once('=')
                        .unwrap_or_else(|| die("gctl", "use gctl controllers add ID=HOST:PORT"));
                    let id: u64 = id
                        .parse()
                        .unwrap_or_else(|_| die("gctl", format!("invalid controller id '{id}'")));
                    MembershipRequest {
                        action: pb::MembershipAction::Add as i32,
                        id,
                        address: addr.into(),
                    }
                }
                Members::Remove { id } => MembershipRequest {
                    action: pb::MembershipAction::Remove as i32,
                    id,
                    address: String::new(),
                },
            };
            let r = rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.membership(req).await }
            }));
            match r {
                Ok(r) => outln!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Requeue { jobs, nodes } => {
            act(&rt, &mut client, JobAction::Requeue, &jobs, nodes);
        }
        Cmd::Certs { action } => certs(action),
        Cmd::Hold { jobs } => act(&rt, &mut client, JobAction::Hold, &jobs, Vec::new()),
        Cmd::Update { job, time } => {
            let limit = gsched_types::parse::time_limit(&time)
                .unwrap_or_else(|e| die("gctl", format!("--time {time}: {e}")))
                .unwrap_or(0);
            let body = gsched_types::api::UpdateJobRequest {
                job,
                time_limit_s: Some(limit),
            };
            let req = pb::UpdateJobRequest::carrying(&body).with_request_id(request_id());
            match rt.block_on(client.call(|mut c| {
                let req = req.clone();
                async move { c.update_job(req).await }
            })) {
                Ok(r) => outln!("{}", r.message),
                Err(s) => die("gctl", describe(&s)),
            }
        }
        Cmd::Release { jobs } => act(&rt, &mut client, JobAction::Release, &jobs, Vec::new()),
        Cmd::Doctor {
            nodes,
            json,
            probe,
            paths,
            python,
            partition,
        } => {
            let all = gsched_cli::fetch_nodes(&rt, &mut client, true, "gctl").nodes;
            let picked: Vec<_> = all
                .into_iter()
                .filter(|n| nodes.is_empty() || nodes.contains(&n.name))
                .collect();
            if picked.is_empty() {
                die("gctl", "no such node registered");
            }
            let mut findings = gsched_cli::doctor::check(&picked);
            if probe {
                // Nodes that cannot take a job are already findings above.
                let up: Vec<(String, String)> = picked
                    .iter()
                    .filter(|n| {
                        n.online
                            && n.responding
                            && matches!(n.admin, gsched_types::node::NodeAdminState::Up)
                    })
                    .map(|n| (n.name.clone(), n.training_addr.clone()))
                    .collect();
                if !up.is_empty() {
                    let opts = gsched_cli::probe::Options {
                        grun: gsched_cli::grun_job::grun_binary(),
                        python,
                        partition,
                        controllers: args.controllers.clone(),
                        paths,
                    };
                    let outcome = gsched_cli::probe::run(&up, &opts);
                    let names: Vec<String> = up.into_iter().map(|(n, _)| n).collect();
                    findings.extend(gsched_cli::probe::judge::judge(
                        &outcome.reports,
                        &names,
                        &outcome.stderr_tail,
                    ));
                }
            }
            if json {
                gsched_cli::print_json(&gsched_types::findings::Findings { findings });
            } else if findings.is_empty() {
                outln!("no findings on {} node(s)", picked.len());
            } else {
                for f in &findings {
                    outln!("{}", gsched_cli::doctor::line(f));
                }
            }
        }
        Cmd::BurnIn {
            nodes,
            quick,
            out,
            python,
            partition,
            time,
            json,
        } => {
            let all = gsched_cli::fetch_nodes(&rt, &mut client, true, "gctl").nodes;
            let wanted = nodes.as_deref().map(|l| {
                gsched_types::hostlist::expand(l)
                    .unwrap_or_else(|e| die("gctl", format!("--nodes {l}: {e}")))
            });
            let picked: Vec<_> = all
                .into_iter()
                .filter(|n| wanted.as_ref().is_none_or(|w| w.contains(&n.name)))
                .collect();
            if let Some(w) = &wanted
                && let Some(missing) = w.iter().find(|n| !picked.iter().any(|p| &p.name == *n))
            {
                die(
                    "gctl",
                    format!("no node {missing} is registered (see ginfo)"),
                );
            }
            let opts = gsched_cli::burnin::exec::Options {
                grun: gsched_cli::grun_job::grun_binary(),
                python,
                quick,
                controllers: args.controllers.clone(),
                partition,
                time_limit: time,
            };
            let dir = out.unwrap_or_else(|| {
                format!("burnin-{}", chrono::Local::now().format("%Y%m%d-%H%M%S")).into()
            });
            let status = burn_in(&picked, &opts, &dir, json);
            std::process::exit(status);
        }
        Cmd::Token {
            action: Some(TokenAction::Revoke { user, all }),
            json,
            ..
        } => {
            let req = pb::RevokeTokensRequest::carrying(&gsched_types::api::RevokeTokensRequest {
                user,
                all,
            })
            .with_request_id(request_id());
            let reply = rt
                .block_on(client.call(|mut c| {
                    let req = req.clone();
                    async move { c.revoke_tokens(req).await }
                }))
                .unwrap_or_else(|s| die("gctl", describe(&s)));
            let done = gsched_cli::doc_of(&reply, "gctl");
            if json {
                gsched_cli::print_json(&done);
            } else {
                outln!(
                    "tokens of {} issued before {} are revoked",
                    done.user.as_deref().unwrap_or("every user"),
                    gsched_types::parse::format_timestamp(done.revoked_before_ms)
                );
            }
        }
        Cmd::Token {
            action: None,
            lifetime,
            json,
        } => {
            let lifetime_s = match lifetime.parse::<u64>() {
                Ok(seconds) => seconds,
                Err(_) => gsched_types::parse::time_limit(&lifetime)
                    .unwrap_or_else(|e| die("gctl", format!("--lifetime {lifetime}: {e}")))
                    .unwrap_or(gsched_types::api::MAX_TOKEN_LIFETIME_S),
            };
            let req =
                pb::IssueTokenRequest::carrying(&gsched_types::api::TokenRequest { lifetime_s });
            let reply = rt
                .block_on(client.call(|mut c| {
                    let req = req.clone();
                    async move { c.issue_token(req).await }
                }))
                .unwrap_or_else(|s| die("gctl", describe(&s)));
            let token = gsched_cli::doc_of(&reply, "gctl");
            if json {
                gsched_cli::print_json(&token);
            } else {
                outln!("GSCHED_TOKEN={}", token.token);
                eprintln!(
                    "gctl: a token for {} until {}",
                    token.user,
                    gsched_types::parse::format_timestamp(token.expires_ms)
                );
            }
        }
        Cmd::SlurmNames { dir } => {
            let exe = std::env::current_exe().unwrap_or_else(|e| die("gctl", e));
            let bin = exe.parent().unwrap_or(std::path::Path::new("/"));
            let (made, missing) =
                gsched_cli::slurm::make_links(&dir, bin).unwrap_or_else(|e| die("gctl", e));
            for link in made {
                outln!("{}", link.display());
            }
            for tool in missing {
                eprintln!(
                    "gctl: warning: {tool} is not in {}: its Slurm name was not linked",
                    bin.display()
                );
            }
        }
    }
}

/// Plans, runs, judges and writes up a burn-in of `nodes`; returns gctl's exit status
/// (1 when a run failed or a finding asks for attention).
fn burn_in(
    nodes: &[gsched_types::api::NodeRow],
    opts: &gsched_cli::burnin::exec::Options,
    dir: &std::path::Path,
    json: bool,
) -> i32 {
    use gsched_cli::burnin::{Report, exec, judge, plan, report};
    let (runs, skipped) = plan::plan(nodes);
    for line in &skipped {
        eprintln!("gctl: burn-in: skipped {line}");
    }
    if runs.is_empty() {
        die(
            "gctl",
            "burn-in: no node can take a run (see ginfo and gctl doctor)",
        );
    }
    let started = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    eprintln!(
        "gctl: burn-in: {} run(s) on {} node(s), stage by stage; report in {}",
        runs.len(),
        nodes.len(),
        dir.display()
    );
    let results = exec::execute(&runs, opts, |r| {
        let what = match (&r.error, r.peak(), r.run.stage) {
            (Some(e), _, _) => format!("FAILED: {e}"),
            (None, Some(p), _) => format!(
                "{:.2} GB/s busbw at {} ({})",
                p.busbw_gbps,
                judge::size(p.bytes),
                p.backend
            ),
            (None, None, _) => format!("{} GPU(s) checked", r.gpus.len()),
        };
        eprintln!(
            "gctl: burn-in: {} {}: {what} in {:.1} s",
            r.run.stage.slug(),
            r.run.label(),
            r.seconds
        );
    });
    let rdma_nodes: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.topology.as_ref().is_some_and(|t| {
                t.nics
                    .iter()
                    .any(|x| x.rdma_device.is_some() && x.up != Some(false))
            })
        })
        .map(|n| n.name.clone())
        .collect();
    let findings = judge::judge(&results, &rdma_nodes);
    let doc = Report {
        started,
        quick: opts.quick,
        nodes: nodes
            .iter()
            .filter(|n| runs.iter().any(|r| r.nodes.contains(&n.name)))
            .map(|n| n.name.clone())
            .collect(),
        results,
        skipped,
        findings,
    };
    let files = report::write(dir, &doc).unwrap_or_else(|e| {
        die(
            "gctl",
            format!("cannot write the report in {}: {e}", dir.display()),
        )
    });
    if json {
        gsched_cli::print_json(&doc);
    } else {
        for f in &doc.findings {
            outln!("{}", gsched_cli::doctor::line(f));
        }
        if doc.cpu_only() {
            outln!(
                "note: no run reached a GPU (fake agents or no CUDA): gloo on CPUs, rates not judged"
            );
        }
        for f in &files {
            outln!("wrote {}", f.display());
        }
    }
    let attention = doc
        .findings
        .iter()
        .any(|f| f.severity >= gsched_types::findings::Severity::Warn);
    i32::from(attention)
}

/// Run as `scontrol`: answers what needs no controller, else the `gctl` arguments of the
/// same request.
fn scontrol_args() -> Vec<String> {
    use gsched_cli::slurm::{Scontrol, scontrol};
    let args: Vec<String> = gsched_cli::text_args("scontrol")
        .into_iter()
        .skip(1)
        .collect();
    let nodelist = std::env::var("SLURM_JOB_NODELIST").ok();
    let job = std::env::var("SLURM_JOB_ID").ok();
    match scontrol(&args, nodelist.as_deref(), job.as_deref()) {
        Ok(Scontrol::Print(text)) => {
            gsched_cli::out!("{text}");
            std::process::exit(0)
        }
        Ok(Scontrol::Gctl(v)) => std::iter::once("scontrol".to_string()).chain(v).collect(),
        Err(e) => die("scontrol", e),
    }
}

/// `gctl certs init|issue` (needs no controller).
fn certs(action: Certs) {
    let made = match action {
        Certs::Init { dir, cluster } => gsched_cli::certs::init(&dir, &cluster),
        Certs::Issue {
            dir,
            node,
            controller,
            hosts,
        } => {
            let who = match (node, controller) {
                (Some(n), _) => PeerIdentity::Node(n),
                (None, Some(id)) => PeerIdentity::Controller(id),
                (None, None) => die("gctl", "give --node NAME or --controller ID"),
            };
            gsched_cli::certs::issue(&dir, &who, &hosts)
        }
    };
    for path in made.unwrap_or_else(|e| die("gctl", e)) {
        outln!("wrote {path}");
    }
}

/// `gctl hold|release|requeue`: one request for every job named.
fn act(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    action: JobAction,
    jobs: &[String],
    nodes: Vec<String>,
) {
    let select = JobSelection {
        jobs: jobs
            .iter()
            .flat_map(|j| j.split(','))
            .filter(|j| !j.is_empty())
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gctl", e)))
            .collect(),
        nodes,
        ..Default::default()
    };
    if select.is_empty() {
        die(
            "gctl",
            format!("no job given: gctl {} ID...", action.verb()),
        );
    }
    let (summary, refused) = gsched_cli::act_on_jobs(rt, client, action, select, "gctl");
    let done = match action {
        JobAction::Cancel => "cancelled",
        JobAction::Hold => "held",
        JobAction::Release => "released",
        JobAction::Requeue => "requeued",
    };
    outln!("{} job(s) {done}", summary.count);
    if refused {
        std::process::exit(1);
    }
}

fn print_job(j: &JobRow) {
    outln!(
        "JobId={} JobName={} UserId={} Account={} Partition={}",
        j.display_id,
        j.name,
        j.user,
        j.account,
        j.partition
    );
    outln!(
        "   JobState={} Reason={} Restarts={} ExitCode={}",
        j.state.name(),
        j.reason,
        j.restarts,
        j.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    let time_limit = j
        .time_limit_s
        .map(gsched_types::parse::format_duration)
        .unwrap_or_else(|| "UNLIMITED".into());
    match &j.spec {
        Some(s) => {
            outln!(
                "   NumNodes={} GPUsPerNode={} GpuType={} NTasks={} CPUsPerTask={} Mem={} TimeLimit={time_limit}",
                s.nodes,
                s.gpus_per_node,
                s.gpu_type.as_deref().unwrap_or("-"),
                s.ntasks,
                s.cpus_per_task,
                s.mem_mb
                    .map(|m| format!("{m}M"))
                    .unwrap_or_else(|| "default".into()),
            );
            outln!(
                "   WorkDir={} StdOut={}",
                s.workdir,
                s.output.as_deref().unwrap_or("gsched-%j.out")
            );
        }
        None => outln!(
            "   NumNodes={} GPUsPerNode={} TimeLimit={time_limit}",
            j.nodes,
            j.gpus_per_node
        ),
    }
    if let Some(a) = &j.allocation {
        outln!(
            "   MasterAddr={} MasterPort={}",
            a.master_addr,
            a.master_port
        );
        for (rank, n) in a.nodes.iter().enumerate() {
            outln!(
                "   Node[{rank}]={} GPUs={:?} CPUs={} Mem={}M NIC={}",
                n.node,
                n.gpus,
                gsched_types::cpulist::format(&n.cpus),
                n.mem_mb,
                n.nic.as_deref().unwrap_or("-")
            );
        }
    }
    for st in &j.steps {
        outln!(
            "   Step[{}]: {:?}{}",
            st.node,
            st.state,
            st.failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = &j.failure {
        outln!("   Failure={}", f.kind.reason_name());
        outln!("   Evidence={}", f.evidence);
    }
    for w in &j.warnings {
        outln!(
            "   Warning[{}]={}: {}",
            w.node.as_deref().unwrap_or("?"),
            w.kind,
            w.action
        );
        if !w.evidence.is_empty() {
            outln!("      Evidence={}", w.evidence);
        }
    }
    for a in &j.attempts {
        outln!(
            "   Attempt[{}]: {} on {} {}",
            a.restart,
            a.state.name(),
            gsched_types::hostlist::compress(&a.nodes),
            a.failure
                .as_ref()
                .map(|f| f.to_string())
                .unwrap_or_default()
        );
    }
}

/// Asks every controller it can find (the configured ones and the peers they name) for
/// its status; fills in each one's lag behind the leader's commit index.
async fn status(client: &mut Client, addrs: Vec<String>, json: bool) {
    let mut seen: Vec<String> = addrs.clone();
    let mut rows: Vec<StatusRow> = Vec::new();
    let mut i = 0;
    while i < seen.len() {
        let addr = seen[i].clone();
        i += 1;
        let reply = client
            .call_on(&addr, |mut c| async move {
                c.status(pb::StatusRequest {}).await
            })
            .await;
        let row = reply
            .map_err(|e| e.message().to_string())
            .and_then(|r| r.document().map_err(|e| e.to_string()));
        match row {
            Ok(v) => {
                for a in v.peers.values() {
                    if !seen.contains(a) {
                        seen.push(a.clone());
                    }
                }
                if !rows.iter().any(|r| r.id == v.id) {
                    rows.push(v);
                }
            }
            Err(e) => {
                if !json {
                    eprintln!("gctl: {addr}: {e}");
                }
            }
        }
    }
    rows.sort_by_key(|r| r.id);
    let leader_commit = rows
        .iter()
        .filter(|r| r.role == Role::Leader)
        .map(|r| r.commit_index)
        .max()
        .unwrap_or(0);
    for r in &mut rows {
        r.lag = Some(leader_commit.saturating_sub(r.applied_index));
    }
    if json {
        gsched_cli::print_json(&StatusList { controllers: rows });
        return;
    }
    if rows.is_empty() {
        die("gctl", "no controller answered");
    }
    let mut t = gsched_cli::format::Table::new(&[
        ("ID", true),
        ("ADDRESS", false),
        ("ROLE", false),
        ("TERM", true),
        ("COMMIT", true),
        ("APPLIED", true),
        ("LAG", true),
        ("DIGEST", false),
        ("JOBS", true),
        ("NODES", true),
        ("DISK_MB", true),
    ]);
    for r in &rows {
        t.row(vec![
            r.id.to_string(),
            r.address.clone(),
            if r.storage_fault.is_some() {
                "DISK FAULT".into()
            } else {
                r.role.name().into()
            },
            r.term.to_string(),
            r.commit_index.to_string(),
            r.applied_index.to_string(),
            r.lag.unwrap_or(0).to_string(),
            r.state_digest.clone(),
            r.jobs.to_string(),
            r.nodes.to_string(),
            format!("{:.1}", r.disk_bytes as f64 / 1e6),
        ]);
    }
    out!("{}", t.render());
    for r in rows.iter().filter(|r| r.storage_fault.is_some()) {
        outln!(
            "controller {}: {} (free space in its --data-dir; it restarts itself every few seconds until it can write)",
            r.id,
            r.storage_fault.as_deref().unwrap_or_default()
        );
    }
}
