//! `gctl show job|node` (scontrol show): one job's or node's details.

use clap::Subcommand;
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, die};
use gsched_cli::{out, outln};
use gsched_types::api::{JobRow, JobSelector};
use std::fmt::Write;

#[derive(Subcommand, Debug)]
pub enum Show {
    Job {
        job: String,
        #[arg(long)]
        json: bool,
        /// Each record on one line (scontrol -o).
        #[arg(long)]
        oneliner: bool,
    },
    Node {
        node: String,
        #[arg(long)]
        json: bool,
        /// On one line (scontrol -o).
        #[arg(long)]
        oneliner: bool,
    },
}

pub fn run(rt: &tokio::runtime::Runtime, client: &mut Client, what: Show) {
    match what {
        Show::Job {
            job,
            json,
            oneliner,
        } => show_job(rt, client, &job, json, oneliner),
        Show::Node {
            node,
            json,
            oneliner,
        } => show_node(rt, client, &node, json, oneliner),
    }
}

/// A record as `scontrol -o` prints it: its `Key=Value` lines on one line, one space
/// between them.
fn one_line(record: &str) -> String {
    let words: Vec<&str> = record
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("{}\n", words.join(" "))
}

fn show_job(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    job: &str,
    json: bool,
    oneliner: bool,
) {
    let sel = JobSelector::parse(job).unwrap_or_else(|e| die("gctl", e));
    let query = JobQuery {
        include_finished: true,
        detail: true,
        jobs: vec![sel],
        ..Default::default()
    };
    let jobs = gsched_cli::fetch_jobs(rt, client, &query, "gctl").jobs;
    // `120` is job 120 itself here, not every task of array 120.
    let Some(j) = jobs
        .iter()
        .find(|j| sel.task.is_some() || j.job_id.0 == sel.id)
    else {
        die(
            "gctl",
            format!("job {job} not found (finished jobs are kept up to the retention limit)"),
        )
    };
    if json {
        gsched_cli::print_json(j);
        return;
    }
    // As scontrol: an array's id shows each of its tasks, one record after another.
    let records: Vec<&JobRow> = if sel.task.is_none() && j.array_job_id.map(|a| a.0) == Some(sel.id)
    {
        jobs.iter()
            .filter(|t| t.array_job_id.map(|a| a.0) == Some(sel.id))
            .collect()
    } else {
        vec![j]
    };
    for (i, r) in records.iter().enumerate() {
        let text = job_record(r);
        if oneliner {
            out!("{}", one_line(&text));
            continue;
        }
        if i > 0 {
            outln!();
        }
        out!("{text}");
    }
}

fn show_node(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    node: &str,
    json: bool,
    oneliner: bool,
) {
    let nodes = gsched_cli::fetch_nodes(rt, client, false, "gctl").nodes;
    let Some(n) = nodes.iter().find(|n| n.name == *node) else {
        die("gctl", format!("no node named {node}"))
    };
    if json {
        gsched_cli::print_json(n);
    } else {
        let mut o = String::new();
        macro_rules! put {
            ($($t:tt)*) => {
                {
                    let _ = writeln!(o, $($t)*);
                }
            };
        }
        put!(
            "NodeName={} State={} Online={} Address={} TrainingAddr={}",
            n.name,
            n.drain_reason
                .as_ref()
                .map(|r| format!("DRAIN Reason=\"{r}\""))
                .unwrap_or_else(|| "UP".into()),
            n.online,
            n.address,
            n.training_addr
        );
        put!(
            "   GPUs={} Model={} GPUsInUse={:?} BadGPUs={:?} Jobs={:?}",
            n.gpus_total,
            n.gpu_model.as_deref().unwrap_or("-"),
            n.gpus_used,
            n.bad_gpus,
            n.jobs.iter().map(|j| j.0).collect::<Vec<_>>()
        );
        put!(
            "   CPUsInUse={} MemoryUsedMB={} Features={:?} AgentVersion={}",
            n.cpus_used,
            n.memory_used_mb,
            n.features,
            n.agent_version
        );
        for u in &n.outside_jobs {
            put!("   OutsideJobs: {}", u.line());
        }
        for h in &n.health {
            put!("   Health: {:?} {} {}", h.severity, h.kind, h.message);
            if let Some(f) = h
                .finding
                .as_ref()
                .filter(|f| !h.message.contains(&f.evidence))
            {
                put!("      Evidence={}", f.evidence);
            }
        }
        if oneliner {
            out!("{}", one_line(&o));
        } else {
            out!("{o}");
        }
    }
}

/// An output pattern as `scontrol show job` prints it: absolute, with the job's ids,
/// name and user filled in (`%N`, `%n`, `%t` differ per node and task and stay).
fn output_path(pattern: &str, j: &JobRow, workdir: &str) -> String {
    let out = gsched_launch::output::expand_with(
        pattern,
        &gsched_launch::output::PatternValues {
            job: j.job_id,
            name: &j.name,
            user: &j.user,
            array: j.array_job_id.zip(j.array_task_id),
            node: None,
            node_rank: None,
            task: None,
        },
    );
    if out.starts_with('/') {
        out
    } else {
        format!("{}/{out}", workdir.trim_end_matches('/'))
    }
}

/// Writes one line of a record (errors writing to a `String` cannot happen).
macro_rules! put {
    ($o:expr, $($t:tt)*) => {{
        let _ = writeln!($o, $($t)*);
    }};
}

/// A job's record, as `scontrol show job` prints it (lines of `Key=Value` words): Slurm's
/// field names and order where Slurm has the field (scripts grep them), then gsched's own.
fn job_record(j: &JobRow) -> String {
    let mut o = String::new();
    identity(&mut o, j);
    request(&mut o, j);
    placement(&mut o, j);
    outcome(&mut o, j);
    o
}

/// Who, what and in which state: scontrol's first lines.
fn identity(o: &mut String, j: &JobRow) {
    put!(o, "JobId={} JobName={}", j.display_id, j.name);
    let uid = j
        .spec
        .as_ref()
        .and_then(|s| s.uid)
        .map(|u| format!("({u})"))
        .unwrap_or_default();
    put!(
        o,
        "   UserId={}{uid} Account={} Partition={} QOS={}",
        j.user,
        j.account,
        j.partition,
        j.qos.as_deref().unwrap_or("normal")
    );
    put!(
        o,
        "   JobState={} Reason={} Restarts={} ExitCode={}",
        j.state.name(),
        j.reason,
        j.attempt,
        j.exit_code
            .map(|c| format!("{c}:0"))
            .unwrap_or_else(|| "0:0".into())
    );
    if let Some(c) = &j.comment {
        put!(o, "   Comment={c}");
    }
}

/// What the job asked for: nodes, tasks, GPUs, memory, time, files.
fn request(o: &mut String, j: &JobRow) {
    let time_limit = j
        .time_limit_s
        .map(gsched_types::parse::format_duration)
        .unwrap_or_else(|| "UNLIMITED".into());
    let list_or_null = |l: &[String]| {
        if l.is_empty() {
            "(null)".to_string()
        } else {
            gsched_types::hostlist::compress(l)
        }
    };
    if let Some(s) = &j.spec {
        put!(
            o,
            "   ReqNodeList={} ExcNodeList={}",
            list_or_null(&s.nodelist),
            list_or_null(&s.exclude)
        );
    }
    let node_list = if j.node_list.is_empty() {
        "(null)"
    } else {
        j.node_list.as_str()
    };
    match &j.spec {
        Some(s) => {
            put!(
                o,
                "   NodeList={node_list} NumNodes={} NumTasks={} CPUs/Task={} GPUsPerNode={} GpuType={} Mem={} TimeLimit={time_limit}",
                s.nodes,
                s.ntasks,
                s.cpus_per_task,
                s.gpus_per_node,
                s.gpu_type.as_deref().unwrap_or("-"),
                s.mem_mb
                    .map(|m| format!("{m}M"))
                    .unwrap_or_else(|| "default".into()),
            );
            if s.gpus_per_node > 0 {
                put!(o, "   TresPerNode=gres:gpu:{}", s.gpus_per_node);
            }
            let default = if j.array_task_id.is_some() {
                "gsched-%A_%a.out"
            } else {
                "gsched-%j.out"
            };
            let out = s.output.as_deref().unwrap_or(default);
            put!(o, "   WorkDir={}", s.workdir);
            put!(o, "   StdOut={}", output_path(out, j, &s.workdir));
            put!(
                o,
                "   StdErr={}",
                output_path(s.error.as_deref().unwrap_or(out), j, &s.workdir)
            );
            if let Some(w) = s.switches {
                put!(o, "   Switches={}", switches(w));
            }
        }
        None => put!(
            o,
            "   NodeList={node_list} NumNodes={} GPUsPerNode={} TimeLimit={time_limit}",
            j.nodes,
            j.gpus_per_node
        ),
    }
}

/// Where it runs: the rendezvous address and each node's share.
fn placement(o: &mut String, j: &JobRow) {
    if let Some(a) = &j.allocation {
        put!(
            o,
            "   MasterAddr={} MasterPort={}",
            a.master_addr,
            a.master_port
        );
        for (rank, n) in a.nodes.iter().enumerate() {
            put!(
                o,
                "   Node[{rank}]={} GPUs={:?} CPUs={} Mem={}M NIC={}",
                n.node,
                n.gpus,
                gsched_types::cpulist::format(&n.cpus),
                n.mem_mb,
                n.nic.as_deref().unwrap_or("-")
            );
        }
    }
}

/// How it went: each node's run, the failure and its evidence, warnings, notices and
/// earlier attempts.
fn outcome(o: &mut String, j: &JobRow) {
    for st in &j.runs {
        put!(
            o,
            "   Step[{}]: {:?}{}",
            st.node,
            st.state,
            st.failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = &j.failure {
        put!(o, "   Failure={}", f.kind.reason_name());
        put!(o, "   Evidence={}", f.evidence);
    }
    if let Some(idle) = &j.idle {
        put!(o, "   IdleWarning={}", idle.message());
    }
    for w in &j.warnings {
        put!(
            o,
            "   Warning[{}]={}: {}",
            w.node.as_deref().unwrap_or("?"),
            w.kind,
            w.action
        );
        if !w.evidence.is_empty() {
            put!(o, "      Evidence={}", w.evidence);
        }
    }
    for n in &j.notices {
        for line in n.describe() {
            put!(o, "   Notify={line}");
        }
    }
    for a in &j.attempts {
        put!(
            o,
            "   Attempt[{}]: {} on {} {}",
            a.number,
            a.state.name(),
            gsched_types::hostlist::compress(&a.nodes),
            a.failure
                .as_ref()
                .map(|f| f.to_string())
                .unwrap_or_default()
        );
    }
}

/// `--switches` as `scontrol show job` prints it: `COUNT@[D-]HH:MM:SS`; a request without
/// MAX-TIME shows the count alone (the cluster's `topology_wait_s` then applies).
fn switches(w: gsched_types::job::SwitchWait) -> String {
    match w.wait_s {
        None => w.count.to_string(),
        Some(t) => format!("{}@{}", w.count, gsched_types::parse::format_hms(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running job as the controller sends it, with one mail notice due.
    fn running_job_with_a_notice() -> JobRow {
        serde_json::from_value(serde_json::json!({
            "job_id": 7, "display_id": "7", "name": "train", "user": "ana",
            "account": "nlp", "partition": "gpu", "state": "RUNNING", "reason": "None",
            "nodes": 1, "node_list": "n1", "gpus_per_node": 2, "gpus": 2,
            "restarts": 0, "held": false, "submit_ms": 1000,
            "notices": [{"event": "BEGIN", "attempt": 0, "at_ms": 2000, "state": {"state": "due"}}],
        }))
        .unwrap()
    }

    #[test]
    fn a_record_holds_every_line_it_shows_in_scontrols_order() {
        let text = job_record(&running_job_with_a_notice());
        let keys: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start().split(['=', ' ']).next().unwrap_or(""))
            .collect();
        assert_eq!(keys, ["JobId", "UserId", "JobState", "NodeList", "Notify"]);
        assert!(text.contains("   Notify=BEGIN due\n"), "{text}");
        assert!(
            one_line(&text).starts_with("JobId=7 JobName=train UserId=ana"),
            "{}",
            one_line(&text)
        );
    }
}
