//! The step's files: pipes, and output files opened with the job owner's identity.

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;

pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| format!("cannot create a pipe for the step's output: {e}"))
}

/// Opens (creating, appending) an output file with the job owner's file-system identity
/// and umask, so permissions are checked, and the file is created, as that user. The
/// open never waits (a FIFO with no reader is refused, not waited on), and only a
/// regular file or a character device such as /dev/null is written.
pub(super) fn open_as(
    path: &str,
    owner: Option<(u32, u32)>,
    groups: &[u32],
    umask: Option<Mode>,
) -> Result<File, String> {
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let saved_umask = umask.map(nix::sys::stat::umask);
    let result = match owner {
        None => open(),
        Some((uid, gid)) => as_owner(uid, gid, groups, open),
    };
    if let Some(old) = saved_umask {
        nix::sys::stat::umask(old);
    }
    let file =
        result.map_err(|e| super::policy::open_error(e.raw_os_error(), &e.to_string(), path))?;
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot read what {path} is: {e}"))?
        .file_type();
    if !(kind.is_file() || std::os::unix::fs::FileTypeExt::is_char_device(&kind)) {
        return Err(format!(
            "{path} is not a regular file (a FIFO, socket or directory): the job's output goes to a file or /dev/null"
        ));
    }
    blocking(&file).map_err(|e| format!("cannot write {path}: {e}"))?;
    Ok(file)
}

/// Clears `O_NONBLOCK`: writes wait as a file's do.
fn blocking(file: &File) -> nix::Result<()> {
    let flags = nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_SETFL(flags)).map(drop)
}

/// Opens a file for reading with the job owner's file-system identity (its stdin, from
/// `sbatch --input`), so only what the owner may read is read.
pub(super) fn open_read_as(
    path: &str,
    owner: Option<(u32, u32)>,
    groups: &[u32],
) -> Result<File, String> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let file = match owner {
        None => open(),
        Some((uid, gid)) => as_owner(uid, gid, groups, open),
    }
    .map_err(|e| format!("cannot open the job's input {path}: {e}"))?;
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(format!("the job's input {path} is not a regular file"));
    }
    // Reads block as a file's do (the open did not wait on a FIFO's writer).
    blocking(&file).map_err(|e| format!("cannot read the job's input {path}: {e}"))?;
    Ok(file)
}

/// Runs `f` with the file-system identity (fsuid, fsgid, groups) of `uid`/`gid`, and
/// restores root's afterwards. The supervisor is single-threaded while it does this.
fn as_owner(
    uid: u32,
    gid: u32,
    groups: &[u32],
    f: impl FnOnce() -> std::io::Result<File>,
) -> std::io::Result<File> {
    let saved = nix::unistd::getgroups()?;
    let wanted: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&wanted)?;
    // setfsuid/setfsgid report the previous value, not errors: asking again tells
    // whether the change took.
    nix::unistd::setfsgid(Gid::from_raw(gid));
    nix::unistd::setfsuid(Uid::from_raw(uid));
    let took = nix::unistd::setfsuid(Uid::from_raw(uid)) == Uid::from_raw(uid)
        && nix::unistd::setfsgid(Gid::from_raw(gid)) == Gid::from_raw(gid);
    let result = if took {
        f()
    } else {
        Err(std::io::Error::other(format!(
            "could not take the file-system identity of uid {uid}"
        )))
    };
    nix::unistd::setfsuid(Uid::from_raw(0));
    nix::unistd::setfsgid(Gid::from_raw(0));
    nix::unistd::setgroups(&saved)?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_in_place_of_the_output_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("slurm-7.out");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let path = fifo.to_str().unwrap();
        // No reader: the open fails at once instead of waiting for one.
        assert!(open_as(path, None, &[], None).is_err());
        // With a reader: opened, then refused for what it is.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let err = open_as(path, None, &[], None).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        // A file and /dev/null are written as before.
        let file = dir.path().join("out.txt");
        assert!(open_as(file.to_str().unwrap(), None, &[], None).is_ok());
        assert!(open_as("/dev/null", None, &[], None).is_ok());
    }
}
