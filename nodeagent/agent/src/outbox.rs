//! Events the controller has not acknowledged yet, kept on disk so an agent restart or a
//! controller failover loses none. Each event is a file named by its sequence number.

use gsched_types::agent::AgentToController;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub struct Outbox {
    dir: PathBuf,
    inner: Mutex<(u64, BTreeMap<u64, AgentToController>)>,
    /// Told of every stored event: the session sends it at once.
    pub pushed: tokio::sync::Notify,
}

impl Outbox {
    pub fn open(dir: PathBuf) -> std::io::Result<Outbox> {
        crate::layout::private_dir(&dir)?;
        let mut events = BTreeMap::new();
        let mut next = 1;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let Some(seq) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            if let Ok(ev) = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    serde_json::from_slice::<AgentToController>(&b).map_err(|e| e.to_string())
                })
            {
                events.insert(seq, ev);
            }
            next = next.max(seq + 1);
        }
        Ok(Outbox {
            dir,
            inner: Mutex::new((next, events)),
            pushed: tokio::sync::Notify::new(),
        })
    }

    /// Stores an event built from its sequence number and returns it.
    pub fn push(&self, make: impl FnOnce(u64) -> AgentToController) -> AgentToController {
        let mut inner = self.inner.lock();
        let seq = inner.0;
        inner.0 += 1;
        let ev = make(seq);
        let path = self.dir.join(format!("{seq:012}.json"));
        if let Err(e) =
            crate::layout::write_private(&path, &serde_json::to_vec(&ev).unwrap_or_default())
        {
            tracing::error!("cannot persist event {seq}: {e}");
        }
        inner.1.insert(seq, ev.clone());
        drop(inner);
        self.pushed.notify_one();
        ev
    }

    pub fn ack(&self, seq: u64) {
        let mut inner = self.inner.lock();
        if inner.1.remove(&seq).is_some() {
            let _ = std::fs::remove_file(self.dir.join(format!("{seq:012}.json")));
        }
    }

    /// Whether event `seq` still waits for its acknowledgement.
    pub fn is_pending(&self, seq: u64) -> bool {
        self.inner.lock().1.contains_key(&seq)
    }

    pub fn pending(&self) -> Vec<AgentToController> {
        self.inner.lock().1.values().cloned().collect()
    }
}
