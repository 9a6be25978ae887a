//! The environment of each task: torchrun's rendezvous variables, `CUDA_VISIBLE_DEVICES`
//! in PCI order, NCCL settings derived from the node's real NICs, and the `SLURM_*`
//! variables existing scripts read.
//!
//! Precedence, lowest first: the environment inherited from the submitting shell; gsched's
//! NCCL/PyTorch tuning; the agent's configured overrides; variables the user exported
//! explicitly (`--export=NAME=value`); and last the job's identity (ids, ranks, node list,
//! GPUs), which nothing may override.

use crate::plan::task_count;
use gsched_types::gpubind::GpuBind;
use gsched_types::hostlist;
use gsched_types::job::LaunchMode;
use gsched_types::launch::LaunchSpec;
use gsched_types::topology::{NicKind, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

/// How NCCL reaches the network from this node for this job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct NetPlan {
    /// Interface for NCCL's sockets and bootstrap (`NCCL_SOCKET_IFNAME==<name>`).
    pub socket_ifname: Option<String>,
    /// RDMA HCA ports nearest the job's GPUs (`NCCL_IB_HCA==mlx5_0:1,...`).
    pub ib_hcas: Vec<String>,
    /// RoCE v2 GID index, when discovery found one.
    pub gid_index: Option<u32>,
}

/// Chooses NCCL's interfaces for a job on `gpus`. `training_iface` is the interface that
/// carries the node's training address (decided by the agent; `lo` only for a one-host
/// demo cluster that was configured on 127.0.0.1).
pub fn net_plan(topo: &Topology, gpus: &[u32], training_iface: Option<&str>) -> NetPlan {
    let usable = |n: &&gsched_types::topology::Nic| n.kind.is_rdma() && n.up != Some(false);
    // An SR-IOV virtual function whose physical function is here too shares the PF's
    // port: it is no rail of its own (inside a VM, where only VFs show, they are).
    let shares_a_port = |n: &gsched_types::topology::Nic| {
        n.sriov_pf.as_deref().is_some_and(|pf| {
            topo.nics
                .iter()
                .filter(usable)
                .any(|p| p.sriov_pf.is_none() && p.pci_bus_id.as_deref() == Some(pf))
        })
    };
    let rdma: Vec<usize> = topo
        .nics
        .iter()
        .enumerate()
        .filter(|(_, n)| usable(n) && !shares_a_port(n))
        .map(|(i, _)| i)
        .collect();
    let link_rank = |gpu: u32, nic: usize| {
        topo.gpu_nic_links
            .get(gpu as usize)
            .and_then(|r| r.get(nic))
            .map(|l| l.rank())
            .unwrap_or(u16::MAX)
    };
    let mut chosen: Vec<usize> = Vec::new();
    if gpus.is_empty() {
        chosen = rdma.clone();
    } else {
        for &g in gpus {
            let best = rdma.iter().map(|&n| link_rank(g, n)).min();
            for &n in &rdma {
                if Some(link_rank(g, n)) == best && !chosen.contains(&n) {
                    chosen.push(n);
                }
            }
        }
        chosen.sort_unstable();
    }
    let ib_hcas = chosen
        .iter()
        .map(|&i| {
            let n = &topo.nics[i];
            format!(
                "{}:{}",
                n.rdma_device.as_deref().unwrap_or(&n.name),
                n.rdma_port.unwrap_or(1)
            )
        })
        .collect();
    let gid_index = chosen.iter().find_map(|&i| {
        (topo.nics[i].kind == NicKind::Roce)
            .then_some(topo.nics[i].roce_v2_gid_index)
            .flatten()
    });
    let socket_ifname = training_iface.map(str::to_string).or_else(|| {
        topo.nics
            .iter()
            .filter(|n| n.is_usable() && n.netdev.is_some())
            .min_by_key(|n| {
                let worst = gpus
                    .iter()
                    .map(|g| {
                        topo.gpu_nic_links
                            .get(*g as usize)
                            .and_then(|r| {
                                topo.nics
                                    .iter()
                                    .position(|x| x.name == n.name)
                                    .and_then(|k| r.get(k))
                            })
                            .map(|l| l.rank())
                            .unwrap_or(u16::MAX)
                    })
                    .max()
                    .unwrap_or(0);
                (
                    n.ipv4.is_empty(),
                    worst,
                    u64::MAX - n.speed_mbps.unwrap_or(0),
                )
            })
            .and_then(|n| n.netdev.clone())
    });
    NetPlan {
        socket_ifname,
        ib_hcas,
        gid_index,
    }
}

/// Inputs for one task's environment.
pub struct TaskEnv<'a> {
    pub launch: &'a LaunchSpec,
    pub node: &'a str,
    pub local_task: u32,
    pub net: &'a NetPlan,
    /// The step's log directory (NCCL debug files, torchrun error file).
    pub log_dir: &'a str,
    /// Overrides from the agent's configuration.
    pub agent_env: &'a BTreeMap<String, String>,
    /// The job owner's home directory, when known.
    pub home: Option<&'a str>,
    /// Device index of each of the agent's GPUs (empty: the same as gsched's index), for
    /// agents that manage a subset of a machine's GPUs (`gagentd --gpus`).
    pub gpu_map: &'a [u32],
    /// A device filter hides every GPU but the step's: CUDA then numbers the step's GPUs
    /// from 0 (in PCI order), so `CUDA_VISIBLE_DEVICES` must too (as Slurm does with
    /// `ConstrainDevices`). `SLURM_JOB_GPUS`/`SLURM_STEP_GPUS` keep the device indices.
    pub devices_filtered: bool,
}

/// A job's `PATH` when its submission carried none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `SLURM_TASKS_PER_NODE`: srun's blocks, compressed (`4(x2)`, `2(x2),1`).
fn tasks_per_node(ntasks: u32, nodes: usize) -> String {
    compress_counts(&gsched_types::steps::block_counts(ntasks, nodes as u32))
}

/// The cluster's tools inside a job, for scripts that call `scontrol`/`sbatch`: the
/// directory of Slurm-named links first on `PATH`, and the controllers in
/// `GSCHED_CONTROLLERS` unless the job brought its own.
pub fn add_cluster_tools(
    env: &mut BTreeMap<String, String>,
    slurm_names: Option<&str>,
    controllers: &str,
) {
    if let Some(dir) = slurm_names {
        let path = env
            .get("PATH")
            .cloned()
            .unwrap_or_else(|| DEFAULT_PATH.to_string());
        if !path.split(':').any(|p| p == dir) {
            env.insert("PATH".into(), format!("{dir}:{path}"));
        }
        // Read by the login-shell snippet (`gagentd`'s slurm_names): this node's links.
        env.insert("GSCHED_SLURM_NAMES".into(), dir.to_string());
    }
    if !controllers.is_empty() && !env.contains_key("GSCHED_CONTROLLERS") {
        env.insert("GSCHED_CONTROLLERS".into(), controllers.to_string());
    }
}

/// The complete environment of one task.
pub fn task_env(t: &TaskEnv<'_>) -> BTreeMap<String, String> {
    let l = t.launch;
    let spec = &l.spec;
    let mut env: BTreeMap<String, String> = spec.env.clone();
    if !env.contains_key("PATH") {
        env.insert("PATH".into(), DEFAULT_PATH.into());
    }

    // NCCL and PyTorch tuning from the node's hardware; explicit exports win over these.
    let mut tuning: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(ifname) = &t.net.socket_ifname {
        tuning.insert("NCCL_SOCKET_IFNAME", format!("={ifname}"));
    }
    if t.net.ib_hcas.is_empty() {
        tuning.insert("NCCL_IB_DISABLE", "1".into());
    } else {
        tuning.insert("NCCL_IB_HCA", format!("={}", t.net.ib_hcas.join(",")));
        if let Some(g) = t.net.gid_index {
            tuning.insert("NCCL_IB_GID_INDEX", g.to_string());
        }
    }
    // INFO for initialisation only, into the step's private debug file: the agent reads
    // there which network NCCL chose and warns when it fell back to sockets. A user's own
    // NCCL_DEBUG keeps NCCL's default subsystems.
    tuning.insert("NCCL_DEBUG", "INFO".into());
    if !spec.env.contains_key("NCCL_DEBUG") && !spec.env_overrides.contains_key("NCCL_DEBUG") {
        tuning.insert("NCCL_DEBUG_SUBSYS", "INIT,ENV".into());
    }
    tuning.insert("NCCL_DEBUG_FILE", format!("{}/nccl.%h.%p.log", t.log_dir));
    // PyTorch's default (3: tear the process down on a NCCL error); torchrun would force 1.
    tuning.insert("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3".into());
    // Surface hangs: the monitor thread kills a rank whose watchdog is stuck.
    tuning.insert("TORCH_NCCL_ENABLE_MONITORING", "1".into());
    tuning.insert("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "300".into());
    tuning.insert("TORCH_NCCL_DUMP_ON_TIMEOUT", "1".into());
    tuning.insert(
        "TORCH_FR_DUMP_TEMP_FILE",
        format!("{}/nccl_trace_rank_", t.log_dir),
    );
    tuning.insert(
        "TORCHELASTIC_ERROR_FILE",
        format!("{}/torchelastic-error-{}.json", t.log_dir, t.local_task),
    );
    tuning.insert(
        "NCCL_SOCKET_MAGIC",
        format!("{}", 0x6773_6368_0000_0000u64 | l.job.0),
    );
    if !env.contains_key("OMP_NUM_THREADS") {
        tuning.insert("OMP_NUM_THREADS", omp_threads(l).to_string());
    }
    for (k, v) in tuning {
        env.insert(k.to_string(), v);
    }
    for (k, v) in t.agent_env {
        env.insert(k.clone(), v.clone());
    }
    for (k, v) in &spec.env_overrides {
        env.insert(k.clone(), v.clone());
    }

    // Identity: nothing overrides these.
    let nnodes = l.nodes.len() as u32;
    let per_node = spec.ntasks_per_node.max(1);
    let ntasks = match spec.launch {
        // A batch job's tasks are its steps', which srun lays out in blocks (2+1).
        LaunchMode::Batch if spec.ntasks > 0 => spec.ntasks.min(nnodes * per_node),
        _ => nnodes * per_node,
    };
    let rank = l.node_rank * per_node + t.local_task;
    let on_node = node_gpus(l, t.gpu_map, t.devices_filtered);
    let bound = match spec.launch {
        // The batch step has every GPU of its node, as Slurm gives it; srun binds tasks.
        LaunchMode::Batch => Some(on_node.clone()),
        LaunchMode::EachNode => bind_task(&on_node, &job_gpu_bind(spec), t.local_task),
    };
    let nodelist = hostlist::compress(&l.nodes);
    let job_id = l.job.to_string();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("GSCHED_JOB_ID", job_id.clone());
    set("GSCHED_JOB_NAME", spec.name.clone());
    set("GSCHED_JOB_NODELIST", nodelist.clone());
    set("GSCHED_NNODES", nnodes.to_string());
    set("GSCHED_NODEID", l.node_rank.to_string());
    set("GSCHED_NODENAME", t.node.to_string());
    set("GSCHED_GPUS_PER_NODE", spec.gpus_per_node.to_string());
    set("GSCHED_RESTART_COUNT", l.attempt.to_string());
    set("GSCHED_LOG_DIR", t.log_dir.to_string());
    set("MASTER_ADDR", l.allocation.master_addr.clone());
    set("MASTER_PORT", l.allocation.master_port.to_string());
    set("RANK", rank.to_string());
    set("LOCAL_RANK", t.local_task.to_string());
    set("WORLD_SIZE", ntasks.to_string());
    set("LOCAL_WORLD_SIZE", per_node.to_string());
    set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    set("SLURM_JOB_ID", job_id.clone());
    set("SLURM_JOBID", job_id);
    set("SLURM_JOB_NAME", spec.name.clone());
    set("SLURM_JOB_USER", spec.user.clone());
    set("SLURM_JOB_NODELIST", nodelist.clone());
    set("SLURM_NODELIST", nodelist);
    set("SLURM_NNODES", nnodes.to_string());
    set("SLURM_JOB_NUM_NODES", nnodes.to_string());
    set("SLURM_NODEID", l.node_rank.to_string());
    set("SLURM_PROCID", rank.to_string());
    set("SLURM_LOCALID", t.local_task.to_string());
    if spec.given.ntasks || spec.launch == LaunchMode::EachNode {
        set("SLURM_NTASKS", ntasks.to_string());
        set("SLURM_NPROCS", ntasks.to_string());
    }
    if spec.given.ntasks_per_node || spec.launch == LaunchMode::EachNode {
        set("SLURM_NTASKS_PER_NODE", per_node.to_string());
    }
    if let Some(e) = &spec.given.export {
        set("SLURM_EXPORT_ENV", e.clone());
    }
    set("SLURM_GTIDS", gtids(l.node_rank * per_node, task_count(l)));
    let cpus_per_node: Vec<u32> = l
        .allocation
        .nodes
        .iter()
        .map(|n| n.cpus.len() as u32)
        .collect();
    // A job that named no task count has as many tasks as CPUs per task fit in the CPUs
    // it asked for on each node (Slurm 22.05's env_array_for_batch_job lays them out so:
    // `--gres=gpu:8 --cpus-per-gpu=4` is 32 tasks, an exclusive node all its CPUs). A GPU
    // job that named no CPU count asked for one CPU a task: its GPUs' share of the CPUs
    // is gsched's gift, not Slurm's allocation, and counts no tasks.
    let counted_from_cpus = !spec.given.ntasks
        && spec.launch != LaunchMode::EachNode
        && (spec.exclusive || !spec.gpu_share_cpus);
    let tasks_per_node_text = if counted_from_cpus {
        let per_task = spec.cpus_per_task.max(1);
        compress_counts(
            &cpus_per_node
                .iter()
                .map(|c| c / per_task)
                .collect::<Vec<_>>(),
        )
    } else {
        tasks_per_node(ntasks, l.nodes.len())
    };
    set("SLURM_TASKS_PER_NODE", tasks_per_node_text);
    set("SLURM_CPUS_ON_NODE", l.node_alloc.cpus.len().to_string());
    set("SLURM_JOB_CPUS_PER_NODE", compress_counts(&cpus_per_node));
    if !on_node.is_empty() {
        set("SLURM_GPUS_ON_NODE", on_node.len().to_string());
    }
    if spec.gpus_per_node > 0 {
        set("SLURM_GPUS_PER_NODE", spec.gpus_per_node.to_string());
    }
    if let Some(g) = &spec.given.gpus {
        set("SLURM_GPUS", g.clone());
    }
    // What the job's steps read back as srun's defaults.
    if let Some(d) = &spec.given.distribution {
        set("SLURM_DISTRIBUTION", d.clone());
    }
    if let Some(h) = &spec.given.hint {
        set("SLURM_HINT", h.clone());
        if h == "nomultithread" {
            set("SLURM_THREADS_PER_CORE", "1".into());
        }
    }
    if let Some(n) = spec.given.ntasks_per_socket {
        set("SLURM_NTASKS_PER_SOCKET", n.to_string());
    }
    if let Some(n) = spec.given.ntasks_per_core {
        set("SLURM_NTASKS_PER_CORE", n.to_string());
    }
    if let Some(f) = &spec.given.cpu_freq {
        set("SLURM_CPU_FREQ_REQ", f.clone());
    }
    if let Some(f) = &spec.given.gpu_freq {
        set("SLURM_GPU_FREQ", f.clone());
    }
    if let Some(m) = spec
        .given
        .mem_bind
        .as_deref()
        .and_then(|m| gsched_types::tuning::mem_bind(m).ok())
    {
        set("SLURM_MEM_BIND", m.job_value());
        if m.sort {
            set("SLURM_MEM_BIND_SORT", "sort".into());
        }
        set("SLURM_MEM_BIND_VERBOSE", m.verbosity().into());
    }
    if spec.given.overcommit {
        set("SLURM_OVERCOMMIT", "1".into());
    }
    set("SLURM_SUBMIT_DIR", spec.submit_dir.clone());
    set("SLURMD_NODENAME", t.node.to_string());
    set(
        "SLURM_JOB_PARTITION",
        spec.partition.clone().unwrap_or_default(),
    );
    if l.attempt > 0 {
        set("SLURM_RESTART_COUNT", l.attempt.to_string());
    }
    if let Some(a) = &spec.account {
        set("SLURM_JOB_ACCOUNT", a.clone());
    }
    if let Some((array_job, task)) = l.array {
        set("SLURM_ARRAY_JOB_ID", array_job.to_string());
        set("SLURM_ARRAY_TASK_ID", task.to_string());
        set("GSCHED_ARRAY_TASK_ID", task.to_string());
        if let Some(span) = l.array_span {
            set("SLURM_ARRAY_TASK_COUNT", span.count.to_string());
            set("SLURM_ARRAY_TASK_MIN", span.min.to_string());
            set("SLURM_ARRAY_TASK_MAX", span.max.to_string());
            set("SLURM_ARRAY_TASK_STEP", span.step.to_string());
        }
    }
    // The submitted environment's HOME, as Slurm keeps it (a login shell reads its startup
    // files there); the owner's home directory where the environment names none.
    if let Some(home) = t.home.filter(|_| !spec.env.contains_key("HOME")) {
        set("HOME", home.to_string());
    }
    set("USER", spec.user.clone());
    set("LOGNAME", spec.user.clone());
    if !l.node_alloc.cpus.is_empty() {
        set(
            "GSCHED_CPUS",
            gsched_types::cpulist::format(&l.node_alloc.cpus),
        );
    }
    slurm_request_vars(&mut env, spec, l.node_alloc.mem_mb);
    set_gpu_vars(
        &mut env,
        &on_node,
        bound.as_deref(),
        spec.launch == LaunchMode::EachNode,
    );
    env
}

/// One of the node's job GPUs: its device index (what `SLURM_JOB_GPUS` names) and its
/// number for CUDA inside the job (from 0 behind a device filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeGpu {
    pub device: u32,
    pub cuda: u32,
}

/// The job's GPUs on this node, in allocation order.
pub fn node_gpus(l: &LaunchSpec, gpu_map: &[u32], devices_filtered: bool) -> Vec<NodeGpu> {
    let device = |g: u32| gpu_map.get(g as usize).copied().unwrap_or(g);
    let mut by_device: Vec<u32> = l.node_alloc.gpus.iter().map(|g| device(*g)).collect();
    by_device.sort_unstable();
    l.node_alloc
        .gpus
        .iter()
        .map(|g| {
            let d = device(*g);
            let cuda = if devices_filtered {
                by_device.iter().position(|x| *x == d).unwrap_or(0) as u32
            } else {
                d
            };
            NodeGpu { device: d, cuda }
        })
        .collect()
}

/// The binding the job asked for (`--gpu-bind`, `--gpus-per-task`, `--ntasks-per-gpu`).
pub fn job_gpu_bind(spec: &gsched_types::JobSpec) -> GpuBind {
    GpuBind::implied(
        spec.gpu_bind.clone(),
        spec.gpus_per_task,
        spec.ntasks_per_gpu,
    )
}

/// The GPUs local task `task` sees (`None`: unbound, as `--gpu-bind=none`).
pub fn bind_task(on_node: &[NodeGpu], bind: &GpuBind, task: u32) -> Option<Vec<NodeGpu>> {
    let devices: Vec<u32> = on_node.iter().map(|g| g.device).collect();
    bind.positions(task, &devices)
        .map(|p| p.into_iter().map(|i| on_node[i]).collect())
}

/// A task's GPU variables: the node's job GPUs, and those bound to it (`per_task`: also
/// `SLURM_STEP_GPUS`, which Slurm sets for step tasks and not for the batch step).
pub fn set_gpu_vars(
    env: &mut BTreeMap<String, String>,
    on_node: &[NodeGpu],
    bound: Option<&[NodeGpu]>,
    per_task: bool,
) {
    let list = |gs: &[NodeGpu], f: fn(&NodeGpu) -> u32| {
        gs.iter()
            .map(|g| f(g).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    for k in [
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
    ] {
        env.remove(k);
    }
    if on_node.is_empty() {
        // Slurm sets none of these without GPUs; CUDA still sees none (as a device
        // cgroup would hide them) on nodes that run jobs without one.
        env.insert("CUDA_VISIBLE_DEVICES".into(), String::new());
        return;
    }
    env.insert("SLURM_JOB_GPUS".into(), list(on_node, |g| g.device));
    if bound.is_some_and(|b| b.is_empty()) {
        // A step that takes none of the job's GPUs (`srun --gres=none`): as without GPUs.
        env.insert("CUDA_VISIBLE_DEVICES".into(), String::new());
        return;
    }
    if let Some(b) = bound {
        env.insert("CUDA_VISIBLE_DEVICES".into(), list(b, |g| g.cuda));
        // The three Slurm's gres/gpu sets by default (gres_common.c: NVML, RSMI, OpenCL):
        // AMD's ROCm reads ROCR_VISIBLE_DEVICES as CUDA reads its own.
        env.insert("ROCR_VISIBLE_DEVICES".into(), list(b, |g| g.cuda));
        env.insert("GPU_DEVICE_ORDINAL".into(), list(b, |g| g.cuda));
        if per_task {
            env.insert("SLURM_STEP_GPUS".into(), list(b, |g| g.device));
        }
    }
}

/// The variables Slurm sets from what was asked for, only when it was asked for.
fn slurm_request_vars(
    env: &mut BTreeMap<String, String>,
    spec: &gsched_types::JobSpec,
    mem_mb: u64,
) {
    let mut set = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            env.insert(k.to_string(), v);
        }
    };
    set("SLURM_JOB_UID", spec.uid.map(|u| u.to_string()));
    set("SLURM_JOB_GID", spec.gid.map(|g| g.to_string()));
    set("SLURM_SUBMIT_HOST", spec.submit_host.clone());
    set(
        "SLURM_CPUS_PER_TASK",
        (spec.cpus_per_task > 1 || spec.given.cpus_per_task)
            .then(|| spec.cpus_per_task.to_string()),
    );
    set(
        "SLURM_CPUS_PER_GPU",
        spec.cpus_per_gpu.map(|c| c.to_string()),
    );
    set(
        "SLURM_GPUS_PER_TASK",
        spec.gpus_per_task.map(|g| g.to_string()),
    );
    set(
        "SLURM_NTASKS_PER_GPU",
        spec.ntasks_per_gpu.map(|n| n.to_string()),
    );
    set(
        "SLURM_NTASKS_PER_TRES",
        spec.ntasks_per_gpu.map(|n| n.to_string()),
    );
    set(
        "SLURM_OPEN_MODE",
        spec.open_mode.filter(|_| spec.given.open_mode).map(|m| {
            match m {
                gsched_types::job::OpenMode::Append => "a",
                gsched_types::job::OpenMode::Truncate => "t",
            }
            .to_string()
        }),
    );
    // sbatch asks for the owner's login environment whenever --export is not ALL.
    set(
        "SLURM_GET_USER_ENV",
        spec.given
            .export
            .as_deref()
            .filter(|e| !e.eq_ignore_ascii_case("ALL"))
            .map(|_| "1".to_string()),
    );
    set(
        "SLURM_GPU_BIND",
        spec.gpu_bind.as_ref().map(|b| b.to_string()),
    );
    let per_cpu = spec.given.mem_per_cpu_mb;
    set("SLURM_MEM_PER_CPU", per_cpu.map(|m| m.to_string()));
    set(
        "SLURM_MEM_PER_NODE",
        spec.mem_mb
            .filter(|m| *m > 0 && per_cpu.is_none())
            .map(|_| mem_mb.to_string()),
    );
    set(
        "SLURM_MEM_PER_GPU",
        spec.mem_per_gpu_mb.map(|m| m.to_string()),
    );
}

/// `SLURM_GTIDS`: the global ranks of the tasks on this node.
fn gtids(first: u32, count: u32) -> String {
    (first..first + count)
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Counts in Slurm's compressed form: `8(x2),4`.
pub fn compress_counts(counts: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|c| **c == counts[i]).count();
        out.push(if run > 1 {
            format!("{}(x{run})", counts[i])
        } else {
            counts[i].to_string()
        });
        i += run;
    }
    out.join(",")
}

/// Threads per process: the task's CPUs, or, for a job whose CPUs go with its GPUs (its
/// GPUs' share of the node, or `--cpus-per-gpu`), the node's CPUs split over the processes
/// on the node (torchrun's workers, one per GPU).
fn omp_threads(l: &LaunchSpec) -> u32 {
    let spec = &l.spec;
    if !spec.gpu_share_cpus && spec.cpus_per_gpu.is_none() {
        return spec.cpus_per_task.max(1);
    }
    let procs = if spec.torchrun.is_some() {
        crate::torchrun::nproc_per_node(spec)
    } else {
        spec.ntasks_per_node.max(1)
    };
    (l.node_alloc.cpus.len() as u32 / procs).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::job::{JobId, JobSpec};
    use gsched_types::resources::{Allocation, NodeAlloc};
    use gsched_types::topology::{LinkClass, Nic};

    fn dgx_like() -> Topology {
        let mut t = Topology::empty("t");
        for i in 0..4 {
            t.gpus.push(gsched_types::Gpu::new(i));
        }
        t.gpu_links = (0..4)
            .map(|i| {
                (0..4)
                    .map(|j| {
                        if i == j {
                            LinkClass::SameDevice
                        } else {
                            LinkClass::NvLink(12)
                        }
                    })
                    .collect()
            })
            .collect();
        let mut nics = Vec::new();
        for k in [0, 1, 10] {
            let mut n = Nic::new(&format!("mlx5_{k}"), NicKind::Roce);
            n.rdma_device = Some(format!("mlx5_{k}"));
            n.rdma_port = Some(1);
            n.roce_v2_gid_index = Some(3);
            n.netdev = Some(format!("ens{k}"));
            nics.push(n);
        }
        let mut docker = Nic::new("docker0", NicKind::Virtual);
        docker.netdev = Some("docker0".into());
        nics.push(docker);
        t.nics = nics;
        // GPU0,1 next to mlx5_0; GPU2,3 next to mlx5_1; mlx5_10 far from all.
        t.gpu_nic_links = (0..4)
            .map(|g| {
                vec![
                    if g < 2 {
                        LinkClass::Pxb
                    } else {
                        LinkClass::Sys
                    },
                    if g >= 2 {
                        LinkClass::Pxb
                    } else {
                        LinkClass::Sys
                    },
                    LinkClass::Sys,
                    LinkClass::Sys,
                ]
            })
            .collect();
        t
    }

    fn launch(gpus: Vec<u32>) -> LaunchSpec {
        let mut spec = JobSpec::simple("train", "alice", "true");
        spec.nodes = 2;
        spec.gpus_per_node = gpus.len() as u32;
        spec.env
            .insert("NCCL_SOCKET_IFNAME".into(), "docker0".into());
        spec.env.insert("HOME".into(), "/wrong".into());
        let na = NodeAlloc {
            node: "n2".into(),
            gpus,
            cpus: vec![0, 1],
            mem_mb: 100,
            nic: Some("mlx5_0".into()),
            exclusive: false,
        };
        LaunchSpec {
            job: JobId(7),
            array: None,
            array_span: None,
            attempt: 0,
            node_rank: 1,
            nodes: vec!["n1".into(), "n2".into()],
            spec,
            allocation: Allocation {
                nodes: vec![na.clone(), na.clone()],
                master_addr: "10.0.0.1".into(),
                master_port: 29_501,
            },
            node_alloc: na,
            start_ms: 0,
            time_limit_s: None,
            kill_grace_s: None,
            idle_threshold_pct: None,
        }
    }

    #[test]
    fn jobs_find_the_cluster_tools() {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), "/home/a/bin:/usr/bin".to_string());
        add_cluster_tools(&mut env, Some("/opt/gsched/slurm"), "c1:6817,c2:6817");
        assert_eq!(env["PATH"], "/opt/gsched/slurm:/home/a/bin:/usr/bin");
        assert_eq!(env["GSCHED_CONTROLLERS"], "c1:6817,c2:6817");
        env.insert("GSCHED_CONTROLLERS".to_string(), "mine:1".to_string());
        add_cluster_tools(&mut env, Some("/opt/gsched/slurm"), "c1:6817");
        assert_eq!(
            env["PATH"], "/opt/gsched/slurm:/home/a/bin:/usr/bin",
            "added once"
        );
        assert_eq!(env["GSCHED_CONTROLLERS"], "mine:1");
    }

    #[test]
    fn a_gpu_share_job_splits_its_cpus_over_its_workers_threads() {
        let mut l = launch(vec![0, 1]);
        l.node_alloc.cpus = (0..16).collect();
        assert_eq!(omp_threads(&l), 1, "an explicit -c keeps its count");
        l.spec.gpu_share_cpus = true;
        assert_eq!(omp_threads(&l), 16, "one task has the share");
        l.spec.torchrun = Some(gsched_types::job::TorchrunSpec {
            program: "train.py".into(),
            args: vec![],
            extra_args: vec![],
        });
        assert_eq!(omp_threads(&l), 8, "two torchrun workers");
    }

    #[test]
    fn nearest_hcas_exact_match_and_gid() {
        let plan = net_plan(&dgx_like(), &[0, 1], None);
        assert_eq!(
            plan.ib_hcas,
            vec!["mlx5_0:1"],
            "mlx5_1 and mlx5_10 are farther"
        );
        assert_eq!(plan.gid_index, Some(3));
        assert_ne!(plan.socket_ifname.as_deref(), Some("docker0"));
        let both = net_plan(&dgx_like(), &[1, 2], None);
        assert_eq!(both.ib_hcas, vec!["mlx5_0:1", "mlx5_1:1"]);
    }

    #[test]
    fn an_sriov_vf_beside_its_pf_is_no_rail_but_alone_in_a_vm_it_is() {
        let mut t = dgx_like();
        // mlx5_10 becomes a VF of mlx5_1, as nearby to GPU 2 and 3 as its PF.
        t.nics[1].pci_bus_id = Some("0000:af:00.0".into());
        t.nics[2].sriov_pf = Some("0000:af:00.0".into());
        for g in 2..4 {
            t.gpu_nic_links[g][2] = t.gpu_nic_links[g][1];
        }
        assert_eq!(net_plan(&t, &[2, 3], None).ib_hcas, vec!["mlx5_1:1"]);
        // Inside a VM only the VF shows: it is the rail.
        t.nics[1].up = Some(false);
        assert_eq!(net_plan(&t, &[2, 3], None).ib_hcas, vec!["mlx5_10:1"]);
    }

    #[test]
    fn inherited_nccl_vars_do_not_beat_discovery_but_explicit_exports_do() {
        let topo = dgx_like();
        let l = launch(vec![0, 1]);
        let net = net_plan(&topo, &l.node_alloc.gpus, Some("ens0"));
        let agent_env = BTreeMap::new();
        let env = task_env(&TaskEnv {
            launch: &l,
            node: "n2",
            local_task: 0,
            net: &net,
            log_dir: "/var/log/j7",
            agent_env: &agent_env,
            home: Some("/home/alice"),
            gpu_map: &[],
            devices_filtered: false,
        });
        assert_eq!(env["NCCL_SOCKET_IFNAME"], "=ens0");
        assert_eq!(env["NCCL_IB_HCA"], "=mlx5_0:1");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(env["SLURM_PROCID"], "1");
        assert_eq!(env["SLURM_NODEID"], "1");
        assert_eq!(env["SLURM_JOB_NODELIST"], "n[1-2]");
        assert_eq!(env["MASTER_ADDR"], "10.0.0.1");
        assert_eq!(env["MASTER_PORT"], "29501");
        assert_eq!(
            env["HOME"], "/wrong",
            "the submitted HOME, as Slurm keeps it"
        );
        assert_eq!(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
        let mut bare = l.clone();
        bare.spec.env.remove("HOME");
        let env = task_env(&TaskEnv {
            launch: &bare,
            node: "n2",
            local_task: 0,
            net: &net,
            log_dir: "/x",
            agent_env: &agent_env,
            home: Some("/home/alice"),
            gpu_map: &[],
            devices_filtered: false,
        });
        assert_eq!(env["HOME"], "/home/alice", "none submitted: the owner's");
        let mut l2 = l.clone();
        l2.spec
            .env_overrides
            .insert("NCCL_SOCKET_IFNAME".into(), "=ib0".into());
        l2.spec
            .env_overrides
            .insert("SLURM_PROCID".into(), "99".into());
        let env = task_env(&TaskEnv {
            launch: &l2,
            node: "n2",
            local_task: 0,
            net: &net,
            log_dir: "/x",
            agent_env: &agent_env,
            home: None,
            gpu_map: &[],
            devices_filtered: false,
        });
        assert_eq!(
            env["NCCL_SOCKET_IFNAME"], "=ib0",
            "an explicit --export wins"
        );
        assert_eq!(
            env["SLURM_PROCID"], "1",
            "identity variables cannot be overridden"
        );
    }

    #[test]
    fn no_rdma_disables_ib() {
        let mut topo = dgx_like();
        topo.nics.retain(|n| n.kind == NicKind::Virtual);
        topo.gpu_nic_links = vec![vec![LinkClass::Sys]; 4];
        let plan = net_plan(&topo, &[0], None);
        assert!(plan.ib_hcas.is_empty());
        assert_eq!(plan.socket_ifname, None, "docker0 is never offered");
        let l = launch(vec![0]);
        let env = task_env(&TaskEnv {
            launch: &l,
            node: "n2",
            local_task: 0,
            net: &plan,
            log_dir: "/x",
            agent_env: &BTreeMap::new(),
            home: None,
            gpu_map: &[],
            devices_filtered: false,
        });
        assert_eq!(env["NCCL_IB_DISABLE"], "1");
        assert!(!env.contains_key("NCCL_IB_HCA"));
    }

    /// One task's environment with no network plan, agent overrides or home.
    fn env_of(
        l: &LaunchSpec,
        node: &str,
        local_task: u32,
        gpu_map: &[u32],
        devices_filtered: bool,
    ) -> BTreeMap<String, String> {
        task_env(&TaskEnv {
            launch: l,
            node,
            local_task,
            net: &NetPlan::default(),
            log_dir: "/x",
            agent_env: &BTreeMap::new(),
            home: None,
            gpu_map,
            devices_filtered,
        })
    }

    #[test]
    fn per_task_gpu_binding() {
        let mut l = launch(vec![4, 5, 6, 7]);
        l.spec.ntasks_per_node = 2;
        l.spec.ntasks = 4;
        l.spec.gpus_per_task = Some(2);
        let e1 = env_of(&l, "n2", 1, &[], false);
        assert_eq!(e1["CUDA_VISIBLE_DEVICES"], "6,7");
        assert_eq!(e1["SLURM_PROCID"], "3");
        assert_eq!(e1["SLURM_LOCALID"], "1");
        assert_eq!(e1["SLURM_NTASKS"], "4");
        assert_eq!(e1["SLURM_JOB_GPUS"], "4,5,6,7");
        // Slurm's batch step: all of the node's job GPUs, no step GPUs, whatever the
        // per-task binding of the job's srun steps will be.
        l.spec.launch = LaunchMode::Batch;
        l.node_rank = 0;
        let batch = env_of(&l, "n1", 0, &[], false);
        assert_eq!(batch["CUDA_VISIBLE_DEVICES"], "4,5,6,7");
        assert_eq!(batch["SLURM_GPUS_PER_TASK"], "2");
        assert!(!batch.contains_key("SLURM_STEP_GPUS"));
        assert!(
            !batch.contains_key("SLURM_CPUS_PER_TASK"),
            "only when -c is given"
        );
        assert_eq!(batch["SLURM_JOB_CPUS_PER_NODE"], "2(x2)");
        assert_eq!(batch["SLURM_TASKS_PER_NODE"], "2(x2)");
        // -n 3 over 2 nodes: srun's blocks, 2 then 1.
        l.spec.ntasks = 3;
        l.spec.given.ntasks = true;
        let uneven = env_of(&l, "n1", 0, &[], false);
        assert_eq!(uneven["SLURM_TASKS_PER_NODE"], "2,1");
        assert_eq!(uneven["SLURM_NTASKS"], "3");
        // Slurm 22.05 (tests/slurmdiff 49): `-c 1` given sets SLURM_CPUS_PER_TASK=1, and
        // --mem-per-cpu sets SLURM_MEM_PER_CPU, not SLURM_MEM_PER_NODE.
        l.spec.given.cpus_per_task = true;
        l.spec.mem_mb = Some(2048);
        l.spec.given.mem_per_cpu_mb = Some(512);
        let given = env_of(&l, "n1", 0, &[], false);
        assert_eq!(given["SLURM_CPUS_PER_TASK"], "1");
        assert_eq!(given["SLURM_MEM_PER_CPU"], "512");
        assert!(!given.contains_key("SLURM_MEM_PER_NODE"));
        l.spec.given.mem_per_cpu_mb = None;
        assert!(env_of(&l, "n1", 0, &[], false).contains_key("SLURM_MEM_PER_NODE"));
        // An agent managing devices 2 and 3 of a machine as its GPUs 0 and 1.
        let mut l = launch(vec![0, 1]);
        l.spec.ntasks_per_node = 1;
        let e = env_of(&l, "n2", 0, &[2, 3], false);
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "2,3");
    }

    #[test]
    fn a_device_filter_renumbers_cuda_devices_from_zero() {
        // Seen on the 2x H200: behind the filter CUDA enumerates only the step's GPUs,
        // and a job given device 1 as CUDA_VISIBLE_DEVICES=1 found "No CUDA GPUs".
        let mut l = launch(vec![5, 1, 3, 7]);
        l.spec.ntasks_per_node = 2;
        l.spec.gpus_per_task = Some(2);
        let net = NetPlan::default();
        let env = |local_task| {
            task_env(&TaskEnv {
                launch: &l,
                node: "n2",
                local_task,
                net: &net,
                log_dir: "/x",
                agent_env: &BTreeMap::new(),
                home: None,
                gpu_map: &[],
                devices_filtered: true,
            })
        };
        let (e0, e1) = (env(0), env(1));
        assert_eq!(
            e0["CUDA_VISIBLE_DEVICES"], "2,0",
            "devices 5 and 1 of 1,3,5,7"
        );
        assert_eq!(e1["CUDA_VISIBLE_DEVICES"], "1,3", "devices 3 and 7");
        assert_eq!(e0["GPU_DEVICE_ORDINAL"], "2,0");
        assert_eq!(
            e0["SLURM_STEP_GPUS"], "5,1",
            "Slurm's variables keep device ids"
        );
        assert_eq!(e0["SLURM_JOB_GPUS"], "5,1,3,7");
    }
}
