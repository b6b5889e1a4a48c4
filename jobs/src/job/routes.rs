//! REST routes of the job service and the OpenAPI document of the whole API.
//!
//! [`ROUTES`] is the one list of what this module serves: the router is built from it and the
//! OpenAPI document must describe exactly it plus the routes other modules add
//! ([`OTHER_ROUTES`]). Two tests hold them together: one compares the lists with the
//! document, the other reads every route of the whole API's router (`up::rest_api`) and
//! compares it with the document, so a route added anywhere must be documented here.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use axum::{Json, Router};
use serde_json::json;

use super::definition::{OPERATOR_TYPES, ValidationErrors};
use super::position::locate_all;
use super::service::{JobError, JobService, JobStatus};
use super::{Format, parse_submission};
use crate::rest::ApiError;

/// Every `(method, path)` this module routes.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs/validate"),
    ("GET", "/v1/jobs/{id}"),
    ("DELETE", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/stop"),
    ("GET", "/openapi.json"),
];

/// Routes of the API that other modules serve, documented here too.
pub const OTHER_ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/tables"),
    ("GET", "/v1/tables/{table}"),
    ("GET", "/v1/tables/{table}/history"),
    ("POST", "/v1/tables/{table}/verify"),
    ("GET", "/v1/tables/{table}/verify"),
    ("GET", "/v1/hot"),
    ("GET", "/v1/memory"),
    ("GET", "/metrics"),
    ("POST", "/v1/query"),
];

/// Request bodies larger than this are refused (a definition is a few KiB).
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

fn handler(method: &str, path: &str) -> MethodRouter<JobService> {
    match (method, path) {
        ("POST", "/v1/jobs") => post(submit),
        ("GET", "/v1/jobs") => get(list),
        ("POST", "/v1/jobs/validate") => post(validate),
        ("GET", "/v1/jobs/{id}") => get(status),
        ("DELETE", "/v1/jobs/{id}") => delete(cancel),
        ("POST", "/v1/jobs/{id}/stop") => post(stop),
        ("GET", "/openapi.json") => get(openapi_handler),
        _ => unreachable!("ROUTES lists only handled routes: {method} {path}"),
    }
}

/// The job service's routes, built from [`ROUTES`], over `jobs`.
pub fn routes(jobs: JobService) -> Router {
    let mut by_path: Vec<(&str, MethodRouter<JobService>)> = Vec::new();
    for (method, path) in ROUTES {
        match by_path.iter_mut().find(|(p, _)| p == path) {
            Some((_, router)) => *router = std::mem::take(router).merge(handler(method, path)),
            None => by_path.push((path, handler(method, path))),
        }
    }
    by_path
        .into_iter()
        .fold(Router::new(), |router, (path, methods)| {
            router.route(path, methods)
        })
        .layer(axum::extract::DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(jobs)
}

/// 400 with every problem, its path and, when `submitted` is given and the path (or the
/// parser's message) leads there, its line and column in the submitted text:
/// `{"error": "...", "errors": [{"path", "message", "line"?, "column"?}]}`.
fn invalid(errors: ValidationErrors, submitted: Option<&Submitted<'_>>) -> Response {
    let listed = match submitted {
        Some(s) => json!(locate_all(&errors, s.text, s.format)),
        None => json!(errors.0),
    };
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": errors.to_string(), "errors": listed })),
    )
        .into_response()
}

/// The answer to a failed request; `submitted` is the body of a submit or validate.
fn job_error(e: JobError, submitted: Option<&Submitted<'_>>) -> Response {
    match e {
        JobError::Invalid(errors) => invalid(errors, submitted),
        JobError::NotFound { .. } => ApiError::not_found(e.to_string()).into_response(),
        JobError::NotRunning { .. } => {
            ApiError::new(StatusCode::CONFLICT, e.to_string()).into_response()
        }
        JobError::Internal(e) => ApiError::internal(format!("{e:#}")).into_response(),
    }
}

/// The text of a submit or validate body and its format, kept to place the problems found.
struct Submitted<'b> {
    text: &'b str,
    format: Format,
}

/// A definition parsed from a submit or validate body, with how its paths are named and the
/// submitted text.
struct Parsed<'b> {
    definition: super::definition::JobDefinition,
    paths: Box<dyn super::definition::PathNames>,
    submitted: Submitted<'b>,
}

fn parse_body<'b>(headers: &HeaderMap, body: &'b Bytes) -> Result<Parsed<'b>, Response> {
    let text = std::str::from_utf8(body).map_err(|_| {
        invalid(
            ValidationErrors::one("", "the body is not UTF-8 text"),
            None,
        )
    })?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let submitted = Submitted {
        text,
        format: Format::detect(content_type, text),
    };
    match parse_submission(text, submitted.format) {
        Ok((definition, paths)) => Ok(Parsed {
            definition,
            paths,
            submitted,
        }),
        Err(errors) => Err(invalid(errors, Some(&submitted))),
    }
}

/// `POST /v1/jobs`: a JSON definition or a YAML pipeline; 201 with the job's status.
async fn submit(State(jobs): State<JobService>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = match parse_body(&headers, &body) {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    match jobs.submit(parsed.definition, parsed.paths.as_ref()).await {
        Ok(status) => (StatusCode::CREATED, Json(status)).into_response(),
        Err(e) => job_error(e, Some(&parsed.submitted)),
    }
}

/// `POST /v1/jobs/validate`: the compiled graph (as text lines and as a topology), or 400 with
/// the problems; starts nothing.
async fn validate(State(jobs): State<JobService>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = match parse_body(&headers, &body) {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    match jobs
        .validate(&parsed.definition, parsed.paths.as_ref())
        .await
    {
        Ok(compiled) => Json(json!({
            "definition": compiled.definition,
            "graph": compiled.summary,
            "topology": compiled.topology,
        }))
        .into_response(),
        Err(e) => job_error(e, Some(&parsed.submitted)),
    }
}

async fn list(State(jobs): State<JobService>) -> Json<Vec<JobStatus>> {
    Json(jobs.list().await)
}

async fn status(State(jobs): State<JobService>, Path(id): Path<String>) -> Response {
    match jobs.status(&id).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => job_error(e, None),
    }
}

async fn cancel(State(jobs): State<JobService>, Path(id): Path<String>) -> Response {
    match jobs.cancel(&id).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => job_error(e, None),
    }
}

async fn stop(State(jobs): State<JobService>, Path(id): Path<String>) -> Response {
    match jobs.stop(&id).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => job_error(e, None),
    }
}

async fn openapi_handler() -> Json<serde_json::Value> {
    Json(openapi())
}

/// Error responses of the job routes.
fn error_responses(codes: &[&str]) -> serde_json::Value {
    described_errors(codes, |code| match code {
        "400" => "Invalid definition: every problem with its path",
        "401" => "Missing or wrong bearer token",
        "404" => "Unknown job id",
        "409" => "The job is not running",
        _ => "Internal error",
    })
}

/// Error responses of the table routes: a bad or unknown table name.
fn table_errors(codes: &[&str]) -> serde_json::Value {
    described_errors(codes, |code| match code {
        "400" => "The table is not written database.table, or a bad deadline",
        "401" => "Missing or wrong bearer token",
        "404" => {
            "No such table (or, for history and verify, not lake-enabled; for GET verify, no run yet)"
        }
        _ => "Internal error",
    })
}

/// `{"<code>": {"description", "content": <Error>}}` per code, described by `describe`.
fn described_errors(codes: &[&str], describe: fn(&str) -> &'static str) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for code in codes {
        map.insert(
            code.to_string(),
            json!({"description": describe(code), "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
    }
    serde_json::Value::Object(map)
}

fn ok(code: &str, description: &str, schema: serde_json::Value) -> serde_json::Value {
    json!({ code: {"description": description, "content": {"application/json": {"schema": schema}}} })
}

fn merge(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// The OpenAPI 3.1 document of the whole REST API.
pub fn openapi() -> serde_json::Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "silt REST API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"bearer": []}],
        "paths": merge(merge(job_paths(), service_paths()), table_paths()),
        "components": components(),
    })
}

/// The paths under `/v1/jobs`: submit, validate, list, status, cancel and stop.
fn job_paths() -> serde_json::Value {
    let job = json!({"$ref": "#/components/schemas/JobStatus"});
    let id_param =
        json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let submission = json!({
        "required": true,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/JobDefinition"}},
            "application/yaml": {"schema": {"type": "string", "description": "A YAML pipeline (source, transform, sink, pipeline) or a job definition in YAML"}}
        }
    });
    json!({
        "/v1/jobs": {
            "post": {
                "summary": "Submit a job (JSON definition or YAML pipeline); it is checked, persisted and started",
                "operationId": "submitJob",
                "requestBody": submission,
                "responses": merge(ok("201", "The job was started", job.clone()), error_responses(&["400", "401", "500"]))
            },
            "get": {
                "summary": "List jobs",
                "operationId": "listJobs",
                "responses": merge(ok("200", "Every job this silt knows", json!({"type": "array", "items": job})), error_responses(&["401"]))
            }
        },
        "/v1/jobs/validate": {
            "post": {
                "summary": "Check a definition or pipeline against the catalog and return the compiled graph; starts nothing",
                "operationId": "validateJob",
                "requestBody": submission,
                "responses": merge(ok("200", "The compiled graph", json!({"type": "object", "properties": {
                    "definition": {"$ref": "#/components/schemas/JobDefinition"},
                    "graph": {"type": "array", "items": {"type": "string"}},
                    "topology": {"$ref": "#/components/schemas/Topology", "description": "The compiled graph, structured; no metrics here"}}})), error_responses(&["400", "401", "500"]))
            }
        },
        "/v1/jobs/{id}": {
            "get": {
                "summary": "A job's state, parallelism, latest checkpoints and per-operator metrics",
                "operationId": "getJob",
                "parameters": id_param,
                "responses": merge(ok("200", "The job", job.clone()), error_responses(&["401", "404"]))
            },
            "delete": {
                "summary": "Cancel a job (no final checkpoint); it is not resumed",
                "operationId": "cancelJob",
                "parameters": id_param,
                "responses": merge(ok("200", "The cancelled job", job.clone()), error_responses(&["401", "404", "500"]))
            }
        },
        "/v1/jobs/{id}/stop": {
            "post": {
                "summary": "Stop a job with a final checkpoint; it is not resumed",
                "operationId": "stopJob",
                "parameters": id_param,
                "responses": merge(ok("200", "The stopped job", job), error_responses(&["401", "404", "409", "500"]))
            }
        }
    })
}

/// The other paths: tiering, the hot store, memory, queries, metrics and this document.
fn service_paths() -> serde_json::Value {
    json!({
        "/v1/tables": {
            "get": {
                "summary": "Tiering status and lag per lake-enabled table",
                "operationId": "listTables",
                "responses": merge(ok("200", "Tables", json!({"type": "array", "items": {"type": "object"}})), error_responses(&["401", "500"]))
            }
        },
        "/v1/hot": {
            "get": {
                "summary": "Every bucket of the hot store after retention: log start offset, high watermark, bytes and segments on disk, whether tiering holds retention back",
                "operationId": "listHotBuckets",
                "responses": merge(ok("200", "Buckets", json!({"type": "array", "items": {"type": "object"}})), error_responses(&["401"]))
            }
        },
        "/v1/memory": {
            "get": {
                "summary": "The allocator's own figures: bytes allocated (the live heap), active, resident, mapped and retained",
                "operationId": "memory",
                "responses": merge(ok("200", "jemalloc statistics", json!({"type": "object"})), error_responses(&["401", "500"]))
            }
        },
        "/v1/query": {
            "post": {
                "summary": "Read-only SQL over db.t, db.t$lake and db.t$lake$snapshots under a deadline",
                "operationId": "query",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryRequest"}}}},
                "responses": {
                    "200": {"description": "Rows as JSON, or an Arrow IPC stream when the request accepts application/vnd.apache.arrow.stream", "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/QueryResult"}},
                        "application/vnd.apache.arrow.stream": {"schema": {"type": "string", "format": "binary"}}}},
                    "400": {"description": "Bad SQL, an unknown table, a write, a bound exceeded", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryError"}}}},
                    "401": {"description": "Missing or wrong bearer token"},
                    "500": {"description": "Internal error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryError"}}}},
                    "503": {"description": "Busy: query.concurrent_max queries run and query.waiting_max wait; nothing ran, retry after Retry-After seconds", "headers": {"Retry-After": {"schema": {"type": "integer"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryError"}}}},
                    "504": {"description": "The deadline passed; the message says how far the query got", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryError"}}}}
                }
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics: per job and operator, and tiering lag per table",
                "operationId": "metrics",
                "responses": {"200": {"description": "Prometheus text format 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401": {"description": "Missing or wrong bearer token"}}
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "operationId": "openapi",
                "responses": merge(ok("200", "The OpenAPI document", json!({"type": "object"})), error_responses(&["401"]))
            }
        }
    })
}

/// The paths of one table: its description, its history and its verify runs.
fn table_paths() -> serde_json::Value {
    json!({
        "/v1/tables/{table}": {
            "get": {
                "summary": "A table as the hot tier describes it: kind, schema, primary key, partition and bucket keys, bucket count, properties (any table, lake-enabled or not)",
                "operationId": "getTable",
                "parameters": table_param(),
                "responses": merge(ok("200", "The table", table_schema()), table_errors(&["400", "401", "404", "500"]))
            }
        },
        "/v1/tables/{table}/history": {
            "get": {
                "summary": "A lake-enabled table's lag, freshness and commit time, sampled every 10 s over the last hour (in memory; a restart starts over)",
                "operationId": "getTableHistory",
                "parameters": [table_param()[0].clone(), {"name": "since_ms", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "Only samples taken after this, ms since the epoch"}],
                "responses": merge(ok("200", "Samples, oldest first", history_schema()), table_errors(&["400", "401", "404"]))
            }
        },
        "/v1/tables/{table}/verify": {
            "post": {
                "summary": "Start `silt verify` of one lake-enabled table in the background; follow it with GET",
                "operationId": "startVerify",
                "parameters": table_param(),
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "properties": {"deadline": {"type": "string", "description": "How long to wait for the lake to reach the high watermarks, e.g. 60s (default 60s)"}}}}}},
                "responses": merge(
                    merge(ok("202", "The run, started", verify_run_schema()), ok("409", "A run of this table is running: that run", verify_run_schema())),
                    merge(table_errors(&["400", "401", "404", "500"]), json!({"503": {"description": "Too many runs at once; retry after Retry-After seconds", "headers": {"Retry-After": {"schema": {"type": "integer"}}}}})))
            },
            "get": {
                "summary": "The table's latest verify run: its phase and progress while it runs, then the verdict",
                "operationId": "getVerify",
                "parameters": table_param(),
                "responses": merge(ok("200", "The run", verify_run_schema()), table_errors(&["401", "404"]))
            }
        }
    })
}

/// The `{table}` path parameter: `database.table`.
fn table_param() -> Vec<serde_json::Value> {
    vec![
        json!({"name": "table", "in": "path", "required": true, "schema": {"type": "string"}, "description": "database.table, e.g. demo.orders"}),
    ]
}

fn table_schema() -> serde_json::Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({"type": "object", "properties": {
        "table": {"type": "string"}, "table_id": {"type": "integer"},
        "kind": {"type": "string", "enum": ["log", "primary_key"]},
        "schema": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "type": {"type": "string"}, "nullable": {"type": "boolean"}, "comment": {"type": "string"}}}},
        "primary_key": strings, "partition_keys": strings, "bucket_keys": strings,
        "bucket_count": {"type": "integer"}, "properties": map, "custom_properties": map,
        "lake_enabled": {"type": "boolean"}, "comment": {"type": "string"}, "created_ms": {"type": "integer"}
    }})
}

fn history_schema() -> serde_json::Value {
    let nullable = |t: &str| json!({"type": [t, "null"]});
    json!({"type": "object", "properties": {
        "table": {"type": "string"}, "interval_ms": {"type": "integer"},
        "samples": {"type": "array", "items": {"type": "object", "properties": {
            "t_ms": {"type": "integer"}, "lag_offsets": {"type": "integer"}, "lag_ms": {"type": "integer"},
            "freshness_ms": nullable("integer"), "commit_ms": nullable("integer")}}}
    }})
}

fn verify_run_schema() -> serde_json::Value {
    json!({"type": "object", "required": ["run_id", "table", "state", "started_ms"], "properties": {
        "run_id": {"type": "string"}, "table": {"type": "string"},
        "state": {"type": "string", "enum": ["running", "done", "failed"]},
        "started_ms": {"type": "integer"}, "finished_ms": {"type": ["integer", "null"]},
        "progress": {"type": ["object", "null"], "properties": {
            "phase": {"type": "string", "enum": crate::verify::rest::PHASES},
            "message": {"type": "string"}, "fraction": {"type": "number"}}},
        "result": {"type": ["object", "null"], "description": "One table of silt verify --format json"},
        "error": {"type": ["string", "null"]}
    }})
}

fn components() -> serde_json::Value {
    json!({
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "Required when rest.token is set"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {
                    "error": {"type": "string"},
                    "errors": {"type": "array", "items": {"type": "object", "required": ["path", "message"], "properties": {
                        "path": {"type": "string", "description": "Where the problem is: source.table, transform[1].filter, operators[3].config.predicate; empty for the whole text; may end in a note such as ` (item 1)`"},
                        "message": {"type": "string"},
                        "line": {"type": "integer", "minimum": 1, "description": "1-based line of the value at path in the submitted text (or of a syntax error); absent when unknown"},
                        "column": {"type": "integer", "minimum": 1, "description": "1-based column (in characters) of that value; present with line"}}}}
                }},
                "QueryRequest": {"type": "object", "required": ["sql"], "properties": {
                    "sql": {"type": "string"},
                    "deadline_ms": {"type": "integer"},
                    "deadline": {"type": "string", "description": "e.g. 500ms, 40s, 2min"},
                    "wait_for_tiering": {"type": "boolean"}
                }},
                "QueryResult": {"type": "object", "properties": {
                    "columns": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string"}}}},
                    "rows": {"type": "array", "items": {"type": "object"}},
                    "row_count": {"type": "integer"},
                    "elapsed_ms": {"type": "integer"},
                    "tables": {"type": "array", "items": {"type": "object"}}
                }},
                "QueryError": {"type": "object", "required": ["error", "kind"], "properties": {
                    "error": {"type": "string"},
                    "kind": {"type": "string", "enum": ["user", "deadline", "busy", "internal"]}
                }},
                "JobDefinition": {"description": "See conf/job-definition.schema.json", "type": "object"},
                "JobStatus": {"type": "object", "required": ["id", "name", "state", "desired", "parallelism", "checkpoints", "operators"], "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "state": {"type": "string", "enum": ["created", "running", "restarting", "finished", "cancelled", "failed"]},
                    "desired": {"type": "string", "enum": ["running", "stopped", "cancelled"]},
                    "failure": {"type": "string"},
                    "failure_cause": {"type": "string", "enum": ["user", "silt"]},
                    "submitted_at_ms": {"type": "integer"},
                    "checkpoint_interval_ms": {"type": "integer"},
                    "parallelism": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "checkpoints": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "integer"}, "duration_ms": {"type": "integer"}, "size_bytes": {"type": "integer"},
                        "completed_at_ms": {"type": "integer"}, "is_final": {"type": "boolean"}}}},
                    "checkpoints_completed": {"type": "integer"},
                    "checkpoints_failed": {"type": "integer"},
                    "restarts": {"type": "integer"},
                    "buffered_bytes": {"type": "integer"},
                    "operators": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "parallelism": {"type": "integer"},
                        "records_in": {"type": "integer"}, "records_out": {"type": "integer"},
                        "bytes_in": {"type": "integer"}, "bytes_out": {"type": "integer"},
                        "backpressured_ms": {"type": "integer"}, "last_checkpoint_bytes": {"type": "integer"},
                        "last_snapshot_ms": {"type": "integer"}}}},
                    "graph": {"type": "array", "items": {"type": "string"}},
                    "topology": {"$ref": "#/components/schemas/Topology"}
                }},
                "Topology": topology_schema()
            }
    })
}

/// The `Topology` schema: the job graph of a job's status and of the validate answer.
fn topology_schema() -> serde_json::Value {
    json!({"type": "object", "required": ["operators", "edges"], "description": "The compiled graph as the definition names it", "properties": {
        "operators": {"type": "array", "description": "The definition's operators, in definition order", "items": {"type": "object", "required": ["id", "name", "type", "parallelism", "description", "vertices"], "properties": {
            "id": {"type": "string", "description": "The name edges use"},
            "name": {"type": "string"},
            "type": {"type": "string", "enum": OPERATOR_TYPES},
            "parallelism": {"type": "integer"},
            "description": {"type": "string"},
            "vertices": {"type": "array", "items": {"type": "string"}, "description": "The engine vertices it became (a delta-sink: NAME-writer, NAME-committer), named as in operators[]"},
            "records_in": {"type": "integer", "description": "Job status only: summed over the vertices fed from another operator (a source's readers)"},
            "records_out": {"type": "integer", "description": "Job status only: summed over the vertices whose output leaves the operator (a sink's last vertex)"},
            "bytes_in": {"type": "integer"},
            "bytes_out": {"type": "integer"},
            "backpressured_ms": {"type": "integer", "description": "Time blocked on full output channels since the job started, summed over the operator's vertices and all their subtasks"},
            "backpressure_ratio": {"type": "number", "minimum": 0, "maximum": 1, "description": "Share of the interval since the job service's previous read of the metrics (at least 1 s) the subtasks spent blocked on output, averaged over subtasks; absent at the first read"}}}},
        "edges": {"type": "array", "items": {"type": "object", "required": ["from", "to", "partitioning"], "properties": {
            "from": {"type": "string"}, "to": {"type": "string"},
            "partitioning": {"type": "string", "description": "forward, hash(COLUMNS), rebalance or broadcast"}}}}
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_exactly_the_routes() {
        let doc = openapi();
        let mut documented = Vec::new();
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for method in methods.as_object().unwrap().keys() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        let mut routed: Vec<(String, String)> = ROUTES
            .iter()
            .chain(OTHER_ROUTES)
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        routed.sort();
        assert_eq!(documented, routed);
        // Every JobStatus field the handlers return is documented.
        let props = doc["components"]["schemas"]["JobStatus"]["properties"]
            .as_object()
            .unwrap();
        // The optional fields are set: serde leaves them out when they are None.
        let sample = serde_json::to_value(JobStatus {
            failure: Some(String::new()),
            failure_cause: Some(String::new()),
            ..JobStatus::default()
        })
        .unwrap();
        for key in sample.as_object().unwrap().keys() {
            assert!(props.contains_key(key), "JobStatus.{key} is not documented");
        }
        assert_eq!(props.len(), sample.as_object().unwrap().len());
    }
}

#[cfg(test)]
mod router_tests {
    use super::*;

    /// `(METHOD, path)` of every route in the whole API's router, read from the router's Debug
    /// output (axum has no route listing). The format is axum 0.8's; if it changes, the
    /// extraction finds nothing and the test says so rather than passing.
    fn routed() -> Vec<(String, String)> {
        let config = crate::config::Config::load(None, std::iter::empty(), &[]).unwrap();
        let tiering = crate::tiering::TieringService::new(
            crate::tiering::TieringConfig::new("127.0.0.1:1", "/nonexistent", "/nonexistent"),
            None,
        );
        let jobs = super::super::service::JobService::new(config.jobs("127.0.0.1:1"));
        let query = crate::query::QueryService::new(config.query("127.0.0.1:1"));
        let text = format!(
            "{:?}",
            crate::up::rest_api(&config, jobs, query, tiering, None, "127.0.0.1:1")
        );
        let start = text
            .find("path_router:")
            .expect("axum Debug has path_router");
        let end = text.find("fallback_router:").unwrap_or(text.len());
        let main = &text[start..end];
        let (routes, node) = main.split_once("node: Node").expect("axum Debug has node");
        let mut paths = std::collections::BTreeMap::new();
        for chunk in node.split("RouteId(").skip(1) {
            let (id, rest) = chunk.split_once(')').unwrap();
            let path = rest.split('"').nth(1).unwrap();
            paths.insert(id.trim().to_string(), path.to_string());
        }
        let mut out = Vec::new();
        for chunk in routes.split("RouteId(").skip(1) {
            let (id, rest) = chunk.split_once(')').unwrap();
            let methods = rest.split("fallback:").next().unwrap();
            for method in [
                "get", "delete", "post", "put", "patch", "options", "trace", "connect",
            ] {
                let present = methods.contains(&format!(" {method}: Route"))
                    || methods.contains(&format!(" {method}: BoxedHandler"));
                if present {
                    out.push((method.to_uppercase(), paths[id.trim()].clone()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn the_router_serves_exactly_the_documented_routes() {
        // The console's files are pages, not API: the document leaves them out.
        let (console, routed): (Vec<_>, Vec<_>) = routed()
            .into_iter()
            .partition(|(_, path)| path == "/ui" || path.starts_with("/ui/"));
        assert_eq!(console.len(), 3, "the console's routes: {console:?}");
        assert!(
            routed.len() >= ROUTES.len(),
            "could not read the routes from axum's Debug output: {routed:?}"
        );
        let doc = openapi();
        let mut documented = Vec::new();
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for method in methods.as_object().unwrap().keys() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        documented.sort();
        assert_eq!(routed, documented);
    }
}
