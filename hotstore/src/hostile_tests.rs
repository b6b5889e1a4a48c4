//! Hostile input against a running hotstore over real TCP: malformed, oversized, truncated and
//! stalled frames, wrong versions, unknown API keys, tables and buckets, garbage record batches,
//! invalid names, SASL/PLAIN, and a thousand clients at once. Each case gets an error response
//! or a closed connection, and the official fluss-rs client keeps working afterwards.

use crate::auth::{SaslConfig, SaslUser};
use crate::protocol::messages::*;
use crate::protocol::{api, code};
use crate::server::{Server, ServerConfig, ServerHandle};
use crate::test_server::{append, log_table, start_connected};
use bytes::{Buf, BufMut, Bytes};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::rpc::FlussError::{
    self, AuthenticateException, InvalidConfigException, InvalidDatabaseException,
    InvalidTableException,
};
use fluss::rpc::message::OffsetSpec;
use prost::Message;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_secs(20);

async fn start(dir: &std::path::Path, configure: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut config = crate::test_server::config(dir);
    configure(&mut config);
    Server::start(config).await.unwrap()
}

async fn connect(
    server: &ServerHandle,
    credentials: Option<(&str, &str)>,
) -> fluss::error::Result<FlussConnection> {
    let mut config = fluss::config::Config {
        bootstrap_servers: server.local_addr().to_string(),
        ..Default::default()
    };
    if let Some((username, password)) = credentials {
        config.security_protocol = "sasl".into();
        config.security_sasl_username = username.into();
        config.security_sasl_password = password.into();
    }
    FlussConnection::new(config).await
}

/// `result` failed with the error the client maps `expected` to; `what` names the call.
fn assert_refused<T: std::fmt::Debug>(
    result: fluss::error::Result<T>,
    expected: FlussError,
    what: &str,
) {
    let error = result.unwrap_err();
    assert_eq!(error.api_error(), Some(expected), "{what}: {error}");
}

/// Records in the table: the sum of the latest offsets of its buckets.
async fn row_count(connection: &FlussConnection, path: &TablePath, buckets: i32) -> i64 {
    let admin = connection.get_admin().unwrap();
    let bucket_ids: Vec<i32> = (0..buckets).collect();
    admin
        .list_offsets(path, &bucket_ids, OffsetSpec::Latest)
        .await
        .unwrap()
        .values()
        .sum()
}

/// A raw connection that speaks frames.
struct Raw {
    stream: TcpStream,
    next_id: i32,
}

/// A response frame: (type 0 success / 1 error, body).
type Response = (u8, Bytes);

impl Raw {
    async fn open(server: &ServerHandle) -> Raw {
        Raw {
            stream: TcpStream::connect(server.local_addr()).await.unwrap(),
            next_id: 1,
        }
    }

    async fn send(&mut self, api_key: i16, version: i16, body: &[u8]) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = Vec::with_capacity(12 + body.len());
        frame.put_i32(8 + body.len() as i32);
        frame.put_i16(api_key);
        frame.put_i16(version);
        frame.put_i32(id);
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).await.unwrap();
        id
    }

    /// The next response, or `None` when the server closed the connection.
    async fn recv(&mut self) -> Option<(i32, Response)> {
        let mut prefix = [0u8; 4];
        match tokio::time::timeout(TIMEOUT, self.stream.read_exact(&mut prefix)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return None,
            Err(_) => panic!("no response and no close within {TIMEOUT:?}: the server hangs"),
        }
        let mut frame = vec![0u8; i32::from_be_bytes(prefix) as usize];
        self.stream.read_exact(&mut frame).await.ok()?;
        let mut frame = Bytes::from(frame);
        let kind = frame.get_u8();
        let id = frame.get_i32();
        Some((id, (kind, frame)))
    }

    async fn call(&mut self, api_key: i16, version: i16, body: &[u8]) -> Response {
        let id = self.send(api_key, version, body).await;
        let (got, response) = self
            .recv()
            .await
            .expect("a response, not a closed connection");
        assert_eq!(got, id, "response to the request sent");
        response
    }

    async fn call_message(&mut self, api_key: i16, body: &impl Message) -> Response {
        self.call(api_key, 0, &body.encode_to_vec()).await
    }

    /// True when the server closes the connection (EOF) before TIMEOUT.
    async fn closed(&mut self) -> bool {
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(TIMEOUT, self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// The error code of an error response; panics on a success.
fn error_code((kind, body): Response) -> i32 {
    assert_eq!(kind, 1, "an error response");
    ErrorResponse::decode(body).unwrap().error_code
}

fn success<M: Message + Default>((kind, body): Response) -> M {
    if kind != 0 {
        panic!("success expected, got {:?}", ErrorResponse::decode(body));
    }
    M::decode(body).unwrap()
}

/// Per-bucket outcome of a produce: the error code, or 0 with the base offset.
fn produce_outcome(response: Response) -> (i32, i64) {
    let response: ProduceLogResponse = success(response);
    let bucket = &response.buckets_resp[0];
    (
        bucket.error_code.unwrap_or(0),
        bucket.base_offset.unwrap_or(-1),
    )
}

fn produce(table_id: i64, bucket_id: i32, records: Vec<u8>) -> ProduceLogRequest {
    ProduceLogRequest {
        acks: -1,
        table_id,
        timeout_ms: 10_000,
        buckets_req: vec![PbWriteReqForBucket {
            partition_id: None,
            bucket_id,
            records: Bytes::from(records),
            ..PbWriteReqForBucket::default()
        }],
    }
}

fn fetch(table_id: i64, bucket_id: i32) -> FetchLogRequest {
    FetchLogRequest::of_buckets(table_id, &[(bucket_id, 0)])
}

/// Field positions of a log batch header (little-endian); V2 shifts the fields after the
/// commit timestamp by a 4-byte leader epoch.
fn patch_header(batch: &mut [u8], schema_id: Option<i16>, writer: Option<(i64, i32)>) {
    let shift = if batch[12] >= 2 { 4 } else { 0 };
    if let Some(schema_id) = schema_id {
        batch[25 + shift..27 + shift].copy_from_slice(&schema_id.to_le_bytes());
    }
    if let Some((writer_id, sequence)) = writer {
        batch[32 + shift..40 + shift].copy_from_slice(&writer_id.to_le_bytes());
        batch[40 + shift..44 + shift].copy_from_slice(&sequence.to_le_bytes());
    }
    crate::codec::header::recompute_crc(batch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_errors_or_a_closed_connection_and_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |config| {
        config.frame_bytes_max = 1 << 20;
        config.frame_read_timeout_ms = 500;
    })
    .await;
    let client = connect(&server, None).await.unwrap();
    let path = TablePath::new("fluss", "hostile");
    let admin = client.get_admin().unwrap();
    admin
        .create_table(&path, &log_table(2), false)
        .await
        .unwrap();
    let table_id = admin.get_table_info(&path).await.unwrap().get_table_id();
    append(&client, &path, 0..3, "row").await;

    // A batch exactly as a client wrote it (read back raw), to corrupt one field at a time.
    let mut raw = Raw::open(&server).await;
    let mut template = None;
    for bucket in 0..2 {
        let response: FetchLogResponse = success(
            raw.call_message(api::FETCH_LOG, &fetch(table_id, bucket))
                .await,
        );
        if let Some(records) = &response.tables_resp[0].buckets_resp[0].records
            && !records.is_empty()
        {
            let first = crate::codec::Batch::split(records.clone(), false)
                .unwrap()
                .remove(0);
            template = Some((bucket, first.data.to_vec()));
        }
    }
    let (bucket, template) = template.expect("the appended rows are in some bucket");
    let mut fresh = template.clone();
    patch_header(&mut fresh, None, Some((-1, -1)));

    // Requests that are well framed but wrong: an error response on the same connection.
    assert_eq!(
        error_code(raw.call(4242, 0, b"").await),
        code::UNSUPPORTED_VERSION,
        "unknown api key"
    );
    assert_eq!(
        error_code(raw.call(-7, 0, b"").await),
        code::UNSUPPORTED_VERSION,
        "negative api key"
    );
    assert_eq!(
        error_code(raw.call(api::METADATA, 9, b"").await),
        code::UNSUPPORTED_VERSION,
        "wrong version"
    );
    assert_eq!(
        error_code(raw.call(api::CREATE_TABLE, 0, b"\xff\xff\xff").await),
        code::CORRUPT_MESSAGE,
        "garbage body"
    );
    // A write to a table the server does not hold is answered bucket by bucket, as Fluss does
    // (a failed request would be retried by the clients as a network error).
    let (error, _) = produce_outcome(
        raw.call_message(api::PRODUCE_LOG, &produce(987_654, 0, fresh.clone()))
            .await,
    );
    assert_eq!(error, code::UNKNOWN_TABLE_OR_BUCKET, "unknown table id");
    let unknown_table = TablePathRequest {
        table_path: PbTablePath {
            database_name: "fluss".into(),
            table_name: "nope".into(),
        },
    };
    assert_eq!(
        error_code(raw.call_message(api::GET_TABLE_INFO, &unknown_table).await),
        code::TABLE_NOT_EXIST,
        "unknown table name"
    );
    let lookup = LookupRequest {
        table_id,
        buckets_req: vec![PbLookupReqForBucket {
            partition_id: None,
            bucket_id: 0,
            keys: vec![Bytes::from_static(b"k")],
        }],
    };
    assert_eq!(
        raw.call_message(api::LOOKUP, &lookup).await.0,
        1,
        "lookup on a log table is an error"
    );

    // Garbage record batches: a per-bucket error, nothing appended.
    let cases: Vec<(&str, i32, Vec<u8>, i32)> = {
        let mut bad_crc = fresh.clone();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        let mut wrong_schema = template.clone();
        patch_header(&mut wrong_schema, Some(7), Some((-1, -1)));
        let mut garbage_arrow = fresh.clone();
        // Overwrite the Arrow message's metadata, found by its continuation marker.
        let arrow_start = garbage_arrow
            .windows(4)
            .position(|w| w == [0xff; 4])
            .expect("an arrow continuation marker");
        for byte in &mut garbage_arrow[arrow_start + 8..arrow_start + 48] {
            *byte = 0xAB;
        }
        patch_header(&mut garbage_arrow, None, None);
        let truncated = fresh[..fresh.len() / 2].to_vec();
        let mut huge_length = fresh.clone();
        huge_length[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
        vec![
            (
                "unknown bucket",
                9,
                fresh.clone(),
                code::UNKNOWN_TABLE_OR_BUCKET,
            ),
            (
                "negative bucket",
                -1,
                fresh.clone(),
                code::UNKNOWN_TABLE_OR_BUCKET,
            ),
            ("bad crc", bucket, bad_crc, code::CORRUPT_RECORD),
            (
                "wrong schema id",
                bucket,
                wrong_schema,
                code::SCHEMA_NOT_EXIST,
            ),
            (
                "garbage arrow data with a valid crc",
                bucket,
                garbage_arrow,
                code::CORRUPT_RECORD,
            ),
            ("truncated batch", bucket, truncated, code::CORRUPT_RECORD),
            (
                "batch length past the buffer",
                bucket,
                huge_length,
                code::CORRUPT_RECORD,
            ),
            ("empty records", bucket, Vec::new(), code::CORRUPT_RECORD),
            (
                "random bytes",
                bucket,
                (0..200u32).map(|i| (i * 31 % 251) as u8).collect(),
                code::CORRUPT_RECORD,
            ),
        ]
    };
    for (what, bucket_id, records, expected) in cases {
        let (error, _) = produce_outcome(
            raw.call_message(api::PRODUCE_LOG, &produce(table_id, bucket_id, records))
                .await,
        );
        assert_eq!(error, expected, "{what}");
    }
    let fetch_unknown: FetchLogResponse =
        success(raw.call_message(api::FETCH_LOG, &fetch(987_654, 0)).await);
    assert_eq!(
        fetch_unknown.tables_resp[0].buckets_resp[0].error_code,
        Some(code::UNKNOWN_TABLE_OR_BUCKET)
    );
    let fetch_bad_bucket: FetchLogResponse =
        success(raw.call_message(api::FETCH_LOG, &fetch(table_id, 77)).await);
    assert_eq!(
        fetch_bad_bucket.tables_resp[0].buckets_resp[0].error_code,
        Some(code::UNKNOWN_TABLE_OR_BUCKET)
    );
    assert_eq!(
        row_count(&client, &path, 2).await,
        3,
        "no garbage was appended"
    );

    // Garbage kv batches on a primary-key table: an error naming the cause, nothing applied.
    let pk_path = TablePath::new("fluss", "hostile_pk");
    admin
        .create_table(&pk_path, &crate::fuzz_tests::pk_descriptor(), false)
        .await
        .unwrap();
    let pk_id = admin.get_table_info(&pk_path).await.unwrap().get_table_id();
    let row = crate::fuzz_tests::encode_pk_row(1, "one");
    let kv = |schema_id: i32| {
        crate::fuzz_tests::kv_batch(schema_id, &[(vec![1, 0, 0, 0], Some(row.clone()))])
    };
    let mut kv_bad_crc = kv(1);
    let last = kv_bad_crc.len() - 1;
    kv_bad_crc[last] ^= 0x55;
    for (what, records, expected) in [
        ("kv wrong schema id", kv(7), code::SCHEMA_NOT_EXIST),
        ("kv bad crc", kv_bad_crc, code::CORRUPT_RECORD),
        ("kv truncated", kv(1)[..20].to_vec(), code::CORRUPT_RECORD),
    ] {
        let request = PutKvRequest {
            acks: -1,
            table_id: pk_id,
            timeout_ms: 10_000,
            target_columns: vec![],
            buckets_req: vec![PbWriteReqForBucket {
                bucket_id: 0,
                records: Bytes::from(records),
                ..PbWriteReqForBucket::default()
            }],
            agg_mode: None,
        };
        let (kind, body) = raw.call_message(api::PUT_KV, &request).await;
        let error = if kind == 1 {
            ErrorResponse::decode(body).unwrap().error_code
        } else {
            PutKvResponse::decode(body).unwrap().buckets_resp[0]
                .error_code
                .unwrap_or(0)
        };
        assert_eq!(error, expected, "{what}");
    }
    assert_eq!(
        row_count(&client, &pk_path, 2).await,
        0,
        "no garbage reached the changelog"
    );

    // The uncorrupted batch goes in: the cases above failed for their corruption alone.
    let (error, base_offset) = produce_outcome(
        raw.call_message(api::PRODUCE_LOG, &produce(table_id, bucket, fresh.clone()))
            .await,
    );
    assert_eq!(error, 0);
    assert!(base_offset >= 1);
    let control_rows =
        crate::codec::Batch::split(Bytes::from(fresh), false).unwrap()[0].record_count() as i64;

    // Frames that cannot be read close their own connection.
    let frames: Vec<(&str, Vec<u8>, bool)> = vec![
        ("oversized", (2i32 << 20).to_be_bytes().to_vec(), false),
        ("negative length", (-5i32).to_be_bytes().to_vec(), false),
        ("shorter than a header", vec![0, 0, 0, 3, 1, 2, 3], false),
        (
            "truncated then closed",
            [100i32.to_be_bytes().as_slice(), &[7u8; 40]].concat(),
            true,
        ),
        (
            "stalled mid-frame",
            [1000i32.to_be_bytes().as_slice(), &[7u8; 10]].concat(),
            false,
        ),
        (
            "stalled after the prefix",
            1_000_000i32.to_be_bytes().to_vec(),
            false,
        ),
    ];
    for (what, bytes, shutdown_write) in frames {
        let mut bad = Raw::open(&server).await;
        bad.stream.write_all(&bytes).await.unwrap();
        if shutdown_write {
            bad.stream.shutdown().await.unwrap();
        }
        let started = Instant::now();
        assert!(
            bad.closed().await,
            "{what}: the server closes the connection"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: closed promptly"
        );
    }

    // Everyone else was served throughout: the raw connection, the old client and a new one.
    let versions: ApiVersionsResponse = success(raw.call(api::API_VERSIONS, 0, b"").await);
    assert!(
        versions
            .api_versions
            .iter()
            .any(|v| v.api_key == i32::from(api::AUTHENTICATE))
    );
    append(&client, &path, 3..13, "row").await;
    let other = connect(&server, None).await.unwrap();
    append(&other, &path, 13..20, "row").await;
    assert_eq!(row_count(&other, &path, 2).await, 3 + control_rows + 17);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_are_refused_with_the_errors_the_client_maps() {
    let (dir, server, client) = start_connected().await;
    let admin = client.get_admin().unwrap();
    let long = "x".repeat(201);
    let bad_names = [
        "",
        ".",
        "..",
        "../etc",
        "a/b",
        "a\\b",
        "a.b",
        "__internal",
        "naïve",
        "a b",
        "a\0b",
        long.as_str(),
    ];
    for name in bad_names {
        let db = admin.create_database(name, None, false).await;
        assert_refused(db, InvalidDatabaseException, &format!("database {name:?}"));
        let path = TablePath::new("fluss", name);
        let table = admin.create_table(&path, &log_table(2), false).await;
        assert_refused(table, InvalidTableException, &format!("table {name:?}"));
    }
    let longest = "y".repeat(200);
    admin.create_database(&longest, None, false).await.unwrap();
    admin
        .create_table(
            &TablePath::new(longest.as_str(), "Ok_name-1"),
            &log_table(2),
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        admin.list_databases().await.unwrap().len(),
        2,
        "only the valid database was created"
    );
    // Nothing but table ids names a directory: the data directory holds no name at all.
    let entries: Vec<String> = walk(&dir.path().join("tables"));
    assert!(
        entries
            .iter()
            .all(|p| !p.contains("Ok_name") && !p.contains("yyy")),
        "{entries:?}"
    );
    server.shutdown().await.unwrap();
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(entry.path().to_string_lossy().to_string());
        if entry.path().is_dir() {
            out.extend(walk(&entry.path()));
        }
    }
    out
}

fn sasl_users() -> SaslConfig {
    SaslConfig {
        users: vec![
            SaslUser {
                username: "alice".into(),
                password: "wonder-land".into(),
            },
            SaslUser {
                username: "silt".into(),
                password: "internal".into(),
            },
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_rejects_wrong_and_missing_credentials_and_accepts_right_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |config| {
        config.sasl = Some(sasl_users());
        config.authentication_timeout_ms = 1_000;
    })
    .await;

    // fluss-rs without credentials, with a wrong password, as an unknown user: refused with
    // the code fluss-rs maps to AuthenticateException.
    for (what, credentials) in [
        ("no credentials", None),
        ("wrong password", Some(("alice", "wonderland"))),
        ("unknown user", Some(("mallory", "wonder-land"))),
        ("another user's password", Some(("silt", "wonder-land"))),
    ] {
        let listed = match connect(&server, credentials).await {
            Ok(connection) => connection.get_admin().unwrap().list_databases().await,
            Err(error) => Err(error),
        };
        assert_refused(listed, AuthenticateException, what);
    }

    // The right credentials: the client works as usual.
    let client = connect(&server, Some(("alice", "wonder-land")))
        .await
        .unwrap();
    let admin = client.get_admin().unwrap();
    let path = TablePath::new("fluss", "secured");
    admin
        .create_table(&path, &log_table(2), false)
        .await
        .unwrap();
    append(&client, &path, 0..25, "row").await;
    assert_eq!(row_count(&client, &path, 2).await, 25);

    // On the wire: before authenticating only ApiVersions and Authenticate are served.
    let mut raw = Raw::open(&server).await;
    let _: ApiVersionsResponse = success(raw.call(api::API_VERSIONS, 0, b"").await);
    let list = ListDatabasesRequest {
        include_summary: None,
    };
    assert_eq!(
        error_code(raw.call_message(api::LIST_DATABASES, &list).await),
        code::AUTHENTICATE_EXCEPTION
    );
    let plain = |user: &str, password: &str| AuthenticateRequest {
        protocol: "PLAIN".into(),
        token: [b"".as_slice(), user.as_bytes(), password.as_bytes()].join(&0u8),
    };
    let _: AuthenticateResponse = success(
        raw.call_message(api::AUTHENTICATE, &plain("silt", "internal"))
            .await,
    );
    let listed: ListDatabasesResponse = success(raw.call_message(api::LIST_DATABASES, &list).await);
    assert!(listed.database_name.contains(&"fluss".to_string()));

    // A failed attempt answers, then closes; a silent connection is closed at the timeout.
    let mut guesser = Raw::open(&server).await;
    assert_eq!(
        error_code(
            guesser
                .call_message(api::AUTHENTICATE, &plain("alice", "guess"))
                .await
        ),
        code::AUTHENTICATE_EXCEPTION
    );
    assert!(
        guesser.closed().await,
        "a failed authentication closes the connection"
    );
    let mut idle = Raw::open(&server).await;
    let started = Instant::now();
    assert!(
        idle.closed().await,
        "an unauthenticated connection is closed"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The authenticated raw connection outlives the timeout.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let _: ListDatabasesResponse = success(raw.call_message(api::LIST_DATABASES, &list).await);
    server.shutdown().await.unwrap();
}

/// Regression: with SASL on, a frame was read in full (up to `frame_bytes_max`) before the
/// authentication decision, so a few peers that never authenticate could hold the whole request
/// byte budget by sending most of a large frame and stalling, and authenticated produces
/// waited for `frame_read_timeout_ms`. Before authenticating, a frame is capped to what
/// ApiVersions and Authenticate need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_peers_cannot_hold_the_request_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |config| {
        config.sasl = Some(sasl_users());
        config.frame_bytes_max = 1 << 20;
        config.request_bytes_in_flight_max = 1 << 20;
        config.frame_read_timeout_ms = 60_000;
        config.authentication_timeout_ms = 60_000;
    })
    .await;
    let mut stallers = Vec::new();
    for _ in 0..3 {
        let mut raw = Raw::open(&server).await;
        let mut frame = Vec::new();
        frame.put_i32(1_000_000);
        frame.put_i16(api::LIST_DATABASES);
        frame.put_i16(0);
        frame.put_i32(1);
        frame.resize(520_000, 0);
        // The server may close the connection while this is written (that is the fix).
        let _ = raw.stream.write_all(&frame).await;
        stallers.push(raw);
    }
    let path = TablePath::new("fluss", "budget");
    let served = tokio::time::timeout(Duration::from_secs(10), async {
        let client = connect(&server, Some(("alice", "wonder-land")))
            .await
            .unwrap();
        client
            .get_admin()
            .unwrap()
            .create_table(&path, &log_table(2), false)
            .await
            .unwrap();
        append(&client, &path, 0..25, "row").await;
        row_count(&client, &path, 2).await
    })
    .await;
    assert_eq!(
        served.ok(),
        Some(25),
        "an authenticated client waited behind unauthenticated peers' partial frames"
    );
    for mut raw in stallers {
        assert!(
            raw.closed().await,
            "an oversized unauthenticated frame closes its connection"
        );
    }
    server.shutdown().await.unwrap();
}

/// Resident set size of this process (server and clients) in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Opens `count` connections at once; each negotiates versions and asks for metadata, then
/// closes. Returns how many were answered.
async fn round_of_clients(server: &ServerHandle, count: usize) -> usize {
    let addr = server.local_addr();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        tasks.spawn(async move {
            let Ok(stream) = TcpStream::connect(addr).await else {
                return false;
            };
            let mut raw = Raw { stream, next_id: 1 };
            let versions = raw.call(api::API_VERSIONS, 0, b"").await;
            let metadata = raw
                .call_message(api::METADATA, &MetadataRequest::default())
                .await;
            versions.0 == 0 && metadata.0 == 0
        });
    }
    let mut answered = 0;
    while let Some(done) = tasks.join_next().await {
        answered += usize::from(done.unwrap());
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_come_and_go_in_bounded_memory_and_extra_ones_are_refused() {
    const CLIENTS: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |config| config.connections_max = CLIENTS).await;

    // One warm-up round lets the allocator and the runtime reach their working size.
    assert_eq!(round_of_clients(&server, CLIENTS).await, CLIENTS);
    let before = rss_kib();
    for _ in 0..5 {
        assert_eq!(round_of_clients(&server, CLIENTS).await, CLIENTS);
    }
    let after = rss_kib();
    eprintln!("hostile: 5 x {CLIENTS} concurrent clients; RSS {before} KiB -> {after} KiB");
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 5000 connections"
    );

    // connections_max held open: further connections are closed on accept, unanswered.
    let mut held = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let mut raw = Raw::open(&server).await;
        let _: ApiVersionsResponse = success(raw.call(api::API_VERSIONS, 0, b"").await);
        held.push(raw);
    }
    for _ in 0..10 {
        let mut extra = Raw::open(&server).await;
        let _ = extra
            .stream
            .write_all(&[0, 0, 0, 8, 3, 232, 0, 0, 0, 0, 0, 1])
            .await;
        assert!(
            extra.closed().await,
            "a connection beyond connections_max is closed"
        );
    }
    drop(held);

    // Once they are gone the server accepts again: the official client works.
    let started = Instant::now();
    let client = loop {
        match connect(&server, None).await {
            Ok(client) => break client,
            Err(error) if started.elapsed() < TIMEOUT => {
                eprintln!("retrying after {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the server does not accept again: {error}"),
        }
    };
    let databases = client.get_admin().unwrap().list_databases().await.unwrap();
    assert!(databases.contains(&"fluss".to_string()));
    server.shutdown().await.unwrap();
}

/// Not a test: measures what checking client batches (schema id, CRC, Arrow decode) costs
/// next to the whole produce handler that includes it. Run with
/// `SILTTEST_BENCH=1 cargo test -p silt-hotstore produce_validation -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_validation_throughput() {
    if std::env::var_os("SILTTEST_BENCH").is_none() {
        std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: produce_validation_throughput is a benchmark; run it with SILTTEST_BENCH=1 and --nocapture\n",
        )
        .ok();
        return;
    }
    let (_dir, server, client) = start_connected().await;
    let admin = client.get_admin().unwrap();
    let source = TablePath::new("fluss", "bench_source");
    let sink = TablePath::new("fluss", "bench_sink");
    admin
        .create_table(&source, &log_table(2), false)
        .await
        .unwrap();
    admin
        .create_table(&sink, &log_table(2), false)
        .await
        .unwrap();
    append(&client, &source, 0..1_000_000, "row").await;
    let source_id = admin.get_table_info(&source).await.unwrap().get_table_id();
    let sink_id = admin.get_table_info(&sink).await.unwrap().get_table_id();

    // The client's batches, read back raw, writer ids cleared so each produce appends.
    let mut raw = Raw::open(&server).await;
    let mut batches = Vec::new();
    for bucket in 0..2 {
        let mut offset = 0i64;
        loop {
            let mut request = fetch(source_id, bucket);
            request.tables_req[0].buckets_req[0].fetch_offset = offset;
            let response: FetchLogResponse =
                success(raw.call_message(api::FETCH_LOG, &request).await);
            let Some(records) = response.tables_resp[0].buckets_resp[0].records.clone() else {
                break;
            };
            if records.is_empty() {
                break;
            }
            for view in crate::codec::Batch::split(records, false).unwrap() {
                offset = view.next_offset();
                let mut batch = view.data.to_vec();
                patch_header(&mut batch, None, Some((-1, -1)));
                batches.push((bucket, Bytes::from(batch)));
            }
        }
    }
    let bytes: usize = batches.iter().map(|(_, b)| b.len()).sum();
    let service = server.service().clone();
    let table = service.table_runtime(sink_id).unwrap();
    let passes = 5;
    let time_check = |decode: bool| {
        let started = Instant::now();
        for _ in 0..passes {
            for (_, batch) in &batches {
                crate::handlers::log::check_client_batches(&table, batch, decode).unwrap();
            }
        }
        started.elapsed().as_secs_f64() / f64::from(passes)
    };
    let check_s = time_check(false);
    let decode_s = time_check(true);
    let started = Instant::now();
    for (bucket, batch) in &batches {
        let body = produce(sink_id, *bucket, batch.to_vec()).encode_to_vec();
        let header = crate::protocol::RequestHeader {
            api_key: api::PRODUCE_LOG,
            api_version: 0,
            request_id: 1,
        };
        let response = crate::handlers::handle(&service, header, Bytes::from(body)).await;
        assert_eq!(response[4], 0);
    }
    let produce_s = started.elapsed().as_secs_f64();
    let mb = bytes as f64 / 1e6;
    eprintln!(
        "produce validation over {} client batches ({mb:.1} MB, ZSTD): default check (header, CRC, Arrow metadata) {:.0} MB/s = {:.1}% of the produce handler's time; \
         with produce_decode_check {:.0} MB/s = {:.1}%; produce handler (durable, default check) {:.0} MB/s",
        batches.len(),
        mb / check_s,
        100.0 * check_s / produce_s,
        mb / decode_s,
        100.0 * decode_s / produce_s,
        mb / produce_s,
    );
    server.shutdown().await.unwrap();
}

/// Version 1 of PutKv, Lookup and PrefixLookup (Fluss 0.9.1) is advertised; a new primary-key
/// table is at `table.kv.format-version` 2, and a version 0 request is refused
/// (UNSUPPORTED_VERSION) for a table whose keys that older clients would encode differently (it
/// names a lake format and its bucket key is not its primary key), answered for any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_requests_of_version_0_are_refused_where_older_clients_encode_keys_differently() {
    let (_dir, server, client) = start_connected().await;
    let admin = client.get_admin().unwrap();
    let descriptor = |lake_format: Option<&str>| {
        let schema = Schema::builder()
            .column("customer", DataTypes::string())
            .column("order_id", DataTypes::int())
            .column("amount", DataTypes::bigint())
            .primary_key(vec!["customer", "order_id"])
            .unwrap()
            .build()
            .unwrap();
        let mut builder = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(1), vec!["customer".to_string()]);
        if let Some(format) = lake_format {
            builder = builder.property("table.datalake.format", format);
        }
        builder.build().unwrap()
    };
    let lake_keyed = TablePath::new("fluss", "lake_keyed");
    let plain = TablePath::new("fluss", "plain");
    admin
        .create_table(&lake_keyed, &descriptor(Some("paimon")), false)
        .await
        .unwrap();
    admin
        .create_table(&plain, &descriptor(None), false)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for path in [&lake_keyed, &plain] {
        let info = admin.get_table_info(path).await.unwrap();
        assert_eq!(
            info.get_properties()
                .get("table.kv.format-version")
                .map(String::as_str),
            Some("2"),
            "{path}"
        );
        ids.push(info.get_table_id());
    }
    let bad_version = TableDescriptor::builder()
        .schema(descriptor(None).schema().clone())
        .distributed_by(Some(1), vec![])
        .property("table.kv.format-version", "3")
        .build()
        .unwrap();
    let refused = admin
        .create_table(&TablePath::new("fluss", "v3"), &bad_version, false)
        .await;
    assert_refused(refused, InvalidConfigException, "table.kv.format-version 3");

    let mut raw = Raw::open(&server).await;
    let versions: ApiVersionsResponse = success(raw.call(api::API_VERSIONS, 0, b"").await);
    for key in [api::PUT_KV, api::LOOKUP, api::PREFIX_LOOKUP] {
        let served = versions
            .api_versions
            .iter()
            .find(|v| v.api_key == i32::from(key))
            .unwrap();
        assert_eq!((served.min_version, served.max_version), (0, 1), "{key}");
    }
    let lookup = |table_id: i64| {
        LookupRequest {
            table_id,
            buckets_req: vec![PbLookupReqForBucket {
                partition_id: None,
                bucket_id: 0,
                keys: vec![Bytes::from_static(b"\x01a\x01\x00\x00\x00")],
            }],
        }
        .encode_to_vec()
    };
    let (lake_keyed_id, plain_id) = (ids[0], ids[1]);
    assert_eq!(
        error_code(raw.call(api::LOOKUP, 0, &lookup(lake_keyed_id)).await),
        code::UNSUPPORTED_VERSION
    );
    let _: LookupResponse = success(raw.call(api::LOOKUP, 1, &lookup(lake_keyed_id)).await);
    let _: LookupResponse = success(raw.call(api::LOOKUP, 0, &lookup(plain_id)).await);
    let _: LookupResponse = success(raw.call(api::LOOKUP, 1, &lookup(plain_id)).await);
    server.shutdown().await.unwrap();
}

/// The resident set of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// Regression (issue 33, item 6): every bucket a FetchLog listed got at least one whole batch,
/// whatever the answer already held, and a request may list one bucket any number of times: a
/// ~1.3 MB request naming one 4 MiB batch 130,000 times asked for ~520 GB. Now only an answer
/// that holds nothing yet may take a batch larger than the budget (Fluss's and Kafka's rule):
/// the answer holds at most `fetch_response_bytes_max` plus one batch, and the server's memory
/// stays where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_listing_one_large_batch_many_times_is_bounded_by_the_response_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {}).await;
    let response_bytes_max = crate::ServerConfig::default().fetch_response_bytes_max;
    let connection = connect(&server, None).await.unwrap();
    let (path, table_id) =
        crate::test_server::create_table(&connection, "big_batch", &log_table(1)).await;
    // Letters that do not compress: the stored batch is as large as the row.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let large: String = (0..4 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from(b'!' + (seed % 90) as u8)
        })
        .collect();
    append(&connection, &path, 0..1, &large).await;
    let fetch = {
        let mut request = FetchLogRequest::of_buckets(table_id, &vec![(0, 0); 130_000]);
        request.max_bytes = i32::MAX;
        for bucket in &mut request.tables_req[0].buckets_req {
            bucket.max_fetch_bytes = i32::MAX;
        }
        request.encode_to_vec()
    };
    let rss_before = rss_bytes();
    let mut raw = Raw::open(&server).await;
    let answer: FetchLogResponse = success(raw.call(api::FETCH_LOG, 0, &fetch).await);
    let rss_after = rss_bytes();
    let buckets = &answer.tables_resp[0].buckets_resp;
    assert_eq!(buckets.len(), 130_000, "every listed bucket is answered");
    let record_bytes: usize = buckets
        .iter()
        .map(|b| b.records.as_ref().map_or(0, Bytes::len))
        .sum();
    let batch_bytes = buckets[0].records.as_ref().unwrap().len();
    // ZSTD takes the 4 MiB row to about 3.3 MiB.
    assert!(
        batch_bytes > 3 << 20,
        "the first bucket gets its whole batch: {batch_bytes} bytes"
    );
    assert!(
        record_bytes <= response_bytes_max + batch_bytes,
        "{record_bytes} record bytes, more than the budget {response_bytes_max} plus one batch"
    );
    assert!(
        rss_after < rss_before + (256 << 20),
        "the server's RSS grew from {rss_before} to {rss_after} bytes"
    );
    server.shutdown().await.unwrap();
}

/// Regression (issue 33, item 7): nothing bounded the buckets a server holds, so one CreateTable
/// of a 1024-bucket table that pre-creates its auto-partitions opened a log tablet per bucket
/// of each (about a million at Fluss's limits) until file descriptors ran out. Tables and
/// partitions past `buckets_max` are refused with BUCKET_MAX_NUM, naming the bound, and what
/// was refused opened nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buckets_a_server_holds_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |config| config.buckets_max = 2_100).await;
    let connection = connect(&server, None).await.unwrap();
    let admin = connection.get_admin().unwrap();
    let schema = || {
        Schema::builder()
            .column("dt", DataTypes::string())
            .column("id", DataTypes::int())
            .build()
            .unwrap()
    };
    let plain = |buckets: i32| {
        TableDescriptor::builder()
            .schema(schema())
            .distributed_by(Some(buckets), vec![])
            .build()
            .unwrap()
    };
    for name in ["a", "b"] {
        let path = TablePath::new("fluss", name);
        admin
            .create_table(&path, &plain(1024), false)
            .await
            .unwrap();
    }
    let refused = admin
        .create_table(&TablePath::new("fluss", "c"), &plain(100), false)
        .await
        .unwrap_err();
    assert_eq!(
        refused.api_error(),
        Some(FlussError::BucketMaxNumException),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("hotstore.buckets_max 2100"),
        "{refused}"
    );
    // Auto-partitioning that would pre-create past the bound creates what fits, and no more.
    let yearly = TableDescriptor::builder()
        .schema(schema())
        .partitioned_by(vec!["dt"])
        .distributed_by(Some(20), vec![])
        .property("table.auto-partition.enabled", "true")
        .property("table.auto-partition.time-unit", "YEAR")
        .property("table.auto-partition.num-precreate", "10")
        .build()
        .unwrap();
    let path = TablePath::new("fluss", "yearly");
    let _ = admin.create_table(&path, &yearly, false).await;
    let partitions = admin.list_partition_infos(&path).await.unwrap_or_default();
    assert!(
        2 * 1024 + 20 * partitions.len() as i64 <= 2_100,
        "{} partitions of 20 buckets beside 2048 buckets",
        partitions.len()
    );
    let tablets = walkdir::WalkDir::new(dir.path())
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("bucket-"))
        .count() as i64;
    assert!(tablets <= 2_100, "{tablets} bucket directories on disk");
    // Dropping a table makes room again.
    admin
        .drop_table(&TablePath::new("fluss", "a"), false)
        .await
        .unwrap();
    admin
        .create_table(&TablePath::new("fluss", "c"), &plain(100), false)
        .await
        .unwrap();
    server.shutdown().await.unwrap();
}

/// `fluss.<name>`: `id INT PRIMARY KEY, v STRING` in one bucket, with `rows` keys upserted
/// (values of about 100 bytes); answers the table id.
async fn keyed_table(connection: &FlussConnection, name: &str, rows: i32) -> i64 {
    let schema = Schema::builder()
        .column("id", DataTypes::int())
        .column("v", DataTypes::string())
        .primary_key(vec!["id"])
        .unwrap()
        .build()
        .unwrap();
    let descriptor = TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(1), vec![])
        .build()
        .unwrap();
    let (path, table_id) = crate::test_server::create_table(connection, name, &descriptor).await;
    let table = connection.get_table(&path).await.unwrap();
    let writer = table.new_upsert().unwrap().create_writer().unwrap();
    for id in 0..rows {
        let mut row = fluss::row::GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, format!("value {id} {}", "x".repeat(90)));
        writer.upsert(&row).unwrap();
    }
    writer.flush().await.unwrap();
    table_id
}

/// Records in a value record batch.
fn value_records(records: &Option<Bytes>) -> i32 {
    let records = records.as_ref().expect("records");
    i32::from_le_bytes(records[5..9].try_into().unwrap())
}

/// ScanKv (Fluss 1.0) answers a primary-key bucket's current values in batches of the asked
/// size from one point in time (a write after the first batch is not seen), follows Fluss's
/// rules for its requests (sequence ids, one scanner per continuation, close, unknown ids,
/// limits) and puts its errors in the response body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_kv_reads_one_point_in_time_in_batches() {
    let (_dir, server, connection) = start_connected().await;
    let table_id = keyed_table(&connection, "scanned", 1_000).await;
    let mut raw = Raw::open(&server).await;
    let scan = |request: ScanKvRequest| request.encode_to_vec();
    let open = |seq: i32, limit: Option<i64>| ScanKvRequest {
        scanner_id: None,
        bucket_scan_req: Some(PbScanReqForBucket {
            table_id,
            partition_id: None,
            bucket_id: 0,
            limit,
        }),
        call_seq_id: Some(seq),
        batch_size_bytes: Some(8 << 10),
        close_scanner: None,
    };
    let next = |id: &Bytes, seq: i32| ScanKvRequest {
        scanner_id: Some(id.clone()),
        bucket_scan_req: None,
        call_seq_id: Some(seq),
        batch_size_bytes: Some(8 << 10),
        close_scanner: None,
    };
    let first: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(open(0, None))).await);
    assert_eq!(first.error_code, None, "{:?}", first.error_message);
    assert_eq!(
        first.log_offset,
        Some(1_000),
        "the changelog offset the view reflects"
    );
    let id = first
        .scanner_id
        .clone()
        .expect("more than one batch: a scanner");
    let mut rows = value_records(&first.records);
    assert!(rows > 10 && rows < 1_000, "about 8 KiB of rows: {rows}");
    // A write after the first batch: the scan keeps its point in time.
    let table = connection
        .get_table(&TablePath::new("fluss", "scanned"))
        .await
        .unwrap();
    let writer = table.new_upsert().unwrap().create_writer().unwrap();
    for id in 1_000..1_100 {
        let mut row = fluss::row::GenericRow::new(2);
        row.set_field(0, id);
        row.set_field(1, "later");
        writer.upsert(&row).unwrap();
    }
    writer.flush().await.unwrap();
    let out_of_order: ScanKvResponse =
        success(raw.call(api::SCAN_KV, 0, &scan(next(&id, 5))).await);
    assert_eq!(out_of_order.error_code, Some(code::INVALID_SCAN_REQUEST));
    let mut seq = 1;
    loop {
        let batch: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(next(&id, seq))).await);
        assert_eq!(batch.error_code, None, "{:?}", batch.error_message);
        assert_eq!(
            batch.log_offset, None,
            "the offset comes with the first answer only"
        );
        rows += value_records(&batch.records);
        seq += 1;
        if batch.has_more_results != Some(true) {
            break;
        }
    }
    assert_eq!(
        rows, 1_000,
        "every key of the point in time once, none written after"
    );
    let gone: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(next(&id, seq))).await);
    assert_eq!(
        gone.error_code,
        Some(code::UNKNOWN_SCANNER_ID),
        "an ended scanner is gone"
    );

    // A limit, a close, and the malformed requests Fluss refuses.
    let limited: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(open(0, Some(7)))).await);
    assert_eq!(
        (value_records(&limited.records), limited.has_more_results),
        (7, Some(false))
    );
    let opened: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(open(0, None))).await);
    let id = opened.scanner_id.unwrap();
    let close = ScanKvRequest {
        close_scanner: Some(true),
        batch_size_bytes: None,
        call_seq_id: None,
        ..next(&id, 0)
    };
    let closed: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(close)).await);
    assert_eq!(
        (closed.error_code, closed.has_more_results),
        (None, Some(false))
    );
    for (what, request, expected) in [
        (
            "seq of an opening request",
            open(3, None),
            code::INVALID_SCAN_REQUEST,
        ),
        (
            "both ids",
            ScanKvRequest {
                scanner_id: Some(id.clone()),
                ..open(0, None)
            },
            code::INVALID_SCAN_REQUEST,
        ),
        (
            "no batch size",
            ScanKvRequest {
                batch_size_bytes: None,
                ..open(0, None)
            },
            code::INVALID_SCAN_REQUEST,
        ),
        ("a closed scanner", next(&id, 1), code::UNKNOWN_SCANNER_ID),
    ] {
        let answer: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(request)).await);
        assert_eq!(
            answer.error_code,
            Some(expected),
            "{what}: {:?}",
            answer.error_message
        );
    }
    // More than eight scanners on one bucket: the ninth is refused.
    for _ in 0..crate::kv_scanners::PER_BUCKET_MAX {
        let ok: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(open(0, None))).await);
        assert!(ok.scanner_id.is_some());
    }
    let refused: ScanKvResponse = success(raw.call(api::SCAN_KV, 0, &scan(open(0, None))).await);
    assert_eq!(refused.error_code, Some(code::TOO_MANY_SCANNERS));
    server.shutdown().await.unwrap();
}
