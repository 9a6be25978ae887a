//! Jobs the admin tools run through `grun` (`gctl burn-in`'s stages, `gctl doctor
//! --probe`): one allocation each on named nodes, through the scheduler like any job,
//! labelled output captured; the caller's own job identity and rendezvous variables are
//! not passed on (grun would take them for an allocation to run in).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One `grun` invocation outside any job.
pub struct GrunJob<'a> {
    pub grun: &'a Path,
    pub nodes: &'a [String],
    pub gpus_per_node: u32,
    pub tasks_per_node: u32,
    pub name: String,
    pub time_limit: &'a str,
    pub partition: Option<&'a str>,
    pub controllers: Option<&'a str>,
    /// Whom the job runs as: the caller, or the service user root hands it to.
    pub run_as: Option<&'a ServiceUser>,
}

/// The unprivileged Unix user the admin tools' jobs run as when root runs them: nodes
/// refuse root's jobs (`gagentd --min-uid`), so `gctl burn-in` and `gctl doctor --probe`
/// started by root submit their jobs as this user instead (root becoming a user it
/// names is no new power; the nodes' refusal of root stays whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The service user's name when none is given (`--as-user`, `GSCHED_SERVICE_USER`).
pub const DEFAULT_SERVICE_USER: &str = "gsched-admin";

/// Why the admin tools cannot pick whom their jobs run as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceUserError {
    #[error(
        "there is no Unix user {0} here to run the admin tools' jobs as: create it (useradd --create-home {0}, with a uid at or above the agents' --min-uid) or name another with --as-user USER or GSCHED_SERVICE_USER"
    )]
    Unknown(String),
    #[error(
        "{name} has uid {uid}: the nodes refuse root's jobs and most refuse system users' too (gagentd --min-uid, 1000 on a real node); name a user with a uid at or above it"
    )]
    Privileged { name: String, uid: u32 },
    #[error(
        "only root may run the admin tools' jobs as another user ({0}); run them as that user, or leave --as-user out"
    )]
    NotRoot(String),
}

/// Whom the admin tools' jobs run as (the pure decision): `caller_uid` is who runs gctl,
/// `asked` the user named by `--as-user` or `GSCHED_SERVICE_USER`, `lookup` resolves a
/// name. Root with a user named, or with [`DEFAULT_SERVICE_USER`] present, hands the
/// jobs to that user; anyone else runs them as themselves (naming oneself is fine).
/// Root with no service user runs them as root, which works where the agents allow it
/// (`--min-uid 0`); elsewhere the nodes' refusal comes back with its reason.
pub fn service_user(
    caller_uid: u32,
    asked: Option<&str>,
    lookup: impl Fn(&str) -> Option<ServiceUser>,
) -> Result<Option<ServiceUser>, ServiceUserError> {
    let user = match asked {
        Some(name) => Some(lookup(name).ok_or_else(|| ServiceUserError::Unknown(name.into()))?),
        None if caller_uid == 0 => lookup(DEFAULT_SERVICE_USER),
        None => None,
    };
    match user {
        Some(u) if u.uid == caller_uid => Ok(None),
        Some(u) if caller_uid != 0 => Err(ServiceUserError::NotRoot(u.name)),
        Some(u) if u.uid == 0 => Err(ServiceUserError::Privileged {
            name: u.name,
            uid: u.uid,
        }),
        other => Ok(other),
    }
}

/// The service user from `--as-user`, else `GSCHED_SERVICE_USER`, for the user running
/// this process (see [`service_user`]).
pub fn service_user_here(flag: Option<&str>) -> Result<Option<ServiceUser>, ServiceUserError> {
    let env = std::env::var("GSCHED_SERVICE_USER")
        .ok()
        .filter(|v| !v.is_empty());
    service_user(
        nix::unistd::geteuid().as_raw(),
        flag.or(env.as_deref()),
        |name| {
            let u = nix::unistd::User::from_name(name).ok().flatten()?;
            Some(ServiceUser {
                name: u.name,
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
                home: u.dir,
            })
        },
    )
}

/// The hint for a run the nodes refused because it ran as root.
pub fn refused_root_hint(error: &str) -> Option<String> {
    (nix::unistd::geteuid().is_root() && error.contains("--min-uid")).then(|| {
        format!(
            "the nodes refuse jobs as root: create a service user (useradd --create-home {DEFAULT_SERVICE_USER}) or name one with --as-user USER or GSCHED_SERVICE_USER, and gctl runs its jobs as that user"
        )
    })
}

/// Variables of the caller's environment the job's tasks get.
fn inherited(name: &str) -> bool {
    !(name.starts_with("SLURM_")
        || name.starts_with("GSCHED_JOB")
        || matches!(
            name,
            "MASTER_ADDR"
                | "MASTER_PORT"
                | "RANK"
                | "WORLD_SIZE"
                | "LOCAL_RANK"
                | "CUDA_VISIBLE_DEVICES"
        ))
}

/// The `grun` next to this binary, else the one on PATH.
pub fn grun_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("grun")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "grun".into())
}

impl GrunJob<'_> {
    /// The command that runs `argv` as this job's tasks (`-l`: lines labelled by rank;
    /// `-K`: one failed task stops the rest), stdin closed, output piped.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut c = Command::new(self.grun);
        c.env_clear()
            .envs(std::env::vars().filter(|(k, _)| inherited(k)))
            .env("PYTHONUNBUFFERED", "1");
        c.args([
            "-N",
            &self.nodes.len().to_string(),
            "-w",
            &self.nodes.join(","),
        ])
        .args(["--gpus-per-node", &self.gpus_per_node.to_string()])
        .args(["--ntasks-per-node", &self.tasks_per_node.to_string()])
        .args(["-J", &self.name, "-t", self.time_limit])
        .args(["--kill-on-bad-exit", "-l"]);
        if let Some(p) = self.partition {
            c.args(["-p", p]);
        }
        if let Some(ctl) = self.controllers {
            c.args(["--controllers", ctl]);
        }
        if let Some(u) = self.run_as {
            use std::os::unix::process::CommandExt;
            // (std drops root's supplementary groups when it changes the uid.)
            c.uid(u.uid)
                .gid(u.gid)
                .env("HOME", &u.home)
                .env("USER", &u.name)
                .env("LOGNAME", &u.name);
        }
        c.arg("--")
            .args(argv)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// Strips grun's `-l` label ("3: ") from a line.
pub fn unlabel(line: &str) -> &str {
    match line.split_once(": ") {
        Some((rank, rest)) if rank.trim().parse::<u32>().is_ok() => rest,
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(name: &str) -> Option<ServiceUser> {
        let (uid, name) = match name {
            "gsched-admin" => (1500, name),
            "alice" => (1001, name),
            "root" => (0, name),
            _ => return None,
        };
        Some(ServiceUser {
            name: name.into(),
            uid,
            gid: uid,
            home: format!("/home/{name}").into(),
        })
    }

    #[test]
    fn root_hands_its_jobs_to_the_service_user() {
        let picked = service_user(0, None, users).unwrap().unwrap();
        assert_eq!(picked.name, "gsched-admin");
        let picked = service_user(0, Some("alice"), users).unwrap().unwrap();
        assert_eq!(picked.uid, 1001);
        // Without one, root runs them itself (agents with --min-uid 0 allow it).
        assert_eq!(service_user(0, None, |_| None), Ok(None));
    }

    #[test]
    fn a_named_user_must_exist_be_unprivileged_and_be_root_s_to_give() {
        assert_eq!(
            service_user(0, Some("ghost"), users),
            Err(ServiceUserError::Unknown("ghost".into()))
        );
        assert!(matches!(
            service_user(0, Some("root"), users),
            Ok(None) | Err(ServiceUserError::Privileged { .. })
        ));
        assert_eq!(
            service_user(1001, Some("gsched-admin"), users),
            Err(ServiceUserError::NotRoot("gsched-admin".into()))
        );
        // Others run their jobs as themselves; naming oneself is the same.
        assert_eq!(service_user(1001, None, users), Ok(None));
        assert_eq!(service_user(1001, Some("alice"), users), Ok(None));
    }
}
