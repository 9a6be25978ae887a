//! Who a job runs as: the submitting user's uid, primary and supplementary groups, home
//! and shell, resolved before any fork (getgrouplist is not async-signal-safe).

use gsched_launch::plan::Owner;
use std::ffi::CString;

/// Why a job's user cannot be resolved on this node.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot look up user {user}: {source}")]
    Lookup { user: String, source: nix::Error },
    #[error("user {0} does not exist on this node")]
    NoSuchUser(String),
    #[error("user name contains a NUL byte")]
    NulInName,
}

/// Resolves `user` (or `uid`) from the password database.
pub fn resolve(user: &str, uid: Option<u32>) -> Result<Owner, IdentityError> {
    let entry = match uid {
        Some(u) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u)),
        None => nix::unistd::User::from_name(user),
    }
    .map_err(|source| IdentityError::Lookup {
        user: user.to_string(),
        source,
    })?
    .ok_or_else(|| IdentityError::NoSuchUser(user.to_string()))?;
    let cname = CString::new(entry.name.clone()).map_err(|_| IdentityError::NulInName)?;
    let groups = nix::unistd::getgrouplist(&cname, entry.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![entry.gid.as_raw()]);
    Ok(Owner {
        user: entry.name,
        uid: entry.uid.as_raw(),
        gid: entry.gid.as_raw(),
        groups,
        home: entry.dir.to_string_lossy().into_owned(),
    })
}

/// The identity the agent itself runs as.
pub fn current() -> Owner {
    let uid = nix::unistd::getuid().as_raw();
    resolve("", Some(uid)).unwrap_or(Owner {
        user: format!("uid{uid}"),
        uid,
        gid: nix::unistd::getgid().as_raw(),
        groups: vec![],
        home: "/".into(),
    })
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
