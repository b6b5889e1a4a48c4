//! The contract between the Fluss source and the sinks: a changelog batch is an Arrow
//! `RecordBatch` with the table's user columns first, then the system columns below, in this
//! order. The lake stores the user columns and `__bucket`, `__offset`, `__timestamp`; the
//! change type travels in the stream only.

use arrow::datatypes::{DataType, Field, TimeUnit};

pub const BUCKET_COLUMN: &str = "__bucket";
pub const OFFSET_COLUMN: &str = "__offset";
pub const TIMESTAMP_COLUMN: &str = "__timestamp";
pub const CHANGE_TYPE_COLUMN: &str = "__change_type";

/// Change types as Fluss encodes them in a log record batch (`+A` for log tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum ChangeType {
    AppendOnly = 0,
    Insert = 1,
    UpdateBefore = 2,
    UpdateAfter = 3,
    Delete = 4,
}

impl ChangeType {
    pub fn from_i8(value: i8) -> Option<ChangeType> {
        Some(match value {
            0 => ChangeType::AppendOnly,
            1 => ChangeType::Insert,
            2 => ChangeType::UpdateBefore,
            3 => ChangeType::UpdateAfter,
            4 => ChangeType::Delete,
            _ => return None,
        })
    }

    /// Whether the row is the key's image after this change (false for `-U` and `-D`).
    pub fn is_upsert(self) -> bool {
        matches!(
            self,
            ChangeType::AppendOnly | ChangeType::Insert | ChangeType::UpdateAfter
        )
    }
}

/// `__bucket`, `__offset`, `__timestamp`: the system columns as the lake stores them.
pub fn lake_system_fields() -> Vec<Field> {
    vec![
        Field::new(BUCKET_COLUMN, DataType::Int32, false),
        Field::new(OFFSET_COLUMN, DataType::Int64, false),
        Field::new(
            TIMESTAMP_COLUMN,
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
    ]
}

/// The system columns of a changelog batch in the stream: the lake's, then `__change_type`.
pub fn stream_system_fields() -> Vec<Field> {
    let mut fields = lake_system_fields();
    fields.push(Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false));
    fields
}
