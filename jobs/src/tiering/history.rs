//! A bounded history of each tiered table's status, for the console's charts of lag, freshness
//! and commit time over the last hour (`GET /v1/tables/{db}.{table}/history`).
//!
//! The service samples every table once per [`HISTORY_INTERVAL`] (inside its discovery loop, so
//! within one poll interval of it) and keeps the last [`HISTORY_SAMPLES`] samples of each table
//! in memory, by table id: a table dropped and created again starts a new history, and a table
//! the service no longer tiers loses its own at the next sample. What it costs: a sample is 56
//! bytes, and a table's hour is allocated at its first sample: 19.7 KiB per table (9.6 MiB for
//! 500 tables); each round reads the
//! status once (one ListOffsets per table, as `GET /v1/tables` does). Nothing is written to
//! disk: a restart starts the history over.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use serde::Serialize;

/// How often each table is sampled.
pub const HISTORY_INTERVAL: Duration = Duration::from_secs(10);

/// Samples kept per table: one hour at [`HISTORY_INTERVAL`].
pub const HISTORY_SAMPLES: usize = 360;

/// One table's status at `t_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// When it was taken, ms since the epoch.
    pub t_ms: i64,
    /// Offsets the lake lacks, summed over buckets (as `lag_offsets` of `GET /v1/tables`).
    pub lag_offsets: i64,
    /// `lag_seconds` of `GET /v1/tables`, in ms: 0 when the lake covers every high watermark.
    pub lag_ms: i64,
    /// How old the lake's newest commit was (null before this process saw one).
    pub freshness_ms: Option<i64>,
    /// The longest lake commit that completed since the previous sample (null: none did).
    pub commit_ms: Option<u64>,
}

/// The samples of every tiered table, by table id.
#[derive(Debug, Default)]
pub(super) struct History {
    by_table: HashMap<i64, VecDeque<Sample>>,
}

impl History {
    /// Appends `sample` to the table's history, dropping its oldest past [`HISTORY_SAMPLES`].
    pub(super) fn record(&mut self, table_id: i64, sample: Sample) {
        let samples = (self.by_table.entry(table_id))
            .or_insert_with(|| VecDeque::with_capacity(HISTORY_SAMPLES));
        if samples.len() == HISTORY_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Forgets the tables not in `live` (dropped, or no longer tiered here).
    pub(super) fn retain(&mut self, live: &BTreeSet<i64>) {
        self.by_table.retain(|id, _| live.contains(id));
    }

    /// The table's samples taken after `since_ms`, oldest first (empty when none).
    pub(super) fn since(&self, table_id: i64, since_ms: i64) -> Vec<Sample> {
        self.by_table
            .get(&table_id)
            .map(|samples| {
                samples
                    .iter()
                    .filter(|s| s.t_ms > since_ms)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64) -> Sample {
        Sample {
            t_ms,
            lag_offsets: t_ms,
            lag_ms: 0,
            freshness_ms: None,
            commit_ms: None,
        }
    }

    #[test]
    fn a_table_keeps_its_last_hour_and_a_dropped_one_nothing() {
        let mut history = History::default();
        for t in 0..(HISTORY_SAMPLES as i64 + 5) {
            history.record(1, sample(t));
        }
        history.record(2, sample(7));
        let kept = history.since(1, -1);
        assert_eq!(kept.len(), HISTORY_SAMPLES);
        assert_eq!(kept.first().unwrap().t_ms, 5, "the oldest samples go first");
        assert_eq!(history.since(1, HISTORY_SAMPLES as i64 + 2).len(), 2);
        history.retain(&BTreeSet::from([2]));
        assert!(history.since(1, -1).is_empty());
        assert_eq!(history.since(2, -1), vec![sample(7)]);
    }

    #[test]
    fn a_sample_is_as_small_as_the_module_says() {
        assert_eq!(std::mem::size_of::<Sample>(), 56);
    }
}
