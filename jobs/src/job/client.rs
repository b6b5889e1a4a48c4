//! A small HTTP/1.1 client for the `silt job` commands and the tests: one request per
//! connection (`Connection: close`), bounded response size and time. silt's own API is all it
//! talks to, so it needs no TLS, redirects or keep-alive.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Responses larger than this are refused.
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Client {
    /// `host:port`.
    authority: String,
    token: Option<String>,
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("the response is not JSON: {}", self.body))
    }

    /// The `error` field of an error body, or the body itself.
    pub fn error_message(&self) -> String {
        self.json()
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| self.body.clone())
    }
}

impl Client {
    /// `base` is `http://host:port` or `host:port`; `token` the bearer token, when set.
    pub fn new(base: &str, token: Option<String>) -> Result<Client> {
        let authority = base
            .strip_prefix("http://")
            .unwrap_or(base)
            .trim_end_matches('/');
        if base.starts_with("https://") || authority.is_empty() || authority.contains('/') {
            bail!("{base:?} is not an address like http://127.0.0.1:8081 (https is not supported)");
        }
        Ok(Client {
            authority: authority.to_string(),
            token: token.filter(|t| !t.is_empty()),
            timeout: Duration::from_secs(120),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Response> {
        self.request("GET", path, None).await
    }

    pub async fn delete(&self, path: &str) -> Result<Response> {
        self.request("DELETE", path, None).await
    }

    pub async fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Result<Response> {
        self.request("POST", path, Some((content_type, body))).await
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Response> {
        tokio::time::timeout(self.timeout, self.exchange(method, path, body))
            .await
            .map_err(|_| {
                anyhow!(
                    "{method} {path}: no answer from {} within {:?}",
                    self.authority,
                    self.timeout
                )
            })?
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Response> {
        let mut stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .with_context(|| {
                format!(
                    "cannot reach the REST API at {} (is `silt up` running? set --rest or rest.listen)",
                    self.authority
                )
            })?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: application/json\r\n",
            self.authority
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let (content_type, payload) = body.unwrap_or(("application/json", b""));
        if body.is_some() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(payload).await?;
        stream.flush().await?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(RESPONSE_BYTES_MAX as u64 + 1)
            .read_to_end(&mut raw)
            .await?;
        if raw.len() > RESPONSE_BYTES_MAX {
            bail!("the response exceeds {RESPONSE_BYTES_MAX} bytes");
        }
        parse_response(&raw)
    }
}

fn parse_response(raw: &[u8]) -> Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response (no header end)"))?;
    let head = std::str::from_utf8(&raw[..split])?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP status line {status_line:?}"))?;
    let (mut content_type, mut chunked) = (None, false);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-type" {
                content_type = Some(value.to_string());
            }
            if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Response {
        status,
        content_type,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("malformed chunked body"))?;
        let size_text = std::str::from_utf8(&data[..line_end])?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| anyhow!("malformed chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            bail!("truncated chunked body");
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_plain_and_chunked() {
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n{\"error\":\"x\"}").unwrap();
        assert_eq!((r.status, r.error_message().as_str()), (404, "x"));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "abcde"));
        assert!(parse_response(b"garbage").is_err());
        assert!(Client::new("https://x:1", None).is_err());
        assert!(Client::new("http://127.0.0.1:8081/", None).is_ok());
    }
}
