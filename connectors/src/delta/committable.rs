//! What a writer hands the committer at a barrier, and how it travels: the engine carries only
//! record batches, so a committable is a one-row batch whose `committable` column holds JSON.
//! The same JSON is the committer's checkpoint state.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, BinaryArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use deltalake::kernel::Add;
use serde_json::{Value, json};

use super::error::{Error, Result};
use crate::changelog::BucketKey;

const COLUMN: &str = "committable";

/// The offsets one writer saw for one bucket within one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRange {
    /// Where the range continues from: the end of the writer's previous range of the bucket, or
    /// the offset the source started the bucket at. At most `start`; the offsets in between
    /// hold no rows (a Fluss cluster spends an offset on a write that changed nothing). `None`:
    /// not known (a writer restored from the state of an older silt, or a sink whose source
    /// starts at `latest`), and then the commit cannot check for a gap before the range.
    pub follows: Option<i64>,
    /// The first offset seen.
    pub start: i64,
    /// The last offset seen + 1: the txn version once committed.
    pub end: i64,
    pub rows: u64,
}

/// One writer's output for one checkpoint.
#[derive(Debug, Clone)]
pub struct Committable {
    pub checkpoint_id: u64,
    pub writer: u32,
    /// Log tables: data files under the table, one bucket each.
    pub adds: Vec<Add>,
    /// Primary-key tables: staged change files (paths relative to the table root), each
    /// reduced to the last change per key, holding lake columns plus `__change_type`.
    pub staged: Vec<String>,
    pub buckets: BTreeMap<BucketKey, BucketRange>,
}

impl Committable {
    pub fn to_json(&self) -> Result<Value> {
        let adds = self
            .adds
            .iter()
            .map(serde_json::to_value)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Internal(format!("add action does not serialize: {e}")))?;
        let buckets: Vec<Value> = self
            .buckets
            .iter()
            .map(|(b, r)| {
                let mut range =
                    json!({"bucket": b.bucket, "start": r.start, "end": r.end, "rows": r.rows});
                if let Some(partition) = b.partition {
                    range["partition"] = json!(partition);
                }
                if let Some(follows) = r.follows {
                    range["follows"] = json!(follows);
                }
                range
            })
            .collect();
        Ok(json!({
            "checkpoint_id": self.checkpoint_id,
            "writer": self.writer,
            "adds": adds,
            "staged": self.staged,
            "buckets": buckets,
        }))
    }

    pub fn from_json(value: &Value) -> Result<Committable> {
        let bad =
            |what: &str| Error::Committable(format!("{what} is missing or has the wrong type"));
        let u64_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).ok_or_else(|| bad(k));
        let i64_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).ok_or_else(|| bad(k));
        let array_of = |k: &str| value.get(k).and_then(Value::as_array).ok_or_else(|| bad(k));
        // Optional numbers: absent is `None`, present must be a number.
        let some_i64 = |v: &Value, k: &str| match v.get(k) {
            None => Ok(None),
            Some(n) => n.as_i64().map(Some).ok_or_else(|| bad(k)),
        };
        let adds = array_of("adds")?
            .iter()
            .map(|a| {
                serde_json::from_value::<Add>(a.clone())
                    .map_err(|e| Error::Committable(format!("add action: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let staged = array_of("staged")?
            .iter()
            .map(|p| {
                p.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad("staged path"))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut buckets = BTreeMap::new();
        for b in array_of("buckets")? {
            let bucket = BucketKey {
                partition: some_i64(b, "partition")?,
                bucket: i32::try_from(i64_of(b, "bucket")?).map_err(|_| bad("bucket"))?,
            };
            let range = BucketRange {
                follows: some_i64(b, "follows")?,
                start: i64_of(b, "start")?,
                end: i64_of(b, "end")?,
                rows: u64_of(b, "rows")?,
            };
            if range.start >= range.end || range.follows.is_some_and(|f| f > range.start) {
                return Err(Error::Committable(format!(
                    "{bucket} has an empty range or one that continues from after its start: {range:?}"
                )));
            }
            buckets.insert(bucket, range);
        }
        Ok(Committable {
            checkpoint_id: u64_of(value, "checkpoint_id")?,
            writer: u32::try_from(u64_of(value, "writer")?).map_err(|_| bad("writer"))?,
            adds,
            staged,
            buckets,
        })
    }
}

pub fn batch_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        COLUMN,
        DataType::Binary,
        false,
    )]))
}

/// The one-row batch that carries a committable to the committer.
pub fn to_batch(committable: &Committable) -> Result<RecordBatch> {
    let bytes =
        serde_json::to_vec(&committable.to_json()?).map_err(|e| Error::Internal(e.to_string()))?;
    Ok(RecordBatch::try_new(
        batch_schema(),
        vec![Arc::new(BinaryArray::from_iter_values([bytes]))],
    )?)
}

/// Every committable in a batch received by the committer.
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<Committable>> {
    let column = batch
        .column_by_name(COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<BinaryArray>())
        .ok_or_else(|| Error::Committable(format!("the committer's input has no binary column {COLUMN:?} (connect it to a delta writer)")))?;
    (0..column.len())
        .map(|i| {
            let value: Value = serde_json::from_slice(column.value(i))
                .map_err(|e| Error::Committable(e.to_string()))?;
            Committable::from_json(&value)
        })
        .collect()
}

/// The committer's state: pending committables, oldest first.
pub fn encode_pending(pending: &[Committable]) -> Result<Vec<u8>> {
    let values = pending
        .iter()
        .map(Committable::to_json)
        .collect::<Result<Vec<_>>>()?;
    serde_json::to_vec(&Value::Array(values)).map_err(|e| Error::Internal(e.to_string()))
}

pub fn decode_pending(bytes: &[u8]) -> Result<Vec<Committable>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| Error::Committable(e.to_string()))?;
    value
        .as_array()
        .ok_or_else(|| Error::Committable("state is not a list".into()))?
        .iter()
        .map(Committable::from_json)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn committable_round_trips_through_a_batch_and_state() {
        let add = Add {
            path: "__bucket=3/part-1.parquet".into(),
            partition_values: HashMap::from([("__bucket".to_string(), Some("3".to_string()))]),
            size: 100,
            modification_time: 7,
            data_change: true,
            stats: Some(r#"{"numRecords":2}"#.into()),
            ..Default::default()
        };
        let c = Committable {
            checkpoint_id: 9,
            writer: 1,
            adds: vec![add],
            staged: vec!["_silt_staging/x.parquet".into()],
            buckets: BTreeMap::from([
                (
                    BucketKey::table(3),
                    BucketRange {
                        follows: Some(8),
                        start: 10,
                        end: 12,
                        rows: 2,
                    },
                ),
                (
                    BucketKey::partition(17, 3),
                    BucketRange {
                        follows: None,
                        start: 0,
                        end: 4,
                        rows: 4,
                    },
                ),
            ]),
        };
        let json =
            |cs: Vec<Committable>| cs.iter().map(|c| c.to_json().unwrap()).collect::<Vec<_>>();
        assert_eq!(
            json(from_batch(&to_batch(&c).unwrap()).unwrap()),
            json(vec![c.clone()])
        );
        let pending = decode_pending(&encode_pending(&[c.clone(), c.clone()]).unwrap()).unwrap();
        assert_eq!(json(pending), json(vec![c.clone(), c.clone()]));
        // Committables of an older silt say nothing of where a range continues from.
        let mut old = c.to_json().unwrap();
        old["buckets"][0].as_object_mut().unwrap().remove("follows");
        assert_eq!(
            Committable::from_json(&old).unwrap().buckets[&BucketKey::table(3)].follows,
            None
        );
        old["buckets"][0]["follows"] = 11.into();
        assert!(matches!(
            Committable::from_json(&old),
            Err(Error::Committable(_))
        ));
        assert!(decode_pending(b"").unwrap().is_empty());
        assert!(matches!(decode_pending(b"{}"), Err(Error::Committable(_))));
    }
}
