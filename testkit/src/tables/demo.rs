//! The `demo` tables of the example pipelines in `conf/pipelines/` and `conf/jobs/`:
//! `demo.orders` (log) and `demo.customers` (primary key), shaped as `silt up --demo` creates
//! them so the examples run against the demo as the README's quickstart shows, and
//! `demo.customers_clean` (primary key), the target of `customers-to-silt.yaml`; seeded writers
//! for them; and the rows each example pipeline must produce, computed from what was written by
//! a model that shares no code with the pipelines.

use std::collections::BTreeMap;

use anyhow::Result;
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, TablePath};
use fluss::row::GenericRow;

use super::Table;

/// The database of the example tables, as `silt up --demo` names it.
pub const DATABASE: &str = "demo";

/// Customer keys are `0..CUSTOMER_KEYS`.
pub const CUSTOMER_KEYS: i64 = 40;

/// `demo.orders` (log, 3 buckets), `demo.customers` (primary key, 2 buckets) and
/// `demo.customers_clean` (primary key, 3 buckets), not tiered; tables that exist are left as
/// they are.
pub async fn create_tables(connection: &FlussConnection) -> Result<()> {
    orders("orders").create_if_missing(connection).await?;
    Table::primary_key(DATABASE, "customers", &["customer_id"])
        .column("customer_id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("balance", DataTypes::double())
        .buckets(2)
        .create_if_missing(connection)
        .await?;
    Table::primary_key(DATABASE, "customers_clean", &["customer_id"])
        .column("customer_id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .column("balance_cents", DataTypes::bigint())
        .create_if_missing(connection)
        .await?;
    Ok(())
}

/// `demo.<name>`: a log table of 3 buckets with the columns of `demo.orders` (`order_id`,
/// `customer_id`, `amount`, `status`), to write [`order`] rows into.
pub fn orders(name: &str) -> Table {
    Table::log(DATABASE, name)
        .buckets(3)
        .column("order_id", DataTypes::bigint())
        .column("customer_id", DataTypes::bigint())
        .column("amount", DataTypes::double())
        .column("status", DataTypes::string())
}

/// Order `id`: `(customer_id, amount, status)`.
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

/// Writes [`order`] rows into `demo.<table>` (a table with the columns of `demo.orders`).
pub async fn write_orders_to(
    connection: &FlussConnection,
    table: &str,
    ids: std::ops::Range<i64>,
) -> Result<()> {
    let table = connection
        .get_table(&TablePath::new(DATABASE, table))
        .await?;
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
        .get_table(&TablePath::new(DATABASE, "customers"))
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
    crate::lake::sorted(
        customers_model(n)
            .into_iter()
            .map(|(k, (name, balance))| format!("{k}|{name}|{balance}"))
            .collect(),
    )
}

/// conf/pipelines/customers-to-silt.yaml: `customer_id|NAME|balance_cents`.
pub fn expected_customers_clean(n: i64) -> Vec<String> {
    crate::lake::sorted(
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
    crate::lake::sorted(
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
