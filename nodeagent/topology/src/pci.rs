//! Link classes from PCI paths: where two devices' paths through the PCIe tree meet says
//! whether traffic between them crosses at most one switch (PIX), several bridges (PXB),
//! the host bridge (PHB), host bridges of one NUMA node (NODE) or the inter-socket link
//! (SYS). This is how GPU-to-NIC distances are computed from sysfs, and a fallback for
//! GPU pairs when NVML is not available (NVLink is never inferred from PCIe paths).

use gsched_types::topology::LinkClass;

/// A device's position: its PCIe root (`pci0000:00`) and the chain of bridges and the
/// device itself below the root, e.g. from `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPath {
    pub root: String,
    pub chain: Vec<String>,
}

impl PciPath {
    /// Parses a sysfs device path (the target of `/sys/bus/pci/devices/<bdf>`). Path parts
    /// after the last PCI address (`virtio2/net/eth0`) are ignored.
    pub fn parse(path: &str) -> Option<PciPath> {
        let mut parts = path
            .split('/')
            .filter(|p| !p.is_empty())
            .skip_while(|p| !p.starts_with("pci"));
        let root = parts.next()?.to_string();
        let chain: Vec<String> = parts
            .take_while(|p| is_bdf(p))
            .map(|p| p.to_ascii_lowercase())
            .collect();
        if chain.is_empty() {
            return None;
        }
        Some(PciPath { root, chain })
    }

    pub fn device(&self) -> &str {
        self.chain.last().map(String::as_str).unwrap_or("")
    }
}

fn is_bdf(s: &str) -> bool {
    // dddd:bb:dd.f
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// Classifies the PCIe connection between two devices. `numa_a`/`numa_b` decide between
/// NODE and SYS for devices under different host bridges (unknown NUMA gives SYS).
pub fn classify(a: &PciPath, b: &PciPath, numa_a: Option<u32>, numa_b: Option<u32>) -> LinkClass {
    if a == b {
        return LinkClass::SameDevice;
    }
    if a.root != b.root {
        return match (numa_a, numa_b) {
            (Some(x), Some(y)) if x == y => LinkClass::Node,
            _ => LinkClass::Sys,
        };
    }
    let common = a
        .chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        // Different root ports of one host bridge.
        return LinkClass::Phb;
    }
    if common == a.chain.len() || common == b.chain.len() {
        // One is a bridge above the other.
        return LinkClass::Pix;
    }
    let below_a = a.chain.len() - common;
    let below_b = b.chain.len() - common;
    if below_a <= 2 && below_b <= 2 {
        LinkClass::Pix
    } else {
        LinkClass::Pxb
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> PciPath {
        PciPath::parse(s).unwrap()
    }

    #[test]
    fn classic_layouts() {
        let gpu0 = p("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0");
        let gpu1 = p("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0");
        let nic = p("/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0");
        let far = p("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");
        assert_eq!(
            classify(&gpu0, &gpu1, Some(0), Some(0)),
            LinkClass::Pix,
            "one switch"
        );
        assert_eq!(
            classify(&gpu0, &nic, Some(0), Some(0)),
            LinkClass::Phb,
            "through the host bridge"
        );
        assert_eq!(classify(&gpu0, &far, Some(0), Some(1)), LinkClass::Sys);
        assert_eq!(classify(&gpu0, &far, Some(0), Some(0)), LinkClass::Node);
        assert_eq!(
            classify(&gpu0, &far, None, Some(1)),
            LinkClass::Sys,
            "unknown NUMA is not guessed"
        );
        let deep = p(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
        );
        let other =
            p("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:06:00.0");
        assert_eq!(classify(&deep, &other, Some(0), Some(0)), LinkClass::Pxb);
        assert_eq!(
            p("/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0").device(),
            "0000:00:03.0"
        );
        assert!(PciPath::parse("/sys/devices/virtual/net/lo").is_none());
    }

    fn arb_path() -> impl Strategy<Value = (PciPath, Option<u32>)> {
        (
            0u8..3,
            proptest::collection::vec(0u8..4, 1..6),
            proptest::option::of(0u32..2),
        )
            .prop_map(|(root, hops, numa)| {
                let chain = hops
                    .iter()
                    .enumerate()
                    .map(|(depth, h)| format!("0000:{:02x}:{:02x}.0", depth, h))
                    .collect();
                (
                    PciPath {
                        root: format!("pci0000:{root:02x}"),
                        chain,
                    },
                    numa,
                )
            })
    }

    proptest! {
        #[test]
        fn symmetric_and_never_nvlink((a, na) in arb_path(), (b, nb) in arb_path()) {
            let ab = classify(&a, &b, na, nb);
            prop_assert_eq!(ab, classify(&b, &a, nb, na));
            prop_assert!(!ab.is_nvlink());
            prop_assert_eq!(classify(&a, &a, na, na), LinkClass::SameDevice);
            if a.root != b.root {
                prop_assert!(matches!(ab, LinkClass::Node | LinkClass::Sys));
            } else if a != b {
                prop_assert!(matches!(ab, LinkClass::Pix | LinkClass::Pxb | LinkClass::Phb));
            }
        }

        #[test]
        fn sharing_a_longer_prefix_is_never_farther((a, na) in arb_path(), extra in proptest::collection::vec(0u8..4, 1..3)) {
            // Two devices that branch below a's bridges are at most as far as devices that
            // branch at the root port.
            let mut deeper = a.clone();
            deeper.chain.extend(extra.iter().enumerate().map(|(i, h)| format!("0001:{:02x}:{:02x}.0", i, h)));
            let sibling = PciPath { root: a.root.clone(), chain: vec!["ffff:ff:1f.7".into()] };
            prop_assert!(classify(&a, &deeper, na, na).rank() <= classify(&a, &sibling, na, na).rank());
        }
    }
}
