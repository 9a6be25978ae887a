//! `gcancel`: cancel jobs (SIGTERM, grace period, SIGKILL on every node), or with
//! `--signal` send them a signal, scancel-style.
//! Whatever it names (ids, a user's jobs, states, a partition, a name, nodes) is one
//! request and one replicated command.

use clap::Parser;
use gsched_cli::client::{Client, controller_list, current_user, die};
use gsched_types::api::{JobAction, JobSelection, JobSelector};
use gsched_types::job::JobState;

/// Cancel jobs: by id (120 cancels every task of array 120; 120_3 one task), or every job
/// of yours (or, for operators, anyone's) that matches the filters.
#[derive(Parser, Debug)]
#[command(name = "gcancel", version, about)]
struct Args {
    /// Only jobs of this user (comma separated).
    #[arg(short = 'u', long = "user", value_delimiter = ',')]
    user: Vec<String>,
    /// Only jobs of mine.
    #[arg(long = "me")]
    me: bool,
    /// Only jobs in these states (PD, R, or names).
    #[arg(short = 't', long = "state", value_delimiter = ',')]
    state: Vec<String>,
    /// Only jobs of this partition.
    #[arg(short = 'p', long = "partition")]
    partition: Option<String>,
    /// Only jobs with this name.
    #[arg(short = 'n', long = "name", alias = "jobname")]
    name: Option<String>,
    /// Only jobs running on these nodes (comma separated).
    #[arg(short = 'w', long = "nodelist", value_delimiter = ',')]
    nodelist: Vec<String>,
    /// Send this signal (a name such as USR1, or a number) instead of cancelling.
    #[arg(short = 's', long = "signal")]
    signal: Option<String>,
    /// With --signal: to the batch shell alone (which must pass it on), not every process.
    #[arg(short = 'b', long = "batch", requires = "signal")]
    batch: bool,
    #[arg(long)]
    controllers: Option<String>,
    job_ids: Vec<String>,
}

fn main() {
    let args = Args::parse();
    let mut users = args.user.clone();
    if args.me {
        users.push(current_user());
    }
    let select = JobSelection {
        jobs: args
            .job_ids
            .iter()
            .flat_map(|j| j.split(','))
            .filter(|j| !j.is_empty())
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gcancel", e)))
            .collect(),
        users,
        states: args
            .state
            .iter()
            .map(|s| {
                JobState::parse(s).unwrap_or_else(|| {
                    die(
                        "gcancel",
                        format!("invalid state '{s}': use PD, R or their names"),
                    )
                })
            })
            .collect(),
        partition: args.partition.clone(),
        name: args.name.clone(),
        nodes: args.nodelist.clone(),
    };
    if select.is_empty() {
        die(
            "gcancel",
            "no job given (gcancel ID..., or -u USER, --me, -t STATE, -p PARTITION, -n NAME, -w NODES)",
        );
    }
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let action = match &args.signal {
        Some(sig) => JobAction::Signal {
            signal: gsched_types::parse::signal(sig)
                .unwrap_or_else(|e| die("gcancel", format!("--signal: {e}"))),
            batch_only: args.batch,
        },
        None => JobAction::Cancel,
    };
    let (_, refused) = gsched_cli::act_on_jobs(&rt, &mut client, action, select, "gcancel");
    std::process::exit(i32::from(refused));
}
