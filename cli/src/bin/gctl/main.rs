//! `gctl`: cluster administration and inspection (scontrol's role): controller status,
//! job and node details, drain/resume, requeue/hold/release, controller membership,
//! certificates, tokens, the doctor and burn-in. One module per subcommand; this file
//! parses the command line and hands each subcommand to its module.

mod admin;
mod assoc;
mod certs;
mod checks;
mod jobs;
mod reservation;
mod show;
mod status;
mod token;

use clap::{Parser, Subcommand};
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::outln;
use gsched_types::api::JobAction;
use gsched_types::assoc::AssocEntity;

#[derive(Parser, Debug)]
#[command(name = "gctl", version, about = "gsched administration")]
struct Args {
    #[arg(long, global = true)]
    controllers: Option<String>,
    /// No informational messages from actions (scontrol -Q); errors are still printed.
    #[arg(long, global = true, hide = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
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
        what: show::Show,
    },
    /// Admin reservations: GPUs or nodes set aside for some users over a window, or a
    /// maintenance window (scontrol create|update|delete|show reservation).
    #[command(alias = "reservations")]
    Reservation {
        #[command(subcommand)]
        action: reservation::Resv,
    },
    /// Accounts: a tree (Parent) with fair-share weights and limits (sacctmgr ... account).
    Account {
        #[command(subcommand)]
        action: assoc::Assoc,
    },
    /// Users' accounts and limits (sacctmgr ... user).
    User {
        #[command(subcommand)]
        action: assoc::Assoc,
    },
    /// QOS: priority, per-user limits, preemption (sacctmgr ... qos).
    Qos {
        #[command(subcommand)]
        action: assoc::Assoc,
    },
    /// Drain or resume a node.
    Node {
        #[command(subcommand)]
        action: admin::NodeAction,
    },
    /// Add or remove a controller (one change at a time).
    Controllers {
        #[command(subcommand)]
        action: admin::Members,
    },
    /// The cluster's certificates: `init` a CA, then `issue` one per controller and node.
    Certs {
        #[command(subcommand)]
        action: certs::Certs,
    },
    /// Requeue running jobs (ids, comma or space separated; -w NODES: every job on them).
    Requeue {
        jobs: Vec<String>,
        #[arg(short = 'w', long = "nodelist", value_delimiter = ',')]
        nodes: Vec<String>,
    },
    /// Change a job (120 changes every task of array 120, or none): its time limit
    /// (yours lower; an operator's either way; a running job's only lower).
    Update {
        job: String,
        /// The new limit, in sbatch's forms (30, 1:00:00, 2-00:00, UNLIMITED).
        #[arg(long = "time", short = 't')]
        time: String,
    },
    /// Hold jobs (120 holds every task of array 120): a pending job waits until released,
    /// a running one runs on and waits if it is requeued (as Slurm's hold).
    Hold { jobs: Vec<String> },
    /// Release held jobs (one that is not held is left as it is).
    Release { jobs: Vec<String> },
    /// The cluster's usual faults, from what the nodes registered: PCIe links trained
    /// down, hot or withheld GPUs, nodes not answering, training NICs far from the GPUs or
    /// on the management address, MTU disagreement, RDMA ports down.
    Doctor(checks::Doctor),
    /// The bring-up guide's staged tests, as ordinary jobs through the scheduler: each GPU
    /// alone, each node's all-reduce, node pairs, all nodes; bus bandwidth judged against
    /// what the wiring should carry; a report (Markdown, JSON, SVG plots).
    BurnIn(checks::BurnIn),
    /// A token for the HTTP API and the dashboard, for you (scontrol token): prints
    /// GSCHED_TOKEN=...; paste it into the dashboard's login, or send it as
    /// `Authorization: Bearer TOKEN`.
    Token {
        #[command(subcommand)]
        action: Option<token::TokenAction>,
        /// How long it is good for: seconds (as scontrol token lifespan=), or
        /// HH:MM:SS / D-HH:MM:SS; at most a week.
        #[arg(long, default_value = "8:00:00")]
        lifetime: String,
        #[arg(long)]
        json: bool,
    },
    /// The fair-share table (sshare): each account's and user's shares, GPU-hours decayed
    /// by the configured half-life, and the fair-share factor the scheduler gives them.
    Share {
        /// Only these users (comma-separated), with their accounts' lines.
        #[arg(short = 'u', long = "users", value_delimiter = ',')]
        users: Vec<String>,
        /// Only these accounts (comma-separated).
        #[arg(short = 'A', long = "accounts", value_delimiter = ',')]
        accounts: Vec<String>,
        /// Every user (sshare's -a; shown anyway).
        #[arg(short = 'a', long = "all")]
        _all: bool,
        /// Fields split by `|`.
        #[arg(short = 'P', long = "parsable2")]
        parsable: bool,
        /// No header line.
        #[arg(short = 'n', long = "noheader")]
        noheader: bool,
        #[arg(long)]
        json: bool,
    },
    /// Link Slurm's command names (sbatch, srun, salloc, squeue, sinfo, scancel, sacct,
    /// seff, sreport, sshare, scontrol, sacctmgr) in DIR to the gsched tools next to this one; put
    /// DIR on users' PATH (and give agents `--slurm-names DIR` so jobs find them too).
    SlurmNames { dir: std::path::PathBuf },
}

fn main() {
    let args = match gsched_cli::invoked_as().as_str() {
        "scontrol" => Args::parse_from(scontrol_args()),
        "sacctmgr" => Args::parse_from(
            std::iter::once("sacctmgr".to_string()).chain(
                gsched_cli::slurm::sacctmgr(
                    gsched_cli::text_args("sacctmgr")
                        .get(1..)
                        .unwrap_or_default(),
                )
                .unwrap_or_else(|e| die("sacctmgr", e)),
            ),
        ),
        "sshare" => Args::parse_from(
            ["sshare".to_string(), "share".into()]
                .into_iter()
                .chain(gsched_cli::text_args("sshare").into_iter().skip(1)),
        ),
        _ => Args::parse(),
    };
    let rt = gsched_cli::runtime();
    let addrs = controller_list(args.controllers.as_deref());
    let mut client = Client::new(addrs.clone());
    let (rt, client) = (&rt, &mut client);
    let controllers = args.controllers;
    if args.quiet
        && !matches!(
            args.cmd,
            Cmd::Show { .. } | Cmd::Status { .. } | Cmd::Token { .. }
        )
    {
        quiet_stdout();
    }
    match args.cmd {
        Cmd::Status { json } => rt.block_on(status::status(client, addrs, json)),
        Cmd::Show { what } => show::run(rt, client, what),
        Cmd::Node { action } => admin::node(rt, client, action),
        Cmd::Reservation { action } => reservation::run(rt, client, action),
        Cmd::Account { action } => assoc::run(rt, client, AssocEntity::Account, action),
        Cmd::User { action } => assoc::run(rt, client, AssocEntity::User, action),
        Cmd::Qos { action } => assoc::run(rt, client, AssocEntity::Qos, action),
        Cmd::Controllers { action } => admin::controllers(rt, client, action),
        Cmd::Requeue { jobs, nodes } => jobs::act(rt, client, JobAction::Requeue, &jobs, nodes),
        Cmd::Certs { action } => certs::run(action),
        Cmd::Hold { jobs } => jobs::act(rt, client, JobAction::Hold, &jobs, Vec::new()),
        Cmd::Update { job, time } => jobs::update(rt, client, &job, &time),
        Cmd::Release { jobs } => jobs::act(rt, client, JobAction::Release, &jobs, Vec::new()),
        Cmd::Doctor(d) => checks::doctor(rt, client, d, controllers),
        Cmd::BurnIn(b) => checks::burn_in_nodes(rt, client, b, controllers),
        Cmd::Token {
            action: Some(token::TokenAction::Revoke { user, all }),
            json,
            ..
        } => token::revoke(rt, client, user, all, json),
        Cmd::Token {
            action: None,
            lifetime,
            json,
        } => token::issue(rt, client, &lifetime, json),
        Cmd::Share {
            users,
            accounts,
            parsable,
            noheader,
            json,
            ..
        } => share(rt, client, &users, &accounts, parsable, noheader, json),
        Cmd::SlurmNames { dir } => slurm_names(&dir),
    }
}

/// `gctl share` (sshare).
fn share(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    users: &[String],
    accounts: &[String],
    parsable: bool,
    noheader: bool,
    json: bool,
) {
    use gsched_cli::report::{Layout, fetch, render_share};
    use gsched_types::report::{ReportReply, ReportRequest};
    let ReportReply::Share { mut rows } = fetch(rt, client, &ReportRequest::Share, "gctl") else {
        die("gctl", "the controller answered with another report");
    };
    let accounts_of_users: Vec<String> = rows
        .iter()
        .filter(|r| users.contains(&r.user))
        .map(|r| r.account.clone())
        .collect();
    rows.retain(|r| {
        (accounts.is_empty() || accounts.iter().any(|a| a.eq_ignore_ascii_case(&r.account)))
            && (users.is_empty()
                || users.contains(&r.user)
                || (r.user.is_empty() && accounts_of_users.contains(&r.account)))
    });
    if json {
        gsched_cli::print_json(&serde_json::json!({ "rows": rows }));
        return;
    }
    let layout = if parsable {
        Layout::Parsable
    } else {
        Layout::Table
    };
    gsched_cli::out!("{}", render_share(&rows, layout, !noheader));
}

/// `gctl slurm-names DIR`: links Slurm's command names to the tools next to this one.
fn slurm_names(dir: &std::path::Path) {
    let exe = std::env::current_exe().unwrap_or_else(|e| die("gctl", e));
    let bin = exe.parent().unwrap_or(std::path::Path::new("/"));
    let (made, missing) =
        gsched_cli::slurm::make_links(dir, bin).unwrap_or_else(|e| die("gctl", e));
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

/// Sends what the command would print on stdout nowhere (`--quiet`); stderr stays.
fn quiet_stdout() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto stdout's descriptor with a descriptor this process owns.
        unsafe {
            libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO);
        }
    }
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
