//! sbatch's options as clap flags: every option of Slurm's table (`cli/slurm-options/
//! sbatch.tsv`, which says what gsched does with each) and gsched's own.

use clap::{ArgAction, Parser};

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
    #[arg(long = "ntasks-per-node", alias = "tasks-per-node")]
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
    #[arg(long = "exclusive", num_args = 0..=1, default_missing_value = "node", require_equals = true)]
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
    /// How the script starts: `batch` (once, on the first node, as Slurm runs it;
    /// grun/srun fans out) or `each-node` (on every node). Default: batch for scripts with
    /// #SBATCH lines, each-node for anything else.
    #[arg(long = "launch", value_parser = ["batch", "each-node"])]
    pub launch: Option<String>,
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

    /// `[B:][R:]SIG[@SECONDS]`: send SIG this long (default 60 s) before the time limit;
    /// with `B:` to the batch shell only.
    #[arg(long)]
    pub signal: Option<String>,

    /// Run inside this reservation (`gctl reservation show` lists them).
    #[arg(long)]
    pub reservation: Option<String>,

    /// Mail when the job begins, ends, fails... (BEGIN, END, FAIL, REQUEUE, ALL,
    /// TIME_LIMIT_50/80/90, ARRAY_TASKS, INVALID_DEPEND, NONE), through the cluster's mail
    /// program or the user's notification settings.
    #[arg(long = "mail-type")]
    pub mail_type: Option<String>,
    /// Whom to mail (default: the submitting user).
    #[arg(long = "mail-user")]
    pub mail_user: Option<String>,
    /// Lower the job's priority by N (default 100; a negative N needs an operator).
    #[arg(long, num_args = 0..=1, default_missing_value = "100", require_equals = true, allow_hyphen_values = true)]
    pub nice: Option<String>,
    /// A comment kept with the job (gacct/squeue show it).
    #[arg(long)]
    pub comment: Option<String>,
    /// A workload characterisation key kept with the job (gacct shows it).
    #[arg(long)]
    pub wckey: Option<String>,
    /// Start no earlier than this: now+1hour, 16:00, 2026-12-24T08:00, tomorrow...
    #[arg(long, short = 'b')]
    pub begin: Option<String>,
    /// End the job (DEADLINE) if it cannot finish by this time.
    #[arg(long)]
    pub deadline: Option<String>,
    /// truncate or append to the output files.
    #[arg(long = "open-mode")]
    pub open_mode: Option<String>,
    /// Keep running when one of the job's nodes is lost (the lost node's part ends).
    #[arg(short = 'k', long = "no-kill", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub no_kill: Option<String>,
    /// yes: end the job when a dependency can never be met; no: leave it pending.
    #[arg(long = "kill-on-invalid-dep")]
    pub kill_on_invalid_dep: Option<String>,
    /// COUNT[@MAX-TIME]: at most COUNT leaf switches, waited for at most MAX-TIME (capped
    /// by the cluster's topology_wait_s) from the first time the job could have started
    /// on more; @0 starts at once on whatever is free.
    #[arg(long)]
    pub switches: Option<String>,
    /// How tasks are laid out: block, cyclic, plane=N, arbitrary, then :block|cyclic|fcyclic
    /// for CPUs within a node.
    #[arg(short = 'm', long)]
    pub distribution: Option<String>,
    /// Which of its node's GPUs each task sees: closest, none, per_task:N, single:N,
    /// map_gpu:LIST (Slurm's syntax).
    #[arg(long = "gpu-bind")]
    pub gpu_bind: Option<String>,
    /// Tasks on each socket at most.
    #[arg(long = "ntasks-per-socket")]
    pub ntasks_per_socket: Option<String>,
    /// Tasks for each GPU (binds each to its GPU, as `--gpu-bind=single:N`).
    #[arg(long = "ntasks-per-gpu", alias = "ntasks-per-tres")]
    pub ntasks_per_gpu: Option<String>,
    /// GPUs on each socket of the job's nodes.
    #[arg(long = "gpus-per-socket")]
    pub gpus_per_socket: Option<String>,
    /// nomultithread (one thread per core), multithread, compute_bound, memory_bound.
    #[arg(long)]
    pub hint: Option<String>,
    /// Do not exit until the job ends; exit with its exit code.
    #[arg(short = 'W', long, action = ArgAction::SetTrue)]
    pub wait: bool,
    #[arg(long = "wait-all-nodes", hide = true)]
    pub wait_all_nodes: Option<String>,
    /// Only errors, no warnings.
    #[arg(short = 'Q', long, action = ArgAction::SetTrue)]
    pub quiet: bool,
    #[arg(short = 'v', long, hide = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// Say when and where the job would start; submit nothing.
    #[arg(long = "test-only", action = ArgAction::SetTrue)]
    pub test_only: bool,
    /// The shortest time limit the job accepts: backfill may start it with a limit this
    /// low up to --time.
    #[arg(long = "time-min")]
    pub time_min: Option<String>,
    /// A file of node names (one or more per line) the job must use, as -w.
    #[arg(short = 'F', long)]
    pub nodefile: Option<String>,
    /// A file of NAME=value environment entries (NUL or newline separated) to export.
    #[arg(long = "export-file")]
    pub export_file: Option<String>,
    /// The batch script's stdin: a file name pattern (%j %x %u %N %A %a %%).
    #[arg(short = 'i', long)]
    pub input: Option<String>,
    /// Print a short usage and submit nothing.
    #[arg(long, action = ArgAction::SetTrue)]
    pub usage: bool,

    // Options of sbatch that gsched refuses or that cannot change what a job sees here
    // (cli/slurm-options/sbatch.tsv says which, and why).
    #[arg(long = "acctg-freq", hide = true)]
    pub acctg_freq: Option<String>,
    #[arg(long, hide = true)]
    pub batch: Option<String>,
    #[arg(long, hide = true)]
    pub bb: Option<String>,
    #[arg(long, hide = true)]
    pub bbf: Option<String>,
    #[arg(long, hide = true)]
    pub cluster: Option<String>,
    #[arg(short = 'M', long, hide = true)]
    pub clusters: Option<String>,
    #[arg(long = "cluster-constraint", hide = true)]
    pub cluster_constraint: Option<String>,
    #[arg(long, hide = true)]
    pub container: Option<String>,
    #[arg(long, hide = true)]
    pub context: Option<String>,
    #[arg(long, hide = true, action = ArgAction::SetTrue)]
    pub contiguous: bool,
    #[arg(short = 'S', long = "core-spec", hide = true)]
    pub core_spec: Option<String>,
    #[arg(long = "cores-per-socket", hide = true)]
    pub cores_per_socket: Option<String>,
    #[arg(long = "cpu-freq", hide = true)]
    pub cpu_freq: Option<String>,
    #[arg(long = "delay-boot", hide = true)]
    pub delay_boot: Option<String>,
    #[arg(short = 'B', long = "extra-node-info", hide = true)]
    pub extra_node_info: Option<String>,
    #[arg(long = "get-user-env", hide = true, num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub get_user_env: Option<String>,
    #[arg(long, hide = true)]
    pub gid: Option<String>,
    #[arg(long = "gpu-freq", hide = true)]
    pub gpu_freq: Option<String>,
    #[arg(long = "gres-flags", hide = true)]
    pub gres_flags: Option<String>,
    #[arg(long = "ignore-pbs", hide = true, action = ArgAction::SetTrue)]
    pub ignore_pbs: bool,
    #[arg(short = 'L', long, hide = true)]
    pub licenses: Option<String>,
    #[arg(long = "mcs-label", hide = true)]
    pub mcs_label: Option<String>,
    #[arg(long = "mem-bind", hide = true)]
    pub mem_bind: Option<String>,
    #[arg(long, hide = true)]
    pub mincpus: Option<String>,
    #[arg(long, hide = true)]
    pub network: Option<String>,
    /// Tasks on each core at most (1: each task has whole cores).
    #[arg(long = "ntasks-per-core")]
    pub ntasks_per_core: Option<String>,
    #[arg(short = 'O', long, hide = true, action = ArgAction::SetTrue)]
    pub overcommit: bool,
    #[arg(short = 's', long, hide = true, action = ArgAction::SetTrue)]
    pub oversubscribe: bool,
    #[arg(long, hide = true)]
    pub power: Option<String>,
    #[arg(long, hide = true)]
    pub prefer: Option<String>,
    #[arg(long, hide = true)]
    pub priority: Option<String>,
    #[arg(long, hide = true)]
    pub profile: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "ALL", require_equals = true)]
    pub propagate: Option<String>,
    #[arg(long, hide = true, action = ArgAction::SetTrue)]
    pub reboot: bool,
    #[arg(long = "sockets-per-node", hide = true)]
    pub sockets_per_node: Option<String>,
    #[arg(long = "spread-job", hide = true, action = ArgAction::SetTrue)]
    pub spread_job: bool,
    #[arg(long = "thread-spec", hide = true)]
    pub thread_spec: Option<String>,
    #[arg(long = "threads-per-core", hide = true)]
    pub threads_per_core: Option<String>,
    #[arg(long, hide = true)]
    pub tmp: Option<String>,
    #[arg(long = "use-min-nodes", hide = true, action = ArgAction::SetTrue)]
    pub use_min_nodes: bool,

    /// The batch script (or, with --torchrun, the training program) and its arguments.
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub script: Vec<String>,
}
