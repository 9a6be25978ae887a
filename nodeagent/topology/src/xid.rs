//! Kernel log lines from the NVIDIA driver: GPU Xid errors (every known format: dmesg
//! with monotonic or `-T`/`--ctime` timestamps, journal `kernel:` prefixes, raw
//! `/dev/kmsg` records, old `Xid (0000:03:00)` and new `pid=…, name=…` forms), NVSwitch
//! SXids (which are *not* GPU Xids), "fallen off the bus" messages in every driver's words
//! (the open driver's spans three lines: `KernelLog` joins continuation lines), PCIe AER
//! errors, and the GPU-UUID lines that map PCI addresses to GPUs. Classification follows
//! NVIDIA's Xid catalogue.

use gsched_types::node::HealthSeverity;
use serde::{Deserialize, Serialize};

/// One event from the driver's kernel messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelEvent {
    Xid(XidEvent),
    /// NVSwitch error: concerns the fabric, not a GPU.
    SXid {
        pci: String,
        code: u32,
        fatal: Option<bool>,
        message: String,
    },
    /// "GPU 0000:a1:00.0: GPU has fallen off the bus." without an Xid number.
    FallenOffBus {
        pci: String,
    },
    /// A PCIe Advanced Error Reporting message (`PCIe Bus Error: severity=…, type=…`)
    /// about the device at `pci` (a GPU, or the port above one).
    PcieAer {
        pci: String,
        severity: AerSeverity,
        /// The error type ("Physical Layer", "Transaction Layer").
        detail: String,
    },
    /// "NVRM: GPU at PCI:0000:a1:00: GPU-979426f2-…": maps a PCI address to a UUID.
    GpuIdentity {
        pci: String,
        uuid: String,
    },
    /// The driver could not bring a GPU up (RmInitAdapter failed, its GSP firmware would
    /// not boot, it could not be mapped, the probe failed): the GPU is unusable. `pci` is
    /// empty when the line names no address.
    GpuInitFailed {
        pci: String,
        line: String,
    },
    /// The driver found no GPU it could use ("No NVIDIA graphics adapter found", another
    /// driver holds them).
    NoGpus {
        line: String,
    },
    /// The GPU's own driver cannot recover from a PCIe error the port above it reported
    /// ("nvidia 0000:03:00.0: AER: can't recover"): the GPU is off the bus.
    GpuAerUnrecoverable {
        pci: String,
        line: String,
    },
    /// The driver reports an NVLink that failed to train or be discovered, with no Xid.
    NvlinkFailure {
        device: String,
        line: String,
    },
    /// An NVRM line that carries a driver status code saying what state the GPU is in
    /// (`crate::nv_status`: reset required, lost, memory failed...), whatever its words.
    /// `pci` is empty when the line names no address.
    DeviceStatus {
        pci: String,
        /// The code's name (`NV_ERR_RESET_REQUIRED`).
        status: String,
        state: crate::nv_status::GpuState,
        line: String,
    },
    /// NVRM's "API mismatch" family: a client (library, X server, container) of another
    /// driver version than the loaded kernel module; no CUDA or NVML client can work.
    DriverMismatch {
        line: String,
    },
    /// A ConnectX (mlx5) adapter stopped completing its firmware commands (the mlx5
    /// driver's command-interface timeouts): RDMA on it fails until its firmware is dealt
    /// with.
    NicFirmwareStuck {
        pci: String,
        line: String,
    },
    /// An NVRM message none of the above explains, about `device` (a PCI address, a
    /// `GPUn` name, or empty): reported as such, never dropped.
    Unrecognised {
        device: String,
        line: String,
    },
}

/// How bad an AER error is, in the kernel's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AerSeverity {
    /// Fixed by the link itself; a flood of them means a marginal riser, cable or slot.
    Corrected,
    /// "Uncorrected (Non-Fatal)": a transaction was lost; the link still works.
    NonFatal,
    /// "Uncorrected (Fatal)" (a Surprise Down, say): the device is gone from the bus.
    Fatal,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    /// PCI address as domain:bus:device, lower case, no function ("0000:a1:00").
    pub pci: String,
    pub code: u32,
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// For Xid 45: the Xid that caused the channel teardown.
    pub caused_by: Option<u32>,
    pub message: String,
    pub timestamp: Option<String>,
    pub line: String,
}

impl XidEvent {
    /// The Xid that explains this event (Xid 45 is classified by its cause).
    pub fn effective_code(&self) -> u32 {
        if self.code == 45 {
            self.caused_by.unwrap_or(45)
        } else {
            self.code
        }
    }
}

/// What NVIDIA's catalogue says to do about an Xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum XidAction {
    /// The application hit it (its own bug or a contained error): restart the application.
    RestartApp,
    /// Informational or handled by the driver.
    Ignore,
    /// Row remapping pending: reset the GPU when it is idle.
    ResetWhenIdle,
    /// The GPU needs a reset before it can be trusted.
    ResetGpu,
    /// The node needs a reboot (GPU off the bus, fatal fabric errors).
    RebootNode,
}

/// Classifies an Xid event: by its code, except that NVLink errors (Xid 144-150) say
/// themselves whether they are `Fatal` or `Nonfatal` (corrected by the link: a warning).
pub fn classify_event(x: &XidEvent) -> (XidAction, HealthSeverity) {
    let code = x.effective_code();
    if (144..=150).contains(&code) && x.code == code {
        let words: Vec<&str> = x.message.split_whitespace().collect();
        if words.contains(&"Nonfatal") {
            return (XidAction::Ignore, HealthSeverity::Warning);
        }
    }
    // "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)".
    if code == 154 {
        let to = x.message.rsplit(" to ").next().unwrap_or("");
        if to.contains("GPU Reset Required") || to.contains("Reset") && !to.contains("Reboot") {
            return (XidAction::ResetGpu, HealthSeverity::Critical);
        }
        if to.contains("(None)") {
            return (XidAction::Ignore, HealthSeverity::Info);
        }
    }
    classify(code)
}

/// Classifies an Xid code (use [`XidEvent::effective_code`] for Xid 45) by NVIDIA's
/// catalogue ([`crate::xid_catalog`]), with two readings of our own: Xid 63 on GPUs with
/// row remapping means a remap is pending (reset when idle), and Xid 154 without its
/// message asks for a reboot (its message, when there, is read by [`classify_event`]).
/// A code the catalogue does not list needs a look: a warning.
pub fn classify(code: u32) -> (XidAction, HealthSeverity) {
    match code {
        63 => (XidAction::ResetWhenIdle, HealthSeverity::Warning),
        154 => (XidAction::RebootNode, HealthSeverity::Critical),
        _ => match crate::xid_catalog::catalogue().get(&code) {
            Some(entry) => crate::xid_catalog::meaning(entry),
            None => (XidAction::ResetGpu, HealthSeverity::Warning),
        },
    }
}

/// Normalises `PCI:0000:A1:00`, `0000:a1:00.0`, `00000000:A1:00.0` to `0000:a1:00`.
pub fn normalize_pci(text: &str) -> String {
    let t = text
        .trim()
        .trim_start_matches("PCI:")
        .trim_start_matches("GPU")
        .to_ascii_lowercase();
    let t = t.split('.').next().unwrap_or(&t).to_string();
    let parts: Vec<&str> = t.split(':').collect();
    match parts.as_slice() {
        [dom, bus, dev] => format!(
            "{:0>4}:{bus:0>2}:{dev:0>2}",
            dom.trim_start_matches('0')
                .chars()
                .rev()
                .take(4)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        ),
        [bus, dev] => format!("0000:{bus:0>2}:{dev:0>2}"),
        _ => t,
    }
}

/// Strips `/dev/kmsg` record headers ("6,1234,567,-;") and dmesg timestamps, returning the
/// timestamp text (if any) and the message.
pub fn split_prefix(line: &str) -> (Option<String>, &str) {
    let mut rest = line.trim_end();
    if let Some((head, msg)) = rest.split_once(';')
        && head.split(',').count() >= 3
        && head
            .split(',')
            .take(3)
            .all(|f| f.chars().all(|c| c.is_ascii_digit()))
    {
        rest = msg;
    }
    let rest = rest.trim_start();
    if let Some(stripped) = rest.strip_prefix('[')
        && let Some(end) = stripped.find(']')
    {
        return (
            Some(stripped[..end].trim().to_string()),
            stripped[end + 1..].trim_start(),
        );
    }
    (None, rest)
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)? + key.len();
    let rest = &text[start..];
    let end = rest.find(',').unwrap_or(rest.len());
    Some(rest[..end].trim().trim_matches('\''))
}

/// Parses one kernel log line; `None` if it is not an NVIDIA driver event we use.
pub fn parse_line(line: &str) -> Option<KernelEvent> {
    let (timestamp, msg) = split_prefix(line);
    let timestamp = timestamp.or_else(|| journal_stamp(line));
    if let Some(pos) = msg.find("SXid (") {
        let after = &msg[pos + 6..];
        let close = after.find(')')?;
        let pci = normalize_pci(&after[..close]);
        let rest = after[close + 1..].trim_start_matches(':').trim();
        let code: u32 = rest.split(',').next()?.trim().parse().ok()?;
        let fatal = if rest.contains("Non-fatal") {
            Some(false)
        } else if rest.contains("Fatal") {
            Some(true)
        } else {
            None
        };
        return Some(KernelEvent::SXid {
            pci,
            code,
            fatal,
            message: rest.to_string(),
        });
    }
    if let Some(pos) = msg.find("Xid (") {
        let after = &msg[pos + 5..];
        let close = after.find(')')?;
        let pci = normalize_pci(&after[..close]);
        let rest = after[close + 1..].trim_start_matches(':').trim();
        let code: u32 = rest.split(',').next()?.trim().parse().ok()?;
        let pid = field(rest, "pid=").and_then(|p| p.parse().ok());
        let process = field(rest, "name=")
            .filter(|n| *n != "<unknown>")
            .map(str::to_string);
        let caused_by = rest.find("caused by previous Xid").and_then(|i| {
            rest[i + 22..]
                .trim()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        });
        let message = rest
            .split_once(',')
            .map(|x| x.1)
            .unwrap_or("")
            .trim()
            .to_string();
        return Some(KernelEvent::Xid(XidEvent {
            pci,
            code,
            pid,
            process,
            caused_by,
            message,
            timestamp,
            line: line.trim().to_string(),
        }));
    }
    if let Some(pos) = msg.find("NVRM: GPU at ")
        && let Some((pci, uuid)) = msg[pos + 13..].rsplit_once(": ")
        && uuid.trim().starts_with("GPU-")
    {
        return Some(KernelEvent::GpuIdentity {
            pci: normalize_pci(pci),
            uuid: uuid.trim().to_string(),
        });
    }
    // "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.", "NVRM: GPU at 0000:01:00.0
    // has fallen off the bus." and the open driver's three-line "The NVIDIA GPU … installed
    // in this system has fallen off the bus" (joined by `KernelLog`).
    if msg.contains("fallen off the bus") && msg.contains("NVRM") {
        return Some(KernelEvent::FallenOffBus {
            pci: first_pci(msg).map(normalize_pci).unwrap_or_default(),
        });
    }
    if let Some(pos) = msg.find("PCIe Bus Error: severity=") {
        let rest = &msg[pos + 25..];
        // "Corrected" on most kernels, "Correctable" on some.
        let severity = if rest.starts_with("Correct") {
            AerSeverity::Corrected
        } else if rest.contains("Fatal)") && !rest.contains("Non-Fatal") {
            AerSeverity::Fatal
        } else {
            AerSeverity::NonFatal
        };
        let detail = field(rest, "type=").unwrap_or("").to_string();
        return Some(KernelEvent::PcieAer {
            pci: normalize_pci(first_pci(&msg[..pos])?),
            severity,
            detail,
        });
    }
    if let Some(pci) = gpu_aer_unrecoverable(msg) {
        return Some(KernelEvent::GpuAerUnrecoverable {
            pci,
            line: line.trim().to_string(),
        });
    }
    // The kernel's driver core failing to bind the nvidia driver to a device
    // (drivers/base/dd.c): "0000:06:00.0: probe with driver nvidia failed with error -1"
    // since Linux 5.x, "nvidia: probe of 0000:06:00.0 failed with error -1" before.
    if msg.contains("probe with driver nvidia failed")
        || (msg.contains("nvidia: probe of ") && msg.contains(" failed"))
    {
        return Some(KernelEvent::GpuInitFailed {
            pci: first_pci(msg).map(normalize_pci).unwrap_or_default(),
            line: line.trim().to_string(),
        });
    }
    if msg.contains("mlx5_core") && MLX5_CMD_STUCK.iter().any(|w| msg.contains(w)) {
        return Some(KernelEvent::NicFirmwareStuck {
            pci: first_pci(msg).map(normalize_pci).unwrap_or_default(),
            line: line.trim().to_string(),
        });
    }
    if !msg.contains("NVRM") {
        return None;
    }
    let has = |words: &[&str]| words.iter().any(|w| msg.contains(w));
    if has(NO_GPUS) {
        return Some(KernelEvent::NoGpus {
            line: line.trim().to_string(),
        });
    }
    if has(INIT_FAILED) {
        return Some(KernelEvent::GpuInitFailed {
            pci: first_pci(msg).map(normalize_pci).unwrap_or_default(),
            line: line.trim().to_string(),
        });
    }
    if has(BENIGN) {
        return None;
    }
    if has(API_MISMATCH) {
        return Some(KernelEvent::DriverMismatch {
            line: line.trim().to_string(),
        });
    }
    if let Some(s) = crate::nv_status::state_in(msg) {
        return Some(KernelEvent::DeviceStatus {
            pci: first_pci(msg).map(normalize_pci).unwrap_or_default(),
            status: s.name.clone(),
            state: s.state,
            line: line.trim().to_string(),
        });
    }
    let lower = msg.to_ascii_lowercase();
    if lower.contains("nvlink") && (lower.contains("fail") || lower.contains("fatal")) {
        return Some(KernelEvent::NvlinkFailure {
            device: device_of(msg),
            line: line.trim().to_string(),
        });
    }
    Some(KernelEvent::Unrecognised {
        device: device_of(msg),
        line: line.trim().to_string(),
    })
}

/// NVRM's message family for driver components of different versions (`kernel-open/
/// nvidia/nv.c` of NVIDIA's open kernel modules: "API mismatch: the client has the
/// version %s, but this kernel module has the version %s", and since 5xx "the client
/// '%s' (pid %u) has the version"), and the status a client gets for it
/// (`NV_ERR_LIB_RM_VERSION_MISMATCH`, read from `crate::nv_status`).
const API_MISMATCH: &[&str] = &["API mismatch"];

/// The mlx5 driver's words for a firmware command that never completed
/// (`drivers/net/ethernet/mellanox/mlx5/core/cmd.c` in Linux: `wait_func` "%s(0x%x)
/// timeout. Will cause a leak of a command resource", `wait_func_handle_exec_timeout`
/// "cmd[%d]: %s(0x%x) No done completion", and the "cmd exec timeout" / "command
/// timeout" of its polling mode).
const MLX5_CMD_STUCK: &[&str] = &[
    "Will cause a leak of a command resource",
    "No done completion",
    "cmd exec timeout",
    "command timeout",
];

/// The driver's words for finding no GPU it can use, old and new.
const NO_GPUS: &[&str] = &[
    "No NVIDIA graphics adapter found",
    "No NVIDIA graphics adapter probed",
    "No NVIDIA GPU found",
    "NVIDIA init module failed",
    "probe routine was not called for",
];

/// The driver's words for a GPU it could not bring up, old and new drivers.
const INIT_FAILED: &[&str] = &[
    "RmInitAdapter failed",
    "rm_init_adapter failed",
    "Cannot initialize GSP firmware",
    "osInitNvMapping failed",
    "Cannot attach gpu",
    "failed to copy vbios",
    "probe routine failed",
    "cannot proceed with booting GSP",
    "GPU is lost",
];

/// NVRM lines that carry no news: the module loading, board details, the crash-dump
/// notice and the driver's own explanations printed under another message.
const BENIGN: &[&str] = &[
    "loading NVIDIA UNIX",
    "NVRM version",
    "GPU Board Serial Number",
    "GPU is on Board",
    "A GPU crash dump has been created",
    "nvidia-bug-report.sh",
    "kernel module is unloaded",
    "This can occur when a driver such as",
    "nouveau, rivafb",
    "was loaded and obtained ownership",
    "Try unloading the conflicting",
    "reconfigure your kernel",
    "then try loading the NVIDIA kernel module",
    "NVRM: again.",
    // The driver's own calls failing on a GPU it has just reported off the bus.
    "[NV_ERR_GPU_IS_LOST]",
];

/// "nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)".
fn gpu_aer_unrecoverable(msg: &str) -> Option<String> {
    if !msg.contains("AER:") || !msg.contains("can't recover") {
        return None;
    }
    let words: Vec<&str> = msg.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "nvidia")?;
    let pci = first_pci(words.get(at + 1)?)?;
    Some(normalize_pci(pci))
}

/// What an NVRM message is about: its PCI address, else a `GPUn` name, else nothing.
fn device_of(msg: &str) -> String {
    if let Some(pci) = first_pci(msg) {
        return normalize_pci(pci);
    }
    msg.split_whitespace()
        .find(|w| w.len() > 3 && w.starts_with("GPU") && w[3..].chars().all(|c| c.is_ascii_digit()))
        .unwrap_or("")
        .to_string()
}

/// The first PCI address in a message (`0000:b3:00.0`, `00000000:B3:00.0`, `PCI:0000:b3:00`).
pub fn first_pci(msg: &str) -> Option<&str> {
    msg.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | '[' | ']'))
        .map(|t| t.trim_start_matches("PCI:").trim_end_matches([':', '.']))
        .find(|t| {
            let parts: Vec<&str> = t.split(':').collect();
            parts.len() == 3
                && (4..=8).contains(&parts[0].len())
                && parts[1].len() == 2
                && parts[2].len() >= 2
                && parts[..2]
                    .iter()
                    .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
                && parts[2].chars().all(|c| c.is_ascii_hexdigit() || c == '.')
        })
}

/// Joins a kernel message printed over several lines (dmesg indents the continuation
/// lines; `/dev/kmsg` escapes the newlines as `\x0a`) and parses each record once, as
/// soon as enough of it has arrived to say what it is.
#[derive(Debug, Default)]
pub struct KernelLog {
    record: String,
    parsed: bool,
}

/// A record is cut here: continuation lines of one message are short.
const MAX_RECORD: usize = 4096;

impl KernelLog {
    pub fn new() -> KernelLog {
        KernelLog::default()
    }

    /// Feeds one line; returns the events it completes: the event its record makes, the
    /// first time it makes one, and, when it starts a new record, the previous record if
    /// that one was an NVRM message nothing explains.
    pub fn push(&mut self, line: &str) -> Vec<KernelEvent> {
        let line = line.trim_end().replace("\\x0a", " ");
        // A line that is an event by itself starts a record, however it is indented (the
        // open driver's last "fallen off the bus" line names no GPU: it is not one).
        let alone = parse_line(&line).filter(|e| {
            !matches!(e, KernelEvent::FallenOffBus { pci } if pci.is_empty())
                && !matches!(e, KernelEvent::Unrecognised { .. })
        });
        if alone.is_none() && is_continuation(&line) && !self.record.is_empty() {
            if self.record.len() + line.len() < MAX_RECORD {
                self.record.push(' ');
                self.record.push_str(line.trim());
            }
            if self.parsed {
                return Vec::new();
            }
            return match parse_line(&self.record) {
                None | Some(KernelEvent::Unrecognised { .. }) => Vec::new(),
                Some(ev) => {
                    self.parsed = true;
                    vec![ev]
                }
            };
        }
        let mut out: Vec<KernelEvent> = self.finish().into_iter().collect();
        self.record = line;
        self.parsed = alone.is_some();
        out.extend(alone);
        out
    }

    /// Ends the record being read: an NVRM message nothing explained, if it was one.
    pub fn finish(&mut self) -> Option<KernelEvent> {
        let record = std::mem::take(&mut self.record);
        if self.parsed || record.is_empty() {
            return None;
        }
        parse_line(&record).filter(|e| matches!(e, KernelEvent::Unrecognised { .. }))
    }
}

/// Whether a line continues the message before it: indented with no timestamp of its
/// own, or (journal and syslog copies, where every line has a prefix) one of the open
/// driver's continuation lines.
fn is_continuation(line: &str) -> bool {
    let (stamp, msg) = split_prefix(line);
    (stamp.is_none() && line.starts_with([' ', '\t']) && !msg.is_empty())
        || msg.starts_with("NVRM: (PCI ID")
        || msg.starts_with("NVRM: fallen off the bus")
        || line.contains("kernel: NVRM: (PCI ID")
        || line.contains("kernel: NVRM: fallen off the bus")
}

/// Parses a whole log and merges the reports of one fault: the lines of one multi-line
/// report, and a burst of the same Xid on the same GPU within [`BURST_S`] (one event,
/// the first line, as one incident).
pub fn parse_log(text: &str) -> Vec<KernelEvent> {
    let mut out: Vec<KernelEvent> = Vec::new();
    let mut log = KernelLog::new();
    let mut events: Vec<(KernelEvent, bool)> = Vec::new();
    for line in text.lines() {
        let labelled = line.contains("Non-fatal") || line.contains("Fatal");
        events.extend(log.push(line).into_iter().map(|e| (e, labelled)));
    }
    events.extend(log.finish().map(|e| (e, false)));
    for (ev, labelled) in events {
        let duplicate = match &ev {
            KernelEvent::Xid(a) => out.iter().rev().any(|e| match e {
                KernelEvent::Xid(b) => a.pci == b.pci && a.code == b.code && same_burst(a, b),
                _ => false,
            }),
            KernelEvent::SXid {
                pci: a, code: ca, ..
            } => {
                !labelled
                    && matches!(out.last(), Some(KernelEvent::SXid { pci: b, code: cb, .. }) if a == b && ca == cb)
            }
            _ => false,
        };
        if !duplicate {
            out.push(ev);
        }
    }
    out
}

/// Xids of one burst are at most this far apart.
pub const BURST_S: f64 = 2.0;

/// Whether two Xids' timestamps are within one burst: monotonic seconds close enough,
/// the same wall-clock text, or no timestamps at all (then only their order is known).
fn same_burst(a: &XidEvent, b: &XidEvent) -> bool {
    let secs = |t: &Option<String>| t.as_deref().and_then(|t| t.trim().parse::<f64>().ok());
    match (secs(&a.timestamp), secs(&b.timestamp)) {
        (Some(x), Some(y)) => (x - y).abs() <= BURST_S,
        (None, None) if a.timestamp.is_none() && b.timestamp.is_none() => false,
        _ => a.timestamp == b.timestamp,
    }
}

/// The timestamp of a line whose own prefix is a journal's or syslog's: the dmesg stamp
/// after `kernel: `, else the wall-clock prefix (`Feb 15 17:37:45`, RFC 3339).
fn journal_stamp(line: &str) -> Option<String> {
    if let Some(pos) = line.find("kernel: [") {
        let rest = &line[pos + 9..];
        return rest.find(']').map(|end| rest[..end].trim().to_string());
    }
    let pos = line.find(" kernel:")?;
    let head = &line[..pos];
    let first = head.split_whitespace().next()?;
    if first.contains('T') && first.contains(':') {
        return Some(first.to_string());
    }
    let words: Vec<&str> = head.split_whitespace().collect();
    (words.len() >= 3 && words[2].matches(':').count() == 2).then(|| words[..3].join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_forms_normalise() {
        assert_eq!(normalize_pci("PCI:0000:A1:00"), "0000:a1:00");
        assert_eq!(normalize_pci("00000000:A1:00.0"), "0000:a1:00");
        assert_eq!(normalize_pci("0000:10:1c"), "0000:10:1c");
        assert_eq!(normalize_pci("GPU0000:07:00.0"), "0000:07:00");
    }

    #[test]
    fn kmsg_records() {
        let ev = parse_line("4,2345,987654321,-;NVRM: Xid (PCI:0000:05:00): 79, pid=1173, GPU has fallen off the bus.").unwrap();
        match ev {
            KernelEvent::Xid(x) => {
                assert_eq!(
                    (x.pci.as_str(), x.code, x.pid),
                    ("0000:05:00", 79, Some(1173))
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_line("random text").is_none());
        assert!(parse_line("NVRM: Xid (PCI:0000:05:00): notanumber").is_none());
    }

    #[test]
    fn the_driver_core_failing_to_bind_nvidia_names_the_device_in_both_forms() {
        for line in [
            "[   28.109040] nvidia: probe of 0000:06:00.0 failed with error -1",
            "[    3.2] nvidia 0000:06:00.0: probe with driver nvidia failed with error -1",
        ] {
            match parse_line(line) {
                Some(KernelEvent::GpuInitFailed { pci, .. }) => assert_eq!(pci, "0000:06:00"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert!(parse_line("e1000e: probe of 0000:00:1f.6 failed with error -5").is_none());
    }
}
