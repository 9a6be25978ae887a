//! `gqueue`'s options: squeue's, as Slurm's table lists them
//! (`cli/slurm-options/squeue.tsv`), and gsched's own (`--stale-ok`, `--controllers`).

use clap::{ArgAction, Parser};

/// Show pending and running jobs (squeue-compatible columns).
#[derive(Parser, Debug, Clone)]
#[command(name = "gqueue", version, about, disable_help_flag = true)]
pub struct Args {
    /// Print help (-h is squeue's --noheader).
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
    /// A one-line summary of the options.
    #[arg(long)]
    pub usage: bool,
    /// No header line (squeue -h).
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// squeue's output format: `%[.][width]letter` fields, e.g. "%.18i %.9P %j %T %R"
    /// (letters: i A j u t T M D R N r P l S e Y).
    #[arg(short = 'o', long = "format", conflicts_with_all = ["long_format", "long"])]
    pub format: Option<String>,
    /// squeue's long format: field names with optional widths, e.g.
    /// "JobID,Name:30,State,ReasonList".
    #[arg(short = 'O', long = "Format")]
    pub long_format: Option<String>,
    /// Only these users' jobs (comma separated).
    #[arg(short = 'u', long = "user", alias = "users", value_delimiter = ',')]
    pub user: Vec<String>,
    /// Only my jobs (`-u $USER`).
    #[arg(long = "me")]
    pub me: bool,
    /// Only these jobs (comma separated; 120 shows every task of array 120): `-j=LIST`,
    /// `--jobs=LIST`, or `-j LIST` with the list as the last word, as squeue reads it.
    #[arg(
        short = 'j',
        long = "jobs",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub jobs: Option<String>,
    /// Only these states (PD,R,CG,CD,F,CA,TO,NF,OOM or names); `all` includes finished jobs.
    #[arg(short = 't', long = "states", value_delimiter = ',')]
    pub states: Vec<String>,
    /// Only these partitions (comma separated).
    #[arg(
        short = 'p',
        long = "partitions",
        alias = "partition",
        value_delimiter = ','
    )]
    pub partitions: Vec<String>,
    /// Only these accounts' jobs (comma separated).
    #[arg(short = 'A', long = "accounts", value_delimiter = ',')]
    pub accounts: Vec<String>,
    /// Only jobs of these QOS (comma separated).
    #[arg(short = 'q', long = "qos", value_delimiter = ',')]
    pub qos: Vec<String>,
    /// Only jobs of this reservation.
    #[arg(short = 'R', long = "reservation")]
    pub reservation: Option<String>,
    /// Only jobs running on (or last run on) these nodes: a host list.
    #[arg(short = 'w', long = "nodelist", aliases = ["node", "nodes"])]
    pub nodelist: Option<String>,
    /// Only jobs with these names.
    #[arg(short = 'n', long = "name", value_delimiter = ',')]
    pub name: Vec<String>,
    /// Pending jobs and when they are expected to start (from the backfill plan), as
    /// squeue --start lists them.
    #[arg(long = "start")]
    pub start: bool,
    /// squeue's long format (STATE and TIME_LIMIT), after the time; gsched adds a
    /// FAILURE column with the reason and evidence when a job listed has one.
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// Running `grun`/`srun` steps (squeue -s): STEPID NAME PARTITION USER TIME NODELIST;
    /// `-s=LIST` (or `-s LIST` as the last word) only these steps (JOB.STEP).
    #[arg(
        short = 's',
        long = "steps",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub steps: Option<String>,
    /// One line per array task (gsched always lists them so).
    #[arg(short = 'r', long = "array")]
    pub array: bool,
    /// Sort by these fields (format letters, `-` before one for descending), e.g. `-t,i`.
    #[arg(short = 'S', long = "sort", allow_hyphen_values = true)]
    pub sort: Option<String>,
    /// List again every SECONDS, each time after the time.
    #[arg(short = 'i', long = "iterate", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterate: Option<u64>,
    /// JSON: gsched's own document (`gqueue --json`).
    #[arg(long)]
    pub json: bool,
    /// Answer from the controller asked, without confirming with the leader (may lag by
    /// a few milliseconds; spares the leader).
    #[arg(long = "stale-ok")]
    pub stale_ok: bool,
    #[arg(long)]
    pub controllers: Option<String>,
    /// squeue -j/-s: the job or step list as the last word.
    #[arg(hide = true)]
    pub list: Vec<String>,

    // Slurm's options that cannot change the answer here, or that gsched refuses
    // (cli/slurm-options/squeue.tsv says which and why).
    #[arg(short = 'a', long, hide = true)]
    pub all: bool,
    #[arg(long = "array-unique", hide = true)]
    pub array_unique: bool,
    #[arg(short = 'M', long = "clusters", alias = "cluster", hide = true)]
    pub clusters: Option<String>,
    #[arg(long, hide = true)]
    pub federation: bool,
    #[arg(long, hide = true)]
    pub hide: bool,
    #[arg(short = 'L', long, hide = true)]
    pub licenses: Option<String>,
    #[arg(long, hide = true)]
    pub local: bool,
    #[arg(long, hide = true)]
    pub noconvert: bool,
    #[arg(short = 'P', long, hide = true)]
    pub priority: bool,
    #[arg(long, alias = "sib", hide = true)]
    pub sibling: bool,
    #[arg(short = 'v', long, action = ArgAction::Count, hide = true)]
    pub verbose: u8,
    #[arg(long, hide = true)]
    pub yaml: bool,
}
