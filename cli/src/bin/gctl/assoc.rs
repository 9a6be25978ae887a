//! `gctl account|user|qos add|modify|delete|show` (sacctmgr's verbs).

use clap::{Args, Subcommand};
use gsched_cli::client::{Client, describe, die, request_id};
use gsched_cli::outln;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb;
use gsched_types::assoc::{
    AccountConfig, AssocEdit, AssocEntity, AssocFields, AssocReply, AssocRequest, Limit, QosConfig,
    UserConfig,
};
use gsched_types::parse::format_duration;

#[derive(Subcommand, Debug)]
pub enum Assoc {
    /// Add one (a user already in other accounts is added to these too).
    Add(Fields),
    /// Change the fields given; -1 clears a limit.
    Modify(Fields),
    /// Delete one; `gctl user delete NAME --account A` only takes the user out of A.
    Delete {
        name: String,
        #[arg(long)]
        account: Option<String>,
    },
    /// List them (sacctmgr show).
    Show {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug, Default)]
pub struct Fields {
    pub name: String,
    /// Account: the account above this one (Parent; root for the top).
    #[arg(long)]
    pub parent: Option<String>,
    /// Account: fair-share weight (Fairshare).
    #[arg(long)]
    pub fairshare: Option<u32>,
    /// Account: GPUs its running jobs may hold, sub-accounts included (GrpTRES=gres/gpu=N).
    #[arg(long = "grp-gpus", allow_hyphen_values = true)]
    pub grp_gpus: Option<String>,
    /// QOS: GPUs one user's running jobs may hold (MaxTRESPerUser=gres/gpu=N).
    #[arg(long = "max-gpus-per-user", allow_hyphen_values = true)]
    pub max_gpus_per_user: Option<String>,
    /// Running jobs per user (MaxJobs; a QOS's MaxJobsPerUser).
    #[arg(long = "max-jobs", allow_hyphen_values = true)]
    pub max_jobs: Option<String>,
    /// Jobs per user queued or running (MaxSubmitJobs).
    #[arg(long = "max-submit-jobs", allow_hyphen_values = true)]
    pub max_submit_jobs: Option<String>,
    /// Account, QOS: the longest time limit (MaxWall: minutes, 1:00:00, 2-00:00:00; -1).
    #[arg(long = "max-wall", allow_hyphen_values = true)]
    pub max_wall: Option<String>,
    /// QOS: priority (Priority).
    #[arg(long)]
    pub priority: Option<u32>,
    /// QOS: the QOS whose jobs this one may preempt (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub preempt: Option<Vec<String>>,
    /// User: the accounts to add them to (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub account: Option<Vec<String>>,
    /// User: the account of their jobs that name none.
    #[arg(long = "default-account")]
    pub default_account: Option<String>,
    /// Account: users who may add and remove its users (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub coordinators: Option<Vec<String>>,
    /// User: where their jobs' notifications go: mail:ADDRESS, slack:URL (Slack,
    /// Mattermost, Discord's /slack, Matrix bridges), webhook:URL (the whole message as
    /// JSON), comma-separated; none clears. A job's --mail-user replaces the mail ones.
    /// Users may set their own.
    #[arg(long)]
    pub notify: Option<String>,
    /// User: the events their jobs without --mail-type notify (--mail-type's words:
    /// BEGIN, END, FAIL, REQUEUE, TIME_LIMIT_50/80/90, TIME_LIMIT, ALL...; NONE clears).
    #[arg(long = "notify-on")]
    pub notify_on: Option<String>,
}

impl Fields {
    pub fn fields(&self) -> Result<AssocFields, String> {
        let limit = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| Limit::parse(t).map_err(|e| format!("--{flag}: {e}")))
                .transpose()
        };
        let max_wall_s = match self.max_wall.as_deref() {
            None => None,
            Some("-1") => Some(Limit::Clear),
            Some(t) => match gsched_types::parse::time_limit(t)
                .map_err(|e| format!("--max-wall {t}: {e}"))?
            {
                Some(s) => Some(Limit::Set(s)),
                None => Some(Limit::Clear),
            },
        };
        let notify = self
            .notify
            .as_deref()
            .map(|t| gsched_types::notify::parse_targets(t).map_err(|e| format!("--notify: {e}")))
            .transpose()?;
        let notify_on = self
            .notify_on
            .as_deref()
            .map(|t| {
                gsched_types::notify::parse_mail_types(t).map_err(|e| format!("--notify-on: {e}"))
            })
            .transpose()?;
        Ok(AssocFields {
            parent: self.parent.clone(),
            fairshare: self.fairshare,
            grp_gpus: limit("grp-gpus", &self.grp_gpus)?,
            max_gpus_per_user: limit("max-gpus-per-user", &self.max_gpus_per_user)?,
            max_jobs: limit("max-jobs", &self.max_jobs)?,
            max_submit_jobs: limit("max-submit-jobs", &self.max_submit_jobs)?,
            max_wall_s,
            priority: self.priority,
            preempt: self.preempt.clone(),
            accounts: self.account.clone(),
            default_account: self.default_account.clone(),
            coordinators: self.coordinators.clone(),
            notify,
            notify_on,
        })
    }
}

pub fn run(rt: &tokio::runtime::Runtime, client: &mut Client, entity: AssocEntity, what: Assoc) {
    let fields = |f: &Fields| f.fields().unwrap_or_else(|e| die("gctl", e));
    let edit = |e: AssocEdit| (AssocRequest::Edit { edit: Box::new(e) }, false);
    let (req, json) = match what {
        Assoc::Add(f) => edit(AssocEdit::Add {
            entity,
            fields: fields(&f),
            name: f.name,
        }),
        Assoc::Modify(f) => edit(AssocEdit::Modify {
            entity,
            fields: fields(&f),
            name: f.name,
        }),
        Assoc::Delete { name, account } => edit(AssocEdit::Delete {
            entity,
            name,
            account,
        }),
        Assoc::Show { json } => (AssocRequest::Show { entity }, json),
    };
    let reply = call(rt, client, &req);
    match (&req, json) {
        (AssocRequest::Edit { .. }, _) => outln!("{}", reply.message),
        (AssocRequest::Show { .. }, true) => match entity {
            AssocEntity::Account => gsched_cli::print_json(&reply.accounts),
            AssocEntity::User => gsched_cli::print_json(&reply.users),
            AssocEntity::Qos => gsched_cli::print_json(&reply.qos),
        },
        (AssocRequest::Show { .. }, false) => print_table(entity, &reply),
    }
}

/// Sends one request; any refusal is printed and ends the command.
pub fn call(rt: &tokio::runtime::Runtime, client: &mut Client, req: &AssocRequest) -> AssocReply {
    let msg = pb::AssociationsRequest::carrying(req).with_request_id(request_id());
    match rt.block_on(client.call(|mut c| {
        let msg = msg.clone();
        async move { c.associations(msg).await }
    })) {
        Ok(r) => r.document().unwrap_or_else(|e| die("gctl", e)),
        Err(s) => die("gctl", describe(&s)),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn wall(v: Option<u64>) -> String {
    v.map(format_duration).unwrap_or_default()
}

fn gpus(v: Option<u32>) -> String {
    v.map(|n| format!("gres/gpu={n}")).unwrap_or_default()
}

/// sacctmgr's columns, `|`-free and aligned.
fn print_table(entity: AssocEntity, reply: &AssocReply) {
    let (head, rows): (Vec<&str>, Vec<Vec<String>>) = match entity {
        AssocEntity::Account => (
            vec![
                "Account",
                "Parent",
                "Share",
                "GrpTRES",
                "MaxJobs",
                "MaxSubmit",
                "MaxWall",
                "Coord",
            ],
            reply.accounts.iter().map(account_row).collect(),
        ),
        AssocEntity::User => (
            vec![
                "User",
                "Def Acct",
                "Accounts",
                "MaxJobs",
                "MaxSubmit",
                "Notify",
            ],
            reply.users.iter().map(user_row).collect(),
        ),
        AssocEntity::Qos => (
            vec![
                "Name",
                "Priority",
                "Preempt",
                "MaxTRESPU",
                "MaxJobsPU",
                "MaxSubmitPU",
                "MaxWall",
            ],
            reply.qos.iter().map(qos_row).collect(),
        ),
    };
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        outln!("{}", padded.join(" "));
    };
    line(head.iter().map(|h| h.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r);
    }
}

fn account_row(a: &AccountConfig) -> Vec<String> {
    vec![
        a.name.clone(),
        a.parent.clone().unwrap_or_else(|| "root".into()),
        a.shares.to_string(),
        gpus(a.max_gpus),
        opt(a.max_jobs),
        opt(a.max_submit_jobs),
        wall(a.max_wall_s),
        a.coordinators.join(","),
    ]
}

fn user_row(u: &UserConfig) -> Vec<String> {
    vec![
        u.name.clone(),
        u.default_account.clone(),
        u.accounts.join(","),
        opt(u.max_jobs),
        opt(u.max_submit_jobs),
        notify(u.notify.as_ref()),
    ]
}

/// A user's notification settings in one cell: `mail:a@b,webhook:URL on END,FAIL`.
fn notify(n: Option<&gsched_types::notify::UserNotify>) -> String {
    let Some(n) = n else {
        return String::new();
    };
    let to: Vec<String> = n.to.iter().map(|t| t.to_string()).collect();
    let on: Vec<&str> = n.on.iter().map(|t| t.name()).collect();
    match (to.is_empty(), on.is_empty()) {
        (_, true) => to.join(","),
        (true, false) => format!("on {}", on.join(",")),
        (false, false) => format!("{} on {}", to.join(","), on.join(",")),
    }
}

fn qos_row(q: &QosConfig) -> Vec<String> {
    vec![
        q.name.clone(),
        q.priority.to_string(),
        q.preempt.join(","),
        gpus(q.max_gpus_per_user),
        opt(q.max_jobs_per_user),
        opt(q.max_submit_jobs_per_user),
        wall(q.max_time_s),
    ]
}
