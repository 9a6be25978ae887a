//! What a browser can be tricked into sending on a user's behalf, refused before any
//! handler runs: DNS rebinding, cross-site forms and fetches.

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

/// What a browser can be tricked into sending, refused before any handler runs.
#[derive(Clone, Copy)]
pub(super) struct Guard {
    /// Serving on loopback addresses only.
    pub(super) loopback: bool,
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
pub(super) async fn browser_guard(
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
