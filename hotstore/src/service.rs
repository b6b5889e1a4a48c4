//! The server's state, which every request handler reads: configuration, catalog, tablets,
//! the lake-offset registry and writer ids, and what the background tasks keep between runs
//! (`task_state`, `kv_snapshot_leases`). It imports neither a handler nor a task: those
//! sit above it and read it.
//!
//! One silt process plays both Fluss roles: it advertises itself as the coordinator and as the
//! only tablet server (node 0), and it leads every bucket.

pub(crate) mod kv_snapshot_leases;
mod task_state;

pub use task_state::{AutoPartitionRun, BucketRetention};
pub(crate) use task_state::{LakeBounds, TieredOffsets};

use crate::catalog::{Catalog, PartitionChange, TableEntry, TablePartition};
use crate::config::ServerConfig;
use crate::lake_registry::{LakeRegistry, PartitionLiveness};
use crate::protocol::messages::PbServerNode;
use crate::protocol::{ApiError, code};
use crate::tablets::{TableRuntime, Tablets};
use kv_snapshot_leases::KvSnapshots;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// The node id silt advertises for both its coordinator and its tablet-server role.
pub const NODE_ID: i32 = 0;

pub struct Service {
    pub(crate) config: ServerConfig,
    pub(crate) catalog: Catalog,
    pub(crate) tablets: Tablets,
    pub(crate) lake: LakeRegistry,
    /// Kv snapshot writing permits and leases (see `kv_snapshots`).
    pub(crate) kv_snapshots: KvSnapshots,
    advertised_host: String,
    port: u16,
    next_writer_id: AtomicI64,
    /// What the last retention run left of each bucket (see `retention`).
    pub(crate) retention: std::sync::Mutex<Vec<BucketRetention>>,
    /// The lake's tiered offsets as previous retention and auto-partitioning runs saw them.
    pub(crate) retention_lake_bounds: std::sync::Mutex<LakeBounds>,
    /// What the last auto-partitioning run did (see `auto_partitions`).
    pub(crate) auto_partitioning: std::sync::Mutex<Vec<AutoPartitionRun>>,
    /// Expired partitions auto-partitioning already warned it keeps for tiering, by id.
    pub(crate) auto_partition_held_warned: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// Held by CreatePartition and DropPartition across their catalog change and their tablets
    /// change, so a drop never runs between a create's two steps (and leaves tablets open for
    /// a partition the catalog no longer has).
    pub(crate) partition_ddl: tokio::sync::Mutex<()>,
    /// The open ScanKv sessions.
    pub(crate) kv_scanners: crate::kv_scanners::KvScanners,
}

impl Service {
    pub async fn open(
        config: ServerConfig,
        advertised_host: String,
        port: u16,
    ) -> crate::error::Result<Service> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| crate::error::Error::Io {
            path: config.data_dir.clone(),
            source,
        })?;
        let catalog = Catalog::open(
            &config.data_dir,
            config.default_bucket_count,
            config.bucket_count_max,
        )?
        .with_partitions_per_table_max(config.partitions_per_table_max)
        .with_buckets_max(config.buckets_max);
        let tablets = Tablets::open(
            config.data_dir.join("tables"),
            &config.data_dir.join("kv-snapshots"),
            config.log,
            config.kv,
        )?;
        for table in catalog.tables() {
            let partitions = catalog.partitions_of(table.id);
            tablets.open_table(table, partitions).await?;
        }
        tablets.remove_orphan_snapshots();
        let kv_snapshots = KvSnapshots::open(
            tablets.snapshot_root(),
            config.kv_snapshot_concurrency_max,
            crate::catalog::now_ms(),
        );
        let lake = LakeRegistry::open(&config.data_dir)?;
        // A new writer id must differ from every id whose state the logs still hold (a reused
        // id would have its sequence 0 answered as a duplicate of the old writer's batch): above
        // the clock-based start of the last run and above every id a log remembers.
        let next_writer_id = AtomicI64::new(
            (crate::catalog::now_ms() * 1000).max(tablets.max_writer_id().map_or(0, |id| id + 1)),
        );
        Ok(Service {
            config,
            catalog,
            tablets,
            lake,
            kv_snapshots,
            advertised_host,
            port,
            next_writer_id,
            retention: std::sync::Mutex::new(Vec::new()),
            retention_lake_bounds: std::sync::Mutex::new(Default::default()),
            auto_partitioning: std::sync::Mutex::new(Vec::new()),
            auto_partition_held_warned: std::sync::Mutex::new(Default::default()),
            partition_ddl: tokio::sync::Mutex::new(()),
            kv_scanners: Default::default(),
        })
    }

    pub async fn close(&self) {
        self.tablets.close_all().await;
    }

    pub(crate) fn server_node(&self) -> PbServerNode {
        PbServerNode {
            node_id: NODE_ID,
            host: self.advertised_host.clone(),
            port: i32::from(self.port),
            listeners: None,
        }
    }

    /// A writer id no writer has had (InitWriter).
    pub(crate) fn next_writer_id(&self) -> i64 {
        self.next_writer_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Drops a dropped table's tablets and lake snapshot.
    pub(crate) async fn drop_table_data(&self, entry: &TableEntry) {
        self.kv_scanners.close_table(entry.id);
        self.tablets.drop_table(entry).await;
        self.lake.remove(entry.id);
    }

    /// CreatePartition's work: the catalog entry first (checked as Fluss checks it), then the
    /// tablets; if they cannot be opened, the entry is dropped again (its id stays used).
    /// `None` when the partition existed and `change.ignore`.
    pub(crate) async fn create_partition(
        &self,
        change: PartitionChange<'_>,
    ) -> Result<Option<TablePartition>, ApiError> {
        let _ddl = self.partition_ddl.lock().await;
        let Some((table, partition)) = self.catalog.create_partition(change)? else {
            return Ok(None);
        };
        if let Err(error) = self.tablets.open_partition(partition.clone()) {
            let _ = self.catalog.drop_partition(PartitionChange {
                database: &table.database,
                table: &table.name,
                spec: change.spec,
                ignore: true,
            });
            self.tablets.drop_partition(table.id, partition.id).await;
            return Err(ApiError::new(
                code::LOG_STORAGE_EXCEPTION,
                format!(
                    "cannot create tablets of partition {} of {}: {error}",
                    partition.name,
                    table.qualified_name()
                ),
            ));
        }
        tracing::info!(table = %table.qualified_name(), partition = %partition.name,
            partition_id = partition.id, "created partition");
        Ok(Some((table, partition)))
    }

    /// DropPartition's work: the catalog entry, then the partition's tablets and files and its
    /// lake offsets. `None` when it did not exist and `change.ignore`.
    pub(crate) async fn drop_partition(
        &self,
        change: PartitionChange<'_>,
    ) -> Result<Option<TablePartition>, ApiError> {
        let _ddl = self.partition_ddl.lock().await;
        let dropped = self.catalog.drop_partition(change)?;
        if let Some((table, partition)) = &dropped {
            self.tablets.drop_partition(table.id, partition.id).await;
            self.lake.forget_partition(table.id, partition.id);
            self.held_partitions_warned().remove(&partition.id);
            tracing::info!(table = %table.qualified_name(), partition = %partition.name,
                partition_id = partition.id, "dropped partition");
        }
        Ok(dropped)
    }

    pub(crate) fn set_lake_snapshot(
        &self,
        table_id: i64,
        snapshot_id: i64,
        bucket_offsets: &[(i32, i64)],
    ) -> crate::error::Result<()> {
        let entry = self.live_table(table_id)?;
        if let Some(&(bucket, _)) = bucket_offsets
            .iter()
            .find(|(b, _)| *b < 0 || *b >= entry.bucket_count)
        {
            return Err(crate::error::Error::Config {
                message: format!(
                    "bucket {bucket} is out of range for {} with {} buckets",
                    entry.qualified_name(),
                    entry.bucket_count
                ),
            });
        }
        self.lake.set(entry.id, snapshot_id, bucket_offsets)
    }

    /// Records tiered offsets of a partitioned table's partitions. A partition id that was
    /// dropped is ignored with a debug log (the tiering committer may report a partition just
    /// dropped); one that is another table's, or was never created, is refused.
    pub(crate) fn set_partitioned_lake_snapshot(
        &self,
        table_id: i64,
        snapshot_id: i64,
        offsets: &[(i64, i32, i64)],
    ) -> crate::error::Result<()> {
        let entry = self.live_table(table_id)?;
        let name = entry.qualified_name();
        if !entry.is_partitioned() {
            return Err(crate::error::Error::Config {
                message: format!(
                    "{name} is not partitioned: its lake offsets name no partition id"
                ),
            });
        }
        if let Some(&(partition, bucket, _)) = offsets
            .iter()
            .find(|(_, b, _)| *b < 0 || *b >= entry.bucket_count)
        {
            return Err(crate::error::Error::Config {
                message: format!(
                    "bucket {bucket} of partition id {partition} is out of range for {name} with \
                     {} buckets per partition",
                    entry.bucket_count
                ),
            });
        }
        let liveness = |partition_id: i64| match self.catalog.partition_owner(partition_id) {
            Ok(Some(owner)) if owner == entry.id => Ok(PartitionLiveness::Live),
            Ok(None) => Ok(PartitionLiveness::Dropped),
            Ok(Some(owner)) => Err(crate::error::Error::Config {
                message: format!(
                    "partition id {partition_id} belongs to table id {owner}, not to {name} (id \
                     {}): record each table's offsets under its own id",
                    entry.id
                ),
            }),
            Err(error) => Err(crate::error::Error::Config {
                message: format!("lake offsets of {name}: {}", error.message),
            }),
        };
        self.lake
            .set_partitioned(entry.id, snapshot_id, offsets, liveness)
    }

    pub(crate) fn lake_snapshot(
        &self,
        database: &str,
        table: &str,
    ) -> crate::error::Result<Option<crate::lake_registry::LakeSnapshot>> {
        let entry = self.lake_table(database, table)?;
        Ok(self.lake.get(entry.id))
    }

    /// The table whose lake offsets the tiering service records or reads.
    fn lake_table(&self, database: &str, table: &str) -> crate::error::Result<Arc<TableEntry>> {
        self.catalog
            .table(database, table)
            .map_err(|error| crate::error::Error::UnknownTable {
                message: error.message,
            })
    }

    /// The table with id `table_id`, if it is not dropped. A drop racing an update may leave
    /// the dropped id's entry in the registry; ids are never reused, so no table reads it.
    fn live_table(&self, table_id: i64) -> crate::error::Result<Arc<TableEntry>> {
        self.tablets
            .get(table_id)
            .map(|runtime| runtime.entry.clone())
            .ok_or_else(|| crate::error::Error::UnknownTable {
                message: format!(
                    "table id {table_id} does not exist (it was dropped, or never created): its lake offsets are not recorded"
                ),
            })
    }

    /// The runtime of a table by id, or UNKNOWN_TABLE_OR_BUCKET (which makes the client
    /// refresh its metadata).
    pub(crate) fn table_runtime(&self, table_id: i64) -> Result<Arc<TableRuntime>, ApiError> {
        self.tablets.get(table_id).ok_or_else(|| {
            ApiError::new(
                code::UNKNOWN_TABLE_OR_BUCKET,
                format!("unknown table id {table_id}"),
            )
        })
    }
}
