//! The merge engines of primary-key tables through the request handlers: Fluss's
//! `table.merge-engine` (`first_row`, `versioned`), `table.delete.behavior` and the PutKv
//! `agg_mode`. Each case is a table's properties, a sequence of PutKv requests (one write each)
//! and the transcript they must leave: refused writes, the changelog, the final rows.

use crate::config::ServerConfig;
use crate::handlers::{ddl, kv};
use crate::protocol::messages::*;
use crate::service::Service;
use crate::tablets::TableRuntime;
use crate::tablets::rows::{RowCodec, SCHEMA_ID_BYTES};
use bytes::Bytes;
use fluss::metadata::{DataType, DataTypes, JsonSerde, KvFormat, Schema, TableDescriptor};
use fluss::record::kv::KvRecordBatchBuilder;
use fluss::row::encode::{RowEncoder, RowEncoderFactory};
use fluss::row::{Datum, TimestampLtz, TimestampNtz};
use prost::Message;
use std::sync::Arc;

const ENGINE: &str = "table.merge-engine";
const VER: &str = "table.merge-engine.versioned.ver-column";
const DELETES: &str = "table.delete.behavior";
const FIRST_ROW: (&str, &str) = (ENGINE, "first_row");
const VERSIONED: (&str, &str) = (ENGINE, "versioned");
const VER_COLUMN: (&str, &str) = (VER, "ver");
const WRITER_ID: i64 = 7;

/// The type of the `ver` column of a case's table `(id INT PRIMARY KEY, name STRING, ver)`.
#[derive(Clone, Copy)]
enum Ver {
    Int,
    BigInt,
    Timestamp,
    TimestampLtz,
}

impl Ver {
    fn data_type(self) -> DataType {
        match self {
            Ver::Int => DataTypes::int(),
            Ver::BigInt => DataTypes::bigint(),
            Ver::Timestamp => DataTypes::timestamp(),
            Ver::TimestampLtz => DataTypes::timestamp_ltz(),
        }
    }

    /// `version` in the column's type; timestamps take it as microseconds, so that rows
    /// differing below the millisecond compare as Fluss compares them.
    fn datum(self, version: i64) -> Datum<'static> {
        let (millis, nanos) = (
            version.div_euclid(1000),
            version.rem_euclid(1000) as i32 * 1000,
        );
        match self {
            Ver::Int => Datum::Int32(i32::try_from(version).expect("an INT version")),
            Ver::BigInt => Datum::Int64(version),
            Ver::Timestamp => {
                Datum::TimestampNtz(TimestampNtz::from_millis_nanos(millis, nanos).unwrap())
            }
            Ver::TimestampLtz => {
                Datum::TimestampLtz(TimestampLtz::from_millis_nanos(millis, nanos).unwrap())
            }
        }
    }
}

/// One PutKv of one record.
#[derive(Clone)]
struct Write {
    id: i32,
    /// `None`: a delete.
    row: Option<(Option<&'static str>, Option<i64>)>,
    target_columns: Vec<i32>,
    agg_mode: Option<i32>,
}

fn up(id: i32, name: &'static str, ver: Option<i64>) -> Write {
    Write {
        id,
        row: Some((Some(name), ver)),
        target_columns: Vec::new(),
        agg_mode: None,
    }
}

fn del(id: i32) -> Write {
    Write {
        id,
        row: None,
        target_columns: Vec::new(),
        agg_mode: None,
    }
}

/// A partial update of `(id, name)`.
fn partial(id: i32, name: &'static str) -> Write {
    Write {
        target_columns: vec![0, 1],
        ..up(id, name, None)
    }
}

impl Write {
    fn agg_mode(self, agg_mode: i32) -> Write {
        Write {
            agg_mode: Some(agg_mode),
            ..self
        }
    }
}

/// The server's state over a scratch directory (no listener and no background task: the
/// cases call the handlers); every case gets a table of its own.
struct Harness {
    _dir: tempfile::TempDir,
    service: Service,
    tables: usize,
}

/// One case's table and its writer's next sequence.
struct Case {
    runtime: Arc<TableRuntime>,
    ver: Ver,
    sequence: i32,
}

impl Harness {
    async fn start() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            data_dir: dir.path().to_path_buf(),
            ..ServerConfig::default()
        };
        let service = Service::open(config, "127.0.0.1".into(), 9123)
            .await
            .unwrap();
        Harness {
            _dir: dir,
            service,
            tables: 0,
        }
    }

    /// Creates a case's table; a refusal is answered as `code: message`.
    async fn create(&mut self, properties: &[(&str, &str)], ver: Ver) -> Result<Case, String> {
        self.tables += 1;
        let name = format!("t{}", self.tables);
        let schema = Schema::builder()
            .column("id", DataTypes::int())
            .column("name", DataTypes::string())
            .column("ver", ver.data_type())
            .primary_key(vec!["id"])
            .unwrap()
            .build()
            .unwrap();
        let mut descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(1), vec![]);
        for (key, value) in properties {
            descriptor = descriptor.property(*key, *value);
        }
        let request = CreateTableRequest {
            table_path: PbTablePath {
                database_name: "fluss".into(),
                table_name: name.clone(),
            },
            table_json: serde_json::to_vec(&descriptor.build().unwrap().serialize_json().unwrap())
                .unwrap(),
            ignore_if_exists: false,
        };
        let service = &self.service;
        ddl::create_table(service, Bytes::from(request.encode_to_vec()))
            .await
            .map_err(|error| format!("{}: {}", error.code, error.message))?;
        let entry = service.catalog.table("fluss", &name).unwrap();
        Ok(Case {
            runtime: service.tablets.get(entry.id).unwrap(),
            ver,
            sequence: 0,
        })
    }

    /// Sends one write; answers the log end offset or `code: message`. A refused write leaves
    /// the writer's sequence where it was, as the client does.
    async fn put(&self, case: &mut Case, write: &Write) -> Result<i64, String> {
        let result = self.put_at(case, write, case.sequence).await;
        if result.is_ok() {
            case.sequence += 1;
        }
        result
    }

    async fn put_at(&self, case: &Case, write: &Write, sequence: i32) -> Result<i64, String> {
        let mut builder = KvRecordBatchBuilder::new(1, 1 << 20, KvFormat::COMPACTED);
        let row = write
            .row
            .map(|(name, ver)| encode_row(case, write.id, name, ver));
        builder.append_row(&key(write.id), row.as_deref()).unwrap();
        builder.set_writer_state(WRITER_ID, sequence);
        let request = PutKvRequest {
            acks: -1,
            table_id: case.runtime.entry.id,
            timeout_ms: 30_000,
            target_columns: write.target_columns.clone(),
            buckets_req: vec![PbWriteReqForBucket {
                partition_id: None,
                bucket_id: 0,
                records: builder.build().unwrap(),
                original_partition_name: None,
                routing_bucket_count: None,
            }],
            agg_mode: write.agg_mode,
        };
        let response = kv::put(&self.service, Bytes::from(request.encode_to_vec()), 1)
            .await
            .map_err(|error| format!("{}: {}", error.code, error.message))?;
        let bucket = &response.buckets_resp[0];
        match bucket.error_code {
            None | Some(0) => Ok(bucket.log_end_offset.unwrap()),
            Some(code) => Err(format!(
                "{code}: {}",
                bucket.error_message.clone().unwrap_or_default()
            )),
        }
    }
}

fn key(id: i32) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

fn encode_row(case: &Case, id: i32, name: Option<&str>, ver: Option<i64>) -> Vec<u8> {
    let row_type = case.runtime.entry.descriptor.schema().row_type().clone();
    let mut encoder = RowEncoderFactory::create(KvFormat::COMPACTED, row_type).unwrap();
    encoder.start_new_row().unwrap();
    encoder.encode_field(0, Datum::Int32(id)).unwrap();
    encoder
        .encode_field(1, name.map_or(Datum::Null, Datum::from))
        .unwrap();
    encoder
        .encode_field(2, ver.map_or(Datum::Null, |v| case.ver.datum(v)))
        .unwrap();
    encoder.finish_row().unwrap().to_vec()
}

fn show_row(codec: &RowCodec, row: &dyn fluss::row::InternalRow) -> String {
    codec
        .getters
        .iter()
        .map(|getter| getter.get_field(row).unwrap().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The bucket's changelog, a line per record: `+I 1 'a' 5`.
fn changelog(case: &Case) -> Vec<String> {
    let table = &case.runtime;
    let bucket = &table.buckets[0];
    let codec = RowCodec::new(table).unwrap();
    let row_type = Arc::new(codec.row_type.clone());
    let mut lines = Vec::new();
    let data = bucket.log.read(0, 1 << 24).unwrap();
    for batch in crate::codec::Batch::split(data, true).unwrap() {
        let (change_types, message) = batch.records().unwrap();
        let records = Arc::new(
            crate::codec::arrow::decode_arrow_message(&message, &table.arrow_schema, None).unwrap(),
        );
        let mut row =
            fluss::row::ColumnarRow::new(records.clone(), row_type.clone(), 0, None).unwrap();
        for i in 0..records.num_rows() {
            row.set_row_id(i);
            let change = match change_types[i] {
                1 => "+I",
                2 => "-U",
                3 => "+U",
                4 => "-D",
                other => panic!("change type {other} in a primary-key changelog"),
            };
            lines.push(format!("{change} {}", show_row(&codec, &row)));
        }
    }
    lines
}

/// The row the kv tablet holds for `id`, as a lookup returns it: `= 1 'a' 5`.
fn state(case: &Case, id: i32) -> Option<String> {
    let table = &case.runtime;
    let codec = RowCodec::new(table).unwrap();
    let stored = table.buckets[0]
        .kv
        .as_ref()
        .unwrap()
        .get(&key(id))
        .unwrap()?;
    let row = codec.decoder.decode(&stored[SCHEMA_ID_BYTES..]);
    Some(format!("= {}", show_row(&codec, &row)))
}

/// Runs `writes` against a new table with `properties` and compares the transcript with
/// `expected`: a line `write N: <code>` per refused write (N from 1), then the changelog, then
/// the final row of every key written (`= ...`; keys without a row are left out).
async fn check(
    harness: &mut Harness,
    properties: &[(&str, &str)],
    ver: Ver,
    writes: &[Write],
    expected: &str,
) {
    let mut case = harness.create(properties, ver).await.unwrap();
    let mut transcript = Vec::new();
    for (n, write) in writes.iter().enumerate() {
        if let Err(error) = harness.put(&mut case, write).await {
            let code = error.split(':').next().unwrap_or_default().to_string();
            transcript.push(format!("write {}: {code}", n + 1));
        }
    }
    transcript.extend(changelog(&case));
    let mut ids: Vec<i32> = writes.iter().map(|w| w.id).collect();
    ids.sort();
    ids.dedup();
    transcript.extend(ids.into_iter().filter_map(|id| state(&case, id)));
    let expected: Vec<&str> = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        transcript,
        expected,
        "properties {properties:?}, {} writes",
        writes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_row_keeps_the_first_row_of_each_key() {
    let mut h = Harness::start().await;
    let t = Ver::BigInt;
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[up(1, "a", Some(1))],
        "+I 1 'a' 1\n= 1 'a' 1",
    )
    .await;
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[
            up(1, "a", Some(1)),
            up(1, "b", Some(2)),
            up(1, "a", Some(1)),
            up(2, "c", None),
        ],
        "+I 1 'a' 1
         +I 2 'c' null
         = 1 'a' 1
         = 2 'c' null",
    )
    .await;
    // Deletes are ignored by default (table.delete.behavior = ignore), absent keys too.
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[up(1, "a", Some(1)), del(1), del(2), up(1, "b", Some(2))],
        "+I 1 'a' 1\n= 1 'a' 1",
    )
    .await;
    check(
        &mut h,
        &[FIRST_ROW, (DELETES, "IGNORE")],
        t,
        &[up(1, "a", Some(1)), del(1)],
        "+I 1 'a' 1\n= 1 'a' 1",
    )
    .await;
    // DeletionDisabledException (57).
    check(
        &mut h,
        &[FIRST_ROW, (DELETES, "disable")],
        t,
        &[up(1, "a", Some(1)), del(1), up(2, "b", None)],
        "write 2: 57
         +I 1 'a' 1
         +I 2 'b' null
         = 1 'a' 1
         = 2 'b' null",
    )
    .await;
    // A partial update is refused, also of a key that has no row yet.
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[up(1, "a", Some(1)), partial(1, "b"), partial(2, "c")],
        "write 2: 35\nwrite 3: 35\n+I 1 'a' 1\n= 1 'a' 1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_keeps_the_row_of_the_highest_version() {
    let mut h = Harness::start().await;
    let versioned = [VERSIONED, VER_COLUMN];
    let t = Ver::BigInt;
    check(
        &mut h,
        &versioned,
        t,
        &[
            up(1, "a", Some(5)),
            up(1, "lower", Some(4)),
            up(1, "equal", Some(5)),
            up(1, "higher", Some(9)),
            up(1, "null", None),
        ],
        "+I 1 'a' 5
         -U 1 'a' 5
         +U 1 'equal' 5
         -U 1 'equal' 5
         +U 1 'higher' 9
         = 1 'higher' 9",
    )
    .await;
    // A null version is the smallest: it replaces only another null.
    check(
        &mut h,
        &versioned,
        t,
        &[
            up(1, "a", None),
            up(1, "b", None),
            up(1, "c", Some(i64::MIN)),
            up(1, "d", None),
        ],
        "+I 1 'a' null
         -U 1 'a' null
         +U 1 'b' null
         -U 1 'b' null
         +U 1 'c' -9223372036854775808
         -U 1 'c' -9223372036854775808
         +U 1 'd' null
         = 1 'd' null",
    )
    .await;
    // An equal version with an equal row changes nothing (silt appends nothing for that).
    check(
        &mut h,
        &versioned,
        t,
        &[up(1, "a", Some(5)), up(1, "a", Some(5))],
        "+I 1 'a' 5\n= 1 'a' 5",
    )
    .await;
    check(
        &mut h,
        &versioned,
        t,
        &[up(1, "a", Some(5)), del(1), up(1, "b", Some(3))],
        "+I 1 'a' 5\n= 1 'a' 5",
    )
    .await;
    check(
        &mut h,
        &[VERSIONED, VER_COLUMN, (DELETES, "disable")],
        t,
        &[up(1, "a", Some(5)), del(1)],
        "write 2: 57\n+I 1 'a' 5\n= 1 'a' 5",
    )
    .await;
    check(
        &mut h,
        &versioned,
        t,
        &[up(1, "a", Some(5)), partial(1, "b")],
        "write 2: 35\n+I 1 'a' 5\n= 1 'a' 5",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_compares_every_version_type_fluss_allows() {
    let mut h = Harness::start().await;
    let versioned = [VERSIONED, VER_COLUMN];
    // An INT null ties with INT's smallest value, as in Fluss.
    check(
        &mut h,
        &versioned,
        Ver::Int,
        &[
            up(1, "a", Some(i64::from(i32::MIN))),
            up(1, "b", None),
            up(1, "c", Some(-1)),
            up(1, "d", Some(-2)),
        ],
        "+I 1 'a' -2147483648
         -U 1 'a' -2147483648
         +U 1 'b' null
         -U 1 'b' null
         +U 1 'c' -1
         = 1 'c' -1",
    )
    .await;
    // Timestamps compare below the millisecond (versions in microseconds; shown in ms).
    for ver in [Ver::Timestamp, Ver::TimestampLtz] {
        check(
            &mut h,
            &versioned,
            ver,
            &[
                up(1, "a", Some(5_001)),
                up(1, "b", Some(5_000)),
                up(1, "c", Some(5_002)),
                up(1, "d", None),
            ],
            "+I 1 'a' 5
             -U 1 'a' 5
             +U 1 'c' 5
             = 1 'c' 5",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_behavior_applies_to_every_primary_key_table() {
    let mut h = Harness::start().await;
    let t = Ver::BigInt;
    let writes = [up(1, "a", Some(1)), del(1), del(2)];
    for (properties, expected) in [
        (&[][..], "+I 1 'a' 1\n-D 1 'a' 1"),
        (&[(DELETES, "allow")], "+I 1 'a' 1\n-D 1 'a' 1"),
        (&[(DELETES, "ignore")], "+I 1 'a' 1\n= 1 'a' 1"),
        (
            &[(DELETES, "disable")],
            "write 2: 57\nwrite 3: 57\n+I 1 'a' 1\n= 1 'a' 1",
        ),
    ] {
        check(&mut h, properties, t, &writes, expected).await;
    }
    // Without a merge engine a partial update still merges its columns.
    check(
        &mut h,
        &[(DELETES, "ignore")],
        t,
        &[up(1, "a", Some(1)), partial(1, "b")],
        "+I 1 'a' 1\n-U 1 'a' 1\n+U 1 'b' 1\n= 1 'b' 1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agg_mode_overwrite_bypasses_the_merge_engine() {
    let mut h = Harness::start().await;
    let t = Ver::BigInt;
    // AGG_MODE_OVERWRITE (1) replaces rows and deletes them whatever the engine (Fluss's undo
    // path); 0 (and the reserved 2, client-side aggregation) merge through the engine.
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[
            up(1, "a", Some(1)),
            up(1, "b", Some(2)).agg_mode(0),
            up(1, "c", Some(3)).agg_mode(2),
            up(1, "d", Some(4)).agg_mode(1),
            del(1).agg_mode(1),
        ],
        "+I 1 'a' 1
         -U 1 'a' 1
         +U 1 'd' 4
         -D 1 'd' 4",
    )
    .await;
    check(
        &mut h,
        &[VERSIONED, VER_COLUMN],
        t,
        &[up(1, "a", Some(5)), up(1, "b", Some(1)).agg_mode(1)],
        "+I 1 'a' 5\n-U 1 'a' 5\n+U 1 'b' 1\n= 1 'b' 1",
    )
    .await;
    // An agg_mode silt does not know is refused rather than guessed at.
    check(
        &mut h,
        &[FIRST_ROW],
        t,
        &[up(1, "a", Some(1)).agg_mode(7)],
        "write 1: 39",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_property_and_the_way_out() {
    let mut h = Harness::start().await;
    let t = Ver::BigInt;
    let mut case = h
        .create(&[FIRST_ROW, (DELETES, "disable")], t)
        .await
        .unwrap();
    let refused = h.put(&mut case, &del(1)).await.unwrap_err();
    assert!(
        refused.starts_with("57: ") && refused.contains(DELETES) && refused.contains("disable"),
        "{refused}"
    );
    let refused = h.put(&mut case, &partial(1, "b")).await.unwrap_err();
    assert!(
        refused.starts_with("35: ") && refused.contains("first_row") && refused.contains("partial"),
        "{refused}"
    );
    let refused = h
        .put(&mut case, &up(1, "a", None).agg_mode(7))
        .await
        .unwrap_err();
    assert!(
        refused.starts_with("39: ") && refused.contains("agg_mode 7"),
        "{refused}"
    );
    let refused = h.create(&[(ENGINE, "aggregation")], t).await.err().unwrap();
    assert!(
        refused.starts_with("39: ")
            && refused.contains(ENGINE)
            && refused.contains("silt implements first_row and versioned"),
        "{refused}"
    );
}

/// Regression (issue 16): an upsert that a merge engine ignores appends nothing, but its
/// sequence still counts durably, so a retry is acknowledged with the same log end and the
/// writer carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_upsert_is_acknowledged_idempotently() {
    let mut h = Harness::start().await;
    let mut case = h.create(&[FIRST_ROW], Ver::BigInt).await.unwrap();
    assert_eq!(h.put(&mut case, &up(1, "a", Some(1))).await, Ok(1));
    let ignored = up(1, "b", Some(2));
    assert_eq!(h.put(&mut case, &ignored).await, Ok(1), "ignored");
    assert_eq!(
        h.put_at(&case, &ignored, 1).await,
        Ok(1),
        "a retry is a duplicate"
    );
    assert_eq!(h.put(&mut case, &up(2, "c", Some(3))).await, Ok(2));
    assert_eq!(changelog(&case), ["+I 1 'a' 1", "+I 2 'c' 3"]);
    assert_eq!(state(&case, 1).as_deref(), Some("= 1 'a' 1"));
}
