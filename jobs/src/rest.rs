//! silt's REST API (axum), served by `silt up` on `rest.listen` (127.0.0.1:8081 by default).
//!
//! Each service owns its routes and their state (`job::routes`: the job service; `query::rest`:
//! the query service; `status`: tiering, hot store and process status and `/metrics`). This
//! module only merges them into one router behind one optional bearer token (`rest.token`):
//! when a token is configured every request must carry `Authorization: Bearer <token>`, else it
//! gets 401.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Serialize;
use tracing::{info, warn};

/// An error body: `{"error": "..."}` with a status code.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
        }
        (
            self.status,
            Json(Body {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// The whole API: the services' routers, each with its own state already applied, merged
/// behind the optional bearer token (`rest.token`; empty: none).
pub fn router(token: &str, services: impl IntoIterator<Item = Router>) -> Router {
    services
        .into_iter()
        .fold(Router::new(), Router::merge)
        .layer(middleware::from_fn_with_state(
            Arc::new(token.to_string()),
            require_token,
        ))
}

async fn require_token(State(token): State<Arc<String>>, request: Request, next: Next) -> Response {
    if token.is_empty() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token: send `Authorization: Bearer <rest.token>`",
        )
        .into_response()
    }
}

/// Compares without returning early on the first differing byte.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Binds `listen` and serves `router` until `shutdown` fires. Returns the bound address.
pub async fn serve(
    listen: &str,
    router: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("rest.listen {listen:?} is not an address like 127.0.0.1:8081"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind the REST API to {addr} (set rest.listen)"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        warn!(%local, "REST API listens beyond loopback: set rest.token to require a bearer token");
    }
    info!(%local, "REST API listening");
    let handle = tokio::spawn(async move {
        let result = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(e) = result {
            warn!(error = %e, "REST API stopped with an error");
        }
    });
    Ok((local, handle))
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
