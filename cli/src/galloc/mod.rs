//! `galloc` (salloc's twin): get an allocation with salloc's options, run a command (by
//! default the user's shell) here with the job's variables (`SLURM_JOB_ID`,
//! `SLURM_JOB_NODELIST`...) so `grun`/`srun` start steps in it, and give the allocation
//! back when the command exits (`--no-shell`: leave it). Exits with the command's status.

pub mod args;

pub use args::AllocArgs;

use crate::client::{Client, controller_list, die};
use crate::getopt::OptionError;
use crate::option_words;
use crate::slurm_options::{self, Tool};
use clap::{CommandFactory, FromArgMatches};
use std::collections::BTreeMap;

/// The options of `raw` (`SALLOC_*` variables first, the command line winning), and the
/// words of those sbatch also has, for the allocation.
pub fn parse(
    raw: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(AllocArgs, Vec<String>), OptionError> {
    let cmd = AllocArgs::command();
    let mut argv = vec!["galloc".to_string()];
    argv.extend(option_words::from_environment(Tool::Salloc, env, |_| true));
    argv.extend(raw.iter().skip(1).cloned());
    let m = cmd
        .clone()
        .try_get_matches_from(&argv)
        .map_err(|e| OptionError::from_clap(&cmd, &e, &argv))?;
    let args = AllocArgs::from_arg_matches(&m).map_err(|e| OptionError::Refused(e.to_string()))?;
    let given = option_words::given_longs(&cmd, &m);
    if let Some(refused) = slurm_options::refusal(Tool::Salloc, given.iter().map(String::as_str)) {
        return Err(OptionError::Refused(refused));
    }
    let sbatch = crate::sbatch::SubArgs::command();
    let words = option_words::canonical(&cmd, &m, |long| {
        sbatch.get_arguments().any(|a| a.get_long() == Some(long))
    });
    Ok((args, words))
}

/// `galloc`'s whole run; returns its exit status.
pub fn main(raw: Vec<String>) -> i32 {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let tool = if crate::invoked_as() == "salloc" {
        "salloc"
    } else {
        "galloc"
    };
    let (args, words) = parse(&raw, &env).unwrap_or_else(|e| e.exit(tool));
    let (alloc_args, _) =
        crate::alloc::parse("galloc", &words).unwrap_or_else(|e| die("galloc", e));
    let mut command = args.command.clone();
    if command.is_empty() {
        command.push(
            env.get("SHELL")
                .cloned()
                .unwrap_or_else(|| "/bin/bash".into()),
        );
    }
    let rt = crate::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let immediate = args
        .immediate
        .as_deref()
        .map(|v| crate::grun::run::immediate_wait("--immediate", v));
    let job = crate::alloc::allocate(&rt, &mut client, &alloc_args, "galloc", immediate)
        .unwrap_or_else(|e| die("galloc", e));
    let id = job.job_id.0;
    if args.no_shell {
        return 0;
    }
    // The command owns the terminal: Ctrl-C goes to it, and galloc (whose handler does
    // nothing, and is reset for the command by exec) waits, then gives the nodes back.
    extern "C" fn ignore(_: i32) {}
    // SAFETY: installs a handler that does nothing, before any thread depends on SIGINT.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGINT,
            nix::sys::signal::SigHandler::Handler(ignore),
        );
    }
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(crate::alloc::job_env(&job))
        .status();
    crate::alloc::release(&rt, &mut client, id);
    eprintln!("galloc: Relinquishing job allocation {id}");
    match status {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => die("galloc", format!("cannot run {}: {e}", command[0])),
    }
}
