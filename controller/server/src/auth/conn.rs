//! Accepted connections and what the kernel says about them: the addresses, and the uid
//! of the client — `SO_PEERCRED` on a Unix socket, one exact `sock_diag` lookup for a
//! loopback TCP connection (`gsched_proto::peer`; no scan of `/proc/net/tcp`) — which
//! controllers on one host (`--dev-local`) use as the caller's identity. With TLS, the
//! certificates the client presented and its place among the listener's connections,
//! which its first authenticated request identifies.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tonic::transport::server::Connected;

/// Facts about one accepted connection, attached to every request on it.
#[derive(Clone, Default)]
pub struct ConnInfo {
    pub local: Option<SocketAddr>,
    /// The client's address (none for a Unix socket).
    pub remote: Option<SocketAddr>,
    /// The uid of the client, when the kernel can tell and it was asked for.
    pub peer_uid: Option<u32>,
    /// The certificate chain a TLS client presented, verified against the cluster CA.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// The connection's place (`crate::accept`), identified by its first authenticated
    /// request when the connection was not identified on arrival.
    pub slot: Option<Arc<crate::accept::Slot>>,
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnInfo")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("peer_uid", &self.peer_uid)
            .field("certificates", &self.peer_certs.as_ref().map(|c| c.len()))
            .field("identified", &self.slot.as_ref().map(|s| s.identified()))
            .finish()
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// An accepted connection (TCP or Unix socket) carrying its [`ConnInfo`], and, once
/// admitted (`crate::accept`), its place among the listener's connections and the
/// deadline for its first bytes.
pub struct Conn {
    stream: Stream,
    info: ConnInfo,
    _permit: Option<crate::accept::Permit>,
    first_bytes: Option<Pin<Box<tokio::time::Sleep>>>,
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
                ..ConnInfo::default()
            },
            _permit: None,
            first_bytes: None,
        })
    }

    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// The connection holds `permit` while it lives, and is closed if it sends nothing
    /// within `first_bytes`.
    pub fn admitted(mut self, permit: crate::accept::Permit, first_bytes: Duration) -> Conn {
        self.info.slot = Some(permit.slot());
        self._permit = Some(permit);
        self.first_bytes = Some(Box::pin(tokio::time::sleep(first_bytes)));
        self
    }

    /// Wraps an accepted Unix-socket stream; its peer's uid is `SO_PEERCRED`'s.
    pub fn unix(stream: UnixStream) -> std::io::Result<Conn> {
        let peer_uid = Some(gsched_proto::peer::unix_peer_uid(&stream)?);
        Ok(Conn {
            stream: Stream::Unix(stream),
            info: ConnInfo {
                peer_uid,
                ..ConnInfo::default()
            },
            _permit: None,
            first_bytes: None,
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
        let before = buf.filled().len();
        let read = both!(self, s => Pin::new(s).poll_read(cx, buf));
        let Some(deadline) = self.first_bytes.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.first_bytes = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client sent nothing in time",
                ))),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
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

/// A TLS connection of the gRPC port: closed when its place is taken for a newer one, or
/// when it is still unidentified at its deadline, whatever it sends meanwhile (HTTP/2
/// pings, requests that do not authenticate).
pub struct TlsConn {
    io: tokio_rustls::server::TlsStream<Conn>,
    info: ConnInfo,
    identify_by: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl TlsConn {
    pub fn new(
        io: tokio_rustls::server::TlsStream<Conn>,
        peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
        slot: Arc<crate::accept::Slot>,
        identify_by: tokio::time::Instant,
    ) -> TlsConn {
        let mut info = io.get_ref().0.info().clone();
        info.peer_certs = peer_certs;
        info.slot = Some(slot);
        TlsConn {
            io,
            info,
            identify_by: Some(Box::pin(tokio::time::sleep_until(identify_by))),
        }
    }

    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        // Identified once, for good: no lock on the slot for each read after that.
        if self.identify_by.is_none() {
            return read;
        }
        let Some(slot) = self.info.slot.clone() else {
            return read;
        };
        if slot.identified() {
            self.identify_by = None;
            return read;
        }
        slot.on_close(cx.waker());
        if slot.closed() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed for a newer connection from the same address",
            )));
        }
        if let Some(by) = self.identify_by.as_mut()
            && by.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not identify itself in time",
            )));
        }
        read
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
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
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_and_gives_its_place_back() {
        let admission = crate::accept::Admission::new(crate::accept::Limits {
            total: 8,
            per_peer: 1,
            first_bytes: Duration::from_millis(100),
            identify: Duration::from_millis(100),
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _silent = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let peer = crate::accept::Peer::Uid(4242);
        let permit = admission.admit(peer).unwrap();
        assert!(admission.admit(peer).is_none(), "one per peer");
        let mut conn = Conn::tcp(s, false)
            .unwrap()
            .admitted(permit, Duration::from_millis(100));
        let mut buf = [0u8; 8];
        let e = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        drop(conn);
        assert!(admission.admit(peer).is_some(), "its place is free again");
    }

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
