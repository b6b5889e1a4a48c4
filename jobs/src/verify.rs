//! `silt verify`: the invariant check (DESIGN.md, "The invariant check"). For one table:
//!
//! 1. capture every bucket's high watermark (and earliest offset) in the hot store;
//! 2. wait, inside the deadline, until the lake's txn offsets reach those high watermarks, and
//!    pin the Delta version whose txn offsets were read (its offsets `L` may lie past the
//!    captured marks when writes continue; the comparison then runs up to `L`);
//! 3. read the changelog through the fluss-rs client from the earliest held offset up to `L`
//!    (log table: every row; primary-key table: the last image per key, deletes removed);
//! 4. read the Delta table at the pinned version without `__bucket`, `__offset`, `__timestamp`;
//! 5. compare as multisets and print counts plus the first rows that are missing, extra or
//!    differing (by key for primary-key tables; by `(bucket, offset)` for log tables, and
//!    naming the lake file an extra row came from).
//!
//! Hot retention: where a bucket's earliest offset is above 0, a log table is compared on the
//! offsets still held (lake rows filtered by `__offset`). A primary-key table is compared on
//! the keys the held changelog decides (their last change lies in the held range); lake keys
//! whose last change was dropped by retention cannot be checked from the changelog and are
//! counted as "unchecked" (silt's hot retention never drops what the lake has not covered, so
//! every such key is in the lake; comparing those with the kv state needs Fluss's kv snapshot
//! RPCs, which silt does not serve yet).
//!
//! The lake reader is deliberately small and independent of the lake catalog: deltalake's
//! table provider on DataFusion, at one pinned version.
//!
//! Exit codes: 0 match, 1 mismatch (or an error), 3 the deadline passed before the lake caught
//! up. Both sides are held in memory, so this is a tool for tables of up to a few million rows.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, ArrayRef, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;
use silt_connectors::changelog::{BUCKET_COLUMN, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN};
use silt_connectors::delta::{lake_arrow_schema, read_lake_offsets};
use silt_connectors::fluss::{
    EndPosition, FlussSource, FlussSourceConfig, StartPosition, table_arrow_schema,
};
use silt_engine::{RestoredState, Source, SourcePoll, TaskContext};

use crate::tiering::DATALAKE_ENABLED;

/// Exit code: the lake and the hot changelog agree.
pub const EXIT_MATCH: u8 = 0;
/// Exit code: they differ (or verify failed).
pub const EXIT_MISMATCH: u8 = 1;
/// Exit code: the deadline passed before the lake's txn offsets reached the high watermarks.
pub const EXIT_DEADLINE: u8 = 3;

const FILE_COLUMN: &str = "__silt_file";

/// Reads of the changelog started again because hot retention moved a log start meanwhile.
const RETENTION_RETRIES_MAX: usize = 5;

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The Fluss endpoint (a running `silt up`).
    pub bootstrap: String,
    /// SASL/PLAIN credentials when the hot store requires them.
    pub credentials: Option<silt_connectors::fluss::FlussCredentials>,
    /// Lake tables live at `<lake_root>/<db>/<table>`.
    pub lake_root: String,
    pub storage_options: HashMap<String, String>,
    /// How long each table may wait for the lake to catch up.
    pub deadline: Duration,
    /// Rows shown per kind of difference.
    pub show_max: usize,
    /// Longest the changelog read may go without progress before verify gives up.
    pub read_stall_max: Duration,
    /// Wait for the lake to reach the high watermarks (the normal check). When false, compare
    /// at the lake's current version whatever it covers: the lake must always be a
    /// consistent prefix of the changelog, even while tiering is behind or failing.
    pub wait_for_lake: bool,
}

impl VerifyOptions {
    pub fn new(bootstrap: impl Into<String>, lake_root: impl Into<String>) -> Self {
        VerifyOptions {
            bootstrap: bootstrap.into(),
            credentials: None,
            lake_root: lake_root.into(),
            storage_options: HashMap::new(),
            deadline: Duration::from_secs(60),
            show_max: 10,
            read_stall_max: Duration::from_secs(30),
            wait_for_lake: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Match,
    Mismatch,
    DeadlinePassed,
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Match => EXIT_MATCH,
            Verdict::Mismatch => EXIT_MISMATCH,
            Verdict::DeadlinePassed => EXIT_DEADLINE,
        }
    }
}

/// The outcome for one table, with the diff ready to print.
#[derive(Debug, Clone)]
pub struct TableReport {
    pub table: String,
    pub primary_key: bool,
    pub verdict: Verdict,
    pub delta_version: Option<u64>,
    /// Per bucket: (earliest held, captured high watermark, lake txn offset compared up to).
    pub buckets: BTreeMap<i32, (i64, i64, i64)>,
    /// Rows (log) or live keys (PK) on each side.
    pub hot_rows: usize,
    pub lake_rows: usize,
    pub missing: usize,
    pub extra: usize,
    pub differing: usize,
    /// PK tables under hot retention: lake keys the held changelog says nothing about.
    pub unchecked: usize,
    /// Human-readable lines: what is missing, extra or differing (first `show_max` of each).
    pub details: Vec<String>,
}

impl TableReport {
    fn new(table: &str, primary_key: bool) -> Self {
        TableReport {
            table: table.to_string(),
            primary_key,
            verdict: Verdict::Mismatch,
            delta_version: None,
            buckets: BTreeMap::new(),
            hot_rows: 0,
            lake_rows: 0,
            missing: 0,
            extra: 0,
            differing: 0,
            unchecked: 0,
            details: Vec::new(),
        }
    }

    /// The full diff, as `silt verify db.t` prints it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let kind = if self.primary_key {
            "primary-key table"
        } else {
            "log table"
        };
        let offsets: Vec<String> = self
            .buckets
            .iter()
            .map(|(b, (earliest, hw, lake))| {
                if *earliest > 0 {
                    format!("{b}: [{earliest}, {lake}) hw {hw}")
                } else {
                    format!("{b}: {lake} (hw {hw})")
                }
            })
            .collect();
        out.push_str(&format!(
            "verify {} ({kind}): lake version {} at offsets {{{}}}\n",
            self.table,
            self.delta_version
                .map_or("-".to_string(), |v| v.to_string()),
            offsets.join(", ")
        ));
        let unit = if self.primary_key { "keys" } else { "rows" };
        out.push_str(&format!(
            "  hot {} {unit}, lake {} {unit}: missing {}, extra {}, differing {}{}\n",
            self.hot_rows,
            self.lake_rows,
            self.missing,
            self.extra,
            self.differing,
            if self.unchecked > 0 {
                format!(
                    ", unchecked {} (last changed before the earliest held offset)",
                    self.unchecked
                )
            } else {
                String::new()
            }
        ));
        for line in &self.details {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&format!(
            "verify {}: {}\n",
            self.table,
            match self.verdict {
                Verdict::Match => "MATCH",
                Verdict::Mismatch => "MISMATCH",
                Verdict::DeadlinePassed => "DEADLINE PASSED (the lake did not catch up)",
            }
        ));
        out
    }
}

fn fluss<E: std::fmt::Display>(context: impl Into<String>) -> impl FnOnce(E) -> anyhow::Error {
    let context = context.into();
    move |e| anyhow!("{context}: {e}")
}

/// Every table with `table.datalake.enabled=true`, as `(database, table)`.
pub async fn lake_enabled_tables(connection: &FlussConnection) -> Result<Vec<(String, String)>> {
    let admin = connection.get_admin().map_err(fluss("fluss admin"))?;
    let mut out = Vec::new();
    for database in admin
        .list_databases()
        .await
        .map_err(fluss("list databases"))?
    {
        for table in admin
            .list_tables(&database)
            .await
            .map_err(fluss(format!("list tables of {database}")))?
        {
            let path = TablePath::new(database.clone(), table.clone());
            let info = admin
                .get_table_info(&path)
                .await
                .map_err(fluss(format!("table {database}.{table}")))?;
            if info
                .get_properties()
                .get(DATALAKE_ENABLED)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            {
                out.push((database.clone(), table));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Parses `db.table`, naming the fix.
pub fn parse_table_name(name: &str) -> Result<(String, String)> {
    match name.split_once('.') {
        Some((db, t)) if !db.is_empty() && !t.is_empty() && !t.contains('.') => {
            Ok((db.to_string(), t.to_string()))
        }
        _ => bail!("table {name:?} must be written database.table (e.g. shop.orders)"),
    }
}

/// Checks one table. Errors are failures to check (unknown table, unreachable store), not
/// mismatches.
pub async fn verify_table(
    connection: &FlussConnection,
    database: &str,
    table: &str,
    options: &VerifyOptions,
) -> Result<TableReport> {
    let name = format!("{database}.{table}");
    let admin = connection.get_admin().map_err(fluss("fluss admin"))?;
    let path = TablePath::new(database.to_string(), table.to_string());
    let info = match admin.get_table_info(&path).await {
        Ok(info) => info,
        Err(e) => {
            let known: Vec<String> = lake_enabled_tables(connection)
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|(d, t)| format!("{d}.{t}"))
                .collect();
            bail!(
                "unknown table {name} ({e}; lake-enabled tables: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    };
    if !info
        .get_properties()
        .get(DATALAKE_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        bail!(
            "table {name} is not lake-enabled ({DATALAKE_ENABLED} is not true), so it has no lake to verify"
        );
    }
    let primary_key = info.has_primary_key();
    let key_columns = info.get_primary_keys().clone();
    let table_id = info.get_table_id().to_string();
    let bucket_count = info.get_num_buckets().max(1);
    let bucket_ids: Vec<i32> = (0..bucket_count).collect();
    let mut report = TableReport::new(&name, primary_key);

    // 1. The marks the lake must reach.
    let high = admin
        .list_offsets(&path, &bucket_ids, OffsetSpec::Latest)
        .await
        .map_err(fluss(format!("list offsets of {name}")))?;
    let earliest = admin
        .list_offsets(&path, &bucket_ids, OffsetSpec::Earliest)
        .await
        .map_err(fluss(format!("list earliest offsets of {name}")))?;

    // 2. Wait for the lake.
    let lake_uri = format!(
        "{}/{database}/{table}",
        options.lake_root.trim_end_matches('/')
    );
    let deadline = Instant::now() + options.deadline;
    let lake = loop {
        let read = read_lake_offsets(
            &lake_uri,
            &options.storage_options,
            &table_id,
            bucket_count as u32,
        )
        .await
        .with_context(|| format!("reading the lake offsets of {name} at {lake_uri}"));
        let lake = match read {
            Ok(lake) => lake,
            // Tiering may be creating the table's lake, or moving a dropped table's lake aside,
            // right now (a `_delta_log` without its first commit yet): read again until the
            // deadline.
            Err(e) if options.wait_for_lake && Instant::now() < deadline => {
                tracing::debug!(error = %format!("{e:#}"), "lake not readable yet; reading again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let offsets = lake
            .as_ref()
            .map(|l| l.bucket_offsets.clone())
            .unwrap_or_default();
        let behind: Vec<String> = bucket_ids
            .iter()
            .filter_map(|b| {
                let (hw, at) = (high.get(b).copied().unwrap_or(0), offsets.get(b).copied());
                (at.unwrap_or(0) < hw)
                    .then(|| format!("bucket {b}: lake {} < hw {hw}", at.unwrap_or(0)))
            })
            .collect();
        if behind.is_empty() || !options.wait_for_lake {
            break lake;
        }
        if Instant::now() >= deadline {
            report.verdict = Verdict::DeadlinePassed;
            report.details.push(format!(
                "the lake did not reach the high watermarks within {:?}: {}",
                options.deadline,
                behind.join(", ")
            ));
            for b in &bucket_ids {
                report.buckets.insert(
                    *b,
                    (
                        earliest.get(b).copied().unwrap_or(0),
                        high.get(b).copied().unwrap_or(0),
                        offsets.get(b).copied().unwrap_or(0),
                    ),
                );
            }
            report.delta_version = lake.map(|l| l.delta_version);
            return Ok(report);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let lake_offsets = lake
        .as_ref()
        .map(|l| l.bucket_offsets.clone())
        .unwrap_or_default();
    report.delta_version = lake.as_ref().map(|l| l.delta_version);
    let mut end_offsets = BTreeMap::new();
    for b in &bucket_ids {
        let to = lake_offsets.get(b).copied().unwrap_or(0);
        end_offsets.insert(*b, to);
        report.buckets.insert(
            *b,
            (
                earliest.get(b).copied().unwrap_or(0),
                high.get(b).copied().unwrap_or(0),
                to,
            ),
        );
    }
    // A lake claiming offsets the hot store never had is damage, not lag.
    let now_high = admin
        .list_offsets(&path, &bucket_ids, OffsetSpec::Latest)
        .await
        .map_err(fluss(format!("list offsets of {name}")))?;
    let beyond: Vec<String> = end_offsets
        .iter()
        .filter(|(b, to)| **to > now_high.get(b).copied().unwrap_or(0))
        .map(|(b, to)| {
            format!(
                "bucket {b}: lake txn offset {to} > hot high watermark {}",
                now_high.get(b).copied().unwrap_or(0)
            )
        })
        .collect();
    if !beyond.is_empty() {
        report.details.push(format!(
            "the lake claims offsets the hot store does not have: {}",
            beyond.join(", ")
        ));
        return Ok(report);
    }

    // 3. The hot side, through the changelog.
    let user_schema = table_arrow_schema(connection, database, table).await?;
    let lake_schema = lake_arrow_schema(&user_schema)?;
    let user_fields = user_schema.fields().len();
    // Hot retention may move a log start while verify reads: then read again from the new
    // starts (a few times; retention runs every few minutes in use).
    let mut earliest = earliest;
    let mut attempt = 0;
    let (start, hot) = loop {
        let start: BTreeMap<i32, i64> = bucket_ids
            .iter()
            .map(|b| (*b, earliest.get(b).copied().unwrap_or(0)))
            .collect();
        match read_changelog(
            &options.bootstrap,
            options.credentials.as_ref(),
            database,
            table,
            start.clone(),
            end_offsets.clone(),
            options.read_stall_max,
        )
        .await
        {
            Ok(hot) => break (start, hot),
            Err(e)
                if attempt < RETENTION_RETRIES_MAX && format!("{e:#}").contains("out of range") =>
            {
                attempt += 1;
                earliest = admin
                    .list_offsets(&path, &bucket_ids, OffsetSpec::Earliest)
                    .await
                    .map_err(fluss(format!("list earliest offsets of {name}")))?;
                for (b, entry) in report.buckets.iter_mut() {
                    entry.0 = earliest.get(b).copied().unwrap_or(0);
                }
            }
            Err(e) => return Err(e),
        }
    };
    let hot = Side::from_batches(&hot, &lake_schema, user_fields, &key_columns, Origin::Hot)?;

    // 4. The lake side, at the pinned version.
    let lake_side = match &lake {
        Some(l) => {
            let batches = read_lake(&lake_uri, &options.storage_options, l.delta_version).await?;
            let batches = held_lake_rows(batches, &start, primary_key)?;
            Side::from_batches(
                &batches,
                &lake_schema,
                user_fields,
                &key_columns,
                Origin::Lake,
            )?
        }
        None => Side::empty(&lake_schema, user_fields, &key_columns)?,
    };

    // 5. Compare.
    if primary_key {
        compare_by_key(&hot, &lake_side, &start, options.show_max, &mut report)?;
    } else {
        compare_multisets(&hot, &lake_side, options.show_max, &mut report)?;
    }
    report.verdict = if report.missing + report.extra + report.differing == 0 {
        Verdict::Match
    } else {
        Verdict::Mismatch
    };
    Ok(report)
}

/// Reads `[start, end)` of every bucket through the Fluss source (the same reader tiering
/// uses), as changelog batches with system columns (`__bucket`, `__offset`, `__change_type`...).
pub async fn read_changelog(
    bootstrap: &str,
    credentials: Option<&silt_connectors::fluss::FlussCredentials>,
    database: &str,
    table: &str,
    start: BTreeMap<i32, i64>,
    end: BTreeMap<i32, i64>,
    stall_max: Duration,
) -> Result<Vec<RecordBatch>> {
    let mut config = FlussSourceConfig::new(bootstrap, database, table);
    config.credentials = credentials.cloned();
    config.start = StartPosition::Offsets(start);
    config.end = EndPosition::Offsets(end.clone());
    let mut source = FlussSource::new(config);
    let ctx = TaskContext {
        job_name: "verify".into(),
        vertex_name: "changelog".into(),
        subtask_index: 0,
        parallelism: 1,
        attempt: 0,
    };
    source
        .open(&ctx, RestoredState::default())
        .await
        .map_err(|e| anyhow!("reading the changelog of {database}.{table}: {e}"))?;
    let mut batches = Vec::new();
    let mut last_progress = Instant::now();
    loop {
        match source
            .poll_next()
            .await
            .map_err(|e| anyhow!("reading the changelog of {database}.{table}: {e}"))?
        {
            SourcePoll::Batch(b) => {
                last_progress = Instant::now();
                batches.push(b);
            }
            SourcePoll::End => return Ok(batches),
            SourcePoll::Idle(wait) => {
                if last_progress.elapsed() > stall_max {
                    bail!(
                        "reading the changelog of {database}.{table} up to {end:?} made no progress for {stall_max:?}"
                    );
                }
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// The lake's rows at `version`, with the file each row came from.
pub async fn read_lake(
    uri: &str,
    storage_options: &HashMap<String, String>,
    version: u64,
) -> Result<Vec<RecordBatch>> {
    let url = deltalake::ensure_table_uri(uri).with_context(|| format!("lake table {uri}"))?;
    let table = deltalake::DeltaTableBuilder::from_url(url)?
        .with_storage_options(storage_options.clone())
        .with_version(version)
        .load()
        .await
        .with_context(|| format!("opening lake table {uri} at version {version}"))?;
    let ctx = datafusion::prelude::SessionContext::new();
    table.update_datafusion_session(&ctx.state())?;
    let provider = table
        .table_provider()
        .with_file_column(FILE_COLUMN)
        .await
        .with_context(|| format!("reading lake table {uri}"))?;
    let batches = ctx
        .read_table(provider)?
        .collect()
        .await
        .with_context(|| format!("reading lake table {uri} at version {version}"))?;
    Ok(batches)
}

/// The lake rows to compare under hot retention. A log table's rows below a bucket's earliest
/// held offset are gone from the hot side, so they are dropped; a primary-key table's lake row
/// keeps the offset of its key's last change, which may be that old and still be the key's
/// state, so all are kept (`compare_by_key` counts the ones it cannot decide as unchecked).
fn held_lake_rows(
    batches: Vec<RecordBatch>,
    start: &BTreeMap<i32, i64>,
    primary_key: bool,
) -> Result<Vec<RecordBatch>> {
    if primary_key {
        Ok(batches)
    } else {
        keep_held(&batches, start)
    }
}

/// Drops lake rows below a bucket's earliest held offset (hot retention removed them).
fn keep_held(batches: &[RecordBatch], start: &BTreeMap<i32, i64>) -> Result<Vec<RecordBatch>> {
    if start.values().all(|s| *s <= 0) {
        return Ok(batches.to_vec());
    }
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let buckets = int32(batch, BUCKET_COLUMN)?;
        let offsets = int64(batch, OFFSET_COLUMN)?;
        let keep: arrow::array::BooleanArray = (0..batch.num_rows())
            .map(|i| Some(offsets.value(i) >= start.get(&buckets.value(i)).copied().unwrap_or(0)))
            .collect();
        out.push(arrow::compute::filter_record_batch(batch, &keep)?);
    }
    Ok(out)
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| anyhow!("column {name} is missing"))
}

fn int32(batch: &RecordBatch, name: &str) -> Result<Int32Array> {
    let c = cast(column(batch, name)?, &arrow::datatypes::DataType::Int32)?;
    Ok(c.as_any()
        .downcast_ref::<Int32Array>()
        .ok_or_else(|| anyhow!("{name} is not an integer"))?
        .clone())
}

fn int64(batch: &RecordBatch, name: &str) -> Result<Int64Array> {
    let c = cast(column(batch, name)?, &arrow::datatypes::DataType::Int64)?;
    Ok(c.as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| anyhow!("{name} is not an integer"))?
        .clone())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Hot,
    Lake,
}

/// One side of the comparison: every row's user columns in Arrow's row format (so equality is
/// exact for every type), its key's bytes, and where it came from, for the diff.
struct Side {
    rows: Vec<Entry>,
    /// Display strings are made only for rows that are reported.
    batches: Vec<RecordBatch>,
    names: Vec<String>,
    key_names: Vec<String>,
}

struct Entry {
    row: Vec<u8>,
    key: Vec<u8>,
    bucket: i32,
    offset: i64,
    change: ChangeType,
    /// (batch, row) for display.
    at: (usize, usize),
    file: Option<Arc<str>>,
}

impl Side {
    fn empty(lake_schema: &SchemaRef, user_fields: usize, key_columns: &[String]) -> Result<Self> {
        Self::from_batches(&[], lake_schema, user_fields, key_columns, Origin::Lake)
    }

    fn from_batches(
        batches: &[RecordBatch],
        lake_schema: &SchemaRef,
        user_fields: usize,
        key_columns: &[String],
        origin: Origin,
    ) -> Result<Self> {
        let fields = &lake_schema.fields()[..user_fields];
        let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        let key_index: Vec<usize> = key_columns
            .iter()
            .map(|k| {
                names
                    .iter()
                    .position(|n| n == k)
                    .ok_or_else(|| anyhow!("key column {k} is not a column of the table"))
            })
            .collect::<Result<_>>()?;
        let converter = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let key_converter = RowConverter::new(
            key_index
                .iter()
                .map(|i| SortField::new(fields[*i].data_type().clone()))
                .collect(),
        )?;
        let mut rows = Vec::new();
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            // Both sides in the lake's types: the tiering writer casts the same way, and the
            // lake reader may hand back view or dictionary types.
            let columns: Vec<ArrayRef> = fields
                .iter()
                .map(|f| {
                    let c = column(batch, f.name())?;
                    Ok(cast(c, f.data_type())?)
                })
                .collect::<Result<_>>()?;
            let converted = converter.convert_columns(&columns)?;
            let keys = if key_index.is_empty() {
                None
            } else {
                let key_columns: Vec<ArrayRef> =
                    key_index.iter().map(|i| columns[*i].clone()).collect();
                Some(key_converter.convert_columns(&key_columns)?)
            };
            let buckets = int32(batch, BUCKET_COLUMN)?;
            let offsets = int64(batch, OFFSET_COLUMN)?;
            let changes = match origin {
                Origin::Hot => Some(
                    column(batch, CHANGE_TYPE_COLUMN)?
                        .as_any()
                        .downcast_ref::<Int8Array>()
                        .ok_or_else(|| anyhow!("{CHANGE_TYPE_COLUMN} is not Int8"))?
                        .clone(),
                ),
                Origin::Lake => None,
            };
            let files = match origin {
                Origin::Lake => batch
                    .column_by_name(FILE_COLUMN)
                    .map(|c| cast(c, &arrow::datatypes::DataType::Utf8))
                    .transpose()?,
                Origin::Hot => None,
            };
            let files = files
                .as_ref()
                .and_then(|f| f.as_any().downcast_ref::<StringArray>());
            let mut last_file: Option<Arc<str>> = None;
            let index = kept.len();
            for i in 0..batch.num_rows() {
                let change = match &changes {
                    Some(c) => ChangeType::from_i8(c.value(i))
                        .ok_or_else(|| anyhow!("unknown change type {}", c.value(i)))?,
                    None => ChangeType::AppendOnly,
                };
                let file = files.filter(|f| !f.is_null(i)).map(|f| {
                    let name = f.value(i);
                    match &last_file {
                        Some(l) if l.as_ref() == name => l.clone(),
                        _ => {
                            let l: Arc<str> = Arc::from(name);
                            last_file = Some(l.clone());
                            l
                        }
                    }
                });
                rows.push(Entry {
                    row: converted.row(i).as_ref().to_vec(),
                    key: keys
                        .as_ref()
                        .map(|k| k.row(i).as_ref().to_vec())
                        .unwrap_or_default(),
                    bucket: buckets.value(i),
                    offset: offsets.value(i),
                    change,
                    at: (index, i),
                    file,
                });
            }
            kept.push(
                batch.project(
                    &fields
                        .iter()
                        .map(|f| batch.schema().index_of(f.name()))
                        .collect::<Result<Vec<_>, _>>()?,
                )?,
            );
        }
        Ok(Side {
            rows,
            batches: kept,
            names,
            key_names: key_columns.to_vec(),
        })
    }

    /// `col=value, ...` of one row's user columns.
    fn show(&self, e: &Entry) -> String {
        let batch = &self.batches[e.at.0];
        let options = FormatOptions::default().with_null("null");
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let value = ArrayFormatter::try_new(batch.column(i).as_ref(), &options)
                    .map(|f| f.value(e.at.1).to_string())
                    .unwrap_or_else(|_| "?".into());
                format!("{n}={value}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn show_key(&self, e: &Entry) -> String {
        let batch = &self.batches[e.at.0];
        let options = FormatOptions::default().with_null("null");
        self.key_names
            .iter()
            .filter_map(|k| {
                let i = self.names.iter().position(|n| n == k)?;
                let value = ArrayFormatter::try_new(batch.column(i).as_ref(), &options)
                    .map(|f| f.value(e.at.1).to_string())
                    .unwrap_or_else(|_| "?".into());
                Some(format!("{k}={value}"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn short_file(file: &Option<Arc<str>>) -> String {
    match file {
        None => "an unknown file".into(),
        Some(f) => {
            // `__bucket=1/part-...parquet` is enough to find it under the table.
            let parts: Vec<&str> = f.rsplitn(3, '/').collect();
            match parts.as_slice() {
                [name, dir, _] if dir.starts_with(BUCKET_COLUMN) => format!("{dir}/{name}"),
                [name, ..] => name.to_string(),
                [] => f.to_string(),
            }
        }
    }
}

/// Log tables: every hot row once in the lake, nothing else. Rows are matched as a multiset of
/// user columns; a missing and an extra row at the same `(bucket, offset)` are reported as one
/// differing row.
fn compare_multisets(
    hot: &Side,
    lake: &Side,
    show_max: usize,
    report: &mut TableReport,
) -> Result<()> {
    report.hot_rows = hot.rows.len();
    report.lake_rows = lake.rows.len();
    let mut counts: HashMap<&[u8], i64> = HashMap::with_capacity(hot.rows.len());
    for e in &hot.rows {
        *counts.entry(&e.row).or_default() += 1;
    }
    for e in &lake.rows {
        *counts.entry(&e.row).or_default() -= 1;
    }
    // Walk each side once, taking as many occurrences as the surplus says.
    let mut surplus = counts.clone();
    let mut missing: Vec<&Entry> = Vec::new();
    for e in &hot.rows {
        let s = surplus.get_mut(e.row.as_slice()).expect("counted");
        if *s > 0 {
            *s -= 1;
            missing.push(e);
        }
    }
    let mut surplus = counts;
    let mut extra: Vec<&Entry> = Vec::new();
    for e in &lake.rows {
        let s = surplus.get_mut(e.row.as_slice()).expect("counted");
        if *s < 0 {
            *s += 1;
            extra.push(e);
        }
    }
    let extra_at: HashMap<(i32, i64), usize> = extra
        .iter()
        .enumerate()
        .map(|(i, e)| ((e.bucket, e.offset), i))
        .collect();
    let mut paired = vec![false; extra.len()];
    let mut differing = Vec::new();
    let mut only_missing = Vec::new();
    for m in missing {
        match extra_at.get(&(m.bucket, m.offset)) {
            Some(&i) if !paired[i] => {
                paired[i] = true;
                differing.push((m, extra[i]));
            }
            _ => only_missing.push(m),
        }
    }
    let only_extra: Vec<&Entry> = extra
        .iter()
        .zip(&paired)
        .filter(|(_, p)| !**p)
        .map(|(e, _)| *e)
        .collect();
    report.missing = only_missing.len();
    report.extra = only_extra.len();
    report.differing = differing.len();
    if !only_missing.is_empty() {
        report.details.push(format!(
            "missing from the lake ({}, first {}):",
            only_missing.len(),
            show_max.min(only_missing.len())
        ));
        for m in only_missing.iter().take(show_max) {
            report.details.push(format!(
                "  - bucket {} offset {}: {}",
                m.bucket,
                m.offset,
                hot.show(m)
            ));
        }
        report.details.push(format!(
            "  missing offsets by bucket: {}",
            ranges(&only_missing)
        ));
    }
    if !only_extra.is_empty() {
        report.details.push(format!(
            "extra in the lake ({}, first {}):",
            only_extra.len(),
            show_max.min(only_extra.len())
        ));
        // Which copy of a duplicated row is the extra one is arbitrary: name every file that
        // holds a row at the same (bucket, offset).
        let wanted: std::collections::HashSet<(i32, i64)> =
            only_extra.iter().map(|e| (e.bucket, e.offset)).collect();
        let mut holders: HashMap<(i32, i64), Vec<&Entry>> = HashMap::new();
        for e in &lake.rows {
            if wanted.contains(&(e.bucket, e.offset)) {
                holders.entry((e.bucket, e.offset)).or_default().push(e);
            }
        }
        for e in only_extra.iter().take(show_max) {
            let others: Vec<String> = holders
                .get(&(e.bucket, e.offset))
                .map(|hs| {
                    hs.iter()
                        .filter(|h| h.file != e.file)
                        .map(|h| short_file(&h.file))
                        .collect()
                })
                .unwrap_or_default();
            let also = if others.is_empty() {
                String::new()
            } else {
                format!(" (also in {})", others.join(", "))
            };
            report.details.push(format!(
                "  + bucket {} offset {} in {}{also}: {}",
                e.bucket,
                e.offset,
                short_file(&e.file),
                lake.show(e)
            ));
        }
        let involved: Vec<&Entry> = holders.values().flatten().copied().collect();
        report.details.push(format!(
            "  lake files holding the extra rows or other copies of them: {}",
            by_file(&involved)
        ));
    }
    if !differing.is_empty() {
        report.details.push(format!(
            "differing ({}, first {}):",
            differing.len(),
            show_max.min(differing.len())
        ));
        for (h, l) in differing.iter().take(show_max) {
            report.details.push(format!(
                "  ~ bucket {} offset {} in {}: hot {{{}}} lake {{{}}}",
                h.bucket,
                h.offset,
                short_file(&l.file),
                hot.show(h),
                lake.show(l)
            ));
        }
    }
    Ok(())
}

/// `bucket 0: [3, 5), 9; bucket 2: ...`: offsets compressed into ranges.
fn ranges(entries: &[&Entry]) -> String {
    let mut by_bucket: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for e in entries {
        by_bucket.entry(e.bucket).or_default().push(e.offset);
    }
    by_bucket
        .into_iter()
        .map(|(b, mut offsets)| {
            offsets.sort_unstable();
            offsets.dedup();
            let mut parts = Vec::new();
            let mut i = 0;
            while i < offsets.len() {
                let mut j = i;
                while j + 1 < offsets.len() && offsets[j + 1] == offsets[j] + 1 {
                    j += 1;
                }
                parts.push(if i == j {
                    offsets[i].to_string()
                } else {
                    format!("[{}, {})", offsets[i], offsets[j] + 1)
                });
                i = j + 1;
            }
            let shown = parts.len().min(8);
            let more = if parts.len() > shown {
                format!(" and {} more ranges", parts.len() - shown)
            } else {
                String::new()
            };
            format!("bucket {b}: {}{more}", parts[..shown].join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn by_file(entries: &[&Entry]) -> String {
    let mut files: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries {
        *files.entry(short_file(&e.file)).or_default() += 1;
    }
    files
        .into_iter()
        .map(|(f, n)| format!("{f} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Primary-key tables: the hot side is reduced to the last change per key (deletes remove the
/// key); the lake must hold exactly one row per live key, equal to that image.
fn compare_by_key(
    hot: &Side,
    lake: &Side,
    start: &BTreeMap<i32, i64>,
    show_max: usize,
    report: &mut TableReport,
) -> Result<()> {
    let retention = start.values().any(|s| *s > 0);
    // The last change per key, in offset order per bucket (a key lives in one bucket).
    let mut order: Vec<&Entry> = hot.rows.iter().collect();
    order.sort_by_key(|e| (e.bucket, e.offset));
    let mut last: HashMap<&[u8], &Entry> = HashMap::new();
    for e in order {
        match e.change {
            // `-U` is the old image; its `+U` follows and decides.
            ChangeType::UpdateBefore => {}
            _ => {
                last.insert(&e.key, e);
            }
        }
    }
    let live: HashMap<&[u8], &Entry> = last
        .iter()
        .filter(|(_, e)| e.change != ChangeType::Delete)
        .map(|(k, e)| (*k, *e))
        .collect();
    let mut lake_by_key: HashMap<&[u8], Vec<&Entry>> = HashMap::new();
    for e in &lake.rows {
        lake_by_key.entry(&e.key).or_default().push(e);
    }
    report.hot_rows = live.len();
    report.lake_rows = lake.rows.len();
    let mut missing: Vec<&Entry> = Vec::new();
    let mut differing: Vec<(&Entry, &Entry)> = Vec::new();
    for (key, h) in &live {
        match lake_by_key.get(key) {
            None => missing.push(h),
            Some(ls) => {
                if let Some(l) = ls.iter().find(|l| l.row != h.row) {
                    differing.push((h, l));
                }
            }
        }
    }
    let mut extra: Vec<(&Entry, &'static str)> = Vec::new();
    for (key, ls) in &lake_by_key {
        let reason = match last.get(key) {
            Some(h) if h.change == ChangeType::Delete => Some("deleted in the hot store"),
            Some(_) => None,
            None if retention => {
                report.unchecked += ls.len();
                continue;
            }
            None => Some("never written"),
        };
        if let Some(reason) = reason {
            extra.extend(ls.iter().map(|l| (*l, reason)));
        } else if ls.len() > 1 {
            // One image is right (or differing, counted above); the others are duplicates.
            extra.extend(ls.iter().skip(1).map(|l| (*l, "duplicate key")));
        }
    }
    missing.sort_by_key(|e| (e.bucket, e.offset));
    differing.sort_by_key(|(h, _)| (h.bucket, h.offset));
    extra.sort_by_key(|(e, _)| (e.bucket, e.offset));
    report.missing = missing.len();
    report.extra = extra.len();
    report.differing = differing.len();
    if !missing.is_empty() {
        report.details.push(format!(
            "keys missing from the lake ({}, first {}):",
            missing.len(),
            show_max.min(missing.len())
        ));
        for m in missing.iter().take(show_max) {
            report.details.push(format!(
                "  - key {{{}}} (bucket {} offset {}): {}",
                hot.show_key(m),
                m.bucket,
                m.offset,
                hot.show(m)
            ));
        }
    }
    if !extra.is_empty() {
        report.details.push(format!(
            "extra keys in the lake ({}, first {}):",
            extra.len(),
            show_max.min(extra.len())
        ));
        for (e, reason) in extra.iter().take(show_max) {
            report.details.push(format!(
                "  + key {{{}}} ({reason}; bucket {} offset {} in {}): {}",
                lake.show_key(e),
                e.bucket,
                e.offset,
                short_file(&e.file),
                lake.show(e)
            ));
        }
    }
    if !differing.is_empty() {
        report.details.push(format!(
            "differing keys ({}, first {}):",
            differing.len(),
            show_max.min(differing.len())
        ));
        for (h, l) in differing.iter().take(show_max) {
            report.details.push(format!(
                "  ~ key {{{}}} (bucket {} offset {}, lake file {}): hot {{{}}} lake {{{}}}",
                hot.show_key(h),
                h.bucket,
                h.offset,
                short_file(&l.file),
                hot.show(h),
                lake.show(l)
            ));
        }
    }
    Ok(())
}

/// `silt verify`: one table or every lake-enabled one. Prints the diff(s) and returns the exit
/// code (0 match, 1 mismatch, 3 deadline passed; with several tables the worst wins, a mismatch
/// over a deadline).
pub async fn run(options: &VerifyOptions, table: Option<&str>, all: bool) -> Result<u8> {
    let connection = silt_connectors::fluss::connect_with(
        &options.bootstrap,
        options.credentials.as_ref(),
    )
    .await
    .with_context(|| {
        format!(
            "is `silt up` running? (hotstore address {}; set --bootstrap or hotstore.listen)",
            options.bootstrap
        )
    })?;
    let tables = match (table, all) {
        (Some(name), false) => vec![parse_table_name(name)?],
        (None, true) => lake_enabled_tables(&connection).await?,
        _ => bail!("name one table (silt verify db.t) or pass --all"),
    };
    if tables.is_empty() {
        println!("verify: no lake-enabled tables");
        return Ok(EXIT_MATCH);
    }
    let started = Instant::now();
    let mut reports = Vec::with_capacity(tables.len());
    for (i, (database, name)) in tables.iter().enumerate() {
        if all {
            eprint!(
                "\r[{}/{}] verifying {database}.{name} ...{:20}",
                i + 1,
                tables.len(),
                ""
            );
            let _ = std::io::stderr().flush();
        }
        let report = match verify_table(&connection, database, name, options).await {
            Ok(r) => r,
            Err(e) if all => {
                let mut r = TableReport::new(&format!("{database}.{name}"), false);
                r.details.push(format!("verify failed: {e:#}"));
                r
            }
            Err(e) => return Err(e),
        };
        if !all || report.verdict != Verdict::Match {
            if all {
                eprintln!();
            }
            print!("{}", report.render());
        }
        reports.push(report);
    }
    if all {
        eprintln!(
            "\r[{}/{}] done in {:.1} s{:40}",
            tables.len(),
            tables.len(),
            started.elapsed().as_secs_f64(),
            ""
        );
        println!("{}", summary(&reports));
    }
    let code = if reports.iter().any(|r| r.verdict == Verdict::Mismatch) {
        EXIT_MISMATCH
    } else if reports.iter().any(|r| r.verdict == Verdict::DeadlinePassed) {
        EXIT_DEADLINE
    } else {
        EXIT_MATCH
    };
    Ok(code)
}

/// The summary table of `silt verify --all`.
pub fn summary(reports: &[TableReport]) -> String {
    let mut out = format!(
        "{:<28} {:<5} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}  {}\n",
        "table", "kind", "version", "hot", "lake", "missing", "extra", "differing", "result"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<28} {:<5} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}  {}\n",
            r.table,
            if r.primary_key { "pk" } else { "log" },
            r.delta_version.map_or("-".into(), |v| v.to_string()),
            r.hot_rows,
            r.lake_rows,
            r.missing,
            r.extra,
            r.differing,
            match r.verdict {
                Verdict::Match => "match",
                Verdict::Mismatch => "MISMATCH",
                Verdict::DeadlinePassed => "deadline passed",
            }
        ));
    }
    let failed = reports
        .iter()
        .filter(|r| r.verdict != Verdict::Match)
        .count();
    out.push_str(&format!(
        "{} tables: {} match, {failed} do not",
        reports.len(),
        reports.len() - failed
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_need_a_database() {
        assert_eq!(
            parse_table_name("shop.orders").unwrap(),
            ("shop".into(), "orders".into())
        );
        for bad in ["orders", ".orders", "shop.", "a.b.c"] {
            let e = parse_table_name(bad).unwrap_err().to_string();
            assert!(e.contains("database.table"), "{bad}: {e}");
        }
    }

    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    /// One changelog or lake row: (id, v, bucket, offset, change type).
    type Row = (i64, &'static str, i32, i64, i8);

    fn lake_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new(BUCKET_COLUMN, DataType::Int32, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
            Field::new(
                "__timestamp",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                false,
            ),
        ]))
    }

    fn batch(rows: &[Row], origin: Origin) -> RecordBatch {
        let mut fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new(BUCKET_COLUMN, DataType::Int32, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
        ];
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
        ];
        match origin {
            Origin::Hot => {
                fields.push(Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false));
                columns.push(Arc::new(Int8Array::from_iter_values(
                    rows.iter().map(|r| r.4),
                )));
            }
            Origin::Lake => {
                fields.push(Field::new(FILE_COLUMN, DataType::Utf8, false));
                columns.push(Arc::new(StringArray::from_iter_values(
                    rows.iter()
                        .map(|r| format!("__bucket={}/f{}.parquet", r.2, r.4)),
                )));
            }
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Compares hot rows with lake rows (lake rows' last field names their file) and returns
    /// (missing, extra, differing, unchecked).
    fn diff(
        hot: &[Row],
        lake: &[Row],
        keys: &[&str],
        earliest: i64,
    ) -> (usize, usize, usize, usize) {
        let schema = lake_schema();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let start: BTreeMap<i32, i64> = [(0, earliest), (1, earliest)].into_iter().collect();
        let hot =
            Side::from_batches(&[batch(hot, Origin::Hot)], &schema, 2, &keys, Origin::Hot).unwrap();
        let lake_batches =
            held_lake_rows(vec![batch(lake, Origin::Lake)], &start, !keys.is_empty()).unwrap();
        let lake = Side::from_batches(&lake_batches, &schema, 2, &keys, Origin::Lake).unwrap();
        let mut report = TableReport::new("t.t", !keys.is_empty());
        if keys.is_empty() {
            compare_multisets(&hot, &lake, 10, &mut report).unwrap();
        } else {
            compare_by_key(&hot, &lake, &start, 10, &mut report).unwrap();
        }
        (
            report.missing,
            report.extra,
            report.differing,
            report.unchecked,
        )
    }

    const A: i8 = 0; // append-only
    const I: i8 = 1;
    const UB: i8 = 2;
    const UA: i8 = 3;
    const D: i8 = 4;

    #[test]
    fn log_tables_compare_as_multisets() {
        let hot = [(1, "a", 0, 0, A), (2, "b", 0, 1, A), (2, "b", 1, 0, A)];
        assert_eq!(
            diff(
                &hot,
                &[(1, "a", 0, 0, 0), (2, "b", 0, 1, 0), (2, "b", 1, 0, 0)],
                &[],
                0
            ),
            (0, 0, 0, 0)
        );
        // A lost row, a duplicated row, a changed row (same bucket and offset, other values).
        assert_eq!(
            diff(&hot, &[(1, "a", 0, 0, 0), (2, "b", 0, 1, 0)], &[], 0),
            (1, 0, 0, 0)
        );
        assert_eq!(
            diff(
                &hot,
                &[
                    (1, "a", 0, 0, 0),
                    (1, "a", 0, 0, 1),
                    (2, "b", 0, 1, 0),
                    (2, "b", 1, 0, 0)
                ],
                &[],
                0
            ),
            (0, 1, 0, 0)
        );
        assert_eq!(
            diff(
                &hot,
                &[(1, "a", 0, 0, 0), (2, "x", 0, 1, 0), (2, "b", 1, 0, 0)],
                &[],
                0
            ),
            (0, 0, 1, 0)
        );
        // Retention dropped offset 0 of each bucket: lake rows below it are not compared.
        let held = [(2, "b", 0, 1, A)];
        assert_eq!(
            diff(
                &held,
                &[(1, "a", 0, 0, 0), (2, "b", 0, 1, 0), (2, "b", 1, 0, 0)],
                &[],
                1
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn primary_key_tables_compare_the_last_image_per_key() {
        // id 1: inserted then updated; id 2: inserted then deleted; id 3: inserted.
        let hot = [
            (1, "a", 0, 0, I),
            (2, "b", 1, 0, I),
            (1, "a", 0, 1, UB),
            (1, "a2", 0, 2, UA),
            (2, "b", 1, 1, D),
            (3, "c", 1, 2, I),
        ];
        let good = [(1, "a2", 0, 2, 0), (3, "c", 1, 2, 0)];
        assert_eq!(diff(&hot, &good, &["id"], 0), (0, 0, 0, 0));
        // The old image of 1, the deleted 2 resurrected, 3 missing.
        assert_eq!(
            diff(&hot, &[(1, "a", 0, 0, 0), (2, "b", 1, 0, 0)], &["id"], 0),
            (1, 1, 1, 0)
        );
        // A key held twice.
        assert_eq!(
            diff(
                &hot,
                &[(1, "a2", 0, 2, 0), (1, "a2", 0, 2, 1), (3, "c", 1, 2, 0)],
                &["id"],
                0
            ),
            (0, 1, 0, 0)
        );
        // Retention dropped offsets < 2: only 1 and 3 are decided by the held changelog; a lake
        // key the held range never mentions is unchecked, not extra.
        let held = [(1, "a2", 0, 2, UA), (3, "c", 1, 2, I)];
        let lake = [(1, "a2", 0, 2, 0), (3, "c", 1, 2, 0), (9, "z", 0, 0, 0)];
        assert_eq!(diff(&held, &lake, &["id"], 2), (0, 0, 0, 1));
        let wrong = [(1, "a", 0, 0, 0), (3, "c", 1, 2, 0)];
        assert_eq!(diff(&held, &wrong, &["id"], 2), (0, 0, 1, 0));
    }

    #[test]
    fn offsets_are_shown_as_ranges() {
        let entry = |bucket, offset| Entry {
            row: vec![],
            key: vec![],
            bucket,
            offset,
            change: ChangeType::AppendOnly,
            at: (0, 0),
            file: None,
        };
        let es = [entry(0, 3), entry(0, 4), entry(0, 9), entry(2, 0)];
        let refs: Vec<&Entry> = es.iter().collect();
        assert_eq!(ranges(&refs), "bucket 0: [3, 5), 9; bucket 2: 0");
    }
}
