//! `grun` (srun's twin): run a command as a step of the job it is called from, tasks over
//! the job's nodes (`-N`, `-n`, `--ntasks-per-node`, `-w`, `-x`, `-r`, `--distribution`),
//! each with its `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_ID`... and,
//! with `--cpu-bind`/`--hint`, its CPUs; their output comes back here (to files per
//! `--output`/`--error` patterns, `-l` labelled), and grun exits with the highest task
//! exit status. grun's stdin goes to task 0; `--pty` runs that one task in a terminal on
//! its node. Outside a job, grun first gets an allocation for the step, as srun does.

pub mod args;
pub mod input;
pub mod output;
pub mod request;
pub mod run;
pub mod scripts;
pub mod terminal;

pub use args::RunArgs;
