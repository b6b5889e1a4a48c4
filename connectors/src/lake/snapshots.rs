//! `db.t$lake$snapshots`: one row per lake version up to the pinned one: its commit time, the
//! operation, the silt checkpoint that made it, and the per-bucket txn end offsets after it
//! (as a JSON object `{"bucket": offset}`, a partitioned table's `{"p<partition id>/<bucket>":
//! offset}`, so every output format can carry it).
//!
//! The offsets come from the `txn` actions of the commit files, accumulated from the oldest
//! version read; versions whose commit file was cleaned up by log retention are not listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;

use super::{Error, LakeCatalog, PinnedLake, Result, TableMeta};
use crate::changelog::BucketKey;
use crate::delta::bucket_of_app_id;

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

struct Row {
    version: i64,
    committed_at: Option<i64>,
    operation: Option<String>,
    checkpoint_id: Option<i64>,
    offsets: BTreeMap<BucketKey, i64>,
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
    let table_id = meta.table_id.to_string();
    let log_store = table.log_store();
    let first = latest.saturating_sub(catalog.config().snapshots_max.saturating_sub(1) as u64);
    let mut offsets: BTreeMap<BucketKey, i64> = BTreeMap::new();
    let mut rows = Vec::new();
    for version in first..=latest {
        let Some(bytes) = log_store
            .read_commit_entry(version)
            .await
            .map_err(Error::delta(&meta.lake_uri))?
        else {
            continue;
        };
        let mut row = read_commit(version, &bytes, &table_id, meta, &mut offsets)?;
        row.offsets = offsets.clone();
        rows.push(row);
    }
    let batch = snapshots_batch(schema.clone(), &rows)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

/// One commit's row, its offsets left empty; its txn actions move `offsets` on.
fn read_commit(
    version: u64,
    bytes: &[u8],
    table_id: &str,
    meta: &TableMeta,
    offsets: &mut BTreeMap<BucketKey, i64>,
) -> Result<Row> {
    let mut row = Row {
        version: version as i64,
        committed_at: None,
        operation: None,
        checkpoint_id: None,
        offsets: BTreeMap::new(),
    };
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let action: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
            Error::Internal(format!(
                "commit {version} of {} is not JSON lines: {e}",
                meta.lake_uri
            ))
        })?;
        if let Some(info) = action.get("commitInfo") {
            row.committed_at = info.get("timestamp").and_then(|v| v.as_i64());
            row.operation = info
                .get("operation")
                .and_then(|v| v.as_str())
                .map(str::to_string);
            row.checkpoint_id = info.get("silt.checkpointId").and_then(|v| v.as_i64());
        }
        if let Some(txn) = action.get("txn") {
            let app = txn.get("appId").and_then(|v| v.as_str()).unwrap_or("");
            let bucket = bucket_of_app_id(table_id, app);
            if let (Some(bucket), Some(v)) = (bucket, txn.get("version").and_then(|v| v.as_i64())) {
                offsets.insert(bucket, v);
            }
        }
    }
    Ok(row)
}

fn snapshots_batch(schema: SchemaRef, rows: &[Row]) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.version))),
        Arc::new(
            TimestampMillisecondArray::from(
                rows.iter().map(|r| r.committed_at).collect::<Vec<_>>(),
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
