//! Trace files: the Philly 2017 digest (`job_id,submit_time_s,num_gpus,duration_s,vc,...`)
//! and Alibaba openb 2023 (`job_id,submit_time_s,num_gpus,duration_s,...`), read by column
//! name. Fractional-GPU pods count as one whole GPU; rows without a duration are skipped.

use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub id: String,
    pub submit_s: u64,
    pub gpus: u32,
    pub duration_s: u64,
    /// Philly virtual cluster (used as the account for fair share), or "default".
    pub group: String,
}

/// Why a trace file cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("empty trace")]
    Empty,
    #[error("trace has no {0} column")]
    MissingColumn(&'static str),
    #[error("line {line}: bad num_gpus '{value}'")]
    Gpus { line: usize, value: String },
    #[error("line {0}: bad submit time")]
    SubmitTime(usize),
}

pub fn load(path: &Path, limit: Option<usize>) -> Result<Vec<TraceJob>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or(TraceError::Empty)?
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (id, submit, gpus, dur) = (
        col("job_id"),
        col("submit_time_s").ok_or(TraceError::MissingColumn("submit_time_s"))?,
        col("num_gpus").ok_or(TraceError::MissingColumn("num_gpus"))?,
        col("duration_s").ok_or(TraceError::MissingColumn("duration_s"))?,
    );
    let group = col("vc");
    let mut out = Vec::new();
    for (n, line) in lines.enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let f: Vec<&str> = line.split(',').collect();
        let get = |i: usize| f.get(i).map(|s| s.trim()).unwrap_or("");
        let Ok(duration_s) = get(dur).parse::<f64>() else {
            continue;
        };
        let g: u32 = get(gpus).parse().map_err(|_| TraceError::Gpus {
            line: n + 2,
            value: get(gpus).to_string(),
        })?;
        if g == 0 {
            continue;
        }
        out.push(TraceJob {
            id: id
                .map(|i| get(i).to_string())
                .unwrap_or_else(|| format!("job{n}")),
            submit_s: get(submit)
                .parse::<f64>()
                .map_err(|_| TraceError::SubmitTime(n + 2))? as u64,
            gpus: g,
            duration_s: duration_s.max(1.0) as u64,
            group: group
                .map(|i| get(i).to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
        });
    }
    out.sort_by_key(|j| j.submit_s);
    Ok(out)
}

/// The documented time-limit estimate rule (traces carry no limits): users round 1.5x the
/// run time up to a familiar value (15 min, 1 h, 2 h, 4 h, 8 h, 12 h, 1, 2, 3, 7, 14, 30,
/// 60 days), or to whole days beyond that. Every policy sees the same limits, and no job
/// runs past its limit.
pub fn estimate_limit(duration_s: u64) -> u64 {
    const GRID: [u64; 13] = [
        900, 3600, 7200, 14_400, 28_800, 43_200, 86_400, 172_800, 259_200, 604_800, 1_209_600,
        2_592_000, 5_184_000,
    ];
    let want = duration_s + duration_s / 2;
    GRID.iter()
        .copied()
        .find(|g| *g >= want)
        .unwrap_or(want.div_ceil(86_400) * 86_400)
}

/// How a trace job asks for GPUs: up to 8 on one node; above that, whole 8-GPU nodes
/// (or an even split, e.g. 12 = 2 x 6).
pub fn shape(gpus: u32, max_per_node: u32) -> (u32, u32) {
    if gpus <= max_per_node {
        return (1, gpus);
    }
    let nodes = gpus.div_ceil(max_per_node);
    (nodes, gpus.div_ceil(nodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_and_cover_the_run() {
        assert_eq!(estimate_limit(600), 900);
        assert_eq!(estimate_limit(1144), 3600);
        assert_eq!(estimate_limit(100_000), 172_800);
        for d in [1, 59, 3599, 86_400, 4_628_226] {
            assert!(estimate_limit(d) >= d);
        }
    }

    #[test]
    fn shapes() {
        assert_eq!(shape(4, 8), (1, 4));
        assert_eq!(shape(16, 8), (2, 8));
        assert_eq!(shape(12, 8), (2, 6));
    }
}
