//! Network namespaces standing for hosts: each has its own address on one private subnet
//! (a bridge in a switch namespace of its own, so no packet touches this machine's
//! network) and its processes their own host name. Made by root only; removed on drop.

use std::process::Command;

/// A set of namespace "hosts".
pub struct Hosts {
    tag: String,
    subnet: u32,
    names: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    /// Hosts named `names` (their host names too), at 10.77.S.1, .2, ... in that order;
    /// `None` where namespaces cannot be made (not root, no `ip`), which CI does not allow.
    pub fn create(names: &[&str]) -> Option<Hosts> {
        let usable = nix::unistd::getuid().is_root()
            && Command::new("ip")
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success());
        if !usable {
            assert!(
                std::env::var_os("GSCHED_REQUIRE_ROOT").is_none(),
                "network namespaces need root and iproute2 (apt-get install iproute2)"
            );
            eprintln!("skipping: network namespaces need root and iproute2");
            return None;
        }
        let pid = std::process::id();
        let hosts = Hosts {
            tag: format!("gs{}", pid % 100_000),
            subnet: 10 + pid % 240,
            names: names.iter().map(|s| s.to_string()).collect(),
        };
        let sw = hosts.switch();
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for (i, name) in names.iter().enumerate() {
            let ns = hosts.ns(name);
            let port = format!("p{i}");
            ip(&["netns", "add", &ns]);
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]);
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"]);
            let addr = format!("{}/24", hosts.addr(name));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        Some(hosts)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// The host's address.
    pub fn addr(&self, name: &str) -> String {
        format!("10.77.{}.{}", self.subnet, self.index(name) + 1)
    }

    /// The command line that runs a program on `name`: in its namespace, under its host
    /// name (the program follows as the last arguments).
    pub fn on(&self, name: &str) -> Vec<String> {
        self.on_with(name, &[])
    }

    /// As [`Hosts::on`], with `more` arguments after the program's own (this host's
    /// settings, where the others are shared by every host).
    pub fn on_with(&self, name: &str, more: &[String]) -> Vec<String> {
        let more: String = more.iter().map(|a| format!(" '{a}'")).collect();
        [
            "ip",
            "netns",
            "exec",
            &self.ns(name),
            "unshare",
            "--uts",
            "sh",
            "-c",
            &format!("hostname {name} && exec \"$@\"{more}"),
            "sh",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Cuts `name` off the network (its switch port down), or joins it again.
    pub fn cut(&self, name: &str, cut: bool) {
        let port = format!("p{}", self.index(name));
        ip(&[
            "-n",
            &self.switch(),
            "link",
            "set",
            &port,
            if cut { "down" } else { "up" },
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(name)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .status();
    }
}
