//! Values users type into gsub options and #SBATCH lines: times, sizes, GPU requests,
//! arrays, dependencies, --signal specs, host lists, CPU lists and masks.
#![no_main]
use gsched_types::{cpulist, hostlist, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse::time_limit(&text);
    let _ = parse::mem_mb(&text);
    let _ = parse::gres(&text);
    let _ = parse::gpus(&text, "--gpus");
    let _ = parse::count(&text, "--nodes");
    let _ = parse::array(&text);
    let _ = parse::dependency(&text);
    let _ = parse::warn_signal(&text);
    if let Ok(hosts) = hostlist::expand(&text) {
        let _ = hostlist::compress(&hosts);
    }
    if let Ok(cpus) = cpulist::parse(&text) {
        let _ = cpulist::format(&cpus);
    }
    let _ = cpulist::parse_mask(&text);
});
