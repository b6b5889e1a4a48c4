//! The configuration translated, in this one place (above every service, so that the
//! configuration module itself depends on none of them), into the settings of each service `silt
//! up` runs: the hot store, tiering, the job service, queries and Flight SQL. The services take
//! their own settings types and never read [`Config`] themselves.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use silt_connectors::lake::LakeCatalogConfig;
use silt_engine::{ChannelConfig, RestartStrategy};
use silt_hotstore::{LakeSchemaCheck, ServerConfig};
use std::sync::Arc;
use tracing::warn;

use crate::config::Config;
use crate::job::service::JobServiceConfig;
use crate::query::QueryConfig;
use crate::query::flight::FlightConfig;
use crate::tiering::TieringConfig;

/// What the hot store asks before it accepts a table to tier: whether the lake format can
/// store its columns (CreateTable of a table the lake cannot store is refused, naming the
/// column, instead of its tiering failing later).
pub fn lake_schema_check(
    format: Arc<dyn silt_connectors::lake_format::LakeFormat>,
) -> LakeSchemaCheck {
    LakeSchemaCheck::new(move |row_type| format.check_row_type(row_type))
}

impl Config {
    /// The hot store's settings (`hotstore:`), its lake schema check from `lake.format`.
    pub fn hotstore(&self) -> Result<ServerConfig> {
        let bind_addr: SocketAddr = self.hotstore.listen.parse().with_context(|| {
            format!(
                "hotstore.listen {:?} is not an address like 127.0.0.1:9123",
                self.hotstore.listen
            )
        })?;
        let mut server = ServerConfig {
            bind_addr,
            data_dir: self.data_dir.join("hotstore"),
            default_bucket_count: self.hotstore.buckets_default as i32,
            frame_bytes_max: self.hotstore.frame_bytes_max,
            connections_max: self.hotstore.connections_max,
            requests_in_flight_max: self.hotstore.requests_in_flight_max,
            request_bytes_in_flight_max: self.hotstore.request_bytes_in_flight_max,
            produce_decode_check: self.hotstore.produce_decode_check,
            log_flush_interval_ms: self.hotstore.flush_interval_ms,
            bucket_count_max: self.hotstore.bucket_count_max,
            buckets_max: self.hotstore.buckets_max,
            fetch_wait_max_ms: self.hotstore.fetch_wait_max_ms,
            fetch_response_bytes_max: self.hotstore.fetch_response_bytes_max,
            lookup_keys_max: self.hotstore.lookup_keys_max,
            limit_scan_rows_max: self.hotstore.limit_scan_rows_max,
            prefix_lookup_rows_max: self.hotstore.prefix_lookup_rows_max,
            partitions_per_table_max: self.hotstore.partitions_per_table_max,
            auto_partition_check_interval_ms: self.hotstore.auto_partition_check_interval_ms,
            kv_snapshot_interval_ms: self.hotstore.kv_snapshot_interval_ms,
            kv_snapshots_retained: self.hotstore.kv_snapshots_retained,
            kv_snapshot_concurrency_max: self.hotstore.kv_snapshot_concurrency_max,
            kv_snapshot_leased_max: self.hotstore.kv_snapshot_leased_max,
            kv_snapshot_lease_duration_max_ms: self.hotstore.kv_snapshot_lease_duration_max_ms,
            frame_read_timeout_ms: self.hotstore.frame_read_timeout_ms,
            authentication_timeout_ms: self.hotstore.authentication_timeout_ms,
            shutdown_grace_ms: self.hotstore.shutdown_grace_ms,
            // Not settings: where clients are told to connect (the bound address unless a proxy
            // is configured), and the bounds of the storage engines that conf/silt.yaml does not
            // expose (index spacing, writers remembered, kv workers and journal).
            ..ServerConfig::default()
        };
        server.lake_schema_check = Some(lake_schema_check(self.lake_format()));
        server.log.segment_bytes_max = self.hotstore.segment_bytes_max;
        server.kv.memtable_bytes_max = self.hotstore.kv_memtable_bytes_max;
        server.kv.cache_bytes = self.hotstore.kv_cache_bytes;
        server.log_ttl = u64::try_from(self.hotstore.log_ttl_ms)
            .ok()
            .map(Duration::from_millis);
        server.retention_check_interval_ms = self.hotstore.retention_check_interval_ms;
        server.retention_lake_lag_ms = self.query.deadline_max_ms;
        server.log.fsync = self.fsync_policy()?;
        server.sasl = self.sasl_config()?;
        if !bind_addr.ip().is_loopback() {
            if self.hotstore.sasl.enabled {
                warn!(%bind_addr, "hotstore listens beyond loopback (SASL/PLAIN on; the Fluss port has no TLS, so passwords cross the network in clear)");
            } else {
                warn!(%bind_addr, "hotstore listens beyond loopback without authentication: anyone who can reach this address can read and write tables (set hotstore.sasl.enabled)");
            }
        }
        Ok(server)
    }

    fn fsync_policy(&self) -> Result<silt_hotstore::storage::FsyncPolicy> {
        use silt_hotstore::storage::FsyncPolicy;
        Ok(match self.hotstore.fsync.as_str() {
            "always" => FsyncPolicy::Always,
            "group" => FsyncPolicy::Group {
                window_ms: self.hotstore.group_commit_window_ms,
            },
            "never" => FsyncPolicy::Never,
            other => bail!("hotstore.fsync is {other:?}; use always, group or never"),
        })
    }

    /// The hot store's SASL/PLAIN users, when `hotstore.sasl.enabled`.
    fn sasl_config(&self) -> Result<Option<silt_hotstore::SaslConfig>> {
        let sasl = &self.hotstore.sasl;
        if !sasl.enabled {
            return Ok(None);
        }
        if sasl.users.is_empty() {
            bail!(
                "hotstore.sasl.enabled is true but hotstore.sasl.users is empty; add [{{username, password}}]"
            );
        }
        let users = sasl.users.iter().map(|u| silt_hotstore::SaslUser {
            username: u.username.clone(),
            password: u.password.clone(),
        });
        let sasl = silt_hotstore::SaslConfig {
            users: users.collect(),
        };
        sasl.validate()
            .map_err(|e| anyhow!("hotstore.sasl.users: {e}"))?;
        Ok(Some(sasl))
    }

    /// The tiering service's settings, reading the hot store at `bootstrap`.
    pub fn tiering(&self, bootstrap: &str) -> TieringConfig {
        let mut tiering = TieringConfig::new(
            bootstrap,
            self.lake_root(),
            self.data_dir.join("checkpoints").join("tiering"),
        );
        tiering.storage_options = self.lake_storage_options();
        tiering.format = self.lake_format();
        tiering.lake = self.lake_settings();
        tiering.checkpoint_timeout = Duration::from_millis(self.engine.checkpoint_timeout_ms);
        tiering.checkpoints_retained_max = self.engine.checkpoints_retained_max;
        tiering.channel = silt_engine::ChannelConfig {
            capacity_messages: self.engine.channel_capacity_messages,
            capacity_bytes: self.engine.channel_capacity_bytes,
        };
        tiering.credentials = self.fluss_credentials();
        tiering.lake_state_root = Some(self.data_dir.join("key-index").join("tiering"));
        tiering
    }

    /// The job service's settings, its jobs reading the hot store at `bootstrap`.
    pub fn jobs(&self, bootstrap: &str) -> JobServiceConfig {
        JobServiceConfig {
            bootstrap: bootstrap.to_string(),
            credentials: self.fluss_credentials(),
            data_dir: self.data_dir.clone(),
            lake_root: self.lake_root(),
            lake_storage_options: self.lake_storage_options(),
            checkpoint_interval_default: Duration::from_millis(
                self.engine.checkpoint_interval_ms.max(1),
            ),
            checkpoint_timeout: Duration::from_millis(self.engine.checkpoint_timeout_ms),
            checkpoints_retained_max: self.engine.checkpoints_retained_max,
            restart: RestartStrategy::FixedDelay {
                delay: Duration::from_millis(self.engine.restart_delay_ms),
                attempts_max: self.engine.restart_attempts_max,
            },
            channel: ChannelConfig {
                capacity_messages: self.engine.channel_capacity_messages,
                capacity_bytes: self.engine.channel_capacity_bytes,
            },
        }
    }

    /// The service as `silt up` runs it: the hotstore at `bootstrap`, the lake under the data
    /// directory, bounds from the `query` config section.
    pub fn query(&self, bootstrap: &str) -> QueryConfig {
        let mut catalog = LakeCatalogConfig::new(bootstrap, self.lake_root());
        catalog.format = self.lake_format();
        catalog.storage_options = self.lake_storage_options();
        catalog.tail_bytes_max = self.query.tail_bytes_max;
        catalog.kept_tails_bytes_max = self.query.kept_tails_bytes_max;
        catalog.credentials = self.fluss_credentials();
        let mut query = QueryConfig::new(catalog);
        query.wait_poll_interval = Duration::from_millis(self.query.wait_poll_interval_ms.max(1));
        query.deadline_max = Duration::from_millis(self.query.deadline_max_ms);
        query.result_bytes_max = self.query.result_bytes_max;
        query.memory_bytes_max = self.query.memory_bytes_max;
        query.concurrent_max = self.query.concurrent_max;
        query.waiting_max = self.query.waiting_max;
        query
    }

    /// Arrow Flight SQL's settings (`query.flight_*`, the REST token).
    pub fn flight(&self) -> FlightConfig {
        FlightConfig {
            listen: self.query.flight_listen.clone(),
            token: self.rest.token.clone(),
            deadline_default: Duration::from_millis(self.query.deadline_default_ms.max(1)),
            result_ttl: Duration::from_millis(self.query.flight_result_ttl_ms.max(1)),
            results_bytes_max: self.query.flight_results_bytes_max,
            calls_per_connection_max: 32,
        }
    }
}
