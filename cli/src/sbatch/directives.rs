//! `#SBATCH` (and gsched's own `#GSUB`) lines at the top of a batch script, read as
//! sbatch 22.05 reads them (`_opt_batch_script` and `get_argument` in its `opt.c`): a
//! directive starts in the first column; the header ends at the first line that is
//! neither blank nor a comment; every directive's words form one argument list.

/// A `#SBATCH` line (or quoted option text) that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectiveError {
    #[error("unbalanced quote in directive: {0}")]
    UnbalancedQuote(String),
    #[error("line {line}: {source}")]
    Line {
        line: usize,
        source: Box<DirectiveError>,
    },
    #[error(
        "line {line}: heterogeneous jobs (#SBATCH {word}) are not supported; submit each component as its own job (tie them with --dependency=after:JOBID)"
    )]
    Heterogeneous { line: usize, word: String },
}

/// Splits directive text into words as sbatch does: whitespace separates words, single
/// and double quotes group, a backslash takes the next character as it is (inside quotes
/// too), and an unquoted `#` ends the directive (the rest is a comment), even within a
/// word.
pub fn split_words(line: &str) -> Result<Vec<String>, DirectiveError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '#') => break,
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(DirectiveError::UnbalancedQuote(line.to_string()));
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The directive prefixes, each at the start of a line.
const PREFIXES: [&str; 2] = ["#SBATCH", "#GSUB"];

/// The header's lines that are directives: (line number from 1, prefix, the text after
/// it). The header ends at the first line that is neither blank nor, after leading
/// whitespace, a comment; an indented `#SBATCH` is a comment, as it is to sbatch.
fn directive_lines(script: &str) -> impl Iterator<Item = (usize, &'static str, &str)> {
    script
        .lines()
        .enumerate()
        .take_while(|(_, line)| {
            let t = line.trim_start();
            t.is_empty() || t.starts_with('#')
        })
        .filter_map(|(n, line)| {
            PREFIXES
                .iter()
                .find_map(|p| line.strip_prefix(p).map(|rest| (n + 1, *p, rest)))
        })
}

/// Whether the script's header has `#SBATCH` lines: a script written for Slurm, which
/// runs once on the first node (see `--launch`).
pub fn has_sbatch_lines(script: &str) -> bool {
    directive_lines(script).any(|(_, prefix, _)| prefix == "#SBATCH")
}

/// Every directive's words in order, one argument list (sbatch hands them to getopt
/// together, so an option that needs a value may take the next line's first word).
pub fn directives(script: &str) -> Result<Vec<String>, DirectiveError> {
    let mut out = Vec::new();
    for (line, _, rest) in directive_lines(script) {
        let words = split_words(rest).map_err(|e| DirectiveError::Line {
            line,
            source: Box::new(e),
        })?;
        if let Some(first) = words.first()
            && (first.eq_ignore_ascii_case("hetjob") || first.eq_ignore_ascii_case("packjob"))
        {
            return Err(DirectiveError::Heterogeneous {
                line,
                word: first.clone(),
            });
        }
        out.extend(words);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_as_sbatch_splits_them() {
        let w = |s: &str| split_words(s).unwrap();
        assert_eq!(
            w(" -N 2 --job-name='my job'"),
            ["-N", "2", "--job-name=my job"]
        );
        assert_eq!(
            w("--comment=a#b c"),
            ["--comment=a"],
            "an unquoted # ends the line"
        );
        assert_eq!(w("--comment='a#b' c"), ["--comment=a#b", "c"]);
        assert_eq!(
            w(r#"-J 'it\'s'"#),
            ["-J", "it's"],
            "a backslash escapes in quotes too"
        );
        assert_eq!(w(r"-J a\ b"), ["-J", "a b"]);
        assert!(split_words("-J 'open").is_err());
    }

    #[test]
    fn the_header_is_read_as_sbatch_reads_it() {
        let script = "#!/bin/bash -l\n#SBATCH--nodes=3\n#SBATCH\t-J x # name\n  #SBATCH -p indented\n\n# plain\n#GSUB --time=5\necho hi\n#SBATCH -N 9\n";
        assert_eq!(
            directives(script).unwrap(),
            ["--nodes=3", "-J", "x", "--time=5"],
            "no space needed after the prefix; an indented one is a comment; none after a command"
        );
        assert!(has_sbatch_lines(script));
        assert!(!has_sbatch_lines("#!/bin/sh\n  #SBATCH -N 2\nhostname\n"));
        assert!(!has_sbatch_lines("#!/bin/sh\nhostname\n#SBATCH -N 2\n"));
    }

    #[test]
    fn a_heterogeneous_job_is_named() {
        let e = directives("#!/bin/sh\n#SBATCH -N 1\n#SBATCH hetjob\n").unwrap_err();
        assert_eq!(
            e,
            DirectiveError::Heterogeneous {
                line: 3,
                word: "hetjob".into()
            }
        );
    }
}
