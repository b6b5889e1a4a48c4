//! The per-key reduction of a primary-key table's changes: what the writer stages, what the
//! lake merges and what a read of the hot tail shows, each the last change per key.

use std::collections::HashMap;

use arrow::array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::row::{RowConverter, Rows, SortField};

use super::error::{Error, Result};
use super::files::int_column;
use crate::changelog::OFFSET_COLUMN;

/// Keeps, per key, the row with the highest `__offset` (the last change). Row order of the
/// result follows the input.
pub(crate) fn last_change_per_key(
    batch: &RecordBatch,
    key_columns: &[String],
) -> Result<RecordBatch> {
    let rows = encode_keys(batch, key_columns)?;
    let offsets = int_column::<Int64Array>(batch, OFFSET_COLUMN)?;
    // Keys are short byte strings: foldhash hashes them several times faster than SipHash,
    // and the map is local, so its hash needs no resistance to chosen keys.
    let mut last: HashMap<arrow::row::Row<'_>, (i64, u32), foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(batch.num_rows(), Default::default());
    for (i, row) in rows.iter().enumerate() {
        let offset = offsets.value(i);
        let entry = last.entry(row).or_insert((offset, i as u32));
        if offset >= entry.0 {
            *entry = (offset, i as u32);
        }
    }
    let mut indices: Vec<u32> = last.into_values().map(|(_, i)| i).collect();
    indices.sort_unstable();
    debug_assert!(offsets.null_count() == 0);
    Ok(take_record_batch(batch, &UInt32Array::from(indices))?)
}

/// The `key_columns` of each row of `batch` in arrow's row format: equal keys, equal bytes.
pub(crate) fn encode_keys(batch: &RecordBatch, key_columns: &[String]) -> Result<Rows> {
    let mut keys = Vec::with_capacity(key_columns.len());
    for name in key_columns {
        let column = batch
            .column_by_name(name)
            .ok_or_else(|| Error::Batch(format!("key column {name:?} is missing")))?;
        keys.push(column.clone());
    }
    let converter = RowConverter::new(
        keys.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    Ok(converter.convert_columns(&keys)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};

    /// `(key, offset, value)` rows in, surviving `(key, offset, value)` rows out.
    fn reduce(rows: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        let out = last_change_per_key(&batch, &["k".to_string()]).unwrap();
        let k = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let o = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let v = out.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        (0..out.num_rows())
            .map(|i| (k.value(i).to_string(), o.value(i), v.value(i)))
            .collect()
    }

    #[test]
    fn the_last_change_per_key_wins() {
        assert_eq!(reduce(&[]), vec![]);
        assert_eq!(
            reduce(&[
                ("a", 1, 10),
                ("b", 2, 20),
                ("a", 3, 11),
                ("c", 4, 30),
                ("b", 5, 21)
            ]),
            vec![
                ("a".into(), 3, 11),
                ("c".into(), 4, 30),
                ("b".into(), 5, 21)
            ]
        );
        // Offsets decide, not positions (staged files of several writers are concatenated).
        assert_eq!(
            reduce(&[("a", 9, 2), ("a", 4, 1)]),
            vec![("a".into(), 9, 2)]
        );
    }
}
