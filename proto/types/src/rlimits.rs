//! Resource limits a job takes from where it was submitted, as Slurm propagates them
//! (`PropagateResourceLimits`, `--propagate`): the submitting command puts each soft limit
//! in `SLURM_RLIMIT_NAME` (prefixed `U` when the user asked with `--propagate`), and the
//! node sets it on the job's processes before they run and takes the variable out of
//! their environment (Slurm's sbatch.c `_set_rlimit_env`, slurmstepd's `ulimits.c`).

/// The limits Slurm knows, by its names (`slurm_rlimits_info.c`), each at the index of its
/// Linux resource number (`RLIMIT_CPU` is 0 ... `RLIMIT_AS` 9, asm-generic/resource.h).
pub const NAMES: [&str; 10] = [
    "CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK", "AS",
];

/// Propagated when `--propagate` is not given: all but the locked-memory limit, which the
/// node agent raises for RDMA (NCCL, UCX and MPI pin their buffers) where a login shell
/// has 8 MiB or less; Slurm's documentation gives the same advice for InfiniBand
/// (`PropagateResourceLimitsExcept=MEMLOCK`).
pub const DEFAULT: [&str; 9] = [
    "CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "AS",
];

/// A `--propagate` list gsched cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--propagate={0} is not valid: use ALL, NONE, or a list of AS, CORE, CPU, DATA, FSIZE, MEMLOCK, NOFILE, NPROC, RSS, STACK"
)]
pub struct PropagateError(pub String);

/// The limits `--propagate[=LIST]` names (`ALL`, the empty value, or none given: all;
/// `NONE`: none), as Slurm's `parse_rlimits` reads the list (any case, an optional
/// `RLIMIT_` prefix, separated by commas or blanks).
pub fn parse_propagate(text: &str) -> Result<Vec<&'static str>, PropagateError> {
    let bad = || PropagateError(text.to_string());
    let words: Vec<String> = text
        .split([',', ' ', '\t', '\n'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let up = w.to_ascii_uppercase();
            up.strip_prefix("RLIMIT_").map(str::to_string).unwrap_or(up)
        })
        .collect();
    match words.as_slice() {
        [] => Ok(NAMES.to_vec()),
        [w] if w == "ALL" => Ok(NAMES.to_vec()),
        [w] if w == "NONE" => Ok(Vec::new()),
        _ => words
            .iter()
            .map(|w| NAMES.iter().copied().find(|n| n == w).ok_or_else(bad))
            .collect(),
    }
}

/// Limit `name`'s Linux resource number.
pub fn resource(name: &str) -> Option<u32> {
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// The variable that carries limit `name`.
pub fn var_name(name: &str) -> String {
    format!("SLURM_RLIMIT_{name}")
}

/// A variable's value: the soft limit (`u64::MAX`: unlimited), and whether the user asked
/// for it (`U`: then a limit the node cannot give is an error, not silently lowered).
pub fn parse_value(value: &str) -> Option<(u64, bool)> {
    match value.strip_prefix('U') {
        Some(v) => v.parse().ok().map(|n| (n, true)),
        None => value.parse().ok().map(|n| (n, false)),
    }
}

/// A variable's value for soft limit `soft`, `asked` with `--propagate`.
pub fn value(soft: u64, asked: bool) -> String {
    if asked {
        format!("U{soft}")
    } else {
        soft.to_string()
    }
}

/// One limit a job's processes get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub name: &'static str,
    pub soft: u64,
    pub asked: bool,
}

/// Takes every `SLURM_RLIMIT_*` variable out of `env` and returns the limits they ask for
/// (a malformed or unknown one is dropped, as slurmstepd drops it).
pub fn take(env: &mut Vec<(String, String)>) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    env.retain(|(k, v)| {
        let Some(name) = k.strip_prefix("SLURM_RLIMIT_") else {
            return true;
        };
        if let (Some(name), Some((soft, asked))) =
            (NAMES.iter().copied().find(|n| *n == name), parse_value(v))
        {
            wanted.push(Wanted { name, soft, asked });
        }
        false
    });
    wanted
}

/// What a node does with `wanted` given its own hard limit: the soft limit to set, or,
/// for one the user asked for above the hard limit, the message to show instead (an
/// unasked one is lowered to the hard limit, as slurmstepd does).
pub fn settle(wanted: Wanted, hard: u64) -> Result<u64, String> {
    if wanted.soft <= hard {
        return Ok(wanted.soft);
    }
    if !wanted.asked {
        return Ok(hard);
    }
    let show = |n: u64| {
        if n == u64::MAX {
            "unlimited".to_string()
        } else {
            n.to_string()
        }
    };
    Err(format!(
        "Can't propagate RLIMIT_{} of {} from submit host: the node's hard limit is {}",
        wanted.name,
        show(wanted.soft),
        show(hard)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagate_lists_read_as_slurm_reads_them() {
        assert_eq!(parse_propagate(""), Ok(NAMES.to_vec()));
        assert_eq!(parse_propagate("ALL"), Ok(NAMES.to_vec()));
        assert_eq!(parse_propagate("all"), Ok(NAMES.to_vec()));
        assert_eq!(parse_propagate("NONE"), Ok(vec![]));
        assert_eq!(parse_propagate("STACK"), Ok(vec!["STACK"]));
        assert_eq!(
            parse_propagate("rlimit_nofile,CORE"),
            Ok(vec!["NOFILE", "CORE"])
        );
        for bad in ["BOGUS", "STACK,BOGUS", "ALL,STACK", "NONE,CORE"] {
            assert!(parse_propagate(bad).is_err(), "{bad}");
        }
        assert!(!DEFAULT.contains(&"MEMLOCK"));
        assert!(DEFAULT.iter().all(|d| NAMES.contains(d)));
    }

    #[test]
    fn limits_leave_the_environment_and_are_settled_against_the_node() {
        let mut env = vec![
            ("PATH".to_string(), "/bin".to_string()),
            (
                "SLURM_RLIMIT_STACK".to_string(),
                "U18446744073709551615".to_string(),
            ),
            ("SLURM_RLIMIT_NOFILE".to_string(), "1024".to_string()),
            ("SLURM_RLIMIT_BOGUS".to_string(), "1".to_string()),
        ];
        let wanted = take(&mut env);
        assert_eq!(env, vec![("PATH".to_string(), "/bin".to_string())]);
        assert_eq!(
            wanted,
            vec![
                Wanted {
                    name: "STACK",
                    soft: u64::MAX,
                    asked: true
                },
                Wanted {
                    name: "NOFILE",
                    soft: 1024,
                    asked: false
                },
            ]
        );
        assert_eq!(settle(wanted[1], 4096), Ok(1024));
        assert_eq!(
            settle(
                Wanted {
                    soft: 9999,
                    ..wanted[1]
                },
                4096
            ),
            Ok(4096)
        );
        assert_eq!(
            settle(wanted[0], 8 << 20),
            Err("Can't propagate RLIMIT_STACK of unlimited from submit host: the node's hard limit is 8388608".into())
        );
        assert_eq!(settle(wanted[0], u64::MAX), Ok(u64::MAX));
    }
}
