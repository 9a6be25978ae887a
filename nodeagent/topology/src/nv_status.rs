//! The NVIDIA driver's status codes (`NV_STATUS`, `catalog/nv_status.csv`: every code of
//! the open kernel modules' `nvstatuscodes.h`) and what each says of the GPU. NVRM prints
//! them in its assertion and RPC failure lines, by name (`[NV_ERR_RESET_REQUIRED]`) or by
//! value (`status=0x00000062`), whatever words the message around them uses: a line that
//! carries a code saying the GPU must be reset, is lost, or lost memory is read from the
//! code, not from its wording.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// What a status code says of the GPU (the catalogue's third column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GpuState {
    /// It must be reset before it is used again.
    ResetRequired,
    /// It is gone from the bus.
    Lost,
    /// Its memory failed.
    Memory,
    /// Driver components of different versions.
    DriverMismatch,
    /// It could not be brought up.
    InitFailed,
    /// A microcontroller on it asserted or halted: the probe decides.
    Firmware,
    /// An NVLink or the fabric failed.
    Nvlink,
    /// The result of one call: nothing about the GPU.
    Call,
}

impl GpuState {
    fn parse(word: &str) -> Option<GpuState> {
        Some(match word.trim() {
            "reset" => GpuState::ResetRequired,
            "lost" => GpuState::Lost,
            "memory" => GpuState::Memory,
            "mismatch" => GpuState::DriverMismatch,
            "init" => GpuState::InitFailed,
            "firmware" => GpuState::Firmware,
            "nvlink" => GpuState::Nvlink,
            "call" => GpuState::Call,
            _ => return None,
        })
    }
}

/// One row: `NV_ERR_RESET_REQUIRED`, 0x62, what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvStatus {
    pub name: String,
    pub code: u32,
    pub state: GpuState,
}

const CSV: &str = include_str!("../catalog/nv_status.csv");

fn rows() -> impl Iterator<Item = Vec<&'static str>> {
    CSV.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(',').collect())
}

/// Every status code, by value.
pub fn catalogue() -> &'static BTreeMap<u32, NvStatus> {
    static TABLE: OnceLock<BTreeMap<u32, NvStatus>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows()
            .filter_map(|cells| {
                let [name, code, state] = cells.as_slice() else {
                    return None;
                };
                let code = u32::from_str_radix(code.trim().trim_start_matches("0x"), 16).ok()?;
                Some((
                    code,
                    NvStatus {
                        name: name.trim().to_string(),
                        code,
                        state: GpuState::parse(state)?,
                    },
                ))
            })
            .collect()
    })
}

/// The status codes an NVRM message carries, by name (`NV_ERR_RESET_REQUIRED`) or by
/// value (`status=0x00000062`, `paramsStatus=0x...`), in the catalogue.
pub fn codes_in(msg: &str) -> Vec<&'static NvStatus> {
    let table = catalogue();
    let mut out: Vec<&NvStatus> = Vec::new();
    for word in msg.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '=')) {
        let found = if word.starts_with("NV_ERR_") || word.starts_with("NV_WARN_") {
            table.values().find(|s| s.name == word)
        } else if let Some((key, value)) = word.split_once('=')
            && key.to_ascii_lowercase().ends_with("status")
        {
            u32::from_str_radix(value.trim_start_matches("0x"), 16)
                .ok()
                .filter(|_| value.starts_with("0x"))
                .and_then(|c| table.get(&c))
        } else {
            None
        };
        if let Some(s) = found
            && !out.contains(&s)
        {
            out.push(s);
        }
    }
    out
}

/// The most telling state among the codes of a message (not `Call`).
pub fn state_in(msg: &str) -> Option<&'static NvStatus> {
    let rank = |s: GpuState| match s {
        GpuState::Lost => 7,
        GpuState::ResetRequired => 6,
        GpuState::Memory => 5,
        GpuState::DriverMismatch => 4,
        GpuState::InitFailed => 3,
        GpuState::Nvlink => 2,
        GpuState::Firmware => 1,
        GpuState::Call => 0,
    };
    codes_in(msg)
        .into_iter()
        .filter(|s| s.state != GpuState::Call)
        .max_by_key(|s| rank(s.state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_code_of_the_driver_has_a_reading() {
        let rows = rows().count();
        assert_eq!(catalogue().len(), rows, "a row did not parse");
        assert_eq!(rows, 149);
        for s in catalogue().values() {
            assert!(
                s.name.starts_with("NV_ERR_")
                    || s.name.starts_with("NV_WARN_")
                    || s.name == "NV_OK",
                "{}",
                s.name
            );
            // Warnings never say a GPU is unusable.
            if s.name.starts_with("NV_WARN_") || s.name == "NV_OK" {
                assert_eq!(s.state, GpuState::Call, "{}", s.name);
            }
        }
        assert_eq!(catalogue()[&0x62].name, "NV_ERR_RESET_REQUIRED");
        assert_eq!(catalogue()[&0x62].state, GpuState::ResetRequired);
        assert_eq!(catalogue()[&0x0f].state, GpuState::Lost);
        assert_eq!(catalogue()[&0x6a].state, GpuState::DriverMismatch);
    }

    #[test]
    fn a_code_is_read_by_name_or_by_value_whatever_the_words() {
        let by_value = "NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; paramsStatus=0x00000062; status=0x00000062";
        assert_eq!(state_in(by_value).unwrap().state, GpuState::ResetRequired);
        let by_name = "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874";
        assert_eq!(state_in(by_name).unwrap().name, "NV_ERR_RESET_REQUIRED");
        // A call's own result says nothing of the GPU.
        assert!(
            state_in("NVRM: _issueRpcAndWait: rpc failed [NV_ERR_TIMEOUT] status=0x00000065")
                .is_none()
        );
        assert!(state_in("NVRM: GPU at PCI:0000:01:00: GPU-1").is_none());
    }
}
