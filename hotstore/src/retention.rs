//! Hot retention: the hot store keeps recent data, the lake keeps history.
//!
//! Every `retention_check_interval` the server deletes, per bucket, the whole closed segments
//! whose every batch is older than the table's `table.log.ttl` (Fluss's property and default,
//! 7 days; `-1` keeps the log forever), with two bounds that win over the TTL:
//! - **a table with a lake** (`table.datalake.enabled`, or a lake whose tiering was turned
//!   off: paused, not ended) never loses a segment the lake has not covered: the cut stops at
//!   the bucket's tiered offset in the lake-offset registry (a
//!   partition's bucket at its partition's; 0 when tiering has committed nothing), and the
//!   bucket reports `held_by_tiering`. The offset used
//!   is the one the registry held at least `retention_lake_lag` ago (`silt up` sets the longest
//!   query deadline): a `db.t` query pins a lake version and reads the hot tail from its
//!   offsets, so those must stay readable while it runs;
//! - **a primary-key table** never loses changelog after its bucket's latest kv snapshot
//!   (`kv_snapshots`): the cut stops at that snapshot's log offset (a snapshot is taken first
//!   when the TTL would cut further), and at the log offset of any snapshot a live lease
//!   holds. So a reader of the table in full (Flink's default mode) reads the snapshot, then
//!   the changelog from its log offset: every key once, at its latest image. Nor does it lose
//!   changelog its kv tablet has not durably applied (the changelog is the kv's write-ahead
//!   log): the kv store is persisted after the snapshot, and the cut also stops at the applied
//!   offset.
//!
//! The active segment is never deleted, so a bucket keeps at most TTL × ingest rate plus one
//! segment. After a cut the log start offset moves: ListOffsets(earliest) answers it and a fetch
//! below it gets LOG_OFFSET_OUT_OF_RANGE, as from Fluss. A primary-key table's current state
//! stays in its kv tablet whatever the changelog keeps (lookups are unaffected), and its latest
//! kv snapshot covers what was cut; a reader of a log table's changelog that needs what came
//! before the log start reads it from the lake (`db.t`, which reads the lake up to its tiered
//! offsets and only the hot tail after them).

use std::collections::HashMap;
use std::time::Duration;

use crate::catalog::{TableEntry, table_ttl};
use crate::service::{BucketRetention, LakeBounds, Service, TieredOffsets};
use crate::tablets::Bucket;

fn lake_enabled(entry: &TableEntry) -> bool {
    crate::catalog::is_lake_enabled(entry.descriptor.properties())
}

impl Service {
    /// Applies retention to every bucket of every table (blocking file I/O) and reports each.
    /// `lake_bounds`: the registry's tiered offsets as earlier runs saw them.
    pub(crate) fn apply_retention(
        &self,
        now_ms: i64,
        lake_bounds: &mut LakeBounds,
    ) -> Vec<BucketRetention> {
        let default_ttl = self.config.log_ttl;
        let lag_ms = i64::try_from(self.config.retention_lake_lag_ms).unwrap_or(i64::MAX);
        let previous = lake_bounds.as_of(now_ms.saturating_sub(lag_ms)).cloned();
        lake_bounds.record(now_ms, self.tiered_offsets());
        let mut report = Vec::new();
        for entry in self.catalog.tables() {
            let Some(table) = self.tablets.get(entry.id) else {
                continue;
            };
            let ttl = match table_ttl(&entry, default_ttl) {
                Ok(ttl) => ttl,
                Err(error) => {
                    tracing::warn!(table = %entry.qualified_name(), error = %error.message, "retention skips the table");
                    None
                }
            };
            // A table with a lake keeps it as its history even while its tiering is off
            // (`table.datalake.enabled` turned off): retention holds at the lake's offsets as
            // long as the registry has any, so turning tiering on again resumes where the lake
            // stopped, never past a gap.
            let lake = lake_enabled(&entry) || self.lake.get(entry.id).is_some();
            let partition_names: HashMap<i64, String> = table
                .partitions()
                .iter()
                .map(|p| (p.entry.id, p.entry.name.clone()))
                .collect();
            for bucket in table.all_buckets() {
                let log_start = bucket.log.log_start_offset();
                let tiered = lake.then(|| {
                    let key = (entry.id, bucket.partition_id, bucket.id);
                    let offsets = previous.as_ref();
                    offsets.and_then(|o| o.get(&key)).copied().unwrap_or(0)
                });
                let (mut end, held_by_tiering) = expired_end(&bucket, ttl, now_ms, tiered);
                if bucket.kv.is_some() && end > log_start {
                    end = self.kv_bound(&entry, &bucket, end).unwrap_or(log_start);
                }
                let partition = bucket
                    .partition_id
                    .map(|id| (id, partition_names.get(&id).cloned().unwrap_or_default()));
                let mut retention = truncate_before(&entry, &bucket, end);
                retention.partition = partition;
                retention.held_by_tiering = held_by_tiering;
                report.push(retention);
            }
        }
        report
    }

    /// How far a primary-key bucket's changelog may be cut when the TTL would cut it up to
    /// `end`: no further than its latest kv snapshot's log offset (taking a snapshot first
    /// when that one is below `end`), so the snapshot plus the changelog after it stays the
    /// whole changelog, nor than the log offset of a snapshot a live lease holds; and no further than the kv tablet's applied offset once the kv store
    /// is durable (the changelog is the kv's write-ahead log). The store is persisted after
    /// the snapshot was taken, so its applied offset covers the snapshot's. `None`: keep the
    /// changelog.
    fn kv_bound(&self, entry: &TableEntry, bucket: &Bucket, end: i64) -> Option<i64> {
        let kv = bucket.kv.as_ref()?;
        let covered = self.snapshot_covering(entry.id, bucket, end)?;
        let covered = covered.min(self.leased_floor(entry.id, bucket).unwrap_or(i64::MAX));
        let keeps = |error: &dyn std::fmt::Display| {
            tracing::warn!(table = %entry.qualified_name(), bucket = %bucket.name(), %error, "retention keeps the changelog");
        };
        if let Err(error) = self.tablets.persist_kv() {
            keeps(&error);
            return None;
        }
        match kv.applied_offset() {
            Ok(applied) => Some(end.min(covered).min(applied)),
            Err(error) => {
                keeps(&error);
                None
            }
        }
    }

    /// Every table's tiered offsets in the lake-offset registry now.
    pub(crate) fn tiered_offsets(&self) -> TieredOffsets {
        self.lake
            .all()
            .into_iter()
            .flat_map(|(table_id, snapshot)| {
                snapshot
                    .tiered_offsets()
                    .map(|(partition, bucket, offset)| ((table_id, partition, bucket), offset))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// Where the TTL would cut `bucket`'s log at `now_ms` (its log start without a TTL), held
/// below the lake's `tiered` offset for a lake-enabled table; and whether the lake held it.
fn expired_end(
    bucket: &Bucket,
    ttl: Option<Duration>,
    now_ms: i64,
    tiered: Option<i64>,
) -> (i64, bool) {
    let end = match ttl {
        Some(ttl) => bucket
            .log
            .expired_end(now_ms.saturating_sub(ttl.as_millis() as i64)),
        None => bucket.log.log_start_offset(),
    };
    match tiered {
        Some(tiered) if tiered < end => (tiered, true),
        _ => (end, false),
    }
}

/// Deletes the segments of `bucket` wholly below `end`, and reports the bucket after it
/// (without its partition name or whether tiering held it).
fn truncate_before(entry: &TableEntry, bucket: &Bucket, end: i64) -> BucketRetention {
    let (bytes_before, segments_before) = bucket.log.disk_usage();
    if end > bucket.log.log_start_offset()
        && let Err(error) = bucket.log.truncate_before(end)
    {
        tracing::warn!(table = %entry.qualified_name(), bucket = %bucket.name(), %error, "retention could not delete a segment");
    }
    let (hot_bytes, segments) = bucket.log.disk_usage();
    let deleted = segments_before - segments;
    if deleted > 0 {
        tracing::info!(table = %entry.qualified_name(), bucket = %bucket.name(),
            log_start_offset = bucket.log.log_start_offset(), segments_deleted = deleted,
            "hot retention");
    }
    BucketRetention {
        table: entry.qualified_name(),
        table_id: entry.id,
        partition: None,
        bucket: bucket.id,
        log_start_offset: bucket.log.log_start_offset(),
        high_watermark: bucket.log.high_watermark(),
        hot_bytes,
        segments,
        held_by_tiering: false,
        segments_deleted: deleted,
        bytes_deleted: bytes_before.saturating_sub(hot_bytes),
    }
}
