//! Kv snapshot handlers: GetLatestKvSnapshots, GetKvSnapshotMetadata and the snapshot-lease
//! requests (acquire, release, drop).
//!
//! silt keeps no kv snapshots: a primary-key table's changelog is its kv state's write-ahead
//! log, and the changelog carries full row images. So every bucket answers "no snapshot", which
//! Fluss readers (Flink's default `scan.startup.mode=full`, the Java client) take as "read the
//! changelog from the earliest offset". That reads every row exactly once as long as the
//! changelog starts at offset 0.
//!
//! Contract: once hot retention (`table.log.ttl`) has cut a bucket's changelog (its log start
//! is above 0), reading it from the earliest offset would miss the rows whose last change lies
//! before the cut, and no snapshot holds them. GetLatestKvSnapshots then refuses the table with
//! KV_SNAPSHOT_NOT_EXIST, naming the bucket, its log start and the ways to read the table,
//! instead of answering a read that silently loses rows.
//!
//! With no snapshots there is nothing to lease: an acquire answers every snapshot it names as
//! unavailable, a release or a drop has nothing to do. Each checks the tables it names as
//! Fluss does (an unknown table id is UNKNOWN_TABLE_OR_BUCKET, a log table
//! NON_PRIMARY_KEY_TABLE).

use crate::catalog::TableEntry;
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use bytes::Bytes;

pub(crate) fn get_latest_kv_snapshots(
    service: &Service,
    body: Bytes,
) -> Result<GetLatestKvSnapshotsResponse, ApiError> {
    let request: GetLatestKvSnapshotsRequest = protocol::decode(body, "GetLatestKvSnapshots")?;
    let entry = super::table_at(service, &request.table_path)?;
    check_primary_key(&entry)?;
    let partition_id = partition_asked(service, &entry, request.partition_name.as_deref())?;
    let table = service.table_runtime(entry.id)?;
    let buckets = match partition_id {
        Some(id) => table
            .partition(id)
            .map(|p| p.buckets.clone())
            .ok_or_else(|| {
                ApiError::new(
                    code::PARTITION_NOT_EXISTS,
                    format!(
                        "partition id {id} of {} was dropped",
                        entry.qualified_name()
                    ),
                )
            })?,
        None => table.buckets.clone(),
    };
    let cut: Vec<(i32, i64)> = buckets
        .iter()
        .map(|bucket| (bucket.id, bucket.log.log_start_offset()))
        .filter(|&(_, log_start)| log_start > 0)
        .collect();
    if let Some(&(bucket, log_start)) = cut.first() {
        return Err(changelog_cut(&entry, bucket, log_start, cut.len()));
    }
    Ok(GetLatestKvSnapshotsResponse {
        table_id: entry.id,
        partition_id,
        latest_snapshots: (0..entry.bucket_count)
            .map(|bucket_id| PbKvSnapshot {
                bucket_id,
                snapshot_id: None,
                log_offset: None,
            })
            .collect(),
    })
}

/// The id of the partition a GetLatestKvSnapshots names: it must name one of a partitioned
/// table and none of another.
fn partition_asked(
    service: &Service,
    entry: &TableEntry,
    partition_name: Option<&str>,
) -> Result<Option<i64>, ApiError> {
    match (partition_name, entry.is_partitioned()) {
        (Some(partition), false) => Err(ApiError::new(
            code::TABLE_NOT_PARTITIONED,
            format!(
                "table {} is not partitioned: ask for its kv snapshots without partition {partition:?}",
                entry.qualified_name()
            ),
        )),
        (None, true) => Err(ApiError::new(
            code::PARTITION_NOT_EXISTS,
            format!(
                "table {} is partitioned: name the partition whose kv snapshots you want",
                entry.qualified_name()
            ),
        )),
        (Some(partition), true) => {
            let catalog = &service.catalog;
            let (_, partition) =
                catalog.partition_by_name(&entry.database, &entry.name, partition)?;
            Ok(Some(partition.id))
        }
        (None, false) => Ok(None),
    }
}

/// Why a full read of `entry` cannot be answered: `bucket` (one of `buckets_cut`) lost its
/// changelog before `log_start`, and silt has no snapshot holding what was there.
fn changelog_cut(entry: &TableEntry, bucket: i32, log_start: i64, buckets_cut: usize) -> ApiError {
    let name = entry.qualified_name();
    let others = match buckets_cut {
        1 => String::new(),
        n => format!(" (and {} more of its buckets)", n - 1),
    };
    let lake = if crate::retention::lake_enabled(entry) {
        format!(", or query {name} through silt, which reads the lake and then the hot tail")
    } else {
        String::new()
    };
    ApiError::new(
        code::KV_SNAPSHOT_NOT_EXIST,
        format!(
            "primary-key table {name} has no kv snapshot (silt keeps none) and hot retention \
             (table.log.ttl) removed the changelog of bucket {bucket} before offset \
             {log_start}{others}, so a full read from the earliest offset would silently miss \
             the rows last written before it and is refused: create primary-key tables that are \
             read in full (Flink's default scan.startup.mode 'full') with 'table.log.ttl' = \
             '-1', or read only the changelog still held (scan.startup.mode 'earliest'){lake}"
        ),
    )
}

pub(crate) fn get_kv_snapshot_metadata(
    service: &Service,
    body: Bytes,
) -> Result<GetKvSnapshotMetadataResponse, ApiError> {
    let request: GetKvSnapshotMetadataRequest = protocol::decode(body, "GetKvSnapshotMetadata")?;
    // Fluss answers KV_SNAPSHOT_NOT_EXIST for any snapshot it cannot find, an unknown table
    // included; silt has none to find.
    let table = match service.table_runtime(request.table_id) {
        Ok(table) => format!("table {}", table.entry.qualified_name()),
        Err(_) => format!("unknown table id {}", request.table_id),
    };
    Err(ApiError::new(
        code::KV_SNAPSHOT_NOT_EXIST,
        format!(
            "{table} bucket {} has no kv snapshot {}: silt keeps no kv snapshots \
             (GetLatestKvSnapshots answers none; read the changelog from the earliest offset)",
            request.bucket_id, request.snapshot_id
        ),
    ))
}

pub(crate) fn acquire_kv_snapshot_lease(
    service: &Service,
    body: Bytes,
) -> Result<AcquireKvSnapshotLeaseResponse, ApiError> {
    let request: AcquireKvSnapshotLeaseRequest = protocol::decode(body, "AcquireKvSnapshotLease")?;
    for table in &request.snapshots_to_lease {
        check_kv_table(service, table.table_id)?;
    }
    // Fluss 0.9.1 leases whatever it is asked (its check that a snapshot exists is a TODO);
    // silt says what is true: no snapshot exists to lease.
    let unavailable_snapshots = request
        .snapshots_to_lease
        .into_iter()
        .filter(|table| !table.bucket_snapshots.is_empty())
        .collect();
    Ok(AcquireKvSnapshotLeaseResponse {
        unavailable_snapshots,
    })
}

pub(crate) fn release_kv_snapshot_lease(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: ReleaseKvSnapshotLeaseRequest = protocol::decode(body, "ReleaseKvSnapshotLease")?;
    for bucket in &request.buckets_to_release {
        check_kv_table(service, bucket.table_id)?;
    }
    Ok(Empty {})
}

pub(crate) fn drop_kv_snapshot_lease(body: Bytes) -> Result<Empty, ApiError> {
    // As Fluss: dropping a lease that does not exist succeeds.
    let _: DropKvSnapshotLeaseRequest = protocol::decode(body, "DropKvSnapshotLease")?;
    Ok(Empty {})
}

fn check_kv_table(service: &Service, table_id: i64) -> Result<(), ApiError> {
    check_primary_key(&service.table_runtime(table_id)?.entry)
}

fn check_primary_key(entry: &TableEntry) -> Result<(), ApiError> {
    if entry.has_primary_key() {
        return Ok(());
    }
    Err(ApiError::new(
        code::NON_PRIMARY_KEY_TABLE,
        format!(
            "table {} is not a primary-key table, so it has no kv snapshots (read its log)",
            entry.qualified_name()
        ),
    ))
}
