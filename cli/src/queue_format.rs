//! squeue's `-o/--format` strings (`%.18i %.9P %j %T %R`...) rendered from queue rows.

use gsched_types::api::{JobRow, QueueRow};
use gsched_types::job::JobState;
use gsched_types::parse::{format_duration, format_timestamp};
use std::borrow::Cow;

/// The queue line of a whole job row (as the controller makes it from the record).
pub fn queue_row(j: &JobRow) -> QueueRow {
    QueueRow {
        display_id: j.display_id.clone(),
        partition: j.partition.clone(),
        name: j.name.clone(),
        user: j.user.clone(),
        state: j.state,
        start_ms: j.start_ms,
        end_ms: j.end_ms,
        nodes: j.nodes,
        where_or_why: crate::format::nodelist_or_reason(j),
        expected_start_ms: j.expected_start_ms,
        time_limit_s: j.time_limit_s,
    }
}

/// squeue's default format.
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// squeue's long format (`-l`).
pub const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";
/// squeue's `--start` format.
pub const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R";

/// A field without a width is cut here, as every table cell is.
const MAX_CELL: usize = 120;

/// One piece of a format string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field {
        letter: char,
        width: Option<usize>,
        right: bool,
    },
}

/// A parsed `--format` string.
#[derive(Debug, Clone)]
pub struct QueueFormat(Vec<Piece>);

/// The letters gsched knows, with squeue's header for each.
const LETTERS: [(char, &str); 16] = [
    ('i', "JOBID"),
    ('A', "JOBID"),
    ('j', "NAME"),
    ('u', "USER"),
    ('t', "ST"),
    ('T', "STATE"),
    ('M', "TIME"),
    ('D', "NODES"),
    ('R', "NODELIST(REASON)"),
    ('N', "NODELIST"),
    ('r', "REASON"),
    ('P', "PARTITION"),
    ('l', "TIME_LIMIT"),
    ('S', "START_TIME"),
    ('e', "END_TIME"),
    ('Y', "SCHEDNODES"),
];

/// squeue's `-O` names for the letters above.
const LONG_NAMES: [(&str, char); 16] = [
    ("JobID", 'i'),
    ("JobArrayID", 'i'),
    ("Name", 'j'),
    ("UserName", 'u'),
    ("StateCompact", 't'),
    ("State", 'T'),
    ("TimeUsed", 'M'),
    ("NumNodes", 'D'),
    ("NodeList", 'N'),
    ("ReasonList", 'R'),
    ("Reason", 'r'),
    ("Partition", 'P'),
    ("TimeLimit", 'l'),
    ("StartTime", 'S'),
    ("EndTime", 'e'),
    ("SchedNodes", 'Y'),
];

/// A `gqueue -o`/`-O` format that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("--format '{0}' ends in the middle of a field")]
    Unfinished(String),
    #[error("--format: %{letter} is not supported (gsched knows %{known})")]
    UnknownLetter { letter: char, known: String },
    #[error("--Format: '{0}' has a bad width")]
    Width(String),
    #[error("--Format: {name} is not supported (gsched knows {known})")]
    UnknownName { name: String, known: String },
    #[error("--Format: name at least one field")]
    Empty,
}

impl QueueFormat {
    /// Parses `%[.][width]letter` fields and literal text (`%%` is a percent sign).
    pub fn parse(text: &str) -> Result<QueueFormat, FormatError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                literal.push(c);
                continue;
            }
            if chars.peek() == Some(&'%') {
                chars.next();
                literal.push('%');
                continue;
            }
            let right = chars.next_if_eq(&'.').is_some();
            let mut digits = String::new();
            while let Some(d) = chars.next_if(char::is_ascii_digit) {
                digits.push(d);
            }
            let letter = chars
                .next()
                .ok_or_else(|| FormatError::Unfinished(text.to_string()))?;
            if !LETTERS.iter().any(|(l, _)| *l == letter) {
                let known: String = LETTERS.iter().map(|(l, _)| *l).collect();
                return Err(FormatError::UnknownLetter {
                    letter,
                    known: known
                        .chars()
                        .map(String::from)
                        .collect::<Vec<_>>()
                        .join(" %"),
                });
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field {
                letter,
                width: digits.parse().ok(),
                right,
            });
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(QueueFormat(pieces))
    }

    /// Parses squeue's `-O/--Format` list (`JobID,Name:30,State,Reason`): field names,
    /// each with an optional `:width` (20 by default, as squeue's), left-aligned and
    /// padded to their width, one after the other.
    pub fn parse_long(text: &str) -> Result<QueueFormat, FormatError> {
        let mut pieces = Vec::new();
        for item in text.split(',').filter(|s| !s.is_empty()) {
            let (name, width) = match item.split_once(':') {
                Some((n, w)) => (
                    n,
                    w.trim_start_matches('.')
                        .parse::<usize>()
                        .map_err(|_| FormatError::Width(item.to_string()))?,
                ),
                None => (item, 20),
            };
            let letter = LONG_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, l)| *l)
                .ok_or_else(|| {
                    let known: Vec<&str> = LONG_NAMES.iter().map(|(n, _)| *n).collect();
                    FormatError::UnknownName {
                        name: name.to_string(),
                        known: known.join(", "),
                    }
                })?;
            pieces.push(Piece::Field {
                letter,
                width: Some(width),
                right: false,
            });
        }
        if pieces.is_empty() {
            return Err(FormatError::Empty);
        }
        Ok(QueueFormat(pieces))
    }

    pub fn header(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out, |letter| {
            LETTERS
                .iter()
                .find(|(l, _)| *l == letter)
                .map_or(Cow::Borrowed(""), |(_, h)| Cow::Borrowed(*h))
        });
        out
    }

    /// One job's line (no newline); `now_ms` for the running time.
    pub fn line(&self, j: &QueueRow, now_ms: u64) -> String {
        let mut out = String::new();
        self.write_line(&mut out, j, now_ms);
        out
    }

    /// [`QueueFormat::line`] appended to `out`: a whole page is rendered into one buffer.
    pub fn write_line(&self, out: &mut String, j: &QueueRow, now_ms: u64) {
        self.render_into(out, |letter| value(letter, j, now_ms));
    }

    fn render_into<'v>(&self, out: &mut String, mut value: impl FnMut(char) -> Cow<'v, str>) {
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field {
                    letter,
                    width,
                    right,
                } => push_cell(out, &value(*letter), *width, *right),
            }
        }
    }
}

/// A cell: control characters shown as `?`, cut to `width` characters (to [`MAX_CELL`]
/// without one) and padded to `width`, on the left when `right`.
fn push_cell(out: &mut String, v: &str, width: Option<usize>, right: bool) {
    let limit = width.unwrap_or(MAX_CELL);
    let (cut, chars) = if v.len() <= limit && v.is_ascii() {
        (v, v.len())
    } else {
        let end = v.char_indices().nth(limit).map_or(v.len(), |(i, _)| i);
        (&v[..end], v[..end].chars().count())
    };
    let fill = width.map_or(0, |w| w.saturating_sub(chars));
    if right {
        push_spaces(out, fill);
    }
    if cut.chars().any(char::is_control) {
        out.extend(cut.chars().map(|c| if c.is_control() { '?' } else { c }));
    } else {
        out.push_str(cut);
    }
    if !right {
        push_spaces(out, fill);
    }
}

fn push_spaces(out: &mut String, mut n: usize) {
    const SPACES: &str = "                                ";
    while n > 0 {
        let k = n.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        n -= k;
    }
}

/// The nodes and the `(reason)` of a queue row's `where_or_why`.
fn split_where(j: &QueueRow) -> (&str, &str) {
    let w = j.where_or_why.as_str();
    if w.starts_with('(') {
        return ("", w);
    }
    match w.split_once(" (") {
        Some((nodes, _)) => (nodes, &w[nodes.len() + 1..]),
        None => (w, ""),
    }
}

fn value(letter: char, j: &QueueRow, now_ms: u64) -> Cow<'_, str> {
    let stamp = |t: Option<u64>| t.map_or(Cow::Borrowed("N/A"), |t| format_timestamp(t).into());
    match letter {
        'i' | 'A' => Cow::Borrowed(&j.display_id),
        'j' => Cow::Borrowed(&j.name),
        'u' => Cow::Borrowed(&j.user),
        't' => Cow::Borrowed(j.state.code()),
        'T' => Cow::Borrowed(j.state.name()),
        'M' => match (j.start_ms, j.end_ms) {
            (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000).into(),
            (Some(s), None) if j.state != JobState::Pending => {
                format_duration(now_ms.saturating_sub(s) / 1000).into()
            }
            _ => Cow::Borrowed("0:00"),
        },
        'D' => j.nodes.to_string().into(),
        'R' => Cow::Borrowed(&j.where_or_why),
        'N' => Cow::Borrowed(split_where(j).0),
        'r' => {
            let why = split_where(j).1;
            let why = why.trim_start_matches('(').trim_end_matches(')');
            Cow::Borrowed(if why.is_empty() { "None" } else { why })
        }
        'P' => Cow::Borrowed(&j.partition),
        'l' => match j.time_limit_s {
            None | Some(0) => Cow::Borrowed("UNLIMITED"),
            Some(s) => format_duration(s).into(),
        },
        'S' => match j.state {
            JobState::Pending => stamp(j.expected_start_ms),
            _ => stamp(j.start_ms),
        },
        'e' => stamp(j.end_ms),
        // The nodes the scheduler plans for a pending job: gsched does not show them,
        // as squeue does before the scheduler has picked any.
        'Y' => Cow::Borrowed("(null)"),
        _ => Cow::Borrowed(""),
    }
}

/// squeue's `--sort` list: format letters, each after an optional `+` or `-` (descending).
pub fn parse_sort(text: &str) -> Result<Vec<(char, bool)>, String> {
    let mut keys = Vec::new();
    let mut descending = false;
    for c in text.chars() {
        match c {
            ',' => descending = false,
            '+' => descending = false,
            '-' => descending = true,
            // Letters squeue takes but does not sort by.
            'b' | 'c' | 'f' | 'h' | 'n' | 'O' => descending = false,
            'i' | 'j' | 'u' | 't' | 'T' | 'M' | 'D' | 'P' | 'l' | 'S' | 'e' | 'V' | 'N' => {
                keys.push((c, descending));
                descending = false;
            }
            other => {
                return Err(format!(
                    "Invalid sort specification: {other} (gsched sorts by i j u t T M D P l S e V N)"
                ));
            }
        }
    }
    Ok(keys)
}

/// A sort key's value for one job.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Number(u64, u64),
    Text(String),
}

fn key(letter: char, j: &JobRow, now: u64) -> Key {
    let time = |t: Option<u64>| Key::Number(t.unwrap_or(0), 0);
    match letter {
        'i' => match (j.array_job_id, j.array_task_id) {
            (Some(a), Some(t)) => Key::Number(a.0, u64::from(t)),
            _ => Key::Number(j.job_id.0, 0),
        },
        'j' => Key::Text(j.name.clone()),
        'u' => Key::Text(j.user.clone()),
        't' => Key::Text(j.state.code().into()),
        'T' => Key::Text(j.state.name().into()),
        'M' => Key::Number(
            match (j.start_ms, j.end_ms) {
                (Some(s), Some(e)) => e.saturating_sub(s),
                (Some(s), None) if j.state != JobState::Pending => now.saturating_sub(s),
                _ => 0,
            },
            0,
        ),
        'D' => Key::Number(u64::from(j.nodes), 0),
        'P' => Key::Text(j.partition.clone()),
        'l' => Key::Number(j.time_limit_s.filter(|s| *s > 0).unwrap_or(u64::MAX), 0),
        'S' => time(match j.state {
            JobState::Pending => j.expected_start_ms,
            _ => j.start_ms,
        }),
        'e' => time(j.end_ms),
        'V' => Key::Number(j.submit_ms, 0),
        _ => Key::Text(j.node_list.clone()),
    }
}

pub fn compare(keys: &[(char, bool)], a: &JobRow, b: &JobRow, now: u64) -> std::cmp::Ordering {
    for (letter, descending) in keys {
        let o = key(*letter, a, now).cmp(&key(*letter, b, now));
        let o = if *descending { o.reverse() } else { o };
        if o.is_ne() {
            return o;
        }
    }
    std::cmp::Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: JobState, where_or_why: &str) -> QueueRow {
        QueueRow {
            display_id: "42".into(),
            partition: "gpu".into(),
            name: "train".into(),
            user: "alice".into(),
            state,
            start_ms: Some(1_000),
            end_ms: None,
            nodes: 2,
            where_or_why: where_or_why.into(),
            expected_start_ms: None,
            time_limit_s: Some(3_600),
        }
    }

    #[test]
    fn formats_scripts_use() {
        let f = QueueFormat::parse("%.18i %9P %T %R").unwrap();
        assert_eq!(
            f.header(),
            "             JOBID PARTITION STATE NODELIST(REASON)"
        );
        assert_eq!(
            f.line(&row(JobState::Running, "n[1-2]"), 62_000),
            "                42 gpu       RUNNING n[1-2]"
        );
        let f = QueueFormat::parse("%i|%t|%M|%l|%N|%r").unwrap();
        assert_eq!(
            f.line(&row(JobState::Running, "n[1-2]"), 62_000),
            "42|R|1:01|1:00:00|n[1-2]|None"
        );
        let mut pending = row(JobState::Pending, "(Priority)");
        pending.start_ms = None;
        assert_eq!(f.line(&pending, 62_000), "42|PD|0:00|1:00:00||Priority");
        assert_eq!(QueueFormat::parse("100%%").unwrap().header(), "100%");
        assert!(matches!(
            QueueFormat::parse("%Z"),
            Err(FormatError::UnknownLetter { letter: 'Z', .. })
        ));
        assert!(matches!(
            QueueFormat::parse("%.5"),
            Err(FormatError::Unfinished(_))
        ));
        let f = QueueFormat::parse_long("JobID:6,State:9,reason").unwrap();
        assert_eq!(f.header(), "JOBID STATE    REASON              ");
        assert_eq!(
            f.line(&pending, 62_000),
            "42    PENDING  Priority            "
        );
        let mut odd = row(JobState::Running, "n1");
        odd.name = "a\tb\u{7}c".into();
        odd.user = "żółwik".into();
        let f = QueueFormat::parse("%.6j|%.3u|%4u|%u").unwrap();
        assert_eq!(
            f.line(&odd, 62_000),
            " a?b?c|żół|żółw|żółwik",
            "control characters show as ?, cuts and padding count characters"
        );
        odd.name = "x".into();
        assert_eq!(f.line(&odd, 62_000), "     x|żół|żółw|żółwik");
        assert!(matches!(
            QueueFormat::parse_long("JobID,Colour"),
            Err(FormatError::UnknownName { name, .. }) if name == "Colour"
        ));
    }

    /// A job row as the controller sends it (the fields squeue shows).
    fn job(id: u64, name: &str, state: &str, nodes: u32, node_list: &str, reason: &str) -> JobRow {
        serde_json::from_value(serde_json::json!({
            "job_id": id, "display_id": id.to_string(), "name": name, "user": "root",
            "account": "root", "partition": "gpu", "state": state, "reason": reason,
            "nodes": nodes, "node_list": node_list, "gpus_per_node": 1, "gpus": 1,
            "restarts": 0, "held": false, "submit_ms": id * 1000,
            "start_ms": if state == "RUNNING" { Some(58_000u64) } else { None },
        }))
        .unwrap()
    }

    /// squeue's default, -l and --start listings of the same three jobs on Slurm 22.05
    /// (the slurmdiff peer: `sbatch -N2 --gres=gpu:8 -J big`, `-J small -t 10`...).
    #[test]
    fn squeue_formats_match_slurms() {
        let big = job(1000, "big", "RUNNING", 2, "n[1-2]", "None");
        let mut small = job(1002, "small", "PENDING", 1, "", "Priority");
        small.time_limit_s = Some(600);
        let now = 60_000;
        let lines = |format: &str| {
            let f = QueueFormat::parse(format).unwrap();
            let mut out = vec![f.header()];
            out.extend([&small, &big].iter().map(|j| f.line(&queue_row(j), now)));
            out
        };
        assert_eq!(
            lines(DEFAULT_FORMAT),
            [
                "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
                "              1002       gpu    small     root PD       0:00      1 (Priority)",
                "              1000       gpu      big     root  R       0:02      2 n[1-2]",
            ]
        );
        assert_eq!(
            lines(LONG_FORMAT),
            [
                "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)",
                "              1002       gpu    small     root  PENDING       0:00     10:00      1 (Priority)",
                "              1000       gpu      big     root  RUNNING       0:02 UNLIMITED      2 n[1-2]",
            ]
        );
        assert_eq!(
            lines(START_FORMAT)[..2],
            [
                "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)",
                "              1002       gpu    small     root PD                 N/A      1 (null)               (Priority)",
            ]
        );
        assert_eq!(
            lines("%i %T")[1..],
            ["1002 PENDING", "1000 RUNNING"],
            "squeue -h -o '%i %T'"
        );
    }

    /// `squeue -S` on Slurm 22.05 with a running job 1000 (2 nodes), a pending array
    /// 1001 and a pending job 1002: `-S i`, `-S -i`, `-S u,-D`, `-S t,-i`.
    #[test]
    fn squeue_sort_orders_as_slurms() {
        let big = job(1000, "big", "RUNNING", 2, "n[1-2]", "None");
        let mut arr = job(1005, "arr", "PENDING", 1, "", "Resources");
        arr.array_job_id = Some(gsched_types::job::JobId(1001));
        arr.array_task_id = Some(1);
        arr.display_id = "1001_1".into();
        let small = job(1002, "small", "PENDING", 1, "", "Priority");
        let order = |spec: &str| {
            let keys = parse_sort(spec).unwrap();
            let mut jobs = [small.clone(), arr.clone(), big.clone()];
            jobs.sort_by(|a, b| compare(&keys, a, b, 60_000));
            jobs.iter()
                .map(|j| j.display_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(order("i"), ["1000", "1001_1", "1002"]);
        assert_eq!(order("-i"), ["1002", "1001_1", "1000"]);
        assert_eq!(order("u,-D")[0], "1000");
        assert_eq!(order("t,-i"), ["1002", "1001_1", "1000"]);
        assert_eq!(order("+j"), ["1001_1", "1000", "1002"]);
        assert!(
            parse_sort("p").is_err(),
            "priorities are not shown: no sort by them"
        );
        assert_eq!(
            parse_sort("c,i").unwrap(),
            [('i', false)],
            "letters squeue ignores"
        );
    }
}
