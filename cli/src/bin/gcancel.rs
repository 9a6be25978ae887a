//! `gcancel`: cancel jobs (SIGTERM, grace period, SIGKILL on every node), or with
//! `--signal` send them a signal, scancel-style.
//! Whatever it names (ids, a user's jobs, states, a partition, a name, nodes) is one
//! request and one replicated command. Filters the controller does not take (account,
//! QOS, reservation, wckey) and `--interactive` first list the jobs, then name them.

use gsched_cli::JobQuery;
use gsched_cli::args::gcancel::Args;
use gsched_cli::client::{Client, controller_list, current_user, die};
use gsched_cli::slurm_options::{Tool, parse_or_refuse};
use gsched_types::api::{JobAction, JobRow, JobSelection, JobSelector};
use gsched_types::job::JobState;

fn main() {
    let name = if gsched_cli::invoked_as() == "scancel" {
        "scancel"
    } else {
        "gcancel"
    };
    let args: Args = parse_or_refuse(Tool::Scancel, name, gsched_cli::text_args(name), &[]);
    if args.usage {
        gsched_cli::out!(
            "Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]\n               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]\n               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]\n               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey]\n               [job_id[_array_id][.step_id]]\n"
        );
        return;
    }
    if args.quiet {
        quiet_stderr();
    }
    let mut users = args.user.clone();
    if args.me {
        users.push(current_user());
    }
    let nodes = match &args.nodelist {
        None => Vec::new(),
        Some(list) => gsched_types::hostlist::expand(list)
            .unwrap_or_else(|e| die(name, format!("--nodelist {list}: {e}"))),
    };
    let mut select = JobSelection {
        jobs: args
            .job_ids
            .iter()
            .flat_map(|j| j.split(','))
            .filter(|j| !j.is_empty())
            .map(|j| JobSelector::parse(j).unwrap_or_else(|e| die(name, e)))
            .collect(),
        users,
        states: args
            .state
            .iter()
            .map(|s| {
                JobState::parse(s).unwrap_or_else(|| {
                    die(
                        name,
                        format!("invalid state '{s}': use PD, R or their names"),
                    )
                })
            })
            .collect(),
        partition: args.partition.clone(),
        name: args.name.clone(),
        nodes,
    };
    let filtered = args.account.is_some()
        || args.qos.is_some()
        || args.reservation.is_some()
        || args.wckey.is_some();
    if select.is_empty() && !filtered {
        die(
            name,
            "no job given (gcancel ID..., or -u USER, --me, -t STATE, -p PARTITION, -n NAME, -w NODES, -A ACCOUNT, -q QOS, -R RESERVATION, --wckey WCKEY)",
        );
    }
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    if filtered || args.interactive {
        let Some(named) = resolve(&rt, &mut client, &args, &select, name) else {
            return;
        };
        select.jobs = named;
    }
    let action = match (&args.signal, args.batch) {
        (Some(_), _) | (None, true) => {
            // scancel -b alone: SIGKILL to the batch shell.
            let sig = args.signal.as_deref().unwrap_or("KILL");
            JobAction::Signal {
                signal: gsched_types::parse::signal(sig)
                    .unwrap_or_else(|e| die(name, format!("--signal: {e}"))),
                batch_only: args.batch,
            }
        }
        (None, false) => JobAction::Cancel,
    };
    let (_, refused) = gsched_cli::act_on_jobs(&rt, &mut client, action, select, name);
    std::process::exit(i32::from(refused));
}

/// The active jobs `select` and the filters the controller does not take name, each
/// confirmed on the terminal with `--interactive`, as job selectors; `None` when none is
/// left (nothing to do, as scancel). Without users or ids named, only your own jobs.
fn resolve(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    args: &Args,
    select: &JobSelection,
    name: &str,
) -> Option<Vec<JobSelector>> {
    let users = if select.users.is_empty() && select.jobs.is_empty() {
        vec![current_user()]
    } else {
        select.users.clone()
    };
    let query = JobQuery {
        detail: args.reservation.is_some(),
        users,
        states: select.states.iter().map(|s| s.code().to_string()).collect(),
        jobs: select.jobs.clone(),
        partition: select.partition.clone(),
        names: select.name.iter().cloned().collect(),
        ..Default::default()
    };
    let list = gsched_cli::fetch_jobs(rt, client, &query, name);
    let keeps = |j: &JobRow| {
        args.account.as_ref().is_none_or(|a| *a == j.account)
            && args.qos.as_ref().is_none_or(|q| j.qos.as_ref() == Some(q))
            && args
                .wckey
                .as_ref()
                .is_none_or(|w| j.wckey.as_ref() == Some(w))
            && args.reservation.as_ref().is_none_or(|r| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.reservation.as_ref())
                    .is_some_and(|own| own == r)
            })
            && (select.nodes.is_empty()
                || gsched_types::hostlist::expand(&j.node_list)
                    .unwrap_or_default()
                    .iter()
                    .any(|n| select.nodes.contains(n)))
    };
    let mut named = Vec::new();
    for j in list.jobs.iter().filter(|j| keeps(j)) {
        if args.interactive && !confirm(j) {
            continue;
        }
        named.push(JobSelector::parse(&j.display_id).unwrap_or_else(|e| die(name, e)));
    }
    (!named.is_empty()).then_some(named)
}

/// scancel -i's question; true for y/Y, false for n/N or the end of the input.
fn confirm(j: &JobRow) -> bool {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    loop {
        print!(
            "Cancel job_id={} name={} partition={} [y/n]? ",
            j.display_id, j.name, j.partition
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => {
                println!();
                return false;
            }
            Ok(_) => {}
        }
        match line.chars().next() {
            Some('y' | 'Y') => return true,
            Some('n' | 'N') => return false,
            _ => {}
        }
    }
}

/// `--quiet`: error messages go nowhere (the exit status still tells).
fn quiet_stderr() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto stderr's descriptor with a descriptor this process owns.
        unsafe {
            libc::dup2(null.as_raw_fd(), libc::STDERR_FILENO);
        }
    }
}
