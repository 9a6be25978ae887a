//! The lease on a node's steps: every answer from the leader renews it, recorded in
//! `<state-dir>/contact` as the time of the answer (on `CLOCK_BOOTTIME`, which every
//! process of the machine shares and which does not jump) and the lease the controllers
//! grant. Each step's supervisor reads it and stops its step when the controllers have
//! been silent for longer than the lease, which they set a little short of the time after
//! which they declare the node lost and let its jobs run elsewhere: a job cut off with its
//! node (or left behind by a dead agent) never runs twice.
//!
//! For tests, `GSCHED_FAULTS_FILE` may name a file: while it contains `controllers`, the
//! agent drops its session and does not dial (a network cut, without network namespaces).

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Milliseconds on `CLOCK_BOOTTIME`.
pub fn boot_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

/// The contact file of a state directory.
pub fn file(state_dir: &Path) -> PathBuf {
    state_dir.join("contact")
}

/// What a contact file says: when the controllers last answered (boot ms) and the lease.
pub fn read(path: &Path) -> Option<(u64, u64)> {
    parse(&std::fs::read_to_string(path).ok()?)
}

/// What an open contact file says now (it is rewritten in place, so one descriptor sees
/// every renewal for as long as the agent writes that file).
pub fn read_open(file: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 64];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse(std::str::from_utf8(&buf[..n]).ok()?)
}

fn parse(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// What a step's supervisor knows of the node's lease: the newest renewal it has read.
/// It does not forget it when the file stops answering (the agent and its state directory
/// gone, a torn read), so the lease still lapses on time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseView {
    last: Option<(u64, u64)>,
}

impl LeaseView {
    /// Takes in what the file said this round (`None`: nothing readable).
    pub fn observe(&mut self, read: Option<(u64, u64)>) {
        if let Some(r) = read
            && self.last.is_none_or(|l| r.0 >= l.0)
        {
            self.last = Some(r);
        }
    }

    /// How long the controllers have been silent past the lease at `now_ms` (boot ms), if
    /// they have.
    pub fn expired(&self, now_ms: u64) -> Option<Duration> {
        let (at, lease) = self.last?;
        let silent = now_ms.saturating_sub(at);
        (lease > 0 && silent > lease).then(|| Duration::from_millis(silent))
    }
}

pub struct Contact {
    file: PathBuf,
    /// When the file was last written (it is rewritten at most twice a second).
    written: Mutex<Option<(Instant, u64)>>,
    faults: Option<PathBuf>,
}

impl Contact {
    pub fn open(state_dir: &Path) -> Contact {
        Contact {
            file: file(state_dir),
            written: Mutex::new(None),
            faults: std::env::var_os("GSCHED_FAULTS_FILE").map(PathBuf::from),
        }
    }

    /// The leader answered; `lease_ms` is the lease it grants (0: none).
    pub fn renew(&self, lease_ms: u64) {
        let mut written = self.written.lock();
        if written.is_some_and(|(at, lease)| {
            lease == lease_ms && at.elapsed() < Duration::from_millis(500)
        }) {
            return;
        }
        // Fixed width, overwritten in place: renewing needs no new disk blocks, so a full
        // state directory cannot make the lease lapse (a torn read parses as no lease).
        let line = format!("{:020} {lease_ms:020}\n", boot_ms());
        let write = || -> std::io::Result<()> {
            use std::os::unix::fs::{FileExt, OpenOptionsExt};
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&self.file)?;
            f.write_all_at(line.as_bytes(), 0)
        };
        match write() {
            Ok(()) => *written = Some((Instant::now(), lease_ms)),
            Err(e) => tracing::warn!(
                "cannot record the controllers' answer in {}: {e}",
                self.file.display()
            ),
        }
    }

    /// True while a test cuts this agent off from the controllers.
    pub fn cut_off(&self) -> bool {
        self.faults
            .as_ref()
            .is_some_and(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("controllers")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expired(f: &Path) -> Option<Duration> {
        let mut v = LeaseView::default();
        v.observe(read(f));
        v.expired(boot_ms())
    }

    #[test]
    fn a_lease_expires_only_after_its_length_without_an_answer() {
        let dir = tempfile::tempdir().unwrap();
        let c = Contact::open(dir.path());
        let f = file(dir.path());
        assert_eq!(expired(&f), None, "no lease granted yet");
        c.renew(60_000);
        assert_eq!(expired(&f), None);
        std::fs::write(&f, format!("{} 1000", boot_ms() - 5_000)).unwrap();
        assert!(expired(&f).is_some_and(|d| d >= Duration::from_secs(5)));
        std::fs::write(&f, format!("{} 0", boot_ms() - 5_000)).unwrap();
        assert_eq!(expired(&f), None, "a lease of 0 is no lease");
    }

    #[test]
    fn an_open_contact_file_is_read_after_its_name_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let c = Contact::open(dir.path());
        c.renew(5_000);
        let open = std::fs::File::open(file(dir.path())).unwrap();
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert!(read_open(&open).is_some_and(|(_, lease)| lease == 5_000));
    }

    #[test]
    fn a_lease_lapses_when_its_file_goes_silent_or_away() {
        let mut v = LeaseView::default();
        assert_eq!(
            v.expired(1_000_000),
            None,
            "no lease read yet: nothing to enforce"
        );
        v.observe(Some((10_000, 5_000)));
        assert_eq!(v.expired(14_000), None);
        // The file vanishes (agent and state directory removed): the last renewal stands.
        v.observe(None);
        assert_eq!(v.expired(15_001), Some(Duration::from_millis(5_001)));
        // A renewal read later moves it on; an older one (a stale copy) does not.
        v.observe(Some((20_000, 5_000)));
        v.observe(Some((12_000, 5_000)));
        assert_eq!(v.expired(24_000), None);
        assert!(v.expired(25_500).is_some());
        // A lease of 0 is "none granted".
        let mut none = LeaseView::default();
        none.observe(Some((1, 0)));
        assert_eq!(none.expired(u64::MAX), None);
    }
}
