//! Read-only views of Fluss log record batches as the server needs them: walking the batches
//! of a request, their writer id and sequence, and rewriting a batch around new Arrow data
//! (projection) or building one from scratch (a primary-key table's changelog).
//!
//! Layout (little-endian): base offset i64 @0, length i32 @8 (bytes after this field), magic
//! u8 @12, commit timestamp i64 @13, [V2: leader epoch i32 @21], CRC u32, schema id i16,
//! attributes u8, last offset delta i32, writer id i64, batch sequence i32, record count i32,
//! [V1+: statistics length i32 + statistics], then for a changelog batch one change-type byte
//! per record, then the Arrow IPC record batch message. The CRC (CRC-32C) covers everything
//! from the schema id to the end.

use crate::protocol::{ApiError, code};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::{BufMut, Bytes, BytesMut};

pub const LOG_OVERHEAD: usize = 12;
const MAGIC_OFFSET: usize = 12;
const COMMIT_TIMESTAMP_OFFSET: usize = 13;
const CRC_OFFSET_V0: usize = 21;
const V0_HEADER_BYTES: usize = 48;
const V1_HEADER_BYTES: usize = 52;
const V2_HEADER_BYTES: usize = 56;
pub use crate::storage::batch::{APPEND_ONLY_FLAG, NO_WRITER_ID};

/// One batch inside a buffer of concatenated batches.
#[derive(Debug, Clone)]
pub struct BatchView {
    pub data: Bytes,
}

impl BatchView {
    pub fn magic(&self) -> u8 {
        self.data[MAGIC_OFFSET]
    }

    /// Byte shift of the fields after the commit timestamp (V2 inserts a leader epoch).
    fn shift(&self) -> usize {
        if self.magic() >= 2 { 4 } else { 0 }
    }

    fn i16_at(&self, at: usize) -> i16 {
        i16::from_le_bytes(self.data[at..at + 2].try_into().expect("2 bytes"))
    }
    fn i32_at(&self, at: usize) -> i32 {
        i32::from_le_bytes(self.data[at..at + 4].try_into().expect("4 bytes"))
    }
    fn i64_at(&self, at: usize) -> i64 {
        i64::from_le_bytes(self.data[at..at + 8].try_into().expect("8 bytes"))
    }

    pub fn base_offset(&self) -> i64 {
        self.i64_at(0)
    }
    pub fn commit_timestamp(&self) -> i64 {
        self.i64_at(COMMIT_TIMESTAMP_OFFSET)
    }
    #[cfg_attr(not(test), allow(dead_code))]
    fn crc_offset(&self) -> usize {
        CRC_OFFSET_V0 + self.shift()
    }
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn crc(&self) -> u32 {
        u32::from_le_bytes(
            self.data[self.crc_offset()..self.crc_offset() + 4]
                .try_into()
                .expect("4 bytes"),
        )
    }
    pub fn schema_id(&self) -> i16 {
        self.i16_at(25 + self.shift())
    }
    pub fn attributes(&self) -> u8 {
        self.data[27 + self.shift()]
    }
    pub fn last_offset_delta(&self) -> i32 {
        self.i32_at(28 + self.shift())
    }
    pub fn writer_id(&self) -> i64 {
        self.i64_at(32 + self.shift())
    }
    pub fn batch_sequence(&self) -> i32 {
        self.i32_at(40 + self.shift())
    }
    pub fn record_count(&self) -> i32 {
        self.i32_at(44 + self.shift())
    }
    pub fn is_append_only(&self) -> bool {
        self.attributes() & APPEND_ONLY_FLAG != 0
    }
    pub fn next_offset(&self) -> i64 {
        self.base_offset() + i64::from(self.last_offset_delta()) + 1
    }

    fn header_bytes(&self) -> usize {
        match self.magic() {
            0 => V0_HEADER_BYTES,
            1 => V1_HEADER_BYTES,
            _ => V2_HEADER_BYTES,
        }
    }

    /// Where the change types (or, for an append-only batch, the Arrow data) start.
    fn records_offset(&self) -> Result<usize, String> {
        let header = self.header_bytes();
        if self.magic() == 0 {
            return Ok(header);
        }
        let stats_len = self.i32_at(header - 4);
        let stats_len = usize::try_from(stats_len)
            .map_err(|_| format!("negative statistics length {stats_len}"))?;
        let offset = header + stats_len;
        if offset > self.data.len() {
            return Err(format!(
                "statistics of {stats_len} bytes run past the batch"
            ));
        }
        Ok(offset)
    }

    /// Checks what the server relies on: magic, header length, CRC, counts (tests use it on
    /// batches the server builds; client batches are checked by the log tablet).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn validate(&self) -> Result<(), String> {
        let magic = self.magic();
        if magic > 2 {
            return Err(format!("unsupported log batch magic {magic}"));
        }
        if self.data.len() < self.header_bytes() {
            return Err(format!(
                "batch of {} bytes is shorter than its header",
                self.data.len()
            ));
        }
        let computed = crc32c::crc32c(&self.data[self.crc_offset() + 4..]);
        if computed != self.crc() {
            return Err(format!(
                "batch CRC mismatch (stored {:#x}, computed {computed:#x})",
                self.crc()
            ));
        }
        let count = self.record_count();
        if count < 0 {
            return Err(format!("negative record count {count}"));
        }
        let delta = self.last_offset_delta();
        if delta < 0 || (count > 0 && delta != count - 1) {
            return Err(format!(
                "last offset delta {delta} does not match record count {count}"
            ));
        }
        self.records_offset()?;
        Ok(())
    }

    /// The change-type bytes (empty for append-only) and the Arrow IPC message.
    pub fn split_records(&self) -> Result<(Bytes, Bytes), String> {
        let start = self.records_offset()?;
        if self.is_append_only() {
            return Ok((Bytes::new(), self.data.slice(start..)));
        }
        let count = self.record_count() as usize;
        if start + count > self.data.len() {
            return Err("change-type vector runs past the batch".into());
        }
        Ok((
            self.data.slice(start..start + count),
            self.data.slice(start + count..),
        ))
    }
}

/// Splits a buffer of concatenated batches; fails on a truncated or malformed batch.
pub fn split_batches(mut records: Bytes) -> Result<Vec<BatchView>, String> {
    let mut batches = Vec::new();
    while !records.is_empty() {
        if records.len() < LOG_OVERHEAD + 1 {
            return Err(format!("trailing {} bytes are not a batch", records.len()));
        }
        let length = i32::from_le_bytes(records[8..12].try_into().expect("4 bytes"));
        let size = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(LOG_OVERHEAD))
            .filter(|&size| size <= records.len() && size > MAGIC_OFFSET)
            .ok_or_else(|| {
                format!(
                    "batch length {length} does not fit the {} bytes left",
                    records.len()
                )
            })?;
        batches.push(BatchView {
            data: records.split_to(size),
        });
    }
    Ok(batches)
}

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
pub fn build_batch(fields: HeaderFields, change_types: &[u8], arrow_message: &[u8]) -> Bytes {
    let total = V0_HEADER_BYTES + change_types.len() + arrow_message.len();
    let mut buf = BytesMut::with_capacity(total);
    buf.put_i64_le(fields.base_offset);
    buf.put_i32_le((total - LOG_OVERHEAD) as i32);
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
    debug_assert_eq!(buf.len(), V0_HEADER_BYTES);
    buf.put_slice(change_types);
    buf.put_slice(arrow_message);
    let crc = crc32c::crc32c(&buf[CRC_OFFSET_V0 + 4..]);
    buf[CRC_OFFSET_V0..CRC_OFFSET_V0 + 4].copy_from_slice(&crc.to_le_bytes());
    buf.freeze()
}

/// Serializes one record batch as an Arrow IPC message without the schema, the way Fluss
/// log batches carry it.
pub fn encode_arrow_message(batch: &RecordBatch) -> Result<Vec<u8>, ApiError> {
    let internal = |e: arrow::error::ArrowError| {
        ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("arrow encode: {e}"))
    };
    let mut buf = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut buf, batch.schema_ref())
        .map_err(internal)?;
    let schema_bytes = writer.get_ref().len();
    writer.write(batch).map_err(internal)?;
    Ok(writer.get_ref()[schema_bytes..].to_vec())
}

/// Upper bound on the decompressed bytes of one batch's Arrow buffers. Clients write batches
/// of a few MiB (fluss-rs: `writer_batch_size`), so this only stops a lie.
const ARROW_DECODED_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Upper bound on the rows of one batch's Arrow data, for the same reason.
const ARROW_ROWS_MAX: i64 = 64 * 1024 * 1024;

/// An Arrow IPC record batch message whose metadata has been checked against its body.
struct ArrowMessage<'a> {
    parsed: arrow::ipc::Message<'a>,
    batch: arrow::ipc::RecordBatch<'a>,
    body_start: usize,
}

/// Parses the metadata of an Arrow IPC record batch message and checks what arrow's reader
/// trusts: every buffer lies inside the body (it panics otherwise), compressed buffers claim a
/// bounded decoded size (it allocates whatever they claim, and a failed allocation aborts the
/// process), field lengths fit the row count, and the field count matches `schema`. Costs
/// O(columns): nothing is decompressed.
fn parse_arrow_message<'a>(
    message: &'a Bytes,
    schema: &SchemaRef,
) -> Result<ArrowMessage<'a>, String> {
    if message.len() < 8 {
        return Err(format!(
            "arrow message of {} bytes is too short",
            message.len()
        ));
    }
    let continuation = u32::from_le_bytes(message[0..4].try_into().expect("4 bytes"));
    if continuation != 0xFFFF_FFFF {
        return Err(format!("bad arrow continuation marker {continuation:#x}"));
    }
    let metadata_len = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes")) as usize;
    let metadata_end = 8usize
        .checked_add(metadata_len)
        .filter(|&e| e <= message.len())
        .ok_or("arrow metadata runs past the batch")?;
    let parsed =
        arrow::ipc::root_as_message(&message[8..metadata_end]).map_err(|e| e.to_string())?;
    let batch = parsed
        .header_as_record_batch()
        .ok_or("arrow message is not a record batch")?;
    let body_start = (8 + ((metadata_len + 7) & !7)).min(message.len());
    let body_len = message.len() - body_start;
    let compressed = batch.compression().is_some();
    let mut decoded_bytes = 0u64;
    for (index, buffer) in batch.buffers().into_iter().flatten().enumerate() {
        let end = u64::try_from(buffer.offset())
            .ok()
            .zip(u64::try_from(buffer.length()).ok())
            .and_then(|(offset, length)| offset.checked_add(length));
        if end.is_none_or(|end| end > body_len as u64) {
            return Err(format!(
                "arrow buffer {index} (offset {}, length {}) lies outside the {body_len}-byte body",
                buffer.offset(),
                buffer.length()
            ));
        }
        if compressed && buffer.length() >= 8 {
            let at = body_start + buffer.offset() as usize;
            let claimed = i64::from_le_bytes(message[at..at + 8].try_into().expect("8 bytes"));
            decoded_bytes = decoded_bytes.saturating_add(u64::try_from(claimed).unwrap_or(0));
            if decoded_bytes > ARROW_DECODED_BYTES_MAX {
                return Err(format!(
                    "compressed arrow buffers claim more than {ARROW_DECODED_BYTES_MAX} bytes decoded"
                ));
            }
        }
    }
    let rows = batch.length();
    if !(0..=ARROW_ROWS_MAX).contains(&rows) {
        return Err(format!(
            "arrow batch of {rows} rows (at most {ARROW_ROWS_MAX})"
        ));
    }
    let nodes = batch.nodes().map_or(0, |nodes| nodes.len());
    let expected_nodes: usize = schema
        .fields()
        .iter()
        .map(|f| field_nodes(f.data_type()))
        .sum();
    if nodes != expected_nodes {
        return Err(format!(
            "arrow batch has {nodes} field nodes, the table's schema needs {expected_nodes}"
        ));
    }
    for node in batch.nodes().into_iter().flatten() {
        if !(0..=rows).contains(&node.length()) || !(0..=node.length()).contains(&node.null_count())
        {
            return Err(format!(
                "arrow field of {} values ({} null) in a batch of {rows} rows",
                node.length(),
                node.null_count()
            ));
        }
    }
    Ok(ArrowMessage {
        parsed,
        batch,
        body_start,
    })
}

/// Field nodes an IPC record batch carries for a column of `data_type` (one per array in the
/// column's tree).
fn field_nodes(data_type: &arrow::datatypes::DataType) -> usize {
    use arrow::datatypes::DataType;
    match data_type {
        DataType::List(child)
        | DataType::LargeList(child)
        | DataType::FixedSizeList(child, _)
        | DataType::Map(child, _) => 1 + field_nodes(child.data_type()),
        DataType::Struct(children) => {
            1 + children
                .iter()
                .map(|c| field_nodes(c.data_type()))
                .sum::<usize>()
        }
        _ => 1,
    }
}

/// Checks a client's Arrow IPC message against the table's schema without decoding it (see
/// [`parse_arrow_message`]) and returns its row count.
pub fn check_arrow_message(message: &Bytes, schema: &SchemaRef) -> Result<i64, String> {
    parse_arrow_message(message, schema).map(|m| m.batch.length())
}

/// Decodes the Arrow IPC message of a batch with the table's full schema, keeping only the
/// `projection` columns (sorted ascending, as the client expects them on the wire).
pub fn decode_arrow_message(
    message: &Bytes,
    schema: &SchemaRef,
    projection: Option<&[usize]>,
) -> Result<RecordBatch, String> {
    let checked = parse_arrow_message(message, schema)?;
    let body = arrow::buffer::Buffer::from(message.slice(checked.body_start..));
    // The checks above keep the reader from slicing outside the body or allocating what the
    // metadata claims; what else it asserts on (a validity buffer shorter than its field, say)
    // must not take the server down, so a panic here is an invalid batch. The reader only
    // reads its inputs.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        arrow::ipc::reader::read_record_batch(
            &body,
            checked.batch,
            schema.clone(),
            &std::collections::HashMap::new(),
            projection,
            &checked.parsed.version(),
        )
    }))
    .map_err(|_| "arrow data is inconsistent with its metadata".to_string())?
    .map_err(|e| e.to_string())
}

/// Rewrites a batch so its Arrow data holds only the projected columns. Offsets, timestamp,
/// writer fields and change types are kept; statistics are dropped (they describe the full row).
pub fn project_batch(
    batch: &BatchView,
    schema: &SchemaRef,
    projection: &[usize],
) -> Result<Bytes, String> {
    if batch.record_count() == 0 {
        return Ok(batch.data.clone());
    }
    let (change_types, message) = batch.split_records()?;
    let projected = decode_arrow_message(&message, schema, Some(projection))?;
    let arrow_message = encode_arrow_message(&projected).map_err(|e| e.message)?;
    Ok(build_batch(
        HeaderFields {
            base_offset: batch.base_offset(),
            commit_timestamp: batch.commit_timestamp(),
            schema_id: batch.schema_id(),
            append_only: batch.is_append_only(),
            writer_id: batch.writer_id(),
            batch_sequence: batch.batch_sequence(),
            record_count: batch.record_count(),
        },
        &change_types,
        &arrow_message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn sample() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["x", "y"])),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    #[test]
    fn built_batch_validates_and_projects() {
        let (schema, record_batch) = sample();
        let message = encode_arrow_message(&record_batch).unwrap();
        let fields = HeaderFields {
            base_offset: 5,
            commit_timestamp: 99,
            schema_id: 1,
            append_only: false,
            writer_id: NO_WRITER_ID,
            batch_sequence: -1,
            record_count: 2,
        };
        let data = build_batch(fields, &[1, 4], &message);
        let batches = split_batches(data).unwrap();
        assert_eq!(batches.len(), 1);
        let view = &batches[0];
        view.validate().unwrap();
        assert_eq!(
            (
                view.base_offset(),
                view.next_offset(),
                view.commit_timestamp()
            ),
            (5, 7, 99)
        );
        let projected = split_batches(project_batch(view, &schema, &[1]).unwrap()).unwrap();
        projected[0].validate().unwrap();
        let (change_types, message) = projected[0].split_records().unwrap();
        assert_eq!(&change_types[..], &[1, 4]);
        let projected_schema = Arc::new(schema.project(&[1]).unwrap());
        let decoded = decode_arrow_message(&message, &projected_schema, None).unwrap();
        assert_eq!(decoded.num_columns(), 1);
        assert_eq!(decoded.num_rows(), 2);
    }

    #[test]
    fn split_rejects_garbage() {
        assert!(split_batches(Bytes::from_static(&[1, 2, 3])).is_err());
        let mut bad = vec![0u8; 20];
        bad[8..12].copy_from_slice(&1000i32.to_le_bytes());
        assert!(split_batches(Bytes::from(bad)).is_err());
    }
}
