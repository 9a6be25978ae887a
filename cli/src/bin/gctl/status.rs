//! `gctl status`: every reachable controller's Raft role, indexes, lag and digest.

use gsched_cli::client::{Client, die};
use gsched_cli::{out, outln};
use gsched_proto::contract::Carries;
use gsched_proto::pb;
use gsched_types::api::{Role, StatusList, StatusRow};

/// Asks every controller it can find (the configured ones and the peers they name) for
/// its status; fills in each one's lag behind the leader's commit index.
pub async fn status(client: &mut Client, addrs: Vec<String>, json: bool) {
    let mut seen: Vec<String> = addrs.clone();
    let mut rows: Vec<StatusRow> = Vec::new();
    let mut i = 0;
    while i < seen.len() {
        let addr = seen[i].clone();
        i += 1;
        let reply = client
            .call_on(&addr, |mut c| async move {
                c.status(pb::StatusRequest {}).await
            })
            .await;
        let row = reply
            .map_err(|e| e.message().to_string())
            .and_then(|r| r.document().map_err(|e| e.to_string()));
        match row {
            Ok(v) => {
                for a in v.peers.values() {
                    if !seen.contains(a) {
                        seen.push(a.clone());
                    }
                }
                if !rows.iter().any(|r| r.id == v.id) {
                    rows.push(v);
                }
            }
            Err(e) => {
                if !json {
                    eprintln!("gctl: {addr}: {e}");
                }
            }
        }
    }
    rows.sort_by_key(|r| r.id);
    let leader_commit = rows
        .iter()
        .filter(|r| r.role == Role::Leader)
        .map(|r| r.commit_index)
        .max()
        .unwrap_or(0);
    for r in &mut rows {
        r.lag = Some(leader_commit.saturating_sub(r.applied_index));
    }
    if json {
        gsched_cli::print_json(&StatusList { controllers: rows });
        return;
    }
    if rows.is_empty() {
        die("gctl", "no controller answered");
    }
    let mut t = gsched_cli::format::Table::new(&[
        ("ID", true),
        ("ADDRESS", false),
        ("ROLE", false),
        ("TERM", true),
        ("COMMIT", true),
        ("APPLIED", true),
        ("LAG", true),
        ("DIGEST", false),
        ("JOBS", true),
        ("NODES", true),
        ("DISK_MB", true),
    ]);
    for r in &rows {
        t.row(vec![
            r.id.to_string(),
            r.address.clone(),
            if r.storage_fault.is_some() {
                "DISK FAULT".into()
            } else {
                r.role.name().into()
            },
            r.term.to_string(),
            r.commit_index.to_string(),
            r.applied_index.to_string(),
            r.lag.unwrap_or(0).to_string(),
            r.state_digest.clone(),
            r.jobs.to_string(),
            r.nodes.to_string(),
            format!("{:.1}", r.disk_bytes as f64 / 1e6),
        ]);
    }
    out!("{}", t.render());
    for r in rows.iter().filter(|r| r.storage_fault.is_some()) {
        outln!(
            "controller {}: {} (free space in its --data-dir; it restarts itself every few seconds until it can write)",
            r.id,
            r.storage_fault.as_deref().unwrap_or_default()
        );
    }
}
