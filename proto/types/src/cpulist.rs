//! Linux CPU-list strings ("0-31,64-95") to sorted CPU ids and back.

use crate::error::CpuListError;
use std::fmt::Write;

/// Parses a Linux cpulist such as `0-3,8,10-11`. Whitespace is ignored; an empty string is
/// the empty set.
pub fn parse(text: &str) -> Result<Vec<u32>, CpuListError> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match part.split_once('-') {
            Some((lo, hi)) => {
                let lo: u32 = lo
                    .trim()
                    .parse()
                    .map_err(|_| CpuListError::Range(part.to_string()))?;
                let hi: u32 = hi
                    .trim()
                    .parse()
                    .map_err(|_| CpuListError::Range(part.to_string()))?;
                if hi < lo || hi - lo > 65_536 {
                    return Err(CpuListError::Range(part.to_string()));
                }
                cpus.extend(lo..=hi);
                if cpus.len() > 1 << 20 {
                    return Err(CpuListError::TooMany(text.trim().to_string()));
                }
            }
            None => cpus.push(
                part.parse()
                    .map_err(|_| CpuListError::Id(part.to_string()))?,
            ),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU ids as a compact cpulist (`0-3,8`).
pub fn format(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// Parses a hexadecimal affinity mask as printed by NVML or sysfs `cpumap`
/// (`ffffffff` or comma-grouped `00000000,0000ffff`) into CPU ids.
pub fn parse_mask(mask: &str) -> Result<Vec<u32>, CpuListError> {
    let digits: String = mask
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| *c != ',')
        .collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(CpuListError::Mask(mask.to_string()));
    }
    let mut cpus = Vec::new();
    for (nibble_index, c) in digits.chars().rev().enumerate() {
        let v = c.to_digit(16).unwrap_or(0);
        for bit in 0..4 {
            if v & (1 << bit) != 0 {
                cpus.push(nibble_index as u32 * 4 + bit);
            }
        }
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_ranges() {
        let cpus = parse("0-55,112-167").unwrap();
        assert_eq!(cpus.len(), 112);
        assert_eq!(format(&cpus), "0-55,112-167");
        assert_eq!(format(&[3, 1, 2, 7]), "1-3,7");
        assert_eq!(parse(" ").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("a-b").is_err());
        assert!(parse("5-2").is_err());
    }

    #[test]
    fn parses_masks() {
        assert_eq!(parse_mask("ffffffff").unwrap(), (0..32).collect::<Vec<_>>());
        assert_eq!(parse_mask("00000001,00000000").unwrap(), vec![32]);
        assert!(parse_mask("xyz").is_err());
    }
}
