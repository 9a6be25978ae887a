//! `gacct`'s listing without its IO: the query sacct's options make (the time window,
//! whose jobs, which jobs), the rows they keep, and those rows printed as sacct prints
//! them (a table, `-p`/`-P`, `--csv`).

mod fields;

pub use fields::{Field, Row, help_fields};

use crate::JobQuery;
use crate::args::gacct::Args;
use crate::format::Table;
use gsched_types::api::{JobRow, JobSelector};

/// Who runs `gacct`: sacct shows root everyone's jobs.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    pub is_root: bool,
}

/// What to ask the controller for. `when` reads a time as `-S`/`-E` take it ("now",
/// "today", "2026-11-30T08:00"...).
pub fn query(
    args: &Args,
    caller: &Caller,
    when: impl Fn(&str) -> Result<u64, String>,
) -> Result<JobQuery, String> {
    // sacct's window: from midnight today; from now with -s (the jobs in those states
    // now); all time for named jobs.
    let since_ms = match &args.starttime {
        Some(t) => when(t)?,
        None if !args.states.is_empty() => when("now")?,
        None if args.jobs.is_empty() => when("today").unwrap_or(0),
        None => 0,
    };
    let until_ms = args.endtime.as_deref().map(&when).transpose()?.unwrap_or(0);
    // sacct's users: those named; everyone's with -a, -j or -N, or for root; else yours.
    let users = if !args.user.is_empty() {
        args.user.clone()
    } else if args.allusers || !args.jobs.is_empty() || args.nodelist.is_some() || caller.is_root {
        Vec::new()
    } else {
        vec![caller.user.clone()]
    };
    Ok(JobQuery {
        include_finished: true,
        detail: args.json || args.attempts,
        since_ms,
        until_ms,
        archive: true,
        users,
        partition: match args.partition.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        },
        names: args.names.clone(),
        jobs: args
            .jobs
            .iter()
            .map(|j| JobSelector::parse(j).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        ..Default::default()
    })
}

/// The rows sacct's selecting options keep of what the controller sent.
pub struct Filter<'a> {
    args: &'a Args,
    nodes: Vec<String>,
    nnodes: Option<(u32, u32)>,
}

impl<'a> Filter<'a> {
    pub fn new(args: &'a Args) -> Result<Filter<'a>, String> {
        let nodes = match &args.nodelist {
            None => Vec::new(),
            Some(list) => gsched_types::hostlist::expand(list)
                .map_err(|e| format!("--nodelist {list}: {e}"))?,
        };
        let nnodes = args.nnodes.as_deref().map(count_range).transpose()?;
        Ok(Filter {
            args,
            nodes,
            nnodes,
        })
    }

    pub fn keeps(&self, j: &JobRow) -> bool {
        let a = self.args;
        let any = |list: &[String], value: &str| {
            list.is_empty() || list.iter().any(|x| x.eq_ignore_ascii_case(value))
        };
        let state_wanted = a.states.is_empty()
            || a.states.iter().any(|s| {
                gsched_types::JobState::parse(s).is_some_and(|w| w.name() == j.state.name())
                    || s.eq_ignore_ascii_case(j.state.name())
            });
        state_wanted
            && any(&a.accounts, &j.account)
            && (a.partition.is_empty() || a.partition.contains(&j.partition))
            && (a.qos.is_empty() || j.qos.as_ref().is_some_and(|q| a.qos.contains(q)))
            && (a.wckeys.is_empty() || j.wckey.as_ref().is_some_and(|w| a.wckeys.contains(w)))
            && any(&a.reason, &j.reason)
            && self
                .nnodes
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&j.nodes))
            && (self.nodes.is_empty()
                || gsched_types::hostlist::expand(&j.node_list)
                    .unwrap_or_default()
                    .iter()
                    .any(|n| self.nodes.contains(n)))
    }
}

/// `MIN` or `MIN-MAX` (sacct's --nnodes).
pub fn count_range(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--nnodes {text}: give MIN or MIN-MAX");
    let (lo, hi) = text.split_once('-').unwrap_or((text, text));
    let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// The jobs as sacct prints them: a row per job, then its steps (unless `-X`) and, with
/// `--attempts`, its earlier attempts; the columns of `-o`, `-b` or sacct's default.
pub fn listing(args: &Args, jobs: &[JobRow], now_ms: u64) -> Result<String, String> {
    let mut fields = match &args.format {
        Some(f) => Field::parse_list(f)?,
        None if args.brief => Vec::new(),
        None => Field::DEFAULT.iter().map(|f| (*f, None)).collect(),
    };
    if args.brief {
        fields.extend(Field::BRIEF.iter().map(|f| (*f, None)));
    }
    let mut rows: Vec<Row> = Vec::new();
    for j in jobs {
        rows.push(Row::Job(j, now_ms));
        if !args.allocations {
            rows.extend(j.steps.iter().map(|s| Row::Step(j, s, now_ms)));
        }
        if args.attempts {
            rows.extend(j.attempts.iter().map(|a| Row::Attempt(j, a)));
        }
    }
    let names: Vec<&str> = fields.iter().map(|(f, _)| f.name()).collect();
    let mut out = String::new();
    if args.csv {
        if !args.noheader {
            out.push_str(&format!("{}\n", names.join(",")));
        }
        for r in &rows {
            let cells: Vec<String> = fields.iter().map(|(f, _)| csv_field(&r.get(*f))).collect();
            out.push_str(&format!("{}\n", cells.join(",")));
        }
        return Ok(out);
    }
    if args.parsable || args.parsable2 {
        let sep = args.delimiter.as_deref().unwrap_or("|");
        let end = if args.parsable { sep } else { "" };
        if !args.noheader {
            out.push_str(&format!("{}{end}\n", names.join(sep)));
        }
        for r in &rows {
            let cells: Vec<String> = fields.iter().map(|(f, _)| r.get(*f)).collect();
            out.push_str(&format!("{}{end}\n", cells.join(sep)));
        }
        return Ok(out);
    }
    let headers: Vec<(&str, bool)> = fields
        .iter()
        .map(|(f, _)| (f.name(), f.numeric()))
        .collect();
    let mut t = Table::new(&headers);
    for r in &rows {
        t.row(
            fields
                .iter()
                .map(|(f, width)| {
                    let v = r.get(*f);
                    match width {
                        Some(w) => v.chars().take(*w).collect(),
                        None => v,
                    }
                })
                .collect(),
        );
    }
    let rendered = t.render();
    if !args.noheader {
        return Ok(rendered);
    }
    Ok(rendered.lines().skip(1).map(|l| format!("{l}\n")).collect())
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("gacct").chain(argv.iter().copied())).unwrap()
    }

    fn alice() -> Caller {
        Caller {
            user: "alice".into(),
            is_root: false,
        }
    }

    /// "today" is 1000, "now" 5000, anything else 42.
    fn when(t: &str) -> Result<u64, String> {
        match t {
            "today" => Ok(1000),
            "now" => Ok(5000),
            "bad" => Err("bad: not a time".into()),
            _ => Ok(42),
        }
    }

    /// A job row as the controller sends it.
    fn job(id: u64, state: &str, account: &str, nodes: u32, node_list: &str) -> JobRow {
        serde_json::from_value(serde_json::json!({
            "job_id": id, "display_id": id.to_string(), "name": format!("job{id}"),
            "user": "alice", "account": account, "partition": "gpu", "state": state,
            "reason": "None", "nodes": nodes, "node_list": node_list, "gpus_per_node": 1,
            "gpus": nodes, "restarts": 0, "held": false, "submit_ms": 1_000,
            "start_ms": 2_000u64, "end_ms": 62_000u64, "exit_code": 0,
        }))
        .unwrap()
    }

    #[test]
    fn the_window_and_the_users_are_saccts() {
        let q = query(&args(&[]), &alice(), when).unwrap();
        assert_eq!((q.since_ms, q.until_ms), (1000, 0), "from midnight today");
        assert_eq!(q.users, ["alice"], "your own jobs");
        let q = query(&args(&["-s", "R"]), &alice(), when).unwrap();
        assert_eq!(q.since_ms, 5000, "-s: the jobs in those states now");
        let q = query(&args(&["-j", "7"]), &alice(), when).unwrap();
        assert_eq!(
            (q.since_ms, q.users.len()),
            (0, 0),
            "-j: all time, anyone's"
        );
        let q = query(&args(&["-S", "2026-11-30", "-E", "x"]), &alice(), when).unwrap();
        assert_eq!((q.since_ms, q.until_ms), (42, 42));
        let root = Caller {
            is_root: true,
            ..alice()
        };
        assert!(query(&args(&[]), &root, when).unwrap().users.is_empty());
        assert!(
            query(&args(&["-a"]), &alice(), when)
                .unwrap()
                .users
                .is_empty()
        );
        let q = query(&args(&["-u", "bob,carol", "-r", "gpu"]), &alice(), when).unwrap();
        assert_eq!(q.users, ["bob", "carol"]);
        assert_eq!(q.partition.as_deref(), Some("gpu"));
        assert!(query(&args(&["-S", "bad"]), &alice(), when).is_err());
        assert!(query(&args(&["-j", "x_y_z"]), &alice(), when).is_err());
    }

    #[test]
    fn rows_are_kept_as_saccts_selecting_options_say() {
        let done = job(1, "COMPLETED", "Lab", 1, "n1");
        let failed = job(2, "FAILED", "vision", 2, "n[2-3]");
        let kept = |argv: &[&str]| {
            let a = args(argv);
            let f = Filter::new(&a).unwrap();
            [&done, &failed]
                .iter()
                .filter(|j| f.keeps(j))
                .map(|j| j.job_id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(kept(&[]), [1, 2]);
        assert_eq!(kept(&["-s", "CD"]), [1], "state abbreviations");
        assert_eq!(kept(&["-s", "failed"]), [2], "and names, any case");
        assert_eq!(kept(&["-A", "lab"]), [1], "accounts, any case");
        assert_eq!(kept(&["-i", "2-4"]), [2]);
        assert_eq!(kept(&["-N", "n3"]), [2], "ran on any of those nodes");
        assert!(Filter::new(&args(&["-i", "3-1"])).is_err());
        assert!(Filter::new(&args(&["-N", "n[1-"])).is_err());
    }

    #[test]
    fn rows_print_as_sacct_prints_them() {
        let jobs = [job(7, "COMPLETED", "lab", 1, "n1")];
        let out = |argv: &[&str]| listing(&args(argv), &jobs, 100_000).unwrap();
        assert_eq!(
            out(&["-o", "JobID,State,Elapsed", "-P"]),
            "JobID|State|Elapsed\n7|COMPLETED|00:01:00\n"
        );
        assert_eq!(out(&["-b", "-p", "-n"]), "7|COMPLETED|0:0|\n");
        assert_eq!(
            out(&["-o", "JobName,Account", "--csv", "--delimiter", ";"]),
            "JobName,Account\njob7,lab\n"
        );
        // gsched's own table (sacct pads each field to its own fixed width and rules a
        // line of dashes under the header; -P is the form tools read).
        assert_eq!(
            out(&["-o", "JobID,JobName%2,NNodes"]),
            "JobID JobName NNodes\n7     jo           1\n"
        );
        assert!(!out(&["-o", "JobID", "-n"]).contains("JobID"));
        assert!(listing(&args(&["-o", "JobID,Colour"]), &jobs, 0).is_err());
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    }
}
