//! Accepted connections and what the kernel says about them: the addresses, and the uid
//! of the client — `SO_PEERCRED` on a Unix socket, one exact `sock_diag` lookup for a
//! loopback TCP connection (`gsched_proto::peer`; no scan of `/proc/net/tcp`) — which
//! controllers on one host (`--dev-local`) use as the caller's identity.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tonic::transport::server::Connected;

/// Facts about one accepted connection, attached to every request on it.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub local: Option<SocketAddr>,
    /// The client's address (none for a Unix socket).
    pub remote: Option<SocketAddr>,
    /// The uid of the client, when the kernel can tell and it was asked for.
    pub peer_uid: Option<u32>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// An accepted connection (TCP or Unix socket) carrying its [`ConnInfo`].
pub struct Conn {
    stream: Stream,
    info: ConnInfo,
}

impl Conn {
    /// Wraps an accepted TCP stream; `with_uid` asks the kernel who owns the client's
    /// socket (loopback only).
    pub fn tcp(stream: TcpStream, with_uid: bool) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        let local = stream.local_addr().ok();
        let remote = stream.peer_addr().ok();
        let peer_uid = match (with_uid, local, remote) {
            (true, Some(l), Some(r)) if r.ip().is_loopback() => loopback_peer_uid(l, r),
            _ => None,
        };
        Ok(Conn {
            stream: Stream::Tcp(stream),
            info: ConnInfo {
                local,
                remote,
                peer_uid,
            },
        })
    }

    /// Wraps an accepted Unix-socket stream; its peer's uid is `SO_PEERCRED`'s.
    pub fn unix(stream: UnixStream) -> std::io::Result<Conn> {
        let peer_uid = Some(gsched_proto::peer::unix_peer_uid(&stream)?);
        Ok(Conn {
            stream: Stream::Unix(stream),
            info: ConnInfo {
                local: None,
                remote: None,
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

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match &mut $self.stream {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_shutdown(cx))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }
}

/// The owner of the client end of a loopback connection: the socket whose local address
/// is the client's and whose remote address is ours.
pub fn loopback_peer_uid(ours: SocketAddr, theirs: SocketAddr) -> Option<u32> {
    gsched_proto::peer::tcp_socket_uid(theirs, ours)
        .map_err(|e| tracing::debug!("cannot ask the kernel who owns {theirs}: {e}"))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loopback_client_is_known_by_its_uid() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let conn = Conn::tcp(s, true).unwrap();
        assert_eq!(conn.info.peer_uid, Some(nix::unistd::getuid().as_raw()));
        assert_eq!(conn.info.remote, c.local_addr().ok());
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(
            Conn::unix(a).unwrap().info.peer_uid,
            Some(nix::unistd::getuid().as_raw())
        );
    }
}
