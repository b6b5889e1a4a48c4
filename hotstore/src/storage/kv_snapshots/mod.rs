//! The kv snapshots of one bucket on disk ([`BucketSnapshots`]): each a read-only RocksDB
//! directory ([`super::rocksdb_snapshot`]) holding the kv tablet's rows as of one applied log
//! offset.
//!
//! Layout, under the bucket's snapshot directory:
//! ```text
//! snap-<id>/            a published snapshot: CURRENT, MANIFEST-000001, *.sst, SILT-SNAPSHOT
//! .tmp-snap-<id>/       one being written (garbage after a crash, removed at open)
//! .deleting-snap-<id>/  one being deleted (likewise)
//! ```
//! `SILT-SNAPSHOT` is silt's own record of a snapshot: its log offset, row count and files
//! with their sizes, CRC-checked; the clients never see it (RocksDB ignores the name).
//!
//! Contract:
//! - A snapshot is published by one rename, after every file and the directory were fsynced:
//!   a crash leaves either no `snap-<id>` or a whole one. At open, anything else is removed,
//!   and so is a `snap-<id>` whose record is damaged or whose files differ from it.
//! - Ids increase: the next is above every published one, so a bucket that keeps its latest
//!   snapshot (the retention of [`BucketSnapshots::retain`] always does) never reuses an id,
//!   across restarts too. Log offsets never go back from one snapshot to the next.
//! - One snapshot of a bucket is written at a time; reads of the published ones go on.
//! - Once [`BucketSnapshots::drop_all`] ran (the table or partition was dropped), nothing is
//!   published again and the directory is gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::rocksdb_snapshot::{self, DirWriter, SnapshotFile, WriterConfig};
use super::{Error, Result, io_error};

const RECORD_FILE: &str = "SILT-SNAPSHOT";
const RECORD_MAGIC: &[u8; 8] = b"SILTKVS1";
const PUBLISHED_PREFIX: &str = "snap-";
const WRITING_PREFIX: &str = ".tmp-snap-";
const DELETING_PREFIX: &str = ".deleting-snap-";
/// Files a record may list (tables of 64 MiB: 64 TiB of kv per bucket).
const RECORD_FILES_MAX: u32 = 1 << 20;

/// A published snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSnapshot {
    pub id: i64,
    /// The next changelog offset: the snapshot holds the kv state after offsets below it.
    pub log_offset: i64,
    pub rows: u64,
    /// Its directory (absolute when the bucket's directory is).
    pub dir: PathBuf,
    /// The RocksDB files, tables first, then MANIFEST and CURRENT.
    pub files: Vec<SnapshotFile>,
}

#[derive(Debug, Default)]
struct State {
    published: BTreeMap<i64, Arc<KvSnapshot>>,
    next_id: i64,
    dropped: bool,
}

/// The kv snapshots of one bucket (see the module docs). `Send + Sync`.
#[derive(Debug)]
pub struct BucketSnapshots {
    dir: PathBuf,
    state: Mutex<State>,
    /// Held while a snapshot is written, so a bucket writes one at a time.
    writing: Mutex<()>,
}

impl BucketSnapshots {
    /// Opens (creating) `dir`: removes what was never published or half deleted, and reads
    /// every published snapshot's record.
    pub fn open(dir: &Path) -> Result<BucketSnapshots> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let mut state = State::default();
        for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
            let path = entry.map_err(io_error(dir))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let id = name
                .strip_prefix(PUBLISHED_PREFIX)
                .and_then(|id| id.parse::<i64>().ok());
            let snapshot = id.filter(|id| *id >= 0).map(|id| read_record(&path, id));
            match snapshot {
                Some(Ok(snapshot)) => {
                    state.published.insert(snapshot.id, Arc::new(snapshot));
                }
                Some(Err(error)) => {
                    tracing::warn!(dir = %path.display(), %error, "removing a damaged kv snapshot");
                    remove_all(&path)?;
                }
                None => remove_all(&path)?,
            }
        }
        state.next_id = state.published.keys().next_back().map_or(0, |id| id + 1);
        Ok(BucketSnapshots {
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
            writing: Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn latest(&self) -> Option<Arc<KvSnapshot>> {
        self.state().published.values().next_back().cloned()
    }

    pub fn get(&self, id: i64) -> Option<Arc<KvSnapshot>> {
        self.state().published.get(&id).cloned()
    }

    /// The published ids, oldest first.
    pub fn ids(&self) -> Vec<i64> {
        self.state().published.keys().copied().collect()
    }

    /// Holds the bucket's writing turn: a caller that must read the kv state and write it as
    /// one step ([`BucketSnapshots::write`] under it) takes it first.
    pub fn writing_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `entries` (increasing keys, as a kv tablet iterates) as the next snapshot at
    /// `log_offset`, fsyncs and publishes it. The caller holds [`BucketSnapshots::writing_turn`].
    /// On any error nothing is published and the partial files are removed.
    pub fn write(
        &self,
        _turn: &std::sync::MutexGuard<'_, ()>,
        log_offset: i64,
        entries: impl Iterator<Item = Result<(Bytes, Bytes)>>,
        config: WriterConfig,
    ) -> Result<Arc<KvSnapshot>> {
        let id = {
            let mut state = self.state();
            let latest = state.published.values().next_back().map(|s| s.log_offset);
            if state.dropped || latest.is_some_and(|latest| log_offset < latest) {
                return Err(Error::SnapshotRefused {
                    dir: self.dir.clone(),
                    reason: format!(
                        "the bucket was dropped ({}) or its latest snapshot is at offset {latest:?}, past {log_offset}",
                        state.dropped
                    ),
                });
            }
            state.next_id += 1;
            state.next_id - 1
        };
        let writing = self.dir.join(format!("{WRITING_PREFIX}{id}"));
        let written = write_unpublished(&writing, id, log_offset, entries, config)
            .and_then(|snapshot| self.publish(&writing, snapshot));
        if written.is_err() {
            let _ = remove_all(&writing);
        }
        written
    }

    fn publish(&self, writing: &Path, mut snapshot: KvSnapshot) -> Result<Arc<KvSnapshot>> {
        let published = self.dir.join(format!("{PUBLISHED_PREFIX}{}", snapshot.id));
        let mut state = self.state();
        if state.dropped {
            return Err(Error::SnapshotRefused {
                dir: self.dir.clone(),
                reason: "the bucket was dropped while its snapshot was written".into(),
            });
        }
        std::fs::rename(writing, &published).map_err(io_error(&published))?;
        super::segment::sync_dir(&self.dir)?;
        snapshot.dir = published;
        let snapshot = Arc::new(snapshot);
        state.published.insert(snapshot.id, snapshot.clone());
        Ok(snapshot)
    }

    /// Deletes every published snapshot but the newest `retained` (at least 1) and those
    /// `keep` names; answers the ids deleted.
    pub fn retain(&self, retained: usize, keep: impl Fn(i64) -> bool) -> Result<Vec<i64>> {
        let doomed: Vec<Arc<KvSnapshot>> = {
            let mut state = self.state();
            let ids: Vec<i64> = state.published.keys().copied().collect();
            let newest = ids.len().saturating_sub(retained.max(1));
            let doomed: Vec<i64> = ids[..newest]
                .iter()
                .copied()
                .filter(|id| !keep(*id))
                .collect();
            doomed
                .iter()
                .filter_map(|id| state.published.remove(id))
                .collect()
        };
        for snapshot in &doomed {
            let deleting = self.dir.join(format!("{DELETING_PREFIX}{}", snapshot.id));
            std::fs::rename(&snapshot.dir, &deleting).map_err(io_error(&snapshot.dir))?;
            remove_all(&deleting)?;
        }
        Ok(doomed.iter().map(|s| s.id).collect())
    }

    /// Forgets every snapshot and deletes the directory; nothing is published afterwards.
    pub fn drop_all(&self) -> Result<()> {
        let mut state = self.state();
        state.dropped = true;
        state.published.clear();
        remove_all(&self.dir)
    }
}

fn remove_all(path: &Path) -> Result<()> {
    let removed = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            path: path.to_path_buf(),
            source: error,
        }),
        _ => Ok(()),
    }
}

/// Writes the RocksDB files and the record into `dir` (created fresh), all fsynced.
fn write_unpublished(
    dir: &Path,
    id: i64,
    log_offset: i64,
    entries: impl Iterator<Item = Result<(Bytes, Bytes)>>,
    config: WriterConfig,
) -> Result<KvSnapshot> {
    remove_all(dir)?;
    // Not `create_dir_all`: a bucket dropped meanwhile has no directory, and must not get one
    // back.
    std::fs::create_dir(dir).map_err(io_error(dir))?;
    let mut writer = DirWriter::create(dir, config);
    for entry in entries {
        let (key, value) = entry?;
        writer.add(&key, &value)?;
    }
    let written = writer.finish()?;
    let snapshot = KvSnapshot {
        id,
        log_offset,
        rows: written.entries,
        dir: dir.to_path_buf(),
        files: written.files,
    };
    let path = dir.join(RECORD_FILE);
    let file = std::fs::File::create(&path).map_err(io_error(&path))?;
    std::os::unix::fs::FileExt::write_all_at(&file, &encode_record(&snapshot), 0)
        .map_err(io_error(&path))?;
    super::durability::sync_data(&file, &path).map_err(io_error(&path))?;
    super::segment::sync_dir(dir)?;
    Ok(snapshot)
}

fn encode_record(snapshot: &KvSnapshot) -> Vec<u8> {
    let mut out = RECORD_MAGIC.to_vec();
    out.extend_from_slice(&snapshot.id.to_le_bytes());
    out.extend_from_slice(&snapshot.log_offset.to_le_bytes());
    out.extend_from_slice(&snapshot.rows.to_le_bytes());
    out.extend_from_slice(&(snapshot.files.len() as u32).to_le_bytes());
    for file in &snapshot.files {
        out.extend_from_slice(&(file.name.len() as u16).to_le_bytes());
        out.extend_from_slice(file.name.as_bytes());
        out.extend_from_slice(&file.bytes.to_le_bytes());
    }
    super::with_crc(out)
}

/// The published snapshot `id` in `dir`: its record, checked against the files on disk.
fn read_record(dir: &Path, id: i64) -> Result<KvSnapshot> {
    let path = dir.join(RECORD_FILE);
    let bytes = std::fs::read(&path).map_err(io_error(&path))?;
    let corrupt = |reason: &str| Error::CorruptSnapshot {
        path: path.clone(),
        reason: reason.to_string(),
    };
    let snapshot = super::checked_body(&bytes)
        .and_then(|body| decode_record(body, dir))
        .ok_or_else(|| corrupt("a torn or damaged record"))?;
    if snapshot.id != id {
        return Err(corrupt("the record names another snapshot id"));
    }
    for file in &snapshot.files {
        let on_disk = std::fs::metadata(dir.join(&file.name))
            .map(|m| m.len())
            .ok();
        if on_disk != Some(file.bytes) {
            return Err(corrupt(&format!(
                "{} has {on_disk:?} bytes on disk, the record says {}",
                file.name, file.bytes
            )));
        }
    }
    Ok(snapshot)
}

fn decode_record(body: &[u8], dir: &Path) -> Option<KvSnapshot> {
    let mut rest = body.strip_prefix(RECORD_MAGIC.as_slice())?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (taken, after) = rest.split_at_checked(n)?;
        rest = after;
        Some(taken)
    };
    let id = i64::from_le_bytes(take(8)?.try_into().ok()?);
    let log_offset = i64::from_le_bytes(take(8)?.try_into().ok()?);
    let rows = u64::from_le_bytes(take(8)?.try_into().ok()?);
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    if count > RECORD_FILES_MAX {
        return None;
    }
    let mut files = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?);
        let name = std::str::from_utf8(take(usize::from(len))?).ok()?;
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return None;
        }
        let bytes = u64::from_le_bytes(take(8)?.try_into().ok()?);
        files.push(SnapshotFile {
            name: name.to_string(),
            bytes,
        });
    }
    (rest.is_empty() && log_offset >= 0).then(|| KvSnapshot {
        id,
        log_offset,
        rows,
        dir: dir.to_path_buf(),
        files,
    })
}

/// The entries of a published snapshot, read back with silt's reader (tests, and checks).
pub fn read_entries(snapshot: &KvSnapshot) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let reader = rocksdb_snapshot::SnapshotReader::open(&snapshot.dir)?;
    let entries: rocksdb_snapshot::Result<Vec<_>> = reader.entries().collect();
    Ok(entries?)
}

#[cfg(test)]
mod tests;
