//! Checks of a job spec that no cluster state could make valid: counts in range, text
//! fields that are text (no control characters) and of sane size, the script,
//! environment and arrays within the configured limits. The controller runs them before
//! proposing a submission and `apply` runs them again, so nothing a client sends can grow
//! the state without bound or put unprintable text into every user's `gqueue`.

use gsched_scheduler::config::SubmitLimits;
use gsched_types::JobSpec;
use gsched_types::api::JobSelection;

/// Jobs one bulk action may name (`gcancel` of a whole queue's ids).
const MAX_NAMED_JOBS: usize = 1_000_000;

/// Upper bounds that keep arithmetic on a spec far from overflow.
const MAX_NODES: u32 = 4096;
const MAX_GPUS_PER_NODE: u32 = 64;
const MAX_TASKS_PER_NODE: u32 = 4096;
const MAX_CPUS_PER_TASK: u32 = 4096;
const MAX_LIST: usize = 4096;
/// Ten years: a time limit beyond it is a typo.
pub const MAX_TIME_S: u64 = gsched_types::parse::MAX_TIME_LIMIT_S;

/// Why a job spec or a bulk selection was refused; each message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Constraint(#[from] gsched_types::constraint::ConstraintError),
    #[error("{what} is {len} bytes long; the limit is {max}")]
    TooLong { what: String, len: usize, max: u64 },
    #[error("{what} contains a control character ({found:?}); use printable text")]
    ControlCharacter { what: String, found: char },
    #[error("{what} names {count} entries; at most {MAX_LIST} are allowed")]
    TooManyEntries { what: String, count: usize },
    #[error("{what} must be between {lo} and {hi} (got {got})")]
    OutOfRange {
        what: &'static str,
        lo: u32,
        hi: u32,
        got: u32,
    },
    #[error("--ntasks={ntasks} does not fit --nodes={nodes} x --ntasks-per-node={per_node}")]
    TasksDoNotFit {
        ntasks: u32,
        nodes: u32,
        per_node: u32,
    },
    #[error("--cpus-per-gpu and --gpus-per-task must be sensible counts")]
    GpuCounts,
    #[error("the time limit is over ten years; use --time=UNLIMITED for none")]
    TimeLimit,
    #[error("--signal needs a signal 1-64 and at most 65535 seconds")]
    Signal,
    #[error("--nice must be between -10000 and 10000")]
    Nice,
    #[error("the job has no user")]
    NoUser,
    #[error("working directory '{0}' must be absolute")]
    RelativeWorkdir(String),
    #[error("--dependency names more than {MAX_LIST} jobs")]
    TooManyDependencies,
    #[error("the batch script is empty")]
    EmptyScript,
    #[error(
        "the batch script is {len} bytes; the limit is {max} (put data in files the script reads)"
    )]
    ScriptTooLarge { len: usize, max: u64 },
    #[error("environment variable {0:?} is not a NAME=VALUE pair a process can receive")]
    Environment(String),
    #[error("an argument contains a NUL byte")]
    NulInArgument,
    #[error(
        "the environment and arguments take {bytes} bytes; the limit is {max} (use --export=NONE or fewer variables)"
    )]
    EnvironmentTooLarge { bytes: u64, max: u64 },
    #[error("--array names no task")]
    ArrayEmpty,
    #[error(
        "--array task {task} is over the cluster's limit: task ids must be below {max} (MaxArraySize)"
    )]
    ArrayTaskTooHigh { task: u32, max: u32 },
    #[error("--array asks for {tasks} tasks; at most {max} (MaxArraySize)")]
    ArrayTooLarge { tasks: usize, max: u32 },
    #[error("--array's %N must be at least 1")]
    ArrayLimitZero,
    #[error("--max-restarts is over 1000")]
    MaxRestarts,
    #[error(
        "--mail-user={0}: give an address or a user name, without spaces, not starting with '-'"
    )]
    MailUser(String),
    #[error("{0} jobs named; at most {MAX_NAMED_JOBS} in one request")]
    TooManyJobsNamed(usize),
}

/// Refuses text with control characters (newlines, tabs, NUL, escapes) or over `max`
/// bytes.
fn text(what: &str, value: &str, max: u64) -> Result<(), SpecError> {
    if value.len() as u64 > max {
        return Err(SpecError::TooLong {
            what: what.to_string(),
            len: value.len(),
            max,
        });
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(SpecError::ControlCharacter {
            what: what.to_string(),
            found: c,
        });
    }
    Ok(())
}

fn optional(what: &str, value: &Option<String>, max: u64) -> Result<(), SpecError> {
    value.as_deref().map_or(Ok(()), |v| text(what, v, max))
}

fn list(what: &str, values: &[String], max: u64) -> Result<(), SpecError> {
    if values.len() > MAX_LIST {
        return Err(SpecError::TooManyEntries {
            what: what.to_string(),
            count: values.len(),
        });
    }
    values.iter().try_for_each(|v| text(what, v, max))
}

/// Checks `spec` against `limits` and against values no node could satisfy.
/// [`job_spec`] and what a new submission must also meet (checked where a request
/// arrives, not in `apply`, so that jobs already in a log keep applying as they did):
/// `--constraint` in Slurm's grammar.
pub fn new_job_spec(spec: &JobSpec, limits: &SubmitLimits) -> Result<(), SpecError> {
    job_spec(spec, limits)?;
    if let Some(c) = &spec.constraint {
        gsched_types::constraint::Constraint::parse(c)?;
    }
    // The recipient is the mail program's argument: it must not read as an option.
    if let Some(to) = spec.mail.as_ref().and_then(|m| m.user.as_ref())
        && !gsched_types::notify::valid_recipient(to)
    {
        return Err(SpecError::MailUser(to.clone()));
    }
    Ok(())
}

/// A new job's names as Slurm records them: `--account` and `--wckey` lower case
/// (slurmctld's job_mgr.c: "anything that may be put in the database"), and `--qos`,
/// which Slurm looks up without regard to case, as its QOS records are stored.
pub fn in_slurm_case(spec: &mut JobSpec) {
    use gsched_types::assoc::slurm_case;
    for name in [&mut spec.account, &mut spec.wckey, &mut spec.qos] {
        *name = name.as_deref().map(slurm_case);
    }
}

/// Whether `spec` keeps within the cluster's limits (at submission, and again in `apply`
/// for each job of the log), the first broken rule as the error.
pub fn job_spec(spec: &JobSpec, limits: &SubmitLimits) -> Result<(), SpecError> {
    counts(spec)?;
    text_fields(spec, limits)?;
    payload(spec, limits)?;
    array(spec, limits)?;
    if spec.max_restarts.is_some_and(|m| m > 1000) {
        return Err(SpecError::MaxRestarts);
    }
    Ok(())
}

/// Node, task, CPU and GPU counts, the time limit, the signal and the nice value in range.
fn counts(spec: &JobSpec) -> Result<(), SpecError> {
    let counts = [
        ("--nodes", spec.nodes, 1, MAX_NODES),
        (
            "--ntasks-per-node",
            spec.ntasks_per_node,
            1,
            MAX_TASKS_PER_NODE,
        ),
        ("--cpus-per-task", spec.cpus_per_task, 1, MAX_CPUS_PER_TASK),
        ("GPUs per node", spec.gpus_per_node, 0, MAX_GPUS_PER_NODE),
    ];
    for (what, v, lo, hi) in counts {
        if v < lo || v > hi {
            return Err(SpecError::OutOfRange {
                what,
                lo,
                hi,
                got: v,
            });
        }
    }
    if spec.ntasks == 0 || spec.ntasks > spec.nodes * spec.ntasks_per_node {
        return Err(SpecError::TasksDoNotFit {
            ntasks: spec.ntasks,
            nodes: spec.nodes,
            per_node: spec.ntasks_per_node,
        });
    }
    if spec
        .cpus_per_gpu
        .is_some_and(|c| c == 0 || c > MAX_CPUS_PER_TASK)
        || spec.gpus_per_task.is_some_and(|g| g > MAX_GPUS_PER_NODE)
    {
        return Err(SpecError::GpuCounts);
    }
    if spec.time_limit_s.is_some_and(|t| t > MAX_TIME_S) {
        return Err(SpecError::TimeLimit);
    }
    if spec
        .signal
        .as_ref()
        .is_some_and(|w| !(1..=64).contains(&w.signal) || w.before_s > 65_535)
    {
        return Err(SpecError::Signal);
    }
    if !(-10_000..=10_000).contains(&spec.nice) {
        return Err(SpecError::Nice);
    }
    Ok(())
}

/// Names, paths and lists within the field limit; an absolute working directory.
fn text_fields(spec: &JobSpec, limits: &SubmitLimits) -> Result<(), SpecError> {
    text("the job name", &spec.name, limits.max_name_bytes)?;
    let field = limits.max_field_bytes;
    text("the user", &spec.user, field)?;
    if spec.user.is_empty() {
        return Err(SpecError::NoUser);
    }
    for (what, v) in [
        ("--account", &spec.account),
        ("--partition", &spec.partition),
        ("--qos", &spec.qos),
        ("--reservation", &spec.reservation),
        ("the GPU type", &spec.gpu_type),
        ("--constraint", &spec.constraint),
        ("--output", &spec.output),
        ("--error", &spec.error),
        ("--comment", &spec.comment),
        ("--wckey", &spec.wckey),
        ("--input", &spec.input),
        (
            "--mail-user",
            &spec.mail.as_ref().and_then(|m| m.user.clone()),
        ),
    ] {
        optional(what, v, field)?;
    }
    text("the working directory", &spec.workdir, field)?;
    text("the submit directory", &spec.submit_dir, field)?;
    if !spec.workdir.starts_with('/') {
        return Err(SpecError::RelativeWorkdir(spec.workdir.clone()));
    }
    list("--nodelist", &spec.nodelist, field)?;
    list("--exclude", &spec.exclude, field)?;
    if spec.dependency.len() > MAX_LIST {
        return Err(SpecError::TooManyDependencies);
    }
    Ok(())
}

/// The script, environment and arguments: present, free of NULs, within their limits.
fn payload(spec: &JobSpec, limits: &SubmitLimits) -> Result<(), SpecError> {
    if spec.script.is_empty() && spec.torchrun.is_none() {
        return Err(SpecError::EmptyScript);
    }
    if spec.script.len() as u64 > limits.max_script_bytes {
        return Err(SpecError::ScriptTooLarge {
            len: spec.script.len(),
            max: limits.max_script_bytes,
        });
    }
    let mut env_bytes: u64 = 0;
    for (k, v) in spec.env.iter().chain(spec.env_overrides.iter()) {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SpecError::Environment(k.clone()));
        }
        env_bytes += (k.len() + v.len()) as u64;
    }
    let mut args: Vec<&String> = spec.script_args.iter().collect();
    if let Some(t) = &spec.torchrun {
        text("the torchrun program", &t.program, limits.max_field_bytes)?;
        args.extend(t.args.iter().chain(t.extra_args.iter()));
    }
    for a in args {
        if a.contains('\0') {
            return Err(SpecError::NulInArgument);
        }
        env_bytes += a.len() as u64;
    }
    if env_bytes > limits.max_env_bytes {
        return Err(SpecError::EnvironmentTooLarge {
            bytes: env_bytes,
            max: limits.max_env_bytes,
        });
    }
    Ok(())
}

/// An array's task ids and throttle within the cluster's array limits.
fn array(spec: &JobSpec, limits: &SubmitLimits) -> Result<(), SpecError> {
    if let Some(ids) = &spec.array {
        let max = limits.max_array_size;
        if ids.is_empty() {
            return Err(SpecError::ArrayEmpty);
        }
        if let Some(too_big) = ids.iter().find(|i| **i >= max) {
            return Err(SpecError::ArrayTaskTooHigh {
                task: *too_big,
                max,
            });
        }
        if ids.len() > max as usize {
            return Err(SpecError::ArrayTooLarge {
                tasks: ids.len(),
                max,
            });
        }
        if spec.array_limit == Some(0) {
            return Err(SpecError::ArrayLimitZero);
        }
    }
    Ok(())
}

/// Checks a bulk action's selection: sizes only (what it matches is the state's business).
pub fn job_selection(select: &JobSelection, limits: &SubmitLimits) -> Result<(), SpecError> {
    if select.jobs.len() > MAX_NAMED_JOBS {
        return Err(SpecError::TooManyJobsNamed(select.jobs.len()));
    }
    list("user", &select.users, limits.max_field_bytes)?;
    list("node", &select.nodes, limits.max_field_bytes)?;
    optional("partition", &select.partition, limits.max_field_bytes)?;
    optional("job name", &select.name, limits.max_name_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_oversized_input_is_refused_with_the_field_named() {
        let limits = SubmitLimits::default();
        let ok = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
        assert!(job_spec(&ok, &limits).is_ok());
        type Change = Box<dyn Fn(&mut JobSpec)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|s| s.name = "a\nb".into()), "control character"),
            (
                Box::new(|s| s.name = "x".repeat(1 << 20)),
                "job name is 1048576 bytes",
            ),
            (
                Box::new(|s| s.script = "x".repeat(5 << 20)),
                "batch script is",
            ),
            (Box::new(|s| s.account = Some("a\tb".into())), "--account"),
            (Box::new(|s| s.output = Some("o\0".into())), "--output"),
            (
                Box::new(|s| {
                    s.env.insert("BIG".into(), "v".repeat(2 << 20));
                }),
                "environment and arguments",
            ),
            (
                Box::new(|s| s.array = Some((0..2000).collect())),
                "MaxArraySize",
            ),
            (Box::new(|s| s.array = Some(vec![5000])), "below 1001"),
            (Box::new(|s| s.nodes = 0), "--nodes"),
            (Box::new(|s| s.gpus_per_node = 1000), "GPUs per node"),
            (Box::new(|s| s.ntasks = 99), "does not fit"),
            (Box::new(|s| s.workdir = "rel".into()), "absolute"),
            (Box::new(|s| s.time_limit_s = Some(u64::MAX)), "ten years"),
            (
                Box::new(|s| {
                    s.signal = Some(gsched_types::job::WarnSignal {
                        signal: 0,
                        before_s: 60,
                        batch_only: false,
                    })
                }),
                "--signal",
            ),
        ];
        for (change, needle) in cases {
            let mut s = ok.clone();
            change(&mut s);
            let err = job_spec(&s, &limits).unwrap_err();
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn a_mail_user_that_reads_as_an_option_is_refused_at_submission() {
        let limits = SubmitLimits::default();
        let mut s = JobSpec::simple("j", "alice", "#!/bin/sh\ntrue\n");
        for (to, ok) in [("alice@lab.org", true), ("-oX", false), ("a b", false)] {
            s.mail = Some(gsched_types::notify::MailRequest {
                types: vec![gsched_types::notify::MailType::End],
                user: Some(to.into()),
            });
            assert_eq!(new_job_spec(&s, &limits).is_ok(), ok, "{to}");
        }
    }
}
