//! The REST client of the `silt job` commands: reqwest (the HTTP client `silt sql` uses too),
//! one bounded request at a time against silt's own API.

use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Responses larger than this are refused.
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Client {
    /// `http://host:port`, without a trailing slash.
    base: String,
    token: Option<String>,
    http: reqwest::Client,
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
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client {
            base: format!("http://{authority}"),
            token: token.filter(|t| !t.is_empty()),
            http,
        })
    }

    pub async fn get(&self, path: &str) -> Result<Response> {
        self.send(self.http.get(self.url(path)), path).await
    }

    pub async fn delete(&self, path: &str) -> Result<Response> {
        self.send(self.http.delete(self.url(path)), path).await
    }

    pub async fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Result<Response> {
        let request = self
            .http
            .post(self.url(path))
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_vec());
        self.send(request, path).await
    }

    /// Any method; `body` is `(content type, bytes)`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Response> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .with_context(|| format!("{method:?} is not an HTTP method"))?;
        let mut request = self.http.request(method, self.url(path));
        if let Some((content_type, bytes)) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes.to_vec());
        }
        self.send(request, path).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, mut request: reqwest::RequestBuilder, path: &str) -> Result<Response> {
        request = request.header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut response = request.send().await.with_context(|| {
            format!(
                "cannot reach the REST API at {} for {path} (is `silt up` running? set --rest or rest.listen)",
                self.base
            )
        })?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > RESPONSE_BYTES_MAX {
                bail!("the response to {path} exceeds {RESPONSE_BYTES_MAX} bytes");
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checked() {
        assert!(Client::new("https://x:1", None).is_err());
        assert!(Client::new("http://127.0.0.1:8081/v1", None).is_err());
        let client = Client::new("http://127.0.0.1:8081/", None).unwrap();
        assert_eq!(client.url("/v1/jobs"), "http://127.0.0.1:8081/v1/jobs");
        let client = Client::new("127.0.0.1:8081", Some(String::new())).unwrap();
        assert!(client.token.is_none());
    }
}
