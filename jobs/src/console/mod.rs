//! The web console: a single page (`index.html`, `app.js`, `style.css` and two vendored
//! libraries, uPlot for charts and dagre for the job graph's layout; see `VENDORED.md`) served at
//! `/ui/` on the REST listener. Every file is compiled into the binary: no CDN, no internet.
//!
//! The files hold no data and are served without the bearer token (a browser cannot add an
//! `Authorization` header to a page load); every call the page makes goes to the API, behind
//! the token, and the page asks for the token when the API answers 401. `CONTRACT.md` lists the
//! calls.

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// (path under `/ui/`, content type, bytes) of every file served.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("style.css"),
    ),
    (
        "vendor/uPlot-1.6.32.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("vendor/uPlot-1.6.32.iife.min.js"),
    ),
    (
        "vendor/uPlot-1.6.32.min.css",
        "text/css; charset=utf-8",
        include_bytes!("vendor/uPlot-1.6.32.min.css"),
    ),
    (
        "vendor/dagre-3.1.3.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("vendor/dagre-3.1.3.min.js"),
    ),
    (
        "vendor/uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("vendor/uPlot.LICENSE"),
    ),
    (
        "vendor/dagre.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("vendor/dagre.LICENSE"),
    ),
];

/// Scripts and styles only from the page's own origin (uPlot sets inline styles).
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:";

/// `/ui` (redirected to `/ui/`), `/ui/` and its files; outside the bearer token's layer.
pub fn routes() -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { file("index.html") }))
        .route(
            "/ui/{*path}",
            get(|Path(path): Path<String>| async move { file(&path) }),
        )
}

fn file(path: &str) -> Response {
    match FILES.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, bytes)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *bytes,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("the console has no file {path:?}; open /ui/"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file the page loads is served: the references in index.html resolve.
    #[test]
    fn index_refers_only_to_served_files() {
        let index = std::str::from_utf8(FILES[0].2).unwrap();
        let refs: Vec<&str> = index
            .split(['"', '\''])
            .filter(|s| s.ends_with(".js") || s.ends_with(".css"))
            .collect();
        assert!(refs.len() >= 4, "{refs:?}");
        for r in refs {
            assert!(
                FILES.iter().any(|(name, _, _)| *name == r),
                "index.html loads {r}, which is not served"
            );
        }
    }
}
