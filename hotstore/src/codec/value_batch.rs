//! Fluss's value record batch (`DefaultValueRecordBatch`), what LimitScan and ScanKv answer for
//! a primary-key table: an `i32` length of what follows it, a `u8` magic 0, an `i32` record
//! count, then per record an `i32` length and the stored value (schema id and row), all little
//! endian. A batch with no records is a valid answer (the Java client needs the header).

use bytes::{BufMut, Bytes, BytesMut};

const HEADER_BYTES: usize = 4 + 1 + 4;
const MAGIC: u8 = 0;

/// A value record batch being built.
pub struct ValueBatch {
    buf: BytesMut,
    records: i32,
}

impl Default for ValueBatch {
    fn default() -> Self {
        let mut buf = BytesMut::with_capacity(HEADER_BYTES);
        buf.put_bytes(0, HEADER_BYTES);
        ValueBatch { buf, records: 0 }
    }
}

impl ValueBatch {
    pub fn records(&self) -> i32 {
        self.records
    }

    /// The batch's size once `value` is added.
    pub fn size_with(&self, value: &[u8]) -> usize {
        self.buf.len() + 4 + value.len()
    }

    /// Adds a record; an error names a value or batch too large for its `i32` lengths.
    pub fn push(&mut self, value: &[u8]) -> Result<(), String> {
        let length =
            i32::try_from(value.len()).map_err(|_| format!("a value of {} bytes", value.len()))?;
        if self.size_with(value) > i32::MAX as usize {
            return Err("a value batch past 2 GiB".into());
        }
        self.buf.put_i32_le(length);
        self.buf.put_slice(value);
        self.records += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Bytes {
        let length = (self.buf.len() - 4) as i32;
        self.buf[0..4].copy_from_slice(&length.to_le_bytes());
        self.buf[4] = MAGIC;
        self.buf[5..9].copy_from_slice(&self.records.to_le_bytes());
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_framed_little_endian() {
        assert_eq!(
            &ValueBatch::default().finish()[..],
            [5, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let mut batch = ValueBatch::default();
        batch.push(b"ab").unwrap();
        batch.push(b"").unwrap();
        assert_eq!(batch.records(), 2);
        assert_eq!(
            &batch.finish()[..],
            [
                15, 0, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0
            ]
        );
    }
}
