//! `silt sql` and `POST /v1/query` end to end against a running `silt up`: formats, the Arrow
//! IPC answer, status codes (400 user error, 504 deadline, 503 busy), CLI exit codes (0, 1, 2,
//! 3, 4), the bearer token, the error when no server runs, and a query past the concurrency
//! bound refused alike by REST, `silt sql` and Flight SQL.

use std::process::{Command, Output};

use anyhow::Result;
use silt_testkit::process::SiltProcess;
use silt_testkit::{silt_bin, tables};

const ROWS: i64 = 1_200;
const HEAVY: &str = "SELECT count(*) FROM shop.orders$lake a, shop.orders$lake b, shop.orders$lake c WHERE a.id + b.id + c.id = -1";

/// `shop.orders`: a lake-enabled log table of `ROWS` rows, `id` 0.. and `v` = `order-<id>`.
async fn create_and_fill(bootstrap: &str) -> Result<()> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let orders = tables::text_log("shop", "orders").buckets(2).lake("500ms");
    orders.create(&connection).await?;
    tables::append_events(&connection, &orders.path, 0..ROWS, |id| {
        format!("order-{id}")
    })
    .await
}

fn silt_sql(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["--log", "error", "sql"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("silt sql runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_cli_and_rest_against_silt_up() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    create_and_fill(&silt.bootstrap).await?;
    let url = silt.rest.as_str();

    // CSV of the real-time view: every row, in order.
    let out = silt_sql(
        &[
            "--url",
            url,
            "--format",
            "csv",
            "SELECT id, v FROM shop.orders ORDER BY id",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("id,v"));
    let want: Vec<String> = (0..ROWS).map(|i| format!("{i},order-{i}")).collect();
    assert_eq!(lines.map(str::to_string).collect::<Vec<_>>(), want);
    assert!(text(&out.stderr).contains(&format!("{ROWS} rows")));

    // JSON and table formats; waiting for tiering makes `$lake` complete.
    let out = silt_sql(
        &[
            "--url",
            url,
            "--format",
            "json",
            "--wait-for-tiering",
            "--deadline",
            "40s",
            "SELECT count(*) AS n, sum(id) AS s FROM shop.orders$lake",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json[0]["n"], serde_json::json!(ROWS), "{json}");
    assert_eq!(
        json[0]["s"],
        serde_json::json!(ROWS * (ROWS - 1) / 2),
        "{json}"
    );
    let out = silt_sql(
        &[
            "--url",
            url,
            "SELECT version FROM shop.orders$lake$snapshots ORDER BY version LIMIT 1",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("| version |") && table.contains("| 0       |"),
        "{table}"
    );

    // Exit codes: deadline 3, user error 1, usage 2, no server 1; (arguments, exit code, what
    // stderr says).
    let exits: [(&[&str], i32, &str); 5] = [
        (
            &["--url", url, "--deadline", "400ms", HEAVY],
            3,
            "lake files scanned",
        ),
        (
            &["--url", url, "SELECT * FROM shop.ordrs"],
            1,
            "known: shop.orders",
        ),
        (&["--url", url, "DELETE FROM shop.orders"], 1, "read-only"),
        (&["--url", url, "--format", "xml", "SELECT 1"], 2, ""),
        (
            &["--url", "http://127.0.0.1:1", "SELECT * FROM shop.orders"],
            1,
            "silt up",
        ),
    ];
    for (args, code, says) in exits {
        let out = silt_sql(args, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }

    // REST directly: JSON rows by default, Arrow IPC on request, 400 and 504.
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value, accept: &'static str| {
        client
            .post(format!("{url}/v1/query"))
            .header("accept", accept)
            .body(body.to_string())
            .send()
    };
    let response = post(
        serde_json::json!({"sql": "SELECT id, v FROM shop.orders WHERE id < 3 ORDER BY id", "deadline": "20s"}),
        "application/json",
    )
    .await?;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await?)?;
    assert_eq!(body["row_count"], 3, "{body}");
    assert_eq!(
        body["rows"][2],
        serde_json::json!({"id": 2, "v": "order-2"}),
        "{body}"
    );
    assert_eq!(body["columns"][0]["name"], "id", "{body}");
    assert_eq!(body["tables"][0]["name"], "shop.orders", "{body}");

    let response = post(
        serde_json::json!({"sql": "SELECT id FROM shop.orders ORDER BY id", "deadline_ms": 20000}),
        "application/vnd.apache.arrow.stream",
    )
    .await?;
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await?;
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows as i64, ROWS);

    for (body, status, kind) in [
        (serde_json::json!({"sql": "SELEC 1"}), 400, "user"),
        (
            serde_json::json!({"sql": "SELECT 1", "deadline": "soon"}),
            400,
            "user",
        ),
        (
            serde_json::json!({"sql": HEAVY, "deadline_ms": 300}),
            504,
            "deadline",
        ),
    ] {
        let response = post(body.clone(), "application/json").await?;
        assert_eq!(response.status(), status, "{body}");
        let answer: serde_json::Value = serde_json::from_slice(&response.bytes().await?)?;
        assert_eq!(answer["kind"], kind, "{answer}");
    }
    drop(silt);

    // No server: `$lake` and `$lake$snapshots` are read from the data directory; the
    // real-time view and waiting for tiering need `silt up`.
    let offline = |args: &[&str]| {
        let mut all = vec!["--url", "http://127.0.0.1:1"];
        all.extend_from_slice(args);
        Command::new(env!("CARGO_BIN_EXE_silt"))
            .args([
                "--log",
                "error",
                "--data-dir",
                &dir.path().to_string_lossy(),
                "sql",
            ])
            .args(&all)
            .output()
            .expect("silt sql runs")
    };
    let out = offline(&[
        "--format",
        "csv",
        "SELECT count(*) AS n FROM shop.orders$lake",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("n\n{ROWS}\n"));
    assert!(
        text(&out.stderr).contains("no server"),
        "{}",
        text(&out.stderr)
    );
    let out = offline(&["SELECT max(version) FROM shop.orders$lake$snapshots"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for needs_server in [
        &["SELECT 1 FROM shop.orders"][..],
        &["--wait-for-tiering", "SELECT 1 FROM shop.orders$lake"],
    ] {
        let out = offline(needs_server);
        assert_eq!(out.status.code(), Some(1), "{needs_server:?}");
        assert!(
            text(&out.stderr).contains("silt up"),
            "{}",
            text(&out.stderr)
        );
    }
    let out = offline(&["SELECT * FROM shop.ordrs$lake"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("known: shop.orders"),
        "{}",
        text(&out.stderr)
    );

    // With rest.token set, the CLI sends the token from the config; without it, 401.
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with_token(silt_bin!(), dir.path(), "s3cret")?;
    let url = silt.rest.as_str();
    let out = silt_sql(
        &["--url", url, "SELECT 41 + 1 AS x"],
        &[("SILT_REST__TOKEN", "s3cret")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("42"));
    let out = silt_sql(&["--url", url, "SELECT 1"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("bearer token"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

/// Issue 33 (item 8): nothing bounded how many queries ran at once, each with its own memory
/// pool, hot tails and result. With every slot taken (`query.concurrent_max`) and as many
/// waiting as may (`query.waiting_max`), a query is refused at once, naming the bounds: REST
/// 503 with kind "busy" and `Retry-After`, `silt sql` exit code 4, Flight SQL UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_past_the_concurrency_bound_is_refused_as_busy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let bounds = [
        ("SILT_QUERY__CONCURRENT_MAX", "1"),
        ("SILT_QUERY__WAITING_MAX", "0"),
    ];
    let silt = SiltProcess::start_with(silt_bin!(), dir.path(), &[], &bounds)?;
    create_and_fill(&silt.bootstrap).await?;
    silt.wait_lake_rows("shop.orders", ROWS, std::time::Duration::from_secs(60))
        .await?;
    let url = silt.rest.clone();
    let client = reqwest::Client::new();
    let post = |sql: &str, deadline: &str| {
        client
            .post(format!("{url}/v1/query"))
            .body(serde_json::json!({"sql": sql, "deadline": deadline}).to_string())
            .send()
    };
    // Takes the one slot until its deadline.
    let four_way = "SELECT count(*) FROM shop.orders$lake a, shop.orders$lake b, shop.orders$lake c, shop.orders$lake d WHERE a.id + b.id + c.id + d.id = -1";
    let holder = tokio::spawn(post(four_way, "30s"));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let busy = loop {
        let response = post("SELECT 1", "5s").await?;
        if response.status() == 503 {
            break response;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "a query still runs beside the one slot's holder: {}",
            response.status()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(busy.headers()["retry-after"], "1");
    let answer: serde_json::Value = serde_json::from_slice(&busy.bytes().await?)?;
    assert_eq!(answer["kind"], "busy", "{answer}");
    let message = answer["error"].as_str().unwrap_or_default();
    assert!(message.contains("query.concurrent_max"), "{answer}");

    let out = silt_sql(&["--url", &url, "SELECT 1"], &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("query.concurrent_max"), "{stderr}");

    let channel = tonic::transport::Endpoint::from_shared(
        silt.flight_endpoint()?.replacen("grpc://", "http://", 1),
    )?
    .connect()
    .await?;
    let mut flight = arrow_flight::sql::client::FlightSqlServiceClient::new(channel);
    let e = flight.execute("SELECT 1".into(), None).await.unwrap_err();
    let arrow_flight::error::FlightError::Tonic(status) = &e else {
        panic!("expected a gRPC status, got {e:?}");
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("query.concurrent_max"),
        "{status:?}"
    );
    holder.abort();
    Ok(())
}
