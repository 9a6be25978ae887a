//! The client every CLI tool uses: tries the configured controllers in turn, follows the
//! leader hint a controller returns, and retries transient failures (elections, a dead
//! controller) with the same request id until a time budget runs out, so a user sees a
//! short delay during a failover rather than an error.

use gsched_proto::LEADER_HINT;
use gsched_proto::pb::jobs_client::JobsClient;
use std::future::Future;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

pub struct Client {
    addrs: Vec<String>,
    current: usize,
    channel: Option<(String, Channel)>,
    budget: Duration,
}

/// Controllers from `--controllers`, else `GSCHED_CONTROLLERS`, else 127.0.0.1:6817.
pub fn controller_list(flag: Option<&str>) -> Vec<String> {
    let raw = flag
        .map(str::to_string)
        .or_else(|| std::env::var("GSCHED_CONTROLLERS").ok())
        .unwrap_or_else(|| "127.0.0.1:6817".into());
    raw.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
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
    pub fn new(addrs: Vec<String>) -> Client {
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
        }
    }

    pub fn with_budget(mut self, budget: Duration) -> Client {
        self.budget = budget;
        self
    }

    async fn channel(&mut self) -> Result<Channel, Status> {
        let addr = self
            .addrs
            .get(self.current % self.addrs.len().max(1))
            .cloned()
            .ok_or_else(|| Status::invalid_argument("no controllers configured"))?;
        if let Some((a, c)) = &self.channel
            && *a == addr
        {
            return Ok(c.clone());
        }
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Status::invalid_argument(format!("bad controller address {addr}: {e}")))?;
        let ch = ep
            .connect_timeout(Duration::from_millis(800))
            .timeout(Duration::from_secs(15))
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("cannot reach controller {addr}: {e}")))?;
        self.channel = Some((addr, ch.clone()));
        Ok(ch)
    }

    /// Calls `f` until it succeeds, fails permanently, or the retry budget is spent.
    pub async fn call<T, F, Fut>(&mut self, mut f: F) -> Result<T, Status>
    where
        F: FnMut(JobsClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let start = Instant::now();
        let mut delay = Duration::from_millis(50);
        loop {
            let result = match self.channel().await {
                Ok(ch) => f(JobsClient::new(ch).max_decoding_message_size(256 * 1024 * 1024))
                    .await
                    .map(|r| r.into_inner()),
                Err(e) => Err(e),
            };
            match result {
                Ok(v) => return Ok(v),
                Err(s) if retryable(&s) && start.elapsed() < self.budget => {
                    let hint = s
                        .metadata()
                        .get(LEADER_HINT)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    match hint.and_then(|h| {
                        self.addrs.iter().position(|a| *a == h).or_else(|| {
                            self.addrs.push(h);
                            Some(self.addrs.len() - 1)
                        })
                    }) {
                        Some(i) if i != self.current % self.addrs.len() => self.current = i,
                        _ => self.current += 1,
                    }
                    self.channel = None;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                Err(s) => return Err(s),
            }
        }
    }

    /// Calls `f` on one specific controller, once.
    pub async fn call_on<T, F, Fut>(addr: &str, f: F) -> Result<T, Status>
    where
        F: FnOnce(JobsClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let ch = ep
            .connect_timeout(Duration::from_millis(800))
            .timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("cannot reach {addr}: {e}")))?;
        f(JobsClient::new(ch)).await.map(|r| r.into_inner())
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
    eprintln!("{tool}: error: {message}");
    std::process::exit(1)
}

/// A gRPC status as a user-facing message.
pub fn describe(s: &Status) -> String {
    match s.code() {
        Code::Unavailable => format!(
            "no controller answered ({}); check --controllers / GSCHED_CONTROLLERS",
            s.message()
        ),
        _ => s.message().to_string(),
    }
}
