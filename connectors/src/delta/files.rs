//! The data files of a lake table and the batches read from them: what an add's partition
//! values and statistics say, rows copied with their partition columns put back, and the
//! Parquet settings every data file is written with.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use deltalake::Path;
use deltalake::kernel::Add;
use object_store::ObjectStoreExt as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use roaring::RoaringTreemap;

use crate::changelog::{BUCKET_COLUMN, BucketKey, OFFSET_COLUMN, PARTITION_ID_COLUMN};
use crate::delta::error::{Error, Result};

/// Data files do not hold the partition columns (`__bucket`, and a partitioned table's keys
/// and `__partition_id`); puts them back from the file's partition values, typed as the lake
/// schema has them, for a writer that rewrites the rows.
pub(in crate::delta) fn with_partition_columns(
    batch: RecordBatch,
    file: &Add,
    lake_schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
    for (name, value) in &file.partition_values {
        if batch.column_by_name(name).is_some() {
            continue;
        }
        let field = lake_schema.field_with_name(name).map_err(|_| {
            Error::Internal(format!(
                "data file {} has partition value {name:?}, which is not a lake column",
                file.path
            ))
        })?;
        let text: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
            value.as_deref();
            batch.num_rows()
        ]));
        let typed = arrow::compute::cast(&text, field.data_type()).map_err(|e| {
            Error::Internal(format!(
                "partition value {value:?} of {name:?} in data file {} is not a {}: {e}",
                file.path,
                field.data_type()
            ))
        })?;
        columns.push(typed);
        fields.push(Arc::new(field.clone()));
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )?)
}

/// Writes the rows of data file `file` (in `store`, of table `uri` with schema `lake_schema`)
/// that `deleted` does not mark into `writer`; returns how many.
pub(in crate::delta) async fn copy_rows(
    store: &dyn object_store::ObjectStore,
    lake_schema: &SchemaRef,
    uri: &str,
    file: &Add,
    deleted: &RoaringTreemap,
    writer: &mut deltalake::writer::RecordBatchWriter,
) -> Result<u64> {
    let bytes = read_object(store, &file.path).await?;
    let (mut row, mut copied) = (0u64, 0u64);
    for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
        let batch = batch?;
        let keep: BooleanArray = (0..batch.num_rows() as u64)
            .map(|i| Some(!deleted.contains(row + i)))
            .collect();
        row += batch.num_rows() as u64;
        let batch = filter_record_batch(&batch, &keep)?;
        if batch.num_rows() == 0 {
            continue;
        }
        let batch = with_partition_columns(batch, file, lake_schema)?;
        copied += batch.num_rows() as u64;
        let batch = crate::delta::schema::conform_stored(&batch, lake_schema)?;
        deltalake::writer::DeltaWriter::write(writer, batch)
            .await
            .map_err(Error::delta(uri))?;
    }
    Ok(copied)
}

/// The bucket of every row of a changelog or lake batch: `__bucket`, with `__partition_id`
/// when the batch has it.
pub(in crate::delta) fn bucket_keys(batch: &RecordBatch) -> Result<Vec<BucketKey>> {
    let buckets = int_column::<Int32Array>(batch, BUCKET_COLUMN)?;
    let partitions = match batch.column_by_name(PARTITION_ID_COLUMN) {
        Some(_) => Some(int_column::<Int64Array>(batch, PARTITION_ID_COLUMN)?),
        None => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| BucketKey {
            partition: partitions.map(|p| p.value(i)),
            bucket: buckets.value(i),
        })
        .collect())
}

/// The whole object at `path` (relative to the table root of `store`).
pub(super) async fn read_object(
    store: &dyn object_store::ObjectStore,
    path: &str,
) -> Result<bytes::Bytes> {
    let storage = |source| Error::Storage {
        path: path.to_string(),
        source,
    };
    store
        .get(&Path::from(path))
        .await
        .map_err(storage)?
        .bytes()
        .await
        .map_err(storage)
}

pub(crate) fn int_column<'a, A: Array + 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a A> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<A>())
        .ok_or_else(|| {
            Error::Batch(format!(
                "system column {name:?} is missing or has the wrong type (see changelog.rs)"
            ))
        })
}

/// The bucket a data file holds rows of, from its partition values.
pub(crate) fn add_bucket(add: &Add) -> Result<BucketKey> {
    let value = |column: &str| {
        add.partition_values
            .get(column)
            .and_then(|v| v.as_deref())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    Error::Internal(format!(
                        "data file {} has {column} partition value {v:?}, not a number",
                        add.path
                    ))
                })
            })
            .transpose()
    };
    let bucket = value(BUCKET_COLUMN)?.ok_or_else(|| {
        Error::Internal(format!(
            "data file {} has no {BUCKET_COLUMN} partition value",
            add.path
        ))
    })?;
    Ok(BucketKey {
        partition: value(PARTITION_ID_COLUMN)?,
        bucket: i32::try_from(bucket)
            .map_err(|_| Error::Internal(format!("data file {} has bucket {bucket}", add.path)))?,
    })
}

/// The smallest `__offset` recorded in an add's statistics, if they record it.
pub(in crate::delta) fn first_offset(add: &Add) -> Option<i64> {
    let stats: serde_json::Value = serde_json::from_str(add.stats.as_deref()?).ok()?;
    stats.get("minValues")?.get(OFFSET_COLUMN)?.as_i64()
}

/// Rows recorded in an add's statistics.
pub(crate) fn add_rows(add: &Add) -> Result<u64> {
    add.stats
        .as_deref()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get("numRecords").and_then(serde_json::Value::as_u64))
        .ok_or_else(|| {
            Error::Internal(format!(
                "data file {} has no numRecords statistic",
                add.path
            ))
        })
}

/// The Parquet settings of every data file the sink writes.
pub fn writer_properties(
    config: &crate::delta::DeltaSinkConfig,
) -> parquet::file::properties::WriterProperties {
    parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(config.row_group_rows_max))
        .build()
}
