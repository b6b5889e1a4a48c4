//! What a tiering service is configured with: the endpoint, the lake (root, format,
//! settings), checkpoints, parallelism, restarts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use silt_connectors::fluss::FlussCredentials;
use silt_connectors::lake_format::{LakeFormat, LakeSettings};
use silt_engine::{ChannelConfig, RestartStrategy};

/// A tiering job's source and writer subtasks by default: one per bucket up to 4. Buckets of
/// unequal size then keep both cores of a small machine busy until the last one is read; with
/// two subtasks for four buckets, the subtask with the larger pair worked on alone at the end.
/// Measured with `silt bench tiering --rows 2000000` on 2 idle cores, alternating: 4 subtasks
/// tiered at 0.84-0.91 of the Parquet ceiling in six runs, 2 at 0.47-0.94. A checkpoint taken
/// at another parallelism restores: the source and writer states are split by bucket.
pub const TIERING_PARALLELISM_DEFAULT: u32 = 4;

#[derive(Debug, Clone)]
pub struct TieringConfig {
    /// The Fluss endpoint to read (silt's hotstore, or a Fluss cluster).
    pub bootstrap_servers: String,
    /// Lake tables go under `<lake_root>/<database>/<table>`: a local directory or a URL.
    pub lake_root: String,
    pub storage_options: HashMap<String, String>,
    pub checkpoint_root: PathBuf,
    pub poll_interval: Duration,
    /// Checkpoint interval of tables without `table.datalake.freshness`.
    pub freshness_default: Duration,
    /// Subtasks of a tiering job's source and of its lake writer, each at most the table's
    /// bucket count ([`TIERING_PARALLELISM_DEFAULT`] by default).
    pub source_parallelism_max: u32,
    pub writer_parallelism: u32,
    pub checkpoint_timeout: Duration,
    pub checkpoints_retained_max: usize,
    pub restart: RestartStrategy,
    pub channel: ChannelConfig,
    /// Tests only: abort the process once at this committer point; the marker file records that
    /// it happened, so the restarted process runs normally.
    #[cfg(feature = "fault-injection")]
    pub crash_at: Option<(silt_connectors::lake_format::FaultPoint, PathBuf)>,
    /// SASL/PLAIN credentials for the Fluss endpoint, when it requires them.
    pub credentials: Option<FlussCredentials>,
    /// The format lake tables are written in (`lake.format`).
    pub format: Arc<dyn LakeFormat>,
    /// The lake's settings (`lake.*`): file size, deletion vectors, retention, caches.
    pub lake: LakeSettings,
    /// The lake format's local state of a table (a primary-key table's key index) goes under
    /// `<lake_state_root>/<db>.<table>-<id>` and survives restarts; `None`: temporary, rebuilt
    /// from the lake at every job start.
    pub lake_state_root: Option<PathBuf>,
    /// Whether the hot tier's retention waits for the lake (silt's own hot store, told each
    /// commit) or not (a Fluss cluster, which expires its log by `table.log.ttl` alone): then a
    /// table whose tiering lag passes half its TTL is reported before rows expire untiered.
    pub retention_waits_for_lake: bool,
    /// How long the tiering jobs' fetches wait on the hot tier for rows (`None`: the client's
    /// default); [`EXTERNAL_FETCH_WAIT`] against a Fluss cluster.
    pub source_fetch_wait: Option<Duration>,
}

/// The fetch wait of tiering against an Apache Fluss cluster: see
/// `silt_connectors::fluss::FlussSourceConfig::fetch_wait`. An idle bucket then costs its
/// tablet server up to 10 fetches a second per tiering job instead of 2.
pub const EXTERNAL_FETCH_WAIT: Duration = Duration::from_millis(100);

impl TieringConfig {
    pub fn new(
        bootstrap_servers: impl Into<String>,
        lake_root: impl Into<String>,
        checkpoint_root: impl Into<PathBuf>,
    ) -> Self {
        TieringConfig {
            bootstrap_servers: bootstrap_servers.into(),
            lake_root: lake_root.into(),
            storage_options: HashMap::new(),
            checkpoint_root: checkpoint_root.into(),
            format: silt_connectors::formats::default_format(),
            lake: LakeSettings::default(),
            lake_state_root: None,
            poll_interval: Duration::from_secs(2),
            freshness_default: Duration::from_secs(30),
            source_parallelism_max: TIERING_PARALLELISM_DEFAULT,
            writer_parallelism: TIERING_PARALLELISM_DEFAULT,
            checkpoint_timeout: Duration::from_secs(120),
            checkpoints_retained_max: 3,
            restart: RestartStrategy::ExponentialBackoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(30),
                multiplier: 2.0,
                attempts_max: 1000,
            },
            channel: ChannelConfig::default(),
            #[cfg(feature = "fault-injection")]
            crash_at: None,
            credentials: None,
            retention_waits_for_lake: true,
            source_fetch_wait: None,
        }
    }

    /// Where the lake table of `database.table` lives; an error for a name that cannot be a
    /// path component (see [`silt_connectors::lake::layout`]).
    pub fn lake_uri(&self, database: &str, table: &str) -> Result<String> {
        silt_connectors::lake::layout::lake_uri(&self.lake_root, database, table)
    }
}
