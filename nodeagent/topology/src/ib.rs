//! InfiniBand and network tool outputs: `ibdev2netdev` (also through `column -t`, with
//! trailing `# comments`), `ibstat`, `ibstatus`, `ibv_devinfo` and `ifconfig`. For IB rails the
//! netdev being "(Down)" says nothing about the RDMA port, so it is not treated as a fault;
//! the port state from ibstat/ibv_devinfo is what counts.

/// `mlx5_0 port 1 ==> ibp26s0 (Down)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevMap {
    pub hca: String,
    pub port: u32,
    pub netdev: String,
    pub netdev_up: bool,
}

pub fn parse_ibdev2netdev(text: &str) -> Vec<DevMap> {
    let mut out: Vec<DevMap> = text
        .lines()
        .filter_map(|l| {
            let l = l.split('#').next()?;
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() < 5 || w[1] != "port" || w[3] != "==>" {
                return None;
            }
            Some(DevMap {
                hca: w[0].to_string(),
                port: w[2].parse().ok()?,
                netdev: w[4].to_string(),
                netdev_up: w.get(5).is_some_and(|s| s.contains("Up")),
            })
        })
        .collect();
    out.sort_by_key(|a| natural(&a.hca));
    out
}

/// Sort key that puts `mlx5_2` before `mlx5_10`.
pub fn natural(name: &str) -> (String, u64) {
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    (
        name[..name.len() - digits.len()].to_string(),
        digits.parse().unwrap_or(0),
    )
}

/// One port from `ibstat` or `ibv_devinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IbPort {
    pub hca: String,
    pub port: u32,
    /// The port carries traffic (`Active` / `PORT_ACTIVE`).
    pub active: bool,
    pub link_layer: Option<String>,
    pub rate_gbps: Option<u32>,
    pub ca_type: Option<String>,
    pub firmware: Option<String>,
    pub max_mtu: Option<u32>,
    pub active_mtu: Option<u32>,
    /// The adapter's system image GUID: a physical function and its SR-IOV virtual
    /// functions share it.
    pub system_image_guid: Option<String>,
}

/// PCI device ids (as `CA type: MT4124` / `vendor_part_id: 4124`) of Mellanox/NVIDIA
/// SR-IOV virtual functions: ConnectX-3, -4, -4 Lx, -5, -5 Ex, -6 and the mlx5Gen VF of
/// ConnectX-6 Dx and later.
const VF_PART_IDS: [u32; 7] = [4100, 4116, 4118, 4120, 4122, 4124, 4126];

impl IbPort {
    /// RoCE (an RDMA device on Ethernet) rather than InfiniBand.
    pub fn is_roce(&self) -> bool {
        self.link_layer
            .as_deref()
            .is_some_and(|l| l.eq_ignore_ascii_case("Ethernet"))
    }

    /// An SR-IOV virtual function (by its device id), not a physical port of its own.
    pub fn is_virtual_function(&self) -> bool {
        self.ca_type
            .as_deref()
            .map(|t| t.trim().trim_start_matches("MT"))
            .and_then(|t| t.parse::<u32>().ok())
            .is_some_and(|id| VF_PART_IDS.contains(&id))
    }

    /// The port negotiated a smaller MTU than it supports.
    pub fn mtu_degraded(&self) -> bool {
        matches!((self.active_mtu, self.max_mtu), (Some(a), Some(m)) if a < m)
    }
}

fn kv(line: &str) -> Option<(&str, &str)> {
    let (k, v) = line.split_once(':')?;
    Some((k.trim(), v.trim()))
}

pub fn parse_ibstat(text: &str) -> Vec<IbPort> {
    let mut out = Vec::new();
    let mut hca = String::new();
    let (mut ca_type, mut fw, mut guid) = (None, None, None);
    let mut cur: Option<IbPort> = None;
    for l in text.lines() {
        let t = l.trim();
        if let Some(name) = t.strip_prefix("CA '").and_then(|r| r.strip_suffix('\'')) {
            out.extend(cur.take());
            hca = name.to_string();
            ca_type = None;
            fw = None;
            guid = None;
            continue;
        }
        if let Some(p) = t
            .strip_prefix("Port ")
            .and_then(|r| r.strip_suffix(':'))
            .and_then(|n| n.parse::<u32>().ok())
        {
            out.extend(cur.take());
            cur = Some(IbPort {
                hca: hca.clone(),
                port: p,
                ca_type: ca_type.clone(),
                firmware: fw.clone(),
                system_image_guid: guid.clone(),
                ..IbPort::default()
            });
            continue;
        }
        let Some((k, v)) = kv(t) else { continue };
        match (k, cur.as_mut()) {
            ("CA type", None) => ca_type = Some(v.to_string()),
            ("Firmware version", None) => fw = Some(v.to_string()),
            ("System image GUID", None) => guid = Some(v.to_string()),
            ("State", Some(p)) => p.active = v.eq_ignore_ascii_case("Active"),
            ("Rate", Some(p)) => p.rate_gbps = v.parse().ok(),
            ("Link layer", Some(p)) => p.link_layer = Some(v.to_string()),
            _ => {}
        }
    }
    out.extend(cur);
    out.sort_by_key(|a| (natural(&a.hca), a.port));
    out
}

/// `ibstatus`: "Infiniband device 'mlx5_0' port 1 status:" then `state: 4: ACTIVE`,
/// `rate: 100 Gb/sec (4X EDR)`, `link_layer: Ethernet`.
pub fn parse_ibstatus(text: &str) -> Vec<IbPort> {
    let mut out = Vec::new();
    let mut cur: Option<IbPort> = None;
    for l in text.lines() {
        let t = l.trim();
        if let Some(rest) = t.strip_prefix("Infiniband device '") {
            out.extend(cur.take());
            let Some((hca, rest)) = rest.split_once('\'') else {
                continue;
            };
            let port = rest
                .trim()
                .strip_prefix("port ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|p| p.parse().ok())
                .unwrap_or(1);
            cur = Some(IbPort {
                hca: hca.to_string(),
                port,
                ..IbPort::default()
            });
            continue;
        }
        let (Some(p), Some((k, v))) = (cur.as_mut(), kv(t)) else {
            continue;
        };
        // "4: ACTIVE": the name after the number.
        let named = v.split_once(':').map(|(_, n)| n.trim()).unwrap_or(v);
        match k {
            "state" => p.active = named.eq_ignore_ascii_case("ACTIVE"),
            "rate" => p.rate_gbps = v.split_whitespace().next().and_then(|r| r.parse().ok()),
            "link_layer" => p.link_layer = Some(v.to_string()),
            _ => {}
        }
    }
    out.extend(cur);
    out.sort_by_key(|a| (natural(&a.hca), a.port));
    out
}

pub fn parse_ibv_devinfo(text: &str) -> Vec<IbPort> {
    let mut out = Vec::new();
    let mut hca = String::new();
    let (mut part, mut fw, mut guid) = (None, None, None);
    let mut cur: Option<IbPort> = None;
    for l in text.lines() {
        let t = l.trim();
        let Some((k, v)) = kv(t) else { continue };
        let first = v.split_whitespace().next().unwrap_or("");
        match k {
            "hca_id" => {
                out.extend(cur.take());
                hca = v.to_string();
                part = None;
                fw = None;
                guid = None;
            }
            "fw_ver" => fw = Some(v.to_string()),
            "sys_image_guid" => guid = Some(v.to_string()),
            "vendor_part_id" => part = Some(v.to_string()),
            "port" => {
                out.extend(cur.take());
                cur = Some(IbPort {
                    hca: hca.clone(),
                    port: first.parse().unwrap_or(1),
                    ca_type: part.clone(),
                    firmware: fw.clone(),
                    system_image_guid: guid.clone(),
                    ..IbPort::default()
                });
            }
            "state" => {
                if let Some(p) = cur.as_mut() {
                    p.active = first == "PORT_ACTIVE";
                }
            }
            "max_mtu" => {
                if let Some(p) = cur.as_mut() {
                    p.max_mtu = first.parse().ok();
                }
            }
            "active_mtu" => {
                if let Some(p) = cur.as_mut() {
                    p.active_mtu = first.parse().ok();
                }
            }
            "link_layer" => {
                if let Some(p) = cur.as_mut() {
                    p.link_layer = Some(v.to_string());
                }
            }
            _ => {}
        }
    }
    out.extend(cur);
    out
}

/// An interface from `ifconfig`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IfConfig {
    pub name: String,
    pub up: bool,
    pub running: bool,
    pub mtu: Option<u32>,
    pub ipv4: Option<String>,
    /// "ether", "infiniband" or "loop".
    pub link: Option<String>,
}

pub fn parse_ifconfig(text: &str) -> Vec<IfConfig> {
    let mut out: Vec<IfConfig> = Vec::new();
    for l in text.lines() {
        if !l.starts_with(char::is_whitespace) && l.contains("flags=") {
            let name = l.split(':').next().unwrap_or("").trim().to_string();
            let flags = l
                .split('<')
                .nth(1)
                .and_then(|f| f.split('>').next())
                .unwrap_or("");
            let mtu = l
                .split("mtu")
                .nth(1)
                .and_then(|m| m.split_whitespace().next())
                .and_then(|m| m.parse().ok());
            out.push(IfConfig {
                name,
                up: flags.split(',').any(|f| f == "UP"),
                running: flags.split(',').any(|f| f == "RUNNING"),
                mtu,
                ..IfConfig::default()
            });
            continue;
        }
        // net-tools before 2.0: "eth0      Link encap:Ethernet  HWaddr ..." and, indented,
        // "UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1".
        if !l.starts_with(char::is_whitespace) && l.contains("Link encap:") {
            let encap = l.split("Link encap:").nth(1).unwrap_or("");
            out.push(IfConfig {
                name: l.split_whitespace().next().unwrap_or("").to_string(),
                link: encap
                    .starts_with("Local Loopback")
                    .then(|| "loop".to_string()),
                ..IfConfig::default()
            });
            continue;
        }
        if let Some(cur) = out.last_mut() {
            let t = l.trim();
            if t.contains("MTU:")
                && t.split_whitespace()
                    .any(|w| w == "UP" || w == "BROADCAST" || w == "LOOPBACK" || w == "MULTICAST")
            {
                cur.up = t.split_whitespace().any(|w| w == "UP");
                cur.running = t.split_whitespace().any(|w| w == "RUNNING");
                cur.mtu = t
                    .split("MTU:")
                    .nth(1)
                    .and_then(|m| m.split_whitespace().next())
                    .and_then(|m| m.parse().ok());
            } else if let Some(addr) = t.strip_prefix("inet addr:") {
                cur.ipv4 = addr.split_whitespace().next().map(str::to_string);
            } else {
                interface_detail(cur, l);
            }
        }
    }
    out
}

/// An indented line under an interface, in `ifconfig`'s words (`inet 10.0.0.1`, `ether
/// ...`) or `ip`'s (`inet 10.0.0.1/24 ...`, `link/ether ...`, `link/loopback ...`).
fn interface_detail(cur: &mut IfConfig, line: &str) {
    let mut w = line.split_whitespace();
    match w.next() {
        Some("inet") => {
            cur.ipv4 = w
                .next()
                .map(|a| a.split('/').next().unwrap_or(a).to_string())
        }
        Some(kind) => {
            let kind = kind.strip_prefix("link/").unwrap_or(kind);
            let kind = if kind == "loopback" { "loop" } else { kind };
            if matches!(kind, "ether" | "infiniband" | "loop") {
                cur.link = Some(kind.to_string());
            }
        }
        None => {}
    }
}

/// `ip addr` / `ip link`: `3: ens1f0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 ...
/// state DOWN`, then indented `link/ether ...` and `inet 10.0.0.1/24 ...` lines. `running`
/// is the carrier (`LOWER_UP`), `up` the administrative state.
pub fn parse_ip(text: &str) -> Vec<IfConfig> {
    let mut out: Vec<IfConfig> = Vec::new();
    for l in text.lines() {
        if !l.starts_with(char::is_whitespace) {
            let mut parts = l.splitn(3, ": ");
            let (Some(index), Some(name), Some(rest)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if index.trim().parse::<u32>().is_err() || !rest.starts_with('<') {
                continue;
            }
            let flags = rest[1..].split('>').next().unwrap_or("");
            let has = |f: &str| flags.split(',').any(|x| x == f);
            let mtu = rest
                .split(" mtu ")
                .nth(1)
                .and_then(|m| m.split_whitespace().next())
                .and_then(|m| m.parse().ok());
            out.push(IfConfig {
                name: name.split('@').next().unwrap_or(name).to_string(),
                up: has("UP"),
                running: has("LOWER_UP"),
                mtu,
                ..IfConfig::default()
            });
            continue;
        }
        if let Some(cur) = out.last_mut() {
            interface_detail(cur, l);
        }
    }
    out
}

#[cfg(test)]
mod ip_tests {
    use super::*;

    #[test]
    fn ip_addr_carrier_admin_state_mtu_and_address() {
        let text = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n3: ens1f0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN\n    link/ether ec:0d:9a:44:c3:4c brd ff:ff:ff:ff:ff:ff\n    inet 10.226.9.51/24 brd 10.226.9.255 scope global ens1f0\n";
        let v = parse_ip(text);
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].name.as_str(), v[0].link.as_deref()),
            ("lo", Some("loop"))
        );
        assert_eq!(
            (v[1].up, v[1].running, v[1].mtu, v[1].ipv4.as_deref()),
            (true, false, Some(9000), Some("10.226.9.51"))
        );
    }
}
