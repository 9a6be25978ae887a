//! The network NCCL settled on, read from its INFO lines (`Using network Socket`, NCCL
//! 2.27's `Assigned NET plugin Socket`, the `NET/IB` and `NET/Socket` device lines), and
//! judged against the node: sockets where the node has RDMA ports, sockets over an IPoIB
//! interface, and what made NCCL give RDMA up (libibverbs not loadable, devices that could
//! not be opened, `NCCL_IB_DISABLE`). The agent reports these as warnings on the job;
//! `gagentd diagnose` reads saved logs with the same code.

use gsched_types::findings::{Component, Finding, Severity, clip};
use gsched_types::topology::{NicKind, Topology};

/// What the node offers NCCL: its RDMA ports and its IPoIB interfaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeNet {
    /// RDMA devices whose port is up (`mlx5_0`).
    pub rdma: Vec<String>,
    /// Network interfaces that are IP over InfiniBand (`ib0`, `ibp24s0`).
    pub ipoib: Vec<String>,
}

impl NodeNet {
    pub fn of(topo: &Topology) -> NodeNet {
        let rdma = topo
            .nics
            .iter()
            .filter(|n| n.kind.is_rdma() && n.up != Some(false))
            .map(|n| n.rdma_device.clone().unwrap_or_else(|| n.name.clone()))
            .collect();
        let ipoib = topo
            .nics
            .iter()
            .filter(|n| n.kind == NicKind::Ib)
            .filter_map(|n| n.netdev.clone())
            .collect();
        NodeNet { rdma, ipoib }
    }
}

/// The transport NCCL chose for a communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    Socket,
    /// InfiniBand verbs (IB or RoCE).
    Ib,
}

/// NCCL's network lines of one step, as they arrive.
#[derive(Debug, Clone, Default)]
pub struct TransportLog {
    network: Option<(Network, String)>,
    socket_line: Option<String>,
    socket_ifaces: Vec<String>,
    verbs_missing: Option<String>,
    /// NCCL found RDMA devices and could not use them.
    rdma_unopenable: Option<String>,
    /// NCCL found no RDMA device at all.
    rdma_none: Option<String>,
    ib_disabled: Option<String>,
    /// The most nodes a communicator spanned (`nNodes` of NCCL's init line).
    nodes: Option<u32>,
    judged: bool,
    /// NCCL's "Bootstrap : Using [0]IFACE:ADDR" line, when its first choice is one other
    /// hosts cannot reach.
    bootstrap_unreachable: Option<String>,
    bootstrap_judged: bool,
}

/// The library a line says could not be loaded (`libibverbs`, `libnvidia-ml`, `libcuda`).
pub fn missing_library(line: &str) -> Option<&'static str> {
    if line.contains("Failed to open libibverbs") {
        Some("libibverbs")
    } else if line.contains("Failed to open libnvidia-ml") {
        Some("libnvidia-ml")
    } else if line.contains("Failed to find CUDA library libcuda")
        || line.contains("Failed to open libcuda")
    {
        Some("libcuda")
    } else {
        None
    }
}

/// The interface names of a `NET/Socket : Using [0]ib0:10.0.0.1<0> [1]eth1:...` line.
fn socket_ifaces(rest: &str) -> Vec<String> {
    rest.split_whitespace()
        .filter_map(|w| {
            let w = w.strip_prefix('[')?;
            let (_, after) = w.split_once(']')?;
            let name = after.split(':').next()?;
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Whether the first interface of "[0]ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0<0> ..." is
/// one other hosts cannot reach: loopback, IPv4 or IPv6 link-local, a tunnel, a container
/// bridge or a veth.
fn unreachable_from_other_hosts(rest: &str) -> bool {
    let Some(first) = rest
        .split_whitespace()
        .next()
        .and_then(|w| w.strip_prefix("[0]"))
    else {
        return false;
    };
    let (name, addr) = first.split_once(':').unwrap_or((first, ""));
    let addr = addr.split('<').next().unwrap_or("");
    [
        "lo", "docker", "veth", "virbr", "ip6tnl", "tunl", "sit", "cni", "flannel",
    ]
    .iter()
    .any(|p| name == *p || (name.starts_with(p) && *p != "lo"))
        || addr.starts_with("127.")
        || addr.starts_with("169.254.")
        || addr.to_ascii_lowercase().starts_with("fe80:")
}

impl TransportLog {
    /// Takes one line of a job's output or NCCL debug file.
    pub fn line(&mut self, line: &str) {
        if !line.contains("NCCL") && !line.contains("NET/") {
            return;
        }
        let t = line.trim();
        if let Some(pos) = t.find("Bootstrap : Using ") {
            if self.bootstrap_unreachable.is_none() && unreachable_from_other_hosts(&t[pos + 18..])
            {
                self.bootstrap_unreachable = Some(t.to_string());
            }
        } else if let Some(pos) = t.find("NET/Socket : Using ") {
            let ifaces = socket_ifaces(&t[pos + 19..]);
            if !ifaces.is_empty() {
                self.socket_ifaces = ifaces;
                self.socket_line = Some(t.to_string());
            }
        } else if t.contains("Using network Socket") || t.contains("Assigned NET plugin Socket") {
            self.network = Some((Network::Socket, t.to_string()));
        } else if t.contains("Using network IB") || t.contains("Assigned NET plugin IB") {
            self.network = Some((Network::Ib, t.to_string()));
        } else if missing_library(t) == Some("libibverbs") {
            self.verbs_missing.get_or_insert_with(|| t.to_string());
        } else if t.contains("Unable to open device")
            || t.contains("Call to ibv_open_device failed")
            || (t.contains("dlvsym failed") && t.contains("mlx5"))
        {
            self.rdma_unopenable.get_or_insert_with(|| t.to_string());
        } else if t.contains("NET/IB : No device found")
            || t.contains("call to devices() returned 0 devices")
            // Also printed when IB is disabled or simply absent: a consequence, not a cause.
            || t.contains("Failed to initialize NET plugin IB")
        {
            self.rdma_none.get_or_insert_with(|| t.to_string());
        } else if t.contains("NCCL_IB_DISABLE set by environment to 1") {
            self.ib_disabled.get_or_insert_with(|| t.to_string());
        } else if let Some(pos) = t.find(" nNodes ") {
            let n = t[pos + 8..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u32>().ok());
            if let Some(n) = n {
                self.nodes = Some(self.nodes.map_or(n, |m| m.max(n)));
            }
        }
    }

    /// The network chosen so far, if NCCL has said.
    pub fn network(&self) -> Option<Network> {
        self.network.as_ref().map(|(n, _)| *n)
    }

    /// NCCL has chosen a network and `judge` has not looked at it yet.
    pub fn awaits_judgement(&self) -> bool {
        self.network.is_some() && !self.judged
    }

    /// Why NCCL gave RDMA up, in words, with the line that says so.
    fn why_sockets(&self) -> (String, Option<&str>) {
        if let Some(l) = &self.ib_disabled {
            (
                "NCCL_IB_DISABLE=1 is set in the job's environment".into(),
                Some(l),
            )
        } else if let Some(l) = &self.verbs_missing {
            (
                "NCCL could not load libibverbs (install rdma-core's libibverbs1 and ibverbs-providers in the job's environment or container)".into(),
                Some(l),
            )
        } else if let Some(l) = &self.rdma_unopenable {
            (
                "NCCL could not open the RDMA devices (inside a container: bind /dev/infiniband and allow its devices; check the verbs provider, e.g. libmlx5, matches rdma-core)".into(),
                Some(l),
            )
        } else if let Some(l) = &self.rdma_none {
            (
                "NCCL found no RDMA device (is /dev/infiniband visible to the job?)".into(),
                Some(l),
            )
        } else {
            ("NCCL chose sockets (NCCL_NET=Socket?)".into(), None)
        }
    }

    /// The warnings this log calls for, once NCCL has chosen a network; each is returned
    /// once (later calls return nothing). `node` is what the node offers, when known
    /// (the live agent); without it (a saved log) the interface names are the guide.
    /// A log whose communicators all stayed on one node says nothing: NCCL names a
    /// network there too, but never sends over it.
    pub fn judge(&mut self, node: Option<&NodeNet>) -> Vec<Finding> {
        if self.nodes == Some(1) {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !self.bootstrap_judged
            && let Some(l) = &self.bootstrap_unreachable
        {
            self.bootstrap_judged = true;
            out.push(Finding::new(
                Severity::Warn,
                Component::Nccl,
                "nccl-bootstrap-interface",
                l,
                "NCCL's bootstrap picked an interface other hosts cannot reach (loopback, a link-local address, a tunnel, a container bridge or veth): set NCCL_SOCKET_IFNAME to the training interface, or exclude these (NCCL_SOCKET_IFNAME=^lo,docker,veth)",
            ));
        }
        if self.judged {
            return out;
        }
        out.extend(self.judge_network(node));
        out
    }

    fn judge_network(&mut self, node: Option<&NodeNet>) -> Vec<Finding> {
        let Some((network, chosen)) = self.network.clone() else {
            return Vec::new();
        };
        self.judged = true;
        if network != Network::Socket {
            return Vec::new();
        }
        let is_ipoib = |name: &str| match node {
            Some(n) => n.ipoib.iter().any(|i| i == name),
            None => name.starts_with("ib"),
        };
        let over_ipoib: Vec<&String> = self.socket_ifaces.iter().filter(|i| is_ipoib(i)).collect();
        let (why, cause_line) = self.why_sockets();
        let evidence = |first: Option<&str>| {
            let mut lines: Vec<&str> = Vec::new();
            lines.extend(first);
            lines.extend(self.socket_line.as_deref());
            lines.push(&chosen);
            clip(&lines.join(" | "), 600)
        };
        let note = |severity: Severity,
                    kind: &str,
                    component: Component,
                    first: Option<&str>,
                    action: String| Finding {
            node: None,
            severity,
            component,
            gpu: None,
            pci_bus_id: None,
            kind: kind.to_string(),
            evidence: evidence(first),
            action,
        };
        let rdma_on_node = node.is_some_and(|n| !n.rdma.is_empty());
        let mut out = Vec::new();
        if !over_ipoib.is_empty() {
            out.push(note(
                Severity::Warn,
                "nccl-socket-over-ipoib",
                Component::Ib,
                cause_line,
                format!(
                    "NCCL sends over TCP on the IPoIB interface {}, a fraction of what InfiniBand verbs give: {why}",
                    over_ipoib
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ));
        } else if rdma_on_node {
            out.push(note(
                Severity::Warn,
                "nccl-socket-despite-rdma",
                Component::Nccl,
                cause_line,
                format!(
                    "this node has RDMA ({}) but NCCL runs over TCP sockets: {why}",
                    node.map(|n| n.rdma.join(",")).unwrap_or_default()
                ),
            ));
        } else if node.is_none() && cause_line.is_some() {
            // Devices NCCL could not open exist; a missing library or none found may be
            // a node without RDMA, which a saved log cannot tell.
            let severity = if self.rdma_unopenable.is_some() && self.ib_disabled.is_none() {
                Severity::Warn
            } else {
                Severity::Info
            };
            out.push(note(
                severity,
                "nccl-rdma-unavailable",
                Component::Nccl,
                cause_line,
                format!(
                    "NCCL runs over TCP sockets; if this node has InfiniBand or RoCE, that is a degraded transport: {why}"
                ),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rdma: &[&str], ipoib: &[&str]) -> NodeNet {
        NodeNet {
            rdma: rdma.iter().map(|s| s.to_string()).collect(),
            ipoib: ipoib.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn feed(text: &str) -> TransportLog {
        let mut t = TransportLog::default();
        text.lines().for_each(|l| t.line(l));
        t
    }

    #[test]
    fn ib_in_use_is_no_warning() {
        let mut t = feed(
            "h:1:1 [0] NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0>\n\
             h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n\
             h:1:1 [0] NCCL INFO Using network IB\n",
        );
        assert_eq!(t.network(), Some(Network::Ib));
        assert!(t.judge(Some(&node(&["mlx5_0"], &["ib0"]))).is_empty());
    }

    #[test]
    fn sockets_on_an_ethernet_only_node_are_fine() {
        let mut t = feed(
            "h:1:1 [0] NCCL INFO NET/IB : No device found.\n\
             h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n\
             h:1:1 [0] NCCL INFO Using network Socket\n",
        );
        assert!(t.judge(Some(&node(&[], &[]))).is_empty());
    }

    #[test]
    fn sockets_where_rdma_exists_warn_once_with_the_cause() {
        let mut t = feed(
            "h:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n\
             h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n\
             h:1:1 [0] NCCL INFO Using network Socket\n",
        );
        let f = t.judge(Some(&node(&["mlx5_0"], &[])));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "nccl-socket-despite-rdma");
        assert!(f[0].action.contains("libibverbs"), "{}", f[0].action);
        assert!(
            f[0].evidence
                .starts_with("h:1:1 [0] NCCL INFO Failed to open libibverbs")
        );
        assert!(t.judge(Some(&node(&["mlx5_0"], &[]))).is_empty());
    }

    #[test]
    fn sockets_over_ipoib_warn() {
        let mut t = feed(
            "NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n\
             NCCL INFO NET/Socket : Using [0]ibp24s0:10.100.9.37<0> [1]ibp41s0:10.100.9.38<0>\n\
             NCCL INFO Initialized NET plugin Socket\n\
             NCCL INFO Assigned NET plugin Socket to comm\n",
        );
        let f = t.judge(None);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "nccl-socket-over-ipoib");
        assert!(f[0].action.contains("ibp24s0,ibp41s0"), "{}", f[0].action);
        assert!(f[0].action.contains("NCCL_IB_DISABLE=1"), "{}", f[0].action);
    }

    #[test]
    fn nothing_is_judged_before_a_network_is_chosen() {
        let mut t = feed("NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0>\n");
        assert!(t.judge(None).is_empty());
        t.line("NCCL INFO Using network Socket");
        assert_eq!(t.judge(None).len(), 1);
    }

    #[test]
    fn one_node_communicators_are_not_judged() {
        let mut t = feed(
            "NCCL INFO NET/IB : No device found.\n\
             NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0>\n\
             NCCL INFO Using network Socket\n\
             NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n",
        );
        assert!(t.judge(None).is_empty());
    }

    #[test]
    fn missing_libraries_are_named() {
        assert_eq!(
            missing_library("misc/nvmlwrap.cc:74 NCCL WARN Failed to open libnvidia-ml.so.1"),
            Some("libnvidia-ml")
        );
        assert_eq!(
            missing_library("misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]"),
            Some("libibverbs")
        );
        assert_eq!(
            missing_library(
                "misc/cudawrap.cc:179 NCCL WARN Failed to find CUDA library libcuda.so (NCCL_CUDA_PATH='') : "
            ),
            Some("libcuda")
        );
        assert_eq!(missing_library("NCCL WARN Call to connect failed"), None);
    }
}
