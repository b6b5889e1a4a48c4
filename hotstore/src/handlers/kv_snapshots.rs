//! Kv snapshot handlers: GetLatestKvSnapshots, GetKvSnapshotMetadata and the snapshot-lease
//! requests (acquire, release, drop), answered from the snapshots `crate::kv_snapshots` takes.
//!
//! GetLatestKvSnapshots lists every bucket of the table (or partition) with its latest
//! published snapshot's id and log offset, or neither when it has none yet; a reader
//! (Flink's default `scan.startup.mode=full`, the Java client) reads a snapshot's rows, then
//! the changelog from its log offset, and a bucket without one from its earliest offset.
//! Both are the whole changelog folded: retention never cuts a primary-key bucket's changelog
//! past its latest snapshot. GetKvSnapshotMetadata answers a snapshot's log offset and its
//! RocksDB files as (absolute local path, RocksDB file name) pairs, which the clients copy
//! into a directory of their own and open with RocksDB; the Fluss connector reads local paths
//! only, so the reader runs where it sees silt's data directory.
//!
//! Contract: a bucket whose changelog no longer starts at 0 and that has no snapshot (only a
//! data directory from before silt kept snapshots, until the snapshot run at start has taken
//! one) is refused with KV_SNAPSHOT_NOT_EXIST, never answered "read from the earliest offset",
//! which would miss the rows last written before the cut. Every request checks the tables it
//! names as Fluss does (an unknown table id is UNKNOWN_TABLE_OR_BUCKET, a log table
//! NON_PRIMARY_KEY_TABLE); a snapshot that does not exist is KV_SNAPSHOT_NOT_EXIST, as Fluss
//! answers any snapshot it cannot find.

use crate::catalog::TableEntry;
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::service::kv_snapshot_leases::BucketKey;
use crate::tablets::Bucket;
use bytes::Bytes;
use std::collections::BTreeMap;

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
    let latest_snapshots = buckets
        .iter()
        .map(|bucket| latest_of(&entry, bucket))
        .collect::<Result<_, _>>()?;
    Ok(GetLatestKvSnapshotsResponse {
        table_id: entry.id,
        partition_id,
        latest_snapshots,
    })
}

/// A bucket's latest snapshot; none while its changelog starts at 0.
fn latest_of(entry: &TableEntry, bucket: &Bucket) -> Result<PbKvSnapshot, ApiError> {
    let latest = bucket.snapshots.as_ref().and_then(|s| s.latest());
    let log_start = bucket.log.log_start_offset();
    match latest {
        Some(snapshot) => Ok(PbKvSnapshot {
            bucket_id: bucket.id,
            snapshot_id: Some(snapshot.id),
            log_offset: Some(snapshot.log_offset),
        }),
        None if log_start == 0 => Ok(PbKvSnapshot {
            bucket_id: bucket.id,
            snapshot_id: None,
            log_offset: None,
        }),
        None => Err(no_snapshot_yet(entry, bucket, log_start)),
    }
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

/// Why a full read of `entry` cannot be answered yet: `bucket` lost its changelog before
/// `log_start` and has no snapshot (a data directory from before silt kept them).
fn no_snapshot_yet(entry: &TableEntry, bucket: &Bucket, log_start: i64) -> ApiError {
    ApiError::new(
        code::KV_SNAPSHOT_NOT_EXIST,
        format!(
            "primary-key table {} has no kv snapshot of {} yet, and hot retention removed its \
             changelog before offset {log_start}, so a full read from the earliest offset would \
             miss the rows last written before it: the hot store's kv snapshot run (at start and \
             every hotstore.kv_snapshot_interval_ms) takes one; retry once it has",
            entry.qualified_name(),
            bucket.name()
        ),
    )
}

pub(crate) fn get_kv_snapshot_metadata(
    service: &Service,
    body: Bytes,
) -> Result<GetKvSnapshotMetadataResponse, ApiError> {
    let request: GetKvSnapshotMetadataRequest = protocol::decode(body, "GetKvSnapshotMetadata")?;
    let key = (request.table_id, request.partition_id, request.bucket_id);
    // Fluss answers KV_SNAPSHOT_NOT_EXIST for any snapshot it cannot find, an unknown table
    // or bucket included.
    let Some(snapshot) = service.snapshot_of(key, request.snapshot_id) else {
        return Err(snapshot_not_found(service, key, request.snapshot_id));
    };
    let path_of = |name: &str| {
        let path = snapshot.dir.join(name);
        path.to_str().map(str::to_string).ok_or_else(|| {
            ApiError::new(
                code::KV_STORAGE_EXCEPTION,
                format!(
                    "kv snapshot file {} has a path that is not UTF-8",
                    path.display()
                ),
            )
        })
    };
    // As Fluss lists them: the private files (MANIFEST, CURRENT), then the tables.
    let (tables, private): (Vec<_>, Vec<_>) = snapshot
        .files
        .iter()
        .partition(|f| f.name.ends_with(".sst"));
    let snapshot_files = private
        .into_iter()
        .chain(tables)
        .map(|file| {
            Ok(PbRemotePathAndLocalFile {
                remote_path: path_of(&file.name)?,
                local_file_name: file.name.clone(),
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(GetKvSnapshotMetadataResponse {
        log_offset: snapshot.log_offset,
        snapshot_files,
    })
}

/// KV_SNAPSHOT_NOT_EXIST for snapshot `id` of `key`, naming the snapshots the bucket has.
fn snapshot_not_found(service: &Service, key: BucketKey, id: i64) -> ApiError {
    let (table_id, partition_id, bucket_id) = key;
    let bucket = service.table_runtime(table_id).ok().map(|table| {
        (
            table.entry.qualified_name(),
            table.bucket(partition_id, bucket_id),
        )
    });
    let message = match bucket {
        None => format!("unknown table id {table_id}: it has no kv snapshot {id}"),
        Some((table, Err(error))) => {
            format!("table {table} has no kv snapshot {id}: {}", error.message)
        }
        Some((table, Ok(bucket))) => {
            let ids = bucket
                .snapshots
                .as_ref()
                .map(|s| s.ids())
                .unwrap_or_default();
            format!(
                "table {table} {} has no kv snapshot {id} (it keeps {ids:?}; ask \
                 GetLatestKvSnapshots for the latest)",
                bucket.name()
            )
        }
    };
    ApiError::new(code::KV_SNAPSHOT_NOT_EXIST, message)
}

pub(crate) fn acquire_kv_snapshot_lease(
    service: &Service,
    body: Bytes,
) -> Result<AcquireKvSnapshotLeaseResponse, ApiError> {
    let request: AcquireKvSnapshotLeaseRequest = protocol::decode(body, "AcquireKvSnapshotLease")?;
    let mut wanted = Vec::new();
    for table in &request.snapshots_to_lease {
        check_kv_table(service, table.table_id)?;
        for bucket in &table.bucket_snapshots {
            let key = (table.table_id, bucket.partition_id, bucket.bucket_id);
            wanted.push((key, bucket.snapshot_id));
        }
    }
    let unavailable =
        service.acquire_lease(&request.lease_id, request.lease_duration_ms, wanted)?;
    let mut by_table: BTreeMap<i64, Vec<PbKvSnapshotLeaseForBucket>> = BTreeMap::new();
    for ((table_id, partition_id, bucket_id), snapshot_id) in unavailable {
        by_table
            .entry(table_id)
            .or_default()
            .push(PbKvSnapshotLeaseForBucket {
                partition_id,
                bucket_id,
                snapshot_id,
            });
    }
    Ok(AcquireKvSnapshotLeaseResponse {
        unavailable_snapshots: by_table
            .into_iter()
            .map(|(table_id, bucket_snapshots)| PbKvSnapshotLeaseForTable {
                table_id,
                bucket_snapshots,
            })
            .collect(),
    })
}

pub(crate) fn release_kv_snapshot_lease(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: ReleaseKvSnapshotLeaseRequest = protocol::decode(body, "ReleaseKvSnapshotLease")?;
    for bucket in &request.buckets_to_release {
        check_kv_table(service, bucket.table_id)?;
    }
    let buckets: Vec<BucketKey> = request
        .buckets_to_release
        .iter()
        .map(|b| (b.table_id, b.partition_id, b.bucket_id))
        .collect();
    service.release_lease(&request.lease_id, &buckets)?;
    Ok(Empty {})
}

pub(crate) fn drop_kv_snapshot_lease(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    // As Fluss: dropping a lease that does not exist succeeds.
    let request: DropKvSnapshotLeaseRequest = protocol::decode(body, "DropKvSnapshotLease")?;
    service.drop_lease(&request.lease_id)?;
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
