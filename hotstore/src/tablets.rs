//! The runtime of every table: per bucket a log tablet, for a primary-key table a kv tablet,
//! and the writer (idempotence) state.
//!
//! A bucket's writes are serialized by its `write_lock`: the idempotence check, the append and
//! (for a PK table) the read-modify-write of the kv tablet happen under it, so the changelog
//! order is the kv apply order.

use crate::catalog::TableEntry;
use crate::protocol::{ApiError, code};
use crate::storage::{self, KvStore, LogConfig};
use arrow::datatypes::SchemaRef;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

pub use storage::{AppendInfo, KvTablet, LogTablet};

/// Maps a storage error to the Fluss error code a client acts on.
pub fn storage_error(context: &str, error: storage::Error) -> ApiError {
    let code = match &error {
        storage::Error::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE,
        storage::Error::MalformedBatch { .. }
        | storage::Error::CrcMismatch { .. }
        | storage::Error::EmptyAppend => code::CORRUPT_RECORD,
        storage::Error::OffsetOutOfRange { .. } => code::LOG_OFFSET_OUT_OF_RANGE,
        storage::Error::KeyTooLarge { .. } => code::RECORD_TOO_LARGE,
        storage::Error::Kv { .. }
        | storage::Error::CorruptKv { .. }
        | storage::Error::AppliedOffsetRegressed { .. } => code::KV_STORAGE_EXCEPTION,
        _ => code::LOG_STORAGE_EXCEPTION,
    };
    ApiError::new(code, format!("{context}: {error}"))
}

/// Sequences of recent batches remembered per writer to acknowledge retries (as Fluss does).
const WRITER_BATCHES_REMEMBERED: usize = 5;

pub struct Tablets {
    root: PathBuf,
    log_config: LogConfig,
    kv_store: KvStore,
    tables: RwLock<HashMap<i64, Arc<TableRuntime>>>,
}

pub struct TableRuntime {
    pub entry: Arc<TableEntry>,
    /// Arrow schema of the table's rows, as the client reads log batches.
    pub arrow_schema: SchemaRef,
    pub buckets: Vec<Arc<Bucket>>,
}

pub struct Bucket {
    pub id: i32,
    pub log: LogTablet,
    pub kv: Option<KvTablet>,
    pub writers: Mutex<WriterTable>,
    pub write_lock: tokio::sync::Mutex<()>,
    /// Set when a kv apply failed after its changelog was appended: the kv tablet is behind
    /// the log, and the next write replays the log into it first (`kv::recover`).
    pub kv_behind: std::sync::atomic::AtomicBool,
}

impl TableRuntime {
    pub fn bucket(&self, bucket_id: i32) -> Result<&Arc<Bucket>, ApiError> {
        usize::try_from(bucket_id)
            .ok()
            .and_then(|i| self.buckets.get(i))
            .ok_or_else(|| {
                ApiError::new(
                    code::UNKNOWN_TABLE_OR_BUCKET,
                    format!(
                        "unknown bucket {bucket_id} of {} (it has {} buckets)",
                        self.entry.qualified_name(),
                        self.buckets.len()
                    ),
                )
            })
    }
}

impl Tablets {
    /// Opens the server's kv store under `root/kv`; tables are opened one by one.
    pub fn open(
        root: PathBuf,
        log_config: LogConfig,
        kv_config: storage::KvConfig,
    ) -> crate::Result<Tablets> {
        let kv_store =
            KvStore::open(&root.join("kv"), kv_config).map_err(|e| crate::Error::Storage {
                message: e.to_string(),
            })?;
        Ok(Tablets {
            root,
            log_config,
            kv_store,
            tables: RwLock::new(HashMap::new()),
        })
    }

    fn kv_tablet_name(table_id: i64, bucket_id: i32) -> String {
        format!("t{table_id}-b{bucket_id}")
    }

    fn table_dir(&self, table_id: i64) -> PathBuf {
        self.root.join(format!("table-{table_id}"))
    }

    pub async fn open_table(&self, entry: Arc<TableEntry>) -> crate::Result<()> {
        let dir = self.table_dir(entry.id);
        let row_type = entry.descriptor.schema().row_type();
        let arrow_schema =
            fluss::record::to_arrow_schema(row_type).map_err(|e| crate::Error::Config {
                message: format!(
                    "table {} has a schema silt cannot map to arrow: {e}",
                    entry.qualified_name()
                ),
            })?;
        let mut buckets = Vec::with_capacity(entry.bucket_count as usize);
        for bucket_id in 0..entry.bucket_count {
            let bucket_dir = dir.join(format!("bucket-{bucket_id}"));
            let log = LogTablet::open(&bucket_dir.join("log"), self.log_config).map_err(|e| {
                crate::Error::Storage {
                    message: e.to_string(),
                }
            })?;
            let kv = if entry.has_primary_key() {
                let name = Self::kv_tablet_name(entry.id, bucket_id);
                Some(
                    self.kv_store
                        .open_tablet(&name)
                        .map_err(|e| crate::Error::Storage {
                            message: e.to_string(),
                        })?,
                )
            } else {
                None
            };
            buckets.push(Arc::new(Bucket {
                id: bucket_id,
                log,
                kv,
                writers: Mutex::new(WriterTable::default()),
                write_lock: tokio::sync::Mutex::new(()),
                kv_behind: std::sync::atomic::AtomicBool::new(false),
            }));
        }
        let runtime = Arc::new(TableRuntime {
            entry: entry.clone(),
            arrow_schema,
            buckets,
        });
        for bucket in &runtime.buckets {
            crate::kv::recover(&runtime, bucket).map_err(|e| crate::Error::Storage {
                message: format!(
                    "recovering kv of {} bucket {}: {}",
                    entry.qualified_name(),
                    bucket.id,
                    e.message
                ),
            })?;
        }
        self.tables
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry.id, runtime);
        Ok(())
    }

    pub fn get(&self, table_id: i64) -> Option<Arc<TableRuntime>> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&table_id)
            .cloned()
    }

    /// Forgets the table and deletes its files once in-flight writes have finished.
    pub async fn drop_table(&self, entry: &TableEntry) {
        let removed = self
            .tables
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&entry.id);
        if let Some(runtime) = removed {
            for bucket in &runtime.buckets {
                let _guard = bucket.write_lock.lock().await;
                if bucket.kv.is_some()
                    && let Err(error) = self
                        .kv_store
                        .drop_tablet(&Self::kv_tablet_name(entry.id, bucket.id))
                {
                    tracing::warn!(%error, "cannot drop kv tablet of dropped table");
                }
            }
        }
        let dir = self.table_dir(entry.id);
        if let Err(error) = std::fs::remove_dir_all(&dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), %error, "cannot delete files of dropped table");
        }
    }

    pub async fn close_all(&self) {
        let tables: Vec<Arc<TableRuntime>> = self
            .tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for table in tables {
            for bucket in &table.buckets {
                // Waiting for the write lock lets an in-flight append finish durably.
                let _guard = bucket.write_lock.lock().await;
                if let Err(error) = bucket.log.flush() {
                    tracing::warn!(%error, "cannot flush log tablet at shutdown");
                }
            }
        }
        if let Err(error) = self.kv_store.persist() {
            tracing::warn!(%error, "cannot persist kv store at shutdown");
        }
    }
}

/// What the idempotence check decided for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterCheck {
    /// Append it.
    Append,
    /// A retry of a batch already appended at this base offset: acknowledge, do not append.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Default)]
pub struct WriterTable {
    writers: HashMap<i64, VecDeque<(i32, i64)>>,
}

impl WriterTable {
    /// Checks a batch's sequence against the writer's last batches.
    pub fn check(&self, writer_id: i64, sequence: i32) -> Result<WriterCheck, ApiError> {
        if writer_id == crate::batch::NO_WRITER_ID || sequence < 0 {
            return Ok(WriterCheck::Append);
        }
        let Some(recent) = self.writers.get(&writer_id) else {
            // A writer silt has not seen (new, or from before a restart) may start anywhere.
            return Ok(WriterCheck::Append);
        };
        if let Some(&(_, base_offset)) = recent.iter().find(|(seq, _)| *seq == sequence) {
            return Ok(WriterCheck::Duplicate { base_offset });
        }
        let last = recent.back().map(|(seq, _)| *seq).unwrap_or(-1);
        let expected = if last == i32::MAX { 0 } else { last + 1 };
        if sequence != expected {
            return Err(ApiError::new(
                code::OUT_OF_ORDER_SEQUENCE,
                format!(
                    "out of order batch sequence {sequence} for writer {writer_id} (expected {expected})"
                ),
            ));
        }
        Ok(WriterCheck::Append)
    }

    pub fn record(&mut self, writer_id: i64, sequence: i32, base_offset: i64) {
        if writer_id == crate::batch::NO_WRITER_ID || sequence < 0 {
            return;
        }
        let recent = self.writers.entry(writer_id).or_default();
        recent.push_back((sequence, base_offset));
        while recent.len() > WRITER_BATCHES_REMEMBERED {
            recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_sequences() {
        let mut table = WriterTable::default();
        assert_eq!(table.check(7, 0), Ok(WriterCheck::Append));
        table.record(7, 0, 0);
        table.record(7, 1, 10);
        assert_eq!(
            table.check(7, 1),
            Ok(WriterCheck::Duplicate { base_offset: 10 })
        );
        assert_eq!(table.check(7, 2), Ok(WriterCheck::Append));
        assert_eq!(
            table.check(7, 5).unwrap_err().code,
            code::OUT_OF_ORDER_SEQUENCE
        );
        assert_eq!(table.check(-1, 3), Ok(WriterCheck::Append));
        assert_eq!(table.check(8, 9), Ok(WriterCheck::Append));
    }
}
