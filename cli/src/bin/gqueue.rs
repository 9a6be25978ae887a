//! `gqueue`: the queue, as squeue shows it.

use gsched_cli::JobQuery;
use gsched_cli::args::gqueue::Args;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::queue_format::{
    DEFAULT_FORMAT, LONG_FORMAT, QueueFormat, START_FORMAT, compare, parse_sort, queue_row,
};
use gsched_cli::slurm_options::{Tool, parse_or_refuse};
use gsched_cli::{out, outln};
use gsched_types::api::{JobRow, JobSelector, JobsDoc};
use gsched_types::job::JobState;

fn main() {
    let tool = gsched_cli::invoked_as();
    let name = if tool == "squeue" { "squeue" } else { "gqueue" };
    // --json is gsched's own document under gsched's name; squeue refuses it (Slurm's
    // is another schema).
    let allowed: &[&str] = if name == "gqueue" { &["json"] } else { &[] };
    let args: Args = parse_or_refuse(Tool::Squeue, name, gsched_cli::text_args(name), allowed);
    if args.usage {
        outln!(
            "Usage: {name} [-A account] [--clusters names] [-i seconds] [--job jobid]\n              [-n name] [-o format] [-p partitions] [--qos qos]\n              [--reservation reservation] [--sort fields] [--start]\n              [--step step_id] [-t states] [-u user_name] [--usage]\n              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]\n              [-ahjlrsv]"
        );
        return;
    }
    let plan = Plan::of(&args, name);
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    loop {
        // squeue prints the time first when it repeats or lists long (not under -h).
        if !args.noheader && (args.iterate.is_some() || args.long) && !args.json {
            outln!("{}", slurm_date());
        }
        plan.run(&rt, &mut client);
        match args.iterate {
            Some(secs) => {
                outln!();
                std::thread::sleep(std::time::Duration::from_secs(secs));
            }
            None => break,
        }
    }
}

/// The local time as Slurm's tools print it above a listing (`Tue Dec 01 10:00:00 2026`).
fn slurm_date() -> String {
    chrono::Local::now()
        .format("%a %b %d %H:%M:%S %Y")
        .to_string()
}

/// What one listing asks for, read once from the options.
struct Plan {
    name: &'static str,
    query: JobQuery,
    /// Steps rather than jobs (`-s`), and which (`JOB.STEP`; none: all).
    steps: Option<Vec<String>>,
    partitions: Vec<String>,
    accounts: Vec<String>,
    qos: Vec<String>,
    reservation: Option<String>,
    nodes: Vec<String>,
    sort: Vec<(char, bool)>,
    format: QueueFormat,
    header: bool,
    json: bool,
    /// A FAILURE column after the format's (`-l`) when a job listed has one.
    failures: bool,
    /// Whole job rows are needed (filters and sort keys a queue line lacks).
    rows: bool,
}

impl Plan {
    fn of(args: &Args, name: &'static str) -> Plan {
        let mut users = args.user.clone();
        if args.me {
            users.push(gsched_cli::client::current_user());
        }
        // `-j LIST`/`-s LIST`: squeue takes the list from the last word.
        let mut list = args.list.iter();
        let mut jobs_text = args.jobs.clone().filter(|j| !j.is_empty());
        let mut steps_text = args.steps.clone().filter(|s| !s.is_empty());
        if let Some(word) = list.next() {
            if args.jobs.is_some() && jobs_text.is_none() {
                jobs_text = Some(word.clone());
            } else if args.steps.is_some() && steps_text.is_none() {
                steps_text = Some(word.clone());
            } else {
                die(name, format!("Unrecognized option: {word}"));
            }
        }
        if let Some(word) = list.next() {
            die(name, format!("Unrecognized option: {word}"));
        }
        let split = |t: &Option<String>| -> Vec<String> {
            t.iter()
                .flat_map(|t| t.split(','))
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let steps = args.steps.as_ref().map(|_| split(&steps_text));
        let mut states = args.states.clone();
        if args.start && args.steps.is_none() && states.is_empty() {
            // squeue --start lists pending jobs.
            states.push("PD".into());
        }
        let mut query = JobQuery {
            detail: args.json || args.reservation.is_some(),
            users,
            partition: match args.partitions.as_slice() {
                [one] => Some(one.clone()),
                _ => None,
            },
            stale_ok: args.stale_ok,
            names: args.name.clone(),
            ..Default::default()
        };
        for s in &states {
            if s.eq_ignore_ascii_case("all") {
                query.include_finished = true;
            } else if JobState::parse(s).is_some() {
                query.states.push(s.clone());
            } else {
                die(
                    name,
                    format!("invalid state '{s}': use PD, R, CG, CD, F, CA, TO, NF, OOM or all"),
                );
            }
        }
        if query.include_finished {
            query.states.clear();
        }
        let mut job_words = split(&jobs_text);
        // Steps named as JOB.STEP select their jobs.
        if let Some(steps) = &steps {
            job_words.extend(
                steps
                    .iter()
                    .map(|s| s.split_once('.').map_or(s.as_str(), |(j, _)| j).to_string()),
            );
        }
        query.jobs = job_words
            .iter()
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die(name, e)))
            .collect();
        let nodes = match &args.nodelist {
            None => Vec::new(),
            Some(list) => gsched_types::hostlist::expand(list).unwrap_or_else(|e| {
                die(name, format!("'{list}' invalid entry for --nodelist: {e}"))
            }),
        };
        let sort = match &args.sort {
            Some(s) => parse_sort(s).unwrap_or_else(|e| die(name, e)),
            // squeue --start lists by expected start.
            None if args.start => vec![('S', false)],
            None => Vec::new(),
        };
        let format = match (&args.format, &args.long_format) {
            (Some(f), _) => QueueFormat::parse(f),
            (_, Some(f)) => QueueFormat::parse_long(f),
            _ if args.long => QueueFormat::parse(LONG_FORMAT),
            _ if args.start => QueueFormat::parse(START_FORMAT),
            _ => QueueFormat::parse(DEFAULT_FORMAT),
        }
        .unwrap_or_else(|e| die(name, e));
        let rows = args.json
            || args.long
            || !sort.is_empty()
            || !args.accounts.is_empty()
            || !args.qos.is_empty()
            || args.reservation.is_some()
            || !nodes.is_empty();
        Plan {
            name,
            query,
            steps,
            partitions: args.partitions.clone(),
            accounts: args.accounts.clone(),
            qos: args.qos.clone(),
            reservation: args.reservation.clone(),
            nodes,
            sort,
            format,
            header: !args.noheader,
            json: args.json,
            failures: args.long,
            rows,
        }
    }

    fn run(&self, rt: &tokio::runtime::Runtime, client: &mut Client) {
        if let Some(steps) = &self.steps {
            self.print_steps(rt, client, steps);
        } else if self.rows {
            self.print_rows(rt, client);
        } else {
            self.print_queue(rt, client);
        }
    }

    fn in_partitions(&self, partition: &str) -> bool {
        self.partitions.is_empty() || self.partitions.iter().any(|p| p == partition)
    }

    /// The filters a queue line cannot answer, on a whole row.
    fn keeps(&self, j: &JobRow) -> bool {
        self.in_partitions(&j.partition)
            && (self.accounts.is_empty()
                || self
                    .accounts
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(&j.account)))
            && (self.qos.is_empty() || j.qos.as_ref().is_some_and(|q| self.qos.contains(q)))
            && self.reservation.as_ref().is_none_or(|r| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.reservation.as_ref())
                    .is_some_and(|own| own == r)
            })
            && (self.nodes.is_empty() || {
                let on = gsched_types::hostlist::expand(&j.node_list).unwrap_or_default();
                !matches!(j.state, JobState::Pending) && on.iter().any(|n| self.nodes.contains(n))
            })
    }

    /// Jobs as whole rows: filtered, sorted, then printed in the format (or as JSON).
    fn print_rows(&self, rt: &tokio::runtime::Runtime, client: &mut Client) {
        let list = gsched_cli::fetch_jobs(rt, client, &self.query, self.name);
        let now = list.now_ms;
        let mut jobs: Vec<JobRow> = list.jobs.into_iter().filter(|j| self.keeps(j)).collect();
        if !self.sort.is_empty() {
            jobs.sort_by(|a, b| compare(&self.sort, a, b, now));
        }
        if self.json {
            gsched_cli::print_json(&JobsDoc { jobs });
            return;
        }
        let lines: Vec<String> = jobs
            .iter()
            .map(|j| self.format.line(&queue_row(j), now))
            .collect();
        let failures: Vec<String> = if self.failures {
            jobs.iter().map(gsched_cli::format::failure_line).collect()
        } else {
            Vec::new()
        };
        let extra = failures.iter().any(|f| !f.is_empty());
        let width = if extra {
            lines
                .iter()
                .chain(std::iter::once(&self.format.header()))
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let mut text = String::new();
        let mut push = |line: &str, failure: Option<&str>| {
            text.push_str(line);
            if let Some(f) = failure {
                let pad = width.saturating_sub(line.chars().count());
                text.extend(std::iter::repeat_n(' ', pad + 1));
                text.push_str(&gsched_cli::format::printable(f));
            }
            text.push('\n');
        };
        if self.header {
            push(&self.format.header(), extra.then_some("FAILURE"));
        }
        for (i, line) in lines.iter().enumerate() {
            push(line, extra.then(|| failures[i].as_str()));
        }
        out!("{text}");
    }

    /// The queue in the format, printed page by page as the controller sends them.
    fn print_queue(&self, rt: &tokio::runtime::Runtime, client: &mut Client) {
        if self.header {
            out!("{}\n", self.format.header());
        }
        gsched_cli::fetch_queue(rt, client, &self.query, self.name, |page| {
            let mut text = String::with_capacity(page.jobs.len() * 96);
            for j in page
                .jobs
                .iter()
                .filter(|j| self.in_partitions(&j.partition))
            {
                self.format.write_line(&mut text, j, page.now_ms);
                text.push('\n');
            }
            out!("{text}");
        });
    }

    /// The running steps of the jobs asked for, as `squeue -s` lists them.
    fn print_steps(&self, rt: &tokio::runtime::Runtime, client: &mut Client, only: &[String]) {
        let list = gsched_cli::fetch_jobs(rt, client, &self.query, self.name);
        let mut t = gsched_cli::format::Table::new(&[
            ("STEPID", true),
            ("NAME", true),
            ("PARTITION", true),
            ("USER", true),
            ("TIME", true),
            ("NODELIST", false),
        ]);
        for j in list.jobs.iter().filter(|j| self.keeps(j)) {
            for s in j
                .steps
                .iter()
                .filter(|s| s.state == gsched_types::steps::StepState::Running)
            {
                let id = format!("{}.{}", j.display_id, s.step);
                if !only.is_empty() && !only.contains(&id) {
                    continue;
                }
                t.row(vec![
                    id,
                    s.name.chars().take(16).collect(),
                    j.partition.clone(),
                    j.user.clone(),
                    gsched_types::parse::format_duration(
                        list.now_ms.saturating_sub(s.start_ms) / 1000,
                    ),
                    gsched_types::hostlist::compress(&s.nodes),
                ]);
            }
        }
        let text = t.render();
        if self.header {
            out!("{text}");
        } else {
            out!("{}", text.split_once('\n').map_or("", |(_, rest)| rest));
        }
    }
}
