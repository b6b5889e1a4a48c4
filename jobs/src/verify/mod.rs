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
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::RecordBatch;
use fluss::client::{FlussAdmin, FlussConnection};
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;
use silt_connectors::changelog::BucketKey;
use silt_connectors::fluss::{list_bucket_offsets, table_arrow_schema};
use silt_connectors::lake_format::{LakeFormat, LakeOffsets};

use crate::progress::Progress;
use crate::tiering::DATALAKE_ENABLED;

mod diff;
mod output;
mod read;
pub mod rest;

use diff::{Origin, Side};
pub use output::{run, summary};
use read::{held_lake_rows, keys_with_several_rows, split_dropped_partitions};
pub use read::{read_changelog, read_lake};

/// Exit code: the lake and the hot changelog agree.
pub const EXIT_MATCH: u8 = 0;
/// Exit code: they differ (or verify failed).
pub const EXIT_MISMATCH: u8 = 1;
/// Exit code: the deadline passed before the lake's txn offsets reached the high watermarks.
pub const EXIT_DEADLINE: u8 = 3;

const FILE_COLUMN: &str = "__silt_file";

/// What a check is doing, as its progress messages begin (`db.t: <phase>...`); the REST runs
/// report them as phases ([`rest::PHASES`]).
pub const PHASE_CAPTURING: &str = "capturing high watermarks";
pub const PHASE_WAITING: &str = "waiting for tiering";
pub const PHASE_CHANGELOG: &str = "reading the changelog";
pub const PHASE_LAKE: &str = "reading the lake";
pub const PHASE_COMPARING: &str = "comparing";

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
    /// The format of the lake tables (`lake.format`).
    pub format: std::sync::Arc<dyn LakeFormat>,
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
    /// Where verify says what it is doing (waiting for tiering, reading, comparing); hidden
    /// unless a front end hands in one that is drawn.
    pub progress: Progress,
}

impl VerifyOptions {
    /// The settings `silt verify` and the REST runs take from the configuration: the hot
    /// tier's address, credentials, the lake root, its format and storage options.
    pub fn from_config(config: &crate::config::Config) -> Self {
        VerifyOptions {
            storage_options: config.lake_storage_options(),
            format: config.lake_format(),
            credentials: config.fluss_credentials(),
            ..VerifyOptions::new(config.hot_tier_bootstrap(), config.lake_root())
        }
    }

    pub fn new(bootstrap: impl Into<String>, lake_root: impl Into<String>) -> Self {
        VerifyOptions {
            bootstrap: bootstrap.into(),
            credentials: None,
            lake_root: lake_root.into(),
            format: silt_connectors::formats::default_format(),
            storage_options: HashMap::new(),
            deadline: Duration::from_secs(60),
            show_max: 10,
            read_stall_max: Duration::from_secs(30),
            wait_for_lake: true,
            progress: Progress::hidden(),
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
    pub buckets: BTreeMap<BucketKey, (i64, i64, i64)>,
    /// Rows (log) or live keys (PK) on each side.
    pub hot_rows: usize,
    pub lake_rows: usize,
    pub missing: usize,
    pub extra: usize,
    pub differing: usize,
    /// PK tables under hot retention: lake keys the held changelog says nothing about.
    pub unchecked: usize,
    /// PK tables: keys holding more than one row in the lake (dropped partitions included).
    pub duplicate_keys: usize,
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
            duplicate_keys: 0,
            details: Vec::new(),
        }
    }

    /// The full diff, as `silt verify db.t` prints it: [`TableReport::render_diff`], then
    /// [`TableReport::verdict_line`].
    pub fn render(&self) -> String {
        format!("{}{}\n", self.render_diff(), self.verdict_line())
    }

    /// `verify db.t: MATCH` (or `MISMATCH`, or `DEADLINE PASSED ...`): what a script reads.
    pub fn verdict_line(&self) -> String {
        format!(
            "verify {}: {}",
            self.table,
            match self.verdict {
                Verdict::Match => "MATCH",
                Verdict::Mismatch => "MISMATCH",
                Verdict::DeadlinePassed => "DEADLINE PASSED (the lake did not catch up)",
            }
        )
    }

    /// What was compared, the counts, and the first rows that differ, a line each.
    pub fn render_diff(&self) -> String {
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
                    format!("{}: [{earliest}, {lake}) hw {hw}", b.short())
                } else {
                    format!("{}: {lake} (hw {hw})", b.short())
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
            if silt_connectors::fluss::is_lake_enabled(&info) {
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

/// Checks one table: the five steps of the module's contract. Errors are failures to check
/// (unknown table, unreachable store), not mismatches. Says where it is on `options.progress`.
pub async fn verify_table(
    connection: &FlussConnection,
    database: &str,
    table: &str,
    options: &VerifyOptions,
) -> Result<TableReport> {
    let admin = connection.get_admin().map_err(fluss("fluss admin"))?;
    let mut target = Target::look_up(connection, &admin, database, table).await?;
    let mut report = TableReport::new(&target.name, target.primary_key);
    let marks = target.marks(connection).await?;
    // A partitioned table's buckets are those of the partitions it has now.
    target.bucket_ids = marks.high.keys().copied().collect();
    let lake_uri = silt_connectors::lake::layout::lake_uri(&options.lake_root, database, table)?;
    let Some(lake) = wait_for_lake(&target, &marks, &lake_uri, options, &mut report).await? else {
        return Ok(report);
    };
    let Some(end) = pin_end_offsets(&target, connection, &marks, &lake, &mut report).await? else {
        return Ok(report);
    };

    // 3. The hot side, through the changelog.
    let say = |step: &str| {
        options
            .progress
            .set_message(format!("{}: {step}", target.name))
    };
    say(PHASE_CHANGELOG);
    let user_schema = table_arrow_schema(connection, database, table).await?;
    let lake_schema = (options.format).lake_schema(&user_schema, target.partitioned)?;
    let user_fields = user_schema.fields().len();
    let (start, hot) = read_held_changelog(
        &target,
        connection,
        marks.earliest,
        end,
        options,
        &mut report,
    )
    .await?;
    let hot = Side::from_batches(
        &hot,
        &lake_schema,
        user_fields,
        &target.key_columns,
        Origin::Hot,
    )?;

    // 4. The lake side, at the pinned version.
    say(PHASE_LAKE);
    let lake_side = match &lake {
        Some(l) => {
            let batches = read_lake_rows(&target, &lake_uri, l, &start, options, &mut report);
            let batches = batches.await?;
            let (fields, keys) = (user_fields, &target.key_columns);
            Side::from_batches(&batches, &lake_schema, fields, keys, Origin::Lake)?
        }
        None => Side::empty(&lake_schema, user_fields, &target.key_columns)?,
    };

    // 5. Compare.
    say(PHASE_COMPARING);
    report.compare(&hot, &lake_side, &start, options.show_max)?;
    Ok(report)
}

/// 4. The lake's rows at the pinned version that the comparison takes: of the partitions the
/// hot store still has, at the offsets it still holds. Keys held more than once (a primary-key
/// table) go into the report.
async fn read_lake_rows(
    target: &Target,
    lake_uri: &str,
    lake: &LakeOffsets,
    start: &BTreeMap<BucketKey, i64>,
    options: &VerifyOptions,
    report: &mut TableReport,
) -> Result<Vec<RecordBatch>> {
    let (storage, version) = (&options.storage_options, lake.delta_version);
    let read = options
        .format
        .read_version(lake_uri, storage, version, FILE_COLUMN);
    let mut batches = read.await?;
    if target.primary_key {
        let (keys, shown) =
            keys_with_several_rows(&batches, &target.key_columns, options.show_max)?;
        report.duplicate_keys = keys;
        if keys > 0 {
            report.details.push(format!(
                "{keys} keys have more than one row in the lake (a primary-key table holds one row per key):"
            ));
            report.details.extend(shown);
        }
    }
    if target.partitioned {
        batches = without_dropped_partitions(batches, start, report)?;
    }
    held_lake_rows(batches, start, target.primary_key)
}

/// The lake rows of partitions the hot store still has; how many rows of dropped ones were
/// left out goes into the report.
fn without_dropped_partitions(
    batches: Vec<RecordBatch>,
    start: &BTreeMap<BucketKey, i64>,
    report: &mut TableReport,
) -> Result<Vec<RecordBatch>> {
    let (kept, dropped) = split_dropped_partitions(batches, start)?;
    if dropped > 0 {
        report.details.push(format!(
            "{dropped} lake rows of partitions the hot store no longer has (dropped) \
             are not compared"
        ));
    }
    Ok(kept)
}

/// The table being verified, as the hot store describes it.
struct Target {
    name: String,
    path: TablePath,
    primary_key: bool,
    key_columns: Vec<String>,
    table_id: i64,
    partitioned: bool,
    /// Every bucket (of every partition) as the marks were captured.
    bucket_ids: Vec<BucketKey>,
}

/// Step 1's capture: every bucket's high watermark and earliest held offset.
struct Marks {
    high: BTreeMap<BucketKey, i64>,
    earliest: BTreeMap<BucketKey, i64>,
}

impl Target {
    /// The table's description; an unknown table names the lake-enabled ones, a table without
    /// a lake says so.
    async fn look_up(
        connection: &FlussConnection,
        admin: &FlussAdmin,
        database: &str,
        table: &str,
    ) -> Result<Target> {
        let name = format!("{database}.{table}");
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
        if !silt_connectors::fluss::is_lake_enabled(&info) {
            bail!(
                "table {name} is not lake-enabled ({DATALAKE_ENABLED} is not true), so it has no lake to verify"
            );
        }
        Ok(Target {
            name,
            path,
            primary_key: info.has_primary_key(),
            key_columns: info.get_primary_keys().clone(),
            table_id: info.get_table_id(),
            partitioned: info.is_partitioned(),
            bucket_ids: Vec::new(),
        })
    }

    /// 1. The marks the lake must reach.
    async fn marks(&self, connection: &FlussConnection) -> Result<Marks> {
        Ok(Marks {
            high: self.offsets(connection, OffsetSpec::Latest).await?,
            earliest: self.offsets(connection, OffsetSpec::Earliest).await?,
        })
    }

    async fn offsets(
        &self,
        connection: &FlussConnection,
        spec: OffsetSpec,
    ) -> Result<BTreeMap<BucketKey, i64>> {
        let which = match spec {
            OffsetSpec::Earliest => "earliest offsets",
            _ => "offsets",
        };
        list_bucket_offsets(connection, &self.path, spec)
            .await
            .map_err(fluss(format!("list {which} of {}", self.name)))
    }
}

/// The offsets the lake at `lake_uri` committed for the target's buckets.
async fn read_lake_offsets(
    target: &Target,
    lake_uri: &str,
    options: &VerifyOptions,
) -> Result<Option<LakeOffsets>> {
    let (uri, storage, buckets) = (lake_uri, &options.storage_options, &target.bucket_ids);
    options
        .format
        .committed_offsets(uri, storage, target.table_id, buckets)
        .await
        .with_context(|| format!("reading the lake offsets of {} at {lake_uri}", target.name))
}

/// The progress of the wait: how many of the captured offsets the lake covers.
fn say_waiting(
    target: &Target,
    marks: &Marks,
    lake: &BTreeMap<BucketKey, i64>,
    options: &VerifyOptions,
) {
    let (mut covered, mut needed) = (0i64, 0i64);
    for b in &target.bucket_ids {
        let hw = marks.high.get(b).copied().unwrap_or(0);
        covered += lake.get(b).copied().unwrap_or(0).min(hw);
        needed += hw;
    }
    options.progress.set_message(format!(
        "{}: {PHASE_WAITING}: the lake holds {covered} of {needed} offsets",
        target.name
    ));
}

/// The share of the offsets the lake holds, from a [`say_waiting`] message (after its table).
fn waiting_fraction(message: &str) -> Option<f64> {
    let rest = message.strip_prefix(PHASE_WAITING)?;
    let (covered, needed) = rest.split_once(" holds ")?.1.split_once(" of ")?;
    let needed = needed.split_whitespace().next()?;
    let (covered, needed): (f64, f64) = (covered.parse().ok()?, needed.parse().ok()?);
    Some(if needed > 0.0 { covered / needed } else { 1.0 })
}

/// 2. Waits, inside the deadline, until the lake's txn offsets reach the high watermarks, and
/// answers the lake read last (`None` inside: no lake yet). Answers `None` when the deadline
/// passed first, with the report saying how far the lake got.
async fn wait_for_lake(
    target: &Target,
    marks: &Marks,
    lake_uri: &str,
    options: &VerifyOptions,
    report: &mut TableReport,
) -> Result<Option<Option<LakeOffsets>>> {
    let deadline = Instant::now() + options.deadline;
    loop {
        let lake = match read_lake_offsets(target, lake_uri, options).await {
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
        let behind: Vec<String> = target
            .bucket_ids
            .iter()
            .filter_map(|b| {
                let (hw, at) = (
                    marks.high.get(b).copied().unwrap_or(0),
                    offsets.get(b).copied(),
                );
                (at.unwrap_or(0) < hw).then(|| format!("{b}: lake {} < hw {hw}", at.unwrap_or(0)))
            })
            .collect();
        if behind.is_empty() || !options.wait_for_lake {
            return Ok(Some(lake));
        }
        say_waiting(target, marks, &offsets, options);
        if Instant::now() >= deadline {
            report.verdict = Verdict::DeadlinePassed;
            report.details.push(format!(
                "the lake did not reach the high watermarks within {:?}: {}",
                options.deadline,
                behind.join(", ")
            ));
            for b in &target.bucket_ids {
                report.buckets.insert(
                    *b,
                    (
                        marks.earliest.get(b).copied().unwrap_or(0),
                        marks.high.get(b).copied().unwrap_or(0),
                        offsets.get(b).copied().unwrap_or(0),
                    ),
                );
            }
            report.delta_version = lake.map(|l| l.delta_version);
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The end of the comparison per bucket: the pinned lake version's txn offsets. Answers `None`
/// (with the report saying why) when the lake claims offsets the hot store never had: that
/// is damage, not lag.
async fn pin_end_offsets(
    target: &Target,
    connection: &FlussConnection,
    marks: &Marks,
    lake: &Option<LakeOffsets>,
    report: &mut TableReport,
) -> Result<Option<BTreeMap<BucketKey, i64>>> {
    let lake_offsets = lake
        .as_ref()
        .map(|l| l.bucket_offsets.clone())
        .unwrap_or_default();
    report.delta_version = lake.as_ref().map(|l| l.delta_version);
    let mut end_offsets = BTreeMap::new();
    for b in &target.bucket_ids {
        let to = lake_offsets.get(b).copied().unwrap_or(0);
        end_offsets.insert(*b, to);
        report.buckets.insert(
            *b,
            (
                marks.earliest.get(b).copied().unwrap_or(0),
                marks.high.get(b).copied().unwrap_or(0),
                to,
            ),
        );
    }
    let now_high = target.offsets(connection, OffsetSpec::Latest).await?;
    let beyond: Vec<String> = end_offsets
        .iter()
        .filter(|(b, to)| **to > now_high.get(b).copied().unwrap_or(0))
        .map(|(b, to)| {
            format!(
                "{b}: lake txn offset {to} > hot high watermark {}",
                now_high.get(b).copied().unwrap_or(0)
            )
        })
        .collect();
    if !beyond.is_empty() {
        report.details.push(format!(
            "the lake claims offsets the hot store does not have: {}",
            beyond.join(", ")
        ));
        return Ok(None);
    }
    Ok(Some(end_offsets))
}

/// 3. Reads the changelog from each bucket's earliest held offset up to `end`. Hot retention
/// may move a log start while verify reads: then it reads again from the new starts (a few
/// times; retention runs every few minutes in use). Answers the starts it read from, and the
/// batches.
async fn read_held_changelog(
    target: &Target,
    connection: &FlussConnection,
    mut earliest: BTreeMap<BucketKey, i64>,
    end: BTreeMap<BucketKey, i64>,
    options: &VerifyOptions,
    report: &mut TableReport,
) -> Result<(BTreeMap<BucketKey, i64>, Vec<arrow::array::RecordBatch>)> {
    let mut attempt = 0;
    loop {
        let start: BTreeMap<BucketKey, i64> = target
            .bucket_ids
            .iter()
            .map(|b| (*b, earliest.get(b).copied().unwrap_or(0)))
            .collect();
        match read_changelog(
            &options.bootstrap,
            options.credentials.as_ref(),
            &target.path.database().to_string(),
            &target.path.table().to_string(),
            start.clone(),
            end.clone(),
            options.read_stall_max,
        )
        .await
        {
            Ok(hot) => return Ok((start, hot)),
            // Retention moved the log start since it was read: the server's out-of-range
            // answer, or the source's refusal to open below the start (a gap it was told of).
            Err(e)
                if attempt < RETENTION_RETRIES_MAX
                    && silt_connectors::fluss::log_start_moved(&e) =>
            {
                attempt += 1;
                earliest = target.offsets(connection, OffsetSpec::Earliest).await?;
                for (b, entry) in report.buckets.iter_mut() {
                    entry.0 = earliest.get(b).copied().unwrap_or(0);
                }
            }
            Err(e) => return Err(e),
        }
    }
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
}
