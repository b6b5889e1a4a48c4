//! How far a query got: the stage it is in and the lake files its scans finished. The query
//! service reads it when the deadline passes, so the error can say what was done and what was
//! left.
//!
//! Files are counted from DataFusion's own scan metrics, without touching the plan:
//! [`QueryProgress::watch_file_scans`] walks the physical plan that is about to run, totals the
//! files of every file scan (its file groups, after Delta's file skipping and DataFusion's
//! repartitioning) and keeps a clone of each scan's `ExecutionPlanMetricsSet`. Clones share
//! their counters, so the `files_opened` and `files_processed` counts that DataFusion's file
//! stream records while the scan runs are visible here.
//!
//! The walk must stay read-only: deltalake's deletion-vector scan (`DeltaScanExec`) checks
//! that its Parquet child is the very source it planned (by pointer) and refuses a plan in
//! which anything rebuilt it (`DV child changed Parquet source`).
//!
//! A file counts as done when its scan finished it (read to the end, pruned away, or skipped
//! because a limit inside the scan was reached). A `LIMIT` above a scan that cannot take the
//! limit itself (every deletion-vector scan) stops the stream in the middle of a file, which
//! then never counts as done: the counts say what was read, not what was planned.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::{TreeNode as _, TreeNodeRecursion};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;

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
        tables: BTreeMap<String, BTreeMap<crate::changelog::BucketKey, BucketWait>>,
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
    /// Every file scan of the running plan.
    scans: Mutex<Vec<FileScan>>,
    rows_returned: AtomicU64,
}

/// One file scan: the files it reads and DataFusion's metrics set of its file source, which
/// the scan's file streams count `files_opened` and `files_processed` into.
#[derive(Debug)]
struct FileScan {
    files: u64,
    metrics: ExecutionPlanMetricsSet,
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

    /// Records every file scan of `plan`, the physical plan about to run, so that
    /// [`QueryProgress::files`] counts its files. Leaves `plan` as it is.
    pub fn watch_file_scans(&self, plan: &Arc<dyn ExecutionPlan>) -> datafusion::error::Result<()> {
        let mut found = Vec::new();
        plan.apply(|node| {
            if let Some(exec) = node.downcast_ref::<DataSourceExec>()
                && let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>()
            {
                let files: usize = config.file_groups.iter().map(|g| g.len()).sum();
                found.push(FileScan {
                    files: files as u64,
                    metrics: config.file_source().metrics().clone(),
                });
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        self.scans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(found);
        Ok(())
    }

    /// Lake files the scans finished, and how many they will read in all.
    pub fn files(&self) -> (u64, u64) {
        let scans = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        let total = scans.iter().map(|s| s.files).sum();
        (count(&scans, "files_processed"), total)
    }

    /// Lake files the scans opened (or started to prune).
    pub fn files_opened(&self) -> u64 {
        count(
            &self.scans.lock().unwrap_or_else(|e| e.into_inner()),
            "files_opened",
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
        let opened = self.files_opened();
        match self.stage() {
            Stage::Planning => "while planning".to_string(),
            Stage::WaitingForTiering { tables } => {
                let mut parts = Vec::new();
                for (table, buckets) in tables {
                    let behind: Vec<String> = buckets
                        .iter()
                        .filter(|(_, w)| w.reached < w.needed)
                        .map(|(b, w)| format!("{b} at {} of {}", w.reached, w.needed))
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

/// The sum of the counter `name` over `scans`, over all their partitions.
fn count(scans: &[FileScan], name: &str) -> u64 {
    scans
        .iter()
        .filter_map(|s| s.metrics.clone_inner().sum_by_name(name))
        .map(|v| v.as_usize() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::QueryProgress;

    /// Regression: files were counted done when their Parquet reader was dropped, and with a
    /// pruning predicate over files with bloom filters DataFusion opens a second reader per
    /// file, so every file counted twice ("4 of 2 lake files").
    #[tokio::test]
    async fn each_file_counts_once_whatever_the_scan_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        for (i, keys) in [0..1000i64, 1000..2000].into_iter().enumerate() {
            let file = std::fs::File::create(dir.path().join(format!("{i}.parquet"))).unwrap();
            let props = WriterProperties::builder()
                .set_bloom_filter_enabled(true)
                .build();
            let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(keys))],
            )
            .unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
        }
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "t",
            dir.path().to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
        // (statement, rows): a full scan, a predicate the statistics cannot prune, one that the
        // bloom filters answer, and one that skips the second file's row groups.
        let cases = [
            ("SELECT k FROM t", 2000),
            ("SELECT k FROM t WHERE k % 7 = 3", 286),
            ("SELECT k FROM t WHERE k = 1500", 1),
            ("SELECT k FROM t WHERE k < 100", 100),
        ];
        for (sql, rows) in cases {
            let frame = ctx.sql(sql).await.unwrap();
            let task = Arc::new(frame.task_ctx());
            let plan = frame.create_physical_plan().await.unwrap();
            let progress = QueryProgress::new();
            progress.watch_file_scans(&plan).unwrap();
            let batches = datafusion::physical_plan::collect(plan, task)
                .await
                .unwrap();
            let got: usize = batches.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(
                (got, progress.files(), progress.files_opened()),
                (rows, (2, 2), 2),
                "{sql}"
            );
        }
    }
}
