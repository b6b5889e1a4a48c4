//! ScanKv (Fluss 1.0, the Java client's batch scan of a primary-key bucket): a scan opens on a
//! point-in-time view of the bucket's kv tablet and answers its current values in key order, a
//! value record batch of about `batch_size_bytes` per request, the first answer carrying the
//! changelog offset the view reflects. As Fluss answers it: errors are in the response body;
//! every data request carries `call_seq_id`, 0 for the opening one, then one more each time;
//! one request at a time per scanner; a scanner ends when it returns its last row, at a close
//! request, or after [`crate::kv_scanners::TTL`] idle. Sessions are bounded per bucket and per
//! server (`kv_scanners`); a batch holds at least one row and at most
//! `min(batch_size_bytes, 10 MiB, fetch_response_bytes_max)` bytes past its first row.

use crate::codec::value_batch::ValueBatch;
use crate::kv_scanners::{Session, TakeError};
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use bytes::Bytes;

/// The most bytes of one answer (Fluss's `kv.scanner.max-batch-size`).
const BATCH_BYTES_MAX: usize = 10 << 20;

pub(crate) async fn scan_kv(service: &Service, body: Bytes) -> ScanKvResponse {
    match answer(service, body) {
        Ok(response) => response,
        Err(error) => ScanKvResponse {
            error_code: Some(error.code),
            error_message: Some(error.message),
            scanner_id: None,
            has_more_results: None,
            records: None,
            log_offset: None,
        },
    }
}

fn invalid(message: &str) -> ApiError {
    ApiError::new(code::INVALID_SCAN_REQUEST, message)
}

fn answer(service: &Service, body: Bytes) -> Result<ScanKvResponse, ApiError> {
    let request: ScanKvRequest = protocol::decode(body, "ScanKv")?;
    let close = request.close_scanner.unwrap_or(false);
    match (&request.scanner_id, &request.bucket_scan_req) {
        (Some(_), Some(_)) => Err(invalid(
            "ScanKvRequest must not set both bucket_scan_req and scanner_id.",
        )),
        (None, None) => Err(invalid(
            "ScanKvRequest must have either bucket_scan_req (new scan) or scanner_id (continuation).",
        )),
        (None, Some(_)) if close => Err(invalid(
            "ScanKvRequest must not set close_scanner together with bucket_scan_req.",
        )),
        (Some(id), None) if close => {
            service.kv_scanners.close(id);
            Ok(ended(Some(id.clone())))
        }
        (None, Some(bucket)) => {
            let batch_bytes = batch_bytes(service, &request)?;
            check_seq(-1, request.call_seq_id)?;
            open(service, bucket, batch_bytes)
        }
        (Some(id), None) => {
            let batch_bytes = batch_bytes(service, &request)?;
            continue_scan(service, id, request.call_seq_id, batch_bytes)
        }
    }
}

/// The bytes a data request asks for, capped.
fn batch_bytes(service: &Service, request: &ScanKvRequest) -> Result<usize, ApiError> {
    match request.batch_size_bytes {
        None => Err(invalid(
            "batch_size_bytes is required for data-fetching scan requests.",
        )),
        Some(n) if n <= 0 => Err(invalid("batch_size_bytes must be greater than 0.")),
        Some(n) => Ok((n as usize)
            .min(BATCH_BYTES_MAX)
            .min(service.config.fetch_response_bytes_max)),
    }
}

/// A request's `call_seq_id` must follow the last one answered (`last`, -1 before the first).
fn check_seq(last: i32, got: Option<i32>) -> Result<(), ApiError> {
    let expected = last + 1;
    match got {
        None => Err(invalid(
            "call_seq_id is required for ScanKV requests; send 0 with the opening request and one more with each next",
        )),
        Some(seq) if seq != expected => Err(invalid(&format!(
            "Out-of-order scan request: expected callSeqId={expected} but got {seq}."
        ))),
        Some(_) => Ok(()),
    }
}

fn ended(scanner_id: Option<Bytes>) -> ScanKvResponse {
    ScanKvResponse {
        error_code: None,
        error_message: None,
        scanner_id,
        has_more_results: Some(false),
        records: None,
        log_offset: None,
    }
}

/// A new scan of one bucket: its first batch, and a scanner for the rest if there is more.
fn open(
    service: &Service,
    request: &PbScanReqForBucket,
    batch_bytes: usize,
) -> Result<ScanKvResponse, ApiError> {
    let table = service.table_runtime(request.table_id)?;
    if !table.entry.has_primary_key() {
        return Err(ApiError::new(
            code::NON_PRIMARY_KEY_TABLE,
            format!(
                "the primary key table not exists for {}: ScanKv reads primary-key tables (read a log table with a log scanner)",
                table.entry.qualified_name()
            ),
        ));
    }
    let bucket = table.bucket(request.partition_id, request.bucket_id)?;
    let kv = super::kv_tablet(&table, &bucket)?;
    let context = || format!("{} {}", table.entry.qualified_name(), bucket.name());
    let view = kv.view().map_err(|e| bucket.storage_error(&context(), e))?;
    let log_offset = view.applied_offset();
    let mut session = Session {
        bucket: (request.table_id, request.partition_id, request.bucket_id),
        view,
        last_key: None,
        // As Fluss: no limit, or one of 0 or less, scans everything.
        remaining: request.limit.filter(|l| *l > 0).map(|l| l as u64),
        last_seq: 0,
    };
    let (records, more) =
        next_batch(&mut session, batch_bytes).map_err(|e| bucket.storage_error(&context(), e))?;
    let scanner_id = if more {
        let id = service
            .kv_scanners
            .open(session)
            .map_err(|message| ApiError::new(code::TOO_MANY_SCANNERS, message))?;
        Some(Bytes::from(id))
    } else {
        None
    };
    Ok(ScanKvResponse {
        error_code: None,
        error_message: None,
        scanner_id,
        has_more_results: Some(more),
        records: Some(records),
        log_offset: Some(log_offset),
    })
}

/// The next batch of scanner `id`.
fn continue_scan(
    service: &Service,
    id: &Bytes,
    seq: Option<i32>,
    batch_bytes: usize,
) -> Result<ScanKvResponse, ApiError> {
    let mut session = service.kv_scanners.take(id).map_err(|e| match e {
        TakeError::Expired => ApiError::new(
            code::SCANNER_EXPIRED,
            "Scanner session has expired due to inactivity. Please start a new scan.",
        ),
        TakeError::Unknown => ApiError::new(
            code::UNKNOWN_SCANNER_ID,
            "Unknown scanner ID. The session may have expired or never existed.",
        ),
        TakeError::Busy => invalid(
            "Concurrent scan request on scanner ID, or session is closing; only one in-flight scanKv RPC per scanner is allowed.",
        ),
    })?;
    if let Err(error) = check_seq(session.last_seq, seq) {
        service.kv_scanners.put_back(id, session);
        return Err(error);
    }
    let read = next_batch(&mut session, batch_bytes);
    let (records, more) = match read {
        Ok(batch) => batch,
        Err(e) => {
            service.kv_scanners.close(id);
            return Err(crate::tablets::storage_error("ScanKv", e));
        }
    };
    session.last_seq += 1;
    if more {
        service.kv_scanners.put_back(id, session);
    } else {
        service.kv_scanners.close(id);
    }
    Ok(ScanKvResponse {
        error_code: None,
        error_message: None,
        scanner_id: Some(id.clone()),
        has_more_results: Some(more),
        records: Some(records),
        log_offset: None,
    })
}

/// The session's next values, at least one and about `batch_bytes`, and whether more remain.
fn next_batch(session: &mut Session, batch_bytes: usize) -> crate::storage::Result<(Bytes, bool)> {
    let mut batch = ValueBatch::default();
    let mut last_key = None;
    let mut more = false;
    for entry in session.view.entries_after(session.last_key.as_deref()) {
        let (key, value) = entry?;
        let full = batch.records() > 0 && batch.size_with(&value) > batch_bytes;
        if full || session.remaining == Some(0) {
            more = session.remaining != Some(0);
            break;
        }
        // A value's length always fits: the kv tablet stores what a frame carried.
        let _ = batch.push(&value);
        if let Some(remaining) = &mut session.remaining {
            *remaining -= 1;
        }
        last_key = Some(key);
    }
    if let Some(key) = last_key {
        session.last_key = Some(key.to_vec());
    }
    Ok((batch.finish(), more))
}
