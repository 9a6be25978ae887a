//! Slurm hostlist expressions: `node[01-04,07],login1` to names and back.

use crate::error::HostlistError;

/// No hostlist gsched accepts names more hosts than this (the product of several bracket
/// groups grows fast; found by fuzzing).
pub const MAX_HOSTS: usize = 65_536;

/// Expands a hostlist expression into host names, in the order written.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut hosts = Vec::new();
    for item in split_top_level(expr.trim())? {
        if item.is_empty() {
            continue;
        }
        expand_item(&item, &mut hosts)?;
        if hosts.len() > MAX_HOSTS {
            return Err(HostlistError::TooMany(expr.trim().to_string()));
        }
    }
    Ok(hosts)
}

fn split_top_level(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in expr.chars() {
        match c {
            '[' => {
                depth += 1;
                current.push(c);
            }
            ']' => {
                if depth == 0 {
                    return Err(HostlistError::UnbalancedClose(expr.to_string()));
                }
                depth -= 1;
                current.push(c);
            }
            ',' | ' ' if depth == 0 => items.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if depth != 0 {
        return Err(HostlistError::UnbalancedOpen(expr.to_string()));
    }
    items.push(current);
    Ok(items)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), HostlistError> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Ok(());
    };
    let close = item[open..]
        .find(']')
        .map(|i| i + open)
        .ok_or_else(|| HostlistError::UnbalancedOpen(item.to_string()))?;
    let prefix = &item[..open];
    let ranges = &item[open + 1..close];
    let suffix = &item[close + 1..];
    let mut expanded_suffix = Vec::new();
    expand_item(suffix, &mut expanded_suffix)?;
    for range in ranges.split(',') {
        let range = range.trim();
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let width = lo.len();
        let lo_n: u64 = lo
            .parse()
            .map_err(|_| HostlistError::Range(range.to_string()))?;
        let hi_n: u64 = hi
            .parse()
            .map_err(|_| HostlistError::Range(range.to_string()))?;
        if hi_n < lo_n || hi_n - lo_n > 100_000 {
            return Err(HostlistError::Range(range.to_string()));
        }
        let adds = (hi_n - lo_n + 1).saturating_mul(expanded_suffix.len() as u64);
        if out.len() as u64 + adds > MAX_HOSTS as u64 {
            return Err(HostlistError::TooMany(item.to_string()));
        }
        for n in lo_n..=hi_n {
            for s in &expanded_suffix {
                out.push(format!("{prefix}{n:0width$}{s}"));
            }
        }
    }
    Ok(())
}

/// Compresses host names into a hostlist expression (`node[01-03,05]`). Names that share a
/// prefix and a numeric suffix of the same width are grouped; order of first appearance of
/// each prefix is kept.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    let mut order = 0usize;
    for h in hosts {
        let h = h.as_ref();
        let digits = h.chars().rev().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 18 {
            plain.push((order, h.to_string()));
            order += 1;
            continue;
        }
        let (prefix, num) = h.split_at(h.len() - digits);
        let n: u64 = num.parse().unwrap_or(0);
        let width = if num.starts_with('0') && num.len() > 1 {
            num.len()
        } else {
            0
        };
        match groups
            .iter_mut()
            .find(|(p, w, _)| p == prefix && *w == width)
        {
            Some((_, _, nums)) => nums.push(n),
            None => {
                groups.push((prefix.to_string(), width, vec![n]));
                plain.push((order, String::new()));
                order += 1;
            }
        }
    }
    let mut group_iter = groups.into_iter();
    let mut parts = Vec::new();
    for (_, name) in plain {
        if !name.is_empty() {
            parts.push(name);
            continue;
        }
        let Some((prefix, width, mut nums)) = group_iter.next() else {
            continue;
        };
        nums.sort_unstable();
        nums.dedup();
        if nums.len() == 1 {
            parts.push(format!("{prefix}{:0width$}", nums[0]));
            continue;
        }
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < nums.len() {
            let start = nums[i];
            while i + 1 < nums.len() && nums[i + 1] == nums[i] + 1 {
                i += 1;
            }
            let end = nums[i];
            if start == end {
                ranges.push(format!("{start:0width$}"));
            } else {
                ranges.push(format!("{start:0width$}-{end:0width$}"));
            }
            i += 1;
        }
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_products_are_refused_not_expanded() {
        // Found by cargo fuzz (sbatch_values): two bracket groups multiply to 41 million.
        let err = expand("de[0-20710]x[0-2010]").unwrap_err();
        assert!(matches!(err, HostlistError::TooMany(_)), "{err}");
        assert!(err.to_string().contains("more than 65536 hosts"), "{err}");
        let many = (0..100)
            .map(|i| format!("r{i}n[0-999]"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(expand(&many).is_err());
        assert_eq!(expand("n[1-3]x[1-2]").unwrap().len(), 6);
    }

    #[test]
    fn expands_ranges_with_padding() {
        assert_eq!(
            expand("node[01-03,07]").unwrap(),
            vec!["node01", "node02", "node03", "node07"]
        );
        assert_eq!(expand("a,b[1-2]").unwrap(), vec!["a", "b1", "b2"]);
        assert_eq!(
            expand("rack[1-2]-n[1-2]").unwrap(),
            vec!["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
        );
    }

    #[test]
    fn compresses_like_slurm() {
        assert_eq!(
            compress(&["node01", "node02", "node03", "node05"]),
            "node[01-03,05]"
        );
        assert_eq!(compress(&["gpu1", "gpu2"]), "gpu[1-2]");
        assert_eq!(compress(&["login", "gpu1"]), "login,gpu1");
        assert_eq!(compress(&["n1"]), "n1");
    }

    #[test]
    fn round_trip() {
        let hosts = expand("n[1-9],m[010-012]").unwrap();
        assert_eq!(expand(&compress(&hosts)).unwrap(), hosts);
    }

    #[test]
    fn rejects_unbalanced() {
        assert!(expand("node[1-2").is_err());
        assert!(expand("node1-2]").is_err());
        assert!(expand("node[a-b]").is_err());
    }
}
