//! Partitioned, lake-enabled tables (issue 17) written by the official clients of other
//! languages, tiered into Delta and checked. The Java client runs the harness's
//! `partitioned-lake` scenario (`java-client/`, both client versions: a day-partitioned log
//! table with a partition the writer creates itself, a partitioned primary-key table, an
//! auto-partitioned table); pyfluss runs `python/partitioned_lake.py write` (a partition dropped
//! with its rows and created again, list_partition_offsets, an Arrow batch, upserts and
//! deletes). Each checks what it reads back per partition and leaves the rows each table must
//! hold in `<database>.<table>.rows` (`dt|id|v`, sorted: every log row; the last image per key).
//!
//! The test then tiers every lake-enabled table with the test kit's tiering service and checks,
//! per table: `db.t$lake` holds exactly those rows, each partition's count (`GROUP BY dt`, and
//! `WHERE dt = ...` per partition, which scans fewer files than the whole table), and `silt
//! verify` answers MATCH. Last, the client's own view of the lake: its latest lake snapshot
//! (`partitioned-lake-snapshot`; `partitioned_lake.py lake-snapshot`) must name every
//! (partition, bucket) holding rows at its latest offset.
//!
//! A client that cannot run here (no java, javac or mvn, or the jars; no python3 or pyfluss) is
//! reported as `SKIPPED: <test>: <why>`. Flink SQL is not covered: there is no Flink harness.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use arrow::array::RecordBatch;
use silt_connectors::lake::LakeCatalogConfig;
use silt_hotstore::ServerHandle;
use silt_jobs::query::{QueryConfig, QueryRequest, QueryService};
use silt_jobs::verify::{Verdict, VerifyOptions, verify_table};
use silt_testkit::hotstore;
use silt_testkit::java_client;
use silt_testkit::lake::{rows_of, sorted};
use silt_testkit::skip;
use silt_testkit::tiering;
use silt_testkit::wait::describe_diff;

/// The tables `partitioned-lake` makes per client version, and `partitioned_lake.py write`.
const JAVA_TABLES: usize = 3;
const PYTHON_TABLES: usize = 2;

/// Bound on tiering every table of a run, on a loaded two-core machine.
const TIERING_DEADLINE: Duration = Duration::from_secs(120);

/// Where the Python scenario is.
const PYTHON_SCRIPT: &str = "python/partitioned_lake.py";

/// The rows one table must hold, as its client wrote them down.
struct Expected {
    database: String,
    table: String,
    /// `dt|id|v`, sorted.
    rows: Vec<String>,
}

impl Expected {
    fn name(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }

    /// Rows per partition value (`dt`).
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for row in &self.rows {
            let dt = row.split('|').next().unwrap_or_default();
            *counts.entry(dt.to_string()).or_insert(0) += 1;
        }
        counts
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_partitioned_tables_tier_and_verify() -> Result<()> {
    const TEST: &str = "java_client_partitioned_tables_tier_and_verify";
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let scenario = java_client::run_scenario_for_tiering(TEST, dir.path(), "partitioned-lake");
    let Some(run) = scenario.await? else {
        return Ok(()); // skipped, saying why
    };
    let versions = &run.versions;
    let expected = read_expected(&run.expected_dir)?;
    ensure!(
        expected.len() == JAVA_TABLES * versions.len(),
        "the Java client left expected rows for {} tables, not {} ({} client versions ran): {:?}",
        expected.len(),
        JAVA_TABLES * versions.len(),
        versions.len(),
        expected.iter().map(Expected::name).collect::<Vec<_>>()
    );
    tier_and_check(dir.path(), &run.server, &expected).await?;
    for version in versions {
        java_client::run_scenario(
            TEST,
            version,
            &run.bootstrap,
            "partitioned-lake-snapshot",
            vec![],
        )
        .await?;
    }
    println!(
        "{TEST}: {} tables of fluss-client {versions:?} in {:.1} s",
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyfluss_partitioned_tables_tier_and_verify() -> Result<()> {
    const TEST: &str = "pyfluss_partitioned_tables_tier_and_verify";
    let started = Instant::now();
    if let Err(reason) = python_ready() {
        return skip(TEST, &reason);
    }
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 2).await?;
    let output = dir.path().join("expected");
    std::fs::create_dir(&output)?;
    run_python(&server, "write", &output).await?;
    let expected = read_expected(&output)?;
    ensure!(
        expected.len() == PYTHON_TABLES,
        "pyfluss left expected rows for {:?}",
        expected.iter().map(Expected::name).collect::<Vec<_>>()
    );
    tier_and_check(dir.path(), &server, &expected).await?;
    run_python(&server, "lake-snapshot", &output).await?;
    println!(
        "{TEST}: {} tables in {:.1} s",
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Tiers every lake-enabled table of `server` (each of `expected` is one) and checks each
/// against what its client wrote: the rows, the count per partition, a pruned one-partition
/// read, and `silt verify`.
async fn tier_and_check(
    dir: &Path,
    server: &Arc<ServerHandle>,
    expected: &[Expected],
) -> Result<()> {
    let started = Instant::now();
    let service = tiering::service_caught_up(dir, server, expected.len(), TIERING_DEADLINE).await?;
    println!(
        "tiered {} tables in {:.1} s",
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    let lake_root = dir.join("lake").to_string_lossy().to_string();
    let bootstrap = server.local_addr().to_string();
    let queries = QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
        bootstrap.clone(),
        lake_root.clone(),
    )));
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    let mut options = VerifyOptions::new(&bootstrap, lake_root);
    options.deadline = Duration::from_secs(60);
    for table in expected {
        let name = table.name();
        check_partitions(&queries, table).await?;
        let report = verify_table(&connection, &table.database, &table.table, &options).await?;
        ensure!(
            report.verdict == Verdict::Match,
            "verify {name}:\n{}",
            report.render()
        );
        println!(
            "{name}: {} rows in partitions {:?}; verify MATCH",
            table.rows.len(),
            table.counts()
        );
    }
    service.shutdown(Duration::from_secs(30)).await;
    Ok(())
}

/// `table`'s lake: all its rows, the count per partition, and each partition's rows read
/// alone, which must scan fewer lake files than the whole table when it has several.
async fn check_partitions(queries: &QueryService, table: &Expected) -> Result<()> {
    let lake = format!("{}$lake", table.name());
    let (batches, whole) = query(queries, &format!("SELECT dt, id, v FROM {lake}")).await?;
    let got = sorted(rows_of(&batches));
    ensure!(
        got == table.rows,
        "{lake} differs from what the client wrote: {}",
        describe_diff(&table.rows, &got)
    );
    let counts = table.counts();
    let want: Vec<String> = counts.iter().map(|(dt, n)| format!("{dt}|{n}")).collect();
    let sql = format!("SELECT dt, count(*) FROM {lake} GROUP BY dt ORDER BY dt");
    let grouped = rows_of(&query(queries, &sql).await?.0);
    ensure!(
        grouped == want,
        "{sql}: {grouped:?}, the client wrote {want:?}"
    );
    for dt in counts.keys() {
        let sql = format!("SELECT dt, id, v FROM {lake} WHERE dt = '{dt}'");
        let (batches, one) = query(queries, &sql).await?;
        let got = sorted(rows_of(&batches));
        let want: Vec<String> = table
            .rows
            .iter()
            .filter(|row| row.starts_with(&format!("{dt}|")))
            .cloned()
            .collect();
        ensure!(
            got == want,
            "{sql} differs from what the client wrote: {}",
            describe_diff(&want, &got)
        );
        ensure!(
            counts.len() == 1 || one < whole,
            "{sql} scanned {one} lake files, the whole table {whole}"
        );
    }
    Ok(())
}

/// The answer to `sql` and how many lake files it scanned.
async fn query(queries: &QueryService, sql: &str) -> Result<(Vec<RecordBatch>, u64)> {
    let result = queries
        .execute(QueryRequest::new(sql, Duration::from_secs(60)))
        .await
        .with_context(|| sql.to_string())?;
    Ok((result.batches, result.lake_files_scanned))
}

/// Every `<database>.<table>.rows` file in `dir`.
fn read_expected(dir: &Path) -> Result<Vec<Expected>> {
    let mut expected = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let Some(name) = file.strip_suffix(".rows") else {
            continue;
        };
        let (database, table) = name
            .split_once('.')
            .with_context(|| format!("{} is not named <database>.<table>.rows", path.display()))?;
        let text = std::fs::read_to_string(&path)?;
        expected.push(Expected {
            database: database.to_string(),
            table: table.to_string(),
            rows: sorted(text.lines().map(str::to_string).collect()),
        });
    }
    expected.sort_by_key(Expected::name);
    Ok(expected)
}

/// Why the Python scenario cannot run here, if it cannot.
fn python_ready() -> Result<(), String> {
    let probe = Command::new("python3")
        .args(["-c", "import fluss, pyarrow"])
        .output()
        .map_err(|e| format!("python3 cannot run ({e})"))?;
    if !probe.status.success() {
        let stderr = String::from_utf8_lossy(&probe.stderr);
        return Err(format!(
            "pyfluss or pyarrow is not importable ({}); pip install -r integration-tests/python/requirements.txt",
            stderr.lines().last().unwrap_or_default()
        ));
    }
    Ok(())
}

/// Runs a phase of `partitioned_lake.py` against `server` (it bounds itself: 240 s).
async fn run_python(server: &ServerHandle, phase: &'static str, output: &Path) -> Result<()> {
    let script: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join(PYTHON_SCRIPT);
    let bootstrap = server.local_addr().to_string();
    let output = output.to_path_buf();
    let started = Instant::now();
    let ran = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&script)
            .arg(phase)
            .env("SILT_BOOTSTRAP", bootstrap)
            .env("SILT_EXPECTED_DIR", output)
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    println!(
        "partitioned_lake.py {phase}, {:.1} s:\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    ensure!(
        ran.status.success(),
        "partitioned_lake.py {phase} failed ({}):\n{stdout}\n{stderr}",
        ran.status
    );
    Ok(())
}
