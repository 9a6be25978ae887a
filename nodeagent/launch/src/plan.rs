//! What the supervisor runs for one node's run of a job, decided from the launch, the node's
//! topology and the job owner's identity: the script, argv, one environment per task,
//! output paths, the identity to drop to, the cgroup limits and the GPU device nodes. The
//! agent writes the result as `plan.json` and does the IO (files, cgroup, devices).

use crate::env::{NodeGpu, bind_task, compress_counts, node_gpus, set_gpu_vars};
use crate::{TaskEnv, net_plan, output, task_env, torchrun};
use gsched_types::binding::TaskBinding;
use gsched_types::launch::LaunchSpec;
use gsched_types::steps::{StepLaunch, TaskScripts};
use gsched_types::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Who a job runs as, resolved by the agent from the password database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Owner {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary group included).
    pub groups: Vec<u32>,
    pub home: String,
}

/// What the supervisor runs, written by the agent to `DIR/plan.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub argv: Vec<String>,
    /// One environment per task.
    pub tasks: Vec<Vec<(String, String)>>,
    pub workdir: String,
    pub stdout: String,
    pub stderr: Option<String>,
    /// Drop to this identity (only when the supervisor runs as root).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    #[serde(default)]
    pub groups: Vec<u32>,
    /// cgroup v2 directory the tasks join.
    pub cgroup: Option<String>,
    /// The submitter's umask, applied to the output files and the tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// The run's private directory (script, logs), removed when the run has ended.
    #[serde(default)]
    pub scratch: Option<String>,
    /// GPU device nodes handed to the owner for the run (given back when it ends).
    #[serde(default)]
    pub devices: Vec<String>,
    /// Where the agent records the controllers' last answer and the node's lease: the
    /// supervisor stops the run when the lease lapses.
    #[serde(default)]
    pub contact_file: Option<String>,
    /// Keep stderr's private copy apart from stdout's (`stderr.log` beside `output.log`):
    /// `grun` tasks, whose two streams the agent passes on separately.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_capture: bool,
    /// Where the (single) task's stdin comes from: nothing, or what its `grun` sends.
    #[serde(default, skip_serializing_if = "TaskInput::is_none")]
    pub input: TaskInput,
    /// Empty the output files when opening them (`--open-mode=truncate`, first attempt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncate_output: bool,
    /// The job's GPUs on this node, which its steps' tasks are bound among.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<NodeGpu>,
    /// The CPUs the (single) task is bound to (`srun --cpu-bind`, `--hint`); absent: all
    /// of the job's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Vec<u32>>,
    /// Say what the task is bound to on its stderr, as srun's `--cpu-bind=verbose`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub affinity_verbose: bool,
    /// A step task's `--task-prolog` and `--task-epilog`.
    #[serde(default, skip_serializing_if = "TaskScripts::is_default")]
    pub task_scripts: TaskScripts,
    /// Lines for the tasks' stderr before they start (what slurmstepd says there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

/// A task's stdin: `/dev/null`, or the input its `grun` sends (the supervisor's own
/// stdin), as a pipe or through a pseudo-terminal that is also its stdout and stderr and
/// its controlling terminal (`grun --pty`; resizes through the `winsize` file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskInput {
    #[default]
    None,
    Pipe,
    Pty(gsched_types::steps::TermSize),
    /// A file the job's owner can read (`sbatch --input`), absolute.
    File {
        path: String,
    },
}

impl TaskInput {
    pub fn is_none(&self) -> bool {
        *self == TaskInput::None
    }
}

/// A node run's cgroup: where, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLimits {
    /// Directory name under the agent's cgroup base.
    pub name: String,
    pub cpus: String,
    pub mems: String,
    pub mem_bytes: Option<u64>,
    pub pids: u64,
}

/// The agent's settings a node run's plan depends on.
pub struct RunContext<'a> {
    pub node: &'a str,
    pub topology: &'a Topology,
    pub training_iface: Option<&'a str>,
    pub agent_env: &'a BTreeMap<String, String>,
    /// Device index of each GPU the agent manages (empty: the same as gsched's index).
    pub gpu_map: &'a [u32],
    /// Where the run's script is written (as the tasks see it).
    pub script_path: &'a str,
    /// The run's log directory (NCCL debug files, torchrun error files), writable by
    /// the owner.
    pub log_dir: &'a str,
    /// The job owner, when the agent runs as root and drops to them; `None` runs the
    /// tasks as the agent's own user.
    pub owner: Option<&'a Owner>,
    /// The owner's home directory may be shown to the job (root agents, or jobs of the
    /// agent's own user).
    pub home: Option<&'a str>,
    /// The cgroup directory the tasks join, when cgroups are in use.
    pub cgroup_dir: Option<String>,
    /// The run's private directory.
    pub scratch: Option<&'a str>,
    /// Device nodes handed to the owner for the run.
    pub devices: Vec<String>,
    /// A device filter hides every other GPU from the run (CUDA numbers from 0).
    pub devices_filtered: bool,
    /// The agent's contact file (the lease).
    pub contact_file: Option<&'a str>,
}

/// The text of the run's script: the submitted batch script, or the torchrun line
/// gsched writes for `--torchrun`.
pub fn script(launch: &LaunchSpec) -> String {
    torchrun::script(launch).unwrap_or_else(|| launch.spec.script.clone())
}

/// How many tasks the supervisor starts on this node: one torchrun (which starts a worker
/// per GPU itself), else the job's tasks per node.
pub fn task_count(launch: &LaunchSpec) -> u32 {
    if launch.spec.torchrun.is_some() || launch.spec.launch == gsched_types::job::LaunchMode::Batch
    {
        1
    } else {
        launch.spec.ntasks_per_node.max(1)
    }
}

/// The supervisor plan for this node's run of the job.
pub fn plan(launch: &LaunchSpec, script_text: &str, ctx: &RunContext<'_>) -> Plan {
    let spec = &launch.spec;
    let mut argv = if script_text.starts_with("#!") {
        vec![ctx.script_path.to_string()]
    } else {
        vec!["/bin/sh".to_string(), ctx.script_path.to_string()]
    };
    if spec.torchrun.is_none() {
        argv.extend(spec.script_args.iter().cloned());
    }
    if holds_only(launch) {
        // Slurm's way: the script runs on the first node; this one keeps the allocation
        // (its cgroup, GPUs, lease) for the steps `grun`/`srun` starts here.
        argv = HOLDER.iter().map(|s| s.to_string()).collect();
    }
    let net = net_plan(ctx.topology, &launch.node_alloc.gpus, ctx.training_iface);
    let tasks = (0..task_count(launch))
        .map(|t| {
            task_env(&TaskEnv {
                launch,
                node: ctx.node,
                local_task: t,
                net: &net,
                log_dir: ctx.log_dir,
                agent_env: ctx.agent_env,
                home: ctx.home,
                gpu_map: ctx.gpu_map,
                devices_filtered: ctx.devices_filtered,
            })
            .into_iter()
            .collect()
        })
        .collect();
    let (stdout, stderr) = output::paths(launch, ctx.node);
    let input = match &spec.input {
        Some(pattern) => {
            let path = output::expand(pattern, launch, ctx.node, 0);
            TaskInput::File {
                path: if path.starts_with('/') {
                    path
                } else {
                    format!("{}/{path}", spec.workdir.trim_end_matches('/'))
                },
            }
        }
        None => TaskInput::None,
    };
    Plan {
        argv,
        tasks,
        workdir: spec.workdir.clone(),
        stdout,
        stderr,
        uid: ctx.owner.map(|o| o.uid),
        gid: ctx.owner.map(|o| o.gid),
        groups: ctx.owner.map(|o| o.groups.clone()).unwrap_or_default(),
        cgroup: ctx.cgroup_dir.clone(),
        umask: spec.umask,
        scratch: ctx.scratch.map(str::to_string),
        devices: ctx.devices.clone(),
        contact_file: ctx.contact_file.map(str::to_string),
        split_capture: false,
        input,
        truncate_output: spec.open_mode == Some(gsched_types::job::OpenMode::Truncate)
            && launch.attempt == 0
            && launch.node_rank == 0,
        gpus: node_gpus(launch, ctx.gpu_map, ctx.devices_filtered),
        affinity: None,
        affinity_verbose: false,
        task_scripts: TaskScripts::default(),
        notices: Vec::new(),
    }
}

/// What a batch job's other nodes run until the job ends.
const HOLDER: [&str; 3] = ["/bin/sh", "-c", "while :; do sleep 3600; done"];

/// A batch job's node other than the first: it runs no script, only holds the allocation.
pub fn holds_only(launch: &LaunchSpec) -> bool {
    launch.spec.launch == gsched_types::job::LaunchMode::Batch && launch.node_rank > 0
}

/// Variables whose value differs from node to node of a job: a step's task takes them
/// from its own node's job environment, never from the caller's.
fn node_specific(name: &str) -> bool {
    name.starts_with("SLURM")
        || name.starts_with("GSCHED_")
        || matches!(
            name,
            "CUDA_VISIBLE_DEVICES"
                | "NVIDIA_VISIBLE_DEVICES"
                | "NCCL_SOCKET_IFNAME"
                | "NCCL_IB_HCA"
                | "NCCL_IB_GID_INDEX"
                | "NCCL_DEBUG_FILE"
                | "TORCHELASTIC_ERROR_FILE"
                | "TORCH_FR_DUMP_TEMP_FILE"
                | "TMPDIR"
                | "HOSTNAME"
        )
}

/// srun's input variables (the env names of Slurm 22.05's slurm_opt.c, as
/// `cli/slurm-options/srun.tsv` lists them) that neither srun nor slurmstepd sets for a
/// step's tasks (env.c's `setup_env`): a task has one only when the step's caller had it,
/// so a script's `unset SLURM_EXPORT_ENV` before `srun` holds. `cli/tests/option_tables.rs`
/// derives this list again from the table.
pub const CALLER_ONLY_VARS: [&str; 67] = [
    "SLURM_ACCOUNT",
    "SLURM_ACCTG_FREQ",
    "SLURM_BCAST",
    "SLURM_BCAST_EXCLUDE",
    "SLURM_BURST_BUFFER",
    "SLURM_CLUSTERS",
    "SLURM_CLUSTER_CONSTRAINT",
    "SLURM_COMPRESS",
    "SLURM_CONSTRAINT",
    "SLURM_CORE_SPEC",
    "SLURM_CPUS_PER_GPU",
    "SLURM_DEBUG",
    "SLURM_DELAY_BOOT",
    "SLURM_DEPENDENCY",
    "SLURM_DISABLE_STATUS",
    "SLURM_EPILOG",
    "SLURM_EXACT",
    "SLURM_EXCLUSIVE",
    "SLURM_EXPORT_ENV",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_SOCKET",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPU_BIND",
    "SLURM_GPU_FREQ",
    "SLURM_GRES",
    "SLURM_GRES_FLAGS",
    "SLURM_HINT",
    "SLURM_KILL_BAD_EXIT",
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_GPU",
    "SLURM_MEM_PER_NODE",
    "SLURM_MPI_TYPE",
    "SLURM_NCORES_PER_SOCKET",
    "SLURM_NETWORK",
    "SLURM_NO_KILL",
    "SLURM_NSOCKETS_PER_NODE",
    "SLURM_OPEN_MODE",
    "SLURM_OVERLAP",
    "SLURM_PARTITION",
    "SLURM_POWER",
    "SLURM_PROFILE",
    "SLURM_PROLOG",
    "SLURM_QOS",
    "SLURM_REMOTE_CWD",
    "SLURM_RESERVATION",
    "SLURM_RESV_PORTS",
    "SLURM_SEND_LIBS",
    "SLURM_SIGNAL",
    "SLURM_SPREAD_JOB",
    "SLURM_SRUN_MULTI",
    "SLURM_STDERRMODE",
    "SLURM_STDINMODE",
    "SLURM_STDOUTMODE",
    "SLURM_TASK_EPILOG",
    "SLURM_TASK_PROLOG",
    "SLURM_THREADS",
    "SLURM_THREAD_SPEC",
    "SLURM_TIMELIMIT",
    "SLURM_UNBUFFEREDIO",
    "SLURM_USE_MIN_NODES",
    "SLURM_WAIT",
    "SLURM_WCKEY",
    "SLURM_WORKING_DIR",
    "SRUN_CONTAINER",
    "SRUN_CPUS_PER_TASK",
    "SRUN_EXPORT_ENV",
];

/// The plan of one `grun` task (global `rank`, `local` on this node), from the plan of the
/// job it runs in: the job's identity, cgroup, lease and environment (its first task's
/// on this node), the caller's environment on top, and the step's `SLURM_*` variables
/// over both.
/// Output goes to the supervisor's private copies only, stdout and stderr apart.
/// `cpus`: the job's CPUs on this node and where they sit, for a step that binds its
/// tasks (`None` on a node whose CPUs are not known: no binding).
pub fn step_task(
    job: &Plan,
    step: &StepLaunch,
    rank: u32,
    local: u32,
    cpus: Option<&crate::binding::NodeCpus<'_>>,
) -> Plan {
    let mut env: BTreeMap<String, String> = job
        .tasks
        .first()
        .map(|t| t.iter().cloned().collect())
        .unwrap_or_default();
    env.retain(|k, _| !CALLER_ONLY_VARS.contains(&k.as_str()) || step.env.contains_key(k));
    // The caller's environment (srun's --export=ALL), except what is this node's own
    // (its name, GPUs, NIC...), then the step's own variables.
    for (k, v) in &step.env {
        if !node_specific(k) || !env.contains_key(k) {
            env.insert(k.clone(), v.clone());
        }
    }
    let layout = &step.layout;
    let here = layout
        .ranks
        .get(step.node_index as usize)
        .map_or(0, |r| r.len());
    let per_node: Vec<u32> = layout.ranks.iter().map(|r| r.len() as u32).collect();
    let tasks_per_node = compress_counts(&per_node);
    let gtids: Vec<String> = layout
        .ranks
        .get(step.node_index as usize)
        .map(|r| r.iter().map(u32::to_string).collect())
        .unwrap_or_default();
    for (k, v) in [
        ("SLURM_STEP_ID", step.step.to_string()),
        ("SLURM_STEPID", step.step.to_string()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_LOCALID", local.to_string()),
        ("SLURM_NODEID", step.node_index.to_string()),
        ("SLURM_NTASKS", layout.ntasks.to_string()),
        ("SLURM_NPROCS", layout.ntasks.to_string()),
        ("SLURM_STEP_NUM_TASKS", layout.ntasks.to_string()),
        ("SLURM_STEP_NUM_NODES", layout.nodes.len().to_string()),
        ("SLURM_NNODES", layout.nodes.len().to_string()),
        (
            "SLURM_STEP_NODELIST",
            gsched_types::hostlist::compress(&layout.nodes),
        ),
        ("SLURM_STEP_TASKS_PER_NODE", tasks_per_node.clone()),
        ("SLURM_TASKS_PER_NODE", tasks_per_node),
        ("SLURM_GTIDS", gtids.join(",")),
        (
            "SLURM_DISTRIBUTION",
            default_distribution(layout.ntasks, layout.nodes.len()).into(),
        ),
    ] {
        env.insert(k.to_string(), v);
    }
    for (k, v) in &step.srun_env {
        // Slurm 22.05's tasks were seen without an implied per-task GPU binding where a
        // node has one task of the step (tests/slurmdiff corpus 03, 48, 55).
        if k == "SLURMD_TRES_BIND" && v.starts_with("gpu:per_task:") && here == 1 {
            continue;
        }
        env.insert(k.clone(), v.clone());
    }
    step_gpu_vars(
        &mut env,
        &job.gpus,
        &step.gpus,
        step.gpu_slots.as_deref(),
        local,
        here as u32,
    );
    if let Some(c) = step.cpus_per_task {
        env.insert("SLURM_CPUS_PER_TASK".into(), c.to_string());
    }
    let affinity = cpus.and_then(|node| {
        crate::binding::task_cpus(
            &step.binding,
            step.cpus_per_task.unwrap_or(1),
            node,
            local,
            here as u32,
        )
    });
    if let Some(bound) = &affinity {
        cpu_bind_vars(&mut env, &step.binding, bound);
    }
    Plan {
        argv: step.argv.clone(),
        tasks: vec![env.into_iter().collect()],
        workdir: step.cwd.clone(),
        stdout: "/dev/null".into(),
        stderr: Some("/dev/null".into()),
        uid: job.uid,
        gid: job.gid,
        groups: job.groups.clone(),
        cgroup: job.cgroup.clone(),
        umask: job.umask,
        scratch: None,
        devices: Vec::new(),
        contact_file: job.contact_file.clone(),
        split_capture: true,
        // Task 0 gets the caller's stdin (srun's default is all tasks; gsched's, task 0).
        input: match (rank, step.pty) {
            (0, Some(size)) => TaskInput::Pty(size),
            (0, None) => TaskInput::Pipe,
            _ => TaskInput::None,
        },
        truncate_output: false,
        gpus: Vec::new(),
        affinity,
        affinity_verbose: step.binding.verbose,
        task_scripts: step.task_scripts.clone(),
        notices: gpu_freq_notice(step, !job.gpus.is_empty(), local),
    }
}

/// What Slurm's gpu/generic plugin says once per node on a step's stderr when the step asks
/// for GPU clocks (`--gpu-freq`, or `SLURM_GPU_FREQ` from its job) and has GPUs there:
/// gsched, like it, sets none.
fn gpu_freq_notice(step: &StepLaunch, has_gpus: bool, local: u32) -> Vec<String> {
    let asks = step
        .srun_env
        .get("SLURMD_TRES_FREQ")
        .is_some_and(|f| f.contains("gpu:"));
    if asks && has_gpus && step.gpus.per_node != Some(0) && local == 0 {
        vec!["GpuFreq=control_disabled".into()]
    } else {
        Vec::new()
    }
}

/// The distribution Slurm's step manager chooses when srun names none: one task per node
/// goes round the nodes (`cyclic`), more fill each node in turn (`block`).
fn default_distribution(ntasks: u32, nodes: usize) -> &'static str {
    if ntasks as usize <= nodes {
        "cyclic"
    } else {
        "block"
    }
}

/// What srun tells a bound task about its binding (`SLURM_CPU_BIND`, `_TYPE`, `_LIST`,
/// `_VERBOSE`), in its words: a named type (`threads`) as it is, a mask or map as the
/// task's own mask.
fn cpu_bind_vars(env: &mut BTreeMap<String, String>, b: &TaskBinding, cpus: &[u32]) {
    use gsched_types::binding::{CpuBind, Hint};
    let verbose = if b.verbose { "verbose" } else { "quiet" };
    let named = match (&b.bind, b.hint) {
        (CpuBind::None, Some(Hint::Nomultithread | Hint::Multithread)) => Some("threads"),
        (CpuBind::None, Some(_)) | (CpuBind::Cores, _) => Some("cores"),
        (CpuBind::Threads, _) => Some("threads"),
        (CpuBind::Sockets, _) => Some("sockets"),
        (CpuBind::Ldoms, _) => Some("ldoms"),
        (CpuBind::Rank, _) => Some("rank"),
        _ => None,
    };
    let (ty, list) = match named {
        Some(n) => (n.to_string(), String::new()),
        None => ("mask_cpu:".to_string(), crate::binding::hex_mask(cpus)),
    };
    env.insert("SLURM_CPU_BIND".into(), format!("{verbose},{ty}{list}"));
    env.insert("SLURM_CPU_BIND_TYPE".into(), ty);
    env.insert("SLURM_CPU_BIND_LIST".into(), list);
    env.insert("SLURM_CPU_BIND_VERBOSE".into(), verbose.into());
}

/// A step task's GPUs: the step's share of the job's GPUs on the node (the `slots` the
/// leader gave it, which no other running step holds; from an older leader, its first
/// `per_node` or `--gpus-per-task` for each of its `tasks_here`), bound to the task.
fn step_gpu_vars(
    env: &mut BTreeMap<String, String>,
    job_gpus: &[NodeGpu],
    gpus: &gsched_types::steps::StepGpus,
    slots: Option<&[u32]>,
    local: u32,
    tasks_here: u32,
) {
    if job_gpus.is_empty() {
        return;
    }
    let share: Vec<NodeGpu> = match slots {
        Some(slots) => slots
            .iter()
            .filter_map(|p| job_gpus.get(*p as usize).copied())
            .collect(),
        None => {
            let wanted = gpus
                .wanted(tasks_here)
                .map_or(job_gpus.len(), |n| n as usize);
            job_gpus[..wanted.min(job_gpus.len())].to_vec()
        }
    };
    let bound = bind_task(&share, &gpus.bind, local);
    set_gpu_vars(env, job_gpus, bound.as_deref(), true);
    if share.is_empty() {
        env.remove("SLURM_GPUS_ON_NODE");
    } else {
        env.insert("SLURM_GPUS_ON_NODE".into(), share.len().to_string());
    }
}

/// The node run's cgroup: its CPUs, the memory nodes of those CPUs, its memory (when the
/// allocation names an amount) and a pids limit per task.
pub fn cgroup_limits(launch: &LaunchSpec, topo: &Topology) -> CgroupLimits {
    let cpus = &launch.node_alloc.cpus;
    let mems: Vec<u32> = topo
        .numa_nodes
        .iter()
        .filter(|n| {
            gsched_types::cpulist::parse(&n.cpus)
                .map(|c| c.iter().any(|x| cpus.contains(x)))
                .unwrap_or(false)
        })
        .map(|n| n.id)
        .collect();
    let mem_mb = launch.node_alloc.mem_mb;
    CgroupLimits {
        name: format!("job_{}_{}", launch.job, launch.attempt),
        cpus: gsched_types::cpulist::format(cpus),
        mems: gsched_types::cpulist::format(&mems),
        mem_bytes: (mem_mb > 0).then_some(mem_mb * 1024 * 1024),
        pids: 4096 * u64::from(task_count(launch)),
    }
}

/// The device nodes of the run's GPUs, as discovery recorded them (a GPU without one,
/// like a fake topology's, has none to hand over).
pub fn gpu_devices(launch: &LaunchSpec, topo: &Topology) -> Vec<String> {
    launch
        .node_alloc
        .gpus
        .iter()
        .filter_map(|g| topo.gpus.get(*g as usize)?.device_path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::gpubind::GpuBind;
    use gsched_types::job::JobId;
    use gsched_types::steps::{StepGpus, StepLayout};

    fn job_plan(gpus: &[(u32, u32)]) -> Plan {
        let env = vec![
            ("CUDA_VISIBLE_DEVICES".to_string(), "0,1,2,3".to_string()),
            ("SLURM_JOB_ID".to_string(), "9".to_string()),
        ];
        Plan {
            argv: vec![],
            tasks: vec![env],
            workdir: "/".into(),
            stdout: "/dev/null".into(),
            stderr: None,
            uid: None,
            gid: None,
            groups: vec![],
            cgroup: None,
            umask: None,
            scratch: None,
            devices: vec![],
            contact_file: None,
            split_capture: false,
            input: TaskInput::None,
            truncate_output: false,
            gpus: gpus
                .iter()
                .map(|&(device, cuda)| NodeGpu { device, cuda })
                .collect(),
            affinity: None,
            affinity_verbose: false,
            task_scripts: TaskScripts::default(),
            notices: Vec::new(),
        }
    }

    fn step(gpus: StepGpus, per_node: u32) -> StepLaunch {
        StepLaunch {
            job: JobId(9),
            attempt: 0,
            step: 1,
            node_index: 0,
            layout: StepLayout {
                nodes: vec!["n1".into(), "n2".into()],
                ranks: vec![(0..per_node).collect(), (per_node..2 * per_node).collect()],
                ntasks: 2 * per_node,
            },
            argv: vec!["true".into()],
            env: BTreeMap::new(),
            cwd: "/".into(),
            pty: None,
            gpus,
            gpu_slots: None,
            cpus_per_task: None,
            binding: Default::default(),
            srun_env: BTreeMap::new(),
            task_scripts: Default::default(),
        }
    }

    fn var(p: &Plan, k: &str) -> Option<String> {
        p.tasks[0]
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn step_tasks_are_bound_among_the_jobs_gpus_as_srun_binds_them() {
        // Devices 4..7 of the node, numbered 0..3 for CUDA behind a device filter.
        let job = job_plan(&[(4, 0), (5, 1), (6, 2), (7, 3)]);
        let per_task = StepGpus {
            per_node: None,
            bind: GpuBind::PerTask(1),
        };
        let t1 = step_task(&job, &step(per_task, 4), 1, 1, None);
        assert_eq!(var(&t1, "CUDA_VISIBLE_DEVICES").as_deref(), Some("1"));
        assert_eq!(var(&t1, "SLURM_STEP_GPUS").as_deref(), Some("5"));
        assert_eq!(var(&t1, "SLURM_JOB_GPUS").as_deref(), Some("4,5,6,7"));
        assert_eq!(var(&t1, "SLURM_TASKS_PER_NODE").as_deref(), Some("4(x2)"));
        assert_eq!(var(&t1, "SLURM_GTIDS").as_deref(), Some("0,1,2,3"));
        // srun --gres=gpu:1 in a 4-GPU job: the first of them, and only one on the node.
        let one = StepGpus {
            per_node: Some(1),
            bind: GpuBind::All,
        };
        let t = step_task(&job, &step(one, 1), 0, 0, None);
        assert_eq!(var(&t, "CUDA_VISIBLE_DEVICES").as_deref(), Some("0"));
        assert_eq!(var(&t, "SLURM_GPUS_ON_NODE").as_deref(), Some("1"));
        // --gpu-bind=none: Slurm leaves the variables unset.
        let none = StepGpus {
            per_node: None,
            bind: GpuBind::None,
        };
        let t = step_task(&job, &step(none, 2), 0, 0, None);
        assert_eq!(var(&t, "CUDA_VISIBLE_DEVICES"), None);
        assert_eq!(var(&t, "SLURM_STEP_GPUS"), None);
    }

    #[test]
    fn a_variable_only_the_caller_sets_is_gone_when_the_caller_unset_it() {
        let mut job = job_plan(&[(0, 0)]);
        job.tasks[0].push(("SLURM_EXPORT_ENV".into(), "NONE".into()));
        job.tasks[0].push(("SLURM_MEM_PER_NODE".into(), "512".into()));
        let all = StepGpus {
            per_node: None,
            bind: GpuBind::All,
        };
        // The script ran `unset SLURM_EXPORT_ENV`; its SLURM_MEM_PER_NODE is still there.
        let mut s = step(all, 1);
        s.env.insert("SLURM_MEM_PER_NODE".into(), "512".into());
        let t = step_task(&job, &s, 0, 0, None);
        assert_eq!(var(&t, "SLURM_EXPORT_ENV"), None);
        assert_eq!(var(&t, "SLURM_MEM_PER_NODE").as_deref(), Some("512"));
        // What Slurm sets for every step comes from the job whatever the caller has.
        assert_eq!(var(&t, "SLURM_JOB_ID").as_deref(), Some("9"));
    }

    #[test]
    fn a_step_uses_the_gpus_the_leader_gave_it_not_the_first_ones() {
        let job = job_plan(&[(4, 0), (5, 1), (6, 2), (7, 3)]);
        let one = StepGpus {
            per_node: Some(1),
            bind: GpuBind::All,
        };
        // Positions 0 and 1 are held by other steps: the leader gave this one position 2.
        let mut s = step(one, 1);
        s.gpu_slots = Some(vec![2]);
        let t = step_task(&job, &s, 0, 0, None);
        assert_eq!(var(&t, "CUDA_VISIBLE_DEVICES").as_deref(), Some("2"));
        assert_eq!(var(&t, "SLURM_STEP_GPUS").as_deref(), Some("6"));
        assert_eq!(var(&t, "SLURM_GPUS_ON_NODE").as_deref(), Some("1"));
        // Two tasks with --gpus-per-task=1 on positions 1 and 3.
        let per_task = StepGpus {
            per_node: None,
            bind: GpuBind::PerTask(1),
        };
        let mut s = step(per_task, 2);
        s.gpu_slots = Some(vec![1, 3]);
        let t1 = step_task(&job, &s, 1, 1, None);
        assert_eq!(var(&t1, "CUDA_VISIBLE_DEVICES").as_deref(), Some("3"));
        assert_eq!(var(&t1, "SLURM_STEP_GPUS").as_deref(), Some("7"));
        // --gres=none: no GPU.
        let mut s = step(
            StepGpus {
                per_node: Some(0),
                bind: GpuBind::All,
            },
            1,
        );
        s.gpu_slots = Some(vec![]);
        let t = step_task(&job, &s, 0, 0, None);
        assert_eq!(var(&t, "CUDA_VISIBLE_DEVICES").as_deref(), Some(""));
        assert_eq!(var(&t, "SLURM_STEP_GPUS"), None);
        assert_eq!(var(&t, "SLURM_GPUS_ON_NODE"), None);
    }

    #[test]
    fn every_input_round_trips_through_the_plan_file() {
        for input in [
            TaskInput::None,
            TaskInput::Pipe,
            TaskInput::Pty(gsched_types::steps::TermSize { rows: 2, cols: 3 }),
            TaskInput::File {
                path: "/home/a/in.txt".into(),
            },
        ] {
            let json = serde_json::to_string(&input).expect("serialises");
            assert_eq!(serde_json::from_str::<TaskInput>(&json).unwrap(), input);
        }
    }
}
