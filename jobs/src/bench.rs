//! `silt bench tiering`: measured, not asserted. Prints a table of figures and ratios taken in
//! one run (these machines are noisy; compare ratios, not absolute numbers).
//!
//! - Throughput: a log table pre-filled with `rows` rows of 12 mixed columns is tiered from
//!   scratch; the ceiling is the same Arrow batches (with the same three system columns) written
//!   to Parquet with the same writer settings (snappy, same row groups) in the same process.
//! - Freshness: a steady load at `load_fraction` of the measured tiering throughput with a 1 s
//!   checkpoint interval; for every acknowledged flush, the time until the lake's txn offsets
//!   cover the high watermarks seen right after the acknowledgement (p50/p99).
//! - Peak RSS: two more log tables, of `rss_rows` and `RSS_FACTOR * rss_rows` rows, are
//!   pre-filled and then tiered one after the other; for each, the process's peak resident set
//!   (VmHWM, reset through /proc/self/clear_refs before the table starts) is compared with the
//!   resident set just before it. The growth must not scale with the table size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fluss::metadata::{DataTypes, TableDescriptor, TablePath};
use fluss::rpc::message::OffsetSpec;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use silt_hotstore::{Server, ServerConfig};

use crate::tiering::{TieringConfig, TieringService};

#[derive(Debug, Clone)]
pub struct TieringBenchOptions {
    pub rows: u64,
    pub batch_rows: usize,
    pub freshness_seconds: u64,
    pub load_fraction: f64,
    /// Rows of the smaller table of the peak-RSS phase (the larger has `RSS_FACTOR` times as
    /// many); 0 skips the phase.
    pub rss_rows: u64,
}

/// Size ratio of the two tables of the peak-RSS phase.
pub const RSS_FACTOR: u64 = 4;

const DB: &str = "bench";
const BUCKETS: i32 = 4;

pub(crate) fn schema_12() -> fluss::metadata::Schema {
    fluss::metadata::Schema::builder()
        .column("id", DataTypes::bigint())
        .column("user_id", DataTypes::int())
        .column("region", DataTypes::smallint())
        .column("amount", DataTypes::double())
        .column("discount", DataTypes::float())
        .column("paid", DataTypes::boolean())
        .column("sku", DataTypes::string())
        .column("city", DataTypes::string())
        .column("note", DataTypes::string())
        .column("created_ms", DataTypes::bigint())
        .column("qty", DataTypes::int())
        .column("tax", DataTypes::double())
        .build()
        .expect("a valid schema")
}

/// Deterministic rows `from..from+n` in the table's Arrow schema.
pub(crate) fn make_batch(schema: &SchemaRef, from: u64, n: usize) -> Result<RecordBatch> {
    let ids: Vec<i64> = (from..from + n as u64).map(|i| i as i64).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(12);
    for (i, field) in schema.fields().iter().enumerate() {
        let col: ArrayRef = match (i, field.data_type()) {
            (0, _) | (9, _) => Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|v| v * if i == 9 { 1000 } else { 1 }),
            )),
            (_, DataType::Int32) => Arc::new(Int32Array::from_iter_values(
                ids.iter().map(|v| (v % 10_007) as i32),
            )),
            (_, DataType::Int16) => Arc::new(Int16Array::from_iter_values(
                ids.iter().map(|v| (v % 17) as i16),
            )),
            (_, DataType::Float64) => Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|v| (v % 9973) as f64 * 0.25),
            )),
            (_, DataType::Float32) => Arc::new(Float32Array::from_iter_values(
                ids.iter().map(|v| (v % 7) as f32 * 0.05),
            )),
            (_, DataType::Boolean) => Arc::new(BooleanArray::from_iter(
                ids.iter().map(|v| Some(v % 3 == 0)),
            )),
            (6, _) => Arc::new(StringArray::from_iter_values(
                ids.iter().map(|v| format!("SKU-{:06}", v % 50_000)),
            )),
            (7, _) => {
                Arc::new(StringArray::from_iter_values(ids.iter().map(|v| {
                    ["Lisbon", "Oslo", "Lyon", "Kyoto", "Quito"][(*v % 5) as usize]
                })))
            }
            (_, DataType::Utf8) => Arc::new(StringArray::from_iter_values(
                ids.iter().map(|v| format!("order note {v} with some text")),
            )),
            (_, other) => return Err(anyhow!("bench schema has an unexpected type {other}")),
        };
        columns.push(col);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn with_system_columns(batch: &RecordBatch, offset: i64) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("__bucket", DataType::Int32, false));
    fields.push(Field::new("__offset", DataType::Int64, false));
    fields.push(Field::new(
        "__timestamp",
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        false,
    ));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(Int32Array::from(vec![0; n])));
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

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(crate) async fn wait_lake_covers(
    tiering: &TieringService,
    table: &str,
    targets: &[(i32, i64)],
    deadline: Instant,
) -> Result<Instant> {
    loop {
        let status = tiering.status().await?;
        if let Some(t) = status.iter().find(|s| s.table == table)
            && targets
                .iter()
                .all(|(b, hw)| t.buckets.get(b).is_some_and(|(_, lake)| lake >= hw))
        {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "the lake of {table} did not reach {targets:?} in time"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A field of /proc/self/status in kB (`VmRSS`, `VmHWM`); None where there is no procfs.
fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
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
        .map_err(|e| anyhow!("{e}"))?;
    let appender = table
        .new_append()
        .map_err(|e| anyhow!("{e}"))?
        .create_writer()
        .map_err(|e| anyhow!("{e}"))?;
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
        .map_err(|e| anyhow!("{e}"))?;
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

pub async fn tiering(options: TieringBenchOptions) -> Result<()> {
    let dir = tempfile::Builder::new().prefix("silt-bench-").tempdir()?;
    let server = Arc::new(
        Server::start(ServerConfig {
            bind_addr: "127.0.0.1:0".parse()?,
            data_dir: dir.path().join("hotstore"),
            ..ServerConfig::default()
        })
        .await?,
    );
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let admin = connection.get_admin().map_err(|e| anyhow!("{e}"))?;
    admin
        .create_database(DB, None, true)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    for table in ["throughput", "freshness", "rss_small", "rss_large"] {
        let descriptor = TableDescriptor::builder()
            .schema(schema_12())
            .distributed_by(Some(BUCKETS), vec![])
            .build()
            .map_err(|e| anyhow!("{e}"))?;
        admin
            .create_table(&TablePath::new(DB, table), &descriptor, false)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    let arrow_schema =
        silt_connectors::fluss::table_arrow_schema(&connection, DB, "throughput").await?;

    // Pre-fill.
    println!(
        "pre-filling {DB}.throughput with {} rows of 12 columns ...",
        options.rows
    );
    let table = connection
        .get_table(&TablePath::new(DB, "throughput"))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let appender = table
        .new_append()
        .map_err(|e| anyhow!("{e}"))?
        .create_writer()
        .map_err(|e| anyhow!("{e}"))?;
    let mut batches = Vec::new();
    let started = Instant::now();
    let mut written = 0u64;
    while written < options.rows {
        let n = options.batch_rows.min((options.rows - written) as usize);
        let batch = make_batch(&arrow_schema, written, n)?;
        appender
            .append_arrow_batch(batch.clone())
            .map_err(|e| anyhow!("append: {e}"))?;
        batches.push(batch);
        written += n as u64;
    }
    appender.flush().await.map_err(|e| anyhow!("flush: {e}"))?;
    let produce_s = started.elapsed().as_secs_f64();
    let produce_rows_s = options.rows as f64 / produce_s;

    // Ceiling: the same batches to Parquet with the writer's settings, in this process.
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(
            silt_connectors::delta::DeltaSinkConfig::ROW_GROUP_ROWS_DEFAULT,
        ))
        .build();
    let ceiling_dir = dir.path().join("ceiling");
    std::fs::create_dir_all(&ceiling_dir)?;
    let started = Instant::now();
    let mut offset = 0i64;
    let first = with_system_columns(&batches[0], 0)?;
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(ceiling_dir.join("part-0.parquet"))?,
        first.schema(),
        Some(props),
    )?;
    for batch in &batches {
        writer.write(&with_system_columns(batch, offset)?)?;
        offset += batch.num_rows() as i64;
    }
    writer.close()?;
    let ceiling_s = started.elapsed().as_secs_f64();
    drop(batches);

    // Tiering from scratch.
    let ids: Vec<i32> = (0..BUCKETS).collect();
    let hw = admin
        .list_offsets(&TablePath::new(DB, "throughput"), &ids, OffsetSpec::Latest)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let targets: Vec<(i32, i64)> = ids.iter().map(|b| (*b, hw[b])).collect();
    let mut config = TieringConfig::new(
        &bootstrap,
        dir.path().join("lake").to_string_lossy().to_string(),
        dir.path().join("checkpoints"),
    );
    config.freshness_default = Duration::from_secs(options.freshness_seconds.max(1));
    let tiering = TieringService::new(config, None);
    let started = Instant::now();
    tiering.tier_table(DB, "throughput").await?;
    let done = wait_lake_covers(
        &tiering,
        "throughput",
        &targets,
        Instant::now() + Duration::from_secs(3600),
    )
    .await?;
    let tiering_s = (done - started).as_secs_f64();

    // Freshness under a steady load at a fraction of the produce rate.
    // "Half the maximum": the maximum a tiering job sustains is its from-scratch throughput.
    let rate = (options.rows as f64 / tiering_s * options.load_fraction).max(100.0);
    let flush_every = Duration::from_millis(100);
    let rows_per_flush = ((rate * flush_every.as_secs_f64()) as usize).max(1);
    let fresh = connection
        .get_table(&TablePath::new(DB, "freshness"))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let fresh_writer = fresh
        .new_append()
        .map_err(|e| anyhow!("{e}"))?
        .create_writer()
        .map_err(|e| anyhow!("{e}"))?;
    tiering.tier_table(DB, "freshness").await?;
    let measure_for = Duration::from_secs(20);
    // (acked at, high watermarks right after the ack, seen in the lake at)
    let acks: Arc<std::sync::Mutex<Vec<(Instant, Vec<(i32, i64)>, Option<Instant>)>>> =
        Arc::default();
    let load_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (acks, load_done, tiering) = (acks.clone(), load_done.clone(), tiering.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + measure_for + Duration::from_secs(120);
            loop {
                let status = tiering.status().await?;
                let now = Instant::now();
                let mut pending = 0;
                if let Some(t) = status.iter().find(|s| s.table == "freshness") {
                    for (_, targets, seen) in acks.lock().unwrap().iter_mut() {
                        if seen.is_none() {
                            if targets
                                .iter()
                                .all(|(b, hw)| t.buckets.get(b).is_some_and(|(_, lake)| lake >= hw))
                            {
                                *seen = Some(now);
                            } else {
                                pending += 1;
                            }
                        }
                    }
                }
                if (load_done.load(std::sync::atomic::Ordering::SeqCst) && pending == 0)
                    || now > deadline
                {
                    return Ok::<_, anyhow::Error>(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let load_started = Instant::now();
    let mut next_id = 0u64;
    let mut tick = tokio::time::interval(flush_every);
    while load_started.elapsed() < measure_for {
        tick.tick().await;
        fresh_writer
            .append_arrow_batch(make_batch(&arrow_schema, next_id, rows_per_flush)?)
            .map_err(|e| anyhow!("append: {e}"))?;
        next_id += rows_per_flush as u64;
        fresh_writer
            .flush()
            .await
            .map_err(|e| anyhow!("flush: {e}"))?;
        let acked_at = Instant::now();
        let hw = admin
            .list_offsets(&TablePath::new(DB, "freshness"), &ids, OffsetSpec::Latest)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        acks.lock()
            .unwrap()
            .push((acked_at, ids.iter().map(|b| (*b, hw[b])).collect(), None));
    }
    load_done.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await??;
    let acks = acks.lock().unwrap().clone();
    let mut latencies: Vec<f64> = acks
        .iter()
        .filter_map(|(acked_at, _, seen)| {
            seen.map(|s| s.saturating_duration_since(*acked_at).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);

    // Peak RSS while tiering a table and one RSS_FACTOR times larger.
    let mut rss = Vec::new();
    if options.rss_rows > 0 {
        let sizes = [
            ("rss_small", options.rss_rows),
            ("rss_large", options.rss_rows * RSS_FACTOR),
        ];
        for (table, rows) in sizes {
            println!("pre-filling {DB}.{table} with {rows} rows ...");
            prefill(&connection, &arrow_schema, table, rows, options.batch_rows).await?;
        }
        for (table, rows) in sizes {
            println!("tiering {DB}.{table} ({rows} rows) measuring peak RSS ...");
            rss.push(tier_measuring_rss(&tiering, &admin, table, rows).await?);
        }
    }
    tiering.shutdown(Duration::from_secs(60)).await;

    let mb = |rows: u64, s: f64| rows as f64 / s;
    println!();
    println!(
        "silt bench tiering (profile: {}, {} rows x 12 columns, {BUCKETS} buckets)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        options.rows
    );
    println!("{:<44} {:>14}", "figure", "value");
    println!(
        "{:<44} {:>14.0}",
        "produce through fluss-rs (rows/s, durable)", produce_rows_s
    );
    println!(
        "{:<44} {:>14.0}",
        "ceiling: same batches -> parquet (rows/s)",
        mb(options.rows, ceiling_s)
    );
    println!(
        "{:<44} {:>14.0}",
        "tiering from scratch (rows/s)",
        mb(options.rows, tiering_s)
    );
    println!(
        "{:<44} {:>14.2}",
        "tiering / ceiling (target >= 0.80)",
        ceiling_s / tiering_s
    );
    println!(
        "{:<44} {:>14}",
        format!(
            "freshness at {:.0} rows/s, {} s checkpoints",
            rate, options.freshness_seconds
        ),
        format!("{} samples", latencies.len())
    );
    println!(
        "{:<44} {:>14.3}",
        "  write ack -> visible in lake p50 (s)",
        percentile(&latencies, 0.50)
    );
    println!(
        "{:<44} {:>14.3}",
        "  write ack -> visible in lake p99 (s, target <= 3)",
        percentile(&latencies, 0.99)
    );
    if latencies.len() < acks.len() {
        println!(
            "  {} of {} flushes never became visible within 120 s",
            acks.len() - latencies.len(),
            acks.len()
        );
    }
    if let [small, large] = rss.as_slice() {
        let growth = |r: &RssFigures| r.peak_kb.saturating_sub(r.before_kb) as f64 / 1024.0;
        println!(
            "{:<44} {:>14}",
            format!("peak RSS while tiering ({})", small.source),
            "MiB"
        );
        for r in [small, large] {
            println!(
                "{:<44} {:>14}",
                format!(
                    "  {} rows ({:.0} rows/s)",
                    r.rows,
                    r.rows as f64 / r.seconds
                ),
                format!("{:.0} (+{:.0})", r.peak_kb as f64 / 1024.0, growth(r))
            );
        }
        println!(
            "{:<44} {:>14.2}",
            format!("  peak RSS {RSS_FACTOR}x table / 1x table"),
            large.peak_kb as f64 / small.peak_kb.max(1) as f64
        );
        println!(
            "{:<44} {:>14.2}",
            format!("  growth over the start, {RSS_FACTOR}x / 1x"),
            growth(large) / growth(small).max(1.0)
        );
    }
    drop((fresh_writer, fresh, appender, table));
    drop(connection);
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await?;
    }
    Ok(())
}
