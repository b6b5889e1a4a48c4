//! Kv snapshots through the official fluss-rs client: what GetLatestKvSnapshots and
//! GetKvSnapshotMetadata answer, read back as a client reads them (the listed files copied
//! into a directory of its own, then opened), against a model of every write.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, KvFormat, Schema, TableDescriptor, TablePath};
use fluss::record::ChangeType;
use fluss::row::{DataGetters, GenericRow, RowDecoderFactory};
use fluss::rpc::message::OffsetSpec;
use proptest::prelude::*;

use super::*;
use crate::test_server::{self, connect, create_table};
use crate::{Server, ServerConfig, ServerHandle};

/// The model: what every acknowledged write leaves, by key.
type Model = BTreeMap<i32, String>;

/// 1 KiB segments, retention and periodic snapshots only when a test asks (the periodic run
/// also runs once at start).
fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        retention_check_interval_ms: 3_600_000,
        kv_snapshot_interval_ms: 3_600_000,
        log: crate::storage::LogConfig {
            segment_bytes_max: 1024,
            ..Default::default()
        },
        kv_snapshot_files: crate::storage::rocksdb_snapshot::WriterConfig {
            table_bytes_target: 2048,
            block_bytes_target: 256,
        },
        ..test_server::config(dir)
    }
}

/// A hot store over `dir`, once the retention run every start makes has finished: a reader
/// racing that run could be told "no snapshot" just before it takes one and cuts (see the
/// README's "A primary-key table read in full").
async fn start(
    dir: &Path,
    configure: impl FnOnce(&mut ServerConfig),
) -> (ServerHandle, FlussConnection) {
    let mut config = config(dir);
    configure(&mut config);
    let server = Server::start(config).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let has_tables = dir
        .join("kv-snapshots")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    while has_tables && server.hot_retention().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no retention run at start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let connection = connect(&server).await;
    (server, connection)
}

/// `id INT PRIMARY KEY, name STRING`, one bucket, `table.log.ttl` 1 ms (so a retention run
/// cuts every closed segment it may).
fn pk_table() -> TableDescriptor {
    let schema = Schema::builder()
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .primary_key(vec!["id"])
        .unwrap()
        .build()
        .unwrap();
    TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(1), vec![])
        .property("table.log.ttl", "1 ms")
        .build()
        .unwrap()
}

/// Upserts (`Some`) or deletes (`None`) `id`, acknowledged, and applies it to `model`.
async fn write(
    connection: &FlussConnection,
    path: &TablePath,
    id: i32,
    name: Option<String>,
    model: &mut Model,
) {
    let table = connection.get_table(path).await.unwrap();
    let writer = table.new_upsert().unwrap().create_writer().unwrap();
    let mut row = GenericRow::new(2);
    row.set_field(0, id);
    match name {
        Some(name) => {
            row.set_field(1, name.clone());
            writer.upsert(&row).unwrap().await.unwrap();
            model.insert(id, name);
        }
        None => {
            writer.delete(&row).unwrap().await.unwrap();
            model.remove(&id);
        }
    }
}

/// The latest kv snapshot of bucket 0 as a client reads it: GetLatestKvSnapshots, then
/// GetKvSnapshotMetadata, the listed files copied into a directory of their own under their
/// RocksDB names, opened and read in key order, each value decoded (schema id, then the row).
/// `None` when the bucket has no snapshot.
async fn read_latest_snapshot(
    connection: &FlussConnection,
    path: &TablePath,
    table_id: i64,
) -> Option<(i64, Model)> {
    let admin = connection.get_admin().unwrap();
    let latest = admin.get_latest_kv_snapshots(path, None).await.unwrap();
    let bucket = &latest.latest_snapshots[0];
    let (id, log_offset) = match (bucket.snapshot_id, bucket.log_offset) {
        (Some(id), Some(log_offset)) => (id, log_offset),
        (None, None) => return None,
        other => panic!("id and offset come together: {other:?}"),
    };
    let metadata = admin
        .get_kv_snapshot_metadata(table_id, None, 0, id)
        .await
        .unwrap();
    assert_eq!(metadata.log_offset, log_offset);
    let copy = tempfile::tempdir().unwrap();
    for file in &metadata.snapshot_files {
        assert!(Path::new(&file.remote_path).is_absolute(), "{file:?}");
        std::fs::copy(&file.remote_path, copy.path().join(&file.local_file_name)).unwrap();
    }
    let reader = crate::storage::rocksdb_snapshot::SnapshotReader::open(copy.path()).unwrap();
    let schema = pk_table().schema().row_type().clone();
    let decoder = RowDecoderFactory::create(KvFormat::COMPACTED, schema).unwrap();
    let mut rows = Model::new();
    for entry in reader.entries() {
        let (_, value) = entry.unwrap();
        assert_eq!(
            &value[..2],
            &1i16.to_le_bytes(),
            "schema id 1, little endian"
        );
        let row = decoder.decode(&value[2..]);
        let name = row.get_string(1).unwrap().to_string();
        rows.insert(row.get_int(0).unwrap(), name);
    }
    Some((log_offset, rows))
}

/// Folds bucket 0's changelog from `from` to its end into `state`.
async fn fold_changelog(
    connection: &FlussConnection,
    path: &TablePath,
    from: i64,
    state: &mut Model,
) {
    let admin = connection.get_admin().unwrap();
    let end = admin
        .list_offsets(path, &[0], OffsetSpec::Latest)
        .await
        .unwrap()[&0];
    let earliest = admin
        .list_offsets(path, &[0], OffsetSpec::Earliest)
        .await
        .unwrap()[&0];
    assert!(
        earliest <= from,
        "the changelog starts at {earliest}, after the snapshot's {from}"
    );
    if from >= end {
        return;
    }
    let table = connection.get_table(path).await.unwrap();
    let scanner = table.new_scan().create_log_scanner().unwrap();
    scanner.subscribe(0, from).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut next = from;
    while next < end {
        assert!(
            std::time::Instant::now() < deadline,
            "changelog read stuck at {next} of {end}"
        );
        for record in scanner.poll(Duration::from_millis(200)).await.unwrap() {
            next = record.offset() + 1;
            let id = record.row().get_int(0).unwrap();
            match record.change_type() {
                ChangeType::Insert | ChangeType::UpdateAfter => {
                    let name = record.row().get_string(1).unwrap().to_string();
                    state.insert(id, name);
                }
                ChangeType::Delete => {
                    state.remove(&id);
                }
                _ => {}
            }
        }
    }
}

/// The invariant: the latest snapshot's rows, then the changelog from its log offset, fold
/// into the model (every write so far); a bucket without a snapshot folds its changelog from
/// 0.
async fn check_snapshot_and_changelog(
    connection: &FlussConnection,
    path: &TablePath,
    table_id: i64,
    model: &Model,
) {
    let (from, mut state) = read_latest_snapshot(connection, path, table_id)
        .await
        .unwrap_or_default();
    fold_changelog(connection, path, from, &mut state).await;
    assert_eq!(&state, model, "snapshot at {from} + changelog after it");
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(i32, u8),
    Delete(i32),
    Snapshot,
    Retention,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..12i32, any::<u8>()).prop_map(|(id, v)| Op::Upsert(id, v)),
        3 => (0..12i32).prop_map(Op::Delete),
        1 => Just(Op::Snapshot),
        1 => Just(Op::Retention),
        1 => Just(Op::Restart),
    ]
}

/// Runs `ops` against a fresh hot store, checking the invariant after every retention run,
/// every restart and at the end.
async fn run_ops(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut connection) = start(dir.path(), |_| {}).await;
    let (path, table_id) = create_table(&connection, "snapshotted", &pk_table()).await;
    let mut model = Model::new();
    for op in ops {
        match op {
            Op::Upsert(id, v) => {
                let name = format!("user {id} version {v} padded to make segments roll");
                write(&connection, &path, id, Some(name), &mut model).await;
            }
            Op::Delete(id) => write(&connection, &path, id, None, &mut model).await,
            Op::Snapshot => drop(server.take_kv_snapshots().await),
            Op::Retention => {
                tokio::time::sleep(Duration::from_millis(2)).await;
                server.apply_retention().await;
                check_snapshot_and_changelog(&connection, &path, table_id, &model).await;
            }
            Op::Restart => {
                server.shutdown().await.unwrap();
                (server, connection) = start(dir.path(), |_| {}).await;
                check_snapshot_and_changelog(&connection, &path, table_id, &model).await;
            }
        }
    }
    check_snapshot_and_changelog(&connection, &path, table_id, &model).await;
    server.shutdown().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// For any sequence of upserts and deletes with snapshots, retention runs and restarts in
    /// between: the latest snapshot plus the changelog from its log offset is every write
    /// folded, so retention never cut what the snapshot lacks.
    #[test]
    fn snapshot_then_changelog_is_every_write(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run_ops(ops));
    }
}

/// Regression: before kv snapshots, retention cut a primary-key changelog and
/// GetLatestKvSnapshots then refused the table (KV_SNAPSHOT_NOT_EXIST), so Flink's default
/// full read of it failed. Retention now takes a snapshot first and cuts no further than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_takes_a_snapshot_before_it_cuts_and_no_further() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let (path, table_id) = create_table(&connection, "cut", &pk_table()).await;
    let mut model = Model::new();
    for round in 0..6 {
        for id in 0..8 {
            let name = format!("user {id} of round {round}, long enough to fill segments");
            write(&connection, &path, id, Some(name), &mut model).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cut = server.apply_retention().await;
    let bucket = cut.iter().find(|b| b.table == "fluss.cut").unwrap();
    assert!(
        bucket.log_start_offset > 0 && bucket.segments_deleted > 0,
        "{bucket:?}"
    );
    let (log_offset, rows) = read_latest_snapshot(&connection, &path, table_id)
        .await
        .unwrap();
    assert!(
        bucket.log_start_offset <= log_offset,
        "cut at {} past the snapshot's {log_offset}",
        bucket.log_start_offset
    );
    assert_eq!(rows, model, "the snapshot holds every key's latest image");
    check_snapshot_and_changelog(&connection, &path, table_id, &model).await;
    server.shutdown().await.unwrap();
}

/// The bucket's latest snapshot (id, log offset) and the ids it keeps, after a snapshot run.
async fn snapshot_run(server: &ServerHandle, table: &str) -> (Option<(i64, i64)>, Vec<i64>) {
    let report = server.take_kv_snapshots().await;
    let bucket = report.into_iter().find(|b| b.table == table).unwrap();
    assert_eq!(bucket.error, None);
    (
        bucket.latest.map(|(id, offset, _)| (id, offset)),
        bucket.kept,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_taken_only_when_the_kv_state_moved_and_the_last_two_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let (path, _) = create_table(&connection, "kept", &pk_table()).await;
    assert_eq!(
        snapshot_run(&server, "fluss.kept").await,
        (None, vec![]),
        "nothing applied, nothing to snapshot"
    );
    let mut model = Model::new();
    for round in 0..4 {
        write(
            &connection,
            &path,
            round,
            Some(format!("r{round}")),
            &mut model,
        )
        .await;
        let expected = Some((i64::from(round), i64::from(round) + 1));
        assert_eq!(snapshot_run(&server, "fluss.kept").await.0, expected);
        let again = snapshot_run(&server, "fluss.kept").await.0;
        assert_eq!(again, expected, "unchanged: none taken");
    }
    assert_eq!(
        snapshot_run(&server, "fluss.kept").await.1,
        [2, 3],
        "the last two"
    );
    server.shutdown().await.unwrap();
}

/// The snapshot ids bucket 0 of `table_id` keeps.
fn kept(server: &ServerHandle, table_id: i64) -> Vec<i64> {
    let table = server.service().tablets.get(table_id).unwrap();
    table.buckets[0].snapshots.as_ref().unwrap().ids()
}

/// A lease keeps its snapshot past the retained count until it is released, dropped or
/// expired; leases survive a restart; a snapshot that does not exist, or one past the bound,
/// is unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_keeps_its_snapshot_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let bounded = |config: &mut ServerConfig| config.kv_snapshot_leased_max = 2;
    let (server, connection) = start(dir.path(), bounded).await;
    let (path, table_id) = create_table(&connection, "leased", &pk_table()).await;
    let mut model = Model::new();
    let key = (table_id, None, 0);
    let service = server.service().clone();
    write(&connection, &path, 0, Some("r0".into()), &mut model).await;
    server.take_kv_snapshots().await;
    let leased = service.acquire_lease("flink", 60_000, vec![(key, 0), (key, 7)]);
    assert_eq!(leased.unwrap(), [(key, 7)], "snapshot 7 does not exist");
    let unknown = ((table_id, None, 9), 0);
    let leased = service.acquire_lease("other", 60_000, vec![unknown]);
    assert_eq!(leased.unwrap(), [unknown], "an unknown bucket");
    let third = service.acquire_lease("third", 60_000, vec![]);
    assert!(third.is_err(), "past the bound of 2: {third:?}");
    for round in 1..4 {
        write(
            &connection,
            &path,
            round,
            Some(format!("r{round}")),
            &mut model,
        )
        .await;
        server.take_kv_snapshots().await;
    }
    assert_eq!(
        kept(&server, table_id),
        [0, 2, 3],
        "the leased one and the last two"
    );
    drop(service);
    server.shutdown().await.unwrap();

    let (server, connection) = start(dir.path(), bounded).await;
    let service = server.service().clone();
    write(&connection, &path, 9, Some("after".into()), &mut model).await;
    server.take_kv_snapshots().await;
    assert_eq!(
        kept(&server, table_id),
        [0, 3, 4],
        "the lease survived the restart"
    );
    service.release_lease("flink", &[key]).unwrap();
    server.take_kv_snapshots().await;
    assert_eq!(kept(&server, table_id), [3, 4]);
    assert_eq!(
        service.acquire_lease("flink", 1, vec![(key, 3)]).unwrap(),
        []
    );
    std::thread::sleep(Duration::from_millis(5));
    write(&connection, &path, 10, Some("later".into()), &mut model).await;
    server.take_kv_snapshots().await;
    assert_eq!(
        kept(&server, table_id),
        [4, 5],
        "an expired lease keeps nothing"
    );
    service.drop_lease("other").unwrap();
    service.drop_lease("never acquired").unwrap();
    server.shutdown().await.unwrap();
}

/// Four rounds of upserts of users 0..8 (rounds `from..from + 4`), each its own batch.
async fn four_rounds(connection: &FlussConnection, path: &TablePath, from: i32, model: &mut Model) {
    for round in from..from + 4 {
        for id in 0..8 {
            let name = format!("user {id} of round {round}, long enough to fill segments");
            write(connection, path, id, Some(name), model).await;
        }
    }
}

/// A reader that leased a snapshot reads the changelog from its log offset next: retention
/// keeps it while the lease lives, whatever newer snapshots exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_changelog_after_a_leased_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let (path, table_id) = create_table(&connection, "held", &pk_table()).await;
    let mut model = Model::new();
    four_rounds(&connection, &path, 0, &mut model).await;
    let (leased, _) = snapshot_run(&server, "fluss.held").await;
    let (leased_id, leased_offset) = leased.unwrap();
    let service = server.service().clone();
    let key = (table_id, None, 0);
    assert_eq!(
        service
            .acquire_lease("reader", 60_000, vec![(key, leased_id)])
            .unwrap(),
        []
    );
    four_rounds(&connection, &path, 4, &mut model).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let log_start = |report: Vec<crate::BucketRetention>| {
        report
            .into_iter()
            .find(|b| b.table == "fluss.held")
            .unwrap()
            .log_start_offset
    };
    let held = log_start(server.apply_retention().await);
    assert!(
        0 < held && held <= leased_offset,
        "cut at {held}, the lease holds {leased_offset}"
    );
    service.release_lease("reader", &[key]).unwrap();
    let cut = log_start(server.apply_retention().await);
    assert!(
        cut > leased_offset,
        "released: cut at {cut}, past {leased_offset}"
    );
    check_snapshot_and_changelog(&connection, &path, table_id, &model).await;
    drop(service);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_table_deletes_its_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let (path, table_id) = create_table(&connection, "dropped", &pk_table()).await;
    write(&connection, &path, 1, Some("one".into()), &mut Model::new()).await;
    server.take_kv_snapshots().await;
    let snapshots = dir.path().join(format!("kv-snapshots/table-{table_id}"));
    assert!(snapshots.join("bucket-0/snap-0/CURRENT").exists());
    let admin = connection.get_admin().unwrap();
    admin.drop_table(&path, false).await.unwrap();
    assert!(!snapshots.exists());
    // A snapshot directory of a table the catalog no longer has goes at the next start.
    let orphan = dir.path().join("kv-snapshots/table-999/bucket-0/snap-0");
    std::fs::create_dir_all(&orphan).unwrap();
    server.shutdown().await.unwrap();
    let (server, _connection) = start(dir.path(), |_| {}).await;
    assert!(!dir.path().join("kv-snapshots/table-999").exists());
    server.shutdown().await.unwrap();
}

/// A partitioned primary-key table's snapshots are per partition and bucket: asked for by
/// partition name, described by partition id, and deleted with the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_buckets_have_snapshots_of_their_own_until_it_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let schema = Schema::builder()
        .column("dt", DataTypes::string())
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .primary_key(vec!["dt", "id"])
        .unwrap()
        .build()
        .unwrap();
    let descriptor = TableDescriptor::builder()
        .schema(schema)
        .partitioned_by(vec!["dt"])
        .distributed_by(Some(1), vec![])
        .build()
        .unwrap();
    let (path, table_id) = create_table(&connection, "daily", &descriptor).await;
    let admin = connection.get_admin().unwrap();
    let day = fluss::metadata::PartitionSpec::new(std::collections::HashMap::from([("dt", "d1")]));
    admin.create_partition(&path, &day, false).await.unwrap();
    let table = connection.get_table(&path).await.unwrap();
    let writer = table.new_upsert().unwrap().create_writer().unwrap();
    for id in 0..5 {
        let mut row = GenericRow::new(3);
        row.set_field(0, "d1");
        row.set_field(1, id);
        row.set_field(2, format!("user {id}"));
        writer.upsert(&row).unwrap();
    }
    writer.flush().await.unwrap();
    server.take_kv_snapshots().await;
    let latest = admin
        .get_latest_kv_snapshots(&path, Some("d1"))
        .await
        .unwrap();
    let partition_id = latest.partition_id.expect("a partition id");
    let bucket = &latest.latest_snapshots[0];
    assert_eq!((bucket.snapshot_id, bucket.log_offset), (Some(0), Some(5)));
    let metadata = admin
        .get_kv_snapshot_metadata(table_id, Some(partition_id), 0, 0)
        .await
        .unwrap();
    let current = metadata
        .snapshot_files
        .iter()
        .find(|f| f.local_file_name == "CURRENT")
        .unwrap();
    let snapshot_dir = Path::new(&current.remote_path)
        .parent()
        .unwrap()
        .to_path_buf();
    let partition_dir = dir.path().join(format!(
        "kv-snapshots/table-{table_id}/partition-{partition_id}"
    ));
    assert!(snapshot_dir.starts_with(std::fs::canonicalize(&partition_dir).unwrap()));
    let reader = crate::storage::rocksdb_snapshot::SnapshotReader::open(&snapshot_dir).unwrap();
    assert_eq!(reader.entries().count(), 5);
    admin.drop_partition(&path, &day, false).await.unwrap();
    assert!(!partition_dir.exists(), "dropped with its partition");
    server.shutdown().await.unwrap();
}

/// A snapshot holds the bucket's write lock only while it opens its iterator: writes go on
/// while the iterator is open, and none of them is in the snapshot written from it (it is the
/// state at its log offset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_while_a_snapshot_reads_and_are_not_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, connection) = start(dir.path(), |_| {}).await;
    let (path, table_id) = create_table(&connection, "busy", &pk_table()).await;
    let mut model = Model::new();
    write(&connection, &path, 0, Some("before".into()), &mut model).await;
    let bucket = server.service().tablets.get(table_id).unwrap().buckets[0].clone();
    let opened = {
        let bucket = bucket.clone();
        let read = move || point_in_time(&bucket, bucket.kv.as_ref().unwrap(), None);
        tokio::task::spawn_blocking(read).await.unwrap()
    };
    let (applied, entries) = opened.unwrap().expect("a changed bucket");
    assert_eq!(applied, 1);
    for id in 1..4 {
        let name = Some(format!("meanwhile {id}"));
        let written = write(&connection, &path, id, name, &mut model);
        let within = tokio::time::timeout(Duration::from_secs(30), written).await;
        assert!(
            within.is_ok(),
            "a write waited on a snapshot's open iterator"
        );
    }
    let snapshot = {
        let snapshots = bucket.snapshots.as_ref().unwrap();
        let turn = snapshots.writing_turn();
        let files = config(dir.path()).kv_snapshot_files;
        snapshots.write(&turn, applied, entries, files).unwrap()
    };
    assert_eq!(
        (snapshot.log_offset, snapshot.rows),
        (1, 1),
        "only the write before it"
    );
    server.shutdown().await.unwrap();
}
