//! Tiering into an object store: the tiering service tiers a lake-enabled log table and a PK
//! table into `s3://` on a loopback S3-compatible server (moto, from PyPI), and the Delta tables
//! read back from S3 hold every log row once and the latest row per key with deletes removed.
//! Skips with a message where moto is not installed (`pip install 'moto[server]'`).

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use arrow::array::{Array, Int64Array};
use fluss::metadata::TablePath;
use fluss::row::GenericRow;
use silt_jobs::tiering::{TieringConfig, TieringService};
use silt_testkit::process::{ChildGuard, free_port};
use silt_testkit::tables::{self, LogAndKeyed};
use silt_testkit::tiering::{self, Driver};
use silt_testkit::{hotstore, http, lake};

const BUCKET: &str = "silt-lake";
const EVENTS: i64 = 2_000;
const KEYS: i64 = 100;

/// A moto S3 server on a loopback port; killed when dropped.
struct Moto {
    _child: ChildGuard,
    port: u16,
}

/// Starts moto, or says why it cannot (the test then skips).
fn start_moto() -> Result<Result<Moto, String>> {
    let probe = Command::new("python3")
        .args(["-c", "import moto.server"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match probe {
        Ok(status) if status.success() => {}
        Ok(_) => {
            return Ok(Err(
                "python3 cannot import moto.server (pip install 'moto[server]')".into(),
            ));
        }
        Err(error) => return Ok(Err(format!("python3 not found: {error}"))),
    }
    let port = free_port()?;
    let child = Command::new("python3")
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start moto")?;
    let moto = Moto {
        _child: ChildGuard(child),
        port,
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "moto did not listen on 127.0.0.1:{port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Ok(moto))
}

/// Creates a bucket with a plain HTTP PUT (moto does not check signatures).
fn create_bucket(port: u16, bucket: &str) -> Result<()> {
    let (status, body) = http::request(
        &format!("127.0.0.1:{port}"),
        "PUT",
        &format!("/{bucket}"),
        None,
    )?;
    ensure!(status == 200, "creating bucket {bucket}: {status} {body}");
    Ok(())
}

fn storage_options(port: u16) -> HashMap<String, String> {
    [
        ("aws_endpoint_url", format!("http://127.0.0.1:{port}")),
        ("aws_access_key_id", "silt-test".to_string()),
        ("aws_secret_access_key", "silt-test".to_string()),
        ("aws_region", "us-east-1".to_string()),
        ("aws_allow_http", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

async fn create_tables(connection: &fluss::client::FlussConnection) -> Result<()> {
    for table in [tables::events("s3"), tables::scores("s3")] {
        table.lake("300ms").create(connection).await?;
    }
    Ok(())
}

/// Writes the events and user changes; returns the latest score per live user.
async fn write(connection: &fluss::client::FlussConnection) -> Result<BTreeMap<i64, i64>> {
    let (events, users) = (
        TablePath::new("s3", "events"),
        TablePath::new("s3", "users"),
    );
    let writers = LogAndKeyed::open(connection, &events, &users).await?;
    let LogAndKeyed { appender, upserter } = &writers;
    let mut latest = BTreeMap::new();
    for id in 0..EVENTS {
        let mut row = GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, format!("event {id}"));
        drop(appender.append(&row)?);
        if id % 5 == 0 {
            let key = (id * 7) % KEYS;
            let mut row = GenericRow::new(2);
            row.set_field(0, key);
            if id % 35 == 0 {
                drop(upserter.delete(&row)?);
                latest.remove(&key);
            } else {
                row.set_field(1, id);
                drop(upserter.upsert(&row)?);
                latest.insert(key, id);
            }
        }
    }
    writers.flush().await?;
    Ok(latest)
}

fn column<'a, T: 'static>(batch: &'a arrow::record_batch::RecordBatch, i: usize) -> &'a T {
    batch
        .column(i)
        .as_any()
        .downcast_ref::<T>()
        .expect("column type")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_writes_delta_tables_into_s3() -> Result<()> {
    let moto = match start_moto()? {
        Ok(moto) => moto,
        Err(reason) => {
            eprintln!("SKIPPED: tiering into s3:// needs a local S3 server: {reason}");
            return Ok(());
        }
    };
    create_bucket(moto.port, BUCKET)?;
    let dir = tempfile::tempdir()?;
    let server = Arc::new(hotstore::start(&dir.path().join("hotstore")).await?);
    let bootstrap = server.local_addr().to_string();
    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
    create_tables(&connection).await?;
    let latest = write(&connection).await?;

    // The lake's place and its object store options come from silt's configuration (here its
    // environment layer), as `silt up` reads them.
    let options = storage_options(moto.port);
    let mut env: Vec<(String, String)> = options
        .iter()
        .map(|(k, v)| {
            (
                format!("SILT_LAKE__STORAGE_OPTIONS__{}", k.to_ascii_uppercase()),
                v.clone(),
            )
        })
        .collect();
    env.push(("SILT_LAKE__ROOT".into(), format!("s3://{BUCKET}/lake")));
    env.push((
        "SILT_DATA_DIR".into(),
        dir.path().join("data").to_string_lossy().to_string(),
    ));
    let silt = silt_jobs::config::Config::load(None, env.into_iter(), &[])?;
    let mut config: TieringConfig = silt.tiering(&bootstrap);
    ensure!(config.lake_root == format!("s3://{BUCKET}/lake"));
    ensure!(config.storage_options == options);
    config.poll_interval = Duration::from_millis(200);
    let tiering = TieringService::new(config.clone(), None);
    tiering.poll_once().await?;
    tiering::wait_caught_up(&tiering, Driver::Service, 2, Duration::from_secs(90)).await?;
    tiering.shutdown(Duration::from_secs(30)).await;

    // Log table: every event exactly once.
    let events = lake::query_with_options(
        &config.lake_uri("s3", "events")?,
        &options,
        "SELECT id, v FROM lake ORDER BY id",
    )
    .await?;
    let ids = lake::i64s(&events, 0);
    for (id, v) in ids.iter().zip(lake::strings(&events, 1)) {
        ensure!(v == format!("event {id}"), "event {id} has v {v:?}");
    }
    ensure!(
        ids == (0..EVENTS).collect::<Vec<_>>(),
        "the lake in S3 holds {} events, expected 0..{EVENTS} once each",
        ids.len()
    );

    // PK table: the latest score per key, deletes gone.
    let users = lake::query_with_options(
        &config.lake_uri("s3", "users")?,
        &options,
        "SELECT id, score FROM lake ORDER BY id",
    )
    .await?;
    let mut lake = BTreeMap::new();
    for batch in &users {
        let (id, score) = (
            column::<Int64Array>(batch, 0),
            column::<Int64Array>(batch, 1),
        );
        for i in 0..batch.num_rows() {
            ensure!(!score.is_null(i), "user {} has a null score", id.value(i));
            ensure!(
                lake.insert(id.value(i), score.value(i)).is_none(),
                "user {} is in the lake twice",
                id.value(i)
            );
        }
    }
    ensure!(
        lake == latest,
        "users in S3 differ from the latest writes: {} rows vs {} expected",
        lake.len(),
        latest.len()
    );
    // Queries read the same lake through the same configuration.
    let queries = silt_jobs::query::QueryService::new(silt.query(&bootstrap));
    let result = queries
        .execute(silt_jobs::query::QueryRequest::new(
            "SELECT count(*) AS n FROM s3.users$lake",
            Duration::from_secs(60),
        ))
        .await
        .map_err(|e| anyhow!("query over the S3 lake: {e}"))?;
    let n = column::<Int64Array>(&result.batches[0], 0).value(0);
    ensure!(
        n == latest.len() as i64,
        "SQL over s3.users$lake counts {n} users, expected {}",
        latest.len()
    );
    eprintln!(
        "tiered {} events and {} users into s3://{BUCKET}/lake on moto",
        ids.len(),
        lake.len()
    );
    drop(connection);
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await?;
    }
    Ok(())
}
