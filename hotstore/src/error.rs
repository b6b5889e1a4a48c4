//! The hot store's public error type: what starting, configuring and recording lake snapshots
//! can fail with. A leaf: it imports nothing of the crate.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors of the hotstore's public API (starting, configuring, recording lake snapshots).
/// Protocol-level failures are answered to clients as Fluss error codes instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot listen on {addr}: {source} (is another server using the port? choose another hotstore address)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot access {path}: {source} (check the data directory exists and is writable)")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "catalog file {path} is corrupt: {reason} (restore it or start with an empty data directory)"
    )]
    CatalogCorrupt { path: PathBuf, reason: String },
    #[error("invalid hotstore config: {message}")]
    Config { message: String },
    #[error("{message}")]
    UnknownTable { message: String },
    #[error("storage error: {message}")]
    Storage { message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
