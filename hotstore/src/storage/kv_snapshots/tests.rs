use super::*;

fn config() -> WriterConfig {
    WriterConfig {
        table_bytes_target: 4096,
        block_bytes_target: 256,
    }
}

fn rows(n: u32, tag: &str) -> Vec<(Bytes, Bytes)> {
    (0..n)
        .map(|i| {
            let value = format!("{tag}-{i}");
            (
                Bytes::from(i.to_be_bytes().to_vec()),
                Bytes::from(value.into_bytes()),
            )
        })
        .collect()
}

/// The one helper: writes `rows` as the next snapshot of `snapshots` at `log_offset`.
fn write(
    snapshots: &BucketSnapshots,
    log_offset: i64,
    rows: &[(Bytes, Bytes)],
) -> Result<Arc<KvSnapshot>> {
    let turn = snapshots.writing_turn();
    snapshots.write(&turn, log_offset, rows.iter().cloned().map(Ok), config())
}

fn as_vecs(rows: &[(Bytes, Bytes)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

#[test]
fn snapshots_are_published_with_increasing_ids_that_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = BucketSnapshots::open(dir.path()).unwrap();
    assert_eq!(snapshots.latest(), None);
    let first = write(&snapshots, 10, &rows(500, "a")).unwrap();
    let second = write(&snapshots, 25, &rows(300, "b")).unwrap();
    assert_eq!((first.id, second.id), (0, 1));
    assert_eq!(second.dir, dir.path().join("snap-1"));
    assert_eq!((second.log_offset, second.rows), (25, 300));
    assert!(
        second
            .files
            .iter()
            .filter(|f| f.name.ends_with(".sst"))
            .count()
            > 1
    );
    assert_eq!(read_entries(&second).unwrap(), as_vecs(&rows(300, "b")));
    drop(snapshots);
    let reopened = BucketSnapshots::open(dir.path()).unwrap();
    assert_eq!(reopened.ids(), [0, 1]);
    assert_eq!(reopened.latest().as_deref(), Some(&*second));
    assert_eq!(
        write(&reopened, 25, &[]).unwrap().id,
        2,
        "the next id is above every published one"
    );
    assert_eq!(
        reopened.latest().unwrap().rows,
        0,
        "an empty snapshot is a snapshot"
    );
}

/// What a crash leaves is never published: a snapshot being written, one being deleted, and
/// a published one whose record or files were damaged are all removed at open.
#[test]
fn what_a_crash_leaves_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = BucketSnapshots::open(dir.path()).unwrap();
    for offset in [1, 2, 3] {
        write(&snapshots, offset, &rows(50, "x")).unwrap();
    }
    drop(snapshots);
    let path = |name: &str| dir.path().join(name);
    std::fs::create_dir(path(".tmp-snap-3")).unwrap();
    std::fs::write(path(".tmp-snap-3/000002.sst"), b"half a table").unwrap();
    std::fs::create_dir(path(".deleting-snap-7")).unwrap();
    std::fs::write(path("stray"), b"?").unwrap();
    let record = std::fs::read(path("snap-1/SILT-SNAPSHOT")).unwrap();
    std::fs::write(path("snap-1/SILT-SNAPSHOT"), &record[..record.len() - 1]).unwrap();
    let table = path("snap-2/000002.sst");
    std::fs::write(
        &table,
        [std::fs::read(&table).unwrap(), b"x".to_vec()].concat(),
    )
    .unwrap();
    let reopened = BucketSnapshots::open(dir.path()).unwrap();
    assert_eq!(reopened.ids(), [0]);
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["snap-0"]);
}

#[test]
fn retain_keeps_the_newest_and_those_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = BucketSnapshots::open(dir.path()).unwrap();
    for offset in 0..5 {
        write(&snapshots, offset, &rows(3, "r")).unwrap();
    }
    assert_eq!(snapshots.retain(2, |id| id == 1).unwrap(), [0, 2]);
    assert_eq!(snapshots.ids(), [1, 3, 4]);
    assert!(!dir.path().join("snap-0").exists());
    assert_eq!(
        snapshots.retain(0, |_| false).unwrap(),
        [1, 3],
        "the latest always stays"
    );
    assert_eq!(snapshots.ids(), [4]);
}

/// A failed fsync (or a failed read of the kv state) publishes nothing and leaves no files.
#[test]
fn a_failed_write_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = BucketSnapshots::open(dir.path()).unwrap();
    crate::storage::durability::fail_syncs_under(dir.path(), true);
    let failed = write(&snapshots, 5, &rows(10, "f"));
    crate::storage::durability::fail_syncs_under(dir.path(), false);
    assert!(
        failed
            .unwrap_err()
            .to_string()
            .contains("injected fsync failure")
    );
    let turn = snapshots.writing_turn();
    let broken = rows(10, "g")
        .into_iter()
        .map(Ok)
        .chain([Err(Error::CorruptKv {
            path: dir.path().into(),
            reason: "a read failed".into(),
        })]);
    assert!(snapshots.write(&turn, 6, broken, config()).is_err());
    drop(turn);
    assert_eq!(snapshots.latest(), None);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no files left"
    );
    assert_eq!(write(&snapshots, 7, &rows(1, "h")).unwrap().log_offset, 7);
}

#[test]
fn a_log_offset_never_goes_back_and_a_dropped_bucket_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket-0");
    let snapshots = BucketSnapshots::open(&bucket).unwrap();
    write(&snapshots, 9, &rows(1, "a")).unwrap();
    assert!(matches!(
        write(&snapshots, 8, &[]),
        Err(Error::SnapshotRefused { .. })
    ));
    snapshots.drop_all().unwrap();
    assert!(!bucket.exists());
    assert!(matches!(
        write(&snapshots, 10, &[]),
        Err(Error::SnapshotRefused { .. })
    ));
    assert!(
        !bucket.exists(),
        "a dropped bucket's directory does not come back"
    );
    assert_eq!(snapshots.latest(), None);
}
