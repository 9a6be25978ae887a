//! `galloc`: salloc's twin. Gets an allocation (sbatch's resource options), then runs a
//! command, or the user's shell, on this host with the job's variables (`SLURM_JOB_ID`,
//! `SLURM_JOB_NODELIST`...), so `grun`/`srun` start steps in it; when that ends, the
//! allocation is given back. Exits with the command's status.

use gsched_cli::alloc;
use gsched_cli::client::{Client, controller_list, die};

fn main() {
    let raw: Vec<String> = gsched_cli::text_args("galloc")
        .into_iter()
        .skip(1)
        .collect();
    if raw.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "galloc [sbatch options] [command [args]]: get an allocation, run the command (default: $SHELL) here with its variables, then give it back"
        );
        return;
    }
    let (args, mut command) = alloc::parse("galloc", &raw).unwrap_or_else(|e| die("galloc", e));
    if command.is_empty() {
        command.push(std::env::var("SHELL").unwrap_or_else(|_| "/bin/bash".into()));
    }
    let rt = gsched_cli::runtime();
    let mut client = Client::new(controller_list(args.controllers.as_deref()));
    let job =
        alloc::allocate(&rt, &mut client, &args, "galloc").unwrap_or_else(|e| die("galloc", e));
    let id = job.job_id.0;
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
        .envs(alloc::job_env(&job))
        .status();
    alloc::release(&rt, &mut client, id);
    eprintln!("galloc: Relinquishing job allocation {id}");
    match status {
        Ok(s) => std::process::exit(s.code().unwrap_or(1)),
        Err(e) => die("galloc", format!("cannot run {}: {e}", command[0])),
    }
}
