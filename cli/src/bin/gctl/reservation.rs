//! `gctl reservation create|update|delete|show` (scontrol's `... reservation`).

use clap::{Args, Subcommand};
use gsched_cli::client::{Client, describe, die, request_id};
use gsched_cli::outln;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb;
use gsched_types::parse::{format_duration, format_timestamp};
use gsched_types::reservation::{
    ReservationReply, ReservationRequest, ReservationRow, ReservationSpec, ResvFlags, ResvResources,
};

#[derive(Subcommand, Debug)]
pub enum Resv {
    /// Set GPUs or nodes aside for users or accounts over a window (a MAINT one takes
    /// its nodes out of scheduling).
    Create(Fields),
    /// Change a reservation: the options given replace its values (new resources are
    /// chosen again).
    Update(Fields),
    /// Delete a reservation no job runs or waits in.
    Delete { name: String },
    /// The reservations that have not ended (scontrol show reservation).
    Show {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug, Default)]
pub struct Fields {
    pub name: String,
    /// When it starts (now, now+1hour, 2026-12-24T08:00, 18:00...; default now).
    #[arg(long)]
    pub start: Option<String>,
    /// How long it lasts (minutes, or sbatch's forms: 1:00:00, 2-00:00:00).
    #[arg(long, conflicts_with = "end")]
    pub duration: Option<String>,
    /// When it ends (the forms of --start).
    #[arg(long)]
    pub end: Option<String>,
    /// Users who may run jobs in it (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub users: Option<Vec<String>>,
    /// Accounts whose jobs may run in it (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub accounts: Option<Vec<String>>,
    /// These nodes, whole (a host list: gpu[01-04]).
    #[arg(long, conflicts_with_all = ["node_count", "gpus"])]
    pub nodes: Option<String>,
    /// Any N whole nodes, chosen now.
    #[arg(long = "node-count", conflicts_with = "gpus")]
    pub node_count: Option<u32>,
    /// N GPUs, on as few nodes as possible, chosen now.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// MAINT (maintenance window), IGNORE_JOBS (reserve even where jobs may still run).
    #[arg(long)]
    pub flags: Option<String>,
}

impl Fields {
    fn spec(&self) -> Result<ReservationSpec, String> {
        let at = |flag: &str, t: &Option<String>| {
            t.as_deref()
                .map(|t| gsched_cli::when::parse(t).map_err(|e| format!("--{flag}: {e}")))
                .transpose()
        };
        let duration_s = match self.duration.as_deref() {
            None => None,
            Some(d) => match gsched_types::parse::time_limit(d)
                .map_err(|e| format!("--duration {d}: {e}"))?
            {
                Some(s) if s > 0 => Some(s),
                _ => {
                    return Err(format!(
                        "--duration {d}: a reservation needs a length (UNLIMITED is not one)"
                    ));
                }
            },
        };
        let resources = match (&self.nodes, self.node_count, self.gpus) {
            (Some(list), _, _) => Some(ResvResources::Nodes(
                gsched_types::hostlist::expand(list).map_err(|e| format!("--nodes: {e}"))?,
            )),
            (None, Some(n), _) => Some(ResvResources::NodeCount(n)),
            (None, None, Some(g)) => Some(ResvResources::Gpus(g)),
            (None, None, None) => None,
        };
        Ok(ReservationSpec {
            name: self.name.clone(),
            start_ms: at("start", &self.start)?,
            end_ms: at("end", &self.end)?,
            duration_s,
            users: self.users.clone(),
            accounts: self.accounts.clone(),
            resources,
            flags: self.flags.as_deref().map(ResvFlags::parse).transpose()?,
        })
    }
}

pub fn run(rt: &tokio::runtime::Runtime, client: &mut Client, what: Resv) {
    let (req, json) = match what {
        Resv::Create(f) => (
            ReservationRequest::Create {
                spec: f.spec().unwrap_or_else(|e| die("gctl", e)),
            },
            false,
        ),
        Resv::Update(f) => (
            ReservationRequest::Update {
                spec: f.spec().unwrap_or_else(|e| die("gctl", e)),
            },
            false,
        ),
        Resv::Delete { name } => (ReservationRequest::Delete { name }, false),
        Resv::Show { name, json } => (ReservationRequest::Show { name }, json),
    };
    let show = matches!(req, ReservationRequest::Show { .. });
    let msg = pb::ReservationsRequest::carrying(&req).with_request_id(request_id());
    let reply: ReservationReply = match rt.block_on(client.call(|mut c| {
        let msg = msg.clone();
        async move { c.reservations(msg).await }
    })) {
        Ok(r) => r.document().unwrap_or_else(|e| die("gctl", e)),
        Err(s) => die("gctl", describe(&s)),
    };
    if json {
        gsched_cli::print_json(&reply.reservations);
    } else if show {
        if reply.reservations.is_empty() {
            outln!("No reservations in the system");
        }
        for r in &reply.reservations {
            outln!("{}", scontrol_text(r));
        }
    } else {
        outln!("{}", reply.message);
    }
}

/// One reservation as `scontrol show reservation` prints it.
fn scontrol_text(row: &ReservationRow) -> String {
    let r = &row.reservation;
    let list = |v: &[String]| {
        if v.is_empty() {
            "(null)".to_string()
        } else {
            v.join(",")
        }
    };
    let gpus_detail: Vec<String> = r
        .nodes
        .iter()
        .filter(|n| !n.whole)
        .map(|n| {
            let ids: Vec<String> = n.gpus.iter().map(u32::to_string).collect();
            format!("{}:{}", n.node, ids.join(","))
        })
        .collect();
    let flags = r.flags.words();
    format!(
        "ReservationName={} StartTime={} EndTime={} Duration={}\n   Nodes={} NodeCnt={} CoreCnt={} Flags={}\n   TRES=cpu={},gres/gpu={}{}\n   Users={} Accounts={} State={} CreatedBy={}\n",
        r.name,
        format_timestamp(r.start_ms),
        format_timestamp(r.end_ms),
        format_duration((r.end_ms - r.start_ms) / 1000),
        gsched_types::hostlist::compress(&r.node_names()),
        r.nodes.len(),
        row.cpus,
        flags,
        row.cpus,
        row.gpus,
        if gpus_detail.is_empty() {
            String::new()
        } else {
            format!(" GPUs={}", gpus_detail.join(" "))
        },
        list(&r.users),
        list(&r.accounts),
        row.state,
        r.by,
    )
}
