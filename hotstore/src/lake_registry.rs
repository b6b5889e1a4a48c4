//! The lake-offset registry: per table, the latest lake snapshot id and the log offset up to
//! which each bucket (each partition's bucket, for a partitioned table) has been tiered into the
//! lake.
//!
//! The registry is a cache. The truth is the txn actions in the Delta log, and the tiering
//! service can rebuild the registry from them after losing it. It is persisted to
//! `lake_snapshots.json` so a restart serves the last known snapshot without waiting for tiering.
//!
//! Contract of every update: entries absent from it keep their previous offset, and an offset
//! never moves backwards (the lake only grows). A dropped partition's entries are forgotten.

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
    /// `(partition id, bucket, offset)` of a partitioned table: the lake holds that
    /// partition's bucket up to `offset`, exclusive. Sorted by partition id, then bucket.
    pub partition_offsets: Vec<(i64, i32, i64)>,
}

impl LakeSnapshot {
    /// Every tiered offset as `(partition id, bucket, offset)`, `None` for a table's own
    /// buckets.
    pub fn tiered_offsets(&self) -> impl Iterator<Item = (Option<i64>, i32, i64)> + '_ {
        let buckets = self.bucket_offsets.iter().map(|&(b, o)| (None, b, o));
        let partitions = self
            .partition_offsets
            .iter()
            .map(|&(p, b, o)| (Some(p), b, o));
        buckets.chain(partitions)
    }
}

/// What the registry knows of a partition id named in an update (see
/// [`LakeRegistry::set_partitioned`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartitionLiveness {
    /// A live partition of the table: its entries are recorded.
    Live,
    /// A partition that existed and was dropped: its entries are ignored.
    Dropped,
}

#[derive(Debug)]
pub(crate) struct LakeRegistry {
    path: PathBuf,
    snapshots: Mutex<BTreeMap<i64, LakeSnapshot>>,
}

impl LakeRegistry {
    pub fn open(dir: &Path) -> crate::error::Result<LakeRegistry> {
        let path = dir.join(REGISTRY_FILE);
        let snapshots = match std::fs::read(&path) {
            Ok(bytes) => parse(&bytes).map_err(|reason| crate::error::Error::CatalogCorrupt {
                path: path.clone(),
                reason,
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(crate::error::Error::Io { path, source }),
        };
        Ok(LakeRegistry {
            path,
            snapshots: Mutex::new(snapshots),
        })
    }

    pub fn get(&self, table_id: i64) -> Option<LakeSnapshot> {
        self.lock().get(&table_id).cloned()
    }

    /// Every table's snapshot, by table id.
    pub fn all(&self) -> BTreeMap<i64, LakeSnapshot> {
        self.lock().clone()
    }

    /// Records a snapshot of a table's own buckets (see the module's merge contract).
    pub fn set(
        &self,
        table_id: i64,
        snapshot_id: i64,
        bucket_offsets: &[(i32, i64)],
    ) -> crate::error::Result<()> {
        let mut snapshots = self.lock();
        let snapshot = snapshot_to_update(&mut snapshots, table_id, snapshot_id);
        snapshot.bucket_offsets = merge(
            &snapshot.bucket_offsets,
            bucket_offsets,
            |&(b, o)| (b, o),
            |b, o| (b, o),
        );
        self.persist(&snapshots)
    }

    /// Records a snapshot of a partitioned table's partitions (see the module's merge
    /// contract). `liveness` is asked about each partition id while the registry is locked, so
    /// a partition dropped concurrently is either ignored here or forgotten by
    /// [`LakeRegistry::forget_partition`] after this update, never left behind. Entries of a
    /// dropped partition are ignored (the tiering committer may report a partition that was
    /// just dropped); an error of `liveness` (an id that is not the table's) refuses the whole
    /// update.
    pub fn set_partitioned(
        &self,
        table_id: i64,
        snapshot_id: i64,
        offsets: &[(i64, i32, i64)],
        liveness: impl Fn(i64) -> crate::error::Result<PartitionLiveness>,
    ) -> crate::error::Result<()> {
        let mut snapshots = self.lock();
        let mut live = Vec::with_capacity(offsets.len());
        for &(partition_id, bucket, offset) in offsets {
            match liveness(partition_id)? {
                PartitionLiveness::Live => live.push(((partition_id, bucket), offset)),
                PartitionLiveness::Dropped => tracing::debug!(
                    table_id,
                    partition_id,
                    bucket,
                    offset,
                    "lake snapshot names a dropped partition; ignored"
                ),
            }
        }
        let snapshot = snapshot_to_update(&mut snapshots, table_id, snapshot_id);
        snapshot.partition_offsets = merge(
            &snapshot.partition_offsets,
            &live,
            |&(p, b, o)| ((p, b), o),
            |(p, b), o| (p, b, o),
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

    /// Forgets a dropped partition's offsets.
    pub fn forget_partition(&self, table_id: i64, partition_id: i64) {
        let mut snapshots = self.lock();
        let Some(snapshot) = snapshots.get_mut(&table_id) else {
            return;
        };
        let before = snapshot.partition_offsets.len();
        snapshot
            .partition_offsets
            .retain(|&(p, _, _)| p != partition_id);
        if snapshot.partition_offsets.len() != before
            && let Err(error) = self.persist(&snapshots)
        {
            tracing::warn!(%error, "cannot persist lake snapshot registry after dropping a partition");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, LakeSnapshot>> {
        self.snapshots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn persist(&self, snapshots: &BTreeMap<i64, LakeSnapshot>) -> crate::error::Result<()> {
        let tables: Vec<Value> = snapshots
            .iter()
            .map(|(table_id, s)| {
                json!({
                    "table_id": table_id,
                    "snapshot_id": s.snapshot_id,
                    "bucket_offsets": s.bucket_offsets.iter().map(|(b, o)| json!([b, o])).collect::<Vec<_>>(),
                    "partition_offsets": s.partition_offsets.iter().map(|(p, b, o)| json!([p, b, o])).collect::<Vec<_>>(),
                })
            })
            .collect();
        let bytes = serde_json::to_vec(&json!({"version": 1, "tables": tables}))
            .expect("json values serialize");
        write_atomically(&self.path, &bytes).map_err(|source| crate::error::Error::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// The table's snapshot with its id set to `snapshot_id` (a new one without offsets when it
/// had none), for the caller to merge its offsets into.
fn snapshot_to_update(
    snapshots: &mut BTreeMap<i64, LakeSnapshot>,
    table_id: i64,
    snapshot_id: i64,
) -> &mut LakeSnapshot {
    let snapshot = snapshots.entry(table_id).or_insert_with(|| LakeSnapshot {
        snapshot_id,
        bucket_offsets: Vec::new(),
        partition_offsets: Vec::new(),
    });
    snapshot.snapshot_id = snapshot_id;
    snapshot
}

/// `old` updated by `new`, keyed by `K`: absent keys keep their offset, offsets only grow.
fn merge<T, K: Ord + Copy>(
    old: &[T],
    new: &[(K, i64)],
    split: impl Fn(&T) -> (K, i64),
    join: impl Fn(K, i64) -> T,
) -> Vec<T> {
    let mut merged: BTreeMap<K, i64> = old.iter().map(split).collect();
    for &(key, offset) in new {
        let entry = merged.entry(key).or_insert(offset);
        *entry = (*entry).max(offset);
    }
    merged.into_iter().map(|(k, o)| join(k, o)).collect()
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
        // Files written before partitions were tiered have no partition offsets.
        let mut partition_offsets = Vec::new();
        for triple in table["partition_offsets"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            let partition = triple[0].as_i64().ok_or("bad partition id")?;
            let bucket = triple[1].as_i64().ok_or("bad bucket")? as i32;
            let offset = triple[2].as_i64().ok_or("bad offset")?;
            partition_offsets.push((partition, bucket, offset));
        }
        snapshots.insert(
            table_id,
            LakeSnapshot {
                snapshot_id,
                bucket_offsets,
                partition_offsets,
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
            partition_offsets: Vec::new(),
        };
        assert_eq!(registry.get(7), Some(expected.clone()));
        let reopened = LakeRegistry::open(dir.path()).unwrap();
        assert_eq!(reopened.get(7), Some(expected));
        reopened.remove(7);
        assert_eq!(LakeRegistry::open(dir.path()).unwrap().get(7), None);
    }

    #[test]
    fn partition_offsets_merge_monotonically_persist_and_are_forgotten_with_their_partition() {
        let dir = tempfile::tempdir().unwrap();
        let registry = LakeRegistry::open(dir.path()).unwrap();
        // Partition 9 was dropped; 4 and 5 are live.
        let liveness = |p: i64| {
            Ok(if p == 9 {
                PartitionLiveness::Dropped
            } else {
                PartitionLiveness::Live
            })
        };
        registry
            .set_partitioned(
                3,
                1,
                &[(4, 0, 10), (4, 1, 2), (5, 0, 7), (9, 0, 1)],
                liveness,
            )
            .unwrap();
        registry
            .set_partitioned(3, 2, &[(4, 0, 6), (5, 0, 8)], liveness)
            .unwrap();
        let expected = LakeSnapshot {
            snapshot_id: 2,
            bucket_offsets: Vec::new(),
            partition_offsets: vec![(4, 0, 10), (4, 1, 2), (5, 0, 8)],
        };
        assert_eq!(registry.get(3), Some(expected.clone()));
        let refused = registry.set_partitioned(3, 3, &[(4, 0, 20), (6, 0, 1)], |p| {
            if p == 6 {
                Err(crate::error::Error::Config {
                    message: "not the table's".into(),
                })
            } else {
                Ok(PartitionLiveness::Live)
            }
        });
        assert!(refused.is_err());
        assert_eq!(
            registry.get(3),
            Some(expected.clone()),
            "a refused update changes nothing"
        );
        let reopened = LakeRegistry::open(dir.path()).unwrap();
        assert_eq!(reopened.get(3), Some(expected));
        reopened.forget_partition(3, 4);
        let reopened = LakeRegistry::open(dir.path()).unwrap();
        assert_eq!(reopened.get(3).unwrap().partition_offsets, [(5, 0, 8)]);
    }

    #[test]
    fn a_registry_written_before_partitions_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(REGISTRY_FILE),
            r#"{"version":1,"tables":[{"table_id":7,"snapshot_id":3,"bucket_offsets":[[0,12],[1,4]]}]}"#,
        )
        .unwrap();
        let registry = LakeRegistry::open(dir.path()).unwrap();
        assert_eq!(
            registry.get(7),
            Some(LakeSnapshot {
                snapshot_id: 3,
                bucket_offsets: vec![(0, 12), (1, 4)],
                partition_offsets: Vec::new(),
            })
        );
    }
}
