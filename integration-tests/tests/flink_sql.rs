//! Flink SQL against silt's hot store through the official Fluss connector (issues 16 and 17):
//! the harness of `integration-tests/flink-sql/` (Flink 1.20.3 in one JVM, `fluss-flink-1.20`
//! 0.9.1-incubating) runs SQL scripts against a hot store started in-process.
//!
//! - `flink_sql_basics`: catalog, database, a log and a primary-key table; INSERT, a second
//!   INSERT of a key (an update); streaming reads; batch point query, LIMIT, COUNT(*) of the
//!   log table, DELETE and UPDATE; the result read back by Flink and by silt's own Fluss
//!   source.
//! - `flink_sql_partitioned_tables_tier_and_verify`: day-partitioned lake-enabled log and
//!   primary-key tables and an auto-partitioned one, whose partitions Flink's INSERT creates
//!   (the Fluss writer's `client.writer.dynamic-create-partition.enabled`, on by default);
//!   streaming reads with and without a partition filter, a batch LIMIT and a point query on
//!   partitioned twins without the lake; then tiering, `verify` MATCH per table, and `$lake`
//!   (all of it and one partition) equal to what Flink inserted.
//! - `flink_sql_reads_lake_enabled_partitioned_tables`: Flink's reads of lake-enabled tables
//!   after tiering (issue 16, item 4): streaming with and without a partition filter, a batch
//!   LIMIT and point query, the connector's refusal of a full batch read, and a DELETE on a
//!   lake-enabled primary-key table. Every check runs in a script of its own, so each failure
//!   is reported with its own error.
//! - `flink_sql_count_of_a_primary_key_table`: batch `COUNT(*)` of a primary-key table
//!   (GetTableStats, issue 16, item 2).
//! - `flink_sql_full_read_of_a_primary_key_table_shows_current_images` (issue 32): insert five
//!   keys, update one, and Flink's default full-mode read shows five rows, the current images,
//!   from the table's kv snapshot: for a table whose changelog is whole and for one whose
//!   changelog hot retention cut.
//!
//! Each test without Java, Maven or the jars prints `SKIPPED: <test>: <reason>` and returns.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use silt_connectors::lake::LakeCatalogConfig;
use silt_hotstore::ServerHandle;
use silt_jobs::query::{QueryConfig, QueryService};
use silt_testkit::flink_sql::{self, Outcome, Ran, Run};
use silt_testkit::hotstore;
use silt_testkit::skip;
use silt_testkit::tiering::{self, Driver};
use silt_testkit::wait::describe_diff;
use tempfile::TempDir;

const DB: &str = "fp";
const DAYS: [&str; 3] = ["2026-11-29", "2026-11-30", "2026-12-01"];
/// The day the filtered reads ask for.
const DAY: &str = DAYS[1];

/// Lines of a failed run's stderr kept in the message.
const STDERR_LINES_MAX: usize = 40;

/// A row of every table here: (dt, id, v).
type Row = (String, i64, String);

/// The catalog and database every script starts with (each script is a session of its own).
fn session(database: &str) -> String {
    format!(
        "CREATE CATALOG fluss_catalog WITH ('type' = 'fluss', 'bootstrap.servers' = '${{bootstrap}}');\n\
         USE CATALOG fluss_catalog;\n\
         CREATE DATABASE IF NOT EXISTS {database};\n\
         USE {database};\n"
    )
}

fn values(rows: &[Row]) -> String {
    let tuples: Vec<String> = rows
        .iter()
        .map(|(dt, id, v)| format!("('{dt}', {id}, '{v}')"))
        .collect();
    tuples.join(", ")
}

fn text(rows: impl IntoIterator<Item = Row>) -> Vec<String> {
    let mut text: Vec<String> = rows
        .into_iter()
        .map(|(dt, id, v)| format!("{dt}|{id}|{v}"))
        .collect();
    text.sort();
    text
}

fn on_day(rows: &[String], day: &str) -> Vec<String> {
    rows.iter()
        .filter(|r| r.starts_with(&format!("{day}|")))
        .cloned()
        .collect()
}

/// What the partitioned-table tests start from: a hot store for tiering over a scratch
/// directory, the data they write, and the rows their events and users tables must then hold.
async fn start_partitioned() -> Result<(TempDir, Arc<ServerHandle>, Data, Vec<String>, Vec<String>)>
{
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 2).await?;
    let data = Data::new();
    let (events, users) = (data.event_rows(), data.user_rows(&[]));
    Ok((dir, server, data, events, users))
}

/// What the partitioned scenario writes, in two INSERTs per table.
struct Data {
    /// Log rows: four per day, then three more on [`DAY`].
    events: [Vec<Row>; 2],
    /// Upserts keyed by (dt, id): three keys per day, then an update on the first and the
    /// second day and a new key on the third.
    users: [Vec<Row>; 2],
    /// Log rows of the auto-partitioned table: yesterday and today as `yyyyMMdd` (UTC), which
    /// are inside its retention (7 days by default).
    auto_events: Vec<Row>,
}

impl Data {
    fn new() -> Data {
        let row = |dt: &str, id: i64, v: String| (dt.to_string(), id, v);
        let mut first = Vec::new();
        for (day, n) in DAYS.iter().zip(0..) {
            for id in n * 10 + 1..=n * 10 + 4 {
                first.push(row(day, id, format!("e{id}")));
            }
        }
        let second = (25..=27).map(|id| row(DAY, id, format!("e{id}"))).collect();
        let users_first = DAYS
            .iter()
            .flat_map(|day| (1..=3).map(move |id| row(day, id, format!("{day}/{id}/1"))))
            .collect();
        let users_second = vec![
            row(DAYS[0], 1, format!("{}/1/2", DAYS[0])),
            row(DAYS[1], 2, format!("{}/2/2", DAYS[1])),
            row(DAYS[2], 4, format!("{}/4/1", DAYS[2])),
        ];
        let today = utc_day(0);
        let yesterday = utc_day(-1);
        let auto_events = [&yesterday, &today]
            .iter()
            .flat_map(|day| (1..=3).map(move |id| row(day, id, format!("a{id}"))))
            .collect();
        Data {
            events: [first, second],
            users: [users_first, users_second],
            auto_events,
        }
    }

    fn event_rows(&self) -> Vec<String> {
        text(self.events.iter().flatten().cloned())
    }

    /// The last image per (dt, id), with `deleted` keys removed.
    fn user_rows(&self, deleted: &[(&str, i64)]) -> Vec<String> {
        let mut image = std::collections::BTreeMap::new();
        for (dt, id, v) in self.users.iter().flatten() {
            image.insert((dt.clone(), *id), v.clone());
        }
        for (dt, id) in deleted {
            image.remove(&(dt.to_string(), *id));
        }
        text(image.into_iter().map(|((dt, id), v)| (dt, id, v)))
    }

    /// How many changelog rows a streaming read of `day` of a primary-key table sees: +I for
    /// each new key, -U and +U for each update, -D for each of `deleted`.
    fn user_changelog_len(&self, day: &str, deleted: usize) -> usize {
        let mut keys = BTreeSet::new();
        let mut len = deleted;
        for (dt, id, _) in self.users.iter().flatten().filter(|r| r.0 == day) {
            len += if keys.insert((dt, id)) { 1 } else { 2 };
        }
        len
    }

    fn auto_days(&self) -> BTreeSet<String> {
        self.auto_events.iter().map(|r| r.0.clone()).collect()
    }
}

/// The UTC day `offset` days from today as `yyyyMMdd` (the name Fluss gives a DAY partition).
fn utc_day(offset: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let days = i64::try_from(now.as_secs()).expect("seconds") / 86_400 + offset;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}")
}

const LAKE: &str = "'table.datalake.enabled' = 'true', 'table.datalake.freshness' = '300ms'";

fn create_log_table(name: &str, options: &str) -> String {
    format!(
        "CREATE TABLE {name} (dt STRING, id BIGINT, v STRING) PARTITIONED BY (dt) \
         WITH ('bucket.num' = '2'{options});\n"
    )
}

fn create_pk_table(name: &str, options: &str) -> String {
    format!(
        "CREATE TABLE {name} (dt STRING, id BIGINT, v STRING, PRIMARY KEY (dt, id) NOT ENFORCED) \
         PARTITIONED BY (dt) WITH ('bucket.num' = '2'{options});\n"
    )
}

/// DDL and INSERTs of the lake-enabled `events` and `users` (the partitions come from the
/// INSERTs), two rounds each so that the second updates keys and adds to a partition.
fn write_lake_tables(data: &Data) -> String {
    let mut sql = create_log_table("events", &format!(", {LAKE}"));
    sql += &create_pk_table("users", &format!(", {LAKE}"));
    for round in 0..2 {
        sql += &format!(
            "INSERT INTO events VALUES {};\n",
            values(&data.events[round])
        );
        sql += &format!("INSERT INTO users VALUES {};\n", values(&data.users[round]));
    }
    sql
}

/// Runs `scripts` against `server`; None (after printing SKIPPED) when Flink cannot run here.
async fn run_flink(
    test: &str,
    server: &ServerHandle,
    dir: &Path,
    scripts: Vec<(&'static str, String)>,
) -> Result<Option<Run>> {
    let bootstrap = server.local_addr().to_string();
    let dir = dir.to_path_buf();
    let ran =
        tokio::task::spawn_blocking(move || flink_sql::run(&bootstrap, &dir, &scripts)).await??;
    match ran {
        Ran::Skipped(reason) => {
            skip(test, &reason)?;
            Ok(None)
        }
        Ran::Finished(run) => {
            println!(
                "flink-sql ({}) in {:.1} s:\n{}",
                run.status,
                run.duration.as_secs_f64(),
                run.summary()
            );
            Ok(Some(run))
        }
    }
}

/// Collects what differs, so that one run reports every failed check and not only the first.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    /// Records `what` unless `got` is Ok and equals `want`.
    fn same(&mut self, what: &str, want: &[String], got: Result<Vec<String>>) {
        match got {
            Ok(got) if got == want => {}
            Ok(got) => self
                .0
                .push(format!("{what}: {}", describe_diff(want, &got))),
            Err(e) => self.0.push(format!("{what}: {e:#}")),
        }
    }

    /// The four reads both partitioned-table tests make of a log table `events` and a
    /// primary-key table `users` holding `events_rows` and `users_rows`: every event and
    /// [`DAY`]'s events streaming, a batch LIMIT 1000 of events, and a batch point query of
    /// user ([`DAYS`]`[0]`, 1). `statements` are their `(script, name)`s, in that order.
    fn same_reads(
        &mut self,
        run: &Run,
        (events, users): (&str, &str),
        (events_rows, users_rows): (&[String], &[String]),
        statements: [(&str, &str); 4],
    ) {
        let [all, day, limit, point] = statements.map(|(script, name)| run.rows(script, name));
        self.same(&format!("streaming SELECT of {events}"), events_rows, all);
        let on_day_events = on_day(events_rows, DAY);
        let what = format!("streaming SELECT of {events} WHERE dt = '{DAY}'");
        self.same(&what, &on_day_events, day);
        let what = format!("batch LIMIT 1000 of {events} (every partition)");
        self.same(&what, events_rows, limit);
        let what = format!("batch point query of {users} ({}, 1)", DAYS[0]);
        self.same(&what, &on_day(users_rows, DAYS[0])[..1], point);
    }

    fn check(&mut self, what: &str, result: Result<()>) {
        if let Err(e) = result {
            self.0.push(format!("{what}: {e:#}"));
        }
    }

    fn finish(self, test: &str, run: Option<&Run>) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let stderr = run
            .map(|r| flink_sql::tail(&r.stderr, STDERR_LINES_MAX))
            .unwrap_or_default();
        anyhow::bail!(
            "{test}: {} check(s) failed:\n- {}\nthe harness's stderr (last {STDERR_LINES_MAX} lines):\n{stderr}",
            self.0.len(),
            self.0.join("\n- ")
        )
    }
}

/// `SHOW PARTITIONS` rows (`dt=...`) as the set of days.
fn partitions(run: &Run, script: &str, name: &str) -> Result<BTreeSet<String>> {
    Ok(run
        .rows(script, name)?
        .into_iter()
        .map(|p| p.trim_start_matches("dt=").to_string())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_sql_basics() -> Result<()> {
    const TEST: &str = "flink_sql_basics";
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(&dir.path().join("hotstore")).await?;
    let script = session("fsql")
        + "CREATE TABLE logs (id BIGINT, v STRING) WITH ('bucket.num' = '2');\n\
           CREATE TABLE users (id BIGINT, v STRING, PRIMARY KEY (id) NOT ENFORCED) WITH ('bucket.num' = '2');\n\
           -- @name tables\n\
           SHOW TABLES;\n\
           INSERT INTO logs VALUES (1, 'a'), (2, 'b'), (3, 'c');\n\
           INSERT INTO users VALUES (1, 'a'), (2, 'b'), (3, 'c');\n\
           INSERT INTO users VALUES (2, 'b2');\n\
           -- @name logs_stream\n\
           -- @rows 3\n\
           SELECT id, v FROM logs;\n\
           -- @name users_stream\n\
           -- @rows 5\n\
           SELECT id, v FROM users;\n\
           SET 'execution.runtime-mode' = 'batch';\n\
           -- @name users_point\n\
           SELECT id, v FROM users WHERE id = 2;\n\
           -- @name logs_limit\n\
           SELECT id, v FROM logs LIMIT 10;\n\
           -- @name logs_count\n\
           SELECT COUNT(*) FROM logs;\n\
           DELETE FROM users WHERE id = 3;\n\
           UPDATE users SET v = 'a2' WHERE id = 1;\n\
           SET 'execution.runtime-mode' = 'streaming';\n\
           -- @name users_after\n\
           -- @rows 8\n\
           SELECT id, v FROM users;\n\
           ALTER TABLE users ADD note STRING;\n\
           INSERT INTO users VALUES (4, 'd', 'n4');\n\
           -- @name users_added\n\
           -- @rows 9\n\
           SELECT id, v, note FROM users;\n";
    let Some(run) = run_flink(TEST, &server, dir.path(), vec![("basics", script)]).await? else {
        return Ok(());
    };
    let mut failures = Failures::default();
    let strings = |rows: &[&str]| -> Vec<String> { rows.iter().map(|r| r.to_string()).collect() };
    failures.same(
        "SHOW TABLES",
        &strings(&["logs", "users"]),
        run.rows("basics", "tables"),
    );
    let logs = strings(&["1|a", "2|b", "3|c"]);
    failures.same(
        "streaming SELECT of logs",
        &logs,
        run.rows("basics", "logs_stream"),
    );
    failures.same(
        "batch LIMIT 10 of logs",
        &logs,
        run.rows("basics", "logs_limit"),
    );
    failures.same(
        "batch COUNT(*) of logs",
        &strings(&["3"]),
        run.rows("basics", "logs_count"),
    );
    failures.same(
        "streaming SELECT of users (the changelog's image)",
        &strings(&["1|a", "2|b2", "3|c"]),
        run.changelog_image("basics", "users_stream"),
    );
    failures.same(
        "batch point query users WHERE id = 2",
        &strings(&["2|b2"]),
        run.rows("basics", "users_point"),
    );
    let after = strings(&["1|a2", "2|b2"]);
    failures.same(
        "streaming SELECT of users after DELETE id 3 and UPDATE id 1",
        &after,
        run.changelog_image("basics", "users_after"),
    );
    failures.same(
        "streaming SELECT of users after ALTER TABLE ADD note (rows of schema 1 read null)",
        &strings(&["1|a2|NULL", "2|b2|NULL", "4|d|n4"]),
        run.changelog_image("basics", "users_added"),
    );
    let after = strings(&["1|a2|", "2|b2|", "4|d|n4"]);
    // What Flink wrote, read by another client: silt's own Fluss source.
    failures.same(
        "users read by silt's Fluss source",
        &after,
        silt_testkit::lake::silt_table_rows(&server.local_addr().to_string(), "fsql", "users")
            .await,
    );
    let outcome = failures.finish(TEST, Some(&run));
    server.shutdown().await?;
    outcome
}

/// Flink's `COUNT(*)` in batch mode asks GetTableStats (1059), and only for a server without it
/// falls back to summing ListOffsets, which a primary-key table cannot use: the query then
/// fails with "The Fluss cluster doesn't support count(*) on primary key table yet".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_sql_count_of_a_primary_key_table() -> Result<()> {
    const TEST: &str = "flink_sql_count_of_a_primary_key_table";
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(&dir.path().join("hotstore")).await?;
    let script = session("fsql")
        + "CREATE TABLE users (id BIGINT, v STRING, PRIMARY KEY (id) NOT ENFORCED) WITH ('bucket.num' = '2');\n\
           INSERT INTO users VALUES (1, 'a'), (2, 'b'), (3, 'c'), (2, 'b2');\n\
           SET 'execution.runtime-mode' = 'batch';\n\
           -- @name count\n\
           SELECT COUNT(*) FROM users;\n";
    let Some(run) = run_flink(TEST, &server, dir.path(), vec![("count", script)]).await? else {
        return Ok(());
    };
    let mut failures = Failures::default();
    failures.same(
        "batch COUNT(*) of a primary-key table with 3 keys",
        &["3".to_string()],
        run.rows("count", "count"),
    );
    let outcome = failures.finish(TEST, Some(&run));
    server.shutdown().await?;
    outcome
}

/// Issue 32: "insert five keys, update one, full-mode read of five rows". A Fluss reader of a
/// primary-key table in full mode (Flink's default `scan.startup.mode`) reads each bucket's
/// latest kv snapshot, then the changelog from the snapshot's log offset. Before silt kept
/// snapshots it read the changelog from offset 0 and showed the old image of the updated key
/// first (`+I 2|b`, then `-U 2|b`, `+U 2|b2`), and once hot retention had cut the changelog the
/// read was refused (KV_SNAPSHOT_NOT_EXIST). Two tables, both snapshotted after the writes as
/// the snapshot interval would: `kept` keeps its whole changelog, `cut`'s expired (`table.log.ttl`
/// 1 s, segments of 1 KiB, the inserts' padding fills one) and retention cut it. Both reads
/// must be five inserts, the current images.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_sql_full_read_of_a_primary_key_table_shows_current_images() -> Result<()> {
    const TEST: &str = "flink_sql_full_read_of_a_primary_key_table_shows_current_images";
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_with(&dir.path().join("hotstore"), |config| {
        config.log.segment_bytes_max = 1024;
        config.retention_check_interval_ms = 3_600_000;
        config.kv_snapshot_interval_ms = 3_600_000;
    })
    .await?;
    let create = |name: &str, ttl: &str| {
        format!(
            "CREATE TABLE {name} (id BIGINT, v STRING, pad STRING, PRIMARY KEY (id) NOT ENFORCED) \
             WITH ('bucket.num' = '1'{ttl});\n\
             INSERT INTO {name} VALUES (1, 'a', REPEAT('x', 400)), (2, 'b', REPEAT('x', 400)), \
             (3, 'c', REPEAT('x', 400)), (4, 'd', REPEAT('x', 400)), (5, 'e', REPEAT('x', 400));\n\
             INSERT INTO {name} VALUES (2, 'b2', 'updated');\n"
        )
    };
    let write = session("fsql") + &create("kept", "") + &create("cut", ", 'table.log.ttl' = '1 s'");
    let Some(written) = run_flink(
        TEST,
        &server,
        &dir.path().join("write"),
        vec![("write", write)],
    )
    .await?
    else {
        return Ok(());
    };
    if !written.script_ok("write") {
        return Failures(written.failures()).finish(TEST, Some(&written));
    }
    // What the snapshot interval does, now; then the changelog of `cut` expires and is cut.
    let snapshots = server.take_kv_snapshots().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let retention = server.apply_retention().await;
    let log_start = |table: &str| {
        retention
            .iter()
            .find(|b| b.table == format!("fsql.{table}"))
            .map(|b| b.log_start_offset)
    };
    let mut failures = Failures::default();
    if log_start("kept") != Some(0) || !log_start("cut").is_some_and(|start| start > 0) {
        failures.0.push(format!(
            "retention must cut `cut` and leave `kept`: {retention:?} (snapshots {snapshots:?})"
        ));
    }
    let full = |table: &str| {
        format!(
            "{}-- @name full\n-- @rows 5\n\
             SELECT id, v FROM {table} /*+ OPTIONS('scan.startup.mode' = 'full') */;\n",
            session("fsql")
        )
    };
    let scripts = vec![("kept", full("kept")), ("cut", full("cut"))];
    let Some(run) = run_flink(TEST, &server, &dir.path().join("read"), scripts).await? else {
        return Ok(());
    };
    let current: Vec<String> = ["1|a", "2|b2", "3|c", "4|d", "5|e"]
        .map(String::from)
        .to_vec();
    for (table, when) in [
        ("kept", "with its whole changelog"),
        ("cut", "after retention cut its changelog"),
    ] {
        failures.same(
            &format!("full-mode read of {table} {when}: five inserts, the current images"),
            &current,
            run.rows(table, "full"),
        );
    }
    let outcome = failures.finish(TEST, Some(&run));
    server.shutdown().await?;
    outcome
}

async fn query(service: &QueryService, sql: &str) -> Result<Vec<String>> {
    silt_testkit::lake::query_rows(service, sql, Duration::from_secs(60)).await
}

async fn verify(server: &ServerHandle, lake_root: &Path, table: &str) -> Result<()> {
    let bootstrap = server.local_addr().to_string();
    silt_testkit::tiering::verify_match(&bootstrap, lake_root, DB, table).await
}

/// Tiers every lake-enabled table until the lake covers the hot store.
async fn tier(dir: &Path, server: &Arc<ServerHandle>, tables: usize) -> Result<()> {
    let service = tiering::service(dir, server);
    let outcome =
        tiering::wait_caught_up(&service, Driver::Wait, tables, Duration::from_secs(120)).await;
    service.shutdown(Duration::from_secs(30)).await;
    outcome
}

fn lake_query_service(server: &ServerHandle, dir: &Path) -> QueryService {
    QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
        server.local_addr().to_string(),
        dir.join("lake").to_string_lossy().to_string(),
    )))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flink_sql_partitioned_tables_tier_and_verify() -> Result<()> {
    const TEST: &str = "flink_sql_partitioned_tables_tier_and_verify";
    let (dir, server, data, events, users) = start_partitioned().await?;
    let plain_deleted = [(DAY, 3)];
    let auto_partitioned = ", 'table.auto-partition.enabled' = 'true', \
                            'table.auto-partition.time-unit' = 'DAY'";

    let mut script = session(DB) + &write_lake_tables(&data);
    script += &create_log_table("auto_events", &format!("{auto_partitioned}, {LAKE}"));
    script += &format!(
        "INSERT INTO auto_events VALUES {};\n",
        values(&data.auto_events)
    );
    // Twins without the lake: Flink reads these today (see the third test for the others).
    script += &create_log_table("plain_events", "");
    script += &create_pk_table("plain_users", "");
    for round in 0..2 {
        script += &format!(
            "INSERT INTO plain_events VALUES {};\n",
            values(&data.events[round])
        );
        script += &format!(
            "INSERT INTO plain_users VALUES {};\n",
            values(&data.users[round])
        );
    }
    script += &format!(
        "-- @name events_partitions\nSHOW PARTITIONS events;\n\
         -- @name auto_partitions\nSHOW PARTITIONS auto_events;\n\
         -- @name plain_events\n-- @rows {}\nSELECT dt, id, v FROM plain_events;\n\
         -- @name plain_events_day\n-- @rows {}\nSELECT dt, id, v FROM plain_events WHERE dt = '{DAY}';\n\
         SET 'execution.runtime-mode' = 'batch';\n\
         -- @name plain_events_limit\nSELECT dt, id, v FROM plain_events LIMIT 1000;\n\
         -- @name plain_users_point\nSELECT dt, id, v FROM plain_users WHERE dt = '{first}' AND id = 1;\n\
         DELETE FROM plain_users WHERE dt = '{DAY}' AND id = 3;\n\
         SET 'execution.runtime-mode' = 'streaming';\n\
         -- @name plain_users_day\n-- @rows {}\nSELECT dt, id, v FROM plain_users WHERE dt = '{DAY}';\n",
        events.len(),
        on_day(&events, DAY).len(),
        data.user_changelog_len(DAY, plain_deleted.len()),
        first = DAYS[0],
    );
    let Some(run) = run_flink(TEST, &server, dir.path(), vec![("write", script)]).await? else {
        return Ok(());
    };
    let mut failures = Failures::default();
    let days: BTreeSet<String> = DAYS.iter().map(|d| d.to_string()).collect();
    match partitions(&run, "write", "events_partitions") {
        Ok(got) if got == days => {}
        got => failures.0.push(format!(
            "SHOW PARTITIONS events after the INSERTs: {got:?}, want {days:?}"
        )),
    }
    // Auto-partitioning pre-creates today's and later partitions; the INSERT adds yesterday's.
    match partitions(&run, "write", "auto_partitions") {
        Ok(got) if got.is_superset(&data.auto_days()) => {}
        got => failures.0.push(format!(
            "SHOW PARTITIONS auto_events: {got:?}, want at least {:?}",
            data.auto_days()
        )),
    }
    failures.same_reads(
        &run,
        ("plain_events", "plain_users"),
        (&events, &users),
        [
            ("write", "plain_events"),
            ("write", "plain_events_day"),
            ("write", "plain_events_limit"),
            ("write", "plain_users_point"),
        ],
    );
    failures.same(
        &format!("streaming SELECT of plain_users WHERE dt = '{DAY}' after a DELETE"),
        &on_day(&data.user_rows(&plain_deleted), DAY),
        run.changelog_image("write", "plain_users_day"),
    );
    if !run.script_ok("write") {
        // The tables may not even exist; what follows would only repeat it.
        return failures.finish(TEST, Some(&run));
    }

    failures.check("tiering", tier(dir.path(), &server, 3).await);
    let lake_root = dir.path().join("lake");
    for table in ["events", "users", "auto_events"] {
        failures.check(
            &format!("verify {DB}.{table}"),
            verify(&server, &lake_root, table).await,
        );
    }
    let service = lake_query_service(&server, dir.path());
    let on = format!(" WHERE dt = '{DAY}'");
    // (table, filter, the rows it must hold, what the check is called)
    let lake_reads = [
        ("events", "", events.clone(), "events$lake".to_string()),
        (
            "events",
            on.as_str(),
            on_day(&events, DAY),
            format!("events$lake{on}"),
        ),
        (
            "users",
            "",
            users.clone(),
            "users$lake (the last image per key)".to_string(),
        ),
        (
            "users",
            on.as_str(),
            on_day(&users, DAY),
            format!("users$lake{on}"),
        ),
        (
            "auto_events",
            "",
            text(data.auto_events.iter().cloned()),
            "auto_events$lake".to_string(),
        ),
    ];
    for (table, filter, want, what) in lake_reads {
        let sql = format!("SELECT dt, id, v FROM {DB}.{table}$lake{filter}");
        failures.same(&what, &want, query(&service, &sql).await);
    }
    failures.finish(TEST, Some(&run))
}

/// silt shows `table.datalake.enabled` to clients as the custom property
/// `silt.datalake.enabled` (catalog::client_view), so the connector reads a lake-enabled table
/// as a plain Fluss table: streaming reads from the hot store, batch LIMIT and point queries.
/// A full batch read is refused by the connector itself (it reads only lake-enabled tables or
/// point queries in batch mode); the test checks it says so, since the README sends such reads
/// to silt's SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flink_sql_reads_lake_enabled_partitioned_tables() -> Result<()> {
    const TEST: &str = "flink_sql_reads_lake_enabled_partitioned_tables";
    let (dir, server, data, events, users) = start_partitioned().await?;
    let write = session(DB) + &write_lake_tables(&data);
    let Some(written) = run_flink(
        TEST,
        &server,
        &dir.path().join("write"),
        vec![("write", write)],
    )
    .await?
    else {
        return Ok(());
    };
    if !written.script_ok("write") {
        return Failures(written.failures()).finish(TEST, Some(&written));
    }
    // Part of what Flink reads is then in the lake, as it is under `silt up`.
    tier(dir.path(), &server, 2).await?;

    let streaming = session(DB);
    let batch = session(DB) + "SET 'execution.runtime-mode' = 'batch';\n";
    let read = |head: &str, rows: Option<usize>, sql: String| {
        let bound = rows.map(|n| format!("-- @rows {n}\n")).unwrap_or_default();
        format!("{head}-- @name read\n{bound}{sql};\n")
    };
    let select = |table: &str, filter: &str| format!("SELECT dt, id, v FROM {table}{filter}");
    let on = format!(" WHERE dt = '{DAY}'");
    let scripts = vec![
        (
            "events_streaming",
            read(&streaming, Some(events.len()), select("events", "")),
        ),
        (
            "events_streaming_day",
            read(
                &streaming,
                Some(on_day(&events, DAY).len()),
                select("events", &on),
            ),
        ),
        // A primary-key read is a changelog whose length depends on where it starts (the lake
        // snapshot, or the log): at least the image, then the settle time shows the rest.
        (
            "users_streaming",
            read(&streaming, Some(users.len()), select("users", "")),
        ),
        (
            "events_batch_limit",
            read(&batch, None, select("events", "") + " LIMIT 1000"),
        ),
        (
            "users_batch_point",
            read(
                &batch,
                None,
                select("users", &format!(" WHERE dt = '{}' AND id = 1", DAYS[0])),
            ),
        ),
        (
            "events_batch_full",
            read(&batch, None, select("events", "")),
        ),
        (
            "users_delete",
            format!("{batch}DELETE FROM users WHERE dt = '{DAY}' AND id = 3;\n"),
        ),
    ];
    let Some(run) = run_flink(TEST, &server, &dir.path().join("read"), scripts).await? else {
        return Ok(());
    };
    let mut failures = Failures::default();
    failures.same_reads(
        &run,
        ("events", "users"),
        (&events, &users),
        [
            ("events_streaming", "read"),
            ("events_streaming_day", "read"),
            ("events_batch_limit", "read"),
            ("users_batch_point", "read"),
        ],
    );
    failures.same(
        "streaming SELECT of users (the changelog's image)",
        &users,
        run.changelog_image("users_streaming", "read"),
    );
    failures.check(
        "a full batch read is refused by the connector, naming batch mode",
        match run
            .statement("events_batch_full", "read")
            .map(|s| &s.outcome)
        {
            Ok(Outcome::Failed(error)) if error.contains("batch execution mode") => Ok(()),
            Ok(other) => Err(anyhow::anyhow!(
                "expected the connector's batch-mode refusal, got {other:?}"
            )),
            Err(e) => Err(e),
        },
    );
    if run.script_ok("users_delete") {
        let service = lake_query_service(&server, dir.path());
        failures.same(
            &format!("users (hot and lake) after DELETE ({DAY}, 3)"),
            &data.user_rows(&[(DAY, 3)]),
            query(&service, &format!("SELECT dt, id, v FROM {DB}.users")).await,
        );
    } else {
        failures.0.extend(
            run.failures()
                .into_iter()
                .filter(|f| f.starts_with("users_delete.sql")),
        );
    }
    failures.finish(TEST, Some(&run))
}
