//! The Fluss source against the official client's own reading of the same table: what the
//! source emits equals, row for row, what fluss-rs's record scanner answers (bucket, offset,
//! commit timestamp, change type and values), every row once, for a log table (read a run of
//! the client's batch at a time) and a primary-key changelog, with start and end offsets inside
//! batches, and across a checkpoint and restore at the same and at another parallelism.
//!
//! The tables are written in many small flushes (so one fetch answers several batches per
//! bucket) and one batch larger than a poll (so a poll ends inside a batch and the next one
//! starts there).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use arrow::array::{
    Array, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::Schema;
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, TablePath};
use fluss::row::{DataGetters as _, GenericRow};
use silt_connectors::changelog::{
    BUCKET_COLUMN, CHANGE_TYPE_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN,
};
use silt_connectors::fluss::{
    EndPosition, FlussSource, FlussSourceConfig, POLL_RECORDS_MAX, StartPosition,
};
use silt_engine::{RestoredState, Source as _, SourcePoll, TaskContext};
use silt_testkit::changelog;
use silt_testkit::hotstore::{self, DEADLINE};
use silt_testkit::tables::{self, Table};

const DB: &str = "src";
const BUCKETS: i32 = 3;
/// Flushes of the small batches, and rows in each.
const FLUSHES: i64 = 60;
const FLUSH_ROWS: i64 = 40;

/// One emitted or scanned row: bucket, offset, commit timestamp (ms), change type, id, v.
type Row = (i32, i64, i64, i8, i64, Option<String>);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Log,
    PrimaryKey,
}

/// Where a case starts and ends each bucket, relative to what the bucket holds.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// From the earliest offset to the high watermarks at open.
    Whole,
    /// From offset `skip` to `trim` before the high watermark: both inside a batch.
    Inside { skip: i64, trim: i64 },
}

/// A read that stops after `split_after` batches, checkpoints, and continues in
/// `restore_parallelism` restored subtasks (None: one read to the end).
struct Case {
    name: &'static str,
    kind: Kind,
    range: Range,
    split_after: Option<usize>,
    restore_parallelism: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_emits_what_the_client_scans() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let bootstrap = server.local_addr().to_string();
    let log = write_log_table(&connection, "log").await?;
    let pk = write_primary_key_table(&connection, "pk").await?;
    let scanned = [
        (Kind::Log, scan(&connection, &log).await?),
        (Kind::PrimaryKey, scan(&connection, &pk).await?),
    ];
    let cases = [
        case("log, one read", Kind::Log, Range::Whole, None, 1),
        case(
            "log, restored after 1 batch",
            Kind::Log,
            Range::Whole,
            Some(1),
            1,
        ),
        case(
            "log, restored after 7 batches at parallelism 2",
            Kind::Log,
            Range::Whole,
            Some(7),
            2,
        ),
        case("log, inside batches", Kind::Log, INSIDE, Some(4), 1),
        case(
            "log, inside batches at parallelism 3",
            Kind::Log,
            INSIDE,
            Some(2),
            3,
        ),
        case("pk, one read", Kind::PrimaryKey, Range::Whole, None, 1),
        case(
            "pk, restored after 5 batches at parallelism 2",
            Kind::PrimaryKey,
            Range::Whole,
            Some(5),
            2,
        ),
        case("pk, inside batches", Kind::PrimaryKey, INSIDE, Some(3), 1),
    ];
    for case in &cases {
        let (path, all) = match case.kind {
            Kind::Log => (&log, &scanned[0].1),
            Kind::PrimaryKey => (&pk, &scanned[1].1),
        };
        let (start, end) = bounds(all, case.range);
        let expected: Vec<Row> = all
            .iter()
            .filter(|r| r.1 >= start[&r.0] && r.1 < end[&r.0])
            .cloned()
            .collect();
        let emitted = read_case(&bootstrap, path, case, &start, &end)
            .await
            .with_context(|| case.name)?;
        check(case.name, emitted, expected)?;
    }
    server.shutdown().await?;
    Ok(())
}

const INSIDE: Range = Range::Inside { skip: 3, trim: 7 };

/// An unbounded source says once, right after its last row below the high watermarks it
/// opened behind, that it read its backlog (the runtime checkpoints then); rows written later
/// and a source that opened with nothing behind say nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_source_says_once_that_it_read_its_backlog() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let bootstrap = server.local_addr().to_string();
    let log = write_log_table(&connection, "backlog").await?;
    let backlog = (FLUSHES * FLUSH_ROWS) as usize + POLL_RECORDS_MAX + 1000;
    let mut source = unbounded_from(&bootstrap, StartPosition::Earliest).await?;
    let (read, said) = poll_until(&mut source, backlog).await?;
    ensure!(
        said == vec![backlog],
        "said at {said:?} rows, not once at {backlog}"
    );
    ensure!(read == backlog, "read {read} rows of {backlog}");

    let writer = tables::appender(&connection, &log).await?;
    for id in 0..100 {
        writer.append(&id_v_row(id, None))?;
    }
    writer.flush().await?;
    let (later, said) = poll_until(&mut source, 100).await?;
    ensure!(
        later == 100 && said.is_empty(),
        "later rows: {later}, said at {said:?}"
    );

    let mut at_the_end = unbounded_from(&bootstrap, StartPosition::Latest).await?;
    for _ in 0..20 {
        let poll = at_the_end.poll_next().await?;
        ensure!(
            !matches!(poll, SourcePoll::BacklogRead),
            "a source that opened at the high watermarks said it read a backlog"
        );
    }
    server.shutdown().await?;
    Ok(())
}

/// Regression (issue 33, item 1): a source restarted after its table was dropped and created
/// again under the same name restored the dropped table's offsets and read the new table from
/// them (a tiering job then committed the new table's rows as the old lake's, and its registry
/// update raised the new table's offsets). A source bound to the table id it was started for
/// refuses to open on another, naming both ids; unbound, it reads whatever has the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_bound_to_a_table_id_refuses_the_table_created_again() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let bootstrap = server.local_addr().to_string();
    let path = write_log_table(&connection, "again").await?;
    let admin = connection.get_admin()?;
    let old_id = admin.get_table_info(&path).await?.get_table_id();
    let mut config = FlussSourceConfig::new(&bootstrap, DB, "again");
    config.table_id = Some(old_id);
    let mut first = FlussSource::new(config.clone());
    first.open(&context(0, 1), RestoredState::default()).await?;
    let (batches, _) = drain(&mut first, Some(3)).await?;
    ensure!(!batches.is_empty(), "the first source read nothing");
    let state = first.snapshot(1).await?;
    drop(first);

    admin.drop_table(&path, false).await?;
    write_log_table(&connection, "again").await?;
    let new_id = admin.get_table_info(&path).await?.get_table_id();
    let restored = || RestoredState {
        checkpoint_id: Some(1),
        subtask_states: vec![Some(state.clone())],
        subtask_index: 0,
    };
    let refused = FlussSource::new(config)
        .open(&context(0, 1), restored())
        .await
        .expect_err("a source of the dropped table must not restore onto the new one")
        .to_string();
    ensure!(
        refused.contains(&format!("table id {new_id}"))
            && refused.contains(&format!("table id {old_id}")),
        "{refused}"
    );
    // Unbound (a reader that means whatever table has the name), it opens.
    FlussSource::new(FlussSourceConfig::new(&bootstrap, DB, "again"))
        .open(&context(0, 1), RestoredState::default())
        .await?;
    server.shutdown().await?;
    Ok(())
}

/// An opened unbounded source over `src.backlog` from `start`, one subtask.
async fn unbounded_from(bootstrap: &str, start: StartPosition) -> Result<FlussSource> {
    let mut config = FlussSourceConfig::new(bootstrap, DB, "backlog");
    config.start = start;
    config.end = EndPosition::Unbounded;
    let mut source = FlussSource::new(config);
    source
        .open(&context(0, 1), RestoredState::default())
        .await?;
    Ok(source)
}

/// Polls `source` until it emitted `rows` rows and then answered something other than a
/// batch (failing at the deadline); answers the rows and, for each `BacklogRead`, how many
/// rows this call had emitted before it.
async fn poll_until(source: &mut FlussSource, rows: usize) -> Result<(usize, Vec<usize>)> {
    let deadline = Instant::now() + DEADLINE;
    let (mut read, mut said) = (0, Vec::new());
    loop {
        ensure!(
            Instant::now() < deadline,
            "read {read} of {rows} rows in time"
        );
        match source.poll_next().await? {
            SourcePoll::Batch(batch) => {
                read += batch.num_rows();
                continue;
            }
            SourcePoll::BacklogRead => said.push(read),
            SourcePoll::Idle(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            SourcePoll::End => bail!("an unbounded source ended"),
        }
        if read >= rows {
            return Ok((read, said));
        }
    }
}

fn case(
    name: &'static str,
    kind: Kind,
    range: Range,
    split_after: Option<usize>,
    restore_parallelism: u32,
) -> Case {
    Case {
        name,
        kind,
        range,
        split_after,
        restore_parallelism,
    }
}

/// `emitted` (in emission order, per source instance) against the client's records: the same
/// rows, each once, and each instance's rows of a bucket in offset order.
fn check(name: &str, emitted: Vec<Vec<Row>>, mut expected: Vec<Row>) -> Result<()> {
    for rows in &emitted {
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        for row in rows {
            let previous = last.insert(row.0, row.1).unwrap_or(-1);
            ensure!(
                row.1 > previous,
                "{name}: bucket {} emitted offset {} after {previous}",
                row.0,
                row.1
            );
        }
    }
    let mut emitted: Vec<Row> = emitted.into_iter().flatten().collect();
    emitted.sort_by_key(|r| (r.0, r.1));
    expected.sort_by_key(|r| (r.0, r.1));
    ensure!(!expected.is_empty(), "{name}: the case reads nothing");
    if emitted != expected {
        let first_difference = emitted
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(emitted.len().min(expected.len()));
        bail!(
            "{name}: the source emitted {} rows, the client scanned {}; first difference at {first_difference}: source {:?}, client {:?}",
            emitted.len(),
            expected.len(),
            emitted.get(first_difference),
            expected.get(first_difference)
        );
    }
    Ok(())
}

/// Start and end offset per bucket for `range`, from what each bucket holds.
fn bounds(rows: &[Row], range: Range) -> (BTreeMap<i32, i64>, BTreeMap<i32, i64>) {
    let mut start = BTreeMap::new();
    let mut end = BTreeMap::new();
    for bucket in 0..BUCKETS {
        let held = rows.iter().filter(|r| r.0 == bucket).count() as i64;
        let (skip, trim) = match range {
            Range::Whole => (0, 0),
            Range::Inside { skip, trim } => (skip, trim),
        };
        start.insert(bucket, skip.min(held));
        end.insert(bucket, (held - trim).max(0));
    }
    (start, end)
}

/// Runs `case`: a source from `start` to `end`, stopped and checkpointed after `split_after`
/// batches, then restored; answers each source instance's rows in emission order.
async fn read_case(
    bootstrap: &str,
    path: &TablePath,
    case: &Case,
    start: &BTreeMap<i32, i64>,
    end: &BTreeMap<i32, i64>,
) -> Result<Vec<Vec<Row>>> {
    let mut config = FlussSourceConfig::new(bootstrap, path.database(), path.table());
    config.start = match case.range {
        Range::Whole => StartPosition::Earliest,
        Range::Inside { .. } => {
            StartPosition::Offsets(silt_connectors::changelog::table_buckets(start.clone()))
        }
    };
    config.end = match case.range {
        Range::Whole => EndPosition::LatestAtOpen,
        Range::Inside { .. } => {
            EndPosition::Offsets(silt_connectors::changelog::table_buckets(end.clone()))
        }
    };
    let mut first = FlussSource::new(config.clone());
    first.open(&context(0, 1), RestoredState::default()).await?;
    let (batches, ended) = drain(&mut first, case.split_after).await?;
    let mut emitted = vec![rows(&batches)?];
    if ended {
        ensure!(
            case.split_after.is_none(),
            "the source ended before the split; the case splits too late"
        );
        return Ok(emitted);
    }
    let state = first.snapshot(1).await?;
    drop(first);
    for subtask in 0..case.restore_parallelism {
        let restored = RestoredState {
            checkpoint_id: Some(1),
            subtask_states: vec![Some(state.clone())],
            subtask_index: subtask,
        };
        let mut source = FlussSource::new(config.clone());
        source
            .open(&context(subtask, case.restore_parallelism), restored)
            .await?;
        let (batches, ended) = drain(&mut source, None).await?;
        ensure!(ended, "a restored source did not end");
        emitted.push(rows(&batches)?);
    }
    Ok(emitted)
}

fn context(subtask: u32, parallelism: u32) -> TaskContext {
    TaskContext {
        job_name: "source-test".into(),
        vertex_name: "source".into(),
        subtask_index: subtask,
        parallelism,
        attempt: 0,
    }
}

/// The batches `source` emits until it ends (true) or has emitted `stop_after` of them.
async fn drain(
    source: &mut FlussSource,
    stop_after: Option<usize>,
) -> Result<(Vec<RecordBatch>, bool)> {
    let deadline = Instant::now() + DEADLINE;
    let mut batches = Vec::new();
    loop {
        if stop_after.is_some_and(|n| batches.len() >= n) {
            return Ok((batches, false));
        }
        ensure!(Instant::now() < deadline, "the source did not end in time");
        match source.poll_next().await? {
            SourcePoll::Batch(batch) => batches.push(batch),
            SourcePoll::Idle(_) | SourcePoll::BacklogRead => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            SourcePoll::End => return Ok((batches, true)),
        }
    }
}

/// The rows of changelog batches `id BIGINT, v STRING` + the system columns.
fn rows(batches: &[RecordBatch]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for batch in batches {
        let bucket: &Int32Array = column(batch, BUCKET_COLUMN)?;
        let offset: &Int64Array = column(batch, OFFSET_COLUMN)?;
        let timestamp: &TimestampMillisecondArray = column(batch, TIMESTAMP_COLUMN)?;
        let change: &Int8Array = column(batch, CHANGE_TYPE_COLUMN)?;
        let id: &Int64Array = column(batch, "id")?;
        let v: &StringArray = column(batch, "v")?;
        for i in 0..batch.num_rows() {
            rows.push((
                bucket.value(i),
                offset.value(i),
                timestamp.value(i),
                change.value(i),
                id.value(i),
                v.is_valid(i).then(|| v.value(i).to_string()),
            ));
        }
    }
    Ok(rows)
}

fn column<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .with_context(|| format!("column {name} of {:?}", batch.schema()))
}

/// Every record of `path` as the client's record scanner answers it.
async fn scan(connection: &FlussConnection, path: &TablePath) -> Result<Vec<Row>> {
    let changes = changelog::read(connection, path, BUCKETS, DEADLINE, |record| {
        let row = record.row();
        let v = if row.is_null_at(1)? {
            None
        } else {
            Some(row.get_string(1)?.to_string())
        };
        Ok((record.timestamp(), row.get_long(0)?, v))
    })
    .await?;
    Ok(changes
        .into_iter()
        .map(|c| {
            let (timestamp, id, v) = c.row;
            (c.bucket, c.offset, timestamp, c.change_type as i8, id, v)
        })
        .collect())
}

fn id_and_v(table: Table) -> Table {
    table
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .buckets(BUCKETS)
}

/// A log table of `FLUSHES` small flushes (some rows with a null `v`), then one batch of more
/// rows than a poll answers.
async fn write_log_table(connection: &FlussConnection, name: &str) -> Result<TablePath> {
    let table = id_and_v(Table::log(DB, name));
    table.create(connection).await?;
    let writer = tables::appender(connection, &table.path).await?;
    for flush in 0..FLUSHES {
        for id in flush_ids(flush) {
            writer.append(&id_v_row(id, (id % 11 != 0).then(|| format!("event-{id}"))))?;
        }
        writer.flush().await?;
    }
    let schema = silt_connectors::fluss::table_arrow_schema(connection, DB, name).await?;
    writer.append_arrow_batch(large_batch(schema.as_ref(), FLUSHES * FLUSH_ROWS)?)?;
    writer.flush().await?;
    Ok(table.path)
}

/// `POLL_RECORDS_MAX + 1000` rows with ids from `from`.
fn large_batch(schema: &Schema, from: i64) -> Result<RecordBatch> {
    let ids: Vec<i64> = (from..from + POLL_RECORDS_MAX as i64 + 1000).collect();
    let vs: Vec<String> = ids.iter().map(|id| format!("bulk-{id}")).collect();
    Ok(RecordBatch::try_new(
        std::sync::Arc::new(schema.clone()),
        vec![
            std::sync::Arc::new(Int64Array::from(ids)),
            std::sync::Arc::new(StringArray::from(vs)),
        ],
    )?)
}

/// A primary-key table (keyed by `id`) of `FLUSHES` small flushes of upserts over 50 keys,
/// every seventh a delete: its changelog holds `+I`, `-U`, `+U` and `-D`.
async fn write_primary_key_table(connection: &FlussConnection, name: &str) -> Result<TablePath> {
    let table = id_and_v(Table::primary_key(DB, name, &["id"]));
    table.create(connection).await?;
    let writer = tables::upserter(connection, &table.path).await?;
    for flush in 0..FLUSHES {
        for i in flush_ids(flush) {
            let row = id_v_row(i % 50, Some(format!("value-{i}")));
            tables::upsert_or_delete(&writer, &row, i % 7 == 0)?;
        }
        writer.flush().await?;
    }
    Ok(table.path)
}

/// The ids (or write numbers) of flush `flush` of `FLUSHES`.
fn flush_ids(flush: i64) -> std::ops::Range<i64> {
    flush * FLUSH_ROWS..(flush + 1) * FLUSH_ROWS
}

/// An `(id, v)` row of [`id_and_v`]'s tables, `v` null when `None`.
fn id_v_row(id: i64, v: Option<String>) -> GenericRow<'static> {
    let mut row = GenericRow::new(2);
    row.set_field(0, id);
    if let Some(v) = v {
        row.set_field(1, v);
    }
    row
}
