//! The writer operator: changelog batches in, one committable per checkpoint out.
//!
//! Log tables stream rows into Parquet files under the table, one open file per bucket, rolled
//! at `target_file_bytes` ([`LogFiles`]). Primary-key tables buffer changes (`-U` dropped), reduce them to
//! the last change per key and stage them as a Parquet file under `_silt_staging/` when the
//! buffer is full or at the barrier. Either way, at barrier `n` everything written before it
//! is closed and described by the committable of `n`, which travels ahead of the barrier and
//! so lands in the committer's state of checkpoint `n`.
//!
//! The writer's own state is where each bucket's next range continues from (the end of its
//! last range, or the source's start offset): a range says so in `BucketRange::follows`, so
//! the commit can tell offsets that hold no rows from offsets that were never written.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use arrow::array::{Int8Array, Int32Array, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use async_trait::async_trait;
use bytes::Bytes;
use deltalake::Path;
use object_store::ObjectStoreExt as _;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use silt_engine::{Operator, Output, RestoredState, TaskContext};
use tracing::debug;

use super::committable::{BucketRange, Committable, to_batch};
use super::error::{Error, Result};
use super::files::{add_bucket, add_rows, int_column, writer_properties};
use super::log_files::LogFiles;
use super::reduce::last_change_per_key;
use super::schema::conform_changes;
use super::table::LakeTable;
use super::{DeltaSinkConfig, TableKind};
use crate::changelog::{
    BUCKET_COLUMN, BucketKey, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN, PARTITION_ID_COLUMN,
};

use super::maintenance::STAGING_DIR;

pub struct DeltaWriter {
    config: Arc<DeltaSinkConfig>,
    subtask: u32,
    attempt: u32,
    lake: Option<LakeTable>,
    /// Log tables: the open data files.
    files: Option<LogFiles>,
    /// Primary-key tables: changes not yet staged, and files staged since the last barrier.
    changes: Vec<RecordBatch>,
    changes_bytes: usize,
    staged: Vec<String>,
    staged_count: u64,
    /// Offsets seen per bucket since the last barrier.
    buckets: BTreeMap<BucketKey, BucketRange>,
    /// Per bucket, where its next range continues from (checkpointed).
    follows: BTreeMap<BucketKey, i64>,
}

impl DeltaWriter {
    pub fn new(config: Arc<DeltaSinkConfig>, ctx: &TaskContext) -> Self {
        DeltaWriter {
            config,
            subtask: ctx.subtask_index,
            attempt: ctx.attempt,
            lake: None,
            files: None,
            changes: Vec::new(),
            changes_bytes: 0,
            staged: Vec::new(),
            staged_count: 0,
            buckets: BTreeMap::new(),
            follows: BTreeMap::new(),
        }
    }

    fn lake(&self) -> Result<&LakeTable> {
        self.lake
            .as_ref()
            .ok_or_else(|| Error::Internal("the delta writer was used before open".into()))
    }

    fn writer_properties(&self) -> WriterProperties {
        writer_properties(&self.config)
    }

    /// Records the offsets of a batch per bucket. **Assertion at the batch edge:** offsets of a
    /// bucket increase, and never fall below where the bucket's range continues from (the
    /// source reads each bucket in order from there and one writer sees a bucket's rows in
    /// order).
    fn track_offsets(&mut self, batch: &RecordBatch) -> Result<()> {
        let buckets = int_column::<Int32Array>(batch, BUCKET_COLUMN)?;
        let offsets = int_column::<Int64Array>(batch, OFFSET_COLUMN)?;
        let partitions = if self.config.is_partitioned() {
            Some(int_column::<Int64Array>(batch, PARTITION_ID_COLUMN)?)
        } else {
            None
        };
        for i in 0..batch.num_rows() {
            let bucket = BucketKey {
                partition: partitions.map(|p| p.value(i)),
                bucket: buckets.value(i),
            };
            let offset = offsets.value(i);
            let follows = self.follows.get(&bucket).copied();
            let range = self.buckets.entry(bucket).or_insert(BucketRange {
                follows,
                start: offset,
                end: follows.unwrap_or(offset),
                rows: 0,
            });
            if offset < range.end {
                return Err(Error::Batch(format!(
                    "offsets of {bucket} go backwards ({offset} after {}); feed the writer by __bucket (hash or forward)",
                    range.end - 1
                )));
            }
            range.end = offset + 1;
            range.rows += 1;
        }
        Ok(())
    }

    async fn write_log(&mut self, batch: RecordBatch) -> Result<()> {
        let files = self
            .files
            .as_mut()
            .ok_or_else(|| Error::Internal("log writer not open".into()))?;
        files.write(batch).await
    }

    async fn buffer_changes(&mut self, batch: RecordBatch) -> Result<()> {
        let change_types = int_column::<Int8Array>(&batch, CHANGE_TYPE_COLUMN)?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let change = ChangeType::from_i8(change_types.value(i)).ok_or_else(|| {
                Error::Batch(format!(
                    "unknown change type {} (see changelog.rs)",
                    change_types.value(i)
                ))
            })?;
            keep.push(Some(change != ChangeType::UpdateBefore));
        }
        let batch = filter_record_batch(&batch, &keep.into())?;
        let schema = self.lake()?.staged_schema();
        let batch = conform_changes(&batch, &schema)?;
        self.changes_bytes += batch.get_array_memory_size();
        self.changes.push(batch);
        if self.changes_bytes >= self.config.change_buffer_bytes_max {
            self.stage().await?;
        }
        Ok(())
    }

    /// Reduces the buffered changes to the last per key and writes them to a staging file.
    async fn stage(&mut self) -> Result<()> {
        let Some(key_columns) = self.config.lake_key_columns() else {
            return Ok(());
        };
        if self.changes.is_empty() {
            return Ok(());
        }
        let (store, schema) = (
            self.lake()?.table().object_store(),
            self.lake()?.staged_schema(),
        );
        let all = arrow::compute::concat_batches(&schema, &self.changes)?;
        let reduced = last_change_per_key(&all, &key_columns)?;
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(self.writer_properties()))?;
        writer.write(&reduced)?;
        writer.close()?;
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        self.staged_count += 1;
        let path = format!(
            "{STAGING_DIR}/w{}-a{}-{}-{random:016x}.parquet",
            self.subtask, self.attempt, self.staged_count
        );
        store
            .put(&Path::from(path.as_str()), Bytes::from(bytes).into())
            .await
            .map_err(|source| Error::Storage {
                path: path.clone(),
                source,
            })?;
        debug!(path, rows = reduced.num_rows(), "staged changes");
        self.staged.push(path);
        self.changes.clear();
        self.changes_bytes = 0;
        Ok(())
    }

    /// Closes everything written since the last barrier into one committable.
    async fn close_for_checkpoint(&mut self, checkpoint_id: u64) -> Result<Option<Committable>> {
        let adds = match self.files.as_mut() {
            Some(files) => files.flush().await?,
            None => Vec::new(),
        };
        self.stage().await?;
        let buckets = std::mem::take(&mut self.buckets);
        let staged = std::mem::take(&mut self.staged);
        self.follows
            .extend(buckets.iter().map(|(&b, range)| (b, range.end)));
        if buckets.is_empty() {
            if !adds.is_empty() || !staged.is_empty() {
                return Err(Error::Internal(format!(
                    "{} files but no offsets at checkpoint {checkpoint_id}",
                    adds.len() + staged.len()
                )));
            }
            return Ok(None);
        }
        let mut rows: BTreeMap<BucketKey, u64> = BTreeMap::new();
        for add in &adds {
            *rows.entry(add_bucket(add)?).or_default() += add_rows(add)?;
        }
        if matches!(self.config.kind, TableKind::Log) {
            let want: BTreeMap<BucketKey, u64> =
                buckets.iter().map(|(&b, r)| (b, r.rows)).collect();
            if rows != want {
                return Err(Error::Internal(format!(
                    "checkpoint {checkpoint_id}: data files hold rows {rows:?} per bucket, the writer saw {want:?}"
                )));
            }
        }
        Ok(Some(Committable {
            checkpoint_id,
            writer: self.subtask,
            adds,
            staged,
            buckets,
        }))
    }
}

#[async_trait]
impl Operator for DeltaWriter {
    async fn open(
        &mut self,
        _ctx: &TaskContext,
        restored: RestoredState,
    ) -> silt_engine::Result<()> {
        // Union state: after a change of parallelism a writer may own buckets another one saw.
        // A checkpoint of an older silt has empty writer states: nothing is known then.
        self.follows = if restored.is_restored() {
            let mut follows = BTreeMap::new();
            for state in restored.all() {
                for (bucket, offset) in decode_follows(state)? {
                    let entry = follows.entry(bucket).or_insert(offset);
                    *entry = (*entry).max(offset);
                }
            }
            follows
        } else {
            self.config.start_offsets.clone().unwrap_or_default()
        };
        let lake = LakeTable::open(self.config.clone()).await?;
        if self.config.kind == TableKind::Log {
            self.files = Some(LogFiles::open(&lake, &self.config)?);
        }
        self.lake = Some(lake);
        Ok(())
    }

    async fn process(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut Output,
    ) -> silt_engine::Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.track_offsets(&batch)?;
        match self.config.kind {
            TableKind::Log => self.write_log(batch).await?,
            TableKind::PrimaryKey { .. } => self.buffer_changes(batch).await?,
        }
        Ok(())
    }

    async fn snapshot(
        &mut self,
        checkpoint_id: u64,
        out: &mut Output,
    ) -> silt_engine::Result<Bytes> {
        if let Some(committable) = self.close_for_checkpoint(checkpoint_id).await? {
            out.emit(to_batch(&committable)?).await?;
        }
        Ok(encode_follows(&self.follows))
    }
}

/// Starts the writer state of a partitioned table. An unpartitioned table's state starts with
/// a bucket number, whose first byte is never `0xff` (buckets are not negative).
const PARTITIONED_STATE_TAG: [u8; 4] = [0xff, b'P', 0, 1];

/// The writer's state, big-endian: an unpartitioned table's as `(bucket i32, offset i64)`
/// pairs (the format before partitions, so older checkpoints restore); a partitioned table's
/// as the tag, then `(partition i64, bucket i32, offset i64)` triples.
fn encode_follows(follows: &BTreeMap<BucketKey, i64>) -> Bytes {
    let partitioned = follows.keys().any(|k| k.partition.is_some());
    let mut out = Vec::with_capacity(4 + follows.len() * 20);
    if partitioned {
        out.extend_from_slice(&PARTITIONED_STATE_TAG);
    }
    for (key, offset) in follows {
        if partitioned {
            // A partitioned table's buckets all have a partition.
            out.extend_from_slice(&key.partition.unwrap_or(-1).to_be_bytes());
        }
        out.extend_from_slice(&key.bucket.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
    }
    Bytes::from(out)
}

fn decode_follows(state: &Bytes) -> Result<BTreeMap<BucketKey, i64>> {
    let (body, entry) = match state.strip_prefix(&PARTITIONED_STATE_TAG) {
        Some(body) => (body, 20),
        None => (&state[..], 12),
    };
    if body.len() % entry != 0 {
        return Err(Error::Committable(format!(
            "delta writer state of {} bytes is not a list of (bucket, offset) pairs",
            state.len()
        )));
    }
    let i64_at = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    let i32_at = |b: &[u8]| i32::from_be_bytes(b.try_into().expect("4 bytes"));
    Ok(body
        .chunks_exact(entry)
        .map(|e| {
            let (partition, rest) = if entry == 20 {
                (Some(i64_at(&e[..8])), &e[8..])
            } else {
                (None, e)
            };
            let key = BucketKey {
                partition,
                bucket: i32_at(&rest[..4]),
            };
            (key, i64_at(&rest[4..12]))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_state_round_trips_and_rejects_damage() {
        let follows = crate::changelog::table_buckets([(0, 10), (3, 0), (7, i64::MAX)]);
        assert_eq!(decode_follows(&encode_follows(&follows)).unwrap(), follows);
        let partitioned: BTreeMap<BucketKey, i64> = [
            (BucketKey::partition(0, 0), 10),
            (BucketKey::partition(0, 3), 0),
            (BucketKey::partition(12, 0), i64::MAX),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            decode_follows(&encode_follows(&partitioned)).unwrap(),
            partitioned
        );
        assert!(
            decode_follows(&Bytes::new()).unwrap().is_empty(),
            "an older silt's state"
        );
        assert!(decode_follows(&Bytes::from_static(&[1, 2, 3])).is_err());
    }
}
