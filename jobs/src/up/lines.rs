//! What `silt up` prints on stdout while it runs. For a person (`--status-format text`): the
//! addresses it listens on, then every few seconds one line per lake-enabled table; its log
//! goes to a file (see [`crate::logging`]), so nothing scrolls these lines away. For a script
//! (`--status-format json`): one JSON object per line, each with an `event`:
//!
//! - `started`: `hot_tier` (`embedded`, or `external` under `--bootstrap`), `hotstore` (its
//!   host:port, or the cluster's bootstrap list), `rest` and `flight` (URLs; `flight` null when
//!   off), `data_dir`, `lake_root`, `log_file`, `jobs_resumed`;
//! - `status`, every `--status-every-s`: `time_ms` and `tables`, per lake-enabled table `table`,
//!   `job_state`, `hot_offsets` (sum of the buckets' high watermarks), `lake_offsets` (sum of
//!   the lake's offsets), `lag_offsets`, `lag_seconds`, `delta_version` (null before the first
//!   commit), `checkpoints` and `problem` (null, or what keeps tiering from keeping up: a
//!   gap, a table that cannot be tiered, a lag past half a Fluss cluster's TTL; `job_state`
//!   is `stalled` when its job cannot start); or `error` when the status could not be read;
//! - `stopping` at Ctrl-C (or `--run-for-s`), then `stopped` with `demo_rows_written` (null
//!   without `--demo`).

use serde::Serialize;
use serde_json::json;

use crate::output::{Format, print_json};
use crate::tiering::TableTieringStatus;

/// Prints `silt up`'s lines in one format.
#[derive(Debug, Clone, Copy)]
pub struct Lines {
    format: Format,
}

/// The `started` event: where everything listens and lives.
#[derive(Debug, Serialize)]
pub struct Started {
    /// `embedded` (this process's hot store) or `external` (a Fluss cluster).
    pub hot_tier: &'static str,
    pub hotstore: String,
    pub rest: String,
    pub flight: Option<String>,
    pub data_dir: String,
    pub lake_root: String,
    pub log_file: String,
    pub jobs_resumed: usize,
}

/// One table in a `status` event.
#[derive(Debug, Serialize, PartialEq)]
struct TableLine {
    table: String,
    job_state: String,
    hot_offsets: i64,
    lake_offsets: i64,
    lag_offsets: i64,
    lag_seconds: f64,
    delta_version: Option<u64>,
    checkpoints: usize,
    problem: Option<String>,
}

impl TableLine {
    fn of(t: &TableTieringStatus) -> TableLine {
        TableLine {
            table: format!("{}.{}", t.database, t.table),
            job_state: t.job_state.clone(),
            hot_offsets: t.buckets.values().map(|(hot, _)| hot).sum(),
            lake_offsets: t.buckets.values().map(|(_, lake)| lake).sum(),
            lag_offsets: t.lag_offsets,
            lag_seconds: t.lag_seconds,
            delta_version: t.delta_version,
            checkpoints: t.checkpoints,
            problem: t.problem.clone(),
        }
    }

    /// `demo.orders          job running    hot     3000 | lake     2360 | lag    640 offsets
    /// 13.3s | delta v2 | 2 checkpoints`, and a second line `  ! <problem>` when tiering has one.
    fn text(&self) -> String {
        let problem = self
            .problem
            .as_ref()
            .map_or(String::new(), |p| format!("\n  ! {p}"));
        format!("{}{problem}", self.columns())
    }

    fn columns(&self) -> String {
        format!(
            "{:<20} job {:<10} hot {:>8} | lake {:>8} | lag {:>6} offsets {:>5.1}s | delta v{} | {} checkpoints",
            self.table,
            self.job_state,
            self.hot_offsets,
            self.lake_offsets,
            self.lag_offsets,
            self.lag_seconds,
            self.delta_version
                .map_or("-".to_string(), |v| v.to_string()),
            self.checkpoints
        )
    }
}

impl Lines {
    pub fn new(format: Format) -> Lines {
        Lines { format }
    }

    /// A line for a person; nothing in JSON (the `started` event carries it).
    pub fn say(&self, line: impl std::fmt::Display) {
        if self.format == Format::Text {
            println!("{line}");
        }
    }

    /// Everything listens: the `started` event (text mode said it line by line).
    pub fn started(&self, started: &Started) {
        if self.format == Format::Json {
            let mut event = serde_json::to_value(started).unwrap_or_default();
            event["event"] = json!("started");
            emit(&event);
        }
    }

    /// The status of every lake-enabled table, or why it could not be read.
    pub fn status(&self, tables: anyhow::Result<Vec<TableTieringStatus>>, time_ms: i64) {
        let tables = tables.map(|tables| tables.iter().map(TableLine::of).collect::<Vec<_>>());
        match (self.format, tables) {
            (Format::Json, Ok(tables)) => {
                emit(&json!({"event": "status", "time_ms": time_ms, "tables": tables}));
            }
            (Format::Json, Err(e)) => emit(&json!({
                "event": "status", "time_ms": time_ms, "tables": [], "error": format!("{e:#}")
            })),
            (Format::Text, Ok(tables)) if tables.is_empty() => {
                println!("status: no lake-enabled tables yet");
            }
            (Format::Text, Ok(tables)) => tables.iter().for_each(|t| println!("{}", t.text())),
            (Format::Text, Err(e)) => println!("status unavailable: {e:#}"),
        }
    }

    pub fn stopping(&self) {
        match self.format {
            Format::Text => println!(
                "shutting down: stopping the workload and the tiering jobs (final checkpoints)"
            ),
            Format::Json => emit(&json!({"event": "stopping"})),
        }
    }

    /// Shut down; `demo_rows`: what the demo workload wrote, with `--demo`.
    pub fn stopped(&self, demo_rows: Option<u64>) {
        match (self.format, demo_rows) {
            (Format::Text, Some(rows)) => println!("demo workload wrote {rows} rows"),
            (Format::Text, None) => {}
            (Format::Json, rows) => emit(&json!({"event": "stopped", "demo_rows_written": rows})),
        }
    }
}

/// One line of JSON; a closed stdout (a script that stopped reading) is not silt's failure.
fn emit(event: &serde_json::Value) {
    let _ = print_json(event);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_line_sums_its_buckets() {
        let status = TableTieringStatus {
            database: "demo".into(),
            table: "orders".into(),
            table_id: 7,
            primary_key: Some(false),
            lake_uri: "file:///lake/demo/orders".into(),
            job_state: "running".into(),
            freshness: std::time::Duration::from_secs(5),
            buckets: [(0, (100, 80)), (1, (50, 50))]
                .into_iter()
                .map(|(b, offsets)| (silt_connectors::changelog::BucketKey::table(b), offsets))
                .collect(),
            lag_offsets: 20,
            lag_seconds: 13.3,
            delta_version: Some(3),
            lake_committed_ms: None,
            lake_size: None,
            checkpoints: 4,
            restarts: 0,
            maintenance: Default::default(),
            commits: Default::default(),
            problem: None,
        };
        let line = TableLine::of(&status);
        assert_eq!((line.hot_offsets, line.lake_offsets), (150, 130));
        assert_eq!(
            line.text(),
            "demo.orders          job running    hot      150 | lake      130 | lag     20 offsets  13.3s | delta v3 | 4 checkpoints"
        );
        let stalled = TableTieringStatus {
            job_state: crate::tiering::STALLED.into(),
            problem: Some("demo.orders: tiering stopped at a gap".into()),
            ..status
        };
        assert!(
            TableLine::of(&stalled)
                .text()
                .ends_with("checkpoints\n  ! demo.orders: tiering stopped at a gap"),
            "{}",
            TableLine::of(&stalled).text()
        );
    }
}
