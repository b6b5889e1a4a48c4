//! Discovery: which tables are lake-enabled now, which jobs belong to tables dropped,
//! re-created, evolved or behind their lake, and starting the jobs of the tables this process
//! tiers.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use tracing::{info, warn};

use super::*;

/// Every table a discovery pass saw, by `(database, table)`.
pub(super) struct Listing {
    /// The lake-enabled tables, described.
    seen: BTreeMap<(String, String), fluss::metadata::TableInfo>,
    /// Every table's id, lake-enabled or not.
    ids: BTreeMap<(String, String), i64>,
    /// Tables listed but not described (a transient error): neither started nor cancelled.
    unknown: std::collections::BTreeSet<(String, String)>,
}

pub(super) async fn list_tables(admin: &fluss::client::FlussAdmin) -> Result<Listing> {
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

/// Removes the jobs `pick` chooses and returns them, in key order.
pub(super) fn take_jobs(
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

impl TieringService {
    pub(super) async fn discover(&self) -> Result<()> {
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
            if jobs.contains_key(&key)
                || !self.coordinator.tiers(&key.0, &key.1, info.get_table_id())
            {
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
    pub(super) async fn restart_explicit(
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
    pub(super) fn remove_job_state(
        &self,
        database: &str,
        table: &str,
        table_id: i64,
        key_index: bool,
    ) {
        let mut dirs = vec![silt_connectors::lake::layout::tiering_checkpoint_dir(
            &self.config.checkpoint_root,
            database,
            table,
            table_id,
        )];
        if let (true, Some(root)) = (key_index, &self.config.lake_state_root) {
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
}
