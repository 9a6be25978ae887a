//! The submitting process's soft resource limits as the `SLURM_RLIMIT_*` variables a job
//! takes them from (`--propagate`; `gsched_types::rlimits` has the rules).

use gsched_types::rlimits::{self, PropagateError};
use std::collections::BTreeMap;

/// The variables for `--propagate` as given (`None`: not given, so gsched's default list,
/// not marked as asked for), each limit as `soft_limit` reads it.
pub fn variables(
    propagate: Option<&str>,
    soft_limit: fn(&str) -> Option<u64>,
) -> Result<BTreeMap<String, String>, PropagateError> {
    let (names, asked) = match propagate {
        Some(p) => (rlimits::parse_propagate(p)?, true),
        None => (rlimits::DEFAULT.to_vec(), false),
    };
    Ok(names
        .into_iter()
        .filter_map(|n| soft_limit(n).map(|s| (rlimits::var_name(n), rlimits::value(s, asked))))
        .collect())
}

/// This process's soft limit `name` (`u64::MAX`: unlimited).
pub fn soft_limit(name: &str) -> Option<u64> {
    let resource = rlimits::resource(name)?;
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `r`, which outlives the call.
    let ok = unsafe { libc::getrlimit(resource as libc::__rlimit_resource_t, &mut r) } == 0;
    ok.then_some(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_passed_as_slurm_passes_them() {
        let fixed = |n: &str| (n != "RSS").then_some(if n == "STACK" { u64::MAX } else { 1024 });
        let default = variables(None, fixed).unwrap();
        assert_eq!(
            default.get("SLURM_RLIMIT_NOFILE").map(String::as_str),
            Some("1024")
        );
        assert_eq!(
            default.get("SLURM_RLIMIT_STACK").map(String::as_str),
            Some("18446744073709551615")
        );
        assert!(
            !default.contains_key("SLURM_RLIMIT_MEMLOCK"),
            "not by default"
        );
        assert!(
            !default.contains_key("SLURM_RLIMIT_RSS"),
            "unreadable: left out"
        );
        let asked = variables(Some("STACK,MEMLOCK"), fixed).unwrap();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked["SLURM_RLIMIT_MEMLOCK"], "U1024");
        assert!(variables(Some("NONE"), fixed).unwrap().is_empty());
        assert!(variables(Some("STACKS"), fixed).is_err());
        assert!(soft_limit("NOFILE").is_some_and(|n| n > 0));
    }
}
