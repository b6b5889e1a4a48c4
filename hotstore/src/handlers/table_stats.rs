//! GetTableStats (1059): the row count of each requested bucket, as Fluss 0.9.1 answers it
//! (`ReplicaManager.getTableStats`, `Replica.getRowCount`). Clients sum the buckets: the Java
//! client's `Admin.getTableStats` over every bucket of every partition, and Flink's batch
//! `COUNT(*)` through it (before 0.9 a primary-key table could not be counted at all).
//!
//! - A primary-key bucket answers the number of live keys in its kv tablet, kept exactly by
//!   every apply and stored with the applied offset (see [`crate::storage::KvTablet`]): an
//!   update leaves it, a delete of a present key lowers it.
//! - A log bucket answers its records between the log start offset and the high watermark,
//!   as Fluss does (`LogTablet.getRowCount`): records below a retention cut are not counted.
//!
//! Errors are per bucket, as Fluss puts them: UNKNOWN_TABLE_OR_BUCKET for an unknown table,
//! partition or bucket, the storage error of a bucket whose count cannot be read. Fluss
//! refuses a count only for tables whose row count it does not keep (`table.changelog.image`
//! WAL, or created before 0.9); silt keeps it for every primary-key table. Column statistics
//! (`target_columns`) are reserved in Fluss 0.9.1 and answered by neither.

use crate::protocol::messages::*;
use crate::protocol::{self, ApiError};
use crate::service::Service;
use crate::tablets::TableRuntime;
use bytes::Bytes;

pub(crate) fn get_table_stats(
    service: &Service,
    body: Bytes,
) -> Result<GetTableStatsResponse, ApiError> {
    let request: GetTableStatsRequest = protocol::decode(body, "GetTableStats")?;
    let table = service.table_runtime(request.table_id);
    let buckets_resp = request
        .buckets_req
        .iter()
        .map(|bucket_request| {
            let row_count = table.as_ref().map_err(Clone::clone).and_then(|table| {
                row_count(table, bucket_request.partition_id, bucket_request.bucket_id)
            });
            let (row_count, error) = match row_count {
                Ok(row_count) => (Some(row_count), None),
                Err(error) => (None, Some(error)),
            };
            PbTableStatsRespForBucket {
                error_code: error.as_ref().map(|e| e.code),
                error_message: error.map(|e| e.message),
                partition_id: bucket_request.partition_id,
                bucket_id: bucket_request.bucket_id,
                row_count,
            }
        })
        .collect();
    Ok(GetTableStatsResponse { buckets_resp })
}

fn row_count(
    table: &TableRuntime,
    partition_id: Option<i64>,
    bucket_id: i32,
) -> Result<i64, ApiError> {
    let bucket = table.bucket(partition_id, bucket_id)?;
    if !table.entry.has_primary_key() {
        let log = &bucket.log;
        return Ok(log.high_watermark() - log.log_start_offset());
    }
    let context = format!("{} {}", table.entry.qualified_name(), bucket.name());
    super::kv_tablet(table, &bucket)?
        .row_count()
        .map_err(|e| bucket.storage_error(&context, e))
}
