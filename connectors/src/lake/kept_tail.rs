//! Hot tails of real-time views kept between queries, so a query of `db.t` reads from the hot
//! store only the offsets that arrived since the last query of the table.
//!
//! **Contract:** a kept tail belongs to one table id (never a name: a table dropped and created
//! again under its name is another table) and one user schema. For each bucket it covers it holds
//! the rows of the offsets `[from, to)` as the view keeps them, each with its `__offset`: every
//! row of a log table, the last change per key of a primary-key table. A query whose tail starts
//! at `L` in a bucket (the pinned lake's offset, or where the hot store's changelog starts when
//! the lake has nothing of the bucket) and ends at high watermark `H` reuses the bucket when
//! `from <= L < to <= H`: it drops the kept rows below `L` and reads `[to, H)`. For a log table
//! the rows left are `[L, to)`. For a primary-key table the result is the last change per key of
//! `[L, H)`: a key's last change in `[from, H)` at or past `L` is its last change in `[L, H)`,
//! and a key whose last change lies below `L` has none in `[L, H)` (the lake holds it, or it
//! expired from the hot store as it would for a fresh read). Any other bucket (its kept range
//! past `H`, starting past `L` or ending at or below it) is read as if nothing were kept.
//!
//! **Limits:** at most `bytes_max` bytes of kept rows in all (Arrow memory); the least recently
//! used tables go first, and a tail larger than the bound is not kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, BinaryArray, BooleanArray, Int32Array, Int64Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

use super::{Error, Result};
use crate::changelog::{BUCKET_COLUMN, BucketKey, OFFSET_COLUMN, PARTITION_ID_COLUMN};
use crate::delta::{encode_keys, last_change_per_key};

/// A primary-key table's kept rows carry their key in arrow's row format in this column, so a
/// query that read new changes drops the kept rows they supersede without encoding the kept
/// keys again (the view's plan reads columns by name and never this one).
pub(super) const KEY_COLUMN: &str = "__kept_key";

/// One table's kept tail (see the module's contract).
#[derive(Debug)]
pub(super) struct KeptTail {
    /// The user's columns the rows were read with; a query of another schema keeps nothing.
    pub user_schema: SchemaRef,
    /// The columns the Fluss source read the rows in (without [`KEY_COLUMN`]).
    pub source_schema: SchemaRef,
    /// Per bucket, the offsets `[from, to)` whose rows `rows` holds.
    pub ranges: BTreeMap<BucketKey, (i64, i64)>,
    /// The tail's rows with `__bucket`, `__offset` (and a partitioned table's `__partition_id`).
    pub rows: RecordBatch,
}

/// What one query takes from a kept tail and where it reads on.
#[derive(Debug, Default)]
pub(super) struct Reuse {
    /// The kept rows still in the query's tail: of reused buckets, at or past the lake's offset.
    pub rows: Option<RecordBatch>,
    /// Where the read starts, per bucket; a bucket not named starts at the earliest offset
    /// the hot store keeps (the lake has nothing of it).
    pub start: BTreeMap<BucketKey, i64>,
    /// Offsets the read covers in the buckets whose start is known.
    pub offsets_to_read: i64,
    /// Whether some bucket must be read from its earliest offset (so its count is unknown).
    pub reads_from_earliest: bool,
}

impl Reuse {
    pub fn needs_read(&self) -> bool {
        self.offsets_to_read > 0 || self.reads_from_earliest
    }
}

/// Decides, per bucket of `high_watermarks`, what of `kept` a query pinned at `lake` offsets
/// reuses, and returns the kept rows it keeps and where its read starts. A bucket the lake has
/// nothing of starts where the hot store's changelog starts: at its `earliest` offset when
/// known (listed by the query), else unknown and never reused.
pub(super) fn reuse(
    kept: Option<&KeptTail>,
    lake: &BTreeMap<BucketKey, i64>,
    earliest: &BTreeMap<BucketKey, i64>,
    high_watermarks: &BTreeMap<BucketKey, i64>,
) -> Result<Reuse, ArrowError> {
    let mut out = Reuse::default();
    // The offset from which each reused bucket's kept rows stay.
    let mut reused: BTreeMap<BucketKey, i64> = BTreeMap::new();
    for (bucket, hw) in high_watermarks {
        let Some(floor) = lake.get(bucket).or_else(|| earliest.get(bucket)).copied() else {
            out.reads_from_earliest = true;
            continue;
        };
        match kept.and_then(|k| k.ranges.get(bucket)) {
            Some(&(kept_from, kept_to))
                if kept_from <= floor && floor < kept_to && kept_to <= *hw =>
            {
                reused.insert(*bucket, floor);
                out.start.insert(*bucket, kept_to);
                out.offsets_to_read += hw - kept_to;
            }
            _ => {
                // Not named, a bucket the lake has nothing of starts at the earliest offset
                // the hot store keeps when the read opens, even if retention moved it since
                // it was listed.
                if lake.contains_key(bucket) {
                    out.start.insert(*bucket, floor);
                }
                out.offsets_to_read += (hw - floor).max(0);
            }
        }
    }
    if let Some(kept) = kept
        && !reused.is_empty()
    {
        out.rows = Some(rows_at_or_past(&kept.rows, &reused)?);
    }
    Ok(out)
}

/// The rows of `rows` whose bucket is in `floors` and whose offset is at or past its floor.
fn rows_at_or_past(
    rows: &RecordBatch,
    floors: &BTreeMap<BucketKey, i64>,
) -> Result<RecordBatch, ArrowError> {
    let column = |name: &str| {
        rows.column_by_name(name)
            .ok_or_else(|| ArrowError::SchemaError(format!("a kept tail without {name}")))
    };
    let buckets = column(BUCKET_COLUMN)?;
    let buckets = buckets
        .as_any()
        .downcast_ref::<Int32Array>()
        .ok_or_else(|| ArrowError::SchemaError(format!("{BUCKET_COLUMN} is not Int32")))?;
    let offsets = column(OFFSET_COLUMN)?;
    let offsets = offsets
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| ArrowError::SchemaError(format!("{OFFSET_COLUMN} is not Int64")))?;
    let partitions = rows
        .column_by_name(PARTITION_ID_COLUMN)
        .map(|c| {
            c.as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .ok_or_else(|| {
                    ArrowError::SchemaError(format!("{PARTITION_ID_COLUMN} is not Int64"))
                })
        })
        .transpose()?;
    let keep: BooleanArray = (0..rows.num_rows())
        .map(|i| {
            let bucket = BucketKey {
                partition: partitions.as_ref().map(|p| p.value(i)),
                bucket: buckets.value(i),
            };
            Some(floors.get(&bucket).is_some_and(|f| offsets.value(i) >= *f))
        })
        .collect();
    if keep.true_count() == rows.num_rows() {
        return Ok(rows.clone());
    }
    filter_record_batch(rows, &keep)
}

/// The tail of a query: the kept rows it reuses followed by the `new` rows read since. A log
/// table's are all of them; a primary-key table's the last change per key, each kept row whose
/// key changed since replaced by the new change, with [`KEY_COLUMN`].
pub(super) fn merge(
    kept: Option<RecordBatch>,
    new: RecordBatch,
    primary_key: &[String],
) -> Result<RecordBatch> {
    if primary_key.is_empty() {
        return Ok(match kept {
            Some(kept) if new.num_rows() == 0 => kept,
            Some(kept) => concat_batches(&new.schema(), [&kept, &new])?,
            None => new,
        });
    }
    if new.num_rows() == 0
        && let Some(kept) = kept
    {
        return Ok(kept);
    }
    let new = if new.num_rows() == 0 {
        new
    } else {
        last_change_per_key(&new, primary_key)
            .map_err(|e| Error::Internal(format!("reducing a hot tail: {e}")))?
    };
    let new = with_keys(&new, primary_key)?;
    let Some(kept) = kept else {
        return Ok(new);
    };
    let keys = |batch: &RecordBatch| -> Result<BinaryArray> {
        batch
            .column_by_name(KEY_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<BinaryArray>().cloned())
            .ok_or_else(|| Error::Internal(format!("a kept tail without {KEY_COLUMN}")))
    };
    let changed = keys(&new)?;
    let changed: HashSet<&[u8]> = changed.iter().flatten().collect();
    let still: BooleanArray = keys(&kept)?
        .iter()
        .map(|k| Some(!k.is_some_and(|k| changed.contains(k))))
        .collect();
    let kept = filter_record_batch(&kept, &still)?;
    Ok(concat_batches(&new.schema(), [&kept, &new])?)
}

/// `batch` with [`KEY_COLUMN`]: its `primary_key` columns in arrow's row format.
fn with_keys(batch: &RecordBatch, primary_key: &[String]) -> Result<RecordBatch> {
    let rows = encode_keys(batch, primary_key)
        .map_err(|e| Error::Internal(format!("encoding the keys of a hot tail: {e}")))?;
    let keys = BinaryArray::from_iter_values(rows.iter());
    let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(KEY_COLUMN, DataType::Binary, false)));
    let mut arrays = batch.columns().to_vec();
    arrays.push(Arc::new(keys));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The ranges a query's tail covers: `[lake offset, high watermark)` of each bucket, or from its
/// `earliest` offset when the lake has nothing of it (a bucket whose start is unknown is not
/// kept).
pub(super) fn ranges(
    lake: &BTreeMap<BucketKey, i64>,
    earliest: &BTreeMap<BucketKey, i64>,
    high_watermarks: &BTreeMap<BucketKey, i64>,
) -> BTreeMap<BucketKey, (i64, i64)> {
    high_watermarks
        .iter()
        .filter_map(|(b, hw)| {
            let from = lake.get(b).or_else(|| earliest.get(b))?;
            Some((*b, (*from, (*hw).max(*from))))
        })
        .collect()
}

/// The kept tails of all tables, by table id, bounded in bytes. Cheap to share.
#[derive(Debug)]
pub(super) struct KeptTails {
    bytes_max: usize,
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    tails: HashMap<i64, (u64, Arc<KeptTail>)>,
    bytes: usize,
    /// Counts uses, for least-recently-used eviction.
    clock: u64,
}

impl KeptTails {
    pub fn new(bytes_max: usize) -> KeptTails {
        KeptTails {
            bytes_max,
            inner: Mutex::new(Kept::default()),
        }
    }

    /// The kept tail of `table_id` when it was read with `user_schema`.
    pub fn get(&self, table_id: i64, user_schema: &SchemaRef) -> Option<Arc<KeptTail>> {
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        kept.clock += 1;
        let clock = kept.clock;
        let (used, tail) = kept.tails.get_mut(&table_id)?;
        if tail.user_schema != *user_schema {
            return None;
        }
        *used = clock;
        Some(tail.clone())
    }

    /// Keeps `tail` as `table_id`'s (replacing what was kept), then forgets the least recently
    /// used tails until all fit the bound; a tail over the bound alone is not kept.
    pub fn keep(&self, table_id: i64, tail: KeptTail) {
        let size = tail.rows.get_array_memory_size();
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, old)) = kept.tails.remove(&table_id) {
            kept.bytes -= old.rows.get_array_memory_size();
        }
        if size > self.bytes_max {
            return;
        }
        kept.clock += 1;
        let clock = kept.clock;
        kept.tails.insert(table_id, (clock, Arc::new(tail)));
        kept.bytes += size;
        while kept.bytes > self.bytes_max {
            let Some(oldest) = kept
                .tails
                .iter()
                .filter(|(id, _)| **id != table_id)
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| *id)
            else {
                break;
            };
            if let Some((_, old)) = kept.tails.remove(&oldest) {
                kept.bytes -= old.rows.get_array_memory_size();
            }
        }
        debug_assert!(kept.bytes <= self.bytes_max);
    }

    /// Bytes kept now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::{CHANGE_TYPE_COLUMN, ChangeType};
    use crate::delta::last_change_per_key;
    use arrow::array::Int8Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use rand::{Rng as _, SeedableRng as _};

    fn b(bucket: i32) -> BucketKey {
        BucketKey::table(bucket)
    }

    fn offsets(pairs: &[(i32, i64)]) -> BTreeMap<BucketKey, i64> {
        pairs.iter().map(|(bucket, o)| (b(*bucket), *o)).collect()
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new(BUCKET_COLUMN, DataType::Int32, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
            Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false),
        ]))
    }

    /// `(key, value, bucket, offset, change)` rows as a tail batch.
    fn batch(rows: &[(i64, i64, i32, i64, ChangeType)]) -> RecordBatch {
        let col = |f: fn(&(i64, i64, i32, i64, ChangeType)) -> i64| {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
        };
        RecordBatch::try_new(
            schema(),
            vec![
                col(|r| r.0),
                col(|r| r.1),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
                col(|r| r.3),
                Arc::new(Int8Array::from_iter_values(rows.iter().map(|r| r.4 as i8))),
            ],
        )
        .unwrap()
    }

    fn kept(ranges: &[(i32, i64, i64)], rows: RecordBatch) -> KeptTail {
        KeptTail {
            user_schema: schema(),
            source_schema: schema(),
            ranges: ranges.iter().map(|(k, f, t)| (b(*k), (*f, *t))).collect(),
            rows,
        }
    }

    /// One case: kept ranges, lake offsets, high watermarks -> read starts, offsets to read,
    /// whether a bucket reads from its earliest offset, kept rows left (bucket, offset).
    #[allow(clippy::type_complexity)]
    fn check(
        ranges: &[(i32, i64, i64)],
        (lake, earliest): (&[(i32, i64)], &[(i32, i64)]),
        hw: &[(i32, i64)],
        want: (&[(i32, i64)], i64, bool, &[(i32, i64)]),
    ) {
        let rows = batch(
            &ranges
                .iter()
                .flat_map(|(k, f, t)| (*f..*t).map(move |o| (o, o, *k, o, ChangeType::Insert)))
                .collect::<Vec<_>>(),
        );
        let kept = kept(ranges, rows);
        let r = reuse(
            Some(&kept),
            &offsets(lake),
            &offsets(earliest),
            &offsets(hw),
        )
        .unwrap();
        let left: Vec<(i32, i64)> = r
            .rows
            .map(|rows| {
                let bs = rows
                    .column(2)
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap()
                    .clone();
                let os = rows
                    .column(3)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                (0..rows.num_rows())
                    .map(|i| (bs.value(i), os.value(i)))
                    .collect()
            })
            .unwrap_or_default();
        let got = (r.start, r.offsets_to_read, r.reads_from_earliest, left);
        let want = (offsets(want.0), want.1, want.2, want.3.to_vec());
        assert_eq!(
            got, want,
            "kept {ranges:?}, lake {lake:?}, earliest {earliest:?}, hw {hw:?}"
        );
    }

    #[test]
    fn a_query_reuses_a_bucket_only_when_its_kept_range_fits_the_pin() {
        let lake = |l: &'static [(i32, i64)]| (l, &[][..]);
        // Nothing new: nothing read, every kept row stays.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 2)]),
            &[(0, 4)],
            (&[(0, 4)], 0, false, &[(0, 2), (0, 3)]),
        );
        // New offsets: read on from the kept end.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 2)]),
            &[(0, 6)],
            (&[(0, 4)], 2, false, &[(0, 2), (0, 3)]),
        );
        // The lake moved on: the rows it holds are dropped.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 3)]),
            &[(0, 6)],
            (&[(0, 4)], 2, false, &[(0, 3)]),
        );
        // The lake passed the kept end: nothing kept stays, the read starts at the lake.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 5)]),
            &[(0, 6)],
            (&[(0, 5)], 1, false, &[]),
        );
        // A lake offset below the kept start (another lake version): read afresh.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 1)]),
            &[(0, 6)],
            (&[(0, 1)], 5, false, &[]),
        );
        // A high watermark below the kept end (an older capture): read afresh.
        check(
            &[(0, 2, 4)],
            lake(&[(0, 2)]),
            &[(0, 3)],
            (&[(0, 2)], 1, false, &[]),
        );
        // Nothing tiered of bucket 1: kept from its earliest offset, reused while retention
        // has not moved that past the kept start; its expired rows are dropped.
        check(
            &[(0, 2, 4), (1, 0, 2)],
            (&[(0, 2)], &[(1, 0)]),
            &[(0, 4), (1, 3)],
            (
                &[(0, 4), (1, 2)],
                1,
                false,
                &[(0, 2), (0, 3), (1, 0), (1, 1)],
            ),
        );
        check(
            &[(0, 2, 4), (1, 0, 2)],
            (&[(0, 2)], &[(1, 1)]),
            &[(0, 4), (1, 3)],
            (&[(0, 4), (1, 2)], 1, false, &[(0, 2), (0, 3), (1, 1)]),
        );
        // Retention passed the kept end: the bucket is read from the earliest offset the hot
        // store keeps when the read opens (not named).
        check(
            &[(0, 2, 4), (1, 0, 2)],
            (&[(0, 2)], &[(1, 3)]),
            &[(0, 4), (1, 5)],
            (&[(0, 4)], 2, false, &[(0, 2), (0, 3)]),
        );
        // A bucket whose start is unknown is read from the earliest offset, the others on.
        check(
            &[(0, 2, 4), (1, 0, 2)],
            lake(&[(0, 2)]),
            &[(0, 4), (1, 3)],
            (&[(0, 4)], 0, true, &[(0, 2), (0, 3)]),
        );
        // A bucket no longer read (its partition dropped) leaves its rows behind.
        check(
            &[(0, 2, 4), (1, 0, 2)],
            lake(&[(0, 2), (1, 0)]),
            &[(0, 4)],
            (&[(0, 4)], 0, false, &[(0, 2), (0, 3)]),
        );
    }

    /// What the view's tail of a primary-key table is, read afresh: the last change per key of
    /// `[lake, hw)` of each bucket.
    fn fresh_tail(
        log: &BTreeMap<BucketKey, Vec<(i64, i64, ChangeType)>>,
        floors: &BTreeMap<BucketKey, i64>,
        hw: &BTreeMap<BucketKey, i64>,
    ) -> Vec<(i64, i64, i64)> {
        let mut rows = Vec::new();
        for (bucket, end) in hw {
            let from = floors[bucket];
            for o in from..*end {
                let (k, v, t) = log[bucket][o as usize];
                rows.push((k, v, bucket.bucket, o, t));
            }
        }
        sorted(&reduce(batch(&rows)))
    }

    fn reduce(rows: RecordBatch) -> RecordBatch {
        if rows.num_rows() == 0 {
            return rows;
        }
        last_change_per_key(&rows, &["k".to_string()]).unwrap()
    }

    /// `(key, value, offset)` of a tail, sorted.
    fn sorted(rows: &RecordBatch) -> Vec<(i64, i64, i64)> {
        let col = |i: usize| {
            rows.column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone()
        };
        let (k, v, o) = (col(0), col(1), col(3));
        let mut out: Vec<_> = (0..rows.num_rows())
            .map(|i| (k.value(i), v.value(i), o.value(i)))
            .collect();
        out.sort();
        out
    }

    /// Random primary-key changelogs, lake offsets that move forward (and now and then back),
    /// buckets never tiered whose changelog start retention moves on, and high watermarks
    /// captured in any order: the tail built through the kept tails equals the tail read
    /// afresh, query after query.
    #[test]
    fn kept_tails_give_the_fresh_tail_of_a_primary_key_table() {
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let buckets = rng.random_range(1..4);
            let keys = rng.random_range(3..30);
            let mut log: BTreeMap<BucketKey, Vec<(i64, i64, ChangeType)>> = BTreeMap::new();
            let tails = KeptTails::new(usize::MAX);
            let (mut lake, mut hw) = (BTreeMap::new(), BTreeMap::new());
            // Bucket 0 of half the seeds is never tiered: it starts at its earliest offset.
            let untiered = rng.random_bool(0.5);
            let mut earliest: BTreeMap<BucketKey, i64> = BTreeMap::new();
            for query in 0..30 {
                // Writes: each key lives in one bucket.
                for _ in 0..rng.random_range(0..20) {
                    let k = rng.random_range(0..keys);
                    let bucket = b((k % buckets) as i32);
                    let change = if rng.random_bool(0.2) {
                        ChangeType::Delete
                    } else {
                        ChangeType::UpdateAfter
                    };
                    log.entry(bucket)
                        .or_default()
                        .push((k, rng.random(), change));
                }
                for bucket in 0..buckets {
                    let bucket = b(bucket as i32);
                    let end = log.get(&bucket).map_or(0, |l| l.len() as i64);
                    // A capture in flight while newer ones landed: now and then an older one.
                    let h = if rng.random_bool(0.15) {
                        rng.random_range(0..=end)
                    } else {
                        end
                    };
                    hw.insert(bucket, h);
                    let l: i64 = lake.get(&bucket).copied().unwrap_or(0);
                    let l = if rng.random_bool(0.1) {
                        rng.random_range(0..=l) // another lake version, further back
                    } else {
                        rng.random_range(l.min(h)..=h)
                    };
                    if untiered && bucket == b(0) {
                        let e = earliest.get(&bucket).copied().unwrap_or(0);
                        earliest.insert(bucket, rng.random_range(e..=e.max(h - 2).max(e)));
                    } else {
                        lake.insert(bucket, l.min(h));
                    }
                }
                let kept = tails.get(1, &schema());
                let r = reuse(kept.as_deref(), &lake, &earliest, &hw).unwrap();
                assert!(!r.reads_from_earliest, "every start is known");
                let mut rows: Vec<(i64, i64, i32, i64, ChangeType)> = Vec::new();
                for bucket in hw.keys() {
                    // A bucket not named starts where the changelog starts.
                    let start = r
                        .start
                        .get(bucket)
                        .or_else(|| earliest.get(bucket))
                        .unwrap();
                    for o in *start..hw[bucket] {
                        let (k, v, t) = log[bucket][o as usize];
                        rows.push((k, v, bucket.bucket, o, t));
                    }
                }
                let tail = merge(r.rows, batch(&rows), &["k".to_string()]).unwrap();
                let floors: BTreeMap<BucketKey, i64> = lake
                    .iter()
                    .chain(&earliest)
                    .map(|(b, o)| (*b, *o))
                    .collect();
                assert_eq!(
                    sorted(&tail),
                    fresh_tail(&log, &floors, &hw),
                    "seed {seed}, query {query}: lake {lake:?}, hw {hw:?}"
                );
                tails.keep(
                    1,
                    KeptTail {
                        user_schema: schema(),
                        source_schema: schema(),
                        ranges: ranges(&lake, &earliest, &hw),
                        rows: tail,
                    },
                );
            }
        }
    }

    #[test]
    fn kept_tails_stay_within_their_bound_and_forget_the_least_recently_used() {
        let rows = batch(
            &(0..100)
                .map(|o| (o, o, 0, o, ChangeType::Insert))
                .collect::<Vec<_>>(),
        );
        let size = rows.get_array_memory_size();
        let tails = KeptTails::new(2 * size + size / 2);
        let tail = |rows: &RecordBatch| kept(&[(0, 0, 100)], rows.clone());
        tails.keep(1, tail(&rows));
        tails.keep(2, tail(&rows));
        assert!(tails.get(1, &schema()).is_some(), "1 used after 2");
        tails.keep(3, tail(&rows));
        assert!(tails.bytes() <= 2 * size + size / 2);
        assert!(
            tails.get(2, &schema()).is_none(),
            "2 was the least recently used"
        );
        assert!(tails.get(1, &schema()).is_some() && tails.get(3, &schema()).is_some());
        // Another schema (the table gained a column) reuses nothing.
        let other = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        assert!(tails.get(1, &other).is_none());
        // A tail over the bound is not kept, and replaces what was.
        let small = KeptTails::new(size / 2);
        small.keep(1, tail(&rows));
        assert!(small.get(1, &schema()).is_none() && small.bytes() == 0);
    }
}
