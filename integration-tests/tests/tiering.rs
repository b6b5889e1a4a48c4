//! Tiering end to end: the hotstore serves lake-enabled log and primary-key tables, the tiering
//! service tiers them into Delta through the Fluss client, a tiering "crash" (jobs cancelled
//! mid-stream, no final checkpoint) is followed by a fresh service, and the lake must then hold
//! exactly what was written: every log row once, the latest row per key with deletes removed.
//! The hotstore's lake-offset registry must match the lake's txn offsets. The crashed service
//! runs its jobs with 2 subtasks and the fresh one at the default (one per bucket), as after an
//! upgrade of silt: the checkpoints restore at the other parallelism.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use arrow::array::RecordBatch;
use fluss::client::FlussConnection;
use fluss::metadata::DataTypes;
use fluss::row::GenericRow;
use silt_jobs::tiering::TieringService;
use silt_testkit::hotstore;
use silt_testkit::lake::{self, i64s, strings};
use silt_testkit::tables::{self, Expected, Table, UserChanges};
use silt_testkit::tiering::{self, Driver};

/// Events; every 3rd id upserts user `id % 400` and every 7th of those deletes it instead.
const USER_CHANGES: UserChanges = UserChanges {
    every: 3,
    keys: 400,
    delete_every: 7,
};

async fn create_tables(connection: &FlussConnection) -> Result<()> {
    tables::events("t").lake("300ms").create(connection).await?;
    tables::users("t").lake("300ms").create(connection).await?;
    Ok(())
}

async fn write(
    connection: &FlussConnection,
    from: i64,
    to: i64,
    expected: &mut Expected,
) -> Result<()> {
    tables::write_events_and_users(connection, "t", from..to, USER_CHANGES, expected).await
}

async fn wait_caught_up(tiering: &TieringService, tables: usize) -> Result<()> {
    tiering::wait_caught_up(tiering, Driver::Wait, tables, Duration::from_secs(90)).await
}

async fn lake_rows(dir: &Path, table: &str, sql: &str) -> Result<Vec<RecordBatch>> {
    lake::query(&dir.join("lake").join("t").join(table), sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiering_is_exactly_once_across_a_crash_of_the_tiering_jobs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 3).await?;
    let connection = silt_connectors::fluss::connect(&server.local_addr().to_string()).await?;
    create_tables(&connection).await?;
    let mut expected = Expected::default();
    write(&connection, 0, 3_000, &mut expected).await?;

    // First service: tiers, then "crashes" while more data arrives (jobs cancelled, no final
    // checkpoint; whatever its writers staged but did not commit must not show up twice). It
    // runs 2 source and 2 writer subtasks for the 3 buckets, as silt did before one per bucket.
    let mut config = tiering::config(dir.path(), &server);
    config.source_parallelism_max = 2;
    config.writer_parallelism = 2;
    assert_ne!(
        silt_jobs::tiering::TIERING_PARALLELISM_DEFAULT.min(3),
        2,
        "the second service must restore at another parallelism"
    );
    let first = TieringService::new(config, Some(tiering::registry(&server)));
    wait_caught_up(&first, 2).await?;
    // Keep writing while the first service crashes, so the crash lands mid-stream.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let connection = silt_connectors::fluss::connect(&server.local_addr().to_string()).await?;
        let stop = stop.clone();
        // Continue from the users written so far: deletes must apply to them.
        let mut more = Expected {
            events: Vec::new(),
            users: expected.users.clone(),
        };
        tokio::spawn(async move {
            let mut id = 3_000;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                write(&connection, id, id + 500, &mut more).await?;
                id += 500;
            }
            Ok::<_, anyhow::Error>(more)
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let lag_at_crash: i64 = first.status().await?.iter().map(|s| s.lag_offsets).sum();
    first.shutdown(Duration::ZERO).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let more = writer.await??;
    assert!(
        lag_at_crash > 0,
        "the crash must land while tiering is behind, to test recovery"
    );
    expected.events.extend(more.events);
    expected.users = more.users;

    // A fresh service resumes from the jobs' checkpoints and catches up.
    let second = tiering::service(dir.path(), &server);
    let last = expected.events.iter().map(|e| e.0).max().unwrap_or(0) + 1;
    write(&connection, last, last + 1_000, &mut expected).await?;
    wait_caught_up(&second, 2).await?;

    let batches = lake_rows(dir.path(), "events", "SELECT id, v FROM lake ORDER BY id").await?;
    let lake_events: Vec<(i64, String)> = i64s(&batches, 0)
        .into_iter()
        .zip(strings(&batches, 1))
        .collect();
    expected.events.sort();
    assert_eq!(
        lake_events.len(),
        expected.events.len(),
        "log table: row count (lost or duplicated rows)"
    );
    assert!(
        lake_events == expected.events,
        "log table: the lake differs from what was written"
    );

    let batches = lake_rows(
        dir.path(),
        "users",
        "SELECT id, name, score FROM lake ORDER BY id",
    )
    .await?;
    let lake_users: BTreeMap<i64, (String, i64)> = i64s(&batches, 0)
        .into_iter()
        .zip(strings(&batches, 1).into_iter().zip(i64s(&batches, 2)))
        .collect();
    assert_eq!(
        i64s(&batches, 0).len(),
        lake_users.len(),
        "pk table: one row per key"
    );
    assert_eq!(
        lake_users, expected.users,
        "pk table: the lake differs from the latest row per key"
    );

    // The registry the clients see matches the lake's txn offsets.
    for status in second.status().await? {
        let snapshot = server
            .lake_snapshot("t", &status.table)?
            .expect("registry has the table");
        for (bucket, (hot, lake)) in &status.buckets {
            assert_eq!(hot, lake, "{}: {bucket} caught up", status.table);
            let registered = snapshot
                .bucket_offsets
                .iter()
                .find(|(b, _)| *b == bucket.bucket)
                .map(|(_, o)| *o);
            // A bucket that got no rows (the client's sticky assignment) has no registry entry.
            assert_eq!(
                registered.unwrap_or(0),
                *lake,
                "{}: registry offset of bucket {bucket}",
                status.table
            );
        }
    }
    second.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Regression (issue 13, item 3): a tiering job restored from a checkpoint that is ahead of
/// its lake (the lake was put back to an older copy) committed its next range past the lake's
/// txn offset, and the txn offset then claimed offsets that were never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checkpoint_ahead_of_its_lake_resumes_from_the_lake_instead_of_committing_a_hole()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 3).await?;
    let connection = silt_connectors::fluss::connect(&server.local_addr().to_string()).await?;
    // One bucket, so every later write reaches the bucket whose lake fell behind.
    let holes = Table::log("t", "holes")
        .column("id", DataTypes::bigint())
        .buckets(1)
        .lake("300ms");
    holes.create(&connection).await?;
    let path = holes.path.clone();
    let append = |ids: std::ops::Range<i64>| {
        let rows = ids.map(|id| GenericRow::from_data(vec![id]));
        tables::append_rows(&connection, &path, rows)
    };

    let first = tiering::service(dir.path(), &server);
    append(0..500).await?;
    wait_caught_up(&first, 1).await?;
    let lake = dir.path().join("lake").join("t").join("holes");
    let older = dir.path().join("older-lake");
    copy_tree(&lake, &older)?;
    append(500..1_000).await?;
    wait_caught_up(&first, 1).await?;
    first.shutdown(Duration::from_secs(30)).await;

    // The lake goes back to its copy at offset 500; the job's checkpoint says 1,000.
    std::fs::remove_dir_all(&lake)?;
    copy_tree(&older, &lake)?;
    append(1_000..1_100).await?;
    let second = tiering::service(dir.path(), &server);
    wait_caught_up(&second, 1).await?;
    let batches = lake_rows(dir.path(), "holes", "SELECT id FROM lake ORDER BY id").await?;
    let ids = i64s(&batches, 0);
    assert_eq!(ids.len(), 1_100, "every offset tiered once");
    assert!(
        ids == (0..1_100).collect::<Vec<_>>(),
        "no hole, no duplicate"
    );
    second.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// Regression (trials, seed 76 of a 200-seed run): a second tiering job (its own checkpoints)
/// moved the lake past the last checkpoint of silt's own job. Every job start records the
/// lake's offsets in the hot store's registry, so hot retention may cut the changelog up to
/// them; silt's job then restored its checkpoint, whose offsets the log no longer held, and every
/// restart failed with "out of range": the table stopped tiering. A tiering job's source now
/// resumes no lower than the lake's offsets (the lake already holds what lies below them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_whose_lake_another_writer_moved_ahead_resumes_where_the_lake_ends() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Arc::new(
        hotstore::start_with(dir.path(), |config| {
            config.log.segment_bytes_max = 1024;
            config.retention_check_interval_ms = 3_600_000;
            config.retention_lake_lag_ms = 0;
        })
        .await?,
    );
    let connection = silt_connectors::fluss::connect(&server.local_addr().to_string()).await?;
    let ahead = Table::log("t", "ahead")
        .column("id", DataTypes::bigint())
        .buckets(1)
        .lake("300ms")
        .property("table.log.ttl", "1 s");
    let table_id = ahead.create(&connection).await?;
    let path = ahead.path.clone();
    // Fifty rows per flush: many small batches, so the log rolls many 1 KiB segments.
    let append = |ids: std::ops::Range<i64>| {
        let (connection, path) = (&connection, &path);
        async move {
            for from in ids.clone().step_by(50) {
                let rows =
                    (from..(from + 50).min(ids.end)).map(|id| GenericRow::from_data(vec![id]));
                tables::append_rows(connection, path, rows).await?;
            }
            anyhow::Ok(())
        }
    };

    let own = tiering::service(dir.path(), &server);
    append(0..200).await?;
    wait_caught_up(&own, 1).await?;
    own.shutdown(Duration::from_secs(30)).await;

    // Another writer, with checkpoints of its own, tiers the table on to offset 1,000.
    append(200..1_000).await?;
    let mut config = tiering::config(dir.path(), &server);
    config.checkpoint_root = dir.path().join("other-checkpoints");
    let other = TieringService::new(config, None);
    wait_caught_up(&other, 1).await?;
    let version = other.status().await?[0].delta_version.unwrap_or(0) as i64;
    other.shutdown(Duration::from_secs(30)).await;

    // silt's registry learns the lake's offsets (as a job's start records them); past the TTL,
    // retention cuts the changelog up to them (a new lake offset takes effect one run later).
    server.set_lake_snapshot(table_id, version, &[(None, 0, 1_000)])?;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    server.apply_retention().await;
    let cut = server
        .apply_retention()
        .await
        .into_iter()
        .find(|b| b.table == "t.ahead")
        .expect("a retention report of t.ahead");
    assert!(
        cut.log_start_offset > 200 && cut.log_start_offset <= 1_000,
        "retention cut past the own job's checkpoint, within the lake: {cut:?}"
    );

    append(1_000..1_100).await?;
    let again = tiering::service(dir.path(), &server);
    tiering::wait_caught_up(&again, Driver::Wait, 1, Duration::from_secs(30)).await?;
    let status = again.status().await?;
    let batches = lake_rows(dir.path(), "ahead", "SELECT id FROM lake ORDER BY id").await?;
    let ids = i64s(&batches, 0);
    assert!(
        ids == (0..1_100).collect::<Vec<_>>(),
        "every offset in the lake once: {} rows, restarts {}",
        ids.len(),
        status[0].restarts
    );
    again.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// Turning `table.datalake.enabled` on for an existing table with AlterTable (fluss-rs's
/// `alter_table`) starts its tiering at the service's next poll, and the lake then holds the
/// rows written before; turning it off stops the job at the next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn altering_datalake_enabled_on_starts_tiering_at_the_next_poll() -> Result<()> {
    use fluss::metadata::{AlterConfig, AlterConfigOpType, AlterTableChanges};
    let lake_enabled = |enabled: &str| AlterTableChanges {
        config_changes: vec![AlterConfig::new(
            "table.datalake.enabled",
            Some(enabled.to_string()),
            AlterConfigOpType::Set,
        )],
        ..AlterTableChanges::default()
    };
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 3).await?;
    let connection = silt_connectors::fluss::connect(&server.local_addr().to_string()).await?;
    let events = tables::events("t").property("table.datalake.freshness", "300ms");
    events.create(&connection).await?;
    tables::append_events(&connection, &events.path, 0..200, |id| format!("e{id}")).await?;
    let service = tiering::service(dir.path(), &server);
    service.poll_once().await?;
    assert!(service.status().await?.is_empty(), "not lake-enabled yet");

    let admin = connection.get_admin()?;
    admin
        .alter_table(&events.path, false, lake_enabled("true"))
        .await?;
    service.poll_once().await?;
    let tiered: Vec<String> = service
        .status()
        .await?
        .into_iter()
        .map(|s| s.table)
        .collect();
    assert_eq!(
        tiered,
        ["events"],
        "the first poll after the alter starts it"
    );
    wait_caught_up(&service, 1).await?;
    let batches = lake_rows(dir.path(), "events", "SELECT id FROM lake ORDER BY id").await?;
    assert!(
        i64s(&batches, 0) == (0..200).collect::<Vec<_>>(),
        "the rows written before the alter are in the lake once"
    );

    admin
        .alter_table(&events.path, false, lake_enabled("false"))
        .await?;
    service.poll_once().await?;
    assert!(
        service.status().await?.is_empty(),
        "the first poll after turning it off stops the job"
    );
    service.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// A primary-key table whose keys the clients encode in Paimon's layout (`table.kv.format-version`
/// 1 with `table.datalake.format` paimon, as a Fluss table of a Paimon lake has them) tiers into
/// Delta and reads back through `db.t$lake` and `db.t` like any other: tiering reads its
/// changelog, whose rows do not depend on the key layout (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_key_table_in_paimons_key_layout_tiers_and_reads_back() -> Result<()> {
    use silt_jobs::query::{QueryConfig, QueryRequest, QueryService};
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 3).await?;
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    tables::events("t")
        .lake("300ms")
        .create(&connection)
        .await?;
    tables::users("t")
        .lake("300ms")
        .property("table.kv.format-version", "1")
        .property("table.datalake.format", "paimon")
        .create(&connection)
        .await?;
    let info = connection
        .get_admin()?
        .get_table_info(&fluss::metadata::TablePath::new("t", "users"))
        .await?;
    assert_eq!(
        info.get_properties()
            .get("table.kv.format-version")
            .map(String::as_str),
        Some("1")
    );
    let mut expected = Expected::default();
    write(&connection, 0, 2_000, &mut expected).await?;
    let service = tiering::service(dir.path(), &server);
    wait_caught_up(&service, 2).await?;
    let rows = |batches: &[RecordBatch]| -> BTreeMap<i64, (String, i64)> {
        i64s(batches, 0)
            .into_iter()
            .zip(strings(batches, 1).into_iter().zip(i64s(batches, 2)))
            .collect()
    };
    let lake_batches = lake_rows(dir.path(), "users", "SELECT id, name, score FROM lake").await?;
    assert_eq!(
        rows(&lake_batches),
        expected.users,
        "the lake holds the last row per key"
    );
    let queries = QueryService::new(QueryConfig::new(
        silt_connectors::lake::LakeCatalogConfig::new(
            bootstrap,
            dir.path().join("lake").to_string_lossy().to_string(),
        ),
    ));
    // More changes after tiering stopped: the real-time view reads them from the hot tail.
    service.shutdown(Duration::from_secs(30)).await;
    write(&connection, 2_000, 2_600, &mut expected).await?;
    for (view, want) in [("t.users$lake", None), ("t.users", Some(&expected.users))] {
        let result = queries
            .execute(QueryRequest::new(
                &format!("SELECT id, name, score FROM {view}"),
                Duration::from_secs(60),
            ))
            .await?;
        let got = rows(&result.batches);
        assert_eq!(
            i64s(&result.batches, 0).len(),
            got.len(),
            "{view}: one row per key"
        );
        if let Some(want) = want {
            assert_eq!(&got, want, "{view}: the lake and the hot tail together");
        }
    }
    Ok(())
}
