//! A table's changelog read from a Fluss endpoint (silt's hot store or a real cluster) through
//! the official client, from the earliest offset up to the high watermarks of when the read
//! starts. A read gives up after its timeout naming the buckets it had not finished.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::TablePath;
use fluss::record::ScanRecord;
use fluss::rpc::message::OffsetSpec;

/// One changelog record: where it is, its change type (`ChangeType::to_byte_value`) and what
/// the reader's `project` made of its row.
#[derive(Debug, Clone, PartialEq)]
pub struct Change<T> {
    pub bucket: i32,
    pub offset: i64,
    pub change_type: u8,
    pub row: T,
}

/// Every record of buckets `0..buckets` of `path` below their current high watermarks, in the
/// order the scanner answers (per bucket, in offset order).
pub async fn read<T>(
    connection: &FlussConnection,
    path: &TablePath,
    buckets: i32,
    timeout: Duration,
    project: impl Fn(&ScanRecord) -> Result<T>,
) -> Result<Vec<Change<T>>> {
    let ids: Vec<i32> = (0..buckets).collect();
    let high_watermarks = connection
        .get_admin()?
        .list_offsets(path, &ids, OffsetSpec::Latest)
        .await?;
    let scanner = connection
        .get_table(path)
        .await?
        .new_scan()
        .create_log_scanner()?;
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    for (bucket, end) in high_watermarks {
        if end > 0 {
            scanner.subscribe(bucket, EARLIEST_OFFSET).await?;
            remaining.insert(bucket, end);
        }
    }
    let mut changes = Vec::new();
    let deadline = Instant::now() + timeout;
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            bail!(
                "reading {path} up to its high watermarks timed out; still to read: {remaining:?}"
            );
        }
        for (bucket, records) in scanner
            .poll(Duration::from_millis(200))
            .await?
            .into_records_by_buckets()
        {
            let bucket = bucket.bucket_id();
            for record in records {
                let Some(&end) = remaining.get(&bucket) else {
                    continue;
                };
                if record.offset() < end {
                    changes.push(Change {
                        bucket,
                        offset: record.offset(),
                        change_type: record.change_type().to_byte_value(),
                        row: project(&record)?,
                    });
                }
                if record.offset() + 1 >= end {
                    remaining.remove(&bucket);
                }
            }
        }
    }
    Ok(changes)
}

/// The latest `(key, value)` per key of a primary-key table's changes, deletes removed: the
/// image a lake must hold. `row` is `[key, value, ..]`; changes apply in bucket and offset
/// order (the order within a bucket is the table's order for each key).
pub fn latest_by_key(changes: impl IntoIterator<Item = Change<Vec<i64>>>) -> BTreeMap<i64, i64> {
    let mut changes: Vec<_> = changes.into_iter().collect();
    changes.sort_by_key(|c| (c.bucket, c.offset));
    let mut latest = BTreeMap::new();
    for change in changes {
        // Fluss change types: 1 insert, 2 update-before, 3 update-after, 4 delete.
        match change.change_type {
            1 | 3 => {
                latest.insert(change.row[0], change.row[1]);
            }
            4 => {
                latest.remove(&change.row[0]);
            }
            _ => {}
        }
    }
    latest
}
