//! The hotstore's configuration. `jobs/` maps silt's config file (`conf/silt.yaml`, where the
//! defaults of a running silt live) onto it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Configuration of the hotstore server. `jobs/` maps silt's config file onto it. Its
/// `Default` holds `conf/silt.yaml`'s values, so tests run with the product's limits; a test
/// in `jobs` (`up::tests`) fails when the two disagree.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port (see [`ServerHandle::local_addr`]).
    pub bind_addr: SocketAddr,
    /// Host advertised to clients in metadata; defaults to the bound IP (127.0.0.1 for 0.0.0.0).
    pub advertised_host: Option<String>,
    /// Port advertised to clients in metadata (a server behind a proxy or a port mapping);
    /// defaults to the bound port.
    pub advertised_port: Option<u16>,
    /// Directory holding the catalog and every table's tablets.
    pub data_dir: PathBuf,
    /// Bucket count of a table created without one.
    pub default_bucket_count: i32,
    /// Largest bucket count a table (each partition of a partitioned table) may have.
    pub bucket_count_max: i32,
    /// Buckets the server holds over every table and partition (`hotstore.buckets_max`).
    pub buckets_max: i64,
    /// Partitions one partitioned table may hold at once (Fluss's `max.partition.num`, whose
    /// default this is); CreatePartition beyond it answers PARTITION_MAX_NUM.
    pub partitions_per_table_max: usize,
    /// Largest request frame accepted; a larger one closes the connection.
    pub frame_bytes_max: usize,
    /// Connections served at once; further connections are closed on accept.
    pub connections_max: usize,
    /// Requests of one connection running at once; the reader waits beyond that.
    pub requests_in_flight_max: usize,
    /// Request bytes held by the whole server at once (frames read but not yet answered);
    /// readers wait beyond that. Raised to `frame_bytes_max` when lower, so one frame fits.
    pub request_bytes_in_flight_max: usize,
    /// Upper bound on a fetch's long-poll wait, whatever the client asks.
    pub fetch_wait_max_ms: u64,
    /// Upper bound on the record bytes of one fetch response.
    pub fetch_response_bytes_max: usize,
    /// Keys one lookup request may carry.
    pub lookup_keys_max: usize,
    /// Rows one limit scan may ask for (Flink pushes down at most 2048); its bytes are bounded
    /// by `fetch_response_bytes_max`.
    pub limit_scan_rows_max: usize,
    /// Rows one prefix lookup request may answer, over all its keys.
    pub prefix_lookup_rows_max: usize,
    /// Grace period for in-flight requests at shutdown.
    pub shutdown_grace_ms: u64,
    /// Log tablet settings (segment size, fsync policy, writers remembered).
    pub log: crate::storage::LogConfig,
    /// Kv store settings (cache, journal).
    pub kv: crate::storage::KvConfig,
    /// Under `fsync: never`, how often every log is flushed; the high watermark (what readers
    /// and tiering see) advances only at flushes.
    pub log_flush_interval_ms: u64,
    /// SASL/PLAIN users; `None` serves every connection without authentication.
    pub sasl: Option<crate::auth::SaslConfig>,
    /// With SASL on, a connection that has not authenticated within this time is closed.
    pub authentication_timeout_ms: u64,
    /// Once a frame's length prefix arrived, its body must arrive within this time, else the
    /// connection is closed (a peer cannot hold a frame's budget by stalling).
    pub frame_read_timeout_ms: u64,
    /// Decode and validate every value of a produced Arrow batch, not only its metadata.
    /// Catches corrupt values behind a valid CRC at the cost of decompressing every batch.
    pub produce_decode_check: bool,
    /// Time to live of a table's log when it sets no `table.log.ttl` (`None`: kept forever).
    /// Lake-enabled tables keep what the lake has not covered whatever the TTL (see
    /// `retention`).
    pub log_ttl: Option<std::time::Duration>,
    /// How often retention runs.
    pub retention_check_interval_ms: u64,
    /// Retention cuts a lake-enabled table only below the lake offsets it saw at least this
    /// long ago, so a reader that pinned a lake version within it still finds its hot tail
    /// (`silt up` sets the longest query deadline).
    pub retention_lake_lag_ms: u64,
    /// How often every primary-key bucket whose kv state changed gets a kv snapshot (Fluss's
    /// `kv.snapshot.interval`, whose default this is). Hot retention takes one before it cuts a
    /// primary-key changelog, whatever the interval (see `kv_snapshots`).
    pub kv_snapshot_interval_ms: u64,
    /// Kv snapshots each bucket keeps besides those a lease holds (Fluss's
    /// `kv.snapshot.num-retained`, whose default this is); at least 1.
    pub kv_snapshots_retained: usize,
    /// Kv snapshots written at once, over the server.
    pub kv_snapshot_concurrency_max: usize,
    /// Bucket snapshots the kv snapshot leases hold at once, over every lease (an empty lease
    /// counts as one); past it a snapshot is answered unavailable.
    pub kv_snapshot_leased_max: usize,
    /// Longest kv snapshot lease; a client asking longer gets this (Flink asks for 1 day).
    pub kv_snapshot_lease_duration_max_ms: u64,
    /// Sizes of a kv snapshot's files: RocksDB's defaults (64 MiB tables, 4 KiB blocks).
    pub kv_snapshot_files: crate::storage::rocksdb_snapshot::WriterConfig,
    /// How often auto-partitioned tables get their partitions pre-created and their expired
    /// ones dropped (Fluss's `auto-partition.check.interval`, whose default this is). A new
    /// table gets its pre-created partitions at CreateTable.
    pub auto_partition_check_interval_ms: u64,
    /// Checks the schema of a table that will be tiered, at CreateTable of a lake-enabled
    /// table and at an AlterTable turning `table.datalake.enabled` on; a schema it refuses is
    /// refused with its message. `None` accepts every schema (a hot store without a lake).
    pub lake_schema_check: Option<LakeSchemaCheck>,
}

/// Why the lake cannot store a table of this row type, if it cannot. The hot store knows
/// nothing of the lake's format: `silt up` gives it the Delta lake's check.
#[derive(Clone)]
pub struct LakeSchemaCheck(
    pub Arc<dyn Fn(&fluss::metadata::RowType) -> Result<(), String> + Send + Sync>,
);

impl LakeSchemaCheck {
    pub fn new(
        check: impl Fn(&fluss::metadata::RowType) -> Result<(), String> + Send + Sync + 'static,
    ) -> LakeSchemaCheck {
        LakeSchemaCheck(Arc::new(check))
    }

    pub fn check(&self, row_type: &fluss::metadata::RowType) -> Result<(), String> {
        (self.0)(row_type)
    }
}

impl std::fmt::Debug for LakeSchemaCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LakeSchemaCheck")
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind_addr: SocketAddr::from(([127, 0, 0, 1], 9123)),
            advertised_host: None,
            advertised_port: None,
            data_dir: PathBuf::from("silt-data/hotstore"),
            default_bucket_count: 1,
            bucket_count_max: 1024,
            buckets_max: 10_000,
            partitions_per_table_max: 1000,
            frame_bytes_max: 100 * 1024 * 1024,
            connections_max: 1024,
            requests_in_flight_max: 32,
            request_bytes_in_flight_max: 256 * 1024 * 1024,
            fetch_wait_max_ms: 30_000,
            fetch_response_bytes_max: 32 * 1024 * 1024,
            lookup_keys_max: 100_000,
            limit_scan_rows_max: 100_000,
            prefix_lookup_rows_max: 100_000,
            shutdown_grace_ms: 5_000,
            log: crate::storage::LogConfig::default(),
            kv: crate::storage::KvConfig::default(),
            log_flush_interval_ms: 1_000,
            sasl: None,
            authentication_timeout_ms: 10_000,
            frame_read_timeout_ms: 60_000,
            produce_decode_check: false,
            log_ttl: Some(crate::catalog::LOG_TTL_DEFAULT),
            retention_check_interval_ms: 300_000,
            retention_lake_lag_ms: 600_000,
            auto_partition_check_interval_ms: 600_000,
            kv_snapshot_interval_ms: 600_000,
            kv_snapshots_retained: 2,
            kv_snapshot_concurrency_max: 1,
            kv_snapshot_leased_max: 100_000,
            kv_snapshot_lease_duration_max_ms: 7 * 24 * 3600 * 1000,
            kv_snapshot_files: crate::storage::rocksdb_snapshot::WriterConfig::default(),
            lake_schema_check: None,
        }
    }
}
