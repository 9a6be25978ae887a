//! GPU discovery and health through NVML (nvml-wrapper, loading `libnvidia-ml.so.1` at run
//! time, so the agent starts on a machine without a driver and says so). NVLink pairs come
//! from active links and their remote ends ([`gsched_topology::nvlink`]); PCIe classes from
//! the common ancestor; NUMA, CPUs and PCIe link from NVML with sysfs as the fallback.

use crate::findings::{device_handle_lost, observed};
use gsched_proto::clock::now_ms;
use gsched_topology::nvlink::{LinkEnd, nvlink_matrix};
use gsched_types::findings::{Component, Severity};
use gsched_types::node::{HealthEvent, HealthKind};
use gsched_types::topology::{Gpu, LinkClass, PcieLink};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    P2pCapabilitiesIndex, P2pStatus, TemperatureSensor, TemperatureThreshold, TopologyLevel,
};
use std::path::Path;

pub struct NvmlProbe {
    nvml: Nvml,
}

/// One GPU's figures at one moment (`gagentd --metrics`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSample {
    pub gpu: u32,
    pub lost: bool,
    pub utilization_pct: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    /// NVML's clocks-event (throttle) reason bits; 0 when the GPU runs at full clocks.
    pub throttle_reasons: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub pcie_gen: Option<u32>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width: Option<u32>,
    pub pcie_width_max: Option<u32>,
    pub nvlinks_active: Option<u32>,
}

/// What NVML found.
pub struct NvmlGpus {
    pub gpus: Vec<Gpu>,
    pub links: Vec<Vec<LinkClass>>,
    pub driver: Option<String>,
}

const MAX_NVLINKS: u32 = 18;

/// Why NVML could not list this node's GPUs.
#[derive(Debug, thiserror::Error)]
pub enum NvmlProbeError {
    #[error("NVML not available ({0}); no GPUs will be offered")]
    Unavailable(nvml_wrapper::error::NvmlError),
    #[error("NVML device count: {0}")]
    DeviceCount(nvml_wrapper::error::NvmlError),
    #[error("GPU {index}: {source}")]
    Device {
        index: u32,
        source: nvml_wrapper::error::NvmlError,
    },
}

impl NvmlProbe {
    pub fn init() -> Result<NvmlProbe, NvmlProbeError> {
        Nvml::init()
            .map(|nvml| NvmlProbe { nvml })
            .map_err(NvmlProbeError::Unavailable)
    }

    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    pub fn discover(&self, sysfs_root: &Path) -> Result<NvmlGpus, NvmlProbeError> {
        let n = self
            .nvml
            .device_count()
            .map_err(NvmlProbeError::DeviceCount)?;
        let driver = self.nvml.sys_driver_version().ok();
        let mut gpus = Vec::new();
        let mut ends: Vec<Vec<LinkEnd>> = Vec::new();
        for i in 0..n {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(|source| NvmlProbeError::Device { index: i, source })?;
            let mut g = Gpu::new(i);
            g.uuid = d.uuid().ok();
            g.pci_bus_id = d
                .pci_info()
                .ok()
                .map(|p| crate::sysfs::normalize_bdf(&p.bus_id));
            g.model = d.name().ok();
            g.memory_mib = d.memory_info().ok().map(|m| m.total / (1024 * 1024));
            let facts = g
                .pci_bus_id
                .as_deref()
                .map(|b| crate::sysfs::pci_facts(sysfs_root, b));
            g.numa_node = d
                .numa_node_id()
                .ok()
                .or(facts.as_ref().and_then(|f| f.numa));
            let words = (std::thread::available_parallelism()
                .map(|p| p.get())
                .unwrap_or(64)
                / 64
                + 1)
            .max(1);
            g.cpus = d
                .cpu_affinity(words)
                .ok()
                .map(|mask| {
                    mask.iter()
                        .enumerate()
                        .flat_map(|(w, bits)| {
                            (0..64)
                                .filter(move |b| bits & (1 << b) != 0)
                                .map(move |b| (w * 64 + b) as u32)
                        })
                        .collect::<Vec<u32>>()
                })
                .filter(|c| !c.is_empty())
                .map(|c| gsched_types::cpulist::format(&c))
                .or(facts.as_ref().and_then(|f| f.local_cpus.clone()));
            let nvml_pcie = PcieLink {
                gen_current: d.current_pcie_link_gen().ok().map(|v| v as u8),
                gen_max: d.max_pcie_link_gen().ok().map(|v| v as u8),
                width_current: d.current_pcie_link_width().ok().map(|v| v as u8),
                width_max: d.max_pcie_link_width().ok().map(|v| v as u8),
            };
            g.pcie = Some(if nvml_pcie.gen_current.is_some() {
                nvml_pcie
            } else {
                facts.as_ref().map(|f| f.pcie.clone()).unwrap_or_default()
            });
            g.temperature_c = d.temperature(TemperatureSensor::Gpu).ok();
            g.power_w = d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0);
            g.mig_enabled = d.mig_mode().ok().map(|m| m.current != 0);
            g.ecc_uncorrected = d
                .total_ecc_errors(
                    nvml_wrapper::enum_wrappers::device::MemoryError::Uncorrected,
                    nvml_wrapper::enum_wrappers::device::EccCounter::Volatile,
                )
                .ok();
            g.device_path = d.minor_number().ok().map(|m| format!("/dev/nvidia{m}"));
            let mut gpu_ends = Vec::new();
            for l in 0..MAX_NVLINKS {
                let link = d.link_wrapper_for(l);
                if link.is_active().unwrap_or(false) {
                    let remote = link.remote_pci_info().map(|p| p.bus_id).unwrap_or_default();
                    gpu_ends.push(LinkEnd::from_remote(&remote, None));
                }
            }
            g.nvlinks_active = Some(gpu_ends.len() as u32);
            ends.push(gpu_ends);
            gpus.push(g);
        }
        let ids: Vec<String> = gpus
            .iter()
            .map(|g| g.pci_bus_id.clone().unwrap_or_default())
            .collect();
        let p2p = |i: usize, j: usize| {
            let (Ok(a), Ok(b)) = (
                self.nvml.device_by_index(i as u32),
                self.nvml.device_by_index(j as u32),
            ) else {
                return false;
            };
            matches!(
                a.p2p_status(&b, P2pCapabilitiesIndex::NvLink),
                Ok(P2pStatus::Ok)
            )
        };
        let nv = nvlink_matrix(&ids, &ends, p2p);
        let mut links = vec![vec![LinkClass::Unknown; gpus.len()]; gpus.len()];
        for i in 0..gpus.len() {
            for j in 0..gpus.len() {
                links[i][j] = if i == j {
                    LinkClass::SameDevice
                } else if let Some(count) = nv[i][j] {
                    LinkClass::NvLink(count)
                } else {
                    self.pcie_class(i as u32, j as u32)
                };
            }
        }
        Ok(NvmlGpus {
            gpus,
            links,
            driver,
        })
    }

    fn pcie_class(&self, i: u32, j: u32) -> LinkClass {
        let (Ok(a), Ok(b)) = (self.nvml.device_by_index(i), self.nvml.device_by_index(j)) else {
            return LinkClass::Unknown;
        };
        match a.topology_common_ancestor(b) {
            Ok(TopologyLevel::Internal | TopologyLevel::Single) => LinkClass::Pix,
            Ok(TopologyLevel::Multiple) => LinkClass::Pxb,
            Ok(TopologyLevel::HostBridge) => LinkClass::Phb,
            Ok(TopologyLevel::Node) => LinkClass::Node,
            Ok(TopologyLevel::System) => LinkClass::Sys,
            Err(_) => LinkClass::Unknown,
        }
    }

    /// The current figures of each registered GPU (`devices` as in [`Self::health`]), for
    /// the metrics endpoint; a figure NVML cannot give is left out.
    pub fn sample(&self, devices: &[u32]) -> Vec<GpuSample> {
        devices
            .iter()
            .enumerate()
            .map(|(k, &dev)| {
                let mut s = GpuSample {
                    gpu: k as u32,
                    ..GpuSample::default()
                };
                let Ok(d) = self.nvml.device_by_index(dev) else {
                    s.lost = true;
                    return s;
                };
                if let Ok(u) = d.utilization_rates() {
                    s.utilization_pct = Some(u.gpu);
                }
                if let Ok(m) = d.memory_info() {
                    s.memory_used_bytes = Some(m.used);
                    s.memory_total_bytes = Some(m.total);
                }
                s.temperature_c = d.temperature(TemperatureSensor::Gpu).ok();
                s.power_w = d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0);
                s.throttle_reasons = d.current_throttle_reasons().ok().map(|r| r.bits());
                s.ecc_uncorrected = d
                    .total_ecc_errors(
                        nvml_wrapper::enum_wrappers::device::MemoryError::Uncorrected,
                        nvml_wrapper::enum_wrappers::device::EccCounter::Aggregate,
                    )
                    .ok();
                s.pcie_gen = d.current_pcie_link_gen().ok();
                s.pcie_gen_max = d.max_pcie_link_gen().ok();
                s.pcie_width = d.current_pcie_link_width().ok();
                s.pcie_width_max = d.max_pcie_link_width().ok();
                s.nvlinks_active = Some(
                    (0..MAX_NVLINKS)
                        .filter(|l| d.link_wrapper_for(*l).is_active().unwrap_or(false))
                        .count() as u32,
                );
                s
            })
            .collect()
    }

    /// Health checks over the registered GPUs: lost GPUs, temperature at the slowdown
    /// threshold, a PCIe link trained below its maximum, uncorrected ECC errors.
    /// `devices`: the device index of each registered GPU (GPU `k` of the node is device
    /// `devices[k]`).
    /// `buses`: each registered GPU's PCI address, when known.
    pub fn health(&self, devices: &[u32], buses: &[Option<String>]) -> Vec<HealthEvent> {
        let mut out = Vec::new();
        let ev = |severity,
                  kind: HealthKind,
                  name: &str,
                  gpu: Option<u32>,
                  headline: String,
                  action: &str| {
            observed(kind, severity, Component::Gpu, name, gpu, headline, action).event(now_ms())
        };
        let count = self.nvml.device_count().unwrap_or(0);
        if let Some(max) = devices.iter().max().filter(|m| **m >= count) {
            out.push(ev(
                Severity::Drain,
                HealthKind::GpuCount,
                "gpu-count",
                None,
                format!("NVML sees {count} GPUs, device {max} was registered"),
                "a GPU is missing: check nvidia-smi -L and dmesg for the one that fell off, reseat or replace it",
            ));
        }
        for (k, &dev) in devices.iter().enumerate() {
            let i = k as u32;
            let d = match self.nvml.device_by_index(dev) {
                Ok(d) => d,
                Err(e) => {
                    // What nvidia-smi prints as "Unable to determine the device handle".
                    let pci = buses.get(k).cloned().flatten().unwrap_or_default();
                    out.push(device_handle_lost(Some(i), &pci, &e.to_string()).event(now_ms()));
                    continue;
                }
            };
            if let Err(nvml_wrapper::error::NvmlError::GpuLost) =
                d.temperature(TemperatureSensor::Gpu)
            {
                out.push(ev(
                    Severity::FailJob,
                    HealthKind::GpuLost,
                    "gpu-lost",
                    Some(i),
                    format!("NVML reports GPU {i} lost (GPU_IS_LOST)"),
                    "the GPU is gone until the node reboots: check its riser, slot and PCIe power",
                ));
                continue;
            }
            if let (Ok(t), Ok(slow)) = (
                d.temperature(TemperatureSensor::Gpu),
                d.temperature_threshold(TemperatureThreshold::Slowdown),
            ) && t >= slow
            {
                out.push(ev(
                    Severity::Warn,
                    HealthKind::Temperature,
                    "hot",
                    Some(i),
                    format!("GPU {i} at {t} C, at or above its slowdown threshold {slow} C"),
                    "improve airflow (open frames: fans, spacing); it throttles here",
                ));
            }
            if let (Ok(cg), Ok(mg), Ok(cw), Ok(mw)) = (
                d.current_pcie_link_gen(),
                d.max_pcie_link_gen(),
                d.current_pcie_link_width(),
                d.max_pcie_link_width(),
            ) {
                if cw < mw {
                    out.push(ev(
                        Severity::Warn,
                        HealthKind::PcieDegraded,
                        "pcie-degraded",
                        Some(i),
                        format!("GPU {i} PCIe link trained at x{cw}, max x{mw}"),
                        "check the riser and the slot (seating, a x16 slot wired x8, a riser cable that cannot carry the generation)",
                    ));
                }
                let _ = (cg, mg);
            }
        }
        out
    }
}
