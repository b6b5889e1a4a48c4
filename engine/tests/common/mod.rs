//! Test sources, operators and sinks for the runtime tests: a seeded sequence source that can
//! fail on purpose, a keyed running count, and a transactional sink whose output becomes
//! visible only on notify-complete.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_engine::{
    Error, Operator, Output, RestoredState, Result, Sink, Source, SourcePoll, TaskContext,
};

pub fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
    ]))
}

pub fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
        Field::new("count", DataType::Int64, false),
    ]))
}

pub fn column(batch: &RecordBatch, i: usize) -> &Int64Array {
    batch
        .column(i)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("int64 column")
}

/// Failure points: (subtask, position). Each fires once, the first time the source reaches it.
pub type Failures = silt_testkit::faults::Failures<u32>;

/// Emits `(key, value)` rows `value = 0..records`, with `key = subtask * keys + value % keys`,
/// in batches of seeded random size. State: the next value (u64).
pub struct SeqSource {
    pub subtask: u32,
    pub records: u64,
    pub keys: u64,
    pub batch_rows_max: u64,
    pub position: u64,
    pub rng: SmallRng,
    pub failures: Arc<Failures>,
    /// Sleep after every batch, to let checkpoints interleave with data.
    pub pause: Duration,
    /// Runs forever when false (the count wraps nothing: positions keep growing).
    pub bounded: bool,
    /// Records the checkpoint id this instance was restored from (or 0), per attempt.
    pub restored_from: Arc<Mutex<Vec<u64>>>,
}

impl SeqSource {
    pub fn new(
        ctx: &TaskContext,
        seed: u64,
        records: u64,
        keys: u64,
        failures: Arc<Failures>,
    ) -> Self {
        SeqSource {
            subtask: ctx.subtask_index,
            records,
            keys,
            batch_rows_max: 50,
            position: 0,
            rng: SmallRng::seed_from_u64(
                seed ^ ((ctx.subtask_index as u64) << 32) ^ ctx.attempt as u64,
            ),
            failures,
            pause: Duration::from_micros(200),
            bounded: true,
            restored_from: Arc::default(),
        }
    }
}

#[async_trait]
impl Source for SeqSource {
    async fn open(&mut self, _ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        self.restored_from
            .lock()
            .unwrap()
            .push(restored.checkpoint_id.unwrap_or(0));
        if let Some(mut state) = restored.own().cloned() {
            self.position = state.get_u64();
        }
        Ok(())
    }

    async fn poll_next(&mut self) -> Result<SourcePoll> {
        if self.bounded && self.position >= self.records {
            return Ok(SourcePoll::End);
        }
        let mut rows = self.rng.random_range(1..=self.batch_rows_max);
        if self.bounded {
            rows = rows.min(self.records - self.position);
        }
        let (from, to) = (self.position, self.position + rows);
        if self.failures.take(self.subtask, from, to) {
            return Err(Error::operator(format!(
                "injected failure in [{from}, {to})"
            )));
        }
        let base = self.subtask as i64 * self.keys as i64;
        let keys = Int64Array::from_iter_values((from..to).map(|v| base + (v % self.keys) as i64));
        let values = Int64Array::from_iter_values((from..to).map(|v| v as i64));
        self.position = to;
        if !self.pause.is_zero() {
            tokio::time::sleep(self.pause).await;
        }
        let batch = RecordBatch::try_new(input_schema(), vec![Arc::new(keys), Arc::new(values)])?;
        Ok(SourcePoll::Batch(batch))
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Bytes> {
        let mut b = BytesMut::new();
        b.put_u64(self.position);
        Ok(b.freeze())
    }
}

/// Running count per key: emits `(key, value, count so far)` for every row.
#[derive(Default)]
pub struct KeyedCount {
    counts: HashMap<i64, i64>,
}

#[async_trait]
impl Operator for KeyedCount {
    async fn open(&mut self, _ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        if let Some(mut state) = restored.own().cloned() {
            while state.has_remaining() {
                let (k, c) = (state.get_i64(), state.get_i64());
                self.counts.insert(k, c);
            }
        }
        Ok(())
    }

    async fn process(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let (keys, values) = (column(&batch, 0), column(&batch, 1));
        let counts: Int64Array = keys
            .iter()
            .map(|k| {
                let c = self.counts.entry(k.unwrap()).or_insert(0);
                *c += 1;
                Some(*c)
            })
            .collect();
        let out_batch = RecordBatch::try_new(
            output_schema(),
            vec![
                Arc::new(keys.clone()),
                Arc::new(values.clone()),
                Arc::new(counts),
            ],
        )?;
        out.emit(out_batch).await
    }

    async fn snapshot(&mut self, _id: u64, _out: &mut Output) -> Result<Bytes> {
        let mut b = BytesMut::new();
        for (k, c) in &self.counts {
            b.put_i64(*k);
            b.put_i64(*c);
        }
        Ok(b.freeze())
    }
}

pub type Row = (i64, i64, i64);

/// What transactional sinks made visible, across all attempts of a job.
#[derive(Default)]
pub struct CommitStore {
    pub rows: Mutex<Vec<Row>>,
    committed: Mutex<HashSet<(u32, u64)>>,
}

impl CommitStore {
    /// Idempotent per (subtask, checkpoint), as a real transactional store is.
    fn commit(&self, subtask: u32, checkpoint_id: u64, rows: &[Row]) {
        if self
            .committed
            .lock()
            .unwrap()
            .insert((subtask, checkpoint_id))
        {
            self.rows.lock().unwrap().extend_from_slice(rows);
        }
    }

    pub fn sorted_rows(&self) -> Vec<Row> {
        let mut rows = self.rows.lock().unwrap().clone();
        rows.sort();
        rows
    }
}

/// Buffers rows; at a barrier the buffer becomes a pending transaction (kept in state); on
/// notify-complete every pending transaction up to that checkpoint is committed.
pub struct TxSink {
    pub subtask: u32,
    pub buffer: Vec<Row>,
    pub pending: Vec<(u64, Vec<Row>)>,
    pub store: Arc<CommitStore>,
    /// For the negative control: commit at the barrier instead of on notify (wrong!).
    pub commit_at_snapshot: bool,
    pub delay_per_batch: Duration,
    /// Time a snapshot takes (keeps a checkpoint in flight).
    pub snapshot_delay: Duration,
    /// Counts snapshots started, so a test can act while one is in flight.
    pub snapshots_started: Arc<AtomicU64>,
}

impl TxSink {
    pub fn new(ctx: &TaskContext, store: Arc<CommitStore>) -> Self {
        TxSink {
            subtask: ctx.subtask_index,
            buffer: Vec::new(),
            pending: Vec::new(),
            store,
            commit_at_snapshot: false,
            delay_per_batch: Duration::ZERO,
            snapshot_delay: Duration::ZERO,
            snapshots_started: Arc::default(),
        }
    }

    fn commit_up_to(&mut self, checkpoint_id: u64) {
        let (done, keep): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|(id, _)| *id <= checkpoint_id);
        for (id, rows) in done {
            self.store.commit(self.subtask, id, &rows);
        }
        self.pending = keep;
    }
}

#[async_trait]
impl Sink for TxSink {
    async fn open(&mut self, _ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        // Pending transactions in a restored state belong to a complete checkpoint: commit them.
        if let Some(mut state) = restored.own().cloned() {
            while state.has_remaining() {
                let id = state.get_u64();
                let n = state.get_u64();
                let rows = (0..n)
                    .map(|_| (state.get_i64(), state.get_i64(), state.get_i64()))
                    .collect();
                self.pending.push((id, rows));
            }
        }
        self.commit_up_to(u64::MAX);
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let (k, v, c) = (column(&batch, 0), column(&batch, 1), column(&batch, 2));
        for i in 0..batch.num_rows() {
            self.buffer.push((k.value(i), v.value(i), c.value(i)));
        }
        if !self.delay_per_batch.is_zero() {
            tokio::time::sleep(self.delay_per_batch).await;
        }
        Ok(())
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Bytes> {
        self.snapshots_started.fetch_add(1, Ordering::SeqCst);
        if !self.snapshot_delay.is_zero() {
            tokio::time::sleep(self.snapshot_delay).await;
        }
        let rows = std::mem::take(&mut self.buffer);
        self.pending.push((checkpoint_id, rows));
        if self.commit_at_snapshot {
            self.commit_up_to(checkpoint_id);
        }
        let mut b = BytesMut::new();
        for (id, rows) in &self.pending {
            b.put_u64(*id);
            b.put_u64(rows.len() as u64);
            for &(k, v, c) in rows {
                b.put_i64(k);
                b.put_i64(v);
                b.put_i64(c);
            }
        }
        Ok(b.freeze())
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.commit_up_to(checkpoint_id);
        Ok(())
    }
}

pub use silt_testkit::faults::FaultyStorage;

/// The output a failure-free run must make visible: every `(key, value, count)`.
pub fn expected_rows(sources: u32, records: u64, keys: u64) -> Vec<Row> {
    expected_rows_at(&vec![records; sources as usize], keys)
}

/// The same, for sources that stopped at different positions.
pub fn expected_rows_at(positions: &[u64], keys: u64) -> Vec<Row> {
    let mut rows: Vec<Row> = positions
        .iter()
        .enumerate()
        .flat_map(|(s, &records)| {
            (0..records).map(move |v| {
                let key = s as i64 * keys as i64 + (v % keys) as i64;
                (key, v as i64, (v / keys) as i64 + 1)
            })
        })
        .collect();
    rows.sort();
    rows
}
