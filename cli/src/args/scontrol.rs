//! The options `scontrol` takes before its command (`cli/slurm-options/scontrol.tsv`);
//! the command's words follow (`gsched_cli::slurm::scontrol` translates them into `gctl`'s).

use clap::{ArgAction, Parser};

/// scontrol's options, and its command as words.
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "scontrol",
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct Args {
    /// What gsched's scontrol answers (`--usage` too).
    #[arg(short = 'h', long = "help", alias = "usage")]
    pub help: bool,
    /// gsched's version.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// `show job`/`show node`: each record on one line.
    #[arg(short = 'o', long = "oneliner")]
    pub oneliner: bool,
    /// No informational messages (hold, release, requeue, update, reservations); errors
    /// are still printed.
    #[arg(short = 'Q', long = "quiet")]
    pub quiet: bool,
    /// Slurm's details (`show job` prints a job's per-node allocation here anyway).
    #[arg(short = 'd', long = "details")]
    pub details: bool,
    #[arg(short = 'a', long = "all", hide = true)]
    pub all: bool,
    #[arg(short = 'M', long = "clusters", alias = "cluster", hide = true)]
    pub clusters: Option<String>,
    #[arg(long, hide = true)]
    pub federation: bool,
    #[arg(short = 'F', long, hide = true)]
    pub future: bool,
    #[arg(long, hide = true)]
    pub hide: bool,
    #[arg(long, hide = true)]
    pub local: bool,
    #[arg(long, hide = true)]
    pub sibling: bool,
    #[arg(short = 'u', long, hide = true)]
    pub uid: Option<String>,
    #[arg(short = 'v', long, action = ArgAction::Count, hide = true)]
    pub verbose: u8,
    /// The command: `show job 42`, `hold 42`, `update NodeName=n1 State=DRAIN Reason=x`...
    pub words: Vec<String>,
}
