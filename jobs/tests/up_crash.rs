//! Crash recovery of the whole process: `silt up` is SIGKILLed at seeded random moments while a
//! client writes and tiering runs, then restarted; once tiering has caught up, the Delta tables
//! must equal the hot data (log: every offset exactly once; PK: the latest row per key, deletes
//! gone), and every write the client saw acknowledged must be in the hot data.
//!
//! `SILTTEST_CRASH_TRIALS` sets the number of seeded trials (default 10 in `cargo test`; the trial
//! runner can ask for hundreds).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use datafusion::prelude::SessionContext;
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::{DataGetters, GenericRow};
use fluss::rpc::message::OffsetSpec;

mod common;
use common::{start_silt, start_silt_with};

async fn connect(bootstrap: &str) -> Result<FlussConnection> {
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    Ok(FlussConnection::new(config).await?)
}

async fn create_tables(connection: &FlussConnection) -> Result<()> {
    let admin = connection.get_admin()?;
    admin.create_database("c", None, true).await?;
    let events = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .build()?;
    let events = TableDescriptor::builder()
        .schema(events)
        .distributed_by(Some(3), vec![])
        .property("table.datalake.enabled", "true")
        .property("table.datalake.freshness", "250ms")
        .build()?;
    admin
        .create_table(&TablePath::new("c", "events"), &events, true)
        .await?;
    let users = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .primary_key(vec!["id"])?
        .build()?;
    let users = TableDescriptor::builder()
        .schema(users)
        .distributed_by(Some(2), vec!["id".to_string()])
        .property("table.datalake.enabled", "true")
        .property("table.datalake.freshness", "250ms")
        .build()?;
    admin
        .create_table(&TablePath::new("c", "users"), &users, true)
        .await?;
    Ok(())
}

/// Writes batches until an error (the process died) and returns the acknowledged event ids.
async fn write_until_killed(bootstrap: String, first_id: i64) -> BTreeSet<i64> {
    let mut acked = BTreeSet::new();
    let Ok(connection) = connect(&bootstrap).await else {
        return acked;
    };
    let (Ok(events), Ok(users)) = (
        connection.get_table(&TablePath::new("c", "events")).await,
        connection.get_table(&TablePath::new("c", "users")).await,
    ) else {
        return acked;
    };
    let (Ok(appender), Ok(upserter)) = (
        events.new_append().and_then(|a| a.create_writer()),
        users.new_upsert().and_then(|u| u.create_writer()),
    ) else {
        return acked;
    };
    let mut id = first_id;
    loop {
        let batch: Vec<i64> = (id..id + 200).collect();
        for &i in &batch {
            let v = format!("v{i}");
            let mut row = GenericRow::new(2);
            row.set_field(0, i);
            row.set_field(1, v.as_str());
            if appender.append(&row).is_err() {
                return acked;
            }
            let mut u = GenericRow::new(2);
            u.set_field(0, i % 300);
            u.set_field(1, i);
            let op = if i % 11 == 0 {
                upserter.delete(&u)
            } else {
                upserter.upsert(&u)
            };
            if op.is_err() {
                return acked;
            }
        }
        let flushed = tokio::time::timeout(Duration::from_secs(5), async {
            appender.flush().await?;
            upserter.flush().await
        })
        .await;
        match flushed {
            Ok(Ok(())) => acked.extend(batch),
            _ => return acked,
        }
        id += 200;
    }
}

/// Reads a table's whole changelog up to the current high watermarks through the client.
async fn hot_changelog(
    connection: &FlussConnection,
    table: &str,
    buckets: i32,
) -> Result<Vec<(i32, i64, u8, Vec<i64>, Option<String>)>> {
    let path = TablePath::new("c", table);
    let admin = connection.get_admin()?;
    let ids: Vec<i32> = (0..buckets).collect();
    let hw = admin.list_offsets(&path, &ids, OffsetSpec::Latest).await?;
    let t = connection.get_table(&path).await?;
    let scanner = t.new_scan().create_log_scanner()?;
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    for b in &ids {
        if hw[b] > 0 {
            scanner.subscribe(*b, EARLIEST_OFFSET).await?;
            remaining.insert(*b, hw[b]);
        }
    }
    let mut rows = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            bail!(
                "reading {table} up to its high watermarks timed out; still to read: {remaining:?}"
            );
        }
        for (bucket, records) in scanner
            .poll(Duration::from_millis(200))
            .await?
            .into_records_by_buckets()
        {
            let b = bucket.bucket_id();
            for r in records {
                let Some(end) = remaining.get(&b).copied() else {
                    continue;
                };
                if r.offset() >= end {
                    continue;
                }
                let row = r.row();
                let (longs, text) = if table == "events" {
                    (vec![row.get_long(0)?], Some(row.get_string(1)?.to_string()))
                } else {
                    (vec![row.get_long(0)?, row.get_long(1)?], None)
                };
                rows.push((b, r.offset(), r.change_type().to_byte_value(), longs, text));
                if r.offset() + 1 >= end {
                    remaining.remove(&b);
                }
            }
        }
    }
    Ok(rows)
}

async fn lake_batches(
    data_dir: &Path,
    table: &str,
    sql: &str,
) -> Result<Vec<arrow::record_batch::RecordBatch>> {
    let uri = data_dir.join("lake").join("c").join(table);
    let delta = deltalake::open_table(deltalake::ensure_table_uri(uri.to_string_lossy())?).await?;
    let ctx = SessionContext::new();
    ctx.register_table("lake", delta.table_provider().await?)?;
    Ok(ctx.sql(sql).await?.collect().await?)
}

fn column_i64(batches: &[arrow::record_batch::RecordBatch], i: usize) -> Vec<i64> {
    use arrow::array::Array;
    batches
        .iter()
        .flat_map(|b| {
            let a = arrow::compute::cast(b.column(i), &arrow::datatypes::DataType::Int64).unwrap();
            let a = a
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap()
                .clone();
            (0..a.len()).map(move |j| a.value(j)).collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until the lake's txn offsets reach every bucket's high watermark.
async fn wait_for_lake(connection: &FlussConnection, data_dir: &Path) -> Result<()> {
    let admin = connection.get_admin()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut behind = Vec::new();
        for (table, buckets) in [("events", 3), ("users", 2)] {
            let path = TablePath::new("c", table);
            let info = admin.get_table_info(&path).await?;
            let ids: Vec<i32> = (0..buckets).collect();
            let hw = admin.list_offsets(&path, &ids, OffsetSpec::Latest).await?;
            let uri = data_dir.join("lake").join("c").join(table);
            let lake = silt_connectors::delta::read_lake_offsets(
                &uri.to_string_lossy(),
                &Default::default(),
                &info.get_table_id().to_string(),
                buckets as u32,
            )
            .await?
            .map(|l| l.bucket_offsets)
            .unwrap_or_default();
            for b in ids {
                let (h, l) = (hw[&b], lake.get(&b).copied().unwrap_or(0));
                if h != l {
                    behind.push(format!("{table}[{b}] hot {h} lake {l}"));
                }
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "tiering did not catch up within 120 s: {}",
                behind.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A tiny seeded generator (splitmix64), so trials replay exactly.
struct Seeded(u64);
impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

async fn trial(seed: u64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut rng = Seeded(seed);
    let mut acked = BTreeSet::new();
    let mut next_id = 0i64;
    let kills = 2 + rng.next() % 2;
    for round in 0..kills {
        let silt = start_silt(dir.path())?;
        if round == 0 {
            create_tables(&connect(&silt.bootstrap).await?).await?;
        }
        let writer = tokio::spawn(write_until_killed(silt.bootstrap.clone(), next_id));
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1500)).await;
        silt.kill();
        let ids = writer.await?;
        next_id = ids.last().map_or(next_id, |l| l + 1).max(next_id) + 100_000;
        acked.extend(ids);
    }
    // Final start: no more writes; tiering must catch up with everything the hot store holds.
    let silt = start_silt(dir.path())?;
    let (events, users) = verify(dir.path(), &silt.bootstrap, &acked, seed).await?;
    drop(silt);
    eprintln!(
        "crash trial seed {seed}: {kills} kills, {} acked writes, {events} events, {users} users",
        acked.len()
    );
    Ok(())
}

/// Waits for tiering to catch up, then checks the lake against the hot changelog and the
/// acknowledged writes against the hot store. Returns (events, users) counts.
async fn verify(
    dir: &Path,
    bootstrap: &str,
    acked: &BTreeSet<i64>,
    seed: u64,
) -> Result<(usize, usize)> {
    let connection = connect(bootstrap).await?;
    wait_for_lake(&connection, dir).await?;

    // Log table: the lake holds every hot offset exactly once, with the same rows.
    let hot = hot_changelog(&connection, "events", 3).await?;
    let hot_ids: BTreeSet<i64> = hot.iter().map(|r| r.3[0]).collect();
    let lost: Vec<_> = acked.difference(&hot_ids).take(5).collect();
    let dir = &dir;
    assert!(
        lost.is_empty(),
        "seed {seed}: acknowledged writes missing from the hot store: {lost:?}"
    );
    let lake = lake_batches(
        dir,
        "events",
        "SELECT __bucket, __offset, id FROM lake ORDER BY __bucket, __offset",
    )
    .await?;
    let lake_rows: Vec<(i64, i64, i64)> = column_i64(&lake, 0)
        .into_iter()
        .zip(column_i64(&lake, 1))
        .zip(column_i64(&lake, 2))
        .map(|((b, o), id)| (b, o, id))
        .collect();
    let mut hot_rows: Vec<(i64, i64, i64)> =
        hot.iter().map(|r| (r.0 as i64, r.1, r.3[0])).collect();
    hot_rows.sort();
    assert_eq!(
        lake_rows.len(),
        hot_rows.len(),
        "seed {seed}: events row count (lake vs hot)"
    );
    assert!(
        lake_rows == hot_rows,
        "seed {seed}: events differ between the lake and the hot changelog"
    );

    // PK table: the lake holds the latest image per key from the changelog, deletes removed.
    let mut latest: BTreeMap<i64, i64> = BTreeMap::new();
    let mut changes = hot_changelog(&connection, "users", 2).await?;
    changes.sort_by_key(|r| (r.0, r.1));
    for (_, _, change, longs, _) in changes {
        match change {
            1 | 3 => {
                latest.insert(longs[0], longs[1]);
            }
            4 => {
                latest.remove(&longs[0]);
            }
            _ => {}
        }
    }
    let lake = lake_batches(dir, "users", "SELECT id, score FROM lake ORDER BY id").await?;
    let lake_users: Vec<(i64, i64)> = column_i64(&lake, 0)
        .into_iter()
        .zip(column_i64(&lake, 1))
        .collect();
    let want: Vec<(i64, i64)> = latest.into_iter().collect();
    assert!(
        lake_users == want,
        "seed {seed}: users differ: lake {} rows vs changelog {} keys",
        lake_users.len(),
        want.len()
    );

    // The lake snapshot clients see (hotstore's registry) matches the lake's txn offsets.
    let admin = connection.get_admin()?;
    for (table, buckets) in [("events", 3), ("users", 2)] {
        let path = TablePath::new("c", table);
        let snapshot = admin.get_latest_lake_snapshot(&path).await?;
        let registered: BTreeMap<i32, i64> = snapshot
            .table_buckets_offset()
            .iter()
            .map(|(b, o)| (b.bucket_id(), *o))
            .collect();
        let ids: Vec<i32> = (0..buckets).collect();
        let hw = admin.list_offsets(&path, &ids, OffsetSpec::Latest).await?;
        for b in ids {
            if hw[&b] > 0 {
                assert_eq!(
                    registered.get(&b),
                    Some(&hw[&b]),
                    "seed {seed}: registry offset of {table}[{b}]"
                );
            }
        }
    }
    Ok((hot_rows.len(), want.len()))
}

/// Kills the process exactly at the committer's two dangerous points, then restarts it.
async fn crash_at(point: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut silt = start_silt_with(dir.path(), &["--crash-at", point], &[])?;
    create_tables(&connect(&silt.bootstrap).await?).await?;
    let writer = tokio::spawn(write_until_killed(silt.bootstrap.clone(), 0));
    // The first commit (within a freshness interval of the first rows) aborts the process.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = silt.child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("silt did not crash at {point} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !status.success(),
        "the injected crash at {point} ends the process abnormally"
    );
    let marker = if point == "before-commit" {
        ".crashed-BeforeCommit"
    } else {
        ".crashed-AfterCommit"
    };
    assert!(
        dir.path().join(marker).exists(),
        "the process died at the injected point {point}, not elsewhere"
    );
    let acked = writer.await?;
    let silt = start_silt(dir.path())?;
    let (events, users) = verify(dir.path(), &silt.bootstrap, &acked, 0).await?;
    eprintln!(
        "crash at {point}: {} acked writes, {events} events, {users} users",
        acked.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_before_the_delta_commit_loses_nothing() -> Result<()> {
    crash_at("before-commit").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_after_the_delta_commit_before_the_registry_update_is_repaired() -> Result<()> {
    crash_at("after-commit").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_writes_and_tiering_loses_and_duplicates_nothing() -> Result<()> {
    let trials: u64 = std::env::var("SILTTEST_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for seed in 1..=trials {
        trial(seed)
            .await
            .with_context(|| format!("crash trial seed {seed}"))?;
    }
    Ok(())
}
