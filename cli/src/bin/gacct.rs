//! `gacct`: accounting for finished (and running) jobs, sacct-style, with the failure
//! reason and the evidence behind it.

use gsched_cli::JobQuery;
use gsched_cli::args::gacct::Args;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_cli::out;
use gsched_cli::slurm_options::{Tool, parse_or_refuse};
use gsched_types::api::{JobRow, JobSelector, JobsDoc};
use gsched_types::parse::{format_duration, format_timestamp};

/// The arguments, `seff JOBID` read as `gacct --eff JOBID`.
fn parse_args() -> Args {
    let argv = gsched_cli::text_args("gacct");
    let invoked = gsched_cli::invoked_as();
    if invoked != "seff" {
        // --json is gsched's own document under gsched's name; sacct refuses it (Slurm's
        // is another schema).
        let (name, allowed): (&str, &[&str]) = if invoked == "sacct" {
            ("sacct", &[])
        } else {
            ("gacct", &["json"])
        };
        return parse_or_refuse(Tool::Sacct, name, argv, allowed);
    }
    let mut rest: Vec<String> = argv.into_iter().skip(1).collect();
    let at = rest.iter().position(|a| !a.starts_with('-'));
    let Some(at) = at else {
        die("seff", "usage: seff JOBID [--json]");
    };
    let job = rest.remove(at);
    // seff's -d (debug) shows the raw figures: --json does here.
    let rest = rest
        .into_iter()
        .map(|a| if a == "-d" { "--json".into() } else { a });
    <Args as clap::Parser>::parse_from(
        ["gacct".to_string(), "--eff".into(), job]
            .into_iter()
            .chain(rest),
    )
}

/// `gacct --eff JOBID`.
fn efficiency(args: &Args, job: &str) {
    let selector = JobSelector::parse(job).unwrap_or_else(|e| die("gacct", e));
    let query = JobQuery {
        include_finished: true,
        detail: true,
        jobs: vec![selector],
        archive: true,
        ..Default::default()
    };
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let Some(row) = list
        .jobs
        .iter()
        .find(|j| j.display_id == job || j.job_id.0.to_string() == job)
    else {
        die(
            "gacct",
            format!(
                "no job {job} (it may have ended before the controller's window; gacct -j {job} shows what is known)"
            ),
        );
    };
    let report = row.efficiency(list.now_ms);
    if args.json {
        gsched_cli::print_json(&report);
    } else {
        out!("{}", gsched_cli::efficiency::render(&report));
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

fn main() {
    let args = parse_args();
    if let Some(job) = &args.eff {
        efficiency(&args, job);
        return;
    }
    if args.usage {
        out!("Usage: sacct [options]\n\tUse --help for help\n");
        return;
    }
    if args.helpformat {
        out!("{}", help_fields());
        return;
    }
    let when = |t: &Option<String>| {
        t.as_deref()
            .map(|t| gsched_cli::when::parse(t).unwrap_or_else(|e| die("gacct", e)))
    };
    // sacct's window: from midnight today; from now with -s (the jobs in those states
    // now); all time for named jobs.
    let since_ms = when(&args.starttime).unwrap_or(if !args.states.is_empty() {
        gsched_cli::when::parse("now").unwrap_or_else(|e| die("gacct", e))
    } else if args.jobs.is_empty() {
        gsched_cli::when::today_ms()
    } else {
        0
    });
    // sacct's users: those named; everyone's with -a, -j or -N, or for root; else yours.
    let users: Vec<String> = if !args.user.is_empty() {
        args.user.clone()
    } else if args.allusers
        || !args.jobs.is_empty()
        || args.nodelist.is_some()
        || nix::unistd::getuid().is_root()
    {
        Vec::new()
    } else {
        vec![gsched_cli::client::current_user()]
    };
    let nodes = match &args.nodelist {
        None => Vec::new(),
        Some(list) => gsched_types::hostlist::expand(list)
            .unwrap_or_else(|e| die("gacct", format!("--nodelist {list}: {e}"))),
    };
    let nnodes = args
        .nnodes
        .as_deref()
        .map(|r| count_range(r).unwrap_or_else(|e| die("gacct", e)));
    let query = JobQuery {
        include_finished: true,
        detail: args.json || args.attempts,
        since_ms,
        until_ms: when(&args.endtime).unwrap_or(0),
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
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gacct", e)))
            .collect(),
        ..Default::default()
    };
    let wanted = |state: &str| {
        args.states.is_empty()
            || args.states.iter().any(|s| {
                gsched_types::JobState::parse(s).is_some_and(|w| w.name() == state)
                    || s.eq_ignore_ascii_case(state)
            })
    };
    let keeps = |j: &JobRow| {
        wanted(j.state.name())
            && (args.accounts.is_empty()
                || args
                    .accounts
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(&j.account)))
            && (args.partition.is_empty() || args.partition.contains(&j.partition))
            && (args.qos.is_empty() || j.qos.as_ref().is_some_and(|q| args.qos.contains(q)))
            && (args.wckeys.is_empty() || j.wckey.as_ref().is_some_and(|w| args.wckeys.contains(w)))
            && (args.reason.is_empty()
                || args
                    .reason
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(&j.reason)))
            && nnodes.is_none_or(|(lo, hi)| (lo..=hi).contains(&j.nodes))
            && (nodes.is_empty()
                || gsched_types::hostlist::expand(&j.node_list)
                    .unwrap_or_default()
                    .iter()
                    .any(|n| nodes.contains(n)))
    };
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let now = list.now_ms;
    let jobs: Vec<_> = list.jobs.into_iter().filter(|j| keeps(j)).collect();
    if args.json {
        gsched_cli::print_json(&JobsDoc { jobs });
        return;
    }
    let mut fields = match &args.format {
        Some(f) => Field::parse_list(f).unwrap_or_else(|e| die("gacct", e)),
        None if args.brief => Vec::new(),
        None => Field::DEFAULT.iter().map(|f| (*f, None)).collect(),
    };
    if args.brief {
        fields.extend(Field::BRIEF.iter().map(|f| (*f, None)));
    }
    let mut rows: Vec<Row> = Vec::new();
    for j in &jobs {
        rows.push(Row::Job(j, now));
        if !args.allocations {
            rows.extend(j.steps.iter().map(|s| Row::Step(j, s, now)));
        }
        if args.attempts {
            rows.extend(j.attempts.iter().map(|a| Row::Attempt(j, a)));
        }
    }
    if args.csv {
        if !args.noheader {
            let names: Vec<&str> = fields.iter().map(|(f, _)| f.name()).collect();
            out!("{}\n", names.join(","));
        }
        for r in &rows {
            let cells: Vec<String> = fields.iter().map(|(f, _)| csv_field(&r.get(*f))).collect();
            out!("{}\n", cells.join(","));
        }
        return;
    }
    if args.parsable || args.parsable2 {
        let sep = args.delimiter.as_deref().unwrap_or("|");
        let end = if args.parsable { sep } else { "" };
        if !args.noheader {
            let names: Vec<&str> = fields.iter().map(|(f, _)| f.name()).collect();
            out!("{}{end}\n", names.join(sep));
        }
        for r in &rows {
            let cells: Vec<String> = fields.iter().map(|(f, _)| r.get(*f)).collect();
            out!("{}{end}\n", cells.join(sep));
        }
        return;
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
    if args.noheader {
        for line in rendered.lines().skip(1) {
            out!("{line}\n");
        }
    } else {
        out!("{rendered}");
    }
}

/// `MIN` or `MIN-MAX` (sacct's --nnodes).
fn count_range(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--nnodes {text}: give MIN or MIN-MAX");
    let (lo, hi) = text.split_once('-').unwrap_or((text, text));
    let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// The fields -o takes, four to a line, as `sacct -e` lists them.
fn help_fields() -> String {
    let mut out = String::new();
    for (i, f) in Field::ALL.iter().enumerate() {
        if i % 4 != 0 {
            out.push(' ');
        } else if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("{:<19}", f.name()));
    }
    out.push('\n');
    out
}

/// A column sacct knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    JobId,
    JobIdRaw,
    JobName,
    Partition,
    Account,
    User,
    AllocGpus,
    AllocTres,
    NNodes,
    State,
    ExitCode,
    Elapsed,
    ElapsedRaw,
    Start,
    End,
    Submit,
    Timelimit,
    Restarts,
    NodeList,
    Reason,
    Comment,
    WcKey,
}

impl Field {
    const ALL: [Field; 22] = [
        Field::JobId,
        Field::JobIdRaw,
        Field::JobName,
        Field::Partition,
        Field::Account,
        Field::User,
        Field::AllocGpus,
        Field::AllocTres,
        Field::NNodes,
        Field::State,
        Field::ExitCode,
        Field::Elapsed,
        Field::ElapsedRaw,
        Field::Start,
        Field::End,
        Field::Submit,
        Field::Timelimit,
        Field::Restarts,
        Field::NodeList,
        Field::Reason,
        Field::Comment,
        Field::WcKey,
    ];
    const BRIEF: [Field; 3] = [Field::JobId, Field::State, Field::ExitCode];
    const DEFAULT: [Field; 11] = [
        Field::JobId,
        Field::JobName,
        Field::Partition,
        Field::User,
        Field::AllocGpus,
        Field::State,
        Field::ExitCode,
        Field::Elapsed,
        Field::Restarts,
        Field::NodeList,
        Field::Reason,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::JobId => "JobID",
            Field::JobIdRaw => "JobIDRaw",
            Field::JobName => "JobName",
            Field::Partition => "Partition",
            Field::Account => "Account",
            Field::User => "User",
            Field::AllocGpus => "AllocGPUS",
            Field::AllocTres => "AllocTRES",
            Field::NNodes => "NNodes",
            Field::State => "State",
            Field::ExitCode => "ExitCode",
            Field::Elapsed => "Elapsed",
            Field::ElapsedRaw => "ElapsedRaw",
            Field::Start => "Start",
            Field::End => "End",
            Field::Submit => "Submit",
            Field::Timelimit => "Timelimit",
            Field::Restarts => "Restarts",
            Field::NodeList => "NodeList",
            Field::Reason => "Reason",
            Field::Comment => "Comment",
            Field::WcKey => "WCKey",
        }
    }

    fn numeric(self) -> bool {
        matches!(
            self,
            Field::AllocGpus | Field::NNodes | Field::ElapsedRaw | Field::Restarts | Field::Elapsed
        )
    }

    /// `JobID,JobName%30,State`: fields and their widths, any case.
    fn parse_list(text: &str) -> Result<Vec<(Field, Option<usize>)>, String> {
        text.split(',')
            .filter(|f| !f.trim().is_empty())
            .map(|f| {
                let (name, width) = match f.trim().split_once('%') {
                    Some((n, w)) => (
                        n,
                        Some(
                            w.parse::<usize>()
                                .map_err(|_| format!("--format: bad width in '{f}'"))?,
                        ),
                    ),
                    None => (f.trim(), None),
                };
                Field::ALL
                    .iter()
                    .find(|x| x.name().eq_ignore_ascii_case(name))
                    .map(|x| (*x, width))
                    .ok_or_else(|| {
                        let known: Vec<&str> = Field::ALL.iter().map(|x| x.name()).collect();
                        format!(
                            "--format: unknown field '{name}'; known: {}",
                            known.join(",")
                        )
                    })
            })
            .collect()
    }
}

/// One output row: a job, one of its steps, or an attempt. Its cells are made when asked
/// for, so a listing costs only the fields it shows.
enum Row<'a> {
    Job(&'a JobRow, u64),
    Step(&'a JobRow, &'a gsched_types::steps::StepRecord, u64),
    Attempt(&'a JobRow, &'a gsched_types::job::Attempt),
}

impl Row<'_> {
    fn get(&self, f: Field) -> String {
        match *self {
            Row::Job(j, now) => job_cell(j, now, f),
            Row::Step(j, s, now) => step_cell(j, s, now, f),
            Row::Attempt(j, a) => attempt_cell(j, a, f),
        }
    }
}

fn job_cell(j: &JobRow, now: u64, field: Field) -> String {
    let elapsed_s = || match (j.start_ms, j.end_ms) {
        (Some(s), Some(e)) => e.saturating_sub(s) / 1000,
        (Some(s), None) => now.saturating_sub(s) / 1000,
        _ => 0,
    };
    let time = |t: Option<u64>| t.map(format_timestamp).unwrap_or_else(|| "Unknown".into());
    match field {
        Field::JobId => j.display_id.clone(),
        Field::JobIdRaw => j.job_id.to_string(),
        Field::JobName => j.name.clone(),
        Field::Partition => j.partition.clone(),
        Field::Account => j.account.clone(),
        Field::User => j.user.clone(),
        Field::AllocGpus => j.gpus.to_string(),
        Field::AllocTres => format!("gres/gpu={},node={}", j.gpus, j.nodes),
        Field::NNodes => j.nodes.to_string(),
        Field::State => j.state.name().into(),
        Field::ExitCode => match (j.exit_code, j.failure.as_ref().map(|f| &f.kind)) {
            (_, Some(gsched_types::FailureKind::Signal { signal })) => format!("0:{signal}"),
            (Some(c), _) => format!("{c}:0"),
            (None, _) => "0:0".into(),
        },
        Field::Elapsed => format_duration(elapsed_s()),
        Field::ElapsedRaw => elapsed_s().to_string(),
        Field::Start => time(j.start_ms),
        Field::End => time(j.end_ms),
        Field::Submit => format_timestamp(j.submit_ms),
        Field::Timelimit => j
            .time_limit_s
            .map(format_duration)
            .unwrap_or_else(|| "UNLIMITED".into()),
        Field::Restarts => j.attempt.to_string(),
        Field::NodeList => j.node_list.clone(),
        Field::Reason => gsched_cli::format::failure_line(j),
        Field::Comment => j.comment.clone().unwrap_or_default(),
        Field::WcKey => j.wckey.clone().unwrap_or_default(),
    }
}

fn step_cell(j: &JobRow, s: &gsched_types::steps::StepRecord, now: u64, field: Field) -> String {
    let el = || s.end_ms.unwrap_or(now).saturating_sub(s.start_ms) / 1000;
    match field {
        Field::JobId => format!("{}.{}", j.display_id, s.step),
        Field::JobIdRaw => format!("{}.{}", j.job_id, s.step),
        Field::JobName => s.name.clone(),
        Field::Account => j.account.clone(),
        Field::NNodes => s.nodes.len().to_string(),
        Field::State => s.state.name().into(),
        Field::ExitCode => format!("{}:{}", s.exit_code.unwrap_or(0), s.signal.unwrap_or(0)),
        Field::Elapsed => format_duration(el()),
        Field::ElapsedRaw => el().to_string(),
        Field::Start => format_timestamp(s.start_ms),
        Field::End => s
            .end_ms
            .map(format_timestamp)
            .unwrap_or_else(|| "Unknown".into()),
        Field::NodeList => gsched_types::hostlist::compress(&s.nodes),
        _ => String::new(),
    }
}

fn attempt_cell(j: &JobRow, a: &gsched_types::job::Attempt, field: Field) -> String {
    match field {
        Field::JobId => format!("{}.attempt{}", j.display_id, a.number),
        Field::State => a.state.name().into(),
        Field::Elapsed => match (a.start_ms, a.end_ms) {
            (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
            _ => "-".into(),
        },
        Field::NodeList => gsched_types::hostlist::compress(&a.nodes),
        Field::Reason => a
            .failure
            .as_ref()
            .map(|f| f.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    }
}
