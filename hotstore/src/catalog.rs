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

pub(crate) mod auto_partition;
mod merge_engine;
mod partitions;
mod schemas;

pub(crate) use auto_partition::AutoPartitionStrategy;
pub(crate) use merge_engine::{
    DELETE_BEHAVIOR, DeleteBehavior, MergeEngine, MergeRules, Version, VersionColumn,
};
pub use partitions::PartitionEntry;
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
    ) -> crate::Result<Catalog> {
        let path = dir.join(CATALOG_FILE);
        let mut state = State {
            next_table_id: 1,
            ..State::default()
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                state = parse_catalog(&bytes).map_err(|reason| crate::Error::CatalogCorrupt {
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
            Err(source) => return Err(crate::Error::Io { path, source }),
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
            catalog.persist(&state).map_err(|source| crate::Error::Io {
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

    /// What CreateTable refuses in a table's options, as Fluss does (and what silt does not
    /// implement): its partitioning, TTL, log format and merge rules, which it returns.
    fn check_table_options(
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
        if let Some(ttl) = descriptor.properties().get(crate::retention::LOG_TTL)
            && let Err(reason) = crate::retention::parse_ttl(ttl)
        {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "table {database}.{name}: {}: {reason}",
                    crate::retention::LOG_TTL
                ),
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

    /// Persists the state; on failure undoes the in-memory change and reports a storage error.
    fn persist_or_rollback(
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

    fn persist(&self, state: &State) -> std::io::Result<()> {
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
                    "earlier_schemas": schemas::earlier_schemas_json(t),
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
        "table.datalake.freshness" => match crate::retention::parse_ttl(value) {
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

fn parse_catalog(bytes: &[u8]) -> Result<State, String> {
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
            schemas::earlier_schemas_from(&t["earlier_schemas"])
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

/// The options Fluss writes into a new table that the client left out, so clients reading
/// them back see what applies: the pre-created partition count of a table with several
/// partition keys, a primary-key table's kv format version, a merge engine's delete
/// behaviour. A kv format version other than 1 or 2 is refused.
fn store_fluss_defaults(
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

/// `old` with `changes` made to its properties (see [`Catalog::alter_table_properties`]), or
/// `None` when they change nothing.
fn with_properties_changed(
    old: &TableEntry,
    changes: &[PropertyChange],
) -> Result<Option<TableEntry>, ApiError> {
    let qualified = old.qualified_name();
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
mod tests {
    use super::*;

    fn log_table_json(bucket_count: Option<i64>) -> Vec<u8> {
        let mut value = json!({
            "version": 1,
            "schema": {"version": 1, "columns": [{"name": "a", "data_type": {"type": "INTEGER"}}]},
            "partition_key": [],
            "properties": {"table.datalake.enabled": "true"},
            "custom_properties": {},
        });
        if let Some(count) = bucket_count {
            value["bucket_count"] = json!(count);
        }
        serde_json::to_vec(&value).unwrap()
    }

    /// A catalog of 3 default buckets holding the lake-enabled log table `fluss.t`.
    fn catalog_with_log_table(dir: &std::path::Path) -> (Catalog, Arc<TableEntry>) {
        let catalog = Catalog::open(dir, 3, 64).unwrap();
        let entry = catalog
            .create_table("fluss", "t", &log_table_json(None), false)
            .unwrap()
            .unwrap();
        (catalog, entry)
    }

    /// Clients see `table.datalake.enabled` as the custom property `silt.datalake.enabled`
    /// (Flink's connector would plan a lake union read of the table otherwise); the stored JSON
    /// keeps it, and the view follows an AlterTable and a reopen.
    #[test]
    fn clients_see_datalake_enabled_as_a_custom_property() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, entry) = catalog_with_log_table(dir.path());
        let shown =
            |entry: &TableEntry| -> Value { serde_json::from_slice(&entry.client_json).unwrap() };
        let stored: Value = serde_json::from_slice(&entry.json).unwrap();
        assert_eq!(stored["properties"][DATALAKE_ENABLED], json!("true"));
        let view = shown(&entry);
        assert_eq!(view["properties"].get(DATALAKE_ENABLED), None);
        assert_eq!(
            view["custom_properties"][DATALAKE_ENABLED_SHOWN],
            json!("true")
        );
        assert_eq!(view["bucket_count"], stored["bucket_count"]);
        assert_eq!(view["schema"], stored["schema"]);

        let altered = catalog
            .alter_table_properties(
                "fluss",
                "t",
                &[PropertyChange::Set {
                    key: DATALAKE_ENABLED.to_string(),
                    value: "false".to_string(),
                }],
                false,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            shown(&altered)["custom_properties"][DATALAKE_ENABLED_SHOWN],
            json!("false")
        );
        drop(catalog);
        let reopened = Catalog::open(dir.path(), 3, 64).unwrap();
        let view = shown(&reopened.table("fluss", "t").unwrap());
        assert_eq!(view["properties"].get(DATALAKE_ENABLED), None);
        assert_eq!(
            view["custom_properties"][DATALAKE_ENABLED_SHOWN],
            json!("false")
        );

        // A table without the property is served as stored.
        let plain = br#"{"properties":{"table.log.ttl":"1 h"},"custom_properties":{}}"#;
        assert_eq!(client_view(plain), plain.to_vec());
    }

    #[test]
    fn table_json_is_completed_and_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, entry) = catalog_with_log_table(dir.path());
        assert_eq!(entry.bucket_count, 3);
        let stored: Value = serde_json::from_slice(&entry.json).unwrap();
        assert_eq!(stored["bucket_count"], json!(3));
        assert_eq!(
            stored["properties"]["table.datalake.enabled"],
            json!("true")
        );
        drop(catalog);
        let reopened = Catalog::open(dir.path(), 3, 64).unwrap();
        assert_eq!(reopened.table("fluss", "t").unwrap().id, entry.id);
        let err = reopened
            .create_table("fluss", "t", &log_table_json(Some(2)), false)
            .unwrap_err();
        assert_eq!(err.code, code::TABLE_ALREADY_EXIST);
        let err = reopened
            .create_table("fluss", "u", &log_table_json(Some(65)), false)
            .unwrap_err();
        assert_eq!(err.code, code::INVALID_CONFIG);
        // Log formats: INDEXED for a log table that is not tiered; nothing else but ARROW.
        let with_format = |format: &str, lake: bool| {
            let mut table: Value = serde_json::from_slice(&log_table_json(None)).unwrap();
            table["properties"]["table.log.format"] = json!(format);
            table["properties"]["table.datalake.enabled"] = json!(lake.to_string());
            serde_json::to_vec(&table).unwrap()
        };
        reopened
            .create_table("fluss", "v", &with_format("INDEXED", false), false)
            .unwrap();
        for (name, format, lake) in [("w", "COMPACTED", false), ("x", "INDEXED", true)] {
            let err = reopened
                .create_table("fluss", name, &with_format(format, lake), false)
                .unwrap_err();
            assert_eq!(err.code, code::INVALID_CONFIG, "{format} lake={lake}");
        }
        let err = reopened
            .alter_table_properties(
                "fluss",
                "v",
                &[PropertyChange::Set {
                    key: "table.datalake.enabled".into(),
                    value: "true".into(),
                }],
                false,
            )
            .unwrap_err();
        assert!(err.message.contains("cannot be tiered"), "{}", err.message);
    }

    /// The user table `(id INT PRIMARY KEY, name STRING, ver <ver_type>)`, without its
    /// primary key when `primary_key` is false, with `properties`.
    fn merge_table_json(
        primary_key: bool,
        ver_type: fluss::metadata::DataType,
        properties: &[(&str, &str)],
    ) -> Vec<u8> {
        use fluss::metadata::{DataTypes, Schema};
        let mut schema = Schema::builder()
            .column("id", DataTypes::int())
            .column("name", DataTypes::string())
            .column("ver", ver_type);
        if primary_key {
            schema = schema.primary_key(vec!["id"]).unwrap();
        }
        let mut descriptor = TableDescriptor::builder()
            .schema(schema.build().unwrap())
            .distributed_by(Some(1), vec![]);
        for (key, value) in properties {
            descriptor = descriptor.property(*key, *value);
        }
        serde_json::to_vec(&descriptor.build().unwrap().serialize_json().unwrap()).unwrap()
    }

    /// Creates the table and returns `ok` or its error code and message.
    fn create_merge_table(
        primary_key: bool,
        ver_type: fluss::metadata::DataType,
        properties: &[(&str, &str)],
    ) -> String {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
        let json = merge_table_json(primary_key, ver_type, properties);
        match catalog.create_table("fluss", "t", &json, false) {
            Ok(_) => "ok".to_string(),
            Err(error) => format!("{}: {}", error.code, error.message),
        }
    }

    #[test]
    fn merge_engine_properties_are_validated_as_fluss_does() {
        use fluss::metadata::DataTypes;
        const ENGINE: &str = "table.merge-engine";
        const VER: &str = "table.merge-engine.versioned.ver-column";
        const DELETES: &str = "table.delete.behavior";
        let bigint = DataTypes::bigint;
        // (primary key, type of `ver`, properties, the answer starts with, and contains)
        type Case<'a> = (
            bool,
            fluss::metadata::DataType,
            &'a [(&'a str, &'a str)],
            &'a str,
            &'a str,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (true, bigint(), &[(ENGINE, "first_row")], "ok", ""),
            (true, bigint(), &[(ENGINE, "FIRST_ROW")], "ok", ""),
            (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
            (true, DataTypes::int(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
            (true, DataTypes::timestamp(), &[(ENGINE, "Versioned"), (VER, "ver")], "ok", ""),
            (true, DataTypes::timestamp_ltz(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
            (true, bigint(), &[(DELETES, "ignore")], "ok", ""),
            (true, bigint(), &[(DELETES, "DISABLE")], "ok", ""),
            (true, bigint(), &[(DELETES, "allow")], "ok", ""),
            (true, bigint(), &[(ENGINE, "first_row"), (DELETES, "disable")], "ok", ""),
            (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver"), (DELETES, "ignore")], "ok", ""),
            (true, bigint(), &[(ENGINE, "aggregation")], "39: ", "silt implements first_row and versioned"),
            (true, bigint(), &[(ENGINE, "aggregation")], "39: ", ENGINE),
            (true, bigint(), &[(ENGINE, "last_row")], "39: ", "'last_row'"),
            (true, bigint(), &[(ENGINE, "last_row")], "39: ", "silt implements first_row and versioned"),
            (false, bigint(), &[(ENGINE, "first_row")], "39: ", "primary-key table"),
            (true, bigint(), &[(ENGINE, "versioned")], "39: ", VER),
            (true, bigint(), &[(ENGINE, "versioned"), (VER, "version")], "39: ", "'version'"),
            (true, DataTypes::string(), &[(ENGINE, "versioned"), (VER, "ver")], "39: ", "INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ"),
            (true, DataTypes::double(), &[(ENGINE, "versioned"), (VER, "ver")], "39: ", "'ver'"),
            (true, bigint(), &[(ENGINE, "first_row"), (DELETES, "allow")], "39: ", "ignore"),
            (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver"), (DELETES, "ALLOW")], "39: ", DELETES),
            (true, bigint(), &[(DELETES, "drop")], "39: ", "'drop'"),
            (false, bigint(), &[(DELETES, "ignore")], "39: ", "primary-key table"),
        ];
        for (primary_key, ver_type, properties, starts_with, contains) in cases {
            let answer = create_merge_table(*primary_key, ver_type.clone(), properties);
            assert!(
                answer.starts_with(starts_with) && answer.contains(contains),
                "{properties:?} (primary key: {primary_key}, ver {ver_type}): {answer}"
            );
        }

        // As in Fluss, a merge table gets the engine's default delete behavior written in.
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
        for (name, properties, stored) in [
            ("a", &[(ENGINE, "first_row")][..], json!("IGNORE")),
            (
                "b",
                &[(ENGINE, "first_row"), (DELETES, "disable")][..],
                json!("disable"),
            ),
            ("c", &[][..], Value::Null),
        ] {
            let json = merge_table_json(true, bigint(), properties);
            let entry = catalog
                .create_table("fluss", name, &json, false)
                .unwrap()
                .unwrap();
            let value: Value = serde_json::from_slice(&entry.json).unwrap();
            assert_eq!(value["properties"][DELETES], stored, "{properties:?}");
        }
    }

    /// `(dt STRING, region STRING, id INT)`, partitioned by (dt, region); a PK table with
    /// `primary_key` when given.
    fn partitioned_json(primary_key: Option<&[&str]>, partition_keys: &[&str]) -> Vec<u8> {
        use fluss::metadata::{DataTypes, Schema};
        let mut schema = Schema::builder()
            .column("dt", DataTypes::string())
            .column("region", DataTypes::string())
            .column("id", DataTypes::int())
            .column("amount", DataTypes::decimal(10, 2));
        if let Some(keys) = primary_key {
            schema = schema.primary_key(keys.to_vec()).unwrap();
        }
        let descriptor = TableDescriptor::builder()
            .schema(schema.build().unwrap())
            .partitioned_by(partition_keys.to_vec())
            .distributed_by(Some(2), vec![])
            .build()
            .unwrap();
        serde_json::to_vec(&descriptor.serialize_json().unwrap()).unwrap()
    }

    /// (primary key, partition keys, expected code)
    type TableCase<'a> = (Option<&'a [&'a str]>, &'a [&'a str], i32);
    /// (table, partition spec, expected code)
    type SpecCase<'a> = (&'a str, &'a [(&'a str, &'a str)], i32);

    /// A change of `fluss.<table>`'s partition `spec` that does not ignore its answer.
    fn change<'a>(table: &'a str, spec: &'a [(String, String)]) -> PartitionChange<'a> {
        PartitionChange {
            database: "fluss",
            table,
            spec,
            ignore: false,
        }
    }

    fn code_of<T>(result: Result<T, ApiError>) -> i32 {
        result.map_or_else(|e| e.code, |_| 0)
    }

    #[test]
    fn partitioned_tables_are_checked_as_fluss_does() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
        // (primary key, partition keys, expected code)
        let cases: &[TableCase] = &[
            (None, &["dt"], 0),
            (None, &["dt", "region"], 0),
            (Some(&["dt", "id"]), &["dt"], 0),
            (Some(&["id"]), &["dt"], code::INVALID_TABLE),
            (Some(&["dt", "id"]), &["dt", "region"], code::INVALID_TABLE),
            (None, &["nope"], code::INVALID_TABLE),
            (None, &["amount"], code::INVALID_TABLE),
        ];
        for (i, (primary_key, keys, expected)) in cases.iter().enumerate() {
            let json = partitioned_json(*primary_key, keys);
            let result = catalog.create_table("fluss", &format!("t{i}"), &json, false);
            assert_eq!(code_of(result), *expected, "{primary_key:?} by {keys:?}");
        }
        // Auto-partitioned tables: one key; several keys with the time key named (Fluss stores
        // num-precreate 0 for them); refused without partition keys or beyond the partition
        // limit of pre-created partitions.
        let auto = |keys: &[&str], properties: &[(&str, &str)]| {
            let mut json: Value = serde_json::from_slice(&partitioned_json(None, keys)).unwrap();
            json["properties"]["table.auto-partition.enabled"] = json!("true");
            for (key, value) in properties {
                json["properties"][key] = json!(value);
            }
            serde_json::to_vec(&json).unwrap()
        };
        let created = catalog
            .create_table("fluss", "auto1", &auto(&["dt"], &[]), false)
            .unwrap()
            .unwrap();
        assert!(
            AutoPartitionStrategy::of("fluss.auto1", &created.descriptor)
                .unwrap()
                .is_some()
        );
        let several = catalog
            .create_table(
                "fluss",
                "auto2",
                &auto(&["dt", "region"], &[("table.auto-partition.key", "dt")]),
                false,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            several.descriptor.properties()["table.auto-partition.num-precreate"],
            "0"
        );
        let unpartitioned = catalog.create_table("fluss", "auto3", &auto(&[], &[]), false);
        assert_eq!(code_of(unpartitioned), code::INVALID_CONFIG);
        let catalog = catalog.with_partitions_per_table_max(10);
        for (precreate, expected) in [
            ("10", 0),
            ("11", code::INVALID_CONFIG),
            ("-1", code::INVALID_CONFIG),
        ] {
            let json = auto(
                &["dt"],
                &[("table.auto-partition.num-precreate", precreate)],
            );
            let result = catalog.create_table("fluss", &format!("pre{precreate}"), &json, false);
            assert_eq!(code_of(result), expected, "num-precreate {precreate}");
        }
    }

    #[test]
    fn partition_specs_are_checked_and_ids_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(dir.path(), 1, 64)
            .unwrap()
            .with_partitions_per_table_max(3);
        let json = partitioned_json(None, &["dt", "region"]);
        catalog.create_table("fluss", "t", &json, false).unwrap();
        catalog
            .create_table("fluss", "plain", &log_table_json(Some(1)), false)
            .unwrap();
        let spec = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let create = |table: &str, pairs: &[(&str, &str)]| {
            code_of(catalog.create_partition(change(table, &spec(pairs))))
        };
        let first = [("dt", "20240501"), ("region", "eu")];
        // (table, spec, expected code), in order: ids 0 and 1 are given out.
        let cases: &[SpecCase] = &[
            ("t", &first, 0),
            ("t", &[("region", "us"), ("dt", "20240501")], 0),
            ("t", &first, code::PARTITION_ALREADY_EXISTS),
            ("plain", &[("dt", "1")], code::TABLE_NOT_PARTITIONED),
            ("nope", &[("dt", "1")], code::TABLE_NOT_EXIST),
        ];
        for (table, pairs, expected) in cases {
            assert_eq!(create(table, pairs), *expected, "{table} {pairs:?}");
        }
        // Specs Fluss refuses: a key missing, one too many, one twice, an unknown one, and
        // values that cannot name a partition.
        for pairs in [
            &[("dt", "20240501")][..],
            &[("dt", "1"), ("region", "eu"), ("x", "1")],
            &[("dt", "1"), ("dt", "2")],
            &[("dt", "1"), ("zone", "eu")],
            &[("dt", "2024/05"), ("region", "eu")],
            &[("dt", "a$b"), ("region", "eu")],
            &[("dt", ""), ("region", "eu")],
            &[("dt", "__x"), ("region", "eu")],
        ] {
            assert_eq!(
                create("t", pairs),
                code::PARTITION_SPEC_INVALID,
                "{pairs:?}"
            );
        }
        let (_, listed) = catalog.list_partitions("fluss", "t", None).unwrap();
        let names: Vec<(&str, i64)> = listed.iter().map(|p| (p.name.as_str(), p.id)).collect();
        assert_eq!(names, [("20240501$eu", 0), ("20240501$us", 1)]);
        let (_, by_region) = catalog
            .list_partitions("fluss", "t", Some(&spec(&[("region", "us")])))
            .unwrap();
        assert_eq!(by_region.len(), 1);
        assert_eq!(
            by_region[0].qualified_name(&["dt".into(), "region".into()]),
            "dt=20240501/region=us"
        );

        // Dropped ids are not given out again, not even after a reopen.
        let dropped = catalog
            .drop_partition(change("t", &spec(&first)))
            .unwrap()
            .unwrap();
        assert_eq!(dropped.1.id, 0);
        let again = catalog.drop_partition(change("t", &spec(&first)));
        assert_eq!(code_of(again), code::PARTITION_NOT_EXISTS);
        drop(catalog);
        let catalog = Catalog::open(dir.path(), 1, 64)
            .unwrap()
            .with_partitions_per_table_max(3);
        let (_, created) = catalog
            .create_partition(change("t", &spec(&first)))
            .unwrap()
            .unwrap();
        assert_eq!(created.id, 2);
        assert_eq!(catalog.partition_by_id(1).unwrap().1.name, "20240501$us");
        assert_eq!(
            code_of(catalog.partition_by_id(0)),
            code::PARTITION_NOT_EXISTS
        );
        catalog
            .create_partition(change("t", &spec(&[("dt", "3"), ("region", "eu")])))
            .unwrap();
        let full = catalog.create_partition(change("t", &spec(&[("dt", "4"), ("region", "eu")])));
        assert_eq!(code_of(full), code::PARTITION_MAX_NUM);

        // Dropping the table drops its partitions; their ids stay used.
        let table_id = catalog.table("fluss", "t").unwrap().id;
        catalog.drop_table("fluss", "t", false).unwrap();
        assert!(catalog.partitions_of(table_id).is_empty());
        catalog.create_table("fluss", "t", &json, false).unwrap();
        let (_, fresh) = catalog
            .create_partition(change("t", &spec(&[("dt", "1"), ("region", "eu")])))
            .unwrap()
            .unwrap();
        assert_eq!(fresh.id, 4);
    }

    #[test]
    fn names_are_validated() {
        for (name, ok) in [
            ("orders", true),
            ("a-b_9", true),
            ("", false),
            ("__x", false),
            ("a.b", false),
        ] {
            assert_eq!(
                validate_name(name, code::INVALID_TABLE, "table").is_ok(),
                ok,
                "{name}"
            );
        }
    }
}
