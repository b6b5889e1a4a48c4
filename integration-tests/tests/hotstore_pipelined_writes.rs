//! Regression: the hotstore handled the requests of one connection concurrently, so a writer's
//! pipelined batches (sequence n, n+1, ...) could reach the tablet out of order; n was then
//! refused as OutOfOrderSequence, which fluss-rs counts as "already committed": an acknowledged
//! write was lost (seen as a fetch stalling one batch short, and lookups missing upserts).
//! Every acknowledged row must be in the log: the high watermarks add up to the rows appended.
//! (The race is timing-dependent: this test did not reproduce it in 3 runs before the fix; the
//! fluss-rs warning "received OutOfOrderSequenceException but has already been committed" did,
//! in `silt bench tiering`, and is gone since.)

use std::sync::Arc;

use anyhow::Result;
use arrow::array::{Int64Array, RecordBatch, StringArray};
use fluss::rpc::message::OffsetSpec;
use silt_testkit::hotstore;
use silt_testkit::tables::text_log;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_appends_of_one_writer_are_all_kept() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let admin = connection.get_admin()?;
    let events = text_log("p", "t").buckets(4);
    events.create(&connection).await?;
    let path = events.path;
    let table = connection.get_table(&path).await?;
    let arrow_schema = silt_connectors::fluss::table_arrow_schema(&connection, "p", "t").await?;
    let writer = table.new_append()?.create_writer()?;
    let (batches, rows_per_batch) = (400i64, 250i64);
    for round in 0..batches {
        let ids: Vec<i64> = (round * rows_per_batch..(round + 1) * rows_per_batch).collect();
        let values: Vec<String> = ids.iter().map(|i| format!("row {i}")).collect();
        let batch = RecordBatch::try_new(
            arrow_schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(values)),
            ],
        )?;
        // Not awaited: batches pile up and go out pipelined, several in flight per bucket.
        let _ = writer.append_arrow_batch(batch)?;
    }
    writer.flush().await?;
    let latest = admin
        .list_offsets(&path, &[0, 1, 2, 3], OffsetSpec::Latest)
        .await?;
    let total: i64 = latest.values().sum();
    assert_eq!(
        total,
        batches * rows_per_batch,
        "rows in the log after every append was acknowledged: {latest:?}"
    );
    server.shutdown().await?;
    Ok(())
}
