//! Findings: what a look at a node's outputs concluded, in one shape for `gagentd
//! diagnose` (and, in `--json`, `{"findings":[...]}`): how bad, which part of the
//! machine, which GPU when one applies, what was seen and what to do.

use serde::{Deserialize, Serialize};

/// How bad a finding is, in what it calls for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Info,
    Warn,
    /// The node should take no new job until someone looks.
    Drain,
    /// A job running on what it names cannot go on.
    FailJob,
}

/// The part of the machine a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    Gpu,
    Pcie,
    Nvlink,
    Nic,
    Ib,
    Nccl,
    Driver,
    Nvswitch,
    /// The host itself: its clock, its disks.
    Host,
    /// The file itself (not readable, not recognised).
    Input,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// The node it is about (`gctl doctor`); absent for a file read on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub severity: Severity,
    pub component: Component,
    /// The GPU's index on the node, when the source names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// `0000:3b:00` form, when the source names a PCI device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// A short name for what was found (`xid-79`, `gpu-lost`, `ib-port-down`...).
    pub kind: String,
    /// The line or value it was found in.
    pub evidence: String,
    /// What to do about it.
    pub action: String,
}

/// Evidence is cut to this many characters: a line or two, not a log.
pub const MAX_EVIDENCE_CHARS: usize = 400;

/// `text` trimmed and cut to `max` characters.
pub fn clip(text: &str, max: usize) -> String {
    text.trim().chars().take(max).collect()
}

impl Finding {
    /// A finding about no particular node or device, its evidence clipped.
    pub fn new(
        severity: Severity,
        component: Component,
        kind: impl Into<String>,
        evidence: &str,
        action: impl Into<String>,
    ) -> Finding {
        Finding {
            node: None,
            severity,
            component,
            gpu: None,
            pci_bus_id: None,
            kind: kind.into(),
            evidence: clip(evidence, MAX_EVIDENCE_CHARS),
            action: action.into(),
        }
    }

    /// A finding about `node`, its evidence and action to be filled in.
    pub fn on_node(node: &str, severity: Severity, component: Component, kind: &str) -> Finding {
        Finding {
            node: Some(node.to_string()),
            severity,
            component,
            gpu: None,
            pci_bus_id: None,
            kind: kind.to_string(),
            evidence: String::new(),
            action: String::new(),
        }
    }
}

/// `gagentd diagnose --json`'s document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Findings {
    pub findings: Vec<Finding>,
    /// Each file read: which tool family it is and what came of it (`gagentd diagnose`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRead>,
}

/// One file `gagentd diagnose` read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileRead {
    pub file: String,
    /// The tool family told from its text (`kernel-log`, `job-log`, `smi-query`...,
    /// `unknown`), or `unreadable`.
    pub family: String,
    /// Findings from it, the `unrecognised-lines` one included.
    pub findings: usize,
    /// Lines that read like errors and that no rule read.
    pub unread_lines: usize,
}
