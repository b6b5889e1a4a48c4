//! Measures one Fluss endpoint (silt's hotstore or a real Apache Fluss cluster) through the
//! official fluss-rs client with the workload of `silt bench hotstore` (method in
//! `bench/src/hotstore.rs`); `silt bench hotstore` runs silt and a real cluster in one
//! run and prints the ratios, this example measures a single address.
//!
//! ```text
//! cargo run --release -p silt-bench --example hotstore_bench -- \
//!     --bootstrap 127.0.0.1:9223 [--label fluss-0.9.1] [--rows 1000000] [--lookups 10000]
//! ```

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use silt_bench::hotstore::{BenchReport, CpuMeter, Workload, run_endpoint};
use silt_bench::report::Table;

fn from_args() -> Result<(String, String, Workload)> {
    let mut bootstrap = "127.0.0.1:9123".to_string();
    let mut label = String::new();
    let mut workload = Workload::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap" => bootstrap = value()?,
            "--label" => label = value()?,
            "--rows" => workload.rows = value()?.parse()?,
            "--batch-rows" => workload.batch_rows = value()?.parse()?,
            "--buckets" => workload.buckets = value()?.parse()?,
            "--keys" => workload.keys = value()?.parse()?,
            "--lookups" => workload.lookups = value()?.parse()?,
            "--lookup-batch-timeout-ms" => workload.lookup_batch_timeout_ms = value()?.parse()?,
            "--compressions" => {
                workload.compressions = value()?.split(',').map(str::to_string).collect()
            }
            "--deadline-s" => workload.deadline = Duration::from_secs(value()?.parse()?),
            "-h" | "--help" => {
                println!(
                    "usage: hotstore_bench --bootstrap HOST:PORT [--label NAME] [--rows N] \
                     [--batch-rows N] [--buckets N] [--keys N] [--lookups N] \
                     [--lookup-batch-timeout-ms MS] [--compressions ZSTD,NONE] [--deadline-s S]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown flag {other} (try --help)"),
        }
    }
    workload.validate()?;
    if label.is_empty() {
        label = bootstrap.clone();
    }
    Ok((bootstrap, label, workload))
}

fn print_report(label: &str, bootstrap: &str, workload: &Workload, report: &BenchReport) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("hotstore bench: {label} ({bootstrap}), acks=all");
    let mut rows = Vec::new();
    for log in &report.logs {
        let c = &log.compression;
        rows.push((format!("produce rows/s {c}"), log.produce.rows_per_s()));
        rows.push((format!("produce MB/s {c}"), log.produce.mb_per_s()));
        rows.push((format!("fetch rows/s {c}"), log.fetch.rows_per_s()));
        rows.push((format!("fetch MB/s {c}"), log.fetch.mb_per_s()));
    }
    rows.extend([
        ("upsert rows/s".to_string(), report.upsert.rows_per_s()),
        ("lookup p50 ms".to_string(), ms(report.lookup.p50)),
        ("lookup p99 ms".to_string(), ms(report.lookup.p99)),
        ("lookup max ms".to_string(), ms(report.lookup.max)),
    ]);
    let mut table = Table::new(["metric", "value"]);
    for (name, value) in rows {
        table.row([name, format!("{value:.3}")]);
    }
    table.row([
        "lookup misses".to_string(),
        report.lookup.misses.to_string(),
    ]);
    table.print_markdown();
    println!(
        "rows={} keys={} lookups={}",
        workload.rows, workload.keys, report.lookup.samples
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
    let (bootstrap, label, workload) = from_args()?;
    let report = run_endpoint(&bootstrap, &workload, &CpuMeter::ClientOnly).await?;
    print_report(&label, &bootstrap, &workload, &report);
    ensure!(
        report.lookup.misses == 0,
        "{} lookups of written keys found nothing",
        report.lookup.misses
    );
    Ok(())
}
