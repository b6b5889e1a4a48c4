//! The job service: compiles submitted definitions, runs them on the engine, persists them and
//! resumes them when `silt up` restarts.
//!
//! Layout under the data directory: `jobs/<id>.json` holds a job's definition and what the user
//! last asked of it (`running`, `stopped`, `cancelled`); `checkpoints/jobs/<id>/` holds its
//! checkpoints. A definition is compiled (checked against the catalog) before anything is
//! written or started, so a rejected submission leaves no trace.
//!
//! **Invariant:** a job the user has not stopped or cancelled runs again after a restart of
//! `silt up`, from its latest complete checkpoint (the engine restores it from the job's
//! checkpoint directory); jobs asked to stop or cancel stay ended.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use silt_engine::{JobConfig, JobHandle, JobManager, JobState};
use tracing::{info, warn};

pub use super::definition::JobServiceConfig;
use super::definition::{
    Catalog, CompiledJob, JobDefinition, PathNames, ValidationErrors, compile,
};
use super::topology::{BackpressureSampler, Topology};

/// Checkpoints listed per job in its status (most recent last).
const STATUS_CHECKPOINTS_MAX: usize = 5;
/// Persisted jobs read at start; a guard against a directory filled by mistake.
const PERSISTED_JOBS_MAX: usize = 10_000;

/// What the user last asked of a job; decides whether a restart resumes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    /// A job is submitted to run.
    #[default]
    Running,
    Stopped,
    Cancelled,
}

/// A job as `jobs/<id>.json` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PersistedJob {
    pub id: String,
    pub submitted_at_ms: i64,
    pub desired: Desired,
    pub definition: JobDefinition,
    /// The table id each source table (`db.table`) had at submit: a resumed job reads those
    /// tables only (its checkpoints hold their offsets). Absent in files of older silts.
    #[serde(default)]
    pub source_table_ids: std::collections::BTreeMap<String, i64>,
}

struct Entry {
    persisted: PersistedJob,
    handle: Option<JobHandle>,
    summary: Vec<String>,
    topology: Topology,
    /// The back-pressure ratios between reads of the job's metrics (a read changes them).
    backpressure: std::sync::Mutex<BackpressureSampler>,
    checkpoint_interval: Duration,
    /// Why the job could not be (re)started, when it could not.
    start_error: Option<String>,
}

/// Why a request on a job failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Invalid(ValidationErrors),
    #[error("unknown job {id} (list jobs with GET /v1/jobs or `silt job list`)")]
    NotFound { id: String },
    #[error("job {id} is {state}; {action} needs a running job")]
    NotRunning {
        id: String,
        state: String,
        action: &'static str,
    },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorStatus {
    pub name: String,
    pub parallelism: u32,
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub backpressured_ms: u64,
    pub last_checkpoint_bytes: u64,
    pub last_snapshot_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointStatus {
    pub id: u64,
    pub duration_ms: u64,
    pub size_bytes: u64,
    pub completed_at_ms: i64,
    pub is_final: bool,
}

/// A job's status as the REST API and the CLI show it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobStatus {
    pub id: String,
    pub name: String,
    /// created, running, restarting, finished, cancelled, failed (the engine's states).
    pub state: String,
    /// running, stopped or cancelled: what the user last asked for.
    pub desired: Desired,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Who can fix the failure: `user` (the definition, the input, the configuration, another
    /// writer, the machine; the failure says how) or `silt` (a bug to report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<String>,
    pub submitted_at_ms: i64,
    pub checkpoint_interval_ms: u64,
    /// Per operator (engine vertex): its parallelism.
    pub parallelism: BTreeMap<String, u32>,
    /// The latest completed checkpoints, most recent last.
    pub checkpoints: Vec<CheckpointStatus>,
    pub checkpoints_completed: usize,
    pub checkpoints_failed: u64,
    pub restarts: u32,
    pub buffered_bytes: u64,
    pub operators: Vec<OperatorStatus>,
    /// The compiled graph, one line per operator and edge (for the CLI).
    pub graph: Vec<String>,
    /// The compiled graph, structured: the definition's operators (with the engine vertices
    /// each became and their metrics over them, see [`super::topology`]) and the edges between
    /// them. Empty for a job not started by this silt (ended before a restart, or unable to
    /// resume).
    #[serde(default)]
    pub topology: Topology,
}

use silt_rt::clock::now_ms;

/// Runs user jobs. Cheap to clone.
#[derive(Clone)]
pub struct JobService {
    config: Arc<JobServiceConfig>,
    manager: JobManager,
    jobs: Arc<tokio::sync::Mutex<BTreeMap<String, Entry>>>,
}

impl JobService {
    pub fn new(config: JobServiceConfig) -> Self {
        JobService {
            config: Arc::new(config),
            manager: JobManager::new(),
            jobs: Arc::default(),
        }
    }

    pub fn config(&self) -> &JobServiceConfig {
        &self.config
    }

    /// Checks a definition against the catalog without starting anything.
    pub async fn validate(
        &self,
        definition: &JobDefinition,
        paths: &dyn PathNames,
    ) -> Result<CompiledJob, JobError> {
        self.validate_pinned(definition, paths, Default::default())
            .await
    }

    /// [`JobService::validate`], with each source table required to have the id `pinned`
    /// names for it (a resumed job's).
    async fn validate_pinned(
        &self,
        definition: &JobDefinition,
        paths: &dyn PathNames,
        pinned: std::collections::BTreeMap<String, i64>,
    ) -> Result<CompiledJob, JobError> {
        let mut catalog =
            Catalog::new(&self.config.bootstrap, self.config.credentials.clone()).pinned(pinned);
        let compiled = compile(definition, &self.config, &mut catalog, paths)
            .await
            .map_err(JobError::Invalid)?;
        compiled
            .graph
            .validate()
            .map_err(|e| JobError::Invalid(ValidationErrors::one("edges", e.to_string())))?;
        Ok(compiled)
    }

    /// Compiles, persists and starts a job; returns its status. Nothing is written or started
    /// when the definition is invalid.
    pub async fn submit(
        &self,
        definition: JobDefinition,
        paths: &dyn PathNames,
    ) -> Result<JobStatus, JobError> {
        let compiled = self.validate(&definition, paths).await?;
        // One lock from the name check to the insert, so two submissions cannot both pass.
        let mut jobs = self.jobs.lock().await;
        // Jobs of one name share their default Delta tables and txn app ids; two at once
        // would fight over them.
        if let Some(running) = jobs.values().find(|e| {
            e.persisted.definition.name == definition.name
                && e.handle.as_ref().is_some_and(|h| !h.state().is_terminal())
        }) {
            return Err(JobError::Invalid(ValidationErrors::one(
                paths.job("name"),
                format!(
                    "a job named {} is already running ({}); stop or cancel it first, or rename this one",
                    definition.name, running.persisted.id
                ),
            )));
        }
        let id = format!("{}-{:08x}", definition.name, rand::random::<u32>());
        let persisted = PersistedJob {
            id: id.clone(),
            submitted_at_ms: now_ms(),
            desired: Desired::Running,
            definition,
            source_table_ids: compiled.source_table_ids.clone(),
        };
        self.persist(&persisted)?;
        let entry = match self.start(persisted, compiled) {
            Ok(entry) => entry,
            Err(e) => {
                // Not started, so not to be resumed either.
                let _ = std::fs::remove_file(self.config.jobs_dir().join(format!("{id}.json")));
                return Err(JobError::Internal(e));
            }
        };
        info!(job = %id, "job submitted");
        let status = status_of(&entry);
        jobs.insert(id, entry);
        Ok(status)
    }

    fn start(&self, persisted: PersistedJob, compiled: CompiledJob) -> Result<Entry> {
        let dir = self.config.checkpoint_dir(&persisted.id);
        let storage = silt_engine::storage_for(&dir.to_string_lossy())?;
        let mut job = JobConfig::new(format!("job {}", persisted.id), storage);
        job.checkpoint.interval = Some(compiled.checkpoint_interval);
        job.checkpoint.timeout = self.config.checkpoint_timeout;
        job.checkpoint.retained_max = self.config.checkpoints_retained_max;
        job.restart = self.config.restart.clone();
        job.channel = self.config.channel;
        let handle = self.manager.submit(compiled.graph, job)?;
        Ok(Entry {
            persisted,
            handle: Some(handle),
            summary: compiled.summary,
            topology: compiled.topology,
            backpressure: Default::default(),
            checkpoint_interval: compiled.checkpoint_interval,
            start_error: None,
        })
    }

    /// Writes `jobs/<id>.json` atomically (a temporary file, then a rename).
    fn persist(&self, job: &PersistedJob) -> Result<()> {
        let dir = self.config.jobs_dir();
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(format!("{}.json", job.id));
        let tmp = dir.join(format!(".{}.json.tmp", job.id));
        let text = serde_json::to_vec_pretty(job)?;
        write_synced(&tmp, &text)?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
        Ok(())
    }

    /// Reads every persisted job; resumes those the user did not stop or cancel. A job that
    /// cannot be compiled any more (its table was dropped, say) is listed with the reason.
    pub async fn resume_persisted(&self) -> Result<usize> {
        let dir = self.config.jobs_dir();
        let Ok(read) = std::fs::read_dir(&dir) else {
            return Ok(0);
        };
        let mut files: Vec<PathBuf> = read
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|e| e == "json")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .take(PERSISTED_JOBS_MAX)
            .collect();
        files.sort();
        let mut resumed = 0;
        for path in files {
            let persisted: PersistedJob = match std::fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|b| serde_json::from_slice(&b).map_err(anyhow::Error::from))
            {
                Ok(p) => p,
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "skipping an unreadable job file");
                    continue;
                }
            };
            let id = persisted.id.clone();
            let entry = if persisted.desired == Desired::Running {
                match self
                    .validate_pinned(
                        &persisted.definition,
                        &super::definition::JsonPaths,
                        persisted.source_table_ids.clone(),
                    )
                    .await
                    .map_err(|e| anyhow!("{e}"))
                    .and_then(|c| self.start(persisted.clone(), c))
                {
                    Ok(entry) => {
                        resumed += 1;
                        info!(job = %id, "job resumed from its latest checkpoint");
                        entry
                    }
                    Err(e) => {
                        warn!(job = %id, error = %format!("{e:#}"), "cannot resume job");
                        ended_entry(persisted, Some(format!("cannot resume: {e:#}")))
                    }
                }
            } else {
                ended_entry(persisted, None)
            };
            self.jobs.lock().await.insert(id, entry);
        }
        Ok(resumed)
    }

    pub async fn list(&self) -> Vec<JobStatus> {
        self.jobs.lock().await.values().map(status_of).collect()
    }

    pub async fn status(&self, id: &str) -> Result<JobStatus, JobError> {
        let jobs = self.jobs.lock().await;
        jobs.get(id)
            .map(status_of)
            .ok_or_else(|| JobError::NotFound { id: id.to_string() })
    }

    /// The job's handle, for tests and metrics.
    pub async fn handle(&self, id: &str) -> Option<JobHandle> {
        self.jobs
            .lock()
            .await
            .get(id)
            .and_then(|e| e.handle.clone())
    }

    /// Cancels a job: no final checkpoint; it will not be resumed.
    pub async fn cancel(&self, id: &str) -> Result<JobStatus, JobError> {
        let handle = self.mark(id, Desired::Cancelled).await?;
        if let Some(handle) = handle {
            handle.cancel().await;
        }
        self.status(id).await
    }

    /// Stops a job with a final checkpoint; it will not be resumed.
    pub async fn stop(&self, id: &str) -> Result<JobStatus, JobError> {
        let handle = {
            let jobs = self.jobs.lock().await;
            let entry = jobs
                .get(id)
                .ok_or_else(|| JobError::NotFound { id: id.to_string() })?;
            match &entry.handle {
                Some(h) if h.state() == JobState::Running => h.clone(),
                other => {
                    return Err(JobError::NotRunning {
                        id: id.to_string(),
                        state: other
                            .as_ref()
                            .map_or("not started".to_string(), |h| h.state().to_string()),
                        action: "stop",
                    });
                }
            }
        };
        handle.stop().await.map_err(|e| JobError::NotRunning {
            id: id.to_string(),
            state: format!("{} ({e})", handle.state()),
            action: "stop",
        })?;
        self.mark(id, Desired::Stopped).await?;
        self.status(id).await
    }

    async fn mark(&self, id: &str, desired: Desired) -> Result<Option<JobHandle>, JobError> {
        let mut jobs = self.jobs.lock().await;
        let entry = jobs
            .get_mut(id)
            .ok_or_else(|| JobError::NotFound { id: id.to_string() })?;
        entry.persisted.desired = desired;
        self.persist(&entry.persisted)?;
        Ok(entry.handle.clone())
    }

    /// Stops every running job with a final checkpoint (bounded by `timeout`, then cancelled),
    /// keeping them marked running so the next `silt up` resumes them.
    pub async fn shutdown(&self, timeout: Duration) {
        let handles: Vec<(String, JobHandle)> = self
            .jobs
            .lock()
            .await
            .iter()
            .filter_map(|(id, e)| e.handle.clone().map(|h| (id.clone(), h)))
            .collect();
        for (id, handle) in handles {
            if handle.state() != JobState::Running {
                handle.cancel().await;
                continue;
            }
            match tokio::time::timeout(timeout, handle.stop()).await {
                Ok(Ok(checkpoint)) => info!(job = %id, checkpoint, "job stopped for shutdown"),
                Ok(Err(e)) => warn!(job = %id, error = %e, "job stop failed at shutdown"),
                Err(_) => {
                    warn!(job = %id, "job stop timed out at shutdown; cancelling");
                    handle.cancel().await;
                }
            }
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

fn ended_entry(persisted: PersistedJob, start_error: Option<String>) -> Entry {
    Entry {
        persisted,
        handle: None,
        summary: Vec::new(),
        topology: Topology::default(),
        backpressure: Default::default(),
        checkpoint_interval: Duration::ZERO,
        start_error,
    }
}

fn status_of(entry: &Entry) -> JobStatus {
    let p = &entry.persisted;
    let mut status = JobStatus {
        id: p.id.clone(),
        name: p.definition.name.clone(),
        state: match (&entry.handle, p.desired) {
            (Some(h), _) => h.state().to_string(),
            (None, Desired::Cancelled) => "cancelled".into(),
            (None, Desired::Stopped) => "finished".into(),
            (None, Desired::Running) => "failed".into(),
        },
        desired: p.desired,
        failure: entry.start_error.clone(),
        // A job that could not start: its definition or tables (the message names which).
        failure_cause: entry
            .start_error
            .as_ref()
            .map(|_| silt_engine::Cause::User.as_str().to_string()),
        submitted_at_ms: p.submitted_at_ms,
        checkpoint_interval_ms: entry.checkpoint_interval.as_millis() as u64,
        graph: entry.summary.clone(),
        topology: entry.topology.clone(),
        ..JobStatus::default()
    };
    if let Some(handle) = &entry.handle {
        add_engine_status(&mut status, entry, handle);
    }
    status
}

/// What the engine knows of a running (or ended) job: its failure, checkpoints and metrics.
fn add_engine_status(status: &mut JobStatus, entry: &Entry, handle: &JobHandle) {
    if let JobState::Failed(failure) = handle.state() {
        status.failure = Some(failure.message);
        status.failure_cause = Some(failure.cause.as_str().to_string());
    }
    let m = handle.metrics();
    status.checkpoints_completed = m.checkpoints_completed as usize;
    status.checkpoints = m
        .checkpoints
        .iter()
        .rev()
        .take(STATUS_CHECKPOINTS_MAX)
        .rev()
        .map(|c| CheckpointStatus {
            id: c.checkpoint_id,
            duration_ms: c.duration_ms,
            size_bytes: c.size_bytes,
            completed_at_ms: c.completed_at_ms,
            is_final: c.is_final,
        })
        .collect();
    status.checkpoints_failed = m.checkpoints_failed;
    status.restarts = m.restarts;
    status.buffered_bytes = m.buffered_bytes;
    let mut sampler = entry
        .backpressure
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    status.topology =
        entry
            .topology
            .with_flow(&m.operators, &mut sampler, std::time::Instant::now());
    for o in m.operators {
        status.parallelism.insert(o.name.clone(), o.parallelism);
        status.operators.push(OperatorStatus {
            name: o.name,
            parallelism: o.parallelism,
            records_in: o.records_in,
            records_out: o.records_out,
            bytes_in: o.bytes_in,
            bytes_out: o.bytes_out,
            backpressured_ms: o.backpressured_ms,
            last_checkpoint_bytes: o.last_checkpoint_bytes,
            last_snapshot_ms: o.last_snapshot_ms,
        });
    }
}
