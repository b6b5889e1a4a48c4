//! The shared client scenario of `common::scenario` (the one the real-Fluss comparison runs)
//! against silt's hotstore, checked against what the issue states a Fluss server does.

mod common;

use anyhow::Result;
use common::scenario;
use silt_testkit::hotstore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_against_hotstore() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    let record = scenario::run_scenario(&server.local_addr().to_string()).await?;
    println!("{record:#?}");

    scenario::check_changelog(&record);
    scenario::check_ddl_errors(&record);
    // GetTableStats: a log bucket's rows are those scanned from it; the PK table has one
    // live key (1) after the sequence and the partial update.
    let scanned_per_bucket: Vec<scenario::BucketRows> = (0..scenario::LOG_BUCKETS)
        .map(|b| {
            let n = record.log.scanned.get(&b).map_or(0, Vec::len);
            (b, Some(n as i64), None)
        })
        .collect();
    assert_eq!(
        record.table_stats[scenario::LOG_TABLE],
        Ok(scanned_per_bucket)
    );
    let pk_rows: i64 = record.table_stats[scenario::PK_TABLE]
        .as_ref()
        .expect("GetTableStats of the PK table")
        .iter()
        .map(|(_, rows, error)| {
            assert_eq!(*error, None);
            rows.expect("a row count")
        })
        .sum();
    assert_eq!(pk_rows, 1);
    scenario::check_log_scan(&record);
    scenario::check_limit_scans_and_kv_snapshots(&record)?;
    // ADD COLUMN: schema 2 has `note` with the next column id; key 1, written under schema 1,
    // reads it as null; what Fluss refuses to change is INVALID_ALTER_TABLE (56).
    let added = &record.added_column;
    assert_eq!(added.schema_id, 2);
    assert_eq!(added.first_schema, ["id", "name", "score"]);
    let second: Vec<(&str, i32)> = added
        .second_schema
        .iter()
        .map(|(name, id)| (name.as_str(), *id))
        .collect();
    assert_eq!(second, [("id", 0), ("name", 1), ("score", 2), ("note", 3)]);
    assert_eq!(added.old_row, Some((4, true)));
    for change in [
        "alter_table/add_not_null_column",
        "alter_table/add_existing_column",
        "alter_table/drop_column",
    ] {
        assert_eq!(scenario::api_code(&record, change), Some(56), "{change}");
    }
    server.shutdown().await?;
    Ok(())
}
