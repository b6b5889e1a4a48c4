//! The lake table: opening (create if missing), its txn offsets, and the one-commit-per-
//! checkpoint protocol: `plan` reads the lake's txn versions and keeps only what the lake does
//! not have yet; `apply` makes the Delta commit (append or MERGE) with the txn actions in it.
//! The commit of a primary-key table lives in `primary_key`; the reading of data files in
//! `delta::files`, the txn actions and app ids in `delta::log`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{BooleanArray, Int64Array};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::{
    CommitBuilder, CommitProperties, TableReference, TransactionError,
};
use deltalake::kernel::{Action, Add, StructType, Transaction};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableError, Path, TableProperty};
use object_store::ObjectStoreExt as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use silt_rt::clock::now_ms;
use tracing::{info, warn};

use super::committable::{BucketRange, Committable};
use super::compaction::Compactor;
use super::error::{Error, GapAfter, Result};
use super::files::{add_bucket, add_rows, int_column, read_object, with_partition_columns};
use super::key_index::KeyIndex;
use super::log::{app_id, load_existing, table_url, txn_versions};
use super::maintenance;
use super::owner::{DESCRIPTION_PREFIX, OWNER_KEY, owner_of, recorded_owner};
use super::schema::lake_arrow_schema_of;
use super::{DeltaSinkConfig, TableKind};
use crate::changelog::{BucketKey, CHANGE_TYPE_COLUMN, OFFSET_COLUMN};
use crate::lake_format::{
    CompactionReport, LakeCommit, LakeOffsets, LakeOwner, LakeSize, MaintenanceReport,
};

mod primary_key;

static CREATE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// The Delta table at the config's URI, created when missing (partitioned by `__bucket`, owned
/// by the config's table id). Racing creators are fine: the loser reloads. The caller holds
/// `CREATE_LOCK`.
async fn load_or_create(config: &DeltaSinkConfig, lake_schema: &SchemaRef) -> Result<DeltaTable> {
    let uri = config.table_uri.as_str();
    let url = table_url(uri)?;
    let table =
        DeltaTable::try_from_url_with_storage_options(url.clone(), config.storage_options.clone())
            .await
            .map_err(Error::delta(uri))?;
    if table.version().is_some() {
        return Ok(table);
    }
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
        create =
            create.with_configuration_property(TableProperty::EnableDeletionVectors, Some("true"));
    }
    match create.await {
        Ok(t) => {
            info!(table = uri, "created delta table");
            Ok(t)
        }
        Err(e) => {
            warn!(table = uri, error = %e, "create failed; reloading in case another writer created it");
            DeltaTable::try_from_url_with_storage_options(url, config.storage_options.clone())
                .await
                .map_err(Error::delta(uri))
        }
    }
}

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
        let lake_schema = lake_arrow_schema_of(&config.user_schema, config.is_partitioned())?;
        // Subtasks of one job open concurrently; deltalake lets two racing creators both commit
        // a CREATE (the second as version 1, with a new table id), so creation is serialized
        // within the process. Two processes tiering one table is a misconfiguration anyway.
        let _creating = CREATE_LOCK.lock().await;
        let table = load_or_create(&config, &lake_schema).await?;
        let removes_seen = maintenance::RemovesSeen::new(config.vacuum_removes_bytes_max);
        let mut lake = LakeTable {
            config,
            table,
            lake_schema,
            key_index: None,
            compacted: CompactionReport::default(),
            compactor: Compactor::default(),
            removes_seen,
        };
        lake.check_owner()?;
        lake.add_gained_columns().await?;
        lake.check_schema()?;
        lake.apply_own_retention().await?;
        Ok(lake)
    }

    /// Only a table this sink owns gets silt's retention; a table someone else made keeps
    /// theirs.
    async fn apply_own_retention(&mut self) -> Result<()> {
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        if recorded_owner(state.metadata()).is_some() {
            self.table = maintenance::apply_retention_properties(
                self.table.clone(),
                &self.config.retention,
                &self.config.table_uri,
            )
            .await?;
        }
        Ok(())
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
            let (kept, trims) = self.keep_ranges(c, &mut plan, &mut ends)?;
            if kept.is_empty() {
                continue;
            }
            check_adds_cover_ranges(c, &kept)?;
            self.keep_files(c, &kept, &trims, &mut plan).await?;
            plan.staged.extend(c.staged.iter().cloned());
        }
        Ok(plan)
    }

    /// The buckets of `c` whose ranges the plan keeps (their txn versions and rows added to
    /// it), and of those, the ones the lake already holds in part, with the offset to keep
    /// from. `ends` says per bucket where the next kept range must continue from.
    fn keep_ranges(
        &self,
        c: &Committable,
        plan: &mut CommitPlan,
        ends: &mut BTreeMap<BucketKey, (i64, GapAfter)>,
    ) -> Result<(BTreeSet<BucketKey>, BTreeMap<BucketKey, i64>)> {
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
        Ok((kept, trims))
    }

    /// Adds the files of `c` in `kept` buckets to the plan; those of a bucket in `trims` are
    /// rewritten without the rows below its offset, which the lake already has.
    async fn keep_files(
        &self,
        c: &Committable,
        kept: &BTreeSet<BucketKey>,
        trims: &BTreeMap<BucketKey, i64>,
        plan: &mut CommitPlan,
    ) -> Result<()> {
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
        for (&bucket, &from) in trims {
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
        Ok(())
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
        let now_ms = now_ms();
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
                let merged = self
                    .commit_changes(plan, &key_columns, properties.clone())
                    .await?;
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
            size: self.size(),
        }
    }

    /// The current version's data files and their bytes (one pass over the snapshot's file
    /// list, which the table holds in memory anyway).
    fn size(&self) -> Option<LakeSize> {
        let files = self.table.snapshot().ok()?.log_data();
        Some(LakeSize {
            files: files.num_files() as u64,
            bytes: files.iter().map(|f| f.size().max(0) as u64).sum(),
        })
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
