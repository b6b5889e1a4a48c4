//! The Fluss log record batch header: parse, validate, split, and stamp server fields.
//! Storage and the request handlers both read batches through this module.
//!
//! A batch is `[header][statistics (magic >= 1)][change types (not append-only)][Arrow IPC]`,
//! all little-endian. The header layout, in bytes:
//!
//! | field             | V0 | V1 | V2 | width |
//! |-------------------|----|----|----|-------|
//! | base offset       |  0 |  0 |  0 | i64   |
//! | length            |  8 |  8 |  8 | i32, bytes after this field |
//! | magic             | 12 | 12 | 12 | u8    |
//! | commit timestamp  | 13 | 13 | 13 | i64   |
//! | leader epoch      |  - |  - | 21 | i32   |
//! | crc (CRC-32C)     | 21 | 21 | 25 | u32   |
//! | schema id         | 25 | 25 | 29 | i16   |
//! | attributes        | 27 | 27 | 31 | u8, bit 0 = append-only |
//! | last offset delta | 28 | 28 | 32 | i32   |
//! | writer id         | 32 | 32 | 36 | i64   |
//! | batch sequence    | 40 | 40 | 44 | i32   |
//! | record count      | 44 | 44 | 48 | i32   |
//! | statistics length |  - | 48 | 52 | i32   |
//!
//! The header is 48, 52 or 56 bytes for magic 0, 1 and 2. fluss-rs 1.0 writes magic 0, or
//! magic 1 when the table declares statistics columns.
//!
//! The CRC covers every byte from the schema id to the end of the batch. The fields the server
//! stamps (base offset, commit timestamp, leader epoch) lie before the CRC, so stamping them
//! leaves the CRC valid: the server never recomputes it, exactly as the Java server does not.
//! A batch occupies the offsets `base_offset ..= base_offset + last_offset_delta`.

use bytes::Bytes;

use super::{Error, Result};

/// Bytes before the length-counted part of a batch: the base offset and the length field.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The highest batch format version this store accepts.
pub const MAGIC_MAX: u8 = 2;
/// Bit 0 of the attributes byte: the batch carries no change-type vector.
pub const APPEND_ONLY_FLAG: u8 = 0x01;
/// Writer id of a non-idempotent writer: its batches are never deduplicated.
pub const NO_WRITER_ID: i64 = -1;
/// The largest batch accepted, matching Java's `int` sizes.
pub const BATCH_BYTES_MAX: usize = i32::MAX as usize;

const BASE_OFFSET_POS: usize = 0;
const LENGTH_POS: usize = 8;
const MAGIC_POS: usize = 12;
const COMMIT_TIMESTAMP_POS: usize = 13;
const LEADER_EPOCH_POS: usize = 21;
/// Position of the CRC in magic 0 and 1; magic 2 shifts it and every later field by 4 bytes.
const CRC_POS_V0: usize = 21;
const V2_SHIFT: usize = 4;
const HEADER_BYTES_V0: usize = 48;

/// Fixed header size for a magic, or `None` for an unknown format version.
pub fn header_bytes(magic: u8) -> Option<usize> {
    match magic {
        0 => Some(HEADER_BYTES_V0),
        1 => Some(HEADER_BYTES_V0 + 4),
        2 => Some(HEADER_BYTES_V0 + 8),
        _ => None,
    }
}

fn field_shift(magic: u8) -> usize {
    if magic >= 2 { V2_SHIFT } else { 0 }
}

fn crc_pos(magic: u8) -> usize {
    CRC_POS_V0 + field_shift(magic)
}

fn read_i16(buf: &[u8], pos: usize) -> i16 {
    i16::from_le_bytes([buf[pos], buf[pos + 1]])
}

fn read_i32(buf: &[u8], pos: usize) -> i32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&buf[pos..pos + 4]);
    i32::from_le_bytes(raw)
}

fn read_i64(buf: &[u8], pos: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&buf[pos..pos + 8]);
    i64::from_le_bytes(raw)
}

/// The decoded fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the length field; the whole batch is `length + LOG_OVERHEAD_BYTES`.
    pub length: i32,
    pub magic: u8,
    pub commit_timestamp_ms: i64,
    /// Present for magic 2 only.
    pub leader_epoch: Option<i32>,
    pub crc: u32,
    pub schema_id: i16,
    pub attributes: u8,
    pub last_offset_delta: i32,
    pub writer_id: i64,
    pub batch_sequence: i32,
    pub record_count: i32,
    /// Present for magic 1 and 2.
    pub statistics_length: Option<i32>,
}

impl BatchHeader {
    /// Decodes and validates the header at the start of `batch`, which must hold at least the
    /// whole fixed header (the rest of the batch is not needed). `position` is only used in
    /// error messages. Checks everything but the CRC: see [`verify_crc`].
    pub fn parse(batch: &[u8], position: u64) -> Result<Self> {
        let malformed = |reason: String| Error::Malformed { position, reason };
        if batch.len() < LOG_OVERHEAD_BYTES + 1 {
            return Err(malformed(format!(
                "{} bytes cannot hold a batch header (truncated input)",
                batch.len()
            )));
        }
        let magic = batch[MAGIC_POS];
        let header_len = header_bytes(magic).ok_or_else(|| {
            malformed(format!(
                "unsupported magic {magic} (this store reads 0 to {MAGIC_MAX})"
            ))
        })?;
        if batch.len() < header_len {
            return Err(malformed(format!(
                "{} bytes cannot hold a magic {magic} header of {header_len} bytes (truncated input)",
                batch.len()
            )));
        }
        let shift = field_shift(magic);
        let header = BatchHeader {
            base_offset: read_i64(batch, BASE_OFFSET_POS),
            length: read_i32(batch, LENGTH_POS),
            magic,
            commit_timestamp_ms: read_i64(batch, COMMIT_TIMESTAMP_POS),
            leader_epoch: (magic >= 2).then(|| read_i32(batch, LEADER_EPOCH_POS)),
            crc: read_i32(batch, crc_pos(magic)) as u32,
            schema_id: read_i16(batch, 25 + shift),
            attributes: batch[27 + shift],
            last_offset_delta: read_i32(batch, 28 + shift),
            writer_id: read_i64(batch, 32 + shift),
            batch_sequence: read_i32(batch, 40 + shift),
            record_count: read_i32(batch, 44 + shift),
            statistics_length: (magic >= 1).then(|| read_i32(batch, 48 + shift)),
        };
        header.validate(header_len).map_err(malformed)?;
        Ok(header)
    }

    fn validate(&self, header_len: usize) -> Result<(), String> {
        let size = i64::from(self.length) + LOG_OVERHEAD_BYTES as i64;
        if self.length < 0 || size < header_len as i64 || size > BATCH_BYTES_MAX as i64 {
            return Err(format!(
                "length field {} gives a batch of {size} bytes, outside [{header_len}, {BATCH_BYTES_MAX}]",
                self.length
            ));
        }
        if self.record_count < 0 || self.last_offset_delta < 0 {
            return Err(format!(
                "negative record count {} or last offset delta {}",
                self.record_count, self.last_offset_delta
            ));
        }
        // A batch may span more offsets than it has records, never fewer.
        if i64::from(self.last_offset_delta) + 1 < i64::from(self.record_count) {
            return Err(format!(
                "last offset delta {} leaves no offset for some of its {} records",
                self.last_offset_delta, self.record_count
            ));
        }
        let body = size - header_len as i64;
        let statistics = i64::from(self.statistics_length.unwrap_or(0));
        let change_types = if self.is_append_only() {
            0
        } else {
            i64::from(self.record_count)
        };
        if statistics < 0 || statistics + change_types > body {
            return Err(format!(
                "statistics ({statistics} bytes) and change types ({change_types} bytes) do not fit \
                 in the {body}-byte body"
            ));
        }
        Ok(())
    }

    /// The whole batch in bytes, header included.
    pub fn size_bytes(&self) -> usize {
        debug_assert!(self.length >= 0);
        self.length as usize + LOG_OVERHEAD_BYTES
    }

    pub fn is_append_only(&self) -> bool {
        self.attributes & APPEND_ONLY_FLAG != 0
    }

    /// How many offsets the batch occupies.
    pub fn offset_count(&self) -> i64 {
        i64::from(self.last_offset_delta) + 1
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    pub fn next_offset(&self) -> i64 {
        self.base_offset + self.offset_count()
    }
}

/// CRC-32C of a whole batch as the client computes it: over the bytes after the CRC field.
/// The batch must hold a whole header of a known magic (checked by [`BatchHeader::parse`]).
pub fn compute_crc(batch: &[u8]) -> u32 {
    let start = crc_pos(batch[MAGIC_POS]) + 4;
    crc32c::crc32c(&batch[start..])
}

/// Checks the stored CRC of one whole, parsed batch.
pub fn verify_crc(batch: &[u8], header: &BatchHeader, position: u64) -> Result<()> {
    debug_assert_eq!(batch.len(), header.size_bytes());
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(Error::CrcMismatch {
            position,
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Rewrites the CRC field of a whole batch. The server never needs this (see the module
/// comment); builders and tests do.
pub fn recompute_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    let pos = crc_pos(batch[MAGIC_POS]);
    batch[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Stamps the server-assigned base offset and commit timestamp into a batch in place. Both
/// fields lie before the CRC, so the CRC stays valid and is not touched.
pub fn stamp_offset_and_timestamp(batch: &mut [u8], base_offset: i64, commit_timestamp_ms: i64) {
    debug_assert!(batch.len() >= HEADER_BYTES_V0);
    batch[BASE_OFFSET_POS..BASE_OFFSET_POS + 8].copy_from_slice(&base_offset.to_le_bytes());
    batch[COMMIT_TIMESTAMP_POS..COMMIT_TIMESTAMP_POS + 8]
        .copy_from_slice(&commit_timestamp_ms.to_le_bytes());
}

/// Stamps the leader epoch of a magic 2 batch; earlier magics have no such field and are left
/// unchanged. Like the offset, the epoch is outside the CRC.
pub fn stamp_leader_epoch(batch: &mut [u8], leader_epoch: i32) {
    if batch[MAGIC_POS] >= 2 {
        batch[LEADER_EPOCH_POS..LEADER_EPOCH_POS + 4].copy_from_slice(&leader_epoch.to_le_bytes());
    }
}

/// One batch found in a buffer: its header and where it lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    pub header: BatchHeader,
    /// Byte position of the batch in the buffer.
    pub position: usize,
}

impl BatchSpan {
    pub fn range(&self) -> std::ops::Range<usize> {
        self.position..self.position + self.header.size_bytes()
    }
}

/// Splits a buffer of concatenated batches, as a client sends them, into whole batches. Every
/// batch must be complete and well-formed and its CRC must match; trailing bytes that do not
/// form a whole batch are an error (a client never sends a partial batch).
pub fn split_batches(buf: &[u8]) -> Result<Vec<BatchSpan>> {
    let mut spans = Vec::new();
    let mut position = 0usize;
    while position < buf.len() {
        let rest = &buf[position..];
        let header = BatchHeader::parse(rest, position as u64)?;
        let size = header.size_bytes();
        if size > rest.len() {
            return Err(Error::Malformed {
                position: position as u64,
                reason: format!(
                    "batch of {size} bytes overruns the {} bytes left (truncated input)",
                    rest.len()
                ),
            });
        }
        verify_crc(&rest[..size], &header, position as u64)?;
        spans.push(BatchSpan { header, position });
        position += size;
    }
    debug_assert_eq!(position, buf.len());
    Ok(spans)
}

/// One whole batch and its decoded header: a view of received or stored bytes.
#[derive(Debug, Clone)]
pub struct Batch {
    pub header: BatchHeader,
    pub data: Bytes,
}

impl Batch {
    /// Splits `buf` into whole batches (see [`split_batches`]); the CRCs are checked only with
    /// `verify_crc` (stored batches were checked when they were appended).
    pub fn split(buf: Bytes, verify_crc: bool) -> Result<Vec<Batch>> {
        let spans = if verify_crc {
            split_batches(&buf)?
        } else {
            split_framing(&buf)?
        };
        Ok(spans
            .into_iter()
            .map(|span| Batch {
                header: span.header,
                data: buf.slice(span.range()),
            })
            .collect())
    }

    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    pub fn next_offset(&self) -> i64 {
        self.header.next_offset()
    }

    pub fn record_count(&self) -> i32 {
        self.header.record_count
    }

    pub fn schema_id(&self) -> i16 {
        self.header.schema_id
    }

    /// The statistics block (magic 1 and 2, when the writer collected statistics), unparsed:
    /// see [`crate::codec::statistics`].
    pub fn statistics(&self) -> Option<&[u8]> {
        let length = usize::try_from(self.header.statistics_length?).ok()?;
        if length == 0 {
            return None;
        }
        let start = header_bytes(self.header.magic)?;
        self.data.get(start..start.checked_add(length)?)
    }

    /// The change-type bytes (empty for an append-only batch) and the Arrow IPC message.
    pub fn records(&self) -> Result<(Bytes, Bytes)> {
        let records = self.record_bytes()?;
        let change_types = if self.header.is_append_only() {
            0
        } else {
            self.header.record_count as usize
        };
        if change_types > records.len() {
            return Err(Error::Malformed {
                position: 0,
                reason: "change types run past the batch".into(),
            });
        }
        Ok((records.slice(..change_types), records.slice(change_types..)))
    }

    /// Everything after the header and the statistics: in the ARROW format the change types
    /// and the Arrow message ([`Batch::records`]), in the INDEXED format the records
    /// ([`crate::codec::indexed`]).
    pub fn record_bytes(&self) -> Result<Bytes> {
        let h = &self.header;
        let malformed = |reason: String| Error::Malformed {
            position: 0,
            reason,
        };
        let header_len = header_bytes(h.magic).expect("parsed headers have a known magic");
        let statistics = usize::try_from(h.statistics_length.unwrap_or(0))
            .map_err(|_| malformed("negative statistics length".into()))?;
        let start = header_len + statistics;
        if start > self.data.len() {
            return Err(malformed("statistics run past the batch".into()));
        }
        Ok(self.data.slice(start..))
    }
}

/// Like [`split_batches`] without the CRC check.
fn split_framing(buf: &[u8]) -> Result<Vec<BatchSpan>> {
    let mut spans = Vec::new();
    let mut position = 0usize;
    while position < buf.len() {
        let rest = &buf[position..];
        let header = BatchHeader::parse(rest, position as u64)?;
        if header.size_bytes() > rest.len() {
            return Err(Error::Malformed {
                position: position as u64,
                reason: format!(
                    "batch of {} bytes overruns the {} bytes left (truncated input)",
                    header.size_bytes(),
                    rest.len()
                ),
            });
        }
        spans.push(BatchSpan { header, position });
        position += header.size_bytes();
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::testing::*;

    /// The one helper: split `buf` and describe the outcome as a short string.
    fn split(buf: &[u8]) -> String {
        match split_batches(buf) {
            Ok(spans) => spans
                .iter()
                .map(|s| {
                    format!(
                        "{}@{}+{}",
                        s.header.record_count,
                        s.position,
                        s.header.size_bytes()
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
            Err(Error::Malformed { position, .. }) => format!("malformed@{position}"),
            Err(Error::CrcMismatch { position, .. }) => format!("crc@{position}"),
        }
    }

    /// A V0 batch built exactly as fluss-rs 1.0 builds one: a 48-byte header, then an Arrow
    /// IPC stream message produced by the same arrow version the client uses.
    fn fluss_like_v0_batch() -> Vec<u8> {
        use arrow::ipc::writer::StreamWriter;
        let rows = two_rows();
        let schema = rows.schema();
        let mut ipc = Vec::new();
        let mut writer = StreamWriter::try_new(&mut ipc, &schema).unwrap();
        let schema_message_len = writer.get_ref().len();
        writer.write(&rows).unwrap();
        drop(writer);
        build_batch(&BatchSpec {
            record_count: 2,
            writer_id: 7,
            batch_sequence: 0,
            payload: ipc[schema_message_len..].to_vec(),
            ..BatchSpec::default()
        })
    }

    #[test]
    fn parses_every_header_field_of_a_fluss_v0_batch() {
        let batch = fluss_like_v0_batch();
        let header = BatchHeader::parse(&batch, 0).unwrap();
        assert_eq!(header.magic, 0);
        assert_eq!(header.size_bytes(), batch.len());
        assert_eq!((header.record_count, header.last_offset_delta), (2, 1));
        assert_eq!(
            (header.writer_id, header.batch_sequence, header.schema_id),
            (7, 0, 1)
        );
        assert!(header.is_append_only());
        assert_eq!(
            (header.leader_epoch, header.statistics_length),
            (None, None)
        );
        verify_crc(&batch, &header, 0).unwrap();
    }

    #[test]
    fn parses_v1_and_v2_layouts() {
        for magic in [1u8, 2] {
            let batch = build_batch(&BatchSpec {
                magic,
                writer_id: 9,
                batch_sequence: 4,
                ..Default::default()
            });
            let header = BatchHeader::parse(&batch, 0).unwrap();
            assert_eq!(
                (header.magic, header.writer_id, header.batch_sequence),
                (magic, 9, 4)
            );
            assert_eq!(header.statistics_length, Some(0));
            assert_eq!(header.leader_epoch.is_some(), magic == 2);
            verify_crc(&batch, &header, 0).unwrap();
        }
    }

    #[test]
    fn splits_concatenated_batches() {
        let mut buf = batch_with(3, 10);
        buf.extend(batch_with(1, 0));
        buf.extend(batch_with(5, 100));
        assert_eq!(split(&buf), "3@0+58,1@58+48,5@106+148");
        assert_eq!(split(&[]), "");
    }

    #[test]
    fn rejects_truncated_garbage_and_corrupt_input() {
        let good = batch_with(3, 10);
        let mut two = good.clone();
        two.extend(&good);
        assert_eq!(
            split(&good[..good.len() - 1]),
            "malformed@0",
            "cut inside the body"
        );
        assert_eq!(split(&good[..20]), "malformed@0", "cut inside the header");
        assert_eq!(
            split(&two[..two.len() - 5]),
            "malformed@58",
            "second batch cut"
        );
        assert_eq!(
            split(&[0xff; 7]),
            "malformed@0",
            "shorter than the overhead"
        );
        assert_eq!(split(&[0xff; 300]), "malformed@0", "garbage");
        assert_eq!(
            split(&[0x00; 300]),
            "malformed@0",
            "zeros: length 0 is below the header"
        );
        let mut bad_magic = good.clone();
        bad_magic[12] = 9;
        assert_eq!(split(&bad_magic), "malformed@0");
        let mut flipped = two.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        assert_eq!(split(&flipped), "crc@58", "payload bit flip");
        let mut flipped_header = good.clone();
        flipped_header[40] ^= 1; // batch sequence, covered by the crc
        assert_eq!(split(&flipped_header), "crc@0");
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
        assert_eq!(split(&huge), "malformed@0", "length beyond the buffer");
        let mut negative = good.clone();
        negative[44..48].copy_from_slice(&(-1i32).to_le_bytes());
        recompute_crc(&mut negative);
        assert_eq!(split(&negative), "malformed@0", "negative record count");
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2000usize {
            let buf: Vec<u8> = (0..len % 200)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = split_batches(&buf);
        }
    }

    #[test]
    fn stamping_offset_and_timestamp_keeps_the_crc_valid() {
        for magic in [0u8, 1, 2] {
            let mut batch = build_batch(&BatchSpec {
                magic,
                ..Default::default()
            });
            let crc_before = BatchHeader::parse(&batch, 0).unwrap().crc;
            stamp_offset_and_timestamp(&mut batch, 1_234_567, 1_700_000_000_123);
            stamp_leader_epoch(&mut batch, 5);
            let header = BatchHeader::parse(&batch, 0).unwrap();
            assert_eq!(
                (header.base_offset, header.commit_timestamp_ms),
                (1_234_567, 1_700_000_000_123)
            );
            assert_eq!(
                (header.last_offset(), header.next_offset()),
                (1_234_569, 1_234_570)
            );
            assert_eq!(header.leader_epoch, (magic == 2).then_some(5));
            assert_eq!(header.crc, crc_before);
            verify_crc(&batch, &header, 0).unwrap();
        }
    }
}
