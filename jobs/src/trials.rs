//! `silt bench trials`: seeded fault trials of the whole promise.
//!
//! For each seed: a fresh data directory, `silt up` as a child process, a random set of log and
//! primary-key tables (1-4 buckets, lake-enabled, short freshness), and a random workload
//! through the fluss-rs client (appends, upserts, partial updates, deletes; batch sizes from 1
//! to 400) in phases. In each phase one fault drawn from the seed is injected while the
//! workload runs:
//!
//! - `kill`: SIGKILL of the silt process (restarted in the next phase);
//! - `second-job`: a second tiering job on the same table and lake (in this process, with its
//!   own checkpoints): Delta's txn/conflict check must fence one of them, the lake stays intact;
//! - `store-transient`: the lake's object store fails the next few operations
//!   (`SILTTEST_LAKE_FAULTS`, see `lake_faults.rs`);
//! - `store-down`: the lake's store fails everything for a while; meanwhile the lake at its
//!   current version must still be a consistent prefix of the changelog (no partial commit is
//!   visible), and tiering must resume once the store is back;
//! - `disk-full`: the data directory is a small tmpfs, filled up to the last byte: writes must
//!   be refused (not acknowledged), silt must stay up, and nothing acknowledged may be lost. Skipped with a
//!   printed reason where tmpfs cannot be mounted.
//!
//! After the phases: faults cleared, silt running, then every table is verified
//! ([`crate::verify`]: wait for the lake, compare as multisets) and the acknowledged writes are
//! checked against the hot store: a log row acknowledged but absent is lost, a row present
//! twice is duplicated; a primary-key whose final image is older than its last acknowledged
//! write (or resurrected after an acknowledged delete) is lost.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, Int8Array, Int64Array, RecordBatch};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use fluss::rpc::message::OffsetSpec;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::ChangeType;

use crate::tiering::{DATALAKE_ENABLED, DATALAKE_FRESHNESS, TieringConfig, TieringService};
use crate::verify::{Verdict, VerifyOptions, read_changelog, verify_table};

const DB: &str = "trial";
const PK_KEYS: i64 = 150;

#[derive(Debug, Clone)]
pub struct TrialsOptions {
    pub seeds: u64,
    pub first_seed: u64,
    /// How long the lake may take to catch up at the end of a trial.
    pub catch_up: Duration,
    /// Keep each trial's directory (and silt's logs) when it fails.
    pub keep_failed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    None,
    Kill,
    SecondJob,
    StoreTransient,
    StoreDown,
    DiskFull,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "kill",
            Fault::SecondJob => "second-job",
            Fault::StoreTransient => "store-transient",
            Fault::StoreDown => "store-down",
            Fault::DiskFull => "disk-full",
        }
    }
}

/// What one trial found.
#[derive(Debug, Default)]
struct Outcome {
    faults: BTreeMap<&'static str, u64>,
    rows_written: u64,
    rows_lost: u64,
    rows_duplicated: u64,
    verify_failures: u64,
    notes: Vec<String>,
}

#[derive(Debug, Clone)]
struct TableSpec {
    name: String,
    primary_key: bool,
    buckets: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PkOp {
    Upsert,
    Partial,
    Delete,
}

/// What the client wrote and what the server acknowledged.
#[derive(Debug, Default)]
struct Model {
    next_id: i64,
    next_seq: i64,
    /// Log tables: acknowledged ids.
    log_acked: HashMap<String, Vec<i64>>,
    /// PK tables, per key: the last acknowledged op, and every op attempted (acknowledged or
    /// not) in order.
    pk_acked: HashMap<String, HashMap<i64, (i64, PkOp)>>,
    pk_attempted: HashMap<String, HashMap<i64, Vec<(i64, PkOp)>>>,
    rows_acked: u64,
}

/// A running `silt up`.
struct Silt {
    child: Child,
    bootstrap: String,
}

impl Silt {
    fn start(data_dir: &Path, log: &Path, control: &Path) -> Result<Silt> {
        let exe = std::env::current_exe().context("locating the silt binary")?;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut child = Command::new(exe)
            .args([
                "--data-dir",
                &data_dir.to_string_lossy(),
                "--log",
                "warn,silt_jobs=info,silt_connectors=info",
                "up",
                "--status-every-s",
                "3600",
            ])
            .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
            .env("SILT_REST__LISTEN", "127.0.0.1:0")
            .env(crate::lake_faults::ENV, control)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .context("starting silt up")?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(tail) = line.strip_prefix("hotstore: Fluss wire protocol on ") {
                    let _ = tx.send(tail.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(bootstrap) => Ok(Silt { child, bootstrap }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "silt up did not report its address within 30 s (log: {})",
                    log.display()
                )
            }
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Silt {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tmpfs under the trial directory, unmounted on drop.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, bytes: u64) -> Result<SmallDisk, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            path: path.to_path_buf(),
        })
    }

    /// Fills the disk to the last byte; returns the filler's path.
    fn fill(&self) -> Result<PathBuf> {
        use std::io::Write as _;
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler)?;
        let chunk = vec![0u8; 1 << 20];
        let mut size = chunk.len();
        while size > 0 {
            match f.write(&chunk[..size]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => size /= 2,
            }
        }
        let _ = f.sync_all();
        Ok(filler)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).output();
    }
}

pub async fn run(options: TrialsOptions) -> Result<u8> {
    let mut totals = Outcome::default();
    let mut failed_seeds = Vec::new();
    let mut skipped: BTreeMap<&'static str, String> = BTreeMap::new();
    let started = Instant::now();
    for seed in options.first_seed..options.first_seed + options.seeds {
        let t = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix(&format!("silt-trial-{seed}-"))
            .tempdir()?;
        // The disk-full fault needs a data directory of its own size.
        let mut disk = match SmallDisk::mount(&dir.path().join("data"), 96 << 20) {
            Ok(d) => Some(d),
            Err(why) => {
                skipped.entry("disk-full").or_insert(why);
                None
            }
        };
        let result = trial(seed, dir.path(), disk.as_ref(), &options).await;
        let (outcome, error) = match result {
            Ok(o) => (o, None),
            Err(e) => (Outcome::default(), Some(format!("{e:#}"))),
        };
        let bad = error.is_some()
            || outcome.rows_lost + outcome.rows_duplicated + outcome.verify_failures > 0;
        let faults: Vec<String> = outcome
            .faults
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "seed {seed}: {} in {:.1} s; faults: {}; written {}, lost {}, duplicated {}, verify failures {}",
            if bad { "FAILED" } else { "ok" },
            t.elapsed().as_secs_f64(),
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(", ")
            },
            outcome.rows_written,
            outcome.rows_lost,
            outcome.rows_duplicated,
            outcome.verify_failures
        );
        for note in &outcome.notes {
            println!("  {note}");
        }
        if let Some(e) = &error {
            println!("  error: {e}");
        }
        if bad {
            failed_seeds.push(seed);
            if options.keep_failed {
                if disk.is_some() {
                    // The data lives on the tmpfs, gone once it is unmounted: copy it out.
                    let _ = Command::new("cp")
                        .arg("-a")
                        .arg(dir.path().join("data"))
                        .arg(dir.path().join("data-kept"))
                        .output();
                }
                drop(disk.take());
                let kept = dir.keep();
                println!(
                    "  kept {} (silt logs in silt-*.log, data in data-kept/ or data/)",
                    kept.display()
                );
            }
        }
        for (k, v) in outcome.faults {
            *totals.faults.entry(k).or_default() += v;
        }
        totals.rows_written += outcome.rows_written;
        totals.rows_lost += outcome.rows_lost;
        totals.rows_duplicated += outcome.rows_duplicated;
        totals.verify_failures += outcome.verify_failures + u64::from(error.is_some());
    }
    let faults: Vec<String> = totals
        .faults
        .iter()
        .filter(|(k, _)| **k != "none")
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!();
    println!("{:<22} {}", "seeds run", options.seeds);
    println!(
        "{:<22} {}",
        "faults injected",
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(", ")
        }
    );
    for (kind, why) in &skipped {
        println!("{:<22} {kind}: {why}", "faults skipped");
    }
    println!("{:<22} {}", "rows written (acked)", totals.rows_written);
    println!("{:<22} {}", "rows lost", totals.rows_lost);
    println!("{:<22} {}", "rows duplicated", totals.rows_duplicated);
    println!("{:<22} {}", "verify failures", totals.verify_failures);
    println!(
        "{:<22} {}",
        "failed seeds",
        if failed_seeds.is_empty() {
            "none".to_string()
        } else {
            failed_seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!("{:<22} {:.1} s", "time", started.elapsed().as_secs_f64());
    Ok(if failed_seeds.is_empty() { 0 } else { 1 })
}

async fn trial(
    seed: u64,
    dir: &Path,
    disk: Option<&SmallDisk>,
    options: &TrialsOptions,
) -> Result<Outcome> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut outcome = Outcome::default();
    let data = dir.join("data");
    let control = dir.join("lake-faults");
    std::fs::write(&control, "ok")?;
    let mut starts = 0u32;
    let log = |n: u32| dir.join(format!("silt-{n}.log"));
    let mut silt = Silt::start(&data, &log(starts), &control)?;

    let tables = random_tables(&mut rng);
    create_tables(&silt.bootstrap, &tables, &mut rng).await?;
    let mut model = Model::default();
    // Probe writes during a full disk use ids far from the workload's; those acknowledged
    // count as written and must survive like any other.
    let mut probe_next_id = 1i64 << 40;
    let mut probe_acked: Vec<(String, Vec<i64>)> = Vec::new();
    let phases = 3 + rng.random_range(0..3);
    for _ in 0..phases {
        if !silt.alive() {
            starts += 1;
            silt = Silt::start(&data, &log(starts), &control)?;
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let writer = tokio::spawn(write_phase(
            silt.bootstrap.clone(),
            tables.clone(),
            model,
            rng.random(),
            stop_rx,
        ));
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1200))).await;
        let fault = pick_fault(&mut rng, disk.is_some());
        *outcome.faults.entry(fault.name()).or_default() += 1;
        match fault {
            Fault::None => {
                tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await
            }
            Fault::Kill => silt.kill(),
            Fault::SecondJob => {
                let table = &tables[rng.random_range(0..tables.len())];
                let note = second_job(&silt.bootstrap, &data, dir, table, &mut rng).await?;
                outcome.notes.push(note);
            }
            Fault::StoreTransient => {
                std::fs::write(&control, format!("fail {}", rng.random_range(1..6)))?;
                tokio::time::sleep(Duration::from_millis(rng.random_range(300..1000))).await;
                // Over: a restarted silt must not read the same command again.
                std::fs::write(&control, "ok")?;
            }
            Fault::StoreDown => {
                std::fs::write(&control, "down")?;
                tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
                // Nothing partial may be visible while the store fails: the lake at its
                // current version is a consistent prefix of every table's changelog.
                for t in &tables {
                    let mut o = VerifyOptions::new(&silt.bootstrap, lake_root(&data));
                    o.wait_for_lake = false;
                    o.show_max = 3;
                    match verify_table_with_retry(&silt.bootstrap, &t.name, &o).await {
                        Ok(r) if r.verdict == Verdict::Match => {}
                        Ok(r) => {
                            outcome.verify_failures += 1;
                            outcome.notes.push(format!(
                                "store down: the lake of {} is not a prefix of its changelog:\n{}",
                                t.name,
                                r.render()
                            ));
                        }
                        Err(e) => outcome
                            .notes
                            .push(format!("store down: could not check {}: {e:#}", t.name)),
                    }
                }
                std::fs::write(&control, "ok")?;
            }
            Fault::DiskFull => {
                let filler = disk.expect("picked only with a disk").fill()?;
                // A write the client does not retry shows what the server says.
                let log_table = tables.iter().find(|t| !t.primary_key).expect("a log table");
                let probe_ids: Vec<i64> = (probe_next_id..probe_next_id + 2000).collect();
                probe_next_id += 2000;
                let probe = probe_write(&silt.bootstrap, &log_table.name, &probe_ids).await;
                let acked: Vec<i64> = match &probe {
                    Ok(None) => probe_ids.clone(),
                    Ok(Some(refused)) => probe_ids
                        .iter()
                        .zip(&refused.acked)
                        .filter(|(_, ok)| **ok)
                        .map(|(id, _)| *id)
                        .collect(),
                    Err(_) => Vec::new(),
                };
                probe_acked.push((log_table.name.clone(), acked));
                match probe {
                    Ok(None) => outcome
                        .notes
                        .push("disk full: a 2000-row write was acknowledged (it fit)".into()),
                    Ok(Some(ProbeRefused { error: e, .. })) => {
                        let lower = e.to_lowercase();
                        let named = ["space", "disk", "storage", "full"]
                            .iter()
                            .any(|w| lower.contains(w));
                        outcome.notes.push(format!(
                            "disk full: a write was refused{}: {}",
                            if named {
                                ""
                            } else {
                                " WITHOUT naming the disk"
                            },
                            first_line(&e, 200)
                        ));
                        if !named {
                            outcome.verify_failures += 1;
                        }
                    }
                    Err(e) => outcome
                        .notes
                        .push(format!("disk full: probe could not run: {e:#}")),
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
                if !silt.alive() {
                    outcome.notes.push(
                        "disk full: silt exited (it should refuse writes and stay up)".into(),
                    );
                }
                std::fs::remove_file(&filler)?;
            }
        }
        let _ = stop_tx.send(true);
        let (returned, stopped_by) = writer.await?;
        model = returned;
        if fault == Fault::DiskFull
            && let Some(e) = stopped_by
        {
            outcome.notes.push(format!(
                "disk full: the workload's writer stopped: {}",
                first_line(&e, 200)
            ));
        }
    }
    std::fs::write(&control, "ok")?;
    if !silt.alive() {
        starts += 1;
        silt = Silt::start(&data, &log(starts), &control)?;
    }
    for (table, ids) in probe_acked {
        model.rows_acked += ids.len() as u64;
        model.log_acked.entry(table).or_default().extend(ids);
    }
    outcome.rows_written = model.rows_acked;

    // Catch up and verify every table, then check the acknowledged writes.
    for t in &tables {
        let mut o = VerifyOptions::new(&silt.bootstrap, lake_root(&data));
        o.deadline = options.catch_up;
        o.show_max = 5;
        let report = verify_table_with_retry(&silt.bootstrap, &t.name, &o).await?;
        if report.verdict != Verdict::Match {
            outcome.verify_failures += 1;
            outcome.rows_lost += report.missing as u64;
            outcome.rows_duplicated += report.extra as u64;
            outcome.notes.push(report.render());
        }
        let (lost, duplicated, notes) = check_acked(&silt.bootstrap, t, &model).await?;
        outcome.rows_lost += lost;
        outcome.rows_duplicated += duplicated;
        outcome.notes.extend(notes);
    }
    drop(silt);
    Ok(outcome)
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(max).collect()
}

fn lake_root(data: &Path) -> String {
    data.join("lake").to_string_lossy().to_string()
}

async fn verify_table_with_retry(
    bootstrap: &str,
    table: &str,
    options: &VerifyOptions,
) -> Result<crate::verify::TableReport> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    verify_table(&connection, DB, table, options).await
}

fn pick_fault(rng: &mut SmallRng, disk: bool) -> Fault {
    let kinds = [
        (Fault::None, 1),
        (Fault::Kill, 4),
        (Fault::SecondJob, 2),
        (Fault::StoreTransient, 2),
        (Fault::StoreDown, 2),
        (Fault::DiskFull, if disk { 2 } else { 0 }),
    ];
    let total: u32 = kinds.iter().map(|(_, w)| w).sum();
    let mut pick = rng.random_range(0..total);
    for (kind, weight) in kinds {
        if pick < weight {
            return kind;
        }
        pick -= weight;
    }
    Fault::None
}

fn random_tables(rng: &mut SmallRng) -> Vec<TableSpec> {
    let logs = 1 + rng.random_range(0..2);
    let pks = 1 + rng.random_range(0..2);
    let mut out = Vec::new();
    for i in 0..logs {
        out.push(TableSpec {
            name: format!("log{i}"),
            primary_key: false,
            buckets: rng.random_range(1..5),
        });
    }
    for i in 0..pks {
        out.push(TableSpec {
            name: format!("pk{i}"),
            primary_key: true,
            buckets: rng.random_range(1..5),
        });
    }
    out
}

async fn create_tables(bootstrap: &str, tables: &[TableSpec], rng: &mut SmallRng) -> Result<()> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let admin = connection.get_admin()?;
    admin.create_database(DB, None, true).await?;
    for t in tables {
        let schema = if t.primary_key {
            Schema::builder()
                .column("id", DataTypes::bigint())
                .column("ver", DataTypes::bigint())
                .column("score", DataTypes::bigint())
                .column("note", DataTypes::string())
                .primary_key(vec!["id"])?
                .build()?
        } else {
            Schema::builder()
                .column("id", DataTypes::bigint())
                .column("n", DataTypes::int())
                .column("payload", DataTypes::string())
                .build()?
        };
        let keys = if t.primary_key {
            vec!["id".to_string()]
        } else {
            vec![]
        };
        let freshness = format!("{}ms", rng.random_range(200..700));
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(t.buckets), keys)
            .property(DATALAKE_ENABLED, "true")
            .property(DATALAKE_FRESHNESS, freshness)
            .build()?;
        admin
            .create_table(&TablePath::new(DB, &t.name), &descriptor, false)
            .await
            .with_context(|| format!("creating {DB}.{}", t.name))?;
    }
    Ok(())
}

/// Writes random batches until told to stop or a write fails (the process died, the disk is
/// full). Returns the model and the error that stopped it, if any.
async fn write_phase(
    bootstrap: String,
    tables: Vec<TableSpec>,
    mut model: Model,
    seed: u64,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (Model, Option<String>) {
    let result = write_until(&bootstrap, &tables, &mut model, seed, &stop).await;
    (model, result.err().map(|e| format!("{e:#}")))
}

async fn write_until(
    bootstrap: &str,
    tables: &[TableSpec],
    model: &mut Model,
    seed: u64,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let mut writers = Vec::new();
    for t in tables {
        let table = connection.get_table(&TablePath::new(DB, &t.name)).await?;
        writers.push(if t.primary_key {
            let upsert = table.new_upsert()?;
            Writers::Pk {
                full: upsert.create_writer()?,
                partial: upsert
                    .partial_update_with_column_names(&["id", "ver", "score"])?
                    .create_writer()?,
            }
        } else {
            Writers::Log(table.new_append()?.create_writer()?)
        });
    }
    while !*stop.borrow() {
        let i = rng.random_range(0..tables.len());
        let n = [1usize, 5, 40, 150, 400][rng.random_range(0..5)];
        let spec = &tables[i];
        match &writers[i] {
            Writers::Pk { full, partial } => {
                let op = match rng.random_range(0..100) {
                    0..70 => PkOp::Upsert,
                    70..85 => PkOp::Partial,
                    _ => PkOp::Delete,
                };
                let writer = if op == PkOp::Partial { partial } else { full };
                write_pk_batch(writer, spec, op, n, model, &mut rng).await?;
            }
            Writers::Log(appender) => write_log_batch(appender, spec, n, model).await?,
        }
    }
    Ok(())
}

enum Writers {
    Log(fluss::client::AppendWriter),
    Pk {
        full: fluss::client::UpsertWriter,
        partial: fluss::client::UpsertWriter,
    },
}

/// Flushes and waits for every write's own result: the client's `flush` only waits for the
/// writes to complete, a refused write reports its error through its `WriteResultFuture`.
/// Returns, per write, whether the server acknowledged it, and the first error.
async fn flush_and_collect<F: std::future::Future<Output = fluss::error::Result<()>>>(
    flush: F,
    results: Vec<fluss::client::WriteResultFuture>,
) -> (Vec<bool>, Option<anyhow::Error>) {
    let n = results.len();
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        let flushed = flush.await;
        (flushed, futures::future::join_all(results).await)
    })
    .await;
    match waited {
        Err(_) => (
            vec![false; n],
            Some(anyhow!("writes not acknowledged within 5 s")),
        ),
        Ok((flushed, results)) => {
            let mut first = flushed.err().map(|e| anyhow!("flush: {e}"));
            let acked = results
                .into_iter()
                .map(|r| match r {
                    Ok(()) => true,
                    Err(e) => {
                        first.get_or_insert_with(|| anyhow!("write refused: {e}"));
                        false
                    }
                })
                .collect();
            (acked, first)
        }
    }
}

async fn write_log_batch(
    appender: &fluss::client::AppendWriter,
    spec: &TableSpec,
    n: usize,
    model: &mut Model,
) -> Result<()> {
    let first = model.next_id;
    model.next_id += n as i64;
    let mut results = Vec::with_capacity(n);
    for id in first..first + n as i64 {
        let payload = format!("{}-{id}", spec.name);
        let mut row = GenericRow::new(3);
        row.set_field(0, id);
        row.set_field(1, (id % 1000) as i32);
        row.set_field(2, payload.as_str());
        results.push(appender.append(&row)?);
    }
    let (acked, error) = flush_and_collect(appender.flush(), results).await;
    let ids = model.log_acked.entry(spec.name.clone()).or_default();
    for (id, ok) in (first..first + n as i64).zip(&acked) {
        if *ok {
            ids.push(id);
            model.rows_acked += 1;
        }
    }
    error.map_or(Ok(()), Err)
}

async fn write_pk_batch(
    writer: &fluss::client::UpsertWriter,
    spec: &TableSpec,
    op: PkOp,
    n: usize,
    model: &mut Model,
    rng: &mut SmallRng,
) -> Result<()> {
    let mut ops = Vec::with_capacity(n);
    let mut results = Vec::with_capacity(n);
    for _ in 0..n {
        let key = rng.random_range(0..PK_KEYS);
        let seq = model.next_seq;
        model.next_seq += 1;
        let note = format!("note-{seq}");
        let mut row = GenericRow::new(4);
        row.set_field(0, key);
        row.set_field(1, seq);
        row.set_field(2, rng.random_range(-1000i64..1000));
        if op != PkOp::Partial {
            row.set_field(3, note.as_str());
        }
        model
            .pk_attempted
            .entry(spec.name.clone())
            .or_default()
            .entry(key)
            .or_default()
            .push((seq, op));
        results.push(match op {
            PkOp::Delete => writer.delete(&row)?,
            _ => writer.upsert(&row)?,
        });
        ops.push((key, seq));
    }
    let (oks, error) = flush_and_collect(writer.flush(), results).await;
    let acked = model.pk_acked.entry(spec.name.clone()).or_default();
    for ((key, seq), ok) in ops.into_iter().zip(oks) {
        if ok {
            acked.insert(key, (seq, op));
            model.rows_acked += 1;
        }
    }
    error.map_or(Ok(()), Err)
}

/// One write of `ids` to a log table through a client that does not retry. `Ok(None)`: it
/// was acknowledged; `Ok(Some(refused))`: the server refused it (some rows, maybe all).
async fn probe_write(bootstrap: &str, table: &str, ids: &[i64]) -> Result<Option<ProbeRefused>> {
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    config.writer_retries = 0;
    config.writer_enable_idempotence = false;
    let connection = FlussConnection::new(config).await?;
    let table = connection.get_table(&TablePath::new(DB, table)).await?;
    let appender = table.new_append()?.create_writer()?;
    let mut results = Vec::with_capacity(ids.len());
    for &id in ids {
        let payload = format!("probe-{id}-{}", "x".repeat(40));
        let mut row = GenericRow::new(3);
        row.set_field(0, id);
        row.set_field(1, (id % 1000) as i32);
        row.set_field(2, payload.as_str());
        results.push(appender.append(&row)?);
    }
    let (acked, error) = flush_and_collect(appender.flush(), results).await;
    Ok(error.map(|e| ProbeRefused {
        acked,
        error: format!("{e:#}"),
    }))
}

/// A probe write the server refused, at least in part.
struct ProbeRefused {
    /// Per row: acknowledged anyway (another bucket's batch may have fit).
    acked: Vec<bool>,
    error: String,
}

/// Starts a second tiering job on `table` against the same lake (its own checkpoints), lets it
/// run alongside silt's own job for a while, then stops it.
async fn second_job(
    bootstrap: &str,
    data: &Path,
    dir: &Path,
    table: &TableSpec,
    rng: &mut SmallRng,
) -> Result<String> {
    let checkpoints = dir.join(format!("second-job-{}", rng.random::<u32>()));
    let mut config = TieringConfig::new(bootstrap, lake_root(data), checkpoints);
    config.freshness_default = Duration::from_millis(300);
    let service = TieringService::new(config, None);
    service
        .tier_table(DB, &table.name)
        .await
        .with_context(|| format!("starting a second tiering job on {DB}.{}", table.name))?;
    tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
    let status = service
        .status()
        .await
        .ok()
        .and_then(|s| s.into_iter().next());
    service.shutdown(Duration::from_secs(3)).await;
    Ok(match status {
        Some(s) => format!(
            "second job on {}: {} checkpoints, {} restarts (a commit that loses the conflict check restarts it), state {}",
            table.name, s.checkpoints, s.restarts, s.job_state
        ),
        None => format!("second job on {}: no status", table.name),
    })
}

/// Checks the acknowledged writes against the hot store: (lost, duplicated, notes).
async fn check_acked(
    bootstrap: &str,
    spec: &TableSpec,
    model: &Model,
) -> Result<(u64, u64, Vec<String>)> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let batches = hot_changelog(&connection, bootstrap, spec).await?;
    let mut notes = Vec::new();
    if !spec.primary_key {
        let mut seen: HashMap<i64, u32> = HashMap::new();
        for b in &batches {
            for id in i64_column(b, "id")?.iter().flatten() {
                *seen.entry(id).or_default() += 1;
            }
        }
        let acked = model.log_acked.get(&spec.name).cloned().unwrap_or_default();
        let lost: Vec<i64> = acked
            .iter()
            .copied()
            .filter(|id| !seen.contains_key(id))
            .collect();
        let duplicated: u64 = seen.values().map(|n| u64::from(n.saturating_sub(1))).sum();
        if !lost.is_empty() {
            notes.push(format!(
                "{}: {} acknowledged rows missing from the hot store (first ids {:?})",
                spec.name,
                lost.len(),
                &lost[..lost.len().min(10)]
            ));
        }
        if duplicated > 0 {
            notes.push(format!(
                "{}: {duplicated} rows appear twice in the hot store",
                spec.name
            ));
        }
        return Ok((lost.len() as u64, duplicated, notes));
    }
    // The final image per key from the changelog.
    let mut rows: Vec<(i32, i64, i64, ChangeType, Option<i64>)> = Vec::new();
    for b in &batches {
        let buckets = arrow::compute::cast(
            b.column_by_name("__bucket").context("__bucket")?,
            &arrow::datatypes::DataType::Int32,
        )?;
        let buckets = buckets
            .as_any()
            .downcast_ref::<arrow::array::Int32Array>()
            .context("__bucket")?;
        let offsets = i64_column(b, "__offset")?;
        let ids = i64_column(b, "id")?;
        let vers = i64_column(b, "ver")?;
        let changes = b
            .column_by_name("__change_type")
            .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
            .context("__change_type")?;
        for i in 0..b.num_rows() {
            let change = ChangeType::from_i8(changes.value(i)).context("change type")?;
            rows.push((
                buckets.value(i),
                offsets.value(i),
                ids.value(i),
                change,
                (!vers.is_null(i)).then(|| vers.value(i)),
            ));
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    let mut state: HashMap<i64, Option<i64>> = HashMap::new();
    for (_, _, id, change, ver) in rows {
        match change {
            ChangeType::Delete => {
                state.insert(id, None);
            }
            ChangeType::UpdateBefore => {}
            _ => {
                state.insert(id, ver);
            }
        }
    }
    let empty = HashMap::new();
    let acked = model.pk_acked.get(&spec.name).unwrap_or(&empty);
    let empty_attempts = HashMap::new();
    let attempted = model
        .pk_attempted
        .get(&spec.name)
        .unwrap_or(&empty_attempts);
    let mut lost = Vec::new();
    for (key, &(seq, op)) in acked {
        let later: Vec<(i64, PkOp)> = attempted
            .get(key)
            .map(|ops| ops.iter().copied().filter(|(s, _)| *s > seq).collect())
            .unwrap_or_default();
        let fin = state.get(key).copied().flatten();
        let ok = match fin {
            None => op == PkOp::Delete || later.iter().any(|(_, o)| *o == PkOp::Delete),
            Some(v) => {
                (v == seq && op != PkOp::Delete)
                    || later.iter().any(|(s, o)| *s == v && *o != PkOp::Delete)
            }
        };
        if !ok {
            lost.push(format!("key {key}: acked {op:?} #{seq}, hot has {fin:?}"));
        }
    }
    lost.sort();
    if !lost.is_empty() {
        notes.push(format!(
            "{}: {} keys lost their last acknowledged write: {}",
            spec.name,
            lost.len(),
            lost[..lost.len().min(5)].join("; ")
        ));
    }
    Ok((lost.len() as u64, 0, notes))
}

async fn hot_changelog(
    connection: &FlussConnection,
    bootstrap: &str,
    spec: &TableSpec,
) -> Result<Vec<RecordBatch>> {
    let admin = connection.get_admin()?;
    let path = TablePath::new(DB, &spec.name);
    let ids: Vec<i32> = (0..spec.buckets).collect();
    let latest = admin.list_offsets(&path, &ids, OffsetSpec::Latest).await?;
    let start: BTreeMap<i32, i64> = ids.iter().map(|b| (*b, 0)).collect();
    let end: BTreeMap<i32, i64> = ids
        .iter()
        .map(|b| (*b, latest.get(b).copied().unwrap_or(0)))
        .collect();
    read_changelog(
        bootstrap,
        None,
        DB,
        &spec.name,
        start,
        end,
        Duration::from_secs(30),
    )
    .await
}

fn i64_column(batch: &RecordBatch, name: &str) -> Result<Int64Array> {
    let c = arrow::compute::cast(
        batch
            .column_by_name(name)
            .ok_or_else(|| anyhow!("column {name} missing"))?,
        &arrow::datatypes::DataType::Int64,
    )?;
    Ok(c.as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| anyhow!("column {name} is not an integer"))?
        .clone())
}
