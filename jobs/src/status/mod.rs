//! The process's status over REST: `GET /v1/tables` (tiering status and lag per lake-enabled
//! table), `GET /v1/tables/{db}.{table}` and its `/history` (in [`table`]), `GET /v1/hot`
//! (every hot bucket after retention), `GET /v1/memory` (the allocator and the storage
//! engines' bounded structures) and `GET /metrics` (Prometheus, in [`metrics`]).
//! They read the tiering service, the job service and the embedded hot store, and change
//! nothing.

pub mod metrics;
mod table;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use crate::job::service::JobService;
use crate::rest::ApiError;
use crate::tiering::TieringService;

/// What the status routes read.
pub struct Status {
    pub tiering: TieringService,
    pub jobs: JobService,
    /// The embedded hot store (`None` in tests without one).
    pub hotstore: Option<Arc<silt_hotstore::ServerHandle>>,
}

/// The status routes over `status`.
pub fn routes(status: Status) -> Router {
    Router::new()
        .route("/v1/tables", get(tables))
        .route("/v1/tables/{table}", get(table::describe))
        .route("/v1/tables/{table}/history", get(table::history))
        .route("/v1/hot", get(hot))
        .route("/v1/memory", get(memory))
        .route("/metrics", get(metrics::metrics))
        .with_state(Arc::new(status))
}

#[derive(Serialize)]
struct TableStatusBody {
    table: String,
    table_id: i64,
    /// `log` or `primary_key` (absent: not known yet, a table whose job never started).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    lake_uri: String,
    /// The data files the lake's current version references, and their bytes, as of the
    /// latest commit this process made or saw (0 before one).
    lake_files: u64,
    lake_bytes: u64,
    job_state: String,
    freshness_ms: u128,
    /// Per bucket: hot high watermark and lake end offset.
    buckets: Vec<BucketStatusBody>,
    lag_offsets: i64,
    lag_seconds: f64,
    delta_version: Option<u64>,
    checkpoints: usize,
    restarts: u32,
    /// Lake maintenance since the table's job started (see `lake.file_retention_ms`).
    maintenance: MaintenanceBody,
    /// Lake commits since the table's job started: recent durations and compaction.
    commits: CommitsBody,
    /// What keeps tiering from keeping up (null: nothing); see `job_state` `stalled`.
    problem: Option<String>,
}

#[derive(Serialize)]
struct CommitsBody {
    commits: u64,
    recent_p50_ms: u64,
    recent_p99_ms: u64,
    /// ms since the epoch; 0: not yet.
    last_compaction_ms: i64,
    compactions: u64,
    files_compacted: u64,
    rows_compacted: u64,
    bytes_compacted: u64,
}

#[derive(Serialize)]
struct MaintenanceBody {
    /// ms since the epoch; 0: not yet.
    last_ms: i64,
    runs: u64,
    files_deleted: u64,
    bytes_reclaimed: u64,
    active_files: u64,
    files_on_disk: u64,
}

#[derive(Serialize)]
struct BucketStatusBody {
    /// The partition of a partitioned table's bucket (absent: unpartitioned).
    #[serde(skip_serializing_if = "Option::is_none")]
    partition_id: Option<i64>,
    bucket: i32,
    high_watermark: i64,
    lake_offset: i64,
    /// The hot store's side, as of its last retention run (absent before the first).
    #[serde(flatten)]
    hot: Option<HotBucketBody>,
}

/// One bucket of the hot store after retention (see `table.log.ttl`).
#[derive(Serialize)]
struct HotBucketBody {
    log_start_offset: i64,
    hot_bytes: u64,
    segments: usize,
    /// The TTL would delete more, but the lake has not covered it yet.
    retention_held_by_tiering: bool,
}

#[derive(Serialize)]
struct HotTableBucketBody {
    table: String,
    table_id: i64,
    /// The partition's name, for a bucket of a partitioned table.
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition_id: Option<i64>,
    bucket: i32,
    high_watermark: i64,
    #[serde(flatten)]
    hot: HotBucketBody,
}

fn hot_body(b: &silt_hotstore::BucketRetention) -> HotBucketBody {
    HotBucketBody {
        log_start_offset: b.log_start_offset,
        hot_bytes: b.hot_bytes,
        segments: b.segments,
        retention_held_by_tiering: b.held_by_tiering,
    }
}

/// `GET /v1/memory`: the allocator's figures (see [`crate::memory`]), and what the bounded
/// in-memory structures of the storage engines hold now.
async fn memory(State(state): State<Arc<Status>>) -> Result<Json<MemoryBody>, ApiError> {
    let allocator = crate::memory::allocator_stats()
        .ok_or_else(|| ApiError::internal("the allocator's statistics are not available"))?;
    let kv = state.hotstore.as_ref().map(|h| h.kv_memory());
    let index = silt_connectors::delta::open_indexes_memory();
    Ok(Json(MemoryBody {
        allocator,
        hot_kv: kv.map(|kv| StoreMemoryBody {
            cache_bytes: kv.cache_bytes,
            cache_capacity_bytes: kv.cache_capacity_bytes,
            memtable_bytes: kv.write_buffer_bytes,
        }),
        key_indexes: StoreMemoryBody {
            cache_bytes: index.cache_bytes,
            cache_capacity_bytes: index.cache_capacity_bytes,
            memtable_bytes: index.write_buffer_bytes,
        },
    }))
}

#[derive(Serialize)]
struct MemoryBody {
    #[serde(flatten)]
    allocator: crate::memory::AllocatorStats,
    /// The hot store's kv store (primary-key tables); absent without an embedded hot store.
    hot_kv: Option<StoreMemoryBody>,
    /// The tiering jobs' key indexes (primary-key lakes with deletion vectors), summed.
    key_indexes: StoreMemoryBody,
}

/// A fjall store in memory: its block cache fills up to its capacity (reads keep admitting
/// blocks, also of tables compaction has replaced, until they are evicted); its memtables are
/// flushed at their size limit.
#[derive(Serialize)]
struct StoreMemoryBody {
    cache_bytes: u64,
    cache_capacity_bytes: u64,
    memtable_bytes: u64,
}

/// `GET /v1/hot`: every bucket of every table in the hot store: log start offset, bytes and
/// segments on disk, and whether retention is held back by tiering.
async fn hot(State(state): State<Arc<Status>>) -> Json<Vec<HotTableBucketBody>> {
    let buckets = state
        .hotstore
        .as_ref()
        .map(|h| h.hot_retention())
        .unwrap_or_default();
    Json(
        buckets
            .iter()
            .map(|b| HotTableBucketBody {
                table: b.table.clone(),
                table_id: b.table_id,
                partition: b.partition.as_ref().map(|(_, name)| name.clone()),
                partition_id: b.partition.as_ref().map(|(id, _)| *id),
                bucket: b.bucket,
                high_watermark: b.high_watermark,
                hot: hot_body(b),
            })
            .collect(),
    )
}

/// `GET /v1/tables`: tiering status and lag per lake-enabled table.
async fn tables(State(state): State<Arc<Status>>) -> Result<Json<Vec<TableStatusBody>>, ApiError> {
    let tables = state.tiering.status().await.map_err(ApiError::internal)?;
    let hot = state
        .hotstore
        .as_ref()
        .map(|h| h.hot_retention())
        .unwrap_or_default();
    Ok(Json(
        tables
            .into_iter()
            .map(|t| TableStatusBody {
                table: format!("{}.{}", t.database, t.table),
                table_id: t.table_id,
                kind: t.primary_key.map(kind_name),
                lake_uri: t.lake_uri,
                lake_files: t.lake_size.map_or(0, |s| s.files),
                lake_bytes: t.lake_size.map_or(0, |s| s.bytes),
                job_state: t.job_state,
                freshness_ms: t.freshness.as_millis(),
                buckets: t
                    .buckets
                    .iter()
                    .map(|(b, (high_watermark, lake))| BucketStatusBody {
                        partition_id: b.partition,
                        bucket: b.bucket,
                        high_watermark: *high_watermark,
                        lake_offset: *lake,
                        hot: hot
                            .iter()
                            .find(|h| {
                                h.table_id == t.table_id
                                    && h.partition.as_ref().map(|(id, _)| *id) == b.partition
                                    && h.bucket == b.bucket
                            })
                            .map(hot_body),
                    })
                    .collect(),
                lag_offsets: t.lag_offsets,
                lag_seconds: t.lag_seconds,
                delta_version: t.delta_version,
                checkpoints: t.checkpoints,
                restarts: t.restarts,
                maintenance: MaintenanceBody {
                    last_ms: t.maintenance.last_ms,
                    runs: t.maintenance.runs,
                    files_deleted: t.maintenance.files_deleted,
                    bytes_reclaimed: t.maintenance.bytes_reclaimed,
                    active_files: t.maintenance.active_files,
                    files_on_disk: t.maintenance.files_on_disk,
                },
                commits: CommitsBody {
                    commits: t.commits.commits,
                    recent_p50_ms: t.commits.recent_p50_ms,
                    recent_p99_ms: t.commits.recent_p99_ms,
                    last_compaction_ms: t.commits.last_compaction_ms,
                    compactions: t.commits.compactions,
                    files_compacted: t.commits.files_compacted,
                    rows_compacted: t.commits.rows_compacted,
                    bytes_compacted: t.commits.bytes_compacted,
                },
                problem: t.problem,
            })
            .collect(),
    ))
}

/// `primary_key` or `log`, as `silt verify --format json` names a table's kind.
pub(crate) fn kind_name(primary_key: bool) -> &'static str {
    if primary_key { "primary_key" } else { "log" }
}
