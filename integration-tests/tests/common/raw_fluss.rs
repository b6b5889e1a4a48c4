//! Raw Fluss requests, for what no official client sends on purpose (a new writer starting at
//! sequence 1, a batch retried after the server crashed), sent the same way to silt and to a
//! real Fluss server so their answers can be compared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use silt_hotstore::codec::testing::{BatchSpec, build_batch};
use silt_hotstore::protocol::messages::{
    ErrorResponse, PbWriteReqForBucket, ProduceLogRequest, ProduceLogResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PRODUCE_LOG: i16 = 1014;
/// Error codes fluss-rs retries: network, log storage, not leader or follower, unknown table
/// or bucket (a restarted server that has not loaded it yet), fenced leader epoch, request
/// timeout, storage, not enough replicas.
const RETRIABLE: [i32; 8] = [1, 10, 12, 21, 24, 25, 26, 29];

/// A log batch of one writer, as fluss-rs lays it out, for a table `(id BIGINT)`.
pub fn id_batch(ids: &[i64], writer_id: i64, batch_sequence: i32) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(ids.to_vec()))],
    )
    .expect("an id column");
    let mut ipc = Vec::new();
    let mut writer =
        arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &schema).expect("ipc writer");
    let schema_message_bytes = writer.get_ref().len();
    writer.write(&rows).expect("ipc batch");
    drop(writer);
    build_batch(&BatchSpec {
        record_count: ids.len() as i32,
        writer_id,
        batch_sequence,
        payload: ipc[schema_message_bytes..].to_vec(),
        ..BatchSpec::default()
    })
}

/// How a produce ended: the error code (0 for none) and the base offset given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub error_code: i32,
    pub base_offset: Option<i64>,
}

/// Sends one batch to bucket 0 of `table_id` on `leader`, retrying errors a client retries
/// (a restarting server) for up to `patience`.
pub async fn produce(
    leader: &str,
    table_id: i64,
    batch: &[u8],
    patience: Duration,
) -> Result<Produced> {
    let started = Instant::now();
    loop {
        let outcome = produce_once(leader, table_id, batch).await;
        let retry = match &outcome {
            Ok(p) => RETRIABLE.contains(&p.error_code),
            Err(_) => true,
        };
        if !retry || started.elapsed() > patience {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn produce_once(leader: &str, table_id: i64, batch: &[u8]) -> Result<Produced> {
    let request = ProduceLogRequest {
        acks: -1,
        table_id,
        timeout_ms: 30_000,
        buckets_req: vec![PbWriteReqForBucket {
            partition_id: None,
            bucket_id: 0,
            records: Bytes::copy_from_slice(batch),
            original_partition_name: None,
            routing_bucket_count: None,
        }],
    };
    let (success, body) = call(leader, PRODUCE_LOG, &request.encode_to_vec()).await?;
    if !success {
        let error = ErrorResponse::decode(body)?;
        return Ok(Produced {
            error_code: error.error_code,
            base_offset: None,
        });
    }
    let response = ProduceLogResponse::decode(body)?;
    let Some(bucket) = response.buckets_resp.first() else {
        bail!("a produce response without a bucket");
    };
    Ok(Produced {
        error_code: bucket.error_code.unwrap_or(0),
        base_offset: bucket.base_offset,
    })
}

/// One request on a new connection: (success, response body).
pub async fn call(addr: &str, api_key: i16, body: &[u8]) -> Result<(bool, Bytes)> {
    let mut stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .with_context(|| format!("connect to {addr}"))??;
    let mut frame = BytesMut::with_capacity(12 + body.len());
    frame.put_i32(8 + body.len() as i32);
    frame.put_i16(api_key);
    frame.put_i16(0);
    frame.put_i32(1);
    frame.put_slice(body);
    stream.write_all(&frame).await?;
    let mut prefix = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(35), stream.read_exact(&mut prefix))
        .await
        .context("no response within 35 s")??;
    let mut response = vec![0u8; i32::from_be_bytes(prefix) as usize];
    stream.read_exact(&mut response).await?;
    let mut response = Bytes::from(response);
    let kind = response.get_u8();
    let _request_id = response.get_i32();
    Ok((kind == 0, response))
}

/// What a server answers to one writer's batches around a restart (every field must match
/// between silt and a real Fluss server, except where `fluss-real/OBSERVED.md` says why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterRecord {
    /// A writer the server never saw, starting at sequence 1.
    pub unknown_writer_at_sequence_1: Produced,
    pub sequence_0: Produced,
    pub sequence_1: Produced,
    /// Sequence 1 again, after the server restarted.
    pub last_batch_retried_after_restart: Produced,
    /// Sequence 0 again, after the restart.
    pub older_batch_retried_after_restart: Produced,
    pub sequence_2_after_restart: Produced,
}

/// The writer scenario's table: created fresh, one bucket.
pub const WRITER_DATABASE: &str = "silt_writers";

/// Creates the scenario's table through fluss-rs and sends the batches before the restart.
/// Returns the table id and the answers so far.
pub async fn writer_scenario_before_restart(
    bootstrap: &str,
    leader: &str,
) -> Result<(i64, [Produced; 3])> {
    use fluss::metadata::DataTypes;
    use silt_testkit::tables::Table;
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    let connection = fluss::client::FlussConnection::new(config).await?;
    let admin = connection.get_admin()?;
    let _ = admin.drop_database(WRITER_DATABASE, true, true).await;
    admin.create_database(WRITER_DATABASE, None, false).await?;
    let table = Table::log(WRITER_DATABASE, "w")
        .column("id", DataTypes::bigint())
        .buckets(1);
    let path = table.path.clone();
    admin
        .create_table(&path, &table.descriptor()?, false)
        .await?;
    let table_id = admin.get_table_info(&path).await?.get_table_id();
    let patience = Duration::from_secs(30);
    let writer = 4_242;
    let unknown = produce(leader, table_id, &id_batch(&[1, 2], writer, 1), patience).await?;
    let first = produce(leader, table_id, &id_batch(&[1, 2], writer, 0), patience).await?;
    let second = produce(leader, table_id, &id_batch(&[3, 4], writer, 1), patience).await?;
    Ok((table_id, [unknown, first, second]))
}

/// The batches after the restart, retried while the server comes back.
pub async fn writer_scenario_after_restart(
    leader: &str,
    table_id: i64,
    before: [Produced; 3],
) -> Result<WriterRecord> {
    let patience = Duration::from_secs(90);
    let writer = 4_242;
    let last = produce(leader, table_id, &id_batch(&[3, 4], writer, 1), patience).await?;
    let older = produce(leader, table_id, &id_batch(&[1, 2], writer, 0), patience).await?;
    let next = produce(leader, table_id, &id_batch(&[5, 6], writer, 2), patience).await?;
    let [unknown, first, second] = before;
    Ok(WriterRecord {
        unknown_writer_at_sequence_1: unknown,
        sequence_0: first,
        sequence_1: second,
        last_batch_retried_after_restart: last,
        older_batch_retried_after_restart: older,
        sequence_2_after_restart: next,
    })
}
