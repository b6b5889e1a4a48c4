//! The `silt` command line. Exit codes: 0 success, 1 failure, 2 usage error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "silt",
    version,
    about = "silt: a streamhouse in one binary (Fluss-compatible hot store, Delta Lake tiering, bounded SQL)"
)]
pub struct Cli {
    /// Config file layered over the built-in conf/silt.yaml.
    #[arg(long, global = true, env = "SILT_CONFIG")]
    config: Option<PathBuf>,
    /// Where silt keeps everything (overrides data_dir).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Log filter, e.g. info or silt=debug.
    #[arg(
        long,
        global = true,
        default_value = "warn,buoyant_kernel=off,deltalake_core=error,silt_jobs=info,silt_hotstore=info,silt_engine=info,silt_connectors=info",
        env = "SILT_LOG"
    )]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run hotstore (Fluss wire protocol), the engine and the tiering service; --demo adds a
    /// workload on two lake-enabled tables.
    Up {
        /// Create demo tables and write to them at a steady rate.
        #[arg(long)]
        demo: bool,
        /// Demo rows per second.
        #[arg(long, default_value_t = 200)]
        demo_rate: u64,
        /// Stop after this many seconds instead of waiting for Ctrl-C.
        #[arg(long)]
        run_for_s: Option<u64>,
        /// Seconds between status lines.
        #[arg(long, default_value_t = 5)]
        status_every_s: u64,
        /// Tests only: abort once at a tiering committer point (before-commit, after-commit).
        #[arg(long, hide = true, value_parser = ["before-commit", "after-commit"])]
        crash_at: Option<String>,
    },
    /// Measure silt: print figures and ratios taken in one run.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Run the example dataflow on the engine (a generator, keyed state, checkpoints).
    Demo {
        /// Orders per second per subtask.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Stop after this many orders per subtask instead of running until Ctrl-C.
        #[arg(long)]
        orders: Option<u64>,
        #[arg(long, default_value_t = 2)]
        parallelism: u32,
        /// Checkpoint interval in milliseconds.
        #[arg(long, default_value_t = 2000)]
        checkpoint_interval_ms: u64,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Tiering throughput against the Parquet ceiling, and freshness under steady load.
    Tiering {
        /// Rows pre-filled into the log table.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        #[arg(long, default_value_t = 8192)]
        batch_rows: usize,
        /// Checkpoint interval of the tiering jobs.
        #[arg(long, default_value_t = 1)]
        freshness_seconds: u64,
        /// Steady load as a fraction of the measured tiering throughput.
        #[arg(long, default_value_t = 0.5)]
        load_fraction: f64,
        /// Rows of the smaller table of the peak-RSS phase (the larger has 4x); 0 skips it.
        #[arg(long, default_value_t = 1_000_000)]
        rss_rows: u64,
    },
    /// silt's hotstore against a real Apache Fluss cluster through fluss-rs: produce, fetch,
    /// upsert and lookup figures and the ratios silt/Fluss, in one run.
    Hotstore {
        /// Rows appended to the log table, then fetched.
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        #[arg(long, default_value_t = 10_000)]
        batch_rows: i64,
        #[arg(long, default_value_t = 3)]
        buckets: i32,
        /// Keys upserted into the PK table before the lookups.
        #[arg(long, default_value_t = 100_000)]
        keys: i64,
        /// Sequential point lookups of random written keys.
        #[arg(long, default_value_t = 10_000)]
        lookups: usize,
        /// Times the log table is read back in full.
        #[arg(long, default_value_t = 5)]
        fetch_passes: u32,
        /// Arrow compressions of the log table, comma-separated; produce and fetch run once
        /// per entry (ZSTD is Fluss's default).
        #[arg(long, value_delimiter = ',', default_values_t = ["ZSTD".to_string(), "NONE".to_string()])]
        compressions: Vec<String>,
        /// The scanner's long-poll wait in ms (fluss-rs default 500; see bench_hotstore.rs
        /// for why a long wait measures the tail of the scan rather than throughput).
        #[arg(long, default_value_t = 10)]
        fetch_wait_max_ms: i32,
        /// Deadline of each phase in seconds.
        #[arg(long, default_value_t = 300)]
        deadline_s: u64,
        /// The real-Fluss harness (start.sh, stop.sh) that starts the comparison cluster.
        #[arg(long, default_value = "integration-tests/fluss-real")]
        fluss_harness: PathBuf,
        /// Extra server.yaml lines for the harness's cluster, e.g.
        /// "log.flush.interval-messages: 1" (Fluss fsyncs every batch, as silt does).
        #[arg(long)]
        fluss_conf: Option<String>,
        /// Compare with this running Fluss endpoint instead of starting one.
        #[arg(long, conflicts_with = "no_fluss")]
        fluss_bootstrap: Option<String>,
        /// Measure silt only.
        #[arg(long)]
        no_fluss: bool,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn try_main(cli: Cli) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    silt_connectors::delta::register_object_stores();
    let mut overrides = Vec::new();
    if let Some(dir) = &cli.data_dir {
        overrides.push(("data_dir".to_string(), dir.display().to_string()));
    }
    let config = Config::load(cli.config.as_deref(), std::env::vars(), &overrides)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Bench {
                what:
                    BenchCommand::Tiering {
                        rows,
                        batch_rows,
                        freshness_seconds,
                        load_fraction,
                        rss_rows,
                    },
            } => {
                let options = crate::bench::TieringBenchOptions {
                    rows,
                    batch_rows: batch_rows.max(1),
                    freshness_seconds,
                    load_fraction,
                    rss_rows,
                };
                crate::bench::tiering(options).await
            }
            Command::Bench {
                what:
                    BenchCommand::Hotstore {
                        rows,
                        batch_rows,
                        buckets,
                        keys,
                        lookups,
                        fetch_passes,
                        compressions,
                        fetch_wait_max_ms,
                        deadline_s,
                        fluss_harness,
                        fluss_conf,
                        fluss_bootstrap,
                        no_fluss,
                    },
            } => {
                use crate::bench_hotstore::{FlussTarget, HotstoreBenchOptions, Workload};
                let fluss = match (no_fluss, fluss_bootstrap) {
                    (true, _) => FlussTarget::None,
                    (false, Some(bootstrap)) => FlussTarget::Bootstrap(bootstrap),
                    (false, None) => FlussTarget::Harness {
                        dir: fluss_harness,
                        extra_conf: fluss_conf,
                    },
                };
                let workload = Workload {
                    rows,
                    batch_rows,
                    buckets,
                    keys,
                    lookups,
                    fetch_passes,
                    compressions,
                    fetch_wait_max_ms,
                    deadline: Duration::from_secs(deadline_s),
                    ..Workload::default()
                };
                crate::bench_hotstore::hotstore(&config, HotstoreBenchOptions { workload, fluss })
                    .await
            }
            Command::Up {
                demo,
                demo_rate,
                run_for_s,
                status_every_s,
                crash_at,
            } => {
                let options = crate::up::UpOptions {
                    demo,
                    demo_rate_per_s: demo_rate,
                    run_for: run_for_s.map(Duration::from_secs),
                    status_every: Duration::from_secs(status_every_s.max(1)),
                    crash_at: crash_at.map(|p| match p.as_str() {
                        "before-commit" => silt_connectors::delta::FaultPoint::BeforeCommit,
                        _ => silt_connectors::delta::FaultPoint::AfterCommit,
                    }),
                };
                crate::up::run(&config, options).await
            }
            Command::Demo {
                rate,
                orders,
                parallelism,
                checkpoint_interval_ms,
            } => {
                let options = crate::demo::DemoOptions {
                    rate_per_s: rate,
                    orders_max: orders,
                    parallelism,
                    checkpoint_interval: Duration::from_millis(checkpoint_interval_ms),
                };
                crate::demo::run(&config.data_dir, options).await
            }
        }
    })
}
