//! silt's own protobuf definitions of the Fluss RPC messages it serves.
//!
//! Field numbers and types are facts of the Fluss wire protocol (proto2). Required fields are
//! declared `required` so they are always encoded, as the Java and Python clients expect.
//! Only the messages silt serves are defined here; fields silt never reads are omitted from
//! requests (protobuf skips unknown fields), never from responses.

use bytes::Bytes;

/// Declares the messages below as prost messages, one field a line:
/// `name: RustType = tag [prost's kind and label]`, the bracket holding exactly what prost's
/// `#[prost(..)]` attribute holds before `tag`.
macro_rules! messages {
    ($(
        $(#[$attr:meta])*
        pub struct $name:ident {
            $( $(#[$field_attr:meta])* $field:ident: $ty:ty = $tag:tt [$($prost:tt)*] ),* $(,)?
        }
    )*) => {$(
        $(#[$attr])*
        #[derive(Clone, PartialEq, prost::Message)]
        pub struct $name {
            $( $(#[$field_attr])* #[prost($($prost)*, tag = $tag)] pub $field: $ty, )*
        }
    )*};
}

messages! {
    pub struct ErrorResponse {
        error_code: i32 = 1 [int32, required],
        error_message: Option<String> = 2 [string, optional],
    }

    pub struct ApiVersionsResponse {
        api_versions: Vec<PbApiVersion> = 1 [message, repeated],
        server_type: Option<i32> = 2 [int32, optional],
    }

    pub struct PbApiVersion {
        api_key: i32 = 1 [int32, required],
        min_version: i32 = 2 [int32, required],
        max_version: i32 = 3 [int32, required],
    }

    pub struct PbTablePath {
        database_name: String = 1 [string, required],
        table_name: String = 2 [string, required],
    }

    pub struct PbPhysicalTablePath {
        database_name: String = 1 [string, required],
        table_name: String = 2 [string, required],
        partition_name: Option<String> = 3 [string, optional],
    }

    pub struct PbKeyValue {
        key: String = 1 [string, required],
        value: String = 2 [string, required],
    }

    // ---- databases ----

    pub struct CreateDatabaseRequest {
        database_name: String = 1 [string, required],
        ignore_if_exists: bool = 2 [bool, required],
        database_json: Option<Vec<u8>> = 3 [bytes = "vec", optional],
    }

    pub struct Empty {}

    pub struct GetDatabaseInfoRequest {
        database_name: String = 1 [string, required],
    }

    pub struct GetDatabaseInfoResponse {
        database_json: Vec<u8> = 3 [bytes = "vec", required],
        created_time: i64 = 4 [int64, required],
        modified_time: i64 = 5 [int64, required],
    }

    pub struct DropDatabaseRequest {
        database_name: String = 1 [string, required],
        ignore_if_not_exists: bool = 2 [bool, required],
        cascade: bool = 3 [bool, required],
    }

    pub struct DatabaseExistsRequest {
        database_name: String = 1 [string, required],
    }

    pub struct ExistsResponse {
        exists: bool = 1 [bool, required],
    }

    pub struct ListDatabasesRequest {
        include_summary: Option<bool> = 1 [bool, optional],
    }

    pub struct ListDatabasesResponse {
        database_name: Vec<String> = 1 [string, repeated],
        database_summary: Vec<PbDatabaseSummary> = 2 [message, repeated],
    }

    pub struct PbDatabaseSummary {
        database_name: String = 1 [string, required],
        created_time: i64 = 2 [int64, required],
        table_count: i32 = 3 [int32, required],
    }

    // ---- tables ----

    pub struct CreateTableRequest {
        table_path: PbTablePath = 1 [message, required],
        table_json: Vec<u8> = 2 [bytes = "vec", required],
        ignore_if_exists: bool = 3 [bool, required],
    }

    pub struct DropTableRequest {
        table_path: PbTablePath = 1 [message, required],
        ignore_if_not_exists: bool = 2 [bool, required],
    }

    /// GetTableInfo, TableExists and ListPartitionInfos all open with the table path as field 1.
    pub struct TablePathRequest {
        table_path: PbTablePath = 1 [message, required],
    }

    pub struct GetTableInfoResponse {
        table_id: i64 = 1 [int64, required],
        schema_id: i32 = 2 [int32, required],
        table_json: Vec<u8> = 3 [bytes = "vec", required],
        created_time: i64 = 4 [int64, required],
        modified_time: i64 = 5 [int64, required],
        remote_data_dir: Option<String> = 6 [string, optional],
        bucket_count_epoch: Option<i64> = 7 [int64, optional],
    }

    pub struct ListTablesRequest {
        database_name: String = 1 [string, required],
    }

    pub struct ListTablesResponse {
        table_name: Vec<String> = 1 [string, repeated],
    }

    pub struct GetTableSchemaRequest {
        table_path: PbTablePath = 1 [message, required],
        schema_id: Option<i32> = 2 [int32, optional],
    }

    pub struct GetTableSchemaResponse {
        schema_id: i32 = 1 [int32, required],
        schema_json: Vec<u8> = 2 [bytes = "vec", required],
    }

    // ---- partitions ----

    pub struct PbPartitionSpec {
        partition_key_values: Vec<PbKeyValue> = 1 [message, repeated],
    }

    pub struct PbPartitionInfo {
        partition_id: i64 = 1 [int64, required],
        partition_spec: PbPartitionSpec = 2 [message, required],
    }

    pub struct ListPartitionInfosRequest {
        table_path: PbTablePath = 1 [message, required],
        partial_partition_spec: Option<PbPartitionSpec> = 2 [message, optional],
    }

    pub struct ListPartitionInfosResponse {
        partitions_info: Vec<PbPartitionInfo> = 1 [message, repeated],
        system_partitions_included: Option<bool> = 2 [bool, optional],
    }

    /// CreatePartition and DropPartition share their fields; Fluss names the flag
    /// `ignore_if_not_exists` in both, and it means "if exists" for a create.
    pub struct PartitionRequest {
        table_path: PbTablePath = 1 [message, required],
        partition_spec: PbPartitionSpec = 2 [message, required],
        ignore_if_not_exists: bool = 3 [bool, required],
    }

    pub struct PbPartitionMetadata {
        table_id: i64 = 1 [int64, required],
        partition_name: String = 2 [string, required],
        partition_id: i64 = 3 [int64, required],
        bucket_metadata: Vec<PbBucketMetadata> = 4 [message, repeated],
    }

    // ---- metadata ----

    pub struct MetadataRequest {
        table_path: Vec<PbTablePath> = 1 [message, repeated],
        partitions_path: Vec<PbPhysicalTablePath> = 2 [message, repeated],
        partitions_id: Vec<i64> = 3 [int64, repeated, packed = "true"],
    }

    pub struct MetadataResponse {
        coordinator_server: Option<PbServerNode> = 1 [message, optional],
        tablet_servers: Vec<PbServerNode> = 2 [message, repeated],
        table_metadata: Vec<PbTableMetadata> = 3 [message, repeated],
        partition_metadata: Vec<PbPartitionMetadata> = 4 [message, repeated],
    }

    pub struct PbServerNode {
        node_id: i32 = 1 [int32, required],
        host: String = 2 [string, required],
        port: i32 = 3 [int32, required],
        listeners: Option<String> = 4 [string, optional],
    }

    pub struct PbTableMetadata {
        table_path: PbTablePath = 1 [message, required],
        table_id: i64 = 2 [int64, required],
        schema_id: i32 = 3 [int32, required],
        table_json: Vec<u8> = 4 [bytes = "vec", required],
        bucket_metadata: Vec<PbBucketMetadata> = 5 [message, repeated],
        created_time: i64 = 6 [int64, required],
        modified_time: i64 = 7 [int64, required],
    }

    pub struct PbBucketMetadata {
        bucket_id: i32 = 1 [int32, required],
        leader_id: Option<i32> = 2 [int32, optional],
        replica_id: Vec<i32> = 3 [int32, repeated, packed = "true"],
        leader_epoch: Option<i32> = 4 [int32, optional],
        bucket_epoch: Option<i32> = 5 [int32, optional],
        isr: Vec<i32> = 6 [int32, repeated, packed = "true"],
    }

    // ---- writes ----

    pub struct InitWriterRequest {
        table_path: Vec<PbTablePath> = 1 [message, repeated],
    }

    pub struct InitWriterResponse {
        writer_id: i64 = 1 [int64, required],
    }

    pub struct ProduceLogRequest {
        acks: i32 = 1 [int32, required],
        table_id: i64 = 2 [int64, required],
        timeout_ms: i32 = 3 [int32, required],
        buckets_req: Vec<PbWriteReqForBucket> = 4 [message, repeated],
    }

    /// PbProduceLogReqForBucket and PbPutKvReqForBucket share their first five fields.
    pub struct PbWriteReqForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        records: Bytes = 3 [bytes = "bytes", required],
        original_partition_name: Option<String> = 4 [string, optional],
        routing_bucket_count: Option<i32> = 5 [int32, optional],
    }

    pub struct ProduceLogResponse {
        buckets_resp: Vec<PbProduceLogRespForBucket> = 1 [message, repeated],
    }

    pub struct PbProduceLogRespForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        error_code: Option<i32> = 3 [int32, optional],
        error_message: Option<String> = 4 [string, optional],
        base_offset: Option<i64> = 5 [int64, optional],
    }

    pub struct PutKvRequest {
        acks: i32 = 1 [int32, required],
        table_id: i64 = 2 [int64, required],
        timeout_ms: i32 = 3 [int32, required],
        target_columns: Vec<i32> = 4 [int32, repeated, packed = "true"],
        buckets_req: Vec<PbWriteReqForBucket> = 5 [message, repeated],
        agg_mode: Option<i32> = 6 [int32, optional],
    }

    pub struct PutKvResponse {
        buckets_resp: Vec<PbPutKvRespForBucket> = 1 [message, repeated],
    }

    pub struct PbPutKvRespForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        error_code: Option<i32> = 3 [int32, optional],
        error_message: Option<String> = 4 [string, optional],
        log_end_offset: Option<i64> = 5 [int64, optional],
    }

    // ---- reads ----

    pub struct FetchLogRequest {
        follower_server_id: i32 = 1 [int32, required],
        max_bytes: i32 = 2 [int32, required],
        tables_req: Vec<PbFetchLogReqForTable> = 3 [message, repeated],
        max_wait_ms: Option<i32> = 4 [int32, optional],
        min_bytes: Option<i32> = 5 [int32, optional],
    }

    pub struct PbFetchLogReqForTable {
        table_id: i64 = 1 [int64, required],
        projection_pushdown_enabled: bool = 2 [bool, required],
        projected_fields: Vec<i32> = 3 [int32, repeated, packed = "true"],
        buckets_req: Vec<PbFetchLogReqForBucket> = 4 [message, repeated],
        /// A filter the server may prune whole batches by (Fluss 1.0; fluss-rs's
        /// `new_scan().filter(..)`): the client filters rows itself, so a superset is correct.
        filter_predicate: Option<PbPredicate> = 5 [message, optional],
        /// The schema the predicate's field ids refer to; required with a predicate.
        filter_schema_id: Option<i32> = 6 [int32, optional],
    }

    /// `type`: 0 a leaf, 1 a compound.
    pub struct PbPredicate {
        r#type: i32 = 1 [int32, required],
        leaf: Option<PbLeafPredicate> = 2 [message, optional],
        compound: Option<Box<PbCompoundPredicate>> = 3 [message, optional, boxed],
    }

    /// `function`: EQUAL 0, NOT_EQUAL 1, LESS_THAN 2, LESS_OR_EQUAL 3, GREATER_THAN 4,
    /// GREATER_OR_EQUAL 5, IS_NULL 6, IS_NOT_NULL 7, STARTS_WITH 8, CONTAINS 9, ENDS_WITH 10,
    /// IN 11, NOT_IN 12. `field_id` is the schema's column id of a top-level column.
    pub struct PbLeafPredicate {
        function: i32 = 1 [int32, required],
        field_id: i32 = 2 [int32, required],
        literals: Vec<PbLiteralValue> = 3 [message, repeated],
    }

    /// `function`: AND 0, OR 1.
    pub struct PbCompoundPredicate {
        function: i32 = 1 [int32, required],
        children: Vec<PbPredicate> = 2 [message, repeated],
    }

    /// A literal in the type of its column (`literal_type`, Fluss's data type root: BOOLEAN 0 ..
    /// BYTES 15). DATE travels in `bigint_value`, TIME (ms) in `int_value`.
    pub struct PbLiteralValue {
        literal_type: i32 = 1 [int32, required],
        is_null: bool = 2 [bool, required],
        boolean_value: Option<bool> = 3 [bool, optional],
        int_value: Option<i32> = 4 [int32, optional],
        bigint_value: Option<i64> = 5 [int64, optional],
        float_value: Option<f32> = 6 [float, optional],
        double_value: Option<f64> = 7 [double, optional],
        string_value: Option<String> = 8 [string, optional],
        binary_value: Option<Vec<u8>> = 9 [bytes = "vec", optional],
        decimal_value: Option<i64> = 10 [int64, optional],
        timestamp_millis_value: Option<i64> = 11 [int64, optional],
        timestamp_nano_of_millis_value: Option<i32> = 12 [int32, optional],
        decimal_bytes: Option<Vec<u8>> = 13 [bytes = "vec", optional],
    }

    pub struct PbFetchLogReqForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        fetch_offset: i64 = 3 [int64, required],
        max_fetch_bytes: i32 = 4 [int32, required],
    }

    pub struct FetchLogResponse {
        tables_resp: Vec<PbFetchLogRespForTable> = 1 [message, repeated],
    }

    pub struct PbFetchLogRespForTable {
        table_id: i64 = 1 [int64, required],
        buckets_resp: Vec<PbFetchLogRespForBucket> = 2 [message, repeated],
    }

    pub struct PbFetchLogRespForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        error_code: Option<i32> = 3 [int32, optional],
        error_message: Option<String> = 4 [string, optional],
        high_watermark: Option<i64> = 5 [int64, optional],
        log_start_offset: Option<i64> = 6 [int64, optional],
        records: Option<Bytes> = 8 [bytes = "bytes", optional],
        /// Set when a filter pruned batches: the client's next fetch starts at least here.
        filtered_end_offset: Option<i64> = 9 [int64, optional],
    }

    pub struct LookupRequest {
        table_id: i64 = 1 [int64, required],
        buckets_req: Vec<PbLookupReqForBucket> = 2 [message, repeated],
    }

    pub struct PbLookupReqForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        keys: Vec<Bytes> = 3 [bytes = "bytes", repeated],
    }

    pub struct LookupResponse {
        buckets_resp: Vec<PbLookupRespForBucket> = 1 [message, repeated],
    }

    pub struct PbLookupRespForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        error_code: Option<i32> = 3 [int32, optional],
        error_message: Option<String> = 4 [string, optional],
        values: Vec<PbValue> = 5 [message, repeated],
    }

    pub struct PbValue {
        values: Option<Vec<u8>> = 1 [bytes = "vec", optional],
    }

    pub struct ListOffsetsRequest {
        follower_server_id: i32 = 1 [int32, required],
        offset_type: i32 = 2 [int32, required],
        table_id: i64 = 3 [int64, required],
        partition_id: Option<i64> = 4 [int64, optional],
        bucket_id: Vec<i32> = 5 [int32, repeated, packed = "true"],
        start_timestamp: Option<i64> = 6 [int64, optional],
    }

    pub struct ListOffsetsResponse {
        buckets_resp: Vec<PbListOffsetsRespForBucket> = 1 [message, repeated],
    }

    pub struct PbListOffsetsRespForBucket {
        bucket_id: i32 = 1 [int32, required],
        error_code: Option<i32> = 2 [int32, optional],
        error_message: Option<String> = 3 [string, optional],
        offset: Option<i64> = 4 [int64, optional],
    }

    // ---- security token and lake ----

    pub struct GetFileSystemSecurityTokenResponse {
        schema: String = 1 [string, required],
        token: Vec<u8> = 2 [bytes = "vec", required],
        expiration_time: Option<i64> = 3 [int64, optional],
        addition_info: Vec<PbKeyValue> = 4 [message, repeated],
    }

    pub struct GetLakeSnapshotRequest {
        table_path: PbTablePath = 1 [message, required],
        snapshot_id: Option<i64> = 2 [int64, optional],
        readable: Option<bool> = 3 [bool, optional],
    }

    pub struct GetLakeSnapshotResponse {
        table_id: i64 = 1 [int64, required],
        snapshot_id: i64 = 2 [int64, required],
        bucket_snapshots: Vec<PbLakeSnapshotForBucket> = 3 [message, repeated],
    }

    pub struct PbLakeSnapshotForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        log_offset: Option<i64> = 3 [int64, optional],
    }

    // ---- authentication ----

    pub struct AuthenticateRequest {
        protocol: String = 1 [string, required],
        token: Vec<u8> = 2 [bytes = "vec", required],
    }

    pub struct AuthenticateResponse {
        challenge: Option<Vec<u8>> = 1 [bytes = "vec", optional],
    }

    // ---- prefix lookup ----

    pub struct PrefixLookupRequest {
        table_id: i64 = 1 [int64, required],
        buckets_req: Vec<PbPrefixLookupReqForBucket> = 2 [message, repeated],
    }

    pub struct PbPrefixLookupReqForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        /// Encoded bucket keys, each a byte prefix of the encoded primary keys it matches.
        keys: Vec<Vec<u8>> = 3 [bytes = "vec", repeated],
    }

    pub struct PrefixLookupResponse {
        buckets_resp: Vec<PbPrefixLookupRespForBucket> = 1 [message, repeated],
    }

    pub struct PbPrefixLookupRespForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        error_code: Option<i32> = 3 [int32, optional],
        error_message: Option<String> = 4 [string, optional],
        /// One list per requested key, in request order: the values of every matching row.
        value_lists: Vec<PbValueList> = 5 [message, repeated],
    }

    pub struct PbValueList {
        values: Vec<Vec<u8>> = 1 [bytes = "vec", repeated],
    }

    // ---- alter table ----

    pub struct AlterTableRequest {
        table_path: PbTablePath = 1 [message, required],
        ignore_if_not_exists: bool = 2 [bool, required],
        config_changes: Vec<PbAlterConfig> = 3 [message, repeated],
        add_columns: Vec<PbAddColumn> = 4 [message, repeated],
        drop_columns: Vec<PbColumnChange> = 5 [message, repeated],
        rename_columns: Vec<PbColumnChange> = 6 [message, repeated],
        modify_columns: Vec<PbColumnChange> = 7 [message, repeated],
    }

    pub struct PbAlterConfig {
        config_key: String = 1 [string, required],
        config_value: Option<String> = 2 [string, optional],
        /// SET = 0, DELETE = 1 (reset), APPEND = 2, SUBTRACT = 3.
        op_type: i32 = 3 [int32, required],
    }

    /// A column added by AlterTable.
    pub struct PbAddColumn {
        column_name: String = 1 [string, required],
        data_type_json: Vec<u8> = 2 [bytes = "vec", required],
        comment: Option<String> = 3 [string, optional],
        /// LAST = 0, FIRST = 1, AFTER = 3.
        column_position_type: i32 = 4 [int32, required],
        agg_function_type: Option<String> = 5 [string, optional],
    }

    /// A schema change silt refuses, as Fluss 0.9.1 does (PbDropColumn, PbRenameColumn,
    /// PbModifyColumn): only the column name (field 1 in each) is read, to name it in the error.
    pub struct PbColumnChange {
        column_name: Option<String> = 1 [string, optional],
    }

    // ---- limit scan ----

    pub struct LimitScanRequest {
        table_id: i64 = 2 [int64, required],
        partition_id: Option<i64> = 3 [int64, optional],
        bucket_id: i32 = 4 [int32, required],
        limit: i32 = 5 [int32, required],
    }

    pub struct LimitScanResponse {
        error_code: Option<i32> = 1 [int32, optional],
        error_message: Option<String> = 2 [string, optional],
        is_log_table: Option<bool> = 3 [bool, optional],
        /// Log batches for a log table; one value record batch for a primary-key table.
        records: Option<Bytes> = 4 [bytes = "bytes", optional],
    }

    // ---- table stats ----

    pub struct GetTableStatsRequest {
        table_id: i64 = 1 [int64, required],
        buckets_req: Vec<PbTableStatsReqForBucket> = 2 [message, repeated],
        /// Column statistics asked for; reserved in Fluss 0.9.1, which answers none.
        target_columns: Vec<i32> = 3 [int32, repeated, packed = "true"],
    }

    pub struct PbTableStatsReqForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
    }

    pub struct GetTableStatsResponse {
        buckets_resp: Vec<PbTableStatsRespForBucket> = 1 [message, repeated],
    }

    /// One bucket's stats, or its error: `row_count` is the live keys of a primary-key bucket and
    /// the records between log start and high watermark of a log bucket.
    pub struct PbTableStatsRespForBucket {
        error_code: Option<i32> = 1 [int32, optional],
        error_message: Option<String> = 2 [string, optional],
        partition_id: Option<i64> = 3 [int64, optional],
        bucket_id: i32 = 4 [int32, required],
        row_count: Option<i64> = 5 [int64, optional],
    }

    // ---- kv snapshots and their leases ----

    pub struct GetLatestKvSnapshotsRequest {
        table_path: PbTablePath = 1 [message, required],
        partition_name: Option<String> = 2 [string, optional],
    }

    pub struct GetLatestKvSnapshotsResponse {
        table_id: i64 = 1 [int64, required],
        partition_id: Option<i64> = 2 [int64, optional],
        latest_snapshots: Vec<PbKvSnapshot> = 3 [message, repeated],
    }

    /// A bucket's latest kv snapshot; both options are absent when the bucket has none, which
    /// tells a reader to read the changelog from the earliest offset.
    pub struct PbKvSnapshot {
        bucket_id: i32 = 1 [int32, required],
        snapshot_id: Option<i64> = 2 [int64, optional],
        log_offset: Option<i64> = 3 [int64, optional],
    }

    pub struct GetKvSnapshotMetadataRequest {
        table_id: i64 = 1 [int64, required],
        partition_id: Option<i64> = 2 [int64, optional],
        bucket_id: i32 = 3 [int32, required],
        snapshot_id: i64 = 4 [int64, required],
    }

    pub struct GetKvSnapshotMetadataResponse {
        log_offset: i64 = 1 [int64, required],
        snapshot_files: Vec<PbRemotePathAndLocalFile> = 2 [message, repeated],
    }

    pub struct PbRemotePathAndLocalFile {
        remote_path: String = 1 [string, required],
        local_file_name: String = 2 [string, required],
    }

    pub struct AcquireKvSnapshotLeaseRequest {
        lease_id: String = 1 [string, required],
        lease_duration_ms: i64 = 2 [int64, required],
        snapshots_to_lease: Vec<PbKvSnapshotLeaseForTable> = 3 [message, repeated],
    }

    pub struct AcquireKvSnapshotLeaseResponse {
        unavailable_snapshots: Vec<PbKvSnapshotLeaseForTable> = 1 [message, repeated],
    }

    pub struct PbKvSnapshotLeaseForTable {
        table_id: i64 = 1 [int64, required],
        bucket_snapshots: Vec<PbKvSnapshotLeaseForBucket> = 2 [message, repeated],
    }

    pub struct PbKvSnapshotLeaseForBucket {
        partition_id: Option<i64> = 1 [int64, optional],
        bucket_id: i32 = 2 [int32, required],
        snapshot_id: i64 = 3 [int64, required],
    }

    pub struct ReleaseKvSnapshotLeaseRequest {
        lease_id: String = 1 [string, required],
        buckets_to_release: Vec<PbTableBucket> = 2 [message, repeated],
    }

    pub struct PbTableBucket {
        table_id: i64 = 1 [int64, required],
        partition_id: Option<i64> = 2 [int64, optional],
        bucket_id: i32 = 3 [int32, required],
    }

    pub struct DropKvSnapshotLeaseRequest {
        lease_id: String = 1 [string, required],
    }
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

// ---- Fluss 1.0's keys: AlterDatabase, ScanKv, GetClusterHealth ----
messages! {
    pub struct AlterDatabaseRequest {
        database_name: String = 1 [string, required],
        ignore_if_not_exists: bool = 2 [bool, required],
        config_changes: Vec<PbAlterConfig> = 3 [message, repeated],
        comment: Option<String> = 4 [string, optional],
    }

    /// Over every bucket: replicas, in-sync replicas, leaders, active leaders, and the status
    /// (GREEN 0, YELLOW 1, RED 2, UNKNOWN 3).
    pub struct GetClusterHealthResponse {
        num_replicas: i32 = 1 [int32, required],
        in_sync_replicas: i32 = 2 [int32, required],
        num_leader_replicas: i32 = 3 [int32, required],
        active_leader_replicas: i32 = 4 [int32, required],
        status: i32 = 5 [int32, required],
    }

    pub struct PbScanReqForBucket {
        table_id: i64 = 1 [int64, required],
        partition_id: Option<i64> = 2 [int64, optional],
        bucket_id: i32 = 3 [int32, required],
        limit: Option<i64> = 4 [int64, optional],
    }

    pub struct ScanKvRequest {
        scanner_id: Option<Bytes> = 1 [bytes = "bytes", optional],
        bucket_scan_req: Option<PbScanReqForBucket> = 2 [message, optional],
        call_seq_id: Option<i32> = 3 [int32, optional],
        batch_size_bytes: Option<i32> = 4 [int32, optional],
        close_scanner: Option<bool> = 5 [bool, optional],
    }

    /// Errors are in the body, as Fluss answers ScanKv; `log_offset` only in the first answer
    /// of a scan: the changelog offset its rows reflect.
    pub struct ScanKvResponse {
        error_code: Option<i32> = 1 [int32, optional],
        error_message: Option<String> = 2 [string, optional],
        scanner_id: Option<Bytes> = 3 [bytes = "bytes", optional],
        has_more_results: Option<bool> = 4 [bool, optional],
        records: Option<Bytes> = 5 [bytes = "bytes", optional],
        log_offset: Option<i64> = 6 [int64, optional],
    }
}
