//! Request dispatch and the catalog-level handlers (ApiVersions, Metadata, DDL, lake snapshots).
//!
//! One silt process plays both Fluss roles: it advertises itself as the coordinator and as the
//! only tablet server (node 0), and it leads every bucket. ApiVersions leaves `server_type`
//! unset, so a client accepts the same endpoint as either role.

use crate::catalog::{Catalog, TableEntry};
use crate::lake::LakeRegistry;
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, RequestHeader, api, code};
use crate::server::ServerConfig;
use crate::tablets::{TableRuntime, Tablets};
use bytes::Bytes;
use prost::Message;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// The node id silt advertises for both its coordinator and its tablet-server role.
pub const NODE_ID: i32 = 0;

pub struct Service {
    pub(crate) config: ServerConfig,
    pub(crate) catalog: Catalog,
    pub(crate) tablets: Tablets,
    lake: LakeRegistry,
    advertised_host: String,
    port: u16,
    next_writer_id: AtomicI64,
}

impl Service {
    pub async fn open(
        config: ServerConfig,
        advertised_host: String,
        port: u16,
    ) -> crate::Result<Service> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| crate::Error::Io {
            path: config.data_dir.clone(),
            source,
        })?;
        let catalog = Catalog::open(
            &config.data_dir,
            config.default_bucket_count,
            config.bucket_count_max,
        )?;
        let tablets = Tablets::open(config.data_dir.join("tables"), config.log, config.kv)?;
        for table in catalog.tables() {
            tablets.open_table(table).await?;
        }
        let lake = LakeRegistry::open(&config.data_dir)?;
        // A new writer id must differ from every id whose state the logs still hold (a reused
        // id would have its sequence 0 answered as a duplicate of the old writer's batch): above
        // the clock-based start of the last run and above every id a log remembers.
        let next_writer_id = AtomicI64::new(
            (crate::catalog::now_ms() * 1000).max(tablets.max_writer_id().map_or(0, |id| id + 1)),
        );
        Ok(Service {
            config,
            catalog,
            tablets,
            lake,
            advertised_host,
            port,
            next_writer_id,
        })
    }

    pub async fn close(&self) {
        self.tablets.close_all().await;
    }

    /// Runs one request and returns the complete response frame.
    pub async fn handle(&self, header: RequestHeader, body: Bytes) -> Bytes {
        let id = header.request_id;
        let Some(&(_, min, max)) = api::SERVED
            .iter()
            .find(|(key, _, _)| *key == header.api_key)
        else {
            return protocol::encode_error(
                id,
                &ApiError::new(
                    code::UNSUPPORTED_VERSION,
                    format!(
                        "api key {} is not served by silt's hotstore",
                        header.api_key
                    ),
                ),
            );
        };
        if header.api_version < min || header.api_version > max {
            return protocol::encode_error(
                id,
                &ApiError::new(
                    code::UNSUPPORTED_VERSION,
                    format!(
                        "api key {} version {} is not supported (silt serves {min}..={max})",
                        header.api_key, header.api_version
                    ),
                ),
            );
        }
        match header.api_key {
            api::API_VERSIONS => reply(id, Ok(self.api_versions())),
            api::CREATE_DATABASE => reply(id, self.create_database(body)),
            api::DROP_DATABASE => reply(id, self.drop_database(body).await),
            api::LIST_DATABASES => reply(id, self.list_databases(body)),
            api::DATABASE_EXISTS => reply(id, self.database_exists(body)),
            api::GET_DATABASE_INFO => reply(id, self.get_database_info(body)),
            api::CREATE_TABLE => reply(id, self.create_table(body).await),
            api::DROP_TABLE => reply(id, self.drop_table(body).await),
            api::GET_TABLE_INFO => reply(id, self.get_table_info(body)),
            api::LIST_TABLES => reply(id, self.list_tables(body)),
            api::LIST_PARTITION_INFOS => reply(id, self.list_partition_infos(body)),
            api::TABLE_EXISTS => reply(id, self.table_exists(body)),
            api::GET_TABLE_SCHEMA => reply(id, self.get_table_schema(body)),
            api::METADATA => reply(id, self.metadata(body)),
            api::INIT_WRITER => reply(id, self.init_writer(body)),
            api::GET_FILE_SYSTEM_SECURITY_TOKEN => reply(id, Ok(empty_security_token())),
            api::GET_LAKE_SNAPSHOT => reply(id, self.get_lake_snapshot(body)),
            api::PRODUCE_LOG => reply(id, crate::logs::produce(self, body).await),
            api::FETCH_LOG => reply(id, crate::logs::fetch(self, body).await),
            api::LIST_OFFSETS => reply(id, crate::logs::list_offsets(self, body).await),
            api::PUT_KV => reply(id, crate::kv::put(self, body).await),
            api::LOOKUP => reply(id, crate::kv::lookup(self, body).await),
            // The connection answers Authenticate itself (it owns the per-connection state).
            api::AUTHENTICATE => protocol::encode_error(
                id,
                &ApiError::new(
                    code::AUTHENTICATE_EXCEPTION,
                    "authenticate is handled by the connection, not the request handlers",
                ),
            ),
            other => protocol::encode_error(
                id,
                &ApiError::new(
                    code::UNSUPPORTED_VERSION,
                    format!("api key {other} has no handler"),
                ),
            ),
        }
    }

    fn api_versions(&self) -> ApiVersionsResponse {
        ApiVersionsResponse {
            api_versions: api::SERVED
                .iter()
                .map(|&(key, min, max)| PbApiVersion {
                    api_key: i32::from(key),
                    min_version: i32::from(min),
                    max_version: i32::from(max),
                })
                .collect(),
            server_type: None,
        }
    }

    fn create_database(&self, body: Bytes) -> Result<Empty, ApiError> {
        let request: CreateDatabaseRequest = protocol::decode(body, "CreateDatabase")?;
        self.catalog.create_database(
            &request.database_name,
            request.database_json,
            request.ignore_if_exists,
        )?;
        Ok(Empty {})
    }

    async fn drop_database(&self, body: Bytes) -> Result<Empty, ApiError> {
        let request: DropDatabaseRequest = protocol::decode(body, "DropDatabase")?;
        let dropped = self.catalog.drop_database(
            &request.database_name,
            request.ignore_if_not_exists,
            request.cascade,
        )?;
        for table in dropped {
            self.drop_table_data(&table).await;
        }
        Ok(Empty {})
    }

    fn list_databases(&self, body: Bytes) -> Result<ListDatabasesResponse, ApiError> {
        let request: ListDatabasesRequest = protocol::decode(body, "ListDatabases")?;
        let databases = self.catalog.databases();
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

    fn database_exists(&self, body: Bytes) -> Result<ExistsResponse, ApiError> {
        let request: DatabaseExistsRequest = protocol::decode(body, "DatabaseExists")?;
        Ok(ExistsResponse {
            exists: self.catalog.database_exists(&request.database_name),
        })
    }

    fn get_database_info(&self, body: Bytes) -> Result<GetDatabaseInfoResponse, ApiError> {
        let request: GetDatabaseInfoRequest = protocol::decode(body, "GetDatabaseInfo")?;
        let database = self.catalog.database(&request.database_name)?;
        Ok(GetDatabaseInfoResponse {
            database_json: database.json,
            created_time: database.created_ms,
            modified_time: database.modified_ms,
        })
    }

    async fn create_table(&self, body: Bytes) -> Result<Empty, ApiError> {
        let request: CreateTableRequest = protocol::decode(body, "CreateTable")?;
        let path = request.table_path;
        let created = self.catalog.create_table(
            &path.database_name,
            &path.table_name,
            &request.table_json,
            request.ignore_if_exists,
        )?;
        if let Some(entry) = created
            && let Err(error) = self.tablets.open_table(entry.clone()).await
        {
            // Undo the catalog entry so the table is not left without tablets.
            let _ = self.catalog.drop_table(&entry.database, &entry.name, true);
            self.tablets.drop_table(&entry).await;
            return Err(ApiError::new(
                code::LOG_STORAGE_EXCEPTION,
                format!(
                    "cannot create tablets of {}: {error}",
                    entry.qualified_name()
                ),
            ));
        }
        Ok(Empty {})
    }

    async fn drop_table(&self, body: Bytes) -> Result<Empty, ApiError> {
        let request: DropTableRequest = protocol::decode(body, "DropTable")?;
        let path = request.table_path;
        if let Some(entry) = self.catalog.drop_table(
            &path.database_name,
            &path.table_name,
            request.ignore_if_not_exists,
        )? {
            self.drop_table_data(&entry).await;
        }
        Ok(Empty {})
    }

    async fn drop_table_data(&self, entry: &TableEntry) {
        self.tablets.drop_table(entry).await;
        self.lake.remove(entry.id);
    }

    fn get_table_info(&self, body: Bytes) -> Result<GetTableInfoResponse, ApiError> {
        let request: TablePathRequest = protocol::decode(body, "GetTableInfo")?;
        let table = self.catalog.table(
            &request.table_path.database_name,
            &request.table_path.table_name,
        )?;
        Ok(GetTableInfoResponse {
            table_id: table.id,
            schema_id: table.schema_id,
            table_json: table.json.clone(),
            created_time: table.created_ms,
            modified_time: table.modified_ms,
            remote_data_dir: None,
            bucket_count_epoch: None,
        })
    }

    fn list_tables(&self, body: Bytes) -> Result<ListTablesResponse, ApiError> {
        let request: ListTablesRequest = protocol::decode(body, "ListTables")?;
        Ok(ListTablesResponse {
            table_name: self.catalog.list_tables(&request.database_name)?,
        })
    }

    fn list_partition_infos(&self, body: Bytes) -> Result<ListPartitionInfosResponse, ApiError> {
        let request: TablePathRequest = protocol::decode(body, "ListPartitionInfos")?;
        let table = self.catalog.table(
            &request.table_path.database_name,
            &request.table_path.table_name,
        )?;
        if !table.descriptor.is_partitioned() {
            return Err(ApiError::new(
                code::TABLE_NOT_PARTITIONED,
                format!("table {} is not partitioned", table.qualified_name()),
            ));
        }
        Ok(ListPartitionInfosResponse {
            partitions_info: Vec::new(),
            system_partitions_included: None,
        })
    }

    fn table_exists(&self, body: Bytes) -> Result<ExistsResponse, ApiError> {
        let request: TablePathRequest = protocol::decode(body, "TableExists")?;
        let exists = self
            .catalog
            .table(
                &request.table_path.database_name,
                &request.table_path.table_name,
            )
            .is_ok();
        Ok(ExistsResponse { exists })
    }

    fn get_table_schema(&self, body: Bytes) -> Result<GetTableSchemaResponse, ApiError> {
        let request: GetTableSchemaRequest = protocol::decode(body, "GetTableSchema")?;
        let table = self.catalog.table(
            &request.table_path.database_name,
            &request.table_path.table_name,
        )?;
        if let Some(schema_id) = request.schema_id
            && schema_id != table.schema_id
        {
            return Err(ApiError::new(
                code::SCHEMA_NOT_EXIST,
                format!(
                    "table {} has no schema {schema_id} (only {})",
                    table.qualified_name(),
                    table.schema_id
                ),
            ));
        }
        let value: serde_json::Value = serde_json::from_slice(&table.json).map_err(|e| {
            ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!("stored table json: {e}"),
            )
        })?;
        let schema_json = serde_json::to_vec(&value["schema"])
            .map_err(|e| ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("schema json: {e}")))?;
        Ok(GetTableSchemaResponse {
            schema_id: table.schema_id,
            schema_json,
        })
    }

    fn server_node(&self) -> PbServerNode {
        PbServerNode {
            node_id: NODE_ID,
            host: self.advertised_host.clone(),
            port: i32::from(self.port),
            listeners: None,
        }
    }

    fn metadata(&self, body: Bytes) -> Result<MetadataResponse, ApiError> {
        let request: MetadataRequest = protocol::decode(body, "Metadata")?;
        if let Some(partition) = request.partitions_path.first() {
            return Err(ApiError::new(
                code::PARTITION_NOT_EXISTS,
                format!(
                    "partition {:?} of {}.{} does not exist: silt's hotstore has no partitioned tables",
                    partition.partition_name, partition.database_name, partition.table_name
                ),
            ));
        }
        if let Some(id) = request.partitions_id.first() {
            return Err(ApiError::new(
                code::PARTITION_NOT_EXISTS,
                format!("partition id {id} does not exist"),
            ));
        }
        let mut table_metadata = Vec::with_capacity(request.table_path.len());
        for path in &request.table_path {
            let table = self.catalog.table(&path.database_name, &path.table_name)?;
            table_metadata.push(table_metadata_of(&table));
        }
        Ok(MetadataResponse {
            coordinator_server: Some(self.server_node()),
            tablet_servers: vec![self.server_node()],
            table_metadata,
        })
    }

    fn init_writer(&self, body: Bytes) -> Result<InitWriterResponse, ApiError> {
        let request: InitWriterRequest = protocol::decode(body, "InitWriter")?;
        for path in &request.table_path {
            self.catalog.table(&path.database_name, &path.table_name)?;
        }
        Ok(InitWriterResponse {
            writer_id: self.next_writer_id.fetch_add(1, Ordering::Relaxed),
        })
    }

    fn get_lake_snapshot(&self, body: Bytes) -> Result<GetLakeSnapshotResponse, ApiError> {
        let request: GetLakeSnapshotRequest = protocol::decode(body, "GetLakeSnapshot")?;
        let table = self.catalog.table(
            &request.table_path.database_name,
            &request.table_path.table_name,
        )?;
        let snapshot = self.lake.get(table.id).ok_or_else(|| {
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
                .bucket_offsets
                .iter()
                .map(|&(bucket_id, offset)| PbLakeSnapshotForBucket {
                    partition_id: None,
                    bucket_id,
                    log_offset: Some(offset),
                })
                .collect(),
        })
    }

    pub(crate) fn set_lake_snapshot(
        &self,
        database: &str,
        table: &str,
        snapshot_id: i64,
        bucket_offsets: &[(i32, i64)],
    ) -> crate::Result<()> {
        let entry =
            self.catalog
                .table(database, table)
                .map_err(|error| crate::Error::UnknownTable {
                    message: error.message,
                })?;
        if let Some(&(bucket, _)) = bucket_offsets
            .iter()
            .find(|(b, _)| *b < 0 || *b >= entry.bucket_count)
        {
            return Err(crate::Error::Config {
                message: format!(
                    "bucket {bucket} is out of range for {} with {} buckets",
                    entry.qualified_name(),
                    entry.bucket_count
                ),
            });
        }
        self.lake.set(entry.id, snapshot_id, bucket_offsets)
    }

    pub(crate) fn lake_snapshot(
        &self,
        database: &str,
        table: &str,
    ) -> crate::Result<Option<crate::LakeSnapshot>> {
        let entry =
            self.catalog
                .table(database, table)
                .map_err(|error| crate::Error::UnknownTable {
                    message: error.message,
                })?;
        Ok(self.lake.get(entry.id))
    }

    /// The runtime of a table by id, or UNKNOWN_TABLE_OR_BUCKET (which makes the client
    /// refresh its metadata).
    pub(crate) fn table_runtime(&self, table_id: i64) -> Result<Arc<TableRuntime>, ApiError> {
        self.tablets.get(table_id).ok_or_else(|| {
            ApiError::new(
                code::UNKNOWN_TABLE_OR_BUCKET,
                format!("unknown table id {table_id}"),
            )
        })
    }
}

fn table_metadata_of(table: &TableEntry) -> PbTableMetadata {
    PbTableMetadata {
        table_path: PbTablePath {
            database_name: table.database.clone(),
            table_name: table.name.clone(),
        },
        table_id: table.id,
        schema_id: table.schema_id,
        table_json: table.json.clone(),
        bucket_metadata: (0..table.bucket_count)
            .map(|bucket_id| PbBucketMetadata {
                bucket_id,
                leader_id: Some(NODE_ID),
                replica_id: vec![NODE_ID],
                leader_epoch: Some(0),
                bucket_epoch: Some(0),
                isr: vec![NODE_ID],
            })
            .collect(),
        created_time: table.created_ms,
        modified_time: table.modified_ms,
    }
}

fn empty_security_token() -> GetFileSystemSecurityTokenResponse {
    GetFileSystemSecurityTokenResponse {
        schema: "file".to_string(),
        token: Vec::new(),
        expiration_time: None,
        addition_info: Vec::new(),
    }
}

fn reply<M: Message>(request_id: i32, result: Result<M, ApiError>) -> Bytes {
    match result {
        Ok(body) => protocol::encode_success(request_id, &body),
        Err(error) => protocol::encode_error(request_id, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut, BytesMut};
    use proptest::prelude::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        runtime: tokio::runtime::Runtime,
        service: Service,
    }

    /// One service for all cases: opening a kv store per case would leak its threads.
    /// Fetches do not wait, so arbitrary FetchLog bodies cannot stall a case.
    fn fixture() -> &'static Fixture {
        static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
        FIXTURE.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let config = ServerConfig {
                data_dir: dir.path().to_path_buf(),
                fetch_wait_max_ms: 0,
                ..ServerConfig::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let service = runtime
                .block_on(Service::open(config, "127.0.0.1".into(), 9123))
                .unwrap();
            Fixture {
                _dir: dir,
                runtime,
                service,
            }
        })
    }

    /// Splits a response frame into (type, request id, body) and checks its length prefix.
    fn parse_response(mut frame: Bytes) -> (u8, i32, Bytes) {
        let length = frame.get_i32();
        assert_eq!(length as usize, frame.len(), "length prefix matches");
        let kind = frame.get_u8();
        let id = frame.get_i32();
        (kind, id, frame)
    }

    fn call(api_key: i16, version: i16, body: Bytes) -> (u8, Bytes) {
        let fixture = fixture();
        let header = RequestHeader {
            api_key,
            api_version: version,
            request_id: 9,
        };
        let (kind, id, body) = parse_response(
            fixture
                .runtime
                .block_on(fixture.service.handle(header, body)),
        );
        assert_eq!(id, 9);
        (kind, body)
    }

    #[test]
    fn unknown_api_key_and_version_get_error_responses() {
        for (key, version) in [(999, 0), (1044, 0), (api::METADATA, 7)] {
            let (kind, body) = call(key, version, Bytes::new());
            assert_eq!(kind, 1, "api key {key} v{version} is an error response");
            let error = ErrorResponse::decode(body).unwrap();
            assert_eq!(error.error_code, code::UNSUPPORTED_VERSION);
        }
        let (kind, body) = call(api::API_VERSIONS, 0, Bytes::new());
        assert_eq!(kind, 0);
        let versions = ApiVersionsResponse::decode(body).unwrap();
        assert_eq!(versions.api_versions.len(), api::SERVED.len());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

        /// Any body under any served API key yields a well-formed response frame, never a panic.
        #[test]
        fn handlers_answer_arbitrary_bodies(key_index in 0..api::SERVED.len(), body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let (key, _, _) = api::SERVED[key_index];
            let (kind, body) = call(key, 0, Bytes::from(body));
            prop_assert!(kind == 0 || kind == 1);
            if kind == 1 {
                prop_assert!(ErrorResponse::decode(body).is_ok());
            }
        }

        /// The frame decoder accepts exactly the frames within the limit and with a header.
        #[test]
        fn frame_decoder_is_total(prefix in any::<i32>(), frame in proptest::collection::vec(any::<u8>(), 0..64)) {
            let limit = 32usize;
            match protocol::frame_length(prefix.to_be_bytes(), limit) {
                Ok(length) => prop_assert!(prefix >= 0 && length <= limit),
                Err(_) => prop_assert!(prefix < 0 || prefix as usize > limit),
            }
            let mut buf = BytesMut::new();
            buf.put_slice(&frame);
            let parsed = protocol::parse_request(buf.freeze());
            prop_assert_eq!(parsed.is_ok(), frame.len() >= protocol::REQUEST_HEADER_BYTES);
        }
    }
}
