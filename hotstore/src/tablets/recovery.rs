//! Recovery of a kv tablet from its write-ahead log: replay the changelog from the applied
//! offset up to the high watermark (after a crash between the durable append and the apply, or
//! after an apply that failed).

use super::rows::{DELETE, INSERT, RowCodec, UPDATE_BEFORE, row_count_delta};
use super::{Bucket, TableRuntime};
use crate::codec::Batch;
use crate::protocol::{ApiError, code};
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

fn primary_key_encoder(table: &TableRuntime) -> Result<Box<dyn fluss::row::KeyEncoder>, ApiError> {
    let internal = |e: fluss::error::Error| {
        ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("key encoder: {e}"))
    };
    let entry = &table.entry;
    let info = fluss::metadata::TableInfo::of(
        fluss::metadata::TablePath::new(entry.database.clone(), entry.name.clone()),
        entry.id,
        entry.schema_id,
        entry.descriptor.clone(),
        entry.created_ms,
        entry.modified_ms,
    );
    let config = info.get_table_config();
    fluss::row::encode::KeyEncoderFactory::of_primary_key_encoder(
        info.row_type(),
        info.get_physical_primary_keys(),
        &config.get_datalake_format().map_err(internal)?,
        config.get_kv_format_version().map_err(internal)?,
        info.is_default_bucket_key(),
    )
    .map_err(internal)
}

/// Bytes of changelog read per step of a recovery replay.
const REPLAY_READ_BYTES: usize = 8 * 1024 * 1024;

/// Replays the changelog from the kv tablet's applied offset up to the log's high watermark,
/// so the kv state equals the changelog after a crash between the durable append and the
/// apply (the log is the write-ahead log). Keys are re-encoded from the row images with the
/// client's key encoder, so they equal the keys clients send.
pub(crate) fn recover(table: &TableRuntime, bucket: &Bucket) -> Result<(), ApiError> {
    let Some(kv) = &bucket.kv else { return Ok(()) };
    let context = format!("{} {}", table.entry.qualified_name(), bucket.name());
    let mut applied = kv
        .applied_offset()
        .map_err(|e| bucket.storage_error(&context, e))?;
    let high_watermark = bucket.log.high_watermark();
    if applied >= high_watermark {
        return Ok(());
    }
    let mut replay = Replay::new(table, &context)?;
    let replay_start = applied;
    while applied < high_watermark {
        let data = bucket
            .log
            .read(applied, REPLAY_READ_BYTES)
            .map_err(|e| bucket.storage_error(&context, e))?;
        if data.is_empty() {
            break;
        }
        let views = Batch::split(data, false).map_err(|e| replay.corrupt(e.to_string()))?;
        for view in views {
            let next = view.next_offset();
            if next <= applied {
                continue;
            }
            let (changes, change_types) = replay.changes(&view, applied)?;
            let row_count_delta = row_count_delta(&change_types);
            kv.apply(&changes, row_count_delta, next)
                .map_err(|e| bucket.storage_error(&context, e))?;
            applied = next;
        }
    }
    tracing::info!(table = %table.entry.qualified_name(), bucket = bucket.id, from = replay_start, to = applied, "replayed changelog into kv tablet");
    Ok(())
}

/// What a replay turns changelog batches into kv changes with.
struct Replay<'a> {
    table: &'a TableRuntime,
    /// The table and bucket, for errors.
    context: &'a str,
    codec: RowCodec,
    key_encoder: Box<dyn fluss::row::KeyEncoder>,
    /// The current schema's row type.
    row_type: Arc<fluss::metadata::RowType>,
}

/// The kv changes of a batch: each key with its row, `None` for a delete.
type KvChanges = Vec<(Vec<u8>, Option<Vec<u8>>)>;

impl<'a> Replay<'a> {
    fn new(table: &'a TableRuntime, context: &'a str) -> Result<Self, ApiError> {
        let codec = RowCodec::new(table)?;
        Ok(Replay {
            table,
            context,
            key_encoder: primary_key_encoder(table)?,
            row_type: Arc::new(codec.row_type.clone()),
            codec,
        })
    }

    fn corrupt(&self, reason: String) -> ApiError {
        ApiError::new(
            code::KV_STORAGE_EXCEPTION,
            format!("{}: changelog replay: {reason}", self.context),
        )
    }

    /// The row type of the schema `view` was logged under, whose Arrow schema is `written`.
    fn row_type_of(
        &self,
        view: &Batch,
        written: &SchemaRef,
    ) -> Result<Arc<fluss::metadata::RowType>, ApiError> {
        if Arc::ptr_eq(written, &self.table.arrow_schema) {
            return Ok(self.row_type.clone());
        }
        let schema = self.table.entry.schema_of(i32::from(view.schema_id()));
        let row_type = schema.map(|s| s.row_type().clone());
        let row_type = row_type
            .ok_or_else(|| self.corrupt(format!("schema {} is unknown", view.schema_id())))?;
        Ok(Arc::new(row_type))
    }

    /// The kv changes of the records of `view` from offset `applied` on, and their change
    /// types; the image before an update changes nothing.
    fn changes(&mut self, view: &Batch, applied: i64) -> Result<(KvChanges, Vec<u8>), ApiError> {
        let (change_types, message) = view.records().map_err(|e| self.corrupt(e.to_string()))?;
        // A batch logged under an earlier schema is read under it; its rows go into the
        // kv in the current schema, with nulls in the columns added since.
        let written = self.table.arrow_schema_of(view.schema_id())?;
        let written_row_type = self.row_type_of(view, &written)?;
        let record_batch = Arc::new(
            crate::codec::arrow::decode_arrow_message(&message, &written, None)
                .map_err(|e| self.corrupt(e))?,
        );
        let mut row =
            fluss::row::ColumnarRow::new(record_batch.clone(), written_row_type.clone(), 0, None)
                .map_err(|e| self.corrupt(e.to_string()))?;
        let mut changes = Vec::new();
        let mut applied_change_types = Vec::new();
        for i in 0..record_batch.num_rows() {
            if view.base_offset() + (i as i64) < applied {
                continue;
            }
            let change = change_types.get(i).copied().unwrap_or(INSERT);
            if change == UPDATE_BEFORE {
                continue;
            }
            applied_change_types.push(change);
            row.set_row_id(i);
            let key = self.key_encoder.encode_key(&row);
            let key = key.map_err(|e| self.corrupt(e.to_string()))?.to_vec();
            let value = if change == DELETE {
                None
            } else {
                let fields = written_row_type.fields().len();
                Some(self.codec.stored(&self.codec.encode_row(&row, fields)?))
            };
            changes.push((key, value));
        }
        Ok((changes, applied_change_types))
    }
}
