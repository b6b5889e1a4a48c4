//! Durable per-bucket storage for hotstore: log tablets and kv tablets.
//!
//! The wire-protocol layer codes against this module; it knows nothing of frames, protobuf or
//! table metadata. Everything here stores bytes and offsets.
//!
//! # Log tablet ([`LogTablet`], one per bucket, one directory each)
//!
//! ```text
//! LogTablet::open(dir: &Path, config: LogConfig) -> Result<LogTablet>          // runs recovery
//! async fn append(&self, batches: Bytes, commit_timestamp_ms: i64) -> Result<AppendInfo>
//! fn read(&self, fetch_offset: i64, max_bytes: usize) -> Result<Bytes>
//! fn read_bounded(&self, fetch_offset: i64, max_bytes: usize, upper_bound_offset: i64) -> Result<Bytes>
//! fn high_watermark(&self) -> i64      // durable end offset, exclusive
//! fn log_end_offset(&self) -> i64      // written end offset, may run ahead of the high watermark
//! fn log_start_offset(&self) -> i64
//! fn offset_for_timestamp(&self, ts_ms: i64) -> Result<i64>
//! async fn wait_for_data(&self, offset: i64, timeout: Duration) -> i64   // long-poll
//! fn truncate_before(&self, offset: i64) -> Result<i64>                  // retention
//! fn flush(&self) -> Result<()>        // blocking fsync, for shutdown under FsyncPolicy::Never
//! fn fsync_count(&self) -> u64         // metric
//! ```
//!
//! Contract:
//! - `append` takes the `records` bytes of a produce request (one or more Fluss log record
//!   batches, see [`crate::codec`]), checks each batch's framing and CRC, assigns contiguous offsets
//!   and one commit timestamp (clamped so commit timestamps never decrease within a bucket),
//!   writes them and returns only once they are durable under the configured [`FsyncPolicy`]
//!   (under `Never`, at once; the high watermark then waits for the next [`LogTablet::flush`]).
//! - The high watermark is always the durable end: after a restart everything recovered is
//!   fsynced before it is published, and under `Never` it advances only at flushes and rolls.
//! - Writer idempotence lives here, because the duplicate check must be atomic with offset
//!   assignment: a batch with a writer id (not [`crate::codec::NO_WRITER_ID`]) whose batch sequence
//!   equals one of that writer's last [`WRITER_BATCHES_RETAINED`] batches is not written again;
//!   its [`AppendedBatch`] says `duplicate: true` and carries the original offsets. A sequence
//!   that is neither a retained one nor the next one is [`Error::OutOfOrderSequence`]; a writer
//!   the tablet does not know must start at sequence 0. Writer state survives restarts (a
//!   snapshot per segment roll, a replay of the active segment, and the mark journal of writes
//!   that appended nothing, see [`LogTablet::record_unchanged_write`]). Primary-key tables use
//!   the same state: their changelog batches carry the writer id and sequence of the PutKv.
//! - Reads return whole batches, starting with the batch that contains `fetch_offset`, never a
//!   batch at or beyond the high watermark, and at least one batch even when it is larger than
//!   `max_bytes`. The bytes are exactly what the client sent, with base offset and commit
//!   timestamp stamped: they can go into a FetchLog response as they are.
//!
//! # Kv tablet ([`KvStore`] per server, [`KvTablet`] per bucket)
//!
//! ```text
//! KvStore::open(dir: &Path, config: KvConfig) -> Result<KvStore>   // one fjall database
//! fn open_tablet(&self, name: &str) -> Result<KvTablet>            // one keyspace per bucket
//! fn drop_tablet(&self, name: &str) -> Result<()>
//! fn tablet_names(&self) -> Vec<String>
//! fn persist(&self) -> Result<()>                                  // fsync the journal
//! KvTablet::get(&self, key: &[u8]) -> Result<Option<Bytes>>
//! fn apply<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, changes: &[(K, Option<V>)], row_count_delta: i64, applied_log_end_offset: i64) -> Result<()>
//! fn applied_offset(&self) -> Result<i64>                          // 0 for a new tablet
//! fn row_count(&self) -> Result<i64>                               // live keys, kept with the offset
//! fn iter(&self) -> impl Iterator<Item = Result<(Bytes, Bytes)>>   // key order
//! fn point_in_time_iter(&self) -> KvRows                          // owned, for kv snapshots
//! ```
//!
//! See [`kv_tablet`]. The log is the write-ahead log: append the changelog to the log tablet,
//! then `apply` the changes to the kv tablet together with the log end offset they reach and
//! the keys they add (INSERT +1, DELETE -1 of the changelog); on restart, replay the log from
//! `applied_offset()`.
//!
//! # Kv snapshots ([`BucketSnapshots`] per primary-key bucket)
//!
//! ```text
//! BucketSnapshots::open(dir: &Path) -> Result<BucketSnapshots>      // removes unpublished ones
//! fn write(&self, turn, log_offset: i64, entries, WriterConfig) -> Result<Arc<KvSnapshot>>
//! fn latest(&self) / get(&self, id) -> Option<Arc<KvSnapshot>>
//! fn retain(&self, retained: usize, keep: impl Fn(i64) -> bool) -> Result<Vec<i64>>
//! ```
//!
//! See [`kv_snapshots`]: a snapshot is the kv tablet's rows at one applied offset, written as
//! a read-only RocksDB directory ([`rocksdb_snapshot`]), fsynced, then published by a rename.

pub mod durability;
mod index;
pub mod kv_snapshots;
pub mod kv_tablet;
pub mod log_tablet;
mod read_buffers;
pub mod rocksdb_snapshot;
mod segment;
mod writers;

use std::path::PathBuf;

pub use kv_snapshots::{BucketSnapshots, KvSnapshot};
pub use kv_tablet::{KvConfig, KvRows, KvStore, KvTablet, KvView};
pub use log_tablet::{AppendInfo, AppendedBatch, FsyncPolicy, LogConfig, LogTablet, WriterCheck};
pub(crate) use segment::write_file_durably;
pub use writers::WRITER_BATCHES_RETAINED;

/// Errors of the storage layer. A user (or client) can fix the input errors; the rest name the
/// file involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Batch(#[from] crate::codec::Error),

    #[error("append carries no log record batch; send at least one batch")]
    EmptyAppend,

    #[error(
        "offset {offset} is out of range [{log_start_offset}, {high_watermark}]; fetch from an \
         offset in that range (list offsets gives the earliest and latest)"
    )]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },

    #[error(
        "writer {writer_id} sent batch sequence {received} but the next expected is {expected}; \
         the writer must reset its sequence numbers"
    )]
    OutOfOrderSequence {
        writer_id: i64,
        expected: i32,
        received: i32,
    },

    #[error(
        "log segment {path} is corrupt at byte {position}: {reason}; restore this bucket \
         directory or move the damaged segment and every later one aside"
    )]
    CorruptSegment {
        path: PathBuf,
        position: u64,
        reason: String,
    },

    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "log tablet in {dir} refuses appends since {cause}; a restart runs recovery (free disk \
         space or fix the disk first)"
    )]
    TabletFailed { dir: PathBuf, cause: String },

    #[error("invalid storage config: {0}")]
    InvalidConfig(String),

    #[error("kv store {path}: {source}")]
    Kv {
        path: PathBuf,
        #[source]
        source: fjall::Error,
    },

    #[error("invalid kv tablet name {name:?}: use 1 to 200 characters of [A-Za-z0-9_.-]")]
    InvalidTabletName { name: String },

    #[error(
        "kv tablet {tablet} has applied the log up to offset {applied} and cannot go back to          {requested}; replay the log from applied_offset()"
    )]
    AppliedOffsetRegressed {
        tablet: String,
        applied: i64,
        requested: i64,
    },

    #[error(
        "kv key of {key_bytes} bytes is longer than {key_bytes_max} bytes; use a shorter primary key"
    )]
    KeyTooLarge {
        key_bytes: usize,
        key_bytes_max: usize,
    },

    #[error("kv store {path}: {reason}; the store is damaged, rebuild the tablet from the log")]
    CorruptKv { path: PathBuf, reason: String },

    #[error(transparent)]
    SnapshotFormat(#[from] rocksdb_snapshot::Error),

    #[error(
        "kv snapshot record {path} is damaged: {reason}; the snapshot is removed and the next \
         one is taken from the kv tablet"
    )]
    CorruptSnapshot { path: PathBuf, reason: String },

    #[error("kv snapshot in {dir} not published: {reason}")]
    SnapshotRefused { dir: PathBuf, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}

/// Bytes of the CRC32C (little endian) that ends a small persisted file (an offset index, a
/// writer snapshot).
pub(crate) const FILE_CRC_BYTES: usize = 4;

/// `body` followed by its CRC32C, as a small persisted file is written.
pub(crate) fn with_crc(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// The body of a file [`with_crc`] wrote, or `None` when it is too short or its CRC does not
/// match (a torn or damaged file).
pub(crate) fn checked_body(bytes: &[u8]) -> Option<&[u8]> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(FILE_CRC_BYTES)?)?;
    (crc32c::crc32c(body) == u32::from_le_bytes(crc.try_into().ok()?)).then_some(body)
}
