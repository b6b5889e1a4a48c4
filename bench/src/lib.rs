//! silt's measurements, kept out of the product crate: the tiering, hot store, query and soak
//! benches and the seeded fault trials, with one way to report them ([`report`]).
//!
//! Entry point: [`cli::run`], behind the `silt-bench` binary that `silt bench ...` runs. This
//! crate drives the product (silt-jobs: `silt up`, tiering, the query service, verify), so it
//! depends on silt-jobs and silt-jobs never on it. The `silt-bench` binary is silt plus these
//! commands: the trials and the soak start `silt up` from it ([`silt_program`]), so the code
//! under test is exactly the code the driver links, fault hooks included when the
//! `fault-injection` feature is on (test builds; the trials need it).

use std::path::PathBuf;

use anyhow::{Context, Result};

pub mod cli;
pub mod data;
pub mod hotstore;
pub mod pk;
mod procfs;
pub mod query;
pub mod report;
pub mod soak;
pub mod tiering;
pub mod trials;

/// The first argument that makes the `silt-bench` binary run silt's own command line:
/// `silt-bench silt up ...` is `silt up ...`.
pub const SILT_COMMAND: &str = "silt";

/// The program and first argument that run silt's command line: this binary and
/// [`SILT_COMMAND`].
pub fn silt_program() -> Result<(PathBuf, &'static str)> {
    let exe = std::env::current_exe().context("locating the silt-bench binary")?;
    Ok((exe, SILT_COMMAND))
}

/// An in-process hot store on an ephemeral loopback port over `<dir>/hotstore`, with the
/// server's defaults, for benches that talk to it through the Fluss client.
pub async fn in_process_hotstore(
    dir: &std::path::Path,
) -> Result<std::sync::Arc<silt_hotstore::ServerHandle>> {
    let server = silt_hotstore::Server::start(silt_hotstore::ServerConfig {
        bind_addr: "127.0.0.1:0".parse()?,
        data_dir: dir.join("hotstore"),
        ..silt_hotstore::ServerConfig::default()
    })
    .await?;
    Ok(std::sync::Arc::new(server))
}
