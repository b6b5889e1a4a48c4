//! `silt sql`: sends a query to a running `silt up` over REST (`POST /v1/query`, Arrow IPC
//! answer) and prints the result as a table, CSV or JSON.
//!
//! The server's address is `rest.listen` from the config (or `--url`); `rest.token` is sent as
//! a bearer token when set. When no server answers, the query runs in this process over the
//! lake under the data directory (`$lake` and `$lake$snapshots` only, with a note on stderr);
//! what needs the hot store (the real-time view `db.t`, `--wait-for-tiering`) fails with exit
//! code 1 and says to start `silt up`.
//! Exit codes: 0 ok, 1 failure (bad SQL, unknown table, no server), 3 deadline passed, 4 the
//! server is busy (every one of its `query.concurrent_max` slots taken and `query.waiting_max`
//! queries waiting: the query did not run; retry).

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use arrow::array::RecordBatch;

use crate::config::Config;

/// How `silt sql` prints rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            other => Err(format!("unknown format {other:?} (use table, csv or json)")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SqlOptions {
    pub sql: String,
    pub deadline: Duration,
    pub wait_for_tiering: bool,
    pub format: OutputFormat,
    /// `http://host:port` of the REST API; default from `rest.listen`.
    pub url: Option<String>,
}

/// The query's deadline passed; the CLI exits with code 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DeadlinePassed(pub String);

/// The server refused the query as busy (HTTP 503); the CLI exits with code 4.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Busy(pub String);

/// Runs the query against the server and prints the result to stdout (a summary to stderr).
pub async fn run(config: &Config, options: SqlOptions) -> Result<()> {
    let base = options
        .url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.rest.listen));
    let url = format!("{}/v1/query", base.trim_end_matches('/'));
    let body = serde_json::json!({
        "sql": options.sql,
        "deadline_ms": options.deadline.as_millis() as u64,
        "wait_for_tiering": options.wait_for_tiering,
    });
    // The server answers at its deadline; the client waits a little longer for that answer.
    let client = reqwest::Client::builder()
        .timeout(options.deadline + Duration::from_secs(10))
        .build()
        .context("building the HTTP client")?;
    let mut request = client
        .post(&url)
        .header(reqwest::header::ACCEPT, super::rest::ARROW_STREAM)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if !config.rest.token.is_empty() {
        request = request.bearer_auth(&config.rest.token);
    }
    // A spinner on a terminal while the server waits for tiering and runs the query.
    let progress = waiting(&options);
    let response = match request.send().await {
        Err(e) if e.is_connect() => {
            progress.finish();
            return run_offline(config, &options, &base, &e).await;
        }
        other => other,
    };
    let response = response.map_err(|e| {
        if e.is_timeout() {
            anyhow::Error::new(DeadlinePassed(format!(
                "no answer from {base} within the deadline ({:?}) plus 10 s",
                options.deadline
            )))
        } else {
            anyhow!("query request to {url} failed: {e}")
        }
    })?;
    let status = response.status();
    let bytes = response.bytes().await;
    progress.finish();
    let bytes = bytes.with_context(|| format!("reading the answer of {url}"))?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        if status == reqwest::StatusCode::GATEWAY_TIMEOUT {
            return Err(anyhow::Error::new(DeadlinePassed(message)));
        }
        if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            return Err(anyhow::Error::new(Busy(message)));
        }
        return Err(anyhow!("{message}"));
    }
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .context("the server's answer is not an Arrow IPC stream")?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<RecordBatch>, _>>()
        .context("reading the server's Arrow IPC stream")?;
    print_result(&schema, &batches, options.format)
}

/// What the spinner says while the query runs.
fn waiting(options: &SqlOptions) -> crate::progress::Progress {
    let progress = crate::progress::Progress::spinner();
    progress.set_message(if options.wait_for_tiering {
        format!(
            "waiting for tiering, then the query (deadline {:?})",
            options.deadline
        )
    } else {
        format!("running the query (deadline {:?})", options.deadline)
    });
    progress
}

fn print_result(
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    format: OutputFormat,
) -> Result<()> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut out = std::io::stdout().lock();
    print_batches(&mut out, schema, batches, format)?;
    out.flush()?;
    eprintln!("{rows} row{}", if rows == 1 { "" } else { "s" });
    Ok(())
}

/// No server answers: read the lake under the data directory directly, which serves
/// `$lake` and `$lake$snapshots`; what needs the hot store fails naming `silt up`.
async fn run_offline(
    config: &Config,
    options: &SqlOptions,
    base: &str,
    connect_error: &reqwest::Error,
) -> Result<()> {
    use super::{QueryError, QueryRequest, QueryService};
    let service = QueryService::offline(config.query(""));
    let request = QueryRequest {
        sql: options.sql.clone(),
        deadline: options.deadline,
        wait_for_tiering: options.wait_for_tiering,
    };
    match service.execute(request).await {
        Ok(result) => {
            eprintln!(
                "note: no server at {base}; read the lake under {} directly",
                config.lake_root()
            );
            print_result(&result.schema, &result.batches, options.format)
        }
        Err(QueryError::DeadlinePassed { deadline, progress }) => Err(anyhow::Error::new(
            DeadlinePassed(format!("deadline of {deadline:?} passed {progress}")),
        )),
        Err(e @ QueryError::Busy { .. }) => Err(anyhow::Error::new(Busy(e.to_string()))),
        Err(QueryError::User(m)) if m.contains(silt_connectors::lake::OFFLINE_HINT) => {
            Err(anyhow!(
                "cannot reach silt at {base} ({connect_error}); start the server with `silt up`, or point --url (or rest.listen) at it; without a server only db.t$lake and db.t$lake$snapshots can be read ({m})"
            ))
        }
        Err(e) => Err(anyhow!("{e} (no server at {base}: read the lake directly)")),
    }
}

/// Writes `batches` in `format`.
pub fn print_batches(
    out: &mut dyn std::io::Write,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    format: OutputFormat,
) -> Result<()> {
    match format {
        OutputFormat::Table => {
            if batches.is_empty() {
                let empty = RecordBatch::new_empty(schema.clone());
                writeln!(
                    out,
                    "{}",
                    arrow::util::pretty::pretty_format_batches(&[empty])?
                )?;
            } else {
                writeln!(
                    out,
                    "{}",
                    arrow::util::pretty::pretty_format_batches(batches)?
                )?;
            }
        }
        OutputFormat::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut *out);
            if batches.is_empty() {
                writer.write(&RecordBatch::new_empty(schema.clone()))?;
            }
            for batch in batches {
                writer.write(batch)?;
            }
        }
        OutputFormat::Json => {
            let mut writer = arrow::json::ArrayWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
            drop(writer);
            if batches.iter().all(|b| b.num_rows() == 0) {
                write!(out, "[]")?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}
