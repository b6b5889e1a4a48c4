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
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use fluss::row::{DataGetters, GenericRow};
use fluss::rpc::message::OffsetSpec;

use silt_testkit::changelog::{self, Change};
use silt_testkit::process::SiltProcess;
use silt_testkit::tables;
use silt_testkit::wait::{self, Look};
use silt_testkit::{hotstore, lake, silt_bin};

/// `c.events` (log, 3 buckets) and `c.users` (`id, score` keyed by `id`, 2 buckets), both
/// tiered at most 250 ms behind.
async fn create_tables(connection: &FlussConnection) -> Result<()> {
    for table in [tables::events("c"), tables::scores("c")] {
        table.lake("250ms").create_if_missing(connection).await?;
    }
    Ok(())
}

/// Writes batches until an error (the process died) and returns the acknowledged event ids.
async fn write_until_killed(bootstrap: String, first_id: i64) -> BTreeSet<i64> {
    let mut acked = BTreeSet::new();
    let Ok(connection) = hotstore::connect_to(&bootstrap).await else {
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

/// A table's changelog up to the current high watermarks: each record's `id`, and for
/// `users` its `score` too.
async fn hot_changelog(
    connection: &FlussConnection,
    table: &str,
    buckets: i32,
) -> Result<Vec<Change<Vec<i64>>>> {
    let path = TablePath::new("c", table);
    changelog::read(connection, &path, buckets, Duration::from_secs(60), |r| {
        let row = r.row();
        Ok(if table == "events" {
            vec![row.get_long(0)?]
        } else {
            vec![row.get_long(0)?, row.get_long(1)?]
        })
    })
    .await
}

async fn lake_batches(
    data_dir: &Path,
    table: &str,
    sql: &str,
) -> Result<Vec<arrow::record_batch::RecordBatch>> {
    lake::query(&data_dir.join("lake").join("c").join(table), sql).await
}

/// Waits until the lake's txn offsets reach every bucket's high watermark.
async fn wait_for_lake(connection: &FlussConnection, data_dir: &Path) -> Result<()> {
    let admin = connection.get_admin()?;
    let every = Duration::from_millis(250);
    wait::until(
        "tiering to catch up",
        Duration::from_secs(120),
        every,
        || async {
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
                    &ids.iter()
                        .map(|b| silt_connectors::changelog::BucketKey::table(*b))
                        .collect::<Vec<_>>(),
                )
                .await?
                .map(|l| l.bucket_offsets)
                .unwrap_or_default();
                for b in ids {
                    let key = silt_connectors::changelog::BucketKey::table(b);
                    let (h, l) = (hw[&b], lake.get(&key).copied().unwrap_or(0));
                    if h != l {
                        behind.push(format!("{table}[{b}] hot {h} lake {l}"));
                    }
                }
            }
            Ok(if behind.is_empty() {
                Look::Done(())
            } else {
                Look::NotYet(behind.join(", "))
            })
        },
    )
    .await
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
        let silt = SiltProcess::start(silt_bin!(), dir.path())?;
        if round == 0 {
            create_tables(&hotstore::connect_to(&silt.bootstrap).await?).await?;
        }
        let writer = tokio::spawn(write_until_killed(silt.bootstrap.clone(), next_id));
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1500)).await;
        silt.kill();
        let ids = writer.await?;
        next_id = ids.last().map_or(next_id, |l| l + 1).max(next_id) + 100_000;
        acked.extend(ids);
    }
    // Final start: no more writes; tiering must catch up with everything the hot store holds.
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let (events, users) = verify(dir.path(), &silt, &acked, seed).await?;
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
    silt: &SiltProcess,
    acked: &BTreeSet<i64>,
    seed: u64,
) -> Result<(usize, usize)> {
    let connection = hotstore::connect_to(&silt.bootstrap).await?;
    wait_for_lake(&connection, dir)
        .await
        .with_context(|| format!("silt up's log, last lines:\n{}", silt.log.last(60)))?;

    // Log table: the lake holds every hot offset exactly once, with the same rows.
    let hot = hot_changelog(&connection, "events", 3).await?;
    let hot_ids: BTreeSet<i64> = hot.iter().map(|r| r.row[0]).collect();
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
    let lake_rows: Vec<(i64, i64, i64)> = lake::i64s(&lake, 0)
        .into_iter()
        .zip(lake::i64s(&lake, 1))
        .zip(lake::i64s(&lake, 2))
        .map(|((b, o), id)| (b, o, id))
        .collect();
    let mut hot_rows: Vec<(i64, i64, i64)> = hot
        .iter()
        .map(|r| (r.bucket as i64, r.offset, r.row[0]))
        .collect();
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
    let latest = changelog::latest_by_key(hot_changelog(&connection, "users", 2).await?);
    let lake = lake_batches(dir, "users", "SELECT id, score FROM lake ORDER BY id").await?;
    let lake_users: Vec<(i64, i64)> = lake::i64s(&lake, 0)
        .into_iter()
        .zip(lake::i64s(&lake, 1))
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
    let mut silt = SiltProcess::start_with(silt_bin!(), dir.path(), &["--crash-at", point], &[])?;
    create_tables(&hotstore::connect_to(&silt.bootstrap).await?).await?;
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
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let (events, users) = verify(dir.path(), &silt, &acked, 0).await?;
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
