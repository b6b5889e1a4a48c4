//! Helpers for the hotstore tests: a server on an ephemeral port with its own scratch
//! directory, and a fluss-rs connection to it. Each test binary includes this with
//! `mod hotstore_support;`.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fluss::client::FlussConnection;
use fluss::config::Config;
use silt_hotstore::{Server, ServerConfig, ServerHandle};

/// Upper bound on every poll loop of the hotstore tests.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub async fn start_server(data_dir: &Path) -> Result<ServerHandle> {
    start_with(data_dir, |_| {}).await
}

pub async fn start_with(
    data_dir: &Path,
    configure: impl FnOnce(&mut ServerConfig),
) -> Result<ServerHandle> {
    let mut config = ServerConfig {
        bind_addr: "127.0.0.1:0".parse()?,
        data_dir: data_dir.to_path_buf(),
        ..ServerConfig::default()
    };
    configure(&mut config);
    Server::start(config).await.context("start hotstore")
}

pub async fn connect(server: &ServerHandle) -> Result<FlussConnection> {
    let mut config = Config::default();
    config.bootstrap_servers = server.local_addr().to_string();
    FlussConnection::new(config)
        .await
        .context("connect fluss-rs to hotstore")
}

/// The Fluss error code of a client error, if it is an API error.
pub fn api_code(error: &fluss::error::Error) -> Option<i32> {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => Some(api_error.code),
        _ => None,
    }
}

pub fn deadline_passed(start: Instant) -> bool {
    start.elapsed() > DEADLINE
}
