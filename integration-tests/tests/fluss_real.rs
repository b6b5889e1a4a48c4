//! The client scenario of `common::scenario` against a real single-node Apache Fluss cluster
//! (Maven Central's `fluss-server`), started by `fluss-real/start.sh`. Skips, saying so, where
//! Java, Maven or the jars are unavailable. Set `SILT_FLUSS_REAL_BOOTSTRAP=host:port` to run the
//! scenario against a cluster that is already running instead. The merge-engine scenario of
//! `merge_engines/` (issue 16) and the partition scenario of `common::partitions` (issue 17)
//! run against both servers after the main one.

mod common;
mod merge_engines;

use std::io::Write;

use anyhow::Result;
use common::scenario::{self, ScenarioRecord, UserRow};
use common::{partitions, raw_fluss};
use silt_testkit::differential::assert_all_explained;
use silt_testkit::hotstore;
use silt_testkit::real_fluss::{RealFluss, Started};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_against_real_fluss() -> Result<()> {
    let (bootstrap, _cluster) = match std::env::var("SILT_FLUSS_REAL_BOOTSTRAP") {
        Ok(bootstrap) => (bootstrap, None),
        Err(_) => match RealFluss::start("scenario")? {
            Started::Running(cluster) => {
                eprintln!(
                    "real Fluss started in {:?} at {}",
                    cluster.start_duration, cluster.bootstrap
                );
                (cluster.bootstrap.clone(), Some(cluster))
            }
            Started::Skipped(reason) => {
                // Straight to the stderr handle: the test harness captures println!/eprintln!,
                // and a skip must be visible without --nocapture.
                let line = format!("SKIPPED: scenario_against_real_fluss: {reason}\n");
                std::io::stderr().write_all(line.as_bytes())?;
                return Ok(());
            }
        },
    };

    let record = scenario::run_scenario(&bootstrap).await?;
    println!("{record:#?}");
    check_record(&record);
    scenario::check_limit_scans_and_kv_snapshots(&record)?;
    assert!(
        scenario::differences(&record, &record).is_empty(),
        "a record agrees with itself"
    );

    // The same scenario against silt's hotstore; every difference is printed, and those not
    // explained in fluss-real/OBSERVED.md fail the test.
    let silt =
        on_a_fresh_hotstore(|bootstrap| async move { scenario::run_scenario(&bootstrap).await })
            .await?;
    let differences = scenario::differences(&silt, &record);
    assert_all_explained("silt vs real Fluss", &differences)?;

    compare_merge_engines(&bootstrap).await?;
    compare_partitions(&bootstrap).await?;

    // Writer idempotence around a restart, with raw batches no client sends on purpose.
    let Some(cluster) = _cluster else {
        eprintln!("writer scenario: skipped, it needs a cluster this test started (to restart it)");
        return Ok(());
    };
    let (table_id, before) =
        raw_fluss::writer_scenario_before_restart(&bootstrap, &cluster.tablet).await?;
    cluster.restart_tablet()?;
    let fluss_writers =
        raw_fluss::writer_scenario_after_restart(&cluster.tablet, table_id, before).await?;
    eprintln!("real Fluss, writer scenario: {fluss_writers:#?}");
    let silt_writers = silt_writer_scenario().await?;
    eprintln!("silt, writer scenario: {silt_writers:#?}");
    check_writer_record(&fluss_writers);
    check_writer_record(&silt_writers);
    Ok(())
}

/// The merge-engine scenario (issue 16) against the real cluster and against silt: both must
/// keep what Fluss's merge engines keep, and every difference not explained in
/// fluss-real/OBSERVED.md fails the test.
async fn compare_merge_engines(bootstrap: &str) -> Result<()> {
    let fluss = merge_engines::run(bootstrap).await?;
    eprintln!("real Fluss, merge engines: {fluss:#?}");
    merge_engines::check(&fluss);
    let silt = on_a_fresh_hotstore(|bootstrap| async move { merge_engines::run(&bootstrap).await })
        .await?;
    merge_engines::check(&silt);
    let differences = merge_engines::differences(&silt, &fluss);
    assert_all_explained("silt vs real Fluss, merge engines", &differences)
}

/// The partition scenario (issue 17) against the real cluster and against silt: both must
/// pass its checks, and every difference not listed in `partitions::KNOWN_DIFFERENCES` fails
/// the test.
async fn compare_partitions(bootstrap: &str) -> Result<()> {
    let fluss = partitions::run(&hotstore::connect_to(bootstrap).await?).await?;
    eprintln!("real Fluss, partitions: {fluss:#?}");
    let silt = on_a_fresh_hotstore(|bootstrap| async move {
        partitions::run(&hotstore::connect_to(&bootstrap).await?).await
    })
    .await?;
    partitions::check(&silt)?;
    let differences = partitions::differences(&silt, &fluss);
    assert_all_explained("silt vs real Fluss, partitions", &differences)
}

/// Runs `scenario` against a hot store of its own (given its address), in a scratch directory,
/// and shuts the store down before answering, whether the scenario passed or failed.
async fn on_a_fresh_hotstore<T, F>(scenario: impl FnOnce(String) -> F) -> Result<T>
where
    F: Future<Output = Result<T>>,
{
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    let outcome = scenario(server.local_addr().to_string()).await;
    server.shutdown().await?;
    outcome
}

/// The writer scenario against silt, restarted on the same port and data directory.
async fn silt_writer_scenario() -> Result<raw_fluss::WriterRecord> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    let addr = server.local_addr();
    let (table_id, before) =
        raw_fluss::writer_scenario_before_restart(&addr.to_string(), &addr.to_string()).await?;
    server.shutdown().await?;
    let server = hotstore::start_with(dir.path(), |config| config.bind_addr = addr).await?;
    let record =
        raw_fluss::writer_scenario_after_restart(&addr.to_string(), table_id, before).await;
    server.shutdown().await?;
    record
}

/// What Fluss's writer rule (apache/fluss `WriterAppendInfo`) gives; both servers must pass.
fn check_writer_record(record: &raw_fluss::WriterRecord) {
    use raw_fluss::Produced;
    let ok = |base| Produced {
        error_code: 0,
        base_offset: Some(base),
    };
    assert_eq!(
        record.unknown_writer_at_sequence_1.error_code, 31,
        "an unknown writer must start at sequence 0: OutOfOrderSequence"
    );
    assert_eq!(record.sequence_0, ok(0));
    assert_eq!(record.sequence_1, ok(2));
    assert_eq!(
        record.last_batch_retried_after_restart,
        ok(2),
        "a retry of the last batch after a restart is a duplicate with its original offset"
    );
    assert_eq!(record.sequence_2_after_restart, ok(4));
    // older_batch_retried_after_restart is printed, not asserted: see fluss-real/OBSERVED.md.
}

/// What the issue states a Fluss server does; the real server must pass it, and so must silt.
fn check_record(record: &ScenarioRecord) {
    scenario::check_changelog(record);
    assert_eq!(
        record.pk_offsets.latest[&0], 5,
        "latest offset of the PK table's bucket after the sequence"
    );
    let alice2 = |score| {
        Some(UserRow {
            id: 1,
            name: Some("alice2".into()),
            score: Some(score),
        })
    };
    assert_eq!(record.lookups["after_sequence/1"], alice2(11));
    assert_eq!(record.lookups["after_sequence/2"], None, "deleted key");
    assert_eq!(
        record.lookups["after_sequence/3"], None,
        "never written key"
    );
    assert_eq!(
        record.lookups["after_partial_update/1"],
        alice2(99),
        "partial update keeps name"
    );
    let kinds: Vec<&str> = record
        .partial_update_changelog
        .iter()
        .map(|e| e.change_type.as_str())
        .collect();
    assert_eq!(kinds, ["-U", "+U"], "partial update changelog");
    let offsets: Vec<i64> = record
        .partial_update_changelog
        .iter()
        .map(|e| e.offset)
        .collect();
    assert_eq!(
        offsets,
        [0, 1],
        "partial update offsets, relative to the log end before it"
    );
    // Not asserted: `unchanged_upsert_changelog`. Real Fluss 0.9.1 appends -U/+U for an upsert
    // that changes nothing; silt's design appends nothing (see fluss-real/OBSERVED.md).

    scenario::check_ddl_errors(record);
    scenario::check_log_scan(record);
}
