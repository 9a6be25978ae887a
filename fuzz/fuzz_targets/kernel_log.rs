//! Kernel log lines (Xid, SXid, fallen off the bus, PCIe AER, multi-line messages) and PCI
//! id normalisation.
#![no_main]
use gsched_topology::xid;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for ev in xid::parse_log(&text) {
        if let xid::KernelEvent::Xid(x) = ev {
            let _ = xid::classify(x.effective_code());
            let _ = xid::classify_event(&x);
        }
    }
    let _ = xid::normalize_pci(&text);
});
