//! Query shapes against an oracle that shares no code with silt's lake reader.
//!
//! One fixture, built once per test binary: an in-process hotstore with a log table
//! `c.events` and a primary-key table `c.users` (3 buckets each), tiered by the tiering service
//! in three rounds so that the primary-key lake was compacted (a round supersedes most rows of
//! the first files, which are rewritten) and then holds deletion vectors over several files;
//! then tiering stops and a hot tail of appends, updates and deletes is written. The fixture
//! checks these premises from the Delta log itself and fails if one does not hold.
//!
//! The oracle reads each table's changelog through the fluss-rs client (every record with its
//! bucket, offset, timestamp and change type), and materializes, as MemTables of a plain
//! DataFusion session:
//! - `db.t`: a log table's every row; a primary-key table's latest image per key, deletes
//!   removed;
//! - `db.t$lake`: the same up to the lake's txn offsets (read from the `_delta_log` JSON), with
//!   the system columns as the lake stores them: `__bucket`, and for a log row its own
//!   `__offset` and `__timestamp`; for a primary-key row those of the change that wrote its
//!   latest image (the `+I` or `+U` record), which compaction carries over unchanged;
//! - `db.t$lake$snapshots`: one row per commit file of the `_delta_log`, with the txn offsets
//!   accumulated up to it.
//!
//! Tests: the corpus of `tests/corpus/queries.sql` (see its header for the format); the query
//! shapes that failed over deletion vectors, as a regression table, with the file counts the
//! deadline message reports; and Spark with delta-spark as an outside reader of the
//! primary-key lake (skipped, saying why, without pyspark, delta-spark or Java).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use arrow::array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::catalog::MemorySchemaProvider;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, TableDescriptor, TablePath};
use fluss::record::ChangeType;
use fluss::row::{DataGetters as _, GenericRow};
use fluss::rpc::message::OffsetSpec;
use silt_connectors::lake::{LakeCatalog, LakeCatalogConfig, QueryProgress, TableName};
use silt_hotstore::ServerHandle;
use silt_jobs::query::{QueryConfig, QueryRequest, QueryResult, QueryService};

use silt_testkit::tiering::{self, Driver, wait_caught_up};
use silt_testkit::{hotstore, wait};

const DB: &str = "c";
const BUCKETS: i32 = 3;
const TABLES: [&str; 2] = ["events", "users"];
const DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// What is written: deterministic rows, so a failure reproduces.

/// One row of either table (both have the same columns).
#[derive(Debug, Clone, PartialEq)]
struct Values {
    id: i64,
    grp: i32,
    name: Option<String>,
    score: f64,
    flag: bool,
}

impl Values {
    fn row(&self) -> GenericRow<'_> {
        let mut row = GenericRow::new(5);
        row.set_field(0, self.id);
        row.set_field(1, self.grp);
        if let Some(name) = &self.name {
            row.set_field(2, name.as_str());
        }
        row.set_field(3, self.score);
        row.set_field(4, self.flag);
        row
    }
}

/// Event `i` of the log table (scores are multiples of 0.25, so sums are exact).
fn event(i: i64) -> Values {
    Values {
        id: i,
        grp: (i % 7) as i32,
        name: (i % 11 != 0).then(|| format!("n{}", i % 50)),
        score: (i % 40) as f64 * 0.25,
        flag: i % 3 == 0,
    }
}

/// The image of user `k` written in round `round`.
fn user(k: i64, round: i64) -> Values {
    Values {
        id: k,
        grp: ((k + round) % 7) as i32,
        name: ((k + round) % 13 != 0).then(|| format!("u{k}-r{round}")),
        score: ((k * 3 + round * 5) % 97) as f64 * 0.5,
        flag: (k + round) % 2 == 0,
    }
}

#[derive(Debug, Clone)]
enum UserOp {
    Upsert(Values),
    Delete(i64),
}

/// The users changes of `round`. Round 1 inserts keys 0..600; round 2 supersedes 70% of them
/// (updates and deletes), so every first file is at least half deleted and gets compacted;
/// round 3 touches 15% of the keys of round 2's files (vectors, no compaction), re-inserts
/// deleted keys and adds new ones; round 4 is the hot tail: updates, deletes, new keys, a key
/// inserted and deleted in the tail, a delete of a key that never existed and an upsert that
/// changes nothing.
fn user_round(round: i64) -> Vec<UserOp> {
    let upsert = |k: i64| UserOp::Upsert(user(k, round));
    match round {
        1 => (0..600).map(upsert).collect(),
        2 => (0..600)
            .filter(|k| k % 5 < 3)
            .map(upsert)
            .chain((0..600).filter(|k| k % 10 == 9).map(UserOp::Delete))
            .collect(),
        3 => (0..600)
            .filter(|k| k % 10 == 3 || k % 20 == 9)
            .chain(600..640)
            .map(upsert)
            .chain((0..600).filter(|k| k % 20 == 1).map(UserOp::Delete))
            .collect(),
        4 => (0..640)
            .filter(|k| k % 13 == 0)
            .chain(640..660)
            .map(upsert)
            .chain((0..660).filter(|k| k % 17 == 0).map(UserOp::Delete))
            .chain([
                UserOp::Delete(645),
                UserOp::Delete(9_999),
                UserOp::Upsert(user(2, 2)),
            ])
            .collect(),
        _ => unreachable!("rounds are 1..=4"),
    }
}

/// Events of each round: rounds 1-3 are tiered, round 4 stays in the hot tail.
fn event_round(round: i64) -> std::ops::Range<i64> {
    match round {
        1 => 0..1_500,
        2 => 1_500..2_500,
        3 => 2_500..2_700,
        4 => 2_700..3_200,
        _ => unreachable!("rounds are 1..=4"),
    }
}

async fn create_tables(connection: &FlussConnection) -> Result<()> {
    let admin = connection.get_admin()?;
    admin.create_database(DB, None, false).await?;
    for table in TABLES {
        let mut schema = fluss::metadata::Schema::builder()
            .column("id", DataTypes::bigint())
            .column("grp", DataTypes::int())
            .column("name", DataTypes::string())
            .column("score", DataTypes::double())
            .column("flag", DataTypes::boolean());
        let mut bucket_keys = Vec::new();
        if table == "users" {
            schema = schema.primary_key(vec!["id"])?;
            bucket_keys.push("id".to_string());
        }
        let descriptor = TableDescriptor::builder()
            .schema(schema.build()?)
            .distributed_by(Some(BUCKETS), bucket_keys)
            .property("table.datalake.enabled", "true")
            .property("table.datalake.freshness", "300ms")
            .build()?;
        admin
            .create_table(&TablePath::new(DB, table), &descriptor, false)
            .await?;
    }
    Ok(())
}

async fn write_round(connection: &FlussConnection, round: i64) -> Result<()> {
    let events = connection.get_table(&TablePath::new(DB, "events")).await?;
    let appender = events.new_append()?.create_writer()?;
    for i in event_round(round) {
        appender.append(&event(i).row())?;
    }
    appender.flush().await?;
    let users = connection.get_table(&TablePath::new(DB, "users")).await?;
    let upserter = users.new_upsert()?.create_writer()?;
    for op in user_round(round) {
        match op {
            UserOp::Upsert(v) => {
                upserter.upsert(&v.row())?;
            }
            UserOp::Delete(k) => {
                let mut key = GenericRow::new(5);
                key.set_field(0, k);
                upserter.delete(&key)?;
            }
        }
    }
    upserter.flush().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The changelog, read through the fluss-rs client, and the Delta log, read as JSON.

/// One changelog record.
#[derive(Debug, Clone)]
struct Record {
    bucket: i32,
    offset: i64,
    timestamp_ms: i64,
    change: ChangeType,
    values: Values,
}

/// Every record of `table` below the high watermarks of now, in offset order per bucket.
async fn read_changelog(connection: &FlussConnection, table: &str) -> Result<Vec<Record>> {
    let path = TablePath::new(DB, table);
    let buckets: Vec<i32> = (0..BUCKETS).collect();
    let ends = connection
        .get_admin()?
        .list_offsets(&path, &buckets, OffsetSpec::Latest)
        .await?;
    let scanner = connection
        .get_table(&path)
        .await?
        .new_scan()
        .create_log_scanner()?;
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for (bucket, end) in &ends {
        if *end > 0 {
            scanner.subscribe(*bucket, 0).await?;
            next.insert(*bucket, 0);
        }
    }
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while next.iter().any(|(b, n)| *n < ends[b]) {
        ensure!(
            Instant::now() < deadline,
            "reading the changelog of {table} timed out at {next:?} of {ends:?}"
        );
        let polled = scanner.poll(Duration::from_millis(500)).await?;
        for (bucket, batch) in polled.into_records_by_buckets() {
            let bucket = bucket.bucket_id();
            for r in batch {
                let expected = next.get(&bucket).copied().unwrap_or(0);
                if r.offset() < expected || r.offset() >= ends[&bucket] {
                    continue; // a re-fetch, or past the high watermark captured above
                }
                ensure!(
                    r.offset() == expected,
                    "bucket {bucket} of {table}: offset {} after {expected}",
                    r.offset()
                );
                let row = r.row();
                records.push(Record {
                    bucket,
                    offset: r.offset(),
                    timestamp_ms: r.timestamp(),
                    change: *r.change_type(),
                    values: Values {
                        id: row.get_long(0)?,
                        grp: row.get_int(1)?,
                        name: if row.is_null_at(2)? {
                            None
                        } else {
                            Some(row.get_string(2)?.to_string())
                        },
                        score: row.get_double(3)?,
                        flag: row.get_boolean(4)?,
                    },
                });
                next.insert(bucket, expected + 1);
            }
        }
    }
    Ok(records)
}

/// One commit file of a Delta log.
#[derive(Debug, Clone)]
struct Commit {
    version: i64,
    committed_at_ms: Option<i64>,
    operation: Option<String>,
    checkpoint_id: Option<i64>,
    /// silt's txn end offsets per bucket after this commit (accumulated from version 0).
    offsets: BTreeMap<i32, i64>,
    adds: Vec<AddedFile>,
    removes: Vec<String>,
}

#[derive(Debug, Clone)]
struct AddedFile {
    path: String,
    bucket: i32,
    min_offset: Option<i64>,
    vector: bool,
}

/// The commits of the Delta table at `uri` (a local path), read from `_delta_log/*.json`. The
/// txn app ids are `silt-<table id>-<bucket>` (the tiering sink's documented naming).
fn read_delta_log(uri: &str, table_id: i64) -> Result<Vec<Commit>> {
    let dir = Path::new(uri.strip_prefix("file://").unwrap_or(uri)).join("_delta_log");
    let mut files: Vec<(i64, PathBuf)> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let version = name.strip_suffix(".json")?.parse::<i64>().ok()?;
            Some((version, e.path()))
        })
        .collect();
    files.sort();
    let prefix = format!("silt-{table_id}-");
    let mut offsets = BTreeMap::new();
    let mut commits = Vec::new();
    for (version, path) in files {
        let text = std::fs::read_to_string(&path)?;
        let mut commit = Commit {
            version,
            committed_at_ms: None,
            operation: None,
            checkpoint_id: None,
            offsets: BTreeMap::new(),
            adds: Vec::new(),
            removes: Vec::new(),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let action: serde_json::Value = serde_json::from_str(line)?;
            if let Some(info) = action.get("commitInfo") {
                commit.committed_at_ms = info["timestamp"].as_i64();
                commit.operation = info["operation"].as_str().map(str::to_string);
                commit.checkpoint_id = info["silt.checkpointId"].as_i64();
            }
            if let Some(txn) = action.get("txn") {
                let bucket = txn["appId"]
                    .as_str()
                    .and_then(|a| a.strip_prefix(&prefix))
                    .and_then(|b| b.parse::<i32>().ok());
                if let (Some(bucket), Some(v)) = (bucket, txn["version"].as_i64()) {
                    offsets.insert(bucket, v);
                }
            }
            if let Some(add) = action.get("add") {
                let stats: Option<serde_json::Value> = add["stats"]
                    .as_str()
                    .and_then(|s| serde_json::from_str(s).ok());
                commit.adds.push(AddedFile {
                    path: add["path"]
                        .as_str()
                        .context("add without path")?
                        .to_string(),
                    bucket: add["partitionValues"]["__bucket"]
                        .as_str()
                        .and_then(|b| b.parse().ok())
                        .context("add without a __bucket partition value")?,
                    min_offset: stats.and_then(|s| s["minValues"]["__offset"].as_i64()),
                    vector: !add["deletionVector"].is_null(),
                });
            }
            if let Some(remove) = action.get("remove") {
                commit.removes.push(
                    remove["path"]
                        .as_str()
                        .context("remove without path")?
                        .into(),
                );
            }
        }
        commit.offsets = offsets.clone();
        commits.push(commit);
    }
    Ok(commits)
}

/// The files of the newest version: path -> whether it carries a deletion vector.
fn live_files(commits: &[Commit]) -> BTreeMap<String, bool> {
    let mut live = BTreeMap::new();
    for c in commits {
        for r in &c.removes {
            live.remove(r);
        }
        for a in &c.adds {
            live.insert(a.path.clone(), a.vector);
        }
    }
    live
}

/// Whether a commit rewrote rows of earlier commits: it adds a new file (no vector) holding a
/// row whose offset lies below its bucket's txn offset before the commit.
fn compacted(commits: &[Commit]) -> bool {
    commits.windows(2).any(|w| {
        let (before, commit) = (&w[0], &w[1]);
        commit.adds.iter().any(|a| {
            let tiered = before.offsets.get(&a.bucket).copied().unwrap_or(0);
            !a.vector && a.min_offset.is_some_and(|o| o < tiered)
        })
    })
}

// ---------------------------------------------------------------------------------------------
// The fixture.

struct TableState {
    records: Vec<Record>,
    commits: Vec<Commit>,
    lake_uri: String,
    primary_key: bool,
}

impl TableState {
    /// The lake's txn offsets (its newest version).
    fn lake_offsets(&self) -> BTreeMap<i32, i64> {
        self.commits
            .last()
            .map(|c| c.offsets.clone())
            .unwrap_or_default()
    }

    /// The rows `db.t$lake` (`lake`) or `db.t` must hold, each with the record that wrote it.
    fn rows(&self, lake: bool) -> Vec<&Record> {
        let offsets = self.lake_offsets();
        let visible = self
            .records
            .iter()
            .filter(|r| !lake || r.offset < offsets.get(&r.bucket).copied().unwrap_or(0));
        if !self.primary_key {
            return visible.collect();
        }
        let mut latest: BTreeMap<i64, &Record> = BTreeMap::new();
        for r in visible {
            match r.change {
                ChangeType::Insert | ChangeType::UpdateAfter => {
                    latest.insert(r.values.id, r);
                }
                ChangeType::Delete => {
                    latest.remove(&r.values.id);
                }
                ChangeType::UpdateBefore => {}
                ChangeType::AppendOnly => panic!("an append in a primary-key changelog"),
            }
        }
        latest.into_values().collect()
    }
}

struct Fixture {
    bootstrap: String,
    lake_root: String,
    tables: BTreeMap<&'static str, TableState>,
}

/// The fixture, built on first use on a runtime of its own that keeps the hotstore running
/// for the rest of the test binary.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("corpus-hotstore".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime for the fixture");
                runtime.block_on(async move {
                    match build_fixture().await {
                        Ok((fixture, server)) => {
                            let _ = tx.send(Ok(fixture));
                            std::future::pending::<()>().await;
                            drop(server);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                })
            })
            .expect("the fixture thread");
        match rx.recv() {
            Ok(Ok(fixture)) => fixture,
            Ok(Err(e)) => panic!("building the corpus fixture: {e:#}"),
            Err(_) => panic!("the corpus fixture thread died"),
        }
    })
}

/// A scratch directory under cargo's per-target temp dir (no destructor runs at the end of a
/// test binary, so the fixture removes what runs before it left, once it is an hour old).
fn scratch_dir() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(3600));
        if old
            && entry
                .file_name()
                .to_string_lossy()
                .starts_with("query-corpus-")
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(tempfile::Builder::new()
        .prefix("query-corpus-")
        .tempdir_in(root)?
        .keep())
}

async fn build_fixture() -> Result<(Fixture, Arc<ServerHandle>)> {
    let started = Instant::now();
    let dir = scratch_dir()?;
    let server = hotstore::start_for_tiering(&dir, BUCKETS).await?;
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    create_tables(&connection).await?;

    // Rounds 1-3 tiered one after the other, so each is at least one commit of its own.
    let tiering = tiering::service(&dir, &server);
    for round in 1..=3 {
        write_round(&connection, round).await?;
        wait_caught_up(
            &tiering,
            Driver::Wait,
            TABLES.len(),
            Duration::from_secs(120),
        )
        .await?;
    }
    let status = tiering.status().await?;
    tiering.shutdown(Duration::from_secs(30)).await;
    // Round 4 stays in the hot tail.
    write_round(&connection, 4).await?;

    let mut tables = BTreeMap::new();
    for table in TABLES {
        let lake_uri = status
            .iter()
            .find(|s| s.table == table)
            .map(|s| s.lake_uri.clone())
            .with_context(|| format!("tiering never reported {DB}.{table}"))?;
        let table_id = connection
            .get_admin()?
            .get_table_info(&TablePath::new(DB, table))
            .await?
            .get_table_id();
        tables.insert(
            table,
            TableState {
                records: read_changelog(&connection, table).await?,
                commits: read_delta_log(&lake_uri, table_id)?,
                lake_uri,
                primary_key: table == "users",
            },
        );
    }
    check_premises(&tables)?;
    for (name, t) in &tables {
        let live = live_files(&t.commits);
        eprintln!(
            "corpus fixture: {DB}.{name}: {} changelog records, {} commits, {} live files ({} with a deletion vector), {} rows in $lake, {} in the view",
            t.records.len(),
            t.commits.len(),
            live.len(),
            live.values().filter(|v| **v).count(),
            t.rows(true).len(),
            t.rows(false).len()
        );
    }
    eprintln!(
        "corpus fixture built in {:.1} s under {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    let fixture = Fixture {
        bootstrap,
        lake_root: dir.join("lake").to_string_lossy().to_string(),
        tables,
    };
    Ok((fixture, server))
}

/// What the corpus claims to test must be true of the fixture.
fn check_premises(tables: &BTreeMap<&'static str, TableState>) -> Result<()> {
    let users = &tables["users"];
    let live = live_files(&users.commits);
    let vectored = live.values().filter(|v| **v).count();
    ensure!(
        vectored >= 2,
        "the users lake must hold deletion vectors over several files; live files: {live:?}"
    );
    ensure!(
        compacted(&users.commits),
        "no users commit compacted earlier rows: {:#?}",
        users.commits
    );
    let offsets = users.lake_offsets();
    let tail: BTreeSet<String> = users
        .records
        .iter()
        .filter(|r| r.offset >= offsets.get(&r.bucket).copied().unwrap_or(0))
        .map(|r| format!("{:?}", r.change))
        .collect();
    ensure!(
        tail.contains("UpdateAfter") && tail.contains("Delete"),
        "the users hot tail must hold updates and deletes: {tail:?}"
    );
    for (name, table) in tables {
        let lake = table.rows(true).len();
        let view = table.rows(false).len();
        ensure!(
            lake > 0 && view > 0 && table.commits.len() >= 4,
            "{name}: lake {lake} rows, view {view} rows, {} commits",
            table.commits.len()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The oracle: a plain DataFusion session over MemTables of the rows above.

fn user_fields() -> Vec<Field> {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("flag", DataType::Boolean, true),
    ]
}

fn oracle_batch(rows: &[&Record], lake: bool) -> Result<RecordBatch> {
    let mut fields = user_fields();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r.values.id),
        )),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|r| r.values.grp),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.values.name.as_deref()),
        )),
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| r.values.score),
        )),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.values.flag)),
        )),
    ];
    if lake {
        fields.extend([
            Field::new("__bucket", DataType::Int32, false),
            Field::new("__offset", DataType::Int64, false),
            Field::new(
                "__timestamp",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
        ]);
        columns.extend([
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.bucket))) as ArrayRef,
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.offset))),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    rows.iter().map(|r| r.timestamp_ms * 1000),
                )
                .with_timezone("UTC"),
            ),
        ]);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn snapshots_batch(commits: &[Commit]) -> Result<RecordBatch> {
    let json = |offsets: &BTreeMap<i32, i64>| {
        let parts: Vec<String> = offsets
            .iter()
            .map(|(b, o)| format!("\"{b}\":{o}"))
            .collect();
        format!("{{{}}}", parts.join(","))
    };
    // The columns of silt's `$snapshots` table; the schema (names, types, nullability) follows.
    let version = Int64Array::from_iter_values(commits.iter().map(|c| c.version));
    let committed_at =
        TimestampMillisecondArray::from_iter(commits.iter().map(|c| c.committed_at_ms))
            .with_timezone("UTC");
    let operation = StringArray::from_iter(commits.iter().map(|c| c.operation.as_deref()));
    let checkpoint_id = Int64Array::from_iter(commits.iter().map(|c| c.checkpoint_id));
    let offsets = StringArray::from_iter_values(commits.iter().map(|c| json(&c.offsets)));
    Ok(RecordBatch::try_from_iter_with_nullable([
        ("version", Arc::new(version) as ArrayRef, false),
        ("committed_at", Arc::new(committed_at), true),
        ("operation", Arc::new(operation), true),
        ("checkpoint_id", Arc::new(checkpoint_id), true),
        ("bucket_offsets", Arc::new(offsets), false),
    ])?)
}

fn oracle(f: &Fixture) -> Result<SessionContext> {
    let ctx = SessionContext::new();
    let schema = Arc::new(MemorySchemaProvider::new());
    ctx.catalog("datafusion")
        .context("datafusion's default catalog")?
        .register_schema(DB, schema.clone())?;
    for (name, table) in &f.tables {
        let batches = [
            (name.to_string(), oracle_batch(&table.rows(false), false)?),
            (
                format!("{name}$lake"),
                oracle_batch(&table.rows(true), true)?,
            ),
            (
                format!("{name}$lake$snapshots"),
                snapshots_batch(&table.commits)?,
            ),
        ];
        for (table_name, batch) in batches {
            let mem = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
            datafusion::catalog::SchemaProvider::register_table(
                schema.as_ref(),
                table_name,
                Arc::new(mem),
            )?;
        }
    }
    Ok(ctx)
}

fn service(f: &Fixture) -> QueryService {
    QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
        f.bootstrap.clone(),
        f.lake_root.clone(),
    )))
}

/// A [`service`] whose queries run on `runtime` rather than the process's query runtime.
fn service_on(f: &Fixture, runtime: tokio::runtime::Handle) -> QueryService {
    let mut config = QueryConfig::new(LakeCatalogConfig::new(
        f.bootstrap.clone(),
        f.lake_root.clone(),
    ));
    config.runtime = Some(runtime);
    QueryService::new(config)
}

// ---------------------------------------------------------------------------------------------
// Cases, targets and the comparison.

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    /// Equal as multisets of rows.
    Bag,
    /// Equal row by row.
    Ordered,
    /// Answers, and the plan text contains the needle.
    Explain(String),
}

#[derive(Debug, Clone)]
struct Case {
    line: usize,
    mode: Mode,
    tags: Vec<String>,
    sql: String,
}

/// Parses the corpus format (see the header of `tests/corpus/queries.sql`).
fn parse_corpus(text: &str) -> Result<Vec<Case>> {
    let mut cases: Vec<Case> = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix("-- ") {
            let mut words = header.split_whitespace();
            let mode = match words.next() {
                Some("bag") => Mode::Bag,
                Some("ordered") => Mode::Ordered,
                Some("explain") => Mode::Explain(
                    words
                        .next()
                        .with_context(|| format!("line {line_no}: explain needs a needle"))?
                        .to_string(),
                ),
                other => bail!("line {line_no}: unknown mode {other:?} (bag, ordered, explain)"),
            };
            let tags: Vec<String> = words
                .map(|w| {
                    w.strip_prefix('@')
                        .filter(|t| ["lake", "view", "log", "pk"].contains(t))
                        .map(str::to_string)
                        .with_context(|| {
                            format!("line {line_no}: {w:?} is not a tag (@lake, @view, @log, @pk)")
                        })
                })
                .collect::<Result<_>>()?;
            cases.push(Case {
                line: line_no,
                mode,
                tags,
                sql: String::new(),
            });
            open = true;
        } else if line.trim().is_empty() {
            open = false;
        } else {
            let case = cases
                .last_mut()
                .filter(|_| open)
                .with_context(|| format!("line {line_no}: a statement without a header"))?;
            if !case.sql.is_empty() {
                case.sql.push('\n');
            }
            case.sql.push_str(line);
        }
    }
    for case in &cases {
        ensure!(
            !case.sql.is_empty(),
            "line {}: a header without a statement",
            case.line
        );
        let upper = case.sql.to_uppercase();
        match &case.mode {
            Mode::Ordered => ensure!(
                upper.contains("ORDER BY"),
                "line {}: an ordered case needs an ORDER BY",
                case.line
            ),
            Mode::Explain(_) => ensure!(
                upper.starts_with("EXPLAIN"),
                "line {}: an explain case must be an EXPLAIN",
                case.line
            ),
            Mode::Bag => {}
        }
    }
    Ok(cases)
}

/// Where a case runs: one tier of one table.
#[derive(Debug, Clone)]
struct Target {
    table: &'static str,
    lake: bool,
}

impl Target {
    fn all() -> Vec<Target> {
        TABLES
            .iter()
            .flat_map(|&table| [true, false].map(|lake| Target { table, lake }))
            .collect()
    }

    fn name(&self) -> String {
        format!(
            "{DB}.{}{}",
            self.table,
            if self.lake { "$lake" } else { "" }
        )
    }

    fn has(&self, tag: &str) -> bool {
        match tag {
            "lake" => self.lake,
            "view" => !self.lake,
            "pk" => self.table == "users",
            "log" => self.table == "events",
            _ => false,
        }
    }

    fn sql(&self, template: &str) -> String {
        let other = Target {
            table: self.table,
            lake: !self.lake,
        };
        template
            .replace("{t}", &self.name())
            .replace("{other}", &other.name())
            .replace(
                "{snapshots}",
                &format!("{DB}.{}$lake$snapshots", self.table),
            )
    }
}

/// Rows as text, one string per row: floats to 9 significant digits (aggregation order may
/// change the last bits), NULL spelled out, every other type as Arrow displays it.
fn render(batches: &[RecordBatch]) -> Result<Vec<String>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let mut cells: Vec<Vec<String>> = vec![Vec::new(); batch.num_rows()];
        for column in batch.columns() {
            let floats: Option<Vec<Option<f64>>> = match column.data_type() {
                DataType::Float64 => column
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .map(|a| a.iter().collect()),
                DataType::Float32 => column
                    .as_any()
                    .downcast_ref::<Float32Array>()
                    .map(|a| a.iter().map(|v| v.map(f64::from)).collect()),
                _ => None,
            };
            if let Some(floats) = floats {
                for (row, v) in floats.into_iter().enumerate() {
                    cells[row].push(v.map_or("NULL".to_string(), |v| format!("{v:.8e}")));
                }
                continue;
            }
            let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
            for (row, cell) in cells.iter_mut().enumerate() {
                cell.push(formatter.value(row).try_to_string()?);
            }
        }
        rows.extend(cells.into_iter().map(|c| c.join(" | ")));
    }
    Ok(rows)
}

/// Runs `sql` through silt and, unless it is an EXPLAIN, through the oracle; `Err` says how
/// the answers differ.
async fn check(
    f: &Fixture,
    service: &QueryService,
    oracle: &SessionContext,
    mode: &Mode,
    sql: &str,
) -> Result<()> {
    let answer: QueryResult = service
        .execute(QueryRequest::new(sql, DEADLINE))
        .await
        .map_err(|e| anyhow!("silt refused it: {e}"))?;
    for read in &answer.tables {
        let name = TableName::parse(DB, read.name.trim_start_matches("c."));
        if name.variant == silt_connectors::lake::TableVariant::LakeSnapshots {
            continue;
        }
        let want =
            silt_connectors::changelog::table_buckets(f.tables[name.table.as_str()].lake_offsets());
        ensure!(
            read.lake_offsets == want,
            "{} was read at txn offsets {:?}, the Delta log says {want:?}",
            read.name,
            read.lake_offsets
        );
    }
    let got = render(&answer.batches)?;
    if let Mode::Explain(needle) = mode {
        let plan = got.join("\n");
        ensure!(
            plan.contains(needle.as_str()),
            "the plan does not mention {needle}:\n{plan}"
        );
        return Ok(());
    }
    let frame = oracle
        .sql(sql)
        .await
        .map_err(|e| anyhow!("the oracle refused it: {e}"))?;
    let want = render(&frame.collect().await?)?;
    let width = |rows: &[String]| rows.first().map(|r| r.split(" | ").count());
    ensure!(
        got.is_empty() || want.is_empty() || width(&got) == width(&want),
        "{:?} columns answered, the oracle has {:?}",
        width(&got),
        width(&want)
    );
    match mode {
        Mode::Ordered => ensure!(
            got == want,
            "in order: {}",
            wait::describe_diff(&want, &got)
        ),
        _ => {
            let (mut got, mut want) = (got, want);
            got.sort();
            want.sort();
            ensure!(got == want, "{}", wait::describe_diff(&want, &got));
        }
    }
    Ok(())
}

/// Runs every case on every target it applies to; returns how many ran, or every failure.
async fn run_cases(f: &Fixture, service: &QueryService, cases: &[Case]) -> Result<usize> {
    let oracle = oracle(f)?;
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases {
        for target in Target::all() {
            if !case.tags.iter().all(|t| target.has(t)) {
                continue;
            }
            let sql = target.sql(&case.sql);
            ran += 1;
            if let Err(e) = check(f, service, &oracle, &case.mode, &sql).await {
                failures.push(format!(
                    "line {} on {}: {sql}\n  {e:#}",
                    case.line,
                    target.name()
                ));
            }
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {ran} statements differ from the oracle:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(ran)
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// Every statement of the corpus answers on both tiers of both tables and equals the oracle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_corpus_equals_the_changelog_oracle() -> Result<()> {
    let f = tokio::task::block_in_place(fixture);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/queries.sql");
    let cases = parse_corpus(&std::fs::read_to_string(&path)?)?;
    let distinct: BTreeSet<&str> = cases.iter().map(|c| c.sql.as_str()).collect();
    ensure!(
        distinct.len() == cases.len() && cases.len() >= 60,
        "the corpus needs at least 60 distinct statements, has {} ({} cases)",
        distinct.len(),
        cases.len()
    );
    let started = Instant::now();
    let ran = run_cases(f, &service(f), &cases).await?;
    eprintln!(
        "query corpus: {} statements, {ran} runs, equal to the oracle in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Regression: every query that read the data of a primary-key lake holding deletion vectors
/// failed planning with `DV child changed Parquet source` (silt rebuilt deltalake's Parquet
/// scan to count files), on `$lake` and on the real-time view alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_over_deletion_vectors_plan_and_answer() -> Result<()> {
    let f = tokio::task::block_in_place(fixture);
    run_cases(f, &service(f), &deletion_vector_shapes()).await?;
    Ok(())
}

/// The query shapes of the deletion-vector regression, over the primary-key table.
fn deletion_vector_shapes() -> Vec<Case> {
    let shapes = [
        "SELECT sum(score) FROM {t}",
        "SELECT count(*), count(DISTINCT id) FROM {t}",
        "SELECT count(*) FROM (SELECT * FROM {t} LIMIT 3)",
        "SELECT id, name FROM {t} WHERE id < 100",
        "SELECT id, score FROM {t} ORDER BY id DESC LIMIT 3",
        "SELECT count(*), sum(a.score) FROM {t} a JOIN {t} b ON a.id = b.id",
        "SELECT count(*), sum(b.score) FROM {t} a JOIN {other} b ON a.id = b.id",
    ];
    shapes
        .iter()
        .enumerate()
        .map(|(i, sql)| Case {
            line: i + 1,
            mode: if sql.contains("ORDER BY") {
                Mode::Ordered
            } else {
                Mode::Bag
            },
            tags: vec!["pk".to_string()],
            sql: sql.to_string(),
        })
        .collect()
}

/// Regression: deltalake loads each deletion vector in a blocking task that waits for a read
/// of the vector's file, and DataFusion's default store for `file://` made that read a blocking
/// task too. A blocking pool smaller than the scan's files with vectors then deadlocked (the
/// soak's queries timed out and tiering stopped under a pool of 16), and an unbounded pool grew
/// a thread per file and kept them. Reads now run on silt's I/O threads: a pool of one thread
/// answers every shape.
#[test]
fn deletion_vector_scans_finish_on_a_blocking_pool_of_one_thread() -> Result<()> {
    let f = fixture();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()?;
    let (done, outcome) = std::sync::mpsc::channel();
    // The queries plan and execute on this runtime, not the process's query runtime.
    let service = service_on(f, runtime.handle().clone());
    runtime.spawn(async move {
        let _ = done.send(run_cases(f, &service, &deletion_vector_shapes()).await);
    });
    let outcome = outcome.recv_timeout(Duration::from_secs(60));
    runtime.shutdown_background();
    match outcome {
        Ok(answered) => answered.map(|_| ()),
        Err(_) => bail!(
            "the deletion-vector queries did not finish in 60 s on a blocking pool of one thread: \
             a blocking task waits for another that cannot start"
        ),
    }
}

/// What a scan's file counts must be once its query finished.
#[derive(Debug, Clone, Copy)]
enum Files {
    /// Every live file planned, each done once.
    All,
    /// Delta's file skipping planned some of the live files; each done once.
    Skipped,
    /// A limit above the scan dropped it in the middle of a file: fewer done than planned.
    StoppedEarly,
}

/// The files a deadline message counts, on the plan that ran: every planned file is counted
/// done once, with deletion vectors (regression: the scan failed) and without them with a
/// pruning predicate (regression: a second Parquet reader per file for its bloom filters
/// counted files twice); a LIMIT above a deletion-vector scan, which takes no limit itself,
/// leaves the file it stopped in not done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_counts_come_from_the_scans_that_ran() -> Result<()> {
    let f = tokio::task::block_in_place(fixture);
    let catalog = LakeCatalog::connect(LakeCatalogConfig::new(
        f.bootstrap.clone(),
        f.lake_root.clone(),
    ))
    .await?;
    // (table, statement over `t`, scans of `t`, expected counts)
    let cases = [
        ("users", "SELECT sum(score) FROM t", 1, Files::All),
        (
            "users",
            "SELECT count(*) FROM t a JOIN t b ON a.id = b.id",
            2,
            Files::All,
        ),
        (
            "users",
            "SELECT id FROM t WHERE id < 100",
            1,
            Files::Skipped,
        ),
        ("users", "SELECT * FROM t LIMIT 3", 1, Files::StoppedEarly),
        ("events", "SELECT sum(score) FROM t", 1, Files::All),
        (
            "events",
            "SELECT id FROM t WHERE id < 100",
            1,
            Files::Skipped,
        ),
        (
            "events",
            "SELECT id FROM t WHERE name = 'n7'",
            1,
            Files::All,
        ),
    ];
    for (table, sql, scans, expect) in cases {
        let name = TableName::parse(DB, &format!("{table}$lake"));
        let meta = catalog.table(&name).await?;
        let pinned = catalog.pin_lake(&meta).await?;
        let ctx = SessionContext::new();
        ctx.register_table("t", catalog.lake_provider(&meta, &pinned).await?)?;
        let frame = ctx.sql(sql).await?;
        let task = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let progress = QueryProgress::new();
        progress.watch_file_scans(&plan)?;
        datafusion::physical_plan::collect(plan, task).await?;
        let (done, total) = progress.files();
        let opened = progress.files_opened();
        let planned = scans * live_files(&f.tables[table].commits).len() as u64;
        let what =
            format!("{table}: {sql}: {done} done, {opened} opened, {total} planned of {planned}");
        match expect {
            Files::All => assert!(
                done == total && opened == total && total == planned,
                "{what}"
            ),
            Files::Skipped => assert!(
                done == total && opened == total && (1..=planned).contains(&total),
                "{what}"
            ),
            Files::StoppedEarly => assert!(done < total && total == planned, "{what}"),
        }
    }
    Ok(())
}

/// An outside reader that applies deletion vectors: Spark with delta-spark reads the
/// primary-key lake and finds the latest image per key up to the lake's txn offsets, with the
/// system columns of the change that wrote it. Skips, saying why, without Java, pyspark or
/// delta-spark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_reads_the_primary_key_lake_with_deletion_vectors() -> Result<()> {
    if let Some(reason) = spark_missing() {
        eprintln!("SKIPPED: spark_reads_the_primary_key_lake_with_deletion_vectors: {reason}");
        return Ok(());
    }
    let f = tokio::task::block_in_place(fixture);
    let users = &f.tables["users"];
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/spark_delta_read.py");
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new("python3")
            .arg(&script)
            .arg(&users.lake_uri)
            .output()
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("unresolved dependency") {
        eprintln!(
            "SKIPPED: spark_reads_the_primary_key_lake_with_deletion_vectors: delta-spark's jars cannot be resolved from Maven here:\n{}",
            stderr
                .lines()
                .filter(|l| l.contains("unresolved"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return Ok(());
    }
    ensure!(out.status.success(), "spark failed:\n{stderr}");
    let mut got: Vec<String> = String::from_utf8(out.stdout)?
        .lines()
        .filter_map(|l| l.strip_prefix("ROW "))
        .map(str::to_string)
        .collect();
    let mut want: Vec<String> = users
        .rows(true)
        .iter()
        .map(|r| {
            let v = &r.values;
            format!(
                "{}|{}|{}|{:.2}|{}|{}|{}|{}",
                v.id,
                v.grp,
                v.name.as_deref().unwrap_or("NULL"),
                v.score,
                v.flag,
                r.bucket,
                r.offset,
                r.timestamp_ms * 1000
            )
        })
        .collect();
    got.sort();
    want.sort();
    ensure!(
        got == want,
        "spark's read of the users lake differs from the changelog: {}",
        wait::describe_diff(&want, &got)
    );
    Ok(())
}

/// Why Spark with delta-spark cannot run here, if it cannot.
fn spark_missing() -> Option<String> {
    match std::process::Command::new("java").arg("-version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Some(format!(
                "`java -version` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Err(e) => return Some(format!("java cannot run ({e}); install Java 17")),
    }
    let probe = std::process::Command::new("python3")
        .args(["-c", "import pyspark, delta"])
        .output();
    match probe {
        Ok(o) if o.status.success() => None,
        Ok(_) => Some(
            "pyspark or delta-spark is not importable; pip install pyspark==4.0.1 delta-spark==4.0.0"
                .to_string(),
        ),
        Err(e) => Some(format!("python3 cannot run ({e})")),
    }
}

// The corpus format's own checks: what a malformed corpus is told.
#[test]
fn corpus_format_errors_name_the_line() {
    let check = |text: &str, expect: &str| {
        let got = match parse_corpus(text) {
            Ok(cases) => format!("{} cases", cases.len()),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(expect), "{text:?}: {got}");
    };
    check(
        "-- bag\nSELECT 1\n\n-- ordered @lake\nSELECT 1 ORDER BY 1\n",
        "2 cases",
    );
    check("# comment\n-- bag\nSELECT\n  1\n", "1 cases");
    check("-- sorted\nSELECT 1\n", "line 1: unknown mode");
    check(
        "-- explain\nEXPLAIN SELECT 1\n",
        "line 1: explain needs a needle",
    );
    check(
        "-- bag @lakes\nSELECT 1\n",
        "line 1: \"@lakes\" is not a tag",
    );
    check(
        "-- bag\n\nSELECT 1\n",
        "line 3: a statement without a header",
    );
    check(
        "-- ordered\nSELECT 1\n",
        "line 1: an ordered case needs an ORDER BY",
    );
    check(
        "-- explain Sort\nSELECT 1\n",
        "line 1: an explain case must be an EXPLAIN",
    );
    check("-- bag\n", "line 1: a header without a statement");
}
