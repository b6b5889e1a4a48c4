//! Kv snapshots as a Fluss client reads them: GetLatestKvSnapshots, GetKvSnapshotMetadata,
//! the listed files copied into a directory of the reader's own under their RocksDB names and
//! opened (with silt's reader of the RocksDB directories it writes; the Java client's own
//! RocksDB is the oracle in `java-client/`). And the full read Flink's default primary-key
//! source makes of a table of [`crate::rows`] users: each bucket's snapshot rows, then its
//! changelog from the snapshot's log offset (from the earliest offset without a snapshot),
//! folded by key.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use fluss::client::FlussConnection;
use fluss::metadata::{KvFormat, TablePath};
use fluss::record::ChangeType;
use fluss::row::RowDecoderFactory;
use fluss::rpc::message::OffsetSpec;
use silt_hotstore::storage::rocksdb_snapshot::SnapshotReader;

use crate::hotstore::DEADLINE;
use crate::rows::{UserRow, read_user};

/// One bucket's snapshot as a client read it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub snapshot_id: i64,
    /// The next changelog offset after the snapshot.
    pub log_offset: i64,
    /// The RocksDB names of its files.
    pub file_names: Vec<String>,
    /// Its values in key order: schema id (2 bytes, little endian), then the row.
    pub values: Vec<Vec<u8>>,
}

/// Every bucket of `path` with its latest snapshot (`None` for one without), read as a client
/// reads it.
pub async fn latest(
    connection: &FlussConnection,
    path: &TablePath,
) -> Result<Vec<(i32, Option<Snapshot>)>> {
    let admin = connection.get_admin()?;
    let latest = admin.get_latest_kv_snapshots(path, None).await?;
    let mut buckets = Vec::new();
    for bucket in &latest.latest_snapshots {
        let snapshot = match (bucket.snapshot_id, bucket.log_offset) {
            (None, None) => None,
            (Some(id), Some(log_offset)) => Some(
                read(
                    connection,
                    latest.table_id,
                    bucket.bucket_id,
                    id,
                    log_offset,
                )
                .await?,
            ),
            other => bail!(
                "bucket {}: a snapshot id and log offset come together: {other:?}",
                bucket.bucket_id
            ),
        };
        buckets.push((bucket.bucket_id, snapshot));
    }
    Ok(buckets)
}

async fn read(
    connection: &FlussConnection,
    table_id: i64,
    bucket: i32,
    id: i64,
    log_offset: i64,
) -> Result<Snapshot> {
    let admin = connection.get_admin()?;
    let metadata = admin
        .get_kv_snapshot_metadata(table_id, None, bucket, id)
        .await?;
    ensure!(
        metadata.log_offset == log_offset,
        "bucket {bucket} snapshot {id}: metadata says log offset {}, GetLatestKvSnapshots {log_offset}",
        metadata.log_offset
    );
    let copy = tempfile::tempdir()?;
    let mut file_names = Vec::new();
    for file in &metadata.snapshot_files {
        ensure!(
            std::path::Path::new(&file.remote_path).is_absolute(),
            "not an absolute path: {file:?}"
        );
        std::fs::copy(&file.remote_path, copy.path().join(&file.local_file_name))
            .with_context(|| format!("copy {}", file.remote_path))?;
        file_names.push(file.local_file_name.clone());
    }
    let reader = SnapshotReader::open(copy.path())?;
    let values = reader
        .entries()
        .map(|entry| entry.map(|(_, value)| value))
        .collect::<Result<_, _>>()?;
    Ok(Snapshot {
        snapshot_id: id,
        log_offset,
        file_names,
        values,
    })
}

/// The user rows of a snapshot of a [`crate::rows::user_table`] (kv format COMPACTED), each
/// value's schema id checked to be `schema_id`.
pub fn users_of(snapshot: &Snapshot, schema_id: i16) -> Result<Vec<UserRow>> {
    let row_type = crate::rows::user_schema()?.row_type().clone();
    let decoder = RowDecoderFactory::create(KvFormat::COMPACTED, row_type)?;
    snapshot
        .values
        .iter()
        .map(|value| {
            let (id, row) = value
                .split_at_checked(2)
                .context("a value shorter than its schema id")?;
            ensure!(
                id == schema_id.to_le_bytes(),
                "schema id {id:?}, expected {schema_id}"
            );
            read_user(&decoder.decode(row))
        })
        .collect()
}

/// What Flink's full read of a user table shows once folded: per bucket, its snapshot's rows
/// (schema 1), then its changelog from the snapshot's log offset (from the earliest offset
/// without one) up to the latest offset. Fails if a snapshot lies below the changelog's start.
pub async fn full_read_users(
    connection: &FlussConnection,
    path: &TablePath,
) -> Result<BTreeMap<i32, UserRow>> {
    let admin = connection.get_admin()?;
    let mut state = BTreeMap::new();
    let mut starts = BTreeMap::new();
    for (bucket, snapshot) in latest(connection, path).await? {
        let start = match snapshot {
            Some(snapshot) => {
                for user in users_of(&snapshot, 1)? {
                    state.insert(user.id, user);
                }
                snapshot.log_offset
            }
            None => 0,
        };
        starts.insert(bucket, start);
    }
    let buckets: Vec<i32> = starts.keys().copied().collect();
    let earliest = admin
        .list_offsets(path, &buckets, OffsetSpec::Earliest)
        .await?;
    let ends = admin
        .list_offsets(path, &buckets, OffsetSpec::Latest)
        .await?;
    for (bucket, start) in &starts {
        ensure!(
            earliest[bucket] <= *start,
            "bucket {bucket}: the changelog starts at {}, after {start}",
            earliest[bucket]
        );
    }
    fold_changelog(connection, path, &starts, &ends, &mut state).await?;
    Ok(state)
}

/// Folds each bucket's changelog from `starts` to `ends` into `state`.
async fn fold_changelog(
    connection: &FlussConnection,
    path: &TablePath,
    starts: &BTreeMap<i32, i64>,
    ends: &std::collections::HashMap<i32, i64>,
    state: &mut BTreeMap<i32, UserRow>,
) -> Result<()> {
    let table = connection.get_table(path).await?;
    let scanner = table.new_scan().create_log_scanner()?;
    let mut next = starts.clone();
    for (bucket, start) in starts {
        scanner.subscribe(*bucket, *start).await?;
    }
    let deadline = Instant::now() + DEADLINE;
    while next.iter().any(|(bucket, at)| *at < ends[bucket]) {
        ensure!(
            Instant::now() < deadline,
            "the changelog of {path} read up to {next:?} of {ends:?}"
        );
        let polled = scanner.poll(Duration::from_millis(200)).await?;
        for (bucket, records) in polled.into_records_by_buckets() {
            for record in records {
                let user = read_user(record.row())?;
                match record.change_type() {
                    ChangeType::Insert | ChangeType::UpdateAfter => {
                        state.insert(user.id, user);
                    }
                    ChangeType::Delete => {
                        state.remove(&user.id);
                    }
                    _ => {}
                }
                next.insert(bucket.bucket_id(), record.offset() + 1);
            }
        }
    }
    Ok(())
}
