//! How far a query got: the stage it is in and the lake files its scans finished. The query
//! service reads it when the deadline passes, so the error can say what was done and what was
//! left.
//!
//! Files are counted by wrapping the Parquet reader factory of every file scan in a lake
//! table's physical plan: a reader is created when a scan opens a file and dropped when the
//! scan is done with it, so "finished" is exact and "total" is what the plan will read after
//! file skipping.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode as _};
use datafusion::datasource::physical_plan::parquet::DefaultParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, ParquetFileReaderFactory, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;

/// One bucket of a wait for tiering: the lake's txn offset versus the high watermark it must
/// reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketWait {
    pub reached: i64,
    pub needed: i64,
}

/// Where a query is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Stage {
    #[default]
    Planning,
    /// Waiting until the lake's txn offsets cover the captured high watermarks, per table and
    /// bucket.
    WaitingForTiering {
        tables: BTreeMap<String, BTreeMap<i32, BucketWait>>,
    },
    /// Reading a table's hot tail through the Fluss client.
    ReadingHotTail {
        table: String,
        offsets_read: i64,
        offsets_total: i64,
    },
    Executing,
}

/// Shared between a query's catalog objects and the service that runs it.
#[derive(Debug, Default)]
pub struct QueryProgress {
    stage: Mutex<Stage>,
    files_total: AtomicU64,
    files_opened: AtomicU64,
    files_done: AtomicU64,
    rows_returned: AtomicU64,
}

impl QueryProgress {
    pub fn new() -> Arc<QueryProgress> {
        Arc::new(QueryProgress::default())
    }

    pub fn set_stage(&self, stage: Stage) {
        *self.stage.lock().unwrap_or_else(|e| e.into_inner()) = stage;
    }

    pub fn stage(&self) -> Stage {
        self.stage.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lake files the scans finished, and how many they will read in all.
    pub fn files(&self) -> (u64, u64) {
        (
            self.files_done.load(Ordering::Relaxed),
            self.files_total.load(Ordering::Relaxed),
        )
    }

    pub fn add_rows_returned(&self, rows: u64) {
        self.rows_returned.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn rows_returned(&self) -> u64 {
        self.rows_returned.load(Ordering::Relaxed)
    }

    /// One line for an error message: what the query was doing and how far it got.
    pub fn describe(&self) -> String {
        let (done, total) = self.files();
        let opened = self.files_opened.load(Ordering::Relaxed);
        match self.stage() {
            Stage::Planning => "while planning".to_string(),
            Stage::WaitingForTiering { tables } => {
                let mut parts = Vec::new();
                for (table, buckets) in tables {
                    let behind: Vec<String> = buckets
                        .iter()
                        .filter(|(_, w)| w.reached < w.needed)
                        .map(|(b, w)| format!("bucket {b} at {} of {}", w.reached, w.needed))
                        .collect();
                    if !behind.is_empty() {
                        parts.push(format!("{table} {}", behind.join(", ")));
                    }
                }
                format!(
                    "while waiting for tiering: lake offsets reached vs needed: {}",
                    if parts.is_empty() {
                        "all covered".to_string()
                    } else {
                        parts.join("; ")
                    }
                )
            }
            Stage::ReadingHotTail {
                table,
                offsets_read,
                offsets_total,
            } => format!(
                "while reading the hot tail of {table}: {offsets_read} of {offsets_total} offsets read"
            ),
            Stage::Executing => format!(
                "while executing: {done} of {total} lake files scanned ({opened} opened), {} rows returned",
                self.rows_returned()
            ),
        }
    }
}

/// Rewrites every Parquet file scan in `plan` so that `progress` counts its files.
pub fn instrument_file_scans(
    plan: Arc<dyn ExecutionPlan>,
    session: &dyn Session,
    progress: &Arc<QueryProgress>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(exec) = node.downcast_ref::<DataSourceExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>() else {
            return Ok(Transformed::no(node));
        };
        let Some(parquet) = config.file_source().downcast_ref::<ParquetSource>() else {
            return Ok(Transformed::no(node));
        };
        let files: usize = config.file_groups.iter().map(|g| g.len()).sum();
        progress
            .files_total
            .fetch_add(files as u64, Ordering::Relaxed);
        let inner: Arc<dyn ParquetFileReaderFactory> = match parquet.parquet_file_reader_factory() {
            Some(f) => f.clone(),
            None => {
                let store = session
                    .runtime_env()
                    .object_store(&config.object_store_url)?;
                Arc::new(DefaultParquetFileReaderFactory::new(store))
            }
        };
        let counting = Arc::new(CountingReaderFactory {
            inner,
            progress: progress.clone(),
        });
        let source = parquet.clone().with_parquet_file_reader_factory(counting);
        let config = FileScanConfigBuilder::from(config.clone())
            .with_source(Arc::new(source))
            .build();
        Ok(Transformed::yes(
            DataSourceExec::from_data_source(config) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

#[derive(Debug)]
struct CountingReaderFactory {
    inner: Arc<dyn ParquetFileReaderFactory>,
    progress: Arc<QueryProgress>,
}

impl ParquetFileReaderFactory for CountingReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: datafusion::datasource::listing::PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::error::Result<Box<dyn AsyncFileReader + Send>> {
        let inner = self.inner.create_reader(
            partition_index,
            partitioned_file,
            metadata_size_hint,
            metrics,
        )?;
        self.progress.files_opened.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(CountingReader {
            inner,
            progress: self.progress.clone(),
        }))
    }
}

/// Counts its file as done when the scan drops it.
struct CountingReader {
    inner: Box<dyn AsyncFileReader + Send>,
    progress: Arc<QueryProgress>,
}

impl AsyncFileReader for CountingReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        self.inner.get_metadata(options)
    }
}

impl Drop for CountingReader {
    fn drop(&mut self) {
        self.progress.files_done.fetch_add(1, Ordering::Relaxed);
    }
}
