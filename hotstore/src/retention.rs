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

use crate::catalog::TableEntry;
use crate::protocol::{ApiError, code};
use crate::service::Service;
use crate::tablets::Bucket;

/// Fluss's table property for the log's time to live.
pub const LOG_TTL: &str = "table.log.ttl";
/// Fluss's default `table.log.ttl`.
pub const LOG_TTL_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a Fluss duration as Fluss's configuration does: a number with an optional unit (`ms`,
/// `s`, `min`, `h`, `d` and their long forms), a bare number being milliseconds. A negative
/// number means no TTL (`None`).
pub fn parse_ttl(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim().to_ascii_lowercase();
    if t.starts_with('-') {
        return Ok(None);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 7 d, 2 h, 30 min, -1 for none)"))?;
    let unit_ms: u64 = match unit.trim() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => {
            return Err(format!(
                "{text:?} has an unknown unit {other:?} (use ms, s, min, h or d)"
            ));
        }
    };
    value
        .checked_mul(unit_ms)
        .map(|ms| Some(Duration::from_millis(ms)))
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// The TTL of a table: its `table.log.ttl`, else the server's default.
pub(crate) fn table_ttl(
    entry: &TableEntry,
    default: Option<Duration>,
) -> Result<Option<Duration>, ApiError> {
    match entry.descriptor.properties().get(LOG_TTL) {
        None => Ok(default),
        Some(text) => parse_ttl(text).map_err(|reason| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!("{LOG_TTL} of {}: {reason}", entry.qualified_name()),
            )
        }),
    }
}

pub(crate) fn lake_enabled(entry: &TableEntry) -> bool {
    crate::catalog::is_lake_enabled(entry.descriptor.properties())
}

/// What retention left of one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketRetention {
    pub table: String,
    pub table_id: i64,
    /// The partition of a partitioned table's bucket: its id and name.
    pub partition: Option<(i64, String)>,
    pub bucket: i32,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub hot_bytes: u64,
    pub segments: usize,
    /// The TTL would delete more, but the lake has not covered it yet.
    pub held_by_tiering: bool,
    /// Segments and bytes this run deleted.
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
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

/// A bucket as the lake-offset registry names it: (table id, partition id, bucket).
pub(crate) type TieredBucket = (i64, Option<i64>, i32);
/// The offset up to which the lake holds each bucket (exclusive); an absent bucket holds none.
pub(crate) type TieredOffsets = HashMap<TieredBucket, i64>;

/// The lake's tiered offsets as retention runs saw them, kept as long as a lag may ask for
/// them.
#[derive(Debug, Default)]
pub(crate) struct LakeBounds {
    seen: std::collections::VecDeque<(i64, TieredOffsets)>,
}

impl LakeBounds {
    /// The newest offsets seen at or before `at_ms`; older ones are dropped.
    pub(crate) fn as_of(&mut self, at_ms: i64) -> Option<&TieredOffsets> {
        let usable = self.seen.iter().rposition(|(seen, _)| *seen <= at_ms)?;
        self.seen.drain(..usable);
        self.seen.front().map(|(_, bounds)| bounds)
    }

    pub(crate) fn record(&mut self, at_ms: i64, bounds: TieredOffsets) {
        self.seen.push_back((at_ms, bounds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lake_bounds_answer_what_was_seen_a_lag_ago_and_forget_older() {
        let mut bounds = LakeBounds::default();
        let at = |offset: i64| HashMap::from([((7, Some(2), 0), offset)]);
        assert_eq!(bounds.as_of(1_000), None);
        for (t, offset) in [(0, 10), (100, 20), (200, 30), (300, 40)] {
            bounds.record(t, at(offset));
        }
        assert_eq!(bounds.as_of(150), Some(&at(20)), "the newest seen by then");
        assert_eq!(bounds.as_of(50), None, "older entries are gone once passed");
        assert_eq!(bounds.as_of(10_000), Some(&at(40)));
        assert_eq!(bounds.seen.len(), 1);
    }

    #[test]
    fn ttls_parse_as_fluss_reads_them() {
        for (text, ms) in [
            ("7 d", 7 * 86_400_000),
            ("2min", 120_000),
            ("90 s", 90_000),
            ("1h", 3_600_000),
            ("1500", 1500),
            ("250 ms", 250),
        ] {
            assert_eq!(
                parse_ttl(text),
                Ok(Some(Duration::from_millis(ms))),
                "{text}"
            );
        }
        assert_eq!(parse_ttl("-1"), Ok(None));
        assert!(parse_ttl("soon").unwrap_err().contains("not a duration"));
        assert!(parse_ttl("3 weeks").unwrap_err().contains("unknown unit"));
    }
}
