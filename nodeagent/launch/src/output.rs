//! sbatch's output-file patterns: `%j` job id, `%x` job name, `%N` node name, `%u` user,
//! `%n` node rank, `%t` task rank, `%A`/`%a` array job/task id, `%%` a percent sign.

use gsched_types::launch::LaunchSpec;

/// Expands an output pattern for one node (and task).
pub fn expand(pattern: &str, launch: &LaunchSpec, node: &str, task: u32) -> String {
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
        let value = match chars.next() {
            Some('j') => launch.job.to_string(),
            Some('x') => launch.spec.name.clone(),
            Some('N') => node.to_string(),
            Some('u') => launch.spec.user.clone(),
            Some('n') => launch.node_rank.to_string(),
            Some('t') => task.to_string(),
            Some('A') => launch
                .array
                .map(|a| a.0.to_string())
                .unwrap_or_else(|| launch.job.to_string()),
            Some('a') => launch
                .array
                .map(|a| a.1.to_string())
                .unwrap_or_else(|| "4294967294".into()),
            Some('%') => "%".into(),
            Some(other) => format!("%{width}{other}"),
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
        assert_eq!(paths(&l, "n1").0, "/tmp/gsched-42.out");
    }
}
