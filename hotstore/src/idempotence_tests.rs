//! Writer idempotence of primary-key writes across restarts, through the request handlers.
//!
//! Regression: the kv writer table lived in memory only and changelog batches carried no writer
//! id, so a PutKv made durable just before a crash and retried after the restart was applied
//! again: with another writer's upsert of the same key in between, that acknowledged upsert was
//! overwritten and an extra -U/+U pair landed in the changelog. Now the changelog batch carries
//! the writer id and sequence, the log tablet rebuilds writer state from the log, and a write
//! that changed nothing leaves a durable mark.

use crate::fuzz_tests::{encode_pk_row, pk_descriptor};
use crate::protocol::messages::*;
use crate::protocol::{RequestHeader, api};
use crate::server::ServerHandle;
use crate::test_server::{connect, create_table, start};
use bytes::{Buf, Bytes};
use fluss::metadata::KvFormat;
use fluss::record::kv::KvRecordBatchBuilder;
use prost::Message;

const KEY: [u8; 4] = [1, 0, 0, 0];

pub(crate) async fn create_pk_table(server: &ServerHandle) -> i64 {
    let connection = connect(server).await;
    create_table(&connection, "idempotent", &pk_descriptor())
        .await
        .1
}

async fn call<M: Message + Default>(server: &ServerHandle, api_key: i16, body: Vec<u8>) -> M {
    let header = RequestHeader {
        api_key,
        api_version: 0,
        request_id: 1,
    };
    let mut frame = crate::handlers::handle(server.service(), header, Bytes::from(body)).await;
    frame.advance(4);
    assert_eq!(frame.get_u8(), 0, "a success response");
    frame.advance(4);
    M::decode(frame).unwrap()
}

/// Upserts `name` for the test key as batch `sequence` of `writer_id`; returns (error code,
/// log end offset).
pub(crate) async fn put(
    server: &ServerHandle,
    table_id: i64,
    writer_id: i64,
    sequence: i32,
    name: &str,
) -> (i32, i64) {
    let mut builder = KvRecordBatchBuilder::new(1, 1 << 20, KvFormat::COMPACTED);
    builder
        .append_row(&KEY, Some(&encode_pk_row(1, name)))
        .unwrap();
    builder.set_writer_state(writer_id, sequence);
    let records = builder.build().unwrap();
    let request = PutKvRequest {
        acks: -1,
        table_id,
        timeout_ms: 30_000,
        target_columns: vec![],
        buckets_req: vec![PbWriteReqForBucket {
            partition_id: None,
            bucket_id: 0,
            records,
            original_partition_name: None,
            routing_bucket_count: None,
        }],
        agg_mode: None,
    };
    let response: PutKvResponse = call(server, api::PUT_KV, request.encode_to_vec()).await;
    let bucket = &response.buckets_resp[0];
    (
        bucket.error_code.unwrap_or(0),
        bucket.log_end_offset.unwrap_or(-1),
    )
}

async fn lookup(server: &ServerHandle, table_id: i64) -> Option<Vec<u8>> {
    let request = LookupRequest {
        table_id,
        buckets_req: vec![PbLookupReqForBucket {
            partition_id: None,
            bucket_id: 0,
            keys: vec![Bytes::copy_from_slice(&KEY)],
        }],
    };
    let response: LookupResponse = call(server, api::LOOKUP, request.encode_to_vec()).await;
    response.buckets_resp[0].values[0].values.clone()
}

fn stored(name: &str) -> Option<Vec<u8>> {
    let mut value = 1i16.to_le_bytes().to_vec();
    value.extend(encode_pk_row(1, name));
    Some(value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_write_retried_after_a_restart_is_not_applied_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let table_id = create_pk_table(&server).await;
    assert_eq!(put(&server, table_id, 100, 0, "w").await, (0, 1), "+I");
    // Writer 100's acknowledgement is lost in a crash; writer 200 writes after the restart.
    server.shutdown().await.unwrap();
    let server = start(dir.path()).await;
    assert_eq!(put(&server, table_id, 200, 0, "x").await, (0, 3), "-U +U");
    assert_eq!(
        put(&server, table_id, 100, 0, "w").await,
        (0, 1),
        "the retry is a duplicate, answered with its original log end"
    );
    assert_eq!(
        lookup(&server, table_id).await,
        stored("x"),
        "writer 200's upsert stands"
    );

    // The same for a write that changed nothing (it appends no changelog).
    assert_eq!(
        put(&server, table_id, 100, 1, "x").await,
        (0, 3),
        "unchanged"
    );
    server.shutdown().await.unwrap();
    let server = start(dir.path()).await;
    assert_eq!(put(&server, table_id, 200, 1, "y").await, (0, 5));
    assert_eq!(
        put(&server, table_id, 100, 1, "x").await,
        (0, 3),
        "a duplicate"
    );
    assert_eq!(lookup(&server, table_id).await, stored("y"));
    assert_eq!(
        put(&server, table_id, 300, 4, "z").await.0,
        crate::protocol::code::OUT_OF_ORDER_SEQUENCE,
        "an unknown writer must start at sequence 0"
    );
    server.shutdown().await.unwrap();
}
