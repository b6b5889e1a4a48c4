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
    send(base, method, path, authorization, None)
}

/// `method path` with a JSON body.
pub fn send_json(
    base: &str,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Result<(u16, String)> {
    send(base, method, path, None, Some(&body.to_string()))
}

fn send(
    base: &str,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    json: Option<&str>,
) -> Result<(u16, String)> {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).with_context(|| format!("connect {host}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = authorization
        .map(|value| format!("Authorization: {value}\r\n"))
        .unwrap_or_default();
    let body = json.unwrap_or_default();
    let length = match (method, json) {
        ("GET", None) => String::new(),
        (_, None) => "Content-Length: 0\r\n".to_string(),
        (_, Some(body)) => format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ),
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}{length}Connection: close\r\n\r\n{body}"
    )?;
    let response = read_response(&mut stream)?;
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

/// The response up to the end of its body: `Content-Length` bytes after the headers when it
/// has one (chromedriver answers `Connection: close` but keeps the connection open), else
/// everything until the server closes.
fn read_response(stream: &mut TcpStream) -> Result<String> {
    let mut response = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = find(&response, b"\r\n\r\n") {
            let headers = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
            let length = headers.lines().find_map(|line| {
                line.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            if let Some(length) = length
                && response.len() >= end + 4 + length
            {
                response.truncate(end + 4 + length);
                break;
            }
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(response).context("an HTTP response that is not UTF-8")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
