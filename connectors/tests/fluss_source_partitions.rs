//! The Fluss source over partitioned tables (issue 17): it reads every bucket of every
//! partition, the partition column as the rows carry it, each row once; partitions created
//! while it runs are read from their start without a restart, a dropped partition is released
//! without failing the read (also when one of the same name replaces it), and a checkpoint
//! restores per (partition, bucket) at another parallelism. A partitioned primary-key table's
//! changelog, read to the high watermarks, replays to the last image per key.
//!
//! Each bucket's offsets must come out exactly once from 0 to what it holds, so a lost, doubled
//! or misattributed bucket shows as a gap or a repeat.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use arrow::array::{Array, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use silt_connectors::changelog::{BUCKET_COLUMN, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN};
use silt_connectors::fluss::{EndPosition, FlussSource, FlussSourceConfig, StartPosition};
use silt_engine::{RestoredState, Source as _, SourcePoll, TaskContext};
use silt_testkit::hotstore::{self, DEADLINE};
use silt_testkit::tables::{
    self, create_day_partitions, day_partitioned_log, day_partitioned_primary_key, day_row,
    day_spec,
};

const DB: &str = "parts";
const DAY_1: &str = "2024-05-01";
const DAY_2: &str = "2024-05-02";
const DAY_3: &str = "2024-05-03";

/// One emitted row: partition value, bucket, offset, change type, id, v.
type Row = (String, i32, i64, i8, i64, Option<String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_reads_every_partition_and_follows_creates_and_drops() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let bootstrap = server.local_addr().to_string();
    let table = day_partitioned_log(DB, "events");
    table.create(&connection).await?;
    let path = table.path.clone();
    create_day_partitions(&connection, &path, &[DAY_1, DAY_2]).await?;
    let mut written = append(&connection, &path, DAY_1, 0..300).await?;
    written.extend(append(&connection, &path, DAY_2, 1000..1200).await?);

    // Two subtasks read both partitions from the start.
    let config = config(&bootstrap, &path);
    let mut sources = open(&config, 2, RestoredState::default()).await?;
    let mut emitted = read_until(&mut sources, written.len()).await?;

    // A partition created while they run is found and read from its start.
    create_day_partitions(&connection, &path, &[DAY_3]).await?;
    let day_3 = append(&connection, &path, DAY_3, 2000..2150).await?;
    let day_2_more = append(&connection, &path, DAY_2, 1200..1210).await?;
    written.extend(day_3.iter().chain(&day_2_more).cloned());
    emitted.extend(read_until(&mut sources, day_3.len() + day_2_more.len()).await?);
    check("before the checkpoint", &emitted, &written)?;

    // Checkpoint, then drop DAY_1: the running subtasks release it and read on.
    let mut states = Vec::new();
    for source in &mut sources {
        states.push(Some(source.snapshot(1).await?));
    }
    admin_drop(&connection, &path, DAY_1).await?;
    let after_drop = append(&connection, &path, DAY_2, 1210..1230).await?;
    let read = read_until(&mut sources, after_drop.len()).await?;
    check("after the drop", &read, &after_drop)?;

    // Restored at parallelism 3, the subtasks read exactly what came after the checkpoint,
    // DAY_1's buckets named by the checkpoint are gone without an error.
    drop(sources);
    let later = append(&connection, &path, DAY_3, 2150..2170).await?;
    let mut restored = open(&config, 3, restored_state(states)).await?;
    let read = read_until(&mut restored, after_drop.len() + later.len()).await?;
    let expected: Vec<Row> = after_drop.iter().chain(&later).cloned().collect();
    check("restored at parallelism 3", &read, &expected)?;

    // DAY_3 dropped and created again between two listings: the old id is released and the
    // new one (same name, empty) read from its start, never the old rows again.
    admin_drop(&connection, &path, DAY_3).await?;
    create_day_partitions(&connection, &path, &[DAY_3]).await?;
    // A fresh connection: the first one's client still maps DAY_3 to the dropped id.
    let fresh = hotstore::connect(&server).await?;
    let recreated = append(&fresh, &path, DAY_3, 3000..3030).await?;
    let read = read_until(&mut restored, recreated.len()).await?;
    check("recreated partition", &read, &recreated)?;

    // Offsets of plain buckets do not name a partition's; a partitioned table refuses them.
    let mut explicit = config.clone();
    explicit.start = StartPosition::Offsets(silt_connectors::changelog::table_buckets([(0, 0)]));
    let refused = open(&explicit, 1, RestoredState::default()).await;
    let error = refused
        .err()
        .context("start offsets per bucket were accepted")?;
    ensure!(
        format!("{error:#}").contains("partitioned"),
        "unexpected error: {error:#}"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_key_changelog_replays_to_the_last_image_per_key() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let bootstrap = server.local_addr().to_string();
    let table = day_partitioned_primary_key(DB, "users").buckets(2);
    table.create(&connection).await?;
    let path = table.path.clone();
    create_day_partitions(&connection, &path, &[DAY_1, DAY_2]).await?;
    let writer = tables::upserter(&connection, &path).await?;
    // The same ids in both partitions are different keys.
    let mut last: BTreeMap<(String, i64), Option<String>> = BTreeMap::new();
    for i in 0..400i64 {
        let day = if i % 3 == 0 { DAY_2 } else { DAY_1 };
        let id = i % 37;
        let v = format!("value-{i}");
        let row = day_row(day, id, &v);
        if i % 5 == 0 {
            writer.delete(&row)?;
            last.insert((day.to_string(), id), None);
        } else {
            writer.upsert(&row)?;
            last.insert((day.to_string(), id), Some(v));
        }
    }
    writer.flush().await?;

    let mut config = config(&bootstrap, &path);
    config.end = EndPosition::LatestAtOpen;
    let mut sources = open(&config, 2, RestoredState::default()).await?;
    let mut rows = Vec::new();
    for source in &mut sources {
        rows.extend(drain_to_end(source).await?);
    }
    check_offsets("pk", &rows)?;
    let mut state: BTreeMap<(String, i64), Option<String>> = BTreeMap::new();
    for (day, _, _, change, id, v) in &rows {
        // +I and +U set the image, -D removes it; -U is followed by its +U.
        match ChangeType::from_i8(*change) {
            Some(ChangeType::Insert | ChangeType::UpdateAfter) => {
                state.insert((day.clone(), *id), v.clone());
            }
            Some(ChangeType::Delete) => {
                state.insert((day.clone(), *id), None);
            }
            Some(ChangeType::UpdateBefore) => {}
            other => anyhow::bail!("change {other:?} ({change}) in a primary-key changelog"),
        }
    }
    let live = |m: &BTreeMap<(String, i64), Option<String>>| -> BTreeMap<(String, i64), String> {
        m.iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect()
    };
    ensure!(
        live(&state) == live(&last),
        "replayed {} live keys, wrote {}",
        live(&state).len(),
        live(&last).len()
    );
    ensure!(
        live(&state).keys().any(|(d, _)| d == DAY_2),
        "both partitions hold keys"
    );
    server.shutdown().await?;
    Ok(())
}

fn config(bootstrap: &str, path: &TablePath) -> FlussSourceConfig {
    FlussSourceConfig::new(bootstrap, path.database(), path.table())
}

async fn admin_drop(connection: &FlussConnection, path: &TablePath, day: &str) -> Result<()> {
    Ok(connection
        .get_admin()?
        .drop_partition(path, &day_spec(day), false)
        .await?)
}

/// Appends rows `ids` to partition `day` in flushes of 50; answers them as the source should
/// emit them (without bucket and offset, which the server chooses: -1 and 0).
async fn append(
    connection: &FlussConnection,
    path: &TablePath,
    day: &str,
    ids: std::ops::Range<i64>,
) -> Result<Vec<Row>> {
    let writer = tables::appender(connection, path).await?;
    let mut rows = Vec::new();
    for id in ids {
        let v = format!("{day}-{id}");
        writer.append(&day_row(day, id, &v))?;
        rows.push((day.to_string(), -1, 0, 0, id, Some(v)));
        if id % 50 == 49 {
            writer.flush().await?;
        }
    }
    writer.flush().await?;
    Ok(rows)
}

fn context(subtask: u32, parallelism: u32) -> TaskContext {
    TaskContext {
        job_name: "partition-source-test".into(),
        vertex_name: "source".into(),
        subtask_index: subtask,
        parallelism,
        attempt: 0,
    }
}

fn restored_state(states: Vec<Option<Bytes>>) -> RestoredState {
    RestoredState {
        checkpoint_id: Some(1),
        subtask_states: states,
        subtask_index: 0,
    }
}

/// `parallelism` subtasks of the source, opened.
async fn open(
    config: &FlussSourceConfig,
    parallelism: u32,
    restored: RestoredState,
) -> Result<Vec<FlussSource>> {
    let mut sources = Vec::new();
    for subtask in 0..parallelism {
        let mut source = FlussSource::new(config.clone());
        let restored = RestoredState {
            subtask_index: subtask,
            ..restored.clone()
        };
        source
            .open(&context(subtask, parallelism), restored)
            .await?;
        sources.push(source);
    }
    Ok(sources)
}

/// Polls every source until they emitted `count` rows together, then a little longer (so
/// rows beyond `count`, which would be duplicates, show); a deadline bounds it.
async fn read_until(sources: &mut [FlussSource], count: usize) -> Result<Vec<Row>> {
    let deadline = Instant::now() + DEADLINE;
    let mut rows = Vec::new();
    let mut settled: Option<Instant> = None;
    loop {
        let mut idle = true;
        for source in sources.iter_mut() {
            if let SourcePoll::Batch(batch) = source.poll_next().await? {
                rows.extend(to_rows(&batch)?);
                idle = false;
            }
        }
        if rows.len() >= count {
            let at = *settled.get_or_insert_with(|| Instant::now() + Duration::from_millis(1500));
            if Instant::now() >= at {
                return Ok(rows);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "the sources emitted {} of {count} rows",
            rows.len()
        );
        if idle {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn drain_to_end(source: &mut FlussSource) -> Result<Vec<Row>> {
    let deadline = Instant::now() + DEADLINE;
    let mut rows = Vec::new();
    loop {
        ensure!(Instant::now() < deadline, "the source did not end in time");
        match source.poll_next().await? {
            SourcePoll::Batch(batch) => rows.extend(to_rows(&batch)?),
            SourcePoll::Idle(_) | SourcePoll::BacklogRead => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            SourcePoll::End => return Ok(rows),
        }
    }
}

fn to_rows(batch: &RecordBatch) -> Result<Vec<Row>> {
    let day: &StringArray = column(batch, "dt")?;
    let bucket: &Int32Array = column(batch, BUCKET_COLUMN)?;
    let offset: &Int64Array = column(batch, OFFSET_COLUMN)?;
    let change: &Int8Array = column(batch, CHANGE_TYPE_COLUMN)?;
    let id: &Int64Array = column(batch, "id")?;
    let v: &StringArray = column(batch, "v")?;
    Ok((0..batch.num_rows())
        .map(|i| {
            (
                day.value(i).to_string(),
                bucket.value(i),
                offset.value(i),
                change.value(i),
                id.value(i),
                v.is_valid(i).then(|| v.value(i).to_string()),
            )
        })
        .collect())
}

fn column<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .with_context(|| format!("column {name} of {:?}", batch.schema()))
}

/// `emitted` holds exactly the rows `written` (partition, id, v, change type), each once, and
/// every (partition, bucket)'s offsets are distinct and contiguous.
fn check(name: &str, emitted: &[Row], written: &[Row]) -> Result<()> {
    let key = |r: &Row| (r.0.clone(), r.4, r.5.clone(), r.3);
    let mut got: Vec<_> = emitted.iter().map(key).collect();
    let mut want: Vec<_> = written.iter().map(key).collect();
    got.sort();
    want.sort();
    ensure!(
        got == want,
        "{name}: the source emitted {} rows, {} were written; first difference: {:?}",
        got.len(),
        want.len(),
        got.iter().zip(&want).find(|(a, b)| a != b)
    );
    check_offsets(name, emitted)
}

/// Every (partition, bucket)'s offsets, sorted, step by one: none twice, none skipped.
fn check_offsets(name: &str, rows: &[Row]) -> Result<()> {
    let mut offsets: BTreeMap<(String, i32), Vec<i64>> = BTreeMap::new();
    for r in rows {
        offsets.entry((r.0.clone(), r.1)).or_default().push(r.2);
    }
    for ((day, bucket), mut offsets) in offsets {
        offsets.sort();
        ensure!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "{name}: partition {day} bucket {bucket} emitted offsets {}..={} with gaps or repeats ({} rows)",
            offsets[0],
            offsets[offsets.len() - 1],
            offsets.len()
        );
    }
    Ok(())
}
