//! Which CPUs each of a node's tasks is bound to: srun's `--cpu-bind` over the job's CPUs
//! on the node, taken across sockets as `--distribution`'s second level says and one
//! thread per core under `--hint=nomultithread`, as Slurm's task/affinity plugin lays
//! them out. Pure: the node's facts come in as arguments.

use gsched_types::binding::{CpuBind, CpuDist, Hint, TaskBinding};

/// The job's CPUs on a node and where each sits.
pub struct NodeCpus<'a> {
    /// The job's CPU ids on the node, ascending.
    pub cpus: &'a [u32],
    /// The socket (NUMA node) of a CPU.
    pub socket_of: &'a dyn Fn(u32) -> u32,
    /// The physical core of a CPU (its hardware threads share it); a machine without
    /// SMT, or unknown: the CPU itself.
    pub core_of: &'a dyn Fn(u32) -> u32,
}

/// The CPUs task `local` (of `tasks_here` on the node) is bound to; `None`: no binding
/// (every task may run on all of the job's CPUs there).
pub fn task_cpus(
    b: &TaskBinding,
    cpus_per_task: u32,
    node: &NodeCpus<'_>,
    local: u32,
    tasks_here: u32,
) -> Option<Vec<u32>> {
    let one_per_core = matches!(
        b.hint,
        Some(Hint::Nomultithread | Hint::ComputeBound | Hint::MemoryBound)
    );
    let bind = match (&b.bind, b.hint) {
        // A hint with no binding of its own binds to cores, as task/affinity does.
        (CpuBind::None, Some(Hint::Multithread)) => CpuBind::Threads,
        (CpuBind::None, Some(_)) => CpuBind::Cores,
        // One task per core: each task's CPUs are whole cores (task/affinity's
        // dist_tasks.c with ntasks_per_core == 1).
        (CpuBind::None, None) if b.per_core == Some(1) => CpuBind::Cores,
        (bind, _) => bind.clone(),
    };
    let sockets = by_socket(node, one_per_core);
    let all: Vec<u32> = sockets
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .collect();
    if all.is_empty() {
        return None;
    }
    let i = local as usize;
    let cpus = match bind {
        CpuBind::None => return None,
        CpuBind::Rank => vec![node.cpus[i % node.cpus.len()]],
        CpuBind::MapCpu(list) => vec![list[i % list.len()]],
        CpuBind::MaskCpu(masks) => bits(masks[i % masks.len()]),
        CpuBind::MapLdom(list) => socket_cpus(&sockets, &[list[i % list.len()]]),
        CpuBind::MaskLdom(masks) => socket_cpus(&sockets, &bits(masks[i % masks.len()])),
        CpuBind::Sockets | CpuBind::Ldoms => sockets[i % sockets.len()].1.clone(),
        CpuBind::Cores | CpuBind::Threads => {
            let units = match bind {
                CpuBind::Cores if !one_per_core => cores(node, &sockets),
                _ => sockets
                    .iter()
                    .map(|(_, c)| c.iter().map(|x| vec![*x]).collect())
                    .collect(),
            };
            match b.per_socket {
                // At most `k` tasks on a socket: tasks go to the sockets `k` at a time.
                Some(k) if k > 0 && !units.is_empty() => {
                    let socket = ((local / k) as usize) % units.len();
                    let nth = (local / k / units.len() as u32) * k + local % k;
                    units_of(
                        &units[socket..=socket],
                        CpuDist::Block,
                        cpus_per_task.max(1),
                        nth,
                        tasks_here,
                    )
                }
                _ => units_of(&units, b.cpus, cpus_per_task.max(1), local, tasks_here),
            }
        }
    };
    let mut cpus = cpus;
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The usable CPUs by socket, sockets ascending; with `one_per_core`, the first thread
/// of each core only.
fn by_socket(node: &NodeCpus<'_>, one_per_core: bool) -> Vec<(u32, Vec<u32>)> {
    let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut seen_cores = std::collections::HashSet::new();
    for &c in node.cpus {
        let s = (node.socket_of)(c);
        if one_per_core && !seen_cores.insert((s, (node.core_of)(c))) {
            continue;
        }
        match out.iter_mut().find(|(x, _)| *x == s) {
            Some((_, v)) => v.push(c),
            None => out.push((s, vec![c])),
        }
    }
    out.sort_by_key(|(s, _)| *s);
    out
}

/// Each socket's CPUs grouped by core, in CPU order.
fn cores(node: &NodeCpus<'_>, sockets: &[(u32, Vec<u32>)]) -> Vec<Vec<Vec<u32>>> {
    sockets
        .iter()
        .map(|(_, cpus)| {
            let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
            for &c in cpus {
                let core = (node.core_of)(c);
                match groups.iter_mut().find(|(k, _)| *k == core) {
                    Some((_, v)) => v.push(c),
                    None => groups.push((core, vec![c])),
                }
            }
            groups.into_iter().map(|(_, v)| v).collect()
        })
        .collect()
}

/// Task `local`'s `per_task` units (cores or threads) from `units` (per socket), dealt
/// as `dist` says; tasks beyond what the node holds start again from the first unit.
fn units_of(
    units: &[Vec<Vec<u32>>],
    dist: CpuDist,
    per_task: u32,
    local: u32,
    tasks_here: u32,
) -> Vec<u32> {
    let per_task = per_task as usize;
    let total: usize = units.iter().map(Vec::len).sum();
    if total == 0 {
        return Vec::new();
    }
    // The order units are handed out in, then task i takes the i-th run of `per_task`.
    let order: Vec<(usize, usize)> = match dist {
        CpuDist::Block => units
            .iter()
            .enumerate()
            .flat_map(|(s, u)| (0..u.len()).map(move |k| (s, k)))
            .collect(),
        CpuDist::Fcyclic => round_robin(units, 1),
        CpuDist::Cyclic => round_robin(units, per_task),
    };
    let _ = tasks_here;
    let start = (local as usize * per_task) % total;
    (0..per_task)
        .flat_map(|k| {
            let (s, u) = order[(start + k) % total];
            units[s][u].clone()
        })
        .collect()
}

/// Units dealt from each socket in turn, `run` at a time.
fn round_robin(units: &[Vec<Vec<u32>>], run: usize) -> Vec<(usize, usize)> {
    let mut next = vec![0usize; units.len()];
    let total: usize = units.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut s = 0;
    while out.len() < total {
        let mut took = 0;
        while took < run && next[s] < units[s].len() {
            out.push((s, next[s]));
            next[s] += 1;
            took += 1;
        }
        s = (s + 1) % units.len();
    }
    out
}

/// The CPUs of the sockets named.
fn socket_cpus(sockets: &[(u32, Vec<u32>)], which: &[u32]) -> Vec<u32> {
    sockets
        .iter()
        .filter(|(s, _)| which.contains(s))
        .flat_map(|(_, c)| c.iter().copied())
        .collect()
}

fn bits(mask: u64) -> Vec<u32> {
    (0..64).filter(|b| mask & (1 << b) != 0).collect()
}

/// A CPU list as Slurm's `mask_cpu` hex mask (`0x3`).
pub fn hex_mask(cpus: &[u32]) -> String {
    let mut words = vec![0u64; cpus.iter().map(|c| *c as usize / 64 + 1).max().unwrap_or(1)];
    for c in cpus {
        words[*c as usize / 64] |= 1 << (c % 64);
    }
    let mut out = String::from("0x");
    for (i, w) in words.iter().rev().enumerate() {
        if i == 0 {
            out.push_str(&format!("{w:X}"));
        } else {
            out.push_str(&format!("{w:016X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::binding::{parse_cpu_bind, parse_distribution};

    /// Two sockets of 4 cores, 2 threads each, numbered as Linux numbers them: 0-7 the
    /// first threads (0-3 on socket 0, 4-7 on socket 1), 8-15 their siblings.
    fn node(cpus: &[u32]) -> (Vec<u32>, impl Fn(u32) -> u32, impl Fn(u32) -> u32) {
        (cpus.to_vec(), |c: u32| (c % 8) / 4, |c: u32| c % 8)
    }

    fn bound(dist: &str, bind: &str, hint: Option<Hint>, c: u32, tasks: u32) -> Vec<Vec<u32>> {
        let all: Vec<u32> = (0..16).collect();
        let (cpus, socket_of, core_of) = node(&all);
        let n = NodeCpus {
            cpus: &cpus,
            socket_of: &socket_of,
            core_of: &core_of,
        };
        let (nodes, cpu_dist) = parse_distribution(dist).unwrap();
        let (b, verbose) = parse_cpu_bind(bind).unwrap();
        let binding = TaskBinding {
            nodes,
            cpus: cpu_dist,
            bind: b,
            verbose,
            hint,
            per_socket: None,
            per_core: None,
        };
        (0..tasks)
            .map(|t| task_cpus(&binding, c, &n, t, tasks).unwrap_or_default())
            .collect()
    }

    #[test]
    fn tasks_are_laid_out_as_distribution_says() {
        // Threads, one each: block fills socket 0 first, cyclic alternates sockets.
        assert_eq!(
            bound("block:block", "threads", None, 1, 3),
            [vec![0], vec![1], vec![2]]
        );
        assert_eq!(
            bound("block:cyclic", "threads", None, 1, 3),
            [vec![0], vec![4], vec![1]]
        );
        // Two CPUs each: cyclic keeps a task on one socket, fcyclic spreads each task.
        assert_eq!(
            bound("block:cyclic", "threads", None, 2, 2),
            [vec![0, 1], vec![4, 5]]
        );
        assert_eq!(
            bound("block:fcyclic", "threads", None, 2, 2),
            [vec![0, 4], vec![1, 5]]
        );
        // Cores take both threads of a core.
        assert_eq!(
            bound("block:block", "cores", None, 1, 2),
            [vec![0, 8], vec![1, 9]]
        );
        assert_eq!(
            bound("*", "sockets", None, 1, 3)[1],
            [4, 5, 6, 7, 12, 13, 14, 15]
        );
        assert_eq!(bound("*", "rank", None, 1, 2), [vec![0], vec![1]]);
        assert_eq!(
            bound("*", "map_cpu:3,9", None, 1, 3),
            [vec![3], vec![9], vec![3]]
        );
        assert_eq!(bound("*", "mask_cpu:0x3", None, 1, 1), [vec![0, 1]]);
        assert_eq!(bound("*", "map_ldom:1", None, 1, 1)[0].len(), 8);
        assert_eq!(bound("*", "none", None, 1, 2), [Vec::<u32>::new(), vec![]]);
    }

    #[test]
    fn ntasks_per_core_one_binds_whole_cores() {
        let all: Vec<u32> = (0..16).collect();
        let (cpus, socket_of, core_of) = node(&all);
        let n = NodeCpus {
            cpus: &cpus,
            socket_of: &socket_of,
            core_of: &core_of,
        };
        let per_core = |k| TaskBinding {
            per_core: k,
            ..TaskBinding::default()
        };
        // One task per core: each task has both threads of its own core.
        let one = per_core(Some(1));
        let cores: Vec<Vec<u32>> = (0..3)
            .map(|t| task_cpus(&one, 1, &n, t, 3).unwrap())
            .collect();
        for c in &cores {
            assert_eq!(c.len(), 2);
            assert_eq!(core_of(c[0]), core_of(c[1]));
        }
        assert_ne!(core_of(cores[0][0]), core_of(cores[1][0]));
        // More per core than a core has threads, or none given: no binding of its own.
        assert_eq!(task_cpus(&per_core(Some(2)), 1, &n, 0, 3), None);
        assert_eq!(task_cpus(&per_core(None), 1, &n, 0, 3), None);
    }

    #[test]
    fn ntasks_per_socket_keeps_tasks_apart() {
        let all: Vec<u32> = (0..16).collect();
        let (cpus, socket_of, core_of) = node(&all);
        let n = NodeCpus {
            cpus: &cpus,
            socket_of: &socket_of,
            core_of: &core_of,
        };
        let binding = |per_socket| TaskBinding {
            bind: CpuBind::Threads,
            cpus: CpuDist::Block,
            per_socket,
            ..TaskBinding::default()
        };
        let of = |b: &TaskBinding, t| task_cpus(b, 1, &n, t, 4).unwrap();
        // Block alone would fill socket 0: tasks 0-3 on CPUs 0-3.
        assert_eq!(of(&binding(None), 3), [3]);
        // One per socket: tasks alternate sockets 0 and 1.
        let one = binding(Some(1));
        assert_eq!(
            (0..4).map(|t| of(&one, t)[0]).collect::<Vec<_>>(),
            [0, 4, 1, 5]
        );
        // Two per socket: 0, 1 on socket 0; 2, 3 on socket 1.
        let two = binding(Some(2));
        assert_eq!(
            (0..4).map(|t| of(&two, t)[0]).collect::<Vec<_>>(),
            [0, 1, 4, 5]
        );
    }

    #[test]
    fn hint_nomultithread_gives_one_thread_per_core() {
        let tasks = bound("block:block", "none", Some(Hint::Nomultithread), 2, 2);
        assert_eq!(
            tasks,
            [vec![0, 1], vec![2, 3]],
            "first threads only, cores bound"
        );
        assert!(tasks.iter().flatten().all(|c| *c < 8));
        let tasks = bound("block:block", "none", Some(Hint::Multithread), 2, 1);
        assert_eq!(tasks, [vec![0, 1]]);
    }

    #[test]
    fn masks_print_as_slurm_prints_them() {
        assert_eq!(hex_mask(&[0, 1]), "0x3");
        assert_eq!(hex_mask(&[4, 12]), "0x1010");
        assert_eq!(hex_mask(&[64]), "0x10000000000000000");
    }
}
