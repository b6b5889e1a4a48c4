//! Primary-key table handlers: PutKv and Lookup. A PutKv is decoded here and written by
//! [`crate::tablets::changelog`]; what follows describes that write.
//!
//! An upsert looks up the old row and appends the changelog to the bucket's log tablet as one
//! Fluss ARROW log batch with per-record change types, with full row images: `+I` for a new
//! key, `-U` (old) then `+U` (new) for an update, `-D` (old) for a delete, nothing when the row
//! did not change. Only once that batch is durable are the changes applied to the kv tablet,
//! which records the log offset it applied: the log is the write-ahead log. A partial update
//! (`target_columns`) merges the written columns into the old row. The table's merge engine
//! and delete behavior (Fluss's `table.merge-engine`, `table.delete.behavior`) decide what a
//! write does to the old row, unless the request's `agg_mode` asks to overwrite.
//!
//! The kv tablet stores each row as the Fluss lookup value: the schema id (`i16`, little
//! endian) followed by the row in the table's kv format, so a lookup returns it as stored.

use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::tablets::TableRuntime;
use crate::tablets::changelog::{self, KvWrite, MergeMode};
use crate::tablets::rows::RowCodec;
use bytes::Bytes;
use fluss::record::kv::{KV_RECORD_LENGTH_LENGTH, KvRecord, KvRecordBatch, RECORDS_OFFSET};
use futures::future::join_all;
use std::sync::Arc;

pub async fn put(
    service: &Service,
    body: Bytes,
    api_version: i16,
) -> Result<PutKvResponse, ApiError> {
    let request: PutKvRequest = protocol::decode(body, "PutKv")?;
    if service.table_runtime(request.table_id).is_err() {
        return Ok(PutKvResponse {
            buckets_resp: request
                .buckets_req
                .iter()
                .map(|b| {
                    let error =
                        super::unknown_table_bucket(request.table_id, b.partition_id, b.bucket_id);
                    PbPutKvRespForBucket {
                        partition_id: b.partition_id,
                        bucket_id: b.bucket_id,
                        error_code: Some(error.code),
                        error_message: Some(error.message),
                        log_end_offset: None,
                    }
                })
                .collect(),
        });
    }
    let table = kv_table(
        service,
        request.table_id,
        api_version,
        "write it with appends",
    )?;
    let targets = target_columns(&table, &request.target_columns)?;
    let mode = merge_mode(&table, request.agg_mode)?;
    let writes = request.buckets_req.into_iter().map(|bucket_request| {
        let table = table.clone();
        let targets = targets.clone();
        async move {
            let bucket_id = bucket_request.bucket_id;
            let result = match table.bucket(bucket_request.partition_id, bucket_id) {
                Ok(bucket) => match decode_writes(&table, &bucket_request.records) {
                    Ok((writes, writer_id, sequence)) => {
                        changelog::write(
                            &table,
                            &bucket,
                            KvWrite {
                                writes,
                                writer_id,
                                sequence,
                                targets: targets.as_deref().map(Vec::as_slice),
                                mode,
                            },
                        )
                        .await
                    }
                    Err(error) => Err(error),
                },
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

/// The request's `agg_mode` (Fluss's `MergeMode`): 0 (the default) merges through the table's
/// merge engine, and so does 2, which Fluss reserves for aggregation in the client and treats
/// as 0; 1 overwrites (Fluss's undo path for a sink's failover). Any other value is refused
/// rather than guessed at (Fluss would treat it as 0).
fn merge_mode(table: &TableRuntime, agg_mode: Option<i32>) -> Result<MergeMode, ApiError> {
    match agg_mode.unwrap_or(0) {
        0 | 2 => Ok(MergeMode::Merge),
        1 => Ok(MergeMode::Overwrite),
        other => Err(ApiError::new(
            code::INVALID_CONFIG,
            format!(
                "PutKv agg_mode {other} for {} is unknown to silt (0 merges through the table's merge engine, 1 overwrites, 2 is aggregation in the client); send 0 or 1",
                table.entry.qualified_name()
            ),
        )),
    }
}

/// The written columns of a partial update, or `None` for a full-row write. They must include
/// the primary key; a table with an auto-increment column takes only partial updates without
/// it (Fluss's rule and words: the server gives the column its values).
fn target_columns(
    table: &TableRuntime,
    columns: &[i32],
) -> Result<Option<Arc<Vec<usize>>>, ApiError> {
    let auto_increment = table.auto_increment.as_ref().map(|a| a.column);
    let auto_increment_name = || {
        let names = table.entry.descriptor.schema().auto_increment_col_names();
        names.first().cloned().unwrap_or_default()
    };
    if columns.is_empty() {
        if auto_increment.is_some() {
            return Err(ApiError::new(
                code::INVALID_TARGET_COLUMN,
                format!(
                    "The table contains an auto-increment column [{}], but update target columns are not explicitly specified. Please specify the update target columns and exclude the auto-increment column from them.",
                    auto_increment_name()
                ),
            ));
        }
        return Ok(None);
    }
    if let Some(column) = auto_increment
        && columns.contains(&(column as i32))
    {
        return Err(ApiError::new(
            code::INVALID_TARGET_COLUMN,
            format!(
                "Auto-increment column [{}] at index {column} must not be included in target columns.",
                auto_increment_name()
            ),
        ));
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

/// Decodes the kv batches of a request into writes (zero-copy slices of the request) and the
/// first batch's writer id and sequence.
fn decode_writes(
    table: &TableRuntime,
    records: &Bytes,
) -> Result<(Vec<changelog::Write>, i64, i32), ApiError> {
    let corrupt = |reason: String| corrupt_batch(table, reason);
    let mut writes = Vec::new();
    let mut position = 0usize;
    let mut writer = (crate::codec::NO_WRITER_ID, -1);
    let mut codec: Option<RowCodec> = None;
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
        // Rows of a batch written under an earlier schema are turned into the current one.
        let earlier_schema = i32::from(schema_id) != table.entry.schema_id;
        if earlier_schema && table.entry.schema_of(i32::from(schema_id)).is_none() {
            return Err(ApiError::new(
                code::SCHEMA_NOT_EXIST,
                format!(
                    "kv batch of {} has schema id {schema_id}, but the table's schemas are 1 to \
                     {}; refresh the client's table metadata",
                    table.entry.qualified_name(),
                    table.entry.schema_id
                ),
            ));
        }
        if earlier_schema && codec.is_none() {
            codec = Some(RowCodec::new(table)?);
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
        let batch = records.slice(..end);
        let upgrade = codec.as_ref().filter(|_| earlier_schema);
        let upgrade = upgrade.map(|codec| (codec, schema_id));
        decode_records(table, &batch, position, count, upgrade, &mut writes)?;
        position = end;
    }
    Ok((writes, writer.0, writer.1))
}

fn corrupt_batch(table: &TableRuntime, reason: String) -> ApiError {
    ApiError::new(
        code::CORRUPT_RECORD,
        format!("kv batch of {}: {reason}", table.entry.qualified_name()),
    )
}

/// Appends the `count` records of the kv batch at `position` of `batch` (which ends with it)
/// to `writes`; `upgrade` turns the rows of a batch of an earlier schema (its id) into the
/// current one.
fn decode_records(
    table: &TableRuntime,
    batch: &Bytes,
    position: usize,
    count: i32,
    upgrade: Option<(&RowCodec, i16)>,
    writes: &mut Vec<changelog::Write>,
) -> Result<(), ApiError> {
    let mut record_position = position + RECORDS_OFFSET;
    for _ in 0..count.max(0) {
        let (record, record_size) = KvRecord::read_from(batch, record_position)
            .map_err(|e| corrupt_batch(table, e.to_string()))?;
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
            let row = batch.slice(value_start..record_position + record_size);
            match upgrade {
                Some((codec, schema_id)) => Some(Bytes::from(
                    codec.row_in_current(schema_id, &row)?.into_owned(),
                )),
                None => Some(row),
            }
        };
        writes.push((key, value));
        record_position += record_size;
    }
    Ok(())
}

fn varint_len(mut value: u32) -> usize {
    let mut bytes = 1;
    while value >= 0x80 {
        value >>= 7;
        bytes += 1;
    }
    bytes
}

pub async fn lookup(
    service: &Service,
    body: Bytes,
    api_version: i16,
) -> Result<LookupResponse, ApiError> {
    let request: LookupRequest = protocol::decode(body, "Lookup")?;
    let table = kv_table(service, request.table_id, api_version, "lookups need one")?;
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
    // The answer is bounded by bytes too: one value may be as large as a frame.
    let mut bytes_left = service.config.fetch_response_bytes_max;
    let mut buckets_resp = Vec::with_capacity(request.buckets_req.len());
    for bucket_request in &request.buckets_req {
        let result = table
            .bucket(bucket_request.partition_id, bucket_request.bucket_id)
            .and_then(|bucket| {
                lookup_bucket(&table, &bucket, &bucket_request.keys, &mut bytes_left)
            });
        let (error_code, error_message, values) = match result {
            Ok(values) => (None, None, values),
            Err(error) if error.code == code::RECORD_TOO_LARGE => return Err(error),
            Err(error) => (Some(error.code), Some(error.message), Vec::new()),
        };
        buckets_resp.push(PbLookupRespForBucket {
            partition_id: bucket_request.partition_id,
            bucket_id: bucket_request.bucket_id,
            error_code,
            error_message,
            values,
        });
    }
    Ok(LookupResponse { buckets_resp })
}

/// The stored values of `keys` in one bucket, charged to `bytes_left`; past it the whole
/// lookup is refused (RECORD_TOO_LARGE), never answered in part.
fn lookup_bucket(
    table: &TableRuntime,
    bucket: &crate::tablets::Bucket,
    keys: &[Bytes],
    bytes_left: &mut usize,
) -> Result<Vec<PbValue>, ApiError> {
    let kv = bucket
        .kv
        .as_ref()
        .ok_or_else(|| ApiError::new(code::NON_PRIMARY_KEY_TABLE, "bucket has no kv tablet"))?;
    let mut values = Vec::with_capacity(keys.len());
    for key in keys {
        let value = kv
            .get(key)
            .map_err(|e| ApiError::new(code::KV_STORAGE_EXCEPTION, e.to_string()))?;
        let size = value.as_ref().map_or(0, |v| v.len());
        *bytes_left = bytes_left.checked_sub(size).ok_or_else(|| {
            ApiError::new(
                code::RECORD_TOO_LARGE,
                format!(
                    "lookup on {} answers more than fetch_response_bytes_max bytes of values: look up fewer keys per request",
                    table.entry.qualified_name()
                ),
            )
        })?;
        values.push(PbValue {
            values: value.map(|v| v.to_vec()),
        });
    }
    Ok(values)
}

/// The primary-key table a kv request (of `api_version`) names; a log table is refused with
/// NON_PRIMARY_KEY_TABLE and `without_key`, what the user should do or know instead.
fn kv_table(
    service: &Service,
    table_id: i64,
    api_version: i16,
    without_key: &str,
) -> Result<Arc<TableRuntime>, ApiError> {
    let table = service.table_runtime(table_id)?;
    check_client_version(&table.entry, api_version)?;
    if !table.entry.has_primary_key() {
        return Err(ApiError::new(
            code::NON_PRIMARY_KEY_TABLE,
            format!(
                "table {} has no primary key: {without_key}",
                table.entry.qualified_name()
            ),
        ));
    }
    Ok(table)
}

/// Version 1 of PutKv, Lookup and PrefixLookup (Fluss 0.9.1) says the client knows kv format
/// version 2: for a primary-key table at version 2 that names a lake format and whose bucket
/// key is not its primary key, such a client encodes keys with the compacted encoder, and an
/// older (version 0) client with the lake's, which would write and look up other bytes for the
/// same key. Fluss refuses version 0 for such a table with UNSUPPORTED_VERSION, and so does
/// silt (for the whole request, where Fluss answers each bucket with it).
pub(crate) fn check_client_version(
    table: &crate::catalog::TableEntry,
    api_version: i16,
) -> Result<(), ApiError> {
    use crate::catalog::{DATALAKE_FORMAT, KV_FORMAT_VERSION};
    if api_version >= 1 {
        return Ok(());
    }
    let descriptor = &table.descriptor;
    let properties = descriptor.properties();
    let format_2 = properties
        .get(KV_FORMAT_VERSION)
        .is_some_and(|v| v.trim() == "2");
    let names_lake_format = properties.contains_key(DATALAKE_FORMAT);
    // The default bucket key is the primary key less the partition keys.
    let partition_keys = descriptor.partition_keys();
    let physical_key: Vec<&str> = descriptor
        .schema()
        .primary_key_column_names()
        .into_iter()
        .filter(|k| !partition_keys.iter().any(|p| p == k))
        .collect();
    let bucket_keys = descriptor.bucket_keys();
    let default_bucket_key = bucket_keys.is_empty() || bucket_keys == physical_key;
    if format_2 && names_lake_format && !default_bucket_key {
        return Err(ApiError::new(
            code::UNSUPPORTED_VERSION,
            format!(
                "client API version 0 is not supported for table {}: its keys are at {KV_FORMAT_VERSION} 2 \
                 with a bucket key other than the primary key, which a version 0 client encodes \
                 differently; upgrade the Fluss client (0.9.1 or later)",
                table.qualified_name()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
