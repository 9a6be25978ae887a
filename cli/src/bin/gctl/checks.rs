//! The cluster's checks: `gctl doctor` (what the nodes registered, and `--probe` jobs)
//! and `gctl burn-in` (the staged bring-up tests as jobs).

use gsched_cli::client::{Client, die};
use gsched_cli::outln;

/// `gctl doctor`'s options.
#[derive(clap::Args, Debug)]
pub struct Doctor {
    /// Only these nodes (default: all).
    pub nodes: Vec<String>,
    /// Print {"findings":[...]}.
    #[arg(long)]
    pub json: bool,
    /// Also probe on the nodes and between them, as a job (one task per node, no
    /// GPU): training-network reachability and MTU between every pair, clock skew,
    /// free space on --paths, the interface NCCL is told to use.
    #[arg(long)]
    pub probe: bool,
    /// Paths every node should have, with room (comma separated; with --probe).
    #[arg(long, value_delimiter = ',')]
    pub paths: Vec<String>,
    /// The Python the probe runs with on the nodes (standard library only).
    #[arg(long, default_value = "python3")]
    pub python: String,
    #[arg(short = 'p', long)]
    pub partition: Option<String>,
    /// Run as root, submit the probe job as this user (default: GSCHED_SERVICE_USER,
    /// else gsched-admin when it exists): nodes refuse root's jobs.
    #[arg(long = "as-user", value_name = "USER")]
    pub as_user: Option<String>,
}

/// Whom the admin tools' jobs run as, or gctl stops with what to do.
fn run_as(flag: Option<&str>) -> Option<gsched_cli::grun_job::ServiceUser> {
    let user = gsched_cli::grun_job::service_user_here(flag)
        .unwrap_or_else(|e| die("gctl", e.to_string()));
    if let Some(u) = &user {
        eprintln!(
            "gctl: running the jobs as {} (uid {}): nodes refuse root's",
            u.name, u.uid
        );
    }
    user
}

pub fn doctor(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    d: Doctor,
    controllers: Option<String>,
) {
    let Doctor {
        nodes,
        json,
        probe,
        paths,
        python,
        partition,
        as_user,
    } = d;
    let all = gsched_cli::fetch_nodes(rt, client, true, "gctl").nodes;
    let picked: Vec<_> = all
        .into_iter()
        .filter(|n| nodes.is_empty() || nodes.contains(&n.name))
        .collect();
    if picked.is_empty() {
        die("gctl", "no such node registered");
    }
    let mut findings = gsched_cli::doctor::check(&picked);
    if probe {
        // Nodes that cannot take a job are already findings above.
        let up: Vec<(String, String)> = picked
            .iter()
            .filter(|n| {
                n.online
                    && n.responding
                    && matches!(n.admin, gsched_types::node::NodeAdminState::Up)
            })
            .map(|n| (n.name.clone(), n.training_addr.clone()))
            .collect();
        if !up.is_empty() {
            let opts = gsched_cli::probe::Options {
                grun: gsched_cli::grun_job::grun_binary(),
                python,
                partition,
                controllers,
                paths,
                run_as: run_as(as_user.as_deref()),
            };
            let outcome = gsched_cli::probe::run(&up, &opts);
            if let Some(hint) = gsched_cli::grun_job::refused_root_hint(&outcome.stderr_tail) {
                eprintln!("gctl: {hint}");
            }
            let names: Vec<String> = up.into_iter().map(|(n, _)| n).collect();
            findings.extend(gsched_cli::probe::judge::judge(
                &outcome.reports,
                &names,
                &outcome.stderr_tail,
            ));
        }
    }
    if json {
        gsched_cli::print_json(&gsched_types::findings::Findings {
            findings,
            ..Default::default()
        });
    } else if findings.is_empty() {
        outln!("no findings on {} node(s)", picked.len());
    } else {
        for f in &findings {
            outln!("{}", gsched_cli::doctor::line(f));
        }
    }
}

/// `gctl burn-in`'s options.
#[derive(clap::Args, Debug)]
pub struct BurnIn {
    /// Only these nodes (a host list; default: every usable node).
    #[arg(short = 'w', long = "nodes")]
    pub nodes: Option<String>,
    /// Small messages and few iterations: a few minutes.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the report (default: ./burnin-YYYYMMDD-HHMMSS).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// The Python with PyTorch on the nodes.
    #[arg(long, default_value = "python3")]
    pub python: String,
    #[arg(short = 'p', long)]
    pub partition: Option<String>,
    /// Each run's time limit (sbatch's forms).
    #[arg(short = 't', long = "time", default_value = "20")]
    pub time: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run as root, submit the runs as this user (default: GSCHED_SERVICE_USER, else
    /// gsched-admin when it exists): nodes refuse root's jobs.
    #[arg(long = "as-user", value_name = "USER")]
    pub as_user: Option<String>,
}

pub fn burn_in_nodes(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    b: BurnIn,
    controllers: Option<String>,
) {
    let BurnIn {
        nodes,
        quick,
        out,
        python,
        partition,
        time,
        json,
        as_user,
    } = b;
    let all = gsched_cli::fetch_nodes(rt, client, true, "gctl").nodes;
    let wanted = nodes.as_deref().map(|l| {
        gsched_types::hostlist::expand(l)
            .unwrap_or_else(|e| die("gctl", format!("--nodes {l}: {e}")))
    });
    let picked: Vec<_> = all
        .into_iter()
        .filter(|n| wanted.as_ref().is_none_or(|w| w.contains(&n.name)))
        .collect();
    if let Some(w) = &wanted
        && let Some(missing) = w.iter().find(|n| !picked.iter().any(|p| &p.name == *n))
    {
        die(
            "gctl",
            format!("no node {missing} is registered (see ginfo)"),
        );
    }
    let opts = gsched_cli::burnin::exec::Options {
        grun: gsched_cli::grun_job::grun_binary(),
        python,
        quick,
        controllers,
        partition,
        time_limit: time,
        run_as: run_as(as_user.as_deref()),
    };
    let dir = out.unwrap_or_else(|| {
        format!("burnin-{}", chrono::Local::now().format("%Y%m%d-%H%M%S")).into()
    });
    let status = burn_in(&picked, &opts, &dir, json);
    std::process::exit(status);
}

/// Plans, runs, judges and writes up a burn-in of `nodes`; returns gctl's exit status
/// (1 when a run failed or a finding asks for attention).
fn burn_in(
    nodes: &[gsched_types::api::NodeRow],
    opts: &gsched_cli::burnin::exec::Options,
    dir: &std::path::Path,
    json: bool,
) -> i32 {
    use gsched_cli::burnin::{Report, exec, judge, plan, report};
    let (runs, skipped) = plan::plan(nodes);
    for line in &skipped {
        eprintln!("gctl: burn-in: skipped {line}");
    }
    if runs.is_empty() {
        die(
            "gctl",
            "burn-in: no node can take a run (see ginfo and gctl doctor)",
        );
    }
    let started = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    eprintln!(
        "gctl: burn-in: {} run(s) on {} node(s), stage by stage; report in {}",
        runs.len(),
        nodes.len(),
        dir.display()
    );
    let results = exec::execute(&runs, opts, |r| {
        let what = match (&r.error, r.peak(), r.run.stage) {
            (Some(e), _, _) => format!("FAILED: {e}"),
            (None, Some(p), _) => format!(
                "{:.2} GB/s busbw at {} ({})",
                p.busbw_gbps,
                judge::size(p.bytes),
                p.backend
            ),
            (None, None, _) => format!("{} GPU(s) checked", r.gpus.len()),
        };
        eprintln!(
            "gctl: burn-in: {} {}: {what} in {:.1} s",
            r.run.stage.slug(),
            r.run.label(),
            r.seconds
        );
    });
    let rdma_nodes: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.topology.as_ref().is_some_and(|t| {
                t.nics
                    .iter()
                    .any(|x| x.rdma_device.is_some() && x.up != Some(false))
            })
        })
        .map(|n| n.name.clone())
        .collect();
    if let Some(hint) = results
        .iter()
        .filter_map(|r| r.error.as_deref())
        .find_map(gsched_cli::grun_job::refused_root_hint)
    {
        eprintln!("gctl: burn-in: {hint}");
    }
    let findings = judge::judge(&results, &rdma_nodes);
    let doc = Report {
        started,
        quick: opts.quick,
        nodes: nodes
            .iter()
            .filter(|n| runs.iter().any(|r| r.nodes.contains(&n.name)))
            .map(|n| n.name.clone())
            .collect(),
        results,
        skipped,
        findings,
    };
    let files = report::write(dir, &doc).unwrap_or_else(|e| {
        die(
            "gctl",
            format!("cannot write the report in {}: {e}", dir.display()),
        )
    });
    if json {
        gsched_cli::print_json(&doc);
    } else {
        for f in &doc.findings {
            outln!("{}", gsched_cli::doctor::line(f));
        }
        if doc.cpu_only() {
            outln!(
                "note: no run reached a GPU (fake agents or no CUDA): gloo on CPUs, rates not judged"
            );
        }
        for f in &files {
            outln!("wrote {}", f.display());
        }
    }
    let attention = doc
        .findings
        .iter()
        .any(|f| f.severity >= gsched_types::findings::Severity::Warn);
    i32::from(attention)
}
