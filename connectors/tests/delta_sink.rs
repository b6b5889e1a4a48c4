//! The Delta sink's promises, each as a test that fails when the promise is broken:
//! exactly-once tiering under failures (log and primary-key tables), txn offsets that cover
//! exactly the files of each commit, replay as a no-op, a racing committer rejected by Delta's
//! conflict check, and unsupported types refused at open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{
    Array, ArrayRef, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use datafusion::prelude::SessionContext;
use deltalake::writer::{DeltaWriter as _, RecordBatchWriter};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::{BucketKey, ChangeType, stream_system_fields, table_buckets};
use silt_connectors::delta::{
    BucketRange, Committable, DeltaSinkConfig, Error, LakeCommit, LakeOwner, LakeTable, OWNER_KEY,
    Retention, TableKind, add_delta_sink, lake_owner, move_lake, read_lake_offsets,
};
use silt_engine::{
    JobConfig, JobGraph, JobManager, JobState, LocalDirStorage, Partitioning, RestartStrategy,
    RestoredState, Source, SourcePoll, TaskContext,
};
use silt_testkit::faults::FaultyStorage;
use silt_testkit::lake::{key_value_schema, stage_parquet};

// ---------------------------------------------------------------------------------------------
// A synthetic changelog: per bucket a deterministic sequence of (key, value, change type).

#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    key: i64,
    value: Option<String>,
    change: ChangeType,
}

fn stream_schema() -> SchemaRef {
    let mut fields: Vec<Field> = key_value_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.extend(stream_system_fields());
    Arc::new(Schema::new(fields))
}

/// `ts` of the row at an offset, in ms (the lake stores it in µs).
fn ts_ms(bucket: i32, offset: i64) -> i64 {
    1_700_000_000_000 + bucket as i64 * 1_000_000 + offset
}

/// A log table's changelog: `+A` rows with keys cycling through `keys`.
fn log_changelog(buckets: i32, rows: usize) -> Vec<Vec<Change>> {
    (0..buckets)
        .map(|b| {
            (0..rows)
                .map(|i| Change {
                    key: b as i64 * 1000 + (i % 17) as i64,
                    value: (i % 7 != 0).then(|| format!("b{b}-row{i}")),
                    change: ChangeType::AppendOnly,
                })
                .collect()
        })
        .collect()
}

/// A primary-key table's changelog as a Fluss kv tablet writes it: `+I` for a new key, `-U`
/// then `+U` for an update, `-D` (old image) for a delete.
fn pk_changelog(seed: u64, buckets: i32, keys: i64, ops: usize) -> Vec<Vec<Change>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..buckets)
        .map(|b| {
            let mut live: BTreeMap<i64, String> = BTreeMap::new();
            let mut log = Vec::new();
            for op in 0..ops {
                let key = b as i64 * 1000 + rng.random_range(0..keys);
                let value = format!("b{b}-op{op}");
                match live.get(&key).cloned() {
                    None => {
                        log.push(Change {
                            key,
                            value: Some(value.clone()),
                            change: ChangeType::Insert,
                        });
                        live.insert(key, value);
                    }
                    Some(old) if rng.random_bool(0.3) => {
                        log.push(Change {
                            key,
                            value: Some(old),
                            change: ChangeType::Delete,
                        });
                        live.remove(&key);
                    }
                    Some(old) => {
                        log.push(Change {
                            key,
                            value: Some(old),
                            change: ChangeType::UpdateBefore,
                        });
                        log.push(Change {
                            key,
                            value: Some(value.clone()),
                            change: ChangeType::UpdateAfter,
                        });
                        live.insert(key, value);
                    }
                }
            }
            log
        })
        .collect()
}

/// A lake row: (k, v, ts in µs, bucket, offset).
type LakeRow = (i64, Option<String>, i64, i32, i64);

/// What the lake must hold after tiering the whole changelog once.
fn expected_rows(changelog: &[Vec<Change>], kind: &TableKind) -> Vec<LakeRow> {
    let mut rows = Vec::new();
    for (b, log) in changelog.iter().enumerate() {
        let b = b as i32;
        let row = |c: &Change, offset: usize| {
            (
                c.key,
                c.value.clone(),
                ts_ms(b, offset as i64) * 1000,
                b,
                offset as i64,
            )
        };
        match kind {
            TableKind::Log => rows.extend(log.iter().enumerate().map(|(o, c)| row(c, o))),
            TableKind::PrimaryKey { .. } => {
                let mut latest: BTreeMap<i64, LakeRow> = BTreeMap::new();
                for (o, c) in log.iter().enumerate() {
                    match c.change {
                        ChangeType::Delete => {
                            latest.remove(&c.key);
                        }
                        ChangeType::UpdateBefore => {}
                        _ => {
                            latest.insert(c.key, row(c, o));
                        }
                    }
                }
                rows.extend(latest.into_values());
            }
        }
    }
    rows.sort();
    rows
}

// ---------------------------------------------------------------------------------------------
// The test source: owns buckets `b % parallelism == subtask`, emits each bucket's changelog in
// batches of random size, fails once at each failure point. State: next offset per bucket.

/// Failure points: (bucket, offset).
type Failures = silt_testkit::faults::Failures<i32>;

struct ChangelogSource {
    changelog: Arc<Vec<Vec<Change>>>,
    positions: BTreeMap<i32, usize>,
    rng: SmallRng,
    failures: Arc<Failures>,
}

#[async_trait]
impl Source for ChangelogSource {
    async fn open(
        &mut self,
        ctx: &TaskContext,
        restored: RestoredState,
    ) -> silt_engine::Result<()> {
        let buckets = self.changelog.len() as i32;
        self.positions = (0..buckets)
            .filter(|b| *b as u32 % ctx.parallelism == ctx.subtask_index)
            .map(|b| (b, 0))
            .collect();
        if let Some(mut state) = restored.own().cloned() {
            while state.has_remaining() {
                let (bucket, position) = (state.get_i32(), state.get_u64() as usize);
                self.positions.insert(bucket, position);
            }
        }
        Ok(())
    }

    async fn poll_next(&mut self) -> silt_engine::Result<SourcePoll> {
        let open: Vec<i32> = self
            .positions
            .iter()
            .filter(|(b, p)| **p < self.changelog[**b as usize].len())
            .map(|(b, _)| *b)
            .collect();
        if open.is_empty() {
            return Ok(SourcePoll::End);
        }
        let bucket = open[self.rng.random_range(0..open.len())];
        let log = &self.changelog[bucket as usize];
        let from = self.positions[&bucket];
        let to = (from + self.rng.random_range(1..=40)).min(log.len());
        if self.failures.take(bucket, from as u64, to as u64) {
            return Err(silt_engine::Error::operator(format!(
                "injected failure in bucket {bucket} [{from}, {to})"
            )));
        }
        let rows = &log[from..to];
        let offsets = from as i64..to as i64;
        let columns: Vec<Arc<dyn Array>> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|c| c.key))),
            Arc::new(StringArray::from_iter(rows.iter().map(|c| c.value.clone()))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                offsets.clone().map(|o| ts_ms(bucket, o)),
            )),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|_| bucket))),
            Arc::new(Int64Array::from_iter_values(offsets.clone())),
            Arc::new(
                TimestampMillisecondArray::from_iter_values(offsets.map(|o| ts_ms(bucket, o)))
                    .with_timezone("UTC"),
            ),
            Arc::new(Int8Array::from_iter_values(
                rows.iter().map(|c| c.change as i8),
            )),
        ];
        self.positions.insert(bucket, to);
        tokio::time::sleep(Duration::from_millis(3)).await;
        Ok(SourcePoll::Batch(RecordBatch::try_new(
            stream_schema(),
            columns,
        )?))
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> silt_engine::Result<Bytes> {
        let mut b = BytesMut::new();
        for (&bucket, &position) in &self.positions {
            b.put_i32(bucket);
            b.put_u64(position as u64);
        }
        Ok(b.freeze())
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the lake back.

async fn read_lake(uri: &str) -> Vec<LakeRow> {
    let table = deltalake::open_table(deltalake::ensure_table_uri(uri).unwrap())
        .await
        .unwrap();
    read_lake_table(table).await
}

async fn read_lake_table(table: deltalake::DeltaTable) -> Vec<LakeRow> {
    let ctx = SessionContext::new();
    ctx.register_table("t", table.table_provider().await.unwrap())
        .unwrap();
    let batches = ctx
        .sql("SELECT k, v, CAST(ts AS BIGINT) AS ts, __bucket, __offset FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        let column = |i: usize, t: &DataType| arrow::compute::cast(batch.column(i), t).unwrap();
        let (k, v, ts, b, o) = (
            column(0, &DataType::Int64),
            column(1, &DataType::Utf8),
            column(2, &DataType::Int64),
            column(3, &DataType::Int32),
            column(4, &DataType::Int64),
        );
        let k = k.as_any().downcast_ref::<Int64Array>().unwrap();
        let v = v.as_any().downcast_ref::<StringArray>().unwrap();
        let ts = ts.as_any().downcast_ref::<Int64Array>().unwrap();
        let b = b.as_any().downcast_ref::<Int32Array>().unwrap();
        let o = o.as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..batch.num_rows() {
            rows.push((
                k.value(i),
                (!v.is_null(i)).then(|| v.value(i).to_string()),
                ts.value(i),
                b.value(i),
                o.value(i),
            ));
        }
    }
    rows.sort();
    rows
}

/// One commit of the Delta log, as far as these tests care.
#[derive(Debug, Default)]
struct LogCommit {
    version: u64,
    /// (bucket, numRecords, min __offset, max __offset) per added file.
    adds: Vec<(i32, u64, i64, i64)>,
    removes: usize,
    /// Files a compaction added (`dataChange: false`): (bucket, numRecords, min, max __offset).
    rewrites: Vec<(i32, u64, i64, i64)>,
    /// Removes with `dataChange: false` (files a compaction rewrote).
    rewritten_removes: usize,
    /// The commit went through the deletion-vector path (its MERGE names silt's key predicate,
    /// `... AND key (k)`), whether or not it left a vector (it may compact every file it
    /// touched instead).
    vector_path: bool,
    /// Adds that carry a deletion vector.
    vectors: usize,
    /// Rows in the added files without a deletion vector (new files).
    new_rows: u64,
    txns: BTreeMap<String, i64>,
}

fn delta_log(table_dir: &Path) -> Vec<LogCommit> {
    let mut commits = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(table_dir.join("_delta_log"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p.to_string_lossy().contains("checkpoint")
        })
        .collect();
    files.sort();
    for file in files {
        let version: u64 = file.file_stem().unwrap().to_string_lossy().parse().unwrap();
        let mut commit = LogCommit {
            version,
            ..Default::default()
        };
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(add) = action.get("add") {
                let records =
                    serde_json::from_str::<serde_json::Value>(add["stats"].as_str().unwrap())
                        .unwrap()["numRecords"]
                        .as_u64()
                        .unwrap();
                if add["deletionVector"].is_null() {
                    commit.new_rows += records;
                } else {
                    commit.vectors += 1;
                }
                let bucket = add["partitionValues"]["__bucket"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let stats: serde_json::Value =
                    serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                let file = (
                    bucket,
                    stats["numRecords"].as_u64().unwrap(),
                    stats["minValues"]["__offset"].as_i64().unwrap_or(i64::MIN),
                    stats["maxValues"]["__offset"].as_i64().unwrap_or(i64::MIN),
                );
                if add["dataChange"] == serde_json::json!(false) {
                    commit.rewrites.push(file);
                } else {
                    commit.adds.push(file);
                }
            }
            if let Some(remove) = action.get("remove") {
                commit.removes += 1;
                if remove["dataChange"] == serde_json::json!(false) {
                    commit.rewritten_removes += 1;
                }
            }
            if let Some(info) = action.get("commitInfo") {
                commit.vector_path = info["operationParameters"]["mergePredicate"]
                    .as_str()
                    .is_some_and(|p| p.contains(" AND key ("));
            }
            if let Some(txn) = action.get("txn") {
                commit.txns.insert(
                    txn["appId"].as_str().unwrap().to_string(),
                    txn["version"].as_i64().unwrap(),
                );
            }
        }
        commits.push(commit);
    }
    commits
}

/// Every commit's txn versions cover exactly the files it adds (log tables): per bucket, the
/// added rows are the offsets from the previous txn version up to the new one, once each. For
/// primary-key tables: every data-changing commit carries txn actions, versions never go back.
fn check_commits_cover_files(table_dir: &Path, table_id: &str, kind: &TableKind) -> Vec<LogCommit> {
    let mut lake: BTreeMap<i32, i64> = BTreeMap::new();
    let log = delta_log(table_dir);
    for commit in log.iter().skip(1) {
        let txn_of = |b: i32| {
            commit
                .txns
                .get(&silt_connectors::delta::app_id(table_id, b.into()))
                .copied()
        };
        assert!(
            !commit.txns.is_empty(),
            "commit {} has no txn actions: {commit:?}\n{}",
            commit.version,
            std::fs::read_to_string(
                table_dir.join(format!("_delta_log/{:020}.json", commit.version))
            )
            .unwrap()
        );
        match kind {
            TableKind::Log => {
                let mut rows: BTreeMap<i32, (u64, i64, i64)> = BTreeMap::new();
                for &(b, n, lo, hi) in &commit.adds {
                    let e = rows.entry(b).or_insert((0, i64::MAX, i64::MIN));
                    *e = (e.0 + n, e.1.min(lo), e.2.max(hi));
                }
                let txn_buckets: Vec<i32> = commit
                    .txns
                    .keys()
                    .map(|a| a.rsplit('-').next().unwrap().parse().unwrap())
                    .collect();
                assert_eq!(
                    rows.keys().copied().collect::<Vec<_>>(),
                    txn_buckets,
                    "commit {}: buckets of files vs txns",
                    commit.version
                );
                for (b, (n, lo, hi)) in rows {
                    let before = lake.get(&b).copied().unwrap_or(0);
                    let after = txn_of(b).unwrap();
                    assert_eq!(
                        (lo, hi + 1, n as i64),
                        (before, after, after - before),
                        "commit {} bucket {b}",
                        commit.version
                    );
                    lake.insert(b, after);
                }
            }
            TableKind::PrimaryKey { .. } => {
                for (app, &v) in &commit.txns {
                    let b: i32 = app.rsplit('-').next().unwrap().parse().unwrap();
                    assert!(
                        v > lake.get(&b).copied().unwrap_or(0),
                        "commit {}: txn of bucket {b} does not advance",
                        commit.version
                    );
                    lake.insert(b, v);
                }
            }
        }
    }
    log
}

// ---------------------------------------------------------------------------------------------
// The exactly-once job.

struct Run {
    kind: TableKind,
    changelog: Arc<Vec<Vec<Change>>>,
    seed: u64,
    source_parallelism: u32,
    writer_parallelism: u32,
    failure_points: usize,
    /// Checkpoint ids whose metadata write fails (a crash at the engine's commit point).
    fail_metadata_of: Vec<u64>,
    /// Hook calls (1-based) that fail: a crash after the Delta commit, before anything else.
    fail_hook_calls: Vec<usize>,
    target_file_bytes: u64,
    row_group_rows_max: usize,
    pk_mode: PkMode,
}

/// How a primary-key run commits its changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PkMode {
    /// Deletion vectors, the key index kept in a directory across restarts.
    VectorsKeptIndex,
    /// Deletion vectors, the key index in a temporary directory: rebuilt at every restart.
    VectorsRebuiltIndex,
    /// Copy-on-write MERGE (`deletion_vectors = false`).
    CopyOnWrite,
}

struct Outcome {
    restarts: u32,
    fired: usize,
    commits: Vec<LakeCommit>,
}

async fn run_job(run: &Run, table_dir: &Path, checkpoint_dir: &Path) -> Outcome {
    let uri = table_dir.to_str().unwrap().to_string();
    let mut rng = SmallRng::seed_from_u64(run.seed);
    let buckets = run.changelog.len() as i32;
    let points = (0..run.failure_points)
        .map(|_| {
            let b = rng.random_range(0..buckets);
            (
                b,
                rng.random_range(0..run.changelog[b as usize].len()) as u64,
            )
        })
        .collect();
    let failures = Failures::new(points);

    let mut config = DeltaSinkConfig::new(&uri, "t42", run.kind.clone(), key_value_schema());
    config.target_file_bytes = run.target_file_bytes;
    config.row_group_rows_max = run.row_group_rows_max;
    // Small enough that primary-key writers stage several files per checkpoint now and then.
    config.change_buffer_bytes_max = 64 * 1024;
    config.deletion_vectors = run.pk_mode != PkMode::CopyOnWrite;
    if run.pk_mode == PkMode::VectorsKeptIndex {
        config.key_index_dir = Some(checkpoint_dir.join("key-index"));
    }
    let commits: Arc<Mutex<Vec<LakeCommit>>> = Arc::default();
    let hook_calls = Arc::new(AtomicUsize::new(0));
    let (seen, calls, fail_calls) = (
        commits.clone(),
        hook_calls.clone(),
        run.fail_hook_calls.clone(),
    );
    config.on_commit = Some(Arc::new(
        move |commit: LakeCommit| -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            seen.lock().unwrap().push(commit);
            let fail = fail_calls.contains(&call);
            Box::pin(async move {
                if fail {
                    anyhow::bail!("injected failure of hook call {call}");
                }
                Ok(())
            })
        },
    ));

    let mut graph = JobGraph::new();
    let (changelog, seed, f) = (run.changelog.clone(), run.seed, failures.clone());
    let source = graph.add_source(
        "changelog",
        run.source_parallelism,
        move |ctx: &TaskContext| -> silt_engine::Result<Box<dyn Source>> {
            Ok(Box::new(ChangelogSource {
                changelog: changelog.clone(),
                positions: BTreeMap::new(),
                rng: SmallRng::seed_from_u64(
                    seed ^ ((ctx.subtask_index as u64) << 20) ^ ((ctx.attempt as u64) << 40),
                ),
                failures: f.clone(),
            }))
        },
    );
    let by_bucket = Partitioning::Hash {
        key_columns: vec!["__bucket".into()],
    };
    add_delta_sink(
        &mut graph,
        "lake",
        source,
        config,
        run.writer_parallelism,
        by_bucket,
    )
    .unwrap();

    // Every state is written (the committer holds committables), but the chosen checkpoints
    // never complete.
    let storage = FaultyStorage::new(Arc::new(LocalDirStorage::new(checkpoint_dir)));
    *storage.fail_metadata_of.lock().unwrap() = run.fail_metadata_of.clone();
    let storage = Arc::new(storage);
    let mut job_config = JobConfig::new("tier", storage.clone());
    job_config.checkpoint.interval = Some(Duration::from_millis(25));
    job_config.restart = RestartStrategy::FixedDelay {
        delay: Duration::from_millis(10),
        attempts_max: 100,
    };
    let job = JobManager::new().submit(graph, job_config).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(240), job.wait())
        .await
        .expect("job ends within 4 minutes");
    assert_eq!(state, JobState::Finished, "job should finish");
    let commits = commits.lock().unwrap().clone();
    Outcome {
        restarts: job.metrics().restarts,
        fired: failures.fired() as usize
            + storage.metadata_writes_failed.load(Ordering::SeqCst) as usize
            + run.fail_hook_calls.len(),
        commits,
    }
}

async fn check_exactly_once(run: Run) {
    let dir = tempfile::tempdir().unwrap();
    let (table_dir, checkpoint_dir) = (dir.path().join("lake"), dir.path().join("checkpoints"));
    let outcome = run_job(&run, &table_dir, &checkpoint_dir).await;
    let uri = table_dir.to_str().unwrap();
    let label = format!("seed {} {:?} {:?}", run.seed, run.kind, run.pk_mode);

    assert!(
        outcome.fired > 0 && outcome.restarts > 0,
        "{label}: failures must happen (fired {}, restarts {})",
        outcome.fired,
        outcome.restarts
    );
    let got = read_lake(uri).await;
    let want = expected_rows(&run.changelog, &run.kind);
    assert_eq!(
        got.len(),
        want.len(),
        "{label}: row count (lost or duplicated rows)"
    );
    assert!(
        got == want,
        "{label}: the lake differs from the failure-free changelog"
    );

    let offsets = read_lake_offsets(uri, &HashMap::new(), "t42", &keys(run.changelog.len()))
        .await
        .unwrap()
        .unwrap();
    let ends: BTreeMap<i32, i64> = run
        .changelog
        .iter()
        .enumerate()
        .map(|(b, log)| (b as i32, log.len() as i64))
        .collect();
    assert_eq!(
        offsets.bucket_offsets,
        table_buckets(ends),
        "{label}: txn versions are the end offsets"
    );
    let log = check_commits_cover_files(&table_dir, "t42", &run.kind);
    eprintln!(
        "{label}: {} failures, {} restarts, {} delta commits ({} replays reported), {} files added, {} rows in the lake",
        outcome.fired,
        outcome.restarts,
        log.len() - 1,
        outcome.commits.iter().filter(|c| c.replayed).count(),
        log.iter().map(|c| c.adds.len()).sum::<usize>(),
        got.len()
    );
    let vectors: usize = log.iter().map(|c| c.vectors).sum();
    let vector_path = log.iter().any(|c| c.vector_path);
    match (&run.kind, run.pk_mode) {
        (TableKind::Log, _) | (_, PkMode::CopyOnWrite) => {
            assert_eq!(vectors, 0, "{label}: no deletion vectors expected");
            assert!(!vector_path, "{label}: no deletion-vector commit expected");
        }
        // Whether a commit leaves a vector or compacts every file it touched (at least half
        // deleted, as most are in this small table) depends on how the checkpoints split the
        // changelog; what must hold is that the commits take the deletion-vector path.
        _ => assert!(
            vector_path,
            "{label}: the commits should use deletion vectors ({vectors} vectors)"
        ),
    }
    let real: Vec<u64> = outcome
        .commits
        .iter()
        .filter(|c| !c.replayed)
        .map(|c| c.delta_version)
        .collect();
    assert!(
        real.windows(2).all(|w| w[0] < w[1]),
        "{label}: commit versions increase: {real:?}"
    );
    assert_eq!(
        offsets.delta_version,
        *real.last().unwrap(),
        "{label}: the last commit is the lake's version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_table_is_tiered_exactly_once_under_failures() {
    for (seed, sources, writers) in [(1u64, 2u32, 2u32), (2, 1, 3)] {
        check_exactly_once(Run {
            kind: TableKind::Log,
            changelog: Arc::new(log_changelog(4, 500)),
            seed,
            source_parallelism: sources,
            writer_parallelism: writers,
            failure_points: 3,
            fail_metadata_of: vec![5],
            fail_hook_calls: vec![4],
            // Small files and row groups, so writers roll several files per checkpoint.
            target_file_bytes: 2 * 1024,
            row_group_rows_max: 16,
            pk_mode: PkMode::CopyOnWrite,
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pk_table_is_tiered_exactly_once_under_failures() {
    for (seed, sources, writers, pk_mode) in [
        (3u64, 2u32, 2u32, PkMode::VectorsKeptIndex),
        (4, 1, 1, PkMode::VectorsRebuiltIndex),
        (5, 2, 1, PkMode::CopyOnWrite),
    ] {
        let kind = TableKind::PrimaryKey {
            key_columns: vec!["k".into()],
        };
        check_exactly_once(Run {
            kind,
            changelog: Arc::new(pk_changelog(seed, 3, 40, 300)),
            seed,
            source_parallelism: sources,
            writer_parallelism: writers,
            failure_points: 3,
            fail_metadata_of: vec![4],
            fail_hook_calls: vec![3],
            target_file_bytes: DeltaSinkConfig::TARGET_FILE_BYTES_DEFAULT,
            row_group_rows_max: DeltaSinkConfig::ROW_GROUP_ROWS_DEFAULT,
            pk_mode,
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Commit-level properties, driven through `LakeTable` directly.

/// Writes `rows` rows of `bucket` starting at `start` as data files, returns their committable.
async fn write_committable(
    lake: &LakeTable,
    checkpoint_id: u64,
    bucket: i32,
    start: i64,
    rows: i64,
) -> Committable {
    let mut writer = RecordBatchWriter::for_table(lake.table()).unwrap();
    let offsets = start..start + rows;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(offsets.clone())),
        Arc::new(StringArray::from_iter_values(
            offsets.clone().map(|o| format!("v{o}")),
        )),
    ];
    columns.extend(system_columns(bucket, offsets));
    let batch = RecordBatch::try_new(lake.lake_schema().clone(), columns).unwrap();
    writer.write(batch).await.unwrap();
    let mut committable = range_committable(checkpoint_id, bucket, start, rows);
    committable.adds = writer.flush().await.unwrap();
    committable
}

/// The stream's system columns of rows `offsets` of `bucket`: `ts` (µs, from [`ts_ms`]), the
/// bucket, the offset and the event time (µs, UTC).
fn system_columns(bucket: i32, offsets: std::ops::Range<i64>) -> [ArrayRef; 4] {
    let micros = offsets.clone().map(|o| ts_ms(bucket, o) * 1000);
    [
        Arc::new(TimestampMicrosecondArray::from_iter_values(micros.clone())),
        Arc::new(Int32Array::from_iter_values(
            offsets.clone().map(|_| bucket),
        )),
        Arc::new(Int64Array::from_iter_values(offsets)),
        Arc::new(TimestampMicrosecondArray::from_iter_values(micros).with_timezone("UTC")),
    ]
}

/// A committable of checkpoint `checkpoint_id` with nothing to add yet, covering `rows` rows
/// of `bucket` from offset `start` (following `start`).
fn range_committable(checkpoint_id: u64, bucket: i32, start: i64, rows: i64) -> Committable {
    Committable {
        checkpoint_id,
        writer: 0,
        adds: Vec::new(),
        staged: Vec::new(),
        buckets: BTreeMap::from([(
            BucketKey::table(bucket),
            BucketRange {
                follows: Some(start),
                start,
                end: start + rows,
                rows: rows as u64,
            },
        )]),
    }
}

fn log_config(dir: &Path) -> Arc<DeltaSinkConfig> {
    Arc::new(DeltaSinkConfig::new(
        dir.to_str().unwrap(),
        "t7",
        TableKind::Log,
        key_value_schema(),
    ))
}

#[tokio::test]
async fn replaying_a_committed_committable_is_a_noop() {
    let dir = tempfile::tempdir().unwrap();
    let mut lake = LakeTable::open(log_config(dir.path())).await.unwrap();
    let first = vec![
        write_committable(&lake, 1, 0, 0, 10).await,
        write_committable(&lake, 1, 1, 0, 5).await,
    ];
    let commit = plan_and_apply(&mut lake, &first).await;
    assert_eq!((commit.delta_version, commit.replayed), (1, false));
    assert_eq!(commit.bucket_offsets, table_buckets([(0, 10), (1, 5)]));

    // The same committables again (a restore after the commit): nothing is committed.
    let plan = lake.plan(&first).await.unwrap();
    assert!(plan.is_noop());
    let replay = lake.apply(&plan).await.unwrap();
    assert_eq!((replay.delta_version, replay.replayed), (1, true));
    assert_eq!(lake.version(), Some(1));

    // A replayed checkpoint together with a new one: only the new one is committed.
    let mut mixed = first.clone();
    mixed.push(write_committable(&lake, 2, 0, 10, 3).await);
    let plan = lake.plan(&mixed).await.unwrap();
    assert_eq!(
        (plan.adds.len(), plan.txns.clone()),
        (1, table_buckets([(0, 13)]))
    );
    assert_eq!(lake.apply(&plan).await.unwrap().delta_version, 2);
    assert_eq!(read_lake(dir.path().to_str().unwrap()).await.len(), 18);
}

/// Regression: a second tiering job on the same table (same app ids) commits part of a range
/// this job also holds; the plan used to refuse that range as a broken invariant, so the first
/// job failed and restarted from the same checkpoint forever and the table never caught up
/// again (found by `silt bench trials`, second-job fault). Now only the offsets the lake does
/// not have are committed: no duplicate, no stall.
#[tokio::test]
async fn a_range_the_lake_holds_in_part_is_trimmed_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut ours = LakeTable::open(log_config(dir.path())).await.unwrap();
    let mut theirs = LakeTable::open(log_config(dir.path())).await.unwrap();
    // The other job tiers [0, 13) of bucket 0; ours holds [0, 10) and then [10, 16).
    let other = vec![write_committable(&theirs, 1, 0, 0, 13).await];
    let plan = theirs.plan(&other).await.unwrap();
    theirs.apply(&plan).await.unwrap();
    let pending = vec![
        write_committable(&ours, 1, 0, 0, 10).await,
        write_committable(&ours, 2, 0, 10, 6).await,
    ];
    let plan = ours.plan(&pending).await.unwrap();
    assert_eq!(plan.txns, table_buckets([(0, 16)]));
    assert_eq!(plan.rows, table_buckets([(0, 3)]), "only [13, 16) is new");
    let commit = ours.apply(&plan).await.unwrap();
    assert_eq!(commit.bucket_offsets, table_buckets([(0, 16)]));
    let offsets: Vec<i64> = read_lake(&uri).await.iter().map(|r| r.4).collect();
    assert_eq!(
        offsets,
        (0..16).collect::<Vec<_>>(),
        "every offset exactly once"
    );
    // Replaying the same committables is now a no-op.
    assert!(ours.plan(&pending).await.unwrap().is_noop());
}

/// The active files of bucket `bucket`: (numRecords, min __offset, max __offset), in offset
/// order.
fn active_files(lake: &LakeTable, bucket: i32) -> Vec<(u64, i64, i64)> {
    let state = lake.table().snapshot().unwrap();
    let mut files: Vec<(u64, i64, i64)> = state
        .log_data()
        .iter()
        .filter(|f| {
            f.partition_values_map().get("__bucket").cloned().flatten() == Some(bucket.to_string())
        })
        .map(|f| {
            let stats: serde_json::Value = serde_json::from_str(&f.stats().unwrap()).unwrap();
            (
                stats["numRecords"].as_u64().unwrap(),
                stats["minValues"]["__offset"].as_i64().unwrap(),
                stats["maxValues"]["__offset"].as_i64().unwrap(),
            )
        })
        .collect();
    files.sort_by_key(|f| f.1);
    files
}

/// The paths of the files the lake's current version references, sorted.
fn active_paths(lake: &LakeTable) -> Vec<String> {
    let mut paths: Vec<String> = lake
        .table()
        .snapshot()
        .unwrap()
        .log_data()
        .iter()
        .map(|f| f.path().to_string())
        .collect();
    paths.sort();
    paths
}

/// The data files under a lake's directory, referenced or not, sorted.
fn data_files(dir: &Path) -> Vec<String> {
    relative_files(dir, &|p| {
        p.starts_with("__bucket=") && p.ends_with(".parquet")
    })
}

/// A log table at `uri` whose buckets compact once they hold 4 small files (of a 1 MiB target).
async fn open_compacting_log(uri: &str) -> LakeTable {
    let mut config = DeltaSinkConfig::new(uri, "t7", TableKind::Log, key_value_schema());
    config.small_files_max = 4;
    config.target_file_bytes = 1 << 20;
    LakeTable::open(Arc::new(config)).await.unwrap()
}

/// Issue 15 (lake maintenance): a log table got one file per bucket per checkpoint and nothing
/// compacted them (232 new files a minute at 1 s freshness and 4 buckets). A log commit now
/// rewrites a run of each appended bucket's small files into one, in the same commit: the
/// file count of a bucket stays bounded, every offset stays in the lake once, every file holds a
/// contiguous offset range, and replays are still no-ops.
#[tokio::test]
async fn log_commits_compact_the_small_files_of_a_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut lake = open_compacting_log(&uri).await;
    let commits = 60i64;
    let mut first = Vec::new();
    let mut reported = (0usize, 0u64);
    for n in 0..commits {
        let committables = vec![
            write_committable(&lake, n as u64 + 1, 0, n * 10, 10).await,
            write_committable(&lake, n as u64 + 1, 1, n * 5, 5).await,
        ];
        if n == 0 {
            first = committables.clone();
        }
        let commit = plan_and_apply(&mut lake, &committables).await;
        if let Some(c) = commit.compaction {
            reported.0 += c.files;
            reported.1 += c.rows;
        }
        for bucket in [0, 1] {
            let files = active_files(&lake, bucket);
            assert!(
                files.len() <= 4 + 8,
                "commit {n}: bucket {bucket} holds {} files: {files:?}",
                files.len()
            );
        }
    }
    for (bucket, rows) in [(0, 10), (1, 5)] {
        let files = active_files(&lake, bucket);
        let mut next = 0;
        for &(n, lo, hi) in &files {
            assert_eq!(
                (lo, hi - lo + 1),
                (next, n as i64),
                "contiguous ranges: {files:?}"
            );
            next = hi + 1;
        }
        assert_eq!(next, commits * rows);
    }
    let log = check_commits_cover_files(dir.path(), "t7", &TableKind::Log);
    let rewrites: usize = log.iter().map(|c| c.rewrites.len()).sum();
    let rewritten: usize = log.iter().map(|c| c.rewritten_removes).sum();
    assert!(
        rewrites > 0 && rewritten > rewrites,
        "{rewrites} rewrites of {rewritten} files"
    );
    let rewritten_rows: u64 = log
        .iter()
        .flat_map(|c| c.rewrites.iter())
        .map(|r| r.1)
        .sum();
    assert_eq!(
        reported,
        (rewritten, rewritten_rows),
        "each commit reports the files and rows it compacted"
    );
    let offsets: Vec<(i32, i64)> = read_lake(&uri).await.iter().map(|r| (r.3, r.4)).collect();
    let mut expected: Vec<(i32, i64)> = (0..commits * 10).map(|o| (0, o)).collect();
    expected.extend((0..commits * 5).map(|o| (1, o)));
    expected.sort();
    let mut offsets_sorted = offsets.clone();
    offsets_sorted.sort();
    assert_eq!(offsets_sorted, expected, "every offset exactly once");
    assert!(
        lake.plan(&first).await.unwrap().is_noop(),
        "a replay is still a no-op"
    );
}

/// Issue 18 (freshness): a log commit rewrote its buckets' small files inside the commit, and
/// at 100k rows/s that stalled every commit 1-1.3 s, with every row waiting for it. The rewrite
/// is now prepared between commits: after the commit that fills a bucket's tail, the file
/// holding the run's rows appears on disk before any further commit, and the next commit
/// carries it (removes the run, adds the prepared file) instead of writing one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_compaction_is_prepared_between_commits() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut lake = open_compacting_log(&uri).await;
    let mut committed: BTreeSet<String> = BTreeSet::new();
    let commit = async |lake: &mut LakeTable, n: i64| {
        let c = write_committable(lake, n as u64 + 1, 0, n * 10, 10).await;
        plan_and_apply(lake, &[c]).await
    };
    for n in 0..4 {
        let done = commit(&mut lake, n).await;
        assert_eq!(
            done.compaction, None,
            "commit {n}: the tail is not full yet"
        );
        committed.extend(data_files(dir.path()));
    }
    // The tail holds 4 small files now: a file holding their rows is prepared, with no commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let prepared = loop {
        let new: BTreeSet<String> = data_files(dir.path())
            .into_iter()
            .filter(|p| !committed.contains(p))
            .collect();
        if !new.is_empty() {
            break new;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction was prepared after the commit that filled the tail"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let version = lake.table().version();
    let before: Vec<(u64, i64, i64)> = active_files(&lake, 0);
    assert_eq!(
        before.len(),
        4,
        "nothing committed the rewrite yet: {before:?}"
    );
    let waiting: BTreeSet<String> = lake.settle_compaction().await.into_iter().collect();
    assert_eq!(
        waiting, prepared,
        "what waits for a commit is the file that appeared"
    );

    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let carried = commit(&mut lake, 4).await;
    assert_eq!(lake.table().version(), version.map(|v| v + 1));
    let commit_file = dir
        .path()
        .join(format!("_delta_log/{:020}.json", carried.delta_version));
    let removed_at: Vec<i64> = std::fs::read_to_string(commit_file)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|a| a.get("remove")?.get("deletionTimestamp")?.as_i64())
        .collect();
    assert_eq!(removed_at.len(), 4, "the run's four removes");
    assert!(
        removed_at.iter().all(|&t| t >= before_ms),
        "the files leave the table with the commit, not when the run was picked: {removed_at:?} vs {before_ms}"
    );
    let report = carried
        .compaction
        .expect("the next commit carries the rewrite");
    assert_eq!((report.files, report.rows), (4, 40));
    let active: BTreeSet<String> = active_paths(&lake).into_iter().collect();
    assert!(
        prepared.iter().all(|p| active.contains(p)),
        "the prepared file is the one committed: {prepared:?} vs {active:?}"
    );
    let files = active_files(&lake, 0);
    assert_eq!(
        files.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
        vec![(40, 0), (10, 40)],
        "one file for the run, then the new commit's: {files:?}"
    );
    let mut offsets: Vec<i64> = read_lake(&uri).await.iter().map(|r| r.4).collect();
    offsets.sort();
    assert_eq!(offsets, (0..50).collect::<Vec<_>>(), "every offset once");
}

#[tokio::test]
async fn a_racing_committer_with_the_same_app_ids_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = LakeTable::open(log_config(dir.path())).await.unwrap();
    let mut b = LakeTable::open(log_config(dir.path())).await.unwrap();
    // Both committers hold the same checkpoint's data (a zombie and its replacement).
    let mine = vec![write_committable(&a, 1, 2, 0, 8).await];
    let theirs = vec![write_committable(&b, 1, 2, 0, 8).await];
    let plan_a = a.plan(&mine).await.unwrap();
    let plan_b = b.plan(&theirs).await.unwrap();
    assert!(
        !plan_a.is_noop() && !plan_b.is_noop(),
        "both read the lake before either committed"
    );

    a.apply(&plan_a).await.unwrap();
    let err = b
        .apply(&plan_b)
        .await
        .err()
        .expect("the second commit must be rejected");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("only one tiering job may write a table"),
        "{err}"
    );

    // The lake is intact: one copy of the rows, txn at the end offset.
    assert_eq!(read_lake(dir.path().to_str().unwrap()).await.len(), 8);
    let offsets = read_lake_offsets(
        dir.path().to_str().unwrap(),
        &HashMap::new(),
        "t7",
        &keys(4),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (offsets.delta_version, offsets.bucket_offsets),
        (1, table_buckets([(2, 8)]))
    );
    // And the loser, replanning, sees there is nothing left to do.
    assert!(b.plan(&theirs).await.unwrap().is_noop());
}

#[tokio::test]
async fn an_unsupported_type_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("opened_at", DataType::Time32(TimeUnit::Millisecond), true),
    ]));
    let config = DeltaSinkConfig::new(dir.path().to_str().unwrap(), "t1", TableKind::Log, schema);
    let want = format!(
        "column opened_at has type {} which Delta cannot store; Delta has no time-of-day type",
        DataType::Time32(TimeUnit::Millisecond)
    );
    let err = LakeTable::open(Arc::new(config.clone()))
        .await
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.starts_with(&want), "{err}");
    let mut graph = JobGraph::new();
    let source = graph.add_source(
        "s",
        1,
        |_: &TaskContext| -> silt_engine::Result<Box<dyn Source>> { unreachable!() },
    );
    let err = add_delta_sink(
        &mut graph,
        "lake",
        source,
        config,
        1,
        Partitioning::Rebalance,
    )
    .err()
    .expect("must fail");
    assert!(err.to_string().starts_with(&want), "{err}");
    assert!(
        !dir.path().join("_delta_log").exists(),
        "nothing is created for a table that cannot be stored"
    );
}

#[tokio::test]
async fn lake_offsets_of_a_missing_table_are_none() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert_eq!(
        read_lake_offsets(missing.to_str().unwrap(), &HashMap::new(), "t", &keys(2))
            .await
            .unwrap(),
        None
    );
}

/// `write_committable` with the range continuing from `follows` instead of its start.
async fn committable_following(
    lake: &LakeTable,
    checkpoint_id: u64,
    bucket: i32,
    follows: Option<i64>,
    start: i64,
    rows: i64,
) -> Committable {
    let mut c = write_committable(lake, checkpoint_id, bucket, start, rows).await;
    c.buckets
        .get_mut(&BucketKey::table(bucket))
        .unwrap()
        .follows = follows;
    c
}

/// Regression (issue 13, item 3): a committable that continues after the lake's txn offset (a
/// lost committable, a checkpoint restored over a replaced lake) was committed, and the txn
/// offset then claimed offsets that were never written.
#[tokio::test]
async fn a_commit_that_would_leave_a_hole_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut config = DeltaSinkConfig::new(&uri, "t7", TableKind::Log, key_value_schema());
    config.start_offsets = Some(table_buckets([(0, 0), (1, 3)]));
    let mut lake = LakeTable::open(Arc::new(config)).await.unwrap();
    let first = vec![write_committable(&lake, 1, 0, 0, 10).await];
    plan_and_apply(&mut lake, &first).await;

    // (committables, Ok(txns) | Err((bucket, follows, expected, what the message says)))
    type Want = Result<BTreeMap<i32, i64>, (i32, i64, i64, &'static str)>;
    let cases: Vec<(Vec<Committable>, Want)> = vec![
        (
            vec![write_committable(&lake, 2, 0, 20, 5).await],
            Err((0, 20, 10, "the lake's txn offset for it is 10")),
        ),
        (
            vec![
                write_committable(&lake, 2, 0, 10, 5).await,
                write_committable(&lake, 4, 0, 16, 5).await,
            ],
            Err((
                0,
                16,
                15,
                "the committable before it in the same commit ends at 15",
            )),
        ),
        (
            vec![write_committable(&lake, 2, 1, 4, 5).await],
            Err((
                1,
                4,
                3,
                "the lake holds nothing of it and its changelog starts at 3",
            )),
        ),
        // Offsets without rows between the lake's end and the first row are no hole.
        (
            vec![committable_following(&lake, 2, 0, Some(10), 12, 5).await],
            Ok(BTreeMap::from([(0, 17)])),
        ),
        (
            vec![
                write_committable(&lake, 2, 0, 10, 5).await,
                write_committable(&lake, 3, 0, 15, 5).await,
                write_committable(&lake, 3, 1, 3, 2).await,
            ],
            Ok(BTreeMap::from([(0, 20), (1, 5)])),
        ),
        // A committable of an older silt does not say where it continues from.
        (
            vec![committable_following(&lake, 2, 0, None, 20, 5).await],
            Ok(BTreeMap::from([(0, 25)])),
        ),
    ];
    for (committables, want) in cases {
        let planned = lake.plan(&committables).await;
        match (planned, want) {
            (Ok(plan), Ok(txns)) => assert_eq!(plan.txns, table_buckets(txns)),
            (Err(e @ Error::OffsetGap { .. }), Err((bucket, follows, expected, said))) => {
                let Error::OffsetGap {
                    bucket: b,
                    follows: f,
                    expected: x,
                    ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(
                    (*b, *f, *x),
                    (BucketKey::table(bucket), follows, expected),
                    "{e}"
                );
                let message = e.to_string();
                for part in [
                    uri.as_str(),
                    "silt table t7",
                    &format!("bucket {bucket}:"),
                    &format!("continues from offset {follows}"),
                    said,
                    &format!("offsets {expected}..{follows} were never written"),
                ] {
                    assert!(message.contains(part), "{message} lacks {part:?}");
                }
            }
            (got, want) => panic!("got {:?}, want {want:?}", got.map(|p| p.txns)),
        }
    }
    assert_eq!(lake.version(), Some(1), "nothing was committed");
}

/// The lake of a dropped table is not the lake of a new table with the same name: the sink
/// records its table id, refuses a lake that names another, and readers see no such lake.
#[tokio::test]
async fn a_lake_belongs_to_the_table_id_that_created_it() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut lake = LakeTable::open(log_config(dir.path())).await.unwrap();
    let plan = lake
        .plan(&[write_committable(&lake, 1, 0, 0, 4).await])
        .await
        .unwrap();
    lake.apply(&plan).await.unwrap();
    let snapshot = lake.table().snapshot().unwrap();
    assert_eq!(
        snapshot.metadata().configuration().get(OWNER_KEY),
        Some(&"t7".to_string())
    );

    let options = HashMap::new();
    let owner = |id: &'static str| {
        let (uri, options) = (uri.clone(), options.clone());
        async move { lake_owner(&uri, &options, id, 2).await.unwrap() }
    };
    assert_eq!(owner("t7").await, LakeOwner::Owned);
    assert_eq!(
        owner("t8").await,
        LakeOwner::Foreign {
            owner: Some("t7".into())
        }
    );
    let missing = dir.path().join("nope");
    assert_eq!(
        lake_owner(missing.to_str().unwrap(), &options, "t7", 2)
            .await
            .unwrap(),
        LakeOwner::Absent
    );
    assert!(
        read_lake_offsets(&uri, &options, "t7", &keys(2))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        read_lake_offsets(&uri, &options, "t8", &keys(2))
            .await
            .unwrap(),
        None,
        "another table's lake holds nothing of t8"
    );
    let other = DeltaSinkConfig::new(&uri, "t8", TableKind::Log, key_value_schema());
    let e = LakeTable::open(Arc::new(other))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("belongs to silt table id t7") && e.contains("writes table id t8"),
        "{e}"
    );
}

/// Lakes created before the owner key name their owner in the description the sink gave them.
#[tokio::test]
async fn an_older_lake_is_owned_by_the_id_in_its_description() {
    let dir = tempfile::tempdir().unwrap();
    let options = HashMap::new();
    for (name, comment, files, owner) in [
        (
            "described",
            Some("tiered by silt from table 5"),
            false,
            Some("5"),
        ),
        ("bare-empty", None, false, None),
        ("bare-with-files", None, true, None),
    ] {
        let path = dir.path().join(name);
        let uri = path.to_str().unwrap();
        let schema = silt_connectors::delta::lake_arrow_schema(&key_value_schema()).unwrap();
        let columns: deltalake::kernel::StructType =
            deltalake::kernel::engine::arrow_conversion::TryIntoKernel::try_into_kernel(
                schema.as_ref(),
            )
            .unwrap();
        let mut create =
            deltalake::DeltaTable::try_from_url(deltalake::ensure_table_uri(uri).unwrap())
                .await
                .unwrap()
                .create()
                .with_columns(columns.fields().cloned())
                .with_partition_columns(["__bucket"]);
        if let Some(comment) = comment {
            create = create.with_comment(comment);
        }
        let table = create.await.unwrap();
        if files {
            // Rows without a txn action: a table some other writer filled.
            let lake = LakeTable::open(Arc::new(DeltaSinkConfig::new(
                uri,
                "9",
                TableKind::Log,
                key_value_schema(),
            )))
            .await
            .unwrap();
            let adds = write_committable(&lake, 1, 0, 0, 3).await.adds;
            let state = table.snapshot().unwrap();
            deltalake::kernel::transaction::CommitBuilder::default()
                .with_actions(
                    adds.into_iter()
                        .map(deltalake::kernel::Action::Add)
                        .collect(),
                )
                .build(
                    Some(state as &dyn deltalake::kernel::transaction::TableReference),
                    table.log_store(),
                    deltalake::protocol::DeltaOperation::Write {
                        mode: deltalake::protocol::SaveMode::Append,
                        partition_by: None,
                        predicate: None,
                    },
                )
                .await
                .unwrap();
        }
        let got = lake_owner(uri, &options, "9", 2).await.unwrap();
        let want = match (owner, files) {
            (Some("9"), _) | (None, false) => LakeOwner::Owned,
            (Some(other), _) => LakeOwner::Foreign {
                owner: Some(other.to_string()),
            },
            (None, true) => LakeOwner::Foreign { owner: None },
        };
        assert_eq!(got, want, "{name}");
    }
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                files_under(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// A lake moves whole, on a local disk (rename, a numbered name when taken) and through an
/// object store (copy, then delete), and reads the same rows where it went.
#[tokio::test]
async fn a_lake_moves_aside_whole() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake");
    let options = HashMap::new();
    let write_lake = |at: std::path::PathBuf| async move {
        let config = DeltaSinkConfig::new(
            at.to_str().unwrap(),
            "t7",
            TableKind::Log,
            key_value_schema(),
        );
        let mut lake = LakeTable::open(Arc::new(config)).await.unwrap();
        let plan = lake
            .plan(&[write_committable(&lake, 1, 0, 0, 6).await])
            .await
            .unwrap();
        lake.apply(&plan).await.unwrap();
    };
    let root_str = root.to_str().unwrap().to_string();
    let file_url = url::Url::from_directory_path(&root).unwrap().to_string();
    for (round, lake_root) in [root_str.clone(), root_str.clone(), file_url]
        .iter()
        .enumerate()
    {
        write_lake(root.join("db").join("t")).await;
        let moved = move_lake(lake_root, &options, "db/t", "__dropped/db.t-7")
            .await
            .unwrap();
        let want = match round {
            0 => format!("{root_str}/__dropped/db.t-7"),
            1 => format!("{root_str}/__dropped/db.t-7.1"),
            _ => format!("{}/__dropped/db.t-7", lake_root.trim_end_matches('/')),
        };
        assert_eq!(moved, want);
        // An object store on a local disk leaves empty directories; no file stays behind.
        assert_eq!(
            files_under(&root.join("db").join("t")),
            0,
            "round {round}: nothing of the lake stays behind"
        );
        assert_eq!(read_lake(&moved).await.len(), 6, "round {round}: {moved}");
    }
}

/// Outside readers see the same rows: Python `deltalake` reads the tiered table. Skipped (with
/// a message) where the Python package is not installed.
#[tokio::test]
async fn python_deltalake_reads_the_tiered_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut lake = LakeTable::open(log_config(dir.path())).await.unwrap();
    let committables = vec![
        write_committable(&lake, 1, 0, 0, 30).await,
        write_committable(&lake, 1, 3, 0, 12).await,
    ];
    plan_and_apply(&mut lake, &committables).await;
    if let Some(stdout) = silt_testkit::lake::python_deltalake(
        "python_deltalake_reads_the_tiered_table",
        "a = t.to_pyarrow_table()\n\
         print(a.num_rows, sorted(set(a.column('__bucket').to_pylist())), t.version())",
        dir.path().to_str().unwrap(),
    ) {
        assert_eq!(stdout, "42 [0, 3] 1");
    }
}

/// Stages primary-key changes `(key, Some(value) | None for a delete)` of `bucket` at offsets
/// from `start` and returns their committable.
async fn stage_changes(
    lake: &LakeTable,
    checkpoint_id: u64,
    bucket: i32,
    start: i64,
    changes: &[(i64, Option<&str>)],
) -> Committable {
    let schema = lake.staged_schema();
    let rows = changes.len() as i64;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0))),
        Arc::new(StringArray::from_iter(changes.iter().map(|c| c.1))),
    ];
    columns.extend(system_columns(bucket, start..start + rows));
    columns.push(Arc::new(Int8Array::from_iter_values(changes.iter().map(
        |c| match c.1 {
            Some(_) => ChangeType::UpdateAfter as i8,
            None => ChangeType::Delete as i8,
        },
    ))));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut bytes = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let path = stage_parquet(lake, &format!("test-{checkpoint_id}-{bucket}"), bytes)
        .await
        .unwrap();
    let mut committable = range_committable(checkpoint_id, bucket, start, rows);
    committable.staged = vec![path];
    committable
}

/// Plans `committables` and applies the plan: the commit it made.
async fn plan_and_apply(lake: &mut LakeTable, committables: &[Committable]) -> LakeCommit {
    let plan = lake.plan(committables).await.unwrap();
    lake.apply(&plan).await.unwrap()
}

/// The model of a primary-key lake: key -> (value, bucket, offset) of its live row, and the next
/// offset per bucket.
#[derive(Default)]
struct PkModel {
    rows: BTreeMap<i64, (String, i32, i64)>,
    next: BTreeMap<i32, i64>,
}

/// Stages `changes` (bucket = key % 2) as checkpoint `checkpoint`, commits them, applies them
/// to the model and checks the lake equals it.
async fn commit_round(
    lake: &mut LakeTable,
    table_dir: &Path,
    model: &mut PkModel,
    checkpoint: u64,
    changes: &[(i64, Option<String>)],
) -> LakeCommit {
    let mut committables = Vec::new();
    for bucket in 0..2 {
        let mine: Vec<(i64, Option<&str>)> = changes
            .iter()
            .filter(|(k, _)| (k % 2) as i32 == bucket)
            .map(|(k, v)| (*k, v.as_deref()))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let start = model.next.get(&bucket).copied().unwrap_or(0);
        for (i, (k, v)) in mine.iter().enumerate() {
            match v {
                Some(v) => model
                    .rows
                    .insert(*k, (v.to_string(), bucket, start + i as i64)),
                None => model.rows.remove(k),
            };
        }
        model.next.insert(bucket, start + mine.len() as i64);
        committables.push(stage_changes(lake, checkpoint, bucket, start, &mine).await);
    }
    let commit = plan_and_apply(lake, &committables).await;
    let got: Vec<(i64, String, i32, i64)> = read_lake(table_dir.to_str().unwrap())
        .await
        .into_iter()
        .map(|(k, v, _, b, o)| (k, v.unwrap(), b, o))
        .collect();
    let want: Vec<(i64, String, i32, i64)> = model
        .rows
        .iter()
        .map(|(k, (v, b, o))| (*k, v.clone(), *b, *o))
        .collect();
    assert_eq!(
        got, want,
        "checkpoint {checkpoint}: the lake differs from the model"
    );
    commit
}

/// Primary-key commits with deletion vectors: a commit adds only the changed keys' new images
/// and marks the old rows deleted; the lake equals the model through later commits on the same
/// files, a reopen that keeps the key index, a reopen that rebuilds it, and for Python
/// `deltalake` (skipped with a message where it is not installed).
#[tokio::test]
async fn pk_commits_mark_superseded_rows_in_deletion_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("lake");
    let config = |index: &Path| {
        let mut c = DeltaSinkConfig::new(
            table_dir.to_str().unwrap(),
            "t9",
            TableKind::PrimaryKey {
                key_columns: vec!["k".into()],
            },
            key_value_schema(),
        );
        c.key_index_dir = Some(index.to_path_buf());
        Arc::new(c)
    };
    let kept_index = dir.path().join("index");
    let mut lake = LakeTable::open(config(&kept_index)).await.unwrap();
    let mut model = PkModel::default();
    let rounds: Vec<Vec<(i64, Option<String>)>> = vec![
        (0..1000).map(|k| (k, Some(format!("a{k}")))).collect(),
        (0..50)
            .map(|k| (k, Some(format!("b{k}"))))
            .chain((100..120).map(|k| (k, None)))
            .collect(),
        (0..10)
            .map(|k| (k, Some(format!("c{k}"))))
            .chain([(5, None), (2000, Some("new".to_string())), (100, None)])
            .collect(),
        (990..1010).map(|k| (k, Some(format!("d{k}")))).collect(),
        (0..1000).step_by(7).map(|k| (k, None)).collect(),
    ];
    for (round, changes) in rounds.iter().enumerate() {
        if round == 3 {
            // A restart that keeps the index, then one that must rebuild it.
            lake = LakeTable::open(config(&kept_index)).await.unwrap();
        }
        if round == 4 {
            lake = LakeTable::open(config(&dir.path().join("other-index")))
                .await
                .unwrap();
        }
        let commit =
            commit_round(&mut lake, &table_dir, &mut model, round as u64 + 1, changes).await;
        // The commit writes the new images only; the old rows stay where they are, deleted
        // by vectors (no file is rewritten).
        let log = delta_log(&table_dir);
        let last = log.last().unwrap();
        assert_eq!(last.version, commit.delta_version);
        // The last change per key decides (key 5 of round 2 is updated, then deleted).
        let last_change: BTreeMap<i64, bool> =
            changes.iter().map(|(k, v)| (*k, v.is_some())).collect();
        let upserts = last_change.values().filter(|u| **u).count() as u64;
        assert_eq!(last.new_rows, upserts, "round {round}: rows written");
        if round > 0 {
            assert!(
                last.vectors > 0,
                "round {round}: no deletion vector in the commit"
            );
        }
    }
    let offsets = read_lake_offsets(table_dir.to_str().unwrap(), &HashMap::new(), "t9", &keys(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offsets.bucket_offsets, table_buckets(model.next.clone()));

    let Some(stdout) = silt_testkit::lake::python_deltalake(
        "pk_commits_mark_superseded_rows_in_deletion_vectors",
        "import pyarrow as pa\n\
         a = pa.RecordBatchReader.from_stream(t.scan(columns=['k', 'v'])).read_all()\n\
         rows = sorted(zip(a.column('k').to_pylist(), a.column('v').to_pylist()))\n\
         print(len(rows), sum(k for k, _ in rows), rows[0], rows[-1])",
        table_dir.to_str().unwrap(),
    ) else {
        return;
    };
    let rows = &model.rows;
    let (first, last) = (rows.iter().next().unwrap(), rows.iter().last().unwrap());
    assert_eq!(
        stdout,
        format!(
            "{} {} ({}, '{}') ({}, '{}')",
            rows.len(),
            rows.keys().sum::<i64>(),
            first.0,
            first.1.0,
            last.0,
            last.1.0
        )
    );
}

/// Compaction in primary-key commits: a bucket's small files are rewritten together once there
/// are more than `small_files_max`, and a file that lost half its rows is rewritten without
/// them; the lake equals the model after every commit and the files per bucket stay bounded.
#[tokio::test]
async fn pk_commits_compact_small_and_mostly_deleted_files() {
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("lake");
    let mut config = DeltaSinkConfig::new(
        table_dir.to_str().unwrap(),
        "t10",
        TableKind::PrimaryKey {
            key_columns: vec!["k".into()],
        },
        key_value_schema(),
    );
    config.key_index_dir = Some(dir.path().join("index"));
    config.small_files_max = 2;
    let mut lake = LakeTable::open(Arc::new(config)).await.unwrap();
    let mut rng = SmallRng::seed_from_u64(10);
    let mut model = PkModel::default();
    let mut vectors_seen = 0;
    for round in 0..14u64 {
        let changes: Vec<(i64, Option<String>)> = match round {
            0 => (0..200).map(|k| (k, Some(format!("a{k}")))).collect(),
            // Most of the first file of each bucket goes: it is rewritten, not vectored.
            7 => (0..160).map(|k| (k, None)).collect(),
            _ => (0..25)
                .map(|i| {
                    let k = rng.random_range(0..260);
                    let v = (rng.random_range(0..5) > 0).then(|| format!("r{round}-{i}"));
                    (k, v)
                })
                .collect(),
        };
        let commit = commit_round(&mut lake, &table_dir, &mut model, round + 1, &changes).await;
        let mut per_bucket: BTreeMap<String, usize> = BTreeMap::new();
        for f in lake.table().snapshot().unwrap().log_data().iter() {
            let bucket = f.path().split('/').next().unwrap().to_string();
            *per_bucket.entry(bucket).or_default() += 1;
            vectors_seen += f.deletion_vector_descriptor().is_some() as usize;
        }
        assert!(
            per_bucket.values().all(|&n| n <= 3),
            "round {round}: files per bucket {per_bucket:?} (small_files_max 2)"
        );
        if round == 7 {
            let log = delta_log(&table_dir);
            let last = log.last().unwrap();
            assert!(
                last.removes > 0 && last.new_rows > 0,
                "round 7 rewrites the mostly deleted files: {last:?}"
            );
            let compaction = commit.compaction.expect("round 7 reports its compaction");
            assert!(
                compaction.files > 0 && compaction.rows > 0 && compaction.bytes > 0,
                "{compaction:?}"
            );
        }
    }
    assert!(vectors_seen > 0, "no file ever carried a deletion vector");
}

/// Every file under `dir` (recursively) whose path relative to `dir` passes `keep`.
fn relative_files(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut found: Vec<String> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().is_file())
        .map(|entry| {
            entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .filter(|rel| keep(rel))
        .collect();
    found.sort();
    found
}

/// Issue 15 (lake maintenance): nothing deleted what a newer version no longer needed, so a
/// table tiered every second kept every compacted file, every commit file and every orphan
/// forever. Within the retention the committer's maintenance keeps them all; past it, the files
/// on disk are the active ones, an attempt that never committed is gone, expired commit files
/// are cleaned up, and the table still reads every offset exactly once.
#[tokio::test]
async fn maintenance_deletes_only_what_no_version_inside_the_retention_needs() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let open = |files: Duration| {
        let mut config = DeltaSinkConfig::new(&uri, "t7", TableKind::Log, key_value_schema());
        config.small_files_max = 4;
        config.target_file_bytes = 1 << 20;
        config.retention = Retention {
            files,
            in_flight_max: files,
            interval: Duration::ZERO,
        };
        LakeTable::open(Arc::new(config))
    };
    let commit_files = |dir: &Path| {
        relative_files(dir, &|p| {
            p.starts_with("_delta_log") && p.ends_with(".json")
        })
    };
    let active = active_paths;

    let mut lake = open(Duration::from_secs(3600)).await.unwrap();
    // A tiering attempt that wrote its files and died before committing them.
    let orphan = write_committable(&lake, 999, 0, 1_000_000, 3).await;
    let orphan_path = orphan.adds[0].path.clone();
    std::fs::create_dir_all(dir.path().join("_silt_staging")).unwrap();
    std::fs::write(dir.path().join("_silt_staging/stale.parquet"), b"changes").unwrap();
    let commits = 30i64;
    for n in 0..commits {
        let committables = vec![write_committable(&lake, n as u64 + 1, 0, n * 10, 10).await];
        plan_and_apply(&mut lake, &committables).await;
    }
    let report = lake.maintain(&Default::default()).await.unwrap();
    assert_eq!(
        report.files_deleted + report.staged_deleted,
        0,
        "inside the retention: {report:?}"
    );
    let on_disk = data_files(dir.path());
    assert!(
        on_disk.len() > active(&lake).len() + 1,
        "compaction removed files that the retention still keeps: {} on disk, {} active",
        on_disk.len(),
        active(&lake).len()
    );
    assert!(
        commit_files(dir.path()).len() > commits as usize,
        "every commit file is inside the retention"
    );

    // Past the retention: reopen under a 1 s retention (the properties follow), let it pass.
    drop(lake);
    let mut lake = open(Duration::from_secs(1)).await.unwrap();
    let configuration = lake
        .table()
        .snapshot()
        .unwrap()
        .metadata()
        .configuration()
        .clone();
    assert_eq!(
        configuration
            .get("delta.deletedFileRetentionDuration")
            .map(String::as_str),
        Some("interval 1 seconds")
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let committables =
        vec![write_committable(&lake, commits as u64 + 1, 0, commits * 10, 10).await];
    plan_and_apply(&mut lake, &committables).await;
    // A compaction prepared after that commit waits for the next one: its files are kept.
    let waiting = lake.settle_compaction().await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // older than the retention too
    let report = lake.maintain(&Default::default()).await.unwrap();
    assert!(
        report.files_deleted > 0 && report.bytes_reclaimed > 0,
        "{report:?}"
    );
    assert_eq!(report.staged_deleted, 1, "{report:?}");
    let on_disk = data_files(dir.path());
    let mut kept = active(&lake);
    kept.extend(waiting.iter().cloned());
    kept.sort();
    assert_eq!(
        on_disk, kept,
        "past the retention only active files stay, and a prepared compaction's"
    );
    assert_eq!(
        (report.files_on_disk, report.active_files),
        (on_disk.len() as u64, active(&lake).len() as u64),
        "{report:?}"
    );
    assert!(
        !dir.path().join(&orphan_path).exists(),
        "the uncommitted attempt's file is gone"
    );
    assert!(!dir.path().join("_silt_staging/stale.parquet").exists());
    // Commit files older than the retention and before the newest checkpoint are cleaned up by
    // the post-commit hook; the table still loads and reads every offset once.
    let kept = commit_files(dir.path());
    assert!(kept.len() < 20, "commit files kept: {kept:?}");
    let mut offsets: Vec<i64> = read_lake(&uri).await.iter().map(|r| r.4).collect();
    offsets.sort();
    assert_eq!(offsets, (0..(commits + 1) * 10).collect::<Vec<_>>());
    let lake_offsets = read_lake_offsets(&uri, &HashMap::new(), "t7", &keys(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        lake_offsets.bucket_offsets.get(&BucketKey::table(0)),
        Some(&((commits + 1) * 10))
    );
    // An outside reader (python deltalake) after maintenance: every offset once.
    if let Some(stdout) = silt_testkit::lake::python_deltalake(
        "maintenance_deletes_only_what_no_version_inside_the_retention_needs",
        "a = t.to_pyarrow_table()\n\
         o = a.column('__offset').to_pylist()\n\
         print(len(o), len(set(o)), min(o), max(o))",
        &uri,
    ) {
        let all = (commits + 1) * 10;
        assert_eq!(stdout, format!("{all} {all} 0 {}", all - 1));
    }
}

/// Deletion-vector files under `dir` (relative paths).
fn vector_files(dir: &Path) -> BTreeSet<String> {
    relative_files(dir, &|p| {
        p.contains("deletion_vector_") && p.ends_with(".bin")
    })
    .into_iter()
    .collect()
}

/// Rows of the lake at `version` (time travel), sorted.
async fn read_lake_at(uri: &str, version: u64) -> Vec<LakeRow> {
    let url = deltalake::ensure_table_uri(uri).unwrap();
    read_lake_table(
        deltalake::open_table_with_version(url, version)
            .await
            .unwrap(),
    )
    .await
}

/// A primary-key lake with deletion vectors at `<dir>/lake` (its key index under `<dir>`) whose
/// maintenance keeps what is younger than `age`, with `adjust` applied to its configuration.
async fn open_vectored_lake(
    dir: &Path,
    age: Duration,
    adjust: impl FnOnce(&mut DeltaSinkConfig),
) -> LakeTable {
    let table_dir = dir.join("lake");
    let mut config = DeltaSinkConfig::new(
        table_dir.to_str().unwrap(),
        "t9",
        TableKind::PrimaryKey {
            key_columns: vec!["k".into()],
        },
        key_value_schema(),
    );
    config.key_index_dir = Some(dir.join("index"));
    config.retention = Retention {
        files: age,
        in_flight_max: age,
        interval: Duration::ZERO,
    };
    adjust(&mut config);
    LakeTable::open(Arc::new(config)).await.unwrap()
}

/// Issue 15 (lake maintenance): deltalake's full vacuum keeps the data files of recent
/// tombstones but not their deletion vectors. A vector older than the retention that a commit
/// has just superseded was deleted at once, so the previous version (a running query's, or time
/// travel inside the retention) could no longer be read. Maintenance keeps it until the commit
/// that superseded it is older than the retention, then deletes it.
#[tokio::test]
async fn a_deletion_vector_superseded_inside_the_retention_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("lake");
    let uri = table_dir.to_str().unwrap().to_string();
    let age = Duration::from_secs(2);
    let mut lake = open_vectored_lake(dir.path(), age, |_| {}).await;
    let mut model = PkModel::default();
    let round = |from: i64, to: i64, tag: &str| -> Vec<(i64, Option<String>)> {
        (from..to).map(|k| (k, Some(format!("{tag}{k}")))).collect()
    };
    commit_round(&mut lake, &table_dir, &mut model, 1, &round(0, 1000, "a")).await;
    let second = commit_round(&mut lake, &table_dir, &mut model, 2, &round(0, 50, "b")).await;
    let at_second = read_lake_at(&uri, second.delta_version).await;
    let first_vectors = vector_files(&table_dir);
    assert!(
        !first_vectors.is_empty(),
        "the second commit left deletion vectors"
    );
    // Waits past the retention, commits `changes` as checkpoint `checkpoint` and maintains the
    // table: the maintenance report and the deletion vectors on disk after it.
    let mut aged_commit = async |checkpoint: u64, changes: Vec<(i64, Option<String>)>| {
        tokio::time::sleep(age + Duration::from_millis(500)).await;
        commit_round(&mut lake, &table_dir, &mut model, checkpoint, &changes).await;
        let report = lake.maintain(&Default::default()).await.unwrap();
        (report, vector_files(&table_dir))
    };
    // The vectors age past the retention; then a commit supersedes them (same files, more
    // deleted rows).
    let (report, on_disk) = aged_commit(3, round(50, 60, "c")).await;
    assert!(
        first_vectors.is_subset(&on_disk),
        "superseded just now, so kept: {first_vectors:?} on disk {on_disk:?} ({report:?})"
    );
    assert_eq!(
        read_lake_at(&uri, second.delta_version).await,
        at_second,
        "the previous version still reads"
    );
    // Once the superseding commit is older than the retention, they go.
    let (report, on_disk) = aged_commit(4, round(60, 70, "d")).await;
    assert!(
        first_vectors.is_disjoint(&on_disk),
        "expired: {first_vectors:?} on disk {on_disk:?} ({report:?})"
    );
    assert!(report.files_deleted > 0, "{report:?}");
}

/// Issue 33 (item 9): the record of the deletion vectors recent commits superseded is bounded.
/// Past its bound it cannot tell which old vectors a version inside the retention still reads,
/// so maintenance keeps them all and says how many wait, rather than guess: the superseded
/// version still reads.
#[tokio::test]
async fn a_full_record_of_removes_keeps_the_old_deletion_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("lake");
    let uri = table_dir.to_str().unwrap().to_string();
    let age = Duration::from_secs(1);
    let mut lake = open_vectored_lake(dir.path(), age, |config| {
        config.vacuum_removes_bytes_max = 0;
    })
    .await;
    let mut model = PkModel::default();
    let round = |from: i64, to: i64, tag: &str| -> Vec<(i64, Option<String>)> {
        (from..to).map(|k| (k, Some(format!("{tag}{k}")))).collect()
    };
    commit_round(&mut lake, &table_dir, &mut model, 1, &round(0, 1000, "a")).await;
    let second = commit_round(&mut lake, &table_dir, &mut model, 2, &round(0, 50, "b")).await;
    let at_second = read_lake_at(&uri, second.delta_version).await;
    let first_vectors = vector_files(&table_dir);
    assert!(
        !first_vectors.is_empty(),
        "the second commit left deletion vectors"
    );
    tokio::time::sleep(age + Duration::from_millis(500)).await;
    // Supersedes the first vectors, which are older than the age by now.
    commit_round(&mut lake, &table_dir, &mut model, 3, &round(50, 60, "c")).await;
    let report = lake.maintain(&Default::default()).await.unwrap();
    let on_disk = vector_files(&table_dir);
    assert!(
        first_vectors.is_subset(&on_disk),
        "the full record keeps them: {first_vectors:?} on disk {on_disk:?} ({report:?})"
    );
    assert!(
        report.vectors_waiting >= first_vectors.len() as u64,
        "{report:?}"
    );
    assert_eq!(
        read_lake_at(&uri, second.delta_version).await,
        at_second,
        "the superseded version still reads"
    );
}

/// The user columns of a day-partitioned table: the key-value columns, then `dt`.
fn day_key_value_schema() -> SchemaRef {
    let mut fields: Vec<Field> = key_value_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("dt", DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// Writes rows `start..start + rows` of bucket `bucket` of the partition `(day, id)` of a lake
/// over [`day_key_value_schema`] without committing them; the committable of writer `writer`
/// that adds them.
async fn write_partition_committable(
    lake: &LakeTable,
    (checkpoint_id, writer): (u64, u32),
    (day, partition): (&str, i64),
    bucket: i32,
    (start, rows): (i64, i64),
) -> Committable {
    let mut writer_files = RecordBatchWriter::for_table(lake.table()).unwrap();
    let offsets = start..start + rows;
    let [ts, buckets, offset, timestamp] = system_columns(bucket, offsets.clone());
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(offsets.clone())),
        Arc::new(StringArray::from_iter_values(
            offsets.clone().map(|o| format!("v{o}")),
        )),
        ts,
        Arc::new(StringArray::from_iter_values(offsets.clone().map(|_| day))),
        Arc::new(Int64Array::from_iter_values(offsets.map(|_| partition))),
        buckets,
        offset,
        timestamp,
    ];
    let batch = RecordBatch::try_new(lake.lake_schema().clone(), columns).unwrap();
    writer_files.write(batch).await.unwrap();
    Committable {
        checkpoint_id,
        writer,
        adds: writer_files.flush().await.unwrap(),
        staged: Vec::new(),
        buckets: BTreeMap::from([(
            BucketKey::partition(partition, bucket),
            BucketRange {
                follows: Some(start),
                start,
                end: start + rows,
                rows: rows as u64,
            },
        )]),
    }
}

/// Issue 33 (item 10): maintenance took only paths starting `__bucket=` for data files, so the
/// compacted files and the orphans of a partitioned lake
/// (`dt=.../__partition_id=.../__bucket=.../part-...parquet`) stayed forever and
/// `files_on_disk` did not count them. Past the retention only the active files stay, in every
/// partition, and the report counts what is on disk.
#[tokio::test]
async fn maintenance_deletes_the_leftovers_of_a_partitioned_lake() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut config = DeltaSinkConfig::new(&uri, "t10", TableKind::Log, day_key_value_schema());
    config.partition_keys = vec!["dt".to_string()];
    config.small_files_max = 4;
    config.target_file_bytes = 1 << 20;
    let age = Duration::from_secs(1);
    config.retention = Retention {
        files: age,
        in_flight_max: age,
        interval: Duration::ZERO,
    };
    let mut lake = LakeTable::open(Arc::new(config)).await.unwrap();
    let days = [("2026-12-01", 4), ("2026-12-02", 5)];
    // A tiering attempt that wrote its file and died before committing it.
    let orphan = write_partition_committable(&lake, (999, 0), days[0], 0, (1_000_000, 3)).await;
    let orphan_path = orphan.adds[0].path.clone();
    assert!(orphan_path.starts_with("dt=2026-12-01/__partition_id=4/__bucket=0/"));
    for n in 0..16i64 {
        let mut committables = Vec::new();
        for (writer, day) in days.iter().enumerate() {
            let checkpoint = (n as u64 + 1, writer as u32);
            committables
                .push(write_partition_committable(&lake, checkpoint, *day, 0, (n * 10, 10)).await);
        }
        plan_and_apply(&mut lake, &committables).await;
    }
    let parquet_files = || {
        relative_files(dir.path(), &|p| {
            p.ends_with(".parquet") && !p.starts_with('_')
        })
    };
    assert!(
        parquet_files().len() > active_paths(&lake).len() + 1,
        "compaction left files behind to delete: {:?}",
        parquet_files()
    );
    // A compaction prepared after the last commit waits for the next one: its files are kept.
    let waiting = lake.settle_compaction().await;
    tokio::time::sleep(age + Duration::from_millis(500)).await;
    let report = lake.maintain(&Default::default()).await.unwrap();
    let on_disk = parquet_files();
    let mut kept = active_paths(&lake);
    kept.extend(waiting.iter().cloned());
    kept.sort();
    assert_eq!(
        on_disk, kept,
        "past the retention only active files stay ({report:?})"
    );
    assert!(report.files_deleted > 0, "{report:?}");
    assert_eq!(report.files_on_disk, on_disk.len() as u64, "{report:?}");
    assert!(
        !dir.path().join(&orphan_path).exists(),
        "the orphan is gone"
    );
    let mut offsets: Vec<i64> = read_lake(&uri).await.iter().map(|r| r.4).collect();
    offsets.sort();
    let want: Vec<i64> = (0..160).flat_map(|o| [o, o]).collect();
    assert_eq!(offsets, want, "every offset of both partitions once");
}

/// Buckets `0..n` of an unpartitioned table.
fn keys(n: usize) -> Vec<BucketKey> {
    (0..n as i32).map(BucketKey::table).collect()
}
