//! `gagentd diagnose FILE...`: findings from saved outputs of a node (a support bundle):
//! each file's kind is told from its text (`nvidia-smi` table, `-q`, `-L`, `--query-gpu`
//! CSV, `topo -m`, kernel logs, InfiniBand tools, `ifconfig`/`ip`, NCCL/PyTorch logs) and
//! read by the same parsers and findings the live agent uses.
//! A file that is none of these is reported as such, never misread.

use crate::findings::{Attribution, corrected_flood, device_handle_lost, kernel_finding};
use gsched_launch::transport::{TransportLog, missing_library};
use gsched_launch::watch::{classify_line, first_cause};
use gsched_topology::xid::{AerSeverity, KernelEvent, parse_log};
use gsched_topology::{ib, parse_topo_matrix, smi, strip_ansi, strip_fixture_header};
use gsched_types::findings::{Component, Finding, Severity};

/// What a file holds, as told from its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SmiTable,
    SmiQuery,
    TopoMatrix,
    KernelLog,
    Ibstat,
    Ibstatus,
    IbvDevinfo,
    Ibdev2netdev,
    /// `ifconfig`, `ip addr` or `ip link`.
    Interfaces,
    /// `nvidia-smi -L`.
    SmiList,
    /// `nvidia-smi --query-gpu=... --format=csv`.
    SmiCsv,
    JobLog,
    Unknown,
}

/// Tells a file's kind from its text (the most specific marker wins).
pub fn kind_of(text: &str) -> Kind {
    let has = |s: &str| text.contains(s);
    if has("==============NVSMI LOG==============") {
        Kind::SmiQuery
    } else if (has("NVIDIA-SMI ") && has("|")) || has("Unable to determine the device handle") {
        Kind::SmiTable
    } else if has("Infiniband device '") {
        Kind::Ibstatus
    } else if has("CA '") && has("Port ") {
        Kind::Ibstat
    } else if has("hca_id:") {
        Kind::IbvDevinfo
    } else if text
        .lines()
        .any(|l| l.contains(" port ") && l.contains("==>"))
    {
        Kind::Ibdev2netdev
    } else if text.lines().any(|l| {
        (l.contains(": flags=") && l.contains("mtu"))
            || (l.split(": ").count() >= 3 && l.contains(": <") && l.contains(" mtu "))
    }) {
        Kind::Interfaces
    } else if text.lines().any(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        t.first().is_some_and(|w| w.starts_with("GPU0")) && t.len() > 1 && !l.contains("NVRM")
    }) && has(" X ")
    {
        Kind::TopoMatrix
    } else if has("NCCL") || has("ProcessGroupNCCL") || has("torchrun") || has("torch.distributed")
    {
        Kind::JobLog
    } else if has("NVRM") || has("pcieport") || has("PCIe Bus Error") || has("SXid") {
        Kind::KernelLog
    } else if has("--query-gpu") || has("--format=csv") || csv_header(text).is_some() {
        Kind::SmiCsv
    } else if text
        .lines()
        .any(|l| l.trim_start().starts_with("GPU ") && l.contains("(UUID: GPU-"))
    {
        Kind::SmiList
    } else {
        Kind::Unknown
    }
}

/// The findings of one file named `name` with contents `text`.
pub fn diagnose(name: &str, text: &str) -> Vec<Finding> {
    let text = strip_fixture_header(text);
    let clean = strip_ansi(text);
    let kind = kind_of(&clean);
    let mut out = by_kind(name, kind, &clean);
    // Bundles often paste `nvidia-smi -q`'s remap section under a kernel log.
    if kind != Kind::SmiQuery && clean.contains("Remapped Rows") {
        out.extend(smi_query(&clean));
    }
    out
}

fn by_kind(name: &str, kind: Kind, clean: &str) -> Vec<Finding> {
    match kind {
        Kind::SmiTable => smi_table(clean),
        Kind::SmiQuery => smi_query(clean),
        Kind::TopoMatrix => topo(clean),
        Kind::KernelLog => kernel(clean),
        Kind::Ibstat => ib_ports(ib::parse_ibstat(clean), "ibstat"),
        Kind::Ibstatus => ib_ports(ib::parse_ibstatus(clean), "ibstatus"),
        Kind::IbvDevinfo => ib_ports(ib::parse_ibv_devinfo(clean), "ibv_devinfo"),
        Kind::Ibdev2netdev => ibdev2netdev(clean),
        Kind::Interfaces => interfaces(clean),
        Kind::SmiList => smi_list(clean),
        Kind::SmiCsv => smi_csv(clean),
        Kind::JobLog => job_log(clean),
        Kind::Unknown => vec![Finding::new(
            Severity::Info,
            Component::Input,
            "unrecognised-file",
            name,
            "gagentd diagnose reads nvidia-smi (table, -q, -L, --query-gpu CSV), nvidia-smi topo -m, dmesg/journalctl -k, ibstat/ibstatus/ibv_devinfo/ibdev2netdev, ifconfig/ip and NCCL/PyTorch logs; this file is none of them and was not read",
        )],
    }
}

fn smi_table(text: &str) -> Vec<Finding> {
    let t = smi::parse_table(text);
    let mut out = Vec::new();
    for bus in &t.failed {
        out.push(device_handle_lost(None, bus, "reported by nvidia-smi").finding);
    }
    for g in &t.gpus {
        let at = |mut f: Finding| {
            f.gpu = Some(g.index);
            f.pci_bus_id = Some(g.bus_id.clone());
            f
        };
        if g.ecc_uncorrected.is_some_and(|e| e > 0) {
            out.push(at(Finding::new(
                Severity::Drain,
                Component::Gpu,
                "ecc-uncorrected",
                &format!(
                    "GPU {} {}: {} uncorrected ECC errors",
                    g.index,
                    g.bus_id,
                    g.ecc_uncorrected.unwrap_or(0)
                ),
                "reset the GPU (nvidia-smi -r) when idle; replace it if the count keeps rising",
            )));
        }
        if g.temperature_c.is_some_and(|c| c >= 85) {
            out.push(at(Finding::new(
                Severity::Warn,
                Component::Gpu,
                "hot",
                &format!(
                    "GPU {} at {} C",
                    g.index,
                    g.temperature_c.unwrap_or(0)
                ),
                "improve airflow (open frames: fans, spacing); it throttles near its slowdown temperature",
            )));
        }
    }
    if t.gpus.is_empty() && t.failed.is_empty() {
        out.push(Finding::new(
            Severity::Info,
            Component::Input,
            "no-gpus",
            "the nvidia-smi table lists no GPU",
            "if GPUs are installed, check the driver (nvidia-smi -L, dmesg | grep NVRM)",
        ));
    }
    out
}

fn smi_query(text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for (bus, pending, failed) in smi::remapped_rows(text) {
        let (severity, kind, action) = if failed {
            (
                Severity::Drain,
                "row-remap-failure",
                "remapping failed: the GPU can no longer hide bad memory; replace it",
            )
        } else if pending {
            (
                Severity::Warn,
                "row-remap-pending",
                "reset the GPU (nvidia-smi -r) when it is idle to apply the remap",
            )
        } else {
            continue;
        };
        let mut f = Finding::new(
            severity,
            Component::Gpu,
            kind,
            &format!("GPU {bus}: Remapped Rows pending={pending} failure={failed}"),
            action,
        );
        f.pci_bus_id = Some(bus);
        out.push(f);
    }
    out
}

fn topo(text: &str) -> Vec<Finding> {
    match parse_topo_matrix(text) {
        Err(e) => vec![Finding::new(
            Severity::Info,
            Component::Input,
            "unreadable-topo",
            &e.to_string(),
            "paste the whole `nvidia-smi topo -m` output, header to legend",
        )],
        Ok(t) => {
            let mut out = Vec::new();
            for g in &t.gpus {
                if g.cpus.is_none() && g.numa_node.is_none() {
                    let mut f = Finding::new(
                        Severity::Info,
                        Component::Gpu,
                        "no-affinity",
                        &format!("GPU{}: no CPU or NUMA affinity in topo -m", g.index),
                        "run it outside a restricted cpuset to see which CPUs are near each GPU",
                    );
                    f.gpu = Some(g.index);
                    out.push(f);
                }
            }
            out
        }
    }
}

fn kernel(text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut corrected: std::collections::BTreeMap<String, (u32, String)> = Default::default();
    for ev in parse_log(text) {
        if let KernelEvent::PcieAer {
            pci,
            severity: AerSeverity::Corrected,
            detail,
        } = &ev
        {
            let e = corrected.entry(pci.clone()).or_default();
            e.0 += 1;
            e.1 = detail.clone();
        } else if let Some(noted) = kernel_finding(&ev, Attribution::Unknown) {
            out.push(noted.finding);
        }
    }
    for (pci, (n, detail)) in corrected {
        let mut f = corrected_flood(&pci, None, n, None, &detail).finding;
        // A few in a saved log are normal; ten or more are the flood the live monitor
        // warns about.
        if n < 10 {
            f.severity = Severity::Info;
        }
        out.push(f);
    }
    out
}

fn ib_ports(ports: Vec<ib::IbPort>, tool: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for vf in ports.iter().filter(|p| p.is_virtual_function()) {
        let pf = ports.iter().find(|p| {
            !p.is_virtual_function()
                && p.system_image_guid.is_some()
                && p.system_image_guid == vf.system_image_guid
        });
        let (evidence, action) = match pf {
            Some(pf) => (
                format!(
                    "{tool}: {} (CA type {}) is an SR-IOV virtual function of {} (same system image GUID {})",
                    vf.hca,
                    vf.ca_type.as_deref().unwrap_or("?"),
                    pf.hca,
                    pf.system_image_guid.as_deref().unwrap_or("?")
                ),
                format!(
                    "{} shares {}'s port: it is not a rail of its own (gsched leaves it out of NCCL_IB_HCA); give it to a VM or disable the VFs",
                    vf.hca, pf.hca
                ),
            ),
            None => (
                format!(
                    "{tool}: {} (CA type {}) is an SR-IOV virtual function",
                    vf.hca,
                    vf.ca_type.as_deref().unwrap_or("?")
                ),
                "a VM or container with a passed-through VF: its bandwidth is shared with the host's other VFs on the same port".to_string(),
            ),
        };
        out.push(Finding::new(
            Severity::Info,
            Component::Ib,
            "sriov-vf",
            &evidence,
            &action,
        ));
    }
    for p in ports {
        if !p.active {
            out.push(Finding::new(
                Severity::Warn,
                Component::Ib,
                "ib-port-down",
                &format!("{tool}: {} port {} is not active", p.hca, p.port),
                "check the cable and the switch port (ibstat, ibdiagnet); jobs will not use this rail",
            ));
        } else if p.mtu_degraded() {
            out.push(Finding::new(
                Severity::Warn,
                Component::Ib,
                "ib-mtu-degraded",
                &format!(
                    "{tool}: {} port {} active MTU {} below its max {}",
                    p.hca,
                    p.port,
                    p.active_mtu.unwrap_or(0),
                    p.max_mtu.unwrap_or(0)
                ),
                "raise the network MTU end to end (RoCE: the interface and the switch ports)",
            ));
        }
    }
    out
}

/// `mlx5_1 port 1 ==> enp27s0f0np0 (Down)`: a RoCE port's netdev without link means no
/// RDMA over it. An IPoIB netdev being down says nothing about the IB port (ibstat does).
fn ibdev2netdev(text: &str) -> Vec<Finding> {
    ib::parse_ibdev2netdev(text)
        .into_iter()
        .filter(|m| !m.netdev_up && !m.netdev.starts_with("ib"))
        .map(|m| {
            Finding::new(
                Severity::Info,
                Component::Nic,
                "roce-port-down",
                &format!("ibdev2netdev: {} port {} ==> {} (Down)", m.hca, m.port, m.netdev),
                "a RoCE port without link: if it should carry training traffic, check its cable and switch port; jobs do not use it",
            )
        })
        .collect()
}

/// Interfaces that are administratively up with no link (NO-CARRIER, not RUNNING).
fn interfaces(text: &str) -> Vec<Finding> {
    let mut all = ib::parse_ifconfig(text);
    all.extend(ib::parse_ip(text));
    let skip = [
        "lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "tun", "tap",
    ];
    all.into_iter()
        .filter(|i| i.up && !i.running && i.link.as_deref() != Some("loop"))
        .filter(|i| !skip.iter().any(|p| i.name.starts_with(p)))
        .map(|i| {
            Finding::new(
                Severity::Warn,
                Component::Nic,
                "nic-no-carrier",
                &format!(
                    "{} is up but has no link (no carrier){}",
                    i.name,
                    i.mtu.map(|m| format!(", mtu {m}")).unwrap_or_default()
                ),
                "if it carries training or storage traffic: check the cable, the transceiver and the switch port (ethtool IFACE)",
            )
        })
        .collect()
}

/// `nvidia-smi -L`: GPUs split into MIG devices.
fn smi_list(text: &str) -> Vec<Finding> {
    let gpus = smi::parse_list(text);
    let mut out: Vec<Finding> = gpus
        .iter()
        .filter(|g| !g.mig.is_empty())
        .map(|g| {
            let mut f = Finding::new(
                Severity::Info,
                Component::Gpu,
                "mig-enabled",
                &format!(
                    "GPU {} ({}) is split into {} MIG devices ({})",
                    g.index,
                    g.uuid,
                    g.mig.len(),
                    g.mig
                        .iter()
                        .map(|(p, _)| p.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "gsched schedules whole GPUs: a job given this GPU sees its MIG devices, not one GPU; turn MIG off (nvidia-smi -i N -mig 0) for training",
            );
            f.gpu = Some(g.index);
            f
        })
        .collect();
    if gpus.is_empty() {
        out.push(Finding::new(
            Severity::Info,
            Component::Input,
            "no-gpus",
            "nvidia-smi -L lists no GPU",
            "if GPUs are installed, check the driver (dmesg | grep NVRM)",
        ));
    }
    out
}

/// The column names of a `--query-gpu` CSV: from the command line quoted in the file, or
/// from its header row (`--format=csv` without `noheader`).
fn csv_header(text: &str) -> Option<Vec<String>> {
    let clean = |c: &str| {
        c.trim()
            .split(" [")
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    if let Some(pos) = text.find("--query-gpu=") {
        let list = text[pos + 12..].split_whitespace().next().unwrap_or("");
        return Some(list.split(',').map(clean).collect());
    }
    let known = [
        "index",
        "name",
        "pci.bus_id",
        "temperature.gpu",
        "memory.total",
        "uuid",
    ];
    text.lines()
        .find(|l| l.contains(',') && known.iter().any(|k| l.split(',').any(|c| clean(c) == *k)))
        .map(|l| l.split(',').map(clean).collect())
}

/// `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`: hot GPUs, uncorrected
/// ECC errors and PCIe links narrower than they can be, when those columns are there. A
/// CSV whose columns cannot be known is said to be so.
fn smi_csv(text: &str) -> Vec<Finding> {
    let Some(cols) = csv_header(text) else {
        return vec![Finding::new(
            Severity::Info,
            Component::Input,
            "unreadable-csv",
            "an nvidia-smi CSV without its header (noheader) and without the --query-gpu command: its columns are unknown",
            "save it with --format=csv (keeping the header), or with the command line above it",
        )];
    };
    let col = |name: &str| cols.iter().position(|c| c == name);
    let number = |v: &Option<String>| v.as_deref()?.split_whitespace().next()?.parse::<f64>().ok();
    let mut out = Vec::new();
    let rows = text.lines().filter(|l| {
        let t = l.trim();
        t.contains(',')
            && !t.contains("--query-gpu")
            && !t.starts_with('$')
            && smi::parse_query_row(t).len() == cols.len()
            && t.split(',').next().is_some_and(|c| {
                !cols.contains(
                    &c.trim()
                        .split(" [")
                        .next()
                        .unwrap_or("")
                        .to_ascii_lowercase(),
                )
            })
    });
    for (n, row) in rows.enumerate() {
        let v = smi::parse_query_row(row);
        let at = |i: Option<usize>| i.and_then(|i| v.get(i)).cloned().flatten();
        let gpu = number(&at(col("index"))).map(|g| g as u32);
        let bus = at(col("pci.bus_id")).map(|b| gsched_topology::xid::normalize_pci(&b));
        let who = gpu
            .map(|g| format!("GPU {g}"))
            .unwrap_or_else(|| format!("row {}", n + 1));
        let mut push = |severity, kind: &str, evidence: String, action: &str| {
            let mut f = Finding::new(severity, Component::Gpu, kind, &evidence, action);
            f.gpu = gpu;
            f.pci_bus_id = bus.clone();
            out.push(f);
        };
        if let Some(t) = number(&at(col("temperature.gpu"))).filter(|t| *t >= 85.0) {
            push(
                Severity::Warn,
                "hot",
                format!("{who} at {t} C"),
                "improve airflow (open frames: fans, spacing); it throttles near its slowdown temperature",
            );
        }
        for c in [
            "ecc.errors.uncorrected.volatile.total",
            "ecc.errors.uncorrected.aggregate.total",
        ] {
            if let Some(e) = number(&at(col(c))).filter(|e| *e > 0.0) {
                push(
                    Severity::Drain,
                    "ecc-uncorrected",
                    format!("{who}: {c} = {e}"),
                    "reset the GPU (nvidia-smi -r) when idle; replace it if the count keeps rising",
                );
                break;
            }
        }
        if let (Some(cur), Some(max)) = (
            number(&at(col("pcie.link.width.current"))),
            number(&at(col("pcie.link.width.max"))),
        ) && cur < max
        {
            push(
                Severity::Warn,
                "pcie-degraded",
                format!("{who}: PCIe link x{cur} of x{max}"),
                "check the riser and the slot (seating, a x16 slot wired x8, a riser cable that cannot carry the generation)",
            );
        }
    }
    out
}

fn job_log(text: &str) -> Vec<Finding> {
    let mut transport = TransportLog::default();
    text.lines().for_each(|l| transport.line(l));
    // A saved log does not say what its node has: the interface names are the guide.
    let mut out = transport.judge(None);
    let findings: Vec<_> = text.lines().filter_map(classify_line).collect();
    let Some((i, fatal)) = findings.iter().enumerate().find(|(_, f)| f.fatal) else {
        out.extend(findings.iter().take(1).map(|f| {
            Finding::new(
                Severity::Warn,
                Component::Nccl,
                "nccl-warning",
                &f.line,
                "not fatal by itself; look at what follows it",
            )
        }));
        return out;
    };
    let evidence = first_cause(&findings[..i], fatal);
    let missing = findings[..i]
        .iter()
        .find_map(|f| missing_library(&f.line).filter(|l| *l != "libibverbs"));
    out.push(match missing {
        Some(lib) => Finding::new(
            Severity::FailJob,
            Component::Driver,
            format!("missing-{lib}"),
            &evidence,
            format!(
                "{lib} is not loadable in the job's environment: install the NVIDIA driver's user-space libraries there (in a container: run it with the NVIDIA container runtime, --gpus/--nv), or point LD_LIBRARY_PATH at them"
            ),
        ),
        None => Finding::new(
            Severity::FailJob,
            Component::Nccl,
            format!("{:?}", fatal.kind).to_lowercase(),
            &evidence,
            "the job cannot go on: the evidence is the first cause found in the log",
        ),
    });
    out
}
