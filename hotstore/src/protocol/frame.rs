//! A response frame as the buffers to write, so a fetch's records go to the socket as the log
//! read them, not copied into the frame first.
//!
//! Most responses are one buffer. A FetchLog response is encoded around its records: the
//! protobuf fields before and after each bucket's records are encoded into small buffers, and
//! each records payload is a chunk of its own, the [`Bytes`] the log read returned. The bytes
//! written are the same, byte for byte, as prost's encoding of the whole message (the tests
//! compare the two); only the copy of the records into one frame buffer is gone. The
//! connection's writer sends a frame's chunks with vectored writes.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, int64};

use super::RESPONSE_SUCCESS;
use super::messages::{FetchLogResponse, PbFetchLogRespForBucket, PbFetchLogRespForTable};

/// Records shorter than this are copied into the frame: a chunk of their own costs an I/O
/// vector entry and a reference count, more than copying a few KiB.
pub const RECORDS_INLINE_MAX: usize = 4 * 1024;

/// A complete response frame, length prefix included, as the buffers to write in order.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    chunks: Vec<Bytes>,
}

impl Frame {
    /// The buffers, in the order they go on the wire.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// The frame as one buffer (copies when it has more than one chunk; for tests).
    #[cfg(test)]
    pub fn into_bytes(self) -> Bytes {
        match <[Bytes; 1]>::try_from(self.chunks) {
            Ok([one]) => one,
            Err(chunks) => chunks.concat().into(),
        }
    }
}

impl From<Bytes> for Frame {
    fn from(frame: Bytes) -> Self {
        Frame {
            chunks: vec![frame],
        }
    }
}

/// Encodes a FetchLog success response frame with each large records payload as its own chunk.
/// The length prefix comes from prost's `encoded_len`, so the frame is what
/// [`super::encode_success`] would write.
pub fn encode_fetch_success(request_id: i32, response: &FetchLogResponse) -> Frame {
    let body_len = response.encoded_len();
    let mut frame = Chunks::default();
    frame.head.put_i32((5 + body_len) as i32);
    frame.head.put_u8(RESPONSE_SUCCESS);
    frame.head.put_i32(request_id);
    for table in &response.tables_resp {
        encode_table(table, &mut frame);
    }
    frame.finish()
}

/// `PbFetchLogRespForTable` in prost's field order: `table_id` (1), then `buckets_resp` (2).
fn encode_table(table: &PbFetchLogRespForTable, frame: &mut Chunks) {
    encode_key(1, WireType::LengthDelimited, &mut frame.head);
    encode_varint(table.encoded_len() as u64, &mut frame.head);
    int64::encode(1, &table.table_id, &mut frame.head);
    for bucket in &table.buckets_resp {
        encode_key(2, WireType::LengthDelimited, &mut frame.head);
        encode_varint(bucket.encoded_len() as u64, &mut frame.head);
        encode_bucket(bucket, frame);
    }
}

/// `PbFetchLogRespForBucket` in prost's field order: the fields before `records` (8) through
/// prost itself, then `records`, then `filtered_end_offset` (9).
fn encode_bucket(bucket: &PbFetchLogRespForBucket, frame: &mut Chunks) {
    let before_records = PbFetchLogRespForBucket {
        records: None,
        filtered_end_offset: None,
        error_message: bucket.error_message.clone(),
        // The remaining fields are Copy; a new owned field fails to compile here, on purpose.
        ..*bucket
    };
    before_records
        .encode(&mut frame.head)
        .expect("BytesMut grows on demand");
    if let Some(records) = &bucket.records {
        encode_key(8, WireType::LengthDelimited, &mut frame.head);
        encode_varint(records.len() as u64, &mut frame.head);
        frame.put_records(records);
    }
    if let Some(offset) = &bucket.filtered_end_offset {
        int64::encode(9, offset, &mut frame.head);
    }
}

/// The frame being built: finished chunks and the buffer still being written.
#[derive(Default)]
struct Chunks {
    done: Vec<Bytes>,
    head: BytesMut,
}

impl Chunks {
    fn put_records(&mut self, records: &Bytes) {
        if records.len() < RECORDS_INLINE_MAX {
            self.head.put_slice(records);
        } else {
            self.done.push(self.head.split().freeze());
            self.done.push(records.clone());
        }
    }

    fn finish(mut self) -> Frame {
        if !self.head.is_empty() {
            self.done.push(self.head.freeze());
        }
        Frame { chunks: self.done }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::encode_success;

    fn bucket(bucket_id: i32, records: Option<usize>) -> PbFetchLogRespForBucket {
        PbFetchLogRespForBucket {
            partition_id: (bucket_id % 2 == 0).then_some(7),
            bucket_id,
            error_code: None,
            error_message: None,
            high_watermark: Some(1_000 + i64::from(bucket_id)),
            log_start_offset: Some(0),
            records: records.map(|len| Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>())),
            filtered_end_offset: None,
        }
    }

    /// The chunked frame is prost's frame byte for byte, for every shape a fetch answer takes:
    /// no records, small (inline) and large (own chunk) records, an error bucket, a pruned
    /// bucket, several tables.
    #[test]
    fn fetch_frames_are_prosts_encoding_with_large_records_as_their_own_chunks() {
        let errored = PbFetchLogRespForBucket {
            error_code: Some(57),
            error_message: Some("fetch offset 9 is outside the log [0, 3]".into()),
            records: None,
            high_watermark: None,
            log_start_offset: None,
            ..bucket(3, None)
        };
        let pruned = PbFetchLogRespForBucket {
            filtered_end_offset: Some(4_242),
            ..bucket(4, Some(RECORDS_INLINE_MAX * 3))
        };
        let cases = [
            (
                FetchLogResponse {
                    tables_resp: vec![],
                },
                1,
            ),
            (
                FetchLogResponse {
                    tables_resp: vec![PbFetchLogRespForTable {
                        table_id: 11,
                        buckets_resp: vec![
                            bucket(0, None),
                            bucket(1, Some(0)),
                            bucket(2, Some(100)),
                        ],
                    }],
                },
                1,
            ),
            (
                FetchLogResponse {
                    tables_resp: vec![
                        PbFetchLogRespForTable {
                            table_id: 12,
                            buckets_resp: vec![
                                bucket(0, Some(RECORDS_INLINE_MAX)),
                                errored,
                                pruned,
                            ],
                        },
                        PbFetchLogRespForTable {
                            table_id: 13,
                            buckets_resp: vec![bucket(1, Some(1 << 20)), bucket(2, Some(10))],
                        },
                    ],
                },
                // head, 4 KiB, head, 12 KiB, head, 1 MiB, tail
                7,
            ),
        ];
        for (response, chunks) in cases {
            let frame = encode_fetch_success(42, &response);
            assert_eq!(frame.chunks().len(), chunks, "{response:?}");
            assert_eq!(frame.into_bytes(), encode_success(42, &response));
        }
    }

    #[test]
    fn large_records_are_the_read_buffer_itself() {
        let records = Bytes::from(vec![5u8; RECORDS_INLINE_MAX * 2]);
        let response = FetchLogResponse {
            tables_resp: vec![PbFetchLogRespForTable {
                table_id: 1,
                buckets_resp: vec![PbFetchLogRespForBucket {
                    records: Some(records.clone()),
                    ..bucket(0, None)
                }],
            }],
        };
        let frame = encode_fetch_success(1, &response);
        assert!(
            frame
                .chunks()
                .iter()
                .any(|chunk| chunk.as_ptr() == records.as_ptr() && chunk.len() == records.len()),
            "the records chunk shares the records' memory"
        );
    }
}
