//! The `silt` command line. Exit codes: 0 success, 1 failure, 2 usage error, 3 deadline
//! passed (`silt sql`, `silt verify`).

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
    /// Submit, list, inspect, stop and cancel jobs through the REST API of `silt up`.
    Job {
        /// REST API base URL (default: http://<rest.listen>).
        #[arg(long)]
        rest: Option<String>,
        #[command(subcommand)]
        what: crate::job::cli::JobCommand,
    },
    /// Run read-only SQL against a running `silt up` (db.t, db.t$lake, db.t$lake$snapshots).
    /// Exit codes: 0 ok, 1 failure, 3 deadline passed.
    Sql {
        /// One query: SELECT, WITH ... SELECT, VALUES or EXPLAIN.
        sql: String,
        /// Wall-clock budget for planning, waiting and execution (e.g. 500ms, 40s, 2min).
        #[arg(long, default_value = "30s")]
        deadline: String,
        /// Wait (inside the deadline) until the lake covers the hot data of the query's start.
        #[arg(long)]
        wait_for_tiering: bool,
        /// table, csv or json.
        #[arg(long, default_value = "table")]
        format: crate::query::client::OutputFormat,
        /// The REST API of the server (default: http://<rest.listen>).
        #[arg(long)]
        url: Option<String>,
    },
    /// Measure silt: print figures and ratios taken in one run.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Check that a table's lake equals its hot changelog once tiering caught up (exit 0 match,
    /// 1 mismatch, 3 deadline passed before the lake caught up).
    Verify {
        /// The table, as database.table.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        table: Option<String>,
        /// Verify every lake-enabled table.
        #[arg(long)]
        all: bool,
        /// How long to wait for the lake to reach the high watermarks (per table), e.g. 60s.
        #[arg(long, default_value = "60s")]
        deadline: String,
        /// The hotstore's address (default: hotstore.listen from the config).
        #[arg(long)]
        bootstrap: Option<String>,
        /// Rows shown per kind of difference.
        #[arg(long, default_value_t = 10)]
        show: usize,
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
    /// Seeded fault trials: concurrent random workloads against `silt up` (restarted on the same
    /// port) with SIGKILLs, aborts between a durable write and its acknowledgement, power
    /// losses, a second tiering job, a failing lake store and a full disk, then catch-up and
    /// verify of every table (exit 1 when an acknowledged row was lost, a row duplicated or a
    /// table failed verify). Needs a binary built with `--features fault-injection`.
    Trials {
        /// How many seeds to run.
        #[arg(long, default_value_t = 20)]
        seeds: u64,
        /// The first seed (seeds run S, S+1, ...); one seed replays exactly that trial's plan.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How long the lake may take to catch up at the end of each trial, e.g. 60s.
        #[arg(long, default_value = "60s")]
        catch_up: String,
        /// Keep the directory (with silt's logs) of a failed trial (one that lost or duplicated
        /// a row is always kept).
        #[arg(long)]
        keep_failed: bool,
        /// Tests of the checker: plant a duplicated and a lost row in every trial, which must
        /// then report them (and fail).
        #[arg(long, hide = true)]
        plant: bool,
    },
    /// A steady load on a log and a primary-key table through `silt up`, sampled every
    /// interval (RSS, disk, lake files, tiering lag, query latency), with slopes per hour.
    Soak(SoakArgs),
    /// Query service: a $lake scan against raw DataFusion on the same files, deadline
    /// precision, and the real-time view of a primary-key table with a hot tail.
    Query {
        /// Rows in the scanned lake table (about 48 bytes of Parquet and 160 of Arrow per row).
        #[arg(long, default_value_t = 24_000_000)]
        lake_rows: u64,
        /// Runs of the scan comparison, each side.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Queries of the deadline-precision figure.
        #[arg(long, default_value_t = 100)]
        deadline_queries: usize,
        /// Keys tiered into the primary-key table before tiering stops.
        #[arg(long, default_value_t = 1_000_000)]
        pk_keys: u64,
        /// Changes tiered into the primary-key table after its first commit, so its lake holds
        /// deletion vectors (0: a lake without them).
        #[arg(long, default_value_t = 100_000)]
        lake_changes: u64,
        /// Changes in the primary-key table's hot tail.
        #[arg(long, default_value_t = 100_000)]
        tail_changes: u64,
        /// Scratch directory (default: the system temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct SoakArgs {
    /// How long the load runs, e.g. 30min or 2h.
    #[arg(long, default_value = "30min", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Time between samples.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    sample_every: Duration,
    /// Samples before this are left out of the slopes.
    #[arg(long, default_value = "10min", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Rows appended to the log table per second.
    #[arg(long, default_value_t = 10_000)]
    log_rate: u64,
    /// Upserts (and deletes, one in ten) into the primary-key table per second.
    #[arg(long, default_value_t = 1_000)]
    upsert_rate: u64,
    /// Distinct keys of the primary-key table.
    #[arg(long, default_value_t = 100_000)]
    pk_keys: u64,
    #[arg(long, default_value_t = 4)]
    buckets: i32,
    /// `table.datalake.freshness` of both tables.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    freshness: Duration,
    /// Keep `silt up`'s data directory here instead of a temporary one.
    #[arg(long)]
    soak_dir: Option<PathBuf>,
    /// Extra environment for `silt up`, KEY=VALUE (repeatable), e.g. SILT_HOTSTORE__FSYNC=never.
    #[arg(long = "silt-env", value_parser = parse_key_value)]
    silt_env: Vec<(String, String)>,
    /// Run `silt up` under this command, e.g. "heaptrack -o /tmp/silt" (split on spaces).
    #[arg(long)]
    wrapper: Option<String>,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.is::<crate::query::client::DeadlinePassed>() {
                return ExitCode::from(3);
            }
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
            Command::Job { rest, what } => {
                crate::job::cli::run(&config, rest.as_deref(), what).await
            }
            Command::Bench {
                what:
                    BenchCommand::Trials {
                        seeds,
                        seed,
                        catch_up,
                        keep_failed,
                        plant,
                    },
            } => {
                let options = crate::trials::TrialsOptions {
                    seeds,
                    first_seed: seed,
                    catch_up: crate::tiering::parse_duration(&catch_up)
                        .map_err(|e| anyhow::anyhow!("--catch-up: {e}"))?,
                    keep_failed,
                    plant,
                };
                let code = crate::trials::run(options).await?;
                if code != 0 {
                    use std::io::Write as _;
                    let _ = std::io::stdout().flush();
                    std::process::exit(i32::from(code));
                }
                Ok(())
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
            Command::Bench {
                what: BenchCommand::Soak(args),
            } => {
                crate::bench_soak::soak(crate::bench_soak::SoakOptions {
                    duration: args.duration,
                    sample_every: args.sample_every,
                    warmup: args.warmup,
                    log_rate: args.log_rate,
                    upsert_rate: args.upsert_rate,
                    pk_keys: args.pk_keys,
                    buckets: args.buckets,
                    freshness: args.freshness,
                    data_dir: args.soak_dir,
                    env: args.silt_env,
                    wrapper: args
                        .wrapper
                        .map(|w| w.split_whitespace().map(str::to_string).collect())
                        .unwrap_or_default(),
                })
                .await
            }
            Command::Bench {
                what:
                    BenchCommand::Query {
                        lake_rows,
                        runs,
                        deadline_queries,
                        pk_keys,
                        lake_changes,
                        tail_changes,
                        dir,
                    },
            } => {
                let options = crate::bench_query::QueryBenchOptions {
                    lake_rows,
                    runs,
                    deadline_queries,
                    pk_keys,
                    lake_changes,
                    tail_changes,
                    dir,
                };
                crate::bench_query::query(options).await
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
            Command::Verify {
                table,
                all,
                deadline,
                bootstrap,
                show,
            } => {
                let mut options = crate::verify::VerifyOptions::new(
                    bootstrap.unwrap_or_else(|| config.hotstore.listen.clone()),
                    config.lake_root(),
                );
                options.storage_options = config.lake_storage_options();
                options.credentials = config.fluss_credentials();
                options.deadline = crate::tiering::parse_duration(&deadline)
                    .map_err(|e| anyhow::anyhow!("--deadline: {e}"))?;
                options.show_max = show;
                let code = crate::verify::run(&options, table.as_deref(), all).await?;
                if code != 0 {
                    use std::io::Write as _;
                    let _ = std::io::stdout().flush();
                    std::process::exit(i32::from(code));
                }
                Ok(())
            }
            Command::Sql {
                sql,
                deadline,
                wait_for_tiering,
                format,
                url,
            } => {
                let options = crate::query::client::SqlOptions {
                    sql,
                    deadline: crate::tiering::parse_duration(&deadline)
                        .map_err(|e| anyhow::anyhow!("--deadline: {e}"))?,
                    wait_for_tiering,
                    format,
                    url,
                };
                crate::query::client::run(&config, options).await
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
