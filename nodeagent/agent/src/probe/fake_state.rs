//! The device state of a `--fake-topology` node, from a JSON file re-read on every probe
//! (`--fake-gpu-state`), so tests change a GPU's state while the agent runs. The file maps
//! the agent's GPU index to what is wrong with it; a GPU it does not name is healthy:
//!
//! ```json
//! {"1": {"lost": true},
//!  "2": {"reset_required": true, "remap_pending": true, "remap_failed": false,
//!        "retired_pages_pending": true, "ecc_uncorrected": 3,
//!        "clock_reasons": ["hw_slowdown"], "nvlink_down": [0, 3],
//!        "pcie": {"gen": 3, "width": 8}, "persistence": false, "xids": [79],
//!        "active": "pass" | "hang" | {"fail": "CUDA_ERROR_ECC_UNCORRECTABLE"} | {"slow": 3000}}}
//! ```

use super::DeviceStateReader;
use super::state::{
    ActiveResult, ActiveStep, ClockReasons, GpuState, NvLinkState, PcieState, Reach, RegisteredGpu,
    RemappedRows,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One GPU's entry in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeGpuState {
    #[serde(default)]
    pub lost: bool,
    #[serde(default)]
    pub reset_required: bool,
    /// NVML gives no handle, with this error.
    #[serde(default)]
    pub no_handle: Option<String>,
    #[serde(default)]
    pub remap_pending: bool,
    #[serde(default)]
    pub remap_failed: bool,
    #[serde(default)]
    pub retired_pages_pending: bool,
    #[serde(default)]
    pub ecc_uncorrected: u64,
    #[serde(default)]
    pub clock_reasons: Vec<String>,
    #[serde(default)]
    pub nvlink_down: Vec<u32>,
    #[serde(default)]
    pub pcie: Option<FakePcie>,
    #[serde(default)]
    pub persistence: Option<bool>,
    #[serde(default)]
    pub xids: Vec<u32>,
    #[serde(default)]
    pub active: FakeActive,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakePcie {
    #[serde(rename = "gen")]
    pub generation: Option<u32>,
    pub width: Option<u32>,
}

/// What the fake active check does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FakeActive {
    #[default]
    Pass,
    /// Never finishes: the check's time limit ends it.
    Hang,
    Fail(String),
    /// Passes after this many milliseconds (a probe that takes its time).
    Slow(u64),
}

/// Why the fake state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FakeStateError {
    #[error("cannot read the fake GPU state {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the fake GPU state {path} is not a map of GPU index to state ({source}); see `gagentd --help` for --fake-gpu-state"
    )]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("the fake GPU state {path} names clock reason {name:?}; known: {known}")]
    ClockReason {
        path: String,
        name: String,
        known: String,
    },
}

/// The file's entries by GPU index; a missing file is a node with nothing wrong.
pub fn load(path: &Path) -> Result<BTreeMap<u32, FakeGpuState>, FakeStateError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(FakeStateError::Read {
                path: path.display().to_string(),
                source,
            });
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(BTreeMap::new());
    }
    serde_json::from_slice(&bytes).map_err(|source| FakeStateError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// The state a fake GPU's entry describes, against what the node registered.
pub fn state_of(
    registered: &RegisteredGpu,
    fake: &FakeGpuState,
    path: &Path,
) -> Result<GpuState, FakeStateError> {
    let reach = if fake.lost {
        Reach::Lost
    } else if fake.reset_required {
        Reach::ResetRequired
    } else if let Some(error) = &fake.no_handle {
        Reach::NoHandle {
            error: error.clone(),
        }
    } else {
        Reach::Ok
    };
    let clock_reasons = ClockReasons::from_names(fake.clock_reasons.iter().map(String::as_str))
        .map_err(|name| FakeStateError::ClockReason {
            path: path.display().to_string(),
            name,
            known: ClockReasons::NAMES.map(|(n, _)| n).join(", "),
        })?;
    let links = registered
        .nvlinks
        .unwrap_or(0)
        .max(fake.nvlink_down.iter().map(|l| l + 1).max().unwrap_or(0));
    let nvlinks = (links > 0).then(|| {
        (0..links)
            .map(|link| NvLinkState {
                link,
                active: !fake.nvlink_down.contains(&link),
                crc_errors: Some(0),
                replay_errors: Some(0),
                recovery_errors: Some(0),
            })
            .collect()
    });
    Ok(GpuState {
        gpu: registered.gpu,
        reach,
        retired_pages_pending: Some(fake.retired_pages_pending),
        remapped_rows: Some(RemappedRows {
            correctable: 0,
            uncorrectable: u32::from(fake.remap_pending || fake.remap_failed),
            pending: fake.remap_pending,
            failure: fake.remap_failed,
        }),
        ecc_uncorrected_volatile: Some(fake.ecc_uncorrected),
        clock_reasons: Some(clock_reasons),
        nvlinks,
        pcie: Some(PcieState {
            generation: fake
                .pcie
                .and_then(|p| p.generation)
                .or(registered.pcie_gen_max),
            generation_max: registered.pcie_gen_max,
            width: fake
                .pcie
                .and_then(|p| p.width)
                .or(registered.pcie_width_max),
            width_max: registered.pcie_width_max,
        }),
        persistence_mode: Some(fake.persistence.unwrap_or(true)),
        xids: fake.xids.clone(),
    })
}

/// What a fake GPU's active check does, for `gagentd active-check --fake-state`: a
/// result, or `None` to hang.
pub fn active_of(fake: &FakeGpuState) -> Option<ActiveResult> {
    match &fake.active {
        FakeActive::Pass => Some(ActiveResult::Passed {
            ms: 1,
            kernel_skipped: None,
        }),
        FakeActive::Slow(ms) => Some(ActiveResult::Passed {
            ms: *ms,
            kernel_skipped: None,
        }),
        FakeActive::Hang => None,
        FakeActive::Fail(error) => Some(ActiveResult::Failed {
            step: ActiveStep::Synchronize,
            error: error.clone(),
            ms: 1,
        }),
    }
}

/// Reads the fake state file on every probe.
pub struct FakeStateReader {
    pub path: PathBuf,
}

impl DeviceStateReader for FakeStateReader {
    fn read(&mut self, gpus: &[RegisteredGpu]) -> Vec<GpuState> {
        let entries = match load(&self.path) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("{e}: every GPU reads as healthy");
                BTreeMap::new()
            }
        };
        gpus.iter()
            .map(|g| {
                let fake = entries.get(&g.gpu).cloned().unwrap_or_default();
                state_of(g, &fake, &self.path).unwrap_or_else(|e| {
                    tracing::warn!("{e}");
                    GpuState::reachable(g.gpu)
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::judge::{Verdict, judge};

    fn registered(gpu: u32) -> RegisteredGpu {
        RegisteredGpu {
            gpu,
            pci_bus_id: Some("00000000:21:00.0".into()),
            uuid: None,
            pcie_gen_max: Some(4),
            pcie_width_max: Some(16),
            nvlinks: Some(4),
        }
    }

    #[test]
    fn the_file_is_read_again_on_every_probe_and_a_gpu_it_does_not_name_is_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut reader = FakeStateReader { path: path.clone() };
        let gpus = [registered(0), registered(1)];
        // No file yet: nothing wrong.
        let states = reader.read(&gpus);
        assert!(states.iter().all(|s| {
            matches!(judge(&gpus[s.gpu as usize], None, s, None), Verdict::Healthy { ref notes } if notes.is_empty())
        }), "{states:?}");
        std::fs::write(&path, r#"{"1": {"reset_required": true}}"#).unwrap();
        let states = reader.read(&gpus);
        assert_eq!(states[0].reach, Reach::Ok);
        assert_eq!(states[1].reach, Reach::ResetRequired);
        std::fs::write(&path, r#"{"1": {}}"#).unwrap();
        assert_eq!(
            reader.read(&gpus)[1].reach,
            Reach::Ok,
            "changed while running"
        );
    }

    #[test]
    fn every_field_reads_into_the_state_the_judge_sees() {
        let fake: FakeGpuState = serde_json::from_str(
            r#"{"remap_pending": true, "remap_failed": true, "retired_pages_pending": true,
                "ecc_uncorrected": 3, "clock_reasons": ["hw_slowdown", "sync_boost"],
                "nvlink_down": [1], "pcie": {"gen": 3, "width": 8}, "persistence": false,
                "xids": [48], "active": {"fail": "CUDA_ERROR_ECC_UNCORRECTABLE"}}"#,
        )
        .unwrap();
        let s = state_of(&registered(2), &fake, Path::new("f")).unwrap();
        let rows = s.remapped_rows.unwrap();
        assert!(rows.pending && rows.failure);
        assert_eq!(s.retired_pages_pending, Some(true));
        assert_eq!(s.ecc_uncorrected_volatile, Some(3));
        assert_eq!(
            s.clock_reasons.unwrap().names(),
            ["hw_slowdown", "sync_boost"]
        );
        let links = s.nvlinks.as_ref().unwrap();
        assert_eq!(links.len(), 4);
        assert_eq!(
            links
                .iter()
                .filter(|l| !l.active)
                .map(|l| l.link)
                .collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(s.pcie.unwrap().width, Some(8));
        assert_eq!(s.persistence_mode, Some(false));
        assert_eq!(s.xids, [48]);
        assert!(matches!(
            active_of(&fake),
            Some(ActiveResult::Failed { ref error, .. }) if error == "CUDA_ERROR_ECC_UNCORRECTABLE"
        ));
        let hang: FakeGpuState = serde_json::from_str(r#"{"active": "hang"}"#).unwrap();
        assert_eq!(active_of(&hang), None);
    }

    #[test]
    fn a_file_that_cannot_be_read_says_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, r#"{"1": {"lsot": true}}"#).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("lsot") && e.contains("--fake-gpu-state"), "{e}");
        let fake: FakeGpuState = serde_json::from_str(r#"{"clock_reasons": ["slow"]}"#).unwrap();
        let e = state_of(&registered(0), &fake, &path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"slow\"") && e.contains("hw_slowdown"), "{e}");
    }
}
