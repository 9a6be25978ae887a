//! `gqueue`: the queue, as squeue shows it.

use clap::Parser;
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::format::{Table, elapsed, nodelist_or_reason};
use gsched_cli::out;
use gsched_cli::queue_format::QueueFormat;
use gsched_types::api::{JobSelector, JobsDoc};
use gsched_types::job::JobState;
use gsched_types::parse::format_timestamp;

/// Show pending and running jobs (squeue-compatible columns).
#[derive(Parser, Debug)]
#[command(name = "gqueue", version, about, disable_help_flag = true)]
struct Args {
    /// Print help (-h is squeue's --noheader).
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// No header line (squeue -h).
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// squeue's output format: `%[.][width]letter` fields, e.g. "%.18i %.9P %j %T %R"
    /// (letters: i A j u t T M D R N r P l S e).
    #[arg(short = 'o', long = "format", conflicts_with = "long_format")]
    format: Option<String>,
    /// squeue's long format: field names with optional widths, e.g.
    /// "JobID,Name:30,State,ReasonList".
    #[arg(short = 'O', long = "Format")]
    long_format: Option<String>,
    /// Only these users' jobs (comma separated).
    #[arg(short = 'u', long = "user", value_delimiter = ',')]
    user: Vec<String>,
    /// Only these jobs (comma separated; 120 shows every task of array 120).
    #[arg(short = 'j', long = "jobs", value_delimiter = ',')]
    jobs: Vec<String>,
    /// Only these states (PD,R,CG,CD,F,CA,TO,NF,OOM or names); `all` includes finished jobs.
    #[arg(short = 't', long = "states", value_delimiter = ',')]
    states: Vec<String>,
    /// Only this partition.
    #[arg(short = 'p', long = "partition")]
    partition: Option<String>,
    /// Expected start times of pending jobs (from the backfill plan).
    #[arg(long = "start")]
    start: bool,
    /// Show failure reasons and evidence of ended jobs.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Running `grun`/`srun` steps (squeue -s): STEPID NAME PARTITION USER TIME NODELIST.
    #[arg(short = 's', long = "steps")]
    steps: bool,
    /// Only my jobs (`-u $USER`).
    /// Only jobs with these names.
    #[arg(short = 'n', long = "name", value_delimiter = ',')]
    name: Vec<String>,
    /// One line per array task (gsched always lists them so).
    #[arg(short = 'r', long = "array")]
    array: bool,
    #[arg(long = "me")]
    me: bool,
    /// Answer from the controller asked, without confirming with the leader (may lag by
    /// a few milliseconds; spares the leader).
    #[arg(long = "stale-ok")]
    stale_ok: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    controllers: Option<String>,
}

fn main() {
    let args = Args::parse();
    let mut users = args.user.clone();
    if args.me {
        users.push(gsched_cli::client::current_user());
    }
    let mut query = JobQuery {
        detail: args.json,
        users,
        partition: args.partition.clone(),
        stale_ok: args.stale_ok,
        names: args.name.clone(),
        ..Default::default()
    };
    for s in &args.states {
        if s.eq_ignore_ascii_case("all") {
            query.include_finished = true;
        } else if JobState::parse(s).is_some() {
            query.states.push(s.clone());
        } else {
            die(
                "gqueue",
                format!("invalid state '{s}': use PD, R, CG, CD, F, CA, TO, NF, OOM or all"),
            );
        }
    }
    if query.include_finished {
        query.states.clear();
    }
    query.jobs = args
        .jobs
        .iter()
        .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die("gqueue", e)))
        .collect();
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    if args.steps {
        print_steps(&rt, &mut client, &query, !args.noheader);
        return;
    }
    if !args.json && !args.long {
        let format = match (&args.format, &args.long_format) {
            (Some(f), _) => QueueFormat::parse(f),
            (_, Some(f)) => QueueFormat::parse_long(f),
            _ => Ok(default_format(args.start)),
        }
        .unwrap_or_else(|e| die("gqueue", e));
        print_queue(&rt, &mut client, &query, &format, !args.noheader);
        return;
    }
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gqueue");
    let now = list.now_ms;
    let jobs = list.jobs;
    if args.json {
        gsched_cli::print_json(&JobsDoc { jobs });
        return;
    }
    let mut headers = vec![
        ("JOBID", true),
        ("PARTITION", true),
        ("NAME", true),
        ("USER", true),
        ("ST", true),
        ("TIME", true),
        ("NODES", true),
    ];
    if args.start {
        headers.push(("START_TIME", true));
    }
    headers.push(("NODELIST(REASON)", false));
    if args.long {
        headers.push(("FAILURE", false));
    }
    let mut t = Table::new(&headers);
    for j in &jobs {
        let mut row = vec![
            j.display_id.clone(),
            j.partition.clone(),
            j.name.chars().take(16).collect(),
            j.user.clone(),
            j.state.code().into(),
            elapsed(j, now),
            j.nodes.to_string(),
        ];
        if args.start {
            row.push(match (j.state, j.expected_start_ms, j.start_ms) {
                (JobState::Pending, Some(t), _) => format_timestamp(t),
                (JobState::Pending, None, _) => "N/A".into(),
                (_, _, Some(s)) => format_timestamp(s),
                _ => "N/A".into(),
            });
        }
        row.push(nodelist_or_reason(j));
        if args.long {
            row.push(gsched_cli::format::failure_line(j));
        }
        t.row(row);
    }
    out!("{}", t.render());
}

/// The running steps of the jobs `query` names, as `squeue -s` lists them.
fn print_steps(rt: &tokio::runtime::Runtime, client: &mut Client, query: &JobQuery, header: bool) {
    let list = gsched_cli::fetch_jobs(rt, client, query, "gqueue");
    let mut t = Table::new(&[
        ("STEPID", true),
        ("NAME", true),
        ("PARTITION", true),
        ("USER", true),
        ("TIME", true),
        ("NODELIST", false),
    ]);
    for j in &list.jobs {
        for s in j
            .steps
            .iter()
            .filter(|s| s.state == gsched_types::steps::StepState::Running)
        {
            t.row(vec![
                format!("{}.{}", j.display_id, s.step),
                s.name.chars().take(16).collect(),
                j.partition.clone(),
                j.user.clone(),
                gsched_types::parse::format_duration(list.now_ms.saturating_sub(s.start_ms) / 1000),
                gsched_types::hostlist::compress(&s.nodes),
            ]);
        }
    }
    let text = t.render();
    if header {
        out!("{text}");
    } else {
        out!("{}", text.split_once('\n').map_or("", |(_, rest)| rest));
    }
}

/// squeue's default columns (`--start` adds START_TIME).
fn default_format(start: bool) -> QueueFormat {
    let f = if start {
        "%.18i %.9P %.8j %.8u %.2t %.10M %.19S %.6D %R"
    } else {
        "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    };
    QueueFormat::parse(f).expect("the default format parses")
}

/// The queue in `format`, printed page by page as the controller sends them.
fn print_queue(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    query: &JobQuery,
    format: &QueueFormat,
    header: bool,
) {
    if header {
        out!("{}\n", format.header());
    }
    gsched_cli::fetch_queue(rt, client, query, "gqueue", |page| {
        let mut text = String::with_capacity(page.jobs.len() * 96);
        for j in &page.jobs {
            format.write_line(&mut text, j, page.now_ms);
            text.push('\n');
        }
        out!("{text}");
    });
}
