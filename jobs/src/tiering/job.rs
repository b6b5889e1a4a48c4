//! One table's tiering job: the lake claimed for its table id, where it resumes, the Fluss
//! source and the lake format's sink, and what each commit does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use fluss::rpc::message::OffsetSpec;
use futures::FutureExt;
use silt_connectors::changelog::BucketKey;
use silt_connectors::fluss::{
    FlussSource, FlussSourceConfig, LogGapHook, ResumeFloor, StartPosition, list_bucket_offsets,
};
use silt_connectors::lake_format::{LakeCommit, LakeCommitHook, LakeOwner, TableKind, TieringSink};
use silt_engine::{JobConfig, JobGraph, Source, TaskContext};
use silt_rt::clock::now_ms;
use tracing::{info, warn};

use super::*;

impl TieringService {
    /// Makes the lake location of `database.table` this table id's: a lake there that belongs
    /// to another id (a dropped table of the same name) is moved to
    /// `<lake_root>/__dropped/<db>.<table>-<id>`, where it stays until a user removes it.
    pub(super) async fn claim_lake(
        &self,
        database: &str,
        table: &str,
        lake_uri: &str,
        table_id: i64,
        buckets: u32,
    ) -> Result<()> {
        let options = &self.config.storage_options;
        let format = &self.config.format;
        let LakeOwner::Foreign { owner } = format
            .owner(lake_uri, options, table_id, buckets)
            .await
            .with_context(|| format!("reading who owns the lake at {lake_uri}"))?
        else {
            return Ok(());
        };
        // The owner becomes part of a path: only a table id (a number) is used as is.
        let owner_id = owner.as_deref().and_then(|o| o.parse::<i64>().ok());
        let to = silt_connectors::lake::layout::dropped_lake_relative(database, table, owner_id)?;
        let from = silt_connectors::lake::layout::lake_relative(database, table)?;
        let moved = format
            .move_aside(&self.config.lake_root, options, &from, &to)
            .await
            .with_context(|| format!("moving the lake of a dropped {database}.{table} aside"))?;
        warn!(
            table = %format!("{database}.{table}"),
            table_id,
            previous_owner = owner.as_deref().unwrap_or("unknown"),
            from = lake_uri,
            to = %moved,
            "tiering: the lake here belonged to a dropped table of the same name; moved it aside, whole (any reader of its format can read it there). To remove it, delete {moved}; to get it back as the lake of this name, drop the new table and move it back to {lake_uri}"
        );
        Ok(())
    }

    pub(super) async fn start_job(
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
        self.claim_lake(database, table, &lake_uri, table_id, buckets)
            .await?;
        let (start_offsets, progress) = self.resume_point(connection, info, &lake_uri).await?;
        let lake_behind = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let log_gap = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sink = TieringSink {
            uri: lake_uri.clone(),
            storage_options: self.config.storage_options.clone(),
            table_id,
            kind: table_kind(info),
            user_schema,
            partition_keys: info.get_partition_keys().to_vec(),
            start_offsets: start_offsets.clone(),
            commit_interval: freshness,
            checkpoint_timeout: self.config.checkpoint_timeout,
            parallelism: self.config.writer_parallelism.clamp(1, buckets),
            state_dir: self.state_dir(database, table, table_id)?,
            settings: self.config.lake.clone(),
            on_commit: commit_hook(table_id, self.coordinator.clone(), progress.clone()),
            on_offset_gap: offset_gap_hook(&lake_behind),
            fault_injection: self.fault_injection(),
        };
        let graph = self.tiering_graph(
            TableRef {
                database,
                table,
                table_id,
                buckets,
            },
            start_offsets,
            sink,
            &log_gap,
        )?;
        let job_config = self.tiering_job_config(database, table, table_id, freshness)?;
        let job = self.manager.submit(graph, job_config)?;
        info!(table = %name, %lake_uri, ?freshness, "tiering: job started");
        Ok(TableJob {
            explicit: false,
            table_id,
            schema_id: info.get_schema_id(),
            primary_key: info.has_primary_key(),
            shape: silt_connectors::fluss::TableShape::of(info),
            lake_behind,
            log_gap,
            log_ttl: log_ttl(info),
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
    ///
    /// Refuses ([`Stalled`]) where the changelog no longer holds what the lake needs next: a
    /// bucket whose log now starts past the lake's end (a gap: its rows expired from the hot
    /// tier untiered), or a primary-key table with nothing in the lake whose changelog no longer
    /// starts at 0 (its state cannot be rebuilt from the log alone). A log table with nothing in
    /// the lake starts where its log starts, with a warning naming what expired before.
    pub(super) async fn resume_point(
        &self,
        connection: &fluss::client::FlussConnection,
        info: &fluss::metadata::TableInfo,
        lake_uri: &str,
    ) -> Result<(BTreeMap<BucketKey, i64>, Arc<Mutex<Progress>>)> {
        let path = info.get_table_path().clone();
        let (database, table) = (path.database(), path.table());
        let table_id = info.get_table_id();
        let name = format!("{database}.{table}");
        let earliest = list_bucket_offsets(connection, &path, OffsetSpec::Earliest)
            .await
            .with_context(|| format!("listing the earliest offsets of {name}"))?;
        let keys: Vec<BucketKey> = earliest.keys().copied().collect();
        let lake = self
            .config
            .format
            .committed_offsets(lake_uri, &self.config.storage_options, table_id, &keys)
            .await
            .with_context(|| format!("reading the lake offsets of {name} at {lake_uri}"))?;
        let lake_offsets = lake
            .as_ref()
            .map(|l| l.bucket_offsets.clone())
            .unwrap_or_default();
        check_log_holds_lake_end(&name, info.has_primary_key(), &earliest, &lake_offsets)?;
        let start_offsets: BTreeMap<BucketKey, i64> = earliest
            .iter()
            .map(|(key, earliest)| (*key, lake_offsets.get(key).copied().unwrap_or(*earliest)))
            .collect();
        let progress = Arc::new(Mutex::new(Progress {
            lake_offsets,
            delta_version: lake.as_ref().map(|l| l.delta_version),
            started_ms: now_ms(),
            ..Progress::default()
        }));
        if let Some(lake) = &lake {
            let offsets: Vec<(BucketKey, i64)> =
                lake.bucket_offsets.iter().map(|(b, o)| (*b, *o)).collect();
            self.coordinator
                .record_lake_snapshot(table_id, lake.delta_version as i64, &offsets)?;
        }
        Ok((start_offsets, progress))
    }

    /// Where the lake format keeps the table's local state (a key index), when the service
    /// keeps it across restarts.
    pub(super) fn state_dir(
        &self,
        database: &str,
        table: &str,
        table_id: i64,
    ) -> Result<Option<PathBuf>> {
        self.config
            .lake_state_root
            .as_ref()
            .map(|root| {
                silt_connectors::lake::layout::tiering_checkpoint_dir(
                    root, database, table, table_id,
                )
            })
            .transpose()
    }

    /// Test builds: the abort at a committer point that `crash_at` asks for, once (its marker
    /// file records that it happened, so the restarted process runs normally).
    #[cfg(feature = "fault-injection")]
    pub(super) fn fault_injection(&self) -> Option<silt_connectors::lake_format::FaultHook> {
        let (point, marker) = self.config.crash_at.clone()?;
        Some(Arc::new(
            move |at: silt_connectors::lake_format::FaultPoint| {
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
            },
        ))
    }

    #[cfg(not(feature = "fault-injection"))]
    pub(super) fn fault_injection(&self) -> Option<silt_connectors::lake_format::FaultHook> {
        None
    }

    /// The tiering job's graph: the Fluss source from `start_offsets`, then the lake format's
    /// sink (its writers hashed by bucket, and their committer).
    /// The source sets `log_gap` when the changelog no longer holds its position.
    pub(super) fn tiering_graph(
        &self,
        table: TableRef<'_>,
        start_offsets: BTreeMap<BucketKey, i64>,
        sink: TieringSink,
        log_gap: &Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<JobGraph> {
        let TableRef {
            database,
            table,
            table_id,
            buckets,
        } = table;
        let mut source_config =
            FlussSourceConfig::new(&self.config.bootstrap_servers, database, table);
        source_config.table_id = Some(table_id);
        source_config.start = StartPosition::Offsets(start_offsets);
        source_config.partition_id_column = !sink.partition_keys.is_empty();
        source_config.credentials = self.config.credentials.clone();
        source_config.fetch_wait = self.config.source_fetch_wait;
        source_config.resume_floor = Some(self.lake_ends(&sink.uri, table_id));
        let flag = log_gap.clone();
        source_config.on_log_gap = Some(LogGapHook(Arc::new(move |_: &str| {
            flag.store(true, std::sync::atomic::Ordering::SeqCst)
        })));
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
        self.config
            .format
            .add_tiering_sink(&mut graph, source, sink)
            .with_context(|| format!("building the tiering job of {database}.{table}"))?;

        Ok(graph)
    }

    /// Where the lake of `table_id` at `uri` ends per bucket, read at each restore of the job's
    /// source: a source restored from a checkpoint that another writer has since tiered past
    /// resumes there (the lake holds what lies below; hot retention may have cut it).
    fn lake_ends(&self, uri: &str, table_id: i64) -> ResumeFloor {
        let (format, uri) = (self.config.format.clone(), uri.to_string());
        let options = self.config.storage_options.clone();
        ResumeFloor(Arc::new(move |buckets: Vec<BucketKey>| {
            let (format, uri, options) = (format.clone(), uri.clone(), options.clone());
            async move {
                let lake = format
                    .committed_offsets(&uri, &options, table_id, &buckets)
                    .await?;
                Ok(lake.map(|l| l.bucket_offsets).unwrap_or_default())
            }
            .boxed()
        }))
    }

    /// The tiering job's engine configuration: a checkpoint every `freshness` under the table's
    /// own checkpoint directory, the service's timeouts, restarts and channels.
    pub(super) fn tiering_job_config(
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
}

/// A log table appends; a primary-key table upserts by its key columns.
/// One table as its tiering graph names it.
pub(super) struct TableRef<'a> {
    pub database: &'a str,
    pub table: &'a str,
    pub table_id: i64,
    pub buckets: u32,
}

/// A table's `table.log.ttl` as Fluss reads it (its default when unset or unreadable; `None`
/// for no TTL).
fn log_ttl(info: &fluss::metadata::TableInfo) -> Option<Duration> {
    match info.get_properties().get(silt_hotstore::LOG_TTL) {
        Some(text) => {
            silt_hotstore::parse_ttl(text).unwrap_or(Some(silt_hotstore::LOG_TTL_DEFAULT))
        }
        None => Some(silt_hotstore::LOG_TTL_DEFAULT),
    }
}

/// Why a table's tiering cannot go on by itself: what the hot tier lost before the lake had
/// it. Discovery reports it in the table's status (and tries again each pass, quietly) rather
/// than starting a job that would skip rows.
#[derive(Debug)]
pub struct Stalled(pub String);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stalled {}

/// The check of [`TieringService::resume_point`]: per bucket, the changelog's start
/// (`earliest`) against where the lake ends (`lake`).
pub(super) fn check_log_holds_lake_end(
    name: &str,
    primary_key: bool,
    earliest: &BTreeMap<BucketKey, i64>,
    lake: &BTreeMap<BucketKey, i64>,
) -> Result<()> {
    let gaps: Vec<String> = earliest
        .iter()
        .filter_map(|(key, &start)| {
            let end = *lake.get(key)?;
            (end < start).then(|| {
                format!("{key}: the lake ends at offset {end}, the changelog starts at {start}")
            })
        })
        .collect();
    if !gaps.is_empty() {
        return Err(Stalled(format!(
            "{name}: tiering stopped at a gap: {}. The offsets between expired from the hot tier \
             (its table.log.ttl) before they were tiered, and silt commits nothing past a gap. \
             Raise the table's table.log.ttl above the tiering lag so this does not happen again; \
             to go on without the lost rows, move this table's lake aside (tiering then starts a \
             new lake from the changelog's start)",
            gaps.join("; ")
        ))
        .into());
    }
    let cut: Vec<String> = earliest
        .iter()
        .filter(|(key, start)| **start > 0 && !lake.contains_key(key))
        .map(|(key, start)| format!("{key} starts at {start}"))
        .collect();
    if cut.is_empty() {
        return Ok(());
    }
    if primary_key {
        return Err(Stalled(format!(
            "{name}: a primary-key table whose changelog no longer starts at offset 0 ({}) \
             cannot be tiered from its changelog alone: the changes before it expired \
             (table.log.ttl), and silt cannot read the cluster's kv snapshots. Tier the table \
             from its creation (create it with silt.datalake.enabled=true, or a table.log.ttl \
             that keeps its whole changelog until tiering starts)",
            cut.join(", ")
        ))
        .into());
    }
    warn!(
        table = %name,
        buckets = %cut.join(", "),
        "tiering: the changelog no longer starts at 0 and the lake holds nothing yet: the new lake starts where the changelog starts; the rows before expired (table.log.ttl) and are in neither"
    );
    Ok(())
}

pub(super) fn table_kind(info: &fluss::metadata::TableInfo) -> TableKind {
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
pub(super) fn commit_hook(
    table_id: i64,
    coordinator: Arc<dyn Coordinator>,
    progress: Arc<Mutex<Progress>>,
) -> LakeCommitHook {
    Arc::new(move |commit: LakeCommit| {
        let (coordinator, progress) = (coordinator.clone(), progress.clone());
        async move {
            let offsets = {
                let mut p = progress.lock().unwrap();
                p.on_commit(&commit);
                p.lake_offsets
                    .iter()
                    .map(|(b, o)| (*b, *o))
                    .collect::<Vec<_>>()
            };
            coordinator
                .record_lake_snapshot(table_id, commit.delta_version as i64, &offsets)
                .context("recording the lake snapshot")?;
            Ok(())
        }
        .boxed()
    })
}

/// A gap between the lake and the job's checkpoint (a lost committable, or the lake replaced
/// by an older copy) sets the job's flag: every restart would restore the same checkpoint and
/// meet the same gap, so discovery discards its checkpoints and starts it again from the
/// lake's offsets, like a first start. Discarding is safe: the lake's offsets are the truth,
/// the hot store still holds every offset after them, and what the discarded checkpoints held
/// (written files not yet committed) is read and written again.
pub(super) fn offset_gap_hook(
    flag: &Arc<std::sync::atomic::AtomicBool>,
) -> silt_connectors::lake_format::OffsetGapHook {
    let flag = flag.clone();
    Arc::new(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(pairs: &[(i32, i64)]) -> BTreeMap<BucketKey, i64> {
        pairs
            .iter()
            .map(|(b, o)| (BucketKey::table(*b), *o))
            .collect()
    }

    #[test]
    fn a_lake_that_ends_where_the_log_starts_or_later_resumes() {
        let earliest = offsets(&[(0, 100), (1, 0)]);
        for pk in [false, true] {
            check_log_holds_lake_end("db.t", pk, &earliest, &offsets(&[(0, 100), (1, 0)])).unwrap();
            check_log_holds_lake_end("db.t", pk, &earliest, &offsets(&[(0, 150), (1, 7)])).unwrap();
        }
        // A log table with nothing in the lake starts where its changelog starts.
        check_log_holds_lake_end("db.t", false, &earliest, &BTreeMap::new()).unwrap();
    }

    #[test]
    fn a_gap_between_the_lake_and_the_log_is_refused_naming_bucket_and_offsets() {
        let earliest = offsets(&[(0, 100), (1, 0)]);
        for pk in [false, true] {
            let e = check_log_holds_lake_end("db.t", pk, &earliest, &offsets(&[(0, 40), (1, 3)]))
                .unwrap_err();
            assert!(e.is::<Stalled>(), "{e:#}");
            let text = format!("{e:#}");
            for part in [
                "db.t",
                "gap",
                "bucket 0",
                "lake ends at offset 40",
                "starts at 100",
                "table.log.ttl",
            ] {
                assert!(text.contains(part), "{part:?} in {text}");
            }
            assert!(!text.contains("bucket 1"), "{text}");
        }
    }

    #[test]
    fn a_primary_key_table_whose_changelog_lost_its_head_cannot_start_a_lake() {
        let earliest = offsets(&[(0, 0), (1, 25)]);
        let e =
            check_log_holds_lake_end("db.users", true, &earliest, &BTreeMap::new()).unwrap_err();
        assert!(e.is::<Stalled>(), "{e:#}");
        let text = format!("{e:#}");
        for part in [
            "db.users",
            "primary-key",
            "bucket 1 starts at 25",
            "from its creation",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
}
