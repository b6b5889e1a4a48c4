//! The runtime's promises, each as a test that fails when the promise is broken: exactly-once
//! under failures, barrier alignment, bounded memory under backpressure, stop and cancel with a
//! checkpoint in flight, and restore that ignores incomplete checkpoints.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_engine::checkpoint::CheckpointStorage;
use silt_engine::{
    ChannelConfig, CompletedCheckpoint, JobConfig, JobGraph, JobHandle, JobManager, JobState,
    LocalDirStorage, Operator, Output, Partitioning, RestartStrategy, RestoredState, Result,
    SourcePoll, TaskContext,
};
use silt_testkit::wait::{self, Look};

fn hash_key() -> Partitioning {
    Partitioning::Hash {
        key_columns: vec!["key".into()],
    }
}

fn job_config(name: &str, storage: Arc<dyn CheckpointStorage>, interval_ms: u64) -> JobConfig {
    let mut config = JobConfig::new(name, storage);
    config.checkpoint.interval = Some(Duration::from_millis(interval_ms));
    config.checkpoint.retained_max = 10_000;
    config.restart = RestartStrategy::FixedDelay {
        delay: Duration::from_millis(10),
        attempts_max: 100,
    };
    config
}

/// As [`job_config`], restarting at most twice in a row, 1 ms apart.
fn restarting_twice_at_most(
    name: &str,
    storage: Arc<dyn CheckpointStorage>,
    interval_ms: u64,
) -> JobConfig {
    let mut config = job_config(name, storage, interval_ms);
    config.restart = RestartStrategy::FixedDelay {
        delay: Duration::from_millis(1),
        attempts_max: 2,
    };
    config
}

struct Pipeline {
    sources: u32,
    counters: u32,
    sinks: u32,
    records: u64,
    keys: u64,
    seed: u64,
    failures: Arc<Failures>,
    store: Arc<CommitStore>,
    commit_at_snapshot: bool,
    restored_from: Arc<Mutex<Vec<u64>>>,
}

impl Pipeline {
    /// `sources` sources into as many counters into one sink, over `records` records of `keys`
    /// keys (drawn from `seed`): no injected failure, and a sink that commits on
    /// notify-complete, as it should.
    fn fault_free(sources: u32, records: u64, keys: u64, seed: u64) -> Pipeline {
        Pipeline {
            sources,
            counters: sources,
            sinks: 1,
            records,
            keys,
            seed,
            failures: Failures::new(vec![]),
            store: Arc::default(),
            commit_at_snapshot: false,
            restored_from: Arc::default(),
        }
    }
}

/// Checkpoint storage over `dir` whose checkpoint `checkpoint` writes every state and then
/// fails before its metadata, as a crash at the commit point leaves it.
fn storage_failing_metadata_of(dir: &std::path::Path, checkpoint: u64) -> Arc<FaultyStorage> {
    let storage = FaultyStorage::new(Arc::new(LocalDirStorage::new(dir)));
    *storage.fail_metadata_of.lock().unwrap() = vec![checkpoint];
    Arc::new(storage)
}

/// seq source → hash(key) → keyed running count → hash(key) → transactional sink.
fn pipeline_graph(p: &Pipeline) -> JobGraph {
    let mut g = JobGraph::new();
    let (seed, records, keys, failures, restored_from) = (
        p.seed,
        p.records,
        p.keys,
        p.failures.clone(),
        p.restored_from.clone(),
    );
    let src = g.add_source(
        "source",
        p.sources,
        move |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut s = SeqSource::new(ctx, seed, records, keys, failures.clone());
            s.restored_from = restored_from.clone();
            Ok(Box::new(s))
        },
    );
    let count = g.add_operator(
        "count",
        p.counters,
        |_: &TaskContext| -> Result<Box<dyn Operator>> { Ok(Box::new(KeyedCount::default())) },
    );
    let (store, commit_at_snapshot) = (p.store.clone(), p.commit_at_snapshot);
    let sink = g.add_operator(
        "sink",
        p.sinks,
        move |ctx: &TaskContext| -> Result<Box<dyn Operator>> {
            let mut sink = TxSink::new(ctx, store.clone());
            sink.commit_at_snapshot = commit_at_snapshot;
            Ok(Box::new(sink))
        },
    );
    g.connect(src, count, hash_key());
    g.connect(count, sink, hash_key());
    g
}

fn failure_points(seed: u64, sources: u32, records: u64, n: usize) -> Vec<(u32, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (rng.random_range(0..sources), rng.random_range(0..records)))
        .collect()
}

async fn run_to_end(graph: JobGraph, config: JobConfig) -> silt_engine::JobMetrics {
    let (job, state) = run_until_it_ends(graph, config, Duration::from_secs(120)).await;
    assert_eq!(state, JobState::Finished, "job should finish");
    job.metrics()
}

/// Runs `graph` under `config` until the job ends, for at most `deadline`: the job, and the
/// state it ended in.
async fn run_until_it_ends(
    graph: JobGraph,
    config: JobConfig,
    deadline: Duration,
) -> (JobHandle, JobState) {
    let job = JobManager::new()
        .submit(graph, config)
        .expect("valid graph");
    let state = tokio::time::timeout(deadline, job.wait())
        .await
        .unwrap_or_else(|_| panic!("the job did not end within {deadline:?}"));
    (job, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_under_injected_failures() {
    for (seed, (sources, counters, sinks)) in [
        (1u64, (2, 3, 2)),
        (2, (1, 1, 1)),
        (3, (3, 2, 1)),
        (4, (2, 2, 3)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = FaultyStorage::new(Arc::new(LocalDirStorage::new(dir.path())));
        storage.metadata_delay = Duration::from_millis(3);
        // One crash at the commit point: every state written, the metadata not.
        *storage.fail_metadata_of.lock().unwrap() = vec![4];
        let storage = Arc::new(storage);
        let (records, keys) = (8_000, 7);
        let failures = Failures::new(failure_points(seed, sources, records, 4));
        let p = Pipeline {
            counters,
            sinks,
            failures: failures.clone(),
            ..Pipeline::fault_free(sources, records, keys, seed)
        };
        let metrics = run_to_end(
            pipeline_graph(&p),
            job_config("exactly-once", storage.clone(), 5),
        )
        .await;

        let fired = failures.fired.load(Ordering::SeqCst)
            + storage.metadata_writes_failed.load(Ordering::SeqCst);
        assert!(
            fired >= 4,
            "seed {seed}: the failures must actually happen (fired {fired})"
        );
        // Failures of two subtasks can land in one attempt; each attempt restarts once.
        assert!(
            metrics.restarts >= 1 && metrics.restarts as u64 <= fired,
            "seed {seed}: {} restarts for {fired} failures",
            metrics.restarts
        );
        let got = p.store.sorted_rows();
        let want = expected_rows(sources, records, keys);
        assert_eq!(
            got.len(),
            want.len(),
            "seed {seed}: row count (lost or duplicated rows)"
        );
        assert!(
            got == want,
            "seed {seed}: visible output differs from the failure-free output"
        );
    }
}

/// The negative control: a sink that commits at the barrier instead of on notify-complete
/// duplicates rows when the checkpoint then fails to complete. Proves the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn committing_before_notify_complete_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage_failing_metadata_of(dir.path(), 3);
    let p = Pipeline {
        commit_at_snapshot: true,
        ..Pipeline::fault_free(1, 4_000, 5, 9)
    };
    run_to_end(
        pipeline_graph(&p),
        job_config("broken-sink", storage.clone(), 5),
    )
    .await;
    assert_eq!(storage.metadata_writes_failed.load(Ordering::SeqCst), 1);
    let got = p.store.sorted_rows();
    assert!(
        got.len() > 4_000,
        "an early-committing sink must show duplicates, got {} rows",
        got.len()
    );
}

/// Counts rows per input and remembers the highest value seen; its snapshot is (count, max)
/// per input.
#[derive(Default)]
struct PerInputCount {
    counts: [u64; 2],
}

#[async_trait]
impl Operator for PerInputCount {
    async fn open(&mut self, _ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        if let Some(mut s) = restored.own().cloned() {
            self.counts = [s.get_u64(), s.get_u64()];
        }
        Ok(())
    }
    async fn process(&mut self, input: usize, batch: RecordBatch, _out: &mut Output) -> Result<()> {
        // A slow consumer: the fast input would run ahead if its channel were not blocked.
        self.counts[input] += batch.num_rows() as u64;
        tokio::time::sleep(Duration::from_micros(50)).await;
        Ok(())
    }
    async fn snapshot(&mut self, _id: u64, _out: &mut Output) -> Result<Bytes> {
        let mut b = BytesMut::new();
        b.put_u64(self.counts[0]);
        b.put_u64(self.counts[1]);
        Ok(b.freeze())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn barriers_align_across_inputs_of_different_speed() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let mut g = JobGraph::new();
    let fast = g.add_source(
        "fast",
        1,
        |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut s = SeqSource::new(ctx, 1, 60_000, 3, Failures::new(vec![]));
            s.pause = Duration::ZERO;
            Ok(Box::new(s))
        },
    );
    let slow = g.add_source(
        "slow",
        1,
        |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut s = SeqSource::new(ctx, 2, 600, 3, Failures::new(vec![]));
            s.batch_rows_max = 2;
            s.pause = Duration::from_millis(2);
            Ok(Box::new(s))
        },
    );
    let join = g.add_operator("join", 1, |_: &TaskContext| -> Result<Box<dyn Operator>> {
        Ok(Box::new(PerInputCount::default()))
    });
    g.connect(fast, join, Partitioning::Forward);
    g.connect(slow, join, Partitioning::Forward);
    let mut config = job_config("alignment", storage.clone(), 15);
    config.channel = ChannelConfig {
        capacity_messages: 8,
        capacity_bytes: 1 << 20,
    };
    run_to_end(g, config).await;

    let ids = storage.complete_checkpoints().await.unwrap();
    assert!(
        ids.len() >= 5,
        "need several checkpoints taken while both inputs ran, got {}",
        ids.len()
    );
    let mut mid_stream = 0;
    for id in ids {
        let c = storage.load(id).await.unwrap();
        let position = |v: &str| c.states[&(v.to_string(), 0)].clone().get_u64();
        let mut join = c.states[&("join".to_string(), 0)].clone();
        let (fast_seen, slow_seen) = (join.get_u64(), join.get_u64());
        // The snapshot holds exactly the records before the barrier on each input: none after.
        assert_eq!(
            fast_seen,
            position("fast"),
            "checkpoint {id}: fast input leaked across the barrier"
        );
        assert_eq!(
            slow_seen,
            position("slow"),
            "checkpoint {id}: slow input leaked across the barrier"
        );
        if position("fast") < 60_000 && position("slow") < 600 {
            mid_stream += 1;
        }
    }
    assert!(
        mid_stream >= 2,
        "too few checkpoints while both inputs were running ({mid_stream})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backpressure_bounds_buffered_memory() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let store = Arc::new(CommitStore::default());
    let (sources, records, keys) = (2u32, 20_000u64, 11u64);
    let mut g = JobGraph::new();
    let src = g.add_source(
        "source",
        sources,
        move |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut s = SeqSource::new(ctx, 5, records, keys, Failures::new(vec![]));
            s.pause = Duration::ZERO;
            s.batch_rows_max = 100;
            Ok(Box::new(s))
        },
    );
    let count = g.add_operator("count", 2, |_: &TaskContext| -> Result<Box<dyn Operator>> {
        Ok(Box::new(KeyedCount::default()))
    });
    let sink_store = store.clone();
    let sink = g.add_operator(
        "sink",
        1,
        move |ctx: &TaskContext| -> Result<Box<dyn Operator>> {
            let mut s = TxSink::new(ctx, sink_store.clone());
            s.delay_per_batch = Duration::from_micros(500);
            Ok(Box::new(s))
        },
    );
    g.connect(src, count, hash_key());
    g.connect(count, sink, Partitioning::Rebalance);
    let capacity_bytes = 16 * 1024;
    let mut config = job_config("backpressure", storage, 50);
    config.channel = ChannelConfig {
        capacity_messages: 1024,
        capacity_bytes,
    };
    // 2x2 channels source→count, 2x1 count→sink.
    let bound = 6 * capacity_bytes;
    let metrics = run_to_end(g, config).await;

    assert_eq!(
        store.sorted_rows(),
        expected_rows(sources, records, keys),
        "every row arrives once"
    );
    assert!(
        metrics.buffered_bytes_peak <= bound,
        "channels held {} bytes at peak, over the bound of {bound}",
        metrics.buffered_bytes_peak
    );
    assert!(
        metrics.buffered_bytes_peak >= capacity_bytes / 2,
        "the channels never filled: the sink was not slow enough"
    );
    let source = metrics
        .operators
        .iter()
        .find(|o| o.name == "source")
        .unwrap();
    assert!(
        source.backpressured_ms >= 100,
        "the source should have waited on full channels, waited {} ms",
        source.backpressured_ms
    );
    assert_eq!(metrics.buffered_bytes, 0, "nothing buffered after the end");
}

/// An unbounded source and a sink whose snapshot takes a while, so checkpoints stay in flight.
fn in_flight_job(
    storage: Arc<dyn CheckpointStorage>,
    store: Arc<CommitStore>,
    snapshots: Arc<std::sync::atomic::AtomicU64>,
) -> (JobGraph, JobConfig) {
    let mut g = JobGraph::new();
    let src = g.add_source(
        "source",
        2,
        |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut s = SeqSource::new(ctx, 7, 0, 5, Failures::new(vec![]));
            s.bounded = false;
            s.pause = Duration::from_millis(1);
            Ok(Box::new(s))
        },
    );
    let count = g.add_operator("count", 2, |_: &TaskContext| -> Result<Box<dyn Operator>> {
        Ok(Box::new(KeyedCount::default()))
    });
    let sink = g.add_operator(
        "sink",
        1,
        move |ctx: &TaskContext| -> Result<Box<dyn Operator>> {
            let mut s = TxSink::new(ctx, store.clone());
            s.snapshot_delay = Duration::from_millis(300);
            s.snapshots_started = snapshots.clone();
            Ok(Box::new(s))
        },
    );
    g.connect(src, count, hash_key());
    g.connect(count, sink, hash_key());
    (g, job_config("in-flight", storage, 20))
}

/// A job of [`in_flight_job`] over scratch storage, once a checkpoint is in flight: one
/// completed, the second started.
struct InFlightJob {
    _dir: tempfile::TempDir,
    storage: Arc<dyn CheckpointStorage>,
    store: Arc<CommitStore>,
    job: JobHandle,
}

async fn start_with_a_checkpoint_in_flight() -> InFlightJob {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let store = Arc::new(CommitStore::default());
    let snapshots = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (g, config) = in_flight_job(storage.clone(), store.clone(), snapshots.clone());
    let job = JobManager::new().submit(g, config).unwrap();
    wait_until("a checkpoint is in flight", || {
        snapshots.load(Ordering::SeqCst) >= 2
    })
    .await;
    InFlightJob {
        _dir: dir,
        storage,
        store,
        job,
    }
}

/// How far each of the two sources of [`in_flight_job`] had read in `checkpoint`.
fn source_positions(checkpoint: &CompletedCheckpoint) -> Vec<u64> {
    (0..2)
        .map(|i| {
            checkpoint.states[&("source".to_string(), i)]
                .clone()
                .get_u64()
        })
        .collect()
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let every = Duration::from_millis(2);
    wait::until(what, Duration::from_secs(30), every, || {
        let look = if condition() {
            Look::Done(())
        } else {
            Look::NotYet("not yet".to_string())
        };
        async move { Ok(look) }
    })
    .await
    .unwrap_or_else(|e| panic!("timed out waiting until {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_with_a_checkpoint_in_flight_takes_a_final_checkpoint() {
    // Let one checkpoint complete, then stop while the second is in flight.
    let in_flight = start_with_a_checkpoint_in_flight().await;
    let (storage, store, job) = (&in_flight.storage, &in_flight.store, &in_flight.job);
    let completed_before = storage.complete_checkpoints().await.unwrap();
    let final_id = tokio::time::timeout(Duration::from_secs(30), job.stop())
        .await
        .expect("stop returns")
        .expect("stop succeeds");
    assert_eq!(job.state(), JobState::Finished);

    let complete = storage.complete_checkpoints().await.unwrap();
    assert_eq!(
        complete.last(),
        Some(&final_id),
        "the final checkpoint is the newest"
    );
    assert!(
        final_id > completed_before.last().copied().unwrap_or(0) + 1,
        "the in-flight checkpoint completed before the final one"
    );
    let last = storage.load(final_id).await.unwrap();
    assert!(last.metadata.is_final);
    // Everything the sources emitted before the final barrier is visible, once.
    assert_eq!(
        store.sorted_rows(),
        expected_rows_at(&source_positions(&last), 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_with_a_checkpoint_in_flight_abandons_it() {
    let in_flight = start_with_a_checkpoint_in_flight().await;
    let (storage, store, job) = (&in_flight.storage, &in_flight.store, &in_flight.job);
    let started = Instant::now();
    job.cancel().await;
    let took = started.elapsed();
    assert_eq!(job.state(), JobState::Cancelled);
    assert!(
        took < Duration::from_millis(250),
        "cancel waited for the checkpoint ({took:?})"
    );
    let complete = storage.complete_checkpoints().await.unwrap();
    assert_eq!(
        complete.len(),
        1,
        "only the first checkpoint completed: {complete:?}"
    );
    // What is visible is exactly the first checkpoint's output: the in-flight one never committed.
    let first = storage.load(complete[0]).await.unwrap();
    assert_eq!(
        store.sorted_rows(),
        expected_rows_at(&source_positions(&first), 5)
    );
    assert!(
        job.stop().await.is_err(),
        "a cancelled job cannot be stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_ignores_an_incomplete_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoint 3 writes every state, then "crashes" before its metadata.
    let storage = storage_failing_metadata_of(dir.path(), 3);
    let p = Pipeline::fault_free(2, 3_000, 4, 11);
    let mut config = job_config("restore", storage.clone(), 10);
    config.restart = RestartStrategy::ExponentialBackoff {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
        multiplier: 2.0,
        attempts_max: 3,
    };
    let metrics = run_to_end(pipeline_graph(&p), config).await;
    assert_eq!(storage.metadata_writes_failed.load(Ordering::SeqCst), 1);
    assert_eq!(metrics.restarts, 1);
    let restored = p.restored_from.lock().unwrap().clone();
    // Attempt 0 starts fresh (0); attempt 1 restores checkpoint 2, not the incomplete 3.
    assert_eq!(restored, vec![0, 0, 2, 2], "restored from {restored:?}");
    assert_eq!(p.store.sorted_rows(), expected_rows(2, 3_000, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let p = Pipeline {
        // More failures than the strategy allows restarts.
        failures: Failures::new((0..10).map(|i| (0, i)).collect()),
        ..Pipeline::fault_free(1, 1_000, 3, 1)
    };
    let config = restarting_twice_at_most("give-up", storage, 10);
    let (job, state) = run_until_it_ends(pipeline_graph(&p), config, Duration::from_secs(30)).await;
    let JobState::Failed(failure) = state else {
        panic!("expected failed, got {state:?}")
    };
    let reason = &failure.message;
    assert!(
        reason.contains("after 3 attempts") && reason.contains("injected failure"),
        "{reason}"
    );
    // The operator raised it as its user's to fix (Error::operator), and the job says so.
    assert_eq!(failure.cause, silt_engine::Cause::User);
    assert_eq!(job.metrics().restarts, 2);
}

/// Regression: the restart count never reset, so a long-lived job (a tiering job at 1 s
/// freshness) that failed now and then over days ran out of restarts for good. Failures
/// separated by completed checkpoints count from the last progress, not from the job's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_count_from_the_last_completed_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let p = Pipeline {
        // Twice as many failures as the strategy allows in a row, each after progress.
        failures: Failures::new(vec![(0, 2_000), (0, 4_000), (0, 6_000), (0, 8_000)]),
        ..Pipeline::fault_free(1, 10_000, 3, 7)
    };
    let config = restarting_twice_at_most("recovers", storage, 2);
    let (job, state) = run_until_it_ends(pipeline_graph(&p), config, Duration::from_secs(60)).await;
    assert_eq!(state, JobState::Finished, "{state:?}");
    let metrics = job.metrics();
    assert_eq!(metrics.restarts, 4);
    assert!(
        metrics.checkpoints_completed >= 4,
        "{}",
        metrics.checkpoints_completed
    );
    assert!(metrics.checkpoints.len() <= silt_engine::CHECKPOINT_HISTORY_MAX);
}

#[test]
fn restart_delays_back_off_and_stop() {
    let s = RestartStrategy::ExponentialBackoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(350),
        multiplier: 2.0,
        attempts_max: 4,
    };
    let delays: Vec<_> = (1..=5).map(|n| s.delay(n).map(|d| d.as_millis())).collect();
    assert_eq!(
        delays,
        vec![Some(100), Some(200), Some(350), Some(350), None]
    );
    assert_eq!(RestartStrategy::None.delay(1), None);
}

/// A [`SeqSource`] whose `records` are a backlog: once they are read it says
/// [`SourcePoll::BacklogRead`] (when `says` is set) and then idles, as an unbounded source does.
struct BacklogSource {
    inner: SeqSource,
    says: bool,
}

#[async_trait]
impl silt_engine::Source for BacklogSource {
    async fn open(&mut self, ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        self.inner.open(ctx, restored).await
    }

    async fn poll_next(&mut self) -> Result<SourcePoll> {
        Ok(match self.inner.poll_next().await? {
            SourcePoll::End if std::mem::take(&mut self.says) => SourcePoll::BacklogRead,
            SourcePoll::End => SourcePoll::Idle(Duration::from_millis(5)),
            other => other,
        })
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Bytes> {
        self.inner.snapshot(checkpoint_id).await
    }
}

/// Reads a 2-subtask backlog of `records` each into a transactional sink, with checkpoints
/// a minute apart; the sources say they read their backlog when `says`. Returns the job.
fn backlog_job(
    records: u64,
    says: bool,
    store: Arc<CommitStore>,
) -> (JobGraph, JobConfig, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir.path()));
    let mut g = JobGraph::new();
    let src = g.add_source(
        "source",
        2,
        move |ctx: &TaskContext| -> Result<Box<dyn silt_engine::Source>> {
            let mut inner = SeqSource::new(ctx, 5, records, 4, Failures::new(vec![]));
            inner.pause = Duration::ZERO;
            Ok(Box::new(BacklogSource { inner, says }))
        },
    );
    let count = g.add_operator("count", 2, |_: &TaskContext| -> Result<Box<dyn Operator>> {
        Ok(Box::new(KeyedCount::default()))
    });
    let sink = g.add_sink("sink", 1, move |ctx: &TaskContext| {
        TxSink::new(ctx, store.clone())
    });
    g.connect(src, count, hash_key());
    g.connect(count, sink, hash_key());
    (g, job_config("backlog", storage, 60_000), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_backlog_is_checkpointed_without_waiting_out_the_interval() {
    let store = Arc::new(CommitStore::default());
    let (g, config, _dir) = backlog_job(2_000, true, store.clone());
    let job = JobManager::new().submit(g, config).unwrap();
    let started = Instant::now();
    wait_until("the backlog is committed", || {
        store.rows.lock().unwrap().len() == 4_000
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "committed only after {:?}",
        started.elapsed()
    );
    assert_eq!(store.sorted_rows(), expected_rows(2, 2_000, 4));
    // One early checkpoint per source that said it, at most; then the interval rules again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let completed = job.metrics().checkpoints_completed;
    assert!(
        (1..=2).contains(&completed),
        "{completed} checkpoints completed"
    );
    job.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_backlog_read_the_interval_rules() {
    let store = Arc::new(CommitStore::default());
    let (g, config, _dir) = backlog_job(2_000, false, store.clone());
    let job = JobManager::new().submit(g, config).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(job.metrics().checkpoints_completed, 0);
    assert!(
        store.rows.lock().unwrap().is_empty(),
        "nothing is committed before a checkpoint"
    );
    job.cancel().await;
}
