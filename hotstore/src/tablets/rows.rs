//! Rows as the kv tablet stores them and the changelog carries them: the change-type bytes,
//! and [`RowCodec`] (the table's kv row format, with its schema id in front).

use super::TableRuntime;
use crate::catalog::{Version, VersionColumn};
use crate::protocol::{ApiError, code};
use fluss::metadata::KvFormat;
use fluss::row::encode::{RowEncoder, RowEncoderFactory};
use fluss::row::field_getter::FieldGetter;
use fluss::row::{Datum, RowDecoder, RowDecoderFactory};
use std::borrow::Cow;
use std::sync::Arc;

pub(crate) const INSERT: u8 = 1;
pub(crate) const UPDATE_BEFORE: u8 = 2;
pub(crate) const UPDATE_AFTER: u8 = 3;
pub(crate) const DELETE: u8 = 4;
pub(crate) const SCHEMA_ID_BYTES: usize = 2;

/// How many keys a changelog adds to its kv tablet: an INSERT is a key that was absent, a
/// DELETE one that goes; an update pair leaves the count alone.
pub(crate) fn row_count_delta(change_types: &[u8]) -> i64 {
    change_types
        .iter()
        .map(|&change| match change {
            INSERT => 1,
            DELETE => -1,
            _ => 0,
        })
        .sum()
}

fn kv_format(table: &TableRuntime) -> KvFormat {
    match table
        .entry
        .descriptor
        .properties()
        .get("table.kv.format")
        .map(String::as_str)
    {
        Some(format) if format.eq_ignore_ascii_case("INDEXED") => KvFormat::INDEXED,
        _ => KvFormat::COMPACTED,
    }
}

pub(crate) struct RowCodec {
    /// The decoder of rows in the table's current schema.
    pub(crate) decoder: Arc<dyn RowDecoder>,
    pub(crate) getters: Box<[FieldGetter]>,
    pub(crate) field_count: usize,
    pub(crate) kv_format: KvFormat,
    pub(crate) row_type: fluss::metadata::RowType,
    pub(crate) schema_id: i16,
    /// The table's earlier schemas, and their decoders, made at the first row written under
    /// one (most writes meet none, and a table that never gained a column has none).
    earlier_schemas: Arc<Vec<crate::catalog::EarlierSchema>>,
    earlier: std::cell::OnceCell<Vec<EarlierCodec>>,
}

struct EarlierCodec {
    schema_id: i16,
    decoder: Arc<dyn RowDecoder>,
    getters: Box<[FieldGetter]>,
}

impl RowCodec {
    pub(crate) fn new(table: &TableRuntime) -> Result<RowCodec, ApiError> {
        let row_type = table.entry.descriptor.schema().row_type().clone();
        let kv_format = kv_format(table);
        let internal = |e: fluss::error::Error| {
            ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("row decoder: {e}"))
        };
        let decoder = RowDecoderFactory::create(kv_format, row_type.clone()).map_err(internal)?;
        Ok(RowCodec {
            earlier_schemas: table.entry.earlier_schemas.clone(),
            earlier: std::cell::OnceCell::new(),
            getters: FieldGetter::create_field_getters(&row_type),
            field_count: row_type.fields().len(),
            decoder,
            kv_format,
            row_type,
            schema_id: table.entry.schema_id as i16,
        })
    }

    pub(crate) fn stored(&self, row: &[u8]) -> Vec<u8> {
        let mut value = Vec::with_capacity(SCHEMA_ID_BYTES + row.len());
        value.extend_from_slice(&self.schema_id.to_le_bytes());
        value.extend_from_slice(row);
        value
    }

    /// A stored value (schema id and row) in the current schema: as it is when written under
    /// it, else re-encoded with [`RowCodec::row_in_current`].
    pub(crate) fn current_stored(&self, stored: Vec<u8>) -> Result<Vec<u8>, ApiError> {
        let Some(id) = stored.get(..SCHEMA_ID_BYTES) else {
            return Ok(stored);
        };
        let schema_id = i16::from_le_bytes([id[0], id[1]]);
        if schema_id == self.schema_id {
            return Ok(stored);
        }
        let row = self.row_in_current(schema_id, &stored[SCHEMA_ID_BYTES..])?;
        Ok(self.stored(&row))
    }

    fn earlier_codecs(&self) -> Result<&[EarlierCodec], ApiError> {
        if let Some(codecs) = self.earlier.get() {
            return Ok(codecs);
        }
        let codecs =
            self.earlier_schemas
                .iter()
                .map(|earlier| {
                    let row_type = earlier.schema.row_type();
                    Ok(EarlierCodec {
                        schema_id: earlier.id as i16,
                        decoder: RowDecoderFactory::create(self.kv_format, row_type.clone())
                            .map_err(|e| {
                                ApiError::new(
                                    code::UNKNOWN_SERVER_ERROR,
                                    format!("row decoder of schema {}: {e}", earlier.id),
                                )
                            })?,
                        getters: FieldGetter::create_field_getters(row_type),
                    })
                })
                .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(self.earlier.get_or_init(|| codecs))
    }

    /// A row (without schema id) written under schema `schema_id`, in the current schema:
    /// schemas only grow by nullable columns added at the end, so the row keeps its values by
    /// position and the columns added since are null.
    pub(crate) fn row_in_current<'a>(
        &self,
        schema_id: i16,
        row: &'a [u8],
    ) -> Result<Cow<'a, [u8]>, ApiError> {
        if schema_id == self.schema_id {
            return Ok(Cow::Borrowed(row));
        }
        let earlier = self
            .earlier_codecs()?
            .iter()
            .find(|earlier| earlier.schema_id == schema_id)
            .ok_or_else(|| {
                ApiError::new(
                    code::SCHEMA_NOT_EXIST,
                    format!(
                        "a row has schema id {schema_id}, but the table's schemas are 1 to {}",
                        self.schema_id
                    ),
                )
            })?;
        let internal = |e: fluss::error::Error| {
            ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!(
                    "row of schema {schema_id} in schema {}: {e}",
                    self.schema_id
                ),
            )
        };
        let decoded = earlier.decoder.decode(row);
        let mut encoder =
            RowEncoderFactory::create(self.kv_format, self.row_type.clone()).map_err(internal)?;
        encoder.start_new_row().map_err(internal)?;
        for pos in 0..self.field_count {
            let datum = match earlier.getters.get(pos) {
                Some(getter) => getter.get_field(&decoded).map_err(internal)?,
                None => Datum::Null,
            };
            encoder.encode_field(pos, datum).map_err(internal)?;
        }
        Ok(Cow::Owned(encoder.finish_row().map_err(internal)?.to_vec()))
    }

    /// Encodes any row (e.g. one read back from the changelog) of `fields` columns in the
    /// table's kv format; the current schema's columns after those (added since the row was
    /// written) are null.
    pub(crate) fn encode_row(
        &self,
        row: &dyn fluss::row::InternalRow,
        fields: usize,
    ) -> Result<Vec<u8>, ApiError> {
        let internal = |e: fluss::error::Error| {
            ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("row encode: {e}"))
        };
        let mut encoder =
            RowEncoderFactory::create(self.kv_format, self.row_type.clone()).map_err(internal)?;
        encoder.start_new_row().map_err(internal)?;
        for pos in 0..self.field_count {
            let datum = if pos < fields {
                self.getters[pos].get_field(row).map_err(internal)?
            } else {
                Datum::Null
            };
            encoder.encode_field(pos, datum).map_err(internal)?;
        }
        Ok(encoder.finish_row().map_err(internal)?.to_vec())
    }

    /// The version of `row` (without schema id) in the versioned merge engine's column, as
    /// Fluss compares versions: a null is the smallest value of the column's type.
    pub(crate) fn version(&self, row: &[u8], column: VersionColumn) -> Result<Version, ApiError> {
        let internal = |reason: String| {
            ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!("version column: {reason}"),
            )
        };
        let decoded = self.decoder.decode(row);
        let datum = self.getters[column.position]
            .get_field(&decoded)
            .map_err(|e| internal(e.to_string()))?;
        match datum {
            Datum::Null => Ok(column.null),
            Datum::Int32(version) => Ok((i64::from(version), 0)),
            Datum::Int64(version) => Ok((version, 0)),
            Datum::TimestampNtz(ts) => Ok((ts.get_millisecond(), ts.get_nano_of_millisecond())),
            Datum::TimestampLtz(ts) => {
                Ok((ts.get_epoch_millisecond(), ts.get_nano_of_millisecond()))
            }
            // CreateTable admits only the types above.
            other => Err(internal(format!("{other} is not a version"))),
        }
    }

    /// Merges the target columns of `new` into `old` (both rows without schema id); with no
    /// old row the other columns are null.
    /// [`RowCodec::merge`] of an upsert, with `assigned` `(column, value, is_int)` giving an
    /// auto-increment column of a new key its value.
    pub(crate) fn merge_assigning(
        &self,
        old: Option<&[u8]>,
        new: &[u8],
        targets: &[usize],
        assigned: Option<(usize, i64, bool)>,
    ) -> Result<Vec<u8>, ApiError> {
        self.merge_with(old, new, targets, false, assigned)
    }

    pub(crate) fn merge(
        &self,
        old: Option<&[u8]>,
        new: &[u8],
        targets: &[usize],
        delete: bool,
    ) -> Result<Vec<u8>, ApiError> {
        self.merge_with(old, new, targets, delete, None)
    }

    fn merge_with(
        &self,
        old: Option<&[u8]>,
        new: &[u8],
        targets: &[usize],
        delete: bool,
        assigned: Option<(usize, i64, bool)>,
    ) -> Result<Vec<u8>, ApiError> {
        let internal = |e: fluss::error::Error| {
            ApiError::new(code::INVALID_TARGET_COLUMN, format!("partial update: {e}"))
        };
        let new_row = self.decoder.decode(new);
        let old_row = old.map(|old| self.decoder.decode(old));
        let mut encoder =
            RowEncoderFactory::create(self.kv_format, self.row_type.clone()).map_err(internal)?;
        encoder.start_new_row().map_err(internal)?;
        for pos in 0..self.field_count {
            let datum = if targets.contains(&pos) {
                if delete {
                    Datum::Null
                } else {
                    self.getters[pos].get_field(&new_row).map_err(internal)?
                }
            } else if let Some((_, value, is_int)) = assigned.filter(|(column, ..)| *column == pos)
            {
                if is_int {
                    Datum::Int32(value as i32)
                } else {
                    Datum::Int64(value)
                }
            } else {
                match &old_row {
                    Some(old_row) => self.getters[pos].get_field(old_row).map_err(internal)?,
                    None => Datum::Null,
                }
            };
            encoder.encode_field(pos, datum).map_err(internal)?;
        }
        Ok(encoder.finish_row().map_err(internal)?.to_vec())
    }
}
