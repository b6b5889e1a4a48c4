//! The shared client scenario of `common::scenario` (the one the real-Fluss comparison runs)
//! against silt's hotstore, checked against what the issue states a Fluss server does.

mod common;

use anyhow::Result;
use common::scenario::{self, Outcome};
use silt_testkit::hotstore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_against_hotstore() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start(dir.path()).await?;
    let record = scenario::run_scenario(&server.local_addr().to_string()).await?;
    println!("{record:#?}");

    let kinds: Vec<&str> = record
        .changelog
        .iter()
        .map(|e| e.change_type.as_str())
        .collect();
    assert_eq!(kinds, ["+I", "+I", "-U", "+U", "-D"]);
    let offsets: Vec<i64> = record.changelog.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4]);
    let api = |name: &str| match &record.errors[name] {
        Outcome::Api { code, .. } => Some(*code),
        _ => None,
    };
    assert_eq!(api("create_database/duplicate"), Some(6));
    assert_eq!(api("create_table/duplicate"), Some(8));
    assert_eq!(api("get_table_info/unknown_table"), Some(7));
    assert_eq!(record.errors["create_table/duplicate_ignored"], Outcome::Ok);
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
    let rows = 2 * scenario::LOG_ROWS_PER_BATCH as usize;
    assert_eq!(
        record.log.scanned.values().map(Vec::len).sum::<usize>(),
        rows
    );
    for (bucket, scanned) in &record.log.scanned {
        let offsets: Vec<i64> = scanned.iter().map(|(offset, _)| *offset).collect();
        assert_eq!(
            offsets,
            (0..scanned.len() as i64).collect::<Vec<_>>(),
            "bucket {bucket}"
        );
        assert_eq!(record.log.offsets.latest[bucket], scanned.len() as i64);
    }
    assert_eq!(record.log.projected_columns, ["id", "amount"]);
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
        assert_eq!(api(change), Some(56), "{change}");
    }
    server.shutdown().await?;
    Ok(())
}
