//! Whether a job's dependency on another job is met, may still be met, or never can be:
//! the one rule the scheduler (to keep a job pending) and the state machine (to end a job
//! whose dependency can never be met) both use.

use crate::input::DepView;
use gsched_types::job::{DependencyKind, JobState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepStatus {
    Satisfied,
    Waiting,
    /// The job depended on ended in a way that rules the dependency out (or is gone).
    Never,
}

/// The status of a dependency of `kind` on a job in the state `view` describes (`None`:
/// the job is unknown or was purged). `singleton` dependencies are not about one job and
/// are always satisfied here.
pub fn status(kind: DependencyKind, view: Option<DepView>) -> DepStatus {
    let Some(view) = view else {
        // Unknown or purged jobs count as ended; afterok cannot be proven.
        return match kind {
            DependencyKind::AfterOk => DepStatus::Never,
            _ => DepStatus::Satisfied,
        };
    };
    let done = view.state.is_terminal();
    let ok = view.state == JobState::Completed && view.exit_code.unwrap_or(0) == 0;
    let satisfied = match kind {
        DependencyKind::After => view.state != JobState::Pending,
        DependencyKind::AfterAny => done,
        DependencyKind::AfterOk => ok,
        DependencyKind::AfterNotOk => done && !ok,
        DependencyKind::Singleton => true,
    };
    match (satisfied, done) {
        (true, _) => DepStatus::Satisfied,
        (false, true) if matches!(kind, DependencyKind::AfterOk | DependencyKind::AfterNotOk) => {
            DepStatus::Never
        }
        _ => DepStatus::Waiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(state: JobState, exit_code: Option<i32>) -> Option<DepView> {
        Some(DepView { state, exit_code })
    }

    #[test]
    fn dependency_rules() {
        use DependencyKind::*;
        use JobState::*;
        let cases = [
            (AfterOk, v(Completed, Some(0)), DepStatus::Satisfied),
            (AfterOk, v(Failed, Some(1)), DepStatus::Never),
            (AfterOk, v(Running, None), DepStatus::Waiting),
            (AfterOk, None, DepStatus::Never),
            (AfterNotOk, v(Completed, Some(0)), DepStatus::Never),
            (AfterNotOk, v(Failed, Some(2)), DepStatus::Satisfied),
            (AfterAny, v(Cancelled, None), DepStatus::Satisfied),
            (AfterAny, v(Running, None), DepStatus::Waiting),
            (After, v(Pending, None), DepStatus::Waiting),
            (After, v(Running, None), DepStatus::Satisfied),
            (After, None, DepStatus::Satisfied),
        ];
        for (kind, view, want) in cases {
            assert_eq!(status(kind, view), want, "{kind:?} on {view:?}");
        }
    }
}
