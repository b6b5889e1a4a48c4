//! The lake half of a union read (Fluss's name for it): a source that starts a lake-enabled
//! table from its beginning reads the lake at one pinned Delta version first, then the
//! changelog from that version's txn offsets. Hot retention drops changelog only below what the
//! lake covers, so every row comes exactly once, however much the hot store still holds. A
//! primary-key table's lake rows are its images at that version (`+I`), as Fluss's snapshot
//! then changelog.
//!
//! Each subtask reads the lake rows of the buckets it owns, ordered by `(__bucket, __offset)`
//! (unique in a lake), so a restore from a checkpoint taken mid-way re-reads the same version
//! and skips the rows it had emitted. The sort runs in a bounded memory pool that spills.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int8Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use silt_engine::{Error, Result};

use crate::changelog::{BUCKET_COLUMN, BucketKey, ChangeType, OFFSET_COLUMN, TIMESTAMP_COLUMN};

/// Where a union read finds the table's lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeStart {
    pub table_uri: String,
    pub storage_options: HashMap<String, String>,
    /// The Fluss table id the lake must belong to (a dropped table's lake is not read).
    pub table_id: String,
}

/// Memory the lake phase's sort may hold before it spills.
const SORT_MEMORY_BYTES: usize = 256 * 1024 * 1024;

/// State tag of a subtask still in its lake phase (a plain offsets state starts with a count).
const LAKE_PHASE_TAG: &[u8; 4] = b"SLU1";

/// A subtask's progress through the lake at a pinned version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LakePhase {
    pub version: u64,
    /// Lake rows already emitted (skipped when the phase is restored).
    pub emitted: u64,
    /// The subtask's parallelism when the phase started; a restore must match it.
    pub parallelism: u32,
}

impl LakePhase {
    pub fn encode(&self, offsets: Bytes) -> Bytes {
        let mut b = BytesMut::with_capacity(24 + offsets.len());
        b.put_slice(LAKE_PHASE_TAG);
        b.put_u64(self.version);
        b.put_u64(self.emitted);
        b.put_u32(self.parallelism);
        b.put_slice(&offsets);
        b.freeze()
    }

    /// `Some((phase, the offsets state after it))` for a lake-phase state; `None` for another.
    pub fn decode(state: &Bytes) -> Result<Option<(LakePhase, Bytes)>> {
        if !state.starts_with(LAKE_PHASE_TAG) {
            return Ok(None);
        }
        let mut b = state.slice(LAKE_PHASE_TAG.len()..);
        if b.remaining() < 20 {
            return Err(Error::operator_bug(
                "fluss source state is damaged (a truncated lake phase)",
            ));
        }
        let phase = LakePhase {
            version: b.get_u64(),
            emitted: b.get_u64(),
            parallelism: b.get_u32(),
        };
        Ok(Some((phase, b)))
    }
}

/// The lake rows of one subtask, as changelog batches of the source's output schema.
pub(super) struct LakeRows {
    stream: SendableRecordBatchStream,
    output: SchemaRef,
    /// Rows still to skip (emitted before a restore).
    skip: u64,
    /// `+A` for a log table's rows, `+I` for a primary-key table's images.
    change: ChangeType,
}

impl LakeRows {
    /// Opens the lake at `version` and plans the read of the buckets `subtask` owns of
    /// `parallelism`; `user` are the user columns (names and types) the source emits.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        lake: &LakeStart,
        version: u64,
        subtask: u32,
        parallelism: u32,
        user: &SchemaRef,
        output: SchemaRef,
        skip: u64,
        change: ChangeType,
    ) -> Result<LakeRows> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Error::operator(format!(
                "union read of {} at version {version}: {what}: {e}",
                lake.table_uri
            ))
        };
        let mut table = crate::delta::load_existing(&lake.table_uri, &lake.storage_options)
            .await
            .map_err(|e| failed("open", &e))?
            .ok_or_else(|| failed("open", &"the lake is gone"))?;
        table
            .load_version(version)
            .await
            .map_err(|e| failed("load", &e))?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(SORT_MEMORY_BYTES, 1.0)
            .build_arc()
            .map_err(|e| failed("runtime", &e))?;
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        crate::delta::read_local_files_on_io_threads(&ctx);
        let provider = table
            .table_provider()
            .await
            .map_err(|e| failed("provider", &e))?;
        let lake_schema = provider.schema();
        ctx.register_table("lake", provider)
            .map_err(|e| failed("register", &e))?;
        // A column the table gained after the lake's last tiering (Fluss's ADD COLUMN, always
        // nullable) is null in the lake's rows.
        let columns: Vec<String> = user
            .fields()
            .iter()
            .map(|f| {
                let quoted = format!("\"{}\"", f.name().replace('"', "\"\""));
                match lake_schema.index_of(f.name()) {
                    Ok(_) => quoted,
                    Err(_) => format!("NULL AS {quoted}"),
                }
            })
            .chain([BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN].map(|c| format!("\"{c}\"")))
            .collect();
        let sql = format!(
            "SELECT {} FROM lake WHERE \"{BUCKET_COLUMN}\" % {parallelism} = {subtask} ORDER BY \"{BUCKET_COLUMN}\", \"{OFFSET_COLUMN}\"",
            columns.join(", ")
        );
        let stream = ctx
            .sql(&sql)
            .await
            .map_err(|e| failed("plan", &e))?
            .execute_stream()
            .await
            .map_err(|e| failed("execute", &e))?;
        Ok(LakeRows {
            stream,
            output,
            skip,
            change,
        })
    }

    /// The next batch of lake rows as changes, or `None` once the lake is read.
    pub async fn next(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(batch) = self.stream.next().await else {
                return Ok(None);
            };
            let batch = batch.map_err(|e| Error::operator(format!("union read: {e}")))?;
            let rows = batch.num_rows() as u64;
            if self.skip >= rows {
                self.skip -= rows;
                continue;
            }
            let batch = batch.slice(self.skip as usize, (rows - self.skip) as usize);
            self.skip = 0;
            if batch.num_rows() > 0 {
                return self.as_changes(&batch).map(Some);
            }
        }
    }

    /// The lake's columns cast to the stream's types, plus `__change_type`.
    fn as_changes(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.output.fields().len());
        for (i, field) in self.output.fields().iter().enumerate() {
            if i == batch.num_columns() {
                columns.push(Arc::new(Int8Array::from(vec![
                    self.change as i8;
                    batch.num_rows()
                ])));
                continue;
            }
            let column = batch.column(i);
            let target = match field.data_type() {
                // Delta keeps microseconds; the stream carries what the client reads.
                DataType::Timestamp(TimeUnit::Millisecond, tz) => {
                    DataType::Timestamp(TimeUnit::Millisecond, tz.clone())
                }
                other => other.clone(),
            };
            columns.push(if column.data_type() == &target {
                column.clone()
            } else {
                cast(column, &target).map_err(|e| {
                    Error::operator(format!("union read: column {}: {e}", field.name()))
                })?
            });
        }
        RecordBatch::try_new(self.output.clone(), columns)
            .map_err(|e| Error::operator(format!("union read: {e}")))
    }
}

/// The lake's pinned version and txn offsets, or `None` when there is no lake of this table
/// yet (then the read is a plain one from the earliest offsets).
pub(super) async fn pin(
    lake: &LakeStart,
    buckets: u32,
) -> Result<Option<(u64, BTreeMap<BucketKey, i64>)>> {
    let buckets: Vec<BucketKey> = (0..buckets as i32).map(BucketKey::table).collect();
    let offsets = crate::delta::read_lake_offsets(
        &lake.table_uri,
        &lake.storage_options,
        &lake.table_id,
        &buckets,
    )
    .await
    .map_err(|e| Error::operator(format!("union read of {}: {e}", lake.table_uri)))?;
    Ok(offsets
        .filter(|o| !o.bucket_offsets.is_empty())
        .map(|o| (o.delta_version, o.bucket_offsets)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lake_phase_state_round_trips_and_is_told_from_offsets() {
        let phase = LakePhase {
            version: 7,
            emitted: 12_345,
            parallelism: 2,
        };
        let offsets = Bytes::from_static(&[0, 0, 0, 0]);
        let encoded = phase.encode(offsets.clone());
        assert_eq!(
            LakePhase::decode(&encoded).unwrap(),
            Some((phase, offsets.clone()))
        );
        assert_eq!(LakePhase::decode(&offsets).unwrap(), None);
        let truncated = encoded.slice(..10);
        assert!(LakePhase::decode(&truncated).is_err());
    }
}
