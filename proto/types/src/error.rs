//! `InputError`: why a value a user typed (a flag, a `#SBATCH` line, a hostlist, a
//! job id) was refused, with the accepted forms in its message.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputError {
    #[error("invalid time limit '{0}': use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")]
    TimeLimit(String),
    #[error(
        "time limit '{0}' is longer than ten years (3650-00:00:00, the longest gsched keeps); use UNLIMITED for no limit"
    )]
    TimeLimitTooLong(String),
    #[error("invalid memory size '{0}': use a number of megabytes or a K/M/G/T suffix, e.g. 64G")]
    MemorySize(String),
    #[error("unknown generic resource '{resource}' in --gres={text}: only 'gpu' is supported")]
    UnknownGres { resource: String, text: String },
    #[error("invalid --gres '{0}': use gpu[:type]:count, e.g. gpu:a100:8")]
    Gres(String),
    #[error("--gres={0} names gpu twice")]
    GresTwice(String),
    #[error("{flag} must not be negative (got '{text}')")]
    Negative { flag: String, text: String },
    #[error("{flag} needs a whole number (got '{text}')")]
    NotWholeNumber { flag: String, text: String },
    #[error("invalid --array '{0}': use e.g. 0-15, 1,3,5, 0-20:5 or 0-15%4")]
    Array(String),
    #[error("--array '{text}' asks for {tasks} tasks; at most 10000 are allowed")]
    ArrayTooLarge { text: String, tasks: usize },
    #[error("--array '{0}' asks for too many tasks; at most 10000 are allowed")]
    ArrayFarTooLarge(String),
    #[error(
        "invalid --dependency '{0}': use afterok:ID[:ID...], afterany:ID, afternotok:ID, after:ID or singleton"
    )]
    Dependency(String),
    #[error("--dependency '{0}': '?' (any-of) dependencies are not supported; use ',' (all-of)")]
    DependencyAnyOf(String),
    #[error("signal {0} is not a signal number (1-64)")]
    SignalNumber(i32),
    #[error("unknown signal '{0}' (use a name such as USR1 or a number)")]
    SignalName(String),
    #[error(
        "invalid --switches '{0}': use COUNT[@MAX-TIME], e.g. 1 or 1@2:00:00 (COUNT at least 1; @0 does not wait)"
    )]
    Switches(String),
    #[error("--signal={0}: the time after @ must be seconds (0-65535)")]
    WarnSignalTime(String),
    #[error("--signal={text}: {source}")]
    WarnSignal {
        text: String,
        source: Box<InputError>,
    },
    #[error("--open-mode={0}: use append or truncate")]
    OpenMode(String),
    #[error("invalid job id '{0}': use a number like 123 or 120_3")]
    JobId(String),
    #[error("unknown grouping '{0}': use user, account, partition, node or gpu-model")]
    ReportGroup(String),
    #[error("reservation flag '{0}' is not supported (gsched knows MAINT and IGNORE_JOBS)")]
    ReservationFlag(String),
    #[error("'{0}' is not a number (or -1 to clear the limit)")]
    Limit(String),
    #[error("{0}")]
    Hostlist(#[from] HostlistError),
    #[error("{0}")]
    CpuList(#[from] CpuListError),
    #[error("{0}")]
    Step(#[from] StepLayoutError),
}

/// A hostlist expression (`node[01-04]`) that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostlistError {
    #[error("unbalanced ']' in hostlist '{0}'")]
    UnbalancedClose(String),
    #[error("unbalanced '[' in hostlist '{0}'")]
    UnbalancedOpen(String),
    #[error("bad range '{0}' in hostlist")]
    Range(String),
    #[error("hostlist '{0}' names more than {max} hosts", max = crate::hostlist::MAX_HOSTS)]
    TooMany(String),
}

/// A Linux cpulist or affinity mask that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("bad CPU range '{0}'")]
    Range(String),
    #[error("bad CPU id '{0}'")]
    Id(String),
    #[error("cpulist '{0}' names too many CPUs")]
    TooMany(String),
    #[error("bad CPU mask '{0}'")]
    Mask(String),
}

/// A job step (`srun` inside an allocation) that cannot be laid out on the job's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StepLayoutError {
    #[error("node {node} is not one of the job's nodes ({job_nodes})")]
    ForeignNode { node: String, job_nodes: String },
    #[error("-N {asked} asks for more nodes than the {available} available to this step")]
    TooManyNodes { asked: u32, available: usize },
    #[error("the step has no node to run on")]
    NoNode,
    #[error("{0} tasks is more than a step may start ({max})", max = crate::steps::MAX_STEP_TASKS)]
    TooManyTasks(String),
    /// slurmctld's ESLURM_TOO_MANY_REQUESTED_CPUS, in its words (srun prints them after
    /// "Unable to create step for job N: ").
    #[error("More processors requested than permitted")]
    TooManyCpus { asked: u64, held: u64 },
}

/// Lets code that still reports plain text (the CLI's argument handling) use `?` on the
/// typed parsers.
macro_rules! into_text {
    ($($t:ty),*) => {$(
        impl From<$t> for String {
            fn from(e: $t) -> String {
                e.to_string()
            }
        }
    )*};
}
into_text!(InputError, HostlistError, CpuListError, StepLayoutError);
