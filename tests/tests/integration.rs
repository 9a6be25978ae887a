//! Every cross-process test in one binary, so that tonic, rustls and the rest are linked
//! once and not once per area: `cargo test -p gsched-tests --test integration` runs them
//! all, `... --test integration trust::` one area's, `... --test integration t90` one test.
//! Each area is a module of its own file here.

mod associations;
mod bulk;
mod clients;
mod dashboard;
mod diagnose;
mod doctor;
mod faults;
mod foundation;
mod ha;
mod health;
mod httpfuzz;
mod interactive;
mod lab;
mod launch;
mod livefuzz;
mod metrics;
mod onebox;
mod reservations;
mod slurm;
mod slurm_scripts;
mod slurmdiff;
mod tidy;
mod trust;
