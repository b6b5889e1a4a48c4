//! The key index of a primary-key lake table with deletion vectors: for every live key, the data
//! file and the row that hold it. A commit looks up only the keys it changes, so its cost grows
//! with the keys changed, not with the table. fjall (an LSM tree) keeps the index on local disk,
//! so its memory is bounded by fjall's cache whatever the table's size.
//!
//! **Contract:** the index describes exactly one version of one Delta table (`table_id` and
//! `version` in its meta keyspace, written in the same atomic batch as the entries). A commit
//! updates it after the Delta commit landed. Anything else (a crash in between, a commit by
//! another writer, an index written by another silt version) leaves a description that does
//! not match the table, and the caller rebuilds the index from the table: the key columns of
//! every file, minus the rows its deletion vector removes.
//!
//! Keys are `bucket (u32 big-endian)` + the key columns in arrow's row format; values are a file
//! id (u32) and a row position (u64), both big-endian. File paths are interned in the meta
//! keyspace and held in memory (one entry per data file).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use super::error::{Error, Result};

const KEYS: &str = "keys";
const META: &str = "meta";
const DESCRIBES: &[u8] = b"describes";
const FILE_PREFIX: &[u8] = b"file/";
/// Entries per fjall batch while rebuilding.
pub const REBUILD_BATCH: usize = 100_000;

/// Where a key's live row is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: String,
    pub row: u64,
}

pub struct KeyIndex {
    dir: PathBuf,
    db: Arc<Database>,
    keys: Keyspace,
    meta: Keyspace,
    converter: RowConverter,
    paths: Vec<String>,
    ids: HashMap<String, u32>,
    /// Deletes the directory on drop when the index is a throwaway (no directory configured).
    _temporary: Option<TempDir>,
}

/// One fjall database per directory in a process (fjall locks its directory): a restarted
/// committer reopens the index its predecessor, still being dropped, holds.
static OPEN: Mutex<Vec<(PathBuf, Weak<Database>)>> = Mutex::new(Vec::new());

/// The key indexes open in this process, in memory now: their block caches (each bounded by
/// their capacity) and memtables.
pub fn open_indexes_memory() -> KeyIndexMemory {
    let open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let mut memory = KeyIndexMemory::default();
    for db in open.iter().filter_map(|(_, db)| db.upgrade()) {
        memory.indexes += 1;
        memory.cache_bytes += db.cache_size();
        memory.cache_capacity_bytes += db.cache_capacity();
        memory.write_buffer_bytes += db.write_buffer_size();
    }
    memory
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KeyIndexMemory {
    pub indexes: u64,
    pub cache_bytes: u64,
    pub cache_capacity_bytes: u64,
    pub write_buffer_bytes: u64,
}

fn database(dir: &Path, cache_bytes: u64) -> Result<Arc<Database>> {
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|(_, db)| db.strong_count() > 0);
    if let Some(db) = open
        .iter()
        .find(|(d, _)| d == dir)
        .and_then(|(_, db)| db.upgrade())
    {
        return Ok(db);
    }
    let db = match open_database(dir, cache_bytes) {
        Err(e) if is_damage(&e) => {
            // The index is a cache of the lake: a damaged one (e.g. its version file written
            // on a full disk) is dropped and rebuilt from the table, not a reason to fail
            // every restart of the job.
            tracing::warn!(dir = %dir.display(), error = %e, "key index damaged; removing it to rebuild it from the table");
            std::fs::remove_dir_all(dir).map_err(|e| io_error(dir, e))?;
            open_database(dir, cache_bytes)
        }
        other => other,
    }
    .map_err(kv_error(dir))?;
    let db = Arc::new(db);
    open.push((dir.to_path_buf(), Arc::downgrade(&db)));
    Ok(db)
}

fn open_database(dir: &Path, cache_bytes: u64) -> fjall::Result<Database> {
    std::fs::create_dir_all(dir)?;
    silt_rt::kv_dir::clear_interrupted_creation(dir)?;
    Database::builder(dir)
        .cache_size(cache_bytes)
        .worker_threads(1)
        .max_journaling_size(JOURNAL_BYTES_MAX)
        .open()
}

/// Whether fjall refused to open a directory for what is in it (rather than for the disk or
/// another holder of its lock).
fn is_damage(e: &fjall::Error) -> bool {
    matches!(
        e,
        fjall::Error::InvalidVersion(_)
            | fjall::Error::JournalRecovery(_)
            | fjall::Error::InvalidTrailer
            | fjall::Error::InvalidTag(_)
            | fjall::Error::Decompress(_)
            | fjall::Error::Unrecoverable
    )
}

/// Block cache of one table's index by default (measured: 64 MiB keeps lookups of a 10M-row
/// lake within 2x of a 1M-row one). It fills up to this over time, whatever the table's size:
/// reads keep admitting blocks, also of tables compaction has replaced, until they are evicted.
pub const CACHE_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// fjall's minimum. Its default (512 MiB) kept most of a steady load's index in the journal
/// and in memtables: 239 MB on disk for 100k keys after 15 minutes, and growing memory.
const JOURNAL_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The keys keyspace's memtable is flushed at this size (fjall's default is 64 MiB; 16 MiB
/// made a sawtooth of minutes in a steady load's resident set).
const MEMTABLE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The meta keyspace takes a few keys rewritten at every commit; a memtable keeps each version
/// until it is flushed, so it is bounded small (fjall's default is 64 MiB).
fn meta_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default().max_memtable_size(1024 * 1024)
}

/// The keys keyspace is read by random point lookups: blocks are left uncompressed and carry
/// a hash index, so a lookup that misses the cache costs one block read and no decompression.
fn keys_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES_MAX)
        .data_block_compression_policy(fjall::config::CompressionPolicy::disabled())
        .data_block_hash_ratio_policy(fjall::config::HashRatioPolicy::all(8.0))
}

fn kv_error(dir: &Path) -> impl FnOnce(fjall::Error) -> Error + '_ {
    move |e| Error::Internal(format!("key index {}: {e}", dir.display()))
}

fn io_error(dir: &Path, e: std::io::Error) -> Error {
    Error::Internal(format!("key index {}: {e}", dir.display()))
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl KeyIndex {
    /// Opens the index in `dir` (a fresh temporary directory when `None`) for keys of
    /// `key_types`.
    /// `cache_bytes`: the block cache's capacity, when this opens the directory's database
    /// (a database already open in the process keeps its own).
    pub fn open(dir: Option<&Path>, key_types: &[DataType], cache_bytes: u64) -> Result<KeyIndex> {
        let (dir, temporary) = match dir {
            Some(d) => (d.to_path_buf(), None),
            None => {
                let d =
                    std::env::temp_dir().join(format!("silt-key-index-{}", uuid::Uuid::new_v4()));
                (d.clone(), Some(TempDir(d)))
            }
        };
        let db = database(&dir, cache_bytes)?;
        let keys = db.keyspace(KEYS, keys_options).map_err(kv_error(&dir))?;
        let meta = db.keyspace(META, meta_options).map_err(kv_error(&dir))?;
        let converter = RowConverter::new(
            key_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect(),
        )?;
        let mut index = KeyIndex {
            dir,
            db,
            keys,
            meta,
            converter,
            paths: Vec::new(),
            ids: HashMap::new(),
            _temporary: temporary,
        };
        index.load_paths()?;
        Ok(index)
    }

    fn load_paths(&mut self) -> Result<()> {
        self.paths.clear();
        self.ids.clear();
        for guard in self.meta.prefix(FILE_PREFIX) {
            let (k, v) = guard.into_inner().map_err(kv_error(&self.dir))?;
            let id = u32::from_be_bytes(
                k[FILE_PREFIX.len()..]
                    .try_into()
                    .map_err(|_| self.corrupt("a file id is not 4 bytes"))?,
            ) as usize;
            let path = String::from_utf8(v.to_vec())
                .map_err(|_| self.corrupt("a file path is not utf-8"))?;
            if id != self.paths.len() {
                return Err(self.corrupt("file ids are not dense"));
            }
            self.ids.insert(path.clone(), id as u32);
            self.paths.push(path);
        }
        Ok(())
    }

    fn corrupt(&self, why: &str) -> Error {
        Error::Internal(format!("key index {}: {why}", self.dir.display()))
    }

    /// The (Delta table id, version) the index describes, if any.
    pub fn describes(&self) -> Result<Option<(String, u64)>> {
        let Some(raw) = self.meta.get(DESCRIBES).map_err(kv_error(&self.dir))? else {
            return Ok(None);
        };
        let text = std::str::from_utf8(&raw).map_err(|_| self.corrupt("meta is not utf-8"))?;
        let parsed = text.split_once('@').and_then(|(id, rest)| {
            let (version, silt) = rest.split_once('@')?;
            (silt == env!("CARGO_PKG_VERSION")).then_some(())?;
            Some((id.to_string(), version.parse().ok()?))
        });
        Ok(parsed)
    }

    fn description(table_id: &str, version: u64) -> String {
        format!("{table_id}@{version}@{}", env!("CARGO_PKG_VERSION"))
    }

    /// Empties the index, to rebuild it. A crash halfway leaves an index that describes
    /// nothing, which is rebuilt again.
    pub fn clear(&mut self) -> Result<()> {
        let dir = self.dir.clone();
        self.db
            .delete_keyspace(self.meta.clone())
            .map_err(kv_error(&dir))?;
        self.db
            .delete_keyspace(self.keys.clone())
            .map_err(kv_error(&dir))?;
        self.keys = self
            .db
            .keyspace(KEYS, keys_options)
            .map_err(kv_error(&dir))?;
        self.meta = self
            .db
            .keyspace(META, meta_options)
            .map_err(kv_error(&dir))?;
        self.paths.clear();
        self.ids.clear();
        Ok(())
    }

    /// Encodes the keys of `columns` (the key columns, in order), row `i` in `buckets[i]`.
    pub fn encode(&self, buckets: &[i32], columns: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let rows = self.converter.convert_columns(columns)?;
        Ok(rows
            .iter()
            .zip(buckets)
            .map(|(row, &bucket)| {
                let mut key = Vec::with_capacity(4 + row.as_ref().len());
                key.extend_from_slice(&(bucket as u32).to_be_bytes());
                key.extend_from_slice(row.as_ref());
                key
            })
            .collect())
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Location>> {
        let Some(raw) = self.keys.get(key).map_err(kv_error(&self.dir))? else {
            return Ok(None);
        };
        if raw.len() != 12 {
            return Err(self.corrupt("an entry is not 12 bytes"));
        }
        let id = u32::from_be_bytes(raw[..4].try_into().expect("4 bytes")) as usize;
        let row = u64::from_be_bytes(raw[4..].try_into().expect("8 bytes"));
        let path = self
            .paths
            .get(id)
            .ok_or_else(|| self.corrupt("an entry names an unknown file id"))?;
        Ok(Some(Location {
            path: path.clone(),
            row,
        }))
    }

    /// Compacts the keys into one sorted run, after a rebuild: a rebuild's millions of inserts
    /// leave many overlapping tables, and every lookup would probe them all.
    pub fn compact(&self) -> Result<()> {
        self.keys.major_compact().map_err(kv_error(&self.dir))
    }

    /// Flushes the keys' memtable and compacts them into one sorted run, then answers their
    /// bytes on disk: the size the index settles to (measurements; `silt bench pk`).
    pub fn settle(&self) -> Result<u64> {
        self.keys
            .rotate_memtable_and_wait()
            .map_err(kv_error(&self.dir))?;
        self.compact()?;
        Ok(self.keys.disk_space())
    }

    /// Looks up many keys at once: in key order (neighbouring keys share blocks) and split over
    /// the machine's cores, since each miss of the block cache is a read.
    pub fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Location>>> {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let chunk = order.len().div_ceil(threads).max(1024);
        type Found = Result<Vec<(usize, Option<Location>)>>;
        let found: Vec<Found> = std::thread::scope(|scope| {
            let handles: Vec<_> = order
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|&i| Ok((i, self.get(&keys[i])?)))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(self.corrupt("a lookup thread panicked")))
                })
                .collect()
        });
        let mut out: Vec<Option<Location>> = vec![None; keys.len()];
        for part in found {
            for (i, location) in part? {
                out[i] = location;
            }
        }
        Ok(out)
    }

    /// Starts a batch of changes; nothing is visible until [`IndexBatch::commit`].
    pub fn batch(&mut self) -> IndexBatch<'_> {
        IndexBatch {
            batch: self.db.batch(),
            index: self,
            entries: 0,
        }
    }
}

/// Changes to the index, applied atomically together with the version they bring it to.
pub struct IndexBatch<'a> {
    index: &'a mut KeyIndex,
    batch: fjall::OwnedWriteBatch,
    entries: usize,
}

impl IndexBatch<'_> {
    pub fn insert(&mut self, key: &[u8], path: &str, row: u64) {
        let id = match self.index.ids.get(path) {
            Some(&id) => id,
            None => {
                let id = self.index.paths.len() as u32;
                let mut k = FILE_PREFIX.to_vec();
                k.extend_from_slice(&id.to_be_bytes());
                self.batch.insert(&self.index.meta, k, path.as_bytes());
                self.index.ids.insert(path.to_string(), id);
                self.index.paths.push(path.to_string());
                id
            }
        };
        let mut value = [0u8; 12];
        value[..4].copy_from_slice(&id.to_be_bytes());
        value[4..].copy_from_slice(&row.to_be_bytes());
        self.batch.insert(&self.index.keys, key, value);
        self.entries += 1;
    }

    pub fn encode(&self, buckets: &[i32], columns: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        self.index.encode(buckets, columns)
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.batch.remove(&self.index.keys, key);
        self.entries += 1;
    }

    pub fn len(&self) -> usize {
        self.entries
    }

    /// Commits the entries so far without a description (a rebuild in progress), and goes on.
    pub fn flush(&mut self) -> Result<()> {
        let batch = std::mem::replace(&mut self.batch, self.index.db.batch());
        batch.commit().map_err(kv_error(&self.index.dir))?;
        self.entries = 0;
        Ok(())
    }

    /// Commits the changes; the index then describes `version` of `table_id`, or nothing
    /// (`None`: the caller knows it missed commits and the next use rebuilds).
    pub fn commit(mut self, describes: Option<(&str, u64)>) -> Result<()> {
        match describes {
            Some((table_id, version)) => self.batch.insert(
                &self.index.meta,
                DESCRIBES,
                KeyIndex::description(table_id, version).as_bytes(),
            ),
            None => self.batch.remove(&self.index.meta, DESCRIBES),
        }
        self.batch.commit().map_err(kv_error(&self.index.dir))
    }
}

#[cfg(test)]
mod damage_tests {
    use super::*;

    /// Regression (fault trials, seed 1177 of `silt bench trials --seed 1000`): a nearly full
    /// disk left the index's fjall `version` file empty; every open then failed with
    /// `InvalidVersion`, the tiering job restarted forever and the lake never caught up. A
    /// damaged index is now removed and starts empty (the commit path rebuilds it).
    #[test]
    fn a_damaged_index_is_removed_and_opened_empty() {
        let dir = tempfile::tempdir().unwrap();
        let index_dir = dir.path().join("index");
        let types = [DataType::Int64];
        drop(KeyIndex::open(Some(&index_dir), &types, CACHE_BYTES_DEFAULT).unwrap());
        std::fs::write(index_dir.join("version"), b"").unwrap();
        let reopened = KeyIndex::open(Some(&index_dir), &types, CACHE_BYTES_DEFAULT);
        assert!(reopened.is_ok(), "{:?}", reopened.err());
    }

    /// Regression (CI, `up_crash::a_kill_after_the_delta_commit_before_the_registry_update_is_repaired`):
    /// a SIGKILL while fjall created the index's database left its lock file, its empty
    /// `keyspaces` folder and its preallocated first journal, but no `version` marker. fjall
    /// takes a directory without the marker for a new one and creates `0.jnl` with
    /// `create_new`, which failed with `AlreadyExists` at every restart of the job.
    #[test]
    fn an_index_killed_while_fjall_created_it_is_created_again() {
        let dir = tempfile::tempdir().unwrap();
        let index_dir = dir.path().join("index");
        std::fs::create_dir_all(index_dir.join("keyspaces")).unwrap();
        std::fs::write(index_dir.join("lock"), b"").unwrap();
        std::fs::File::create(index_dir.join("0.jnl"))
            .unwrap()
            .set_len(1024 * 1024)
            .unwrap();
        let types = [DataType::Int64];
        let reopened = KeyIndex::open(Some(&index_dir), &types, CACHE_BYTES_DEFAULT);
        assert!(reopened.is_ok(), "{:?}", reopened.err());
    }
}
