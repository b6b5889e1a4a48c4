//! Delta Lake as a [`LakeFormat`]: the tiering sink is [`super::add_delta_sink`] (writers
//! hashed by bucket into one committer whose commits carry the per-bucket offsets as `txn`
//! actions), ownership is the table id recorded in the table's metadata, a pinned version is a
//! `DeltaTable` at one version read through deltalake's own provider.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use deltalake::DeltaTable;
use silt_engine::{JobGraph, Partitioning, VertexId};

use super::{DeltaSinkConfig, Retention};
use crate::changelog::{BUCKET_COLUMN, BucketKey};
use crate::lake_format::{
    LakeDescription, LakeFormat, LakeOffsets, LakeOwner, LakeVersion, PinnedVersion,
    StorageOptions, TieringSink,
};

/// The Delta Lake format (`lake.format: delta`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaFormat;

#[async_trait]
impl LakeFormat for DeltaFormat {
    fn name(&self) -> &'static str {
        "delta"
    }

    fn check_row_type(&self, row_type: &fluss::metadata::RowType) -> Result<(), String> {
        super::check_lake_row_type(row_type).map_err(|e| e.to_string())
    }

    fn lake_schema(&self, user_schema: &Schema, partitioned: bool) -> anyhow::Result<SchemaRef> {
        Ok(super::lake_arrow_schema_of(user_schema, partitioned)?)
    }

    fn lake_data_type(&self, column: &str, data_type: &DataType) -> anyhow::Result<DataType> {
        Ok(super::lake_data_type(column, data_type)?)
    }

    fn is_lake_dir(&self, dir: &Path) -> bool {
        dir.join("_delta_log").is_dir()
    }

    fn prepare_session(&self, ctx: &datafusion::prelude::SessionContext) {
        super::read_local_files_on_io_threads(ctx);
    }

    fn add_tiering_sink(
        &self,
        graph: &mut JobGraph,
        upstream: VertexId,
        sink: TieringSink,
    ) -> anyhow::Result<()> {
        super::register_object_stores();
        let parallelism = sink.parallelism;
        super::add_delta_sink(
            graph,
            "lake",
            upstream,
            sink_config(sink),
            parallelism,
            Partitioning::Hash {
                key_columns: vec![BUCKET_COLUMN.to_string()],
            },
        )?;
        Ok(())
    }

    async fn owner(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: u32,
    ) -> anyhow::Result<LakeOwner> {
        super::register_object_stores();
        Ok(super::lake_owner(uri, options, &table_id.to_string(), buckets).await?)
    }

    async fn move_aside(
        &self,
        root: &str,
        options: &StorageOptions,
        from: &str,
        to: &str,
    ) -> anyhow::Result<String> {
        super::register_object_stores();
        Ok(super::move_lake(root, options, from, to).await?)
    }

    async fn committed_offsets(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> anyhow::Result<Option<LakeOffsets>> {
        super::register_object_stores();
        Ok(super::read_lake_offsets(uri, options, &table_id.to_string(), buckets).await?)
    }

    async fn pin(
        &self,
        uri: &str,
        options: &StorageOptions,
        table_id: i64,
        buckets: &[BucketKey],
    ) -> anyhow::Result<Option<(Arc<dyn PinnedVersion>, BTreeMap<BucketKey, i64>)>> {
        super::register_object_stores();
        if !uri.contains("://") && !Path::new(uri).join("_delta_log").exists() {
            return Ok(None);
        }
        let url = deltalake::ensure_table_uri(uri).with_context(|| format!("delta table {uri}"))?;
        let table = DeltaTable::try_from_url_with_storage_options(url, options.clone())
            .await
            .with_context(|| format!("delta table {uri}"))?;
        let Some(version) = table.version() else {
            return Ok(None);
        };
        // A lake left by a dropped table of the same name is not this table's.
        let id = table_id.to_string();
        if super::owner_of(&table, uri, &id, buckets.iter().copied()).await? != LakeOwner::Owned {
            return Ok(None);
        }
        let offsets = super::txn_versions(&table, uri, &id, buckets.to_vec()).await?;
        let pinned = DeltaVersion {
            table,
            version: version as u64,
            uri: uri.to_string(),
        };
        Ok(Some((Arc::new(pinned), offsets)))
    }

    async fn read_version(
        &self,
        uri: &str,
        options: &StorageOptions,
        version: u64,
        file_column: &str,
    ) -> anyhow::Result<Vec<arrow::array::RecordBatch>> {
        super::register_object_stores();
        let url = deltalake::ensure_table_uri(uri).with_context(|| format!("lake table {uri}"))?;
        let table = deltalake::DeltaTableBuilder::from_url(url)?
            .with_storage_options(options.clone())
            .with_version(version)
            .load()
            .await
            .with_context(|| format!("opening lake table {uri} at version {version}"))?;
        let ctx = datafusion::prelude::SessionContext::new();
        super::read_local_files_on_io_threads(&ctx);
        table.update_datafusion_session(&ctx.state())?;
        let provider = table
            .table_provider()
            .with_file_column(file_column)
            .await
            .with_context(|| format!("reading lake table {uri}"))?;
        let batches = ctx
            .read_table(provider)?
            .collect()
            .await
            .with_context(|| format!("reading lake table {uri} at version {version}"))?;
        Ok(batches)
    }

    async fn describe(
        &self,
        uri: &str,
        options: &StorageOptions,
    ) -> anyhow::Result<Option<LakeDescription>> {
        super::register_object_stores();
        if !uri.contains("://") && !self.is_lake_dir(Path::new(uri)) {
            return Ok(None);
        }
        let Some(table) = super::load_existing(uri, options).await? else {
            return Ok(None);
        };
        let snapshot = table
            .snapshot()
            .with_context(|| format!("delta table {uri}"))?;
        let table_id = super::recorded_owner(snapshot.metadata()).and_then(|id| id.parse().ok());
        let partition_keys = snapshot
            .metadata()
            .partition_columns()
            .iter()
            .filter(|c| !c.starts_with("__"))
            .cloned()
            .collect();
        let schema = table.table_provider().await?.schema();
        Ok(Some(LakeDescription {
            table_id,
            partition_keys,
            schema,
        }))
    }
}

/// The Delta sink of a tiering job: the service's settings, the retention a checkpoint
/// interval needs, the table's key index where the service keeps its state.
fn sink_config(sink: TieringSink) -> DeltaSinkConfig {
    let mut config = DeltaSinkConfig::new(
        sink.uri,
        sink.table_id.to_string(),
        sink.kind,
        sink.user_schema,
    );
    config.storage_options = sink.storage_options;
    config.partition_keys = sink.partition_keys;
    config.start_offsets = Some(sink.start_offsets);
    config.target_file_bytes = sink.settings.target_file_bytes;
    // A writer's file waits for its commit at most a checkpoint interval plus a timed-out
    // checkpoint; twice that before maintenance may take it for an orphan.
    config.retention = Retention::new(
        sink.settings.file_retention,
        2 * (sink.commit_interval + sink.checkpoint_timeout),
    );
    config.deletion_vectors = sink.settings.deletion_vectors;
    config.key_index_dir = sink.state_dir;
    config.key_index_cache_bytes = sink.settings.key_index_cache_bytes;
    config.vacuum_removes_bytes_max = sink.settings.vacuum_removes_bytes_max;
    config.on_commit = Some(sink.on_commit);
    config.on_offset_gap = Some(sink.on_offset_gap);
    config.fault_injection = sink.fault_injection;
    config
}

/// One pinned version of a Delta table.
#[derive(Debug)]
struct DeltaVersion {
    table: DeltaTable,
    version: u64,
    uri: String,
}

#[async_trait]
impl PinnedVersion for DeltaVersion {
    fn version(&self) -> u64 {
        self.version
    }

    /// deltalake's provider of the version, untouched (see [`LakeScan`]).
    async fn table_provider(
        &self,
        session: Arc<SessionState>,
    ) -> anyhow::Result<Arc<dyn TableProvider>> {
        let inner = self.table.table_provider().with_session(session).await?;
        Ok(Arc::new(LakeScan {
            inner,
            table: self.table.clone(),
        }))
    }

    /// The offsets come from the `txn` actions of the commit files, accumulated from the
    /// oldest version read.
    async fn history(&self, table_id: i64, first: u64) -> anyhow::Result<Vec<LakeVersion>> {
        let table_id = table_id.to_string();
        let log_store = self.table.log_store();
        let mut offsets: BTreeMap<BucketKey, i64> = BTreeMap::new();
        let mut versions = Vec::new();
        for version in first..=self.version {
            let Some(bytes) = log_store
                .read_commit_entry(version)
                .await
                .with_context(|| format!("delta table {}", self.uri))?
            else {
                continue;
            };
            let mut row = read_commit(version, &bytes, &table_id, &self.uri, &mut offsets)?;
            row.offsets = offsets.clone();
            versions.push(row);
        }
        Ok(versions)
    }
}

/// One commit's version, its offsets left empty; its txn actions move `offsets` on.
fn read_commit(
    version: u64,
    bytes: &[u8],
    table_id: &str,
    uri: &str,
    offsets: &mut BTreeMap<BucketKey, i64>,
) -> anyhow::Result<LakeVersion> {
    let mut row = LakeVersion {
        version: version as i64,
        ..LakeVersion::default()
    };
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let action: serde_json::Value = serde_json::from_slice(line)
            .with_context(|| format!("commit {version} of {uri} is not JSON lines"))?;
        if let Some(info) = action.get("commitInfo") {
            row.committed_at_ms = info.get("timestamp").and_then(|v| v.as_i64());
            row.operation = info
                .get("operation")
                .and_then(|v| v.as_str())
                .map(str::to_string);
            row.checkpoint_id = info.get("silt.checkpointId").and_then(|v| v.as_i64());
        }
        if let Some(txn) = action.get("txn") {
            let app = txn.get("appId").and_then(|v| v.as_str()).unwrap_or("");
            let bucket = super::bucket_of_app_id(table_id, app);
            if let (Some(bucket), Some(v)) = (bucket, txn.get("version").and_then(|v| v.as_i64())) {
                offsets.insert(bucket, v);
            }
        }
    }
    Ok(row)
}

/// The Delta provider of a pinned version, handed the session of each query it plans.
///
/// **Contract:** `scan` returns deltalake's plan as it is. Its deletion-vector scan refuses a
/// Parquet child that anything rebuilt (`DV child changed Parquet source`), so whatever silt
/// wants to know of a scan it reads from the plan without changing it.
#[derive(Debug)]
struct LakeScan {
    inner: Arc<dyn TableProvider>,
    table: DeltaTable,
}

#[async_trait]
impl TableProvider for LakeScan {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        self.table
            .update_datafusion_session(state)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        self.inner.scan(state, projection, filters, limit).await
    }
}
