//! GetTableStats (1059) through the official fluss-rs client (`Admin::get_table_stats`), as
//! Apache Fluss 0.9.1 answers it: per bucket, a primary-key table's live keys (inserts count,
//! updates do not, deletes of present keys uncount) and a log table's records between log
//! start and high watermark; the counts survive a restart; an unknown table, bucket or
//! partition is a per-bucket UNKNOWN_TABLE_OR_BUCKET. Flink's batch `COUNT(*)` sums these
//! (`flink_sql.rs`).

use anyhow::{Result, ensure};
use fluss::client::FlussConnection;
use fluss::metadata::{BucketStatsRequest, TablePath};
use silt_hotstore::protocol::code;
use silt_testkit::hotstore;
use silt_testkit::rows::{self, user};
use silt_testkit::tables::{append_events, text_log};

const BUCKETS: i32 = 2;

/// The per-bucket answers for `requests` of table `table_id`: (bucket, row count, error code).
async fn stats(
    connection: &FlussConnection,
    table_id: i64,
    requests: &[(Option<i64>, i32)],
) -> Result<Vec<(i32, Option<i64>, Option<i32>)>> {
    let requests = requests
        .iter()
        .map(|&(partition, bucket)| BucketStatsRequest::new(partition, bucket))
        .collect();
    let stats = connection
        .get_admin()?
        .get_table_stats(table_id, requests, vec![])
        .await?;
    Ok(stats
        .buckets
        .iter()
        .map(|b| (b.bucket_id, b.row_count, b.error.as_ref().map(|e| e.code)))
        .collect())
}

/// The table's row count as the clients compute it: the sum over every bucket, none failing.
async fn row_count(connection: &FlussConnection, path: &TablePath) -> Result<i64> {
    let table_id = connection
        .get_admin()?
        .get_table_info(path)
        .await?
        .get_table_id();
    let buckets: Vec<_> = (0..BUCKETS).map(|b| (None, b)).collect();
    let mut total = 0;
    for (bucket, count, error) in stats(connection, table_id, &buckets).await? {
        ensure!(
            error.is_none(),
            "bucket {bucket} of {path}: error {error:?}"
        );
        total += count.ok_or_else(|| anyhow::anyhow!("bucket {bucket} of {path}: no count"))?;
    }
    Ok(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_tables_row_count_is_its_live_keys_across_restarts() -> Result<()> {
    let path = TablePath::new("fluss", "users");
    let (dir, server, connection) =
        hotstore::scratch_with_table(&path, &rows::user_table_of(BUCKETS)?).await?;
    ensure!(row_count(&connection, &path).await? == 0, "an empty table");

    let table = connection.get_table(&path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for id in 1..=5 {
        writer.upsert(&user(id, Some("first"), Some(1)))?;
    }
    writer.flush().await?;
    ensure!(row_count(&connection, &path).await? == 5, "five inserts");

    // Updates, one to the value the key holds, and a delete of an absent key: the count stays.
    for id in [2, 3, 3] {
        writer.upsert(&user(id, Some("again"), Some(2)))?;
    }
    writer.delete(&user(99, None, None))?;
    writer.flush().await?;
    ensure!(row_count(&connection, &path).await? == 5, "updates keep 5");

    writer.delete(&user(4, None, None))?;
    writer.delete(&user(4, None, None))?;
    writer.delete(&user(5, None, None))?;
    writer.flush().await?;
    ensure!(row_count(&connection, &path).await? == 3, "two deletes");
    drop(writer);
    drop(table);
    drop(connection);
    server.shutdown().await?;

    let server = hotstore::start(dir.path()).await?;
    let connection = hotstore::connect(&server).await?;
    let counted = row_count(&connection, &path).await?;
    ensure!(counted == 3, "after a restart: {counted}");
    let table = connection.get_table(&path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    writer.upsert(&user(4, Some("back"), Some(3)))?;
    writer.upsert(&user(1, Some("again"), Some(3)))?;
    writer.flush().await?;
    ensure!(
        row_count(&connection, &path).await? == 4,
        "an insert after the restart"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_tables_row_count_is_its_records_and_unknown_buckets_are_errors() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let events = text_log("fluss", "events").buckets(BUCKETS);
    let table_id = events.create(&connection).await?;
    ensure!(row_count(&connection, &events.path).await? == 0, "empty");
    append_events(&connection, &events.path, 0..40, |id| format!("event {id}")).await?;
    append_events(&connection, &events.path, 0..2, |id| format!("again {id}")).await?;
    let counted = row_count(&connection, &events.path).await?;
    ensure!(counted == 42, "42 appended records: {counted}");

    const UNKNOWN: Option<i32> = Some(code::UNKNOWN_TABLE_OR_BUCKET);
    let answers = stats(&connection, table_id, &[(None, 0), (None, 7), (Some(3), 1)]).await?;
    let errors: Vec<_> = answers.iter().map(|(b, _, e)| (*b, *e)).collect();
    ensure!(
        errors == [(0, None), (7, UNKNOWN), (1, UNKNOWN)],
        "a known bucket, an unknown one, a partition of an unpartitioned table: {answers:?}"
    );
    let answers = stats(&connection, table_id + 1000, &[(None, 0)]).await?;
    ensure!(
        answers == [(0, None, UNKNOWN)],
        "an unknown table: {answers:?}"
    );
    server.shutdown().await?;
    Ok(())
}
