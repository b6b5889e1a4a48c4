//! The per-column statistics a log record batch of magic 1 or 2 may carry between its header
//! and its records (Fluss 1.0; a writer adds them for the columns of the table property
//! `table.statistics.columns`): for each collected column its null count, and the batch's
//! minimum and maximum as two rows in Fluss's aligned row layout. FetchLog prunes whole
//! batches by them when a client pushes a filter down.
//!
//! The block, little-endian:
//!
//! | field | bytes |
//! |---|---|
//! | version (1) | u8 |
//! | column count `n` | i16 |
//! | table column index of each | i16 x n |
//! | null count of each | i32 x n |
//! | min row length, min row | i32, bytes |
//! | max row length, max row | i32, bytes |
//!
//! An aligned row of `n` fields is a null bitset (8 header bits, then bit `8 + i` for field
//! `i`, padded to whole 8-byte words), one 8-byte slot per field, then a variable-length part.
//! A slot holds a fixed-size value (boolean, integers, floats, DATE, TIME, a compact decimal's
//! unscaled long, a compact timestamp's epoch milliseconds) or points into the variable part:
//! `(offset << 32) | length` for strings and non-compact decimals (big-endian two's complement
//! unscaled bytes), `(offset << 32) | nano_of_millisecond` for a non-compact timestamp whose
//! epoch milliseconds are the 8 bytes at `offset`. A string of at most 7 bytes is inlined: its
//! slot's last byte is `0x80 | length`, its bytes first. A field all of whose values were null
//! has a null bound.
//!
//! Anything this reader does not recognise (another version, a truncated block, a type without
//! statistics) makes it answer `None`, and the batch is kept.

use fluss::metadata::DataType;

const STATISTICS_VERSION: u8 = 1;
const HEADER_BITS: usize = 8;
/// Precision up to which Fluss stores a decimal's unscaled value as a long.
const DECIMAL_COMPACT_PRECISION_MAX: u32 = 18;
/// Precision up to which Fluss stores a timestamp as epoch milliseconds alone.
const TIMESTAMP_COMPACT_PRECISION_MAX: u32 = 3;

/// A bound or a literal, comparable with another of the same kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Bool(bool),
    /// Every integer type, DATE (days) and TIME (milliseconds).
    Int(i64),
    /// FLOAT and DOUBLE.
    Float(f64),
    /// STRING and CHAR, as UTF-8 bytes (their order is the code points').
    Str(Vec<u8>),
    /// A decimal's unscaled value at its column's scale.
    Decimal(i128),
    /// TIMESTAMP and TIMESTAMP_LTZ: epoch milliseconds and nanoseconds of the millisecond.
    Timestamp(i64, i32),
}

impl Scalar {
    /// The order of two scalars of the same kind; `None` across kinds or for a NaN.
    pub fn compare(&self, other: &Scalar) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Scalar::Bool(a), Scalar::Bool(b)) => Some(a.cmp(b)),
            (Scalar::Int(a), Scalar::Int(b)) => Some(a.cmp(b)),
            (Scalar::Float(a), Scalar::Float(b)) => a.partial_cmp(b),
            (Scalar::Str(a), Scalar::Str(b)) => Some(a.cmp(b)),
            (Scalar::Decimal(a), Scalar::Decimal(b)) => Some(a.cmp(b)),
            (Scalar::Timestamp(a, an), Scalar::Timestamp(b, bn)) => Some((a, an).cmp(&(b, bn))),
            _ => None,
        }
    }
}

/// One collected column's statistics: `min` and `max` are `None` when every value was null.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStatistics {
    pub null_count: i32,
    pub min: Option<Scalar>,
    pub max: Option<Scalar>,
}

/// The statistics of one batch, by table column index.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStatistics {
    pub record_count: i32,
    pub columns: Vec<(usize, ColumnStatistics)>,
}

impl BatchStatistics {
    pub fn column(&self, index: usize) -> Option<&ColumnStatistics> {
        self.columns
            .iter()
            .find_map(|(i, stats)| (*i == index).then_some(stats))
    }
}

/// Reads a statistics block of a batch of `record_count` records whose table columns have
/// `column_types`; `None` when the block is not one this reader knows.
pub fn parse(
    block: &[u8],
    record_count: i32,
    column_types: &[DataType],
) -> Option<BatchStatistics> {
    let mut reader = Reader {
        bytes: block,
        at: 0,
    };
    if reader.u8()? != STATISTICS_VERSION {
        return None;
    }
    let count = usize::try_from(reader.i16()?).ok()?;
    let mut indexes = Vec::with_capacity(count.min(column_types.len()));
    for _ in 0..count {
        let index = usize::try_from(reader.i16()?).ok()?;
        column_types.get(index)?;
        indexes.push(index);
    }
    let mut null_counts = Vec::with_capacity(indexes.len());
    for _ in 0..count {
        null_counts.push(reader.i32()?);
    }
    let types: Vec<&DataType> = indexes.iter().map(|&i| &column_types[i]).collect();
    let min_len = usize::try_from(reader.i32()?).ok()?;
    let min_row = reader.take(min_len)?;
    let max_len = usize::try_from(reader.i32()?).ok()?;
    let max_row = reader.take(max_len)?;
    let columns = indexes
        .iter()
        .enumerate()
        .map(|(position, &index)| {
            let stats = ColumnStatistics {
                null_count: null_counts[position],
                min: read_field(min_row, count, position, types[position]),
                max: read_field(max_row, count, position, types[position]),
            };
            (index, stats)
        })
        .collect();
    Some(BatchStatistics {
        record_count,
        columns,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

fn null_bits_bytes(arity: usize) -> usize {
    (arity + 63 + HEADER_BITS) / 64 * 8
}

/// Field `position` of an aligned row of `arity` fields, read as `data_type`; `None` when it
/// is null, out of bounds, or of a type without statistics.
fn read_field(row: &[u8], arity: usize, position: usize, data_type: &DataType) -> Option<Scalar> {
    let bit = position + HEADER_BITS;
    if row.get(bit / 8)? & (1 << (bit % 8)) != 0 {
        return None;
    }
    let slot_at = null_bits_bytes(arity) + 8 * position;
    let slot: [u8; 8] = row.get(slot_at..slot_at + 8)?.try_into().ok()?;
    let long = i64::from_le_bytes(slot);
    let int = i32::from_le_bytes(slot[..4].try_into().ok()?);
    let pointed = |length: usize| -> Option<&[u8]> {
        let offset = usize::try_from(long >> 32).ok()?;
        row.get(offset..offset.checked_add(length)?)
    };
    Some(match data_type {
        DataType::Boolean(_) => Scalar::Bool(slot[0] != 0),
        DataType::TinyInt(_) => Scalar::Int(i64::from(slot[0] as i8)),
        DataType::SmallInt(_) => Scalar::Int(i64::from(i16::from_le_bytes([slot[0], slot[1]]))),
        DataType::Int(_) | DataType::Date(_) | DataType::Time(_) => Scalar::Int(i64::from(int)),
        DataType::BigInt(_) => Scalar::Int(long),
        DataType::Float(_) => {
            Scalar::Float(f64::from(f32::from_le_bytes(slot[..4].try_into().ok()?)))
        }
        DataType::Double(_) => Scalar::Float(f64::from_le_bytes(slot)),
        DataType::String(_) | DataType::Char(_) => {
            if slot[7] & 0x80 != 0 {
                let length = usize::from(slot[7] & 0x7f);
                Scalar::Str(slot.get(..length)?.to_vec())
            } else {
                Scalar::Str(pointed((long & 0xffff_ffff) as usize)?.to_vec())
            }
        }
        DataType::Decimal(decimal) if decimal.precision() <= DECIMAL_COMPACT_PRECISION_MAX => {
            Scalar::Decimal(i128::from(long))
        }
        DataType::Decimal(_) => {
            let bytes = pointed((long & 0xffff_ffff) as usize)?;
            if bytes.is_empty() || bytes.len() > 16 {
                return None;
            }
            // Big-endian two's complement, sign-extended to 128 bits.
            let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut wide = [fill; 16];
            wide[16 - bytes.len()..].copy_from_slice(bytes);
            Scalar::Decimal(i128::from_be_bytes(wide))
        }
        DataType::Timestamp(t) if t.precision() <= TIMESTAMP_COMPACT_PRECISION_MAX => {
            Scalar::Timestamp(long, 0)
        }
        DataType::TimestampLTz(t) if t.precision() <= TIMESTAMP_COMPACT_PRECISION_MAX => {
            Scalar::Timestamp(long, 0)
        }
        DataType::Timestamp(_) | DataType::TimestampLTz(_) => {
            let millis = i64::from_le_bytes(pointed(8)?.try_into().ok()?);
            Scalar::Timestamp(millis, (long & 0xffff_ffff) as i32)
        }
        _ => return None,
    })
}
