//! The lake-format seam: what tiering, the query catalog, verify and `silt up` ask of the format
//! a table's lake tier is stored in. Shaped after Fluss's `LakeStorage` (a row-type check, a
//! tiering sink factory, a reader, a catalog of tables): a format checks a row type, adds the
//! tiering sink of one table to a job graph, reads the offsets a lake committed and who owns
//! it, moves a dropped table's lake aside, and pins a version for a query. Delta Lake
//! (`delta::DeltaFormat`) is the one implementation in the product; `lake.format` in
//! the configuration names it.
//!
//! **Contract** every format keeps (tiering's exactly-once rests on it): the offsets a lake
//! reports as committed travel in the same atomic commit as the rows they cover, per bucket
//! (`BucketKey`), and a lake belongs to one table id, which it records.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::TableProvider;
use datafusion::execution::SessionState;
use futures::future::BoxFuture;
use silt_engine::{JobGraph, VertexId};

use crate::changelog::BucketKey;

/// Storage settings handed to a format's object store (credentials, endpoint, `allow_http`).
pub type StorageOptions = HashMap<String, String>;

/// A log table appends; a primary-key table upserts by its key columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    /// Append-only: every changelog row becomes a lake row.
    Log,
    /// Upsert by key: the lake holds the latest image per key, deletes removed.
    PrimaryKey { key_columns: Vec<String> },
}

/// Who a lake location belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LakeOwner {
    /// No lake there.
    Absent,
    /// The lake belongs to the table id asked about.
    Owned,
    /// Another table's lake: the id it names (`None`: it names none and holds no offsets of
    /// ours).
    Foreign { owner: Option<String> },
}

/// What a lake committed: its version and, per bucket, the end offset tiered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeOffsets {
    /// The lake's version (a Delta table's version).
    pub delta_version: u64,
    pub bucket_offsets: BTreeMap<BucketKey, i64>,
}

/// What one lake maintenance run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub files_deleted: u64,
    pub bytes_reclaimed: u64,
    pub staged_deleted: u64,
    /// Data files the current version references.
    pub active_files: u64,
    /// Data and deletion-vector files on storage after the run.
    pub files_on_disk: u64,
    /// Old unreferenced deletion vectors kept only because the record of recent removes was
    /// full (`lake.vacuum_removes_bytes_max`): a later run deletes them.
    pub vectors_waiting: u64,
    /// When it finished, in ms since the epoch.
    pub at_ms: i64,
}

/// Files one commit rewrote into fewer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
}

impl CompactionReport {
    pub(crate) fn add(&mut self, files: usize, rows: u64, bytes: u64) {
        self.files += files;
        self.rows += rows;
        self.bytes += bytes;
    }
}

/// What a commit (or a replay that found the lake already ahead) left in the lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeCommit {
    /// The lake's version after the commit.
    pub delta_version: u64,
    /// The newest checkpoint among the committed committables.
    pub checkpoint_id: u64,
    /// Per bucket involved: the lake's end offset after the commit.
    pub bucket_offsets: BTreeMap<BucketKey, i64>,
    pub files_added: usize,
    /// Changelog rows the commit brought (before the per-key reduction of PK tables).
    pub rows: u64,
    /// True when the lake already had everything and nothing was committed.
    pub replayed: bool,
    /// The lake maintenance that ran after this commit, when it was due.
    pub maintenance: Option<MaintenanceReport>,
    /// What the commit compacted, when it compacted anything.
    pub compaction: Option<CompactionReport>,
    /// How long planning and making the commit took (compaction included; maintenance not).
    pub duration: Duration,
    /// The lake's data files after the commit (`None`: the format did not say).
    pub size: Option<LakeSize>,
}

/// The data files a lake version references, and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LakeSize {
    pub files: u64,
    pub bytes: u64,
}

/// Called after each commit of a tiering sink (and after a replay found the lake ahead); an
/// error fails the job, whose restart replays the commit and calls the hook again.
pub type LakeCommitHook =
    Arc<dyn Fn(LakeCommit) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// Called when a commit is refused for a gap in the offsets (the job's checkpoint is ahead of
/// its lake); the owner of the job decides how to start over.
pub type OffsetGapHook = Arc<dyn Fn() + Send + Sync>;

/// Where a committer can die with consequences worth testing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The writers' files exist and the commit is planned, but nothing is committed yet.
    BeforeCommit,
    /// The lake commit is durable, but `on_commit` (the registry update) has not run.
    AfterCommit,
}

/// A test hook at a [`FaultPoint`].
pub type FaultHook = Arc<dyn Fn(FaultPoint) + Send + Sync>;

/// Everything a format needs to tier one table: where, which table, what it holds, where the
/// source starts, and the service's settings (a format uses those that apply to it).
#[derive(Clone)]
pub struct TieringSink {
    pub uri: String,
    pub storage_options: StorageOptions,
    pub table_id: i64,
    pub kind: TableKind,
    /// The user columns of the changelog, as the Fluss client reads them.
    pub user_schema: SchemaRef,
    /// The user columns a partitioned table is partitioned by (empty: unpartitioned).
    pub partition_keys: Vec<String>,
    /// Where the source starts each bucket when the job starts without a checkpoint.
    pub start_offsets: BTreeMap<BucketKey, i64>,
    /// The job's checkpoint interval: a commit at most this often.
    pub commit_interval: Duration,
    pub checkpoint_timeout: Duration,
    /// Writer subtasks (the upstream is hashed on `__bucket` into them).
    pub parallelism: u32,
    /// A local directory the format may keep this table's state in across restarts (a key
    /// index); `None`: temporary.
    pub state_dir: Option<PathBuf>,
    pub settings: LakeSettings,
    pub on_commit: LakeCommitHook,
    pub on_offset_gap: OffsetGapHook,
    /// Tests only: called at the committer's dangerous points.
    pub fault_injection: Option<FaultHook>,
}

/// The lake's settings from the configuration (`lake.*`).
#[derive(Debug, Clone)]
pub struct LakeSettings {
    /// A writer rolls a data file once it reaches this size.
    pub target_file_bytes: u64,
    /// Primary-key lakes mark superseded rows deleted instead of rewriting files.
    pub deletion_vectors: bool,
    /// What the lake keeps of removed files and old versions.
    pub file_retention: Duration,
    /// The block cache of a primary-key table's key index.
    pub key_index_cache_bytes: u64,
    /// What maintenance remembers of recently removed deletion vectors.
    pub vacuum_removes_bytes_max: usize,
}

/// One version of a lake as `db.t$lake$snapshots` lists it.
#[derive(Debug, Clone, Default)]
pub struct LakeVersion {
    pub version: i64,
    pub committed_at_ms: Option<i64>,
    pub operation: Option<String>,
    pub checkpoint_id: Option<i64>,
    /// The end offsets of every bucket after this version.
    pub offsets: BTreeMap<BucketKey, i64>,
}

/// What a lake says of itself, read without the hot store (the offline catalog).
#[derive(Debug, Clone)]
pub struct LakeDescription {
    /// The table id the lake records, when it records one.
    pub table_id: Option<i64>,
    /// The user columns a partitioned table is partitioned by.
    pub partition_keys: Vec<String>,
    /// The lake's columns, system columns included.
    pub schema: SchemaRef,
}

/// One version of one table's lake, pinned for a query.
#[async_trait]
pub trait PinnedVersion: Send + Sync + fmt::Debug {
    fn version(&self) -> u64;

    /// The rows of this version as stored (user and system columns; the realtime view and
    /// `$lake` build on it). `session` carries the query's scan settings.
    async fn table_provider(
        &self,
        session: Arc<SessionState>,
    ) -> anyhow::Result<Arc<dyn TableProvider>>;

    /// The versions from `first` up to this one, oldest first (versions whose record the
    /// lake no longer holds are left out), with `table_id`'s bucket offsets after each.
    async fn history(&self, table_id: i64, first: u64) -> anyhow::Result<Vec<LakeVersion>>;
}

/// A lake format. See the module documentation.
#[async_trait]
pub trait LakeFormat: Send + Sync + fmt::Debug + 'static {
    /// The name `lake.format` gives it.
    fn name(&self) -> &'static str;

    /// Whether this format can store a table of `row_type`; the error names the column and
    /// the fix. The hot store asks before it accepts a lake-enabled table.
    fn check_row_type(&self, row_type: &fluss::metadata::RowType) -> Result<(), String>;

    /// The lake schema of a table of `user_schema` (user columns, then system columns).
    fn lake_schema(&self, user_schema: &Schema, partitioned: bool) -> anyhow::Result<SchemaRef>;

    /// The type a user column takes in the lake (the real-time view casts its hot tail so).
    fn lake_data_type(&self, column: &str, data_type: &DataType) -> anyhow::Result<DataType>;

    /// Whether `dir` (a local directory) holds a lake of this format.
    fn is_lake_dir(&self, dir: &Path) -> bool;

    /// Makes a query session able to read this format's files the way the product does.
    fn prepare_session(&self, _ctx: &datafusion::prelude::SessionContext) {}

    /// Adds the tiering sink of one table after `upstream` (a changelog source).
    fn add_tiering_sink(
        &self,
        graph: &mut JobGraph,
        upstream: VertexId,
        sink: TieringSink,
    ) -> anyhow::Result<()>;

    /// Who the lake at `uri` belongs to (`buckets`: the table's bucket count).
    async fn owner(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: u32,
    ) -> anyhow::Result<LakeOwner>;

    /// Moves the lake at `<root>/<from>` to `<root>/<to>`, whole; returns where it is now.
    async fn move_aside(
        &self,
        root: &str,
        options: &StorageOptions,
        from: &str,
        to: &str,
    ) -> anyhow::Result<String>;

    /// The offsets the lake at `uri` committed for `buckets` (those it holds nothing of are
    /// absent); `None` when there is no lake, or it is another table's.
    async fn committed_offsets(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> anyhow::Result<Option<LakeOffsets>>;

    /// Pins the newest version of `table_id`'s lake at `uri` with its offsets of `buckets`;
    /// `None` when nothing is tiered there or the lake is another table's.
    async fn pin(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> anyhow::Result<Option<(Arc<dyn PinnedVersion>, BTreeMap<BucketKey, i64>)>>;

    /// Every row of the lake at `uri` as of `version`, each with the file it came from in a
    /// column named `file_column` (verify reads the lake so, independent of the catalog).
    async fn read_version(
        &self,
        uri: &str,
        options: &StorageOptions,
        version: u64,
        file_column: &str,
    ) -> anyhow::Result<Vec<arrow::array::RecordBatch>>;

    /// Reads what the lake at `uri` says of itself; `None` when no lake is there.
    async fn describe(
        &self,
        uri: &str,
        options: &StorageOptions,
    ) -> anyhow::Result<Option<LakeDescription>>;
}
