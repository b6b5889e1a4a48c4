//! Schema evolution as Fluss 0.9.1 allows it (`SchemaUpdate`): nullable columns added at the
//! end, nothing dropped, renamed or retyped. Each change makes the next schema id; the earlier
//! schemas stay with the table ([`EarlierSchema`]), so batches and kv rows written under them
//! keep their id and are read by it (GetTableSchema by id), and silt turns them into the latest
//! schema where it combines rows (kv merges, changelogs). Column ids are stable: an added
//! column (and each field nested in it) takes the next ids after the table's highest.

use super::{Catalog, TableEntry, client_view, now_ms};
use crate::protocol::{ApiError, code};
use fluss::metadata::{Column, DataType, JsonSerde, Schema, TableDescriptor, reassign_field_ids};
use serde_json::{Value, json};
use std::sync::Arc;

/// A schema a table had before its current one.
#[derive(Debug, Clone)]
pub struct EarlierSchema {
    pub id: i32,
    /// The schema's JSON, as GetTableSchema serves it.
    pub json: Value,
    pub schema: Schema,
}

/// A column to add, as AlterTable's PbAddColumn names it.
#[derive(Debug, Clone)]
pub struct NewColumn {
    pub name: String,
    pub data_type_json: Vec<u8>,
    pub comment: Option<String>,
    /// LAST = 0, FIRST = 1, AFTER = 3; Fluss adds at the end only.
    pub position: i32,
    /// An aggregation merge engine's function for the column (silt has no such engine).
    pub aggregation: Option<String>,
}

impl TableEntry {
    /// The schema with id `id`: the current one or an earlier one.
    pub fn schema_of(&self, id: i32) -> Option<&Schema> {
        if id == self.schema_id {
            return Some(self.descriptor.schema());
        }
        self.earlier_schemas
            .iter()
            .find(|earlier| earlier.id == id)
            .map(|earlier| &earlier.schema)
    }

    /// The JSON of schema `id`, as GetTableSchema serves it.
    pub fn schema_json(&self, id: i32) -> Option<Value> {
        if id == self.schema_id {
            let table: Value = serde_json::from_slice(&self.json).ok()?;
            return table.get("schema").cloned();
        }
        self.earlier_schemas
            .iter()
            .find(|earlier| earlier.id == id)
            .map(|earlier| earlier.json.clone())
    }
}

impl Catalog {
    /// Adds `columns` at the end of a table's schema, as Fluss's AlterTable does: each nullable,
    /// at the last position, with a new name. The table's schema id goes up by one and the old
    /// schema joins its earlier ones, once `check` (the caller's rules, e.g. what a lake can
    /// store) accepts the new entry. Returns it, or `None` when the table is absent and
    /// `ignore_if_not_exists`.
    pub fn add_columns(
        &self,
        database: &str,
        name: &str,
        columns: &[NewColumn],
        ignore_if_not_exists: bool,
        check: &dyn Fn(&TableEntry) -> Result<(), String>,
    ) -> Result<Option<Arc<TableEntry>>, ApiError> {
        self.alter_table(database, name, ignore_if_not_exists, |old| {
            let qualified = old.qualified_name();
            let (table, old_schema_json) = json_with_columns(old, columns)?;
            let descriptor = TableDescriptor::deserialize_json(&table)
                .map_err(|e| alter_refused(&qualified, e.to_string()))?;
            let json = serde_json::to_vec(&table)
                .map_err(|e| alter_internal(&qualified, e.to_string()))?;
            let mut earlier_schemas = (*old.earlier_schemas).clone();
            earlier_schemas.push(EarlierSchema {
                id: old.schema_id,
                json: old_schema_json,
                schema: old.descriptor.schema().clone(),
            });
            let entry = TableEntry {
                schema_id: old.schema_id + 1,
                earlier_schemas: Arc::new(earlier_schemas),
                client_json: client_view(&json),
                json,
                descriptor,
                modified_ms: now_ms(),
                ..old.clone()
            };
            check(&entry).map_err(|reason| ApiError::new(code::INVALID_ALTER_TABLE, reason))?;
            Ok(Some(entry))
        })
    }
}

fn alter_refused(qualified: &str, reason: String) -> ApiError {
    ApiError::new(
        code::INVALID_ALTER_TABLE,
        format!("alter table {qualified}: {reason}"),
    )
}

fn alter_internal(qualified: &str, reason: String) -> ApiError {
    ApiError::new(
        code::UNKNOWN_SERVER_ERROR,
        format!("alter table {qualified}: {reason}"),
    )
}

/// `old`'s stored table JSON with `columns` added at the end of its schema (and the schema's
/// highest field id advanced), and the schema JSON it had before.
fn json_with_columns(old: &TableEntry, columns: &[NewColumn]) -> Result<(Value, Value), ApiError> {
    let qualified = old.qualified_name();
    let internal = |reason: &str| alter_internal(&qualified, reason.to_string());
    let mut table: Value = serde_json::from_slice(&old.json)
        .map_err(|e| internal(&format!("stored json does not parse: {e}")))?;
    let old_schema_json = table
        .get("schema")
        .cloned()
        .ok_or_else(|| internal("stored json has no schema"))?;
    let mut highest = old.descriptor.schema().highest_field_id();
    let mut names: Vec<String> = old
        .descriptor
        .schema()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let mut added = Vec::with_capacity(columns.len());
    for column in columns {
        let added_column = new_column_json(column, &names, &mut highest)
            .map_err(|reason| alter_refused(&qualified, reason))?;
        names.push(column.name.clone());
        added.push(added_column);
    }
    let schema = table
        .get_mut("schema")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| internal("stored schema is not an object"))?;
    schema
        .get_mut("columns")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| internal("stored schema has no columns"))?
        .extend(added);
    schema.insert("highest_field_id".into(), json!(highest));
    Ok((table, old_schema_json))
}

/// The JSON of `column` with its ids (the next after `highest`, which it advances), or why
/// Fluss would refuse it, given the table's column `names` so far.
fn new_column_json(
    column: &NewColumn,
    names: &[String],
    highest: &mut i32,
) -> Result<Value, String> {
    let name = &column.name;
    if names.iter().any(|existing| existing == name) {
        return Err(format!("column {name} already exists"));
    }
    if column.position != 0 {
        return Err(format!(
            "column {name} can only be added at the end (position LAST), as in Fluss; FIRST and \
             AFTER are not supported"
        ));
    }
    if let Some(function) = &column.aggregation {
        return Err(format!(
            "column {name} names the aggregate function {function}, but silt has no aggregation \
             merge engine; add it without one"
        ));
    }
    let type_json: Value = serde_json::from_slice(&column.data_type_json)
        .map_err(|e| format!("the data type of column {name} is not JSON: {e}"))?;
    let data_type = DataType::deserialize_json(&type_json)
        .map_err(|e| format!("the data type of column {name} does not parse: {e}"))?;
    if !data_type.is_nullable() {
        return Err(format!(
            "column {name} must be nullable: rows written before it have no value for it"
        ));
    }
    let mut counter = *highest + 1;
    let id = counter;
    let data_type = reassign_field_ids(&data_type, &mut counter);
    *highest = counter;
    let mut new = Column::new(name.clone(), data_type).with_id(id);
    if let Some(comment) = &column.comment {
        new = new.with_comment(comment.clone());
    }
    new.serialize_json()
        .map_err(|e| format!("column {name}: {e}"))
}

/// The earlier schemas as the catalog file keeps them.
pub(super) fn earlier_schemas_json(entry: &TableEntry) -> Value {
    Value::Array(
        entry
            .earlier_schemas
            .iter()
            .map(|earlier| json!({ "id": earlier.id, "schema": earlier.json }))
            .collect(),
    )
}

/// The earlier schemas of a table read back from the catalog file (none in a file older than
/// schema evolution).
pub(super) fn earlier_schemas_from(stored: &Value) -> Result<Vec<EarlierSchema>, String> {
    let Some(list) = stored.as_array() else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|earlier| {
            let id = earlier["id"].as_i64().ok_or("earlier schema without id")? as i32;
            let json = earlier["schema"].clone();
            let schema =
                Schema::deserialize_json(&json).map_err(|e| format!("earlier schema {id}: {e}"))?;
            Ok(EarlierSchema { id, json, schema })
        })
        .collect()
}
