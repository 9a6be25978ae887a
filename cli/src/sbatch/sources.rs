//! Where `gsub`'s options come from and which one wins, as sbatch decides: the script's
//! directives first, then the input environment variables (`SBATCH_*`, from Slurm's
//! table), then the command line; a later source overrides an earlier one option by
//! option. Each source is parsed on its own and written back as canonical words
//! (`--long=VALUE`, `--flag`), so nothing of one source can become a value or the script
//! of another: an option with an optional value never takes a word that follows it.

use super::flags::SubArgs;
use crate::slurm_options::{self, Arity, Tool};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches};
use std::collections::BTreeMap;

/// Why the options cannot be read; each message says which source and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// A directive word that is not an option (sbatch: "Invalid directive found in batch
    /// script").
    #[error(
        "invalid directive found in batch script: {0:?} (each #SBATCH word must be an option or its value; is a dash typographic?)"
    )]
    NotAnOption(String),
    #[error("invalid #SBATCH directive: {0}")]
    Directive(String),
    #[error("environment variable {var}: {message}")]
    Environment { var: String, message: String },
    #[error("{0}")]
    CommandLine(String),
    #[error("{0}")]
    Refused(String),
    /// An option getopt_long could not read, in its words (`crate::getopt`).
    #[error("{0}")]
    Grammar(String),
}

impl SourceError {
    /// The status `gsub` exits with: sbatch's 255 for options it cannot read, wherever
    /// they come from; 1 for an option gsched refuses to act on.
    pub fn exit_status(&self) -> i32 {
        match self {
            SourceError::Refused(_) => 1,
            _ => crate::getopt::OPTION_ERROR_STATUS,
        }
    }
}

/// `e` in getopt's words where it has some, else as `otherwise` says it.
fn grammar_or(
    e: &clap::Error,
    argv: &[String],
    otherwise: impl FnOnce(String) -> SourceError,
) -> SourceError {
    match crate::getopt::words(&SubArgs::command(), e, argv) {
        Some(words) => SourceError::Grammar(words),
        None => otherwise(clap_message(e)),
    }
}

/// The first line of clap's message, without its "error: " prefix.
fn clap_message(e: &clap::Error) -> String {
    e.to_string()
        .trim_start_matches("error: ")
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Parses `words` (options only) as one source; `why` says what clap's error means for
/// that source where getopt has no words for it.
fn parse_options(
    words: &[String],
    why: impl FnOnce(String) -> SourceError,
) -> Result<ArgMatches, SourceError> {
    let argv: Vec<String> = std::iter::once("gsub".to_string())
        .chain(words.iter().cloned())
        .collect();
    SubArgs::command()
        .try_get_matches_from(&argv)
        .map_err(|e| grammar_or(&e, &argv, why))
}

/// The options a source set, as canonical words in the command's order.
fn canonical(m: &ArgMatches) -> Vec<String> {
    let cmd = SubArgs::command();
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if m.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue => out.push(format!("--{long}")),
            ArgAction::Count => out.extend(std::iter::repeat_n(
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

/// The words of `--long`'s positional script argument, if any were parsed.
fn stray(m: &ArgMatches) -> Option<String> {
    m.get_many::<String>("script")
        .and_then(|mut v| v.next())
        .cloned()
}

/// The directives' options as canonical words.
pub fn from_directives(words: &[String]) -> Result<Vec<String>, SourceError> {
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let m = parse_options(words, SourceError::Directive)?;
    if let Some(word) = stray(&m) {
        return Err(SourceError::NotAnOption(word));
    }
    Ok(canonical(&m))
}

/// The options sbatch reads from `env` (each variable of Slurm's table), as canonical
/// words; a flag variable set to anything but an empty value, `yes` or a non-zero number
/// is not set, as in sbatch.
pub fn from_environment(env: &BTreeMap<String, String>) -> Result<Vec<String>, SourceError> {
    let mut out = Vec::new();
    for row in slurm_options::table(Tool::Sbatch) {
        for var in &row.env {
            let Some(value) = env.get(*var) else { continue };
            let Some(v) = slurm_options::env_value(row.arity, value) else {
                continue;
            };
            let word = match row.arity {
                Arity::None => format!("--{}", row.long),
                _ => format!("--{}={v}", row.long),
            };
            let in_var = |message| SourceError::Environment {
                var: var.to_string(),
                message,
            };
            let m = parse_options(std::slice::from_ref(&word), in_var).map_err(|e| match e {
                SourceError::Grammar(words) => in_var(words),
                e => e,
            })?;
            out.extend(canonical(&m));
        }
    }
    Ok(out)
}

/// The options of every source merged, later sources winning; `command_line` is the
/// whole argv (its first word the program's name).
pub fn merge(
    directives: &[String],
    env: &BTreeMap<String, String>,
    command_line: &[String],
) -> Result<SubArgs, SourceError> {
    let mut argv = vec!["gsub".to_string()];
    argv.extend(from_directives(directives)?);
    argv.extend(from_environment(env)?);
    argv.extend(command_line.iter().skip(1).cloned());
    let m = SubArgs::command()
        .try_get_matches_from(&argv)
        .map_err(|e| grammar_or(&e, &argv, SourceError::CommandLine))?;
    let args =
        SubArgs::from_arg_matches(&m).map_err(|e| SourceError::CommandLine(clap_message(&e)))?;
    let given = canonical(&m);
    let longs = given
        .iter()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.split('=').next().unwrap_or(w));
    if let Some(message) = slurm_options::refusal(Tool::Sbatch, longs) {
        return Err(SourceError::Refused(message));
    }
    Ok(args)
}

/// Whether the command line asks for `--dry-run` or `--test-only` among its options
/// (before the script): such a run must never submit, whatever else the sources hold. A
/// command line that does not parse on its own counts as asking (it submits nothing
/// either way).
pub fn asks_not_to_submit(command_line: &[String]) -> bool {
    match SubArgs::command().try_get_matches_from(command_line) {
        Ok(m) => m.get_flag("dry_run") || m.get_flag("test_only"),
        Err(_) => true,
    }
}

/// What a run of `gsub` does with the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Print the resolved request; submit nothing.
    DryRun,
    /// Ask where and when it would start; submit nothing.
    TestOnly,
    Submit,
}

/// The options of the script's directives (`script`: the script's text, if any), the
/// environment and the command line merged, and what to do: a command line that asks
/// for `--dry-run` or `--test-only` never yields `Submit`.
pub fn read(
    command_line: &[String],
    script: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Result<(SubArgs, Action), SourceError> {
    let directives = match script {
        Some(text) => super::directives(text).map_err(|e| SourceError::Directive(e.to_string()))?,
        None => Vec::new(),
    };
    let args = merge(&directives, env, command_line)?;
    let action = if args.dry_run {
        Action::DryRun
    } else if args.test_only {
        Action::TestOnly
    } else if asks_not_to_submit(command_line) {
        return Err(SourceError::CommandLine(
            "--dry-run or --test-only was given but did not survive reading the options; nothing was submitted".into(),
        ));
    } else {
        Action::Submit
    };
    Ok((args, action))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn argv(words: &[&str]) -> Vec<String> {
        std::iter::once("gsub")
            .chain(words.iter().copied())
            .map(String::from)
            .collect()
    }

    fn no_env() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn an_optional_value_never_takes_the_next_word_or_the_script() {
        let script = "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --exclusive\necho hi\n";
        let (args, action) = read(&argv(&["x.sh"]), Some(script), &no_env()).unwrap();
        assert_eq!(args.exclusive.as_deref(), Some("node"));
        assert_eq!(args.script, ["x.sh"]);
        assert_eq!(action, Action::Submit);
        let e = read(
            &argv(&["x.sh"]),
            Some("#SBATCH --exclusive user\n"),
            &no_env(),
        );
        assert_eq!(e.unwrap_err(), SourceError::NotAnOption("user".into()));
    }

    #[test]
    fn a_directive_that_is_not_an_option_is_refused_even_in_a_dry_run() {
        let script = "#!/bin/bash\n#SBATCH \u{2013}gres=gpu:8\necho hi\n";
        let e = read(&argv(&["--dry-run", "x.sh"]), Some(script), &no_env()).unwrap_err();
        assert!(matches!(e, SourceError::NotAnOption(w) if w.starts_with('\u{2013}')));
    }

    /// As sbatch 22.05 on the Slurm peer: a directive getopt cannot read is reported in
    /// getopt's words and exits 255, as on the command line; a refused option exits 1.
    #[test]
    fn options_that_cannot_be_read_exit_as_sbatchs_do() {
        let script = "#!/bin/bash\n#SBATCH --cpus=16\ntrue\n";
        let e = read(&argv(&["x.sh"]), Some(script), &no_env()).unwrap_err();
        assert_eq!(
            e,
            SourceError::Grammar(
                "option '--cpus=16' is ambiguous; possibilities: '--cpus-per-gpu' '--cpus-per-task'"
                    .into()
            )
        );
        assert_eq!(e.exit_status(), 255);
        let e = read(&argv(&["--fooo=1", "x.sh"]), None, &no_env()).unwrap_err();
        assert_eq!(
            e,
            SourceError::Grammar("unrecognized option '--fooo=1'".into())
        );
        let typo = "#!/bin/bash\n#SBATCH \u{2013}gres=gpu:8\n";
        let e = read(&argv(&["x.sh"]), Some(typo), &no_env()).unwrap_err();
        assert_eq!(e.exit_status(), 255);
        let e = read(&argv(&["--bb=x", "x.sh"]), None, &no_env()).unwrap_err();
        assert!(matches!(e, SourceError::Refused(_)), "{e:?}");
        assert_eq!(e.exit_status(), 1);
    }

    #[test]
    fn the_command_line_beats_the_environment_which_beats_the_script() {
        let script = "#SBATCH -p fromscript -J fromscript\n#SBATCH -t 5\n";
        let env = BTreeMap::from([
            ("SBATCH_PARTITION".to_string(), "fromenv".to_string()),
            ("SBATCH_JOB_NAME".to_string(), "fromenv".to_string()),
            ("SBATCH_REQUEUE".to_string(), "yes".to_string()),
        ]);
        let (a, _) = read(&argv(&["-J", "cli", "x.sh"]), Some(script), &env).unwrap();
        assert_eq!(a.partition.as_deref(), Some("fromenv"));
        assert_eq!(a.job_name.as_deref(), Some("cli"));
        assert_eq!(a.time.as_deref(), Some("5"));
        assert!(a.requeue);
        let env = BTreeMap::from([("SBATCH_REQUEUE".to_string(), "no".to_string())]);
        let (a, _) = read(&argv(&["x.sh"]), None, &env).unwrap();
        assert!(
            !a.requeue,
            "a flag variable set to anything else is not set"
        );
    }

    #[test]
    fn a_refused_option_names_what_to_do_instead() {
        let e = read(
            &argv(&["x.sh"]),
            Some("#SBATCH --bb=capacity=1G\n"),
            &no_env(),
        );
        assert!(matches!(e, Err(SourceError::Refused(m)) if m.contains("burst buffers")));
    }

    /// Words a directive or a command line may hold: options with and without values,
    /// optional values, words that are not options, quotes and comments.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("-N".to_string()),
            Just("2".to_string()),
            Just("--exclusive".to_string()),
            Just("--exclusive=user".to_string()),
            Just("--nice".to_string()),
            Just("--nice=5".to_string()),
            Just("-J".to_string()),
            Just("'a b'".to_string()),
            Just("--gres=gpu:2".to_string()),
            Just("\u{2013}gres=gpu:8".to_string()),
            Just("user".to_string()),
            Just("--no-kill".to_string()),
            Just("-k".to_string()),
            Just("#".to_string()),
            Just("--wrap".to_string()),
            Just("--".to_string()),
            Just("--dry-run".to_string()),
            Just("--test-only".to_string()),
            "[a-z]{1,6}".prop_map(String::from),
        ]
    }

    proptest! {
        #[test]
        fn a_dry_run_or_test_only_never_submits(
            lines in proptest::collection::vec(proptest::collection::vec(word(), 0..5), 0..4),
            before in proptest::collection::vec(word(), 0..4),
            ask in prop_oneof![Just("--dry-run"), Just("--test-only"), Just("--dry"), Just("--test-o")],
            after in proptest::collection::vec(word(), 0..4),
            script_args in proptest::collection::vec(word(), 0..3),
        ) {
            let mut script = String::from("#!/bin/bash\n");
            for l in &lines {
                script.push_str(&format!("#SBATCH {}\n", l.join(" ")));
            }
            script.push_str("echo hi\n");
            let mut cl: Vec<&str> = before.iter().map(String::as_str).collect();
            cl.push(ask);
            cl.extend(after.iter().map(String::as_str));
            cl.push("job.sh");
            cl.extend(script_args.iter().map(String::as_str));
            let command_line = argv(&cl);
            // The command line alone, as the user wrote it, asks not to submit (a word
            // before the flag may have ended the options: then it is a script argument).
            let asked = SubArgs::command()
                .try_get_matches_from(&command_line)
                .map_or(true, |m| m.get_flag("dry_run") || m.get_flag("test_only"));
            if let Ok((_, action)) = read(&command_line, Some(&script), &no_env())
                && asked
            {
                prop_assert_ne!(action, Action::Submit, "{:?} with {:?}", command_line, script);
            }
        }
    }
}
