//! The Arrow IPC part of a batch: encode a record batch the way Fluss log batches carry it
//! (without the schema message), check a client's message against the table's schema without
//! decoding it, decode it, and rewrite a batch around projected columns.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;

use super::build::{HeaderFields, build_batch};
use super::header::Batch;

/// Serializes one record batch as an Arrow IPC message without the schema, the way Fluss
/// log batches carry it.
pub fn encode_arrow_message(batch: &RecordBatch) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let mut buf = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut buf, batch.schema_ref())?;
    let schema_bytes = writer.get_ref().len();
    writer.write(batch)?;
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
    check_buffers(message, &batch, body_start)?;
    check_nodes(&batch, schema)?;
    Ok(ArrowMessage {
        parsed,
        batch,
        body_start,
    })
}

/// Every buffer of `batch` lies inside the body (from `body_start` of `message`), and its
/// compressed buffers claim at most [`ARROW_DECODED_BYTES_MAX`] decoded bytes in all.
fn check_buffers(
    message: &Bytes,
    batch: &arrow::ipc::RecordBatch,
    body_start: usize,
) -> Result<(), String> {
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
    Ok(())
}

/// `batch` has at most [`ARROW_ROWS_MAX`] rows and the field nodes of `schema`, each with a
/// length and null count that fit.
fn check_nodes(batch: &arrow::ipc::RecordBatch, schema: &SchemaRef) -> Result<(), String> {
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
    // Nodes come in the schema's depth-first order: each column's own node first, then its
    // children's. A column has at most a value per row; a child of a list or map holds the
    // elements of every row, so only ARROW_ROWS_MAX bounds it.
    let mut column_nodes = schema.fields().iter().flat_map(|f| {
        std::iter::once(true).chain(std::iter::repeat_n(false, field_nodes(f.data_type()) - 1))
    });
    for node in batch.nodes().into_iter().flatten() {
        let values_max = if column_nodes.next() == Some(true) {
            rows
        } else {
            ARROW_ROWS_MAX
        };
        if !(0..=values_max).contains(&node.length())
            || !(0..=node.length()).contains(&node.null_count())
        {
            return Err(format!(
                "arrow field of {} values ({} null) in a batch of {rows} rows",
                node.length(),
                node.null_count()
            ));
        }
    }
    Ok(())
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
    batch: &Batch,
    schema: &SchemaRef,
    projection: &[usize],
) -> Result<Bytes, String> {
    project_evolved_batch(batch, schema, (schema, batch.schema_id()), projection)
}

/// [`project_batch`] of a batch written under the schema `written` to the table's `current`
/// schema (with its id), which may have more columns: schemas only grow by columns added at
/// the end, so a projected column the batch lacks is null in each of its rows, and the
/// rewritten batch carries the current schema's id.
pub fn project_evolved_batch(
    batch: &Batch,
    written: &SchemaRef,
    (current, current_id): (&SchemaRef, i16),
    projection: &[usize],
) -> Result<Bytes, String> {
    if batch.record_count() == 0 {
        return Ok(batch.data.clone());
    }
    let (change_types, message) = batch.records().map_err(|e| e.to_string())?;
    let written_count = written.fields().len();
    let (projected, schema_id) = if written_count >= current.fields().len() {
        let projected = decode_arrow_message(&message, written, Some(projection))?;
        (projected, batch.schema_id())
    } else {
        let kept: Vec<usize> = projection
            .iter()
            .copied()
            .filter(|&index| index < written_count)
            .collect();
        let decoded = decode_arrow_message(&message, written, Some(&kept))?;
        let rows = decoded.num_rows();
        let mut columns = decoded.columns().to_vec().into_iter();
        let mut fields = Vec::with_capacity(projection.len());
        let mut arrays = Vec::with_capacity(projection.len());
        for &index in projection {
            let field = current.field(index).clone();
            arrays.push(if index < written_count {
                columns.next().ok_or("projected column missing")?
            } else {
                arrow::array::new_null_array(field.data_type(), rows)
            });
            fields.push(field);
        }
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
        let projected = RecordBatch::try_new(schema, arrays).map_err(|e| e.to_string())?;
        (projected, current_id)
    };
    let arrow_message = encode_arrow_message(&projected).map_err(|e| e.to_string())?;
    let h = &batch.header;
    Ok(build_batch(
        HeaderFields {
            base_offset: h.base_offset,
            commit_timestamp: h.commit_timestamp_ms,
            schema_id,
            append_only: h.is_append_only(),
            writer_id: h.writer_id,
            batch_sequence: h.batch_sequence,
            record_count: h.record_count,
        },
        &change_types,
        &arrow_message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::header::NO_WRITER_ID;
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn sample() -> (SchemaRef, RecordBatch) {
        let batch = crate::codec::testing::two_rows();
        (batch.schema(), batch)
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
        let batches = Batch::split(data, true).unwrap();
        assert_eq!(batches.len(), 1);
        let view = &batches[0];
        assert_eq!(
            (
                view.base_offset(),
                view.next_offset(),
                view.header.commit_timestamp_ms
            ),
            (5, 7, 99)
        );
        let projected = Batch::split(project_batch(view, &schema, &[1]).unwrap(), true).unwrap();
        let (change_types, message) = projected[0].records().unwrap();
        assert_eq!(&change_types[..], &[1, 4]);
        let projected_schema = Arc::new(schema.project(&[1]).unwrap());
        let decoded = decode_arrow_message(&message, &projected_schema, None).unwrap();
        assert_eq!(decoded.num_columns(), 1);
        assert_eq!(decoded.num_rows(), 2);
    }

    /// Regression (issue 16, item 5): every log batch with an ARRAY column was refused as
    /// corrupt (and fluss-rs retried it forever) when its rows held more elements than the
    /// batch has rows: the list's child node was bounded by the row count.
    #[test]
    fn a_list_may_hold_more_elements_than_the_batch_has_rows() {
        use arrow::array::{Array, ListArray, StructArray};
        use arrow::datatypes::Int32Type;
        let items = ListArray::from_iter_primitive::<Int32Type, _, _>([
            Some(vec![Some(1), Some(2), None, Some(3)]),
            None,
        ]);
        let rows = StructArray::from(vec![(
            Arc::new(Field::new("items", items.data_type().clone(), true)),
            Arc::new(items.clone()) as _,
        )]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("items", items.data_type().clone(), true),
            Field::new("row", rows.data_type().clone(), true),
        ]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(items), Arc::new(rows)]).unwrap();
        let message = encode_arrow_message(&batch).unwrap();
        assert_eq!(
            check_arrow_message(&Bytes::from(message.clone()), &schema),
            Ok(2)
        );
        let decoded =
            decode_arrow_message(&Bytes::from(message.clone()), &schema, Some(&[1])).unwrap();
        assert_eq!(decoded.column(0).as_ref(), batch.column(1).as_ref());

        // A column (the list itself) is still bounded by the rows of the batch. Field nodes
        // are (length, null count) pairs of i64; the list column's (2, 1) comes first.
        let mut lying = message;
        let node = lying
            .windows(16)
            .position(|w| w[..8] == 2i64.to_le_bytes() && w[8..] == 1i64.to_le_bytes())
            .expect("the list column's field node");
        lying[node..node + 8].copy_from_slice(&3i64.to_le_bytes());
        let error = check_arrow_message(&Bytes::from(lying), &schema).unwrap_err();
        assert!(error.contains("arrow field of 3 values"), "{error}");
    }

    #[test]
    fn split_rejects_garbage() {
        assert!(Batch::split(Bytes::from_static(&[1, 2, 3]), false).is_err());
        let mut bad = vec![0u8; 60];
        bad[8..12].copy_from_slice(&1000i32.to_le_bytes());
        assert!(Batch::split(Bytes::from(bad), false).is_err());
    }
}
