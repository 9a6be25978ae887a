//! `galloc`'s options: every option of Slurm's salloc (`cli/slurm-options/salloc.tsv`
//! says what gsched does with each) and gsched's own.

use clap::{ArgAction, Parser};

/// Get an allocation and run a command (default: the user's shell) in it here, salloc's
/// twin; the allocation is given back when the command exits.
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "galloc",
    version,
    about,
    infer_long_args = true,
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct AllocArgs {
    /// Account.
    #[arg(short = 'A', long = "account")]
    pub account: Option<String>,
    #[arg(long = "acctg-freq", hide = true)]
    pub acctg_freq: Option<String>,
    #[arg(long = "bb", hide = true)]
    pub bb: Option<String>,
    #[arg(long = "bbf", hide = true)]
    pub bbf: Option<String>,
    #[arg(short = 'b', long = "begin", hide = true)]
    pub begin: Option<String>,
    /// Ring the terminal bell when the allocation is granted.
    #[arg(long = "bell", action = ArgAction::SetTrue)]
    pub bell: bool,
    #[arg(short = 'D', long = "chdir", hide = true)]
    pub chdir: Option<String>,
    #[arg(long = "cluster", hide = true)]
    pub cluster: Option<String>,
    #[arg(long = "cluster-constraint", hide = true)]
    pub cluster_constraint: Option<String>,
    #[arg(short = 'M', long = "clusters", hide = true)]
    pub clusters: Option<String>,
    #[arg(long = "comment", hide = true)]
    pub comment: Option<String>,
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
    #[arg(long = "cpu-freq", hide = true)]
    pub cpu_freq: Option<String>,
    #[arg(long = "cpus-per-gpu", hide = true)]
    pub cpus_per_gpu: Option<String>,
    /// CPUs per task.
    #[arg(short = 'c', long = "cpus-per-task")]
    pub cpus_per_task: Option<String>,
    #[arg(long = "deadline", hide = true)]
    pub deadline: Option<String>,
    #[arg(long = "delay-boot", hide = true)]
    pub delay_boot: Option<String>,
    #[arg(short = 'd', long = "dependency", hide = true)]
    pub dependency: Option<String>,
    #[arg(short = 'm', long = "distribution", hide = true)]
    pub distribution: Option<String>,
    /// Nodes it must not use.
    #[arg(short = 'x', long = "exclude")]
    pub exclude: Option<String>,
    #[arg(long = "exclusive", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub exclusive: Option<String>,
    #[arg(short = 'B', long = "extra-node-info", hide = true)]
    pub extra_node_info: Option<String>,
    #[arg(long = "get-user-env", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub get_user_env: Option<String>,
    #[arg(long = "gid", hide = true)]
    pub gid: Option<String>,
    #[arg(long = "gpu-bind", hide = true)]
    pub gpu_bind: Option<String>,
    #[arg(long = "gpu-freq", hide = true)]
    pub gpu_freq: Option<String>,
    /// Total GPUs: N or TYPE:N.
    #[arg(short = 'G', long = "gpus")]
    pub gpus: Option<String>,
    /// GPUs on every node: N or TYPE:N.
    #[arg(long = "gpus-per-node")]
    pub gpus_per_node: Option<String>,
    #[arg(long = "gpus-per-socket", hide = true)]
    pub gpus_per_socket: Option<String>,
    #[arg(long = "gpus-per-task", hide = true)]
    pub gpus_per_task: Option<String>,
    /// Generic resources: gpu[:TYPE]:N.
    #[arg(long = "gres")]
    pub gres: Option<String>,
    #[arg(long = "gres-flags", hide = true)]
    pub gres_flags: Option<String>,
    #[arg(long = "hint", hide = true)]
    pub hint: Option<String>,
    #[arg(short = 'H', long = "hold", action = ArgAction::SetTrue, hide = true)]
    pub hold: bool,
    /// Give up at once (or after SECONDS) if the allocation cannot start.
    #[arg(short = 'I', long = "immediate", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub immediate: Option<String>,
    /// Job name.
    #[arg(short = 'J', long = "job-name")]
    pub job_name: Option<String>,
    /// Send this signal (default TERM) to the command when the allocation ends.
    #[arg(short = 'K', long = "kill-command", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub kill_command: Option<String>,
    #[arg(short = 'L', long = "licenses", hide = true)]
    pub licenses: Option<String>,
    #[arg(long = "mail-type", hide = true)]
    pub mail_type: Option<String>,
    #[arg(long = "mail-user", hide = true)]
    pub mail_user: Option<String>,
    #[arg(long = "mcs-label", hide = true)]
    pub mcs_label: Option<String>,
    /// Memory per node.
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
    #[arg(long = "network", hide = true)]
    pub network: Option<String>,
    #[arg(long = "nice", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub nice: Option<String>,
    /// Do not ring the bell.
    #[arg(long = "no-bell", action = ArgAction::SetTrue)]
    pub no_bell: bool,
    #[arg(short = 'k', long = "no-kill", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub no_kill: Option<String>,
    /// Get the allocation and exit, leaving it (end it with gcancel).
    #[arg(long = "no-shell", action = ArgAction::SetTrue)]
    pub no_shell: bool,
    #[arg(short = 'F', long = "nodefile", hide = true)]
    pub nodefile: Option<String>,
    /// Nodes the allocation must use.
    #[arg(short = 'w', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Number of nodes.
    #[arg(short = 'N', long = "nodes")]
    pub nodes: Option<String>,
    /// Number of tasks.
    #[arg(short = 'n', long = "ntasks")]
    pub ntasks: Option<String>,
    #[arg(long = "ntasks-per-core", hide = true)]
    pub ntasks_per_core: Option<String>,
    #[arg(long = "ntasks-per-gpu", alias = "ntasks-per-tres", hide = true)]
    pub ntasks_per_gpu: Option<String>,
    #[arg(long = "ntasks-per-node", alias = "tasks-per-node", hide = true)]
    pub ntasks_per_node: Option<String>,
    #[arg(long = "ntasks-per-socket", hide = true)]
    pub ntasks_per_socket: Option<String>,
    #[arg(short = 'O', long = "overcommit", action = ArgAction::SetTrue, hide = true)]
    pub overcommit: bool,
    #[arg(short = 's', long = "oversubscribe", action = ArgAction::SetTrue, hide = true)]
    pub oversubscribe: bool,
    /// Partition.
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    #[arg(long = "power", hide = true)]
    pub power: Option<String>,
    #[arg(long = "prefer", hide = true)]
    pub prefer: Option<String>,
    #[arg(long = "priority", hide = true)]
    pub priority: Option<String>,
    #[arg(long = "profile", hide = true)]
    pub profile: Option<String>,
    /// QOS.
    #[arg(short = 'q', long = "qos")]
    pub qos: Option<String>,
    #[arg(short = 'Q', long = "quiet", action = ArgAction::SetTrue, hide = true)]
    pub quiet: bool,
    #[arg(long = "reboot", action = ArgAction::SetTrue, hide = true)]
    pub reboot: bool,
    #[arg(long = "reservation", hide = true)]
    pub reservation: Option<String>,
    #[arg(long = "signal", hide = true)]
    pub signal: Option<String>,
    #[arg(long = "sockets-per-node", hide = true)]
    pub sockets_per_node: Option<String>,
    #[arg(long = "spread-job", action = ArgAction::SetTrue, hide = true)]
    pub spread_job: bool,
    #[arg(long = "switches", hide = true)]
    pub switches: Option<String>,
    #[arg(long = "thread-spec", hide = true)]
    pub thread_spec: Option<String>,
    #[arg(long = "threads-per-core", hide = true)]
    pub threads_per_core: Option<String>,
    /// Time limit.
    #[arg(short = 't', long = "time")]
    pub time: Option<String>,
    #[arg(long = "time-min", hide = true)]
    pub time_min: Option<String>,
    #[arg(long = "tmp", hide = true)]
    pub tmp: Option<String>,
    #[arg(long = "uid", hide = true)]
    pub uid: Option<String>,
    #[arg(long = "usage", action = ArgAction::SetTrue, hide = true)]
    pub usage: bool,
    #[arg(long = "use-min-nodes", action = ArgAction::SetTrue, hide = true)]
    pub use_min_nodes: bool,
    #[arg(short = 'v', long = "verbose", action = ArgAction::SetTrue, hide = true)]
    pub verbose: bool,
    #[arg(long = "wait-all-nodes", hide = true)]
    pub wait_all_nodes: Option<String>,
    #[arg(long = "wckey", hide = true)]
    pub wckey: Option<String>,
    #[arg(long = "x11", num_args = 0..=1, default_missing_value = "", require_equals = true, hide = true)]
    pub x11: Option<String>,
    /// Controllers to contact (HOST:PORT,...).
    #[arg(long)]
    pub controllers: Option<String>,
    /// The command and its arguments (default: $SHELL).
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}
