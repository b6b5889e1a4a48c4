//! LimitScan and the kv snapshot requests through the official fluss-rs client (its
//! `create_bucket_batch_scanner`, `get_latest_kv_snapshots`, `get_kv_snapshot_metadata` and
//! lease calls), as Apache Fluss 0.9.1 answers them: a log table's limit scan gives its last
//! rows, a primary-key table's the current values of its first keys; a bucket without a kv
//! snapshot yet is read from offset 0, one with a snapshot from the snapshot's rows and the
//! changelog after it, and both show every row once; the errors (bad limits, unknown tables and
//! buckets, scans past the response bound) at the wire.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use arrow::array::{Int64Array, RecordBatch, StringArray};
use common::raw_fluss;
use fluss::client::{FlussConnection, FlussTable};
use fluss::metadata::{
    KvSnapshotLeaseForBucket, KvSnapshotLeaseForTable, TableBucket, TableDescriptor, TablePath,
};
use fluss::rpc::message::OffsetSpec;
use prost::Message;
use silt_hotstore::protocol::messages::{ErrorResponse, LimitScanRequest, LimitScanResponse};
use silt_hotstore::protocol::{api, code};
use silt_hotstore::{ServerConfig, ServerHandle};
use silt_testkit::hotstore::{self, api_code};
use silt_testkit::kv_snapshots;
use silt_testkit::rows::{self, UserRow, read_user, user, users_in};
use silt_testkit::tables::{Table, append_events, text_log};

/// Small segments, so a log's last rows span several of them, and small limits, so the tests
/// can reach them.
fn small_limits(response_bytes_max: usize) -> impl FnOnce(&mut ServerConfig) {
    move |config| {
        config.log.segment_bytes_max = 1024;
        config.limit_scan_rows_max = 1000;
        config.fetch_response_bytes_max = response_bytes_max;
    }
}

/// A hot store over `dir` with [`small_limits`].
async fn start(dir: &std::path::Path, response_bytes_max: usize) -> Result<ServerHandle> {
    hotstore::start_with(dir, small_limits(response_bytes_max)).await
}

/// The rows of one bucket's limit scan, through fluss-rs.
/// A hot store as [`start`] makes it, with 1 MiB responses, holding the primary-key table
/// `fluss.users` as `descriptor` describes it, and a connection to it.
async fn start_with_users(
    dir: &std::path::Path,
    descriptor: &TableDescriptor,
) -> Result<(ServerHandle, FlussConnection, TablePath)> {
    let server = start(dir, 1 << 20).await?;
    let connection = hotstore::connect(&server).await?;
    let path = TablePath::new("fluss", "users");
    connection
        .get_admin()?
        .create_table(&path, descriptor, false)
        .await?;
    Ok((server, connection, path))
}

async fn limit_scan(
    table: &FlussTable<'_>,
    bucket: i32,
    limit: i32,
    projection: Option<&[usize]>,
) -> fluss::error::Result<fluss::record::ScanBatch> {
    let table_id = table.get_table_info().get_table_id();
    let mut scan = table.new_scan().limit(limit)?;
    if let Some(columns) = projection {
        scan = scan.project(columns)?;
    }
    let mut scanner = scan.create_bucket_batch_scanner(TableBucket::new(table_id, bucket))?;
    let batches = scanner.collect_all_batches().await?;
    Ok(batches
        .into_iter()
        .next()
        .expect("a limit scan yields one batch"))
}

fn longs(batch: &RecordBatch, column: usize) -> Vec<i64> {
    let values = batch
        .column(column)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("a BIGINT column");
    values.values().to_vec()
}

/// Eight flushed batches of five events (ids 0..40), so the log rolls several 1 KiB segments.
async fn append_eight_batches(connection: &FlussConnection, path: &TablePath) -> Result<()> {
    for from in (0..40).step_by(5) {
        append_events(connection, path, from..from + 5, |id| format!("event {id}")).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_tables_limit_scan_answers_its_last_rows() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(small_limits(1 << 20)).await?;
    let events = text_log("scan", "events").buckets(1);
    events.create(&connection).await?;
    let table = connection.get_table(&events.path).await?;
    let empty = limit_scan(&table, 0, 10, None).await?;
    ensure!(empty.batch().num_rows() == 0, "an empty table: {empty:?}");

    append_eight_batches(&connection, &events.path).await?;
    for (limit, expected) in [(1, 39..40), (12, 28..40), (40, 0..40), (1000, 0..40)] {
        let scanned = limit_scan(&table, 0, limit, None).await?;
        ensure!(
            longs(scanned.batch(), 0) == expected.clone().collect::<Vec<_>>(),
            "limit {limit}: {:?}",
            longs(scanned.batch(), 0)
        );
        ensure!(
            scanned.base_offset() == expected.start,
            "limit {limit} starts at offset {} (ids are offsets)",
            scanned.base_offset()
        );
    }
    let projected = limit_scan(&table, 0, 2, Some(&[1])).await?;
    let texts = projected
        .batch()
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .map(|texts| {
            texts
                .iter()
                .flatten()
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
    ensure!(
        texts == Some(vec!["event 38".to_string(), "event 39".to_string()]),
        "projected to v: {texts:?}"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_tables_limit_scan_answers_the_current_values_of_its_first_keys() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let (server, connection, path) = start_with_users(dir.path(), &rows::user_table()?).await?;
    let table = connection.get_table(&path).await?;
    let empty = limit_scan(&table, 0, 10, None).await?;
    ensure!(empty.batch().num_rows() == 0, "an empty table: {empty:?}");

    let writer = table.new_upsert()?.create_writer()?;
    for id in 1..=5 {
        writer.upsert(&user(id, Some(&format!("user {id}")), Some(i64::from(id))))?;
    }
    writer.upsert(&user(2, Some("user 2 again"), Some(20)))?;
    writer.delete(&user(4, None, None))?;
    writer.flush().await?;
    let current = |id: i32, name: &str, score: i64| UserRow {
        id,
        name: Some(name.to_string()),
        score: Some(score),
    };
    let all = [
        current(1, "user 1", 1),
        current(2, "user 2 again", 20),
        current(3, "user 3", 3),
        current(5, "user 5", 5),
    ];
    // Keys 1..5 encode as one byte each, so key order is id order.
    for (limit, expected) in [(3, &all[..3]), (4, &all[..]), (1000, &all[..])] {
        let scanned = limit_scan(&table, 0, limit, None).await?;
        ensure!(
            users_in(scanned.batch())? == expected,
            "limit {limit}: {:?}",
            users_in(scanned.batch())?
        );
    }
    server.shutdown().await?;
    Ok(())
}

/// The table [`a_full_read_is_the_latest_kv_snapshot_then_the_changelog_after_it`] writes: 30 users, three rounds of upserts, every
/// seventh deleted.
fn thirty_users_after_round_2() -> BTreeMap<i32, UserRow> {
    (0..30)
        .filter(|id| id % 7 != 0)
        .map(|id| (id, read_user(&user(id, Some("round 2"), Some(2))).unwrap()))
        .collect()
}

/// What Flink's default primary-key source (`scan.startup.mode=full`) does: ask for the latest
/// kv snapshots; read a bucket without one from its earliest offset, a bucket with one from its
/// rows, then its changelog from the snapshot's log offset. Folded by key, both are the table:
/// every row once, nothing missing. Before: silt kept no snapshots and answered "none" for
/// every bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_is_the_latest_kv_snapshot_then_the_changelog_after_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (server, connection, path) = start_with_users(dir.path(), &rows::user_table_of(2)?).await?;
    let admin = connection.get_admin()?;
    let table_id = admin.get_table_info(&path).await?.get_table_id();
    let table = connection.get_table(&path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for round in 0..3i64 {
        for id in 0..30 {
            writer.upsert(&user(id, Some(&format!("round {round}")), Some(round)))?;
        }
    }
    for id in (0..30).step_by(7) {
        writer.delete(&user(id, None, None))?;
    }
    writer.flush().await?;

    let before = kv_snapshots::latest(&connection, &path).await?;
    ensure!(
        before
            .iter()
            .map(|(b, s)| (*b, s.is_none()))
            .collect::<Vec<_>>()
            == [(0, true), (1, true)],
        "no snapshot before the first snapshot run: {before:?}"
    );
    let read = kv_snapshots::full_read_users(&connection, &path).await?;
    ensure!(
        read == thirty_users_after_round_2(),
        "the changelog from 0 folds into the table: {read:?}"
    );

    server.take_kv_snapshots().await;
    let latest = admin.get_latest_kv_snapshots(&path, None).await?;
    let ends = admin
        .list_offsets(&path, &[0, 1], OffsetSpec::Latest)
        .await?;
    let buckets: Vec<_> = latest
        .latest_snapshots
        .iter()
        .map(|s| (s.bucket_id, s.snapshot_id, s.log_offset))
        .collect();
    ensure!(
        latest.table_id == table_id
            && buckets == [(0, Some(0), Some(ends[&0])), (1, Some(0), Some(ends[&1]))],
        "snapshot 0 of each bucket, at its latest offset: {buckets:?} (ends {ends:?})"
    );
    let snapshots = kv_snapshots::latest(&connection, &path).await?;
    let mut from_snapshots = BTreeMap::new();
    for (bucket, snapshot) in &snapshots {
        let snapshot = snapshot.as_ref().context("a snapshot")?;
        ensure!(
            snapshot.file_names.iter().any(|n| n == "CURRENT")
                && snapshot.file_names.iter().any(|n| n == "MANIFEST-000001"),
            "bucket {bucket}: {:?}",
            snapshot.file_names
        );
        for user in kv_snapshots::users_of(snapshot, 1)? {
            from_snapshots.insert(user.id, user);
        }
    }
    ensure!(
        from_snapshots == thirty_users_after_round_2(),
        "the snapshots hold the table: {from_snapshots:?}"
    );
    // Changes after the snapshots reach the full read through the changelog.
    writer.upsert(&user(1, Some("after"), Some(3)))?;
    writer.delete(&user(2, None, None))?;
    writer.flush().await?;
    let mut expected = thirty_users_after_round_2();
    expected.insert(1, read_user(&user(1, Some("after"), Some(3)))?);
    expected.remove(&2);
    let read = kv_snapshots::full_read_users(&connection, &path).await?;
    ensure!(
        read == expected,
        "snapshot, then the changelog after it: {read:?}"
    );
    leases_and_errors(&connection, &path, table_id).await?;
    server.shutdown().await?;
    Ok(())
}

/// Leases of a table's snapshots, and the errors Fluss answers.
async fn leases_and_errors(
    connection: &FlussConnection,
    path: &TablePath,
    table_id: i64,
) -> Result<()> {
    let admin = connection.get_admin()?;
    let missing = admin.get_kv_snapshot_metadata(table_id, None, 0, 1).await;
    ensure!(
        missing.as_ref().err().and_then(api_code) == Some(code::KV_SNAPSHOT_NOT_EXIST),
        "{missing:?}"
    );
    let lease = |snapshot_id| {
        vec![KvSnapshotLeaseForTable {
            table_id,
            bucket_snapshots: vec![KvSnapshotLeaseForBucket {
                partition_id: None,
                bucket_id: 0,
                snapshot_id,
            }],
        }]
    };
    let leased = admin
        .create_kv_snapshot_lease("silt-test-lease", 60_000, lease(0))
        .await?;
    ensure!(
        leased.unavailable_snapshots.is_empty(),
        "snapshot 0 exists: {leased:?}"
    );
    let leased = admin
        .create_kv_snapshot_lease("silt-test-lease", 60_000, lease(1))
        .await?;
    ensure!(
        leased.unavailable_snapshots == lease(1),
        "a snapshot that does not exist is unavailable: {leased:?}"
    );
    admin
        .release_kv_snapshot_lease("silt-test-lease", vec![TableBucket::new(table_id, 0)])
        .await?;
    admin.drop_kv_snapshot_lease("silt-test-lease").await?;
    admin
        .drop_kv_snapshot_lease("a lease never acquired")
        .await?;

    // The errors Fluss answers.
    text_log("fluss", "events").create(connection).await?;
    let log_path = TablePath::new("fluss", "events");
    let log_id = admin.get_table_info(&log_path).await?.get_table_id();
    for (what, outcome, expected) in [
        (
            "snapshots of a log table",
            admin.get_latest_kv_snapshots(&log_path, None).await.err(),
            code::NON_PRIMARY_KEY_TABLE,
        ),
        (
            "snapshots of a partition of an unpartitioned table",
            admin.get_latest_kv_snapshots(path, Some("p=1")).await.err(),
            code::TABLE_NOT_PARTITIONED,
        ),
        (
            "snapshots of an unknown table",
            admin
                .get_latest_kv_snapshots(&TablePath::new("fluss", "nope"), None)
                .await
                .err(),
            code::TABLE_NOT_EXIST,
        ),
        (
            "releasing a log table's snapshots",
            admin
                .release_kv_snapshot_lease("l", vec![TableBucket::new(log_id, 0)])
                .await
                .err(),
            code::NON_PRIMARY_KEY_TABLE,
        ),
        (
            "leasing an unknown table's snapshots",
            admin
                .create_kv_snapshot_lease(
                    "l",
                    1_000,
                    vec![KvSnapshotLeaseForTable {
                        table_id: 987_654,
                        bucket_snapshots: vec![],
                    }],
                )
                .await
                .err(),
            code::UNKNOWN_TABLE_OR_BUCKET,
        ),
        (
            "the metadata of an unknown table's snapshot",
            admin
                .get_kv_snapshot_metadata(987_654, None, 0, 0)
                .await
                .err(),
            code::KV_SNAPSHOT_NOT_EXIST,
        ),
    ] {
        ensure!(
            outcome.as_ref().and_then(api_code) == Some(expected),
            "{what}: expected code {expected}, got {outcome:?}"
        );
    }
    Ok(())
}

/// The error code of a raw LimitScan, or `None` when it succeeded.
async fn limit_scan_code(server: &ServerHandle, request: LimitScanRequest) -> Result<Option<i32>> {
    let addr = server.local_addr().to_string();
    let (success, body) = raw_fluss::call(&addr, api::LIMIT_SCAN, &request.encode_to_vec()).await?;
    if success {
        let response = LimitScanResponse::decode(body)?;
        ensure!(response.error_code.is_none(), "{response:?}");
        return Ok(None);
    }
    Ok(Some(ErrorResponse::decode(body)?.error_code))
}

fn scan_of(table_id: i64, bucket_id: i32, limit: i32) -> LimitScanRequest {
    LimitScanRequest {
        table_id,
        partition_id: None,
        bucket_id,
        limit,
    }
}

/// Bad limit scans are error responses (Fluss puts the error in the response body, which the
/// Java client never reads, so it would show an empty result), a scan past the response bound
/// is refused rather than answered with fewer rows, and limit 0 is no rows, as in Fluss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limit_scans_are_refused_by_name() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(small_limits(2048)).await?;
    let events = text_log("scan", "events").buckets(1);
    let log_id = events.create(&connection).await?;
    append_eight_batches(&connection, &events.path).await?;
    // One batch larger than the bound on its own: answered, as a fetch answers it.
    append_events(&connection, &events.path, 40..45, |_| "x".repeat(1000)).await?;
    let users = Table::primary_key("scan", "users", &["id"])
        .column("id", fluss::metadata::DataTypes::int())
        .column("name", fluss::metadata::DataTypes::string())
        .buckets(1);
    let users_id = users.create(&connection).await?;
    let table = connection.get_table(&users.path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for id in 0..40 {
        let mut row = fluss::row::GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, "y".repeat(100));
        writer.upsert(&row)?;
    }
    writer.flush().await?;

    for (what, request, expected) in [
        ("the big last batch", scan_of(log_id, 0, 5), None),
        ("a few keys", scan_of(users_id, 0, 5), None),
        (
            "limit 0: no rows, as Fluss answers it",
            scan_of(log_id, 0, 0),
            None,
        ),
        ("limit 0 of a PK table", scan_of(users_id, 0, 0), None),
        (
            "a negative limit of a log table",
            scan_of(log_id, 0, -1),
            Some(code::INVALID_CONFIG),
        ),
        (
            "a negative limit",
            scan_of(users_id, 0, -3),
            Some(code::INVALID_CONFIG),
        ),
        (
            "past limit_scan_rows_max",
            scan_of(log_id, 0, 1001),
            Some(code::RECORD_TOO_LARGE),
        ),
        (
            "log rows past the response bound",
            scan_of(log_id, 0, 30),
            Some(code::RECORD_TOO_LARGE),
        ),
        (
            "keys past the response bound",
            scan_of(users_id, 0, 40),
            Some(code::RECORD_TOO_LARGE),
        ),
        (
            "an unknown table",
            scan_of(987_654, 0, 5),
            Some(code::UNKNOWN_TABLE_OR_BUCKET),
        ),
        (
            "an unknown bucket",
            scan_of(log_id, 7, 5),
            Some(code::UNKNOWN_TABLE_OR_BUCKET),
        ),
        (
            "a partition of an unpartitioned table",
            LimitScanRequest {
                partition_id: Some(3),
                ..scan_of(log_id, 0, 5)
            },
            Some(code::UNKNOWN_TABLE_OR_BUCKET),
        ),
    ] {
        let answered = limit_scan_code(&server, request).await?;
        ensure!(
            answered == expected,
            "{what}: expected {expected:?}, got {answered:?}"
        );
    }
    // Limit 0 of a PK table is a value batch with no records, never zero bytes (the Java
    // client reads the batch header unconditionally).
    let addr = server.local_addr().to_string();
    let request = scan_of(users_id, 0, 0).encode_to_vec();
    let (success, body) = raw_fluss::call(&addr, api::LIMIT_SCAN, &request).await?;
    let response = LimitScanResponse::decode(body)?;
    ensure!(
        success
            && response.is_log_table == Some(false)
            && response.records.as_deref() == Some(&[5, 0, 0, 0, 0, 0, 0, 0, 0][..]),
        "{response:?}"
    );
    // The client sees the refusal, with what to do about it.
    let refused = limit_scan(&table, 0, 40, None).await.err();
    let message = refused.as_ref().map(|e| e.to_string()).unwrap_or_default();
    ensure!(
        refused.as_ref().and_then(api_code) == Some(code::RECORD_TOO_LARGE)
            && message.contains("scan.users bucket 0")
            && message.contains("ask for fewer rows"),
        "{refused:?}"
    );
    server.shutdown().await?;
    Ok(())
}
