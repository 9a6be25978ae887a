//! A tool's parsed options written back as words: which options a source set, as
//! canonical `--long=VALUE` / `--flag` words (so nothing of one source can become a value
//! of another), and the words of a tool's input environment variables (Slurm's table).

use crate::slurm_options::{self, Arity, Tool};
use clap::ArgMatches;
use clap::parser::ValueSource;
use std::collections::BTreeMap;

/// The long names of the options `m` got from the command line it parsed.
pub fn given_longs(cmd: &clap::Command, m: &ArgMatches) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| m.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// The options `m` got, as canonical words in `cmd`'s order; `keep` chooses by long name.
pub fn canonical(cmd: &clap::Command, m: &ArgMatches, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if m.value_source(id) != Some(ValueSource::CommandLine) || !keep(long) {
            continue;
        }
        match arg.get_action() {
            clap::ArgAction::SetTrue => out.push(format!("--{long}")),
            clap::ArgAction::Count => out.extend(std::iter::repeat_n(
                format!("--{long}"),
                m.get_count(id).into(),
            )),
            _ => {
                for v in m.get_raw(id).into_iter().flatten() {
                    out.push(format!("--{long}={}", v.to_string_lossy()));
                }
            }
        }
    }
    out
}

/// The words `tool`'s input environment variables in `env` stand for (Slurm's table;
/// a flag's variable set to anything but empty, `yes` or a non-zero number is not set),
/// for the options `keep` chooses.
pub fn from_environment(
    tool: Tool,
    env: &BTreeMap<String, String>,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for row in slurm_options::table(tool) {
        if !keep(row.long) {
            continue;
        }
        for var in &row.env {
            let Some(v) = env
                .get(*var)
                .and_then(|v| slurm_options::env_value(row.arity, v))
            else {
                continue;
            };
            out.push(match row.arity {
                Arity::None => format!("--{}", row.long),
                _ => format!("--{}={v}", row.long),
            });
        }
    }
    out
}
