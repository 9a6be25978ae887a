//! A user's login environment (`--get-user-env`), read as slurmd reads it: the login
//! shell run through `su -` (`su` without the dash for mode S) when root asks, the
//! caller's own shell otherwise, and what `env` prints after a marker parsed.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `--get-user-env[=TIMEOUT][S|L]`: how long the shell may take, and whether it is a login
/// shell (L, the default) or not (S).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserEnv {
    pub timeout: Duration,
    pub login: bool,
}

/// Reads a user's login environment: [`capture`], or a stand-in in tests.
pub type Reader = fn(&str, UserEnv) -> Result<BTreeMap<String, String>, String>;

/// sbatch's default wait for the login shell.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(8);

impl UserEnv {
    /// Parses the option's value ("" for none): digits, then at most one of S or L.
    pub fn parse(value: &str) -> Result<UserEnv, String> {
        let bad = || format!("--get-user-env={value}: give [SECONDS][S|L], e.g. 10L");
        let (digits, mode) = match value.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((i, _)) => value.split_at(i),
            None => (value, ""),
        };
        let login = match mode {
            "" | "L" => true,
            "S" => false,
            _ => return Err(bad()),
        };
        let timeout = if digits.is_empty() {
            DEFAULT_TIMEOUT
        } else {
            Duration::from_secs(digits.parse().map_err(|_| bad())?)
        };
        Ok(UserEnv { timeout, login })
    }
}

const MARKER: &str = "__GSCHED_LOGIN_ENV__";

/// Runs `user`'s shell and returns the environment it prints.
pub fn capture(user: &str, how: UserEnv) -> Result<BTreeMap<String, String>, String> {
    let script = format!("printf '\\0{MARKER}\\0'; exec /usr/bin/env -0");
    let mut cmd = if nix::unistd::getuid().is_root() {
        let mut c = Command::new("su");
        if how.login {
            c.arg("-");
        }
        c.args([user, "-c", &script]);
        c
    } else {
        let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into());
        let mut c = Command::new(&shell);
        if how.login {
            c.env_clear();
            for keep in ["HOME", "USER", "LOGNAME", "SHELL", "TERM"] {
                if let Ok(v) = std::env::var(keep) {
                    c.env(keep, v);
                }
            }
            c.env("PATH", "/usr/local/bin:/usr/bin:/bin");
            c.arg("-l");
        }
        c.args(["-c", &script]);
        c
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("--get-user-env: cannot start {user}'s shell: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < how.timeout => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "--get-user-env: {user}'s login shell did not print its environment within {} s (give it longer: --get-user-env=SECONDS)",
                    how.timeout.as_secs()
                ));
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    parse(&out).ok_or_else(|| {
        format!("--get-user-env: {user}'s login shell printed no environment ({status})")
    })
}

/// The `NAME=value` entries `env -0` printed after the marker.
fn parse(out: &[u8]) -> Option<BTreeMap<String, String>> {
    let marker = format!("\0{MARKER}\0");
    let at = out
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())?;
    let env = &out[at + marker.len()..];
    Some(
        env.split(|b| *b == 0)
            .filter_map(|e| {
                let e = String::from_utf8_lossy(e);
                let (k, v) = e.split_once('=')?;
                (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_sbatch_reads_them() {
        assert_eq!(
            UserEnv::parse(""),
            Ok(UserEnv {
                timeout: DEFAULT_TIMEOUT,
                login: true
            })
        );
        assert_eq!(
            UserEnv::parse("10L"),
            Ok(UserEnv {
                timeout: Duration::from_secs(10),
                login: true
            })
        );
        assert_eq!(
            UserEnv::parse("S"),
            Ok(UserEnv {
                timeout: DEFAULT_TIMEOUT,
                login: false
            })
        );
        for bad in ["x", "10Q", "L10", "SL"] {
            assert!(UserEnv::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn what_the_profile_prints_before_the_marker_is_not_the_environment() {
        let out = b"Welcome to the lab\nFOO=not this\n\0__GSCHED_LOGIN_ENV__\0A=1\0B=x=y\0\0";
        let env = parse(out).unwrap();
        assert_eq!(env.len(), 2);
        assert_eq!(env["A"], "1");
        assert_eq!(env["B"], "x=y");
        assert_eq!(parse(b"A=1\0"), None);
    }

    #[test]
    fn a_real_login_shell_is_read() {
        let user = crate::client::current_user();
        let env = capture(&user, UserEnv::parse("").unwrap()).unwrap();
        assert!(env.contains_key("HOME"), "{env:?}");
        assert!(env.contains_key("PATH"), "{env:?}");
    }
}
