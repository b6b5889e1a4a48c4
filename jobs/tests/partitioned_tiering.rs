//! Partitioned tables through tiering, the queries and `silt verify` (issue 17): a
//! day-partitioned log table and a partitioned primary-key table tier into partitioned Delta
//! tables (the partition column, `__partition_id`, `__bucket`), one job per table that finds
//! partitions created while it runs; the lake holds every row once (log) or the last image
//! per key (primary key) across a crash of the tiering jobs; the txn offsets and the hot
//! store's registry are per (partition, bucket); `$lake` prunes partitions from a predicate;
//! the real-time view covers every partition's hot tail; verify compares partition by
//! partition; a dropped partition's rows stay in the lake.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use arrow::array::RecordBatch;
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use silt_connectors::changelog::BucketKey;
use silt_connectors::lake::LakeCatalogConfig;
use silt_hotstore::ServerHandle;
use silt_jobs::query::{QueryConfig, QueryRequest, QueryService};
use silt_jobs::tiering::TieringService;
use silt_jobs::verify::{Verdict, VerifyOptions, verify_table};
use silt_testkit::hotstore;
use silt_testkit::lake::rows_of;
use silt_testkit::tables::{
    LogAndKeyed, Table, create_day_partitions, day_partitioned_log, day_partitioned_primary_key,
    day_row, day_spec,
};
use silt_testkit::tiering::{Driver, service as tiering, wait_caught_up};

const DB: &str = "p";
const DAY_1: &str = "2026-11-29";
const DAY_2: &str = "2026-11-30";
const DAY_3: &str = "2026-12-01";

fn events() -> Table {
    day_partitioned_log(DB, "events").buckets(2).lake("300ms")
}

fn users() -> Table {
    day_partitioned_primary_key(DB, "users")
        .buckets(2)
        .lake("300ms")
}

/// What was written: every log row, and the last image per (dt, id) (None: deleted).
#[derive(Default, Clone)]
struct Written {
    events: Vec<(String, i64, String)>,
    users: BTreeMap<(String, i64), Option<String>>,
}

impl Written {
    fn event_rows(&self, days: &[&str]) -> Vec<String> {
        let mut rows: Vec<String> = self
            .events
            .iter()
            .filter(|(dt, _, _)| days.contains(&dt.as_str()))
            .map(|(dt, id, v)| format!("{dt}|{id}|{v}"))
            .collect();
        rows.sort();
        rows
    }

    fn user_rows(&self, days: &[&str]) -> Vec<String> {
        let mut rows: Vec<String> = self
            .users
            .iter()
            .filter(|((dt, _), _)| days.contains(&dt.as_str()))
            .filter_map(|((dt, id), v)| v.as_ref().map(|v| format!("{dt}|{id}|{v}")))
            .collect();
        rows.sort();
        rows
    }
}

/// Creates the partition of each of `days` in both tables.
async fn create_partitions(connection: &FlussConnection, days: &[&str]) -> Result<()> {
    for table in ["events", "users"] {
        create_day_partitions(connection, &TablePath::new(DB, table), days).await?;
    }
    Ok(())
}

/// Appends events `ids` to `day` and upserts (every 4th: deletes) user `id % 50` of `day`.
async fn write(
    connection: &FlussConnection,
    day: &str,
    ids: std::ops::Range<i64>,
    written: &mut Written,
) -> Result<()> {
    let (events, users) = (TablePath::new(DB, "events"), TablePath::new(DB, "users"));
    let writers = LogAndKeyed::open(connection, &events, &users).await?;
    let LogAndKeyed {
        appender: events,
        upserter: users,
    } = &writers;
    for id in ids {
        let v = format!("{day}-{id}");
        events.append(&day_row(day, id, &v))?;
        written.events.push((day.to_string(), id, v.clone()));
        let key = id % 50;
        if id % 4 == 3 {
            users.delete(&day_row(day, key, ""))?;
            written.users.insert((day.to_string(), key), None);
        } else {
            users.upsert(&day_row(day, key, &v))?;
            written.users.insert((day.to_string(), key), Some(v));
        }
        if id % 100 == 99 {
            writers.flush().await?;
        }
    }
    writers.flush().await
}

async fn query(service: &QueryService, sql: &str) -> Result<Vec<RecordBatch>> {
    Ok(service
        .execute(QueryRequest::new(sql, Duration::from_secs(60)))
        .await
        .with_context(|| sql.to_string())?
        .batches)
}

/// `dt|id|v` rows of a query that selects those three columns.
async fn rows(service: &QueryService, sql: &str) -> Result<Vec<String>> {
    let mut rows = rows_of(&query(service, sql).await?);
    rows.sort();
    Ok(rows)
}

/// `silt verify` answers MATCH for both tables.
async fn verify_both(server: &Arc<ServerHandle>, lake_root: &Path) -> Result<()> {
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let mut options = VerifyOptions::new(&bootstrap, lake_root.to_string_lossy().to_string());
    options.deadline = Duration::from_secs(60);
    for table in ["events", "users"] {
        let report = verify_table(&connection, DB, table, &options).await?;
        ensure!(
            report.verdict == Verdict::Match,
            "verify {DB}.{table}:\n{}",
            report.render()
        );
    }
    Ok(())
}

/// Fails with `what` and the rows that differ unless `sql` answers `want`.
async fn same(service: &QueryService, sql: &str, want: Vec<String>, what: &str) -> Result<()> {
    let got = rows(service, sql).await?;
    ensure!(
        got == want,
        "{what}: {}",
        silt_testkit::wait::describe_diff(&want, &got)
    );
    Ok(())
}

/// Checks that `p.events<view>` holds every event of `days` written and `p.users<view>` the
/// last image per key (`view`: `$lake`, or empty for the real-time view).
async fn same_events_and_users(
    service: &QueryService,
    view: &str,
    written: &Written,
    days: &[&str],
) -> Result<()> {
    let events = format!("SELECT dt, id, v FROM p.events{view}");
    let what = format!("p.events{view} differs from what was written");
    same(service, &events, written.event_rows(days), &what).await?;
    let users = format!("SELECT dt, id, v FROM p.users{view}");
    let what = format!("p.users{view} differs from the last image per key");
    same(service, &users, written.user_rows(days), &what).await
}

/// The lake files `sql` scans, as the query service counts them.
async fn files_scanned(service: &QueryService, sql: &str) -> Result<u64> {
    Ok(service
        .execute(QueryRequest::new(sql, Duration::from_secs(60)))
        .await
        .with_context(|| sql.to_string())?
        .lake_files_scanned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitioned_tables_tier_query_and_verify_per_partition() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 2).await?;
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    events().create(&connection).await?;
    users().create(&connection).await?;
    create_partitions(&connection, &[DAY_1, DAY_2]).await?;
    let mut written = Written::default();
    write(&connection, DAY_1, 0..400, &mut written).await?;
    write(&connection, DAY_2, 1000..1300, &mut written).await?;

    // One tiering job per table tiers both partitions.
    let first = tiering(dir.path(), &server);
    wait_caught_up(&first, Driver::Wait, 2, Duration::from_secs(90)).await?;
    let status = first.status().await?;
    for table in &status {
        let partitions: BTreeSet<Option<i64>> = table.buckets.keys().map(|b| b.partition).collect();
        ensure!(
            partitions.len() == 2 && partitions.iter().all(Option::is_some),
            "{}: status per (partition, bucket): {:?}",
            table.table,
            table.buckets
        );
    }

    // A partitioned Delta table: the partition column, then __partition_id and __bucket.
    let lake_root = dir.path().join("lake");
    let lake = deltalake::open_table(deltalake::ensure_table_uri(
        lake_root.join(DB).join("events").to_string_lossy(),
    )?)
    .await?;
    let partition_columns = lake.snapshot()?.metadata().partition_columns().to_vec();
    ensure!(
        partition_columns == ["dt", "__partition_id", "__bucket"],
        "lake partitioned by {partition_columns:?}"
    );

    // The hot store's registry (GetLakeSnapshot) holds offsets per partition and bucket.
    let snapshot = server
        .lake_snapshot(DB, "events")?
        .context("no lake snapshot registered")?;
    let registered: BTreeMap<BucketKey, i64> = snapshot
        .partition_offsets
        .iter()
        .map(|(p, b, o)| (BucketKey::partition(*p, *b), *o))
        .collect();
    let events_status = status.iter().find(|s| s.table == "events").unwrap();
    let lake_offsets: BTreeMap<BucketKey, i64> = events_status
        .buckets
        .iter()
        .filter(|(_, (_, lake))| *lake > 0)
        .map(|(b, (_, lake))| (*b, *lake))
        .collect();
    ensure!(
        registered == lake_offsets,
        "registry {registered:?}, lake {lake_offsets:?}"
    );

    // A crash of the tiering jobs (no final checkpoint) while a third partition is created
    // and written; a fresh service resumes per (partition, bucket) and finds it.
    create_partitions(&connection, &[DAY_3]).await?;
    write(&connection, DAY_3, 2000..2200, &mut written).await?;
    first.shutdown(Duration::ZERO).await;
    write(&connection, DAY_2, 1300..1450, &mut written).await?;
    let second: TieringService = tiering(dir.path(), &server);
    wait_caught_up(&second, Driver::Wait, 2, Duration::from_secs(90)).await?;

    let service = QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
        bootstrap.clone(),
        lake_root.to_string_lossy().to_string(),
    )));
    let all = [DAY_1, DAY_2, DAY_3];
    same_events_and_users(&service, "$lake", &written, &all).await?;
    verify_both(&server, &lake_root).await?;

    // The real-time view covers every partition's hot tail: written after tiering stopped.
    second.shutdown(Duration::from_secs(30)).await;
    write(&connection, DAY_1, 400..450, &mut written).await?;
    write(&connection, DAY_3, 2200..2260, &mut written).await?;
    same_events_and_users(&service, "", &written, &all).await?;
    let third = tiering(dir.path(), &server);
    wait_caught_up(&third, Driver::Wait, 2, Duration::from_secs(90)).await?;

    // `$lake` prunes partitions: a one-day query reads that day's files only.
    let lake = deltalake::open_table(deltalake::ensure_table_uri(
        lake_root.join(DB).join("events").to_string_lossy(),
    )?)
    .await?;
    let paths: Vec<String> = lake
        .snapshot()?
        .log_data()
        .iter()
        .map(|f| f.path().to_string())
        .collect();
    let day_2_files = paths
        .iter()
        .filter(|p| p.contains(&format!("dt={DAY_2}/")))
        .count() as u64;
    let every_file = files_scanned(&service, "SELECT max(v) FROM p.events$lake").await?;
    let one_day = files_scanned(
        &service,
        &format!("SELECT max(v) FROM p.events$lake WHERE dt = '{DAY_2}'"),
    )
    .await?;
    println!(
        "files scanned: {one_day} for one of three partitions, {every_file} for the whole \
         table ({} in the lake, {day_2_files} of them in {DAY_2})",
        paths.len()
    );
    ensure!(
        every_file == paths.len() as u64 && one_day == day_2_files && one_day < every_file,
        "a query of {DAY_2} scans {one_day} files, the table {every_file}; the lake holds {} \
         files, {day_2_files} of them in {DAY_2}",
        paths.len()
    );
    let counted = rows(
        &service,
        &format!("SELECT count(*) FROM p.events$lake WHERE dt = '{DAY_2}'"),
    )
    .await?;
    ensure!(
        counted == [written.event_rows(&[DAY_2]).len().to_string()],
        "count of {DAY_2}: {counted:?}"
    );

    // A dropped partition leaves the hot store; its rows stay in the lake (history), and
    // tiering and verify go on with the partitions left.
    let admin = connection.get_admin()?;
    for table in ["events", "users"] {
        admin
            .drop_partition(&TablePath::new(DB, table), &day_spec(DAY_1), false)
            .await?;
    }
    write(&connection, DAY_3, 2260..2300, &mut written).await?;
    wait_caught_up(&third, Driver::Wait, 2, Duration::from_secs(90)).await?;
    same(
        &service,
        "SELECT dt, id, v FROM p.events$lake",
        written.event_rows(&all),
        &format!("events$lake after the drop of {DAY_1}"),
    )
    .await?;
    verify_both(&server, &lake_root).await?;

    // Regression check (issue 33, item 3): the dropped day created again under its name is a
    // new partition id; its upserts of keys the dropped partition held (ids % 50) must leave
    // one row per primary key (dt, id) in `$lake` and in the real-time view, and verify checks
    // that invariant over the whole lake, dropped partitions included.
    create_partitions(&connection, &[DAY_1]).await?;
    // A new connection: fluss-rs 1.0's writers keep the dropped partition's id and sequence
    // numbers on the old one (its debug build asserts on the retry that follows).
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    write(&connection, DAY_1, 5000..5120, &mut written).await?;
    wait_caught_up(&third, Driver::Wait, 2, Duration::from_secs(90)).await?;
    for view in ["$lake", ""] {
        let twice = rows(
            &service,
            &format!(
                "SELECT dt, id, CAST(count(*) AS VARCHAR) FROM p.users{view} GROUP BY dt, id HAVING count(*) > 1"
            ),
        )
        .await?;
        ensure!(
            twice.is_empty(),
            "keys with several rows in p.users{view}: {twice:?}"
        );
    }
    verify_both(&server, &lake_root).await?;
    third.shutdown(Duration::from_secs(30)).await;
    Ok(())
}
