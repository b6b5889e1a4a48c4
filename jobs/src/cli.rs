//! The `silt` command line. Exit codes: 0 success, 1 failure (the error and its causes on
//! stderr), 2 usage error (a bad flag, value or subcommand: clap's message), 3 deadline passed
//! (`silt sql`, `silt verify`), 4 the server is busy (`silt sql`: every query slot taken; the
//! query did not run, retry).
//!
//! Each command's flags are defined once, on a struct deriving `clap::Args`; [`run`] parses
//! them, loads the configuration and dispatches. `silt bench` is a shim: the benches live in
//! the `silt-bench` crate (bench/), which depends on this one, so `silt` runs the `silt-bench`
//! binary built beside it with the same global flags.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "silt",
    version,
    about = "silt: a streamhouse in one binary (Fluss-compatible hot store, Delta Lake tiering, bounded SQL)"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The flags every command takes (`silt-bench` takes them too).
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// Config file layered over the built-in conf/silt.yaml.
    #[arg(long, global = true, env = "SILT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where silt keeps everything (overrides data_dir).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    /// Log filter, e.g. info or silt=debug (default: silt's own crates at info for `up`,
    /// `demo` and `bench`; warnings only for `sql`, `job` and `verify`).
    #[arg(long, global = true, env = "SILT_LOG")]
    pub log: Option<String>,
}

/// The default log filter of the services (`silt up`, `silt demo`, the benches): what silt's
/// own crates do, at info.
pub const LOG_FILTER_SERVICE: &str = "warn,buoyant_kernel=off,deltalake_core=error,silt_jobs=info,silt_hotstore=info,silt_engine=info,silt_connectors=info";

/// The default log filter of the one-shot commands (`silt sql`, `silt job`, `silt verify`):
/// warnings only, so their results and progress lines are not interleaved with the info lines
/// of the Fluss sources they open.
pub const LOG_FILTER_COMMAND: &str = "warn,buoyant_kernel=off,deltalake_core=error";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run hotstore (Fluss wire protocol), the engine and the tiering service; --demo adds a
    /// workload on two lake-enabled tables.
    Up(UpArgs),
    /// Submit, list, inspect, stop and cancel jobs through the REST API of `silt up`.
    Job {
        /// REST API base URL (default: http://<rest.listen>).
        #[arg(long)]
        rest: Option<String>,
        #[command(subcommand)]
        what: crate::job::cli::JobCommand,
    },
    /// Run read-only SQL against a running `silt up` (db.t, db.t$lake, db.t$lake$snapshots).
    /// Exit codes: 0 ok, 1 failure, 3 deadline passed, 4 server busy (retry).
    Sql(SqlArgs),
    /// Measure silt: print figures and ratios taken in one run (tiering, hotstore, query, soak,
    /// trials; `silt bench --help`). Runs the silt-bench binary beside this one.
    #[command(disable_help_flag = true)]
    Bench {
        /// The bench and its flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Check that a table's lake equals its hot changelog once tiering caught up (exit 0 match,
    /// 1 mismatch, 3 deadline passed before the lake caught up).
    Verify(VerifyArgs),
    /// Run the example dataflow on the engine (a generator, keyed state, checkpoints).
    Demo(DemoArgs),
}

impl Command {
    /// A command that does one thing and ends, printing its result.
    fn is_one_shot(&self) -> bool {
        matches!(
            self,
            Command::Sql(_) | Command::Job { .. } | Command::Verify(_)
        )
    }
}

#[derive(Debug, clap::Args)]
struct UpArgs {
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
    /// Tests only: abort once at a tiering committer point.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    crash_at: Option<CrashPoint>,
}

/// Where `--crash-at` aborts `silt up` (test builds only).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CrashPoint {
    BeforeCommit,
    AfterCommit,
}

impl From<UpArgs> for crate::up::UpOptions {
    fn from(args: UpArgs) -> Self {
        crate::up::UpOptions {
            demo: args.demo,
            demo_rate_per_s: args.demo_rate,
            run_for: args.run_for_s.map(Duration::from_secs),
            status_every: Duration::from_secs(args.status_every_s.max(1)),
            #[cfg(feature = "fault-injection")]
            crash_at: args.crash_at.map(|p| match p {
                CrashPoint::BeforeCommit => silt_connectors::delta::FaultPoint::BeforeCommit,
                CrashPoint::AfterCommit => silt_connectors::delta::FaultPoint::AfterCommit,
            }),
        }
    }
}

#[derive(Debug, clap::Args)]
struct SqlArgs {
    /// One query: SELECT, WITH ... SELECT, VALUES or EXPLAIN.
    sql: String,
    /// Wall-clock budget for planning, waiting and execution (e.g. 500ms, 40s, 2min).
    #[arg(long, default_value = "30s", value_parser = parse_duration_flag)]
    deadline: Duration,
    /// Wait (inside the deadline) until the lake covers the hot data of the query's start.
    #[arg(long)]
    wait_for_tiering: bool,
    /// table, csv or json.
    #[arg(long, default_value = "table")]
    format: crate::query::client::OutputFormat,
    /// The REST API of the server (default: http://<rest.listen>).
    #[arg(long)]
    url: Option<String>,
}

impl From<SqlArgs> for crate::query::client::SqlOptions {
    fn from(args: SqlArgs) -> Self {
        crate::query::client::SqlOptions {
            sql: args.sql,
            deadline: args.deadline,
            wait_for_tiering: args.wait_for_tiering,
            format: args.format,
            url: args.url,
        }
    }
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// The table, as database.table.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    table: Option<String>,
    /// Verify every lake-enabled table.
    #[arg(long)]
    all: bool,
    /// How long to wait for the lake to reach the high watermarks (per table), e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_duration_flag)]
    deadline: Duration,
    /// The hotstore's address (default: hotstore.listen from the config).
    #[arg(long)]
    bootstrap: Option<String>,
    /// Rows shown per kind of difference.
    #[arg(long, default_value_t = 10)]
    show: usize,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
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
}

impl From<DemoArgs> for crate::demo::DemoOptions {
    fn from(args: DemoArgs) -> Self {
        crate::demo::DemoOptions {
            rate_per_s: args.rate,
            orders_max: args.orders,
            parallelism: args.parallelism,
            checkpoint_interval: Duration::from_millis(args.checkpoint_interval_ms),
        }
    }
}

/// A duration flag (`500ms`, `30s`, `2min`; see [`silt_rt::duration`]): a bad
/// value is a usage error, so it exits 2.
pub fn parse_duration_flag(text: &str) -> Result<Duration, String> {
    silt_rt::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// Runs `silt` with the process's arguments.
pub fn run() -> Result<ExitCode> {
    run_from(std::env::args_os())
}

/// Runs `silt` with `args` (the first is the program name).
pub fn run_from(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Result<ExitCode> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return Ok(usage(&e)),
    };
    let mut global = cli.global;
    let command = match cli.command {
        Command::Bench { args } => return bench_shim(&global, &args),
        command => command,
    };
    if command.is_one_shot() {
        global
            .log
            .get_or_insert_with(|| LOG_FILTER_COMMAND.to_string());
    }
    let (config, runtime) = start(&global)?;
    runtime.block_on(dispatch(command, &config))
}

/// Prints clap's message for `--help`, `--version` or a usage error and returns its exit code
/// (0 for help and version, 2 for a bad flag, value or subcommand).
pub fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

/// The exit code of a command that failed, after printing the error with its causes: 3 when a
/// deadline passed, 4 when the server was busy, else 1.
pub fn failure(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    if e.is::<crate::query::client::DeadlinePassed>() {
        ExitCode::from(3)
    } else if e.is::<crate::query::client::Busy>() {
        ExitCode::from(4)
    } else {
        ExitCode::FAILURE
    }
}

/// What every command needs before it runs: logging, the lake's object stores, the layered
/// configuration and a runtime.
pub fn start(global: &GlobalArgs) -> Result<(Config, tokio::runtime::Runtime)> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(
                global.log.as_deref().unwrap_or(LOG_FILTER_SERVICE),
            )
            .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    silt_connectors::delta::register_object_stores();
    let mut overrides = Vec::new();
    if let Some(dir) = &global.data_dir {
        overrides.push(("data_dir".to_string(), dir.display().to_string()));
    }
    let config = Config::load(global.config.as_deref(), std::env::vars(), &overrides)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(config.engine.blocking_threads_max.max(1))
        .build()?;
    Ok((config, runtime))
}

async fn dispatch(command: Command, config: &Config) -> Result<ExitCode> {
    match command {
        Command::Up(args) => crate::up::run(config, args.into()).await?,
        Command::Job { rest, what } => crate::job::cli::run(config, rest.as_deref(), what).await?,
        Command::Sql(args) => crate::query::client::run(config, args.into()).await?,
        Command::Verify(args) => return verify(config, args).await,
        Command::Demo(args) => crate::demo::run(&config.data_dir, args.into()).await?,
        Command::Bench { .. } => unreachable!("silt bench runs before the runtime starts"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn verify(config: &Config, args: VerifyArgs) -> Result<ExitCode> {
    let mut options = crate::verify::VerifyOptions::new(
        args.bootstrap
            .unwrap_or_else(|| config.hotstore.listen.clone()),
        config.lake_root(),
    );
    options.storage_options = config.lake_storage_options();
    options.format = config.lake_format();
    options.credentials = config.fluss_credentials();
    options.deadline = args.deadline;
    options.show_max = args.show;
    let code = crate::verify::run(&options, args.table.as_deref(), args.all).await?;
    Ok(ExitCode::from(code))
}

/// `silt bench ...`: runs `silt-bench ...` from this binary's directory with the global flags
/// given to `silt` (flags after the bench's name override them), and exits as it does.
fn bench_shim(global: &GlobalArgs, args: &[OsString]) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the silt binary")?;
    let bench = exe.with_file_name(format!("silt-bench{}", std::env::consts::EXE_SUFFIX));
    if !bench.is_file() {
        bail!(
            "`silt bench` runs the silt-bench binary, which is not beside this silt (no {}); \
             build it with `cargo build --release -p silt-bench` (every `cargo test` builds it)",
            bench.display()
        );
    }
    let mut command = std::process::Command::new(&bench);
    if let Some(log) = &global.log {
        command.arg("--log").arg(log);
    }
    if let Some(config) = &global.config {
        command.arg("--config").arg(config);
    }
    if let Some(dir) = &global.data_dir {
        command.arg("--data-dir").arg(dir);
    }
    let status = command
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    match status.code() {
        Some(code) => Ok(ExitCode::from(u8::try_from(code).unwrap_or(1))),
        None => bail!("{} ended by a signal ({status})", bench.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `args` after `silt` and returns clap's exit code for an error (0 when it parses).
    fn exit_code(args: &[&str]) -> i32 {
        match Cli::try_parse_from(std::iter::once("silt").chain(args.iter().copied())) {
            Ok(_) => 0,
            Err(e) => e.exit_code(),
        }
    }

    #[test]
    fn bad_flags_and_values_are_usage_errors() {
        for (args, code) in [
            (&["sql", "SELECT 1"][..], 0),
            (&["sql", "SELECT 1", "--deadline", "soon"], 2),
            (&["sql", "SELECT 1", "--no-such-flag"], 2),
            (&["verify", "--all", "--deadline", "2 fortnights"], 2),
            (&["verify"], 2),
            (&["up", "--status-every-s", "often"], 2),
            (&["no-such-command"], 2),
            (&["bench", "tiering", "--rows", "10"], 0),
            (&["bench", "--help"], 0),
            (&["--help"], 0),
        ] {
            assert_eq!(exit_code(args), code, "silt {args:?}");
        }
    }

    #[test]
    fn silt_bench_gets_everything_after_bench() {
        let cli = Cli::try_parse_from(["silt", "--log", "off", "bench", "trials", "--seeds", "2"])
            .unwrap();
        assert_eq!(cli.global.log.as_deref(), Some("off"));
        let Command::Bench { args } = cli.command else {
            panic!("not bench: {:?}", cli.command);
        };
        assert_eq!(args, ["trials", "--seeds", "2"]);
    }

    /// Regression (issue 14): `silt verify --all` printed the Fluss source's info lines into
    /// its progress line; the one-shot commands now log only warnings unless told otherwise.
    #[test]
    fn one_shot_commands_log_only_warnings_by_default() {
        for (args, one_shot) in [
            (&["sql", "SELECT 1"][..], true),
            (&["job", "list"], true),
            (&["verify", "--all"], true),
            (&["up", "--demo"], false),
            (&["demo"], false),
        ] {
            let cli =
                Cli::try_parse_from(std::iter::once("silt").chain(args.iter().copied())).unwrap();
            assert_eq!(cli.command.is_one_shot(), one_shot, "silt {args:?}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
