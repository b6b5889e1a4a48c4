//! Tiering over an in-process hot store: a [`TieringService`] whose lake is `<dir>/lake`,
//! checkpoints are under `<dir>/checkpoints`, and whose commits update the hot store's
//! lake-offset registry, as `silt up` wires them; a wait until the lake covers the hot store,
//! bounded by a timeout; and `silt verify` of a table, which must answer MATCH.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::wait::{self, Look};
use anyhow::Result;
use silt_hotstore::ServerHandle;
use silt_jobs::tiering::{RegistryUpdate, TableTieringStatus, TieringConfig, TieringService};

/// The hot store's lake-offset registry as a tiering commit hook.
pub fn registry(server: &Arc<ServerHandle>) -> RegistryUpdate {
    silt_jobs::tiering::hotstore_registry(server.clone())
}

/// The configuration of [`service`]: lake `<dir>/lake`, checkpoints `<dir>/checkpoints`, a
/// poll every 200 ms.
pub fn config(dir: &Path, server: &ServerHandle) -> TieringConfig {
    let mut config = TieringConfig::new(
        server.local_addr().to_string(),
        dir.join("lake").to_string_lossy().to_string(),
        dir.join("checkpoints"),
    );
    config.poll_interval = Duration::from_millis(200);
    config
}

/// A tiering service over `server` with [`config`] and the [`registry`] hook.
pub fn service(dir: &Path, server: &Arc<ServerHandle>) -> TieringService {
    TieringService::new(config(dir, server), Some(registry(server)))
}

/// A tiering service as [`service`] makes it, polled until `tables` tables are caught up (as
/// [`wait_caught_up`] with [`Driver::Wait`]); fails after `timeout` with the status it last saw.
pub async fn service_caught_up(
    dir: &Path,
    server: &Arc<ServerHandle>,
    tables: usize,
    timeout: Duration,
) -> Result<TieringService> {
    let tiering = service(dir, server);
    wait_caught_up(&tiering, Driver::Wait, tables, timeout).await?;
    Ok(tiering)
}

/// Who runs the tiering service's polls while [`wait_caught_up`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The wait polls the service itself (`poll_once`) before each look.
    Wait,
    /// The service runs on its own (`run`); the wait only reads its status.
    Service,
}

/// True once `tables` tables are tiered, something was written, and every table's lake covers
/// its high watermarks.
pub fn caught_up(status: &[TableTieringStatus], tables: usize) -> bool {
    let hot: i64 = status
        .iter()
        .flat_map(|s| s.buckets.values().map(|(h, _)| *h))
        .sum();
    status.len() == tables && hot > 0 && status.iter().all(|s| s.lag_offsets == 0)
}

/// Waits until [`caught_up`]; fails after `timeout` with the status it last saw.
pub async fn wait_caught_up(
    tiering: &TieringService,
    driver: Driver,
    tables: usize,
    timeout: Duration,
) -> Result<()> {
    let every = Duration::from_millis(200);
    wait::until("tiering to catch up", timeout, every, move || async move {
        if driver == Driver::Wait {
            tiering.poll_once().await?;
        }
        let status = tiering.status().await?;
        Ok(if caught_up(&status, tables) {
            Look::Done(())
        } else {
            Look::NotYet(format!("{status:#?}"))
        })
    })
    .await
}

/// `silt verify` of `database.table` against the lake under `lake_root`: fails with the
/// report unless it answers MATCH (within 60 s).
pub async fn verify_match(
    bootstrap: &str,
    lake_root: &Path,
    database: &str,
    table: &str,
) -> Result<()> {
    use silt_jobs::verify::{Verdict, VerifyOptions, verify_table};
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let mut options = VerifyOptions::new(bootstrap, lake_root.to_string_lossy().to_string());
    options.deadline = Duration::from_secs(60);
    let report = verify_table(&connection, database, table, &options).await?;
    anyhow::ensure!(
        report.verdict == Verdict::Match,
        "verify {database}.{table}:\n{}",
        report.render()
    );
    Ok(())
}
