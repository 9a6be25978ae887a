//! `#SBATCH` and `#GSUB` lines at the top of a batch script, split into words as a shell
//! would split them.

/// Splits a directive line into words with shell-like quoting; a word starting with `#`
/// ends the directive (a trailing comment).
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

pub fn split_words(line: &str) -> Result<Vec<String>, DirectiveError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '#') if !in_word => break,
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

/// `#SBATCH`/`#GSUB` directive words, read from the top of the script up to the first
/// command, as sbatch does.
/// Whether the script's header has `#SBATCH` lines: a script written for Slurm, which
/// runs once on the first node (see `--launch`).
pub fn has_sbatch_lines(script: &str) -> bool {
    for (n, line) in script.lines().enumerate() {
        let t = line.trim();
        if (n == 0 && t.starts_with("#!")) || t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            return false;
        }
        if let Some(rest) = t.strip_prefix("#SBATCH")
            && (rest.starts_with(char::is_whitespace) || rest.is_empty())
        {
            return true;
        }
    }
    false
}

pub fn directives(script: &str) -> Result<Vec<String>, DirectiveError> {
    let mut out = Vec::new();
    for (n, line) in script.lines().enumerate() {
        let t = line.trim();
        if n == 0 && t.starts_with("#!") {
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        for prefix in ["#SBATCH", "#GSUB"] {
            if let Some(rest) = t.strip_prefix(prefix)
                && (rest.starts_with(char::is_whitespace) || rest.is_empty())
            {
                let words = split_words(rest).map_err(|e| DirectiveError::Line {
                    line: n + 1,
                    source: Box::new(e),
                })?;
                if matches!(
                    words.first().map(String::as_str),
                    Some("hetjob" | "packjob")
                ) {
                    return Err(DirectiveError::Heterogeneous {
                        line: n + 1,
                        word: words[0].clone(),
                    });
                }
                out.extend(words);
            }
        }
    }
    Ok(out)
}
