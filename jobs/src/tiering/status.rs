//! What the service reports per table: hot and lake offsets, lag, commits and maintenance,
//! from each job's progress as its commits report it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{Context, Result};
use fluss::rpc::message::OffsetSpec;
use silt_connectors::changelog::BucketKey;
use silt_connectors::fluss::{TableShape, list_shaped_offsets};
use silt_connectors::lake_format::{LakeCommit, LakeSize};
use silt_rt::clock::now_ms;

use fluss::metadata::TablePath;

use super::*;

/// What the service knows about one lake-enabled table.
#[derive(Debug, Clone)]
pub struct TableTieringStatus {
    pub database: String,
    pub table: String,
    pub table_id: i64,
    /// A primary-key table, else a log table (`None`: not known, a table whose job never started).
    pub primary_key: Option<bool>,
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
    /// When this process last saw a lake commit of the table (ms since the epoch; `None`: not
    /// since its job started).
    pub lake_committed_ms: Option<i64>,
    /// The lake's data files and bytes as of that commit.
    pub lake_size: Option<LakeSize>,
    pub checkpoints: usize,
    pub restarts: u32,
    pub maintenance: MaintenanceTotals,
    pub commits: CommitTotals,
    /// What keeps tiering from keeping up, when something does: why its job cannot start (a
    /// gap, a primary-key table whose changelog lost its head; `job_state` is then `stalled`),
    /// or a lag past half of a Fluss cluster's `table.log.ttl`.
    pub problem: Option<String>,
}

/// The `job_state` of a table whose job cannot start (see [`TableTieringStatus::problem`]).
pub const STALLED: &str = "stalled";

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

/// Tables whose hot offsets a status read lists at once.
pub const STATUS_READS_CONCURRENT: usize = 16;

/// What a job says of its table, before the hot offsets are known (no buckets, no lag yet).
fn job_status(database: &str, table: &str, job: &TableJob) -> TableTieringStatus {
    let metrics = job.job.metrics();
    let p = job.progress.lock().unwrap();
    TableTieringStatus {
        database: database.to_string(),
        table: table.to_string(),
        table_id: job.table_id,
        primary_key: Some(job.primary_key),
        lake_uri: job.lake_uri.clone(),
        job_state: job.job.state().to_string(),
        freshness: job.freshness,
        buckets: BTreeMap::new(),
        lag_offsets: 0,
        lag_seconds: 0.0,
        delta_version: p.delta_version,
        lake_committed_ms: p.lake_committed_ms,
        lake_size: p.lake_size,
        checkpoints: metrics.checkpoints_completed as usize,
        restarts: metrics.restarts,
        maintenance: p.maintenance.clone(),
        commits: p.commits_with_percentiles(),
        problem: None,
    }
}

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

#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) lake_offsets: BTreeMap<BucketKey, i64>,
    pub(super) delta_version: Option<u64>,
    /// When the job started (ms since the epoch): the lag's origin before its first commit.
    pub(super) started_ms: i64,
    pub(super) maintenance: MaintenanceTotals,
    pub(super) commits: CommitTotals,
    /// The last [`RECENT_COMMITS`] commit durations, ms.
    pub(super) recent_commit_ms: std::collections::VecDeque<u64>,
    /// When this process last saw a lake commit of the table (ms since the epoch).
    pub(super) lake_committed_ms: Option<i64>,
    /// The lake's data files as of that commit.
    pub(super) lake_size: Option<LakeSize>,
    /// The longest commit since the history's last sample (see [`Progress::take_slowest_commit`]).
    pub(super) slowest_commit_ms: Option<u64>,
}

impl Progress {
    /// The totals with the recent commits' percentiles, computed when status is read rather
    /// than at every commit.
    pub(super) fn commits_with_percentiles(&self) -> CommitTotals {
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

    /// The longest commit since the last call (`None`: none completed), for the history.
    pub(super) fn take_slowest_commit(&mut self) -> Option<u64> {
        self.slowest_commit_ms.take()
    }

    pub(super) fn on_commit(&mut self, commit: &LakeCommit) {
        self.lake_offsets
            .extend(commit.bucket_offsets.iter().map(|(b, o)| (*b, *o)));
        self.delta_version = Some(commit.delta_version);
        let now = now_ms();
        self.lake_committed_ms = Some(now);
        self.lake_size = commit.size.or(self.lake_size);
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
        let ms = commit.duration.as_millis() as u64;
        self.recent_commit_ms.push_back(ms);
        self.slowest_commit_ms = Some(self.slowest_commit_ms.map_or(ms, |s| s.max(ms)));
        if let Some(c) = &commit.compaction {
            totals.last_compaction_ms = now;
            totals.compactions += 1;
            totals.files_compacted += c.files as u64;
            totals.rows_compacted += c.rows;
            totals.bytes_compacted += c.bytes;
        }
    }
}

impl TieringService {
    /// Hot high watermarks, lake offsets and lag per tiered table.
    pub async fn status(&self) -> Result<Vec<TableTieringStatus>> {
        let result = self.collect_status().await;
        self.on_error(result).await
    }

    /// Each job's status, with the hot high watermarks listed after the jobs' lock is let go
    /// (a status read of many tables does not hold discovery up). Every read lists them afresh:
    /// a caller that wrote and then asks whether tiering caught up must see its writes.
    pub(super) async fn collect_status(&self) -> Result<Vec<TableTieringStatus>> {
        let (tables, mut out) = {
            let jobs = self.jobs.lock().await;
            let tables: Vec<_> = (jobs.iter())
                .map(|((database, table), job)| (job_status(database, table, job), job))
                .map(|(status, job)| (status, job.shape, job.progress.clone(), job.log_ttl))
                .collect();
            (tables, self.stalled(&jobs))
        };
        let wanted: Vec<(i64, TablePath, TableShape)> = (tables.iter())
            .map(|(s, shape, ..)| (s.table_id, TablePath::new(&s.database, &s.table), *shape))
            .collect();
        let hot = self.hot_marks(&wanted).await?;
        for (mut status, _, progress, log_ttl) in tables {
            let p = progress.lock().unwrap();
            status.buckets = (hot.get(&status.table_id).into_iter().flatten())
                .map(|(b, hot)| (*b, (*hot, p.lake_offsets.get(b).copied().unwrap_or(0))))
                .collect();
            status.lag_offsets = status.buckets.values().map(|(h, l)| (h - l).max(0)).sum();
            if status.lag_offsets > 0 {
                let since = p.lake_committed_ms.unwrap_or(p.started_ms);
                status.lag_seconds = (now_ms() - since) as f64 / 1000.0;
            }
            drop(p);
            status.problem = self.ttl_warning(status.lag_seconds, log_ttl);
            out.push(status);
        }
        out.sort_by(|a, b| (&a.database, &a.table).cmp(&(&b.database, &b.table)));
        Ok(out)
    }

    /// The high watermarks of `tables` (by id), [`STATUS_READS_CONCURRENT`] tables at a time.
    async fn hot_marks(
        &self,
        tables: &[(i64, TablePath, TableShape)],
    ) -> Result<HashMap<i64, BTreeMap<BucketKey, i64>>> {
        use futures::{StreamExt, TryStreamExt};
        let connection = self.connection().await?;
        let connection = &connection;
        let listed: HashMap<i64, BTreeMap<BucketKey, i64>> = futures::stream::iter(tables.to_vec())
            .map(|(id, path, shape)| async move {
                let offsets = list_shaped_offsets(connection, &path, shape, OffsetSpec::Latest);
                let offsets = (offsets.await).with_context(|| format!("list offsets of {path}"))?;
                anyhow::Ok((id, offsets))
            })
            .buffer_unordered(STATUS_READS_CONCURRENT)
            .try_collect()
            .await?;
        Ok(listed)
    }

    /// Takes one [`Sample`] of every table with a job into the history (see [`super::history`]).
    pub(super) async fn sample_history(&self) -> Result<()> {
        let statuses = self.status().await?;
        let now = now_ms();
        let jobs = self.jobs.lock().await;
        let mut history = self.history.lock().unwrap();
        let mut live = std::collections::BTreeSet::new();
        for s in &statuses {
            let key = (s.database.clone(), s.table.clone());
            let Some(job) = jobs.get(&key).filter(|j| j.table_id == s.table_id) else {
                continue;
            };
            let commit_ms = job.progress.lock().unwrap().take_slowest_commit();
            let sample = Sample {
                t_ms: now,
                lag_offsets: s.lag_offsets,
                lag_ms: (s.lag_seconds * 1000.0).round() as i64,
                freshness_ms: s.lake_committed_ms.map(|at| (now - at).max(0)),
                commit_ms,
            };
            history.record(s.table_id, sample);
            live.insert(s.table_id);
        }
        history.retain(&live);
        Ok(())
    }

    /// The table's samples taken after `since_ms`, oldest first; `None` when the service does
    /// not know the table (not lake-enabled, or unknown).
    pub async fn history(&self, database: &str, table: &str, since_ms: i64) -> Option<Vec<Sample>> {
        let key = (database.to_string(), table.to_string());
        let table_id = match self.jobs.lock().await.get(&key) {
            Some(job) => job.table_id,
            None => self.problems.lock().unwrap().get(&key)?.0,
        };
        Some(self.history.lock().unwrap().since(table_id, since_ms))
    }

    /// A lag past half the table's TTL, where the hot tier expires its log whatever the lake
    /// holds (a Fluss cluster): past the TTL, rows expire untiered and tiering stops at a gap.
    fn ttl_warning(&self, lag_seconds: f64, log_ttl: Option<Duration>) -> Option<String> {
        let ttl = log_ttl.filter(|_| !self.config.retention_waits_for_lake)?;
        (lag_seconds > ttl.as_secs_f64() / 2.0).then(|| {
            format!(
                "tiering lags {lag_seconds:.0} s, over half of the table's table.log.ttl ({} s): \
                 rows older than the TTL expire from the Fluss cluster whether tiered or not; \
                 find why tiering is slow, or raise table.log.ttl",
                ttl.as_secs()
            )
        })
    }

    /// The tables whose job cannot start (and has not started since), as statuses that say
    /// why.
    fn stalled(&self, jobs: &Jobs) -> Vec<TableTieringStatus> {
        let problems = self.problems.lock().unwrap();
        problems
            .iter()
            .filter(|(key, _)| !jobs.contains_key(*key))
            .map(
                |((database, table), (table_id, problem))| TableTieringStatus {
                    database: database.clone(),
                    table: table.clone(),
                    table_id: *table_id,
                    primary_key: None,
                    lake_uri: self.config.lake_uri(database, table).unwrap_or_default(),
                    job_state: STALLED.to_string(),
                    freshness: self.config.freshness_default,
                    buckets: BTreeMap::new(),
                    lag_offsets: 0,
                    lag_seconds: 0.0,
                    delta_version: None,
                    lake_committed_ms: None,
                    lake_size: None,
                    checkpoints: 0,
                    restarts: 0,
                    maintenance: MaintenanceTotals::default(),
                    commits: CommitTotals::default(),
                    problem: Some(problem.clone()),
                },
            )
            .collect()
    }
}
