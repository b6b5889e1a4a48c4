//! `silt verify` against a running `silt up`: healthy tables match; a lake damaged on purpose
//! (an add action removed from the Delta log, a data file added twice, a row changed inside a
//! Parquet file) fails verify with exit code 1 and a diff that names the damage; a lake that
//! cannot catch up within the deadline gives exit code 3.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, TablePath};
use fluss::row::GenericRow;
use serde_json::Value;

use silt_testkit::process::SiltProcess;
use silt_testkit::tables::{self, Table};
use silt_testkit::{hotstore, silt_bin};

/// `v.events` (log, 3 buckets) and `v.users` (`id, score, name` keyed by `id`, 2 buckets),
/// both tiered at most `freshness` behind.
async fn create_tables(connection: &FlussConnection, freshness: &str) -> Result<()> {
    tables::events("v")
        .lake(freshness)
        .create_if_missing(connection)
        .await?;
    Table::primary_key("v", "users", &["id"])
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .column("name", DataTypes::string())
        .buckets(2)
        .lake(freshness)
        .create_if_missing(connection)
        .await?;
    Ok(())
}

/// A few rounds of appends, upserts, partial updates and deletes, spaced so tiering makes
/// several commits (several files).
async fn write_rounds(connection: &FlussConnection, rounds: i64) -> Result<()> {
    let events = connection.get_table(&TablePath::new("v", "events")).await?;
    let users = connection.get_table(&TablePath::new("v", "users")).await?;
    let appender = events.new_append()?.create_writer()?;
    let upserter = users.new_upsert()?.create_writer()?;
    let partial = users
        .new_upsert()?
        .partial_update_with_column_names(&["id", "score"])?
        .create_writer()?;
    for round in 0..rounds {
        for i in round * 100..(round + 1) * 100 {
            let text = format!("e{i}");
            let mut row = GenericRow::new(2);
            row.set_field(0, i);
            row.set_field(1, text.as_str());
            appender.append(&row)?;
            let name = format!("user{}", i % 40);
            let mut u = GenericRow::new(3);
            u.set_field(0, i % 40);
            u.set_field(1, i);
            u.set_field(2, name.as_str());
            tables::upsert_or_delete(&upserter, &u, i % 9 == 0)?;
        }
        appender.flush().await?;
        upserter.flush().await?;
        // Partial updates (score only) go in their own flush: the client keeps full-row and
        // partial writes in separate batches.
        for id in (round..40).step_by(7) {
            let mut p = GenericRow::new(3);
            p.set_field(0, id);
            p.set_field(1, -id - round);
            partial.upsert(&p)?;
        }
        partial.flush().await?;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    Ok(())
}

/// A `silt verify` run: its exit code, its stdout (the verdicts) and its stderr (the diff, the
/// summary of `--all`).
struct Run {
    code: i32,
    stdout: String,
    diff: String,
}

fn silt_verify(data_dir: &Path, bootstrap: &str, args: &[&str]) -> Result<Run> {
    let out = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["--data-dir", &data_dir.to_string_lossy(), "--log", "error"])
        .arg("verify")
        .args(args)
        .args(["--bootstrap", bootstrap])
        .output()
        .context("running silt verify")?;
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        diff: String::from_utf8_lossy(&out.stderr).to_string(),
    };
    eprintln!(
        "silt verify {args:?} -> exit {}\n--- stdout\n{}--- stderr\n{}",
        run.code, run.stdout, run.diff
    );
    Ok(run)
}

fn lake_dir(data_dir: &Path, table: &str) -> PathBuf {
    data_dir.join("lake").join("v").join(table)
}

/// The newest commit file of the Delta log that adds files, its lines and the index of its
/// first add line.
fn last_commit_with_adds(table_dir: &Path) -> Result<(PathBuf, Vec<String>, usize)> {
    let mut commits: Vec<PathBuf> = std::fs::read_dir(table_dir.join("_delta_log"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    for path in commits.into_iter().rev() {
        let text = std::fs::read_to_string(&path)?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if let Some(first_add) = lines.iter().position(|l| l.starts_with("{\"add\"")) {
            return Ok((path, lines, first_add));
        }
    }
    bail!("no commit with adds under {}", table_dir.display())
}

fn add_of(line: &str) -> Result<Value> {
    let v: Value = serde_json::from_str(line)?;
    Ok(v["add"].clone())
}

fn num_records(add: &Value) -> Result<u64> {
    let stats: Value = serde_json::from_str(add["stats"].as_str().context("stats")?)?;
    stats["numRecords"].as_u64().context("numRecords")
}

fn write_commit(path: &Path, lines: &[String]) -> Result<()> {
    std::fs::write(path, lines.join("\n") + "\n")?;
    Ok(())
}

/// Rewrites one data file with `change` applied to its first row, under a new name, and
/// points the add action at it. Returns the new file name.
fn change_first_row(
    table_dir: &Path,
    commit: &Path,
    lines: &[String],
    index: usize,
    change: impl Fn(&RecordBatch) -> Result<RecordBatch>,
) -> Result<String> {
    let mut action: Value = serde_json::from_str(&lines[index])?;
    let old = action["add"]["path"].as_str().context("path")?.to_string();
    let file = std::fs::File::open(table_dir.join(&old))?;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?.build()?;
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>()?;
    let mut changed = vec![change(&batches[0])?];
    changed.extend(batches[1..].iter().cloned());
    let new = old.replace(".parquet", "-tampered.parquet");
    let out = std::fs::File::create(table_dir.join(&new))?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(out, changed[0].schema(), None)?;
    for b in &changed {
        writer.write(b)?;
    }
    writer.close()?;
    let size = std::fs::metadata(table_dir.join(&new))?.len();
    action["add"]["path"] = Value::from(new.clone());
    action["add"]["size"] = Value::from(size);
    let mut lines = lines.to_vec();
    lines[index] = serde_json::to_string(&action)?;
    write_commit(commit, &lines)?;
    Ok(new.rsplit('/').next().unwrap_or(&new).to_string())
}

/// Replaces row 0 of column `name` (string or bigint) with another value.
fn replace_first(batch: &RecordBatch, name: &str) -> Result<RecordBatch> {
    let i = batch.schema().index_of(name)?;
    let mut columns = batch.columns().to_vec();
    let c = &columns[i];
    let replaced: ArrayRef = if let Some(s) = c.as_any().downcast_ref::<StringArray>() {
        let mut values: Vec<Option<String>> = (0..s.len())
            .map(|j| (!s.is_null(j)).then(|| s.value(j).to_string()))
            .collect();
        values[0] = Some("tampered".into());
        Arc::new(StringArray::from(values))
    } else if let Some(n) = c.as_any().downcast_ref::<Int64Array>() {
        let mut values: Vec<Option<i64>> = n.iter().collect();
        values[0] = Some(values[0].unwrap_or(0) + 1_000_000);
        Arc::new(Int64Array::from(values))
    } else {
        bail!("column {name} has type {}", c.data_type())
    };
    columns[i] = replaced;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// `silt up` over a scratch directory of its own, and a connection to its hot store.
async fn start_silt() -> Result<(tempfile::TempDir, SiltProcess, FlussConnection)> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let connection = hotstore::connect_to(&silt.bootstrap).await?;
    Ok((dir, silt, connection))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verify_passes_healthy_tables_and_names_damage() -> Result<()> {
    let (dir, silt, connection) = start_silt().await?;
    let data = dir.path();
    create_tables(&connection, "250ms").await?;
    write_rounds(&connection, 3).await?;

    let all = silt_verify(data, &silt.bootstrap, &["--all", "--deadline", "60s"])?;
    assert_eq!(all.code, 0, "healthy tables verify");
    assert!(all.diff.contains("2 tables: 2 match"), "{}", all.diff);
    let one = silt_verify(data, &silt.bootstrap, &["v.users"])?;
    assert_eq!(one.code, 0);
    assert!(
        one.stdout.contains("verify v.users: MATCH"),
        "{}",
        one.stdout
    );

    // Log table, damage 1: an add action removed from the Delta log.
    let events = lake_dir(data, "events");
    let (commit, original, index) = last_commit_with_adds(&events)?;
    let removed = add_of(&original[index])?;
    let rows = num_records(&removed)?;
    let bucket = removed["partitionValues"]["__bucket"]
        .as_str()
        .unwrap()
        .to_string();
    let mut lines = original.clone();
    lines.remove(index);
    write_commit(&commit, &lines)?;
    let run = silt_verify(data, &silt.bootstrap, &["v.events", "--deadline", "5s"])?;
    assert_eq!(run.code, 1, "a removed add fails verify");
    assert!(
        run.diff
            .contains(&format!("missing from the lake ({rows}, ")),
        "names the {rows} missing rows: {}",
        run.diff
    );
    assert!(
        run.diff.contains(&format!("bucket {bucket}: ")),
        "names the bucket whose offsets are missing: {}",
        run.diff
    );
    assert!(run.stdout.contains("verify v.events: MISMATCH"));
    // The same for a script: one JSON document on stdout, the README's fields.
    let args = ["v.events", "--deadline", "5s", "--format", "json"];
    let json = silt_verify(data, &silt.bootstrap, &args)?;
    let doc: Value = serde_json::from_str(&json.stdout).context("verify --format json")?;
    let table = &doc["tables"][0];
    assert_eq!(
        (json.code, &doc["verdict"], &table["table"], &table["kind"]),
        (
            1,
            &Value::from("mismatch"),
            &Value::from("v.events"),
            &Value::from("log")
        ),
        "{doc}"
    );
    assert_eq!(table["missing"].as_u64(), Some(rows), "{doc}");
    assert!(table["buckets"][0]["high_watermark"].is_i64(), "{doc}");

    // Damage 2: the same data file added twice (a copy under a second name).
    let add = add_of(&original[index])?;
    let path = add["path"].as_str().unwrap().to_string();
    let copy = path.replace(".parquet", "-copy.parquet");
    std::fs::copy(events.join(&path), events.join(&copy))?;
    let mut duplicated: Value = serde_json::from_str(&original[index])?;
    duplicated["add"]["path"] = Value::from(copy.clone());
    let mut lines = original.clone();
    lines.push(serde_json::to_string(&duplicated)?);
    write_commit(&commit, &lines)?;
    let run = silt_verify(data, &silt.bootstrap, &["v.events", "--deadline", "5s"])?;
    assert_eq!(run.code, 1, "a duplicated file fails verify");
    let copy_name = copy.rsplit('/').next().unwrap();
    assert!(
        run.diff.contains(&format!("extra in the lake ({rows}, ")),
        "{}",
        run.diff
    );
    assert!(
        run.diff.contains(&format!("{copy_name} ({rows})")) && run.diff.contains("(also in "),
        "names the duplicated file: {}",
        run.diff
    );

    // Damage 3: one row changed inside a Parquet file.
    let tampered = change_first_row(&events, &commit, &original, index, |b| {
        replace_first(b, "v")
    })?;
    let run = silt_verify(data, &silt.bootstrap, &["v.events", "--deadline", "5s"])?;
    assert_eq!(run.code, 1, "a changed row fails verify");
    assert!(run.diff.contains("differing (1, "), "{}", run.diff);
    assert!(
        run.diff.contains(&tampered)
            && run.diff.contains("lake {id=")
            && run.diff.contains("v=tampered"),
        "names the file and shows both images: {}",
        run.diff
    );
    assert!(run.diff.contains("missing 0, extra 0, differing 1"));

    // Repaired: the original log verifies again.
    write_commit(&commit, &original)?;
    let run = silt_verify(data, &silt.bootstrap, &["v.events", "--deadline", "5s"])?;
    assert_eq!(run.code, 0, "the restored log matches again");

    // PK table: a changed row is a differing key; a removed add loses keys.
    let users = lake_dir(data, "users");
    let (commit, original, index) = last_commit_with_adds(&users)?;
    change_first_row(&users, &commit, &original, index, |b| {
        replace_first(b, "score")
    })?;
    let run = silt_verify(data, &silt.bootstrap, &["v.users", "--deadline", "5s"])?;
    assert_eq!(run.code, 1);
    assert!(run.diff.contains("differing keys (1, "), "{}", run.diff);
    assert!(run.diff.contains("~ key {id="), "{}", run.diff);

    let rows = num_records(&add_of(&original[index])?)?;
    let mut lines = original.clone();
    lines.remove(index);
    write_commit(&commit, &lines)?;
    let run = silt_verify(data, &silt.bootstrap, &["v.users", "--deadline", "5s"])?;
    assert_eq!(run.code, 1);
    assert!(
        run.diff
            .contains(&format!("keys missing from the lake ({rows}, ")),
        "{}",
        run.diff
    );

    // --all reports the damaged table in its summary and fails.
    let run = silt_verify(data, &silt.bootstrap, &["--all", "--deadline", "5s"])?;
    assert_eq!(run.code, 1);
    assert!(
        run.diff.contains("2 tables: 1 match, 1 do not"),
        "{}",
        run.diff
    );
    write_commit(&commit, &original)?;
    drop(silt);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verify_exits_3_when_the_lake_does_not_catch_up_in_time() -> Result<()> {
    let (dir, silt, connection) = start_silt().await?;
    // Tiering checkpoints once an hour. A job commits the backlog it found at its start at
    // once: the first 100 rows reach the lake when they came before the job (the common case:
    // it starts at the service's next poll, up to 2 s after the table), or never. By the end
    // of this wait the job has started either way.
    create_tables(&connection, "1h").await?;
    write_rounds(&connection, 1).await?;
    let _ = silt
        .wait_lake_rows("v.events", 100, Duration::from_secs(10))
        .await;
    let first = silt.lake_rows("v.events")?;
    assert!(first == 0 || first == 100, "lake rows {first}");
    // What comes after the job started waits for the hour: the lake cannot catch up in time.
    write_rounds(&connection, 2).await?;
    let run = silt_verify(
        dir.path(),
        &silt.bootstrap,
        &["v.events", "--deadline", "2s"],
    )?;
    assert_eq!(run.code, 3, "deadline passed");
    assert!(run.stdout.contains("DEADLINE PASSED"), "{}", run.stdout);
    // A bucket behind is named with its lake offset and its high watermark.
    assert!(
        run.diff.contains(": lake ") && run.diff.contains(" < hw "),
        "{}",
        run.diff
    );

    let run = silt_verify(dir.path(), &silt.bootstrap, &["v.eventz"])?;
    assert_eq!(run.code, 1, "unknown table");
    let usage = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["verify"])
        .output()?;
    assert_eq!(
        usage.status.code(),
        Some(2),
        "no table and no --all is a usage error"
    );
    Ok(())
}

/// Creates `v.<name>`: a lake-enabled log table of 2 buckets tiered every 250 ms.
async fn create_log_table(connection: &FlussConnection, name: &str) -> Result<i64> {
    tables::text_log("v", name)
        .buckets(2)
        .lake("250ms")
        .create(connection)
        .await
}

async fn append_rows(
    connection: &FlussConnection,
    name: &str,
    ids: std::ops::Range<i64>,
) -> Result<()> {
    let path = TablePath::new("v", name);
    tables::append_events(connection, &path, ids, |id| format!("row-{id}")).await
}

/// `count(*)` of `sql_table` through the query service, as `silt sql` runs it.
async fn count(bootstrap: &str, data_dir: &Path, sql_table: &str) -> Result<i64> {
    use silt_jobs::query::{QueryConfig, QueryRequest, QueryService};
    let lake_root = data_dir.join("lake").to_string_lossy().to_string();
    let service = QueryService::new(QueryConfig::new(
        silt_connectors::lake::LakeCatalogConfig::new(bootstrap, lake_root),
    ));
    let request = QueryRequest::new(
        format!("SELECT count(*) FROM {sql_table}"),
        Duration::from_secs(30),
    );
    let result = service.execute(request).await?;
    let counts = result.batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .context("count(*) is a bigint")?;
    Ok(counts.value(0))
}

/// Rows of the Delta table at `uri` (its newest version), read by deltalake alone.
async fn delta_rows(uri: &Path) -> Result<usize> {
    let url = deltalake::ensure_table_uri(uri.to_string_lossy())?;
    let table = deltalake::open_table(url).await?;
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_table("t", table.table_provider().await?)?;
    let batches = ctx.sql("SELECT * FROM t").await?.collect().await?;
    Ok(batches.iter().map(RecordBatch::num_rows).sum())
}

/// Regression (issue 13, item 2): a table dropped and created again under the same name saw the
/// dropped table's lake: `count(*)` of `t$lake` and `t` were 1001 and verify said MISMATCH.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_created_again_does_not_see_the_dropped_tables_lake() -> Result<()> {
    let (dir, silt, connection) = start_silt().await?;
    let data = dir.path();
    let old_id = create_log_table(&connection, "again").await?;
    append_rows(&connection, "again", 0..1_000).await?;
    let run = silt_verify(data, &silt.bootstrap, &["v.again", "--deadline", "60s"])?;
    assert_eq!(run.code, 0, "the first table's 1,000 rows are tiered");

    let admin = connection.get_admin()?;
    admin
        .drop_table(&TablePath::new("v", "again"), false)
        .await?;
    let new_id = create_log_table(&connection, "again").await?;
    assert_ne!(new_id, old_id, "a table created again gets a new id");
    append_rows(&connection, "again", 5_000..5_001).await?;

    let run = silt_verify(data, &silt.bootstrap, &["v.again", "--deadline", "60s"])?;
    assert!(
        run.code == 0 && run.stdout.contains("verify v.again: MATCH"),
        "the new table's lake holds its 1 row only: {}",
        run.stdout
    );
    assert_eq!(count(&silt.bootstrap, data, "v.again$lake").await?, 1);
    assert_eq!(count(&silt.bootstrap, data, "v.again").await?, 1);

    // The dropped table's lake was moved aside, whole.
    let dropped = data
        .join("lake")
        .join("__dropped")
        .join(format!("v.again-{old_id}"));
    assert!(
        dropped.join("_delta_log").is_dir(),
        "the old lake is kept under {}",
        dropped.display()
    );
    assert_eq!(delta_rows(&dropped).await?, 1_000);
    // `silt sql` without a server lists the table once, not the lake moved aside.
    let offline =
        silt_connectors::lake::LakeCatalog::offline(silt_connectors::lake::LakeCatalogConfig::new(
            &silt.bootstrap,
            data.join("lake").to_string_lossy(),
        ));
    assert_eq!(offline.known_tables().await?, ["v.again"]);
    // The dropped table's tiering state is gone; the new table's is its own.
    let checkpoints = data.join("checkpoints").join("tiering");
    assert!(!checkpoints.join(format!("v.again-{old_id}")).exists());
    assert!(checkpoints.join(format!("v.again-{new_id}")).exists());
    drop(silt);
    Ok(())
}

/// Sum of the hot log start offsets of `table`'s buckets (`GET /v1/hot`).
/// The table's buckets as `GET /v1/hot` reports them (as of the last retention run).
fn hot_table_buckets(silt: &SiltProcess, table: &str) -> Result<Vec<Value>> {
    let (status, body) = silt_testkit::http::get(&silt.rest, "/v1/hot", None)?;
    anyhow::ensure!(status == 200, "GET /v1/hot: {status} {body}");
    let buckets: Value = serde_json::from_str(&body)?;
    Ok(buckets
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["table"] == table)
        .cloned()
        .collect())
}

/// The sum of a table's bucket log starts.
fn hot_log_start(silt: &SiltProcess, table: &str) -> Result<i64> {
    Ok(hot_table_buckets(silt, table)?
        .iter()
        .map(|b| b["log_start_offset"].as_i64().unwrap_or(0))
        .sum())
}

/// `(hot bytes, segments)` of each of a table's buckets.
fn hot_buckets(silt: &SiltProcess, table: &str) -> Result<Vec<(u64, u64)>> {
    Ok(hot_table_buckets(silt, table)?
        .iter()
        .map(|b| {
            (
                b["hot_bytes"].as_u64().unwrap_or(0),
                b["segments"].as_u64().unwrap_or(0),
            )
        })
        .collect())
}

/// Issue 15 (hot retention): with a 1 s `table.log.ttl` default and small segments, the hot
/// store drops what the lake has covered while tiering runs; the promise still holds end to
/// end: `silt verify --all` matches, and `db.t` (lake + tail) counts every row once, equal to
/// the lake once tiering caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_promise_holds_after_hot_retention_dropped_tiered_segments() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path();
    let silt = SiltProcess::start_with(
        silt_bin!(),
        data,
        &[],
        &[
            ("SILT_HOTSTORE__LOG_TTL_MS", "1000"),
            ("SILT_HOTSTORE__RETENTION_CHECK_INTERVAL_MS", "300"),
            // The smallest segment: a round's batch of 100 events is about 1,000 bytes, so
            // any bucket that receives two batches closes a segment retention can drop. Six
            // batches over three buckets always give one bucket two, however the client
            // spreads them (with 2 KiB a bucket needed three, and an even spread of two per
            // bucket closed none: the test then waited for a retention that could not happen).
            ("SILT_HOTSTORE__SEGMENT_BYTES_MAX", "1024"),
            // Retention waits this long before it trusts a new lake offset (a query's pinned
            // version must find its tail).
            ("SILT_QUERY__DEADLINE_MAX_MS", "1000"),
            ("SILT_HOTSTORE__KV_CACHE_BYTES", "8388608"),
            ("SILT_LAKE__KEY_INDEX_CACHE_BYTES", "4194304"),
        ],
    )?;
    let connection = hotstore::connect_to(&silt.bootstrap).await?;
    create_tables(&connection, "300ms").await?;
    write_rounds(&connection, 6).await?;
    silt.wait_lake_rows("v.events", 600, Duration::from_secs(60))
        .await?;
    silt_testkit::wait::until(
        "retention moving both tables' log start",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            let starts = (
                hot_log_start(&silt, "v.events")?,
                hot_log_start(&silt, "v.users")?,
            );
            Ok(if starts.0 > 0 && starts.1 > 0 {
                silt_testkit::wait::Look::Done(())
            } else {
                silt_testkit::wait::Look::NotYet(format!(
                    "log starts {starts:?}; v.events buckets (hot bytes, segments): {:?}",
                    hot_buckets(&silt, "v.events")?
                ))
            })
        },
    )
    .await?;
    // A hot tail after the retention: rows the lake does not hold yet are read from the hot
    // store, the rest from the lake.
    tables::append_events(
        &connection,
        &TablePath::new("v", "events"),
        10_000..10_050,
        |i| format!("late{i}"),
    )
    .await?;
    assert_eq!(count(&silt.bootstrap, data, "v.events").await?, 650);
    let all = silt_verify(data, &silt.bootstrap, &["--all", "--deadline", "60s"])?;
    assert_eq!(all.code, 0, "verify after retention: {}", all.diff);
    assert!(all.diff.contains("2 tables: 2 match"), "{}", all.diff);
    assert_eq!(count(&silt.bootstrap, data, "v.events$lake").await?, 650);
    assert_eq!(
        count(&silt.bootstrap, data, "v.users").await?,
        count(&silt.bootstrap, data, "v.users$lake").await?
    );
    assert!(
        hot_log_start(&silt, "v.events")? > 0,
        "retention happened before verify ran"
    );
    // A job reading the table from `earliest` after retention: the lake first (a union read),
    // then the changelog; every row exactly once, however little the hot store still holds.
    let client = silt_jobs::job::client::Client::new(&silt.rest, None)?;
    let job = serde_json::json!({
        "name": "all-events",
        "parallelism": 2,
        "checkpoint": {"interval_ms": 500},
        "operators": [
            {"name": "events", "type": "fluss-source", "config": {"table": "v.events", "start": "earliest"}},
            {"name": "sink", "type": "delta-sink", "config": {"mode": "append"}}
        ],
        "edges": [{"from": "events", "to": "sink"}]
    });
    let submitted = client
        .post("/v1/jobs", "application/json", job.to_string().as_bytes())
        .await?;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let sink = data.join("lake/__jobs/all-events/sink");
    silt_testkit::wait::until(
        "the job's sink holding every event",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let rows = if sink.join("_delta_log").exists() {
                delta_rows(&sink).await?
            } else {
                0
            };
            Ok(if rows >= 650 {
                silt_testkit::wait::Look::Done(())
            } else {
                silt_testkit::wait::Look::NotYet(format!("{rows} rows"))
            })
        },
    )
    .await?;
    let url = deltalake::ensure_table_uri(sink.to_string_lossy())?;
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_table(
        "t",
        deltalake::open_table(url).await?.table_provider().await?,
    )?;
    let counted = ctx
        .sql("SELECT count(*), count(DISTINCT id) FROM t")
        .await?
        .collect()
        .await?;
    let column = |i: usize| {
        counted[0]
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .map(|a| a.value(0))
    };
    assert_eq!(
        (column(0), column(1)),
        (Some(650), Some(650)),
        "every event once, the tiered ones from the lake"
    );

    // Status and metrics per table: commits and their durations; the hot log start that
    // retention moved, per bucket.
    let (status, body) = silt_testkit::http::get(&silt.rest, "/v1/tables", None)?;
    assert_eq!(status, 200, "{body}");
    let tables: Value = serde_json::from_str(&body)?;
    let events = tables
        .as_array()
        .and_then(|t| t.iter().find(|t| t["table"] == "v.events"))
        .unwrap_or_else(|| panic!("v.events in {body}"));
    let commits = &events["commits"];
    assert!(commits["commits"].as_u64() >= Some(2), "{commits}");
    assert!(
        commits["recent_p99_ms"].as_u64() >= commits["recent_p50_ms"].as_u64(),
        "{commits}"
    );
    let (status, metrics) = silt_testkit::http::get(&silt.rest, "/metrics", None)?;
    assert_eq!(status, 200, "{metrics}");
    let sample = |name: &str, labels: &str| -> Option<f64> {
        let prefix = format!("{name}{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
    };
    let starts: f64 = (0..3)
        .filter_map(|b| {
            sample(
                "silt_hot_log_start_offset",
                &format!("table=\"v.events\",bucket=\"{b}\""),
            )
        })
        .sum();
    // Retention may move a start between the two reads, never back.
    let later = hot_log_start(&silt, "v.events")?;
    assert!(
        starts > 0.0 && starts as i64 <= later,
        "the metric ({starts}) and /v1/hot ({later}) agree: {metrics}"
    );
    assert!(
        sample("silt_tiering_commits_total", "table=\"v.events\"") >= Some(2.0),
        "{metrics}"
    );
    for family in [
        "silt_tiering_commit_p99_seconds",
        "silt_lake_active_files",
        "silt_lake_files_on_disk",
        "silt_lake_files_compacted_total",
        "silt_lake_bytes_reclaimed_total",
        "silt_hot_bytes",
        "silt_hot_segments",
        "silt_hot_retention_held_by_tiering",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} in {metrics}"
        );
    }

    // The allocator's own account, which the soak samples beside the resident set.
    let (status, body) = silt_testkit::http::get(&silt.rest, "/v1/memory", None)?;
    assert_eq!(status, 200, "{body}");
    let memory: Value = serde_json::from_str(&body)?;
    let allocated = memory["allocated_bytes"].as_u64().unwrap_or(0);
    let resident = memory["resident_bytes"].as_u64().unwrap_or(0);
    assert!(
        allocated > 1_000_000 && resident >= allocated,
        "jemalloc's figures of a running silt up: {body}"
    );
    // The storage engines' caches, bounded by the capacity configured: the hot kv store's,
    // and the key index of v.users' lake (a primary-key lake with deletion vectors).
    for (store, configured) in [("hot_kv", 8u64 << 20), ("key_indexes", 4 << 20)] {
        let cache = memory[store]["cache_bytes"].as_u64();
        let capacity = memory[store]["cache_capacity_bytes"].as_u64();
        assert!(
            capacity == Some(configured)
                && cache <= capacity
                && memory[store]["memtable_bytes"].is_u64(),
            "{store}: {body}"
        );
    }
    Ok(())
}

/// `GET` of silt's REST API as JSON.
fn get_json(silt: &SiltProcess, path: &str) -> Result<(u16, Value)> {
    let (status, body) = silt_testkit::http::get(&silt.rest, path, None)?;
    let json = serde_json::from_str(&body).with_context(|| format!("{path}: {body}"))?;
    Ok((status, json))
}

/// The table routes the console's table page reads: a table's description, its sampled
/// history, and a verify run started and followed over REST, each with its refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rest_api_describes_samples_and_verifies_a_table() -> Result<()> {
    let (_dir, silt, connection) = start_silt().await?;
    create_tables(&connection, "250ms").await?;
    write_rounds(&connection, 2).await?;

    let (status, users) = get_json(&silt, "/v1/tables/v.users")?;
    assert_eq!(status, 200, "{users}");
    let names: Vec<&str> = (users["schema"].as_array().unwrap().iter())
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "score", "name"], "{users}");
    assert_eq!(users["schema"][0]["type"], "BIGINT", "{users}");
    assert_eq!(
        users["schema"][0]["nullable"], false,
        "a key is not null: {users}"
    );
    assert_eq!(users["schema"][2]["type"], "STRING", "{users}");
    assert_eq!(
        (
            &users["kind"],
            &users["primary_key"],
            &users["bucket_count"]
        ),
        (
            &Value::from("primary_key"),
            &serde_json::json!(["id"]),
            &Value::from(2)
        ),
        "{users}"
    );
    assert_eq!(
        users["properties"]["table.datalake.freshness"], "250ms",
        "{users}"
    );
    assert_eq!(users["lake_enabled"], true, "{users}");
    let (status, body) = get_json(&silt, "/v1/tables/v.nope")?;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("v.nope"), "{body}");
    let (status, body) = get_json(&silt, "/v1/tables/nodot")?;
    assert_eq!(status, 400, "{body}");

    // The overview's kind and lake size, and a sample of the history with a commit in it (the
    // service samples every 10 s; the first sample came before the tables).
    let history = silt_testkit::wait::until(
        "a history sample of v.events after a commit",
        Duration::from_secs(40),
        Duration::from_millis(500),
        || async {
            let (_, history) = get_json(&silt, "/v1/tables/v.events/history")?;
            let samples = history["samples"].as_array().cloned().unwrap_or_default();
            Ok(match samples.iter().any(|s| s["commit_ms"].is_u64()) {
                true => silt_testkit::wait::Look::Done(history),
                false => silt_testkit::wait::Look::NotYet(history.to_string()),
            })
        },
    )
    .await?;
    assert_eq!(history["interval_ms"], 10_000, "{history}");
    let sample = &history["samples"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(sample["freshness_ms"].as_i64() >= Some(0), "{history}");
    assert!(
        sample["t_ms"].as_i64() > Some(0) && sample["lag_offsets"].is_i64(),
        "{history}"
    );
    let (status, body) = get_json(&silt, "/v1/tables/v.nope/history")?;
    assert_eq!(status, 404, "{body}");
    let (_, tables) = get_json(&silt, "/v1/tables")?;
    let of = |name: &str| {
        tables
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == name)
            .cloned()
    };
    let (events, users) = (of("v.events").unwrap(), of("v.users").unwrap());
    assert_eq!(
        (&events["kind"], &users["kind"]),
        (&Value::from("log"), &Value::from("primary_key"))
    );
    assert!(
        events["lake_bytes"].as_u64() > Some(0) && events["lake_files"].as_u64() > Some(0),
        "{events}"
    );

    // Verify: started with POST, followed with GET until its verdict.
    let (status, body) = get_json(&silt, "/v1/tables/v.users/verify")?;
    assert_eq!(status, 404, "no run yet: {body}");
    let path = "/v1/tables/v.users/verify";
    let deadline = serde_json::json!({"deadline": "60s"});
    let (status, started) = silt_testkit::http::send_json(&silt.rest, "POST", path, &deadline)?;
    assert_eq!(status, 202, "{started}");
    let started: Value = serde_json::from_str(&started)?;
    assert_eq!(started["state"], "running", "{started}");
    let run = silt_testkit::wait::until(
        "the verify run's verdict",
        Duration::from_secs(90),
        Duration::from_millis(200),
        || async {
            let (_, run) = get_json(&silt, path)?;
            Ok(match run["state"] == "running" {
                true => silt_testkit::wait::Look::NotYet(run.to_string()),
                false => silt_testkit::wait::Look::Done(run),
            })
        },
    )
    .await?;
    assert_eq!(
        (&run["state"], &run["run_id"]),
        (&Value::from("done"), &started["run_id"]),
        "{run}"
    );
    let result = &run["result"];
    assert_eq!(
        (&result["verdict"], &result["table"], &result["kind"]),
        (
            &Value::from("match"),
            &Value::from("v.users"),
            &Value::from("primary_key")
        ),
        "{run}"
    );
    assert!(result["hot_rows"].as_u64() > Some(0), "{run}");
    assert_eq!(result["hot_rows"], result["lake_rows"], "{run}");
    for (table, body, expected) in [
        ("v.nope", serde_json::json!({}), 404),
        (
            "v.users",
            serde_json::json!({"deadline": "2 fortnights"}),
            400,
        ),
    ] {
        let path = format!("/v1/tables/{table}/verify");
        let (status, answer) = silt_testkit::http::send_json(&silt.rest, "POST", &path, &body)?;
        assert_eq!(status, expected, "{table} {body}: {answer}");
    }
    Ok(())
}
