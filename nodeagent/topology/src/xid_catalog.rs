//! NVIDIA's Xid and NVSwitch SXid catalogues as data (`catalog/xid.csv`: every Xid with
//! its mnemonic, the catalogue's immediate action and whether NVIDIA calls it fatal;
//! `catalog/sxid.csv`: every SXid with its action and severity; each file names its
//! source and version), and what each action means for a node and its jobs.

use crate::xid::XidAction;
use gsched_types::node::HealthSeverity;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The catalogue's "immediate action" column (its resolution bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    RestartApp,
    Ignore,
    ResetGpu,
    /// Reboot the bare-metal host (`RESTART_BM`).
    RestartHost,
    RestartVm,
    /// `UNEXPECTED_ERR_REPORT_ISSUE`: not expected in the field; report it.
    ReportIssue,
    /// `WORKFLOW_XID_48`: a double-bit ECC error; reset, then follow the memory workflow.
    EccWorkflow,
    /// `WORKFLOW_XID_45`: classified by the Xid that caused it.
    ByCause,
    /// `WORKFLOW_NVLINK_ERR`, `WORKFLOW_NVLINK5_ERR`.
    NvlinkWorkflow,
    CheckMechanicals,
    UpdateSoftware,
    CheckUvm,
    /// Xid 154: "follow guidance as it applies to another Xid": read from its message.
    FollowMessage,
}

impl Bucket {
    fn parse(text: &str) -> Option<Bucket> {
        Some(match text.trim() {
            "RESTART_APP" => Bucket::RestartApp,
            "IGNORE" => Bucket::Ignore,
            "RESET_GPU" => Bucket::ResetGpu,
            "RESTART_BM" => Bucket::RestartHost,
            "RESTART_VM" => Bucket::RestartVm,
            "UNEXPECTED_ERR_REPORT_ISSUE" => Bucket::ReportIssue,
            "WORKFLOW_XID_48" => Bucket::EccWorkflow,
            "WORKFLOW_XID_45" => Bucket::ByCause,
            "WORKFLOW_NVLINK_ERR" | "WORKFLOW_NVLINK5_ERR" => Bucket::NvlinkWorkflow,
            "CHECK_MECHANICALS" => Bucket::CheckMechanicals,
            "UPDATE_SWFW" => Bucket::UpdateSoftware,
            "CHECK_UVM" => Bucket::CheckUvm,
            t if t.starts_with("Follow guidance") => Bucket::FollowMessage,
            _ => return None,
        })
    }
}

/// One row of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidEntry {
    pub code: u32,
    /// NVIDIA's name for it (`GSP_RPC_TIMEOUT`); empty where the catalogue has none.
    pub mnemonic: String,
    pub bucket: Bucket,
    pub fatal: bool,
}

const CSV: &str = include_str!("../catalog/xid.csv");

/// Every Xid the catalogue lists, by code.
pub fn catalogue() -> &'static BTreeMap<u32, XidEntry> {
    static TABLE: OnceLock<BTreeMap<u32, XidEntry>> = OnceLock::new();
    TABLE.get_or_init(|| parse(CSV))
}

/// A catalogue file's rows as their cells: not its `#` header, not blank lines.
fn rows(csv: &str) -> impl Iterator<Item = Vec<&str>> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(',').collect())
}

fn parse(csv: &str) -> BTreeMap<u32, XidEntry> {
    rows(csv)
        .filter_map(|cells| {
            let [code, mnemonic, bucket, fatal] = cells.as_slice() else {
                return None;
            };
            let code: u32 = code.trim().parse().ok()?;
            Some((
                code,
                XidEntry {
                    code,
                    mnemonic: mnemonic.trim().to_string(),
                    bucket: Bucket::parse(bucket)?,
                    fatal: fatal.trim() == "FATAL",
                },
            ))
        })
        .collect()
}

/// What the catalogue's action means here: what to do, and how bad it is for the job on
/// the GPU (critical: the job cannot go on and the GPU needs attention; warning: the
/// application hit it or it needs a look; info: nothing to do).
pub fn meaning(entry: &XidEntry) -> (XidAction, HealthSeverity) {
    use HealthSeverity::*;
    let severity = match outcome(entry) {
        Outcome {
            job: JobOutcome::Fails,
            ..
        } => Critical,
        Outcome {
            job: JobOutcome::Warned,
            ..
        } => Warning,
        Outcome {
            job: JobOutcome::Unaffected,
            ..
        } => Info,
    };
    let action = match entry.bucket {
        Bucket::RestartApp | Bucket::ByCause => XidAction::RestartApp,
        Bucket::Ignore => XidAction::Ignore,
        Bucket::RestartHost | Bucket::RestartVm => XidAction::RebootNode,
        Bucket::ResetGpu
        | Bucket::EccWorkflow
        | Bucket::NvlinkWorkflow
        | Bucket::ReportIssue
        | Bucket::CheckMechanicals
        | Bucket::UpdateSoftware
        | Bucket::CheckUvm
        | Bucket::FollowMessage => XidAction::ResetGpu,
    };
    (action, severity)
}

/// What an Xid means on the two axes a scheduler acts on: the job running on the GPU,
/// and the GPU itself (whether it may take a new job). NVIDIA's catalogue gives one
/// "immediate action" per Xid; an action that resets the GPU or reboots the host both ends
/// the job on it and keeps the GPU from new work until it is done, so the two are told
/// apart here rather than folded into one severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub job: JobOutcome,
    pub gpu: GpuOutcome,
}

/// What happens to the job on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobOutcome {
    /// Nothing to do (informational).
    Unaffected,
    /// The application hit it, or it needs a look: a warning; the job decides.
    Warned,
    /// The job cannot go on on this GPU.
    Fails,
}

/// What happens to the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuOutcome {
    /// It takes new jobs.
    Keeps,
    /// It is withheld from new jobs (and its node drained) until it is reset or the host
    /// rebooted, as the action says.
    Withheld,
}

/// Every catalogue action's outcome: a reset or reboot action (`RESET_GPU`, `RESTART_BM`,
/// `RESTART_VM`, the ECC and NVLink workflows, which begin with a reset, and an
/// unexpected error NVIDIA calls fatal) fails the job and withholds the GPU; restarting
/// the application, a cause-dependent Xid 45 and the look-at-it actions (mechanicals,
/// software update, UVM, a non-fatal unexpected error, Xid 154 without its message) warn;
/// `IGNORE` is information.
pub fn outcome(entry: &XidEntry) -> Outcome {
    let (job, gpu) = match entry.bucket {
        Bucket::ResetGpu
        | Bucket::EccWorkflow
        | Bucket::NvlinkWorkflow
        | Bucket::RestartHost
        | Bucket::RestartVm => (JobOutcome::Fails, GpuOutcome::Withheld),
        Bucket::ReportIssue if entry.fatal => (JobOutcome::Fails, GpuOutcome::Withheld),
        Bucket::RestartApp
        | Bucket::ByCause
        | Bucket::ReportIssue
        | Bucket::CheckMechanicals
        | Bucket::UpdateSoftware
        | Bucket::CheckUvm
        | Bucket::FollowMessage => (JobOutcome::Warned, GpuOutcome::Keeps),
        Bucket::Ignore => (JobOutcome::Unaffected, GpuOutcome::Keeps),
    };
    Outcome { job, gpu }
}

/// The outcome of a health severity (the one axis a `HealthEvent` carries): a critical
/// event fails the job on its GPU and withholds the GPU, as the controller applies it.
pub fn outcome_of_severity(severity: HealthSeverity) -> Outcome {
    match severity {
        HealthSeverity::Critical => Outcome {
            job: JobOutcome::Fails,
            gpu: GpuOutcome::Withheld,
        },
        HealthSeverity::Warning => Outcome {
            job: JobOutcome::Warned,
            gpu: GpuOutcome::Keeps,
        },
        HealthSeverity::Info => Outcome {
            job: JobOutcome::Unaffected,
            gpu: GpuOutcome::Keeps,
        },
    }
}

/// One row of the SXid catalogue: NVIDIA's immediate action (`RESET_FABRIC`,
/// `INVESTIGATE_LINK_SI`...) and whether it is fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SxidEntry {
    pub code: u32,
    pub action: String,
    pub fatal: bool,
}

const SXID_CSV: &str = include_str!("../catalog/sxid.csv");

/// Every NVSwitch SXid the catalogue lists, by code.
pub fn sxid_catalogue() -> &'static BTreeMap<u32, SxidEntry> {
    static TABLE: OnceLock<BTreeMap<u32, SxidEntry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(SXID_CSV)
            .filter_map(|cells| {
                let [code, action, fatal] = cells.as_slice() else {
                    return None;
                };
                let code: u32 = code.trim().parse().ok()?;
                let action = action.trim().to_string();
                let fatal = fatal.trim() == "FATAL";
                Some((
                    code,
                    SxidEntry {
                        code,
                        action,
                        fatal,
                    },
                ))
            })
            .collect()
    })
}

/// What to do about an SXid, in the catalogue's action's words.
pub fn sxid_advice(action: &str) -> &'static str {
    match action {
        "RESET_FABRIC" => {
            "reset the NVSwitch fabric: stop the jobs, restart nvidia-fabricmanager (or reboot the node)"
        }
        "RESET_GPU" => {
            "reset the GPUs on this NVSwitch (nvidia-smi -r) before they run another job"
        }
        "INVESTIGATE_LINK_SI" | "CHECK_LINK_MECHANICAL_CONNECTIONS" => {
            "an NVLink's signal is bad: reseat the baseboard connectors and cables; run field diagnostics if it recurs"
        }
        "RUN_FIELDDIAG" => "run NVIDIA's field diagnostics on this baseboard before trusting it",
        "CHECK_THERMALS" => "the NVSwitch or its transceiver is too hot: check the chassis cooling",
        "CHECK_FM_CONFIG" => {
            "the fabric manager's configuration does not match the fabric: check its config and partitions"
        }
        "IGNORE" => "informational: nothing to do unless it repeats",
        _ => {
            "an NVSwitch fabric error NVIDIA asks to be reported: keep the fabric manager log and an nvidia-bug-report"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_catalogue_is_read() {
        let rows = rows(CSV).count();
        assert_eq!(catalogue().len(), rows, "a row did not parse");
        assert_eq!(rows, 162);
        let gsp = &catalogue()[&119];
        assert_eq!(
            (gsp.mnemonic.as_str(), gsp.bucket, gsp.fatal),
            ("GSP_RPC_TIMEOUT", Bucket::ResetGpu, true)
        );
        assert_eq!(catalogue()[&154].bucket, Bucket::FollowMessage);
    }

    /// Every row of the catalogue has a defined outcome on both axes, and the two axes
    /// agree with the action: a reset or reboot fails the job and withholds the GPU; no
    /// other action withholds it; the one-axis severity is the job's.
    #[test]
    fn every_row_of_the_catalogue_has_an_outcome_for_the_job_and_the_gpu() {
        let mut withheld = 0;
        for entry in catalogue().values() {
            let o = outcome(entry);
            let resets = matches!(
                entry.bucket,
                Bucket::ResetGpu
                    | Bucket::EccWorkflow
                    | Bucket::NvlinkWorkflow
                    | Bucket::RestartHost
                    | Bucket::RestartVm
            ) || (entry.bucket == Bucket::ReportIssue && entry.fatal);
            assert_eq!(
                o.gpu == GpuOutcome::Withheld,
                resets,
                "Xid {} ({:?})",
                entry.code,
                entry.bucket
            );
            assert_eq!(
                o.job == JobOutcome::Fails,
                o.gpu == GpuOutcome::Withheld,
                "Xid {}: a withheld GPU's job fails, and only then",
                entry.code
            );
            let (_, severity) = meaning(entry);
            assert_eq!(outcome_of_severity(severity), o, "Xid {}", entry.code);
            withheld += usize::from(resets);
        }
        // 15 RESET_GPU, 2 RESTART_BM, 1 RESTART_VM, the two workflows' 9 rows and the
        // fatal unexpected errors.
        assert!(withheld > 27, "{withheld}");
        for code in [62, 79, 109, 119, 120] {
            assert_eq!(
                outcome(&catalogue()[&code]),
                Outcome {
                    job: JobOutcome::Fails,
                    gpu: GpuOutcome::Withheld
                },
                "Xid {code}"
            );
        }
    }

    #[test]
    fn every_row_of_the_sxid_catalogue_is_read() {
        let rows = rows(SXID_CSV).count();
        assert_eq!(sxid_catalogue().len(), rows);
        assert_eq!(rows, 398);
        assert!(sxid_catalogue()[&12028].fatal);
        assert!(!sxid_catalogue()[&22013].fatal);
        assert_eq!(sxid_catalogue()[&19084].action, "RESET_FABRIC");
    }

    #[test]
    fn actions_map_to_what_a_node_does() {
        let m = |c: u32| meaning(&catalogue()[&c]);
        assert_eq!(m(13), (XidAction::RestartApp, HealthSeverity::Warning));
        assert_eq!(m(44), (XidAction::Ignore, HealthSeverity::Info));
        assert_eq!(m(79), (XidAction::RebootNode, HealthSeverity::Critical));
        assert_eq!(m(48), (XidAction::ResetGpu, HealthSeverity::Critical));
        assert_eq!(m(61), (XidAction::ResetGpu, HealthSeverity::Critical));
    }
}
