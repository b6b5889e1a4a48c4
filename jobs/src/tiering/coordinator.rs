//! The coordinator seam: which of the lake-enabled tables this process tiers, and where a
//! committed lake snapshot is recorded. Shaped after a scheduler that hands work to workers:
//! today's one process ([`InProcess`]) claims every table and records snapshots in the
//! in-process hot store's lake-offset registry; a coordinator over a Fluss cluster would take
//! table assignments from the cluster's coordinator (heartbeats with leases) and commit lake
//! snapshots to it.

use std::sync::Arc;

use anyhow::Result;
use silt_connectors::changelog::BucketKey;

/// Decides what one tiering process does and records what it did.
pub trait Coordinator: Send + Sync {
    /// Whether this process tiers table `table_id` (`database.table`) now. Asked at every
    /// discovery pass for every lake-enabled table; a table no longer claimed keeps its running
    /// job until its table goes away (a coordinator that moves tables takes them back by
    /// lease, not by this answer).
    fn tiers(&self, database: &str, table: &str, table_id: i64) -> bool;

    /// Records a committed lake snapshot of table `table_id`: its version and, per bucket (of
    /// each partition), the end offset tiered. Named by table id, never by name: after a drop
    /// and a create under the same name, a late commit of the dropped table's job must not
    /// raise the new table's lake offsets. An error fails the job, which replays the commit.
    fn record_lake_snapshot(
        &self,
        table_id: i64,
        snapshot: i64,
        offsets: &[(BucketKey, i64)],
    ) -> Result<()>;
}

/// Today's coordinator: this process tiers every lake-enabled table and records snapshots
/// through `registry` (the in-process hot store's registry), or nowhere.
pub struct InProcess {
    pub registry: Option<RegistryUpdate>,
}

impl Coordinator for InProcess {
    fn tiers(&self, _database: &str, _table: &str, _table_id: i64) -> bool {
        true
    }

    fn record_lake_snapshot(
        &self,
        table_id: i64,
        snapshot: i64,
        offsets: &[(BucketKey, i64)],
    ) -> Result<()> {
        match &self.registry {
            Some(registry) => registry(table_id, snapshot, offsets),
            None => Ok(()),
        }
    }
}

/// Records a lake snapshot in the hot store's registry: `(table id, snapshot id, per-bucket
/// tiered end offsets)` (a partitioned table's buckets are its partitions'). The table is named
/// by the id its tiering job was started for, never by its name: after a drop and a create under
/// the same name, a late commit of the dropped table's job must not raise the new table's lake
/// offsets (its hot retention would cut what no lake holds).
pub type RegistryUpdate = Arc<dyn Fn(i64, i64, &[(BucketKey, i64)]) -> Result<()> + Send + Sync>;

/// The lake-offset registry of an in-process hot store as a [`RegistryUpdate`]: an
/// unpartitioned table's buckets, or a partitioned table's partitions' buckets.
pub fn hotstore_registry(server: Arc<silt_hotstore::ServerHandle>) -> RegistryUpdate {
    Arc::new(
        move |table_id: i64, snapshot: i64, offsets: &[(BucketKey, i64)]| {
            let offsets: Vec<(Option<i64>, i32, i64)> = offsets
                .iter()
                .map(|(k, o)| (k.partition, k.bucket, *o))
                .collect();
            Ok(server.set_lake_snapshot(table_id, snapshot, &offsets)?)
        },
    )
}
