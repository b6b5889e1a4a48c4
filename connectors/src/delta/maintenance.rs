//! Lake maintenance the committer does without being asked: what a newer version no longer
//! needs is deleted once no reader inside the retention can still read it.
//!
//! - **Retention properties.** Tables this sink owns carry `delta.deletedFileRetentionDuration`
//!   and `delta.logRetentionDuration` equal to [`Retention::files`], so Delta checkpoints drop
//!   tombstones older than that and deltalake's post-commit hook deletes expired commit files
//!   (it keeps every version younger than the retention readable, and the newest checkpoint at or
//!   before the oldest of them). Without this a table tiered every second kept every commit file
//!   and every tombstone for 30 and 7 days: every snapshot load listed and replayed more of them.
//! - **Vacuum** ([`vacuum`], deltalake's full mode): data and deletion-vector files no version
//!   inside the retention references, and orphans (files of a tiering attempt that never
//!   committed), once older than [`Retention::vacuum_age`]. That age is at least
//!   [`Retention::in_flight_max`], the longest a writer's file can wait for its commit, so a file
//!   written for a checkpoint that has not completed yet is never taken for an orphan.
//! - **Staging sweep**: change files of primary-key tables under `_silt_staging/` (hidden from
//!   Delta, so vacuum skips them) that are older than the vacuum age and not pending here.
//!
//! A query reading a pinned version is safe while it runs shorter than the retention: a file it
//! reads was active at its version, so it is removed after the query began and deleted at least
//! one retention later. The service refuses a retention shorter than the longest query deadline.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use deltalake::DeltaTable;
use deltalake::operations::vacuum::VacuumMode;
use futures::TryStreamExt;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use tracing::{info, warn};

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

/// Deletes what no version inside the retention needs (see the module doc). `pending_staged`:
/// staged files of commits not made yet, which must survive.
pub(crate) async fn vacuum(
    table: &DeltaTable,
    retention: &Retention,
    pending_staged: &BTreeSet<String>,
    uri: &str,
) -> Result<(DeltaTable, MaintenanceReport)> {
    let age = retention.vacuum_age();
    let store = table.object_store();
    let sizes: HashMap<Path, u64> = store
        .list(None)
        .map_ok(|meta| (meta.location, meta.size))
        .try_collect()
        .await
        .map_err(|e| Error::Internal(format!("listing {uri}: {e}")))?;
    let (table, metrics) = table
        .clone()
        .vacuum()
        .with_mode(VacuumMode::Full)
        .with_retention_period(chrono::Duration::from_std(age).unwrap_or(chrono::Duration::days(7)))
        .with_enforce_retention_duration(false)
        .await
        .map_err(Error::delta(uri))?;
    let mut report = MaintenanceReport::default();
    for deleted in &metrics.files_deleted {
        report.files_deleted += 1;
        report.bytes_reclaimed += sizes
            .get(&Path::from(deleted.as_str()))
            .copied()
            .unwrap_or(0);
    }
    let cutoff = SystemTime::now()
        .checked_sub(age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let staged: Vec<(Path, u64)> = store
        .list(Some(&Path::from(STAGING_DIR)))
        .try_filter(|meta| {
            let expired = SystemTime::from(meta.last_modified) < cutoff
                && !pending_staged.contains(meta.location.as_ref());
            futures::future::ready(expired)
        })
        .map_ok(|meta| (meta.location, meta.size))
        .try_collect()
        .await
        .map_err(|e| Error::Internal(format!("listing {uri}/{STAGING_DIR}: {e}")))?;
    for (path, size) in staged {
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                report.staged_deleted += 1;
                report.bytes_reclaimed += size;
            }
            Err(e) => warn!(table = uri, %path, error = %e, "could not delete an old staged file"),
        }
    }
    report.at_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Ok((table, report))
}

#[cfg(test)]
mod tests {
    use super::*;

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
