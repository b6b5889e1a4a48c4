//! An in-process hot store for tests: a [`Server`] on an ephemeral loopback port over a scratch
//! directory the test owns, and fluss-rs connections to it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fluss::client::FlussConnection;
use fluss::config::Config;
use fluss::metadata::{TableDescriptor, TablePath};
use silt_hotstore::{Server, ServerConfig, ServerHandle};
use tempfile::TempDir;

/// Upper bound on every poll loop of the hot store tests.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A hot store on `127.0.0.1:0` keeping its data under `data_dir`, otherwise with defaults.
pub async fn start(data_dir: &Path) -> Result<ServerHandle> {
    start_with(data_dir, |_| {}).await
}

/// As [`start`], with `configure` changing the configuration before the server starts. Like
/// `silt up`'s, the hot store refuses a lake-enabled table whose columns the lake cannot store.
pub async fn start_with(
    data_dir: &Path,
    configure: impl FnOnce(&mut ServerConfig),
) -> Result<ServerHandle> {
    let mut config = ServerConfig {
        bind_addr: "127.0.0.1:0".parse()?,
        data_dir: data_dir.to_path_buf(),
        lake_schema_check: Some(lake_schema_check()),
        ..ServerConfig::default()
    };
    configure(&mut config);
    Server::start(config).await.context("start hotstore")
}

/// The check `silt up` installs (`silt_jobs::up::lake_schema_check`): Delta's mapping of a row
/// type, the one tiering uses. Built here from silt-connectors, so that the hot store tests need
/// no silt-jobs.
fn lake_schema_check() -> silt_hotstore::LakeSchemaCheck {
    let format = silt_connectors::formats::default_format();
    silt_hotstore::LakeSchemaCheck::new(move |row_type| format.check_row_type(row_type))
}

/// A hot store over a scratch directory of its own and a fluss-rs connection to it: where most
/// hot store tests start. Keep the directory as long as the server runs; a test restarts the
/// server over the same data with [`start`] on it.
pub async fn scratch() -> Result<(TempDir, ServerHandle, FlussConnection)> {
    scratch_with(|_| {}).await
}

/// As [`scratch`], with `configure` changing the configuration before the server starts.
pub async fn scratch_with(
    configure: impl FnOnce(&mut ServerConfig),
) -> Result<(TempDir, ServerHandle, FlussConnection)> {
    let dir = tempfile::tempdir().context("create a scratch directory")?;
    let server = start_with(dir.path(), configure).await?;
    let connection = connect(&server).await?;
    Ok((dir, server, connection))
}

/// A hot store over `<dir>/hotstore` whose tables default to `default_buckets` buckets, shared
/// so that [`crate::tiering::service`] over the same `dir` can update its lake registry.
pub async fn start_for_tiering(dir: &Path, default_buckets: i32) -> Result<Arc<ServerHandle>> {
    let server = start_with(&dir.join("hotstore"), |c| {
        c.default_bucket_count = default_buckets
    })
    .await?;
    Ok(Arc::new(server))
}

/// A hot store over `data_dir` holding the table `path` (in a database that exists: `fluss`
/// always does), and a connection to it.
pub async fn start_with_table(
    data_dir: &Path,
    path: &TablePath,
    descriptor: &TableDescriptor,
) -> Result<(ServerHandle, FlussConnection)> {
    let server = start(data_dir).await?;
    let connection = connect(&server).await?;
    create_table(&connection, path, descriptor).await?;
    Ok((server, connection))
}

/// As [`scratch`], holding the table `path` as [`start_with_table`] makes it.
pub async fn scratch_with_table(
    path: &TablePath,
    descriptor: &TableDescriptor,
) -> Result<(TempDir, ServerHandle, FlussConnection)> {
    let (dir, server, connection) = scratch().await?;
    create_table(&connection, path, descriptor).await?;
    Ok((dir, server, connection))
}

async fn create_table(
    connection: &FlussConnection,
    path: &TablePath,
    descriptor: &TableDescriptor,
) -> Result<()> {
    connection
        .get_admin()?
        .create_table(path, descriptor, false)
        .await
        .with_context(|| format!("create {path}"))
}

/// A fluss-rs connection to `server` with the client's default configuration.
pub async fn connect(server: &ServerHandle) -> Result<FlussConnection> {
    connect_to(&server.local_addr().to_string()).await
}

/// A fluss-rs connection to `bootstrap` with the client's default configuration (unlike
/// `silt_connectors::fluss::connect`, which sets the product's poll sizes).
pub async fn connect_to(bootstrap: &str) -> Result<FlussConnection> {
    let mut config = Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    FlussConnection::new(config)
        .await
        .with_context(|| format!("connect fluss-rs to {bootstrap}"))
}

/// The Fluss error code of a client error, if it is an API error.
pub fn api_code(error: &fluss::error::Error) -> Option<i32> {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => Some(api_error.code),
        _ => None,
    }
}

/// True once [`DEADLINE`] has passed since `start`.
pub fn deadline_passed(start: Instant) -> bool {
    start.elapsed() > DEADLINE
}
