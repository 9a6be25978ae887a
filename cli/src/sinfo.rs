//! sinfo's listings of nodes and partitions: its `-o` format letters and `-O` names, its
//! default, `-N`, `-l`, `-s` and `-R` formats, and its grouping of nodes that show the same
//! into one line (per partition unless the format prints none).

use gsched_types::api::{NodeRow, NodeState, PartitionRow};
use gsched_types::node::NodeAdminState;
use gsched_types::parse::{format_duration, format_timestamp};

/// sinfo's formats (`cli/../src/sinfo/opts.c`), as `-o` strings; `#` marks a width sinfo
/// computes from the values (at least 9).
pub const DEFAULT: &str = "%#P %.5a %.10l %.6D %.6t %N";
pub const LONG: &str = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N";
pub const NODES: &str = "%#N %.6D %.9#P %6t";
pub const NODES_LONG: &str = "%#N %.6D %.9#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E";
pub const SUMMARY: &str = "%#P %.5a %.10l %.16F %N";
pub const REASONS: &str = "%20E %9u %19H %N";
pub const REASONS_LONG: &str = "%20E %12U %19H %6t %N";

/// One piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field {
        letter: char,
        width: Option<usize>,
        right: bool,
        /// As wide as the widest value, at least 9 (sinfo's node list and partition
        /// columns in its own formats).
        fit: bool,
    },
}

/// A parsed sinfo format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinfoFormat(Vec<Piece>);

/// The letters gsched knows, with sinfo's header for each.
const LETTERS: [(char, &str); 25] = [
    ('P', "PARTITION"),
    ('R', "PARTITION"),
    ('a', "AVAIL"),
    ('l', "TIMELIMIT"),
    ('D', "NODES"),
    ('t', "STATE"),
    ('T', "STATE"),
    ('N', "NODELIST"),
    ('n', "HOSTNAMES"),
    ('c', "CPUS"),
    ('C', "CPUS(A/I/O/T)"),
    ('m', "MEMORY"),
    ('G', "GRES"),
    ('f', "AVAIL_FEATURES"),
    ('b', "ACTIVE_FEATURES"),
    ('E', "REASON"),
    ('H', "TIMESTAMP"),
    ('u', "USER"),
    ('U', "USER"),
    ('F', "NODES(A/I/O/T)"),
    ('A', "NODES(A/I)"),
    ('s', "JOB_SIZE"),
    ('r', "ROOT"),
    ('h', "OVERSUBSCRIBE"),
    ('g', "GROUPS"),
];

/// Letters whose value is the group's, not one node's.
const AGGREGATE: &str = "NnDFAC";

/// sinfo's `-O` names for the letters above (and a few more of its own).
const LONG_NAMES: [(&str, char); 26] = [
    ("Partition", 'P'),
    ("PartitionName", 'R'),
    ("Available", 'a'),
    ("Time", 'l'),
    ("Nodes", 'D'),
    ("StateCompact", 't'),
    ("StateLong", 'T'),
    ("NodeList", 'N'),
    ("NodeHost", 'n'),
    ("CPUs", 'c'),
    ("CPUsState", 'C'),
    ("Memory", 'm'),
    ("Gres", 'G'),
    ("Features", 'f'),
    ("FeaturesAct", 'b'),
    ("Reason", 'E'),
    ("Timestamp", 'H'),
    ("User", 'u'),
    ("UserLong", 'U'),
    ("NodeAIOT", 'F'),
    ("NodeAI", 'A'),
    ("Size", 's'),
    ("Root", 'r'),
    ("OverSubscribe", 'h'),
    ("Groups", 'g'),
    ("Disk", 'd'),
];

/// Letters gsched prints a fixed value for (sinfo's own for a node without them).
const FIXED: [(char, &str, &str); 4] = [
    ('d', "TMP_DISK", "0"),
    ('w', "WEIGHT", "1"),
    ('z', "S:C:T", ""),
    ('O', "CPU_LOAD", "N/A"),
];

/// A format that cannot be used.
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
}

fn known_letter(c: char) -> bool {
    LETTERS.iter().any(|(l, _)| *l == c) || FIXED.iter().any(|(l, _, _)| *l == c)
}

fn header_of(c: char) -> &'static str {
    LETTERS
        .iter()
        .find(|(l, _)| *l == c)
        .map(|(_, h)| *h)
        .or_else(|| FIXED.iter().find(|(l, _, _)| *l == c).map(|(_, h, _)| *h))
        .unwrap_or("")
}

impl SinfoFormat {
    /// Parses `%[.][width][#]letter` fields and literal text.
    pub fn parse(text: &str) -> Result<SinfoFormat, FormatError> {
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
            let fit = chars.next_if_eq(&'#').is_some();
            let letter = chars
                .next()
                .ok_or_else(|| FormatError::Unfinished(text.to_string()))?;
            if !known_letter(letter) {
                let known: Vec<String> = LETTERS
                    .iter()
                    .map(|(l, _)| l.to_string())
                    .chain(FIXED.iter().map(|(l, _, _)| l.to_string()))
                    .collect();
                return Err(FormatError::UnknownLetter {
                    letter,
                    known: known.join(" %"),
                });
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field {
                letter,
                width: digits.parse().ok(),
                right,
                fit,
            });
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(SinfoFormat(pieces))
    }

    /// Parses sinfo's `-O` list: `name[:[.]width]` items (20 wide by default), each
    /// followed by a space unless it is the last.
    pub fn parse_long(text: &str) -> Result<SinfoFormat, FormatError> {
        let mut pieces = Vec::new();
        for item in text.split(',').filter(|s| !s.is_empty()) {
            let (name, width, right) = match item.split_once(':') {
                Some((n, w)) => {
                    let right = w.starts_with('.');
                    let w = w
                        .trim_start_matches('.')
                        .trim_end()
                        .parse::<usize>()
                        .map_err(|_| FormatError::Width(item.to_string()))?;
                    (n, w, right)
                }
                None => (item, 20, false),
            };
            let letter = LONG_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
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
                width: (width > 0).then_some(width),
                right,
                fit: false,
            });
            pieces.push(Piece::Text(" ".into()));
        }
        Ok(SinfoFormat(pieces))
    }

    fn letters(&self) -> impl Iterator<Item = char> + '_ {
        self.0.iter().filter_map(|p| match p {
            Piece::Field { letter, .. } => Some(*letter),
            Piece::Text(_) => None,
        })
    }

    /// Whether the format needs the nodes' wiring (`%z`).
    pub fn needs_detail(&self) -> bool {
        self.letters().any(|l| l == 'z')
    }

    fn by_partition(&self) -> bool {
        self.letters().any(|l| "PRalsrhg".contains(l))
    }
}

/// Which nodes to list, and how.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// One line per node (`-N`).
    pub per_node: bool,
    /// Only these partitions.
    pub partitions: Vec<String>,
    /// Only these nodes.
    pub nodes: Vec<String>,
    /// Only nodes in one of these states (sinfo's words).
    pub states: Vec<String>,
    /// Only nodes whose agent answers (`-r`), or only those that do not (`-d`).
    pub responding: Option<bool>,
    /// Nodes that differ in CPUs, memory or GPUs are never one line (`-e`).
    pub exact: bool,
    pub header: bool,
    /// Lines sorted by these letters' values (`-S`), descending where `true`.
    pub sort: Vec<(char, bool)>,
}

/// sinfo's `--sort` list: format letters, each after an optional `+`, `-` (descending)
/// or `#` (the configuration's order, which gsched's listing keeps anyway).
pub fn parse_sort(text: &str) -> Result<Vec<(char, bool)>, String> {
    let mut keys = Vec::new();
    let mut descending = false;
    for c in text.chars() {
        match c {
            ',' | '+' | '#' => descending = false,
            '-' => descending = true,
            c if known_letter(c) => {
                keys.push((c, descending));
                descending = false;
            }
            other => return Err(format!("Invalid sort specification: {other}")),
        }
    }
    Ok(keys)
}

/// sinfo's state words, compact and long.
fn state_words(n: &NodeRow) -> (&'static str, &'static str) {
    match n.state {
        NodeState::Idle => ("idle", "idle"),
        NodeState::Mixed => ("mix", "mixed"),
        NodeState::Allocated => ("alloc", "allocated"),
        NodeState::Drained | NodeState::DownDrained => ("drain", "drained"),
        NodeState::Draining => ("drng", "draining"),
        NodeState::Down => ("down", "down"),
        NodeState::Maint => ("maint", "maint"),
        NodeState::Reserved => ("resv", "reserved"),
    }
}

/// The states `sinfo -t` matches a node by: its base state and its flags.
fn matches_state(n: &NodeRow, word: &str) -> bool {
    let base: &[&str] = match n.state {
        NodeState::Idle => &["idle"],
        NodeState::Mixed => &["mixed", "allocated"],
        NodeState::Allocated => &["allocated"],
        NodeState::Drained => &["idle", "drain", "drained"],
        NodeState::Draining => &["mixed", "allocated", "drain", "draining"],
        NodeState::Down => &["down"],
        NodeState::DownDrained => &["down", "drain", "drained"],
        NodeState::Maint => &["idle", "maint"],
        NodeState::Reserved => &["idle", "reserved"],
    };
    let no_respond = !n.online || !n.responding;
    base.contains(&word) || (word == "no_respond" && no_respond)
}

/// sinfo's state words (`-t`), each read as the state it names; an unknown word is
/// sinfo's error.
pub fn parse_states(list: &[String]) -> Result<Vec<String>, String> {
    const WORDS: [(&str, &str); 14] = [
        ("idle", "idle"),
        ("mix", "mixed"),
        ("mixed", "mixed"),
        ("alloc", "allocated"),
        ("allocated", "allocated"),
        ("drain", "drain"),
        ("drained", "drained"),
        ("draining", "draining"),
        ("drng", "draining"),
        ("down", "down"),
        ("maint", "maint"),
        ("resv", "reserved"),
        ("reserved", "reserved"),
        ("no_respond", "no_respond"),
    ];
    list.iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(|s| {
            let lower = s.to_ascii_lowercase();
            if lower == "all" {
                return Ok(None);
            }
            WORDS
                .iter()
                .find(|(w, _)| *w == lower)
                .map(|(_, canonical)| Some(canonical.to_string()))
                .ok_or_else(|| {
                    format!(
                        "Bad state string: \"{s}\" (gsched's states: idle,mixed,allocated,drain,drained,draining,down,maint,reserved,no_respond)"
                    )
                })
        })
        .filter_map(Result::transpose)
        .collect()
}

/// One node's value for a non-aggregate letter.
fn node_value(letter: char, n: &NodeRow, p: Option<&PartitionRow>) -> String {
    let star = if !n.online || !n.responding { "*" } else { "" };
    let drain = match &n.admin {
        NodeAdminState::Drain {
            reason,
            since_ms,
            by,
        } => Some((reason.as_str(), *since_ms, by.as_str())),
        NodeAdminState::Up => None,
    };
    let not_responding = !n.online || !n.responding;
    match letter {
        'P' => p.map_or("n/a".into(), |p| {
            format!("{}{}", p.name, if p.default { "*" } else { "" })
        }),
        'R' => p.map_or("n/a".into(), |p| p.name.clone()),
        'a' => "up".into(),
        'l' => p
            .and_then(|p| p.max_time_s)
            .map_or("infinite".into(), format_duration),
        's' => format!(
            "1-{}",
            p.and_then(|p| p.max_nodes)
                .map_or("infinite".into(), |m| m.to_string())
        ),
        'r' => "no".into(),
        'h' => "NO".into(),
        'g' => "all".into(),
        't' => format!("{}{star}", state_words(n).0),
        'T' => format!("{}{star}", state_words(n).1),
        'c' => n.cpus_total.to_string(),
        'm' => n.memory_mb.to_string(),
        'G' => match (n.gpus_total, &n.gpu_model) {
            (0, _) => "(null)".into(),
            (g, _) => format!("gpu:{g}"),
        },
        'f' | 'b' => {
            if n.features.is_empty() {
                "(null)".into()
            } else {
                n.features.join(",")
            }
        }
        'E' => match drain {
            Some((reason, _, _)) => reason.to_string(),
            None if not_responding => "Not responding".into(),
            None => "none".into(),
        },
        'H' => match drain {
            Some((_, at, _)) => format_timestamp(at),
            None => "Unknown".into(),
        },
        'u' | 'U' => match drain {
            Some((_, _, by)) => by.to_string(),
            None => "Unknown".into(),
        },
        // Sockets, cores per socket, threads per core: gsched knows the NUMA nodes and
        // the CPUs (a NUMA node stands for a socket; threads are not told apart).
        'z' => match &n.topology {
            Some(t) => {
                let sockets = t.numa_nodes.len().max(1) as u32;
                format!("{sockets}:{}:1", n.cpus_total / sockets)
            }
            None => "N/A".into(),
        },
        other => FIXED
            .iter()
            .find(|(l, _, _)| *l == other)
            .map_or(String::new(), |(_, _, v)| v.to_string()),
    }
}

/// A group of nodes shown as one line.
struct Group<'a> {
    partition: Option<&'a PartitionRow>,
    nodes: Vec<&'a NodeRow>,
    key: Vec<String>,
}

impl Group<'_> {
    fn value(&self, letter: char) -> String {
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        let counts = || {
            let (mut a, mut i, mut o) = (0, 0, 0);
            for n in &self.nodes {
                match n.state {
                    _ if !n.online || !n.responding => o += 1,
                    NodeState::Allocated | NodeState::Mixed => a += 1,
                    NodeState::Idle | NodeState::Maint | NodeState::Reserved => i += 1,
                    _ => o += 1,
                }
            }
            (a, i, o)
        };
        match letter {
            'N' | 'n' => gsched_types::hostlist::compress(&names),
            'D' => self.nodes.len().to_string(),
            'F' => {
                let (a, i, o) = counts();
                format!("{a}/{i}/{o}/{}", self.nodes.len())
            }
            'A' => {
                let (a, i, _) = counts();
                format!("{a}/{i}")
            }
            'C' => {
                let (mut a, mut i, mut o, mut t) = (0, 0, 0, 0);
                for n in &self.nodes {
                    t += n.cpus_total;
                    let usable = n.online
                        && n.responding
                        && matches!(n.admin, NodeAdminState::Up)
                        && n.state != NodeState::Down;
                    if usable {
                        a += n.cpus_used;
                        i += n.cpus_total.saturating_sub(n.cpus_used);
                    } else {
                        o += n.cpus_total;
                    }
                }
                format!("{a}/{i}/{o}/{t}")
            }
            _ => self
                .nodes
                .first()
                .map_or(String::new(), |n| node_value(letter, n, self.partition)),
        }
    }
}

/// A cell as sinfo prints one: cut to `width`, padded to it (on the left when `right`).
fn push_cell(out: &mut String, v: &str, width: Option<usize>, right: bool) {
    let v = crate::format::printable(v);
    let Some(w) = width else {
        out.push_str(&v);
        return;
    };
    let cut: String = v.chars().take(w).collect();
    let fill = w.saturating_sub(cut.chars().count());
    if right {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(&cut);
    } else {
        out.push_str(&cut);
        out.extend(std::iter::repeat_n(' ', fill));
    }
}

/// The listing of `nodes` in `format` as `query` asks (a header line first unless not).
pub fn render(
    format: &SinfoFormat,
    query: &Query,
    nodes: &[NodeRow],
    partitions: &[PartitionRow],
) -> String {
    let mut groups = group(format, query, nodes, partitions);
    sort(&mut groups, query);
    lines(format, query, &groups)
}

/// The lines sinfo would print, before sorting: the nodes `query` wants, in groups of
/// equal cells (per partition when the format or the query names partitions).
fn group<'a>(
    format: &SinfoFormat,
    query: &Query,
    nodes: &'a [NodeRow],
    partitions: &'a [PartitionRow],
) -> Vec<Group<'a>> {
    let wanted = |n: &NodeRow| {
        (query.nodes.is_empty() || query.nodes.contains(&n.name))
            && (query.states.is_empty() || query.states.iter().any(|s| matches_state(n, s)))
            && query
                .responding
                .is_none_or(|r| r == (n.online && n.responding))
    };
    let shown: Vec<&PartitionRow> = partitions
        .iter()
        .filter(|p| query.partitions.is_empty() || query.partitions.contains(&p.name))
        .collect();
    let by_partition = format.by_partition() || !query.partitions.is_empty();
    // Letters that set a group apart.
    let key_letters: Vec<char> = format
        .letters()
        .filter(|l| !AGGREGATE.contains(*l))
        .collect();
    let key = |n: &NodeRow, p: Option<&PartitionRow>| -> Vec<String> {
        let mut k: Vec<String> = key_letters.iter().map(|l| node_value(*l, n, p)).collect();
        if query.exact {
            k.extend([
                n.cpus_total.to_string(),
                n.memory_mb.to_string(),
                n.gpus_total.to_string(),
            ]);
        }
        if query.per_node {
            k.push(n.name.clone());
        }
        k
    };
    let mut groups: Vec<Group> = Vec::new();
    let scopes: Vec<Option<&PartitionRow>> = if by_partition {
        shown.iter().map(|p| Some(*p)).collect()
    } else {
        vec![None]
    };
    for scope in &scopes {
        let first = groups.len();
        for n in nodes.iter().filter(|n| wanted(n)) {
            if let Some(p) = scope
                && !p.nodes.contains(&n.name)
            {
                continue;
            }
            if scope.is_none()
                && !query.partitions.is_empty()
                && !shown.iter().any(|p| p.nodes.contains(&n.name))
            {
                continue;
            }
            let k = key(n, *scope);
            match groups[first..].iter_mut().find(|g| g.key == k) {
                Some(g) => g.nodes.push(n),
                None => groups.push(Group {
                    partition: *scope,
                    nodes: vec![n],
                    key: k,
                }),
            }
        }
        // A partition none of whose nodes is listed still has its line, as sinfo's.
        if groups.len() == first && !query.per_node && scope.is_some() {
            groups.push(Group {
                partition: *scope,
                nodes: Vec::new(),
                key: Vec::new(),
            });
        }
    }
    groups
}

/// Orders the lines: by node name with `--Node`, then by `--sort`'s letters.
fn sort(groups: &mut [Group<'_>], query: &Query) {
    if query.per_node {
        groups.sort_by(|a, b| natural(&a.nodes[0].name, &b.nodes[0].name));
    }
    if !query.sort.is_empty() {
        groups.sort_by(|a, b| {
            for (letter, descending) in &query.sort {
                let (x, y) = (a.cell(*letter), b.cell(*letter));
                let o = match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.total_cmp(&y),
                    _ => natural(&x, &y),
                };
                let o = if *descending { o.reverse() } else { o };
                if o.is_ne() {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        });
    }
}

/// The lines written out, cells cut or padded to their widths.
fn lines(format: &SinfoFormat, query: &Query, groups: &[Group<'_>]) -> String {
    // Column widths sinfo fits to the values.
    let fit_width = |letter: char| -> usize {
        groups
            .iter()
            .map(|g| g.cell(letter).chars().count())
            .chain(std::iter::once(9))
            .max()
            .unwrap_or(9)
    };
    let mut out = String::new();
    let mut line = |cell: &dyn Fn(char) -> String| {
        for p in &format.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field {
                    letter,
                    width,
                    right,
                    fit,
                } => {
                    let width = if *fit {
                        Some(fit_width(*letter))
                    } else {
                        *width
                    };
                    push_cell(&mut out, &cell(*letter), width, *right);
                }
            }
        }
        out.push('\n');
    };
    if query.header {
        line(&|l| header_of(l).to_string());
    }
    for g in groups {
        line(&|l| g.cell(l));
    }
    out
}

impl Group<'_> {
    /// A cell of the line: a partition with no node listed shows `0` nodes in state
    /// `n/a`, as sinfo's.
    fn cell(&self, letter: char) -> String {
        if self.nodes.is_empty() {
            return match letter {
                'D' => "0".into(),
                'N' | 'n' => String::new(),
                'P' | 'R' | 'a' | 'l' | 's' | 'r' | 'h' | 'g' => {
                    let stand_in = NodeRow::stand_in();
                    node_value(letter, &stand_in, self.partition)
                }
                _ => "n/a".into(),
            };
        }
        self.value(letter)
    }
}

/// Node names in the order people count them (`n2` before `n10`).
fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (
            head.to_string(),
            tail.parse::<u64>().unwrap_or(0),
            s.to_string(),
        )
    };
    split(a).cmp(&split(b))
}

/// The reasons listing's default states (`sinfo -R`): nodes down, failing or drained.
pub fn reason_states() -> Vec<String> {
    vec!["down".into(), "drain".into()]
}

trait StandIn {
    fn stand_in() -> Self;
}

impl StandIn for NodeRow {
    /// A node with nothing of its own, for a partition's values.
    fn stand_in() -> NodeRow {
        NodeRow {
            name: String::new(),
            state: NodeState::Idle,
            online: true,
            responding: true,
            fencing: Vec::new(),
            admin: NodeAdminState::Up,
            drain_reason: None,
            reservation: None,
            address: String::new(),
            training_addr: String::new(),
            gpu_model: None,
            gpus_total: 0,
            gpus_used: Vec::new(),
            gpus_free: 0,
            bad_gpus: Vec::new(),
            cpus_total: 0,
            cpus_used: 0,
            memory_mb: 0,
            memory_used_mb: 0,
            jobs: Vec::new(),
            gpu_jobs: Vec::new(),
            features: Vec::new(),
            agent_version: String::new(),
            health: Vec::new(),
            outside_jobs: Vec::new(),
            topology: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node of the slurmdiff peer: 32 CPUs on 2 sockets, 4096 MB, 8 GPUs, features
    /// `rackN,ib`.
    fn node(name: &str, state: &str, rack: u32) -> NodeRow {
        serde_json::from_value(serde_json::json!({
            "name": name, "state": state, "online": true, "responding": true,
            "admin": {"state": "up"}, "address": "", "training_addr": "", "gpus_total": 8,
            "gpus_used": [0], "gpus_free": 7, "bad_gpus": [], "cpus_total": 32,
            "cpus_used": 1, "memory_mb": 4096, "memory_used_mb": 0, "jobs": [],
            "features": [format!("rack{rack}"), "ib".to_string()],
            "topology": {"gpus": [], "gpu_links": [], "numa_nodes": [
                {"id": 0, "cpus": "0-15"}, {"id": 1, "cpus": "16-31"}]},
        }))
        .unwrap()
    }

    fn gpu() -> Vec<PartitionRow> {
        vec![PartitionRow {
            name: "gpu".into(),
            default: true,
            nodes: vec!["n1".into(), "n2".into()],
            max_time_s: None,
            max_nodes: None,
        }]
    }

    fn listing(format: &str, query: Query, nodes: &[NodeRow]) -> String {
        render(&SinfoFormat::parse(format).unwrap(), &query, nodes, &gpu())
    }

    fn header() -> Query {
        Query {
            header: true,
            ..Default::default()
        }
    }

    /// What sinfo 22.05 printed on the slurmdiff peer (2 nodes x 8 GPUs in partition
    /// `gpu`), first with a job on each node, then with n2 drained.
    #[test]
    fn sinfo_listings_match_slurms() {
        let mixed = [node("n1", "mix", 1), node("n2", "mix", 2)];
        assert_eq!(
            listing(DEFAULT, header(), &mixed),
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             gpu*         up   infinite      2    mix n[1-2]\n"
        );
        let per_node = Query {
            per_node: true,
            ..header()
        };
        assert_eq!(
            listing(NODES, per_node.clone(), &mixed),
            "NODELIST   NODES PARTITION STATE \n\
             n1             1      gpu* mix   \n\
             n2             1      gpu* mix   \n"
        );
        assert_eq!(
            listing(LONG, header(), &mixed),
            "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST\n\
             gpu*         up   infinite 1-infinite   no       NO        all      2       mixed n[1-2]\n"
        );
        assert_eq!(
            listing(NODES_LONG, per_node.clone(), &mixed),
            "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON              \n\
             n1             1      gpu*       mixed 32     2:16:1   4096        0      1 rack1,ib none                \n\
             n2             1      gpu*       mixed 32     2:16:1   4096        0      1 rack2,ib none                \n"
        );
        assert_eq!(
            listing(SUMMARY, header(), &mixed),
            "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n\
             gpu*         up   infinite          2/0/0/2 n[1-2]\n"
        );
        let reasons = Query {
            states: reason_states(),
            ..header()
        };
        assert_eq!(
            listing(REASONS, reasons.clone(), &mixed),
            "REASON               USER      TIMESTAMP           NODELIST\n"
        );
        let no_header = Query::default();
        assert_eq!(
            listing(DEFAULT, no_header, &mixed),
            "gpu*         up   infinite      2    mix n[1-2]\n"
        );
        let idle = Query {
            states: parse_states(&["idle".into()]).unwrap(),
            ..header()
        };
        assert_eq!(
            listing(DEFAULT, idle, &mixed),
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             gpu*         up   infinite      0    n/a \n",
            "a partition with no node listed still has its line"
        );
        let alloc = Query {
            states: parse_states(&["alloc".into()]).unwrap(),
            ..header()
        };
        assert!(listing(DEFAULT, alloc, &mixed).contains("      2    mix n[1-2]"));
        let elsewhere = Query {
            partitions: vec!["nope".into()],
            ..header()
        };
        assert_eq!(
            listing(DEFAULT, elsewhere, &mixed),
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        );
        let one = Query {
            nodes: vec!["n1".into()],
            ..Query::default()
        };
        assert_eq!(
            listing(DEFAULT, one, &mixed),
            "gpu*         up   infinite      1    mix n1\n"
        );
        assert_eq!(
            listing("%P_%a_%l_%D_%T_%N", header(), &mixed),
            "PARTITION_AVAIL_TIMELIMIT_NODES_STATE_NODELIST\ngpu*_up_infinite_2_mixed_n[1-2]\n"
        );

        // n2 drained by root: sinfo -R, -t drain, -s, -N -l, -o.
        let mut drained = node("n2", "drain", 2);
        drained.admin = NodeAdminState::Drain {
            reason: "fan broken".into(),
            since_ms: 1_796_535_265_000,
            by: "root".into(),
        };
        drained.cpus_used = 0;
        let nodes = [node("n1", "mix", 1), drained];
        assert_eq!(
            listing(REASONS, reasons, &nodes),
            "REASON               USER      TIMESTAMP           NODELIST\n\
             fan broken           root      2026-12-06T05:34:25 n2\n"
        );
        let drain = Query {
            states: parse_states(&["drain".into()]).unwrap(),
            ..Query::default()
        };
        assert_eq!(
            listing(DEFAULT, drain, &nodes),
            "gpu*         up   infinite      1  drain n2\n"
        );
        assert_eq!(
            listing(SUMMARY, Query::default(), &nodes),
            "gpu*         up   infinite          1/0/1/2 n[1-2]\n"
        );
        assert!(
            listing(NODES_LONG, per_node, &nodes).ends_with(
                "n2             1      gpu*     drained 32     2:16:1   4096        0      1 rack2,ib fan broken          \n"
            )
        );
        let per_node = Query {
            per_node: true,
            ..Query::default()
        };
        assert_eq!(
            listing("%20N%10T%E", per_node.clone(), &nodes),
            "n1                  mixed     none\nn2                  drained   fan broken\n"
        );
        // -S: by state, descending; -e: nodes of other sizes are never one line; -r/-d.
        let sorted = Query {
            sort: parse_sort("-t").unwrap(),
            ..Query::default()
        };
        assert_eq!(listing("%t %N", sorted, &nodes), "mix n1\ndrain n2\n");
        let mut small = node("n2", "mix", 2);
        small.memory_mb = 2048;
        let sizes = [node("n1", "mix", 1), small];
        assert_eq!(listing("%D %N", Query::default(), &sizes), "2 n[1-2]\n");
        let exact = Query {
            exact: true,
            ..Query::default()
        };
        assert_eq!(listing("%D %N", exact, &sizes), "1 n1\n1 n2\n");
        let mut gone = node("n2", "down", 2);
        gone.online = false;
        let nodes = [node("n1", "mix", 1), gone];
        let dead = Query {
            responding: Some(false),
            ..Query::default()
        };
        assert_eq!(listing("%t %N", dead, &nodes), "down* n2\n");
        let responding = Query {
            responding: Some(true),
            ..Query::default()
        };
        assert_eq!(listing("%t %N", responding, &nodes), "mix n1\n");
        assert!(parse_states(&["bogus".into()]).is_err());
        assert_eq!(
            render(
                &SinfoFormat::parse_long("NodeList:6,StateLong:.8").unwrap(),
                &per_node,
                &nodes,
                &gpu()
            ),
            "n1        mixed \nn2        down* \n"
        );
    }
}
