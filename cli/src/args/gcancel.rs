//! `gcancel`'s options: scancel's, as Slurm's table lists them
//! (`cli/slurm-options/scancel.tsv`), and gsched's own (`--controllers`).

use clap::{ArgAction, Parser};

/// Cancel jobs: by id (120 cancels every task of array 120; 120_3 one task), or every job
/// of yours (or, for operators, anyone's) that matches the filters.
#[derive(Parser, Debug, Clone)]
#[command(name = "gcancel", version, about)]
pub struct Args {
    /// Only jobs of these users (comma separated).
    #[arg(short = 'u', long = "user", value_delimiter = ',')]
    pub user: Vec<String>,
    /// Only jobs of mine.
    #[arg(long = "me")]
    pub me: bool,
    /// Only jobs in these states (PD, R, or names).
    #[arg(short = 't', long = "state", value_delimiter = ',')]
    pub state: Vec<String>,
    /// Only jobs of this partition.
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    /// Only jobs with this name.
    #[arg(short = 'n', long = "name", alias = "jobname")]
    pub name: Option<String>,
    /// Only jobs running on these nodes (a host list).
    #[arg(short = 'w', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Only jobs of this account.
    #[arg(short = 'A', long = "account")]
    pub account: Option<String>,
    /// Only jobs of this QOS.
    #[arg(short = 'q', long = "qos")]
    pub qos: Option<String>,
    /// Only jobs of this reservation.
    #[arg(short = 'R', long = "reservation")]
    pub reservation: Option<String>,
    /// Only jobs with this wckey.
    #[arg(long = "wckey")]
    pub wckey: Option<String>,
    /// Ask before each job (`Cancel job_id=.. name=.. partition=.. [y/n]?`).
    #[arg(short = 'i', long = "interactive")]
    pub interactive: bool,
    /// Send this signal (a name such as USR1, or a number) instead of cancelling.
    #[arg(short = 's', long = "signal")]
    pub signal: Option<String>,
    /// To the batch shell alone (which must pass it on), not every process; without
    /// --signal, SIGKILL to the batch shell.
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,
    /// Print no error messages (the exit status still tells).
    #[arg(short = 'Q', long = "quiet")]
    pub quiet: bool,
    #[arg(long)]
    pub controllers: Option<String>,
    pub job_ids: Vec<String>,

    // Slurm's options that cannot change the answer here, or that gsched refuses
    // (cli/slurm-options/scancel.tsv says which and why).
    #[arg(short = 'M', long = "clusters", alias = "cluster", hide = true)]
    pub clusters: Option<String>,
    #[arg(long, hide = true)]
    pub ctld: bool,
    #[arg(short = 'f', long, hide = true)]
    pub full: bool,
    #[arg(short = 'H', long, hide = true)]
    pub hurry: bool,
    #[arg(long, hide = true)]
    pub sibling: Option<String>,
    #[arg(long, hide = true)]
    pub usage: bool,
    #[arg(short = 'v', long, action = ArgAction::Count, hide = true)]
    pub verbose: u8,
}
