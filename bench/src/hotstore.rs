//! `silt bench hotstore`: silt's hotstore against a real Apache Fluss cluster, through the
//! official fluss-rs client, in one run. Measured, not asserted: prints a table of figures and
//! the ratios silt/Fluss (these machines are noisy; compare ratios, not absolute numbers).
//!
//! Method: one client, one connection per endpoint. Produce appends Arrow batches of
//! `batch_rows` rows to a log table with `buckets` buckets with acks=all and counts from the
//! first append to the acknowledged flush (after one acknowledged warm-up batch). Fetch
//! subscribes a record-batch scanner to every bucket from the earliest offset and counts until
//! all rows arrived, `fetch_passes` times. MB is the logical row size (fixed-width columns plus
//! string bytes), the same for every server, so ratios are fair. Lookups are sequential point
//! lookups of random existing keys after `keys` upserts. Every phase has a deadline.
//!
//! silt's hotstore runs in this process with the configured durability (an append is
//! acknowledged only once fsynced). The real cluster is started from the harness in
//! `integration-tests/fluss-real` (`start.sh`/`stop.sh`) after silt's run, on free loopback
//! ports and a scratch work dir, and stopped afterwards; where Java or Maven is missing the
//! Fluss column is skipped with the harness's reason.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use fluss::client::{EARLIEST_OFFSET, FlussAdmin, FlussConnection};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;

use crate::procfs;
use crate::report::{Table, percentile, say};

const DATABASE: &str = "silt_bench";

/// The workload, the same for every endpoint.
#[derive(Debug, Clone)]
pub struct Workload {
    pub rows: i64,
    pub batch_rows: i64,
    pub buckets: i32,
    pub keys: i64,
    pub lookups: usize,
    /// Times the whole log table is read back (more passes, steadier figure).
    pub fetch_passes: u32,
    /// Arrow compressions of the log table (`table.log.arrow.compression.type`): the produce
    /// and fetch phases run once per entry. With ZSTD, Fluss's default, the client's
    /// (de)compression is most of the work, the same against every server.
    pub compressions: Vec<String>,
    /// The scanner's long-poll wait (fluss-rs `scanner_log_fetch_wait_max_time_ms`, default
    /// 500). fluss-rs keeps one fetch per server in flight and leaves buckets it still has
    /// buffered out of it, so once one bucket reaches the end of the log its fetch waits
    /// this long on the server while the other buckets' next fetch cannot be sent: with
    /// 500 ms every bucket that finishes early costs half a second of idle time, against
    /// any Fluss server. A short wait measures throughput instead of that tail.
    pub fetch_wait_max_ms: i32,
    /// The client batches lookups for up to this long (fluss-rs default 100 ms, which would
    /// dominate sequential latency; 0 makes fluss-rs 1.0.0 spin and stall, so 1).
    pub lookup_batch_timeout_ms: u64,
    /// The client sends a batch of lookups as soon as it holds this many (fluss-rs default
    /// 128). The bench's lookups are sequential, one in flight, so a batch never holds more
    /// than one: with 1 the client sends each at once, and the figure is the round trip; with
    /// more, fluss-rs 1.0.0 holds each lookup until its batch window (started when the
    /// previous batch left) closes, 1-2 ms that are the client's alone.
    pub lookup_batch_size_max: usize,
    pub deadline: Duration,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            rows: 1_000_000,
            batch_rows: 10_000,
            buckets: 3,
            keys: 100_000,
            lookups: 10_000,
            fetch_passes: 5,
            fetch_wait_max_ms: 10,
            compressions: vec!["ZSTD".into(), "NONE".into()],
            lookup_batch_timeout_ms: 1,
            lookup_batch_size_max: 1,
            deadline: Duration::from_secs(300),
        }
    }
}

impl Workload {
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.rows > 0 && self.batch_rows > 0 && self.buckets > 0,
            "--rows, --batch-rows and --buckets must be positive"
        );
        ensure!(
            self.keys > 0
                && self.lookups > 0
                && self.fetch_passes > 0
                && self.lookup_batch_size_max > 0,
            "--keys, --lookups, --lookup-batch-size and --fetch-passes must be positive"
        );
        for compression in &self.compressions {
            ensure!(
                ["NONE", "LZ4_FRAME", "ZSTD"].contains(&compression.as_str()),
                "unknown compression {compression:?} (use NONE, LZ4_FRAME or ZSTD)"
            );
        }
        ensure!(!self.compressions.is_empty(), "--compressions is empty");
        Ok(())
    }
}

/// Where the Fluss column comes from.
#[derive(Debug, Clone)]
pub enum FlussTarget {
    /// Start a cluster with the harness in this directory (start.sh / stop.sh).
    Harness {
        dir: PathBuf,
        /// Extra server.yaml lines, e.g. `log.flush.interval-messages: 1` (fsync per batch).
        extra_conf: Option<String>,
    },
    /// Measure an already running endpoint.
    Bootstrap(String),
    /// No Fluss column.
    None,
}

/// The flags of `silt bench hotstore`.
#[derive(Debug, Clone, clap::Args)]
pub struct HotstoreArgs {
    /// Rows appended to the log table, then fetched.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: i64,
    #[arg(long, default_value_t = 10_000)]
    pub batch_rows: i64,
    #[arg(long, default_value_t = 3)]
    pub buckets: i32,
    /// Keys upserted into the PK table before the lookups.
    #[arg(long, default_value_t = 100_000)]
    pub keys: i64,
    /// Sequential point lookups of random written keys.
    #[arg(long, default_value_t = 10_000)]
    pub lookups: usize,
    /// The client's lookup batch size (fluss-rs `lookup_max_batch_size`); the same against
    /// every server. 1 sends each lookup at once; larger sizes add the client's 1 ms batch
    /// window to every sequential lookup.
    #[arg(long, default_value_t = 1)]
    pub lookup_batch_size: usize,
    /// Times the log table is read back in full.
    #[arg(long, default_value_t = 5)]
    pub fetch_passes: u32,
    /// Arrow compressions of the log table, comma-separated; produce and fetch run once
    /// per entry (ZSTD is Fluss's default).
    #[arg(long, value_delimiter = ',', default_values_t = ["ZSTD".to_string(), "NONE".to_string()])]
    pub compressions: Vec<String>,
    /// The scanner's long-poll wait in ms (fluss-rs default 500; see bench/src/hotstore.rs
    /// for why a long wait measures the tail of the scan rather than throughput).
    #[arg(long, default_value_t = 10)]
    pub fetch_wait_max_ms: i32,
    /// Deadline of each phase in seconds.
    #[arg(long, default_value_t = 300)]
    pub deadline_s: u64,
    /// The real-Fluss harness (start.sh, stop.sh) that starts the comparison cluster.
    #[arg(long, default_value = "integration-tests/fluss-real")]
    pub fluss_harness: PathBuf,
    /// Extra server.yaml lines for the harness's cluster, e.g.
    /// "log.flush.interval-messages: 1" (Fluss fsyncs every batch, as silt does).
    #[arg(long)]
    pub fluss_conf: Option<String>,
    /// Compare with this running Fluss endpoint instead of starting one.
    #[arg(long, conflicts_with = "no_fluss")]
    pub fluss_bootstrap: Option<String>,
    /// Measure silt only.
    #[arg(long)]
    pub no_fluss: bool,
}

impl From<HotstoreArgs> for HotstoreBenchOptions {
    fn from(args: HotstoreArgs) -> Self {
        let fluss = match (args.no_fluss, args.fluss_bootstrap) {
            (true, _) => FlussTarget::None,
            (false, Some(bootstrap)) => FlussTarget::Bootstrap(bootstrap),
            (false, None) => FlussTarget::Harness {
                dir: args.fluss_harness,
                extra_conf: args.fluss_conf,
            },
        };
        let workload = Workload {
            rows: args.rows,
            batch_rows: args.batch_rows,
            buckets: args.buckets,
            keys: args.keys,
            lookups: args.lookups,
            lookup_batch_size_max: args.lookup_batch_size,
            fetch_passes: args.fetch_passes,
            compressions: args.compressions,
            fetch_wait_max_ms: args.fetch_wait_max_ms,
            deadline: Duration::from_secs(args.deadline_s),
            ..Workload::default()
        };
        HotstoreBenchOptions { workload, fluss }
    }
}

#[derive(Debug, Clone)]
pub struct HotstoreBenchOptions {
    pub workload: Workload,
    pub fluss: FlussTarget,
}

/// One phase's figures; `bytes` is logical row bytes.
#[derive(Debug, Clone, Default)]
pub struct Throughput {
    pub rows: i64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// CPU seconds the phase cost the client and the server.
    pub cpu: CpuSplit,
}

/// CPU seconds spent by the client (this process's threads, less the in-process server's)
/// and by the server (NaN where the bench cannot see it: an endpoint given by address).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSplit {
    pub client_s: f64,
    pub server_s: f64,
}

impl CpuSplit {
    fn since(self, before: CpuSplit) -> CpuSplit {
        CpuSplit {
            client_s: self.client_s - before.client_s,
            server_s: self.server_s - before.server_s,
        }
    }
}

/// Reads how much CPU the client and the server have used so far.
///
/// Where the time of a phase goes decides what a server can change: when most of it is the
/// client's (encoding, compression, decompression), the same client against any server sets
/// the ratio's ceiling. silt's in-process server runs on threads of its own (its runtime's
/// `silt-server` workers, fjall's workers, the I/O and background threads), so one process
/// is split by thread name; a real Fluss is the processes of its pid files.
#[derive(Debug, Clone)]
pub enum CpuMeter {
    InProcess,
    Processes(Vec<u32>),
    /// Only the client is measured.
    ClientOnly,
}

/// Name prefixes (as /proc shows them, at most 15 bytes) of the in-process server's threads:
/// its runtime, fjall's workers, the hot store's group-commit fsyncs, lake and checkpoint
/// file I/O, and background work.
const SERVER_THREAD_PREFIXES: [&str; 5] = [
    SERVER_THREAD_NAME,
    "fjall",
    "silt-fsync",
    "silt-io",
    "silt-background",
];
const SERVER_THREAD_NAME: &str = "silt-server";

fn is_server_thread(name: &str) -> bool {
    SERVER_THREAD_PREFIXES.iter().any(|p| name.starts_with(p))
}

impl CpuMeter {
    pub fn read(&self) -> CpuSplit {
        let own = procfs::cpu_s("self");
        match self {
            CpuMeter::InProcess => {
                let server_s = procfs::own_threads()
                    .into_iter()
                    .filter(|(name, _)| is_server_thread(name))
                    .map(|(_, cpu_s)| cpu_s)
                    .sum();
                CpuSplit {
                    client_s: own - server_s,
                    server_s,
                }
            }
            CpuMeter::Processes(pids) => CpuSplit {
                client_s: own,
                server_s: pids.iter().map(|pid| procfs::cpu_s(&pid.to_string())).sum(),
            },
            CpuMeter::ClientOnly => CpuSplit {
                client_s: own,
                server_s: f64::NAN,
            },
        }
    }
}

impl Throughput {
    pub fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1_000_000.0 / self.elapsed.as_secs_f64()
    }

    /// `<rows/s> rows/s, <MB/s> MB/s in <elapsed>`, as the bench shows a phase's progress.
    fn summary(&self) -> String {
        format!(
            "{:.0} rows/s, {:.1} MB/s in {:?}",
            self.rows_per_s(),
            self.mb_per_s(),
            self.elapsed
        )
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
        let at = |q: f64| percentile(&samples, q).unwrap_or_default();
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

/// Produce and fetch of a log table with one Arrow compression.
#[derive(Debug, Clone, Default)]
pub struct LogFigures {
    pub compression: String,
    pub produce: Throughput,
    pub fetch: Throughput,
}

#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    /// One entry per [`Workload::compressions`], in that order.
    pub logs: Vec<LogFigures>,
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
/// state of an earlier run's table of the same name. Returns once every bucket answers
/// ListOffsets: real Fluss places a new table's buckets a moment after CreateTable returns,
/// and a writer created before that stalled fluss-rs 1.0.0 for minutes in one run.
async fn fresh_table(
    admin: &FlussAdmin,
    name: &str,
    descriptor: &TableDescriptor,
    buckets: i32,
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
    let ids: Vec<i32> = (0..buckets).collect();
    let started = Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        match admin
            .list_offsets(&path, &ids, fluss::rpc::message::OffsetSpec::Latest)
            .await
        {
            Ok(offsets) if offsets.len() == ids.len() => return Ok(path),
            Ok(_) | Err(_) if started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Ok(offsets) => bail!(
                "{path} answers offsets for {} of {buckets} buckets after 60 s",
                offsets.len()
            ),
            Err(error) => bail!("{path} has no leaders after 60 s: {error}"),
        }
    }
}

/// What each measurement of one endpoint uses: the client's connection, the workload and the
/// CPU meter.
#[derive(Clone, Copy)]
struct Endpoint<'a> {
    connection: &'a FlussConnection,
    workload: &'a Workload,
    meter: &'a CpuMeter,
}

impl Endpoint<'_> {
    /// Produces into and fetches from a fresh log table with `compression`, then drops it.
    async fn log_figures(self, admin: &FlussAdmin, compression: &str) -> Result<LogFigures> {
        let workload = self.workload;
        let log = TableDescriptor::builder()
            .schema(bench_schema(false)?)
            .distributed_by(Some(workload.buckets), vec!["id".into()])
            .property("table.log.arrow.compression.type", compression)
            .build()?;
        let name = format!("bench_log_{}", compression.to_lowercase());
        let log_path = fresh_table(admin, &name, &log, workload.buckets).await?;
        eprintln!(
            "  produce ({compression}): {} rows in batches of {} into {} buckets",
            workload.rows, workload.batch_rows, workload.buckets
        );
        let produce = self.produce(&log_path).await?;
        eprintln!("    {}", produce.summary());
        eprintln!(
            "  fetch ({compression}): {} rows, {} passes",
            workload.rows + workload.batch_rows,
            workload.fetch_passes
        );
        let fetch = self.fetch(&log_path).await?;
        eprintln!("    {}", fetch.summary());
        admin.drop_table(&log_path, true).await?;
        Ok(LogFigures {
            compression: compression.to_string(),
            produce,
            fetch,
        })
    }

    async fn produce(self, path: &TablePath) -> Result<Throughput> {
        let table = self.connection.get_table(path).await?;
        let writer = table.new_append()?.create_writer()?;
        // One acknowledged warm-up batch (negative ids) before the clock starts: a new table's
        // buckets may still be getting their leaders (real Fluss answers NotLeaderOrFollower for
        // a moment), and the self.connection and the server's code paths get warm.
        let (warm_up, _) = batch(-self.workload.batch_rows, self.workload.batch_rows)?;
        drop(writer.append_arrow_batch(warm_up)?);
        tokio::time::timeout(self.workload.deadline, writer.flush())
            .await
            .context("warm-up append deadline")??;
        // Build batches before the clock starts, so the figure is the server's and the wire's.
        let mut batches = Vec::new();
        let mut bytes = 0;
        let mut start = 0;
        while start < self.workload.rows {
            let rows = self.workload.batch_rows.min(self.workload.rows - start);
            let (batch, batch_bytes) = batch(start, rows)?;
            batches.push(batch);
            bytes += batch_bytes;
            start += rows;
        }
        let (started, cpu_before) = (Instant::now(), self.meter.read());
        for batch in batches {
            // Dropping the future is fine: flush() below waits for every acknowledgement.
            drop(writer.append_arrow_batch(batch)?);
        }
        tokio::time::timeout(self.workload.deadline, writer.flush())
            .await
            .context("produce deadline")??;
        Ok(Throughput {
            rows: self.workload.rows,
            bytes,
            elapsed: started.elapsed(),
            cpu: self.meter.read().since(cpu_before),
        })
    }

    /// Reads the whole table `fetch_passes` times, each pass with a new scanner from the
    /// earliest offset; the figure is all passes' bytes over all passes' time.
    async fn fetch(self, path: &TablePath) -> Result<Throughput> {
        let table = self.connection.get_table(path).await?;
        // The table also holds produce()'s warm-up batch.
        let table_rows = self.workload.rows + self.workload.batch_rows;
        let mut total = Throughput::default();
        for _ in 0..self.workload.fetch_passes {
            let scanner = table.new_scan().create_record_batch_log_scanner()?;
            for bucket in 0..self.workload.buckets {
                scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
            }
            let (started, cpu_before) = (Instant::now(), self.meter.read());
            let mut rows = 0i64;
            while rows < table_rows {
                ensure!(
                    started.elapsed() < self.workload.deadline,
                    "fetch deadline: {rows} of {table_rows} rows"
                );
                for scan_batch in scanner.poll(Duration::from_millis(500)).await? {
                    let batch = scan_batch.batch();
                    let payload = batch
                        .column_by_name("payload")
                        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                        .context("payload column")?;
                    rows += batch.num_rows() as i64;
                    total.bytes += batch.num_rows() as u64 * 16 + payload.value_data().len() as u64;
                }
            }
            total.elapsed += started.elapsed();
            total.rows += rows;
            let cpu = self.meter.read().since(cpu_before);
            total.cpu.client_s += cpu.client_s;
            total.cpu.server_s += cpu.server_s;
        }
        Ok(total)
    }

    async fn upsert_and_lookup(self, path: &TablePath) -> Result<(Throughput, Latency)> {
        let table = self.connection.get_table(path).await?;
        let writer = table.new_upsert()?.create_writer()?;
        let started = Instant::now();
        for id in 0..self.workload.keys {
            let mut row = GenericRow::new(3);
            row.set_field(0, id);
            row.set_field(1, 1_700_000_000_000i64 + id);
            row.set_field(2, PAYLOAD);
            drop(writer.upsert(&row)?);
        }
        tokio::time::timeout(self.workload.deadline, writer.flush())
            .await
            .context("upsert deadline")??;
        let bytes = self.workload.keys as u64 * (16 + PAYLOAD.len() as u64);
        let upsert = Throughput {
            rows: self.workload.keys,
            bytes,
            elapsed: started.elapsed(),
            cpu: CpuSplit::default(),
        };

        let mut lookuper = table.new_lookup()?.create_lookuper()?;
        let mut samples = Vec::with_capacity(self.workload.lookups);
        // Every key was upserted and flushed before the first lookup, so a miss is a server bug;
        // it is counted and reported rather than ending the run.
        let mut missed = Vec::new();
        // A fixed-seed LCG spreads keys over the table without a rand dependency.
        let mut state: u64 = 0x5eed;
        let started = Instant::now();
        for _ in 0..self.workload.lookups {
            ensure!(
                started.elapsed() < self.workload.deadline,
                "lookup deadline after {} lookups",
                samples.len()
            );
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = ((state >> 33) % self.workload.keys as u64) as i64;
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
}

/// The columns of the bench's tables, `id`, `ts` and `payload`; the kv table's key is `id`.
fn bench_schema(primary_key: bool) -> Result<Schema> {
    let columns = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("ts", DataTypes::bigint())
        .column("payload", DataTypes::string());
    let columns = if primary_key {
        columns.primary_key(vec!["id"])?
    } else {
        columns
    };
    Ok(columns.build()?)
}

/// Runs the workload against one endpoint (silt's hotstore or a real Fluss cluster).
pub async fn run_endpoint(
    bootstrap: &str,
    workload: &Workload,
    meter: &CpuMeter,
) -> Result<BenchReport> {
    workload.validate()?;
    let client = fluss::config::Config {
        bootstrap_servers: bootstrap.to_string(),
        writer_acks: "all".into(),
        lookup_batch_timeout_ms: workload.lookup_batch_timeout_ms,
        lookup_max_batch_size: workload.lookup_batch_size_max,
        scanner_log_fetch_wait_max_time_ms: workload.fetch_wait_max_ms,
        ..Default::default()
    };
    let connection = FlussConnection::new(client)
        .await
        .with_context(|| format!("connect to {bootstrap}"))?;
    let admin = connection.get_admin()?;
    let endpoint = Endpoint {
        connection: &connection,
        workload,
        meter,
    };

    let mut logs = Vec::new();
    for compression in &workload.compressions {
        logs.push(endpoint.log_figures(&admin, compression).await?);
    }

    let kv = TableDescriptor::builder()
        .schema(bench_schema(true)?)
        .distributed_by(Some(workload.buckets), vec![])
        .build()?;
    let kv_path = fresh_table(&admin, "bench_kv", &kv, workload.buckets).await?;
    eprintln!(
        "  upsert: {} keys, then {} lookups",
        workload.keys, workload.lookups
    );
    let (upsert, lookup) = endpoint.upsert_and_lookup(&kv_path).await?;
    eprintln!(
        "    upsert {:.0} rows/s; lookup p50 {:?} p99 {:?}",
        upsert.rows_per_s(),
        lookup.p50,
        lookup.p99
    );

    admin.drop_table(&kv_path, true).await?;
    Ok(BenchReport {
        logs,
        upsert,
        lookup,
    })
}

/// A real Fluss cluster started by the harness; stopped on [`FlussCluster::stop`].
struct FlussCluster {
    harness: PathBuf,
    env: Vec<(String, String)>,
    bootstrap: String,
    _work_dir: tempfile::TempDir,
}

/// Outcome of trying to start the harness: a cluster, or the reason the column is skipped.
enum Started {
    Cluster(FlussCluster),
    Skipped(String),
}

/// A loopback port free right now (the harness binds it moments later).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_fluss(harness: &Path, extra_conf: Option<&str>) -> Result<Started> {
    let start = harness.join("start.sh");
    if !start.is_file() {
        return Ok(Started::Skipped(format!(
            "no Fluss harness at {} (run from silt's source tree or pass --fluss-harness DIR)",
            start.display()
        )));
    }
    let work_dir = tempfile::Builder::new()
        .prefix("silt-bench-fluss-")
        .tempdir()?;
    let mut env = vec![
        (
            "FLUSS_REAL_WORK_DIR".to_string(),
            work_dir.path().display().to_string(),
        ),
        ("FLUSS_REAL_ZK_PORT".to_string(), free_port()?.to_string()),
        (
            "FLUSS_REAL_COORDINATOR_PORT".to_string(),
            free_port()?.to_string(),
        ),
        (
            "FLUSS_REAL_TABLET_PORT".to_string(),
            free_port()?.to_string(),
        ),
    ];
    if let Some(conf) = extra_conf {
        env.push(("FLUSS_REAL_EXTRA_CONF".to_string(), conf.to_string()));
    }
    eprintln!("starting a real Fluss cluster with {}", start.display());
    let output = std::process::Command::new(&start)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(std::process::Stdio::piped())
        .output()
        .with_context(|| format!("run {}", start.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0) => {}
        Some(77) => {
            let reason = stderr
                .lines()
                .find_map(|l| l.strip_prefix("SKIPPED: "))
                .unwrap_or("the harness skipped")
                .to_string();
            return Ok(Started::Skipped(reason));
        }
        _ => bail!(
            "{} failed ({}): {}",
            start.display(),
            output.status,
            stderr
                .lines()
                .rev()
                .take(10)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    }
    let bootstrap = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    ensure!(
        !bootstrap.is_empty(),
        "{} printed no bootstrap address",
        start.display()
    );
    Ok(Started::Cluster(FlussCluster {
        harness: harness.to_path_buf(),
        env,
        bootstrap,
        _work_dir: work_dir,
    }))
}

impl FlussCluster {
    /// The cluster's processes (ZooKeeper, coordinator, tablet server) from the harness's
    /// pid files.
    fn cpu_meter(&self) -> CpuMeter {
        let work_dir = self
            .env
            .iter()
            .find(|(k, _)| k == "FLUSS_REAL_WORK_DIR")
            .map(|(_, v)| PathBuf::from(v));
        let pids: Vec<u32> = ["zk", "coordinator", "tablet"]
            .iter()
            .filter_map(|name| {
                let file = work_dir.as_ref()?.join(format!("{name}.pid"));
                std::fs::read_to_string(file).ok()?.trim().parse().ok()
            })
            .collect();
        if pids.is_empty() {
            CpuMeter::ClientOnly
        } else {
            CpuMeter::Processes(pids)
        }
    }

    fn stop(self) {
        let stop = self.harness.join("stop.sh");
        match std::process::Command::new(&stop)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
        {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "warning: {} exited {}: {}",
                stop.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => eprintln!("warning: cannot run {}: {error}", stop.display()),
        }
    }
}

/// The Fluss column: figures, or why there are none.
enum FlussColumn {
    Measured { label: String, report: BenchReport },
    Skipped(String),
}

async fn measure_fluss(target: &FlussTarget, workload: &Workload) -> Result<FlussColumn> {
    match target {
        FlussTarget::None => Ok(FlussColumn::Skipped("--no-fluss".into())),
        FlussTarget::Bootstrap(bootstrap) => {
            eprintln!("real Fluss at {bootstrap}:");
            let report = run_endpoint(bootstrap, workload, &CpuMeter::ClientOnly).await?;
            Ok(FlussColumn::Measured {
                label: format!("Fluss at {bootstrap}"),
                report,
            })
        }
        FlussTarget::Harness { dir, extra_conf } => {
            let (dir, conf) = (dir.clone(), extra_conf.clone());
            let started =
                tokio::task::spawn_blocking(move || start_fluss(&dir, conf.as_deref())).await??;
            let cluster = match started {
                Started::Cluster(cluster) => cluster,
                Started::Skipped(reason) => return Ok(FlussColumn::Skipped(reason)),
            };
            eprintln!("real Fluss at {}:", cluster.bootstrap);
            let result = run_endpoint(&cluster.bootstrap, workload, &cluster.cpu_meter()).await;
            tokio::task::spawn_blocking(move || cluster.stop()).await?;
            let label = match extra_conf {
                Some(conf) => format!("Fluss 0.9.1 ({conf})"),
                None => "Fluss 0.9.1 (default: no fsync)".to_string(),
            };
            Ok(FlussColumn::Measured {
                label,
                report: result?,
            })
        }
    }
}

/// Starts silt's hotstore in this process on a free loopback port in a scratch directory, on
/// a runtime of its own (two workers, as `silt up` has on two cores), so that the client's
/// tasks and the server's do not share workers and [`CpuMeter::InProcess`] can tell them apart.
async fn measure_silt(
    config: &silt_jobs::config::Config,
    workload: &Workload,
) -> Result<BenchReport> {
    let dir = tempfile::Builder::new()
        .prefix("silt-bench-hotstore-")
        .tempdir()?;
    let mut server_config = config.hotstore()?;
    server_config.bind_addr = "127.0.0.1:0".parse()?;
    server_config.data_dir = dir.path().join("hotstore");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREAD_NAME)
        .enable_all()
        .build()?;
    let server = runtime
        .spawn(silt_hotstore::Server::start(server_config))
        .await??;
    let bootstrap = server.local_addr().to_string();
    eprintln!(
        "silt hotstore at {bootstrap} (fsync: {}):",
        config.hotstore.fsync
    );
    let result = run_endpoint(&bootstrap, workload, &CpuMeter::InProcess).await;
    runtime.spawn(server.shutdown()).await??;
    runtime.shutdown_background();
    result
}

pub async fn hotstore(
    config: &silt_jobs::config::Config,
    options: HotstoreBenchOptions,
) -> Result<()> {
    let workload = &options.workload;
    workload.validate()?;
    if config.hotstore.fsync == "never" {
        eprintln!(
            "warning: hotstore.fsync is never: silt's acknowledgements are not durable in this run"
        );
    }
    // silt first, then the cluster, so idle JVMs do not share the cores with silt's run.
    let silt = measure_silt(config, workload).await?;
    let fluss = measure_fluss(&options.fluss, workload).await?;
    print_report(config, workload, &silt, &fluss);
    ensure!(
        silt.lookup.misses == 0,
        "{} lookups of written keys found nothing in silt's hotstore",
        silt.lookup.misses
    );
    Ok(())
}

/// One row of the report: a figure of silt and of Fluss, and the target of their ratio.
struct Figure {
    name: String,
    silt: f64,
    fluss: Option<f64>,
    target: &'static str,
}

fn print_report(
    config: &silt_jobs::config::Config,
    workload: &Workload,
    silt: &BenchReport,
    fluss: &FlussColumn,
) {
    print_header(config, workload);
    let other = match fluss {
        FlussColumn::Measured { label, report } => {
            say!("fluss: {label}");
            Some(report)
        }
        FlussColumn::Skipped(reason) => {
            say!("fluss: SKIPPED: {reason}");
            None
        }
    };
    let mut table =
        Table::new(["figure", "silt", "fluss", "silt/fluss", "target"]).named("figures");
    for f in figures(silt, other) {
        let (fluss_text, ratio_text) = match f.fluss {
            Some(v) => (format!("{v:.3}"), format!("{:.2}", f.silt / v)),
            None => ("-".to_string(), "-".to_string()),
        };
        table.row([
            f.name,
            format!("{:.3}", f.silt),
            fluss_text,
            ratio_text,
            f.target.to_string(),
        ]);
    }
    table.print_markdown();
    print_cpu_split(silt, other);
    say!(
        "lookup misses: silt {} (still missing 2 s later: {}){}",
        silt.lookup.misses,
        silt.lookup.misses_after_2s,
        other
            .map(|r| format!(
                ", fluss {} (still missing 2 s later: {})",
                r.lookup.misses, r.lookup.misses_after_2s
            ))
            .unwrap_or_default()
    );
}

/// The report's title: the workload and silt's fsync policy.
fn print_header(config: &silt_jobs::config::Config, workload: &Workload) {
    say!();
    say!(
        "silt bench hotstore (profile: {}; {} rows of 64 B in batches of {}, {} buckets, acks=all; \
         fetch {} passes, client long-poll {} ms; {} upserts, {} sequential lookups, client \
         lookup batches of at most {} within {} ms)",
        crate::report::profile(),
        workload.rows,
        workload.batch_rows,
        workload.buckets,
        workload.fetch_passes,
        workload.fetch_wait_max_ms,
        workload.keys,
        workload.lookups,
        workload.lookup_batch_size_max,
        workload.lookup_batch_timeout_ms
    );
    say!("silt: hotstore in-process, fsync {}", config.hotstore.fsync);
}

/// The compared figures: per compression produce and fetch, then upserts and lookups.
fn figures(silt: &BenchReport, other: Option<&BenchReport>) -> Vec<Figure> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let log_figures: [(&str, fn(&LogFigures) -> f64, &'static str); 3] = [
        ("produce MB/s", |l| l.produce.mb_per_s(), ">= 2x"),
        ("produce rows/s", |l| l.produce.rows_per_s(), ""),
        ("fetch MB/s", |l| l.fetch.mb_per_s(), ">= 2x"),
    ];
    let mut rows: Vec<Figure> = Vec::new();
    for (i, log) in silt.logs.iter().enumerate() {
        let other_log = other.and_then(|r| r.logs.get(i));
        for (name, get, target) in log_figures {
            rows.push(Figure {
                name: format!("{name} {}", log.compression),
                silt: get(log),
                fluss: other_log.map(get),
                target,
            });
        }
    }
    let lookups: [(&str, fn(&Latency) -> Duration, &'static str); 3] = [
        ("lookup p50 ms", |l| l.p50, ""),
        ("lookup p99 ms", |l| l.p99, "<= 0.5x"),
        ("lookup max ms", |l| l.max, ""),
    ];
    rows.push(Figure {
        name: "upsert rows/s".to_string(),
        silt: silt.upsert.rows_per_s(),
        fluss: other.map(|r| r.upsert.rows_per_s()),
        target: "",
    });
    for (name, get, target) in lookups {
        rows.push(Figure {
            name: name.to_string(),
            silt: ms(get(&silt.lookup)),
            fluss: other.map(|r| ms(get(&r.lookup))),
            target,
        });
    }
    rows
}

/// Where each throughput phase's CPU went: the client's and the server's seconds against
/// each endpoint. The last column is what the throughput ratio could reach if silt's server
/// cost nothing, while the phases are CPU-bound: Fluss's client and server seconds over silt's
/// client seconds (the client is the same program against both).
fn print_cpu_split(silt: &BenchReport, other: Option<&BenchReport>) {
    say!();
    say!(
        "CPU seconds per phase (client: this process less silt's server threads; server: silt's threads, or Fluss's processes)"
    );
    let mut table = Table::new([
        "phase",
        "silt client s",
        "silt server s",
        "server share",
        "fluss client s",
        "fluss server s",
        "ceiling if silt's server cost 0",
    ])
    .named("cpu_split");
    let seconds = |v: f64| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{v:.3}")
        }
    };
    for (i, log) in silt.logs.iter().enumerate() {
        let other_log = other.and_then(|r| r.logs.get(i));
        let phases = [
            ("produce", &log.produce, other_log.map(|l| &l.produce)),
            ("fetch", &log.fetch, other_log.map(|l| &l.fetch)),
        ];
        for (phase, ours, theirs) in phases {
            let cpu = ours.cpu;
            let share = cpu.server_s / (cpu.client_s + cpu.server_s);
            let theirs = theirs.map(|t| t.cpu).unwrap_or(CpuSplit {
                client_s: f64::NAN,
                server_s: f64::NAN,
            });
            let ceiling = (theirs.client_s + theirs.server_s) / cpu.client_s;
            table.row([
                format!("{phase} {}", log.compression),
                seconds(cpu.client_s),
                seconds(cpu.server_s),
                if share.is_nan() {
                    "-".into()
                } else {
                    format!("{:.0}%", share * 100.0)
                },
                seconds(theirs.client_s),
                seconds(theirs.server_s),
                if ceiling.is_nan() {
                    "-".into()
                } else {
                    format!("{ceiling:.2}x")
                },
            ]);
        }
    }
    table.print_markdown();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_process_meter_counts_this_process() {
        // Burn 0.3 s of CPU on a thread named like the server's, then on this one (CPU time,
        // not wall time: a loaded machine may run the thread for a part of it).
        let spin = || {
            let mut x = 0u64;
            while procfs::cpu_s("thread-self") < 0.3 {
                for _ in 0..100_000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            }
        };
        let before = CpuMeter::InProcess.read();
        // A thread's time is its own only while it runs: read before it ends.
        let (spun_tx, spun_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let server = std::thread::Builder::new()
            .name(format!("{SERVER_THREAD_NAME}-test"))
            .spawn(move || {
                spin();
                spun_tx.send(()).unwrap();
                let _ = end_rx.recv();
            })
            .unwrap();
        spun_rx.recv().unwrap();
        spin();
        let cpu = CpuMeter::InProcess.read().since(before);
        drop(end_tx);
        server.join().unwrap();
        assert!(cpu.server_s >= 0.29 && cpu.server_s <= 0.45, "{cpu:?}");
        assert!(cpu.client_s >= 0.29, "{cpu:?}");
    }

    /// Regression: the hot store's fsync threads (`silt-fsync-*`) were counted as the
    /// client's, so a durable produce charged its fsyncs to fluss-rs. Every thread silt's
    /// server starts in this process must be counted as the server's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_thread_of_the_in_process_server_is_counted_as_the_server() {
        let config = silt_jobs::config::Config::load(None, std::iter::empty(), &[]).unwrap();
        let workload = Workload {
            rows: 20_000,
            keys: 100,
            lookups: 10,
            fetch_passes: 1,
            compressions: vec!["NONE".into()],
            ..Workload::default()
        };
        measure_silt(&config, &workload).await.unwrap();
        let names: Vec<String> = procfs::own_threads().into_iter().map(|t| t.0).collect();
        assert!(
            names.iter().any(|n| n.starts_with("silt-fsync")),
            "a durable produce ran on the fsync threads: {names:?}"
        );
        let uncounted: Vec<_> = names
            .iter()
            .filter(|n| n.starts_with("silt-") || n.starts_with("fjall"))
            .filter(|n| !is_server_thread(n))
            .collect();
        assert!(
            uncounted.is_empty(),
            "not counted as the server: {uncounted:?}"
        );
    }
}
