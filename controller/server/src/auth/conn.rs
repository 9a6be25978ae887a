//! Accepted connections and what the kernel says about them: the addresses, and for a
//! loopback connection the uid owning the client's socket (from `/proc/net/tcp`), which
//! `--dev-local` clusters use as the caller's identity.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

/// Facts about one accepted connection, attached to every request on it.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    /// The uid owning the client's socket, for loopback connections when asked for.
    pub peer_uid: Option<u32>,
}

/// An accepted TCP connection carrying its [`ConnInfo`].
pub struct Conn {
    stream: TcpStream,
    info: ConnInfo,
}

impl Conn {
    /// Wraps an accepted stream; `with_uid` looks up the client socket's owner (loopback
    /// only).
    pub fn new(stream: TcpStream, with_uid: bool) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        let local = stream.local_addr().ok();
        let remote = stream.peer_addr().ok();
        let peer_uid = match (with_uid, local, remote) {
            (true, Some(l), Some(r)) if r.ip().is_loopback() => loopback_peer_uid(l, r),
            _ => None,
        };
        Ok(Conn {
            stream,
            info: ConnInfo {
                local,
                remote,
                peer_uid,
            },
        })
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// `/proc/net/tcp*`'s spelling of an address: the IP's 32-bit words in host byte order
/// as hex, then the port.
fn proc_net_addr(a: SocketAddr) -> String {
    let ip = match a.ip() {
        IpAddr::V4(v4) => format!("{:08X}", u32::from_ne_bytes(v4.octets())),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks(4)
            .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    };
    format!("{ip}:{:04X}", a.port())
}

/// The owner of the client end of a loopback connection: the `/proc/net/tcp` row whose
/// local address is the client's and whose remote address is ours.
pub fn loopback_peer_uid(ours: SocketAddr, theirs: SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (proc_net_addr(theirs), proc_net_addr(ours));
    let table = match theirs {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    uid_in_table(&text, &want_local, &want_remote)
}

fn uid_in_table(text: &str, local: &str, remote: &str) -> Option<u32> {
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 7 && f[1].eq_ignore_ascii_case(local) && f[2].eq_ignore_ascii_case(remote))
            .then(|| f[7].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_matched_by_both_ends() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            73: 0100007F:8AEA 0100007F:B459 01 00000000:00000000 00:00000000 00000000  1001        0 12057 2\n   \
            74: 0100007F:B459 0100007F:8AEA 01 00000000:00000000 00:00000000 00000000     0        0 12058 2\n";
        let client: SocketAddr = "127.0.0.1:35562".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:46169".parse().unwrap();
        assert_eq!(proc_net_addr(client), "0100007F:8AEA");
        assert_eq!(
            uid_in_table(table, &proc_net_addr(client), &proc_net_addr(server)),
            Some(1001)
        );
        assert_eq!(
            uid_in_table(table, &proc_net_addr(server), &proc_net_addr(client)),
            Some(0)
        );
        assert_eq!(uid_in_table(table, "0100007F:0001", "0100007F:8AEA"), None);
    }

    #[test]
    fn a_live_loopback_connection_is_owned_by_this_process() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let uid = loopback_peer_uid(server.local_addr().unwrap(), server.peer_addr().unwrap());
        assert_eq!(uid, Some(nix::unistd::getuid().as_raw()));
        drop(client);
    }
}
