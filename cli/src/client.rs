//! The client every CLI tool uses: tries the configured controllers in turn, follows the
//! leader hint a controller returns, and retries transient failures (elections, a dead
//! controller) with the same request id until a time budget runs out, so a user sees a
//! short delay during a failover rather than an error.
//!
//! Who the caller is travels as a fresh MUNGE credential on every request, over TLS
//! checked against the cluster's CA (`GSCHED_TLS_CA`, else `/etc/gsched/tls/ca.pem`). A
//! `--dev-local` cluster on loopback needs neither: the controller asks the kernel who
//! owns the connection.

use gsched_proto::dial::{DialError, Dialer, Timeouts};
use gsched_proto::munge::Munge;
use gsched_proto::pb::jobs_client::JobsClient;
use gsched_proto::{LEADER_HINT, MUNGE_CREDENTIAL};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The Jobs API as the tools call it: every request carries the caller's credential.
pub type Api = JobsClient<WithCredential>;

/// Puts a fresh MUNGE credential on every request (nothing on `--dev-local` clusters),
/// bound to the cluster and to the controller it is sent to, and decodable only by the
/// controllers' uid.
#[derive(Clone, Default)]
pub struct Credential {
    munge: Option<Arc<Munge>>,
    /// The cluster's CA fingerprint (`gsched_proto::tls::cluster_id`).
    cluster: String,
    /// The uid the controllers run as: root, or `GSCHED_DAEMON_USER`.
    decoder: Option<u32>,
    /// The controller address this credential is for.
    to: String,
}

impl Credential {
    /// The same credential maker, for requests to the controller at `to`.
    pub fn to(&self, to: &str) -> Credential {
        Credential {
            to: to.to_string(),
            ..self.clone()
        }
    }
}

/// A channel that puts a fresh MUNGE credential, made for this very request's body, on
/// every request (nothing on `--dev-local` clusters).
#[derive(Clone)]
pub struct WithCredential {
    channel: Channel,
    credential: Credential,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<tonic::body::Body>> for WithCredential {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send + 'static>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        tower::Service::poll_ready(&mut self.channel, cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let clone = self.channel.clone();
        let mut channel = std::mem::replace(&mut self.channel, clone);
        let credential = self.credential.clone();
        Box::pin(async move {
            let Some(munge) = &credential.munge else {
                return tower::Service::call(&mut channel, req)
                    .await
                    .map_err(Into::into);
            };
            let (mut parts, body) = req.into_parts();
            let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
            let payload = gsched_proto::munge::request_payload(
                &credential.cluster,
                &credential.to,
                &gsched_proto::munge::body_digest(&bytes),
            );
            let cred = munge
                .encode(&payload, credential.decoder)
                .map_err(|e| Status::unauthenticated(e.to_string()))?;
            let value = http::HeaderValue::from_str(&cred).map_err(|_| {
                Status::unauthenticated("munge made a credential that is not ASCII")
            })?;
            parts.headers.insert(MUNGE_CREDENTIAL, value);
            let req = http::Request::from_parts(
                parts,
                tonic::body::Body::new(http_body_util::Full::new(bytes)),
            );
            tower::Service::call(&mut channel, req)
                .await
                .map_err(Into::into)
        })
    }
}

/// How the tools reach controllers: TLS with the cluster's CA when one is configured
/// (and then a MUNGE credential), else plaintext to loopback controllers.
#[derive(Clone, Default)]
pub struct Security {
    pub dialer: Dialer,
    pub credential: Credential,
}

/// Why a client cannot set up its credentials for a TLS cluster.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("cannot prove who you are: {0}")]
    Munge(#[from] gsched_proto::munge::MungeError),
    #[error(transparent)]
    Cert(#[from] gsched_proto::tls::CertError),
    #[error("GSCHED_DAEMON_USER={0} is no user of this host")]
    DaemonUser(String),
}

impl Security {
    /// From `GSCHED_TLS_CA` (or `/etc/gsched/tls/ca.pem` when it exists) and
    /// `GSCHED_MUNGE_SOCKET`.
    pub fn from_env() -> Result<Security, SecurityError> {
        let ca = std::env::var_os("GSCHED_TLS_CA")
            .map(PathBuf::from)
            .or_else(|| {
                let default = PathBuf::from("/etc/gsched/tls/ca.pem");
                default.exists().then_some(default)
            });
        let Some(ca) = ca else {
            return Ok(Security::default());
        };
        let socket = std::env::var_os("GSCHED_MUNGE_SOCKET").map(PathBuf::from);
        let munge = Munge::load(socket.as_deref())?;
        let pem = std::fs::read(&ca).map_err(|source| gsched_proto::tls::CertError::Read {
            path: ca.display().to_string(),
            source,
        })?;
        let decoder = match std::env::var("GSCHED_DAEMON_USER") {
            Ok(u) => Some(
                gsched_proto::peer::uid_of(u.trim())
                    .ok_or_else(|| SecurityError::DaemonUser(u.clone()))?,
            ),
            Err(_) => Some(0),
        };
        Ok(Security {
            dialer: Dialer::user(&ca)?,
            credential: Credential {
                munge: Some(Arc::new(munge)),
                cluster: gsched_proto::tls::cluster_id(&pem)?,
                decoder,
                to: String::new(),
            },
        })
    }
}

pub struct Client {
    addrs: Vec<String>,
    current: usize,
    channel: Option<(String, Channel)>,
    budget: Duration,
    /// Read from the environment when the first call is made.
    security: Option<Security>,
}

/// The one-server deployment's controller socket (deploy/systemd/one-server).
pub const ONE_SERVER_SOCKET: &str = "/run/gsched/gctld.sock";

/// Controllers from `--controllers`, else `GSCHED_CONTROLLERS`, else the one-server
/// socket when it exists, else 127.0.0.1:6817.
pub fn controller_list(flag: Option<&str>) -> Vec<String> {
    let raw = flag
        .map(str::to_string)
        .or_else(|| std::env::var("GSCHED_CONTROLLERS").ok())
        .unwrap_or_else(|| {
            if std::path::Path::new(ONE_SERVER_SOCKET).exists() {
                format!("unix:{ONE_SERVER_SOCKET}")
            } else {
                "127.0.0.1:6817".into()
            }
        });
    raw.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The first pause once every controller was tried, growing half again each round up to
/// [`RETRY_MAX_DELAY`].
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(25);
/// The longest pause between rounds: an election takes 0.2-0.3 s, and a call should reach
/// the new leader within this of it being elected (a cap of 500 ms made the first write
/// after a failover wait up to 0.9 s), while an outage costs each waiting client no more
/// than ten refused calls a second.
const RETRY_MAX_DELAY: Duration = Duration::from_millis(100);

/// A dial error as the status the retry loop understands: an unreachable controller is
/// tried again (another may answer), a server that is not a gsched daemon or a bad address
/// is final.
fn dial_status(e: DialError) -> Status {
    match e {
        DialError::Unreachable { .. } => Status::unavailable(e.to_string()),
        DialError::UntrustedServer { .. } | DialError::UnknownServer { .. } => {
            let mut s = Status::permission_denied(e.to_string());
            s.metadata_mut().insert(
                REFUSED_SERVER,
                tonic::metadata::MetadataValue::from_static("1"),
            );
            s
        }
        DialError::BadAddress { .. } | DialError::PlaintextOffHost { .. } => {
            Status::invalid_argument(e.to_string())
        }
    }
}

/// Marks a status as this client's refusal of a server it could not trust (nothing was
/// sent to it): another controller of the list may still be tried.
const REFUSED_SERVER: &str = "x-gsched-refused-server";

fn refused_server(s: &Status) -> bool {
    s.metadata().contains_key(REFUSED_SERVER)
}

fn retryable(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::Cancelled
            | Code::Unknown
    )
}

impl Client {
    /// A client of `addrs` with the security settings of the environment (read at the
    /// first call).
    pub fn new(addrs: Vec<String>) -> Client {
        Client::with_security(addrs, None)
    }

    pub fn with_security(addrs: Vec<String>, security: Option<Security>) -> Client {
        let budget = std::env::var("GSCHED_RETRY_S")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(30));
        Client {
            addrs,
            current: 0,
            channel: None,
            budget,
            security,
        }
    }

    pub fn with_budget(mut self, budget: Duration) -> Client {
        self.budget = budget;
        self
    }

    fn security(&mut self) -> Result<&Security, Status> {
        if self.security.is_none() {
            self.security =
                Some(Security::from_env().map_err(|e| Status::unauthenticated(e.to_string()))?);
        }
        Ok(self.security.as_ref().expect("just set"))
    }

    async fn channel(&mut self) -> Result<(Channel, String), Status> {
        let addr = self
            .addrs
            .get(self.current % self.addrs.len().max(1))
            .cloned()
            .ok_or_else(|| Status::invalid_argument("no controllers configured"))?;
        if let Some((a, c)) = &self.channel
            && *a == addr
        {
            return Ok((c.clone(), addr));
        }
        let ch = self
            .security()?
            .dialer
            .connect(
                &addr,
                Timeouts {
                    connect: Duration::from_millis(800),
                    request: Some(Duration::from_secs(15)),
                    keepalive: None,
                },
            )
            .await
            .map_err(dial_status)?;
        self.channel = Some((addr.clone(), ch.clone()));
        Ok((ch, addr))
    }

    /// Calls `f` until it succeeds, fails permanently, or the retry budget is spent.
    pub async fn call<T, F, Fut>(&mut self, mut f: F) -> Result<T, Status>
    where
        F: FnMut(Api) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let start = Instant::now();
        let mut delay = RETRY_FIRST_DELAY;
        let mut hops = 0;
        let mut refused: Vec<usize> = Vec::new();
        loop {
            if !refused.is_empty() {
                self.skip(&refused);
            }
            let result = match self.channel().await {
                Ok((ch, addr)) => f(self.api(ch, &addr)?).await.map(|r| r.into_inner()),
                Err(e) => Err(e),
            };
            match result {
                Ok(v) => return Ok(v),
                Err(s) if refused_server(&s) && refused.len() + 1 < self.addrs.len() => {
                    // Nothing was sent to it; say so and try the others.
                    eprintln!("{}; trying the next controller", s.message());
                    refused.push(self.current % self.addrs.len());
                    self.channel = None;
                    self.current += 1;
                }
                Err(s) if retryable(&s) && start.elapsed() < self.budget => {
                    let hint = s
                        .metadata()
                        .get(LEADER_HINT)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let hinted = hint.and_then(|h| {
                        self.addrs.iter().position(|a| *a == h).or_else(|| {
                            self.addrs.push(h);
                            Some(self.addrs.len() - 1)
                        })
                    });
                    self.channel = None;
                    match hinted {
                        Some(i) if i != self.current % self.addrs.len() => self.current = i,
                        _ => self.current += 1,
                    }
                    // The first hops (a dead leader, then the one a survivor names) are
                    // tried at once; after a whole round the call backs off, but never
                    // by more than RETRY_MAX_DELAY.
                    if hops < self.addrs.len() + 1 {
                        hops += 1;
                    } else {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 3 / 2).min(RETRY_MAX_DELAY);
                    }
                }
                Err(s) => return Err(s),
            }
        }
    }

    /// Moves past the controllers this call refused to trust.
    fn skip(&mut self, refused: &[usize]) {
        for _ in 0..self.addrs.len() {
            if !refused.contains(&(self.current % self.addrs.len())) {
                return;
            }
            self.current += 1;
        }
    }

    fn api(&mut self, ch: Channel, to: &str) -> Result<Api, Status> {
        let credential = self.security()?.credential.to(to);
        Ok(JobsClient::new(WithCredential {
            channel: ch,
            credential,
        })
        .max_decoding_message_size(256 * 1024 * 1024))
    }

    /// Calls `f` on one specific controller, once.
    pub async fn call_on<T, F, Fut>(&mut self, addr: &str, f: F) -> Result<T, Status>
    where
        F: FnOnce(Api) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let ch = self
            .security()?
            .dialer
            .connect(
                addr,
                Timeouts {
                    connect: Duration::from_millis(800),
                    request: Some(Duration::from_secs(5)),
                    keepalive: None,
                },
            )
            .await
            .map_err(dial_status)?;
        f(self.api(ch, addr)?).await.map(|r| r.into_inner())
    }
}

/// The name of the user running this command.
pub fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid{}", nix::unistd::getuid()))
}

/// A fresh request id for exactly-once retries.
pub fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Prints `tool: error: message` and exits 1.
pub fn die(tool: &str, message: impl std::fmt::Display) -> ! {
    die_status(tool, message, 1)
}

/// As [`die`], with the exit status Slurm's tool gives for this error.
pub fn die_status(tool: &str, message: impl std::fmt::Display, status: i32) -> ! {
    eprintln!("{tool}: error: {message}");
    std::process::exit(status)
}

/// A gRPC status as a user-facing message.
pub fn describe(s: &Status) -> String {
    let mut m = s.message().to_string();
    let mut source = std::error::Error::source(s);
    while let Some(e) = source {
        let text = e.to_string();
        if !m.contains(&text) {
            m = format!("{m}: {text}");
        }
        source = e.source();
    }
    // A plaintext client talking to a TLS listener (or the reverse) sees the
    // connection torn down mid-handshake; which words it gets depends on timing.
    let tls_mismatch = ["h2 protocol error", "InvalidContentType", "transport error"]
        .iter()
        .any(|w| m.contains(w));
    if tls_mismatch {
        return format!(
            "{m}: the controller and this tool may disagree about TLS (a cluster with certificates needs GSCHED_TLS_CA=.../ca.pem here; a --dev-local one needs it unset)"
        );
    }
    match s.code() {
        Code::Unavailable => {
            format!("no controller answered ({m}); check --controllers / GSCHED_CONTROLLERS")
        }
        _ => m.to_string(),
    }
}
