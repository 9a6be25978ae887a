//! Parser for `nvidia-smi topo -m`, tolerant of every layout seen in the wild: tabs or
//! spaces, ANSI codes in the header, old `mlx5_0`-style NIC columns or `NIC#` columns with a
//! NIC legend, optional `CPU Affinity`, `NUMA Affinity` and `GPU NUMA ID` columns, `N/A`,
//! cells glued together by a lost tab (`NIC8NIC9`, `NODEPXB`), empty affinity cells (read
//! by column position), and legends or further matrices after the first. A paste that lacks GPU rows or cells is refused with an error
//! saying what is missing.

use gsched_types::topology::{Gpu, LinkClass, Nic, NicKind, NumaNode, Topology};
use std::collections::BTreeMap;

/// Why a `topo -m` text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopoParseError {
    #[error("no header row with GPU0 found: is this `nvidia-smi topo -m` output?")]
    NoHeader,
    #[error("the header lists no GPU columns")]
    NoGpus,
    #[error(
        "row {row} has {found} link cells but the header has {expected} device columns (partial paste?)"
    )]
    ShortRow {
        row: String,
        found: usize,
        expected: usize,
    },
    #[error(
        "GPU rows missing: header has {expected} GPUs, found rows for {found} (partial paste?)"
    )]
    MissingGpuRows { expected: usize, found: usize },
    #[error("row {row}: {message}")]
    BadCell { row: String, message: String },
}

fn is_link_token(t: &str) -> bool {
    t.parse::<LinkClass>().is_ok() && t != "N/A" && !t.is_empty()
}

/// Splits `NODEPXB` into `NODE`, `PXB`; returns `None` if `t` is not made of link tokens.
fn split_glued_links(t: &str) -> Option<Vec<String>> {
    if is_link_token(t) {
        return Some(vec![t.to_string()]);
    }
    let mut out = Vec::new();
    let mut rest = t;
    'outer: while !rest.is_empty() {
        for prefix in ["NODE", "PIX", "PXB", "PHB", "SYS", "SOC", "X"] {
            if let Some(r) = rest.strip_prefix(prefix) {
                out.push(prefix.to_string());
                rest = r;
                continue 'outer;
            }
        }
        if let Some(r) = rest.strip_prefix("NV") {
            let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() {
                return None;
            }
            out.push(format!("NV{digits}"));
            rest = &r[digits.len()..];
            continue;
        }
        return None;
    }
    (out.len() > 1).then_some(out)
}

/// Splits a header token that may hold several device names glued together (`NIC8NIC9`).
fn split_glued_devices(t: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        let prefix = ["GPU", "NIC"].into_iter().find(|p| rest.starts_with(p));
        let Some(p) = prefix else {
            out.push(rest.to_string());
            break;
        };
        let digits: String = rest[p.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if digits.is_empty() {
            out.push(rest.to_string());
            break;
        }
        let len = p.len() + digits.len();
        out.push(rest[..len].to_string());
        rest = &rest[len..];
    }
    out
}

/// A cell's text with the column it starts at.
type Positioned = (usize, String);

/// The columns after the link matrix, in header order.
const AFFINITY_COLUMNS: [&str; 3] = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"];

/// The line as a terminal shows it: tabs expanded to 8-column stops. nvidia-smi pads
/// every cell with tabs to its column, so a cell's start lines up with its header.
fn expand_tabs(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 32);
    let mut col = 0;
    for c in line.chars() {
        if c == '\t' {
            let next = (col / 8 + 1) * 8;
            out.extend(std::iter::repeat_n(' ', next - col));
            col = next;
        } else {
            out.push(c);
            col += 1;
        }
    }
    out
}

/// Whitespace-separated tokens with the column each starts at.
fn tokens_at(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                out.push((s, &line[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &line[s..]));
    }
    out
}

/// The affinity cells of a GPU row by column name. With one value per column they go in
/// order; with fewer (an empty cell: nvidia-smi leaves CPU Affinity empty inside a
/// restricted cpuset) each value goes to the column it starts under, so an empty CPU
/// Affinity never shifts the NUMA node into its place.
fn affinity_cells(
    cols: &[(usize, &'static str)],
    trailing: &[Positioned],
) -> BTreeMap<&'static str, String> {
    if trailing.len() == cols.len() {
        return cols
            .iter()
            .zip(trailing)
            .map(|((_, name), (_, v))| (*name, v.clone()))
            .collect();
    }
    let mut out = BTreeMap::new();
    for (at, v) in trailing {
        if let Some((_, name)) = cols.iter().rev().find(|(start, _)| *start <= at + 1) {
            out.entry(*name).or_insert_with(|| v.clone());
        }
    }
    out
}

/// Parses `nvidia-smi topo -m` output into a topology (GPU facts from the matrix only: no
/// UUIDs, bus ids or models). NIC kinds are inferred from names (`mlx5_*` = RDMA HCA).
pub fn parse_topo_matrix(text: &str) -> Result<Topology, TopoParseError> {
    let clean = crate::strip_ansi(text);
    let lines: Vec<&str> = clean.lines().collect();
    let header_idx = lines
        .iter()
        .position(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            match toks.iter().position(|t| t.starts_with("GPU0")) {
                Some(p) => toks
                    .get(p + 1)
                    .is_none_or(|next| split_glued_links(next).is_none()),
                None => false,
            }
        })
        .ok_or(TopoParseError::NoHeader)?;
    let header = lines[header_idx];
    let (device_part, tail) = match header.find("CPU Affinity") {
        Some(i) => (&header[..i], &header[i..]),
        None => (header, ""),
    };
    let has_cpu = tail.contains("CPU Affinity");
    let has_numa = tail.contains("NUMA Affinity");
    let header_wide = expand_tabs(header);
    let affinity_cols: Vec<(usize, &'static str)> = AFFINITY_COLUMNS
        .iter()
        .filter_map(|name| header_wide.find(name).map(|at| (at, *name)))
        .collect();
    let columns: Vec<String> = device_part
        .split_whitespace()
        .flat_map(split_glued_devices)
        .collect();
    let gpu_cols: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.starts_with("GPU"))
        .map(|(i, _)| i)
        .collect();
    if gpu_cols.is_empty() {
        return Err(TopoParseError::NoGpus);
    }
    let nic_cols: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.starts_with("GPU"))
        .map(|(i, _)| i)
        .collect();
    let n_gpus = gpu_cols.len();

    // NIC legend ("  NIC0: mlx5_0") anywhere after the matrix.
    let mut legend: BTreeMap<String, String> = BTreeMap::new();
    for l in &lines[header_idx + 1..] {
        let t = l.trim();
        if let Some((k, v)) = t.split_once(':') {
            let k = k.trim();
            if k.starts_with("NIC")
                && k[3..].chars().all(|c| c.is_ascii_digit())
                && !k[3..].is_empty()
            {
                legend.insert(k.to_string(), v.trim().to_string());
            }
        }
    }

    let mut gpu_rows: BTreeMap<usize, (Vec<LinkClass>, Vec<Positioned>)> = BTreeMap::new();
    for line in &lines[header_idx + 1..] {
        let wide = expand_tabs(line);
        let mut tokens = tokens_at(&wide).into_iter();
        let Some((_, label)) = tokens.next() else {
            if !gpu_rows.is_empty() {
                break;
            }
            continue;
        };
        let Some(col) = columns.iter().position(|c| c == label) else {
            if !gpu_rows.is_empty() || label.starts_with("Legend") {
                break;
            }
            continue;
        };
        if !label.starts_with("GPU") {
            continue;
        }
        let mut cells: Vec<LinkClass> = Vec::new();
        let mut trailing: Vec<Positioned> = Vec::new();
        for (at, tok) in tokens {
            if cells.len() < columns.len()
                && let Some(parts) = split_glued_links(tok)
            {
                for p in parts {
                    let class = p.parse().map_err(|e: String| TopoParseError::BadCell {
                        row: label.into(),
                        message: e,
                    })?;
                    cells.push(class);
                }
                continue;
            }
            trailing.push((at, tok.to_string()));
        }
        if cells.len() != columns.len() {
            return Err(TopoParseError::ShortRow {
                row: label.into(),
                found: cells.len(),
                expected: columns.len(),
            });
        }
        if cells[col] != LinkClass::SameDevice {
            return Err(TopoParseError::BadCell {
                row: label.into(),
                message: format!("diagonal cell is {}, expected X", cells[col]),
            });
        }
        let gpu_index = gpu_cols.iter().position(|&c| c == col).unwrap_or(0);
        gpu_rows.insert(gpu_index, (cells, trailing));
    }
    if gpu_rows.len() != n_gpus {
        return Err(TopoParseError::MissingGpuRows {
            expected: n_gpus,
            found: gpu_rows.len(),
        });
    }

    let mut topo = Topology::empty("nvidia-smi topo -m");
    let mut numa_cpus: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (i, (cells, trailing)) in &gpu_rows {
        let mut gpu = Gpu::new(*i as u32);
        let affinity = affinity_cells(&affinity_cols, trailing);
        if has_cpu
            && let Some(c) = affinity.get("CPU Affinity")
            && gsched_types::cpulist::parse(c).is_ok()
            && c != "N/A"
        {
            gpu.cpus = Some(c.clone());
        }
        if has_numa && let Some(nm) = affinity.get("NUMA Affinity") {
            gpu.numa_node = nm.parse().ok();
        }
        if let (Some(numa), Some(cpus)) = (gpu.numa_node, gpu.cpus.as_deref()) {
            numa_cpus
                .entry(numa)
                .or_default()
                .extend(gsched_types::cpulist::parse(cpus).unwrap_or_default());
        }
        topo.gpus.push(gpu);
        topo.gpu_links
            .push(gpu_cols.iter().map(|&c| cells[c]).collect());
        topo.gpu_nic_links
            .push(nic_cols.iter().map(|&c| cells[c]).collect());
    }
    for &c in &nic_cols {
        let col_name = &columns[c];
        let name = legend
            .get(col_name)
            .cloned()
            .unwrap_or_else(|| col_name.clone());
        let rdma = [
            "mlx", "bnxt_re", "irdma", "efa", "hfi", "qedr", "erdma", "ionic",
        ]
        .iter()
        .any(|p| name.starts_with(p));
        let mut nic = Nic::new(&name, if rdma { NicKind::Ib } else { NicKind::Ethernet });
        if rdma {
            nic.rdma_device = Some(name.clone());
            nic.rdma_port = Some(1);
        }
        topo.nics.push(nic);
    }
    if topo.nics.is_empty() {
        topo.gpu_nic_links.clear();
    }
    for (id, mut cpus) in numa_cpus {
        cpus.sort_unstable();
        cpus.dedup();
        topo.numa_nodes.push(NumaNode {
            id,
            cpus: gsched_types::cpulist::format(&cpus),
            memory_mib: None,
        });
    }
    let all: usize = topo
        .gpus
        .iter()
        .filter_map(|g| g.cpus.as_deref())
        .flat_map(|c| gsched_types::cpulist::parse(c).unwrap_or_default())
        .collect::<std::collections::BTreeSet<u32>>()
        .len();
    if all > 0 {
        topo.cpus = Some(all as u32);
    }
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glued_cells_split() {
        assert_eq!(split_glued_links("NODEPXB").unwrap(), vec!["NODE", "PXB"]);
        assert_eq!(split_glued_links("NV18").unwrap(), vec!["NV18"]);
        assert!(split_glued_links("0-55,112-167").is_none());
        assert_eq!(split_glued_devices("NIC8NIC9"), vec!["NIC8", "NIC9"]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(parse_topo_matrix(""), Err(TopoParseError::NoHeader));
        assert!(parse_topo_matrix("GPU0 GPU1\nGPU0 X\nGPU1 NV1 X").is_err());
        assert!(parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV4\n").is_err());
    }
}
