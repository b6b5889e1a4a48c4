//! The Fluss source: reads a table's changelog through the official fluss-rs client, so the
//! same code reads silt's hotstore and a real Apache Fluss cluster.
//!
//! Contract (what makes tiering exactly-once):
//! - Subtask `i` of `n` owns the buckets `b` with `b % n == i`.
//! - State is the next offset to read per owned bucket, taken at the barrier: exactly the
//!   records emitted before the barrier are behind it. On restore a subtask takes the offsets of
//!   the buckets it now owns from every subtask's state, so the source can be rescaled.
//! - With no checkpoint, reading starts at `StartPosition` (for tiering: the lake's txn offsets,
//!   so a redeployed job never re-tiers what the lake has).
//! - The server serves committed data only (up to the high watermark), so nothing read can be
//!   lost in the hot tier later.
//!
//! Rows are emitted as Arrow batches: the table's columns, then `__bucket`, `__offset`,
//! `__timestamp`, `__change_type` (see [`crate::changelog`]).

mod sink;
mod source;
mod union;

pub use sink::{FlussSink, FlussSinkConfig, FlussSinkMode};
pub use source::{
    EndPosition, FlussCredentials, FlussSource, FlussSourceConfig, POLL_RECORDS_MAX, StartPosition,
    connect, connect_with, table_arrow_schema,
};
pub use union::LakeStart;
