//! Measures a Fluss endpoint (silt's hotstore or a real Apache Fluss cluster) through the
//! official fluss-rs client: produce MB/s and rows/s with acks=all, fetch MB/s, upsert rows/s,
//! and lookup latency p50/p99, printed as a table.
//!
//! ```text
//! cargo run --release -p silt-integration-tests --example hotstore_bench -- \
//!     --bootstrap 127.0.0.1:9223 [--label fluss-0.9.1] [--rows 1000000] [--lookups 10000]
//! ```
//!
//! Method: one client process, one connection. Produce appends Arrow batches of
//! `--batch-rows` rows to a log table with `--buckets` buckets and counts from the first append
//! to the acknowledged flush. Fetch subscribes a record-batch scanner to every bucket from the
//! earliest offset and counts until all rows arrived. MB is the logical row size (fixed-width
//! columns plus string bytes), the same for every server, so ratios between servers are fair.
//! Lookups are sequential point lookups of random existing keys after `--keys` upserts.
//! Every phase has a deadline (`--deadline-s`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use fluss::client::{EARLIEST_OFFSET, FlussAdmin, FlussConnection};
use fluss::config::Config;
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;

const DATABASE: &str = "silt_bench";

#[derive(Debug, Clone)]
pub struct BenchConfig {
    bootstrap: String,
    label: String,
    rows: i64,
    batch_rows: i64,
    buckets: i32,
    keys: i64,
    lookups: usize,
    /// The client batches lookups for up to this long (fluss-rs default 100 ms, which would
    /// dominate sequential latency; 0 makes fluss-rs 1.0.0 spin and stall, so 1).
    lookup_batch_timeout_ms: u64,
    deadline: Duration,
}

impl BenchConfig {
    fn from_args() -> Result<Self> {
        let mut config = BenchConfig {
            bootstrap: "127.0.0.1:9123".into(),
            label: String::new(),
            rows: 1_000_000,
            batch_rows: 10_000,
            buckets: 3,
            keys: 100_000,
            lookups: 10_000,
            lookup_batch_timeout_ms: 1,
            deadline: Duration::from_secs(300),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--bootstrap" => config.bootstrap = value()?,
                "--label" => config.label = value()?,
                "--rows" => config.rows = value()?.parse()?,
                "--batch-rows" => config.batch_rows = value()?.parse()?,
                "--buckets" => config.buckets = value()?.parse()?,
                "--keys" => config.keys = value()?.parse()?,
                "--lookups" => config.lookups = value()?.parse()?,
                "--lookup-batch-timeout-ms" => config.lookup_batch_timeout_ms = value()?.parse()?,
                "--deadline-s" => config.deadline = Duration::from_secs(value()?.parse()?),
                "-h" | "--help" => {
                    println!(
                        "usage: hotstore_bench --bootstrap HOST:PORT [--label NAME] [--rows N] \
                         [--batch-rows N] [--buckets N] [--keys N] [--lookups N] \
                         [--lookup-batch-timeout-ms MS] [--deadline-s S]"
                    );
                    std::process::exit(0);
                }
                other => bail!("unknown flag {other} (try --help)"),
            }
        }
        ensure!(
            config.rows > 0 && config.batch_rows > 0 && config.buckets > 0,
            "counts must be positive"
        );
        ensure!(
            config.keys > 0 && config.lookups > 0,
            "--keys and --lookups must be positive"
        );
        if config.label.is_empty() {
            config.label = config.bootstrap.clone();
        }
        Ok(config)
    }
}

/// One phase's figures; `bytes` is logical row bytes.
#[derive(Debug, Clone, Default)]
pub struct Throughput {
    pub rows: i64,
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1_000_000.0 / self.elapsed.as_secs_f64()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Latency {
    pub samples: usize,
    /// Lookups of a written key that found nothing.
    pub misses: usize,
    /// Of those, the keys still missing when looked up again 2 s later.
    pub misses_after_2s: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
        Latency {
            samples: samples.len(),
            misses: 0,
            misses_after_2s: 0,
            p50: at(0.50),
            p99: at(0.99),
            max: *samples.last().unwrap_or(&Duration::ZERO),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    pub produce: Throughput,
    pub fetch: Throughput,
    pub upsert: Throughput,
    pub lookup: Latency,
}

fn arrow_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("ts", DataType::Int64, true),
        Field::new("payload", DataType::Utf8, true),
    ]))
}

/// 48 bytes of text per row, so a row is 64 logical bytes.
const PAYLOAD: &str = "the quick brown fox jumps over the lazy dog 0123";

fn batch(start: i64, rows: i64) -> Result<(RecordBatch, u64)> {
    let ids = Int64Array::from_iter_values(start..start + rows);
    let ts = Int64Array::from_iter_values((start..start + rows).map(|i| 1_700_000_000_000 + i));
    let payload: StringArray = (0..rows).map(|_| Some(PAYLOAD)).collect();
    let bytes = rows as u64 * (8 + 8 + PAYLOAD.len() as u64);
    let batch = RecordBatch::try_new(
        arrow_schema(),
        vec![Arc::new(ids), Arc::new(ts), Arc::new(payload)],
    )?;
    Ok((batch, bytes))
}

/// Creates `silt_bench.<name>_<unix ms>`: a name never used before, so a run never meets the
/// state of an earlier run's table of the same name.
async fn fresh_table(
    admin: &FlussAdmin,
    name: &str,
    descriptor: &TableDescriptor,
) -> Result<TablePath> {
    admin.create_database(DATABASE, None, true).await?;
    let unique_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let path = TablePath::new(DATABASE, format!("{name}_{unique_ms}"));
    admin
        .create_table(&path, descriptor, false)
        .await
        .with_context(|| format!("create {path}"))?;
    Ok(path)
}

async fn produce(
    connection: &FlussConnection,
    path: &TablePath,
    config: &BenchConfig,
) -> Result<Throughput> {
    let table = connection.get_table(path).await?;
    let writer = table.new_append()?.create_writer()?;
    // Build batches before the clock starts, so the figure is the server's and the wire's.
    let mut batches = Vec::new();
    let mut bytes = 0;
    let mut start = 0;
    while start < config.rows {
        let rows = config.batch_rows.min(config.rows - start);
        let (batch, batch_bytes) = batch(start, rows)?;
        batches.push(batch);
        bytes += batch_bytes;
        start += rows;
    }
    let started = Instant::now();
    for batch in batches {
        // Dropping the future is fine: flush() below waits for every acknowledgement.
        drop(writer.append_arrow_batch(batch)?);
    }
    tokio::time::timeout(config.deadline, writer.flush())
        .await
        .context("produce deadline")??;
    Ok(Throughput {
        rows: config.rows,
        bytes,
        elapsed: started.elapsed(),
    })
}

async fn fetch(
    connection: &FlussConnection,
    path: &TablePath,
    config: &BenchConfig,
) -> Result<Throughput> {
    let table = connection.get_table(path).await?;
    let scanner = table.new_scan().create_record_batch_log_scanner()?;
    for bucket in 0..config.buckets {
        scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
    }
    let started = Instant::now();
    let mut rows = 0i64;
    let mut bytes = 0u64;
    while rows < config.rows {
        ensure!(
            started.elapsed() < config.deadline,
            "fetch deadline: {rows} of {} rows",
            config.rows
        );
        for scan_batch in scanner.poll(Duration::from_millis(500)).await? {
            let batch = scan_batch.batch();
            let payload = batch
                .column_by_name("payload")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .context("payload column")?;
            rows += batch.num_rows() as i64;
            bytes += batch.num_rows() as u64 * 16 + payload.value_data().len() as u64;
        }
    }
    Ok(Throughput {
        rows,
        bytes,
        elapsed: started.elapsed(),
    })
}

async fn upsert_and_lookup(
    connection: &FlussConnection,
    path: &TablePath,
    config: &BenchConfig,
) -> Result<(Throughput, Latency)> {
    let table = connection.get_table(path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    let started = Instant::now();
    for id in 0..config.keys {
        let mut row = GenericRow::new(3);
        row.set_field(0, id);
        row.set_field(1, 1_700_000_000_000i64 + id);
        row.set_field(2, PAYLOAD);
        drop(writer.upsert(&row)?);
    }
    tokio::time::timeout(config.deadline, writer.flush())
        .await
        .context("upsert deadline")??;
    let bytes = config.keys as u64 * (16 + PAYLOAD.len() as u64);
    let upsert = Throughput {
        rows: config.keys,
        bytes,
        elapsed: started.elapsed(),
    };

    let mut lookuper = table.new_lookup()?.create_lookuper()?;
    let mut samples = Vec::with_capacity(config.lookups);
    // Every key was upserted and flushed before the first lookup, so a miss is a server bug;
    // it is counted and reported rather than ending the run.
    let mut missed = Vec::new();
    // A fixed-seed LCG spreads keys over the table without a rand dependency.
    let mut state: u64 = 0x5eed;
    let started = Instant::now();
    for _ in 0..config.lookups {
        ensure!(
            started.elapsed() < config.deadline,
            "lookup deadline after {} lookups",
            samples.len()
        );
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = ((state >> 33) % config.keys as u64) as i64;
        let mut key = GenericRow::new(1);
        key.set_field(0, id);
        let sent = Instant::now();
        let result = lookuper.lookup(&key).await?;
        samples.push(sent.elapsed());
        if result.get_single_row()?.is_none() {
            missed.push(id);
        }
    }
    let mut latency = Latency::of(samples);
    latency.misses = missed.len();
    if !missed.is_empty() {
        // Tell late visibility from loss: look the missed keys up again after a pause.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for id in missed {
            let mut key = GenericRow::new(1);
            key.set_field(0, id);
            if lookuper.lookup(&key).await?.get_single_row()?.is_none() {
                latency.misses_after_2s += 1;
            }
        }
    }
    Ok((upsert, latency))
}

pub async fn run_bench(config: &BenchConfig) -> Result<BenchReport> {
    let mut client = Config::default();
    client.bootstrap_servers = config.bootstrap.clone();
    client.writer_acks = "all".into();
    client.lookup_batch_timeout_ms = config.lookup_batch_timeout_ms;
    let connection = FlussConnection::new(client)
        .await
        .with_context(|| format!("connect to {}", config.bootstrap))?;
    let admin = connection.get_admin()?;

    let log_schema = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("ts", DataTypes::bigint())
        .column("payload", DataTypes::string())
        .build()?;
    let log = TableDescriptor::builder()
        .schema(log_schema)
        .distributed_by(Some(config.buckets), vec!["id".into()])
        .build()?;
    let log_path = fresh_table(&admin, "bench_log", &log).await?;
    eprintln!(
        "produce: {} rows in batches of {} into {} buckets",
        config.rows, config.batch_rows, config.buckets
    );
    let produce = produce(&connection, &log_path, config).await?;
    eprintln!(
        "  {:.0} rows/s, {:.1} MB/s in {:?}",
        produce.rows_per_s(),
        produce.mb_per_s(),
        produce.elapsed
    );
    eprintln!("fetch: {} rows", config.rows);
    let fetch = fetch(&connection, &log_path, config).await?;
    eprintln!(
        "  {:.0} rows/s, {:.1} MB/s in {:?}",
        fetch.rows_per_s(),
        fetch.mb_per_s(),
        fetch.elapsed
    );

    let kv_schema = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("ts", DataTypes::bigint())
        .column("payload", DataTypes::string())
        .primary_key(vec!["id"])?
        .build()?;
    let kv = TableDescriptor::builder()
        .schema(kv_schema)
        .distributed_by(Some(config.buckets), vec![])
        .build()?;
    let kv_path = fresh_table(&admin, "bench_kv", &kv).await?;
    eprintln!(
        "upsert: {} keys, then {} lookups",
        config.keys, config.lookups
    );
    let (upsert, lookup) = upsert_and_lookup(&connection, &kv_path, config).await?;
    eprintln!(
        "  upsert {:.0} rows/s; lookup p50 {:?} p99 {:?}",
        upsert.rows_per_s(),
        lookup.p50,
        lookup.p99
    );

    admin.drop_table(&log_path, true).await?;
    admin.drop_table(&kv_path, true).await?;
    Ok(BenchReport {
        produce,
        fetch,
        upsert,
        lookup,
    })
}

fn print_report(config: &BenchConfig, report: &BenchReport) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "hotstore bench: {} ({}), acks=all",
        config.label, config.bootstrap
    );
    println!("| metric                 | value        |");
    println!("|------------------------|--------------|");
    println!(
        "| produce rows/s         | {:>12.0} |",
        report.produce.rows_per_s()
    );
    println!(
        "| produce MB/s           | {:>12.1} |",
        report.produce.mb_per_s()
    );
    println!(
        "| fetch rows/s           | {:>12.0} |",
        report.fetch.rows_per_s()
    );
    println!(
        "| fetch MB/s             | {:>12.1} |",
        report.fetch.mb_per_s()
    );
    println!(
        "| upsert rows/s          | {:>12.0} |",
        report.upsert.rows_per_s()
    );
    println!(
        "| lookup p50 ms          | {:>12.3} |",
        ms(report.lookup.p50)
    );
    println!(
        "| lookup p99 ms          | {:>12.3} |",
        ms(report.lookup.p99)
    );
    println!(
        "| lookup max ms          | {:>12.3} |",
        ms(report.lookup.max)
    );
    println!("| lookup misses          | {:>12} |", report.lookup.misses);
    println!(
        "| ... still missing 2s later | {:>8} |",
        report.lookup.misses_after_2s
    );
    println!(
        "rows={} bytes={} produce_s={:.3} fetch_s={:.3} keys={} lookups={}",
        report.produce.rows,
        report.produce.bytes,
        report.produce.elapsed.as_secs_f64(),
        report.fetch.elapsed.as_secs_f64(),
        config.keys,
        report.lookup.samples
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(error) = try_main().await {
        eprintln!("hotstore_bench: error: {error:#}");
        std::process::exit(1);
    }
}

async fn try_main() -> Result<()> {
    let config = BenchConfig::from_args()?;
    let report = run_bench(&config).await?;
    print_report(&config, &report);
    ensure!(
        report.lookup.misses == 0,
        "{} lookups of written keys found nothing",
        report.lookup.misses
    );
    Ok(())
}
