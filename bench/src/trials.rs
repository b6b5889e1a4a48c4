//! `silt bench trials`: seeded fault trials of the whole promise.
//!
//! For each seed: a fresh data directory, `silt up` as a child process on a port fixed for the
//! seed, a random set of log and primary-key tables (1-4 buckets, lake-enabled, short
//! freshness), and a workload that runs for the whole trial ([`workload`]): two or three
//! clients, each its own connection and writer id, each shared by several tasks writing every
//! table at once (appends; upserts, partial updates and deletes on shared keys), with
//! pipelined batches (up to 5 requests in flight per bucket) and, beside fluss-rs's defaults,
//! small and dynamically sized batches. Clients retry without end: when `silt up` dies, a
//! write in flight is retried into the restarted process, on the same port and data directory,
//! as a real client's would be. In each of a few phases one fault drawn from the seed strikes
//! while the workload runs:
//!
//! - `kill`: SIGKILL of `silt up` at a random moment, restarted after a random pause; half
//!   the restarts after a kill (or a power loss) are armed with `--crash-at` and crash again at
//!   the first tiering commit that reaches a committer point (`crash-before-commit`: files
//!   written, nothing committed; `crash-after-commit`: the Delta commit durable, neither the
//!   hot store's registry nor the job's checkpoint updated);
//! - `abort-after-durable-write`: a start may be armed (`SILT_FAULT_ABORT_AFTER_DURABLE_WRITE`,
//!   a random N) to abort right after its N-th durable write, before acknowledging it; the
//!   trial counts the fault when the process aborts, and restarts it;
//! - `power-loss`: SIGKILL, then every log segment and mark journal is cut back to what its
//!   last fsync made durable (hotstore's `simulate_power_loss`), then a restart. Under the
//!   default `fsync: group` silt acknowledges only fsynced writes, so a power loss may take
//!   unacknowledged writes only. The lake and the kv store (fjall) are not cut: the lake's
//!   commits are synced, the kv store is rebuilt from the log;
//! - `second-job`: a second tiering job on the same table and lake (in this process, with its
//!   own checkpoints): Delta's txn/conflict check must fence one of them, the lake stays intact;
//! - `store-transient`: the lake's object store fails the next few operations
//!   (`SILTTEST_LAKE_FAULTS`, see `jobs/src/lake_faults.rs`);
//! - `store-down`: the lake's store fails everything for a while; meanwhile the lake at its
//!   current version must still be a consistent prefix of the changelog (no partial commit is
//!   visible), and tiering must resume once the store is back;
//! - `disk-full`: the data directory is a small tmpfs, filled up to the last byte: writes must be
//!   refused (not acknowledged), silt must stay up, and nothing acknowledged may be lost;
//! - `disk-nearly-full`: the same, leaving a few KiB free, so a large batch is refused while a
//!   smaller later one still fits. Both are skipped with a printed reason where tmpfs cannot be
//!   mounted.
//!
//! In a seeded share of the trials, a day-partitioned log table and a partitioned primary-key
//! table are written too, partition by partition, with partitions created, dropped and created
//! again under a dropped name before or after each phase's fault; [`partitions`] says how,
//! and what is checked per partition (the lake, read directly, beside `silt verify`). In
//! another share, a log table and a primary-key table are dropped and created again under
//! their name while clients write and tiering runs; [`recreated`] says how, and what is checked
//! per incarnation (per table id), the lake of each included. [`extra`] runs both kinds.
//!
//! After the phases: faults cleared, silt running, every write resolved; then every table is
//! verified ([`crate::verify`]: wait for the lake, compare as multisets) and the hot store is
//! judged against what the workload wrote ([`check`]): only writes whose own future resolved
//! `Ok` count as acknowledged. On any lost or duplicated row the trial prints, for every copy,
//! the stored batch it lies in (base offset, writer id, batch sequence, read from the segment
//! files, see [`stored`]) and keeps the seed's directory, data included.
//!
//! The trials need a `silt` built with the `fault-injection` feature (every `cargo test` build
//! has it); [`run`] refuses to start without it. A seed replays the same plan (tables,
//! clients, faults, arming), not the same interleaving.

mod check;
mod clients;
mod extra;
mod lake_check;
mod partitions;
mod process;
mod recreated;
mod stored;
mod workload;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, BooleanArray, Int8Array, Int64Array, RecordBatch};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, Schema, SchemaBuilder, TableDescriptor, TablePath};
use fluss::rpc::message::OffsetSpec;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::{
    BUCKET_COLUMN, BucketKey, ChangeType, OFFSET_COLUMN, PARTITION_ID_COLUMN,
};
use silt_connectors::delta::read_lake_offsets;

use self::check::{Change, LogFindings, PkFindings, Place};
use self::extra::{ExtraPlan, ExtraTables};
use self::partitions::PartitionCounts;
use self::process::{Armed, CommitPoint, Exit, Silt, SiltSetup, SmallDisk};
use self::recreated::RecreateCounts;
use self::stored::StoredLog;
use self::workload::{
    ClientPlan, Origin, PkWrite, ProbeRefused, Records, Workload, WorkloadPlan, first_line,
};
use crate::report::{Table, say};
use silt_jobs::tiering::{DATALAKE_ENABLED, DATALAKE_FRESHNESS, TieringConfig, TieringService};
use silt_jobs::verify::{Verdict, VerifyOptions, read_changelog, read_lake, verify_table};

/// The error of a `silt` built without the hooks the trials need.
pub const WITHOUT_FEATURE: &str = "this silt-bench binary was built without the \
    `fault-injection` feature, which the trials need (power-loss simulation, abort after a \
    durable write, a failing lake store); build one with `cargo build -p silt-bench --features \
    fault-injection` and run `target/debug/silt-bench trials` (every `cargo test` build of \
    silt-bench has the feature)";

const DB: &str = "trial";
/// The partition column of the partitioned tables ([`partitions`]): a day.
const PARTITION_COLUMN: &str = "dt";
/// How long the workload's writes may take to resolve at the end of a trial, silt running.
const RESOLVE_DEADLINE: Duration = Duration::from_secs(30);
/// Largest N a start is armed with (`SILT_FAULT_ABORT_AFTER_DURABLE_WRITE`); drawn
/// log-uniformly, so most armed starts abort within a second or two of the workload.
const ABORT_AFTER_MAX: f64 = 400.0;
/// The size of the tmpfs each trial's data directory lives on.
const DISK_BYTES: u64 = 320 << 20;
/// How many rows of each kind of finding are shown.
const SHOW_MAX: usize = 5;
/// How often an admin request (creating or dropping a partition, reading offsets) is tried
/// while `silt up` may be restarting, and how long each try may take.
const ADMIN_ATTEMPTS_MAX: u32 = 20;
const ADMIN_ATTEMPT_DEADLINE: Duration = Duration::from_secs(10);

/// The flags of `silt bench trials`.
#[derive(Debug, Clone, clap::Args)]
pub struct TrialsOptions {
    /// How many seeds to run.
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// The first seed (seeds run S, S+1, ...); one seed replays exactly that trial's plan.
    #[arg(long = "seed", default_value_t = 1)]
    pub first_seed: u64,
    /// How long the lake may take to catch up at the end of each trial, e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub catch_up: Duration,
    /// Keep the directory (with silt's logs) of a failed trial (one that lost or duplicated
    /// a row is always kept).
    #[arg(long)]
    pub keep_failed: bool,
    /// Tests of the checker: plant a duplicated and a lost row in every trial, which must
    /// then report them (and fail): stored twice through a client without idempotence, and a
    /// row never written counted as acknowledged (one lost, [`PLANTED_DUPLICATES`] duplicated).
    #[arg(long, hide = true)]
    pub plant: bool,
}

/// Rows stored twice by `--plant`.
pub const PLANTED_DUPLICATES: i64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    None,
    Kill,
    AbortAfterDurableWrite,
    PowerLoss,
    SecondJob,
    StoreTransient,
    StoreDown,
    DiskFull,
    DiskNearlyFull,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "kill",
            Fault::AbortAfterDurableWrite => "abort-after-durable-write",
            Fault::PowerLoss => "power-loss",
            Fault::SecondJob => "second-job",
            Fault::StoreTransient => "store-transient",
            Fault::StoreDown => "store-down",
            Fault::DiskFull => "disk-full",
            Fault::DiskNearlyFull => "disk-nearly-full",
        }
    }
}

/// What one trial found.
#[derive(Debug, Default)]
struct Outcome {
    faults: BTreeMap<&'static str, u64>,
    /// Rows (log) and ops (primary key) whose write was acknowledged.
    rows_acked: u64,
    rows_lost: u64,
    rows_duplicated: u64,
    verify_failures: u64,
    /// The verify failures by kind.
    failures: BTreeMap<String, u64>,
    /// Exits of `silt up` that no fault caused.
    unexpected_exits: u64,
    /// Seeds run with hot retention, and of their tables' buckets, those whose log start had
    /// moved by the check, with the rows checked there from the lake alone.
    retention_seeds: u64,
    buckets_cut: u64,
    rows_below_log_start: u64,
    /// What the seeds with partitioned tables did with them, and checked.
    partitioned: PartitionCounts,
    /// What the seeds with tables dropped and created again did with them, and checked.
    recreated: RecreateCounts,
    notes: Vec<String>,
}

impl Outcome {
    fn fail(&mut self, kind: impl Into<String>) {
        self.verify_failures += 1;
        *self.failures.entry(kind.into()).or_default() += 1;
    }

    fn failed(&self) -> bool {
        self.rows_lost + self.rows_duplicated + self.verify_failures + self.unexpected_exits > 0
    }

    fn add(&mut self, other: &Outcome) {
        for (k, v) in &other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.rows_acked += other.rows_acked;
        self.rows_lost += other.rows_lost;
        self.rows_duplicated += other.rows_duplicated;
        self.verify_failures += other.verify_failures;
        for (k, v) in &other.failures {
            *self.failures.entry(k.clone()).or_default() += v;
        }
        self.unexpected_exits += other.unexpected_exits;
        self.retention_seeds += other.retention_seeds;
        self.buckets_cut += other.buckets_cut;
        self.rows_below_log_start += other.rows_below_log_start;
        self.partitioned.add(&other.partitioned);
        self.recreated.add(&other.recreated);
    }
}

#[derive(Debug, Clone)]
struct TableSpec {
    name: String,
    primary_key: bool,
    buckets: i32,
    /// Of a partitioned table: the day (the value of [`PARTITION_COLUMN`]) the workload's rows
    /// carry, so they land in that partition.
    day: Option<String>,
}

pub async fn run(options: TrialsOptions) -> Result<u8> {
    if !cfg!(feature = "fault-injection") {
        bail!(WITHOUT_FEATURE);
    }
    let mut totals = Outcome::default();
    let mut failed_seeds = Vec::new();
    let mut skipped: BTreeMap<&'static str, String> = BTreeMap::new();
    let started = Instant::now();
    // A bar over the seeds on a terminal; each seed's line is printed above it.
    let progress = silt_jobs::progress::Progress::steps(options.seeds);
    for seed in options.first_seed..options.first_seed + options.seeds {
        progress.set_message(format!("seed {seed}"));
        let t = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix(&format!("silt-trial-{seed}-"))
            .tempdir()?;
        // The disk-full faults need a data directory of its own size, large enough that the
        // workload alone never fills it (a fast seed writes ~100 MiB: logs, lake, checkpoints).
        let mut disk = match SmallDisk::mount(&dir.path().join("data"), DISK_BYTES) {
            Ok(d) => Some(d),
            Err(why) => {
                skipped.entry("disk-full").or_insert(why);
                None
            }
        };
        let (outcome, error) = match trial(seed, dir.path(), disk.as_ref(), &options).await {
            Ok(o) => (o, None),
            Err(e) => (Outcome::default(), Some(format!("{e:#}"))),
        };
        let bad = error.is_some() || outcome.failed();
        progress.suspend(|| print_seed(seed, t.elapsed(), &outcome, error.as_deref()));
        if bad {
            failed_seeds.push(seed);
        }
        let lost_rows = outcome.rows_lost + outcome.rows_duplicated > 0;
        if lost_rows || (bad && options.keep_failed) {
            progress.suspend(|| keep(dir, disk.take()));
        }
        progress.inc();
        totals.add(&outcome);
        if error.is_some() {
            totals.fail("trial error");
        }
    }
    progress.finish();
    print_summary(
        &options,
        &totals,
        &skipped,
        &failed_seeds,
        started.elapsed(),
    );
    Ok(if failed_seeds.is_empty() { 0 } else { 1 })
}

/// A seed's line (FAILED when its outcome failed or it ended in `error`) and its notes.
fn print_seed(seed: u64, elapsed: Duration, outcome: &Outcome, error: Option<&str>) {
    let bad = error.is_some() || outcome.failed();
    say!(
        "seed {seed}: {} in {:.1} s; faults: {}; acknowledged {}, lost {}, duplicated {}, verify failures {}{}",
        if bad { "FAILED" } else { "ok" },
        elapsed.as_secs_f64(),
        faults_line(&outcome.faults, true),
        outcome.rows_acked,
        outcome.rows_lost,
        outcome.rows_duplicated,
        outcome.verify_failures,
        if outcome.unexpected_exits > 0 {
            format!(", unexpected exits {}", outcome.unexpected_exits)
        } else {
            String::new()
        }
    );
    for note in &outcome.notes {
        say!("  {note}");
    }
    if let Some(e) = error {
        say!("  error: {e}");
    }
}

/// Keeps a trial's directory (silt's logs and its data, copied off the small disk first).
fn keep(dir: tempfile::TempDir, disk: Option<SmallDisk>) {
    if disk.is_some() {
        // The data lives on the tmpfs, gone once it is unmounted: copy it out.
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(dir.path().join("data"))
            .arg(dir.path().join("data-kept"))
            .output();
    }
    drop(disk);
    let kept = dir.keep();
    say!(
        "  kept {} (silt logs in silt-*.log, data in {})",
        kept.display(),
        if kept.join("data-kept").exists() {
            "data-kept/"
        } else {
            "data/"
        }
    );
}

fn faults_line(faults: &BTreeMap<&'static str, u64>, with_none: bool) -> String {
    let shown: Vec<String> = faults
        .iter()
        .filter(|(k, _)| with_none || **k != "none")
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

fn print_summary(
    options: &TrialsOptions,
    totals: &Outcome,
    skipped: &BTreeMap<&'static str, String>,
    failed_seeds: &[u64],
    elapsed: Duration,
) {
    let failed: Vec<String> = failed_seeds.iter().map(u64::to_string).collect();
    let mut table = Table::new(Vec::<String>::new())
        .values_left()
        .named("summary");
    table
        .row(["seeds run".to_string(), options.seeds.to_string()])
        .row([
            "acknowledged rows".to_string(),
            totals.rows_acked.to_string(),
        ])
        .row(["rows lost".to_string(), totals.rows_lost.to_string()])
        .row([
            "rows duplicated".to_string(),
            totals.rows_duplicated.to_string(),
        ])
        .row([
            "verify failures".to_string(),
            totals.verify_failures.to_string(),
        ]);
    for (kind, n) in &totals.failures {
        table.row([format!("  {kind}"), n.to_string()]);
    }
    table
        .row([
            "unexpected exits".to_string(),
            totals.unexpected_exits.to_string(),
        ])
        .row([
            "hot retention".to_string(),
            format!(
                "{} seeds; {} buckets had their log start moved, {} rows below it checked in the lake",
                totals.retention_seeds, totals.buckets_cut, totals.rows_below_log_start
            ),
        ])
        .row(["partitioned tables".into(), totals.partitioned.describe()])
        .row(["re-created tables".into(), totals.recreated.describe()])
        .row([
            "faults injected".to_string(),
            faults_line(&totals.faults, false),
        ]);
    for (kind, n) in totals.faults.iter().filter(|(k, _)| **k != "none") {
        table.row([format!("  {kind}"), n.to_string()]);
    }
    for (kind, why) in skipped {
        table.row(["faults skipped".to_string(), format!("{kind}: {why}")]);
    }
    table
        .row([
            "failed seeds".to_string(),
            if failed.is_empty() {
                "none".to_string()
            } else {
                failed.join(", ")
            },
        ])
        .row([
            "time".to_string(),
            format!("{:.1} s", elapsed.as_secs_f64()),
        ]);
    say!();
    table.print();
}

/// How a trial's `silt up` makes writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Durability {
    /// `hotstore.fsync`: `group`, `always` or `never`.
    fsync: &'static str,
    group_commit_window_ms: u32,
    /// `hotstore.flush_interval_ms`: under `never`, how often the high watermark catches up.
    flush_interval_ms: u64,
    /// Small segments make rolls (and their writer-state snapshots) happen under the faults.
    segment_bytes_max: u64,
}

impl Durability {
    fn draw(rng: &mut SmallRng) -> Durability {
        let fsync = match rng.random_range(0..20) {
            0..14 => "group",
            14..17 => "always",
            _ => "never",
        };
        Durability {
            fsync,
            group_commit_window_ms: [0, 0, 2, 10][rng.random_range(0..4)],
            flush_interval_ms: [1000, 200][rng.random_range(0..2)],
            segment_bytes_max: [256 << 20, 1 << 20, 128 << 10][rng.random_range(0..3)],
        }
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SILT_HOTSTORE__FSYNC", self.fsync.to_string()),
            (
                "SILT_HOTSTORE__GROUP_COMMIT_WINDOW_MS",
                self.group_commit_window_ms.to_string(),
            ),
            (
                "SILT_HOTSTORE__SEGMENT_BYTES_MAX",
                self.segment_bytes_max.to_string(),
            ),
            (
                "SILT_HOTSTORE__FLUSH_INTERVAL_MS",
                self.flush_interval_ms.to_string(),
            ),
        ]
    }

    fn describe(&self) -> String {
        let window = match self.fsync {
            "group" => format!(" ({} ms window)", self.group_commit_window_ms),
            "never" => format!(" (flushed every {} ms)", self.flush_interval_ms),
            _ => String::new(),
        };
        format!(
            "fsync: {}{window}, {} KiB segments",
            self.fsync,
            self.segment_bytes_max >> 10
        )
    }
}

/// Hot retention during the trial (drawn from a stream of its own, so that the rest of a seed's
/// plan is what it was before retention was drawn): a TTL far shorter than the trial, small
/// segments and frequent checks, so whole tiered segments are deleted while clients write and
/// faults strike. Every trial table is lake-enabled, so retention is held by what the lake
/// covered; the check then finds rows below each bucket's log start in the lake.
struct Retention {
    log_ttl_ms: u64,
    check_interval_ms: u64,
    segment_bytes_max: u64,
}

impl Retention {
    fn draw(seed: u64) -> Option<Retention> {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x005E_ED0F_7E7E);
        rng.random_bool(0.5).then(|| Retention {
            log_ttl_ms: [300, 1000, 3000][rng.random_range(0..3)],
            check_interval_ms: [100, 500][rng.random_range(0..2)],
            segment_bytes_max: [16 << 10, 64 << 10][rng.random_range(0..2)],
        })
    }

    /// (The segment size goes into the durability's.) A lake offset counts for retention once it is
    /// `query.deadline_max_ms` old (a pinned query keeps its tail), so that is short too; lake
    /// files are kept at least that long.
    fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SILT_HOTSTORE__LOG_TTL_MS", self.log_ttl_ms.to_string()),
            (
                "SILT_HOTSTORE__RETENTION_CHECK_INTERVAL_MS",
                self.check_interval_ms.to_string(),
            ),
            ("SILT_QUERY__DEADLINE_MAX_MS", "1000".to_string()),
            ("SILT_LAKE__FILE_RETENTION_MS", "2000".to_string()),
        ]
    }

    fn describe(&self) -> String {
        format!(
            "hot retention: ttl {} ms, checked every {} ms",
            self.log_ttl_ms, self.check_interval_ms
        )
    }
}

/// One trial's moving parts: the running `silt up`, the seed's plan, and what was found.
struct Trial<'a> {
    /// The seed's plan: faults, pauses and their parameters.
    rng: SmallRng,
    /// Arming and pauses of restarts, which follow aborts at moments no seed fixes: a stream
    /// of their own keeps the plan above the same whatever the timing.
    restart_rng: SmallRng,
    /// Draws added after the plan above was fixed (crashes at committer points, the second
    /// job's table), from a stream of their own, so that a seed's older draws stay the same.
    extra_rng: SmallRng,
    /// The committer point the next restart after a kill is armed to crash at.
    crash_next: Option<CommitPoint>,
    setup: SiltSetup,
    silt: Silt,
    starts: u32,
    disk: Option<&'a SmallDisk>,
    outcome: Outcome,
    /// Past the faults: no more armed starts.
    settling: bool,
    durability: Durability,
    retention: Option<Retention>,
    /// The disk is filled (a disk-full fault is on).
    disk_filled: bool,
    /// A disk-full fault struck in this trial: silt may stop on a storage failure.
    disk_faulted: bool,
    /// `silt up` exited and could not start again on the full disk: it starts once the disk has
    /// room again.
    down: bool,
    /// A power loss cut data under `fsync: never`, which acknowledges before the fsync: it may
    /// have taken acknowledged writes, so those are reported but not counted as lost.
    acked_losable: bool,
}

/// Draws whether a start aborts after a durable write, and after which.
fn draw_abort(rng: &mut SmallRng) -> Option<u64> {
    if !rng.random_bool(0.4) {
        return None;
    }
    Some(ABORT_AFTER_MAX.powf(rng.random::<f64>()).round().max(1.0) as u64)
}

impl Trial<'_> {
    /// Starts `silt up` again (the previous process is gone), on the same port and data.
    fn restart(&mut self) -> Result<()> {
        self.starts += 1;
        let armed = if self.settling {
            Armed::default()
        } else {
            Armed {
                abort_after: draw_abort(&mut self.restart_rng),
                crash_at: self.crash_next.take(),
            }
        };
        let starts = self.starts;
        let setup = &self.setup;
        if !self.disk_filled {
            let attempts = process::START_ATTEMPTS_MAX;
            self.silt = tokio::task::block_in_place(|| setup.start(starts, armed, attempts))?;
            return Ok(());
        }
        // A start on a full disk may fail (silt writes its catalog as it opens): then it
        // waits for the disk to have room, as an operator would.
        match tokio::task::block_in_place(|| setup.start(starts, armed, 1)) {
            Ok(silt) => self.silt = silt,
            Err(e) => {
                self.down = true;
                self.note(format!(
                    "silt up could not start on the full disk (started again once it had room): {}",
                    first_line(&format!("{e:#}"))
                ));
            }
        }
        Ok(())
    }

    /// When `silt up` exited by itself: counts why, and restarts it after a random pause.
    async fn reap(&mut self) -> Result<()> {
        if self.down {
            if !self.disk_filled {
                self.down = false;
                self.restart()?;
            }
            return Ok(());
        }
        let Some(exit) = self.silt.exited() else {
            return Ok(());
        };
        match exit {
            Exit::Aborted => {
                *self
                    .outcome
                    .faults
                    .entry(Fault::AbortAfterDurableWrite.name())
                    .or_default() += 1;
            }
            Exit::CommitCrash(point) => {
                *self.outcome.faults.entry(point.fault_name()).or_default() += 1;
            }
            Exit::StorageFailed(why) if self.disk_faulted => {
                // The designed fail-stop: a full disk poisoned the kv store (or failed an
                // fsync); the restart recovers from the changelog.
                *self
                    .outcome
                    .faults
                    .entry("stop-on-storage-failure")
                    .or_default() += 1;
                self.outcome
                    .notes
                    .push(format!("silt up stopped on its storage failure: {why}"));
            }
            Exit::StorageFailed(why) | Exit::Unexpected(why) => {
                self.outcome.unexpected_exits += 1;
                self.outcome
                    .notes
                    .push(format!("silt up exited by itself: {why}"));
            }
        }
        let pause = self.restart_rng.random_range(0..700);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        self.restart()
    }

    /// Lets the workload run for `duration`, restarting `silt up` whenever it exits.
    async fn watch(&mut self, duration: Duration) -> Result<()> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.reap().await?;
            let left = until.saturating_duration_since(Instant::now());
            tokio::time::sleep(Duration::from_millis(50).min(left)).await;
        }
        self.reap().await
    }

    /// Under `fsync: never` a write is acknowledged at once and readable (and tiered) from the
    /// next flush on: gives every acknowledged write two flushes to become visible, before what
    /// is stored is read (at the end of a trial, or before a table or partition is dropped).
    async fn await_acked_visible(&mut self) -> Result<()> {
        if self.durability.fsync != "never" {
            return Ok(());
        }
        let flushes = Duration::from_millis(2 * self.durability.flush_interval_ms);
        self.watch(flushes + Duration::from_millis(200)).await
    }

    /// Counts acknowledged rows (or primary keys) lost, unless a power loss under
    /// `fsync: never` was allowed to take them.
    fn count_lost(&mut self, table: &str, lost: u64) {
        if lost == 0 {
            return;
        }
        if self.acked_losable {
            self.note(format!(
                "{table}: {lost} acknowledged rows or keys lost, which a power loss under fsync: never may take (not counted)"
            ));
        } else {
            self.outcome.rows_lost += lost;
        }
    }

    fn count(&mut self, fault: Fault) {
        *self.outcome.faults.entry(fault.name()).or_default() += 1;
    }

    fn note(&mut self, note: String) {
        self.outcome.notes.push(note);
    }

    /// SIGKILL, a random pause while the clients retry into the closed port, and a restart.
    async fn kill_and_restart(&mut self, power_loss: bool) -> Result<()> {
        self.silt.kill();
        if power_loss {
            let tables = self.setup.data.join("hotstore").join("tables");
            match process::power_loss_is_sound(&tables) {
                Ok(()) => {
                    let cut = process::power_loss(&tables)
                        .with_context(|| format!("cutting {} back", tables.display()))?;
                    self.count(Fault::PowerLoss);
                    self.note(format!("power loss: {cut} unsynced bytes cut"));
                    if cut > 0 && self.durability.fsync == "never" {
                        self.acked_losable = true;
                    }
                }
                Err(why) => {
                    // The simulation would take durable data: a plain kill instead.
                    self.count(Fault::Kill);
                    self.note(format!("power loss not simulated ({why}); killed only"));
                }
            }
        } else {
            self.count(Fault::Kill);
        }
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..1000))).await;
        // Half the restarts after a kill crash again at the first tiering commit that reaches
        // a committer point: before the Delta commit (its files written) or right after it
        // (before the registry and the job's checkpoint hear of it).
        if !self.settling && self.extra_rng.random_bool(0.5) {
            self.crash_next = Some(if self.extra_rng.random_bool(0.5) {
                CommitPoint::BeforeCommit
            } else {
                CommitPoint::AfterCommit
            });
        }
        self.restart()
    }

    /// Awaits `work` while watching `silt up`, restarting it whenever it exits (an armed start
    /// may abort at any moment, and writes wait for it to be back).
    async fn drive<F: std::future::Future>(&mut self, work: F) -> Result<F::Output> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Ok(out),
                () = tokio::time::sleep(Duration::from_millis(100)) => self.reap().await?,
            }
        }
    }

    /// Runs `op` against `silt up` until it succeeds, restarting silt when it exited
    /// meanwhile; at most [`ADMIN_ATTEMPTS_MAX`] times, [`ADMIN_ATTEMPT_DEADLINE`] each.
    async fn admin<T, F, Fut>(&mut self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match tokio::time::timeout(ADMIN_ATTEMPT_DEADLINE, op()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => e,
                Err(_) => anyhow!("no answer within {ADMIN_ATTEMPT_DEADLINE:?}"),
            };
            if attempt >= ADMIN_ATTEMPTS_MAX {
                return Err(error.context(format!("{what} ({attempt} attempts)")));
            }
            self.reap().await?;
            tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
        }
    }

    /// As [`Trial::admin`], `op` given the admin of a fresh connection to `silt up` at each
    /// attempt.
    async fn with_admin<T>(
        &mut self,
        what: &str,
        op: impl AsyncFn(&fluss::client::FlussAdmin) -> Result<T>,
    ) -> Result<T> {
        let bootstrap = self.setup.bootstrap();
        self.admin(what, || async {
            let connection = silt_connectors::fluss::connect(&bootstrap).await?;
            let admin = connection.get_admin()?;
            op(&admin).await
        })
        .await
    }
}

/// What a seed fixes before `silt up` starts: the tables, the clients and the phases.
struct Plan {
    tables: Vec<TableSpec>,
    clients: Vec<ClientPlan>,
    pk_keys: i64,
    phases: i32,
    /// The partitioned tables and the tables dropped and created again of seeded shares of
    /// the trials, and what happens to them in each phase.
    extra: ExtraPlan,
}

async fn trial(
    seed: u64,
    dir: &Path,
    disk: Option<&SmallDisk>,
    options: &TrialsOptions,
) -> Result<Outcome> {
    let epoch = Instant::now();
    let (mut trial, plan) = set_up(seed, dir, disk)?;
    trial.outcome.retention_seeds = u64::from(trial.retention.is_some());
    let bootstrap = trial.setup.bootstrap();
    create_tables(&bootstrap, &plan.tables, &mut trial.rng).await?;
    let workload = start_workload(&mut trial, &plan, epoch).await?;
    let mut extra = ExtraTables::start(&mut trial, plan.extra, epoch).await?;
    let extra_specs = extra.specs();
    let mut probes = ProbeIds::default();
    for phase in 0..plan.phases as usize {
        let pause = Duration::from_millis(trial.rng.random_range(200..1200));
        trial.watch(pause).await?;
        let fault = pick_fault(&mut trial.rng, trial.disk.is_some());
        extra.step(&mut trial, phase, true).await?;
        inject(&mut trial, fault, &plan.tables, &extra_specs, &mut probes).await?;
        extra.step(&mut trial, phase, false).await?;
    }
    let writing = extra.take_open();
    let (records, extra_records) = settle(&mut trial, workload, writing, &plan.tables).await?;
    extra.finished(&mut trial, extra_records);
    if options.plant {
        plant(&bootstrap, &plan.tables, &mut probes).await?;
        extra.plant(&mut trial).await?;
    }
    trial.outcome.rows_acked = records.acked() + probes.acked() + extra.acked();
    check_tables(&mut trial, &plan.tables, &records, &probes, options).await?;
    extra.check(&mut trial, options).await?;
    let outcome = std::mem::take(&mut trial.outcome);
    drop(trial);
    Ok(outcome)
}

/// Starts the trial's workload on its tables, and notes how it writes.
async fn start_workload(trial: &mut Trial<'_>, plan: &Plan, epoch: Instant) -> Result<Workload> {
    let workload_plan = WorkloadPlan {
        tables: &plan.tables,
        clients: &plan.clients,
        pk_keys: plan.pk_keys,
        first_id: 0,
        thread_name: "trial-workload".into(),
    };
    let bootstrap = trial.setup.bootstrap();
    let workload = Workload::start(&bootstrap, &workload_plan, epoch, &mut trial.rng).await?;
    let described: Vec<String> = plan.clients.iter().map(ClientPlan::describe).collect();
    let retention = trial
        .retention
        .as_ref()
        .map(|r| format!("; {}", r.describe()))
        .unwrap_or_default();
    trial.note(format!(
        "{}{retention}; clients: {}; {} keys per primary-key table",
        trial.durability.describe(),
        described.join("; "),
        plan.pk_keys
    ));
    Ok(workload)
}

/// Draws the seed's plan and starts the first `silt up` (which may be armed: creating the
/// tables makes no durable write).
fn set_up<'a>(seed: u64, dir: &Path, disk: Option<&'a SmallDisk>) -> Result<(Trial<'a>, Plan)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut durability = Durability::draw(&mut rng);
    let retention = Retention::draw(seed);
    if let Some(retention) = &retention {
        durability.segment_bytes_max = retention.segment_bytes_max;
    }
    let mut settings = durability.settings();
    settings.extend(retention.iter().flat_map(Retention::settings));
    let setup = SiltSetup {
        data: dir.join("data"),
        dir: dir.to_path_buf(),
        control: dir.join("lake-faults"),
        listen: process::pick_port(&mut rng)?,
        settings,
    };
    std::fs::write(&setup.control, "ok")?;
    let tables = random_tables(&mut rng);
    let clients: Vec<ClientPlan> = (0..rng.random_range(2..4))
        .map(|i| ClientPlan::draw(i, &mut rng))
        .collect();
    let pk_keys = [20, 150, 1000][rng.random_range(0..3)];
    let phases = 3 + rng.random_range(0..3);
    let abort_after = draw_abort(&mut rng);
    let attempts = process::START_ATTEMPTS_MAX;
    let armed = Armed {
        abort_after,
        crash_at: None,
    };
    let silt = tokio::task::block_in_place(|| setup.start(0, armed, attempts))?;
    let extra = ExtraPlan::draw(seed, phases);
    let trial = Trial {
        restart_rng: SmallRng::seed_from_u64(rng.random()),
        extra_rng: SmallRng::seed_from_u64(seed ^ 0xE7_7A_C0_11),
        crash_next: None,
        rng,
        setup,
        silt,
        starts: 0,
        disk,
        outcome: Outcome::default(),
        settling: false,
        durability,
        retention,
        disk_filled: false,
        disk_faulted: false,
        down: false,
        acked_losable: false,
    };
    let plan = Plan {
        tables,
        clients,
        pk_keys,
        phases,
        extra,
    };
    Ok((trial, plan))
}

/// Ends the faults and lets every write resolve against a running silt, the extra tables'
/// workloads' (`extra`) too; notes writes never answered (a failure), refused, or retried
/// after a table lookup. Answers what the trial's workload and each of `extra` wrote.
async fn settle(
    trial: &mut Trial<'_>,
    workload: Workload,
    extra: Vec<(Workload, String)>,
    tables: &[TableSpec],
) -> Result<(Records, Vec<Records>)> {
    trial.settling = true;
    std::fs::write(&trial.setup.control, "ok")?;
    let armed = trial.silt.armed;
    if (armed.abort_after.is_some() || armed.crash_at.is_some()) && trial.silt.exited().is_none() {
        // Armed but not fired yet: a kill at a random moment instead.
        trial.kill_and_restart(false).await?;
    }
    trial.reap().await?;
    let finish = futures::future::join(
        workload.finish(RESOLVE_DEADLINE),
        futures::future::join_all(extra.into_iter().map(|(w, thread)| {
            w.finish_unless(RESOLVE_DEADLINE, move || clients::client_died(&thread))
        })),
    );
    let (records, partition_records) = trial.drive(finish).await?;
    note_unresolved(trial, &records, tables);
    if !records.errors.is_empty() {
        let refused: u64 = records.errors.values().sum();
        let (first, _) = records
            .errors
            .iter()
            .max_by_key(|(_, n)| **n)
            .expect("not empty");
        trial.note(format!(
            "{refused} writes refused by the client or server (most often: {first})"
        ));
    }
    trial.await_acked_visible().await?;
    if records.table_lookups > 0 {
        trial.note(format!(
            "clients looked a table up again {} times after fluss-rs forgot it on a restart",
            records.table_lookups
        ));
    }
    Ok((records, partition_records))
}

/// silt is up and the faults are over: every write should have been answered.
fn note_unresolved(trial: &mut Trial<'_>, records: &Records, tables: &[TableSpec]) {
    let unresolved = records.unresolved();
    if unresolved == 0 {
        return;
    }
    trial.outcome.fail("writes never answered");
    let mut per_table: BTreeMap<&str, u64> = BTreeMap::new();
    let log = records.log.iter().filter(|w| w.stamp.unresolved());
    let pk = records.pk.iter().filter(|w| w.stamp.unresolved());
    for t in log.map(|w| w.table).chain(pk.map(|w| w.table)) {
        *per_table.entry(tables[t].name.as_str()).or_default() += 1;
    }
    let per_table: Vec<String> = per_table.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let note = format!(
        "{unresolved} writes neither acknowledged nor refused {} s after the faults ended ({}); silt's log: {}",
        RESOLVE_DEADLINE.as_secs(),
        per_table.join(", "),
        trial.silt.log_excerpt()
    );
    trial.note(note);
}

/// Catches up and verifies every table, then judges the hot store against the writes.
async fn check_tables(
    trial: &mut Trial<'_>,
    tables: &[TableSpec],
    records: &Records,
    probes: &ProbeIds,
    options: &TrialsOptions,
) -> Result<()> {
    for (t, spec) in tables.iter().enumerate() {
        verify_caught_up(trial, &spec.name, options).await?;
        judge_table(trial, t, spec, records, probes).await?;
    }
    Ok(())
}

/// `silt verify` of one table once the lake caught up (a partitioned table's partitions the
/// hot store has), its differences counted as lost and duplicated rows.
async fn verify_caught_up(
    trial: &mut Trial<'_>,
    table: &str,
    options: &TrialsOptions,
) -> Result<()> {
    let bootstrap = trial.setup.bootstrap();
    let mut o = VerifyOptions::new(&bootstrap, lake_root(&trial.setup.data));
    o.deadline = options.catch_up;
    o.show_max = 5;
    let report = verify_table_with_retry(&bootstrap, table, &o).await?;
    if report.verdict != Verdict::Match {
        trial.outcome.fail("lake differs from the hot store");
        trial.outcome.rows_lost += report.missing as u64;
        trial.outcome.rows_duplicated += report.extra as u64;
        trial.note(report.render());
    }
    Ok(())
}

/// Probe writes during a full disk use ids far from the workload's; those acknowledged count
/// as acknowledged and must survive like any other.
#[derive(Debug)]
struct ProbeIds {
    next: i64,
    /// Per log table: (id, acknowledged).
    written: HashMap<String, Vec<(i64, bool)>>,
}

impl Default for ProbeIds {
    fn default() -> Self {
        ProbeIds {
            next: 1 << 40,
            written: HashMap::new(),
        }
    }
}

impl ProbeIds {
    fn take(&mut self, n: i64) -> Vec<i64> {
        let ids = (self.next..self.next + n).collect();
        self.next += n;
        ids
    }

    fn acked(&self) -> u64 {
        let acked = self.written.values().flatten().filter(|(_, ok)| *ok);
        acked.count() as u64
    }
}

/// Stores [`PLANTED_DUPLICATES`] rows twice (two writes of the same ids through a client
/// without idempotence) and records one id as acknowledged that was never written.
async fn plant(bootstrap: &str, tables: &[TableSpec], probes: &mut ProbeIds) -> Result<()> {
    let table = tables.iter().find(|t| !t.primary_key).expect("a log table");
    let ids = probes.take(PLANTED_DUPLICATES);
    for _ in 0..2 {
        if let Some(refused) = workload::probe_write(bootstrap, &table.name, &ids, 8).await? {
            bail!("planting duplicates: {}", refused.error);
        }
    }
    let never_written = probes.take(1)[0];
    let written = probes.written.entry(table.name.clone()).or_default();
    written.extend(ids.iter().map(|id| (*id, true)));
    written.push((never_written, true));
    Ok(())
}

/// Strikes with `fault` while the workload runs. `extra`: the trial's partitioned and
/// re-created tables, which a second job may pick and whose lake must stay a prefix while its
/// store is down.
async fn inject(
    trial: &mut Trial<'_>,
    fault: Fault,
    tables: &[TableSpec],
    extra: &[TableSpec],
    probes: &mut ProbeIds,
) -> Result<()> {
    // An armed silt may have aborted during the pause's last moments.
    trial.reap().await?;
    let control = trial.setup.control.clone();
    match fault {
        Fault::None => {
            trial.count(fault);
            let pause = Duration::from_millis(trial.rng.random_range(200..800));
            trial.watch(pause).await?;
        }
        Fault::Kill => trial.kill_and_restart(false).await?,
        Fault::PowerLoss => trial.kill_and_restart(true).await?,
        // Not drawn: it strikes by itself in armed starts, counted when it does.
        Fault::AbortAfterDurableWrite => {}
        Fault::SecondJob => {
            trial.count(fault);
            second_job_fault(trial, tables, extra).await;
        }
        Fault::StoreTransient => {
            trial.count(fault);
            std::fs::write(&control, format!("fail {}", trial.rng.random_range(1..6)))?;
            let pause = Duration::from_millis(trial.rng.random_range(300..1000));
            trial.watch(pause).await?;
            // Over: a restarted silt must not read the same command again.
            std::fs::write(&control, "ok")?;
        }
        Fault::StoreDown => {
            trial.count(fault);
            std::fs::write(&control, "down")?;
            let pause = Duration::from_millis(trial.rng.random_range(500..2000));
            trial.watch(pause).await?;
            check_prefix_while_store_down(trial, tables.iter().chain(extra)).await;
            std::fs::write(&control, "ok")?;
        }
        Fault::DiskFull | Fault::DiskNearlyFull => {
            trial.count(fault);
            disk_full(trial, fault, tables, probes).await?;
        }
    }
    Ok(())
}

/// Starts a second tiering job on a random table (an extra one half the time, when there are
/// some) and notes what it did.
async fn second_job_fault(trial: &mut Trial<'_>, tables: &[TableSpec], extra: &[TableSpec]) {
    let bootstrap = trial.setup.bootstrap();
    let data = trial.setup.data.clone();
    let mut table = &tables[trial.rng.random_range(0..tables.len())];
    if !extra.is_empty() && trial.extra_rng.random_bool(0.5) {
        table = &extra[trial.extra_rng.random_range(0..extra.len())];
    }
    let note = match second_job(&bootstrap, &data, &trial.setup.dir, table, &mut trial.rng).await {
        Ok(note) => note,
        // An armed silt may abort meanwhile: the second job then cannot start.
        Err(e) => format!("second job on {}: {e:#}", table.name),
    };
    trial.note(note);
}

/// Nothing partial may be visible while the store fails: the lake at its current version is a
/// consistent prefix of every table's changelog.
async fn check_prefix_while_store_down<'t>(
    trial: &mut Trial<'_>,
    tables: impl Iterator<Item = &'t TableSpec>,
) {
    let bootstrap = trial.setup.bootstrap();
    let data = trial.setup.data.clone();
    for t in tables {
        let mut o = VerifyOptions::new(&bootstrap, lake_root(&data));
        o.wait_for_lake = false;
        o.show_max = 3;
        match verify_table_with_retry(&bootstrap, &t.name, &o).await {
            Ok(r) if r.verdict == Verdict::Match => {}
            Ok(r) => {
                trial
                    .outcome
                    .fail("lake not a prefix while its store is down");
                trial.note(format!(
                    "store down: the lake of {} is not a prefix of its changelog:\n{}",
                    t.name,
                    r.render()
                ));
            }
            Err(e) => trial.note(format!("store down: could not check {}: {e:#}", t.name)),
        }
    }
}

/// Fills the disk (to nothing free, or a few KiB), probes how a write is refused, then frees
/// it again.
async fn disk_full(
    trial: &mut Trial<'_>,
    fault: Fault,
    tables: &[TableSpec],
    probes: &mut ProbeIds,
) -> Result<()> {
    let bootstrap = trial.setup.bootstrap();
    let free_bytes = if fault == Fault::DiskFull {
        0
    } else {
        [4u64 << 10, 16 << 10, 64 << 10][trial.rng.random_range(0..3)]
    };
    let disk = trial.disk.expect("picked only with a disk");
    let filler = disk.fill(free_bytes)?;
    trial.disk_filled = true;
    trial.disk_faulted = true;
    let log_table = tables.iter().find(|t| !t.primary_key).expect("a log table");
    // A large write through a client that does not retry shows what the server says;
    // then, with a few KiB free, a small one that may still fit.
    let mut sizes = vec![2000];
    if free_bytes > 0 {
        sizes.push(1);
    }
    for n in sizes {
        let ids = probes.take(n);
        let probe = workload::probe_write(&bootstrap, &log_table.name, &ids, 40).await;
        let acked: Vec<bool> = match &probe {
            Ok(None) => vec![true; ids.len()],
            Ok(Some(refused)) => refused.acked.clone(),
            Err(_) => vec![false; ids.len()],
        };
        let written = probes.written.entry(log_table.name.clone()).or_default();
        written.extend(ids.iter().copied().zip(acked));
        // A lost connection is given a few seconds to turn out to be a stop.
        let connection_lost =
            matches!(&probe, Ok(Some(refused)) if refused.error.contains("rpc error"));
        let stopped = silt_stopped(trial, connection_lost).await;
        let note = disk_probe_note(fault, free_bytes, n, &probe, stopped, &mut trial.outcome);
        trial.note(note);
    }
    let pause = Duration::from_millis(trial.rng.random_range(500..1500));
    trial.watch(pause).await?;
    std::fs::remove_file(&filler)?;
    trial.disk_filled = false;
    trial.reap().await?;
    Ok(())
}

/// Whether silt is down: it may have stopped on the full disk (see `Exit::StorageFailed`), or
/// an armed abort may have fired; then nobody answered a probe, which says nothing about how
/// it refuses. After a `connection_lost`, waits up to 5 s for such a stop.
async fn silt_stopped(trial: &mut Trial<'_>, connection_lost: bool) -> bool {
    let mut stopped = trial.down;
    for _ in 0..50 {
        if let Some(exit) = trial.silt.exited() {
            stopped |= matches!(
                exit,
                process::Exit::StorageFailed(_) | process::Exit::Aborted
            );
            break;
        }
        if !connection_lost {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stopped
}

/// What a probe write on a full disk found; a refusal that does not name the disk counts as a
/// verify failure.
fn disk_probe_note(
    fault: Fault,
    free_bytes: u64,
    rows: i64,
    probe: &Result<Option<ProbeRefused>>,
    silt_stopped: bool,
    outcome: &mut Outcome,
) -> String {
    let what = format!("{} ({free_bytes} B free): a {rows}-row write", fault.name());
    match probe {
        Ok(None) => format!("{what} was acknowledged (it fit)"),
        Ok(Some(ProbeRefused { error, .. })) if silt_stopped => format!(
            "{what} was not answered: silt stopped (its storage failed, or an armed abort fired): {}",
            first_line(error)
        ),
        Ok(Some(ProbeRefused { error, .. })) => {
            let lower = error.to_lowercase();
            let named = ["space", "disk", "storage", "full"]
                .iter()
                .any(|w| lower.contains(w));
            if !named {
                outcome.fail("full disk refused without naming it");
            }
            format!(
                "{what} was refused{}: {}",
                if named {
                    ""
                } else {
                    " WITHOUT naming the disk"
                },
                first_line(error)
            )
        }
        Err(e) => format!("{what} could not run: {e:#}"),
    }
}

fn lake_root(data: &Path) -> String {
    data.join("lake").to_string_lossy().to_string()
}

async fn verify_table_with_retry(
    bootstrap: &str,
    table: &str,
    options: &VerifyOptions,
) -> Result<silt_jobs::verify::TableReport> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    verify_table(&connection, DB, table, options).await
}

fn pick_fault(rng: &mut SmallRng, disk: bool) -> Fault {
    let disk = if disk { 1 } else { 0 };
    let kinds = [
        (Fault::None, 1),
        (Fault::Kill, 3),
        (Fault::PowerLoss, 3),
        (Fault::SecondJob, 1),
        (Fault::StoreTransient, 1),
        (Fault::StoreDown, 1),
        (Fault::DiskFull, disk),
        (Fault::DiskNearlyFull, 2 * disk),
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
    for (prefix, primary_key, count) in [("log", false, logs), ("pk", true, pks)] {
        for i in 0..count {
            out.push(TableSpec {
                name: format!("{prefix}{i}"),
                primary_key,
                buckets: rng.random_range(1..5),
                day: None,
            });
        }
    }
    out
}

/// The columns of a trial table: a primary-key table's versioned rows, or a log table's
/// events. A partitioned table adds its partition column.
fn trial_columns(primary_key: bool) -> SchemaBuilder {
    if primary_key {
        Schema::builder()
            .column("id", DataTypes::bigint())
            .column("ver", DataTypes::bigint())
            .column("score", DataTypes::bigint())
            .column("note", DataTypes::string())
    } else {
        Schema::builder()
            .column("id", DataTypes::bigint())
            .column("n", DataTypes::int())
            .column("payload", DataTypes::string())
    }
}

/// An unpartitioned lake-enabled trial table, tiered every `freshness_ms`.
fn table_descriptor(spec: &TableSpec, freshness_ms: u64) -> Result<TableDescriptor> {
    let schema = if spec.primary_key {
        trial_columns(true).primary_key(vec!["id"])?.build()?
    } else {
        trial_columns(false).build()?
    };
    let keys = if spec.primary_key {
        vec!["id".to_string()]
    } else {
        vec![]
    };
    Ok(TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(spec.buckets), keys)
        .property(DATALAKE_ENABLED, "true")
        .property(DATALAKE_FRESHNESS, format!("{freshness_ms}ms"))
        .build()?)
}

async fn create_tables(bootstrap: &str, tables: &[TableSpec], rng: &mut SmallRng) -> Result<()> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let admin = connection.get_admin()?;
    admin.create_database(DB, None, true).await?;
    for t in tables {
        let descriptor = table_descriptor(t, rng.random_range(200..700))?;
        admin
            .create_table(&TablePath::new(DB, &t.name), &descriptor, false)
            .await
            .with_context(|| format!("creating {DB}.{}", t.name))?;
    }
    Ok(())
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

/// Judges one table of the hot store against what was written to it, adding to the trial's
/// outcome; every lost or duplicated row is shown with the stored batch of each of its copies.
async fn judge_table(
    trial: &mut Trial<'_>,
    t: usize,
    spec: &TableSpec,
    records: &Records,
    probes: &ProbeIds,
) -> Result<()> {
    let bootstrap = trial.setup.bootstrap();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let table_id = connection
        .get_admin()?
        .get_table_info(&TablePath::new(DB, &spec.name))
        .await?
        .table_id;
    let view = HotView::read(
        &trial.setup.data,
        &connection,
        &bootstrap,
        spec,
        table_id,
        None,
    )
    .await?;
    let mut written = Written::default();
    for w in records.log.iter().filter(|w| w.table == t) {
        written.log.insert(w.id, w.stamp.acked_us.is_some());
        written.origins.insert(w.id, (w.origin, w.stamp.acked_us));
    }
    for &(id, acked) in probes.written.get(&spec.name).into_iter().flatten() {
        written.log.insert(id, acked);
    }
    written.pk = records
        .pk
        .iter()
        .filter(|w| w.table == t)
        .copied()
        .collect();
    judge_view(trial, &spec.name, spec.primary_key, &view, &written)
}

/// What the hot store holds of one table, or of one partition of a partitioned table: its
/// changelog from each bucket's log start up to its high watermark, and below each log start
/// the lake's rows (hot retention deleted them in the hot store). Buckets are those of the
/// table, or of the partition.
struct HotView {
    batches: Vec<RecordBatch>,
    read_up_to: BTreeMap<i32, i64>,
    log_start: BTreeMap<i32, i64>,
    below: BelowLogStart,
    stored: StoredLog,
}

impl HotView {
    /// Reads the view of `spec` (table `table_id`), or of its partition `(id, name)`.
    async fn read(
        data: &Path,
        connection: &FlussConnection,
        bootstrap: &str,
        spec: &TableSpec,
        table_id: i64,
        partition: Option<(i64, &str)>,
    ) -> Result<HotView> {
        let (batches, read_up_to, log_start) =
            hot_changelog(connection, bootstrap, spec, partition).await?;
        let partition_id = partition.map(|(id, _)| id);
        let below = lake_rows_below(data, spec, table_id, partition_id, &log_start).await?;
        let stored = StoredLog::read(data, table_id, partition_id, spec.buckets);
        Ok(HotView {
            batches,
            read_up_to,
            log_start,
            below,
            stored,
        })
    }

    /// Every row of a log table's view: where it is stored (or, below the log start, where
    /// the lake says it was) and its id.
    fn log_rows(&self) -> Result<Vec<(Place, i64)>> {
        let mut rows = log_rows(&self.batches)?;
        rows.extend(log_rows(&self.below.batches)?);
        Ok(rows)
    }

    /// Every change of a primary-key table's view, above the log starts.
    fn pk_changes(&self) -> Result<Vec<Change>> {
        pk_changes(&self.batches)
    }
}

/// What was written to one table (or one partition): per log id, whether it was acknowledged
/// and, for the workload's writes, by whom and when; every primary-key op.
#[derive(Debug, Default)]
struct Written {
    log: HashMap<i64, bool>,
    origins: HashMap<i64, (Origin, Option<u64>)>,
    pk: Vec<PkWrite>,
}

/// Judges a view of the hot store against what was written to it, adding to the trial's
/// outcome. `name` names the table (or partition) in the notes.
fn judge_view(
    trial: &mut Trial<'_>,
    name: &str,
    primary_key: bool,
    view: &HotView,
    written: &Written,
) -> Result<()> {
    for problem in &view.below.problems {
        trial.outcome.fail("hot retention passed the lake");
        trial.note(format!("{name}: {problem}"));
    }
    trial.outcome.buckets_cut += view.log_start.values().filter(|s| **s > 0).count() as u64;
    trial.outcome.rows_below_log_start += view
        .below
        .batches
        .iter()
        .map(|b| b.num_rows() as u64)
        .sum::<u64>();
    let stored = &view.stored;
    for problem in stored.problems.iter().take(SHOW_MAX) {
        trial.note(format!("{name}: reading the stored batches: {problem}"));
    }
    // Whether the stored logs hold more than was readable: rows "lost" may lie beyond the
    // high watermark.
    let ends: Vec<String> = view
        .read_up_to
        .iter()
        .filter_map(|(bucket, hw)| {
            let end = stored.end(*bucket)?;
            (end != *hw).then(|| format!("bucket {bucket}: read up to {hw}, stored up to {end}"))
        })
        .collect();
    if !ends.is_empty() {
        trial.note(format!(
            "{name}: the high watermark is not the stored log end: {}",
            ends.join("; ")
        ));
    }
    // (lost, extra copies, what fails the trial if anything, the notes)
    let (lost, extra_copies, failure, notes) = if primary_key {
        let changes = view.pk_changes()?;
        let initial = lake_images(&view.below.batches)?;
        let findings = check::check_pk(&initial, &changes, &written.pk, &view.log_start);
        (
            findings.wrong.len(),
            findings.extra_copies(),
            (!findings.inconsistent.is_empty()).then_some("changelog disagrees with itself"),
            report_pk(name, &findings, &changes, &written.pk, stored),
        )
    } else {
        let rows = view.log_rows()?;
        let findings = check::check_log(&rows, &written.log);
        (
            findings.lost.len(),
            findings.extra_copies(),
            (!findings.phantom.is_empty()).then_some("rows no one wrote"),
            report_log(name, &findings, &rows, &written.origins, stored),
        )
    };
    trial.count_lost(name, lost as u64);
    trial.outcome.rows_duplicated += extra_copies;
    if let Some(failure) = failure {
        trial.outcome.fail(failure);
    }
    trial.outcome.notes.extend(notes);
    Ok(())
}

/// Lost, duplicated and phantom rows of a log table, each with the stored batches involved.
fn report_log(
    name: &str,
    findings: &LogFindings,
    rows: &[(Place, i64)],
    origins: &HashMap<i64, (Origin, Option<u64>)>,
    stored: &StoredLog,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !findings.duplicated.is_empty() {
        // Rows whose copies lie in the same batches are one finding: a batch stored twice.
        let mut groups: BTreeMap<Vec<(i32, i64)>, Vec<i64>> = BTreeMap::new();
        for (id, copies) in &findings.duplicated {
            let batches = copies
                .iter()
                .map(|c| {
                    let base = stored.batch_of(c.bucket, c.offset);
                    (c.bucket, base.map_or(-1, |b| b.header.base_offset))
                })
                .collect();
            groups.entry(batches).or_default().push(*id);
        }
        notes.push(format!(
            "{}: {} rows stored more than once ({} extra copies), in {} sets of batches:",
            name,
            findings.duplicated.len(),
            findings.extra_copies(),
            groups.len()
        ));
        for ids in groups.values().take(SHOW_MAX) {
            let first = ids[0];
            notes.push(format!(
                "  ids {} ({} rows{}); copies of id {first}:",
                id_ranges(ids),
                ids.len(),
                origin_of(origins, first)
            ));
            for c in &findings.duplicated[&first] {
                notes.push(format!("    {}", stored.describe_copy(c.bucket, c.offset)));
            }
        }
    }
    if !findings.lost.is_empty() {
        notes.push(format!(
            "{}: {} acknowledged rows missing from the hot store: ids {}",
            name,
            findings.lost.len(),
            id_ranges(&findings.lost)
        ));
        // No copy to show: show where the same task's nearest rows were stored.
        let stored_at: HashMap<i64, Place> = rows.iter().map(|(p, id)| (*id, *p)).collect();
        for run in runs(&findings.lost).into_iter().take(SHOW_MAX) {
            notes.push(format!(
                "  ids {}..={}{}: no stored copy; the same task's nearest stored rows: {}",
                run.0,
                run.1,
                origin_of(origins, run.0),
                nearest_stored(run, origins, &stored_at, stored)
            ));
        }
    }
    for (id, at) in findings.phantom.iter().take(SHOW_MAX) {
        notes.push(format!(
            "{}: id {id} was never written, yet is stored at {}",
            name,
            stored.describe_copy(at.bucket, at.offset)
        ));
    }
    notes
}

fn origin_of(origins: &HashMap<i64, (Origin, Option<u64>)>, id: i64) -> String {
    match origins.get(&id) {
        Some((o, Some(acked))) => {
            format!(", client {} task {}, acked at {acked} us", o.client, o.task)
        }
        Some((o, None)) => format!(", client {} task {}, not acked", o.client, o.task),
        None => ", a probe write".into(),
    }
}

/// Where the rows written by the same task just before and just after `run` are stored.
fn nearest_stored(
    run: (i64, i64),
    origins: &HashMap<i64, (Origin, Option<u64>)>,
    stored_at: &HashMap<i64, Place>,
    stored: &StoredLog,
) -> String {
    let Some((origin, _)) = origins.get(&run.0) else {
        return "unknown (a probe write)".into();
    };
    let same_task = |id: &i64| origins.get(id).is_some_and(|(o, _)| o == origin);
    let before = origins
        .keys()
        .filter(|id| **id < run.0 && same_task(id) && stored_at.contains_key(id))
        .max();
    let after = origins
        .keys()
        .filter(|id| **id > run.1 && same_task(id) && stored_at.contains_key(id))
        .min();
    let describe = |id: Option<&i64>| match id {
        Some(id) => {
            let at = stored_at[id];
            format!("id {id} at {}", stored.describe_copy(at.bucket, at.offset))
        }
        None => "none".into(),
    };
    format!("before: {}; after: {}", describe(before), describe(after))
}

/// Consecutive runs of sorted ids.
fn runs(ids: &[i64]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == id => *end = id,
            _ => out.push((id, id)),
        }
    }
    out
}

fn id_ranges(ids: &[i64]) -> String {
    let runs = runs(ids);
    let shown: Vec<String> = runs
        .iter()
        .take(8)
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}..={b}")
            }
        })
        .collect();
    let more = if runs.len() > 8 {
        format!(" and {} more runs", runs.len() - 8)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}

/// Wrong keys, images stored twice and an inconsistent changelog of a primary-key table, with
/// the stored batches involved.
fn report_pk(
    name: &str,
    findings: &PkFindings,
    changes: &[Change],
    ops: &[PkWrite],
    stored: &StoredLog,
) -> Vec<String> {
    let mut notes = Vec::new();
    let (wrong, duplicated) = (findings.wrong.len(), findings.duplicated.len());
    if wrong > 0 {
        notes.push(format!(
            "{name}: {wrong} keys contradict their acknowledged writes:"
        ));
    }
    for w in findings.wrong.iter().take(SHOW_MAX) {
        notes.extend(wrong_key_notes(w, changes, stored));
    }
    if duplicated > 0 {
        let extra = findings.extra_copies();
        notes.push(format!(
            "{name}: {duplicated} images stored more than once ({extra} extra copies):"
        ));
    }
    for (ver, (key, copies)) in findings.duplicated.iter().take(SHOW_MAX) {
        let who = ops.iter().find(|o| o.ver == *ver);
        let who = who.map_or("an op never written".into(), |o| {
            let acked = if o.stamp.acked_us.is_some() {
                "acked"
            } else {
                "not acked"
            };
            format!("{}, {acked}", check::describe(o))
        });
        notes.push(format!("  key {key} ver {ver} ({who}):"));
        for c in copies {
            notes.push(format!("    {}", stored.describe_copy(c.bucket, c.offset)));
        }
    }
    let inconsistent = findings.inconsistent.len();
    if inconsistent > 0 {
        notes.push(format!(
            "{name}: the changelog disagrees with itself in {inconsistent} records:"
        ));
        for line in findings.inconsistent.iter().take(SHOW_MAX) {
            notes.push(format!("  {line}"));
        }
    }
    notes
}

/// A wrong key's notes: why, where its final image is stored, and where the images of the op
/// it should not have hidden are.
fn wrong_key_notes(w: &check::WrongKey, changes: &[Change], stored: &StoredLog) -> Vec<String> {
    let mut notes = vec![format!("  key {}: {}", w.key, w.reason)];
    if let Some((_, at)) = w.image {
        let copy = stored.describe_copy(at.bucket, at.offset);
        notes.push(format!("    final image: {copy}"));
    }
    if let Some(culprit) = &w.culprit {
        let at: Vec<Place> = changes
            .iter()
            .filter(|c| c.ver == Some(culprit.ver) && c.change.is_upsert())
            .map(|c| c.at)
            .collect();
        let op = check::describe(culprit);
        if at.is_empty() {
            notes.push(format!("    {op}: no stored image carries its ver"));
        }
        for c in at {
            let copy = stored.describe_copy(c.bucket, c.offset);
            notes.push(format!("    {op} stored: {copy}"));
        }
    }
    notes
}

/// Every row of a log table's changelog: where it is stored and its id.
fn log_rows(batches: &[RecordBatch]) -> Result<Vec<(Place, i64)>> {
    let mut rows = Vec::new();
    for b in batches {
        let buckets = i64_column(b, BUCKET_COLUMN)?;
        let offsets = i64_column(b, OFFSET_COLUMN)?;
        let ids = i64_column(b, "id")?;
        for i in 0..b.num_rows() {
            let at = Place {
                bucket: buckets.value(i) as i32,
                offset: offsets.value(i),
            };
            rows.push((at, ids.value(i)));
        }
    }
    Ok(rows)
}

/// Every record of a primary-key table's changelog.
fn pk_changes(batches: &[RecordBatch]) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    for b in batches {
        changes.extend(pk_rows(b, Some("__change_type"))?);
    }
    Ok(changes)
}

/// The rows of a primary-key table's batch as changes: of the type its column
/// `change_type_column` says, or without one (a lake's rows), inserts.
fn pk_rows(b: &RecordBatch, change_type_column: Option<&str>) -> Result<Vec<Change>> {
    let buckets = i64_column(b, BUCKET_COLUMN)?;
    let offsets = i64_column(b, OFFSET_COLUMN)?;
    let ids = i64_column(b, "id")?;
    let vers = i64_column(b, "ver")?;
    let kinds = match change_type_column {
        Some(name) => Some(
            b.column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
                .context(name.to_string())?,
        ),
        None => None,
    };
    (0..b.num_rows())
        .map(|i| {
            Ok(Change {
                at: Place {
                    bucket: buckets.value(i) as i32,
                    offset: offsets.value(i),
                },
                key: ids.value(i),
                change: match kinds {
                    Some(kinds) => ChangeType::from_i8(kinds.value(i)).context("change type")?,
                    None => ChangeType::Insert,
                },
                ver: (!vers.is_null(i)).then(|| vers.value(i)),
            })
        })
        .collect()
}

/// The changelog of every bucket (of the table, or of its partition `(id, name)`) from its log
/// start up to its high watermark, those high watermarks and those log starts. Hot retention
/// may move a log start while this reads (the read then fails out of range): it reads again
/// from the new starts.
async fn hot_changelog(
    connection: &FlussConnection,
    bootstrap: &str,
    spec: &TableSpec,
    partition: Option<(i64, &str)>,
) -> Result<(Vec<RecordBatch>, BTreeMap<i32, i64>, BTreeMap<i32, i64>)> {
    const READS_MAX: u32 = 20;
    let admin = connection.get_admin()?;
    let path = TablePath::new(DB, &spec.name);
    let ids: Vec<i32> = (0..spec.buckets).collect();
    let offsets = |which: OffsetSpec| {
        let (admin, path, ids) = (&admin, &path, &ids);
        async move {
            let listed = match partition {
                None => admin.list_offsets(path, ids, which).await?,
                Some((_, name)) => admin.list_partition_offsets(path, name, ids, which).await?,
            };
            Ok::<_, anyhow::Error>(
                ids.iter()
                    .map(|b| (*b, listed.get(b).copied().unwrap_or(0)))
                    .collect::<BTreeMap<i32, i64>>(),
            )
        }
    };
    let keyed = |offsets: &BTreeMap<i32, i64>| -> BTreeMap<BucketKey, i64> {
        offsets
            .iter()
            .map(|(b, o)| {
                let key = BucketKey {
                    partition: partition.map(|(id, _)| id),
                    bucket: *b,
                };
                (key, *o)
            })
            .collect()
    };
    let end = offsets(OffsetSpec::Latest).await?;
    let mut reads = 0;
    loop {
        reads += 1;
        let start = offsets(OffsetSpec::Earliest).await?;
        match read_changelog(
            bootstrap,
            None,
            DB,
            &spec.name,
            keyed(&start),
            keyed(&end),
            Duration::from_secs(30),
        )
        .await
        {
            Ok(batches) => return Ok((batches, end, start)),
            // Retention moved a log start while it read: read again from the new start.
            Err(e) if reads < READS_MAX && silt_connectors::fluss::log_start_moved(&e) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A table's lake rows below each bucket's log start, and what is wrong about them.
struct BelowLogStart {
    batches: Vec<RecordBatch>,
    /// Buckets whose log start lies beyond the lake's txn offset: retention deleted rows the
    /// lake never got.
    problems: Vec<String>,
}

/// Reads the lake's rows below each bucket's log start (of the table, or of its partition
/// `partition`), with deltalake's table provider at the lake's newest version (whose txn
/// offsets are past every log start: retention never cuts beyond what the lake covered).
async fn lake_rows_below(
    data: &Path,
    spec: &TableSpec,
    table_id: i64,
    partition: Option<i64>,
    log_start: &BTreeMap<i32, i64>,
) -> Result<BelowLogStart> {
    let mut below = BelowLogStart {
        batches: Vec::new(),
        problems: Vec::new(),
    };
    if log_start.values().all(|s| *s <= 0) {
        return Ok(below);
    }
    let uri = format!("{}/{DB}/{}", lake_root(data), spec.name);
    let none = HashMap::new();
    let key = |bucket: i32| BucketKey { partition, bucket };
    let buckets: Vec<BucketKey> = (0..spec.buckets).map(key).collect();
    let lake = read_lake_offsets(&uri, &none, &table_id.to_string(), &buckets)
        .await
        .with_context(|| format!("reading the lake offsets of {}", spec.name))?;
    let Some(lake) = lake else {
        below.problems.push(format!(
            "log starts {log_start:?} moved, yet the table has no lake"
        ));
        return Ok(below);
    };
    for (bucket, start) in log_start {
        let covered = lake.bucket_offsets.get(&key(*bucket)).copied().unwrap_or(0);
        if *start > covered {
            below.problems.push(format!(
                "{}: log start {start} lies beyond the lake's txn offset {covered} (lake \
                 version {})",
                key(*bucket),
                lake.delta_version
            ));
        }
    }
    for batch in read_lake(&uri, &none, lake.delta_version).await? {
        let buckets = i64_column(&batch, BUCKET_COLUMN)?;
        let offsets = i64_column(&batch, OFFSET_COLUMN)?;
        let partitions = match partition {
            Some(_) => Some(i64_column(&batch, PARTITION_ID_COLUMN)?),
            None => None,
        };
        let keep: BooleanArray = (0..batch.num_rows())
            .map(|i| {
                let ours = partitions
                    .as_ref()
                    .is_none_or(|p| Some(p.value(i)) == partition);
                let start = log_start.get(&(buckets.value(i) as i32)).copied();
                Some(ours && offsets.value(i) < start.unwrap_or(0))
            })
            .collect();
        below
            .batches
            .push(arrow::compute::filter_record_batch(&batch, &keep)?);
    }
    Ok(below)
}

/// A primary-key lake's rows as the images they are (each at the offset of its key's last
/// change).
fn lake_images(batches: &[RecordBatch]) -> Result<Vec<Change>> {
    let mut images = Vec::new();
    for b in batches {
        images.extend(pk_rows(b, None)?);
    }
    Ok(images)
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
