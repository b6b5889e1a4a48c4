//! Partitions of partitioned tables, as Fluss 0.9.1 defines them: a partition is named by its
//! values in partition-key order joined with `$` (`2024-05-01$eu`), has a server-wide id that
//! is never reused (the catalog persists the next id with every change), and holds the table's
//! bucket count of buckets. What a partition spec must satisfy, and the error codes of a spec
//! that does not, follow Fluss's `PartitionUtils.validatePartitionSpec`.

use super::TableEntry;
use super::auto_partition::{AutoPartitionStrategy, NUM_PRECREATE, PARTITION_NAME_SEPARATOR};
use crate::protocol::{ApiError, code};
use fluss::metadata::DataType;
use std::collections::BTreeMap;

const PARTITION_VALUE_BYTES_MAX: usize = 200;
const INTERNAL_PREFIX: &str = "__";

/// A partition of a partitioned table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionEntry {
    /// Unique among every partition this server ever created, dropped ones included.
    pub id: i64,
    pub table_id: i64,
    /// The values in partition-key order joined by `$`.
    pub name: String,
    pub created_ms: i64,
}

impl PartitionEntry {
    /// The values in partition-key order (a value never holds `$`: see [`check_value`]).
    pub fn values(&self) -> Vec<&str> {
        self.name.split(PARTITION_NAME_SEPARATOR).collect()
    }

    /// `key=value/key=value`, as Fluss names a partition in its messages.
    pub fn qualified_name(&self, keys: &[String]) -> String {
        keys.iter()
            .zip(self.values())
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// The partition name a full spec denotes: one value for each partition key, each valid.
/// `creating` also refuses values that start with `__` (Fluss reserves them for its own
/// partitions, but lets one drop such a partition).
pub(crate) fn partition_name(
    table: &TableEntry,
    spec: &[(String, String)],
    creating: bool,
) -> Result<String, ApiError> {
    let keys = table.descriptor.partition_keys();
    let name = table.qualified_name();
    let invalid = |reason: String| ApiError::new(code::PARTITION_SPEC_INVALID, reason);
    let map = spec_map(table, spec)?;
    if map.len() != keys.len() {
        return Err(invalid(format!(
            "partition spec {} of {name} has {} keys, but the table is partitioned by {keys:?}: \
             give one value for each partition key",
            show(spec),
            map.len()
        )));
    }
    let mut values = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(value) = map.get(key.as_str()) else {
            return Err(invalid(format!(
                "partition spec {} of {name} does not contain partition key '{key}' (the table \
                 is partitioned by {keys:?})",
                show(spec)
            )));
        };
        check_value(value, creating).map_err(|reason| {
            invalid(format!(
                "the partition value {value:?} of '{key}' of {name} is invalid: {reason}"
            ))
        })?;
        values.push(*value);
    }
    Ok(values.join(&PARTITION_NAME_SEPARATOR.to_string()))
}

/// A partial spec (ListPartitionInfos) as (key index, value) pairs: every key must be one of
/// the table's partition keys.
pub(crate) fn partial_spec(
    table: &TableEntry,
    spec: &[(String, String)],
) -> Result<Vec<(usize, String)>, ApiError> {
    let keys = table.descriptor.partition_keys();
    spec_map(table, spec)?
        .into_iter()
        .map(|(key, value)| match keys.iter().position(|k| k == key) {
            Some(index) => Ok((index, value.to_string())),
            None => Err(ApiError::new(
                code::PARTITION_SPEC_INVALID,
                format!(
                    "partition spec {} of {} names '{key}', which is not a partition key (the \
                     table is partitioned by {keys:?})",
                    show(spec),
                    table.qualified_name()
                ),
            )),
        })
        .collect()
}

/// Whether `partition` matches every (key index, value) of a partial spec.
pub(crate) fn matches(partition: &PartitionEntry, partial: &[(usize, String)]) -> bool {
    let values = partition.values();
    partial
        .iter()
        .all(|(index, value)| values.get(*index) == Some(&value.as_str()))
}

/// The spec as a map; a key given twice is refused rather than one value picked.
fn spec_map<'a>(
    table: &TableEntry,
    spec: &'a [(String, String)],
) -> Result<BTreeMap<&'a str, &'a str>, ApiError> {
    let mut map = BTreeMap::new();
    for (key, value) in spec {
        if map.insert(key.as_str(), value.as_str()).is_some() {
            return Err(ApiError::new(
                code::PARTITION_SPEC_INVALID,
                format!(
                    "partition spec {} of {} gives '{key}' twice: give each partition key once",
                    show(spec),
                    table.qualified_name()
                ),
            ));
        }
    }
    Ok(map)
}

fn show(spec: &[(String, String)]) -> String {
    let pairs: Vec<String> = spec.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// A partition value is a valid Fluss name (it becomes a path and a part of the name).
fn check_value(value: &str, creating: bool) -> Result<(), String> {
    if value.is_empty() {
        return Err("the empty string is not allowed".into());
    }
    if value == "." || value == ".." {
        return Err(format!("'{value}' is not allowed"));
    }
    if value.len() > PARTITION_VALUE_BYTES_MAX {
        return Err(format!(
            "it is longer than the max allowed length {PARTITION_VALUE_BYTES_MAX}"
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(
            "it contains one or more characters other than ASCII alphanumerics, '_' \
                    and '-'"
                .into(),
        );
    }
    if creating && value.starts_with(INTERNAL_PREFIX) {
        return Err(format!(
            "'{INTERNAL_PREFIX}' is not allowed as prefix, since it is reserved for internal \
             partitions"
        ));
    }
    Ok(())
}

/// What CreateTable checks of a table's partitioning, as Fluss does (`TableDescriptor` and
/// `TableDescriptorValidation.checkPartition`): a partition key is a column of a type Fluss
/// can name a partition by and, for a primary-key table, part of the primary key; the
/// auto-partition properties are valid ([`AutoPartitionStrategy::of`]). On top of Fluss,
/// `num-precreate` must be between 0 and `partitions_max` (Fluss takes a negative count for
/// none, and a count past its partition limit fails at every check).
pub(crate) fn check_partitioning(
    table: &str,
    descriptor: &fluss::metadata::TableDescriptor,
    partitions_max: usize,
) -> Result<(), ApiError> {
    let auto = AutoPartitionStrategy::of(table, descriptor)?;
    let keys = descriptor.partition_keys();
    if keys.is_empty() {
        return Ok(());
    }
    let invalid =
        |reason: String| ApiError::new(code::INVALID_TABLE, format!("table {table}: {reason}"));
    let schema = descriptor.schema();
    if let Some(primary_key) = schema.primary_key() {
        let pk = primary_key.column_names();
        if keys.iter().any(|k| !pk.contains(k)) {
            return Err(invalid(format!(
                "a partitioned primary-key table requires its partition keys {keys:?} to be a \
                 subset of its primary key {pk:?}; add them to the primary key"
            )));
        }
    }
    let row_type = schema.row_type();
    for key in keys {
        let Some(field) = row_type.fields().iter().find(|f| f.name() == key.as_str()) else {
            return Err(invalid(format!(
                "partition key '{key}' does not exist in the schema"
            )));
        };
        if !partition_key_type_supported(field.data_type()) {
            return Err(invalid(format!(
                "partition key '{key}' has type {}, but partition keys must be CHAR, STRING, \
                 BOOLEAN, BINARY, BYTES, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DATE, \
                 TIME, TIMESTAMP or TIMESTAMP_LTZ",
                field.data_type()
            )));
        }
    }
    if let Some(auto) = auto
        && usize::try_from(auto.num_precreate).map_or(true, |n| n > partitions_max)
    {
        return Err(ApiError::new(
            code::INVALID_CONFIG,
            format!(
                "invalid value '{}' for '{NUM_PRECREATE}' of table {table}: use a count between \
                 0 and {partitions_max} (hotstore.partitions_per_table_max)",
                auto.num_precreate
            ),
        ));
    }
    Ok(())
}

/// Fluss's `PartitionUtils.PARTITION_KEY_SUPPORTED_TYPES`.
fn partition_key_type_supported(data_type: &DataType) -> bool {
    !matches!(
        data_type,
        DataType::Decimal(_) | DataType::Array(_) | DataType::Map(_) | DataType::Row(_)
    )
}
