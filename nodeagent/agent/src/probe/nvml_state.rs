//! The device state of a real node through NVML (nvml-wrapper; `libnvidia-ml.so.1` loaded
//! at run time): reachability, retired pages and remapped rows, volatile uncorrected ECC
//! errors, clock-event reasons, each NVLink's state and error counters, the PCIe link,
//! persistence mode, and the Xids NVML's event set delivered since the last reading.

use super::DeviceStateReader;
use super::state::{
    ClockReasons, GpuState, NvLinkState, PcieState, Reach, RegisteredGpu, RemappedRows,
};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};

/// NVLinks a GPU can have (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

/// Reads GPUs through NVML, keeping one Xid event set per GPU between readings.
pub struct NvmlStateReader {
    nvml: &'static Nvml,
    /// Device index of each GPU of the agent (empty: the same).
    gpu_map: Vec<u32>,
    /// Per device index: its Xid event set, once registered (`None`: not supported).
    events: std::collections::HashMap<u32, Option<EventSet<'static>>>,
}

impl NvmlStateReader {
    /// Opens NVML for the life of the process (the event sets borrow it).
    pub fn open(gpu_map: Vec<u32>) -> Result<NvmlStateReader, crate::nvml::NvmlProbeError> {
        let nvml = Nvml::init().map_err(crate::nvml::NvmlProbeError::Unavailable)?;
        let mut reader = NvmlStateReader {
            nvml: Box::leak(Box::new(nvml)),
            gpu_map,
            events: Default::default(),
        };
        // Registered now, so Xids from here on are delivered to the first probe.
        let count = reader.nvml.device_count().unwrap_or(0);
        for dev in 0..count {
            reader.event_set(dev);
        }
        Ok(reader)
    }

    fn device_index(&self, gpu: u32) -> u32 {
        self.gpu_map.get(gpu as usize).copied().unwrap_or(gpu)
    }

    fn event_set(&mut self, dev: u32) -> Option<&EventSet<'static>> {
        let nvml = self.nvml;
        self.events
            .entry(dev)
            .or_insert_with(|| {
                let device = nvml.device_by_index(dev).ok()?;
                let set = nvml.create_event_set().ok()?;
                device
                    .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    .map_err(|e| tracing::debug!("GPU device {dev}: no Xid events: {e:?}"))
                    .ok()
            })
            .as_ref()
    }

    /// The Xids delivered for device `dev` since the last call.
    fn drain_xids(&mut self, dev: u32) -> Vec<u32> {
        let Some(set) = self.event_set(dev) else {
            return Vec::new();
        };
        let mut xids = Vec::new();
        // At most a burst's worth: a GPU in an Xid storm must not hold the probe.
        for _ in 0..64 {
            match set.wait(0) {
                Ok(ev) => match ev.event_data {
                    Some(XidError::Value(code)) => xids.push(code as u32),
                    Some(XidError::Unknown) | None => {}
                },
                Err(_) => break,
            }
        }
        xids.sort_unstable();
        xids.dedup();
        xids
    }

    fn read_one(&mut self, g: &RegisteredGpu) -> GpuState {
        let dev = self.device_index(g.gpu);
        let xids = self.drain_xids(dev);
        let mut state = GpuState {
            xids,
            ..GpuState::reachable(g.gpu)
        };
        let device = match self.nvml.device_by_index(dev) {
            Ok(d) => d,
            Err(e) => {
                state.reach = reach_of(&e).unwrap_or(Reach::NoHandle {
                    error: e.to_string(),
                });
                return state;
            }
        };
        let mut calls = Calls { reach: Reach::Ok };
        // A cheap call first: a lost GPU answers every call with the same error.
        let _ = calls.take(device.temperature(TemperatureSensor::Gpu));
        state.persistence_mode = calls.take(device.is_in_persistent_mode());
        state.retired_pages_pending = calls.take(device.are_pages_pending_retired());
        state.ecc_uncorrected_volatile =
            calls.take(device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile));
        state.clock_reasons = calls
            .take(device.current_throttle_reasons())
            .map(|r| ClockReasons(r.bits()));
        state.pcie = Some(PcieState {
            generation: calls.take(device.current_pcie_link_gen()),
            generation_max: calls.take(device.max_pcie_link_gen()),
            width: calls.take(device.current_pcie_link_width()),
            width_max: calls.take(device.max_pcie_link_width()),
        })
        .filter(|p| *p != PcieState::default());
        let mut links = Vec::new();
        for l in 0..MAX_NVLINKS {
            let link = device.link_wrapper_for(l);
            let Some(active) = calls.take(link.is_active()) else {
                continue;
            };
            links.push(NvLinkState {
                link: l,
                active,
                crc_errors: calls.take(link.error_counter(ErrorCounter::DlCrcData)),
                replay_errors: calls.take(link.error_counter(ErrorCounter::DlReplay)),
                recovery_errors: calls.take(link.error_counter(ErrorCounter::DlRecovery)),
            });
        }
        state.nvlinks = (!links.is_empty()).then_some(links);
        state.remapped_rows = calls.take(remapped_rows(self.nvml, &device)).flatten();
        state.reach = calls.reach;
        state
    }
}

/// NVML calls on one GPU: what they return, and the first error that says the GPU is
/// lost or needs a reset (an unsupported figure is `None`, nothing more).
struct Calls {
    reach: Reach,
}

impl Calls {
    fn take<T>(&mut self, r: Result<T, NvmlError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if let Some(bad) = reach_of(&e)
                    && self.reach == Reach::Ok
                {
                    self.reach = bad;
                }
                None
            }
        }
    }
}

/// The reachability an NVML error tells of, if it tells of one.
fn reach_of(e: &NvmlError) -> Option<Reach> {
    match e {
        NvmlError::GpuLost => Some(Reach::Lost),
        NvmlError::ResetRequired => Some(Reach::ResetRequired),
        _ => None,
    }
}

/// Row remapping through `nvmlDeviceGetRemappedRows`, which nvml-wrapper 0.13 does not
/// wrap: `None` where the GPU (before Ampere) or the driver does not have it.
fn remapped_rows(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
) -> Result<Option<RemappedRows>, NvmlError> {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetRemappedRows.is_err() {
        return Ok(None);
    }
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the symbol is present (checked above); the handle is a live device of this
    // NVML instance, and the four out-pointers are valid `unsigned int`s for the call.
    let code = unsafe {
        lib.nvmlDeviceGetRemappedRows(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    match nvml_wrapper::error::nvml_try(code) {
        Ok(()) => Ok(Some(RemappedRows {
            correctable: corr,
            uncorrectable: unc,
            pending: pending != 0,
            failure: failure != 0,
        })),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

impl DeviceStateReader for NvmlStateReader {
    fn read(&mut self, gpus: &[RegisteredGpu]) -> Vec<GpuState> {
        gpus.iter().map(|g| self.read_one(g)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::bitmasks::device::ThrottleReasons;

    #[test]
    fn clock_reason_bits_are_nvmls() {
        let pairs = [
            (ClockReasons::GPU_IDLE, ThrottleReasons::GPU_IDLE),
            (
                ClockReasons::APPLICATIONS_CLOCKS,
                ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            ),
            (ClockReasons::SW_POWER_CAP, ThrottleReasons::SW_POWER_CAP),
            (ClockReasons::HW_SLOWDOWN, ThrottleReasons::HW_SLOWDOWN),
            (ClockReasons::SYNC_BOOST, ThrottleReasons::SYNC_BOOST),
            (
                ClockReasons::SW_THERMAL,
                ThrottleReasons::SW_THERMAL_SLOWDOWN,
            ),
            (
                ClockReasons::HW_THERMAL,
                ThrottleReasons::HW_THERMAL_SLOWDOWN,
            ),
            (
                ClockReasons::HW_POWER_BRAKE,
                ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            ),
            (
                ClockReasons::DISPLAY_CLOCKS,
                ThrottleReasons::DISPLAY_CLOCK_SETTING,
            ),
        ];
        for (ours, nvml) in pairs {
            assert_eq!(ours, nvml.bits());
        }
    }
}
