//! The resource limits a run's tasks take from where the job or step was submitted
//! (`SLURM_RLIMIT_*`, `gsched_types::rlimits`): taken out of the tasks' environments and
//! settled against this node's hard limits before the fork, set in each child before exec.

use gsched_launch::plan::Plan;
use gsched_types::rlimits;

/// A soft limit to set: the resource number, the soft limit and the hard one it keeps.
pub(super) type Setting = (u32, u64, u64);

/// What the run's tasks get, and the limits asked for with `--propagate` that this node
/// cannot give (their messages, for the first task's stderr).
#[derive(Debug, Default)]
pub(super) struct Limits {
    pub(super) set: Vec<Setting>,
    pub(super) refused: Vec<String>,
}

/// Takes the variables out of every task's environment and settles the first task's
/// (all of a run's tasks carry the same) against this process's hard limits.
pub(super) fn take(plan: &mut Plan) -> Limits {
    let mut wanted = Vec::new();
    for (i, env) in plan.tasks.iter_mut().enumerate() {
        let w = rlimits::take(env);
        if i == 0 {
            wanted = w;
        }
    }
    let mut limits = Limits::default();
    for w in wanted {
        let Some(resource) = rlimits::resource(w.name) else {
            continue;
        };
        let Some(hard) = hard_limit(resource) else {
            continue;
        };
        match rlimits::settle(w, hard) {
            Ok(soft) => limits.set.push((resource, soft, hard)),
            Err(message) => limits.refused.push(format!("gsched: error: {message}\n")),
        }
    }
    limits
}

fn hard_limit(resource: u32) -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `r`, which outlives the call.
    let ok = unsafe { libc::getrlimit(resource as libc::__rlimit_resource_t, &mut r) } == 0;
    ok.then_some(r.rlim_max)
}

/// Sets `settings` on this process; runs in the child between fork and exec (setrlimit is
/// async-signal-safe, and nothing here allocates). A limit that cannot be set stays as
/// the node's.
pub(super) fn apply(settings: &[Setting]) {
    for (resource, soft, hard) in settings {
        let r = libc::rlimit {
            rlim_cur: *soft,
            rlim_max: *hard,
        };
        // SAFETY: setrlimit reads one `rlimit` from `r`, which outlives the call.
        let _ = unsafe { libc::setrlimit(*resource as libc::__rlimit_resource_t, &r) };
    }
}
