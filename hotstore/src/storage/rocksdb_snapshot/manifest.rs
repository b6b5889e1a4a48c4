//! The MANIFEST: a RocksDB log file of version edits, and the one edit a snapshot needs.
//!
//! Log framing (RocksDB's `log_format.h`): the file is cut into 32 KiB blocks; a record is
//! written as one or more fragments, each with a 7-byte header
//! ```text
//! fixed32 masked CRC32C(type byte + payload) | fixed16 payload length | type | payload
//! type := 1 full | 2 first | 3 middle | 4 last
//! ```
//! A fragment never crosses a block boundary; a block tail shorter than a header is zeros.
//!
//! A version edit is a sequence of `varint32 tag` + field. silt writes, in this order:
//! comparator (1, length-prefixed), log number (2, varint64), next file number (3, varint64),
//! last sequence (4, varint64) and one new file (103, RocksDB's `kNewFile4`) per table:
//! ```text
//! varint32 level | varint64 file number | varint64 file size | smallest internal key |
//! largest internal key (both length-prefixed) | varint64 smallest seqno | varint64 largest
//! seqno | custom fields: none, closed by varint32 1
//! ```

use super::coding::{
    Cursor, masked_crc_of, put_fixed32, put_length_prefixed, put_varint32, put_varint64,
};

pub(crate) const LOG_BLOCK_BYTES: usize = 32 * 1024;
pub(crate) const LOG_HEADER_BYTES: usize = 7;

const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;

const TAG_COMPARATOR: u32 = 1;
const TAG_LOG_NUMBER: u32 = 2;
const TAG_NEXT_FILE_NUMBER: u32 = 3;
const TAG_LAST_SEQUENCE: u32 = 4;
const TAG_NEW_FILE4: u32 = 103;
/// Closes a new file's custom fields.
const NEW_FILE_TERMINATE: u32 = 1;

/// Frames `records` as a log file, from its start.
pub(crate) fn frame_records(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        let mut rest: &[u8] = record;
        let mut first = true;
        loop {
            let left_in_block = LOG_BLOCK_BYTES - out.len() % LOG_BLOCK_BYTES;
            if left_in_block < LOG_HEADER_BYTES {
                out.resize(out.len() + left_in_block, 0);
                continue;
            }
            let room = left_in_block - LOG_HEADER_BYTES;
            let (fragment, after) = rest.split_at(rest.len().min(room));
            let fragment_type = match (first, after.is_empty()) {
                (true, true) => FULL,
                (true, false) => FIRST,
                (false, false) => MIDDLE,
                (false, true) => LAST,
            };
            put_fixed32(&mut out, masked_crc_of(&[&[fragment_type], fragment]));
            out.extend_from_slice(&(fragment.len() as u16).to_le_bytes());
            out.push(fragment_type);
            out.extend_from_slice(fragment);
            rest = after;
            first = false;
            if rest.is_empty() {
                break;
            }
        }
    }
    out
}

/// The records of a log file, each fragment's checksum and place checked.
pub(crate) fn read_records(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut records = Vec::new();
    let mut partial: Option<Vec<u8>> = None;
    let mut at = 0;
    while at < bytes.len() {
        let left_in_block = LOG_BLOCK_BYTES - at % LOG_BLOCK_BYTES;
        if left_in_block < LOG_HEADER_BYTES {
            if bytes[at..(at + left_in_block).min(bytes.len())]
                .iter()
                .any(|&b| b != 0)
            {
                return Err(format!("block tail at byte {at} is not zero"));
            }
            at += left_in_block;
            continue;
        }
        let (fragment_type, fragment) = fragment_at(bytes, at, left_in_block)?;
        at += LOG_HEADER_BYTES + fragment.len();
        partial = match (fragment_type, partial) {
            (FULL, None) => {
                records.push(fragment.to_vec());
                None
            }
            (FIRST, None) => Some(fragment.to_vec()),
            (MIDDLE, Some(mut record)) => {
                record.extend_from_slice(fragment);
                Some(record)
            }
            (LAST, Some(mut record)) => {
                record.extend_from_slice(fragment);
                records.push(record);
                None
            }
            (other, partial) => {
                return Err(format!(
                    "fragment of type {other} at byte {at} (a record open: {})",
                    partial.is_some()
                ));
            }
        };
    }
    match partial {
        None => Ok(records),
        Some(_) => Err("the log ends inside a record".into()),
    }
}

/// The fragment whose header starts at `at`: its type and payload, its checksum checked.
fn fragment_at(bytes: &[u8], at: usize, left_in_block: usize) -> Result<(u8, &[u8]), String> {
    let mut cursor = Cursor::new(&bytes[at..]);
    let header = cursor
        .bytes(LOG_HEADER_BYTES)
        .ok_or_else(|| format!("a cut header at byte {at}"))?;
    let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let len = usize::from(u16::from_le_bytes([header[4], header[5]]));
    let fragment_type = header[6];
    if LOG_HEADER_BYTES + len > left_in_block {
        return Err(format!(
            "fragment at byte {at} of {len} bytes crosses a block boundary"
        ));
    }
    let payload = cursor
        .bytes(len)
        .ok_or_else(|| format!("fragment at byte {at} is cut"))?;
    if masked_crc_of(&[&[fragment_type], payload]) != stored {
        return Err(format!("fragment at byte {at} fails its checksum"));
    }
    Ok((fragment_type, payload))
}

/// A table file as a version edit adds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewFile {
    pub(crate) level: u32,
    pub(crate) number: u64,
    pub(crate) file_bytes: u64,
    /// Internal keys (user key + seqno and type).
    pub(crate) smallest: Vec<u8>,
    pub(crate) largest: Vec<u8>,
    pub(crate) smallest_seqno: u64,
    pub(crate) largest_seqno: u64,
}

/// The fields of a version edit silt writes (see the module docs), and no others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    pub(crate) comparator: String,
    pub(crate) log_number: u64,
    pub(crate) next_file_number: u64,
    pub(crate) last_sequence: u64,
    pub(crate) files: Vec<NewFile>,
}

impl VersionEdit {
    pub(crate) fn encode(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        put_varint32(&mut out, TAG_COMPARATOR);
        put_length_prefixed(&mut out, self.comparator.as_bytes())?;
        for (tag, value) in [
            (TAG_LOG_NUMBER, self.log_number),
            (TAG_NEXT_FILE_NUMBER, self.next_file_number),
            (TAG_LAST_SEQUENCE, self.last_sequence),
        ] {
            put_varint32(&mut out, tag);
            put_varint64(&mut out, value);
        }
        for file in &self.files {
            put_varint32(&mut out, TAG_NEW_FILE4);
            put_varint32(&mut out, file.level);
            put_varint64(&mut out, file.number);
            put_varint64(&mut out, file.file_bytes);
            put_length_prefixed(&mut out, &file.smallest)?;
            put_length_prefixed(&mut out, &file.largest)?;
            put_varint64(&mut out, file.smallest_seqno);
            put_varint64(&mut out, file.largest_seqno);
            put_varint32(&mut out, NEW_FILE_TERMINATE);
        }
        Ok(out)
    }

    /// Decodes an edit silt wrote; any other tag (or a field missing) is refused.
    pub(crate) fn decode(bytes: &[u8]) -> Result<VersionEdit, String> {
        let mut cursor = Cursor::new(bytes);
        let malformed = |what: &str| format!("a malformed {what} in a version edit");
        let (mut comparator, mut log_number, mut next_file_number, mut last_sequence) =
            (None, None, None, None);
        let mut files = Vec::new();
        while !cursor.is_empty() {
            match cursor.varint32().ok_or_else(|| malformed("tag"))? {
                TAG_COMPARATOR => {
                    let name = cursor
                        .length_prefixed()
                        .ok_or_else(|| malformed("comparator"))?;
                    comparator = Some(String::from_utf8_lossy(name).into_owned());
                }
                TAG_LOG_NUMBER => log_number = cursor.varint64(),
                TAG_NEXT_FILE_NUMBER => next_file_number = cursor.varint64(),
                TAG_LAST_SEQUENCE => last_sequence = cursor.varint64(),
                TAG_NEW_FILE4 => {
                    files.push(decode_new_file(&mut cursor).ok_or_else(|| malformed("new file"))?)
                }
                other => {
                    return Err(format!(
                        "version edit tag {other}, which silt does not write"
                    ));
                }
            }
        }
        match (comparator, log_number, next_file_number, last_sequence) {
            (Some(comparator), Some(log_number), Some(next_file_number), Some(last_sequence)) => {
                Ok(VersionEdit {
                    comparator,
                    log_number,
                    next_file_number,
                    last_sequence,
                    files,
                })
            }
            fields => Err(format!(
                "a version edit without all of comparator, log number, next file number and last sequence: {fields:?}"
            )),
        }
    }
}

fn decode_new_file(cursor: &mut Cursor<'_>) -> Option<NewFile> {
    let file = NewFile {
        level: cursor.varint32()?,
        number: cursor.varint64()?,
        file_bytes: cursor.varint64()?,
        smallest: cursor.length_prefixed()?.to_vec(),
        largest: cursor.length_prefixed()?.to_vec(),
        smallest_seqno: cursor.varint64()?,
        largest_seqno: cursor.varint64()?,
    };
    (cursor.varint32()? == NEW_FILE_TERMINATE).then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one helper: frames `sizes`-byte records (byte `i` of record `r` is `r + i`), reads
    /// them back, and returns the framed bytes.
    fn framed(sizes: &[usize]) -> Vec<u8> {
        let records: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(r, &n)| (0..n).map(|i| (r + i) as u8).collect())
            .collect();
        let bytes = frame_records(&records);
        assert_eq!(read_records(&bytes).unwrap(), records);
        bytes
    }

    #[test]
    fn a_small_record_is_one_full_fragment() {
        let bytes = framed(&[5]);
        assert_eq!(bytes.len(), 7 + 5);
        assert_eq!(&bytes[4..7], &[5, 0, FULL], "length 5, type full");
        let crc = crc32c::crc32c(&[FULL, 0, 1, 2, 3, 4]);
        let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
        assert_eq!(
            &bytes[..4],
            &masked.to_le_bytes(),
            "CRC of type and payload, masked"
        );
    }

    /// A record larger than what is left of its block is cut at the 32 KiB boundary: a first
    /// fragment filling the block, and the rest as the last fragment at the next block's start.
    #[test]
    fn a_record_crossing_a_block_boundary_is_cut_there() {
        let bytes = framed(&[40_000]);
        let first_len = LOG_BLOCK_BYTES - 7;
        assert_eq!(
            &bytes[4..7],
            &[(first_len & 0xff) as u8, (first_len >> 8) as u8, FIRST]
        );
        let second = &bytes[LOG_BLOCK_BYTES..];
        let last_len = 40_000 - first_len;
        assert_eq!(
            &second[4..7],
            &[(last_len & 0xff) as u8, (last_len >> 8) as u8, LAST]
        );
        assert_eq!(bytes.len(), LOG_BLOCK_BYTES + 7 + last_len);
        let records = read_records(&bytes).unwrap();
        assert_eq!(records[0].len(), 40_000);
    }

    #[test]
    fn a_record_over_two_boundaries_has_a_middle_fragment() {
        let bytes = framed(&[100, 70_000]);
        let types: Vec<u8> = [6usize, LOG_BLOCK_BYTES + 6, 2 * LOG_BLOCK_BYTES + 6]
            .iter()
            .map(|&at| bytes[at])
            .collect();
        assert_eq!(types, [FULL, MIDDLE, LAST]);
        assert_eq!(bytes[7 + 100 + 6], FIRST);
    }

    /// A block tail shorter than a header is zero-filled and the next record starts at the
    /// next block; exactly a header's room leaves an empty first fragment.
    #[test]
    fn a_short_block_tail_is_padded() {
        let fill = LOG_BLOCK_BYTES - 7 - 3;
        let bytes = framed(&[fill, 10]);
        assert_eq!(&bytes[LOG_BLOCK_BYTES - 3..LOG_BLOCK_BYTES], &[0, 0, 0]);
        assert_eq!(bytes[LOG_BLOCK_BYTES + 6], FULL);
        let bytes = framed(&[LOG_BLOCK_BYTES - 14, 10]);
        assert_eq!(
            &bytes[LOG_BLOCK_BYTES - 3..LOG_BLOCK_BYTES],
            &[0, 0, FIRST],
            "empty first"
        );
        assert_eq!(bytes[LOG_BLOCK_BYTES + 6], LAST);
    }

    #[test]
    fn damaged_logs_are_refused() {
        let good = framed(&[10, 40_000]);
        let with = |at: usize, byte: u8| {
            let mut bytes = good.clone();
            bytes[at] = byte;
            bytes
        };
        for (what, bytes) in [
            ("a payload byte", with(9, 0xff)),
            ("a type", with(6, MIDDLE)),
            ("a length past the block", with(5, 0x90)),
            ("cut inside a record", good[..LOG_BLOCK_BYTES].to_vec()),
            ("cut inside a header", good[..3].to_vec()),
        ] {
            assert!(read_records(&bytes).is_err(), "{what}");
        }
    }

    fn edit(files: usize) -> VersionEdit {
        VersionEdit {
            comparator: "leveldb.BytewiseComparator".into(),
            log_number: 0,
            next_file_number: 2 + files as u64,
            last_sequence: 0,
            files: (0..files as u64)
                .map(|n| NewFile {
                    level: 6,
                    number: 2 + n,
                    file_bytes: 1000 + n,
                    smallest: [format!("k{n}").as_bytes(), &[1, 0, 0, 0, 0, 0, 0, 0]].concat(),
                    largest: [format!("k{n}z").as_bytes(), &[1, 0, 0, 0, 0, 0, 0, 0]].concat(),
                    smallest_seqno: 0,
                    largest_seqno: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn a_version_edit_is_tagged_fields_then_new_file4_entries() {
        let bytes = edit(1).encode().unwrap();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[1, 26][..], b"leveldb.BytewiseComparator",
            &[2, 0], &[3, 3], &[4, 0],
            &[103, 6, 2, 0xe8, 0x07],                          // level 6, file 2, 1000 bytes
            &[10], b"k0", &[1, 0, 0, 0, 0, 0, 0, 0],
            &[11], b"k0z", &[1, 0, 0, 0, 0, 0, 0, 0],
            &[0, 0, 1],                                        // seqnos 0 and 0, terminate
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(VersionEdit::decode(&bytes).unwrap(), edit(1));
    }

    /// An edit of many files is one record over several log blocks.
    #[test]
    fn an_edit_of_many_files_crosses_log_blocks() {
        let edit = edit(3000);
        let payload = edit.encode().unwrap();
        assert!(payload.len() > 2 * LOG_BLOCK_BYTES);
        let records = read_records(&frame_records(&[payload])).unwrap();
        assert_eq!(VersionEdit::decode(&records[0]).unwrap(), edit);
    }

    #[test]
    fn edits_silt_does_not_write_are_refused() {
        let mut bytes = edit(0).encode().unwrap();
        assert!(
            VersionEdit::decode(&bytes[..bytes.len() - 2]).is_err(),
            "no last sequence"
        );
        bytes.extend_from_slice(&[9, 0]);
        assert!(VersionEdit::decode(&bytes).unwrap_err().contains("tag 9"));
    }
}
