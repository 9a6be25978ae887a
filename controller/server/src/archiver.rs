//! Follows this replica's committed state into the accounting archive
//! (`gsched_archive`): every job that ends is written there, on every controller alike,
//! leader or not, so the archive survives failovers and restarts and is rebuilt from the
//! window of recent jobs when its file is missing.

use gsched_archive::{Archive, Cursor, Extra};
use gsched_raft::Replica;
use gsched_state::ClusterState;
use gsched_state::rows::{Audience, JobDetail, job_row};
use gsched_types::api::JobRow;
use gsched_types::job::{JobId, JobRecord};
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::time::Duration;

/// Jobs written per transaction (and per hold of the replica's lock).
const BATCH: usize = 2_000;

/// The archive and where this replica's writing has got to.
pub struct Archiver {
    pub archive: Archive,
    /// Held while catching up, so two catch-ups never interleave.
    cursor: Mutex<Option<Cursor>>,
}

/// The row the archive keeps of an ended job: the detailed row, without the request.
pub fn archived_row(state: &ClusterState, job: &JobRecord) -> (JobRow, Extra) {
    let mut row = job_row(state, job, None, JobDetail::Full, Audience::Owner);
    row.spec = None;
    let gpu_model = gpu_model(state, job);
    (row, Extra { gpu_model })
}

/// The model of the GPUs a job holds (its first GPU node's), for reports by model.
pub fn gpu_model(state: &ClusterState, job: &JobRecord) -> Option<String> {
    job.allocation
        .as_ref()
        .and_then(|a| a.nodes.iter().find(|n| !n.gpus.is_empty()))
        .and_then(|n| state.nodes.get(&n.node))
        .and_then(|n| n.topology.gpus.first())
        .and_then(|g| g.model.clone())
}

impl Archiver {
    /// Opens the archive at `path`, resuming from the cursor it holds.
    pub fn open(path: &std::path::Path) -> gsched_archive::Result<Archiver> {
        let archive = Archive::open(path)?;
        let cursor = archive.cursor()?;
        Ok(Archiver {
            archive,
            cursor: Mutex::new(cursor),
        })
    }

    /// Writes every job that ended since the last call; returns how many.
    pub fn catch_up(&self, replica: &RwLock<Replica>) -> gsched_archive::Result<usize> {
        let mut cursor = self.cursor.lock();
        // Jobs purged from memory since the last call (many ending at once, or a replay
        // after a restart) first: they are no longer in the window below.
        let (evicted, dropped) = replica.write().state.take_evicted();
        if dropped > 0 {
            tracing::error!(
                "{dropped} ended jobs left memory before the accounting archive could take them: gacct on this controller lacks them (the other controllers' archives may hold them)"
            );
        }
        let mut written = 0;
        for chunk in evicted.chunks(BATCH) {
            let rows: Vec<(JobRow, Extra)> = {
                let r = replica.read();
                chunk.iter().map(|j| archived_row(&r.state, j)).collect()
            };
            self.archive.record(&rows, *cursor)?;
            written += rows.len();
        }
        let pending: Vec<JobId> = {
            let r = replica.read();
            let mut new = Vec::new();
            for id in r.state.finished.iter().rev() {
                let job = r.state.jobs.get(id);
                let at_cursor = cursor
                    .is_some_and(|c| c.job == id.0 && job.and_then(|j| j.end_ms) == Some(c.end_ms));
                if at_cursor {
                    break;
                }
                new.push(*id);
            }
            new.reverse();
            new
        };
        for chunk in pending.chunks(BATCH) {
            let (rows, last) = {
                let r = replica.read();
                let mut last = None;
                let rows: Vec<(JobRow, Extra)> = chunk
                    .iter()
                    .filter_map(|id| r.state.jobs.get(id))
                    .filter(|j| j.state.is_terminal())
                    .map(|j| {
                        last = j.end_ms.map(|end_ms| Cursor {
                            job: j.id.0,
                            end_ms,
                        });
                        archived_row(&r.state, j)
                    })
                    .collect();
                (rows, last)
            };
            let next = last.or(*cursor);
            self.archive.record(&rows, next)?;
            *cursor = next;
            written += rows.len();
        }
        Ok(written)
    }
}

/// Opens `DATA_DIR/accounting.sqlite` and starts a thread that writes ended jobs into it
/// every half second. Without a usable file the controller runs on with `gacct`
/// limited to its window of recent jobs, and says so.
pub fn start(data_dir: &std::path::Path, replica: Arc<RwLock<Replica>>) -> Option<Arc<Archiver>> {
    let path = data_dir.join("accounting.sqlite");
    let archiver = match Archiver::open(&path) {
        Ok(a) => Arc::new(a),
        Err(e) => {
            tracing::error!("{e}; gacct shows only the jobs this controller holds in memory");
            return None;
        }
    };
    let follower = archiver.clone();
    let spawned = std::thread::Builder::new()
        .name("archiver".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                match follower.catch_up(&replica) {
                    Ok(_) => failing = false,
                    Err(e) if !failing => {
                        tracing::error!("{e}; retrying every half second");
                        failing = true;
                    }
                    Err(_) => {}
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
    if let Err(e) = spawned {
        tracing::error!("the accounting archive's thread cannot start: {e}");
        return None;
    }
    Some(archiver)
}
