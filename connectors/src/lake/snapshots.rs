//! `db.t$lake$snapshots`: one row per lake version up to the pinned one: its commit time, the
//! operation, the silt checkpoint that made it, and the per-bucket txn end offsets after it
//! (as a JSON object `{"bucket": offset}`, a partitioned table's `{"p<partition id>/<bucket>":
//! offset}`, so every output format can carry it).
//!
//! The lake format reads the versions and their offsets ([`PinnedVersion::history`]); versions
//! whose record the lake no longer holds (a Delta commit file cleaned up by log retention) are
//! not listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;

use super::{Error, LakeCatalog, PinnedLake, Result, TableMeta};
use crate::changelog::BucketKey;
use crate::lake_format::LakeVersion;

pub fn snapshots_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("version", DataType::Int64, false),
        Field::new(
            "committed_at",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("operation", DataType::Utf8, true),
        Field::new("checkpoint_id", DataType::Int64, true),
        Field::new("bucket_offsets", DataType::Utf8, false),
    ]))
}

pub(super) async fn provider(
    catalog: &LakeCatalog,
    meta: &TableMeta,
    pinned: &PinnedLake,
) -> Result<Arc<dyn TableProvider>> {
    let schema = snapshots_schema();
    let (Some(table), Some(latest)) = (&pinned.table, pinned.version) else {
        if !meta.lake_enabled {
            return Err(Error::user(format!(
                "table {} has no lake tier (table.datalake.enabled is not true and nothing was tiered)",
                meta.name()
            )));
        }
        return Ok(Arc::new(MemTable::try_new(schema, vec![vec![]])?));
    };
    let first = latest.saturating_sub(catalog.config().snapshots_max.saturating_sub(1) as u64);
    let rows = table
        .history(meta.table_id, first)
        .await
        .map_err(Error::format(&meta.lake_uri))?;
    let batch = snapshots_batch(schema.clone(), &rows)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

fn snapshots_batch(schema: SchemaRef, rows: &[LakeVersion]) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.version))),
        Arc::new(
            TimestampMillisecondArray::from(
                rows.iter().map(|r| r.committed_at_ms).collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.operation.clone()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.checkpoint_id).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| offsets_json(&r.offsets)),
        )),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `{"0":120,"1":98}`: buckets as keys in bucket order; a partition's as `"p<id>/<bucket>"`.
pub fn offsets_json(offsets: &BTreeMap<BucketKey, i64>) -> String {
    let parts: Vec<String> = offsets
        .iter()
        .map(|(b, o)| format!("\"{}\":{o}", b.short()))
        .collect();
    format!("{{{}}}", parts.join(","))
}
