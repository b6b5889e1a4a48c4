//! `silt up --bootstrap` against a real Apache Fluss 0.9.1 cluster (one node, from
//! `integration-tests/fluss-real/`), as a user runs it: the `silt` binary with its shipped
//! configuration starts no hot store of its own, tiers the cluster's tables marked
//! `silt.datalake.enabled=true` into Delta, and answers `silt verify`, `silt sql` (`db.t` and
//! `db.t$lake`), `/v1/tables` and its status lines about them. Skips, saying so, without Java,
//! Maven or the Fluss jars.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, TablePath};
use fluss::row::GenericRow;

use silt_testkit::process::SiltProcess;
use silt_testkit::real_fluss::{RealFluss, Started};
use silt_testkit::tables::{self, Table};
use silt_testkit::{http, silt_bin, wait};

const DB: &str = "ext";
const EVENTS: i64 = 12_000;
const USERS: i64 = 200;

/// Fluss settings that move all but the newest log segment to `remote.data.dir` at once.
/// (With the tables' `table.log.tiered.local-segments: 1`.)
const REMOTE_SEGMENTS: &str = "log.segment.file-size: 8kb\n\
    remote.log.task-interval-duration: 1s";

/// The local log files of `ext.events` under the tablet server's `<data>/ext` (a primary-key
/// table keeps its changelog's segments locally as well).
fn local_events(database_dir: &Path) -> Vec<String> {
    std::fs::read_dir(database_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("events-"))
        .flat_map(|e| files_under(&e.path()))
        .collect()
}

/// Appends event `i` (`id = i, v = "v<i>"`).
fn append_event(appender: &fluss::client::AppendWriter, i: i64) -> Result<()> {
    let v = format!("v{i}");
    let mut row = GenericRow::new(2);
    row.set_field(0, i);
    row.set_field(1, v.as_str());
    appender.append(&row)?;
    Ok(())
}

/// Upserts (or deletes) key `id` with `score`.
fn write_score(
    upserter: &fluss::client::UpsertWriter,
    id: i64,
    score: i64,
    delete: bool,
) -> Result<()> {
    let mut row = GenericRow::new(2);
    row.set_field(0, id);
    row.set_field(1, score);
    tables::upsert_or_delete(upserter, &row, delete)
}

/// Every file below `dir`, by name.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// `ext.events` (log, 2 buckets) and `ext.users` (`id, score` keyed by `id`, 2 buckets), marked
/// for silt the way a Fluss cluster without a lake format accepts.
async fn create_tables(connection: &FlussConnection) -> Result<()> {
    tables::events(DB)
        .buckets(2)
        .lake_on_fluss("1s")
        .property("table.log.tiered.local-segments", "1")
        .create_if_missing(connection)
        .await?;
    Table::primary_key(DB, "users", &["id"])
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .buckets(2)
        .lake_on_fluss("1s")
        .property("table.log.tiered.local-segments", "1")
        .create_if_missing(connection)
        .await?;
    Ok(())
}

/// Appends `ids` to `ext.events`, and for each upserts (or every seventh, deletes) a user;
/// answers the users' latest scores after all of it.
async fn write(
    connection: &FlussConnection,
    ids: std::ops::Range<i64>,
    users: &mut BTreeMap<i64, i64>,
) -> Result<()> {
    let events = connection.get_table(&TablePath::new(DB, "events")).await?;
    let keyed = connection.get_table(&TablePath::new(DB, "users")).await?;
    let appender = events.new_append()?.create_writer()?;
    let upserter = keyed.new_upsert()?.create_writer()?;
    for i in ids {
        append_event(&appender, i)?;
        let (id, delete) = (i % USERS, i % 7 == 0);
        write_score(&upserter, id, i, delete)?;
        if delete {
            users.remove(&id);
        } else {
            users.insert(id, i);
        }
        // Many small batches: the log rolls segments, which the cluster moves to remote storage.
        if i % 200 == 199 {
            appender.flush().await?;
            upserter.flush().await?;
        }
    }
    appender.flush().await?;
    upserter.flush().await?;
    Ok(())
}

/// `silt <args>` with the test's data dir and the cluster as `hot_tier.bootstrap` (the
/// configuration a user of `silt up --bootstrap` would give every command).
fn silt(data_dir: &Path, cluster: &str, args: &[&str]) -> Result<(i32, String, String)> {
    silt_with(data_dir, cluster, &[], args)
}

/// [`silt`] with more environment (e.g. a shared `SILT_LAKE__ROOT`).
fn silt_with(
    data_dir: &Path,
    cluster: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> Result<(i32, String, String)> {
    let out = Command::new(silt_bin!())
        .args(["--data-dir", &data_dir.to_string_lossy()])
        .args(args)
        .env("SILT_HOT_TIER__BOOTSTRAP", cluster)
        .envs(env.iter().copied())
        .env_remove("SILT_LOG")
        .output()
        .with_context(|| format!("running silt {args:?}"))?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The CSV rows of `silt sql` (header dropped), each as its numbers.
fn sql_rows(data_dir: &Path, cluster: &str, rest: &str, sql: &str) -> Result<Vec<Vec<i64>>> {
    let (code, stdout, stderr) = silt(
        data_dir,
        cluster,
        &[
            "sql",
            "--url",
            rest,
            "--format",
            "csv",
            "--deadline",
            "60s",
            sql,
        ],
    )?;
    ensure!(code == 0, "silt sql {sql:?}: exit {code}: {stderr}");
    stdout
        .lines()
        .skip(1)
        .map(|line| {
            line.split(',')
                .map(|cell| {
                    cell.parse()
                        .with_context(|| format!("{cell:?} in {line:?}"))
                })
                .collect()
        })
        .collect()
}

/// The tests of this file share the real cluster's fixed ports: one at a time.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts `test`'s cluster with `start` once no other test of this file holds one (the guard
/// keeps it so until dropped, after the cluster), or says SKIPPED for `test` and answers None.
async fn cluster_for(
    test: &str,
    start: impl FnOnce() -> Result<Started>,
) -> Result<Option<(tokio::sync::MutexGuard<'static, ()>, RealFluss)>> {
    let one_at_a_time = CLUSTER.lock().await;
    match start()? {
        Started::Running(cluster) => Ok(Some((one_at_a_time, cluster))),
        Started::Skipped(reason) => {
            eprintln!("SKIPPED: {test}: {reason}");
            Ok(None)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silt_up_bootstrap_tiers_and_queries_a_real_fluss_cluster() -> Result<()> {
    // Small segments, moved to the remote dir within a second, one kept locally: the oldest
    // rows are only in remote segments by the time silt reads them.
    let Some((_one_at_a_time, cluster)) = cluster_for(
        "silt_up_bootstrap_tiers_and_queries_a_real_fluss_cluster",
        || RealFluss::start_with_conf("up-bootstrap", REMOTE_SEGMENTS),
    )
    .await?
    else {
        return Ok(());
    };
    let connection = silt_testkit::hotstore::connect_to(&cluster.bootstrap).await?;
    create_tables(&connection).await?;
    let mut users = BTreeMap::new();
    write(&connection, 0..EVENTS / 2, &mut users).await?;
    let (remote, local) = (
        cluster.remote_data_dir(),
        cluster.tablet_data_dir().join(DB),
    );
    wait::until(
        "the first log segments only in the remote dir",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let files = files_under(&remote);
            // The first segment (offset 0) of ext.events moved: only in the remote dir.
            let first = "00000000000000000000.log";
            let moved = files.iter().any(|f| f == first)
                && !local_events(&local).iter().any(|f| f == first);
            Ok(if moved {
                wait::Look::Done(())
            } else {
                wait::Look::NotYet(format!(
                    "remote {files:?}, local {:?}",
                    local_events(&local)
                ))
            })
        },
    )
    .await?;

    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("silt");
    let silt_up = SiltProcess::start_as_shipped(
        silt_bin!(),
        &data_dir,
        &["--bootstrap", &cluster.bootstrap, "--status-every-s", "1"],
    )?;
    ensure!(
        silt_up.bootstrap == cluster.bootstrap,
        "silt up names the cluster as its hot tier: {}",
        silt_up.stdout.last(5)
    );
    // Rows written while silt runs are tiered too.
    write(&connection, EVENTS / 2..EVENTS, &mut users).await?;

    let timeout = Duration::from_secs(120);
    silt_up
        .wait_lake_rows(&format!("{DB}.events"), EVENTS, timeout)
        .await
        .with_context(|| silt_up.log.last(30))?;
    wait::until(
        "ext.users caught up",
        timeout,
        Duration::from_millis(250),
        || async {
            let (_, body) = http::get(&silt_up.rest, "/v1/tables", None)?;
            let tables: serde_json::Value = serde_json::from_str(&body)?;
            let users = tables
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["table"] == "ext.users")
                .cloned();
            Ok(match users {
                Some(t) if t["lag_offsets"] == 0 && t["delta_version"].is_u64() => {
                    wait::Look::Done(())
                }
                other => wait::Look::NotYet(format!("{other:?}")),
            })
        },
    )
    .await?;

    // Nothing in the status says a problem, and the hot store figures are the cluster's.
    let (_, body) = http::get(&silt_up.rest, "/v1/tables", None)?;
    let tables: serde_json::Value = serde_json::from_str(&body)?;
    for table in tables.as_array().context("/v1/tables is an array")? {
        ensure!(table["problem"].is_null(), "a problem: {table}");
        ensure!(table["job_state"] == "running", "{table}");
    }

    // verify, reading the cluster through hot_tier.bootstrap.
    let (code, stdout, stderr) = silt(&data_dir, &cluster.bootstrap, &["verify", "--all"])?;
    ensure!(
        code == 0,
        "silt verify --all: exit {code}\n{stdout}\n{stderr}"
    );
    for table in ["ext.events", "ext.users"] {
        ensure!(
            stdout.contains(&format!("verify {table}: MATCH")),
            "{table} matches: {stdout}"
        );
    }

    // db.t (the lake and the cluster's tail) and db.t$lake equal what was written.
    let expected_events: Vec<Vec<i64>> = (0..EVENTS).map(|i| vec![i]).collect();
    let expected_users: Vec<Vec<i64>> = users.iter().map(|(id, s)| vec![*id, *s]).collect();
    for events in ["ext.events", "ext.events$lake"] {
        let rows = sql_rows(
            &data_dir,
            &cluster.bootstrap,
            &silt_up.rest,
            &format!("SELECT id FROM {events} ORDER BY id"),
        )?;
        ensure!(rows == expected_events, "{events}: {} rows", rows.len());
    }
    for keyed in ["ext.users", "ext.users$lake"] {
        let rows = sql_rows(
            &data_dir,
            &cluster.bootstrap,
            &silt_up.rest,
            &format!("SELECT id, score FROM {keyed} ORDER BY id"),
        )?;
        ensure!(
            rows == expected_users,
            "{keyed}: {rows:?}\nexpected {expected_users:?}"
        );
    }
    // The status lines name the tables, with no problem line.
    let printed = silt_up.stdout.last(40);
    ensure!(
        printed.contains("ext.events") && !printed.contains("  ! "),
        "{printed}"
    );
    Ok(())
}

/// Six tables of the cluster, tiered by two `silt up --bootstrap` workers sharing leases.
const SHARED: [&str; 6] = ["log0", "log1", "log2", "pk0", "pk1", "pk2"];
const LEASE_MS: u64 = 6_000;

/// Writes `rounds` rounds of 100 rows to each shared table (`w.logN`: ids; `w.pkN`: 30 keys
/// upserted, some deleted), from `from`; records the expected state in `expected`.
async fn write_shared(
    connection: &FlussConnection,
    from: i64,
    rounds: i64,
    expected: &mut BTreeMap<&'static str, BTreeMap<i64, i64>>,
) -> Result<()> {
    for name in SHARED {
        let table = connection.get_table(&TablePath::new("w", name)).await?;
        let state = expected.entry(name).or_default();
        if name.starts_with("log") {
            let appender = table.new_append()?.create_writer()?;
            for i in from..from + rounds * 100 {
                append_event(&appender, i)?;
                state.insert(i, i);
            }
            appender.flush().await?;
        } else {
            let upserter = table.new_upsert()?.create_writer()?;
            for i in from..from + rounds * 100 {
                let (id, delete) = (i % 30, i % 11 == 0);
                write_score(&upserter, id, i, delete)?;
                if delete {
                    state.remove(&id);
                } else {
                    state.insert(id, i);
                }
            }
            upserter.flush().await?;
        }
    }
    Ok(())
}

/// The tables a worker's `/v1/tables` lists with a running job, and whether each has caught up.
fn tiered_by(worker: &SiltProcess) -> Result<BTreeMap<String, bool>> {
    let (code, body) = http::get(&worker.rest, "/v1/tables", None)?;
    ensure!(code == 200, "GET /v1/tables: {code} {body}");
    let tables: serde_json::Value = serde_json::from_str(&body)?;
    Ok(tables
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["job_state"] == "running")
        .map(|t| {
            let name = t["table"].as_str().unwrap_or_default().to_string();
            (name, t["lag_offsets"] == 0 && t["delta_version"].is_u64())
        })
        .collect())
}

fn signal(worker: &SiltProcess, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([signal, &worker.child.id().to_string()])
        .status()?;
    ensure!(status.success(), "kill {signal}: {status}");
    Ok(())
}

/// Waits until every shared table is tiered by exactly one of `workers` and has caught up;
/// answers which worker (index) tiers which table. `min_each`: the tables each worker must
/// tier (its share, once the workers have split them).
async fn wait_all_tiered(
    workers: &[&SiltProcess],
    min_each: usize,
    timeout: Duration,
) -> Result<BTreeMap<String, usize>> {
    wait::until(
        "every shared table tiered once and caught up",
        timeout,
        Duration::from_millis(250),
        || async {
            let mut by = BTreeMap::new();
            let mut doubled = Vec::new();
            let mut behind = Vec::new();
            for (i, worker) in workers.iter().enumerate() {
                for (table, caught_up) in tiered_by(worker)? {
                    if by.insert(table.clone(), i).is_some() {
                        doubled.push(table.clone());
                    }
                    if !caught_up {
                        behind.push(table);
                    }
                }
            }
            let least = (0..workers.len())
                .map(|w| by.values().filter(|v| **v == w).count())
                .min()
                .unwrap_or(0);
            let split = least >= min_each;
            Ok(
                if by.len() == SHARED.len() && doubled.is_empty() && behind.is_empty() && split {
                    wait::Look::Done(by)
                } else {
                    wait::Look::NotYet(format!(
                        "tiered by {by:?}, by two: {doubled:?}, behind: {behind:?}"
                    ))
                },
            )
        },
    )
    .await
}

/// Creates the six shared tables in the hot tier behind `connection` (`lake` marks a table
/// lake-enabled the way that tier takes it) and writes their first rounds.
async fn create_shared(
    connection: &FlussConnection,
    lake: impl Fn(Table) -> Table,
) -> Result<BTreeMap<&'static str, BTreeMap<i64, i64>>> {
    for name in SHARED {
        let table = if name.starts_with("log") {
            tables::text_log("w", name)
        } else {
            Table::primary_key("w", name, &["id"])
                .column("id", DataTypes::bigint())
                .column("score", DataTypes::bigint())
        };
        lake(table.buckets(1)).create_if_missing(connection).await?;
    }
    let mut expected = BTreeMap::new();
    write_shared(connection, 0, 2, &mut expected).await?;
    Ok(expected)
}

/// Two workers tier the shared tables of the hot tier at `bootstrap`, split evenly. `paused`
/// is paused (SIGSTOP) past its lease while writes go on: `other` must tier its tables within
/// the lease and a poll or two. Woken (SIGCONT), `paused` must learn so, stop and log it; then
/// verify says MATCH and every lake holds exactly what was written. `before_pause` runs once
/// the workers have split the tables, with which worker (0: `paused`) tiers which table.
async fn hand_over<F, Fut>(
    data_dir: &Path,
    bootstrap: &str,
    lake: &str,
    connection: &FlussConnection,
    mut expected: BTreeMap<&'static str, BTreeMap<i64, i64>>,
    [paused, other]: [&SiltProcess; 2],
    before_pause: F,
) -> Result<()>
where
    F: FnOnce(BTreeMap<String, usize>) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let timeout = Duration::from_secs(120);
    let by = wait_all_tiered(&[paused, other], SHARED.len() / 2, timeout).await?;
    let of_paused = by.values().filter(|w| **w == 0).count();
    ensure!(of_paused == SHARED.len() / 2, "an even split: {by:?}");
    before_pause(by).await?;

    // Pause; keep writing. The other worker takes the paused one's tables within the lease
    // and a pass or two.
    signal(paused, "-STOP")?;
    let paused_at = std::time::Instant::now();
    write_shared(connection, 200, 1, &mut expected).await?;
    let by = wait_all_tiered(&[other], SHARED.len(), timeout).await?;
    let handed_over = paused_at.elapsed();
    ensure!(by.len() == SHARED.len(), "{by:?}");
    ensure!(
        handed_over < Duration::from_millis(LEASE_MS) + Duration::from_secs(20),
        "hand-over took {handed_over:?}"
    );
    eprintln!(
        "the other worker tiered the paused one's {of_paused} tables {handed_over:?} after the pause"
    );

    // Wake it: it finds its leases taken and stops its jobs; nothing is tiered twice.
    signal(paused, "-CONT")?;
    write_shared(connection, 300, 1, &mut expected).await?;
    wait::until(
        "the woken worker gave its tables up",
        timeout,
        Duration::from_millis(250),
        || async {
            let mine = tiered_by(paused)?;
            Ok(if mine.is_empty() {
                wait::Look::Done(())
            } else {
                wait::Look::NotYet(format!("{mine:?}"))
            })
        },
    )
    .await?;
    ensure!(
        paused
            .log
            .last(200)
            .contains("another worker holds this table now"),
        "the woken worker logs what it gave up: {}",
        paused.log.last(40)
    );
    wait_all_tiered(&[paused, other], 0, timeout).await?;

    // Exactly once: verify, and each lake holds exactly what was written.
    let (code, stdout, stderr) = silt_with(
        data_dir,
        bootstrap,
        &[("SILT_LAKE__ROOT", lake)],
        &["verify", "--all"],
    )?;
    ensure!(
        code == 0,
        "silt verify --all: exit {code}\n{stdout}\n{stderr}"
    );
    for name in SHARED {
        let columns = if name.starts_with("log") {
            "id, id AS again"
        } else {
            "id, score"
        };
        let rows = sql_rows(
            data_dir,
            bootstrap,
            &paused.rest,
            &format!("SELECT {columns} FROM w.{name}$lake ORDER BY id"),
        )?;
        let want: Vec<Vec<i64>> = expected[name].iter().map(|(k, v)| vec![*k, *v]).collect();
        ensure!(
            rows == want,
            "w.{name}$lake: {} rows, want {}",
            rows.len(),
            want.len()
        );
    }
    Ok(())
}

/// Two `silt up --bootstrap` workers share six tables of a real Fluss cluster: each table has
/// one tierer; a worker paused past its lease loses its tables to the other, and woken, gives
/// them up; the lakes hold every row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_share_a_clusters_tables_and_a_paused_one_hands_them_over() -> Result<()> {
    let Some((_one_at_a_time, cluster)) = cluster_for(
        "two_workers_share_a_clusters_tables_and_a_paused_one_hands_them_over",
        || RealFluss::start("up-workers"),
    )
    .await?
    else {
        return Ok(());
    };
    let connection = silt_testkit::hotstore::connect_to(&cluster.bootstrap).await?;
    let expected = create_shared(&connection, |t| t.lake_on_fluss("1s")).await?;
    let dir = tempfile::tempdir()?;
    let lake = dir.path().join("lake").to_string_lossy().into_owned();
    let lease = LEASE_MS.to_string();
    let env = [
        ("SILT_LAKE__ROOT", lake.as_str()),
        ("SILT_TIERING__LEASE_MS", lease.as_str()),
    ];
    let start = |name: &str| {
        SiltProcess::start_with(
            silt_bin!(),
            &dir.path().join(name),
            &["--bootstrap", &cluster.bootstrap],
            &env,
        )
    };
    let (a, b) = (start("a")?, start("b")?);
    hand_over(
        dir.path(),
        &cluster.bootstrap,
        &lake,
        &connection,
        expected,
        [&a, &b],
        |_| async { Ok(()) },
    )
    .await
}

/// The same with a silt hot store as the tier: `silt up` (hot store and a tiering worker) and
/// `silt up --bootstrap` at it share the tables; the second is paused and woken. The hot store
/// cuts its changelogs by a short TTL only up to what the lake holds, and learns that of the
/// tables the other worker tiers by reading their lakes: before the pause, the log start of
/// each such table has moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silt_hot_store_shares_tiering_with_a_bootstrap_worker_that_pauses() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let lake = dir.path().join("lake").to_string_lossy().into_owned();
    let lease = LEASE_MS.to_string();
    let shared = [
        ("SILT_LAKE__ROOT", lake.as_str()),
        ("SILT_TIERING__LEASE_MS", lease.as_str()),
    ];
    // 1 KiB segments cut after 1 s; a query's deadline (which holds retention back) 10 s.
    let hot_env = [
        shared[0],
        shared[1],
        ("SILT_HOTSTORE__SEGMENT_BYTES_MAX", "1024"),
        ("SILT_HOTSTORE__LOG_TTL_MS", "1000"),
        ("SILT_HOTSTORE__RETENTION_CHECK_INTERVAL_MS", "1000"),
        ("SILT_QUERY__DEADLINE_DEFAULT_MS", "10000"),
        ("SILT_QUERY__DEADLINE_MAX_MS", "10000"),
    ];
    let hot = SiltProcess::start_with(silt_bin!(), &dir.path().join("hot"), &[], &hot_env)?;
    let connection = silt_testkit::hotstore::connect_to(&hot.bootstrap).await?;
    let mut expected = create_shared(&connection, |t| t.lake("1s")).await?;
    // A second batch per table rolls its first segment (over 1 KiB), which the TTL may cut.
    write_shared(&connection, 400, 1, &mut expected).await?;
    let worker = SiltProcess::start_with(
        silt_bin!(),
        &dir.path().join("worker"),
        &["--bootstrap", &hot.bootstrap],
        &shared,
    )?;
    let hot_ref = &hot;
    hand_over(
        dir.path(),
        &hot.bootstrap,
        &lake,
        &connection,
        expected,
        [&worker, &hot],
        |by| async move {
            let of_worker: Vec<String> = by
                .into_iter()
                .filter(|(_, w)| *w == 0)
                .map(|(table, _)| table)
                .collect();
            wait::until(
                "the hot store cut the changelog of every table the other worker tiers",
                Duration::from_secs(90),
                Duration::from_millis(500),
                || async {
                    let (code, body) = http::get(&hot_ref.rest, "/v1/hot", None)?;
                    ensure!(code == 200, "GET /v1/hot: {code} {body}");
                    let buckets: serde_json::Value = serde_json::from_str(&body)?;
                    let cut: Vec<&str> = buckets
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|b| b["log_start_offset"].as_i64() > Some(0))
                        .filter_map(|b| b["table"].as_str())
                        .collect();
                    Ok(if of_worker.iter().all(|t| cut.contains(&t.as_str())) {
                        wait::Look::Done(())
                    } else {
                        wait::Look::NotYet(format!(
                            "the worker tiers {of_worker:?}; log starts: {body}"
                        ))
                    })
                },
            )
            .await
        },
    )
    .await
}

/// Opt-in (`SILTTEST_FLUSS_CLUSTER=1`; a `SILT_` name would be read as configuration): five JVMs and a few minutes.
const CLUSTER_OPT_IN: &str = "SILTTEST_FLUSS_CLUSTER";
const CLUSTER_LOG_ROWS: i64 = 200_000;
const CLUSTER_KEYS: i64 = 50_000;
const CLUSTER_CHUNK: i64 = 5_000;
/// A killed tablet server's ZooKeeper session ends (and its buckets get new leaders) 6 s after
/// it dies, not Fluss's default 60 s.
const CLUSTER_CONF: &str = "zookeeper.client.session-timeout: 6s";

/// Writes `ids` in chunks (appends to `c.events`, upserts of key `id % CLUSTER_KEYS` to
/// `c.users`), each chunk flushed with acks=all; a chunk whose flush fails is not acknowledged
/// (its writers are made again). Runs `at_chunk(i)` before chunk `i`. Answers the acknowledged
/// event ids.
async fn write_through_failover(
    bootstrap: &str,
    ids: std::ops::Range<i64>,
    mut at_chunk: impl FnMut(i64) -> Result<()>,
) -> Result<(std::collections::BTreeSet<i64>, usize)> {
    let mut acked = std::collections::BTreeSet::new();
    let mut failed = 0;
    let mut chunk_start = ids.start;
    // After a failed chunk the next one gets a new connection: fluss-rs 1.0's writers keep
    // sending to a leader that is gone (its metadata is not refreshed on a refused connection).
    let mut connection = None;
    while chunk_start < ids.end {
        at_chunk((chunk_start - ids.start) / CLUSTER_CHUNK)?;
        let chunk = chunk_start..(chunk_start + CLUSTER_CHUNK).min(ids.end);
        chunk_start = chunk.end;
        let conn = match connection.take() {
            Some(conn) => conn,
            None => silt_testkit::hotstore::connect_to(bootstrap).await?,
        };
        let written = write_chunk(&conn, chunk.clone());
        match tokio::time::timeout(Duration::from_secs(60), written).await {
            Ok(Ok(())) => {
                acked.extend(chunk);
                connection = Some(conn);
            }
            other => {
                eprintln!("chunk {chunk:?} not acknowledged: {other:?}");
                failed += 1;
            }
        }
    }
    Ok((acked, failed))
}

/// One chunk: appends to `c.events`, upserts of key `id % CLUSTER_KEYS` to `c.users`, flushed.
async fn write_chunk(connection: &FlussConnection, chunk: std::ops::Range<i64>) -> Result<()> {
    let events = connection.get_table(&TablePath::new("c", "events")).await?;
    let users = connection.get_table(&TablePath::new("c", "users")).await?;
    let appender = events.new_append()?.create_writer()?;
    let upserter = users.new_upsert()?.create_writer()?;
    for i in chunk {
        append_event(&appender, i)?;
        write_score(&upserter, i % CLUSTER_KEYS, i, false)?;
    }
    appender.flush().await?;
    upserter.flush().await?;
    Ok(())
}

/// Three tablet servers, replication factor 3: while a client writes 200,000 rows to a log
/// table and upserts 50,000 keys with acks=all, the leader of bucket 0 is killed (SIGKILL) and
/// comes back; every acknowledged row reaches the lake exactly once, verify matches, and `db.t`
/// equals the lake.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_tablet_servers_lose_a_leader_and_the_lake_keeps_every_row() -> Result<()> {
    let name = "three_tablet_servers_lose_a_leader_and_the_lake_keeps_every_row";
    if std::env::var(CLUSTER_OPT_IN).as_deref() != Ok("1") {
        eprintln!("SKIPPED: {name}: set {CLUSTER_OPT_IN}=1 to run it (five JVMs, a few minutes)");
        return Ok(());
    }
    let start = || RealFluss::start_cluster("up-cluster", 3, CLUSTER_CONF);
    let Some((_one_at_a_time, cluster)) = cluster_for(name, start).await? else {
        return Ok(());
    };
    eprintln!("three tablet servers up in {:?}", cluster.start_duration);
    let connection = silt_testkit::hotstore::connect_to(&cluster.bootstrap).await?;
    tables::events("c")
        .buckets(3)
        .lake_on_fluss("1s")
        .create_if_missing(&connection)
        .await?;
    Table::primary_key("c", "users", &["id"])
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .buckets(3)
        .lake_on_fluss("1s")
        .create_if_missing(&connection)
        .await?;
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("silt");
    let silt_up = SiltProcess::start_with(
        silt_bin!(),
        &data_dir,
        &["--bootstrap", &cluster.bootstrap],
        &[],
    )?;

    let events = connection.get_table(&TablePath::new("c", "events")).await?;
    let table_id = events.get_table_info().get_table_id();
    let leader = connection
        .get_metadata()
        .get_cluster()
        .leader_for(&fluss::metadata::TableBucket::new(table_id, 0))
        .map(|node| node.id())
        .context("the leader of bucket 0")?;
    let chunks = CLUSTER_LOG_ROWS / CLUSTER_CHUNK;
    let started = std::time::Instant::now();
    let (acked, failed) =
        write_through_failover(&cluster.bootstrap, 0..CLUSTER_LOG_ROWS, |chunk| {
            if chunk == chunks * 2 / 5 {
                eprintln!("killing tablet server {leader}, the leader of c.events bucket 0");
                cluster.kill_tablet(leader as usize)?;
            }
            if chunk == chunks / 2 {
                eprintln!("starting tablet server {leader} again");
                cluster.start_tablet(leader as usize)?;
            }
            Ok(())
        })
        .await?;
    eprintln!(
        "wrote {} acknowledged rows ({failed} chunks not acknowledged) in {:?}",
        acked.len(),
        started.elapsed()
    );

    let timeout = Duration::from_secs(300);
    wait::until(
        "both tables caught up",
        timeout,
        Duration::from_millis(500),
        || async {
            let tiered = tiered_by(&silt_up)?;
            Ok(if tiered.len() == 2 && tiered.values().all(|c| *c) {
                wait::Look::Done(())
            } else {
                wait::Look::NotYet(format!("{tiered:?}"))
            })
        },
    )
    .await
    .with_context(|| silt_up.log.last(40))?;
    let (code, stdout, stderr) = silt(&data_dir, &cluster.bootstrap, &["verify", "--all"])?;
    ensure!(
        code == 0,
        "silt verify --all: exit {code}\n{stdout}\n{stderr}"
    );
    let counts = sql_rows(
        &data_dir,
        &cluster.bootstrap,
        &silt_up.rest,
        "SELECT count(*), count(DISTINCT id) FROM c.events$lake",
    )?;
    let ids = sql_rows(
        &data_dir,
        &cluster.bootstrap,
        &silt_up.rest,
        "SELECT id FROM c.events$lake",
    )?;
    let in_lake: std::collections::BTreeSet<i64> = ids.into_iter().map(|r| r[0]).collect();
    ensure!(
        counts[0][0] == counts[0][1],
        "a row twice in the lake: {counts:?}"
    );
    let missing: Vec<&i64> = acked.difference(&in_lake).take(10).collect();
    ensure!(
        missing.is_empty(),
        "acknowledged rows missing from the lake: {missing:?}..."
    );
    for sql in [
        "SELECT id, score FROM c.users ORDER BY id",
        "SELECT id, score FROM c.users$lake ORDER BY id",
    ] {
        let rows = sql_rows(&data_dir, &cluster.bootstrap, &silt_up.rest, sql)?;
        ensure!(
            rows.len() as i64 == CLUSTER_KEYS,
            "{sql}: {} keys",
            rows.len()
        );
    }
    eprintln!(
        "lake: {} events ({} acknowledged), {CLUSTER_KEYS} keys; verify MATCH",
        in_lake.len(),
        acked.len()
    );
    Ok(())
}
