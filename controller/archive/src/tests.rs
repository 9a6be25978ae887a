//! The archive's tests: upserts by id and cursor, paged queries by user, state, partition,
//! window and id, and the GPU-hour totals reports read.

use super::*;
use gsched_types::job::JobId;

/// An ended job of `user` submitted at `t` s, run for `secs` on `gpus` GPUs of `node`.
pub(crate) fn ended(id: u64, user: &str, t: u64, secs: u64, gpus: u32, node: &str) -> JobRow {
    JobRow {
        job_id: JobId(id),
        array_job_id: None,
        array_task_id: None,
        display_id: id.to_string(),
        name: format!("train-{id}"),
        user: user.into(),
        account: format!("{user}-lab"),
        partition: "gpu".into(),
        qos: None,
        state: if id.is_multiple_of(7) {
            JobState::Failed
        } else {
            JobState::Completed
        },
        reason: "None".into(),
        failure: None,
        exit_code: Some(if id.is_multiple_of(7) { 1 } else { 0 }),
        nodes: 1,
        node_list: node.into(),
        gpus_per_node: gpus,
        gpus,
        attempt: 0,
        held: false,
        submit_ms: t * 1000,
        start_ms: Some(t * 1000 + 5000),
        end_ms: Some((t + 5 + secs) * 1000),
        expected_start_ms: None,
        time_limit_s: Some(86_400),
        allocation: None,
        runs: Vec::new(),
        attempts: Vec::new(),
        spec: None,
        steps: Vec::new(),
        warnings: Vec::new(),
        idle: None,
        usage: Vec::new(),
        comment: None,
        wckey: None,
        notices: Vec::new(),
    }
}

fn open() -> (tempfile::TempDir, Archive) {
    let dir = tempfile::tempdir().unwrap();
    let a = Archive::open(&dir.path().join("accounting.sqlite")).unwrap();
    (dir, a)
}

fn record(a: &Archive, rows: Vec<JobRow>) {
    let jobs: Vec<(JobRow, Extra)> = rows
        .into_iter()
        .map(|r| {
            (
                r,
                Extra {
                    gpu_model: Some("RTX 4090".into()),
                },
            )
        })
        .collect();
    let last = jobs.last().map(|(r, _)| Cursor {
        job: r.job_id.0,
        end_ms: r.end_ms.unwrap(),
    });
    a.record(&jobs, last).unwrap();
}

fn all(a: &Archive, mut q: Query) -> Vec<u64> {
    let mut ids = Vec::new();
    loop {
        let page = a.query(&q).unwrap();
        ids.extend(page.rows.iter().map(|r| r.job_id.0));
        if !page.more {
            return ids;
        }
        q.after = *ids.last().unwrap();
    }
}

#[test]
fn rows_come_back_as_they_went_in_and_upserts_replace() {
    let (_d, a) = open();
    let mut row = ended(5, "alice", 100, 3600, 2, "n1");
    row.failure = Some(gsched_types::Failure::new(
        gsched_types::FailureKind::NcclTimeout,
        "watchdog caught collective operation timeout",
        5,
    ));
    row.usage = vec![gsched_types::usage::NodeUsage {
        node: "n1".into(),
        interval_s: 30,
        sampled_s: 3600,
        gpus: vec![gsched_types::usage::GpuUsage::new(0)],
        cpu_ms: 10,
        cpus: 4,
        mem_max_mib: 100,
        mem_limit_mib: 1000,
    }];
    record(&a, vec![row.clone()]);
    assert_eq!(
        a.cursor().unwrap(),
        Some(Cursor {
            job: 5,
            end_ms: row.end_ms.unwrap()
        })
    );
    let detailed = a
        .query(&Query {
            ids: vec![5],
            limit: 10,
            detail: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(detailed.rows, vec![row.clone()]);
    let summary = a
        .query(&Query {
            ids: vec![5],
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    let mut short = row.clone();
    short.allocation = None;
    short.runs.clear();
    short.attempts.clear();
    short.usage.clear();
    assert_eq!(
        summary.rows,
        vec![short],
        "a summary is the row without its heavy parts"
    );
    // The same job again (a replayed window) replaces, never duplicates.
    row.name = "renamed".into();
    record(&a, vec![row.clone()]);
    assert_eq!(a.len().unwrap(), 1);
    let again = a
        .query(&Query {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(again.rows[0].name, "renamed");
}

#[test]
fn pages_walk_every_match_once_in_id_order_under_each_filter() {
    let (_d, a) = open();
    // 1,000 jobs, one a minute, users round-robin, each running 30 minutes.
    let rows: Vec<JobRow> = (1..=1000)
        .map(|i| {
            ended(
                i,
                ["alice", "bob", "carol"][(i % 3) as usize],
                i * 60,
                1800,
                1,
                "n1",
            )
        })
        .collect();
    record(&a, rows.clone());
    let page = |q: Query| all(&a, Query { limit: 37, ..q });
    assert_eq!(page(Query::default()), (1..=1000).collect::<Vec<_>>());
    let since = 500 * 60 * 1000;
    let until = 700 * 60 * 1000;
    let expect = |f: &dyn Fn(&JobRow) -> bool| -> Vec<u64> {
        rows.iter().filter(|r| f(r)).map(|r| r.job_id.0).collect()
    };
    let in_window = |r: &JobRow| r.end_ms.unwrap() >= since && r.submit_ms <= until;
    assert_eq!(
        page(Query {
            since_ms: since,
            until_ms: until,
            ..Default::default()
        }),
        expect(&in_window)
    );
    assert_eq!(
        page(Query {
            since_ms: since,
            until_ms: until,
            users: vec!["bob".into()],
            ..Default::default()
        }),
        expect(&|r| in_window(r) && r.user == "bob")
    );
    assert_eq!(
        page(Query {
            states: vec![JobState::Failed],
            ..Default::default()
        }),
        expect(&|r| r.state == JobState::Failed)
    );
    assert!(
        page(Query {
            partition: Some("cpu".into()),
            ..Default::default()
        })
        .is_empty()
    );
    assert_eq!(
        page(Query {
            ids: vec![3, 999, 5000],
            ..Default::default()
        }),
        vec![3, 999]
    );
    // A window after every job, and one before them.
    assert!(
        page(Query {
            since_ms: 10_000_000_000,
            ..Default::default()
        })
        .is_empty()
    );
    assert!(
        page(Query {
            until_ms: 1,
            ..Default::default()
        })
        .is_empty()
    );
}

#[test]
fn usage_counts_only_time_inside_the_window_per_group() {
    let (_d, a) = open();
    // alice: 2 GPUs for 2 h from t=0; bob: 4 GPUs for 1 h from t=1 h, on n[1-2].
    let mut bob = ended(2, "bob", 3600 - 5, 3600, 4, "n[1-2]");
    bob.gpus_per_node = 2;
    bob.nodes = 2;
    record(&a, vec![ended(1, "alice", 0, 7200, 2, "n1"), bob]);
    let rows = |group, since_h: u64, until_h: u64| {
        let mut t = Totals::new(group, since_h * 3_600_000, until_h * 3_600_000);
        a.add_usage(&mut t).unwrap();
        t.rows()
    };
    let by_user = rows(Group::User, 0, 3);
    assert_eq!(by_user.len(), 2);
    assert_eq!(
        (by_user[0].user.as_deref(), by_user[0].gpu_hours),
        (Some("alice"), 4.0)
    );
    assert_eq!(by_user[0].account.as_deref(), Some("alice-lab"));
    assert_eq!(by_user[1].gpu_hours, 4.0);
    // Only the second hour: alice 2 GPU-h, bob 4 GPU-h.
    let second = rows(Group::User, 1, 2);
    assert_eq!(second[0].user.as_deref(), Some("bob"));
    assert_eq!((second[0].gpu_hours, second[1].gpu_hours), (4.0, 2.0));
    assert_eq!(second[0].share_pct, 66.7);
    let nodes = rows(Group::Node, 0, 3);
    let n1 = nodes
        .iter()
        .find(|r| r.node.as_deref() == Some("n1"))
        .unwrap();
    let n2 = nodes
        .iter()
        .find(|r| r.node.as_deref() == Some("n2"))
        .unwrap();
    assert_eq!((n1.gpu_hours, n2.gpu_hours), (6.0, 2.0));
    assert_eq!(
        rows(Group::GpuModel, 0, 3)[0].gpu_model.as_deref(),
        Some("RTX 4090")
    );
    assert!(rows(Group::Account, 5, 6).is_empty());
}

#[test]
fn a_damaged_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accounting.sqlite");
    std::fs::write(&path, vec![7u8; 8192]).unwrap();
    let err = Archive::open(&path).err().expect("refused").to_string();
    assert!(err.contains("move it aside and restart"), "{err}");
}
