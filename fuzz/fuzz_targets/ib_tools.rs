//! ibdev2netdev, ibstat, ibstatus, ibv_devinfo, ifconfig and `ip addr` outputs.
#![no_main]
use gsched_topology::ib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ib::parse_ibdev2netdev(&text);
    for p in ib::parse_ibstat(&text)
        .into_iter()
        .chain(ib::parse_ibv_devinfo(&text))
        .chain(ib::parse_ibstatus(&text))
    {
        let _ = (p.is_roce(), p.mtu_degraded(), p.is_virtual_function());
    }
    let _ = ib::parse_ifconfig(&text);
    let _ = ib::parse_ip(&text);
    let _ = ib::natural(&text);
});
