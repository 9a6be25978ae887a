//! What one reading of a GPU found (`GpuState`), what the node registered about it
//! (`RegisteredGpu`) and what the active check did (`ActiveResult`): plain data, read by
//! `nvml_state` or `fake_state` and judged by `judge`. A field the device does not
//! support is `None`, never a fault.

use serde::{Deserialize, Serialize};

/// Whether the driver can reach the GPU at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Reach {
    #[default]
    Ok,
    /// `NVML_ERROR_GPU_IS_LOST`: fallen off the bus or otherwise gone.
    Lost,
    /// `NVML_ERROR_RESET_REQUIRED`: the GPU works again only after a reset.
    ResetRequired,
    /// NVML gave no handle for it (nvidia-smi's "Unable to determine the device handle").
    NoHandle { error: String },
}

/// Row remapping (Ampere and later): NVML's `nvmlDeviceGetRemappedRows`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remap waits for the next GPU reset.
    pub pending: bool,
    /// A remap failed: the GPU has run out of spare rows.
    pub failure: bool,
}

/// NVML's clock-event (throttle) reason bits, as `nvmlClocksEventReason*` defines them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClockReasons(pub u64);

impl ClockReasons {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL: u64 = 0x20;
    pub const HW_THERMAL: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
    pub const DISPLAY_CLOCKS: u64 = 0x100;

    /// Each reason's name, as the fake state file and `gagentd probe` write it.
    pub const NAMES: [(&'static str, u64); 9] = [
        ("gpu_idle", Self::GPU_IDLE),
        ("applications_clocks", Self::APPLICATIONS_CLOCKS),
        ("sw_power_cap", Self::SW_POWER_CAP),
        ("hw_slowdown", Self::HW_SLOWDOWN),
        ("sync_boost", Self::SYNC_BOOST),
        ("sw_thermal", Self::SW_THERMAL),
        ("hw_thermal", Self::HW_THERMAL),
        ("hw_power_brake", Self::HW_POWER_BRAKE),
        ("display_clocks", Self::DISPLAY_CLOCKS),
    ];

    pub fn has(self, bit: u64) -> bool {
        self.0 & bit != 0
    }

    /// The bits of the named reasons; an unknown name is returned as the error.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut bits = 0;
        for name in names {
            let (_, bit) = Self::NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| name.to_string())?;
            bits |= bit;
        }
        Ok(ClockReasons(bits))
    }

    /// The names of the reasons set, in NVML's bit order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, bit)| self.has(*bit))
            .map(|(n, _)| *n)
            .collect()
    }
}

/// One NVLink of the GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
    /// Data CRC errors (`NVML_NVLINK_ERROR_DL_CRC_DATA`), since the driver loaded.
    pub crc_errors: Option<u64>,
    /// Transmit replays (`NVML_NVLINK_ERROR_DL_REPLAY`).
    pub replay_errors: Option<u64>,
    /// Link recoveries (`NVML_NVLINK_ERROR_DL_RECOVERY`).
    pub recovery_errors: Option<u64>,
}

/// The GPU's PCIe link now and at its best.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieState {
    pub generation: Option<u32>,
    pub generation_max: Option<u32>,
    pub width: Option<u32>,
    pub width_max: Option<u32>,
}

/// What one reading of one GPU found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuState {
    /// The GPU's index on this node (the agent's, not necessarily NVML's).
    pub gpu: u32,
    pub reach: Reach,
    /// Pages waiting to be retired at the next reset (before Ampere).
    pub retired_pages_pending: Option<bool>,
    /// Row remapping (Ampere and later).
    pub remapped_rows: Option<RemappedRows>,
    /// Uncorrected ECC errors since the driver loaded or the GPU was last reset.
    pub ecc_uncorrected_volatile: Option<u64>,
    pub clock_reasons: Option<ClockReasons>,
    /// The links the GPU has (none listed: it has no NVLink, or NVML cannot tell).
    pub nvlinks: Option<Vec<NvLinkState>>,
    pub pcie: Option<PcieState>,
    pub persistence_mode: Option<bool>,
    /// Xids NVML delivered for this GPU since the last reading (its event set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<u32>,
}

impl GpuState {
    /// A GPU that answered, with nothing read yet.
    pub fn reachable(gpu: u32) -> GpuState {
        GpuState {
            gpu,
            ..GpuState::default()
        }
    }

    /// Whether CUDA can be tried on it (an active check on a lost GPU can only hang).
    pub fn is_reachable(&self) -> bool {
        self.reach == Reach::Ok
    }
}

/// What the node registered about a GPU: what a reading is compared with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredGpu {
    pub gpu: u32,
    pub pci_bus_id: Option<String>,
    pub uuid: Option<String>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width_max: Option<u32>,
    /// NVLinks active when the node registered.
    pub nvlinks: Option<u32>,
}

impl RegisteredGpu {
    pub fn of(g: &gsched_types::Gpu) -> RegisteredGpu {
        RegisteredGpu {
            gpu: g.index,
            pci_bus_id: g.pci_bus_id.clone(),
            uuid: g.uuid.clone(),
            pcie_gen_max: g.pcie.as_ref().and_then(|p| p.gen_max).map(u32::from),
            pcie_width_max: g.pcie.as_ref().and_then(|p| p.width_max).map(u32::from),
            nvlinks: g.nvlinks_active,
        }
    }
}

/// The step of the active check that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActiveStep {
    /// `cuInit`: the driver and the CUDA library disagree, or no GPU answers.
    Init,
    /// Finding the device by its PCI address.
    Device,
    Context,
    Alloc,
    Memset,
    Copy,
    /// What came back is not what was written.
    Verify,
    Kernel,
    Synchronize,
}

impl ActiveStep {
    pub fn name(self) -> &'static str {
        match self {
            ActiveStep::Init => "cuInit",
            ActiveStep::Device => "finding the device",
            ActiveStep::Context => "creating a context",
            ActiveStep::Alloc => "allocating memory",
            ActiveStep::Memset => "cuMemsetD32",
            ActiveStep::Copy => "copying to the host",
            ActiveStep::Verify => "checking what came back",
            ActiveStep::Kernel => "launching a kernel",
            ActiveStep::Synchronize => "synchronising",
        }
    }
}

/// What the active check did on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ActiveResult {
    /// Context, allocation, memset, copy (and a kernel, where the driver could JIT it)
    /// worked and gave back what was written.
    Passed {
        ms: u64,
        /// Why no kernel ran, when none did (the driver could not load the PTX).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kernel_skipped: Option<String>,
    },
    Failed {
        step: ActiveStep,
        error: String,
        ms: u64,
    },
    /// Still not done at the time limit: killed.
    Hung { limit_ms: u64 },
    /// Not run: no CUDA library on this node, or the check could not be started.
    Unavailable { why: String },
}
