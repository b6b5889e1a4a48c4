//! What the job tests share: the `shop` tables of the example pipelines, seeded writers for
//! them, the rows each example pipeline must produce (computed from what was written, by a
//! model independent of the pipeline code), readers for what the pipelines wrote (a Delta
//! table through DataFusion, a silt table through its changelog), and a tiering service over
//! an in-process hotstore with a wait until it caught up.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::prelude::SessionContext;
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;
use silt_connectors::changelog::{CHANGE_TYPE_COLUMN, ChangeType};
use silt_connectors::fluss::{EndPosition, FlussSource, FlussSourceConfig};
use silt_engine::{RestoredState, Source, SourcePoll, TaskContext};
use silt_hotstore::ServerHandle;
use silt_jobs::tiering::{RegistryUpdate, TieringConfig, TieringService};

pub const CUSTOMER_KEYS: i64 = 40;

pub async fn connect(bootstrap: &str) -> Result<FlussConnection> {
    Ok(silt_connectors::fluss::connect(bootstrap).await?)
}

/// `shop.orders` (log, 3 buckets), `shop.customers` (primary key, 2 buckets) and
/// `shop.customers_clean` (primary key, 3 buckets).
pub async fn create_shop_tables(connection: &FlussConnection) -> Result<()> {
    let admin = connection.get_admin()?;
    admin.create_database("shop", None, true).await?;
    let orders = Schema::builder()
        .column("order_id", DataTypes::bigint())
        .column("customer_id", DataTypes::bigint())
        .column("amount", DataTypes::double())
        .column("status", DataTypes::string())
        .build()?;
    let orders = TableDescriptor::builder()
        .schema(orders)
        .distributed_by(Some(3), vec![])
        .build()?;
    admin
        .create_table(&TablePath::new("shop", "orders"), &orders, true)
        .await?;
    let customers = Schema::builder()
        .column("customer_id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("balance", DataTypes::double())
        .primary_key(vec!["customer_id"])?
        .build()?;
    let customers = TableDescriptor::builder()
        .schema(customers)
        .distributed_by(Some(2), vec!["customer_id".to_string()])
        .build()?;
    admin
        .create_table(&TablePath::new("shop", "customers"), &customers, true)
        .await?;
    let clean = Schema::builder()
        .column("customer_id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("balance_cents", DataTypes::bigint())
        .primary_key(vec!["customer_id"])?
        .build()?;
    let clean = TableDescriptor::builder()
        .schema(clean)
        .distributed_by(Some(3), vec!["customer_id".to_string()])
        .build()?;
    admin
        .create_table(&TablePath::new("shop", "customers_clean"), &clean, true)
        .await?;
    Ok(())
}

pub fn order(id: i64) -> (i64, f64, &'static str) {
    const STATUSES: [&str; 3] = ["new", "paid", "cancelled"];
    (
        id % CUSTOMER_KEYS,
        ((id * 37) % 50) as f64 + 0.25,
        STATUSES[(id % 3) as usize],
    )
}

/// Customer change `k`: `(key, Some((name, balance)))` upserts, `(key, None)` deletes.
pub fn customer_change(k: i64) -> (i64, Option<(String, f64)>) {
    let key = (k * 7) % CUSTOMER_KEYS;
    if k % 9 == 8 {
        (key, None)
    } else {
        (key, Some((format!("c{key}-v{k}"), (k % 100) as f64 + 0.5)))
    }
}

pub async fn write_orders(connection: &FlussConnection, ids: std::ops::Range<i64>) -> Result<()> {
    write_orders_to(connection, "orders", ids).await
}

/// Writes [`order`] rows into `shop.<table>` (a table with the columns of `shop.orders`).
pub async fn write_orders_to(
    connection: &FlussConnection,
    table: &str,
    ids: std::ops::Range<i64>,
) -> Result<()> {
    let table = connection.get_table(&TablePath::new("shop", table)).await?;
    let writer = table.new_append()?.create_writer()?;
    for id in ids {
        let (customer, amount, status) = order(id);
        let mut row = GenericRow::new(4);
        row.set_field(0, id);
        row.set_field(1, customer);
        row.set_field(2, amount);
        row.set_field(3, status);
        writer.append(&row)?;
    }
    writer.flush().await?;
    Ok(())
}

pub async fn write_customers(
    connection: &FlussConnection,
    changes: std::ops::Range<i64>,
) -> Result<()> {
    let table = connection
        .get_table(&TablePath::new("shop", "customers"))
        .await?;
    let writer = table.new_upsert()?.create_writer()?;
    for k in changes {
        let (key, change) = customer_change(k);
        let mut row = GenericRow::new(3);
        row.set_field(0, key);
        match change {
            Some((name, balance)) => {
                row.set_field(1, name.as_str());
                row.set_field(2, balance);
                writer.upsert(&row)?;
            }
            None => {
                row.set_field(1, "");
                row.set_field(2, 0.0f64);
                writer.delete(&row)?;
            }
        }
        // Flushing each change keeps one key's changes in order across requests.
        writer.flush().await?;
    }
    Ok(())
}

/// The latest image per customer after changes `0..n`, deletes removed.
pub fn customers_model(n: i64) -> BTreeMap<i64, (String, f64)> {
    let mut model = BTreeMap::new();
    for k in 0..n {
        match customer_change(k) {
            (key, Some(v)) => {
                model.insert(key, v);
            }
            (key, None) => {
                model.remove(&key);
            }
        }
    }
    model
}

/// conf/pipelines/customers-to-delta.yaml: `customer_id|name|balance`.
pub fn expected_customers_delta(n: i64) -> Vec<String> {
    sorted(
        customers_model(n)
            .into_iter()
            .map(|(k, (name, balance))| format!("{k}|{name}|{balance}"))
            .collect(),
    )
}

/// conf/pipelines/customers-to-silt.yaml: `customer_id|NAME|balance_cents`.
pub fn expected_customers_clean(n: i64) -> Vec<String> {
    sorted(
        customers_model(n)
            .into_iter()
            .map(|(k, (name, balance))| {
                format!(
                    "{k}|{}|{}",
                    name.to_uppercase(),
                    (balance * 100.0).round() as i64
                )
            })
            .collect(),
    )
}

/// conf/pipelines/big-orders-to-delta.yaml: `order_id|customer_id|STATUS|amount_cents`.
pub fn expected_big_orders(n: i64) -> Vec<String> {
    sorted(
        (0..n)
            .filter_map(|id| {
                let (customer, amount, status) = order(id);
                (amount > 10.0 && status != "cancelled").then(|| {
                    format!(
                        "{id}|{customer}|{}|{}",
                        status.to_uppercase(),
                        (amount * 100.0).round() as i64
                    )
                })
            })
            .collect(),
    )
}

pub fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// Rows as `a|b|c` strings, in no particular order.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, i).unwrap())
                .collect();
            rows.push(cells.join("|"));
        }
    }
    rows
}

/// `sql` over the Delta table at `uri` (registered as `lake`); empty before its first commit.
pub async fn delta_rows(uri: &Path, sql: &str) -> Result<Vec<String>> {
    if !uri.join("_delta_log").exists() {
        return Ok(Vec::new());
    }
    let delta = deltalake::open_table(deltalake::ensure_table_uri(uri.to_string_lossy())?).await?;
    let ctx = SessionContext::new();
    ctx.register_table("lake", delta.table_provider().await?)?;
    Ok(sorted(rows_of(&ctx.sql(sql).await?.collect().await?)))
}

/// The latest image per key of a primary-key silt table, read from its changelog up to the
/// high watermarks, as rows of its user columns.
pub async fn silt_table_rows(bootstrap: &str, database: &str, table: &str) -> Result<Vec<String>> {
    let mut config = FlussSourceConfig::new(bootstrap, database, table);
    config.end = EndPosition::LatestAtOpen;
    let mut source = FlussSource::new(config);
    let ctx = TaskContext {
        job_name: "test".into(),
        vertex_name: "read".into(),
        subtask_index: 0,
        parallelism: 1,
        attempt: 0,
    };
    source.open(&ctx, RestoredState::default()).await?;
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if Instant::now() > deadline {
            bail!("reading {database}.{table} timed out");
        }
        match source.poll_next().await? {
            SourcePoll::End => break,
            SourcePoll::Idle(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            SourcePoll::Batch(batch) => {
                let changes = batch
                    .column_by_name(CHANGE_TYPE_COLUMN)
                    .and_then(|c| c.as_any().downcast_ref::<Int8Array>().cloned())
                    .ok_or_else(|| anyhow!("no change type column"))?;
                let users = batch.num_columns() - 4;
                let user_batch = batch.project(&(0..users).collect::<Vec<_>>())?;
                for (i, row) in rows_of(&[user_batch]).into_iter().enumerate() {
                    let key = row.split('|').next().unwrap_or_default().to_string();
                    match ChangeType::from_i8(changes.value(i)).context("change type")? {
                        ChangeType::Delete => {
                            latest.remove(&key);
                        }
                        ChangeType::UpdateBefore => {}
                        _ => {
                            latest.insert(key, row);
                        }
                    }
                }
            }
        }
    }
    Ok(sorted(latest.into_values().collect()))
}

/// Polls `read` until it returns `expected` (as multisets) or `timeout` passes; the error shows
/// what is missing and what is extra.
pub async fn wait_for_rows<F, Fut>(
    what: &str,
    expected: &[String],
    timeout: Duration,
    read: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = Vec::new();
    while Instant::now() < deadline {
        match read().await {
            Ok(rows) if rows == expected => return Ok(()),
            Ok(rows) => last = rows,
            Err(e) => last = vec![format!("read error: {e:#}")],
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (missing, extra) = diff(expected, &last);
    bail!(
        "{what}: after {timeout:?} the output differs: {} rows expected, {} read; missing {:?}; extra {:?}",
        expected.len(),
        last.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        extra.iter().take(10).collect::<Vec<_>>()
    )
}

/// Multiset difference both ways.
pub fn diff(expected: &[String], actual: &[String]) -> (Vec<String>, Vec<String>) {
    let mut counts: BTreeMap<&String, i64> = BTreeMap::new();
    for r in expected {
        *counts.entry(r).or_default() += 1;
    }
    for r in actual {
        *counts.entry(r).or_default() -= 1;
    }
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    for (row, n) in counts {
        for _ in 0..n.max(0) {
            missing.push(row.clone());
        }
        for _ in 0..(-n).max(0) {
            extra.push(row.clone());
        }
    }
    (missing, extra)
}

pub fn read_conf(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conf")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A tiering service over the in-process hotstore `server`: lake under `<dir>/lake`,
/// checkpoints under `<dir>/checkpoints`, polling every 200 ms, and the hotstore's lake-offset
/// registry updated after each commit.
pub fn tiering_service(dir: &Path, server: &Arc<ServerHandle>) -> TieringService {
    let mut config = TieringConfig::new(
        server.local_addr().to_string(),
        dir.join("lake").to_string_lossy().to_string(),
        dir.join("checkpoints"),
    );
    config.poll_interval = Duration::from_millis(200);
    let registry_server = server.clone();
    let registry: RegistryUpdate = Arc::new(
        move |db: &str, table: &str, snapshot: i64, offsets: &[(i32, i64)]| {
            registry_server
                .set_lake_snapshot(db, table, snapshot, offsets)
                .map_err(anyhow::Error::from)
        },
    );
    TieringService::new(config, Some(registry))
}

/// Polls `tiering` until it tiers `tables` tables, something was written, and every table's
/// lake covers its high watermarks; fails after `timeout` with the status it last saw.
pub async fn wait_tiering_caught_up(
    tiering: &TieringService,
    tables: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        tiering.poll_once().await?;
        let status = tiering.status().await?;
        let hot: i64 = status
            .iter()
            .flat_map(|s| s.buckets.values().map(|(h, _)| *h))
            .sum();
        if status.len() == tables && hot > 0 && status.iter().all(|s| s.lag_offsets == 0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("tiering did not catch up within {timeout:?}: {status:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
