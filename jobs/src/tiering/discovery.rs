//! Discovery: which tables are lake-enabled now, which jobs belong to tables dropped,
//! re-created, evolved or behind their lake, and starting the jobs of the tables this process
//! tiers.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use tracing::{info, warn};

use super::*;

/// How often a worker reads the lake of a table another worker tiers, for its hot store.
const OTHERS_LAKES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

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
        let listing = list_tables(&admin).await?;
        let mut jobs = self.jobs.lock().await;
        self.retire_changed(&mut jobs, &listing).await;
        self.restart_off_course(&mut jobs, &connection, &admin)
            .await;
        self.problems
            .lock()
            .unwrap()
            .retain(|key, _| listing.seen.contains_key(key));
        self.follow_assignment(&mut jobs, &connection, listing)
            .await
    }

    /// Cancels the jobs of tables dropped, recreated or no longer lake-enabled (deleting the
    /// state of a table id that is gone), and of tables that gained columns: a new job reads and
    /// writes the new schema, restored from the old one's checkpoint (its sink adds the columns
    /// to the lake when it opens; the old job never tiers a row of the new schema: its source
    /// stops at the first one).
    async fn retire_changed(&self, jobs: &mut Jobs, listing: &Listing) {
        let Listing { seen, ids, unknown } = listing;
        let stale = take_jobs(jobs, |key, job| {
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
        let evolved = take_jobs(jobs, |key, job| {
            !job.explicit
                && seen.get(key).is_some_and(|info| {
                    info.get_table_id() == job.table_id && info.get_schema_id() != job.schema_id
                })
        });
        for (key, job) in evolved {
            info!(table = %format!("{}.{}", key.0, key.1), from = job.schema_id, "tiering: the table's schema changed; starting its job again under the new schema");
            job.job.cancel().await;
        }
    }

    /// Jobs whose checkpoint no longer fits: ahead of their lake (a commit was refused), or at
    /// a position the hot tier no longer holds (a gap). Their checkpoints go; a discovered
    /// table's job starts again from the lake below (which reports a gap rather than skip it),
    /// one started by `tier_table` here.
    async fn restart_off_course(
        &self,
        jobs: &mut Jobs,
        connection: &fluss::client::FlussConnection,
        admin: &fluss::client::FlussAdmin,
    ) {
        let flagged = |job: &TableJob| {
            use std::sync::atomic::Ordering::SeqCst;
            (job.lake_behind.load(SeqCst), job.log_gap.load(SeqCst))
        };
        let off_course = take_jobs(jobs, |_, job| flagged(job) != (false, false));
        for (key, job) in off_course {
            let table = format!("{}.{}", key.0, key.1);
            match flagged(&job) {
                (true, _) => {
                    warn!(%table, "tiering: a commit was refused because the job's checkpoint is ahead of its lake; discarding the job's checkpoints and starting again from the lake's txn offsets")
                }
                _ => {
                    warn!(%table, "tiering: the job's position expired from the hot tier before it was tiered; stopping the job (its status says what is missing)")
                }
            }
            job.job.cancel().await;
            self.remove_job_state(&key.0, &key.1, job.table_id, false);
            if job.explicit {
                self.restart_explicit(jobs, connection, admin, key).await;
            }
        }
    }

    /// Asks the coordinator which tables this process tiers: stops the jobs of tables another
    /// worker has now (their checkpoints stay; a job that gets the table back resumes no lower
    /// than where the lake ends), and starts the jobs of tables it got.
    async fn follow_assignment(
        &self,
        jobs: &mut Jobs,
        connection: &fluss::client::FlussConnection,
        listing: Listing,
    ) -> Result<()> {
        let Listing { seen, unknown, .. } = listing;
        let candidates: Vec<Candidate> = seen
            .iter()
            .map(|((database, table), info)| Candidate {
                database: database.clone(),
                table: table.clone(),
                table_id: info.get_table_id(),
            })
            .collect();
        let assigned = self.coordinator.assign(&candidates).await?;
        let moved = take_jobs(jobs, |key, job| {
            !job.explicit && !unknown.contains(key) && !assigned.contains(&job.table_id)
        });
        for (key, job) in moved {
            info!(table = %format!("{}.{}", key.0, key.1), "tiering: this table is tiered by another worker now; stopping its job here");
            job.job.cancel().await;
        }
        let others: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| !assigned.contains(&c.table_id))
            .collect();
        self.record_others_lakes(connection, &others).await;
        for (key, info) in seen {
            if jobs.contains_key(&key) || !assigned.contains(&info.get_table_id()) {
                continue;
            }
            let started = self.start_job(connection, &key.0, &key.1, &info).await;
            self.note_start(&key, info.get_table_id(), started.as_ref().err());
            if let Ok(job) = started {
                jobs.insert(key, job);
            }
        }
        Ok(())
    }

    /// Tells the co-located hot store (its retention waits for the lake) what the lakes of
    /// tables other workers tier hold: read from each lake's commits, at most every
    /// [`OTHERS_LAKES_EVERY`] per table. Without it the hot store would keep their changelogs
    /// for good. A failure is logged; the next round tries again.
    async fn record_others_lakes(
        &self,
        connection: &fluss::client::FlussConnection,
        others: &[&Candidate],
    ) {
        if !self.config.retention_waits_for_lake {
            return;
        }
        for table in others {
            let due = {
                let mut observed = self.others_observed.lock().unwrap();
                let due = observed
                    .get(&table.table_id)
                    .is_none_or(|at| at.elapsed() >= OTHERS_LAKES_EVERY);
                if due {
                    observed.insert(table.table_id, std::time::Instant::now());
                }
                due
            };
            if !due {
                continue;
            }
            if let Err(e) = self.record_lake_of(connection, table).await {
                warn!(table = %format!("{}.{}", table.database, table.table), error = %format!("{e:#}"), "tiering: cannot read the lake another worker tiers; the hot store keeps its changelog until it can");
            }
        }
    }

    async fn record_lake_of(
        &self,
        connection: &fluss::client::FlussConnection,
        table: &Candidate,
    ) -> Result<()> {
        let path = fluss::metadata::TablePath::new(table.database.clone(), table.table.clone());
        let buckets: Vec<silt_connectors::changelog::BucketKey> =
            silt_connectors::fluss::list_bucket_offsets(
                connection,
                &path,
                fluss::rpc::message::OffsetSpec::Latest,
            )
            .await?
            .into_keys()
            .collect();
        let uri = self.config.lake_uri(&table.database, &table.table)?;
        let Some(lake) = self
            .config
            .format
            .committed_offsets(&uri, &self.config.storage_options, table.table_id, &buckets)
            .await?
        else {
            return Ok(());
        };
        let offsets: Vec<_> = lake.bucket_offsets.into_iter().collect();
        self.coordinator
            .record_lake_snapshot(table.table_id, lake.delta_version as i64, &offsets)
    }

    /// Records why a table's job could not start (logged once per reason, shown in its status
    /// until it starts), or that it started.
    fn note_start(&self, key: &(String, String), table_id: i64, error: Option<&anyhow::Error>) {
        let mut problems = self.problems.lock().unwrap();
        let Some(error) = error else {
            problems.remove(key);
            return;
        };
        let text = format!("{error:#}");
        if problems.get(key).is_none_or(|(_, known)| *known != text) {
            warn!(table = %format!("{}.{}", key.0, key.1), error = %text, "tiering: cannot start job; trying again each discovery pass");
            problems.insert(key.clone(), (table_id, text));
        }
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
