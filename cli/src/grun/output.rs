//! Where a step's task output goes, as srun's `--output`/`--error` say: grun's own
//! stdout and stderr, nowhere (`none`), one file, or a file per task (`%t`) or per node
//! (`%n`, `%N`), named by Slurm's filename patterns; `-l` labels lines with the rank.

use std::collections::BTreeMap;
use std::io::Write;

/// The letters of a pattern as they are for one task of a step.
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub job: u64,
    pub step: u32,
    pub job_name: String,
    pub user: String,
    /// (array job id, task id).
    pub array: Option<(u64, u32)>,
}

/// Expands srun's filename pattern for task `rank` on `node` (the step's `node_index`-th):
/// `%j` job, `%J` job.step, `%s` step, `%t` rank, `%n` node index, `%N` node, `%u` user,
/// `%x` job name, `%A`/`%a` array job/task, `%%`; a number after `%` zero-pads; a
/// backslash anywhere leaves the pattern unexpanded (without its backslashes).
pub fn expand(pattern: &str, n: &Names, rank: u32, node: &str, node_index: u32) -> String {
    if pattern.contains('\\') {
        return pattern.replace('\\', "");
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0);
        let value = match chars.next() {
            Some('j') => n.job.to_string(),
            Some('J') => format!("{}.{}", n.job, n.step),
            Some('s') => n.step.to_string(),
            Some('t') => rank.to_string(),
            Some('n') => node_index.to_string(),
            Some('N') => node.to_string(),
            Some('u') => n.user.clone(),
            Some('x') => n.job_name.clone(),
            Some('A') => n.array.map_or(n.job, |a| a.0).to_string(),
            Some('a') => n
                .array
                .map_or_else(|| "4294967294".into(), |a| a.1.to_string()),
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

/// Where one of the step's streams goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// grun's own stdout or stderr.
    Terminal,
    None,
    File(String),
}

impl Route {
    /// `--output`/`--error`'s value: absent is grun's own stream.
    pub fn of(value: Option<&str>) -> Route {
        match value {
            None => Route::Terminal,
            Some(p) if p.eq_ignore_ascii_case("none") => Route::None,
            Some(p) => Route::File(p.to_string()),
        }
    }
}

/// The step's output files and streams, opened as tasks first write.
pub struct Sinks {
    names: Names,
    out: Route,
    /// `None`: with stdout.
    err: Option<Route>,
    append: bool,
    label: bool,
    cwd: String,
    files: BTreeMap<String, std::fs::File>,
    /// Partial lines per (rank, stderr), so labels go at line starts.
    partial: BTreeMap<(u32, bool), Vec<u8>>,
    /// Labels are right-aligned to the widest rank (srun's `label_width`).
    label_width: usize,
}

/// The digits of the highest rank of `ntasks` (Slurm's `step_io.c` `_wid`): 16 tasks
/// label ` 0:` to `15:`.
fn label_width(ntasks: u32) -> usize {
    ntasks.saturating_sub(1).max(1).ilog10() as usize + 1
}

impl Sinks {
    pub fn new(
        names: Names,
        out: Route,
        err: Option<Route>,
        append: bool,
        label: bool,
        cwd: &str,
    ) -> Sinks {
        Sinks {
            names,
            out,
            err,
            append,
            label,
            cwd: cwd.to_string(),
            files: BTreeMap::new(),
            partial: BTreeMap::new(),
            label_width: 1,
        }
    }

    /// The step's number and task count, once the controller gave them (for `%s` and
    /// `%J`, and the labels' width).
    pub fn set_step(&mut self, step: u32, ntasks: u32) {
        self.names.step = step;
        self.label_width = label_width(ntasks);
    }

    fn label(&self, rank: u32) -> Vec<u8> {
        format!("{rank:>w$}: ", w = self.label_width).into_bytes()
    }

    /// Writes task `rank`'s bytes (on `node`, the step's `node_index`-th) where they go.
    pub fn write(
        &mut self,
        rank: u32,
        stderr: bool,
        node: &str,
        node_index: u32,
        bytes: &[u8],
    ) -> Result<(), String> {
        if !self.label {
            return self.emit(rank, stderr, node, node_index, bytes);
        }
        let mut buf = std::mem::take(self.partial.entry((rank, stderr)).or_default());
        buf.extend_from_slice(bytes);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let mut labelled = self.label(rank);
            labelled.extend_from_slice(&line);
            self.emit(rank, stderr, node, node_index, &labelled)?;
        }
        self.partial.insert((rank, stderr), buf);
        Ok(())
    }

    /// Writes what is left of partial lines (the step ended).
    pub fn finish(&mut self, node_of: &BTreeMap<u32, (String, u32)>) -> Result<(), String> {
        for ((rank, stderr), rest) in std::mem::take(&mut self.partial) {
            if !rest.is_empty() {
                let (node, index) = node_of.get(&rank).cloned().unwrap_or_default();
                let mut labelled = self.label(rank);
                labelled.extend_from_slice(&rest);
                self.emit(rank, stderr, &node, index, &labelled)?;
            }
        }
        Ok(())
    }

    fn emit(
        &mut self,
        rank: u32,
        stderr: bool,
        node: &str,
        node_index: u32,
        bytes: &[u8],
    ) -> Result<(), String> {
        let route = match (stderr, &self.err) {
            (true, Some(r)) => r.clone(),
            _ => self.out.clone(),
        };
        match route {
            Route::None => Ok(()),
            Route::Terminal => {
                let r = if stderr {
                    std::io::stderr().write_all(bytes)
                } else {
                    std::io::stdout()
                        .write_all(bytes)
                        .and_then(|()| std::io::stdout().flush())
                };
                r.map_err(|e| e.to_string())
            }
            Route::File(pattern) => {
                let name = expand(&pattern, &self.names, rank, node, node_index);
                let path = if name.starts_with('/') {
                    name
                } else {
                    format!("{}/{name}", self.cwd.trim_end_matches('/'))
                };
                if !self.files.contains_key(&path) {
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .write(true)
                        .append(self.append)
                        .truncate(!self.append)
                        .open(&path)
                        .map_err(|e| format!("cannot open {path}: {e}"))?;
                    self.files.insert(path.clone(), f);
                }
                let f = self.files.get_mut(&path).expect("opened");
                f.write_all(bytes)
                    .map_err(|e| format!("cannot write {path}: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            job: 1001,
            step: 0,
            job_name: "train".into(),
            user: "alice".into(),
            array: None,
        }
    }

    #[test]
    fn patterns_expand_as_srun_expands_them() {
        let n = names();
        assert_eq!(
            expand("pat-step-%s-%J-%t-%2t-%n-%N.out", &n, 1, "n1", 0),
            "pat-step-0-1001.0-1-01-0-n1.out"
        );
        assert_eq!(
            expand("%x_%u_%5j_%%", &n, 0, "n1", 0),
            "train_alice_01001_%"
        );
        assert_eq!(expand("pat-\\%j-%t", &n, 0, "n1", 0), "pat-%j-%t");
        let array = Names {
            array: Some((1000, 3)),
            ..names()
        };
        assert_eq!(expand("%A_%a_%t", &array, 2, "n1", 0), "1000_3_2");
    }

    #[test]
    fn a_file_per_task_truncated_once_or_appended() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let mut s = Sinks::new(
            names(),
            Route::of(Some("out-%t.txt")),
            Some(Route::of(Some("none"))),
            false,
            true,
            cwd,
        );
        s.write(0, false, "n1", 0, b"a\nb").unwrap();
        s.write(1, false, "n1", 0, b"c\n").unwrap();
        s.write(1, true, "n1", 0, b"lost\n").unwrap();
        s.write(0, false, "n1", 0, b"\n").unwrap();
        s.finish(&BTreeMap::new()).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("out-0.txt"), "0: a\n0: b\n");
        assert_eq!(read("out-1.txt"), "1: c\n");
        let mut again = Sinks::new(
            names(),
            Route::of(Some("out-%t.txt")),
            None,
            true,
            false,
            cwd,
        );
        again.write(1, false, "n1", 0, b"d\n").unwrap();
        assert_eq!(
            read("out-1.txt"),
            "1: c\nd\n",
            "--open-mode=append keeps what was there"
        );
    }

    #[test]
    fn labels_are_as_wide_as_the_highest_rank() {
        assert_eq!(
            [1, 2, 10, 11, 16, 100, 101, 4096].map(label_width),
            [1, 1, 1, 2, 2, 2, 3, 4]
        );
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let mut s = Sinks::new(names(), Route::of(Some("out.txt")), None, false, true, cwd);
        s.set_step(0, 16);
        s.write(0, false, "n1", 0, b"a\n").unwrap();
        s.write(15, false, "n1", 0, b"b\n").unwrap();
        let out = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
        assert_eq!(out, " 0: a\n15: b\n");
    }
}
