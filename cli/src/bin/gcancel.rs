//! `gcancel`: cancel jobs (SIGTERM, grace period, SIGKILL on every node).

use clap::Parser;
use gsched_cli::JobQuery;
use gsched_cli::client::{Client, controller_list, current_user, describe, request_id};
use gsched_proto::pb::JobRequest;
use gsched_types::api::JobSelector;

/// Cancel jobs by id (120 cancels every task of array 120; 120_3 one task).
#[derive(Parser, Debug)]
#[command(name = "gcancel", version, about)]
struct Args {
    /// Cancel every job of this user.
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    #[arg(long)]
    controllers: Option<String>,
    job_ids: Vec<String>,
}

fn main() {
    let args = Args::parse();
    if args.job_ids.is_empty() && args.user.is_none() {
        eprintln!("gcancel: error: no job id given (gcancel ID... or gcancel -u USER)");
        std::process::exit(1);
    }
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let me = current_user();
    let mut targets: Vec<u64> = Vec::new();
    let mut failed = false;
    if let Some(u) = &args.user {
        let query = JobQuery {
            users: vec![u.clone()],
            ..Default::default()
        };
        let jobs = gsched_cli::fetch_jobs(&rt, &mut client, &query, "gcancel").jobs;
        targets.extend(jobs.iter().map(|j| j.job_id.0));
    }
    for id in &args.job_ids {
        match JobSelector::parse(id) {
            Ok(JobSelector {
                id: job,
                task: None,
            }) => targets.push(job),
            Ok(task) => {
                let query = JobQuery {
                    jobs: vec![task],
                    ..Default::default()
                };
                match gsched_cli::fetch_jobs(&rt, &mut client, &query, "gcancel")
                    .jobs
                    .first()
                {
                    Some(j) => targets.push(j.job_id.0),
                    None => {
                        eprintln!("gcancel: error: job {id} does not exist or has ended");
                        failed = true;
                    }
                }
            }
            Err(e) => {
                eprintln!("gcancel: error: {e}");
                failed = true;
            }
        }
    }
    for job in targets {
        let req = JobRequest {
            request_id: request_id(),
            job_id: job,
            user: me.clone(),
        };
        if let Err(s) = rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.cancel(req).await }
        })) {
            eprintln!("gcancel: error: job {job}: {}", describe(&s));
            failed = true;
        }
    }
    std::process::exit(if failed { 1 } else { 0 });
}
