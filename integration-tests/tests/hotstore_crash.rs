//! Crash recovery of the hotstore alone: a process running only silt's hotstore is SIGKILLed
//! during sustained writes through fluss-rs (a log table and a PK table) while two scanners
//! read concurrently, and restarted over the same data directory, three times (seeded kill
//! moments). Afterwards:
//! - every acknowledged row is there, once, and offsets are contiguous per bucket;
//! - every row a concurrent scanner saw is still there at the same bucket and offset with the
//!   same content (a scanner never saw anything beyond the durable high watermark);
//! - a lookup of every key equals the last image per key of the replayed changelog, and that
//!   image is the outcome of the key's last acknowledged write or of a later one.
//!
//! The hotstore process is this test binary itself: started with `SILTTEST_HOTSTORE_CHILD_DIR`
//! set, the test runs a server over that directory, prints its address and waits to be killed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use arrow::array::{Int64Array, StringArray};
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::TablePath;
use fluss::row::{DataGetters, GenericRow};
use fluss::rpc::message::OffsetSpec;
use silt_testkit::changelog;
use silt_testkit::hotstore;
use silt_testkit::process::{ChildGuard, spawn_watching_stdout};
use silt_testkit::scan::Read;
use silt_testkit::tables;

const CHILD_ENV: &str = "SILTTEST_HOTSTORE_CHILD_DIR";
const LISTENING: &str = "SILTTEST_HOTSTORE_LISTENING ";
const TEST_NAME: &str = "hotstore_survives_sigkill_during_writes_and_scans";
const DB: &str = "crash";
const EVENT_BUCKETS: i32 = 3;
const USER_BUCKETS: i32 = 2;
const KEYS: i64 = 150;
const ROUNDS: u64 = 3;
const SEED: u64 = 0x0c4a_5eed;

/// A fixed-seed LCG, so kill moments and key choices repeat run to run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// What the writer issued and what the server acknowledged.
#[derive(Default)]
struct Acked {
    /// Event ids whose flush returned Ok.
    events: BTreeSet<i64>,
    /// Every user op in issue order: (key, Some(score) for an upsert, None for a delete).
    ops: Vec<(i64, Option<i64>)>,
    /// Ops `[0, ops_acked)` were acknowledged.
    ops_acked: usize,
}

/// What the concurrent scanners saw: (bucket, offset) -> content.
#[derive(Default)]
struct Seen {
    events: BTreeMap<(i32, i64), i64>,
    users: BTreeMap<(i32, i64), (String, i64, Option<i64>)>,
}

/// The hot store re-run of this test binary; killed when dropped.
struct HotstoreProcess {
    _child: ChildGuard,
    bootstrap: String,
}

fn start_hotstore_process(data_dir: &Path) -> Result<HotstoreProcess> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, data_dir);
    let (child, rx, _log) =
        spawn_watching_stdout(&mut command, "the hotstore process", |line, tx| {
            // libtest prints the test's name on the same line first.
            if let Some(at) = line.find(LISTENING) {
                let _ = tx.send(line[at + LISTENING.len()..].trim().to_string());
            }
        })?;
    // On an error `child` is dropped, which kills it.
    let bootstrap = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| anyhow!("the hotstore process did not report its address within 30 s"))?;
    Ok(HotstoreProcess {
        _child: child,
        bootstrap,
    })
}

/// The child's side: only the hotstore, until SIGKILL.
async fn run_hotstore_child(data_dir: &str) -> Result<()> {
    let server = hotstore::start(Path::new(data_dir)).await?;
    println!("{LISTENING}{}", server.local_addr());
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

async fn connect(bootstrap: &str) -> Result<FlussConnection> {
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    config.writer_acks = "all".into();
    config.lookup_batch_timeout_ms = 1;
    config.scanner_log_fetch_wait_max_time_ms = 50;
    config.writer_buffer_wait_timeout_ms = 2_000;
    Ok(FlussConnection::new(config).await?)
}

async fn create_tables(connection: &FlussConnection) -> Result<()> {
    tables::events(DB)
        .buckets(EVENT_BUCKETS)
        .create(connection)
        .await?;
    tables::scores(DB)
        .buckets(USER_BUCKETS)
        .create(connection)
        .await?;
    Ok(())
}

fn event_text(id: i64) -> String {
    format!("event {id} payload")
}

/// Writes events and user ops in flushed rounds until an error or `stop`; records what was
/// acknowledged after each successful flush of both writers.
async fn write(
    bootstrap: String,
    acked: Arc<Mutex<Acked>>,
    stop: Arc<AtomicBool>,
    mut next_event: i64,
    mut rng: Lcg,
) -> Result<()> {
    let connection = connect(&bootstrap).await?;
    let events = connection.get_table(&TablePath::new(DB, "events")).await?;
    let users = connection.get_table(&TablePath::new(DB, "users")).await?;
    let appender = events.new_append()?.create_writer()?;
    let upserter = users.new_upsert()?.create_writer()?;
    while !stop.load(Ordering::SeqCst) {
        let first = next_event;
        for id in first..first + 100 {
            let mut row = GenericRow::new(2);
            row.set_field(0, id);
            row.set_field(1, event_text(id));
            drop(appender.append(&row)?);
        }
        next_event += 100;
        for _ in 0..20 {
            let key = (rng.next() % KEYS as u64) as i64;
            let delete = rng.next() % 7 == 0;
            // Recorded before it is sent: an op the server made durable must be known even
            // when the writer dies before the flush.
            let score = {
                let mut acked = acked.lock().unwrap();
                let score = (!delete).then_some(acked.ops.len() as i64);
                acked.ops.push((key, score));
                score
            };
            let mut row = GenericRow::new(2);
            row.set_field(0, key);
            match score {
                Some(score) => {
                    row.set_field(1, score);
                    drop(upserter.upsert(&row)?);
                }
                None => drop(upserter.delete(&row)?),
            }
        }
        appender.flush().await?;
        upserter.flush().await?;
        let mut acked = acked.lock().unwrap();
        acked.events.extend(first..first + 100);
        acked.ops_acked = acked.ops.len();
    }
    Ok(())
}

/// Scans both tables from the earliest offset until an error or `stop`, recording every row
/// with its bucket and offset.
async fn scan(bootstrap: String, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) -> Result<()> {
    let connection = connect(&bootstrap).await?;
    let events = connection.get_table(&TablePath::new(DB, "events")).await?;
    let users = connection.get_table(&TablePath::new(DB, "users")).await?;
    let event_scanner = events.new_scan().create_record_batch_log_scanner()?;
    for bucket in 0..EVENT_BUCKETS {
        event_scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
    }
    let user_scanner = users.new_scan().create_log_scanner()?;
    for bucket in 0..USER_BUCKETS {
        user_scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
    }
    while !stop.load(Ordering::SeqCst) {
        let batches = event_scanner.poll(Duration::from_millis(100)).await?;
        let records = user_scanner.poll(Duration::from_millis(100)).await?;
        let mut seen = seen.lock().unwrap();
        for batch in batches {
            for (bucket_offset, id) in event_rows(&batch)? {
                seen.events.insert(bucket_offset, id);
            }
        }
        for (bucket, records) in records.into_records_by_buckets() {
            for record in records {
                seen.users
                    .insert((bucket.bucket_id(), record.offset()), user_change(&record)?);
            }
        }
    }
    Ok(())
}

fn event_rows(batch: &fluss::record::ScanBatch) -> Result<Vec<((i32, i64), i64)>> {
    let bucket = batch.bucket().bucket_id();
    let rows = batch.batch();
    let ids = rows
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .context("id column")?;
    let texts = rows
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .context("v column")?;
    let mut out = Vec::with_capacity(rows.num_rows());
    for i in 0..rows.num_rows() {
        let id = ids.value(i);
        ensure!(
            texts.value(i) == event_text(id),
            "event {id} has text {:?}",
            texts.value(i)
        );
        out.push(((bucket, batch.base_offset() + i as i64), id));
    }
    Ok(out)
}

fn user_change(record: &fluss::record::ScanRecord) -> Result<(String, i64, Option<i64>)> {
    let row = record.row();
    let score = if row.is_null_at(1)? {
        None
    } else {
        Some(row.get_long(1)?)
    };
    Ok((
        record.change_type().short_string().to_string(),
        row.get_long(0)?,
        score,
    ))
}

/// One round: write and scan, SIGKILL the hotstore after `kill_after`, and collect.
async fn crash_round(
    process: HotstoreProcess,
    acked: &Arc<Mutex<Acked>>,
    seen: &Arc<Mutex<Seen>>,
    next_event: i64,
    rng: Lcg,
    kill_after: Duration,
) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    // The clients run on threads of their own: once the server is gone, fluss-rs may block a
    // thread (its writer waits for buffer memory on a condvar), which must not stall this
    // test's runtime. They cannot reach the restarted server (it listens on a new port), so
    // threads still blocked after the kill are left behind.
    let writer = client_thread("writer", {
        let (bootstrap, acked, stop) = (process.bootstrap.clone(), acked.clone(), stop.clone());
        move || write(bootstrap, acked, stop, next_event, rng)
    });
    let scanner = client_thread("scanner", {
        let (bootstrap, seen, stop) = (process.bootstrap.clone(), seen.clone(), stop.clone());
        move || scan(bootstrap, seen, stop)
    });
    tokio::time::sleep(kill_after).await;
    drop(process); // SIGKILL
    stop.store(true, Ordering::SeqCst);
    for (name, done) in [("writer", writer), ("scanner", scanner)] {
        let outcome =
            tokio::task::spawn_blocking(move || done.recv_timeout(Duration::from_secs(3))).await?;
        match outcome {
            // Ok(Ok) cannot happen before the kill, and errors after it are expected.
            Ok(result) => eprintln!("  {name} ended: {:?}", result.err().map(|e| e.to_string())),
            Err(_) => eprintln!("  {name} still blocked 3 s after the kill; left behind"),
        }
    }
    Ok(())
}

fn client_thread<F, Fut>(name: &str, task: F) -> std::sync::mpsc::Receiver<Result<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<()>>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(task()));
            let _ = tx.send(result);
        })
        .expect("spawn a client thread");
    rx
}

/// Every row of the events table up to the high watermark, checking offsets are contiguous.
async fn read_events(connection: &FlussConnection) -> Result<BTreeMap<(i32, i64), i64>> {
    let path = TablePath::new(DB, "events");
    let ids: Vec<i32> = (0..EVENT_BUCKETS).collect();
    let hw = connection
        .get_admin()?
        .list_offsets(&path, &ids, OffsetSpec::Latest)
        .await?;
    let total: i64 = hw.values().sum();
    let table = connection.get_table(&path).await?;
    let scanner = table.new_scan().create_record_batch_log_scanner()?;
    for bucket in &ids {
        scanner.subscribe(*bucket, EARLIEST_OFFSET).await?;
    }
    let read = Read::new("events", usize::try_from(total)?)
        .poll(Duration::from_millis(200))
        .batches(&scanner, event_rows)
        .await?;
    let mut rows = BTreeMap::new();
    for (bucket_offset, id) in read {
        ensure!(
            rows.insert(bucket_offset, id).is_none(),
            "offset {bucket_offset:?} read twice"
        );
    }
    for bucket in ids {
        ensure!(
            offsets_in(&rows, bucket) == (0..hw[&bucket]).collect::<Vec<_>>(),
            "bucket {bucket} offsets are not 0..{}",
            hw[&bucket]
        );
    }
    Ok(rows)
}

/// The offsets of `bucket` among the keys of `rows`, in order.
fn offsets_in<T>(rows: &BTreeMap<(i32, i64), T>, bucket: i32) -> Vec<i64> {
    rows.range((bucket, i64::MIN)..=(bucket, i64::MAX))
        .map(|((_, offset), _)| *offset)
        .collect()
}

/// The users changelog up to the high watermark, checking offsets are contiguous.
async fn read_changelog(
    connection: &FlussConnection,
) -> Result<BTreeMap<(i32, i64), (String, i64, Option<i64>)>> {
    let path = TablePath::new(DB, "users");
    let changes = changelog::read(
        connection,
        &path,
        USER_BUCKETS,
        hotstore::DEADLINE,
        user_change,
    )
    .await?;
    let changes: BTreeMap<_, _> = changes
        .into_iter()
        .map(|change| ((change.bucket, change.offset), change.row))
        .collect();
    for bucket in 0..USER_BUCKETS {
        let offsets = offsets_in(&changes, bucket);
        ensure!(
            offsets == (0..offsets.len() as i64).collect::<Vec<_>>(),
            "bucket {bucket} changelog offsets are not 0..{}",
            offsets.len()
        );
    }
    Ok(changes)
}

async fn check(connection: &FlussConnection, acked: &Acked, seen: &Seen) -> Result<()> {
    // Log table.
    let events = read_events(connection).await?;
    let mut present = BTreeSet::new();
    for id in events.values() {
        ensure!(present.insert(*id), "event {id} is in the log twice");
    }
    let lost: Vec<_> = acked.events.difference(&present).take(10).collect();
    ensure!(
        lost.is_empty(),
        "acknowledged events lost (first 10): {lost:?}"
    );
    for (bucket_offset, id) in &seen.events {
        ensure!(
            events.get(bucket_offset) == Some(id),
            "a scanner saw event {id} at {bucket_offset:?}, after the restart there is {:?}",
            events.get(bucket_offset)
        );
    }

    // PK table: the changelog, what the scanners saw of it, and the kv state.
    let changelog = read_changelog(connection).await?;
    for (bucket_offset, change) in &seen.users {
        ensure!(
            changelog.get(bucket_offset) == Some(change),
            "a scanner saw {change:?} at {bucket_offset:?}, after the restart there is {:?}",
            changelog.get(bucket_offset)
        );
    }
    let mut replayed: HashMap<i64, Option<i64>> = HashMap::new();
    for (change_type, key, score) in changelog.values() {
        match change_type.as_str() {
            "+I" | "+U" => {
                replayed.insert(*key, *score);
            }
            "-D" => {
                replayed.remove(key);
            }
            "-U" => {}
            other => bail!("unexpected change type {other}"),
        }
    }
    let table = connection.get_table(&TablePath::new(DB, "users")).await?;
    let mut lookuper = table.new_lookup()?.create_lookuper()?;
    for key in 0..KEYS {
        let mut pk = GenericRow::new(1);
        pk.set_field(0, key);
        let found = match lookuper.lookup(&pk).await?.get_single_row()? {
            Some(row) => Some(if row.is_null_at(1)? {
                None
            } else {
                Some(row.get_long(1)?)
            }),
            None => None,
        };
        let expected = replayed.get(&key).copied();
        ensure!(
            found == expected,
            "lookup({key}) is {found:?}, the replayed changelog says {expected:?}"
        );
        // The state is the outcome of the key's last acknowledged op or of a later one.
        let ops: Vec<(usize, Option<i64>)> = acked
            .ops
            .iter()
            .enumerate()
            .filter(|(_, (k, _))| *k == key)
            .map(|(i, (_, score))| (i, *score))
            .collect();
        let last_acked = ops.iter().rposition(|(i, _)| *i < acked.ops_acked);
        let allowed: Vec<Option<i64>> = match last_acked {
            Some(at) => ops[at..].iter().map(|(_, s)| *s).collect(),
            None => std::iter::once(None)
                .chain(ops.iter().map(|(_, s)| *s))
                .collect(),
        };
        let state = expected.flatten();
        ensure!(
            allowed.contains(&state),
            "key {key} is {state:?}; allowed after its last acknowledged write: {allowed:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hotstore_survives_sigkill_during_writes_and_scans() -> Result<()> {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        return run_hotstore_child(&dir).await;
    }
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("hotstore");
    let mut process = start_hotstore_process(&data_dir)?;
    create_tables(&connect(&process.bootstrap).await?).await?;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut rng = Lcg(SEED);
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(800 + rng.next() % 1500);
        let next_event = round as i64 * 10_000_000;
        crash_round(
            process,
            &acked,
            &seen,
            next_event,
            Lcg(SEED + round),
            kill_after,
        )
        .await?;
        process = start_hotstore_process(&data_dir)?;
        let (acked, seen) = (acked.lock().unwrap(), seen.lock().unwrap());
        eprintln!(
            "round {round}: killed after {kill_after:?}; {} events and {} of {} user ops acknowledged so far, scanners saw {} events and {} changes",
            acked.events.len(),
            acked.ops_acked,
            acked.ops.len(),
            seen.events.len(),
            seen.users.len()
        );
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    ensure!(
        !acked.events.is_empty() && acked.ops_acked > 0,
        "no write was acknowledged before the kills; the test measured nothing"
    );
    ensure!(
        !seen.events.is_empty() && !seen.users.is_empty(),
        "the scanners saw nothing before the kills"
    );
    let connection = connect(&process.bootstrap).await?;
    check(&connection, &acked, &seen).await?;
    Ok(())
}
