//! `gacct`'s options: sacct's, as Slurm's table lists them
//! (`cli/slurm-options/sacct.tsv`), and gsched's own (`--attempts`, `--csv`, `--eff`,
//! `--controllers`).

use clap::{ArgAction, Parser};

/// Job accounting: state, exit code, elapsed time, GPUs, and why a job failed.
#[derive(Parser, Debug, Clone)]
#[command(name = "gacct", version, about)]
pub struct Args {
    /// Only these jobs (comma separated; 120 is every task of array 120).
    #[arg(short = 'j', long = "jobs", value_delimiter = ',')]
    pub jobs: Vec<String>,
    /// Only these users' jobs (comma separated; default: yours, everyone's for root or
    /// with -j or -N).
    #[arg(short = 'u', long = "user", alias = "uid", value_delimiter = ',')]
    pub user: Vec<String>,
    /// Every user's jobs.
    #[arg(short = 'a', long = "allusers")]
    pub allusers: bool,
    /// Only these accounts' jobs (comma separated).
    #[arg(short = 'A', long = "accounts", value_delimiter = ',')]
    pub accounts: Vec<String>,
    /// Only jobs of these partitions (comma separated).
    #[arg(short = 'r', long = "partition", value_delimiter = ',')]
    pub partition: Vec<String>,
    /// Only jobs of these QOS (comma separated).
    #[arg(short = 'q', long = "qos", value_delimiter = ',')]
    pub qos: Vec<String>,
    /// Only jobs with these wckeys (comma separated).
    #[arg(short = 'W', long = "wckeys", value_delimiter = ',')]
    pub wckeys: Vec<String>,
    /// Only jobs that ran on any of these nodes (a host list).
    #[arg(short = 'N', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Only jobs that ran on this many nodes: MIN or MIN-MAX.
    #[arg(short = 'i', long = "nnodes")]
    pub nnodes: Option<String>,
    /// Only jobs with these reasons (comma separated).
    #[arg(short = 'R', long = "reason", value_delimiter = ',')]
    pub reason: Vec<String>,
    /// Jobs active at or after this time (default: midnight today; now with -s; all time
    /// with -j): now-1hour, 2026-11-30T08:00, 08:00, today...
    #[arg(short = 'S', long = "starttime")]
    pub starttime: Option<String>,
    /// Jobs active at or before this time (default: now).
    #[arg(short = 'E', long = "endtime")]
    pub endtime: Option<String>,
    /// Only jobs of these names (sacct's --name).
    #[arg(long = "name", value_delimiter = ',')]
    pub names: Vec<String>,
    /// One row per attempt of requeued jobs.
    #[arg(long)]
    pub attempts: bool,
    /// Columns, as sacct names them (JobID,JobName,State,ExitCode,Elapsed,NodeList...;
    /// a %N suffix sets the width).
    #[arg(short = 'o', long = "format", alias = "fields")]
    pub format: Option<String>,
    /// JobID, State and ExitCode only.
    #[arg(short = 'b', long = "brief")]
    pub brief: bool,
    /// The fields -o takes.
    #[arg(short = 'e', long = "helpformat", alias = "help-fields")]
    pub helpformat: bool,
    /// No header line.
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// Fields split by `|`, none at the end of the line.
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    /// Fields split by `|`, one at the end of the line too.
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// With -p/-P: split fields by this text instead of `|`.
    #[arg(long = "delimiter")]
    pub delimiter: Option<String>,
    /// Jobs only, not their steps.
    #[arg(short = 'X', long = "allocations")]
    pub allocations: bool,
    /// Only jobs in these states (CD, F, CA, TO, R, PD... or full names).
    #[arg(short = 's', long = "state", value_delimiter = ',')]
    pub states: Vec<String>,
    /// JSON: gsched's own document (`gacct --json`).
    #[arg(long)]
    pub json: bool,
    /// Comma-separated values with a header line (fields quoted where they need it).
    #[arg(long, conflicts_with_all = ["json", "parsable", "parsable2"])]
    pub csv: bool,
    /// The efficiency report of one job (as `seff JOBID`): a bar per GPU and per node and
    /// advice; with --json the report as JSON.
    #[arg(long = "eff", value_name = "JOBID")]
    pub eff: Option<String>,
    #[arg(long)]
    pub controllers: Option<String>,

    // Slurm's options that cannot change the answer here, or that gsched refuses
    // (cli/slurm-options/sacct.tsv says which and why).
    #[arg(short = 'L', long, hide = true)]
    pub allclusters: bool,
    #[arg(short = 'x', long, hide = true)]
    pub associations: Option<String>,
    #[arg(short = 'B', long = "batch-script", hide = true)]
    pub batch_script: bool,
    #[arg(short = 'M', long = "clusters", alias = "cluster", hide = true)]
    pub clusters: Option<String>,
    #[arg(short = 'c', long, hide = true)]
    pub completion: bool,
    #[arg(short = 'C', long, hide = true)]
    pub constraints: Option<String>,
    #[arg(short = 'D', long, hide = true)]
    pub duplicates: bool,
    #[arg(long = "env-vars", hide = true)]
    pub env_vars: bool,
    #[arg(long, hide = true)]
    pub federation: bool,
    #[arg(short = 'f', long, hide = true)]
    pub file: Option<String>,
    #[arg(short = 'F', long, hide = true)]
    pub flags: Option<String>,
    #[arg(short = 'g', long = "group", alias = "gid", hide = true)]
    pub group: Option<String>,
    #[arg(long, hide = true)]
    pub local: bool,
    #[arg(short = 'l', long, hide = true)]
    pub long: bool,
    #[arg(short = 'I', long, hide = true)]
    pub ncpus: Option<String>,
    #[arg(long, hide = true)]
    pub noconvert: bool,
    #[arg(short = 'K', long = "timelimit-max", hide = true)]
    pub timelimit_max: Option<String>,
    #[arg(short = 'k', long = "timelimit-min", hide = true)]
    pub timelimit_min: Option<String>,
    #[arg(short = 'T', long, hide = true)]
    pub truncate: bool,
    #[arg(long, hide = true)]
    pub units: Option<String>,
    #[arg(short = 'U', long, hide = true)]
    pub usage: bool,
    #[arg(long = "use-local-uid", hide = true)]
    pub use_local_uid: bool,
    #[arg(short = 'v', long, action = ArgAction::Count, hide = true)]
    pub verbose: u8,
    #[arg(
        long = "whole-hetjob",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "yes",
        hide = true
    )]
    pub whole_hetjob: Option<String>,
    #[arg(long, hide = true)]
    pub yaml: bool,
}
