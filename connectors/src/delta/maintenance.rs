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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use deltalake::DeltaTable;
use futures::TryStreamExt;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use tracing::{info, warn};

use super::dv;
use super::error::{Error, Result};
use crate::lake_format::MaintenanceReport;

/// Where primary-key change files wait for their commit (hidden from Delta readers).
pub const STAGING_DIR: &str = "_silt_staging";

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
/// - no remove action younger than the vacuum age names it, as a data file (the table's
///   tombstones) or as the deletion vector of the file it removed ([`RemovesSeen`], read from
///   the commit files younger than the age, which log cleanup keeps).
pub(crate) async fn vacuum(
    table: &DeltaTable,
    retention: &Retention,
    waiting: &BTreeSet<String>,
    removes_seen: &mut RemovesSeen,
    uri: &str,
) -> Result<MaintenanceReport> {
    let cutoff = SystemTime::now()
        .checked_sub(retention.vacuum_age())
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
        let kept = removed_since(table, &candidates, cutoff, removes_seen, uri).await?;
        report.vectors_waiting = kept.vectors_waiting;
        let deletable = candidates
            .into_iter()
            .filter(|(path, _)| !kept.paths.contains(path.as_ref()));
        for (path, size) in deletable {
            if delete(store.as_ref(), &path, uri).await {
                report.files_deleted += 1;
                report.files_on_disk -= 1;
                report.bytes_reclaimed += size;
            }
        }
    }
    for (path, size) in staged_files.into_iter().filter_map(|meta| {
        let old = SystemTime::from(meta.last_modified) < cutoff;
        (old && !waiting.contains(meta.location.as_ref())).then_some((meta.location, meta.size))
    }) {
        if delete(store.as_ref(), &path, uri).await {
            report.staged_deleted += 1;
            report.bytes_reclaimed += size;
        }
    }
    report.at_ms = epoch_ms(SystemTime::now());
    Ok(report)
}

/// Deletes `path`; false (with a warning) when the store refused.
async fn delete(store: &dyn object_store::ObjectStore, path: &Path, uri: &str) -> bool {
    match store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => true,
        Err(e) => {
            warn!(table = uri, %path, error = %e, "could not delete an old unreferenced file");
            false
        }
    }
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

/// Of `candidates`, the files that must stay although old and unreferenced.
struct Kept {
    /// What remove actions younger than the cutoff name (or may name).
    paths: HashSet<String>,
    /// Deletion vectors kept only because the record of removes is full.
    vectors_waiting: u64,
}

/// The `candidates` that remove actions younger than `cutoff` name: data files by the table's
/// tombstones, deletion vectors by the commit files since `cutoff` ([`RemovesSeen`]; every
/// vector while it could not read them all).
async fn removed_since(
    table: &DeltaTable,
    candidates: &[(Path, u64)],
    cutoff: SystemTime,
    removes_seen: &mut RemovesSeen,
    uri: &str,
) -> Result<Kept> {
    let cutoff_ms = epoch_ms(cutoff);
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let mut paths: HashSet<String> = state
        .all_tombstones(table.log_store().as_ref())
        .try_filter(|t| futures::future::ready(t.deletion_timestamp().unwrap_or(0) >= cutoff_ms))
        .map_ok(|t| t.path().to_string())
        .try_collect()
        .await
        .map_err(Error::delta(uri))?;
    let vectors: Vec<&str> = candidates
        .iter()
        .map(|(p, _)| p.as_ref())
        .filter(|p| is_deletion_vector(p))
        .collect();
    let mut vectors_waiting = 0;
    if !vectors.is_empty() {
        let version = state.version();
        let store = table.object_store();
        removes_seen
            .read_since(store.as_ref(), version, cutoff, uri)
            .await?;
        if removes_seen.is_behind() {
            vectors_waiting = vectors.len() as u64;
            warn!(
                table = uri,
                vectors = vectors_waiting,
                bytes_max = removes_seen.bytes_max(),
                "the record of recent removes is full (lake.vacuum_removes_bytes_max), so old \
                 deletion vectors wait until its oldest entries expire; raise the bound, or lower \
                 lake.file_retention_ms"
            );
        }
        paths.extend(removes_seen.named(&vectors).into_iter().map(str::to_string));
    }
    Ok(Kept {
        paths,
        vectors_waiting,
    })
}

use silt_rt::clock::epoch_ms;

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

/// What maintenance remembers of the remove actions of recent commits: the deletion vectors
/// they superseded, which the table's tombstones do not carry. Each commit file is read once,
/// in version order, and an entry is forgotten once its commit is older than the vacuum age.
///
/// **Bounded:** at most `entries_max` vectors of 16 bytes (the commit's time and a hash of the
/// path); commits that remove nothing take no room. A commit that does not fit is left unread
/// with every one after it, and the record is *behind* until a later run, once its oldest
/// entries have aged out, reads on. A vector an unread commit names could be any vector, so
/// while it is behind [`RemovesSeen::named`] answers every one: vacuum keeps them all (later,
/// never wrong). Two paths sharing a hash keep each other (at worst one vector kept longer).
#[derive(Debug)]
pub(crate) struct RemovesSeen {
    /// In commit order: (commit time in ms since the epoch, hash of a vector's path).
    removed: VecDeque<(i64, u64)>,
    entries_max: usize,
    /// The next commit version to read; `None` before the first read.
    next_version: Option<u64>,
    /// Commits from `next_version` on were left unread for lack of room.
    behind: bool,
}

/// Past a gap of this many unread commits, [`RemovesSeen`] lists the log to skip those older
/// than the vacuum age (a listing page holds about 1,000 files) instead of reading each.
const COMMITS_READ_BEFORE_LISTING: u64 = 1_000;

/// The memory of one entry of [`RemovesSeen`].
pub const REMOVED_VECTOR_BYTES: usize = std::mem::size_of::<(i64, u64)>();

impl RemovesSeen {
    /// An empty record of at most `bytes_max` bytes of entries.
    pub(crate) fn new(bytes_max: usize) -> Self {
        RemovesSeen {
            removed: VecDeque::new(),
            entries_max: bytes_max / REMOVED_VECTOR_BYTES,
            next_version: None,
            behind: false,
        }
    }

    /// Brings the record up to the table's version `through`: forgets the entries of commits
    /// older than `since`, then reads the commit files not read yet, in version order, until
    /// one does not fit.
    async fn read_since(
        &mut self,
        store: &dyn object_store::ObjectStore,
        through: u64,
        since: SystemTime,
        uri: &str,
    ) -> Result<()> {
        let since_ms = epoch_ms(since);
        while self.removed.front().is_some_and(|(at, _)| *at < since_ms) {
            self.removed.pop_front();
        }
        let mut version = self.start_version(store, through, since, uri).await?;
        self.behind = false;
        while version <= through {
            // A commit cleaned up, or older than the age, names nothing a reader needs.
            if let Some((at, vectors)) = read_commit(store, version, uri).await?
                && at >= since_ms
            {
                if self.removed.len() + vectors.len() > self.entries_max {
                    self.behind = true;
                    break;
                }
                self.push(at, &vectors);
            }
            version += 1;
        }
        self.next_version = Some(version);
        Ok(())
    }

    /// Where to read on: the next commit not read, or, after a gap of more than
    /// [`COMMITS_READ_BEFORE_LISTING`] commits (the first read, or runs that found no vector
    /// to judge), the first commit not older than `since`, found by one listing rather than a
    /// read of every commit in the gap.
    async fn start_version(
        &self,
        store: &dyn object_store::ObjectStore,
        through: u64,
        since: SystemTime,
        uri: &str,
    ) -> Result<u64> {
        match self.next_version {
            Some(next) if through.saturating_sub(next) <= COMMITS_READ_BEFORE_LISTING => Ok(next),
            next => {
                let first = first_commit_since(store, since, uri).await?;
                // Commits before `next` are recorded already; before `first`, too old to matter.
                Ok(first.unwrap_or(through + 1).max(next.unwrap_or(0)))
            }
        }
    }

    /// Appends the vectors of a commit made at `at`, growing the queue no further than the
    /// bound.
    fn push(&mut self, at: i64, vectors: &[String]) {
        let needed = self.removed.len() + vectors.len();
        if needed > self.removed.capacity() {
            let grown = (self.removed.capacity() * 2).clamp(needed, self.entries_max);
            self.removed.reserve_exact(grown - self.removed.len());
        }
        self.removed
            .extend(vectors.iter().map(|path| (at, path_hash(path))));
        debug_assert!(self.removed.len() <= self.entries_max);
    }

    /// Of `vectors`, those a recorded remove names; all of them while the record is behind.
    fn named<'a>(&self, vectors: &[&'a str]) -> Vec<&'a str> {
        if self.behind {
            return vectors.to_vec();
        }
        let recorded: HashSet<u64> = self.removed.iter().map(|(_, hash)| *hash).collect();
        vectors
            .iter()
            .copied()
            .filter(|path| recorded.contains(&path_hash(path)))
            .collect()
    }

    fn is_behind(&self) -> bool {
        self.behind
    }

    fn bytes_max(&self) -> usize {
        self.entries_max * REMOVED_VECTOR_BYTES
    }

    /// Bytes the entries take (their queue's capacity).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.removed.capacity() * REMOVED_VECTOR_BYTES
    }
}

/// The hash [`RemovesSeen`] keeps of a path (fixed keys: the same in every run of a process).
fn path_hash(path: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    path.hash(&mut hasher);
    hasher.finish()
}

/// The oldest commit version whose file is not older than `since`, by one listing of the log.
async fn first_commit_since(
    store: &dyn object_store::ObjectStore,
    since: SystemTime,
    uri: &str,
) -> Result<Option<u64>> {
    store
        .list(Some(&Path::from("_delta_log")))
        .map_err(|e| Error::Internal(format!("listing {uri}/_delta_log: {e}")))
        .try_fold(None, |first: Option<u64>, meta| {
            let version = commit_version(meta.location.as_ref())
                .filter(|_| SystemTime::from(meta.last_modified) >= since);
            futures::future::ready(Ok(match (first, version) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }))
        })
        .await
}

/// The version of a commit file `_delta_log/<20 digits>.json`.
fn commit_version(path: &str) -> Option<u64> {
    let digits = path.strip_prefix("_delta_log/")?.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The commit file of `version`: when it was written (ms since the epoch) and the deletion
/// vectors its removes name; `None` when it is gone (cleaned up: older than the retention).
async fn read_commit(
    store: &dyn object_store::ObjectStore,
    version: u64,
    uri: &str,
) -> Result<Option<(i64, Vec<String>)>> {
    let path = Path::from(format!("_delta_log/{version:020}.json"));
    let reading = |e: object_store::Error| Error::Internal(format!("reading {uri}/{path}: {e}"));
    let got = match store.get(&path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(reading(e)),
    };
    let at = got.meta.last_modified.timestamp_millis();
    let bytes = got.bytes().await.map_err(reading)?;
    Ok(Some((
        at,
        removed_vectors(&bytes, &format!("{uri}/{path}"))?,
    )))
}

/// The deletion vectors of the files that the remove actions of one commit file remove.
fn removed_vectors(commit: &[u8], name: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Line {
        remove: Option<RemoveLine>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RemoveLine {
        deletion_vector: Option<deltalake::kernel::DeletionVectorDescriptor>,
    }
    let mut paths = Vec::new();
    for line in commit.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let parsed: Line = serde_json::from_slice(line)
            .map_err(|e| Error::Internal(format!("{name} holds an unreadable action: {e}")))?;
        if let Some(vector) = parsed.remove.and_then(|r| r.deletion_vector)
            && let Some(path) = dv::relative_path(&vector)?
        {
            paths.push(path);
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Puts commit files into a store as Delta writes them.
    struct Log(object_store::memory::InMemory);

    impl Log {
        async fn put(&self, version: u64, body: String) {
            let path = Path::from(format!("_delta_log/{version:020}.json"));
            let payload = object_store::PutPayload::from(body.into_bytes());
            self.0.put(&path, payload).await.unwrap();
        }
    }

    /// A commit that removes a file and with it the deletion vector [`vector_path`]`(n)`.
    fn commit_removing_vector(n: u128) -> String {
        let encoded = z85::encode(uuid::Uuid::from_u128(n).as_bytes());
        format!(
            "{{\"remove\":{{\"path\":\"__bucket=0/f{n}.parquet\",\"dataChange\":true,\"deletionTimestamp\":1,\"deletionVector\":{{\"storageType\":\"u\",\"pathOrInlineDv\":\"{encoded}\",\"offset\":1,\"sizeInBytes\":10,\"cardinality\":1}}}}}}\n"
        )
    }

    fn vector_path(n: u128) -> String {
        format!("deletion_vector_{}.bin", uuid::Uuid::from_u128(n))
    }

    /// Which of the vectors `ns` the record names, as numbers.
    fn named(seen: &RemovesSeen, ns: &[u128]) -> Vec<u128> {
        let paths: Vec<String> = ns.iter().map(|n| vector_path(*n)).collect();
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let named = seen.named(&refs);
        ns.iter()
            .copied()
            .filter(|n| named.contains(&vector_path(*n).as_str()))
            .collect()
    }

    /// Each maintenance run used to read every commit file younger than the vacuum age (at a
    /// 7-day retention and 1 s freshness, hundreds of thousands). It reads each once, and
    /// forgets its removes once the commit is older than the age.
    #[tokio::test]
    async fn removes_are_read_once_per_commit_file_and_forgotten_with_age() {
        let log = Log(object_store::memory::InMemory::new());
        log.put(0, "{\"commitInfo\":{}}\n".to_string()).await;
        log.put(1, commit_removing_vector(1)).await;
        let mut seen = RemovesSeen::new(1 << 20);
        let epoch = SystemTime::UNIX_EPOCH;
        seen.read_since(&log.0, 1, epoch, "t").await.unwrap();
        assert_eq!(named(&seen, &[1, 2, 3]), vec![1]);

        // A commit file already read is not read again (rewriting one in place, which Delta
        // never does, shows it); a new one is.
        log.put(1, commit_removing_vector(3)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let later = SystemTime::now();
        log.put(2, commit_removing_vector(2)).await;
        seen.read_since(&log.0, 2, epoch, "t").await.unwrap();
        assert_eq!(named(&seen, &[1, 2, 3]), vec![1, 2]);

        // Commit 1 is older than the age now: its vector is forgotten.
        seen.read_since(&log.0, 2, later, "t").await.unwrap();
        assert_eq!(named(&seen, &[1, 2, 3]), vec![2]);
        assert!(!seen.is_behind());
    }

    /// Issue 33 (item 9): the record of recent removes kept every commit file younger than the
    /// vacuum age (about 600,000 per primary-key table at 7 days and 1 s freshness). It holds at
    /// most its bound; past it, every deletion vector is kept while commits it could not read
    /// are younger than the age (vacuum later), and once its oldest entries age out it reads on.
    #[tokio::test]
    async fn the_record_of_removes_is_bounded_and_past_it_keeps_every_vector() {
        let log = Log(object_store::memory::InMemory::new());
        log.put(0, "{\"commitInfo\":{}}\n".to_string()).await;
        for n in 1..=200 {
            log.put(n, commit_removing_vector(n as u128)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let later = SystemTime::now();
        for n in 201..=300 {
            log.put(n, commit_removing_vector(n as u128)).await;
        }
        let bound = 100 * REMOVED_VECTOR_BYTES;
        let mut seen = RemovesSeen::new(bound);
        seen.read_since(&log.0, 300, SystemTime::UNIX_EPOCH, "t")
            .await
            .unwrap();
        assert!(
            seen.bytes() <= bound,
            "{} bytes kept, bound {bound}",
            seen.bytes()
        );
        assert!(seen.is_behind(), "commits 101..=300 did not fit");
        // Recorded (1), unread (250) or never removed (1000): all kept while behind.
        assert_eq!(named(&seen, &[1, 250, 1000]), vec![1, 250, 1000]);

        // Commits 1..=200 age out: the record forgets 1..=100, skips 101..=200 and reads on.
        seen.read_since(&log.0, 300, later, "t").await.unwrap();
        assert!(!seen.is_behind());
        assert!(
            seen.bytes() <= bound,
            "{} bytes kept, bound {bound}",
            seen.bytes()
        );
        assert_eq!(
            named(&seen, &[1, 150, 201, 250, 300, 1000]),
            vec![201, 250, 300]
        );
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
