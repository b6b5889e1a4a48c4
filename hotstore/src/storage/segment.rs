//! One segment of a log tablet: a file `<base offset, 20 digits>.log` holding whole batches
//! back to back, with its sparse index, plus the header scan that recovery and reads share.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::index::{IndexEntry, SparseIndex};
use super::{Error, Result, io_error};
use crate::codec::header::{self as batch, BatchHeader, LOG_OVERHEAD_BYTES};

/// The largest fixed header of any supported magic.
const HEADER_READ_BYTES: usize = 56;

pub(crate) fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

pub(crate) fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.index"))
}

pub(crate) fn writers_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.writers"))
}

pub(crate) fn marks_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.marks"))
}

/// Parses `<20 digits>.<extension>` file names.
pub(crate) fn parse_file_name(name: &str, extension: &str) -> Option<i64> {
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Writes a small file atomically and durably: temp file, fsync, rename, fsync the directory.
pub(crate) fn write_file_durably(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all_at(bytes, 0).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error(path))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// How a scan ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Reached the end of the range exactly on a batch boundary.
    Clean,
    /// The visitor asked to stop before the batch at `position`.
    Stopped { position: u64 },
    /// The bytes at `position` are not a valid next batch.
    Defect { position: u64, reason: String },
}

/// Walks the batches in `[start, end)` of `file`, checking framing, contiguity of offsets from
/// `first_offset` and, with `verify_crc`, every CRC. `visit` sees each good batch and returns
/// false to stop before it.
pub(crate) fn scan_batches(
    file: &File,
    path: &Path,
    start: u64,
    end: u64,
    first_offset: i64,
    verify_crc: bool,
    mut visit: impl FnMut(u64, &BatchHeader) -> bool,
) -> Result<ScanEnd> {
    let mut position = start;
    let mut expected_offset = first_offset;
    let mut header_buf = [0u8; HEADER_READ_BYTES];
    let mut batch_buf = Vec::new();
    while position < end {
        let available = end - position;
        if available < LOG_OVERHEAD_BYTES as u64 + 1 {
            let reason = format!("{available} trailing bytes cannot hold a batch header");
            return Ok(ScanEnd::Defect { position, reason });
        }
        let header_len = available.min(HEADER_READ_BYTES as u64) as usize;
        file.read_exact_at(&mut header_buf[..header_len], position)
            .map_err(io_error(path))?;
        let header = match BatchHeader::parse(&header_buf[..header_len], position) {
            Ok(header) => header,
            Err(err) => {
                return Ok(ScanEnd::Defect {
                    position,
                    reason: err.to_string(),
                });
            }
        };
        let size = header.size_bytes() as u64;
        if size > available {
            let reason = format!("batch of {size} bytes overruns the {available} bytes left");
            return Ok(ScanEnd::Defect { position, reason });
        }
        if header.base_offset != expected_offset {
            let reason = format!(
                "batch base offset {} where {expected_offset} was expected",
                header.base_offset
            );
            return Ok(ScanEnd::Defect { position, reason });
        }
        if verify_crc {
            batch_buf.resize(size as usize, 0);
            file.read_exact_at(&mut batch_buf, position)
                .map_err(io_error(path))?;
            if let Err(err) = batch::verify_crc(&batch_buf, &header, position) {
                return Ok(ScanEnd::Defect {
                    position,
                    reason: err.to_string(),
                });
            }
        }
        if !visit(position, &header) {
            return Ok(ScanEnd::Stopped { position });
        }
        expected_offset = header.next_offset();
        position += size;
    }
    Ok(ScanEnd::Clean)
}

/// Walks the batches of a range that must be intact, as [`scan_batches`] does without CRC
/// checks: a defect is corruption.
pub(crate) fn scan_intact(
    file: &File,
    path: &Path,
    (start, first_offset): (u64, i64),
    end: u64,
    visit: impl FnMut(u64, &BatchHeader) -> bool,
) -> Result<()> {
    match scan_batches(file, path, start, end, first_offset, false, visit)? {
        ScanEnd::Defect { position, reason } => Err(Error::CorruptSegment {
            path: path.to_path_buf(),
            position,
            reason,
        }),
        ScanEnd::Clean | ScanEnd::Stopped { .. } => Ok(()),
    }
}

/// What a read of a segment needs, taken under the tablet's lock so the read runs without it:
/// the file, and the byte position and offset of the batch to start at.
pub(crate) struct SegmentRead {
    pub file: Arc<File>,
    pub path: PathBuf,
    pub start: (u64, i64),
    pub size_bytes: u64,
}

impl SegmentRead {
    /// Walks the batches from `start` to the end of the segment (see [`scan_intact`]).
    pub fn scan(&self, visit: impl FnMut(u64, &BatchHeader) -> bool) -> Result<()> {
        scan_intact(&self.file, &self.path, self.start, self.size_bytes, visit)
    }
}

pub(crate) struct Segment {
    pub base_offset: i64,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub size_bytes: u64,
    /// One past the last offset in the segment; `base_offset` when empty.
    pub next_offset: i64,
    /// Commit timestamp of the last batch; `None` when empty.
    pub max_timestamp_ms: Option<i64>,
    pub index: SparseIndex,
}

impl Segment {
    /// A read of this segment from the index entry `floor` (a batch at or before where the
    /// read must begin), or from its first batch.
    pub fn read_from(&self, floor: Option<IndexEntry>) -> SegmentRead {
        SegmentRead {
            file: self.file.clone(),
            path: self.path.clone(),
            start: floor.map_or((0, self.base_offset), |e| (e.position, e.offset)),
            size_bytes: self.size_bytes,
        }
    }

    fn open_file(path: &Path, create: bool) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(path)
            .map_err(io_error(path))
    }

    /// Creates an empty segment file; the caller fsyncs the directory.
    pub fn create(dir: &Path, base_offset: i64) -> Result<Self> {
        let path = log_path(dir, base_offset);
        let file = Self::open_file(&path, true)?;
        Ok(Segment {
            base_offset,
            path,
            file: Arc::new(file),
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp_ms: None,
            index: SparseIndex::default(),
        })
    }

    fn open_existing(dir: &Path, base_offset: i64) -> Result<Self> {
        let path = log_path(dir, base_offset);
        let file = Self::open_file(&path, false)?;
        let size_bytes = file.metadata().map_err(io_error(&path))?.len();
        Ok(Segment {
            base_offset,
            path,
            file: Arc::new(file),
            size_bytes,
            next_offset: base_offset,
            max_timestamp_ms: None,
            index: SparseIndex::default(),
        })
    }

    /// Records a batch just written at the end of the segment.
    pub fn on_appended(&mut self, header: &BatchHeader, interval_bytes: u32) {
        debug_assert_eq!(header.base_offset, self.next_offset);
        let size = header.size_bytes() as u64;
        let entry = IndexEntry {
            offset: header.base_offset,
            position: self.size_bytes,
            timestamp_ms: header.commit_timestamp_ms,
        };
        self.index.on_batch(entry, size, interval_bytes);
        self.size_bytes += size;
        self.next_offset = header.next_offset();
        self.max_timestamp_ms = Some(header.commit_timestamp_ms);
    }

    /// Opens a segment that was rolled (fsynced, then closed) before. Loads its index file when
    /// it is intact and rebuilds it from batch headers otherwise. Any defect is corruption: a
    /// rolled segment was durable before its successor existed. With `visit_all`, `visit` sees
    /// every batch (the index file is then ignored); otherwise only the batches the scan passes.
    pub fn open_closed(
        dir: &Path,
        base_offset: i64,
        interval_bytes: u32,
        visit_all: bool,
        mut visit: impl FnMut(&BatchHeader),
    ) -> Result<Self> {
        let mut segment = Self::open_existing(dir, base_offset)?;
        let loaded = std::fs::read(index_path(dir, base_offset))
            .ok()
            .filter(|_| !visit_all)
            .and_then(|bytes| SparseIndex::decode(&bytes, base_offset, segment.size_bytes));
        let (start, first_offset) = match loaded.as_ref().and_then(|i| i.last()) {
            Some(last) => (last.position, last.offset),
            None => (0, base_offset),
        };
        let mut rebuilt = SparseIndex::default();
        let mut next_offset = first_offset;
        let mut max_timestamp_ms = None;
        scan_intact(
            &segment.file,
            &segment.path,
            (start, first_offset),
            segment.size_bytes,
            |position, header| {
                let entry = IndexEntry {
                    offset: header.base_offset,
                    position,
                    timestamp_ms: header.commit_timestamp_ms,
                };
                rebuilt.on_batch(entry, header.size_bytes() as u64, interval_bytes);
                next_offset = header.next_offset();
                max_timestamp_ms = Some(header.commit_timestamp_ms);
                visit(header);
                true
            },
        )?;
        segment.index = loaded.unwrap_or(rebuilt);
        segment.next_offset = next_offset;
        segment.max_timestamp_ms = max_timestamp_ms;
        Ok(segment)
    }

    /// Opens the active (last) segment: verifies every batch's framing, contiguity and CRC, and
    /// truncates the file at the first defect (a torn or corrupt tail). Returns the segment and
    /// how many bytes were cut.
    pub fn recover_active(
        dir: &Path,
        base_offset: i64,
        interval_bytes: u32,
        mut visit: impl FnMut(&BatchHeader),
    ) -> Result<(Self, u64)> {
        let mut segment = Self::open_existing(dir, base_offset)?;
        let file_bytes = segment.size_bytes;
        segment.size_bytes = 0;
        let file = segment.file.clone();
        let path = segment.path.clone();
        let end = scan_batches(
            &file,
            &path,
            0,
            file_bytes,
            base_offset,
            true,
            |_, header| {
                segment.on_appended(header, interval_bytes);
                visit(header);
                true
            },
        )?;
        let mut cut_bytes = 0;
        if let ScanEnd::Defect { position, reason } = end {
            debug_assert_eq!(position, segment.size_bytes);
            cut_bytes = file_bytes - position;
            tracing::warn!(
                path = %segment.path.display(),
                position,
                cut_bytes,
                %reason,
                "truncating the torn or corrupt tail of a log segment"
            );
            file.set_len(position).map_err(io_error(&segment.path))?;
        }
        // Whatever survived a kill may sit in the page cache only; it becomes readable (and
        // tierable) once the high watermark covers it, so it must be durable first.
        super::durability::sync_data(&file, &segment.path).map_err(io_error(&segment.path))?;
        Ok((segment, cut_bytes))
    }

    /// Persists the index of a segment being rolled.
    pub fn write_index_file(&self, dir: &Path) -> Result<()> {
        write_file_durably(
            dir,
            &index_path(dir, self.base_offset),
            &self.index.encode(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_well_formed_file_names() {
        assert_eq!(parse_file_name("00000000000000000042.log", "log"), Some(42));
        assert_eq!(parse_file_name("00000000000000000042.index", "log"), None);
        assert_eq!(parse_file_name("42.log", "log"), None);
        assert_eq!(parse_file_name("0000000000000000004x.log", "log"), None);
        assert_eq!(
            log_path(Path::new("/d"), 7),
            Path::new("/d/00000000000000000007.log")
        );
    }
}
