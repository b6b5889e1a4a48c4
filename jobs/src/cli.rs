//! The `silt` command line. Exit codes: 0 success, 1 failure (the error and its causes on
//! stderr), 2 usage error (a bad flag, value or subcommand: clap's message), 3 deadline passed
//! (`silt sql`, `silt verify`), 4 the server is busy (`silt sql`: every query slot taken; the
//! query did not run, retry).
//!
//! Each command's flags are defined once, on a struct deriving `clap::Args`; [`run`] parses
//! them, loads the configuration, sets up the log ([`crate::logging`]) and dispatches. What a
//! command prints follows [`crate::output`]: its result on stdout (`--format json` where it
//! prints a table), the rest on stderr. `silt completions` and `silt man` are generated from
//! the same definition. `silt bench` is a shim: the benches live in the `silt-bench` crate
//! (bench/), which depends on this one, so `silt` runs the `silt-bench` binary built beside it
//! with the same global flags.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory as _, Parser, Subcommand};

use crate::config::Config;
use crate::logging::{LogFile, LogSetup};
use crate::output::Format;

/// What `silt --help` and the man page say after the commands and flags.
const AFTER_HELP: &str = "\
Exit codes: 0 ok, 1 failure, 2 usage error, 3 deadline passed (sql, verify), 4 server busy (sql).

Output: each command prints its result on stdout (a job id, a verdict, rows, a table; --format \
json for scripts where it prints a table) and notes, summaries and progress on stderr. Colour \
and progress bars only on a terminal; NO_COLOR turns colour off.

Log: `silt up` writes info and above to <data_dir>/log/silt.log (rotated: log.file_bytes_max, \
log.files_max); the terminal gets warnings and errors unless --log-stderr or --log asks for more.

Environment: SILT_CONFIG, SILT_LOG, SILT_LOG_STDERR, and SILT_<SECTION>__<KEY> for any key of \
conf/silt.yaml (e.g. SILT_HOTSTORE__LISTEN=127.0.0.1:9124).";

#[derive(Debug, Parser)]
#[command(
    name = "silt",
    version = crate::build_info::VERSION,
    about = "A streamhouse in one binary: a Fluss-compatible hot store, Delta Lake tiering, bounded SQL",
    after_long_help = AFTER_HELP
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
    /// Log filter, e.g. info or warn,silt_jobs=debug (default: info and above of silt's own
    /// crates). Naming one also writes the log to stderr.
    #[arg(long, global = true, env = "SILT_LOG", value_parser = crate::logging::parse_filter)]
    pub log: Option<String>,
    /// Write the log to stderr too. Without it stderr shows warnings and errors only; `silt up`
    /// keeps its whole log in <data_dir>/log/silt.log.
    #[arg(long, global = true, env = "SILT_LOG_STDERR",
          value_parser = clap::builder::FalseyValueParser::new())]
    pub log_stderr: bool,
}

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
        /// text (for people) or json (for scripts: the job objects of the REST API).
        #[arg(long, global = true, value_enum, default_value_t)]
        format: Format,
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
    /// Print the completion script of a shell (e.g. `silt completions bash >
    /// ~/.local/share/bash-completion/completions/silt`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print silt's man page (roff: `silt man | man -l -`), or with --dir write one page per
    /// command there (silt.1, silt-up.1, silt-job-submit.1, ...).
    Man {
        /// Write every page into this directory instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

impl Command {
    /// The configuration keys the command's own flags set (`key.path`, value): applied over
    /// conf/silt.yaml, the config file and the environment, as `--data-dir` is.
    fn overrides(&self) -> Vec<(String, String)> {
        match self {
            Command::Up(UpArgs {
                bootstrap: Some(bootstrap),
                ..
            }) => vec![("hot_tier.bootstrap".to_string(), bootstrap.clone())],
            _ => Vec::new(),
        }
    }

    /// The log file a command keeps under the data directory (`<name>.log`): the services'.
    fn log_file(&self) -> Option<&'static str> {
        match self {
            Command::Up(_) => Some("silt"),
            Command::Demo(_) => Some("demo"),
            _ => None,
        }
    }
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Use the Apache Fluss cluster at HOST:PORT[,HOST:PORT...] as the hot tier instead of
    /// starting a hot store here (sets hot_tier.bootstrap): tier its tables marked
    /// silt.datalake.enabled=true, and run jobs, queries and status against it.
    #[arg(long, value_name = "HOST:PORT[,...]")]
    bootstrap: Option<String>,
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
    /// text (a line per table) or json (one object per line: started, status, stopped).
    #[arg(long, value_enum, default_value_t)]
    status_format: Format,
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
            status_format: args.status_format,
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
    /// The hot tier's address (default: hot_tier.bootstrap, else hotstore.listen).
    #[arg(long)]
    bootstrap: Option<String>,
    /// Rows shown per kind of difference.
    #[arg(long, default_value_t = 10)]
    show: usize,
    /// text (the verdict on stdout, the diff on stderr) or json (everything on stdout).
    #[arg(long, value_enum, default_value_t)]
    format: Format,
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
    let global = cli.global;
    let command = match cli.command {
        Command::Bench { args } => return bench_shim(&global, &args),
        Command::Completions { shell } => return completions(shell),
        Command::Man { dir } => return man(dir.as_deref()),
        command => command,
    };
    let (config, runtime) = start_logging(&global, &command.overrides(), command.log_file())?;
    runtime.block_on(dispatch(command, &config))
}

/// `silt completions <shell>`: the completion script, from the one definition of the flags.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    clap_complete::generate(shell, &mut Cli::command(), "silt", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `silt man`: the man page of `silt` on stdout, or every command's page into `dir`.
fn man(dir: Option<&Path>) -> Result<ExitCode> {
    let command = Cli::command();
    match dir {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout().lock())
            .context("writing the man page")?,
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing the man pages into {}", dir.display()))?;
            eprintln!(
                "wrote the man pages of silt and its commands into {}",
                dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
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

/// What every command needs before it runs: the lake's object stores, the layered
/// configuration, logging (to stderr: warnings, or the log when `--log`/`--log-stderr` ask)
/// and a runtime. The benches start here.
pub fn start(global: &GlobalArgs) -> Result<(Config, tokio::runtime::Runtime)> {
    start_logging(global, &[], None)
}

/// [`start`] with a command's own `overrides` of the configuration, and with `log_file` the log
/// also goes to `<data_dir>/log/<log_file>.log`.
fn start_logging(
    global: &GlobalArgs,
    overrides: &[(String, String)],
    log_file: Option<&'static str>,
) -> Result<(Config, tokio::runtime::Runtime)> {
    silt_connectors::delta::register_object_stores();
    // The configuration first: the log file lives in its data directory.
    let config = load_config(global, overrides)?;
    let file = log_file.map(|name| LogFile::of(&config, name));
    crate::logging::init(&LogSetup::new(
        global.log.as_deref(),
        global.log_stderr,
        file,
    ))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(config.engine.blocking_threads_max.max(1))
        .build()?;
    Ok((config, runtime))
}

/// conf/silt.yaml < `--config` < `SILT_*` < `--data-dir` and the command's own flags.
fn load_config(global: &GlobalArgs, command: &[(String, String)]) -> Result<Config> {
    let mut overrides = command.to_vec();
    if let Some(dir) = &global.data_dir {
        overrides.push(("data_dir".to_string(), dir.display().to_string()));
    }
    Config::load(global.config.as_deref(), std::env::vars(), &overrides)
}

async fn dispatch(command: Command, config: &Config) -> Result<ExitCode> {
    match command {
        Command::Up(args) => crate::up::run(config, args.into()).await?,
        Command::Job { rest, format, what } => {
            crate::job::cli::run(config, rest.as_deref(), format, what).await?
        }
        Command::Sql(args) => crate::query::client::run(config, args.into()).await?,
        Command::Verify(args) => return verify(config, args).await,
        Command::Demo(args) => crate::demo::run(&config.data_dir, args.into()).await?,
        Command::Bench { .. } | Command::Completions { .. } | Command::Man { .. } => {
            unreachable!("silt bench, completions and man run before the runtime starts")
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn verify(config: &Config, args: VerifyArgs) -> Result<ExitCode> {
    let mut options = crate::verify::VerifyOptions::from_config(config);
    if let Some(bootstrap) = args.bootstrap {
        options.bootstrap = bootstrap;
    }
    options.deadline = args.deadline;
    options.show_max = args.show;
    let code = crate::verify::run(&options, args.table.as_deref(), args.all, args.format).await?;
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
    if global.log_stderr {
        command.arg("--log-stderr");
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
            (&["up", "--status-format", "xml"], 2),
            (&["--log", "silt_jobs=loud", "up"], 2),
            (&["job", "list", "--format", "json"], 0),
            (&["job", "--format", "yaml", "list"], 2),
            (&["verify", "--all", "--format", "json"], 0),
            (&["completions", "bash"], 0),
            (&["completions", "cmd.exe"], 2),
            (&["man", "--dir", "pages"], 0),
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
    /// its progress line. Now no command writes more than warnings to stderr unless asked, and
    /// the services keep their log in a file (issue 37: `silt up`'s status lines scrolled away
    /// between info lines).
    #[test]
    fn stderr_shows_warnings_unless_asked_and_services_keep_a_log_file() {
        use crate::logging::{FILTER_LOG, FILTER_TERMINAL};
        for (args, file, stderr) in [
            (&["sql", "SELECT 1"][..], None, FILTER_TERMINAL),
            (&["job", "list"], None, FILTER_TERMINAL),
            (&["verify", "--all"], None, FILTER_TERMINAL),
            (&["up", "--demo"], Some("silt"), FILTER_TERMINAL),
            (&["demo"], Some("demo"), FILTER_TERMINAL),
            (&["--log-stderr", "up"], Some("silt"), FILTER_LOG),
            (&["up", "--log", "debug"], Some("silt"), "debug"),
        ] {
            let cli =
                Cli::try_parse_from(std::iter::once("silt").chain(args.iter().copied())).unwrap();
            let setup = LogSetup::new(cli.global.log.as_deref(), cli.global.log_stderr, None);
            assert_eq!(
                (cli.command.log_file(), setup.stderr.as_str()),
                (file, stderr),
                "silt {args:?}"
            );
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
