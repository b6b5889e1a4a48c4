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
//! Layers, top down, each importing only those below it (tests aside; ARCHITECTURE.md has the
//! same list):
//! 1. `server` (accept loop, frame and connection limits, SASL through `auth`), over
//! 2. `handlers/` (decode a request, call the layers below, encode the answer; `respond`
//!    dispatches by API key to `ddl`, `log`, `kv`, `prefix_lookup`, `limit_scan`, `scan_kv`,
//!    `kv_snapshots`, `table_stats`), over
//! 3. the background tasks, `Service` methods the server schedules and some handlers call:
//!    `retention` (hot retention of log segments), `kv_snapshots` (when kv snapshots are
//!    taken, how many are kept, leases), `auto_partitions` (partitions created and dropped on
//!    schedule), over
//! 4. `service` (the state handlers and tasks read: `config`, catalog, tablets, the lake-offset
//!    registry, writer ids, the ScanKv sessions of `kv_scanners`, and what the tasks keep
//!    between runs: `service/task_state`, `service/kv_snapshot_leases`), over
//! 5. `tablets/` (a table's buckets; the primary-key write path and its write-ahead rule in
//!    `changelog`, kv recovery from the log in `recovery`), `catalog/` (databases, tables and
//!    partitions in `catalog.json`; the table properties, `table.log.ttl` among them, in
//!    `properties`; merge engines; the auto-partition strategy) and `lake_registry` (the
//!    lake-offset registry), over
//! 6. [`storage`] (log and kv tablets: segments, durability, writer idempotence, kv snapshot
//!    files), over
//! 7. the leaves, which import nothing else of the crate: [`codec`] (the one Fluss log batch
//!    codec), `protocol` (frames, messages, API keys and error codes: the error codes are the
//!    domain's error vocabulary, in which the catalog and the tablets answer too) and `error`
//!    (the public [`Error`]).
//!
//! Boundary: hotstore is a storage server. It depends on neither `silt-engine` nor the
//! connectors; it uses the `fluss-rs` crate only for its row, record and table-JSON codecs,
//! and `jiff` only for auto-partitioning's calendars and time zones.

mod auth;
mod auto_partitions;
mod catalog;
pub mod codec;
mod config;
mod error;
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
pub use catalog::{LOG_TTL, LOG_TTL_DEFAULT, parse_ttl};
pub use error::{Error, Result};
pub use kv_snapshots::BucketKvSnapshot;
pub use lake_registry::LakeSnapshot;
pub use server::{LakeSchemaCheck, Server, ServerConfig, ServerHandle};
pub use service::{AutoPartitionRun, BucketRetention};
pub use storage::kv_tablet::KvMemory;
