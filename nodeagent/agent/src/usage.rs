//! Where a step's usage figures come from: each GPU's utilisation, memory and power (NVML,
//! or a file of scripted utilisation on fake nodes: `--fake-gpu-util`), and the CPU time
//! and memory of the step's cgroup. The summaries they feed are `gsched_types::usage`'s.

use gsched_types::usage::GpuReading;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Reads one GPU now.
pub trait GpuReader: Send {
    /// `gpu` is the agent's index, `device` the machine's (NVML's) index.
    fn read(&mut self, gpu: u32, device: u32) -> Option<GpuReading>;

    /// The processes using the GPU (pid, GPU memory in MiB where known): NVML's compute
    /// and graphics lists; `None` where this reader cannot say (then the device node's
    /// open files tell, `crate::outside::scan`).
    fn processes(&mut self, _gpu: u32, _device: u32) -> Option<Vec<(u32, Option<u64>)>> {
        None
    }
}

/// NVML's figures.
pub struct NvmlReader(pub crate::nvml::NvmlProbe);

impl GpuReader for NvmlReader {
    fn read(&mut self, _gpu: u32, device: u32) -> Option<GpuReading> {
        let d = self.0.nvml().device_by_index(device).ok()?;
        let util = d.utilization_rates().ok()?;
        Some(GpuReading {
            util_pct: util.gpu.min(100) as u8,
            mem_used_mib: d.memory_info().map(|m| m.used >> 20).unwrap_or(0),
            power_w: d.power_usage().ok().map(|mw| mw / 1000),
        })
    }

    fn processes(&mut self, _gpu: u32, device: u32) -> Option<Vec<(u32, Option<u64>)>> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let d = self.0.nvml().device_by_index(device).ok()?;
        let mut all = d.running_compute_processes().ok()?;
        all.extend(d.running_graphics_processes().unwrap_or_default());
        let mut out: Vec<(u32, Option<u64>)> = Vec::new();
        for p in all {
            let mem = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b >> 20),
                UsedGpuMemory::Unavailable => None,
            };
            match out.iter_mut().find(|(pid, _)| *pid == p.pid) {
                Some((_, m)) => *m = (*m).max(mem),
                None => out.push((p.pid, mem)),
            }
        }
        Some(out)
    }
}

/// Scripted utilisation for fake nodes: a JSON object from the agent's GPU index to a
/// percentage (`{"0": 95, "1": 0}`) or to `{"util": 95, "mem_mib": 2048}`, re-read at
/// every sample; a GPU the file does not name is not sampled.
pub struct FakeReader {
    pub path: PathBuf,
    cache: Option<BTreeMap<String, FakeGpu>>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum FakeGpu {
    Util(u8),
    Full {
        util: u8,
        #[serde(default)]
        mem_mib: u64,
        #[serde(default)]
        power_w: Option<u32>,
        /// NVML's process list, scripted: `[{"pid": 4242, "mem_mib": 2048}]`.
        #[serde(default)]
        procs: Option<Vec<FakeProc>>,
    },
}

#[derive(serde::Deserialize)]
struct FakeProc {
    pid: u32,
    #[serde(default)]
    mem_mib: Option<u64>,
}

impl FakeReader {
    pub fn new(path: PathBuf) -> FakeReader {
        FakeReader { path, cache: None }
    }

    /// Re-reads the file (once per sampling round: call before the round's reads).
    pub fn reload(&mut self) {
        self.cache = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if self.cache.is_none() {
            tracing::debug!("{}: no readable utilisation", self.path.display());
        }
    }
}

impl GpuReader for FakeReader {
    fn read(&mut self, gpu: u32, _device: u32) -> Option<GpuReading> {
        match self.cache.as_ref()?.get(&gpu.to_string())? {
            FakeGpu::Util(u) => Some(GpuReading {
                util_pct: *u,
                mem_used_mib: 0,
                power_w: None,
            }),
            FakeGpu::Full {
                util,
                mem_mib,
                power_w,
                ..
            } => Some(GpuReading {
                util_pct: *util,
                mem_used_mib: *mem_mib,
                power_w: *power_w,
            }),
        }
    }

    fn processes(&mut self, gpu: u32, _device: u32) -> Option<Vec<(u32, Option<u64>)>> {
        match self.cache.as_ref()?.get(&gpu.to_string())? {
            FakeGpu::Full {
                procs: Some(procs), ..
            } => Some(procs.iter().map(|p| (p.pid, p.mem_mib)).collect()),
            _ => None,
        }
    }
}

/// Where the agent reads GPUs from.
pub enum Source {
    Nvml(Box<NvmlReader>),
    Fake(FakeReader),
    None,
}

impl Source {
    /// Starts a sampling round.
    pub fn begin(&mut self) {
        if let Source::Fake(f) = self {
            f.reload();
        }
    }

    pub fn reader(&mut self) -> Option<&mut dyn GpuReader> {
        match self {
            Source::Nvml(r) => Some(r.as_mut()),
            Source::Fake(r) => Some(r),
            Source::None => None,
        }
    }
}

/// The CPU time (ms) and memory (the peak if the kernel keeps it, else now; MiB) of a
/// cgroup v2 directory.
pub fn cgroup_figures(cg: &Path) -> (Option<u64>, Option<u64>) {
    let cpu_ms = std::fs::read_to_string(cg.join("cpu.stat"))
        .ok()
        .and_then(|s| cpu_usage_ms(&s));
    let mem = ["memory.peak", "memory.current"].iter().find_map(|f| {
        std::fs::read_to_string(cg.join(f))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    });
    (cpu_ms, mem.map(|b| b >> 20))
}

/// `usage_usec` of a `cpu.stat` file, in ms.
pub fn cpu_usage_ms(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == "usage_usec").then(|| v.trim().parse::<u64>().ok().map(|us| us / 1000))?
    })
}

/// The CPU time (ms) of every process in process group `pgid`, their reaped children's
/// included, from `/proc` (for runs without a cgroup); `None` when no process of the
/// group is left or `/proc` cannot be read.
pub fn group_cpu_ms(proc_root: &Path, pgid: i32) -> Option<u64> {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    let mut ticks = 0;
    let mut found = false;
    for entry in std::fs::read_dir(proc_root).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((group, t)) = stat_cpu_ticks(&stat)
            && group == pgid
        {
            ticks += t;
            found = true;
        }
    }
    found.then_some(ticks * 1000 / hz)
}

/// A `/proc/PID/stat` line's process group and CPU clock ticks (utime, stime, cutime,
/// cstime), read after the command name (which may hold spaces and parentheses).
pub fn stat_cpu_ticks(stat: &str) -> Option<(i32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): pgrp is field 5, utime..cstime fields 14-17.
    let pgrp = f.get(2)?.parse().ok()?;
    let mut ticks = 0u64;
    for k in 11..=14 {
        ticks += f.get(k)?.parse::<i64>().ok()?.max(0) as u64;
    }
    Some((pgrp, ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_cpu_of_a_process_group() {
        let stat = "4242 (python3 (worker) x) S 4200 4201 4201 0 -1 4194560 1000 0 0 0 250 50 7 3 20 0 4 0 100 1000 100 18446744073709551615";
        assert_eq!(stat_cpu_ticks(stat), Some((4201, 310)));
        assert_eq!(stat_cpu_ticks("garbage"), None);
        // This test's own process group, through the real /proc.
        let own = nix::unistd::getpgrp().as_raw();
        assert!(group_cpu_ms(Path::new("/proc"), own).is_some());
        assert_eq!(group_cpu_ms(Path::new("/proc"), i32::MAX), None);
    }

    #[test]
    fn cpu_stat_usage() {
        let stat = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n";
        assert_eq!(cpu_usage_ms(stat), Some(2500));
        assert_eq!(cpu_usage_ms("nr_periods 0\n"), None);
    }

    #[test]
    fn fake_file_both_forms_and_missing_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("util.json");
        std::fs::write(&path, r#"{"0": 95, "1": {"util": 3, "mem_mib": 2048}}"#).unwrap();
        let mut r = FakeReader::new(path.clone());
        r.reload();
        assert_eq!(r.read(0, 4).unwrap().util_pct, 95);
        let one = r.read(1, 5).unwrap();
        assert_eq!((one.util_pct, one.mem_used_mib), (3, 2048));
        assert!(r.read(2, 6).is_none());
        std::fs::write(&path, "not json").unwrap();
        r.reload();
        assert!(r.read(0, 4).is_none(), "an unreadable file samples nothing");
    }
}
