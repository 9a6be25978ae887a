//! `grun`/`srun` steps in their job's record: begun and ended as the leader that runs
//! them says, kept for `gqueue -s` and `gacct` (`JOBID.STEP`), at most
//! `MAX_RECORDED_STEPS` per job.

use super::ClusterState;
use crate::command::{Outcome, StepEnded, StepStarted};
use gsched_types::job::JobState;
use gsched_types::steps::{MAX_RECORDED_STEPS, StepRecord, StepState};

impl ClusterState {
    pub(super) fn step_started(&mut self, c: &StepStarted, at: u64) -> Outcome {
        let Some(job) = self.jobs.get_mut(&c.job) else {
            return Outcome::NotFound {
                message: format!("job {}", c.job),
            };
        };
        if job.state != JobState::Running || job.attempt != c.attempt {
            return Outcome::Rejected {
                message: format!(
                    "job {} is not running attempt {}: no step recorded",
                    c.job, c.attempt
                ),
            };
        }
        if job.steps.iter().any(|s| s.step == c.step) {
            return Outcome::Ok;
        }
        if job.steps.len() >= MAX_RECORDED_STEPS {
            let oldest = job
                .steps
                .iter()
                .position(|s| s.state != StepState::Running)
                .unwrap_or(0);
            job.steps.remove(oldest);
        }
        job.steps.push(StepRecord {
            step: c.step,
            name: c.name.chars().take(256).collect(),
            nodes: c.nodes.clone(),
            ntasks: c.ntasks,
            start_ms: at,
            end_ms: None,
            state: StepState::Running,
            exit_code: None,
            signal: None,
        });
        Outcome::Ok
    }

    pub(super) fn step_ended(&mut self, c: &StepEnded, at: u64) -> Outcome {
        let Some(step) = self
            .jobs
            .get_mut(&c.job)
            .and_then(|j| j.steps.iter_mut().find(|s| s.step == c.step))
        else {
            return Outcome::NotFound {
                message: format!("step {}.{}", c.job, c.step),
            };
        };
        if step.state == StepState::Running {
            step.state = c.state;
            step.end_ms = Some(at);
            step.exit_code = c.exit_code;
            step.signal = c.signal;
        }
        Outcome::Ok
    }
}
