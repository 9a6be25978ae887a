//! `gsim`: replays GPU job traces on a simulated cluster with a virtual clock, driving the
//! same `gsched_scheduler::plan` the controller runs, and compares policies side by side;
//! also benchmarks a single scheduling pass at scale.

pub mod bench;
pub mod cluster;
pub mod engine;
pub mod trace;
