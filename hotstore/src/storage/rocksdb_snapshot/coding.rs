//! RocksDB's primitive encodings: little-endian fixed-width integers, LEB128 varints,
//! length-prefixed byte strings, and the masked CRC32C every checksum on disk is stored as.

/// Added after the rotation when a CRC is stored (RocksDB's `crc32c::Mask`): a CRC of data that
/// itself holds CRCs would otherwise be weak.
const CRC_MASK_DELTA: u32 = 0xa282_ead8;

/// The masked form of `crc`, as RocksDB stores a CRC32C: rotated right by 15 bits, plus a
/// constant.
pub(crate) fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA)
}

/// The CRC32C that [`mask_crc`] stored.
#[cfg(test)]
pub(crate) fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(CRC_MASK_DELTA).rotate_left(15)
}

/// The masked CRC32C of `parts` one after the other.
pub(crate) fn masked_crc_of(parts: &[&[u8]]) -> u32 {
    mask_crc(
        parts
            .iter()
            .fold(0, |crc, part| crc32c::crc32c_append(crc, part)),
    )
}

pub(crate) fn put_fixed32(dst: &mut Vec<u8>, value: u32) {
    dst.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_fixed64(dst: &mut Vec<u8>, value: u64) {
    dst.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_varint32(dst: &mut Vec<u8>, value: u32) {
    put_varint64(dst, u64::from(value));
}

/// LEB128: seven bits per byte, low bits first, the top bit set on every byte but the last.
pub(crate) fn put_varint64(dst: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        dst.push((value as u8) | 0x80);
        value >>= 7;
    }
    dst.push(value as u8);
}

/// A varint32 length, then the bytes.
pub(crate) fn put_length_prefixed(dst: &mut Vec<u8>, bytes: &[u8]) -> Result<(), String> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| format!("a field of {} bytes is over 4 GiB", bytes.len()))?;
    put_varint32(dst, len);
    dst.extend_from_slice(bytes);
    Ok(())
}

/// Reads the encodings above from a byte slice; every read is bounds-checked and answers
/// `None` at the end of the input or on a malformed value.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, position: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.position
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.position >= self.bytes.len()
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.position.checked_add(n)?;
        let slice = self.bytes.get(self.position..end)?;
        self.position = end;
        Some(slice)
    }

    pub(crate) fn fixed32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    pub(crate) fn fixed64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    /// At most ten bytes, and no bits beyond the 64th.
    pub(crate) fn varint64(&mut self) -> Option<u64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.position)?;
            self.position += 1;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return None;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    pub(crate) fn varint32(&mut self) -> Option<u32> {
        u32::try_from(self.varint64()?).ok()
    }

    pub(crate) fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let len = self.varint32()?;
        self.bytes(usize::try_from(len).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One helper: `value` encodes as `bytes` and decodes back.
    fn check_varint(value: u64, bytes: &[u8]) {
        let mut encoded = Vec::new();
        put_varint64(&mut encoded, value);
        assert_eq!(encoded, bytes, "varint of {value}");
        let mut cursor = Cursor::new(&encoded);
        assert_eq!(cursor.varint64(), Some(value));
        assert!(cursor.is_empty());
    }

    #[test]
    fn varints_are_leb128() {
        for (value, bytes) in [
            (0, &[0x00][..]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (16_384, &[0x80, 0x80, 0x01]),
            (u64::from(u32::MAX), &[0xff, 0xff, 0xff, 0xff, 0x0f]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            check_varint(value, bytes);
        }
    }

    #[test]
    fn malformed_varints_are_refused() {
        for (what, bytes) in [
            ("cut short", &[0x80, 0x80][..]),
            ("empty", &[]),
            ("eleven bytes", &[0xff; 11]),
            (
                "bits past 64",
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            ),
        ] {
            assert_eq!(Cursor::new(bytes).varint64(), None, "{what}");
        }
        assert_eq!(
            Cursor::new(&[0x80, 0x80, 0x80, 0x80, 0x10]).varint32(),
            None,
            "a varint32 over u32"
        );
    }

    #[test]
    fn fixed_widths_are_little_endian() {
        let mut bytes = Vec::new();
        put_fixed32(&mut bytes, 0x0403_0201);
        put_fixed64(&mut bytes, 0x0c0b_0a09_0807_0605);
        assert_eq!(bytes, (1..=12).collect::<Vec<u8>>());
        let mut cursor = Cursor::new(&bytes);
        assert_eq!(cursor.fixed32(), Some(0x0403_0201));
        assert_eq!(cursor.fixed64(), Some(0x0c0b_0a09_0807_0605));
        assert_eq!(cursor.fixed32(), None);
    }

    /// RocksDB's masking (`util/crc32c.h`): rotate right by 15, add 0xa282ead8. The CRC32C
    /// values are the standard check values (RFC 3720's test vectors).
    #[test]
    fn crcs_are_crc32c_and_masked_as_rocksdb_masks_them() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        // Rotated right by 15, plus 0xa282ead8 (worked out by hand for these).
        for (crc, masked) in [
            (0u32, 0xa282_ead8u32),
            (1, 0xa284_ead8),
            (0xe306_9283, 0xc78a_b0e5),
        ] {
            assert_eq!(mask_crc(crc), masked, "{crc:#x}");
            assert_eq!(unmask_crc(masked), crc);
        }
        assert_eq!(unmask_crc(mask_crc(u32::MAX)), u32::MAX);
        assert_eq!(
            masked_crc_of(&[b"1234", b"56789"]),
            mask_crc(0xe306_9283),
            "parts extend one CRC"
        );
    }

    #[test]
    fn length_prefixed_strings_round_trip() {
        let mut bytes = Vec::new();
        put_length_prefixed(&mut bytes, b"leveldb.BytewiseComparator").unwrap();
        assert_eq!(bytes[0], 26);
        let mut cursor = Cursor::new(&bytes);
        assert_eq!(
            cursor.length_prefixed(),
            Some(&b"leveldb.BytewiseComparator"[..])
        );
        assert_eq!(Cursor::new(&[5, b'a']).length_prefixed(), None, "cut short");
    }
}
