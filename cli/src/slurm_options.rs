//! Slurm's option tables as data: every option of sbatch, srun, salloc, squeue, sacct,
//! sinfo, scancel and scontrol (`cli/slurm-options/TOOL.tsv`, whose first four columns
//! `generate.py` takes from Slurm 22.05.8's own source), each with what gsched does with
//! it: acts on it as Slurm does (`implemented`, the note names the test that compares it
//! with Slurm), refuses it with a message that says what to do instead (`refused`), or
//! accepts it because it cannot change what a job sees or gets here (`no-effect`, the
//! note says why). `tests/option_tables.rs` holds the tools' definitions to the tables.

use std::sync::OnceLock;

/// A Slurm client program whose options the tables list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    Sbatch,
    Srun,
    Salloc,
    Squeue,
    Sacct,
    Sinfo,
    Scancel,
    Scontrol,
}

impl Tool {
    pub const ALL: [Tool; 8] = [
        Tool::Sbatch,
        Tool::Srun,
        Tool::Salloc,
        Tool::Squeue,
        Tool::Sacct,
        Tool::Sinfo,
        Tool::Scancel,
        Tool::Scontrol,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tool::Sbatch => "sbatch",
            Tool::Srun => "srun",
            Tool::Salloc => "salloc",
            Tool::Squeue => "squeue",
            Tool::Sacct => "sacct",
            Tool::Sinfo => "sinfo",
            Tool::Scancel => "scancel",
            Tool::Scontrol => "scontrol",
        }
    }

    fn tsv(self) -> &'static str {
        match self {
            Tool::Sbatch => include_str!("../slurm-options/sbatch.tsv"),
            Tool::Srun => include_str!("../slurm-options/srun.tsv"),
            Tool::Salloc => include_str!("../slurm-options/salloc.tsv"),
            Tool::Squeue => include_str!("../slurm-options/squeue.tsv"),
            Tool::Sacct => include_str!("../slurm-options/sacct.tsv"),
            Tool::Sinfo => include_str!("../slurm-options/sinfo.tsv"),
            Tool::Scancel => include_str!("../slurm-options/scancel.tsv"),
            Tool::Scontrol => include_str!("../slurm-options/scontrol.tsv"),
        }
    }
}

/// Whether an option takes a value, as getopt's table says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    None,
    Required,
    /// Only as `--name=VALUE` (or `-xVALUE`): a separate word is never the value.
    Optional,
}

/// What gsched does with an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Implemented,
    Refused,
    NoEffect,
}

/// One row of a tool's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmOption {
    pub long: &'static str,
    pub short: Option<char>,
    pub arity: Arity,
    /// Input environment variables that set it (sbatch, srun, salloc).
    pub env: Vec<&'static str>,
    pub status: Status,
    /// For `implemented`: `test: NAME[, NAME...]`, each a corpus script or a test
    /// function; otherwise the reason, or the message a refusal prints.
    pub note: &'static str,
}

/// A row the table's text does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("slurm-options/{tool}.tsv line {line}: {problem}")]
pub struct TableError {
    pub tool: &'static str,
    pub line: usize,
    pub problem: String,
}

fn parse(tool: Tool) -> Result<Vec<SlurmOption>, TableError> {
    let mut rows = Vec::new();
    for (n, line) in tool.tsv().lines().enumerate().skip(1) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |problem: String| TableError {
            tool: tool.name(),
            line: n + 1,
            problem,
        };
        let cells: Vec<&'static str> = line.split('\t').collect();
        let [long, short, arity, env, status, note] = cells[..] else {
            return Err(bad(format!("{} cells, not 6", cells.len())));
        };
        let mut short_chars = short.chars();
        let short = match (short_chars.next(), short_chars.next()) {
            (None, _) => None,
            (Some(c), None) => Some(c),
            _ => return Err(bad(format!("short option {short:?} is not one letter"))),
        };
        let arity = match arity {
            "none" => Arity::None,
            "required" => Arity::Required,
            "optional" => Arity::Optional,
            other => return Err(bad(format!("arity {other:?}"))),
        };
        let status = match status {
            "implemented" => Status::Implemented,
            "refused" => Status::Refused,
            "no-effect" => Status::NoEffect,
            other => return Err(bad(format!("--{long} has status {other:?}"))),
        };
        if note.trim().is_empty() {
            return Err(bad(format!("--{long} has no note")));
        }
        rows.push(SlurmOption {
            long,
            short,
            arity,
            env: env.split(',').filter(|v| !v.is_empty()).collect(),
            status,
            note,
        });
    }
    Ok(rows)
}

/// The table's rows, or what is wrong with its text.
pub fn try_table(tool: Tool) -> Result<Vec<SlurmOption>, TableError> {
    parse(tool)
}

/// The table of `tool` (its text is part of the build and checked by the tests).
pub fn table(tool: Tool) -> &'static [SlurmOption] {
    static TABLES: [OnceLock<Vec<SlurmOption>>; 8] = [const { OnceLock::new() }; 8];
    let i = Tool::ALL.iter().position(|t| *t == tool).expect("listed");
    TABLES[i].get_or_init(|| parse(tool).unwrap_or_else(|e| panic!("{e}")))
}

/// The row of `--long`.
pub fn lookup(tool: Tool, long: &str) -> Option<&'static SlurmOption> {
    table(tool).iter().find(|o| o.long == long)
}

/// The first of `given` (long names) that `tool`'s table refuses, with its message.
pub fn refusal<'a>(tool: Tool, given: impl IntoIterator<Item = &'a str>) -> Option<String> {
    given.into_iter().find_map(|long| {
        lookup(tool, long)
            .filter(|o| o.status == Status::Refused)
            .map(|o| format!("--{long} is not supported: {}", o.note))
    })
}

/// The long names of the options the command line of `m` (parsed by `cmd`) gave.
pub fn given_longs(cmd: &clap::Command, m: &clap::ArgMatches) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| {
            m.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine)
        })
        .filter_map(|a| a.get_long().map(String::from))
        .collect()
}

/// Parses `argv` as `A` (clap's own message and exit for what it cannot read), then
/// refuses, with the table's message and exit 1, the first option `tool`'s table
/// refuses; `allowed` are refused rows this command still takes (gsched's own meaning
/// under gsched's name, e.g. `--json`).
pub fn parse_or_refuse<A: clap::Parser>(
    tool: Tool,
    name: &str,
    argv: impl IntoIterator<Item = String>,
    allowed: &[&str],
) -> A {
    let cmd = A::command();
    let m = cmd.clone().get_matches_from(argv);
    let given = given_longs(&cmd, &m);
    let refusable = given
        .iter()
        .map(String::as_str)
        .filter(|l| !allowed.contains(l));
    if let Some(message) = refusal(tool, refusable) {
        crate::client::die(name, message);
    }
    A::from_arg_matches(&m).unwrap_or_else(|e| e.exit())
}

/// What an input environment variable holding `value` means for an option of `arity`:
/// the option's value, `Some("")` for a flag that is set, `None` for a flag that is not
/// (Slurm: a flag is set by an empty value, `yes` or a number other than 0).
pub fn env_value(arity: Arity, value: &str) -> Option<String> {
    match arity {
        Arity::None => {
            let set = value.is_empty()
                || value.eq_ignore_ascii_case("yes")
                || value.parse::<i64>().is_ok_and(|n| n != 0);
            set.then(String::new)
        }
        Arity::Required | Arity::Optional => Some(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_parses() {
        for tool in Tool::ALL {
            let rows = try_table(tool).unwrap_or_else(|e| panic!("{e}"));
            assert!(!rows.is_empty(), "{} has no rows", tool.name());
        }
    }

    #[test]
    fn flags_from_the_environment_read_as_slurm_reads_them() {
        for set in ["", "yes", "YES", "1", "-3"] {
            assert_eq!(env_value(Arity::None, set), Some(String::new()), "{set:?}");
        }
        for unset in ["no", "0", "true", "x"] {
            assert_eq!(env_value(Arity::None, unset), None, "{unset:?}");
        }
        assert_eq!(env_value(Arity::Required, "gpu"), Some("gpu".into()));
    }
}
