//! Log handlers: ProduceLog, FetchLog and ListOffsets.
//!
//! A fetch never returns data past the high watermark (the durable end of the log), starts at
//! the batch holding the fetch offset (`-2` means the log start) and, when the client enables
//! projection pushdown, rewrites each batch to the projected columns in ascending field order.
//! A fetch with nothing to return waits, up to `max_wait_ms` capped by `fetch_wait_max_ms`, for
//! any of its buckets to grow.

use super::log_filter::{self, LogFilter};
use crate::codec::Batch;
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::tablets::{Bucket, TableRuntime, storage_error};
use bytes::{Bytes, BytesMut};
use futures::future::join_all;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fetch offset Fluss clients send to start from the beginning of the log.
pub const EARLIEST_OFFSET: i64 = -2;
const LIST_EARLIEST: i32 = 0;
const LIST_LATEST: i32 = 1;
const LIST_TIMESTAMP: i32 = 2;

pub async fn produce(service: &Service, body: Bytes) -> Result<ProduceLogResponse, ApiError> {
    let request: ProduceLogRequest = protocol::decode(body, "ProduceLog")?;
    let table_id = request.table_id;
    let table = service.table_runtime(table_id).ok();
    let decode_check = service.config.produce_decode_check;
    let appends = request.buckets_req.into_iter().map(|bucket_request| {
        let table = table.clone();
        async move {
            let bucket_id = bucket_request.bucket_id;
            let result = match table {
                None => Err(super::unknown_table_bucket(
                    table_id,
                    bucket_request.partition_id,
                    bucket_id,
                )),
                Some(table) if table.entry.has_primary_key() => Err(ApiError::new(
                    code::INVALID_TABLE,
                    format!(
                        "table {} has a primary key: write it with upserts (PutKv), not appends",
                        table.entry.qualified_name()
                    ),
                )),
                Some(table) => match table.bucket(bucket_request.partition_id, bucket_id) {
                    Ok(bucket) => {
                        match check_client_batches(&table, &bucket_request.records, decode_check) {
                            Ok(()) => append_client_batches(&bucket, bucket_request.records).await,
                            Err(error) => Err(error),
                        }
                    }
                    Err(error) => Err(error),
                },
            };
            match result {
                Ok(base_offset) => PbProduceLogRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id,
                    error_code: None,
                    error_message: None,
                    base_offset: Some(base_offset),
                },
                Err(error) => PbProduceLogRespForBucket {
                    partition_id: bucket_request.partition_id,
                    bucket_id,
                    error_code: Some(error.code),
                    error_message: Some(error.message),
                    base_offset: None,
                },
            }
        }
    });
    Ok(ProduceLogResponse {
        buckets_resp: join_all(appends).await,
    })
}

/// Checks what the log tablet cannot: each batch carries the table's schema id and Arrow data
/// whose metadata fits the table's schema and the batch's record count. A batch that passed
/// its CRC but holds garbage would otherwise be stored and break every reader (and tiering) at
/// that offset. With `decode` the Arrow data is also decompressed and validated value by value
/// (`produce_decode_check`); without it the check costs O(columns), so a CRC-valid batch with
/// sound metadata but corrupt values still gets in, as on a Fluss server. Framing and CRC errors
/// are CORRUPT_RECORD. An INDEXED table's batches carry rows, not Arrow data: their records must
/// frame the batch exactly (see [`crate::codec::indexed`]).
pub(crate) fn check_client_batches(
    table: &TableRuntime,
    records: &Bytes,
    decode: bool,
) -> Result<(), ApiError> {
    let name = table.entry.qualified_name();
    let batches = Batch::split(records.clone(), true)
        .map_err(|e| ApiError::new(code::CORRUPT_RECORD, format!("{name}: {e}")))?;
    let indexed = crate::catalog::is_indexed_log(&table.entry.descriptor);
    for (index, view) in batches.iter().enumerate() {
        let corrupt = |reason: String| {
            ApiError::new(
                code::CORRUPT_RECORD,
                format!("batch {index} of {name}: {reason}"),
            )
        };
        let arrow_schema = table.arrow_schema_of(view.schema_id())?;
        if indexed {
            let records = view.record_bytes().map_err(|e| corrupt(e.to_string()))?;
            crate::codec::indexed::check_records(&records, view.record_count())
                .map_err(|reason| corrupt(format!("no valid INDEXED records: {reason}")))?;
            continue;
        }
        let (_, message) = view.records().map_err(|e| corrupt(e.to_string()))?;
        let invalid = |reason: String| corrupt(format!("no valid Arrow data: {reason}"));
        let rows = if decode {
            crate::codec::arrow::decode_arrow_message(&message, &arrow_schema, None)
                .map_err(invalid)?
                .num_rows() as i64
        } else {
            crate::codec::arrow::check_arrow_message(&message, &arrow_schema).map_err(invalid)?
        };
        if rows != i64::from(view.record_count()) {
            return Err(corrupt(format!(
                "{rows} rows, but the header counts {}",
                view.record_count()
            )));
        }
    }
    Ok(())
}

/// Appends the client's batches durably. The log tablet checks framing and CRCs and applies
/// writer idempotence atomically with offset assignment: a retried batch (same writer id and
/// sequence) is acknowledged with its original base offset and not written again.
async fn append_client_batches(bucket: &Bucket, records: Bytes) -> Result<i64, ApiError> {
    let info = bucket
        .log
        .append(records, crate::catalog::now_ms())
        .await
        .map_err(|e| bucket.storage_error(&bucket.name(), e))?;
    crate::storage::durability::after_durable_write();
    if info.batches.iter().any(|b| b.duplicate) {
        tracing::debug!(
            bucket = %bucket.name(),
            base_offset = info.base_offset,
            "acknowledged retried batch without appending"
        );
    }
    Ok(info.base_offset)
}

struct FetchTarget {
    table: Arc<TableRuntime>,
    projection: Option<Vec<usize>>,
    /// A pushed-down filter and the table's column types its statistics are read with.
    filter: Option<(LogFilter, Vec<fluss::metadata::DataType>)>,
    buckets: Vec<PbFetchLogReqForBucket>,
}

pub async fn fetch(service: &Service, body: Bytes) -> Result<FetchLogResponse, ApiError> {
    let request: FetchLogRequest = protocol::decode(body, "FetchLog")?;
    let mut targets = Vec::with_capacity(request.tables_req.len());
    let mut unknown_tables = Vec::new();
    for table_request in request.tables_req {
        match service.table_runtime(table_request.table_id) {
            Ok(table) => {
                let projection = if table_request.projection_pushdown_enabled {
                    Some(validate_projection(
                        &table,
                        &table_request.projected_fields,
                    )?)
                } else {
                    None
                };
                let filter = log_filter::from_request(
                    &table,
                    table_request.filter_predicate.as_ref(),
                    table_request.filter_schema_id,
                )?
                .map(|filter| {
                    let types = table
                        .entry
                        .descriptor
                        .schema()
                        .columns()
                        .iter()
                        .map(|c| c.data_type().clone())
                        .collect();
                    (filter, types)
                });
                targets.push(FetchTarget {
                    table,
                    projection,
                    filter,
                    buckets: table_request.buckets_req,
                });
            }
            Err(error) => unknown_tables.push((table_request, error)),
        }
    }
    let wait_ms = u64::try_from(request.max_wait_ms.unwrap_or(0))
        .unwrap_or(0)
        .min(service.config.fetch_wait_max_ms);
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let min_bytes = usize::try_from(request.min_bytes.unwrap_or(1))
        .unwrap_or(1)
        .max(1);
    let response_bytes_max = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .clamp(1, service.config.fetch_response_bytes_max);
    loop {
        let (mut response, bytes, any_error, any_pruned) =
            read_targets(&targets, response_bytes_max);
        let now = Instant::now();
        // A bucket whose batches a filter left out has moved on (its filtered end offset):
        // answer at once, or the client's next fetch would wait out the poll for nothing.
        if bytes >= min_bytes || any_error || any_pruned || now >= deadline {
            for (table_request, error) in &unknown_tables {
                response.tables_resp.push(PbFetchLogRespForTable {
                    table_id: table_request.table_id,
                    buckets_resp: table_request
                        .buckets_req
                        .iter()
                        .map(|b| bucket_error(b, error.clone()))
                        .collect(),
                });
            }
            return Ok(response);
        }
        wait_for_any(&targets, deadline - now).await;
    }
}

fn validate_projection(table: &TableRuntime, fields: &[i32]) -> Result<Vec<usize>, ApiError> {
    if crate::catalog::is_indexed_log(&table.entry.descriptor) {
        // As Fluss: its batches are served as written, never rewritten.
        return Err(ApiError::new(
            code::INVALID_COLUMN_PROJECTION,
            format!(
                "Column projection is only supported for ARROW format, but the table {} is INDEXED format.",
                table.entry.qualified_name()
            ),
        ));
    }
    let field_count = table.arrow_schema.fields().len();
    let mut projection = Vec::with_capacity(fields.len());
    for &field in fields {
        match usize::try_from(field) {
            Ok(index)
                if index < field_count && projection.last().is_none_or(|&last| last < index) =>
            {
                projection.push(index)
            }
            _ => {
                return Err(ApiError::new(
                    code::INVALID_COLUMN_PROJECTION,
                    format!(
                        "projection {fields:?} of {} is invalid: indexes must be ascending and below {field_count}",
                        table.entry.qualified_name()
                    ),
                ));
            }
        }
    }
    if projection.is_empty() {
        return Err(ApiError::new(
            code::INVALID_COLUMN_PROJECTION,
            format!(
                "projection of {} selects no column",
                table.entry.qualified_name()
            ),
        ));
    }
    Ok(projection)
}

/// Reads every requested bucket once; returns the response, its record bytes, whether any
/// bucket answered an error and whether a filter left batches out of any (either ends a long
/// poll at once).
fn read_targets(
    targets: &[FetchTarget],
    response_bytes_max: usize,
) -> (FetchLogResponse, usize, bool, bool) {
    let mut budget = response_bytes_max;
    let mut total = 0usize;
    let mut any_error = false;
    let mut any_pruned = false;
    let mut response = FetchLogResponse {
        tables_resp: Vec::with_capacity(targets.len()),
    };
    for target in targets {
        let mut buckets_resp = Vec::with_capacity(target.buckets.len());
        for bucket_request in &target.buckets {
            // Until the answer holds a batch, one larger than the budget is still returned (a
            // reader must progress); after that the budget holds strictly, however many buckets
            // (or repeats of one) the request lists: at most the budget plus one batch.
            let budget_of_bucket = match total {
                0 => Budget::AtLeastOneBatch(budget),
                _ => Budget::Within(budget),
            };
            let result = read_bucket(target, bucket_request, budget_of_bucket);
            match result {
                Ok(resp) => {
                    any_pruned |= resp.filtered_end_offset.is_some();
                    let len = resp.records.as_ref().map_or(0, Bytes::len);
                    total += len;
                    budget = budget.saturating_sub(len);
                    buckets_resp.push(resp);
                }
                Err(error) => {
                    any_error = true;
                    buckets_resp.push(bucket_error(bucket_request, error));
                }
            }
        }
        response.tables_resp.push(PbFetchLogRespForTable {
            table_id: target.table.entry.id,
            buckets_resp,
        });
    }
    (response, total, any_error, any_pruned)
}

/// How many record bytes a bucket's read may add to a fetch answer.
#[derive(Debug, Clone, Copy)]
enum Budget {
    /// About this many, but at least the first batch whatever its size.
    AtLeastOneBatch(usize),
    /// At most this many.
    Within(usize),
}

fn read_bucket(
    target: &FetchTarget,
    request: &PbFetchLogReqForBucket,
    budget: Budget,
) -> Result<PbFetchLogRespForBucket, ApiError> {
    let bucket = target
        .table
        .bucket(request.partition_id, request.bucket_id)?;
    let high_watermark = bucket.log.high_watermark();
    let log_start = bucket.log.log_start_offset();
    let offset = if request.fetch_offset == EARLIEST_OFFSET {
        log_start
    } else {
        request.fetch_offset
    };
    if offset < log_start || offset > high_watermark {
        return Err(ApiError::new(
            code::LOG_OFFSET_OUT_OF_RANGE,
            format!(
                "fetch offset {} of {} {} is outside the log [{log_start}, {high_watermark}]",
                request.fetch_offset,
                target.table.entry.qualified_name(),
                bucket.name()
            ),
        ));
    }
    let asked = usize::try_from(request.max_fetch_bytes).unwrap_or(0);
    let (max_bytes, strict) = match budget {
        Budget::AtLeastOneBatch(left) => (asked.clamp(1, left.max(1)), false),
        Budget::Within(left) => (asked.min(left), true),
    };
    let mut filtered_end_offset = None;
    let records = if offset == high_watermark || (strict && max_bytes == 0) {
        Bytes::new()
    } else {
        let read = if strict {
            bucket.log.read_within(offset, max_bytes)
        } else {
            bucket.log.read(offset, max_bytes)
        };
        let mut data = read.map_err(|e| {
            storage_error(
                &format!("{} {}", target.table.entry.qualified_name(), bucket.name()),
                e,
            )
        })?;
        if let Some((filter, types)) = &target.filter {
            let (kept, end) = prune(&target.table, data, filter, types)?;
            data = kept;
            filtered_end_offset = end;
        }
        match &target.projection {
            Some(projection) => project(&target.table, data, projection)?,
            None => data,
        }
    };
    Ok(PbFetchLogRespForBucket {
        partition_id: request.partition_id,
        bucket_id: request.bucket_id,
        error_code: None,
        error_message: None,
        high_watermark: Some(high_watermark),
        log_start_offset: Some(log_start),
        records: Some(records),
        filtered_end_offset,
    })
}

/// The batches of `data` the filter may match, and, when it left any out, the offset after the
/// last batch read (the client's next fetch starts at least there). Whole batches only; a run
/// of kept batches is one slice of `data`.
fn prune(
    table: &TableRuntime,
    data: Bytes,
    filter: &LogFilter,
    types: &[fluss::metadata::DataType],
) -> Result<(Bytes, Option<i64>), ApiError> {
    let batches = Batch::split(data.clone(), false).map_err(|e| {
        ApiError::new(
            code::LOG_STORAGE_EXCEPTION,
            format!(
                "cannot read stored batches of {}: {e}",
                table.entry.qualified_name()
            ),
        )
    })?;
    let keep: Vec<bool> = batches
        .iter()
        // A batch written under an earlier schema has statistics of its own columns, which
        // the filter's column positions (the current schema's) need not match: kept.
        .map(|batch| {
            i32::from(batch.schema_id()) != table.entry.schema_id
                || filter.may_match_batch(batch, types)
        })
        .collect();
    if keep.iter().all(|k| *k) {
        return Ok((data, None));
    }
    let end = batches.last().map(Batch::next_offset);
    let mut out = BytesMut::new();
    for (batch, kept) in batches.iter().zip(&keep) {
        if *kept {
            out.extend_from_slice(&batch.data);
        }
    }
    Ok((out.freeze(), end))
}

fn project(table: &TableRuntime, data: Bytes, projection: &[usize]) -> Result<Bytes, ApiError> {
    let storage_error = |reason: String| {
        ApiError::new(
            code::LOG_STORAGE_EXCEPTION,
            format!(
                "cannot project stored batch of {}: {reason}",
                table.entry.qualified_name()
            ),
        )
    };
    let mut out = BytesMut::with_capacity(data.len());
    for view in Batch::split(data, false).map_err(|e| storage_error(e.to_string()))? {
        let written = table.arrow_schema_of(view.schema_id())?;
        let current = (&table.arrow_schema, table.entry.schema_id as i16);
        out.extend_from_slice(
            &crate::codec::arrow::project_evolved_batch(&view, &written, current, projection)
                .map_err(storage_error)?,
        );
    }
    Ok(out.freeze())
}

async fn wait_for_any(targets: &[FetchTarget], timeout: Duration) {
    let mut waits = Vec::new();
    for target in targets {
        for request in &target.buckets {
            if let Ok(bucket) = target.table.bucket(request.partition_id, request.bucket_id) {
                let offset = if request.fetch_offset == EARLIEST_OFFSET {
                    bucket.log.log_start_offset()
                } else {
                    request.fetch_offset
                };
                waits.push(Box::pin(async move {
                    bucket.log.wait_for_data(offset, timeout).await
                }));
            }
        }
    }
    if waits.is_empty() {
        tokio::time::sleep(timeout).await;
    } else {
        futures::future::select_all(waits).await;
    }
}

fn bucket_error(request: &PbFetchLogReqForBucket, error: ApiError) -> PbFetchLogRespForBucket {
    PbFetchLogRespForBucket {
        partition_id: request.partition_id,
        bucket_id: request.bucket_id,
        error_code: Some(error.code),
        error_message: Some(error.message),
        high_watermark: None,
        log_start_offset: None,
        records: None,
        filtered_end_offset: None,
    }
}

pub async fn list_offsets(service: &Service, body: Bytes) -> Result<ListOffsetsResponse, ApiError> {
    let request: ListOffsetsRequest = protocol::decode(body, "ListOffsets")?;
    // One answer per listed id: no table has more buckets than this, so no honest request
    // lists more (a 100 MiB frame of packed ids would ask for billions of answers).
    let listed_max = service.config.bucket_count_max as usize;
    if request.bucket_id.len() > listed_max {
        return Err(ApiError::new(
            code::RECORD_TOO_LARGE,
            format!(
                "ListOffsets lists {} bucket ids, more than bucket_count_max {listed_max} (the most a table has); list each bucket once",
                request.bucket_id.len()
            ),
        ));
    }
    let table = service.table_runtime(request.table_id)?;
    let now_ms = crate::catalog::now_ms();
    let buckets_resp = request
        .bucket_id
        .iter()
        .map(|&bucket_id| {
            let result = table.bucket(request.partition_id, bucket_id).and_then(|bucket| match request.offset_type {
                LIST_EARLIEST => Ok(bucket.log.log_start_offset()),
                LIST_LATEST => Ok(bucket.log.high_watermark()),
                LIST_TIMESTAMP => match request.start_timestamp {
                    // As Fluss: a timestamp past the server's clock has no answer yet.
                    Some(ts) if ts > now_ms => Err(ApiError::new(
                        code::INVALID_TIMESTAMP,
                        format!("timestamp {ts} is later than the server's current time {now_ms}; ask for an offset at or before now"),
                    )),
                    Some(ts) => bucket.log.offset_for_timestamp(ts).map_err(|e| storage_error("list offsets", e)),
                    None => Err(ApiError::new(code::INVALID_TIMESTAMP, "timestamp offset request without a timestamp")),
                },
                other => Err(ApiError::new(
                    code::INVALID_CONFIG,
                    format!("unknown offset type {other} (0 earliest, 1 latest, 2 timestamp)"),
                )),
            });
            match result {
                Ok(offset) => PbListOffsetsRespForBucket { bucket_id, error_code: None, error_message: None, offset: Some(offset) },
                Err(error) => PbListOffsetsRespForBucket {
                    bucket_id,
                    error_code: Some(error.code),
                    error_message: Some(error.message),
                    offset: None,
                },
            }
        })
        .collect();
    Ok(ListOffsetsResponse { buckets_resp })
}
