//! A writer (and a reader) of read-only RocksDB directories: how silt hands a kv snapshot to
//! the Fluss clients, which open it with RocksDB (the Java client and Flink's connector link
//! frocksdbjni 6.20.3) and iterate it in key order, decoding only the values.
//!
//! Written in Rust from the formats (RocksDB's wiki and file-format headers), not linked
//! against RocksDB: a C++ RocksDB costs long builds on silt's 2-core machines, and its newer
//! defaults (format_version 6, XXH3 checksums) are unreadable by the clients' 6.20.3. What is
//! written is the least a read-only open accepts:
//!
//! ```text
//! CURRENT           "MANIFEST-000001\n"
//! MANIFEST-000001   one log record: one version edit (comparator leveldb.BytewiseComparator,
//!                   log number 0, next file number, last sequence 0, a NewFile4 per table)
//! 000002.sst ...    block-based tables (format_version 5, CRC32C, no compression), level 6,
//!                   in key order and never overlapping; none for an empty snapshot
//! ```
//! Every key is a value at sequence number 0, so the client's read at the MANIFEST's last
//! sequence (0) sees all of them. No WAL, OPTIONS, IDENTITY or LOCK file: a read-only open
//! needs none of them.
//!
//! Contract: [`DirWriter`] takes keys in strictly increasing bytewise order (a kv tablet's
//! iteration order) and refuses anything else; every file is fsynced before
//! [`DirWriter::finish`] answers, and the caller publishes the directory (fsync of the
//! directory, rename). [`SnapshotReader`] reads what the writer wrote, checking every
//! checksum, and refuses what it did not write.

mod block;
mod coding;
mod manifest;
mod sst;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use manifest::{NewFile, VersionEdit};
use sst::{INTERNAL_KEY_SUFFIX, SstReader, SstWriter};

/// The file naming the MANIFEST; RocksDB opens it first.
pub const CURRENT: &str = "CURRENT";
const MANIFEST_NUMBER: u64 = 1;
const FIRST_TABLE_NUMBER: u64 = 2;
/// Every table sits on the last of RocksDB's default seven levels, where tables may not
/// overlap (they do not: each holds the keys after the one before).
const TABLE_LEVEL: u32 = 6;
/// RocksDB's 7 levels (`num_levels`): a level at or above it is refused.
const LEVELS: u32 = 7;
/// The MANIFEST a reader reads whole: one edit of a few hundred bytes per table.
const MANIFEST_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// The file name of a table: `%06u.sst`.
fn table_name(number: u64) -> String {
    format!("{number:06}.sst")
}

fn manifest_name(number: u64) -> String {
    format!("MANIFEST-{number:06}")
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o error on kv snapshot file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("kv snapshot file {path} is not what silt writes: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "kv snapshot keys must come in increasing order, but entry {entry} of {path} is not \
         above the one before (a bug in silt)"
    )]
    KeysOutOfOrder { path: PathBuf, entry: u64 },
}

impl Error {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Sizes of what [`DirWriter`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterConfig {
    /// A table is closed once it reaches this size (RocksDB's default target, 64 MiB).
    pub table_bytes_target: u64,
    /// A data block is closed once it reaches this size (RocksDB's default, 4 KiB).
    pub block_bytes_target: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            table_bytes_target: 64 * 1024 * 1024,
            block_bytes_target: 4096,
        }
    }
}

/// One file of a written directory: its RocksDB name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub name: String,
    pub bytes: u64,
}

/// What [`DirWriter::finish`] wrote: every file (tables, MANIFEST, CURRENT) and the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenDir {
    pub files: Vec<SnapshotFile>,
    pub entries: u64,
}

/// Writes a RocksDB directory from entries in increasing key order, streaming: it holds one
/// data block and one table's index in memory.
pub struct DirWriter {
    dir: PathBuf,
    config: WriterConfig,
    table: Option<(u64, SstWriter)>,
    tables: Vec<NewFile>,
    next_number: u64,
    entries: u64,
    last_key: Option<Vec<u8>>,
}

impl DirWriter {
    /// Writes into `dir`, an existing empty directory.
    pub fn create(dir: &Path, config: WriterConfig) -> DirWriter {
        DirWriter {
            dir: dir.to_path_buf(),
            config,
            table: None,
            tables: Vec::new(),
            next_number: FIRST_TABLE_NUMBER,
            entries: 0,
            last_key: None,
        }
    }

    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.last_key.as_deref().is_some_and(|last| key <= last) {
            return Err(Error::KeysOutOfOrder {
                path: self.dir.clone(),
                entry: self.entries,
            });
        }
        if self.table.is_none() {
            let number = self.next_number;
            self.next_number += 1;
            let path = self.dir.join(table_name(number));
            self.table = Some((
                number,
                SstWriter::create(&path, self.config.block_bytes_target)?,
            ));
        }
        if let Some((_, table)) = &mut self.table {
            table.add(key, value)?;
            if table.bytes_estimate() >= self.config.table_bytes_target {
                self.finish_table()?;
            }
        }
        self.entries += 1;
        let last = self.last_key.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(key);
        Ok(())
    }

    fn finish_table(&mut self) -> Result<()> {
        let Some((number, table)) = self.table.take() else {
            return Ok(());
        };
        if let Some(summary) = table.finish()? {
            let internal = |user_key: &[u8]| [user_key, &INTERNAL_KEY_SUFFIX].concat();
            self.tables.push(NewFile {
                level: TABLE_LEVEL,
                number,
                file_bytes: summary.file_bytes,
                smallest: internal(&summary.smallest_user_key),
                largest: internal(&summary.largest_user_key),
                smallest_seqno: 0,
                largest_seqno: 0,
            });
        }
        Ok(())
    }

    /// Closes the last table and writes the MANIFEST and CURRENT, each fsynced.
    pub fn finish(mut self) -> Result<WrittenDir> {
        self.finish_table()?;
        let edit = VersionEdit {
            comparator: sst::COMPARATOR.to_string(),
            log_number: 0,
            next_file_number: self.next_number,
            last_sequence: 0,
            files: self.tables.clone(),
        };
        let manifest = manifest_name(MANIFEST_NUMBER);
        let manifest_path = self.dir.join(&manifest);
        let record = edit.encode().map_err(|reason| Error::Corrupt {
            path: manifest_path.clone(),
            reason,
        })?;
        let manifest_bytes = write_synced(&manifest_path, &manifest::frame_records(&[record]))?;
        let current = format!("{manifest}\n");
        let current_bytes = write_synced(&self.dir.join(CURRENT), current.as_bytes())?;
        let mut files: Vec<SnapshotFile> = self
            .tables
            .iter()
            .map(|t| SnapshotFile {
                name: table_name(t.number),
                bytes: t.file_bytes,
            })
            .collect();
        files.push(SnapshotFile {
            name: manifest,
            bytes: manifest_bytes,
        });
        files.push(SnapshotFile {
            name: CURRENT.to_string(),
            bytes: current_bytes,
        });
        Ok(WrittenDir {
            files,
            entries: self.entries,
        })
    }
}

/// Creates `path` (it must not exist) holding `bytes`, fsynced; answers its length.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<u64> {
    let mut file = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(Error::io(path))?;
    file.write_all(bytes).map_err(Error::io(path))?;
    crate::storage::durability::sync_data(&file, path).map_err(Error::io(path))?;
    Ok(bytes.len() as u64)
}

/// Reads a directory [`DirWriter`] wrote: CURRENT, the MANIFEST's edit, then the tables'
/// entries in key order, one data block at a time.
pub struct SnapshotReader {
    dir: PathBuf,
    tables: Vec<NewFile>,
}

impl SnapshotReader {
    /// Reads CURRENT and the MANIFEST and checks the edit: the bytewise comparator, last
    /// sequence 0, tables on a level below 7 at sequence 0, in key order without overlap.
    pub fn open(dir: &Path) -> Result<SnapshotReader> {
        let current_path = dir.join(CURRENT);
        let current = std::fs::read(&current_path).map_err(Error::io(&current_path))?;
        let manifest = std::str::from_utf8(&current)
            .ok()
            .and_then(|text| text.strip_suffix('\n'))
            .filter(|name| name.starts_with("MANIFEST-") && !name.contains('/'))
            .ok_or_else(|| Error::Corrupt {
                path: current_path.clone(),
                reason: "not a MANIFEST name ending in a newline".into(),
            })?;
        let manifest_path = dir.join(manifest);
        let corrupt = |reason: String| Error::Corrupt {
            path: manifest_path.clone(),
            reason,
        };
        let len = std::fs::metadata(&manifest_path)
            .map_err(Error::io(&manifest_path))?
            .len();
        if len > MANIFEST_BYTES_MAX {
            return Err(corrupt(format!(
                "{len} bytes, more than {MANIFEST_BYTES_MAX}"
            )));
        }
        let bytes = std::fs::read(&manifest_path).map_err(Error::io(&manifest_path))?;
        let records = manifest::read_records(&bytes).map_err(&corrupt)?;
        let [record] = records.as_slice() else {
            return Err(corrupt(format!(
                "{} records; silt writes one",
                records.len()
            )));
        };
        let edit = VersionEdit::decode(record).map_err(&corrupt)?;
        check_edit(&edit).map_err(corrupt)?;
        Ok(SnapshotReader {
            dir: dir.to_path_buf(),
            tables: edit.files,
        })
    }

    /// The table files, in key order.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(|t| table_name(t.number)).collect()
    }

    /// Every entry, in key order: (key, value).
    pub fn entries(&self) -> Entries<'_> {
        Entries {
            reader: self,
            next_table: 0,
            table: None,
            block: Vec::new().into_iter(),
            failed: false,
        }
    }
}

fn check_edit(edit: &VersionEdit) -> Result<(), String> {
    if edit.comparator != sst::COMPARATOR || edit.last_sequence != 0 {
        return Err(format!(
            "comparator {:?} and last sequence {}; silt writes {} and 0",
            edit.comparator,
            edit.last_sequence,
            sst::COMPARATOR
        ));
    }
    for (n, table) in edit.files.iter().enumerate() {
        let key_ok = |key: &[u8]| key.ends_with(&INTERNAL_KEY_SUFFIX);
        let in_order = n == 0
            || sst::user_key_of(&edit.files[n - 1].largest) < sst::user_key_of(&table.smallest);
        let ok = table.level < LEVELS
            && table.smallest_seqno == 0
            && table.largest_seqno == 0
            && table.number < edit.next_file_number
            && key_ok(&table.smallest)
            && key_ok(&table.largest)
            && sst::user_key_of(&table.smallest) <= sst::user_key_of(&table.largest)
            && in_order;
        if !ok {
            return Err(format!("table {n} ({table:?}) is not what silt writes"));
        }
    }
    Ok(())
}

/// The entries of a [`SnapshotReader`], reading one data block at a time. After an error it
/// ends.
pub struct Entries<'a> {
    reader: &'a SnapshotReader,
    next_table: usize,
    /// The open table and its next data block.
    table: Option<(SstReader, usize)>,
    block: std::vec::IntoIter<block::Entry>,
    failed: bool,
}

impl Entries<'_> {
    /// The next data block's entries, opening the next table when one is read; `None` after
    /// the last.
    fn next_block(&mut self) -> Result<Option<Vec<block::Entry>>> {
        loop {
            if let Some((table, next)) = &mut self.table {
                if *next < table.data_blocks() {
                    *next += 1;
                    return table.data_block(*next - 1).map(Some);
                }
                self.table = None;
            }
            let Some(meta) = self.reader.tables.get(self.next_table) else {
                return Ok(None);
            };
            self.next_table += 1;
            let path = self.reader.dir.join(table_name(meta.number));
            self.table = Some((SstReader::open(&path, meta.file_bytes)?, 0));
        }
    }
}

impl Iterator for Entries<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(entry) = self.block.next() {
                return Some(Ok(entry));
            }
            match self.next_block() {
                Ok(Some(entries)) => self.block = entries.into_iter(),
                Ok(None) => return None,
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
