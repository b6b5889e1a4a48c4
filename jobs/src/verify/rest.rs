//! `silt verify` over REST, for the console's Verify button and for scripts:
//! `POST /v1/tables/{db}.{table}/verify` starts a run (202; 409 with the running one when the
//! table has one; 404 for an unknown or not lake-enabled table; 503 when
//! [`RUNS_CONCURRENT_MAX`] run already) and `GET` the same path follows the table's latest run:
//! its phase and progress while it runs, then the per-table object of `silt verify --format json`
//! or why it failed.
//!
//! A run holds both sides of the comparison in memory, as `silt verify` does, so few run at
//! once. The latest run of each table is kept (at most [`RUNS_KEPT_MAX`], the oldest finished
//! one forgotten first); nothing survives a restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use silt_rt::clock::now_ms;

use super::{VerifyOptions, parse_table_name, verify_table};
use crate::progress::Progress;
use crate::rest::ApiError;

/// Runs at once, over all tables.
pub const RUNS_CONCURRENT_MAX: usize = 2;
/// Runs kept (the latest per table).
pub const RUNS_KEPT_MAX: usize = 1024;
/// `Retry-After` (seconds) of a start refused because others run.
const BUSY_RETRY_AFTER_S: u64 = 5;

/// The phases a run reports, in order; verify's progress messages start with them.
pub const PHASES: [&str; 5] = [
    super::PHASE_CAPTURING,
    super::PHASE_WAITING,
    super::PHASE_CHANGELOG,
    super::PHASE_LAKE,
    super::PHASE_COMPARING,
];

/// The routes, with `options` as every run's settings (the deadline is the request's).
pub fn routes(options: VerifyOptions) -> Router {
    let runs = Runs {
        options,
        runs: Mutex::default(),
    };
    Router::new()
        .route("/v1/tables/{table}/verify", get(follow).post(start))
        .with_state(Arc::new(runs))
}

struct Runs {
    options: VerifyOptions,
    /// The latest run per table.
    runs: Mutex<BTreeMap<String, Run>>,
}

/// One run, as the routes answer it; `progress` is read from the run's [`Progress`] when asked.
#[derive(Clone, Debug, Serialize)]
pub struct RunBody {
    run_id: String,
    table: String,
    /// `running`, `done` or `failed`.
    state: &'static str,
    started_ms: i64,
    finished_ms: Option<i64>,
    progress: Option<ProgressBody>,
    /// When done: one table of `silt verify --format json`.
    result: Option<serde_json::Value>,
    /// When failed: why (not a mismatch: an error).
    error: Option<String>,
}

#[derive(Clone, Serialize, PartialEq, Debug)]
pub struct ProgressBody {
    /// One of [`PHASES`].
    phase: String,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fraction: Option<f64>,
}

struct Run {
    body: RunBody,
    progress: Progress,
}

impl Run {
    fn answer(&self) -> RunBody {
        let mut body = self.body.clone();
        if body.state == "running" {
            body.progress = Some(progress_body(&self.body.table, &self.progress.message()));
        }
        body
    }
}

#[derive(Deserialize, Default)]
struct StartBody {
    /// How long to wait for the lake to reach the high watermarks, e.g. `60s` (default: as
    /// `silt verify`'s).
    deadline: Option<String>,
}

/// `POST`: checks the table, then starts a run in the background.
async fn start(
    State(runs): State<Arc<Runs>>,
    Path(name): Path<String>,
    body: Option<Json<StartBody>>,
) -> Response {
    match try_start(&runs, &name, body.map(|b| b.0).unwrap_or_default()).await {
        Ok(run) => (StatusCode::ACCEPTED, Json(run)).into_response(),
        Err(response) => response,
    }
}

async fn try_start(runs: &Arc<Runs>, name: &str, body: StartBody) -> Result<RunBody, Response> {
    let (database, table) =
        parse_table_name(name).map_err(|e| bad_request(e.to_string()).into_response())?;
    let mut options = runs.options.clone();
    if let Some(text) = body.deadline.as_deref() {
        options.deadline = silt_rt::duration::parse_duration(text)
            .map_err(|e| bad_request(format!("deadline: {e}")).into_response())?;
    }
    let connection = connect(&options).await?;
    check_lake_enabled(&connection, &database, &table, name).await?;
    options.progress = Progress::hidden();
    let progress = options.progress.clone();
    let body = runs.claim(name, progress)?;
    let (runs, name) = (runs.clone(), name.to_string());
    tokio::spawn(async move {
        // The check runs in a task of its own, so that even a panic in it ends the run (as
        // failed) rather than leaving it running and its slot taken for good.
        let check =
            tokio::spawn(
                async move { verify_table(&connection, &database, &table, &options).await },
            );
        let outcome = (check.await).unwrap_or_else(|e| Err(anyhow::anyhow!("verify stopped: {e}")));
        runs.finish(&name, outcome);
    });
    Ok(body)
}

fn bad_request(message: String) -> ApiError {
    ApiError::bad_request(message)
}

async fn connect(options: &VerifyOptions) -> Result<fluss::client::FlussConnection, Response> {
    silt_connectors::fluss::connect_with(&options.bootstrap, options.credentials.as_ref())
        .await
        .map_err(|e| {
            let message = format!("cannot reach the hot tier at {}: {e:#}", options.bootstrap);
            ApiError::internal(message).into_response()
        })
}

/// 404 for an unknown table or one without a lake, as the console and scripts expect.
async fn check_lake_enabled(
    connection: &fluss::client::FlussConnection,
    database: &str,
    table: &str,
    name: &str,
) -> Result<(), Response> {
    let admin = (connection.get_admin()).map_err(|e| ApiError::internal(e).into_response())?;
    let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
    let not_found = |why: String| ApiError::not_found(why).into_response();
    match admin.get_table_info(&path).await {
        Ok(info) if silt_connectors::fluss::is_lake_enabled(&info) => Ok(()),
        Ok(_) => Err(not_found(format!(
            "table {name} is not lake-enabled (table.datalake.enabled is not true), so it has \
             no lake to verify"
        ))),
        Err(e) => Err(not_found(format!("no table {name} in the hot tier ({e})"))),
    }
}

impl Runs {
    /// Records a new running run for `name`, unless one runs for it (409) or too many run
    /// (503).
    fn claim(&self, name: &str, progress: Progress) -> Result<RunBody, Response> {
        let mut runs = self.runs.lock().unwrap();
        if let Some(run) = runs.get(name).filter(|r| r.body.state == "running") {
            return Err((StatusCode::CONFLICT, Json(run.answer())).into_response());
        }
        let running = runs.values().filter(|r| r.body.state == "running").count();
        if running >= RUNS_CONCURRENT_MAX {
            let message = format!(
                "{running} verify runs are running (at most {RUNS_CONCURRENT_MAX} at once, each \
                 holds a table's changelog and lake in memory); try again when one finishes"
            );
            let mut response =
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message).into_response();
            let retry = HeaderValue::from(BUSY_RETRY_AFTER_S);
            response.headers_mut().insert(header::RETRY_AFTER, retry);
            return Err(response);
        }
        forget_oldest_finished(&mut runs);
        let started_ms = now_ms();
        let run = Run {
            body: RunBody {
                run_id: format!("{name}-{started_ms}"),
                table: name.to_string(),
                state: "running",
                started_ms,
                finished_ms: None,
                progress: None,
                result: None,
                error: None,
            },
            progress,
        };
        let body = run.answer();
        runs.insert(name.to_string(), run);
        Ok(body)
    }

    fn finish(&self, name: &str, outcome: anyhow::Result<super::TableReport>) {
        let mut runs = self.runs.lock().unwrap();
        let Some(run) = runs.get_mut(name) else {
            return;
        };
        let body = &mut run.body;
        body.finished_ms = Some(now_ms());
        match outcome {
            Ok(report) => {
                body.state = "done";
                body.result = serde_json::to_value(super::output::table_json(&report)).ok();
            }
            Err(e) => {
                body.state = "failed";
                body.error = Some(format!("{e:#}"));
            }
        }
    }
}

/// Keeps the map under [`RUNS_KEPT_MAX`] before one more run goes in.
fn forget_oldest_finished(runs: &mut BTreeMap<String, Run>) {
    while runs.len() >= RUNS_KEPT_MAX {
        let oldest = (runs.iter())
            .filter(|(_, r)| r.body.state != "running")
            .min_by_key(|(_, r)| r.body.finished_ms)
            .map(|(name, _)| name.clone());
        match oldest {
            Some(name) => runs.remove(&name),
            None => return,
        };
    }
}

/// `GET`: the table's latest run; 404 when none ran since silt started.
async fn follow(
    State(runs): State<Arc<Runs>>,
    Path(name): Path<String>,
) -> Result<Json<RunBody>, ApiError> {
    let runs = runs.runs.lock().unwrap();
    let run = runs.get(&name).ok_or_else(|| {
        ApiError::not_found(format!(
            "no verify run of {name} since silt started (POST to this path starts one)"
        ))
    })?;
    Ok(Json(run.answer()))
}

/// The phase and progress of a run, from verify's progress message (`db.t: <phase>[: more]`,
/// see [`PHASES`]); before the first message, the run is capturing the high watermarks.
fn progress_body(table: &str, message: &str) -> ProgressBody {
    let text = message
        .strip_prefix(table)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or("");
    let phase = PHASES
        .iter()
        .find(|p| text.starts_with(**p))
        .unwrap_or(&super::PHASE_CAPTURING);
    ProgressBody {
        phase: phase.to_string(),
        message: if text.is_empty() { phase } else { text }.to_string(),
        fraction: super::waiting_fraction(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_phase_and_fraction_come_from_verifys_messages() {
        let body = progress_body("demo.orders", "");
        assert_eq!(body.phase, "capturing high watermarks");
        let waiting = "demo.orders: waiting for tiering: the lake holds 300 of 1200 offsets";
        let body = progress_body("demo.orders", waiting);
        assert_eq!(body.phase, "waiting for tiering");
        assert_eq!(body.fraction, Some(0.25));
        assert_eq!(
            body.message,
            "waiting for tiering: the lake holds 300 of 1200 offsets"
        );
        let body = progress_body("demo.orders", "demo.orders: comparing");
        assert_eq!((body.phase.as_str(), body.fraction), ("comparing", None));
        // Another table's message (never the case) is not taken for this one's.
        let body = progress_body("demo.orders", "demo.other: comparing");
        assert_eq!(body.phase, "capturing high watermarks");
    }

    #[test]
    fn the_latest_run_of_a_table_is_kept_and_the_oldest_finished_forgotten() {
        let runs = Runs {
            options: VerifyOptions::new("127.0.0.1:1", "/nonexistent"),
            runs: Mutex::default(),
        };
        let first = runs.claim("d.a", Progress::hidden()).unwrap();
        assert_eq!(first.state, "running");
        let again = runs.claim("d.a", Progress::hidden()).unwrap_err();
        assert_eq!(again.status(), StatusCode::CONFLICT);
        runs.claim("d.b", Progress::hidden()).unwrap();
        let busy = runs.claim("d.c", Progress::hidden()).unwrap_err();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "5");
        runs.finish("d.a", Err(anyhow::anyhow!("the hot tier went away")));
        let failed = runs.runs.lock().unwrap()["d.a"].answer();
        assert_eq!(
            (failed.state, failed.error.as_deref()),
            ("failed", Some("the hot tier went away"))
        );
        assert!(failed.finished_ms.is_some() && failed.progress.is_none());
        let mut map = runs.runs.lock().unwrap();
        forget_oldest_finished(&mut map);
        assert_eq!(map.len(), 2, "under the bound nothing is forgotten");
    }
}
