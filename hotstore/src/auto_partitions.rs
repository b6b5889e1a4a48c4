//! Auto-partitioning on schedule (what Fluss defines is in `catalog::auto_partition`): every
//! `auto_partition_check_interval_ms`, and for a new table right after CreateTable, each
//! auto-partitioned table first loses its expired partitions, then gets the partitions to
//! pre-create, as Fluss's `AutoPartitionManager` does. A partition that cannot be created
//! (`partitions_per_table_max` reached) is skipped with a warning, and the run lists it.
//!
//! **Invariant** (silt's rule on top of Fluss): a lake-enabled table
//! (`table.datalake.enabled`) loses an expired partition only once the lake-offset registry
//! covers each of its buckets up to the bucket's log end offset: the lake then holds every row
//! the partition has. Until then the partition is kept, the run lists it in
//! `held_by_tiering`, and a warning is logged once per partition. The offsets used are those a
//! run saw at least `retention_lake_lag_ms` ago, as hot retention uses them, so a query that
//! pinned an older lake version still finds the partition's hot tail. A write that lands in an
//! expired partition between that check and the drop is lost with it, as with a DropPartition
//! racing a write.
//!
//! Unlike Fluss, a day partition is created when the day starts rather than at a random
//! minute of the previous day: Fluss spreads many tables' creations over its cluster's
//! coordination store, silt is one process.

use crate::catalog::{AutoPartitionStrategy, PartitionChange, PartitionEntry, TableEntry};
use crate::protocol::code;
use crate::service::{AutoPartitionRun, Service, TieredOffsets};

impl Service {
    /// One run over every auto-partitioned table at `now_ms`.
    pub(crate) async fn auto_partition(&self, now_ms: i64) -> Vec<AutoPartitionRun> {
        let tiered = self.tiered_offsets_as_of_lag(now_ms);
        let mut report = Vec::new();
        for entry in self.catalog.tables() {
            if let Some(run) = self.auto_partition_table(&entry, now_ms, &tiered).await {
                report.push(run);
            }
        }
        report
    }

    /// The run CreateTable makes for a new table: its pre-created partitions.
    pub(crate) async fn auto_partition_new_table(&self, entry: &TableEntry) {
        let now_ms = crate::catalog::now_ms();
        if let Some(run) = self
            .auto_partition_table(entry, now_ms, &TieredOffsets::new())
            .await
            && !run.errors.is_empty()
        {
            tracing::warn!(table = %run.table, errors = ?run.errors,
                "auto partitioning could not pre-create every partition of a new table");
        }
    }

    /// One table's run: `None` for a table without auto-partitioning.
    async fn auto_partition_table(
        &self,
        entry: &TableEntry,
        now_ms: i64,
        tiered: &TieredOffsets,
    ) -> Option<AutoPartitionRun> {
        let table = entry.qualified_name();
        let strategy = match AutoPartitionStrategy::of(&table, &entry.descriptor) {
            Ok(strategy) => strategy?,
            Err(error) => {
                tracing::warn!(%table, error = %error.message, "auto partitioning skips the table");
                return None;
            }
        };
        let mut run = AutoPartitionRun {
            table,
            table_id: entry.id,
            ..AutoPartitionRun::default()
        };
        self.drop_expired(entry, &strategy, now_ms, tiered, &mut run)
            .await;
        self.precreate(entry, &strategy, now_ms, &mut run).await;
        Some(run)
    }

    async fn drop_expired(
        &self,
        entry: &TableEntry,
        strategy: &AutoPartitionStrategy,
        now_ms: i64,
        tiered: &TieredOffsets,
        run: &mut AutoPartitionRun,
    ) {
        let kept_from = match strategy.kept_from(now_ms) {
            Ok(Some(kept_from)) => kept_from,
            Ok(None) => return,
            Err(error) => {
                run.errors
                    .push(format!("cannot compute the retention bound: {error}"));
                return;
            }
        };
        let expired = self
            .catalog
            .partitions_of(entry.id)
            .into_iter()
            .filter(|p| strategy.time_value(&p.name) < kept_from.as_str());
        for partition in expired {
            if crate::catalog::is_lake_enabled(entry.descriptor.properties())
                && !self.covered_by_lake(entry, &partition, tiered)
            {
                if self.held_partitions_warned().insert(partition.id) {
                    tracing::warn!(table = %run.table, partition = %partition.name,
                        partition_id = partition.id,
                        "auto partitioning keeps an expired partition: the lake does not hold \
                         all of it yet (it is dropped once tiering has covered every bucket)");
                }
                run.held_by_tiering
                    .push((partition.id, partition.name.clone()));
                continue;
            }
            let spec = spec_of(entry, &partition);
            match self.drop_partition(auto_change(entry, &spec)).await {
                Ok(_) => run.dropped.push(partition.name),
                Err(error) => run.errors.push(format!(
                    "cannot drop expired partition {}: {}",
                    partition.name, error.message
                )),
            }
        }
    }

    async fn precreate(
        &self,
        entry: &TableEntry,
        strategy: &AutoPartitionStrategy,
        now_ms: i64,
        run: &mut AutoPartitionRun,
    ) {
        let names = match strategy.to_precreate(now_ms) {
            Ok(names) => names,
            Err(error) => {
                run.errors
                    .push(format!("cannot name the partitions to pre-create: {error}"));
                return;
            }
        };
        let keys = entry.descriptor.partition_keys();
        let existing = self.catalog.partitions_of(entry.id);
        for name in names {
            if existing.iter().any(|p| p.name == name) {
                continue;
            }
            // Only a table with one partition key pre-creates, so the name is its value.
            let spec = vec![(keys[0].clone(), name.clone())];
            match self.create_partition(auto_change(entry, &spec)).await {
                Ok(Some(_)) => run.created.push(name),
                Ok(None) => {}
                Err(error) => {
                    if error.code == code::PARTITION_MAX_NUM {
                        tracing::warn!(table = %run.table, partition = %name, error = %error.message,
                            "auto partitioning skips a partition");
                    }
                    run.errors.push(format!(
                        "cannot pre-create partition {name}: {}",
                        error.message
                    ));
                }
            }
        }
    }

    /// Whether the lake holds every row of the partition: each bucket's tiered offset reaches
    /// its log end offset (an empty bucket needs none). A partition without open tablets is
    /// not known to be covered.
    fn covered_by_lake(
        &self,
        entry: &TableEntry,
        partition: &PartitionEntry,
        tiered: &TieredOffsets,
    ) -> bool {
        let Some(runtime) = self
            .tablets
            .get(entry.id)
            .and_then(|t| t.partition(partition.id))
        else {
            return false;
        };
        runtime.buckets.iter().all(|bucket| {
            let key = (entry.id, Some(partition.id), bucket.id);
            tiered.get(&key).copied().unwrap_or(0) >= bucket.log.log_end_offset()
        })
    }

    /// The registry's offsets as a run saw them at least `retention_lake_lag_ms` ago (the
    /// lake bounds hot retention keeps), recording today's for later runs.
    fn tiered_offsets_as_of_lag(&self, now_ms: i64) -> TieredOffsets {
        let lag_ms = i64::try_from(self.config.retention_lake_lag_ms).unwrap_or(i64::MAX);
        let mut bounds = self
            .retention_lake_bounds
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let previous = bounds
            .as_of(now_ms.saturating_sub(lag_ms))
            .cloned()
            .unwrap_or_default();
        bounds.record(now_ms, self.tiered_offsets());
        previous
    }

    pub(crate) fn held_partitions_warned(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<i64>> {
        self.auto_partition_held_warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// The full spec of a partition: each partition key with its value.
fn spec_of(entry: &TableEntry, partition: &PartitionEntry) -> Vec<(String, String)> {
    entry
        .descriptor
        .partition_keys()
        .iter()
        .zip(partition.values())
        .map(|(key, value)| (key.clone(), value.to_string()))
        .collect()
}

/// A change of `entry`'s partition `spec` that the auto-partitioning makes: one that exists
/// already (a create) or is gone already (a drop) is no error.
fn auto_change<'a>(entry: &'a TableEntry, spec: &'a [(String, String)]) -> PartitionChange<'a> {
    PartitionChange {
        database: &entry.database,
        table: &entry.name,
        spec,
        ignore: true,
    }
}
