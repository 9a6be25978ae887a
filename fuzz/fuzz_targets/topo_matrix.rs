//! `nvidia-smi topo -m` text: any input parses or fails with an error, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = gsched_topology::parse_topo_matrix(gsched_topology::strip_fixture_header(&text));
    let _ = gsched_topology::strip_ansi(&text);
});
