//! The Delta Lake tiering sink, two-phase.
//!
//! Writers ([`DeltaWriter`], parallelism N) turn changelog batches into Parquet files under the
//! table (log tables) or into staged change sets (primary-key tables). At checkpoint barrier `n`
//! a writer closes what it has open and emits one committable for `n` downstream, ahead of the
//! barrier: the files as Delta add actions (or the staged change files) plus, per bucket, the
//! first offset, the end offset (last offset + 1) and the row count.
//!
//! The committer ([`DeltaCommitter`], parallelism 1) keeps committables in its checkpoint state
//! and, when the engine reports checkpoint `n` complete, makes ONE Delta commit holding every
//! add of checkpoints `<= n` and one `txn` action per bucket (app id `silt-<table_id>-<bucket>`,
//! version = end offset). Log tables commit the adds; primary-key tables commit a MERGE of the
//! change set reduced to the last change per key, with the txn actions in the same commit.
//!
//! **Invariant:** offsets and files are committed in one Delta commit. The txn version of a
//! bucket is the end offset of the data the lake holds for it, so the lake's txn actions are the
//! truth about what was tiered ([`read_lake_offsets`]).
//!
//! **Contract (idempotence):** replaying a committable is a no-op for every bucket whose txn
//! version in the lake already reaches its end offset. A committable restored from a complete
//! checkpoint is therefore committed in `open` without risk of duplicates, and a concurrent
//! writer that commits the same app ids first makes Delta's conflict check reject ours.
//!
//! **Contract (no holes):** a bucket range says where it continues from (the end of its
//! writer's previous range, or the source's start offset); a commit whose range continues after
//! where the lake ends for that bucket fails with [`Error::OffsetGap`] and calls
//! `on_offset_gap`, so the txn version never moves over offsets that were not written.
//!
//! **Ownership:** a lake table belongs to one silt table id (`silt.table.id` in its
//! configuration); a sink refuses a lake of another id, and readers treat one as absent.
//!
//! **Layout:** tables are partitioned by `__bucket`, and each log-table file holds one bucket's
//! rows in offset order, a range no other file of the bucket overlaps. After a log commit a
//! run of the newest small files of each bucket it appended to is rewritten into one file, off
//! the commit path, and a later commit carries the removes and the add (`compaction.rs`:
//! `dataChange: false`), so a bucket holds a bounded number of small files whatever the
//! freshness.
//!
//! **Primary-key commits** use Delta deletion vectors (tables created with
//! `delta.enableDeletionVectors`): the key index (`key_index.rs`, fjall on local disk, key ->
//! file and row) finds the live row of every changed key; the commit marks those rows deleted
//! in a vector per touched file (`dv.rs`, Delta's format), writes the new images of upserted
//! keys into new files, and carries the txn actions, all in one Delta commit. Its cost grows
//! with the keys changed and the files they touch, not with the rows of the table
//! (`silt bench pk` measures it). A table without the feature (created before, or with
//! `deletion_vectors = false`) gets a copy-on-write MERGE, which rewrites every file holding a
//! changed key. Compaction rides along in the same commit, local to the buckets it changes: a
//! file whose rows are all superseded is removed; a file at least half deleted, and the small
//! files of a bucket once it has more than `small_files_max`, are rewritten with their live
//! rows into the commit's new files. What a commit rewrites is bounded by one bucket's small
//! files plus files that lost half their rows (each row moves at most once per halving), never
//! by the table.
//!
//! **Limits:** a log writer holds one open file per bucket it sees, each bounded by
//! `row_group_rows_max` rows in memory, and closes them once together they reach
//! `target_file_bytes` (`log_files`); a primary-key writer
//! buffers at most `change_buffer_bytes_max` of changes before staging them. Staged files of
//! checkpoints that never completed stay under `_silt_staging/` (hidden from Delta readers)
//! until the committer's maintenance sweeps them (see `maintenance`), with the data files of
//! attempts that never committed and the files no version inside the retention needs.

mod committable;
mod committer;
mod compaction;
mod dv;
mod error;
mod files;
mod format;
mod key_index;
mod local_store;
mod log;
mod log_files;
mod maintenance;
mod owner;
mod reduce;
mod schema;
mod table;
mod writer;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::changelog::BucketKey;
use silt_engine::{JobGraph, Operator, Partitioning, TaskContext, VertexId};

pub use crate::lake_format::{
    CompactionReport, FaultHook, FaultPoint, LakeCommit, LakeCommitHook, LakeOffsets, LakeOwner,
    MaintenanceReport, OffsetGapHook, TableKind,
};
pub use committable::{BucketRange, Committable};
pub use committer::DeltaCommitter;
pub use error::{Error, GapAfter, Result};
pub use files::writer_properties;
pub use format::DeltaFormat;
pub use key_index::{
    CACHE_BYTES_DEFAULT as KEY_INDEX_CACHE_BYTES_DEFAULT, KeyIndex, KeyIndexMemory,
    open_indexes_memory,
};
pub use local_store::{LocalLakeStore, LocalLakeStoreFactory, read_local_files_on_io_threads};
pub use log::{app_id, bucket_of_app_id};
pub(crate) use log::{load_existing, txn_versions};
pub use log_files::LogFiles;
pub use maintenance::Retention;
pub use maintenance::STAGING_DIR;
pub(crate) use owner::owner_of;
pub use owner::{OWNER_KEY, lake_owner, move_lake, recorded_owner};
pub(crate) use reduce::{encode_keys, last_change_per_key};
pub use schema::{check_lake_row_type, lake_arrow_schema, lake_arrow_schema_of, lake_data_type};
pub use table::{CommitPlan, LakeTable, read_lake_offsets};
pub use writer::DeltaWriter;

/// Registers the object stores of lake URLs, once per process: deltalake's for `s3://` and
/// `s3a://` (deltalake 1.1 also registers them from a constructor, which a linker may drop when
/// nothing else of the `deltalake` crate itself is linked; calling this makes it certain), and
/// [`LocalLakeStore`] for `file://`.
pub fn register_object_stores() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        deltalake::aws::register_handlers(None);
        deltalake::logstore::object_store_factories().insert(
            url::Url::parse("file://").expect("a valid url"),
            std::sync::Arc::new(LocalLakeStoreFactory),
        );
    });
}

/// Configuration of one Delta sink. jobs/ maps definitions into it; no serde here.
#[derive(Clone)]
pub struct DeltaSinkConfig {
    /// A local path or any object store URL deltalake supports (`file://`, `s3://`, ...).
    pub table_uri: String,
    /// Passed to deltalake's object store (credentials, endpoint, `allow_http`, ...).
    pub storage_options: HashMap<String, String>,
    pub kind: TableKind,
    /// Names the txn app ids (`silt-<table_id>-<bucket>`, `silt-<table_id>-p<partition
    /// id>-<bucket>`); stable for the life of the table.
    pub table_id: String,
    /// The user columns a partitioned table is partitioned by, in order (empty: unpartitioned).
    /// A partitioned table's lake is partitioned by them, then `__partition_id` and `__bucket`,
    /// and its changelog must carry `__partition_id`.
    pub partition_keys: Vec<String>,
    /// The user columns of the changelog (without `__bucket`, `__offset`, `__timestamp`,
    /// `__change_type`). Their types are mapped to Delta types when the sink opens.
    pub user_schema: SchemaRef,
    /// A log writer closes its open data files once together they reach this size; a
    /// primary-key commit's new files and a compaction's rewrite roll a file at it.
    pub target_file_bytes: u64,
    /// Rows per Parquet row group; bounds what a writer holds in memory per open file.
    pub row_group_rows_max: usize,
    /// Primary-key tables: changes a writer buffers (Arrow bytes) before it reduces them and
    /// stages them in a file.
    pub change_buffer_bytes_max: usize,
    /// Primary-key tables created by this sink get Delta deletion vectors: a commit marks the
    /// rows its changes supersede as deleted (found through a key index) and adds the new
    /// images in new files, so its cost grows with the keys changed. `false`, or a table that
    /// exists without the feature, commits a copy-on-write MERGE instead, whose cost grows with
    /// the table but whose files any Parquet reader can read without Delta.
    pub deletion_vectors: bool,
    /// Where the key index of a primary-key table with deletion vectors lives (a local
    /// directory, kept across restarts). `None`: a temporary directory, rebuilt from the table
    /// at every start.
    pub key_index_dir: Option<std::path::PathBuf>,
    /// The key index's block cache (`lake.key_index_cache_bytes`).
    pub key_index_cache_bytes: u64,
    /// Primary-key tables with deletion vectors: a commit that changes a bucket holding more
    /// than this many small files (under `target_file_bytes / 8`) rewrites them into one. Files
    /// at least half deleted are rewritten whatever this says.
    pub small_files_max: usize,
    /// Retries of a Delta commit that lost a race for a version number (conflicts are checked
    /// on each retry; a conflicting commit fails at once).
    pub commit_retries_max: usize,
    /// Called after every successful commit (and after a replay found the lake already
    /// ahead), e.g. to update hotstore's lake-offset registry. An error fails the job, whose
    /// restart replays the committable (a no-op) and calls the hook again.
    pub on_commit: Option<LakeCommitHook>,
    /// Called at the committer's dangerous points, so tests can kill the process exactly there.
    pub fault_injection: Option<FaultHook>,
    /// Where the source feeding this sink starts each bucket when the job starts without a
    /// checkpoint (the tiering job: the lake's txn offsets, else the changelog's earliest
    /// offsets). Writers continue their first range of a bucket from here, and a commit for a
    /// bucket the lake holds nothing of must not continue from a later offset (see
    /// [`Error::OffsetGap`]). `None`: not known (a job reading from `latest` or a timestamp).
    pub start_offsets: Option<BTreeMap<BucketKey, i64>>,
    /// Called when a commit is refused for a gap in the offsets ([`Error::OffsetGap`]), before
    /// the error fails the job. The job's restarts restore the same checkpoint and would meet
    /// the same gap, so the owner of the job decides how to start over (the tiering service
    /// discards the job's checkpoints and starts it again from the lake's txn offsets).
    pub on_offset_gap: Option<OffsetGapHook>,
    /// What the lake keeps of removed files and old versions, and how often the committer
    /// deletes the rest (see [`Retention`]).
    pub retention: Retention,
    /// Memory for the deletion vectors that the commits inside the vacuum age removed
    /// (`lake.vacuum_removes_bytes_max`, 16 bytes each). Past it, maintenance deletes no old
    /// vector until the oldest entries age out.
    pub vacuum_removes_bytes_max: usize,
}

impl DeltaSinkConfig {
    pub const TARGET_FILE_BYTES_DEFAULT: u64 = 128 * 1024 * 1024;
    pub const ROW_GROUP_ROWS_DEFAULT: usize = 64 * 1024;
    pub const CHANGE_BUFFER_BYTES_DEFAULT: usize = 64 * 1024 * 1024;
    pub const COMMIT_RETRIES_DEFAULT: usize = 15;
    pub const SMALL_FILES_MAX_DEFAULT: usize = 16;
    /// 1 Mi vectors removed inside the vacuum age (e.g. 1.7 a second over 7 days).
    pub const VACUUM_REMOVES_BYTES_DEFAULT: usize = 16 * 1024 * 1024;

    /// A config with default limits.
    pub fn new(
        table_uri: impl Into<String>,
        table_id: impl Into<String>,
        kind: TableKind,
        user_schema: SchemaRef,
    ) -> Self {
        DeltaSinkConfig {
            table_uri: table_uri.into(),
            storage_options: HashMap::new(),
            kind,
            table_id: table_id.into(),
            partition_keys: Vec::new(),
            user_schema,
            target_file_bytes: Self::TARGET_FILE_BYTES_DEFAULT,
            row_group_rows_max: Self::ROW_GROUP_ROWS_DEFAULT,
            change_buffer_bytes_max: Self::CHANGE_BUFFER_BYTES_DEFAULT,
            deletion_vectors: true,
            key_index_dir: None,
            key_index_cache_bytes: key_index::CACHE_BYTES_DEFAULT,
            small_files_max: Self::SMALL_FILES_MAX_DEFAULT,
            commit_retries_max: Self::COMMIT_RETRIES_DEFAULT,
            on_commit: None,
            fault_injection: None,
            start_offsets: None,
            on_offset_gap: None,
            retention: Retention::default(),
            vacuum_removes_bytes_max: Self::VACUUM_REMOVES_BYTES_DEFAULT,
        }
    }

    /// Checks what can be checked without touching storage: limits, key columns, and that every
    /// user column has a Delta type.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::Config(m));
        if self.table_uri.is_empty() {
            return invalid("table_uri is empty (set a local path or an object store url)".into());
        }
        if self.table_id.is_empty()
            || !self
                .table_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return invalid(format!(
                "table_id {:?} must be non-empty and use only letters, digits, '.', '_' and '-'",
                self.table_id
            ));
        }
        if self.target_file_bytes == 0
            || self.row_group_rows_max == 0
            || self.change_buffer_bytes_max == 0
        {
            return invalid(
                "target_file_bytes, row_group_rows_max and change_buffer_bytes_max must be > 0"
                    .into(),
            );
        }
        lake_arrow_schema_of(&self.user_schema, self.is_partitioned())?;
        for key in &self.partition_keys {
            if self.user_schema.field_with_name(key).is_err() {
                return invalid(format!(
                    "partition key {key:?} is not a column of the table (columns: {})",
                    self.column_names().join(", ")
                ));
            }
            if let TableKind::PrimaryKey { key_columns } = &self.kind
                && !key_columns.contains(key)
            {
                return invalid(format!(
                    "partition key {key:?} is not part of the primary key {key_columns:?} (a \
                     partitioned primary-key table's partition keys are key columns)"
                ));
            }
        }
        if let TableKind::PrimaryKey { key_columns } = &self.kind {
            if key_columns.is_empty() {
                return invalid("a primary-key table needs at least one key column".into());
            }
            for key in key_columns {
                if self.user_schema.field_with_name(key).is_err() {
                    return invalid(format!(
                        "key column {key:?} is not a column of the table (columns: {})",
                        self.column_names().join(", ")
                    ));
                }
            }
        }
        Ok(())
    }
}

impl DeltaSinkConfig {
    pub fn is_partitioned(&self) -> bool {
        !self.partition_keys.is_empty()
    }

    /// The lake's partition columns: the partition keys, `__partition_id` (partitioned tables),
    /// then `__bucket`.
    pub fn partition_columns(&self) -> Vec<String> {
        lake_partition_columns(&self.partition_keys)
    }

    /// The columns that tell a primary-key lake's rows apart (`None` for a log table): the
    /// key columns, and for a partitioned table `__partition_id` too. A partition dropped and
    /// created again under its name is another partition with the same keys (its partition
    /// columns are its name): its changes are never reduced together with the dropped one's,
    /// and before its first commit the dropped one's last images leave the lake
    /// (`retire_recreated_partitions`), so the lake holds one row per key.
    pub(crate) fn lake_key_columns(&self) -> Option<Vec<String>> {
        let TableKind::PrimaryKey { key_columns } = &self.kind else {
            return None;
        };
        let mut columns = key_columns.clone();
        if self.is_partitioned() {
            columns.push(crate::changelog::PARTITION_ID_COLUMN.to_string());
        }
        Some(columns)
    }

    fn column_names(&self) -> Vec<&str> {
        self.user_schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect()
    }
}

/// A lake's partition columns for a table partitioned by `partition_keys` (none:
/// unpartitioned): the keys, `__partition_id`, then `__bucket`.
pub fn lake_partition_columns(partition_keys: &[String]) -> Vec<String> {
    let mut columns = partition_keys.to_vec();
    if !partition_keys.is_empty() {
        columns.push(crate::changelog::PARTITION_ID_COLUMN.to_string());
    }
    columns.push(crate::changelog::BUCKET_COLUMN.to_string());
    columns
}

impl std::fmt::Debug for DeltaSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaSinkConfig")
            .field("table_uri", &self.table_uri)
            .field("kind", &self.kind)
            .field("table_id", &self.table_id)
            .field("target_file_bytes", &self.target_file_bytes)
            .field("on_commit", &self.on_commit.is_some())
            .finish_non_exhaustive()
    }
}

/// Adds the writer (`<name>-writer`, `writer_parallelism` subtasks, fed from `upstream` by
/// `partitioning`) and the committer (`<name>-committer`, one subtask) to `graph`. Returns the
/// committer's vertex. The config is validated here so a bad type fails before the job starts.
pub fn add_delta_sink(
    graph: &mut JobGraph,
    name: &str,
    upstream: VertexId,
    config: DeltaSinkConfig,
    writer_parallelism: u32,
    partitioning: Partitioning,
) -> Result<VertexId> {
    config.validate()?;
    let config = Arc::new(config);
    let writer_config = config.clone();
    let writer = graph.add_operator(
        format!("{name}-writer"),
        writer_parallelism,
        move |ctx: &TaskContext| -> silt_engine::Result<Box<dyn Operator>> {
            Ok(Box::new(DeltaWriter::new(writer_config.clone(), ctx)))
        },
    );
    let committer = graph.add_sink(format!("{name}-committer"), 1, move |_: &TaskContext| {
        DeltaCommitter::new(config.clone())
    });
    graph.connect(upstream, writer, partitioning);
    graph.connect(writer, committer, Partitioning::Rebalance);
    Ok(committer)
}
