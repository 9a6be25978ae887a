//! The gsched command-line tools (`gsub`, `gqueue`, `ginfo`, `gcancel`, `gacct`, `gctl`):
//! a shared controller client with failover, sbatch-compatible option parsing and
//! Slurm-shaped output.

pub mod client;
pub mod format;
pub mod sbatch;

/// Parses a job id as users write it: `123`, or `120_3` for a task of array 120 (returns
/// the array id and task).
pub fn parse_job_id(text: &str) -> Result<(u64, Option<u32>), String> {
    let bad = || format!("invalid job id '{text}': use a number like 123 or 120_3");
    match text.split_once('_') {
        Some((a, t)) => Ok((
            a.parse().map_err(|_| bad())?,
            Some(t.parse().map_err(|_| bad())?),
        )),
        None => Ok((text.parse().map_err(|_| bad())?, None)),
    }
}

/// Process setup every tool does first: die quietly on a closed pipe (`gqueue | head`)
/// instead of panicking, as Unix tools do.
pub fn init() {
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
