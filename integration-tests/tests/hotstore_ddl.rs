//! Databases and tables through the official fluss-rs admin client against silt's hotstore:
//! create, list, describe and drop, and the error codes of duplicates and unknown names.

use anyhow::Result;
use fluss::metadata::{DataTypes, TableDescriptor, TablePath};
use silt_testkit::hotstore::{self, api_code, connect};
use silt_testkit::rows;
use silt_testkit::tables::Table;

/// The descriptor of the log table `shop.orders`, tiered.
fn log_descriptor(buckets: i32) -> Result<TableDescriptor> {
    Table::log("shop", "orders")
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .buckets(buckets)
        .lake("30s")
        .descriptor()
}

fn pk_descriptor(buckets: Option<i32>) -> Result<TableDescriptor> {
    let mut builder = TableDescriptor::builder().schema(rows::user_schema()?);
    if let Some(buckets) = buckets {
        builder = builder.distributed_by(Some(buckets), vec![]);
    }
    Ok(builder.build()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_and_tables_round_trip() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch().await?;
    let admin = connection.get_admin()?;

    // Databases: the default one exists, a new one can be created once.
    assert!(admin.database_exists("fluss").await?);
    admin.create_database("shop", None, false).await?;
    let duplicate = admin
        .create_database("shop", None, false)
        .await
        .unwrap_err();
    assert_eq!(
        api_code(&duplicate),
        Some(6),
        "DatabaseAlreadyExist: {duplicate}"
    );
    admin.create_database("shop", None, true).await?;
    let databases = admin.list_databases().await?;
    assert!(
        databases.contains(&"shop".to_string()) && databases.contains(&"fluss".to_string()),
        "{databases:?}"
    );
    let info = admin.get_database_info("shop").await?;
    assert_eq!(info.database_name(), "shop");
    let unknown = admin.get_database_info("nope").await.unwrap_err();
    assert_eq!(api_code(&unknown), Some(4), "DatabaseNotExist: {unknown}");

    // Tables: a log table with 3 buckets and lake properties, a PK table with default buckets.
    let orders = TablePath::new("shop", "orders");
    let users = TablePath::new("shop", "users");
    admin
        .create_table(&orders, &log_descriptor(3)?, false)
        .await?;
    admin
        .create_table(&users, &pk_descriptor(None)?, false)
        .await?;
    let duplicate = admin
        .create_table(&orders, &log_descriptor(3)?, false)
        .await
        .unwrap_err();
    assert_eq!(
        api_code(&duplicate),
        Some(8),
        "TableAlreadyExist: {duplicate}"
    );
    admin
        .create_table(&orders, &log_descriptor(3)?, true)
        .await?;
    let in_unknown_db = admin
        .create_table(&TablePath::new("nope", "t"), &log_descriptor(1)?, false)
        .await
        .unwrap_err();
    assert_eq!(
        api_code(&in_unknown_db),
        Some(4),
        "DatabaseNotExist: {in_unknown_db}"
    );

    let mut tables = admin.list_tables("shop").await?;
    tables.sort();
    assert_eq!(tables, ["orders", "users"]);
    assert!(admin.table_exists(&orders).await?);
    assert!(
        !admin
            .table_exists(&TablePath::new("shop", "orderz"))
            .await?
    );

    let orders_info = admin.get_table_info(&orders).await?;
    assert_eq!(orders_info.get_num_buckets(), 3);
    // Shown as a custom property, so Fluss clients do not plan a lake union read (see
    // catalog::client_view); silt's own readers take either.
    assert_eq!(
        orders_info.get_properties().get("table.datalake.enabled"),
        None
    );
    assert_eq!(
        orders_info
            .get_custom_properties()
            .get("silt.datalake.enabled")
            .map(String::as_str),
        Some("true")
    );
    assert!(silt_connectors::fluss::is_lake_enabled(&orders_info));
    assert_eq!(
        orders_info
            .get_properties()
            .get("table.datalake.freshness")
            .map(String::as_str),
        Some("30s")
    );
    assert!(!orders_info.has_primary_key());
    let users_info = admin.get_table_info(&users).await?;
    assert!(users_info.has_primary_key());
    // conf/silt.yaml's hotstore.buckets_default, which ServerConfig::default() holds.
    assert_eq!(users_info.get_num_buckets(), 1, "default bucket count");
    assert_eq!(
        users_info.get_bucket_keys(),
        ["id"],
        "bucket keys default to the primary key"
    );
    let schema = admin.get_table_schema(&users, None).await?;
    assert_eq!(schema.schema_id(), users_info.get_schema_id());

    let unknown = admin
        .get_table_info(&TablePath::new("shop", "orderz"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&unknown), Some(7), "TableNotExist: {unknown}");

    // Drop: a non-empty database needs cascade; dropped tables are gone.
    let not_empty = admin.drop_database("shop", false, false).await.unwrap_err();
    assert_eq!(
        api_code(&not_empty),
        Some(5),
        "DatabaseNotEmpty: {not_empty}"
    );
    admin.drop_table(&orders, false).await?;
    let gone = admin.drop_table(&orders, false).await.unwrap_err();
    assert_eq!(api_code(&gone), Some(7), "TableNotExist: {gone}");
    admin.drop_table(&orders, true).await?;
    assert!(!admin.table_exists(&orders).await?);
    admin.drop_database("shop", false, true).await?;
    assert!(!admin.database_exists("shop").await?);
    let gone = admin.drop_database("shop", false, false).await.unwrap_err();
    assert_eq!(api_code(&gone), Some(4), "DatabaseNotExist: {gone}");

    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_survives_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    {
        let connection = connect(&server).await?;
        let admin = connection.get_admin()?;
        admin.create_database("keep", None, false).await?;
        admin
            .create_table(
                &TablePath::new("keep", "t"),
                &pk_descriptor(Some(4))?,
                false,
            )
            .await?;
    }
    server.shutdown().await?;

    let server = hotstore::start(dir.path()).await?;
    let connection = connect(&server).await?;
    let admin = connection.get_admin()?;
    let info = admin.get_table_info(&TablePath::new("keep", "t")).await?;
    assert_eq!(info.get_num_buckets(), 4);
    assert!(info.has_primary_key());
    server.shutdown().await?;
    Ok(())
}
