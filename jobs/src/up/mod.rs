//! `silt up`: hotstore + engine + tiering service under one data directory, and with `--demo`
//! a workload that exercises them: a log table and a primary-key table, both lake-enabled, fed
//! through the official Fluss client at a steady rate, with a status line per table every few
//! seconds. Ctrl-C stops the workload, stops every tiering job with a final checkpoint, and
//! shuts the hotstore down cleanly. What it prints on stdout, as text or JSON, is [`lines`]'s.

pub mod lines;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use silt_hotstore::{Server, ServerHandle};
use tracing::{info, warn};

use crate::config::Config;
use crate::output::Format;
use crate::tiering::{
    DATALAKE_ENABLED, DATALAKE_FRESHNESS, LeaseConfig, Leased, RegistryUpdate, TieringService,
    worker_name,
};
use silt_connectors::fluss::DATALAKE_ENABLED_SHOWN;

#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Run the demo workload.
    pub demo: bool,
    /// Demo rows per second (log table; the PK table gets a quarter of it).
    pub demo_rate_per_s: u64,
    /// Stop after this long (for scripted runs); `None` runs until Ctrl-C.
    pub run_for: Option<Duration>,
    pub status_every: Duration,
    /// How the status lines are printed: text, or one JSON object per line.
    pub status_format: Format,
    /// Tests only: abort once at this tiering committer point.
    #[cfg(feature = "fault-injection")]
    pub crash_at: Option<silt_connectors::lake_format::FaultPoint>,
}

pub use crate::settings::lake_schema_check;

/// The hot tier `silt up` serves: its own hot store, or an external Fluss cluster
/// (`hot_tier.bootstrap`) that it only reads, tiers and queries.
enum HotTier {
    Embedded(Arc<ServerHandle>),
    External(String),
}

impl HotTier {
    /// Starts the embedded hot store, or checks that the external cluster answers (so a wrong
    /// address fails the start with its cause, rather than every later call retrying it).
    async fn start(config: &Config, lines: &lines::Lines) -> Result<HotTier> {
        let Some(bootstrap) = config.external_hot_tier() else {
            let server = Arc::new(Server::start(config.hotstore()?).await?);
            lines.say(format_args!(
                "hotstore: Fluss wire protocol on {} (data in {})",
                server.local_addr(),
                config.data_dir.display()
            ));
            return Ok(HotTier::Embedded(server));
        };
        let reached = async {
            let connection = silt_connectors::fluss::connect_with(
                bootstrap,
                config.fluss_credentials().as_ref(),
            )
            .await?;
            let admin = connection.get_admin().map_err(|e| anyhow!("{e}"))?;
            admin.list_databases().await.map_err(|e| anyhow!("{e}"))
        };
        match tokio::time::timeout(EXTERNAL_CONNECT_TIMEOUT, reached).await {
            Ok(Ok(databases)) => {
                info!(%bootstrap, databases = databases.len(), "hot tier: reached the Fluss cluster")
            }
            Ok(Err(e)) => bail!(
                "cannot reach the Fluss cluster at {bootstrap}: {e:#} (check --bootstrap or \
                 hot_tier.bootstrap, and hot_tier.sasl when the cluster asks for SASL)"
            ),
            Err(_) => bail!(
                "the Fluss cluster at {bootstrap} did not answer within {}s (check --bootstrap \
                 or hot_tier.bootstrap)",
                EXTERNAL_CONNECT_TIMEOUT.as_secs()
            ),
        }
        lines.say(format_args!(
            "hot tier: the Fluss cluster at {bootstrap} (no hot store in this process; data in {})",
            config.data_dir.display()
        ));
        Ok(HotTier::External(bootstrap.to_string()))
    }

    /// Where silt's own clients reach it.
    fn bootstrap(&self) -> String {
        match self {
            HotTier::Embedded(server) => server.local_addr().to_string(),
            HotTier::External(bootstrap) => bootstrap.clone(),
        }
    }

    fn server(&self) -> Option<&Arc<ServerHandle>> {
        match self {
            HotTier::Embedded(server) => Some(server),
            HotTier::External(_) => None,
        }
    }
}

/// How long `silt up --bootstrap` waits for the cluster's first answer.
const EXTERNAL_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(config: &Config, options: UpOptions) -> Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))?;
    #[cfg(feature = "fault-injection")]
    crate::lake_faults::install_from_env();
    let lines = lines::Lines::new(options.status_format);
    info!(version = crate::build_info::VERSION, "silt up starting");
    let hot = HotTier::start(config, &lines).await?;
    let bootstrap = hot.bootstrap();
    let tiering = start_tiering(config, &options, hot.server().cloned(), &bootstrap)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let discovery = {
        let tiering = tiering.clone();
        tokio::spawn(async move { tiering.run(stop_rx).await })
    };
    let jobs = crate::job::service::JobService::new(config.jobs(&bootstrap));
    let resumed = jobs.resume_persisted().await?;
    lines.say(format_args!("jobs: {resumed} submitted jobs resumed"));
    // One query service for REST and Flight SQL.
    let query = crate::query::QueryService::new(config.query(&bootstrap));
    let flight = crate::query::flight::serve(config, query.clone(), stop_tx.subscribe()).await?;
    let flight_url = flight.as_ref().map(|(addr, _)| format!("grpc://{addr}"));
    if let Some(url) = &flight_url {
        lines.say(format_args!("flight: Arrow Flight SQL on {url}"));
    }
    let api = rest_api(
        config,
        jobs.clone(),
        query,
        tiering.clone(),
        hot.server().cloned(),
        &bootstrap,
    );
    let (rest_addr, rest) =
        crate::rest::serve(&config.rest.listen, api, stop_tx.subscribe()).await?;
    let started = started(config, &hot, rest_addr, flight_url, resumed);
    say_started(&lines, &started);

    let workload = start_demo(config, &options, &hot, stop_tx.subscribe()).await?;

    serve_until_stopped(&options, &lines, hot.server(), &tiering).await?;

    lines.stopping();
    let _ = stop_tx.send(true);
    let demo_rows = match workload {
        Some(w) => report_workload(w.await),
        None => None,
    };
    let _ = discovery.await;
    let _ = rest.await;
    if let Some((_, flight)) = flight {
        // Graceful: in-flight calls finish; idle client connections get a GOAWAY.
        let _ = tokio::time::timeout(Duration::from_secs(10), flight).await;
    }
    jobs.shutdown(Duration::from_secs(60)).await;
    tiering.shutdown(Duration::from_secs(60)).await;
    if let HotTier::Embedded(server) = hot {
        shutdown_server(server).await?;
    }
    lines.stopped(demo_rows);
    Ok(())
}

/// The tiering service over the hot tier: snapshots recorded in the embedded hot store's
/// registry, or (an external cluster keeps its own retention) nowhere; with `--crash-at`'s hook
/// in test builds.
fn start_tiering(
    config: &Config,
    options: &UpOptions,
    server: Option<Arc<ServerHandle>>,
    bootstrap: &str,
) -> Result<TieringService> {
    let mut tiering_config = config.tiering(bootstrap);
    tiering_config.retention_waits_for_lake = server.is_some();
    if server.is_none() {
        tiering_config.source_fetch_wait = Some(crate::tiering::EXTERNAL_FETCH_WAIT);
    }
    let registry: Option<RegistryUpdate> = server.map(crate::tiering::hotstore_registry);
    #[cfg(feature = "fault-injection")]
    let tiering_config = crate::tiering::TieringConfig {
        crash_at: options
            .crash_at
            .map(|p| (p, config.data_dir.join(format!(".crashed-{p:?}")))),
        ..tiering_config
    };
    #[cfg(not(feature = "fault-injection"))]
    let _ = options;
    if config.tiering.lease_ms == 0 {
        return Ok(TieringService::new(tiering_config, registry));
    }
    let leases = LeaseConfig {
        worker: worker_name(&config.data_dir)?,
        duration: Duration::from_millis(config.tiering.lease_ms),
    };
    info!(worker = %leases.worker, lease = ?leases.duration, "tiering: sharing tables with other workers by leases in the lake");
    let store = Leased::store_for(&config.lake_root(), &config.lake_storage_options())?;
    let coordinator = Leased::new(store, leases, registry);
    Ok(TieringService::with_coordinator(
        tiering_config,
        Arc::new(coordinator),
    ))
}

fn started(
    config: &Config,
    hot: &HotTier,
    rest: std::net::SocketAddr,
    flight: Option<String>,
    jobs_resumed: usize,
) -> lines::Started {
    lines::Started {
        hot_tier: match hot {
            HotTier::Embedded(_) => "embedded",
            HotTier::External(_) => "external",
        },
        hotstore: hot.bootstrap(),
        rest: format!("http://{rest}"),
        flight,
        data_dir: config.data_dir.display().to_string(),
        lake_root: config.lake_root(),
        log_file: crate::logging::LogFile::of(config, "silt")
            .path()
            .display()
            .to_string(),
        jobs_resumed,
    }
}

/// The last lines of the start: the REST API, the lake and the log (text), or the `started`
/// event (JSON).
fn say_started(lines: &lines::Lines, started: &lines::Started) {
    lines.say(format_args!("rest: REST API on {}", started.rest));
    lines.say(format_args!(
        "tiering: lake tables under {}",
        started.lake_root
    ));
    lines.say(format_args!(
        "log: {} (warnings also here; --log-stderr for everything)",
        started.log_file
    ));
    lines.started(started);
}

/// The rows the demo workload wrote; a failure is logged as a warning.
fn report_workload(ended: std::result::Result<Result<u64>, tokio::task::JoinError>) -> Option<u64> {
    match ended {
        Ok(Ok(rows)) => return Some(rows),
        Ok(Err(e)) => warn!(error = %format!("{e:#}"), "demo workload failed"),
        Err(e) => warn!(error = %e, "demo workload panicked"),
    }
    None
}

/// With `--demo`: creates the demo's tables and starts its workload, which writes until `stop`.
async fn start_demo(
    config: &Config,
    options: &UpOptions,
    hot: &HotTier,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<Result<u64>>>> {
    if !options.demo {
        return Ok(None);
    }
    let rate_per_s = options.demo_rate_per_s;
    let credentials = config.fluss_credentials();
    let bootstrap = hot.bootstrap();
    let lake_marker = match hot {
        HotTier::Embedded(_) => LakeMarker::Property,
        HotTier::External(_) => LakeMarker::CustomProperty,
    };
    create_demo_tables(&bootstrap, credentials.as_ref(), lake_marker).await?;
    Ok(Some(tokio::spawn(async move {
        demo_workload(&bootstrap, credentials.as_ref(), rate_per_s, stop).await
    })))
}

/// Prints the status every `status_every` until `run_for` has passed or Ctrl-C; fails at once
/// when the hot store's storage fails.
async fn serve_until_stopped(
    options: &UpOptions,
    lines: &lines::Lines,
    server: Option<&Arc<ServerHandle>>,
    tiering: &TieringService,
) -> Result<()> {
    let storage_failed = async {
        match server {
            Some(server) => server.storage_failed().await,
            // An external cluster's storage is its own: nothing here to stop for.
            None => std::future::pending().await,
        }
    };
    tokio::pin!(storage_failed);
    let until = async {
        match options.run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(until);
    let mut status = tokio::time::interval(options.status_every);
    status.tick().await;
    loop {
        tokio::select! {
            _ = &mut until => return Ok(()),
            _ = status.tick() => lines.status(tiering.status().await, silt_rt::clock::now_ms()),
            reason = &mut storage_failed => {
                // Nothing more can be written durably; recovery at the next start rebuilds
                // the state from what is durable. Stop at once, without final checkpoints.
                bail!(
                    "the hot store's storage failed ({reason}); silt stops so that a restart \
                     recovers it (free disk space or fix the disk first)"
                );
            }
        }
    }
}

/// The REST API: each service's routes over its own state, behind `rest.token`. The one place
/// that lists them, for `silt up` and for the test that checks the API against its document.
pub(crate) fn rest_api(
    config: &Config,
    jobs: crate::job::service::JobService,
    query: crate::query::QueryService,
    tiering: TieringService,
    hotstore: Option<Arc<ServerHandle>>,
    bootstrap: &str,
) -> axum::Router {
    let verify = crate::verify::VerifyOptions {
        bootstrap: bootstrap.to_string(),
        ..crate::verify::VerifyOptions::from_config(config)
    };
    let query_deadline = Duration::from_millis(config.query.deadline_default_ms.max(1));
    crate::rest::router(
        &config.rest.token,
        [
            crate::job::routes::routes(jobs.clone()),
            crate::query::rest::routes(query, query_deadline),
            crate::status::routes(crate::status::Status {
                tiering,
                jobs,
                hotstore,
            }),
            crate::verify::rest::routes(verify),
        ],
    )
    // The console's files hold no data: served without the token, they call the API with it.
    .merge(crate::console::routes())
}

async fn shutdown_server(server: Arc<ServerHandle>) -> Result<()> {
    match Arc::try_unwrap(server) {
        Ok(server) => server.shutdown().await.map_err(anyhow::Error::from),
        // Another holder (a hook still alive) keeps it; dropping stops accepting.
        Err(_) => Ok(()),
    }
}

pub const DEMO_DATABASE: &str = "demo";

/// How the demo marks its tables for tiering: the Fluss property silt's hot store takes, or
/// (a Fluss cluster refuses `table.datalake.enabled` without a lake format of its own) the
/// custom property silt's tiering also reads.
#[derive(Debug, Clone, Copy)]
enum LakeMarker {
    Property,
    CustomProperty,
}

async fn create_demo_tables(
    bootstrap: &str,
    credentials: Option<&silt_connectors::fluss::FlussCredentials>,
    lake_marker: LakeMarker,
) -> Result<()> {
    let connection = silt_connectors::fluss::connect_with(bootstrap, credentials).await?;
    let admin = connection
        .get_admin()
        .context("the demo's Fluss admin client")?;
    admin
        .create_database(DEMO_DATABASE, None, true)
        .await
        .map_err(|e| anyhow!("creating database {DEMO_DATABASE}: {e}"))?;
    // (table, columns, primary key, buckets); both are tiered into the lake.
    let tables = [
        (
            "orders",
            vec![
                ("order_id", DataTypes::bigint()),
                ("customer_id", DataTypes::bigint()),
                ("amount", DataTypes::double()),
                ("status", DataTypes::string()),
            ],
            None,
            3,
        ),
        (
            "customers",
            vec![
                ("customer_id", DataTypes::bigint()),
                ("name", DataTypes::string()),
                ("balance", DataTypes::double()),
            ],
            Some("customer_id"),
            2,
        ),
    ];
    for (table, columns, primary_key, buckets) in tables {
        let name = format!("{DEMO_DATABASE}.{table}");
        let descriptor = demo_descriptor(&name, columns, primary_key, buckets, lake_marker)?;
        admin
            .create_table(&TablePath::new(DEMO_DATABASE, table), &descriptor, true)
            .await
            .map_err(|e| anyhow!("creating {name}: {e}"))?;
    }
    info!(
        "demo tables ready: demo.orders (log, 3 buckets), demo.customers (primary key, 2 buckets)"
    );
    Ok(())
}

/// A demo table's descriptor: its columns, primary key and buckets, marked for tiering with a
/// 5 s freshness.
fn demo_descriptor(
    name: &str,
    columns: Vec<(&str, fluss::metadata::DataType)>,
    primary_key: Option<&str>,
    buckets: i32,
    lake_marker: LakeMarker,
) -> Result<TableDescriptor> {
    let mut schema = Schema::builder();
    for (column, data_type) in columns {
        schema = schema.column(column, data_type);
    }
    if let Some(key) = primary_key {
        schema = schema
            .primary_key([key])
            .with_context(|| format!("the {name} primary key"))?;
    }
    let schema = schema
        .build()
        .with_context(|| format!("the {name} schema"))?;
    let bucket_keys = primary_key.into_iter().map(str::to_string).collect();
    let descriptor = TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(buckets), bucket_keys)
        .property(DATALAKE_FRESHNESS, "5s");
    let descriptor = match lake_marker {
        LakeMarker::Property => descriptor.property(DATALAKE_ENABLED, "true"),
        LakeMarker::CustomProperty => descriptor.custom_property(DATALAKE_ENABLED_SHOWN, "true"),
    };
    descriptor
        .build()
        .with_context(|| format!("the {name} descriptor"))
}

/// Appends orders and upserts (and sometimes deletes) customers, ten flushes a second, until
/// told to stop. Returns the rows written.
async fn demo_workload(
    bootstrap: &str,
    credentials: Option<&silt_connectors::fluss::FlussCredentials>,
    rate_per_s: u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<u64> {
    let connection = silt_connectors::fluss::connect_with(bootstrap, credentials).await?;
    let orders = connection
        .get_table(&TablePath::new(DEMO_DATABASE, "orders"))
        .await
        .context("opening demo.orders")?;
    let customers = connection
        .get_table(&TablePath::new(DEMO_DATABASE, "customers"))
        .await
        .context("opening demo.customers")?;
    let appender = orders
        .new_append()
        .context("the demo's appender on demo.orders")?
        .create_writer()
        .context("the demo's appender on demo.orders")?;
    let upserter = customers
        .new_upsert()
        .context("the demo's upserter on demo.customers")?
        .create_writer()
        .context("the demo's upserter on demo.customers")?;
    let per_tick = (rate_per_s / 10).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let (mut order_id, mut written) = (0i64, 0u64);
    const STATUSES: [&str; 3] = ["new", "paid", "shipped"];
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        for _ in 0..per_tick {
            let customer = order_id.wrapping_mul(7919) % 500;
            let mut row = GenericRow::new(4);
            row.set_field(0, order_id);
            row.set_field(1, customer);
            row.set_field(2, (order_id % 97) as f64 + 0.5);
            row.set_field(3, STATUSES[(order_id % 3) as usize]);
            appender.append(&row).map_err(|e| anyhow!("append: {e}"))?;
            if order_id % 4 == 0 {
                let name = format!("customer-{customer}");
                let mut c = GenericRow::new(3);
                c.set_field(0, customer);
                c.set_field(1, name.as_str());
                c.set_field(2, (order_id % 1000) as f64);
                if order_id % 40 == 0 {
                    upserter.delete(&c).map_err(|e| anyhow!("delete: {e}"))?;
                } else {
                    upserter.upsert(&c).map_err(|e| anyhow!("upsert: {e}"))?;
                }
                written += 1;
            }
            order_id += 1;
            written += 1;
        }
        appender
            .flush()
            .await
            .map_err(|e| anyhow!("flush orders: {e}"))?;
        upserter
            .flush()
            .await
            .map_err(|e| anyhow!("flush customers: {e}"))?;
    }
    // Every tick's rows were flushed at its end, before the next select.
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiering::TieringConfig;

    /// The hot store's `ServerConfig::default()` (what tests and benches start from) is
    /// conf/silt.yaml's configuration: one set of limits, the product's. Was: 64 MiB frames,
    /// 1 bucket and 64 requests in flight in code against the file's 100 MiB, 3 and 32.
    #[test]
    fn the_hot_stores_defaults_are_conf_silt_yaml() {
        let config = Config::load(None, std::iter::empty(), &[]).unwrap();
        let mut from_file = config.hotstore().unwrap();
        let defaults = silt_hotstore::ServerConfig::default();
        // Where it listens and stores are the deployment's, not limits; the lake's schema
        // check is wiring (the hot store alone has no lake).
        from_file.bind_addr = defaults.bind_addr;
        from_file.data_dir = defaults.data_dir.clone();
        assert!(from_file.lake_schema_check.take().is_some());
        assert_eq!(format!("{from_file:#?}"), format!("{defaults:#?}"));
    }

    /// The same for tiering: `TieringConfig::new` (what tests start from) is what silt up
    /// builds from conf/silt.yaml, apart from the addresses and directories.
    #[test]
    fn the_tiering_defaults_are_conf_silt_yaml() {
        let config = Config::load(None, std::iter::empty(), &[]).unwrap();
        let from_file = config.tiering("127.0.0.1:9123");
        let defaults = TieringConfig {
            lake_state_root: from_file.lake_state_root.clone(),
            ..TieringConfig::new(
                "127.0.0.1:9123",
                from_file.lake_root.clone(),
                from_file.checkpoint_root.clone(),
            )
        };
        assert_eq!(format!("{from_file:#?}"), format!("{defaults:#?}"));
    }
}
