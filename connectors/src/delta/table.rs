//! The lake table: opening (create if missing), its txn offsets, and the one-commit-per-
//! checkpoint protocol: `plan` reads the lake's txn versions and keeps only what the lake does
//! not have yet; `apply` makes the Delta commit (append or MERGE) with the txn actions in it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Not as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::{Array, ArrayRef, BooleanArray, Int8Array, Int32Array, Int64Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::common::Column;
use datafusion::logical_expr::{Expr, col, lit};
use datafusion::prelude::SessionContext;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::{
    CommitBuilder, CommitProperties, TableReference, TransactionError,
};
use deltalake::kernel::{Action, Add, StructType, Transaction};
use deltalake::protocol::{DeltaOperation, MergePredicate, SaveMode};
use deltalake::{DeltaTable, DeltaTableError, Path, TableProperty};
use object_store::ObjectStoreExt as _;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use roaring::RoaringTreemap;
use tracing::{info, warn};
use url::Url;

use super::committable::{BucketRange, Committable};
use super::committer::{CompactionReport, LakeCommit};
use super::compaction::Compactor;
use super::dv::{self, DvFileWriter};
use super::error::{Error, GapAfter, Result};
use super::key_index::{self, KeyIndex};
use super::maintenance::{self, MaintenanceReport};
use super::owner::{DESCRIPTION_PREFIX, LakeOwner, OWNER_KEY, owner_of, recorded_owner};
use super::schema::lake_arrow_schema_of;
use super::writer::{last_change_per_key, writer_properties};
use super::{DeltaSinkConfig, TableKind};
use crate::changelog::{
    BUCKET_COLUMN, BucketKey, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN, PARTITION_ID_COLUMN,
};

static CREATE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The txn app id of one bucket of one table: `silt-<table_id>-<bucket>`, or for a bucket of a
/// partition `silt-<table_id>-p<partition id>-<bucket>`.
pub fn app_id(table_id: &str, bucket: BucketKey) -> String {
    match bucket.partition {
        None => format!("silt-{table_id}-{}", bucket.bucket),
        Some(partition) => format!("silt-{table_id}-p{partition}-{}", bucket.bucket),
    }
}

/// The bucket whose txn app id of table `table_id` is `app` (see [`app_id`]); `None` for any
/// other app id.
pub fn bucket_of_app_id(table_id: &str, app: &str) -> Option<BucketKey> {
    let rest = app
        .strip_prefix("silt-")?
        .strip_prefix(table_id)?
        .strip_prefix('-')?;
    match rest.strip_prefix('p') {
        None => Some(BucketKey::table(rest.parse().ok()?)),
        Some(partitioned) => {
            let (partition, bucket) = partitioned.split_once('-')?;
            Some(BucketKey::partition(
                partition.parse().ok()?,
                bucket.parse().ok()?,
            ))
        }
    }
}

/// What the lake holds: its Delta version and, per bucket, the end offset tiered so far (the
/// next offset to read).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LakeOffsets {
    pub delta_version: u64,
    pub bucket_offsets: BTreeMap<BucketKey, i64>,
}

/// Reads the lake's txn offsets of `buckets` (those it holds nothing of are absent), for a
/// source's first start and for repairing hotstore's registry. `None` when no Delta table exists at `table_uri` yet, or when
/// the one there belongs to another silt table id (a dropped table's lake, see
/// [`super::owner`]): for table `table_id` that lake holds nothing.
pub async fn read_lake_offsets(
    table_uri: &str,
    storage_options: &HashMap<String, String>,
    table_id: &str,
    buckets: &[BucketKey],
) -> Result<Option<LakeOffsets>> {
    let Some(table) = load_existing(table_uri, storage_options).await? else {
        return Ok(None);
    };
    let Some(delta_version) = table.version() else {
        return Ok(None);
    };
    if owner_of(&table, table_uri, table_id, buckets.iter().copied()).await? != LakeOwner::Owned {
        return Ok(None);
    }
    let bucket_offsets = txn_versions(&table, table_uri, table_id, buckets.iter().copied()).await?;
    Ok(Some(LakeOffsets {
        delta_version,
        bucket_offsets,
    }))
}

/// The Delta table at `table_uri`, or `None` when there is none (a local path without a
/// `_delta_log`, or a table without a version).
pub(crate) async fn load_existing(
    table_uri: &str,
    storage_options: &HashMap<String, String>,
) -> Result<Option<DeltaTable>> {
    if !table_uri.contains("://") && !std::path::Path::new(table_uri).exists() {
        return Ok(None);
    }
    let url = table_url(table_uri)?;
    let table = DeltaTable::try_from_url_with_storage_options(url, storage_options.clone())
        .await
        .map_err(Error::delta(table_uri))?;
    Ok(table.version().is_some().then_some(table))
}

/// A local path (created when missing) or an object store URL.
fn table_url(table_uri: &str) -> Result<Url> {
    deltalake::ensure_table_uri(table_uri).map_err(Error::delta(table_uri))
}

pub(crate) async fn txn_versions(
    table: &DeltaTable,
    uri: &str,
    table_id: &str,
    buckets: impl IntoIterator<Item = BucketKey>,
) -> Result<BTreeMap<BucketKey, i64>> {
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let log_store = table.log_store();
    let mut versions = BTreeMap::new();
    for bucket in buckets {
        let version = state
            .transaction_version(log_store.as_ref(), app_id(table_id, bucket))
            .await
            .map_err(Error::delta(uri))?;
        if let Some(v) = version {
            versions.insert(bucket, v);
        }
    }
    Ok(versions)
}

/// What `apply` will commit: only the parts of committables the lake does not have yet.
pub struct CommitPlan {
    /// The newest checkpoint among the committables.
    pub checkpoint_id: u64,
    /// Log tables: the data files to add.
    pub adds: Vec<Add>,
    /// Primary-key tables: staged change files to merge.
    pub staged: Vec<String>,
    /// The lake's txn versions when planned, for the buckets involved (absent: none yet).
    pub lake_offsets: BTreeMap<BucketKey, i64>,
    /// New txn versions: the buckets this commit advances.
    pub txns: BTreeMap<BucketKey, i64>,
    /// Rows the commit brings per bucket (log tables: rows in `adds`).
    pub rows: BTreeMap<BucketKey, u64>,
}

impl CommitPlan {
    pub fn is_noop(&self) -> bool {
        self.txns.is_empty()
    }
}

/// `delta.checkpointInterval` of the tables silt creates (Delta's default is 100). deltalake
/// replays every commit file since the last checkpoint whenever it loads or refreshes a table,
/// with a JSON decoder of several MiB per file: at one commit a second, a 100-commit interval
/// made each tiering commit and each query replay up to 100 files (heaptrack of a steady load:
/// 80-300 MiB of transient decoders, and the resident set following them). A checkpoint every
/// 10 commits bounds the replay to 10 files; the checkpoint itself lists only the active files.
const CHECKPOINT_INTERVAL_COMMITS: &str = "10";

/// An open lake table and the sink's view of it.
pub struct LakeTable {
    config: Arc<DeltaSinkConfig>,
    table: DeltaTable,
    lake_schema: SchemaRef,
    /// Primary-key tables with deletion vectors: key -> (file, row), opened at first use.
    key_index: Option<KeyIndex>,
    /// What the commit being made compacted.
    compacted: CompactionReport,
    /// A log table's rewrite of small files, prepared between commits.
    compactor: Compactor,
    /// The removes of the commit files maintenance has read (it reads only newer ones).
    removes_seen: maintenance::RemovesSeen,
}

impl LakeTable {
    /// Opens the table, creating it when missing (partitioned by `__bucket`), and checks that
    /// its schema is the one this sink writes. Racing creators are fine: the loser reloads.
    pub async fn open(config: Arc<DeltaSinkConfig>) -> Result<LakeTable> {
        config.validate()?;
        let uri = config.table_uri.as_str();
        let lake_schema = lake_arrow_schema_of(&config.user_schema, config.is_partitioned())?;
        let url = table_url(uri)?;
        // Subtasks of one job open concurrently; deltalake lets two racing creators both commit
        // a CREATE (the second as version 1, with a new table id), so creation is serialized
        // within the process. Two processes tiering one table is a misconfiguration anyway.
        let _creating = CREATE_LOCK.lock().await;
        let table = DeltaTable::try_from_url_with_storage_options(
            url.clone(),
            config.storage_options.clone(),
        )
        .await
        .map_err(Error::delta(uri))?;
        let table = if table.version().is_some() {
            table
        } else {
            let columns: StructType = lake_schema
                .as_ref()
                .try_into_kernel()
                .map_err(|e| Error::Internal(format!("lake schema: {e}")))?;
            let mut create = table
                .create()
                .with_columns(columns.fields().cloned())
                .with_partition_columns(config.partition_columns())
                .with_save_mode(SaveMode::Ignore)
                .with_comment(format!("{DESCRIPTION_PREFIX}{}", config.table_id))
                .with_raise_if_key_not_exists(false)
                .with_configuration([(OWNER_KEY, Some(config.table_id.as_str()))])
                .with_configuration_property(
                    TableProperty::CheckpointInterval,
                    Some(CHECKPOINT_INTERVAL_COMMITS),
                )
                .with_configuration(
                    config
                        .retention
                        .table_properties()
                        .into_iter()
                        .map(|(k, v)| (k, Some(v))),
                );
            if config.deletion_vectors && matches!(config.kind, TableKind::PrimaryKey { .. }) {
                create = create.with_configuration_property(
                    TableProperty::EnableDeletionVectors,
                    Some("true"),
                );
            }
            let created = create.await;
            match created {
                Ok(t) => {
                    info!(table = uri, "created delta table");
                    t
                }
                Err(e) => {
                    warn!(table = uri, error = %e, "create failed; reloading in case another writer created it");
                    DeltaTable::try_from_url_with_storage_options(
                        url,
                        config.storage_options.clone(),
                    )
                    .await
                    .map_err(Error::delta(uri))?
                }
            }
        };
        let mut lake = LakeTable {
            config,
            table,
            lake_schema,
            key_index: None,
            compacted: CompactionReport::default(),
            compactor: Compactor::default(),
            removes_seen: maintenance::RemovesSeen::default(),
        };
        lake.check_owner()?;
        lake.add_gained_columns().await?;
        lake.check_schema()?;
        let owned = recorded_owner(
            lake.table
                .snapshot()
                .map_err(Error::delta(lake.uri()))?
                .metadata(),
        );
        if owned.is_some() {
            // Only a table this sink owns gets silt's retention; a table someone else made
            // keeps theirs.
            lake.table = maintenance::apply_retention_properties(
                lake.table.clone(),
                &lake.config.retention,
                &lake.config.table_uri,
            )
            .await?;
        }
        Ok(lake)
    }

    /// Deletes what no version inside the retention needs and old staged files not in
    /// `pending_staged` (see [`maintenance`]); the files of a prepared compaction that no commit
    /// has carried yet are kept, however old.
    pub async fn maintain(
        &mut self,
        pending_staged: &BTreeSet<String>,
    ) -> Result<MaintenanceReport> {
        let mut waiting = pending_staged.clone();
        let uri = &self.config.table_uri;
        waiting.extend(self.compactor.waiting_files(false, uri).await);
        maintenance::vacuum(
            &self.table,
            &self.config.retention,
            &waiting,
            &mut self.removes_seen,
            &self.config.table_uri,
        )
        .await
    }

    /// Waits for the compaction prepared between commits, if one is running; returns the
    /// files it wrote that no commit has carried yet (they stay orphans unless a commit does).
    pub async fn settle_compaction(&mut self) -> Vec<String> {
        self.compactor
            .waiting_files(true, &self.config.table_uri)
            .await
    }

    fn uri(&self) -> &str {
        &self.config.table_uri
    }

    /// Refuses a table that names another silt table id as its owner: its rows and txn
    /// offsets are another table's (see [`super::owner`]).
    fn check_owner(&self) -> Result<()> {
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        match recorded_owner(state.metadata()) {
            Some(owner) if owner != self.config.table_id => Err(Error::TableMismatch {
                uri: self.uri().to_string(),
                message: format!(
                    "it belongs to silt table id {owner}, this sink writes table id {} (for a table dropped and created again the tiering service moves the old lake aside first; for a job's sink choose another path)",
                    self.config.table_id
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Adds to a lake this table owns the nullable columns the table gained since (Fluss's
    /// ADD COLUMN), in one Delta commit of its own before any rows with them: Delta appends
    /// them to its schema, and the rows of files written before read them as null. Anything
    /// else that differs is left for [`LakeTable::check_schema`] to name.
    async fn add_gained_columns(&mut self) -> Result<()> {
        let want: StructType = self
            .lake_schema
            .as_ref()
            .try_into_kernel()
            .map_err(|e| Error::Internal(format!("lake schema: {e}")))?;
        let Ok(snapshot) = self.table.snapshot() else {
            return Ok(());
        };
        let have = snapshot.schema();
        let gained: Vec<_> = want
            .fields()
            .filter(|field| have.field(field.name()).is_none())
            .cloned()
            .collect();
        let only_gained = have
            .fields()
            .all(|field| want.field(field.name()).is_some());
        let owned = recorded_owner(snapshot.metadata()).as_deref() == Some(&self.config.table_id);
        if gained.is_empty() || !only_gained || !owned || gained.iter().any(|f| !f.is_nullable()) {
            return Ok(());
        }
        let names: Vec<&str> = gained.iter().map(|f| f.name().as_str()).collect();
        info!(table = self.uri(), columns = ?names, "the table gained columns: adding them to its lake");
        self.table = self
            .table
            .clone()
            .add_columns()
            .with_fields(gained)
            .await
            .map_err(Error::delta(self.uri()))?;
        Ok(())
    }

    fn check_schema(&self) -> Result<()> {
        let mismatch = |message: String| Error::TableMismatch {
            uri: self.uri().to_string(),
            message,
        };
        let state = self
            .table
            .snapshot()
            .map_err(|_| mismatch("it has no version after create".into()))?;
        let want: StructType = self
            .lake_schema
            .as_ref()
            .try_into_kernel()
            .map_err(|e| Error::Internal(format!("lake schema: {e}")))?;
        let have = state.schema();
        for field in want.fields() {
            match have.field(field.name()) {
                None => {
                    return Err(mismatch(format!(
                        "it has no column {:?} (point the sink at a new location)",
                        field.name()
                    )));
                }
                Some(f) if f.data_type() != field.data_type() => {
                    return Err(mismatch(format!(
                        "column {:?} is {:?} there but the changelog needs {:?}",
                        field.name(),
                        f.data_type(),
                        field.data_type()
                    )));
                }
                Some(_) => {}
            }
        }
        if have.fields().count() != want.fields().count() {
            return Err(mismatch(format!(
                "it has {} columns, the sink writes {}",
                have.fields().count(),
                want.fields().count()
            )));
        }
        let partition_columns = self.config.partition_columns();
        if *state.metadata().partition_columns() != partition_columns {
            return Err(mismatch(format!(
                "it is partitioned by {:?}, the sink needs {partition_columns:?}",
                state.metadata().partition_columns()
            )));
        }
        Ok(())
    }

    pub fn table(&self) -> &DeltaTable {
        &self.table
    }

    /// The Arrow schema of the lake's rows: user columns (mapped to Delta's types), then
    /// `__bucket`, `__offset`, `__timestamp`.
    pub fn lake_schema(&self) -> &SchemaRef {
        &self.lake_schema
    }

    pub fn version(&self) -> Option<u64> {
        self.table.version()
    }

    pub async fn refresh(&mut self) -> Result<()> {
        self.table
            .update_state()
            .await
            .map_err(Error::delta(&self.config.table_uri))
    }

    /// The lake's txn versions of these buckets (absent: never committed).
    pub async fn bucket_offsets(
        &self,
        buckets: impl IntoIterator<Item = BucketKey>,
    ) -> Result<BTreeMap<BucketKey, i64>> {
        txn_versions(&self.table, self.uri(), &self.config.table_id, buckets).await
    }

    /// Refreshes the table and keeps, of `committables`, what the lake does not have: a
    /// committable's bucket range is skipped when the lake's txn version already reaches its
    /// end, and kept when it starts at or after it. A version inside a range means another
    /// writer with the same app ids (a second tiering job on the table) committed part of it:
    /// only the offsets at or after the version are kept (log files are rewritten without the
    /// rows before it; staged changes are filtered by offset when merged), so this job neither
    /// duplicates the other's rows nor stalls on them.
    ///
    /// A kept range must continue where the lake ends (its txn version, or the range planned
    /// before it): one that continues from a later offset would advance the txn version over
    /// offsets never written, and fails the plan with [`Error::OffsetGap`].
    pub async fn plan(&mut self, committables: &[Committable]) -> Result<CommitPlan> {
        self.refresh().await?;
        let buckets: BTreeSet<BucketKey> = committables
            .iter()
            .flat_map(|c| c.buckets.keys().copied())
            .collect();
        let lake_offsets = self.bucket_offsets(buckets).await?;
        let mut plan = CommitPlan {
            checkpoint_id: committables
                .iter()
                .map(|c| c.checkpoint_id)
                .max()
                .unwrap_or(0),
            adds: Vec::new(),
            staged: Vec::new(),
            lake_offsets,
            txns: BTreeMap::new(),
            rows: BTreeMap::new(),
        };
        // Per bucket, where the next kept range must continue from and what that offset is.
        let mut ends: BTreeMap<BucketKey, (i64, GapAfter)> = plan
            .lake_offsets
            .iter()
            .map(|(&b, &v)| (b, (v, GapAfter::LakeTxn)))
            .collect();
        for c in committables {
            let mut kept = BTreeSet::new();
            // Buckets whose range the lake already holds in part: keep offsets >= the version.
            let mut trims: BTreeMap<BucketKey, i64> = BTreeMap::new();
            for (&bucket, range) in &c.buckets {
                let lake = plan.lake_offsets.get(&bucket).copied();
                match lake {
                    Some(v) if range.end <= v => continue,
                    Some(v) if range.start < v => {
                        warn!(
                            table = self.uri(),
                            %bucket,
                            lake = v,
                            start = range.start,
                            end = range.end,
                            checkpoint = c.checkpoint_id,
                            "another writer tiered part of this range (a second tiering job?); committing only the offsets after it"
                        );
                        trims.insert(bucket, v);
                    }
                    _ => {}
                }
                self.check_continues(bucket, range, ends.get(&bucket).copied())?;
                ends.insert(bucket, (range.end, GapAfter::EarlierCommittable));
                kept.insert(bucket);
                let txn = plan.txns.entry(bucket).or_insert(range.end);
                *txn = (*txn).max(range.end);
                if !trims.contains_key(&bucket) {
                    *plan.rows.entry(bucket).or_default() += range.rows;
                }
            }
            if kept.is_empty() {
                continue;
            }
            check_adds_cover_ranges(c, &kept)?;
            let mut to_trim: BTreeMap<BucketKey, Vec<Add>> = BTreeMap::new();
            for add in &c.adds {
                let bucket = add_bucket(add)?;
                if !kept.contains(&bucket) {
                    continue;
                }
                if trims.contains_key(&bucket) {
                    to_trim.entry(bucket).or_default().push(add.clone());
                } else {
                    plan.adds.push(add.clone());
                }
            }
            for (&bucket, &from) in &trims {
                let adds = to_trim.remove(&bucket).unwrap_or_default();
                let trimmed = self.trim_log_files(&adds, from).await?;
                let rows = match self.config.kind {
                    TableKind::Log => trimmed.iter().map(add_rows).sum::<Result<u64>>()?,
                    // Staged changes are filtered by offset when merged; count the range.
                    TableKind::PrimaryKey { .. } => {
                        c.buckets.get(&bucket).map_or(0, |r| (r.end - from) as u64)
                    }
                };
                *plan.rows.entry(bucket).or_default() += rows;
                plan.adds.extend(trimmed);
            }
            plan.staged.extend(c.staged.iter().cloned());
        }
        Ok(plan)
    }

    /// Fails with [`Error::OffsetGap`] when `range` continues from an offset after `end`
    /// (where the lake, with what is planned before the range, ends for `bucket`; `None`: the
    /// lake holds nothing of it, so it ends where the changelog starts, when that is known). A
    /// range that does not say where it continues from (written by an older silt) passes.
    fn check_continues(
        &self,
        bucket: BucketKey,
        range: &BucketRange,
        end: Option<(i64, GapAfter)>,
    ) -> Result<()> {
        let Some(follows) = range.follows else {
            return Ok(());
        };
        let start = self
            .config
            .start_offsets
            .as_ref()
            .and_then(|s| s.get(&bucket))
            .map(|&s| (s, GapAfter::ChangelogStart));
        let Some((expected, after)) = end.or(start) else {
            return Ok(());
        };
        if follows > expected {
            return Err(Error::OffsetGap {
                uri: self.uri().to_string(),
                table_id: self.config.table_id.clone(),
                bucket,
                follows,
                expected,
                after,
            });
        }
        Ok(())
    }

    /// Rewrites a bucket's data files without the rows below offset `from` (the lake already
    /// has them from another writer) and returns the adds of the new files. The old files
    /// stay on storage unreferenced, like the files of a checkpoint that never completed.
    async fn trim_log_files(&self, adds: &[Add], from: i64) -> Result<Vec<Add>> {
        if adds.is_empty() {
            return Ok(Vec::new());
        }
        let store = self.table.object_store();
        let mut writer = deltalake::writer::RecordBatchWriter::for_table(&self.table)
            .map_err(Error::delta(self.uri()))?;
        let mut written = 0usize;
        for add in adds {
            let bytes = read_object(store.as_ref(), &add.path).await?;
            for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
                let batch = batch?;
                let offsets = int_column::<Int64Array>(&batch, OFFSET_COLUMN)?;
                let keep: BooleanArray = (0..batch.num_rows())
                    .map(|i| Some(offsets.value(i) >= from))
                    .collect();
                let batch = filter_record_batch(&batch, &keep)?;
                if batch.num_rows() == 0 {
                    continue;
                }
                let batch = with_partition_columns(batch, add, &self.lake_schema)?;
                let batch = super::schema::conform_stored(&batch, &self.lake_schema)?;
                written += batch.num_rows();
                deltalake::writer::DeltaWriter::write(&mut writer, batch)
                    .await
                    .map_err(Error::delta(self.uri()))?;
            }
        }
        if written == 0 {
            return Ok(Vec::new());
        }
        deltalake::writer::DeltaWriter::flush(&mut writer)
            .await
            .map_err(Error::delta(self.uri()))
    }

    /// Makes the commit of a plan: ONE Delta commit holding the adds (log) or the MERGE (primary
    /// key) and one txn action per advanced bucket. A no-op plan commits nothing. A concurrent
    /// commit of the same app ids since `plan` makes Delta's conflict check fail this one.
    pub async fn apply(&mut self, plan: &CommitPlan) -> Result<LakeCommit> {
        self.compacted = CompactionReport::default();
        let read_version = self.version().unwrap_or(0);
        if plan.is_noop() {
            return Ok(self.lake_commit(plan, read_version, true));
        }
        let now_ms = epoch_ms();
        let txns: Vec<Transaction> = plan
            .txns
            .iter()
            .map(|(&b, &v)| {
                Transaction::new_with_last_update(app_id(&self.config.table_id, b), v, Some(now_ms))
            })
            .collect();
        let metadata = [
            (
                "silt.checkpointId".to_string(),
                serde_json::json!(plan.checkpoint_id),
            ),
            (
                "silt.tableId".to_string(),
                serde_json::json!(self.config.table_id),
            ),
        ];
        let properties = CommitProperties::default()
            .with_application_transactions(txns.clone())
            .with_metadata(metadata)
            .with_max_retries(self.config.commit_retries_max);
        let kind = self.config.kind.clone();
        let version = match &kind {
            TableKind::Log => {
                let mut actions: Vec<Action> = plan.adds.iter().cloned().map(Action::Add).collect();
                let (uri, waits_max) = (&self.config.table_uri, self.config.small_files_max);
                if let Some(rewrite) = self.compactor.take(&self.table, uri, waits_max).await? {
                    self.compacted
                        .add(rewrite.files, rewrite.rows, rewrite.bytes);
                    actions.extend(rewrite.actions);
                }
                self.commit_actions(actions, properties).await?
            }
            TableKind::PrimaryKey { .. } => {
                let key_columns = self.config.lake_key_columns().expect("a primary-key table");
                let merged = if self.has_deletion_vectors()? {
                    self.commit_with_deletion_vectors(plan, &key_columns, properties.clone())
                        .await?
                } else {
                    self.merge(plan, &key_columns, properties.clone()).await?
                };
                match merged {
                    Some(v) => v,
                    // Nothing to change (e.g. deletes of keys the lake never had): the offsets
                    // still advance, in a commit of txn actions only.
                    None => self.commit_actions(Vec::new(), properties).await?,
                }
            }
        };
        if version <= read_version && self.version().is_some() {
            return Err(Error::Internal(format!(
                "commit returned version {version} not after {read_version}"
            )));
        }
        self.refresh().await?;
        self.delete_staged(&plan.staged).await;
        if kind == TableKind::Log {
            let appended: BTreeSet<BucketKey> = plan.txns.keys().copied().collect();
            self.compactor
                .start(&self.table, &self.config, &self.lake_schema, &appended)?;
        }
        Ok(self.lake_commit(plan, version, false))
    }

    fn lake_commit(&self, plan: &CommitPlan, delta_version: u64, replayed: bool) -> LakeCommit {
        let mut bucket_offsets = plan.lake_offsets.clone();
        bucket_offsets.extend(plan.txns.iter().map(|(&b, &v)| (b, v)));
        LakeCommit {
            delta_version,
            checkpoint_id: plan.checkpoint_id,
            bucket_offsets,
            files_added: plan.adds.len(),
            rows: plan.rows.values().sum(),
            replayed,
            maintenance: None,
            compaction: (self.compacted.files > 0).then_some(self.compacted),
            duration: Duration::ZERO,
        }
    }

    fn map_commit_error(&self, e: DeltaTableError) -> Error {
        match e {
            DeltaTableError::Transaction {
                source: TransactionError::CommitConflict(conflict),
            } => Error::Conflict {
                uri: self.uri().to_string(),
                message: conflict.to_string(),
            },
            other => Error::delta(self.uri())(other),
        }
    }

    async fn commit_actions(
        &mut self,
        actions: Vec<Action>,
        properties: CommitProperties,
    ) -> Result<u64> {
        let operation = DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: Some(self.config.partition_columns()),
            predicate: None,
        };
        self.commit_operation(actions, properties, operation).await
    }

    async fn commit_operation(
        &mut self,
        actions: Vec<Action>,
        properties: CommitProperties,
        operation: DeltaOperation,
    ) -> Result<u64> {
        let state = self
            .table
            .snapshot()
            .map_err(Error::delta(&self.config.table_uri))?;
        let committed = CommitBuilder::from(properties)
            .with_actions(actions)
            .build(
                Some(state as &dyn TableReference),
                self.table.log_store(),
                operation,
            )
            .await
            .map_err(|e| self.map_commit_error(e))?;
        Ok(committed.version())
    }

    /// MERGE of the staged changes (offsets the lake already has filtered out, reduced to the
    /// last change per key) by bucket and key. `None` when the merge changed nothing.
    async fn merge(
        &mut self,
        plan: &CommitPlan,
        key_columns: &[String],
        properties: CommitProperties,
    ) -> Result<Option<u64>> {
        let Some(changes) = self.reduced_changes(plan, key_columns).await? else {
            return Ok(None);
        };
        let before = self.version();
        let qualified = |rel: &str, name: &str| Expr::Column(Column::new(Some(rel), name));
        let mut predicate =
            qualified("target", BUCKET_COLUMN).eq(qualified("source", BUCKET_COLUMN));
        for key in key_columns {
            predicate = predicate.and(qualified("target", key).eq(qualified("source", key)));
        }
        let is_delete =
            col(Column::new(Some("source"), CHANGE_TYPE_COLUMN)).eq(lit(ChangeType::Delete as i8));
        let columns: Vec<String> = self
            .lake_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let ctx = SessionContext::new();
        let source = ctx.read_batch(changes)?;
        let merged = self
            .table
            .clone()
            .merge(source, predicate)
            .with_source_alias("source")
            .with_target_alias("target")
            .with_commit_properties(properties)
            .when_matched_delete(|delete| delete.predicate(is_delete.clone()))
            .and_then(|m| {
                m.when_matched_update(|mut update| {
                    for c in &columns {
                        update = update.update(Column::new_unqualified(c), qualified("source", c));
                    }
                    update
                })
            })
            .and_then(|m| {
                m.when_not_matched_insert(|mut insert| {
                    insert = insert.predicate(is_delete.clone().not());
                    for c in &columns {
                        insert = insert.set(Column::new_unqualified(c), qualified("source", c));
                    }
                    insert
                })
            })
            .map_err(Error::delta(&self.config.table_uri))?
            .await;
        let (table, _metrics) = merged.map_err(|e| self.map_commit_error(e))?;
        self.table = table;
        let after = self.version();
        Ok(if after != before { after } else { None })
    }

    /// Whether the table was created with deletion vectors (`delta.enableDeletionVectors`).
    fn has_deletion_vectors(&self) -> Result<bool> {
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        Ok(state
            .metadata()
            .configuration()
            .get(TableProperty::EnableDeletionVectors.as_ref())
            .is_some_and(|v| v.eq_ignore_ascii_case("true")))
    }

    /// The commit of a primary-key table with deletion vectors: the rows the changes supersede
    /// (found through the key index) are marked deleted in the files that hold them, and the
    /// new images go into new files, in ONE Delta commit with the txn actions. Its cost grows
    /// with the keys changed and the files they touch, not with the rows in the table. `None`
    /// when the changes change nothing (deletes of keys the lake never had).
    async fn commit_with_deletion_vectors(
        &mut self,
        plan: &CommitPlan,
        key_columns: &[String],
        properties: CommitProperties,
    ) -> Result<Option<u64>> {
        let Some(changes) = self.reduced_changes(plan, key_columns).await? else {
            return Ok(None);
        };
        let (table_id, read_version) = self.ensure_key_index(key_columns).await?;
        let superseded = self.superseded_rows(&changes, key_columns)?;
        // The new images go into new files, and so do the live rows of files compacted below.
        let mut writer = deltalake::writer::RecordBatchWriter::for_table(&self.table)
            .map_err(Error::delta(self.uri()))?
            .with_target_file_size(self.config.target_file_bytes)
            .with_writer_properties(writer_properties(&self.config));
        let keep: BooleanArray = superseded.is_delete.iter().map(|d| Some(!d)).collect();
        let upserts = filter_record_batch(&changes, &keep)?;
        if upserts.num_rows() > 0 {
            let images = super::schema::conform_stored(&upserts, &self.lake_schema)?;
            deltalake::writer::DeltaWriter::write(&mut writer, images)
                .await
                .map_err(Error::delta(self.uri()))?;
        }
        let (files, compact) = self.touched_files(&superseded.at, &changes)?;
        let retired = self
            .retire_superseded(&superseded.at, &files, compact, read_version, &mut writer)
            .await?;
        let new_files = deltalake::writer::DeltaWriter::flush(&mut writer)
            .await
            .map_err(Error::delta(self.uri()))?;
        self.count_compaction(&retired, &files);
        if retired.actions.is_empty() && new_files.is_empty() {
            return Ok(None);
        }
        if !retired.vectors.is_empty() {
            let path = Path::from(retired.vectors.path());
            self.table
                .object_store()
                .put(&path, retired.vectors.into_bytes().into())
                .await
                .map_err(|source| Error::Storage {
                    path: path.to_string(),
                    source,
                })?;
        }
        let mut actions = retired.actions;
        actions.extend(new_files.iter().cloned().map(Action::Add));
        let operation = dv_merge_operation(key_columns);
        let version = self
            .commit_operation(actions, properties, operation)
            .await?;
        self.index_the_commit(
            &new_files,
            &superseded.keys,
            &superseded.is_delete,
            key_columns,
            (&table_id, read_version),
            version,
        )
        .await?;
        Ok(Some(version))
    }

    /// Where the rows that `changes` supersede are, found through the key index: the changes'
    /// encoded keys, and per file the row numbers of their older images.
    fn superseded_rows(&self, changes: &RecordBatch, key_columns: &[String]) -> Result<Superseded> {
        let index = self
            .key_index
            .as_ref()
            .ok_or_else(|| Error::Internal("the key index is not open".into()))?;
        let buckets = int_column::<Int32Array>(changes, BUCKET_COLUMN)?;
        let keys = index.encode(buckets.values(), &key_arrays(changes, key_columns)?)?;
        let mut at: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for location in index.get_many(&keys)?.into_iter().flatten() {
            at.entry(location.path).or_default().push(location.row);
        }
        let kinds = int_column::<Int8Array>(changes, CHANGE_TYPE_COLUMN)?;
        let is_delete = kinds
            .values()
            .iter()
            .map(|&k| k == ChangeType::Delete as i8)
            .collect();
        Ok(Superseded {
            keys,
            at,
            is_delete,
        })
    }

    /// The actions that retire superseded rows: each touched file is removed, and added again
    /// with its rows marked deleted in a deletion vector, or, when it is to be compacted (or at
    /// least half deleted), its live rows are copied into `writer`; a file with no live row
    /// just goes. A superseded row the index places where there is no such file or row means
    /// the index is out of step: it is forgotten (rebuilt at the restart) and the commit fails.
    async fn retire_superseded(
        &mut self,
        superseded: &BTreeMap<String, Vec<u64>>,
        files: &HashMap<String, LiveFile>,
        mut compact: BTreeSet<String>,
        read_version: u64,
        writer: &mut deltalake::writer::RecordBatchWriter,
    ) -> Result<Retired> {
        let store = self.table.object_store();
        let now_ms = epoch_ms();
        let uri = self.uri().to_string();
        let stale = |path: &str, why: &str| {
            Error::Internal(format!(
                "the key index of {uri} is out of step with version {read_version} ({path}: {why}); it is rebuilt at the restart"
            ))
        };
        let mut retired = Retired {
            actions: Vec::new(),
            vectors: DvFileWriter::new(),
            compacted: BTreeSet::new(),
            compacted_rows: 0,
        };
        let paths: BTreeSet<String> = superseded.keys().chain(compact.iter()).cloned().collect();
        for path in &paths {
            let Some(file) = files.get(path) else {
                self.forget_key_index()?;
                return Err(stale(path, "no such file in the table"));
            };
            let mut deleted = match &file.add.deletion_vector {
                Some(old) => dv::read(store.as_ref(), &Path::from(""), old).await?,
                None => RoaringTreemap::new(),
            };
            for &row in superseded.get(path).into_iter().flatten() {
                if !deleted.insert(row) {
                    self.forget_key_index()?;
                    return Err(stale(path, "the row is already deleted"));
                }
            }
            retired.actions.push(Action::Remove(file.remove.clone()));
            if deleted.len() >= file.rows {
                continue; // every row superseded: the file goes
            }
            // A file at least half deleted is compacted too: each row it still holds moves at
            // most once per halving of its file.
            if deleted.len() * 2 >= file.rows {
                compact.insert(path.clone());
            }
            if compact.contains(path) {
                retired.compacted_rows += self.copy_live_rows(&file.add, &deleted, writer).await?;
            } else {
                let mut add = file.add.clone();
                add.deletion_vector = Some(retired.vectors.push(&deleted)?);
                add.modification_time = now_ms;
                add.data_change = true;
                add.stats = add.stats.as_deref().map(loose_bounds);
                retired.actions.push(Action::Add(add));
            }
        }
        retired.compacted = compact;
        Ok(retired)
    }

    /// Counts (and logs) the files a deletion-vector commit compacted.
    fn count_compaction(&mut self, retired: &Retired, files: &HashMap<String, LiveFile>) {
        if retired.compacted_rows == 0 {
            return;
        }
        info!(
            table = self.uri(),
            files = retired.compacted.len(),
            rows = retired.compacted_rows,
            "compacted small or mostly deleted files into the commit"
        );
        let bytes = retired
            .compacted
            .iter()
            .filter_map(|path| files.get(path))
            .map(|f| u64::try_from(f.add.size).unwrap_or(0))
            .sum();
        self.compacted
            .add(retired.compacted.len(), retired.compacted_rows, bytes);
    }

    /// The files a deletion-vector commit touches: those holding superseded rows, and in the
    /// buckets it changes, the small files, which it compacts once there are more than
    /// `small_files_max` of them in a bucket (the second set).
    fn touched_files(
        &self,
        superseded: &BTreeMap<String, Vec<u64>>,
        changes: &RecordBatch,
    ) -> Result<(HashMap<String, LiveFile>, BTreeSet<String>)> {
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        let changed_buckets: BTreeSet<BucketKey> = bucket_keys(changes)?.into_iter().collect();
        let small_bytes = (self.config.target_file_bytes / 8) as i64;
        let mut small: BTreeMap<BucketKey, Vec<String>> = BTreeMap::new();
        let mut files: HashMap<String, LiveFile> = HashMap::new();
        for f in state.log_data().iter() {
            let path = f.path().to_string();
            let touched = superseded.contains_key(&path);
            if !touched && f.size() >= small_bytes {
                continue; // the common case: neither changed nor small, nothing to build
            }
            #[allow(deprecated)] // add_action: the supported way to re-add a file with a new vector
            let add = f.add_action();
            let bucket = add_bucket(&add)?;
            let is_small = f.size() < small_bytes && changed_buckets.contains(&bucket);
            if is_small {
                small.entry(bucket).or_default().push(path.clone());
            }
            if is_small || touched {
                let rows = f.num_records().map(|n| n as u64).ok_or_else(|| {
                    Error::Internal(format!("data file {path} has no numRecords statistic"))
                })?;
                let remove = f.remove_action(true);
                files.insert(path, LiveFile { add, remove, rows });
            }
        }
        let compact = small
            .into_values()
            .filter(|paths| paths.len() > self.config.small_files_max)
            .flatten()
            .collect();
        Ok((files, compact))
    }

    /// After a deletion-vector commit at `version`: the key index forgets the deleted `keys`
    /// and places the rows of `new_files`. It describes `version` only when the commit read
    /// `read_version` (nobody committed in between); otherwise the next commit rebuilds it.
    async fn index_the_commit(
        &mut self,
        new_files: &[Add],
        keys: &[Vec<u8>],
        is_delete: &[bool],
        key_columns: &[String],
        (table_id, read_version): (&str, u64),
        version: u64,
    ) -> Result<()> {
        let store = self.table.object_store();
        let mut placed = Vec::new();
        for add in new_files {
            // Keys are unique per bucket number: a partitioned table's key holds its
            // partition columns.
            let bucket = add_bucket(add)?.bucket;
            for batch in
                read_key_columns(store.as_ref(), add, key_columns, &self.lake_schema).await?
            {
                placed.push((add.path.clone(), bucket, batch));
            }
        }
        let index = self.key_index.as_mut().expect("ensured above");
        let mut batch = index.batch();
        for (key, _) in keys.iter().zip(is_delete).filter(|(_, d)| **d) {
            batch.remove(key);
        }
        let mut row_in_file: HashMap<String, u64> = HashMap::new();
        for (path, bucket, columns) in placed {
            let encoded = batch.encode(&vec![bucket; columns[0].len()], &columns)?;
            let next = row_in_file.entry(path.clone()).or_default();
            for key in encoded {
                batch.insert(&key, &path, *next);
                *next += 1;
            }
        }
        let describes = (version == read_version + 1).then_some((table_id, version));
        batch.commit(describes)?;
        Ok(())
    }

    /// Writes the rows of data file `file` that `deleted` does not mark into `writer`; returns
    /// how many.
    async fn copy_live_rows(
        &self,
        file: &Add,
        deleted: &RoaringTreemap,
        writer: &mut deltalake::writer::RecordBatchWriter,
    ) -> Result<u64> {
        let store = self.table.object_store();
        copy_rows(
            store.as_ref(),
            &self.lake_schema,
            self.uri(),
            file,
            deleted,
            writer,
        )
        .await
    }

    /// Opens the key index and rebuilds it unless it describes the table's current version.
    /// Returns the Delta table id and the version it describes.
    async fn ensure_key_index(&mut self, key_columns: &[String]) -> Result<(String, u64)> {
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        let table_id = state.metadata().id().to_string();
        let version = state.version();
        if self.key_index.is_none() {
            let types = key_columns
                .iter()
                .map(|k| Ok(self.lake_schema.field_with_name(k)?.data_type().clone()))
                .collect::<Result<Vec<_>>>()?;
            self.key_index = Some(KeyIndex::open(
                self.config.key_index_dir.as_deref(),
                &types,
                self.config.key_index_cache_bytes,
            )?);
        }
        let index = self.key_index.as_mut().expect("opened above");
        if index.describes()?.as_ref() == Some(&(table_id.clone(), version)) {
            return Ok((table_id, version));
        }
        let started = std::time::Instant::now();
        let files: Vec<(Add, i32)> = state
            .log_data()
            .iter()
            .map(|f| {
                #[allow(deprecated)] // the partition values and deletion vector of the file
                let add = f.add_action();
                let bucket = add_bucket(&add)?.bucket;
                Ok((add, bucket))
            })
            .collect::<Result<_>>()?;
        let lake_schema = self.lake_schema.clone();
        let store = self.table.object_store();
        index.clear()?;
        let mut batch = index.batch();
        let mut entries = 0u64;
        for (add, bucket) in &files {
            let path = &add.path;
            let deleted = match &add.deletion_vector {
                Some(v) => dv::read(store.as_ref(), &Path::from(""), v).await?,
                None => RoaringTreemap::new(),
            };
            let mut row = 0u64;
            for columns in read_key_columns(store.as_ref(), add, key_columns, &lake_schema).await? {
                let encoded = batch.encode(&vec![*bucket; columns[0].len()], &columns)?;
                for key in encoded {
                    if !deleted.contains(row) {
                        batch.insert(&key, path, row);
                        entries += 1;
                    }
                    row += 1;
                }
                if batch.len() >= key_index::REBUILD_BATCH {
                    batch.flush()?;
                }
            }
        }
        batch.commit(Some((table_id.as_str(), version)))?;
        index.compact()?;
        info!(
            table = self.uri(),
            version,
            files = files.len(),
            keys = entries,
            seconds = started.elapsed().as_secs_f64(),
            "rebuilt the key index from the lake"
        );
        Ok((table_id, version))
    }

    /// Makes the index describe nothing, so the next commit rebuilds it.
    fn forget_key_index(&mut self) -> Result<()> {
        match self.key_index.as_mut() {
            Some(index) => index.batch().commit(None),
            None => Ok(()),
        }
    }

    /// The plan's staged changes the lake lacks, reduced to the last change per key; `None`
    /// when there are none.
    async fn reduced_changes(
        &self,
        plan: &CommitPlan,
        key_columns: &[String],
    ) -> Result<Option<RecordBatch>> {
        let changes = self.read_staged(plan).await?;
        if changes.num_rows() == 0 {
            return Ok(None);
        }
        Ok(Some(last_change_per_key(&changes, key_columns)?))
    }

    /// The staged rows the lake does not have yet (offset >= the bucket's txn version).
    async fn read_staged(&self, plan: &CommitPlan) -> Result<RecordBatch> {
        let store = self.table.object_store();
        let staged_schema = self.staged_schema();
        let mut batches = Vec::new();
        for path in &plan.staged {
            let bytes = read_object(store.as_ref(), path).await?;
            for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
                let batch = batch?;
                let keep = not_in_lake(&batch, &plan.lake_offsets)?;
                // A file staged before the table gained columns lacks them.
                let kept = filter_record_batch(&batch, &keep)?;
                batches.push(super::schema::conform_stored(&kept, &staged_schema)?);
            }
        }
        Ok(concat_batches(&staged_schema, &batches)?)
    }

    /// Lake columns plus `__change_type`: what primary-key writers stage.
    pub fn staged_schema(&self) -> SchemaRef {
        let mut fields: Vec<_> = self.lake_schema.fields().iter().cloned().collect();
        fields.push(Arc::new(arrow::datatypes::Field::new(
            CHANGE_TYPE_COLUMN,
            arrow::datatypes::DataType::Int8,
            false,
        )));
        Arc::new(arrow::datatypes::Schema::new(fields))
    }

    /// Staged files are garbage once their commit landed; failing to delete them costs space.
    async fn delete_staged(&self, staged: &[String]) {
        let store = self.table.object_store();
        for path in staged {
            if let Err(e) = store.delete(&Path::from(path.as_str())).await {
                warn!(table = self.uri(), path, error = %e, "could not delete a staged change file");
            }
        }
    }
}

/// How a deletion-vector commit describes itself in the Delta log: a MERGE by bucket and key,
/// with no predicate, so any concurrent append conflicts with it.
fn dv_merge_operation(key_columns: &[String]) -> DeltaOperation {
    DeltaOperation::Merge {
        // No predicate: any concurrent append conflicts with this commit.
        predicate: None,
        merge_predicate: Some(format!(
            "target.{BUCKET_COLUMN} = source.{BUCKET_COLUMN} AND key ({})",
            key_columns.join(", ")
        )),
        matched_predicates: vec![
            MergePredicate {
                action_type: "delete".into(),
                predicate: Some("source is a delete".into()),
            },
            MergePredicate {
                action_type: "update".into(),
                predicate: None,
            },
        ],
        not_matched_predicates: vec![MergePredicate {
            action_type: "insert".into(),
            predicate: Some("source is not a delete".into()),
        }],
        not_matched_by_source_predicates: Vec::new(),
    }
}

/// Milliseconds since the epoch (0 on a clock before it), as Delta's actions record time.
pub(super) fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The rows a primary-key commit's changes supersede (see `superseded_rows`).
struct Superseded {
    /// The changes' keys, encoded by the key index, in the changes' order.
    keys: Vec<Vec<u8>>,
    /// Per data file, the row numbers of older images.
    at: BTreeMap<String, Vec<u64>>,
    /// Per change, whether it is a delete (no new image).
    is_delete: Vec<bool>,
}

/// What retiring superseded rows produced (see `retire_superseded`).
struct Retired {
    /// Remove actions, and adds of the files that keep rows under a new deletion vector.
    actions: Vec<Action>,
    /// The new deletion vectors, in one file.
    vectors: DvFileWriter,
    /// The files whose live rows were copied into the commit's new files.
    compacted: BTreeSet<String>,
    compacted_rows: u64,
}

/// A data file a primary-key commit touches.
struct LiveFile {
    add: Add,
    remove: deltalake::kernel::Remove,
    /// Rows in the file, deleted ones included.
    rows: u64,
}

/// Data files do not hold the partition columns (`__bucket`, and a partitioned table's keys
/// and `__partition_id`); puts them back from the file's partition values, typed as the lake
/// schema has them, for a writer that rewrites the rows.
fn with_partition_columns(
    batch: RecordBatch,
    file: &Add,
    lake_schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
    for (name, value) in &file.partition_values {
        if batch.column_by_name(name).is_some() {
            continue;
        }
        let field = lake_schema.field_with_name(name).map_err(|_| {
            Error::Internal(format!(
                "data file {} has partition value {name:?}, which is not a lake column",
                file.path
            ))
        })?;
        let text: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
            value.as_deref();
            batch.num_rows()
        ]));
        let typed = arrow::compute::cast(&text, field.data_type()).map_err(|e| {
            Error::Internal(format!(
                "partition value {value:?} of {name:?} in data file {} is not a {}: {e}",
                file.path,
                field.data_type()
            ))
        })?;
        columns.push(typed);
        fields.push(Arc::new(field.clone()));
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )?)
}

/// Writes the rows of data file `file` (in `store`, of table `uri` with schema `lake_schema`)
/// that `deleted` does not mark into `writer`; returns how many.
pub(super) async fn copy_rows(
    store: &dyn object_store::ObjectStore,
    lake_schema: &SchemaRef,
    uri: &str,
    file: &Add,
    deleted: &RoaringTreemap,
    writer: &mut deltalake::writer::RecordBatchWriter,
) -> Result<u64> {
    let bytes = read_object(store, &file.path).await?;
    let (mut row, mut copied) = (0u64, 0u64);
    for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
        let batch = batch?;
        let keep: BooleanArray = (0..batch.num_rows() as u64)
            .map(|i| Some(!deleted.contains(row + i)))
            .collect();
        row += batch.num_rows() as u64;
        let batch = filter_record_batch(&batch, &keep)?;
        if batch.num_rows() == 0 {
            continue;
        }
        let batch = with_partition_columns(batch, file, lake_schema)?;
        copied += batch.num_rows() as u64;
        let batch = super::schema::conform_stored(&batch, lake_schema)?;
        deltalake::writer::DeltaWriter::write(writer, batch)
            .await
            .map_err(Error::delta(uri))?;
    }
    Ok(copied)
}

/// The bucket of every row of a changelog or lake batch: `__bucket`, with `__partition_id`
/// when the batch has it.
fn bucket_keys(batch: &RecordBatch) -> Result<Vec<BucketKey>> {
    let buckets = int_column::<Int32Array>(batch, BUCKET_COLUMN)?;
    let partitions = match batch.column_by_name(PARTITION_ID_COLUMN) {
        Some(_) => Some(int_column::<Int64Array>(batch, PARTITION_ID_COLUMN)?),
        None => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| BucketKey {
            partition: partitions.map(|p| p.value(i)),
            bucket: buckets.value(i),
        })
        .collect())
}

/// The key columns of a batch, in key order.
fn key_arrays(batch: &RecordBatch, key_columns: &[String]) -> Result<Vec<ArrayRef>> {
    key_columns
        .iter()
        .map(|k| {
            batch
                .column_by_name(k)
                .cloned()
                .ok_or_else(|| Error::Batch(format!("key column {k:?} is missing")))
        })
        .collect()
}

/// The whole object at `path` (relative to the table root of `store`).
async fn read_object(store: &dyn object_store::ObjectStore, path: &str) -> Result<bytes::Bytes> {
    let storage = |source| Error::Storage {
        path: path.to_string(),
        source,
    };
    store
        .get(&Path::from(path))
        .await
        .map_err(storage)?
        .bytes()
        .await
        .map_err(storage)
}

/// The key columns of a data file, batch by batch in row order.
/// A partitioned table's key holds its partition columns, which live in the file's partition
/// values, not in the file: they are put back from there.
async fn read_key_columns(
    store: &dyn object_store::ObjectStore,
    file: &Add,
    key_columns: &[String],
    lake_schema: &SchemaRef,
) -> Result<Vec<Vec<ArrayRef>>> {
    let bytes = read_object(store, &file.path).await?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let in_file = key_columns
        .iter()
        .filter(|k| !file.partition_values.contains_key(*k))
        .map(String::as_str);
    let mask = ProjectionMask::columns(builder.parquet_schema(), in_file);
    let mut out = Vec::new();
    for batch in builder.with_projection(mask).build()? {
        let batch = with_partition_columns(batch?, file, lake_schema)?;
        out.push(key_arrays(&batch, key_columns)?);
    }
    Ok(out)
}

/// Statistics of a file that now has a deletion vector: its min/max values may be wider than
/// its live rows (Delta's `tightBounds`).
fn loose_bounds(stats: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(stats) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("tightBounds".into(), serde_json::Value::Bool(false));
            serde_json::Value::Object(map).to_string()
        }
        _ => stats.to_string(),
    }
}

fn not_in_lake(batch: &RecordBatch, lake: &BTreeMap<BucketKey, i64>) -> Result<BooleanArray> {
    let buckets = bucket_keys(batch)?;
    let offsets = int_column::<Int64Array>(batch, OFFSET_COLUMN)?;
    Ok(buckets
        .iter()
        .enumerate()
        .map(|(i, b)| Some(lake.get(b).is_none_or(|&v| offsets.value(i) >= v)))
        .collect())
}

pub(crate) fn int_column<'a, A: Array + 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a A> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<A>())
        .ok_or_else(|| {
            Error::Batch(format!(
                "system column {name:?} is missing or has the wrong type (see changelog.rs)"
            ))
        })
}

/// The bucket a data file holds rows of, from its partition values.
pub(crate) fn add_bucket(add: &Add) -> Result<BucketKey> {
    let value = |column: &str| {
        add.partition_values
            .get(column)
            .and_then(|v| v.as_deref())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    Error::Internal(format!(
                        "data file {} has {column} partition value {v:?}, not a number",
                        add.path
                    ))
                })
            })
            .transpose()
    };
    let bucket = value(BUCKET_COLUMN)?.ok_or_else(|| {
        Error::Internal(format!(
            "data file {} has no {BUCKET_COLUMN} partition value",
            add.path
        ))
    })?;
    Ok(BucketKey {
        partition: value(PARTITION_ID_COLUMN)?,
        bucket: i32::try_from(bucket)
            .map_err(|_| Error::Internal(format!("data file {} has bucket {bucket}", add.path)))?,
    })
}

/// The smallest `__offset` recorded in an add's statistics, if they record it.
pub(super) fn first_offset(add: &Add) -> Option<i64> {
    let stats: serde_json::Value = serde_json::from_str(add.stats.as_deref()?).ok()?;
    stats.get("minValues")?.get(OFFSET_COLUMN)?.as_i64()
}

/// Rows recorded in an add's statistics.
pub(crate) fn add_rows(add: &Add) -> Result<u64> {
    add.stats
        .as_deref()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get("numRecords").and_then(serde_json::Value::as_u64))
        .ok_or_else(|| {
            Error::Internal(format!(
                "data file {} has no numRecords statistic",
                add.path
            ))
        })
}

/// **Assertion at the commit edge:** for log tables the txn ranges of a committable cover
/// exactly its files: every file belongs to a bucket with a range, and the rows of a bucket's
/// files equal the rows the writer counted in that range.
fn check_adds_cover_ranges(c: &Committable, kept: &BTreeSet<BucketKey>) -> Result<()> {
    if c.adds.is_empty() {
        return Ok(());
    }
    let mut rows: BTreeMap<BucketKey, u64> = BTreeMap::new();
    for add in &c.adds {
        *rows.entry(add_bucket(add)?).or_default() += add_rows(add)?;
    }
    let want: BTreeMap<BucketKey, u64> = c.buckets.iter().map(|(&b, r)| (b, r.rows)).collect();
    if rows != want {
        return Err(Error::Internal(format!(
            "checkpoint {} writer {}: files hold rows {rows:?} per bucket but the txn ranges count {want:?}",
            c.checkpoint_id, c.writer
        )));
    }
    debug_assert!(kept.iter().all(|b| want.contains_key(b)));
    Ok(())
}
