//! Log tables through the official fluss-rs client against silt's hotstore: a million rows
//! appended across buckets and scanned back per bucket in offset order with a projection,
//! list offsets (earliest, latest, by timestamp), and a fetch from earliest after a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use arrow::array::{AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema as ArrowSchema};
use fluss::client::EARLIEST_OFFSET;
use fluss::metadata::{DataTypes, TableDescriptor, TablePath};
use fluss::record::ScanBatch;
use fluss::row::DataGetters;
use fluss::rpc::message::OffsetSpec;
use silt_testkit::hotstore::{self, DEADLINE, connect};
use silt_testkit::scan::Read;
use silt_testkit::tables::{self, Table};

const BUCKETS: i32 = 3;
const ROWS: i64 = 1_000_000;
const BATCH_ROWS: i64 = 20_000;

/// The descriptor of the log tables of these tests: `(id BIGINT, name STRING, amount INT)`.
fn descriptor() -> Result<TableDescriptor> {
    Table::log("fluss", "events")
        .column("id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("amount", DataTypes::int())
        .buckets(BUCKETS)
        .descriptor()
}

fn arrow_batch(start: i64, rows: i64) -> Result<RecordBatch> {
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Int32, true),
    ]));
    let ids: Vec<i64> = (start..start + rows).collect();
    let names: Vec<String> = ids.iter().map(|id| format!("n{id}")).collect();
    let amounts: Vec<i32> = ids.iter().map(|id| (id % 1000) as i32).collect();
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
            Arc::new(Int32Array::from(amounts)),
        ],
    )?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn million_rows_scan_back_in_offset_order_with_projection() -> Result<()> {
    let path = TablePath::new("fluss", "events");
    let (_dir, server, connection) = hotstore::scratch_with_table(&path, &descriptor()?).await?;
    let admin = connection.get_admin()?;
    let table = connection.get_table(&path).await?;

    let before_ms = now_ms();
    let writer = table.new_append()?.create_writer()?;
    let mut start = 0;
    while start < ROWS {
        let rows = BATCH_ROWS.min(ROWS - start);
        drop(writer.append_arrow_batch(arrow_batch(start, rows)?)?);
        start += rows;
    }
    tokio::time::timeout(DEADLINE, writer.flush()).await??;

    let buckets: Vec<i32> = (0..BUCKETS).collect();
    let latest = admin
        .list_offsets(&path, &buckets, OffsetSpec::Latest)
        .await?;
    let earliest = admin
        .list_offsets(&path, &buckets, OffsetSpec::Earliest)
        .await?;
    ensure!(
        latest.values().sum::<i64>() == ROWS,
        "latest offsets {latest:?} sum to {ROWS}"
    );
    ensure!(
        earliest.values().all(|&o| o == 0),
        "earliest offsets {earliest:?}"
    );
    ensure!(
        latest.values().filter(|&&o| o > 0).count() >= 2,
        "rows spread across buckets: {latest:?}"
    );
    let by_time = admin
        .list_offsets(&path, &buckets, OffsetSpec::Timestamp(before_ms))
        .await?;
    ensure!(
        by_time.values().all(|&o| o == 0),
        "timestamp before the writes gives offset 0: {by_time:?}"
    );
    let future = admin
        .list_offsets(&path, &buckets, OffsetSpec::Timestamp(now_ms() + 3_600_000))
        .await;
    let code = future.as_ref().err().and_then(|e| hotstore::api_code(e));
    ensure!(
        code == Some(38),
        "a timestamp in the future is InvalidTimestamp (38) as in Fluss: {future:?}"
    );

    // Scan (id, amount) from earliest; per bucket the offsets are contiguous from 0.
    let scanner = table
        .new_scan()
        .project(&[0, 2])?
        .create_record_batch_log_scanner()?;
    for bucket in &buckets {
        scanner.subscribe(*bucket, EARLIEST_OFFSET).await?;
    }
    let mut next_offset: BTreeMap<i32, i64> = buckets.iter().map(|b| (*b, 0)).collect();
    let mut seen = vec![false; ROWS as usize];
    let check_batch = |scan_batch: &ScanBatch| {
        let bucket = scan_batch.bucket().bucket_id();
        let batch = scan_batch.batch();
        ensure!(
            batch.num_columns() == 2,
            "projection keeps 2 columns, got {}",
            batch.num_columns()
        );
        let expected = next_offset[&bucket];
        ensure!(
            scan_batch.base_offset() == expected,
            "bucket {bucket}: batch at {} after {expected}",
            scan_batch.base_offset()
        );
        next_offset.insert(bucket, expected + batch.num_rows() as i64);
        let ids = batch.column(0).as_primitive::<Int64Type>().values();
        let amounts = batch.column(1).as_primitive::<Int32Type>().values();
        for (&id, &amount) in ids.iter().zip(amounts.iter()) {
            ensure!(amount == (id % 1000) as i32, "row {id} has amount {amount}");
            ensure!(
                !std::mem::replace(&mut seen[id as usize], true),
                "row {id} scanned twice"
            );
        }
        // One item a row: the scan ends once every row has been checked.
        Ok(vec![(); batch.num_rows()])
    };
    Read::new("the log from earliest", ROWS as usize)
        .poll(Duration::from_millis(500))
        .batches(&scanner, check_batch)
        .await?;
    ensure!(
        next_offset == latest.into_iter().collect(),
        "scan ends at the high watermarks"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_from_earliest_after_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = TablePath::new("fluss", "restart");
    {
        let (server, connection) =
            hotstore::start_with_table(dir.path(), &path, &descriptor()?).await?;
        let writer = tables::appender(&connection, &path).await?;
        drop(writer.append_arrow_batch(arrow_batch(0, 1000)?)?);
        writer.flush().await?;
        server.shutdown().await?;
    }
    let server = hotstore::start(dir.path()).await?;
    let connection = connect(&server).await?;
    let table = connection.get_table(&path).await?;
    let scanner = table.new_scan().create_log_scanner()?;
    for bucket in 0..BUCKETS {
        scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
    }
    let mut ids = Read::new("the log after restart", 1000)
        .poll(Duration::from_millis(500))
        .records(&scanner, |record| Ok(record.row().get_long(0)?))
        .await?;
    ids.sort();
    ensure!(
        ids == (0..1000).collect::<Vec<i64>>(),
        "all rows come back after a restart"
    );
    let latest = connection
        .get_admin()?
        .list_offsets(&path, &[0, 1, 2], OffsetSpec::Latest)
        .await?;
    ensure!(latest.values().sum::<i64>() == 1000, "{latest:?}");
    server.shutdown().await?;
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
