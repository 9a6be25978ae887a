//! Which of a node's job GPUs each task sees (`--gpu-bind`, `--gpus-per-task`,
//! `--ntasks-per-gpu`), as Slurm's gres plugin binds them: a choice of positions in the
//! node's GPU list, pure, so the agent's own tasks and `srun` steps bind alike.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a node's GPUs are shared out over its tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "bind", content = "n", rename_all = "snake_case")]
pub enum GpuBind {
    /// Every task sees every GPU (Slurm's default, and `closest` while tasks are not
    /// bound to CPUs).
    #[default]
    All,
    /// `none`: no binding at all; Slurm then leaves `CUDA_VISIBLE_DEVICES` unset.
    None,
    /// `per_task:N` (and `--gpus-per-task=N`): task k gets GPUs kN..kN+N-1.
    PerTask(u32),
    /// `single:N` (and `--ntasks-per-gpu=N`): N consecutive tasks share one GPU.
    Single(u32),
    /// `map_gpu:a,b,..`: task k gets the GPU with index list[k % len] (a device index of
    /// the node; one outside the job's GPUs falls back to the first, as Slurm does).
    Map(Vec<u32>),
}

/// A `--gpu-bind` value gsched cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuBindError {
    #[error(
        "--gpu-bind={0}: not understood; use closest, none, per_task:N, single:N or map_gpu:LIST"
    )]
    Unknown(String),
    #[error("--gpu-bind={0}: mask_gpu is not supported; give the same GPUs with map_gpu:LIST")]
    Mask(String),
    #[error("--gpu-bind={0}: the count must be a whole number of at least 1")]
    Count(String),
}

impl GpuBind {
    /// Parses Slurm's syntax, `verbose,` prefix included.
    pub fn parse(text: &str) -> Result<GpuBind, GpuBindError> {
        let value = text.trim();
        let value = value.strip_prefix("verbose,").unwrap_or(value);
        let count = |n: &str| match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(GpuBindError::Count(text.to_string())),
        };
        match value.split_once(':') {
            None if value == "closest" => Ok(GpuBind::All),
            None if value == "none" => Ok(GpuBind::None),
            Some(("per_task", n)) => count(n).map(GpuBind::PerTask),
            Some(("single", n)) => count(n).map(GpuBind::Single),
            Some(("map_gpu", list)) => list
                .split(',')
                .map(|g| g.trim().parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|l| !l.is_empty())
                .map(GpuBind::Map)
                .ok_or_else(|| GpuBindError::Count(text.to_string())),
            Some(("mask_gpu", _)) => Err(GpuBindError::Mask(text.to_string())),
            _ => Err(GpuBindError::Unknown(text.to_string())),
        }
    }

    /// The binding a job or step asks for: an explicit `--gpu-bind` wins, then
    /// `--gpus-per-task` (Slurm's implied `per_task:N`), then `--ntasks-per-gpu`
    /// (implied `single:N`).
    pub fn implied(
        explicit: Option<GpuBind>,
        gpus_per_task: Option<u32>,
        ntasks_per_gpu: Option<u32>,
    ) -> GpuBind {
        explicit
            .or(gpus_per_task.filter(|g| *g > 0).map(GpuBind::PerTask))
            .or(ntasks_per_gpu.filter(|n| *n > 0).map(GpuBind::Single))
            .unwrap_or_default()
    }

    /// The positions in `devices` (the node's job GPUs, by device index, in order) that
    /// local task `task` sees; `None` for no binding (`none`). A task past the GPUs gets
    /// the first, as Slurm binds it (with an error line).
    pub fn positions(&self, task: u32, devices: &[u32]) -> Option<Vec<usize>> {
        let n = devices.len();
        let all = (0..n).collect::<Vec<_>>();
        if n == 0 {
            return Some(Vec::new());
        }
        let chosen = match self {
            GpuBind::All => all,
            GpuBind::None => return None,
            GpuBind::PerTask(g) => {
                let from = task as usize * *g as usize;
                let mut p: Vec<usize> = (from..from + *g as usize).filter(|p| *p < n).collect();
                if p.is_empty() {
                    p.push(0);
                }
                p
            }
            GpuBind::Single(per_gpu) => {
                let p = (task / per_gpu) as usize;
                vec![if p < n { p } else { 0 }]
            }
            GpuBind::Map(list) => {
                let want = list[task as usize % list.len()];
                vec![devices.iter().position(|d| *d == want).unwrap_or(0)]
            }
        };
        Some(chosen)
    }
}

impl fmt::Display for GpuBind {
    /// Slurm's own spelling, as `SLURM_GPU_BIND` carries it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuBind::All => write!(f, "closest"),
            GpuBind::None => write!(f, "none"),
            GpuBind::PerTask(n) => write!(f, "per_task:{n}"),
            GpuBind::Single(n) => write!(f, "single:{n}"),
            GpuBind::Map(l) => {
                let l: Vec<String> = l.iter().map(u32::to_string).collect();
                write!(f, "map_gpu:{}", l.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each expectation below was read from real Slurm 22.05 (select/cons_tres, 4 GPUs
    // allocated, 4 tasks on the node), run through `srun` with the option shown.
    #[test]
    fn positions_match_slurm() {
        let devs = [0, 1, 2, 3];
        let bind = |s: &str| GpuBind::parse(s).unwrap();
        let tasks = |b: &GpuBind| {
            (0..4)
                .map(|t| b.positions(t, &devs))
                .collect::<Vec<Option<Vec<usize>>>>()
        };
        let some = |v: &[&[usize]]| v.iter().map(|p| Some(p.to_vec())).collect::<Vec<_>>();
        assert_eq!(tasks(&GpuBind::All), some(&[&[0, 1, 2, 3][..]; 4]));
        assert_eq!(tasks(&bind("closest")), some(&[&[0, 1, 2, 3][..]; 4]));
        assert_eq!(tasks(&bind("none")), vec![None; 4]);
        assert_eq!(
            tasks(&GpuBind::implied(None, Some(1), None)),
            some(&[&[0], &[1], &[2], &[3]])
        );
        assert_eq!(tasks(&bind("single:2")), some(&[&[0], &[0], &[1], &[1]]));
        assert_eq!(tasks(&bind("map_gpu:3,2")), some(&[&[3], &[2], &[3], &[2]]));
        // per_task:2 over 4 tasks: tasks 2 and 3 have none left and get the first.
        assert_eq!(
            tasks(&bind("verbose,per_task:2")),
            some(&[&[0, 1], &[2, 3], &[0], &[0]])
        );
    }

    #[test]
    fn map_gpu_names_device_indices_not_positions() {
        let b = GpuBind::parse("map_gpu:6,7").unwrap();
        assert_eq!(b.positions(0, &[6, 7]), Some(vec![0]));
        assert_eq!(b.positions(1, &[6, 7]), Some(vec![1]));
        assert_eq!(b.positions(0, &[2, 3]), Some(vec![0]), "outside: the first");
    }

    #[test]
    fn explicit_binding_wins_and_text_round_trips() {
        assert_eq!(
            GpuBind::implied(Some(GpuBind::None), Some(2), Some(3)),
            GpuBind::None
        );
        assert_eq!(GpuBind::implied(None, None, Some(3)), GpuBind::Single(3));
        for s in ["none", "per_task:2", "single:1", "map_gpu:0,3,1"] {
            assert_eq!(GpuBind::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn bad_values_say_what_to_write() {
        for s in [
            "sockets",
            "per_task:0",
            "single:x",
            "map_gpu:",
            "mask_gpu:0x3",
        ] {
            let e = GpuBind::parse(s).unwrap_err().to_string();
            assert!(e.contains(s), "{e}");
        }
        assert!(
            GpuBind::parse("mask_gpu:0x3")
                .unwrap_err()
                .to_string()
                .contains("map_gpu")
        );
    }
}
