//! Usage reports (`greport`): GPU-hours and jobs inside a time window, grouped by user
//! and account, account, partition, node or GPU model. Archived jobs and the running
//! ones the server adds go through the same `Totals`.

use gsched_types::report::{Group, UsageRow};
use std::collections::BTreeMap;

/// A job as a report counts it.
#[derive(Debug, Clone)]
pub struct Item<'a> {
    pub user: &'a str,
    pub account: &'a str,
    pub partition: &'a str,
    pub node_list: &'a str,
    pub gpus_per_node: u32,
    pub gpus: u32,
    pub gpu_model: Option<&'a str>,
    pub start_ms: u64,
    /// Its end, or now for a running job.
    pub end_ms: u64,
}

/// Sums per group over a window.
#[derive(Debug, Clone)]
pub struct Totals {
    group: Group,
    since_ms: u64,
    until_ms: u64,
    sums: BTreeMap<(String, String), (u64, u64)>,
}

impl Totals {
    /// Empty totals over `[since_ms, until_ms]` (`until_ms` 0: open).
    pub fn new(group: Group, since_ms: u64, until_ms: u64) -> Totals {
        Totals {
            group,
            since_ms,
            until_ms: if until_ms == 0 { u64::MAX } else { until_ms },
            sums: BTreeMap::new(),
        }
    }

    /// The part of `[start, end]` inside the window, in ms.
    fn inside(&self, start: u64, end: u64) -> u64 {
        end.min(self.until_ms)
            .saturating_sub(start.max(self.since_ms))
    }

    pub fn add(&mut self, item: &Item<'_>) {
        let ms = self.inside(item.start_ms, item.end_ms);
        if ms == 0 {
            return;
        }
        let mut count = |key: (String, String), gpu_ms: u64| {
            let e = self.sums.entry(key).or_default();
            e.0 += 1;
            e.1 += gpu_ms;
        };
        let whole = u64::from(item.gpus) * ms;
        match self.group {
            Group::User => count((item.user.into(), item.account.into()), whole),
            Group::Account => count((item.account.into(), String::new()), whole),
            Group::Partition => count((item.partition.into(), String::new()), whole),
            Group::GpuModel => count(
                (item.gpu_model.unwrap_or("unknown").into(), String::new()),
                whole,
            ),
            Group::Node => {
                let nodes = gsched_types::hostlist::expand(item.node_list).unwrap_or_default();
                for n in nodes {
                    count((n, String::new()), u64::from(item.gpus_per_node) * ms);
                }
            }
        }
    }

    /// GPU-hours of every row together.
    pub fn gpu_hours(&self) -> f64 {
        let ms: u64 = self.sums.values().map(|v| v.1).sum();
        (ms as f64 / 3_600_000.0 * 100.0).round() / 100.0
    }

    /// The rows, most GPU-hours first.
    pub fn rows(&self) -> Vec<UsageRow> {
        let total: u64 = self.sums.values().map(|v| v.1).sum();
        let mut rows: Vec<UsageRow> = self
            .sums
            .iter()
            .map(|((a, b), (jobs, gpu_ms))| {
                let mut row = UsageRow {
                    user: None,
                    account: None,
                    partition: None,
                    node: None,
                    gpu_model: None,
                    jobs: *jobs,
                    gpu_hours: (*gpu_ms as f64 / 3_600_000.0 * 100.0).round() / 100.0,
                    share_pct: if total == 0 {
                        0.0
                    } else {
                        (*gpu_ms as f64 * 1000.0 / total as f64).round() / 10.0
                    },
                };
                match self.group {
                    Group::User => {
                        row.user = Some(a.clone());
                        row.account = Some(b.clone());
                    }
                    Group::Account => row.account = Some(a.clone()),
                    Group::Partition => row.partition = Some(a.clone()),
                    Group::Node => row.node = Some(a.clone()),
                    Group::GpuModel => row.gpu_model = Some(a.clone()),
                }
                row
            })
            .collect();
        rows.sort_by(|x, y| {
            y.gpu_hours
                .total_cmp(&x.gpu_hours)
                .then_with(|| y.jobs.cmp(&x.jobs))
        });
        rows
    }
}

/// Adds every archived job that ran inside the window to `totals`.
pub(crate) fn add_archived(c: &rusqlite::Connection, totals: &mut Totals) -> rusqlite::Result<()> {
    let mut stmt = c.prepare_cached(
        "SELECT user, account, partition, node_list, gpus_per_node, gpus, gpu_model, start_ms, end_ms FROM jobs WHERE end_ms >= ?1 AND start_ms IS NOT NULL AND start_ms <= ?2",
    )?;
    let until = totals.until_ms.min(i64::MAX as u64) as i64;
    let mut rows = stmt.query(rusqlite::params![totals.since_ms as i64, until])?;
    while let Some(r) = rows.next()? {
        let (user, account, partition, node_list): (String, String, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let model: Option<String> = r.get(6)?;
        totals.add(&Item {
            user: &user,
            account: &account,
            partition: &partition,
            node_list: &node_list,
            gpus_per_node: r.get(4)?,
            gpus: r.get(5)?,
            gpu_model: model.as_deref(),
            start_ms: r.get::<_, i64>(7)? as u64,
            end_ms: r.get::<_, i64>(8)? as u64,
        });
    }
    Ok(())
}
