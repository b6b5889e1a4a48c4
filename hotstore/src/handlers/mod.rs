//! Request handlers: decode a request, call the tablets or the catalog, encode the answer.
//! [`handle`] dispatches by API key; [`ddl`] answers the catalog-level requests (ApiVersions,
//! Metadata, DDL, writer ids, lake snapshots), [`log`] produce, fetch and offsets, [`kv`] the
//! primary-key writes and lookups, [`prefix_lookup`] the bucket-key prefix lookups,
//! [`limit_scan`] the bounded peek at a bucket's rows, [`scan_kv`] the full scan of a
//! primary-key bucket in batches (Fluss 1.0),
//! [`kv_snapshots`] the kv snapshot and snapshot-lease requests, [`table_stats`] the
//! per-bucket row counts. Handlers read [`Service`], the
//! server's state; nothing below imports them.

pub(crate) mod ddl;
pub(crate) mod kv;
pub(crate) mod kv_snapshots;
pub(crate) mod limit_scan;
pub(crate) mod log;
pub(crate) mod log_filter;
pub(crate) mod prefix_lookup;
pub(crate) mod scan_kv;
pub(crate) mod table_stats;

use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, Frame, RequestHeader, api, code};
use crate::service::Service;
use bytes::Bytes;
use prost::Message;

/// Runs one request and returns the complete response frame as one buffer (for tests that
/// parse it; the server writes [`respond`]'s chunks).
#[cfg(test)]
pub async fn handle(service: &Service, header: RequestHeader, body: Bytes) -> Bytes {
    respond(service, header, body).await.into_bytes()
}

/// Runs one request and returns the complete response frame.
pub async fn respond(service: &Service, header: RequestHeader, body: Bytes) -> Frame {
    let id = header.request_id;
    let Some(&(_, min, max)) = api::SERVED
        .iter()
        .find(|(key, _, _)| *key == header.api_key)
    else {
        return error(
            id,
            ApiError::new(
                code::UNSUPPORTED_VERSION,
                format!(
                    "api key {} is not served by silt's hotstore",
                    header.api_key
                ),
            ),
        );
    };
    if header.api_version < min || header.api_version > max {
        return error(
            id,
            ApiError::new(
                code::UNSUPPORTED_VERSION,
                format!(
                    "api key {} version {} is not supported (silt serves {min}..={max})",
                    header.api_key, header.api_version
                ),
            ),
        );
    }
    match header.api_key {
        api::API_VERSIONS => reply(id, Ok(api_versions())),
        api::CREATE_DATABASE => reply(id, ddl::create_database(service, body)),
        api::DROP_DATABASE => reply(id, ddl::drop_database(service, body).await),
        api::LIST_DATABASES => reply(id, ddl::list_databases(service, body)),
        api::DATABASE_EXISTS => reply(id, ddl::database_exists(service, body)),
        api::GET_DATABASE_INFO => reply(id, ddl::get_database_info(service, body)),
        api::CREATE_TABLE => reply(id, ddl::create_table(service, body).await),
        api::DROP_TABLE => reply(id, ddl::drop_table(service, body).await),
        api::GET_TABLE_INFO => reply(id, ddl::get_table_info(service, body)),
        api::LIST_TABLES => reply(id, ddl::list_tables(service, body)),
        api::LIST_PARTITION_INFOS => reply(id, ddl::list_partition_infos(service, body)),
        api::CREATE_PARTITION => reply(id, ddl::create_partition(service, body).await),
        api::DROP_PARTITION => reply(id, ddl::drop_partition(service, body).await),
        api::TABLE_EXISTS => reply(id, ddl::table_exists(service, body)),
        api::GET_TABLE_SCHEMA => reply(id, ddl::get_table_schema(service, body)),
        api::METADATA => reply(id, ddl::metadata(service, body)),
        api::INIT_WRITER => reply(id, ddl::init_writer(service, body)),
        api::GET_FILE_SYSTEM_SECURITY_TOKEN => reply(id, Ok(ddl::empty_security_token())),
        api::GET_LAKE_SNAPSHOT => reply(id, ddl::get_lake_snapshot(service, body)),
        api::PRODUCE_LOG => reply(id, log::produce(service, body).await),
        // The records go out as the log read them (see `protocol::frame`).
        api::FETCH_LOG => match log::fetch(service, body).await {
            Ok(response) => protocol::frame::encode_fetch_success(id, &response),
            Err(e) => error(id, e),
        },
        api::LIST_OFFSETS => reply(id, log::list_offsets(service, body).await),
        api::PUT_KV => reply(id, kv::put(service, body, header.api_version).await),
        api::LOOKUP => reply(id, kv::lookup(service, body, header.api_version).await),
        api::LIMIT_SCAN => reply(id, limit_scan::limit_scan(service, body)),
        api::PREFIX_LOOKUP => reply(
            id,
            prefix_lookup::prefix_lookup(service, body, header.api_version),
        ),
        api::ALTER_TABLE => reply(id, ddl::alter_table(service, body)),
        api::GET_LATEST_KV_SNAPSHOTS => {
            reply(id, kv_snapshots::get_latest_kv_snapshots(service, body))
        }
        api::GET_KV_SNAPSHOT_METADATA => {
            reply(id, kv_snapshots::get_kv_snapshot_metadata(service, body))
        }
        api::ACQUIRE_KV_SNAPSHOT_LEASE => {
            reply(id, kv_snapshots::acquire_kv_snapshot_lease(service, body))
        }
        api::RELEASE_KV_SNAPSHOT_LEASE => {
            reply(id, kv_snapshots::release_kv_snapshot_lease(service, body))
        }
        api::DROP_KV_SNAPSHOT_LEASE => {
            reply(id, kv_snapshots::drop_kv_snapshot_lease(service, body))
        }
        api::GET_TABLE_STATS => reply(id, table_stats::get_table_stats(service, body)),
        api::ALTER_DATABASE => reply(id, ddl::alter_database(service, body)),
        api::GET_CLUSTER_HEALTH => reply(id, Ok(ddl::get_cluster_health(service))),
        api::SCAN_KV => reply(id, Ok(scan_kv::scan_kv(service, body).await)),
        // The connection answers Authenticate itself (it owns the per-connection state).
        api::AUTHENTICATE => error(
            id,
            ApiError::new(
                code::AUTHENTICATE_EXCEPTION,
                "authenticate is handled by the connection, not the request handlers",
            ),
        ),
        other => error(
            id,
            ApiError::new(
                code::UNSUPPORTED_VERSION,
                format!("api key {other} has no handler"),
            ),
        ),
    }
}

/// A primary-key table's kv tablet for `bucket`; its absence is a broken store, named.
fn kv_tablet<'a>(
    table: &crate::tablets::TableRuntime,
    bucket: &'a crate::tablets::Bucket,
) -> Result<&'a crate::storage::KvTablet, ApiError> {
    bucket.kv.as_ref().ok_or_else(|| {
        ApiError::new(
            code::KV_STORAGE_EXCEPTION,
            format!(
                "{} bucket {} has a primary key but no kv tablet",
                table.entry.qualified_name(),
                bucket.id
            ),
        )
    })
}

/// The catalog entry of the table a request names by its path.
/// The answer for a bucket of a table the server does not hold (dropped, or an id the client's
/// metadata still has), as Fluss gives it: UNKNOWN_TABLE_OR_BUCKET for that bucket, in Fluss's
/// words. A write request gets it bucket by bucket, never as a failed request: fluss-rs then
/// asks for the table by path and, finding it gone, fails the write with TableNotExist and
/// forgets the table, where a failed request would be retried as a network error until the
/// client's delivery deadline.
fn unknown_table_bucket(table_id: i64, partition_id: Option<i64>, bucket: i32) -> ApiError {
    let partition = partition_id
        .map(|id| format!(", partitionId={id}"))
        .unwrap_or_default();
    ApiError::new(
        code::UNKNOWN_TABLE_OR_BUCKET,
        format!(
            "Unknown table or bucket: TableBucket{{tableId={table_id}{partition}, bucket={bucket}}}"
        ),
    )
}

fn table_at(
    service: &Service,
    path: &PbTablePath,
) -> Result<std::sync::Arc<crate::catalog::TableEntry>, ApiError> {
    service.catalog.table(&path.database_name, &path.table_name)
}

fn api_versions() -> ApiVersionsResponse {
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

fn reply<M: Message>(request_id: i32, result: Result<M, ApiError>) -> Frame {
    match result {
        Ok(body) => protocol::encode_success(request_id, &body).into(),
        Err(e) => error(request_id, e),
    }
}

fn error(request_id: i32, error: ApiError) -> Frame {
    protocol::encode_error(request_id, &error).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::ServerConfig;
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
        let (kind, id, body) = parse_response(fixture.runtime.block_on(handle(
            &fixture.service,
            header,
            body,
        )));
        assert_eq!(id, 9);
        (kind, body)
    }

    #[test]
    fn unknown_api_key_and_version_get_error_responses() {
        for (key, version) in [(999, 0), (1041, 0), (api::METADATA, 7)] {
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
