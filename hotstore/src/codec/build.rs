//! Building batches: the server's own (a primary-key table's changelog, a projected fetch)
//! and, for tests, byte-for-byte copies of what the Fluss clients send.

use bytes::{BufMut, BytesMut};

use super::header::{APPEND_ONLY_FLAG, LOG_OVERHEAD_BYTES, recompute_crc};

/// Size of a magic 0 header, the format the server writes (as fluss-rs 1.0 does).
const HEADER_BYTES_V0: usize = 48;

/// The fields of a batch header the server writes itself.
#[derive(Debug, Clone, Copy)]
pub struct HeaderFields {
    pub base_offset: i64,
    pub commit_timestamp: i64,
    pub schema_id: i16,
    pub append_only: bool,
    pub writer_id: i64,
    pub batch_sequence: i32,
    pub record_count: i32,
}

/// Builds a V0 batch from change types (empty for append-only) and an Arrow IPC message.
pub fn build_batch(
    fields: HeaderFields,
    change_types: &[u8],
    arrow_message: &[u8],
) -> bytes::Bytes {
    let total = HEADER_BYTES_V0 + change_types.len() + arrow_message.len();
    let mut buf = BytesMut::with_capacity(total);
    buf.put_i64_le(fields.base_offset);
    buf.put_i32_le((total - LOG_OVERHEAD_BYTES) as i32);
    buf.put_u8(0);
    buf.put_i64_le(fields.commit_timestamp);
    buf.put_u32_le(0); // CRC, filled below
    buf.put_i16_le(fields.schema_id);
    buf.put_u8(if fields.append_only {
        APPEND_ONLY_FLAG
    } else {
        0
    });
    buf.put_i32_le((fields.record_count - 1).max(0));
    buf.put_i64_le(fields.writer_id);
    buf.put_i32_le(fields.batch_sequence);
    buf.put_i32_le(fields.record_count);
    debug_assert_eq!(buf.len(), HEADER_BYTES_V0);
    buf.put_slice(change_types);
    buf.put_slice(arrow_message);
    recompute_crc(&mut buf);
    buf.freeze()
}

/// Test support: builds batches byte for byte the way fluss-rs 1.0's
/// `MemoryLogRecordsArrowBuilder::build` lays them out (its builder is crate-private, so it
/// cannot be called from here).
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    use super::super::header::*;

    pub struct BatchSpec {
        pub magic: u8,
        pub record_count: i32,
        pub writer_id: i64,
        pub batch_sequence: i32,
        pub schema_id: i16,
        pub payload: Vec<u8>,
    }

    impl Default for BatchSpec {
        fn default() -> Self {
            BatchSpec {
                magic: 0,
                record_count: 3,
                writer_id: NO_WRITER_ID,
                batch_sequence: -1,
                schema_id: 1,
                payload: b"arrow ipc stands here".to_vec(),
            }
        }
    }

    /// A client-side batch: base offset 0, commit timestamp 0, append-only, valid CRC.
    pub fn build_batch(spec: &BatchSpec) -> Vec<u8> {
        let header_len = header_bytes(spec.magic).expect("test magic is supported");
        let mut out = Vec::with_capacity(header_len + spec.payload.len());
        let total = header_len + spec.payload.len();
        out.extend_from_slice(&0i64.to_le_bytes());
        out.extend_from_slice(&((total - LOG_OVERHEAD_BYTES) as i32).to_le_bytes());
        out.push(spec.magic);
        out.extend_from_slice(&0i64.to_le_bytes());
        if spec.magic >= 2 {
            out.extend_from_slice(&(-1i32).to_le_bytes());
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&spec.schema_id.to_le_bytes());
        out.push(APPEND_ONLY_FLAG);
        out.extend_from_slice(&(spec.record_count - 1).max(0).to_le_bytes());
        out.extend_from_slice(&spec.writer_id.to_le_bytes());
        out.extend_from_slice(&spec.batch_sequence.to_le_bytes());
        out.extend_from_slice(&spec.record_count.to_le_bytes());
        if spec.magic >= 1 {
            out.extend_from_slice(&0i32.to_le_bytes());
        }
        assert_eq!(out.len(), header_len);
        out.extend_from_slice(&spec.payload);
        recompute_crc(&mut out);
        out
    }

    /// Two rows of `(id INT, name STRING)`: `(1, 'a')` and `(2, 'b')`.
    pub fn two_rows() -> arrow::record_batch::RecordBatch {
        use arrow::array::{Int32Array, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        use std::sync::Arc;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec!["a", "b"])),
        ];
        arrow::record_batch::RecordBatch::try_new(schema, columns).unwrap()
    }

    pub fn batch_with(record_count: i32, payload_bytes: usize) -> Vec<u8> {
        build_batch(&BatchSpec {
            record_count,
            payload: (0..payload_bytes).map(|i| i as u8).collect(),
            ..BatchSpec::default()
        })
    }
}
