//! How a step's tasks are laid out and bound, in srun's words: `--distribution`
//! (`block|cyclic|plane=N` over nodes, then `block|cyclic|fcyclic` over sockets),
//! `--cpu-bind` and `--hint`.

use serde::{Deserialize, Serialize};

/// How tasks are spread over the step's nodes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NodeDist {
    /// Consecutive ranks on a node until its share is full (srun's default).
    #[default]
    Block,
    /// Rank r on node r mod N.
    Cyclic,
    /// Blocks of this many ranks, dealt round the nodes.
    Plane(u32),
}

/// How a node's tasks take CPUs across its sockets (NUMA nodes).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CpuDist {
    /// Each task's CPUs from the next socket in turn (Slurm's default second level).
    #[default]
    Cyclic,
    /// Fill a socket before the next.
    Block,
    /// Each CPU of a task from the next socket in turn.
    Fcyclic,
}

/// `--cpu-bind`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case", tag = "kind", content = "list")]
pub enum CpuBind {
    /// No binding: every task may run on all of the job's CPUs on its node.
    #[default]
    None,
    /// `--cpus-per-task` whole cores each.
    Cores,
    /// `--cpus-per-task` hardware threads each.
    Threads,
    /// All of one socket's allocated CPUs each (a NUMA node, as gsched knows sockets).
    Sockets,
    /// As `Sockets`.
    Ldoms,
    /// The CPU whose position in the allocation is the task's local rank.
    Rank,
    /// Task i on CPU list[i mod len] (machine ids).
    MapCpu(Vec<u32>),
    /// Task i on the CPUs of mask list[i mod len].
    MaskCpu(Vec<u64>),
    /// Task i on NUMA node list[i mod len].
    MapLdom(Vec<u32>),
    /// Task i on the NUMA nodes of mask list[i mod len].
    MaskLdom(Vec<u64>),
}

/// `--hint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Hint {
    /// One hardware thread per core.
    Nomultithread,
    Multithread,
    /// One task per core, all of a socket's cores.
    ComputeBound,
    /// One task per core, one socket's memory each.
    MemoryBound,
}

/// A step's layout and binding.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct TaskBinding {
    #[serde(default, skip_serializing_if = "is_default")]
    pub nodes: NodeDist,
    #[serde(default, skip_serializing_if = "is_default")]
    pub cpus: CpuDist,
    #[serde(default, skip_serializing_if = "is_default")]
    pub bind: CpuBind,
    /// Say what each task is bound to (`--cpu-bind=verbose,...`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verbose: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<Hint>,
    /// At most this many tasks on each socket (`--ntasks-per-socket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_socket: Option<u32>,
    /// At most this many tasks on each core (`--ntasks-per-core`): 1 binds each task to
    /// whole cores, as Slurm's task/affinity does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_core: Option<u32>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl TaskBinding {
    pub fn is_default(&self) -> bool {
        *self == TaskBinding::default()
    }
}

/// A `--distribution`, `--cpu-bind` or `--hint` value gsched does not read; the message
/// names what it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    #[error(
        "--distribution={0}: use block, cyclic or plane=N, then :block, :cyclic or :fcyclic (arbitrary needs SLURM_HOSTFILE, which gsched does not read: list the nodes with -w)"
    )]
    Distribution(String),
    #[error(
        "--cpu-bind={0}: use none, cores, threads, sockets, ldoms, rank, map_cpu:LIST, mask_cpu:LIST, map_ldom:LIST or mask_ldom:LIST (with verbose, or quiet)"
    )]
    CpuBind(String),
    #[error("--hint={0}: use nomultithread, multithread, compute_bound or memory_bound")]
    Hint(String),
}

/// `--distribution`: `NODES[:CPUS[:...]][,Pack|NoPack]`.
pub fn parse_distribution(text: &str) -> Result<(NodeDist, CpuDist), BindingError> {
    let bad = || BindingError::Distribution(text.to_string());
    let main = text.split(',').next().unwrap_or("");
    let mut levels = main.split(':');
    let nodes = match levels.next().unwrap_or("") {
        "" | "*" | "block" => NodeDist::Block,
        "cyclic" => NodeDist::Cyclic,
        p if p.starts_with("plane=") => {
            NodeDist::Plane(p[6..].parse().ok().filter(|n| *n > 0).ok_or_else(bad)?)
        }
        "plane" => NodeDist::Plane(1),
        _ => return Err(bad()),
    };
    let cpus = match levels.next().unwrap_or("") {
        "" | "*" | "cyclic" => CpuDist::Cyclic,
        "block" => CpuDist::Block,
        "fcyclic" => CpuDist::Fcyclic,
        _ => return Err(bad()),
    };
    // A third level (cores within sockets) orders CPUs inside a socket; gsched always
    // takes them in order, which is `block`.
    match levels.next() {
        None | Some("" | "*" | "block" | "cyclic" | "fcyclic") => Ok((nodes, cpus)),
        Some(_) => Err(bad()),
    }
}

fn list<T>(text: &str, hex: bool) -> Option<Vec<T>>
where
    T: std::str::FromStr + TryFrom<u64>,
{
    text.split(',')
        .map(|v| {
            let v = v.trim();
            let n = if hex || v.starts_with("0x") || v.starts_with("0X") {
                u64::from_str_radix(v.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
            } else {
                v.parse::<u64>().ok()
            }?;
            T::try_from(n).ok()
        })
        .collect::<Option<Vec<T>>>()
        .filter(|v| !v.is_empty())
}

/// `--cpu-bind`: `[verbose|quiet,]TYPE`, where `map_cpu:0,1,2` and the like carry a
/// comma list of their own. Returns the binding and whether it is verbose.
pub fn parse_cpu_bind(text: &str) -> Result<(CpuBind, bool), BindingError> {
    let bad = || BindingError::CpuBind(text.to_string());
    let mut verbose = false;
    let mut rest = text;
    loop {
        let (head, tail) = rest.split_once(',').unwrap_or((rest, ""));
        match head {
            "verbose" | "v" => verbose = true,
            "quiet" | "q" => {}
            _ => break,
        }
        rest = tail;
    }
    let bind = match rest.split_once(':') {
        Some(("map_cpu", v)) => CpuBind::MapCpu(list(v, false).ok_or_else(bad)?),
        Some(("mask_cpu", v)) => CpuBind::MaskCpu(list(v, true).ok_or_else(bad)?),
        Some(("map_ldom", v)) => CpuBind::MapLdom(list(v, false).ok_or_else(bad)?),
        Some(("mask_ldom", v)) => CpuBind::MaskLdom(list(v, true).ok_or_else(bad)?),
        Some(_) => return Err(bad()),
        None => match rest {
            "" | "none" | "no" => CpuBind::None,
            "cores" => CpuBind::Cores,
            "threads" => CpuBind::Threads,
            "sockets" => CpuBind::Sockets,
            "ldoms" => CpuBind::Ldoms,
            "rank" => CpuBind::Rank,
            _ => return Err(bad()),
        },
    };
    Ok((bind, verbose))
}

/// `--hint`.
pub fn parse_hint(text: &str) -> Result<Hint, BindingError> {
    match text {
        "nomultithread" => Ok(Hint::Nomultithread),
        "multithread" => Ok(Hint::Multithread),
        "compute_bound" => Ok(Hint::ComputeBound),
        "memory_bound" => Ok(Hint::MemoryBound),
        other => Err(BindingError::Hint(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_binding_options_read_as_srun_reads_them() {
        assert_eq!(
            parse_distribution("cyclic"),
            Ok((NodeDist::Cyclic, CpuDist::Cyclic))
        );
        assert_eq!(
            parse_distribution("block:block"),
            Ok((NodeDist::Block, CpuDist::Block))
        );
        assert_eq!(
            parse_distribution("plane=4"),
            Ok((NodeDist::Plane(4), CpuDist::Cyclic))
        );
        assert_eq!(
            parse_distribution("*:fcyclic,Pack"),
            Ok((NodeDist::Block, CpuDist::Fcyclic))
        );
        assert!(parse_distribution("arbitrary").is_err());
        assert!(parse_distribution("plane=0").is_err());
        assert_eq!(parse_cpu_bind("none"), Ok((CpuBind::None, false)));
        assert_eq!(parse_cpu_bind("verbose,cores"), Ok((CpuBind::Cores, true)));
        assert_eq!(
            parse_cpu_bind("map_cpu:0,8,3"),
            Ok((CpuBind::MapCpu(vec![0, 8, 3]), false))
        );
        assert_eq!(
            parse_cpu_bind("v,mask_cpu:0x3,C"),
            Ok((CpuBind::MaskCpu(vec![3, 12]), true))
        );
        assert!(parse_cpu_bind("map_cpu:").is_err());
        assert!(parse_cpu_bind("bogus").is_err());
        assert_eq!(parse_hint("nomultithread"), Ok(Hint::Nomultithread));
        assert!(parse_hint("fast").is_err());
    }
}
