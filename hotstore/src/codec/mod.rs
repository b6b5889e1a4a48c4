//! The one codec of Fluss log record batches, shared by storage and the request handlers:
//! [`header`] (parse, validate, split, CRC, stamp the server's fields), [`arrow`] (the Arrow
//! IPC part: encode, check against a schema, decode, project), [`indexed`] (the framing of the
//! INDEXED format's records), [`value_batch`] (the value record batch of kv scans) and [`build`] (batches the server writes; test builders of client
//! batches). It depends on nothing else in the crate.

pub mod arrow;
pub mod build;
pub mod header;
pub mod indexed;
pub mod statistics;
pub mod value_batch;

pub use header::{Batch, BatchHeader, BatchSpan, NO_WRITER_ID};

#[cfg(any(test, feature = "test-support"))]
pub use build::testing;

/// A batch that is not a well-formed Fluss log record batch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "malformed log record batch at byte {position}: {reason}; the client must send whole \
         Fluss log record batches (magic 0 to 2)"
    )]
    Malformed { position: u64, reason: String },

    #[error(
        "log record batch at byte {position} has crc {stored:#010x} but its bytes hash to \
         {computed:#010x}; it was corrupted in transit or on disk, re-send it"
    )]
    CrcMismatch {
        position: u64,
        stored: u32,
        computed: u32,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
