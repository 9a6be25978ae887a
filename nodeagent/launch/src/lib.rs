//! Pure launch logic for the node agent: the environment each task gets ([`env`]), the
//! torchrun command line ([`torchrun`]), output-file patterns ([`output`]), the CPUs each
//! task is bound to ([`binding`]), the whole
//! supervisor plan of a node run with its cgroup limits and device nodes ([`plan`]) and the
//! classification of failures from exit statuses, torchrun error files and log lines
//! ([`watch`], with Python tracebacks read as a class by [`traceback`]). No processes are
//! started here; the agent does that.

pub mod binding;
pub mod catalog;
pub mod env;
pub mod output;
pub mod plan;
pub mod torchrun;
pub mod traceback;
pub mod transport;
pub mod watch;

pub use env::{NetPlan, TaskEnv, add_cluster_tools, net_plan, task_env};
pub use watch::{LogFinding, classify_exit, classify_line};
