//! srun's `--prolog` and `--epilog`: a program run here, as the caller, before the step
//! starts and after it ends, with the step's command as its arguments
//! (`src/srun/libsrun/srun_job.c`: `_run_srun_prolog`, `_run_srun_script`).

use std::collections::BTreeMap;
use std::path::Path;

/// Which of the two runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    Prolog,
    Epilog,
}

impl Moment {
    /// `SLURM_SCRIPT_CONTEXT`, as srun sets it.
    fn context(self) -> &'static str {
        match self {
            Moment::Prolog => "prolog_srun",
            Moment::Epilog => "epilog_srun",
        }
    }
}

/// Where the script is: a path as given, else the step's directory first, then `PATH`
/// (srun's `search_path` with the current directory first); the name as given when
/// neither has it.
pub fn locate(
    script: &str,
    cwd: &str,
    path_var: Option<&str>,
    exists: impl Fn(&str) -> bool,
) -> String {
    if script.contains('/') {
        return script.to_string();
    }
    std::iter::once(cwd)
        .chain(path_var.unwrap_or("").split(':').filter(|d| !d.is_empty()))
        .map(|d| format!("{}/{script}", d.trim_end_matches('/')))
        .find(|p| exists(p))
        .unwrap_or_else(|| script.to_string())
}

/// Runs `script` (`none`: nothing) with the step's `argv` as its arguments and returns
/// the line to print and the status it ended with (0 when it could not be run, as srun
/// goes on then, saying so).
pub fn run(
    script: &str,
    moment: Moment,
    argv: &[String],
    cwd: &str,
    env: &BTreeMap<String, String>,
) -> (Option<String>, i32) {
    if script.is_empty() || script.eq_ignore_ascii_case("none") {
        return (None, 0);
    }
    let path = locate(script, cwd, env.get("PATH").map(String::as_str), |p| {
        Path::new(p).is_file()
    });
    if let Err(e) = nix::unistd::access(
        Path::new(&path),
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::X_OK,
    ) {
        return (Some(format!("Access denied for {script}: {}", e.desc())), 0);
    }
    let status = std::process::Command::new(&path)
        .args(argv)
        .current_dir(cwd)
        .env("SLURM_SCRIPT_CONTEXT", moment.context())
        .status();
    match status {
        Ok(s) => (None, s.code().unwrap_or(1)),
        Err(e) => (
            Some(format!("Failed to execute srun prolog/epilog script: {e}")),
            1,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_found_as_srun_finds_them() {
        let files = ["/job/pro.sh", "/usr/bin/pro.sh", "/usr/bin/epi"];
        let exists = |p: &str| files.contains(&p);
        assert_eq!(
            locate("pro.sh", "/job", Some("/usr/bin"), exists),
            "/job/pro.sh"
        );
        assert_eq!(
            locate("epi", "/job", Some("/opt:/usr/bin"), exists),
            "/usr/bin/epi"
        );
        assert_eq!(locate("nosuch", "/job", Some("/usr/bin"), exists), "nosuch");
        assert_eq!(locate("./x", "/job", None, exists), "./x");
    }

    #[test]
    fn a_script_runs_with_the_step_command_and_its_status_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let script = dir.path().join("pro.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"$SLURM_SCRIPT_CONTEXT $*\" > seen.txt\nexit 3\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = BTreeMap::new();
        let argv = vec!["echo".to_string(), "hi".to_string()];
        assert_eq!(run("pro.sh", Moment::Epilog, &argv, cwd, &env), (None, 3));
        let seen = std::fs::read_to_string(dir.path().join("seen.txt")).unwrap();
        assert_eq!(seen, "epilog_srun echo hi\n");
        assert_eq!(run("none", Moment::Prolog, &argv, cwd, &env), (None, 0));
        let (line, status) = run("nosuch", Moment::Prolog, &argv, cwd, &env);
        assert_eq!(status, 0);
        assert_eq!(
            line.as_deref(),
            Some("Access denied for nosuch: No such file or directory")
        );
    }
}
