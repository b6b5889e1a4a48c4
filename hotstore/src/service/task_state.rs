//! What the background tasks keep in the [`Service`](super::Service) between runs, and report:
//! each task's last report (hot retention's [`BucketRetention`], auto-partitioning's
//! [`AutoPartitionRun`]) and the lake's tiered offsets as earlier runs saw them
//! ([`LakeBounds`]), which retention and auto-partitioning both go by. The tasks themselves
//! (`retention`, `auto_partitions`) sit above the service; their state sits here, below it.

use std::collections::HashMap;

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

/// What one auto-partitioning run did to one auto-partitioned table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoPartitionRun {
    pub table: String,
    pub table_id: i64,
    /// Partitions this run created, by name.
    pub created: Vec<String>,
    /// Expired partitions this run dropped, by name.
    pub dropped: Vec<String>,
    /// Expired partitions kept because the lake does not cover them yet: `(id, name)`.
    pub held_by_tiering: Vec<(i64, String)>,
    /// What this run could not do, each naming the partition and the reason.
    pub errors: Vec<String>,
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
}
