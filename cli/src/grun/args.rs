//! `grun`'s options: every option of Slurm's srun (`cli/slurm-options/srun.tsv` says
//! what gsched does with each) and gsched's own.

use clap::{ArgAction, Parser};

/// Run a command on the nodes of the job this is called from (srun's twin); outside a
/// job, on an allocation made for it.
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "grun",
    version,
    about,
    infer_long_args = true,
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct RunArgs {
    #[arg(long = "accel-bind", hide = true)]
    pub accel_bind: Option<String>,
    #[arg(short = 'A', long = "account", hide = true)]
    pub account: Option<String>,
    #[arg(long = "acctg-freq", hide = true)]
    pub acctg_freq: Option<String>,
    #[arg(long = "bb", hide = true)]
    pub bb: Option<String>,
    #[arg(long = "bbf", hide = true)]
    pub bbf: Option<String>,
    #[arg(long = "bcast", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub bcast: Option<String>,
    #[arg(long = "bcast-exclude", hide = true)]
    pub bcast_exclude: Option<String>,
    #[arg(short = 'b', long = "begin", hide = true)]
    pub begin: Option<String>,
    /// The tasks' working directory (default: this one).
    #[arg(short = 'D', long = "chdir")]
    pub chdir: Option<String>,
    #[arg(long = "cluster", hide = true)]
    pub cluster: Option<String>,
    #[arg(long = "cluster-constraint", hide = true)]
    pub cluster_constraint: Option<String>,
    #[arg(short = 'M', long = "clusters", hide = true)]
    pub clusters: Option<String>,
    #[arg(long = "comment", hide = true)]
    pub comment: Option<String>,
    #[arg(long = "compress", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub compress: Option<String>,
    #[arg(short = 'C', long = "constraint", hide = true)]
    pub constraint: Option<String>,
    #[arg(long = "container", hide = true)]
    pub container: Option<String>,
    #[arg(long = "context", hide = true)]
    pub context: Option<String>,
    #[arg(long = "contiguous", action = ArgAction::SetTrue, hide = true)]
    pub contiguous: bool,
    #[arg(short = 'S', long = "core-spec", hide = true)]
    pub core_spec: Option<String>,
    #[arg(long = "cores-per-socket", hide = true)]
    pub cores_per_socket: Option<String>,
    /// Bind each task to CPUs: none, cores, threads, sockets, ldoms, rank, map_cpu:LIST, mask_cpu:LIST, map_ldom:LIST, mask_ldom:LIST (with verbose, say so).
    #[arg(long = "cpu-bind", alias = "cpu_bind")]
    pub cpu_bind: Option<String>,
    #[arg(long = "cpu-freq", hide = true)]
    pub cpu_freq: Option<String>,
    #[arg(long = "cpus-per-gpu", hide = true)]
    pub cpus_per_gpu: Option<String>,
    /// CPUs for each task (the step's SLURM_CPUS_PER_TASK; with --cpu-bind, how many each is bound to).
    #[arg(short = 'c', long = "cpus-per-task")]
    pub cpus_per_task: Option<String>,
    #[arg(long = "deadline", hide = true)]
    pub deadline: Option<String>,
    #[arg(long = "debugger-test", action = ArgAction::SetTrue, hide = true)]
    pub debugger_test: bool,
    #[arg(long = "delay-boot", hide = true)]
    pub delay_boot: Option<String>,
    #[arg(short = 'd', long = "dependency", hide = true)]
    pub dependency: Option<String>,
    #[arg(short = 'X', long = "disable-status", action = ArgAction::SetTrue, hide = true)]
    pub disable_status: bool,
    /// How tasks are laid out: block, cyclic, plane=N, arbitrary (node order), then :block|cyclic|fcyclic for CPUs.
    #[arg(short = 'm', long = "distribution")]
    pub distribution: Option<String>,
    #[arg(long = "epilog", hide = true)]
    pub epilog: Option<String>,
    /// The tasks' stderr, as --output (default: with stdout).
    #[arg(short = 'e', long = "error")]
    pub error: Option<String>,
    /// Use only the resources asked for (steps with --gres=gpu:1 each get a GPU of their own).
    #[arg(long = "exact", action = ArgAction::SetTrue)]
    pub exact: bool,
    /// Not these nodes of the job (a host list).
    #[arg(short = 'x', long = "exclude")]
    pub exclude: Option<String>,
    /// As --exact, for a step inside a job.
    #[arg(long = "exclusive", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub exclusive: Option<String>,
    /// ALL (default: this environment), NONE, or ALL,VAR=value,... / VAR=value,...
    #[arg(long = "export")]
    pub export: Option<String>,
    #[arg(short = 'B', long = "extra-node-info", hide = true)]
    pub extra_node_info: Option<String>,
    #[arg(long = "gid", hide = true)]
    pub gid: Option<String>,
    /// Which GPUs each task sees: closest, none, per_task:N, single:N, map_gpu:LIST (default: $SLURM_GPU_BIND).
    #[arg(long = "gpu-bind")]
    pub gpu_bind: Option<String>,
    #[arg(long = "gpu-freq", hide = true)]
    pub gpu_freq: Option<String>,
    /// GPUs for the step in all (outside a job: the allocation's).
    #[arg(short = 'G', long = "gpus")]
    pub gpus: Option<String>,
    /// GPUs of the job each node of the step uses (outside a job: the allocation's).
    #[arg(long = "gpus-per-node")]
    pub gpus_per_node: Option<String>,
    #[arg(long = "gpus-per-socket", hide = true)]
    pub gpus_per_socket: Option<String>,
    /// GPUs for each task: each task sees its own (default: $SLURM_GPUS_PER_TASK).
    #[arg(long = "gpus-per-task")]
    pub gpus_per_task: Option<String>,
    /// gpu:N, or none: GPUs of the job each node of the step uses (outside a job: the allocation's).
    #[arg(long = "gres")]
    pub gres: Option<String>,
    #[arg(long = "gres-flags", hide = true)]
    pub gres_flags: Option<String>,
    #[arg(long = "het-group", alias = "pack-group", hide = true)]
    pub het_group: Option<String>,
    /// nomultithread (one thread per core), multithread, compute_bound, memory_bound.
    #[arg(long = "hint")]
    pub hint: Option<String>,
    #[arg(short = 'H', long = "hold", action = ArgAction::SetTrue, hide = true)]
    pub hold: bool,
    /// Outside a job: give up at once (or after SECONDS) if the allocation cannot start.
    #[arg(short = 'I', long = "immediate", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub immediate: Option<String>,
    /// The tasks' stdin: a file name pattern, none, all (every task reads grun's stdin) or a task rank (default: task 0).
    #[arg(short = 'i', long = "input")]
    pub input: Option<String>,
    #[arg(long = "interactive", action = ArgAction::SetTrue, hide = true)]
    pub interactive: bool,
    /// The step's name (gqueue -s, gacct).
    #[arg(short = 'J', long = "job-name")]
    pub job_name: Option<String>,
    /// The job to run in (default: $SLURM_JOB_ID).
    #[arg(long = "jobid")]
    pub jobid: Option<String>,
    /// Stop every task as soon as one exits with a non-zero status.
    #[arg(short = 'K', long = "kill-on-bad-exit", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub kill_on_bad_exit: Option<String>,
    /// Prefix each output line with its task's rank.
    #[arg(short = 'l', long = "label", action = ArgAction::SetTrue)]
    pub label: bool,
    #[arg(short = 'L', long = "licenses", hide = true)]
    pub licenses: Option<String>,
    #[arg(long = "mail-type", hide = true)]
    pub mail_type: Option<String>,
    #[arg(long = "mail-user", hide = true)]
    pub mail_user: Option<String>,
    #[arg(long = "mcs-label", hide = true)]
    pub mcs_label: Option<String>,
    /// Outside a job: the allocation's memory per node.
    #[arg(long = "mem")]
    pub mem: Option<String>,
    #[arg(long = "mem-bind", hide = true)]
    pub mem_bind: Option<String>,
    #[arg(long = "mem-per-cpu", hide = true)]
    pub mem_per_cpu: Option<String>,
    #[arg(long = "mem-per-gpu", hide = true)]
    pub mem_per_gpu: Option<String>,
    #[arg(long = "mincpus", hide = true)]
    pub mincpus: Option<String>,
    /// none: gsched starts the tasks itself (no PMI server); other types are refused.
    #[arg(long = "mpi")]
    pub mpi: Option<String>,
    #[arg(long = "msg-timeout", hide = true)]
    pub msg_timeout: Option<String>,
    /// The command is a file: each line `RANKS PROGRAM ARGS` (%t is the rank, %o its offset in the range).
    #[arg(long = "multi-prog", action = ArgAction::SetTrue)]
    pub multi_prog: bool,
    #[arg(long = "network", hide = true)]
    pub network: Option<String>,
    #[arg(long = "nice", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub nice: Option<String>,
    #[arg(short = 'Z', long = "no-allocate", action = ArgAction::SetTrue, hide = true)]
    pub no_allocate: bool,
    #[arg(short = 'k', long = "no-kill", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub no_kill: Option<String>,
    #[arg(short = 'F', long = "nodefile", hide = true)]
    pub nodefile: Option<String>,
    /// Only these nodes of the job (a host list).
    #[arg(short = 'w', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Nodes of the job to use (default: all, or as many as there are tasks).
    #[arg(short = 'N', long = "nodes")]
    pub nodes: Option<String>,
    /// Tasks in all (default: one per node, or the job's).
    #[arg(short = 'n', long = "ntasks")]
    pub ntasks: Option<String>,
    /// Tasks on each core at most (1: each task is bound to whole cores).
    #[arg(long = "ntasks-per-core")]
    pub ntasks_per_core: Option<String>,
    /// Tasks sharing each GPU (default: $SLURM_NTASKS_PER_GPU).
    #[arg(long = "ntasks-per-gpu", alias = "ntasks-per-tres")]
    pub ntasks_per_gpu: Option<String>,
    /// Tasks on each node.
    #[arg(long = "ntasks-per-node", alias = "tasks-per-node")]
    pub ntasks_per_node: Option<String>,
    #[arg(long = "ntasks-per-socket", hide = true)]
    pub ntasks_per_socket: Option<String>,
    /// truncate (default) or append to the output files.
    #[arg(long = "open-mode")]
    pub open_mode: Option<String>,
    /// The tasks' stdout: a file name pattern (%j %J %s %t %n %N %u %x %A %a %%; %t, %n or %N: a file per task or node), or none.
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    #[arg(short = 'O', long = "overcommit", action = ArgAction::SetTrue, hide = true)]
    pub overcommit: bool,
    /// Share the GPUs other steps hold, and hold none.
    #[arg(long = "overlap", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub overlap: Option<String>,
    #[arg(short = 's', long = "oversubscribe", action = ArgAction::SetTrue, hide = true)]
    pub oversubscribe: bool,
    /// Outside a job: the allocation's partition.
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    #[arg(long = "power", hide = true)]
    pub power: Option<String>,
    #[arg(long = "prefer", hide = true)]
    pub prefer: Option<String>,
    #[arg(short = 'E', long = "preserve-env", action = ArgAction::SetTrue, hide = true)]
    pub preserve_env: bool,
    #[arg(long = "priority", hide = true)]
    pub priority: Option<String>,
    #[arg(long = "profile", hide = true)]
    pub profile: Option<String>,
    #[arg(long = "prolog", hide = true)]
    pub prolog: Option<String>,
    #[arg(long = "propagate", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub propagate: Option<String>,
    /// Run one task in a pseudo-terminal (an interactive shell: `grun --pty bash`).
    #[arg(long = "pty", action = ArgAction::SetTrue)]
    pub pty: bool,
    #[arg(short = 'q', long = "qos", hide = true)]
    pub qos: Option<String>,
    /// Only errors, no informational messages.
    #[arg(short = 'Q', long = "quiet", action = ArgAction::SetTrue)]
    pub quiet: bool,
    #[arg(long = "quit-on-interrupt", action = ArgAction::SetTrue, hide = true)]
    pub quit_on_interrupt: bool,
    #[arg(long = "reboot", action = ArgAction::SetTrue, hide = true)]
    pub reboot: bool,
    /// Start at this node of the job (0 is its first).
    #[arg(short = 'r', long = "relative")]
    pub relative: Option<String>,
    #[arg(long = "reservation", hide = true)]
    pub reservation: Option<String>,
    #[arg(long = "resv-ports", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub resv_ports: Option<String>,
    #[arg(long = "send-libs", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub send_libs: Option<String>,
    #[arg(long = "signal", hide = true)]
    pub signal: Option<String>,
    #[arg(long = "slurmd-debug", hide = true)]
    pub slurmd_debug: Option<String>,
    #[arg(long = "sockets-per-node", hide = true)]
    pub sockets_per_node: Option<String>,
    #[arg(long = "spread-job", action = ArgAction::SetTrue, hide = true)]
    pub spread_job: bool,
    #[arg(long = "switches", hide = true)]
    pub switches: Option<String>,
    #[arg(long = "task-epilog", hide = true)]
    pub task_epilog: Option<String>,
    #[arg(long = "task-prolog", hide = true)]
    pub task_prolog: Option<String>,
    /// Say when and where the allocation would start; run nothing.
    #[arg(long = "test-only", action = ArgAction::SetTrue)]
    pub test_only: bool,
    #[arg(long = "thread-spec", hide = true)]
    pub thread_spec: Option<String>,
    #[arg(short = 'T', long = "threads", hide = true)]
    pub threads: Option<String>,
    #[arg(long = "threads-per-core", hide = true)]
    pub threads_per_core: Option<String>,
    /// Stop the step after this long (a time limit for the step; outside a job, the allocation's).
    #[arg(short = 't', long = "time")]
    pub time: Option<String>,
    #[arg(long = "time-min", hide = true)]
    pub time_min: Option<String>,
    #[arg(long = "tmp", hide = true)]
    pub tmp: Option<String>,
    #[arg(long = "uid", hide = true)]
    pub uid: Option<String>,
    /// Relay output as it comes (grun always does).
    #[arg(short = 'u', long = "unbuffered", action = ArgAction::SetTrue)]
    pub unbuffered: bool,
    /// Print a short usage and run nothing.
    #[arg(long = "usage", action = ArgAction::SetTrue)]
    pub usage: bool,
    #[arg(long = "use-min-nodes", action = ArgAction::SetTrue, hide = true)]
    pub use_min_nodes: bool,
    #[arg(short = 'v', long = "verbose", action = ArgAction::SetTrue, hide = true)]
    pub verbose: bool,
    /// After the first task ends, give the others this many seconds, then stop them (0: no limit).
    #[arg(short = 'W', long = "wait")]
    pub wait: Option<String>,
    #[arg(long = "wckey", hide = true)]
    pub wckey: Option<String>,
    #[arg(long = "whole", action = ArgAction::SetTrue, hide = true)]
    pub whole: bool,
    #[arg(long = "x11", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub x11: Option<String>,
    /// Controllers to contact (HOST:PORT,...).
    #[arg(long)]
    pub controllers: Option<String>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}
