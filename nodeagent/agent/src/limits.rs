//! The locked-memory limit jobs inherit from the agent: RDMA needs it unlimited (every
//! queue pair, completion queue and registered buffer is pinned memory), as slurmd's own
//! unit sets it (`LimitMEMLOCK=infinity`). On a node with RDMA devices the agent raises
//! its limit where it may and reports a node where it stays finite.

use gsched_types::topology::Topology;

/// A resource limit: `None` is unlimited.
pub type Limit = Option<u64>;

/// The finding's headline when jobs on this node would inherit a finite locked-memory
/// limit while the node has RDMA devices, else `None`.
pub fn memlock_shortfall(topo: &Topology, soft: Limit) -> Option<String> {
    let soft = soft?;
    let mut devices: Vec<&str> = topo
        .nics
        .iter()
        .filter(|n| n.kind.is_rdma())
        .map(|n| n.rdma_device.as_deref().unwrap_or(n.name.as_str()))
        .collect();
    devices.dedup();
    if devices.is_empty() {
        return None;
    }
    Some(format!(
        "jobs inherit a locked-memory limit of {} (RLIMIT_MEMLOCK) on a node with RDMA devices ({}): NCCL, UCX and MPI fail to create queues or register buffers (\"Cannot allocate memory\") once it is used up",
        human_bytes(soft),
        devices.join(", ")
    ))
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Raises this process's locked-memory limit (soft and hard) to unlimited, which needs
/// CAP_SYS_RESOURCE to raise a finite hard limit, and returns the soft limit it has after.
pub fn raise_memlock() -> Limit {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    let _ = setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY).or_else(|_| {
        let (_, hard) = getrlimit(Resource::RLIMIT_MEMLOCK)?;
        setrlimit(Resource::RLIMIT_MEMLOCK, hard, hard)
    });
    match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == RLIM_INFINITY => None,
        Ok((soft, _)) => Some(soft),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::topology::{Nic, NicKind};

    fn nic(name: &str, kind: NicKind, rdma: Option<&str>) -> Nic {
        let mut n: Nic =
            serde_json::from_value(serde_json::json!({"name": name, "kind": kind})).expect("a NIC");
        n.rdma_device = rdma.map(str::to_string);
        n
    }

    #[test]
    fn a_finite_limit_matters_only_where_there_is_rdma() {
        let mut topo = Topology::empty("test");
        topo.nics = vec![nic("eth0", NicKind::Ethernet, None)];
        assert_eq!(memlock_shortfall(&topo, Some(8 << 20)), None);
        topo.nics.push(nic("ib0", NicKind::Ib, Some("mlx5_0")));
        topo.nics.push(nic("ens1f0", NicKind::Roce, Some("mlx5_1")));
        let said = memlock_shortfall(&topo, Some(8 << 20)).unwrap();
        assert!(
            said.contains("8 MiB") && said.contains("mlx5_0, mlx5_1"),
            "{said}"
        );
        assert_eq!(memlock_shortfall(&topo, None), None);
        assert!(
            memlock_shortfall(&topo, Some(65536))
                .unwrap()
                .contains("64 KiB")
        );
    }

    #[test]
    fn raising_never_lowers_the_limit() {
        use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
        let (before, _) = getrlimit(Resource::RLIMIT_MEMLOCK).unwrap();
        let after = raise_memlock();
        match after {
            None => {}
            Some(soft) => assert!(before != RLIM_INFINITY && soft >= before),
        }
    }
}
