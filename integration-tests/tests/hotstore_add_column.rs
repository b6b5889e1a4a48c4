//! ALTER TABLE ... ADD COLUMN through the official fluss-rs client, as Apache Fluss 0.9.1 evolves
//! a schema (`SchemaUpdate`): a nullable column added at the end makes schema 2, schema 1 stays
//! readable by id, and rows written under schema 1 (before the change, and by a writer that
//! still holds schema 1 after it) read back with a null in the new column: through a scan, a
//! projected scan, a lookup and a primary-key table's changelog, before and after a restart.
//! What Fluss refuses (a NOT NULL column, a taken name, another position, drop/rename/modify)
//! silt refuses by name. (Lake-enabled tables: tiering_add_column.rs.)

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::raw_fluss;
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::{AlterTableChanges, DataType, DataTypes, TablePath};
use fluss::record::ScanRecord;
use fluss::row::{GenericRow, InternalRow};
use prost::Message;
use silt_hotstore::ServerHandle;
use silt_hotstore::codec::Batch;
use silt_hotstore::protocol::messages::{
    AlterTableRequest, ErrorResponse, FetchLogRequest, FetchLogResponse, PbAddColumn,
    PbFetchLogReqForBucket, PbFetchLogReqForTable, PbTablePath,
};
use silt_hotstore::protocol::{api, code};
use silt_testkit::changelog;
use silt_testkit::hotstore::{self, api_code};
use silt_testkit::scan::Read;
use silt_testkit::tables::{self, Table};
use tempfile::TempDir;

const READ_TIMEOUT: Duration = Duration::from_secs(30);

fn add_column(name: &str, data_type: DataType) -> Result<AlterTableChanges> {
    silt_testkit::tables::add_column(name, data_type)
}

fn row(values: Vec<Option<String>>) -> GenericRow<'static> {
    let mut row = GenericRow::new(values.len());
    for (pos, value) in values.into_iter().enumerate() {
        if let Some(value) = value {
            row.set_field(pos, value);
        }
    }
    row
}

fn text(value: &str) -> Option<String> {
    Some(value.to_string())
}

/// A row the client read, as text (`-` for a null), for comparison.
fn shown(row: &dyn InternalRow, fields: usize) -> Result<String> {
    let mut parts = Vec::with_capacity(fields);
    for pos in 0..fields {
        parts.push(if row.is_null_at(pos)? {
            "-".to_string()
        } else {
            row.get_string(pos)?.to_string()
        });
    }
    Ok(parts.join(","))
}

/// Every row of bucket 0 of `path` from the earliest offset, through a new connection (so the
/// client knows the table's current schema), optionally projected.
async fn scan(
    server: &ServerHandle,
    path: &TablePath,
    projection: Option<&[usize]>,
) -> Result<Vec<String>> {
    let connection = hotstore::connect(server).await?;
    let table = connection.get_table(path).await?;
    let end = connection
        .get_admin()?
        .list_offsets(path, &[0], fluss::rpc::message::OffsetSpec::Latest)
        .await?[&0];
    let mut scan = table.new_scan();
    if let Some(projection) = projection {
        scan = scan.project(projection)?;
    }
    let fields = projection.map_or(
        table.get_table_info().get_schema().columns().len(),
        <[usize]>::len,
    );
    let scanner = scan.create_log_scanner()?;
    scanner.subscribe(0, EARLIEST_OFFSET).await?;
    Read::new(&format!("scan of {path}"), usize::try_from(end)?)
        .poll(Duration::from_millis(200))
        .timeout(READ_TIMEOUT)
        .records(&scanner, |record| shown(record.row(), fields))
        .await
}

/// The schema id of each batch of bucket 0 of table `table_id`, as the server stores them (a
/// raw FetchLog from offset 0): what shows that a writer of schema 1 wrote schema 1.
async fn batch_schema_ids(server: &ServerHandle, table_id: i64) -> Result<Vec<i16>> {
    let request = FetchLogRequest {
        follower_server_id: -1,
        max_bytes: 1 << 20,
        tables_req: vec![PbFetchLogReqForTable {
            table_id,
            projection_pushdown_enabled: false,
            projected_fields: Vec::new(),
            buckets_req: vec![PbFetchLogReqForBucket {
                partition_id: None,
                bucket_id: 0,
                fetch_offset: 0,
                max_fetch_bytes: 1 << 20,
            }],
            filter_predicate: None,
            filter_schema_id: None,
        }],
        max_wait_ms: Some(0),
        min_bytes: None,
    };
    let addr = server.local_addr().to_string();
    let (success, body) = raw_fluss::call(&addr, api::FETCH_LOG, &request.encode_to_vec()).await?;
    ensure!(
        success,
        "FetchLog failed: {:?}",
        ErrorResponse::decode(body)
    );
    let response = FetchLogResponse::decode(body)?;
    let records = response.tables_resp[0].buckets_resp[0]
        .records
        .clone()
        .context("no records")?;
    Ok(Batch::split(records, true)?
        .iter()
        .map(Batch::schema_id)
        .collect())
}

/// A hot store over a scratch directory holding `table` (and its database), and a connection
/// to it.
async fn start_with(table: &Table) -> Result<(TempDir, ServerHandle, FlussConnection)> {
    let (dir, server, connection) = hotstore::scratch().await?;
    table.create(&connection).await?;
    Ok((dir, server, connection))
}

fn clicks() -> Table {
    Table::log("shop", "clicks")
        .column("user", DataTypes::string())
        .column("page", DataTypes::string())
        .buckets(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_table_gains_a_column_and_reads_its_older_rows_with_null() -> Result<()> {
    let path = clicks().path;
    let (dir, server, connection) = start_with(&clicks()).await?;
    let admin = connection.get_admin()?;
    // The writer of schema 1 has its own connection: one whose metadata the admin's calls
    // below refresh would write schema 2.
    let old_connection = hotstore::connect(&server).await?;
    let old_writer = tables::appender(&old_connection, &path).await?;
    old_writer.append(&row(vec![text("ann"), text("/a")]))?;
    old_writer.append(&row(vec![text("bob"), text("/b")]))?;
    old_writer.flush().await?;

    admin
        .alter_table(&path, false, add_column("referrer", DataTypes::string())?)
        .await?;
    let info = admin.get_table_info(&path).await?;
    ensure!(
        info.get_schema_id() == 2 && info.get_schema().columns().len() == 3,
        "after ADD COLUMN: {info:?}"
    );
    let first = admin.get_table_schema(&path, Some(1)).await?;
    let second = admin.get_table_schema(&path, Some(2)).await?;
    ensure!(
        first.schema_id() == 1
            && first.schema().columns().len() == 2
            && second.schema().columns().len() == 3
            && second.schema().columns()[2].id() > first.schema().highest_field_id(),
        "schemas by id: {first:?} / {second:?}"
    );
    let missing = admin.get_table_schema(&path, Some(3)).await.err();
    ensure!(
        missing.as_ref().and_then(api_code) == Some(code::SCHEMA_NOT_EXIST),
        "schema 3: {missing:?}"
    );

    // A writer that still holds schema 1 keeps writing: its batches keep their schema id.
    old_writer
        .append(&row(vec![text("cy"), text("/c")]))
        .context("schema 1's writer after the change")?;
    old_writer
        .flush()
        .await
        .context("schema 1's writer after the change")?;
    let fresh = hotstore::connect(&server).await?;
    let writer = tables::appender(&fresh, &path).await?;
    writer.append(&row(vec![text("dee"), text("/d"), text("news")]))?;
    writer.append(&row(vec![text("eve"), text("/e"), None]))?;
    writer.flush().await?;

    let table_id = info.get_table_id();
    let ids = batch_schema_ids(&server, table_id).await?;
    ensure!(ids == [1, 1, 2], "the batches' schema ids: {ids:?}");
    let expected = ["ann,/a,-", "bob,/b,-", "cy,/c,-", "dee,/d,news", "eve,/e,-"];
    let projected = ["ann,-", "bob,-", "cy,-", "dee,news", "eve,-"];
    let scanned = scan(&server, &path, None).await.context("scan")?;
    ensure!(scanned == expected, "scan: {scanned:?}");
    let scanned = scan(&server, &path, Some(&[0, 2])).await?;
    ensure!(scanned == projected, "projected scan: {scanned:?}");

    drop((old_writer, writer));
    server.shutdown().await?;
    let server = hotstore::start(dir.path()).await?;
    ensure!(
        scan(&server, &path, None).await? == expected,
        "scan after a restart"
    );
    let connection = hotstore::connect(&server).await?;
    let first = connection
        .get_admin()?
        .get_table_schema(&path, Some(1))
        .await?;
    ensure!(
        first.schema().columns().len() == 2,
        "schema 1 after a restart: {first:?}"
    );
    server.shutdown().await?;
    Ok(())
}

fn accounts() -> Table {
    Table::primary_key("shop", "accounts", &["id"])
        .column("id", DataTypes::string())
        .column("name", DataTypes::string())
        .buckets(1)
}

async fn lookup(connection: &FlussConnection, path: &TablePath, id: &str) -> Result<String> {
    let table = connection.get_table(path).await?;
    let mut lookuper = table.new_lookup()?.create_lookuper()?;
    let fields = table.get_table_info().get_schema().columns().len();
    let result = lookuper.lookup(&row(vec![text(id)])).await?;
    match result.get_single_row()? {
        Some(found) => shown(&found, fields),
        None => Ok("absent".to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_table_gains_a_column_and_merges_older_rows_into_it() -> Result<()> {
    let path = accounts().path;
    let (dir, server, connection) = start_with(&accounts()).await?;
    let old_connection = hotstore::connect(&server).await?;
    let old_writer = tables::upserter(&old_connection, &path).await?;
    for (id, name) in [("1", "ann"), ("2", "bob"), ("3", "cy")] {
        old_writer.upsert(&row(vec![text(id), text(name)]))?;
    }
    old_writer.flush().await?;

    connection
        .get_admin()?
        .alter_table(&path, false, add_column("tier", DataTypes::string())?)
        .await?;
    let fresh = hotstore::connect(&server).await?;
    ensure!(
        lookup(&fresh, &path, "1").await? == "1,ann,-",
        "a row of schema 1"
    );
    let writer = tables::upserter(&fresh, &path).await?;
    writer.upsert(&row(vec![text("1"), text("ann"), text("gold")]))?;
    writer.flush().await?;
    // Schema 1's writer updates a row written under schema 2: its row has no tier, so the
    // tier is null afterwards, as a whole-row upsert of schema 2 with a null tier would be.
    old_writer.upsert(&row(vec![text("2"), text("bobby")]))?;
    old_writer.flush().await?;
    writer.delete(&row(vec![text("3"), None, None]))?;
    writer.flush().await?;

    let expect_current = |connection: FlussConnection, when: &'static str| {
        let path = path.clone();
        async move {
            for (id, expected) in [("1", "1,ann,gold"), ("2", "2,bobby,-"), ("3", "absent")] {
                let found = lookup(&connection, &path, id).await?;
                ensure!(
                    found == expected,
                    "{when}: lookup {id}: {found} (expected {expected})"
                );
            }
            Ok::<_, anyhow::Error>(())
        }
    };
    expect_current(hotstore::connect(&server).await?, "after the writes").await?;

    let changes = changelog::read(&fresh, &path, 1, READ_TIMEOUT, |record: &ScanRecord| {
        shown(record.row(), 3)
    })
    .await?;
    let changes: Vec<String> = changes
        .iter()
        .map(|c| format!("{}:{}", c.change_type, c.row))
        .collect();
    let expected = [
        "1:1,ann,-",
        "1:2,bob,-",
        "1:3,cy,-",
        "2:1,ann,-",
        "3:1,ann,gold",
        "2:2,bob,-",
        "3:2,bobby,-",
        "4:3,cy,-",
    ];
    ensure!(changes == expected, "changelog: {changes:?}");

    drop((old_writer, writer, fresh, connection));
    server.shutdown().await?;
    let server = hotstore::start(dir.path()).await?;
    expect_current(hotstore::connect(&server).await?, "after a restart").await?;
    server.shutdown().await?;
    Ok(())
}

/// An AlterTable sent as is, for what fluss-rs cannot send (another position): its error code.
async fn raw_add_column(
    server: &ServerHandle,
    path: &TablePath,
    column: PbAddColumn,
) -> Result<i32> {
    let request = AlterTableRequest {
        table_path: PbTablePath {
            database_name: path.database().to_string(),
            table_name: path.table().to_string(),
        },
        ignore_if_not_exists: false,
        config_changes: Vec::new(),
        add_columns: vec![column],
        drop_columns: Vec::new(),
        rename_columns: Vec::new(),
        modify_columns: Vec::new(),
    };
    let addr = server.local_addr().to_string();
    let (success, body) =
        raw_fluss::call(&addr, api::ALTER_TABLE, &request.encode_to_vec()).await?;
    ensure!(
        !success,
        "{column_name} was accepted",
        column_name = request.add_columns[0].column_name
    );
    Ok(ErrorResponse::decode(body)?.error_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_fluss_refuses_to_add_is_refused_by_name_and_changes_nothing() -> Result<()> {
    let path = clicks().path;
    let (_dir, server, connection) = start_with(&clicks()).await?;
    let admin = connection.get_admin()?;

    let refused = |outcome: Result<(), fluss::error::Error>, needle: &str, what: &str| {
        let error = outcome
            .err()
            .with_context(|| format!("{what} was accepted"))?;
        let message = error.to_string();
        ensure!(
            api_code(&error) == Some(code::INVALID_ALTER_TABLE) && message.contains(needle),
            "{what}: {message}"
        );
        Ok(())
    };
    refused(
        admin
            .alter_table(
                &path,
                false,
                add_column("n", DataTypes::int().as_non_nullable())?,
            )
            .await,
        "must be nullable",
        "a NOT NULL column",
    )?;
    refused(
        admin
            .alter_table(&path, false, add_column("page", DataTypes::int())?)
            .await,
        "already exists",
        "a taken name",
    )?;
    refused(
        admin
            .alter_table(&path, false, silt_testkit::tables::drop_column("page"))
            .await,
        "drop column 'page' is not supported",
        "a dropped column",
    )?;
    let first = PbAddColumn {
        column_name: "n".into(),
        data_type_json: br#"{"type":"INTEGER"}"#.to_vec(),
        comment: None,
        column_position_type: 1,
        agg_function_type: None,
    };
    ensure!(
        raw_add_column(&server, &path, first).await? == code::INVALID_ALTER_TABLE,
        "FIRST"
    );
    let garbled = PbAddColumn {
        column_name: "n".into(),
        data_type_json: b"not json".to_vec(),
        comment: None,
        column_position_type: 0,
        agg_function_type: None,
    };
    ensure!(
        raw_add_column(&server, &path, garbled).await? == code::INVALID_ALTER_TABLE,
        "a data type that is not JSON"
    );
    let info = admin.get_table_info(&path).await?;
    ensure!(
        info.get_schema_id() == 1,
        "a refusal changed {path}: {info:?}"
    );
    server.shutdown().await?;
    Ok(())
}
