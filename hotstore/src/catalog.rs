//! The catalog: databases and tables, persisted as one JSON file in the data directory.
//!
//! Every DDL rewrites `catalog.json` atomically (write a temporary file, fsync, rename), so a
//! crash leaves either the old or the new catalog. Table JSON is stored complete, the way the
//! Fluss client reads it back: the bucket count is always present (the configured default when
//! the client sent none) and a primary-key table's bucket keys default to its primary key
//! without partition keys. Properties are kept as the client sent them, except that a table
//! with a merge engine and no `table.delete.behavior` gets `IGNORE`, as Fluss stores it. The
//! merge-engine properties are checked as Fluss checks them ([`MergeRules`]). Partitions of
//! partitioned tables live here too ([`PartitionEntry`]); their ids, like table ids, are never
//! reused: the next id is persisted with every change.
//!
//! `persist` keeps the file; `properties` holds the Fluss table properties silt reads and
//! checks (`table.log.ttl` among them) and the JSON clients are shown; `schemas` the added
//! columns; `partitions` and `auto_partition` the partitions and the auto-partition strategy;
//! `merge_engine` the merge rules.

pub(crate) mod auto_partition;
mod merge_engine;
mod partitions;
mod persist;
mod properties;
mod schemas;

pub(crate) use auto_partition::AutoPartitionStrategy;
pub(crate) use merge_engine::{
    DELETE_BEHAVIOR, DeleteBehavior, MergeEngine, MergeRules, Version, VersionColumn,
};
pub use partitions::PartitionEntry;
use persist::parse_catalog;
pub(crate) use persist::write_atomically;
pub use properties::{
    DATALAKE_ENABLED, DATALAKE_FORMAT, KV_FORMAT_VERSION, LOG_TTL, LOG_TTL_DEFAULT, PropertyChange,
    client_view, parse_ttl,
};
pub(crate) use properties::{is_indexed_log, is_lake_enabled, physical_primary_key, table_ttl};
use properties::{store_fluss_defaults, with_properties_changed};
pub use schemas::{EarlierSchema, NewColumn};

use crate::protocol::{ApiError, code};
use fluss::metadata::{JsonSerde, TableDescriptor};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The database every fresh data directory starts with, as in Fluss.
pub const DEFAULT_DATABASE: &str = "fluss";
/// A table's first schema id, as in Fluss; each added column makes the next one.
pub const SCHEMA_ID: i32 = 1;
const NAME_BYTES_MAX: usize = 200;
const CATALOG_FILE: &str = "catalog.json";

/// A database in the catalog.
#[derive(Debug, Clone)]
pub struct DatabaseEntry {
    pub name: String,
    pub json: Vec<u8>,
    pub created_ms: i64,
    pub modified_ms: i64,
}

/// A table in the catalog, with its parsed descriptor.
#[derive(Debug, Clone)]
pub struct TableEntry {
    pub id: i64,
    pub database: String,
    pub name: String,
    /// The current schema's id (the schema in `descriptor`).
    pub schema_id: i32,
    /// The schemas before the current one, oldest first ([`Catalog::add_columns`]).
    pub earlier_schemas: Arc<Vec<EarlierSchema>>,
    /// The complete table JSON as created and altered (what silt itself goes by).
    pub json: Vec<u8>,
    /// The table JSON served to clients: [`client_view`] of `json`.
    pub client_json: Vec<u8>,
    pub created_ms: i64,
    pub modified_ms: i64,
    pub descriptor: TableDescriptor,
    pub bucket_count: i32,
}

impl TableEntry {
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    pub fn has_primary_key(&self) -> bool {
        self.descriptor.has_primary_key()
    }

    pub fn is_partitioned(&self) -> bool {
        self.descriptor.is_partitioned()
    }
}

#[derive(Debug, Default)]
struct State {
    databases: BTreeMap<String, DatabaseEntry>,
    tables: BTreeMap<(String, String), Arc<TableEntry>>,
    next_table_id: i64,
    /// Per table id, its partitions by name.
    partitions: BTreeMap<i64, BTreeMap<String, PartitionEntry>>,
    /// Fluss's partition ids start at 0 and are unique across tables.
    next_partition_id: i64,
}

/// Persistent catalog of databases and tables.
#[derive(Debug)]
pub struct Catalog {
    path: PathBuf,
    state: Mutex<State>,
    default_bucket_count: i32,
    bucket_count_max: i32,
    partitions_per_table_max: usize,
    buckets_max: i64,
}

/// What `drop_table`/`drop_database` removed, so the caller can close tablets and delete files.
pub type DroppedTables = Vec<Arc<TableEntry>>;

/// A partition and the table it belongs to.
pub type TablePartition = (Arc<TableEntry>, PartitionEntry);

/// A CreatePartition or DropPartition: the partition, by its table and its spec, and whether
/// the request ignores that it exists (a create) or that it does not (a drop); Fluss names
/// that flag `ignore_if_not_exists` in both.
#[derive(Debug, Clone, Copy)]
pub struct PartitionChange<'a> {
    pub database: &'a str,
    pub table: &'a str,
    pub spec: &'a [(String, String)],
    pub ignore: bool,
}

impl Catalog {
    /// Opens (or creates) the catalog in `dir`.
    pub fn open(
        dir: &Path,
        default_bucket_count: i32,
        bucket_count_max: i32,
    ) -> crate::error::Result<Catalog> {
        let path = dir.join(CATALOG_FILE);
        let mut state = State {
            next_table_id: 1,
            ..State::default()
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                state =
                    parse_catalog(&bytes).map_err(|reason| crate::error::Error::CatalogCorrupt {
                        path: path.clone(),
                        reason,
                    })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let now = now_ms();
                state.databases.insert(
                    DEFAULT_DATABASE.to_string(),
                    DatabaseEntry {
                        name: DEFAULT_DATABASE.to_string(),
                        json: default_database_json(),
                        created_ms: now,
                        modified_ms: now,
                    },
                );
            }
            Err(source) => return Err(crate::error::Error::Io { path, source }),
        }
        let catalog = Catalog {
            path,
            state: Mutex::new(state),
            default_bucket_count,
            bucket_count_max,
            partitions_per_table_max: usize::MAX,
            buckets_max: i64::MAX,
        };
        {
            let state = catalog.lock();
            catalog
                .persist(&state)
                .map_err(|source| crate::error::Error::Io {
                    path: catalog.path.clone(),
                    source,
                })?;
        }
        Ok(catalog)
    }

    /// Bounds the partitions one table may hold (PARTITION_MAX_NUM beyond it).
    pub fn with_partitions_per_table_max(mut self, partitions_max: usize) -> Catalog {
        self.partitions_per_table_max = partitions_max;
        self
    }

    /// Bounds the buckets the server holds, over every table and partition (each bucket
    /// holds open files): a table or partition that would pass it is refused with
    /// BUCKET_MAX_NUM, as Fluss refuses one past its `max.bucket.num`.
    pub fn with_buckets_max(mut self, buckets_max: i64) -> Catalog {
        self.buckets_max = buckets_max;
        self
    }

    /// Refuses `adding` more buckets (`what`, for the message) past [`Catalog::with_buckets_max`].
    fn check_buckets_max(&self, state: &State, adding: i64, what: &str) -> Result<(), ApiError> {
        let held: i64 = state
            .tables
            .values()
            .map(|table| {
                let copies = if table.is_partitioned() {
                    state.partitions.get(&table.id).map_or(0, BTreeMap::len) as i64
                } else {
                    1
                };
                copies * i64::from(table.bucket_count)
            })
            .sum();
        if held + adding > self.buckets_max {
            return Err(ApiError::new(
                code::BUCKET_MAX_NUM,
                format!(
                    "{what} would bring the buckets this server holds to {} (it holds {held}), past hotstore.buckets_max {}: drop tables or partitions, use fewer buckets, or raise hotstore.buckets_max (each bucket holds open files: keep it well under the process's open-file limit)",
                    held + adding,
                    self.buckets_max
                ),
            ));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated (each DDL updates
        // them after persisting), so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn create_database(
        &self,
        name: &str,
        json: Option<Vec<u8>>,
        ignore_if_exists: bool,
    ) -> Result<(), ApiError> {
        validate_name(name, code::INVALID_DATABASE, "database")?;
        let json = match json {
            Some(json) if !json.is_empty() => {
                fluss::metadata::DatabaseDescriptor::from_json_bytes(&json).map_err(|error| {
                    ApiError::new(
                        code::INVALID_DATABASE,
                        format!("invalid database json for {name}: {error}"),
                    )
                })?;
                json
            }
            _ => default_database_json(),
        };
        let mut state = self.lock();
        if state.databases.contains_key(name) {
            if ignore_if_exists {
                return Ok(());
            }
            return Err(ApiError::new(
                code::DATABASE_ALREADY_EXIST,
                format!("database {name} already exists"),
            ));
        }
        let now = now_ms();
        state.databases.insert(
            name.to_string(),
            DatabaseEntry {
                name: name.to_string(),
                json,
                created_ms: now,
                modified_ms: now,
            },
        );
        self.persist_or_rollback(&mut state, |state| {
            state.databases.remove(name);
        })
    }

    pub fn drop_database(
        &self,
        name: &str,
        ignore_if_not_exists: bool,
        cascade: bool,
    ) -> Result<DroppedTables, ApiError> {
        let mut state = self.lock();
        if !state.databases.contains_key(name) {
            if ignore_if_not_exists {
                return Ok(Vec::new());
            }
            return Err(unknown_database(&state, name));
        }
        let table_keys: Vec<(String, String)> = state
            .tables
            .keys()
            .filter(|(db, _)| db == name)
            .cloned()
            .collect();
        if !table_keys.is_empty() && !cascade {
            return Err(ApiError::new(
                code::DATABASE_NOT_EMPTY,
                format!(
                    "database {name} is not empty ({} tables); drop its tables first or drop with cascade",
                    table_keys.len()
                ),
            ));
        }
        let database = state.databases.remove(name).expect("checked above");
        let dropped: Vec<Arc<TableEntry>> = table_keys
            .iter()
            .filter_map(|key| state.tables.remove(key))
            .collect();
        let partitions: Vec<_> = dropped
            .iter()
            .filter_map(|t| state.partitions.remove_entry(&t.id))
            .collect();
        let restore = dropped.clone();
        self.persist_or_rollback(&mut state, move |state| {
            state.databases.insert(database.name.clone(), database);
            for table in restore {
                state
                    .tables
                    .insert((table.database.clone(), table.name.clone()), table);
            }
            state.partitions.extend(partitions);
        })?;
        Ok(dropped)
    }

    pub fn database(&self, name: &str) -> Result<DatabaseEntry, ApiError> {
        let state = self.lock();
        state
            .databases
            .get(name)
            .cloned()
            .ok_or_else(|| unknown_database(&state, name))
    }

    /// AlterDatabase (Fluss 1.0): `changes` set or reset custom properties of the database, and
    /// `comment` replaces its comment. `None` when it did not exist and `ignore_if_not_exists`,
    /// or nothing changed (nothing is written then).
    pub fn alter_database(
        &self,
        name: &str,
        changes: &[PropertyChange],
        comment: Option<&str>,
        ignore_if_not_exists: bool,
    ) -> Result<Option<DatabaseEntry>, ApiError> {
        let mut state = self.lock();
        let Some(old) = state.databases.get(name).cloned() else {
            if ignore_if_not_exists {
                return Ok(None);
            }
            return Err(unknown_database(&state, name));
        };
        let corrupt = |e: serde_json::Error| {
            ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!("stored json of database {name} does not parse: {e}"),
            )
        };
        let mut value: Value = serde_json::from_slice(&old.json).map_err(corrupt)?;
        let Some(object) = value.as_object_mut() else {
            return Err(ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!("stored json of database {name} is not an object"),
            ));
        };
        let mut changed = false;
        if let Some(comment) = comment {
            changed |= object.insert("comment".into(), json!(comment)) != Some(json!(comment));
        }
        let properties = object
            .entry("custom_properties")
            .or_insert_with(|| json!({}));
        if let Some(properties) = properties.as_object_mut() {
            for change in changes {
                changed |= match change {
                    PropertyChange::Set { key, value } => {
                        properties.insert(key.clone(), json!(value)) != Some(json!(value))
                    }
                    PropertyChange::Reset { key } => properties.remove(key).is_some(),
                };
            }
        }
        if !changed {
            return Ok(None);
        }
        let entry = DatabaseEntry {
            json: serde_json::to_vec(&value).map_err(corrupt)?,
            modified_ms: now_ms(),
            ..old.clone()
        };
        state.databases.insert(name.to_string(), entry.clone());
        let key = name.to_string();
        self.persist_or_rollback(&mut state, move |state| {
            state.databases.insert(key, old);
        })?;
        Ok(Some(entry))
    }

    pub fn database_exists(&self, name: &str) -> bool {
        self.lock().databases.contains_key(name)
    }

    /// Databases with their table counts, in name order.
    pub fn databases(&self) -> Vec<(DatabaseEntry, i32)> {
        let state = self.lock();
        state
            .databases
            .values()
            .map(|db| {
                let count = state.tables.keys().filter(|(d, _)| *d == db.name).count();
                (db.clone(), count as i32)
            })
            .collect()
    }

    pub fn create_table(
        &self,
        database: &str,
        name: &str,
        table_json: &[u8],
        ignore_if_exists: bool,
    ) -> Result<Option<Arc<TableEntry>>, ApiError> {
        validate_name(name, code::INVALID_TABLE, "table")?;
        let (json, descriptor, bucket_count) =
            self.complete_table_json(database, name, table_json)?;
        let mut state = self.lock();
        if !state.databases.contains_key(database) {
            return Err(unknown_database(&state, database));
        }
        let key = (database.to_string(), name.to_string());
        if state.tables.contains_key(&key) {
            if ignore_if_exists {
                return Ok(None);
            }
            return Err(ApiError::new(
                code::TABLE_ALREADY_EXIST,
                format!("table {database}.{name} already exists"),
            ));
        }
        if !descriptor.is_partitioned() {
            self.check_buckets_max(
                &state,
                i64::from(bucket_count),
                &format!("table {database}.{name} with {bucket_count} buckets"),
            )?;
        }
        let now = now_ms();
        let entry = Arc::new(TableEntry {
            id: state.next_table_id,
            database: database.to_string(),
            name: name.to_string(),
            schema_id: SCHEMA_ID,
            earlier_schemas: Arc::new(Vec::new()),
            client_json: client_view(&json),
            json,
            created_ms: now,
            modified_ms: now,
            descriptor,
            bucket_count,
        });
        state.next_table_id += 1;
        state.tables.insert(key.clone(), entry.clone());
        self.persist_or_rollback(&mut state, move |state| {
            state.tables.remove(&key);
            state.next_table_id -= 1;
        })?;
        Ok(Some(entry))
    }

    pub fn drop_table(
        &self,
        database: &str,
        name: &str,
        ignore_if_not_exists: bool,
    ) -> Result<Option<Arc<TableEntry>>, ApiError> {
        let mut state = self.lock();
        let key = (database.to_string(), name.to_string());
        let Some(entry) = state.tables.remove(&key) else {
            if ignore_if_not_exists {
                return Ok(None);
            }
            return Err(unknown_table(&state, database, name));
        };
        let partitions = state.partitions.remove(&entry.id);
        let restore = entry.clone();
        self.persist_or_rollback(&mut state, move |state| {
            if let Some(partitions) = partitions {
                state.partitions.insert(restore.id, partitions);
            }
            state.tables.insert(key, restore);
        })?;
        Ok(Some(entry))
    }

    /// CreatePartition as Fluss answers it: TABLE_NOT_PARTITIONED for a table without
    /// partition keys, PARTITION_SPEC_INVALID for a spec that does not name each key once
    /// with a valid value, PARTITION_ALREADY_EXISTS (unless `change.ignore`),
    /// PARTITION_MAX_NUM past `partitions_per_table_max`. Returns the new partition, or `None`
    /// when it existed and `change.ignore`.
    pub fn create_partition(
        &self,
        change: PartitionChange,
    ) -> Result<Option<TablePartition>, ApiError> {
        let mut state = self.lock();
        let (table, partition_name) = partition_named(&state, change, true)?;
        let existing = state.partitions.get(&table.id);
        if let Some(partition) = existing.and_then(|p| p.get(&partition_name)) {
            if change.ignore {
                return Ok(None);
            }
            return Err(ApiError::new(
                code::PARTITION_ALREADY_EXISTS,
                format!(
                    "partition '{}' already exists for table {} (id {})",
                    partition.qualified_name(table.descriptor.partition_keys()),
                    table.qualified_name(),
                    partition.id
                ),
            ));
        }
        let count = existing.map_or(0, BTreeMap::len);
        if count >= self.partitions_per_table_max {
            return Err(ApiError::new(
                code::PARTITION_MAX_NUM,
                format!(
                    "table {} already has {count} partitions, the most hotstore.partitions_per_table_max allows; drop old partitions first",
                    table.qualified_name()
                ),
            ));
        }
        self.check_buckets_max(
            &state,
            i64::from(table.bucket_count),
            &format!(
                "partition '{partition_name}' of {} with {} buckets",
                table.qualified_name(),
                table.bucket_count
            ),
        )?;
        let partition = PartitionEntry {
            id: state.next_partition_id,
            table_id: table.id,
            name: partition_name.clone(),
            created_ms: now_ms(),
        };
        state.next_partition_id += 1;
        state
            .partitions
            .entry(table.id)
            .or_default()
            .insert(partition_name.clone(), partition.clone());
        let table_id = table.id;
        self.persist_or_rollback(&mut state, move |state| {
            if let Some(partitions) = state.partitions.get_mut(&table_id) {
                partitions.remove(&partition_name);
            }
            state.next_partition_id -= 1;
        })?;
        Ok(Some((table, partition)))
    }

    /// DropPartition as Fluss answers it: TABLE_NOT_PARTITIONED, PARTITION_SPEC_INVALID, and
    /// PARTITION_NOT_EXISTS unless `change.ignore`. The id is not given out again.
    pub fn drop_partition(
        &self,
        change: PartitionChange,
    ) -> Result<Option<TablePartition>, ApiError> {
        let mut state = self.lock();
        let (table, partition_name) = partition_named(&state, change, false)?;
        let removed = state
            .partitions
            .get_mut(&table.id)
            .and_then(|p| p.remove(&partition_name));
        let Some(partition) = removed else {
            if change.ignore {
                return Ok(None);
            }
            return Err(unknown_partition(&state, &table, &partition_name));
        };
        let restore = partition.clone();
        self.persist_or_rollback(&mut state, move |state| {
            state
                .partitions
                .entry(restore.table_id)
                .or_default()
                .insert(restore.name.clone(), restore);
        })?;
        Ok(Some((table, partition)))
    }

    /// ListPartitionInfos: the table's partitions in name order, those matching `partial` when
    /// given (each of its keys must be a partition key). TABLE_NOT_PARTITIONED for a table
    /// without partition keys.
    pub fn list_partitions(
        &self,
        database: &str,
        name: &str,
        partial: Option<&[(String, String)]>,
    ) -> Result<(Arc<TableEntry>, Vec<PartitionEntry>), ApiError> {
        let state = self.lock();
        let table = partitioned_table(&state, database, name, "list")?;
        let filter = match partial {
            Some(spec) => partitions::partial_spec(&table, spec)?,
            None => Vec::new(),
        };
        let found = state
            .partitions
            .get(&table.id)
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter(|p| partitions::matches(p, &filter))
            .cloned()
            .collect();
        Ok((table, found))
    }

    /// Every partition of table id `table_id`.
    pub fn partitions_of(&self, table_id: i64) -> Vec<PartitionEntry> {
        self.lock()
            .partitions
            .get(&table_id)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A partition by table path and partition name, or PARTITION_NOT_EXISTS.
    pub fn partition_by_name(
        &self,
        database: &str,
        name: &str,
        partition_name: &str,
    ) -> Result<TablePartition, ApiError> {
        let state = self.lock();
        let table = state
            .tables
            .get(&(database.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| unknown_table(&state, database, name))?;
        match state
            .partitions
            .get(&table.id)
            .and_then(|p| p.get(partition_name))
        {
            Some(partition) => Ok((table.clone(), partition.clone())),
            None => Err(unknown_partition(&state, &table, partition_name)),
        }
    }

    /// A partition by id, or PARTITION_NOT_EXISTS.
    pub fn partition_by_id(&self, partition_id: i64) -> Result<TablePartition, ApiError> {
        let state = self.lock();
        let found = state.partitions.iter().find_map(|(table_id, partitions)| {
            let partition = partitions.values().find(|p| p.id == partition_id)?;
            let table = state.tables.values().find(|t| t.id == *table_id)?;
            Some((table.clone(), partition.clone()))
        });
        found.ok_or_else(|| {
            ApiError::new(
                code::PARTITION_NOT_EXISTS,
                format!("partition id {partition_id} does not exist (dropped, or never created)"),
            )
        })
    }

    /// The table id a partition id belongs to while the partition lives, `None` once it was
    /// dropped (ids are never reused, so an id below the next one that no table holds was
    /// dropped); PARTITION_NOT_EXISTS for an id never given out.
    pub fn partition_owner(&self, partition_id: i64) -> Result<Option<i64>, ApiError> {
        let state = self.lock();
        if partition_id < 0 || partition_id >= state.next_partition_id {
            return Err(ApiError::new(
                code::PARTITION_NOT_EXISTS,
                format!(
                    "partition id {partition_id} was never created (the next id is {})",
                    state.next_partition_id
                ),
            ));
        }
        Ok(state
            .partitions
            .iter()
            .find(|(_, partitions)| partitions.values().any(|p| p.id == partition_id))
            .map(|(table_id, _)| *table_id))
    }

    /// Sets and resets a table's properties, as Fluss's AlterTable does: `table.*` keys only
    /// among [`ALTERABLE_PROPERTIES`], with values checked as CreateTable checks them; any other
    /// key is a custom property. Returns the new entry, or `None` when nothing changed or the
    /// table is absent and `ignore_if_not_exists`.
    pub fn alter_table_properties(
        &self,
        database: &str,
        name: &str,
        changes: &[PropertyChange],
        ignore_if_not_exists: bool,
    ) -> Result<Option<Arc<TableEntry>>, ApiError> {
        self.alter_table(database, name, ignore_if_not_exists, |old| {
            with_properties_changed(old, changes)
        })
    }

    pub fn table(&self, database: &str, name: &str) -> Result<Arc<TableEntry>, ApiError> {
        let state = self.lock();
        match state.tables.get(&(database.to_string(), name.to_string())) {
            Some(entry) => Ok(entry.clone()),
            None => Err(unknown_table(&state, database, name)),
        }
    }

    pub fn tables(&self) -> Vec<Arc<TableEntry>> {
        self.lock().tables.values().cloned().collect()
    }

    pub fn list_tables(&self, database: &str) -> Result<Vec<String>, ApiError> {
        let state = self.lock();
        if !state.databases.contains_key(database) {
            return Err(unknown_database(&state, database));
        }
        Ok(state
            .tables
            .keys()
            .filter(|(db, _)| db == database)
            .map(|(_, t)| t.clone())
            .collect())
    }

    /// Parses the client's table JSON and completes it: bucket count and default bucket keys.
    fn complete_table_json(
        &self,
        database: &str,
        name: &str,
        table_json: &[u8],
    ) -> Result<(Vec<u8>, TableDescriptor, i32), ApiError> {
        let invalid = |reason: String| {
            ApiError::new(
                code::INVALID_TABLE,
                format!("invalid table {database}.{name}: {reason}"),
            )
        };
        let mut value: Value =
            serde_json::from_slice(table_json).map_err(|e| invalid(format!("table json: {e}")))?;
        let descriptor =
            TableDescriptor::deserialize_json(&value).map_err(|e| invalid(e.to_string()))?;
        let rules = self.check_table_options(database, name, &descriptor)?;
        let object = value
            .as_object_mut()
            .ok_or_else(|| invalid("table json is not an object".into()))?;
        let properties = object
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| invalid("table properties are not an object".into()))?;
        store_fluss_defaults(database, name, properties, &descriptor, &rules)?;
        let bucket_count = self.complete_buckets(database, name, object, &descriptor)?;
        let descriptor =
            TableDescriptor::deserialize_json(&value).map_err(|e| invalid(e.to_string()))?;
        let json = serde_json::to_vec(&value).map_err(|e| invalid(e.to_string()))?;
        Ok((json, descriptor, bucket_count as i32))
    }

    /// The table's bucket count (the configured default when the client sent none, refused
    /// outside 1..=bucket_count_max) and bucket keys (a primary-key table's default to its
    /// primary key without partition keys), written into `object`.
    fn complete_buckets(
        &self,
        database: &str,
        name: &str,
        object: &mut serde_json::Map<String, Value>,
        descriptor: &TableDescriptor,
    ) -> Result<i64, ApiError> {
        let bucket_count = match object.get("bucket_count").and_then(Value::as_i64) {
            Some(count) => count,
            None => i64::from(self.default_bucket_count),
        };
        if bucket_count < 1 || bucket_count > i64::from(self.bucket_count_max) {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "bucket count {bucket_count} of {database}.{name} is outside 1..={} (raise bucket_count_max to allow more)",
                    self.bucket_count_max
                ),
            ));
        }
        object.insert("bucket_count".into(), json!(bucket_count));
        let bucket_keys_empty = object
            .get("bucket_key")
            .and_then(Value::as_array)
            .is_none_or(|keys| keys.is_empty());
        if bucket_keys_empty && let Some(keys) = physical_primary_key(descriptor) {
            object.insert("bucket_key".into(), json!(keys));
        } else if bucket_keys_empty {
            object.insert("bucket_key".into(), json!([]));
        }
        Ok(bucket_count)
    }

    /// Replaces a table's entry by the one `alter` makes of it under the catalog's lock,
    /// persisted (or rolled back when that fails). `alter` answers `None` when nothing
    /// changes; so does this, and when the table is absent and `ignore_if_not_exists`.
    fn alter_table(
        &self,
        database: &str,
        name: &str,
        ignore_if_not_exists: bool,
        alter: impl FnOnce(&TableEntry) -> Result<Option<TableEntry>, ApiError>,
    ) -> Result<Option<Arc<TableEntry>>, ApiError> {
        let mut state = self.lock();
        let key = (database.to_string(), name.to_string());
        let old = match state.tables.get(&key) {
            Some(table) => table.clone(),
            None if ignore_if_not_exists => return Ok(None),
            None => return Err(unknown_table(&state, database, name)),
        };
        let Some(entry) = alter(&old)? else {
            return Ok(None);
        };
        let entry = Arc::new(entry);
        state.tables.insert(key.clone(), entry.clone());
        self.persist_or_rollback(&mut state, move |state| {
            state.tables.insert(key, old);
        })?;
        Ok(Some(entry))
    }
}

fn default_database_json() -> Vec<u8> {
    br#"{"version":1,"custom_properties":{}}"#.to_vec()
}

fn validate_name(name: &str, error_code: i32, what: &str) -> Result<(), ApiError> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if name.is_empty() || name.len() > NAME_BYTES_MAX || !valid_chars || name.starts_with("__") {
        return Err(ApiError::new(
            error_code,
            format!(
                "{what} name {name:?} is invalid: use 1 to {NAME_BYTES_MAX} characters of a-z, A-Z, 0-9, _ or -, not starting with __"
            ),
        ));
    }
    Ok(())
}

fn unknown_database(state: &State, name: &str) -> ApiError {
    let known: Vec<&str> = state.databases.keys().map(String::as_str).collect();
    ApiError::new(
        code::DATABASE_NOT_EXIST,
        format!("unknown database {name} (known: {})", known.join(", ")),
    )
}

/// The partitioned table `change` names and the name of its partition (whose values are
/// checked too when `creating` it).
fn partition_named(
    state: &State,
    change: PartitionChange,
    creating: bool,
) -> Result<(Arc<TableEntry>, String), ApiError> {
    let action = if creating { "create" } else { "drop" };
    let table = partitioned_table(state, change.database, change.table, action)?;
    let partition_name = partitions::partition_name(&table, change.spec, creating)?;
    Ok((table, partition_name))
}

/// The table at `database.name`, which must be partitioned to `action` partitions.
fn partitioned_table(
    state: &State,
    database: &str,
    name: &str,
    action: &str,
) -> Result<Arc<TableEntry>, ApiError> {
    let table = state
        .tables
        .get(&(database.to_string(), name.to_string()))
        .cloned()
        .ok_or_else(|| unknown_table(state, database, name))?;
    if !table.is_partitioned() {
        return Err(ApiError::new(
            code::TABLE_NOT_PARTITIONED,
            format!(
                "table {database}.{name} is not partitioned, so it has no partitions to {action}"
            ),
        ));
    }
    Ok(table)
}

fn unknown_partition(state: &State, table: &TableEntry, partition_name: &str) -> ApiError {
    let known = known_names(
        state
            .partitions
            .get(&table.id)
            .into_iter()
            .flat_map(BTreeMap::keys),
    );
    ApiError::new(
        code::PARTITION_NOT_EXISTS,
        format!(
            "partition '{partition_name}' of table {} does not exist (known: {known}); create it with CreatePartition",
            table.qualified_name()
        ),
    )
}

fn unknown_table(state: &State, database: &str, name: &str) -> ApiError {
    let known = known_names(
        state
            .tables
            .keys()
            .filter(|(db, _)| db == database)
            .map(|(db, t)| format!("{db}.{t}")),
    );
    ApiError::new(
        code::TABLE_NOT_EXIST,
        format!("unknown table {database}.{name} (known: {known})"),
    )
}

/// The first 20 of `names`, as an error message lists what exists instead: `a, b` or `none`.
fn known_names(names: impl Iterator<Item = impl AsRef<str>>) -> String {
    let known: Vec<String> = names
        .take(20)
        .map(|name| name.as_ref().to_owned())
        .collect();
    if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    }
}

pub(crate) use silt_rt::clock::now_ms;

#[cfg(test)]
mod tests;
