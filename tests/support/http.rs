//! Plain HTTP/1.1 requests to a daemon's `--http`/`--metrics` address, as a client with
//! no library would send them: the status line and headers come back as text.

use std::io::{Read, Write};
use std::time::Duration;

/// Sends `method path` with extra header lines (each ending in `\r\n`) and `body`, as a
/// tool does (with `X-Gsched-Client`, which a browser will not send for another site);
/// returns the whole response ("" when the server closed without one).
pub fn request(addr: &str, method: &str, path: &str, headers: &str, body: &[u8]) -> String {
    let headers = format!("X-Gsched-Client: gsched-tests\r\n{headers}");
    request_as_browser(addr, method, path, &headers, body)
}

/// Sends a request with only the given headers (and Host), as a web page in a browser
/// could make one.
pub fn request_as_browser(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP address");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let host = if headers.to_ascii_lowercase().contains("host:") {
        String::new()
    } else {
        format!("Host: {addr}\r\n")
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\n{host}{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A server may answer (413) before it has read a large body, then close.
    let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(body));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a response ("" when there was none).
pub fn status(response: &str) -> &str {
    response.split_whitespace().nth(1).unwrap_or_default()
}

/// The JSON body of a response.
pub fn json_body(response: &str) -> serde_json::Value {
    let (_, b) = response.split_once("\r\n\r\n").unwrap_or_default();
    serde_json::from_str(b).unwrap_or_else(|e| panic!("{e}: {response}"))
}
