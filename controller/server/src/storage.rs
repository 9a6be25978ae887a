//! The controller's data directory (Raft log, hard state, snapshots): every job's script
//! and environment is in it, so it is the controller user's alone (0700, files 0600). A
//! directory made readable by an older version or by hand is tightened at start.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Creates `dir` (0700) or tightens it and everything in it; logs what was tightened.
pub fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create data directory {}: {e}", dir.display()))?;
    let mut tightened = 0usize;
    tighten(dir, &mut tightened).map_err(|e| {
        anyhow::anyhow!("cannot make data directory {} private: {e}", dir.display())
    })?;
    if tightened > 0 {
        tracing::warn!(
            "data directory {}: {tightened} files or directories were readable by other users; made private (0700/0600)",
            dir.display()
        );
    }
    Ok(())
}

fn tighten(path: &Path, tightened: &mut usize) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let want = if meta.is_dir() { 0o700 } else { 0o600 };
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(want))?;
        *tightened += 1;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            tighten(&entry?.path(), tightened)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_directory_is_made_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("db"), b"log").unwrap();
        for (p, m) in [
            (&dir, 0o755),
            (&dir.join("blobs"), 0o755),
            (&dir.join("db"), 0o644),
        ] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        }
        private_data_dir(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("blobs")), 0o700);
        assert_eq!(mode(&dir.join("db")), 0o600);
    }
}
