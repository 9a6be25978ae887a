//! Notification delivery, on the leader only: the outbox loop claims due notices in the
//! log (`NotifyClaim`, committed before anything is sent, so a notice is sent at most
//! once: a new leader never sends what an old one claimed), delivers each claimed notice
//! in a task of its own (the controller never waits for a mail program or a webhook),
//! with retries where the target certainly did not take the message, and records each
//! target's outcome (`NotifyDone`): `gctl show job` prints it, `/metrics` counts it.
//!
//! What is due, where it goes and what it says are `gsched_state::notify`'s and
//! `decide::notify_round`'s; this file only runs the mail program, as Slurm runs its
//! MailProg (`PROG -s SUBJECT RECIPIENT`, the body on stdin, `SLURM_JOB_*` in the
//! environment), and POSTs JSON to webhooks.

use crate::ctx::Ctx;
use gsched_proto::clock::now_ms;
use gsched_state::decide::{self, Outgoing};
use gsched_state::{Command, NoticeRef, NoticeResult, NotifyClaim, NotifyDone};
use gsched_types::api::Role;
use gsched_types::notify::{Delivery, NotifyMessage, NotifyTarget};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// `[notify]` in `gctld.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Slurm's MailProg: called as `PROG -s SUBJECT RECIPIENT` with the body on stdin.
    /// Absent: mail targets fail with a message that says to set it.
    #[serde(default)]
    pub mail_prog: Option<PathBuf>,
    /// How long one delivery may take: the mail program's run (Slurm's
    /// MAIL_PROG_TIMEOUT, 120 s) or an HTTP exchange.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// Tries per target, the first included. A target is tried again only when it
    /// certainly did not take the message (the mail program exited non-zero or could not
    /// start, the connection failed, the server answered an error status); never after a
    /// timeout, which may have delivered it.
    #[serde(default = "default_tries")]
    pub tries: u32,
    /// Seconds before the first retry; each next one waits twice as long.
    #[serde(default = "default_retry_delay_s")]
    pub retry_delay_s: f64,
    /// Webhooks may reach loopback, private and link-local addresses (off: a user's
    /// webhook cannot make the controller call services on its own network).
    #[serde(default)]
    pub webhook_private: bool,
    /// PEM file of the certificate authorities `https://` webhooks are checked against
    /// (absent: the system's bundle).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A claim another leader (or an earlier term) left unresolved this long is put down
    /// as "not known to have been delivered" (seconds); it is never sent again.
    #[serde(default = "default_in_doubt_after_s")]
    pub in_doubt_after_s: u64,
    /// Deliveries in flight at once.
    #[serde(default = "default_parallel")]
    pub parallel: usize,
}

fn default_timeout_s() -> u64 {
    120
}
fn default_tries() -> u32 {
    3
}
fn default_retry_delay_s() -> f64 {
    5.0
}
fn default_in_doubt_after_s() -> u64 {
    900
}
fn default_parallel() -> usize {
    8
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            mail_prog: None,
            timeout_s: default_timeout_s(),
            tries: default_tries(),
            retry_delay_s: default_retry_delay_s(),
            webhook_private: false,
            ca_file: None,
            in_doubt_after_s: default_in_doubt_after_s(),
            parallel: default_parallel(),
        }
    }
}

/// A `[notify]` setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    #[error(
        "[notify] mail_prog = {0:?}: give the mail program's absolute path (e.g. /usr/bin/mail)"
    )]
    MailProg(PathBuf),
    #[error("[notify] {0} must be at least 1")]
    AtLeastOne(&'static str),
    #[error("[notify] retry_delay_s must be between 0 and 3600")]
    RetryDelay,
}

impl NotifyConfig {
    pub fn validate(&self) -> Result<(), NotifyConfigError> {
        if let Some(p) = &self.mail_prog
            && !p.is_absolute()
        {
            return Err(NotifyConfigError::MailProg(p.clone()));
        }
        if self.tries == 0 {
            return Err(NotifyConfigError::AtLeastOne("tries"));
        }
        if self.timeout_s == 0 {
            return Err(NotifyConfigError::AtLeastOne("timeout_s"));
        }
        if self.parallel == 0 {
            return Err(NotifyConfigError::AtLeastOne("parallel"));
        }
        if !(0.0..=3600.0).contains(&self.retry_delay_s) {
            return Err(NotifyConfigError::RetryDelay);
        }
        Ok(())
    }
}

/// How one try at a target went.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Try {
    Delivered,
    /// The target did not take it: worth another try.
    Refused(String),
    /// It may have taken it (a timeout after sending): not tried again.
    Unknown(String),
}

/// Most notices one claim names.
const CLAIM_BATCH: usize = 256;

/// The leader's outbox: claims what is due, delivers what this leadership claimed, and
/// puts down the claims of leaders gone as in doubt. Runs while this controller leads.
pub async fn outbox_loop(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let cfg = Arc::new(ctx.cfg.notify.clone());
    let mut status = ctx.raft.status.clone();
    let me = ctx.cfg.id;
    // What this leadership has started delivering and not yet seen recorded: each is
    // delivered at most once.
    let mut started: BTreeSet<(u64, u32, String, bool)> = BTreeSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(cfg.parallel));
    // A round right after a committed claim delivers what it won without waiting; never
    // two such rounds in a row (a claim `apply` refuses would otherwise spin).
    let mut again = false;
    loop {
        let immediate = again;
        if !again {
            tokio::select! {
                _ = stop.changed() => {}
                _ = status.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        again = false;
        if *stop.borrow() {
            return;
        }
        let (role, term) = {
            let s = ctx.raft.status.borrow();
            (s.role, s.term)
        };
        if role != Role::Leader {
            continue;
        }
        let (round, outgoing) = {
            let r = ctx.raft.replica.read();
            let round = decide::notify_round(
                &r.state,
                me,
                term,
                now_ms(),
                cfg.in_doubt_after_s.saturating_mul(1000),
            );
            let outgoing: Vec<Outgoing> = round
                .claimed
                .iter()
                .filter(|n| !started.contains(&key(n)))
                .filter_map(|n| decide::outgoing(&r.state, n))
                .collect();
            (round, outgoing)
        };
        // Delivered and recorded: no longer claimed, so no longer remembered.
        let claimed: BTreeSet<_> = round.claimed.iter().map(key).collect();
        started.retain(|k| claimed.contains(k));
        if !round.in_doubt.is_empty() {
            for r in &round.in_doubt {
                tracing::warn!(
                    job = r.notice.job.0,
                    "notification {} of job {} was claimed by a leader that went away before it recorded the outcome: not sent again",
                    r.notice.event,
                    r.notice.job
                );
                ctx.telemetry.notify_in_doubt.inc();
            }
            let cmd = Command::NotifyDone(NotifyDone {
                results: round.in_doubt,
            });
            if let Err(e) = ctx.propose(cmd, None).await {
                tracing::warn!("could not record notifications in doubt: {}", e.message());
            }
        }
        for out in outgoing {
            started.insert(key(&out.notice));
            let (ctx, cfg, slots) = (ctx.clone(), cfg.clone(), slots.clone());
            tokio::spawn(async move {
                let Ok(_slot) = slots.acquire_owned().await else {
                    return;
                };
                deliver_and_record(&ctx, &cfg, out).await;
            });
        }
        if !round.claim.is_empty() {
            let mut claim = round.claim;
            claim.truncate(CLAIM_BATCH);
            let cmd = Command::NotifyClaim(NotifyClaim {
                by: me,
                term,
                notices: claim,
            });
            match ctx.propose(cmd, None).await {
                // Deliver what the claim won at once (the next round finds it claimed).
                Ok(_) => again = !immediate,
                Err(e) => {
                    ctx.telemetry.leader_proposals_failed.inc();
                    tracing::warn!("the outbox's claim was not committed: {}", e.message());
                }
            }
        }
    }
}

fn key(n: &NoticeRef) -> (u64, u32, String, bool) {
    (n.job.0, n.attempt, n.event.name().to_string(), n.array)
}

/// Delivers one claimed notice to each of its targets and records the outcomes.
async fn deliver_and_record(ctx: &Ctx, cfg: &NotifyConfig, out: Outgoing) {
    let mut deliveries = Vec::new();
    for to in out.targets {
        let error = deliver(cfg, &to, &out.message).await.err();
        let outcome = if error.is_some() { "failed" } else { "sent" };
        ctx.telemetry
            .notifications
            .get_or_create(&crate::telemetry::NotifyLabel {
                channel: to.channel().to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        match &error {
            None => tracing::info!(
                job = out.notice.job.0,
                "notified {to}: {}",
                out.message.subject
            ),
            Some(e) => tracing::warn!(
                job = out.notice.job.0,
                "notification to {to} failed: {e} ({})",
                out.message.subject
            ),
        }
        deliveries.push(Delivery { to, error });
    }
    let cmd = Command::NotifyDone(NotifyDone {
        results: vec![NoticeResult {
            notice: out.notice.clone(),
            deliveries,
        }],
    });
    // Recorded by whoever leads now; a record that cannot be committed leaves the claim
    // to be put down as in doubt.
    for wait in [0u64, 1, 2, 4] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        match ctx.propose(cmd.clone(), None).await {
            Ok(_) => return,
            Err(e) => tracing::warn!(
                job = out.notice.job.0,
                "could not record the outcome of notification {}: {}",
                out.notice.event,
                e.message()
            ),
        }
    }
}

/// Sends `message` to `to`, trying again where the target certainly did not take it.
async fn deliver(
    cfg: &NotifyConfig,
    to: &NotifyTarget,
    message: &NotifyMessage,
) -> Result<(), String> {
    let mut delay = Duration::from_secs_f64(cfg.retry_delay_s);
    let mut last = String::new();
    for attempt in 1..=cfg.tries {
        let tried = match to {
            NotifyTarget::Mail(rcpt) => mail(cfg, rcpt, message).await,
            NotifyTarget::Slack(url) => {
                let body = serde_json::json!({ "text": message.text });
                post(cfg, url, &body.to_string()).await
            }
            NotifyTarget::Webhook(url) => match serde_json::to_string(message) {
                Ok(body) => post(cfg, url, &body).await,
                Err(e) => Try::Unknown(format!("cannot encode the message: {e}")),
            },
        };
        match tried {
            Try::Delivered => return Ok(()),
            Try::Unknown(e) => return Err(e),
            Try::Refused(e) => {
                last = if cfg.tries > 1 {
                    format!("{e} (try {attempt} of {})", cfg.tries)
                } else {
                    e
                };
            }
        }
        if attempt < cfg.tries {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
    Err(last)
}

/// Runs the mail program as Slurm runs its MailProg: `PROG -s SUBJECT RECIPIENT`, the
/// body on stdin, Slurm's `SLURM_JOB_*` variables and a plain PATH as its environment.
async fn mail(cfg: &NotifyConfig, rcpt: &str, m: &NotifyMessage) -> Try {
    let Some(prog) = &cfg.mail_prog else {
        return Try::Unknown(
            "no mail program: set [notify] mail_prog in gctld's configuration (e.g. /usr/bin/mail)"
                .into(),
        );
    };
    // Refused at submission and in user settings too: never an option to the program.
    if !gsched_types::notify::valid_recipient(rcpt) {
        return Try::Unknown(format!(
            "'{rcpt}' is not a recipient a mail program may be given"
        ));
    }
    let mut cmd = tokio::process::Command::new(prog);
    cmd.arg("-s")
        .arg(&m.subject)
        .arg(rcpt)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("SLURM_JOB_ID", m.job_id.to_string())
        .env("SLURM_JOB_NAME", &m.name)
        .env("SLURM_JOB_USER", &m.user)
        .env("SLURM_JOB_STATE", m.state.name())
        .env("SLURM_JOB_MAIL_TYPE", m.event.slurm_words())
        .env(
            "SLURM_JOB_RUN_TIME",
            gsched_types::parse::format_hms(m.elapsed_s),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(code) = m.exit_code {
        cmd.env("SLURM_JOB_EXIT_CODE_MAX", code.to_string());
    }
    if let (Some(a), Some(t)) = (m.array_job_id, m.array_task_id) {
        cmd.env("SLURM_ARRAY_JOB_ID", a.to_string())
            .env("SLURM_ARRAY_TASK_ID", t.to_string());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Try::Refused(format!(
                "the mail program {} could not start: {e}",
                prog.display()
            ));
        }
    };
    let (stdin, stderr) = (child.stdin.take(), child.stderr.take());
    let body = m.body.clone();
    let run = async move {
        let write = async move {
            if let Some(mut s) = stdin {
                // A program that does not read its stdin is its own business; the pipe
                // closes here, so one that does sees the end.
                let _ = s.write_all(body.as_bytes()).await;
            }
        };
        // Everything it says is read (so it never waits on a full pipe); 4 KiB kept.
        let read = async move {
            let mut kept = Vec::new();
            if let Some(mut s) = stderr {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let room = 4096usize.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
            kept
        };
        let ((), err) = tokio::join!(write, read);
        (child.wait().await, err)
    };
    match tokio::time::timeout(Duration::from_secs(cfg.timeout_s), run).await {
        Err(_) => Try::Unknown(format!(
            "the mail program {} did not finish within {} s and was stopped (not tried again: it may have sent)",
            prog.display(),
            cfg.timeout_s
        )),
        Ok((Err(e), _)) => Try::Refused(format!("the mail program {}: {e}", prog.display())),
        Ok((Ok(status), _)) if status.success() => Try::Delivered,
        Ok((Ok(status), err)) => {
            let said = String::from_utf8_lossy(&err);
            let said = said
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            let how = match status.code() {
                Some(c) => format!("exited {c}"),
                None => "was killed by a signal".into(),
            };
            Try::Refused(if said.is_empty() {
                format!("the mail program {} {how}", prog.display())
            } else {
                format!("the mail program {} {how}: {said}", prog.display())
            })
        }
    }
}

/// A webhook's URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    https: bool,
    host: String,
    port: u16,
    /// Path and query, from `/`.
    path: String,
}

fn parse_url(url: &str) -> Option<Url> {
    let (https, rest) = match url.split_once("://")? {
        ("https", r) => (true, r),
        ("http", r) => (false, r),
        _ => return None,
    };
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(cut);
    let authority = authority.rsplit('@').next()?;
    let mut path = tail.split('#').next().unwrap_or("").to_string();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let default_port = if https { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), default_port),
        }
    };
    (!host.is_empty()).then_some(Url {
        https,
        host,
        port,
        path,
    })
}

/// Loopback, private, link-local, unspecified, multicast or documentation-only.
fn is_private(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64
        }
        std::net::IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(std::net::IpAddr::V4(v4));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// POSTs `body` as JSON to `url` (HTTP/1.1, one request per connection).
async fn post(cfg: &NotifyConfig, url: &str, body: &str) -> Try {
    let Some(u) = parse_url(url) else {
        return Try::Unknown(format!("'{url}' is not an http:// or https:// URL"));
    };
    let limit = Duration::from_secs(cfg.timeout_s);
    let addrs =
        match tokio::time::timeout(limit, tokio::net::lookup_host((u.host.as_str(), u.port))).await
        {
            Ok(Ok(a)) => a.collect::<Vec<_>>(),
            Ok(Err(e)) => return Try::Refused(format!("cannot resolve {}: {e}", u.host)),
            Err(_) => {
                return Try::Refused(format!(
                    "resolving {} took over {} s",
                    u.host, cfg.timeout_s
                ));
            }
        };
    let allowed: Vec<_> = addrs
        .iter()
        .copied()
        .filter(|a| cfg.webhook_private || !is_private(a.ip()))
        .collect();
    if allowed.is_empty() {
        return Try::Unknown(format!(
            "{} resolves only to loopback or private addresses ({}), which webhooks may not reach unless [notify] webhook_private = true",
            u.host,
            addrs
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut last = String::new();
    let mut stream = None;
    for a in allowed {
        match tokio::time::timeout(limit, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(e)) => last = format!("cannot connect to {a}: {e}"),
            Err(_) => last = format!("connecting to {a} took over {} s", cfg.timeout_s),
        }
    }
    let Some(tcp) = stream else {
        return Try::Refused(last);
    };
    let host_header = if (u.https && u.port == 443) || (!u.https && u.port == 80) {
        u.host.clone()
    } else if u.host.contains(':') {
        format!("[{}]:{}", u.host, u.port)
    } else {
        format!("{}:{}", u.host, u.port)
    };
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: gsched-notify\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        u.path,
        body.len()
    );
    if u.https {
        let connector = match tls_connector(cfg) {
            Ok(c) => c,
            Err(e) => return Try::Unknown(e),
        };
        let name = match tokio_rustls::rustls::pki_types::ServerName::try_from(u.host.clone()) {
            Ok(n) => n,
            Err(e) => return Try::Unknown(format!("{}: {e}", u.host)),
        };
        match tokio::time::timeout(limit, connector.connect(name, tcp)).await {
            Ok(Ok(tls)) => exchange(tls, &request, limit).await,
            Ok(Err(e)) => Try::Refused(format!("TLS with {}: {e}", u.host)),
            Err(_) => Try::Refused(format!("TLS with {} took over {} s", u.host, cfg.timeout_s)),
        }
    } else {
        exchange(tcp, &request, limit).await
    }
}

/// Writes the request and reads the status line.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    request: &str,
    limit: Duration,
) -> Try {
    match tokio::time::timeout(limit, s.write_all(request.as_bytes())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Try::Refused(format!("sending the request: {e}")),
        Err(_) => {
            return Try::Unknown("sending the request timed out (it may have arrived)".into());
        }
    }
    let mut head = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<(), std::io::Error>(())
    };
    match tokio::time::timeout(limit, read).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Try::Unknown(format!("reading the answer: {e} (it may have arrived)"));
        }
        Err(_) => return Try::Unknown("no answer in time (it may have arrived)".into()),
    }
    let text = String::from_utf8_lossy(&head);
    let status_line = text.lines().next().unwrap_or("").trim();
    let code: Option<u16> = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok());
    match code {
        Some(c) if (200..300).contains(&c) => Try::Delivered,
        Some(_) => Try::Refused(format!(
            "the webhook answered {}",
            status_line
                .trim_start_matches("HTTP/1.1 ")
                .trim_start_matches("HTTP/1.0 ")
        )),
        None => Try::Unknown(format!(
            "the webhook's answer is not HTTP: {:?}",
            status_line.chars().take(80).collect::<String>()
        )),
    }
}

/// A TLS client that checks servers against `ca_file` or the system's bundle.
fn tls_connector(cfg: &NotifyConfig) -> Result<tokio_rustls::TlsConnector, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    const BUNDLES: [&str; 4] = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem",
        "/etc/ssl/cert.pem",
    ];
    let path = match &cfg.ca_file {
        Some(p) => p.clone(),
        None => BUNDLES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("no CA bundle found for https webhooks: set [notify] ca_file")?,
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    for c in certs.flatten() {
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        return Err(format!(
            "{}: no certificate authority in it",
            path.display()
        ));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_with_their_ports_and_paths() {
        let u = parse_url("https://hooks.slack.com/services/T/B/x?y=1#f").unwrap();
        assert_eq!(
            u,
            Url {
                https: true,
                host: "hooks.slack.com".into(),
                port: 443,
                path: "/services/T/B/x?y=1".into()
            }
        );
        let u = parse_url("http://127.0.0.1:8080").unwrap();
        assert_eq!((u.port, u.path.as_str()), (8080, "/"));
        let u = parse_url("http://[::1]:9/h").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9));
        assert!(parse_url("ftp://x/").is_none());
        assert!(parse_url("http://:80/").is_none());
        assert!(parse_url("http://h:notaport/").is_none());
    }

    #[test]
    fn private_addresses_are_recognised() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
        ] {
            assert!(is_private(a.parse().unwrap()), "{a}");
        }
        for a in ["8.8.8.8", "2001:4860:4860::8888"] {
            assert!(!is_private(a.parse().unwrap()), "{a}");
        }
    }

    fn message() -> NotifyMessage {
        NotifyMessage {
            text: "t".into(),
            subject: "Slurm Job_id=1 Name=x Ended, Run time 00:00:01, COMPLETED, ExitCode 0".into(),
            body: "the body\n".into(),
            event: gsched_types::notify::MailType::End,
            job_id: gsched_types::job::JobId(1),
            display_id: "1".into(),
            array_job_id: None,
            array_task_id: None,
            array_summary: false,
            name: "x".into(),
            user: "alice".into(),
            state: gsched_types::job::JobState::Completed,
            reason: "None".into(),
            elapsed_s: 1,
            exit_code: Some(0),
            nodes: "n1".into(),
            efficiency_summary: "GPU efficiency: no usage was sampled".into(),
            efficiency: None,
        }
    }

    fn script(dir: &std::path::Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("mail.sh");
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[tokio::test]
    async fn the_mail_program_gets_slurms_arguments_and_the_body_and_failures_are_retried() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let prog = script(
            dir.path(),
            &format!(
                "#!/bin/sh\nprintf '%s|' \"$@\" >> {o}\necho \"$SLURM_JOB_MAIL_TYPE\" >> {o}\ncat >> {o}\n",
                o = out.display()
            ),
        );
        let cfg = NotifyConfig {
            mail_prog: Some(prog),
            retry_delay_s: 0.0,
            ..NotifyConfig::default()
        };
        let to = NotifyTarget::Mail("alice@lab.org".into());
        assert_eq!(deliver(&cfg, &to, &message()).await, Ok(()));
        let got = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            got,
            "-s|Slurm Job_id=1 Name=x Ended, Run time 00:00:01, COMPLETED, ExitCode 0|alice@lab.org|Ended\nthe body\n"
        );

        let count = dir.path().join("count");
        let failing = script(
            dir.path(),
            &format!(
                "#!/bin/sh\necho x >> {}\necho 'no such user' >&2\nexit 67\n",
                count.display()
            ),
        );
        let cfg = NotifyConfig {
            mail_prog: Some(failing),
            retry_delay_s: 0.0,
            ..NotifyConfig::default()
        };
        let err = deliver(&cfg, &to, &message()).await.unwrap_err();
        assert!(
            err.contains("exited 67: no such user (try 3 of 3)"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);

        let slow = script(dir.path(), "#!/bin/sh\nsleep 5\n");
        let cfg = NotifyConfig {
            mail_prog: Some(slow),
            timeout_s: 1,
            retry_delay_s: 0.0,
            ..NotifyConfig::default()
        };
        let err = deliver(&cfg, &to, &message()).await.unwrap_err();
        assert!(err.contains("not tried again"), "{err}");

        let none = NotifyConfig::default();
        let err = deliver(&none, &to, &message()).await.unwrap_err();
        assert!(err.contains("[notify] mail_prog"), "{err}");
    }

    #[tokio::test]
    async fn webhooks_get_json_and_private_addresses_need_leave() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut got = Vec::new();
            for status in ["500 Internal Server Error", "200 OK"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 65536];
                let mut req = Vec::new();
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    req.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&req).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .unwrap()
                            .parse()
                            .unwrap();
                        if body.len() >= len {
                            got.push(text);
                            break;
                        }
                    }
                }
                s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
            got
        });
        let url = format!("http://{addr}/hook");
        let to = NotifyTarget::Webhook(url.clone());
        let closed = NotifyConfig {
            retry_delay_s: 0.0,
            ..NotifyConfig::default()
        };
        let err = deliver(&closed, &to, &message()).await.unwrap_err();
        assert!(err.contains("webhook_private"), "{err}");
        let open = NotifyConfig {
            webhook_private: true,
            ..closed
        };
        assert_eq!(deliver(&open, &to, &message()).await, Ok(()));
        let got = server.await.unwrap();
        assert_eq!(got.len(), 2, "a 500 is tried again");
        assert!(got[1].starts_with("POST /hook HTTP/1.1\r\n"), "{}", got[1]);
        let body = got[1].split_once("\r\n\r\n").unwrap().1;
        let doc: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(doc["event"], "END");
        assert_eq!(doc["state"], "COMPLETED");
        assert_eq!(doc["text"], "t");
    }
}
