//! What compiling a definition reads of the job service's settings: the hot store's address
//! and credentials, the data directory, the lake and the engine defaults. The service builds it
//! from the configuration; the compiler never sees the service itself.

use std::path::PathBuf;
use std::time::Duration;

use silt_engine::{ChannelConfig, RestartStrategy};

/// The job service's settings; compiling a definition reads the hot store's address and
/// credentials, the data directory, the lake and the default checkpoint interval.
#[derive(Debug, Clone)]
pub struct JobServiceConfig {
    pub bootstrap: String,
    /// SASL/PLAIN credentials for the hot store, when it requires them.
    pub credentials: Option<silt_connectors::fluss::FlussCredentials>,
    pub data_dir: PathBuf,
    /// Where the tiering service keeps lake tables (`start: lake` reads their offsets).
    pub lake_root: String,
    pub lake_storage_options: std::collections::HashMap<String, String>,
    /// Used when the definition sets no interval.
    pub checkpoint_interval_default: Duration,
    pub checkpoint_timeout: Duration,
    pub checkpoints_retained_max: usize,
    pub restart: RestartStrategy,
    pub channel: ChannelConfig,
}

impl JobServiceConfig {
    pub(crate) fn jobs_dir(&self) -> PathBuf {
        self.data_dir.join("jobs")
    }

    pub fn checkpoint_dir(&self, id: &str) -> PathBuf {
        self.data_dir.join("checkpoints").join("jobs").join(id)
    }
}
