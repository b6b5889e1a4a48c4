//! The hot store and the official client as this crate's tests start them: a server on an
//! ephemeral port over a scratch directory, a connection to it, partitioned tables and their
//! creation through the client's admin.

use std::path::Path;

use fluss::client::FlussConnection;
use fluss::metadata::{DataType, DataTypes, Schema, TableDescriptor, TablePath};
use fluss::row::GenericRow;

use crate::{Server, ServerConfig, ServerHandle};

/// The product's defaults, on an ephemeral port over `dir`.
pub(crate) fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        bind_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        ..ServerConfig::default()
    }
}

pub(crate) async fn start(dir: &Path) -> ServerHandle {
    Server::start(config(dir)).await.unwrap()
}

/// A server over a fresh scratch directory, and a connection to it.
pub(crate) async fn start_connected() -> (tempfile::TempDir, ServerHandle, FlussConnection) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let connection = connect(&server).await;
    (dir, server, connection)
}

pub(crate) async fn connect(server: &ServerHandle) -> FlussConnection {
    let config = fluss::config::Config {
        bootstrap_servers: server.local_addr().to_string(),
        ..Default::default()
    };
    FlussConnection::new(config).await.unwrap()
}

/// Creates the table `fluss.<name>` and returns its path and id.
pub(crate) async fn create_table(
    connection: &FlussConnection,
    name: &str,
    descriptor: &TableDescriptor,
) -> (TablePath, i64) {
    let admin = connection.get_admin().unwrap();
    let path = TablePath::new("fluss", name);
    admin.create_table(&path, descriptor, false).await.unwrap();
    let table_id = admin.get_table_info(&path).await.unwrap().get_table_id();
    (path, table_id)
}

/// The log table most tests write to: `id INT, name STRING` in `buckets` buckets.
pub(crate) fn log_table(buckets: i32) -> TableDescriptor {
    let schema = Schema::builder()
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .build()
        .unwrap();
    TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(buckets), vec![])
        .build()
        .unwrap()
}

/// Appends the rows `(id, name)` for each of `ids` to a [`log_table`] through the fluss-rs
/// append writer, and waits for their acknowledgement.
pub(crate) async fn append(
    connection: &FlussConnection,
    path: &TablePath,
    ids: std::ops::Range<i32>,
    name: &str,
) {
    let table = connection.get_table(path).await.unwrap();
    let writer = table.new_append().unwrap().create_writer().unwrap();
    for id in ids {
        let mut row = GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, name);
        writer.append(&row).unwrap();
    }
    writer.flush().await.unwrap();
}

/// A table of `columns` partitioned by `keys`, in one bucket, with `properties`.
pub(crate) fn partitioned_table(
    columns: &[(&str, DataType)],
    keys: &[&str],
    properties: &[(&str, &str)],
) -> TableDescriptor {
    let mut schema = Schema::builder();
    for (name, data_type) in columns {
        schema = schema.column(*name, data_type.clone());
    }
    let mut builder = TableDescriptor::builder()
        .schema(schema.build().unwrap())
        .partitioned_by(keys.to_vec())
        .distributed_by(Some(1), vec![]);
    for (key, value) in properties {
        builder = builder.property(*key, *value);
    }
    builder.build().unwrap()
}
