//! GPU use outside jobs: processes on a node's GPUs that no job holding that GPU accounts
//! for (a user's shell, a notebook, another job's stray process), and the policy for them
//! (`[outside_jobs]` in gctld.toml, handed to agents when they register).

use crate::job::JobId;
use serde::{Deserialize, Serialize};

/// What the agent does about a process using a GPU outside jobs, once it has done so for
/// the policy's grace period. Whatever the action, the use is reported and the GPU is
/// given to no new job while it lasts.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OutsideAction {
    /// Only report it (`ginfo`, `gctl show node`, `/metrics`, the controller's log).
    #[default]
    Report,
    /// Report it and write a message to the user's terminals (once per process).
    Warn,
    /// Report it and kill the process (SIGTERM, then SIGKILL at the next look).
    Kill,
}

/// `[outside_jobs]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OutsidePolicy {
    pub action: OutsideAction,
    /// How long a process may use a GPU outside jobs before `warn` or `kill` acts on it.
    pub grace_s: u64,
    /// Users whose processes are reported but never warned or killed (an admin's
    /// monitoring, say).
    pub exempt_users: Vec<String>,
}

impl Default for OutsidePolicy {
    fn default() -> Self {
        OutsidePolicy {
            action: OutsideAction::Report,
            grace_s: 60,
            exempt_users: Vec::new(),
        }
    }
}

/// One process using a GPU outside the jobs that hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutsideUse {
    /// The agent's GPU index.
    pub gpu: u32,
    pub pid: u32,
    pub user: String,
    pub uid: u32,
    /// Its command line (cut to 200 characters).
    pub command: String,
    /// GPU memory it holds, where NVML says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// The job it runs in, when that job does not hold this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
    /// When the agent first saw it on the GPU (ms since the epoch).
    pub since_ms: u64,
    /// What the agent did about it so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acted: Option<OutsideAction>,
}

impl OutsideUse {
    /// One line: `gpu0: pid 4242 (bob) python train.py, 2048 MiB, outside any job`.
    pub fn line(&self) -> String {
        let mem = self
            .gpu_mem_mib
            .map(|m| format!(", {m} MiB"))
            .unwrap_or_default();
        let whose = match self.job {
            Some(j) => format!("in job {j}, which does not hold this GPU"),
            None => "outside any job".into(),
        };
        let acted = match self.acted {
            Some(OutsideAction::Warn) => "; warned",
            Some(OutsideAction::Kill) => "; killed",
            _ => "",
        };
        format!(
            "gpu{}: pid {} ({}) {}{mem}, {whose}{acted}",
            self.gpu, self.pid, self.user, self.command
        )
    }
}
