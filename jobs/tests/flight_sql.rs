//! The Arrow Flight SQL endpoint of `silt up`, through arrow-flight's standard client: rows of
//! a statement query and of a prepared statement, GetSqlInfo, errors with their gRPC codes
//! (bad SQL, unknown table, writes, deadline, unserved commands, a redeemed ticket), and the
//! bearer token when `rest.token` is set.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetTables, CommandStatementQuery, ProstMessageExt, SqlInfo};
use arrow_flight::{FlightDescriptor, FlightInfo};
use futures::TryStreamExt as _;
use prost::Message as _;
use tonic::transport::Channel;

use silt_testkit::process::SiltProcess;
use silt_testkit::{silt_bin, tables};

const ROWS: i64 = 1000;

/// `f.events`: a log table of `ROWS` rows, `id` 0.. and `v` = `v<id>`.
async fn create_and_fill(bootstrap: &str) -> Result<()> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let events = tables::events("f").buckets(2);
    events.create(&connection).await?;
    tables::append_events(&connection, &events.path, 0..ROWS, |id| format!("v{id}")).await
}

async fn channel(flight: &str) -> Result<Channel> {
    let uri = flight.replacen("grpc://", "http://", 1);
    Ok(tonic::transport::Endpoint::from_shared(uri)?
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await?)
}

/// Every batch of every endpoint of `info`.
async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    info: FlightInfo,
) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.context("an endpoint without a ticket")?;
        let stream = client.do_get(ticket).await?;
        batches.extend(stream.try_collect::<Vec<_>>().await?);
    }
    Ok(batches)
}

/// `column` of every batch, cast to `data_type`.
fn column_as(batches: &[RecordBatch], column: &str, data_type: &DataType) -> Vec<ArrayRef> {
    batches
        .iter()
        .map(|batch| {
            let array = batch
                .column_by_name(column)
                .unwrap_or_else(|| panic!("no column {column} in {:?}", batch.schema()));
            arrow::compute::cast(array, data_type).unwrap()
        })
        .collect()
}

fn i64s(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    column_as(batches, column, &DataType::Int64)
        .iter()
        .flat_map(|array| array.as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn strings(batches: &[RecordBatch], column: &str) -> Vec<String> {
    column_as(batches, column, &DataType::Utf8)
        .iter()
        .flat_map(|array| {
            let array = array.as_string::<i32>();
            (0..array.len())
                .map(|i| array.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// GetFlightInfo for `sql` on the raw Flight client, so the gRPC status is visible.
async fn flight_info(
    raw: &mut FlightServiceClient<Channel>,
    sql: &str,
    headers: &[(&'static str, &str)],
) -> Result<FlightInfo, tonic::Status> {
    let command = CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: None,
    };
    let mut request =
        tonic::Request::new(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()));
    for (k, v) in headers {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    raw.get_flight_info(request).await.map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_serves_queries_and_maps_errors() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let flight = silt.flight_endpoint()?;
    create_and_fill(&silt.bootstrap).await?;
    let mut client = FlightSqlServiceClient::new(channel(flight).await?);

    // A statement query: GetFlightInfo -> ticket -> DoGet.
    let info = client
        .execute(
            "SELECT count(*) AS n, sum(id) AS s FROM f.events".into(),
            None,
        )
        .await?;
    assert_eq!(info.total_records, 1);
    let batches = fetch(&mut client, info).await?;
    assert_eq!(i64s(&batches, "n"), vec![ROWS]);
    assert_eq!(i64s(&batches, "s"), vec![ROWS * (ROWS - 1) / 2]);

    // A prepared statement (what ADBC does for every query).
    let sql = "SELECT id, v FROM f.events WHERE id % 100 = 7 ORDER BY id";
    let mut prepared = client.prepare(sql.into(), None).await?;
    let info = prepared.execute().await?;
    let batches = fetch(&mut client, info).await?;
    let ids: Vec<i64> = (0..ROWS).filter(|i| i % 100 == 7).collect();
    assert_eq!(i64s(&batches, "id"), ids);
    assert_eq!(
        strings(&batches, "v"),
        ids.iter().map(|i| format!("v{i}")).collect::<Vec<_>>()
    );
    prepared.close().await?;

    // GetSqlInfo names the server.
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerReadOnly,
        ])
        .await?;
    let batches = fetch(&mut client, info).await?;
    let text = arrow::util::pretty::pretty_format_batches(&batches)?.to_string();
    assert_eq!(
        batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
        2,
        "{text}"
    );
    assert!(text.contains("silt"), "{text}");

    // Errors, with their codes and messages.
    let mut raw = FlightServiceClient::new(channel(flight).await?);
    let e = flight_info(&mut raw, "SELEC id FROM f.events", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = flight_info(&mut raw, "SELECT * FROM f.nope", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("f.nope") && e.message().contains("f.events"),
        "{e:?}"
    );
    let e = flight_info(&mut raw, "INSERT INTO f.events VALUES (1, 'x')", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("read-only"), "{e:?}");
    let e = client
        .execute_update("DELETE FROM f.events".into(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");

    // A 1 ms deadline (x-silt-deadline-ms) on a three-way join: DeadlineExceeded with progress.
    let heavy =
        "SELECT count(*) FROM f.events a, f.events b, f.events c WHERE a.id + b.id = c.id + 1";
    let e = flight_info(&mut raw, heavy, &[("x-silt-deadline-ms", "1")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("deadline of 1ms passed"), "{e:?}");
    let e = flight_info(&mut raw, "SELECT 1", &[("x-silt-deadline-ms", "soon")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // Metadata listings are not served; a ticket is redeemed once.
    let e = client
        .get_tables(CommandGetTables::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("GetTables is not served"), "{e}");
    let info = flight_info(&mut raw, "SELECT 42 AS answer", &[]).await?;
    let ticket = info.endpoint[0].ticket.clone().context("ticket")?;
    assert_eq!(i64s(&fetch(&mut client, info).await?, "answer"), vec![42]);
    let e = raw
        .do_get(ticket)
        .await
        .err()
        .ok_or_else(|| anyhow!("second DoGet answered"))?;
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_requires_the_bearer_token_when_set() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with_token(silt_bin!(), dir.path(), "s3cret")?;
    let flight = silt.flight_endpoint()?;
    let mut raw = FlightServiceClient::new(channel(flight).await?);
    let e = flight_info(&mut raw, "SELECT 1", &[]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let e = flight_info(&mut raw, "SELECT 1", &[("authorization", "Bearer wrong")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");

    let mut client = FlightSqlServiceClient::new(channel(flight).await?);
    client.set_token("s3cret".into());
    let info = client.execute("SELECT 7 AS n".into(), None).await?;
    assert_eq!(i64s(&fetch(&mut client, info).await?, "n"), vec![7]);
    Ok(())
}

/// Where `python3` with ADBC's Flight SQL driver cannot run, why.
fn adbc_missing() -> Option<String> {
    let probe = std::process::Command::new("python3")
        .args([
            "-c",
            "import adbc_driver_flightsql.dbapi, adbc_driver_manager, pyarrow",
        ])
        .output();
    match probe {
        Err(e) => Some(format!("python3 cannot run ({e})")),
        Ok(out) if !out.status.success() => Some(format!(
            "adbc-driver-flightsql, adbc-driver-manager or pyarrow is not importable ({}); pip install -r integration-tests/python/requirements.txt",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
        Ok(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adbc_flight_sql_driver_from_python() -> Result<()> {
    if let Some(reason) = adbc_missing() {
        eprintln!("SKIPPED: adbc_flight_sql_driver_from_python: {reason}");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with_token(silt_bin!(), dir.path(), "s3cret")?;
    // Owned: the script runs on a blocking thread.
    let flight = silt.flight_endpoint()?.to_string();
    create_and_fill(&silt.bootstrap).await?;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/flight_adbc.py");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .env("SILTTEST_FLIGHT_URI", flight)
            .env("SILTTEST_FLIGHT_TOKEN", "s3cret")
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the ADBC script failed:\n{stdout}\n{stderr}"
    );
    let out: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the ADBC script printed no JSON:\n{stdout}\n{stderr}"))?;
    println!("{out:#}");

    assert_eq!(
        out["count_sum"],
        serde_json::json!([ROWS, ROWS * (ROWS - 1) / 2])
    );
    let rows: Vec<serde_json::Value> = (0..ROWS)
        .filter(|i| i % 100 == 7)
        .map(|i| serde_json::json!([i, format!("v{i}")]))
        .collect();
    assert_eq!(out["rows"], serde_json::Value::Array(rows));
    let error = |key: &str| -> (String, String) {
        let e = &out[key];
        (
            e[0].as_str().unwrap_or_default().to_string(),
            e[1].as_str().unwrap_or_default().to_string(),
        )
    };
    let (kind, message) = error("bad_sql");
    assert_eq!(kind, "ProgrammingError", "{message}");
    assert!(message.contains("InvalidArgument"), "{message}");
    let (_, message) = error("write");
    assert!(message.contains("read-only"), "{message}");
    let (kind, message) = error("deadline");
    assert_eq!(kind, "OperationalError", "{message}");
    assert!(message.contains("deadline of 1ms passed"), "{message}");
    let (_, message) = error("no_token");
    assert!(message.contains("bearer token"), "{message}");
    Ok(())
}
