//! The contracts between the runtime and user code: sources, operators, sinks (operators
//! without outputs; every [`Sink`] is an [`Operator`]) and the factories that build one
//! instance per subtask.
//!
//! Life of an instance within one attempt of a job:
//! `open(restored state)` → any number of `process` / `poll_next` calls interleaved with
//! `snapshot` at each checkpoint barrier and `notify_checkpoint_complete` once that checkpoint
//! is durable → `finish` at end of input (bounded sources only). A failure anywhere ends the
//! attempt; the next attempt builds fresh instances and opens them with the state of the latest
//! complete checkpoint.
//!
//! State is bytes that the operator chooses; the engine never looks inside.

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;
use crate::output::Output;

/// Identifies one parallel instance of a vertex and the run it belongs to.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub job_name: String,
    pub vertex_name: String,
    pub subtask_index: u32,
    pub parallelism: u32,
    /// 0 for the first run of the job, +1 for every restart.
    pub attempt: u32,
}

impl TaskContext {
    /// The context of an operator run on its own rather than in a job (a query reading the
    /// hot tail, verify reading a changelog): the only subtask, on its first attempt.
    pub fn single(job_name: impl Into<String>, vertex_name: impl Into<String>) -> Self {
        TaskContext {
            job_name: job_name.into(),
            vertex_name: vertex_name.into(),
            subtask_index: 0,
            parallelism: 1,
            attempt: 0,
        }
    }
}

/// State handed to `open`: every subtask's snapshot of this vertex from the checkpoint being
/// restored, indexed by the subtask that wrote it. When parallelism is unchanged a subtask
/// usually wants `own()`; an operator that can be rescaled (a source owning buckets, say)
/// reads all of them and keeps what it now owns.
#[derive(Debug, Clone, Default)]
pub struct RestoredState {
    pub checkpoint_id: Option<u64>,
    pub subtask_states: Vec<Option<Bytes>>,
    pub subtask_index: u32,
}

impl RestoredState {
    /// The state this subtask wrote, when it wrote one.
    pub fn own(&self) -> Option<&Bytes> {
        self.subtask_states
            .get(self.subtask_index as usize)
            .and_then(|s| s.as_ref())
    }

    /// Every subtask's state (union list state), for rescalable operators.
    pub fn all(&self) -> impl Iterator<Item = &Bytes> {
        self.subtask_states.iter().flatten()
    }

    pub fn is_restored(&self) -> bool {
        self.checkpoint_id.is_some()
    }
}

/// What a source yields when polled.
#[derive(Debug)]
pub enum SourcePoll {
    Batch(RecordBatch),
    /// Nothing right now; the runtime waits up to this long (or until a control message) and
    /// polls again. Sources must not block inside `poll_next` for longer than a poll interval,
    /// or checkpoint barriers are delayed.
    Idle(Duration),
    /// The backlog the source found when it opened is read and nothing is ready right now:
    /// the runtime asks for a checkpoint at once, so what the backlog held is committed
    /// without waiting out the interval (as a Fluss tiering round commits when it reaches the
    /// offsets it started for), then polls again as after `Idle(Duration::ZERO)`. A source
    /// says it at most once per open; an unbounded source with no backlog says nothing.
    BacklogRead,
    /// The input is exhausted (bounded sources only).
    End,
}

/// A parallel source. One instance per subtask.
///
/// Contract: the state returned by `snapshot(n)` must let a restored instance continue
/// exactly after the last batch it returned before `snapshot(n)` was called; that is what
/// makes checkpoints consistent.
#[async_trait]
pub trait Source: Send {
    async fn open(&mut self, ctx: &TaskContext, restored: RestoredState) -> Result<()>;
    async fn poll_next(&mut self) -> Result<SourcePoll>;
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Bytes>;
    async fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
}

/// A parallel operator with one or more inputs. One instance per subtask. An operator that
/// emits nothing is better written as a [`Sink`].
///
/// Contract: `snapshot(n)` is called once every input has delivered barrier `n` and before the
/// barrier is forwarded, so the state covers exactly the batches before the barrier. Batches
/// emitted from `snapshot` (a writer's committables, say) travel ahead of the barrier.
/// `notify_checkpoint_complete(n)` is called only after checkpoint `n` is durable; a
/// transactional sink makes output visible there and nowhere else.
#[async_trait]
pub trait Operator: Send {
    async fn open(&mut self, _ctx: &TaskContext, _restored: RestoredState) -> Result<()> {
        Ok(())
    }
    /// `input` is the index of the incoming edge, in the order the edges were added.
    async fn process(&mut self, input: usize, batch: RecordBatch, out: &mut Output) -> Result<()>;
    async fn snapshot(&mut self, _checkpoint_id: u64, _out: &mut Output) -> Result<Bytes> {
        Ok(Bytes::new())
    }
    async fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
    /// End of input on every input edge: flush what is buffered. Not called when the job
    /// is stopped with a final checkpoint.
    async fn finish(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }
}

/// The end of a dataflow: an operator that emits nothing, after Flink's `SinkFunction`. Every
/// sink is an [`Operator`] (see the impl below), so a graph adds it as one and the runtime
/// drives it alike: the same calls, in the same order, with the output left out.
///
/// Contract: `snapshot(n)` is called once every input has delivered barrier `n`, so the state
/// covers exactly the batches written before it; `notify_checkpoint_complete(n)` is called
/// only after checkpoint `n` is durable. A transactional sink keeps what it wrote since the
/// last barrier as a pending transaction in its state and makes it visible at notify-complete,
/// nowhere else; `open` gets the pending transactions of the restored checkpoint, which is
/// complete, so it may commit them at once. Every input is written alike.
#[async_trait]
pub trait Sink: Send {
    async fn open(&mut self, _ctx: &TaskContext, _restored: RestoredState) -> Result<()> {
        Ok(())
    }
    async fn write(&mut self, batch: RecordBatch) -> Result<()>;
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Bytes> {
        Ok(Bytes::new())
    }
    async fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
    /// End of input on every input edge: flush what is buffered. Not called when the job
    /// is stopped with a final checkpoint.
    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A sink runs as an operator whose output is never used: each call passes straight through.
#[async_trait]
impl<S: Sink> Operator for S {
    async fn open(&mut self, ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        Sink::open(self, ctx, restored).await
    }
    async fn process(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut Output,
    ) -> Result<()> {
        self.write(batch).await
    }
    async fn snapshot(&mut self, checkpoint_id: u64, _out: &mut Output) -> Result<Bytes> {
        Sink::snapshot(self, checkpoint_id).await
    }
    async fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        Sink::notify_checkpoint_complete(self, checkpoint_id).await
    }
    async fn finish(&mut self, _out: &mut Output) -> Result<()> {
        Sink::finish(self).await
    }
}

/// Builds one source instance per subtask and attempt.
pub trait SourceFactory: Send + Sync {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Source>>;
}

/// Builds one operator instance per subtask and attempt.
pub trait OperatorFactory: Send + Sync {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>>;
}

impl<F> SourceFactory for F
where
    F: Fn(&TaskContext) -> Result<Box<dyn Source>> + Send + Sync,
{
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Source>> {
        self(ctx)
    }
}

impl<F> OperatorFactory for F
where
    F: Fn(&TaskContext) -> Result<Box<dyn Operator>> + Send + Sync,
{
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        self(ctx)
    }
}
