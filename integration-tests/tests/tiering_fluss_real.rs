//! A real Apache Fluss cluster as the tiering source: the same Fluss source and Delta sink that
//! tier silt's hotstore tier a real cluster's log and primary-key tables, and the lake must then
//! equal the cluster's changelog (log: every offset once; PK: latest row per key, deletes gone).
//! Skips, saying so, where Java, Maven or the jars are unavailable.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use fluss::row::{DataGetters, GenericRow};
use silt_jobs::tiering::{TieringConfig, TieringService};
use silt_testkit::changelog::{self, Change};
use silt_testkit::lake;
use silt_testkit::real_fluss::{RealFluss, Started};
use silt_testkit::tables;

const DB: &str = "tier_real";

async fn create_and_fill(connection: &FlussConnection) -> Result<()> {
    tables::events(DB)
        .buckets(2)
        .create_if_missing(connection)
        .await?;
    tables::scores(DB).create_if_missing(connection).await?;

    let events = connection.get_table(&TablePath::new(DB, "events")).await?;
    let users = connection.get_table(&TablePath::new(DB, "users")).await?;
    let appender = events.new_append()?.create_writer()?;
    let upserter = users.new_upsert()?.create_writer()?;
    for i in 0..2_000i64 {
        let v = format!("v{i}");
        let mut row = GenericRow::new(2);
        row.set_field(0, i);
        row.set_field(1, v.as_str());
        appender.append(&row)?;
        let mut u = GenericRow::new(2);
        u.set_field(0, i % 150);
        u.set_field(1, i);
        tables::upsert_or_delete(&upserter, &u, i % 9 == 0)?;
    }
    appender.flush().await?;
    upserter.flush().await?;
    Ok(())
}

/// A table's changelog up to the high watermarks: each record's `id`, and for `users` its
/// `score` too.
async fn changelog(connection: &FlussConnection, table: &str) -> Result<Vec<Change<Vec<i64>>>> {
    let path = TablePath::new(DB, table);
    changelog::read(connection, &path, 2, Duration::from_secs(60), |r| {
        Ok(if table == "events" {
            vec![r.row().get_long(0)?]
        } else {
            vec![r.row().get_long(0)?, r.row().get_long(1)?]
        })
    })
    .await
}

async fn lake_longs(dir: &std::path::Path, table: &str, sql: &str) -> Result<Vec<Vec<i64>>> {
    let batches = lake::query(&dir.join(DB).join(table), sql).await?;
    let columns = batches.first().map_or(0, |b| b.num_columns());
    let columns: Vec<Vec<i64>> = (0..columns).map(|c| lake::i64s(&batches, c)).collect();
    let rows = columns.first().map_or(0, Vec::len);
    Ok((0..rows)
        .map(|i| columns.iter().map(|c| c[i]).collect())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiering_reads_a_real_fluss_cluster() -> Result<()> {
    let cluster = match RealFluss::start("tiering")? {
        Started::Running(cluster) => cluster,
        Started::Skipped(reason) => {
            std::io::stderr().write_all(
                format!("SKIPPED: tiering_reads_a_real_fluss_cluster: {reason}\n").as_bytes(),
            )?;
            return Ok(());
        }
    };
    let connection = silt_connectors::fluss::connect(&cluster.bootstrap).await?;
    create_and_fill(&connection).await?;

    let dir = tempfile::tempdir()?;
    let mut config = TieringConfig::new(
        &cluster.bootstrap,
        dir.path().to_string_lossy().to_string(),
        dir.path().join("checkpoints"),
    );
    config.freshness_default = Duration::from_millis(300);
    let tiering = TieringService::new(config, None);
    tiering.tier_table(DB, "events").await?;
    tiering.tier_table(DB, "users").await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = tiering.status().await?;
        if status.len() == 2
            && status
                .iter()
                .all(|s| s.lag_offsets == 0 && s.delta_version.is_some())
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("tiering from real Fluss did not catch up: {status:#?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tiering.shutdown(Duration::from_secs(30)).await;

    let hot = changelog(&connection, "events").await?;
    let mut want: Vec<Vec<i64>> = hot
        .iter()
        .map(|c| vec![c.bucket as i64, c.offset, c.row[0]])
        .collect();
    want.sort();
    let got = lake_longs(
        dir.path(),
        "events",
        "SELECT __bucket, __offset, id FROM lake ORDER BY __bucket, __offset",
    )
    .await?;
    assert_eq!(got.len(), 2_000, "every appended row once");
    assert!(
        got == want,
        "log table: lake differs from the real cluster's log"
    );

    let latest = changelog::latest_by_key(changelog(&connection, "users").await?);
    let want: Vec<Vec<i64>> = latest.into_iter().map(|(k, v)| vec![k, v]).collect();
    let got = lake_longs(
        dir.path(),
        "users",
        "SELECT id, score FROM lake ORDER BY id",
    )
    .await?;
    assert!(!want.is_empty());
    assert!(
        got == want,
        "pk table: lake ({} rows) differs from the latest rows of the real changelog ({} keys)",
        got.len(),
        want.len()
    );
    drop(cluster);
    Ok(())
}
