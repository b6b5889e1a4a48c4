//! Partitions over time, through the official fluss-rs client: hot retention of a
//! lake-enabled partitioned table cuts each partition's bucket only up to that partition's
//! tiered offset.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, PartitionSpec, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use fluss::rpc::message::OffsetSpec;

use crate::{BucketRetention, Server, ServerConfig, ServerHandle};

/// A hot store with 1 KiB segments whose retention runs only when a test asks, and whose lake
/// offsets apply from the next run on (no lag).
async fn start(dir: &std::path::Path, configure: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut config = ServerConfig {
        bind_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        retention_check_interval_ms: 3_600_000,
        retention_lake_lag_ms: 0,
        log: crate::storage::LogConfig {
            segment_bytes_max: 1024,
            ..Default::default()
        },
        ..ServerConfig::default()
    };
    configure(&mut config);
    Server::start(config).await.unwrap()
}

async fn connect(server: &ServerHandle) -> FlussConnection {
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = server.local_addr().to_string();
    FlussConnection::new(config).await.unwrap()
}

/// `(dt STRING, id BIGINT, v STRING)` partitioned by `dt`, one bucket, with `properties`.
fn daily(properties: &[(&str, &str)]) -> TableDescriptor {
    let schema = Schema::builder()
        .column("dt", DataTypes::string())
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .build()
        .unwrap();
    let mut builder = TableDescriptor::builder()
        .schema(schema)
        .partitioned_by(vec!["dt"])
        .distributed_by(Some(1), vec![]);
    for (key, value) in properties {
        builder = builder.property(*key, *value);
    }
    builder.build().unwrap()
}

fn day(dt: &str) -> PartitionSpec {
    PartitionSpec::new(HashMap::from([("dt", dt)]))
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
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {}).await;
    let connection = connect(&server).await;
    let admin = connection.get_admin().unwrap();
    let path = TablePath::new("fluss", "daily");
    let descriptor = daily(&[("table.datalake.enabled", "true"), ("table.log.ttl", "1 s")]);
    admin.create_table(&path, &descriptor, false).await.unwrap();
    for dt in ["20240501", "20240502"] {
        admin
            .create_partition(&path, &day(dt), false)
            .await
            .unwrap();
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
        .set_partitioned_lake_snapshot("fluss", "daily", 1, &[(ids["20240501"], 0, 35)])
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
