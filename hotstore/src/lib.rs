//! hotstore: silt's hot tier, an embedded changelog store that speaks the Apache Fluss wire
//! protocol, so the official Fluss clients (fluss-rs, pyfluss, Java) work against it unmodified.
//!
//! Entry point: [`Server::start`] with a [`ServerConfig`] returns a [`ServerHandle`]
//! (`local_addr`, `shutdown`, and `set_lake_snapshot` for the tiering committer). One process
//! plays the Fluss coordinator and tablet server: databases and tables live in a JSON catalog,
//! each bucket has a log tablet and, for a primary-key table, a kv tablet fed from the
//! changelog the server writes. With [`SaslConfig`] users set,
//! connections must authenticate with SASL/PLAIN (as Fluss clients do) before anything but
//! ApiVersions.
//!
//! Layers, each importing only those below it:
//! - `server` (accept loop, framing, per-connection auth) and `handlers/` (dispatch by API
//!   key; `ddl`, `log`, `kv` decode requests and encode answers) over
//! - `service` (the state handlers read: config, `catalog`, tablets, `lake_registry`) and its
//!   scheduled tasks (`retention` of segments, `kv_snapshots` of primary-key buckets,
//!   `auto_partitions` of partitions), over
//! - `tablets/` (a table's buckets; the primary-key write path and its write-ahead rule in
//!   `changelog`, kv recovery from the log in `recovery`), over
//! - [`storage`] (log and kv tablets: segments, durability, writer idempotence), and
//! - [`codec`] (the one Fluss log batch codec) and `protocol` (frames and messages) beneath all.
//!
//! Boundary: hotstore is a storage server. It depends on neither `silt-engine` nor the
//! connectors; it uses the `fluss-rs` crate only for its row, record and table-JSON codecs,
//! and `jiff` only for auto-partitioning's calendars and time zones.

mod auth;
mod auto_partitions;
mod catalog;
pub mod codec;
mod config;
#[cfg(test)]
mod fuzz_tests;
mod handlers;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod idempotence_tests;
mod kv_scanners;
mod kv_snapshots;
mod lake_registry;
#[cfg(test)]
mod partition_lifecycle_tests;
/// The wire protocol: framing and silt's message definitions. Public only with the
/// `test-support` feature, for tests that speak raw Fluss to silt and to a real Fluss server.
#[cfg(not(feature = "test-support"))]
mod protocol;
#[cfg(feature = "test-support")]
pub mod protocol;
mod retention;
mod server;
mod service;
pub mod storage;
#[cfg(test)]
mod storage_failure_tests;
mod tablets;
#[cfg(test)]
mod test_server;

pub use auth::{SaslConfig, SaslUser};
pub use auto_partitions::AutoPartitionRun;
pub use kv_snapshots::BucketKvSnapshot;
pub use lake_registry::LakeSnapshot;
pub use retention::{BucketRetention, LOG_TTL, LOG_TTL_DEFAULT, parse_ttl};
pub use server::{LakeSchemaCheck, Server, ServerConfig, ServerHandle};
pub use storage::kv_tablet::KvMemory;

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
