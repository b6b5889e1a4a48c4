//! A block-based table file (RocksDB's default SST format) as silt writes it: uncompressed
//! blocks with CRC32C trailers, a binary-search index of full internal keys and full block
//! handles, a properties block, a meta-index naming it, and the footer of format_version 5.
//!
//! ```text
//! [data block]* [index block] [properties block] [meta-index block] [footer, 53 bytes]
//! block   := contents | compression type (0 = none) | fixed32 masked CRC32C(contents + type)
//! footer  := checksum type (1 = CRC32C) | meta-index handle | index handle | zero padding
//!            to 41 bytes | fixed32 format_version | fixed64 magic 0x88e241b785f4cff7
//! handle  := varint64 offset | varint64 size (without the trailer)
//! ```
//! Keys inside the table are internal keys: the user key, then 8 little-endian bytes of
//! `(sequence number << 8) | value type`. Every key silt writes has sequence number 0 and type
//! 1 (a value), so a reader at any snapshot sees all of them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::block::{self, BlockBuilder, Entry};
use super::coding::{Cursor, masked_crc_of, put_fixed32, put_fixed64, put_varint64};
use super::{Error, Result};

/// The table format version silt writes: RocksDB 6.20 (the Java client's) reads 0..=5, and
/// current RocksDB reads 2 and up.
pub(crate) const FORMAT_VERSION: u32 = 5;
pub(crate) const FORMAT_VERSIONS_READ: std::ops::RangeInclusive<u32> = 2..=5;
/// The magic number closing a block-based table.
pub(crate) const TABLE_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
pub(crate) const FOOTER_BYTES: u64 = 53;
/// Checksum type 1: CRC32C (RocksDB 6.20 knows 0-3; 4, XXH3, is newer RocksDB's default).
pub(crate) const CHECKSUM_CRC32C: u8 = 1;
const NO_COMPRESSION: u8 = 0;
pub(crate) const BLOCK_TRAILER_BYTES: u64 = 5;
/// RocksDB's defaults: a restart point every 16 data entries, every index entry whole.
const DATA_RESTART_INTERVAL: usize = 16;
const INDEX_RESTART_INTERVAL: usize = 1;
const META_RESTART_INTERVAL: usize = 1;
pub(crate) const PROPERTIES_BLOCK: &str = "rocksdb.properties";
pub(crate) const COMPARATOR: &str = "leveldb.BytewiseComparator";
/// Sequence number 0, value type 1, as `fixed64((seqno << 8) | type)`.
pub(crate) const INTERNAL_KEY_SUFFIX: [u8; 8] = [1, 0, 0, 0, 0, 0, 0, 0];
/// The largest a block handle encodes to (two varint64s), twice: the footer's handle space.
const FOOTER_HANDLES_BYTES: usize = 40;

/// Where a block lies in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockHandle {
    pub(crate) offset: u64,
    /// Without the 5-byte trailer.
    pub(crate) size: u64,
}

impl BlockHandle {
    pub(crate) fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    pub(crate) fn decode(cursor: &mut Cursor<'_>) -> Option<BlockHandle> {
        Some(BlockHandle {
            offset: cursor.varint64()?,
            size: cursor.varint64()?,
        })
    }
}

/// What a finished table holds: what its MANIFEST entry needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SstSummary {
    pub(crate) file_bytes: u64,
    pub(crate) smallest_user_key: Vec<u8>,
    pub(crate) largest_user_key: Vec<u8>,
    pub(crate) entries: u64,
}

/// Counts kept for the properties block.
#[derive(Debug, Default)]
struct Counts {
    entries: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    data_blocks: u64,
}

/// Writes one table, streaming: keys must arrive in strictly increasing order.
pub(crate) struct SstWriter {
    path: PathBuf,
    out: BufWriter<File>,
    offset: u64,
    block_bytes_target: usize,
    data: BlockBuilder,
    index: BlockBuilder,
    /// The internal key added last (the index key of the data block it closes).
    last_key: Vec<u8>,
    smallest_user_key: Option<Vec<u8>>,
    counts: Counts,
}

impl SstWriter {
    /// Creates the file (it must not exist).
    pub(crate) fn create(path: &Path, block_bytes_target: usize) -> Result<SstWriter> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(Error::io(path))?;
        Ok(SstWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(64 * 1024, file),
            offset: 0,
            block_bytes_target: block_bytes_target.max(1),
            data: BlockBuilder::new(DATA_RESTART_INTERVAL),
            index: BlockBuilder::new(INDEX_RESTART_INTERVAL),
            last_key: Vec::new(),
            smallest_user_key: None,
            counts: Counts::default(),
        })
    }

    /// The bytes written so far plus the open data block: where the file stands, for rolling
    /// to the next one.
    pub(crate) fn bytes_estimate(&self) -> u64 {
        self.offset + self.data.size_estimate() as u64
    }

    /// Adds a user key and its value; the key must be above the previous one.
    pub(crate) fn add(&mut self, user_key: &[u8], value: &[u8]) -> Result<()> {
        let mut key = Vec::with_capacity(user_key.len() + INTERNAL_KEY_SUFFIX.len());
        key.extend_from_slice(user_key);
        key.extend_from_slice(&INTERNAL_KEY_SUFFIX);
        if self.counts.entries > 0 && user_key <= user_key_of(&self.last_key) {
            return Err(Error::KeysOutOfOrder {
                path: self.path.clone(),
                entry: self.counts.entries,
            });
        }
        self.data
            .add(&key, value)
            .map_err(|reason| self.corrupt(reason))?;
        self.smallest_user_key
            .get_or_insert_with(|| user_key.to_vec());
        self.counts.entries += 1;
        self.counts.raw_key_bytes += key.len() as u64;
        self.counts.raw_value_bytes += value.len() as u64;
        self.last_key = key;
        if self.data.size_estimate() >= self.block_bytes_target {
            self.flush_data_block()?;
        }
        Ok(())
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }

    /// Writes the open data block and indexes it under its last key.
    fn flush_data_block(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let contents = self.data.finish();
        let handle = self.write_block(&contents)?;
        let mut value = Vec::new();
        handle.encode_to(&mut value);
        let last_key = std::mem::take(&mut self.last_key);
        self.index
            .add(&last_key, &value)
            .map_err(|reason| self.corrupt(reason))?;
        self.last_key = last_key;
        self.counts.data_blocks += 1;
        Ok(())
    }

    /// Appends a block and its trailer; answers its handle.
    fn write_block(&mut self, contents: &[u8]) -> Result<BlockHandle> {
        let handle = BlockHandle {
            offset: self.offset,
            size: contents.len() as u64,
        };
        let mut trailer = vec![NO_COMPRESSION];
        put_fixed32(&mut trailer, masked_crc_of(&[contents, &[NO_COMPRESSION]]));
        self.out
            .write_all(contents)
            .map_err(Error::io(&self.path))?;
        self.out
            .write_all(&trailer)
            .map_err(Error::io(&self.path))?;
        self.offset += handle.size + BLOCK_TRAILER_BYTES;
        Ok(handle)
    }

    /// Writes the index, properties, meta-index and footer, fsyncs the file and closes it.
    /// `None` for a table without entries (which silt never lists in a MANIFEST).
    pub(crate) fn finish(mut self) -> Result<Option<SstSummary>> {
        self.flush_data_block()?;
        let data_bytes = self.offset;
        let index_contents = self.index.finish();
        let index = self.write_block(&index_contents)?;
        let properties = properties_block(&self.counts, data_bytes, index_contents.len() as u64)
            .map_err(|reason| self.corrupt(reason))?;
        let properties = self.write_block(&properties)?;
        let mut meta_index = BlockBuilder::new(META_RESTART_INTERVAL);
        let mut handle = Vec::new();
        properties.encode_to(&mut handle);
        meta_index
            .add(PROPERTIES_BLOCK.as_bytes(), &handle)
            .map_err(|reason| self.corrupt(reason))?;
        let meta_index = self.write_block(&meta_index.finish())?;
        let footer = footer(meta_index, index);
        self.out.write_all(&footer).map_err(Error::io(&self.path))?;
        let file_bytes = self.offset + footer.len() as u64;
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&self.path)(e.into_error()))?;
        crate::storage::durability::sync_data(&file, &self.path).map_err(Error::io(&self.path))?;
        Ok(self.smallest_user_key.map(|smallest_user_key| SstSummary {
            file_bytes,
            smallest_user_key,
            largest_user_key: user_key_of(&self.last_key).to_vec(),
            entries: self.counts.entries,
        }))
    }
}

/// The user key of an internal key.
pub(crate) fn user_key_of(internal_key: &[u8]) -> &[u8] {
    &internal_key[..internal_key.len().saturating_sub(INTERNAL_KEY_SUFFIX.len())]
}

/// The properties block: names in bytewise order, numbers as varint64s.
fn properties_block(counts: &Counts, data_bytes: u64, index_bytes: u64) -> Result<Vec<u8>, String> {
    let number = |n: u64| {
        let mut bytes = Vec::new();
        put_varint64(&mut bytes, n);
        bytes
    };
    let text = |s: &str| s.as_bytes().to_vec();
    let properties: BTreeMap<&str, Vec<u8>> = BTreeMap::from([
        // A user property of RocksDB's own table builder: fixed32 0, binary search index.
        ("rocksdb.block.based.table.index.type", vec![0, 0, 0, 0]),
        ("rocksdb.column.family.id", number(0)),
        ("rocksdb.column.family.name", text("default")),
        ("rocksdb.comparator", text(COMPARATOR)),
        ("rocksdb.compression", text("NoCompression")),
        ("rocksdb.data.size", number(data_bytes)),
        ("rocksdb.filter.size", number(0)),
        ("rocksdb.fixed.key.length", number(0)),
        (
            "rocksdb.index.size",
            number(index_bytes + BLOCK_TRAILER_BYTES),
        ),
        ("rocksdb.num.data.blocks", number(counts.data_blocks)),
        ("rocksdb.num.entries", number(counts.entries)),
        ("rocksdb.raw.key.size", number(counts.raw_key_bytes)),
        ("rocksdb.raw.value.size", number(counts.raw_value_bytes)),
    ]);
    let mut block = BlockBuilder::new(META_RESTART_INTERVAL);
    for (name, value) in &properties {
        block.add(name.as_bytes(), value)?;
    }
    Ok(block.finish())
}

fn footer(meta_index: BlockHandle, index: BlockHandle) -> Vec<u8> {
    let mut footer = vec![CHECKSUM_CRC32C];
    meta_index.encode_to(&mut footer);
    index.encode_to(&mut footer);
    footer.resize(1 + FOOTER_HANDLES_BYTES, 0);
    put_fixed32(&mut footer, FORMAT_VERSION);
    put_fixed64(&mut footer, TABLE_MAGIC);
    debug_assert_eq!(footer.len() as u64, FOOTER_BYTES);
    footer
}

/// Reads a table silt wrote, checking what RocksDB checks: the footer (magic, format version,
/// checksum type), every block's checksum and restart array, the index's order and its
/// coverage of the data blocks, and that every key is a value at sequence number 0.
pub(crate) struct SstReader {
    path: PathBuf,
    file: File,
    index: Vec<(Vec<u8>, BlockHandle)>,
    properties: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl SstReader {
    /// Opens `path`, which its MANIFEST says is `file_bytes` long.
    pub(crate) fn open(path: &Path, file_bytes: u64) -> Result<SstReader> {
        let file = File::open(path).map_err(Error::io(path))?;
        let len = file.metadata().map_err(Error::io(path))?.len();
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        if len != file_bytes || len < FOOTER_BYTES {
            return Err(corrupt(format!(
                "the file has {len} bytes, its MANIFEST says {file_bytes} (at least {FOOTER_BYTES})"
            )));
        }
        let mut reader = SstReader {
            path: path.to_path_buf(),
            file,
            index: Vec::new(),
            properties: BTreeMap::new(),
        };
        let (meta_index, index) = reader.footer(len)?;
        for (name, value) in reader.block_entries(meta_index)? {
            if name == PROPERTIES_BLOCK.as_bytes() {
                let handle = reader.handle_in(&value)?;
                reader.properties = reader.block_entries(handle)?.into_iter().collect();
            }
        }
        for (key, value) in reader.block_entries(index)? {
            let handle = reader.handle_in(&value)?;
            reader.index.push((key, handle));
        }
        reader.check_index()?;
        Ok(reader)
    }

    /// The index names data blocks that follow each other from the file's start, under keys
    /// that increase.
    fn check_index(&self) -> Result<()> {
        let mut next_offset = 0;
        for (n, (key, handle)) in self.index.iter().enumerate() {
            if handle.offset != next_offset {
                return Err(self.corrupt(format!(
                    "data block {n} starts at {}, not where the one before ends ({next_offset})",
                    handle.offset
                )));
            }
            next_offset = handle.offset + handle.size + BLOCK_TRAILER_BYTES;
            let increasing = n == 0 || user_key_of(&self.index[n - 1].0) < user_key_of(key);
            if !key.ends_with(&INTERNAL_KEY_SUFFIX) || !increasing {
                return Err(self.corrupt(format!("index key {n} is out of order")));
            }
        }
        Ok(())
    }

    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    fn footer(&self, len: u64) -> Result<(BlockHandle, BlockHandle)> {
        let mut bytes = [0u8; FOOTER_BYTES as usize];
        self.file
            .read_exact_at(&mut bytes, len - FOOTER_BYTES)
            .map_err(Error::io(&self.path))?;
        let mut cursor = Cursor::new(&bytes);
        let checksum = cursor.bytes(1).map(|b| b[0]);
        let handles = (
            BlockHandle::decode(&mut cursor),
            BlockHandle::decode(&mut cursor),
        );
        let mut tail = Cursor::new(&bytes[1 + FOOTER_HANDLES_BYTES..]);
        let (version, magic) = (tail.fixed32(), tail.fixed64());
        if magic != Some(TABLE_MAGIC) {
            return Err(self.corrupt(format!(
                "footer magic {magic:x?} is not a block-based table's"
            )));
        }
        if !version.is_some_and(|v| FORMAT_VERSIONS_READ.contains(&v)) {
            return Err(self.corrupt(format!("format version {version:?} (silt reads 2 to 5)")));
        }
        if checksum != Some(CHECKSUM_CRC32C) {
            return Err(self.corrupt(format!("checksum type {checksum:?} (silt reads 1, CRC32C)")));
        }
        match handles {
            (Some(meta_index), Some(index)) if cursor.position() <= 1 + FOOTER_HANDLES_BYTES => {
                Ok((meta_index, index))
            }
            _ => Err(self.corrupt("the footer's block handles are malformed")),
        }
    }

    fn handle_in(&self, value: &[u8]) -> Result<BlockHandle> {
        let mut cursor = Cursor::new(value);
        match BlockHandle::decode(&mut cursor) {
            Some(handle) if cursor.is_empty() => Ok(handle),
            _ => Err(self.corrupt("a malformed block handle")),
        }
    }

    /// A block's contents, its trailer checked.
    fn read_block(&self, handle: BlockHandle) -> Result<Vec<u8>> {
        let len = self.file.metadata().map_err(Error::io(&self.path))?.len();
        let end = handle
            .offset
            .checked_add(handle.size)
            .and_then(|end| end.checked_add(BLOCK_TRAILER_BYTES))
            .filter(|&end| end <= len - FOOTER_BYTES);
        let Some(end) = end else {
            return Err(self.corrupt(format!("block {handle:?} lies outside the file")));
        };
        let mut bytes = vec![0u8; (end - handle.offset) as usize];
        self.file
            .read_exact_at(&mut bytes, handle.offset)
            .map_err(Error::io(&self.path))?;
        let (contents, trailer) = bytes.split_at(handle.size as usize);
        let stored = u32::from_le_bytes([trailer[1], trailer[2], trailer[3], trailer[4]]);
        if trailer[0] != NO_COMPRESSION {
            return Err(self.corrupt(format!("block at {} is compressed", handle.offset)));
        }
        if masked_crc_of(&[contents, &trailer[..1]]) != stored {
            return Err(self.corrupt(format!("block at {} fails its checksum", handle.offset)));
        }
        Ok(contents.to_vec())
    }

    fn block_entries(&self, handle: BlockHandle) -> Result<Vec<Entry>> {
        let contents = self.read_block(handle)?;
        block::entries(&contents)
            .map_err(|reason| self.corrupt(format!("block at {}: {reason}", handle.offset)))
    }

    /// The properties block's entries, by name (empty when the table has none).
    #[cfg(test)]
    pub(crate) fn properties(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        &self.properties
    }

    /// The number of data blocks.
    pub(crate) fn data_blocks(&self) -> usize {
        self.index.len()
    }

    /// The entries of data block `n`, as (user key, value), checked against the index: each a
    /// value at sequence number 0, in increasing order, the last one the block's index key.
    pub(crate) fn data_block(&self, n: usize) -> Result<Vec<Entry>> {
        let Some((index_key, handle)) = self.index.get(n) else {
            return Err(self.corrupt(format!("no data block {n}")));
        };
        let entries = self.block_entries(*handle)?;
        let keys_ok = entries
            .iter()
            .all(|(key, _)| key.ends_with(&INTERNAL_KEY_SUFFIX))
            && entries
                .windows(2)
                .all(|w| user_key_of(&w[0].0) < user_key_of(&w[1].0))
            && entries.last().is_some_and(|(last, _)| last == index_key);
        if !keys_ok {
            return Err(self.corrupt(format!(
                "data block {n}: keys are not increasing values at sequence 0 ending at its index key"
            )));
        }
        Ok(entries
            .into_iter()
            .map(|(key, value)| (user_key_of(&key).to_vec(), value))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one helper: writes `entries` with `block_bytes` blocks into a fresh file, then reads
    /// it back whole; answers the summary, the file's bytes and the reader.
    fn write_and_read(
        entries: &[(Vec<u8>, Vec<u8>)],
        block_bytes: usize,
    ) -> (Option<SstSummary>, Vec<u8>, SstReader, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000002.sst");
        let mut writer = SstWriter::create(&path, block_bytes).unwrap();
        for (key, value) in entries {
            writer.add(key, value).unwrap();
        }
        let summary = writer.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let reader = SstReader::open(&path, bytes.len() as u64).unwrap();
        let read: Vec<(Vec<u8>, Vec<u8>)> = (0..reader.data_blocks())
            .flat_map(|n| reader.data_block(n).unwrap())
            .collect();
        assert_eq!(read, entries, "read back");
        (summary, bytes, reader, dir)
    }

    fn numbered(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| (format!("key-{i:05}").into_bytes(), vec![b'v'; i % 50]))
            .collect()
    }

    #[test]
    fn the_footer_is_format_version_5_with_crc32c_and_the_magic() {
        let (summary, bytes, _, _dir) = write_and_read(&numbered(3), 4096);
        let footer = &bytes[bytes.len() - 53..];
        assert_eq!(footer[0], 1, "checksum type CRC32C");
        assert!(
            footer[1..41].ends_with(&[0, 0]),
            "handles, then zero padding"
        );
        assert_eq!(&footer[41..45], &[5, 0, 0, 0], "format_version 5");
        assert_eq!(
            &footer[45..49],
            &0x85f4_cff7u32.to_le_bytes(),
            "magic, low word"
        );
        assert_eq!(
            &footer[49..53],
            &0x88e2_41b7u32.to_le_bytes(),
            "magic, high word"
        );
        let summary = summary.unwrap();
        assert_eq!(summary.file_bytes, bytes.len() as u64);
        assert_eq!(summary.entries, 3);
        assert_eq!(summary.smallest_user_key, b"key-00000");
        assert_eq!(summary.largest_user_key, b"key-00002");
    }

    /// The first data block as it sits in the file: its entries with internal keys (the user
    /// key, then seqno 0 and type 1), the restart array, and a trailer whose CRC covers the
    /// contents and the compression byte.
    #[test]
    fn a_data_block_is_internal_keys_and_a_checksummed_trailer() {
        let entries = vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"22".to_vec()),
        ];
        let (_, bytes, _, _dir) = write_and_read(&entries, 4096);
        #[rustfmt::skip]
        let contents: Vec<u8> = [
            &[0, 9, 1][..], b"a", &[1, 0, 0, 0, 0, 0, 0, 0], b"1",
            &[0, 9, 2], b"b", &[1, 0, 0, 0, 0, 0, 0, 0], b"22",
            &[0, 0, 0, 0], &[1, 0, 0, 0],
        ]
        .concat();
        assert_eq!(&bytes[..contents.len()], contents.as_slice());
        let trailer = &bytes[contents.len()..contents.len() + 5];
        assert_eq!(trailer[0], 0, "no compression");
        let crc = crc32c::crc32c_append(crc32c::crc32c(&contents), &[0]);
        let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
        assert_eq!(&trailer[1..], &masked.to_le_bytes());
    }

    #[test]
    fn many_keys_fill_several_blocks_indexed_by_their_last_keys() {
        let entries = numbered(1000);
        let (summary, _, reader, _dir) = write_and_read(&entries, 512);
        assert!(reader.data_blocks() > 10, "{} blocks", reader.data_blocks());
        assert_eq!(summary.unwrap().entries, 1000);
        let property = |name: &str| {
            let value = reader.properties().get(name.as_bytes()).cloned();
            value.unwrap_or_else(|| panic!("property {name}"))
        };
        let number = |name: &str| Cursor::new(&property(name)).varint64().unwrap();
        assert_eq!(number("rocksdb.num.entries"), 1000);
        assert_eq!(
            number("rocksdb.num.data.blocks"),
            reader.data_blocks() as u64
        );
        assert_eq!(number("rocksdb.raw.key.size"), 1000 * (9 + 8));
        assert_eq!(
            property("rocksdb.comparator"),
            b"leveldb.BytewiseComparator"
        );
        assert_eq!(property("rocksdb.compression"), b"NoCompression");
        let names: Vec<&Vec<u8>> = reader.properties().keys().collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "properties sorted");
    }

    #[test]
    fn an_entry_larger_than_a_block_gets_a_block_of_its_own() {
        let entries = vec![
            (b"big".to_vec(), vec![7u8; 100_000]),
            (b"small".to_vec(), b"x".to_vec()),
        ];
        let (_, _, reader, _dir) = write_and_read(&entries, 4096);
        assert_eq!(reader.data_blocks(), 2);
    }

    /// Internal keys do not sort bytewise (`a` + suffix is above `a\0` + suffix byte by
    /// byte): the order checks go by user key.
    #[test]
    fn a_key_that_extends_another_by_a_zero_byte_follows_it() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = [&b"a"[..], b"a\0", b"a\0\0", b"b"]
            .iter()
            .map(|k| (k.to_vec(), k.to_vec()))
            .collect();
        write_and_read(&entries, 1);
    }

    #[test]
    fn keys_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = SstWriter::create(&dir.path().join("1.sst"), 4096).unwrap();
        writer.add(b"b", b"").unwrap();
        for key in [&b"a"[..], b"b"] {
            assert!(matches!(
                writer.add(key, b""),
                Err(Error::KeysOutOfOrder { entry: 1, .. })
            ));
        }
    }

    /// Each damage is refused at open or at the block it hits, with the file named.
    #[test]
    fn damaged_tables_are_refused() {
        let (_, bytes, _, dir) = write_and_read(&numbered(100), 512);
        let len = bytes.len();
        for (what, at, byte, at_open) in [
            ("a data block byte", 20, b'X', false),
            ("the magic", len - 1, 0, true),
            ("the format version", len - 12, 6, true),
            ("the checksum type", len - 53, 4, true),
        ] {
            let path = dir.path().join("damaged.sst");
            let mut damaged = bytes.clone();
            damaged[at] = byte;
            std::fs::write(&path, &damaged).unwrap();
            let read = SstReader::open(&path, len as u64)
                .and_then(|r| (0..r.data_blocks()).try_for_each(|n| r.data_block(n).map(drop)));
            let error = read.expect_err(what).to_string();
            assert!(error.contains("damaged.sst"), "{what}: {error}");
            assert_eq!(
                SstReader::open(&path, len as u64).is_err(),
                at_open,
                "{what}"
            );
        }
        let path = dir.path().join("000002.sst");
        assert!(
            SstReader::open(&path, len as u64 + 1).is_err(),
            "a size the MANIFEST disagrees with"
        );
    }
}
