//! Partitions over time, through the official fluss-rs client: hot retention of a
//! lake-enabled partitioned table cuts each partition's bucket only up to that partition's
//! tiered offset.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, PartitionSpec, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use fluss::rpc::message::OffsetSpec;

use crate::test_server::{self, connect, create_table};
use crate::{BucketRetention, Server, ServerConfig, ServerHandle};

/// A hot store over a fresh scratch directory, with 1 KiB segments, whose retention runs only
/// when a test asks and whose lake offsets apply from the next run on (no lag); and a
/// connection to it.
async fn start(
    configure: impl FnOnce(&mut ServerConfig),
) -> (tempfile::TempDir, ServerHandle, FlussConnection) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig {
        retention_check_interval_ms: 3_600_000,
        retention_lake_lag_ms: 0,
        log: crate::storage::LogConfig {
            segment_bytes_max: 1024,
            ..Default::default()
        },
        ..test_server::config(dir.path())
    };
    configure(&mut config);
    let server = Server::start(config).await.unwrap();
    let connection = connect(&server).await;
    (dir, server, connection)
}

/// `(dt STRING, id BIGINT, v STRING)` partitioned by `dt`, one bucket, with `properties`.
fn daily(properties: &[(&str, &str)]) -> TableDescriptor {
    let columns = [
        ("dt", DataTypes::string()),
        ("id", DataTypes::bigint()),
        ("v", DataTypes::string()),
    ];
    test_server::partitioned_table(&columns, &["dt"], properties)
}

fn day(dt: &str) -> PartitionSpec {
    PartitionSpec::new(HashMap::from([("dt", dt)]))
}

/// Creates the partitions `dt=<each of dts>` of `path`.
async fn create_days(connection: &FlussConnection, path: &TablePath, dts: &[&str]) {
    let admin = connection.get_admin().unwrap();
    for dt in dts {
        admin.create_partition(path, &day(dt), false).await.unwrap();
    }
}

/// Ten flushed batches of ten rows into partition `dt` (ids `from..from + 100`), so its log
/// rolls many 1 KiB segments.
async fn append_batches(connection: &FlussConnection, path: &TablePath, dt: &str, from: i64) {
    let table = connection.get_table(path).await.unwrap();
    let writer = table.new_append().unwrap().create_writer().unwrap();
    for id in from..from + 100 {
        let mut row = GenericRow::new(3);
        row.set_field(0, dt.to_string());
        row.set_field(1, id);
        row.set_field(2, format!("event number {id} of {dt}"));
        writer.append(&row).unwrap();
        if id % 10 == 9 {
            writer.flush().await.unwrap();
        }
    }
}

/// Partition name -> id.
async fn partition_ids(connection: &FlussConnection, path: &TablePath) -> BTreeMap<String, i64> {
    connection
        .get_admin()
        .unwrap()
        .list_partition_infos(path)
        .await
        .unwrap()
        .iter()
        .map(|p| (p.get_partition_name(), p.get_partition_id()))
        .collect()
}

/// The report of bucket 0 of partition `partition` of `table`.
fn partition_bucket0(report: &[BucketRetention], table: &str, partition: &str) -> BucketRetention {
    report
        .iter()
        .find(|b| {
            b.table == table
                && b.bucket == 0
                && b.partition.as_ref().map(|p| p.1.as_str()) == Some(partition)
        })
        .cloned()
        .unwrap_or_else(|| panic!("no retention report of {table} {partition}: {report:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lake_enabled_partition_is_cut_only_up_to_its_tiered_offset() {
    let (_dir, server, connection) = start(|_| {}).await;
    let descriptor = daily(&[("table.datalake.enabled", "true"), ("table.log.ttl", "1 s")]);
    let (path, _) = create_table(&connection, "daily", &descriptor).await;
    let admin = connection.get_admin().unwrap();
    create_days(&connection, &path, &["20240501", "20240502"]).await;
    for dt in ["20240501", "20240502"] {
        append_batches(&connection, &path, dt, 0).await;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for dt in ["20240501", "20240502"] {
        append_batches(&connection, &path, dt, 100).await;
    }
    let ids = partition_ids(&connection, &path).await;
    let held = server.apply_retention().await;
    for dt in ["20240501", "20240502"] {
        let bucket = partition_bucket0(&held, "fluss.daily", dt);
        assert!(
            bucket.log_start_offset == 0 && bucket.held_by_tiering,
            "nothing tiered, nothing deleted, whatever the TTL: {bucket:?}"
        );
    }
    // The lake covers the first 35 offsets of 20240501 only: its bucket is cut up to there
    // from the next run on; 20240502's keeps everything.
    server
        .set_lake_snapshot(
            server.table_id("fluss", "daily").unwrap(),
            1,
            &[(Some(ids["20240501"]), 0, 35)],
        )
        .unwrap();
    let first = server.apply_retention().await;
    assert_eq!(
        partition_bucket0(&first, "fluss.daily", "20240501").log_start_offset,
        0,
        "the new lake offset waits one run"
    );
    let report = server.apply_retention().await;
    let cut = partition_bucket0(&report, "fluss.daily", "20240501");
    assert!(
        cut.log_start_offset > 0 && cut.log_start_offset <= 35 && cut.held_by_tiering,
        "cut up to the partition's tiered offset and no further: {cut:?}"
    );
    let other = partition_bucket0(&report, "fluss.daily", "20240502");
    assert!(
        other.log_start_offset == 0 && other.held_by_tiering,
        "another partition's offsets do not cover this one: {other:?}"
    );
    let earliest = admin
        .list_partition_offsets(&path, "20240501", &[0], OffsetSpec::Earliest)
        .await
        .unwrap();
    assert_eq!(earliest[&0], cut.log_start_offset);
    server.shutdown().await.unwrap();
}

/// The current year in UTC, as auto-partitioning with time unit YEAR names it.
fn this_year() -> i32 {
    i32::from(
        jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .year(),
    )
}

/// An auto-partitioned `daily` table by year, in UTC, with `properties` on top.
fn yearly(properties: &[(&str, &str)]) -> TableDescriptor {
    let mut all = vec![
        ("table.auto-partition.enabled", "true"),
        ("table.auto-partition.time-unit", "YEAR"),
        ("table.auto-partition.time-zone", "UTC"),
    ];
    all.extend_from_slice(properties);
    daily(&all)
}

/// `count` rows into partition `dt`, flushed.
async fn append(connection: &FlussConnection, path: &TablePath, dt: &str, count: i64) {
    let table = connection.get_table(path).await.unwrap();
    let writer = table.new_append().unwrap().create_writer().unwrap();
    for id in 0..count {
        let mut row = GenericRow::new(3);
        row.set_field(0, dt.to_string());
        row.set_field(1, id);
        row.set_field(2, format!("row {id}"));
        writer.append(&row).unwrap();
    }
    writer.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_created_partitions_appear_at_create_table_and_on_schedule() {
    let (_dir, server, connection) = start(|config| {
        config.auto_partition_check_interval_ms = 200;
    })
    .await;
    let admin = connection.get_admin().unwrap();
    let before = this_year();
    let descriptor = yearly(&[("table.auto-partition.num-precreate", "3")]);
    let (path, _) = create_table(&connection, "yearly", &descriptor).await;
    // Right after CreateTable, through the client: this year and the two after it.
    let ids = partition_ids(&connection, &path).await;
    let names: Vec<&str> = ids.keys().map(String::as_str).collect();
    let expected = |year: i32| (year..year + 3).map(|y| y.to_string()).collect::<Vec<_>>();
    assert!(
        [expected(before), expected(this_year())]
            .iter()
            .any(|e| *e == names),
        "{names:?}"
    );
    // A pre-created partition dropped by hand comes back at a later check, with a new id.
    let current = names[0].to_string();
    admin
        .drop_partition(&path, &day(&current), false)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = partition_ids(&connection, &path).await;
        if let Some(&id) = now.get(&current) {
            assert!(id > ids[&current], "a new id: {now:?} after {ids:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "partition {current} was not created again: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = server.auto_partitioning();
    assert!(
        report
            .iter()
            .all(|run| run.table == "fluss.yearly" && run.errors.is_empty()),
        "{report:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_expired_partitions_of_a_table_without_a_lake() {
    let (_dir, server, connection) = start(|_| {}).await;
    let admin = connection.get_admin().unwrap();
    // One past year is kept: last year stays, older ones go, written or not.
    let retention = [
        ("table.auto-partition.num-precreate", "1"),
        ("table.auto-partition.num-retention", "1"),
    ];
    let (path, _) = create_table(&connection, "yearly", &yearly(&retention)).await;
    let last_year = (this_year() - 1).to_string();
    create_days(&connection, &path, &["2019", "2020", &last_year]).await;
    append(&connection, &path, "2020", 10).await;
    // A table with two partition keys: its expired partitions go whatever the other key.
    let columns = [("dt", DataTypes::string()), ("region", DataTypes::string())];
    let properties = [
        ("table.auto-partition.key", "dt"),
        ("table.auto-partition.enabled", "true"),
        ("table.auto-partition.time-unit", "YEAR"),
        ("table.auto-partition.time-zone", "UTC"),
        ("table.auto-partition.num-retention", "1"),
    ];
    let regional = test_server::partitioned_table(&columns, &["region", "dt"], &properties);
    let (regions, _) = create_table(&connection, "regional", &regional).await;
    for (region, dt) in [("eu", "2020"), ("us", "2020"), ("eu", last_year.as_str())] {
        let spec = PartitionSpec::new(HashMap::from([("region", region), ("dt", dt)]));
        admin
            .create_partition(&regions, &spec, false)
            .await
            .unwrap();
    }

    let report = server.apply_auto_partitioning().await;
    let run = |table: &str| {
        report
            .iter()
            .find(|r| r.table == table)
            .cloned()
            .unwrap_or_else(|| panic!("no run of {table}: {report:?}"))
    };
    let yearly_run = run("fluss.yearly");
    assert_eq!(yearly_run.dropped, ["2019", "2020"], "{yearly_run:?}");
    assert!(yearly_run.held_by_tiering.is_empty() && yearly_run.errors.is_empty());
    let names: Vec<String> = partition_ids(&connection, &path)
        .await
        .into_keys()
        .collect();
    assert_eq!(names, [last_year.clone(), this_year().to_string()]);
    let regional = run("fluss.regional");
    assert_eq!(regional.dropped, ["eu$2020", "us$2020"], "{regional:?}");
    assert!(
        regional.created.is_empty(),
        "several keys pre-create nothing"
    );
    let names: Vec<String> = partition_ids(&connection, &regions)
        .await
        .into_keys()
        .collect();
    assert_eq!(names, [format!("eu${last_year}")]);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lake_enabled_table_keeps_an_expired_partition_until_the_lake_covers_it() {
    let (_dir, server, connection) = start(|_| {}).await;
    let descriptor = yearly(&[
        ("table.datalake.enabled", "true"),
        ("table.auto-partition.num-precreate", "1"),
        ("table.auto-partition.num-retention", "0"),
    ]);
    let (path, _) = create_table(&connection, "tiered", &descriptor).await;
    // 2019 was never written (the lake holds all of it, nothing); 2020 holds ten rows.
    create_days(&connection, &path, &["2019", "2020"]).await;
    append(&connection, &path, "2020", 10).await;
    let id = partition_ids(&connection, &path).await["2020"];
    let run = || async {
        let report = server.apply_auto_partitioning().await;
        assert_eq!(report.len(), 1, "{report:?}");
        report[0].clone()
    };
    let first = run().await;
    assert_eq!(first.dropped, ["2019"], "{first:?}");
    assert_eq!(first.held_by_tiering, [(id, "2020".to_string())]);
    assert_eq!(
        server.auto_partitioning(),
        std::slice::from_ref(&first),
        "the last run's report"
    );

    // Tiered up to offset 5 of 10: still held. Up to 10: held for one more run (a query may
    // have pinned the previous lake version), then dropped and its offsets forgotten.
    server
        .set_lake_snapshot(
            server.table_id("fluss", "tiered").unwrap(),
            1,
            &[(Some(id), 0, 5)],
        )
        .unwrap();
    assert_eq!(run().await.held_by_tiering.len(), 1);
    assert_eq!(run().await.held_by_tiering.len(), 1);
    server
        .set_lake_snapshot(
            server.table_id("fluss", "tiered").unwrap(),
            2,
            &[(Some(id), 0, 10)],
        )
        .unwrap();
    assert_eq!(
        run().await.held_by_tiering.len(),
        1,
        "the new offset waits one run"
    );
    let last = run().await;
    assert_eq!(last.dropped, ["2020"], "{last:?}");
    assert!(last.held_by_tiering.is_empty());
    let names: Vec<String> = partition_ids(&connection, &path)
        .await
        .into_keys()
        .collect();
    assert_eq!(names, [this_year().to_string()]);
    let snapshot = server.lake_snapshot("fluss", "tiered").unwrap().unwrap();
    assert!(snapshot.partition_offsets.is_empty(), "{snapshot:?}");
    server.shutdown().await.unwrap();
}
