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
//! Files: `guard` (what a browser can be tricked into sending), `rest` (the API's
//! handlers and their extractors), `metrics` (the scrape's text).
//!
//! And the dashboard at `/`: one page embedded in the binary (`dashboard.html`) that
//! draws from that API with the browser's identity.

use crate::ctx::Ctx;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use std::sync::Arc;

mod guard;
mod metrics;
mod rest;

pub use guard::WRITE_HEADER;
use guard::{Guard, browser_guard};
use metrics::metrics;
pub use metrics::render;
use rest::{
    Api, act_on_job, act_on_jobs, dashboard, efficiency, job, jobs, node_action, nodes, submit,
};

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
    let api = Api::new(ctx.clone());
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
        let remote = peer.remote;
        tokio::spawn(async move {
            let service = tower::ServiceExt::map_request(
                app,
                move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer.clone()));
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
                tracing::debug!("HTTP connection from {remote}: {e}");
            }
        });
    }
}
