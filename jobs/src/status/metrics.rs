//! `GET /metrics`: Prometheus text format 0.0.4, per job and operator, per lake-enabled table
//! (tiering lag, commits, lake files) and per hot bucket (bytes, segments, log start,
//! retention held back by tiering).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::Status;
use crate::job::service::{JobStatus, OperatorStatus};
use crate::tiering::TableTieringStatus;

/// `GET /metrics`.
pub async fn metrics(State(state): State<Arc<Status>>) -> Response {
    let mut out = Exposition::default();
    job_metrics(&mut out, &state.jobs.list().await);
    // A tiering status that cannot be read is said at the end, as a comment.
    let tiering = state.tiering.status().await;
    tiering_metrics(&mut out, &tiering);
    if let Some(hot) = &state.hotstore {
        hot_metrics(&mut out, hot);
    }
    if let Err(e) = &tiering {
        out.comment(&format!(
            "tiering status unavailable: {}",
            label(&format!("{e:#}"))
        ));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out.text,
    )
        .into_response()
}

/// The exposition being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric family: its help and type lines, then `(labels, value)` samples.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<(String, String)>) {
        self.text
            .push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            self.text.push_str(&format!("{name}{{{labels}}} {value}\n"));
        }
    }

    fn comment(&mut self, text: &str) {
        self.text.push_str(&format!("# {text}\n"));
    }
}

/// Escapes a Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Per job: running, restarts, checkpoints, buffered bytes; per operator: rows, bytes and time
/// backpressured.
fn job_metrics(out: &mut Exposition, jobs: &[JobStatus]) {
    out.family(
        "silt_job_running",
        "gauge",
        "1 when the job is running.",
        jobs.iter()
            .map(|j| (job_labels(j), u8::from(j.state == "running").to_string()))
            .collect(),
    );
    out.family(
        "silt_job_restarts_total",
        "counter",
        "Restarts of the job since silt up started.",
        jobs.iter()
            .map(|j| (job_labels(j), j.restarts.to_string()))
            .collect(),
    );
    out.family(
        "silt_job_checkpoints_completed_total",
        "counter",
        "Checkpoints completed since silt up started.",
        jobs.iter()
            .map(|j| (job_labels(j), j.checkpoints_completed.to_string()))
            .collect(),
    );
    out.family(
        "silt_job_checkpoints_failed_total",
        "counter",
        "Checkpoints that failed since silt up started.",
        jobs.iter()
            .map(|j| (job_labels(j), j.checkpoints_failed.to_string()))
            .collect(),
    );
    out.family(
        "silt_job_buffered_bytes",
        "gauge",
        "Bytes buffered in the job's channels.",
        jobs.iter()
            .map(|j| (job_labels(j), j.buffered_bytes.to_string()))
            .collect(),
    );
    operator_metrics(out, jobs);
}

/// The labels of a job's samples: its id and name.
fn job_labels(j: &JobStatus) -> String {
    format!("job=\"{}\",name=\"{}\"", label(&j.id), label(&j.name))
}

/// Per operator of every job: rows, bytes and time backpressured.
fn operator_metrics(out: &mut Exposition, jobs: &[JobStatus]) {
    type Pick = fn(&OperatorStatus) -> u64;
    let operator_families: [(&str, &str, &str, Pick); 5] = [
        (
            "silt_operator_records_in_total",
            "counter",
            "Rows into the operator.",
            |o| o.records_in,
        ),
        (
            "silt_operator_records_out_total",
            "counter",
            "Rows out of the operator.",
            |o| o.records_out,
        ),
        (
            "silt_operator_bytes_in_total",
            "counter",
            "Arrow bytes into the operator.",
            |o| o.bytes_in,
        ),
        (
            "silt_operator_bytes_out_total",
            "counter",
            "Arrow bytes out of the operator.",
            |o| o.bytes_out,
        ),
        (
            "silt_operator_backpressured_ms_total",
            "counter",
            "Milliseconds the operator waited for room downstream.",
            |o| o.backpressured_ms,
        ),
    ];
    for (name, kind, help, pick) in operator_families {
        let mut samples = Vec::new();
        for j in jobs {
            for o in &j.operators {
                samples.push((
                    format!("{},operator=\"{}\"", job_labels(j), label(&o.name)),
                    pick(o).to_string(),
                ));
            }
        }
        out.family(name, kind, help, samples);
    }
}

type TablePick = fn(&TableTieringStatus) -> String;

/// (name, type, help, value) of each per-table family: tiering lag, lake commits and what
/// maintenance found.
const TIERING_FAMILIES: [(&str, &str, &str, TablePick); 11] = [
    (
        "silt_tiering_problem",
        "gauge",
        "1 when something keeps the table's tiering from keeping up (a gap, a job that cannot start, a lag past half a Fluss cluster's table.log.ttl; GET /v1/tables says what), else 0.",
        |t| u8::from(t.problem.is_some()).to_string(),
    ),
    (
        "silt_tiering_lag_offsets",
        "gauge",
        "Offsets in the hot store not yet in the lake, per table.",
        |t| t.lag_offsets.to_string(),
    ),
    (
        "silt_tiering_lag_seconds",
        "gauge",
        "Seconds the lake lags behind the hot store, per table.",
        |t| format!("{:.3}", t.lag_seconds),
    ),
    (
        "silt_tiering_commit_p99_seconds",
        "gauge",
        "99th percentile of the recent lake commits' durations, per table.",
        |t| format!("{:.3}", t.commits.recent_p99_ms as f64 / 1000.0),
    ),
    (
        "silt_tiering_commits_total",
        "counter",
        "Lake commits since the table's tiering job started.",
        |t| t.commits.commits.to_string(),
    ),
    (
        "silt_lake_files_compacted_total",
        "counter",
        "Files lake commits compacted since the table's tiering job started.",
        |t| t.commits.files_compacted.to_string(),
    ),
    (
        "silt_lake_last_compaction_timestamp_seconds",
        "gauge",
        "When a lake commit last compacted files (0: not yet).",
        |t| (t.commits.last_compaction_ms / 1000).to_string(),
    ),
    (
        "silt_lake_active_files",
        "gauge",
        "Data files the lake's current version references, as of the last maintenance.",
        |t| t.maintenance.active_files.to_string(),
    ),
    (
        "silt_lake_files_on_disk",
        "gauge",
        "Data and deletion-vector files on storage, as of the last maintenance.",
        |t| t.maintenance.files_on_disk.to_string(),
    ),
    (
        "silt_lake_bytes_reclaimed_total",
        "counter",
        "Bytes lake maintenance deleted since the table's tiering job started.",
        |t| t.maintenance.bytes_reclaimed.to_string(),
    ),
    (
        "silt_lake_last_maintenance_timestamp_seconds",
        "gauge",
        "When lake maintenance last ran (0: not yet).",
        |t| (t.maintenance.last_ms / 1000).to_string(),
    ),
];

/// Per lake-enabled table: tiering lag, lake commits and what maintenance found.
fn tiering_metrics(out: &mut Exposition, status: &anyhow::Result<Vec<TableTieringStatus>>) {
    let Ok(tables) = status else {
        return;
    };
    let table_label =
        |t: &TableTieringStatus| format!("table=\"{}.{}\"", label(&t.database), label(&t.table));
    for (name, kind, help, pick) in TIERING_FAMILIES {
        out.family(
            name,
            kind,
            help,
            tables.iter().map(|t| (table_label(t), pick(t))).collect(),
        );
    }
}

/// Per hot bucket: bytes, segments, log start, and whether tiering holds retention back.
fn hot_metrics(out: &mut Exposition, hot: &silt_hotstore::ServerHandle) {
    let buckets = hot.hot_retention();
    let bucket_label = |b: &silt_hotstore::BucketRetention| match &b.partition {
        Some((_, partition)) => format!(
            "table=\"{}\",partition=\"{}\",bucket=\"{}\"",
            label(&b.table),
            label(partition),
            b.bucket
        ),
        None => format!("table=\"{}\",bucket=\"{}\"", label(&b.table), b.bucket),
    };
    type Pick = fn(&silt_hotstore::BucketRetention) -> String;
    let hot_families: [(&str, &str, Pick); 4] = [
        (
            "silt_hot_bytes",
            "Bytes of the bucket's log on disk, as of the last retention check.",
            |b| b.hot_bytes.to_string(),
        ),
        (
            "silt_hot_segments",
            "Log segments of the bucket, as of the last retention check.",
            |b| b.segments.to_string(),
        ),
        (
            "silt_hot_log_start_offset",
            "The bucket's log start offset (hot retention moves it).",
            |b| b.log_start_offset.to_string(),
        ),
        (
            "silt_hot_retention_held_by_tiering",
            "1 when the TTL would delete more of the bucket but the lake has not covered it.",
            |b| u8::from(b.held_by_tiering).to_string(),
        ),
    ];
    for (name, help, pick) in hot_families {
        out.family(
            name,
            "gauge",
            help,
            buckets.iter().map(|b| (bucket_label(b), pick(b))).collect(),
        );
    }
}
