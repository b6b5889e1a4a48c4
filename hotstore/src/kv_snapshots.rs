//! Kv snapshots of primary-key buckets: when they are taken, how many are kept, and the
//! leases that keep more. What a Fluss reader of a primary-key table starts from (Flink's
//! default `scan.startup.mode=full`, the Java client's snapshot batch scanner): the rows of a
//! snapshot, then the changelog from its log offset.
//!
//! Contract:
//! - A snapshot of a bucket is its kv state at one applied offset: under the bucket's write
//!   lock (no apply runs) silt reads the kv tablet's applied offset and opens a point-in-time
//!   iterator, releases the lock, and streams the iterator into a read-only RocksDB directory
//!   (`storage::kv_snapshots`). Its log offset is that applied offset, the next changelog
//!   offset, as Fluss records it. Writes wait only while the iterator is opened.
//! - Taken every `kv_snapshot_interval_ms` for every primary-key bucket whose applied offset
//!   moved since its latest snapshot, and by hot retention before it would cut a changelog
//!   past the latest snapshot's offset (see `retention`): a bucket's changelog starts at or
//!   below its latest snapshot's log offset, so the snapshot plus the changelog from its log
//!   offset is always the whole changelog folded. Nor past the log offset of a snapshot a live
//!   lease holds: the reader that leased it (Flink, for the time of its snapshot phase) reads
//!   the changelog from there next.
//! - At most `kv_snapshot_concurrency_max` snapshots are written at once, one per bucket.
//! - Each bucket keeps its newest `kv_snapshots_retained` snapshots and those a live lease
//!   names. Leases (AcquireKvSnapshotLease) hold at most `kv_snapshot_leased_max` bucket
//!   snapshots over every lease, for at most `kv_snapshot_lease_duration_max_ms` (a longer ask
//!   is cut to it); they are kept in `kv-snapshots/LEASES` across restarts, and an expired
//!   lease is forgotten. A snapshot that does not exist, or one past the bound, is answered
//!   unavailable (Flink only logs that).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::protocol::ApiError;
use crate::service::Service;
use crate::service::kv_snapshot_leases::{BucketKey, Lease, check_lease_id, leases_full};
use crate::storage::{self, KvSnapshot};
use crate::tablets::Bucket;

/// The latest snapshot of one bucket after a snapshot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketKvSnapshot {
    pub table: String,
    pub table_id: i64,
    pub partition_id: Option<i64>,
    pub bucket: i32,
    /// The latest published snapshot: its id, log offset and rows.
    pub latest: Option<(i64, i64, u64)>,
    /// The snapshots the bucket keeps (ids, oldest first).
    pub kept: Vec<i64>,
    /// Why this run could not take or prune the bucket's snapshot.
    pub error: Option<String>,
}

impl Service {
    /// Takes a snapshot of `bucket` of table `table_id` if its kv state moved since its latest
    /// one, then deletes the snapshots it no longer keeps; answers its latest snapshot (`None`
    /// for a bucket whose changelog was never applied). Blocking: run it off the runtime.
    pub(crate) fn snapshot_bucket(
        &self,
        table_id: i64,
        bucket: &Bucket,
    ) -> storage::Result<Option<Arc<KvSnapshot>>> {
        let (Some(kv), Some(snapshots)) = (&bucket.kv, &bucket.snapshots) else {
            return Ok(None);
        };
        let _permit = self.kv_snapshots.permits.acquire();
        let turn = snapshots.writing_turn();
        let latest = snapshots.latest();
        let Some((applied, entries)) = point_in_time(bucket, kv, latest.as_deref())? else {
            return Ok(latest);
        };
        let snapshot = snapshots.write(&turn, applied, entries, self.config.kv_snapshot_files)?;
        drop(turn);
        tracing::debug!(table_id, bucket = %bucket.name(), snapshot_id = snapshot.id,
            log_offset = snapshot.log_offset, rows = snapshot.rows, "kv snapshot");
        self.prune_snapshots(table_id, bucket)?;
        Ok(Some(snapshot))
    }

    /// Deletes the snapshots of `bucket` that are neither among its newest
    /// `kv_snapshots_retained` nor leased.
    fn prune_snapshots(&self, table_id: i64, bucket: &Bucket) -> storage::Result<()> {
        let Some(snapshots) = &bucket.snapshots else {
            return Ok(());
        };
        let key = (table_id, bucket.partition_id, bucket.id);
        let leased = self.kv_snapshots.leased(key, crate::catalog::now_ms());
        let deleted =
            snapshots.retain(self.config.kv_snapshots_retained, |id| leased.contains(&id))?;
        if !deleted.is_empty() {
            tracing::debug!(table_id, bucket = %bucket.name(), ?deleted, "kv snapshots deleted");
        }
        Ok(())
    }

    /// The offset up to which hot retention may cut `bucket`'s changelog when it wants to cut
    /// up to `wanted`: its latest snapshot's log offset, after taking a snapshot first when
    /// that one is below `wanted`. `None` when no snapshot could be had (nothing is cut then).
    pub(crate) fn snapshot_covering(
        &self,
        table_id: i64,
        bucket: &Bucket,
        wanted: i64,
    ) -> Option<i64> {
        let latest = bucket.snapshots.as_ref()?.latest();
        if let Some(latest) = latest.filter(|s| s.log_offset >= wanted) {
            return Some(latest.log_offset);
        }
        match self.snapshot_bucket(table_id, bucket) {
            Ok(latest) => latest.map(|s| s.log_offset),
            Err(error) => {
                tracing::warn!(table_id, bucket = %bucket.name(), %error, "no kv snapshot, so retention keeps the changelog");
                None
            }
        }
    }

    /// The lowest log offset of the snapshots of `bucket` that a live lease holds: a reader
    /// that leased one reads the changelog from its log offset next, so retention keeps it.
    pub(crate) fn leased_floor(&self, table_id: i64, bucket: &Bucket) -> Option<i64> {
        let snapshots = bucket.snapshots.as_ref()?;
        let key = (table_id, bucket.partition_id, bucket.id);
        let leased = self.kv_snapshots.leased(key, crate::catalog::now_ms());
        leased
            .into_iter()
            .filter_map(|id| snapshots.get(id))
            .map(|snapshot| snapshot.log_offset)
            .min()
    }

    /// A snapshot run over every primary-key bucket (see [`Service::snapshot_bucket`]);
    /// reports each bucket's latest snapshot. Blocking.
    pub(crate) fn run_kv_snapshots(&self) -> Vec<BucketKvSnapshot> {
        let mut report = Vec::new();
        for entry in self.catalog.tables() {
            let Some(table) = self
                .tablets
                .get(entry.id)
                .filter(|t| t.entry.has_primary_key())
            else {
                continue;
            };
            for bucket in table.all_buckets() {
                let taken = self
                    .snapshot_bucket(entry.id, &bucket)
                    .and_then(|_| self.prune_snapshots(entry.id, &bucket));
                if let Err(error) = &taken {
                    tracing::warn!(table = %entry.qualified_name(), bucket = %bucket.name(), %error, "kv snapshot failed; the next run tries again");
                }
                let snapshots = bucket.snapshots.as_ref();
                let latest = snapshots.and_then(|s| s.latest());
                report.push(BucketKvSnapshot {
                    table: entry.qualified_name(),
                    table_id: entry.id,
                    partition_id: bucket.partition_id,
                    bucket: bucket.id,
                    latest: latest.map(|s| (s.id, s.log_offset, s.rows)),
                    kept: snapshots.map(|s| s.ids()).unwrap_or_default(),
                    error: taken.err().map(|e| e.to_string()),
                });
            }
        }
        report
    }

    /// Leases `wanted` (bucket, snapshot id) under `lease_id` for `duration_ms` (cut to the
    /// bound), renewing the lease; answers what it could not lease: snapshots that do not
    /// exist, and any past `kv_snapshot_leased_max`.
    pub(crate) fn acquire_lease(
        &self,
        lease_id: &str,
        duration_ms: i64,
        wanted: Vec<(BucketKey, i64)>,
    ) -> Result<Vec<(BucketKey, i64)>, ApiError> {
        check_lease_id(lease_id)?;
        let now_ms = crate::catalog::now_ms();
        let duration_max =
            i64::try_from(self.config.kv_snapshot_lease_duration_max_ms).unwrap_or(i64::MAX);
        let expires_at_ms = now_ms.saturating_add(duration_ms.clamp(0, duration_max));
        let (available, mut unavailable): (Vec<_>, Vec<_>) = wanted
            .into_iter()
            .partition(|&(key, id)| self.snapshot_of(key, id).is_some());
        let max = self.config.kv_snapshot_leased_max;
        let mut leases = self.kv_snapshots.leases();
        leases.expire(now_ms);
        let held_elsewhere: usize = leases
            .by_id
            .iter()
            .filter(|(id, _)| id.as_str() != lease_id)
            .map(|(_, lease)| lease.snapshots.len().max(1))
            .sum();
        if held_elsewhere >= max && !leases.by_id.contains_key(lease_id) {
            return Err(leases_full(max));
        }
        let lease = leases
            .by_id
            .entry(lease_id.to_string())
            .or_insert_with(|| Lease {
                expires_at_ms,
                snapshots: BTreeMap::new(),
            });
        lease.expires_at_ms = expires_at_ms;
        for (key, id) in available {
            let grows = !lease.snapshots.contains_key(&key);
            if grows && held_elsewhere + lease.snapshots.len() + 1 > max {
                unavailable.push((key, id));
                continue;
            }
            lease.snapshots.insert(key, id);
        }
        self.kv_snapshots.save(&leases)?;
        Ok(unavailable)
    }

    /// Releases `buckets` from `lease_id` (nothing to do for an unknown lease or bucket).
    pub(crate) fn release_lease(
        &self,
        lease_id: &str,
        buckets: &[BucketKey],
    ) -> Result<(), ApiError> {
        let mut leases = self.kv_snapshots.leases();
        let Some(lease) = leases.by_id.get_mut(lease_id) else {
            return Ok(());
        };
        for key in buckets {
            lease.snapshots.remove(key);
        }
        self.kv_snapshots.save(&leases)
    }

    /// Drops `lease_id` (nothing to do for an unknown lease, as in Fluss).
    pub(crate) fn drop_lease(&self, lease_id: &str) -> Result<(), ApiError> {
        let mut leases = self.kv_snapshots.leases();
        if leases.by_id.remove(lease_id).is_none() {
            return Ok(());
        }
        self.kv_snapshots.save(&leases)
    }

    /// The published snapshot `id` of the bucket `key`, if it exists.
    pub(crate) fn snapshot_of(
        &self,
        (table_id, partition_id, bucket_id): BucketKey,
        id: i64,
    ) -> Option<Arc<KvSnapshot>> {
        let table = self.tablets.get(table_id)?;
        let bucket = table.bucket(partition_id, bucket_id).ok()?;
        bucket.snapshots.as_ref()?.get(id)
    }
}

/// Under `bucket`'s write lock (no apply runs), the kv tablet's applied offset and a
/// point-in-time iterator of its rows; the lock is released on return, before a row is read.
/// `None` when the state has not moved since `latest` (or nothing was ever applied). Blocking.
pub(crate) fn point_in_time(
    bucket: &Bucket,
    kv: &storage::KvTablet,
    latest: Option<&KvSnapshot>,
) -> storage::Result<Option<(i64, storage::KvRows)>> {
    let _write_lock = bucket.write_lock.blocking_lock();
    let applied = kv.applied_offset()?;
    let unchanged = match latest {
        Some(latest) => latest.log_offset >= applied,
        None => applied == 0,
    };
    Ok((!unchanged).then(|| (applied, kv.point_in_time_iter())))
}

#[cfg(test)]
mod tests;
