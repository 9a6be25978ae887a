//! `gagentd`, the gsched node agent: discovers the node's GPUs, NUMA layout and NICs,
//! keeps a session with the controller leader, runs its node's part of each job (a node
//! run) under a supervisor of its own (own process group, cgroup, the owner's identity),
//! watches their logs and exits, and reports node health (Xids, lost GPUs).
//!
//! - [`discover`], [`sysfs`], [`nvml`]: what the node is made of.
//! - [`session`]: the controller connection; [`contact`]: the lease on node runs.
//! - [`runs`], [`supervise`], [`isolation`], [`identity`]: running jobs; [`tasks`]: the
//!   tasks of `grun`/`srun` steps; [`layout`]: where their files live and who may read
//!   them; [`devices`], [`devfilter`]: private GPUs.
//! - [`health`]: the health monitor; [`probe`]: the GPU health probe (device state, the
//!   active check, the verdict), run on unknown driver lines and between jobs.
//! - [`outbox`]: events kept on disk until acknowledged.
//! - [`slurm_names`]: Slurm's command names in jobs' login shells; [`limits`]: the
//!   locked-memory limit jobs inherit.

pub mod contact;
pub mod devfilter;
pub mod devices;
pub mod diagnose;
pub mod discover;
pub mod findings;
pub mod hang;
pub mod health;
pub mod identity;
pub mod isolation;
pub mod layout;
pub mod limits;
pub mod metrics;
pub mod monitor;
pub mod nvml;
pub mod outbox;
pub mod outside;
pub mod probe;
pub mod runs;
pub mod session;
pub mod slurm_names;
pub mod strays;
pub mod supervise;
pub mod sysfs;
pub mod tasks;
pub mod usage;
