//! Checkpoint storage: where subtask states and checkpoint metadata live.
//!
//! Layout under a root: `chk-<id, 20 digits>/<vertex>-<subtask>.state` for each subtask's
//! state, then `chk-<id>/_metadata`, written last and atomically. **Invariant:** a checkpoint is
//! complete if and only if its `_metadata` exists; a crash between the states and the metadata
//! leaves an incomplete checkpoint that restore ignores and retention later deletes.

use std::collections::HashMap;
use std::fmt::Debug;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const METADATA_FILE: &str = "_metadata";
/// Refuse to load metadata or state files beyond this size: they are not ours.
const METADATA_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Where one subtask's state of a checkpoint lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHandle {
    pub vertex: String,
    pub subtask: u32,
    /// The vertex's parallelism when the state was written.
    pub parallelism: u32,
    /// File name relative to the checkpoint's directory.
    pub file: String,
    pub size_bytes: u64,
}

impl StateHandle {
    /// The handle of a subtask's state before it is written: its file name and size.
    fn new(vertex: &str, subtask: u32, parallelism: u32, state: &Bytes) -> Self {
        StateHandle {
            vertex: vertex.to_string(),
            subtask,
            parallelism,
            file: state_file_name(vertex, subtask),
            size_bytes: state.len() as u64,
        }
    }
}

/// What `_metadata` records: the checkpoint and where each subtask's state is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub checkpoint_id: u64,
    pub job_name: String,
    pub created_at_ms: i64,
    pub is_final: bool,
    pub states: Vec<StateHandle>,
}

/// A complete checkpoint with its states loaded.
#[derive(Debug, Clone)]
pub struct CompletedCheckpoint {
    pub metadata: CheckpointMetadata,
    /// By `(vertex, subtask)`.
    pub states: HashMap<(String, u32), Bytes>,
}

impl CompletedCheckpoint {
    /// The states of one vertex indexed by subtask, sized to the parallelism it had.
    pub fn vertex_states(&self, vertex: &str) -> Vec<Option<Bytes>> {
        let parallelism = self
            .metadata
            .states
            .iter()
            .filter(|h| h.vertex == vertex)
            .map(|h| h.parallelism as usize)
            .max()
            .unwrap_or(0);
        (0..parallelism)
            .map(|i| self.states.get(&(vertex.to_string(), i as u32)).cloned())
            .collect()
    }
}

/// Durable storage for checkpoints. Implementations must make `write_metadata` atomic: after
/// a crash the metadata file is either absent or whole.
#[async_trait]
pub trait CheckpointStorage: Send + Sync + Debug {
    async fn write_state(
        &self,
        checkpoint_id: u64,
        vertex: &str,
        subtask: u32,
        parallelism: u32,
        state: Bytes,
    ) -> Result<StateHandle>;
    async fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<()>;
    /// Ids of complete checkpoints, ascending.
    async fn complete_checkpoints(&self) -> Result<Vec<u64>>;
    /// Ids that have a directory, complete or not, ascending.
    async fn all_checkpoints(&self) -> Result<Vec<u64>>;
    async fn load(&self, checkpoint_id: u64) -> Result<CompletedCheckpoint>;
    async fn discard(&self, checkpoint_id: u64) -> Result<()>;

    /// The latest complete checkpoint, ignoring incomplete ones.
    async fn latest(&self) -> Result<Option<CompletedCheckpoint>> {
        match self.complete_checkpoints().await?.last() {
            Some(&id) => Ok(Some(self.load(id).await?)),
            None => Ok(None),
        }
    }
}

/// Opens checkpoint storage from a location: a plain path is a local directory; a URL
/// (`file:///…`, `s3://bucket/prefix`, …) goes through object_store.
pub fn storage_for(location: &str) -> Result<Arc<dyn CheckpointStorage>> {
    if !location.contains("://") {
        return Ok(Arc::new(LocalDirStorage::new(location)));
    }
    let url = url::Url::parse(location).map_err(|e| Error::StorageUrl {
        url: location.to_string(),
        reason: e.to_string(),
    })?;
    let (store, prefix) = object_store::parse_url(&url).map_err(|e| Error::StorageUrl {
        url: location.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Arc::new(ObjectStoreStorage::new(Arc::from(store), prefix)))
}

fn checkpoint_dir_name(id: u64) -> String {
    format!("chk-{id:020}")
}

fn parse_checkpoint_dir(name: &str) -> Option<u64> {
    name.strip_prefix("chk-")?.parse().ok()
}

fn state_file_name(vertex: &str, subtask: u32) -> String {
    // Vertex names come from job definitions; keep file names inside the directory.
    let safe: String = vertex
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-{subtask}.state")
}

fn encode_metadata(metadata: &CheckpointMetadata) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(metadata)
        .map_err(|e| Error::Internal(format!("encoding checkpoint metadata: {e}")))
}

fn decode_metadata(bytes: &[u8], origin: &str) -> Result<CheckpointMetadata> {
    if bytes.len() > METADATA_BYTES_MAX {
        return Err(Error::Storage(format!(
            "{origin} is {} bytes, larger than any metadata silt writes",
            bytes.len()
        )));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Storage(format!("{origin} is not valid checkpoint metadata: {e}")))
}

fn check_state(handle: &StateHandle, bytes: &Bytes, origin: &str) -> Result<()> {
    if bytes.len() as u64 != handle.size_bytes {
        return Err(Error::Storage(format!(
            "{origin} has {} bytes but the metadata says {} (the checkpoint is damaged; delete it to fall back to an older one)",
            bytes.len(),
            handle.size_bytes
        )));
    }
    Ok(())
}

/// The file operations a checkpoint storage is built from, over the layout in this module's
/// doc: [`CheckpointStorage`] is implemented once on top of them.
#[async_trait]
trait CheckpointFiles: Send + Sync + Debug {
    /// Writes one file of a checkpoint atomically: after a crash it is absent or whole.
    async fn put(&self, checkpoint_id: u64, file: &str, bytes: Bytes) -> Result<()>;
    /// One file of a checkpoint and where it was read (for error messages).
    async fn get(&self, checkpoint_id: u64, file: &str) -> Result<(Bytes, String)>;
    /// `(id, has metadata)` for every checkpoint directory, ascending.
    async fn scan(&self) -> Result<Vec<(u64, bool)>>;
    /// Deletes a checkpoint's directory; an absent one is no error.
    async fn remove(&self, checkpoint_id: u64) -> Result<()>;
}

#[async_trait]
impl<F: CheckpointFiles> CheckpointStorage for F {
    async fn write_state(
        &self,
        checkpoint_id: u64,
        vertex: &str,
        subtask: u32,
        parallelism: u32,
        state: Bytes,
    ) -> Result<StateHandle> {
        let handle = StateHandle::new(vertex, subtask, parallelism, &state);
        self.put(checkpoint_id, &handle.file, state).await?;
        Ok(handle)
    }

    async fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<()> {
        let bytes = encode_metadata(metadata)?;
        self.put(metadata.checkpoint_id, METADATA_FILE, bytes.into())
            .await
    }

    async fn complete_checkpoints(&self) -> Result<Vec<u64>> {
        let found = self.scan().await?.into_iter();
        Ok(found
            .filter(|&(_, complete)| complete)
            .map(|(id, _)| id)
            .collect())
    }

    async fn all_checkpoints(&self) -> Result<Vec<u64>> {
        Ok(self.scan().await?.into_iter().map(|(id, _)| id).collect())
    }

    async fn load(&self, checkpoint_id: u64) -> Result<CompletedCheckpoint> {
        let (bytes, origin) = self.get(checkpoint_id, METADATA_FILE).await?;
        let metadata = decode_metadata(&bytes, &origin)?;
        let mut states = HashMap::new();
        for handle in &metadata.states {
            let (bytes, origin) = self.get(checkpoint_id, &handle.file).await?;
            check_state(handle, &bytes, &origin)?;
            states.insert((handle.vertex.clone(), handle.subtask), bytes);
        }
        Ok(CompletedCheckpoint { metadata, states })
    }

    async fn discard(&self, checkpoint_id: u64) -> Result<()> {
        self.remove(checkpoint_id).await
    }
}

/// Checkpoints in a local directory, written with write-to-temp, fsync, rename, fsync-dir.
#[derive(Debug, Clone)]
pub struct LocalDirStorage {
    root: PathBuf,
}

impl LocalDirStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalDirStorage { root: root.into() }
    }

    fn dir(&self, id: u64) -> PathBuf {
        self.root.join(checkpoint_dir_name(id))
    }

    fn list_dirs(&self) -> Result<Vec<(u64, PathBuf)>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(self.root.display().to_string(), e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(self.root.display().to_string(), e))?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_checkpoint_dir) {
                ids.push((id, entry.path()));
            }
        }
        ids.sort();
        Ok(ids)
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("checkpoint files live in a directory");
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    let tmp = path.with_extension("tmp");
    let io = |e| Error::io(tmp.display().to_string(), e);
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path.display().to_string(), e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir.display().to_string(), e))
}

#[async_trait]
impl CheckpointFiles for LocalDirStorage {
    /// Writes durably, off the async workers.
    async fn put(&self, checkpoint_id: u64, file: &str, bytes: Bytes) -> Result<()> {
        let path = self.dir(checkpoint_id).join(file);
        silt_rt::io_threads::files()
            .run(move || write_durably(&path, &bytes))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
    }

    async fn get(&self, checkpoint_id: u64, file: &str) -> Result<(Bytes, String)> {
        let path = self.dir(checkpoint_id).join(file);
        let origin = path.display().to_string();
        match std::fs::read(&path) {
            Ok(bytes) => Ok((Bytes::from(bytes), origin)),
            Err(e) => Err(Error::io(origin, e)),
        }
    }

    async fn scan(&self) -> Result<Vec<(u64, bool)>> {
        Ok(self
            .list_dirs()?
            .into_iter()
            .map(|(id, dir)| (id, dir.join(METADATA_FILE).is_file()))
            .collect())
    }

    async fn remove(&self, checkpoint_id: u64) -> Result<()> {
        let dir = self.dir(checkpoint_id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(dir.display().to_string(), e)),
        }
    }
}

/// Checkpoints in any object store (`file://`, `s3://`, …). A single `put` is atomic in
/// object stores, which is what makes `_metadata` all-or-nothing.
#[derive(Debug, Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
}

impl ObjectStoreStorage {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: ObjectPath) -> Self {
        ObjectStoreStorage { store, prefix }
    }

    fn path(&self, id: u64, file: &str) -> ObjectPath {
        self.prefix.clone().join(checkpoint_dir_name(id)).join(file)
    }
}

#[async_trait]
impl CheckpointFiles for ObjectStoreStorage {
    /// A single `put`, which object stores make atomic.
    async fn put(&self, checkpoint_id: u64, file: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(checkpoint_id, file);
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| Error::Storage(format!("writing {path}: {e}")))?;
        Ok(())
    }

    async fn get(&self, checkpoint_id: u64, file: &str) -> Result<(Bytes, String)> {
        let path = self.path(checkpoint_id, file);
        let reading = |e| Error::Storage(format!("reading {path}: {e}"));
        let bytes = self.store.get(&path).await.map_err(reading)?.bytes().await;
        Ok((bytes.map_err(reading)?, path.to_string()))
    }

    async fn scan(&self) -> Result<Vec<(u64, bool)>> {
        let objects: Vec<_> = self
            .store
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(|e| Error::Storage(format!("listing {}: {e}", self.prefix)))?;
        let mut found: std::collections::BTreeMap<u64, bool> = Default::default();
        let depth = self.prefix.parts().count();
        for meta in objects {
            let parts: Vec<_> = meta.location.parts().skip(depth).collect();
            let [dir, file] = parts.as_slice() else {
                continue;
            };
            if let Some(id) = parse_checkpoint_dir(dir.as_ref()) {
                let complete = found.entry(id).or_default();
                *complete |= file.as_ref() == METADATA_FILE;
            }
        }
        Ok(found.into_iter().collect())
    }

    async fn remove(&self, checkpoint_id: u64) -> Result<()> {
        let dir = self.prefix.clone().join(checkpoint_dir_name(checkpoint_id));
        let objects: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| Error::Storage(format!("listing {dir}: {e}")))?;
        for meta in objects {
            self.store
                .delete(&meta.location)
                .await
                .map_err(|e| Error::Storage(format!("deleting {}: {e}", meta.location)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(storage: Arc<dyn CheckpointStorage>) {
        assert!(storage.latest().await.unwrap().is_none());
        for id in [1u64, 2] {
            let a = storage
                .write_state(id, "src", 0, 2, Bytes::from(format!("a{id}")))
                .await
                .unwrap();
            let b = storage
                .write_state(id, "src", 1, 2, Bytes::from(format!("b{id}")))
                .await
                .unwrap();
            let metadata = CheckpointMetadata {
                checkpoint_id: id,
                job_name: "j".into(),
                created_at_ms: 0,
                is_final: false,
                states: vec![a, b],
            };
            storage.write_metadata(&metadata).await.unwrap();
        }
        // Checkpoint 3 crashed between its state and its metadata.
        storage
            .write_state(3, "src", 0, 2, Bytes::from_static(b"torn"))
            .await
            .unwrap();

        assert_eq!(storage.complete_checkpoints().await.unwrap(), vec![1, 2]);
        assert_eq!(storage.all_checkpoints().await.unwrap(), vec![1, 2, 3]);
        let latest = storage.latest().await.unwrap().unwrap();
        assert_eq!(latest.metadata.checkpoint_id, 2);
        assert_eq!(
            latest.vertex_states("src"),
            vec![
                Some(Bytes::from_static(b"a2")),
                Some(Bytes::from_static(b"b2"))
            ]
        );
        storage.discard(3).await.unwrap();
        storage.discard(1).await.unwrap();
        assert_eq!(storage.all_checkpoints().await.unwrap(), vec![2]);
    }

    #[tokio::test]
    async fn local_dir_ignores_incomplete_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        round_trip(storage_for(dir.path().to_str().unwrap()).unwrap()).await;
    }

    #[tokio::test]
    async fn object_store_url_ignores_incomplete_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        round_trip(storage_for(&url).unwrap()).await;
    }

    #[test]
    fn unsupported_url_names_the_fix() {
        let err = storage_for("nosuch://x/y").unwrap_err().to_string();
        assert!(
            err.contains("nosuch://x/y") && err.contains("use a local path"),
            "{err}"
        );
    }

    #[test]
    fn vertex_names_cannot_escape_the_checkpoint_directory() {
        assert_eq!(
            state_file_name("../../etc/passwd", 0),
            "______etc_passwd-0.state"
        );
    }
}
