//! nvidia-smi tables, `-L` lists, CSV query rows, device errors and remapped rows.
#![no_main]
use gsched_topology::smi;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let table = smi::parse_table(&text);
    let _ = smi::missing(8, &table);
    let _ = smi::parse_list(&text);
    let _ = smi::handle_errors(&text);
    let _ = smi::remapped_rows(&text);
    for line in text.lines() {
        let _ = smi::parse_query_row(line);
    }
});
