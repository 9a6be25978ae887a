//! `gacct`: accounting for finished (and running) jobs, sacct-style, with the failure
//! reason and the evidence behind it.

use gsched_cli::JobQuery;
use gsched_cli::args::gacct::Args;
use gsched_cli::client::{Client, controller_list, die};
use gsched_cli::gacct;
use gsched_cli::out;
use gsched_cli::slurm_options::{Tool, parse_or_refuse};
use gsched_types::api::{JobSelector, JobsDoc};

/// The arguments, `seff JOBID` read as `gacct --eff JOBID`.
fn parse_args() -> Args {
    let argv = gsched_cli::text_args("gacct");
    let invoked = gsched_cli::invoked_as();
    if invoked != "seff" {
        // --json is gsched's own document under gsched's name; sacct refuses it (Slurm's
        // is another schema).
        let (name, allowed): (&str, &[&str]) = if invoked == "sacct" {
            ("sacct", &[])
        } else {
            ("gacct", &["json"])
        };
        return parse_or_refuse(Tool::Sacct, name, argv, allowed);
    }
    let mut rest: Vec<String> = argv.into_iter().skip(1).collect();
    let at = rest.iter().position(|a| !a.starts_with('-'));
    let Some(at) = at else {
        die("seff", "usage: seff JOBID [--json]");
    };
    let job = rest.remove(at);
    // seff's -d (debug) shows the raw figures: --json does here.
    let rest = rest
        .into_iter()
        .map(|a| if a == "-d" { "--json".into() } else { a });
    <Args as clap::Parser>::parse_from(
        ["gacct".to_string(), "--eff".into(), job]
            .into_iter()
            .chain(rest),
    )
}

/// `gacct --eff JOBID`.
fn efficiency(args: &Args, job: &str) {
    let selector = JobSelector::parse(job).unwrap_or_else(|e| die("gacct", e));
    let query = JobQuery {
        include_finished: true,
        detail: true,
        jobs: vec![selector],
        archive: true,
        ..Default::default()
    };
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let Some(row) = list
        .jobs
        .iter()
        .find(|j| j.display_id == job || j.job_id.0.to_string() == job)
    else {
        die(
            "gacct",
            format!(
                "no job {job} (it may have ended before the controller's window; gacct -j {job} shows what is known)"
            ),
        );
    };
    let report = row.efficiency(list.now_ms);
    if args.json {
        gsched_cli::print_json(&report);
    } else {
        out!("{}", gsched_cli::efficiency::render(&report));
    }
}

fn main() {
    let args = parse_args();
    if let Some(job) = &args.eff {
        efficiency(&args, job);
        return;
    }
    if args.usage {
        out!("Usage: sacct [options]\n\tUse --help for help\n");
        return;
    }
    if args.helpformat {
        out!("{}", gacct::help_fields());
        return;
    }
    let caller = gacct::Caller {
        user: gsched_cli::client::current_user(),
        is_root: nix::unistd::getuid().is_root(),
    };
    let when = |t: &str| gsched_cli::when::parse(t).map_err(|e| e.to_string());
    let query = gacct::query(&args, &caller, when).unwrap_or_else(|e| die("gacct", e));
    let filter = gacct::Filter::new(&args).unwrap_or_else(|e| die("gacct", e));
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let list = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gacct");
    let jobs: Vec<_> = list.jobs.into_iter().filter(|j| filter.keeps(j)).collect();
    if args.json {
        gsched_cli::print_json(&JobsDoc { jobs });
        return;
    }
    let text = gacct::listing(&args, &jobs, list.now_ms).unwrap_or_else(|e| die("gacct", e));
    out!("{text}");
}
