//! The query service: read-only SQL over silt's tables (`db.t`, `db.t$lake`,
//! `db.t$lake$snapshots`, see `silt_connectors::lake`) under one wall-clock deadline.
//!
//! Contract:
//! - Read-only: one statement, a query (`SELECT`, `WITH`, `VALUES`) or an `EXPLAIN` of one.
//!   DML, DDL, `COPY`, `SET` and the like are refused as user errors before anything runs, and
//!   the plan is checked again (no DDL, DML or statements) before it executes.
//! - One deadline covers everything: resolving tables, waiting for tiering, reading the hot
//!   tail, planning and execution. The query runs on the query runtime's own threads
//!   ([`execution`]) and its caller waits on its own runtime, so the deadline error comes on
//!   time whatever the plan does; it says how far the query got ([`QueryProgress`]). The plan
//!   is cancelled with it: cancel points on every input of DataFusion's operators ([`cancel`])
//!   stop even a plan that never yields within a batch of work, and its driver is aborted.
//! - Every table is read at one point: without `wait_for_tiering` the lake version is pinned
//!   first and the hot high watermarks are captured after it; with it, the high watermarks are
//!   captured first and the query waits (polling, inside the deadline) until a lake version's
//!   txn offsets cover them, then reads that version.
//! - Bounded: results at most `result_bytes_max`, DataFusion's memory at most
//!   `memory_bytes_max`, hot tails at most `tail_bytes_max` per table.
//!
//! Entry points: [`QueryService::execute`] (collected result), [`QueryService::execute_stream`]
//! (batches as they come, the deadline checked on every poll) and [`QueryService::schema`]
//! (plan only). REST (`POST /v1/query`) is in [`rest`], the
//! `silt sql` client in [`client`].

mod admission;
mod cancel;
pub mod client;
mod execution;
pub mod flight;
pub mod rest;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemorySchemaProvider, TableProvider};
use datafusion::common::TableReference;
use datafusion::common::config::Dialect;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use futures::{Stream, StreamExt as _};
use silt_connectors::changelog::BucketKey;
use silt_connectors::lake::{
    self, BucketWait, LakeCatalog, LakeCatalogConfig, PinnedLake, QueryProgress, Stage, TableMeta,
    TableName, TableVariant,
};
use tracing::debug;

use admission::Admission;
use cancel::Cancel;
use execution::{Execution, Message, PlansRunning};

/// The service's settings (see the `query` section of conf/silt.yaml).
#[derive(Debug, Clone)]
pub struct QueryConfig {
    pub catalog: LakeCatalogConfig,
    /// How often a wait for tiering re-reads the lake's txn offsets.
    pub wait_poll_interval: Duration,
    /// Longest deadline a request may ask for.
    pub deadline_max: Duration,
    /// Largest result (Arrow bytes) a query may return.
    pub result_bytes_max: usize,
    /// DataFusion's memory pool per query.
    pub memory_bytes_max: usize,
    /// Queries running at once (at least 1).
    pub concurrent_max: usize,
    /// Queries waiting for a slot, each inside its deadline; one more is refused as busy.
    pub waiting_max: usize,
    /// Where queries plan and execute; `None`: the process's query runtime (`silt-query`
    /// threads, see [`execution`]). A test gives a runtime of its own to bound its pools.
    pub runtime: Option<tokio::runtime::Handle>,
}

impl QueryConfig {
    pub fn new(catalog: LakeCatalogConfig) -> Self {
        QueryConfig {
            catalog,
            wait_poll_interval: Duration::from_millis(200),
            deadline_max: Duration::from_secs(600),
            result_bytes_max: 256 * 1024 * 1024,
            memory_bytes_max: 1024 * 1024 * 1024,
            concurrent_max: 4,
            waiting_max: 32,
            runtime: None,
        }
    }
}

/// One query.
#[derive(Debug, Clone)]
pub struct QueryRequest {
    pub sql: String,
    /// Wall-clock budget from the call to the last batch.
    pub deadline: Duration,
    /// Wait, inside the deadline, until the lake covers the high watermarks captured at the
    /// start, and read that lake version.
    pub wait_for_tiering: bool,
}

impl QueryRequest {
    pub fn new(sql: impl Into<String>, deadline: Duration) -> Self {
        QueryRequest {
            sql: sql.into(),
            deadline,
            wait_for_tiering: false,
        }
    }
}

/// What a table read was pinned at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRead {
    /// As the query named it (`db.t`, `db.t$lake`, ...).
    pub name: String,
    /// The Delta version read, `None` when nothing was tiered yet.
    pub lake_version: Option<u64>,
    /// Per bucket (of each partition), the lake's txn end offset in that version.
    pub lake_offsets: BTreeMap<BucketKey, i64>,
    /// Per bucket, the hot high watermark the tail was read up to (real-time view) or waited
    /// for (wait for tiering); empty otherwise.
    pub high_watermarks: BTreeMap<BucketKey, i64>,
    /// Offsets of the hot tail read from the hot store for this query (real-time view); the
    /// rest of the tail was kept from an earlier query of the table (`query.kept_tails_bytes_max`).
    pub tail_offsets_read: i64,
}

/// A query's answer.
#[derive(Debug, Clone)]
pub struct QueryResult {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    pub tables: Vec<TableRead>,
    pub elapsed: Duration,
    /// Lake data files the query's scans read, of those they were planned over (after
    /// partition pruning: a query of one partition plans that partition's files only).
    pub lake_files_scanned: u64,
}

impl QueryResult {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// A running query's batches, under its deadline. Dropping it cancels the query.
pub struct QueryStream {
    /// The schema every batch carries.
    pub schema: SchemaRef,
    /// What each table was read at.
    pub tables: Vec<TableRead>,
    /// `None` once the stream ended.
    execution: Option<Execution>,
    deadline: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    progress: Arc<QueryProgress>,
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch, QueryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(execution) = self.execution.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = execution.poll_recv(cx);
        // The deadline runs on the caller's runtime, so it fires whatever the plan does.
        if self.sleep.as_mut().poll(cx).is_ready() {
            // Dropping the execution stops the plan at its next cancel point.
            self.execution = None;
            return Poll::Ready(Some(Err(QueryError::DeadlinePassed {
                deadline: self.deadline,
                progress: self.progress.describe(),
            })));
        }
        let Poll::Ready(message) = polled else {
            return Poll::Pending;
        };
        if let Some(Message::Batch(batch)) = message {
            self.progress.add_rows_returned(batch.num_rows() as u64);
            return Poll::Ready(Some(Ok(batch)));
        }
        self.execution = None;
        match message {
            Some(Message::End) => Poll::Ready(None),
            Some(Message::Failed(e)) => Poll::Ready(Some(Err(e))),
            _ => Poll::Ready(Some(Err(QueryError::Internal(
                "the query's execution ended without finishing its result (a bug)".into(),
            )))),
        }
    }
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The user can fix it: bad SQL, an unknown table, a write, a bound exceeded.
    #[error("{0}")]
    User(String),
    /// The deadline passed; the query was cancelled. `progress` says how far it got.
    #[error(
        "deadline of {deadline:?} passed {progress}; the query was cancelled (raise the deadline, or narrow the query)"
    )]
    DeadlinePassed {
        deadline: Duration,
        progress: String,
    },
    /// Every query slot is taken and as many queries wait for one as may: refused at once,
    /// before anything ran. The caller may retry.
    #[error(
        "silt is busy: query.concurrent_max ({running}) queries run and query.waiting_max ({waiting}) wait for a slot; retry shortly, or raise the bounds"
    )]
    Busy { running: usize, waiting: usize },
    /// Something underneath failed (the hot store, the lake, a bug).
    #[error("{0}")]
    Internal(String),
}

impl From<lake::Error> for QueryError {
    fn from(e: lake::Error) -> Self {
        if e.is_user_error() {
            QueryError::User(e.to_string())
        } else {
            QueryError::Internal(e.to_string())
        }
    }
}

impl From<datafusion::error::DataFusionError> for QueryError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as E;
        match e.find_root() {
            E::SQL(..) | E::Plan(_) | E::SchemaError(..) | E::NotImplemented(_) => {
                QueryError::User(lowercase_first(&e.strip_backtrace()))
            }
            // Errors of the data a query computes on (a bad cast, a division by zero).
            E::ArrowError(a, _)
                if matches!(
                    **a,
                    arrow::error::ArrowError::CastError(_)
                        | arrow::error::ArrowError::DivideByZero
                        | arrow::error::ArrowError::ArithmeticOverflow(_)
                        | arrow::error::ArrowError::ParseError(_)
                        | arrow::error::ArrowError::InvalidArgumentError(_)
                ) =>
            {
                QueryError::User(lowercase_first(&e.strip_backtrace()))
            }
            E::ResourcesExhausted(m) => QueryError::User(format!(
                "the query needs more memory than query.memory_bytes_max allows ({m}); narrow it or raise the bound"
            )),
            _ => QueryError::Internal(e.strip_backtrace()),
        }
    }
}

/// Lowercases the first letter of a message, unless it starts an acronym ("SQL error" stays).
fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), s.chars().nth(1)) {
        (Some(_), Some(second)) if second.is_uppercase() => s.to_string(),
        (Some(c), _) => c.to_lowercase().chain(chars).collect(),
        (None, _) => String::new(),
    }
}

#[cfg(test)]
mod message_tests {
    #[test]
    fn first_letters_are_lowercased_but_not_acronyms() {
        for (given, expected) in [
            ("Error during planning", "error during planning"),
            ("SQL error: ParserError", "SQL error: ParserError"),
            ("", ""),
            ("X", "x"),
        ] {
            assert_eq!(super::lowercase_first(given), expected);
        }
    }
}

/// Runs read-only SQL under a deadline. Cheap to clone; one client connection is shared and
/// reopened after an error.
#[derive(Clone)]
pub struct QueryService {
    config: Arc<QueryConfig>,
    catalog: Arc<tokio::sync::Mutex<Option<LakeCatalog>>>,
    offline: bool,
    running: PlansRunning,
    admission: Arc<Admission>,
}

impl QueryService {
    pub fn new(config: QueryConfig) -> Self {
        QueryService {
            admission: Arc::new(Admission::new(config.concurrent_max, config.waiting_max)),
            config: Arc::new(config),
            catalog: Arc::default(),
            offline: false,
            running: PlansRunning::default(),
        }
    }

    /// A service without a hot store: `$lake` and `$lake$snapshots` from the Delta tables
    /// under the lake root; the real-time view and waits for tiering are refused (their
    /// messages contain [`lake::OFFLINE_HINT`]).
    pub fn offline(config: QueryConfig) -> Self {
        QueryService {
            offline: true,
            ..QueryService::new(config)
        }
    }

    pub fn config(&self) -> &QueryConfig {
        &self.config
    }

    /// Queries whose plans still run on the query runtime, including those abandoned at their
    /// deadline until their plan reaches a cancel point.
    pub fn plans_running(&self) -> usize {
        self.running.count()
    }

    /// Runs `request` to completion or to its deadline and collects the result (at most
    /// `result_bytes_max`).
    pub async fn execute(&self, request: QueryRequest) -> Result<QueryResult, QueryError> {
        let started = Instant::now();
        let mut stream = self.execute_stream(request).await?;
        let (mut batches, mut bytes) = (Vec::new(), 0usize);
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            bytes += batch.get_array_memory_size();
            if bytes > self.config.result_bytes_max {
                return Err(QueryError::User(format!(
                    "the result is larger than {} bytes (query.result_bytes_max); add a LIMIT or aggregate",
                    self.config.result_bytes_max
                )));
            }
            batches.push(batch);
        }
        Ok(QueryResult {
            schema: stream.schema.clone(),
            batches,
            tables: stream.tables.clone(),
            elapsed: started.elapsed(),
            lake_files_scanned: stream.progress.files().1,
        })
    }

    /// Plans `request` and starts executing it on the query runtime; the batches come from the
    /// returned stream, which ends with [`QueryError::DeadlinePassed`] (and cancels the plan)
    /// once the request's deadline, counted from this call, passes. For streaming answers
    /// (Flight SQL): no bound on the result size beyond the deadline.
    pub async fn execute_stream(&self, request: QueryRequest) -> Result<QueryStream, QueryError> {
        self.check_deadline(request.deadline)?;
        let deadline_at = tokio::time::Instant::now() + request.deadline;
        let slot = self.admission.enter(deadline_at, request.deadline).await?;
        let progress = QueryProgress::new();
        let cancel = Cancel::new(deadline_at.into_std());
        let (deadline, opening) = (request.deadline, progress.clone());
        let mut execution = Execution::start(self.clone(), request, slot, opening, cancel)?;
        let result = match tokio::time::timeout_at(deadline_at, execution.recv()).await {
            Ok(Some(Message::Opened { schema, tables })) => Ok(QueryStream {
                schema,
                tables,
                execution: Some(execution),
                deadline,
                sleep: Box::pin(tokio::time::sleep_until(deadline_at)),
                progress,
            }),
            Ok(Some(Message::Failed(e))) => Err(e),
            Ok(_) => Err(QueryError::Internal(
                "the query's execution ended before it was planned (a bug)".into(),
            )),
            Err(_) => Err(QueryError::DeadlinePassed {
                deadline,
                progress: progress.describe(),
            }),
        };
        if matches!(result, Err(QueryError::Internal(_))) {
            // The connection may be what failed; the next query reconnects.
            *self.catalog.lock().await = None;
        }
        result
    }

    /// Plans `request` (tables resolved and pinned as for `execute`, on the query runtime) and
    /// returns the schema of its result without executing it, under the same deadline.
    pub async fn schema(&self, request: QueryRequest) -> Result<SchemaRef, QueryError> {
        self.check_deadline(request.deadline)?;
        let deadline_at = tokio::time::Instant::now() + request.deadline;
        let slot = self.admission.enter(deadline_at, request.deadline).await?;
        let progress = QueryProgress::new();
        let (service, planning, deadline) = (self.clone(), progress.clone(), request.deadline);
        let mut planned = execution::spawn(&self.config, async move {
            let _slot = slot;
            let (ctx, plan, _) = service.plan(&request, &planning).await?;
            drop(ctx);
            Ok::<_, QueryError>(Arc::new(plan.schema().as_arrow().clone()))
        })?;
        match tokio::time::timeout_at(deadline_at, &mut planned.0).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(QueryError::Internal(format!(
                "planning the query failed: {e} (a bug)"
            ))),
            Err(_) => Err(QueryError::DeadlinePassed {
                deadline,
                progress: progress.describe(),
            }),
        }
    }

    /// Every table as `db.t` (each also readable as `db.t$lake` and `db.t$lake$snapshots`),
    /// for catalog listings such as Flight SQL's GetTables.
    pub async fn tables(&self) -> Result<Vec<String>, QueryError> {
        let catalog = self.catalog().await?;
        match catalog.known_tables().await {
            Ok(tables) => Ok(tables),
            Err(e) => {
                *self.catalog.lock().await = None;
                Err(e.into())
            }
        }
    }

    fn check_deadline(&self, deadline: Duration) -> Result<(), QueryError> {
        if deadline.is_zero() || deadline > self.config.deadline_max {
            return Err(QueryError::User(format!(
                "deadline {deadline:?} is out of range: give one between 1ms and {:?} (query.deadline_max_ms)",
                self.config.deadline_max
            )));
        }
        Ok(())
    }

    async fn catalog(&self) -> Result<LakeCatalog, QueryError> {
        let mut slot = self.catalog.lock().await;
        if let Some(catalog) = slot.as_ref() {
            return Ok(catalog.clone());
        }
        if self.offline {
            return Ok(LakeCatalog::offline(self.config.catalog.clone()));
        }
        let catalog = LakeCatalog::connect(self.config.catalog.clone())
            .await
            .map_err(|e| QueryError::Internal(format!("cannot reach the hot store: {e}")))?;
        *slot = Some(catalog.clone());
        Ok(catalog)
    }

    /// Plans `request` and starts its plan, with cancel points that stop it at `cancel` (see
    /// [`cancel`]). Runs on the query runtime, where the plan's own tasks are spawned.
    async fn open(
        &self,
        request: &QueryRequest,
        progress: &Arc<QueryProgress>,
        cancel: &Arc<Cancel>,
    ) -> Result<(SendableRecordBatchStream, Vec<TableRead>), QueryError> {
        let (ctx, plan, tables) = self.plan(request, progress).await?;
        progress.set_stage(Stage::Executing);
        let frame = ctx.execute_logical_plan(plan).await?;
        let task = Arc::new(frame.task_ctx());
        let physical = frame.create_physical_plan().await?;
        let physical = cancel::insert_cancel_points(physical, cancel)?;
        // Counted on the plan that runs, after DataFusion split files into byte ranges, so
        // files done and files in all are counted in the same unit.
        progress.watch_file_scans(&physical)?;
        let stream = datafusion::physical_plan::execute_stream(physical, task)?;
        Ok((stream, tables))
    }

    /// Parses, checks, resolves and pins every table, and plans.
    async fn plan(
        &self,
        request: &QueryRequest,
        progress: &Arc<QueryProgress>,
    ) -> Result<(SessionContext, LogicalPlan, Vec<TableRead>), QueryError> {
        let ctx = self.session()?;
        let state = ctx.state();
        let statement = state
            .sql_to_statement(&request.sql, &Dialect::Generic)
            .map_err(|e| QueryError::User(lowercase_first(&e.strip_backtrace())))?;
        check_read_only(&statement, &request.sql)?;
        let mut names = BTreeSet::new();
        for reference in state.resolve_table_references(&statement)? {
            names.insert(table_name(&reference)?);
        }

        // A query of no table needs no hot store.
        let catalog = if names.is_empty() {
            LakeCatalog::offline(self.config.catalog.clone())
        } else {
            self.catalog().await?
        };
        let mut metas: BTreeMap<(String, String), TableMeta> = BTreeMap::new();
        for name in &names {
            let key = (name.database.clone(), name.table.clone());
            if let std::collections::btree_map::Entry::Vacant(slot) = metas.entry(key) {
                slot.insert(catalog.table(name).await?);
            }
        }
        let pins = if request.wait_for_tiering {
            self.wait_for_tiering(&catalog, &metas, progress).await?
        } else {
            pin_now(&catalog, &metas, &names).await?
        };
        let tables = register_tables(&ctx, &catalog, &names, &metas, &pins, progress).await?;
        progress.set_stage(Stage::Planning);
        let plan = ctx.state().statement_to_plan(statement).await?;
        SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)
            .map_err(|e| {
                QueryError::User(format!("silt sql is read-only: {}", e.strip_backtrace()))
            })?;
        debug!(sql = %request.sql, ?tables, "query planned");
        Ok((ctx, plan, tables))
    }

    /// A DataFusion session of its own for one query, within the configured memory.
    fn session(&self) -> Result<SessionContext, QueryError> {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(self.config.memory_bytes_max, 1.0)
            .build_arc()?;
        let session = SessionConfig::new().with_information_schema(false);
        let ctx = SessionContext::new_with_config_rt(session, runtime);
        self.config.catalog.format.prepare_session(&ctx);
        Ok(ctx)
    }

    /// Captures the high watermarks of every table, then polls the lake until its txn offsets
    /// cover them. Returns the covering pins. Bounded by the caller's deadline.
    async fn wait_for_tiering(
        &self,
        catalog: &LakeCatalog,
        metas: &BTreeMap<(String, String), TableMeta>,
        progress: &Arc<QueryProgress>,
    ) -> Result<Pins, QueryError> {
        if catalog.is_offline() {
            return Err(QueryError::User(format!(
                "wait_for_tiering {} (start it with `silt up`)",
                lake::OFFLINE_HINT
            )));
        }
        let mut needed = BTreeMap::new();
        for (key, meta) in metas {
            if !meta.lake_enabled {
                return Err(QueryError::User(format!(
                    "table {} is not lake-enabled (table.datalake.enabled is not true), so waiting for tiering would never end; query it without wait_for_tiering",
                    meta.name()
                )));
            }
            needed.insert(key.clone(), catalog.high_watermarks(meta).await?);
        }
        loop {
            let mut pins = BTreeMap::new();
            let mut waits = BTreeMap::new();
            let mut covered = true;
            for (key, meta) in metas {
                let pinned = catalog.pin_lake(meta).await?;
                let hw = &needed[key];
                covered &= pinned.covers(hw);
                waits.insert(
                    meta.name(),
                    hw.iter()
                        .map(|(b, n)| {
                            let reached = pinned.offsets.get(b).copied().unwrap_or(0);
                            (
                                *b,
                                BucketWait {
                                    reached,
                                    needed: *n,
                                },
                            )
                        })
                        .collect(),
                );
                pins.insert(key.clone(), (pinned, hw.clone()));
            }
            if covered {
                return Ok(pins);
            }
            progress.set_stage(Stage::WaitingForTiering { tables: waits });
            tokio::time::sleep(self.config.wait_poll_interval).await;
        }
    }
}

/// Each table's lake pinned at its current version, without waiting for tiering; a real-time
/// read also gets the high watermarks, captured after pinning so the lake never runs ahead of
/// them.
async fn pin_now(
    catalog: &LakeCatalog,
    metas: &BTreeMap<(String, String), TableMeta>,
    names: &BTreeSet<TableName>,
) -> Result<Pins, QueryError> {
    let mut pins = BTreeMap::new();
    for (key, meta) in metas {
        let pinned = catalog.pin_lake(meta).await?;
        // Captured after pinning: the lake never runs ahead of these.
        let needs_tail = names.iter().any(|n| {
            (&n.database, &n.table) == (&key.0, &key.1) && n.variant == TableVariant::RealTime
        });
        let hw = if needs_tail {
            catalog.high_watermarks(meta).await?
        } else {
            BTreeMap::new()
        };
        pins.insert(key.clone(), (pinned, hw));
    }
    Ok(pins)
}

/// Registers each named table in `ctx` as the provider of its variant (the lake, its
/// snapshots, or the lake with the hot tail), read at its pin; returns what each reads.
async fn register_tables(
    ctx: &SessionContext,
    catalog: &LakeCatalog,
    names: &BTreeSet<TableName>,
    metas: &BTreeMap<(String, String), TableMeta>,
    pins: &Pins,
    progress: &Arc<QueryProgress>,
) -> Result<Vec<TableRead>, QueryError> {
    let mut tables = Vec::new();
    let df_catalog = ctx
        .catalog("datafusion")
        .ok_or_else(|| QueryError::Internal("datafusion's default catalog is missing".into()))?;
    for name in names {
        let key = (name.database.clone(), name.table.clone());
        let meta = &metas[&key];
        let (pinned, hw) = &pins[&key];
        let (provider, tail_offsets_read): (Arc<dyn TableProvider>, i64) = match name.variant {
            TableVariant::Lake => (catalog.lake_provider(meta, pinned).await?, 0),
            TableVariant::LakeSnapshots => (catalog.snapshots_provider(meta, pinned).await?, 0),
            TableVariant::RealTime => {
                let view = catalog
                    .realtime_provider(meta, pinned, hw, progress)
                    .await?;
                (view.provider, view.tail_offsets_read)
            }
        };
        if df_catalog.schema(&name.database).is_none() {
            df_catalog.register_schema(&name.database, Arc::new(MemorySchemaProvider::new()))?;
        }
        ctx.register_table(
            TableReference::partial(name.database.clone(), name.sql_table()),
            provider,
        )?;
        tables.push(TableRead {
            name: name.to_string(),
            lake_version: pinned.version,
            lake_offsets: pinned.offsets.clone(),
            high_watermarks: hw.clone(),
            tail_offsets_read,
        });
    }
    Ok(tables)
}

/// Per table, its pinned lake and the high watermarks its hot tail is read up to (empty when
/// the query does not read the tail).
type Pins = BTreeMap<(String, String), (PinnedLake, BTreeMap<BucketKey, i64>)>;

/// `db.t`, `db.t$lake` or `db.t$lake$snapshots`; a bare or catalog-qualified name is refused.
fn table_name(reference: &TableReference) -> Result<TableName, QueryError> {
    match reference {
        TableReference::Partial { schema, table } => Ok(TableName::parse(schema, table)),
        TableReference::Bare { table } => Err(QueryError::User(format!(
            "table {table} needs its database: name it as db.{table} (or db.{table}$lake)"
        ))),
        TableReference::Full { .. } => Err(QueryError::User(format!(
            "table {reference} has a catalog part; name tables as db.t"
        ))),
    }
}

/// Refuses everything but a query or an EXPLAIN of one.
fn check_read_only(statement: &DfStatement, sql: &str) -> Result<(), QueryError> {
    fn allowed(statement: &DfStatement) -> bool {
        match statement {
            DfStatement::Statement(s) => allowed_sql(s),
            DfStatement::Explain(e) => allowed(&e.statement),
            _ => false,
        }
    }
    fn allowed_sql(statement: &SqlStatement) -> bool {
        match statement {
            SqlStatement::Query(_) => true,
            SqlStatement::Explain { statement, .. } => allowed_sql(statement),
            _ => false,
        }
    }
    if allowed(statement) {
        return Ok(());
    }
    let keyword = sql
        .split_whitespace()
        .next()
        .unwrap_or("this")
        .to_ascii_uppercase();
    Err(QueryError::User(format!(
        "silt sql is read-only: {keyword} statements are refused (use SELECT, WITH ... SELECT, VALUES or EXPLAIN); write through the Fluss client or a pipeline"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> Result<(), QueryError> {
        let ctx = SessionContext::new();
        let statement = ctx
            .state()
            .sql_to_statement(sql, &Dialect::Generic)
            .unwrap();
        check_read_only(&statement, sql)
    }

    #[test]
    fn only_queries_pass() {
        for ok in [
            "SELECT 1",
            "select * from db.t$lake",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "VALUES (1)",
            "EXPLAIN SELECT 1",
            "EXPLAIN ANALYZE SELECT 1",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for refused in [
            "INSERT INTO db.t VALUES (1)",
            "DELETE FROM db.t",
            "UPDATE db.t SET a = 1",
            "CREATE TABLE x (a INT)",
            "DROP TABLE db.t",
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            "SET datafusion.execution.batch_size = 1",
            "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/tmp/x.csv'",
            "EXPLAIN INSERT INTO db.t VALUES (1)",
        ] {
            let e = check(refused).unwrap_err().to_string();
            assert!(e.contains("read-only"), "{refused}: {e}");
        }
    }

    #[test]
    fn dollar_names_parse_as_one_identifier() {
        let ctx = SessionContext::new();
        let state = ctx.state();
        let cases = [
            ("SELECT * FROM db.t$lake", ("db", "t$lake")),
            (
                "SELECT * FROM db.t$lake$snapshots",
                ("db", "t$lake$snapshots"),
            ),
            ("SELECT * FROM db.\"T$lake\"", ("db", "T$lake")),
            ("SELECT * FROM DB.Orders", ("db", "orders")),
        ];
        for (sql, (db, table)) in cases {
            let statement = state.sql_to_statement(sql, &Dialect::Generic).unwrap();
            let refs = state.resolve_table_references(&statement).unwrap();
            assert_eq!(refs, vec![TableReference::partial(db, table)], "{sql}");
        }
        let name = TableName::parse("db", "t$lake$snapshots");
        assert_eq!(
            (name.table.as_str(), name.variant),
            ("t", TableVariant::LakeSnapshots)
        );
    }

    #[tokio::test]
    async fn errors_in_the_data_are_user_errors() {
        // Nothing listens on port 1: queries of no table must not need the hot store.
        let service = QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
            "127.0.0.1:1",
            "/nonexistent",
        )));
        let run = |sql: &str, deadline_ms: u64| {
            service.execute(QueryRequest::new(sql, Duration::from_millis(deadline_ms)))
        };
        let r = run("SELECT 40 + 2 AS x", 5_000).await.unwrap();
        assert_eq!((r.num_rows(), r.schema.field(0).name().as_str()), (1, "x"));
        for sql in [
            "SELECT 1 / 0",
            "SELECT CAST('x' AS INT)",
            "SELEC 1",
            "SELECT nope",
        ] {
            let e = run(sql, 5_000).await.unwrap_err();
            assert!(matches!(e, QueryError::User(_)), "{sql}: {e:?}");
        }
        let e = run("SELECT 1", 0).await.unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    /// A service without a hot store (queries of no table) and with `slots` query slots, of
    /// which `waiting` may be waited for.
    fn service_with_slots(slots: usize, waiting: usize) -> QueryService {
        let mut config = QueryConfig::new(LakeCatalogConfig::new("127.0.0.1:1", "/nonexistent"));
        config.concurrent_max = slots;
        config.waiting_max = waiting;
        QueryService::new(config)
    }

    /// A query that runs until its stream is dropped: its driver waits for a reader.
    async fn held(service: &QueryService) -> QueryStream {
        let endless = "WITH t AS (SELECT * FROM (VALUES (1), (2), (3), (4), (5), (6), (7), (8)) v(x)) \
            SELECT a.x FROM t a, t b, t c, t d, t e, t f, t g, t h, t i, t j";
        service
            .execute_stream(QueryRequest::new(endless, Duration::from_secs(60)))
            .await
            .unwrap()
    }

    /// Issue 33 (item 8): nothing bounded how many queries ran at once, each with its own
    /// memory pool, hot tails and result. Past `concurrent_max` running, a query waits for a
    /// slot inside its deadline, at most `waiting_max` of them; one more is refused at once,
    /// naming the bounds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_past_the_slots_wait_inside_their_deadline_or_are_refused() {
        let run = |service: &QueryService, deadline_ms: u64| {
            let request = QueryRequest::new("SELECT 1", Duration::from_millis(deadline_ms));
            let service = service.clone();
            async move { service.execute(request).await }
        };
        // No waiting: refused at once while the one slot is taken.
        let service = service_with_slots(1, 0);
        let holder = held(&service).await;
        let started = Instant::now();
        let e = run(&service, 5_000).await.unwrap_err();
        assert!(matches!(e, QueryError::Busy { .. }), "{e:?}");
        crate::test_util::assert_mentions(&e, &["query.concurrent_max", "query.waiting_max"]);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
        drop(holder);

        // One may wait: it gets the deadline error, saying what it waited for; a second waiter
        // is refused; once the slot is free, a query runs.
        let service = service_with_slots(1, 1);
        let holder = held(&service).await;
        let waiter = tokio::spawn(run(&service, 500));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let e = run(&service, 5_000).await.unwrap_err();
        assert!(matches!(e, QueryError::Busy { .. }), "{e:?}");
        let e = waiter.await.unwrap().unwrap_err();
        assert!(matches!(e, QueryError::DeadlinePassed { .. }), "{e:?}");
        crate::test_util::assert_mentions(
            &e,
            &["waiting for a query slot", "query.concurrent_max"],
        );
        drop(holder);
        let r = run(&service, 5_000).await.unwrap();
        assert_eq!(r.num_rows(), 1);
    }

    /// `QueryConfig::new` (what tests and the benches start from) is what `silt up` builds from
    /// conf/silt.yaml, apart from the catalog's addresses.
    #[test]
    fn the_query_defaults_are_conf_silt_yaml() {
        let config = crate::config::Config::load(None, std::iter::empty(), &[]).unwrap();
        let from_file = config.query("127.0.0.1:9123");
        let defaults = QueryConfig::new(from_file.catalog.clone());
        assert_eq!(format!("{from_file:#?}"), format!("{defaults:#?}"));
    }

    #[test]
    fn bare_names_ask_for_the_database() {
        let e = table_name(&TableReference::bare("orders")).unwrap_err();
        assert!(e.to_string().contains("db.orders"), "{e}");
    }
}
