//! Storage that fails for good is reported to the server's owner.
//!
//! Regression (fault trials, seeds 1013 and 1021 of `silt bench trials --seed 1000`): a full
//! disk made fjall poison the kv store (a failed journal write); from then on every write of a
//! primary-key table failed with a kv storage error, which clients retry, so writes stayed
//! unanswered long after the disk had room again. A log tablet after a failed fsync is in the
//! same state. Only a new process recovers (recovery at open rebuilds the kv state from the
//! changelog), so the server now reports the failure and `silt up` stops on it.
//!
//! Found on the way: after a failed changelog fsync, the retry of that PutKv was acknowledged
//! as a duplicate (the writer state remembered the batch as written) although its durability
//! was unknown; a failed tablet now refuses the writer check too.

use std::time::Duration;

use crate::idempotence_tests::{create_pk_table, put};
use crate::storage::durability;
use crate::test_server::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_failure_is_reported_to_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let table_id = create_pk_table(&server).await;
    assert_eq!(put(&server, table_id, 100, 0, "a").await, (0, 1));
    let failed = tokio::time::timeout(Duration::from_millis(200), server.storage_failed()).await;
    assert!(failed.is_err(), "healthy storage reports nothing");

    // The changelog's fsync fails: the log tablet refuses appends until recovery runs.
    durability::fail_syncs_under(dir.path(), true);
    assert_ne!(put(&server, table_id, 100, 1, "b").await.0, 0);
    durability::fail_syncs_under(dir.path(), false);
    let (code, _) = put(&server, table_id, 100, 1, "b").await;
    assert_ne!(
        code, 0,
        "the retry of a batch whose fsync failed is not acknowledged as a duplicate"
    );

    let reason = tokio::time::timeout(Duration::from_secs(5), server.storage_failed())
        .await
        .expect("the failure is reported");
    assert!(
        reason.contains("refuses appends") && reason.contains("fsync"),
        "the reason names the cause: {reason}"
    );
}
