//! A real Apache Fluss cluster as the tiering source: the same Fluss source and Delta sink that
//! tier silt's hotstore tier a real cluster's log and primary-key tables, and the lake must then
//! equal the cluster's changelog (log: every offset once; PK: latest row per key, deletes gone).
//! Skips, saying so, where Java, Maven or the jars are unavailable.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use common::fluss_real::{RealFluss, Started};
use datafusion::prelude::SessionContext;
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::{DataGetters, GenericRow};
use fluss::rpc::message::OffsetSpec;
use silt_jobs::tiering::{TieringConfig, TieringService};

const DB: &str = "tier_real";

async fn create_and_fill(connection: &FlussConnection) -> Result<()> {
    let admin = connection.get_admin()?;
    admin.create_database(DB, None, true).await?;
    let log = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .build()?;
    let log = TableDescriptor::builder()
        .schema(log)
        .distributed_by(Some(2), vec![])
        .build()?;
    admin
        .create_table(&TablePath::new(DB, "events"), &log, true)
        .await?;
    let pk = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .primary_key(vec!["id"])?
        .build()?;
    let pk = TableDescriptor::builder()
        .schema(pk)
        .distributed_by(Some(2), vec!["id".to_string()])
        .build()?;
    admin
        .create_table(&TablePath::new(DB, "users"), &pk, true)
        .await?;

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
        if i % 9 == 0 {
            upserter.delete(&u)?;
        } else {
            upserter.upsert(&u)?;
        }
    }
    appender.flush().await?;
    upserter.flush().await?;
    Ok(())
}

/// `(bucket, offset, change type, longs)` of a table's changelog up to the high watermarks.
async fn changelog(
    connection: &FlussConnection,
    table: &str,
) -> Result<Vec<(i32, i64, u8, Vec<i64>)>> {
    let path = TablePath::new(DB, table);
    let hw = connection
        .get_admin()?
        .list_offsets(&path, &[0, 1], OffsetSpec::Latest)
        .await?;
    let scanner = connection
        .get_table(&path)
        .await?
        .new_scan()
        .create_log_scanner()?;
    let mut remaining = BTreeMap::new();
    for b in [0, 1] {
        if hw[&b] > 0 {
            scanner.subscribe(b, EARLIEST_OFFSET).await?;
            remaining.insert(b, hw[&b]);
        }
    }
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            bail!("reading {table} timed out; left {remaining:?}");
        }
        for (bucket, records) in scanner
            .poll(Duration::from_millis(200))
            .await?
            .into_records_by_buckets()
        {
            let b = bucket.bucket_id();
            for r in records {
                let Some(&end) = remaining.get(&b) else {
                    continue;
                };
                if r.offset() < end {
                    let longs = if table == "events" {
                        vec![r.row().get_long(0)?]
                    } else {
                        vec![r.row().get_long(0)?, r.row().get_long(1)?]
                    };
                    out.push((b, r.offset(), r.change_type().to_byte_value(), longs));
                }
                if r.offset() + 1 >= end {
                    remaining.remove(&b);
                }
            }
        }
    }
    out.sort_by_key(|r| (r.0, r.1));
    Ok(out)
}

async fn lake_longs(dir: &std::path::Path, table: &str, sql: &str) -> Result<Vec<Vec<i64>>> {
    use arrow::array::{Array, Int64Array};
    let uri = dir.join(DB).join(table);
    let delta = deltalake::open_table(deltalake::ensure_table_uri(uri.to_string_lossy())?).await?;
    let ctx = SessionContext::new();
    ctx.register_table("lake", delta.table_provider().await?)?;
    let mut rows = Vec::new();
    for batch in ctx.sql(sql).await?.collect().await? {
        let columns: Vec<Int64Array> = batch
            .columns()
            .iter()
            .map(|c| {
                arrow::compute::cast(c, &arrow::datatypes::DataType::Int64)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone()
            })
            .collect();
        for i in 0..batch.num_rows() {
            rows.push(columns.iter().map(|c| c.value(i)).collect());
        }
    }
    Ok(rows)
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
        .map(|(b, o, _, l)| vec![*b as i64, *o, l[0]])
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

    let mut latest = BTreeMap::new();
    for (_, _, change, l) in changelog(&connection, "users").await? {
        match change {
            1 | 3 => {
                latest.insert(l[0], l[1]);
            }
            4 => {
                latest.remove(&l[0]);
            }
            _ => {}
        }
    }
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
