//! `POST /v1/query`: the query service over HTTP.
//!
//! Body: `{"sql": "...", "deadline_ms": 40000 | "deadline": "40s", "wait_for_tiering": false}`
//! (no deadline: `query.deadline_default_ms`). The answer is JSON by default:
//! `{"columns": [{"name", "type"}], "rows": [{...}], "row_count", "elapsed_ms", "tables": [...]}`,
//! or an Arrow IPC stream when the request sends `Accept: application/vnd.apache.arrow.stream`.
//! Errors are `{"error": "...", "kind": "user" | "deadline" | "busy" | "internal"}` with 400,
//! 504 (the deadline passed; the message says how far the query got), 503 with `Retry-After: 1`
//! (every query slot is taken and `query.waiting_max` queries wait: nothing ran, retry) and
//! 500.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;

use super::{QueryError, QueryRequest, QueryResult, QueryService, TableRead};

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// `Retry-After` (seconds) of a query refused as busy.
const BUSY_RETRY_AFTER_S: u64 = 1;

/// The query routes over the process's query service; a request without a deadline gets
/// `deadline_default`.
pub fn routes(service: QueryService, deadline_default: Duration) -> Router {
    Router::new()
        .route("/v1/query", post(query))
        .with_state(QueryRoute {
            service,
            deadline_default,
        })
}

#[derive(Clone)]
struct QueryRoute {
    service: QueryService,
    deadline_default: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryBody {
    sql: String,
    deadline_ms: Option<u64>,
    deadline: Option<String>,
    #[serde(default)]
    wait_for_tiering: bool,
}

fn error_response(status: StatusCode, kind: &str, message: String) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": message, "kind": kind })),
    )
        .into_response()
}

fn query_error_response(e: QueryError) -> Response {
    match &e {
        QueryError::User(_) => error_response(StatusCode::BAD_REQUEST, "user", e.to_string()),
        QueryError::DeadlinePassed { .. } => {
            error_response(StatusCode::GATEWAY_TIMEOUT, "deadline", e.to_string())
        }
        QueryError::Busy { .. } => {
            let mut response =
                error_response(StatusCode::SERVICE_UNAVAILABLE, "busy", e.to_string());
            let retry = HeaderValue::from(BUSY_RETRY_AFTER_S);
            response.headers_mut().insert(header::RETRY_AFTER, retry);
            response
        }
        QueryError::Internal(_) => {
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        }
    }
}

fn parse_request(body: &[u8], deadline_default: Duration) -> Result<QueryRequest, String> {
    let body: QueryBody = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body is not a query: {e} (send {{\"sql\": \"SELECT ...\", \"deadline\": \"40s\", \"wait_for_tiering\": false}})"
        )
    })?;
    let deadline = match (body.deadline_ms, body.deadline.as_deref()) {
        (Some(_), Some(_)) => return Err("give deadline_ms or deadline, not both".into()),
        (Some(ms), None) => Duration::from_millis(ms),
        (None, Some(text)) => {
            silt_rt::duration::parse_duration(text).map_err(|e| format!("deadline: {e}"))?
        }
        (None, None) => deadline_default,
    };
    Ok(QueryRequest {
        sql: body.sql,
        deadline,
        wait_for_tiering: body.wait_for_tiering,
    })
}

async fn query(State(route): State<QueryRoute>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match parse_request(&body, route.deadline_default) {
        Ok(r) => r,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, "user", message),
    };
    let arrow = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(ARROW_STREAM));
    let result = match route.service.execute(request).await {
        Ok(result) => result,
        Err(e) => return query_error_response(e),
    };
    let encoded = if arrow {
        arrow_body(&result).map(|b| (ARROW_STREAM, b))
    } else {
        json_body(&result).map(|b| ("application/json", b))
    };
    match encoded {
        Ok((content_type, bytes)) => {
            let mut response = (StatusCode::OK, bytes).into_response();
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            h.insert(
                "x-silt-elapsed-ms",
                HeaderValue::from(result.elapsed.as_millis() as u64),
            );
            h.insert("x-silt-rows", HeaderValue::from(result.num_rows() as u64));
            response
        }
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("encoding the result: {e}"),
        ),
    }
}

/// The result as an Arrow IPC stream.
pub fn arrow_body(result: &QueryResult) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let mut out = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, &result.schema)?;
    for batch in &result.batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

fn table_json(t: &TableRead) -> serde_json::Value {
    use silt_connectors::changelog::BucketKey;
    // Keys as `$lake$snapshots` writes them: `"3"`, a partition's `"p12/3"`.
    let offsets = |m: &std::collections::BTreeMap<BucketKey, i64>| -> serde_json::Value {
        m.iter()
            .map(|(b, o)| (b.short(), serde_json::json!(o)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    serde_json::json!({
        "name": t.name,
        "lake_version": t.lake_version,
        "lake_offsets": offsets(&t.lake_offsets),
        "high_watermarks": offsets(&t.high_watermarks),
    })
}

/// The result as JSON: columns, rows as objects, and what each table was read at.
pub fn json_body(result: &QueryResult) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let mut rows = Vec::new();
    {
        let mut writer = arrow::json::ArrayWriter::new(&mut rows);
        for batch in &result.batches {
            writer.write(batch)?;
        }
        writer.finish()?;
    }
    if rows.is_empty() {
        rows.extend_from_slice(b"[]");
    }
    let columns: Vec<serde_json::Value> = result
        .schema
        .fields()
        .iter()
        .map(|f| serde_json::json!({ "name": f.name(), "type": f.data_type().to_string() }))
        .collect();
    let tables: Vec<serde_json::Value> = result.tables.iter().map(table_json).collect();
    let head = serde_json::json!({
        "columns": columns,
        "row_count": result.num_rows(),
        "elapsed_ms": result.elapsed.as_millis() as u64,
        "tables": tables,
    });
    // Splice the rows (already JSON) into the object without re-parsing them.
    let mut out = serde_json::to_vec(&head)
        .map_err(|e| arrow::error::ArrowError::JsonError(e.to_string()))?;
    out.pop();
    out.extend_from_slice(b",\"rows\":");
    out.extend_from_slice(&rows);
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error's status, `kind` and, for a refusal as busy, when to retry.
    #[tokio::test]
    async fn errors_map_to_a_status_and_a_kind() {
        let deadline = QueryError::DeadlinePassed {
            deadline: Duration::from_millis(50),
            progress: "while planning".into(),
        };
        let busy = QueryError::Busy {
            running: 4,
            waiting: 32,
        };
        for (error, status, kind, retry_after) in [
            (QueryError::User("bad".into()), 400, "user", None),
            (deadline, 504, "deadline", None),
            (busy, 503, "busy", Some("1")),
            (QueryError::Internal("broken".into()), 500, "internal", None),
        ] {
            let response = query_error_response(error);
            assert_eq!(response.status().as_u16(), status, "{kind}");
            let retry = response.headers().get(header::RETRY_AFTER).cloned();
            assert_eq!(retry.as_ref().map(|v| v.to_str().unwrap()), retry_after);
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["kind"], kind, "{body}");
        }
    }

    #[test]
    fn request_bodies() {
        let d = Duration::from_secs(30);
        let r = parse_request(br#"{"sql":"SELECT 1"}"#, d).unwrap();
        assert_eq!((r.deadline, r.wait_for_tiering), (d, false));
        let r = parse_request(
            br#"{"sql":"SELECT 1","deadline":"40s","wait_for_tiering":true}"#,
            d,
        )
        .unwrap();
        assert_eq!(
            (r.deadline, r.wait_for_tiering),
            (Duration::from_secs(40), true)
        );
        let r = parse_request(br#"{"sql":"SELECT 1","deadline_ms":250}"#, d).unwrap();
        assert_eq!(r.deadline, Duration::from_millis(250));
        for bad in [
            &br#"{"sql":"SELECT 1","deadline_ms":1,"deadline":"1s"}"#[..],
            br#"{"sql":"SELECT 1","deadline":"soon"}"#,
            br#"{"query":"SELECT 1"}"#,
            b"not json",
        ] {
            assert!(parse_request(bad, d).is_err());
        }
    }
}
