//! The tiering service: every table with `table.datalake.enabled=true` gets a tiering job
//! without anyone submitting it, within one poll interval of its creation. A tiering job is an
//! engine job: the Fluss source (reading committed changelogs through the client) → Delta
//! writers (hash on `__bucket`, so one bucket's changes stay in order) → one committer that
//! makes one Delta commit per checkpoint with the files and the per-bucket txn offsets, then
//! updates hotstore's lake-offset registry. `table.datalake.freshness` sets the checkpoint
//! interval.
//!
//! A job's first start reads the lake's txn offsets and starts the source there, so a
//! redeployed job never re-tiers what the lake has; later starts restore from the job's own
//! checkpoints under `<data_dir>/checkpoints/tiering/`.
//!
//! A lake belongs to one table id. When a table is dropped and created again under its name,
//! the new table's job finds the old table's lake at `<lake_root>/<db>/<table>` and moves it to
//! `<lake_root>/__dropped/<db>.<table>-<old id>` before it starts a new lake there; the dropped
//! table's checkpoints and key index are deleted once the service sees it gone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use fluss::rpc::message::OffsetSpec;
use futures::FutureExt;
use silt_connectors::changelog::BucketKey;
use silt_connectors::delta::{
    DeltaSinkConfig, LakeCommit, LakeOwner, TableKind, add_delta_sink, lake_owner, move_lake,
    read_lake_offsets,
};
use silt_connectors::fluss::{
    FlussCredentials, FlussSource, FlussSourceConfig, StartPosition, connect_with,
    list_bucket_offsets,
};
use silt_engine::{
    ChannelConfig, JobConfig, JobGraph, JobHandle, JobManager, JobState, Partitioning,
    RestartStrategy, Source, TaskContext,
};
use tracing::{info, warn};

pub use silt_connectors::fluss::DATALAKE_ENABLED;
pub const DATALAKE_FRESHNESS: &str = "table.datalake.freshness";

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

/// A tiering job's source and writer subtasks by default: one per bucket up to 4. Buckets of
/// unequal size then keep both cores of a small machine busy until the last one is read; with
/// two subtasks for four buckets, the subtask with the larger pair worked on alone at the end.
/// Measured with `silt bench tiering --rows 2000000` on 2 idle cores, alternating: 4 subtasks
/// tiered at 0.84-0.91 of the Parquet ceiling in six runs, 2 at 0.47-0.94. A checkpoint taken
/// at another parallelism restores: the source and writer states are split by bucket.
pub const TIERING_PARALLELISM_DEFAULT: u32 = 4;

#[derive(Debug, Clone)]
pub struct TieringConfig {
    /// The Fluss endpoint to read (silt's hotstore, or a Fluss cluster).
    pub bootstrap_servers: String,
    /// Lake tables go under `<lake_root>/<database>/<table>`: a local directory or a URL.
    pub lake_root: String,
    pub storage_options: HashMap<String, String>,
    pub checkpoint_root: PathBuf,
    pub poll_interval: Duration,
    /// Checkpoint interval of tables without `table.datalake.freshness`.
    pub freshness_default: Duration,
    /// Subtasks of a tiering job's source and of its lake writer, each at most the table's
    /// bucket count ([`TIERING_PARALLELISM_DEFAULT`] by default).
    pub source_parallelism_max: u32,
    pub writer_parallelism: u32,
    pub target_file_bytes: u64,
    pub checkpoint_timeout: Duration,
    pub checkpoints_retained_max: usize,
    pub restart: RestartStrategy,
    pub channel: ChannelConfig,
    /// Tests only: abort the process once at this committer point; the marker file records that
    /// it happened, so the restarted process runs normally.
    #[cfg(feature = "fault-injection")]
    pub crash_at: Option<(silt_connectors::delta::FaultPoint, PathBuf)>,
    /// SASL/PLAIN credentials for the Fluss endpoint, when it requires them.
    pub credentials: Option<FlussCredentials>,
    /// Primary-key lake tables get deletion vectors (see `DeltaSinkConfig::deletion_vectors`).
    pub deletion_vectors: bool,
    /// `lake.file_retention_ms`: what the lake keeps of removed files and old versions.
    pub file_retention: Duration,
    /// Key indexes of primary-key tables go under `<key_index_root>/<db>.<table>-<id>` and
    /// survive restarts; `None`: temporary, rebuilt from the lake at every job start.
    pub key_index_root: Option<PathBuf>,
    /// `lake.key_index_cache_bytes`: each key index's block cache.
    pub key_index_cache_bytes: u64,
    /// `lake.vacuum_removes_bytes_max`: per table, what maintenance remembers of the deletion
    /// vectors recent commits removed.
    pub vacuum_removes_bytes_max: usize,
}

impl TieringConfig {
    pub fn new(
        bootstrap_servers: impl Into<String>,
        lake_root: impl Into<String>,
        checkpoint_root: impl Into<PathBuf>,
    ) -> Self {
        TieringConfig {
            bootstrap_servers: bootstrap_servers.into(),
            lake_root: lake_root.into(),
            storage_options: HashMap::new(),
            checkpoint_root: checkpoint_root.into(),
            deletion_vectors: true,
            file_retention: silt_connectors::delta::Retention::FILES_DEFAULT,
            key_index_root: None,
            key_index_cache_bytes: silt_connectors::delta::KEY_INDEX_CACHE_BYTES_DEFAULT,
            vacuum_removes_bytes_max: DeltaSinkConfig::VACUUM_REMOVES_BYTES_DEFAULT,
            poll_interval: Duration::from_secs(2),
            freshness_default: Duration::from_secs(30),
            source_parallelism_max: TIERING_PARALLELISM_DEFAULT,
            writer_parallelism: TIERING_PARALLELISM_DEFAULT,
            target_file_bytes: DeltaSinkConfig::TARGET_FILE_BYTES_DEFAULT,
            checkpoint_timeout: Duration::from_secs(120),
            checkpoints_retained_max: 3,
            restart: RestartStrategy::ExponentialBackoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(30),
                multiplier: 2.0,
                attempts_max: 1000,
            },
            channel: ChannelConfig::default(),
            #[cfg(feature = "fault-injection")]
            crash_at: None,
            credentials: None,
        }
    }

    /// Where the lake table of `database.table` lives; an error for a name that cannot be a
    /// path component (see [`crate::paths`]).
    pub fn lake_uri(&self, database: &str, table: &str) -> Result<String> {
        silt_connectors::lake::layout::lake_uri(&self.lake_root, database, table)
    }
}

/// What the service knows about one lake-enabled table.
#[derive(Debug, Clone)]
pub struct TableTieringStatus {
    pub database: String,
    pub table: String,
    pub table_id: i64,
    pub lake_uri: String,
    pub job_state: String,
    pub freshness: Duration,
    /// Per bucket (of each partition, for a partitioned table): (hot high watermark, lake end
    /// offset).
    pub buckets: BTreeMap<BucketKey, (i64, i64)>,
    pub lag_offsets: i64,
    /// How stale the lake is: 0 when it covers every high watermark, else the seconds since
    /// its last commit (or since the job started, before the first commit).
    pub lag_seconds: f64,
    pub delta_version: Option<u64>,
    pub checkpoints: usize,
    pub restarts: u32,
    pub maintenance: MaintenanceTotals,
    pub commits: CommitTotals,
}

/// The table's lake commits since its job started: how many, how long the recent ones took,
/// and what they compacted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitTotals {
    pub commits: u64,
    /// Over the last [`RECENT_COMMITS`] commits: the median and 99th percentile of the time to
    /// plan and make a commit (compaction included), ms.
    pub recent_p50_ms: u64,
    pub recent_p99_ms: u64,
    /// When a commit last compacted files (ms since the epoch; 0: not yet), how many commits
    /// did, and the files, rows and bytes they rewrote.
    pub last_compaction_ms: i64,
    pub compactions: u64,
    pub files_compacted: u64,
    pub rows_compacted: u64,
    pub bytes_compacted: u64,
}

/// How many recent commit durations a table's status keeps for its percentiles.
pub const RECENT_COMMITS: usize = 256;

/// What lake maintenance did for a table since its job started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceTotals {
    /// When it last ran (ms since the epoch; 0: not yet).
    pub last_ms: i64,
    pub runs: u64,
    /// Data, deletion-vector and staged files deleted.
    pub files_deleted: u64,
    pub bytes_reclaimed: u64,
    /// As of the last run: data files the lake's current version references, and data and
    /// deletion-vector files on storage.
    pub active_files: u64,
    pub files_on_disk: u64,
}

/// Every table a discovery pass saw, by `(database, table)`.
struct Listing {
    /// The lake-enabled tables, described.
    seen: BTreeMap<(String, String), fluss::metadata::TableInfo>,
    /// Every table's id, lake-enabled or not.
    ids: BTreeMap<(String, String), i64>,
    /// Tables listed but not described (a transient error): neither started nor cancelled.
    unknown: std::collections::BTreeSet<(String, String)>,
}

async fn list_tables(admin: &fluss::client::FlussAdmin) -> Result<Listing> {
    let mut listing = Listing {
        seen: BTreeMap::new(),
        ids: BTreeMap::new(),
        unknown: std::collections::BTreeSet::new(),
    };
    for database in admin
        .list_databases()
        .await
        .map_err(|e| anyhow!("list databases: {e}"))?
    {
        for table in admin
            .list_tables(&database)
            .await
            .map_err(|e| anyhow!("list tables of {database}: {e}"))?
        {
            let key = (database.clone(), table.clone());
            let path = fluss::metadata::TablePath::new(database.clone(), table.clone());
            let info = match admin.get_table_info(&path).await {
                Ok(info) => info,
                Err(e) => {
                    warn!(table = %format!("{database}.{table}"), error = %e, "tiering: cannot describe table");
                    listing.unknown.insert(key);
                    continue;
                }
            };
            listing.ids.insert(key.clone(), info.get_table_id());
            if silt_connectors::fluss::is_lake_enabled(&info) {
                listing.seen.insert(key, info);
            }
        }
    }
    Ok(listing)
}

struct TableJob {
    /// Started by `tier_table` rather than discovered: discovery leaves it alone.
    explicit: bool,
    table_id: i64,
    /// The table's schema id the job reads and writes: a table that gained columns since
    /// (ADD COLUMN) gets a new job, restored from this one's checkpoint.
    schema_id: i32,
    /// Set when a commit was refused for a gap between the lake and the job's checkpoint (see
    /// `DeltaSinkConfig::on_offset_gap`): discovery then starts the job over from the lake.
    lake_behind: Arc<std::sync::atomic::AtomicBool>,
    lake_uri: String,
    freshness: Duration,
    job: JobHandle,
    progress: Arc<Mutex<Progress>>,
}

#[derive(Debug, Default)]
struct Progress {
    lake_offsets: BTreeMap<BucketKey, i64>,
    delta_version: Option<u64>,
    /// When the lake last changed (a commit), or when the job started.
    last_commit_ms: i64,
    maintenance: MaintenanceTotals,
    commits: CommitTotals,
    /// The last [`RECENT_COMMITS`] commit durations, ms.
    recent_commit_ms: std::collections::VecDeque<u64>,
}

impl Progress {
    /// The totals with the recent commits' percentiles, computed when status is read rather
    /// than at every commit.
    fn commits_with_percentiles(&self) -> CommitTotals {
        let mut sorted: Vec<u64> = self.recent_commit_ms.iter().copied().collect();
        sorted.sort_unstable();
        let at = |q: f64| match sorted.len() {
            0 => 0,
            n => sorted[((n - 1) as f64 * q).round() as usize],
        };
        CommitTotals {
            recent_p50_ms: at(0.5),
            recent_p99_ms: at(0.99),
            ..self.commits.clone()
        }
    }

    fn on_commit(&mut self, commit: &LakeCommit) {
        self.lake_offsets
            .extend(commit.bucket_offsets.iter().map(|(b, o)| (*b, *o)));
        self.delta_version = Some(commit.delta_version);
        self.last_commit_ms = now_ms();
        if let Some(report) = &commit.maintenance {
            let totals = &mut self.maintenance;
            totals.last_ms = report.at_ms;
            totals.runs += 1;
            totals.files_deleted += report.files_deleted + report.staged_deleted;
            totals.bytes_reclaimed += report.bytes_reclaimed;
            totals.active_files = report.active_files;
            totals.files_on_disk = report.files_on_disk;
        }
        if commit.replayed {
            return;
        }
        let totals = &mut self.commits;
        totals.commits += 1;
        if self.recent_commit_ms.len() == RECENT_COMMITS {
            self.recent_commit_ms.pop_front();
        }
        self.recent_commit_ms
            .push_back(commit.duration.as_millis() as u64);
        if let Some(c) = &commit.compaction {
            totals.last_compaction_ms = self.last_commit_ms;
            totals.compactions += 1;
            totals.files_compacted += c.files as u64;
            totals.rows_compacted += c.rows;
            totals.bytes_compacted += c.bytes;
        }
    }
}

/// Discovers lake-enabled tables and keeps one tiering job running per table.
#[derive(Clone)]
pub struct TieringService {
    config: Arc<TieringConfig>,
    manager: JobManager,
    registry: Option<RegistryUpdate>,
    jobs: Arc<tokio::sync::Mutex<Jobs>>,
    /// One client connection for discovery and status, opened on first use and dropped after
    /// an error so the next call reconnects.
    connection: Arc<tokio::sync::Mutex<Option<Arc<fluss::client::FlussConnection>>>>,
}

/// The tiering jobs by `(database, table)`.
type Jobs = BTreeMap<(String, String), TableJob>;

/// Removes the jobs `pick` chooses and returns them, in key order.
fn take_jobs(
    jobs: &mut Jobs,
    pick: impl Fn(&(String, String), &TableJob) -> bool,
) -> Vec<((String, String), TableJob)> {
    let keys: Vec<_> = jobs
        .iter()
        .filter(|(key, job)| pick(key, job))
        .map(|(key, _)| key.clone())
        .collect();
    keys.into_iter()
        .filter_map(|key| jobs.remove_entry(&key))
        .collect()
}

use silt_rt::clock::now_ms;

impl TieringService {
    pub fn new(config: TieringConfig, registry: Option<RegistryUpdate>) -> Self {
        silt_connectors::delta::register_object_stores();
        TieringService {
            config: Arc::new(config),
            manager: JobManager::new(),
            registry,
            jobs: Arc::default(),
            connection: Arc::default(),
        }
    }

    async fn connection(&self) -> Result<Arc<fluss::client::FlussConnection>> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let connection = Arc::new(
            connect_with(
                &self.config.bootstrap_servers,
                self.config.credentials.as_ref(),
            )
            .await?,
        );
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Forgets the cached connection after a failed call, so the next one reconnects.
    async fn on_error<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            *self.connection.lock().await = None;
        }
        result
    }

    /// Polls the catalog every `poll_interval` until `shutdown` fires.
    pub async fn run(&self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.poll_once().await {
                warn!(error = %format!("{e:#}"), "tiering: catalog poll failed; retrying next interval");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.poll_interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One discovery pass: starts jobs for new lake-enabled tables, cancels jobs of tables that
    /// were dropped (or recreated under a new id).
    pub async fn poll_once(&self) -> Result<()> {
        let result = self.discover().await;
        self.on_error(result).await
    }

    async fn discover(&self) -> Result<()> {
        let connection = self.connection().await?;
        let admin = connection
            .get_admin()
            .map_err(|e| anyhow!("fluss admin: {e}"))?;
        let Listing { seen, ids, unknown } = list_tables(&admin).await?;
        let mut jobs = self.jobs.lock().await;
        // Tables gone, recreated, or no longer lake-enabled: stop tracking (and cancel).
        let stale = take_jobs(&mut jobs, |key, job| {
            !job.explicit
                && !unknown.contains(key)
                && seen
                    .get(key)
                    .is_none_or(|info| info.get_table_id() != job.table_id)
        });
        for (key, job) in stale {
            info!(table = %format!("{}.{}", key.0, key.1), "tiering: table dropped, recreated or no longer lake-enabled; cancelling its job");
            job.job.cancel().await;
            if ids.get(&key) != Some(&job.table_id) {
                self.remove_job_state(&key.0, &key.1, job.table_id, true);
            }
        }
        // Tables that gained columns: a new job reads and writes the new schema, restored from
        // the old one's checkpoint (its sink adds the columns to the lake when it opens). The
        // old job never tiers a row of the new schema: its source stops at the first one.
        let evolved = take_jobs(&mut jobs, |key, job| {
            !job.explicit
                && seen.get(key).is_some_and(|info| {
                    info.get_table_id() == job.table_id && info.get_schema_id() != job.schema_id
                })
        });
        for (key, job) in evolved {
            info!(table = %format!("{}.{}", key.0, key.1), from = job.schema_id, "tiering: the table's schema changed; starting its job again under the new schema");
            job.job.cancel().await;
        }
        // Jobs whose checkpoint is ahead of their lake: start over from the lake's offsets.
        let behind = take_jobs(&mut jobs, |_, job| {
            job.lake_behind.load(std::sync::atomic::Ordering::SeqCst)
        });
        for (key, job) in behind {
            warn!(table = %format!("{}.{}", key.0, key.1), "tiering: a commit was refused because the job's checkpoint is ahead of its lake; discarding the job's checkpoints and starting again from the lake's txn offsets");
            job.job.cancel().await;
            self.remove_job_state(&key.0, &key.1, job.table_id, false);
            // Discovered tables start again below; one started by `tier_table` starts here.
            if job.explicit {
                self.restart_explicit(&mut jobs, &connection, &admin, key)
                    .await;
            }
        }
        for (key, info) in seen {
            if jobs.contains_key(&key) {
                continue;
            }
            match self.start_job(&connection, &key.0, &key.1, &info).await {
                Ok(job) => {
                    jobs.insert(key, job);
                }
                Err(e) => {
                    warn!(table = %format!("{}.{}", key.0, key.1), error = %format!("{e:#}"), "tiering: cannot start job")
                }
            }
        }
        Ok(())
    }

    /// Starts again the job of a table `tier_table` started (discovery does not), after its
    /// old job was cancelled; a failure is logged.
    async fn restart_explicit(
        &self,
        jobs: &mut Jobs,
        connection: &fluss::client::FlussConnection,
        admin: &fluss::client::FlussAdmin,
        key: (String, String),
    ) {
        let path = fluss::metadata::TablePath::new(key.0.clone(), key.1.clone());
        let restarted = match admin.get_table_info(&path).await {
            Ok(info) => self.start_job(connection, &key.0, &key.1, &info).await,
            Err(e) => Err(anyhow!("table {}.{}: {e}", key.0, key.1)),
        };
        match restarted {
            Ok(mut restarted) => {
                restarted.explicit = true;
                jobs.insert(key, restarted);
            }
            Err(e) => {
                warn!(table = %format!("{}.{}", key.0, key.1), error = %format!("{e:#}"), "tiering: cannot start the job again; call tier_table again")
            }
        }
    }

    /// Deletes the checkpoints of the tiering job of table id `table_id` (a dropped table's, or
    /// ones ahead of the lake) and, with `key_index`, its key index. Failures are logged: what
    /// is left only takes disk space.
    fn remove_job_state(&self, database: &str, table: &str, table_id: i64, key_index: bool) {
        let mut dirs = vec![silt_connectors::lake::layout::tiering_checkpoint_dir(
            &self.config.checkpoint_root,
            database,
            table,
            table_id,
        )];
        if let (true, Some(root)) = (key_index, &self.config.key_index_root) {
            dirs.push(silt_connectors::lake::layout::tiering_checkpoint_dir(
                root, database, table, table_id,
            ));
        }
        for dir in dirs {
            let removed = dir.and_then(|dir| match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(Some(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(anyhow::Error::new(e).context(format!("removing {}", dir.display()))),
            });
            match removed {
                Ok(Some(dir)) => {
                    info!(table = %format!("{database}.{table}"), table_id, dir = %dir.display(), "tiering: removed the state of a tiering job")
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(table = %format!("{database}.{table}"), table_id, error = %format!("{e:#}"), "tiering: cannot remove the state of a tiering job; delete it by hand")
                }
            }
        }
    }

    /// Makes the lake location of `database.table` this table id's: a lake there that belongs
    /// to another id (a dropped table of the same name) is moved to
    /// `<lake_root>/__dropped/<db>.<table>-<id>`, where it stays until a user removes it.
    async fn claim_lake(
        &self,
        database: &str,
        table: &str,
        lake_uri: &str,
        table_id: &str,
        buckets: u32,
    ) -> Result<()> {
        let options = &self.config.storage_options;
        let LakeOwner::Foreign { owner } =
            lake_owner(lake_uri, options, table_id, buckets)
                .await
                .with_context(|| format!("reading who owns the lake at {lake_uri}"))?
        else {
            return Ok(());
        };
        // The owner becomes part of a path: only a table id (a number) is used as is.
        let owner_id = owner.as_deref().and_then(|o| o.parse::<i64>().ok());
        let to = silt_connectors::lake::layout::dropped_lake_relative(database, table, owner_id)?;
        let from = silt_connectors::lake::layout::lake_relative(database, table)?;
        let moved = move_lake(&self.config.lake_root, options, &from, &to)
            .await
            .with_context(|| format!("moving the lake of a dropped {database}.{table} aside"))?;
        warn!(
            table = %format!("{database}.{table}"),
            table_id,
            previous_owner = owner.as_deref().unwrap_or("unknown"),
            from = lake_uri,
            to = %moved,
            "tiering: the lake here belonged to a dropped table of the same name; moved it aside, whole (any Delta reader can read it there). To remove it, delete {moved}; to get it back as the lake of this name, drop the new table and move it back to {lake_uri}"
        );
        Ok(())
    }

    /// Starts tiering one table now, whatever its `table.datalake.enabled` says (for a Fluss
    /// cluster whose tables are not marked for silt). A no-op when it is already tiered.
    pub async fn tier_table(&self, database: &str, table: &str) -> Result<()> {
        let connection = self.connection().await?;
        let admin = connection
            .get_admin()
            .map_err(|e| anyhow!("fluss admin: {e}"))?;
        let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
        let info = admin
            .get_table_info(&path)
            .await
            .map_err(|e| anyhow!("table {database}.{table}: {e}"))?;
        let key = (database.to_string(), table.to_string());
        let mut jobs = self.jobs.lock().await;
        if !jobs.contains_key(&key) {
            let mut job = self.start_job(&connection, database, table, &info).await?;
            job.explicit = true;
            jobs.insert(key, job);
        }
        Ok(())
    }

    async fn start_job(
        &self,
        connection: &fluss::client::FlussConnection,
        database: &str,
        table: &str,
        info: &fluss::metadata::TableInfo,
    ) -> Result<TableJob> {
        let name = format!("{database}.{table}");
        let table_id = info.get_table_id();
        let buckets = info.get_num_buckets().max(1) as u32;
        let freshness = match info.get_properties().get(DATALAKE_FRESHNESS) {
            Some(text) => silt_rt::duration::parse_duration(text)
                .with_context(|| format!("{DATALAKE_FRESHNESS} of {name}"))?,
            None => self.config.freshness_default,
        };
        // Names come from the Fluss endpoint: checked before they become paths.
        let lake_uri = self.config.lake_uri(database, table)?;
        let user_schema =
            silt_connectors::fluss::table_arrow_schema(connection, database, table).await?;
        let lake_id = table_id.to_string();
        self.claim_lake(database, table, &lake_uri, &lake_id, buckets)
            .await?;
        let (start_offsets, progress) = self
            .resume_point(connection, database, table, table_id, &lake_uri)
            .await?;
        let mut sink =
            DeltaSinkConfig::new(lake_uri.clone(), lake_id, table_kind(info), user_schema);
        sink.partition_keys = info.get_partition_keys().to_vec();
        sink.start_offsets = Some(start_offsets.clone());
        let lake_behind = self.configure_sink(&mut sink, database, table, table_id, freshness)?;
        sink.on_commit = Some(commit_hook(
            table_id,
            self.registry.clone(),
            progress.clone(),
        ));
        let graph = self.tiering_graph(database, table, table_id, buckets, start_offsets, sink)?;
        let job_config = self.tiering_job_config(database, table, table_id, freshness)?;
        let job = self.manager.submit(graph, job_config)?;
        info!(table = %name, %lake_uri, ?freshness, "tiering: job started");
        Ok(TableJob {
            explicit: false,
            table_id,
            schema_id: info.get_schema_id(),
            lake_behind,
            lake_uri,
            freshness,
            job,
            progress,
        })
    }

    /// Where a job starts: the lake's txn actions are the truth about what was tiered, so each
    /// bucket starts at its lake offset, and where the lake holds nothing of a bucket, at the
    /// changelog's start. A partitioned table's buckets are those of its partitions now; the
    /// source reads partitions created later from their start. Also repairs a registry that
    /// missed the last commit (a crash between commit and update).
    async fn resume_point(
        &self,
        connection: &fluss::client::FlussConnection,
        database: &str,
        table: &str,
        table_id: i64,
        lake_uri: &str,
    ) -> Result<(BTreeMap<BucketKey, i64>, Arc<Mutex<Progress>>)> {
        let name = format!("{database}.{table}");
        let lake_id = &table_id.to_string();
        let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
        let earliest = list_bucket_offsets(connection, &path, OffsetSpec::Earliest)
            .await
            .with_context(|| format!("listing the earliest offsets of {name}"))?;
        let keys: Vec<BucketKey> = earliest.keys().copied().collect();
        let lake = read_lake_offsets(lake_uri, &self.config.storage_options, lake_id, &keys)
            .await
            .with_context(|| format!("reading the lake offsets of {name} at {lake_uri}"))?;
        let lake_offsets = lake
            .as_ref()
            .map(|l| l.bucket_offsets.clone())
            .unwrap_or_default();
        let start_offsets: BTreeMap<BucketKey, i64> = earliest
            .iter()
            .map(|(key, earliest)| (*key, lake_offsets.get(key).copied().unwrap_or(*earliest)))
            .collect();
        let progress = Arc::new(Mutex::new(Progress {
            lake_offsets,
            delta_version: lake.as_ref().map(|l| l.delta_version),
            last_commit_ms: now_ms(),
            ..Progress::default()
        }));
        if let (Some(registry), Some(lake)) = (&self.registry, &lake) {
            let offsets: Vec<(BucketKey, i64)> =
                lake.bucket_offsets.iter().map(|(b, o)| (*b, *o)).collect();
            registry(table_id, lake.delta_version as i64, &offsets)?;
        }
        Ok((start_offsets, progress))
    }

    /// The service's settings of a table's Delta sink: storage, file size, retention, deletion
    /// vectors, the key index's place, what an offset gap does (and, in test builds, where a
    /// crash is injected). Returns the flag an offset gap raises.
    fn configure_sink(
        &self,
        sink: &mut DeltaSinkConfig,
        database: &str,
        table: &str,
        table_id: i64,
        freshness: Duration,
    ) -> Result<Arc<std::sync::atomic::AtomicBool>> {
        sink.storage_options = self.config.storage_options.clone();
        sink.target_file_bytes = self.config.target_file_bytes;
        // A writer's file waits for its commit at most a checkpoint interval plus a timed-out
        // checkpoint; twice that before maintenance may take it for an orphan.
        sink.retention = silt_connectors::delta::Retention::new(
            self.config.file_retention,
            2 * (freshness + self.config.checkpoint_timeout),
        );
        sink.deletion_vectors = self.config.deletion_vectors;
        // A gap means this job's checkpoint is ahead of its lake (a lost committable, or the
        // lake replaced by an older copy). Every restart restores that same checkpoint and meets
        // the same gap, so the job is started over instead: discovery discards its checkpoints
        // and starts it again from the lake's txn offsets, like a first start. Discarding is
        // safe: the lake's txn offsets are the truth, the hot store still holds every offset
        // after them, and what the discarded checkpoints held (written files not yet committed)
        // is read and written again.
        let lake_behind = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = lake_behind.clone();
        sink.on_offset_gap = Some(Arc::new(move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst)
        }));
        sink.key_index_cache_bytes = self.config.key_index_cache_bytes;
        sink.vacuum_removes_bytes_max = self.config.vacuum_removes_bytes_max;
        sink.key_index_dir = match &self.config.key_index_root {
            Some(root) => Some(silt_connectors::lake::layout::tiering_checkpoint_dir(
                root, database, table, table_id,
            )?),
            None => None,
        };
        #[cfg(feature = "fault-injection")]
        if let Some((point, marker)) = self.config.crash_at.clone() {
            sink.fault_injection = Some(Arc::new(move |at: silt_connectors::delta::FaultPoint| {
                if at == point
                    && std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&marker)
                        .is_ok()
                {
                    eprintln!("crash injected at {at:?}");
                    std::process::abort();
                }
            }));
        }
        Ok(lake_behind)
    }

    /// The tiering job's graph: the Fluss source from `start_offsets`, hashed by bucket into the
    /// Delta writers and their committer.
    fn tiering_graph(
        &self,
        database: &str,
        table: &str,
        table_id: i64,
        buckets: u32,
        start_offsets: BTreeMap<BucketKey, i64>,
        sink: DeltaSinkConfig,
    ) -> Result<JobGraph> {
        let mut source_config =
            FlussSourceConfig::new(&self.config.bootstrap_servers, database, table);
        source_config.table_id = Some(table_id);
        source_config.start = StartPosition::Offsets(start_offsets);
        source_config.partition_id_column = sink.is_partitioned();
        source_config.credentials = self.config.credentials.clone();
        let source_config = Arc::new(source_config);
        let mut graph = JobGraph::new();
        let parallelism = self.config.source_parallelism_max.clamp(1, buckets);
        let source = graph.add_source(
            "fluss-source",
            parallelism,
            move |_: &TaskContext| -> silt_engine::Result<Box<dyn Source>> {
                Ok(Box::new(FlussSource::new((*source_config).clone())))
            },
        );
        add_delta_sink(
            &mut graph,
            "lake",
            source,
            sink,
            self.config.writer_parallelism.clamp(1, buckets),
            Partitioning::Hash {
                key_columns: vec![silt_connectors::changelog::BUCKET_COLUMN.to_string()],
            },
        )
        .with_context(|| format!("building the tiering job of {database}.{table}"))?;

        Ok(graph)
    }

    /// The tiering job's engine configuration: a checkpoint every `freshness` under the table's
    /// own checkpoint directory, the service's timeouts, restarts and channels.
    fn tiering_job_config(
        &self,
        database: &str,
        table: &str,
        table_id: i64,
        freshness: Duration,
    ) -> Result<JobConfig> {
        let checkpoints = silt_connectors::lake::layout::tiering_checkpoint_dir(
            &self.config.checkpoint_root,
            database,
            table,
            table_id,
        )?;
        let storage = silt_engine::storage_for(&checkpoints.to_string_lossy())?;
        let mut job_config = JobConfig::new(format!("tiering {database}.{table}"), storage);
        job_config.checkpoint.interval = Some(freshness);
        job_config.checkpoint.timeout = self.config.checkpoint_timeout;
        job_config.checkpoint.retained_max = self.config.checkpoints_retained_max;
        job_config.restart = self.config.restart.clone();
        job_config.channel = self.config.channel;
        Ok(job_config)
    }

    /// Hot high watermarks, lake offsets and lag per tiered table.
    pub async fn status(&self) -> Result<Vec<TableTieringStatus>> {
        let result = self.collect_status().await;
        self.on_error(result).await
    }

    async fn collect_status(&self) -> Result<Vec<TableTieringStatus>> {
        let connection = self.connection().await?;
        let jobs = self.jobs.lock().await;
        let mut out = Vec::with_capacity(jobs.len());
        for ((database, table), job) in jobs.iter() {
            let path = fluss::metadata::TablePath::new(database.clone(), table.clone());
            let hot = list_bucket_offsets(&connection, &path, OffsetSpec::Latest)
                .await
                .with_context(|| format!("list offsets of {database}.{table}"))?;
            let p = job.progress.lock().unwrap();
            let buckets: BTreeMap<BucketKey, (i64, i64)> = hot
                .iter()
                .map(|(b, hot)| (*b, (*hot, p.lake_offsets.get(b).copied().unwrap_or(0))))
                .collect();
            let lag_offsets: i64 = buckets.values().map(|(h, l)| (h - l).max(0)).sum();
            let metrics = job.job.metrics();
            out.push(TableTieringStatus {
                database: database.clone(),
                table: table.clone(),
                table_id: job.table_id,
                lake_uri: job.lake_uri.clone(),
                job_state: job.job.state().to_string(),
                freshness: job.freshness,
                buckets,
                lag_offsets,
                lag_seconds: if lag_offsets == 0 {
                    0.0
                } else {
                    (now_ms() - p.last_commit_ms) as f64 / 1000.0
                },
                delta_version: p.delta_version,
                checkpoints: metrics.checkpoints_completed as usize,
                restarts: metrics.restarts,
                maintenance: p.maintenance.clone(),
                commits: p.commits_with_percentiles(),
            });
        }
        Ok(out)
    }

    /// Stops every tiering job with a final checkpoint (bounded by `timeout`; past it the job
    /// is cancelled and resumes from its last checkpoint at the next start).
    pub async fn shutdown(&self, timeout: Duration) {
        let mut jobs = self.jobs.lock().await;
        for ((database, table), job) in std::mem::take(&mut *jobs) {
            if job.job.state() != JobState::Running {
                job.job.cancel().await;
                continue;
            }
            match tokio::time::timeout(timeout, job.job.stop()).await {
                Ok(Ok(id)) => {
                    info!(table = %format!("{database}.{table}"), checkpoint = id, "tiering: stopped with a final checkpoint")
                }
                Ok(Err(e)) => {
                    warn!(table = %format!("{database}.{table}"), error = %e, "tiering: stop failed")
                }
                Err(_) => {
                    warn!(table = %format!("{database}.{table}"), "tiering: stop timed out; cancelling");
                    job.job.cancel().await;
                }
            }
        }
    }
}

/// A log table appends; a primary-key table upserts by its key columns.
fn table_kind(info: &fluss::metadata::TableInfo) -> TableKind {
    if info.has_primary_key() {
        TableKind::PrimaryKey {
            key_columns: info.get_primary_keys().clone(),
        }
    } else {
        TableKind::Log
    }
}

/// What a tiering job does after each lake commit: its progress (status, lag) and the hot
/// store's lake-offset registry.
fn commit_hook(
    table_id: i64,
    registry: Option<RegistryUpdate>,
    progress: Arc<Mutex<Progress>>,
) -> silt_connectors::delta::LakeCommitHook {
    Arc::new(move |commit: LakeCommit| {
        let (registry, progress) = (registry.clone(), progress.clone());
        async move {
            let offsets = {
                let mut p = progress.lock().unwrap();
                p.on_commit(&commit);
                p.lake_offsets
                    .iter()
                    .map(|(b, o)| (*b, *o))
                    .collect::<Vec<_>>()
            };
            if let Some(registry) = registry {
                registry(table_id, commit.delta_version as i64, &offsets).map_err(|e| {
                    silt_connectors::delta::Error::Config(format!(
                        "updating the lake-offset registry: {e:#}"
                    ))
                })?;
            }
            Ok(())
        }
        .boxed()
    })
}
