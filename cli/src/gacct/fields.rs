//! sacct's columns (`-o`, `-e`) and how each is filled for a job, one of its `grun`
//! steps, or an earlier attempt of a requeued job (times as sacct prints them:
//! `HH:MM:SS`, `D-HH:MM:SS` from a day on).

use gsched_types::api::JobRow;
use gsched_types::parse::{format_hms, format_timestamp};

/// The fields -o takes, four to a line, as `sacct -e` lists them.
pub fn help_fields() -> String {
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
pub enum Field {
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
    pub const ALL: [Field; 22] = [
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
    pub const BRIEF: [Field; 3] = [Field::JobId, Field::State, Field::ExitCode];
    pub const DEFAULT: [Field; 11] = [
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

    pub fn name(self) -> &'static str {
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

    pub fn numeric(self) -> bool {
        matches!(
            self,
            Field::AllocGpus | Field::NNodes | Field::ElapsedRaw | Field::Restarts | Field::Elapsed
        )
    }

    /// `JobID,JobName%30,State`: fields and their widths, any case.
    pub fn parse_list(text: &str) -> Result<Vec<(Field, Option<usize>)>, String> {
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
pub enum Row<'a> {
    Job(&'a JobRow, u64),
    Step(&'a JobRow, &'a gsched_types::steps::StepRecord, u64),
    Attempt(&'a JobRow, &'a gsched_types::job::Attempt),
}

impl Row<'_> {
    pub fn get(&self, f: Field) -> String {
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
        Field::Elapsed => format_hms(elapsed_s()),
        Field::ElapsedRaw => elapsed_s().to_string(),
        Field::Start => time(j.start_ms),
        Field::End => time(j.end_ms),
        Field::Submit => format_timestamp(j.submit_ms),
        Field::Timelimit => j
            .time_limit_s
            .map(format_hms)
            .unwrap_or_else(|| "UNLIMITED".into()),
        Field::Restarts => j.attempt.to_string(),
        Field::NodeList => j.node_list.clone(),
        Field::Reason => crate::format::failure_line(j),
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
        Field::Elapsed => format_hms(el()),
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
            (Some(s), Some(e)) => format_hms(e.saturating_sub(s) / 1000),
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
