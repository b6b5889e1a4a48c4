//! The data the benches share: the 12-column table of mixed types, its deterministic rows, and
//! the wait until a lake covers given high watermarks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, SchemaRef};
use fluss::metadata::DataTypes;
use silt_connectors::changelog::BucketKey;
use silt_jobs::tiering::TieringService;

/// The bench table's schema: 12 columns of mixed types.
pub fn schema_12() -> fluss::metadata::Schema {
    fluss::metadata::Schema::builder()
        .column("id", DataTypes::bigint())
        .column("user_id", DataTypes::int())
        .column("region", DataTypes::smallint())
        .column("amount", DataTypes::double())
        .column("discount", DataTypes::float())
        .column("paid", DataTypes::boolean())
        .column("sku", DataTypes::string())
        .column("city", DataTypes::string())
        .column("note", DataTypes::string())
        .column("created_ms", DataTypes::bigint())
        .column("qty", DataTypes::int())
        .column("tax", DataTypes::double())
        .build()
        .expect("a valid schema")
}

/// Deterministic rows `from..from+n` in the table's Arrow schema.
pub fn make_batch(schema: &SchemaRef, from: u64, n: usize) -> Result<RecordBatch> {
    let ids: Vec<i64> = (from..from + n as u64).map(|i| i as i64).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(12);
    for (i, field) in schema.fields().iter().enumerate() {
        let col: ArrayRef = match (i, field.data_type()) {
            (0, _) | (9, _) => Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|v| v * if i == 9 { 1000 } else { 1 }),
            )),
            (_, DataType::Int32) => Arc::new(Int32Array::from_iter_values(
                ids.iter().map(|v| (v % 10_007) as i32),
            )),
            (_, DataType::Int16) => Arc::new(Int16Array::from_iter_values(
                ids.iter().map(|v| (v % 17) as i16),
            )),
            (_, DataType::Float64) => Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|v| (v % 9973) as f64 * 0.25),
            )),
            (_, DataType::Float32) => Arc::new(Float32Array::from_iter_values(
                ids.iter().map(|v| (v % 7) as f32 * 0.05),
            )),
            (_, DataType::Boolean) => Arc::new(BooleanArray::from_iter(
                ids.iter().map(|v| Some(v % 3 == 0)),
            )),
            (6, _) => Arc::new(StringArray::from_iter_values(
                ids.iter().map(|v| format!("SKU-{:06}", v % 50_000)),
            )),
            (7, _) => {
                Arc::new(StringArray::from_iter_values(ids.iter().map(|v| {
                    ["Lisbon", "Oslo", "Lyon", "Kyoto", "Quito"][(*v % 5) as usize]
                })))
            }
            (_, DataType::Utf8) => Arc::new(StringArray::from_iter_values(
                ids.iter().map(|v| format!("order note {v} with some text")),
            )),
            (_, other) => return Err(anyhow!("bench schema has an unexpected type {other}")),
        };
        columns.push(col);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Waits until the lake of `table` covers `targets` (bucket, high watermark); the instant it did.
pub async fn wait_lake_covers(
    tiering: &TieringService,
    table: &str,
    targets: &[(i32, i64)],
    deadline: Instant,
) -> Result<Instant> {
    loop {
        let status = tiering.status().await?;
        if let Some(t) = status.iter().find(|s| s.table == table)
            && targets.iter().all(|(b, hw)| {
                t.buckets
                    .get(&BucketKey::table(*b))
                    .is_some_and(|(_, lake)| lake >= hw)
            })
        {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "the lake of {table} did not reach {targets:?} in time"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
