//! `gctld --http HOST:PORT`: Prometheus metrics in the OpenMetrics text format at
//! `/metrics`, read from this replica's committed state and its Raft status on every
//! scrape. Only counts, states and indexes: no job names, users or environments, so the
//! endpoint needs no credentials (bind it to the management network). Every label has a
//! bounded set of values (states, reason kinds, roles); no per-job label.
//!
//! And the read API under `/api/v1/` (`jobs`, `jobs/{id}`, `jobs/{id}/efficiency`,
//! `nodes`): the same rows as the gRPC `ListJobs`/`ListNodes` (`gsched_types::api`, and
//! `gsched_types::usage::Efficiency` made from a job's row), the same callers (a `gctl token`
//! in `Authorization: Bearer`, else the socket's owner on a --dev-local cluster, else a
//! MUNGE credential in `X-Gsched-Munge`) and the same rule on what others' jobs show.
//!
//! Writes, with the same rules as the CLI's: `POST /api/v1/jobs` (a `gsched_types::job::
//! JobSpec`, as gRPC `Submit` takes it), `POST /api/v1/jobs/actions` (a bulk action,
//! `gsched_types::api::JobActionRequest`, as `gcancel -u` sends),
//! `POST /api/v1/jobs/ID/{cancel,hold,release,requeue}`, `POST
//! /api/v1/nodes/NAME/{drain,resume}` (`{"reason": ...}`); an `Idempotency-Key` header
//! makes a retried write apply once.
//!
//! And the dashboard at `/`: one page embedded in the binary (`dashboard.html`) that
//! draws from that API with the browser's identity.

use crate::ctx::Ctx;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use gsched_proto::contract::Carries;
use gsched_proto::pb;
use gsched_types::job::JobState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

/// Serves the dashboard, `/metrics` and the REST API on `listener` until the process
/// ends: HTTPS with the controller's certificate on a cluster with certificates.
pub async fn serve(
    ctx: Arc<Ctx>,
    listeners: tokio::sync::mpsc::Receiver<tokio::net::TcpListener>,
    loopback: bool,
) {
    let tls = match &ctx.cfg.security {
        crate::config::Security::Cluster { certs, .. } => {
            match crate::accept::https(certs, ctx.cfg.id) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::error!("the HTTP API cannot serve HTTPS, so it is off: {e}");
                    return;
                }
            }
        }
        crate::config::Security::DevLocal => None,
    };
    let api = Api {
        jobs: Arc::new(crate::service::jobs::JobsService::new(ctx.clone())),
        ctx: ctx.clone(),
        keys: Default::default(),
    };
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let ctx = ctx.clone();
                async move { metrics(&ctx) }
            }),
        )
        .route("/", get(dashboard))
        .route(
            "/api/v1/openapi.json",
            get(|| async { axum::Json(crate::openapi::document()) }),
        )
        .route("/api/v1/jobs", get(jobs).post(submit))
        .route("/api/v1/jobs/actions", post(act_on_jobs))
        .route("/api/v1/jobs/{id}", get(job))
        .route("/api/v1/jobs/{id}/efficiency", get(efficiency))
        .route("/api/v1/jobs/{id}/{action}", post(act_on_job))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/nodes/{name}/{action}", post(node_action))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "gctld serves the dashboard at /, /metrics and /api/v1/{jobs,jobs/ID,jobs/ID/efficiency,jobs/actions,nodes} here\n",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            Guard { loopback },
            browser_guard,
        ))
        .with_state(api);
    let admission = crate::accept::Admission::new(crate::accept::Limits::default_for_process());
    let listener = match crate::accept::HttpListener::start(listeners, admission, tls) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("the HTTP endpoint cannot start: {e}");
            return;
        }
    };
    serve_connections(app, listener).await;
}

/// How long a client may take to send a request's headers (the first, or the next one on
/// a kept-alive connection) before the connection is closed.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves every admitted connection as HTTP/1.1, each in a task of its own, with the
/// peer in the request's `ConnectInfo`.
async fn serve_connections(app: Router, mut listener: crate::accept::HttpListener) {
    loop {
        let (io, peer) = listener.accept().await;
        let app = app.clone();
        tokio::spawn(async move {
            let service = tower::ServiceExt::map_request(
                app,
                move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    req
                },
            );
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(
                    hyper_util::rt::TokioIo::new(io),
                    hyper_util::service::TowerToHyperService::new(service),
                )
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!("HTTP connection from {}: {e}", peer.remote);
            }
        });
    }
}

/// What a browser can be tricked into sending, refused before any handler runs.
#[derive(Clone, Copy)]
struct Guard {
    /// Serving on loopback addresses only.
    loopback: bool,
}

/// The header (besides a bearer token) that a write must carry: a cross-site form or a
/// "simple" cross-origin fetch cannot send it, and a browser asks first (CORS preflight,
/// which gctld never grants) before a script may.
pub const WRITE_HEADER: &str = "x-gsched-client";

/// Refuses requests a browser may send on a user's behalf from another site:
/// - on a loopback address, a `Host` that is not loopback (a DNS-rebinding page would
///   otherwise read the API as the browser's user);
/// - an `Origin` other than the address itself;
/// - a write (any method but GET and HEAD) without a bearer token or `X-Gsched-Client`,
///   or with a body that is not `application/json`.
async fn browser_guard(
    axum::extract::State(guard): axum::extract::State<Guard>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match check_browser_request(guard, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(why) => (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({ "error": why })),
        )
            .into_response(),
    }
}

fn check_browser_request(
    guard: Guard,
    method: &axum::http::Method,
    headers: &axum::http::HeaderMap,
) -> Result<(), String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if guard.loopback && !gsched_proto::dial::is_loopback(host) {
        return Err(format!(
            "Host '{host}' is not this loopback address: use http://127.0.0.1 or http://localhost (a page of another site that resolves to this host is refused)"
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let same = origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host));
        if !same {
            return Err(format!(
                "requests from the web page at {origin} are refused: the API serves its own dashboard and non-browser clients"
            ));
        }
    }
    if method == axum::http::Method::GET || method == axum::http::Method::HEAD {
        return Ok(());
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "));
    if !bearer && !headers.contains_key(WRITE_HEADER) {
        return Err(format!(
            "a write needs 'Authorization: Bearer TOKEN' (gctl token) or the header '{WRITE_HEADER}: NAME' (which a browser will not send for another site)"
        ));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    if has_body && !json {
        return Err("a write's body must be 'Content-Type: application/json'".into());
    }
    Ok(())
}

#[derive(Clone)]
struct Api {
    ctx: Arc<Ctx>,
    jobs: Arc<crate::service::jobs::JobsService>,
    keys: Arc<parking_lot::Mutex<KeyUses>>,
}

/// `?user=alice,bob&state=PD,R&all=1&detail=1`
#[derive(Debug, Default, serde::Deserialize)]
struct JobsQuery {
    user: Option<String>,
    state: Option<String>,
    #[serde(default)]
    all: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    after: Option<u64>,
}

/// The dashboard page (its data comes from the API, so it needs no credentials itself).
async fn dashboard() -> axum::response::Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("dashboard.html"),
    )
        .into_response()
}

fn flag(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|v| v != "0" && v != "false")
}

/// A refusal, as the HTTP response that says the same as the gRPC status.
struct ApiError(tonic::Status);

impl From<gsched_proto::contract::ContractError> for ApiError {
    fn from(e: gsched_proto::contract::ContractError) -> ApiError {
        ApiError(e.into())
    }
}

impl From<tonic::Status> for ApiError {
    fn from(s: tonic::Status) -> ApiError {
        ApiError(s)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        use tonic::Code;
        let code = match self.0.code() {
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::FailedPrecondition | Code::AlreadyExists => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (
            code,
            axum::Json(serde_json::json!({ "error": self.0.message() })),
        )
            .into_response()
    }
}

type ApiResult = Result<axum::response::Response, ApiError>;

/// The verified caller of an HTTP request, as for gRPC: a `gctl token` in
/// `Authorization: Bearer`, else the loopback socket's owner (--dev-local), else a MUNGE
/// credential in `X-Gsched-Munge`.
struct Verified(crate::auth::Caller);

impl axum::extract::FromRequestParts<Api> for Verified {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        api: &Api,
    ) -> Result<Verified, ApiError> {
        let headers = &parts.headers;
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            let replica = api.ctx.raft.replica.clone();
            let revoked = move |uid| replica.read().state.token_revocations.revoked_before(uid);
            return Ok(Verified(api.ctx.auth.caller_of_token(
                token,
                gsched_proto::clock::now_ms(),
                revoked,
            )?));
        }
        let peer_uid = parts
            .extensions
            .get::<axum::extract::ConnectInfo<crate::accept::HttpPeer>>()
            .and_then(|c| c.0.uid);
        let cred = headers.get("x-gsched-munge").and_then(|v| v.to_str().ok());
        Ok(Verified(api.ctx.auth.caller_of(peer_uid, cred)?))
    }
}

/// A client's key for a write it may retry (`Idempotency-Key`), with the method and path
/// it came on; [`IdempotencyKey::request_id`] ties it to its caller and body.
struct IdempotencyKey(Option<(String, String)>);

impl<S: Sync> axum::extract::FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<IdempotencyKey, ApiError> {
        let target = format!("{} {}", parts.method, parts.uri.path());
        match parts.headers.get("idempotency-key").map(|v| v.to_str()) {
            None => Ok(IdempotencyKey(None)),
            Some(Ok(k)) if !k.is_empty() && k.len() <= 128 => {
                Ok(IdempotencyKey(Some((k.to_string(), target))))
            }
            Some(_) => Err(ApiError(tonic::Status::invalid_argument(
                "Idempotency-Key must be 1 to 128 visible ASCII characters",
            ))),
        }
    }
}

/// The requests each caller's keys were first used for (a fingerprint of method, path and
/// body), at most [`KEYS_KEPT`], the oldest forgotten first.
#[derive(Default)]
struct KeyUses {
    first: std::collections::HashMap<String, [u8; 32]>,
    order: std::collections::VecDeque<String>,
}

const KEYS_KEPT: usize = 100_000;

impl IdempotencyKey {
    /// The request id of this write: empty without a key; else the caller's key with the
    /// request's fingerprint, so a key reused for another request is never answered with
    /// the first one's outcome (409 while this controller remembers the first use, a new
    /// request after).
    fn request_id(
        &self,
        api: &Api,
        who: &crate::auth::Caller,
        body: &[u8],
    ) -> Result<String, ApiError> {
        use sha2::Digest;
        let Some((key, target)) = &self.0 else {
            return Ok(String::new());
        };
        let mut h = sha2::Sha256::new();
        h.update(target.as_bytes());
        h.update([0]);
        h.update(body);
        let print: [u8; 32] = h.finalize().into();
        let owned = format!("{}:{key}", who.uid);
        let mut uses = api.keys.lock();
        match uses.first.get(&owned) {
            Some(first) if *first != print => {
                return Err(ApiError(tonic::Status::already_exists(format!(
                    "Idempotency-Key {key} was first used for another request; give each new request a key of its own"
                ))));
            }
            Some(_) => {}
            None => {
                if uses.order.len() >= KEYS_KEPT
                    && let Some(old) = uses.order.pop_front()
                {
                    uses.first.remove(&old);
                }
                uses.first.insert(owned.clone(), print);
                uses.order.push_back(owned.clone());
            }
        }
        let hex: String = print[..8].iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("http:{owned}:{hex}"))
    }
}

/// A document as the response body, in the schema the gRPC reply carries.
fn reply<T: serde::Serialize>(doc: &T) -> axum::response::Response {
    (StatusCode::OK, axum::Json(doc)).into_response()
}

/// A request body read as the document the matching gRPC request carries, refused as that
/// method would refuse it.
fn body_as<M: Carries>(body: axum::body::Bytes) -> Result<M::Document, ApiError> {
    Ok(M::from_json(body.to_vec()).document()?)
}

async fn jobs(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    axum::extract::Query(q): axum::extract::Query<JobsQuery>,
) -> ApiResult {
    let split = |v: &Option<String>| -> Vec<String> {
        v.as_deref()
            .map(|s| {
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let req = gsched_proto::pb::ListJobsRequest {
        include_finished: flag(&q.all),
        detail: flag(&q.detail),
        users: split(&q.user),
        states: split(&q.state),
        after: q.after.unwrap_or(0),
        ..Default::default()
    };
    Ok(reply(&api.jobs.jobs_for(&who, &req).await?))
}

async fn job(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult {
    let row = detailed_row(&api, &who, &id).await?;
    Ok((StatusCode::OK, axum::Json(row)).into_response())
}

/// `GET /api/v1/jobs/ID/efficiency`: the job's `gsched_types::usage::Efficiency`.
async fn efficiency(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult {
    let row = detailed_row(&api, &who, &id).await?;
    let report = row.efficiency(gsched_proto::clock::now_ms());
    Ok((StatusCode::OK, axum::Json(report)).into_response())
}

/// One job's detailed row as `who` may see it.
async fn detailed_row(
    api: &Api,
    who: &crate::auth::Caller,
    id: &str,
) -> Result<gsched_types::api::JobRow, ApiError> {
    let req = gsched_proto::pb::ListJobsRequest {
        include_finished: true,
        detail: true,
        jobs: vec![id.to_string()],
        archive: true,
        ..Default::default()
    };
    let doc = api.jobs.jobs_for(who, &req).await?;
    doc.jobs
        .into_iter()
        .find(|j| j.display_id == id)
        .ok_or_else(|| tonic::Status::not_found(format!("no job {id}")).into())
}

async fn submit(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    key: IdempotencyKey,
    body: axum::body::Bytes,
) -> ApiResult {
    let request_id = key.request_id(&api, &who, &body)?;
    let spec = body_as::<pb::SubmitRequest>(body)?;
    let ids: Vec<u64> = api
        .jobs
        .submit_as(&who, &request_id, spec)
        .await?
        .iter()
        .map(|j| j.0)
        .collect();
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({ "job_ids": ids })),
    )
        .into_response())
}

async fn act_on_jobs(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    key: IdempotencyKey,
    body: axum::body::Bytes,
) -> ApiResult {
    let request_id = key.request_id(&api, &who, &body)?;
    let action = body_as::<pb::ActOnJobsRequest>(body)?;
    Ok(reply(
        &api.jobs.act_on_jobs_as(&who, &request_id, action).await?,
    ))
}

async fn act_on_job(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    key: IdempotencyKey,
    axum::extract::Path((id, action)): axum::extract::Path<(String, String)>,
) -> ApiResult {
    use gsched_types::api::{JobAction, JobActionRequest, JobSelection, JobSelector};
    let request_id = key.request_id(&api, &who, b"")?;
    let action = match action.as_str() {
        "cancel" => JobAction::Cancel,
        "hold" => JobAction::Hold,
        "release" => JobAction::Release,
        "requeue" => JobAction::Requeue,
        other => {
            return Err(tonic::Status::not_found(format!(
                "no job action '{other}': use cancel, hold, release or requeue"
            ))
            .into());
        }
    };
    let select = JobSelection {
        jobs: vec![JobSelector::parse(&id).map_err(tonic::Status::invalid_argument)?],
        ..Default::default()
    };
    let body = JobActionRequest { action, select };
    Ok(reply(
        &api.jobs.act_on_jobs_as(&who, &request_id, body).await?,
    ))
}

/// `{"reason": "..."}` for a drain.
#[derive(Debug, Default, serde::Deserialize)]
struct NodeActionBody {
    #[serde(default)]
    reason: String,
}

async fn node_action(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    key: IdempotencyKey,
    axum::extract::Path((name, action)): axum::extract::Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult {
    let request_id = key.request_id(&api, &who, &body)?;
    let b: NodeActionBody = if body.is_empty() {
        NodeActionBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| tonic::Status::invalid_argument(format!("malformed node action: {e}")))?
    };
    use crate::service::jobs::NodeAction;
    let action = match action.as_str() {
        "drain" => NodeAction::Drain,
        "resume" => NodeAction::Resume,
        other => {
            return Err(tonic::Status::not_found(format!(
                "no node action '{other}': use drain or resume"
            ))
            .into());
        }
    };
    let message = api
        .jobs
        .node_admin_as(&who, &request_id, &name, action, b.reason)
        .await?;
    Ok((
        StatusCode::OK,
        axum::Json(serde_json::json!({ "message": message })),
    )
        .into_response())
}

async fn nodes(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(_): Verified,
) -> ApiResult {
    Ok(reply(&api.jobs.nodes(true).await?))
}

fn metrics(ctx: &Ctx) -> axum::response::Response {
    match render(ctx) {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

/// The name of a pending reason without its details (`ReqNodeNotAvail`, not the nodes).
fn reason_kind(reason: &gsched_types::job::PendingReason) -> String {
    let debug = format!("{reason:?}");
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("None")
        .to_string()
}

/// One scrape's text: a fresh registry filled from the committed state.
pub fn render(ctx: &Ctx) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("gsched");
    let jobs = Family::<StateLabel, Gauge>::default();
    let pending = Family::<ReasonLabel, Gauge>::default();
    let nodes = Family::<StateLabel, Gauge>::default();
    let (gpus_total, gpus_bad, gpus_allocated) = (
        Gauge::<i64>::default(),
        Gauge::<i64>::default(),
        Gauge::<i64>::default(),
    );
    let submitted = Counter::<u64>::default();
    let notices = Family::<StateLabel, Gauge>::default();
    {
        let r = ctx.raft.replica.read();
        let mut by_state: BTreeMap<&str, i64> = BTreeMap::new();
        let mut by_reason: BTreeMap<String, i64> = BTreeMap::new();
        let mut allocated = 0i64;
        for j in r.state.jobs.values() {
            *by_state.entry(j.state.name()).or_default() += 1;
            match j.state {
                JobState::Pending => *by_reason.entry(reason_kind(&j.reason)).or_default() += 1,
                JobState::Running | JobState::Completing => {
                    allocated += j
                        .allocation
                        .as_ref()
                        .map(|a| a.nodes.iter().map(|n| n.gpus.len() as i64).sum::<i64>())
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        // Every state appears, at zero too, so dashboards see the series from the start.
        for s in JobState::ALL {
            jobs.get_or_create(&StateLabel {
                state: s.name().to_string(),
            })
            .set(by_state.get(s.name()).copied().unwrap_or(0));
        }
        for (reason, n) in by_reason {
            pending.get_or_create(&ReasonLabel { reason }).set(n);
        }
        let mut node_states: BTreeMap<&str, i64> = ["up", "drain", "not_responding", "down"]
            .iter()
            .map(|s| (*s, 0))
            .collect();
        let (mut total, mut bad) = (0i64, 0i64);
        for n in r.state.nodes.values() {
            let state = if !n.online {
                "down"
            } else if !n.responding {
                "not_responding"
            } else if n.is_drained() {
                "drain"
            } else {
                "up"
            };
            *node_states.entry(state).or_default() += 1;
            total += n.topology.gpus.len() as i64;
            bad += n.bad_gpus.len() as i64;
        }
        for (state, n) in node_states {
            nodes
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
        let mut by_notice: BTreeMap<&str, i64> = ["due", "sending", "sent", "failed"]
            .iter()
            .map(|s| (*s, 0))
            .collect();
        for n in r.state.jobs.values().flat_map(|j| &j.notices) {
            let state = match n.state {
                gsched_types::notify::NoticeState::Due => "due",
                gsched_types::notify::NoticeState::Sending { .. } => "sending",
                _ if n.failed() => "failed",
                _ => "sent",
            };
            *by_notice.entry(state).or_default() += 1;
        }
        for (state, n) in by_notice {
            notices
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
        gpus_total.set(total);
        gpus_bad.set(bad);
        gpus_allocated.set(allocated);
        submitted.inc_by(r.state.next_job_id.saturating_sub(1));
    }
    reg.register(
        "jobs",
        "Jobs this controller knows, by state (finished jobs while retained)",
        jobs,
    );
    reg.register(
        "jobs_pending",
        "Pending jobs by the kind of their reason",
        pending,
    );
    reg.register(
        "jobs_submitted",
        "Job ids handed out (every job and array task ever submitted)",
        submitted,
    );
    reg.register("nodes", "Registered nodes by state", nodes);
    reg.register(
        "job_notifications",
        "Notifications of the jobs this controller holds, by state (failed: a target did not get it)",
        notices,
    );
    reg.register("gpus", "GPUs on registered nodes", gpus_total);
    reg.register(
        "gpus_unhealthy",
        "GPUs withheld from scheduling as unhealthy",
        gpus_bad,
    );
    reg.register(
        "gpus_allocated",
        "GPUs allocated to running jobs",
        gpus_allocated,
    );

    let s = ctx.raft.status.borrow().clone();
    let role = Family::<RoleLabel, Gauge>::default();
    for r in ["leader", "follower", "candidate", "pre-candidate"] {
        role.get_or_create(&RoleLabel { role: r.into() })
            .set(i64::from(s.role.name() == r));
    }
    let gauge = |v: u64| {
        let g = Gauge::<i64>::default();
        g.set(v as i64);
        g
    };
    let t = &ctx.telemetry;
    reg.register(
        "scheduler_pass_seconds",
        "One scheduling pass on the leader: snapshot and plan",
        t.pass_seconds.clone(),
    );
    reg.register(
        "scheduler_pending_considered",
        "Pending jobs the last scheduling pass considered",
        t.pass_pending.clone(),
    );
    reg.register(
        "job_queue_wait_seconds",
        "From submission (or requeue) to the pass that started the job",
        t.queue_wait_seconds.clone(),
    );
    reg.register(
        "proposal_seconds",
        "From proposing a command to its commit and apply on this controller",
        t.proposal_seconds.clone(),
    );
    reg.register(
        "leader_proposals_failed",
        "Commands the leader's own loops proposed that were not committed (each is logged)",
        t.leader_proposals_failed.clone(),
    );
    reg.register(
        "scheduler_pass_panics",
        "Scheduling passes that panicked (a bug; each is logged and the pass skipped)",
        t.pass_panics.clone(),
    );
    reg.register(
        "notifications_delivered",
        "Notification deliveries this controller made as leader, by channel and outcome",
        t.notifications.clone(),
    );
    reg.register(
        "notifications_in_doubt",
        "Notifications a leader gone had claimed, put down as not known to be delivered (never resent)",
        t.notify_in_doubt.clone(),
    );
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct NodeGpuLabel {
        node: String,
        gpu: String,
        user: String,
    }
    let outside = Family::<NodeGpuLabel, Gauge>::default();
    for (node, uses) in ctx.hub.outside_all() {
        for u in uses {
            outside
                .get_or_create(&NodeGpuLabel {
                    node: node.clone(),
                    gpu: u.gpu.to_string(),
                    user: u.user.clone(),
                })
                .inc();
        }
    }
    reg.register(
        "gpu_processes_outside_jobs",
        "Processes using a GPU outside the jobs holding it, by node, GPU and user (the leader's latest reports)",
        outside,
    );
    reg.register("raft_role", "1 for this controller's Raft role", role);
    reg.register("raft_term", "Raft term", gauge(s.term));
    reg.register(
        "raft_leader_id",
        "The leader this controller knows (0: none)",
        gauge(s.leader_id),
    );
    reg.register(
        "raft_commit_index",
        "Highest log index known committed",
        gauge(s.commit_index),
    );
    reg.register(
        "raft_applied_index",
        "Highest log index applied here",
        gauge(s.applied_index),
    );
    reg.register(
        "raft_snapshot_index",
        "Index of the latest snapshot",
        gauge(s.snapshot_index),
    );
    reg.register(
        "raft_voters",
        "Voting members of the Raft group",
        gauge(s.voters.len() as u64),
    );
    reg.register(
        "storage_bytes",
        "Bytes in this controller's data directory",
        gauge(s.disk_bytes),
    );
    reg.register(
        "storage_fault",
        "1 while this controller cannot write its data directory",
        gauge(u64::from(s.storage_fault.is_some())),
    );
    reg.register(
        "agents_connected",
        "Agents with a session to this controller (the leader holds them all)",
        gauge(ctx.hub.connected().len() as u64),
    );
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}

#[cfg(test)]
mod guard_tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, Method};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn cross_site_requests_are_refused_and_tools_pass() {
        let g = Guard { loopback: true };
        let host = ("host", "127.0.0.1:9817");
        // A cross-site form: text/plain, a foreign Origin.
        let form = headers(&[
            host,
            ("origin", "https://evil.example"),
            ("content-type", "text/plain"),
            ("content-length", "10"),
        ]);
        assert!(check_browser_request(g, &Method::POST, &form).is_err());
        // A no-cors fetch with no body: no write header, refused.
        let bare = headers(&[host]);
        assert!(check_browser_request(g, &Method::POST, &bare).is_err());
        // DNS rebinding: the attacker's name as Host.
        let rebound = headers(&[("host", "attacker.example:9817")]);
        assert!(check_browser_request(g, &Method::GET, &rebound).is_err());
        // Tools: the write header with JSON, or a bearer token; reads as before.
        let tool = headers(&[
            host,
            ("x-gsched-client", "curl"),
            ("content-type", "application/json"),
            ("content-length", "2"),
        ]);
        assert!(check_browser_request(g, &Method::POST, &tool).is_ok());
        let wrong_type = headers(&[
            host,
            ("x-gsched-client", "curl"),
            ("content-type", "text/plain"),
            ("content-length", "2"),
        ]);
        assert!(check_browser_request(g, &Method::POST, &wrong_type).is_err());
        let token = headers(&[host, ("authorization", "Bearer abc")]);
        assert!(check_browser_request(g, &Method::POST, &token).is_ok());
        let dashboard = headers(&[host, ("origin", "http://127.0.0.1:9817")]);
        assert!(check_browser_request(g, &Method::GET, &dashboard).is_ok());
        let by_name = headers(&[("host", "localhost:9817")]);
        assert!(check_browser_request(g, &Method::GET, &by_name).is_ok());
    }
}
