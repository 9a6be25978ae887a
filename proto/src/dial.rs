//! How a process reaches a controller: TLS with the cluster CA, or, on one host, plaintext
//! over a Unix socket (`unix:/run/gsched/gctld.sock`) or loopback TCP. A plaintext server
//! is trusted only when the kernel says it runs as a trusted uid
//! ([`crate::peer::trusted_server_uids`]): a local user who takes over a stopped
//! controller's address is refused before anything is sent to them.

use crate::peer;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Uri};

/// An address of a controller: `HOST:PORT`, or `unix:PATH` for a Unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(String),
    Unix(PathBuf),
}

impl Address {
    pub fn parse(addr: &str) -> Address {
        match addr.strip_prefix("unix:") {
            Some(path) => Address::Unix(PathBuf::from(path)),
            None => Address::Tcp(addr.to_string()),
        }
    }
}

/// Why a controller could not be dialled.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("bad controller address {addr}: {why}")]
    BadAddress { addr: String, why: String },
    #[error(
        "refusing to talk to {addr} without TLS: only controllers on this host (a Unix socket or loopback) are reached in plaintext; set GSCHED_TLS_CA to the cluster's ca.pem"
    )]
    PlaintextOffHost { addr: String },
    #[error(
        "refusing {addr}: its server runs as uid {uid}, not as a gsched daemon (trusted: {trusted:?}); another user may have taken the address of a stopped controller. Set GSCHED_DAEMON_USER if the daemons run as a dedicated user"
    )]
    UntrustedServer {
        addr: String,
        uid: u32,
        trusted: Vec<u32>,
    },
    #[error(
        "refusing {addr}: the kernel cannot say who serves it ({why}); plaintext controllers must be on this host"
    )]
    UnknownServer { addr: String, why: String },
    #[error("cannot reach {addr}: {why}")]
    Unreachable { addr: String, why: String },
}

/// How long to wait for a connection, and for each request on it; and how often to ping
/// the server (also while idle), closing the connection when a ping goes unanswered that
/// long (for long-lived streams, which a request timeout would cut).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Option<Duration>,
    pub keepalive: Option<Duration>,
}

/// How a process dials controllers: plaintext on this host, or TLS with the cluster CA
/// (and, for daemons, their own certificate).
#[derive(Debug, Clone, Default)]
pub struct Dialer {
    pub tls: Option<ClientTlsConfig>,
}

impl Dialer {
    /// A user's client: TLS with the CA at `ca`, no client certificate.
    pub fn user(ca: &std::path::Path) -> Result<Dialer, crate::tls::CertError> {
        let pem = std::fs::read(ca).map_err(|source| crate::tls::CertError::Read {
            path: ca.display().to_string(),
            source,
        })?;
        Ok(Dialer {
            tls: Some(
                ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem)),
            ),
        })
    }

    /// Connects to `addr`, checking who serves it (the certificate, or for plaintext the
    /// kernel's word on the server's uid).
    pub async fn connect(&self, addr: &str, t: Timeouts) -> Result<Channel, DialError> {
        let bad = |why: String| DialError::BadAddress {
            addr: addr.to_string(),
            why,
        };
        let unreachable = |why: String| DialError::Unreachable {
            addr: addr.to_string(),
            why,
        };
        let with_timeouts = |ep: Endpoint| {
            let ep = ep.connect_timeout(t.connect).tcp_nodelay(true);
            let ep = match t.keepalive {
                Some(k) => ep
                    .http2_keep_alive_interval(k)
                    .keep_alive_timeout(k)
                    .keep_alive_while_idle(true),
                None => ep,
            };
            match t.request {
                Some(r) => ep.timeout(r),
                None => ep,
            }
        };
        match (&self.tls, Address::parse(addr)) {
            (Some(tls), Address::Tcp(hostport)) => {
                let ep = Endpoint::from_shared(format!("https://{hostport}"))
                    .map_err(|e| bad(e.to_string()))?
                    .tls_config(tls.clone())
                    .map_err(|e| bad(format!("TLS setup: {e}")))?;
                with_timeouts(ep)
                    .connect()
                    .await
                    .map_err(|e| unreachable(error_chain(&e)))
            }
            (Some(_), Address::Unix(_)) => Err(bad(
                "a Unix socket serves the controllers of one host in plaintext; this client is set up for TLS (unset GSCHED_TLS_CA)".into(),
            )),
            (None, Address::Tcp(hostport)) => {
                if !is_loopback(&hostport) {
                    return Err(DialError::PlaintextOffHost {
                        addr: addr.to_string(),
                    });
                }
                let ep = with_timeouts(
                    Endpoint::from_shared(format!("http://{hostport}"))
                        .map_err(|e| bad(e.to_string()))?,
                );
                let name = addr.to_string();
                let connect_timeout = t.connect;
                let connector = tower::service_fn(move |uri: Uri| {
                    let name = name.clone();
                    async move {
                        let target = uri
                            .authority()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        let stream = tokio::time::timeout(
                            connect_timeout,
                            tokio::net::TcpStream::connect(target),
                        )
                        .await
                        .map_err(|_| std::io::Error::other("connection timed out"))??;
                        stream.set_nodelay(true)?;
                        check_tcp_server(&name, &stream).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                });
                ep.connect_with_connector(connector)
                    .await
                    .map_err(|e| classify(addr, &e))
            }
            (None, Address::Unix(path)) => {
                // The URI is not dialled: the connector below opens the socket.
                let ep = with_timeouts(Endpoint::from_static("http://gsched.local"));
                let name = addr.to_string();
                let connector = tower::service_fn(move |_: Uri| {
                    let (path, name) = (path.clone(), name.clone());
                    async move {
                        let stream = tokio::net::UnixStream::connect(&path).await?;
                        let uid = peer::unix_peer_uid(&stream)?;
                        check_uid(&name, uid)?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                });
                ep.connect_with_connector(connector)
                    .await
                    .map_err(|e| classify(addr, &e))
            }
        }
    }
}

/// The server of a loopback TCP connection must be a trusted uid. Right after connect the
/// server's end may still be finishing the handshake (microseconds on loopback); it is
/// asked again at once a few times, then every millisecond for up to 100 ms.
async fn check_tcp_server(name: &str, stream: &tokio::net::TcpStream) -> std::io::Result<()> {
    let (ours, theirs) = (stream.local_addr()?, stream.peer_addr()?);
    const QUICK: u32 = 50;
    for attempt in 0..QUICK + 100 {
        match peer::tcp_socket_uid(theirs, ours) {
            Ok(Some(uid)) => return check_uid(name, uid),
            Ok(None) if attempt < QUICK => tokio::task::yield_now().await,
            Ok(None) if attempt < QUICK + 99 => tokio::time::sleep(Duration::from_millis(1)).await,
            Ok(None) => break,
            Err(e) => {
                return Err(std::io::Error::other(DialError::UnknownServer {
                    addr: name.to_string(),
                    why: e.to_string(),
                }));
            }
        }
    }
    Err(std::io::Error::other(DialError::UnknownServer {
        addr: name.to_string(),
        why: "no established server socket answers for this connection".into(),
    }))
}

fn check_uid(name: &str, uid: u32) -> std::io::Result<()> {
    let trusted = peer::trusted_server_uids();
    if trusted.contains(&uid) {
        Ok(())
    } else {
        Err(std::io::Error::other(DialError::UntrustedServer {
            addr: name.to_string(),
            uid,
            trusted,
        }))
    }
}

/// A connection error as the dial error that caused it, when there is one.
fn classify(addr: &str, e: &tonic::transport::Error) -> DialError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(d) = inner.downcast_ref::<DialError>()
        {
            return match d {
                DialError::UntrustedServer { uid, trusted, .. } => DialError::UntrustedServer {
                    addr: addr.to_string(),
                    uid: *uid,
                    trusted: trusted.clone(),
                },
                DialError::UnknownServer { why, .. } => DialError::UnknownServer {
                    addr: addr.to_string(),
                    why: why.clone(),
                },
                other => DialError::Unreachable {
                    addr: addr.to_string(),
                    why: other.to_string(),
                },
            };
        }
        source = s.source();
    }
    DialError::Unreachable {
        addr: addr.to_string(),
        why: error_chain(e),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Is `addr` (HOST:PORT, HOST, or `unix:PATH`) on this host: a Unix socket or the loopback
/// interface?
pub fn is_loopback(addr: &str) -> bool {
    if addr.starts_with("unix:") {
        return true;
    }
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_are_told_apart() {
        for a in [
            "127.0.0.1:6817",
            "127.1.2.3:1",
            "[::1]:6817",
            "localhost:6817",
            "::1",
            "unix:/run/gsched/gctld.sock",
        ] {
            assert!(is_loopback(a), "{a}");
        }
        for a in ["10.0.0.1:6817", "h1:6817", "0.0.0.0:6817", "[::]:1"] {
            assert!(!is_loopback(a), "{a}");
        }
        assert_eq!(
            Address::parse("unix:/run/gsched/gctld.sock"),
            Address::Unix("/run/gsched/gctld.sock".into())
        );
    }

    #[tokio::test]
    async fn a_plaintext_server_of_our_own_uid_is_dialled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _l = tokio::net::UnixListener::bind(&path).unwrap();
        let addr = format!("unix:{}", path.display());
        let t = Timeouts {
            connect: Duration::from_secs(2),
            request: None,
            keepalive: None,
        };
        // The listener never answers HTTP/2, but the connection and the uid check
        // succeed (the HTTP/2 handshake does not wait for the server's reply).
        let r = Dialer::default().connect(&addr, t).await;
        assert!(r.is_ok(), "our own uid is trusted: {r:?}");
        // Nobody listening: unreachable, not a trust failure.
        drop(_l);
        let r = Dialer::default().connect(&addr, t).await.unwrap_err();
        assert!(matches!(r, DialError::Unreachable { .. }), "{r}");
        let r = Dialer::default()
            .connect("10.1.2.3:6817", t)
            .await
            .unwrap_err();
        assert!(matches!(r, DialError::PlaintextOffHost { .. }), "{r}");
    }
}
