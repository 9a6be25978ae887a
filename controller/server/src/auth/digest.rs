//! The digest of each `Jobs` request's body, taken before tonic decodes it, so a user's
//! MUNGE credential can be checked against the very request it came with
//! (`gsched_proto::munge::check_payload`). Only the `Jobs` service is buffered: its
//! requests are single messages; the agent and peer streams are not touched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::body::Body;

/// The digest of a request's body (its gRPC frames), in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDigest(pub String);

/// A tower layer that puts a [`RequestDigest`] on every `Jobs` request when `enabled`
/// (a cluster with MUNGE; a `--dev-local` controller has no credential to check it
/// against, so its requests pass untouched).
#[derive(Debug, Clone, Copy)]
pub struct DigestLayer {
    pub enabled: bool,
}

impl<S> tower::Layer<S> for DigestLayer {
    type Service = Digesting<S>;

    fn layer(&self, inner: S) -> Digesting<S> {
        Digesting {
            inner,
            enabled: self.enabled,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Digesting<S> {
    inner: S,
    enabled: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, R> tower::Service<http::Request<Body>> for Digesting<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<R>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let enabled = self.enabled;
        Box::pin(async move {
            if !enabled || !req.uri().path().starts_with("/gsched.v1.Jobs/") {
                return inner.call(req).await.map_err(Into::into);
            }
            let (mut parts, body) = req.into_parts();
            let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
            parts
                .extensions
                .insert(RequestDigest(gsched_proto::munge::body_digest(&bytes)));
            let req = http::Request::from_parts(parts, Body::new(http_body_util::Full::new(bytes)));
            inner.call(req).await.map_err(Into::into)
        })
    }
}
