//! Plain HTTP/1.1 for tests, with no client library in between: one request per connection
//! (`Connection: close`), a 30 s read timeout, and the answer as its status code and body.
//! Enough for silt's REST API and for a local S3 server's bucket calls.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result};

/// `GET path` from `base` (`http://host:port` or `host:port`), with an `Authorization` header
/// when one is given.
pub fn get(base: &str, path: &str, authorization: Option<&str>) -> Result<(u16, String)> {
    request(base, "GET", path, authorization)
}

/// `method path` with an empty body (and, but for GET, `Content-Length: 0`).
pub fn request(
    base: &str,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String)> {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).with_context(|| format!("connect {host}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = authorization
        .map(|value| format!("Authorization: {value}\r\n"))
        .unwrap_or_default();
    let length = if method == "GET" {
        ""
    } else {
        "Content-Length: 0\r\n"
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}{length}Connection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
