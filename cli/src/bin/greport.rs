//! `greport` (also as `sreport`): GPU-hours over a time window by user and account,
//! account, partition, node or GPU model, with the cluster's utilisation, from the
//! accounting archive and the jobs running now.

use clap::Parser;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::out;
use gsched_cli::report::{Layout, fetch, render_usage};
use gsched_types::report::{Group, ReportReply, ReportRequest};

/// Usage reports: who used how many GPU-hours, where, and how busy the cluster was.
#[derive(Parser, Debug)]
#[command(name = "greport", version, about)]
struct Args {
    /// Rows per: user (with account), account, partition, node or gpu-model.
    #[arg(long = "by", default_value = "user")]
    by: String,
    /// Only the N largest rows (sreport's TopCount).
    #[arg(long)]
    top: Option<usize>,
    /// Start of the window (default: 30 days ago): now-7days, 2026-11-01, 08:00...
    #[arg(short = 'S', long = "starttime")]
    starttime: Option<String>,
    /// End of the window (default: now).
    #[arg(short = 'E', long = "endtime")]
    endtime: Option<String>,
    /// Fields split by `|`.
    #[arg(short = 'P', long = "parsable2")]
    parsable: bool,
    /// No header lines.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// The report as JSON: `{"gpu_hours", "capacity_gpu_hours", "utilisation_pct",
    /// "rows": [{"user", "account", "jobs", "gpu_hours", "share_pct", ...}]}`.
    #[arg(long)]
    json: bool,
    #[arg(long)]
    controllers: Option<String>,
}

fn unsupported(word: &str) -> ! {
    die(
        "sreport",
        format!(
            "'{word}' is not supported: use 'cluster utilization', 'cluster AccountUtilizationByUser' or 'user TopUsage' with start=/end= (or greport --by ...)"
        ),
    )
}

/// sreport's words (`cluster AccountUtilizationByUser start=... end=... -t hours`) as
/// greport's arguments.
fn sreport_args(words: Vec<String>) -> Vec<String> {
    let mut out = vec!["greport".to_string()];
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let lower = w.to_ascii_lowercase();
        if let Some((key, value)) = lower.split_once('=') {
            let flag = match key {
                "start" => "-S",
                "end" => "-E",
                "topcount" => "--top",
                _ => unsupported(&w),
            };
            out.extend([flag.to_string(), value.to_string()]);
            continue;
        }
        match lower.as_str() {
            // Times are GPU-hours here, whatever unit is asked for.
            "-t" => {
                it.next();
            }
            t if t.starts_with("-t") => {}
            "cluster" | "user" => {}
            "utilization" | "accountutilizationbyuser" | "usertopusage" => {
                out.extend(["--by".into(), "user".into()]);
            }
            "topusage" => out.extend(["--by", "user", "--top", "10"].map(String::from)),
            "-p" | "--parsable" | "--parsable2" => out.push("-P".into()),
            "-n" | "--noheader" => out.push("-n".into()),
            _ => unsupported(&w),
        }
    }
    out
}

fn main() {
    let argv = gsched_cli::text_args("greport");
    let args = if gsched_cli::invoked_as() == "sreport" {
        Args::parse_from(sreport_args(argv.into_iter().skip(1).collect()))
    } else {
        Args::parse_from(argv)
    };
    let group = Group::parse(&args.by).unwrap_or_else(|e| die("greport", e));
    let when = |t: &Option<String>| {
        t.as_deref()
            .map(|t| gsched_cli::when::parse(t).unwrap_or_else(|e| die("greport", e)))
    };
    let until_ms = when(&args.endtime).unwrap_or(0);
    let since_ms = when(&args.starttime).unwrap_or_else(|| {
        let end = if until_ms == 0 {
            gsched_proto::clock::now_ms()
        } else {
            until_ms
        };
        end.saturating_sub(30 * 86_400_000)
    });
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let req = ReportRequest::Usage {
        group,
        since_ms,
        until_ms,
    };
    let ReportReply::Usage(mut report) = fetch(&rt, &mut client, &req, "greport") else {
        die("greport", "the controller answered with another report");
    };
    if args.json {
        if let Some(top) = args.top {
            report.rows.truncate(top);
        }
        gsched_cli::print_json(&report);
        return;
    }
    let layout = if args.parsable {
        Layout::Parsable
    } else {
        Layout::Table
    };
    out!(
        "{}",
        render_usage(&report, args.top, layout, !args.noheader)
    );
}
