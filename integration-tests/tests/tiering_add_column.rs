//! ADD COLUMN on lake-enabled tables (a log table, a primary-key table whose lake takes
//! deletion vectors, and a log table partitioned by day): the real-time view `db.t` shows the new column at once (null for every
//! row until one has it), the tiering job stops at the first batch of the new schema, the
//! tiering service starts it again under the new schema (restored from its checkpoint) and its
//! sink adds the column to the Delta table, and once tiering has caught up the lake
//! holds every row once, with nulls for the rows written before the column (as python's
//! deltalake reads it too), `db.t` and `db.t$lake` answer the same rows, and `silt verify`
//! answers MATCH (also before the lake has the column).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use fluss::client::FlussConnection;
use fluss::metadata::{AlterTableChanges, DataTypes, PartitionSpec};
use fluss::row::GenericRow;
use silt_connectors::lake::LakeCatalogConfig;
use silt_jobs::query::{QueryConfig, QueryService};
use silt_jobs::tiering::TieringService;
use silt_testkit::hotstore;
use silt_testkit::lake;
use silt_testkit::tables::{self, Table};
use silt_testkit::tiering::{self, Driver};

fn clicks() -> Table {
    Table::log("t", "clicks")
        .column("id", DataTypes::bigint())
        .column("page", DataTypes::string())
        .buckets(2)
        .lake("300ms")
}

fn accounts() -> Table {
    Table::primary_key("t", "accounts", &["id"])
        .column("id", DataTypes::bigint())
        .column("page", DataTypes::string())
        .buckets(2)
        .lake("300ms")
}

/// `t.visits`: clicks partitioned by day (`dt`, after the columns the others have).
fn visits() -> Table {
    Table::log("t", "visits")
        .column("id", DataTypes::bigint())
        .column("page", DataTypes::string())
        .column("dt", DataTypes::string())
        .partitioned_by(&["dt"])
        .buckets(2)
        .lake("300ms")
}

const DAY: &str = "2026-12-03";

fn all_tables() -> [Table; 3] {
    [clicks(), accounts(), visits()]
}

fn add_referrer() -> Result<AlterTableChanges> {
    tables::add_column("referrer", DataTypes::string())
}

/// Writes rows `ids` to every table through `connection` (whose schema the client holds):
/// `(id, "p<id>"[, DAY][, "r<id>"])` appended to clicks and visits, upserted into accounts.
async fn write(connection: &FlussConnection, ids: std::ops::Range<i64>) -> Result<()> {
    for table in all_tables() {
        let handle = connection.get_table(&table.path).await?;
        let fields = handle.get_table_info().get_schema().columns().len();
        let partitioned = table.path.table() == "visits";
        let base = if partitioned { 3 } else { 2 };
        let row = |id: i64| {
            let mut row = GenericRow::new(fields);
            row.set_field(0, id);
            row.set_field(1, format!("p{id}"));
            if partitioned {
                row.set_field(2, DAY.to_string());
            }
            if fields > base {
                row.set_field(base, format!("r{id}"));
            }
            row
        };
        if table.path.table() != "accounts" {
            let writer = handle.new_append()?.create_writer()?;
            for id in ids.clone() {
                writer.append(&row(id))?;
            }
            writer.flush().await?;
        } else {
            let writer = handle.new_upsert()?.create_writer()?;
            for id in ids.clone() {
                writer.upsert(&row(id))?;
            }
            writer.flush().await?;
        }
    }
    Ok(())
}

async fn query(queries: &QueryService, sql: &str) -> Result<Vec<String>> {
    lake::query_rows(queries, sql, Duration::from_secs(30)).await
}

/// `id|page|referrer` of ids `range`, with the referrer of the ids in `with_referrer` (a null
/// renders empty).
fn expected(range: std::ops::Range<i64>, with_referrer: std::ops::Range<i64>) -> Vec<String> {
    let mut rows: Vec<String> = range
        .map(|id| {
            let referrer = if with_referrer.contains(&id) {
                format!("r{id}")
            } else {
                String::new()
            };
            format!("{id}|p{id}|{referrer}")
        })
        .collect();
    rows.sort();
    rows
}

async fn wait_caught_up(service: &TieringService) -> Result<()> {
    tiering::wait_caught_up(service, Driver::Wait, 3, Duration::from_secs(90)).await
}

fn lake_dir(dir: &Path, table: &str) -> std::path::PathBuf {
    dir.join("lake").join("t").join(table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_added_column_reaches_the_lake_and_both_views_agree() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_for_tiering(dir.path(), 2).await?;
    let bootstrap = server.local_addr().to_string();
    let connection = hotstore::connect(&server).await?;
    for table in all_tables() {
        table.create(&connection).await?;
    }
    let day = PartitionSpec::new(HashMap::from([("dt".to_string(), DAY.to_string())]));
    connection
        .get_admin()?
        .create_partition(&visits().path, &day, false)
        .await?;
    write(&connection, 0..100).await?;
    let service = tiering::service(dir.path(), &server);
    wait_caught_up(&service).await?;
    let queries = QueryService::new(QueryConfig::new(LakeCatalogConfig::new(
        bootstrap.clone(),
        dir.path().join("lake").to_string_lossy().to_string(),
    )));

    let admin = connection.get_admin()?;
    for table in all_tables() {
        admin
            .alter_table(&table.path, false, add_referrer()?)
            .await?;
    }
    // Before any row has the column, and before the lake has it: null everywhere, and verify
    // (the hot changelog against the lake) still matches.
    let lake_root = dir.path().join("lake");
    for table in ["clicks", "accounts", "visits"] {
        tiering::verify_match(&bootstrap, &lake_root, "t", table).await?;
        let rows = query(
            &queries,
            &format!("SELECT id, page, referrer FROM t.{table}"),
        )
        .await?;
        ensure!(
            rows == expected(0..100, 0..0),
            "t.{table} right after the alter: {rows:?}"
        );
    }

    // A client that knows schema 2 writes new rows and updates half of the keys.
    let fresh = hotstore::connect(&server).await?;
    write(&fresh, 50..150).await?;
    wait_caught_up(&service).await?;
    let clicks_expected = {
        let mut rows = expected(0..100, 0..0);
        rows.extend(expected(50..150, 50..150));
        rows.sort();
        rows
    };
    let accounts_expected = expected(0..150, 50..150);
    for (table, want) in [
        ("clicks", &clicks_expected),
        ("accounts", &accounts_expected),
        ("visits", &clicks_expected),
    ] {
        let sql = "SELECT id, page, referrer FROM lake";
        let in_delta = lake::delta_rows(&lake_dir(dir.path(), table), sql).await?;
        ensure!(
            &in_delta == want,
            "the Delta table of {table} after the alter: {} rows, first {:?}",
            in_delta.len(),
            in_delta.iter().take(3).collect::<Vec<_>>()
        );
        // An outside reader of the Delta table: the column, null in the rows before it.
        let body = "import pyarrow as pa\n\
                    a = pa.RecordBatchReader.from_stream(t.scan(columns=['id', 'referrer'])).read_all()\n\
                    print(a.column('referrer').null_count, a.num_rows)";
        let uri = lake_dir(dir.path(), table).to_string_lossy().to_string();
        if let Some(printed) = lake::python_deltalake("tiering_add_column", body, &uri) {
            let nulls = want.iter().filter(|row| row.ends_with('|')).count();
            ensure!(
                printed == format!("{nulls} {}", want.len()),
                "python deltalake read {table}: {printed} (nulls, rows)"
            );
        }
        tiering::verify_match(&bootstrap, &lake_root, "t", table).await?;
        for view in [format!("t.{table}"), format!("t.{table}$lake")] {
            let rows = query(&queries, &format!("SELECT id, page, referrer FROM {view}")).await?;
            ensure!(
                &rows == want,
                "{view} once tiering caught up: {} rows, first {:?}",
                rows.len(),
                rows.iter().take(3).collect::<Vec<_>>()
            );
        }
    }
    service.shutdown(Duration::from_secs(30)).await;
    Ok(())
}
