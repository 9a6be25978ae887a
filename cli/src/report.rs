//! `greport` (sreport) and `gctl share` (sshare): asks the controller for a report and
//! prints it as a table, `|`-separated fields or JSON.

use crate::client::{self, Client};
use crate::format::Table;
use gsched_proto::contract::Carries;
use gsched_types::parse::{format_duration, format_timestamp};
use gsched_types::report::{Group, ReportReply, ReportRequest, ShareRow, UsageReport};

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Table,
    /// Fields split by `|` (sreport/sshare `-P`).
    Parsable,
    Json,
}

/// Asks for `req`; exits with the controller's word when it refuses.
pub fn fetch(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    req: &ReportRequest,
    tool: &str,
) -> ReportReply {
    let msg = gsched_proto::pb::ReportRequest::carrying(req);
    let reply = rt
        .block_on(client.call(|mut c| {
            let msg = msg.clone();
            async move { c.report(msg).await }
        }))
        .unwrap_or_else(|s| client::die(tool, client::describe(&s)));
    crate::doc_of(&reply, tool)
}

fn print(headers: &[(&str, bool)], rows: Vec<Vec<String>>, layout: Layout, header: bool) -> String {
    let mut out = String::new();
    if layout == Layout::Parsable {
        if header {
            let names: Vec<&str> = headers.iter().map(|(h, _)| *h).collect();
            out.push_str(&names.join("|"));
            out.push('\n');
        }
        for r in rows {
            out.push_str(&r.join("|"));
            out.push('\n');
        }
        return out;
    }
    let mut t = Table::new(headers);
    for r in rows {
        t.row(r);
    }
    let text = t.render();
    if header {
        text
    } else {
        text.lines().skip(1).map(|l| format!("{l}\n")).collect()
    }
}

/// A usage report as text: the window and the cluster's use, then a row per group.
pub fn render_usage(r: &UsageReport, top: Option<usize>, layout: Layout, header: bool) -> String {
    let first: &[(&str, bool)] = match r.group {
        Group::User => &[("User", false), ("Account", false)],
        Group::Account => &[("Account", false)],
        Group::Partition => &[("Partition", false)],
        Group::Node => &[("Node", false)],
        Group::GpuModel => &[("GPUModel", false)],
    };
    let mut headers: Vec<(&str, bool)> = first.to_vec();
    headers.extend([("Jobs", true), ("GPU-hours", true), ("Share", true)]);
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .take(top.unwrap_or(usize::MAX))
        .map(|row| {
            let key = |v: &Option<String>| v.clone().unwrap_or_default();
            let mut cells = match r.group {
                Group::User => vec![key(&row.user), key(&row.account)],
                Group::Account => vec![key(&row.account)],
                Group::Partition => vec![key(&row.partition)],
                Group::Node => vec![key(&row.node)],
                Group::GpuModel => vec![key(&row.gpu_model)],
            };
            cells.extend([
                row.jobs.to_string(),
                format!("{:.2}", row.gpu_hours),
                format!("{:.1}%", row.share_pct),
            ]);
            cells
        })
        .collect();
    let mut out = String::new();
    if layout == Layout::Table && header {
        out.push_str(&format!(
            "Usage {} - {} ({})\nGPU-hours used: {:.2} of {:.2} ({:.1}% of the cluster's GPUs)\n\n",
            format_timestamp(r.since_ms),
            format_timestamp(r.until_ms),
            format_duration(r.until_ms.saturating_sub(r.since_ms) / 1000),
            r.gpu_hours,
            r.capacity_gpu_hours,
            r.utilisation_pct
        ));
    }
    out.push_str(&print(&headers, rows, layout, header));
    out
}

/// The fair-share table as text (sshare's columns).
pub fn render_share(rows: &[ShareRow], layout: Layout, header: bool) -> String {
    let headers = [
        ("Account", false),
        ("User", false),
        ("RawShares", true),
        ("NormShares", true),
        ("GPU-hours", true),
        ("NormUsage", true),
        ("FairShare", true),
    ];
    let cells = rows
        .iter()
        .map(|r| {
            let account = if r.user.is_empty() {
                r.account.clone()
            } else {
                format!(" {}", r.account)
            };
            vec![
                account,
                r.user.clone(),
                format!("{}", r.raw_shares),
                format!("{:.6}", r.norm_shares),
                format!("{:.2}", r.usage_gpu_hours),
                format!("{:.6}", r.norm_usage),
                format!("{:.6}", r.fairshare),
            ]
        })
        .collect();
    print(&headers, cells, layout, header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_types::report::UsageRow;

    fn report() -> UsageReport {
        let row = |user: &str, gpu_hours: f64, share_pct: f64| UsageRow {
            user: Some(user.into()),
            account: Some("lab".into()),
            partition: None,
            node: None,
            gpu_model: None,
            jobs: 2,
            gpu_hours,
            share_pct,
        };
        UsageReport {
            group: Group::User,
            since_ms: 0,
            until_ms: 3_600_000,
            gpu_hours: 6.0,
            capacity_gpu_hours: 8.0,
            utilisation_pct: 75.0,
            rows: vec![row("alice", 4.0, 66.7), row("bob", 2.0, 33.3)],
        }
    }

    #[test]
    fn a_usage_report_prints_the_cluster_line_and_a_row_per_user() {
        let text = render_usage(&report(), None, Layout::Table, true);
        assert!(
            text.contains("GPU-hours used: 6.00 of 8.00 (75.0% of the cluster's GPUs)"),
            "{text}"
        );
        let alice = text.lines().find(|l| l.starts_with("alice")).expect(&text);
        assert!(alice.contains("4.00") && alice.contains("66.7%"), "{text}");
        let top = render_usage(&report(), Some(1), Layout::Parsable, true);
        assert_eq!(
            top,
            "User|Account|Jobs|GPU-hours|Share\nalice|lab|2|4.00|66.7%\n"
        );
    }
}
