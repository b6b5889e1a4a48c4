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
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use silt_connectors::changelog::{BUCKET_COLUMN, stream_system_fields};
use silt_connectors::delta::{DeltaSinkConfig, TableKind, add_delta_sink, read_lake_offsets};
use silt_connectors::fluss::{
    FlussSink, FlussSinkConfig, FlussSinkMode, FlussSource, FlussSourceConfig, LakeStart,
    StartPosition,
};
use silt_connectors::transform::{PrintSink, PrintSinkConfig, Transform, TransformOperator};
use silt_engine::graph::PARALLELISM_MAX;
use silt_engine::{JobGraph, Operator, Partitioning, Source, TaskContext, VertexId};

/// The operator types a definition may name.
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
    /// Below `<lake.root>/_jobs/` (a local path or an object store URL, as `lake.root` is);
    /// absent: `<data_dir>/lake/_jobs/<job>/<sink>`. Anything else is refused.
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

/// What a compiled job needs from outside: the hot store and the data directory.
#[derive(Debug, Clone)]
pub struct CompileContext {
    pub bootstrap: String,
    /// SASL/PLAIN credentials for the hot store, when it requires them.
    pub credentials: Option<silt_connectors::fluss::FlussCredentials>,
    pub data_dir: PathBuf,
    /// Where the tiering service keeps lake tables.
    pub lake_root: String,
    pub lake_storage_options: std::collections::HashMap<String, String>,
    /// Used when the definition sets no interval.
    pub checkpoint_interval_default: Duration,
}

/// One table as the catalog describes it.
#[derive(Debug, Clone)]
pub struct TableFacts {
    pub database: String,
    pub table: String,
    pub table_id: i64,
    pub buckets: u32,
    pub primary_key: Vec<String>,
    /// The user columns.
    pub schema: SchemaRef,
    /// `table.datalake.enabled`: its history may be in the lake only (hot retention).
    pub lake_enabled: bool,
}

/// Table lookups through the Fluss client, cached for one compilation.
pub struct Catalog {
    connection: Option<fluss::client::FlussConnection>,
    bootstrap: String,
    credentials: Option<silt_connectors::fluss::FlussCredentials>,
    known: Option<Vec<String>>,
}

impl Catalog {
    pub fn new(
        bootstrap: &str,
        credentials: Option<silt_connectors::fluss::FlussCredentials>,
    ) -> Self {
        Catalog {
            connection: None,
            bootstrap: bootstrap.to_string(),
            credentials,
            known: None,
        }
    }

    async fn connection(&mut self) -> Result<&fluss::client::FlussConnection, String> {
        if self.connection.is_none() {
            let c =
                silt_connectors::fluss::connect_with(&self.bootstrap, self.credentials.as_ref())
                    .await
                    .map_err(|e| format!("{e} (is silt up running?)"))?;
            self.connection = Some(c);
        }
        Ok(self.connection.as_ref().expect("set above"))
    }

    async fn known_tables(&mut self) -> Result<Vec<String>, String> {
        if let Some(known) = &self.known {
            return Ok(known.clone());
        }
        let admin = self
            .connection()
            .await?
            .get_admin()
            .map_err(|e| e.to_string())?;
        let mut known = Vec::new();
        for db in admin.list_databases().await.map_err(|e| e.to_string())? {
            for t in admin.list_tables(&db).await.map_err(|e| e.to_string())? {
                known.push(format!("{db}.{t}"));
            }
        }
        known.sort();
        self.known = Some(known.clone());
        Ok(known)
    }

    /// Looks up `database.table`; the error lists the tables that exist.
    pub async fn table(&mut self, qualified: &str) -> Result<TableFacts, String> {
        let Some((database, table)) = qualified.split_once('.') else {
            return Err(format!(
                "{qualified:?} is not a table name like database.table"
            ));
        };
        let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
        let connection = self.connection().await?;
        let admin = connection.get_admin().map_err(|e| e.to_string())?;
        let info = match admin.get_table_info(&path).await {
            Ok(info) => info,
            Err(_) => {
                let known = self.known_tables().await?;
                let shown: Vec<&str> = known.iter().take(20).map(String::as_str).collect();
                let more = if known.len() > shown.len() {
                    format!(", and {} more", known.len() - shown.len())
                } else {
                    String::new()
                };
                return Err(format!(
                    "unknown table {qualified} (known: {}{more})",
                    if shown.is_empty() {
                        "none; create it first".to_string()
                    } else {
                        shown.join(", ")
                    }
                ));
            }
        };
        let schema = silt_connectors::fluss::table_arrow_schema(connection, database, table)
            .await
            .map_err(|e| e.to_string())?;
        Ok(TableFacts {
            database: database.to_string(),
            table: table.to_string(),
            table_id: info.get_table_id(),
            buckets: info.get_num_buckets().max(1) as u32,
            primary_key: info.get_primary_keys().clone(),
            schema,
            lake_enabled: info
                .get_properties()
                .get(crate::tiering::DATALAKE_ENABLED)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        })
    }
}

/// How a problem's path is spelled: the definition's own (`operators[2].config.table`), or the
/// YAML pipeline it was compiled from (`source.table`).
pub trait PathNames: Send + Sync {
    /// `field` is `""` for the operator itself, `type`, `parallelism` or `config.<key>`.
    fn operator(&self, index: usize, field: &str) -> String;
    fn edge(&self, index: usize, field: &str) -> String;
    /// A top-level field: `name`, `parallelism`, `checkpoint.interval_ms`.
    fn job(&self, field: &str) -> String {
        field.to_string()
    }
}

/// The definition's own paths.
pub struct JsonPaths;

impl PathNames for JsonPaths {
    fn operator(&self, index: usize, field: &str) -> String {
        if field.is_empty() {
            format!("operators[{index}]")
        } else {
            format!("operators[{index}].{field}")
        }
    }
    fn edge(&self, index: usize, field: &str) -> String {
        if field.is_empty() {
            format!("edges[{index}]")
        } else {
            format!("edges[{index}].{field}")
        }
    }
}

/// A definition turned into an engine graph, with a description of each step.
pub struct CompiledJob {
    pub definition: JobDefinition,
    pub graph: JobGraph,
    pub checkpoint_interval: Duration,
    /// Human-readable lines: operators with their parallelism and output columns, then edges.
    pub summary: Vec<String>,
}

/// What the checks found out about one operator.
enum Resolved {
    Source {
        config: FlussSourceConfig,
        facts: TableFacts,
    },
    Transform(Arc<Transform>),
    Delta(Box<DeltaSinkConfig>),
    Fluss(FlussSinkConfig),
    Print(PrintSinkConfig),
}

struct Plan {
    edges: Vec<EdgeDef>,
    /// Operator indexes in an order where every edge goes forward.
    order: Vec<usize>,
}

fn is_sink(kind: &str) -> bool {
    kind.ends_with("-sink")
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks the shape: names, types, parallelisms, edges, acyclicity.
fn check_shape(
    def: &JobDefinition,
    paths: &dyn PathNames,
    errors: &mut Vec<ValidationError>,
) -> Option<Plan> {
    let mut push = |path: String, message: String| errors.push(ValidationError { path, message });
    if !valid_name(&def.name) {
        push(
            paths.job("name"),
            format!(
                "job name {:?} must be 1 to {NAME_LEN_MAX} {NAME_CHARS}",
                def.name
            ),
        );
    }
    if let Some(p) = def.parallelism
        && !(1..=PARALLELISM_MAX).contains(&p)
    {
        push(
            paths.job("parallelism"),
            format!("{p} is out of range (use 1 to {PARALLELISM_MAX})"),
        );
    }
    if def.checkpoint.as_ref().and_then(|c| c.interval_ms) == Some(0) {
        push(
            paths.job("checkpoint.interval_ms"),
            "must be at least 1 (milliseconds)".into(),
        );
    }
    if def.operators.is_empty() {
        push(
            "operators".into(),
            "a job needs at least one operator (start with a fluss-source)".into(),
        );
        return None;
    }
    let mut index = BTreeMap::new();
    for (i, op) in def.operators.iter().enumerate() {
        if !valid_name(&op.name) {
            push(
                paths.operator(i, "name"),
                format!(
                    "operator name {:?} must be 1 to {NAME_LEN_MAX} {NAME_CHARS}",
                    op.name
                ),
            );
        } else if let Some(first) = index.insert(op.name.as_str(), i) {
            push(
                paths.operator(i, "name"),
                format!(
                    "{:?} is already the name of operators[{first}] (names must be unique)",
                    op.name
                ),
            );
        }
        if !OPERATOR_TYPES.contains(&op.kind.as_str()) {
            push(
                paths.operator(i, "type"),
                format!(
                    "unknown operator type {} (known: {})",
                    op.kind,
                    OPERATOR_TYPES.join(", ")
                ),
            );
        }
        if let Some(p) = op.parallelism
            && !(1..=PARALLELISM_MAX).contains(&p)
        {
            push(
                paths.operator(i, "parallelism"),
                format!("{p} is out of range (use 1 to {PARALLELISM_MAX})"),
            );
        }
    }
    let edges = match &def.edges {
        Some(edges) => edges.clone(),
        None => def
            .operators
            .windows(2)
            .map(|w| EdgeDef {
                from: w[0].name.clone(),
                to: w[1].name.clone(),
                partitioning: PartitioningDef::Auto,
                key: Vec::new(),
            })
            .collect(),
    };
    let mut bad_edges = false;
    let mut inputs = vec![0usize; def.operators.len()];
    for (e, edge) in edges.iter().enumerate() {
        let known = || {
            def.operators
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let from = index.get(edge.from.as_str()).copied();
        let to = index.get(edge.to.as_str()).copied();
        if from.is_none() {
            push(
                paths.edge(e, "from"),
                format!("unknown operator {} (known: {})", edge.from, known()),
            );
        }
        if to.is_none() {
            push(
                paths.edge(e, "to"),
                format!("unknown operator {} (known: {})", edge.to, known()),
            );
        }
        let (Some(from), Some(to)) = (from, to) else {
            bad_edges = true;
            continue;
        };
        inputs[to] += 1;
        if def.operators[to].kind == "fluss-source" {
            push(
                paths.edge(e, "to"),
                format!("{} is a source and takes no input", edge.to),
            );
        }
        if is_sink(&def.operators[from].kind) {
            push(
                paths.edge(e, "from"),
                format!(
                    "{} is a sink and has no output (end the edge chain there)",
                    edge.from
                ),
            );
        }
        match (edge.partitioning, edge.key.is_empty()) {
            (PartitioningDef::Hash, true) => push(
                paths.edge(e, "key"),
                "a hash edge needs key columns (e.g. [\"id\"])".into(),
            ),
            (PartitioningDef::Hash, false) => {}
            (_, false) => push(
                paths.edge(e, "key"),
                "key is only used by hash edges (remove it or set partitioning: hash)".into(),
            ),
            _ => {}
        }
    }
    for (i, op) in def.operators.iter().enumerate() {
        let source = op.kind == "fluss-source";
        if !source && inputs[i] == 0 && !bad_edges {
            push(
                paths.operator(i, ""),
                format!(
                    "{} has no input edge (add an edge from a source or an operator)",
                    op.name
                ),
            );
        }
        if op.kind == "delta-sink" && inputs[i] > 1 {
            push(
                paths.operator(i, ""),
                format!(
                    "delta-sink {} has {} inputs; it takes one (its txn offsets are per source bucket)",
                    op.name, inputs[i]
                ),
            );
        }
    }
    if bad_edges {
        return None;
    }
    // Kahn's algorithm in definition order, so the order is stable.
    let mut indegree = inputs.clone();
    let mut ready: VecDeque<usize> = (0..indegree.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(indegree.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for edge in edges.iter().filter(|e| index[e.from.as_str()] == i) {
            let to = index[edge.to.as_str()];
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push_back(to);
            }
        }
    }
    if order.len() < def.operators.len() {
        let stuck = (0..indegree.len())
            .find(|&i| indegree[i] > 0)
            .unwrap_or_default();
        push(
            "edges".into(),
            format!(
                "the edges form a cycle through {} (dataflows must be acyclic)",
                def.operators[stuck].name
            ),
        );
        return None;
    }
    Some(Plan { edges, order })
}

fn index_of(def: &JobDefinition, name: &str) -> usize {
    def.operators
        .iter()
        .position(|o| o.name == name)
        .expect("edges were checked")
}

fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn user_schema(schema: &Schema) -> SchemaRef {
    let system: BTreeSet<String> = stream_system_fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| !system.contains(f.name()))
            .map(|f| f.as_ref().clone())
            .collect::<Vec<_>>(),
    ))
}

fn with_system_columns(user: &Schema) -> SchemaRef {
    let mut fields: Vec<_> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(stream_system_fields());
    Arc::new(Schema::new(fields))
}

/// Checks a definition against the catalog and builds its engine graph. All problems found are
/// returned together, each with its path.
pub async fn compile(
    def: &JobDefinition,
    ctx: &CompileContext,
    catalog: &mut Catalog,
    paths: &dyn PathNames,
) -> Result<CompiledJob, ValidationErrors> {
    let mut errors = Vec::new();
    let Some(plan) = check_shape(def, paths, &mut errors) else {
        return Err(ValidationErrors(errors));
    };
    let n = def.operators.len();
    let parallelism: Vec<u32> = def
        .operators
        .iter()
        .map(|o| o.parallelism.or(def.parallelism).unwrap_or(1))
        .collect();
    let inputs_of = |i: usize| -> Vec<(usize, usize)> {
        plan.edges
            .iter()
            .enumerate()
            .filter(|(_, e)| index_of(def, &e.to) == i)
            .map(|(k, e)| (k, index_of(def, &e.from)))
            .collect()
    };
    // The source that feeds each operator (when exactly one does).
    let mut feeding_source: Vec<Option<usize>> = vec![None; n];
    let mut schemas: Vec<Option<SchemaRef>> = vec![None; n];
    let mut resolved: Vec<Option<Resolved>> = (0..n).map(|_| None).collect();
    for &i in &plan.order {
        let op = &def.operators[i];
        let inputs = inputs_of(i);
        let mut sources: BTreeSet<usize> = BTreeSet::new();
        for (_, from) in &inputs {
            if let Some(s) = feeding_source[*from] {
                sources.insert(s);
            }
            if def.operators[*from].kind == "fluss-source" {
                sources.insert(*from);
            }
        }
        if sources.len() == 1 {
            feeding_source[i] = sources.iter().next().copied();
        }
        // Every input must carry the same columns (a union); unknown when an input failed.
        let mut input_schema: Option<SchemaRef> = None;
        let mut inputs_known = true;
        for (edge, from) in &inputs {
            match &schemas[*from] {
                Some(s) => match &input_schema {
                    None => input_schema = Some(s.clone()),
                    Some(first) if first.fields() != s.fields() => errors.push(ValidationError {
                        path: paths.edge(*edge, ""),
                        message: format!(
                            "{} delivers columns ({}) unlike the other inputs of {} ({}); project them alike",
                            def.operators[*from].name,
                            column_list(s),
                            op.name,
                            column_list(first)
                        ),
                    }),
                    Some(_) => {}
                },
                None => inputs_known = false,
            }
        }
        if !inputs_known && op.kind != "fluss-source" {
            continue;
        }
        let result = resolve(
            def,
            i,
            input_schema,
            feeding_source[i].and_then(|s| match &resolved[s] {
                Some(Resolved::Source { facts, .. }) => Some(facts.clone()),
                _ => None,
            }),
            ctx,
            catalog,
            &Field { paths, index: i },
        )
        .await;
        match result {
            Ok((r, schema)) => {
                schemas[i] = schema;
                resolved[i] = Some(r);
            }
            Err(e) => errors.push(e),
        }
    }
    check_order_sensitive_edges(def, &plan, &resolved, paths, &mut errors);
    if !errors.is_empty() {
        return Err(ValidationErrors(errors));
    }
    Ok(build(def, ctx, plan, parallelism, schemas, resolved))
}

/// Rebalance and broadcast edges reorder a bucket's changes; sinks that rely on that order
/// (delta, upsert into fluss) must not have one upstream.
fn check_order_sensitive_edges(
    def: &JobDefinition,
    plan: &Plan,
    resolved: &[Option<Resolved>],
    paths: &dyn PathNames,
    errors: &mut Vec<ValidationError>,
) {
    for (i, r) in resolved.iter().enumerate() {
        let sensitive = matches!(r, Some(Resolved::Delta(_)))
            || matches!(r, Some(Resolved::Fluss(c)) if c.mode == FlussSinkMode::Upsert);
        if !sensitive {
            continue;
        }
        let mut stack = vec![i];
        let mut seen = BTreeSet::new();
        while let Some(at) = stack.pop() {
            if !seen.insert(at) {
                continue;
            }
            for (k, edge) in plan.edges.iter().enumerate() {
                if index_of(def, &edge.to) != at {
                    continue;
                }
                if matches!(
                    edge.partitioning,
                    PartitioningDef::Rebalance | PartitioningDef::Broadcast
                ) {
                    errors.push(ValidationError {
                        path: paths.edge(k, "partitioning"),
                        message: format!(
                            "{:?} reorders each bucket's changes ahead of the order-sensitive sink {} (use auto, forward or hash)",
                            edge.partitioning, def.operators[i].name
                        )
                        .to_lowercase(),
                    });
                }
                stack.push(index_of(def, &edge.from));
            }
        }
    }
}

fn at(path: &str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Parses and checks one operator's config against its input; returns what to build and the
/// columns it outputs (`None` for sinks).
async fn resolve(
    def: &JobDefinition,
    i: usize,
    input: Option<SchemaRef>,
    source: Option<TableFacts>,
    ctx: &CompileContext,
    catalog: &mut Catalog,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let op = &def.operators[i];
    let input = || {
        input
            .clone()
            .ok_or_else(|| at(&base.at(""), "has no input"))
    };
    let transform_error =
        |field: &str, e: silt_connectors::transform::Error| at(&base.at(field), e.to_string());
    match op.kind.as_str() {
        "fluss-source" => {
            let c: FlussSourceDef = parse_config(&op.config, base)?;
            let facts = catalog
                .table(&c.table)
                .await
                .map_err(|m| at(&base.at("table"), m))?;
            let start = match (c.start, c.timestamp_ms) {
                // Every row of a lake-enabled table: hot retention may have left the oldest
                // only in the lake, so the lake first, then the changelog after it.
                (StartDef::Earliest, None) if facts.lake_enabled => {
                    StartPosition::LakeThenLog(LakeStart {
                        table_uri: lake_uri(ctx, &facts.database, &facts.table)
                            .map_err(|e| at(&base.at("table"), e.to_string()))?,
                        storage_options: ctx.lake_storage_options.clone(),
                        table_id: facts.table_id.to_string(),
                    })
                }
                (StartDef::Earliest, None) => StartPosition::Earliest,
                (StartDef::Latest, None) => StartPosition::Latest,
                (StartDef::Timestamp, Some(ms)) => StartPosition::Timestamp(ms),
                (StartDef::Timestamp, None) => {
                    return Err(at(
                        &base.at("timestamp_ms"),
                        "start: timestamp needs timestamp_ms (milliseconds since the epoch)",
                    ));
                }
                (StartDef::Lake, None) => {
                    let uri = lake_uri(ctx, &facts.database, &facts.table)
                        .map_err(|e| at(&base.at("table"), e.to_string()))?;
                    let lake = read_lake_offsets(
                        &uri,
                        &ctx.lake_storage_options,
                        &facts.table_id.to_string(),
                        facts.buckets,
                    )
                    .await
                    .map_err(|e| {
                        at(
                            &base.at("start"),
                            format!("reading the lake offsets at {uri}: {e}"),
                        )
                    })?;
                    StartPosition::Offsets(lake.map(|l| l.bucket_offsets).unwrap_or_default())
                }
                (_, Some(_)) => {
                    return Err(at(
                        &base.at("timestamp_ms"),
                        "timestamp_ms is only used with start: timestamp (remove it)",
                    ));
                }
            };
            let mut config =
                FlussSourceConfig::new(&ctx.bootstrap, facts.database.clone(), facts.table.clone());
            config.start = start;
            config.credentials = ctx.credentials.clone();
            let schema = with_system_columns(&facts.schema);
            Ok((Resolved::Source { config, facts }, Some(schema)))
        }
        "filter" => {
            let c: FilterDef = parse_config(&op.config, base)?;
            let t = Transform::filter(input()?, &c.predicate)
                .await
                .map_err(|e| transform_error("predicate", e))?;
            let schema = t.output_schema().clone();
            Ok((Resolved::Transform(Arc::new(t)), Some(schema)))
        }
        "project" => {
            let c: ProjectDef = parse_config(&op.config, base)?;
            if c.expressions.is_empty() {
                return Err(at(
                    &base.at("expressions"),
                    "needs at least one expression (e.g. [\"id\", \"amount * 2 AS doubled\"])",
                ));
            }
            // Each expression alone first, so an error names the one that is wrong.
            for (k, e) in c.expressions.iter().enumerate() {
                Transform::project(input()?, std::slice::from_ref(e))
                    .await
                    .map_err(|err| transform_error(&format!("expressions[{k}]"), err))?;
            }
            let t = Transform::project(input()?, &c.expressions)
                .await
                .map_err(|e| transform_error("expressions", e))?;
            let schema = t.output_schema().clone();
            Ok((Resolved::Transform(Arc::new(t)), Some(schema)))
        }
        "sql" => {
            let c: SqlDef = parse_config(&op.config, base)?;
            let t = Transform::sql(input()?, &c.statement)
                .await
                .map_err(|e| transform_error("statement", e))?;
            let schema = t.output_schema().clone();
            Ok((Resolved::Transform(Arc::new(t)), Some(schema)))
        }
        "delta-sink" => {
            let c: DeltaSinkDef = parse_config(&op.config, base)?;
            let schema = input()?;
            let Some(source) = source else {
                return Err(at(
                    &base.at(""),
                    "a delta-sink must be fed by exactly one fluss-source (its txn offsets are that source's buckets)",
                ));
            };
            for system in [
                silt_connectors::changelog::BUCKET_COLUMN,
                silt_connectors::changelog::OFFSET_COLUMN,
                silt_connectors::changelog::TIMESTAMP_COLUMN,
                silt_connectors::changelog::CHANGE_TYPE_COLUMN,
            ] {
                if schema.index_of(system).is_err() {
                    return Err(at(
                        &base.at(""),
                        format!(
                            "the input lacks the system column {system} (do not drop it upstream)"
                        ),
                    ));
                }
            }
            let user = user_schema(&schema);
            let kind = match c.mode {
                SinkModeDef::Append => {
                    if c.keys.is_some() {
                        return Err(at(
                            &base.at("keys"),
                            "keys are only used with mode: upsert (remove them)",
                        ));
                    }
                    TableKind::Log
                }
                SinkModeDef::Upsert => {
                    let keys = c.keys.clone().unwrap_or_else(|| source.primary_key.clone());
                    if keys.is_empty() {
                        return Err(at(
                            &base.at("keys"),
                            format!(
                                "mode: upsert needs key columns and {}.{} has no primary key (set keys, e.g. [\"id\"])",
                                source.database, source.table
                            ),
                        ));
                    }
                    for key in &keys {
                        if user.index_of(key).is_err() {
                            return Err(at(
                                &base.at("keys"),
                                format!(
                                    "key column {key} is not in the input (columns: {}); keep it in the projection",
                                    column_list(&user)
                                ),
                            ));
                        }
                    }
                    TableKind::PrimaryKey { key_columns: keys }
                }
            };
            // Definitions arrive over REST: an explicit path stays below the lake's job
            // directory, and the store is reached only with the lake's own options (options of
            // the definition could point the same URL at another endpoint).
            if !c.storage_options.is_empty() {
                return Err(at(
                    &base.at("storage_options"),
                    "a delta-sink reaches the lake with lake.storage_options from silt's config; remove storage_options here (set lake.storage_options instead)",
                ));
            }
            let (uri, storage_options) = match &c.path {
                Some(path) => (
                    crate::paths::confine_sink_path(path, &ctx.lake_root)
                        .map_err(|e| at(&base.at("path"), e.to_string()))?,
                    ctx.lake_storage_options.clone(),
                ),
                None => (
                    ctx.data_dir
                        .join("lake")
                        .join(crate::paths::JOBS_DIR)
                        .join(&def.name)
                        .join(&op.name)
                        .to_string_lossy()
                        .to_string(),
                    Default::default(),
                ),
            };
            let mut config =
                DeltaSinkConfig::new(uri, format!("{}.{}", def.name, op.name), kind, user);
            config.storage_options = storage_options;
            if let Some(bytes) = c.target_file_bytes {
                config.target_file_bytes = bytes;
            }
            config.key_index_dir = Some(
                ctx.data_dir
                    .join("key-index")
                    .join("_jobs")
                    .join(&def.name)
                    .join(&op.name),
            );
            config
                .validate()
                .map_err(|e| at(&base.at(""), e.to_string()))?;
            Ok((Resolved::Delta(Box::new(config)), None))
        }
        "fluss-sink" => {
            let c: FlussSinkDef = parse_config(&op.config, base)?;
            let schema = input()?;
            let facts = catalog
                .table(&c.table)
                .await
                .map_err(|m| at(&base.at("table"), m))?;
            let has_key = !facts.primary_key.is_empty();
            let mode = match (c.mode, has_key) {
                (None, true) | (Some(SinkModeDef::Upsert), true) => FlussSinkMode::Upsert,
                (None, false) | (Some(SinkModeDef::Append), false) => FlussSinkMode::Append,
                (Some(SinkModeDef::Append), true) => {
                    return Err(at(
                        &base.at("mode"),
                        format!("{} has a primary key: use mode upsert", c.table),
                    ));
                }
                (Some(SinkModeDef::Upsert), false) => {
                    return Err(at(
                        &base.at("mode"),
                        format!("{} is a log table: use mode append", c.table),
                    ));
                }
            };
            for field in facts.schema.fields() {
                match schema.field_with_name(field.name()) {
                    Err(_) => {
                        return Err(at(
                            &base.at("table"),
                            format!(
                                "column {} of {} is missing from the input (columns: {}); project it upstream",
                                field.name(),
                                c.table,
                                column_list(&user_schema(&schema))
                            ),
                        ));
                    }
                    Ok(have) if !same_encoding(have.data_type(), field.data_type()) => {
                        return Err(at(
                            &base.at("table"),
                            format!(
                                "column {} is {} in the input but {} in {} (cast it upstream, e.g. CAST(x AS ...))",
                                field.name(),
                                have.data_type(),
                                field.data_type(),
                                c.table
                            ),
                        ));
                    }
                    Ok(_) => {}
                }
            }
            let mut config =
                FlussSinkConfig::new(&ctx.bootstrap, facts.database, facts.table, mode);
            config.credentials = ctx.credentials.clone();
            Ok((Resolved::Fluss(config), None))
        }
        "print-sink" => {
            let c: PrintSinkDef = parse_config(&op.config, base)?;
            let mut config = PrintSinkConfig {
                system_columns: c.system_columns,
                ..PrintSinkConfig::default()
            };
            if let Some(rows) = c.rows_per_batch_max {
                config.rows_per_batch_max = rows;
            }
            Ok((Resolved::Print(config), None))
        }
        other => Err(at(&base.at(""), format!("unknown operator type {other}"))),
    }
}

/// Whether a column of type `have` can go into a column of type `want` without a lossy cast:
/// equal types, or the same values in another Arrow encoding (string, binary and list views).
fn same_encoding(have: &arrow::datatypes::DataType, want: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType::*;
    let family = |t: &arrow::datatypes::DataType| match t {
        Utf8 | LargeUtf8 | Utf8View => Some(0),
        Binary | LargeBinary | BinaryView => Some(1),
        _ => None,
    };
    have == want || family(have).is_some_and(|f| family(want) == Some(f))
}

/// Where the tiering service keeps the lake table of `database.table`.
pub fn lake_uri(ctx: &CompileContext, database: &str, table: &str) -> anyhow::Result<String> {
    crate::paths::lake_uri(&ctx.lake_root, database, table)
}

fn build(
    def: &JobDefinition,
    ctx: &CompileContext,
    plan: Plan,
    parallelism: Vec<u32>,
    schemas: Vec<Option<SchemaRef>>,
    mut resolved: Vec<Option<Resolved>>,
) -> CompiledJob {
    let mut graph = JobGraph::new();
    let mut vertex: Vec<Option<VertexId>> = vec![None; def.operators.len()];
    let mut summary = Vec::new();
    let edge_partitioning =
        |edge: &EdgeDef, from: usize, to: usize, into_delta: bool| match edge.partitioning {
            PartitioningDef::Auto if !into_delta && parallelism[from] == parallelism[to] => {
                Partitioning::Forward
            }
            PartitioningDef::Auto => Partitioning::Hash {
                key_columns: vec![BUCKET_COLUMN.to_string()],
            },
            PartitioningDef::Forward => Partitioning::Forward,
            PartitioningDef::Hash => Partitioning::Hash {
                key_columns: edge.key.clone(),
            },
            PartitioningDef::Rebalance => Partitioning::Rebalance,
            PartitioningDef::Broadcast => Partitioning::Broadcast,
        };
    for &i in &plan.order {
        let op = &def.operators[i];
        let p = parallelism[i];
        let inputs: Vec<(&EdgeDef, usize)> = plan
            .edges
            .iter()
            .filter(|e| e.to == op.name)
            .map(|e| (e, index_of(def, &e.from)))
            .collect();
        let describe = match resolved[i].take().expect("every operator resolved") {
            Resolved::Source { config, facts } => {
                let start = match &config.start {
                    StartPosition::Earliest => "earliest".to_string(),
                    StartPosition::Latest => "latest".to_string(),
                    StartPosition::Timestamp(ms) => format!("timestamp {ms}"),
                    StartPosition::Offsets(o) => format!("lake offsets {o:?}"),
                    StartPosition::LakeThenLog(lake) => {
                        format!(
                            "earliest: the lake at {}, then the changelog",
                            lake.table_uri
                        )
                    }
                };
                let config = Arc::new(config);
                vertex[i] = Some(graph.add_source(
                    op.name.clone(),
                    p,
                    move |_: &TaskContext| -> silt_engine::Result<Box<dyn Source>> {
                        Ok(Box::new(FlussSource::new((*config).clone())))
                    },
                ));
                format!(
                    "fluss-source {}.{} ({} buckets) from {start}",
                    facts.database, facts.table, facts.buckets
                )
            }
            Resolved::Transform(t) => {
                vertex[i] = Some(graph.add_operator(
                    op.name.clone(),
                    p,
                    TransformOperator::factory(t.clone()),
                ));
                format!("{} ({})", op.kind, op_text(op))
            }
            Resolved::Delta(config) => {
                let (edge, from) = inputs[0];
                let text = format!(
                    "delta-sink {} ({:?}) -> writers x{p} + committer x1",
                    config.table_uri, config.kind
                );
                let committer = add_delta_sink(
                    &mut graph,
                    &op.name,
                    vertex[from].expect("built in order"),
                    *config,
                    p,
                    edge_partitioning(edge, from, i, true),
                )
                .expect("validated in resolve");
                vertex[i] = Some(committer);
                summary.push(format!("  {:<24} x{p:<3} {text}", op.name));
                summary.push(format!(
                    "    {} -[{}]-> {}",
                    def.operators[from].name,
                    edge_partitioning(edge, from, i, true),
                    op.name
                ));
                continue;
            }
            Resolved::Fluss(config) => {
                let text = format!(
                    "fluss-sink {}.{} ({:?})",
                    config.database, config.table, config.mode
                );
                let config = Arc::new(config);
                vertex[i] = Some(graph.add_operator(
                    op.name.clone(),
                    p,
                    move |_: &TaskContext| -> silt_engine::Result<Box<dyn Operator>> {
                        Ok(Box::new(FlussSink::new((*config).clone())))
                    },
                ));
                text
            }
            Resolved::Print(config) => {
                vertex[i] = Some(graph.add_operator(
                    op.name.clone(),
                    p,
                    move |_: &TaskContext| -> silt_engine::Result<Box<dyn Operator>> {
                        Ok(Box::new(PrintSink::new(config.clone())))
                    },
                ));
                "print-sink (stdout of silt up)".to_string()
            }
        };
        let columns = schemas[i]
            .as_ref()
            .map(|s| format!(" -> [{}]", column_list(&user_schema(s))))
            .unwrap_or_default();
        summary.push(format!("  {:<24} x{p:<3} {describe}{columns}", op.name));
        for (edge, from) in inputs {
            let partitioning = edge_partitioning(edge, from, i, false);
            graph.connect(
                vertex[from].expect("built in order"),
                vertex[i].expect("just built"),
                partitioning.clone(),
            );
            summary.push(format!(
                "    {} -[{partitioning}]-> {}",
                def.operators[from].name, op.name
            ));
        }
    }
    let checkpoint_interval = def
        .checkpoint
        .as_ref()
        .and_then(|c| c.interval_ms)
        .map(Duration::from_millis)
        .unwrap_or(ctx.checkpoint_interval_default);
    summary.insert(
        0,
        format!(
            "job {} ({} operators, checkpoint every {checkpoint_interval:?})",
            def.name,
            def.operators.len()
        ),
    );
    CompiledJob {
        definition: def.clone(),
        graph,
        checkpoint_interval,
        summary,
    }
}

fn op_text(op: &OperatorDef) -> String {
    match &op.config {
        serde_json::Value::Object(map) => map
            .values()
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
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
