//! The official Apache Fluss Java client against silt's hotstore: the harness of
//! `integration-tests/java-client/`, built against fluss-client 1.0.0 and 0.9.1-incubating from
//! Maven Central, runs its scenarios against a hotstore started in-process on an ephemeral port:
//! `sanity` (DDL, log append and scan, upsert/delete/lookup, the PK changelog),
//! `three-batches` (issue 12: acknowledged batches of one writer must all be stored),
//! `limit-scan` (`Scan.limit(n).createBatchScanner` on a log and a PK table) and `kv-snapshots`
//! (`getLatestKvSnapshots`; each bucket's snapshot read by the client's own snapshot scanner,
//! `createBatchScanner(bucket, snapshotId)`, which opens silt's files with the RocksDB the
//! client links, frocksdbjni 6.20.3: the oracle of silt's RocksDB writer; and the full read
//! Flink's PK source makes from the snapshots and the changelog after them) and
//! `prefix-lookup-alter-table` (`lookupBy(bucket key)`, `Admin.alterTable`) and `indexed-log`
//! (a table in the INDEXED log format, whose IndexedRow batches the server stores and serves as
//! written) and `fluss-1-keys` (the RPCs Fluss 1.0 added that the 1.0 client sends:
//! AlterDatabase, GetClusterHealth and ScanKv, which must have run with fluss-client 1.0.0). Each
//! client version that cannot run here (no java, javac or mvn, or the jars cannot be fetched)
//! is reported as `SKIPPED: java_client: ...`.
//!
//! `java_client_against_real_fluss` (ignored by default: it starts a real cluster, three more
//! JVMs) runs the same scenarios against Apache Fluss 0.9.1, to show that they hold there; set
//! `SILT_FLUSS_REAL_BOOTSTRAP=host:port` to use a cluster that is already running.

use anyhow::Result;
use silt_testkit::hotstore;
use silt_testkit::java_client::{self, CLIENT_VERSIONS, Ran};
use silt_testkit::real_fluss::{RealFluss, Started};
use silt_testkit::skip;

/// What each run executes, in one JVM per client version.
const SCENARIOS: [&str; 7] = [
    "sanity",
    "three-batches",
    "limit-scan",
    "kv-snapshots",
    "prefix-lookup-alter-table",
    "indexed-log",
    "fluss-1-keys",
];

/// How often the hot store under test takes kv snapshots (and real Fluss, as
/// `kv.snapshot.interval`): `kv-snapshots` waits for one that covers its writes.
const KV_SNAPSHOT_INTERVAL_MS: u64 = 500;

/// Lines of a failed run's stderr (stack traces, the client's warnings) kept in the message.
const STDERR_LINES_MAX: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_against_hotstore() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // `kv-snapshots` waits for a snapshot covering its writes: take them twice a second.
    let server = hotstore::start_with(dir.path(), |config| {
        config.kv_snapshot_interval_ms = KV_SNAPSHOT_INTERVAL_MS
    })
    .await?;
    let outcome = run_every_version("java_client", server.local_addr().to_string()).await;
    server.shutdown().await?;
    outcome
}

/// Starts a real Apache Fluss cluster (three more JVMs), so it runs only when asked:
/// `SILTTEST_JAVA_REAL_FLUSS=1`, or `SILT_FLUSS_REAL_BOOTSTRAP` naming a running cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_against_real_fluss() -> Result<()> {
    const TEST: &str = "java_client_against_real_fluss";
    let asked = std::env::var_os("SILTTEST_JAVA_REAL_FLUSS").is_some();
    let (bootstrap, _cluster) = match std::env::var("SILT_FLUSS_REAL_BOOTSTRAP") {
        Ok(bootstrap) => (bootstrap, None),
        Err(_) if !asked => {
            return skip(
                TEST,
                "it starts a real Apache Fluss cluster (three more JVMs); set SILTTEST_JAVA_REAL_FLUSS=1 to run it",
            );
        }
        Err(_) => match RealFluss::start_with_conf(
            "java-client",
            &format!("kv.snapshot.interval: {KV_SNAPSHOT_INTERVAL_MS}ms"),
        )? {
            Started::Running(cluster) => (cluster.bootstrap.clone(), Some(cluster)),
            Started::Skipped(reason) => return skip(TEST, &reason),
        },
    };
    run_every_version(TEST, bootstrap).await
}

/// Runs [`SCENARIOS`] with every client version against `bootstrap`. A version that cannot run
/// here is reported as skipped; a failed scenario of any version fails the test.
async fn run_every_version(test: &str, bootstrap: String) -> Result<()> {
    let mut failures = Vec::new();
    for version in CLIENT_VERSIONS {
        let endpoint = bootstrap.clone();
        let ran =
            tokio::task::spawn_blocking(move || java_client::run(version, &endpoint, &SCENARIOS))
                .await??;
        let run = match ran {
            Ran::Skipped(reason) => {
                skip(test, &format!("fluss-client {version}: {reason}"))?;
                continue;
            }
            Ran::Finished(run) => run,
        };
        println!(
            "fluss-client {version} against {bootstrap}, {:.1} s:\n{}{}",
            run.duration.as_secs_f64(),
            run.stdout,
            run.stderr
        );
        // The Fluss 1.0 RPCs exist only in the 1.0 client: there they must have run.
        let fluss_one_keys_ran = run
            .line_of("fluss-1-keys")
            .is_some_and(|line| line.contains("ScanKv read"));
        if version.starts_with("1.") && !fluss_one_keys_ran {
            failures.push(format!(
                "fluss-client {version} did not run fluss-1-keys:\n{}",
                run.stdout
            ));
        }
        if !run.all_ok(&SCENARIOS) {
            let stderr: Vec<&str> = run.stderr.lines().collect();
            let tail = &stderr[stderr.len().saturating_sub(STDERR_LINES_MAX)..];
            failures.push(format!(
                "fluss-client {version} ({}):\n{}stderr (last {} lines):\n{}",
                run.status,
                run.stdout,
                tail.len(),
                tail.join("\n")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the Java client failed against {bootstrap}:\n{}",
        failures.join("\n")
    );
    Ok(())
}
