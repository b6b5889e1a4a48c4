//! Injected failures for exactly-once tests: [`Failures`] holds failure points `(owner,
//! position)`, where the owner is whatever the test's source partitions by (a subtask, a
//! bucket). Each point fires once, the first time its owner's source reads across it, so a
//! test with `n` points restarts at most `n` times. [`FaultyStorage`] is checkpoint storage
//! that delays or fails the metadata write of chosen checkpoints (once each).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use silt_engine::checkpoint::{
    CheckpointMetadata, CheckpointStorage, CompletedCheckpoint, StateHandle,
};

/// Failure points `(owner, position)`, each firing once.
#[derive(Default)]
pub struct Failures<K> {
    /// (owner, position, fired)
    points: Mutex<Vec<(K, u64, bool)>>,
    /// How many points have fired.
    pub fired: AtomicU64,
}

impl<K: PartialEq + Copy> Failures<K> {
    pub fn new(points: Vec<(K, u64)>) -> Arc<Self> {
        Arc::new(Failures {
            points: Mutex::new(points.into_iter().map(|(k, p)| (k, p, false)).collect()),
            fired: AtomicU64::new(0),
        })
    }

    /// True (once) if a failure point of `owner` lies in `[from, to)`.
    pub fn take(&self, owner: K, from: u64, to: u64) -> bool {
        let mut points = self.points.lock().unwrap();
        for p in points.iter_mut() {
            if p.0 == owner && !p.2 && (from..to).contains(&p.1) {
                p.2 = true;
                self.fired.fetch_add(1, Ordering::SeqCst);
                return true;
            }
        }
        false
    }

    /// How many points have fired.
    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::SeqCst)
    }
}

/// Wraps checkpoint storage to slow down or fail the metadata write (the commit point), which
/// widens the window between "every task snapshotted" and "the checkpoint is complete".
#[derive(Debug)]
pub struct FaultyStorage {
    pub inner: Arc<dyn CheckpointStorage>,
    pub metadata_delay: Duration,
    /// Fail the metadata write of these checkpoint ids once each (a crash at the commit point).
    pub fail_metadata_of: Mutex<Vec<u64>>,
    pub metadata_writes_failed: AtomicU64,
    /// Set while a checkpoint's states are written but its metadata is not.
    pub in_flight: AtomicBool,
}

impl FaultyStorage {
    pub fn new(inner: Arc<dyn CheckpointStorage>) -> Self {
        FaultyStorage {
            inner,
            metadata_delay: Duration::ZERO,
            fail_metadata_of: Mutex::new(Vec::new()),
            metadata_writes_failed: AtomicU64::new(0),
            in_flight: AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl CheckpointStorage for FaultyStorage {
    async fn write_state(
        &self,
        id: u64,
        vertex: &str,
        subtask: u32,
        parallelism: u32,
        state: Bytes,
    ) -> silt_engine::Result<StateHandle> {
        self.in_flight.store(true, Ordering::SeqCst);
        self.inner
            .write_state(id, vertex, subtask, parallelism, state)
            .await
    }

    async fn write_metadata(&self, metadata: &CheckpointMetadata) -> silt_engine::Result<()> {
        tokio::time::sleep(self.metadata_delay).await;
        let fail = {
            let mut ids = self.fail_metadata_of.lock().unwrap();
            let before = ids.len();
            ids.retain(|&id| id != metadata.checkpoint_id);
            ids.len() != before
        };
        if fail {
            self.metadata_writes_failed.fetch_add(1, Ordering::SeqCst);
            self.in_flight.store(false, Ordering::SeqCst);
            return Err(silt_engine::Error::Storage(format!(
                "injected crash before the metadata of checkpoint {}",
                metadata.checkpoint_id
            )));
        }
        let written = self.inner.write_metadata(metadata).await;
        self.in_flight.store(false, Ordering::SeqCst);
        written
    }

    async fn complete_checkpoints(&self) -> silt_engine::Result<Vec<u64>> {
        self.inner.complete_checkpoints().await
    }
    async fn all_checkpoints(&self) -> silt_engine::Result<Vec<u64>> {
        self.inner.all_checkpoints().await
    }
    async fn load(&self, id: u64) -> silt_engine::Result<CompletedCheckpoint> {
        self.inner.load(id).await
    }
    async fn discard(&self, id: u64) -> silt_engine::Result<()> {
        self.inner.discard(id).await
    }
}
