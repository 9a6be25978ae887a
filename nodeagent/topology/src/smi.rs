//! `nvidia-smi` outputs: the default table (every driver generation's layout), `-L`
//! (with MIG devices), `--query-gpu ... --format=csv,noheader,nounits` (`[N/A]` and
//! `[Not Supported]` are missing values), "Unable to determine the device handle" errors,
//! and the remapped-rows section of `-q` (annotated values such as `Yes   <===`); the
//! header's driver and CUDA versions under both their old names and driver 610's (`KMD
//! Version`, `CUDA UMD Version`). Used for the fallback path, inventory checks
//! (fewer GPUs than registered) and health.

use crate::xid::normalize_pci;

/// One GPU row of the default table.
#[derive(Debug, Clone, PartialEq)]
pub struct SmiGpu {
    pub index: u32,
    pub name: String,
    /// Normalised `0000:18:00` form.
    pub bus_id: String,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_cap_w: Option<u32>,
    pub ecc_uncorrected: Option<u64>,
    pub mig: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SmiTable {
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub gpus: Vec<SmiGpu>,
    /// Bus ids nvidia-smi could not open ("Unable to determine the device handle").
    pub failed: Vec<String>,
}

fn number(s: &str) -> Option<u64> {
    let digits: String = s
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Bus ids from "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"
/// (with or without a space after "GPU").
pub fn handle_errors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            // nvidia-smi has said "for GPU" and "for gpu".
            let pos = l.to_ascii_lowercase().find("device handle for gpu")?
                + "device handle for gpu".len();
            let rest = l[pos..].trim_start();
            let id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_hexdigit() || *c == ':' || *c == '.')
                .collect();
            let id = id.trim_end_matches(':');
            (!id.is_empty()).then(|| normalize_pci(id))
        })
        .collect()
}

/// Parses the default `nvidia-smi` table.
pub fn parse_table(text: &str) -> SmiTable {
    let mut t = SmiTable {
        failed: handle_errors(text),
        ..SmiTable::default()
    };
    let lines: Vec<&str> = text.lines().collect();
    // Driver 610 renamed them: "KMD Version:" and "CUDA UMD Version:".
    let after = |l: &str, labels: &[&str]| -> Option<String> {
        labels.iter().find_map(|label| {
            let p = l.find(label)? + label.len();
            l[p..]
                .split_whitespace()
                .next()
                .map(|s| s.trim_end_matches('|').to_string())
                .filter(|s| !s.is_empty())
        })
    };
    for l in &lines {
        if let Some(v) = after(l, &["Driver Version:", "KMD Version:"]) {
            t.driver = Some(v);
        }
        if let Some(v) = after(l, &["CUDA Version:", "CUDA UMD Version:"]) {
            t.cuda = Some(v);
        }
    }
    let mut i = 0;
    while i < lines.len() {
        let cells: Vec<&str> = lines[i].split('|').collect();
        // A GPU's first line: "|   0  NAME  Persistence | Bus-Id Disp.A | ECC |".
        if cells.len() >= 4 {
            let first = cells[1].trim();
            let mut words = first.split_whitespace();
            if let (Some(idx), Some(bus)) = (
                words.next().and_then(|w| w.parse::<u32>().ok()),
                cells[2].split_whitespace().next(),
            ) && bus.matches(':').count() >= 2
            {
                let name_words: Vec<&str> = words.collect();
                let name = name_words[..name_words.len().saturating_sub(1)].join(" ");
                let ecc = cells[3].trim();
                let second: Vec<&str> = lines
                    .get(i + 1)
                    .map(|l| l.split('|').collect())
                    .unwrap_or_default();
                let (mut temp, mut cap, mut used, mut total) = (None, None, None, None);
                if second.len() >= 3 {
                    let s1 = second[1];
                    temp = s1
                        .split_whitespace()
                        .find(|w| {
                            w.ends_with('C')
                                && w.len() > 1
                                && w[..w.len() - 1].chars().all(|c| c.is_ascii_digit())
                        })
                        .and_then(number)
                        .map(|v| v as u32);
                    // "N/A" has a slash too: the cap is after the last one.
                    cap = s1
                        .rsplit('/')
                        .next()
                        .filter(|_| s1.contains(" / "))
                        .and_then(|w| w.split_whitespace().next())
                        .and_then(number)
                        .map(|v| v as u32);
                    let mem: Vec<&str> = second[2].split('/').collect();
                    if mem.len() == 2 {
                        used = number(mem[0]);
                        total = number(mem[1]);
                    }
                }
                let third: Vec<&str> = lines
                    .get(i + 2)
                    .map(|l| l.split('|').collect())
                    .unwrap_or_default();
                let mig = third.get(3).map(|c| c.trim()).and_then(|c| match c {
                    "Disabled" => Some(false),
                    "Enabled" => Some(true),
                    _ => None,
                });
                t.gpus.push(SmiGpu {
                    index: idx,
                    name,
                    bus_id: normalize_pci(bus),
                    memory_used_mib: used,
                    memory_total_mib: total,
                    temperature_c: temp,
                    power_cap_w: cap,
                    ecc_uncorrected: number(ecc),
                    mig,
                });
            }
        }
        i += 1;
    }
    t
}

/// GPUs (and their MIG devices) from `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedGpu {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// (profile, uuid) of each MIG device.
    pub mig: Vec<(String, String)>,
}

pub fn parse_list(text: &str) -> Vec<ListedGpu> {
    let mut out: Vec<ListedGpu> = Vec::new();
    for l in text.lines() {
        let t = l.trim();
        let uuid = t
            .find("(UUID: ")
            .map(|p| t[p + 7..].trim_end_matches(')').to_string());
        if let Some(rest) = t.strip_prefix("GPU ") {
            let Some((idx, tail)) = rest.split_once(':') else {
                continue;
            };
            let Ok(index) = idx.trim().parse() else {
                continue;
            };
            let name = tail.split("(UUID").next().unwrap_or("").trim().to_string();
            out.push(ListedGpu {
                index,
                name,
                uuid: uuid.unwrap_or_default(),
                mig: Vec::new(),
            });
        } else if let Some(rest) = t.strip_prefix("MIG ") {
            let profile = rest.split_whitespace().next().unwrap_or("").to_string();
            if let (Some(gpu), Some(u)) = (out.last_mut(), uuid) {
                gpu.mig.push((profile, u));
            }
        }
    }
    out
}

/// One CSV row of `--query-gpu ... --format=csv,noheader,nounits`: `[N/A]` and
/// `[Not Supported]` become `None`.
pub fn parse_query_row(line: &str) -> Vec<Option<String>> {
    line.split(',')
        .map(|f| f.trim())
        .map(|f| {
            if f.starts_with('[') || f.is_empty() || f == "N/A" {
                None
            } else {
                Some(f.to_string())
            }
        })
        .collect()
}

/// GPUs an inventory expects but the table does not show (a GPU off the bus at boot).
pub fn missing(expected: usize, table: &SmiTable) -> usize {
    expected.saturating_sub(table.gpus.len())
}

/// Remapped-rows state per GPU from `nvidia-smi -q`: (bus id, pending, failure occurred).
pub fn remapped_rows(text: &str) -> Vec<(String, bool, bool)> {
    let mut out = Vec::new();
    let mut gpu: Option<String> = None;
    let mut in_remap = false;
    let (mut pending, mut failure) = (false, false);
    let flush = |gpu: &Option<String>,
                 pending: bool,
                 failure: bool,
                 in_remap: bool,
                 out: &mut Vec<(String, bool, bool)>| {
        // A `-q` fragment without its GPU header still says the state (no bus then).
        if in_remap {
            out.push((gpu.clone().unwrap_or_default(), pending, failure));
        }
    };
    for l in text.lines() {
        let t = l.trim();
        if let Some(id) = t
            .strip_prefix("GPU ")
            .filter(|r| r.matches(':').count() >= 2)
        {
            flush(&gpu, pending, failure, in_remap, &mut out);
            gpu = Some(normalize_pci(id.trim()));
            in_remap = false;
            pending = false;
            failure = false;
        } else if t.starts_with("Remapped Rows") {
            in_remap = true;
        } else if in_remap && let Some((k, v)) = t.split_once(':') {
            // Values may carry an annotation after them ("Yes   <===").
            let yes = v
                .split_whitespace()
                .next()
                .is_some_and(|w| w.eq_ignore_ascii_case("yes"));
            match k.trim() {
                "Pending" => pending = yes,
                "Remapping Failure Occurred" => failure = yes,
                _ => {}
            }
        }
    }
    flush(&gpu, pending, failure, in_remap, &mut out);
    out
}
