//! The contract between the Fluss source and the sinks: a changelog batch is an Arrow
//! `RecordBatch` with the table's user columns first, then the system columns below, in this
//! order. The lake stores the user columns and `__bucket`, `__offset`, `__timestamp`; the
//! change type travels in the stream only. A partitioned table's changelog, when the source is
//! asked for it (tiering), also carries `__partition_id` last, and its lake stores it before
//! `__bucket`: offsets are per bucket of a partition, and a partition id is never reused
//! while its name may be (a partition dropped and created again).

use std::collections::BTreeMap;

use arrow::datatypes::{DataType, Field, TimeUnit};

pub const PARTITION_ID_COLUMN: &str = "__partition_id";
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

/// A bucket of a table's changelog, the unit offsets count in: one of an unpartitioned table's
/// buckets, or bucket `bucket` of the partition with id `partition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketKey {
    pub partition: Option<i64>,
    pub bucket: i32,
}

impl BucketKey {
    /// A bucket of an unpartitioned table.
    pub const fn table(bucket: i32) -> BucketKey {
        BucketKey {
            partition: None,
            bucket,
        }
    }

    /// A bucket of a partition.
    pub const fn partition(partition: i64, bucket: i32) -> BucketKey {
        BucketKey {
            partition: Some(partition),
            bucket,
        }
    }

    /// `3`, or for a partition's bucket `p12/3`: for lists of offsets.
    pub fn short(&self) -> String {
        match self.partition {
            None => self.bucket.to_string(),
            Some(p) => format!("p{p}/{}", self.bucket),
        }
    }
}

impl From<i32> for BucketKey {
    fn from(bucket: i32) -> BucketKey {
        BucketKey::table(bucket)
    }
}

impl std::fmt::Display for BucketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.partition {
            None => write!(f, "bucket {}", self.bucket),
            Some(p) => write!(f, "bucket {} of partition id {p}", self.bucket),
        }
    }
}

/// Values per bucket of an unpartitioned table, keyed as [`BucketKey`]s.
pub fn table_buckets<V>(values: impl IntoIterator<Item = (i32, V)>) -> BTreeMap<BucketKey, V> {
    values
        .into_iter()
        .map(|(b, v)| (BucketKey::table(b), v))
        .collect()
}

/// `__bucket`, `__offset`, `__timestamp`: the system columns as the lake stores them
/// (a partitioned table's lake has `__partition_id` before them, see [`lake_system_fields_of`]).
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

/// The lake's system columns of a table: a partitioned one's start with `__partition_id`.
pub fn lake_system_fields_of(partitioned: bool) -> Vec<Field> {
    let mut fields = Vec::with_capacity(4);
    if partitioned {
        fields.push(partition_id_field());
    }
    fields.extend(lake_system_fields());
    fields
}

/// `__partition_id`: the id of the partition a row of a partitioned table belongs to.
pub fn partition_id_field() -> Field {
    Field::new(PARTITION_ID_COLUMN, DataType::Int64, false)
}

/// The system columns of a changelog batch in the stream: the lake's, then `__change_type`.
pub fn stream_system_fields() -> Vec<Field> {
    let mut fields = lake_system_fields();
    fields.push(Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false));
    fields
}
