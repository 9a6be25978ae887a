//! sysfs PCI paths and the link class between two of them.
#![no_main]
use gsched_topology::pci::{PciPath, classify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (a, b) = text.split_once('\n').unwrap_or((&text, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"));
    if let (Some(pa), Some(pb)) = (PciPath::parse(a), PciPath::parse(b)) {
        let _ = pa.device();
        let _ = classify(&pa, &pb, Some(0), None);
    }
});
