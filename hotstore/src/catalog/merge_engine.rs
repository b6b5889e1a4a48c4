//! A primary-key table's merge rules, from the properties Apache Fluss 0.9.1 defines for them:
//! `table.merge-engine` (how an upsert combines with the row its key has), the versioned
//! engine's `table.merge-engine.versioned.ver-column`, and `table.delete.behavior` (what a
//! delete does). [`MergeRules::of`] checks them as Fluss's CreateTable does, and refuses what
//! silt does not implement (the `aggregation` engine) rather than let such a table behave as
//! last-write-wins and lose the rows its user meant to keep.
//!
//! Contract, as Fluss's row mergers and kv tablet define it:
//! - without an engine, an upsert replaces the row and a partial update merges its columns;
//! - `first_row` keeps the first row of a key: later upserts change nothing;
//! - `versioned` replaces the row only with a version at least the row's, a null version being
//!   the smallest value of the column's type (INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ);
//! - a table with an engine refuses partial updates, and ignores deletes unless
//!   `table.delete.behavior` is `disable` (`allow` is refused at CreateTable);
//! - `table.delete.behavior`: `allow` deletes (the default without an engine), `ignore` drops
//!   deletes, `disable` refuses them with DeletionDisabled.

use fluss::metadata::{DataType, TableDescriptor};

pub const MERGE_ENGINE: &str = "table.merge-engine";
pub const VERSION_COLUMN: &str = "table.merge-engine.versioned.ver-column";
pub const DELETE_BEHAVIOR: &str = "table.delete.behavior";

/// A version as Fluss compares them: an integer as `(value, 0)`, a timestamp as (epoch
/// milliseconds, nanoseconds of the millisecond).
pub type Version = (i64, i32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeEngine {
    /// No `table.merge-engine`: the last write wins.
    LastWrite,
    FirstRow,
    Versioned(VersionColumn),
}

impl MergeEngine {
    /// The property value that names the engine; `None` without one.
    pub fn name(self) -> Option<&'static str> {
        match self {
            MergeEngine::LastWrite => None,
            MergeEngine::FirstRow => Some("first_row"),
            MergeEngine::Versioned(_) => Some("versioned"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionColumn {
    pub position: usize,
    /// The version a null stands for: the smallest value of the column's type.
    pub null: Version,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteBehavior {
    Allow,
    Ignore,
    Disable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeRules {
    pub engine: MergeEngine,
    pub deletes: DeleteBehavior,
}

impl MergeRules {
    /// What a PutKv with `agg_mode` OVERWRITE gets, whatever the table's properties: rows are
    /// replaced and deleted as they come (Fluss's undo path for a sink's failover).
    pub const OVERWRITE: MergeRules = MergeRules {
        engine: MergeEngine::LastWrite,
        deletes: DeleteBehavior::Allow,
    };

    /// The table's rules, or why its properties are invalid (Fluss answers INVALID_CONFIG) or
    /// ask for what silt does not implement. Values are case-insensitive, as in Fluss.
    pub fn of(descriptor: &TableDescriptor) -> Result<MergeRules, String> {
        let properties = descriptor.properties();
        let engine = properties
            .get(MERGE_ENGINE)
            .map(|v| parse_engine(v))
            .transpose()?;
        let deletes = properties
            .get(DELETE_BEHAVIOR)
            .map(|v| parse_deletes(v))
            .transpose()?;
        let primary_key = descriptor.has_primary_key();
        if engine.is_some() && !primary_key {
            return Err(format!(
                "{MERGE_ENGINE} is set, but only a primary-key table has a merge engine; declare a primary key or remove {MERGE_ENGINE}"
            ));
        }
        if deletes.is_some() && !primary_key {
            return Err(format!(
                "{DELETE_BEHAVIOR} is set, but it applies only to a primary-key table; declare a primary key or remove {DELETE_BEHAVIOR}"
            ));
        }
        let engine = match engine {
            None => MergeEngine::LastWrite,
            Some(Engine::FirstRow) => MergeEngine::FirstRow,
            Some(Engine::Versioned) => MergeEngine::Versioned(version_column(descriptor)?),
        };
        let deletes = match (engine.name(), deletes) {
            (Some(name), Some(DeleteBehavior::Allow)) => {
                return Err(format!(
                    "the {name} merge engine does not delete rows, so {DELETE_BEHAVIOR} must be ignore (its default) or disable, not allow"
                ));
            }
            (_, Some(deletes)) => deletes,
            (Some(_), None) => DeleteBehavior::Ignore,
            (None, None) => DeleteBehavior::Allow,
        };
        Ok(MergeRules { engine, deletes })
    }
}

enum Engine {
    FirstRow,
    Versioned,
}

fn parse_engine(value: &str) -> Result<Engine, String> {
    match value.to_ascii_lowercase().as_str() {
        "first_row" => Ok(Engine::FirstRow),
        "versioned" => Ok(Engine::Versioned),
        "aggregation" => Err(format!(
            "{MERGE_ENGINE} 'aggregation' is not supported: silt implements first_row and versioned; create the table with one of them or without {MERGE_ENGINE}"
        )),
        _ => Err(format!(
            "{MERGE_ENGINE} '{value}' is not a merge engine: Fluss defines first_row, versioned and aggregation, and silt implements first_row and versioned"
        )),
    }
}

fn parse_deletes(value: &str) -> Result<DeleteBehavior, String> {
    match value.to_ascii_lowercase().as_str() {
        "allow" => Ok(DeleteBehavior::Allow),
        "ignore" => Ok(DeleteBehavior::Ignore),
        "disable" => Ok(DeleteBehavior::Disable),
        _ => Err(format!(
            "{DELETE_BEHAVIOR} '{value}' is not one of allow, ignore, disable"
        )),
    }
}

fn version_column(descriptor: &TableDescriptor) -> Result<VersionColumn, String> {
    let Some(name) = descriptor.properties().get(VERSION_COLUMN) else {
        return Err(format!(
            "the versioned merge engine needs {VERSION_COLUMN}: set it to the name of the version column"
        ));
    };
    let row_type = descriptor.schema().row_type();
    let Some(position) = row_type.get_field_index(name) else {
        let columns: Vec<&str> = row_type.fields().iter().map(|f| f.name.as_str()).collect();
        return Err(format!(
            "version column '{name}' of {VERSION_COLUMN} is not a column of the table (columns: {})",
            columns.join(", ")
        ));
    };
    let data_type = &row_type.fields()[position].data_type;
    let null = match data_type {
        DataType::Int(_) => (i64::from(i32::MIN), 0),
        DataType::BigInt(_) | DataType::Timestamp(_) | DataType::TimestampLTz(_) => (i64::MIN, 0),
        other => {
            return Err(format!(
                "version column '{name}' has type {other}; the versioned merge engine needs INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ"
            ));
        }
    };
    Ok(VersionColumn { position, null })
}
