//! Lake maintenance the committer does without being asked: what a newer version no longer
//! needs is deleted once no reader inside the retention can still read it.
//!
//! - **Retention properties.** Tables this sink owns carry `delta.deletedFileRetentionDuration`
//!   and `delta.logRetentionDuration` equal to [`Retention::files`], so Delta checkpoints drop
//!   tombstones older than that and deltalake's post-commit hook deletes expired commit files
//!   (it keeps every version younger than the retention readable, and the newest checkpoint at or
//!   before the oldest of them). Without this a table tiered every second kept every commit file
//!   and every tombstone for 30 and 7 days: every snapshot load listed and replayed more of them.
//! - **Vacuum** ([`vacuum`]): data and deletion-vector files no version inside the retention
//!   references, and orphans (files of a tiering attempt that never committed), once older than
//!   [`Retention::vacuum_age`]. That age is at least
//!   [`Retention::in_flight_max`], the longest a writer's file can wait for its commit, so a file
//!   written for a checkpoint that has not completed yet is never taken for an orphan.
//! - **Staging sweep**: change files of primary-key tables under `_silt_staging/` (hidden from
//!   Delta, so vacuum skips them) that are older than the vacuum age and not pending here.
//!
//! A query reading a pinned version is safe while it runs shorter than the retention: a file it
//! reads was active at its version, so it is removed after the query began and deleted at least
//! one retention later. The service refuses a retention shorter than the longest query deadline.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use deltalake::DeltaTable;
use futures::TryStreamExt;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use tracing::{info, warn};

use super::dv;
use super::error::{Error, Result};

/// Where primary-key change files wait for their commit (hidden from Delta readers).
pub(crate) const STAGING_DIR: &str = "_silt_staging";

/// How long the lake keeps what newer versions no longer need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Removed files and expired commit files are kept this long (`lake.file_retention`).
    pub files: Duration,
    /// The longest a written file may wait for its commit: twice the checkpoint interval plus
    /// the checkpoint timeout, from the job that writes the table.
    pub in_flight_max: Duration,
    /// How often maintenance runs (after a commit, once this much time has passed).
    pub interval: Duration,
}

impl Retention {
    /// Delta's own default for `delta.deletedFileRetentionDuration`.
    pub const FILES_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);

    /// A retention of `files`, maintained every `files / 2` (between 30 s and 1 h).
    pub fn new(files: Duration, in_flight_max: Duration) -> Self {
        Retention {
            files,
            in_flight_max,
            interval: (files / 2).clamp(Duration::from_secs(30), Duration::from_secs(3600)),
        }
    }

    /// Files nothing references are deleted once older than this.
    pub fn vacuum_age(&self) -> Duration {
        self.files.max(self.in_flight_max)
    }

    /// The Delta table properties that carry the retention.
    pub fn table_properties(&self) -> HashMap<String, String> {
        let interval = format!("interval {} seconds", self.files.as_secs().max(1));
        HashMap::from([
            (
                "delta.deletedFileRetentionDuration".to_string(),
                interval.clone(),
            ),
            ("delta.logRetentionDuration".to_string(), interval),
            (
                "delta.enableExpiredLogCleanup".to_string(),
                "true".to_string(),
            ),
        ])
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention::new(Self::FILES_DEFAULT, Duration::from_secs(300))
    }
}

/// What one maintenance run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub files_deleted: u64,
    pub bytes_reclaimed: u64,
    pub staged_deleted: u64,
    /// Data files the current version references.
    pub active_files: u64,
    /// Data and deletion-vector files on storage after the run.
    pub files_on_disk: u64,
    /// When it finished, in ms since the epoch.
    pub at_ms: i64,
}

/// Sets the retention properties on a table whose properties differ (tables created before
/// silt set them, or under another `lake.file_retention`). One metadata commit; none when equal.
pub(crate) async fn apply_retention_properties(
    table: DeltaTable,
    retention: &Retention,
    uri: &str,
) -> Result<DeltaTable> {
    let wanted = retention.table_properties();
    let snapshot = table.snapshot().map_err(Error::delta(uri))?;
    let configuration = snapshot.metadata().configuration();
    let differs = wanted
        .iter()
        .any(|(key, value)| configuration.get(key) != Some(value));
    if !differs {
        return Ok(table);
    }
    info!(
        table = uri,
        ?wanted,
        "setting the lake's retention properties"
    );
    table
        .set_tbl_properties()
        .with_properties(wanted)
        .await
        .map_err(Error::delta(uri))
}

/// Deletes what no version inside the retention needs (see the module doc). `waiting`: files
/// of commits not made yet, which must survive however old (staged change files, and the
/// files of a prepared compaction no commit has carried yet).
///
/// Deltalake's vacuum (full mode) is not used: it keeps the data files of recent tombstones but
/// not their deletion vectors, so a vector older than the retention that a commit had just
/// superseded was deleted while the previous version (a running query's, or time travel inside
/// the retention) still needed it. Here a file goes only when all of these hold:
/// - the current version does not reference it (as a data file or a deletion vector);
/// - it is older than [`Retention::vacuum_age`] (so neither a file waiting for its commit nor
///   one a young version references);
/// - no remove action younger than the vacuum age names it, as a data file or as the deletion
///   vector of the file it removed (read from the table's tombstones, and for vectors from the
///   commit files younger than the age, which log cleanup keeps).
pub(crate) async fn vacuum(
    table: &DeltaTable,
    retention: &Retention,
    waiting: &BTreeSet<String>,
    removes_seen: &mut RemovesSeen,
    uri: &str,
) -> Result<MaintenanceReport> {
    let age = retention.vacuum_age();
    let cutoff = SystemTime::now()
        .checked_sub(age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let store = table.object_store();
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let referenced = referenced_files(table, uri)?;
    let (staged_files, files) = list_table_files(store.as_ref(), uri).await?;
    let mut report = MaintenanceReport {
        active_files: state.log_data().num_files() as u64,
        files_on_disk: files.len() as u64,
        ..MaintenanceReport::default()
    };
    let candidates: Vec<(Path, u64)> = files
        .into_iter()
        .filter(|meta| {
            !referenced.contains(meta.location.as_ref())
                && !waiting.contains(meta.location.as_ref())
                && SystemTime::from(meta.last_modified) < cutoff
        })
        .map(|meta| (meta.location, meta.size))
        .collect();
    if !candidates.is_empty() {
        let removed_recently = removed_since(table, &candidates, cutoff, removes_seen, uri).await?;
        for (path, size) in candidates {
            if removed_recently.contains(path.as_ref()) {
                continue;
            }
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    report.files_deleted += 1;
                    report.files_on_disk -= 1;
                    report.bytes_reclaimed += size;
                }
                Err(e) => {
                    warn!(table = uri, %path, error = %e, "could not delete an unreferenced file")
                }
            }
        }
    }
    let staged: Vec<(Path, u64)> = staged_files
        .into_iter()
        .filter(|meta| {
            SystemTime::from(meta.last_modified) < cutoff
                && !waiting.contains(meta.location.as_ref())
        })
        .map(|meta| (meta.location, meta.size))
        .collect();
    for (path, size) in staged {
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                report.staged_deleted += 1;
                report.bytes_reclaimed += size;
            }
            Err(e) => warn!(table = uri, %path, error = %e, "could not delete an old staged file"),
        }
    }
    report.at_ms = epoch_ms(SystemTime::now());
    Ok(report)
}

/// The files the current version references: its data files and their deletion vectors.
fn referenced_files(table: &DeltaTable, uri: &str) -> Result<HashSet<String>> {
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let mut referenced: HashSet<String> = HashSet::new();
    for file in state.log_data().iter() {
        referenced.insert(file.path().to_string());
        if let Some(vector) = file.deletion_vector_descriptor()
            && let Some(path) = dv::relative_path(&vector)?
        {
            referenced.insert(path);
        }
    }
    Ok(referenced)
}

/// One listing of the table serves both sweeps: the staged change files under
/// `_silt_staging/` (first) and the data and vector files (second).
async fn list_table_files(
    store: &dyn object_store::ObjectStore,
    uri: &str,
) -> Result<(Vec<object_store::ObjectMeta>, Vec<object_store::ObjectMeta>)> {
    let listing_error = |e: object_store::Error| Error::Internal(format!("listing {uri}: {e}"));
    let listed: Vec<object_store::ObjectMeta> = store
        .list(None)
        .try_filter(|meta| {
            let path = meta.location.as_ref();
            futures::future::ready(
                is_data_file(path) || is_deletion_vector(path) || is_staged(path),
            )
        })
        .try_collect()
        .await
        .map_err(listing_error)?;
    Ok(listed
        .into_iter()
        .partition(|meta| is_staged(meta.location.as_ref())))
}

/// The paths remove actions younger than `cutoff` name: the table's tombstones, and when a
/// deletion vector is among the `candidates`, the vectors of the files the commit files since
/// `cutoff` removed.
async fn removed_since(
    table: &DeltaTable,
    candidates: &[(Path, u64)],
    cutoff: SystemTime,
    removes_seen: &mut RemovesSeen,
    uri: &str,
) -> Result<HashSet<String>> {
    let cutoff_ms = epoch_ms(cutoff);
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let mut removed_recently: HashSet<String> = state
        .all_tombstones(table.log_store().as_ref())
        .try_filter(|t| futures::future::ready(t.deletion_timestamp().unwrap_or(0) >= cutoff_ms))
        .map_ok(|t| t.path().to_string())
        .try_collect()
        .await
        .map_err(Error::delta(uri))?;
    if candidates
        .iter()
        .any(|(p, _)| is_deletion_vector(p.as_ref()))
    {
        let store = table.object_store();
        removes_seen.read_since(store.as_ref(), cutoff, uri).await?;
        removed_recently.extend(removes_seen.paths());
    }
    Ok(removed_recently)
}

fn epoch_ms(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A data file of a table this sink writes: a Parquet file in a bucket's directory, below the
/// partition directories of a partitioned table (`__bucket=<n>/part-...parquet`,
/// `dt=2026-12-01/__partition_id=4/__bucket=0/part-...parquet`). Every directory on the way is
/// a partition directory (`<column>=<value>`), so nothing under `_delta_log/`,
/// `_silt_staging/` or another directory Delta hides is taken for one.
fn is_data_file(path: &str) -> bool {
    let mut parts = path.rsplit('/');
    let name = parts.next().unwrap_or_default();
    let mut dirs = parts.peekable();
    let in_bucket = dirs.peek().is_some_and(|d| d.starts_with("__bucket="));
    in_bucket
        && dirs.all(|d| d.contains('='))
        && name.ends_with(".parquet")
        && !name.starts_with(['_', '.'])
}

/// A change file waiting for its commit.
fn is_staged(path: &str) -> bool {
    path.strip_prefix(STAGING_DIR)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// A deletion vector file, at the root or under a prefix directory.
fn is_deletion_vector(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("deletion_vector_") && name.ends_with(".bin") && !path.starts_with('_')
}

/// The paths (data files and their deletion vectors) that remove actions name, per commit file
/// read, so that a maintenance run reads only the commit files written since the previous one.
#[derive(Debug, Default)]
pub(crate) struct RemovesSeen {
    by_commit: HashMap<String, Vec<String>>,
}

impl RemovesSeen {
    /// Brings the set up to the commit files written since `since`: reads those not read
    /// before, forgets those older (or cleaned up).
    async fn read_since(
        &mut self,
        store: &dyn object_store::ObjectStore,
        since: SystemTime,
        uri: &str,
    ) -> Result<()> {
        let commits: Vec<Path> = store
            .list(Some(&Path::from("_delta_log")))
            .try_filter(|meta| {
                futures::future::ready(
                    meta.location.as_ref().ends_with(".json")
                        && SystemTime::from(meta.last_modified) >= since,
                )
            })
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| Error::Internal(format!("listing {uri}/_delta_log: {e}")))?;
        let listed: HashSet<&str> = commits.iter().map(|c| c.as_ref()).collect();
        self.by_commit
            .retain(|commit, _| listed.contains(commit.as_str()));
        for commit in &commits {
            if self.by_commit.contains_key(commit.as_ref()) {
                continue;
            }
            let bytes = match store.get(commit).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .map_err(|e| Error::Internal(format!("reading {uri}/{commit}: {e}")))?,
                // Cleaned up meanwhile: older than the retention, so not needed.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(Error::Internal(format!("reading {uri}/{commit}: {e}"))),
            };
            let removed = removed_paths(&bytes, &format!("{uri}/{commit}"))?;
            self.by_commit.insert(commit.to_string(), removed);
        }
        Ok(())
    }

    fn paths(&self) -> impl Iterator<Item = String> + '_ {
        self.by_commit.values().flatten().cloned()
    }

    /// Commit files read so far and still kept.
    #[cfg(test)]
    fn commits(&self) -> usize {
        self.by_commit.len()
    }
}

/// The paths that the remove actions of one commit file name: data files and their deletion
/// vectors.
fn removed_paths(commit: &[u8], name: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Line {
        remove: Option<RemoveLine>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RemoveLine {
        path: String,
        deletion_vector: Option<deltalake::kernel::DeletionVectorDescriptor>,
    }
    let mut paths = Vec::new();
    for line in commit.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let parsed: Line = serde_json::from_slice(line)
            .map_err(|e| Error::Internal(format!("{name} holds an unreadable action: {e}")))?;
        if let Some(remove) = parsed.remove {
            if let Some(vector) = &remove.deletion_vector
                && let Some(path) = dv::relative_path(vector)?
            {
                paths.push(path);
            }
            paths.push(remove.path);
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each maintenance run used to read every commit file younger than the vacuum age (at a
    /// 7-day retention and 1 s freshness, hundreds of thousands). It now reads each once.
    #[tokio::test]
    async fn removes_are_read_once_per_commit_file_and_forgotten_with_it() {
        use object_store::PutPayload;
        let store = object_store::memory::InMemory::new();
        let commit = |n: u64| Path::from(format!("_delta_log/{n:020}.json"));
        let remove = |path: &str| {
            format!(
                "{{\"remove\":{{\"path\":\"{path}\",\"dataChange\":true,\"deletionTimestamp\":1}}}}\n"
            )
        };
        let put = |n: u64, body: String| {
            let store = &store;
            async move {
                store
                    .put(&commit(n), PutPayload::from(body.into_bytes()))
                    .await
                    .unwrap();
            }
        };
        put(0, "{\"commitInfo\":{}}\n".to_string()).await;
        put(1, remove("a.parquet")).await;
        let mut seen = RemovesSeen::default();
        let since = SystemTime::UNIX_EPOCH;
        seen.read_since(&store, since, "t").await.unwrap();
        let mut paths: Vec<String> = seen.paths().collect();
        paths.sort();
        assert_eq!(paths, vec!["a.parquet".to_string()]);
        assert_eq!(seen.commits(), 2);

        // A commit file already read is not read again (rewriting one in place, which Delta
        // never does, shows it); a new one is.
        put(1, remove("changed.parquet")).await;
        put(2, remove("b.parquet")).await;
        seen.read_since(&store, since, "t").await.unwrap();
        let mut paths: Vec<String> = seen.paths().collect();
        paths.sort();
        assert_eq!(
            paths,
            vec!["a.parquet".to_string(), "b.parquet".to_string()]
        );

        // Log cleanup deleted commit 1: its removes are forgotten.
        store.delete(&commit(1)).await.unwrap();
        seen.read_since(&store, since, "t").await.unwrap();
        assert_eq!(
            seen.paths().collect::<Vec<_>>(),
            vec!["b.parquet".to_string()]
        );
        assert_eq!(seen.commits(), 2);
    }

    /// Issue 33 (item 10): only paths starting `__bucket=` were data files, so a partitioned
    /// lake's were never vacuumed nor counted.
    #[test]
    fn data_files_are_found_below_partition_directories() {
        for (path, data) in [
            ("__bucket=0/part-00000-a.parquet", true),
            (
                "dt=2026-12-01/__partition_id=4/__bucket=0/part-00000-a.parquet",
                true,
            ),
            (
                "a=1/b=x/__partition_id=4/__bucket=12/part-00000-a.snappy.parquet",
                true,
            ),
            ("dt=2026-12-01/__partition_id=4/part-00000-a.parquet", false),
            (
                "dt=2026-12-01/__partition_id=4/__bucket=0/_hidden.parquet",
                false,
            ),
            (
                "dt=2026-12-01/__partition_id=4/__bucket=0/part-00000-a.json",
                false,
            ),
            ("_delta_log/__bucket=0/part-00000-a.parquet", false),
            ("_silt_staging/__bucket=0/x.parquet", false),
            ("_delta_log/00000000000000000010.checkpoint.parquet", false),
            ("part-00000-a.parquet", false),
            ("deletion_vector_0b5c.bin", false),
        ] {
            assert_eq!(is_data_file(path), data, "{path}");
        }
    }

    #[test]
    fn vacuum_never_outruns_a_file_waiting_for_its_commit() {
        let r = Retention::new(Duration::from_secs(60), Duration::from_secs(250));
        assert_eq!(r.vacuum_age(), Duration::from_secs(250));
        let r = Retention::new(Duration::from_secs(600), Duration::from_secs(250));
        assert_eq!(r.vacuum_age(), Duration::from_secs(600));
        assert_eq!(r.interval, Duration::from_secs(300));
        assert_eq!(
            r.table_properties()["delta.deletedFileRetentionDuration"],
            "interval 600 seconds"
        );
    }
}
