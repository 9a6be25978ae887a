//! Points in time as Slurm's tools accept them (`--begin`, `sacct -S/-E`): `now`,
//! `now+1hour`, `now-2days`, `today`, `midnight`, `tomorrow`, `HH:MM[:SS]` (today),
//! `YYYY-MM-DD[THH:MM[:SS]]`, all in local time, or seconds since the epoch as `@N`.

use chrono::{Duration, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};

/// A time that none of the accepted forms reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot read the time '{0}': use now, now+N[units], now-N[units], today, midnight, tomorrow, HH:MM[:SS] or YYYY-MM-DD[THH:MM[:SS]] (units: seconds, minutes, hours, days, weeks)"
)]
pub struct WhenError(pub String);

/// Milliseconds since the epoch for `text`, read at `now` (local time).
pub fn parse_at(text: &str, now: chrono::DateTime<Local>) -> Result<u64, WhenError> {
    let t = text.trim();
    let bad = || WhenError(text.to_string());
    let midnight = |d: NaiveDate| -> Result<u64, WhenError> {
        local_ms(d.and_time(NaiveTime::MIN)).ok_or_else(bad)
    };
    let lower = t.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(now.timestamp_millis().max(0) as u64);
        }
        let (sign, amount) = match rest.as_bytes()[0] {
            b'+' => (1i64, &rest[1..]),
            b'-' => (-1i64, &rest[1..]),
            _ => return Err(bad()),
        };
        let digits: String = amount.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n: i64 = digits.parse().map_err(|_| bad())?;
        let unit = &amount[digits.len()..];
        let secs = match unit {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => n,
            "m" | "min" | "mins" | "minute" | "minutes" => n * 60,
            "h" | "hour" | "hours" => n * 3600,
            "d" | "day" | "days" => n * 86_400,
            "w" | "week" | "weeks" => n * 604_800,
            _ => return Err(bad()),
        };
        let at = now + Duration::seconds(sign * secs);
        return Ok(at.timestamp_millis().max(0) as u64);
    }
    match lower.as_str() {
        "today" | "midnight" => return midnight(now.date_naive()),
        "tomorrow" => return midnight(now.date_naive() + Duration::days(1)),
        _ => {}
    }
    if let Some(epoch) = t.strip_prefix('@') {
        return epoch.parse::<u64>().map(|s| s * 1000).map_err(|_| bad());
    }
    for f in ["%H:%M:%S", "%H:%M"] {
        if let Ok(time) = NaiveTime::parse_from_str(t, f) {
            return local_ms(now.date_naive().and_time(time)).ok_or_else(bad);
        }
    }
    for f in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(t, f) {
            return local_ms(dt).ok_or_else(bad);
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return midnight(d);
    }
    Err(bad())
}

/// [`parse_at`] at the current time.
pub fn parse(text: &str) -> Result<u64, WhenError> {
    parse_at(text, Local::now())
}

/// Midnight today, local time (sacct's default start).
pub fn today_ms() -> u64 {
    parse("today").unwrap_or(0)
}

fn local_ms(dt: NaiveDateTime) -> Option<u64> {
    Local
        .from_local_datetime(&dt)
        .earliest()
        .map(|t| t.timestamp_millis().max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_absolute_and_bad_times() {
        let now = Local.with_ymd_and_hms(2026, 11, 30, 15, 30, 0).unwrap();
        let ms = |t: &str| parse_at(t, now).unwrap();
        let base = now.timestamp_millis() as u64;
        assert_eq!(ms("now"), base);
        assert_eq!(ms("now+1hour"), base + 3_600_000);
        assert_eq!(ms("now-2days"), base - 2 * 86_400_000);
        assert_eq!(ms("now+90"), base + 90_000);
        assert_eq!(ms("16:00"), base + 30 * 60_000);
        assert_eq!(ms("today"), base - (15 * 3600 + 30 * 60) * 1000);
        assert_eq!(ms("tomorrow"), ms("today") + 86_400_000);
        assert_eq!(ms("2026-11-30T15:30:00"), base);
        assert_eq!(ms("2026-11-30"), ms("today"));
        assert_eq!(ms("@1000"), 1_000_000);
        for bad in [
            "",
            "yesterday-ish",
            "now+",
            "now+3parsecs",
            "25:00",
            "2026-13-01",
        ] {
            assert!(parse_at(bad, now).is_err(), "{bad}");
        }
    }
}
