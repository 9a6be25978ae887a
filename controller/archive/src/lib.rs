//! The accounting archive: every ended job, as `gacct` shows it, in an SQLite file on
//! each controller (`DATA_DIR/accounting.sqlite`), written from the replica's committed
//! state and read a page at a time, so a controller's memory does not grow with it.
//!
//! One table, `jobs`: the columns `gacct` filters and reports on (user, account,
//! partition, state, times, GPUs, GPU-seconds, GPU model) and the rest of the row
//! (failure, allocation, node runs, steps, attempts, usage summaries) as LZ4-compressed
//! JSON in `detail`. Writes are upserts by job id, so replaying a window twice changes
//! nothing; the `meta` table holds the cursor of the last job archived in end order.

mod report;
mod row;

pub use gsched_types::report::{Group, UsageRow};
pub use report::{Item, Totals};

use gsched_types::api::JobRow;
use gsched_types::job::JobState;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use std::path::{Path, PathBuf};

/// What went wrong with the archive file.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(
        "the accounting archive {path} cannot be used: {source} (move it aside and restart: it is rebuilt from the controller's window of recent jobs)"
    )]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("the accounting archive failed: {0}")]
    Sql(#[from] rusqlite::Error),
}

pub type Result<T> = std::result::Result<T, ArchiveError>;

/// Where the archiver left off: the last job archived, in the order jobs ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub job: u64,
    pub end_ms: u64,
}

/// Which archived jobs a page holds. Bounds are in controller time (ms); 0 is open.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Only jobs with an id above this (the page cursor).
    pub after: u64,
    pub limit: usize,
    pub users: Vec<String>,
    pub states: Vec<JobState>,
    /// Job ids: a job, or an array's tasks when it is the array's id.
    pub ids: Vec<u64>,
    pub partition: Option<String>,
    /// Jobs that ended at or after this.
    pub since_ms: u64,
    /// Jobs submitted at or before this.
    pub until_ms: u64,
    /// Full rows (allocation, node runs, steps, attempts, usage), else summaries.
    pub detail: bool,
}

/// A page of archived rows, in id order.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub rows: Vec<JobRow>,
    /// More rows match after the last one.
    pub more: bool,
}

/// A job's facts the archive keeps beyond its row.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// The model of the GPUs it ran on (the first node's), for reports by model.
    pub gpu_model: Option<String>,
}

/// The open archive: one connection that writes, one that reads (SQLite in WAL mode lets
/// a reader go on while the writer commits).
pub struct Archive {
    path: PathBuf,
    write: Mutex<Connection>,
    read: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    array_job_id INTEGER,
    array_task_id INTEGER,
    name TEXT NOT NULL,
    user TEXT NOT NULL,
    account TEXT NOT NULL,
    partition TEXT NOT NULL,
    qos TEXT,
    state TEXT NOT NULL,
    reason TEXT NOT NULL,
    exit_code INTEGER,
    nodes INTEGER NOT NULL,
    node_list TEXT NOT NULL,
    gpus_per_node INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    restarts INTEGER NOT NULL,
    submit_ms INTEGER NOT NULL,
    start_ms INTEGER,
    end_ms INTEGER NOT NULL,
    time_limit_s INTEGER,
    gpu_model TEXT,
    gpu_s INTEGER NOT NULL,
    detail BLOB
);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_ms);
CREATE INDEX IF NOT EXISTS jobs_user_end ON jobs(user, end_ms);
CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id) WHERE array_job_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

fn configure(c: &Connection) -> rusqlite::Result<()> {
    // WAL: readers do not wait for the writer. NORMAL: a crash may lose the last
    // commits, which the archiver writes again from its cursor (upserts).
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    // A bounded page cache (8 MiB), whatever the file's size.
    c.pragma_update(None, "cache_size", -8192)?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

impl Archive {
    /// Opens (creating it if missing) the archive at `path`.
    pub fn open(path: &Path) -> Result<Archive> {
        let open_err = |source| ArchiveError::Open {
            path: path.to_path_buf(),
            source,
        };
        let write = Connection::open(path).map_err(open_err)?;
        configure(&write).map_err(open_err)?;
        write.execute_batch(SCHEMA).map_err(open_err)?;
        let read = Connection::open(path).map_err(open_err)?;
        configure(&read).map_err(open_err)?;
        Ok(Archive {
            path: path.to_path_buf(),
            write: Mutex::new(write),
            read: Mutex::new(read),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cursor the last `record` left.
    pub fn cursor(&self) -> Result<Option<Cursor>> {
        let c = self.read.lock();
        let get = |key: &str| -> rusqlite::Result<Option<u64>> {
            c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .map(|v| v.map(|v| v as u64))
        };
        Ok(match (get("cursor_job")?, get("cursor_end_ms")?) {
            (Some(job), Some(end_ms)) => Some(Cursor { job, end_ms }),
            _ => None,
        })
    }

    /// Writes `jobs` (ended jobs' detailed rows, with what else the archive keeps of
    /// each) and the new cursor in one transaction.
    pub fn record(&self, jobs: &[(JobRow, Extra)], cursor: Option<Cursor>) -> Result<()> {
        let mut c = self.write.lock();
        let tx = c.transaction()?;
        {
            let mut upsert = tx.prepare_cached(row::UPSERT)?;
            for (job, extra) in jobs {
                row::upsert(&mut upsert, job, extra)?;
            }
            if let Some(cur) = cursor {
                let mut meta =
                    tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?;
                meta.execute(rusqlite::params!["cursor_job", cur.job as i64])?;
                meta.execute(rusqlite::params!["cursor_end_ms", cur.end_ms as i64])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// How many jobs it holds.
    pub fn len(&self) -> Result<u64> {
        let c = self.read.lock();
        Ok(c.query_row("SELECT count(*) FROM jobs", [], |r| r.get::<_, i64>(0))? as u64)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Bytes on disk (the database and its write-ahead log).
    pub fn disk_bytes(&self) -> u64 {
        let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        size(self.path.clone()) + size(PathBuf::from(wal))
    }

    /// Writes the write-ahead log back into the database file.
    pub fn checkpoint(&self) -> Result<()> {
        let c = self.write.lock();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// A page of the jobs `q` selects, in id order.
    pub fn query(&self, q: &Query) -> Result<Page> {
        let c = self.read.lock();
        let mut sql = String::from("SELECT ");
        sql.push_str(row::COLUMNS);
        sql.push_str(", detail");
        sql.push_str(" FROM jobs WHERE ");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        let mut lower = q.after;
        let mut upper: Option<u64> = None;
        let mut conds: Vec<String> = Vec::new();
        let list = |args: &mut Vec<rusqlite::types::Value>, n: usize| -> String {
            let start = args.len();
            (0..n)
                .map(|i| format!("?{}", start + i + 1))
                .collect::<Vec<_>>()
                .join(",")
        };
        if !q.ids.is_empty() {
            let a = list(&mut args, q.ids.len());
            args.extend(q.ids.iter().map(|&i| (i as i64).into()));
            let b = list(&mut args, q.ids.len());
            args.extend(q.ids.iter().map(|&i| (i as i64).into()));
            conds.push(format!("(id IN ({a}) OR array_job_id IN ({b}))"));
        }
        if !q.users.is_empty() {
            let u = list(&mut args, q.users.len());
            args.extend(q.users.iter().map(|u| u.clone().into()));
            conds.push(format!("user IN ({u})"));
        } else if q.ids.is_empty() {
            // A window over everyone: walk the table in id order between bounds found
            // through the end-time index and the submit order of ids.
            if q.since_ms > 0 && q.after == 0 {
                let first: Option<i64> = c.query_row(
                    "SELECT min(id) FROM jobs WHERE end_ms >= ?1",
                    [q.since_ms as i64],
                    |r| r.get(0),
                )?;
                lower = lower.max(first.map_or(u64::MAX, |f| (f as u64).saturating_sub(1)));
            }
            if q.until_ms > 0 {
                upper = first_submitted_after(&c, q.until_ms + SUBMIT_ORDER_SLACK_MS)?;
            }
        }
        let plus = if q.users.is_empty() && q.ids.is_empty() {
            "+"
        } else {
            ""
        };
        if q.since_ms > 0 {
            args.push((q.since_ms as i64).into());
            conds.push(format!("{plus}end_ms >= ?{}", args.len()));
        }
        if q.until_ms > 0 {
            args.push((q.until_ms as i64).into());
            conds.push(format!("submit_ms <= ?{}", args.len()));
        }
        if !q.states.is_empty() {
            let s = list(&mut args, q.states.len());
            args.extend(q.states.iter().map(|s| s.name().to_string().into()));
            conds.push(format!("state IN ({s})"));
        }
        if let Some(p) = &q.partition {
            args.push(p.clone().into());
            conds.push(format!("partition = ?{}", args.len()));
        }
        args.push((lower.min(i64::MAX as u64) as i64).into());
        conds.push(format!("id > ?{}", args.len()));
        if let Some(up) = upper {
            args.push((up as i64).into());
            conds.push(format!("id < ?{}", args.len()));
        }
        sql.push_str(&conds.join(" AND "));
        let limit = q.limit.max(1);
        sql.push_str(&format!(" ORDER BY id LIMIT {}", limit + 1));
        let mut stmt = c.prepare_cached(&sql)?;
        let mut rows = stmt.query(params_from_iter(args.iter()))?;
        let mut page = Page::default();
        while let Some(r) = rows.next()? {
            if page.rows.len() == limit {
                page.more = true;
                break;
            }
            page.rows.push(row::read(r, q.detail)?);
        }
        Ok(page)
    }

    /// Adds the archived jobs that ran inside `totals`' window to it.
    pub fn add_usage(&self, totals: &mut Totals) -> Result<()> {
        Ok(report::add_archived(&self.read.lock(), totals)?)
    }
}

/// How far submit times may run backwards in id order (a new leader's clock a little
/// behind the old one's) for the id bound of a time window still to hold.
const SUBMIT_ORDER_SLACK_MS: u64 = 3_600_000;

/// The smallest id of a job submitted after `ms`, by bisection over ids (ids are handed
/// out in submit order).
fn first_submitted_after(c: &Connection, ms: u64) -> rusqlite::Result<Option<u64>> {
    let mut stmt =
        c.prepare_cached("SELECT id, submit_ms FROM jobs WHERE id >= ?1 ORDER BY id LIMIT 1")?;
    let mut at = |id: u64| -> rusqlite::Result<Option<(u64, u64)>> {
        stmt.query_row([id as i64], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .optional()
    };
    let Some((mut lo, first_ms)) = at(0)? else {
        return Ok(None);
    };
    if first_ms > ms {
        return Ok(Some(lo));
    }
    let max: i64 = c.query_row("SELECT max(id) FROM jobs", [], |r| r.get(0))?;
    let mut hi = max as u64 + 1;
    // Invariant: the job at or after `lo` was submitted by `ms`; none at or after `hi`
    // is known to be.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match at(mid)? {
            Some((id, sub)) if sub <= ms => lo = id.max(mid),
            _ => hi = mid,
        }
    }
    Ok((hi <= max as u64).then_some(hi))
}

#[cfg(test)]
mod tests;
