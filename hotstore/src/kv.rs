//! Primary-key table handlers: PutKv and Lookup.
//!
//! An upsert looks up the old row and appends the changelog to the bucket's log tablet as one
//! Fluss ARROW log batch with per-record change types, with full row images: `+I` for a new
//! key, `-U` (old) then `+U` (new) for an update, `-D` (old) for a delete, nothing when the row
//! did not change. Only once that batch is durable are the changes applied to the kv tablet,
//! which records the log offset it applied: the log is the write-ahead log. A partial update
//! (`target_columns`) merges the written columns into the old row.
//!
//! The kv tablet stores each row as the Fluss lookup value: the schema id (`i16`, little
//! endian) followed by the row in the table's kv format, so a lookup returns it as stored.

use crate::batch::{self, HeaderFields};
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::storage::WriterCheck;
use crate::tablets::{Bucket, TableRuntime, storage_error};
use bytes::Bytes;
use fluss::metadata::KvFormat;
use fluss::record::kv::{KV_RECORD_LENGTH_LENGTH, KvRecord, KvRecordBatch, RECORDS_OFFSET};
use fluss::row::encode::{RowEncoder, RowEncoderFactory};
use fluss::row::field_getter::FieldGetter;
use fluss::row::{Datum, RowDecoder, RowDecoderFactory};
use futures::future::join_all;
use std::collections::HashMap;
use std::sync::Arc;

const INSERT: u8 = 1;
const UPDATE_BEFORE: u8 = 2;
const UPDATE_AFTER: u8 = 3;
const DELETE: u8 = 4;
const SCHEMA_ID_BYTES: usize = 2;

pub async fn put(service: &Service, body: Bytes) -> Result<PutKvResponse, ApiError> {
    let request: PutKvRequest = protocol::decode(body, "PutKv")?;
    let table = service.table_runtime(request.table_id)?;
    if !table.entry.has_primary_key() {
        return Err(ApiError::new(
            code::NON_PRIMARY_KEY_TABLE,
            format!(
                "table {} has no primary key: write it with appends",
                table.entry.qualified_name()
            ),
        ));
    }
    let targets = target_columns(&table, &request.target_columns)?;
    let writes = request.buckets_req.into_iter().map(|bucket_request| {
        let table = table.clone();
        let targets = targets.clone();
        async move {
            let bucket_id = bucket_request.bucket_id;
            let result = match table.bucket(bucket_id) {
                Ok(bucket) => {
                    put_bucket(
                        &table,
                        bucket,
                        bucket_request.records,
                        targets.as_deref().map(Vec::as_slice),
                    )
                    .await
                }
                Err(error) => Err(error),
            };
            match result {
                Ok(log_end_offset) => PbPutKvRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id,
                    error_code: None,
                    error_message: None,
                    log_end_offset: Some(log_end_offset),
                },
                Err(error) => PbPutKvRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id,
                    error_code: Some(error.code),
                    error_message: Some(error.message),
                    log_end_offset: None,
                },
            }
        }
    });
    Ok(PutKvResponse {
        buckets_resp: join_all(writes).await,
    })
}

/// The written columns of a partial update, or `None` for a full-row write. They must include
/// the primary key.
fn target_columns(
    table: &TableRuntime,
    columns: &[i32],
) -> Result<Option<Arc<Vec<usize>>>, ApiError> {
    if columns.is_empty() {
        return Ok(None);
    }
    let schema = table.entry.descriptor.schema();
    let field_count = schema.row_type().fields().len();
    let mut targets = Vec::with_capacity(columns.len());
    for &column in columns {
        match usize::try_from(column) {
            Ok(index) if index < field_count => targets.push(index),
            _ => {
                return Err(ApiError::new(
                    code::INVALID_TARGET_COLUMN,
                    format!(
                        "target column {column} of {} is out of range 0..{field_count}",
                        table.entry.qualified_name()
                    ),
                ));
            }
        }
    }
    if let Some(missing) = schema
        .primary_key_indexes()
        .into_iter()
        .find(|pk| !targets.contains(pk))
    {
        return Err(ApiError::new(
            code::INVALID_TARGET_COLUMN,
            format!(
                "partial update of {} must include primary key column {missing}",
                table.entry.qualified_name()
            ),
        ));
    }
    Ok(Some(Arc::new(targets)))
}

/// One decoded write: key and the new row bytes (without schema id), `None` for a delete.
type Write = (Bytes, Option<Bytes>);

/// Decodes the kv batches of a request into writes (zero-copy slices of the request) and the
/// first batch's writer id and sequence.
fn decode_writes(
    table: &TableRuntime,
    records: &Bytes,
) -> Result<(Vec<Write>, i64, i32), ApiError> {
    let corrupt = |reason: String| {
        ApiError::new(
            code::CORRUPT_RECORD,
            format!("kv batch of {}: {reason}", table.entry.qualified_name()),
        )
    };
    let mut writes = Vec::new();
    let mut position = 0usize;
    let mut writer = (crate::batch::NO_WRITER_ID, -1);
    while position < records.len() {
        let kv_batch = KvRecordBatch::new(records.clone(), position);
        let size = kv_batch
            .size_in_bytes()
            .map_err(|e| corrupt(e.to_string()))?;
        let end = position
            .checked_add(size)
            .filter(|&end| end <= records.len() && size >= RECORDS_OFFSET);
        let Some(end) = end else {
            return Err(corrupt(format!(
                "batch at byte {position} has an invalid length"
            )));
        };
        if !kv_batch.is_valid() {
            return Err(corrupt(format!("batch at byte {position} fails its CRC")));
        }
        let schema_id = kv_batch.schema_id().map_err(|e| corrupt(e.to_string()))?;
        if i32::from(schema_id) != table.entry.schema_id {
            return Err(ApiError::new(
                code::SCHEMA_NOT_EXIST,
                format!(
                    "kv batch of {} has schema id {schema_id}, but the table has only schema {}",
                    table.entry.qualified_name(),
                    table.entry.schema_id
                ),
            ));
        }
        if position == 0 {
            writer = (
                kv_batch.writer_id().map_err(|e| corrupt(e.to_string()))?,
                kv_batch
                    .batch_sequence()
                    .map_err(|e| corrupt(e.to_string()))?,
            );
        }
        let count = kv_batch
            .record_count()
            .map_err(|e| corrupt(e.to_string()))?;
        let batch_bytes = records.slice(..end);
        let mut record_position = position + RECORDS_OFFSET;
        for _ in 0..count.max(0) {
            let (record, record_size) = KvRecord::read_from(&batch_bytes, record_position)
                .map_err(|e| corrupt(e.to_string()))?;
            let key = record.key().clone();
            if key.is_empty() {
                return Err(ApiError::new(
                    code::CORRUPT_MESSAGE,
                    "kv record with an empty key",
                ));
            }
            let value = if record.is_deletion() {
                None
            } else {
                let value_start = record_position
                    + KV_RECORD_LENGTH_LENGTH
                    + varint_len(key.len() as u32)
                    + key.len();
                Some(batch_bytes.slice(value_start..record_position + record_size))
            };
            writes.push((key, value));
            record_position += record_size;
        }
        position = end;
    }
    Ok((writes, writer.0, writer.1))
}

fn kv_format(table: &TableRuntime) -> KvFormat {
    match table
        .entry
        .descriptor
        .properties()
        .get("table.kv.format")
        .map(String::as_str)
    {
        Some(format) if format.eq_ignore_ascii_case("INDEXED") => KvFormat::INDEXED,
        _ => KvFormat::COMPACTED,
    }
}

fn varint_len(mut value: u32) -> usize {
    let mut bytes = 1;
    while value >= 0x80 {
        value >>= 7;
        bytes += 1;
    }
    bytes
}

struct RowCodec {
    decoder: Arc<dyn RowDecoder>,
    getters: Box<[FieldGetter]>,
    field_count: usize,
    kv_format: KvFormat,
    row_type: fluss::metadata::RowType,
    schema_id: i16,
}

impl RowCodec {
    fn new(table: &TableRuntime) -> Result<RowCodec, ApiError> {
        let row_type = table.entry.descriptor.schema().row_type().clone();
        let kv_format = kv_format(table);
        let decoder = RowDecoderFactory::create(kv_format, row_type.clone())
            .map_err(|e| ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("row decoder: {e}")))?;
        Ok(RowCodec {
            getters: FieldGetter::create_field_getters(&row_type),
            field_count: row_type.fields().len(),
            decoder,
            kv_format,
            row_type,
            schema_id: table.entry.schema_id as i16,
        })
    }

    fn stored(&self, row: &[u8]) -> Vec<u8> {
        let mut value = Vec::with_capacity(SCHEMA_ID_BYTES + row.len());
        value.extend_from_slice(&self.schema_id.to_le_bytes());
        value.extend_from_slice(row);
        value
    }

    /// Encodes any row (e.g. one read back from the changelog) in the table's kv format.
    fn encode_row(&self, row: &dyn fluss::row::InternalRow) -> Result<Vec<u8>, ApiError> {
        let internal = |e: fluss::error::Error| {
            ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("row encode: {e}"))
        };
        let mut encoder =
            RowEncoderFactory::create(self.kv_format, self.row_type.clone()).map_err(internal)?;
        encoder.start_new_row().map_err(internal)?;
        for pos in 0..self.field_count {
            encoder
                .encode_field(pos, self.getters[pos].get_field(row).map_err(internal)?)
                .map_err(internal)?;
        }
        Ok(encoder.finish_row().map_err(internal)?.to_vec())
    }

    /// Merges the target columns of `new` into `old` (both rows without schema id); with no
    /// old row the other columns are null.
    fn merge(
        &self,
        old: Option<&[u8]>,
        new: &[u8],
        targets: &[usize],
        delete: bool,
    ) -> Result<Vec<u8>, ApiError> {
        let internal = |e: fluss::error::Error| {
            ApiError::new(code::INVALID_TARGET_COLUMN, format!("partial update: {e}"))
        };
        let new_row = self.decoder.decode(new);
        let old_row = old.map(|old| self.decoder.decode(old));
        let mut encoder =
            RowEncoderFactory::create(self.kv_format, self.row_type.clone()).map_err(internal)?;
        encoder.start_new_row().map_err(internal)?;
        for pos in 0..self.field_count {
            let datum = if targets.contains(&pos) {
                if delete {
                    Datum::Null
                } else {
                    self.getters[pos].get_field(&new_row).map_err(internal)?
                }
            } else {
                match &old_row {
                    Some(old_row) => self.getters[pos].get_field(old_row).map_err(internal)?,
                    None => Datum::Null,
                }
            };
            encoder.encode_field(pos, datum).map_err(internal)?;
        }
        Ok(encoder.finish_row().map_err(internal)?.to_vec())
    }
}

async fn put_bucket(
    table: &TableRuntime,
    bucket: &Bucket,
    records: Bytes,
    targets: Option<&[usize]>,
) -> Result<i64, ApiError> {
    let (writes, writer_id, sequence) = decode_writes(table, &records)?;
    let codec = RowCodec::new(table)?;
    let kv = bucket
        .kv
        .as_ref()
        .ok_or_else(|| ApiError::new(code::NON_PRIMARY_KEY_TABLE, "bucket has no kv tablet"))?;
    let _guard = bucket.write_lock.lock().await;
    if bucket.kv_behind.load(std::sync::atomic::Ordering::Acquire) {
        // A previous apply failed after its changelog was durable: catch the kv up from the
        // log before deciding anything on its state.
        recover(table, bucket)?;
        bucket
            .kv_behind
            .store(false, std::sync::atomic::Ordering::Release);
    }
    let context = format!("bucket {}", bucket.id);
    // The bucket's log tablet keeps the writer state of log and kv writes alike (Fluss's rule,
    // surviving restarts): the changelog batch carries this write's writer id and sequence.
    let check = bucket
        .log
        .check_writer(writer_id, sequence)
        .map_err(|e| storage_error(&context, e))?;
    if let WriterCheck::Duplicate { next_offset } = check {
        tracing::debug!(
            bucket = bucket.id,
            writer_id,
            sequence,
            "acknowledging retried kv batch without applying"
        );
        return Ok(next_offset);
    }
    let kv_error = |e: String| {
        ApiError::new(
            code::KV_STORAGE_EXCEPTION,
            format!("bucket {}: {e}", bucket.id),
        )
    };
    // Changes of this request by key, so a key written twice in one batch sees its first write.
    let mut pending: HashMap<Bytes, Option<Vec<u8>>> = HashMap::new();
    let mut change_types = Vec::new();
    let mut images: Vec<Vec<u8>> = Vec::new();
    for (key, value) in writes {
        let old = match pending.get(&key) {
            Some(staged) => staged.clone(),
            None => kv
                .get(&key)
                .map_err(|e| kv_error(e.to_string()))?
                .map(|v| v.to_vec()),
        };
        let old_row = old
            .as_deref()
            .map(|stored| &stored[SCHEMA_ID_BYTES.min(stored.len())..]);
        let new = match (&value, targets) {
            (Some(row), None) => Some(codec.stored(row)),
            (Some(row), Some(targets)) => {
                Some(codec.stored(&codec.merge(old_row, row, targets, false)?))
            }
            (None, None) => None,
            (None, Some(targets)) => match old_row {
                // A partial delete nulls the target columns; the row goes once only the key is left.
                Some(old_row) if !covers_all_non_key(table, targets) => {
                    Some(codec.stored(&codec.merge(Some(old_row), old_row, targets, true)?))
                }
                _ => None,
            },
        };
        match (&old, &new) {
            (None, None) => continue,
            (Some(old), Some(new)) if old == new => continue,
            (None, Some(new)) => {
                change_types.push(INSERT);
                images.push(new.clone());
            }
            (Some(old), Some(new)) => {
                change_types.extend([UPDATE_BEFORE, UPDATE_AFTER]);
                images.push(old.clone());
                images.push(new.clone());
            }
            (Some(old), None) => {
                change_types.push(DELETE);
                images.push(old.clone());
            }
        }
        pending.insert(key, new);
    }
    if change_types.is_empty() {
        // Nothing to append, but the sequence must still count, durably.
        return bucket
            .log
            .record_unchanged_write(writer_id, sequence)
            .map_err(|e| storage_error(&context, e));
    }
    let writer = (writer_id, sequence);
    let changelog = changelog_batch(table, &codec, writer, &change_types, &images)?;
    // The changelog is the write-ahead log: once it holds the batch (with its writer id and
    // sequence), the write is done, and a retry after a failed kv apply or a crash is answered
    // as a duplicate rather than applied again.
    let info = crate::logs::append_changelog(bucket, changelog).await?;
    crate::storage::durability::after_durable_write();
    let changes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        pending.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
    if let Err(e) = kv.apply(&changes, info.next_offset) {
        bucket
            .kv_behind
            .store(true, std::sync::atomic::Ordering::Release);
        return Err(kv_error(e.to_string()));
    }
    Ok(info.next_offset)
}

fn covers_all_non_key(table: &TableRuntime, targets: &[usize]) -> bool {
    let schema = table.entry.descriptor.schema();
    let keys = schema.primary_key_indexes();
    (0..schema.row_type().fields().len()).all(|pos| keys.contains(&pos) || targets.contains(&pos))
}

/// Builds one ARROW changelog batch from stored row images (schema id + row).
fn changelog_batch(
    table: &TableRuntime,
    codec: &RowCodec,
    (writer_id, batch_sequence): (i64, i32),
    change_types: &[u8],
    images: &[Vec<u8>],
) -> Result<Bytes, ApiError> {
    let internal = |e: fluss::error::Error| {
        ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("changelog encode: {e}"))
    };
    let mut builder =
        fluss::record::RowAppendRecordBatchBuilder::new(&codec.row_type).map_err(internal)?;
    for image in images {
        let row = codec.decoder.decode(&image[SCHEMA_ID_BYTES..]);
        builder.append(&row).map_err(internal)?;
    }
    let record_batch = builder.build_arrow_record_batch().map_err(internal)?;
    debug_assert_eq!(
        record_batch.schema().fields().len(),
        table.arrow_schema.fields().len()
    );
    let message = batch::encode_arrow_message(&record_batch)?;
    Ok(batch::build_batch(
        HeaderFields {
            base_offset: 0,
            commit_timestamp: 0,
            schema_id: codec.schema_id,
            append_only: false,
            writer_id,
            batch_sequence,
            record_count: change_types.len() as i32,
        },
        change_types,
        &message,
    ))
}

pub async fn lookup(service: &Service, body: Bytes) -> Result<LookupResponse, ApiError> {
    let request: LookupRequest = protocol::decode(body, "Lookup")?;
    let table = service.table_runtime(request.table_id)?;
    if !table.entry.has_primary_key() {
        return Err(ApiError::new(
            code::NON_PRIMARY_KEY_TABLE,
            format!(
                "table {} has no primary key: lookups need one",
                table.entry.qualified_name()
            ),
        ));
    }
    let keys: usize = request.buckets_req.iter().map(|b| b.keys.len()).sum();
    if keys > service.config.lookup_keys_max {
        return Err(ApiError::new(
            code::RECORD_TOO_LARGE,
            format!(
                "lookup of {keys} keys exceeds lookup_keys_max {}",
                service.config.lookup_keys_max
            ),
        ));
    }
    let buckets_resp = request
        .buckets_req
        .iter()
        .map(|bucket_request| {
            let result = table.bucket(bucket_request.bucket_id).and_then(|bucket| {
                let kv = bucket.kv.as_ref().ok_or_else(|| {
                    ApiError::new(code::NON_PRIMARY_KEY_TABLE, "bucket has no kv tablet")
                })?;
                bucket_request
                    .keys
                    .iter()
                    .map(|key| {
                        kv.get(key)
                            .map(|value| PbValue {
                                values: value.map(|v| v.to_vec()),
                            })
                            .map_err(|e| ApiError::new(code::KV_STORAGE_EXCEPTION, e.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()
            });
            match result {
                Ok(values) => PbLookupRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id: bucket_request.bucket_id,
                    error_code: None,
                    error_message: None,
                    values,
                },
                Err(error) => PbLookupRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id: bucket_request.bucket_id,
                    error_code: Some(error.code),
                    error_message: Some(error.message),
                    values: Vec::new(),
                },
            }
        })
        .collect();
    Ok(LookupResponse { buckets_resp })
}

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
    let context = format!("{} bucket {}", table.entry.qualified_name(), bucket.id);
    let mut applied = kv
        .applied_offset()
        .map_err(|e| storage_error(&context, e))?;
    let high_watermark = bucket.log.high_watermark();
    if applied >= high_watermark {
        return Ok(());
    }
    let corrupt = |reason: String| {
        ApiError::new(
            code::KV_STORAGE_EXCEPTION,
            format!("{context}: changelog replay: {reason}"),
        )
    };
    let codec = RowCodec::new(table)?;
    let mut key_encoder = primary_key_encoder(table)?;
    let row_type = Arc::new(codec.row_type.clone());
    let replay_start = applied;
    while applied < high_watermark {
        let data = bucket
            .log
            .read(applied, REPLAY_READ_BYTES)
            .map_err(|e| storage_error(&context, e))?;
        if data.is_empty() {
            break;
        }
        for view in batch::split_batches(data).map_err(corrupt)? {
            let next = view.next_offset();
            if next <= applied {
                continue;
            }
            let (change_types, message) = view.split_records().map_err(corrupt)?;
            let record_batch = Arc::new(
                batch::decode_arrow_message(&message, &table.arrow_schema, None)
                    .map_err(corrupt)?,
            );
            let mut row =
                fluss::row::ColumnarRow::new(record_batch.clone(), row_type.clone(), 0, None)
                    .map_err(|e| corrupt(e.to_string()))?;
            let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            for i in 0..record_batch.num_rows() {
                if view.base_offset() + i as i64 <= applied - 1 {
                    continue;
                }
                let change = change_types.get(i).copied().unwrap_or(INSERT);
                if change == UPDATE_BEFORE {
                    continue;
                }
                row.set_row_id(i);
                let key = key_encoder
                    .encode_key(&row)
                    .map_err(|e| corrupt(e.to_string()))?
                    .to_vec();
                let value = if change == DELETE {
                    None
                } else {
                    Some(codec.stored(&codec.encode_row(&row)?))
                };
                changes.push((key, value));
            }
            kv.apply(&changes, next)
                .map_err(|e| storage_error(&context, e))?;
            applied = next;
        }
    }
    tracing::info!(table = %table.entry.qualified_name(), bucket = bucket.id, from = replay_start, to = applied, "replayed changelog into kv tablet");
    Ok(())
}
