//! Pure parsers that turn what GPU nodes print into gsched's topology model and health
//! events: `nvidia-smi topo -m`, `nvidia-smi` tables and queries, kernel Xid lines,
//! InfiniBand tools' output, and the documented fake-topology JSON.
//!
//! Nothing here touches the machine: the agent reads files and runs tools, these modules
//! only parse the text they are given. Every parser returns an error (never panics) on
//! malformed input.

pub mod fake;
pub mod ib;
pub mod nv_status;
pub mod nvlink;
pub mod pci;
pub mod render;
pub mod smi;
pub mod topo_matrix;
pub mod xid;
pub mod xid_catalog;

pub use fake::parse_topology_file;
pub use topo_matrix::parse_topo_matrix;

/// Removes ANSI escape sequences (`\x1b[4m` ... `\x1b[0m`) that nvidia-smi puts around
/// header rows when writing to a terminal.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Drops a fixture's `# ...` provenance header up to `# ===== END HEADER` (used by tests and
/// by `--nvidia-smi-topo FILE` so saved fixtures can be fed directly).
pub fn strip_fixture_header(text: &str) -> &str {
    match text.find("===== END HEADER") {
        Some(i) => match text[i..].find('\n') {
            Some(j) => &text[i + j + 1..],
            None => "",
        },
        None => text,
    }
}
