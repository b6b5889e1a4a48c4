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
    FlussSource, FlussSourceConfig, ResumeFloor, StartPosition, list_bucket_offsets,
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
        let (start_offsets, progress) = self
            .resume_point(connection, database, table, table_id, &lake_uri)
            .await?;
        let lake_behind = Arc::new(std::sync::atomic::AtomicBool::new(false));
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
    pub(super) async fn resume_point(
        &self,
        connection: &fluss::client::FlussConnection,
        database: &str,
        table: &str,
        table_id: i64,
        lake_uri: &str,
    ) -> Result<(BTreeMap<BucketKey, i64>, Arc<Mutex<Progress>>)> {
        let name = format!("{database}.{table}");
        let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
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
    pub(super) fn tiering_graph(
        &self,
        database: &str,
        table: &str,
        table_id: i64,
        buckets: u32,
        start_offsets: BTreeMap<BucketKey, i64>,
        sink: TieringSink,
    ) -> Result<JobGraph> {
        let mut source_config =
            FlussSourceConfig::new(&self.config.bootstrap_servers, database, table);
        source_config.table_id = Some(table_id);
        source_config.start = StartPosition::Offsets(start_offsets);
        source_config.partition_id_column = !sink.partition_keys.is_empty();
        source_config.credentials = self.config.credentials.clone();
        source_config.resume_floor = Some(self.lake_ends(&sink.uri, table_id));
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
