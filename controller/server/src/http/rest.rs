//! The REST API's handlers (`/api/v1/...`) and what they extract from a request: the
//! verified caller, an `Idempotency-Key` tied to its first request, bodies as the gRPC
//! documents.

use crate::ctx::Ctx;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use gsched_proto::contract::Carries;
use gsched_proto::pb;
use std::sync::Arc;

#[derive(Clone)]
pub(super) struct Api {
    ctx: Arc<Ctx>,
    jobs: Arc<crate::service::jobs::JobsService>,
    keys: Arc<parking_lot::Mutex<KeyUses>>,
}

impl Api {
    pub(super) fn new(ctx: Arc<Ctx>) -> Api {
        Api {
            jobs: Arc::new(crate::service::jobs::JobsService::new(ctx.clone())),
            ctx,
            keys: Default::default(),
        }
    }
}

/// `?user=alice,bob&state=PD,R&all=1&detail=1`
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct JobsQuery {
    user: Option<String>,
    state: Option<String>,
    #[serde(default)]
    all: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    after: Option<u64>,
}

/// The dashboard page (its data comes from the API, so it needs no credentials itself).
pub(super) async fn dashboard() -> axum::response::Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("../dashboard.html"),
    )
        .into_response()
}

fn flag(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|v| v != "0" && v != "false")
}

/// A refusal, as the HTTP response that says the same as the gRPC status.
pub(super) struct ApiError(tonic::Status);

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

pub(super) type ApiResult = Result<axum::response::Response, ApiError>;

/// The verified caller of an HTTP request, as for gRPC: a `gctl token` in
/// `Authorization: Bearer`, else the loopback socket's owner (--dev-local), else a MUNGE
/// credential in `X-Gsched-Munge`.
pub(super) struct Verified(crate::auth::Caller);

impl axum::extract::FromRequestParts<Api> for Verified {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        api: &Api,
    ) -> Result<Verified, ApiError> {
        let headers = &parts.headers;
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<crate::accept::HttpPeer>>()
            .map(|c| c.0.clone());
        let caller = if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            let replica = api.ctx.raft.replica.clone();
            let revoked = move |uid| replica.read().state.token_revocations.revoked_before(uid);
            api.ctx
                .auth
                .caller_of_token(token, gsched_proto::clock::now_ms(), revoked)?
        } else {
            let cred = headers.get("x-gsched-munge").and_then(|v| v.to_str().ok());
            api.ctx
                .auth
                .caller_of(peer.as_ref().and_then(|p| p.uid), cred)?
        };
        // The connection now counts against its user (it counted against its address).
        if let Some(slot) = peer.as_ref().and_then(|p| p.slot.as_ref())
            && let Err(why) = slot.identify(crate::accept::Peer::Uid(caller.uid))
        {
            return Err(ApiError(tonic::Status::resource_exhausted(format!(
                "{} holds too many connections to this controller ({why:?}): close some",
                caller.user
            ))));
        }
        Ok(Verified(caller))
    }
}

/// A client's key for a write it may retry (`Idempotency-Key`), with the method and path
/// it came on; [`IdempotencyKey::request_id`] ties it to its caller and body.
pub(super) struct IdempotencyKey(Option<(String, String)>);

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
pub(super) struct KeyUses {
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

pub(super) async fn jobs(
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

pub(super) async fn job(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(who): Verified,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult {
    let row = detailed_row(&api, &who, &id).await?;
    Ok((StatusCode::OK, axum::Json(row)).into_response())
}

/// `GET /api/v1/jobs/ID/efficiency`: the job's `gsched_types::usage::Efficiency`.
pub(super) async fn efficiency(
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

pub(super) async fn submit(
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

pub(super) async fn act_on_jobs(
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

pub(super) async fn act_on_job(
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
pub(super) struct NodeActionBody {
    #[serde(default)]
    reason: String,
}

pub(super) async fn node_action(
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

pub(super) async fn nodes(
    axum::extract::State(api): axum::extract::State<Api>,
    Verified(_): Verified,
) -> ApiResult {
    Ok(reply(&api.jobs.nodes(true).await?))
}
