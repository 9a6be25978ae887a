//! Which connections a controller keeps: at most so many in all and per peer (a uid on
//! one host, else an IP address), each must send its first bytes within a deadline, and an
//! accept that fails for want of file descriptors backs off instead of spinning. A flood of
//! idle connections from one user costs that user their own connections, not anyone
//! else's reads. With TLS the gRPC port's handshakes are made here: a connection counts
//! against its IP address until it is identified — a daemon by its certificate at once,
//! a user by the first request that authenticates — and then against that identity;
//! one that is not identified in time is closed, and a full address gives up its oldest
//! unidentified connection for a new one, so agents on a host whose users flood it still
//! get in.

use crate::auth::conn::Conn;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once.
    pub total: usize,
    /// Connections held at once by one peer (daemons of the controller's own uid are not
    /// counted).
    pub per_peer: usize,
    /// A connection that sends nothing for this long after it is accepted is closed.
    pub first_bytes: Duration,
    /// A TLS connection whose caller is not identified (a certificate, or a request that
    /// authenticates) this long after it is accepted is closed.
    pub identify: Duration,
}

impl Limits {
    /// The defaults: a quarter of the descriptors this process may open (at most 16,384)
    /// in all, 128 per peer, 10 s for the first bytes.
    pub fn default_for_process() -> Limits {
        Limits {
            total: (raise_fd_limit() / 4).clamp(64, 16_384),
            per_peer: 128,
            first_bytes: Duration::from_secs(10),
            identify: Duration::from_secs(10),
        }
    }
}

/// Who a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    Uid(u32),
    Ip(IpAddr),
    /// The controller's own uid: its agents and peers, never refused.
    Daemon,
}

/// Why a connection was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Full { total: usize },
    PeerFull { per_peer: usize },
}

/// The counts behind [`Limits`]; pure decisions, shared by a listener's connections.
#[derive(Debug, Default)]
pub struct Counts {
    total: usize,
    per_peer: HashMap<Peer, usize>,
}

impl Counts {
    /// Takes a place for a connection of `peer`, or says why there is none.
    pub fn admit(&mut self, peer: Peer, limits: &Limits) -> Result<(), Refusal> {
        if peer != Peer::Daemon {
            if self.total >= limits.total {
                return Err(Refusal::Full {
                    total: limits.total,
                });
            }
            if self.per_peer.get(&peer).copied().unwrap_or(0) >= limits.per_peer {
                return Err(Refusal::PeerFull {
                    per_peer: limits.per_peer,
                });
            }
        }
        self.total += 1;
        *self.per_peer.entry(peer).or_insert(0) += 1;
        Ok(())
    }

    /// Gives back the place of a closed connection of `peer`.
    pub fn release(&mut self, peer: Peer) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
    }

    pub fn held(&self, peer: Peer) -> usize {
        self.per_peer.get(&peer).copied().unwrap_or(0)
    }
}

/// How many addresses the table of unidentified connections holds before it forgets
/// those with none left.
const PENDING_ADDRESSES: usize = 1024;

/// A listener's admission: limits, counts, and when a refusal was last logged.
pub struct Admission {
    limits: Limits,
    counts: Mutex<Counts>,
    own_uid: u32,
    last_warned: Mutex<Option<Instant>>,
    /// Unidentified connections by address, oldest first (evicted for newer ones).
    pending: Mutex<HashMap<IpAddr, std::collections::VecDeque<std::sync::Weak<Slot>>>>,
}

/// A connection's place, given back when the connection is dropped.
pub struct Permit {
    slot: Arc<Slot>,
}

impl Permit {
    /// The place, shared with what the connection's requests carry (`ConnInfo`), so that
    /// authenticating a request can identify the connection.
    pub fn slot(&self) -> Arc<Slot> {
        self.slot.clone()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.slot.state.lock();
        if let Some(peer) = state.peer.take() {
            self.slot.admission.counts.lock().release(peer);
        }
    }
}

/// What one connection counts against, and whether it has been identified or told to
/// close (evicted for a newer connection, or refused once identified).
pub struct Slot {
    admission: Arc<Admission>,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// `None` once the place was given back.
    peer: Option<Peer>,
    identified: bool,
    closed: bool,
    waker: Option<std::task::Waker>,
}

impl Slot {
    pub fn identified(&self) -> bool {
        self.state.lock().identified
    }

    pub fn closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Wakes the connection's reader when the slot is closed.
    pub fn on_close(&self, waker: &std::task::Waker) {
        self.state.lock().waker = Some(waker.clone());
    }

    /// The connection belongs to `who`: it counts against `who` from now on (a daemon's
    /// never refused). Over `who`'s share, the connection is closed and the refusal said.
    pub fn identify(&self, who: Peer) -> Result<(), Refusal> {
        let mut state = self.state.lock();
        if state.identified || state.closed {
            return if state.closed {
                Err(Refusal::PeerFull {
                    per_peer: self.admission.limits.per_peer,
                })
            } else {
                Ok(())
            };
        }
        let mut counts = self.admission.counts.lock();
        if let Some(old) = state.peer.take() {
            counts.release(old);
        }
        match counts.admit(who, &self.admission.limits) {
            Ok(()) => {
                state.peer = Some(who);
                state.identified = true;
                Ok(())
            }
            Err(why) => {
                state.closed = true;
                if let Some(w) = state.waker.take() {
                    w.wake();
                }
                Err(why)
            }
        }
    }

    /// Closes an unidentified connection to make room (its place is given back now).
    fn evict(&self) -> bool {
        let mut state = self.state.lock();
        if state.identified || state.closed {
            return false;
        }
        state.closed = true;
        if let Some(peer) = state.peer.take() {
            self.admission.counts.lock().release(peer);
        }
        if let Some(w) = state.waker.take() {
            w.wake();
        }
        true
    }
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            counts: Mutex::new(Counts::default()),
            own_uid: nix::unistd::getuid().as_raw(),
            last_warned: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The peer a connection counts against: its uid when the kernel told it, else its IP.
    pub fn peer_of(&self, uid: Option<u32>, ip: Option<IpAddr>) -> Peer {
        match (uid, ip) {
            (Some(u), _) if u == self.own_uid => Peer::Daemon,
            (Some(u), _) => Peer::Uid(u),
            (None, Some(ip)) => Peer::Ip(ip),
            (None, None) => Peer::Uid(u32::MAX),
        }
    }

    fn permit(self: &Arc<Self>, peer: Peer, identified: bool) -> Permit {
        Permit {
            slot: Arc::new(Slot {
                admission: self.clone(),
                state: Mutex::new(SlotState {
                    peer: Some(peer),
                    identified,
                    closed: false,
                    waker: None,
                }),
            }),
        }
    }

    /// A permit for an unidentified connection from `ip`: when the address holds its
    /// share, its oldest unidentified connection is closed to make room (one that is
    /// identified in time is never evicted). `None` when the listener is full.
    pub fn admit_unidentified(self: &Arc<Self>, ip: IpAddr) -> Option<Permit> {
        let peer = Peer::Ip(ip);
        let mut refused = self.counts.lock().admit(peer, &self.limits);
        if matches!(refused, Err(Refusal::PeerFull { .. })) {
            let mut pending = self.pending.lock();
            let queue = pending.entry(ip).or_default();
            while let Some(old) = queue.pop_front() {
                if old.upgrade().is_some_and(|slot| slot.evict()) {
                    break;
                }
            }
            refused = self.counts.lock().admit(peer, &self.limits);
        }
        if let Err(why) = refused {
            self.warn_refused(peer, why);
            return None;
        }
        let permit = self.permit(peer, false);
        let mut pending = self.pending.lock();
        // Addresses whose connections are all gone or identified are forgotten once many
        // have been seen, so the table stays the size of what is pending.
        if pending.len() >= PENDING_ADDRESSES {
            pending.retain(|_, q| {
                q.retain(|w| w.upgrade().is_some_and(|s| !s.identified()));
                !q.is_empty()
            });
        }
        let queue = pending.entry(ip).or_default();
        queue.retain(|w| w.upgrade().is_some_and(|s| !s.identified()));
        queue.push_back(Arc::downgrade(&permit.slot));
        Some(permit)
    }

    fn warn_refused(&self, peer: Peer, why: Refusal) {
        let mut last = self.last_warned.lock();
        if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            *last = Some(Instant::now());
            tracing::warn!("connection from {peer:?} refused: {why:?}");
        }
    }

    /// A permit for a connection of `peer`, or `None` (logged at most every 10 s).
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Option<Permit> {
        let refused = self.counts.lock().admit(peer, &self.limits);
        match refused {
            Ok(()) => Some(self.permit(peer, true)),
            Err(why) => {
                self.warn_refused(peer, why);
                None
            }
        }
    }
}

/// Whether an accept error means the process is out of descriptors or memory (back off)
/// rather than one connection failing (go on at once).
pub fn needs_backoff(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Raises this process's soft limit on open files to its hard limit; returns the limit.
pub fn raise_fd_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the one struct passed, which lives across
    // both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
}

/// Accepted gRPC connections that passed admission, for tonic's `serve_with_incoming`;
/// with `tls`, handshaken here (each by a task of its own) and identified by their
/// certificate or, for users, by their first authenticated request (`crate::auth`).
pub fn grpc_incoming(
    listener: crate::Listener,
    dev_local: bool,
    admission: Arc<Admission>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<GrpcIo>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let listener = match (tls, listener) {
        (Some(acceptor), crate::Listener::Tcp(l)) => {
            tokio::spawn(accept_tls(l, admission, acceptor, tx));
            return tokio_stream::wrappers::ReceiverStream::new(rx);
        }
        (_, plain) => plain,
    };
    tokio::spawn(async move {
        loop {
            let conn = accepting(&admission, || async {
                match &listener {
                    crate::Listener::Tcp(l) => {
                        l.accept().await.and_then(|(s, _)| Conn::tcp(s, dev_local))
                    }
                    crate::Listener::Unix(l) => l.accept().await.and_then(|(s, _)| Conn::unix(s)),
                }
            })
            .await;
            let info = conn.info();
            let peer = admission.peer_of(info.peer_uid, info.remote.map(|r| r.ip()));
            let Some(permit) = admission.admit(peer) else {
                continue;
            };
            let conn = conn.admitted(permit, admission.limits().first_bytes);
            if tx.send(Ok(GrpcIo::Plain(conn))).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The gRPC port with TLS: every connection counts against its address until identified,
/// is handshaken by a task of its own, and a verified daemon certificate identifies it.
async fn accept_tls(
    listener: tokio::net::TcpListener,
    admission: Arc<Admission>,
    acceptor: tokio_rustls::TlsAcceptor,
    tx: tokio::sync::mpsc::Sender<std::io::Result<GrpcIo>>,
) {
    loop {
        let (stream, remote) = accepting(&admission, || listener.accept()).await;
        let Ok(conn) = Conn::tcp(stream, false) else {
            continue;
        };
        let Some(permit) = admission.admit_unidentified(remote.ip()) else {
            continue;
        };
        let slot = permit.slot();
        let limits = admission.limits();
        let conn = conn.admitted(permit, limits.first_bytes);
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            let began = tokio::time::Instant::now();
            let tls = match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(conn)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!("TLS handshake with {remote}: {e}"),
                Err(_) => return tracing::debug!("TLS handshake with {remote} timed out"),
            };
            let certs =
                tls.get_ref().1.peer_certificates().map(|c| {
                    Arc::new(c.iter().map(|c| c.clone().into_owned()).collect::<Vec<_>>())
                });
            let daemon = certs.as_ref().is_some_and(|c| {
                c.first()
                    .is_some_and(|c| gsched_proto::tls::peer_identity(c.as_ref()).is_some())
            });
            if daemon {
                let _ = slot.identify(Peer::Daemon);
            }
            let conn = crate::auth::conn::TlsConn::new(tls, certs, slot, began + limits.identify);
            let _ = tx.send(Ok(GrpcIo::Tls(Box::new(conn)))).await;
        });
    }
}

/// `AsyncRead` and `AsyncWrite` for an enum of a connection as accepted (`Plain`) and
/// one with TLS (`Tls`), passed through to whichever it is.
macro_rules! plain_or_tls {
    ($ty:ident) => {
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
                    $ty::Tls(s) => std::pin::Pin::new(s).poll_read(cx, buf),
                }
            }
        }

        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $ty::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
                    $ty::Tls(s) => std::pin::Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
                    $ty::Tls(s) => std::pin::Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
                    $ty::Tls(s) => std::pin::Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

/// One accepted gRPC connection: as accepted (a Unix socket, loopback TCP), or with TLS.
pub enum GrpcIo {
    Plain(Conn),
    Tls(Box<crate::auth::conn::TlsConn>),
}

impl tonic::transport::server::Connected for GrpcIo {
    type ConnectInfo = crate::auth::conn::ConnInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        match self {
            GrpcIo::Plain(c) => c.info().clone(),
            GrpcIo::Tls(c) => c.info().clone(),
        }
    }
}

plain_or_tls!(GrpcIo);

/// Calls `accept` until it gives a connection: at once after an error of one connection,
/// 100 ms later when the process is out of descriptors (said at most every 10 s).
async fn accepting<T, F, Fut>(admission: &Admission, mut accept: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<T>>,
{
    loop {
        match accept().await {
            Ok(x) => return x,
            Err(e) if needs_backoff(&e) => {
                warn_backoff(admission, &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => {}
        }
    }
}

fn warn_backoff(admission: &Admission, e: &std::io::Error) {
    let mut last = admission.last_warned.lock();
    if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
        *last = Some(Instant::now());
        tracing::warn!("cannot accept connections ({e}); retrying every 100 ms");
    }
}

/// The HTTP listener with the same admission: connections are accepted, admitted and
/// (with TLS) handshaken by a task of their own, so one slow client holds up no other;
/// each comes with its peer (and the peer's uid when the kernel told it).
pub struct HttpListener {
    ready: tokio::sync::mpsc::Receiver<(HttpIo, HttpPeer)>,
}

/// How long a TLS client may take over its handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

impl HttpListener {
    /// Starts accepting on `listener`; with `tls`, every connection is HTTPS.
    pub fn start(
        mut listeners: tokio::sync::mpsc::Receiver<tokio::net::TcpListener>,
        admission: Arc<Admission>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<HttpListener> {
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            while let Some(listener) = listeners.recv().await {
                tokio::spawn(Self::accept_on(
                    listener,
                    admission.clone(),
                    tls.clone(),
                    tx.clone(),
                ));
            }
        });
        Ok(HttpListener { ready })
    }

    /// Admits connections on one listener until the receiving end is gone.
    async fn accept_on(
        listener: tokio::net::TcpListener,
        admission: Arc<Admission>,
        tls: Option<tokio_rustls::TlsAcceptor>,
        tx: tokio::sync::mpsc::Sender<(HttpIo, HttpPeer)>,
    ) {
        loop {
            let (stream, remote) = accepting(&admission, || listener.accept()).await;
            let Ok(conn) = Conn::tcp(stream, remote.ip().is_loopback()) else {
                continue;
            };
            let uid = conn.info().peer_uid;
            let peer = admission.peer_of(uid, Some(remote.ip()));
            // An HTTPS client the kernel cannot name counts against its address until a
            // request of it authenticates (`http::rest`'s `Verified`), as on the gRPC port.
            let permit = match (peer, &tls) {
                (Peer::Ip(ip), Some(_)) => admission.admit_unidentified(ip),
                _ => admission.admit(peer),
            };
            let Some(permit) = permit else {
                continue;
            };
            let slot = permit.slot();
            let conn = conn.admitted(permit, admission.limits().first_bytes);
            let who = HttpPeer {
                remote,
                uid,
                slot: Some(slot),
            };
            match &tls {
                None => {
                    if tx.send((HttpIo::Plain(conn), who)).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    tokio::spawn(async move {
                        match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(conn)).await {
                            Ok(Ok(s)) => {
                                let _ = tx.send((HttpIo::Tls(Box::new(s)), who)).await;
                            }
                            Ok(Err(e)) => tracing::debug!("HTTPS handshake with {remote}: {e}"),
                            Err(_) => {
                                tracing::debug!("HTTPS handshake with {remote} timed out")
                            }
                        }
                    });
                }
            }
        }
    }
}

/// One HTTP connection: plaintext (loopback) or TLS.
pub enum HttpIo {
    Plain(Conn),
    Tls(Box<tokio_rustls::server::TlsStream<Conn>>),
}

plain_or_tls!(HttpIo);

/// Who an HTTP connection came from, and its place among the listener's connections.
#[derive(Clone)]
pub struct HttpPeer {
    pub remote: std::net::SocketAddr,
    pub uid: Option<u32>,
    pub slot: Option<Arc<Slot>>,
}

impl HttpListener {
    /// The next admitted (and, with TLS, handshaken) connection.
    pub async fn accept(&mut self) -> (HttpIo, HttpPeer) {
        match self.ready.recv().await {
            Some(x) => x,
            // The accepting task is gone (the runtime is stopping): accept nothing more.
            None => std::future::pending().await,
        }
    }
}

/// Why the HTTPS listener cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("cannot read {path}: {why}")]
    Read { path: String, why: String },
    #[error("the HTTPS certificate {path}: {why}")]
    Certificate { path: String, why: String },
}

/// The TLS settings of the HTTP port of a controller with certificates: its own
/// certificate (the one its gRPC port presents), so clients check it with `ca.pem`.
pub fn https(
    certs: &gsched_proto::tls::CertDir,
    id: u64,
) -> Result<tokio_rustls::TlsAcceptor, HttpsError> {
    server_tls(certs, id, false)
}

/// The TLS settings of the gRPC port: the controller's certificate, HTTP/2, and a client
/// certificate verified against the cluster CA when one is presented (daemons must show
/// one; users need not, they authenticate with MUNGE).
pub fn grpc_tls(
    certs: &gsched_proto::tls::CertDir,
    id: u64,
) -> Result<tokio_rustls::TlsAcceptor, HttpsError> {
    server_tls(certs, id, true)
}

fn server_tls(
    certs: &gsched_proto::tls::CertDir,
    id: u64,
    grpc: bool,
) -> Result<tokio_rustls::TlsAcceptor, HttpsError> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let who = gsched_proto::tls::PeerIdentity::Controller(id);
    let (cert, key) = (certs.cert(&who), certs.key(&who));
    let read = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |e: rustls::pki_types::pem::Error| HttpsError::Read {
            path,
            why: e.to_string(),
        }
    };
    let chain = CertificateDer::pem_file_iter(&cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(read(&cert))?;
    let key = PrivateKeyDer::from_pem_file(&key).map_err(read(&key))?;
    let refused = |e: rustls::Error| HttpsError::Certificate {
        path: cert.display().to_string(),
        why: e.to_string(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(refused)?;
    let mut config = if grpc {
        let ca = certs.ca();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&ca).map_err(read(&ca))? {
            roots
                .add(c.map_err(read(&ca))?)
                .map_err(|e| HttpsError::Certificate {
                    path: ca.display().to_string(),
                    why: e.to_string(),
                })?;
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| HttpsError::Certificate {
                    path: ca.display().to_string(),
                    why: e.to_string(),
                })?;
        builder
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(refused)?
    } else {
        builder
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(refused)?
    };
    config.alpn_protocols = if grpc {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            total: 4,
            per_peer: 2,
            first_bytes: Duration::from_secs(1),
            identify: Duration::from_secs(1),
        }
    }

    #[test]
    fn an_address_full_of_unidentified_connections_gives_up_its_oldest() {
        let admission = Admission::new(limits());
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let first = admission.admit_unidentified(ip).unwrap();
        let second = admission.admit_unidentified(ip).unwrap();
        // A third from the same host (its agent, say) gets in: the oldest goes.
        let agent = admission.admit_unidentified(ip).unwrap();
        assert!(first.slot().closed() && !second.slot().closed());
        assert_eq!(agent.slot().identify(Peer::Daemon), Ok(()));
        // Identified, it no longer counts against its address and is never evicted.
        let more = admission.admit_unidentified(ip).unwrap();
        assert!(!second.slot().closed(), "room without evicting");
        let _again = admission.admit_unidentified(ip).unwrap();
        assert!(second.slot().closed() && !more.slot().closed());
        assert!(!agent.slot().closed());
        drop((first, second));
        assert_eq!(admission.counts.lock().held(Peer::Ip(ip)), 2);
        assert_eq!(admission.counts.lock().held(Peer::Daemon), 1);
    }

    #[test]
    fn addresses_with_nothing_pending_are_forgotten_once_many_were_seen() {
        let admission = Admission::new(Limits {
            total: 10_000,
            ..limits()
        });
        for i in 0..PENDING_ADDRESSES as u32 + 10 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let p = admission.admit_unidentified(ip).unwrap();
            drop(p);
        }
        assert!(admission.pending.lock().len() <= PENDING_ADDRESSES + 1);
        assert_eq!(admission.counts.lock().total, 0);
    }

    #[test]
    fn a_user_identified_counts_against_their_uid_wherever_they_come_from() {
        let admission = Admission::new(limits());
        let alice = Peer::Uid(1001);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = admission.admit_unidentified(a).unwrap();
        let p2 = admission.admit_unidentified(b).unwrap();
        assert_eq!(p1.slot().identify(alice), Ok(()));
        assert_eq!(p1.slot().identify(alice), Ok(()), "once is enough");
        assert_eq!(p2.slot().identify(alice), Ok(()));
        assert_eq!(admission.counts.lock().held(alice), 2);
        assert_eq!(admission.counts.lock().held(Peer::Ip(a)), 0);
        // A third of alice's, over her share: refused and closed.
        let p3 = admission.admit_unidentified(b).unwrap();
        assert_eq!(
            p3.slot().identify(alice),
            Err(Refusal::PeerFull { per_peer: 2 })
        );
        assert!(p3.slot().closed());
        drop(p3);
        drop(p1);
        assert_eq!(admission.counts.lock().held(alice), 1);
        assert_eq!(admission.counts.lock().total, 1);
    }

    #[test]
    fn one_peer_fills_its_own_share_not_everyone_elses() {
        let mut c = Counts::default();
        let (bob, alice) = (Peer::Uid(1002), Peer::Uid(1001));
        assert_eq!(c.admit(bob, &limits()), Ok(()));
        assert_eq!(c.admit(bob, &limits()), Ok(()));
        assert_eq!(
            c.admit(bob, &limits()),
            Err(Refusal::PeerFull { per_peer: 2 })
        );
        assert_eq!(c.admit(alice, &limits()), Ok(()));
        assert_eq!(
            c.admit(Peer::Ip("10.0.0.9".parse().unwrap()), &limits()),
            Ok(())
        );
        assert_eq!(
            c.admit(Peer::Uid(1003), &limits()),
            Err(Refusal::Full { total: 4 })
        );
        // The daemons' own connections always get in.
        assert_eq!(c.admit(Peer::Daemon, &limits()), Ok(()));
        c.release(bob);
        assert_eq!(c.held(bob), 1);
        c.release(Peer::Daemon);
        assert_eq!(c.admit(bob, &limits()), Ok(()));
    }

    #[test]
    fn out_of_descriptors_backs_off_and_a_reset_does_not() {
        assert!(needs_backoff(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(!needs_backoff(&std::io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
        assert!(raise_fd_limit() >= 64);
    }
}
