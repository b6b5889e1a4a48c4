//! The seams of tiering hold. The lake-format seam: a second format, written here and nowhere else, tiers a table
//! through the unchanged tiering service, is read back through the unchanged query catalog
//! (`$lake`, `db.t`, `$lake$snapshots`), and `silt verify` answers MATCH over it. The
//! coordinator seam: a coordinator that claims one of two lake tables gets only that one tiered,
//! and only its snapshots recorded.
//!
//! The stub format keeps a lake as Arrow IPC files and one JSON manifest per version
//! (`v<N>.json`: the owner table id, the files, the per-bucket end offsets), the manifest
//! written by rename, so a version and its offsets appear together. It tiers log tables only,
//! commits at completed checkpoints and does not survive a crash between checkpoint and commit:
//! enough to show what a format must provide, not a format to ship.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use arrow::array::{Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use bytes::Bytes;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionState;
use serde::{Deserialize, Serialize};
use silt_connectors::changelog::{
    BUCKET_COLUMN, BucketKey, CHANGE_TYPE_COLUMN, OFFSET_COLUMN, lake_system_fields_of,
};
use silt_connectors::lake::LakeCatalogConfig;
use silt_connectors::lake_format::{
    LakeCommit, LakeDescription, LakeFormat, LakeOffsets, LakeOwner, LakeVersion, PinnedVersion,
    StorageOptions, TableKind, TieringSink,
};
use silt_engine::{JobGraph, Partitioning, RestoredState, Sink, TaskContext, VertexId};
use silt_jobs::query::{QueryConfig, QueryRequest, QueryService};
use silt_jobs::tiering::{Coordinator, TieringService};
use silt_jobs::verify::{Verdict, VerifyOptions, verify_table};
use silt_testkit::tiering::{Driver, wait_caught_up};
use silt_testkit::{hotstore, tables};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    table_id: i64,
    version: u64,
    checkpoint_id: u64,
    committed_at_ms: i64,
    files: Vec<String>,
    /// `"<partition or ->/<bucket>"` -> end offset.
    offsets: BTreeMap<String, i64>,
}

fn key_text(key: &BucketKey) -> String {
    match key.partition {
        Some(p) => format!("{p}/{}", key.bucket),
        None => format!("-/{}", key.bucket),
    }
}

fn key_of(text: &str) -> Option<BucketKey> {
    let (p, b) = text.split_once('/')?;
    Some(BucketKey {
        partition: if p == "-" { None } else { p.parse().ok() },
        bucket: b.parse().ok()?,
    })
}

fn manifests(dir: &Path) -> Vec<Manifest> {
    let mut out: Vec<Manifest> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('v'))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    out.sort_by_key(|m| m.version);
    out
}

fn read_files(dir: &Path, files: &[String]) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for file in files {
        let reader =
            arrow::ipc::reader::FileReader::try_new(std::fs::File::open(dir.join(file))?, None)?;
        for batch in reader {
            out.push(batch?);
        }
    }
    Ok(out)
}

#[derive(Debug)]
struct StubFormat;

#[derive(Debug)]
struct StubVersion {
    dir: PathBuf,
    manifest: Manifest,
    schema: SchemaRef,
}

#[async_trait]
impl PinnedVersion for StubVersion {
    fn version(&self) -> u64 {
        self.manifest.version
    }

    async fn table_provider(&self, _: Arc<SessionState>) -> Result<Arc<dyn TableProvider>> {
        let batches = read_files(&self.dir, &self.manifest.files)?;
        Ok(Arc::new(MemTable::try_new(
            self.schema.clone(),
            vec![batches],
        )?))
    }

    async fn history(&self, _table_id: i64, first: u64) -> Result<Vec<LakeVersion>> {
        Ok(manifests(&self.dir)
            .into_iter()
            .filter(|m| m.version >= first && m.version <= self.manifest.version)
            .map(|m| LakeVersion {
                version: m.version as i64,
                committed_at_ms: Some(m.committed_at_ms),
                operation: Some("STUB WRITE".into()),
                checkpoint_id: Some(m.checkpoint_id as i64),
                offsets: m
                    .offsets
                    .iter()
                    .filter_map(|(k, o)| Some((key_of(k)?, *o)))
                    .collect(),
            })
            .collect())
    }
}

#[async_trait]
impl LakeFormat for StubFormat {
    fn name(&self) -> &'static str {
        "stub"
    }

    fn check_row_type(&self, _: &fluss::metadata::RowType) -> Result<(), String> {
        Ok(())
    }

    fn lake_schema(&self, user: &Schema, partitioned: bool) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(lake_system_fields_of(partitioned));
        Ok(Arc::new(Schema::new(fields)))
    }

    fn lake_data_type(&self, _: &str, data_type: &DataType) -> Result<DataType> {
        Ok(data_type.clone())
    }

    fn is_lake_dir(&self, dir: &Path) -> bool {
        !manifests(dir).is_empty()
    }

    fn add_tiering_sink(
        &self,
        graph: &mut JobGraph,
        upstream: VertexId,
        sink: TieringSink,
    ) -> Result<()> {
        if sink.kind != TableKind::Log || !sink.partition_keys.is_empty() {
            bail!("the stub format tiers unpartitioned log tables only");
        }
        let sink = Arc::new(sink);
        let vertex = graph.add_sink("stub-lake", 1, move |_: &TaskContext| StubSink {
            sink: sink.clone(),
            pending: Vec::new(),
            staged: BTreeMap::new(),
        });
        graph.connect(upstream, vertex, Partitioning::Rebalance);
        Ok(())
    }

    async fn owner(&self, uri: &str, _: &StorageOptions, id: i64, _: u32) -> Result<LakeOwner> {
        Ok(match manifests(Path::new(uri)).last() {
            None => LakeOwner::Absent,
            Some(m) if m.table_id == id => LakeOwner::Owned,
            Some(m) => LakeOwner::Foreign {
                owner: Some(m.table_id.to_string()),
            },
        })
    }

    async fn move_aside(
        &self,
        root: &str,
        _: &StorageOptions,
        from: &str,
        to: &str,
    ) -> Result<String> {
        let (from, to) = (Path::new(root).join(from), Path::new(root).join(to));
        std::fs::create_dir_all(to.parent().context("no parent")?)?;
        std::fs::rename(&from, &to)?;
        Ok(to.to_string_lossy().to_string())
    }

    async fn committed_offsets(
        &self,
        uri: &str,
        _: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> Result<Option<LakeOffsets>> {
        let Some(m) = manifests(Path::new(uri)).pop() else {
            return Ok(None);
        };
        if m.table_id != table_id {
            return Ok(None);
        }
        let bucket_offsets = buckets
            .iter()
            .filter_map(|b| Some((*b, *m.offsets.get(&key_text(b))?)))
            .collect();
        Ok(Some(LakeOffsets {
            delta_version: m.version,
            bucket_offsets,
        }))
    }

    async fn pin(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> Result<Option<(Arc<dyn PinnedVersion>, BTreeMap<BucketKey, i64>)>> {
        let Some(offsets) = self
            .committed_offsets(uri, options, table_id, buckets)
            .await?
        else {
            return Ok(None);
        };
        let dir = PathBuf::from(uri);
        let manifest = manifests(&dir).pop().context("a manifest")?;
        let schema = read_files(&dir, &manifest.files)?
            .first()
            .map(|b| b.schema())
            .context("a tiered file")?;
        let pinned = StubVersion {
            dir,
            manifest,
            schema,
        };
        Ok(Some((Arc::new(pinned), offsets.bucket_offsets)))
    }

    async fn read_version(
        &self,
        uri: &str,
        _: &StorageOptions,
        version: u64,
        file_column: &str,
    ) -> Result<Vec<RecordBatch>> {
        let dir = Path::new(uri);
        let m = manifests(dir)
            .into_iter()
            .find(|m| m.version == version)
            .context("no such version")?;
        let mut out = Vec::new();
        for file in &m.files {
            for batch in read_files(dir, std::slice::from_ref(file))? {
                let mut fields: Vec<Field> = batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.push(Field::new(file_column, DataType::Utf8, false));
                let mut columns = batch.columns().to_vec();
                columns.push(Arc::new(StringArray::from(vec![
                    file.as_str();
                    batch.num_rows()
                ])));
                out.push(RecordBatch::try_new(
                    Arc::new(Schema::new(fields)),
                    columns,
                )?);
            }
        }
        Ok(out)
    }

    async fn describe(&self, uri: &str, _: &StorageOptions) -> Result<Option<LakeDescription>> {
        let dir = Path::new(uri);
        let Some(m) = manifests(dir).pop() else {
            return Ok(None);
        };
        let schema = read_files(dir, &m.files)?
            .first()
            .map(|b| b.schema())
            .context("a tiered file")?;
        Ok(Some(LakeDescription {
            table_id: Some(m.table_id),
            partition_keys: Vec::new(),
            schema,
        }))
    }
}

/// Buffers the changelog, stages it at each checkpoint barrier and commits the staged rows
/// with their offsets once the checkpoint completes.
struct StubSink {
    sink: Arc<TieringSink>,
    pending: Vec<RecordBatch>,
    staged: BTreeMap<u64, Vec<RecordBatch>>,
}

impl StubSink {
    fn commit(&self, checkpoint_id: u64, batches: Vec<RecordBatch>) -> Result<LakeCommit> {
        let dir = PathBuf::from(&self.sink.uri);
        std::fs::create_dir_all(&dir)?;
        let previous = manifests(&dir).pop();
        let version = previous.as_ref().map_or(0, |m| m.version + 1);
        let mut files = previous.as_ref().map_or_else(Vec::new, |m| m.files.clone());
        let mut offsets = previous.map_or_else(BTreeMap::new, |m| m.offsets);
        let mut rows = 0;
        if let Some(first) = batches.first() {
            let file = format!("data-{version}.arrow");
            let mut writer = arrow::ipc::writer::FileWriter::try_new(
                std::fs::File::create(dir.join(&file))?,
                &first.schema(),
            )?;
            for batch in &batches {
                writer.write(batch)?;
                rows += batch.num_rows() as u64;
                let buckets = batch.column_by_name(BUCKET_COLUMN).context("__bucket")?;
                let buckets = buckets
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .context("int32")?;
                let offs = batch.column_by_name(OFFSET_COLUMN).context("__offset")?;
                let offs = offs
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .context("int64")?;
                for i in 0..batch.num_rows() {
                    let key = key_text(&BucketKey::table(buckets.value(i)));
                    let end = offsets.entry(key).or_insert(0);
                    *end = (*end).max(offs.value(i) + 1);
                }
            }
            writer.finish()?;
            files.push(file);
        }
        let manifest = Manifest {
            table_id: self.sink.table_id,
            version,
            checkpoint_id,
            committed_at_ms: silt_rt::clock::now_ms(),
            files: files.clone(),
            offsets: offsets.clone(),
        };
        let tmp = dir.join(format!(".v{version}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&manifest)?)?;
        std::fs::rename(&tmp, dir.join(format!("v{version:020}.json")))?;
        Ok(LakeCommit {
            delta_version: version,
            checkpoint_id,
            bucket_offsets: offsets
                .iter()
                .filter_map(|(k, o)| Some((key_of(k)?, *o)))
                .collect(),
            files_added: usize::from(rows > 0),
            rows,
            replayed: false,
            maintenance: None,
            compaction: None,
            duration: Duration::ZERO,
            size: None,
        })
    }
}

#[async_trait]
impl Sink for StubSink {
    async fn open(&mut self, _: &TaskContext, _: RestoredState) -> silt_engine::Result<()> {
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> silt_engine::Result<()> {
        // The lake keeps the user and system columns, not the change type (log tables: +A).
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|i| batch.schema().field(*i).name() != CHANGE_TYPE_COLUMN)
            .collect();
        self.pending.push(batch.project(&keep)?);
        Ok(())
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> silt_engine::Result<Bytes> {
        self.staged
            .insert(checkpoint_id, std::mem::take(&mut self.pending));
        Ok(Bytes::new())
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> silt_engine::Result<()> {
        let ready: Vec<u64> = self
            .staged
            .range(..=checkpoint_id)
            .map(|(id, _)| *id)
            .collect();
        let batches: Vec<RecordBatch> = ready
            .iter()
            .flat_map(|id| self.staged.remove(id).unwrap_or_default())
            .collect();
        let commit = self
            .commit(checkpoint_id, batches)
            .map_err(|e| silt_engine::Error::operator(format!("stub commit: {e:#}")))?;
        (self.sink.on_commit)(commit)
            .await
            .map_err(|e| silt_engine::Error::operator(format!("stub commit hook: {e:#}")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_lake_format_tiers_and_reads_back_through_the_unchanged_services() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 2).await?;
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let table = tables::events("stub").lake("200ms");
    table.create(&connection).await?;
    tables::append_events(&connection, &table.path, 0..500, |id| format!("v{id}")).await?;

    let lake_root = dir.path().join("lake").to_string_lossy().to_string();
    let format: Arc<dyn LakeFormat> = Arc::new(StubFormat);
    let mut config = silt_testkit::tiering::config(dir.path(), &server);
    config.format = format.clone();
    let tiering = TieringService::new(config, Some(silt_testkit::tiering::registry(&server)));
    wait_caught_up(&tiering, Driver::Wait, 1, Duration::from_secs(60)).await?;
    let manifests_written = manifests(&Path::new(&lake_root).join("stub").join("events"));
    assert!(
        !manifests_written.is_empty(),
        "the stub format wrote no manifest under {lake_root}/stub/events"
    );

    let mut catalog = LakeCatalogConfig::new(&bootstrap, &lake_root);
    catalog.format = format.clone();
    let queries = QueryService::new(QueryConfig::new(catalog));
    let count = |sql: &'static str| {
        let queries = queries.clone();
        async move {
            let r = queries
                .execute(QueryRequest::new(sql, Duration::from_secs(30)))
                .await?;
            let c = r.batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .context("count")?;
            anyhow::Ok(c.value(0))
        }
    };
    assert_eq!(count("SELECT count(*) FROM stub.events$lake").await?, 500);
    assert_eq!(
        count("SELECT count(DISTINCT id) FROM stub.events").await?,
        500
    );
    assert_eq!(
        count("SELECT sum(id) FROM stub.events$lake").await?,
        (0..500).sum::<i64>()
    );
    assert!(count("SELECT count(*) FROM stub.events$lake$snapshots").await? >= 1);

    // More rows: the real-time view shows lake + tail, and verify compares through the format.
    tables::append_events(&connection, &table.path, 500..700, |id| format!("v{id}")).await?;
    assert_eq!(count("SELECT count(*) FROM stub.events").await?, 700);
    wait_caught_up(&tiering, Driver::Wait, 1, Duration::from_secs(60)).await?;
    let mut options = VerifyOptions::new(&bootstrap, &lake_root);
    options.format = format;
    options.deadline = Duration::from_secs(60);
    let report = verify_table(&connection, "stub", "events", &options).await?;
    assert_eq!(report.verdict, Verdict::Match, "{}", report.render());
    tiering.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

/// Claims only the tables named in `mine`, and remembers every snapshot it was asked to record.
struct Picky {
    mine: Vec<&'static str>,
    recorded: Mutex<Vec<i64>>,
}

impl Coordinator for Picky {
    fn tiers(&self, _database: &str, table: &str, _table_id: i64) -> bool {
        self.mine.contains(&table)
    }

    fn record_lake_snapshot(&self, table_id: i64, _: i64, _: &[(BucketKey, i64)]) -> Result<()> {
        self.recorded.lock().unwrap().push(table_id);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_coordinator_decides_which_tables_this_process_tiers_and_gets_their_snapshots()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 1).await?;
    let connection = hotstore::connect(&server).await?;
    let mine = tables::text_log("co", "mine").lake("200ms");
    let other = tables::text_log("co", "other").lake("200ms");
    let mine_id = mine.create(&connection).await?;
    other.create(&connection).await?;
    for table in [&mine, &other] {
        tables::append_events(&connection, &table.path, 0..50, |id| format!("v{id}")).await?;
    }
    let coordinator = Arc::new(Picky {
        mine: vec!["mine"],
        recorded: Mutex::new(Vec::new()),
    });
    let config = silt_testkit::tiering::config(dir.path(), &server);
    let tiering = TieringService::with_coordinator(config, coordinator.clone());
    wait_caught_up(&tiering, Driver::Wait, 1, Duration::from_secs(60)).await?;
    let status = tiering.status().await?;
    let tiered: Vec<&str> = status.iter().map(|s| s.table.as_str()).collect();
    assert_eq!(tiered, ["mine"], "only the coordinator's table is tiered");
    let recorded = coordinator.recorded.lock().unwrap().clone();
    assert!(
        !recorded.is_empty() && recorded.iter().all(|id| *id == mine_id),
        "{recorded:?}"
    );
    let lake = dir.path().join("lake").join("co");
    assert!(lake.join("mine").exists() && !lake.join("other").exists());
    tiering.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
