//! Option errors in the words of glibc's `getopt_long`, which Slurm's clients parse their
//! options with: an unrecognized or ambiguous long option (`--cpus` names two options),
//! a short option that is none, an option without its argument. Slurm's clients print
//! them with where to read more and exit 255, as they do for a value an option's own
//! parser refuses ("Invalid --time specification"); later checks exit 1.

use clap::Command;
use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The exit status of sbatch, srun and salloc for an option they cannot read.
pub const OPTION_ERROR_STATUS: i32 = 255;

/// `e` as getopt_long would have said it for `argv` (the words `cmd` parsed), or `None`
/// for an error getopt does not make (a conflict between two options, a bad value).
pub fn words(cmd: &Command, e: &clap::Error, argv: &[String]) -> Option<String> {
    let Some(ContextValue::String(invalid)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // Built, the command holds what clap adds itself (`--help`, `--version`).
    let mut cmd = cmd.clone();
    cmd.build();
    let cmd = &cmd;
    match e.kind() {
        ErrorKind::UnknownArgument => Some(unknown(cmd, invalid, argv)),
        ErrorKind::InvalidValue if matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty()) => {
            missing_argument(cmd, invalid, argv)
        }
        _ => None,
    }
}

/// What the tool prints for an option error: getopt's words, then where to read more.
pub fn report(tool: &str, words: &str) -> String {
    format!("{tool}: {words}\nTry \"{tool} --help\" for more information")
}

/// Prints [`report`] and exits with [`OPTION_ERROR_STATUS`].
pub fn fail(tool: &str, words: &str) -> ! {
    eprintln!("{}", report(tool, words));
    std::process::exit(OPTION_ERROR_STATUS)
}

/// Why srun's or salloc's options cannot be read: getopt's words, or a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    Grammar(String),
    Refused(String),
}

impl OptionError {
    /// `e` (from `cmd` parsing `argv`) in getopt's words where it has some.
    pub fn from_clap(cmd: &Command, e: &clap::Error, argv: &[String]) -> OptionError {
        match words(cmd, e, argv) {
            Some(w) => OptionError::Grammar(w),
            None => OptionError::Refused(e.to_string().trim_end().to_string()),
        }
    }

    /// Says it as `tool` (`srun`, `grun`...) would and exits: 255 for getopt's errors.
    pub fn exit(&self, tool: &str) -> ! {
        match self {
            OptionError::Grammar(w) => fail(tool, w),
            OptionError::Refused(m) => crate::client::die(tool, m),
        }
    }
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionError::Grammar(m) | OptionError::Refused(m) => f.write_str(m),
        }
    }
}

/// The argv word that `invalid` (clap's `--name` or `-c`) came from, value included, as
/// getopt quotes it.
fn word_of<'a>(invalid: &'a str, argv: &'a [String]) -> &'a str {
    argv.iter()
        .map(String::as_str)
        .find(|w| {
            *w == invalid
                || w.strip_prefix(invalid)
                    .is_some_and(|rest| rest.starts_with('='))
        })
        .unwrap_or(invalid)
}

/// The long names that `prefix` abbreviates, one per option (an option's aliases are one
/// option, as getopt counts entries with the same meaning once), sorted.
fn abbreviated(cmd: &Command, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long().into_iter();
            let aliases = a.get_all_aliases().into_iter().flatten();
            long.chain(aliases)
                .find(|name| name.starts_with(prefix))
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

fn unknown(cmd: &Command, invalid: &str, argv: &[String]) -> String {
    let Some(name) = invalid.strip_prefix("--") else {
        let c = invalid
            .trim_start_matches('-')
            .chars()
            .next()
            .unwrap_or('?');
        return format!("invalid option -- '{c}'");
    };
    let word = word_of(invalid, argv);
    let possible = abbreviated(cmd, name);
    if possible.len() > 1 {
        let list: String = possible.iter().map(|n| format!(" '--{n}'")).collect();
        format!("option '{word}' is ambiguous; possibilities:{list}")
    } else {
        format!("unrecognized option '{word}'")
    }
}

/// getopt's words for an option given last with no argument; `invalid` is clap's
/// rendering of the option (`--time <TIME>`).
fn missing_argument(cmd: &Command, invalid: &str, argv: &[String]) -> Option<String> {
    let long = invalid
        .strip_prefix("--")?
        .split([' ', '='])
        .next()
        .unwrap_or_default();
    let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long))?;
    let last = argv.last()?;
    if last.starts_with("--") {
        Some(format!("option '--{long}' requires an argument"))
    } else {
        let c = arg
            .get_short()
            .or_else(|| last.chars().last())
            .unwrap_or('?');
        Some(format!("option requires an argument -- '{c}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn sbatch_words(argv: &[&str]) -> Option<String> {
        let argv: Vec<String> = std::iter::once("sbatch")
            .chain(argv.iter().copied())
            .map(str::to_string)
            .collect();
        let cmd = crate::sbatch::SubArgs::command();
        let e = cmd.clone().try_get_matches_from(&argv).unwrap_err();
        words(&cmd, &e, &argv)
    }

    /// Each line as sbatch 22.05 printed it on this project's Slurm peer.
    #[test]
    fn sbatch_option_errors_read_as_slurms() {
        assert_eq!(
            sbatch_words(&["--cpus=16", "x.sh"]).unwrap(),
            "option '--cpus=16' is ambiguous; possibilities: '--cpus-per-gpu' '--cpus-per-task'"
        );
        assert_eq!(
            sbatch_words(&["--fooo=1", "--wrap", "true"]).unwrap(),
            "unrecognized option '--fooo=1'"
        );
        assert_eq!(
            sbatch_words(&["--time"]).unwrap(),
            "option '--time' requires an argument"
        );
        assert_eq!(
            sbatch_words(&["-Q", "-x"]).unwrap(),
            "option requires an argument -- 'x'"
        );
    }

    /// srun and salloc 22.05 on the peer printed these for the same command lines.
    #[test]
    fn srun_and_salloc_option_errors_read_as_slurms() {
        let env = std::collections::BTreeMap::new();
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let ambiguous =
            "option '--cpus=2' is ambiguous; possibilities: '--cpus-per-gpu' '--cpus-per-task'";
        let srun = crate::grun::run::parse(&argv(&["srun", "--cpus=2", "true"]), &env);
        assert_eq!(srun.unwrap_err(), OptionError::Grammar(ambiguous.into()));
        let salloc = crate::galloc::parse(&argv(&["salloc", "--cpus=2", "true"]), &env);
        assert_eq!(salloc.unwrap_err(), OptionError::Grammar(ambiguous.into()));
        let srun = crate::grun::run::parse(&argv(&["srun", "--fooo", "true"]), &env);
        assert_eq!(
            srun.unwrap_err(),
            OptionError::Grammar("unrecognized option '--fooo'".into())
        );
        assert_eq!(
            report("srun", ambiguous),
            format!("srun: {ambiguous}\nTry \"srun --help\" for more information")
        );
    }

    #[test]
    fn an_option_that_does_not_exist_in_short_form_is_an_invalid_option() {
        let w = sbatch_words(&["-y", "x.sh"]).unwrap();
        assert_eq!(w, "invalid option -- 'y'");
    }

    #[test]
    fn an_unambiguous_abbreviation_is_no_error() {
        let argv = ["sbatch", "--cpus-per-t=2", "x.sh"];
        let m = crate::sbatch::SubArgs::command().try_get_matches_from(argv);
        assert_eq!(m.unwrap().get_one::<String>("cpus_per_task").unwrap(), "2");
    }

    /// For every strict prefix of every long option of sbatch, srun and salloc: clap
    /// refuses it exactly when it names no option or more than one, which is when the
    /// words say it is ambiguous or unrecognized, as getopt_long decides.
    #[test]
    fn ambiguity_is_decided_as_the_parser_decides() {
        for (tool, cmd) in [
            ("sbatch", crate::sbatch::SubArgs::command()),
            ("srun", crate::grun::RunArgs::command()),
            ("salloc", crate::galloc::AllocArgs::command()),
        ] {
            let mut cmd = cmd;
            cmd.build();
            let names: Vec<String> = cmd
                .get_arguments()
                .flat_map(|a| {
                    let aliases = a.get_all_aliases().into_iter().flatten();
                    a.get_long().into_iter().chain(aliases).map(str::to_string)
                })
                .collect();
            for name in &names {
                for end in 1..name.len() {
                    let prefix = &name[..end];
                    let argv = vec![tool.to_string(), format!("--{prefix}=1")];
                    let refused = match cmd.clone().try_get_matches_from(&argv) {
                        Err(e) => e.kind() == ErrorKind::UnknownArgument,
                        Ok(_) => false,
                    };
                    let exact = names.iter().any(|n| n == prefix);
                    let matches = abbreviated(&cmd, prefix).len();
                    assert_eq!(refused, !exact && matches != 1, "{tool} --{prefix}");
                    if refused {
                        let e = cmd.clone().try_get_matches_from(&argv).unwrap_err();
                        let w = words(&cmd, &e, &argv).unwrap();
                        assert!(w.contains(&format!("'--{prefix}=1'")), "{w}");
                        assert_eq!(w.contains("ambiguous"), matches > 1, "{w}");
                    }
                }
            }
        }
    }
}
