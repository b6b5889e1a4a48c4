//! Per-operator counters, shared by the subtasks of a vertex and kept across restarts, and
//! the snapshot struct that jobs/ exports.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Live counters of one vertex (all its subtasks add into them).
#[derive(Debug, Default)]
pub struct VertexCounters {
    pub(crate) records_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) records_out: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) backpressured_ns: AtomicU64,
    pub(crate) last_checkpoint_bytes: AtomicU64,
    pub(crate) last_snapshot_ns: AtomicU64,
}

impl VertexCounters {
    pub(crate) fn record_in(&self, rows: usize, bytes: usize) {
        self.records_in.fetch_add(rows as u64, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub(crate) fn record_out(&self, rows: usize, bytes: usize) {
        self.records_out.fetch_add(rows as u64, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub(crate) fn backpressured(&self, waited: Duration) {
        self.backpressured_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A point-in-time copy of one operator's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorMetrics {
    pub name: String,
    pub parallelism: u32,
    pub records_in: u64,
    pub bytes_in: u64,
    pub records_out: u64,
    pub bytes_out: u64,
    /// Time subtasks spent waiting for room in a full output channel.
    pub backpressured_ms: u64,
    /// State bytes of all subtasks at the latest completed snapshot.
    pub last_checkpoint_bytes: u64,
    /// Time the slowest subtask took to snapshot at the latest checkpoint.
    pub last_snapshot_ms: u64,
}

/// One completed checkpoint, as the job's history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    pub checkpoint_id: u64,
    /// From trigger to durable metadata.
    pub duration_ms: u64,
    pub size_bytes: u64,
    pub completed_at_ms: i64,
    pub is_final: bool,
}

/// Everything the engine knows about a job's progress.
#[derive(Debug, Clone)]
pub struct JobMetrics {
    pub operators: Vec<OperatorMetrics>,
    /// The most recent completed checkpoints (at most `CHECKPOINT_HISTORY_MAX`), most recent
    /// last.
    pub checkpoints: Vec<CheckpointStats>,
    /// Every checkpoint completed since the job started.
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub restarts: u32,
    /// Bytes buffered in the job's channels now and at most.
    pub buffered_bytes: u64,
    pub buffered_bytes_peak: u64,
}

pub(crate) fn snapshot_vertex(
    name: &str,
    parallelism: u32,
    c: &Arc<VertexCounters>,
) -> OperatorMetrics {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    OperatorMetrics {
        name: name.to_string(),
        parallelism,
        records_in: get(&c.records_in),
        bytes_in: get(&c.bytes_in),
        records_out: get(&c.records_out),
        bytes_out: get(&c.bytes_out),
        backpressured_ms: get(&c.backpressured_ns) / 1_000_000,
        last_checkpoint_bytes: get(&c.last_checkpoint_bytes),
        last_snapshot_ms: get(&c.last_snapshot_ns) / 1_000_000,
    }
}
