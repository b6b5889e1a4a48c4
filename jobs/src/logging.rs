//! Where silt's log goes. A person at a terminal watches what a command prints (`silt up`'s
//! status lines, a verify's progress), so the terminal gets only warnings and errors unless
//! asked for more:
//!
//! - The services (`silt up`, `silt demo`) keep their log in a file under the data directory,
//!   `<data_dir>/log/silt.log` (`demo.log` for `silt demo`), at the log filter (`--log`, default
//!   [`FILTER_LOG`]: info and above of silt's own crates), rotated at `log.file_bytes_max` and
//!   kept to `log.files_max` files (see [`rotating`]).
//! - stderr gets [`FILTER_TERMINAL`] (warnings and errors), or the log filter when asked: with
//!   `--log-stderr` (`SILT_LOG_STDERR=1`), or when `--log`/`SILT_LOG` names a filter.
//! - Colour codes only on a terminal (see [`crate::output::stderr_colour`]); never in the file.

pub mod rotating;

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context, Result};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::Config;

/// What the log holds unless `--log` says otherwise: what silt's own crates do, at info, and
/// the warnings of the libraries (less the Delta kernel's and delta-rs's chatter).
pub const FILTER_LOG: &str = "warn,buoyant_kernel=off,deltalake_core=error,silt_jobs=info,silt_hotstore=info,silt_engine=info,silt_connectors=info";

/// What stderr shows unless asked for the log: warnings and errors.
pub const FILTER_TERMINAL: &str = "warn,buoyant_kernel=off,deltalake_core=error";

/// A command's log file: `<dir>/<name>.log`, rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    pub dir: PathBuf,
    pub name: &'static str,
    pub file_bytes_max: u64,
    pub files_max: usize,
}

impl LogFile {
    /// The log file `name` (`silt`, `demo`) of `config`'s data directory.
    pub fn of(config: &Config, name: &'static str) -> LogFile {
        LogFile {
            dir: config.data_dir.join("log"),
            name,
            file_bytes_max: config.log.file_bytes_max,
            files_max: config.log.files_max,
        }
    }

    /// The file being written; older ones have `.1`, `.2`, ... appended.
    pub fn path(&self) -> PathBuf {
        rotating::log_path(&self.dir, self.name, 0)
    }
}

/// Where one command's log goes, and at which filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSetup {
    /// The filter of stderr.
    pub stderr: String,
    /// The log file and its filter, for a command that keeps one.
    pub file: Option<(LogFile, String)>,
}

impl LogSetup {
    /// `filter`: `--log` (or `SILT_LOG`) when given; `to_stderr`: `--log-stderr`; `file`: the
    /// command's log file, if it keeps one.
    pub fn new(filter: Option<&str>, to_stderr: bool, file: Option<LogFile>) -> LogSetup {
        let log = filter.unwrap_or(FILTER_LOG).to_string();
        let stderr = if to_stderr || filter.is_some() {
            log.clone()
        } else {
            FILTER_TERMINAL.to_string()
        };
        LogSetup {
            stderr,
            file: file.map(|f| (f, log)),
        }
    }
}

/// A `--log` value: a filter as `RUST_LOG` writes them. A bad one is a usage error (exit 2).
pub fn parse_filter(text: &str) -> Result<String, String> {
    EnvFilter::try_new(text).map(|_| text.to_string()).map_err(|e| {
        format!("{e} (a log filter is a level or target=level list, e.g. info or warn,silt_jobs=debug)")
    })
}

/// Installs the process's one subscriber as `setup` says. Fails, naming the file, when the log
/// file cannot be opened.
pub fn init(setup: &LogSetup) -> Result<()> {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(crate::output::stderr_colour())
        .with_filter(filter(&setup.stderr)?);
    let file = match &setup.file {
        Some((file, log)) => {
            let writer = rotating::RotatingFile::open(
                &file.dir,
                file.name,
                file.file_bytes_max,
                file.files_max,
            )
            .with_context(|| format!("cannot open the log file {}", file.path().display()))?;
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(Mutex::new(writer))
                .with_ansi(false)
                .with_filter(filter(log)?);
            Some(layer)
        }
        None => None,
    };
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init()
        .context("the log was set up twice (a bug)")
}

fn filter(text: &str) -> Result<EnvFilter> {
    EnvFilter::try_new(text).with_context(|| format!("invalid log filter {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The terminal shows warnings unless asked; the file always holds the log filter.
    #[test]
    fn stderr_gets_the_log_only_when_asked() {
        let file = LogFile {
            dir: "d/log".into(),
            name: "silt",
            file_bytes_max: 10,
            files_max: 2,
        };
        for (filter, to_stderr, stderr, file_filter) in [
            (None, false, FILTER_TERMINAL, FILTER_LOG),
            (None, true, FILTER_LOG, FILTER_LOG),
            (Some("debug"), false, "debug", "debug"),
            (Some("warn"), true, "warn", "warn"),
        ] {
            let setup = LogSetup::new(filter, to_stderr, Some(file.clone()));
            assert_eq!(
                (setup.stderr.as_str(), setup.file.map(|(_, f)| f)),
                (stderr, Some(file_filter.to_string())),
                "--log {filter:?}, --log-stderr {to_stderr}"
            );
        }
        assert_eq!(LogSetup::new(None, false, None).file, None);
    }

    #[test]
    fn bad_filters_are_refused_with_an_example() {
        assert!(parse_filter("info,silt_jobs=debug").is_ok());
        let e = parse_filter("silt_jobs=loud").unwrap_err();
        assert!(e.contains("e.g. info"), "{e}");
    }
}
