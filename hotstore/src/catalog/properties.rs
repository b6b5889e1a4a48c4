//! Table properties: the Fluss properties silt reads (kv format, lake, log format and TTL),
//! the defaults CreateTable writes into a new table, what CreateTable and AlterTable refuse,
//! and the table JSON clients are shown.

use super::{
    Catalog, DELETE_BEHAVIOR, MergeEngine, MergeRules, TableEntry, auto_partition, now_ms,
    partitions,
};
use crate::protocol::{ApiError, code};
use fluss::metadata::{JsonSerde, TableDescriptor};
use serde_json::{Value, json};
use std::time::Duration;

const TABLE_PROPERTY_PREFIX: &str = "table.";

/// The kv format version of a primary-key table: how clients encode its keys.
pub const KV_FORMAT_VERSION: &str = "table.kv.format-version";
/// What CreateTable gives a primary-key table that names none (Fluss 0.9.1's current).
const KV_FORMAT_VERSION_CURRENT: &str = "2";
/// The lake format a Fluss table names (silt's lake is Delta and sets none; a client-set value
/// decides the clients' key encoders at kv format version 1).
pub const DATALAKE_FORMAT: &str = "table.datalake.format";

/// Whether silt tiers a table into its Delta lake: the Fluss table property a client sets at
/// CreateTable or AlterTable.
pub const DATALAKE_ENABLED: &str = "table.datalake.enabled";
/// Whether table `properties` turn tiering on ([`DATALAKE_ENABLED`] is true).
pub(crate) fn is_lake_enabled(properties: &std::collections::HashMap<String, String>) -> bool {
    properties
        .get(DATALAKE_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The custom property under which clients see [`DATALAKE_ENABLED`] (see [`client_view`]).
pub const DATALAKE_ENABLED_SHOWN: &str = "silt.datalake.enabled";

/// The table JSON as clients are shown it: `table.datalake.enabled` moves to the custom
/// property `silt.datalake.enabled`. To a Fluss client, `table.datalake.enabled=true` means
/// "union-read this table's history from its lake with the plugin of `table.datalake.format`"
/// (Paimon, Iceberg or Lance): Flink's connector plans such a lake source for every read of
/// it, and fails, since silt's lake is Delta and no Fluss plugin reads Delta. Shown as a plain
/// Fluss table, it reads from the hot store like any other (its history is in the lake, for
/// silt's queries and Delta readers). Everything else is served as stored.
pub fn client_view(json: &[u8]) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<Value>(json) else {
        return json.to_vec();
    };
    let enabled = value
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .and_then(|p| p.remove(DATALAKE_ENABLED));
    let Some(enabled) = enabled else {
        return json.to_vec();
    };
    if let Some(object) = value.as_object_mut() {
        let custom = object
            .entry("custom_properties")
            .or_insert_with(|| json!({}));
        if let Some(custom) = custom.as_object_mut() {
            custom.insert(DATALAKE_ENABLED_SHOWN.to_string(), enabled);
        }
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| json.to_vec())
}

/// The `table.*` properties Fluss 0.9.1 lets AlterTable change (`FlussConfigUtils`).
pub const ALTERABLE_PROPERTIES: &[&str] = &[
    DATALAKE_ENABLED,
    "table.datalake.freshness",
    "table.log.tiered.local-segments",
];

/// One property change of an AlterTable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyChange {
    Set {
        key: String,
        value: String,
    },
    /// Back to the default: the property is removed.
    Reset {
        key: String,
    },
}

impl PropertyChange {
    fn key(&self) -> &str {
        match self {
            PropertyChange::Set { key, .. } | PropertyChange::Reset { key } => key,
        }
    }
}

/// An alterable property's value, checked as Fluss checks it at CreateTable (INVALID_CONFIG).
fn check_property_value(table: &str, key: &str, value: &str) -> Result<(), ApiError> {
    let invalid = |reason: &str| {
        ApiError::new(
            code::INVALID_CONFIG,
            format!("invalid value '{value}' for '{key}' of {table}: {reason}"),
        )
    };
    match key {
        "table.datalake.enabled"
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") =>
        {
            Err(invalid("use 'true' or 'false'"))
        }
        "table.datalake.freshness" => match parse_ttl(value) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(invalid("use a positive duration such as '3min'")),
            Err(reason) => Err(invalid(&format!("{reason}; use a duration such as '3min'"))),
        },
        "table.log.tiered.local-segments" if !value.trim().parse::<i32>().is_ok_and(|n| n > 0) => {
            Err(invalid("it must be an integer greater than 0"))
        }
        _ => Ok(()),
    }
}

/// The options Fluss writes into a new table that the client left out, so clients reading
/// them back see what applies: the pre-created partition count of a table with several
/// partition keys, a primary-key table's kv format version, a merge engine's delete
/// behaviour. A kv format version other than 1 or 2 is refused.
pub(super) fn store_fluss_defaults(
    database: &str,
    name: &str,
    properties: &mut serde_json::Map<String, Value>,
    descriptor: &TableDescriptor,
    rules: &MergeRules,
) -> Result<(), ApiError> {
    let options = descriptor.properties();
    if descriptor.partition_keys().len() > 1
        && options
            .get(auto_partition::ENABLED)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        && !options.contains_key(auto_partition::NUM_PRECREATE)
    {
        // As Fluss: a table with several partition keys cannot pre-create partitions, and
        // stores the count it uses.
        properties.insert(auto_partition::NUM_PRECREATE.into(), json!("0"));
    }
    match descriptor
        .properties()
        .get(KV_FORMAT_VERSION)
        .map(|v| v.trim())
    {
        None if descriptor.has_primary_key() => {
            // As Fluss 0.9.1: a new primary-key table's keys are at kv format version 2
            // (clients encode a bucket key that differs from the primary key with the
            // compacted encoder rather than the lake's).
            properties.insert(KV_FORMAT_VERSION.into(), json!(KV_FORMAT_VERSION_CURRENT));
        }
        None | Some("1" | "2") => {}
        Some(other) => {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "table {database}.{name}: {KV_FORMAT_VERSION} '{other}' is not supported; \
                     use 1 or 2 (the default for a primary-key table, as in Fluss 0.9.1)"
                ),
            ));
        }
    }
    if rules.engine != MergeEngine::LastWrite
        && !descriptor.properties().contains_key(DELETE_BEHAVIOR)
    {
        // Fluss writes the merge engine's default into the table, so clients that read the
        // table's properties (a sink deciding whether it may delete) see it.
        properties.insert(DELETE_BEHAVIOR.into(), json!("IGNORE"));
    }
    Ok(())
}

/// Refuses a change of a `table.*` property Fluss does not let AlterTable change.
fn check_alterable(qualified: &str, changes: &[PropertyChange]) -> Result<(), ApiError> {
    for change in changes {
        let key = change.key();
        if key.starts_with(TABLE_PROPERTY_PREFIX) && !ALTERABLE_PROPERTIES.contains(&key) {
            return Err(ApiError::new(
                code::INVALID_ALTER_TABLE,
                format!(
                    "the option '{key}' of {qualified} is not supported to alter (alterable: \
                     {}); recreate the table to change it",
                    ALTERABLE_PROPERTIES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// `old` with `changes` made to its properties (see [`Catalog::alter_table_properties`]), or
/// `None` when they change nothing.
pub(super) fn with_properties_changed(
    old: &TableEntry,
    changes: &[PropertyChange],
) -> Result<Option<TableEntry>, ApiError> {
    let qualified = old.qualified_name();
    check_alterable(&qualified, changes)?;
    let mut value: Value = serde_json::from_slice(&old.json).map_err(|e| {
        ApiError::new(
            code::UNKNOWN_SERVER_ERROR,
            format!("stored json of {qualified} does not parse: {e}"),
        )
    })?;
    let mut changed = false;
    for change in changes {
        let key = change.key();
        let field = if key.starts_with(TABLE_PROPERTY_PREFIX) {
            "properties"
        } else {
            "custom_properties"
        };
        let properties = value
            .as_object_mut()
            .and_then(|o| o.entry(field).or_insert_with(|| json!({})).as_object_mut())
            .ok_or_else(|| {
                ApiError::new(
                    code::UNKNOWN_SERVER_ERROR,
                    format!("stored {field} of {qualified} are not an object"),
                )
            })?;
        match change {
            PropertyChange::Set { key, value } => {
                check_property_value(&qualified, key, value)?;
                changed |= properties.insert(key.clone(), json!(value)) != Some(json!(value));
            }
            PropertyChange::Reset { key } => changed |= properties.remove(key).is_some(),
        }
    }
    if !changed {
        return Ok(None);
    }
    let descriptor = TableDescriptor::deserialize_json(&value).map_err(|e| {
        ApiError::new(
            code::INVALID_CONFIG,
            format!("altered table {qualified}: {e}"),
        )
    })?;
    check_log_format(&qualified, &descriptor)?;
    let json = serde_json::to_vec(&value).map_err(|e| {
        ApiError::new(
            code::UNKNOWN_SERVER_ERROR,
            format!("altered table {qualified}: {e}"),
        )
    })?;
    Ok(Some(TableEntry {
        client_json: client_view(&json),
        json,
        descriptor,
        modified_ms: now_ms(),
        ..old.clone()
    }))
}

/// A table's `table.log.format`: ARROW (Fluss's default), or INDEXED for a log table. silt
/// stores and serves an INDEXED table's batches as the client wrote them (Fluss's Java client
/// writes them; fluss-rs and pyfluss read only ARROW tables), but writes a primary-key table's
/// changelog, and tiers every table, as ARROW: a lake-enabled INDEXED table is refused, naming
/// the fix. COMPACTED is refused too (fluss-rs cannot read the table's description).
pub const LOG_FORMAT: &str = "table.log.format";

fn check_log_format(table: &str, descriptor: &TableDescriptor) -> Result<(), ApiError> {
    let Some(format) = descriptor.properties().get(LOG_FORMAT) else {
        return Ok(());
    };
    let refuse = |why: &str| {
        Err(ApiError::new(
            code::INVALID_CONFIG,
            format!("table {table}: {LOG_FORMAT} {format} {why}"),
        ))
    };
    if format.eq_ignore_ascii_case("ARROW") {
        Ok(())
    } else if !format.eq_ignore_ascii_case("INDEXED") {
        refuse("is not supported by silt's hotstore; use ARROW (the default) or INDEXED")
    } else if descriptor.has_primary_key() {
        refuse(
            "is not supported for a primary-key table by silt's hotstore, which writes its changelog as ARROW; use ARROW (the default)",
        )
    } else if is_lake_enabled(descriptor.properties()) {
        refuse(&format!(
            "cannot be tiered: silt's tiering reads ARROW batches; create the table with {LOG_FORMAT} ARROW (the default) to set {DATALAKE_ENABLED}=true"
        ))
    } else {
        Ok(())
    }
}

/// Fluss's rules (and words) for an auto-increment column: at most one, in a primary-key
/// table, outside the key, INT or BIGINT.
fn check_auto_increment(descriptor: &TableDescriptor) -> Result<(), String> {
    let schema = descriptor.schema();
    let names = schema.auto_increment_col_names();
    let Some(name) = names.first() else {
        return Ok(());
    };
    if names.len() > 1 {
        return Err(format!(
            "Multiple auto increment columns are not supported yet: {names:?}"
        ));
    }
    let Some(primary_key) = schema.primary_key() else {
        return Err("Auto increment column can only be used in primary-key table.".into());
    };
    if primary_key.column_names().contains(name) {
        return Err("Auto increment column can not be used as the primary key.".into());
    }
    match schema.columns().iter().find(|c| c.name() == name) {
        Some(column)
            if matches!(
                column.data_type(),
                fluss::metadata::DataType::Int(_) | fluss::metadata::DataType::BigInt(_)
            ) =>
        {
            Ok(())
        }
        Some(_) => Err("The data type of auto increment column must be INT or BIGINT.".into()),
        None => Err(format!(
            "Auto increment column {name} does not exist in table columns."
        )),
    }
}

/// Whether a table's log batches are in the INDEXED format (see [`LOG_FORMAT`]).
pub(crate) fn is_indexed_log(descriptor: &TableDescriptor) -> bool {
    descriptor
        .properties()
        .get(LOG_FORMAT)
        .is_some_and(|format| format.eq_ignore_ascii_case("INDEXED"))
}

/// The primary key without the partition keys (Fluss's physical primary key: what a
/// partitioned table's kv keys and default bucket key are made of), or `None` for a table
/// without a primary key.
pub(crate) fn physical_primary_key(descriptor: &TableDescriptor) -> Option<Vec<&String>> {
    let partition_keys = descriptor.partition_keys();
    let primary_key = descriptor.schema().primary_key()?;
    let columns = primary_key.column_names().iter();
    Some(columns.filter(|k| !partition_keys.contains(k)).collect())
}

impl Catalog {
    /// What CreateTable refuses in a table's options, as Fluss does (and what silt does not
    /// implement): its partitioning, TTL, log format and merge rules, which it returns.
    pub(super) fn check_table_options(
        &self,
        database: &str,
        name: &str,
        descriptor: &TableDescriptor,
    ) -> Result<MergeRules, ApiError> {
        partitions::check_partitioning(
            &format!("{database}.{name}"),
            descriptor,
            self.partitions_per_table_max,
        )?;
        if let Some(ttl) = descriptor.properties().get(LOG_TTL)
            && let Err(reason) = parse_ttl(ttl)
        {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!("table {database}.{name}: {}: {reason}", LOG_TTL),
            ));
        }
        check_log_format(&format!("{database}.{name}"), descriptor)?;
        check_auto_increment(descriptor).map_err(|reason| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!("table {database}.{name}: {reason}"),
            )
        })?;
        MergeRules::of(descriptor).map_err(|reason| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!("table {database}.{name}: {reason}"),
            )
        })
    }
}

/// Fluss's table property for the log's time to live.
pub const LOG_TTL: &str = "table.log.ttl";
/// Fluss's default `table.log.ttl`.
pub const LOG_TTL_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a Fluss duration as Fluss's configuration does: a number with an optional unit (`ms`,
/// `s`, `min`, `h`, `d` and their long forms), a bare number being milliseconds. A negative
/// number means no TTL (`None`).
pub fn parse_ttl(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim().to_ascii_lowercase();
    if t.starts_with('-') {
        return Ok(None);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 7 d, 2 h, 30 min, -1 for none)"))?;
    let unit_ms: u64 = match unit.trim() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => {
            return Err(format!(
                "{text:?} has an unknown unit {other:?} (use ms, s, min, h or d)"
            ));
        }
    };
    value
        .checked_mul(unit_ms)
        .map(|ms| Some(Duration::from_millis(ms)))
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// The TTL of a table: its `table.log.ttl`, else the server's default.
pub(crate) fn table_ttl(
    entry: &TableEntry,
    default: Option<Duration>,
) -> Result<Option<Duration>, ApiError> {
    match entry.descriptor.properties().get(LOG_TTL) {
        None => Ok(default),
        Some(text) => parse_ttl(text).map_err(|reason| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!("{LOG_TTL} of {}: {reason}", entry.qualified_name()),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_parse_as_fluss_reads_them() {
        for (text, ms) in [
            ("7 d", 7 * 86_400_000),
            ("2min", 120_000),
            ("90 s", 90_000),
            ("1h", 3_600_000),
            ("1500", 1500),
            ("250 ms", 250),
        ] {
            assert_eq!(
                parse_ttl(text),
                Ok(Some(Duration::from_millis(ms))),
                "{text}"
            );
        }
        assert_eq!(parse_ttl("-1"), Ok(None));
        assert!(parse_ttl("soon").unwrap_err().contains("not a duration"));
        assert!(parse_ttl("3 weeks").unwrap_err().contains("unknown unit"));
    }
}
