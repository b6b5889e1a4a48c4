//! The command line of `silt bench` (the `silt-bench` binary). Exit codes as `silt`'s: 0
//! success, 1 failure (for the trials: a row lost or duplicated, or a table failed verify), 2
//! usage error. Each bench's flags are defined once, on its options struct.
//!
//! `silt-bench silt <silt's arguments>` runs silt's own command line from this binary: the
//! trials and the soak start `silt up` that way.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use silt_jobs::cli::GlobalArgs;
use silt_jobs::output::Format;

use crate::hotstore::HotstoreArgs;
use crate::pk::PkBenchOptions;
use crate::query::QueryBenchOptions;
use crate::soak::SoakOptions;
use crate::tiering::TieringBenchOptions;
use crate::trials::TrialsOptions;

#[derive(Debug, Parser)]
#[command(
    name = "silt bench",
    bin_name = "silt bench",
    version = silt_jobs::build_info::VERSION,
    about = "Measure silt: print figures and ratios taken in one run.",
    // `silt bench` passes silt's global flags first; the same flag given after the bench's
    // name wins.
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    /// text (tables for people, as the README's benchmark section shows them) or json (stdout
    /// holds only the tables, one JSON object per line: `bench`, `table`, `columns`, `rows`,
    /// `notes`; every other line goes to stderr).
    #[arg(long, global = true, value_enum, default_value_t)]
    format: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tiering throughput against the Parquet ceiling, and freshness under steady load.
    Tiering(TieringBenchOptions),
    /// silt's hotstore against a real Apache Fluss cluster through fluss-rs: produce, fetch,
    /// upsert and lookup figures and the ratios silt/Fluss, in one run.
    Hotstore(HotstoreArgs),
    /// Seeded fault trials: concurrent random workloads against `silt up` (restarted on the same
    /// port) with SIGKILLs, aborts between a durable write and its acknowledgement, power
    /// losses, a second tiering job, a failing lake store and a full disk, then catch-up and
    /// verify of every table (exit 1 when an acknowledged row was lost, a row duplicated or a
    /// table failed verify). Needs a build with `--features fault-injection`.
    Trials(TrialsOptions),
    /// A steady load on a log and a primary-key table through `silt up`, sampled every
    /// interval (RSS, disk, lake files, tiering lag, query latency), with slopes per hour.
    Soak(SoakOptions),
    /// Query service: a $lake scan against raw DataFusion on the same files, deadline
    /// precision, and the real-time view of a primary-key table with a hot tail.
    Query(QueryBenchOptions),
    /// Primary-key tiering as the table grows: commit time of a fixed number of changed keys,
    /// the key index's build time, bytes per key on disk and memory, at each table size.
    Pk(PkBenchOptions),
}

impl Command {
    /// The bench's name, as typed (the `bench` field of its JSON tables).
    fn name(&self) -> &'static str {
        match self {
            Command::Tiering(_) => "tiering",
            Command::Hotstore(_) => "hotstore",
            Command::Trials(_) => "trials",
            Command::Soak(_) => "soak",
            Command::Query(_) => "query",
            Command::Pk(_) => "pk",
        }
    }
}

/// Runs `silt-bench` with the process's arguments.
pub fn run() -> Result<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == crate::SILT_COMMAND) {
        return silt_jobs::cli::run_from(args.into_iter().skip(1));
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return Ok(silt_jobs::cli::usage(&e)),
    };
    crate::report::set_output(cli.format, cli.command.name());
    let (config, runtime) = silt_jobs::cli::start(&cli.global)?;
    runtime.block_on(async move {
        match cli.command {
            Command::Tiering(options) => crate::tiering::tiering(options).await?,
            Command::Hotstore(args) => crate::hotstore::hotstore(&config, args.into()).await?,
            Command::Trials(options) => {
                return Ok(ExitCode::from(crate::trials::run(options).await?));
            }
            Command::Soak(options) => crate::soak::soak(options).await?,
            Command::Query(options) => crate::query::query(options).await?,
            Command::Pk(options) => crate::pk::pk(options).await?,
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn later_flags_override_the_ones_silt_passes() {
        let cli = Cli::try_parse_from([
            "silt bench",
            "--log",
            "warn",
            "trials",
            "--seeds",
            "2",
            "--log",
            "off",
        ])
        .unwrap();
        assert_eq!(cli.global.log.as_deref(), Some("off"));
        let Command::Trials(options) = cli.command else {
            panic!("not trials: {:?}", cli.command);
        };
        assert_eq!((options.seeds, options.first_seed), (2, 1));
    }

    #[test]
    fn format_is_taken_before_or_after_the_bench() {
        for args in [
            &["silt bench", "--format", "json", "query"][..],
            &["silt bench", "query", "--format", "json"][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.format, Format::Json, "{args:?}");
            assert_eq!(cli.command.name(), "query");
        }
        let cli = Cli::try_parse_from(["silt bench", "query"]).unwrap();
        assert_eq!(cli.format, Format::Text);
    }
}
