//! squeue's `-o/--format` strings (`%.18i %.9P %j %T %R`...) rendered from queue rows.

use gsched_types::api::QueueRow;
use gsched_types::job::JobState;
use gsched_types::parse::{format_duration, format_timestamp};

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
const LETTERS: [(char, &str); 15] = [
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
];

/// squeue's `-O` names for the letters above.
const LONG_NAMES: [(&str, char); 15] = [
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
        self.render(|letter| {
            LETTERS
                .iter()
                .find(|(l, _)| *l == letter)
                .map(|(_, h)| h.to_string())
                .unwrap_or_default()
        })
    }

    /// One job's line (no newline); `now_ms` for the running time.
    pub fn line(&self, j: &QueueRow, now_ms: u64) -> String {
        self.render(|letter| value(letter, j, now_ms))
    }

    fn render(&self, mut value: impl FnMut(char) -> String) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field {
                    letter,
                    width,
                    right,
                } => {
                    let v: String = value(*letter)
                        .chars()
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect();
                    match width {
                        Some(w) => {
                            let v: String = v.chars().take(*w).collect();
                            if *right {
                                out.push_str(&format!("{v:>w$}"));
                            } else {
                                out.push_str(&format!("{v:<w$}"));
                            }
                        }
                        None => out.extend(v.chars().take(MAX_CELL)),
                    }
                }
            }
        }
        out
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

fn value(letter: char, j: &QueueRow, now_ms: u64) -> String {
    let stamp = |t: Option<u64>| t.map(format_timestamp).unwrap_or_else(|| "N/A".into());
    match letter {
        'i' | 'A' => j.display_id.clone(),
        'j' => j.name.clone(),
        'u' => j.user.clone(),
        't' => j.state.code().into(),
        'T' => j.state.name().into(),
        'M' => match (j.start_ms, j.end_ms) {
            (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
            (Some(s), None) if j.state != JobState::Pending => {
                format_duration(now_ms.saturating_sub(s) / 1000)
            }
            _ => "0:00".into(),
        },
        'D' => j.nodes.to_string(),
        'R' => j.where_or_why.clone(),
        'N' => split_where(j).0.to_string(),
        'r' => {
            let why = split_where(j).1;
            let why = why.trim_start_matches('(').trim_end_matches(')');
            if why.is_empty() {
                "None".into()
            } else {
                why.into()
            }
        }
        'P' => j.partition.clone(),
        'l' => match j.time_limit_s {
            None | Some(0) => "UNLIMITED".into(),
            Some(s) => format_duration(s),
        },
        'S' => match j.state {
            JobState::Pending => stamp(j.expected_start_ms),
            _ => stamp(j.start_ms),
        },
        'e' => stamp(j.end_ms),
        _ => String::new(),
    }
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
        assert!(matches!(
            QueueFormat::parse_long("JobID,Colour"),
            Err(FormatError::UnknownName { name, .. }) if name == "Colour"
        ));
    }
}
