//! `gagentd --metrics HOST:PORT`: this node's Prometheus metrics at `/metrics` — node runs
//! running, and per GPU (labelled by gsched's index on the node, a bounded set): which
//! job holds it (as a value), utilisation, memory, temperature, power, throttle reasons,
//! uncorrected ECC errors, PCIe generation and width (current and maximum), active
//! NVLinks. Figures come from NVML on every scrape; without a driver (fake topologies)
//! from the topology the agent registered.

use crate::nvml::{GpuSample, NvmlProbe};
use crate::runs::RunManager;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use gsched_types::topology::Topology;
use parking_lot::{Mutex, RwLock};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabel {
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabel {
    gpu: String,
    which: String,
}

/// What the endpoint reads.
pub struct Sources {
    pub runs: Arc<Mutex<RunManager>>,
    pub topology: Arc<RwLock<Topology>>,
    /// Device index of each registered GPU (empty: the same as gsched's).
    pub gpu_map: Vec<u32>,
    pub nvml: Option<Mutex<NvmlProbe>>,
    /// The GPU health probe's counts, where the node has one.
    pub probe: Option<Arc<crate::probe::ProbeService>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: String,
}

/// The probe's figures: probes by trigger, unusable GPUs found, time taken.
fn register_probe(reg: &mut Registry, stats: &crate::probe::ProbeStats) {
    use std::sync::atomic::Ordering::Relaxed;
    let probes = Family::<TriggerLabel, Gauge>::default();
    for (trigger, n) in [
        ("kernel_line", &stats.kernel_line),
        ("failed_run", &stats.failed_run),
    ] {
        probes
            .get_or_create(&TriggerLabel {
                trigger: trigger.into(),
            })
            .set(n.load(Relaxed) as i64);
    }
    reg.register(
        "agent_gpu_probes",
        "GPU health probes run, by what set them off",
        probes,
    );
    let unusable = Gauge::<i64>::default();
    unusable.set(stats.unusable_gpus.load(Relaxed) as i64);
    reg.register(
        "agent_gpu_probe_unusable",
        "GPUs GPU health probes found unusable",
        unusable,
    );
    let last = Gauge::<f64, AtomicU64>::default();
    last.set(stats.last_ms.load(Relaxed) as f64 / 1000.0);
    reg.register(
        "agent_gpu_probe_last_seconds",
        "How long the last GPU health probe took",
        last,
    );
    let total = Gauge::<f64, AtomicU64>::default();
    total.set(stats.total_ms.load(Relaxed) as f64 / 1000.0);
    reg.register(
        "agent_gpu_probe_seconds",
        "Time spent in GPU health probes",
        total,
    );
}

/// Serves `/metrics` on `listener` until the process ends.
pub async fn serve(sources: Arc<Sources>, listener: tokio::net::TcpListener) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let s = sources.clone();
            async move {
                match tokio::task::spawn_blocking(move || render(&s)).await {
                    Ok(Ok(text)) => (
                        StatusCode::OK,
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        text,
                    )
                        .into_response(),
                    _ => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "cannot render the metrics\n",
                    )
                        .into_response(),
                }
            }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!("the metrics endpoint stopped: {e}");
    }
}

/// The figures of every registered GPU: NVML's, or the registered topology's.
fn samples(s: &Sources) -> Vec<GpuSample> {
    let devices: Vec<u32> = if s.gpu_map.is_empty() {
        (0..s.topology.read().gpus.len() as u32).collect()
    } else {
        s.gpu_map.clone()
    };
    if let Some(nvml) = &s.nvml {
        return nvml.lock().sample(&devices);
    }
    s.topology
        .read()
        .gpus
        .iter()
        .map(|g| GpuSample {
            gpu: g.index,
            temperature_c: g.temperature_c,
            power_w: g.power_w,
            ecc_uncorrected: g.ecc_uncorrected,
            memory_total_bytes: g.memory_mib.map(|m| m * 1024 * 1024),
            pcie_gen: g.pcie.as_ref().and_then(|p| p.gen_current).map(u32::from),
            pcie_gen_max: g.pcie.as_ref().and_then(|p| p.gen_max).map(u32::from),
            pcie_width: g.pcie.as_ref().and_then(|p| p.width_current).map(u32::from),
            pcie_width_max: g.pcie.as_ref().and_then(|p| p.width_max).map(u32::from),
            nvlinks_active: g.nvlinks_active,
            ..GpuSample::default()
        })
        .collect()
}

/// One scrape's text.
pub fn render(s: &Sources) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("gsched");
    let (running, holders) = {
        let runs = s.runs.lock();
        (runs.running().len(), runs.gpu_jobs())
    };
    let runs = Gauge::<i64>::default();
    runs.set(running as i64);
    reg.register("agent_steps_running", "Job steps this agent runs", runs);
    let job = Family::<GpuLabel, Gauge>::default();
    let util = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let mem_used = Family::<GpuLabel, Gauge>::default();
    let mem_total = Family::<GpuLabel, Gauge>::default();
    let temp = Family::<GpuLabel, Gauge>::default();
    let power = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let throttle = Family::<GpuLabel, Gauge>::default();
    let ecc = Family::<GpuLabel, Gauge>::default();
    let lost = Family::<GpuLabel, Gauge>::default();
    let nvlinks = Family::<GpuLabel, Gauge>::default();
    let pcie_gen = Family::<LinkLabel, Gauge>::default();
    let pcie_width = Family::<LinkLabel, Gauge>::default();
    for g in samples(s) {
        let l = GpuLabel {
            gpu: g.gpu.to_string(),
        };
        let holder = holders
            .iter()
            .find(|(gpu, _)| *gpu == g.gpu)
            .map_or(0, |(_, j)| j.0 as i64);
        job.get_or_create(&l).set(holder);
        lost.get_or_create(&l).set(i64::from(g.lost));
        if let Some(u) = g.utilization_pct {
            util.get_or_create(&l).set(f64::from(u) / 100.0);
        }
        if let Some(m) = g.memory_used_bytes {
            mem_used.get_or_create(&l).set(m as i64);
        }
        if let Some(m) = g.memory_total_bytes {
            mem_total.get_or_create(&l).set(m as i64);
        }
        if let Some(t) = g.temperature_c {
            temp.get_or_create(&l).set(i64::from(t));
        }
        if let Some(p) = g.power_w {
            power.get_or_create(&l).set(p);
        }
        if let Some(r) = g.throttle_reasons {
            throttle.get_or_create(&l).set(r as i64);
        }
        if let Some(e) = g.ecc_uncorrected {
            ecc.get_or_create(&l).set(e as i64);
        }
        if let Some(n) = g.nvlinks_active {
            nvlinks.get_or_create(&l).set(i64::from(n));
        }
        for (family, now, max) in [
            (&pcie_gen, g.pcie_gen, g.pcie_gen_max),
            (&pcie_width, g.pcie_width, g.pcie_width_max),
        ] {
            for (which, v) in [("current", now), ("max", max)] {
                if let Some(v) = v {
                    family
                        .get_or_create(&LinkLabel {
                            gpu: g.gpu.to_string(),
                            which: which.into(),
                        })
                        .set(i64::from(v));
                }
            }
        }
    }
    reg.register("gpu_job", "The job holding the GPU (0: idle)", job);
    reg.register("gpu_lost", "1 when the driver cannot reach the GPU", lost);
    reg.register(
        "gpu_utilization_ratio",
        "GPU busy fraction over NVML's last sample period",
        util,
    );
    reg.register("gpu_memory_used_bytes", "GPU memory in use", mem_used);
    reg.register("gpu_memory_total_bytes", "GPU memory", mem_total);
    reg.register("gpu_temperature_celsius", "GPU core temperature", temp);
    reg.register("gpu_power_watts", "GPU power draw", power);
    reg.register(
        "gpu_throttle_reasons",
        "NVML's clocks-event reason bits (0: full clocks)",
        throttle,
    );
    reg.register(
        "gpu_ecc_uncorrected",
        "Uncorrected ECC errors since the driver loaded",
        ecc,
    );
    reg.register("gpu_nvlinks_active", "Active NVLinks", nvlinks);
    reg.register(
        "gpu_pcie_link_gen",
        "PCIe generation, current and maximum",
        pcie_gen,
    );
    reg.register(
        "gpu_pcie_link_width",
        "PCIe lanes, current and maximum",
        pcie_width,
    );
    if let Some(p) = &s.probe {
        register_probe(&mut reg, &p.stats);
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}
