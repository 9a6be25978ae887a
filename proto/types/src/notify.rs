//! What a job asks to be told about (`--mail-type`, `--mail-user`), in sbatch's words.

use serde::{Deserialize, Serialize};

/// One `--mail-type` value.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MailType {
    Begin,
    End,
    Fail,
    Requeue,
    InvalidDepend,
    StageOut,
    TimeLimit,
    #[serde(rename = "TIME_LIMIT_50")]
    TimeLimit50,
    #[serde(rename = "TIME_LIMIT_80")]
    TimeLimit80,
    #[serde(rename = "TIME_LIMIT_90")]
    TimeLimit90,
    /// Each task of an array on its own (else BEGIN, END and FAIL are the array's).
    ArrayTasks,
}

impl MailType {
    /// The name `--mail-type` takes (and `SLURM_JOB_MAIL_TYPE`'s kind).
    pub fn name(self) -> &'static str {
        match self {
            MailType::Begin => "BEGIN",
            MailType::End => "END",
            MailType::Fail => "FAIL",
            MailType::Requeue => "REQUEUE",
            MailType::InvalidDepend => "INVALID_DEPEND",
            MailType::StageOut => "STAGE_OUT",
            MailType::TimeLimit => "TIME_LIMIT",
            MailType::TimeLimit50 => "TIME_LIMIT_50",
            MailType::TimeLimit80 => "TIME_LIMIT_80",
            MailType::TimeLimit90 => "TIME_LIMIT_90",
            MailType::ArrayTasks => "ARRAY_TASKS",
        }
    }

    /// The share of the time limit a `TIME_LIMIT*` event marks, in percent.
    pub fn time_limit_pct(self) -> Option<u64> {
        match self {
            MailType::TimeLimit50 => Some(50),
            MailType::TimeLimit80 => Some(80),
            MailType::TimeLimit90 => Some(90),
            MailType::TimeLimit => Some(100),
            _ => None,
        }
    }

    /// What the event says in a subject, as Slurm's `_mail_type_str` words it
    /// (`src/slurmctld/agent.c`).
    pub fn slurm_words(self) -> &'static str {
        match self {
            MailType::InvalidDepend => "Invalid dependency",
            MailType::Begin => "Began",
            MailType::End => "Ended",
            MailType::Fail => "Failed",
            MailType::Requeue => "Requeued",
            MailType::StageOut => "StageOut/Teardown",
            MailType::TimeLimit => "Reached time limit",
            MailType::TimeLimit90 => "Reached 90% of time limit",
            MailType::TimeLimit80 => "Reached 80% of time limit",
            MailType::TimeLimit50 => "Reached 50% of time limit",
            MailType::ArrayTasks => "unknown",
        }
    }
}

impl std::fmt::Display for MailType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `--mail-type` and `--mail-user`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MailRequest {
    pub types: Vec<MailType>,
    /// Whom to tell (absent: the job's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Where a notification goes: `gctl user modify NAME --notify mail:ADDR,slack:URL,webhook:URL`.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NotifyTarget {
    /// Through the controllers' mail program (`[notify] mail_prog`), to an address or a
    /// local user name, as Slurm's MailProg is called.
    Mail(String),
    /// A Slack-compatible incoming webhook (Slack, Mattermost, Discord's `/slack`
    /// endpoint, Matrix's webhook bridges): a JSON POST of `{"text": ...}`.
    Slack(String),
    /// Any URL: a JSON POST of the whole [`NotifyMessage`] (its `text` included).
    Webhook(String),
}

/// The longest recipient or URL a target may name.
pub const MAX_TARGET_BYTES: usize = 2048;

/// A `--notify` entry that is not a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyTargetError {
    #[error(
        "'{0}': a notification target is mail:ADDRESS, slack:URL or webhook:URL (comma separated; none clears them)"
    )]
    Form(String),
    #[error(
        "'{0}': a mail recipient is an address or a user name, without spaces, not starting with '-'"
    )]
    Recipient(String),
    #[error("'{0}': a webhook is an http:// or https:// URL with a host, without spaces")]
    Url(String),
    #[error("a notification target is at most {MAX_TARGET_BYTES} bytes")]
    TooLong,
}

/// Whether `to` can be a mail program's recipient argument: printable, no spaces, not
/// an option (`-x`).
pub fn valid_recipient(to: &str) -> bool {
    !to.is_empty()
        && to.len() <= MAX_TARGET_BYTES
        && !to.starts_with('-')
        && !to.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Whether `url` is an http(s) URL with a host and nothing unprintable.
pub fn valid_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    !host.is_empty()
        && url.len() <= MAX_TARGET_BYTES
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl NotifyTarget {
    /// `mail:ADDRESS`, `slack:URL` or `webhook:URL`.
    pub fn parse(text: &str) -> Result<NotifyTarget, NotifyTargetError> {
        let text = text.trim();
        if text.len() > MAX_TARGET_BYTES + 8 {
            return Err(NotifyTargetError::TooLong);
        }
        let (kind, value) = text
            .split_once(':')
            .ok_or_else(|| NotifyTargetError::Form(text.to_string()))?;
        let target = match kind.to_ascii_lowercase().as_str() {
            "mail" => NotifyTarget::Mail(value.to_string()),
            "slack" => NotifyTarget::Slack(value.to_string()),
            "webhook" => NotifyTarget::Webhook(value.to_string()),
            _ => return Err(NotifyTargetError::Form(text.to_string())),
        };
        target.check()?;
        Ok(target)
    }

    /// Refuses a recipient that could be read as an option or a URL that is not one.
    pub fn check(&self) -> Result<(), NotifyTargetError> {
        match self {
            NotifyTarget::Mail(to) if !valid_recipient(to) => {
                Err(NotifyTargetError::Recipient(to.clone()))
            }
            NotifyTarget::Slack(url) | NotifyTarget::Webhook(url) if !valid_url(url) => {
                Err(NotifyTargetError::Url(url.clone()))
            }
            _ => Ok(()),
        }
    }

    /// `mail`, `slack` or `webhook` (the metric's label).
    pub fn channel(&self) -> &'static str {
        match self {
            NotifyTarget::Mail(_) => "mail",
            NotifyTarget::Slack(_) => "slack",
            NotifyTarget::Webhook(_) => "webhook",
        }
    }

    pub fn is_mail(&self) -> bool {
        matches!(self, NotifyTarget::Mail(_))
    }
}

impl std::fmt::Display for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotifyTarget::Mail(to) => write!(f, "mail:{to}"),
            NotifyTarget::Slack(url) => write!(f, "slack:{url}"),
            NotifyTarget::Webhook(url) => write!(f, "webhook:{url}"),
        }
    }
}

/// `--notify`'s comma list; `none` (or nothing) is no target.
pub fn parse_targets(text: &str) -> Result<Vec<NotifyTarget>, NotifyTargetError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("none") {
            continue;
        }
        let t = NotifyTarget::parse(part)?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

/// A user's notification settings (`gctl user modify NAME --notify ... --notify-on ...`),
/// kept in the replicated associations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserNotify {
    /// Where their jobs' notifications go (a job's `--mail-user` replaces the mail
    /// targets, not the webhooks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<NotifyTarget>,
    /// The events their jobs notify when a job names no `--mail-type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<MailType>,
}

impl UserNotify {
    pub fn is_empty(&self) -> bool {
        self.to.is_empty() && self.on.is_empty()
    }
}

/// One notification a job's change called for, and how far its delivery got. Kept in
/// the job's record (replicated), one per (attempt, event, array).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Notice {
    pub event: MailType,
    /// The attempt it is about (a requeued job's BEGIN of each attempt is its own).
    pub attempt: u32,
    /// About the whole array (Slurm's "Array Summary"), not this task alone: an array
    /// without `ARRAY_TASKS` tells of its first start and its last end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub array: bool,
    /// Controller time of the change.
    pub at_ms: u64,
    pub state: NoticeState,
}

impl Notice {
    /// Whether this notice is the one `(attempt, event, array)` names.
    pub fn is(&self, attempt: u32, event: MailType, array: bool) -> bool {
        self.attempt == attempt && self.event == event && self.array == array
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, NoticeState::Done { .. })
    }

    /// One line per target, as `gctl show job` prints them after `Notify=`: `END
    /// mail:alice sent`, `FAIL mail:bob failed: the mail program ... exited 1`, `BEGIN
    /// due`, `END (array) sending (controller 2)`.
    pub fn describe(&self) -> Vec<String> {
        let what = if self.array {
            format!("{} (array)", self.event)
        } else {
            self.event.to_string()
        };
        match &self.state {
            NoticeState::Due => vec![format!("{what} due")],
            NoticeState::Sending { by, .. } => vec![format!("{what} sending (controller {by})")],
            NoticeState::Done { deliveries, .. } if deliveries.is_empty() => {
                vec![format!("{what} nobody to tell")]
            }
            NoticeState::Done { deliveries, .. } => deliveries
                .iter()
                .map(|d| match &d.error {
                    None => format!("{what} {} sent", d.to),
                    Some(e) => format!("{what} {} failed: {e}", d.to),
                })
                .collect(),
        }
    }

    /// Whether a delivery of it failed.
    pub fn failed(&self) -> bool {
        match &self.state {
            NoticeState::Done { deliveries, .. } => deliveries.iter().any(|d| d.error.is_some()),
            _ => false,
        }
    }
}

/// Where a notice is on its way out. It is sent at most once: only the leader that
/// claimed it (`Sending`, committed before anything is sent) delivers it, and a claim
/// whose leader went away is never sent again (its outcome is unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NoticeState {
    /// Waiting for the leader's outbox.
    Due,
    /// Claimed by controller `by` while it led in `term`, which is delivering it.
    Sending { by: u64, term: u64, since_ms: u64 },
    /// Delivered, or given up on: each target's outcome.
    Done {
        at_ms: u64,
        deliveries: Vec<Delivery>,
    },
}

/// One target's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Delivery {
    pub to: NotifyTarget,
    /// Why it was not delivered (absent: it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a notification says: the mail's subject and body, and the document a
/// `webhook:` target receives (a `slack:` target gets `{"text": text}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotifyMessage {
    /// The subject and the summary line, for chat.
    pub text: String,
    /// Slurm's subject (`Slurm Job_id=42 Name=train Ended, Run time 00:10:02, COMPLETED,
    /// ExitCode 0`).
    pub subject: String,
    /// The mail's body: the job's state, reason, times and its efficiency report.
    pub body: String,
    pub event: MailType,
    pub job_id: crate::job::JobId,
    /// `42` or `40_2`.
    pub display_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<crate::job::JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<u32>,
    /// About the whole array, not one task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub array_summary: bool,
    pub name: String,
    pub user: String,
    pub state: crate::job::JobState,
    /// What ended it, or why it waits (`None` when nothing did).
    pub reason: String,
    /// Seconds the attempt ran (to the event).
    pub elapsed_s: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Its nodes, as a hostlist.
    pub nodes: String,
    /// The GPU efficiency summary in one line (`seff`'s figures).
    pub efficiency_summary: String,
    /// The efficiency report (`gacct --eff --json`), once the job has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<crate::usage::Efficiency>,
}

/// A `--mail-type` value sbatch does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--mail-type={0}: use NONE, BEGIN, END, FAIL, REQUEUE, ALL, INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50 or ARRAY_TASKS, comma separated"
)]
pub struct MailTypeError(pub String);

/// `--mail-type`'s comma list (any case); `NONE` alone is no request.
pub fn parse_mail_types(text: &str) -> Result<Vec<MailType>, MailTypeError> {
    let mut out = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let add: &[MailType] = match word.to_ascii_uppercase().as_str() {
            "NONE" => &[],
            "BEGIN" => &[MailType::Begin],
            "END" => &[MailType::End],
            "FAIL" => &[MailType::Fail],
            "REQUEUE" => &[MailType::Requeue],
            "INVALID_DEPEND" => &[MailType::InvalidDepend],
            "STAGE_OUT" => &[MailType::StageOut],
            "TIME_LIMIT" => &[MailType::TimeLimit],
            "TIME_LIMIT_50" => &[MailType::TimeLimit50],
            "TIME_LIMIT_80" => &[MailType::TimeLimit80],
            "TIME_LIMIT_90" => &[MailType::TimeLimit90],
            "ARRAY_TASKS" => &[MailType::ArrayTasks],
            "ALL" => &[
                MailType::Begin,
                MailType::End,
                MailType::Fail,
                MailType::InvalidDepend,
                MailType::Requeue,
                MailType::StageOut,
            ],
            _ => return Err(MailTypeError(word.to_string())),
        };
        out.extend_from_slice(add);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_types_read_as_sbatch_reads_them() {
        assert_eq!(
            parse_mail_types("end,FAIL").unwrap(),
            [MailType::End, MailType::Fail]
        );
        assert_eq!(parse_mail_types("ALL").unwrap().len(), 6);
        assert!(parse_mail_types("NONE").unwrap().is_empty());
        assert!(parse_mail_types("END,sometimes").is_err());
        let json = serde_json::to_string(&MailType::TimeLimit80).unwrap();
        assert_eq!(json, "\"TIME_LIMIT_80\"");
        for t in
            parse_mail_types("ALL,TIME_LIMIT,TIME_LIMIT_50,TIME_LIMIT_80,TIME_LIMIT_90,ARRAY_TASKS")
                .unwrap()
        {
            assert_eq!(parse_mail_types(t.name()).unwrap(), [t]);
        }
    }

    #[test]
    fn notices_are_described_as_gctl_show_job_prints_them() {
        let mut n = Notice {
            event: MailType::Fail,
            attempt: 0,
            array: false,
            at_ms: 1,
            state: NoticeState::Due,
        };
        assert_eq!(n.describe(), ["FAIL due"]);
        n.state = NoticeState::Done {
            at_ms: 2,
            deliveries: vec![
                Delivery {
                    to: NotifyTarget::Mail("bob".into()),
                    error: Some("the mail program exited 1".into()),
                },
                Delivery {
                    to: NotifyTarget::Webhook("http://h/x".into()),
                    error: None,
                },
            ],
        };
        assert_eq!(
            n.describe(),
            [
                "FAIL mail:bob failed: the mail program exited 1",
                "FAIL webhook:http://h/x sent"
            ]
        );
        assert!(n.failed());
    }

    #[test]
    fn targets_parse_and_refuse_what_a_mail_program_or_a_webhook_cannot_take() {
        let t = parse_targets(
            "mail:alice@lab.org, webhook:https://hooks.example/x?y=1,slack:http://h:8/p",
        )
        .unwrap();
        assert_eq!(
            t,
            [
                NotifyTarget::Mail("alice@lab.org".into()),
                NotifyTarget::Webhook("https://hooks.example/x?y=1".into()),
                NotifyTarget::Slack("http://h:8/p".into()),
            ]
        );
        assert_eq!(t[0].to_string(), "mail:alice@lab.org");
        assert!(parse_targets("none").unwrap().is_empty());
        for bad in [
            "alice@lab.org",
            "mail:-oProxyCommand=x",
            "mail:a b",
            "mail:",
            "webhook:ftp://x",
            "webhook:https://",
            "slack:https://a b",
            "sms:123",
        ] {
            assert!(parse_targets(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&t[0]).unwrap();
        assert_eq!(json, r#"{"mail":"alice@lab.org"}"#);
    }
}
