//! Job steps (`grun`, srun's twin): a command run over some or all of a running job's
//! nodes, its tasks' output streamed back to the caller through the leader. Steps live
//! as long as the `grun` that started them; they are not replicated state.

use crate::gpubind::GpuBind;
use crate::job::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What `grun` asks for inside a job (the `RunStep` request body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRequest {
    pub job: JobId,
    /// Nodes of the job to run on (`-w`); empty: the first `nodes` of the job, or all.
    #[serde(default)]
    pub nodelist: Vec<String>,
    /// How many of the job's nodes (`-N`); 0: all (or those in `nodelist`).
    #[serde(default)]
    pub nodes: u32,
    /// Tasks in all (`-n`); 0: `ntasks_per_node` on each node.
    #[serde(default)]
    pub ntasks: u32,
    /// Tasks per node (`--ntasks-per-node`); 0: 1.
    #[serde(default)]
    pub ntasks_per_node: u32,
    pub argv: Vec<String>,
    /// Variables set for every task on top of the job's environment (`--export`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory (the caller's).
    pub cwd: String,
    /// Run the (single) task in a pseudo-terminal of this size (`grun --pty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<TermSize>,
    /// Which of the job's GPUs the step's tasks use.
    #[serde(default, skip_serializing_if = "StepGpus::is_default")]
    pub gpus: StepGpus,
    /// Share the GPUs other steps hold, and hold none (`srun --overlap`); a step in a
    /// terminal (`--pty`) shares them too, as Slurm's interactive step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlap: bool,
    /// The step's name (`srun -J`); absent: its command's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More tasks than the job holds CPUs may start (`srun -O`, or `SLURM_OVERCOMMIT` from
    /// a job submitted with it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overcommit: bool,
    /// Programs run on the node before and after each task (`--task-prolog`,
    /// `--task-epilog`).
    #[serde(default, skip_serializing_if = "TaskScripts::is_default")]
    pub task_scripts: TaskScripts,
    /// CPUs for each task (`srun -c`): the step's `SLURM_CPUS_PER_TASK`, and how many each
    /// task is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// How tasks are laid out over nodes and bound to CPUs (`--distribution`,
    /// `--cpu-bind`, `--hint`, `--ntasks-per-socket`).
    #[serde(
        default,
        skip_serializing_if = "crate::binding::TaskBinding::is_default"
    )]
    pub binding: crate::binding::TaskBinding,
    /// Variables srun itself sets for the step's tasks (`SLURM_DISTRIBUTION` as given,
    /// `SLURMD_TRES_BIND`, `SLURM_LABELIO`, `SLURM_NTASKS_PER_TRES`, `SLURM_UMASK`): over
    /// the job's and the caller's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub srun_env: BTreeMap<String, String>,
}

/// srun's `--task-prolog` and `--task-epilog`: programs (absolute paths, found by `grun`
/// as srun finds them) the node runs as the task's user, with its environment, just before
/// it starts (its `export NAME=value`, `unset NAME` and `print TEXT` lines act on the task)
/// and just after it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskScripts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prolog: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilog: Option<String>,
}

impl TaskScripts {
    pub fn is_default(&self) -> bool {
        *self == TaskScripts::default()
    }
}

/// What a task prolog's output asks for, line by line (slurmstepd's
/// `_run_script_and_set_env`); other lines are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologLine {
    Export(String, String),
    Unset(String),
    Print(String),
}

/// The task prolog's lines that act on the task.
pub fn prolog_lines(output: &str) -> Vec<PrologLine> {
    output
        .lines()
        .filter_map(|l| {
            if let Some(rest) = l.strip_prefix("export ") {
                let (name, value) = rest.trim_start().split_once('=')?;
                let name = name.trim_end();
                (!name.is_empty()).then(|| PrologLine::Export(name.to_string(), value.to_string()))
            } else if let Some(name) = l.strip_prefix("unset ") {
                let name = name.trim();
                (!name.is_empty()).then(|| PrologLine::Unset(name.to_string()))
            } else {
                l.strip_prefix("print ")
                    .map(|t| PrologLine::Print(t.trim_start().to_string()))
            }
        })
        .collect()
}

/// A terminal's size in characters.
/// A step's GPUs: how many of the job's on each of its nodes (`srun --gres=gpu:N`,
/// `--gpus-per-node`; absent: all), and which of them each task sees.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepGpus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_node: Option<u32>,
    #[serde(default)]
    pub bind: GpuBind,
}

impl StepGpus {
    pub fn is_default(&self) -> bool {
        *self == StepGpus::default()
    }

    /// How many of the job's GPUs on a node the step takes, for `tasks_here` of its
    /// tasks there; `None`: all of them (a step that names no GPUs, as Slurm's).
    pub fn wanted(&self, tasks_here: u32) -> Option<u32> {
        match (self.per_node, &self.bind) {
            (Some(n), _) => Some(n),
            (None, GpuBind::PerTask(g)) => Some(g.saturating_mul(tasks_here)),
            _ => None,
        }
    }
}

/// Why a step cannot have its GPUs on a node now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepGpuError {
    /// Other running steps of the job hold them: the step may start once they end.
    #[error(
        "step creation temporarily disabled, retrying (Requested nodes are busy): the step \
         wants {wanted} of the job's GPUs on {node}, {free} of them are not held by its other \
         steps (srun --overlap shares them)"
    )]
    Busy {
        node: String,
        wanted: u32,
        free: u32,
    },
    /// More than the job has there: it never can.
    #[error(
        "the step asks for {wanted} GPUs on {node}, where the job has {job}: ask for at most \
         {job} (--gres=gpu:N, --gpus-per-node, --gpus-per-task)"
    )]
    MoreThanTheJob { node: String, wanted: u32, job: u32 },
}

/// The GPUs a step takes on one node, as positions in the job's GPU list there
/// (allocation order): the first `wanted` (all, for `None`) that the job's other running
/// steps do not hold (`held`, positions), as Slurm gives a step free GPUs in order. An
/// overlapping step (`srun --overlap`) takes the first `wanted` whether held or not.
pub fn claim_gpus(
    node: &str,
    job_gpus: u32,
    held: &[u32],
    wanted: Option<u32>,
    overlap: bool,
) -> Result<Vec<u32>, StepGpuError> {
    let wanted = wanted.unwrap_or(job_gpus);
    if wanted > job_gpus {
        return Err(StepGpuError::MoreThanTheJob {
            node: node.to_string(),
            wanted,
            job: job_gpus,
        });
    }
    let free: Vec<u32> = (0..job_gpus)
        .filter(|p| overlap || !held.contains(p))
        .collect();
    if (free.len() as u32) < wanted {
        return Err(StepGpuError::Busy {
            node: node.to_string(),
            wanted,
            free: free.len() as u32,
        });
    }
    Ok(free.into_iter().take(wanted as usize).collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TermSize {
    pub rows: u16,
    pub cols: u16,
}

/// What the caller of a running step sends its task 0 (the `StepInput` request body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepInput {
    pub job: JobId,
    pub step: u32,
    pub input: InputEvent,
}

/// Input for a step's task 0: bytes of its stdin, the end of it, or a new terminal size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InputEvent {
    /// The bytes, base64.
    Data {
        data: String,
    },
    Eof,
    Resize(TermSize),
}

/// The most stdin one `StepInput` carries.
pub const INPUT_CHUNK: usize = 64 * 1024;

/// The status a task's exit counts as, as srun counts it: its exit code, 128 + N for a
/// death by signal N, and 1 when its agent could learn neither (its exit record had no
/// status): an end nobody saw is no success. `grun` exits with the highest of its tasks';
/// the controller records a step whose tasks all count 0 as completed, any other as
/// failed.
pub fn task_status(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (_, Some(sig)) => 128 + sig,
        (Some(c), None) => c,
        (None, None) => 1,
    }
}

/// How a recorded `grun` step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepState {
    Running,
    Completed,
    Failed,
    /// Stopped before its tasks ended: its `grun` went away, or its job ended first.
    Cancelled,
}

impl StepState {
    pub fn name(self) -> &'static str {
        match self {
            StepState::Running => "RUNNING",
            StepState::Completed => "COMPLETED",
            StepState::Failed => "FAILED",
            StepState::Cancelled => "CANCELLED",
        }
    }
}

/// A `grun` step as its job's record keeps it (`gqueue -s`, `gacct` rows `JOBID.STEP`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRecord {
    pub step: u32,
    /// The command's name (its first word's last path part, as Slurm's step name).
    pub name: String,
    pub nodes: Vec<String>,
    pub ntasks: u32,
    pub start_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    pub state: StepState,
    /// The highest task exit status (as `grun` exits with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// The most `grun` steps a job's record keeps (the oldest ended ones go first).
pub const MAX_RECORDED_STEPS: usize = 1000;

/// Where a step's tasks go: node names and, per node, the global ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepLayout {
    pub nodes: Vec<String>,
    pub ranks: Vec<Vec<u32>>,
    pub ntasks: u32,
}

/// The most tasks one step starts.
pub const MAX_STEP_TASKS: u32 = 4096;

/// srun's block distribution of `ntasks` over `nodes`: the first nodes take one more
/// when they do not divide (3 over 2 is 2, 1).
pub fn block_counts(ntasks: u32, nodes: u32) -> Vec<u32> {
    let n = nodes.max(1);
    (0..n)
        .map(|i| ntasks / n + u32::from(i < ntasks % n))
        .collect()
}

/// The ranks each of `nodes` runs: srun's blocks (3 over 2 is 0-1, 2) by default, one
/// at a time round the nodes (`cyclic`: 0 2, 1), or `n` at a time round them
/// (`plane=n`, which may leave the last nodes with fewer, or none).
pub fn deal(ntasks: u32, nodes: u32, dist: crate::binding::NodeDist) -> Vec<Vec<u32>> {
    use crate::binding::NodeDist;
    let run = match dist {
        NodeDist::Block => {
            let mut next = 0;
            return block_counts(ntasks, nodes)
                .into_iter()
                .map(|count| {
                    let r: Vec<u32> = (next..next + count).collect();
                    next += count;
                    r
                })
                .collect();
        }
        NodeDist::Cyclic => 1,
        NodeDist::Plane(n) => n.max(1),
    };
    let mut ranks = vec![Vec::new(); nodes.max(1) as usize];
    for rank in 0..ntasks {
        ranks[((rank / run) % nodes.max(1)) as usize].push(rank);
    }
    ranks
}

/// Slurm's step check: a step may not ask for more CPUs (its tasks times each task's
/// CPUs, one unless `-c` says) than its whole job holds, unless it overcommits (`srun
/// -O`, or a job submitted with it); fitting them per node is the binding's concern.
fn check_cpus(
    ntasks: u32,
    cpus_per_task: Option<u32>,
    job_cpus: u64,
) -> Result<(), crate::error::StepLayoutError> {
    let asked = u64::from(ntasks) * u64::from(cpus_per_task.unwrap_or(1).max(1));
    if asked > job_cpus {
        return Err(crate::error::StepLayoutError::TooManyCpus {
            asked,
            held: job_cpus,
        });
    }
    Ok(())
}

impl StepRequest {
    /// Lays the step out over the job's nodes (in job order), which hold `job_cpus` CPUs
    /// in all: `-w` picks nodes, `-N` limits their number, `-n` spreads tasks as srun
    /// does (blocks of ranks by default, as `--distribution` says otherwise), and the
    /// tasks' CPUs must fit in the job's unless the step overcommits.
    pub fn layout(
        &self,
        job_nodes: &[String],
        job_cpus: u64,
    ) -> Result<StepLayout, crate::error::StepLayoutError> {
        use crate::error::StepLayoutError;
        for n in &self.nodelist {
            if !job_nodes.contains(n) {
                return Err(StepLayoutError::ForeignNode {
                    node: n.clone(),
                    job_nodes: crate::hostlist::compress(job_nodes),
                });
            }
        }
        let mut nodes: Vec<String> = if self.nodelist.is_empty() {
            job_nodes.to_vec()
        } else {
            job_nodes
                .iter()
                .filter(|n| self.nodelist.contains(n))
                .cloned()
                .collect()
        };
        if self.nodes > 0 {
            if self.nodes as usize > nodes.len() {
                return Err(StepLayoutError::TooManyNodes {
                    asked: self.nodes,
                    available: nodes.len(),
                });
            }
            nodes.truncate(self.nodes as usize);
        }
        if nodes.is_empty() {
            return Err(StepLayoutError::NoNode);
        }
        let per_node = self.ntasks_per_node.max(1);
        let too_many = StepLayoutError::TooManyTasks;
        let ntasks = if self.ntasks > 0 {
            self.ntasks
        } else {
            u32::try_from(nodes.len())
                .ok()
                .and_then(|n| per_node.checked_mul(n))
                .ok_or_else(|| too_many(format!("{per_node} x {}", nodes.len())))?
        };
        if ntasks < nodes.len() as u32 {
            // srun shrinks the node count to the task count.
            nodes.truncate(ntasks as usize);
        }
        if ntasks > MAX_STEP_TASKS {
            return Err(too_many(ntasks.to_string()));
        }
        if !self.overcommit {
            check_cpus(ntasks, self.cpus_per_task, job_cpus)?;
        }
        let mut ranks = deal(ntasks, nodes.len() as u32, self.binding.nodes);
        // A plane distribution may leave nodes without a task: the step has fewer nodes.
        let mut kept = nodes
            .into_iter()
            .zip(std::mem::take(&mut ranks))
            .filter(|(_, r)| !r.is_empty());
        let (nodes, ranks): (Vec<String>, Vec<Vec<u32>>) = kept.by_ref().unzip();
        Ok(StepLayout {
            nodes,
            ranks,
            ntasks,
        })
    }
}

/// What a node's agent runs of a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepLaunch {
    pub job: JobId,
    pub attempt: u32,
    pub step: u32,
    /// This node's index among the step's nodes (`SLURM_NODEID` of the step).
    pub node_index: u32,
    pub layout: StepLayout,
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// Task 0 runs in a pseudo-terminal of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<TermSize>,
    /// Which of the job's GPUs the step's tasks use.
    #[serde(default, skip_serializing_if = "StepGpus::is_default")]
    pub gpus: StepGpus,
    /// The GPUs the leader gave the step on this node, as positions in the job's GPU
    /// list there; absent from a leader that does not hand them out (then: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_slots: Option<Vec<u32>>,
    /// CPUs for each task, when the step named them (`srun -c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// How the tasks are bound to CPUs.
    #[serde(
        default,
        skip_serializing_if = "crate::binding::TaskBinding::is_default"
    )]
    pub binding: crate::binding::TaskBinding,
    /// Variables srun itself sets for the step's tasks (`SLURM_DISTRIBUTION` as given,
    /// `SLURMD_TRES_BIND`, `SLURM_LABELIO`, `SLURM_NTASKS_PER_TRES`, `SLURM_UMASK`): over
    /// the job's and the caller's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub srun_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "TaskScripts::is_default")]
    pub task_scripts: TaskScripts,
}

/// A task's output, exit, or a step that could not start on a node: sent by agents as it
/// happens (not kept on disk) and passed to the `grun` that started the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "io", rename_all = "snake_case")]
pub enum TaskIo {
    Output {
        job: JobId,
        step: u32,
        rank: u32,
        #[serde(default)]
        stderr: bool,
        /// The bytes, base64.
        data: String,
    },
    Exited {
        job: JobId,
        step: u32,
        rank: u32,
        code: Option<i32>,
        signal: Option<i32>,
    },
    Failed {
        job: JobId,
        step: u32,
        node: String,
        message: String,
    },
    /// How many bytes of its input task 0 has taken so far (grun keeps at most
    /// `INPUT_WINDOW` bytes beyond this in flight).
    InputTaken { job: JobId, step: u32, bytes: u64 },
}

impl TaskIo {
    /// The job whose step this is about.
    pub fn job(&self) -> JobId {
        match self {
            TaskIo::Output { job, .. }
            | TaskIo::Exited { job, .. }
            | TaskIo::Failed { job, .. }
            | TaskIo::InputTaken { job, .. } => *job,
        }
    }
}

/// The most input `grun` sends ahead of what task 0 has taken.
pub const INPUT_WINDOW: u64 = 1 << 20;
/// The most input an agent holds for a task (more is dropped, with a message): bounds
/// its memory against a client that ignores the window.
pub const INPUT_BUFFER_LIMIT: usize = 4 << 20;

/// What `grun` receives: the layout, then output and exits as they come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum StepUpdate {
    Started { step: u32, layout: StepLayout },
    Io(TaskIo),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPUs of a job large enough for every layout here.
    const HELD: u64 = 1 << 20;

    #[test]
    fn a_task_counts_as_srun_counts_it_and_an_unknown_end_as_a_failure() {
        assert_eq!(task_status(Some(0), None), 0);
        assert_eq!(task_status(Some(3), None), 3);
        assert_eq!(task_status(None, Some(9)), 137);
        assert_eq!(task_status(Some(0), Some(15)), 143);
        assert_eq!(task_status(None, None), 1);
    }

    // Slurm 22.05 (tests/slurmdiff's peer), a 4-GPU job on one node: three concurrent
    // `srun --exact -n1 --gres=gpu:1` steps got GPUs 0, 1, 2; a `--gres=gpu:3` step after one
    // of gpu:1 got 1,2,3; a step naming no GPUs waited until all four were free; one
    // of `--gres=gpu:2` waited while only one was free; `--overlap` saw all four at once.
    #[test]
    fn steps_take_free_gpus_in_order_and_wait_for_held_ones() {
        assert_eq!(claim_gpus("n1", 4, &[], Some(1), false), Ok(vec![0]));
        assert_eq!(claim_gpus("n1", 4, &[0], Some(1), false), Ok(vec![1]));
        assert_eq!(claim_gpus("n1", 4, &[0], Some(3), false), Ok(vec![1, 2, 3]));
        assert_eq!(claim_gpus("n1", 4, &[1, 0, 2], Some(1), false), Ok(vec![3]));
        assert!(matches!(
            claim_gpus("n1", 4, &[0, 1, 2], Some(2), false),
            Err(StepGpuError::Busy {
                wanted: 2,
                free: 1,
                ..
            })
        ));
        assert!(matches!(
            claim_gpus("n1", 4, &[2], None, false),
            Err(StepGpuError::Busy {
                wanted: 4,
                free: 3,
                ..
            })
        ));
        assert_eq!(claim_gpus("n1", 4, &[], None, false), Ok(vec![0, 1, 2, 3]));
        assert_eq!(
            claim_gpus("n1", 4, &[0, 1, 2, 3], None, true),
            Ok(vec![0, 1, 2, 3])
        );
        assert_eq!(claim_gpus("n1", 4, &[0, 1], Some(1), true), Ok(vec![0]));
        assert_eq!(
            claim_gpus("n1", 4, &[0, 1, 2, 3], Some(0), false),
            Ok(vec![])
        );
        assert_eq!(claim_gpus("n1", 0, &[], None, false), Ok(vec![]));
    }

    #[test]
    fn a_step_asking_more_gpus_than_the_job_has_is_refused_not_left_waiting() {
        let e = claim_gpus("n2", 2, &[], Some(3), false).unwrap_err();
        assert_eq!(
            e,
            StepGpuError::MoreThanTheJob {
                node: "n2".into(),
                wanted: 3,
                job: 2
            }
        );
        assert!(e.to_string().contains("at most 2"));
        let per_task = StepGpus {
            per_node: None,
            bind: GpuBind::PerTask(1),
        };
        assert_eq!(per_task.wanted(3), Some(3));
        assert_eq!(StepGpus::default().wanted(3), None);
        let gres = StepGpus {
            per_node: Some(2),
            bind: GpuBind::PerTask(1),
        };
        assert_eq!(gres.wanted(3), Some(2));
    }

    fn req(nodes: u32, ntasks: u32, per_node: u32, nodelist: &[&str]) -> StepRequest {
        StepRequest {
            job: JobId(1),
            nodelist: nodelist.iter().map(|s| s.to_string()).collect(),
            nodes,
            ntasks,
            ntasks_per_node: per_node,
            argv: vec!["hostname".into()],
            env: BTreeMap::new(),
            cwd: "/".into(),
            pty: None,
            gpus: StepGpus::default(),
            overlap: false,
            name: None,
            overcommit: false,
            task_scripts: Default::default(),
            cpus_per_task: None,
            binding: Default::default(),
            srun_env: BTreeMap::new(),
        }
    }

    #[test]
    fn distributions_deal_ranks_as_srun_does() {
        use crate::binding::NodeDist;
        let job: Vec<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
        let with = |ntasks, dist| {
            let mut r = req(0, ntasks, 0, &[]);
            r.binding.nodes = dist;
            r.layout(&job, HELD).unwrap()
        };
        assert_eq!(with(4, NodeDist::Block).ranks, [vec![0, 1], vec![2, 3]]);
        assert_eq!(with(4, NodeDist::Cyclic).ranks, [vec![0, 2], vec![1, 3]]);
        assert_eq!(with(3, NodeDist::Cyclic).ranks, [vec![0, 2], vec![1]]);
        assert_eq!(
            with(6, NodeDist::Plane(2)).ranks,
            [vec![0, 1, 4, 5], vec![2, 3]]
        );
        let l = with(3, NodeDist::Plane(4));
        assert_eq!(
            (l.nodes, l.ranks),
            (vec!["n1".to_string()], vec![vec![0, 1, 2]])
        );
    }

    #[test]
    fn extreme_task_counts_are_refused_not_wrapped() {
        let job: Vec<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
        // 2^31 per node on two nodes once wrapped to 0 tasks and divided by zero.
        for (n, per) in [(0, 1u32 << 31), (0, u32::MAX), (u32::MAX, 0)] {
            let e = req(0, n, per, &[]).layout(&job, HELD).unwrap_err();
            assert!(
                matches!(e, crate::error::StepLayoutError::TooManyTasks(_)),
                "{e}"
            );
        }
        assert_eq!(
            req(0, 0, 2048, &[]).layout(&job, HELD).unwrap().ntasks,
            4096
        );
    }

    #[test]
    fn a_task_prologs_output_is_read_as_slurmstepd_reads_it() {
        let out = "export FROM_TP=yes\nprint   hello 0\nunset  UNSET_ME \njunk line\nexport =x\nexport  A =b=c\nunset \n";
        assert_eq!(
            prolog_lines(out),
            vec![
                PrologLine::Export("FROM_TP".into(), "yes".into()),
                PrologLine::Print("hello 0".into()),
                PrologLine::Unset("UNSET_ME".into()),
                PrologLine::Export("A".into(), "b=c".into()),
            ]
        );
    }

    #[test]
    fn a_step_may_ask_for_the_cpus_its_job_holds_and_no_more() {
        assert_eq!(check_cpus(4, None, 4), Ok(()));
        assert_eq!(check_cpus(2, Some(2), 4), Ok(()));
        let refused = check_cpus(4, None, 1).unwrap_err();
        assert_eq!(
            refused,
            crate::error::StepLayoutError::TooManyCpus { asked: 4, held: 1 }
        );
        assert_eq!(
            refused.to_string(),
            "More processors requested than permitted"
        );
        assert!(check_cpus(3, Some(2), 5).is_err());
        let job = vec!["n1".to_string()];
        let mut four = req(0, 4, 0, &[]);
        assert_eq!(
            four.layout(&job, 1),
            Err(crate::error::StepLayoutError::TooManyCpus { asked: 4, held: 1 })
        );
        four.overcommit = true;
        assert_eq!(four.layout(&job, 1).map(|l| l.ntasks), Ok(4));
    }

    #[test]
    fn layouts_as_srun_makes_them() {
        let job: Vec<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let l = req(0, 0, 0, &[]).layout(&job, HELD).unwrap();
        assert_eq!(
            (l.nodes.len(), l.ranks.clone(), l.ntasks),
            (3, vec![vec![0], vec![1], vec![2]], 3)
        );
        let l = req(1, 1, 0, &["n2"]).layout(&job, HELD).unwrap();
        assert_eq!((l.nodes, l.ranks), (vec!["n2".to_string()], vec![vec![0]]));
        let l = req(2, 5, 0, &[]).layout(&job, HELD).unwrap();
        assert_eq!(l.ranks, vec![vec![0, 1, 2], vec![3, 4]]);
        let l = req(0, 2, 0, &[]).layout(&job, HELD).unwrap();
        assert_eq!(
            l.nodes.len(),
            2,
            "fewer tasks than nodes shrinks the node count"
        );
        let l = req(0, 0, 4, &[]).layout(&job, HELD).unwrap();
        assert_eq!(l.ntasks, 12);
        assert!(matches!(
            req(0, 0, 0, &["n9"]).layout(&job, HELD),
            Err(crate::error::StepLayoutError::ForeignNode { node, .. }) if node == "n9"
        ));
        assert!(req(4, 0, 0, &[]).layout(&job, HELD).is_err());
        assert!(req(0, 100_000, 0, &[]).layout(&job, HELD).is_err());
    }
}
