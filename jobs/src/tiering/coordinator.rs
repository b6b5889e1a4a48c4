//! The coordinator seam: which of the lake-enabled tables this process tiers, and where a
//! committed lake snapshot is recorded. Shaped after a scheduler that hands work to workers:
//! one process alone ([`InProcess`]) tiers every table and records snapshots in the in-process
//! hot store's lake-offset registry; several workers over one hot tier ([`super::Leased`]) each
//! tier the tables they hold a lease on, the leases kept in the lake's object store.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use silt_connectors::changelog::BucketKey;

/// A lake-enabled table a discovery pass saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub database: String,
    pub table: String,
    pub table_id: i64,
}

/// Decides what one tiering process does and records what it did.
#[async_trait]
pub trait Coordinator: Send + Sync {
    /// The table ids of `tables` (every lake-enabled table of this discovery pass) that this
    /// process tiers now. A table it tiered and no longer gets has its job stopped here (another
    /// worker has it). An error keeps every job as it is until the next pass. By default, the
    /// tables [`Coordinator::tiers`] says.
    async fn assign(&self, tables: &[Candidate]) -> Result<BTreeSet<i64>> {
        Ok(tables
            .iter()
            .filter(|t| self.tiers(&t.database, &t.table, t.table_id))
            .map(|t| t.table_id)
            .collect())
    }

    /// Whether this process tiers table `table_id` (`database.table`), for a coordinator that
    /// decides table by table (see [`Coordinator::assign`]); by default every table.
    fn tiers(&self, _database: &str, _table: &str, _table_id: i64) -> bool {
        true
    }

    /// Gives this process's tables back at shutdown, so other workers take them at once.
    async fn release_all(&self) {}

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
    fn record_lake_snapshot(
        &self,
        table_id: i64,
        snapshot: i64,
        offsets: &[(BucketKey, i64)],
    ) -> Result<()> {
        record_in(self.registry.as_ref(), table_id, snapshot, offsets)
    }
}

/// Records a lake snapshot through `registry`, when there is one.
pub(super) fn record_in(
    registry: Option<&RegistryUpdate>,
    table_id: i64,
    snapshot: i64,
    offsets: &[(BucketKey, i64)],
) -> Result<()> {
    registry.map_or(Ok(()), |registry| registry(table_id, snapshot, offsets))
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
