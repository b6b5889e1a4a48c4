//! The commit of a primary-key table: a MERGE by bucket and key, or on a table with deletion
//! vectors, the rows the changes supersede (found through the key index) marked deleted in
//! the files that hold them and the new images in new files, in one Delta commit with the txn
//! actions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Not as _;

use arrow::array::{ArrayRef, BooleanArray, Int8Array, Int32Array, Int64Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::common::Column;
use datafusion::logical_expr::{Expr, col, lit};
use datafusion::prelude::SessionContext;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{Action, Add};
use deltalake::protocol::{DeltaOperation, MergePredicate};
use deltalake::{Path, TableProperty};
use object_store::ObjectStoreExt as _;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use roaring::RoaringTreemap;
use tracing::info;

use super::{CommitPlan, LakeTable};
use crate::changelog::{BUCKET_COLUMN, BucketKey, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN};
use crate::delta::dv::{self, DvFileWriter};
use crate::delta::error::{Error, Result};
use crate::delta::files::writer_properties;
use crate::delta::files::{
    add_bucket, bucket_keys, copy_rows, int_column, read_object, with_partition_columns,
};
use crate::delta::key_index::{self, KeyIndex};
use crate::delta::reduce::last_change_per_key;

impl LakeTable {
    /// The commit of a plan's staged changes (offsets the lake already has filtered out,
    /// reduced to the last change per key): with deletion vectors when the table has them,
    /// else a MERGE. `None` when there are no changes, or they changed nothing.
    pub(super) async fn commit_changes(
        &mut self,
        plan: &CommitPlan,
        key_columns: &[String],
        properties: CommitProperties,
    ) -> Result<Option<u64>> {
        let deletion_vectors = self.has_deletion_vectors()?;
        let Some(changes) = self.reduced_changes(plan, key_columns).await? else {
            return Ok(None);
        };
        self.retire_recreated_partitions(&changes).await?;
        if deletion_vectors {
            self.commit_with_deletion_vectors(&changes, key_columns, properties)
                .await
        } else {
            self.merge(changes, key_columns, properties).await
        }
    }

    /// A partition dropped and created again under its name is a new partition id with the same
    /// partition values, whose keys are the dropped one's keys. One row per key is a
    /// primary-key lake's invariant, so before the first commit of such a partition id, the
    /// rows of every older partition id with the same values (the dropped one's last images,
    /// kept in the lake as its history until then) leave the lake, in a commit of their own:
    /// a version in between shows neither, which is the hot store's state (the old partition
    /// is gone, the new one's rows not yet tiered). The key index then describes an older
    /// version and is rebuilt by the next commit.
    async fn retire_recreated_partitions(&mut self, changes: &RecordBatch) -> Result<()> {
        if self.config.partition_keys.is_empty() {
            return Ok(());
        }
        let incoming = partition_values_of(changes, &self.config.partition_keys)?;
        let state = self.table.snapshot().map_err(Error::delta(self.uri()))?;
        let mut removes = Vec::new();
        let mut retired_ids = BTreeSet::new();
        for f in state.log_data().iter() {
            #[allow(deprecated)] // the partition values of the file
            let add = f.add_action();
            let Some(id) = add_bucket(&add)?.partition else {
                continue;
            };
            let values: Vec<Option<String>> = self
                .config
                .partition_keys
                .iter()
                .map(|k| add.partition_values.get(k).cloned().flatten())
                .collect();
            let superseded = incoming
                .iter()
                .any(|(new_id, new_values)| *new_id > id && *new_values == values);
            if superseded {
                retired_ids.insert(id);
                removes.push(Action::Remove(f.remove_action(true)));
            }
        }
        if removes.is_empty() {
            return Ok(());
        }
        let version = self
            .commit_operation(
                removes,
                CommitProperties::default(),
                DeltaOperation::Delete { predicate: None },
            )
            .await?;
        self.refresh().await?;
        self.forget_key_index()?;
        info!(
            table = self.uri(),
            version,
            partition_ids = ?retired_ids,
            "a partition was created again under its name: the dropped partition's rows left the lake (one row per key)"
        );
        Ok(())
    }

    /// MERGE of the changes by bucket and key. `None` when the merge changed nothing.
    async fn merge(
        &mut self,
        changes: RecordBatch,
        key_columns: &[String],
        properties: CommitProperties,
    ) -> Result<Option<u64>> {
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
        changes: &RecordBatch,
        key_columns: &[String],
        properties: CommitProperties,
    ) -> Result<Option<u64>> {
        let (table_id, read_version) = self.ensure_key_index(key_columns).await?;
        let superseded = self.superseded_rows(changes, key_columns)?;
        // The new images go into new files, and so do the live rows of files compacted below.
        let mut writer = deltalake::writer::RecordBatchWriter::for_table(&self.table)
            .map_err(Error::delta(self.uri()))?
            .with_target_file_size(self.config.target_file_bytes)
            .with_writer_properties(writer_properties(&self.config));
        let keep: BooleanArray = superseded.is_delete.iter().map(|d| Some(!d)).collect();
        let upserts = filter_record_batch(changes, &keep)?;
        if upserts.num_rows() > 0 {
            let images = crate::delta::schema::conform_stored(&upserts, &self.lake_schema)?;
            deltalake::writer::DeltaWriter::write(&mut writer, images)
                .await
                .map_err(Error::delta(self.uri()))?;
        }
        let (files, compact) = self.touched_files(&superseded.at, changes)?;
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
        let now_ms = silt_rt::clock::now_ms();
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
                batches.push(crate::delta::schema::conform_stored(&kept, &staged_schema)?);
            }
        }
        Ok(concat_batches(&staged_schema, &batches)?)
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

fn not_in_lake(batch: &RecordBatch, lake: &BTreeMap<BucketKey, i64>) -> Result<BooleanArray> {
    let buckets = bucket_keys(batch)?;
    let offsets = int_column::<Int64Array>(batch, OFFSET_COLUMN)?;
    Ok(buckets
        .iter()
        .enumerate()
        .map(|(i, b)| Some(lake.get(b).is_none_or(|&v| offsets.value(i) >= v)))
        .collect())
}

/// The distinct partitions of `changes`: each partition id with its partition values rendered
/// as Delta renders partition values (`None` for a null).
fn partition_values_of(
    changes: &RecordBatch,
    partition_keys: &[String],
) -> Result<BTreeSet<(i64, Vec<Option<String>>)>> {
    let ids = int_column::<Int64Array>(changes, crate::changelog::PARTITION_ID_COLUMN)?;
    let columns = partition_keys
        .iter()
        .map(|k| {
            changes
                .column_by_name(k)
                .cloned()
                .ok_or_else(|| Error::Batch(format!("partition column {k:?} is missing")))
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let mut out = BTreeSet::new();
    for row in 0..changes.num_rows() {
        let values = columns
            .iter()
            .map(|c| {
                if c.is_null(row) {
                    return Ok(None);
                }
                arrow::util::display::array_value_to_string(c, row)
                    .map(Some)
                    .map_err(Error::from)
            })
            .collect::<Result<Vec<_>>>()?;
        out.insert((ids.value(row), values));
    }
    Ok(out)
}
