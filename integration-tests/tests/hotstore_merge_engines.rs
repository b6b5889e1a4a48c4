//! Merge engines through the official fluss-rs client against silt's hotstore (issue 16):
//! `first_row` keeps the first row of a key, `versioned` the row of the highest version,
//! `table.delete.behavior` ignores or refuses deletes, and tables silt cannot honour are refused
//! at CreateTable. Before, silt accepted these properties and treated every such table as
//! last-write-wins, losing the rows its user meant to keep.

mod merge_engines;

use anyhow::Result;
use silt_testkit::hotstore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_engines_keep_what_fluss_keeps() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    let record = merge_engines::run(&server.local_addr().to_string()).await;
    server.shutdown().await?;
    let record = record?;
    println!("{record:#?}");
    merge_engines::check(&record);
    // What silt answers where Fluss 0.9.1 differs (see fluss-real/OBSERVED.md).
    assert_eq!(
        record.partial_updates["first_row"], "35",
        "InvalidTargetColumn"
    );
    assert_eq!(
        record.creates["aggregation"], "39",
        "aggregation is refused"
    );
    assert_eq!(
        record.cases["first_row"].offsets,
        [0, 1, 2],
        "no offset spent on ignored writes"
    );
    Ok(())
}
