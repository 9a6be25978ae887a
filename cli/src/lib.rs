//! The gsched command-line tools (`gsub`, `gqueue`, `ginfo`, `gcancel`, `gacct`,
//! `greport`, `gctl`): a shared controller client with failover, sbatch-compatible option
//! parsing and Slurm-shaped output.

pub mod alloc;
pub mod args;
pub mod burnin;
pub mod certs;
pub mod client;
pub mod doctor;
pub mod efficiency;
pub mod format;
pub mod gacct;
pub mod galloc;
pub mod getopt;
pub mod grun;
pub mod grun_job;
pub mod login_env;
pub mod option_words;
pub mod probe;
pub mod propagate;
pub mod queue_format;
pub mod report;
pub mod sbatch;
pub mod sinfo;
pub mod slurm;
pub mod slurm_options;
pub mod when;

pub use slurm::invoked_as;

use gsched_proto::contract::{Carries, ContractError, Idempotent};
use gsched_types::api::{JobList, JobSelector, NodeList};

/// Writes to stdout; a reader that went away (`gqueue | head`) ends the tool quietly, as
/// Unix tools do. (SIGPIPE itself stays ignored: a controller that hangs up mid-call must
/// be an error message, not a silent death.)
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        output_failed(e);
    }
}

/// Ends the tool after stdout failed: quietly if its reader went away.
fn output_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("cannot write the output: {e}");
    std::process::exit(1);
}

/// `print!` that ends the tool quietly when stdout's reader is gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_out(format_args!($($arg)*)) };
}

/// `println!` that ends the tool quietly when stdout's reader is gone.
#[macro_export]
macro_rules! outln {
    () => { $crate::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// The single-threaded runtime each tool drives its gRPC calls with.
/// This process's arguments as text; an argument that is not UTF-8 ends the tool with
/// an error naming it (job names, paths and commands travel as UTF-8 text).
pub fn text_args(tool: &str) -> Vec<String> {
    std::env::args_os()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().unwrap_or_else(|bad| {
                client::die(
                    tool,
                    format!(
                        "argument {i} ({}) is not UTF-8 text; gsched passes arguments, paths and names as UTF-8",
                        bad.to_string_lossy()
                    ),
                )
            })
        })
        .collect()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The document a reply carries; `tool: error: ...` and exit 1 when it is malformed.
pub fn doc_of<M: Carries>(reply: &M, tool: &str) -> M::Document {
    reply
        .document()
        .unwrap_or_else(|e| client::die(tool, format!("the controller's reply is unreadable: {e}")))
}

/// Which jobs a tool asks for (the controller filters).
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    /// Finished jobs too (when no states are named).
    pub include_finished: bool,
    /// Allocation, steps and attempts (and the request, for those allowed to see it).
    pub detail: bool,
    pub users: Vec<String>,
    pub states: Vec<String>,
    pub jobs: Vec<JobSelector>,
    pub partition: Option<String>,
    /// Read this controller's state without the read barrier (`--stale-ok`).
    pub stale_ok: bool,
    /// Only jobs whose life overlaps [since, until] (ms; 0 is open): `gacct -S/-E`.
    pub since_ms: u64,
    pub until_ms: u64,
    /// Only jobs with one of these names (`squeue -n`, `sacct --name`); filtered here.
    pub names: Vec<String>,
    /// Ended jobs from the accounting archive too (`gacct`).
    pub archive: bool,
}

impl JobQuery {
    fn wants_name(&self, name: &str) -> bool {
        self.names.is_empty() || self.names.iter().any(|n| n == name)
    }
}

/// Fetches the jobs `query` names, page by page; `tool: error: ...` and exit 1 when no
/// controller answers.
pub fn fetch_jobs(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    query: &JobQuery,
    tool: &str,
) -> JobList {
    let mut all: Option<JobList> = None;
    for_each_page(
        rt,
        client,
        query,
        gsched_proto::pb::JobView::Rows,
        gsched_proto::pb::ListJobsReply::job_rows,
        tool,
        |mut page: JobList| {
            page.jobs.retain(|j| query.wants_name(&j.name));
            match &mut all {
                None => all = Some(page),
                Some(list) => list.jobs.extend(page.jobs),
            }
        },
    );
    all.expect("one page at least")
}

/// Applies `action` to every job `select` names, as one request (`ActOnJobs`, the one
/// path of every cancel, hold, release, requeue, signal and update); prints what was
/// refused as `tool: error: ...` lines and returns whether anything was refused. Exits 1
/// when no controller answers or the request itself is refused.
pub fn act_on_jobs(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    action: gsched_types::api::JobAction,
    select: gsched_types::api::JobSelection,
    tool: &str,
) -> (gsched_types::api::ActionSummary, bool) {
    let body = gsched_types::api::JobActionRequest { action, select };
    let req =
        gsched_proto::pb::ActOnJobsRequest::carrying(&body).with_request_id(client::request_id());
    let reply = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.act_on_jobs(req).await }
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    report_summary(doc_of(&reply, tool), tool)
}

fn report_summary(
    summary: gsched_types::api::ActionSummary,
    tool: &str,
) -> (gsched_types::api::ActionSummary, bool) {
    for e in &summary.errors {
        eprintln!("{tool}: error: {e}");
    }
    let refused = !summary.errors.is_empty();
    (summary, refused)
}

/// Fetches the queue lines `query` names, handing each page to `page` as it arrives (so
/// a table can be printed while the rest is on its way).
pub fn fetch_queue(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    query: &JobQuery,
    tool: &str,
    mut page: impl FnMut(JobList<gsched_types::api::QueueRow>),
) {
    for_each_page(
        rt,
        client,
        query,
        gsched_proto::pb::JobView::Queue,
        gsched_proto::pb::ListJobsReply::queue_rows,
        tool,
        |mut p: JobList<gsched_types::api::QueueRow>| {
            p.jobs.retain(|j| query.wants_name(&j.name));
            page(p)
        },
    );
}

/// Lists the jobs `query` names in `view`, following `next_after` until the last page.
/// The next page is asked for while this one is decoded and handed to `page` (its cursor
/// comes outside the page's document); at most two pages wait undecoded.
fn for_each_page<R>(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    query: &JobQuery,
    view: gsched_proto::pb::JobView,
    rows: fn(&gsched_proto::pb::ListJobsReply) -> Result<JobList<R>, ContractError>,
    tool: &str,
    mut page: impl FnMut(JobList<R>),
) {
    let (replies, arrived) = std::sync::mpsc::sync_channel(1);
    let (cursors, cursor) = std::sync::mpsc::channel::<Option<u64>>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut after = 0;
            loop {
                let reply = fetch_page(rt, client, query, view, after, tool);
                let said = reply.next_after;
                if replies.send(reply).is_err() {
                    return;
                }
                // A controller that does not say the cursor: wait for the decoded page's.
                let next = match said {
                    Some(0) => None,
                    Some(id) => Some(id),
                    None => cursor.recv().ok().flatten(),
                };
                match next {
                    Some(id) => after = id,
                    None => return,
                }
            }
        });
        for reply in arrived {
            let list = rows(&reply).unwrap_or_else(|e| {
                client::die(tool, format!("the controller's reply is unreadable: {e}"))
            });
            if reply.next_after.is_none() {
                let _ = cursors.send(list.next_after.map(|id| id.0));
            }
            page(list);
        }
    });
}

/// One `ListJobs` page from `after` on; exits with `tool: error: ...` when no controller
/// answers.
fn fetch_page(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    query: &JobQuery,
    view: gsched_proto::pb::JobView,
    after: u64,
    tool: &str,
) -> gsched_proto::pb::ListJobsReply {
    let req = gsched_proto::pb::ListJobsRequest {
        include_finished: query.include_finished,
        detail: query.detail,
        users: query.users.clone(),
        states: query.states.clone(),
        jobs: query.jobs.iter().map(|j| j.to_string()).collect(),
        partition: query.partition.clone().unwrap_or_default(),
        limit: 0,
        after,
        stale_ok: query.stale_ok,
        since_ms: query.since_ms,
        until_ms: query.until_ms,
        view: view as i32,
        archive: query.archive,
    };
    rt.block_on(client.call(|mut c| {
        let req = req.clone();
        async move { c.list_jobs(req).await }
    }))
    .unwrap_or_else(|s| client::die(tool, client::describe(&s)))
}

/// Fetches every node's row (with its wiring when `detail`).
pub fn fetch_nodes(
    rt: &tokio::runtime::Runtime,
    client: &mut client::Client,
    detail: bool,
    tool: &str,
) -> NodeList {
    let reply = rt
        .block_on(client.call(|mut c| async move {
            c.list_nodes(gsched_proto::pb::ListNodesRequest { detail })
                .await
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    doc_of(&reply, tool)
}

/// Prints a document as pretty JSON (every tool's `--json`).
pub fn print_json<T: serde::Serialize>(doc: &T) {
    use std::io::Write;
    // Streamed, not built as one string first: 100,000 jobs are hundreds of MB of text.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let written = serde_json::to_writer_pretty(&mut out, doc)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        output_failed(e);
    }
}
