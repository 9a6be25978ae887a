//! sbatch's output-file patterns: `%j` job id, `%x` job name, `%N` node name, `%u` user,
//! `%n` node rank, `%t` task rank, `%A`/`%a` array job/task id, `%%` a percent sign.

use gsched_types::job::JobId;
use gsched_types::launch::LaunchSpec;

/// What an output pattern's letters stand for; `None` leaves the letter as it is (a
/// job's path seen from outside any one node: `scontrol show job`).
pub struct PatternValues<'a> {
    pub job: JobId,
    pub name: &'a str,
    pub user: &'a str,
    /// (array job id, task id).
    pub array: Option<(JobId, u32)>,
    pub node: Option<&'a str>,
    pub node_rank: Option<u32>,
    pub task: Option<u32>,
}

/// Expands an output pattern for one node (and task).
pub fn expand(pattern: &str, launch: &LaunchSpec, node: &str, task: u32) -> String {
    expand_with(
        pattern,
        &PatternValues {
            job: launch.job,
            name: &launch.spec.name,
            user: &launch.spec.user,
            array: launch.array,
            node: Some(node),
            node_rank: Some(launch.node_rank),
            task: Some(task),
        },
    )
}

/// Expands an output pattern from `v`.
pub fn expand_with(pattern: &str, v: &PatternValues<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // Optional zero-padding width, as sbatch allows (%5j).
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0);
        let letter = chars.next();
        let kept = |l: char| format!("%{width}{l}");
        let value = match letter {
            // %J is "jobid.stepid"; the batch step's output, all that patterns name, is
            // the job id alone (sbatch's job.%J.out is job.1000.out).
            Some('j' | 'J') => v.job.to_string(),
            Some('x') => v.name.to_string(),
            Some('N') => v.node.map_or_else(|| kept('N'), str::to_string),
            Some('u') => v.user.to_string(),
            Some('n') => v.node_rank.map_or_else(|| kept('n'), |r| r.to_string()),
            Some('t') => v.task.map_or_else(|| kept('t'), |t| t.to_string()),
            Some('A') => v.array.map(|a| a.0).unwrap_or(v.job).to_string(),
            Some('a') => v
                .array
                .map(|a| a.1.to_string())
                .unwrap_or_else(|| "4294967294".into()),
            Some('%') => "%".into(),
            Some(other) => kept(other),
            None => "%".into(),
        };
        if w > 0 && value.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("{value:0>w$}"));
        } else {
            out.push_str(&value);
        }
    }
    out
}

/// The stdout and stderr paths for a node's step, absolute (relative patterns are taken
/// from the job's working directory). Without `-e`, stderr goes with stdout.
pub fn paths(launch: &LaunchSpec, node: &str) -> (String, Option<String>) {
    let spec = &launch.spec;
    let default = if launch.array.is_some() {
        "gsched-%A_%a.out"
    } else {
        "gsched-%j.out"
    };
    let abs = |p: String| {
        if p.starts_with('/') {
            p
        } else {
            format!("{}/{p}", spec.workdir.trim_end_matches('/'))
        }
    };
    let out = abs(expand(
        spec.output.as_deref().unwrap_or(default),
        launch,
        node,
        0,
    ));
    let err = spec
        .error
        .as_deref()
        .map(|e| abs(expand(e, launch, node, 0)));
    (out, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::job::{JobId, JobSpec};
    use gsched_types::resources::{Allocation, NodeAlloc};

    fn launch() -> LaunchSpec {
        let alloc = NodeAlloc {
            node: "n1".into(),
            gpus: vec![],
            cpus: vec![],
            mem_mb: 0,
            nic: None,
            exclusive: false,
        };
        LaunchSpec {
            job: JobId(42),
            array: None,
            array_span: None,
            attempt: 0,
            node_rank: 1,
            nodes: vec!["n0".into(), "n1".into()],
            spec: JobSpec::simple("train", "alice", "true"),
            allocation: Allocation {
                nodes: vec![alloc.clone()],
                master_addr: "h".into(),
                master_port: 1,
            },
            node_alloc: alloc,
            start_ms: 0,
            time_limit_s: None,
            kill_grace_s: None,
            idle_threshold_pct: None,
        }
    }

    #[test]
    fn sbatch_patterns() {
        let l = launch();
        assert_eq!(
            expand("%x-%j.%N.%u.%n.out", &l, "n1", 0),
            "train-42.n1.alice.1.out"
        );
        assert_eq!(expand("%5j%%", &l, "n1", 0), "00042%");
        // Slurm 22.05 (tests/slurmdiff 58): --output=job.%J.out wrote job.<id>.out.
        assert_eq!(expand("job.%J.out", &l, "n1", 0), "job.42.out");
        // Seen from outside any node (scontrol show job): node and task letters stay.
        let outside = PatternValues {
            job: l.job,
            name: &l.spec.name,
            user: &l.spec.user,
            array: None,
            node: None,
            node_rank: None,
            task: None,
        };
        assert_eq!(expand_with("%x-%j.%N.%n.%t", &outside), "train-42.%N.%n.%t");
        assert_eq!(paths(&l, "n1").0, "/tmp/gsched-42.out");
    }
}
