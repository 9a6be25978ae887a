//! Findings from the probe's reports: nodes the probe could not reach or run on, training
//! addresses that are not the node's, pairs that cannot talk on the training network,
//! paths where small datagrams pass and full-MTU ones are lost (an MTU mismatch), clocks
//! apart, missing or nearly full paths, and NCCL told to use another interface than the
//! training address's. Pure.

use super::Report;
use gsched_types::findings::{Component, Finding, Severity};
use std::collections::BTreeMap;

/// Clocks further apart than this are a finding.
const SKEW_MS: f64 = 500.0;
/// A path with less free space than both of these is nearly full.
const FREE_SHARE: f64 = 0.05;
const FREE_BYTES: u64 = 10 << 30;

/// A warning about `node`: what was seen and what to do.
fn warn(node: &str, component: Component, kind: &str, evidence: String, action: &str) -> Finding {
    let mut f = Finding::on_node(node, Severity::Warn, component, kind);
    f.evidence = evidence;
    f.action = action.into();
    f
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Every finding about `reports`; `expected` are the nodes the probe ran on, and
/// `stderr_tail` what its job said when some report is missing.
pub fn judge(reports: &[Report], expected: &[String], stderr_tail: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let by_node: BTreeMap<&str, &Report> = reports.iter().map(|r| (r.node.as_str(), r)).collect();
    for n in expected
        .iter()
        .filter(|n| !by_node.contains_key(n.as_str()))
    {
        out.push(warn(n, Component::Host, "probe-did-not-run", format!(
            "no probe report from {n}{}",
            if stderr_tail.is_empty() {
                String::new()
            } else {
                format!(": {stderr_tail}")
            }
        ), "check that python3 is installed on the node and that jobs start there (gacct --name doctor-probe)"));
    }
    for r in reports {
        out.extend(training_address(r));
        out.extend(training_network(r, &by_node));
        out.extend(shared_paths(r));
        out.extend(nccl_interface(r));
    }
    out.extend(clock_skew(reports));
    out
}

/// The node's training address, when it cannot listen on it.
fn training_address(r: &Report) -> Option<Finding> {
    let e = r.bind_error.as_ref()?;
    Some(warn(
        &r.node,
        Component::Nic,
        "training-address-not-on-node",
        format!("{}: cannot listen on its training address {e}", r.node),
        "the agent's --training-addr is not an address of this host, or its interface is down: fix it (ip -4 addr)",
    ))
}

/// Peers the node cannot reach on the training network, or only with small datagrams.
fn training_network(r: &Report, by_node: &BTreeMap<&str, &Report>) -> Vec<Finding> {
    let mut out = Vec::new();
    for (peer, p) in &r.peers {
        if by_node
            .get(peer.as_str())
            .is_some_and(|q| q.bind_error.is_some())
        {
            continue;
        }
        let peer_addr = by_node.get(peer.as_str()).map_or("?", |q| q.addr.as_str());
        match (&p.small, &p.large) {
            (None, _) => {
                out.push(warn(&r.node, Component::Nic, "training-network-unreachable", format!(
                    "{} cannot reach {peer} at {peer_addr} on the training network ({})",
                    r.node,
                    p.small_error.as_deref().unwrap_or("no answer")
                ), "check routes and firewalls between the nodes (NCCL needs TCP and UDP open on the training network), the cable and the switch port"));
            }
            (Some(_), None) => {
                out.push(warn(&r.node, Component::Nic, "mtu-mismatch-on-path", format!(
                    "{} -> {peer}: small datagrams pass, {}-byte ones (MTU {} on {}'s {}) are lost ({})",
                    r.node,
                    p.large_bytes,
                    r.mtu.map_or("?".into(), |m| m.to_string()),
                    r.node,
                    r.iface.as_deref().unwrap_or("?"),
                    p.large_error.as_deref().unwrap_or("no answer")
                ), "set the same MTU on every node's training interface and on every switch port between them (jumbo frames need all of them)"));
            }
            _ => {}
        }
    }
    out
}

/// The shared paths: missing, or nearly full.
fn shared_paths(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    for (path, p) in &r.paths {
        if let Some(e) = &p.error {
            out.push(warn(
                &r.node,
                Component::Host,
                "path-missing",
                format!("{}: {path}: {e}", r.node),
                "mount it on every node: jobs expect the same paths everywhere",
            ));
        } else if let (Some(free), Some(total)) = (p.free, p.total)
            && total > 0
            && (free as f64) < total as f64 * FREE_SHARE
            && free < FREE_BYTES
        {
            out.push(warn(
                &r.node,
                Component::Host,
                "disk-nearly-full",
                format!(
                    "{}: {path} has {} free of {} ({:.1}%)",
                    r.node,
                    gib(free),
                    gib(total),
                    free as f64 * 100.0 / total as f64
                ),
                "free space there before jobs fail writing checkpoints",
            ));
        }
    }
    out
}

/// An `NCCL_SOCKET_IFNAME` that does not pick the training interface.
fn nccl_interface(r: &Report) -> Option<Finding> {
    let (set, iface) = (r.nccl_socket_ifname.as_ref()?, r.iface.as_ref()?);
    let excluded = set.starts_with('^');
    let picks = set
        .split(',')
        .map(|s| s.trim_start_matches(['^', '=']))
        .any(|n| iface.starts_with(n))
        != excluded;
    (!picks).then(|| {
        warn(
            &r.node,
            Component::Nccl,
            "nccl-interface-mismatch",
            format!(
                "{}: jobs get NCCL_SOCKET_IFNAME={set}, but the training address {} is on {iface}",
                r.node, r.addr
            ),
            "remove the NCCL_SOCKET_IFNAME set in the agent's --job-env or the node's environment, or point it at the training interface",
        )
    })
}

/// Each node's clock against the first that answered everyone, from its own echoes.
fn clock_skew(reports: &[Report]) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(reference) = reports.iter().find(|r| r.bind_error.is_none()) {
        for (peer, p) in &reference.peers {
            if let Some(e) = &p.small
                && e.offset_ms.abs() > SKEW_MS
            {
                out.push(warn(peer, Component::Host, "clock-skew", format!(
                    "{peer}'s clock is {:.2} s {} {}'s",
                    e.offset_ms.abs() / 1000.0,
                    if e.offset_ms > 0.0 {
                        "ahead of"
                    } else {
                        "behind"
                    },
                    reference.node
                ), "run chrony or another NTP client on every node: MUNGE credentials, time limits and logs depend on agreeing clocks"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Echo, PathReport, PeerReport};
    use super::*;

    fn report(node: &str, addr: &str) -> Report {
        Report {
            node: node.into(),
            addr: addr.into(),
            iface: Some("eth1".into()),
            mtu: Some(9000),
            bind_error: None,
            peers: BTreeMap::new(),
            paths: BTreeMap::new(),
            nccl_socket_ifname: Some("eth1".into()),
        }
    }

    fn echo(offset_ms: f64) -> Option<Echo> {
        Some(Echo {
            rtt_ms: 0.2,
            offset_ms,
            bytes: 64,
        })
    }

    fn peer(small: Option<Echo>, large: Option<Echo>) -> PeerReport {
        PeerReport {
            small,
            small_error: None,
            large,
            large_error: None,
            large_bytes: 8972,
        }
    }

    fn kinds(f: &[Finding]) -> Vec<(&str, &str)> {
        f.iter()
            .map(|f| (f.node.as_deref().unwrap(), f.kind.as_str()))
            .collect()
    }

    #[test]
    fn healthy_nodes_give_nothing() {
        let mut a = report("n1", "10.0.1.1");
        let mut b = report("n2", "10.0.1.2");
        a.peers.insert("n2".into(), peer(echo(3.0), echo(3.0)));
        b.peers.insert("n1".into(), peer(echo(-3.0), echo(-3.0)));
        a.paths.insert(
            "/models".into(),
            PathReport {
                free: Some(500 << 30),
                total: Some(1000 << 30),
                error: None,
            },
        );
        let nodes = ["n1".to_string(), "n2".to_string()];
        assert!(judge(&[a, b], &nodes, "").is_empty());
    }

    #[test]
    fn planted_faults_are_named() {
        let mut a = report("n1", "10.0.1.1");
        let mut b = report("n2", "10.0.1.2");
        let mut c = report("n3", "10.0.1.3");
        // n1 -> n2: jumbo frames lost; n2's clock 2 s ahead; n3 unreachable from n1.
        a.peers.insert("n2".into(), peer(echo(2_000.0), None));
        a.peers.insert("n3".into(), peer(None, None));
        b.peers
            .insert("n1".into(), peer(echo(-2_000.0), echo(-2_000.0)));
        c.nccl_socket_ifname = Some("eth0".into());
        c.paths.insert(
            "/datasets".into(),
            PathReport {
                free: None,
                total: None,
                error: Some("No such file or directory".into()),
            },
        );
        b.paths.insert(
            "/models".into(),
            PathReport {
                free: Some(2 << 30),
                total: Some(1000 << 30),
                error: None,
            },
        );
        let d = Report {
            bind_error: Some("192.0.2.1:29501: Cannot assign requested address".into()),
            ..report("n4", "192.0.2.1")
        };
        a.peers.insert("n4".into(), peer(None, None));
        let nodes: Vec<String> = ["n1", "n2", "n3", "n4", "n5"].map(String::from).to_vec();
        let f = judge(&[a, b, c, d], &nodes, "grun: error: n5 down");
        let k = kinds(&f);
        for want in [
            ("n5", "probe-did-not-run"),
            ("n4", "training-address-not-on-node"),
            ("n1", "mtu-mismatch-on-path"),
            ("n1", "training-network-unreachable"),
            ("n3", "path-missing"),
            ("n2", "disk-nearly-full"),
            ("n3", "nccl-interface-mismatch"),
            ("n2", "clock-skew"),
        ] {
            assert!(k.contains(&want), "{want:?} missing from {k:?}");
        }
        // n4's own fault is reported once, not again as unreachable from n1.
        assert_eq!(
            k.iter()
                .filter(|(_, kind)| *kind == "training-network-unreachable")
                .count(),
            1,
            "{k:?}"
        );
        let mtu = f.iter().find(|f| f.kind == "mtu-mismatch-on-path").unwrap();
        assert!(mtu.evidence.contains("8972-byte"), "{}", mtu.evidence);
        let skew = f.iter().find(|f| f.kind == "clock-skew").unwrap();
        assert_eq!(skew.evidence, "n2's clock is 2.00 s ahead of n1's");
    }
}
