//! `gagentd diagnose FILE...`: findings from saved outputs of a node (a support bundle):
//! each file's kind is told from its text (`nvidia-smi` table, `-q`, `-L`, `--query-gpu`
//! CSV, `topo -m`, kernel logs, InfiniBand tools, `ifconfig`/`ip`, NCCL/PyTorch logs) and
//! read by the same parsers and findings the live agent uses.
//! A file that is none of these is reported as such, never misread; and in every file,
//! the lines that read like errors and that no rule read are listed
//! (`unrecognised-lines`): unknown is visible, never silent.

use crate::findings::{
    Attribution, corrected_flood, device_handle_lost, error_words, kernel_finding,
};
use gsched_launch::transport::{TransportLog, missing_library};
use gsched_launch::watch::{
    LineReader, best_cause, classify_line, first_cause, is_fatal, is_launcher_summary,
    is_nccl_warn, nccl_cause, root_exception,
};
use gsched_topology::xid::{AerSeverity, KernelEvent, parse_log};
use gsched_topology::{ib, parse_topo_matrix, smi, strip_ansi, strip_fixture_header};
use gsched_types::failure::FailureKind;
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
    /// `show_gids` (Mellanox OFED): the RoCE GID table.
    ShowGids,
    /// An InfiniBand tool that found no RDMA device at all.
    NoRdmaDevices,
    JobLog,
    /// `nvidia-smi nvlink -s` (or `--status`): each GPU's links, their speed or
    /// `<inactive>`.
    NvlinkStatus,
    Unknown,
}

impl Kind {
    /// The tool family's name in `--json` (`kernel-log`, `job-log`, `smi-table`...).
    pub fn family(self) -> &'static str {
        match self {
            Kind::SmiTable => "smi-table",
            Kind::SmiQuery => "smi-query",
            Kind::TopoMatrix => "topo-matrix",
            Kind::KernelLog => "kernel-log",
            Kind::Ibstat => "ibstat",
            Kind::Ibstatus => "ibstatus",
            Kind::IbvDevinfo => "ibv-devinfo",
            Kind::Ibdev2netdev => "ibdev2netdev",
            Kind::Interfaces => "interfaces",
            Kind::SmiList => "smi-list",
            Kind::SmiCsv => "smi-csv",
            Kind::ShowGids => "show-gids",
            Kind::NoRdmaDevices => "ib-no-devices",
            Kind::JobLog => "job-log",
            Kind::NvlinkStatus => "nvlink-status",
            Kind::Unknown => "unknown",
        }
    }

    /// The tool family in words.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::SmiTable => "nvidia-smi table",
            Kind::SmiQuery => "nvidia-smi -q",
            Kind::TopoMatrix => "nvidia-smi topo -m",
            Kind::KernelLog => "kernel log (dmesg, journalctl -k)",
            Kind::Ibstat => "ibstat",
            Kind::Ibstatus => "ibstatus",
            Kind::IbvDevinfo => "ibv_devinfo",
            Kind::Ibdev2netdev => "ibdev2netdev",
            Kind::Interfaces => "ifconfig / ip",
            Kind::SmiList => "nvidia-smi -L",
            Kind::SmiCsv => "nvidia-smi --query-gpu CSV",
            Kind::ShowGids => "show_gids",
            Kind::NoRdmaDevices => "InfiniBand tool that found no device",
            Kind::JobLog => "job output (NCCL, PyTorch, torchrun)",
            Kind::NvlinkStatus => "nvidia-smi nvlink -s",
            Kind::Unknown => "not a known tool's output",
        }
    }
}

/// Tells a file's kind from its text (the most specific marker wins).
pub fn kind_of(text: &str) -> Kind {
    let has = |s: &str| text.contains(s);
    if has("==============NVSMI LOG==============") {
        Kind::SmiQuery
    } else if has("Failed to initialize NVML") || has("couldn't communicate with the NVIDIA driver")
    {
        Kind::SmiTable
    } else if text.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.starts_with(&["DEV", "PORT", "INDEX", "GID"])
    }) {
        Kind::ShowGids
    } else if has("sys files not found (/sys/class/infiniband")
        || has("No IB devices found")
        || has("No such file or directory (/sys/class/infiniband")
    {
        Kind::NoRdmaDevices
    } else if (has("NVIDIA-SMI ") && has("|"))
        || has("Unable to determine the device handle")
        || text.lines().any(|l| l.trim() == "No devices were found")
    {
        Kind::SmiTable
    } else if has("Infiniband device '") {
        Kind::Ibstatus
    } else if (has("CA '") || has("Physical state:")) && has("Port ") {
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
            || (!l.starts_with(char::is_whitespace) && l.contains("Link encap:"))
            || (l.split(": ").count() >= 3 && l.contains(": <") && l.contains(" mtu "))
    }) {
        Kind::Interfaces
    } else if text.lines().any(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        t.first().is_some_and(|w| w.starts_with("GPU0")) && t.len() > 1 && !l.contains("NVRM")
    }) && has(" X ")
    {
        Kind::TopoMatrix
    } else if has("NCCL")
        || has("ProcessGroupNCCL")
        || has("torchrun")
        || has("torch.distributed")
        || has("Traceback (most recent call last):")
        || text.lines().any(|l| classify_line(l).is_some())
    {
        Kind::JobLog
    } else if has("NVRM")
        || has("pcieport")
        || has("PCIe Bus Error")
        || has("SXid")
        || has("mlx5_core 0")
    {
        Kind::KernelLog
    } else if has("--query-gpu") || has("--format=csv") || csv_header(text).is_some() {
        Kind::SmiCsv
    } else if text
        .lines()
        .any(|l| nvlink_link(l).is_some() || all_links_inactive(l))
    {
        Kind::NvlinkStatus
    } else if text
        .lines()
        .any(|l| l.trim_start().starts_with("GPU ") && l.contains("(UUID: GPU-"))
    {
        Kind::SmiList
    } else {
        Kind::Unknown
    }
}

/// One file read: its tool family, what was found, and how many lines that read like
/// errors no rule read (listed in an `unrecognised-lines` finding).
#[derive(Debug, Clone)]
pub struct FileReport {
    pub family: Kind,
    pub findings: Vec<Finding>,
    pub unread: usize,
}

/// The findings of one file named `name` with contents `text`.
pub fn diagnose(name: &str, text: &str) -> Vec<Finding> {
    report(name, text).findings
}

/// How many unread lines an `unrecognised-lines` finding quotes.
const UNREAD_QUOTED: usize = 5;

/// One file named `name` with contents `text`: its family and findings, the lines no
/// rule read among them.
pub fn report(name: &str, text: &str) -> FileReport {
    let text = strip_fixture_header(text);
    let clean = strip_ansi(text);
    let kind = kind_of(&clean);
    let mut findings = read(name, kind, &clean);
    let unread = unread_lines(kind, &clean, &findings);
    if !unread.is_empty() {
        let quoted: Vec<String> = unread
            .iter()
            .take(UNREAD_QUOTED)
            .map(|l| gsched_types::findings::clip(l, 160))
            .collect();
        findings.push(Finding::new(
            Severity::Info,
            Component::Input,
            "unrecognised-lines",
            &format!(
                "{} line{} that read like errors, read by no rule: {}",
                unread.len(),
                if unread.len() == 1 { "" } else { "s" },
                quoted.join(" | ")
            ),
            "gsched has no rule for these lines and did not judge them: if they matter, keep the file and report them; on a live node the GPU health probe (gagentd probe) tells the device's state whatever its words",
        ));
    }
    FileReport {
        family: kind,
        unread: unread.len(),
        findings,
    }
}

/// The lines of a file that read like errors (`findings::error_words`) and that no rule
/// read: not a kernel event (nor a benign NVRM line, nor an AER report's detail), not a
/// classified job-log line or part of a Python traceback, not NCCL's own INFO, and not
/// quoted by any finding.
fn unread_lines<'a>(kind: Kind, text: &'a str, findings: &[Finding]) -> Vec<&'a str> {
    let mut reader = LineReader::default();
    let mut out = Vec::new();
    // torchrun's failure summary after its ChildFailedError, between two rules of `=`:
    // read as the launcher summary it is.
    let mut summary_rules: Option<u8> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rules) = summary_rules.as_mut() {
            if t.starts_with("=====") {
                *rules += 1;
                if *rules == 2 {
                    summary_rules = None;
                }
            }
            continue;
        }
        if kind == Kind::JobLog && t.contains("ChildFailedError") {
            summary_rules = Some(0);
        }
        let read_as_job_log = kind == Kind::JobLog && {
            let finding = reader.line(line);
            finding.is_some() || reader.in_traceback()
        };
        if t.is_empty() || read_as_job_log || !error_words(t) {
            continue;
        }
        // Kernel events, benign NVRM lines (and an NVRM message's continuations), the
        // lines of an AER report (read with its `PCIe Bus Error` line).
        let read_as_kernel = line.contains("NVRM")
            || gsched_topology::xid::parse_line(line).is_some()
            || t.contains("AER:")
            || crate::probe::when::aer_detail_or_corrected(t);
        // nvidia-smi's lost GPUs, NCCL's own INFO level, torchrun stopping the other
        // workers and pointing at its docs: read by the rules of their files.
        let read_as_tool = t.contains("Unable to determine the device handle")
            || (kind == Kind::SmiCsv && (t.contains("--query-gpu") || csv_header_row(t)))
            || t.contains("NCCL INFO")
            || t.contains("To enable traceback see")
            || (t.contains("Sending process") && t.contains("closing signal"));
        let quoted = || {
            let head: String = t.chars().take(60).collect();
            findings.iter().any(|f| f.evidence.contains(head.as_str()))
        };
        if read_as_kernel || read_as_tool || quoted() {
            continue;
        }
        out.push(t);
    }
    out
}

/// A `--query-gpu` CSV's header row: every cell a column name (`ecc.errors.uncorrected
/// .volatile.total [unit]`).
fn csv_header_row(line: &str) -> bool {
    line.contains(',')
        && line.split(',').all(|c| {
            let name = c.trim().split(" [").next().unwrap_or("");
            !name.is_empty()
                && name
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch == '.' || ch == '_')
        })
}

fn read(name: &str, kind: Kind, clean: &str) -> Vec<Finding> {
    let mut out = by_kind(name, kind, clean);
    // Bundles often paste `nvidia-smi -q`'s remap section under a kernel log.
    if kind != Kind::SmiQuery && clean.contains("Remapped Rows") {
        out.extend(smi_query(clean));
    }
    // And a job's failure under a tool's output ("nvidia-smi cannot talk to the driver"
    // above the job's "No CUDA GPUs are available"): the job's outcome as well.
    if !matches!(kind, Kind::KernelLog | Kind::JobLog) && {
        let mut reader = LineReader::default();
        clean
            .lines()
            .filter_map(|l| reader.line(l))
            .any(|f| f.fatal)
    } {
        out.extend(
            job_log(clean)
                .into_iter()
                .filter(|f| f.severity == Severity::FailJob || f.severity == Severity::Drain),
        );
    }
    // And kernel lines under another tool's output ("nvidia-smi says no devices; dmesg
    // says why").
    if !matches!(kind, Kind::KernelLog | Kind::JobLog) && clean.contains("NVRM") {
        out.extend(kernel(clean));
    }
    out
}

fn by_kind(name: &str, kind: Kind, clean: &str) -> Vec<Finding> {
    match kind {
        Kind::SmiTable => smi_table(clean),
        Kind::SmiQuery => smi_query(clean),
        Kind::TopoMatrix => topo(clean),
        Kind::KernelLog => kernel(clean),
        Kind::Ibstat => {
            let mut out = ib_ports(ib::parse_ibstat(clean), "ibstat");
            out.extend(ib_tool_errors(clean));
            out
        }
        Kind::Ibstatus => ib_ports(ib::parse_ibstatus(clean), "ibstatus"),
        Kind::IbvDevinfo => ib_ports(ib::parse_ibv_devinfo(clean), "ibv_devinfo"),
        Kind::Ibdev2netdev => ibdev2netdev(clean),
        Kind::Interfaces => interfaces(clean),
        Kind::SmiList => smi_list(clean),
        Kind::SmiCsv => smi_csv(clean),
        Kind::JobLog => job_log(clean),
        Kind::NvlinkStatus => nvlink_status(clean),
        Kind::ShowGids => show_gids(clean),
        Kind::NoRdmaDevices => vec![Finding::new(
            Severity::Warn,
            Component::Ib,
            "ib-no-devices",
            clean
                .lines()
                .find(|l| l.contains("found"))
                .unwrap_or("")
                .trim(),
            "no RDMA device is visible: load the HCA's driver (mlx5_ib), check its firmware (dmesg | grep mlx), and in a container pass /dev/infiniband",
        )],
        Kind::Unknown => vec![Finding::new(
            Severity::Info,
            Component::Input,
            "unrecognised-file",
            name,
            "gagentd diagnose reads nvidia-smi (table, -q, -L, --query-gpu CSV), nvidia-smi topo -m, dmesg/journalctl -k, ibstat/ibstatus/ibv_devinfo/ibdev2netdev, ifconfig/ip and NCCL/PyTorch logs; this file is none of them and was not read",
        )],
    }
}

/// `show_gids`: a RoCE port needs a RoCE v2 GID with an IPv4 address for NCCL's default
/// GID choice to work across subnets; none at all means RDMA cannot be used here.
fn show_gids(text: &str) -> Vec<Finding> {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 5 && w[0].contains('_') && w[1].chars().all(|c| c.is_ascii_digit()))
        .collect();
    if rows.is_empty() || text.contains("n_gids_found=0") {
        return vec![Finding::new(
            Severity::Warn,
            Component::Nic,
            "roce-no-gid",
            text.lines()
                .find(|l| l.contains("n_gids_found"))
                .unwrap_or("show_gids lists no GID")
                .trim(),
            "the RDMA device has no usable GID (in a pod: its network namespace has no address on the RoCE interface): NCCL cannot use RoCE here; give the interface an address or attach the RDMA device to the pod's network",
        )];
    }
    let v2_ipv4 = rows
        .iter()
        .find(|w| w.contains(&"v2") && w.iter().any(|c| c.matches('.').count() == 3));
    match v2_ipv4 {
        Some(w) => vec![Finding::new(
            Severity::Info,
            Component::Nic,
            "roce-gid-index",
            &w.join(" "),
            format!(
                "NCCL_IB_GID_INDEX={} is this port's RoCE v2 GID with an IPv4 address",
                w[2]
            ),
        )],
        None => vec![Finding::new(
            Severity::Warn,
            Component::Nic,
            "roce-no-v2-gid",
            &rows[0].join(" "),
            "no RoCE v2 GID with an IPv4 address: RoCE traffic cannot be routed between subnets; give the RoCE interface an IPv4 address (the v2 GID appears with it)",
        )],
    }
}

fn smi_table(text: &str) -> Vec<Finding> {
    if let Some(l) = text
        .lines()
        .find(|l| l.contains("Failed to initialize NVML"))
    {
        let (kind, action) = if l.contains("version mismatch") {
            (
                "driver-mismatch",
                "the driver's user-space libraries were upgraded under the loaded kernel module (unattended-upgrades?): drain, reboot (or reload the nvidia modules) when idle, and pin the driver packages",
            )
        } else {
            (
                "nvml-failed",
                "NVML cannot reach the driver: check the kernel log (dmesg | grep NVRM) and, in a container, that the NVIDIA device nodes are passed in",
            )
        };
        return vec![Finding::new(
            Severity::Drain,
            Component::Driver,
            kind,
            l.trim(),
            action,
        )];
    }
    if let Some(l) = text
        .lines()
        .find(|l| l.contains("couldn't communicate with the NVIDIA driver"))
    {
        return vec![Finding::new(
            Severity::Drain,
            Component::Driver,
            "driver-not-loaded",
            l.trim(),
            "the NVIDIA kernel module is not loaded: see dmesg (a failed DKMS build after a kernel update, nouveau holding the GPUs), reinstall the driver for the running kernel",
        )];
    }
    if text.lines().any(|l| l.trim() == "No devices were found") {
        return vec![Finding::new(
            Severity::Drain,
            Component::Driver,
            "no-gpus",
            "nvidia-smi: No devices were found",
            "the driver sees no GPU it can use: see the kernel log (dmesg | grep NVRM: RmInitAdapter, fallen off the bus), check lspci and that nouveau is not bound",
        )];
    }
    let t = smi::parse_table(text);
    let mut out = err_cells(text);
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
        // The state the probe reads through NVML (`probe::judge`: a remap pending or
        // failed makes the GPU unusable until it is reset or replaced), read from
        // nvidia-smi's field names.
        let (kind, action) = if failed {
            (
                "ecc-remap-failed",
                "remapping failed: the GPU can no longer hide bad memory; replace it",
            )
        } else if pending {
            (
                "ecc-remap-pending",
                "uncorrectable memory errors wait for a row remap that only a GPU reset applies: reset the GPU (nvidia-smi -r) before it takes another job",
            )
        } else {
            continue;
        };
        let which = if bus.is_empty() {
            "a GPU".to_string()
        } else {
            format!("GPU {bus}")
        };
        let mut f = Finding::new(
            Severity::Drain,
            Component::Gpu,
            kind,
            &format!("{which}: Remapped Rows pending={pending} failure={failed}"),
            action,
        );
        f.pci_bus_id = (!bus.is_empty()).then_some(bus);
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

/// A saved kernel log: every event once per device and kind (a GPU that fails to
/// initialise at every retry is one finding; so is each device's unrecognised messages,
/// with their count), corrected AER errors counted per link.
fn kernel(text: &str) -> Vec<Finding> {
    let events = parse_log(text);
    // A failure that names no GPU is one of those the log names.
    let named_init_failure = events.iter().any(|e| match e {
        KernelEvent::GpuInitFailed { pci, .. } | KernelEvent::FallenOffBus { pci } => {
            !pci.is_empty()
        }
        KernelEvent::Xid(x) => x.code == 79,
        _ => false,
    });
    let mut out = Vec::new();
    let mut seen: std::collections::BTreeSet<(String, String)> = Default::default();
    let mut corrected: std::collections::BTreeMap<String, (u32, String)> = Default::default();
    let mut unrecognised: std::collections::BTreeMap<String, (u32, Finding)> = Default::default();
    for ev in &events {
        match ev {
            KernelEvent::PcieAer {
                pci,
                severity: AerSeverity::Corrected,
                detail,
            } => {
                let e = corrected.entry(pci.clone()).or_default();
                e.0 += 1;
                e.1 = detail.clone();
                continue;
            }
            KernelEvent::GpuInitFailed { pci, .. } if pci.is_empty() && named_init_failure => {
                continue;
            }
            _ => {}
        }
        let Some(noted) = kernel_finding(ev, Attribution::Unknown) else {
            continue;
        };
        let f = noted.finding;
        if let KernelEvent::Unrecognised { device, .. } = ev {
            unrecognised.entry(device.clone()).or_insert((0, f)).0 += 1;
            continue;
        }
        let once = matches!(
            ev,
            KernelEvent::GpuInitFailed { .. }
                | KernelEvent::NoGpus { .. }
                | KernelEvent::GpuAerUnrecoverable { .. }
                | KernelEvent::DeviceStatus { .. }
                | KernelEvent::DriverMismatch { .. }
                | KernelEvent::NicFirmwareStuck { .. }
        );
        if once && !seen.insert((f.kind.clone(), f.pci_bus_id.clone().unwrap_or_default())) {
            continue;
        }
        // A fault that fails the job also keeps the GPU from new jobs (the live agent's
        // critical event does both): its second outcome.
        let twin = (f.severity == Severity::FailJob).then(|| crate::findings::withheld(&f));
        out.push(f);
        out.extend(twin);
    }
    for (_, (n, mut f)) in unrecognised {
        if n > 1 {
            f.evidence = gsched_types::findings::clip(
                &format!("{} (and {} more like it)", f.evidence, n - 1),
                gsched_types::findings::MAX_EVIDENCE_CHARS,
            );
        }
        out.push(f);
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
            let evidence = format!(
                "{tool}: {} port {} active MTU {} below its max {}",
                p.hca,
                p.port,
                p.active_mtu.unwrap_or(0),
                p.max_mtu.unwrap_or(0)
            );
            // On InfiniBand the subnet manager set a smaller MTU than both ends support: a
            // fault of the fabric's set-up. On RoCE the RDMA MTU follows the interface's
            // (1024 under the usual 1500, 4096 only with jumbo frames): a choice, whose
            // cost is bandwidth.
            let finding = if p.is_roce() {
                Finding::new(
                    Severity::Info,
                    Component::Ib,
                    "roce-mtu-below-max",
                    &evidence,
                    "for more RDMA bandwidth, use jumbo frames (MTU 9000 on the interface and every switch port of the path)",
                )
            } else {
                Finding::new(
                    Severity::Warn,
                    Component::Ib,
                    "ib-mtu-degraded",
                    &evidence,
                    "set the partition's MTU in the subnet manager (opensm: mtu in the partitions file) and check the switch ports",
                )
            };
            out.push(finding);
        }
    }
    out
}

/// A link line of `nvidia-smi nvlink -s`: its number and speed (`None` when
/// `<inactive>`, the tool's word for a link that is not up).
fn nvlink_link(line: &str) -> Option<(u32, Option<f64>)> {
    let rest = line.trim().strip_prefix("Link ")?;
    let (n, state) = rest.split_once(':')?;
    let n: u32 = n.trim().parse().ok()?;
    let state = state.trim();
    if state == "<inactive>" {
        return Some((n, None));
    }
    let speed: f64 = state.strip_suffix("GB/s")?.trim().parse().ok()?;
    Some((n, Some(speed)))
}

/// What `nvidia-smi nvlink -s` prints for a GPU none of whose links is up ("NVML: Unable
/// to retrieve NVLink information as all links are inActive").
fn all_links_inactive(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.contains("nvlink information") && lower.contains("all links are inactive")
}

/// Whether a GPU of this name only comes as a module on an NVLink baseboard (SXM and the
/// Blackwell HGX/NVL parts, H100 SXM5 named by its HBM3, H200 SXM), so that no link up
/// means it is cut off from its peers; PCIe cards print the same with no bridge fitted.
fn nvlink_only(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.contains("SXM")
        || ["B100", "B200", "B300", "GB200", "GB300"].iter().any(|m| {
            n.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == *m)
        })
        || (n.contains("H100") && n.contains("HBM3"))
        || (n.contains("H200") && !n.contains("NVL"))
}

/// A GPU with no NVLink up: drained where the part only works on NVLink (it cannot reach
/// its peers), a warning where it may be a PCIe card without a bridge.
fn nvlink_all_inactive(gpu: &Option<(Option<u32>, String)>) -> Finding {
    let (index, name) = gpu.clone().unwrap_or((None, "a GPU".into()));
    let only = nvlink_only(&name);
    let mut f = Finding::new(
        if only {
            Severity::Drain
        } else {
            Severity::Warn
        },
        Component::Nvlink,
        "nvlink-all-inactive",
        &format!("{name}: no NVLink is up (nvidia-smi: all links are inactive)"),
        if only {
            "this GPU is an NVLink module with every link down: it cannot reach its peers (NCCL hangs or falls back, CUDA peer access fails); reset the GPU, check the baseboard and, on NVSwitch systems, the fabric manager (nvidia-fabricmanager, nvidia-smi -q | grep -i fabric)"
        } else {
            "if this GPU has an NVLink bridge, the bridge is not seated or has failed (reset the GPU, reseat the bridge); a PCIe card without one prints the same and is fine"
        },
    );
    f.gpu = index;
    f
}

/// The default table's `ERR!` cells (NVML could not read that field of the GPU): a GPU
/// whose very name is unreadable is one NVML cannot talk to (drained, at its bus id); an
/// unreadable field beside readable ones is a sensor or a field the driver failed (a
/// warning). A GPU's block is its first line (index, name, bus id) and the lines after
/// it up to the next rule.
fn err_cells(text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let cells: Vec<&str> = l.trim().trim_matches('|').split('|').collect();
        let Some(first) = cells.first() else { continue };
        let mut words = first.split_whitespace();
        let Some(index) = words.next().and_then(|w| w.parse::<u32>().ok()) else {
            continue;
        };
        let Some(bus) = cells
            .get(1)
            .and_then(|c| c.split_whitespace().next())
            .filter(|b| b.len() >= 12 && b.contains(':') && b.contains('.'))
        else {
            continue;
        };
        let block: Vec<&str> = std::iter::once(*l)
            .chain(
                lines[i + 1..]
                    .iter()
                    .take_while(|x| !x.trim_start().starts_with('+'))
                    .copied(),
            )
            .collect();
        let errs = block
            .iter()
            .map(|x| x.matches("ERR!").count())
            .sum::<usize>();
        if errs == 0 {
            continue;
        }
        let name_unreadable = words.next() == Some("ERR!");
        let mut f = if name_unreadable {
            Finding::new(
                Severity::Drain,
                Component::Gpu,
                "gpu-unreadable",
                &format!(
                    "nvidia-smi: GPU {index} ({bus}): {errs} fields read ERR!, its name among them"
                ),
                "NVML cannot read this GPU (its name, temperature and power come back as errors): it takes no job until it is reset (nvidia-smi -r) or the node rebooted; check the kernel log for Xids and the card's power and seating",
            )
        } else {
            Finding::new(
                Severity::Warn,
                Component::Gpu,
                "gpu-field-unreadable",
                &format!("nvidia-smi: GPU {index} ({bus}): {errs} field(s) read ERR!"),
                "a sensor or field of this GPU could not be read (a fan or its controller, often): check nvidia-smi -q for the field and the GPU's recovery action; the GPU health probe reads its state between jobs",
            )
        };
        f.gpu = Some(index);
        f.pci_bus_id = Some(gsched_topology::xid::normalize_pci(bus));
        out.push(f);
    }
    out
}

/// `nvidia-smi nvlink -s`: a GPU with links that are not up, beside the ones that are,
/// runs NVLink traffic on fewer links or over PCIe (the state the probe reads as each
/// link's `nvmlDeviceGetNvLinkState` against what was registered); a GPU with none up.
fn nvlink_status(text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut none_up = Vec::new();
    let mut gpu: Option<(Option<u32>, String)> = None;
    let mut inactive: Vec<u32> = Vec::new();
    let mut active = 0;
    let mut flush = |gpu: &Option<(Option<u32>, String)>,
                     inactive: &mut Vec<u32>,
                     active: &mut u32| {
        if !inactive.is_empty() {
            let (index, name) = gpu.clone().unwrap_or((None, "a GPU".into()));
            let mut f = Finding::new(
                Severity::Warn,
                Component::Nvlink,
                "nvlink-inactive",
                &format!(
                    "{name}: NVLink {} inactive ({} of {} links up)",
                    inactive
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    active,
                    *active as usize + inactive.len()
                ),
                "NVLink traffic of this GPU runs on fewer links (or over PCIe): check the NVLink bridge or baseboard, then reset the GPU; on NVSwitch systems the fabric manager",
            );
            f.gpu = index;
            out.push(f);
        }
        inactive.clear();
        *active = 0;
    };
    for l in text.lines() {
        let t = l.trim();
        if let Some(rest) = t.strip_prefix("GPU ")
            && let Some((n, _)) = rest.split_once(':')
            && n.trim().chars().all(|c| c.is_ascii_digit())
        {
            flush(&gpu, &mut inactive, &mut active);
            gpu = Some((
                n.trim().parse().ok(),
                t.split(" (UUID").next().unwrap_or(t).to_string(),
            ));
        } else if all_links_inactive(t) {
            none_up.push(nvlink_all_inactive(&gpu));
        } else if let Some((n, speed)) = nvlink_link(t) {
            match speed {
                Some(_) => active += 1,
                None => inactive.push(n),
            }
        }
    }
    flush(&gpu, &mut inactive, &mut active);
    out.extend(none_up);
    out
}

/// infiniband-diags' own errors (`ibpanic:`/`ibwarn:` from its IBPANIC and IBWARN
/// macros): a device the tool could not read is missing or broken.
fn ib_tool_errors(text: &str) -> Vec<Finding> {
    text.lines()
        .map(str::trim)
        .filter(|t| t.starts_with("ibpanic:") || t.starts_with("ibwarn:"))
        .map(|t| {
            Finding::new(
                Severity::Warn,
                Component::Ib,
                "ib-device-unreadable",
                t,
                "the InfiniBand tool could not read this device (gone, or its driver failed): check dmesg for mlx5 errors and that the adapter is listed by ibv_devices; its rail is not usable",
            )
        })
        .collect()
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
    let mut reader = LineReader::default();
    let findings: Vec<_> = text.lines().filter_map(|l| reader.line(l)).collect();
    let fatal = (0..findings.len()).find(|&i| is_fatal(&findings[..i], &findings[i]));
    let Some(i) = fatal else {
        // A Python exception with nothing fatal around it: the job's own error (it may
        // have caught it); the earliest root cause of all ranks.
        out.extend(root_exception(&findings).map(|f| {
            Finding::new(
                Severity::Warn,
                Component::Host,
                "python-exception",
                &f.line,
                "the job raised it (the class and its deepest frame are named): if it ended the job, this is why; nothing points at the node",
            )
        }));
        out.extend(findings.iter().find(|f| is_nccl_warn(&f.line)).map(|f| {
            Finding::new(
                Severity::Warn,
                Component::Nccl,
                "nccl-warning",
                &f.line,
                "not fatal by itself: NCCL went on after it",
            )
        }));
        return out;
    };
    let fatal = &findings[i];
    let missing = findings[..i]
        .iter()
        .any(|f| missing_library(&f.line).is_some_and(|l| l != "libibverbs"));
    // A saved log holds every rank's lines: the most specific NCCL cause anywhere in it
    // explains the failure better than whichever rank noticed first.
    let cause = best_cause(findings.iter()).filter(|f| {
        nccl_cause(&f.line).is_some_and(|c| c.rank() > 1) || fatal.kind == FailureKind::NcclError
    });
    // A launcher's summary is explained by the earliest root exception of any rank,
    // wherever the interleaved output put it.
    let exception = root_exception(&findings).filter(|_| is_launcher_summary(&fatal.line));
    let evidence = match (cause, exception) {
        (_, Some(e)) if !missing => format!("{} (then: {})", e.line, fatal.line),
        (Some(f), _) if !missing && f.line == fatal.line => f.line.clone(),
        (Some(f), _) if !missing => format!("{} (then: {})", f.line, fatal.line),
        _ => first_cause(&findings[..i], fatal),
    };
    out.extend(failure_findings(&fatal.kind, &evidence));
    out
}

/// A job's failure as a finding, whether the live agent reported it or a saved log
/// shows it: a library NCCL could not load, the NCCL cause its evidence names (a WARN
/// line first, then what it led to), or else its kind.
pub fn failure_finding(kind: &FailureKind, evidence: &str) -> Finding {
    if let Some(lib) = missing_library(evidence).filter(|l| *l != "libibverbs") {
        return Finding::new(
            Severity::FailJob,
            Component::Driver,
            format!("missing-{lib}"),
            evidence,
            format!(
                "{lib} is not loadable in the job's environment: install the NVIDIA driver's user-space libraries there (in a container: run it with the NVIDIA container runtime, --gpus/--nv), or point LD_LIBRARY_PATH at them"
            ),
        );
    }
    let head = evidence.split(" (then: ").next().unwrap_or(evidence);
    if let Some(f) = failure_by_catalogue(kind, head, evidence) {
        return f;
    }
    match nccl_cause(head).filter(|c| c.rank() > 1 || *kind == FailureKind::NcclError) {
        Some(c) => Finding::new(
            Severity::FailJob,
            Component::Nccl,
            c.kind(head),
            evidence,
            c.advice(),
        ),
        None => Finding::new(
            Severity::FailJob,
            component_of(kind),
            kind_name(kind),
            evidence,
            "the job cannot go on: the evidence is the first cause found in the log",
        ),
    }
}

/// A failure the tables of `gsched_launch::catalog` name: a bus error inside NCCL (NCCL
/// maps its shared-memory segments from /dev/shm; touching a page a too-small tmpfs
/// cannot back raises SIGBUS, as mmap(2) says), a rendezvous or c10d store failure, an
/// RDMA work completion in error, a verbs resource the RDMA stack refused, a queue pair
/// that could not be connected.
fn failure_by_catalogue(kind: &FailureKind, head: &str, evidence: &str) -> Option<Finding> {
    use gsched_launch::catalog;
    if *kind == (FailureKind::Signal { signal: 7 }) && head.contains("nccl") {
        let c = gsched_launch::watch::NcclCause::Shm;
        return Some(Finding::new(
            Severity::FailJob,
            Component::Nccl,
            c.kind(head),
            evidence,
            c.advice(),
        ));
    }
    if nccl_cause(head).is_some() {
        return None;
    }
    let rendezvous = catalog::rendezvous_error_in(head)
        .map(|e| e.kind)
        .or_else(|| catalog::in_rendezvous_module(head).then_some("rendezvous-store"));
    if let Some(kind) = rendezvous {
        return Some(Finding::new(
            Severity::FailJob,
            Component::Host,
            kind,
            evidence,
            "the job's processes never formed their group (PyTorch's rendezvous or its c10d store failed): check that every node reaches the rendezvous endpoint (MASTER_ADDR/--rdzv_endpoint and its port, firewalls, the interface it resolves to on multi-NIC hosts) and that all nodes started; nothing points at the GPUs",
        ));
    }
    if let Some(s) = catalog::wc_status_in(head) {
        return Some(Finding::new(
            Severity::FailJob,
            Component::Ib,
            s.kind(),
            evidence,
            format!(
                "an RDMA transfer completed in error ({}: {}): the queue pair is broken and the job with it; check both ends' ports (ibstat), cables and switch ports, and for a protection or access error the memory registration (GPUDirect RDMA: the nvidia-peermem module, ACS/IOMMU settings)",
                s.name, s.text
            ),
        ));
    }
    if let Some(v) = catalog::verbs_call_failed(head) {
        return Some(Finding::new(
            Severity::FailJob,
            Component::Ib,
            v.kind(),
            evidence,
            verbs_advice(&v),
        ));
    }
    if let Some(state) = catalog::qp_transition_failed(head) {
        let kind = if state.is_empty() {
            "ib-qp-transition".to_string()
        } else {
            format!("ib-qp-to-{}", state.to_ascii_lowercase())
        };
        return Some(Finding::new(
            Severity::FailJob,
            Component::Ib,
            kind,
            evidence,
            "a queue pair to the peer could not be connected: check the GID index and MTU both ends use, that the peer's port is reachable over this NIC (on multi-NIC hosts, the NIC the peer expects), and the fabric's routing",
        ));
    }
    None
}

/// What to check when the RDMA stack refused a verbs resource, by what its errno says.
fn verbs_advice(v: &gsched_launch::catalog::VerbsFailure) -> String {
    use gsched_launch::catalog::Errno;
    let what = format!(
        "the RDMA stack refused the job a {} ({})",
        v.resource, v.call
    );
    match v.errno {
        Some(Errno::NoMemory) => format!(
            "{what}, out of memory: first the locked-memory limit the job inherits (`ulimit -l` inside a job must say unlimited: gagentd's unit sets LimitMEMLOCK=infinity as slurmd's does; `gctl doctor` names a node whose agent runs with less), then the device's own limits (queue pairs per device with many ranks per node, the mlx5 driver's memory translation table)"
        ),
        Some(Errno::Denied) => format!(
            "{what}, permission denied: the job's user must be able to open /dev/infiniband/uverbs* (udev rules, the rdma group) and, with a cgroup device filter, the filter must let the job's NIC through"
        ),
        Some(Errno::NoDevice) => format!(
            "{what}: the device is gone (a firmware reset, a driver reload or a failing card): check `ibstat` and the kernel log on the node"
        ),
        _ => format!(
            "{what}: check that the job's libraries (rdma-core, UCX, the NCCL network plugin) match the node's driver and firmware, and the arguments the library passed (its own log around this line)"
        ),
    }
}

/// A job's failure on both axes: the job's finding, and where its CUDA error is one that
/// says the GPU's state (the CUDA error table's `device` rows: an uncorrectable ECC
/// error, devices unavailable, an uncorrectable NVLink error, a driver mismatch), the
/// GPU's: it takes no new job until it is reset or fixed.
pub fn failure_findings(kind: &FailureKind, evidence: &str) -> Vec<Finding> {
    let job = failure_finding(kind, evidence);
    let state = gsched_launch::catalog::cuda_error_in(evidence)
        .filter(|e| e.reading == gsched_launch::catalog::CudaReading::Device)
        .map(|e| {
            Finding::new(
                Severity::Drain,
                if e.state_kind().starts_with("driver") {
                    Component::Driver
                } else {
                    Component::Gpu
                },
                e.state_kind(),
                evidence,
                format!(
                    "CUDA reported {} ({}) on the job's GPU: the GPU takes no new job until it is reset (nvidia-smi -r) or fixed; the node's GPU health probe checks it between jobs",
                    e.name, e.message
                ),
            )
        });
    std::iter::once(job).chain(state).collect()
}

fn component_of(kind: &FailureKind) -> Component {
    match kind {
        FailureKind::NcclError | FailureKind::NcclTimeout => Component::Nccl,
        FailureKind::CudaError | FailureKind::Oom => Component::Gpu,
        _ => Component::Host,
    }
}

/// A failure kind as a finding's kind: `nccl-timeout`, `cuda-oom`, `exit-1`, `signal-9`.
fn kind_name(kind: &FailureKind) -> String {
    match kind {
        FailureKind::NcclTimeout => "nccl-timeout".into(),
        FailureKind::NcclError => "nccl-error".into(),
        FailureKind::Oom => "cuda-oom".into(),
        FailureKind::CudaError => "cuda-error".into(),
        FailureKind::ExitCode { code } => format!("exit-{code}"),
        FailureKind::Signal { signal } => format!("signal-{signal}"),
        other => other.reason_name().to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(r: &FileReport) -> Vec<&str> {
        r.findings.iter().map(|f| f.kind.as_str()).collect()
    }

    #[test]
    fn an_mtu_below_the_ports_max_is_a_fault_on_infiniband_and_a_choice_on_roce() {
        let port = |layer: &str| {
            format!(
                "hca_id:\tmlx5_0\n\tphys_port_cnt:\t1\n\t\tport:\t1\n\t\t\tstate:\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t4096 (5)\n\t\t\tactive_mtu:\t1024 (3)\n\t\t\tlink_layer:\t{layer}\n"
            )
        };
        let read = |layer: &str| -> Vec<(Severity, String)> {
            ib_ports(ib::parse_ibv_devinfo(&port(layer)), "ibv_devinfo")
                .into_iter()
                .map(|f| (f.severity, f.kind))
                .collect()
        };
        assert_eq!(
            read("InfiniBand"),
            [(Severity::Warn, "ib-mtu-degraded".to_string())]
        );
        assert_eq!(
            read("Ethernet"),
            [(Severity::Info, "roce-mtu-below-max".to_string())]
        );
    }

    #[test]
    fn every_file_says_its_family_and_the_error_lines_no_rule_read() {
        let r = report(
            "dmesg.txt",
            "[    1.0] pci 0000:3b:00.0: [10de:2330] type 00 class 0x030200\n\
             [   12.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n\
             [  100.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
             [  101.0] ACPI Error: AE_NOT_FOUND, While resolving a named reference package element\n\
             [  102.0] EXT4-fs (sda1): mounted filesystem\n",
        );
        assert_eq!(
            (r.family, r.family.family()),
            (Kind::KernelLog, "kernel-log")
        );
        assert_eq!(r.unread, 1);
        let unread = r
            .findings
            .iter()
            .find(|f| f.kind == "unrecognised-lines")
            .unwrap();
        assert_eq!(unread.severity, Severity::Info);
        assert!(
            unread
                .evidence
                .starts_with("1 line that read like errors, read by no rule: [  101.0] ACPI Error"),
            "{}",
            unread.evidence
        );
        assert!(kinds(&r).contains(&"xid-79"));
        // A tool output in a layout no rule knows: its error cells are listed.
        let r = report(
            "smi.txt",
            "+---------------------------------------------------------+\n\
             | NVIDIA-SMI 535.104.05   Driver Version: 535.104.05      |\n\
             |   0  NVIDIA A100-SXM4-80GB  On | 00000000:07:00.0 Off |   ERR! |\n\
             | N/A   ERR!  P0    ERR! / 400W |   0MiB / 81920MiB |      0%  Default |\n",
        );
        assert_eq!(r.family, Kind::SmiTable);
        assert_eq!(r.unread, 2, "{:?}", r.findings);
        // Nothing that reads like an error: no such finding.
        let r = report("ok.txt", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n");
        assert_eq!((r.family, r.unread), (Kind::SmiList, 0));
        assert!(!kinds(&r).contains(&"unrecognised-lines"));
    }

    fn worst(text: &str) -> Vec<(Severity, String)> {
        let mut f: Vec<(Severity, String)> = diagnose("x.txt", text)
            .into_iter()
            .filter(|f| f.severity >= Severity::Warn)
            .map(|f| (f.severity, f.kind))
            .collect();
        f.sort();
        f
    }

    /// The same state in words no artifact of the corpus uses (hand-made from the tables'
    /// names and messages): read the same way, from the state the words carry.
    #[test]
    fn a_state_is_read_from_its_code_or_name_whatever_the_message() {
        // An NVRM line of another message carrying a status that says the GPU needs a
        // reset, or lost its memory.
        assert_eq!(
            worst("[ 1.0] NVRM: kgspBootstrap_IMPL: some new wording [NV_ERR_GPU_IN_FULLCHIP_RESET] (0x00000010)
"),
            [(Severity::Drain, "gpu-reset-required".to_string())]
        );
        assert_eq!(
            worst(
                "[ 1.0] NVRM: fbAlloc: status=0x00000072 on GPU 0000:3b:00.0
"
            ),
            [(Severity::Drain, "ecc-driver-status".to_string())]
        );
        // A call's own failure is no state.
        assert!(
            worst(
                "[ 1.0] NVRM: rpcSendMessage: failed [NV_ERR_INVALID_ARGUMENT] (0x0000001f)
"
            )
            .iter()
            .all(|(s, _)| *s < Severity::Drain)
        );
        // CUDA's driver API name for an uncorrectable ECC error, in a C++ program's log.
        assert_eq!(
            worst(
                "worker.cc:88 cuMemcpy failed: CUDA_ERROR_ECC_UNCORRECTABLE
"
            ),
            [
                (Severity::Drain, "ecc-uncorrectable".to_string()),
                (Severity::FailJob, "cuda-error".to_string())
            ]
        );
        // A work completion by its ibv_wc_status_str words, from another RDMA program.
        assert_eq!(
            worst(
                "rdma_engine: send to peer 7 failed: RNR retry counter exceeded
"
            ),
            [(Severity::FailJob, "ib-wc-rnr-retry-exc-err".to_string())]
        );
        // A rendezvous failure by its class inside another launcher's line.
        assert_eq!(
            worst("[launcher] agent 3 gave up: torch.distributed.elastic.rendezvous.api.RendezvousClosedError
"),
            [(Severity::FailJob, "rendezvous-closed".to_string())]
        );
    }

    #[test]
    fn a_job_logs_traceback_is_read_and_its_lines_are_not_unread() {
        let r = report(
            "job.out",
            "epoch 1 loss 0.3\n\
             Traceback (most recent call last):\n  File \"/w/train.py\", line 12, in step\n    raise RuntimeError(\"shard error\")\n\
             RuntimeError: shard error\n\
             ERROR: something else entirely\n",
        );
        assert_eq!(r.family, Kind::JobLog);
        let exc = r
            .findings
            .iter()
            .find(|f| f.kind == "python-exception")
            .unwrap();
        assert_eq!(
            (exc.severity, exc.evidence.as_str()),
            (
                Severity::Warn,
                "RuntimeError: shard error (at /w/train.py:12 in step)"
            )
        );
        let unread = r
            .findings
            .iter()
            .find(|f| f.kind == "unrecognised-lines")
            .unwrap();
        assert!(
            unread.evidence.starts_with(
                "1 line that read like errors, read by no rule: ERROR: something else entirely"
            ),
            "{}",
            unread.evidence
        );
    }

    #[test]
    fn a_gpu_with_no_nvlink_up_is_drained_only_where_it_is_an_nvlink_module() {
        let said = |gpu: &str| {
            let text = format!(
                "GPU 2: {gpu} (UUID: GPU-1)\nNVML: Unable to retrieve NVLink information as all links are inActive\n"
            );
            let r = report("nvlink-s.txt", &text);
            assert_eq!(r.family, Kind::NvlinkStatus, "{gpu}");
            let f = r
                .findings
                .iter()
                .find(|f| f.kind == "nvlink-all-inactive")
                .unwrap_or_else(|| panic!("{gpu}: {:?}", r.findings));
            assert_eq!(f.gpu, Some(2));
            f.severity
        };
        for module in [
            "NVIDIA B200",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H200",
            "NVIDIA GB200",
        ] {
            assert_eq!(said(module), Severity::Drain, "{module}");
        }
        for card in [
            "NVIDIA GeForce RTX 3090",
            "NVIDIA H100 PCIe",
            "NVIDIA H200 NVL",
            "NVIDIA A100 80GB PCIe",
        ] {
            assert_eq!(said(card), Severity::Warn, "{card}");
        }
    }

    #[test]
    fn err_cells_drain_a_gpu_nvml_cannot_name_and_warn_of_one_unreadable_field() {
        let table =
            "|   0  ERR!                On   | 00000000:19:00.0 Off |                 ERR! |
|ERR!  ERR! ERR!    ERR! / ERR! |      0MiB / 46068MiB |    ERR!      Default |
+-------------------------------+----------------------+----------------------+
|   1  NVIDIA A40          On   | 00000000:1A:00.0 Off |                    0 |
|ERR!   26C    P8    12W / 300W |      0MiB / 46068MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   2  NVIDIA A40          On   | 00000000:1B:00.0 Off |                    0 |
|  0%   26C    P8    12W / 300W |      0MiB / 46068MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
";
        let f = err_cells(table);
        let got: Vec<_> = f
            .iter()
            .map(|f| (f.severity, f.kind.as_str(), f.gpu, f.pci_bus_id.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    Severity::Drain,
                    "gpu-unreadable",
                    Some(0),
                    Some("0000:19:00")
                ),
                (
                    Severity::Warn,
                    "gpu-field-unreadable",
                    Some(1),
                    Some("0000:1a:00")
                ),
            ]
        );
    }
}
