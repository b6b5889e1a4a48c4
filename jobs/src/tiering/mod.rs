//! The tiering service: every table with `table.datalake.enabled=true` that the coordinator
//! gives this process gets a tiering job without anyone submitting it, within one poll
//! interval of its creation. A tiering job is an engine job: the Fluss source (reading
//! committed changelogs through the client) -> the lake format's sink (writers hashed on
//! `__bucket`, so one bucket's changes stay in order, and one committer that makes one lake
//! commit per checkpoint with the files and the per-bucket offsets) -> the coordinator records
//! the snapshot (in-process: the hot store's lake-offset registry). `table.datalake.freshness`
//! sets the checkpoint interval.
//!
//! A job's first start reads the lake's committed offsets and starts the source there, so a
//! redeployed job never re-tiers what the lake has; later starts restore from the job's own
//! checkpoints under `<data_dir>/checkpoints/tiering/`, each bucket no lower than where the lake
//! ends (another writer may have tiered past the checkpoint, and retention cut the log up to it).
//!
//! A lake belongs to one table id. When a table is dropped and created again under its name,
//! the new table's job finds the old table's lake at `<lake_root>/<db>/<table>` and moves it to
//! `<lake_root>/__dropped/<db>.<table>-<old id>` before it starts a new lake there; the dropped
//! table's checkpoints and key index are deleted once the service sees it gone.
//!
//! Layout: `config` (settings), `coordinator` (which tables, where snapshots go), `discovery`
//! (the poll), `job` (one table's job and its commits), `status` (what is reported); this
//! module holds the service's lifecycle. The lake format is [`TieringConfig::format`].

mod config;
mod coordinator;
mod discovery;
mod history;
mod job;
mod lease;
mod status;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, anyhow};
use silt_connectors::fluss::connect_with;
use silt_engine::{JobHandle, JobManager, JobState};
use tracing::{info, warn};

pub use config::*;
pub use coordinator::*;
pub use history::{HISTORY_INTERVAL, HISTORY_SAMPLES, Sample};
pub use job::Stalled;
pub use lease::{LEASES_DIR, LeaseConfig, Leased, worker_name};
pub use status::*;

pub use silt_connectors::fluss::DATALAKE_ENABLED;
pub const DATALAKE_FRESHNESS: &str = "table.datalake.freshness";

pub(super) struct TableJob {
    /// Started by `tier_table` rather than discovered: discovery leaves it alone.
    explicit: bool,
    table_id: i64,
    /// The table's schema id the job reads and writes: a table that gained columns since
    /// (ADD COLUMN) gets a new job, restored from this one's checkpoint.
    schema_id: i32,
    /// A primary-key table (its lake holds one row per key), else a log table.
    primary_key: bool,
    /// Its buckets and whether it is partitioned, for listing its offsets.
    shape: silt_connectors::fluss::TableShape,
    /// Set when a commit was refused for a gap between the lake and the job's checkpoint (see
    /// `TieringSink::on_offset_gap`): discovery then starts the job over from the lake.
    lake_behind: Arc<std::sync::atomic::AtomicBool>,
    /// Set when the source found its position expired from the hot tier (a gap, see
    /// `FlussSourceConfig::on_log_gap`): discovery then stops the job, and its next start
    /// reports the gap instead of restarting on it.
    log_gap: Arc<std::sync::atomic::AtomicBool>,
    /// The table's `table.log.ttl` (Fluss's default when unset; `None`: no TTL): how long the
    /// hot tier keeps what tiering has not read yet, when nothing holds its retention back.
    log_ttl: Option<Duration>,
    lake_uri: String,
    freshness: Duration,
    job: JobHandle,
    progress: Arc<Mutex<Progress>>,
}

/// Discovers lake-enabled tables and keeps one tiering job running per table.
#[derive(Clone)]
pub struct TieringService {
    config: Arc<TieringConfig>,
    manager: JobManager,
    coordinator: Arc<dyn Coordinator>,
    jobs: Arc<tokio::sync::Mutex<Jobs>>,
    /// Tables whose tiering cannot start, with their ids and why (see `job::Stalled`): reported in their
    /// status, logged once per reason, tried again at every discovery pass.
    problems: Arc<Mutex<Problems>>,
    /// When this process last read the lake of a table another worker tiers, by table id.
    others_observed: Arc<Mutex<BTreeMap<i64, std::time::Instant>>>,
    /// Each tiered table's recent status, sampled by [`TieringService::run`].
    history: Arc<Mutex<history::History>>,
    /// One client connection for discovery and status, opened on first use and dropped after
    /// an error so the next call reconnects.
    connection: Arc<tokio::sync::Mutex<Option<Arc<fluss::client::FlussConnection>>>>,
}

/// Why tables' jobs cannot start, by `(database, table)`: the table id and the reason.
pub(super) type Problems = BTreeMap<(String, String), (i64, String)>;

/// The tiering jobs by `(database, table)`.
pub(super) type Jobs = BTreeMap<(String, String), TableJob>;

impl TieringService {
    /// A service that tiers every lake-enabled table and records snapshots through
    /// `registry` ([`InProcess`]).
    pub fn new(config: TieringConfig, registry: Option<RegistryUpdate>) -> Self {
        Self::with_coordinator(config, Arc::new(InProcess { registry }))
    }

    /// A service that tiers the tables `coordinator` gives it and records snapshots there.
    pub fn with_coordinator(config: TieringConfig, coordinator: Arc<dyn Coordinator>) -> Self {
        TieringService {
            config: Arc::new(config),
            manager: JobManager::new(),
            coordinator,
            jobs: Arc::default(),
            problems: Arc::default(),
            others_observed: Arc::default(),
            history: Arc::default(),
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

    /// Polls the catalog every `poll_interval` until `shutdown` fires, and samples the tables'
    /// history every [`HISTORY_INTERVAL`] between polls.
    pub async fn run(&self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut sampled: Option<std::time::Instant> = None;
        loop {
            if let Err(e) = self.poll_once().await {
                warn!(error = %format!("{e:#}"), "tiering: catalog poll failed; retrying next interval");
            }
            if sampled.is_none_or(|at| at.elapsed() >= HISTORY_INTERVAL) {
                sampled = Some(std::time::Instant::now());
                let result = self.sample_history().await;
                if let Err(e) = self.on_error(result).await {
                    warn!(error = %format!("{e:#}"), "tiering: sampling the status history failed");
                }
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

    /// The hot tier's description of a table (any table, lake-enabled or not); `None` when no
    /// such table (or database) exists.
    pub async fn table_info(
        &self,
        database: &str,
        table: &str,
    ) -> Result<Option<fluss::metadata::TableInfo>> {
        use fluss::error::FlussError;
        let result = async {
            let connection = self.connection().await?;
            let admin = (connection.get_admin()).map_err(|e| anyhow!("fluss admin: {e}"))?;
            let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
            match admin.get_table_info(&path).await {
                Ok(info) => Ok(Some(info)),
                Err(e) => match e.api_error() {
                    Some(FlussError::TableNotExist | FlussError::DatabaseNotExist) => Ok(None),
                    _ => Err(anyhow!("table {database}.{table}: {e}")),
                },
            }
        };
        let result = result.await;
        self.on_error(result).await
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

    /// Stops every tiering job with a final checkpoint (bounded by `timeout`; past it the job
    /// is cancelled and resumes from its last checkpoint at the next start).
    pub async fn shutdown(&self, timeout: Duration) {
        self.stop_jobs(timeout).await;
        self.coordinator.release_all().await;
    }

    async fn stop_jobs(&self, timeout: Duration) {
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
