//! How the catalog is kept: one JSON document (`catalog.json`) rewritten atomically on every
//! change (a temporary file, fsync, rename), and read back at start.

use super::{Catalog, DatabaseEntry, PartitionEntry, SCHEMA_ID, State, TableEntry, client_view};
use crate::protocol::{ApiError, code};
use fluss::metadata::{JsonSerde, TableDescriptor};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

impl Catalog {
    /// Persists the state; on failure undoes the in-memory change and reports a storage error.
    pub(super) fn persist_or_rollback(
        &self,
        state: &mut State,
        rollback: impl FnOnce(&mut State),
    ) -> Result<(), ApiError> {
        if let Err(error) = self.persist(state) {
            rollback(state);
            return Err(ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!("cannot write catalog {}: {error}", self.path.display()),
            ));
        }
        Ok(())
    }

    pub(super) fn persist(&self, state: &State) -> std::io::Result<()> {
        let databases: Vec<Value> = state
            .databases
            .values()
            .map(|db| {
                json!({
                    "name": db.name,
                    "json": String::from_utf8_lossy(&db.json),
                    "created_ms": db.created_ms,
                    "modified_ms": db.modified_ms,
                })
            })
            .collect();
        let tables: Vec<Value> = state
            .tables
            .values()
            .map(|t| {
                json!({
                    "id": t.id,
                    "database": t.database,
                    "name": t.name,
                    "schema_id": t.schema_id,
                    "earlier_schemas": super::schemas::earlier_schemas_json(t),
                    "json": String::from_utf8_lossy(&t.json),
                    "created_ms": t.created_ms,
                    "modified_ms": t.modified_ms,
                })
            })
            .collect();
        let partitions: Vec<Value> = state
            .partitions
            .values()
            .flat_map(BTreeMap::values)
            .map(|p| {
                json!({
                    "id": p.id,
                    "table_id": p.table_id,
                    "name": p.name,
                    "created_ms": p.created_ms,
                })
            })
            .collect();
        let document = json!({
            "version": 1,
            "next_table_id": state.next_table_id,
            "next_partition_id": state.next_partition_id,
            "databases": databases,
            "tables": tables,
            "partitions": partitions,
        });
        let bytes = serde_json::to_vec_pretty(&document).map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)
    }
}

/// Writes `bytes` to `path` through a temporary file, fsync and rename.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        // Makes the rename itself durable; not every platform can fsync a directory.
        let _ = dir.sync_all();
    }
    Ok(())
}

pub(super) fn parse_catalog(bytes: &[u8]) -> Result<State, String> {
    let document: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let next_table_id = document["next_table_id"]
        .as_i64()
        .ok_or("missing next_table_id")?;
    // Catalogs written before partitions existed have neither key.
    let next_partition_id = document["next_partition_id"].as_i64().unwrap_or(0);
    let mut state = State {
        next_table_id,
        next_partition_id,
        ..State::default()
    };
    for db in document["databases"]
        .as_array()
        .ok_or("missing databases")?
    {
        let db = parse_database(db)?;
        state.databases.insert(db.name.clone(), db);
    }
    for t in document["tables"].as_array().ok_or("missing tables")? {
        let entry = parse_table(t)?;
        let key = (entry.database.clone(), entry.name.clone());
        state.tables.insert(key, Arc::new(entry));
    }
    let table_ids: Vec<i64> = state.tables.values().map(|t| t.id).collect();
    for p in document["partitions"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        let partition = parse_partition(p)?;
        if !table_ids.contains(&partition.table_id) {
            return Err(format!(
                "partition {} (id {}) belongs to table id {}, which is not in the catalog",
                partition.name, partition.id, partition.table_id
            ));
        }
        if partition.id >= state.next_partition_id {
            return Err(format!(
                "partition id {} is not below next_partition_id {}",
                partition.id, state.next_partition_id
            ));
        }
        state
            .partitions
            .entry(partition.table_id)
            .or_default()
            .insert(partition.name.clone(), partition);
    }
    Ok(state)
}

/// A database as `persist` writes it.
fn parse_database(db: &Value) -> Result<DatabaseEntry, String> {
    Ok(DatabaseEntry {
        name: db["name"]
            .as_str()
            .ok_or("database without name")?
            .to_string(),
        json: db["json"].as_str().unwrap_or("{}").as_bytes().to_vec(),
        created_ms: db["created_ms"].as_i64().unwrap_or(0),
        modified_ms: db["modified_ms"].as_i64().unwrap_or(0),
    })
}

/// A table as `persist` writes it, its descriptor parsed from its JSON.
fn parse_table(t: &Value) -> Result<TableEntry, String> {
    let database = t["database"]
        .as_str()
        .ok_or("table without database")?
        .to_string();
    let name = t["name"].as_str().ok_or("table without name")?.to_string();
    let json = t["json"]
        .as_str()
        .ok_or("table without json")?
        .as_bytes()
        .to_vec();
    let value: Value =
        serde_json::from_slice(&json).map_err(|e| format!("table {database}.{name}: {e}"))?;
    let descriptor = TableDescriptor::deserialize_json(&value)
        .map_err(|e| format!("table {database}.{name}: {e}"))?;
    let bucket_count = value["bucket_count"]
        .as_i64()
        .ok_or("table without bucket_count")? as i32;
    Ok(TableEntry {
        id: t["id"].as_i64().ok_or("table without id")?,
        schema_id: t["schema_id"].as_i64().unwrap_or(i64::from(SCHEMA_ID)) as i32,
        earlier_schemas: Arc::new(
            super::schemas::earlier_schemas_from(&t["earlier_schemas"])
                .map_err(|e| format!("table {database}.{name}: {e}"))?,
        ),
        created_ms: t["created_ms"].as_i64().unwrap_or(0),
        modified_ms: t["modified_ms"].as_i64().unwrap_or(0),
        database,
        name,
        client_json: client_view(&json),
        json,
        descriptor,
        bucket_count,
    })
}

/// A partition as `persist` writes it.
fn parse_partition(p: &Value) -> Result<PartitionEntry, String> {
    Ok(PartitionEntry {
        id: p["id"].as_i64().ok_or("partition without id")?,
        table_id: p["table_id"].as_i64().ok_or("partition without table_id")?,
        name: p["name"]
            .as_str()
            .ok_or("partition without name")?
            .to_string(),
        created_ms: p["created_ms"].as_i64().unwrap_or(0),
    })
}
