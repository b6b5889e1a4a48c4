//! The job REST API and `silt job` commands against the real `silt up` binary on ephemeral
//! ports: submit (YAML and JSON), list, status, metrics, stop, cancel; mistakes answer 400 with
//! the path of the problem and start nothing; unknown ids answer 404; the OpenAPI document
//! matches the router; and a submitted job survives a SIGKILL of `silt up` without loss or
//! duplicates.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use fluss::client::FlussConnection;
use serde_json::Value;
use silt_connectors::fluss::connect;
use silt_jobs::job::client::Client;
use silt_testkit::lake::{delta_rows, sorted};
use silt_testkit::process::SiltProcess;
use silt_testkit::tables::demo::{self, expected_big_orders, write_orders, write_orders_to};
use silt_testkit::wait::{self, Look};
use silt_testkit::{read_conf, silt_bin};

async fn wait_for_status(
    client: &Client,
    id: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let what = format!("job {id}: {what}");
    let every = Duration::from_millis(200);
    wait::until(&what, Duration::from_secs(40), every, || async {
        let status = client.get(&format!("/v1/jobs/{id}")).await?.json()?;
        Ok(if ok(&status) {
            Look::Done(status)
        } else {
            Look::NotYet(status.to_string())
        })
    })
    .await
}

/// Runs `silt args`: its exit code, its stdout, and its stdout and stderr together.
fn silt_cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running silt");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), stdout, text)
}

/// Checks the topology of conf/pipelines/big-orders-to-delta.yaml: its operators in order with
/// the engine vertices they became, edges between them, and (`running`) rows out of the source.
fn check_topology(topology: &Value, running: bool) {
    let operators = topology["operators"]
        .as_array()
        .expect("topology.operators");
    let ids: Vec<&str> = operators.iter().filter_map(|o| o["id"].as_str()).collect();
    assert_eq!(
        ids,
        [
            "source",
            "transform-0-filter",
            "transform-0-projection",
            "sink"
        ],
        "{topology}"
    );
    assert_eq!(operators[3]["type"], "delta-sink", "{topology}");
    assert_eq!(
        operators[3]["vertices"],
        serde_json::json!(["sink-writer", "sink-committer"])
    );
    assert_eq!(operators[0]["vertices"], serde_json::json!(["source"]));
    assert_eq!(operators[0]["parallelism"], 2);
    let edges = topology["edges"].as_array().expect("topology.edges");
    assert_eq!(edges.len(), 3, "{topology}");
    for edge in edges {
        for end in [&edge["from"], &edge["to"]] {
            assert!(ids.iter().any(|id| end == id), "{edge} names no operator");
        }
        assert!(edge["partitioning"].is_string(), "{edge}");
    }
    let records_out = operators[0]["records_out"].as_u64();
    if running {
        assert!(records_out > Some(0), "{topology}");
    } else {
        assert_eq!(
            records_out, None,
            "the validate answer has no metrics: {topology}"
        );
    }
}

/// `silt up` over `data_dir` with the demo tables, orders `0..orders` written, a connection
/// and a REST client.
async fn silt_with_orders(
    data_dir: &Path,
    orders: i64,
) -> Result<(SiltProcess, FlussConnection, Client)> {
    let silt = SiltProcess::start(silt_bin!(), data_dir)?;
    let connection = connect(&silt.bootstrap).await?;
    demo::create_tables(&connection).await?;
    write_orders(&connection, 0..orders).await?;
    let client = Client::new(&silt.rest, None)?;
    Ok((silt, connection, client))
}

/// Submits conf/pipelines/big-orders-to-delta.yaml; answers the job id.
async fn submit_big_orders(client: &Client) -> Result<String> {
    let yaml = read_conf("pipelines/big-orders-to-delta.yaml");
    let r = client
        .post("/v1/jobs", "application/yaml", yaml.as_bytes())
        .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    Ok(r.json()?["id"].as_str().unwrap().to_string())
}

fn conf_path(relative: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conf")
        .join(relative)
        .to_string_lossy()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_list_status_stop_cancel_and_mistakes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (silt, _connection, client) = silt_with_orders(dir.path(), 150).await?;

    // Submit a YAML pipeline.
    let yaml = read_conf("pipelines/big-orders-to-delta.yaml");
    let pipeline_id = submit_big_orders(&client).await?;
    let listed = client.get("/v1/jobs").await?.json()?;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["id"] == pipeline_id.as_str())
    );
    let status = wait_for_status(&client, &pipeline_id, "a checkpoint with data", |s| {
        s["checkpoints_completed"].as_u64() >= Some(1)
            && s["operators"]
                .as_array()
                .is_some_and(|ops| ops.iter().any(|o| o["records_in"].as_u64() > Some(0)))
            && s["topology"]["operators"][0]["records_out"].as_u64() > Some(0)
    })
    .await?;
    assert_eq!(status["state"], "running");
    assert_eq!(status["parallelism"]["source"], 2);
    assert_eq!(status["parallelism"]["sink-committer"], 1);
    check_topology(&status["topology"], true);
    // A second read at least a second later measures back-pressure over the interval.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = client
        .get(&format!("/v1/jobs/{pipeline_id}"))
        .await?
        .json()?;
    for operator in again["topology"]["operators"].as_array().unwrap() {
        let ratio = operator["backpressure_ratio"].as_f64();
        assert!(
            ratio.is_some_and(|r| (0.0..=1.0).contains(&r)),
            "{operator}"
        );
    }
    let r = client
        .post("/v1/jobs/validate", "application/yaml", yaml.as_bytes())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    check_topology(&r.json()?["topology"], false);

    let metrics = client.get("/metrics").await?;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains(&format!(
            "silt_operator_records_in_total{{job=\"{pipeline_id}\",name=\"big-orders-to-delta\",operator=\"sink-writer\"}}"
        )),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("# TYPE silt_tiering_lag_offsets gauge")
    );

    // Stop: a final checkpoint, then finished; a second stop is a conflict.
    let stop = format!("/v1/jobs/{pipeline_id}/stop");
    let r = client.post(&stop, "application/json", b"").await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let stopped = r.json()?;
    assert_eq!(
        (&stopped["state"], &stopped["desired"]),
        (&Value::from("finished"), &Value::from("stopped"))
    );
    assert_eq!(
        stopped["checkpoints"].as_array().unwrap().last().unwrap()["is_final"],
        true
    );
    let again = client.post(&stop, "application/json", b"").await?;
    assert_eq!(again.status, 409, "{}", again.body);

    // Submit a JSON definition, then cancel it.
    let json = read_conf("jobs/orders-fanout.json");
    let r = client
        .post("/v1/jobs", "application/json", json.as_bytes())
        .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let fanout_id = r.json()?["id"].as_str().unwrap().to_string();
    let r = client.delete(&format!("/v1/jobs/{fanout_id}")).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()?["state"], "cancelled");
    assert_eq!(r.json()?["desired"], "cancelled");

    // Unknown ids.
    for (method, path) in [
        ("GET", "/v1/jobs/nope"),
        ("DELETE", "/v1/jobs/nope"),
        ("POST", "/v1/jobs/nope/stop"),
    ] {
        let r = client.request(method, path, None).await?;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
        assert!(r.error_message().contains("unknown job nope"), "{}", r.body);
    }

    // Mistakes: 400 with the path and the line and column of the bad value (the table name
    // is on line 9 of the pipeline, the filter on line 12), nothing started or persisted.
    let mistakes: Vec<(&str, String, &str, [u64; 2])> = vec![
        (
            "application/json",
            r#"{"name": "x", "operators": [{"name": "a", "type": "fluss-source", "config": {"table": 5}}]}"#.into(),
            "operators[0].config.table",
            [1, 87],
        ),
        ("application/json", r#"{"name": "x", "operators": [{"name": "a", "typ": "filter"}]}"#.into(), "operators[0].typ", [1, 50]),
        ("application/json", r#"{"name": "#.into(), "name", [1, 9]),
        ("application/yaml", yaml.replace("filter:", "filtr:"), "transform[0].filtr", [12, 12]),
        ("application/yaml", yaml.replace("demo.orders", "demo.orderz"), "source.table", [9, 10]),
        ("application/yaml", "source: [unclosed".into(), "", [1, 18]),
    ];
    for (content_type, body, path, place) in mistakes {
        for route in ["/v1/jobs", "/v1/jobs/validate"] {
            let r = client.post(route, content_type, body.as_bytes()).await?;
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            let v = r.json()?;
            let error = &v["errors"][0];
            assert_eq!(error["path"], path, "{body}: {}", r.body);
            assert_eq!(
                [&error["line"], &error["column"]],
                place,
                "{route} {body}: {}",
                r.body
            );
            assert!(!v["error"].as_str().unwrap().is_empty());
        }
    }
    let r = client
        .post(
            "/v1/jobs",
            "application/yaml",
            yaml.replace("demo.orders", "demo.orderz").as_bytes(),
        )
        .await?;
    assert!(
        r.body.contains(
            "unknown table demo.orderz (known: demo.customers, demo.customers_clean, demo.orders)"
        ),
        "{}",
        r.body
    );
    let jobs = client.get("/v1/jobs").await?.json()?;
    assert_eq!(jobs.as_array().unwrap().len(), 2, "{jobs}");
    let persisted = std::fs::read_dir(dir.path().join("jobs"))?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
        .count();
    assert_eq!(persisted, 2);

    // Every documented route is routed (not the router's fallback 404, not 405).
    let doc = client.get("/openapi.json").await?.json()?;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for method in methods.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let concrete = path.replace("{id}", "nope");
            let body = (method == "POST").then_some(("application/json", &b"{}"[..]));
            let r = client.request(&method, &concrete, body).await?;
            assert_ne!(
                r.status, 405,
                "{method} {path} is documented but not routed"
            );
            assert!(
                !(r.status == 404 && r.body.is_empty()),
                "{method} {path} is documented but not routed"
            );
        }
    }

    // The CLI talks to the same API.
    let rest = silt.rest.as_str();
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "list"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&pipeline_id) && out.contains(&fanout_id),
        "{out}"
    );
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "status", &pipeline_id], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("sink-writer") && out.contains("(final)"),
        "{out}"
    );
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "status", "nope"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unknown job nope"), "{out}");
    let file = conf_path("pipelines/customers-to-silt.yaml");
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "validate", &file], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("fluss-sink demo.customers_clean") && out.contains("valid"),
        "{out}"
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, yaml.replace("demo.orders", "demo.orderz"))?;
    let (code, _, out) = silt_cli(
        &["job", "--rest", rest, "validate", &bad.to_string_lossy()],
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("source.table: unknown table demo.orderz")
            && out.contains("9 |   table: demo.orderz\n      |          ^"),
        "{out}"
    );
    let (code, stdout, out) = silt_cli(&["job", "--rest", rest, "submit", &file], &[]);
    assert_eq!(code, 0, "{out}");
    // A script's `id=$(silt job submit ...)`: the id alone on stdout.
    let submitted = stdout.trim_end_matches('\n').to_string();
    assert!(
        !submitted.is_empty()
            && !submitted.contains(char::is_whitespace)
            && out.contains(&format!("submitted job {submitted} ")),
        "{out}"
    );
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "stop", &submitted], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("with final checkpoint"), "{out}");
    let (code, _, out) = silt_cli(&["job", "--rest", rest, "cancel", &submitted], &[]);
    assert_eq!(code, 0, "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_guards_the_job_api() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let token = ("SILT_REST__TOKEN", "s3cret");
    let silt = SiltProcess::start_with_token(silt_bin!(), dir.path(), token.1)?;
    let anonymous = Client::new(&silt.rest, None)?;
    for path in ["/v1/jobs", "/metrics", "/openapi.json"] {
        assert_eq!(anonymous.get(path).await?.status, 401, "{path}");
    }
    let authorized = Client::new(&silt.rest, Some("s3cret".into()))?;
    assert_eq!(authorized.get("/v1/jobs").await?.status, 200);
    let (code, _, out) = silt_cli(&["job", "--rest", &silt.rest, "list"], &[token]);
    assert_eq!(code, 0, "{out}");
    let (code, _, out) = silt_cli(&["job", "--rest", &silt.rest, "list"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("bearer token"), "{out}");
    Ok(())
}

/// Regression guard for the issue's promise: a submitted job resumes from its latest checkpoint
/// after `silt up` is SIGKILLed, and the lake ends with every expected row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_silt_up_resumes_a_submitted_job_without_loss_or_duplicates() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (silt, connection, client) = silt_with_orders(dir.path(), 200).await?;
    let id = submit_big_orders(&client).await?;
    wait_for_status(&client, &id, "a checkpoint", |s| {
        s["checkpoints_completed"].as_u64() >= Some(1)
    })
    .await?;
    write_orders(&connection, 200..400).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(connection);
    silt.kill();

    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let client = Client::new(&silt.rest, None)?;
    let status =
        wait_for_status(&client, &id, "running again", |s| s["state"] == "running").await?;
    assert_eq!(status["desired"], "running");
    let connection = connect(&silt.bootstrap).await?;
    write_orders(&connection, 400..600).await?;
    let lake = dir.path().join("lake/__jobs/big-orders-to-delta/sink");
    wait::for_rows(
        "big orders after a restart",
        &expected_big_orders(600),
        Duration::from_secs(40),
        || {
            delta_rows(
                &lake,
                "SELECT order_id, customer_id, status, amount_cents FROM lake",
            )
        },
    )
    .await?;
    // A graceful shutdown keeps it marked running: it would resume again.
    let status = client.get(&format!("/v1/jobs/{id}")).await?.json()?;
    assert_eq!(status["desired"], "running");
    Ok(())
}

/// `start: lake` reads from where the table's lake ends (its tiering txn offsets), so a job
/// over the hot tail sees only what the lake does not have yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_started_at_the_lake_reads_only_the_hot_tail() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let connection = connect(&silt.bootstrap).await?;
    demo::orders("events")
        .buckets(2)
        .lake("500ms")
        .create_if_missing(&connection)
        .await?;
    write_orders_to(&connection, "events", 0..100).await?;
    silt.wait_lake_rows("demo.events", 100, Duration::from_secs(40))
        .await?;
    let client = Client::new(&silt.rest, None)?;
    let definition = r#"{
        "name": "events-tail",
        "checkpoint": {"interval_ms": 500},
        "operators": [
            {"name": "events", "type": "fluss-source", "config": {"table": "demo.events", "start": "lake"}},
            {"name": "tail", "type": "delta-sink", "config": {"mode": "append"}}
        ]
    }"#;
    let r = client
        .post("/v1/jobs", "application/json", definition.as_bytes())
        .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.body.contains("from lake offsets"),
        "the compiled source should start at the lake's offsets: {}",
        r.body
    );
    write_orders_to(&connection, "events", 100..150).await?;
    let expected = sorted((100..150).map(|i| i.to_string()).collect());
    let tail = dir.path().join("lake/__jobs/events-tail/tail");
    wait::for_rows("the hot tail", &expected, Duration::from_secs(40), || {
        delta_rows(&tail, "SELECT order_id FROM lake")
    })
    .await
}
