//! The partition scenario (issue 17), run through the official fluss-rs client against any
//! Fluss endpoint (silt's hotstore or a real Apache Fluss cluster) and recorded as a
//! [`PartitionRecord`] so the two can be compared field by field.
//!
//! A day-partitioned log table and a partitioned primary-key table (the partition key inside
//! the primary key) get two partitions each; rows go to both, and each partition must hold
//! only its own. One partition is dropped and created again. The record holds partition
//! names, rows, offsets and error codes, never partition ids (a server chooses them); what it
//! keeps of ids is whether they were all distinct, the recreated partition's included.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use fluss::client::{EARLIEST_OFFSET, FlussAdmin, FlussConnection, FlussTable, Lookuper};
use fluss::metadata::{DataTypes, PartitionSpec, Schema, TableDescriptor, TablePath};
use fluss::row::{DataGetters, GenericRow};
use fluss::rpc::message::OffsetSpec;
use silt_testkit::tables::Table;

use super::scenario::Outcome;

/// The database the scenario owns; it is dropped (cascade) before the scenario starts.
pub const DATABASE: &str = "silt_partitions";
pub const LOG_TABLE: &str = "events";
pub const PK_TABLE: &str = "users";
pub const BUCKETS: i32 = 2;
pub const DAY_1: &str = "2024-05-01";
pub const DAY_2: &str = "2024-05-02";
/// Upper bound on every poll loop of the scenario.
pub const POLL_DEADLINE: Duration = Duration::from_secs(30);

/// Everything observable about partitions that two conforming servers must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRecord {
    /// Partition names of each table after both were created, sorted.
    pub listed: BTreeMap<String, Vec<String>>,
    /// The log table's partitions listed with the partial spec `dt=DAY_2`.
    pub listed_by_spec: Vec<String>,
    /// Per partition of the log table, the ids scanned from the earliest offset, sorted.
    pub scanned: BTreeMap<String, Vec<i32>>,
    /// Per partition of the log table, its latest offsets summed over its buckets.
    pub latest_offsets: BTreeMap<String, i64>,
    /// PK lookups by "partition/id" after the upserts.
    pub lookups: BTreeMap<String, Option<String>>,
    /// The log table's partitions after DAY_1 was dropped.
    pub after_drop: Vec<String>,
    /// The rows of the recreated DAY_1, read by its new id (it starts empty). Read by id, not
    /// by name: a real Fluss drops a partition asynchronously, so for a moment its tablet
    /// servers still resolve the name to the dropped id.
    pub recreated_rows: Vec<i32>,
    /// Whether every partition id seen (the dropped DAY_1's and the recreated one's included)
    /// was distinct.
    pub ids_distinct: bool,
    /// Outcome of each deliberate mistake, by a short name of the call.
    pub errors: BTreeMap<String, Outcome>,
}

/// The log table `(dt STRING, id INT, v STRING)`, partitioned by `dt`.
pub fn log_table() -> Result<TableDescriptor> {
    Table::log(DATABASE, LOG_TABLE)
        .column("dt", DataTypes::string())
        .column("id", DataTypes::int())
        .column("v", DataTypes::string())
        .partitioned_by(&["dt"])
        .buckets(BUCKETS)
        .descriptor()
}

/// The PK table `(dt STRING, id INT, name STRING, PRIMARY KEY (dt, id))`, partitioned by `dt`
/// (or by `partition_key`, which a server must refuse when it is not in the primary key).
pub fn pk_table(partition_key: &str) -> Result<TableDescriptor> {
    let schema = Schema::builder()
        .column("dt", DataTypes::string())
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .primary_key(vec!["dt", "id"])?
        .build()?;
    Ok(TableDescriptor::builder()
        .schema(schema)
        .partitioned_by(vec![partition_key])
        .distributed_by(Some(BUCKETS), vec![])
        .build()?)
}

pub fn day(value: &str) -> PartitionSpec {
    spec(&[("dt", value)])
}

pub fn spec(pairs: &[(&str, &str)]) -> PartitionSpec {
    PartitionSpec::new(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    )
}

pub fn log_row(dt: &str, id: i32) -> GenericRow<'static> {
    let mut row = GenericRow::new(3);
    row.set_field(0, dt.to_string());
    row.set_field(1, id);
    row.set_field(2, format!("v{id}"));
    row
}

pub fn pk_row(dt: &str, id: i32, name: &str) -> GenericRow<'static> {
    let mut row = GenericRow::new(3);
    row.set_field(0, dt.to_string());
    row.set_field(1, id);
    row.set_field(2, name.to_string());
    row
}

/// The name stored under (dt, id), or `None`.
pub async fn lookup(lookuper: &mut Lookuper, dt: &str, id: i32) -> Result<Option<String>> {
    let mut key = GenericRow::new(2);
    key.set_field(0, dt.to_string());
    key.set_field(1, id);
    let result = lookuper
        .lookup(&key)
        .await
        .with_context(|| format!("lookup({dt}, {id})"))?;
    match result.get_single_row()? {
        Some(row) => Ok(Some(row.get_string(2)?.to_string())),
        None => Ok(None),
    }
}

/// Partition name -> id of `path`.
pub async fn partition_ids(admin: &FlussAdmin, path: &TablePath) -> Result<BTreeMap<String, i64>> {
    Ok(admin
        .list_partition_infos(path)
        .await
        .with_context(|| format!("list partitions of {path}"))?
        .iter()
        .map(|p| (p.get_partition_name(), p.get_partition_id()))
        .collect())
}

/// The ids of every row of partition `partition_id` of the log table, read from the earliest
/// offset until `expected` rows arrived (then one more short poll catches extra rows).
pub async fn scan_partition(
    table: &FlussTable<'_>,
    partition_id: i64,
    expected: usize,
) -> Result<Vec<i32>> {
    let scanner = table.new_scan().create_log_scanner()?;
    for bucket in 0..BUCKETS {
        scanner
            .subscribe_partition(partition_id, bucket, EARLIEST_OFFSET)
            .await?;
    }
    let mut ids = Vec::new();
    let started = Instant::now();
    loop {
        let records = scanner.poll(Duration::from_millis(300)).await?;
        for (bucket, records) in records.records_by_buckets() {
            ensure!(
                bucket.partition_id() == Some(partition_id),
                "partition {partition_id}'s scan returned rows of {bucket:?}"
            );
            for record in records {
                ids.push(record.row().get_int(1)?);
            }
        }
        if ids.len() >= expected && started.elapsed() > Duration::from_millis(600) {
            break;
        }
        ensure!(
            started.elapsed() < POLL_DEADLINE,
            "partition {partition_id} has {} of {expected} rows: {ids:?}",
            ids.len()
        );
    }
    ids.sort();
    Ok(ids)
}

async fn latest_sum(admin: &FlussAdmin, path: &TablePath, partition: &str) -> Result<i64> {
    let buckets: Vec<i32> = (0..BUCKETS).collect();
    let offsets = admin
        .list_partition_offsets(path, partition, &buckets, OffsetSpec::Latest)
        .await
        .with_context(|| format!("latest offsets of {path} partition {partition}"))?;
    Ok(offsets.values().sum())
}

/// Runs the scenario against `connection` and returns what it observed.
pub async fn run(connection: &FlussConnection) -> Result<PartitionRecord> {
    let admin = connection.get_admin()?;
    admin.drop_database(DATABASE, true, true).await?;
    admin.create_database(DATABASE, None, false).await?;
    let events = TablePath::new(DATABASE, LOG_TABLE);
    let users = TablePath::new(DATABASE, PK_TABLE);
    let plain = TablePath::new(DATABASE, "plain");
    let mut errors = BTreeMap::new();

    admin.create_table(&events, &log_table()?, false).await?;
    admin.create_table(&users, &pk_table("dt")?, false).await?;
    let unpartitioned = TableDescriptor::builder()
        .schema(Schema::builder().column("id", DataTypes::int()).build()?)
        .distributed_by(Some(1), vec![])
        .build()?;
    admin.create_table(&plain, &unpartitioned, false).await?;
    let outside_key = TablePath::new(DATABASE, "outside_key");
    errors.insert(
        "create pk table partitioned outside its key".into(),
        Outcome::of(
            admin
                .create_table(&outside_key, &pk_table("name")?, false)
                .await,
        ),
    );
    errors.insert(
        "list partitions of an unpartitioned table".into(),
        Outcome::of(admin.list_partition_infos(&plain).await),
    );
    errors.insert(
        "create partition of an unpartitioned table".into(),
        Outcome::of(admin.create_partition(&plain, &day(DAY_1), false).await),
    );
    let before = match admin.list_partition_infos(&events).await {
        Ok(partitions) if partitions.is_empty() => Outcome::Ok,
        Ok(partitions) => Outcome::Client(format!("{} partitions", partitions.len())),
        Err(error) => Outcome::of::<()>(Err(error)),
    };
    errors.insert("list partitions before any".into(), before);

    let mut all_ids = Vec::new();
    for path in [&events, &users] {
        for value in [DAY_1, DAY_2] {
            admin.create_partition(path, &day(value), false).await?;
        }
        all_ids.extend(partition_ids(&admin, path).await?.into_values());
    }
    for (name, call) in [
        ("create an existing partition", day(DAY_1)),
        (
            "create a partition of an unknown key",
            spec(&[("region", "eu")]),
        ),
        (
            "create a partition of two keys",
            spec(&[("dt", DAY_1), ("region", "eu")]),
        ),
        ("create a partition with no key", spec(&[])),
        (
            "create a partition with an invalid value",
            day("2024/05/01"),
        ),
        (
            "create a partition with a reserved value",
            day("__internal"),
        ),
    ] {
        errors.insert(
            name.into(),
            Outcome::of(admin.create_partition(&events, &call, false).await),
        );
    }
    errors.insert(
        "create an existing partition, ignoring it".into(),
        Outcome::of(admin.create_partition(&events, &day(DAY_1), true).await),
    );
    for (name, ignore_if_not_exists) in [
        ("drop an unknown partition", false),
        ("drop an unknown partition, ignoring it", true),
    ] {
        let dropped = admin
            .drop_partition(&events, &day("2030-01-01"), ignore_if_not_exists)
            .await;
        errors.insert(name.into(), Outcome::of(dropped));
    }
    errors.insert(
        "list partitions by an unknown key".into(),
        Outcome::of(
            admin
                .list_partition_infos_with_spec(&events, Some(&spec(&[("region", "eu")])))
                .await,
        ),
    );
    let mut listed = BTreeMap::new();
    for path in [&events, &users] {
        listed.insert(
            path.table().to_string(),
            partition_ids(&admin, path).await?.into_keys().collect(),
        );
    }
    let listed_by_spec = admin
        .list_partition_infos_with_spec(&events, Some(&day(DAY_2)))
        .await?
        .iter()
        .map(|p| p.get_partition_name())
        .collect();

    // Rows to both partitions of the log table; each must hold only its own.
    let log = connection.get_table(&events).await?;
    let writer = log.new_append()?.create_writer()?;
    let day_1_ids: Vec<i32> = (1..=5).collect();
    let day_2_ids: Vec<i32> = (11..=13).collect();
    for &id in &day_1_ids {
        writer.append(&log_row(DAY_1, id))?;
    }
    for &id in &day_2_ids {
        writer.append(&log_row(DAY_2, id))?;
    }
    writer.flush().await?;
    let ids = partition_ids(&admin, &events).await?;
    let mut scanned = BTreeMap::new();
    let mut latest_offsets = BTreeMap::new();
    for (value, expected) in [(DAY_1, day_1_ids.len()), (DAY_2, day_2_ids.len())] {
        scanned.insert(
            value.to_string(),
            scan_partition(&log, ids[value], expected).await?,
        );
        latest_offsets.insert(value.to_string(), latest_sum(&admin, &events, value).await?);
    }

    // The same key in two partitions of the PK table is two rows.
    let pk = connection.get_table(&users).await?;
    let upserts = pk.new_upsert()?.create_writer()?;
    upserts.upsert(&pk_row(DAY_1, 1, "alice"))?.await?;
    upserts.upsert(&pk_row(DAY_2, 1, "bob"))?.await?;
    upserts.upsert(&pk_row(DAY_1, 2, "carol"))?.await?;
    upserts.upsert(&pk_row(DAY_1, 1, "alice2"))?.await?;
    let mut lookuper = pk.new_lookup()?.create_lookuper()?;
    let mut lookups = BTreeMap::new();
    for (value, id) in [(DAY_1, 1), (DAY_2, 1), (DAY_1, 2), (DAY_2, 2)] {
        lookups.insert(
            format!("{value}/{id}"),
            lookup(&mut lookuper, value, id).await?,
        );
    }

    // Drop DAY_1 of the log table and create it again: a new, empty partition with a new id.
    admin.drop_partition(&events, &day(DAY_1), false).await?;
    let after_drop = partition_ids(&admin, &events).await?.into_keys().collect();
    admin.create_partition(&events, &day(DAY_1), false).await?;
    let recreated = partition_ids(&admin, &events).await?;
    all_ids.push(recreated[DAY_1]);
    let recreated_rows = scan_partition(&log, recreated[DAY_1], 0).await?;
    let mut distinct = all_ids.clone();
    distinct.sort();
    distinct.dedup();

    Ok(PartitionRecord {
        listed,
        listed_by_spec,
        scanned,
        latest_offsets,
        lookups,
        after_drop,
        recreated_rows,
        ids_distinct: distinct.len() == all_ids.len(),
        errors,
    })
}

/// What a correct server answers (Fluss 0.9.1's codes; partition ids aside).
pub fn check(record: &PartitionRecord) -> Result<()> {
    let both = vec![DAY_1.to_string(), DAY_2.to_string()];
    ensure!(record.listed[LOG_TABLE] == both, "{record:#?}");
    ensure!(record.listed[PK_TABLE] == both, "{record:#?}");
    ensure!(
        record.listed_by_spec == vec![DAY_2.to_string()],
        "{record:#?}"
    );
    ensure!(
        record.scanned[DAY_1] == (1..=5).collect::<Vec<_>>(),
        "{record:#?}"
    );
    ensure!(
        record.scanned[DAY_2] == (11..=13).collect::<Vec<_>>(),
        "{record:#?}"
    );
    ensure!(
        record.latest_offsets[DAY_1] == 5 && record.latest_offsets[DAY_2] == 3,
        "{record:#?}"
    );
    let name = |s: &str| Some(s.to_string());
    ensure!(
        record.lookups[&format!("{DAY_1}/1")] == name("alice2"),
        "{record:#?}"
    );
    ensure!(
        record.lookups[&format!("{DAY_2}/1")] == name("bob"),
        "{record:#?}"
    );
    ensure!(
        record.lookups[&format!("{DAY_1}/2")] == name("carol"),
        "{record:#?}"
    );
    ensure!(
        record.lookups[&format!("{DAY_2}/2")].is_none(),
        "{record:#?}"
    );
    ensure!(record.after_drop == vec![DAY_2.to_string()], "{record:#?}");
    ensure!(record.recreated_rows.is_empty(), "{record:#?}");
    ensure!(record.ids_distinct, "partition ids reused: {record:#?}");
    let code = |name: &str| match &record.errors[name] {
        Outcome::Api { code, .. } => *code,
        Outcome::Ok => 0,
        Outcome::Client(kind) => panic!("{name}: client error {kind}"),
    };
    for (name, expected) in [
        ("create pk table partitioned outside its key", 15),
        ("list partitions of an unpartitioned table", 37),
        ("create partition of an unpartitioned table", 37),
        ("list partitions before any", 0),
        ("create an existing partition", 42),
        ("create an existing partition, ignoring it", 0),
        ("create a partition of an unknown key", 43),
        ("create a partition of two keys", 43),
        ("create a partition with no key", 43),
        ("create a partition with an invalid value", 43),
        ("create a partition with a reserved value", 43),
        ("drop an unknown partition", 36),
        ("drop an unknown partition, ignoring it", 0),
        ("list partitions by an unknown key", 43),
    ] {
        ensure!(
            code(name) == expected,
            "{name}: expected {expected}, got {:?}",
            record.errors[name]
        );
    }
    Ok(())
}

/// Differences silt keeps on purpose from Fluss 0.9.1, as (field, reason).
pub const KNOWN_DIFFERENCES: &[(&str, &str)] = &[(
    "errors/list partitions by an unknown key",
    "Fluss 0.9.1 wraps its InvalidPartitionException in a FlussRuntimeException while \
     listing, so a client sees UNKNOWN_SERVER_ERROR (-1), or an empty list when the table \
     has no partitions yet; silt answers PARTITION_SPEC_INVALID (43) naming the key",
)];

/// Every field of the two records that differs, with the known reason where there is one.
pub fn differences(
    ours: &PartitionRecord,
    reference: &PartitionRecord,
) -> Vec<silt_testkit::differential::Difference> {
    let mut differences = silt_testkit::differential::Differences::new(KNOWN_DIFFERENCES);
    silt_testkit::compare_fields!(differences, ours, reference;
        listed, listed_by_spec, scanned, latest_offsets, lookups, after_drop, recreated_rows,
        ids_distinct
    );
    for (name, outcome) in &reference.errors {
        differences.compare(
            &format!("errors/{name}"),
            &ours.errors.get(name),
            &Some(outcome),
        );
    }
    differences.found
}
