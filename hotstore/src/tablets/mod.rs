//! The runtime of every table: per bucket a log tablet (which also keeps the writer
//! idempotence state of log and kv writes) and, for a primary-key table, a kv tablet. A
//! partitioned table has no buckets of its own: each of its partitions has the table's bucket
//! count of buckets, on disk under `table-<id>/partition-<partition id>/`, and a request names
//! one by its partition id and bucket id (Fluss's `TableBucket`).
//!
//! A bucket's writes are serialized by its `write_lock`: the idempotence check, the append and
//! (for a PK table) the read-modify-write of the kv tablet happen under it, so the changelog
//! order is the kv apply order.

pub(crate) mod auto_increment;
pub(crate) mod changelog;
pub(crate) mod recovery;
pub(crate) mod rows;

use crate::catalog::{PartitionEntry, TableEntry};
use crate::protocol::{ApiError, code};
use crate::storage::{self, KvStore, LogConfig};
use arrow::datatypes::SchemaRef;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub use storage::{AppendInfo, KvTablet, LogTablet};

/// Set once storage has failed in a way only a new process recovers from: a log tablet after a
/// failed fsync or an unrepairable write (it refuses appends until recovery runs at open), or
/// the kv store after fjall poisoned its database (a failed journal write, e.g. a full disk:
/// every later kv write fails). Requests keep being answered with storage errors; the owner of
/// the server ([`crate::ServerHandle::storage_failed`]) stops the process so that a restart
/// runs recovery, which rebuilds the kv state from the changelog.
#[derive(Clone)]
pub struct StorageFailure(Arc<tokio::sync::watch::Sender<Option<String>>>);

impl StorageFailure {
    fn new() -> Self {
        StorageFailure(Arc::new(tokio::sync::watch::Sender::new(None)))
    }

    /// Records the first failure; later ones are already covered by it.
    fn raise(&self, reason: String) {
        self.0.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                tracing::error!(%reason, "hot store storage failed; the process must restart to recover");
                *current = Some(reason.clone());
            }
            first
        });
    }

    /// Resolves with the reason once storage has failed.
    pub async fn wait(&self) -> String {
        let mut rx = self.0.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            // The sender lives as long as `self`: not reached.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Whether `error` leaves storage unable to continue in this process (see [`StorageFailure`]).
fn is_fatal(error: &storage::Error) -> bool {
    matches!(
        error,
        storage::Error::TabletFailed { .. }
            | storage::Error::Kv {
                source: fjall::Error::Poisoned,
                ..
            }
    )
}

/// Maps a storage error to the Fluss error code a client acts on.
pub fn storage_error(context: &str, error: storage::Error) -> ApiError {
    let code = match &error {
        storage::Error::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE,
        storage::Error::Batch(_) | storage::Error::EmptyAppend => code::CORRUPT_RECORD,
        storage::Error::OffsetOutOfRange { .. } => code::LOG_OFFSET_OUT_OF_RANGE,
        storage::Error::KeyTooLarge { .. } => code::RECORD_TOO_LARGE,
        storage::Error::Kv { .. }
        | storage::Error::CorruptKv { .. }
        | storage::Error::AppliedOffsetRegressed { .. } => code::KV_STORAGE_EXCEPTION,
        _ => code::LOG_STORAGE_EXCEPTION,
    };
    ApiError::new(code, format!("{context}: {error}"))
}

pub struct Tablets {
    root: PathBuf,
    /// `<data dir>/kv-snapshots`, absolute: clients are given paths below it.
    snapshot_root: PathBuf,
    log_config: LogConfig,
    kv_store: KvStore,
    failure: StorageFailure,
    tables: RwLock<HashMap<i64, Arc<TableRuntime>>>,
}

impl Tablets {
    pub(crate) fn kv_memory(&self) -> crate::storage::kv_tablet::KvMemory {
        self.kv_store.memory()
    }
}

pub struct TableRuntime {
    pub entry: Arc<TableEntry>,
    /// Arrow schema of the table's rows, as the client reads log batches.
    pub arrow_schema: SchemaRef,
    /// The arrow schemas of the table's earlier schemas, by id, for batches written under them
    /// (made once, when the runtime is).
    earlier_arrow_schemas: Vec<(i16, SchemaRef)>,
    /// The buckets of a table without partitions; empty for a partitioned table.
    pub buckets: Vec<Arc<Bucket>>,
    /// A partitioned table's partitions by id (shared with the runtime of the table's next
    /// schema, [`Tablets::evolve`]).
    partitions: Arc<RwLock<BTreeMap<i64, Arc<PartitionRuntime>>>>,
    /// The values of the table's auto-increment column, if it has one (shared like
    /// `partitions`).
    pub(crate) auto_increment: Option<Arc<auto_increment::AutoIncrement>>,
}

/// One partition of a partitioned table: the table's bucket count of buckets.
pub struct PartitionRuntime {
    pub entry: PartitionEntry,
    pub buckets: Vec<Arc<Bucket>>,
}

pub struct Bucket {
    pub id: i32,
    /// The partition the bucket belongs to, for a partitioned table.
    pub partition_id: Option<i64>,
    pub log: LogTablet,
    pub kv: Option<KvTablet>,
    /// The kv snapshots of a primary-key bucket (taken by the `kv_snapshots` task).
    pub snapshots: Option<storage::BucketSnapshots>,
    pub write_lock: tokio::sync::Mutex<()>,
    /// Set when a kv apply failed after its changelog was appended: the kv tablet is behind
    /// the log, and the next write replays the log into it first (`kv::recover`).
    pub kv_behind: std::sync::atomic::AtomicBool,
    /// The server's, shared by every bucket.
    pub failure: StorageFailure,
}

impl Bucket {
    /// `bucket 2`, or `partition 7 bucket 2`, for messages.
    pub fn name(&self) -> String {
        match self.partition_id {
            Some(partition_id) => format!("partition {partition_id} bucket {}", self.id),
            None => format!("bucket {}", self.id),
        }
    }

    /// [`storage_error`], and a storage failure the process cannot recover from is raised.
    pub(crate) fn storage_error(&self, context: &str, error: storage::Error) -> ApiError {
        if is_fatal(&error) {
            self.failure.raise(format!("{context}: {error}"));
        }
        storage_error(context, error)
    }

    /// Appends a primary-key changelog batch and returns once it is durable, whatever the fsync
    /// policy: the kv tablet applies it next, and the log is the kv's write-ahead log. The
    /// caller holds the bucket's write lock.
    pub(crate) async fn append_changelog(
        &self,
        batches: bytes::Bytes,
    ) -> Result<AppendInfo, ApiError> {
        self.log
            .append_synced(batches, crate::catalog::now_ms())
            .await
            .map_err(|e| self.storage_error(&format!("changelog of {}", self.name()), e))
    }
}

impl TableRuntime {
    /// The arrow schema of the table's schema `schema_id` (the current or an earlier one), for
    /// batches written under it; an id the table never had is SCHEMA_NOT_EXIST.
    pub fn arrow_schema_of(&self, schema_id: i16) -> Result<SchemaRef, ApiError> {
        if i32::from(schema_id) == self.entry.schema_id {
            return Ok(self.arrow_schema.clone());
        }
        self.earlier_arrow_schemas
            .iter()
            .find(|(id, _)| *id == schema_id)
            .map(|(_, schema)| schema.clone())
            .ok_or_else(|| {
                ApiError::new(
                    code::SCHEMA_NOT_EXIST,
                    format!(
                        "a batch of {} has schema id {schema_id}, but the table's schemas are 1 \
                         to {}; refresh the client's table metadata",
                        self.entry.qualified_name(),
                        self.entry.schema_id
                    ),
                )
            })
    }

    /// The bucket a request names (Fluss's `TableBucket`): a partition id exactly when the
    /// table is partitioned. Anything else is UNKNOWN_TABLE_OR_BUCKET, which makes a client
    /// refresh its metadata (and learn there that a partition is gone).
    pub fn bucket(
        &self,
        partition_id: Option<i64>,
        bucket_id: i32,
    ) -> Result<Arc<Bucket>, ApiError> {
        let name = self.entry.qualified_name();
        let unknown = |reason: String| ApiError::new(code::UNKNOWN_TABLE_OR_BUCKET, reason);
        let partition;
        let buckets = match (partition_id, self.entry.is_partitioned()) {
            (None, false) => &self.buckets,
            (Some(partition_id), true) => {
                partition = self.partition(partition_id).ok_or_else(|| {
                    unknown(format!(
                        "unknown partition id {partition_id} of {name} (dropped, or never created); list its partitions with ListPartitionInfos"
                    ))
                })?;
                &partition.buckets
            }
            (None, true) => {
                return Err(unknown(format!(
                    "table {name} is partitioned: name the partition id of bucket {bucket_id}"
                )));
            }
            (Some(partition_id), false) => {
                return Err(unknown(format!(
                    "table {name} has no partition id {partition_id}: it is not partitioned"
                )));
            }
        };
        usize::try_from(bucket_id)
            .ok()
            .and_then(|i| buckets.get(i))
            .cloned()
            .ok_or_else(|| {
                unknown(format!(
                    "unknown bucket {bucket_id} of {name} (it has {} buckets)",
                    buckets.len()
                ))
            })
    }

    pub fn partition(&self, partition_id: i64) -> Option<Arc<PartitionRuntime>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&partition_id)
            .cloned()
    }

    pub fn partitions(&self) -> Vec<Arc<PartitionRuntime>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Every bucket: the table's own, or those of every partition.
    pub fn all_buckets(&self) -> Vec<Arc<Bucket>> {
        let mut buckets = self.buckets.clone();
        for partition in self.partitions() {
            buckets.extend(partition.buckets.iter().cloned());
        }
        buckets
    }
}

impl Tablets {
    /// Opens the server's kv store under `root/kv`, and the kv snapshot directory
    /// `snapshot_root`; tables are opened one by one.
    pub fn open(
        root: PathBuf,
        snapshot_root: &std::path::Path,
        log_config: LogConfig,
        kv_config: storage::KvConfig,
    ) -> crate::error::Result<Tablets> {
        let kv_store = KvStore::open(&root.join("kv"), kv_config).map_err(|e| {
            crate::error::Error::Storage {
                message: e.to_string(),
            }
        })?;
        let io = |source| crate::error::Error::Io {
            path: snapshot_root.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(snapshot_root).map_err(io)?;
        let snapshot_root = std::fs::canonicalize(snapshot_root).map_err(io)?;
        Ok(Tablets {
            root,
            snapshot_root,
            log_config,
            kv_store,
            failure: StorageFailure::new(),
            tables: RwLock::new(HashMap::new()),
        })
    }

    /// See [`StorageFailure`].
    pub fn failure(&self) -> &StorageFailure {
        &self.failure
    }

    fn kv_tablet_name(table_id: i64, partition_id: Option<i64>, bucket_id: i32) -> String {
        match partition_id {
            Some(partition_id) => format!("t{table_id}-p{partition_id}-b{bucket_id}"),
            None => format!("t{table_id}-b{bucket_id}"),
        }
    }

    fn table_dir(&self, table_id: i64) -> PathBuf {
        self.root.join(format!("table-{table_id}"))
    }

    fn partition_dir(&self, table_id: i64, partition_id: i64) -> PathBuf {
        self.table_dir(table_id)
            .join(format!("partition-{partition_id}"))
    }

    /// `kv-snapshots/table-<id>/[partition-<id>/]`: where a table's (partition's) buckets keep
    /// their kv snapshots.
    fn snapshot_dir(&self, table_id: i64, partition_id: Option<i64>) -> PathBuf {
        let table = self.snapshot_root.join(format!("table-{table_id}"));
        match partition_id {
            Some(partition_id) => table.join(format!("partition-{partition_id}")),
            None => table,
        }
    }

    /// The directory every kv snapshot lies under (absolute).
    pub fn snapshot_root(&self) -> &std::path::Path {
        &self.snapshot_root
    }

    /// Deletes the kv snapshots of tables and partitions that no longer exist (dropped while a
    /// snapshot was written, or before a crash finished deleting them). Run once every table
    /// is open.
    pub fn remove_orphan_snapshots(&self) {
        let Ok(tables) = std::fs::read_dir(&self.snapshot_root) else {
            return;
        };
        for table in tables.flatten() {
            let name = table.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_prefix("table-").and_then(|id| id.parse().ok()) else {
                continue;
            };
            let Some(runtime) = self.get(id) else {
                remove_dir(&table.path(), "a dropped table's kv snapshots");
                continue;
            };
            for partition in std::fs::read_dir(table.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = partition.file_name().to_string_lossy().into_owned();
                let id = name
                    .strip_prefix("partition-")
                    .and_then(|id| id.parse().ok());
                if id.is_some_and(|id| runtime.partition(id).is_none()) {
                    remove_dir(&partition.path(), "a dropped partition's kv snapshots");
                }
            }
        }
    }

    /// Opens a table's tablets (of each of `partitions` for a partitioned table) and replays
    /// their changelogs into kv.
    pub async fn open_table(
        &self,
        entry: Arc<TableEntry>,
        partitions: Vec<PartitionEntry>,
    ) -> crate::error::Result<()> {
        let (arrow_schema, earlier_arrow_schemas) = arrow_schemas_of(&entry)?;
        let buckets = if entry.is_partitioned() {
            Vec::new()
        } else {
            self.open_buckets(&entry, None)?
        };
        let auto_increment =
            auto_increment::AutoIncrement::open(&entry, &self.table_dir(entry.id))?.map(Arc::new);
        let runtime = Arc::new(TableRuntime {
            entry: entry.clone(),
            arrow_schema,
            earlier_arrow_schemas,
            buckets,
            partitions: Arc::new(RwLock::new(BTreeMap::new())),
            auto_increment,
        });
        recover_buckets(&runtime, &runtime.buckets)?;
        for partition in partitions {
            self.open_partition_of(&runtime, partition)?;
        }
        self.tables
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry.id, runtime);
        Ok(())
    }

    /// Opens a new partition's tablets in its table's runtime.
    pub fn open_partition(&self, partition: PartitionEntry) -> crate::error::Result<()> {
        let runtime = self
            .get(partition.table_id)
            .ok_or_else(|| crate::error::Error::Storage {
                message: format!(
                    "partition {} (id {}) of table id {}: the table has no tablets open",
                    partition.name, partition.id, partition.table_id
                ),
            })?;
        self.open_partition_of(&runtime, partition)
    }

    fn open_partition_of(
        &self,
        runtime: &TableRuntime,
        partition: PartitionEntry,
    ) -> crate::error::Result<()> {
        let buckets = self.open_buckets(&runtime.entry, Some(partition.id))?;
        recover_buckets(runtime, &buckets)?;
        runtime
            .partitions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                partition.id,
                Arc::new(PartitionRuntime {
                    entry: partition,
                    buckets,
                }),
            );
        Ok(())
    }

    fn open_buckets(
        &self,
        entry: &TableEntry,
        partition_id: Option<i64>,
    ) -> crate::error::Result<Vec<Arc<Bucket>>> {
        let dir = match partition_id {
            Some(partition_id) => self.partition_dir(entry.id, partition_id),
            None => self.table_dir(entry.id),
        };
        let storage = |e: storage::Error| crate::error::Error::Storage {
            message: e.to_string(),
        };
        let mut buckets = Vec::with_capacity(entry.bucket_count as usize);
        for bucket_id in 0..entry.bucket_count {
            let bucket_dir = dir.join(format!("bucket-{bucket_id}"));
            let log = LogTablet::open(&bucket_dir.join("log"), self.log_config).map_err(storage)?;
            let (kv, snapshots) = if entry.has_primary_key() {
                let name = Self::kv_tablet_name(entry.id, partition_id, bucket_id);
                let snapshot_dir = self
                    .snapshot_dir(entry.id, partition_id)
                    .join(format!("bucket-{bucket_id}"));
                (
                    Some(self.kv_store.open_tablet(&name).map_err(storage)?),
                    Some(storage::BucketSnapshots::open(&snapshot_dir).map_err(storage)?),
                )
            } else {
                (None, None)
            };
            buckets.push(Arc::new(Bucket {
                id: bucket_id,
                partition_id,
                log,
                kv,
                snapshots,
                write_lock: tokio::sync::Mutex::new(()),
                kv_behind: std::sync::atomic::AtomicBool::new(false),
                failure: self.failure.clone(),
            }));
        }
        Ok(buckets)
    }

    /// Every open table now (a copy of the list: the lock is not held while callers work).
    fn all_tables(&self) -> Vec<Arc<TableRuntime>> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn get(&self, table_id: i64) -> Option<Arc<TableRuntime>> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&table_id)
            .cloned()
    }

    /// Gives an open table its altered entry (a new schema): the same buckets and partitions
    /// under the new schema's arrow schema. Requests that hold the old runtime finish under the
    /// old schema, whose rows stay readable by their schema id.
    pub fn evolve(&self, entry: Arc<TableEntry>) -> crate::error::Result<()> {
        let (arrow_schema, earlier_arrow_schemas) = arrow_schemas_of(&entry)?;
        let mut tables = self.tables.write().unwrap_or_else(|p| p.into_inner());
        let Some(old) = tables.get(&entry.id) else {
            return Ok(());
        };
        let runtime = Arc::new(TableRuntime {
            entry: entry.clone(),
            arrow_schema,
            earlier_arrow_schemas,
            buckets: old.buckets.clone(),
            partitions: old.partitions.clone(),
            auto_increment: old.auto_increment.clone(),
        });
        tables.insert(entry.id, runtime);
        Ok(())
    }

    /// Forgets the table and deletes its files (every partition's) once in-flight writes
    /// have finished.
    pub async fn drop_table(&self, entry: &TableEntry) {
        let removed = self
            .tables
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&entry.id);
        if let Some(runtime) = removed {
            self.drop_kv_tablets(entry.id, &runtime.all_buckets()).await;
        }
        remove_dir(&self.table_dir(entry.id), "dropped table");
        remove_dir(
            &self.snapshot_dir(entry.id, None),
            "dropped table's kv snapshots",
        );
    }

    /// Forgets a dropped partition and deletes its files once in-flight writes have finished.
    pub async fn drop_partition(&self, table_id: i64, partition_id: i64) {
        let removed = self.get(table_id).and_then(|runtime| {
            runtime
                .partitions
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&partition_id)
        });
        if let Some(partition) = removed {
            self.drop_kv_tablets(table_id, &partition.buckets).await;
        }
        remove_dir(
            &self.partition_dir(table_id, partition_id),
            "dropped partition",
        );
        remove_dir(
            &self.snapshot_dir(table_id, Some(partition_id)),
            "dropped partition's kv snapshots",
        );
    }

    async fn drop_kv_tablets(&self, table_id: i64, buckets: &[Arc<Bucket>]) {
        for bucket in buckets {
            let _guard = bucket.write_lock.lock().await;
            if let Some(snapshots) = &bucket.snapshots
                && let Err(error) = snapshots.drop_all()
            {
                tracing::warn!(%error, bucket = %bucket.name(), "cannot delete kv snapshots of a dropped table or partition");
            }
            if bucket.kv.is_some()
                && let Err(error) = self.kv_store.drop_tablet(&Self::kv_tablet_name(
                    table_id,
                    bucket.partition_id,
                    bucket.id,
                ))
            {
                tracing::warn!(%error, bucket = %bucket.name(), "cannot drop kv tablet of a dropped table or partition");
            }
        }
    }

    /// fsyncs the kv store's journal: every apply so far is durable (before retention cuts a
    /// changelog below the applied offsets).
    pub fn persist_kv(&self) -> storage::Result<()> {
        self.kv_store.persist()
    }

    /// The highest writer id any log remembers.
    pub fn max_writer_id(&self) -> Option<i64> {
        let tables = self.tables.read().unwrap_or_else(|p| p.into_inner());
        tables
            .values()
            .flat_map(|t| t.all_buckets())
            .filter_map(|b| b.log.max_writer_id())
            .max()
    }

    /// fsyncs every log and publishes its durable end (periodically under `fsync: never`).
    /// Blocking.
    pub fn flush_all_logs(&self) {
        let tables = self.all_tables();
        for table in tables {
            for bucket in table.all_buckets() {
                if let Err(error) = bucket.log.flush() {
                    tracing::warn!(table = %table.entry.qualified_name(), bucket = %bucket.name(),
                        %error, "cannot flush log tablet");
                }
            }
        }
    }

    pub async fn close_all(&self) {
        let tables = self.all_tables();
        for table in tables {
            for bucket in table.all_buckets() {
                // Waiting for the write lock lets an in-flight append finish durably.
                let _guard = bucket.write_lock.lock().await;
                if let Err(error) = bucket.log.flush() {
                    tracing::warn!(%error, "cannot flush log tablet at shutdown");
                }
            }
        }
        if let Err(error) = self.kv_store.persist() {
            tracing::warn!(%error, "cannot persist kv store at shutdown");
        }
    }
}

/// Replays each primary-key bucket's changelog into its kv tablet (see [`recovery`]).
fn recover_buckets(runtime: &TableRuntime, buckets: &[Arc<Bucket>]) -> crate::error::Result<()> {
    for bucket in buckets {
        recovery::recover(runtime, bucket).map_err(|e| crate::error::Error::Storage {
            message: format!(
                "recovering kv of {} {}: {}",
                runtime.entry.qualified_name(),
                bucket.name(),
                e.message
            ),
        })?;
    }
    Ok(())
}

fn remove_dir(dir: &std::path::Path, what: &str) {
    if let Err(error) = std::fs::remove_dir_all(dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), %error, "cannot delete files of {what}");
    }
}

/// The arrow schemas of a table's current schema and of its earlier ones (by id), as clients
/// read log batches written under them.
fn arrow_schemas_of(
    entry: &TableEntry,
) -> crate::error::Result<(SchemaRef, Vec<(i16, SchemaRef)>)> {
    let arrow = |schema: &fluss::metadata::Schema, id: i32| {
        fluss::record::to_arrow_schema(schema.row_type()).map_err(|e| crate::error::Error::Config {
            message: format!(
                "schema {id} of table {} has no arrow schema in silt: {e}",
                entry.qualified_name()
            ),
        })
    };
    let earlier = entry
        .earlier_schemas
        .iter()
        .map(|earlier| Ok((earlier.id as i16, arrow(&earlier.schema, earlier.id)?)))
        .collect::<crate::error::Result<_>>()?;
    Ok((arrow(entry.descriptor.schema(), entry.schema_id)?, earlier))
}
