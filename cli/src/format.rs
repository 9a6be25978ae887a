//! Text output in Slurm's shapes: squeue's default columns for `gqueue`, per-node lines for
//! `ginfo`, sacct-like rows for `gacct`. Widths grow with the content.

use gsched_types::api::JobRow;
use gsched_types::job::JobState;
use gsched_types::parse::format_duration;

/// Left- or right-aligned columns sized to their content.
pub struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// `headers`: (name, right-aligned).
    pub fn new(headers: &[(&str, bool)]) -> Table {
        Table {
            headers: headers.iter().map(|(h, r)| (h.to_string(), *r)).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.iter().map(|c| printable(c)).collect());
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|(h, _)| h.chars().count())
            .collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut out = String::new();
            for (i, c) in cells.iter().enumerate() {
                let w = widths[i];
                let last = i + 1 == n;
                let cell = if self.headers[i].1 {
                    format!("{c:>w$}")
                } else if last {
                    c.to_string()
                } else {
                    format!("{c:<w$}")
                };
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&cell);
            }
            out.trim_end().to_string()
        };
        let mut out = line(self.headers.iter().map(|(h, _)| h.as_str()).collect());
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
            out.push('\n');
        }
        out
    }
}

/// The widest a table cell gets; longer text is cut with an ellipsis (use `--json` for
/// the whole value).
pub const MAX_CELL: usize = 120;

/// A value as one printable table cell: control characters (newlines, tabs, escapes)
/// shown as `?`, and at most [`MAX_CELL`] characters.
pub fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_CELL)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(MAX_CELL).is_some() {
        out.pop();
        out.push('…');
    }
    out
}

/// Elapsed run time of a job, as squeue's TIME column shows it.
pub fn elapsed(job: &JobRow, now_ms: u64) -> String {
    match (job.start_ms, job.end_ms) {
        (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
        (Some(s), None) if job.state != JobState::Pending => {
            format_duration(now_ms.saturating_sub(s) / 1000)
        }
        _ => "0:00".into(),
    }
}

/// NODELIST(REASON): the nodes of a running job, `(Reason)` for a pending one, the nodes
/// and `(FailureKind)` for an ended one.
pub fn nodelist_or_reason(job: &JobRow) -> String {
    match (job.state, &job.failure) {
        (JobState::Pending, _) => format!("({})", job.reason),
        (JobState::Running | JobState::Completing, _) | (_, None) => job.node_list.clone(),
        (_, Some(f)) => format!("{} ({})", job.node_list, f.reason()),
    }
}

/// A failure as one line: kind, node, evidence.
pub fn failure_line(job: &JobRow) -> String {
    match (&job.failure, &job.idle) {
        (Some(f), _) => f.to_string(),
        (None, Some(idle)) => format!("IdleGPUs warning: {}", idle.message()),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_and_odd_cells_render_as_one_bounded_line() {
        let mut t = Table::new(&[("NAME", false), ("X", true)]);
        t.row(vec!["a\nb\tc\0d\x1b[31m".into(), "1".into()]);
        t.row(vec!["n".repeat(1 << 20), "2".into()]);
        let out = t.render();
        assert_eq!(out.lines().count(), 3, "{out}");
        assert!(out.contains("a?b?c?d?[31m"));
        assert!(out.lines().all(|l| l.chars().count() < MAX_CELL + 10));
        assert!(out.contains('…'));
    }
}
