//! `gacct`: accounting for finished (and running) jobs, sacct-style, with the failure
//! reason and the evidence behind it.

use clap::Parser;
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::Table;
use gsched_cli::out;
use gsched_types::api::{JobRow, JobSelector, JobsDoc};
use gsched_types::parse::{format_duration, format_timestamp};

/// Job accounting: state, exit code, elapsed time, GPUs, and why a job failed.
#[derive(Parser, Debug)]
#[command(name = "gacct", version, about)]
struct Args {
    #[arg(short = 'j', long = "jobs", value_delimiter = ',')]
    jobs: Vec<String>,
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Jobs active at or after this time (default: midnight today, or all time with -j):
    /// now-1hour, 2026-11-30T08:00, 08:00, today...
    #[arg(short = 'S', long = "starttime")]
    starttime: Option<String>,
    /// Jobs active at or before this time (default: now).
    #[arg(short = 'E', long = "endtime")]
    endtime: Option<String>,
    /// Only jobs of these names (sacct's --name).
    #[arg(long = "name", value_delimiter = ',')]
    names: Vec<String>,
    /// One row per attempt of requeued jobs.
    #[arg(long)]
    attempts: bool,
    /// Columns, as sacct names them (JobID,JobName,State,ExitCode,Elapsed,NodeList...;
    /// a %N suffix sets the width).
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
    /// No header line.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Fields split by `|`, none at the end of the line.
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// Fields split by `|`, one at the end of the line too.
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// Jobs only, not their steps.
    #[arg(short = 'X', long = "allocations")]
    allocations: bool,
    /// Every user's jobs (gsched's default when no user is named).
    #[arg(short = 'a', long = "allusers")]
    allusers: bool,
    /// Only jobs in these states (CD, F, CA, TO, R, PD... or full names).
    #[arg(short = 's', long = "state", value_delimiter = ',')]
    states: Vec<String>,
    #[arg(long)]
    json: bool,
    /// Comma-separated values with a header line (fields quoted where they need it).
    #[arg(long, conflicts_with_all = ["json", "parsable", "parsable2"])]
    csv: bool,
    /// The efficiency report of one job (as `seff JOBID`): a bar per GPU and per node and
    /// advice; with --json the report as JSON.
    #[arg(long = "eff", value_name = "JOBID")]
    eff: Option<String>,
    #[arg(long)]
    controllers: Option<String>,
}

/// The arguments, `seff JOBID` read as `gacct --eff JOBID`.
fn parse_args() -> Args {
    let argv = gsched_cli::text_args("gacct");
    if gsched_cli::invoked_as() != "seff" {
        return Args::parse_from(argv);
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
    Args::parse_from(
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
    let when = |t: &Option<String>| {
        t.as_deref()
            .map(|t| gsched_cli::when::parse(t).unwrap_or_else(|e| die("gacct", e)))
    };
    let since_ms = when(&args.starttime).unwrap_or(if args.jobs.is_empty() {
        gsched_cli::when::today_ms()
    } else {
        0
    });
    let query = JobQuery {
        include_finished: true,
        detail: args.json || args.attempts,
        since_ms,
        until_ms: when(&args.endtime).unwrap_or(0),
        archive: true,
        users: args.user.iter().cloned().collect(),
        jobs: args
            .jobs
            .iter()
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gacct", e)))
            .collect(),
        ..Default::default()
    };
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let now = list.now_ms;
    let jobs: Vec<_> = list
        .jobs
        .into_iter()
        .filter(|j| args.names.is_empty() || args.names.contains(&j.name))
        .collect();
    if args.json {
        gsched_cli::print_json(&JobsDoc { jobs });
        return;
    }
    let fields = match &args.format {
        Some(f) => Field::parse_list(f).unwrap_or_else(|e| die("gacct", e)),
        None => Field::DEFAULT.iter().map(|f| (*f, None)).collect(),
    };
    let wanted = |state: &str| {
        args.states.is_empty()
            || args.states.iter().any(|s| {
                gsched_types::JobState::parse(s).is_some_and(|w| w.name() == state)
                    || s.eq_ignore_ascii_case(state)
            })
    };
    let mut rows: Vec<Row> = Vec::new();
    for j in &jobs {
        if !wanted(j.state.name()) {
            continue;
        }
        rows.push(Row::job(j, now));
        if !args.allocations {
            for s in &j.steps {
                rows.push(Row::step(j, s, now));
            }
        }
        if args.attempts {
            for a in &j.attempts {
                rows.push(Row::attempt(j, a));
            }
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
        let end = if args.parsable { "|" } else { "" };
        if !args.noheader {
            let names: Vec<&str> = fields.iter().map(|(f, _)| f.name()).collect();
            out!("{}{end}\n", names.join("|"));
        }
        for r in &rows {
            let cells: Vec<String> = fields.iter().map(|(f, _)| r.get(*f)).collect();
            out!("{}{end}\n", cells.join("|"));
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

/// One output row: a job, one of its steps, or an attempt.
struct Row(std::collections::BTreeMap<&'static str, String>);

impl Row {
    fn get(&self, f: Field) -> String {
        self.0.get(f.name()).cloned().unwrap_or_default()
    }

    fn job(j: &JobRow, now: u64) -> Row {
        let exit = match (j.exit_code, j.failure.as_ref().map(|f| &f.kind)) {
            (_, Some(gsched_types::FailureKind::Signal { signal })) => format!("0:{signal}"),
            (Some(c), _) => format!("{c}:0"),
            (None, _) => "0:0".into(),
        };
        let elapsed_s = match (j.start_ms, j.end_ms) {
            (Some(s), Some(e)) => e.saturating_sub(s) / 1000,
            (Some(s), None) => now.saturating_sub(s) / 1000,
            _ => 0,
        };
        let time = |t: Option<u64>| t.map(format_timestamp).unwrap_or_else(|| "Unknown".into());
        Row(std::collections::BTreeMap::from([
            ("JobID", j.display_id.clone()),
            ("JobIDRaw", j.job_id.to_string()),
            ("JobName", j.name.clone()),
            ("Partition", j.partition.clone()),
            ("Account", j.account.clone()),
            ("User", j.user.clone()),
            ("AllocGPUS", j.gpus.to_string()),
            ("AllocTRES", format!("gres/gpu={},node={}", j.gpus, j.nodes)),
            ("NNodes", j.nodes.to_string()),
            ("State", j.state.name().into()),
            ("ExitCode", exit),
            ("Elapsed", format_duration(elapsed_s)),
            ("ElapsedRaw", elapsed_s.to_string()),
            ("Start", time(j.start_ms)),
            ("End", time(j.end_ms)),
            ("Submit", format_timestamp(j.submit_ms)),
            (
                "Timelimit",
                j.time_limit_s
                    .map(format_duration)
                    .unwrap_or_else(|| "UNLIMITED".into()),
            ),
            ("Restarts", j.attempt.to_string()),
            ("NodeList", j.node_list.clone()),
            ("Reason", gsched_cli::format::failure_line(j)),
            ("Comment", j.comment.clone().unwrap_or_default()),
            ("WCKey", j.wckey.clone().unwrap_or_default()),
        ]))
    }

    fn step(j: &JobRow, s: &gsched_types::steps::StepRecord, now: u64) -> Row {
        let el = s.end_ms.unwrap_or(now).saturating_sub(s.start_ms) / 1000;
        Row(std::collections::BTreeMap::from([
            ("JobID", format!("{}.{}", j.display_id, s.step)),
            ("JobIDRaw", format!("{}.{}", j.job_id, s.step)),
            ("JobName", s.name.clone()),
            ("Account", j.account.clone()),
            ("NNodes", s.nodes.len().to_string()),
            ("State", s.state.name().into()),
            (
                "ExitCode",
                format!("{}:{}", s.exit_code.unwrap_or(0), s.signal.unwrap_or(0)),
            ),
            ("Elapsed", format_duration(el)),
            ("ElapsedRaw", el.to_string()),
            ("Start", format_timestamp(s.start_ms)),
            (
                "End",
                s.end_ms
                    .map(format_timestamp)
                    .unwrap_or_else(|| "Unknown".into()),
            ),
            ("NodeList", gsched_types::hostlist::compress(&s.nodes)),
        ]))
    }

    fn attempt(j: &JobRow, a: &gsched_types::job::Attempt) -> Row {
        let el = match (a.start_ms, a.end_ms) {
            (Some(s), Some(e)) => format_duration(e.saturating_sub(s) / 1000),
            _ => "-".into(),
        };
        Row(std::collections::BTreeMap::from([
            ("JobID", format!("{}.attempt{}", j.display_id, a.number)),
            ("State", a.state.name().into()),
            ("Elapsed", el),
            ("NodeList", gsched_types::hostlist::compress(&a.nodes)),
            (
                "Reason",
                a.failure
                    .as_ref()
                    .map(|f| f.to_string())
                    .unwrap_or_default(),
            ),
        ]))
    }
}
