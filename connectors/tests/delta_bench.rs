//! PK merge growth: the time of one tiering commit of 10k changed keys (spread over all keys
//! and buckets) into a lake of 1M rows and into one of 10M rows, with deletion vectors and the
//! key index (the default), and with the copy-on-write MERGE (`SILTTEST_BENCH_COW=1`). Each
//! size loads the table, runs one commit that builds the key index from the lake (reported
//! apart), then times `SILTTEST_BENCH_COMMITS` (5) commits of fresh random keys and reports
//! their median. A benchmark: it runs only with
//! `SILTTEST_BENCH=1 cargo test --release -p silt-connectors --test delta_bench -- --nocapture`
//! (`SILTTEST_BENCH_ROWS=1000000,10000000` and `SILTTEST_BENCH_CHANGED=10000` change the sizes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Int8Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::SchemaRef;
use deltalake::writer::{DeltaWriter as _, RecordBatchWriter};
use parquet::arrow::ArrowWriter;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::{BucketKey, ChangeType};
use silt_connectors::delta::{BucketRange, Committable, DeltaSinkConfig, LakeTable, TableKind};
use silt_testkit::lake::{key_value_schema, stage_parquet};

const BUCKETS: i64 = 8;

/// Rows of `keys` (one bucket), with offsets from `first_offset`, in the lake's schema plus an
/// optional change type column.
fn rows(
    schema: &SchemaRef,
    bucket: i32,
    keys: &[i64],
    first_offset: i64,
    change: Option<ChangeType>,
) -> RecordBatch {
    let offsets = first_offset..first_offset + keys.len() as i64;
    let mut columns: Vec<Arc<dyn arrow::array::Array>> = vec![
        Arc::new(Int64Array::from_iter_values(keys.iter().copied())),
        Arc::new(StringArray::from_iter_values(
            offsets.clone().map(|o| format!("value-{o}")),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(offsets.clone())),
        Arc::new(Int32Array::from_iter_values(keys.iter().map(|_| bucket))),
        Arc::new(Int64Array::from_iter_values(offsets.clone())),
        Arc::new(TimestampMicrosecondArray::from_iter_values(offsets).with_timezone("UTC")),
    ];
    if let Some(change) = change {
        columns.push(Arc::new(Int8Array::from_iter_values(
            keys.iter().map(|_| change as i8),
        )));
    }
    RecordBatch::try_new(schema.clone(), columns).unwrap()
}

/// What one size measured.
struct Measured {
    load_seconds: f64,
    /// The first commit after opening: it builds the key index from the lake.
    first_commit_seconds: f64,
    /// Median of the timed commits.
    commit_seconds: f64,
    files_removed: usize,
    files_added: usize,
}

/// Bulk-loads `total` keys (key % BUCKETS = bucket, sorted within each bucket) through the log
/// path into a table created by the primary-key sink, then commits `changed` random updated
/// keys `1 + commits` times.
async fn merge_time(total: i64, changed: usize, commits: usize, cow: bool) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("lake");
    let uri = uri.to_str().unwrap();
    let mut pk_config = DeltaSinkConfig::new(
        uri,
        "bench",
        TableKind::PrimaryKey {
            key_columns: vec!["k".into()],
        },
        key_value_schema(),
    );
    pk_config.deletion_vectors = !cow;
    pk_config.key_index_dir = Some(dir.path().join("key-index"));
    // Creates the table (with deletion vectors unless copy-on-write).
    let mut lake = LakeTable::open(Arc::new(pk_config)).await.unwrap();

    let started = Instant::now();
    let load_config = Arc::new(DeltaSinkConfig::new(
        uri,
        "bench",
        TableKind::Log,
        key_value_schema(),
    ));
    let mut loader = LakeTable::open(load_config.clone()).await.unwrap();
    let mut writer = RecordBatchWriter::for_table(loader.table())
        .unwrap()
        .with_target_file_size(load_config.target_file_bytes);
    let mut ends = BTreeMap::new();
    let mut committable = Committable {
        checkpoint_id: 1,
        writer: 0,
        adds: Vec::new(),
        staged: Vec::new(),
        buckets: BTreeMap::new(),
    };
    for b in 0..BUCKETS {
        let keys: Vec<i64> = (0..total).filter(|k| k % BUCKETS == b).collect();
        for (i, chunk) in keys.chunks(100_000).enumerate() {
            writer
                .write(rows(
                    loader.lake_schema(),
                    b as i32,
                    chunk,
                    (i * 100_000) as i64,
                    None,
                ))
                .await
                .unwrap();
        }
        ends.insert(b as i32, keys.len() as i64);
        committable.buckets.insert(
            BucketKey::table(b as i32),
            BucketRange {
                follows: Some(0),
                start: 0,
                end: keys.len() as i64,
                rows: keys.len() as u64,
            },
        );
    }
    committable.adds = writer.flush().await.unwrap();
    let plan = loader.plan(&[committable]).await.unwrap();
    loader.apply(&plan).await.unwrap();
    let load_seconds = started.elapsed().as_secs_f64();

    let mut rng = SmallRng::seed_from_u64(7);
    let mut times = Vec::new();
    let (mut files_removed, mut files_added) = (0, 0);
    for round in 0..=commits {
        let mut by_bucket: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        let mut picked = std::collections::BTreeSet::new();
        while picked.len() < changed {
            picked.insert(rng.random_range(0..total));
        }
        for k in picked {
            by_bucket.entry((k % BUCKETS) as i32).or_default().push(k);
        }
        let staged_schema = lake.staged_schema();
        let mut bytes = Vec::new();
        let mut parquet = ArrowWriter::try_new(&mut bytes, staged_schema.clone(), None).unwrap();
        let mut committable = Committable {
            checkpoint_id: 2 + round as u64,
            writer: 0,
            adds: Vec::new(),
            staged: Vec::new(),
            buckets: BTreeMap::new(),
        };
        for (&b, keys) in &by_bucket {
            let start = ends[&b];
            parquet
                .write(&rows(
                    &staged_schema,
                    b,
                    keys,
                    start,
                    Some(ChangeType::UpdateAfter),
                ))
                .unwrap();
            committable.buckets.insert(
                BucketKey::table(b),
                BucketRange {
                    follows: Some(start),
                    start,
                    end: start + keys.len() as i64,
                    rows: keys.len() as u64,
                },
            );
            ends.insert(b, start + keys.len() as i64);
        }
        parquet.close().unwrap();
        let path = stage_parquet(&lake, &format!("bench-{round}"), bytes)
            .await
            .unwrap();
        committable.staged.push(path);

        let started = Instant::now();
        let plan = lake.plan(&[committable]).await.unwrap();
        let commit = lake.apply(&plan).await.unwrap();
        times.push(started.elapsed().as_secs_f64());
        let log = std::fs::read_to_string(
            std::path::Path::new(uri).join(format!("_delta_log/{:020}.json", commit.delta_version)),
        )
        .unwrap();
        files_removed = log.lines().filter(|l| l.starts_with("{\"remove\"")).count();
        files_added = log.lines().filter(|l| l.starts_with("{\"add\"")).count();
    }
    let first_commit_seconds = times.remove(0);
    times.sort_by(f64::total_cmp);
    Measured {
        load_seconds,
        first_commit_seconds,
        commit_seconds: times[times.len() / 2],
        files_removed,
        files_added,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pk_merge_time_grows_with_the_table() {
    if std::env::var_os("SILTTEST_BENCH").is_none() {
        // A benchmark, not a check: it runs only when asked, and says so otherwise.
        // Straight to the stderr handle: the harness captures eprintln!.
        std::io::Write::write_all(&mut std::io::stderr(), b"SKIPPED: pk_merge_time_grows_with_the_table is a benchmark; run it with SILTTEST_BENCH=1 and --nocapture\n").ok();
        return;
    }
    let sizes: Vec<i64> = std::env::var("SILTTEST_BENCH_ROWS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let changed: usize = std::env::var("SILTTEST_BENCH_CHANGED")
        .ok()
        .map_or(10_000, |s| s.parse().unwrap());
    let commits: usize = std::env::var("SILTTEST_BENCH_COMMITS")
        .ok()
        .map_or(5, |s| s.parse().unwrap());
    let cow = std::env::var_os("SILTTEST_BENCH_COW").is_some();
    let mode = if cow {
        "copy-on-write MERGE"
    } else {
        "deletion vectors + key index"
    };
    let mut results = Vec::new();
    for &total in &sizes {
        let m = merge_time(total, changed, commits, cow).await;
        println!(
            "pk commit ({mode}): {changed} changed keys into {total} rows: median {:.3} s of {commits} \
             (first commit after open, building the key index: {:.3} s; load {:.1} s; last commit removed {} files, added {})",
            m.commit_seconds,
            m.first_commit_seconds,
            m.load_seconds,
            m.files_removed,
            m.files_added
        );
        results.push(m.commit_seconds);
    }
    if results.len() == 2 {
        println!(
            "ratio larger/smaller: {:.2}x (target <= 2x)",
            results[1] / results[0]
        );
    }
}
