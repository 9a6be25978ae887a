//! Every `nvidia-smi topo -m` fixture parses to what `tests/fixtures/INDEX.md` says a
//! correct reader must get.

use gsched_topology::{parse_topo_matrix, strip_fixture_header};
use gsched_types::topology::{LinkClass, Topology};

fn load(name: &str) -> Result<Topology, String> {
    let path = format!(
        "{}/../../tests/fixtures/topo/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    parse_topo_matrix(strip_fixture_header(&text)).map_err(|e| e.to_string())
}

fn l(s: &str) -> LinkClass {
    s.parse().unwrap()
}

#[test]
fn a100_nv12_four_nics() {
    let t = load("a100-sxm4-80gb-8gpu-nv12-4nic.txt").unwrap();
    assert_eq!(t.gpus.len(), 8);
    for i in 0..8 {
        for j in 0..8 {
            assert_eq!(
                t.gpu_links[i][j],
                if i == j {
                    LinkClass::SameDevice
                } else {
                    l("NV12")
                }
            );
        }
        assert_eq!(t.gpus[i].numa_node, Some(if i < 4 { 0 } else { 1 }));
        assert_eq!(
            t.gpus[i].cpus.as_deref(),
            Some(if i < 4 {
                "0-63,128-191"
            } else {
                "64-127,192-254"
            })
        );
        assert!(t.gpu_nic_links[i].iter().all(|c| *c == LinkClass::Sys));
    }
    let names: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
}

#[test]
fn dgx_h100_glued_header_and_cells() {
    let t = load("dgx-h100-8gpu-nv18-12nic-tabs-missing-tab-NIC8NIC9-PARTIAL.txt").unwrap();
    assert_eq!(t.gpus.len(), 8);
    assert_eq!(t.nics.len(), 12, "NIC8NIC9 must split into two columns");
    assert!(t.gpu_links[0][7] == l("NV18") && t.gpu_links[5][2] == l("NV18"));
    let pxb: Vec<(usize, usize)> = (0..8)
        .flat_map(|g| (0..12).filter(move |&n| n < 12).map(move |n| (g, n)))
        .filter(|&(g, n)| t.gpu_nic_links[g][n] == LinkClass::Pxb)
        .collect();
    assert_eq!(
        pxb,
        vec![
            (0, 0),
            (1, 3),
            (2, 4),
            (3, 5),
            (4, 6),
            (5, 9),
            (6, 10),
            (7, 11)
        ]
    );
    assert_eq!(t.gpus[0].cpus.as_deref(), Some("0-55,112-167"));
    assert_eq!(t.gpus[4].numa_node, Some(1));
    assert_eq!(t.gpus[7].cpus.as_deref(), Some("56-111,168-223"));
}

#[test]
fn dgx1_hybrid_cube_mesh_old_columns() {
    let t = load("dgx1-v100-sxm2-8gpu-hybrid-cube-mesh-1nic.txt").unwrap();
    assert_eq!(t.gpus.len(), 8);
    assert_eq!(t.gpu_links[0][1], l("NV1"));
    assert_eq!(t.gpu_links[0][3], l("NV2"));
    assert_eq!(t.gpu_links[0][5], LinkClass::Sys);
    assert_eq!(t.gpus[0].cpus.as_deref(), Some("0-11,24-35"));
    assert_eq!(t.gpus[4].cpus.as_deref(), Some("12-23,36-47"));
    assert_eq!(t.gpus[0].numa_node, None, "no NUMA column: unknown, not 0");
    assert_eq!(t.nics.len(), 1);
    assert_eq!(t.nics[0].name, "mlx5_0");
    let col: Vec<LinkClass> = (0..8).map(|g| t.gpu_nic_links[g][0]).collect();
    assert_eq!(
        col,
        vec![
            LinkClass::Node,
            LinkClass::Node,
            LinkClass::Pix,
            LinkClass::Pix,
            LinkClass::Sys,
            LinkClass::Sys,
            LinkClass::Sys,
            LinkClass::Sys
        ]
    );
}

#[test]
fn a6000_nv4_pair() {
    let t = load("rtx-a6000-3gpu-nv4-pair-2nic.txt").unwrap();
    assert_eq!(t.gpus.len(), 3);
    assert_eq!(t.gpu_links[0][1], l("NV4"));
    assert_eq!(t.gpu_links[2][0], LinkClass::Node);
    assert!(
        t.gpus
            .iter()
            .all(|g| g.numa_node == Some(1) && g.cpus.as_deref() == Some("64-71"))
    );
    assert_eq!(t.gpu_nic_links[2], vec![LinkClass::Phb, LinkClass::Phb]);
    assert_eq!(t.gpu_nic_links[0], vec![LinkClass::Node, LinkClass::Node]);
    assert_eq!(t.nics[1].name, "mlx5_1");
}

#[test]
fn rtx3090_numa_na_is_unknown() {
    let t = load("rtx3090-2gpu-sys-numa-na-tabs.txt").unwrap();
    assert_eq!(t.gpus.len(), 2);
    assert_eq!(t.gpu_links[0][1], LinkClass::Sys);
    assert_eq!(t.gpus[0].numa_node, None);
    assert_eq!(t.gpus[0].cpus.as_deref(), Some("0-7,16-23"));
    assert_eq!(t.gpus[1].numa_node, Some(1));
    assert_eq!(t.gpus[1].cpus.as_deref(), Some("8-15,24-31"));
}

#[test]
fn rtx4090_all_sys_no_legend() {
    let t = load("rtx4090-8gpu-pcie-2nic-tabs.txt").unwrap();
    assert_eq!(t.gpus.len(), 8);
    assert!((0..8).all(|i| (0..8).all(|j| i == j || t.gpu_links[i][j] == LinkClass::Sys)));
    assert_eq!(t.gpus[3].numa_node, Some(0));
    assert_eq!(t.gpus[4].numa_node, Some(1));
    assert_eq!(t.nics.len(), 2);
    assert_eq!(t.gpu_nic_links[6], vec![LinkClass::Phb, LinkClass::Phb]);
    assert_eq!(t.gpu_nic_links[5], vec![LinkClass::Sys, LinkClass::Sys]);
}

#[test]
fn h200_ansi_header() {
    let t = load("h200-2gpu-nv18-vm-ansi-header.txt").unwrap();
    assert_eq!(t.gpus.len(), 2);
    assert_eq!(t.gpu_links[0][1], l("NV18"));
    assert!(
        t.gpus
            .iter()
            .all(|g| g.numa_node == Some(0) && g.cpus.as_deref() == Some("0-31"))
    );
    assert!(t.nics.is_empty());
}

#[test]
fn partial_pastes_fail_clearly() {
    let full = std::fs::read_to_string(format!(
        "{}/../../tests/fixtures/topo/a100-sxm4-80gb-8gpu-nv12-4nic.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let body = strip_fixture_header(&full);
    // Cut after the fourth GPU row.
    let cut: String = body.lines().take(5).collect::<Vec<_>>().join("\n");
    let err = parse_topo_matrix(&cut).unwrap_err().to_string();
    assert!(err.contains("GPU rows missing"), "{err}");
    // Truncate a row in the middle.
    let truncated = body.replacen("GPU2    NV12    NV12     X      NV12", "GPU2    NV12", 1);
    let err = parse_topo_matrix(&truncated).unwrap_err().to_string();
    assert!(err.contains("GPU2") && err.contains("partial"), "{err}");
}

#[test]
fn every_prefix_of_every_fixture_parses_or_errors() {
    let dir = format!("{}/../../tests/fixtures/topo", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let body = strip_fixture_header(&text);
        for cut in (0..body.len())
            .step_by(7)
            .filter(|c| body.is_char_boundary(*c))
        {
            let _ = parse_topo_matrix(&body[..cut]);
        }
    }
}

/// What gsched's own discovery (NVML + sysfs) reported on the 2x H200 machine, and the
/// `nvidia-smi topo -m` taken in the same run: both must describe the same wiring.
#[test]
fn h200_discovery_from_the_device_matches_its_topo_matrix() {
    let dir = format!("{}/../../tests/fixtures/gpu", env!("CARGO_MANIFEST_DIR"));
    let path = format!("{dir}/discover-h200.json");
    let t = gsched_topology::parse_topology_file(&std::fs::read_to_string(&path).unwrap(), &path)
        .unwrap();
    assert_eq!(t.gpus.len(), 2);
    assert_eq!(t.gpu_links[0][1], l("NV18"));
    for g in &t.gpus {
        assert_eq!(g.model.as_deref(), Some("NVIDIA H200"));
        assert_eq!(g.memory_mib, Some(143771));
        let p = g.pcie.as_ref().expect("PCIe link from NVML");
        assert_eq!((p.gen_current, p.width_current), (Some(5), Some(16)));
        assert_eq!(g.nvlinks_active, Some(18));
    }
    assert_eq!(t.gpus[1].pci_bus_id.as_deref(), Some("0000:00:07.0"));
    let eth0 = t.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert_eq!((eth0.mtu, eth0.up), (Some(1400), Some(true)));
    let text = std::fs::read_to_string(format!("{dir}/nvidia-smi-topo.txt")).unwrap();
    let m = parse_topo_matrix(strip_fixture_header(&text)).unwrap();
    assert_eq!(m.gpu_links, t.gpu_links);
}

#[test]
fn empty_cpu_affinity_cells_do_not_shift_the_numa_node() {
    let t = load("rtx4090-8gpu-empty-cpu-affinity-DERIVED.txt").unwrap();
    assert_eq!(t.gpus.len(), 8);
    for (i, g) in t.gpus.iter().enumerate() {
        assert_eq!(
            g.cpus, None,
            "GPU{i}: the CPU affinity is unknown, not \"0\""
        );
        assert_eq!(g.numa_node, Some(if i < 4 { 0 } else { 1 }), "GPU{i}");
    }
    assert_eq!(t.nics.len(), 2);
    // The same rows with the cells filled are read as before.
    let full = load("rtx4090-8gpu-pcie-2nic-tabs.txt").unwrap();
    assert_eq!(full.gpus[5].cpus.as_deref(), Some("56-111,168-223"));
    assert_eq!(full.gpus[5].numa_node, Some(1));
}
