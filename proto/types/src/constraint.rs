//! Slurm's `--constraint` grammar (`man sbatch`, `-C`): feature names joined by `&` (and;
//! `,` too, as gsched always read it) and `|` (or), grouped by parentheses; `[a|b]`, an
//! alternative every node of the job shares; `name*N`, at least N of the job's nodes
//! with the feature. `&` binds tighter than `|`.

use serde::{Deserialize, Serialize};

/// A parsed constraint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Constraint {
    Feature {
        name: String,
        count: Option<u32>,
    },
    And(Vec<Constraint>),
    Or(Vec<Constraint>),
    /// `[a|b|c]`: one of them, the same on every node.
    Matching(Vec<Constraint>),
}

/// Why a constraint does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    #[error(
        "--constraint {text:?}: {problem} at character {at}; write features as a&b, a|b, [a|b] or a*2"
    )]
    Syntax {
        text: String,
        problem: &'static str,
        at: usize,
    },
}

struct Parser<'a> {
    text: &'a str,
    chars: Vec<char>,
    at: usize,
}

impl Parser<'_> {
    fn fail<T>(&self, problem: &'static str) -> Result<T, ConstraintError> {
        Err(ConstraintError::Syntax {
            text: self.text.to_string(),
            problem,
            at: self.at + 1,
        })
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn or(&mut self) -> Result<Constraint, ConstraintError> {
        let mut parts = vec![self.and()?];
        while self.peek() == Some('|') {
            self.at += 1;
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Constraint::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Constraint, ConstraintError> {
        let mut parts = vec![self.term()?];
        while matches!(self.peek(), Some('&' | ',')) {
            self.at += 1;
            parts.push(self.term()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Constraint::And(parts)
        })
    }

    fn term(&mut self) -> Result<Constraint, ConstraintError> {
        self.skip_spaces();
        let group = match self.peek() {
            Some('(') => Some(')'),
            Some('[') => Some(']'),
            _ => None,
        };
        let Some(close) = group else {
            return self.feature();
        };
        self.at += 1;
        let inner = self.or()?;
        self.skip_spaces();
        if self.peek() != Some(close) {
            return self.fail(if close == ')' {
                "a '(' is not closed"
            } else {
                "a '[' is not closed"
            });
        }
        self.at += 1;
        self.skip_spaces();
        Ok(match (close, inner) {
            (']', Constraint::Or(alternatives)) => Constraint::Matching(alternatives),
            (_, inner) => inner,
        })
    }

    fn feature(&mut self) -> Result<Constraint, ConstraintError> {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '+'))
        {
            self.at += 1;
        }
        if self.at == start {
            return self.fail("a feature name is missing");
        }
        let name: String = self.chars[start..self.at].iter().collect();
        let count = if self.peek() == Some('*') {
            self.at += 1;
            let digits = self.at;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.at += 1;
            }
            let n: String = self.chars[digits..self.at].iter().collect();
            match n.parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => return self.fail("'*' needs a node count from 1"),
            }
        } else {
            None
        };
        self.skip_spaces();
        Ok(Constraint::Feature { name, count })
    }
}

impl Constraint {
    /// Reads `text` as Slurm's grammar.
    pub fn parse(text: &str) -> Result<Constraint, ConstraintError> {
        let mut p = Parser {
            text,
            chars: text.chars().collect(),
            at: 0,
        };
        let c = p.or()?;
        if p.at < p.chars.len() {
            return p.fail("this character is not part of the grammar");
        }
        Ok(c)
    }

    /// Whether a node with the features `has` may be one of the job's nodes: a counted
    /// feature does not bind a single node, and `[a|b]` asks each node for one of them
    /// (that they share it is the job's: see [`Constraint::alternatives`]).
    pub fn admits(&self, has: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Constraint::Feature { name, count: None } => has(name),
            Constraint::Feature { count: Some(_), .. } => true,
            Constraint::And(v) => v.iter().all(|c| c.admits(has)),
            Constraint::Or(v) | Constraint::Matching(v) => v.iter().any(|c| c.admits(has)),
        }
    }

    /// The constraint once every `[a|b]` is resolved to one choice, each way in the
    /// written order (one entry, itself, when there is no bracket).
    pub fn alternatives(&self) -> Vec<Constraint> {
        match self {
            Constraint::Feature { .. } => vec![self.clone()],
            Constraint::Matching(v) => v.iter().flat_map(Constraint::alternatives).collect(),
            Constraint::Or(v) => combine(v, Constraint::Or),
            Constraint::And(v) => combine(v, Constraint::And),
        }
    }

    /// Features that at least so many of the job's nodes must have (`name*N` not under
    /// an `|`).
    pub fn counts(&self) -> Vec<(String, u32)> {
        match self {
            Constraint::Feature {
                name,
                count: Some(n),
            } => vec![(name.clone(), *n)],
            Constraint::Feature { .. } | Constraint::Or(_) | Constraint::Matching(_) => Vec::new(),
            Constraint::And(v) => v.iter().flat_map(Constraint::counts).collect(),
        }
    }

    /// Every feature name it mentions.
    pub fn features(&self) -> Vec<&str> {
        match self {
            Constraint::Feature { name, .. } => vec![name.as_str()],
            Constraint::And(v) | Constraint::Or(v) | Constraint::Matching(v) => {
                v.iter().flat_map(Constraint::features).collect()
            }
        }
    }
}

/// Every combination of the parts' alternatives, joined by `join`.
fn combine(parts: &[Constraint], join: fn(Vec<Constraint>) -> Constraint) -> Vec<Constraint> {
    let mut out: Vec<Vec<Constraint>> = vec![Vec::new()];
    for p in parts {
        let alts = p.alternatives();
        out = out
            .into_iter()
            .flat_map(|prefix| {
                alts.iter().map(move |a| {
                    let mut v = prefix.clone();
                    v.push(a.clone());
                    v
                })
            })
            .collect();
    }
    out.into_iter().map(join).collect()
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |f: &mut std::fmt::Formatter<'_>, v: &[Constraint], sep: &str| {
            for (i, c) in v.iter().enumerate() {
                if i > 0 {
                    f.write_str(sep)?;
                }
                match c {
                    Constraint::Or(_) | Constraint::And(_) => write!(f, "({c})")?,
                    _ => write!(f, "{c}")?,
                }
            }
            Ok(())
        };
        match self {
            Constraint::Feature { name, count: None } => f.write_str(name),
            Constraint::Feature {
                name,
                count: Some(n),
            } => write!(f, "{name}*{n}"),
            Constraint::And(v) => list(f, v, "&"),
            Constraint::Or(v) => list(f, v, "|"),
            Constraint::Matching(v) => {
                f.write_str("[")?;
                list(f, v, "|")?;
                f.write_str("]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has<'a>(features: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
        move |f| features.contains(&f)
    }

    #[test]
    fn constraints_read_slurms_grammar() {
        let c = Constraint::parse("intel&gpu|amd").unwrap();
        assert!(c.admits(&has(&["intel", "gpu"])));
        assert!(c.admits(&has(&["amd"])));
        assert!(!c.admits(&has(&["intel"])), "& binds tighter than |");
        let c = Constraint::parse("a100,ib").unwrap();
        assert!(c.admits(&has(&["a100", "ib"])) && !c.admits(&has(&["a100"])));
        let c = Constraint::parse("(a|b)&c").unwrap();
        assert!(c.admits(&has(&["b", "c"])) && !c.admits(&has(&["b"])));

        let c = Constraint::parse("[rack1|rack2|rack3]").unwrap();
        assert!(c.admits(&has(&["rack2"])));
        assert_eq!(
            c.alternatives()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["rack1", "rack2", "rack3"],
            "each node must share one of them"
        );
        let c = Constraint::parse("ib&[a100|h100]").unwrap();
        assert_eq!(
            c.alternatives()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["ib&a100", "ib&h100"]
        );

        let c = Constraint::parse("intel&graphics*2").unwrap();
        assert!(
            c.admits(&has(&["intel"])),
            "a count binds the job, not each node"
        );
        assert_eq!(c.counts(), [("graphics".to_string(), 2)]);

        for bad in ["", "a&", "(a|b", "[a|b", "a*0", "a*x", "a b", "a!b", "|a"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?} parsed");
        }
        let e = Constraint::parse("a&(b").unwrap_err();
        assert!(e.to_string().contains("'(' is not closed"), "{e}");
    }

    #[test]
    fn a_constraint_prints_as_it_reads() {
        for text in ["a", "a&b", "a|b&c", "[a|b]&c*2", "(a|b)&c"] {
            let c = Constraint::parse(text).unwrap();
            assert_eq!(Constraint::parse(&c.to_string()).unwrap(), c, "{text}");
        }
    }
}
