//! A stand-in for fluss-rs's `fluss-test-cluster`: the same builder and cluster handle the
//! fluss-rs integration suite calls, pointed at Fluss endpoints that already run.
//!
//! The suite's one shared cluster has two listeners, a plaintext one and a SASL one. Here they
//! are two servers, named by the environment:
//! - `SILT_SUITE_BOOTSTRAP`: the plaintext endpoint (required);
//! - `SILT_SUITE_SASL_BOOTSTRAP`: the SASL/PLAIN endpoint, whose users must be the ones the suite
//!   passes to [`FlussTestingClusterBuilder::with_sasl`] (without it, SASL connections go to the
//!   plaintext endpoint and the SASL tests fail, as they would against a server without SASL).
//!
//! The cluster configuration a test asks for (segment sizes, remote storage) is the running
//! servers' business: it is recorded and otherwise ignored, and `stop` stops nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use fluss::client::FlussConnection;
use fluss::config::Config;

/// How long a connection is retried before the suite is told the servers are not there.
const CONNECT_ATTEMPTS_MAX: u32 = 30;
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_secs(1);

fn endpoint(variable: &str) -> Option<String> {
    std::env::var(variable).ok().filter(|v| !v.trim().is_empty())
}

/// What a test asked of the cluster; see the module doc for what is honoured.
pub struct FlussTestingClusterBuilder {
    name: String,
    cluster_conf: HashMap<String, String>,
    sasl_users: Vec<(String, String)>,
    remote_data_dir: Option<PathBuf>,
}

impl FlussTestingClusterBuilder {
    pub fn new(testing_name: impl Into<String>) -> Self {
        Self::new_with_cluster_conf(testing_name, &HashMap::new())
    }

    pub fn new_with_cluster_conf(
        testing_name: impl Into<String>,
        conf: &HashMap<String, String>,
    ) -> Self {
        FlussTestingClusterBuilder {
            name: testing_name.into(),
            cluster_conf: conf.clone(),
            sasl_users: Vec::new(),
            remote_data_dir: None,
        }
    }

    pub fn with_sasl(mut self, users: Vec<(String, String)>) -> Self {
        self.sasl_users = users;
        self
    }

    pub fn with_remote_data_dir(mut self, dir: PathBuf) -> Self {
        self.remote_data_dir = Some(dir);
        self
    }

    /// Ports are the running servers'; accepted for the suite's sake.
    pub fn with_port(self, _port: u16) -> Self {
        self
    }

    /// The handle of the running servers named by the environment.
    ///
    /// # Panics
    /// When `SILT_SUITE_BOOTSTRAP` is not set: the suite cannot run without a server.
    pub async fn build(&mut self) -> FlussTestingCluster {
        let bootstrap = endpoint("SILT_SUITE_BOOTSTRAP").unwrap_or_else(|| {
            panic!(
                "cluster {}: set SILT_SUITE_BOOTSTRAP to the Fluss endpoint to test",
                self.name
            )
        });
        eprintln!(
            "fluss-test-cluster stand-in: {} -> {bootstrap} (SASL: {:?}); cluster settings left to the server: {:?}",
            self.name,
            endpoint("SILT_SUITE_SASL_BOOTSTRAP"),
            self.cluster_conf.keys().collect::<Vec<_>>()
        );
        FlussTestingCluster {
            bootstrap_servers: bootstrap,
            sasl_bootstrap_servers: endpoint("SILT_SUITE_SASL_BOOTSTRAP"),
            sasl_users: self.sasl_users.clone(),
            remote_data_dir: self.remote_data_dir.clone(),
        }
    }
}

/// The running servers, as the suite sees its cluster.
#[derive(Clone)]
pub struct FlussTestingCluster {
    bootstrap_servers: String,
    sasl_bootstrap_servers: Option<String>,
    sasl_users: Vec<(String, String)>,
    remote_data_dir: Option<PathBuf>,
}

impl FlussTestingCluster {
    /// The servers belong to whoever started them; only the suite's scratch directory goes.
    pub fn stop(&self) {
        if let Some(dir) = &self.remote_data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    pub fn sasl_users(&self) -> &[(String, String)] {
        &self.sasl_users
    }

    pub fn plaintext_bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// One server plays every tablet server.
    pub fn plaintext_tablet_bootstrap_server(&self, _server_id: u16) -> Option<&str> {
        Some(&self.bootstrap_servers)
    }

    pub async fn get_fluss_connection(&self) -> FlussConnection {
        connect_retrying(self.config(&self.bootstrap_servers, None)).await
    }

    pub async fn get_fluss_connection_with_sasl(
        &self,
        username: &str,
        password: &str,
    ) -> FlussConnection {
        connect_retrying(self.config(self.sasl_endpoint(), Some((username, password)))).await
    }

    pub async fn try_fluss_connection_with_sasl(
        &self,
        username: &str,
        password: &str,
    ) -> fluss::error::Result<FlussConnection> {
        FlussConnection::new(self.config(self.sasl_endpoint(), Some((username, password)))).await
    }

    fn sasl_endpoint(&self) -> &str {
        self.sasl_bootstrap_servers
            .as_deref()
            .unwrap_or(&self.bootstrap_servers)
    }

    fn config(&self, bootstrap: &str, credentials: Option<(&str, &str)>) -> Config {
        let mut config = Config {
            writer_acks: "all".to_string(),
            bootstrap_servers: bootstrap.to_string(),
            ..Default::default()
        };
        if let Some((username, password)) = credentials {
            config.security_protocol = "sasl".to_string();
            config.security_sasl_mechanism = "PLAIN".to_string();
            config.security_sasl_username = username.to_string();
            config.security_sasl_password = password.to_string();
        }
        config
    }
}

async fn connect_retrying(config: Config) -> FlussConnection {
    let mut attempt = 1;
    loop {
        match FlussConnection::new(config.clone()).await {
            Ok(connection) => return connection,
            Err(e) if attempt >= CONNECT_ATTEMPTS_MAX => panic!(
                "cannot connect to {} after {attempt} attempts: {e}",
                config.bootstrap_servers
            ),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(CONNECT_RETRY_INTERVAL).await;
            }
        }
    }
}
