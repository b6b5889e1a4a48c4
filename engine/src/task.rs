//! The two kinds of subtask loops: a source task polls its source and injects barriers when
//! the coordinator asks; an operator task reads its input gate, aligns barriers across its
//! input channels, snapshots, and forwards them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::channel::{Barrier, InputGate, Message};
use crate::error::{Error, Result};
use crate::metrics::VertexCounters;
use crate::operator::{Operator, RestoredState, Source, SourcePoll, TaskContext};
use crate::output::Output;

/// Coordinator → task.
#[derive(Debug)]
pub(crate) enum Control {
    /// Sources only: snapshot now and emit this barrier.
    Trigger(Barrier),
    /// Checkpoint `n` (and so every checkpoint before it) is durable.
    Complete(u64),
}

/// Task → coordinator.
#[derive(Debug)]
pub(crate) enum TaskEvent {
    Ack {
        checkpoint_id: u64,
        vertex: usize,
        subtask: u32,
        state: Bytes,
        snapshot_time: Duration,
    },
    SourceEnded,
    /// A source read the backlog it found at open: a checkpoint is due now.
    BacklogRead,
}

/// What every task carries besides its user code.
pub(crate) struct TaskEnv {
    pub ctx: TaskContext,
    pub vertex: usize,
    pub restored: RestoredState,
    pub output: Output,
    pub control: mpsc::Receiver<Control>,
    pub events: mpsc::Sender<TaskEvent>,
    pub counters: Arc<VertexCounters>,
}

impl TaskEnv {
    async fn ack(&self, checkpoint_id: u64, state: Bytes, snapshot_time: Duration) -> Result<()> {
        self.events
            .send(TaskEvent::Ack {
                checkpoint_id,
                vertex: self.vertex,
                subtask: self.ctx.subtask_index,
                state,
                snapshot_time,
            })
            .await
            .map_err(|_| coordinator_gone())
    }
}

fn coordinator_gone() -> Error {
    Error::Internal("the checkpoint coordinator is gone while a task still runs".into())
}

/// Attaches the task's identity to an error raised by an operator's code; an engine error
/// becomes the source, keeping its cause.
fn in_task(ctx: &TaskContext) -> impl Fn(Error) -> Error + use<> {
    let ctx = ctx.clone();
    move |e| match e {
        Error::Operator { cause, source, .. } => Error::Operator {
            vertex: ctx.vertex_name.clone(),
            subtask: ctx.subtask_index,
            cause,
            source,
        },
        other => Error::Operator {
            vertex: ctx.vertex_name.clone(),
            subtask: ctx.subtask_index,
            cause: other.cause(),
            source: Box::new(other),
        },
    }
}

pub(crate) async fn run_source(mut source: Box<dyn Source>, mut env: TaskEnv) -> Result<()> {
    let err = in_task(&env.ctx);
    source
        .open(&env.ctx, env.restored.clone())
        .await
        .map_err(&err)?;
    let mut ended = false;
    let mut final_checkpoint: Option<u64> = None;
    loop {
        // Control first: a barrier must not wait behind more data than necessary. Once the
        // input has ended or the final barrier is out, only control messages matter.
        let control = if ended || final_checkpoint.is_some() {
            Some(env.control.recv().await.ok_or_else(coordinator_gone)?)
        } else {
            env.control.try_recv().ok()
        };
        if let Some(control) = control {
            if on_source_control(&mut source, &mut env, control, &mut final_checkpoint).await? {
                return Ok(());
            }
            continue;
        }
        match source.poll_next().await.map_err(&err)? {
            SourcePoll::Batch(batch) => {
                env.counters
                    .record_in(batch.num_rows(), batch.get_array_memory_size());
                env.output.emit(batch).await?;
            }
            SourcePoll::BacklogRead => {
                env.events
                    .send(TaskEvent::BacklogRead)
                    .await
                    .map_err(|_| coordinator_gone())?;
            }
            SourcePoll::Idle(wait) => {
                let wait = wait.min(Duration::from_secs(1));
                if let Ok(Some(control)) = tokio::time::timeout(wait, env.control.recv()).await
                    && on_source_control(&mut source, &mut env, control, &mut final_checkpoint)
                        .await?
                {
                    return Ok(());
                }
            }
            SourcePoll::End => {
                env.output.broadcast_end_of_data().await?;
                env.events
                    .send(TaskEvent::SourceEnded)
                    .await
                    .map_err(|_| coordinator_gone())?;
                ended = true;
            }
        }
    }
}

/// Handles one control message of a source task; true when the task is done (its final
/// checkpoint is complete).
async fn on_source_control(
    source: &mut Box<dyn Source>,
    env: &mut TaskEnv,
    control: Control,
    final_checkpoint: &mut Option<u64>,
) -> Result<bool> {
    let err = in_task(&env.ctx);
    match control {
        Control::Trigger(barrier) => {
            let started = Instant::now();
            let state = source.snapshot(barrier.checkpoint_id).await.map_err(&err)?;
            env.output.broadcast_barrier(barrier).await?;
            env.ack(barrier.checkpoint_id, state, started.elapsed())
                .await?;
            if barrier.is_final {
                *final_checkpoint = Some(barrier.checkpoint_id);
            }
            Ok(false)
        }
        Control::Complete(id) => {
            source.notify_checkpoint_complete(id).await.map_err(&err)?;
            Ok(final_checkpoint.is_some_and(|f| id >= f))
        }
    }
}

/// Barrier alignment of one operator subtask: which channels delivered the pending barrier.
struct Alignment {
    barrier: Barrier,
    arrived: Vec<bool>,
    started: Instant,
}

/// Records that `barrier` arrived on `channel` and holds that channel until the barrier has
/// arrived everywhere, so no record after the barrier can reach the snapshot. Answers when
/// the alignment started once the barrier is in from every channel.
fn align(
    aligning: &mut Option<Alignment>,
    gate: &mut InputGate,
    channel: usize,
    barrier: Barrier,
) -> Result<Option<Instant>> {
    let channels = gate.len();
    let alignment = aligning.get_or_insert_with(|| Alignment {
        barrier,
        arrived: vec![false; channels],
        started: Instant::now(),
    });
    if alignment.barrier != barrier || alignment.arrived[channel] {
        return Err(Error::Internal(format!(
            "barrier {barrier:?} on channel {channel} while aligning {:?}",
            alignment.barrier
        )));
    }
    alignment.arrived[channel] = true;
    gate.block(channel);
    if !alignment.arrived.iter().all(|&a| a) {
        return Ok(None);
    }
    let started = alignment.started;
    *aligning = None;
    Ok(Some(started))
}

pub(crate) async fn run_operator(
    mut operator: Box<dyn Operator>,
    mut env: TaskEnv,
    mut gate: InputGate,
) -> Result<()> {
    let err = in_task(&env.ctx);
    operator
        .open(&env.ctx, env.restored.clone())
        .await
        .map_err(&err)?;
    let channels = gate.len();
    let mut aligning: Option<Alignment> = None;
    let mut ended_channels = vec![false; channels];
    let mut final_checkpoint: Option<u64> = None;
    loop {
        tokio::select! {
            biased;
            control = env.control.recv() => {
                match control.ok_or_else(coordinator_gone)? {
                    Control::Complete(id) => {
                        operator.notify_checkpoint_complete(id).await.map_err(&err)?;
                        if final_checkpoint.is_some_and(|f| id >= f) {
                            return Ok(());
                        }
                    }
                    Control::Trigger(_) => {
                        return Err(Error::Internal("a trigger reached a non-source task".into()));
                    }
                }
            }
            next = gate.next(), if final_checkpoint.is_none() => {
                let Some((channel, message)) = next else {
                    return Err(err(Error::operator("an input ended without a final barrier (an upstream task failed)")));
                };
                match message {
                    Message::Data(batch, _permit) => {
                        env.counters.record_in(batch.num_rows(), batch.get_array_memory_size());
                        let input = gate.input_of(channel);
                        operator.process(input, batch, &mut env.output).await.map_err(&err)?;
                    }
                    Message::EndOfData => {
                        ended_channels[channel] = true;
                        if ended_channels.iter().all(|&e| e) {
                            operator.finish(&mut env.output).await.map_err(&err)?;
                            env.output.broadcast_end_of_data().await?;
                        }
                    }
                    Message::Barrier(barrier) => {
                        let aligned = align(&mut aligning, &mut gate, channel, barrier)?;
                        if let Some(started) = aligned {
                            let state = operator.snapshot(barrier.checkpoint_id, &mut env.output).await.map_err(&err)?;
                            env.output.broadcast_barrier(barrier).await?;
                            env.ack(barrier.checkpoint_id, state, started.elapsed()).await?;
                            if barrier.is_final {
                                final_checkpoint = Some(barrier.checkpoint_id);
                            } else {
                                gate.unblock_all();
                            }
                        }
                    }
                }
            }
        }
    }
}
