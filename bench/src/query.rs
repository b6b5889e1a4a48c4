//! `silt bench query`: the query service measured, not asserted. One process, one run; the
//! table at the end prints figures and their ratios (these machines are noisy: compare ratios).
//!
//! - Lake scan: a log table's lake tier of `lake_rows` rows (12 mixed columns, 4 buckets) is
//!   written through the tiering sink's own path (deltalake's `RecordBatchWriter` with the
//!   writer's Parquet settings, then one commit through [`LakeTable`] with the txn offsets),
//!   which is far quicker than producing and tiering gigabytes. The same aggregate runs through
//!   [`QueryService::execute`] on `bench.scan$lake` and through a plain DataFusion session on
//!   a listing table over the same Parquet files, alternately, `runs` times each; medians.
//! - Deadline precision: `deadline_queries` runs of that scan (cooperative: its operators yield
//!   between batches), then as many of a CPU-bound plan that never yields (an aggregate over
//!   `bench.wide$lake`, `cross_rows` rows, cross-joined with itself), with deadlines spread over
//!   20..400 ms, none of which can finish in time. The figures: how long after its deadline
//!   each call returned (p50, p99, max), how long after that error the abandoned plan ended
//!   ([`QueryService::plans_running`]), and the CPU the query threads (`silt-query`) spent from
//!   the deadline until then (schedstat, to the nanosecond).
//! - Real-time view: a primary-key table with `pk_keys` keys is tiered, then `lake_changes`
//!   upserts and deletes (10% deletes, 10% new keys) are tiered as a second round, so the lake
//!   holds deletion vectors as it does in use; tiering is stopped, and `tail_changes` more
//!   changes are written; then the view `bench.users` (lake + tail, last image per key) is
//!   queried against `$lake` alone, and its answer is checked against the changes as written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::datasource::file_format::options::ParquetReadOptions;
use datafusion::prelude::SessionContext;
use deltalake::writer::{DeltaWriter as _, RecordBatchWriter};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use fluss::rpc::message::OffsetSpec;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use rand::{Rng as _, SeedableRng as _};
use silt_connectors::delta::{BucketRange, Committable, DeltaSinkConfig, LakeTable, TableKind};
use silt_connectors::lake::LakeCatalogConfig;

use fluss::client::UpsertWriter;
use silt_jobs::query::{QueryConfig, QueryError, QueryRequest, QueryService};
use silt_jobs::tiering::{RegistryUpdate, TieringConfig, TieringService};

use crate::report::{Table, percentile_f64, say};

/// The flags of `silt bench query`.
#[derive(Debug, Clone, clap::Args)]
pub struct QueryBenchOptions {
    /// Rows in the scanned lake table (about 48 bytes of Parquet and 160 of Arrow per row).
    #[arg(long, default_value_t = 24_000_000)]
    pub lake_rows: u64,
    /// Runs of the scan comparison, each side.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Queries of each deadline-precision figure.
    #[arg(long, default_value_t = 100)]
    pub deadline_queries: usize,
    /// Rows of the table the CPU-bound deadline case cross-joins with itself.
    #[arg(long, default_value_t = 50_000)]
    pub cross_rows: u64,
    /// Keys tiered into the primary-key table before tiering stops.
    #[arg(long, default_value_t = 1_000_000)]
    pub pk_keys: u64,
    /// Changes tiered into the primary-key table after its first commit, so its lake holds
    /// deletion vectors (0: a lake without them).
    #[arg(long, default_value_t = 100_000)]
    pub lake_changes: u64,
    /// Changes in the primary-key table's hot tail.
    #[arg(long, default_value_t = 100_000)]
    pub tail_changes: u64,
    /// Changes written before each view query of the last figure (a steady writer).
    #[arg(long, default_value_t = 1_000)]
    pub changes_between: u64,
    /// Scratch directory (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

const DB: &str = "bench";
const BUCKETS: i32 = 4;
const BATCH_ROWS: usize = 64 * 1024;
const SCAN_QUERY: &str = "SELECT region, count(*) AS n, sum(amount) AS amount, avg(qty) AS qty, \
     max(created_ms) AS last_ms, sum(length(note)) AS note_chars FROM {t} WHERE paid GROUP BY region ORDER BY region";

fn scan_sql(table: &str) -> String {
    SCAN_QUERY.replace("{t}", table)
}

/// A plan that computes without yielding: the aggregate loops over the cross join's batches.
const CROSS_QUERY: &str =
    "SELECT a.id, count(*) AS n FROM bench.wide$lake a CROSS JOIN bench.wide$lake b GROUP BY a.id";

/// The names of the query runtime's threads.
const QUERY_THREADS: &str = "silt-query";

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile_f64(values, 0.5)
}

/// The scanned lake table: where it is and how big.
struct ScanTable {
    lake_uri: String,
    parquet_bytes: u64,
}

/// (a) silt's `$lake` against raw DataFusion and deltalake's provider: medians in seconds.
struct ScanFigures {
    silt_s: f64,
    raw_s: f64,
    delta_s: f64,
}

/// (b), (c) How long after their deadline the queries that could not finish returned, and what
/// their plans did after it.
#[derive(Default)]
struct DeadlineFigures {
    queries: usize,
    finished_in_time: usize,
    /// Milliseconds past the deadline the error came, sorted.
    overshoot_ms: Vec<f64>,
    /// Milliseconds from the error until the abandoned plan ended, sorted.
    plan_end_ms: Vec<f64>,
    /// CPU milliseconds the query threads spent from the deadline until the plan ended, sorted.
    cpu_after_ms: Vec<f64>,
}

pub async fn query(options: QueryBenchOptions) -> Result<()> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("silt-bench-query-");
    let dir = match &options.dir {
        Some(d) => builder.tempdir_in(d)?,
        None => builder.tempdir()?,
    };
    let server = crate::in_process_hotstore(dir.path()).await?;
    let bootstrap = server.local_addr().to_string();
    let lake_root = dir.path().join("lake").to_string_lossy().to_string();
    let scan = write_log_table(&bootstrap, &lake_root, "scan", options.lake_rows).await?;
    write_log_table(&bootstrap, &lake_root, "wide", options.cross_rows).await?;

    let mut config = QueryConfig::new(LakeCatalogConfig::new(&bootstrap, lake_root.clone()));
    config.deadline_max = Duration::from_secs(3600);
    config.memory_bytes_max = 4 * 1024 * 1024 * 1024;
    let service = QueryService::new(config);
    let scans = compare_scans(&service, &scan.lake_uri, options.runs).await?;
    let queries = options.deadline_queries;
    say!("deadline precision: {queries} scans with deadlines of 20..400 ms ...");
    let scan_sql = scan_sql(&format!("{DB}.scan$lake"));
    let cooperative = deadline_runs(&service, &scan_sql, queries).await?;
    say!("deadline precision: {queries} cross joins with deadlines of 20..400 ms ...");
    let cpu_bound = deadline_runs(&service, CROSS_QUERY, queries).await?;
    let lake = TieringSetup {
        server: &server,
        bootstrap: &bootstrap,
        lake_root: &lake_root,
        checkpoints: &dir.path().join("checkpoints"),
    };
    let view = realtime_view(&options, &lake, &service).await?;

    print_report(&options, &scan, &scans, [&cooperative, &cpu_bound], &view);
    drop(service);
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await?;
    }
    Ok(())
}

/// Creates the lake-enabled log table `bench.<name>` and writes its lake tier of `lake_rows`.
async fn write_log_table(
    bootstrap: &str,
    lake_root: &str,
    name: &str,
    lake_rows: u64,
) -> Result<ScanTable> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let admin = connection.get_admin().map_err(anyhow::Error::from)?;
    admin
        .create_database(DB, None, true)
        .await
        .map_err(anyhow::Error::from)?;
    let descriptor = TableDescriptor::builder()
        .schema(crate::data::schema_12())
        .distributed_by(Some(BUCKETS), vec![])
        .property(silt_jobs::tiering::DATALAKE_ENABLED, "true")
        .build()
        .map_err(anyhow::Error::from)?;
    admin
        .create_table(&TablePath::new(DB, name), &descriptor, false)
        .await
        .map_err(anyhow::Error::from)?;
    let table_id = admin
        .get_table_info(&TablePath::new(DB, name))
        .await
        .map_err(anyhow::Error::from)?
        .get_table_id();
    let user_schema = silt_connectors::fluss::table_arrow_schema(&connection, DB, name).await?;
    say!(
        "writing the lake tier of {DB}.{name}: {lake_rows} rows through the tiering sink's writer ..."
    );
    let lake_uri = format!("{lake_root}/{DB}/{name}");
    let started = Instant::now();
    let (files, parquet_bytes, arrow_bytes) =
        write_lake(&lake_uri, table_id, user_schema, lake_rows).await?;
    say!(
        "  {files} files, {:.2} GB of Parquet ({:.2} GB as Arrow) in {:.1} s",
        parquet_bytes as f64 / 1e9,
        arrow_bytes as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
    Ok(ScanTable {
        lake_uri,
        parquet_bytes,
    })
}

/// (a) The same aggregate: silt's `$lake` against raw DataFusion on a listing table (and
/// deltalake's provider), `runs` times each; fails when silt and raw DataFusion disagree.
async fn compare_scans(service: &QueryService, lake_uri: &str, runs: usize) -> Result<ScanFigures> {
    say!("scan + aggregate, silt vs raw DataFusion, {runs} runs each ...");
    let (mut silt_s, mut raw_s, mut delta_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut answers = (String::new(), String::new());
    for run in 0..runs.max(1) {
        // deltalake's own provider on a plain session: splits silt's cost from deltalake's.
        let started = Instant::now();
        delta_query(lake_uri).await?;
        delta_s.push(started.elapsed().as_secs_f64());
        // Alternate which side goes first, so caches and turbo favour neither.
        for side in [run % 2, 1 - run % 2] {
            let started = Instant::now();
            let batches = if side == 0 {
                let sql = scan_sql(&format!("{DB}.scan$lake"));
                service
                    .execute(QueryRequest::new(sql, Duration::from_secs(3600)))
                    .await
                    .map_err(|e| anyhow!("silt query: {e}"))?
                    .batches
            } else {
                raw_query(lake_uri).await?
            };
            let elapsed = started.elapsed().as_secs_f64();
            let text = arrow::util::pretty::pretty_format_batches(&batches)?.to_string();
            if side == 0 {
                silt_s.push(elapsed);
                answers.0 = text;
            } else {
                raw_s.push(elapsed);
                answers.1 = text;
            }
        }
    }
    if answers.0 != answers.1 {
        bail!(
            "silt and raw DataFusion disagree:\nsilt:\n{}\nraw:\n{}",
            answers.0,
            answers.1
        );
    }
    Ok(ScanFigures {
        silt_s: median(&mut silt_s),
        raw_s: median(&mut raw_s),
        delta_s: median(&mut delta_s),
    })
}

/// (b), (c) `queries` runs of `sql` with deadlines spread over 20..400 ms, none of which should
/// finish in time.
async fn deadline_runs(
    service: &QueryService,
    sql: &str,
    queries: usize,
) -> Result<DeadlineFigures> {
    let n = queries.max(1);
    let mut figures = DeadlineFigures {
        queries: n,
        ..DeadlineFigures::default()
    };
    for i in 0..n {
        let deadline = Duration::from_millis(20 + (380 * i / n) as u64);
        match one_deadline(service, sql, deadline).await? {
            None => figures.finished_in_time += 1,
            Some((late_ms, plan_end_ms, cpu_after_ms)) => {
                figures.overshoot_ms.push(late_ms);
                figures.plan_end_ms.push(plan_end_ms);
                figures.cpu_after_ms.push(cpu_after_ms);
            }
        }
    }
    for figure in [
        &mut figures.overshoot_ms,
        &mut figures.plan_end_ms,
        &mut figures.cpu_after_ms,
    ] {
        figure.sort_by(f64::total_cmp);
    }
    Ok(figures)
}

/// One run of `sql` under `deadline`: `None` when it finished in time, else how long after the
/// deadline the error came, how long after the error the plan ended, and the query threads'
/// CPU from the deadline until then (all in ms).
async fn one_deadline(
    service: &QueryService,
    sql: &str,
    deadline: Duration,
) -> Result<Option<(f64, f64, f64)>> {
    let started = tokio::time::Instant::now();
    let due = started + deadline;
    let cpu_at_deadline = tokio::spawn(async move {
        tokio::time::sleep_until(due).await;
        crate::procfs::threads_cpu_ns(QUERY_THREADS)
    });
    let outcome = service.execute(QueryRequest::new(sql, deadline)).await;
    let errored = tokio::time::Instant::now();
    let ended = plans_ended(service).await?;
    match outcome {
        Err(QueryError::DeadlinePassed { .. }) => {}
        Ok(_) => return Ok(None),
        Err(e) => bail!("deadline query failed otherwise: {e}"),
    }
    // Tasks the plan spawned stop at their own cancel points, maybe just after its driver.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cpu_now = crate::procfs::threads_cpu_ns(QUERY_THREADS);
    let at_deadline = cpu_at_deadline.await?;
    let cpu_after_s = crate::procfs::cpu_s_between(&at_deadline, &cpu_now);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(Some((
        ms(errored.saturating_duration_since(due)),
        ms(ended.saturating_duration_since(errored)),
        cpu_after_s * 1e3,
    )))
}

/// Waits until no plan of `service` runs (at most 60 s) and says when that was.
async fn plans_ended(service: &QueryService) -> Result<tokio::time::Instant> {
    let started = tokio::time::Instant::now();
    while service.plans_running() > 0 {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("an abandoned query plan still runs 60 s after its deadline error");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(tokio::time::Instant::now())
}

fn print_report(
    options: &QueryBenchOptions,
    scan: &ScanTable,
    scans: &ScanFigures,
    deadlines: [&DeadlineFigures; 2],
    view: &ViewFigures,
) {
    say!();
    say!(
        "silt bench query (profile: {}, {} lake rows x 12 columns in {BUCKETS} buckets, {:.2} GB Parquet)",
        crate::report::profile(),
        options.lake_rows,
        scan.parquet_bytes as f64 / 1e9
    );
    let mut table = Table::new(["figure", "value"]).named("figures");
    #[rustfmt::skip]
    let mut rows: Vec<(String, String)> = vec![
        (format!("(a) silt: aggregate over {DB}.scan$lake, median (s)"), format!("{:.3}", scans.silt_s)),
        ("    raw DataFusion: listing table, same files, median (s)".into(), format!("{:.3}", scans.raw_s)),
        ("    silt / raw (target <= 1.10)".into(), format!("{:.2}", scans.silt_s / scans.raw_s)),
        ("    deltalake's provider, plain session, median (s)".into(), format!("{:.3}", scans.delta_s)),
        ("    silt / deltalake's provider".into(), format!("{:.2}", scans.silt_s / scans.delta_s)),
        ("    scan rate through silt (rows/s)".into(), format!("{:.0}", options.lake_rows as f64 / scans.silt_s)),
    ];
    let cases = [
        "(b) deadline, cooperative: the scan of (a)".to_string(),
        format!(
            "(c) deadline, CPU-bound: {DB}.wide$lake ({} rows) cross-joined with itself",
            options.cross_rows
        ),
    ];
    for (case, figures) in cases.into_iter().zip(deadlines) {
        rows.extend(deadline_rows(case, figures));
    }
    #[rustfmt::skip]
    rows.extend([
        (format!("(d) PK view, {} runs: keys tiered", view.runs), options.pk_keys.to_string()),
        ("    changes tiered after them".into(), options.lake_changes.to_string()),
        ("    changes in the hot tail".into(), options.tail_changes.to_string()),
        ("    lake files with a deletion vector".into(), format!("{} of {}", view.vectored_files, view.lake_files)),
        ("    view aggregate, first query: whole tail read (ms)".into(), format!("{:.1}", view.first_ms)),
        ("    view aggregate, nothing written since, tail kept, p50 (ms)".into(), format!("{:.1}", view.view_p50_ms)),
        ("    view aggregate, nothing written since, max (ms)".into(), format!("{:.1}", view.view_max_ms)),
        (format!("    view aggregate, {} changes written before each, p50 (ms)", view.changes_between), format!("{:.1}", view.written_p50_ms)),
        ("    view point query (id = ...) p50 (ms)".into(), format!("{:.1}", view.point_p50_ms)),
        ("    $lake aggregate alone p50 (ms)".into(), format!("{:.1}", view.lake_p50_ms)),
        ("    view / $lake: first query".into(), format!("{:.2}", view.first_ms / view.lake_p50_ms)),
        ("    view / $lake: tail kept (target <= 1.5)".into(), format!("{:.2}", view.view_p50_ms / view.lake_p50_ms)),
        ("    view / $lake: with changes written before each".into(), format!("{:.2}", view.written_p50_ms / view.lake_p50_ms)),
        ("    view equals the changelog as written".into(), if view.matches { "yes" } else { "NO" }.into()),
    ]);
    for (figure, value) in rows {
        table.row([figure, value]);
    }
    table.print();
}

/// The rows of one deadline case.
fn deadline_rows(case: String, f: &DeadlineFigures) -> Vec<(String, String)> {
    let at = |values: &[f64], q: f64| format!("{:.1}", percentile_f64(values, q));
    let passed = format!(
        "{case}: deadline passed in {} of {} queries",
        f.overshoot_ms.len(),
        f.queries
    );
    let total_cpu_ms: f64 = f.cpu_after_ms.iter().sum();
    #[rustfmt::skip]
    let rows = vec![
        (passed, format!("{} in time", f.finished_in_time)),
        ("    returned after the deadline p50 (ms)".into(), at(&f.overshoot_ms, 0.5)),
        ("    returned after the deadline p99 (ms, target <= 250)".into(), at(&f.overshoot_ms, 0.99)),
        ("    returned after the deadline max (ms)".into(), at(&f.overshoot_ms, 1.0)),
        ("    plan ended after the error p99 (ms)".into(), at(&f.plan_end_ms, 0.99)),
        ("    plan ended after the error max (ms)".into(), at(&f.plan_end_ms, 1.0)),
        ("    query-thread CPU after the deadline p99 (ms)".into(), at(&f.cpu_after_ms, 0.99)),
        ("    query-thread CPU after the deadline, all queries (ms)".into(), format!("{total_cpu_ms:.1}")),
    ];
    rows
}

/// Writes `rows` rows (spread over the buckets, offsets from 0) as the tiering sink would: the
/// same Delta writer and Parquet settings, one commit with a txn action per bucket. Returns
/// (files, Parquet bytes, Arrow bytes).
async fn write_lake(
    lake_uri: &str,
    table_id: i64,
    user_schema: SchemaRef,
    rows: u64,
) -> Result<(usize, u64, u64)> {
    let config = Arc::new(DeltaSinkConfig::new(
        lake_uri,
        table_id.to_string(),
        TableKind::Log,
        user_schema.clone(),
    ));
    let mut lake = LakeTable::open(config.clone()).await?;
    let lake_schema = lake.lake_schema().clone();
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(config.row_group_rows_max))
        .build();
    let mut writer = RecordBatchWriter::for_table(lake.table())?
        .with_target_file_size(config.target_file_bytes)
        .with_writer_properties(properties);
    let mut buckets = std::collections::BTreeMap::new();
    let mut arrow_bytes = 0u64;
    let per_bucket = rows.div_ceil(BUCKETS as u64);
    let mut next_id = 0u64;
    for bucket in 0..BUCKETS {
        let bucket_rows = per_bucket.min(rows - next_id.min(rows));
        let mut offset = 0u64;
        while offset < bucket_rows {
            let n = BATCH_ROWS.min((bucket_rows - offset) as usize);
            let user = crate::data::make_batch(&user_schema, next_id, n)?;
            let mut columns: Vec<ArrayRef> = user.columns().to_vec();
            columns.push(Arc::new(Int32Array::from(vec![bucket; n])));
            columns.push(Arc::new(Int64Array::from_iter_values(
                offset as i64..(offset as i64 + n as i64),
            )));
            columns.push(Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    (0..n as i64).map(|i| 1_700_000_000_000_000 + (offset as i64 + i) * 1000),
                )
                .with_timezone("UTC"),
            ));
            let batch = RecordBatch::try_new(lake_schema.clone(), columns)?;
            arrow_bytes += batch.get_array_memory_size() as u64;
            writer.write(batch).await?;
            offset += n as u64;
            next_id += n as u64;
        }
        if bucket_rows > 0 {
            buckets.insert(
                silt_connectors::changelog::BucketKey::table(bucket),
                BucketRange {
                    follows: Some(0),
                    start: 0,
                    end: bucket_rows as i64,
                    rows: bucket_rows,
                },
            );
        }
    }
    let adds = writer.flush().await?;
    let files = adds.len();
    let parquet_bytes = adds.iter().map(|a| a.size as u64).sum();
    let committable = Committable {
        checkpoint_id: 1,
        writer: 0,
        adds,
        staged: Vec::new(),
        buckets,
    };
    let plan = lake.plan(&[committable]).await?;
    lake.apply(&plan).await?;
    Ok((files, parquet_bytes, arrow_bytes))
}

/// The scan through deltalake's table provider on a plain DataFusion session (no silt), with
/// the session's Parquet settings as silt passes them.
async fn delta_query(lake_uri: &str) -> Result<Vec<RecordBatch>> {
    let table = deltalake::open_table(deltalake::ensure_table_uri(lake_uri)?).await?;
    let ctx = SessionContext::new();
    let provider = table
        .table_provider()
        .with_session(Arc::new(ctx.state()))
        .await?;
    ctx.register_table("delta", provider)?;
    Ok(ctx.sql(&scan_sql("delta")).await?.collect().await?)
}

/// The scan on a fresh DataFusion session over the lake's Parquet files as a listing table
/// (the Delta log ignored; `__bucket` from the directory names).
async fn raw_query(lake_uri: &str) -> Result<Vec<RecordBatch>> {
    let ctx = SessionContext::new();
    let options = ParquetReadOptions::default()
        .table_partition_cols(vec![("__bucket".to_string(), DataType::Int32)]);
    ctx.register_parquet("raw", lake_uri, options).await?;
    Ok(ctx.sql(&scan_sql("raw")).await?.collect().await?)
}

struct ViewFigures {
    runs: usize,
    lake_files: usize,
    vectored_files: usize,
    /// The first query of the view: the whole hot tail read from the hot store.
    first_ms: f64,
    /// Queries with nothing written since the last: the tail kept, nothing read.
    view_p50_ms: f64,
    view_max_ms: f64,
    point_p50_ms: f64,
    lake_p50_ms: f64,
    /// Changes written before each of the queries of `written_p50_ms`.
    changes_between: u64,
    written_p50_ms: f64,
    matches: bool,
}

/// Where the tiering of the primary-key table runs.
struct TieringSetup<'a> {
    server: &'a Arc<silt_hotstore::ServerHandle>,
    bootstrap: &'a str,
    lake_root: &'a str,
    checkpoints: &'a std::path::Path,
}

/// (c) The real-time view of a primary-key table: keys and changes tiered, tiering stopped, a
/// hot tail of changes, then the view timed against `$lake` and checked against the writes.
async fn realtime_view(
    options: &QueryBenchOptions,
    setup: &TieringSetup<'_>,
    service: &QueryService,
) -> Result<ViewFigures> {
    let connection = silt_connectors::fluss::connect(setup.bootstrap).await?;
    let admin = connection.get_admin().map_err(anyhow::Error::from)?;
    let mut users = UsersTable::create(&connection, &admin, options.pk_keys).await?;
    say!(
        "writing {} keys to {DB}.users and tiering them ...",
        options.pk_keys
    );
    for id in 0..options.pk_keys as i64 {
        users.upsert(id, id)?;
        users.flush_every_10k(id).await?;
    }
    users.flush().await?;

    let tiering = users_tiering(setup);
    let started = Instant::now();
    tiering.tier_table(DB, "users").await?;
    wait_users_tiered(&tiering, &admin).await?;
    say!(
        "  tiered in {:.1} s. writing and tiering {} changes ...",
        started.elapsed().as_secs_f64(),
        options.lake_changes
    );
    let started = Instant::now();
    users.write_changes(0, options.lake_changes).await?;
    wait_users_tiered(&tiering, &admin).await?;
    let lake_uri = tiering
        .status()
        .await?
        .into_iter()
        .find(|s| s.table == "users")
        .map(|s| s.lake_uri)
        .context("tiering does not report bench.users")?;
    tiering.shutdown(Duration::from_secs(120)).await;
    let (lake_files, vectored_files) = count_lake_files(&lake_uri).await?;
    say!(
        "  tiered in {:.1} s ({vectored_files} of {lake_files} lake files with a deletion vector); tiering stopped. writing {} changes to the hot tail ...",
        started.elapsed().as_secs_f64(),
        options.tail_changes
    );
    users
        .write_changes(options.lake_changes as i64, options.tail_changes)
        .await?;
    let mut figures = time_view_queries(service, &mut users, options.changes_between).await?;
    figures.lake_files = lake_files;
    figures.vectored_files = vectored_files;
    Ok(figures)
}

/// The primary-key table `bench.users` (id, name, score) and what it must hold: id -> score
/// (the name is derived from both).
struct UsersTable {
    upserter: UpsertWriter,
    expected: HashMap<i64, i64>,
    rng: rand::rngs::SmallRng,
    /// The next key never written.
    next_new: i64,
}

impl UsersTable {
    async fn create(
        connection: &fluss::client::FlussConnection,
        admin: &fluss::client::FlussAdmin,
        keys: u64,
    ) -> Result<UsersTable> {
        let schema = Schema::builder()
            .column("id", DataTypes::bigint())
            .column("name", DataTypes::string())
            .column("score", DataTypes::bigint())
            .primary_key(vec!["id"])
            .map_err(anyhow::Error::from)?
            .build()
            .map_err(anyhow::Error::from)?;
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(BUCKETS), vec!["id".to_string()])
            .property(silt_jobs::tiering::DATALAKE_ENABLED, "true")
            .property(silt_jobs::tiering::DATALAKE_FRESHNESS, "1s")
            .build()
            .map_err(anyhow::Error::from)?;
        let path = TablePath::new(DB, "users");
        admin
            .create_table(&path, &descriptor, false)
            .await
            .map_err(anyhow::Error::from)?;
        let upserter = connection
            .get_table(&path)
            .await
            .map_err(anyhow::Error::from)?
            .new_upsert()
            .map_err(anyhow::Error::from)?
            .create_writer()
            .map_err(anyhow::Error::from)?;
        Ok(UsersTable {
            upserter,
            expected: HashMap::new(),
            rng: rand::rngs::SmallRng::seed_from_u64(7),
            next_new: keys as i64,
        })
    }

    fn row(id: i64, score: i64) -> GenericRow<'static> {
        let mut row = GenericRow::new(3);
        row.set_field(0, id);
        row.set_field(1, format!("user-{id}-{score}"));
        row.set_field(2, score);
        row
    }

    fn upsert(&mut self, id: i64, score: i64) -> Result<()> {
        self.upserter
            .upsert(&Self::row(id, score))
            .map_err(|e| anyhow!("upsert: {e}"))?;
        self.expected.insert(id, score);
        Ok(())
    }

    /// Change number `i`: 10% new keys, 10% deletes, the rest updates of random keys.
    fn change(&mut self, i: i64) -> Result<()> {
        let roll = self.rng.random_range(0..10);
        if roll == 0 {
            let id = self.next_new;
            self.next_new += 1;
            return self.upsert(id, i);
        }
        let id = self.rng.random_range(0..self.next_new);
        let score = 1_000_000_000 + i;
        if roll == 1 {
            self.upserter
                .delete(&Self::row(id, score))
                .map_err(|e| anyhow!("delete: {e}"))?;
            self.expected.remove(&id);
            Ok(())
        } else {
            self.upsert(id, score)
        }
    }

    /// Changes `first..first + n`, flushed every 10,000 and at the end.
    async fn write_changes(&mut self, first: i64, n: u64) -> Result<()> {
        for i in 0..n as i64 {
            self.change(first + i)?;
            self.flush_every_10k(i).await?;
        }
        self.flush().await
    }

    async fn flush_every_10k(&self, i: i64) -> Result<()> {
        if i % 10_000 == 9_999 {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        self.upserter
            .flush()
            .await
            .map_err(|e| anyhow!("flush: {e}"))
    }
}

/// A tiering service that also publishes lake snapshots to the hot store's registry, as
/// `silt up` wires it, so the view can split lake and tail.
fn users_tiering(setup: &TieringSetup<'_>) -> TieringService {
    let registry: RegistryUpdate = silt_jobs::tiering::hotstore_registry(setup.server.clone());
    TieringService::new(
        TieringConfig::new(setup.bootstrap, setup.lake_root, setup.checkpoints),
        Some(registry),
    )
}

/// Waits until the lake of `bench.users` covers its current high watermarks.
async fn wait_users_tiered(
    tiering: &TieringService,
    admin: &fluss::client::FlussAdmin,
) -> Result<Instant> {
    let ids: Vec<i32> = (0..BUCKETS).collect();
    let hw = admin
        .list_offsets(&TablePath::new(DB, "users"), &ids, OffsetSpec::Latest)
        .await
        .map_err(anyhow::Error::from)?;
    let targets: Vec<(i32, i64)> = ids.iter().map(|b| (*b, hw[b])).collect();
    crate::data::wait_lake_covers(
        tiering,
        "users",
        &targets,
        Instant::now() + Duration::from_secs(1800),
    )
    .await
}

/// (files, files with a deletion vector) of the lake table's current snapshot.
async fn count_lake_files(lake_uri: &str) -> Result<(usize, usize)> {
    let lake = deltalake::open_table(deltalake::ensure_table_uri(lake_uri)?).await?;
    let (mut files, mut vectored) = (0, 0);
    for file in lake.snapshot()?.log_data().iter() {
        files += 1;
        vectored += usize::from(file.deletion_vector_descriptor().is_some());
    }
    Ok((files, vectored))
}

/// Times the view's aggregate and point queries against `$lake` alone and checks every answer
/// of the view against what was written: the first query (it reads the whole hot tail), then
/// `runs` with nothing written between them (each reads nothing from the hot store: the tail is
/// kept), then `runs` with `changes_between` changes written before each.
async fn time_view_queries(
    service: &QueryService,
    users: &mut UsersTable,
    changes_between: u64,
) -> Result<ViewFigures> {
    let runs = 10;
    let deadline = Duration::from_secs(600);
    let timed = |sql: String| async move {
        let started = Instant::now();
        let result = service
            .execute(QueryRequest::new(sql, deadline))
            .await
            .map_err(anyhow::Error::from)?;
        Ok::<_, anyhow::Error>((started.elapsed().as_secs_f64() * 1e3, result.batches))
    };
    let aggregate =
        |table: &str| format!("SELECT count(*) AS n, sum(score) AS s FROM {DB}.{table}");
    let view = |batches: &[RecordBatch], users: &UsersTable| -> Result<bool> {
        let want = (
            users.expected.len() as i64,
            users.expected.values().sum::<i64>(),
        );
        Ok((first_i64(batches, "n")?, first_i64(batches, "s")?) == want)
    };
    let (first_ms, batches) = timed(aggregate("users")).await?;
    let mut matches = view(&batches, users)?;
    let (mut view_ms, mut point_ms, mut lake_ms, mut written_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut next_change = 10_000_000_000i64;
    for run in 0..2 * runs {
        let writes = run >= runs;
        if writes {
            users.write_changes(next_change, changes_between).await?;
            next_change += changes_between as i64;
        }
        let (ms, batches) = timed(aggregate("users")).await?;
        matches &= view(&batches, users)?;
        if writes {
            written_ms.push(ms);
            continue;
        }
        view_ms.push(ms);
        let id = (run as i64 * 7919) % users.next_new;
        let (ms, batches) =
            timed(format!("SELECT id, score FROM {DB}.users WHERE id = {id}")).await?;
        point_ms.push(ms);
        let got = batches.iter().map(RecordBatch::num_rows).sum::<usize>();
        matches &= got == usize::from(users.expected.contains_key(&id));
        let (ms, _) = timed(aggregate("users$lake")).await?;
        lake_ms.push(ms);
    }
    let view_max_ms = view_ms.iter().copied().fold(f64::NAN, f64::max);
    Ok(ViewFigures {
        runs,
        lake_files: 0,
        vectored_files: 0,
        first_ms,
        view_p50_ms: median(&mut view_ms),
        view_max_ms,
        point_p50_ms: median(&mut point_ms),
        lake_p50_ms: median(&mut lake_ms),
        changes_between,
        written_p50_ms: median(&mut written_ms),
        matches,
    })
}

fn first_i64(batches: &[RecordBatch], column: &str) -> Result<i64> {
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .context("an empty answer")?;
    let a = batch
        .column_by_name(column)
        .with_context(|| format!("no column {column}"))?;
    let a = arrow::compute::cast(a, &DataType::Int64)?;
    let a = a
        .as_any()
        .downcast_ref::<Int64Array>()
        .context("not an integer")?;
    Ok(if a.is_null(0) { 0 } else { a.value(0) })
}
