//! Catalog-level handlers: databases, tables, partitions, metadata, writer ids and lake
//! snapshots.

use crate::catalog::{
    DATALAKE_ENABLED, NewColumn, PartitionChange, PartitionEntry, PropertyChange, TableEntry,
};
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::{NODE_ID, Service};
use bytes::Bytes;
use fluss::metadata::{JsonSerde, TableDescriptor};

pub(crate) fn create_database(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: CreateDatabaseRequest = protocol::decode(body, "CreateDatabase")?;
    service.catalog.create_database(
        &request.database_name,
        request.database_json,
        request.ignore_if_exists,
    )?;
    Ok(Empty {})
}

pub(crate) async fn drop_database(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: DropDatabaseRequest = protocol::decode(body, "DropDatabase")?;
    let dropped = service.catalog.drop_database(
        &request.database_name,
        request.ignore_if_not_exists,
        request.cascade,
    )?;
    for table in dropped {
        service.drop_table_data(&table).await;
    }
    Ok(Empty {})
}

pub(crate) fn list_databases(
    service: &Service,
    body: Bytes,
) -> Result<ListDatabasesResponse, ApiError> {
    let request: ListDatabasesRequest = protocol::decode(body, "ListDatabases")?;
    let databases = service.catalog.databases();
    let summaries = if request.include_summary.unwrap_or(false) {
        databases
            .iter()
            .map(|(db, count)| PbDatabaseSummary {
                database_name: db.name.clone(),
                created_time: db.created_ms,
                table_count: *count,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(ListDatabasesResponse {
        database_name: databases.into_iter().map(|(db, _)| db.name).collect(),
        database_summary: summaries,
    })
}

pub(crate) fn database_exists(service: &Service, body: Bytes) -> Result<ExistsResponse, ApiError> {
    let request: DatabaseExistsRequest = protocol::decode(body, "DatabaseExists")?;
    Ok(ExistsResponse {
        exists: service.catalog.database_exists(&request.database_name),
    })
}

/// AlterDatabase (Fluss 1.0): SET a custom property, DELETE (reset) one, and a new comment;
/// APPEND and SUBTRACT are refused, as Fluss refuses them.
pub(crate) fn alter_database(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: AlterDatabaseRequest = protocol::decode(body, "AlterDatabase")?;
    let name = &request.database_name;
    let changes = request
        .config_changes
        .iter()
        .map(|change| property_change(&format!("database {name}"), change))
        .collect::<Result<Vec<_>, _>>()?;
    service.catalog.alter_database(
        name,
        &changes,
        request.comment.as_deref(),
        request.ignore_if_not_exists,
    )?;
    Ok(Empty {})
}

/// GetClusterHealth (Fluss 1.0): one server leads every bucket with its only replica, so every
/// count is the number of buckets it holds, and the cluster is GREEN.
pub(crate) fn get_cluster_health(service: &Service) -> GetClusterHealthResponse {
    let buckets: usize = service
        .catalog
        .tables()
        .iter()
        .filter_map(|table| service.tablets.get(table.id))
        .map(|runtime| runtime.all_buckets().len())
        .sum();
    let buckets = i32::try_from(buckets).unwrap_or(i32::MAX);
    GetClusterHealthResponse {
        num_replicas: buckets,
        in_sync_replicas: buckets,
        num_leader_replicas: buckets,
        active_leader_replicas: buckets,
        status: CLUSTER_GREEN,
    }
}

const CLUSTER_GREEN: i32 = 0;

pub(crate) fn get_database_info(
    service: &Service,
    body: Bytes,
) -> Result<GetDatabaseInfoResponse, ApiError> {
    let request: GetDatabaseInfoRequest = protocol::decode(body, "GetDatabaseInfo")?;
    let database = service.catalog.database(&request.database_name)?;
    Ok(GetDatabaseInfoResponse {
        database_json: database.json,
        created_time: database.created_ms,
        modified_time: database.modified_ms,
    })
}

pub(crate) async fn create_table(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: CreateTableRequest = protocol::decode(body, "CreateTable")?;
    let path = request.table_path;
    // A JSON that does not parse is the catalog's to refuse, with its own message.
    let requested = serde_json::from_slice(&request.table_json)
        .ok()
        .and_then(|json| TableDescriptor::deserialize_json(&json).ok());
    if let Some(descriptor) = requested
        && crate::catalog::is_lake_enabled(descriptor.properties())
    {
        let name = format!("{}.{}", path.database_name, path.table_name);
        check_lake_schema(service, &name, descriptor.schema().row_type()).map_err(|reason| {
            let fix = format!("or create the table without {DATALAKE_ENABLED}");
            ApiError::new(code::INVALID_TABLE, format!("{reason}; {fix}"))
        })?;
    }
    let created = service.catalog.create_table(
        &path.database_name,
        &path.table_name,
        &request.table_json,
        request.ignore_if_exists,
    )?;
    let Some(entry) = created else {
        return Ok(Empty {});
    };
    if let Err(error) = service.tablets.open_table(entry.clone(), Vec::new()).await {
        // Undo the catalog entry so the table is not left without tablets.
        let _ = service
            .catalog
            .drop_table(&entry.database, &entry.name, true);
        service.tablets.drop_table(&entry).await;
        return Err(ApiError::new(
            code::LOG_STORAGE_EXCEPTION,
            format!(
                "cannot create tablets of {}: {error}",
                entry.qualified_name()
            ),
        ));
    }
    service.auto_partition_new_table(&entry).await;
    Ok(Empty {})
}

pub(crate) async fn drop_table(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: DropTableRequest = protocol::decode(body, "DropTable")?;
    let path = request.table_path;
    if let Some(entry) = service.catalog.drop_table(
        &path.database_name,
        &path.table_name,
        request.ignore_if_not_exists,
    )? {
        service.drop_table_data(&entry).await;
    }
    Ok(Empty {})
}

/// AlterTable as Fluss 0.9.1 answers it (`CoordinatorService.alterTable`,
/// `TableDescriptorValidation.validateAlterTableProperties`, `SchemaUpdate`): SET and DELETE
/// (reset) of the alterable `table.*` options and of any custom property (APPEND and SUBTRACT
/// are refused), or nullable columns added at the end ([`Catalog::add_columns`]); drop, rename
/// and modify column are refused, and a request may change properties or the schema, not both.
/// The tiering service sees a table's new `table.datalake.enabled` at its next poll.
///
/// [`Catalog::add_columns`]: crate::catalog::Catalog::add_columns
pub(crate) fn alter_table(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request: AlterTableRequest = protocol::decode(body, "AlterTable")?;
    let path = &request.table_path;
    let name = format!("{}.{}", path.database_name, path.table_name);
    let changes = request
        .config_changes
        .iter()
        .map(|change| property_change(&format!("table {name}"), change))
        .collect::<Result<Vec<_>, _>>()?;
    let refused_changes = [
        ("drop", &request.drop_columns),
        ("rename", &request.rename_columns),
        ("modify", &request.modify_columns),
    ];
    if let Some((kind, columns)) = refused_changes.iter().find(|(_, c)| !c.is_empty()) {
        let column = columns[0].column_name.as_deref().unwrap_or("?");
        return Err(ApiError::new(
            code::INVALID_ALTER_TABLE,
            format!(
                "alter table {name}: {kind} column '{column}' is not supported (Fluss 0.9.1 and \
                 silt evolve a schema by adding nullable columns at the end only); create a new \
                 table with the schema you need"
            ),
        ));
    }
    if !request.add_columns.is_empty() {
        if !changes.is_empty() {
            return Err(ApiError::new(
                code::INVALID_ALTER_TABLE,
                format!(
                    "alter table {name} changes both properties and the schema: a table \
                     alteration applies to one of them; send two requests"
                ),
            ));
        }
        return add_columns(service, &request, &name);
    }
    let enables_lake = changes.iter().any(|change| {
        matches!(change, PropertyChange::Set { key, value }
            if key == DATALAKE_ENABLED && value.eq_ignore_ascii_case("true"))
    });
    if enables_lake && let Ok(entry) = super::table_at(service, path) {
        check_lake_schema(service, &name, entry.descriptor.schema().row_type()).map_err(
            |reason| {
                let fix = "the table stays as it is, without the lake";
                ApiError::new(code::INVALID_ALTER_TABLE, format!("{reason}; {fix}"))
            },
        )?;
        check_lake_can_start(service, &entry)?;
    }
    service.catalog.alter_table_properties(
        &path.database_name,
        &path.table_name,
        &changes,
        request.ignore_if_not_exists,
    )?;
    Ok(Empty {})
}

/// A primary-key table's lake is built from its whole changelog (the last image per key): it
/// can start, or resume, only where the hot store still holds every changelog offset the lake
/// lacks. Turning the lake on is refused for a table whose changelog retention cut past its
/// lake's offsets (0 without a lake), naming the bucket. (A log table's new lake starts at the
/// log start: history before it is gone by the table's TTL, and no lake skips an offset.)
fn check_lake_can_start(service: &Service, entry: &TableEntry) -> Result<(), ApiError> {
    if !entry.has_primary_key() {
        return Ok(());
    }
    let Some(table) = service.tablets.get(entry.id) else {
        return Ok(());
    };
    let lake = service.lake.get(entry.id);
    for bucket in table.all_buckets() {
        let tiered = lake
            .as_ref()
            .and_then(|l| {
                l.tiered_offsets()
                    .find(|(p, b, _)| *p == bucket.partition_id && *b == bucket.id)
            })
            .map_or(0, |(_, _, offset)| offset);
        let log_start = bucket.log.log_start_offset();
        if log_start > tiered {
            return Err(ApiError::new(
                code::INVALID_ALTER_TABLE,
                format!(
                    "table {} cannot turn {DATALAKE_ENABLED} on: its {} changelog starts at offset {log_start}, but its lake holds it only up to {tiered}, and a primary-key lake is built from the whole changelog (hot retention cut the rest while the table had no lake); copy the table's rows into a new lake-enabled table (a job with a fluss-sink, or INSERT INTO ... SELECT in Flink)",
                    entry.qualified_name(),
                    bucket.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Adds AlterTable's columns to a table and gives its open tablets the new schema./// Adds AlterTable's columns to a table and gives its open tablets the new schema. A
/// lake-enabled table's new columns must be ones its lake can store; its tiering job meets the
/// first batch with them, restarts under the new schema and adds them to the Delta table.
fn add_columns(
    service: &Service,
    request: &AlterTableRequest,
    name: &str,
) -> Result<Empty, ApiError> {
    let path = &request.table_path;
    let lake_check = |entry: &TableEntry| {
        if !crate::catalog::is_lake_enabled(entry.descriptor.properties()) {
            return Ok(());
        }
        check_lake_schema(service, name, entry.descriptor.schema().row_type())
            .map_err(|reason| format!("{reason}; the table keeps its schema"))
    };
    let columns: Vec<NewColumn> = request
        .add_columns
        .iter()
        .map(|column| NewColumn {
            name: column.column_name.clone(),
            data_type_json: column.data_type_json.clone(),
            comment: column.comment.clone(),
            position: column.column_position_type,
            aggregation: column.agg_function_type.clone(),
        })
        .collect();
    let Some(entry) = service.catalog.add_columns(
        &path.database_name,
        &path.table_name,
        &columns,
        request.ignore_if_not_exists,
        &lake_check,
    )?
    else {
        return Ok(Empty {});
    };
    service.tablets.evolve(entry).map_err(|e| {
        ApiError::new(
            code::UNKNOWN_SERVER_ERROR,
            format!("alter table {name}: the new schema is kept, but its tablets: {e}"),
        )
    })?;
    Ok(Empty {})
}

/// Why `table` cannot be tiered with columns `row_type`, as the message of the refusal
/// (`ServerConfig::lake_schema_check`; without one, every table can).
fn check_lake_schema(
    service: &Service,
    table: &str,
    row_type: &fluss::metadata::RowType,
) -> Result<(), String> {
    let Some(check) = &service.config.lake_schema_check else {
        return Ok(());
    };
    check.check(row_type).map_err(|reason| {
        format!("table {table} has {DATALAKE_ENABLED}=true but its lake cannot store it: {reason}")
    })
}

/// One change of an AlterTable or AlterDatabase; `what` names the altered thing (`table db.t`).
fn property_change(what: &str, change: &PbAlterConfig) -> Result<PropertyChange, ApiError> {
    let key = change.config_key.clone();
    match (change.op_type, &change.config_value) {
        (ALTER_CONFIG_SET, Some(value)) => Ok(PropertyChange::Set {
            key,
            value: value.clone(),
        }),
        (ALTER_CONFIG_SET, None) => Err(ApiError::new(
            code::INVALID_CONFIG,
            format!("alter {what}: setting '{key}' needs a value; to reset it, use reset"),
        )),
        (ALTER_CONFIG_DELETE, _) => Ok(PropertyChange::Reset { key }),
        (op_type, _) => Err(ApiError::new(
            code::INVALID_ALTER_TABLE,
            format!(
                "alter {what}: unsupported alter config op type {op_type} for '{key}'; \
                 use set (0) or reset (1)"
            ),
        )),
    }
}

/// `PbAlterConfig.op_type` values Fluss accepts (APPEND = 2 and SUBTRACT = 3 it refuses).
const ALTER_CONFIG_SET: i32 = 0;
const ALTER_CONFIG_DELETE: i32 = 1;

pub(crate) fn get_table_info(
    service: &Service,
    body: Bytes,
) -> Result<GetTableInfoResponse, ApiError> {
    let request: TablePathRequest = protocol::decode(body, "GetTableInfo")?;
    let table = super::table_at(service, &request.table_path)?;
    Ok(GetTableInfoResponse {
        table_id: table.id,
        schema_id: table.schema_id,
        table_json: table.client_json.clone(),
        created_time: table.created_ms,
        modified_time: table.modified_ms,
        remote_data_dir: None,
        bucket_count_epoch: None,
    })
}

pub(crate) fn list_tables(service: &Service, body: Bytes) -> Result<ListTablesResponse, ApiError> {
    let request: ListTablesRequest = protocol::decode(body, "ListTables")?;
    Ok(ListTablesResponse {
        table_name: service.catalog.list_tables(&request.database_name)?,
    })
}

/// ListPartitionInfos as Fluss answers it: the table's partitions (those matching the partial
/// spec, when one is given), TABLE_NOT_PARTITIONED for a table without partition keys.
pub(crate) fn list_partition_infos(
    service: &Service,
    body: Bytes,
) -> Result<ListPartitionInfosResponse, ApiError> {
    let request: ListPartitionInfosRequest = protocol::decode(body, "ListPartitionInfos")?;
    let path = &request.table_path;
    let partial = request.partial_partition_spec.as_ref().map(spec_pairs);
    let (table, partitions) = service.catalog.list_partitions(
        &path.database_name,
        &path.table_name,
        partial.as_deref(),
    )?;
    let keys = table.descriptor.partition_keys();
    Ok(ListPartitionInfosResponse {
        partitions_info: partitions
            .iter()
            .map(|partition| PbPartitionInfo {
                partition_id: partition.id,
                partition_spec: PbPartitionSpec {
                    partition_key_values: keys
                        .iter()
                        .zip(partition.values())
                        .map(|(key, value)| PbKeyValue {
                            key: key.clone(),
                            value: value.to_string(),
                        })
                        .collect(),
                },
            })
            .collect(),
        system_partitions_included: None,
    })
}

/// CreatePartition (see [`Service::create_partition`]).
pub(crate) async fn create_partition(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request = PartitionRequestBody::decode(body, "CreatePartition")?;
    service.create_partition(request.change()).await?;
    Ok(Empty {})
}

/// DropPartition (see [`Service::drop_partition`]).
pub(crate) async fn drop_partition(service: &Service, body: Bytes) -> Result<Empty, ApiError> {
    let request = PartitionRequestBody::decode(body, "DropPartition")?;
    service.drop_partition(request.change()).await?;
    Ok(Empty {})
}

/// A decoded CreatePartition or DropPartition request: the partition and the request's
/// `ignore_if_not_exists` flag.
struct PartitionRequestBody {
    path: PbTablePath,
    spec: Vec<(String, String)>,
    ignore: bool,
}

impl PartitionRequestBody {
    /// Decodes a CreatePartition or DropPartition request (`what`).
    fn decode(body: Bytes, what: &str) -> Result<Self, ApiError> {
        let request: PartitionRequest = protocol::decode(body, what)?;
        Ok(PartitionRequestBody {
            spec: spec_pairs(&request.partition_spec),
            path: request.table_path,
            ignore: request.ignore_if_not_exists,
        })
    }

    fn change(&self) -> PartitionChange<'_> {
        PartitionChange {
            database: &self.path.database_name,
            table: &self.path.table_name,
            spec: &self.spec,
            ignore: self.ignore,
        }
    }
}

fn spec_pairs(spec: &PbPartitionSpec) -> Vec<(String, String)> {
    spec.partition_key_values
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

pub(crate) fn table_exists(service: &Service, body: Bytes) -> Result<ExistsResponse, ApiError> {
    let request: TablePathRequest = protocol::decode(body, "TableExists")?;
    let exists = super::table_at(service, &request.table_path).is_ok();
    Ok(ExistsResponse { exists })
}

pub(crate) fn get_table_schema(
    service: &Service,
    body: Bytes,
) -> Result<GetTableSchemaResponse, ApiError> {
    let request: GetTableSchemaRequest = protocol::decode(body, "GetTableSchema")?;
    let table = super::table_at(service, &request.table_path)?;
    let schema_id = request.schema_id.unwrap_or(table.schema_id);
    let Some(schema) = table.schema_json(schema_id) else {
        return Err(ApiError::new(
            code::SCHEMA_NOT_EXIST,
            format!(
                "table {} has no schema {schema_id} (its schemas are 1 to {})",
                table.qualified_name(),
                table.schema_id
            ),
        ));
    };
    let schema_json = serde_json::to_vec(&schema)
        .map_err(|e| ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("schema json: {e}")))?;
    Ok(GetTableSchemaResponse {
        schema_id,
        schema_json,
    })
}

/// Metadata as Fluss answers it: each named table (a partitioned table without buckets of its
/// own), and each partition named by path or by id with its buckets. An unknown partition
/// fails the whole request with PARTITION_NOT_EXISTS, which clients take as "not created yet".
pub(crate) fn metadata(service: &Service, body: Bytes) -> Result<MetadataResponse, ApiError> {
    let request: MetadataRequest = protocol::decode(body, "Metadata")?;
    let mut table_metadata = Vec::with_capacity(request.table_path.len());
    for path in &request.table_path {
        let table = super::table_at(service, path)?;
        table_metadata.push(table_metadata_of(&table));
    }
    let mut partition_metadata = Vec::new();
    for path in &request.partitions_path {
        let (table, partition) = partition_of_path(service, path)?;
        partition_metadata.push(partition_metadata_of(&table, &partition));
    }
    for &id in &request.partitions_id {
        if partition_metadata.iter().any(|p| p.partition_id == id) {
            continue;
        }
        let (table, partition) = service.catalog.partition_by_id(id)?;
        partition_metadata.push(partition_metadata_of(&table, &partition));
    }
    Ok(MetadataResponse {
        coordinator_server: Some(service.server_node()),
        tablet_servers: vec![service.server_node()],
        table_metadata,
        partition_metadata,
    })
}

fn partition_of_path(
    service: &Service,
    path: &PbPhysicalTablePath,
) -> Result<crate::catalog::TablePartition, ApiError> {
    let table = format!("{}.{}", path.database_name, path.table_name);
    let Some(name) = &path.partition_name else {
        return Err(ApiError::new(
            code::PARTITION_NOT_EXISTS,
            format!("the partition path of {table} names no partition"),
        ));
    };
    service
        .catalog
        .partition_by_name(&path.database_name, &path.table_name, name)
        .map_err(|error| match error.code {
            // As Fluss, in its words (clients match them): a partition of a table that does not
            // exist does not exist either.
            code::TABLE_NOT_EXIST | code::PARTITION_NOT_EXISTS => ApiError::new(
                code::PARTITION_NOT_EXISTS,
                format!("Table partition '{table}(p={name})' does not exist."),
            ),
            _ => error,
        })
}

pub(crate) fn init_writer(service: &Service, body: Bytes) -> Result<InitWriterResponse, ApiError> {
    let request: InitWriterRequest = protocol::decode(body, "InitWriter")?;
    for path in &request.table_path {
        super::table_at(service, path)?;
    }
    Ok(InitWriterResponse {
        writer_id: service.next_writer_id(),
    })
}

pub(crate) fn get_lake_snapshot(
    service: &Service,
    body: Bytes,
) -> Result<GetLakeSnapshotResponse, ApiError> {
    let request: GetLakeSnapshotRequest = protocol::decode(body, "GetLakeSnapshot")?;
    let table = super::table_at(service, &request.table_path)?;
    let snapshot = service.lake.get(table.id).ok_or_else(|| {
        ApiError::new(
            code::LAKE_SNAPSHOT_NOT_EXIST,
            format!(
                "table {} has no lake snapshot yet (tiering has not committed it)",
                table.qualified_name()
            ),
        )
    })?;
    if let Some(wanted) = request.snapshot_id
        && wanted != snapshot.snapshot_id
    {
        return Err(ApiError::new(
            code::LAKE_SNAPSHOT_NOT_EXIST,
            format!(
                "lake snapshot {wanted} of {} is not kept (latest is {})",
                table.qualified_name(),
                snapshot.snapshot_id
            ),
        ));
    }
    Ok(GetLakeSnapshotResponse {
        table_id: table.id,
        snapshot_id: snapshot.snapshot_id,
        bucket_snapshots: snapshot
            .tiered_offsets()
            .map(
                |(partition_id, bucket_id, offset)| PbLakeSnapshotForBucket {
                    partition_id,
                    bucket_id,
                    log_offset: Some(offset),
                },
            )
            .collect(),
    })
}

fn table_metadata_of(table: &TableEntry) -> PbTableMetadata {
    // A partitioned table's buckets are its partitions' (as in Fluss, which assigns none to
    // the table itself).
    let bucket_metadata = if table.is_partitioned() {
        Vec::new()
    } else {
        buckets_metadata(table.bucket_count)
    };
    PbTableMetadata {
        table_path: PbTablePath {
            database_name: table.database.clone(),
            table_name: table.name.clone(),
        },
        table_id: table.id,
        schema_id: table.schema_id,
        table_json: table.client_json.clone(),
        bucket_metadata,
        created_time: table.created_ms,
        modified_time: table.modified_ms,
    }
}

fn partition_metadata_of(table: &TableEntry, partition: &PartitionEntry) -> PbPartitionMetadata {
    PbPartitionMetadata {
        table_id: table.id,
        partition_name: partition.name.clone(),
        partition_id: partition.id,
        bucket_metadata: buckets_metadata(table.bucket_count),
    }
}

/// Every bucket led by this node, the only replica.
fn buckets_metadata(bucket_count: i32) -> Vec<PbBucketMetadata> {
    (0..bucket_count)
        .map(|bucket_id| PbBucketMetadata {
            bucket_id,
            leader_id: Some(NODE_ID),
            replica_id: vec![NODE_ID],
            leader_epoch: Some(0),
            bucket_epoch: Some(0),
            isr: vec![NODE_ID],
        })
        .collect()
}

pub(crate) fn empty_security_token() -> GetFileSystemSecurityTokenResponse {
    GetFileSystemSecurityTokenResponse {
        schema: "file".to_string(),
        token: Vec::new(),
        expiration_time: None,
        addition_info: Vec::new(),
    }
}
