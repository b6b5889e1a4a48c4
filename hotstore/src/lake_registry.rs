//! The lake-offset registry: per table, the latest lake snapshot id and the log offset up to
//! which each bucket has been tiered into the lake.
//!
//! The registry is a cache. The truth is the txn actions in the Delta log, and the tiering
//! service can rebuild the registry from them after losing it. It is persisted to
//! `lake_snapshots.json` so a restart serves the last known snapshot without waiting for tiering.

use crate::catalog::write_atomically;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const REGISTRY_FILE: &str = "lake_snapshots.json";

/// The latest lake snapshot of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeSnapshot {
    pub snapshot_id: i64,
    /// `(bucket, offset)`: the lake holds the bucket's log up to `offset`, exclusive.
    pub bucket_offsets: Vec<(i32, i64)>,
}

#[derive(Debug)]
pub(crate) struct LakeRegistry {
    path: PathBuf,
    snapshots: Mutex<BTreeMap<i64, LakeSnapshot>>,
}

impl LakeRegistry {
    pub fn open(dir: &Path) -> crate::Result<LakeRegistry> {
        let path = dir.join(REGISTRY_FILE);
        let snapshots = match std::fs::read(&path) {
            Ok(bytes) => parse(&bytes).map_err(|reason| crate::Error::CatalogCorrupt {
                path: path.clone(),
                reason,
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(crate::Error::Io { path, source }),
        };
        Ok(LakeRegistry {
            path,
            snapshots: Mutex::new(snapshots),
        })
    }

    pub fn get(&self, table_id: i64) -> Option<LakeSnapshot> {
        self.lock().get(&table_id).cloned()
    }

    /// Records a snapshot. Buckets absent from `bucket_offsets` keep their previous offset, and
    /// an offset never moves backwards: the lake only grows.
    pub fn set(
        &self,
        table_id: i64,
        snapshot_id: i64,
        bucket_offsets: &[(i32, i64)],
    ) -> crate::Result<()> {
        let mut snapshots = self.lock();
        let mut merged: BTreeMap<i32, i64> = snapshots
            .get(&table_id)
            .map(|s| s.bucket_offsets.iter().copied().collect())
            .unwrap_or_default();
        for &(bucket, offset) in bucket_offsets {
            let entry = merged.entry(bucket).or_insert(offset);
            *entry = (*entry).max(offset);
        }
        snapshots.insert(
            table_id,
            LakeSnapshot {
                snapshot_id,
                bucket_offsets: merged.into_iter().collect(),
            },
        );
        self.persist(&snapshots)
    }

    pub fn remove(&self, table_id: i64) {
        let mut snapshots = self.lock();
        if snapshots.remove(&table_id).is_some()
            && let Err(error) = self.persist(&snapshots)
        {
            tracing::warn!(%error, "cannot persist lake snapshot registry after dropping a table");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, LakeSnapshot>> {
        self.snapshots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn persist(&self, snapshots: &BTreeMap<i64, LakeSnapshot>) -> crate::Result<()> {
        let tables: Vec<Value> = snapshots
            .iter()
            .map(|(table_id, s)| {
                json!({
                    "table_id": table_id,
                    "snapshot_id": s.snapshot_id,
                    "bucket_offsets": s.bucket_offsets.iter().map(|(b, o)| json!([b, o])).collect::<Vec<_>>(),
                })
            })
            .collect();
        let bytes = serde_json::to_vec(&json!({"version": 1, "tables": tables}))
            .expect("json values serialize");
        write_atomically(&self.path, &bytes).map_err(|source| crate::Error::Io {
            path: self.path.clone(),
            source,
        })
    }
}

fn parse(bytes: &[u8]) -> Result<BTreeMap<i64, LakeSnapshot>, String> {
    let document: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut snapshots = BTreeMap::new();
    for table in document["tables"].as_array().ok_or("missing tables")? {
        let table_id = table["table_id"].as_i64().ok_or("missing table_id")?;
        let snapshot_id = table["snapshot_id"].as_i64().ok_or("missing snapshot_id")?;
        let mut bucket_offsets = Vec::new();
        for pair in table["bucket_offsets"]
            .as_array()
            .ok_or("missing bucket_offsets")?
        {
            let bucket = pair[0].as_i64().ok_or("bad bucket")? as i32;
            let offset = pair[1].as_i64().ok_or("bad offset")?;
            bucket_offsets.push((bucket, offset));
        }
        snapshots.insert(
            table_id,
            LakeSnapshot {
                snapshot_id,
                bucket_offsets,
            },
        );
    }
    Ok(snapshots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_merge_monotonically_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let registry = LakeRegistry::open(dir.path()).unwrap();
        registry.set(7, 1, &[(0, 10), (1, 5)]).unwrap();
        registry.set(7, 2, &[(0, 8), (1, 9)]).unwrap();
        let expected = LakeSnapshot {
            snapshot_id: 2,
            bucket_offsets: vec![(0, 10), (1, 9)],
        };
        assert_eq!(registry.get(7), Some(expected.clone()));
        let reopened = LakeRegistry::open(dir.path()).unwrap();
        assert_eq!(reopened.get(7), Some(expected));
        reopened.remove(7);
        assert_eq!(LakeRegistry::open(dir.path()).unwrap().get(7), None);
    }
}
