//! The kv snapshot state the [`Service`](super::Service) holds: the permits that bound how
//! many snapshots are written at once, and the leases (AcquireKvSnapshotLease) that keep
//! snapshots past `kv_snapshots_retained`, persisted in `kv-snapshots/LEASES`. When snapshots
//! are taken and how leases are granted is the `kv_snapshots` task's, above the service.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use crate::protocol::{ApiError, code};
use crate::storage;

/// A bucket as a lease names it: (table id, partition id, bucket id).
pub(crate) type BucketKey = (i64, Option<i64>, i32);

/// Longest lease id accepted (Flink's are a UUID with a prefix).
const LEASE_ID_BYTES_MAX: usize = 1024;
const LEASES_FILE: &str = "LEASES";
const LEASES_MAGIC: &[u8; 8] = b"SILTLEA1";

/// The server's kv snapshot state: the writing permits and the leases.
pub(crate) struct KvSnapshots {
    pub(crate) permits: Permits,
    leases: Mutex<Leases>,
    leases_path: PathBuf,
}

impl KvSnapshots {
    /// The leases kept under `root` (the snapshot root), expired ones forgotten.
    pub(crate) fn open(root: &Path, concurrency_max: usize, now_ms: i64) -> KvSnapshots {
        let leases_path = root.join(LEASES_FILE);
        let mut leases = match std::fs::read(&leases_path) {
            Ok(bytes) => storage::checked_body(&bytes)
                .and_then(Leases::decode)
                .unwrap_or_else(|| {
                    tracing::warn!(path = %leases_path.display(), "kv snapshot leases are damaged; starting without leases");
                    Leases::default()
                }),
            Err(_) => Leases::default(),
        };
        leases.expire(now_ms);
        KvSnapshots {
            permits: Permits::new(concurrency_max.max(1)),
            leases: Mutex::new(leases),
            leases_path,
        }
    }

    pub(crate) fn leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The snapshot ids of `key` that a live lease holds.
    pub(crate) fn leased(&self, key: BucketKey, now_ms: i64) -> BTreeSet<i64> {
        self.leases().leased(key, now_ms)
    }

    pub(crate) fn save(&self, leases: &Leases) -> Result<(), ApiError> {
        let dir = self.leases_path.parent().unwrap_or(Path::new("."));
        storage::write_file_durably(dir, &self.leases_path, &storage::with_crc(leases.encode()))
            .map_err(|e| {
                ApiError::new(
                    code::KV_STORAGE_EXCEPTION,
                    format!("cannot keep the kv snapshot leases: {e}"),
                )
            })
    }
}

/// A counting semaphore for blocking threads: snapshots are written on them.
pub(crate) struct Permits {
    available: Mutex<usize>,
    freed: Condvar,
}

pub(crate) struct Permit<'a>(&'a Permits);

impl Permits {
    fn new(n: usize) -> Permits {
        Permits {
            available: Mutex::new(n),
            freed: Condvar::new(),
        }
    }

    pub(crate) fn acquire(&self) -> Permit<'_> {
        let mut available = self.available.lock().unwrap_or_else(|p| p.into_inner());
        while *available == 0 {
            available = self
                .freed
                .wait(available)
                .unwrap_or_else(|p| p.into_inner());
        }
        *available -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.available.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

pub(crate) fn check_lease_id(lease_id: &str) -> Result<(), ApiError> {
    if lease_id.is_empty() || lease_id.len() > LEASE_ID_BYTES_MAX {
        return Err(ApiError::new(
            code::INVALID_CONFIG,
            format!(
                "a kv snapshot lease id has 1 to {LEASE_ID_BYTES_MAX} bytes, not {}",
                lease_id.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn leases_full(max: usize) -> ApiError {
    ApiError::new(
        code::KV_STORAGE_EXCEPTION,
        format!(
            "kv snapshot leases hold {max} bucket snapshots, the bound \
             (hotstore.kv_snapshot_leased_max): drop leases no longer read, or raise the bound"
        ),
    )
}

/// One lease: until when, and the snapshot it holds per bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) expires_at_ms: i64,
    pub(crate) snapshots: BTreeMap<BucketKey, i64>,
}

/// Every lease by id.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Leases {
    pub(crate) by_id: BTreeMap<String, Lease>,
}

impl Leases {
    pub(crate) fn expire(&mut self, now_ms: i64) {
        self.by_id.retain(|_, lease| lease.expires_at_ms > now_ms);
    }

    fn leased(&self, key: BucketKey, now_ms: i64) -> BTreeSet<i64> {
        self.by_id
            .values()
            .filter(|lease| lease.expires_at_ms > now_ms)
            .filter_map(|lease| lease.snapshots.get(&key).copied())
            .collect()
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = LEASES_MAGIC.to_vec();
        out.extend_from_slice(&(self.by_id.len() as u32).to_le_bytes());
        for (id, lease) in &self.by_id {
            out.extend_from_slice(&(id.len() as u32).to_le_bytes());
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&lease.expires_at_ms.to_le_bytes());
            out.extend_from_slice(&(lease.snapshots.len() as u32).to_le_bytes());
            for (&(table_id, partition_id, bucket_id), snapshot_id) in &lease.snapshots {
                out.extend_from_slice(&table_id.to_le_bytes());
                out.extend_from_slice(&partition_id.unwrap_or(-1).to_le_bytes());
                out.extend_from_slice(&bucket_id.to_le_bytes());
                out.extend_from_slice(&snapshot_id.to_le_bytes());
            }
        }
        out
    }

    fn decode(body: &[u8]) -> Option<Leases> {
        let mut rest = body.strip_prefix(LEASES_MAGIC.as_slice())?;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (taken, after) = rest.split_at_checked(n)?;
            rest = after;
            Some(taken)
        };
        let mut leases = Leases::default();
        for _ in 0..u32::from_le_bytes(take(4)?.try_into().ok()?) {
            let id_len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let id = std::str::from_utf8(take(id_len)?).ok()?.to_string();
            let expires_at_ms = i64::from_le_bytes(take(8)?.try_into().ok()?);
            let mut snapshots = BTreeMap::new();
            for _ in 0..u32::from_le_bytes(take(4)?.try_into().ok()?) {
                let table_id = i64::from_le_bytes(take(8)?.try_into().ok()?);
                let partition_id = i64::from_le_bytes(take(8)?.try_into().ok()?);
                let bucket_id = i32::from_le_bytes(take(4)?.try_into().ok()?);
                let snapshot_id = i64::from_le_bytes(take(8)?.try_into().ok()?);
                let partition_id = (partition_id >= 0).then_some(partition_id);
                snapshots.insert((table_id, partition_id, bucket_id), snapshot_id);
            }
            leases.by_id.insert(
                id,
                Lease {
                    expires_at_ms,
                    snapshots,
                },
            );
        }
        rest.is_empty().then_some(leases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_trip_through_their_file() {
        let mut leases = Leases::default();
        let snapshots = BTreeMap::from([((7, None, 0), 3), ((7, Some(2), 1), 0)]);
        leases.by_id.insert(
            "flink-1".into(),
            Lease {
                expires_at_ms: 1_000,
                snapshots,
            },
        );
        let empty = Lease {
            expires_at_ms: 5,
            snapshots: BTreeMap::new(),
        };
        leases.by_id.insert("empty".into(), empty);
        let bytes = leases.encode();
        let decoded = Leases::decode(&bytes).unwrap();
        assert_eq!(decoded, leases);
        assert_eq!(Leases::decode(&bytes[..bytes.len() - 1]), None, "cut short");
        assert_eq!(leases.leased((7, Some(2), 1), 999), BTreeSet::from([0]));
        assert_eq!(
            leases.leased((7, Some(2), 1), 1_000),
            BTreeSet::new(),
            "expired"
        );
        leases.expire(10);
        assert_eq!(leases.by_id.keys().collect::<Vec<_>>(), ["flink-1"]);
    }
}
