//! The two sides `silt verify` compares, read independently: the changelog through the Fluss
//! source (the reader tiering uses), and the lake at one pinned version through deltalake's
//! table provider on DataFusion (not the lake catalog).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::FILE_COLUMN;
use anyhow::{Result, anyhow, bail};
use arrow::array::{
    ArrayRef, ArrowPrimitiveType, AsArray, Int32Array, Int64Array, PrimitiveArray, RecordBatch,
};
use arrow::compute::cast;
use arrow::datatypes::{Int32Type, Int64Type};
use silt_connectors::changelog::{BUCKET_COLUMN, BucketKey, OFFSET_COLUMN, PARTITION_ID_COLUMN};
use silt_connectors::fluss::{EndPosition, FlussSource, FlussSourceConfig, StartPosition};
use silt_engine::{RestoredState, Source, SourcePoll, TaskContext};

/// Reads `[start, end)` of every bucket through the Fluss source (the same reader tiering
/// uses), as changelog batches with system columns (`__bucket`, `__offset`, `__change_type`...).
pub async fn read_changelog(
    bootstrap: &str,
    credentials: Option<&silt_connectors::fluss::FlussCredentials>,
    database: &str,
    table: &str,
    start: BTreeMap<BucketKey, i64>,
    end: BTreeMap<BucketKey, i64>,
    stall_max: Duration,
) -> Result<Vec<RecordBatch>> {
    let mut config = FlussSourceConfig::new(bootstrap, database, table);
    config.credentials = credentials.cloned();
    // Rows of a partitioned table are told apart by partition, bucket and offset.
    config.partition_id_column = true;
    config.start = StartPosition::Offsets(start);
    config.end = EndPosition::Offsets(end.clone());
    let mut source = FlussSource::new(config);
    let ctx = TaskContext::single("verify", "changelog");
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
            SourcePoll::BacklogRead => {}
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

/// The rows of the product's lake format at `version`, with the file each row came from (for
/// tools that check a lake outside a configured service).
pub async fn read_lake(
    uri: &str,
    storage_options: &HashMap<String, String>,
    version: u64,
) -> Result<Vec<RecordBatch>> {
    silt_connectors::formats::default_format()
        .read_version(uri, storage_options, version, FILE_COLUMN)
        .await
}

/// The lake rows to compare under hot retention. A log table's rows below a bucket's earliest
/// held offset are gone from the hot side, so they are dropped; a primary-key table's lake row
/// keeps the offset of its key's last change, which may be that old and still be the key's
/// state, so all are kept (`compare_by_key` counts the ones it cannot decide as unchecked).
pub(super) fn held_lake_rows(
    batches: Vec<RecordBatch>,
    start: &BTreeMap<BucketKey, i64>,
    primary_key: bool,
) -> Result<Vec<RecordBatch>> {
    if primary_key {
        Ok(batches)
    } else {
        keep_held(&batches, start)
    }
}

/// Keys of a primary-key lake that hold more than one row (over every row of the lake, those
/// of dropped partitions too: a view of the table shows them all), and up to `show_max` of
/// them rendered `col=value, ...`. One row per key is the primary-key view's invariant.
pub(super) fn keys_with_several_rows(
    batches: &[RecordBatch],
    key_columns: &[String],
    show_max: usize,
) -> Result<(usize, Vec<String>)> {
    let Some(first) = batches.first() else {
        return Ok((0, Vec::new()));
    };
    let schema = first.schema();
    let fields = key_columns
        .iter()
        .map(|k| {
            let field = schema.field_with_name(k)?;
            Ok(arrow::row::SortField::new(field.data_type().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    let converter = arrow::row::RowConverter::new(fields)?;
    let mut counts: std::collections::HashMap<Vec<u8>, (usize, String)> = Default::default();
    for batch in batches {
        let columns = key_columns
            .iter()
            .map(|k| {
                batch
                    .column_by_name(k)
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("the lake has no key column {k}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let rows = converter.convert_columns(&columns)?;
        for (index, row) in rows.iter().enumerate() {
            let entry = counts.entry(row.as_ref().to_vec()).or_insert_with(|| {
                let shown: Vec<String> = key_columns
                    .iter()
                    .zip(&columns)
                    .map(|(k, c)| {
                        let value = arrow::util::display::array_value_to_string(c, index)
                            .unwrap_or_default();
                        format!("{k}={value}")
                    })
                    .collect();
                (0, shown.join(", "))
            });
            entry.0 += 1;
        }
    }
    let mut several: Vec<(usize, String)> = counts.into_values().filter(|(n, _)| *n > 1).collect();
    several.sort_by(|a, b| a.1.cmp(&b.1));
    let shown = several
        .iter()
        .take(show_max)
        .map(|(n, key)| format!("  ! {key}: {n} rows"))
        .collect();
    Ok((several.len(), shown))
}

/// A partitioned table's lake rows of partitions the hot store no longer has (dropped; the
/// lake keeps their history), split off: `(rows of the partitions in `start`, rows of others)`.
pub(super) fn split_dropped_partitions(
    batches: Vec<RecordBatch>,
    start: &BTreeMap<BucketKey, i64>,
) -> Result<(Vec<RecordBatch>, usize)> {
    let partitions: std::collections::BTreeSet<i64> =
        start.keys().filter_map(|k| k.partition).collect();
    let mut kept = Vec::with_capacity(batches.len());
    let mut dropped = 0;
    for batch in batches {
        if batch.column_by_name(PARTITION_ID_COLUMN).is_none() {
            kept.push(batch);
            continue;
        }
        let ids = int64(&batch, PARTITION_ID_COLUMN)?;
        let keep: arrow::array::BooleanArray = ids
            .iter()
            .map(|id| Some(id.is_some_and(|id| partitions.contains(&id))))
            .collect();
        dropped += keep.false_count();
        kept.push(arrow::compute::filter_record_batch(&batch, &keep)?);
    }
    Ok((kept, dropped))
}

/// Drops lake rows below a bucket's earliest held offset (hot retention removed them).
fn keep_held(
    batches: &[RecordBatch],
    start: &BTreeMap<BucketKey, i64>,
) -> Result<Vec<RecordBatch>> {
    if start.values().all(|s| *s <= 0) {
        return Ok(batches.to_vec());
    }
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let buckets = bucket_keys(batch)?;
        let offsets = int64(batch, OFFSET_COLUMN)?;
        let keep: arrow::array::BooleanArray = (0..batch.num_rows())
            .map(|i| Some(offsets.value(i) >= start.get(&buckets[i]).copied().unwrap_or(0)))
            .collect();
        out.push(arrow::compute::filter_record_batch(batch, &keep)?);
    }
    Ok(out)
}

pub(super) fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| anyhow!("column {name} is missing"))
}

/// The bucket of every row: `__bucket`, and `__partition_id` when the batch has it (a
/// partitioned table's).
pub(super) fn bucket_keys(batch: &RecordBatch) -> Result<Vec<BucketKey>> {
    let buckets = int32(batch, BUCKET_COLUMN)?;
    let partitions = match batch.column_by_name(PARTITION_ID_COLUMN) {
        Some(_) => Some(int64(batch, PARTITION_ID_COLUMN)?),
        None => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| BucketKey {
            partition: partitions.as_ref().map(|p| p.value(i)),
            bucket: buckets.value(i),
        })
        .collect())
}

pub(super) fn int32(batch: &RecordBatch, name: &str) -> Result<Int32Array> {
    integers::<Int32Type>(batch, name)
}

pub(super) fn int64(batch: &RecordBatch, name: &str) -> Result<Int64Array> {
    integers::<Int64Type>(batch, name)
}

/// Column `name` of `batch` cast to the integer type `T`.
fn integers<T: ArrowPrimitiveType>(batch: &RecordBatch, name: &str) -> Result<PrimitiveArray<T>> {
    let c = cast(column(batch, name)?, &T::DATA_TYPE)?;
    Ok(c.as_primitive_opt::<T>()
        .ok_or_else(|| anyhow!("{name} is not an integer"))?
        .clone())
}
