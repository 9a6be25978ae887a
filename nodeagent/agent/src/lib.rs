//! `gagentd`, the gsched node agent: discovers the node's GPUs, NUMA layout and NICs,
//! keeps a session with the controller leader, runs job steps under a per-step supervisor
//! (own process group, cgroup, the owner's identity), watches their logs and exits, and
//! reports node health (Xids, lost GPUs).
//!
//! - [`discover`], [`sysfs`], [`nvml`]: what the node is made of.
//! - [`session`]: the controller connection; [`contact`]: the lease on running steps.
//! - [`steps`], [`supervise`], [`isolation`], [`identity`]: running jobs; [`layout`]: where
//!   their files live and who may read them; [`devices`], [`devfilter`]: private GPUs.
//! - [`health`]: the health monitor.
//! - [`outbox`]: events kept on disk until acknowledged.

pub mod contact;
pub mod devfilter;
pub mod devices;
pub mod diagnose;
pub mod discover;
pub mod findings;
pub mod health;
pub mod identity;
pub mod isolation;
pub mod layout;
pub mod metrics;
pub mod monitor;
pub mod nvml;
pub mod outbox;
pub mod session;
pub mod steps;
pub mod supervise;
pub mod sysfs;
pub mod tasks;
pub mod usage;
