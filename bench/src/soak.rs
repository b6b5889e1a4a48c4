//! `silt bench soak`: a steady load for minutes or hours, sampled, with the slope of every
//! figure per hour. Measured, not asserted.
//!
//! `silt up` runs as a child process over its own data directory, so its resident set is its
//! own. Through fluss-rs, one writer task appends `log_rate` rows per second to a log table and
//! another upserts `upsert_rate` rows per second into a primary-key table (keys drawn from
//! `pk_keys`, a tenth of them deletes), both lake-enabled with `freshness` and `buckets`
//! buckets. Every `sample_every` the bench records: the child's RSS, the hot store's bytes on
//! disk, the lake's Parquet and deletion-vector files on disk, the files its tables reference
//! now and its `_delta_log` entries, the key index's bytes, the tiering lag (from
//! `GET /v1/tables`), and the latency of
//! `SELECT count(*)` on `t$lake` and on `t` (through `POST /v1/query`); a thread reads the RSS
//! every `rss_every` too, and `rss_avg` is the mean of those reads over the sample's interval.
//! At the end it prints every sample and, per figure, the least-squares slope per hour over
//! the samples after `warmup`, also as a percentage of the figure's mean, and whether
//! `rss_avg`'s slope meets the target (at most 1% an hour),
//! and the result of `silt verify --all` once the writers stopped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use silt_jobs::tiering::{DATALAKE_ENABLED, DATALAKE_FRESHNESS};

use crate::procfs::status_field;
use crate::report::{Table, say};

const DB: &str = "soak";
const LOG_TABLE: &str = "events";
const PK_TABLE: &str = "users";

/// The flags of `silt bench soak`.
#[derive(Debug, Clone, clap::Args)]
pub struct SoakOptions {
    /// How long the load runs, e.g. 30min or 2h.
    #[arg(long, default_value = "30min", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub duration: Duration,
    /// Time between samples.
    #[arg(long, default_value = "60s", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub sample_every: Duration,
    /// Time between reads of the resident set; each sample's `rss_avg` is the mean of the
    /// reads since the previous sample, so a flush cycle shorter than `sample_every` does not
    /// alias into the slope as a point read can.
    #[arg(long, default_value = "2s", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub rss_every: Duration,
    /// Samples before this are left out of the slopes.
    #[arg(long, default_value = "10min", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub warmup: Duration,
    /// Rows appended to the log table per second.
    #[arg(long, default_value_t = 10_000)]
    pub log_rate: u64,
    /// Upserts (and deletes, one in ten) into the primary-key table per second.
    #[arg(long, default_value_t = 1_000)]
    pub upsert_rate: u64,
    /// Distinct keys of the primary-key table.
    #[arg(long, default_value_t = 100_000)]
    pub pk_keys: u64,
    #[arg(long, default_value_t = 4)]
    pub buckets: i32,
    /// `table.datalake.freshness` of both tables.
    #[arg(long, default_value = "1s", value_parser = silt_jobs::cli::parse_duration_flag)]
    pub freshness: Duration,
    /// `table.log.ttl` of both tables (Fluss duration, e.g. `2 min`); unset: the server's
    /// default. Pair it with a small `SILT_HOTSTORE__SEGMENT_BYTES_MAX` and
    /// `SILT_HOTSTORE__RETENTION_CHECK_INTERVAL_MS` to see retention inside a short run.
    #[arg(long)]
    pub log_ttl: Option<String>,
    /// Keep `silt up`'s data directory here instead of a temporary one.
    #[arg(long = "soak-dir")]
    pub data_dir: Option<PathBuf>,
    /// Extra environment for `silt up`, KEY=VALUE (repeatable), e.g. SILT_HOTSTORE__FSYNC=never.
    #[arg(long = "silt-env", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// Run `silt up` under this command, e.g. "heaptrack -o /tmp/silt" (split on spaces; RSS
    /// is then the wrapper's).
    #[arg(long)]
    pub wrapper: Option<String>,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

/// One sample of every figure.
#[derive(Debug, Clone, Default)]
struct Sample {
    at_s: f64,
    rss_mb: f64,
    /// The mean of the resident set read every `rss_every` since the previous sample.
    rss_avg_mb: f64,
    /// Of the resident set, pages of mapped files (the binary).
    rss_file_mb: f64,
    /// What the heap holds live (jemalloc's `stats.allocated` less what the threads' caches
    /// hold, `GET /v1/memory`).
    heap_mb: f64,
    /// Of it, the block caches of the hot kv store and of the key indexes (each filling up to
    /// its capacity) and their memtables (`GET /v1/memory`).
    cache_mb: f64,
    memtable_mb: f64,
    /// What jemalloc holds resident (`stats.resident`): the live heap, its fragmentation and
    /// the freed pages it has not returned yet. Anonymous memory beyond it is what jemalloc
    /// does not manage (C libraries' malloc, thread stacks).
    allocator_resident_mb: f64,
    /// Of it, pages holding objects (`stats.active`: the live heap, the threads' caches and
    /// the free space inside partly used pages), and freed objects the threads' caches keep
    /// (`tcache_bytes`).
    allocator_active_mb: f64,
    thread_cache_mb: f64,
    /// The C library's malloc: in use and kept free in its arenas (glibc only).
    c_malloc_mb: f64,
    c_malloc_free_mb: f64,
    hot_mb: f64,
    lake_files: f64,
    /// Files the current versions of both lake tables reference (what queries plan over).
    lake_active: f64,
    lake_mb: f64,
    delta_log_entries: f64,
    key_index_mb: f64,
    lag_s: f64,
    /// Sum over both tables' buckets of the hot log start offset, in thousands (retention
    /// moves it).
    hot_start_k: f64,
    lake_count_ms: f64,
    view_count_ms: f64,
    /// The 99th percentile of each table's recent lake commits (`GET /v1/tables`).
    log_commit_p99_ms: f64,
    pk_commit_p99_ms: f64,
    rows_written: f64,
    /// The process's threads (`Threads:` in /proc): each one's stack is resident memory that
    /// no allocator counts.
    threads: f64,
}

/// The figures of a sample, by name, in print order.
fn figures(s: &Sample) -> [(&'static str, f64); 27] {
    [
        ("rss_mb", s.rss_mb),
        ("rss_avg", s.rss_avg_mb),
        ("heap_mb", s.heap_mb),
        ("cache_mb", s.cache_mb),
        ("memtbl_mb", s.memtable_mb),
        ("heap_rest", s.heap_mb - s.cache_mb - s.memtable_mb),
        ("je_kept_mb", s.allocator_resident_mb - s.heap_mb),
        (
            "je_frag_mb",
            s.allocator_active_mb - s.heap_mb - s.thread_cache_mb,
        ),
        ("tcache_mb", s.thread_cache_mb),
        ("rss_file", s.rss_file_mb),
        (
            "anon_other",
            s.rss_mb - s.rss_file_mb - s.allocator_resident_mb,
        ),
        ("cmalloc_mb", s.c_malloc_mb),
        ("cfree_mb", s.c_malloc_free_mb),
        ("hot_mb", s.hot_mb),
        ("lake_files", s.lake_files),
        ("lake_active", s.lake_active),
        ("lake_mb", s.lake_mb),
        ("delta_log", s.delta_log_entries),
        ("keyidx_mb", s.key_index_mb),
        ("lag_s", s.lag_s),
        ("hot_start_k", s.hot_start_k),
        ("lake_q_ms", s.lake_count_ms),
        ("view_q_ms", s.view_count_ms),
        ("log_c99_ms", s.log_commit_p99_ms),
        ("pk_c99_ms", s.pk_commit_p99_ms),
        ("rows", s.rows_written),
        ("threads", s.threads),
    ]
}

/// A running `silt up` child.
struct SiltChild {
    child: Child,
    bootstrap: String,
    rest: String,
}

impl SiltChild {
    fn start(
        data_dir: &Path,
        env: &[(String, String)],
        wrapper: Option<&str>,
    ) -> Result<SiltChild> {
        let (exe, silt) = crate::silt_program()?;
        let log = std::fs::File::create(data_dir.join("silt-up.log"))?;
        let wrapper: Vec<&str> = wrapper
            .map(|w| w.split_whitespace().collect())
            .unwrap_or_default();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        let mut child = command
            .arg(silt)
            .args([
                "--data-dir",
                &data_dir.to_string_lossy(),
                "up",
                "--status-every-s",
                "3600",
            ])
            .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
            .env("SILT_REST__LISTEN", "127.0.0.1:0")
            .env("SILT_QUERY__FLIGHT_LISTEN", "127.0.0.1:0")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting silt up")?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let (mut bootstrap, mut rest) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while bootstrap.is_none() || rest.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                bail!("silt up did not report its addresses within 60 s (log: silt-up.log)");
            };
            if let Some(tail) = line.strip_prefix("hotstore: Fluss wire protocol on ") {
                bootstrap = tail.split_whitespace().next().map(str::to_string);
            }
            if let Some(tail) = line.strip_prefix("rest: REST API on ") {
                rest = tail
                    .split_whitespace()
                    .next()
                    .map(|url| url.trim_start_matches("http://").to_string());
            }
        }
        Ok(SiltChild {
            child,
            bootstrap: bootstrap.expect("seen"),
            rest: rest.expect("seen"),
        })
    }

    /// The resident set and, of it, the pages of mapped files (the binary's code: a debug
    /// build's grows as more of its 200+ MB is run, up to its size), in MB (10^6 bytes, as
    /// the heap figures).
    fn rss_mb(&self) -> (f64, f64) {
        resident_set_mb(self.child.id())
    }

    fn threads(&self) -> f64 {
        status_field(&self.child.id().to_string(), "Threads").unwrap_or(f64::NAN)
    }
}

fn resident_set_mb(pid: u32) -> (f64, f64) {
    let pid = pid.to_string();
    let mb = |name: &str| status_field(&pid, name).map_or(0.0, |kib| kib * 1024.0 / 1e6);
    (mb("VmRSS"), mb("RssFile"))
}

/// Reads the child's resident set every `every` on a thread of its own (not the bench's
/// runtime, which the queries of a sample occupy) and hands out the mean since the last take.
struct RssPoller {
    reads: Arc<std::sync::Mutex<(f64, u32)>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl RssPoller {
    fn start(pid: u32, every: Duration) -> RssPoller {
        let reads = Arc::new(std::sync::Mutex::new((0.0, 0)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (thread_reads, thread_stop) = (reads.clone(), stop.clone());
        std::thread::spawn(move || {
            while !thread_stop.load(Ordering::Relaxed) {
                let (rss, _) = resident_set_mb(pid);
                if rss > 0.0 {
                    let mut reads = thread_reads.lock().unwrap_or_else(|e| e.into_inner());
                    reads.0 += rss;
                    reads.1 += 1;
                }
                std::thread::sleep(every);
            }
        });
        RssPoller { reads, stop }
    }

    /// The mean of the reads since the previous call (NaN when there were none).
    fn take_mean(&self) -> f64 {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        let (sum, count) = std::mem::take(&mut *reads);
        if count == 0 {
            f64::NAN
        } else {
            sum / f64::from(count)
        }
    }
}

impl Drop for RssPoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for SiltChild {
    fn drop(&mut self) {
        // SIGTERM, so silt (and a wrapper such as heaptrack) finishes cleanly; SIGKILL after
        // a bounded wait.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn soak(options: SoakOptions) -> Result<()> {
    let temp = tempfile::Builder::new().prefix("silt-soak-").tempdir()?;
    let data_dir = options
        .data_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&data_dir)?;
    let silt = SiltChild::start(&data_dir, &options.env, options.wrapper.as_deref())?;
    say!(
        "soak: silt up (pid {}) at {} / http://{}, data in {}; {} log rows/s, {} upserts/s over {} keys, {} buckets, freshness {:?}, {:?}",
        silt.child.id(),
        silt.bootstrap,
        silt.rest,
        data_dir.display(),
        options.log_rate,
        options.upsert_rate,
        options.pk_keys,
        options.buckets,
        options.freshness,
        options.duration
    );
    create_tables(&silt.bootstrap, &options).await?;
    let written = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let pace = |rate| Pace::new(rate, written.clone(), stop_rx.clone());
    let log_writer = tokio::spawn(write_log(silt.bootstrap.clone(), pace(options.log_rate)));
    let pk_writer = tokio::spawn(write_pk(
        silt.bootstrap.clone(),
        options.pk_keys,
        pace(options.upsert_rate),
    ));
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut samples = Vec::new();
    let rss_poller = RssPoller::start(silt.child.id(), options.rss_every);
    print_header();
    loop {
        let next = samples.len() as u32 * options.sample_every;
        tokio::time::sleep_until(tokio::time::Instant::from_std(started + next)).await;
        let mut sample = take_sample(&silt, &http, &data_dir, started, &written).await;
        sample.rss_avg_mb = rss_poller.take_mean();
        print_sample(&sample);
        samples.push(sample);
        if started.elapsed() >= options.duration {
            break;
        }
        if log_writer.is_finished() || pk_writer.is_finished() {
            break;
        }
    }
    let _ = stop_tx.send(true);
    for (name, writer) in [("log", log_writer), ("pk", pk_writer)] {
        match writer.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => say!("soak: the {name} writer stopped: {e:#}"),
            Err(e) => say!("soak: the {name} writer panicked: {e}"),
        }
    }
    drop(rss_poller);
    print_slopes(&samples, options.warmup);
    verify_all(&silt, &data_dir, &options.env)?;
    drop(silt);
    Ok(())
}

/// `silt verify --all` once the writers stopped: the lake against the changelog still held,
/// waiting up to two minutes for tiering to catch up. Prints its summary; a mismatch is
/// printed, not hidden.
fn verify_all(silt: &SiltChild, data_dir: &Path, env: &[(String, String)]) -> Result<()> {
    let (exe, command) = crate::silt_program()?;
    let out = Command::new(exe)
        .arg(command)
        .args(["--data-dir", &data_dir.to_string_lossy(), "--log", "error"])
        .args([
            "verify",
            "--all",
            "--deadline",
            "120s",
            "--bootstrap",
            &silt.bootstrap,
        ])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .context("running silt verify --all")?;
    // The verdicts on stdout; the summary table (and the diff of a table that does not
    // match) on stderr.
    let (verdicts, summary) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    say!(
        "\nsilt verify --all at the end (exit {}):\n{}{}",
        out.status.code().unwrap_or(-1),
        verdicts,
        summary.trim_end()
    );
    Ok(())
}

async fn create_tables(bootstrap: &str, options: &SoakOptions) -> Result<()> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let admin = connection.get_admin()?;
    admin.create_database(DB, None, true).await?;
    let freshness = format!("{}ms", options.freshness.as_millis());
    let ttl: std::collections::HashMap<String, String> = options
        .log_ttl
        .iter()
        .map(|ttl| (silt_hotstore::LOG_TTL.to_string(), ttl.clone()))
        .collect();
    let log = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("kind", DataTypes::int())
        .column("payload", DataTypes::string())
        .build()?;
    let pk = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("score", DataTypes::bigint())
        .column("name", DataTypes::string())
        .primary_key(vec!["id"])?
        .build()?;
    for (name, schema, bucket_keys) in [
        (LOG_TABLE, log, vec![]),
        (PK_TABLE, pk, vec!["id".to_string()]),
    ] {
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(options.buckets), bucket_keys)
            .property(DATALAKE_ENABLED, "true")
            .property(DATALAKE_FRESHNESS, freshness.clone())
            .properties(ttl.clone())
            .build()?;
        admin
            .create_table(&TablePath::new(DB, name), &descriptor, true)
            .await?;
    }
    Ok(())
}

/// Steps of the writers' pacing: each step writes `rate / STEPS_PER_S` rows.
const STEPS_PER_S: u64 = 10;

/// A writer's pacing: `rows_per_step` rows every `1 / STEPS_PER_S` s until `stop`, each step
/// counted in `written` once flushed.
struct Pace {
    rows_per_step: u64,
    tick: tokio::time::Interval,
    written: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Pace {
    fn new(rate: u64, written: Arc<AtomicU64>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / STEPS_PER_S));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Pace {
            rows_per_step: (rate / STEPS_PER_S).max(1),
            tick,
            written,
            stop,
        }
    }

    /// Waits for the next step; `None` once the soak stops, else the rows to write in it.
    async fn step(&mut self) -> Option<u64> {
        if *self.stop.borrow() {
            return None;
        }
        self.tick.tick().await;
        Some(self.rows_per_step)
    }

    /// Counts a step's rows as written (after their flush).
    fn wrote(&self, rows: u64) {
        self.written.fetch_add(rows, Ordering::Relaxed);
    }
}

async fn write_log(bootstrap: String, mut pace: Pace) -> Result<()> {
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let table = connection.get_table(&TablePath::new(DB, LOG_TABLE)).await?;
    let writer = table.new_append()?.create_writer()?;
    let mut id = 0i64;
    while let Some(rows) = pace.step().await {
        for _ in 0..rows {
            let mut row = GenericRow::new(3);
            row.set_field(0, id);
            row.set_field(1, (id % 7) as i32);
            row.set_field(2, "payload of a steady log row, some forty bytes");
            writer.append(&row)?;
            id += 1;
        }
        writer.flush().await?;
        pace.wrote(rows);
    }
    Ok(())
}

async fn write_pk(bootstrap: String, keys: u64, mut pace: Pace) -> Result<()> {
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let table = connection.get_table(&TablePath::new(DB, PK_TABLE)).await?;
    let writer = table.new_upsert()?.create_writer()?;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut version = 0i64;
    while let Some(rows) = pace.step().await {
        for _ in 0..rows {
            let key = rng.random_range(0..keys.max(1)) as i64;
            version += 1;
            let name = format!("user {key} v{version}");
            let mut row = GenericRow::new(3);
            row.set_field(0, key);
            row.set_field(1, version);
            row.set_field(2, name.as_str());
            if rng.random_range(0..10) == 0 {
                writer.delete(&row)?;
            } else {
                writer.upsert(&row)?;
            }
        }
        writer.flush().await?;
        pace.wrote(rows);
    }
    Ok(())
}

async fn take_sample(
    silt: &SiltChild,
    http: &reqwest::Client,
    data_dir: &Path,
    started: Instant,
    written: &AtomicU64,
) -> Sample {
    let lake = disk_usage(&data_dir.join("lake"), |p| {
        matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("parquet" | "bin")
        )
    });
    let delta_log = disk_usage(&data_dir.join("lake"), |p| {
        p.parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "_delta_log")
    });
    let memory = get_json(http, &silt.rest, "/v1/memory").await.ok();
    // Read next to the allocator's figures, before the queries below allocate and free:
    // what is resident beyond the allocator is the difference of the two.
    let (rss_mb, rss_file_mb) = silt.rss_mb();
    let tables = get_json(http, &silt.rest, "/v1/tables").await.ok();
    let tables = tables.as_ref();
    let lag_s = tables.map_or(f64::NAN, tiering_lag);
    let commit_p99 = |name: &str| tables.map_or(f64::NAN, |t| commit_p99_ms(t, name));
    let count_ms = async |table: &str| {
        let sql = format!("SELECT count(*) FROM {DB}.{table}");
        timed_query(http, &silt.rest, &sql).await
    };
    let lake_count_ms = count_ms(&format!("{PK_TABLE}$lake")).await;
    let view_count_ms = count_ms(PK_TABLE).await;
    // A `/v1/memory` figure in MB (the sum of `pointers`); NaN without the endpoint's answer.
    let memory_mb =
        |pointers: &[&str]| memory.as_ref().map_or(f64::NAN, |m| figure(m, pointers)) / 1e6;
    Sample {
        at_s: started.elapsed().as_secs_f64(),
        rss_mb,
        // Set by the caller from the poller.
        rss_avg_mb: f64::NAN,
        rss_file_mb,
        // jemalloc counts what the threads' caches hold as allocated; the live heap is the rest.
        heap_mb: memory_mb(&["/allocated_bytes"]) - memory_mb(&["/thread_cache_bytes"]),
        cache_mb: memory_mb(&["/hot_kv/cache_bytes", "/key_indexes/cache_bytes"]),
        memtable_mb: memory_mb(&["/hot_kv/memtable_bytes", "/key_indexes/memtable_bytes"]),
        allocator_resident_mb: memory_mb(&["/resident_bytes"]),
        allocator_active_mb: memory_mb(&["/active_bytes"]),
        thread_cache_mb: memory_mb(&["/thread_cache_bytes"]),
        c_malloc_mb: memory_mb(&["/c_malloc_in_use_bytes"]),
        c_malloc_free_mb: memory_mb(&["/c_malloc_free_bytes"]),
        hot_mb: disk_usage(&data_dir.join("hotstore"), |_| true).1 / 1e6,
        lake_files: lake.0,
        lake_active: active_files(&data_dir.join("lake")).await,
        lake_mb: lake.1 / 1e6,
        delta_log_entries: delta_log.0,
        key_index_mb: disk_usage(&data_dir.join("key-index"), |_| true).1 / 1e6,
        lag_s,
        hot_start_k: hot_log_start(http, &silt.rest).await.unwrap_or(f64::NAN) / 1000.0,
        lake_count_ms,
        view_count_ms,
        log_commit_p99_ms: commit_p99(LOG_TABLE),
        pk_commit_p99_ms: commit_p99(PK_TABLE),
        rows_written: written.load(Ordering::Relaxed) as f64,
        threads: silt.threads(),
    }
}

/// Data files referenced by the current version of each lake table (NaN when one cannot be
/// read).
async fn active_files(lake: &Path) -> f64 {
    let mut files = 0usize;
    for table in [LOG_TABLE, PK_TABLE] {
        let dir = lake.join(DB).join(table);
        let Some(uri) = dir.to_str() else {
            return f64::NAN;
        };
        let Ok(url) = deltalake::ensure_table_uri(uri) else {
            return f64::NAN;
        };
        let Ok(table) = deltalake::open_table(url).await else {
            return f64::NAN;
        };
        match table.snapshot() {
            Ok(state) => files += state.log_data().num_files(),
            Err(_) => return f64::NAN,
        }
    }
    files as f64
}

/// (files, bytes allocated on disk) under `dir` whose path `keep` accepts. Allocated, not
/// logical: fjall preallocates a 64 MiB journal that is mostly holes.
fn disk_usage(dir: &Path, keep: impl Fn(&Path) -> bool) -> (f64, f64) {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if keep(&path) {
                files += 1;
                bytes += std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
            }
        }
    }
    (files as f64, bytes as f64)
}

/// The largest tiering lag of the tables in a `GET /v1/tables` body.
fn tiering_lag(tables: &serde_json::Value) -> f64 {
    tables
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("lag_seconds").and_then(|v| v.as_f64()))
        .fold(0.0, f64::max)
}

/// The recent commit p99 of `table` (of [`DB`]) in a `GET /v1/tables` body; NaN when absent.
fn commit_p99_ms(tables: &serde_json::Value, table: &str) -> f64 {
    let name = format!("{DB}.{table}");
    tables
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t.get("table").and_then(|v| v.as_str()) == Some(name.as_str()))
        .and_then(|t| t.pointer("/commits/recent_p99_ms"))
        .and_then(|v| v.as_f64())
        .unwrap_or(f64::NAN)
}

/// The JSON body of `GET http://<rest><path>`.
async fn get_json(http: &reqwest::Client, rest: &str, path: &str) -> Result<serde_json::Value> {
    let body = http
        .get(format!("http://{rest}{path}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await?
        .bytes()
        .await?;
    Ok(serde_json::from_slice(&body)?)
}

/// The sum of the numbers at `pointers` in a JSON body (a missing one counts 0).
fn figure(body: &serde_json::Value, pointers: &[&str]) -> f64 {
    pointers
        .iter()
        .filter_map(|p| body.pointer(p).and_then(|v| v.as_f64()))
        .sum()
}

/// The sum of every bucket's hot log start offset (`GET /v1/hot`).
async fn hot_log_start(http: &reqwest::Client, rest: &str) -> Result<f64> {
    Ok(get_json(http, rest, "/v1/hot")
        .await?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("log_start_offset").and_then(|v| v.as_f64()))
        .sum())
}

/// Milliseconds a query took through `POST /v1/query`, NaN when it failed.
async fn timed_query(http: &reqwest::Client, rest: &str, sql: &str) -> f64 {
    let started = Instant::now();
    let response = http
        .post(format!("http://{rest}/v1/query"))
        .header("content-type", "application/json")
        .body(serde_json::json!({"sql": sql, "deadline": "30s"}).to_string())
        .timeout(Duration::from_secs(35))
        .send()
        .await;
    match response {
        Ok(r) if r.status().is_success() => started.elapsed().as_secs_f64() * 1000.0,
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            say!(
                "soak: query failed ({status}): {}",
                body.chars().take(200).collect::<String>()
            );
            f64::NAN
        }
        Err(e) => {
            say!("soak: query failed: {e}");
            f64::NAN
        }
    }
}

fn print_header() {
    let names: Vec<String> = figures(&Sample::default())
        .iter()
        .map(|(n, _)| format!("{n:>11}"))
        .collect();
    say!("{:>7} {}", "min", names.join(" "));
}

fn print_sample(s: &Sample) {
    let values: Vec<String> = figures(s)
        .iter()
        .map(|(_, v)| format!("{v:>11.1}"))
        .collect();
    say!("{:>7.1} {}", s.at_s / 60.0, values.join(" "));
}

/// Least-squares slope of `ys` over `xs`.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    let cov: f64 = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let var: f64 = xs.iter().map(|x| (x - mean_x).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}

fn print_slopes(samples: &[Sample], warmup: Duration) {
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_s >= warmup.as_secs_f64())
        .collect();
    say!();
    if after.len() < 3 {
        say!(
            "soak: {} samples after the {:?} warm-up; slopes need at least 3 (run longer)",
            after.len(),
            warmup
        );
        return;
    }
    say!(
        "slopes per hour over {} samples after {:.0} min (least squares; % of the mean):",
        after.len(),
        warmup.as_secs_f64() / 60.0
    );
    let xs: Vec<f64> = after.iter().map(|s| s.at_s / 3600.0).collect();
    let mut table = Table::new(["figure", "per hour", "% of mean", "mean"]).named("slopes");
    for (i, (name, _)) in figures(after[0]).iter().enumerate() {
        let ys: Vec<f64> = after.iter().map(|s| figures(s)[i].1).collect();
        if ys.iter().any(|y| y.is_nan()) {
            table.row([format!("  {name}"), "n/a (a sample failed)".to_string()]);
            continue;
        }
        let per_hour = slope(&xs, &ys);
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let percent = if mean.abs() > f64::EPSILON {
            100.0 * per_hour / mean
        } else {
            0.0
        };
        table.row([
            format!("  {name}"),
            format!("{per_hour:.2}"),
            format!("{percent:+.2}%"),
            format!("{mean:.1}"),
        ]);
    }
    let rss: Vec<f64> = after.iter().map(|s| s.rss_avg_mb).collect();
    if rss.iter().all(|r| r.is_finite()) {
        let mean = rss.iter().sum::<f64>() / rss.len() as f64;
        let percent = 100.0 * slope(&xs, &rss) / mean;
        table.note(format!(
            "  rss_avg slope {percent:+.2}% of its mean per hour: the target (at most +1%/h) is {}",
            if percent <= 1.0 { "met" } else { "not met" }
        ));
    }
    note_latency_drift(&mut table, &after);
    table.print();
}

/// Query and commit latency should stay flat: notes each one's last quarter of `after` over
/// its first.
fn note_latency_drift(table: &mut Table, after: &[&Sample]) {
    let quarter = (after.len() / 4).max(1);
    for (name, get) in [
        (
            "lake_q_ms",
            (|s: &Sample| s.lake_count_ms) as fn(&Sample) -> f64,
        ),
        ("view_q_ms", |s: &Sample| s.view_count_ms),
        ("log_c99_ms", |s: &Sample| s.log_commit_p99_ms),
        ("pk_c99_ms", |s: &Sample| s.pk_commit_p99_ms),
    ] {
        let first: f64 = after[..quarter].iter().map(|s| get(s)).sum::<f64>() / quarter as f64;
        let last: f64 = after[after.len() - quarter..]
            .iter()
            .map(|s| get(s))
            .sum::<f64>()
            / quarter as f64;
        table.note(format!(
            "  {name:<11} last quarter / first quarter: {:.2}x",
            last / first
        ));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slope_of_a_line_and_of_a_constant() {
        let xs = [0.0, 1.0, 2.0, 3.0];
        assert!((super::slope(&xs, &[1.0, 3.0, 5.0, 7.0]) - 2.0).abs() < 1e-9);
        assert_eq!(super::slope(&xs, &[4.0; 4]), 0.0);
    }
}
