//! Findings from burn-in results: runs that failed, GPUs whose memory check failed or
//! that compute well below their peers, all-reduces under half of what their slowest
//! link should carry, runs slow next to the rest of their stage (and the node common to
//! the slow pairs), NCCL on sockets where RDMA ports exist. Rates are judged only where
//! the run was on GPUs; gloo on CPUs proves the harness, not the hardware. Pure.

use super::{Bound, RunResult, Stage};
use gsched_types::findings::{Component, Finding, Severity};
use std::collections::BTreeMap;

/// Below this share of the expected rate, a link is faulty rather than untuned.
const LINK_SHARE: f64 = 0.5;
/// Below this share of its stage's median, a run (or GPU) is an outlier.
const PEER_SHARE: f64 = 0.7;

/// A byte count the way nccl-tests' tables read: 64 MiB, 1 GiB.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Every finding about `results`; `rdma_nodes` are the nodes with an RDMA port up.
pub fn judge(results: &[RunResult], rdma_nodes: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in results {
        failed(r, &mut out);
        if r.run.stage == Stage::Gpu {
            for g in r.gpus.iter().filter(|g| !g.memory_ok) {
                let mut f = Finding::on_node(
                    &g.node,
                    Severity::Drain,
                    Component::Gpu,
                    "gpu-memory-check-failed",
                );
                f.gpu = g.gpu.parse().ok();
                f.evidence = format!(
                    "GPU {} ({}): a {} pattern read back wrong",
                    g.gpu,
                    g.device,
                    size(g.memory_bytes)
                );
                f.action = "take the GPU out of service; look for Xid 48/63/94 and remapped rows (nvidia-smi -q -d ROW_REMAPPER)".into();
                out.push(f);
            }
        }
    }
    slow_gpus(results, &mut out);
    below_link_rate(results, &mut out);
    slow_runs(results, &mut out);
    for r in results
        .iter()
        .filter(|r| r.on_gpus() && r.run.nodes.len() > 1)
    {
        let on_rdma: Vec<&String> = r
            .run
            .nodes
            .iter()
            .filter(|n| rdma_nodes.contains(n))
            .collect();
        if r.transports.iter().any(|t| t.starts_with("NET/Socket")) && !on_rdma.is_empty() {
            let mut f = Finding::on_node(
                on_rdma[0],
                Severity::Warn,
                Component::Nccl,
                "nccl-on-sockets",
            );
            f.evidence = format!(
                "{} on {}: NCCL used {} although {} has RDMA ports up",
                r.run.stage.slug(),
                r.run.label(),
                r.transports.join(", "),
                on_rdma[0]
            );
            f.action = "NCCL fell back to TCP: check that libibverbs and the rdma-core provider are installed in the job's environment, NCCL_IB_DISABLE is unset and NCCL_IB_HCA names the up ports".into();
            out.push(f);
        }
    }
    out
}

fn failed(r: &RunResult, out: &mut Vec<Finding>) {
    let empty = match r.run.stage {
        Stage::Gpu => r.gpus.is_empty(),
        _ => r.samples.is_empty(),
    };
    if r.status == 0 && r.error.is_none() && !empty {
        return;
    }
    let component = match r.run.stage {
        Stage::Gpu => Component::Gpu,
        _ => Component::Nccl,
    };
    let node = r.run.nodes.first().map_or("?", String::as_str);
    let mut f = Finding::on_node(node, Severity::Warn, component, "burn-in-run-failed");
    let why = r
        .error
        .clone()
        .unwrap_or_else(|| format!("exit status {} and no results", r.status));
    f.evidence = format!("{} on {}: {why}", r.run.stage.slug(), r.run.label());
    f.action = if why.contains("PyTorch is not importable") {
        "install PyTorch for the python3 jobs use on every node (or give gctl burn-in --python)"
            .into()
    } else {
        format!(
            "look at the job (gacct --name {}) and run gctl doctor {}; NCCL errors: rerun with NCCL_DEBUG=INFO",
            r.run.job_name(),
            r.run.nodes.join(" ")
        )
    };
    out.push(f);
}

/// GPUs of one model far below that model's median matmul rate.
fn slow_gpus(results: &[RunResult], out: &mut Vec<Finding>) {
    let mut by_model: BTreeMap<&str, Vec<&super::GpuCheck>> = BTreeMap::new();
    for g in results
        .iter()
        .filter(|r| r.on_gpus())
        .flat_map(|r| &r.gpus)
        .filter(|g| g.backend == "cuda")
    {
        by_model.entry(&g.device).or_default().push(g);
    }
    for (model, gpus) in by_model {
        if gpus.len() < 3 {
            continue;
        }
        let Some(mid) = median(gpus.iter().map(|g| g.tflops).collect()) else {
            continue;
        };
        for g in gpus.iter().filter(|g| g.tflops < mid * PEER_SHARE) {
            let mut f = Finding::on_node(&g.node, Severity::Warn, Component::Gpu, "gpu-slow");
            f.gpu = g.gpu.parse().ok();
            f.evidence = format!(
                "GPU {} ({model}): {:.1} TFLOPS, the median of {} such GPUs is {mid:.1}",
                g.gpu,
                g.tflops,
                gpus.len()
            );
            f.action = "check clocks, temperature, power cap and throttle reasons (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)".into();
            out.push(f);
        }
    }
}

fn below_link_rate(results: &[RunResult], out: &mut Vec<Finding>) {
    for r in results.iter().filter(|r| r.on_gpus()) {
        let (Some(e), Some(peak)) = (&r.run.expected, r.peak()) else {
            continue;
        };
        if peak.busbw_gbps >= e.busbw_gbps * LINK_SHARE {
            continue;
        }
        let component = match e.bound {
            Bound::Nvlink => Component::Nvlink,
            Bound::Pcie => Component::Pcie,
            Bound::Network => Component::Nic,
        };
        let node = r.run.nodes.first().map_or("?", String::as_str);
        let mut f = Finding::on_node(node, Severity::Warn, component, "bandwidth-below-link-rate");
        f.evidence = format!(
            "{} on {}: {:.1} GB/s bus bandwidth at {}, under half of the {:.1} GB/s expected ({}){}",
            r.run.stage.slug(),
            r.run.label(),
            peak.busbw_gbps,
            size(peak.bytes),
            e.busbw_gbps,
            e.basis,
            if r.transports.is_empty() {
                String::new()
            } else {
                format!("; NCCL used {}", r.transports.join(", "))
            }
        );
        f.action = match component {
            Component::Nvlink => "NCCL is not getting NVLink's rate: check nvidia-smi nvlink -s (links down, the bridge seated) and that NCCL_P2P_DISABLE is unset",
            Component::Pcie => "check the GPUs' PCIe links under load (gctl doctor; risers train down), and that ACS/IOMMU do not block peer-to-peer",
            _ => "check which NIC NCCL used (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), the MTU on both ends and the switch port's speed",
        }
        .into();
        out.push(f);
    }
}

/// Runs of a stage far below the stage's median, and the node common to slow pairs.
fn slow_runs(results: &[RunResult], out: &mut Vec<Finding>) {
    let mut slow_pairs: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for stage in [Stage::Node, Stage::Pair] {
        let runs: Vec<(&RunResult, f64)> = results
            .iter()
            .filter(|r| r.run.stage == stage && r.on_gpus())
            .filter_map(|r| Some((r, r.peak()?.busbw_gbps)))
            .collect();
        if runs.len() < 3 {
            continue;
        }
        let Some(mid) = median(runs.iter().map(|(_, b)| *b).collect()) else {
            continue;
        };
        for (r, bw) in &runs {
            let slow = *bw < mid * PEER_SHARE;
            if stage == Stage::Pair {
                for n in &r.run.nodes {
                    let e = slow_pairs.entry(n).or_default();
                    e.0 += 1;
                    e.1 += u32::from(slow);
                }
            }
            if slow {
                let node = r.run.nodes.first().map_or("?", String::as_str);
                let mut f = Finding::on_node(node, Severity::Warn, Component::Nccl, "slow-outlier");
                f.evidence = format!(
                    "{} on {}: {bw:.1} GB/s, the stage's median is {mid:.1} GB/s",
                    stage.slug(),
                    r.run.label()
                );
                f.action =
                    "compare this run's wiring with its peers' (gctl doctor, ginfo --topo)".into();
                out.push(f);
            }
        }
    }
    for (node, (pairs, slow)) in slow_pairs {
        if pairs >= 2 && slow == pairs {
            let mut f = Finding::on_node(node, Severity::Warn, Component::Nic, "slow-node");
            f.evidence =
                format!("every pair with {node} ({slow} of {pairs}) is slow; its peers are not");
            f.action = "look at this node's training NIC: link speed (ethtool), MTU, cable and switch port, and its PCIe slot".into();
            out.push(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Expectation, GpuCheck, Run, Sample};
    use super::*;

    fn run(stage: Stage, nodes: &[&str], busbw: f64, expected: Option<f64>) -> RunResult {
        RunResult {
            run: Run {
                stage,
                nodes: nodes.iter().map(|s| s.to_string()).collect(),
                gpus_per_node: 2,
                round: 0,
                expected: expected.map(|e| Expectation {
                    bound: Bound::Nvlink,
                    busbw_gbps: e,
                    basis: "n1: NV4, 4 NVLinks x 14 GB/s, 80% of it".into(),
                }),
            },
            status: 0,
            seconds: 1.0,
            gpus: Vec::new(),
            samples: vec![
                Sample {
                    bytes: 1 << 10,
                    seconds: 1e-5,
                    algbw_gbps: 0.1,
                    busbw_gbps: 0.1,
                    backend: "nccl".into(),
                    world: 4,
                },
                Sample {
                    bytes: 1 << 30,
                    seconds: 0.1,
                    algbw_gbps: busbw,
                    busbw_gbps: busbw,
                    backend: "nccl".into(),
                    world: 4,
                },
            ],
            transports: Vec::new(),
            error: None,
        }
    }

    fn kinds(f: &[Finding]) -> Vec<(&str, &str)> {
        f.iter()
            .map(|f| (f.node.as_deref().unwrap(), f.kind.as_str()))
            .collect()
    }

    #[test]
    fn a_pair_at_pcie_speed_where_nvlink_was_expected_is_named() {
        let r = run(Stage::Node, &["n1"], 9.0, Some(44.8));
        let f = judge(&[r], &[]);
        assert_eq!(kinds(&f), vec![("n1", "bandwidth-below-link-rate")]);
        assert_eq!(f[0].component, Component::Nvlink);
        assert!(
            f[0].evidence.contains("9.0 GB/s bus bandwidth at 1 GiB"),
            "{}",
            f[0].evidence
        );
        let ok = run(Stage::Node, &["n1"], 40.0, Some(44.8));
        assert!(judge(&[ok], &[]).is_empty());
    }

    #[test]
    fn the_node_in_every_slow_pair_is_named() {
        let results = vec![
            run(Stage::Pair, &["n1", "n2"], 10.0, None),
            run(Stage::Pair, &["n2", "n3"], 10.0, None),
            run(Stage::Pair, &["n3", "n4"], 3.0, None),
            run(Stage::Pair, &["n4", "n1"], 3.0, None),
        ];
        let f = judge(&results, &[]);
        let k = kinds(&f);
        assert!(k.contains(&("n3", "slow-outlier")), "{k:?}");
        assert!(k.contains(&("n4", "slow-outlier")), "{k:?}");
        assert!(k.contains(&("n4", "slow-node")), "{k:?}");
        assert!(
            !k.iter().any(|(n, kind)| *kind == "slow-node" && *n != "n4"),
            "{k:?}"
        );
    }

    #[test]
    fn gloo_runs_are_not_judged_on_rates_but_failures_and_sockets_are_reported() {
        let mut cpu = run(Stage::Node, &["n1"], 0.01, Some(44.8));
        for s in &mut cpu.samples {
            s.backend = "gloo".into();
        }
        assert!(judge(std::slice::from_ref(&cpu), &[]).is_empty());
        let mut bad = run(Stage::Pair, &["n1", "n2"], 1.0, None);
        bad.samples.clear();
        bad.status = 1;
        bad.error = Some("PyTorch is not importable by python3 on this node".into());
        let f = judge(&[bad], &[]);
        assert_eq!(kinds(&f), vec![("n1", "burn-in-run-failed")]);
        assert!(f[0].action.contains("install PyTorch"), "{}", f[0].action);
        let mut sockets = run(Stage::Pair, &["n1", "n2"], 5.0, None);
        sockets.transports = vec!["NET/Socket/0".into()];
        let f = judge(&[sockets], &["n2".to_string()]);
        assert_eq!(kinds(&f), vec![("n2", "nccl-on-sockets")]);
    }

    #[test]
    fn a_bad_memory_pattern_drains_and_a_slow_gpu_warns() {
        let gpu = |node: &str, idx: &str, tflops: f64, ok: bool| GpuCheck {
            rank: 0,
            node: node.into(),
            gpu: idx.into(),
            device: "NVIDIA H200".into(),
            backend: "cuda".into(),
            memory_bytes: 1 << 30,
            memory_ok: ok,
            memory_seconds: 0.1,
            tflops,
            matmul: "8192x8192 bfloat16".into(),
        };
        let mut r = run(Stage::Gpu, &["n1"], 0.0, None);
        r.samples.clear();
        r.gpus = vec![
            gpu("n1", "0", 700.0, true),
            gpu("n1", "1", 690.0, true),
            gpu("n1", "2", 300.0, true),
            gpu("n1", "3", 710.0, false),
        ];
        let f = judge(&[r], &[]);
        let got: Vec<_> = f
            .iter()
            .map(|f| (f.kind.as_str(), f.gpu, f.severity))
            .collect();
        assert!(
            got.contains(&("gpu-memory-check-failed", Some(3), Severity::Drain)),
            "{got:?}"
        );
        assert!(
            got.contains(&("gpu-slow", Some(2), Severity::Warn)),
            "{got:?}"
        );
        assert_eq!(got.len(), 2, "{got:?}");
    }
}
