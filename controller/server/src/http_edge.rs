//! Where the HTTP API listens, so that no local user can stand in for it: the sockets
//! systemd holds from boot and passes in (`--http systemd`, `LISTEN_FDS`), or the address
//! of `--http`, a loopback one on every loopback address (127.0.0.1 and ::1, where a
//! browser asking for `localhost` may go first). An address another process holds is not
//! fatal: gctld keeps serving gRPC and scheduling, says who holds it, and binds it as soon
//! as it is free.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// `--http`'s value naming systemd's sockets.
pub const SYSTEMD: &str = "systemd";

/// How often a held address is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// The addresses to bind for `--http VALUE`: a loopback address (or `localhost`) stands
/// for both loopback addresses on its port.
pub fn addresses(value: &str) -> Result<Vec<SocketAddr>, String> {
    let (host, port) = value
        .rsplit_once(':')
        .ok_or_else(|| format!("--http {value}: give HOST:PORT, or '{SYSTEMD}'"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--http {value}: '{port}' is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse::<IpAddr>()
            .map_err(|_| format!("--http {value}: '{host}' is not an IP address or localhost"))?
    };
    if ip.is_loopback() {
        Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ])
    } else {
        Ok(vec![SocketAddr::new(ip, port)])
    }
}

/// The listening sockets systemd passed to this process (`LISTEN_PID`, `LISTEN_FDS`, from
/// descriptor 3 on), taken once.
pub fn systemd_sockets() -> Result<Vec<std::net::TcpListener>, String> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let count: i32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if !ours || count < 1 {
        return Err(format!(
            "--http {SYSTEMD}: no sockets were passed (LISTEN_FDS); start gctld through its socket unit (deploy/systemd/one-server/gctld.socket)"
        ));
    }
    // The variables stay: a child (the mail program) sees a LISTEN_PID not its own.
    (3..3 + count)
        .map(|fd| {
            use std::os::fd::FromRawFd;
            let listening = nix::sys::socket::getsockopt(
                // SAFETY: only borrowed to ask whether it is a listening socket.
                &unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
                nix::sys::socket::sockopt::AcceptConn,
            );
            if listening != Ok(true) {
                return Err(format!(
                    "descriptor {fd} from systemd is not a listening socket ({listening:?}); check gctld.socket"
                ));
            }
            // SAFETY: systemd's protocol hands this process descriptors 3..3+LISTEN_FDS,
            // checked above to be listening sockets; each is taken exactly once.
            let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            listener
                .set_nonblocking(true)
                .map_err(|e| format!("socket {fd} from systemd: {e}"))?;
            Ok(listener)
        })
        .collect()
}

/// Who holds `addr` for listening, as the kernel's socket tables say (the owner's uid),
/// if anyone does.
pub fn holder(addr: SocketAddr) -> Option<u32> {
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    holder_in(&std::fs::read_to_string(table).ok()?, addr.port())
}

/// The uid of a listening socket (state 0A) on `port` in a `/proc/net/tcp` table.
pub fn holder_in(table: &str, port: u16) -> Option<u32> {
    let want = format!("{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local_port = f.get(1)?.rsplit_once(':')?.1;
        (local_port == want && *f.get(3)? == "0A")
            .then(|| f.get(7)?.parse().ok())
            .flatten()
    })
}

/// The user name of `uid`, or the number.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| format!("{} (uid {uid})", u.name))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// Binds `addr`, trying again while another process holds it, and sends the listener on;
/// an address this host does not have (no IPv6 loopback) is left out.
pub async fn bind_when_free(
    addr: SocketAddr,
    out: tokio::sync::mpsc::Sender<tokio::net::TcpListener>,
) {
    let mut told = false;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                if told {
                    tracing::warn!("the HTTP API is on {addr} again: it was freed");
                }
                let _ = out.send(l).await;
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable && addr.is_ipv6() => {
                tracing::debug!("no IPv6 loopback here ({e}); the HTTP API is on IPv4 only");
                return;
            }
            Err(e) => {
                if !told {
                    let who = holder(addr)
                        .map(|uid| format!(", held by {}", user_name(uid)))
                        .unwrap_or_default();
                    tracing::error!(
                        "the HTTP API cannot listen on {addr}: {e}{who}; gctld serves gRPC and schedules meanwhile, and takes the address as soon as it is free (a one-server install uses systemd's socket, which no user can take: deploy/systemd/one-server/gctld.socket)"
                    );
                    told = true;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_address_means_both_loopback_addresses() {
        for v in ["127.0.0.1:9817", "localhost:9817", "[::1]:9817"] {
            assert_eq!(
                addresses(v).unwrap(),
                vec![
                    "127.0.0.1:9817".parse::<SocketAddr>().unwrap(),
                    "[::1]:9817".parse().unwrap()
                ],
                "{v}"
            );
        }
        assert_eq!(
            addresses("10.0.0.1:9817").unwrap(),
            vec!["10.0.0.1:9817".parse::<SocketAddr>().unwrap()]
        );
        assert!(addresses("9817").is_err());
        assert!(addresses("host.example:9817").is_err());
        assert!(addresses("127.0.0.1:http").is_err());
    }

    #[test]
    fn the_holder_of_a_port_is_read_from_the_socket_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:2649 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0 100 0 0 10 0\n   1: 0100007F:2649 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 0 100 0 0 10 0\n";
        assert_eq!(holder_in(table, 9801), Some(1001));
        assert_eq!(holder_in(table, 9817), None);
    }
}
