//! Parsers for the values users type in `gsub` flags and `#SBATCH` lines: time limits in all
//! of sbatch's forms, memory sizes, `--gres`, `--array`, `--dependency` and `--signal`
//! expressions.

use crate::error::InputError;
use crate::job::{Dependency, DependencyKind, WarnSignal};

/// Parses a Slurm time limit: `minutes`, `minutes:seconds`, `hours:minutes:seconds`,
/// `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`. Returns seconds; `0`,
/// `INFINITE` and `UNLIMITED` give `Some(0)`, which means no limit (capped by the
/// partition's maximum).
pub fn time_limit(text: &str) -> Result<Option<u64>, InputError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("infinite") || t.eq_ignore_ascii_case("unlimited") {
        return Ok(Some(0));
    }
    let bad = || InputError::TimeLimit(text.to_string());
    if t.is_empty() {
        return Err(bad());
    }
    let num = |s: &str| -> Result<u64, InputError> {
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) || s.len() > 9 {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    let secs = if let Some((days, rest)) = t.split_once('-') {
        let d = num(days)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (h, m, s) = match parts.as_slice() {
            [h] => (num(h)?, 0, 0),
            [h, m] => (num(h)?, num(m)?, 0),
            [h, m, s] => (num(h)?, num(m)?, num(s)?),
            _ => return Err(bad()),
        };
        d * 86_400 + h * 3600 + m * 60 + s
    } else {
        let parts: Vec<&str> = t.split(':').collect();
        match parts.as_slice() {
            [m] => num(m)? * 60,
            [m, s] => num(m)? * 60 + num(s)?,
            [h, m, s] => num(h)? * 3600 + num(m)? * 60 + num(s)?,
            _ => return Err(bad()),
        }
    };
    if secs > MAX_TIME_LIMIT_S {
        return Err(InputError::TimeLimitTooLong(text.to_string()));
    }
    Ok(Some(secs))
}

/// The longest time limit a job, an account's or a QOS's MaxWall may have: ten years
/// (beyond it is a typo; UNLIMITED is the way to say none).
pub const MAX_TIME_LIMIT_S: u64 = 10 * 365 * 86_400;

/// Milliseconds since the epoch as Slurm prints times: `YYYY-MM-DDTHH:MM:SS` (UTC).
pub fn format_timestamp(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_date(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 as a (year, month, day), UTC.
pub fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats seconds as Slurm prints elapsed time: `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
pub fn format_duration(secs: u64) -> String {
    let d = secs / 86_400;
    let h = (secs % 86_400) / 3600;
    let m = (secs % 3600) / 60;
    let s = secs % 60;
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// Formats seconds as `scontrol show job` prints a limit: `HH:MM:SS`, or `D-HH:MM:SS` from
/// a day on.
pub fn format_hms(secs: u64) -> String {
    if secs >= 86_400 {
        return format_duration(secs);
    }
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Parses a memory size as sbatch does: a number with an optional K/M/G/T suffix, megabytes
/// by default. Returns megabytes; `0` keeps its special meaning (the whole node).
pub fn mem_mb(text: &str) -> Result<u64, InputError> {
    let t = text.trim();
    let bad = || InputError::MemorySize(text.to_string());
    if t.is_empty() {
        return Err(bad());
    }
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    if digits.is_empty() || digits.len() > 12 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit = unit.trim_end_matches(['B', 'b']);
    let mb = match unit.to_ascii_uppercase().as_str() {
        "" | "M" => n,
        "K" => n.div_ceil(1024),
        "G" => n * 1024,
        "T" => n * 1024 * 1024,
        _ => return Err(bad()),
    };
    Ok(mb)
}

/// A parsed `--gres=gpu[:type]:N` or `--gpus-per-node=[type:]N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRequest {
    pub gpu_type: Option<String>,
    pub count: u32,
}

/// Parses `--gres`. Only the `gpu` resource is known; several comma-separated entries are
/// allowed but only one GPU entry.
pub fn gres(text: &str) -> Result<GpuRequest, InputError> {
    let mut found: Option<GpuRequest> = None;
    for entry in text.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let parts: Vec<&str> = entry.split(':').collect();
        if parts[0] != "gpu" {
            return Err(InputError::UnknownGres {
                resource: parts[0].to_string(),
                text: text.to_string(),
            });
        }
        let req = match parts.as_slice() {
            ["gpu"] => GpuRequest {
                gpu_type: None,
                count: 1,
            },
            ["gpu", n] if n.chars().all(|c| c.is_ascii_digit()) => GpuRequest {
                gpu_type: None,
                count: count(n, "--gres")?,
            },
            ["gpu", t] => GpuRequest {
                gpu_type: Some(t.to_string()),
                count: 1,
            },
            ["gpu", t, n] => GpuRequest {
                gpu_type: Some(t.to_string()),
                count: count(n, "--gres")?,
            },
            _ => {
                return Err(InputError::Gres(text.to_string()));
            }
        };
        if found.replace(req).is_some() {
            return Err(InputError::GresTwice(text.to_string()));
        }
    }
    found.ok_or_else(|| InputError::Gres(text.to_string()))
}

/// Parses `--gpus-per-node` / `--gpus-per-task` values: `N` or `type:N`.
pub fn gpus(text: &str, flag: &str) -> Result<GpuRequest, InputError> {
    match text.rsplit_once(':') {
        Some((t, n)) => Ok(GpuRequest {
            gpu_type: Some(t.to_string()),
            count: count(n, flag)?,
        }),
        None => Ok(GpuRequest {
            gpu_type: None,
            count: count(text, flag)?,
        }),
    }
}

/// Parses a non-negative count for `flag`, with a message that names the flag.
pub fn count(text: &str, flag: &str) -> Result<u32, InputError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(InputError::Negative {
            flag: flag.to_string(),
            text: text.to_string(),
        });
    }
    t.parse::<u32>().map_err(|_| InputError::NotWholeNumber {
        flag: flag.to_string(),
        text: text.to_string(),
    })
}

/// Parses sbatch's `--array` spec (`0-15%4`, `1,3,5`, `0-20:5`) into task ids and the
/// optional limit of tasks running at once.
pub fn array(text: &str) -> Result<(Vec<u32>, Option<u32>), InputError> {
    let bad = || InputError::Array(text.to_string());
    let (spec, limit) = match text.split_once('%') {
        Some((s, l)) => (s, Some(l.trim().parse::<u32>().map_err(|_| bad())?)),
        None => (text, None),
    };
    let mut ids = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad());
        }
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| bad())?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(bad());
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|_| bad())?,
                b.parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let v = range.parse::<u32>().map_err(|_| bad())?;
                (v, v)
            }
        };
        if hi < lo || hi - lo > 100_000 {
            return Err(bad());
        }
        ids.extend((lo..=hi).step_by(step as usize));
        if ids.len() > 1_000_000 {
            return Err(InputError::ArrayFarTooLarge(text.to_string()));
        }
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > 10_000 {
        return Err(InputError::ArrayTooLarge {
            text: text.to_string(),
            tasks: ids.len(),
        });
    }
    if limit == Some(0) {
        return Err(bad());
    }
    Ok((ids, limit))
}

/// Parses `--dependency` (`afterok:12:13,afterany:14`, `singleton`; `?` separators, which
/// mean "any of", are refused since we only implement "all of").
pub fn dependency(text: &str) -> Result<Vec<Dependency>, InputError> {
    let bad = || InputError::Dependency(text.to_string());
    if text.contains('?') {
        return Err(InputError::DependencyAnyOf(text.to_string()));
    }
    let mut deps = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part == "singleton" {
            deps.push(Dependency {
                kind: DependencyKind::Singleton,
                job: None,
            });
            continue;
        }
        let mut pieces = part.split(':');
        let kind = match pieces.next() {
            Some("afterok") => DependencyKind::AfterOk,
            Some("afterany") => DependencyKind::AfterAny,
            Some("afternotok") => DependencyKind::AfterNotOk,
            Some("after") => DependencyKind::After,
            _ => return Err(bad()),
        };
        let mut any = false;
        for id in pieces {
            let id = id.split('+').next().unwrap_or(id);
            let job: u64 = id.parse().map_err(|_| bad())?;
            deps.push(Dependency {
                kind,
                job: Some(crate::JobId(job)),
            });
            any = true;
        }
        if !any {
            return Err(bad());
        }
    }
    Ok(deps)
}

/// Linux signal numbers by name, for `--signal` and `gcancel --signal`.
const SIGNALS: [(&str, i32); 20] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("WINCH", 28),
];

/// A signal by name (`USR1`, `SIGUSR1`, any case) or number (1-64).
pub fn signal(text: &str) -> Result<i32, InputError> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(InputError::SignalNumber(n))
        };
    }
    let upper = t.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| InputError::SignalName(t.to_string()))
}

/// Parses sbatch's `--switches=COUNT[@MAX-TIME]` (MAX-TIME in `--time`'s forms).
pub fn switches(text: &str) -> Result<crate::job::SwitchWait, InputError> {
    let bad = || InputError::Switches(text.to_string());
    let (count, wait) = match text.trim().split_once('@') {
        Some((c, w)) => (c, Some(w)),
        None => (text.trim(), None),
    };
    let count: u32 = count
        .parse()
        .ok()
        .filter(|c| (1..=1_000_000).contains(c))
        .ok_or_else(bad)?;
    let wait_s = match wait {
        None => None,
        Some(w) if w.eq_ignore_ascii_case("infinite") || w.eq_ignore_ascii_case("unlimited") => {
            return Err(bad());
        }
        Some(w) => Some(time_limit(w).map_err(|_| bad())?.unwrap_or(0)),
    };
    Ok(crate::job::SwitchWait { count, wait_s })
}

/// Parses sbatch's `--signal=[{R|B}:]SIG[@SECONDS]` (default 60 s before the time limit;
/// `R:` is accepted and means nothing here, as there are no reservations).
pub fn warn_signal(text: &str) -> Result<WarnSignal, InputError> {
    let mut rest = text.trim();
    let mut batch_only = false;
    loop {
        if let Some(r) = rest.strip_prefix("B:").or_else(|| rest.strip_prefix("b:")) {
            batch_only = true;
            rest = r;
        } else if let Some(r) = rest.strip_prefix("R:").or_else(|| rest.strip_prefix("r:")) {
            rest = r;
        } else {
            break;
        }
    }
    let (sig, secs) = match rest.split_once('@') {
        Some((s, t)) => (s, Some(t)),
        None => (rest, None),
    };
    let before_s = match secs {
        None => 60,
        Some(t) => t
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|s| *s <= 65_535)
            .ok_or_else(|| InputError::WarnSignalTime(text.to_string()))?,
    };
    Ok(WarnSignal {
        signal: signal(sig).map_err(|e| InputError::WarnSignal {
            text: text.to_string(),
            source: Box::new(e),
        })?,
        before_s,
        batch_only,
    })
}

/// A name gsched stores for admins' objects (reservations, accounts, QOS): 1-64 letters,
/// digits, `_`, `-` or `.`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_time_limit_past_ten_years_is_a_typo_refused() {
        assert!(matches!(
            time_limit("99999999-00:00:00"),
            Err(InputError::TimeLimitTooLong(_))
        ));
        assert!(matches!(
            time_limit("3651-00:00:00"),
            Err(InputError::TimeLimitTooLong(_))
        ));
        assert_eq!(time_limit("3650-00:00:00"), Ok(Some(MAX_TIME_LIMIT_S)));
        assert_eq!(time_limit("UNLIMITED"), Ok(Some(0)));
    }
    #[test]
    fn signal_specs_in_sbatch_forms() {
        let w = warn_signal("B:USR1@120").unwrap();
        assert_eq!((w.signal, w.before_s, w.batch_only), (10, 120, true));
        let w = warn_signal("SIGTERM").unwrap();
        assert_eq!((w.signal, w.before_s, w.batch_only), (15, 60, false));
        let w = warn_signal("R:12@30").unwrap();
        assert_eq!((w.signal, w.before_s, w.batch_only), (12, 30, false));
        for bad in ["USR3", "USR1@soon", "0", "USR1@70000", ""] {
            assert!(warn_signal(bad).is_err(), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn switch_requests_in_sbatch_forms() {
        let s = |t: &str| switches(t).map(|w| (w.count, w.wait_s));
        assert_eq!(s("1"), Ok((1, None)));
        assert_eq!(s("2@30"), Ok((2, Some(1800))), "minutes, as --time");
        assert_eq!(s("1@2:00:00"), Ok((1, Some(7200))));
        assert_eq!(s("1@1-0"), Ok((1, Some(86_400))));
        assert_eq!(s("1@0"), Ok((1, Some(0))));
        for bad in ["0", "", "@10", "x", "1@", "1@soon", "-1", "1@unlimited"] {
            assert_eq!(
                switches(bad),
                Err(InputError::Switches(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn timestamps_are_printed_as_slurm_prints_them() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00");
        assert_eq!(format_timestamp(1_796_083_200_000), "2026-12-01T00:00:00");
        assert_eq!(civil_date(-1), (1969, 12, 31));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
    }

    #[test]
    fn all_sbatch_time_forms() {
        assert_eq!(time_limit("30").unwrap(), Some(1800));
        assert_eq!(time_limit("30:15").unwrap(), Some(1815));
        assert_eq!(time_limit("1:30:15").unwrap(), Some(5415));
        assert_eq!(time_limit("2-3").unwrap(), Some(2 * 86_400 + 3 * 3600));
        assert_eq!(
            time_limit("2-3:04").unwrap(),
            Some(2 * 86_400 + 3 * 3600 + 240)
        );
        assert_eq!(
            time_limit("2-03:04:05").unwrap(),
            Some(2 * 86_400 + 3 * 3600 + 245)
        );
        assert_eq!(time_limit("UNLIMITED").unwrap(), Some(0), "no limit");
        assert_eq!(
            time_limit("0").unwrap(),
            Some(0),
            "0 is no limit, as in Slurm"
        );
        for bad in ["", "1:2:3:4", "abc", "-5", "1-", "1:x", "1-2:3:4:5"] {
            assert!(time_limit(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn formats_elapsed() {
        assert_eq!(format_duration(5), "0:05");
        assert_eq!(format_duration(3725), "1:02:05");
        assert_eq!(format_duration(90_061), "1-01:01:01");
        assert_eq!(format_hms(0), "00:00:00");
        assert_eq!(format_hms(3725), "01:02:05");
        assert_eq!(format_hms(90_061), "1-01:01:01");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(mem_mb("64G").unwrap(), 65_536);
        assert_eq!(mem_mb("500").unwrap(), 500);
        assert_eq!(mem_mb("2048K").unwrap(), 2);
        assert_eq!(mem_mb("0").unwrap(), 0);
        assert!(mem_mb("lots").is_err());
        assert!(mem_mb("-5G").is_err());
    }

    #[test]
    fn gres_forms() {
        assert_eq!(
            gres("gpu:8").unwrap(),
            GpuRequest {
                gpu_type: None,
                count: 8
            }
        );
        assert_eq!(
            gres("gpu:a100:4").unwrap(),
            GpuRequest {
                gpu_type: Some("a100".into()),
                count: 4
            }
        );
        assert_eq!(gres("gpu").unwrap().count, 1);
        assert!(gres("fpga:2").is_err());
        assert!(gres("gpu:a:b:c").is_err());
        assert_eq!(
            gpus("h100:4", "--gpus-per-node").unwrap(),
            GpuRequest {
                gpu_type: Some("h100".into()),
                count: 4
            }
        );
        assert!(matches!(
            gpus("-1", "--gpus-per-node"),
            Err(InputError::Negative { flag, .. }) if flag == "--gpus-per-node"
        ));
    }

    #[test]
    fn arrays() {
        assert_eq!(array("0-3%2").unwrap(), (vec![0, 1, 2, 3], Some(2)));
        assert_eq!(array("1,3,5").unwrap().0, vec![1, 3, 5]);
        assert_eq!(array("0-10:5").unwrap().0, vec![0, 5, 10]);
        assert!(array("5-1").is_err());
        assert!(array("x").is_err());
    }

    #[test]
    fn dependencies() {
        let d = dependency("afterok:12:13,singleton").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].kind, DependencyKind::AfterOk);
        assert_eq!(d[2].kind, DependencyKind::Singleton);
        assert!(dependency("afterok").is_err());
        assert!(dependency("afterok:1?afterany:2").is_err());
    }
}
