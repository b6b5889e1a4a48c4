//! `silt bench tiering`: measured, not asserted. Prints a table of figures and ratios taken in
//! one run (these machines are noisy; compare ratios, not absolute numbers).
//!
//! - Throughput: a log table pre-filled with `rows` rows of 12 mixed columns is tiered from
//!   scratch; the ceiling is the same Arrow batches (with the same three system columns) written
//!   to Parquet with the same writer settings (snappy, same row groups) in the same process, by
//!   as many writers on their own threads as tiering runs writer subtasks. Between the two, the
//!   same batches through tiering's own lake writer (`LogFiles`, no commit): what of the gap is
//!   the Delta writer and what is the rest of the job (reading, the engine, committing).
//! - Freshness: a steady load at `rate` rows/s (or else at `load_fraction` of the measured
//!   tiering throughput) with a 1 s checkpoint interval; for every acknowledged flush, the time
//!   until the lake's txn offsets cover the high watermarks seen right after the
//!   acknowledgement (p50/p99).
//! - Peak RSS: two more log tables, of `rss_rows` and `RSS_FACTOR * rss_rows` rows, are
//!   pre-filled and then tiered one after the other; for each, the process's peak resident set
//!   (VmHWM, reset through /proc/self/clear_refs before the table starts) is compared with the
//!   resident set just before it. The growth must not scale with the table size.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use arrow::array::{Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{FieldRef, Schema, SchemaRef};
use fluss::client::{AppendWriter, FlussAdmin, FlussConnection};
use fluss::metadata::{TableDescriptor, TablePath};
use fluss::rpc::message::OffsetSpec;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use silt_connectors::changelog::{BucketKey, lake_system_fields};
use silt_connectors::delta::{DeltaSinkConfig, LakeTable, LogFiles, TableKind, writer_properties};
use silt_jobs::tiering::{TieringConfig, TieringService};

use crate::data::{make_batch, wait_lake_covers};
use crate::report::{Table, percentile_f64, say};

/// The flags of `silt bench tiering`.
#[derive(Debug, Clone, clap::Args)]
pub struct TieringBenchOptions {
    /// Rows pre-filled into the log table.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    #[arg(long, default_value_t = 8192)]
    pub batch_rows: usize,
    /// Checkpoint interval of the tiering jobs (`table.datalake.freshness`), e.g. `1s`, `500ms`.
    #[arg(long, default_value = "1s", value_parser = freshness)]
    pub freshness: Duration,
    /// Steady load as a fraction of the measured tiering throughput.
    #[arg(long, default_value_t = 0.5, conflicts_with = "rate")]
    pub load_fraction: f64,
    /// Steady load in rows/s (instead of `--load-fraction`), to compare freshness at one
    /// offered load across machines and systems.
    #[arg(long, value_parser = positive_rate)]
    pub rate: Option<f64>,
    /// Rows of the smaller table of the peak-RSS phase (the larger has 4x); 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    pub rss_rows: u64,
    /// Source subtasks of each tiering job at most (default: the service's).
    #[arg(long)]
    pub source_parallelism: Option<u32>,
    /// Lake writer subtasks of each tiering job (default: the service's).
    #[arg(long)]
    pub writer_parallelism: Option<u32>,
    /// Tier the tables of this Fluss cluster (`HOST:PORT`) instead of an in-process hot store:
    /// silt as the tiering service of a real Fluss, as `silt up --bootstrap` runs it. The bench
    /// drops and creates its tables in the database `bench` there.
    #[arg(long, value_name = "HOST:PORT")]
    pub bootstrap: Option<String>,
}

/// `--freshness`: a duration as `table.datalake.freshness` takes it, at least 10 ms.
fn freshness(text: &str) -> Result<Duration, String> {
    match silt_rt::duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_millis(10) => Ok(d),
        Ok(d) => Err(format!(
            "{d:?} is below 10ms: use a freshness of at least 10ms"
        )),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// `--rate`: a finite number of rows/s, at least 1.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 1.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a rate in rows/s (at least 1, e.g. 100000)"
        )),
    }
}

/// Size ratio of the two tables of the peak-RSS phase.
pub const RSS_FACTOR: u64 = 4;

const DB: &str = "bench";
const BUCKETS: i32 = 4;

fn with_system_columns(batch: &RecordBatch, bucket: i32, offset: i64) -> Result<RecordBatch> {
    let n = batch.num_rows();
    // The user's columns, then the lake's system columns.
    let (user, system) = (batch.schema(), lake_system_fields());
    let fields: Vec<FieldRef> = user
        .fields()
        .iter()
        .cloned()
        .chain(system.into_iter().map(Arc::new))
        .collect();
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(Int32Array::from(vec![bucket; n])));
    columns.push(Arc::new(Int64Array::from_iter_values(
        offset..offset + n as i64,
    )));
    columns.push(Arc::new(
        TimestampMillisecondArray::from(vec![1_700_000_000_000i64; n]).with_timezone("UTC"),
    ));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// A field of /proc/self/status in kB (`VmRSS`, `VmHWM`); None where there is no procfs.
fn proc_status_kb(field: &str) -> Option<u64> {
    crate::procfs::status_field("self", field).map(|kb| kb as u64)
}

/// Resets VmHWM to the current RSS (Linux: writing 5 to /proc/self/clear_refs); false where
/// that is not possible, and the sampled VmRSS maximum is used instead.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Appends `rows` rows to `table` through `connection` without keeping the batches.
async fn prefill(
    connection: &fluss::client::FlussConnection,
    schema: &SchemaRef,
    table: &str,
    rows: u64,
    batch_rows: usize,
) -> Result<()> {
    let table = connection
        .get_table(&TablePath::new(DB, table))
        .await
        .map_err(anyhow::Error::from)?;
    let appender = table
        .new_append()
        .map_err(anyhow::Error::from)?
        .create_writer()
        .map_err(anyhow::Error::from)?;
    let mut written = 0u64;
    while written < rows {
        let n = batch_rows.min((rows - written) as usize);
        appender
            .append_arrow_batch(make_batch(schema, written, n)?)
            .map_err(|e| anyhow!("append: {e}"))?;
        written += n as u64;
    }
    appender.flush().await.map_err(|e| anyhow!("flush: {e}"))?;
    Ok(())
}

/// Memory of one tiered table: resident set before, peak while tiering (kB), and seconds.
struct RssFigures {
    rows: u64,
    before_kb: u64,
    peak_kb: u64,
    seconds: f64,
    source: &'static str,
}

/// Tiers `table` from scratch and measures the process's peak resident set meanwhile.
async fn tier_measuring_rss(
    tiering: &TieringService,
    admin: &fluss::client::FlussAdmin,
    table: &str,
    rows: u64,
) -> Result<RssFigures> {
    let ids: Vec<i32> = (0..BUCKETS).collect();
    let hw = admin
        .list_offsets(&TablePath::new(DB, table), &ids, OffsetSpec::Latest)
        .await
        .map_err(anyhow::Error::from)?;
    let targets: Vec<(i32, i64)> = ids.iter().map(|b| (*b, hw[b])).collect();
    let before_kb = proc_status_kb("VmRSS").unwrap_or(0);
    let hwm_reset = reset_peak_rss();
    let sampled_max = Arc::new(std::sync::atomic::AtomicU64::new(before_kb));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (sampled_max, done) = (sampled_max.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(kb) = proc_status_kb("VmRSS") {
                    sampled_max.fetch_max(kb, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    tiering.tier_table(DB, table).await?;
    let finished = wait_lake_covers(
        tiering,
        table,
        &targets,
        Instant::now() + Duration::from_secs(3600),
    )
    .await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    sampler.await?;
    let finished = finished?;
    let sampled = sampled_max.load(std::sync::atomic::Ordering::SeqCst);
    let (peak_kb, source) = match proc_status_kb("VmHWM") {
        Some(hwm) if hwm_reset => (hwm.max(sampled), "VmHWM"),
        _ => (sampled, "sampled VmRSS"),
    };
    Ok(RssFigures {
        rows,
        before_kb,
        peak_kb,
        seconds: (finished - started).as_secs_f64(),
        source,
    })
}

/// The hot store and the bench tables one run measures.
struct Bench {
    dir: tempfile::TempDir,
    /// The in-process hot store; None when the bench runs against a cluster's `--bootstrap`.
    server: Option<Arc<silt_hotstore::ServerHandle>>,
    bootstrap: String,
    connection: FlussConnection,
    admin: Arc<FlussAdmin>,
    arrow_schema: SchemaRef,
}

impl Bench {
    /// The four log tables of the phases, created afresh in the cluster at `bootstrap`, or in
    /// an in-process hot store in a fresh directory.
    async fn start(bootstrap: Option<&str>) -> Result<Bench> {
        let dir = tempfile::Builder::new().prefix("silt-bench-").tempdir()?;
        let (server, bootstrap) = match bootstrap {
            Some(address) => (None, address.to_string()),
            None => {
                let server = crate::in_process_hotstore(dir.path()).await?;
                let address = server.local_addr().to_string();
                (Some(server), address)
            }
        };
        let connection = silt_connectors::fluss::connect(&bootstrap).await?;
        let admin = connection.get_admin().map_err(anyhow::Error::from)?;
        admin
            .create_database(DB, None, true)
            .await
            .map_err(anyhow::Error::from)?;
        for table in ["throughput", "freshness", "rss_small", "rss_large"] {
            let descriptor = TableDescriptor::builder()
                .schema(crate::data::schema_12())
                .distributed_by(Some(BUCKETS), vec![])
                .build()
                .map_err(anyhow::Error::from)?;
            // A cluster keeps the tables of an earlier run.
            admin
                .drop_table(&TablePath::new(DB, table), true)
                .await
                .map_err(anyhow::Error::from)?;
            admin
                .create_table(&TablePath::new(DB, table), &descriptor, false)
                .await
                .map_err(anyhow::Error::from)?;
        }
        let arrow_schema =
            silt_connectors::fluss::table_arrow_schema(&connection, DB, "throughput").await?;
        Ok(Bench {
            dir,
            server,
            bootstrap,
            connection,
            admin,
            arrow_schema,
        })
    }

    /// (bucket, high watermark) of every bucket of `table`.
    async fn high_watermarks(&self, table: &str) -> Result<Vec<(i32, i64)>> {
        let ids: Vec<i32> = (0..BUCKETS).collect();
        let hw = self
            .admin
            .list_offsets(&TablePath::new(DB, table), &ids, OffsetSpec::Latest)
            .await
            .map_err(anyhow::Error::from)?;
        Ok(ids.iter().map(|b| (*b, hw[b])).collect())
    }

    async fn append_writer(&self, table: &str) -> Result<AppendWriter> {
        self.connection
            .get_table(&TablePath::new(DB, table))
            .await
            .map_err(anyhow::Error::from)?
            .new_append()
            .map_err(anyhow::Error::from)?
            .create_writer()
            .map_err(anyhow::Error::from)
    }

    async fn shutdown(self) -> Result<()> {
        let Bench {
            dir,
            server,
            connection,
            admin,
            ..
        } = self;
        drop((admin, connection));
        if let Some(Ok(server)) = server.map(Arc::try_unwrap) {
            server.shutdown().await?;
        }
        drop(dir);
        Ok(())
    }
}

/// What one run measured, for the report.
struct Figures {
    produce_s: f64,
    ceiling_s: f64,
    /// The same batches through tiering's own lake writer (`LogFiles`), as tiering's writer
    /// subtasks use it: what of the gap is the Delta writer, what is the rest of the job.
    lake_writer_s: f64,
    tiering_s: f64,
    freshness: Freshness,
    rss: Vec<RssFigures>,
}

/// Write ack to lake visibility under a steady load.
struct Freshness {
    rate_rows_s: f64,
    /// Rows acknowledged per second of the load (below `rate_rows_s` when the writer lags).
    achieved_rows_s: f64,
    /// Seconds from each acknowledged flush to the lake covering it, sorted.
    latencies_s: Vec<f64>,
    flushes: usize,
}

pub async fn tiering(options: TieringBenchOptions) -> Result<()> {
    let options = TieringBenchOptions {
        batch_rows: options.batch_rows.max(1),
        ..options
    };
    let bench = Bench::start(options.bootstrap.as_deref()).await?;
    say!(
        "pre-filling {DB}.throughput with {} rows of 12 columns ...",
        options.rows
    );
    let (batches, produce_s) = prefill_throughput(&bench, &options).await?;
    let shards = deal(&batches);
    drop(batches);
    let ceiling_s = parquet_ceiling(
        &bench.arrow_schema,
        &shards,
        &bench.dir.path().join("ceiling"),
    )?;
    let lake_writer = bench.dir.path().join("lake-writer");
    let lake_writer_s = lake_writer_ceiling(&bench.arrow_schema, shards, &lake_writer).await?;

    let mut config = TieringConfig::new(
        &bench.bootstrap,
        bench.dir.path().join("lake").to_string_lossy().to_string(),
        bench.dir.path().join("checkpoints"),
    );
    config.freshness_default = options.freshness;
    if let Some(n) = options.source_parallelism {
        config.source_parallelism_max = n;
    }
    if let Some(n) = options.writer_parallelism {
        config.writer_parallelism = n;
    }
    if options.bootstrap.is_some() {
        // As `silt up --bootstrap` tiers a Fluss cluster.
        config.retention_waits_for_lake = false;
        config.source_fetch_wait = Some(silt_jobs::tiering::EXTERNAL_FETCH_WAIT);
    }
    let tiering = TieringService::new(config, None);
    let tiering_s = tier_from_scratch(&bench, &tiering).await?;
    // "Half the maximum": the maximum a tiering job sustains is its from-scratch throughput.
    let rate = options
        .rate
        .unwrap_or((options.rows as f64 / tiering_s * options.load_fraction).max(100.0));
    let freshness = measure_freshness(&bench, &tiering, rate).await?;
    let rss = measure_rss(&bench, &tiering, &options).await?;
    tiering.shutdown(Duration::from_secs(60)).await;

    let figures = Figures {
        produce_s,
        ceiling_s,
        lake_writer_s,
        tiering_s,
        freshness,
        rss,
    };
    print_report(&options, &figures);
    bench.shutdown().await
}

/// Pre-fills the throughput table, keeping the batches for the Parquet ceiling; returns them
/// and the seconds the acknowledged produce took.
async fn prefill_throughput(
    bench: &Bench,
    options: &TieringBenchOptions,
) -> Result<(Vec<RecordBatch>, f64)> {
    let appender = bench.append_writer("throughput").await?;
    let mut batches = Vec::new();
    let started = Instant::now();
    let mut written = 0u64;
    while written < options.rows {
        let n = options.batch_rows.min((options.rows - written) as usize);
        let batch = crate::data::make_batch(&bench.arrow_schema, written, n)?;
        appender
            .append_arrow_batch(batch.clone())
            .map_err(|e| anyhow!("append: {e}"))?;
        batches.push(batch);
        written += n as u64;
    }
    appender.flush().await.map_err(|e| anyhow!("flush: {e}"))?;
    Ok((batches, started.elapsed().as_secs_f64()))
}

/// The batches dealt round-robin to [`BUCKETS`] writers, each batch with its first offset, as
/// both ceilings write them (Arrow arrays are shared, not copied).
type Shards = Vec<Vec<(RecordBatch, i64)>>;

fn deal(batches: &[RecordBatch]) -> Shards {
    let mut shards: Shards = vec![Vec::new(); BUCKETS as usize];
    let mut offset = 0i64;
    for (i, batch) in batches.iter().enumerate() {
        shards[i % BUCKETS as usize].push((batch.clone(), offset));
        offset += batch.num_rows() as i64;
    }
    shards
}

/// The lake table both ceilings write with tiering's settings: a log table of `schema` at
/// `dir`.
fn ceiling_lake(schema: &SchemaRef, dir: &std::path::Path) -> DeltaSinkConfig {
    DeltaSinkConfig::new(
        dir.to_string_lossy(),
        "ceiling",
        TableKind::Log,
        schema.clone(),
    )
}

/// The ceiling: the same batches (with the same system columns) to Parquet with the tiering
/// writer's settings, in this process, by as many writers as tiering runs (one file each,
/// every writer on its own thread), so that it uses the cores tiering can; returns the seconds
/// until every file was closed.
fn parquet_ceiling(schema: &SchemaRef, shards: &Shards, dir: &std::path::Path) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    let props = writer_properties(&ceiling_lake(schema, dir));
    let started = Instant::now();
    std::thread::scope(|scope| {
        let writers: Vec<_> = shards
            .iter()
            .enumerate()
            .map(|(w, shard)| {
                let path = dir.join(format!("part-{w}.parquet"));
                let props = props.clone();
                scope.spawn(move || write_parquet(shard, props, &path))
            })
            .collect();
        for writer in writers {
            writer
                .join()
                .map_err(|_| anyhow!("a ceiling writer panicked"))??;
        }
        anyhow::Ok(())
    })?;
    Ok(started.elapsed().as_secs_f64())
}

/// One ceiling writer: `batches` (each with its first offset) into one Parquet file.
fn write_parquet(
    batches: &[(RecordBatch, i64)],
    props: WriterProperties,
    path: &std::path::Path,
) -> Result<()> {
    let Some((first, _)) = batches.first() else {
        return Ok(());
    };
    let schema = with_system_columns(first, 0, 0)?.schema();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path)?, schema, Some(props))?;
    for (batch, offset) in batches {
        writer.write(&with_system_columns(batch, 0, *offset)?)?;
    }
    writer.close()?;
    Ok(())
}

/// The same shards through the lake writer tiering's writer subtasks stream log rows into
/// (`LogFiles`, one per task, each task the only writer of one bucket) into a Delta table of
/// the same schema; returns the seconds until every task's files were closed into add actions
/// (nothing is committed).
async fn lake_writer_ceiling(
    schema: &SchemaRef,
    shards: Shards,
    dir: &std::path::Path,
) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    let config = Arc::new(ceiling_lake(schema, dir));
    let lake = LakeTable::open(config.clone()).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (bucket, shard) in shards.into_iter().enumerate() {
        let mut files = LogFiles::open(&lake, &config)?;
        tasks.spawn(async move {
            for (batch, offset) in shard {
                files
                    .write(with_system_columns(&batch, bucket as i32, offset)?)
                    .await?;
            }
            files.flush().await?;
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| anyhow!("a lake writer task failed: {e}"))??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Tiers the pre-filled throughput table from scratch; returns the seconds until the lake
/// covered it.
async fn tier_from_scratch(bench: &Bench, tiering: &TieringService) -> Result<f64> {
    let targets = bench.high_watermarks("throughput").await?;
    let started = Instant::now();
    tiering.tier_table(DB, "throughput").await?;
    let done = crate::data::wait_lake_covers(
        tiering,
        "throughput",
        &targets,
        Instant::now() + Duration::from_secs(3600),
    )
    .await?;
    Ok((done - started).as_secs_f64())
}

/// One acknowledged flush: when, the high watermarks right after it, and when the lake
/// covered them.
type Ack = (Instant, Vec<(i32, i64)>, Option<Instant>);

/// A steady load of `rate` rows/s on the freshness table for 20 s, flushed every 100 ms; for
/// every acknowledged flush, the time until the lake covers it.
async fn measure_freshness(
    bench: &Bench,
    tiering: &TieringService,
    rate: f64,
) -> Result<Freshness> {
    let flush_every = Duration::from_millis(100);
    let measure_for = Duration::from_secs(20);
    let rows_per_flush = ((rate * flush_every.as_secs_f64()) as usize).max(1);
    let writer = bench.append_writer("freshness").await?;
    tiering.tier_table(DB, "freshness").await?;
    let acks: Arc<std::sync::Mutex<Vec<Ack>>> = Arc::default();
    let load_done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_acks(
        tiering.clone(),
        acks.clone(),
        load_done.clone(),
        Instant::now() + measure_for + Duration::from_secs(120),
    ));
    let load_started = Instant::now();
    let mut next_id = 0u64;
    let mut tick = tokio::time::interval(flush_every);
    while load_started.elapsed() < measure_for {
        tick.tick().await;
        writer
            .append_arrow_batch(crate::data::make_batch(
                &bench.arrow_schema,
                next_id,
                rows_per_flush,
            )?)
            .map_err(|e| anyhow!("append: {e}"))?;
        next_id += rows_per_flush as u64;
        writer.flush().await.map_err(|e| anyhow!("flush: {e}"))?;
        let acked_at = Instant::now();
        let targets = bench.high_watermarks("freshness").await?;
        acks.lock().unwrap().push((acked_at, targets, None));
    }
    let achieved_rows_s = next_id as f64 / load_started.elapsed().as_secs_f64();
    load_done.store(true, Ordering::SeqCst);
    watcher.await??;
    let acks = acks.lock().unwrap().clone();
    let mut latencies_s: Vec<f64> = acks
        .iter()
        .filter_map(|(acked_at, _, seen)| {
            seen.map(|s| s.saturating_duration_since(*acked_at).as_secs_f64())
        })
        .collect();
    latencies_s.sort_by(f64::total_cmp);
    Ok(Freshness {
        rate_rows_s: rate,
        achieved_rows_s,
        latencies_s,
        flushes: acks.len(),
    })
}

/// Marks each ack with the time the lake of the freshness table first covered it, until the
/// load is done and every ack is covered, or `deadline`.
async fn watch_acks(
    tiering: TieringService,
    acks: Arc<std::sync::Mutex<Vec<Ack>>>,
    load_done: Arc<AtomicBool>,
    deadline: Instant,
) -> Result<()> {
    loop {
        let status = tiering.status().await?;
        let now = Instant::now();
        let mut pending = 0;
        if let Some(t) = status.iter().find(|s| s.table == "freshness") {
            for (_, targets, seen) in acks.lock().unwrap().iter_mut() {
                if seen.is_some() {
                    continue;
                }
                if targets.iter().all(|(b, hw)| {
                    t.buckets
                        .get(&BucketKey::table(*b))
                        .is_some_and(|(_, lake)| lake >= hw)
                }) {
                    *seen = Some(now);
                } else {
                    pending += 1;
                }
            }
        }
        if (load_done.load(Ordering::SeqCst) && pending == 0) || now > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Peak RSS while tiering a table and one `RSS_FACTOR` times larger (none when `rss_rows` is 0).
async fn measure_rss(
    bench: &Bench,
    tiering: &TieringService,
    options: &TieringBenchOptions,
) -> Result<Vec<RssFigures>> {
    let mut rss = Vec::new();
    if options.rss_rows == 0 {
        return Ok(rss);
    }
    let sizes = [
        ("rss_small", options.rss_rows),
        ("rss_large", options.rss_rows * RSS_FACTOR),
    ];
    for (table, rows) in sizes {
        say!("pre-filling {DB}.{table} with {rows} rows ...");
        prefill(
            &bench.connection,
            &bench.arrow_schema,
            table,
            rows,
            options.batch_rows,
        )
        .await?;
    }
    for (table, rows) in sizes {
        say!("tiering {DB}.{table} ({rows} rows) measuring peak RSS ...");
        rss.push(tier_measuring_rss(tiering, &bench.admin, table, rows).await?);
    }
    Ok(rss)
}

fn print_report(options: &TieringBenchOptions, figures: &Figures) {
    let rows_s = |s: f64| format!("{:.0}", options.rows as f64 / s);
    let fresh = &figures.freshness;
    let latency = |q: f64| format!("{:.3}", percentile_f64(&fresh.latencies_s, q));
    say!();
    let hot_tier = match &options.bootstrap {
        Some(address) => format!("the Fluss cluster at {address}"),
        None => "an in-process hot store".to_string(),
    };
    say!(
        "silt bench tiering (profile: {}, {} rows x 12 columns, {BUCKETS} buckets, hot tier: {hot_tier})",
        crate::report::profile(),
        options.rows
    );
    let mut table = Table::new(["figure", "value"]).named("figures");
    table
        .row([
            if options.bootstrap.is_some() {
                // Fluss acknowledges a write once its replicas hold it, not once it is fsynced.
                "produce through fluss-rs (rows/s, acknowledged)".to_string()
            } else {
                "produce through fluss-rs (rows/s, durable)".to_string()
            },
            rows_s(figures.produce_s),
        ])
        .row([
            format!("ceiling: same batches -> parquet, {BUCKETS} writers (rows/s)"),
            rows_s(figures.ceiling_s),
        ])
        .row([
            format!("  same batches -> tiering's lake writer, {BUCKETS} tasks (rows/s)"),
            rows_s(figures.lake_writer_s),
        ])
        .row([
            "tiering from scratch (rows/s)".to_string(),
            rows_s(figures.tiering_s),
        ])
        .row([
            "tiering / ceiling (target >= 0.90)".to_string(),
            format!("{:.2}", figures.ceiling_s / figures.tiering_s),
        ])
        .row([
            "  lake writer / ceiling".to_string(),
            format!("{:.2}", figures.ceiling_s / figures.lake_writer_s),
        ])
        .row([
            "  tiering / lake writer".to_string(),
            format!("{:.2}", figures.lake_writer_s / figures.tiering_s),
        ])
        .row([
            format!(
                "freshness at {:.0} rows/s offered ({:.0} acknowledged), checkpoints every {:?}",
                fresh.rate_rows_s, fresh.achieved_rows_s, options.freshness
            ),
            format!("{} samples", fresh.latencies_s.len()),
        ])
        .row([
            "  write ack -> visible in lake p50 (s)".to_string(),
            latency(0.50),
        ])
        .row([
            "  write ack -> visible in lake p99 (s, target <= 0.75 at 100k rows/s)".to_string(),
            latency(0.99),
        ]);
    if fresh.latencies_s.len() < fresh.flushes {
        table.note(format!(
            "  {} of {} flushes never became visible within 120 s",
            fresh.flushes - fresh.latencies_s.len(),
            fresh.flushes
        ));
    }
    if let [small, large] = figures.rss.as_slice() {
        rss_rows(&mut table, small, large);
    }
    table.print();
}

/// The peak-RSS rows: each table's peak (and growth over its start), and the ratios.
fn rss_rows(table: &mut Table, small: &RssFigures, large: &RssFigures) {
    let growth = |r: &RssFigures| r.peak_kb.saturating_sub(r.before_kb) as f64 / 1024.0;
    table.row([
        format!("peak RSS while tiering ({})", small.source),
        "MiB".to_string(),
    ]);
    for r in [small, large] {
        table.row([
            format!(
                "  {} rows ({:.0} rows/s)",
                r.rows,
                r.rows as f64 / r.seconds
            ),
            format!("{:.0} (+{:.0})", r.peak_kb as f64 / 1024.0, growth(r)),
        ]);
    }
    table
        .row([
            format!("  peak RSS {RSS_FACTOR}x table / 1x table"),
            format!("{:.2}", large.peak_kb as f64 / small.peak_kb.max(1) as f64),
        ])
        .row([
            format!("  growth over the start, {RSS_FACTOR}x / 1x"),
            format!("{:.2}", growth(large) / growth(small).max(1.0)),
        ]);
}
