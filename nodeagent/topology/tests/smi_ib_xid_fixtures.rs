//! The nvidia-smi, Xid and InfiniBand fixtures parse to what `tests/fixtures/INDEX.md`
//! says a correct reader must get.

use gsched_topology::xid::{AerSeverity, KernelEvent, KernelLog, XidAction, classify, parse_log};
use gsched_topology::{ib, smi, strip_fixture_header};
use gsched_types::node::HealthSeverity;

fn fixture(path: &str) -> String {
    let text = std::fs::read_to_string(format!(
        "{}/../../tests/fixtures/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    strip_fixture_header(&text).to_string()
}

fn xids_and_more(path: &str) -> Vec<KernelEvent> {
    parse_log(&fixture(path))
}

fn xids(path: &str) -> Vec<gsched_topology::xid::XidEvent> {
    parse_log(&fixture(path))
        .into_iter()
        .filter_map(|e| {
            if let KernelEvent::Xid(x) = e {
                Some(x)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn smi_tables() {
    let t = smi::parse_table(&fixture("smi/h100-sxm-8gpu-driver565-default.txt"));
    assert_eq!(t.gpus.len(), 8);
    assert_eq!(t.driver.as_deref(), Some("565.57.01"));
    assert_eq!(t.cuda.as_deref(), Some("12.7"));
    let buses: Vec<&str> = t.gpus.iter().map(|g| g.bus_id.as_str()).collect();
    assert_eq!(
        buses,
        [
            "0000:18:00",
            "0000:2a:00",
            "0000:3a:00",
            "0000:5d:00",
            "0000:9a:00",
            "0000:ab:00",
            "0000:ba:00",
            "0000:db:00"
        ]
    );
    assert!(t.gpus.iter().all(|g| g.memory_total_mib == Some(81559)
        && g.memory_used_mib == Some(1)
        && g.power_cap_w == Some(700)
        && g.ecc_uncorrected == Some(0)
        && g.mig == Some(false)));
    assert_eq!(t.gpus[0].name, "NVIDIA H100 80GB HBM3");

    let r610 = smi::parse_table(&fixture("smi/b200-2gpu-driver610-kmd-umd-header.txt"));
    assert_eq!(
        (r610.driver.as_deref(), r610.cuda.as_deref()),
        (Some("610.43.02"), Some("13.3")),
        "driver 610's KMD/CUDA UMD names"
    );
    assert_eq!(r610.gpus.len(), 2);
    assert_eq!(
        (r610.gpus[0].name.as_str(), r610.gpus[0].bus_id.as_str()),
        ("NVIDIA B200", "0000:63:00")
    );
    assert_eq!(r610.gpus[0].memory_total_mib, Some(183_359));

    let old = smi::parse_table(&fixture(
        "smi/gtx-titan-4gpu-node-lost-one-gpu-2014-driver325.txt",
    ));
    assert_eq!(old.gpus.len(), 3, "one of four GPUs is missing");
    assert_eq!(smi::missing(4, &old), 1);
    assert_eq!(
        old.gpus
            .iter()
            .map(|g| g.bus_id.as_str())
            .collect::<Vec<_>>(),
        ["0000:03:00", "0000:04:00", "0000:84:00"]
    );
    assert!(
        old.gpus
            .iter()
            .all(|g| g.memory_total_mib == Some(6143) && g.name == "GeForce GTX TITAN")
    );
    assert_eq!(old.cuda, None);

    let h200 = smi::parse_table(&fixture("smi/h200-2gpu-nvidia-smi-default.txt"));
    assert_eq!(h200.gpus.len(), 2);
    assert_eq!(h200.driver.as_deref(), Some("580.159.04"));
    assert_eq!(h200.cuda.as_deref(), Some("13.0"));

    let broken = fixture("smi/unable-to-determine-device-handle-nospace-variant-tesla-p4.txt");
    assert_eq!(smi::handle_errors(&broken), vec!["0000:07:00"]);
    assert!(smi::parse_table(&broken).gpus.is_empty(), "no healthy GPU");
}

#[test]
fn smi_list_and_queries() {
    let l = smi::parse_list(&fixture(
        "smi/nvidia-smi-L-4x-a100-80gb-mig-on-gpu0-only.txt",
    ));
    assert_eq!(l.len(), 4);
    assert!(l[0].uuid.starts_with("GPU-5135"));
    assert_eq!(l[0].mig.len(), 4);
    assert!(
        l[0].mig
            .iter()
            .all(|(p, u)| p == "1g.20gb" && u.starts_with("MIG-"))
    );
    assert!(l[1..].iter().all(|g| g.mig.is_empty()));
    let q = fixture("smi/query-gpu-csv-noheader-nounits-NA-vs-not-supported.txt");
    let rows: Vec<Vec<Option<String>>> = q
        .lines()
        .filter(|l| l.starts_with("2004"))
        .map(smi::parse_query_row)
        .collect();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r[0].as_deref(), Some("2004"));
        assert_eq!(r[3].as_deref(), Some("44"));
        assert_eq!(r[4], None, "both [N/A] and [Not Supported] mean missing");
    }
}

#[test]
fn xid_formats_and_classes() {
    let x = xids("xid/xid13-xid109-dmesg-ctime-gpud.txt");
    assert_eq!(
        x.len(),
        2,
        "three Xid 13 lines of one fault are one event: {x:?}"
    );
    assert_eq!(
        (x[0].pci.as_str(), x[0].code, x[0].pid),
        ("0000:cb:00", 13, None)
    );
    assert_eq!(x[0].timestamp.as_deref(), Some("Fri Aug 30 11:43:09 2024"));
    assert_eq!(
        (x[1].code, x[1].pid, x[1].process.as_deref()),
        (109, Some(1797828), Some("pt_main_thread"))
    );
    assert_eq!(classify(13).0, XidAction::RestartApp);

    let x = xids("xid/xid31-new-format-pid-name-channel-open595.txt");
    assert_eq!(
        (
            x[0].pci.as_str(),
            x[0].code,
            x[0].pid,
            x[0].process.as_deref()
        ),
        ("0000:01:00", 31, Some(13705), Some("UnrealEditor"))
    );
    assert_eq!(x[0].timestamp.as_deref(), Some("365.969681"));
    let ids: Vec<KernelEvent> = parse_log(&fixture(
        "xid/xid31-new-format-pid-name-channel-open595.txt",
    ));
    assert!(ids.iter().any(|e| matches!(e, KernelEvent::GpuIdentity { pci, uuid } if pci == "0000:01:00" && uuid.starts_with("GPU-4e391288"))));

    let x = xids("xid/xid45-caused-by-previous-xid149-xid145-nvlink.txt");
    let dc = x.iter().find(|e| e.pci == "0000:dc:00").unwrap();
    assert_eq!(
        (dc.code, dc.caused_by, dc.effective_code()),
        (45, Some(149), 149)
    );
    let ed = x.iter().find(|e| e.pci == "0000:ed:00").unwrap();
    assert_eq!(ed.effective_code(), 145);
    assert_eq!(
        classify(dc.effective_code()).1,
        HealthSeverity::Critical,
        "classified by the NVLink Xid that caused it"
    );
    let mut gpus: Vec<&str> = x.iter().map(|e| e.pci.as_str()).collect();
    gpus.sort();
    gpus.dedup();
    assert_eq!(
        gpus,
        ["0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00"]
    );

    let x = xids("xid/xid63-row-remapper-a100-plus-nvidia-smi-q-remap-pending.txt");
    assert_eq!(
        (x[0].pci.as_str(), x[0].code, x[0].pid),
        ("0000:10:1c", 63, Some(1896))
    );
    assert_eq!(
        classify(63),
        (XidAction::ResetWhenIdle, HealthSeverity::Warning),
        "reset when idle, not RMA"
    );
    let remap = smi::remapped_rows(&fixture(
        "xid/xid63-row-remapper-a100-plus-nvidia-smi-q-remap-pending.txt",
    ));
    assert_eq!(remap, vec![("0000:10:1c".to_string(), true, false)]);
    // The same section as people paste it with a marker after a value (hand-made from
    // the fixture's layout): still pending.
    let annotated = "GPU 00000000:10:1C.0\n    Remapped Rows\n        Correctable Error                 : 0\n        Uncorrectable Error               : 4\n        Pending                           : Yes   <===\n        Remapping Failure Occurred        : No\n";
    assert_eq!(
        smi::remapped_rows(annotated),
        vec![("0000:10:1c".to_string(), true, false)]
    );

    let all = parse_log(&fixture("xid/xid79-dmesg-T-crash-dump-multiline-akash.txt"));
    let x79: Vec<_> = all
        .iter()
        .filter_map(|e| {
            if let KernelEvent::Xid(x) = e {
                Some(x)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(x79.len(), 1);
    assert_eq!((x79[0].pci.as_str(), x79[0].code), ("0000:a1:00", 79));
    assert_eq!(
        x79[0].timestamp.as_deref(),
        Some("Fri Apr  5 21:29:39 2024")
    );
    assert_eq!(
        classify(79),
        (XidAction::RebootNode, HealthSeverity::Critical)
    );
    assert!(
        all.iter()
            .any(|e| matches!(e, KernelEvent::FallenOffBus { pci } if pci == "0000:a1:00"))
    );
    assert_eq!(
        smi::handle_errors(&fixture("xid/xid79-dmesg-T-crash-dump-multiline-akash.txt")),
        vec!["0000:a1:00"],
        "nvidia-smi's BDF matches dmesg's PCI id"
    );

    let sx = parse_log(&fixture("xid/sxid22013-nvswitch-minion-link-h100-boot.txt"));
    assert!(
        sx.iter().all(|e| !matches!(e, KernelEvent::Xid(_))),
        "NVSwitch SXids are not GPU Xids"
    );
    let events: Vec<_> = sx
        .iter()
        .filter(|e| {
            matches!(
                e,
                KernelEvent::SXid {
                    code: 22013,
                    fatal: Some(false),
                    ..
                }
            )
        })
        .collect();
    assert_eq!(
        events.len(),
        3,
        "three links, three non-fatal events: {sx:?}"
    );
}

#[test]
fn infiniband_tools() {
    let st = ib::parse_ibstatus(&fixture("ib/ibstatus-2port-roce-edr-one-down.txt"));
    assert_eq!(
        st.iter()
            .map(|p| (p.hca.as_str(), p.port, p.active, p.rate_gbps, p.is_roce()))
            .collect::<Vec<_>>(),
        vec![
            ("mlx5_0", 1, false, Some(100), true),
            ("mlx5_1", 1, true, Some(100), true)
        ]
    );
    let m = ib::parse_ibdev2netdev(&fixture(
        "ib/ibdev2netdev-column-t-h100-cx7-ib-cx6-eth-annotated.txt",
    ));
    assert_eq!(m.len(), 12);
    assert_eq!(
        m.iter().map(|d| d.hca.as_str()).collect::<Vec<_>>()[..4],
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
        "numeric order"
    );
    let ib_rails: Vec<&str> = m
        .iter()
        .filter(|d| d.netdev.starts_with("ib"))
        .map(|d| d.hca.as_str())
        .collect();
    assert_eq!(
        ib_rails,
        [
            "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"
        ]
    );
    let up: Vec<&str> = m
        .iter()
        .filter(|d| d.netdev_up)
        .map(|d| d.hca.as_str())
        .collect();
    assert_eq!(up, ["mlx5_1", "mlx5_7"]);

    let s = ib::parse_ibstat(&fixture(
        "ib/ibstat-cx7-roce-200g-plus-cx6dx-down-lexical-order.txt",
    ));
    assert_eq!(
        s.iter().map(|p| p.hca.as_str()).collect::<Vec<_>>(),
        ["mlx5_0", "mlx5_1", "mlx5_10"]
    );
    assert!(
        s[0].active
            && s[0].is_roce()
            && s[0].rate_gbps == Some(200)
            && s[0].ca_type.as_deref() == Some("MT4129")
    );
    assert!(s[1].active && s[1].is_roce());
    assert!(!s[2].active, "mlx5_10 is down");

    let v = ib::parse_ibv_devinfo(&fixture(
        "ib/ibv_devinfo-cx6dx-roce-port-down-mtu-4096-active-1024.txt",
    ));
    assert_eq!(v.len(), 1, "mlx5_13's port section is missing");
    assert_eq!(
        (
            v[0].hca.as_str(),
            v[0].active,
            v[0].max_mtu,
            v[0].active_mtu
        ),
        ("mlx5_12", false, Some(4096), Some(1024))
    );
    assert!(v[0].mtu_degraded() && v[0].is_roce());
    assert_eq!(v[0].firmware.as_deref(), Some("22.38.1900"));

    let i = ib::parse_ifconfig(&fixture("ib/ifconfig-gpu-node-ib-roce-int0-mtu9000.txt"));
    assert_eq!(i.len(), 5);
    let running: Vec<&str> = i
        .iter()
        .filter(|x| x.running)
        .map(|x| x.name.as_str())
        .collect();
    assert_eq!(running, ["int0", "lo"]);
    let int0 = i.iter().find(|x| x.name == "int0").unwrap();
    assert_eq!(
        (int0.mtu, int0.ipv4.as_deref()),
        (Some(9000), Some("10.0.5.121"))
    );
    let ibp = i.iter().find(|x| x.name == "ibp194s0f1").unwrap();
    assert_eq!(
        (ibp.link.as_deref(), ibp.mtu, ibp.running),
        (Some("infiniband"), Some(4092), false)
    );
}

fn aer(ev: &KernelEvent) -> Option<(&str, AerSeverity)> {
    match ev {
        KernelEvent::PcieAer { pci, severity, .. } => Some((pci.as_str(), *severity)),
        _ => None,
    }
}

#[test]
fn gpus_falling_off_the_bus_in_every_drivers_words() {
    // The open driver's three-line message, with no Xid.
    // The probe routine failing after it names no GPU: the lost one, re-probed.
    let ev = xids_and_more("xid/fallen-off-bus-open-driver-multiline-no-xid.txt");
    assert_eq!(
        ev,
        vec![
            KernelEvent::FallenOffBus {
                pci: "0000:b3:00".into()
            },
            KernelEvent::GpuInitFailed {
                pci: String::new(),
                line: "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s)."
                    .into()
            }
        ]
    );
    // The same message as /dev/kmsg gives it (newlines escaped) is one record too.
    let mut log = KernelLog::new();
    let kmsg = "3,1843,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.";
    assert_eq!(
        log.push(kmsg),
        vec![KernelEvent::FallenOffBus {
            pci: "0000:b3:00".into()
        }]
    );
    // 2014's "GPU at ... has fallen off the bus", twice.
    // Its "os_pci_init_handle: invalid context!" lines are no known fault: reported as
    // unrecognised, not dropped.
    let ev = xids_and_more("xid/fallen-off-bus-gpu-at-form-2014.txt");
    let (lost, other): (Vec<_>, Vec<_>) = ev
        .into_iter()
        .partition(|e| matches!(e, KernelEvent::FallenOffBus { .. }));
    assert_eq!(lost.len(), 2);
    assert!(lost.iter().all(|e| *e
        == KernelEvent::FallenOffBus {
            pci: "0000:01:00".into()
        }));
    assert_eq!(other.len(), 4);
    assert!(
        other
            .iter()
            .all(|e| matches!(e, KernelEvent::Unrecognised { line, .. } if line.contains("os_pci_init_handle")))
    );
}

#[test]
fn pcie_aer_errors_with_their_severity_and_reporter() {
    let ev = xids_and_more("xid/aer-surprise-down-then-xid79-tesla.txt");
    let errors: Vec<_> = ev.iter().filter_map(aer).collect();
    assert_eq!(
        errors,
        vec![
            ("0000:00:02", AerSeverity::Corrected),
            ("0000:00:02", AerSeverity::Fatal)
        ],
        "the port reports both; the GPU is 0000:02:00"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, KernelEvent::Xid(x) if x.code == 79))
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, KernelEvent::GpuIdentity { pci, .. } if pci == "0000:02:00"))
    );
    let flood = xids_and_more("xid/aer-correctable-flood-journal-amd-port.txt");
    let errors: Vec<_> = flood.iter().filter_map(aer).collect();
    assert_eq!(errors.len(), 3);
    assert!(
        errors
            .iter()
            .all(|e| *e == ("0000:00:03", AerSeverity::Corrected)),
        "'Correctable' is this kernel's word for Corrected"
    );
}

#[test]
fn nvlink_xids_say_their_own_severity() {
    use gsched_topology::xid::classify_event;
    let x = xids("xid/nvlink5-xid144-145-nonfatal-149-fatal-redacted-pci-gpud.txt");
    let got: Vec<(u32, HealthSeverity)> = x.iter().map(|e| (e.code, classify_event(e).1)).collect();
    assert_eq!(
        got,
        vec![
            (144, HealthSeverity::Warning),
            (145, HealthSeverity::Warning),
            (149, HealthSeverity::Critical),
            (149, HealthSeverity::Critical)
        ]
    );
    assert_eq!(
        (x[2].pci.as_str(), x[3].pci.as_str()),
        ("0000:00:00", "0019:01:00")
    );
}
