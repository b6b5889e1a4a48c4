//! `silt job submit|list|status|cancel|stop|validate`: the job commands, talking to the REST
//! API of a running `silt up` (address from `rest.listen` or `--rest`, bearer token from
//! `rest.token`).
//!
//! What each prints on stdout, for a script: `submit` the job id and a newline; `list` a table
//! of jobs; `status` the job's state, checkpoints and operators; `validate` the compiled graph
//! and `valid`; `stop` and `cancel` nothing (their sentence goes to stderr, with every other
//! note). With `--format json` each prints one JSON document instead: the job object of the REST
//! API (`list`: an array of them), or for `validate` `{"valid": bool, "graph": [...]}` or
//! `{"valid": false, "errors": [{"path", "message", "line"?, "column"?}]}`. A problem printed
//! as text is followed by the line of the file it is on, when that is known.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;

use super::client::{Client, Response};
use super::position::{Position, locate_all};
use super::service::JobStatus;
use super::{Format, parse_submission};
use crate::config::Config;
use crate::output::{self, print_json};

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a job definition (JSON) or a YAML pipeline; prints the job id.
    Submit { file: PathBuf },
    /// List jobs.
    List,
    /// A job's state, checkpoints and per-operator metrics.
    Status { id: String },
    /// Cancel a job (no final checkpoint).
    Cancel { id: String },
    /// Stop a job with a final checkpoint.
    Stop { id: String },
    /// Check a definition or pipeline and print the compiled graph, or the errors.
    Validate { file: PathBuf },
}

/// The REST base URL: `--rest` when given, else `rest.listen` (a wildcard address is reached
/// on loopback).
pub fn rest_base(config: &Config, rest: Option<&str>) -> String {
    if let Some(rest) = rest {
        return rest.to_string();
    }
    let listen = config
        .rest
        .listen
        .replace("0.0.0.0", "127.0.0.1")
        .replace("[::]", "[::1]");
    format!("http://{listen}")
}

fn content_type(path: &Path, text: &str) -> &'static str {
    let by_name = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Some(Format::Json),
        Some("yaml" | "yml") => Some(Format::Yaml),
        _ => None,
    };
    match by_name.unwrap_or_else(|| Format::detect(None, text)) {
        Format::Json => "application/json",
        Format::Yaml => "application/yaml",
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Turns an error response into an error that prints every problem on its own line, with the
/// line of `text` (the submitted file) it is on when the server says which.
fn failure(response: &Response, text: Option<&str>) -> anyhow::Error {
    if let Ok(v) = response.json()
        && let Some(errors) = v["errors"].as_array()
    {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| {
                let position = match (e["line"].as_u64(), e["column"].as_u64()) {
                    (Some(line), Some(column)) => Some(Position {
                        line: u32::try_from(line).unwrap_or(u32::MAX),
                        column: u32::try_from(column).unwrap_or(u32::MAX),
                    }),
                    _ => None,
                };
                let path = e["path"].as_str().unwrap_or("");
                let message = e["message"].as_str().unwrap_or("");
                problem(path, message, position, text)
            })
            .collect();
        return invalid_job(&lines);
    }
    anyhow::anyhow!("HTTP {}: {}", response.status, response.error_message())
}

/// `invalid job (N problems):` and the problems.
fn invalid_job(problems_shown: &[String]) -> anyhow::Error {
    anyhow::anyhow!(
        "invalid job ({}):\n{}",
        problems(problems_shown.len()),
        problems_shown.join("\n")
    )
}

/// One problem: `  path: message`, then the line of `text` it is on with a caret under its
/// column, when both are known.
fn problem(path: &str, message: &str, position: Option<Position>, text: Option<&str>) -> String {
    let mut shown = if path.is_empty() {
        format!("  {message}")
    } else {
        format!("  {path}: {message}")
    };
    let line = position.zip(text).and_then(|(p, text)| {
        let line = text.lines().nth((p.line as usize).checked_sub(1)?)?;
        Some((p, line))
    });
    if let Some((p, line)) = line {
        let number = p.line.to_string();
        let pad = " ".repeat(number.len());
        let caret = " ".repeat((p.column as usize).saturating_sub(1));
        shown.push_str(&format!("\n    {number} | {line}\n    {pad} | {caret}^"));
    }
    shown
}

fn problems(n: usize) -> String {
    if n == 1 {
        "1 problem".into()
    } else {
        format!("{n} problems")
    }
}

fn desired(d: super::service::Desired) -> &'static str {
    match d {
        super::service::Desired::Running => "running",
        super::service::Desired::Stopped => "stopped",
        super::service::Desired::Cancelled => "cancelled",
    }
}

fn parse_status(response: &Response) -> Result<JobStatus> {
    serde_json::from_str(&response.body)
        .with_context(|| format!("unexpected response: {}", response.body))
}

/// The job object of a response with status `ok`; any other status is the error it carries.
fn job_of(response: &Response, ok: u16) -> Result<JobStatus> {
    if response.status != ok {
        return Err(failure(response, None));
    }
    parse_status(response)
}

pub async fn run(
    config: &Config,
    rest: Option<&str>,
    format: output::Format,
    command: JobCommand,
) -> Result<()> {
    let token = Some(config.rest.token.clone());
    let client = Client::new(&rest_base(config, rest), token)?;
    let json = format == output::Format::Json;
    match command {
        JobCommand::Validate { file } => validate(&client, &file, format).await,
        JobCommand::Submit { file } => submit(&client, &file, format).await,
        JobCommand::List => list(&client, format).await,
        JobCommand::Status { id } => {
            let status = job_of(&client.get(&format!("/v1/jobs/{id}")).await?, 200)?;
            if json {
                return print_json(&status);
            }
            print_status(&status);
            Ok(())
        }
        JobCommand::Cancel { id } => {
            let status = job_of(&client.delete(&format!("/v1/jobs/{id}")).await?, 200)?;
            if json {
                return print_json(&status);
            }
            eprintln!("cancelled job {id} ({})", status.state);
            Ok(())
        }
        JobCommand::Stop { id } => {
            let path = format!("/v1/jobs/{id}/stop");
            let response = client.post(&path, "application/json", b"").await?;
            let status = job_of(&response, 200)?;
            if json {
                return print_json(&status);
            }
            let last = status.checkpoints.last().map(|c| c.id);
            eprintln!(
                "stopped job {id} ({}) with final checkpoint {}",
                status.state,
                last.map_or("-".to_string(), |c| c.to_string())
            );
            Ok(())
        }
    }
}

/// `silt job submit`: the id alone on stdout (`id=$(silt job submit f.yaml)`), the compiled
/// graph and a sentence on stderr; or the job object with `--format json`.
async fn submit(client: &Client, file: &Path, format: output::Format) -> Result<()> {
    let text = read(file)?;
    let response = client
        .post("/v1/jobs", content_type(file, &text), text.as_bytes())
        .await?;
    if response.status != 201 {
        return Err(failure(&response, Some(&text)));
    }
    let status = parse_status(&response)?;
    if format == output::Format::Json {
        return print_json(&status);
    }
    for line in &status.graph {
        eprintln!("{line}");
    }
    eprintln!(
        "submitted job {} ({}, {}); follow it with `silt job status {}`",
        status.id, status.name, status.state, status.id
    );
    println!("{}", status.id);
    Ok(())
}

/// `silt job validate`: syntax and shape first, offline, so a typo is reported without a
/// server; then the server checks the tables and prints the graph.
async fn validate(client: &Client, file: &Path, format: output::Format) -> Result<()> {
    let json = format == output::Format::Json;
    let text = read(file)?;
    let ct = content_type(file, &text);
    let submission = if ct.contains("json") {
        Format::Json
    } else {
        Format::Yaml
    };
    if let Err(errors) = parse_submission(&text, submission) {
        let located = locate_all(&errors, &text, submission);
        if json {
            print_json(&json!({"valid": false, "errors": located}))?;
        }
        let lines: Vec<String> = located
            .iter()
            .map(|e| problem(&e.error.path, &e.error.message, e.position, Some(&text)))
            .collect();
        return Err(invalid_job(&lines));
    }
    let response = client
        .post("/v1/jobs/validate", ct, text.as_bytes())
        .await
        .context("the file parses; checking its tables needs the REST API")?;
    if response.status != 200 {
        if json {
            let errors = (response.json().ok())
                .and_then(|v| v.get("errors").cloned())
                .filter(serde_json::Value::is_array)
                .unwrap_or_else(|| json!([{"path": "", "message": response.error_message()}]));
            print_json(&json!({"valid": false, "errors": errors}))?;
        }
        return Err(failure(&response, Some(&text)));
    }
    let v = response.json()?;
    if json {
        return print_json(&json!({"valid": true, "graph": v["graph"]}));
    }
    for line in v["graph"].as_array().into_iter().flatten() {
        println!("{}", line.as_str().unwrap_or_default());
    }
    println!("valid");
    Ok(())
}

/// `silt job list`: one line per job, or the job objects with `--format json`.
async fn list(client: &Client, format: output::Format) -> Result<()> {
    let response = client.get("/v1/jobs").await?;
    if response.status != 200 {
        return Err(failure(&response, None));
    }
    let jobs: Vec<JobStatus> = serde_json::from_str(&response.body)
        .with_context(|| format!("unexpected response: {}", response.body))?;
    if format == output::Format::Json {
        return print_json(&jobs);
    }
    println!(
        "{:<36} {:<10} {:<10} {:>11} {:>8}",
        "ID", "STATE", "DESIRED", "CHECKPOINTS", "RESTARTS"
    );
    for j in jobs {
        println!(
            "{:<36} {:<10} {:<10} {:>11} {:>8}",
            j.id,
            j.state,
            desired(j.desired),
            j.checkpoints_completed,
            j.restarts
        );
    }
    Ok(())
}

fn print_status(s: &JobStatus) {
    println!("job {} ({})", s.id, s.name);
    println!(
        "state {} (desired {}), {} restarts",
        s.state,
        desired(s.desired),
        s.restarts
    );
    if let Some(f) = &s.failure {
        println!("failure: {f}");
    }
    println!(
        "checkpoints: {} completed, {} failed, every {} ms",
        s.checkpoints_completed, s.checkpoints_failed, s.checkpoint_interval_ms
    );
    for c in &s.checkpoints {
        println!(
            "  #{:<6} {:>8} bytes {:>6} ms{}",
            c.id,
            c.size_bytes,
            c.duration_ms,
            if c.is_final { " (final)" } else { "" }
        );
    }
    println!(
        "{:<28} {:>4} {:>12} {:>12} {:>10}",
        "OPERATOR", "PAR", "RECORDS IN", "RECORDS OUT", "BACKPR ms"
    );
    for o in &s.operators {
        println!(
            "{:<28} {:>4} {:>12} {:>12} {:>10}",
            o.name, o.parallelism, o.records_in, o.records_out, o.backpressured_ms
        );
    }
}
