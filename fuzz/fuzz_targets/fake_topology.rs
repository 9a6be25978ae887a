//! The `--fake-topology` loader (discovery JSON, TOML or topo -m text) and validation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(t) = gsched_topology::fake::parse_topology_text(&text) {
        let _ = t.validate();
        let _ = gsched_topology::render::render(&t, "fuzz");
    }
});
