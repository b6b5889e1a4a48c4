//! LimitScan: up to `limit` rows of one bucket, in one response, as Fluss 0.9.1 answers it
//! (`Replica.limitLogScan` / `limitKvScan`).
//!
//! - A log table answers its **last** rows: the whole batches from the one holding offset
//!   `max(log start, high watermark - limit)` up to the high watermark (`is_log_table` true).
//!   Batches are not cut, so the first may hold older rows; the clients keep the last `limit`.
//! - A primary-key table answers the current value of its **first** `limit` keys in key order,
//!   read from the kv tablet (as lookups are), as one value record batch (`is_log_table`
//!   false): `i32` length, `u8` magic 0, `i32` record count, then per record an `i32` length
//!   and the stored value (schema id and row), all little endian. An empty table answers the
//!   batch with no records, as Fluss does (the Java client cannot read zero bytes there).
//!
//! Bounds: `limit` is at most `limit_scan_rows_max` and the records at most
//! `fetch_response_bytes_max` bytes (more only when a single batch is larger, as a fetch
//! answers it). A scan that does not fit is refused, never answered with fewer rows. A negative
//! limit is refused (INVALID_CONFIG; Fluss answers a log table LOG_OFFSET_OUT_OF_RANGE and a
//! primary-key table no rows).
//!
//! Errors are error responses, where Fluss puts them in the response's `error_code` (seen:
//! UNKNOWN_TABLE_OR_BUCKET for an unknown table, bucket or partition): the Java client (0.9.1
//! and 1.0) never reads that field and would show an error as an empty result, while every
//! client raises an error response.

use crate::codec::Batch;
use crate::codec::value_batch::ValueBatch;
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::tablets::{Bucket, TableRuntime};
use bytes::{Bytes, BytesMut};

pub(crate) fn limit_scan(service: &Service, body: Bytes) -> Result<LimitScanResponse, ApiError> {
    let request: LimitScanRequest = protocol::decode(body, "LimitScan")?;
    let table = service.table_runtime(request.table_id)?;
    let name = table.entry.qualified_name();
    let bucket = table.bucket(request.partition_id, request.bucket_id)?;
    let rows_max = service.config.limit_scan_rows_max;
    // A limit of 0 is answered with no rows, as Fluss answers it; clients never send one.
    let limit = match usize::try_from(request.limit) {
        Ok(limit) if limit <= rows_max => limit,
        Ok(limit) => {
            return Err(ApiError::new(
                code::RECORD_TOO_LARGE,
                format!(
                    "limit scan of {limit} rows of {name} exceeds limit_scan_rows_max {rows_max}: \
                     ask for fewer rows, or read the table with a log scanner"
                ),
            ));
        }
        _ => {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "limit scan of {name} with limit {}: the limit must not be negative",
                    request.limit
                ),
            ));
        }
    };
    let scan = Scan {
        table: &table,
        bucket: &bucket,
        limit,
        bytes_max: service.config.fetch_response_bytes_max,
    };
    let is_log_table = !table.entry.has_primary_key();
    let records = if is_log_table {
        scan.log_tail()?
    } else {
        scan.kv_head()?
    };
    Ok(LimitScanResponse {
        error_code: None,
        error_message: None,
        is_log_table: Some(is_log_table),
        records: Some(records),
    })
}

/// A limit scan of one bucket: `limit` rows within `bytes_max` bytes of records.
struct Scan<'a> {
    table: &'a TableRuntime,
    bucket: &'a Bucket,
    limit: usize,
    bytes_max: usize,
}

impl Scan<'_> {
    /// The bucket, as error messages name it.
    fn context(&self) -> String {
        format!(
            "{} bucket {}",
            self.table.entry.qualified_name(),
            self.bucket.id
        )
    }

    /// The whole batches holding the bucket's last `limit` rows below the high watermark.
    fn log_tail(&self) -> Result<Bytes, ApiError> {
        let bucket = self.bucket;
        let high_watermark = bucket.log.high_watermark();
        let rows = i64::try_from(self.limit).unwrap_or(i64::MAX);
        let mut offset = bucket
            .log
            .log_start_offset()
            .max(high_watermark.saturating_sub(rows));
        let mut records = BytesMut::new();
        // One read covers at most one segment: read on until the high watermark.
        while offset < high_watermark {
            let budget = self.bytes_max.saturating_sub(records.len()).max(1);
            let data = bucket
                .log
                .read_bounded(offset, budget, high_watermark)
                .map_err(|e| bucket.storage_error(&self.context(), e))?;
            let batches = Batch::split(data.clone(), false).map_err(|e| {
                ApiError::new(
                    code::LOG_STORAGE_EXCEPTION,
                    format!("stored batches of {}: {e}", self.context()),
                )
            })?;
            let Some(next_offset) = batches.last().map(Batch::next_offset) else {
                break;
            };
            if !records.is_empty() && records.len() + data.len() > self.bytes_max {
                return Err(self.too_large());
            }
            debug_assert!(next_offset > offset, "a read moves forward");
            if next_offset <= offset {
                break;
            }
            records.extend_from_slice(&data);
            offset = next_offset;
        }
        Ok(records.freeze())
    }

    /// The current values of the bucket's first `limit` keys, as a value record batch.
    fn kv_head(&self) -> Result<Bytes, ApiError> {
        let bucket = self.bucket;
        let kv = super::kv_tablet(self.table, bucket)?;
        let mut batch = ValueBatch::default();
        for entry in kv.iter().take(self.limit) {
            let (_, value) = entry.map_err(|e| bucket.storage_error(&self.context(), e))?;
            if batch.records() > 0 && batch.size_with(&value) > self.bytes_max {
                return Err(self.too_large());
            }
            batch.push(&value).map_err(|reason| {
                ApiError::new(
                    code::KV_STORAGE_EXCEPTION,
                    format!("the limit scan of {}: {reason}", self.context()),
                )
            })?;
        }
        Ok(batch.finish())
    }

    fn too_large(&self) -> ApiError {
        ApiError::new(
            code::RECORD_TOO_LARGE,
            format!(
                "the {} rows a limit scan of {} asks for take more than the hot store's \
                 {}-byte response bound (fetch_response_bytes_max): ask for fewer rows",
                self.limit,
                self.context(),
                self.bytes_max
            ),
        )
    }
}
