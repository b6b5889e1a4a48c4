//! Hot retention through the official fluss-rs client: a log past its `table.log.ttl` loses
//! whole old segments, and answers as Fluss does (ListOffsets(earliest) moves, a fetch below
//! the log start is out of range); a lake-enabled table keeps what the lake has not covered
//! whatever its TTL; a primary-key table keeps its state (lookups, restarts) when its
//! changelog expires, and a full read of it (its latest kv snapshot, then the changelog from
//! the snapshot's log offset) still sees every key once, at its latest image.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::{DataTypes, TablePath};
use fluss::row::DataGetters as _;
use fluss::rpc::message::OffsetSpec;
use silt_connectors::changelog::BucketKey;
use silt_connectors::fluss::{FlussSource, FlussSourceConfig, LogGapHook, StartPosition};
use silt_engine::{RestoredState, Source as _, TaskContext};
use silt_hotstore::{BucketRetention, ServerConfig, ServerHandle};
use silt_testkit::hotstore::{self, DEADLINE};
use silt_testkit::rows;
use silt_testkit::scan::Read;
use silt_testkit::tables::{Table, append_events, text_log};

/// 1 KiB segments, and retention that runs only when a test asks.
fn retention_on_demand(config: &mut ServerConfig) {
    config.log.segment_bytes_max = 1024;
    config.retention_check_interval_ms = 3_600_000;
    config.retention_lake_lag_ms = 0;
}

/// A hot store over `dir` with [`retention_on_demand`].
async fn start(dir: &std::path::Path) -> Result<ServerHandle> {
    hotstore::start_with(dir, retention_on_demand).await
}

/// Ten flushed batches of ten events (ids `from..from + 100`), so the log rolls many segments.
async fn append_batches(connection: &FlussConnection, path: &TablePath, from: i64) -> Result<()> {
    for chunk in 0..10 {
        let start = from + chunk * 10;
        append_events(connection, path, start..start + 10, |id| {
            format!("event number {id}")
        })
        .await?;
    }
    Ok(())
}

/// Reading bucket 0 from the earliest offset gives exactly ids `from..to` (ids are offsets).
async fn reads_exactly_from(
    connection: &FlussConnection,
    path: &TablePath,
    from: i64,
    to: i64,
) -> Result<()> {
    let ids = scan_ids(connection, path, EARLIEST_OFFSET, (to - from) as usize).await?;
    ensure!(ids == (from..to).collect::<Vec<_>>(), "{ids:?}");
    Ok(())
}

/// The one subtask of a source opened by hand.
fn task(job: &str) -> TaskContext {
    TaskContext {
        job_name: job.into(),
        vertex_name: "source".into(),
        subtask_index: 0,
        parallelism: 1,
        attempt: 0,
    }
}

fn bucket0(report: &[BucketRetention], table: &str) -> BucketRetention {
    report
        .iter()
        .find(|b| b.table == table && b.bucket == 0)
        .cloned()
        .unwrap_or_else(|| panic!("no retention report of {table}: {report:?}"))
}

/// Every id a scanner reads from `offset` of bucket 0 until it reached `end` ids, or its error.
async fn scan_ids(
    connection: &FlussConnection,
    path: &TablePath,
    offset: i64,
    count: usize,
) -> Result<Vec<i64>> {
    let table = connection.get_table(path).await?;
    let scanner = table.new_scan().create_log_scanner()?;
    scanner.subscribe(0, offset).await?;
    Read::new(&format!("{path}"), count)
        .records(&scanner, |record| Ok(record.row().get_long(0)?))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_past_its_ttl_loses_whole_old_segments_and_answers_as_fluss() -> Result<()> {
    let (dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let table = text_log("ret", "old")
        .buckets(1)
        .property("table.log.ttl", "1 s");
    table.create(&connection).await?;
    let path = table.path.clone();
    append_batches(&connection, &path, 0).await?;
    let kept = bucket0(&server.apply_retention().await, "ret.old");
    ensure!(
        kept.log_start_offset == 0 && kept.segments > 3,
        "inside the TTL nothing goes: {kept:?}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    append_batches(&connection, &path, 100).await?;
    let cut = bucket0(&server.apply_retention().await, "ret.old");
    ensure!(
        cut.log_start_offset > 0 && cut.log_start_offset <= 100 && cut.segments_deleted > 0,
        "the expired segments go, the young ones stay: {cut:?}"
    );
    ensure!(!cut.held_by_tiering, "{cut:?}");
    let admin = connection.get_admin()?;
    let earliest = admin
        .list_offsets(&path, &[0], OffsetSpec::Earliest)
        .await?;
    ensure!(
        earliest.get(&0) == Some(&cut.log_start_offset),
        "earliest {earliest:?} after {cut:?}"
    );
    // From the earliest offset: exactly the rows still held, the young ones all there.
    reads_exactly_from(&connection, &path, cut.log_start_offset, 200).await?;
    // Below the log start: out of range, as Fluss answers it.
    let below = scan_ids(&connection, &path, 0, 1).await;
    let message = format!(
        "{:#}",
        below.expect_err("a fetch below the log start must fail")
    );
    ensure!(message.contains("out of range"), "{message}");
    // A source resuming below the log start refuses to open, naming the bucket and both
    // offsets, and tells its owner (a tiering job stops restarting on it).
    let told = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let mut config = FlussSourceConfig::new(server.local_addr().to_string(), "ret", "old");
    config.start = StartPosition::Offsets([(BucketKey::table(0), 5)].into_iter().collect());
    let seen = told.clone();
    config.on_log_gap = Some(LogGapHook(std::sync::Arc::new(move |m: &str| {
        *seen.lock().unwrap() = Some(m.to_string())
    })));
    let refused = FlussSource::new(config)
        .open(&task("gap"), RestoredState::default())
        .await
        .expect_err("a read resuming below the log start must be refused")
        .to_string();
    let log_start = cut.log_start_offset;
    ensure!(
        refused.contains(&format!(
            "bucket 0: resumes at offset 5, the changelog starts at {log_start}"
        )) && refused.contains("table.log.ttl"),
        "{refused}"
    );
    ensure!(
        told.lock()
            .unwrap()
            .as_deref()
            .is_some_and(|m| refused.contains(m)),
        "the hook was told: {:?}",
        told.lock().unwrap()
    );
    // And after a restart the log starts where retention left it.
    server.shutdown().await?;
    let server = start(dir.path()).await?;
    let connection = hotstore::connect(&server).await?;
    let earliest = connection
        .get_admin()?
        .list_offsets(&path, &[0], OffsetSpec::Earliest)
        .await?;
    ensure!(
        earliest.get(&0) == Some(&cut.log_start_offset),
        "after a restart: {earliest:?}"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lake_enabled_table_keeps_what_the_lake_has_not_covered() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let table = text_log("ret", "tiered")
        .buckets(1)
        .lake("1h")
        .property("table.log.ttl", "1 s");
    table.create(&connection).await?;
    let path = table.path.clone();
    append_batches(&connection, &path, 0).await?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    append_batches(&connection, &path, 100).await?;
    let held = bucket0(&server.apply_retention().await, "ret.tiered");
    ensure!(
        held.log_start_offset == 0 && held.held_by_tiering && held.segments_deleted == 0,
        "nothing tiered, nothing deleted, whatever the TTL: {held:?}"
    );
    // The lake covers the first 35 offsets: retention may cut up to there, not further, and
    // only from its next run on (a query that pinned the previous lake version still reads
    // its tail from the previous offsets).
    server.set_lake_snapshot(server.table_id("ret", "tiered")?, 1, &[(None, 0, 35)])?;
    let first = bucket0(&server.apply_retention().await, "ret.tiered");
    ensure!(
        first.log_start_offset == 0,
        "the new lake offset waits one run: {first:?}"
    );
    let cut = bucket0(&server.apply_retention().await, "ret.tiered");
    ensure!(
        cut.log_start_offset > 0 && cut.log_start_offset <= 35 && cut.held_by_tiering,
        "cut up to the lake's offset and no further: {cut:?}"
    );
    reads_exactly_from(&connection, &path, cut.log_start_offset, 200).await?;
    // A job reading the table from `earliest` would start at the log start and skip the rows
    // only the lake holds: its source refuses, naming the way to read them.
    let mut source = FlussSource::new(FlussSourceConfig::new(
        server.local_addr().to_string(),
        "ret",
        "tiered",
    ));
    let refused = source
        .open(&task("earliest"), RestoredState::default())
        .await
        .expect_err("start: earliest past the log start of a lake-enabled table must be refused")
        .to_string();
    ensure!(
        refused.contains("start: earliest cannot read every row")
            && refused.contains("start: lake"),
        "{refused}"
    );
    server.shutdown().await?;
    Ok(())
}

/// Regression (issue 33, item 1): the lake-offset registry was written by table *name*, so a
/// dropped table's tiering job that committed late (after a create under the same name, before
/// discovery cancelled it) recorded its old offsets as the new table's, and the new table's hot
/// retention then cut acknowledged rows no lake held. The registry is written by table id now:
/// the dropped id's update is refused and the new table keeps every row its lake lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tables_late_lake_commit_does_not_release_the_new_tables_rows() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let server = std::sync::Arc::new(server);
    let table = text_log("ret", "again")
        .buckets(1)
        .lake("1h")
        .property("table.log.ttl", "1 s");
    table.create(&connection).await?;
    let dropped_id = server.table_id("ret", "again")?;
    let admin = connection.get_admin()?;
    admin.drop_table(&table.path, false).await?;
    table.create(&connection).await?;
    let new_id = server.table_id("ret", "again")?;
    ensure!(new_id != dropped_id, "a new table, a new id");
    append_batches(&connection, &table.path, 0).await?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    append_batches(&connection, &table.path, 100).await?;
    // The dropped table's job commits late, with offsets past the new table's TTL cut.
    let late = silt_jobs::tiering::hotstore_registry(server.clone());
    let first_bucket = silt_connectors::changelog::BucketKey {
        partition: None,
        bucket: 0,
    };
    let refused = late(dropped_id, 3, &[(first_bucket, 150)])
        .expect_err("a dropped table id's lake offsets must be refused");
    ensure!(
        refused
            .to_string()
            .contains(&format!("table id {dropped_id}")),
        "{refused:#}"
    );
    for _ in 0..2 {
        let held = bucket0(&server.apply_retention().await, "ret.again");
        ensure!(
            held.log_start_offset == 0 && held.held_by_tiering,
            "no lake holds the new table's rows, so retention keeps them all: {held:?}"
        );
    }
    reads_exactly_from(&connection, &table.path, 0, 200).await?;
    Ok(())
}

/// Turns `table.datalake.enabled` of `path` on or off.
async fn set_lake(connection: &FlussConnection, path: &TablePath, on: bool) -> Result<()> {
    use fluss::metadata::{AlterConfig, AlterConfigOpType, AlterTableChanges};
    let changes = AlterTableChanges {
        config_changes: vec![AlterConfig::new(
            "table.datalake.enabled",
            Some(on.to_string()),
            AlterConfigOpType::Set,
        )],
        ..AlterTableChanges::default()
    };
    Ok(connection
        .get_admin()?
        .alter_table(path, false, changes)
        .await?)
}

/// Regression (issue 33, item 5): with `table.datalake.enabled` turned off, retention cut past
/// the lake's offsets; turned on again, tiering resumed below the log start and failed out of
/// range at every restart, `db.t` failed, and retention never cut the table again. The rule
/// now: turning tiering off pauses the lake, which stays the table's history, and retention
/// keeps holding every offset after its end, so turning it on again resumes with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_lake_holds_retention_so_tiering_resumes_without_a_gap() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let table = text_log("ret", "paused")
        .buckets(1)
        .lake("1h")
        .property("table.log.ttl", "1 s");
    table.create(&connection).await?;
    let path = table.path.clone();
    append_batches(&connection, &path, 0).await?;
    server.set_lake_snapshot(server.table_id("ret", "paused")?, 1, &[(None, 0, 35)])?;
    set_lake(&connection, &path, false).await?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    append_batches(&connection, &path, 100).await?;
    for _ in 0..3 {
        let held = bucket0(&server.apply_retention().await, "ret.paused");
        ensure!(
            held.log_start_offset <= 35 && held.held_by_tiering,
            "the paused lake ends at 35: retention must not cut past it: {held:?}"
        );
    }
    set_lake(&connection, &path, true).await?;
    let held = bucket0(&server.apply_retention().await, "ret.paused");
    ensure!(held.log_start_offset <= 35, "{held:?}");
    reads_exactly_from(&connection, &path, held.log_start_offset, 200).await?;
    Ok(())
}

/// A primary-key lake is built from the whole changelog: turning it on for a table whose
/// changelog retention already cut (no lake held it) would build a lake missing every key
/// whose last change was cut. It is refused, naming the bucket and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_lake_cannot_start_after_its_changelog_was_cut() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let users = expiring_pk_table("late_lake");
    users.create(&connection).await?;
    let table = connection.get_table(&users.path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for round in 0..8 {
        for id in 0..20 {
            writer.upsert(&rows::user(id, Some("a user"), Some(round)))?;
        }
        writer.flush().await?;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    writer.upsert(&rows::user(0, Some("again"), Some(9)))?;
    writer.flush().await?;
    let cut = bucket0(&server.apply_retention().await, "ret.late_lake");
    ensure!(cut.log_start_offset > 0, "{cut:?}");
    let refused = set_lake(&connection, &users.path, true)
        .await
        .expect_err("a lake from a cut changelog must be refused");
    let message = format!("{refused:#}");
    ensure!(
        message.contains("changelog starts at offset") && message.contains("copy the table's rows"),
        "{message}"
    );
    let info = connection.get_admin()?.get_table_info(&users.path).await?;
    ensure!(
        !silt_connectors::fluss::is_lake_enabled(&info),
        "the table stays as it is"
    );
    Ok(())
}

/// `ret.<name>`: `id INT, name STRING, score BIGINT` keyed by `id`, one bucket, a 1 s TTL.
fn expiring_pk_table(name: &str) -> Table {
    Table::primary_key("ret", name, &["id"])
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .column("score", DataTypes::bigint())
        .buckets(1)
        .property("table.log.ttl", "1 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_table_keeps_its_state_when_its_changelog_expires() -> Result<()> {
    let (dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let users = expiring_pk_table("users");
    users.create(&connection).await?;
    let path = users.path.clone();
    let upsert_round = |round: i64| {
        let connection = &connection;
        let path = path.clone();
        async move {
            let table = connection.get_table(&path).await?;
            let writer = table.new_upsert()?.create_writer()?;
            for id in 0..20 {
                let name = format!("user {id} of round {round}");
                writer.upsert(&rows::user(id, Some(&name), Some(round)))?;
            }
            writer.flush().await?;
            anyhow::Ok(())
        }
    };
    for round in 0..8 {
        upsert_round(round).await?;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    upsert_round(8).await?;
    let cut = bucket0(&server.apply_retention().await, "ret.users");
    ensure!(
        cut.log_start_offset > 0 && cut.segments_deleted > 0,
        "{cut:?}"
    );
    let check_state = |connection: FlussConnection| {
        let path = path.clone();
        async move {
            let table = connection.get_table(&path).await?;
            let mut lookuper = table.new_lookup()?.create_lookuper()?;
            for id in 0..20 {
                let user = rows::lookup_user(&mut lookuper, id).await?;
                ensure!(
                    user.as_ref().and_then(|u| u.score) == Some(8),
                    "user {id} after its changelog expired: {user:?}"
                );
            }
            anyhow::Ok(())
        }
    };
    check_state(connection).await?;
    server.shutdown().await?;
    let server = start(dir.path()).await?;
    check_state(hotstore::connect(&server).await?).await?;
    server.shutdown().await?;
    Ok(())
}

/// Flink's default primary-key source asks for the latest kv snapshots and reads each bucket's
/// snapshot, then its changelog from the snapshot's log offset. Retention takes a snapshot
/// before it cuts a primary-key changelog and cuts no further than it, so after the cut that
/// read is still the whole table. Before kv snapshots this read was refused
/// (KV_SNAPSHOT_NOT_EXIST, "silt keeps none"), since reading the cut changelog from its start
/// would have missed the rows last written before the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_of_a_primary_key_table_whose_changelog_expired_starts_from_its_snapshot()
-> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let users = expiring_pk_table("profiles");
    users.create(&connection).await?;
    let path = users.path.clone();
    let table = connection.get_table(&path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    let mut expected = std::collections::BTreeMap::new();
    for round in 0..8 {
        for id in 0..20 {
            let name = format!("user {id} of round {round}");
            writer.upsert(&rows::user(id, Some(&name), Some(round)))?;
            expected.insert(
                id,
                rows::read_user(&rows::user(id, Some(&name), Some(round)))?,
            );
        }
        writer.flush().await?;
    }
    let whole = silt_testkit::kv_snapshots::latest(&connection, &path).await?;
    ensure!(
        whole.iter().all(|(_, snapshot)| snapshot.is_none()),
        "before the first snapshot run and the cut: none, read the changelog from 0: {whole:?}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    writer.upsert(&rows::user(0, Some("after"), Some(9)))?;
    writer.flush().await?;
    expected.insert(0, rows::read_user(&rows::user(0, Some("after"), Some(9)))?);
    let cut = bucket0(&server.apply_retention().await, "ret.profiles");
    ensure!(cut.log_start_offset > 0, "{cut:?}");
    let latest = silt_testkit::kv_snapshots::latest(&connection, &path).await?;
    let snapshot = latest[0]
        .1
        .as_ref()
        .context("retention took a snapshot before it cut")?;
    ensure!(
        cut.log_start_offset <= snapshot.log_offset,
        "the cut ({}) stays at or below the snapshot's log offset ({})",
        cut.log_start_offset,
        snapshot.log_offset
    );
    let read = silt_testkit::kv_snapshots::full_read_users(&connection, &path).await?;
    ensure!(
        read == expected,
        "snapshot, then the changelog after it: {read:?}"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_fluss_cannot_read_is_refused_at_create() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(retention_on_demand).await?;
    let error = text_log("ret", "bad")
        .property("table.log.ttl", "soon")
        .create(&connection)
        .await
        .expect_err("an unreadable TTL must be refused");
    let message = format!("{error:#}");
    ensure!(
        message.contains("table.log.ttl") && message.contains("not a duration"),
        "{message}"
    );
    server.shutdown().await?;
    Ok(())
}

/// Every batch a source emits until it ends or idles `idle_max` polls in a row.
async fn drain(
    source: &mut FlussSource,
    idle_max: usize,
) -> Result<Vec<arrow::array::RecordBatch>> {
    let mut batches = Vec::new();
    let mut idle = 0;
    while idle < idle_max {
        match source.poll_next().await? {
            silt_engine::SourcePoll::Batch(batch) => {
                idle = 0;
                batches.push(batch);
            }
            silt_engine::SourcePoll::End => break,
            silt_engine::SourcePoll::Idle(_) | silt_engine::SourcePoll::BacklogRead => idle += 1,
        }
    }
    Ok(batches)
}

fn ids_of(batches: &[arrow::array::RecordBatch]) -> Vec<i64> {
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .expect("id is a bigint")
                .values()
                .to_vec()
        })
        .collect();
    ids.sort();
    ids
}

/// Issue 15 (union read): a source reading a lake-enabled table from its beginning reads the
/// lake first, then the changelog after it. A checkpoint taken while it was still in the lake
/// restores to the same lake version and skips what it had emitted: every row exactly once
/// across the restore, including rows retention already dropped from the hot store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_read_restored_mid_lake_emits_every_row_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = std::sync::Arc::new(
        hotstore::start_with(&dir.path().join("hotstore"), |config| {
            config.log.segment_bytes_max = 1024;
            config.retention_check_interval_ms = 3_600_000;
            config.log_ttl = Some(Duration::from_millis(500));
            config.retention_lake_lag_ms = 0;
        })
        .await?,
    );
    let connection = hotstore::connect(&server).await?;
    let table = text_log("ret", "union").buckets(2).lake("200ms");
    table.create(&connection).await?;
    let path = table.path.clone();
    append_batches(&connection, &path, 0).await?;
    let tiering = silt_testkit::tiering::service(dir.path(), &server);
    silt_testkit::tiering::wait_caught_up(
        &tiering,
        silt_testkit::tiering::Driver::Wait,
        1,
        DEADLINE,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Two runs: the lake offsets retention may use are the previous run's.
    server.apply_retention().await;
    let report = server.apply_retention().await;
    let dropped: i64 = report
        .iter()
        .filter(|b| b.table == "ret.union")
        .map(|b| b.log_start_offset)
        .sum();
    ensure!(dropped > 0, "retention dropped tiered segments: {report:?}");
    // A hot tail the lake does not hold.
    append_batches(&connection, &path, 100).await?;

    let lake = silt_connectors::fluss::LakeStart {
        table_uri: dir
            .path()
            .join("lake/ret/union")
            .to_string_lossy()
            .to_string(),
        storage_options: Default::default(),
        table_id: connection
            .get_admin()?
            .get_table_info(&path)
            .await?
            .get_table_id()
            .to_string(),
    };
    let config = || {
        let mut config = FlussSourceConfig::new(server.local_addr().to_string(), "ret", "union");
        config.start = silt_connectors::fluss::StartPosition::LakeThenLog(lake.clone());
        config
    };
    let ctx = TaskContext {
        job_name: "union".into(),
        vertex_name: "source".into(),
        subtask_index: 0,
        parallelism: 1,
        attempt: 0,
    };
    let mut first = FlussSource::new(config());
    first.open(&ctx, RestoredState::default()).await?;
    let before = match first.poll_next().await? {
        silt_engine::SourcePoll::Batch(batch) => batch,
        other => anyhow::bail!("the first poll of a union read gives lake rows, got {other:?}"),
    };
    ensure!(
        before.num_rows() > 0 && before.num_rows() < 200,
        "{}",
        before.num_rows()
    );
    let state = first.snapshot(1).await?;
    ensure!(
        state.starts_with(b"SLU1"),
        "a checkpoint in the lake phase says so"
    );
    drop(first);
    let mut restored = FlussSource::new(config());
    restored
        .open(
            &ctx,
            RestoredState {
                checkpoint_id: Some(1),
                subtask_states: vec![Some(state)],
                subtask_index: 0,
            },
        )
        .await?;
    let mut batches = vec![before];
    batches.extend(drain(&mut restored, 20).await?);
    ensure!(
        ids_of(&batches) == (0..200).collect::<Vec<_>>(),
        "every row once across the restore: {:?}",
        ids_of(&batches)
    );
    Ok(())
}
