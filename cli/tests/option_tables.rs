//! The tools' option definitions against Slurm's option tables (`cli/slurm-options/`):
//! every option Slurm's tool has exists under the same names and takes a value the same
//! way; every option the tool accepts is in the table or is gsched's own; every option
//! the table calls implemented names tests that exist.

use clap::{ArgAction, CommandFactory};
use gsched_cli::slurm_options::{Arity, Status, Tool, table};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `fn NAME(` in the workspace's Rust sources and every corpus script's stem.
fn known_tests() -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    let mut dirs = vec![workspace()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(p);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for part in text.split("fn ").skip(1) {
                    let id: String = part
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(id);
                }
            } else if p.parent().is_some_and(|d| d.ends_with("slurmdiff/corpus"))
                && let Some(stem) = p.file_stem()
            {
                names.insert(stem.to_string_lossy().into_owned());
            }
        }
    }
    names
}

/// Problems of `cmd` (the gsched tool that answers to `tool`) against the table.
fn check(tool: Tool, mut cmd: clap::Command, gsched_only: &[&str]) -> Vec<String> {
    cmd.build();
    let known = known_tests();
    let mut problems = Vec::new();
    let args: Vec<&clap::Arg> = cmd.get_arguments().collect();
    let find = |long: &str| {
        args.iter().copied().find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|v| v.contains(&long))
        })
    };
    for row in table(tool) {
        let name = format!("{} --{}", tool.name(), row.long);
        let Some(arg) = find(row.long) else {
            problems.push(format!(
                "{name}: not accepted (the table says {:?})",
                row.status
            ));
            continue;
        };
        if let Some(c) = row.short {
            let shorts: Vec<char> = arg
                .get_short()
                .into_iter()
                .chain(arg.get_all_short_aliases().unwrap_or_default())
                .collect();
            if !shorts.contains(&c) {
                problems.push(format!("{name}: short -{c} missing"));
            }
        }
        let flag = matches!(
            arg.get_action(),
            ArgAction::SetTrue | ArgAction::Count | ArgAction::Help | ArgAction::Version
        );
        let range = arg.get_num_args().unwrap_or_default();
        let ok = match row.arity {
            Arity::None => flag,
            Arity::Required => !flag && range.min_values() >= 1,
            Arity::Optional => !flag && range.min_values() == 0 && arg.is_require_equals_set(),
        };
        if !ok {
            problems.push(format!(
                "{name}: takes a value differently from Slurm ({:?}; an optional value must need '=')",
                row.arity
            ));
        }
        if row.status == Status::Implemented {
            match row.note.strip_prefix("test: ") {
                None => problems.push(format!("{name}: implemented, but its note names no test")),
                Some(list) => {
                    for t in list.split(", ") {
                        if !known.contains(t) {
                            problems.push(format!("{name}: its test {t} does not exist"));
                        }
                    }
                }
            }
        }
    }
    for arg in &args {
        let Some(long) = arg.get_long() else { continue };
        let listed = table(tool)
            .iter()
            .any(|r| r.long == long || arg.get_all_aliases().is_some_and(|v| v.contains(&r.long)));
        if !listed && !gsched_only.contains(&long) {
            problems.push(format!(
                "{} --{long}: accepted but not in Slurm's table nor gsched's own",
                tool.name()
            ));
        }
    }
    problems
}

#[test]
fn gsub_answers_to_every_sbatch_option_as_the_table_says() {
    let problems = check(
        Tool::Sbatch,
        gsched_cli::sbatch::SubArgs::command(),
        &[
            "torchrun",
            "torchrun-args",
            "launch",
            "max-restarts",
            "dry-run",
            "json",
            "controllers",
        ],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn grun_answers_to_every_srun_option_as_the_table_says() {
    let problems = check(
        Tool::Srun,
        gsched_cli::grun::RunArgs::command(),
        &["controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn galloc_answers_to_every_salloc_option_as_the_table_says() {
    let problems = check(
        Tool::Salloc,
        gsched_cli::galloc::AllocArgs::command(),
        &["controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn gqueue_answers_to_every_squeue_option_as_the_table_says() {
    let problems = check(
        Tool::Squeue,
        gsched_cli::args::gqueue::Args::command(),
        &["stale-ok", "controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn gacct_answers_to_every_sacct_option_as_the_table_says() {
    let problems = check(
        Tool::Sacct,
        gsched_cli::args::gacct::Args::command(),
        &["attempts", "csv", "eff", "controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn ginfo_answers_to_every_sinfo_option_as_the_table_says() {
    let problems = check(
        Tool::Sinfo,
        gsched_cli::args::ginfo::Args::command(),
        &["topo", "health", "controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn gcancel_answers_to_every_scancel_option_as_the_table_says() {
    let problems = check(
        Tool::Scancel,
        gsched_cli::args::gcancel::Args::command(),
        &["controllers"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn scontrol_answers_to_every_option_before_its_command_as_the_table_says() {
    let problems = check(
        Tool::Scontrol,
        gsched_cli::args::scontrol::Args::command(),
        &[],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The variables a step's task has only when its caller had them are srun's input
/// variables (the table's env column) less those srun and slurmstepd set themselves
/// (Slurm 22.05's env.c `setup_env`, listed here from its source).
#[test]
fn a_steps_caller_only_variables_are_sruns_inputs_that_slurm_does_not_set_itself() {
    const SETUP_ENV_SETS: &[&str] = &[
        "SLURMD_DEBUG",
        "SLURM_CONF",
        "SLURM_CONF_SERVER",
        "SLURM_CPUS_ON_NODE",
        "SLURM_CPUS_PER_TASK",
        "SLURM_CPU_BIND",
        "SLURM_CPU_BIND_LIST",
        "SLURM_CPU_BIND_TYPE",
        "SLURM_CPU_BIND_VERBOSE",
        "SLURM_CPU_FREQ_REQ",
        "SLURM_DISTRIBUTION",
        "SLURM_DIST_PLANESIZE",
        "SLURM_GTIDS",
        "SLURM_JOBID",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_QOS",
        "SLURM_JOB_RESERVATION",
        "SLURM_JOB_UID",
        "SLURM_JOB_USER",
        "SLURM_LABELIO",
        "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_LOCALID",
        "SLURM_MEM_BIND",
        "SLURM_MEM_BIND_LIST",
        "SLURM_MEM_BIND_PREFER",
        "SLURM_MEM_BIND_SORT",
        "SLURM_MEM_BIND_TYPE",
        "SLURM_MEM_BIND_VERBOSE",
        "SLURM_NNODES",
        "SLURM_NODEID",
        "SLURM_NODELIST",
        "SLURM_NPROCS",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_CORE",
        "SLURM_NTASKS_PER_GPU",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_NTASKS_PER_SOCKET",
        "SLURM_NTASKS_PER_TRES",
        "SLURM_OVERCOMMIT",
        "SLURM_PROCID",
        "SLURM_PTY_PORT",
        "SLURM_PTY_WIN_COL",
        "SLURM_PTY_WIN_ROW",
        "SLURM_RESTART_COUNT",
        "SLURM_SRUN_COMM_PORT",
        "SLURM_STEPID",
        "SLURM_STEP_ID",
        "SLURM_TASKS_PER_NODE",
        "SLURM_TASK_PID",
        "SLURM_THREADS_PER_CORE",
        "SLURM_WORKING_CLUSTER",
    ];
    let mut derived: Vec<&str> = table(Tool::Srun)
        .iter()
        .flat_map(|o| o.env.iter().copied())
        .filter(|v| !SETUP_ENV_SETS.contains(v))
        .collect();
    derived.sort_unstable();
    derived.dedup();
    let mut listed = gsched_launch::plan::CALLER_ONLY_VARS.to_vec();
    listed.sort_unstable();
    assert_eq!(listed, derived);
}
