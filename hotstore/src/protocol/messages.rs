//! silt's own protobuf definitions of the Fluss RPC messages it serves.
//!
//! Field numbers and types are facts of the Fluss wire protocol (proto2). Required fields are
//! declared `required` so they are always encoded, as the Java and Python clients expect.
//! Only the messages silt serves are defined here; fields silt never reads are omitted from
//! requests (protobuf skips unknown fields), never from responses.

use bytes::Bytes;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorResponse {
    #[prost(int32, required, tag = "1")]
    pub error_code: i32,
    #[prost(string, optional, tag = "2")]
    pub error_message: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ApiVersionsResponse {
    #[prost(message, repeated, tag = "1")]
    pub api_versions: Vec<PbApiVersion>,
    #[prost(int32, optional, tag = "2")]
    pub server_type: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbApiVersion {
    #[prost(int32, required, tag = "1")]
    pub api_key: i32,
    #[prost(int32, required, tag = "2")]
    pub min_version: i32,
    #[prost(int32, required, tag = "3")]
    pub max_version: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbTablePath {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
    #[prost(string, required, tag = "2")]
    pub table_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPhysicalTablePath {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
    #[prost(string, required, tag = "2")]
    pub table_name: String,
    #[prost(string, optional, tag = "3")]
    pub partition_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbKeyValue {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, required, tag = "2")]
    pub value: String,
}

// ---- databases ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateDatabaseRequest {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
    #[prost(bool, required, tag = "2")]
    pub ignore_if_exists: bool,
    #[prost(bytes = "vec", optional, tag = "3")]
    pub database_json: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetDatabaseInfoRequest {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetDatabaseInfoResponse {
    #[prost(bytes = "vec", required, tag = "3")]
    pub database_json: Vec<u8>,
    #[prost(int64, required, tag = "4")]
    pub created_time: i64,
    #[prost(int64, required, tag = "5")]
    pub modified_time: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DropDatabaseRequest {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
    #[prost(bool, required, tag = "2")]
    pub ignore_if_not_exists: bool,
    #[prost(bool, required, tag = "3")]
    pub cascade: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DatabaseExistsRequest {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExistsResponse {
    #[prost(bool, required, tag = "1")]
    pub exists: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListDatabasesRequest {
    #[prost(bool, optional, tag = "1")]
    pub include_summary: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListDatabasesResponse {
    #[prost(string, repeated, tag = "1")]
    pub database_name: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub database_summary: Vec<PbDatabaseSummary>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbDatabaseSummary {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
    #[prost(int64, required, tag = "2")]
    pub created_time: i64,
    #[prost(int32, required, tag = "3")]
    pub table_count: i32,
}

// ---- tables ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTableRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(bytes = "vec", required, tag = "2")]
    pub table_json: Vec<u8>,
    #[prost(bool, required, tag = "3")]
    pub ignore_if_exists: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DropTableRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(bool, required, tag = "2")]
    pub ignore_if_not_exists: bool,
}

/// GetTableInfo, TableExists and ListPartitionInfos all open with the table path as field 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TablePathRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTableInfoResponse {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(int32, required, tag = "2")]
    pub schema_id: i32,
    #[prost(bytes = "vec", required, tag = "3")]
    pub table_json: Vec<u8>,
    #[prost(int64, required, tag = "4")]
    pub created_time: i64,
    #[prost(int64, required, tag = "5")]
    pub modified_time: i64,
    #[prost(string, optional, tag = "6")]
    pub remote_data_dir: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub bucket_count_epoch: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListTablesRequest {
    #[prost(string, required, tag = "1")]
    pub database_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListTablesResponse {
    #[prost(string, repeated, tag = "1")]
    pub table_name: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTableSchemaRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(int32, optional, tag = "2")]
    pub schema_id: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTableSchemaResponse {
    #[prost(int32, required, tag = "1")]
    pub schema_id: i32,
    #[prost(bytes = "vec", required, tag = "2")]
    pub schema_json: Vec<u8>,
}

// ---- partitions ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPartitionSpec {
    #[prost(message, repeated, tag = "1")]
    pub partition_key_values: Vec<PbKeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPartitionInfo {
    #[prost(int64, required, tag = "1")]
    pub partition_id: i64,
    #[prost(message, required, tag = "2")]
    pub partition_spec: PbPartitionSpec,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPartitionInfosRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(message, optional, tag = "2")]
    pub partial_partition_spec: Option<PbPartitionSpec>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPartitionInfosResponse {
    #[prost(message, repeated, tag = "1")]
    pub partitions_info: Vec<PbPartitionInfo>,
    #[prost(bool, optional, tag = "2")]
    pub system_partitions_included: Option<bool>,
}

/// CreatePartition and DropPartition share their fields; Fluss names the flag
/// `ignore_if_not_exists` in both, and it means "if exists" for a create.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PartitionRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(message, required, tag = "2")]
    pub partition_spec: PbPartitionSpec,
    #[prost(bool, required, tag = "3")]
    pub ignore_if_not_exists: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPartitionMetadata {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(string, required, tag = "2")]
    pub partition_name: String,
    #[prost(int64, required, tag = "3")]
    pub partition_id: i64,
    #[prost(message, repeated, tag = "4")]
    pub bucket_metadata: Vec<PbBucketMetadata>,
}

// ---- metadata ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetadataRequest {
    #[prost(message, repeated, tag = "1")]
    pub table_path: Vec<PbTablePath>,
    #[prost(message, repeated, tag = "2")]
    pub partitions_path: Vec<PbPhysicalTablePath>,
    #[prost(int64, repeated, packed = "true", tag = "3")]
    pub partitions_id: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetadataResponse {
    #[prost(message, optional, tag = "1")]
    pub coordinator_server: Option<PbServerNode>,
    #[prost(message, repeated, tag = "2")]
    pub tablet_servers: Vec<PbServerNode>,
    #[prost(message, repeated, tag = "3")]
    pub table_metadata: Vec<PbTableMetadata>,
    #[prost(message, repeated, tag = "4")]
    pub partition_metadata: Vec<PbPartitionMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbServerNode {
    #[prost(int32, required, tag = "1")]
    pub node_id: i32,
    #[prost(string, required, tag = "2")]
    pub host: String,
    #[prost(int32, required, tag = "3")]
    pub port: i32,
    #[prost(string, optional, tag = "4")]
    pub listeners: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbTableMetadata {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(int64, required, tag = "2")]
    pub table_id: i64,
    #[prost(int32, required, tag = "3")]
    pub schema_id: i32,
    #[prost(bytes = "vec", required, tag = "4")]
    pub table_json: Vec<u8>,
    #[prost(message, repeated, tag = "5")]
    pub bucket_metadata: Vec<PbBucketMetadata>,
    #[prost(int64, required, tag = "6")]
    pub created_time: i64,
    #[prost(int64, required, tag = "7")]
    pub modified_time: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbBucketMetadata {
    #[prost(int32, required, tag = "1")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "2")]
    pub leader_id: Option<i32>,
    #[prost(int32, repeated, packed = "true", tag = "3")]
    pub replica_id: Vec<i32>,
    #[prost(int32, optional, tag = "4")]
    pub leader_epoch: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    pub bucket_epoch: Option<i32>,
    #[prost(int32, repeated, packed = "true", tag = "6")]
    pub isr: Vec<i32>,
}

// ---- writes ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct InitWriterRequest {
    #[prost(message, repeated, tag = "1")]
    pub table_path: Vec<PbTablePath>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InitWriterResponse {
    #[prost(int64, required, tag = "1")]
    pub writer_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProduceLogRequest {
    #[prost(int32, required, tag = "1")]
    pub acks: i32,
    #[prost(int64, required, tag = "2")]
    pub table_id: i64,
    #[prost(int32, required, tag = "3")]
    pub timeout_ms: i32,
    #[prost(message, repeated, tag = "4")]
    pub buckets_req: Vec<PbWriteReqForBucket>,
}

/// PbProduceLogReqForBucket and PbPutKvReqForBucket share their first five fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbWriteReqForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(bytes = "bytes", required, tag = "3")]
    pub records: Bytes,
    #[prost(string, optional, tag = "4")]
    pub original_partition_name: Option<String>,
    #[prost(int32, optional, tag = "5")]
    pub routing_bucket_count: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProduceLogResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbProduceLogRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbProduceLogRespForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "3")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub error_message: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub base_offset: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutKvRequest {
    #[prost(int32, required, tag = "1")]
    pub acks: i32,
    #[prost(int64, required, tag = "2")]
    pub table_id: i64,
    #[prost(int32, required, tag = "3")]
    pub timeout_ms: i32,
    #[prost(int32, repeated, packed = "true", tag = "4")]
    pub target_columns: Vec<i32>,
    #[prost(message, repeated, tag = "5")]
    pub buckets_req: Vec<PbWriteReqForBucket>,
    #[prost(int32, optional, tag = "6")]
    pub agg_mode: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutKvResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbPutKvRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPutKvRespForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "3")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub error_message: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub log_end_offset: Option<i64>,
}

// ---- reads ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchLogRequest {
    #[prost(int32, required, tag = "1")]
    pub follower_server_id: i32,
    #[prost(int32, required, tag = "2")]
    pub max_bytes: i32,
    #[prost(message, repeated, tag = "3")]
    pub tables_req: Vec<PbFetchLogReqForTable>,
    #[prost(int32, optional, tag = "4")]
    pub max_wait_ms: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    pub min_bytes: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFetchLogReqForTable {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(bool, required, tag = "2")]
    pub projection_pushdown_enabled: bool,
    #[prost(int32, repeated, packed = "true", tag = "3")]
    pub projected_fields: Vec<i32>,
    #[prost(message, repeated, tag = "4")]
    pub buckets_req: Vec<PbFetchLogReqForBucket>,
    /// A filter the server may prune whole batches by (Fluss 1.0; fluss-rs's
    /// `new_scan().filter(..)`): the client filters rows itself, so a superset is correct.
    #[prost(message, optional, tag = "5")]
    pub filter_predicate: Option<PbPredicate>,
    /// The schema the predicate's field ids refer to; required with a predicate.
    #[prost(int32, optional, tag = "6")]
    pub filter_schema_id: Option<i32>,
}

/// `type`: 0 a leaf, 1 a compound.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPredicate {
    #[prost(int32, required, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub leaf: Option<PbLeafPredicate>,
    #[prost(message, optional, boxed, tag = "3")]
    pub compound: Option<Box<PbCompoundPredicate>>,
}

/// `function`: EQUAL 0, NOT_EQUAL 1, LESS_THAN 2, LESS_OR_EQUAL 3, GREATER_THAN 4,
/// GREATER_OR_EQUAL 5, IS_NULL 6, IS_NOT_NULL 7, STARTS_WITH 8, CONTAINS 9, ENDS_WITH 10,
/// IN 11, NOT_IN 12. `field_id` is the schema's column id of a top-level column.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLeafPredicate {
    #[prost(int32, required, tag = "1")]
    pub function: i32,
    #[prost(int32, required, tag = "2")]
    pub field_id: i32,
    #[prost(message, repeated, tag = "3")]
    pub literals: Vec<PbLiteralValue>,
}

/// `function`: AND 0, OR 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbCompoundPredicate {
    #[prost(int32, required, tag = "1")]
    pub function: i32,
    #[prost(message, repeated, tag = "2")]
    pub children: Vec<PbPredicate>,
}

/// A literal in the type of its column (`literal_type`, Fluss's data type root: BOOLEAN 0 ..
/// BYTES 15). DATE travels in `bigint_value`, TIME (ms) in `int_value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLiteralValue {
    #[prost(int32, required, tag = "1")]
    pub literal_type: i32,
    #[prost(bool, required, tag = "2")]
    pub is_null: bool,
    #[prost(bool, optional, tag = "3")]
    pub boolean_value: Option<bool>,
    #[prost(int32, optional, tag = "4")]
    pub int_value: Option<i32>,
    #[prost(int64, optional, tag = "5")]
    pub bigint_value: Option<i64>,
    #[prost(float, optional, tag = "6")]
    pub float_value: Option<f32>,
    #[prost(double, optional, tag = "7")]
    pub double_value: Option<f64>,
    #[prost(string, optional, tag = "8")]
    pub string_value: Option<String>,
    #[prost(bytes = "vec", optional, tag = "9")]
    pub binary_value: Option<Vec<u8>>,
    #[prost(int64, optional, tag = "10")]
    pub decimal_value: Option<i64>,
    #[prost(int64, optional, tag = "11")]
    pub timestamp_millis_value: Option<i64>,
    #[prost(int32, optional, tag = "12")]
    pub timestamp_nano_of_millis_value: Option<i32>,
    #[prost(bytes = "vec", optional, tag = "13")]
    pub decimal_bytes: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFetchLogReqForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int64, required, tag = "3")]
    pub fetch_offset: i64,
    #[prost(int32, required, tag = "4")]
    pub max_fetch_bytes: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchLogResponse {
    #[prost(message, repeated, tag = "1")]
    pub tables_resp: Vec<PbFetchLogRespForTable>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFetchLogRespForTable {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(message, repeated, tag = "2")]
    pub buckets_resp: Vec<PbFetchLogRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFetchLogRespForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "3")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub error_message: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub high_watermark: Option<i64>,
    #[prost(int64, optional, tag = "6")]
    pub log_start_offset: Option<i64>,
    #[prost(bytes = "bytes", optional, tag = "8")]
    pub records: Option<Bytes>,
    /// Set when a filter pruned batches: the client's next fetch starts at least here.
    #[prost(int64, optional, tag = "9")]
    pub filtered_end_offset: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LookupRequest {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(message, repeated, tag = "2")]
    pub buckets_req: Vec<PbLookupReqForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLookupReqForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub keys: Vec<Bytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LookupResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbLookupRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLookupRespForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "3")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub error_message: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub values: Vec<PbValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbValue {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub values: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListOffsetsRequest {
    #[prost(int32, required, tag = "1")]
    pub follower_server_id: i32,
    #[prost(int32, required, tag = "2")]
    pub offset_type: i32,
    #[prost(int64, required, tag = "3")]
    pub table_id: i64,
    #[prost(int64, optional, tag = "4")]
    pub partition_id: Option<i64>,
    #[prost(int32, repeated, packed = "true", tag = "5")]
    pub bucket_id: Vec<i32>,
    #[prost(int64, optional, tag = "6")]
    pub start_timestamp: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListOffsetsResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbListOffsetsRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbListOffsetsRespForBucket {
    #[prost(int32, required, tag = "1")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "2")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "3")]
    pub error_message: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub offset: Option<i64>,
}

// ---- security token and lake ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetFileSystemSecurityTokenResponse {
    #[prost(string, required, tag = "1")]
    pub schema: String,
    #[prost(bytes = "vec", required, tag = "2")]
    pub token: Vec<u8>,
    #[prost(int64, optional, tag = "3")]
    pub expiration_time: Option<i64>,
    #[prost(message, repeated, tag = "4")]
    pub addition_info: Vec<PbKeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetLakeSnapshotRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(int64, optional, tag = "2")]
    pub snapshot_id: Option<i64>,
    #[prost(bool, optional, tag = "3")]
    pub readable: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetLakeSnapshotResponse {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(int64, required, tag = "2")]
    pub snapshot_id: i64,
    #[prost(message, repeated, tag = "3")]
    pub bucket_snapshots: Vec<PbLakeSnapshotForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLakeSnapshotForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int64, optional, tag = "3")]
    pub log_offset: Option<i64>,
}

// ---- authentication ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateRequest {
    #[prost(string, required, tag = "1")]
    pub protocol: String,
    #[prost(bytes = "vec", required, tag = "2")]
    pub token: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateResponse {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub challenge: Option<Vec<u8>>,
}

// ---- prefix lookup ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct PrefixLookupRequest {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(message, repeated, tag = "2")]
    pub buckets_req: Vec<PbPrefixLookupReqForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPrefixLookupReqForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    /// Encoded bucket keys, each a byte prefix of the encoded primary keys it matches.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub keys: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PrefixLookupResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbPrefixLookupRespForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbPrefixLookupRespForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int32, optional, tag = "3")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub error_message: Option<String>,
    /// One list per requested key, in request order: the values of every matching row.
    #[prost(message, repeated, tag = "5")]
    pub value_lists: Vec<PbValueList>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbValueList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub values: Vec<Vec<u8>>,
}

// ---- alter table ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterTableRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(bool, required, tag = "2")]
    pub ignore_if_not_exists: bool,
    #[prost(message, repeated, tag = "3")]
    pub config_changes: Vec<PbAlterConfig>,
    #[prost(message, repeated, tag = "4")]
    pub add_columns: Vec<PbAddColumn>,
    #[prost(message, repeated, tag = "5")]
    pub drop_columns: Vec<PbColumnChange>,
    #[prost(message, repeated, tag = "6")]
    pub rename_columns: Vec<PbColumnChange>,
    #[prost(message, repeated, tag = "7")]
    pub modify_columns: Vec<PbColumnChange>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbAlterConfig {
    #[prost(string, required, tag = "1")]
    pub config_key: String,
    #[prost(string, optional, tag = "2")]
    pub config_value: Option<String>,
    /// SET = 0, DELETE = 1 (reset), APPEND = 2, SUBTRACT = 3.
    #[prost(int32, required, tag = "3")]
    pub op_type: i32,
}

/// A column added by AlterTable.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbAddColumn {
    #[prost(string, required, tag = "1")]
    pub column_name: String,
    #[prost(bytes = "vec", required, tag = "2")]
    pub data_type_json: Vec<u8>,
    #[prost(string, optional, tag = "3")]
    pub comment: Option<String>,
    /// LAST = 0, FIRST = 1, AFTER = 3.
    #[prost(int32, required, tag = "4")]
    pub column_position_type: i32,
    #[prost(string, optional, tag = "5")]
    pub agg_function_type: Option<String>,
}

/// A schema change silt refuses, as Fluss 0.9.1 does (PbDropColumn, PbRenameColumn,
/// PbModifyColumn): only the column name (field 1 in each) is read, to name it in the error.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbColumnChange {
    #[prost(string, optional, tag = "1")]
    pub column_name: Option<String>,
}

// ---- limit scan ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct LimitScanRequest {
    #[prost(int64, required, tag = "2")]
    pub table_id: i64,
    #[prost(int64, optional, tag = "3")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "4")]
    pub bucket_id: i32,
    #[prost(int32, required, tag = "5")]
    pub limit: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LimitScanResponse {
    #[prost(int32, optional, tag = "1")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub error_message: Option<String>,
    #[prost(bool, optional, tag = "3")]
    pub is_log_table: Option<bool>,
    /// Log batches for a log table; one value record batch for a primary-key table.
    #[prost(bytes = "bytes", optional, tag = "4")]
    pub records: Option<Bytes>,
}

// ---- table stats ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTableStatsRequest {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(message, repeated, tag = "2")]
    pub buckets_req: Vec<PbTableStatsReqForBucket>,
    /// Column statistics asked for; reserved in Fluss 0.9.1, which answers none.
    #[prost(int32, repeated, packed = "true", tag = "3")]
    pub target_columns: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbTableStatsReqForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTableStatsResponse {
    #[prost(message, repeated, tag = "1")]
    pub buckets_resp: Vec<PbTableStatsRespForBucket>,
}

/// One bucket's stats, or its error: `row_count` is the live keys of a primary-key bucket and
/// the records between log start and high watermark of a log bucket.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbTableStatsRespForBucket {
    #[prost(int32, optional, tag = "1")]
    pub error_code: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub error_message: Option<String>,
    #[prost(int64, optional, tag = "3")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "4")]
    pub bucket_id: i32,
    #[prost(int64, optional, tag = "5")]
    pub row_count: Option<i64>,
}

// ---- kv snapshots and their leases ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetLatestKvSnapshotsRequest {
    #[prost(message, required, tag = "1")]
    pub table_path: PbTablePath,
    #[prost(string, optional, tag = "2")]
    pub partition_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetLatestKvSnapshotsResponse {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(int64, optional, tag = "2")]
    pub partition_id: Option<i64>,
    #[prost(message, repeated, tag = "3")]
    pub latest_snapshots: Vec<PbKvSnapshot>,
}

/// A bucket's latest kv snapshot; both options are absent when the bucket has none, which
/// tells a reader to read the changelog from the earliest offset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbKvSnapshot {
    #[prost(int32, required, tag = "1")]
    pub bucket_id: i32,
    #[prost(int64, optional, tag = "2")]
    pub snapshot_id: Option<i64>,
    #[prost(int64, optional, tag = "3")]
    pub log_offset: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetKvSnapshotMetadataRequest {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(int64, optional, tag = "2")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "3")]
    pub bucket_id: i32,
    #[prost(int64, required, tag = "4")]
    pub snapshot_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetKvSnapshotMetadataResponse {
    #[prost(int64, required, tag = "1")]
    pub log_offset: i64,
    #[prost(message, repeated, tag = "2")]
    pub snapshot_files: Vec<PbRemotePathAndLocalFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbRemotePathAndLocalFile {
    #[prost(string, required, tag = "1")]
    pub remote_path: String,
    #[prost(string, required, tag = "2")]
    pub local_file_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AcquireKvSnapshotLeaseRequest {
    #[prost(string, required, tag = "1")]
    pub lease_id: String,
    #[prost(int64, required, tag = "2")]
    pub lease_duration_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub snapshots_to_lease: Vec<PbKvSnapshotLeaseForTable>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AcquireKvSnapshotLeaseResponse {
    #[prost(message, repeated, tag = "1")]
    pub unavailable_snapshots: Vec<PbKvSnapshotLeaseForTable>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbKvSnapshotLeaseForTable {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(message, repeated, tag = "2")]
    pub bucket_snapshots: Vec<PbKvSnapshotLeaseForBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbKvSnapshotLeaseForBucket {
    #[prost(int64, optional, tag = "1")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "2")]
    pub bucket_id: i32,
    #[prost(int64, required, tag = "3")]
    pub snapshot_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReleaseKvSnapshotLeaseRequest {
    #[prost(string, required, tag = "1")]
    pub lease_id: String,
    #[prost(message, repeated, tag = "2")]
    pub buckets_to_release: Vec<PbTableBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PbTableBucket {
    #[prost(int64, required, tag = "1")]
    pub table_id: i64,
    #[prost(int64, optional, tag = "2")]
    pub partition_id: Option<i64>,
    #[prost(int32, required, tag = "3")]
    pub bucket_id: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DropKvSnapshotLeaseRequest {
    #[prost(string, required, tag = "1")]
    pub lease_id: String,
}

#[cfg(test)]
impl FetchLogRequest {
    /// A client's fetch of one table's `(bucket, offset)`s (unpartitioned, no projection or
    /// filter, 1 MiB per bucket and in all), answered at once.
    pub(crate) fn of_buckets(table_id: i64, buckets: &[(i32, i64)]) -> Self {
        FetchLogRequest {
            follower_server_id: -1,
            max_bytes: 1 << 20,
            tables_req: vec![PbFetchLogReqForTable {
                table_id,
                projection_pushdown_enabled: false,
                projected_fields: vec![],
                filter_predicate: None,
                filter_schema_id: None,
                buckets_req: buckets
                    .iter()
                    .map(|&(bucket_id, fetch_offset)| PbFetchLogReqForBucket {
                        partition_id: None,
                        bucket_id,
                        fetch_offset,
                        max_fetch_bytes: 1 << 20,
                    })
                    .collect(),
            }],
            max_wait_ms: Some(0),
            min_bytes: Some(1),
        }
    }
}
