//! Golden pipelines: each example in conf/pipelines/ runs against a real hotstore (written to
//! through the fluss-rs client) and must produce exactly the rows a model of its input predicts,
//! compared as multisets. Each also runs as checkpoint → kill → restore (at another parallelism)
//! with more input after the restore, and must produce the same rows: no loss, no duplicates.
//! A kill is an engine-level cancel without a final checkpoint, and the restore goes through
//! the job service's persisted definition, as a restart of `silt up` does.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fluss::client::FlussConnection;
use fluss::metadata::{DataTypes, PartitionSpec};
use fluss::row::GenericRow;
use silt_connectors::fluss::connect;
use silt_engine::{ChannelConfig, RestartStrategy};
use silt_hotstore::ServerHandle;
use silt_jobs::job::service::{Desired, JobService, JobServiceConfig};
use silt_jobs::job::{Format, parse_submission};
use silt_testkit::lake::{delta_rows, silt_table_rows, sorted};
use silt_testkit::tables::demo::{
    self, expected_big_orders, expected_customers_clean, expected_customers_delta, order,
    write_customers, write_orders,
};
use silt_testkit::tables::{self, Table};
use silt_testkit::{hotstore, read_conf, wait};

const ORDERS_PER_PHASE: i64 = 150;
const CUSTOMER_CHANGES_PER_PHASE: i64 = 60;
const OUTPUT_TIMEOUT: Duration = Duration::from_secs(40);

struct Env {
    dir: tempfile::TempDir,
    _server: ServerHandle,
    bootstrap: String,
    connection: FlussConnection,
}

impl Env {
    async fn start() -> Result<Env> {
        let dir = tempfile::tempdir()?;
        let server = hotstore::start(&dir.path().join("hotstore")).await?;
        let bootstrap = server.local_addr().to_string();
        let connection = connect(&bootstrap).await?;
        demo::create_tables(&connection).await?;
        Ok(Env {
            dir,
            _server: server,
            bootstrap,
            connection,
        })
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn service(&self) -> JobService {
        JobService::new(JobServiceConfig {
            bootstrap: self.bootstrap.clone(),
            credentials: None,
            data_dir: self.data_dir(),
            lake_root: self.data_dir().join("lake").to_string_lossy().to_string(),
            lake_storage_options: Default::default(),
            checkpoint_interval_default: Duration::from_secs(1),
            checkpoint_timeout: Duration::from_secs(30),
            checkpoints_retained_max: 3,
            restart: RestartStrategy::FixedDelay {
                delay: Duration::from_millis(200),
                attempts_max: 5,
            },
            channel: ChannelConfig::default(),
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Golden {
    CustomersToDelta,
    BigOrdersToDelta,
    CustomersToSilt,
}

impl Golden {
    fn file(self) -> &'static str {
        match self {
            Golden::CustomersToDelta => "pipelines/customers-to-delta.yaml",
            Golden::BigOrdersToDelta => "pipelines/big-orders-to-delta.yaml",
            Golden::CustomersToSilt => "pipelines/customers-to-silt.yaml",
        }
    }

    async fn write_phase(self, env: &Env, phase: i64) -> Result<()> {
        match self {
            Golden::BigOrdersToDelta => {
                let ids = phase * ORDERS_PER_PHASE..(phase + 1) * ORDERS_PER_PHASE;
                write_orders(&env.connection, ids).await
            }
            _ => {
                let ks =
                    phase * CUSTOMER_CHANGES_PER_PHASE..(phase + 1) * CUSTOMER_CHANGES_PER_PHASE;
                write_customers(&env.connection, ks).await
            }
        }
    }

    fn expected(self, phases: i64) -> Vec<String> {
        match self {
            Golden::CustomersToDelta => {
                expected_customers_delta(phases * CUSTOMER_CHANGES_PER_PHASE)
            }
            Golden::BigOrdersToDelta => expected_big_orders(phases * ORDERS_PER_PHASE),
            Golden::CustomersToSilt => {
                expected_customers_clean(phases * CUSTOMER_CHANGES_PER_PHASE)
            }
        }
    }

    async fn read(self, env: &Env) -> Result<Vec<String>> {
        let lake = |name: &str| env.data_dir().join("lake/__jobs").join(name).join("sink");
        match self {
            Golden::CustomersToDelta => {
                delta_rows(
                    &lake("customers-to-delta"),
                    "SELECT customer_id, name, balance FROM lake",
                )
                .await
            }
            Golden::BigOrdersToDelta => {
                delta_rows(
                    &lake("big-orders-to-delta"),
                    "SELECT order_id, customer_id, status, amount_cents FROM lake",
                )
                .await
            }
            Golden::CustomersToSilt => {
                silt_table_rows(&env.bootstrap, "demo", "customers_clean").await
            }
        }
    }

    async fn wait_for_output(self, env: &Env, phases: i64) -> Result<()> {
        let expected = self.expected(phases);
        assert!(expected.len() > 5, "the model predicts too little output");
        wait::for_rows(self.file(), &expected, OUTPUT_TIMEOUT, || self.read(env)).await
    }
}

async fn submit(service: &JobService, golden: Golden) -> Result<String> {
    let (definition, paths) = parse_submission(&read_conf(golden.file()), Format::Yaml)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = service
        .submit(definition, paths.as_ref())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(status.id)
}

async fn wait_for_checkpoint(service: &JobService, id: &str) -> Result<()> {
    let handle = service.handle(id).await.context("job handle")?;
    if !handle
        .wait_for_checkpoints(1, Duration::from_secs(30))
        .await
    {
        bail!(
            "no checkpoint within 30 s: {:?}",
            service.status(id).await.ok()
        );
    }
    Ok(())
}

/// Input, a checkpoint, more input, the expected output, then a stop with a final checkpoint.
async fn run_plain(golden: Golden) -> Result<()> {
    let env = Env::start().await?;
    golden.write_phase(&env, 0).await?;
    let service = env.service();
    let id = submit(&service, golden).await?;
    wait_for_checkpoint(&service, &id).await?;
    golden.write_phase(&env, 1).await?;
    golden.wait_for_output(&env, 2).await?;
    let stopped = service
        .stop(&id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(
        (stopped.state.as_str(), stopped.desired),
        ("finished", Desired::Stopped)
    );
    assert!(
        stopped.checkpoints.last().is_some_and(|c| c.is_final),
        "{stopped:?}"
    );
    // Stopped output stays as it was.
    assert_eq!(golden.read(&env).await?, golden.expected(2));
    Ok(())
}

/// Input, a checkpoint, more input, a kill mid-stream, a restore at parallelism 3 from the
/// persisted definition, more input, and the same output as without the kill.
async fn run_kill_restore(golden: Golden) -> Result<()> {
    let env = Env::start().await?;
    golden.write_phase(&env, 0).await?;
    let first = env.service();
    let id = submit(&first, golden).await?;
    wait_for_checkpoint(&first, &id).await?;
    golden.write_phase(&env, 1).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let handle = first.handle(&id).await.context("job handle")?;
    handle.cancel().await; // no final checkpoint: what ran after the last one is replayed
    drop(first);

    // Rescale on restore: the persisted definition is what a restarted silt up reads.
    let file = env.data_dir().join("jobs").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&file)?;
    let rescaled = text.replace("\"parallelism\": 2", "\"parallelism\": 3");
    assert_ne!(
        text, rescaled,
        "the persisted definition carries the parallelism"
    );
    std::fs::write(&file, rescaled)?;

    let second = env.service();
    assert_eq!(second.resume_persisted().await?, 1);
    let status = second
        .status(&id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(status.parallelism.get("source"), Some(&3), "{status:?}");
    golden.write_phase(&env, 2).await?;
    golden.wait_for_output(&env, 3).await?;
    second.stop(&id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(golden.read(&env).await?, golden.expected(3));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pk_table_upserted_into_delta() -> Result<()> {
    run_plain(Golden::CustomersToDelta).await?;
    run_kill_restore(Golden::CustomersToDelta).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_table_filtered_and_projected_into_delta() -> Result<()> {
    run_plain(Golden::BigOrdersToDelta).await?;
    run_kill_restore(Golden::BigOrdersToDelta).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pk_table_transformed_into_another_silt_table() -> Result<()> {
    run_plain(Golden::CustomersToSilt).await?;
    run_kill_restore(Golden::CustomersToSilt).await
}

/// Regression (issue 33, item 2): jobs named their source tables by name only. A job submitted
/// again after its source table was dropped and created again wrote into its old Delta table,
/// whose txn offsets (the dropped table's) made the new table's rows below them count as
/// already committed: they were skipped without a word. And a job resumed at a restart of
/// `silt up` read the new table from the old table's checkpointed offsets. Now a job's delta
/// sink belongs to the table id that feeds it, and a resumed job to the table ids it was
/// submitted for: both are refused, saying why and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_takes_a_table_created_again_for_the_one_it_was_submitted_for() -> Result<()> {
    let golden = Golden::BigOrdersToDelta;
    let env = Env::start().await?;
    golden.write_phase(&env, 0).await?;
    let admin = env.connection.get_admin()?;
    let orders = fluss::metadata::TablePath::new("demo", "orders");
    let old_id = admin.get_table_info(&orders).await?.get_table_id();
    let service = env.service();
    let stopped = submit(&service, golden).await?;
    golden.wait_for_output(&env, 1).await?;
    service
        .stop(&stopped)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // A second job of another name stays persisted as running, as at a `silt up` shutdown.
    let (definition, paths) = parse_submission(
        &read_conf(golden.file()).replace("  name: big-orders-to-delta", "  name: orders-copy"),
        Format::Yaml,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let running = service
        .submit(definition, paths.as_ref())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .id;
    wait_for_checkpoint(&service, &running).await?;
    drop(service);

    admin.drop_table(&orders, false).await?;
    demo::create_tables(&env.connection).await?;
    let new_id = admin.get_table_info(&orders).await?.get_table_id();
    golden.write_phase(&env, 0).await?;

    let service = env.service();
    assert_eq!(
        service.resume_persisted().await?,
        0,
        "nothing resumes onto the new table"
    );
    let status = service
        .status(&running)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let why = format!("{status:?}");
    assert!(
        why.contains(&format!("table id {new_id}")) && why.contains(&format!("table id {old_id}")),
        "the job says which table it was submitted for: {why}"
    );
    let refused = submit(&service, golden)
        .await
        .expect_err("the sink's lake holds the dropped table's offsets");
    let message = format!("{refused:#}");
    assert!(
        message.contains(&format!("big-orders-to-delta.sink.table-{old_id}"))
            && message.contains("write to another path, or delete"),
        "{message}"
    );
    Ok(())
}

/// Mistakes in pipelines and definitions name the path and the fix, and start nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_jobs_name_the_path_and_start_nothing() -> Result<()> {
    let env = Env::start().await?;
    let service = env.service();
    let big_orders = read_conf("pipelines/big-orders-to-delta.yaml");
    let to_silt = read_conf("pipelines/customers-to-silt.yaml");
    let fanout = read_conf("jobs/orders-fanout.json");
    // (body, format, path, part of the message)
    let cases: Vec<(String, Format, &str, &str)> = vec![
        (
            big_orders.replace("demo.orders", "demo.orderz"),
            Format::Yaml,
            "source.table",
            "unknown table demo.orderz (known: demo.customers, demo.customers_clean, demo.orders)",
        ),
        (
            big_orders.replace("amount > 10", "amount > 10 AND colour = 'red'"),
            Format::Yaml,
            "transform[0].filter",
            "colour",
        ),
        (
            big_orders.replace("upper(status) AS status", "upper(statuz) AS status"),
            Format::Yaml,
            "transform[0].projection (item 2)",
            "statuz",
        ),
        (
            big_orders.replace("mode: append", "mode: upsert"),
            Format::Yaml,
            "sink.keys",
            "demo.orders has no primary key",
        ),
        (
            to_silt.replace("upper(name) AS name, ", ""),
            Format::Yaml,
            "sink.table",
            "column name of demo.customers_clean is missing from the input",
        ),
        (
            to_silt.replace(
                "CAST(round(balance * 100) AS BIGINT) AS balance_cents",
                "round(balance * 100) AS balance_cents",
            ),
            Format::Yaml,
            "sink.table",
            "column balance_cents is Float64 in the input but Int64 in demo.customers_clean",
        ),
        (
            big_orders.replace("interval: 1s", "interval: soon"),
            Format::Yaml,
            "pipeline.checkpoint.interval",
            "not a duration",
        ),
        (
            fanout.replace("demo.orders", "demo.orderz"),
            Format::Json,
            "operators[0].config.table",
            "unknown table demo.orderz (known: demo.customers, demo.customers_clean, demo.orders)",
        ),
        (
            fanout.replace("SELECT order_id, amount FROM input", "SELECT count(*) FROM input"),
            Format::Json,
            "operators[1].config.statement",
            "aggregate",
        ),
        (
            fanout.replace("\"partitioning\": \"rebalance\"", "\"partitioning\": \"rebalance\" }, { \"from\": \"orders\", \"to\": \"lake\", \"partitioning\": \"broadcast\""),
            Format::Json,
            "operators[2]",
            "has 2 inputs",
        ),
        (
            fanout.replace("{ \"from\": \"orders\", \"to\": \"paid\" }", "{ \"from\": \"orders\", \"to\": \"paid\", \"partitioning\": \"rebalance\" }"),
            Format::Json,
            "edges[0].partitioning",
            "order-sensitive sink lake",
        ),
        (
            fanout.replace("\"type\": \"filter\"", "\"type\": \"filtre\""),
            Format::Json,
            "operators[3].type",
            "unknown operator type filtre (known: fluss-source, filter",
        ),
    ];
    // Regression (issue 13): a REST caller could point a delta-sink anywhere the process can
    // write, or at another store through its own storage options.
    let lake = env.data_dir().join("lake");
    let sink_with =
        |line: &str| big_orders.replace("  mode: append\n", &format!("  mode: append\n  {line}\n"));
    let mut cases = cases;
    for (path, message) in [
        // Outside the lake, but inside the test's directory: the bug would write there.
        (
            format!("{}/outside-the-lake", env.data_dir().display()),
            "is outside the lake",
        ),
        (
            format!("{}/demo/orders", lake.display()),
            "is outside the lake",
        ),
        (format!("{}/__jobs/../../escape", lake.display()), "\"..\""),
    ] {
        cases.push((
            sink_with(&format!("path: \"{path}\"")),
            Format::Yaml,
            "sink.path",
            message,
        ));
    }
    cases.push((
        sink_with("storage_options: { aws_endpoint_url: \"http://example.com\" }"),
        Format::Yaml,
        "sink.storage_options",
        "lake.storage_options",
    ));
    for (body, format, path, message) in cases {
        let (definition, paths) = match parse_submission(&body, format) {
            Ok(parsed) => parsed,
            Err(e) => {
                assert_eq!(e.0[0].path, path, "{e}");
                assert!(e.0[0].message.contains(message), "{e}");
                continue;
            }
        };
        let error = service
            .submit(definition, paths.as_ref())
            .await
            .err()
            .with_context(|| format!("accepted a job with a mistake at {path}"))?;
        let silt_jobs::job::service::JobError::Invalid(errors) = error else {
            bail!("not a validation error: {error}");
        };
        assert_eq!(errors.0[0].path, path, "{errors}");
        assert!(
            errors.0[0].message.contains(message),
            "{path}: {:?} lacks {message:?}",
            errors.0[0].message
        );
    }
    assert!(
        service.list().await.is_empty(),
        "an invalid job was started"
    );
    assert!(
        !env.data_dir().join("jobs").exists(),
        "an invalid job was persisted"
    );

    // Two running jobs of one name would share their Delta tables: the second is refused.
    let first = submit(&service, Golden::BigOrdersToDelta).await?;
    let (definition, paths) =
        parse_submission(&big_orders, Format::Yaml).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Err(silt_jobs::job::service::JobError::Invalid(errors)) =
        service.submit(definition, paths.as_ref()).await
    else {
        bail!("a second job named big-orders-to-delta was accepted");
    };
    assert_eq!(errors.0[0].path, "pipeline.name");
    assert!(errors.0[0].message.contains(&first), "{errors}");
    service
        .cancel(&first)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(service.list().await.len(), 1);
    Ok(())
}

/// conf/jobs/orders-fanout.json: one source fanned out to a `sql` operator into Delta and to a
/// filter, a projection and the print sink over a rebalance edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_definition_fans_out_through_sql_into_delta() -> Result<()> {
    let env = Env::start().await?;
    write_orders(&env.connection, 0..ORDERS_PER_PHASE).await?;
    let service = env.service();
    let (definition, paths) = parse_submission(&read_conf("jobs/orders-fanout.json"), Format::Json)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = service
        .submit(definition, paths.as_ref())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(status.parallelism.get("print"), Some(&1), "{status:?}");
    write_orders(&env.connection, ORDERS_PER_PHASE..2 * ORDERS_PER_PHASE).await?;
    let expected = sorted(
        (0..2 * ORDERS_PER_PHASE)
            .filter(|id| order(*id).2 == "paid")
            .map(|id| format!("{id}|{}", order(id).1))
            .collect(),
    );
    let lake = env.data_dir().join("lake/__jobs/orders-fanout/lake");
    wait::for_rows("orders-fanout", &expected, OUTPUT_TIMEOUT, || {
        delta_rows(&lake, "SELECT order_id, amount FROM lake")
    })
    .await?;
    let stopped = service
        .stop(&status.id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let printed = stopped
        .operators
        .iter()
        .find(|o| o.name == "print")
        .map(|o| o.records_in);
    let cancelled = (0..2 * ORDERS_PER_PHASE)
        .filter(|id| order(*id).2 == "cancelled")
        .count() as u64;
    assert_eq!(printed, Some(cancelled), "{stopped:?}");
    Ok(())
}

/// A job reads every partition of a partitioned table (issue 17), a partition created while it
/// runs included, into an unpartitioned silt table; a delta-sink fed by a partitioned table and
/// `start: lake` on one are refused (its txn offsets are per bucket, and it is not tiered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_flows_into_a_silt_table_but_not_into_delta_yet() -> Result<()> {
    let env = Env::start().await?;
    let source = Table::log("parts", "events")
        .column("dt", DataTypes::string())
        .column("id", DataTypes::bigint())
        .column("v", DataTypes::string())
        .partitioned_by(&["dt"]);
    source.create(&env.connection).await?;
    Table::log("parts", "copy")
        .column("id", DataTypes::bigint())
        .column("dt", DataTypes::string())
        .column("v", DataTypes::string())
        .create(&env.connection)
        .await?;
    let admin = env.connection.get_admin()?;
    let day = |d: &str| PartitionSpec::new(HashMap::from([("dt".to_string(), d.to_string())]));
    let mut expected = Vec::new();
    let append = |d: &'static str, ids: std::ops::Range<i64>, expected: &mut Vec<String>| {
        let rows: Vec<(i64, String)> = ids.map(|id| (id, format!("{d}-{id}"))).collect();
        expected.extend(rows.iter().map(|(id, v)| format!("{id}|{d}|{v}")));
        let rows = rows.into_iter().map(move |(id, v)| {
            let mut row = GenericRow::new(3);
            row.set_field(0, d);
            row.set_field(1, id);
            row.set_field(2, v);
            row
        });
        tables::append_rows(&env.connection, &source.path, rows)
    };
    for d in ["2024-05-01", "2024-05-02"] {
        admin.create_partition(&source.path, &day(d), false).await?;
    }
    append("2024-05-01", 0..100, &mut expected).await?;
    append("2024-05-02", 100..180, &mut expected).await?;

    let yaml = "source:\n  type: fluss\n  table: parts.events\n  start: earliest\nsink:\n  type: fluss\n  table: parts.copy\n  mode: append\npipeline:\n  name: partitions-to-silt\n  parallelism: 2\n  checkpoint:\n    interval: 1s\n";
    let service = env.service();
    let (definition, paths) =
        parse_submission(yaml, Format::Yaml).map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = service
        .submit(definition, paths.as_ref())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .id;
    wait_for_checkpoint(&service, &id).await?;
    admin
        .create_partition(&source.path, &day("2024-05-03"), false)
        .await?;
    append("2024-05-03", 200..260, &mut expected).await?;
    append("2024-05-01", 300..310, &mut expected).await?;
    let expected = sorted(expected);
    wait::for_rows("parts.copy", &expected, OUTPUT_TIMEOUT, || {
        silt_table_rows(&env.bootstrap, "parts", "copy")
    })
    .await?;
    service
        .stop(&id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let to_delta = yaml
        .replace("  table: parts.copy\n", "")
        .replace("partitions-to-silt", "partitions-to-delta");
    let from_lake = yaml
        .replace("start: earliest", "start: lake")
        .replace("partitions-to-silt", "partitions-from-lake");
    for (body, path, message) in [
        (
            to_delta.replace("type: fluss\n  mode", "type: delta\n  mode"),
            "sink",
            "delta-sink cannot take a partitioned table's rows yet",
        ),
        (
            from_lake,
            "source.start",
            "cannot start a partitioned table at its lake",
        ),
    ] {
        let (definition, paths) =
            parse_submission(&body, Format::Yaml).map_err(|e| anyhow::anyhow!("{e}"))?;
        let Err(silt_jobs::job::service::JobError::Invalid(errors)) =
            service.submit(definition, paths.as_ref()).await
        else {
            bail!("accepted {body}");
        };
        assert_eq!(errors.0[0].path, path, "{errors}");
        assert!(errors.0[0].message.contains(message), "{errors}");
    }
    Ok(())
}
