//! Job definitions (JSON): named operators from a registry plus the edges between them, each
//! with its config and parallelism. This module owns the serde types, checks a definition
//! against the catalog (every error names its path and the fix), and converts it by hand into
//! an engine [`JobGraph`]. The JSON Schema of this format is `conf/job-definition.schema.json`.
//!
//! Registry: `fluss-source`, `filter`, `project`, `sql`, `delta-sink`, `fluss-sink`,
//! `print-sink` (see [`OPERATOR_TYPES`]).
//!
//! Edges default to a chain of the operators in order. An edge's `partitioning` defaults to
//! `auto`: forward between equal parallelisms, else hash on `__bucket`, which keeps every source
//! bucket's changes in order on one subtask. Order-sensitive sinks (delta, upsert into fluss)
//! refuse rebalance and broadcast edges upstream of them.
//!
//! Transforms see change rows: over a primary-key table's changelog a filter keeps or drops
//! each `+I`, `-U`, `+U`, `-D` on its own, so a key whose new image stops matching keeps its
//! old image in an upsert sink (Flink behaves the same).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use silt_connectors::changelog::{BUCKET_COLUMN, BucketKey, stream_system_fields};
use silt_connectors::delta::{DeltaSinkConfig, TableKind, add_delta_sink, read_lake_offsets};
use silt_connectors::fluss::{
    FlussSink, FlussSinkConfig, FlussSinkMode, FlussSource, FlussSourceConfig, LakeStart,
    StartPosition,
};
use silt_connectors::transform::{PrintSink, PrintSinkConfig, Transform, TransformOperator};
use silt_engine::graph::PARALLELISM_MAX;
use silt_engine::{JobGraph, Partitioning, Source, TaskContext, VertexId};

use crate::job::topology::{Topology, TopologyOperator};

/// The operator types a definition may name.
mod catalog;
mod compile;
mod context;
mod validate;

pub use catalog::{Catalog, JsonPaths, PathNames, TableFacts};
pub use compile::{compile, lake_uri};
pub use context::JobServiceConfig;
pub use validate::CompiledJob;
use validate::*;

pub const OPERATOR_TYPES: &[&str] = &[
    "fluss-source",
    "filter",
    "project",
    "sql",
    "delta-sink",
    "fluss-sink",
    "print-sink",
];

const NAME_CHARS: &str = "letters, digits, '_' and '-'";
const NAME_LEN_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDefinition {
    pub name: String,
    /// Default parallelism of operators that do not set their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointDef>,
    pub operators: Vec<OperatorDef>,
    /// Absent: the operators form a chain in the order given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<EdgeDef>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointDef {
    /// Periodic checkpoint interval; absent: `engine.checkpoint_interval_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorDef {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    #[serde(default)]
    pub config: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeDef {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub partitioning: PartitioningDef,
    /// Key columns of a `hash` edge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitioningDef {
    #[default]
    Auto,
    Forward,
    Hash,
    Rebalance,
    Broadcast,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartDef {
    #[default]
    Earliest,
    Latest,
    Timestamp,
    /// Where the lake (the table's tiering target) ends: its txn offsets per bucket.
    Lake,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlussSourceDef {
    /// `database.table`.
    pub table: String,
    #[serde(default)]
    pub start: StartDef,
    /// With `start: timestamp`: milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterDef {
    pub predicate: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectDef {
    pub expressions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlDef {
    pub statement: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkModeDef {
    Append,
    Upsert,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaSinkDef {
    /// Below `<lake.root>/__jobs/` (a local path or an object store URL, as `lake.root` is);
    /// absent: `<data_dir>/lake/__jobs/<job>/<sink>`. Anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub mode: SinkModeDef,
    /// Upsert keys; absent: the source table's primary key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// Refused when not empty: the sink uses `lake.storage_options` (kept so an old definition
    /// gets an error that says so rather than "unknown field").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage_options: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_file_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlussSinkDef {
    /// `database.table` of an existing silt table.
    pub table: String,
    /// Absent: upsert into a primary-key table, append into a log table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SinkModeDef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrintSinkDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_per_batch_max: Option<usize>,
    #[serde(default)]
    pub system_columns: bool,
}

/// One problem in a definition: where (`operators[2].config.table`) and what, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ValidationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found, in definition order.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl ValidationErrors {
    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationErrors(vec![ValidationError {
            path: path.into(),
            message: message.into(),
        }])
    }
}

/// A serde error at `path` (serde_path_to_error's spelling, `.` for the top) under `base`.
/// A missing field is reported at the field itself, the place the fix goes.
pub fn serde_error(base: &str, path: &str, message: String) -> ValidationError {
    let mut parts: Vec<String> = Vec::new();
    if !base.is_empty() {
        parts.push(base.to_string());
    }
    if path != "." && !path.is_empty() {
        parts.push(path.to_string());
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        parts.push(field.to_string());
    }
    ValidationError {
        path: parts.join("."),
        message,
    }
}

/// Parses a definition from JSON; a syntax or shape error names its path.
pub fn parse_json(text: &str) -> Result<JobDefinition, ValidationErrors> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        ValidationErrors(vec![serde_error(
            "",
            &e.path().to_string(),
            e.inner().to_string(),
        )])
    })
}

/// Deserializes one operator's config, naming the failing field under `base`.
fn parse_config<T: DeserializeOwned>(
    value: &serde_json::Value,
    base: &Field<'_>,
) -> Result<T, ValidationError> {
    let value = if value.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        value.clone()
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = serde_error("config", &e.path().to_string(), e.inner().to_string());
        ValidationError {
            path: base.paths.operator(base.index, &inner.path),
            message: inner.message,
        }
    })
}

/// Names paths inside one operator's config.
struct Field<'a> {
    paths: &'a dyn PathNames,
    index: usize,
}

impl Field<'_> {
    /// `config` itself (`key` empty) or `config.<key>`.
    fn at(&self, key: &str) -> String {
        if key.is_empty() {
            self.paths.operator(self.index, "config")
        } else {
            self.paths.operator(self.index, &format!("config.{key}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the shape of a definition given as JSON; returns the first problem as
    /// `path: message`, or `ok` with the operator order.
    fn shape(json: &str) -> String {
        let def = parse_json(json).unwrap_or_else(|e| panic!("{e}"));
        let mut errors = Vec::new();
        match check_shape(&def, &JsonPaths, &mut errors) {
            Some(plan) if errors.is_empty() => format!("ok {:?}", plan.order),
            _ => errors[0].to_string(),
        }
    }

    fn job(operators: &str, edges: Option<&str>) -> String {
        let edges = edges.map_or(String::new(), |e| format!(", \"edges\": [{e}]"));
        shape(&format!(
            "{{\"name\": \"j\", \"operators\": [{operators}]{edges}}}"
        ))
    }

    const SRC: &str = r#"{"name": "s", "type": "fluss-source"}"#;
    const FILTER: &str = r#"{"name": "f", "type": "filter"}"#;
    const SINK: &str = r#"{"name": "p", "type": "print-sink"}"#;

    #[test]
    fn shapes_are_checked_with_paths() {
        let ops = format!("{SRC}, {FILTER}, {SINK}");
        assert_eq!(job(&ops, None), "ok [0, 1, 2]");
        let cases = [
            (
                job(&ops, Some(r#"{"from": "s", "to": "x"}"#)),
                "edges[0].to: unknown operator x (known: s, f, p)",
            ),
            (
                job(
                    &ops,
                    Some(
                        r#"{"from": "s", "to": "f"}, {"from": "f", "to": "p"}, {"from": "p", "to": "f"}"#,
                    ),
                ),
                "edges[2].from: p is a sink and has no output (end the edge chain there)",
            ),
            (
                job(
                    &ops,
                    Some(r#"{"from": "f", "to": "s"}, {"from": "s", "to": "p"}"#),
                ),
                "edges[0].to: s is a source and takes no input",
            ),
            (
                job(&ops, Some(r#"{"from": "s", "to": "p"}"#)),
                "operators[1]: f has no input edge (add an edge from a source or an operator)",
            ),
            (
                job(
                    &ops,
                    Some(
                        r#"{"from": "s", "to": "f", "partitioning": "hash"}, {"from": "f", "to": "p"}"#,
                    ),
                ),
                "edges[0].key: a hash edge needs key columns (e.g. [\"id\"])",
            ),
            (
                job(
                    &format!(r#"{SRC}, {FILTER}, {{"name": "g", "type": "filter"}}, {SINK}"#),
                    Some(
                        r#"{"from": "s", "to": "f"}, {"from": "f", "to": "g"}, {"from": "g", "to": "f"}, {"from": "g", "to": "p"}"#,
                    ),
                ),
                "edges: the edges form a cycle through f (dataflows must be acyclic)",
            ),
            (
                job(&format!("{SRC}, {SRC}"), None),
                "operators[1].name: \"s\" is already the name of operators[0] (names must be unique)",
            ),
            (
                job(r#"{"name": "a b", "type": "fluss-source"}"#, None),
                "operators[0].name: operator name \"a b\" must be 1 to 64 letters, digits, '_' and '-'",
            ),
            (
                job(
                    r#"{"name": "s", "type": "fluss-source", "parallelism": 0}"#,
                    None,
                ),
                "operators[0].parallelism: 0 is out of range (use 1 to 1024)",
            ),
            (
                shape(r#"{"name": "j", "operators": []}"#),
                "operators: a job needs at least one operator (start with a fluss-source)",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
