//! Tables the tests create through the official fluss-rs client: a [`Table`] builder (log or
//! primary key, buckets, lake tiering on or off), the two shapes most tests use
//! ([`events`]: `id BIGINT, v STRING`; [`users`]: `id BIGINT, name STRING, score BIGINT` keyed
//! by `id`), and writers for them.
//!
//! Databases are created if they do not exist; [`Table::create`] fails if the table exists,
//! [`Table::create_if_missing`] leaves it as it is.

pub mod demo;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use anyhow::Result;
use fluss::client::{AppendWriter, FlussConnection, UpsertWriter};
use fluss::metadata::{DataType, DataTypes, PartitionSpec, Schema, TableDescriptor, TablePath};
use fluss::row::{Datum, GenericRow};

/// A table to create: its columns, primary key, bucket count and lake properties.
#[derive(Debug, Clone)]
pub struct Table {
    pub path: TablePath,
    columns: Vec<(String, DataType)>,
    primary_key: Vec<String>,
    buckets: i32,
    lake_freshness: Option<String>,
    properties: Vec<(String, String)>,
    custom_properties: Vec<(String, String)>,
    /// Distributed by these columns; the primary key when empty.
    bucket_key: Vec<String>,
    /// Partitioned by these columns (none: unpartitioned).
    partition_keys: Vec<String>,
}

impl Table {
    /// A log table `database.name` of 3 buckets, not tiered, with no columns yet.
    pub fn log(database: &str, name: &str) -> Table {
        Table {
            path: TablePath::new(database, name),
            columns: Vec::new(),
            primary_key: Vec::new(),
            buckets: 3,
            lake_freshness: None,
            properties: Vec::new(),
            custom_properties: Vec::new(),
            bucket_key: Vec::new(),
            partition_keys: Vec::new(),
        }
    }

    /// A primary-key table keyed by `key` (distributed by it), otherwise as [`Table::log`].
    pub fn primary_key(database: &str, name: &str, key: &[&str]) -> Table {
        let mut table = Table::log(database, name);
        table.primary_key = key.iter().map(|k| k.to_string()).collect();
        table
    }

    pub fn column(mut self, name: &str, data_type: DataType) -> Table {
        self.columns.push((name.to_string(), data_type));
        self
    }

    pub fn buckets(mut self, buckets: i32) -> Table {
        self.buckets = buckets;
        self
    }

    /// Tiered into the lake (`table.datalake.enabled`) at most `freshness` behind (`"300ms"`).
    pub fn lake(mut self, freshness: &str) -> Table {
        self.lake_freshness = Some(freshness.to_string());
        self
    }

    /// Distributed by `columns` (for a primary-key table, a leading part of its key makes
    /// prefix lookups possible) instead of by the primary key.
    pub fn bucket_key(mut self, columns: &[&str]) -> Table {
        self.bucket_key = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Partitioned by `columns` (`PARTITIONED BY`); a primary-key table's must be in its key,
    /// and its bucket key is then the rest of the key.
    pub fn partitioned_by(mut self, columns: &[&str]) -> Table {
        self.partition_keys = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Any other table property, e.g. `table.log.ttl`.
    pub fn property(mut self, key: &str, value: &str) -> Table {
        self.properties.push((key.to_string(), value.to_string()));
        self
    }

    /// A custom property (Fluss keeps it as given, e.g. `silt.datalake.enabled`).
    pub fn custom_property(mut self, key: &str, value: &str) -> Table {
        self.custom_properties
            .push((key.to_string(), value.to_string()));
        self
    }

    /// Tiered by silt from a Fluss cluster that has no lake format of its own: the custom
    /// property `silt.datalake.enabled=true` (the cluster refuses `table.datalake.enabled`),
    /// at most `freshness` behind.
    pub fn lake_on_fluss(self, freshness: &str) -> Table {
        self.custom_property("silt.datalake.enabled", "true")
            .property("table.datalake.freshness", freshness)
    }

    pub fn descriptor(&self) -> Result<TableDescriptor> {
        let mut schema = Schema::builder();
        for (name, data_type) in &self.columns {
            schema = schema.column(name, data_type.clone());
        }
        if !self.primary_key.is_empty() {
            schema = schema.primary_key(self.primary_key.clone())?;
        }
        let mut descriptor = TableDescriptor::builder()
            .schema(schema.build()?)
            .distributed_by(Some(self.buckets), self.bucket_columns());
        if !self.partition_keys.is_empty() {
            descriptor = descriptor.partitioned_by(self.partition_keys.clone());
        }
        if let Some(freshness) = &self.lake_freshness {
            descriptor = descriptor
                .property("table.datalake.enabled", "true")
                .property("table.datalake.freshness", freshness);
        }
        for (key, value) in &self.properties {
            descriptor = descriptor.property(key, value);
        }
        for (key, value) in &self.custom_properties {
            descriptor = descriptor.custom_property(key, value);
        }
        Ok(descriptor.build()?)
    }

    fn bucket_columns(&self) -> Vec<String> {
        if self.bucket_key.is_empty() {
            self.primary_key
                .iter()
                .filter(|c| !self.partition_keys.contains(c))
                .cloned()
                .collect()
        } else {
            self.bucket_key.clone()
        }
    }

    /// Creates the database if it does not exist, then the table (an error if it exists);
    /// answers the table id.
    pub async fn create(&self, connection: &FlussConnection) -> Result<i64> {
        self.create_table(connection, false).await
    }

    /// As [`Table::create`], leaving a table that already exists as it is.
    pub async fn create_if_missing(&self, connection: &FlussConnection) -> Result<i64> {
        self.create_table(connection, true).await
    }

    async fn create_table(&self, connection: &FlussConnection, if_missing: bool) -> Result<i64> {
        let admin = connection.get_admin()?;
        admin
            .create_database(self.path.database(), None, true)
            .await?;
        admin
            .create_table(&self.path, &self.descriptor()?, if_missing)
            .await?;
        Ok(admin.get_table_info(&self.path).await?.get_table_id())
    }
}

/// `database.name`: a log table `id BIGINT, v STRING` of 3 buckets, to write with
/// [`append_events`].
pub fn text_log(database: &str, name: &str) -> Table {
    Table::log(database, name)
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
}

/// `database.events`: [`text_log`] named `events`.
pub fn events(database: &str) -> Table {
    text_log(database, "events")
}

/// `database.users`: `id BIGINT, name STRING, score BIGINT` keyed by `id`, 2 buckets.
pub fn users(database: &str) -> Table {
    Table::primary_key(database, "users", &["id"])
        .column("id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("score", DataTypes::bigint())
        .buckets(2)
}

/// `database.users` of the crash and tiering tests: `id BIGINT, score BIGINT` keyed by `id`,
/// 2 buckets.
pub fn scores(database: &str) -> Table {
    Table::primary_key(database, "users", &["id"])
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .buckets(2)
}

/// `database.name`: a log table `dt STRING, id BIGINT, v STRING` partitioned by `dt`, one
/// partition a day ([`day_spec`], rows by [`day_row`]), 3 buckets a partition, not tiered.
pub fn day_partitioned_log(database: &str, name: &str) -> Table {
    day_columns(Table::log(database, name))
}

/// As [`day_partitioned_log`], a primary-key table keyed by `(dt, id)`.
pub fn day_partitioned_primary_key(database: &str, name: &str) -> Table {
    day_columns(Table::primary_key(database, name, &["dt", "id"]))
}

fn day_columns(table: Table) -> Table {
    table
        .column("dt", DataTypes::string())
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .partitioned_by(&["dt"])
}

/// The row `(day, id, v)` of a day-partitioned table ([`day_partitioned_log`]).
pub fn day_row(day: &str, id: i64, v: &str) -> GenericRow<'static> {
    GenericRow::from_data(vec![
        Datum::from(day.to_string()),
        Datum::from(id),
        Datum::from(v.to_string()),
    ])
}

/// The partition `dt=<day>` of a day-partitioned table.
pub fn day_spec(day: &str) -> PartitionSpec {
    PartitionSpec::new(HashMap::from([("dt".to_string(), day.to_string())]))
}

/// Creates the partition of each of `days` in the day-partitioned table `path` (an error if
/// one exists).
pub async fn create_day_partitions(
    connection: &FlussConnection,
    path: &TablePath,
    days: &[&str],
) -> Result<()> {
    let admin = connection.get_admin()?;
    for day in days {
        admin.create_partition(path, &day_spec(day), false).await?;
    }
    Ok(())
}

/// Appends `(id, v(id))` for every id of `ids` to the `id BIGINT, v STRING` log table at
/// `path` and flushes once at the end.
pub async fn append_events(
    connection: &FlussConnection,
    path: &TablePath,
    ids: Range<i64>,
    v: impl Fn(i64) -> String,
) -> Result<()> {
    let rows = ids.map(|id| GenericRow::from_data(vec![Datum::from(id), Datum::from(v(id))]));
    append_rows(connection, path, rows).await
}

/// A new append writer of the log table at `path`.
pub async fn appender(connection: &FlussConnection, path: &TablePath) -> Result<AppendWriter> {
    let table = connection.get_table(path).await?;
    Ok(table.new_append()?.create_writer()?)
}

/// A new upsert writer of the primary-key table at `path`.
pub async fn upserter(connection: &FlussConnection, path: &TablePath) -> Result<UpsertWriter> {
    let table = connection.get_table(path).await?;
    Ok(table.new_upsert()?.create_writer()?)
}

/// An append writer of a log table and an upsert writer of a primary-key table, flushed
/// together: what a test that writes events and users in step holds.
pub struct LogAndKeyed {
    pub appender: AppendWriter,
    pub upserter: UpsertWriter,
}

impl LogAndKeyed {
    /// New writers of the log table `log` and the primary-key table `keyed`.
    pub async fn open(
        connection: &FlussConnection,
        log: &TablePath,
        keyed: &TablePath,
    ) -> Result<LogAndKeyed> {
        let appender = appender(connection, log).await?;
        let upserter = upserter(connection, keyed).await?;
        Ok(LogAndKeyed { appender, upserter })
    }

    /// Flushes both writers: every write so far is acknowledged.
    pub async fn flush(&self) -> Result<()> {
        self.appender.flush().await?;
        self.upserter.flush().await?;
        Ok(())
    }
}

/// Appends `rows` to the log table at `path` through one writer and flushes once at the end.
pub async fn append_rows<'a>(
    connection: &FlussConnection,
    path: &TablePath,
    rows: impl IntoIterator<Item = GenericRow<'a>>,
) -> Result<()> {
    let writer = appender(connection, path).await?;
    for row in rows {
        writer.append(&row)?;
    }
    writer.flush().await?;
    Ok(())
}

/// Writes `row` to a primary-key table through `writer`: deletes its key when `delete`, else
/// upserts it. It does not wait for the write to be acknowledged; the writer's next flush does.
pub fn upsert_or_delete(writer: &UpsertWriter, row: &GenericRow, delete: bool) -> Result<()> {
    if delete {
        writer.delete(row)?;
    } else {
        writer.upsert(row)?;
    }
    Ok(())
}

/// What [`events`] and [`users`] hold after [`write_events_and_users`]: every event, and the
/// latest user per id (deletes removed).
#[derive(Debug, Default, Clone)]
pub struct Expected {
    pub events: Vec<(i64, String)>,
    pub users: BTreeMap<i64, (String, i64)>,
}

/// Which events of [`write_events_and_users`] also change a user: every `every`-th id upserts
/// user `id % keys` (named `user-<key>-<id>`, score `id`), and every `delete_every`-th of those
/// ids deletes it instead.
#[derive(Debug, Clone, Copy)]
pub struct UserChanges {
    pub every: i64,
    pub keys: i64,
    pub delete_every: i64,
}

/// Writes event `(id, "event-<id>")` into `database.events` for every id of `ids`, changes
/// `database.users` as `changes` says, flushes both every 500 ids, and records it in
/// `expected`.
pub async fn write_events_and_users(
    connection: &FlussConnection,
    database: &str,
    ids: Range<i64>,
    changes: UserChanges,
    expected: &mut Expected,
) -> Result<()> {
    let (events, users) = (
        TablePath::new(database, "events"),
        TablePath::new(database, "users"),
    );
    let writers = LogAndKeyed::open(connection, &events, &users).await?;
    let LogAndKeyed { appender, upserter } = &writers;
    for id in ids {
        let v = format!("event-{id}");
        let mut row = GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, v.as_str());
        appender.append(&row)?;
        expected.events.push((id, v));
        if id % changes.every == 0 {
            let key = id % changes.keys;
            let name = format!("user-{key}-{id}");
            let mut u = GenericRow::new(3);
            u.set_field(0, key);
            u.set_field(1, name.as_str());
            u.set_field(2, id);
            if id % changes.delete_every == 0 {
                upserter.delete(&u)?;
                expected.users.remove(&key);
            } else {
                upserter.upsert(&u)?;
                expected.users.insert(key, (name, id));
            }
        }
        if id % 500 == 499 {
            writers.flush().await?;
        }
    }
    writers.flush().await
}

/// AlterTable's ADD COLUMN of a nullable `name` of `data_type` at the end, as fluss-rs sends it.
pub fn add_column(name: &str, data_type: DataType) -> Result<fluss::metadata::AlterTableChanges> {
    use fluss::metadata::{AddColumn, AlterTableChanges, ColumnPositionType, JsonSerde};
    Ok(AlterTableChanges {
        add_columns: vec![AddColumn {
            column_name: name.to_string(),
            data_type_json: data_type.serialize_json()?.to_string().into_bytes(),
            comment: None,
            position: ColumnPositionType::Last,
        }],
        ..AlterTableChanges::default()
    })
}

/// AlterTable's DROP COLUMN of `name` (which Fluss 0.9.1 and silt refuse).
pub fn drop_column(name: &str) -> fluss::metadata::AlterTableChanges {
    fluss::metadata::AlterTableChanges {
        drop_columns: vec![fluss::metadata::DropColumn {
            column_name: name.to_string(),
        }],
        ..Default::default()
    }
}
