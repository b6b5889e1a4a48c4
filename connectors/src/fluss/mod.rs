//! The Fluss source: reads a table's changelog through the official fluss-rs client, so the
//! same code reads silt's hotstore and a real Apache Fluss cluster.
//!
//! Contract (what makes tiering exactly-once):
//! - Subtask `i` of `n` owns the buckets `b` with `b % n == i`; of a partitioned table, bucket
//!   `b` of partition id `p` when `(p + b) % n == i`. A streaming read lists the partitions
//!   every `PARTITION_DISCOVERY_INTERVAL`, reads a new one from its earliest offset and
//!   releases a dropped one's buckets. Partition columns are ordinary columns of the rows.
//! - State is the next offset to read per owned bucket (per partition and bucket), taken at
//!   the barrier: exactly the records emitted before the barrier are behind it. On restore a
//!   subtask takes the offsets of the buckets it now owns from every subtask's state, so the
//!   source can be rescaled; a partition the checkpoint does not name is read from its start.
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
    EndPosition, FlussCredentials, FlussSource, FlussSourceConfig, LOG_GAP, LogGapHook,
    POLL_RECORDS_MAX, ResumeFloor, StartPosition, TableShape, connect, connect_with,
    list_bucket_offsets, list_shaped_offsets, log_start_moved, table_arrow_schema,
};
pub use union::LakeStart;

/// The Fluss table property that turns tiering on (set at CreateTable or AlterTable).
pub const DATALAKE_ENABLED: &str = "table.datalake.enabled";
/// The custom property silt's hot store shows [`DATALAKE_ENABLED`] under, so that Fluss
/// clients (Flink's connector) do not plan a union read of a Delta lake no Fluss plugin reads.
pub const DATALAKE_ENABLED_SHOWN: &str = "silt.datalake.enabled";

/// Whether a table is lake-enabled, as silt's hot store shows it ([`DATALAKE_ENABLED_SHOWN`])
/// or a Fluss cluster does ([`DATALAKE_ENABLED`]).
pub fn is_lake_enabled(info: &::fluss::metadata::TableInfo) -> bool {
    let is_true = |v: Option<&String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
    is_true(info.get_properties().get(DATALAKE_ENABLED))
        || is_true(info.get_custom_properties().get(DATALAKE_ENABLED_SHOWN))
}
