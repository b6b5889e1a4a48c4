//! Filter pushdown on FetchLog through fluss-rs 1.0 (`new_scan().filter(..)`, issue 16 item 6).
//! A log table declares `table.statistics.columns = '*'`, so the client's writer puts each
//! batch's per-column minimum, maximum and null count in it; ten batches hold disjoint ranges of
//! every column. fluss-rs does not filter rows itself (it treats the filter as a hint), so the
//! rows a filtered scan returns are exactly the batches the server kept: the test checks that
//! the server left out every batch the statistics exclude, kept every batch that may match,
//! and that a filter no batch matches ends with nothing and a scan that goes on.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use fluss::client::{EARLIEST_OFFSET, FlussTable};
use fluss::metadata::{DataTypes, TableDescriptor, TablePath};
use fluss::predicate::{Predicate, col};
use fluss::row::{DataGetters, Datum, Decimal, GenericRow, TimestampLtz};
use silt_testkit::hotstore::{self, DEADLINE};
use silt_testkit::tables::Table;

const BATCHES: i64 = 10;
const ROWS_PER_BATCH: i64 = 50;
/// The first timestamp, and the step between batches (microsecond precision: the
/// non-compact timestamp layout).
const T0_MS: i64 = 1_760_000_000_000;

fn descriptor() -> Result<TableDescriptor> {
    Table::log("fluss", "filtered")
        .column("id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("price", DataTypes::decimal(20, 2))
        .column("at", DataTypes::timestamp_ltz_with_precision(6))
        .column("flag", DataTypes::int())
        .buckets(1)
        .property("table.statistics.columns", "*")
        .descriptor()
}

/// Batch `b` holds ids `b*100 .. b*100+ROWS_PER_BATCH`, names `batch-000b-...` (longer than
/// the 7 bytes a row inlines), prices `b*1000.00 + i`, timestamps `T0 + b` seconds plus `i`
/// microseconds, and `flag` null in odd batches.
fn row(batch: i64, i: i64) -> Result<GenericRow<'static>> {
    let id = batch * 100 + i;
    let mut row = GenericRow::new(5);
    row.set_field(0, id);
    row.set_field(1, format!("batch-{batch:04}-row-{i:03}"));
    row.set_field(2, Datum::Decimal(decimal((batch * 1000 + i) * 100)?));
    row.set_field(
        3,
        Datum::TimestampLtz(TimestampLtz::from_millis_nanos(
            T0_MS + batch * 1000 + i / 1000,
            ((i % 1000) * 1000) as i32,
        )?),
    );
    if batch % 2 == 0 {
        row.set_field(4, batch as i32);
    } else {
        row.set_field(4, Datum::Null);
    }
    Ok(row)
}

/// A DECIMAL(20, 2) of `unscaled` hundredths (precision 20: the non-compact layout).
fn decimal(unscaled: i64) -> Result<Decimal> {
    Ok(Decimal::from_unscaled_bytes(
        &unscaled.to_be_bytes(),
        20,
        2,
    )?)
}

/// The batches (by number) whose ids a scan returned; fails on a partial batch (the server
/// prunes whole batches only, and the client does not filter).
async fn scanned_batches(
    table: &FlussTable<'_>,
    filter: Option<Predicate>,
) -> Result<BTreeSet<i64>> {
    let mut scan = table.new_scan();
    if let Some(filter) = filter {
        scan = scan.filter(filter)?;
    }
    let scanner = scan.create_log_scanner()?;
    scanner.subscribe(0, EARLIEST_OFFSET).await?;
    let mut ids = Vec::new();
    // The scan is done once no record arrives for a while; a scan that pruned everything must
    // still come back quickly (the server answers at once with the filtered end offset).
    let started = Instant::now();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(1500) {
        if started.elapsed() > DEADLINE {
            bail!("the scan did not settle within {DEADLINE:?}");
        }
        let polled = scanner.poll(Duration::from_millis(300)).await?;
        let before = ids.len();
        for record in polled {
            ids.push(record.row().get_long(0)?);
        }
        if ids.len() > before {
            quiet_since = Instant::now();
        }
    }
    let mut batches = BTreeSet::new();
    for batch in 0..BATCHES {
        let of_batch = ids.iter().filter(|id| **id / 100 == batch).count() as i64;
        ensure!(
            of_batch == 0 || of_batch == ROWS_PER_BATCH,
            "batch {batch}: {of_batch} of its {ROWS_PER_BATCH} rows were returned"
        );
        if of_batch > 0 {
            batches.insert(batch);
        }
    }
    ensure!(
        ids.len() as i64 == batches.len() as i64 * ROWS_PER_BATCH,
        "{} rows returned for batches {batches:?}",
        ids.len()
    );
    Ok(batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_down_filter_prunes_whole_batches_by_their_statistics() -> Result<()> {
    let path = TablePath::new("fluss", "filtered");
    let (_dir, _server, connection) = hotstore::scratch_with_table(&path, &descriptor()?).await?;
    let table = connection.get_table(&path).await?;
    let writer = table.new_append()?.create_writer()?;
    for batch in 0..BATCHES {
        for i in 0..ROWS_PER_BATCH {
            drop(writer.append(&row(batch, i)?)?);
        }
        // One flush per batch number: each becomes its own log batch with its own statistics.
        tokio::time::timeout(DEADLINE, writer.flush())
            .await
            .context("flush")??;
    }

    let all: BTreeSet<i64> = (0..BATCHES).collect();
    let only = |batches: &[i64]| batches.iter().copied().collect::<BTreeSet<i64>>();
    let ts = |batch: i64, micros: i64| -> Result<TimestampLtz> {
        Ok(TimestampLtz::from_millis_nanos(
            T0_MS + batch * 1000 + micros / 1000,
            ((micros % 1000) * 1000) as i32,
        )?)
    };
    let cases: Vec<(&str, Option<Predicate>, BTreeSet<i64>)> = vec![
        ("no filter", None, all.clone()),
        ("id >= 900", Some(col("id").ge(900i64)), only(&[9])),
        ("id = 349", Some(col("id").eq(349i64)), only(&[3])),
        (
            "id = 399 (between two batches)",
            Some(col("id").eq(399i64)),
            only(&[]),
        ),
        (
            "id < 100 OR id > 848",
            Some(col("id").lt(100i64).or(col("id").gt(848i64))),
            only(&[0, 8, 9]),
        ),
        (
            "id > 200 AND id < 400",
            Some(col("id").gt(200i64).and(col("id").lt(400i64))),
            only(&[2, 3]),
        ),
        (
            "id IN (5, 705)",
            Some(col("id").is_in([5i64, 705i64])),
            only(&[0, 7]),
        ),
        (
            "name = batch-0004-row-010 (a string in the row's variable part)",
            Some(col("name").eq("batch-0004-row-010")),
            only(&[4]),
        ),
        (
            "name STARTS WITH batch-0004 (Fluss's rule on the string bounds)",
            Some(col("name").starts_with("batch-0004")),
            only(&[4]),
        ),
        (
            "name ENDS WITH (not judged by the bounds: every batch kept)",
            Some(col("name").ends_with("row-010")),
            all.clone(),
        ),
        (
            "id IN () (no row is in an empty set)",
            Some(col("id").is_in(Vec::<i64>::new())),
            only(&[]),
        ),
        (
            "price >= 6000.00 (a non-compact decimal)",
            Some(col("price").ge(decimal(600_000)?)),
            only(&[6, 7, 8, 9]),
        ),
        (
            "at < T0 + 2 s (a non-compact timestamp)",
            Some(col("at").lt(ts(2, 0)?)),
            only(&[0, 1]),
        ),
        (
            "at = T0 + 5 s + 49 us",
            Some(col("at").eq(ts(5, 49)?)),
            only(&[5]),
        ),
        (
            "flag IS NULL",
            Some(col("flag").is_null()),
            only(&[1, 3, 5, 7, 9]),
        ),
        (
            "flag IS NOT NULL",
            Some(col("flag").is_not_null()),
            only(&[0, 2, 4, 6, 8]),
        ),
        (
            "flag = 3 (a batch of nulls)",
            Some(col("flag").eq(3i32)),
            only(&[]),
        ),
        (
            "id > 10000 (nothing)",
            Some(col("id").gt(10_000i64)),
            only(&[]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, filter, expected) in cases {
        match scanned_batches(&table, filter).await {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{name}: batches {got:?}, expected {expected:?}")),
            Err(e) => failures.push(format!("{name}: {e:#}")),
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
